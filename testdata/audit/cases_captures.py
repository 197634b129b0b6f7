"""Captures 1-3 levels deep in If/Loop bodies, declared and undeclared."""
import itertools

from harness import G, case, summarize

N = 64  # elements of x


def if_body(name, reads, declare, out):
    """A branch computing out = Neg(reads[0]) + reads[1:]..., declaring `declare` as inputs."""
    b = G(name)
    for r in declare:
        b.t(r, "f32", [N], "input")
    cur = reads[0]
    b.t(f"{name}_t0", "f32", [N])
    b.n("Neg", [cur], [f"{name}_t0"], name=f"{name}_neg")
    cur = f"{name}_t0"
    for i, r in enumerate(reads[1:]):
        b.t(f"{name}_t{i+1}", "f32", [N])
        b.n("Add", [cur, r], [f"{name}_t{i+1}"], name=f"{name}_add{i}")
        cur = f"{name}_t{i+1}"
    b.t(out, "f32", [N], "output")
    b.n("Exp", [cur], [out], name=f"{name}_exp")
    return b


def loop_body(name, inner, declare_x, decl_inner_x):
    """Loop body: (iter, cond, v) -> (cond, v'), running an If whose then-branch reads x."""
    b = G(name)
    b.t(f"{name}_it", "i64", [], "input")
    b.t(f"{name}_c", "bool", [], "input")
    b.t(f"{name}_v", "f32", [N], "input")
    if declare_x:
        b.t("x", "f32", [N], "input")
    b.t(f"{name}_co", "bool", [], "output")
    b.n("Identity", [f"{name}_c"], [f"{name}_co"], name=f"{name}_idc")
    b.t(f"{name}_r", "f32", [N])
    then_decl = ["x"] if decl_inner_x else []
    then = inner(f"{name}_then", ["x", f"{name}_v"], then_decl + [f"{name}_v"], f"{name}_tr")
    els = if_body(f"{name}_else", [f"{name}_v"], [f"{name}_v"], f"{name}_er")
    b.n("If", [f"{name}_c"], [f"{name}_r"], name=f"{name}_if",
        implicit=(["x"] if declare_x else []) + [f"{name}_v"],
        bodies=[("then_branch", then), ("else_branch", els)])
    b.t(f"{name}_vo", "f32", [N], "output")
    b.n("Sigmoid", [f"{name}_r"], [f"{name}_vo"], name=f"{name}_sig")
    return b


def top(name, body, loop_implicit, consume_first=True, after_reads_x=False):
    g = G(name)
    g.t("x", "f32", [N], "input")
    g.t("m", "i64", [], "input")
    g.t("c", "bool", [], "input")
    g.t("v0", "f32", [N], "input")
    g.t("y", "f32", [N])
    if consume_first:
        g.n("Relu", ["x"], ["y"], name="relu_x")  # x's last listed reader: in place target
    g.t("vf", "f32", [N])
    g.n("Loop", ["m", "c", "v0"], ["vf"], name="loop", implicit=["x"] if loop_implicit else None,
        bodies=[("body", body)])
    g.t("out", "f32", [N], "output")
    if consume_first:
        g.n("Add", ["y", "vf"], ["out"], name="fin")
    else:
        g.n("Tanh", ["vf"], ["out"], name="fin")
    if after_reads_x:
        g.t("out2", "f32", [N], "output")
        g.n("Neg", ["x"], ["out2"], name="fin2")
    return g.json()


