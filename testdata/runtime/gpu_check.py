#!/usr/bin/env python3
"""What PyTorch's CUDA caching allocator really holds for the steps `harness.py` counts on
fake tensors (run once on a GPU by hand, never by CI; its output is `gpu_check.json`).

For each workload below, on `cuda:0`:
- a training step as `harness.py` runs it (the second step of a loop, the optimizer's states
  already made): `torch.cuda.max_memory_allocated()` and `max_memory_reserved()` over the
  step, the peak reached by the end of the forward, the backward and the optimizer step,
  and what was allocated when the step began;
- or one inference forward (`use_cache=True`, `logits_to_keep`);
- the kernel SDPA picked for each call (`torch._fused_sdp_choice` on the call's arguments);
- for a few workloads, the allocator's own trace of the step
  (`torch.cuda.memory._record_memory_history`): every allocation, free and segment, for
  replaying memplan's allocator model on what PyTorch really asked for.
Also measured: the cuBLAS/cuBLASLt workspaces a first matrix product and a first backward
allocate through the caching allocator, and SDPA's kernel choice over a grid of shapes.

The same workloads counted on fake tensors (`harness.py`'s `train_run`/`infer_run` on the
configs listed here) and estimated by memplan give a three-way comparison: device, fake
tensors, memplan (not yet run: see `README.md`).

`--rows FILE` also writes each run as a row of `training.jsonl`/`inference.jsonl`'s format
(the config as `config.json` holds it, the settings, `peak_rounded_bytes` = the device's
`max_memory_allocated`, `peak_reserved_bytes` = its `max_memory_reserved`), which
`cargo run -p memplan-tracker --example runtime_truth -- FILE` compares with memplan's
estimate and allocator margin.

A workload whose config is `None` takes the first config given for its model type.

Usage: python3 gpu_check.py --out result.json [--rows rows.jsonl] [--device cpu --quick]
(cpu: a dry run of the code paths, no memory figures)
"""

import argparse
import gzip
import json
import math
import sys
import time

import torch
import torch.nn.functional as F

WORKLOADS = [
    # (name, model_type, config keys, setting)
    ("llama-mixed", "llama",
     dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=4, num_attention_heads=16,
          num_key_value_heads=4, vocab_size=32000, tie_word_embeddings=False),
     dict(mode="train", batch=4, seq=1024, precision="mixed", attention="sdpa",
          checkpointing="none", kernel="foreach", trace=True)),
    ("llama-amp", "llama", None,
     dict(mode="train", batch=4, seq=1024, precision="amp", attention="sdpa",
          checkpointing="none", kernel="foreach")),
    ("llama-pure-eager-fused", "llama", None,
     dict(mode="train", batch=2, seq=512, precision="pure", attention="eager",
          checkpointing="none", kernel="fused")),
    ("llama-mixed-full", "llama", None,
     dict(mode="train", batch=4, seq=1024, precision="mixed", attention="sdpa",
          checkpointing="full", kernel="foreach")),
    ("llama-fp32-pertensor", "llama", None,
     dict(mode="train", batch=2, seq=512, precision="fp32", attention="sdpa",
          checkpointing="none", kernel="per-tensor")),
    ("qwen2-mixed", "qwen2",
     dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=3, num_attention_heads=14,
          num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
     dict(mode="train", batch=2, seq=1024, precision="mixed", attention="sdpa",
          checkpointing="none", kernel="foreach", trace=True)),
    ("gpt2-amp", "gpt2",
     dict(n_embd=768, n_layer=4, n_head=12, vocab_size=50257, n_positions=1024),
     dict(mode="train", batch=4, seq=512, precision="amp", attention="sdpa",
          checkpointing="none", kernel="foreach")),
    ("gemma2-pure-eager", "gemma2",
     dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=2, num_attention_heads=8,
          num_key_value_heads=4, head_dim=128, vocab_size=32000, sliding_window=256),
     dict(mode="train", batch=2, seq=512, precision="pure", attention="eager",
          checkpointing="none", kernel="foreach")),
    ("mixtral-mixed", "mixtral",
     dict(hidden_size=512, intermediate_size=1024, num_hidden_layers=2, num_attention_heads=8,
          num_key_value_heads=2, vocab_size=32000, num_local_experts=4, num_experts_per_tok=2),
     dict(mode="train", batch=2, seq=512, precision="mixed", attention="sdpa",
          checkpointing="none", kernel="foreach")),
    ("llama-infer-sdpa", "llama", None,
     dict(mode="infer", batch=8, seq=2048, dtype="bf16", attention="sdpa", logits="last",
          trace=True)),
    ("llama-infer-eager", "llama", None,
     dict(mode="infer", batch=2, seq=1024, dtype="f16", attention="eager", logits="all")),
    ("mistral-infer-window", "mistral",
     dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=2, num_attention_heads=16,
          num_key_value_heads=4, vocab_size=32000, sliding_window=256),
     dict(mode="infer", batch=4, seq=1024, dtype="bf16", attention="sdpa", logits="last")),
]

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}

