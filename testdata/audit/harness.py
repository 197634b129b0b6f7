"""Plans graphs with the memplan CLI, checks them with `memplan check` and the simulator."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import sim  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MEMPLAN = os.environ.get("MEMPLAN", os.path.join(ROOT, "target", "release", "memplan"))
WORK = os.environ.get("AUDIT_WORK", os.path.join(tempfile.gettempdir(), "memplan-audit"))
os.makedirs(WORK, exist_ok=True)


class G:
    def __init__(self, name, symbols=None, bounds=None, broadcasts=None):
        self.name = name
        self.symbols = symbols or []
        self.bounds = bounds or {}
        self.broadcasts = broadcasts or {}
        self.tensors = []
        self.nodes = []
        self._names = set()

    def t(self, name, dtype, shape, kind="activation", value=None, elements=None):
        d = {"name": name, "dtype": dtype, "shape": list(shape), "kind": kind}
        if value is not None:
            d["value"] = list(value)
        if elements is not None:
            d["elements"] = elements
        self.tensors.append(d)
        return name

    def n(self, op, inputs, outputs, attrs=None, name=None, implicit=None, bodies=None):
        d = {"name": name or f"n{len(self.nodes)}", "op": op, "inputs": list(inputs),
             "outputs": list(outputs), "attrs": attrs or {}}
        if implicit:
            d["implicit_inputs"] = list(implicit)
        if bodies:
            d["bodies"] = [{"attr": a, "graph": g.body_json()} for a, g in bodies]
        self.nodes.append(d)
        return d

    def body_json(self):
        return {"name": self.name, "tensors": self.tensors, "nodes": self.nodes}

    def json(self):
        d = {"name": self.name}
        if self.symbols:
            d["symbols"] = self.symbols
        if self.bounds:
            d["symbol_bounds"] = self.bounds
        if self.broadcasts:
            d["symbol_broadcasts"] = self.broadcasts
        d["tensors"] = self.tensors
        d["nodes"] = self.nodes
        return d


def run(args, stdin=None, timeout=120):
    p = subprocess.run([MEMPLAN] + args, capture_output=True, text=True, timeout=timeout,
                       input=stdin)
    return p.returncode, p.stdout, p.stderr


class Result:
    def __init__(self, name):
        self.name = name
        self.plan_rc = None
        self.check_rc = None
        self.sim = []
        self.note = ""
        self.stderr = ""

    def verdict(self):
        if self.plan_rc not in (0, 1, 2):
            return "PANIC"
        if self.check_rc is not None and self.check_rc not in (0, 1, 2):
            return "PANIC"
        if self.plan_rc == 2:
            return "refused"
        if self.plan_rc == 1:
            return "plan-unsafe"  # the planner made a plan its own verifier rejects
        if self.sim and any(k != "error" for k, _ in self.sim):
            if self.check_rc == 0:
                return "ACCEPTED-UNSAFE"
            return "unsafe-caught"
        if self.sim:
            return "sim-error"
        if self.check_rc == 1:
            return "check-rejects-own-plan"
        return "ok"


def case(name, graph, opts=(), dims=(), expect_refusal=False, check_dims=True):
    """Plan `graph` (a dict) with `opts`, check it, simulate it at every binding."""
    r = Result(name)
    gp = os.path.join(WORK, f"{name}.json")
    pp = os.path.join(WORK, f"{name}.plan.json")
    with open(gp, "w") as f:
        json.dump(graph, f)
    if os.path.exists(pp):
        os.remove(pp)
    args = ["plan", gp, "--format", "json", "-o", pp, "-q"] + list(opts)
    for d in dims:
        args += ["--dim", d]
    r.plan_rc, out, err = run(args)
    r.stderr = err.strip()
    if r.plan_rc != 0:
        return r
    r.check_rc, out, err = run(["check", gp, "--plan", pp, "--format", "json", "-q"])
    if r.check_rc not in (0, 1):
        r.stderr += "\ncheck: " + err.strip()
    try:
        pj = json.load(open(pp))
    except Exception as e:  # noqa: BLE001
        r.sim.append(("error", f"plan unreadable: {e}"))
        return r
    for b in sim.bindings_to_try(sim.Graph(graph), pj):
        try:
            rep = sim.simulate(graph, pj, b)
            r.sim += [(k, f"at {b}: {m}") for k, m in rep.defects]
        except sim.SimError as e:
            r.sim.append(("error", f"at {b}: {e}"))
        except Exception as e:  # noqa: BLE001
            import traceback
            r.sim.append(("error", f"at {b}: simulator crash {e!r} {traceback.format_exc()[-300:]}"))
        # memplan check at the smaller binding too
        if check_dims and pj.get("settings", {}).get("bounded"):
            base = dict(pj["settings"]["bindings"])
            if b != base:
                a = ["check", gp, "--plan", pp, "-q", "--format", "json"]
                for k, v in b.items():
                    a += ["--dim", f"{k}={v}"]
                rc, o, e = run(a)
                if rc not in (0, 1, 2):
                    r.sim.append(("panic", f"check at {b}: rc {rc} {e[-300:]}"))
                elif rc == 1 and r.check_rc == 0:
                    r.note += f" check rejects at {b};"
                elif rc == 2:
                    r.note += f" check refuses {b}: {e.strip()[:120]};"
    return r


def summarize(results, verbose=True):
    from collections import Counter
    c = Counter(r.verdict() for r in results)
    bad = [r for r in results if r.verdict() in ("PANIC", "ACCEPTED-UNSAFE", "unsafe-caught", "plan-unsafe", "sim-error", "check-rejects-own-plan")]
    if verbose:
        for r in bad:
            print(f"== {r.name}: {r.verdict()} plan={r.plan_rc} check={r.check_rc} {r.note}")
            for k, m in r.sim[:6]:
                print(f"   {k}: {m}")
            if r.stderr:
                print("   stderr:", r.stderr[:400].replace("\n", "\n   "))
    print(dict(c))
    return c
