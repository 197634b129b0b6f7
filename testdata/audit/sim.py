#!/usr/bin/env python3
"""Independent plan simulator for memplan plans (hand-run audit tool).

Reads a memplan graph JSON and a memplan plan JSON, executes the plan's schedule on byte
arrays (the arena, the weight region, one buffer per caller-owned tensor), and compares every
byte read with a reference execution of the graph that shares no storage. Op semantics are
written from the ONNX operator definitions; no code is shared with memplan.

Usage: sim.py [GRAPH] PLAN [--dim NAME=V ...] [--all-bindings] [--json]
A training plan is simulated on the step graph it holds or names (`step_graph`, the digest
of a named file checked); GRAPH may then be its forward graph, or left out.
Exit 0: every read saw its reference bytes; 1: defects found; 2: the simulator could not
run (it prints why).
"""
import hashlib
import json
import re
import sys

import numpy as np

BITS = {
    "f64": 64, "f32": 32, "f16": 16, "bf16": 16, "f8e4m3": 8, "f8e4m3fn": 8, "f8e5m2": 8,
    "f8e4m3fnuz": 8, "f8e5m2fnuz": 8, "f8e8m0": 8, "f4e2m1": 4, "i64": 64, "i32": 32,
    "i16": 16, "i8": 8, "u64": 64, "u32": 32, "u16": 16, "u8": 8, "bool": 8, "i4": 4,
    "u4": 4, "i2": 2, "u2": 2, "c64": 64, "c128": 128,
    "float32": 32, "float": 32, "float16": 16, "double": 64, "float64": 64, "bfloat16": 16,
    "int64": 64, "int32": 32, "int16": 16, "int8": 8, "uint64": 64, "uint32": 32,
    "uint16": 16, "uint8": 8, "int4": 4, "uint4": 4, "int2": 2, "uint2": 2,
    "complex64": 64, "complex128": 128, "float4e2m1": 4, "float8e4m3fn": 8,
    "float8e5m2": 8, "float8e4m3fnuz": 8, "float8e5m2fnuz": 8, "float8e8m0": 8,
}

ELEMENTWISE = set("""Relu Sigmoid Tanh Abs Neg Exp Log Sqrt Reciprocal Erf Gelu HardSwish
HardSigmoid LeakyRelu Elu Selu Celu Softplus Softsign Mish Floor Ceil Round Sign Sin Cos Tan
Not ThresholdedRelu Shrink IsNaN IsInf Acos Acosh Asin Asinh Atan Atanh Cosh Sinh BitwiseNot
Swish Add Sub Mul Div Pow Max Min Sum Mean Mod And Or Xor BitwiseAnd BitwiseOr BitwiseXor
Equal Less LessOrEqual Greater GreaterOrEqual PRelu Where BitShift Cast
com.microsoft.FastGeluGrad com.microsoft.GeluGrad com.microsoft.LeakyReluGrad
com.microsoft.QuickGeluGrad com.microsoft.ReluGrad com.microsoft.SigmoidGrad
com.microsoft.SoftplusGrad com.microsoft.TanhGrad""".split())
# Elementwise over input 0; other inputs are parameters read by every element.
ELEMENTWISE_FIRST = set("Clip Dropout QuickGelu com.microsoft.QuickGelu".split())
ROWWISE = set("""Softmax LogSoftmax LayerNormalization RMSNormalization
SimplifiedLayerNormalization InstanceNormalization GroupNormalization""".split())
MUTATING = {
    "com.microsoft.InPlaceAccumulatorV2": [0],
    "com.microsoft.AdamWOptimizer": [2, 4, 5],
    "com.microsoft.SGDOptimizerV2": [1],
}
OPTIMIZER_STEPS = {"memplan.SGD", "memplan.Momentum", "memplan.Adam"}
METADATA_ONLY = {"Shape": {0}, "Size": {0}}
BODY_OPS = {"If", "Loop", "Scan"}


class SimError(Exception):
    """The simulator cannot run this input."""


def node_updates(node):
    """Names a node updates in place by its own op (not through bodies)."""
    op, ins = node["op"], node["inputs"]
    if op in MUTATING:
        return [ins[p] for p in MUTATING[op] if p < len(ins) and ins[p]]
    if op in OPTIMIZER_STEPS:
        return [ins[p] for p in range(len(ins)) if p != 1 and ins[p]]
    return []


def inside(owner, root):
    g = owner
    while g is not None:
        if g is root:
            return True
        g = g.parent
    return False


def graph_updates(g, root):
    """Tensors that nodes of `g` (a body inside `root`, or `root` itself) update at any
    depth and that `root` does not own: updates of what `root` captures."""
    out = set()
    for node in g.nodes:
        for x in node_updates(node):
            owner = g.lookup(x)
            if owner is not None and not inside(owner, root):
                out.add(x)
        for b in node.get("bodies", []):
            out |= graph_updates(g.bodies[(node["name"], b["attr"])], root)
    return out


def body_updates(g, node):
    """What a control-flow node's bodies update of the tensors they capture, at any depth."""
    out = set()
    for b in node.get("bodies", []):
        bg = g.bodies[(node["name"], b["attr"])]
        out |= graph_updates(bg, bg)
    return out


def eval_dim(d, env):
    if isinstance(d, int):
        return d
    if not isinstance(d, str) or not re.fullmatch(r"[A-Za-z0-9_+\-*]+", d):
        raise SimError(f"bad dim {d!r}")
    def sub(m):
        name = m.group(0)
        if name not in env:
            raise SimError(f"unbound symbol {name}")
        return f"({env[name]})"
    expr = re.sub(r"[A-Za-z_][A-Za-z0-9_]*", sub, d)
    return int(eval(expr, {"__builtins__": {}}, {}))


def seed_bytes(n, *key):
    h = hashlib.sha256(repr(key).encode()).digest()
    rng = np.random.default_rng(int.from_bytes(h[:8], "little"))
    return rng.integers(0, 256, size=n, dtype=np.uint8)


class Tensor:
    def __init__(self, j):
        self.name = j["name"]
        self.dtype = j["dtype"]
        if self.dtype not in BITS:
            raise SimError(f"dtype {self.dtype} not simulated")
        self.bits = BITS[self.dtype]
        self.shape = j["shape"]
        self.kind = j.get("kind", "activation")
        if self.kind == "constant":
            self.kind = "weight"
        self.value = j.get("value")
        self.elements_expr = j.get("elements")