SDPA_SEEN = {}


def backend_name(code):
    try:
        from torch.nn.attention import SDPBackend
        return SDPBackend(code).name.lower()
    except Exception:
        return str(code)


def sdpa_choice(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                enable_gqa=False):
    try:
        return backend_name(torch._fused_sdp_choice(q, k, v, attn_mask, dropout_p, is_causal,
                                                    scale, enable_gqa))
    except Exception as e:  # CPU or an older signature
        return f"?{type(e).__name__}"


_sdpa = F.scaled_dot_product_attention


def recording_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                   scale=None, enable_gqa=False):
    name = sdpa_choice(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    SDPA_SEEN[name] = SDPA_SEEN.get(name, 0) + 1
    return _sdpa(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                 is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)


def stats(device):
    if device != "cuda":
        return {}
    s = torch.cuda.memory_stats()
    keys = ["allocated_bytes.all.current", "allocated_bytes.all.peak",
            "reserved_bytes.all.current", "reserved_bytes.all.peak",
            "active_bytes.all.peak", "requested_bytes.all.peak", "segment.all.peak",
            "num_alloc_retries", "num_ooms", "inactive_split_bytes.all.peak"]
    return {k: s.get(k) for k in keys}


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def max_alloc(device):
    return torch.cuda.max_memory_allocated() if device == "cuda" else 0


def build(model_type, kw, dtype, attention, device, gradient_checkpointing):
    from transformers import AutoConfig, AutoModelForCausalLM
    config = AutoConfig.for_model(model_type, **kw)
    config._attn_implementation = attention
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype,
                                                 attn_implementation=attention)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs=dict(use_reentrant=False))
    return model, config


def config_json(model_type, kw):
    """The config as `config.json` holds it, for memplan to read (as `harness.py` writes it)."""
    from transformers import AutoConfig
    d = AutoConfig.for_model(model_type, **kw).to_diff_dict()
    d["model_type"] = model_type
    return d


def compact_trace(snapshot):
    """(action, addr, size) of every event, actions numbered."""
    names = {}
    rows = []
    for trace in snapshot.get("device_traces", []):
        for ev in trace:
            a = names.setdefault(ev["action"], len(names))
            rows.append([a, ev.get("addr", 0), ev.get("size", 0)])
    return {"actions": {v: k for k, v in names.items()}, "events": rows}


