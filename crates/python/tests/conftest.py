"""Shared fixtures: the repository's test data, and the `memplan` command the equality tests
compare with (``$MEMPLAN_CLI``, else ``target/debug/memplan`` or ``target/release/memplan``
of this checkout; the equality tests skip when none is built)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import List, Optional

import pytest

REPO = Path(__file__).resolve().parents[3]
TESTDATA = REPO / "testdata"
JSON_GRAPHS = TESTDATA / "graphs" / "json"
ONNX_GRAPHS = TESTDATA / "graphs" / "onnx"
CONFIGS = TESTDATA / "configs"


def _cli() -> Optional[Path]:
    given = os.environ.get("MEMPLAN_CLI")
    candidates = [Path(given)] if given else []
    candidates += [REPO / "target" / "debug" / "memplan", REPO / "target" / "release" / "memplan"]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    return None


class Cli:
    """Runs the `memplan` command."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def run(self, *args: str, code: int = 0) -> bytes:
        out = subprocess.run(
            [str(self.path), "--quiet", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        assert out.returncode == code, (args, out.returncode, out.stderr.decode())
        return out.stdout

    def text(self, *args: str, code: int = 0) -> str:
        return self.run(*args, code=code).decode()

    def help_flags(self, command: str) -> List[str]:
        text = self.text(command, "--help")
        flags = []
        for line in text.splitlines():
            words = line.strip().split()
            if not words or not words[0].startswith("-"):
                continue
            for word in words[:2]:
                flag = word.rstrip(",")
                if flag.startswith("--") and len(flag) > 2 and flag not in flags:
                    flags.append(flag)
        return flags


@pytest.fixture(scope="session")
def cli() -> Cli:
    path = _cli()
    if path is None:
        pytest.skip("no memplan binary built (cargo build -p memplan-cli, or set MEMPLAN_CLI)")
    return Cli(path)
