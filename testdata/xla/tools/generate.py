#!/usr/bin/env python3
"""Regenerate the XLA graphs and XLA's peak figures (run by hand, never by tests).

usage: generate.py OUT_GRAPHS_DIR WORK_DIR [NAME ...]
       (no NAME: every program OUT_GRAPHS_DIR/xla_peaks.csv lists, else every model)

For each model of models/models.py: compile it twice with JAX on the CPU, with XLA's default
scheduler and with --xla_cpu_scheduler_type=CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED
(dump_model.py), convert each scheduled entry computation to a memplan graph
(hlo_to_memplan.py: NAME.json and NAME_xlamem.json, the same nodes in XLA's two orders) and
measure XLA's own peak of live bytes on each order (xla_peak.py, 64-byte alignment, inputs and
outputs left to the caller). The figures go to OUT_GRAPHS_DIR/xla_peaks.csv (rows replaced by
name, sorted), with the JAX version.
"""
import csv
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "models"))
MEMOPT = "--xla_cpu_scheduler_type=CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"
FIELDS = ["graph", "nodes", "xla_default_peak_bytes", "xla_memopt_peak_bytes",
          "xla_default_temp_bytes", "xla_memopt_temp_bytes", "jax_version"]


def run(*args):
    subprocess.run([sys.executable, *args], check=True, env=dict(os.environ, JAX_PLATFORMS="cpu"))


def one(name, out, work):
    row = {"graph": name}
    for suffix, flags in (("", []), ("_xlamem", [MEMOPT])):
        d = os.path.join(work, name + suffix)
        run(os.path.join(HERE, "dump_model.py"), name, d, *flags)
        graph = os.path.join(out, name + suffix + ".json")
        run(os.path.join(HERE, "hlo_to_memplan.py"), os.path.join(d, "xla_dump"), "-o", graph,
            "--name", name + suffix)
        pk = json.loads(subprocess.run(
            [sys.executable, os.path.join(HERE, "xla_peak.py"), os.path.join(d, "xla_dump")],
            check=True, capture_output=True, text=True).stdout)
        ma = json.load(open(os.path.join(d, "memory_analysis.json")))
        key = "default" if not suffix else "memopt"
        row[f"xla_{key}_peak_bytes"] = pk["peak_bytes"]
        row[f"xla_{key}_temp_bytes"] = ma["temp_size_in_bytes"]
        row["jax_version"] = ma["jax_version"]
        row["nodes"] = len(json.load(open(graph))["nodes"])
    return row


def main():
    out, work, names = sys.argv[1], sys.argv[2], sys.argv[3:]
    from models import MODELS
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "xla_peaks.csv")
    rows = {}
    if os.path.exists(path):
        rows = {r["graph"]: r for r in csv.DictReader(open(path))}
    names = names or sorted(rows) or sorted(MODELS)
    for name in names:
        rows[name] = one(name, out, work)
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, FIELDS, lineterminator="\n")
            w.writeheader()
            for k in sorted(rows):
                w.writerow(rows[k])
        print(name, rows[name], flush=True)


if __name__ == "__main__":
    main()