def train(name, model_type, kw, s, device, quick):
    precision = s["precision"]
    dtype = {"fp32": torch.float32, "amp": torch.float32, "mixed": torch.bfloat16,
             "pure": torch.bfloat16}[precision]
    batch, seq = (1, 64) if quick else (s["batch"], s["seq"])
    model, config = build(model_type, kw, dtype, s["attention"], device,
                          s["checkpointing"] == "full")
    model.train()
    masters = [p.detach().float().requires_grad_(True) for p in model.parameters()] \
        if precision == "mixed" else []
    params = masters if precision == "mixed" else list(model.parameters())
    kernel_kw = {"foreach": dict(foreach=True), "fused": dict(fused=True),
                 "per-tensor": dict(foreach=False)}[s["kernel"]]
    if device != "cuda" and s["kernel"] == "fused":
        kernel_kw = dict(foreach=False)
    optimizer = torch.optim.AdamW(params, lr=1e-4, **kernel_kw)
    out = {}

    def step(record):
        ids = torch.randint(0, config.vocab_size - 8, (batch, seq), device=device)
        if record:
            sync(device)
            if device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            out["start_allocated"] = torch.cuda.memory_allocated() if device == "cuda" else 0
            out["start_reserved"] = torch.cuda.memory_reserved() if device == "cuda" else 0
            if s.get("trace") and device == "cuda" and not quick:
                torch.cuda.memory._record_memory_history(max_entries=400000)
        with torch.autocast(device_type=device, dtype=torch.bfloat16,
                            enabled=precision == "amp"):
            result = model(input_ids=ids, labels=ids, use_cache=False)
        loss = result.loss
        del result
        if record:
            sync(device)
            out["peak_after_forward"] = max_alloc(device)
        loss.backward()
        del loss
        if record:
            sync(device)
            out["peak_after_backward"] = max_alloc(device)
        if precision == "mixed":
            for p, m in zip(model.parameters(), masters):
                m.grad = p.grad.float() if p.grad is not None else None
                p.grad = None
        optimizer.step()
        if precision == "mixed":
            with torch.no_grad():
                for p, m in zip(model.parameters(), masters):
                    p.copy_(m)
        optimizer.zero_grad(set_to_none=True)
        model.zero_grad(set_to_none=True)
        del ids
        if record:
            sync(device)
            out["peak_after_optimizer"] = max_alloc(device)
            if device == "cuda":
                out["peak_allocated"] = torch.cuda.max_memory_allocated()
                out["peak_reserved"] = torch.cuda.max_memory_reserved()
                out["memory_stats"] = stats(device)
                if s.get("trace") and not quick:
                    out["trace"] = compact_trace(torch.cuda.memory._snapshot())
                    torch.cuda.memory._record_memory_history(enabled=None)

    step(False)
    SDPA_SEEN.clear()
    step(True)
    out["sdpa"] = dict(SDPA_SEEN)
    out["parameters"] = sum(p.numel() for p in model.parameters())
    del model, optimizer, masters, params
    return out


def infer(name, model_type, kw, s, device, quick):
    dtype = DTYPES[s["dtype"]]
    batch, seq = (1, 64) if quick else (s["batch"], s["seq"])
    model, config = build(model_type, kw, dtype, s["attention"], device, False)
    model.eval()
    out = {}
    ids = torch.randint(0, config.vocab_size - 8, (batch, seq), device=device)
    sync(device)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        out["start_allocated"] = torch.cuda.memory_allocated()
        out["start_reserved"] = torch.cuda.memory_reserved()
        if s.get("trace") and not quick:
            torch.cuda.memory._record_memory_history(max_entries=400000)
    SDPA_SEEN.clear()
    with torch.no_grad():
        result = model(input_ids=ids, use_cache=True,
                       logits_to_keep=1 if s["logits"] == "last" else 0)
    sync(device)
    if device == "cuda":
        out["peak_allocated"] = torch.cuda.max_memory_allocated()
        out["peak_reserved"] = torch.cuda.max_memory_reserved()
        out["end_allocated"] = torch.cuda.memory_allocated()
        out["memory_stats"] = stats(device)
        if s.get("trace") and not quick:
            out["trace"] = compact_trace(torch.cuda.memory._snapshot())
            torch.cuda.memory._record_memory_history(enabled=None)
    cache = getattr(result, "past_key_values", None)
    kv = 0
    for layer in getattr(cache, "layers", []) or []:
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(t, torch.Tensor):
                kv += t.numel() * t.element_size()
    out["kv_cache_bytes"] = kv
    out["sdpa"] = dict(SDPA_SEEN)
    out["parameters"] = sum(p.numel() for p in model.parameters())
    del result, model, ids
    return out


def workspaces(device):
    """What the first matrix products and a first backward allocate beyond their results."""
    if device != "cuda":
        return {}
    out = {}
    torch.cuda.synchronize()
    for dtype in (torch.bfloat16, torch.float32):
        a = torch.randn(1024, 1024, device=device, dtype=dtype)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        c = a @ a
        torch.cuda.synchronize()
        out[f"matmul_{dtype}"] = torch.cuda.memory_allocated() - before - c.numel() * c.element_size()
        del a, c
    x = torch.randn(64, 1024, device=device, requires_grad=True)
    w = torch.randn(1024, 1024, device=device, requires_grad=True)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    (x @ w).sum().backward()
    torch.cuda.synchronize()
    grads = sum(t.grad.numel() * t.grad.element_size() for t in (x, w))
    out["first_backward_extra"] = torch.cuda.memory_allocated() - before - grads
    out["allocated_now"] = torch.cuda.memory_allocated()
    del x, w
    return out