def three_levels(name, declare_mid, declare_inner, implicit_top):
    """If (top) > Loop > If, the innermost reading x."""
    lb = loop_body(f"{name}_lb", if_body, declare_mid, declare_inner)
    ib = G(f"{name}_outer_then")
    if declare_mid:
        ib.t("x", "f32", [N], "input")
    ib.t("m2", "i64", [], "input") if False else None
    ib.t("w1", "i64", [], "weight", value=[2])
    ib.t("cb", "bool", [], "weight", value=[1])
    ib.t("v1", "f32", [N], "weight")
    ib.t("lo", "f32", [N], "output")
    ib.n("Loop", ["w1", "cb", "v1"], ["lo"], name=f"{name}_loop",
         implicit=["x"] if declare_mid else None, bodies=[("body", lb)])
    eb = if_body(f"{name}_outer_else", ["v0"], ["v0"], "eo")
    g = G(name)
    g.t("x", "f32", [N], "input")
    g.t("c", "bool", [], "input")
    g.t("v0", "f32", [N], "input")
    g.t("y", "f32", [N])
    g.n("Relu", ["x"], ["y"], name="relu_x")
    g.t("r", "f32", [N])
    g.n("If", ["c"], ["r"], name="top_if", implicit=(["x"] if implicit_top else []) + ["v0"],
        bodies=[("then_branch", ib), ("else_branch", eb)])
    g.t("out", "f32", [N], "output")
    g.n("Add", ["y", "r"], ["out"], name="fin")
    return g.json()


