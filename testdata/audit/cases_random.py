"""Random DAGs built to hit aliasing corners, planned with random options."""
import os
import random
import sys

import numpy as np

from harness import G, case, summarize

UNARY = ["Relu", "Neg", "Exp", "Sigmoid", "Tanh", "Abs"]
BINARY = ["Add", "Mul", "Sub", "Max"]
ROW = ["Softmax", "LogSoftmax", "LayerNormalization"]
DTYPES = ["f32", "f16", "i8", "i4", "bool", "f64", "u2"]


def numel(s):
    n = 1
    for d in s:
        n *= d
    return n


class Builder:
    def __init__(self, rng, name, sym):
        self.rng = rng
        self.g = G(name, symbols=["n"] if sym else [])
        self.sym = sym
        self.vals = []  # (name, dtype, shape(list of ints, with n as 'n' maybe))
        self.k = 0
        self.n_val = 3 if os.environ.get("BOUND") != "1" else 5

    def fresh(self, p="t"):
        self.k += 1
        return f"{p}{self.k}"

    def conc(self, shape):
        return [eval(d, {}, {"n": self.n_val}) if isinstance(d, str) else d for d in shape]

    def add_val(self, dtype, shape, kind="activation", value=None):
        nm = self.fresh("w" if kind == "weight" else ("x" if kind == "input" else "t"))
        self.g.t(nm, dtype, shape, kind, value=value)
        if kind != "weight" or value is None:
            self.vals.append((nm, dtype, shape))
        return nm

    def const(self, vals):
        nm = self.fresh("c")
        self.g.t(nm, "i64", [len(vals)], "weight", value=vals)
        return nm

    def pick(self, pred=lambda v: True):
        c = [v for v in self.vals if pred(v)]
        if not c:
            return None
        # prefer recent values
        return c[-1 - min(int(self.rng.expovariate(0.4)), len(c) - 1)]

    def step(self):
        r = self.rng.random()
        v = self.pick()
        nm, dt, sh = v
        sub = dt in ("i4", "u2")
        boolean = dt == "bool"
        if r < 0.22:
            op = self.rng.choice(UNARY) if not boolean else "Not"
            if dt in ("i4", "u2", "i8") and op in ("Exp", "Sigmoid", "Tanh"):
                op = "Neg"
            if dt == "u2" and op in ("Neg",):
                op = "Abs"
            o = self.add_val(dt, sh)
            self.g.n(op, [nm], [o])
        elif r < 0.40:
            w = self.pick(lambda v2: v2[1] == dt and (v2[2] == sh or numel(self.conc(v2[2])) == 1 or
                                                   (len(v2[2]) <= len(sh) and all(a == b or a == 1 for a, b in zip(v2[2][::-1], sh[::-1])))))
            if w is None:
                w = v
            op = self.rng.choice(BINARY) if not boolean else self.rng.choice(["And", "Or", "Xor"])
            a, b = (nm, w[0]) if self.rng.random() < 0.5 else (w[0], nm)
            shp = list(np.broadcast_shapes(tuple(self.conc(sh)), tuple(self.conc(w[2]))))
            outsh = sh if self.conc(sh) == shp else w[2]
            o = self.add_val(dt, outsh)
            self.g.n(op, [a, b], [o])
        elif r < 0.52 and not sub and not boolean and dt in ("f32", "f16", "f64") and len(sh) >= 1:
            op = self.rng.choice(ROW)
            o = self.add_val(dt, sh)
            if op == "LayerNormalization":
                sc = self.fresh("ln")
                self.g.t(sc, dt, [sh[-1]], "weight")
                self.g.n(op, [nm, sc], [o], {"axis": -1})
            else:
                self.g.n(op, [nm], [o], {"axis": self.rng.randrange(-len(sh), len(sh))})
        elif r < 0.64:
            # reshape family
            c = self.conc(sh)
            symb = any(isinstance(d, str) for d in sh)
            if self.rng.random() < 0.5 or symb:
                o = self.add_val(dt, [numel(c)] if not symb else sh + [1])
                if symb:
                    self.g.n("Unsqueeze", [nm, self.const([len(sh)])], [o])
                else:
                    self.g.n("Reshape", [nm, self.const([numel(c)])], [o])
            else:
                o = self.add_val(dt, sh)
                self.g.n("Identity", [nm], [o])
        elif r < 0.74 and len(sh) >= 1:
            # Slice along axis 0 or 1
            ax = self.rng.randrange(len(sh))
            d = self.conc(sh)[ax]
            if d < 2 or isinstance(sh[ax], str):
                o = self.add_val(dt, sh)
                self.g.n("Identity", [nm], [o])
                return
            s = self.rng.randrange(d)
            e = self.rng.randrange(s + 1, d + 1)
            if self.rng.random() < 0.3:
                s, e = s - d, (e - d if e < d else 2**62)
            outsh = list(sh)
            ln = (e if e < 2**61 else d) - s if s >= 0 else ((e + d if e < 0 else min(e, d)) - (s + d))
            outsh[ax] = ln if not (e >= 2**61 and s >= 0) else d - s
            if s < 0 and e >= 2**61:
                outsh[ax] = -s
            o = self.add_val(dt, outsh)
            self.g.n("Slice", [nm, self.const([s]), self.const([e]), self.const([ax])], [o])
        elif r < 0.82 and len(sh) >= 1 and not isinstance(sh[0], str) and self.conc(sh)[0] >= 2:
            d = self.conc(sh)[0]
            cut = self.rng.randrange(1, d)
            o1 = self.add_val(dt, [cut] + sh[1:])
            o2 = self.add_val(dt, [d - cut] + sh[1:])
            self.g.n("Split", [nm, self.const([cut, d - cut])], [o1, o2], {"axis": 0})
        elif r < 0.92:
            # Concat along a random axis with inputs of the same shape off the axis
            ax = self.rng.randrange(len(sh)) if sh else None
            if ax is None:
                o = self.add_val(dt, sh)
                self.g.n("Identity", [nm], [o])
                return
            others = [v2 for v2 in self.vals if v2[1] == dt and len(v2[2]) == len(sh) and
                      all(a == b for i, (a, b) in enumerate(zip(v2[2], sh)) if i != ax)]
            k = self.rng.randrange(1, 4)
            parts = [self.rng.choice(others)[0] for _ in range(k)] + [nm]
            self.rng.shuffle(parts)
            shapes = {v2[0]: v2[2] for v2 in self.vals}
            along = [shapes[p][ax] for p in parts]
            outsh = list(sh)
            if any(isinstance(a, str) for a in along):
                outsh[ax] = "+".join(str(a) for a in along)
            else:
                outsh[ax] = sum(along)
            o = self.add_val(dt, outsh)
            self.g.n("Concat", parts, [o], {"axis": ax if self.rng.random() < 0.7 else ax - len(sh)})
        elif (r < 0.95 or (os.environ.get("MUT") == "1" and r < 0.99)) and self.mutables:
            # an in-place update of a weight, state or input, read around it
            w, wdt, wsh = self.rng.choice(self.mutables)
            same = [v2 for v2 in self.vals if v2[2] == wsh and v2[1] == wdt and v2[0] != w]
            if not same:
                return
            grad = self.rng.choice(same)[0]
            if self.rng.random() < 0.5:
                self.g.n("memplan.SGD", [w, grad], [])
            else:
                o = self.fresh("upd")
                self.g.t(o, "bool", [1])
                self.vals.append((o, "bool", [1]))
                self.g.n("com.microsoft.InPlaceAccumulatorV2", [w, grad], [o])
        else:
            if len(sh) >= 2 and not any(isinstance(d, str) for d in sh):
                o = self.add_val(dt, [sh[1], sh[0]] + sh[2:])
                self.g.n("Transpose", [nm], [o], {"perm": [1, 0] + list(range(2, len(sh)))})
            else:
                o = self.add_val("i64", [len(sh)])
                self.g.n("Shape", [nm], [o])

    def finish(self):
        # outputs: values nobody reads, and a few random ones
        read = set()
        for n in self.g.nodes:
            read.update(n["inputs"])
        for t in self.g.tensors:
            if t["kind"] == "activation" and (t["name"] not in read or self.rng.random() < 0.08):
                t["kind"] = "output"
        return self.g.json()


