"""--bound graphs whose places may depend on a data-dependent symbol."""
import itertools
import sys

from harness import G, case, summarize


def base(name, bound=16, extra_bounds=None):
    b = {"k": bound}
    b.update(extra_bounds or {})
    g = G(name, symbols=list(b.keys()), bounds=b)
    g.t("x", "f32", [bound], "input")
    return g


def nz(g, src="x", out="nz", sym="k"):
    g.n("NonZero", [src], [out])
    g.t(out, "i64", [1, sym])
    return out


def cases():
    out = []
    # 1. Split after a data-dependent chunk: [1, k+4] split into [1,k] and [1,4]
    for tail_op in ("Relu", "Neg", "Identity"):
        g = base(f"b_split_after_{tail_op}")
        nz(g)
        g.t("c4", "i64", [1, 4], "weight", value=[1, 2, 3, 4])
        g.t("cat", "i64", [1, "k+4"])
        g.n("Concat", ["nz", "c4"], ["cat"], {"axis": 1})
        g.t("sp", "i64", [2])
        g.n("Shape", ["cat"], ["sp"])  # runtime split sizes (any runtime int tensor)
        g.t("s0", "i64", [1, "k"])
        g.t("s1", "i64", [1, 4])
        g.n("Split", ["cat", "sp"], ["s0", "s1"], {"axis": 1})
        g.t("y0", "i64", [1, "k"], "output")
        g.t("y1", "i64", [1, 4], "output")
        g.n("Neg", ["s0"], ["y0"])
        g.n(tail_op if tail_op != "Identity" else "Identity", ["s1"], ["y1"])
        out.append((g.name, g.json(), ["--bound"]))
    # 2. Slice [-2:] of a data-dependent length
    for axis_layout in ("flat", "rows"):
        g = base(f"b_slice_neg_{axis_layout}")
        nz(g)
        g.t("c2", "i64", [1, 2], "weight", value=[7, 8])
        g.t("cat", "i64", [1, "k+2"])
        g.n("Concat", ["nz", "c2"], ["cat"], {"axis": 1})
        g.t("st", "i64", [1], "weight", value=[-2])
        g.t("en", "i64", [1], "weight", value=[2**62])
        g.t("ax", "i64", [1], "weight", value=[1])
        g.t("sl", "i64", [1, 2])
        g.n("Slice", ["cat", "st", "en", "ax"], ["sl"])
        g.t("z", "i64", [1, "k+2"])
        g.n("Neg", ["cat"], ["z"])  # cat dies here unless the view keeps it
        g.t("y", "i64", [1, 2], "output")
        g.t("yz", "i64", [1, "k+2"], "output")
        g.n("Abs", ["sl"], ["y"])
        g.n("Abs", ["z"], ["yz"])
        out.append((g.name, g.json(), ["--bound"]))
    # 3. Concat part after a data-dependent part
    for order in ("dd_first", "dd_last", "dd_middle"):
        g = base(f"b_concat_{order}")
        nz(g)
        g.t("nzf", "f32", [1, "k"])
        g.n("Cast", ["nz"], ["nzf"], {"to": 1})
        g.t("x2", "f32", [1, 16])
        g.t("shp", "i64", [2], "weight", value=[1, 16])
        g.n("Reshape", ["x", "shp"], ["x2"])
        g.t("a", "f32", [1, 16])
        g.n("Sigmoid", ["x2"], ["a"])
        g.t("b", "f32", [1, 16])
        g.n("Tanh", ["x2"], ["b"])
        parts = {"dd_first": ["nzf", "a", "b"], "dd_last": ["a", "b", "nzf"],
                 "dd_middle": ["a", "nzf", "b"]}[order]
        g.t("cat", "f32", [1, "k+32"], "output")
        g.n("Concat", parts, ["cat"], {"axis": 1})
        out.append((g.name, g.json(), ["--bound"]))
    # 4. Unique and NonZero outputs, in place and viewed
    g = base("b_unique")
    g.t("u", "f32", ["k"])
    g.t("ui", "i64", ["k"])
    g.t("inv", "i64", [16])
    g.t("cnt", "i64", ["k"])
    g.n("Unique", ["x"], ["u", "ui", "inv", "cnt"], {"sorted": 1})
    g.t("u2", "f32", ["k"])
    g.n("Relu", ["u"], ["u2"])
    g.t("u3", "f32", [1, "k"])
    g.t("ax0", "i64", [1], "weight", value=[0])
    g.n("Unsqueeze", ["u2", "ax0"], ["u3"])
    g.t("y", "f32", [1, "k"], "output")
    g.n("Exp", ["u3"], ["y"])
    g.t("yc", "i64", ["k"], "output")
    g.n("Add", ["ui", "cnt"], ["yc"])
    out.append((g.name, g.json(), ["--bound"]))
    # 5. Equal chunks of a [1, 2k] dim
    g = base("b_split_equal")
    nz(g)
    g.t("cat", "i64", [1, "2*k"])
    g.n("Concat", ["nz", "nz"], ["cat"], {"axis": 1})
    g.t("s0", "i64", [1, "k"])
    g.t("s1", "i64", [1, "k"])
    g.n("Split", ["cat"], ["s0", "s1"], {"axis": 1, "num_outputs": 2})
    g.t("y0", "i64", [1, "k"], "output")
    g.t("y1", "i64", [1, "k"], "output")
    g.n("Neg", ["s1"], ["y0"])
    g.n("Neg", ["s0"], ["y1"])
    out.append((g.name, g.json(), ["--bound"]))
    # 6. rows: x [k, 4] last row, first row, Gather of row -1
    for sel in ("last", "first", "gather_last", "gather_first", "split_rows"):
        g = base(f"b_rows_{sel}")
        nz(g)
        g.t("nzt", "i64", ["k", 1])
        g.n("Transpose", ["nz"], ["nzt"], {"perm": [1, 0]})
        g.t("r4", "i64", [1, 4], "weight", value=[1, 1, 1, 1])
        g.t("m0", "i64", ["k", 4])
        g.n("Mul", ["nzt", "r4"], ["m0"])
        g.t("r4b", "i64", [1, 4], "weight", value=[5, 6, 7, 8])
        g.t("m", "i64", ["k+1", 4])
        g.n("Concat", ["m0", "r4b"], ["m"], {"axis": 0})
        if sel in ("last", "first"):
            s, e = (-1, 2**62) if sel == "last" else (0, 1)
            g.t("st", "i64", [1], "weight", value=[s])
            g.t("en", "i64", [1], "weight", value=[e])
            g.t("ax", "i64", [1], "weight", value=[0])
            g.t("r", "i64", [1, 4])
            g.n("Slice", ["m", "st", "en", "ax"], ["r"])
        elif sel.startswith("gather"):
            g.t("ix", "i64", [], "weight", value=[-1 if sel == "gather_last" else 0])
            g.t("r", "i64", [4])
            g.n("Gather", ["m", "ix"], ["r"], {"axis": 0})
        else:
            g.t("m2", "i64", ["2*k+2", 4])
            g.n("Concat", ["m", "m"], ["m2"], {"axis": 0})
            g.t("r", "i64", ["k+1", 4])
            g.t("r2", "i64", ["k+1", 4])
            g.n("Split", ["m2"], ["r2", "r"], {"axis": 0, "num_outputs": 2})
            g.t("y2", "i64", ["k+1", 4], "output")
            g.n("Neg", ["r2"], ["y2"])
        g.t("mm", "i64", ["k+1", 4])
        g.n("Neg", ["m"], ["mm"])
        g.t("y", "i64", g.tensors[-3]["shape"] if False else None or [], "output")
        g.tensors.pop()
        rshape = [t for t in g.tensors if t["name"] == "r"][0]["shape"]
        g.t("y", "i64", rshape, "output")
        g.n("Abs", ["r"], ["y"])
        g.t("ym", "i64", ["k+1", 4], "output")
        g.n("Abs", ["mm"], ["ym"])
        out.append((g.name, g.json(), ["--bound"]))
    # 7. bounds over earlier bounds, products, in-place chains
    g = G("b_nested_bounds", symbols=["k", "m"], bounds={"k": 8, "m": "2*k"})
    g.t("x", "f32", [8], "input")
    nz(g)
    g.t("nzf", "f32", [1, "k"])
    g.n("Cast", ["nz"], ["nzf"], {"to": 1})
    g.t("d", "f32", [1, "2*k"])
    g.n("Concat", ["nzf", "nzf"], ["d"], {"axis": 1})
    g.t("nz2", "i64", [2, "m"])
    g.n("NonZero", ["d"], ["nz2"])
    g.t("nz2f", "f32", [2, "m"])
    g.n("Cast", ["nz2"], ["nz2f"], {"to": 1})
    g.t("e", "f32", [2, "m+k"])
    g.n("Concat", ["nz2f", "nzf", "nzf"] if False else ["nz2f", "nz2f"], ["e"], {"axis": 1}) if False else None
    g.tensors.pop()
    g.t("e", "f32", [1, "2*m+k"])
    g.t("flat", "f32", [1, "2*m"])
    g.t("shp", "i64", [2], "weight", value=[1, -1])
    g.n("Reshape", ["nz2f", "shp"], ["flat"])
    g.n("Concat", ["flat", "nzf"], ["e"], {"axis": 1})
    g.t("y", "f32", [1, "2*m+k"], "output")
    g.n("Sigmoid", ["e"], ["y"])
    out.append((g.name, g.json(), ["--bound"]))
    # 8. negative coefficient: must be refused
    g = base("b_negative_coeff")
    nz(g)
    g.t("sl", "i64", [1, "16-k"])
    g.t("st", "i64", [1], "weight", value=[0])
    g.n("Slice", ["nz", "st", "st"], ["sl"])  # nonsense shape; size falls as k grows
    g.t("y", "i64", [1, "16-k"], "output")
    g.n("Neg", ["sl"], ["y"])
    out.append((g.name, g.json(), ["--bound"]))
    # 9. data-dependent strided Concat part: rows of [2, k] then [2, 4]
    for first in ("dd", "fixed"):
        g = base(f"b_concat_rows_{first}")
        nz(g)
        g.t("nz2", "i64", [2, "k"])
        g.n("Concat", ["nz", "nz"], ["nz2"], {"axis": 0})
        g.t("a", "i64", [2, "k"])
        g.n("Neg", ["nz2"], ["a"])
        g.t("w", "i64", [2, 4], "weight", value=list(range(8)))
        g.t("b", "i64", [2, 4])
        g.n("Neg", ["w"], ["b"])
        g.t("c", "i64", [2, "k+4"])
        g.n("Concat", ["a", "b"] if first == "dd" else ["b", "a"], ["c"], {"axis": 1})
        g.t("y", "i64", [2, "k+4"], "output")
        g.n("Abs", ["c"], ["y"])
        out.append((g.name, g.json(), ["--bound"]))
    # 10. a view of a data-dependent tensor written in place later (Flatten, Squeeze)
    g = base("b_view_inplace")
    nz(g)
    g.t("f", "i64", ["k"])
    g.t("ax0", "i64", [1], "weight", value=[0])
    g.n("Squeeze", ["nz", "ax0"], ["f"])
    g.t("f2", "i64", ["k"])
    g.n("Neg", ["f"], ["f2"])
    g.t("f3", "i64", [1, "k"])
    g.n("Unsqueeze", ["f2", "ax0"], ["f3"])
    g.t("y", "i64", [1, "k"], "output")
    g.n("Add", ["f3", "nz"], ["y"])
    out.append((g.name, g.json(), ["--bound"]))
    # 11. TopK with a bounded k, Split of its values
    g = G("b_topk", symbols=["k"], bounds={"k": 16})
    g.t("x", "f32", [2, 16], "input")
    g.t("kk", "i64", [1], "input")
    g.t("v", "f32", [2, "k"])
    g.t("i", "i64", [2, "k"])
    g.n("TopK", ["x", "kk"], ["v", "i"], {"axis": 1})
    g.t("v0", "f32", [1, "k"])
    g.t("v1", "f32", [1, "k"])
    g.n("Split", ["v"], ["v0", "v1"], {"axis": 0, "num_outputs": 2})
    g.t("y", "f32", [1, "k"], "output")
    g.n("Add", ["v1", "v0"], ["y"])
    g.t("yi", "i64", [2, "k"], "output")
    g.n("Neg", ["i"], ["yi"])
    out.append((g.name, g.json(), ["--bound"]))
    return out


if __name__ == "__main__":
    res = []
    for name, gj, opts in cases():
        for extra in ([], ["--align", "1"], ["--schedule", "memory"], ["--align", "8", "--caller-inputs"]):
            res.append(case(name + ("_" + "_".join(x.strip("-") for x in extra) if extra else ""), gj, opts + extra))
    summarize(res)
    for r in res:
        if r.verdict() == "refused":
            print("refused:", r.name, r.stderr[:200].replace("\n", " | "))
