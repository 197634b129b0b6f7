"""Training steps of random forward graphs: plan --training, then check --plan; the plan
must pass memplan's own checks or be refused with exit 2; no panics. Every plan made is
then simulated (sim.py) on the step graph its file holds, at every binding: what each
backward, recompute and optimizer node reads is judged independently of memplan."""
import json
import os
import random
import sys
from collections import Counter

import harness
import sim
from cases_random import make

res = Counter()
bad = []
lo, hi = int(sys.argv[1]), int(sys.argv[2])
for seed in range(lo, hi):
    rng = random.Random(seed * 7)
    gj, opts = make(seed)
    x = next(t for t in gj["tensors"] if t["kind"] == "input")
    if x["dtype"] not in ("f32", "f16", "f64"):
        continue
    w = {"name": "w_train", "dtype": x["dtype"], "shape": x["shape"], "kind": "weight"}
    if any(isinstance(d, str) for d in x["shape"]):
        w["shape"] = [1] * len(x["shape"])
    xw = {"name": "xw_train", "dtype": x["dtype"], "shape": x["shape"], "kind": "activation"}
    for n in gj["nodes"]:
        n["inputs"] = ["xw_train" if i == x["name"] else i for i in n["inputs"]]
    gj["tensors"] += [w, xw]
    gj["nodes"].insert(0, {"name": "mul_w", "op": "Mul", "inputs": [x["name"], "w_train"], "outputs": ["xw_train"], "attrs": {}})
    opts = [o for o in opts if o not in ("--caller-outputs",)]
    if any(t["dtype"] not in ("f32", "f16", "f64", "i64", "bool") for t in gj["tensors"]):
        continue
    gp = os.path.join(harness.WORK, f"tr{seed}.json")
    pp = os.path.join(harness.WORK, f"tr{seed}.plan.json")
    json.dump(gj, open(gp, "w"))
    opt = rng.choice(["sgd", "momentum", "adam", "adamw"])
    extra = ["--training", opt, "--training-unknown", "save-all"]
    if rng.random() < 0.3:
        extra += ["--checkpoint", rng.choice(["none", "cheap", "every:2"])]
    if rng.random() < 0.2:
        extra += ["--fused-optimizer"]
    extra += ["--loss", rng.choice(["mse", "none"])]
    rc, out, err = harness.run(["plan", gp, "--format", "json", "-o", pp, "-q"] + opts + extra)
    res[f"plan {rc}"] += 1
    if rc not in (0, 2):
        bad.append((seed, "plan", rc, err[-300:], opts + extra))
        continue
    if rc != 0:
        res["refused: " + err.strip().splitlines()[-1][:70]] += 1
        continue
    args = ["check", gp, "--plan", pp, "-q"]
    if "--persistent" in opts:
        args += ["--persistent", opts[opts.index("--persistent") + 1]]
    rc, out, err = harness.run(args)
    res[f"check {rc}"] += 1
    if rc != 0:
        bad.append((seed, "check", rc, (out + err)[-400:], opts + extra))
    pj = json.load(open(pp))
    try:
        sg = sim.step_graph(pj, pp)
        if sg is None:
            res["sim: no step graph in the plan"] += 1
            continue
        found = []
        for b in sim.bindings_to_try(sim.Graph(sg), pj):
            found += [(k, m) for k, m in sim.simulate(sg, pj, b).defects]
    except sim.SimError as e:
        res["sim: cannot run: " + str(e)[:60]] += 1
        continue
    unsafe = [m for k, m in found if k != "error"]
    res[f"sim {'defects' if unsafe else 'ok'}"] += 1
    if unsafe:
        bad.append((seed, "sim", rc, unsafe[:3], opts + extra))
for b in bad[:20]:
    print(b)
for k, v in sorted(res.items(), key=lambda kv: -kv[1])[:25]:
    print(v, k)
