"""docs/PYTHON.md runs as written: each ```python block in order, in one namespace, from a
folder that sees the repository's testdata (sections 1 and 2 need PyTorch; without it only
the rest runs). The million-buffer packing runs at 20,000 buffers here, to stay quick."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from conftest import REPO

DOC = REPO / "docs" / "PYTHON.md"


def _blocks():
    """(section number, code) of every python block."""
    section = 0
    out = []
    text = DOC.read_text()
    for m in re.finditer(r"^## (\d+)\.|^```python\n(.*?)^```", text, flags=re.S | re.M):
        if m.group(1):
            section = int(m.group(1))
        elif m.group(2) is not None:
            out.append((section, m.group(2)))
    return out


def test_the_walkthrough_runs(tmp_path, monkeypatch) -> None:
    try:
        import onnxscript  # noqa: F401
        import torch  # noqa: F401

        with_torch = True
    except ImportError:
        with_torch = False
    pytest.importorskip("numpy")
    (tmp_path / "testdata").symlink_to(REPO / "testdata")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "walkthrough"}
    ran = 0
    for section, code in _blocks():
        if section in (1, 2) and not with_torch:
            continue
        code = code.replace("n = 1_000_000", "n = 20_000")
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(code, f"{DOC.name} section {section}", "exec"), namespace)
        ran += 1
    assert ran >= (9 if with_torch else 4)
    if with_torch:
        assert (tmp_path / "tinygpt.html").read_text().startswith("<!DOCTYPE html>")
        assert namespace["big"].module == "head"
    assert namespace["cap"].fits and namespace["fit"].value
