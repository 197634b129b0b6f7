#!/usr/bin/env python3
"""ONNX Runtime transformer optimizer outputs of the harness's BERT, GPT-2 and ViT: exported
with weights (TorchScript, opset 17; and dynamo 18), fused by
onnxruntime.transformers.optimizer (com.microsoft Attention, SkipLayerNormalization,
FastGelu/BiasGelu, ...), then stripped of weights like harness.strip. Run by hand:

    python testdata/compile/ort_opt.py OUT [eager]   # OUT/<name>_ortopt[_eager]_<exporter>.onnx

The peaks to compare with are harness.py's (peaks.csv): the models are the same."""
import contextlib, io, os, sys, warnings
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import harness
from onnxruntime.transformers import optimizer

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
ATTN = sys.argv[2] if len(sys.argv) > 2 else "sdpa"
table = harness.models(ATTN)
spec = {"bert": ("bert", 4, 256), "gpt": ("gpt2", 4, 256), "vit": ("vit", 4, 256)}
for name, (mtype, heads, hidden) in spec.items():
    make, make_inputs, names, axes, _ = table[name]
    module = make().eval()
    example = tuple(torch.cat([t, t]) if n in axes and 0 in axes[n] and t.shape[0] == 1 else t
                    for n, t in zip(names, make_inputs()))
    for exporter in ("torchscript", "dynamo18"):
        raw = os.path.join(out, f"raw_{name}_{ATTN}_{exporter}.onnx")
        kw = dict(input_names=names, opset_version=17 if exporter == "torchscript" else 18,
                  dynamo=exporter != "torchscript")
        if kw["dynamo"]:
            ds = {}; shapes = []
            for nm in names:
                sp = {}
                for a, label in axes.get(nm, {}).items():
                    ds.setdefault(label, torch.export.Dim(label, min=2, max=1024)); sp[a] = ds[label]
                shapes.append(sp)
            kw["dynamic_shapes"] = tuple(shapes)
        else:
            kw["dynamic_axes"] = axes
        try:
            with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
                warnings.simplefilter("ignore")
                torch.onnx.export(module, example, raw, **kw)
            opt = optimizer.optimize_model(raw, model_type=mtype, num_heads=heads, hidden_size=hidden,
                                           opt_level=0, use_gpu=False)
            path = os.path.join(out, f"{name}_ortopt{'_eager' if ATTN == 'eager' else ''}_{exporter}.onnx")
            opt.save_model_to_file(path)
            ops = sorted({(n.domain or "ai.onnx") + "." + n.op_type for n in opt.model.graph.node})
            harness.strip(path)
            print(name, exporter, "ok", [o for o in ops if "microsoft" in o], file=sys.stderr, flush=True)
        except Exception as e:
            print(name, exporter, "failed", str(e)[:300], file=sys.stderr, flush=True)