class Graph:
    def __init__(self, j, parent=None):
        self.name = j["name"]
        self.parent = parent
        self.tensors = {}
        for t in j["tensors"]:
            self.tensors[t["name"]] = Tensor(t)
        self.nodes = j["nodes"]
        self.node_by_name = {n["name"]: n for n in self.nodes}
        self.producer = {}
        for n in self.nodes:
            for o in n["outputs"]:
                if o:
                    self.producer[o] = n["name"]
        self.bodies = {}
        for n in self.nodes:
            for b in n.get("bodies", []):
                self.bodies[(n["name"], b["attr"])] = Graph(b["graph"], self)
        self.symbols = j.get("symbols", [])
        self.bounds = j.get("symbol_bounds", {})
        self.broadcasts = j.get("symbol_broadcasts", {})

    def lookup(self, name):
        """The graph that owns tensor `name` as seen from here (captures resolve outward)."""
        g = self
        while g is not None:
            if name in g.tensors:
                t = g.tensors[name]
                if g.parent is not None and t.kind == "input" and g.parent.lookup(name):
                    return g.parent.lookup(name)
                return g
            g = g.parent
        return None


class Env:
    """Symbol values."""
    def __init__(self, graph, values):
        self.v = dict(values)
        for s, (a, b) in graph.broadcasts.items():
            if s in self.v:
                continue
            x, y = eval_dim(a, self.v), eval_dim(b, self.v)
            if x == 1:
                self.v[s] = y
            elif y == 1 or x == y:
                self.v[s] = x
            else:
                raise SimError(f"broadcast symbol {s}: {x} and {y} do not broadcast")

    def dims(self, t):
        return [eval_dim(d, self.v) for d in t.shape]

    def elements(self, t):
        if t.elements_expr is not None:
            return eval_dim(t.elements_expr, self.v)
        n = 1
        for d in self.dims(t):
            n *= d
        return n

    def nbytes(self, t):
        return (self.elements(t) * t.bits + 7) // 8


# ---------------------------------------------------------------- element arrays

