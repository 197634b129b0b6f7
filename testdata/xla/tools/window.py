#!/usr/bin/env python3
"""A window of a memplan graph's nodes as a graph of its own (run by hand, never by tests).

usage: window.py GRAPH START END -o OUT.json
       window.py GRAPH --shrink MEMPLAN -o OUT.json

The nodes [START, END) in graph order, with every tensor they make or read: a tensor read in
the window but made before it becomes a graph input (weights stay weights), a tensor made in
the window and read after it (or an output of GRAPH) an output; the rest keep their kind.

--shrink looks for a small window on which MEMPLAN's `plan --schedule memory` arena is above
its arena in the graph's own order (`--caller-inputs --caller-outputs --align 64
--no-fold-weights`, as the XLA comparison plans): it cuts a quarter, then an eighth, ... from
either end while that stays so, and writes the last window that did.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hlo_to_memplan import write_graph  # noqa: E402


def window(src, start, end):
    nodes = src["nodes"][start:end]
    made = {t for n in nodes for t in n["outputs"]}
    read = {t for n in nodes for t in n["inputs"] if t}
    after = {t for n in src["nodes"][end:] for t in n["inputs"] if t}
    tensors = []
    for t in src["tensors"]:
        name = t["name"]
        if name not in made and name not in read:
            continue
        t = dict(t)
        if name not in made:
            if t.get("kind") != "weight":
                t["kind"] = "input"
        elif name in after:
            t["kind"] = "output"
        tensors.append(t)
    g = dict(src)
    g["name"] = f"{src['name']}_{start}_{end}"
    g["nodes"] = nodes
    g["tensors"] = tensors
    return g


def arena(memplan, path, schedule):
    p = subprocess.run([memplan, "plan", path, "--schedule", schedule, "--caller-inputs",
                        "--caller-outputs", "--align", "64", "--no-fold-weights", "--format",
                        "json", "-q"], capture_output=True, text=True)
    return json.loads(p.stdout)["arena_bytes"] if p.returncode == 0 else None


def shrink(src, memplan, out):
    def worse(i, j):
        write_graph(window(src, i, j), out)
        given, memory = arena(memplan, out, "given"), arena(memplan, out, "memory")
        return given is not None and memory is not None and memory > given

    i, j = 0, len(src["nodes"])
    if not worse(i, j):
        sys.exit("the memory schedule's arena is not above the given order's on the graph")
    step = (j - i) // 4
    while step >= 1:
        for di, dj in ((step, 0), (0, -step)):
            if j - i - di + dj > 4 and worse(i + di, j + dj):
                i, j = i + di, j + dj
                print(i, j, flush=True)
                break
        else:
            step //= 2
    write_graph(window(src, i, j), out)
    print(f"window [{i}, {j}) of {len(src['nodes'])} nodes")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("graph")
    ap.add_argument("start", nargs="?", type=int)
    ap.add_argument("end", nargs="?", type=int)
    ap.add_argument("--shrink", metavar="MEMPLAN")
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    src = json.load(open(a.graph))
    if a.shrink:
        shrink(src, a.shrink, a.output)
    elif a.start is None or a.end is None:
        ap.error("START and END, or --shrink")
    else:
        write_graph(window(src, a.start, a.end), a.output)


if __name__ == "__main__":
    main()
