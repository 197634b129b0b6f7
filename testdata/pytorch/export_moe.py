#!/usr/bin/env python3
"""Mixtral-style mixture-of-experts blocks exported every way memplan's `--bound` must plan
(issue 36, item 10): 4 or 8 experts, 2 per token, each expert a SwiGLU MLP, the routing
written three ways that exporters turn into different data-dependent graphs:

- `where`: transformers' classic loop (`torch.where` over a one-hot mask of the routing,
  the tokens gathered, the results added back with `index_add_`): NonZero counts;
- `split`: the routed tokens sorted by expert and split by their counts (`.tolist()`): the
  TorchScript exporter traces the counts of its example as a constant `split`, the dynamo
  exporter makes them data-dependent;
- `range`: the sorted tokens' per-expert offsets (`cumsum` of the counts) and each expert's
  rows gathered with `arange(start, end)`: a `Range` over data-dependent bounds.

Each is exported with the dynamo exporter at opsets 18, 20 and 23 and with the TorchScript
exporter (opset 17, and 20 where it can), with static shapes (`batch` 2, `seq` 8: every
size left to `--bound` is data-dependent) and with `batch` and `seq` symbolic. Hand-run,
never by CI:

    /work/venv/bin/python testdata/pytorch/export_moe.py OUT   # OUT/moe_<style>_e<E>_<exporter>[_dyn].onnx

Weights (random; 1 KiB or more) go to external data, which is deleted: memplan reads shapes
and small constants. Failures are written as `<name>.failed` with the exporter's error.
"""

import contextlib
import io
import os
import sys
import warnings

import onnx
import torch
from torch import nn

HIDDEN, INTER, TOP_K = 32, 64, 2
BATCH, SEQ = 2, 8


class Expert(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(HIDDEN, INTER, bias=False)
        self.w3 = nn.Linear(HIDDEN, INTER, bias=False)
        self.w2 = nn.Linear(INTER, HIDDEN, bias=False)

    def forward(self, x):
        return self.w2(nn.functional.silu(self.w1(x)) * self.w3(x))


def add_rows(out, rows, y):
    """`out[rows] += y`, repeated rows adding up (a scatter-add the TorchScript exporter can
    write, where it refuses `index_add` with repeated indices)."""
    return out.scatter_add(0, rows[:, None].expand(-1, y.shape[1]), y)


class Moe(nn.Module):
    def __init__(self, experts, style):
        super().__init__()
        self.n = experts
        self.style = style
        self.gate = nn.Linear(HIDDEN, experts, bias=False)
        self.experts = nn.ModuleList(Expert() for _ in range(experts))
        self.head = nn.Linear(HIDDEN, HIDDEN, bias=False)

    def forward(self, x):
        b, s, h = x.shape
        t = x.reshape(-1, h)
        probs = torch.softmax(self.gate(t), dim=-1)
        weights, chosen = torch.topk(probs, TOP_K, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(t)
        if self.style == "where":
            mask = nn.functional.one_hot(chosen, self.n).permute(2, 1, 0)
            for e, expert in enumerate(self.experts):
                slot, token = torch.where(mask[e])
                y = expert(t[token]) * weights[token, slot, None]
                out = add_rows(out, token, y)
        else:
            flat = chosen.reshape(-1)
            order = flat.argsort()
            token = order // TOP_K
            routed = t[token]
            w = weights.reshape(-1)[order, None]
            counts = nn.functional.one_hot(flat, self.n).sum(0)
            if self.style == "split":
                sizes = counts.tolist()
                if not torch.jit.is_tracing():
                    for c in sizes:
                        torch._check_is_size(c)
                    torch._check(sum(sizes) == routed.shape[0])
                parts = torch.split(routed, sizes)
                y = torch.cat([e(p) for e, p in zip(self.experts, parts)]) * w
                out = add_rows(out, token, y)
            else:
                ends = counts.cumsum(0)
                starts = ends - counts
                for e, expert in enumerate(self.experts):
                    lo, hi = starts[e], ends[e]
                    if not torch.jit.is_tracing():
                        lo, hi = lo.item(), hi.item()
                        torch._check(lo >= 0)
                        torch._check(hi >= lo)
                        torch._check(hi <= routed.shape[0])
                    rows = torch.arange(lo, hi)
                    y = expert(routed[rows]) * w[rows]
                    out = add_rows(out, token[rows], y)
        return self.head(out).reshape(b, s, h)


EXPORTERS = {
    "dynamo18": dict(dynamo=True, opset_version=18),
    "dynamo20": dict(dynamo=True, opset_version=20),
    "dynamo23": dict(dynamo=True, opset_version=23),
    "torchscript": dict(dynamo=False, opset_version=17),
    "torchscript20": dict(dynamo=False, opset_version=20),
}


def strip(path, out):
    model = onnx.load(path)
    for node in model.graph.node:
        del node.metadata_props[:]
        node.doc_string = ""
    for f in os.listdir(out):
        if f.endswith(".data"):
            os.remove(os.path.join(out, f))
    data = os.path.basename(path) + ".data"
    onnx.save_model(
        model, path, save_as_external_data=True, all_tensors_to_one_file=True,
        location=data, size_threshold=1024,
    )
    os.remove(os.path.join(out, data))


def main(out):
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    example = torch.randn(BATCH, SEQ, HIDDEN)
    for style in ["where", "split", "range"]:
        for experts in [4, 8]:
            module = Moe(experts, style).eval()
            for exporter, options in EXPORTERS.items():
                for dynamic in [False, True]:
                    name = f"moe_{style}_e{experts}_{exporter}" + ("_dyn" if dynamic else "")
                    path = os.path.join(out, name + ".onnx")
                    kwargs = dict(input_names=["x"], output_names=["y"], **options)
                    if dynamic and options["dynamo"]:
                        kwargs["dynamic_shapes"] = (
                            {0: torch.export.Dim("batch", min=1, max=64),
                             1: torch.export.Dim("seq", min=1, max=512)},
                        )
                    elif dynamic:
                        kwargs["dynamic_axes"] = {"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}}
                    if options["dynamo"]:
                        kwargs["external_data"] = True
                    try:
                        with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                            warnings.simplefilter("ignore")
                            torch.onnx.export(module, (example,), path, **kwargs)
                        strip(path, out)
                        print("ok    ", name)
                    except Exception as e:  # noqa: BLE001
                        with open(os.path.join(out, name + ".failed"), "w") as f:
                            f.write(f"{type(e).__name__}: {e}"[:4000])
                        print("failed", name, type(e).__name__, str(e)[:200].replace("\n", " "))
                        if os.path.exists(path):
                            os.remove(path)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/memplan-moe")
