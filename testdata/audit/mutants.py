"""Hand-edited plan files: mutate every plan the other scripts wrote, ask `memplan check
--plan` about each, and simulate the ones it accepts."""
import copy
import glob
import json
import os
import random
import sys
from collections import Counter

import harness
import sim

WORK = harness.WORK


def mutations(pj, rng):
    """Yield (description, mutant) pairs."""
    bufs = pj.get("buffers", [])
    out = []

    def m(desc, f):
        q = copy.deepcopy(pj)
        try:
            if f(q) is False:
                return
        except (IndexError, KeyError, ValueError):
            return
        out.append((desc, q))

    for i, b in enumerate(bufs):
        m(f"drop buffer {b['tensor']}", lambda q, i=i: q["buffers"].pop(i))
        m(f"offset+1 {b['tensor']}", lambda q, i=i: q["buffers"][i].__setitem__("offset", q["buffers"][i]["offset"] + 1))
        m(f"offset+align {b['tensor']}", lambda q, i=i: q["buffers"][i].__setitem__("offset", q["buffers"][i]["offset"] + q["alignment"]))
        if b["offset"] >= q_align(pj):
            m(f"offset-align {b['tensor']}", lambda q, i=i: q["buffers"][i].__setitem__("offset", q["buffers"][i]["offset"] - q["alignment"]))
        m(f"offset 0 {b['tensor']}", lambda q, i=i: q["buffers"][i].__setitem__("offset", 0))
        m(f"bytes-1 {b['tensor']}", lambda q, i=i: q["buffers"][i].__setitem__("bytes", q["buffers"][i]["bytes"] - 1))
        m(f"last-1 {b['tensor']}", lambda q, i=i: q["buffers"][i].__setitem__("last", q["buffers"][i]["last"] - 1) if q["buffers"][i]["last"] > q["buffers"][i]["first"] else False)
        m(f"first+1 {b['tensor']}", lambda q, i=i: q["buffers"][i].__setitem__("first", q["buffers"][i]["first"] + 1) if q["buffers"][i]["last"] > q["buffers"][i]["first"] else False)
        if b.get("alias") is not None:
            m(f"unalias {b['tensor']}", lambda q, i=i: (q["buffers"][i].__setitem__("alias", None), q["buffers"][i].__setitem__("alias_of", None)))
            for k in ("view", "inplace", "part"):
                if k != b["alias"]:
                    m(f"alias {k} {b['tensor']}", lambda q, i=i, k=k: q["buffers"][i].__setitem__("alias", k))
        if b.get("rows"):
            m(f"rows-1 {b['tensor']}", lambda q, i=i: q["buffers"][i].__setitem__("rows", q["buffers"][i]["rows"] - 1))
            m(f"stride+1 {b['tensor']}", lambda q, i=i: q["buffers"][i].__setitem__("stride", q["buffers"][i]["stride"] + 1))
            m(f"no rows {b['tensor']}", lambda q, i=i: (q["buffers"][i].pop("rows"), q["buffers"][i].pop("stride")))
        # move onto another buffer
        j = rng.randrange(len(bufs))
        if j != i:
            m(f"offset of {bufs[j]['tensor']} for {b['tensor']}", lambda q, i=i, j=j: q["buffers"][i].__setitem__("offset", q["buffers"][j]["offset"]))
    names = [b["tensor"] for b in bufs]
    for i, b in enumerate(bufs):
        if b.get("alias_of") is not None and len(names) > 2:
            other = rng.choice([n for n in names if n not in (b["tensor"], b["alias_of"])])
            m(f"alias_of {b['tensor']} -> {other}", lambda q, i=i, other=other: q["buffers"][i].__setitem__("alias_of", other))
        m(f"duplicate buffer {b['tensor']}", lambda q, i=i: q["buffers"].insert(i, dict(q["buffers"][i], offset=q["buffers"][i]["offset"] + q["alignment"])))
    for i, w in enumerate(pj.get("weights", [])):
        if w.get("computed_by"):
            m(f"not computed {w['tensor']}", lambda q, i=i: q["weights"][i].pop("computed_by"))
            m(f"computed by another {w['tensor']}", lambda q, i=i: q["weights"][i].__setitem__("computed_by", q["schedule"][0]))
    if pj.get("schedule"):
        m("drop a step", lambda q: q["schedule"].pop(rng.randrange(len(q["schedule"]))))
        m("repeat a step", lambda q: q["schedule"].append(q["schedule"][0]))
    for wi, w in enumerate(pj.get("workspaces", [])):
        for bi, b in enumerate(w.get("bodies", [])):
            for key in ("inputs_in_arena", "outputs_in_arena", "inplace_over_inputs"):
                def f(q, wi=wi, bi=bi, key=key):
                    st = q["workspaces"][wi]["bodies"][bi]["plan"]["settings"]
                    st[key] = not st.get(key, False)
                m(f"body {w['node']}.{b['attr']} flip {key}", f)
    if len(bufs) >= 2:
        m("swap two buffers", lambda q: q["buffers"].__setitem__(slice(0, 2), q["buffers"][1::-1]))
        m("reverse buffers", lambda q: q["buffers"].reverse())
    for a in (0, 3, 2 * pj.get("alignment", 1), 1):
        m(f"alignment {a}", lambda q, a=a: q.__setitem__("alignment", a))
    m("arena-1", lambda q: q.__setitem__("arena_bytes", q["arena_bytes"] - 1))
    m("arena half", lambda q: q.__setitem__("arena_bytes", q["arena_bytes"] // 2))
    ws = pj.get("weights", [])
    for i in range(len(ws)):
        for j in range(len(ws)):
            if i != j and ws[j]["bytes"] and ws[i]["bytes"]:
                m(f"weight {ws[i]['tensor']} onto {ws[j]['tensor']}", lambda q, i=i, j=j: q["weights"][i].__setitem__("offset", q["weights"][j]["offset"] + (q["weights"][j]["bytes"] - 1)))
                break
        m(f"drop weight {ws[i]['tensor']}", lambda q, i=i: q["weights"].pop(i))
    if len(ws) >= 2:
        m("swap weights", lambda q: q["weights"].__setitem__(slice(0, 2), q["weights"][1::-1]))
    m("weight_bytes-1", lambda q: q.__setitem__("weight_bytes", q["weight_bytes"] - 1))
    st = pj.get("settings", {})
    for key in ("views", "inplace", "inplace_over_inputs", "concat_elision", "inputs_in_arena", "outputs_in_arena", "fold_weights"):
        if key in st:
            m(f"flip {key}", lambda q, key=key: q["settings"].__setitem__(key, not q["settings"][key]))
    if st.get("bindings"):
        for k in range(len(st["bindings"])):
            for delta in (-1, 1, -st["bindings"][k][1]):
                m(f"binding {st['bindings'][k][0]}{delta:+}", lambda q, k=k, delta=delta: q["settings"]["bindings"][k].__setitem__(1, q["settings"]["bindings"][k][1] + delta))
        m("drop bindings", lambda q: q["settings"].__setitem__("bindings", []))
        if st.get("bounded"):
            m("drop bounded", lambda q: q["settings"].pop("bounded"))
        else:
            m("add bounded", lambda q: q["settings"].__setitem__("bounded", [q["settings"]["bindings"][0][0]]))
    m("opaque Relu", lambda q: q["settings"].__setitem__("opaque_ops", ["Relu", "Softmax", "Concat"]))
    sch = pj.get("schedule", [])
    for i in range(len(sch) - 1):
        m(f"swap steps {i}", lambda q, i=i: q["schedule"].__setitem__(slice(i, i + 2), q["schedule"][i + 1:i - 1 if i else None:-1]))
    for wi, w in enumerate(pj.get("workspaces", [])):
        m(f"ws bytes-1 {w['node']}", lambda q, wi=wi: q["workspaces"][wi].__setitem__("bytes", q["workspaces"][wi]["bytes"] - 1))
        m(f"ws bytes half {w['node']}", lambda q, wi=wi: q["workspaces"][wi].__setitem__("bytes", q["workspaces"][wi]["bytes"] // 2))
        m(f"ws offset+align {w['node']}", lambda q, wi=wi: q["workspaces"][wi].__setitem__("offset", q["workspaces"][wi]["offset"] + q["alignment"]))
        m(f"ws offset 0 {w['node']}", lambda q, wi=wi: q["workspaces"][wi].__setitem__("offset", 0))
        m(f"ws step+1 {w['node']}", lambda q, wi=wi: q["workspaces"][wi].__setitem__("step", q["workspaces"][wi]["step"] + 1))
        m(f"ws drop {w['node']}", lambda q, wi=wi: q["workspaces"].pop(wi))
        for bi, b in enumerate(w.get("bodies", [])):
            m(f"ws drop body {w['node']}.{b['attr']}", lambda q, wi=wi, bi=bi: q["workspaces"][wi]["bodies"].pop(bi))
            # mutate inside the body plan
            inner = list(mutations_body(b["plan"], rng))
            for desc, ip in inner:
                def f(q, wi=wi, bi=bi, ip=ip):
                    q["workspaces"][wi]["bodies"][bi]["plan"] = ip
                m(f"body {w['node']}.{b['attr']}: {desc}", f)
    return out


def q_align(pj):
    return pj.get("alignment", 1)


def mutations_body(bp, rng):
    bufs = bp.get("buffers", [])
    res = []
    for i, b in enumerate(bufs):
        for desc, f in ((f"offset+align {b['tensor']}", lambda q, i=i: q["buffers"][i].__setitem__("offset", q["buffers"][i]["offset"] + q["alignment"])),
                        (f"offset 0 {b['tensor']}", lambda q, i=i: q["buffers"][i].__setitem__("offset", 0)),
                        (f"drop {b['tensor']}", lambda q, i=i: q["buffers"].pop(i)),
                        (f"last-1 {b['tensor']}", lambda q, i=i: q["buffers"][i].__setitem__("last", q["buffers"][i]["last"] - 1))):
            q = copy.deepcopy(bp)
            f(q)
            res.append((desc, q))
    q = copy.deepcopy(bp)
    q["arena_bytes"] = q["arena_bytes"] // 2
    res.append(("arena half", q))
    for wi, w in enumerate(bp.get("workspaces", [])):
        q = copy.deepcopy(bp)
        q["workspaces"][wi]["bytes"] //= 2
        res.append((f"nested ws half {w['node']}", q))
        q = copy.deepcopy(bp)
        q["workspaces"][wi]["bodies"] = []
        res.append((f"nested ws no bodies {w['node']}", q))
        for bi, b in enumerate(w.get("bodies", [])):
            for desc, ip in mutations_body(b["plan"], rng):
                q = copy.deepcopy(bp)
                q["workspaces"][wi]["bodies"][bi]["plan"] = ip
                res.append((f"nested {w['node']}.{b['attr']}: {desc}", q))
    return res


def write_plan(path, pj):
    with open(path, "w") as f:
        json.dump(pj, f)


def main(pattern, limit_per_plan=400, seed=1):
    rng = random.Random(seed)
    plans = sorted(glob.glob(os.path.join(WORK, pattern + ".plan.json")))
    counts = Counter()
    bad = []
    mp = os.path.join(WORK, "_mutant.json")
    for pp in plans:
        gp = pp.replace(".plan.json", ".json")
        if not os.path.exists(gp):
            continue
        gj = json.load(open(gp))
        pj = json.load(open(pp))
        muts = mutations(pj, rng)
        if len(muts) > limit_per_plan:
            muts = rng.sample(muts, limit_per_plan)
        for desc, q in muts:
            write_plan(mp, q)
            rc, out, err = harness.run(["check", gp, "--plan", mp, "-q", "--format", "json"])
            counts[f"check rc {rc}"] += 1
            if rc not in (0, 1, 2):
                bad.append((gp, desc, f"check rc {rc}: {err[-300:]}"))
                continue
            if rc == 1:
                try:
                    j = json.loads(out)
                    if "ok" not in j:
                        bad.append((gp, desc, "rc 1 without ok"))
                except json.JSONDecodeError:
                    bad.append((gp, desc, f"rc 1 without JSON: {err[-200:]}"))
            if rc != 0:
                continue
            # accepted: simulate at the plan's binding (and smaller ones when bounded)
            defects = []
            for b in sim.bindings_to_try(sim.Graph(gj), q):
                try:
                    rep = sim.simulate(gj, q, b)
                    defects += [(k, f"at {b}: {msg}") for k, msg in rep.defects]
                except sim.SimError as e:
                    defects.append(("error", str(e)))
                except Exception as e:  # noqa: BLE001
                    defects.append(("error", f"sim crash {e!r}"))
            real = [d for d in defects if d[0] != "error"]
            if real:
                counts["ACCEPTED-UNSAFE"] += 1
                bad.append((gp, desc, real[:3]))
                keep = os.path.join(WORK, "accepted_" + os.path.basename(gp).replace(".json", "") + "_" + str(counts["ACCEPTED-UNSAFE"]) + ".plan.json")
                write_plan(keep, q)
            elif defects:
                counts["accepted, sim error"] += 1
            else:
                counts["accepted safe"] += 1
    for gp, desc, why in bad[:60]:
        print(os.path.basename(gp), "|", desc, "|", why)
    print(dict(counts), "plans:", len(plans))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "*", int(sys.argv[2]) if len(sys.argv) > 2 else 400)