def make(seed):
    rng = random.Random(seed)
    sym = rng.random() < (1.0 if os.environ.get("BOUND") == "1" else 0.25)
    b = Builder(rng, f"r{seed}", sym)
    dt = rng.choice(DTYPES)
    for _ in range(rng.randrange(1, 3)):
        shape = [rng.choice([1, 2, 3, 4, 6]) for _ in range(rng.randrange(1, 4))]
        if sym:
            shape[rng.randrange(len(shape)) if os.environ.get("BOUND") == "1" else 0] = "n"
        b.add_val(dt, shape, "input")
    b.mutables = []
    if rng.random() < 0.3:
        b.add_val(dt, [rng.choice([1, 2, 4])] * rng.randrange(1, 3), "weight")
    force = os.environ.get("MUT") == "1"
    if force:
        dt = rng.choice(["f32", "f16", "f64"])
        b.vals = []
        b.add_val(dt, [rng.choice([2, 4]), rng.choice([3, 4])], "input")
    if (force or rng.random() < 0.35) and dt in ("f32", "f16", "f64"):
        for kind in ("weight", "state", "input"):
            if rng.random() < 0.6:
                shape = list(b.vals[0][2]) if rng.random() < 0.5 else [rng.choice([2, 4]), rng.choice([3, 4])]
                nm = b.add_val(dt, shape, kind)
                b.mutables.append((nm, dt, shape))
    for _ in range(rng.randrange(4, 26)):
        b.step()
    opts = []
    if rng.random() < 0.3:
        opts += ["--schedule", "memory"]
    if rng.random() < 0.2:
        opts += ["--no-inplace"]
    if rng.random() < 0.1:
        opts += ["--no-views"]
    if rng.random() < 0.1:
        opts += ["--no-concat-elision"]
    if rng.random() < 0.25:
        opts += ["--caller-inputs"]
    if rng.random() < 0.15:
        opts += ["--caller-outputs"]
    if rng.random() < 0.5:
        opts += ["--align", str(rng.choice([1, 2, 4, 16, 64, 512]))]
    if rng.random() < 0.1:
        opts += ["--strategy", rng.choice(["naive", "greedy-size", "first-fit-time", "greedy-breadth"])]
    if rng.random() < 0.1:
        opts += ["--opaque", "Softmax,Concat"]
    g = b.finish()
    if sym and os.environ.get("BOUND") == "1":
        g["symbol_bounds"] = {"n": b.n_val}
        opts += ["--bound"]
    elif sym:
        opts += ["--dim", f"n={b.n_val}"]
    return g, opts


if __name__ == "__main__":
    lo, hi = int(sys.argv[1]), int(sys.argv[2])
    res = []
    for seed in range(lo, hi):
        gj, opts = make(seed)
        res.append(case(f"r{seed}", gj, opts))
    summarize(res)
    from collections import Counter
    print(Counter(r.stderr.split(":")[-1][:60] for r in res if r.verdict() == "refused").most_common(8))
