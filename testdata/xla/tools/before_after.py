#!/usr/bin/env python3
"""The before/after table of docs/MEASUREMENTS.md (run by hand).

usage: before_after.py MEMPLAN_BEFORE MEMPLAN_AFTER [GRAPHS_DIR] > table.md

For every graph of GRAPHS_DIR (default: ../graphs) in XLA's two orders, runs `memplan plan G
--schedule memory --caller-inputs --caller-outputs --align 64 --format json -q` with each
binary three times, alternating, and prints a markdown row: XLA's two peaks
(xla_peaks.csv), both arenas, the after binary's any-order bound and gap, the median wall
times and the order the after binary chose.
"""
import csv
import json
import os
import statistics
import subprocess
import sys
import time

MIB = 2 ** 20


def run(binary, graph):
    t = time.perf_counter()
    p = subprocess.run([binary, "plan", graph, "--schedule", "memory", "--caller-inputs",
                        "--caller-outputs", "--align", "64", "--format", "json", "-q"],
                       capture_output=True, text=True, check=True)
    return json.loads(p.stdout), time.perf_counter() - t


def main():
    before, after = sys.argv[1], sys.argv[2]
    here = os.path.dirname(os.path.abspath(__file__))
    gdir = sys.argv[3] if len(sys.argv) > 3 else os.path.join(here, "..", "graphs")
    rows = {r["graph"]: r for r in csv.DictReader(open(os.path.join(gdir, "xla_peaks.csv")))}
    print("| graph | nodes | XLA default | XLA mem-opt | memplan before | memplan after "
          "| any-order bound | gap | ms before | ms after | order (after) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    worst = 0.0
    for name in sorted(rows):
        r = rows[name]
        xd, xm = int(r["xla_default_peak_bytes"]), int(r["xla_memopt_peak_bytes"])
        for suffix in ("", "_xlamem"):
            graph = os.path.join(gdir, name + suffix + ".json")
            tb, ta = [], []
            for _ in range(3):
                db, t = run(before, graph)
                tb.append(t)
                da, t = run(after, graph)
                ta.append(t)
            arena, bound = da["arena_bytes"], da["stats"]["any_order_bound"]
            worst = max(worst, arena / min(xd, xm))
            order = da["stats"]["schedule_chosen"] + (" (exact)" if da["stats"]["exact"] else "")
            print(f"| {name + suffix} | {r['nodes']} | {xd / MIB:.2f} | {xm / MIB:.2f} "
                  f"| {db['arena_bytes'] / MIB:.2f} | {arena / MIB:.2f} | {bound / MIB:.2f} "
                  f"| {(arena / bound - 1) * 100:+.1f}% | {statistics.median(tb) * 1000:.0f} "
                  f"| {statistics.median(ta) * 1000:.0f} | {order} |")
    print(f"\nlargest after / XLA's best: {worst:.4f}")


if __name__ == "__main__":
    main()
