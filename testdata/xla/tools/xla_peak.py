#!/usr/bin/env python3
"""XLA's own peak of live bytes on its schedule, from the dump alone (no memplan code).

usage: xla_peak.py DUMP_DIR [--align 64]

Reads the scheduled module, its buffer assignment (value sizes) and HloLiveRange (each value's
[start, end] in XLA's instruction sequence, inclusive). Counts every value an instruction
defines, each rounded up to the alignment, except what memplan's comparison leaves to the
caller or outside the arena: parameters (--caller-inputs), the ROOT's array leaves
(--caller-outputs), constants, and tuple index tables (the converter does not model them). No
value shares bytes with another (XLA's in-place reuse is not applied: the converted graphs
are made with --inplace none). Prints JSON: the peak and the time it is reached.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import xla_buffers as xb  # noqa: E402


def peak(dump_dir, align):
    instrs, allocs, ranges, tmax = xb.load(dump_dir)
    by_name = {i.name: i for i in instrs}
    vals = xb.dataflow(instrs)
    root = next(i for i in instrs if i.is_root)
    outputs = set(vals[root.name].values())
    sizes = {}
    for a in allocs:
        for key, size, _off in a.values:
            sizes[key] = size
    delta = [0] * (tmax + 2)
    counted = 0
    for key, (start, end) in ranges.items():
        name, path = key
        ins = by_name.get(name)
        if ins is None or ins.opcode in ("parameter", "constant") or key in outputs:
            continue
        if isinstance(xb.subshape(ins.shape, path), list):
            continue  # a tuple's index table
        size = sizes.get(key)
        if size is None:
            size = xb.subshape(ins.shape, path).nbytes
        size = (size + align - 1) // align * align
        delta[start] += size
        delta[end + 1] -= size
        counted += 1
    best, at, live = 0, 0, 0
    for t, d in enumerate(delta):
        live += d
        if live > best:
            best, at = live, t
    return {"peak_bytes": best, "peak_time": at, "values": counted, "times": tmax + 1}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dump_dir")
    ap.add_argument("--align", type=int, default=64)
    a = ap.parse_args()
    print(json.dumps(peak(a.dump_dir, a.align)))


if __name__ == "__main__":
    main()