def cases():
    out = []
    for loop_impl, decl_body, decl_inner in itertools.product([True, False], repeat=3):
        body = loop_body("lb", if_body, decl_body, decl_inner)
        name = f"c2_loopimpl{int(loop_impl)}_body{int(decl_body)}_inner{int(decl_inner)}"
        out.append((name, top(name, body, loop_impl)))
        name2 = name + "_xlater"
        out.append((name2, top(name2, body, loop_impl, after_reads_x=True)))
    for dm, di, it in itertools.product([True, False], repeat=3):
        name = f"c3_mid{int(dm)}_inner{int(di)}_top{int(it)}"
        out.append((name, three_levels(name, dm, di, it)))
    # a body input whose name exists nowhere (If has no formal inputs)
    b = if_body("ghost_then", ["ghost"], ["ghost"], "gr")
    e = if_body("ghost_else", ["x"], ["x"], "ger")
    g = G("c_ghost_input")
    g.t("x", "f32", [N], "input")
    g.t("c", "bool", [], "input")
    g.t("r", "f32", [N], "output")
    g.n("If", ["c"], ["r"], name="if", implicit=["x"], bodies=[("then_branch", b), ("else_branch", e)])
    out.append(("c_ghost_input", g.json()))
    # a body node reading a name that is no tensor anywhere
    b = G("nowhere_then")
    b.t("r1", "f32", [N], "output")
    b.n("Neg", ["nothere"], ["r1"], name="nw")
    e = if_body("nowhere_else", ["x"], ["x"], "nwr")
    g = G("c_nowhere_read")
    g.t("x", "f32", [N], "input")
    g.t("c", "bool", [], "input")
    g.t("r", "f32", [N], "output")
    g.n("If", ["c"], ["r"], name="if", implicit=["x"], bodies=[("then_branch", b), ("else_branch", e)])
    out.append(("c_nowhere_read", g.json()))
    # body reads an outer activation produced AFTER the If (in node order)
    b = if_body("late_then", ["late"], ["late"], "lr")
    e = if_body("late_else", ["x"], ["x"], "ler")
    g = G("c_late_capture")
    g.t("x", "f32", [N], "input")
    g.t("c", "bool", [], "input")
    g.t("r", "f32", [N])
    g.t("late", "f32", [N])
    g.n("If", ["c"], ["r"], name="if", implicit=["x"], bodies=[("then_branch", b), ("else_branch", e)])
    g.n("Relu", ["x"], ["late"], name="mk_late")
    g.t("o", "f32", [N], "output")
    g.n("Add", ["r", "late"], ["o"], name="fin")
    out.append(("c_late_capture", g.json()))
    # body output that is a captured value passed straight through
    b = G("pass_then")
    b.t("x", "f32", [N], "input")
    b.t("x_out", "f32", [N], "output")
    b.n("Identity", ["x"], ["x_out"], name="pid")
    e = if_body("pass_else", ["x"], ["x"], "per")
    g = G("c_passthrough")
    g.t("x", "f32", [N], "input")
    g.t("c", "bool", [], "input")
    g.t("y", "f32", [N])
    g.n("Relu", ["x"], ["y"], name="relu_x")
    g.t("r", "f32", [N])
    g.n("If", ["c"], ["r"], name="if", implicit=["x"], bodies=[("then_branch", b), ("else_branch", e)])
    g.t("o", "f32", [N], "output")
    g.n("Add", ["r", "y"], ["o"], name="fin")
    out.append(("c_passthrough", g.json()))
    # capture of an activation computed before, in place candidates around it
    b = if_body("act_then", ["a", "a"], ["a"], "ar")
    e = if_body("act_else", ["a"], ["a"], "aer")
    g = G("c_capture_activation")
    g.t("x", "f32", [N], "input")
    g.t("c", "bool", [], "input")
    g.t("a", "f32", [N])
    g.n("Sigmoid", ["x"], ["a"], name="mk_a")
    g.t("a2", "f32", [N])
    g.n("Tanh", ["a"], ["a2"], name="tanh_a")
    g.t("r", "f32", [N])
    g.n("If", ["c"], ["r"], name="if", implicit=["a"], bodies=[("then_branch", b), ("else_branch", e)])
    g.t("o", "f32", [N], "output")
    g.n("Add", ["r", "a2"], ["o"], name="fin")
    out.append(("c_capture_activation", g.json()))
    # the same without implicit_inputs at all (undeclared one level deep)
    g2 = dict(g.json())
    g2 = __import__("copy").deepcopy(g2)
    g2["name"] = "c_capture_activation_undeclared"
    for n in g2["nodes"]:
        n.pop("implicit_inputs", None)
    out.append(("c_capture_activation_undeclared", g2))
    # Scan body capturing x and a view of x
    sb = G("scan_body")
    sb.t("st", "f32", [N], "input")
    sb.t("sl", "f32", [4], "input")
    sb.t("xv", "f32", [N], "input")
    sb.t("s1", "f32", [N])
    sb.n("Add", ["st", "xv"], ["s1"], name="sadd")
    sb.t("so", "f32", [N], "output")
    sb.n("Relu", ["s1"], ["so"], name="srelu")
    sb.t("sc", "f32", [4], "output")
    sb.n("Neg", ["sl"], ["sc"], name="sneg")
    g = G("c_scan_view_capture")
    g.t("x", "f32", [N], "input")
    g.t("shp", "i64", [1], "weight", value=[N])
    g.t("xv", "f32", [N])
    g.t("xx", "f32", [4, 16])
    g.t("shp2", "i64", [2], "weight", value=[4, 16])
    g.n("Reshape", ["x", "shp2"], ["xx"], name="rs")
    g.n("Reshape", ["xx", "shp"], ["xv"], name="rs2")
    g.t("seq", "f32", [3, 4], "input")
    g.t("s0", "f32", [N], "input")
    g.t("sf", "f32", [N])
    g.t("scn", "f32", [3, 4])
    g.n("Scan", ["s0", "seq"], ["sf", "scn"], {"num_scan_inputs": 1}, name="scan", implicit=["xv"],
        bodies=[("body", sb)])
    g.t("o", "f32", [N], "output")
    g.n("Sigmoid", ["sf"], ["o"], name="fin")
    g.t("o2", "f32", [3, 4], "output")
    g.n("Neg", ["scn"], ["o2"], name="fin2")
    out.append(("c_scan_view_capture", g.json()))
    return out


if __name__ == "__main__":
    res = []
    for name, gj in cases():
        for extra in ([], ["--schedule", "memory"], ["--align", "1"], ["--caller-inputs", "--align", "16"]):
            res.append(case(name + ("_" + "_".join(x.strip("-") for x in extra) if extra else ""), gj, extra))
    summarize(res)
    for r in res:
        if r.verdict() == "refused":
            print("refused:", r.name, r.stderr[:300].replace("\n", " | "))