def sdpa_grid(device):
    """SDPA's pick over shapes, dtypes, masks and grouped heads (forward and with grad)."""
    rows = []
    if device != "cuda":
        return rows
    for dtype in ("bf16", "f16", "f32"):
        for d in (64, 80, 96, 128, 192, 256):
            for heads, kv in ((8, 8), (8, 2), (8, 1)):
                for mask in ("none", "bool", "float"):
                    for grad in (False, True):
                        for gqa in ((False, True) if kv != heads else (False,)):
                            b, s = 2, 256
                            t = DTYPES[dtype]
                            q = torch.empty(b, heads, s, d, device=device, dtype=t,
                                            requires_grad=grad)
                            kh = kv if gqa else heads
                            k = torch.empty(b, kh, s, d, device=device, dtype=t,
                                            requires_grad=grad)
                            v = torch.empty(b, kh, s, d, device=device, dtype=t,
                                            requires_grad=grad)
                            m = None
                            if mask == "bool":
                                m = torch.ones(b, 1, s, s, device=device, dtype=torch.bool)
                            elif mask == "float":
                                m = torch.zeros(b, 1, s, s, device=device, dtype=t)
                            rows.append(dict(dtype=dtype, head_dim=d, heads=heads, kv_heads=kh,
                                             mask=mask, grad=grad, enable_gqa=gqa,
                                             causal=mask == "none",
                                             backend=sdpa_choice(q, k, v, m, 0.0, mask == "none",
                                                                 None, gqa)))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--rows", help="also write each run as a row of training.jsonl's format")
    ap.add_argument("--time-limit", type=float, default=170,
                    help="skip the workloads left after this many seconds")
    args = ap.parse_args()
    device = args.device
    t0 = time.time()
    import transformers
    env = dict(torch=torch.__version__, transformers=transformers.__version__,
               python=sys.version.split()[0])
    if device == "cuda":
        p = torch.cuda.get_device_properties(0)
        env.update(gpu=p.name, memory_bytes=p.total_memory, capability=f"{p.major}.{p.minor}",
                   cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version())
    result = dict(env=env, workspaces=workspaces(device), sdpa_grid=sdpa_grid(device), runs=[])
    F.scaled_dot_product_attention = recording_sdpa
    torch.nn.functional.scaled_dot_product_attention = recording_sdpa
    configs = {}
    for _, model_type, kw, _ in WORKLOADS:
        if kw is not None:
            configs.setdefault(model_type, kw)
    traces = {}
    rows = []
    for name, model_type, kw, s in WORKLOADS:
        if args.only and name not in args.only:
            continue
        kw = kw if kw is not None else configs[model_type]
        if time.time() - t0 > args.time_limit:
            print(f"{name}: skipped (time)", file=sys.stderr)
            continue
        t1 = time.time()
        try:
            if s["mode"] == "train":
                row = train(name, model_type, kw, s, device, args.quick)
            else:
                row = infer(name, model_type, kw, s, device, args.quick)
            err = None
        except Exception as e:
            row, err = {}, f"{type(e).__name__}: {e}"
        if device == "cuda":
            torch.cuda.empty_cache()
        trace = row.pop("trace", None)
        if trace is not None:
            traces[name] = trace
        setting = {k: v for k, v in s.items() if k not in ("trace", "mode")}
        if args.quick:
            setting.update(batch=1, seq=64)
        result["runs"].append(dict(name=name, model_type=model_type, config=kw,
                                   setting=setting, error=err,
                                   seconds=round(time.time() - t1, 2), **row))
        if err is None and "peak_allocated" in row:
            rows.append(dict(name=name, model_type=model_type,
                             config=config_json(model_type, kw), **setting,
                             peak_rounded_bytes=row["peak_allocated"],
                             peak_reserved_bytes=row["peak_reserved"],
                             start_bytes=row["start_allocated"], sdpa_kernels=row["sdpa"],
                             device=env.get("gpu"), source="gpu_check.py"))
        print(f"{name}: {err or row.get('peak_allocated')} in {time.time() - t1:.1f}s",
              file=sys.stderr, flush=True)
    result["seconds"] = round(time.time() - t0, 1)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
    if args.rows:
        with open(args.rows, "w") as f:
            for r in rows:
                f.write(json.dumps(r, sort_keys=True) + "\n")
    if traces:
        with gzip.open(args.out.replace(".json", "") + "_traces.json.gz", "wt") as f:
            json.dump(traces, f)
    print(f"done in {result['seconds']}s", file=sys.stderr)


if __name__ == "__main__":
    main()
