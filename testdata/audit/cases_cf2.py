"""Captures of views, Concat parts and in-place results; bodies with views, Concats and
in-place writes of their own; bodies of bodies."""
from harness import G, case, summarize
from cases_captures import if_body

N = 64


def body_reading(name, reads, out, extra_ops=True):
    b = G(name)
    for r in sorted(set(reads)):
        b.t(r, "f32", [N], "input")
    b.t(f"{name}_a", "f32", [N])
    b.n("Neg", [reads[0]], [f"{name}_a"], name=f"{name}_n0")
    b.t(f"{name}_v", "f32", [8, 8])
    b.t(f"{name}_s", "i64", [2], "weight", value=[8, 8])
    b.n("Reshape", [f"{name}_a", f"{name}_s"], [f"{name}_v"], name=f"{name}_n1")
    b.t(f"{name}_b", "f32", [8, 8])
    b.n("Exp", [f"{name}_v"], [f"{name}_b"], name=f"{name}_n2")
    b.t(f"{name}_c", "f32", [16, 8])
    b.n("Concat", [f"{name}_b", f"{name}_v"], [f"{name}_c"], {"axis": 0}, name=f"{name}_n3")
    b.t(f"{name}_cs", "i64", [1], "weight", value=[128])
    b.t(f"{name}_cf", "f32", [128])
    b.n("Reshape", [f"{name}_c", f"{name}_cs"], [f"{name}_cf"], name=f"{name}_n4")
    b.t(f"{name}_h0", "f32", [N])
    b.t(f"{name}_h1", "f32", [N])
    b.n("Split", [f"{name}_cf"], [f"{name}_h0", f"{name}_h1"], {"axis": 0, "num_outputs": 2}, name=f"{name}_n5")
    cur = f"{name}_h1"
    for i, r in enumerate(reads[1:]):
        b.t(f"{name}_r{i}", "f32", [N])
        b.n("Add", [cur, r], [f"{name}_r{i}"], name=f"{name}_add{i}")
        cur = f"{name}_r{i}"
    b.t(out, "f32", [N], "output")
    b.n("Sub", [cur, f"{name}_h0"], [out], name=f"{name}_fin")
    return b


def cases():
    out = []
    for cap in ("view", "part", "inplace", "split", "slice_view"):
        g = G(f"cf_capture_{cap}")
        g.t("x", "f32", [N], "input")
        g.t("c", "bool", [], "input")
        g.t("a", "f32", [N])
        g.n("Exp", ["x"], ["a"], name="mk_a")
        if cap == "view":
            g.t("s88", "i64", [2], "weight", value=[8, 8])
            g.t("av", "f32", [8, 8])
            g.n("Reshape", ["a", "s88"], ["av"], name="view_a")
            g.t("s64", "i64", [1], "weight", value=[N])
            g.t("cap", "f32", [N])
            g.n("Reshape", ["av", "s64"], ["cap"], name="view_b")
        elif cap == "part":
            g.t("cap", "f32", [N])
            g.n("Relu", ["a"], ["cap"], name="mk_part")
            g.t("b", "f32", [N])
            g.n("Sigmoid", ["x"], ["b"], name="mk_b")
            g.t("cat", "f32", [2 * N])
            # the Concat runs after the If: the captured part sits in the output's slot
        elif cap == "inplace":
            g.t("cap", "f32", [N])
            g.n("Relu", ["a"], ["cap"], name="inplace_a")
        elif cap == "split":
            g.t("a2", "f32", [2 * N])
            g.n("Concat", ["a", "x"], ["a2"], {"axis": 0}, name="cat2")
            g.t("cap", "f32", [N])
            g.t("other", "f32", [N])
            g.n("Split", ["a2"], ["other", "cap"], {"axis": 0, "num_outputs": 2}, name="split")
        else:
            g.t("st", "i64", [1], "weight", value=[0])
            g.t("en", "i64", [1], "weight", value=[N])
            g.t("a2", "f32", [2 * N])
            g.n("Concat", ["x", "a"], ["a2"], {"axis": 0}, name="cat2")
            g.t("cap", "f32", [N])
            g.n("Slice", ["a2", "st", "en"], ["cap"], name="slice")
        then = body_reading("th", ["cap", "cap"], "tr")
        els = body_reading("el", ["x", "cap"], "er")
        g.t("r", "f32", [N])
        g.n("If", ["c"], ["r"], name="if", implicit=["cap", "x"], bodies=[("then_branch", then), ("else_branch", els)])
        if cap == "part":
            g.n("Concat", ["cap", "b"], ["cat"], {"axis": 0}, name="cat")
            g.t("y", "f32", [2 * N], "output")
            g.n("Neg", ["cat"], ["y"], name="fin")
            g.t("y2", "f32", [N], "output")
            g.n("Neg", ["r"], ["y2"], name="fin2")
        else:
            g.t("y", "f32", [N], "output")
            g.n("Add", ["r", "a"] if cap != "inplace" else ["r", "x"], ["y"], name="fin")
        out.append((g.name, g.json()))
    # nested: If in If in Loop, with the innermost reading a view made in the middle body
    inner_then = body_reading("it", ["mv", "x"], "itr")
    inner_else = body_reading("ie", ["mv"], "ier")
    mid = G("mid")
    mid.t("mid_it", "i64", [], "input")
    mid.t("mid_c", "bool", [], "input")
    mid.t("mid_v", "f32", [N], "input")
    mid.t("x", "f32", [N], "input")
    mid.t("mid_co", "bool", [], "output")
    mid.n("Identity", ["mid_c"], ["mid_co"], name="mid_idc")
    mid.t("mid_s", "i64", [2], "weight", value=[8, 8])
    mid.t("mv8", "f32", [8, 8])
    mid.n("Reshape", ["mid_v", "mid_s"], ["mv8"], name="mid_r")
    mid.t("mid_s2", "i64", [1], "weight", value=[N])
    mid.t("mv", "f32", [N])
    mid.n("Reshape", ["mv8", "mid_s2"], ["mv"], name="mid_r2")
    mid.t("mid_r", "f32", [N])
    mid.n("If", ["mid_c"], ["mid_r"], name="mid_if", implicit=["mv", "x"], bodies=[("then_branch", inner_then), ("else_branch", inner_else)])
    mid.t("mid_vo", "f32", [N], "output")
    mid.n("Add", ["mid_r", "mv"], ["mid_vo"], name="mid_add")
    g = G("cf_nested_view_capture")
    g.t("x", "f32", [N], "input")
    g.t("m", "i64", [], "input")
    g.t("c", "bool", [], "input")
    g.t("v0", "f32", [N], "input")
    g.t("xe", "f32", [N])
    g.n("Exp", ["x"], ["xe"], name="xe")
    g.t("vf", "f32", [N])
    g.n("Loop", ["m", "c", "v0"], ["vf"], name="loop", implicit=["x"], bodies=[("body", mid)])
    g.t("y", "f32", [N], "output")
    g.n("Add", ["vf", "xe"], ["y"], name="fin")
    out.append((g.name, g.json()))
    return out


if __name__ == "__main__":
    res = []
    for name, gj in cases():
        for extra in ([], ["--schedule", "memory"], ["--align", "1"], ["--caller-inputs", "--align", "16"], ["--no-inplace"], ["--align", "4", "--no-views"]):
            res.append(case(name + ("_" + "_".join(x.strip("-") for x in extra) if extra else ""), gj, extra))
    summarize(res)
    for r in res:
        if r.verdict() == "refused":
            print("refused:", r.name, r.stderr[:300].replace("\n", " | "))
