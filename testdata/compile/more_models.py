#!/usr/bin/env python3
"""Models in neither testdata/fusion nor harness.py (issue 42): a MobileNetV2-like CNN
(inverted residuals, depthwise convolutions, BatchNorm, ReLU6) and a causal grouped-query
decoder (8 query heads over 2 key-value heads repeated by `repeat_interleave`, tanh
soft-capping and RMSNorm written out, a boolean causal mask by `masked_fill`, SiLU MLP).

Run by hand (not by CI), with harness.py's environment:

    python testdata/compile/more_models.py OUT

writes OUT/<name>_<exporter>.onnx (dynamo at opsets 18, 20, 23 and TorchScript, weights
deleted) and OUT/peaks.csv (PyTorch eager, torch.compile and torch.compile with freezing,
measured as harness.py measures them; the run of 2026-11-28 is more_peaks.csv); plan each
at the dims peaks.csv names (commands in docs/MEASUREMENTS.md, 2026-11-28).
"""
import contextlib, csv, io, os, sys, warnings
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import harness

torch.manual_seed(0)

class InvRes(torch.nn.Module):
    def __init__(s, c, e):
        super().__init__()
        s.a = torch.nn.Conv2d(c, c * e, 1); s.ba = torch.nn.BatchNorm2d(c * e)
        s.d = torch.nn.Conv2d(c * e, c * e, 3, padding=1, groups=c * e); s.bd = torch.nn.BatchNorm2d(c * e)
        s.p = torch.nn.Conv2d(c * e, c, 1); s.bp = torch.nn.BatchNorm2d(c)
    def forward(s, x):
        h = torch.nn.functional.relu6(s.ba(s.a(x)))
        h = torch.nn.functional.relu6(s.bd(s.d(h)))
        return x + s.bp(s.p(h))

class MobileNetish(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.stem = torch.nn.Conv2d(3, 32, 3, stride=2, padding=1)
        s.blocks = torch.nn.Sequential(*[InvRes(32, 4) for _ in range(3)])
        s.down = torch.nn.Conv2d(32, 64, 3, stride=2, padding=1)
        s.blocks2 = torch.nn.Sequential(*[InvRes(64, 4) for _ in range(3)])
        s.head = torch.nn.Linear(64, 100)
    def forward(s, x):
        x = s.blocks2(s.down(s.blocks(s.stem(x))))
        return s.head(x.mean((2, 3)))

class CausalGQA(torch.nn.Module):
    """Decoder layers: causal GQA self-attention (8 query heads, 2 kv heads) with tanh
    soft-capping written out, SiLU MLP, RMSNorm written out."""
    def __init__(s, d=256, h=8, kv=2, layers=3):
        super().__init__()
        s.h, s.kv, s.dh = h, kv, d // h
        s.emb = torch.nn.Embedding(1000, d)
        s.q = torch.nn.ModuleList([torch.nn.Linear(d, d, bias=False) for _ in range(layers)])
        s.k = torch.nn.ModuleList([torch.nn.Linear(d, kv * s.dh, bias=False) for _ in range(layers)])
        s.v = torch.nn.ModuleList([torch.nn.Linear(d, kv * s.dh, bias=False) for _ in range(layers)])
        s.o = torch.nn.ModuleList([torch.nn.Linear(d, d, bias=False) for _ in range(layers)])
        s.up = torch.nn.ModuleList([torch.nn.Linear(d, 4 * d, bias=False) for _ in range(layers)])
        s.down = torch.nn.ModuleList([torch.nn.Linear(4 * d, d, bias=False) for _ in range(layers)])
        s.w = torch.nn.ParameterList([torch.nn.Parameter(torch.ones(d)) for _ in range(2 * layers)])
    def rms(s, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    def forward(s, ids):
        b, n = ids.shape
        x = s.emb(ids)
        causal = torch.ones(n, n, dtype=torch.bool, device=ids.device).tril()
        for i in range(len(s.q)):
            h = s.rms(x, s.w[2 * i])
            q = s.q[i](h).view(b, n, s.h, s.dh).transpose(1, 2)
            k = s.k[i](h).view(b, n, s.kv, s.dh).transpose(1, 2).repeat_interleave(s.h // s.kv, 1)
            v = s.v[i](h).view(b, n, s.kv, s.dh).transpose(1, 2).repeat_interleave(s.h // s.kv, 1)
            sc = (q @ k.transpose(-1, -2)) / s.dh ** 0.5
            sc = torch.tanh(sc / 30.0) * 30.0
            sc = sc.masked_fill(~causal, float("-inf"))
            a = (sc.softmax(-1) @ v).transpose(1, 2).reshape(b, n, -1)
            x = x + s.o[i](a)
            h = s.rms(x, s.w[2 * i + 1])
            x = x + s.down[i](torch.nn.functional.silu(s.up[i](h)))
        return x

MODELS = {
    "mobilenetish": (MobileNetish, lambda: (torch.randn(2, 3, 224, 224),), ["pixel_values"],
                     {"pixel_values": {0: "batch"}}, ["batch=2"]),
    "causal_gqa": (CausalGQA, lambda: (torch.randint(0, 1000, (2, 512)),), ["input_ids"],
                   {"input_ids": {0: "batch", 1: "seq"}}, ["batch=2", "seq=512"]),
}

if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rows = []
    for name, (make, mk, names, axes, dims) in MODELS.items():
        m = make().eval()
        for exporter, options in harness.EXPORTERS.items():
            path = os.path.join(out, f"{name}_{exporter}.onnx")
            kw = dict(input_names=names, **options)
            if options["dynamo"]:
                ds = {}
                shapes = []
                for nm in names:
                    spec = {}
                    for a, label in axes.get(nm, {}).items():
                        ds.setdefault(label, torch.export.Dim(label, min=2, max=1024))
                        spec[a] = ds[label]
                    shapes.append(spec)
                kw["dynamic_shapes"] = tuple(shapes); kw["external_data"] = True
            else:
                kw["dynamic_axes"] = axes
            try:
                with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
                    warnings.simplefilter("ignore")
                    torch.onnx.export(m, mk(), path, **kw)
                harness.strip(path)
                print(name, exporter, "ok", file=sys.stderr, flush=True)
            except Exception as e:
                print(name, exporter, "failed", str(e)[:200], file=sys.stderr, flush=True)
        row = {"model": name, "dims": " ".join(dims), "eager": harness.peak_of(m, mk)}
        import torch._inductor.config as ind
        for key, frz in (("compile", False), ("compile_frozen", True)):
            torch._dynamo.reset(); ind.freezing = frz
            row[key] = harness.peak_of(torch.compile(m), mk)
        ind.freezing = False; torch._dynamo.reset()
        print(row, file=sys.stderr, flush=True)
        rows.append(row)
        with open(os.path.join(out, "peaks.csv"), "w") as f:
            w = csv.DictWriter(f, ["model", "dims", "eager", "compile", "compile_frozen"], lineterminator="\n")
            w.writeheader(); [w.writerow(r) for r in rows]