def to_elems(buf, bits, n):
    """Bytes -> one row per element (bits >= 8: (n, w) uint8; else (n,) codes)."""
    if bits >= 8:
        w = bits // 8
        return buf[: n * w].reshape(n, w)
    per = 8 // bits
    out = np.zeros(n, dtype=np.uint8)
    for k in range(per):
        idx = np.arange(k, n, per)
        out[idx] = (buf[idx // per] >> (k * bits)) & ((1 << bits) - 1)
    return out


def from_elems(el, bits, n):
    if bits >= 8:
        return el.reshape(-1).copy()
    per = 8 // bits
    out = np.zeros((n * bits + 7) // 8, dtype=np.uint8)
    for k in range(per):
        idx = np.arange(k, n, per)
        out[idx // per] |= (el[idx].astype(np.uint8) << (k * bits)).astype(np.uint8)
    return out


def norm_axis(a, r):
    if a < -r or a >= max(r, 1) and not (r == 0 and a == 0):
        raise SimError(f"axis {a} out of range for rank {r}")
    return a + r if a < 0 else a


def int_param(g, node, attr, pos):
    """A constant int list from an attribute or a constant input with a value; None if
    absent; 'runtime' if it is a runtime value."""
    at = node.get("attrs", {})
    if attr in at:
        v = at[attr]
        return v if isinstance(v, list) else [v]
    ins = node["inputs"]
    if pos is not None and pos < len(ins) and ins[pos]:
        owner = g.lookup(ins[pos])
        t = owner.tensors[ins[pos]]
        if t.value is not None:
            return list(t.value)
        return "runtime"
    return None


def movement_src(g, env, node, out_index):
    """For data-movement ops: (input position, src element index array over that input)
    for output `out_index`; for Concat a list of (pos, array) per input; None when the op
    computes new values (or its parameters are runtime values)."""
    op = node["op"]
    ins = node["inputs"]
    outs = node["outputs"]
    y = g.lookup(outs[out_index]).tensors[outs[out_index]]
    ny = env.elements(y)
    if op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity") or (
        op == "Cast" and g.lookup(ins[0]).tensors[ins[0]].dtype == y.dtype
    ):
        if out_index != 0:
            return None
        x = g.lookup(ins[0]).tensors[ins[0]]
        if env.elements(x) != ny:
            raise SimError(f"{node['name']}: {op} changes the element count")
        return (0, np.arange(ny))
    if op == "Slice" and out_index == 0:
        x = g.lookup(ins[0]).tensors[ins[0]]
        xd = env.dims(x)
        if ny == env.elements(x):
            return (0, np.arange(ny))
        starts = int_param(g, node, "starts", 1)
        ends = int_param(g, node, "ends", 2)
        axes = int_param(g, node, "axes", 3)
        steps = int_param(g, node, "steps", 4)
        if "runtime" in (starts, ends, axes, steps) or starts is None or ends is None:
            return None
        if axes is None:
            axes = list(range(len(starts)))
        if steps is None:
            steps = [1] * len(starts)
        idx = np.arange(env.elements(x)).reshape(xd) if xd else np.arange(1).reshape(())
        sl = [slice(None)] * len(xd)
        seen = set()
        for s, e, a, st in zip(starts, ends, axes, steps):
            a = norm_axis(a, len(xd))
            if a in seen:
                raise SimError(f"{node['name']}: Slice names axis {a} twice (invalid ONNX)")
            seen.add(a)
            if st == 0:
                raise SimError(f"{node['name']}: Slice step 0 (invalid ONNX)")
            d = xd[a]
            if st > 0:
                s = max(0, min(d, s + d if s < 0 else s))
                e = max(0, min(d, e + d if e < 0 else e))
                sl[a] = slice(s, e, st)
            else:
                s = max(-1, min(d - 1, s + d if s < 0 else s))
                e = max(-1, min(d - 1, e + d if e < 0 else e))
                sl[a] = slice(s, e if e >= 0 else None, st)
        r = idx[tuple(sl)]
        if list(r.shape) != env.dims(y):
            raise SimError(f"{node['name']}: Slice gives {list(r.shape)}, graph says {env.dims(y)}")
        return (0, r.reshape(-1))
    if op == "Split":
        x = g.lookup(ins[0]).tensors[ins[0]]
        xd = env.dims(x)
        axis = norm_axis(node.get("attrs", {}).get("axis", 0), len(xd))
        lens = []
        for o in outs:
            od = env.dims(g.lookup(o).tensors[o])
            if len(od) != len(xd) or any(od[i] != xd[i] for i in range(len(xd)) if i != axis):
                raise SimError(f"{node['name']}: Split output {o} does not match its input")
            lens.append(od[axis])
        if sum(lens) != xd[axis]:
            raise SimError(f"{node['name']}: Split outputs sum to {sum(lens)}, not {xd[axis]}")
        sp = int_param(g, node, "split", 1)
        if isinstance(sp, list) and sp != lens:
            raise SimError(f"{node['name']}: Split sizes {sp} but outputs {lens}")
        idx = np.arange(env.elements(x)).reshape(xd)
        start = sum(lens[:out_index])
        sl = [slice(None)] * len(xd)
        sl[axis] = slice(start, start + lens[out_index])
        return (0, idx[tuple(sl)].reshape(-1))
    if op == "Transpose" and out_index == 0:
        x = g.lookup(ins[0]).tensors[ins[0]]
        xd = env.dims(x)
        perm = node.get("attrs", {}).get("perm", list(range(len(xd)))[::-1])
        idx = np.arange(env.elements(x)).reshape(xd).transpose(perm)
        return (0, idx.reshape(-1))
    if op == "Gather" and out_index == 0:
        x = g.lookup(ins[0]).tensors[ins[0]]
        xd = env.dims(x)
        ind = int_param(g, node, None, 1)
        if not isinstance(ind, list):
            return None
        it = g.lookup(ins[1]).tensors[ins[1]]
        axis = norm_axis(node.get("attrs", {}).get("axis", 0), len(xd))
        iv = np.array(ind, dtype=np.int64).reshape(env.dims(it))
        iv = np.where(iv < 0, iv + xd[axis], iv)
        idx = np.arange(env.elements(x)).reshape(xd)
        if iv.size and (iv.min() < 0 or iv.max() >= xd[axis]):
            raise SimError(f"{node['name']}: Gather index out of range at this binding")
        return (0, np.take(idx, iv, axis=axis).reshape(-1))
    if op == "Concat" and out_index == 0:
        axis = node.get("attrs", {}).get("axis")
        if axis is None:
            return None  # invalid ONNX; memplan treats it as a copy
        yd = env.dims(y)
        axis = norm_axis(axis, len(yd))
        parts = []
        for p, name in enumerate(ins):
            if not name:
                continue
            x = g.lookup(name).tensors[name]
            xd = env.dims(x)
            if len(xd) != len(yd) or any(xd[i] != yd[i] for i in range(len(yd)) if i != axis):
                raise SimError(f"{node['name']}: Concat input {name} {xd} vs output {yd}")
            parts.append((p, xd))
        if sum(xd[axis] for _, xd in parts) != yd[axis]:
            raise SimError(f"{node['name']}: Concat inputs do not add up to the output")
        return ("concat", axis, parts)
    return None


# ---------------------------------------------------------------- the simulation

class Report:
    def __init__(self):
        self.defects = []

    def add(self, kind, msg):
        if len(self.defects) < 200:
            self.defects.append((kind, msg))


class Mem:
    def __init__(self):
        self.spaces = {"Z": np.zeros(0, dtype=np.uint8)}

    def new(self, key, n):
        self.spaces[key] = np.zeros(max(n, 0), dtype=np.uint8)


def overlaps(a, b):
    """Whether two position arrays share a position (cheap when their ranges are apart)."""
    if len(a) == 0 or len(b) == 0 or a.max() < b.min() or b.max() < a.min():
        return False
    lo, hi = max(a.min(), b.min()), min(a.max(), b.max())
    a2 = a[(a >= lo) & (a <= hi)]
    b2 = b[(b >= lo) & (b <= hi)]
    if len(a2) == 0 or len(b2) == 0:
        return False
    m = np.zeros(hi - lo + 1, dtype=bool)
    m[a2 - lo] = True
    return bool(m[b2 - lo].any())


def align_up(x, a):
    return (x + a - 1) // a * a if a > 0 else x


class Sim:
    """Runs one plan of one graph (body plans recursively) at one binding."""

    def __init__(self, graph, plan, env, mem, rep, base, ctx, outer=None, bounded=()):
        self.g = graph
        self.plan = plan
        self.env = env
        self.mem = mem
        self.rep = rep
        self.base = base  # arena offset of this plan's arena (0 at top level)
        self.ctx = ctx  # a string naming this run (body, iteration)
        self.outer = outer  # enclosing Sim (captures)
        self.bounded = set(bounded)
        self.loc = {}  # tensor name -> (space, positions array)
        self.ref = {}  # tensor name -> list of versions (uint8 arrays)
        self.version_at = {}  # (tensor, reader node) -> version index
        self.entry = {}  # captured tensor a body updates -> its version as the body starts
        self.cap_version = {}  # captured tensor -> its version after the body's updates so far
        self.buffers = {b["tensor"]: b for b in plan.get("buffers", [])}
        self.weights = {w["tensor"]: w for w in plan.get("weights", [])}
        self.settings = plan.get("settings", {})
        self.align = plan.get("alignment", 1)
        if self.align is None or self.align <= 0 or (self.align & (self.align - 1)):
            rep.add("plan", f"{ctx}: alignment {self.align} is not a power of two")
        self.wbase = None

    # -- references
    def node_index(self):
        return {n["name"]: i for i, n in enumerate(self.g.nodes)}

    def compute_refs(self, input_refs):
        """Reference execution in graph order."""
        g, env = self.g, self.env
        for name, t in g.tensors.items():
            if t.kind in ("input", "weight", "state") and not (t.kind == "input" and name in input_refs):
                if t.kind == "input" and self.outer is not None:
                    continue
                self.ref[name] = [seed_bytes(env.nbytes(t), "in", self.ctx_root(), name)]
        for name, r in input_refs.items():
            self.ref[name] = [r]
        for ni, node in enumerate(g.nodes):
            # record versions read
            for name in self.present_inputs(node):
                if name in self.ref:
                    self.version_at[(name, node["name"])] = len(self.ref[name]) - 1
                elif name in self.entry:
                    self.version_at[(name, node["name"])] = self.cap_version.get(name, self.entry[name])
            self.ref_node(node)

    def ctx_root(self):
        return self.ctx

    def present_inputs(self, node):
        out = [x for x in node["inputs"] if x]
        out += [x for x in node.get("implicit_inputs", []) if x]
        return out

    def get_ref(self, name, reader=None):
        if reader is not None and name not in self.ref and (name, reader) in self.version_at:
            return self.ref_owner(name).ref[name][self.version_at[(name, reader)]]
        s = self
        while s is not None:
            if name in s.ref:
                vs = s.ref[name]
                if reader is not None and (name, reader) in s.version_at:
                    return vs[s.version_at[(name, reader)]]
                return vs[-1]
            s = s.outer
        raise SimError(f"{self.ctx}: no reference for {name}")

    def tensor(self, name):
        owner = self.g.lookup(name)
        if owner is None:
            raise SimError(f"{self.ctx}: tensor {name!r} not found")
        return owner.tensors[name]

    def ref_node(self, node):
        g, env = self.g, self.env
        op = node["op"]
        outs = node["outputs"]
        key_inputs = tuple(hashlib.sha256(self.get_ref(x).tobytes()).hexdigest()[:16]
                           if x else "" for x in node["inputs"] + node.get("implicit_inputs", []))
        muts = self.mutated(node)
        for p in muts:
            name = node["inputs"][p]
            t = self.tensor(name)
            if name not in self.ref and self.outer is not None:
                # a captured tensor updated inside a body: every update of it in one run of
                # the body makes the one version the control-flow node makes outside
                self.cap_version[name] = self.entry[name] + 1
                continue
            new = seed_bytes(env.nbytes(t), "mut", node["name"], p, key_inputs, self.ctx)
            self.ref_owner(name).ref[name].append(new)
        for name in self.body_updates(node):
            if name not in self.ref and self.outer is not None:
                self.cap_version[name] = self.entry[name] + 1
                continue
            t = self.tensor(name)
            new = seed_bytes(env.nbytes(t), "mut-in-body", node["name"], name, key_inputs, self.ctx)
            self.ref_owner(name).ref[name].append(new)
        for k, o in enumerate(outs):
            if not o:
                continue
            y = self.tensor(o)
            n = env.nbytes(y)
            src = movement_src(g, env, node, k)
            if src is None:
                self.ref[o] = [seed_bytes(n, "op", node["name"], k, key_inputs, self.ctx)]
            elif src[0] == "concat":
                _, axis, parts = src
                els = []
                for p, xd in parts:
                    x = self.tensor(node["inputs"][p])
                    el = to_elems(self.get_ref(node["inputs"][p]), x.bits, env.elements(x))
                    els.append(el.reshape(tuple(xd) + el.shape[1:]))
                cat = np.concatenate(els, axis=axis) if els else np.zeros(0, np.uint8)
                self.ref[o] = [from_elems(cat.reshape((-1,) + cat.shape[len(env.dims(y)):]) if y.bits >= 8 else cat.reshape(-1), y.bits, env.elements(y))]
            else:
                p, idx = src
                x = self.tensor(node["inputs"][p])
                el = to_elems(self.get_ref(node["inputs"][p]), x.bits, env.elements(x))
                self.ref[o] = [from_elems(el[idx], y.bits, len(idx))]

    def ref_owner(self, name):
        s = self
        while s is not None:
            if name in s.ref:
                return s
            s = s.outer
        raise SimError(f"no owner for {name}")

    def mutated(self, node):
        op = node["op"]
        if op in MUTATING:
            return [p for p in MUTATING[op] if p < len(node["inputs"]) and node["inputs"][p]]
        if op in OPTIMIZER_STEPS:
            return [p for p in range(len(node["inputs"])) if p != 1 and node["inputs"][p]]
        return []

    def body_updates(self, node):
        """Tensors of this graph (or an outer one) that a control-flow node's bodies update
        in place, at any depth: the node updates them itself (ONNX gives a body read access
        to the tensors it captures, but memplan's training ops write through them)."""
        return sorted(body_updates(self.g, node))

    def updated_anywhere(self):
        """Tensors some node updates in place, at any depth (the top graph's view)."""
        s = self
        while s.outer is not None:
            s = s.outer
        if not hasattr(s, "_updated"):
            found = set()

            def walk(g):
                for node in g.nodes:
                    found.update(node_updates(node))
                    for b in node.get("bodies", []):
                        walk(g.bodies[(node["name"], b["attr"])])
            walk(s.g)
            s._updated = found
        return s._updated

    def mutated_names(self, node):
        return [node["inputs"][p] for p in self.mutated(node)] + self.body_updates(node)

    def captured_version(self, name, reader):
        """The version of a captured tensor `name` that `reader` (a node of this body) sees,
        as an index into its owner's list, when this body tracks it."""
        return self.version_at.get((name, reader))

    # -- locations
    def space_len(self, space):
        return len(self.mem.spaces[space])

    def root_loc(self, name, b):
        t = self.tensor(name)
        n = self.env.nbytes(t)
        if n > b["bytes"]:
            self.rep.add("unsafe", f"{self.ctx}: {name} needs {n} bytes at this binding, plan gives {b['bytes']}")
        rows = b.get("rows")
        if rows:
            self.rep.add("plan", f"{self.ctx}: root {name} has rows")
        off = self.base + b["offset"]
        return ("A", np.arange(off, off + n))

    def assign_locations(self):
        """Locations of roots, weights and caller-owned tensors (views, parts, in-place
        outputs get theirs when their node runs, from their parent's)."""
        g, env, st = self.g, self.env, self.settings
        inputs_in_arena = st.get("inputs_in_arena", True)
        outputs_in_arena = st.get("outputs_in_arena", True)
        for name, t in g.tensors.items():
            if self.outer is not None and t.kind == "input" and (g.parent.lookup(name) is not None):
                continue  # captured: the enclosing run's location
            n = env.nbytes(t)
            b = self.buffers.get(name)
            w = self.weights.get(name)
            if b is not None and w is not None:
                self.rep.add("plan", f"{self.ctx}: {name} is both a buffer and a weight")
            if w is not None:
                if n > w["bytes"]:
                    self.rep.add("unsafe", f"{self.ctx}: weight {name} needs {n} bytes, plan gives {w['bytes']}")
                off = self.wbase + w["offset"]
                self.loc[name] = (self.wspace, np.arange(off, off + n))
                continue
            if b is not None:
                if b.get("alias") in (None,):
                    self.loc[name] = self.root_loc(name, b)
                continue
            if n == 0:
                self.loc[name] = ("Z", np.arange(0))
                continue
            if t.kind in ("weight", "state"):
                self.rep.add("plan", f"{self.ctx}: {t.kind} {name} ({n} B) has no place")
                self.loc[name] = (("X", name), np.arange(n))
                self.mem.new(("X", name), n)
                continue
            if t.kind == "input" and self.outer is None:
                if inputs_in_arena:
                    self.rep.add("plan", f"{self.ctx}: input {name} ({n} B) has no buffer but inputs are in the arena")
                key = ("C", self.ctx, name)
                self.mem.new(key, n)
                self.loc[name] = (key, np.arange(n))
                self.caller_in += n
                continue
            if t.kind == "input":
                # a formal body input: the runtime hands it over in a buffer of its own
                key = ("F", self.ctx, name)
                self.mem.new(key, n)
                self.loc[name] = (key, np.arange(n))
                continue
            if t.kind == "output" and self.outer is None and not outputs_in_arena:
                key = ("C", self.ctx, name)
                self.mem.new(key, n)
                self.loc[name] = (key, np.arange(n))
                self.caller_out += n
                continue
            # activation or output with bytes and no buffer: only legal if a view/part of
            # something (then it would be in buffers); otherwise missing
            self.missing.add(name)

    def where(self, name):
        s = self
        while s is not None:
            if name in s.loc:
                return s.loc[name]
            s = s.outer
        return None

    def read(self, name, reader, what="reads"):
        t = self.tensor(name)
        exp = self.get_ref(name, reader)
        if len(exp) == 0:
            return
        loc = self.where(name)
        if loc is None:
            self.rep.add("unsafe", f"{self.ctx}: {reader} {what} {name}, which has no location")
            return
        space, pos = loc
        mem = self.mem.spaces[space]
        if len(pos) != len(exp):
            self.rep.add("unsafe", f"{self.ctx}: {reader} reads {name}: location has {len(pos)} bytes, tensor {len(exp)}")
            return
        if len(pos) and (pos.max() >= len(mem) or pos.min() < 0):
            self.rep.add("unsafe", f"{self.ctx}: {name} lies outside its region ({space})")
            return
        got = mem[pos]
        if t.bits < 8 and (env_elems_bits := self.env.elements(t) * t.bits) % 8:
            # the last byte's padding bits carry no value
            keep = (1 << (env_elems_bits % 8)) - 1
            got = got.copy(); e2 = exp.copy()
            got[-1] &= keep; e2[-1] &= keep
            exp = e2
        if not np.array_equal(got, exp):
            bad = int(np.argmax(got != exp))
            self.rep.add("clobber", f"{self.ctx}: {reader} {what} {name}: byte {bad} of {len(exp)} (at {space}:{int(pos[bad])}) is not what was written")

    def write(self, name):
        t = self.tensor(name)
        data = self.ref_owner(name).ref[name][0]
        loc = self.loc.get(name)
        if loc is None:
            if len(data):
                self.rep.add("unsafe", f"{self.ctx}: {name} is written but has no location")
            return
        space, pos = loc
        mem = self.mem.spaces[space]
        if len(pos) and (pos.max() >= len(mem)):
            self.rep.add("unsafe", f"{self.ctx}: {name} lies outside its region ({space}, {int(pos.max())} >= {len(mem)})")
            return
        mem[pos] = data

    # -- alias locations at run time
    def view_loc(self, node, k):
        """The location output k of `node` has as a view (semantic), or None."""
        o = node["outputs"][k]
        src = movement_src(self.g, self.env, node, k)
        if src is None or src[0] == "concat":
            return None, "not a view of its input by the op's definition"
        p, idx = src
        x = self.tensor(node["inputs"][p])
        y = self.tensor(o)
        xl = self.where(node["inputs"][p])
        if xl is None:
            return None, "its input has no location"
        n = self.env.elements(y)
        if n == 0:
            return ("Z", np.arange(0)), None
        if not np.array_equal(idx, np.arange(idx[0], idx[0] + len(idx))):
            return None, "its elements are not a contiguous range of the input"
        bit0 = int(idx[0]) * x.bits
        bitend = (int(idx[0]) + n) * x.bits
        if bit0 % 8 or (bitend % 8 and int(idx[0]) + n != self.env.elements(x)):
            return None, "not on byte boundaries"
        if x.bits != y.bits:
            return None, "dtype size differs"
        space, pos = xl
        return (space, pos[bit0 // 8: bit0 // 8 + self.env.nbytes(y)]), None

    def part_slot(self, name):
        """For a Concat part: (concat node, output name, positions of its slot)."""
        b = self.buffers[name]
        cat_out = b["alias_of"]
        node = None
        for n in self.g.nodes:
            if n["op"] == "Concat" and n["outputs"] and n["outputs"][0] == cat_out and name in n["inputs"]:
                node = n
        if node is None:
            return None, f"part {name} of {cat_out}, which is no Concat reading it"
        if node["inputs"].count(name) != 1:
            # one slot only: which? the first; the rest the Concat copies
            pass
        y = self.tensor(cat_out)
        yl = self.loc.get(cat_out)
        if yl is None:
            return None, f"Concat output {cat_out} has no root location"
        yd = self.env.dims(y)
        axis = norm_axis(node.get("attrs", {}).get("axis"), len(yd))
        outer = 1
        for d in yd[:axis]:
            outer *= d
        inner = 1
        for d in yd[axis + 1:]:
            inner *= d
        start = 0
        for nm in node["inputs"]:
            if nm == name:
                break
            if nm:
                start += self.env.dims(self.tensor(nm))[axis]
        ln = self.env.dims(self.tensor(name))[axis]
        rowbits = yd[axis] * inner * y.bits
        s_bits = start * inner * y.bits
        l_bits = ln * inner * y.bits
        if rowbits % 8 or s_bits % 8 or l_bits % 8:
            if outer * ln * inner > 0:
                return None, "slot not on byte boundaries"
        space, pos = yl
        rb, sb, lb = rowbits // 8, s_bits // 8, l_bits // 8
        sel = np.concatenate([pos[r * rb + sb: r * rb + sb + lb] for r in range(outer)]) if outer else np.arange(0)
        return (space, sel), None

    def plan_positions(self, b):
        rows = b.get("rows") or 1
        stride = b.get("stride") or 0
        per = b["bytes"] // rows if rows else 0
        off = self.base + b["offset"]
        return np.concatenate([np.arange(off + r * stride, off + r * stride + per) for r in range(rows)]) if rows else np.arange(0)

    def alias_location(self, node, k):
        o = node["outputs"][k]
        b = self.buffers.get(o)
        if b is None or b.get("alias") is None:
            return
        kind = b["alias"]
        if kind == "view":
            loc, why = self.view_loc(node, k)
            if loc is None:
                self.rep.add("unsafe", f"{self.ctx}: {o} ({node['op']}) is planned as a view of {b['alias_of']} but is {why}")
                return
            if b["alias_of"] not in node["inputs"]:
                self.rep.add("unsafe", f"{self.ctx}: view {o} of {b['alias_of']}, not an input of {node['name']}")
            self.loc[o] = loc
        elif kind == "inplace":
            parent = b["alias_of"]
            if parent not in node["inputs"] and parent not in [node["inputs"][p] for p in self.mutated(node)]:
                self.rep.add("unsafe", f"{self.ctx}: {o} is written in place over {parent}, not an input of {node['name']}")
            pl = self.where(parent)
            if pl is None:
                self.rep.add("unsafe", f"{self.ctx}: {o} in place over {parent}, which has no location")
                return
            n = self.env.nbytes(self.tensor(o))
            if n > len(pl[1]):
                self.rep.add("unsafe", f"{self.ctx}: {o} ({n} B) written in place over {parent} ({len(pl[1])} B)")
                n = len(pl[1])
            self.loc[o] = (pl[0], pl[1][:n])
        elif kind == "part":
            loc, why = self.part_slot(o)
            if loc is None:
                self.rep.add("unsafe", f"{self.ctx}: part {o}: {why}")
                return
            self.loc[o] = loc
        else:
            self.rep.add("plan", f"{self.ctx}: {o} has unknown alias {kind}")
            return
        # the plan's own statement of the place must agree with the run's
        planned = self.plan_positions(b)
        got = self.loc[o][1]
        if self.loc[o][0] == "A" and len(got) and not np.array_equal(planned[: len(got)], got):
            n = min(len(got), len(planned))
            diff = np.nonzero(planned[:n] != got[:n])[0]
            i = int(diff[0]) if len(diff) else n
            at = int(got[i]) if i < len(got) else None
            want = int(planned[i]) if i < len(planned) else None
            self.rep.add("unsafe", f"{self.ctx}: {o} ({kind} of {b['alias_of']}): its byte {i} is at arena byte {at} at this binding, the plan file puts it at {want}")

    # -- in-place safety inside one node
    def thread_check(self, node):
        """Outputs that overlap an input's bytes must do so only where the kernel's thread
        writing a byte is the only one that reads it."""
        op = node["op"]
        ins = [x for x in node["inputs"]]
        reads = []
        for p, x in enumerate(ins):
            if not x or p in METADATA_ONLY.get(op, set()):
                continue
            reads.append((p, x))
        for x in node.get("implicit_inputs", []):
            reads.append((None, x))
        muts = set(self.mutated(node))
        writes = []  # (name, space, positions)
        for k, o in enumerate(node["outputs"]):
            if not o or o not in self.loc:
                continue
            b = self.buffers.get(o)
            if b is not None and b.get("alias") == "view":
                continue
            writes.append((k, o))
        for p in muts:
            writes.append((None, ins[p]))
        # outputs pairwise disjoint
        seen = {}
        for k, o in writes:
            loc = self.where(o)
            if loc is None:
                continue
            space, pos = loc
            key = space
            prev = seen.setdefault(key, [])
            for o2, pos2 in prev:
                if overlaps(pos, pos2):
                    self.rep.add("unsafe", f"{self.ctx}: {node['name']} writes {o} and {o2} over the same bytes")
            prev.append((o, pos))
        for k, o in writes:
            loc = self.where(o)
            if loc is None:
                continue
            space, opos = loc
            if op == "Concat" and k == 0:
                # the kernel writes only the slots of inputs that are not parts
                for nm in node["inputs"]:
                    b2 = self.buffers.get(nm)
                    if b2 is not None and b2.get("alias") == "part" and b2.get("alias_of") == o and nm in self.loc:
                        opos = opos[~np.isin(opos, self.loc[nm][1])]
            if len(opos) == 0:
                continue
            y = self.tensor(o)
            ny = self.env.elements(y)
            overlapping = []
            for p, x in reads:
                if (k is None and p is not None and ins[p] == o):
                    continue
                xl = self.where(x)
                if xl is None or xl[0] != space or len(xl[1]) == 0:
                    continue
                if op == "Concat" and k == 0 and self.buffers.get(x, {}).get("alias") == "part" \
                        and self.buffers[x].get("alias_of") == o:
                    continue  # a part already in its slot: the Concat does not write it
                if overlaps(opos, xl[1]):
                    overlapping.append((p, x, xl[1]))
            if not overlapping:
                continue
            kind = None
            if k == 0 and (op in ELEMENTWISE or (op == "BatchNormalization")):
                kind = "elementwise"
            if k == 0 and op in ELEMENTWISE_FIRST:
                kind = "first"
            if k == 0 and op == "BatchNormalization":
                kind = "first"
            if k == 0 and op in ROWWISE:
                kind = "row"
            if kind is None:
                for p, x, _ in overlapping:
                    self.rep.add("unsafe", f"{self.ctx}: {node['name']} ({op}) writes {o} over bytes of its input {x} while reading it")
                continue
            # thread of each output element
            yd = self.env.dims(y)
            writer = {}
            wmap = np.full(self.space_len(space), -1, dtype=np.int64)
            if y.bits >= 8:
                w = y.bits // 8
                thr = np.arange(ny)
                if kind == "row":
                    thr = self.rows(node, yd, ny)
                wmap[opos[: ny * w]] = np.repeat(thr, w)
                out_thread = thr
            else:
                per = 8 // y.bits
                nbytes = len(opos)
                wmap[opos] = np.arange(nbytes)
                out_thread = np.arange(ny) // per
                if kind == "row":
                    self.rep.add("unsafe", f"{self.ctx}: row-wise {op} in place on sub-byte {o}")
                    continue
            for p, x, xpos in overlapping:
                xt = self.tensor(x)
                nx = self.env.elements(xt)
                xd = self.env.dims(xt)
                if kind == "row":
                    if p != 0 or nx != ny:
                        self.rep.add("unsafe", f"{self.ctx}: {node['name']} ({op}) writes {o} over {x}, which every row reads")
                        continue
                    bc = np.arange(ny)
                    readers = out_thread
                elif kind == "first" and p != 0:
                    self.rep.add("unsafe", f"{self.ctx}: {node['name']} ({op}) writes {o} over its parameter {x}")
                    continue
                else:
                    if p is None:
                        self.rep.add("unsafe", f"{self.ctx}: {node['name']} writes {o} over captured {x}")
                        continue
                    try:
                        src = np.arange(nx).reshape(xd) if xd else np.arange(1).reshape(())
                        bc = np.broadcast_to(src, yd).reshape(-1) if nx != ny or xd != yd else np.arange(ny)
                    except ValueError:
                        self.rep.add("invalid", f"{self.ctx}: {node['name']}: {x} {xd} does not broadcast to {o} {yd}")
                        continue
                    readers = out_thread
                    if kind in ("elementwise", "first") and op == "BatchNormalization" and p != 0:
                        continue
                # bytes of each read element
                if xt.bits >= 8:
                    w = xt.bits // 8
                    xb = xpos[: nx * w].reshape(nx, w)[bc]
                else:
                    per = 8 // xt.bits
                    xb = xpos[(bc // per)].reshape(-1, 1)
                wr = wmap[xb]
                ok = (wr == -1) | (wr == readers.reshape(-1, 1))
                if not ok.all():
                    i = int(np.argwhere(~ok)[0][0])
                    self.rep.add("unsafe", f"{self.ctx}: {node['name']} ({op}) writes {o} over {x}: element {i} reads bytes another element's write has replaced")

    def rows(self, node, yd, ny):
        op = node["op"]
        at = node.get("attrs", {})
        r = len(yd)
        if op in ("Softmax", "LogSoftmax"):
            axis = norm_axis(at.get("axis", -1), r) if r else 0
            idx = np.arange(ny).reshape(yd) if yd else np.arange(1)
            # a row is a line along the axis (opset 13): label by the other coordinates
            coords = np.indices(yd).reshape(r, -1) if r else np.zeros((0, 1), dtype=np.int64)
            lab = np.zeros(ny, dtype=np.int64)
            for i in range(r):
                if i == axis:
                    continue
                lab = lab * yd[i] + coords[i]
            return lab
        if op in ("LayerNormalization", "RMSNormalization", "SimplifiedLayerNormalization"):
            axis = norm_axis(at.get("axis", -1), r) if r else 0
            inner = 1
            for d in yd[axis:]:
                inner *= d
            return np.arange(ny) // max(inner, 1)
        if op == "InstanceNormalization":
            inner = 1
            for d in yd[2:]:
                inner *= d
            return np.arange(ny) // max(inner, 1)
        if op == "GroupNormalization":
            G = at.get("num_groups", 1)
            inner = 1
            for d in yd[1:]:
                inner *= d
            per = max(inner // max(G, 1), 1)
            return np.arange(ny) // per
        return np.zeros(ny, dtype=np.int64)

    # -- running
    def run(self, input_refs=None, input_locs=None):
        g, env, plan = self.g, self.env, self.plan
        self.caller_in = 0
        self.caller_out = 0
        self.missing = set()
        if self.outer is None:
            self.mem.new("A", plan["arena_bytes"])
            self.mem.new("W", plan.get("weight_bytes", 0))
            self.wspace = "W"
            self.wbase = 0
        self.compute_refs(input_refs or {})
        self.assign_locations()
        for name, loc in (input_locs or {}).items():
            self.loc[name] = loc
        # inputs and weights arrive
        for name, t in g.tensors.items():
            if t.kind in ("input", "weight", "state") and name in self.loc and name in self.ref:
                self.write(name)
        # weights computed at load
        computed = {w["tensor"]: w.get("computed_by") for w in plan.get("weights", []) if w.get("computed_by")}
        loaded = set()
        for node in g.nodes:
            outs = [o for o in node["outputs"] if o]
            if outs and all(o in computed or env.nbytes(self.tensor(o)) == 0 for o in outs) and any(o in computed for o in outs):
                for x in self.present_inputs(node):
                    if x in self.updated_anywhere():
                        self.rep.add("unsafe", f"{self.ctx}: {node['name']} is computed at load from {x}, which the graph updates in place: stale from the second run on")
                    if x in self.weights or x in computed:
                        self.read(x, node["name"], "reads at load")
                    else:
                        self.rep.add("unsafe", f"{self.ctx}: {node['name']} is computed at load but reads {x}, not a weight")
                for o in outs:
                    self.write(o)
                loaded.add(node["name"])
        sched = plan.get("schedule", [])
        names = [n["name"] for n in g.nodes]
        if sorted(sched) != sorted(names):
            self.rep.add("plan", f"{self.ctx}: the schedule is not a permutation of the nodes")
        workspaces = {w["node"]: w for w in plan.get("workspaces", [])}
        done = set()
        for name in sched:
            node = g.node_by_name.get(name)
            if node is None:
                continue
            # topological
            for x in self.present_inputs(node):
                pr = g.producer.get(x)
                if pr is not None and pr not in done and pr not in loaded:
                    self.rep.add("unsafe", f"{self.ctx}: {name} runs before {pr}, which makes its input {x}")
            self.step(node, workspaces.get(name), name in loaded)
            done.add(name)
        # the caller reads the outputs
        for name, t in g.tensors.items():
            if t.kind == "output" and self.outer is None:
                self.read(name, "<end>", "(graph output) holds")
        # tensors updated in place: the caller reads the final value back
        if self.outer is None:
            for node in g.nodes:
                for x in self.mutated_names(node):
                    if self.tensor(x).kind in ("input", "state", "weight"):
                        self.version_at[(x, "<end>")] = len(self.ref_owner(x).ref[x]) - 1
                        self.read(x, "<end>", "(updated in place) holds")
        for name in sorted(self.missing):
            t = self.tensor(name)
            if name not in self.loc:
                self.rep.add("plan", f"{self.ctx}: {t.kind} {name} ({env.nbytes(t)} B) has no place in the plan")
        return self

    def step(self, node, ws, at_load):
        op = node["op"]
        name = node["name"]
        # reads
        for p, x in enumerate(node["inputs"]):
            if not x or p in METADATA_ONLY.get(op, set()):
                continue
            self.read(x, name)
        for x in node.get("implicit_inputs", []):
            self.read(x, name, "captures")
        if at_load:
            return
        # locations of aliased outputs
        for k, o in enumerate(node["outputs"]):
            if o:
                self.alias_location(node, k)
        # the node's workspace (scratch or bodies)
        if ws is not None:
            off, n = self.base + ws["offset"], ws["bytes"]
            if off + n > self.space_len("A"):
                self.rep.add("unsafe", f"{self.ctx}: workspace of {name} lies outside the arena")
            if node.get("bodies"):
                self.run_bodies(node, ws)
            else:
                self.mem.spaces["A"][off: off + n] = seed_bytes(n, "scratch", name)
            # inputs must still be intact after the kernel used its scratch
            for p, x in enumerate(node["inputs"]):
                if x and p not in METADATA_ONLY.get(op, set()):
                    self.read(x, name, "reads (after its workspace is used)")
        elif node.get("bodies"):
            self.run_bodies(node, None)
        self.thread_check(node)
        # writes
        for p in self.mutated(node):
            self.write_version(node["inputs"][p], name)
        for x in self.body_updates(node):
            # what the bodies wrote (or would have, where none ran): the node's version
            if x in self.ref or x not in self.entry:
                owner = self.ref_owner(x)
                cur = self.version_at.get((x, name), owner.version_at.get((x, name), 0))
                loc = self.where(x)
                if loc is not None:
                    self.mem.spaces[loc[0]][loc[1]] = owner.ref[x][cur + 1]
            else:
                self.write_version(x, name)
        for k, o in enumerate(node["outputs"]):
            if not o:
                continue
            b = self.buffers.get(o)
            if b is not None and b.get("alias") == "view":
                self.read(o, name, "(as a view) shows")
                continue
            if op == "Concat" and k == 0:
                self.run_concat(node)
                continue
            self.write(o)

    def write_version(self, x, reader):
        owner = self.ref_owner(x)
        vs = owner.ref[x]
        if x not in self.ref and x in self.entry:
            # a captured tensor updated in a body: the version the control-flow node makes
            loc = self.where(x)
            if loc is not None:
                self.mem.spaces[loc[0]][loc[1]] = vs[self.entry[x] + 1]
            return
        cur = owner.version_at.get((x, reader), 0)
        data = vs[cur + 1] if cur + 1 < len(vs) else vs[-1]
        loc = self.where(x)
        if loc is None:
            return
        self.mem.spaces[loc[0]][loc[1]] = data

    def run_concat(self, node):
        o = node["outputs"][0]
        if o not in self.loc:
            self.write(o)
            return
        parts = {n for n, b in self.buffers.items() if b.get("alias") == "part" and b.get("alias_of") == o}
        # copy the inputs that are not parts into their slots: write the whole output's
        # reference only over the bytes that are not a part's own slot
        y = self.tensor(o)
        ref = self.get_ref(o)
        space, pos = self.loc[o]
        mask = np.ones(len(pos), dtype=bool)
        placed = set()
        for nm in node["inputs"]:
            if nm in parts and nm not in placed and nm in self.loc:
                placed.add(nm)
                sl = self.loc[nm][1]
                mask &= ~np.isin(pos, sl)
        mem = self.mem.spaces[space]
        mem[pos[mask]] = ref[mask]
        self.read(o, node["name"], "(Concat with parts) makes")

    def run_bodies(self, node, ws):
        op = node["op"]
        bodies = node.get("bodies", [])
        plans = {}
        if ws is not None:
            for b in ws.get("bodies", []):
                plans[b["attr"]] = b["plan"]
        iters = 1 if op == "If" else 2
        # If's branches that update no captured tensor run first, so that what the node leaves
        # is the updating branch's version
        bodies = sorted(bodies, key=lambda b: bool(graph_updates(self.g.bodies[(node["name"], b["attr"])], self.g.bodies[(node["name"], b["attr"])])))
        for b in bodies:
            attr = b["attr"]
            bg = self.g.bodies[(node["name"], attr)]
            bp = plans.get(attr)
            makes = any(self.env.nbytes(t) > 0 for n2, t in bg.tensors.items()
                        if not (t.kind == "input"))
            if bp is None:
                if makes:
                    self.rep.add("unsafe", f"{self.ctx}: {node['name']} body {attr} makes bytes but has no plan")
                continue
            if ws is None:
                continue
            body_arena = bp["arena_bytes"]
            wb = align_up(body_arena, bp.get("alignment", 1) or 1)
            need = wb + bp.get("weight_bytes", 0) if bp.get("weight_bytes", 0) else body_arena
            if need > ws["bytes"]:
                self.rep.add("unsafe", f"{self.ctx}: {node['name']} body {attr} needs {need} bytes, workspace has {ws['bytes']}")
            formal = [n2 for n2, t in bg.tensors.items() if t.kind == "input" and self.g.lookup(n2) is None]
            carried = {}
            updated = sorted(graph_updates(bg, bg))
            entry = {}
            for x in updated:
                owner = self.ref_owner(x)
                v = self.version_at.get((x, node["name"]), owner.version_at.get((x, node["name"])))
                entry[x] = len(owner.ref[x]) - 2 if v is None else v
            for it in range(iters):
                # alternatives (If's branches) start from the tensors as they were; a Loop's
                # next iteration sees what the last one wrote
                for x in updated:
                    loc = self.where(x)
                    if loc is not None:
                        v = entry[x] + (1 if it > 0 else 0)
                        self.mem.spaces[loc[0]][loc[1]] = self.ref_owner(x).ref[x][v]
                ctx = f"{self.ctx}/{node['name']}.{attr}#{it}"
                refs = {}
                locs = {}
                for f in formal:
                    t = bg.tensors[f]
                    if f in carried:
                        refs[f] = carried[f]
                    else:
                        refs[f] = seed_bytes(self.env.nbytes(t), "formal", ctx, f)
                sub = Sim(bg, bp, self.env, self.mem, self.rep, self.base + ws["offset"], ctx, outer=self)
                sub.entry = {x: entry[x] + (1 if it > 0 else 0) for x in updated}
                sub.wspace = "A"
                sub.wbase = self.base + ws["offset"] + wb
                sub.run(refs, locs)
                # the node reads the body's outputs
                outs = [n2 for n2, t in bg.tensors.items() if t.kind == "output"]
                for o in outs:
                    sub.read(o, f"{node['name']} (body {attr} result)")
                # carried values for the next iteration (Loop: outputs 1.. map to inputs 2..)
                if op == "Loop" and len(formal) >= 2:
                    bouts = [n3 for n3 in self.body_outputs(b)]
                    for i, f in enumerate(formal[2:]):
                        if i + 1 < len(bouts):
                            carried[f] = sub.get_ref(bouts[i + 1])

    def body_outputs(self, b):
        bgj = b["graph"]
        return [t["name"] for t in bgj["tensors"] if t.get("kind") == "output"]


def load(path):
    with open(path) as f:
        return json.load(f)


def simulate(graph_json, plan_json, values):
    rep = Report()
    g = Graph(graph_json)
    env = Env(g, values)
    mem = Mem()
    s = Sim(g, plan_json, env, mem, rep, 0, "top")
    s.run()
    # device totals
    if not plan_json.get("settings", {}).get("inputs_in_arena", True):
        if plan_json.get("caller_input_bytes", s.caller_in) < s.caller_in:
            rep.add("plan", f"caller_input_bytes {plan_json.get('caller_input_bytes')} < {s.caller_in}")
    return rep


def bindings_to_try(g, plan):
    st = plan.get("settings", {})
    base = {k: v for k, v in st.get("bindings", [])}
    bounded = st.get("bounded", [])
    out = [dict(base)]
    if not bounded:
        return out
    # values of each bounded symbol below its recorded value
    combos = []
    for mode in ("zero", "one", "two", "half", "minus1", "rand1", "rand2", "rand3"):
        combos.append(mode)
    rng = np.random.default_rng(7)
    for mode in combos:
        v = dict(base)
        for s in bounded:
            hi = base[s]
            val = {"zero": 0, "one": min(1, hi), "two": min(2, hi), "half": hi // 2,
                   "minus1": max(hi - 1, 0)}.get(mode)
            if val is None:
                val = int(rng.integers(0, hi + 1))
            v[s] = val
        out.append(v)
    for s in bounded:
        for val in (0, 1):
            v = dict(base)
            v[s] = min(val, base[s])
            out.append(v)
    # de-duplicate
    seen, res = set(), []
    for v in out:
        k = tuple(sorted(v.items()))
        if k not in seen:
            seen.add(k)
            res.append(v)
    return res


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def step_graph(pj, plan_path, given=None):
    """The graph a training plan is a plan of: the step graph the file holds (`step_graph`),
    or names beside it (`{"file", "fnv1a64"}`, the digest checked), unless `given` is that
    graph already (its name is the plan's). None for a plan without one."""
    sg = pj.get("step_graph")
    if sg is None or (given is not None and given.get("name") == pj.get("graph")):
        return None
    if "nodes" in sg:
        return sg
    import os
    path = sg["file"]
    if not os.path.isabs(path) and not os.path.exists(path):
        path = os.path.join(os.path.dirname(plan_path), os.path.basename(path))
    data = open(path, "rb").read()
    if fnv1a64(data) != sg["fnv1a64"]:
        raise SimError(f"the step graph {path} has digest {fnv1a64(data)}, the plan names {sg['fnv1a64']}")
    return json.loads(data)


def main(argv):
    args = [a for i, a in enumerate(argv)
            if not a.startswith("--") and (i == 0 or argv[i - 1] != "--dim")]
    if len(args) == 1:
        # a training plan alone: its own step graph
        pj = load(args[0])
        sg = step_graph(pj, args[0])
        if sg is None:
            print("the plan holds no step graph: give the graph too")
            return 2
        return main_with(sg, pj, argv)
    if len(args) < 2:
        print(__doc__)
        return 2
    gj = load(args[0])
    pj = load(args[1])
    gj = step_graph(pj, args[1], gj) or gj
    return main_with(gj, pj, argv)


def main_with(gj, pj, argv):
    dims = {}
    for i, a in enumerate(argv):
        if a == "--dim":
            k, v = argv[i + 1].split("=")
            dims[k] = int(v)
    all_b = "--all-bindings" in argv
    tries = bindings_to_try(Graph(gj), pj) if all_b else [dict({k: v for k, v in pj.get("settings", {}).get("bindings", [])}, **dims)]
    found = []
    for b in tries:
        try:
            rep = simulate(gj, pj, b)
        except SimError as e:
            found.append(("error", f"at {b}: {e}"))
            continue
        for kind, msg in rep.defects:
            found.append((kind, f"at {b}: {msg}"))
    if "--json" in argv:
        print(json.dumps({"ok": not found, "defects": found, "bindings": tries}))
    else:
        for kind, msg in found:
            print(f"{kind}: {msg}")
        if not found:
            print(f"ok ({len(tries)} bindings)")
    if any(k == "error" for k, _ in found) and all(k == "error" for k, _ in found):
        return 2
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
