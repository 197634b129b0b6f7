#!/usr/bin/env python3
"""Regenerates the vendored ONNX backend node-test models and their reference output sizes.

Run by hand (not by CI), from any directory, with the `onnx` package installed:

    python3 -m venv /tmp/onnx-venv && /tmp/onnx-venv/bin/pip install onnx
    /tmp/onnx-venv/bin/python crates/onnx/testdata/node-tests/regenerate.py

For every node test case of `onnx.backend.test.case.node.collect_testcases` outside the
`ai.onnx.ml` and training domains and without string tensors, it writes the model to
`models/<name>.onnx` with every `value_info` and the graph outputs' shapes removed (the element
type stays), so that memplan must infer each output's shape, and appends one row per graph
output to `manifest.csv`: model, output, ONNX element type, the reference output's shape
(`2x3x4`, `-` for a scalar) and its exact byte size (`ceil(elements * bits / 8)`; sub-byte
types are packed). Outputs that are sequences or optionals are recorded with the type
`sequence` or `optional` and no size. The file is sorted and stable for one `onnx` version.
"""

import csv
import os
import shutil
import sys
import warnings

import numpy as np
import onnx
from onnx.backend.test.case.node import collect_testcases

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "models")
MANIFEST = os.path.join(HERE, "manifest.csv")
EXCLUDED_DOMAINS = {"ai.onnx.ml", "ai.onnx.preview.training"}

# Storage bits per element of each ONNX TensorProto.DataType.
BITS = {
    1: 32, 2: 8, 3: 8, 4: 16, 5: 16, 6: 32, 7: 64, 9: 8, 10: 16, 11: 64, 12: 32, 13: 64,
    14: 64, 15: 128, 16: 16, 17: 8, 18: 8, 19: 8, 20: 8, 21: 4, 22: 4, 23: 4, 24: 8,
    25: 2, 26: 2,
}
STRING = 8


def domains(graph):
    out = set()
    for node in graph.node:
        out.add(node.domain)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                out |= domains(attr.g)
            for g in attr.graphs:
                out |= domains(g)
    return out


def has_strings(model):
    g = model.graph
    for vi in list(g.input) + list(g.output):
        t = vi.type
        if t.HasField("tensor_type") and t.tensor_type.elem_type == STRING:
            return True
    for node in g.node:
        if node.op_type in ("StringNormalizer", "StringConcat", "StringSplit", "RegexFullMatch"):
            return True
    return False


def row(model_name, vi, value):
    t = vi.type
    kind = t.WhichOneof("value")
    if kind != "tensor_type":
        return [model_name, vi.name, kind.replace("_type", ""), "", ""]
    elem = t.tensor_type.elem_type
    if isinstance(value, onnx.TensorProto):
        # Types numpy has no dtype for (float8, int4, ...) come as TensorProtos.
        dims = list(value.dims)
    else:
        dims = list(np.asarray(value).shape)
    shape = "x".join(str(d) for d in dims) or "-"
    elements = int(np.prod(dims, dtype=np.int64))
    size = (elements * BITS[elem] + 7) // 8
    return [model_name, vi.name, str(elem), shape, str(size)]


def main():
    warnings.simplefilter("ignore")
    np.seterr(all="ignore")
    if os.path.isdir(OUT_DIR):
        shutil.rmtree(OUT_DIR)
    os.makedirs(OUT_DIR)
    rows = []
    skipped = {"ai.onnx.ml or training": 0, "strings": 0, "no data": 0}
    cases = sorted(
        (c for c in collect_testcases(None) if c.kind == "node"), key=lambda c: c.name
    )
    for case in cases:
        model = case.model
        if domains(model.graph) & EXCLUDED_DOMAINS:
            skipped["ai.onnx.ml or training"] += 1
            continue
        if has_strings(model):
            skipped["strings"] += 1
            continue
        if not case.data_sets:
            skipped["no data"] += 1
            continue
        _, outputs = case.data_sets[0]
        model = onnx.ModelProto.FromString(model.SerializeToString())
        del model.graph.value_info[:]
        for vi in model.graph.output:
            if vi.type.HasField("tensor_type"):
                vi.type.tensor_type.ClearField("shape")
        model.doc_string = ""
        model.graph.doc_string = ""
        for vi, value in zip(case.model.graph.output, outputs):
            rows.append(row(case.name, vi, value))
        with open(os.path.join(OUT_DIR, case.name + ".onnx"), "wb") as f:
            f.write(model.SerializeToString())
    rows.sort(key=lambda r: (r[0], r[1]))
    with open(MANIFEST, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["model", "output", "elem_type", "shape", "bytes"])
        w.writerows(rows)
    models = len({r[0] for r in rows})
    print(f"onnx {onnx.__version__}: {models} models, {len(rows)} outputs; skipped {skipped}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
