"""The Python package's targets, measured in one run (docs/MEASUREMENTS.md):

- `memplan.plan` on a graph against the same planning in-process in Rust (the facade's
  `plan_timing` example: what `memplan plan` does after loading), medians of RUNS;
- `memplan.solve` on a million buffers from NumPy against `memplan solve` on the same
  instance as CSV, whose own summary gives the solver's time without the CSV parsing;
- `import memplan`, in fresh interpreters, median of 15.

Build both sides in release first (`cargo build --release -p memplan-cli -p memplan --example
plan_timing`; `pip install ./crates/python` or `maturin build --release`), then from the
repository root: `python crates/python/bench/timing.py [GRAPH] [RUNS]`.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import memplan

REPO = Path(__file__).resolve().parents[3]
RELEASE = REPO / "target" / "release"


def plan_timing(graph: Path, runs: int, rounds: int = 12) -> None:
    g = memplan.load(graph)
    memplan.plan(g)  # warm up
    py, rust = [], []
    for _ in range(rounds):
        # Alternate the two sides, so that the machine's load falls on both alike.
        out = subprocess.run(
            [str(RELEASE / "examples" / "plan_timing"), str(graph), str(runs)],
            capture_output=True, text=True, check=True,
        ).stdout
        rust.append(float(re.search(r"median ([0-9.]+) ms", out).group(1)))
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            p = memplan.plan(g)
            times.append((time.perf_counter() - t) * 1e3)
            arena = p.arena_bytes
            del p  # dropping the plan is outside the timed call, as in Rust
        py.append(statistics.median(times))
    py_ms, rust_ms = statistics.median(py), statistics.median(rust)
    print(f"plan {graph.name}: {rounds} rounds of {runs} runs each side, alternating; median of the "
          f"rounds' medians: python {py_ms:.1f} ms, rust in-process {rust_ms:.1f} ms, ratio "
          f"{py_ms / rust_ms:.3f}; best round: python {min(py):.1f} ms, rust {min(rust):.1f} ms, ratio "
          f"{min(py) / min(rust):.3f}; arena {arena}")


def solve_timing(n: int, seed: int = 0, rounds: int = 3, span: int = 50) -> None:
    """A million buffers over a million steps, each live for 1 to `span` steps."""
    rng = np.random.default_rng(seed)
    lower = rng.integers(0, n, n)
    upper = lower + rng.integers(1, span, n)
    size = rng.integers(64, 1 << 16, n)
    with tempfile.TemporaryDirectory() as d:
        csv = Path(d) / "p.csv"
        with open(csv, "w") as f:
            f.write("id,lower,upper,size\n")
            for i in range(n):
                f.write(f"{i},{lower[i]},{upper[i]},{size[i]}\n")
        for strategy in ("greedy-size", "auto"):
            py, cli = [], []
            for _ in range(rounds):
                out = subprocess.run(
                    [str(RELEASE / "memplan"), "solve", str(csv), "--strategy", strategy, "-o", str(Path(d) / "s.csv")],
                    capture_output=True, text=True, check=True,
                ).stderr
                cli.append(float(re.search(r", ([0-9.]+) ms,", out).group(1)))
                t = time.perf_counter()
                s = memplan.solve(lower, upper, size, strategy=strategy)
                py.append((time.perf_counter() - t) * 1e3)
            sol = np.loadtxt(Path(d) / "s.csv", delimiter=",", skiprows=1, usecols=4, dtype=np.uint64)
            same = bool((sol == s.offsets).all())
            py_ms, cli_ms = statistics.median(py), statistics.median(cli)
            print(f"solve {n} buffers, {strategy}: python median {py_ms:.0f} ms ({', '.join(f'{x:.0f}' for x in py)}), "
                  f"cli solver median {cli_ms:.0f} ms ({', '.join(f'{x:.0f}' for x in cli)}; without CSV parsing), "
                  f"ratio {py_ms / cli_ms:.3f}; arena {s.arena_bytes}, bound {s.lower_bound_bytes}, same offsets: {same}")


def import_timing() -> None:
    code = "import time; t = time.perf_counter(); import memplan; print(time.perf_counter() - t)"
    times = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
             for _ in range(15)]
    print(f"import memplan: median {statistics.median(times) * 1e3:.1f} ms (min {min(times) * 1e3:.1f}, max {max(times) * 1e3:.1f})")


if __name__ == "__main__":
    graph = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "testdata" / "graphs" / "onnx" / "sd15_unet_b1.onnx"
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 9
    what = sys.argv[3] if len(sys.argv) > 3 else "all"
    if what in ("all", "import"):
        import_timing()
    if what in ("all", "plan"):
        plan_timing(graph, runs)
    if what in ("all", "solve"):
        solve_timing(1_000_000)
