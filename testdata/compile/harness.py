#!/usr/bin/env python3
"""PyTorch eager, torch.compile and torch.compile with freezing against memplan with fused
kernels (issue 42), on models built here from small Hugging Face configs.

Run by hand (not by CI), in an environment with torch, transformers, onnx, onnxscript:

    python testdata/compile/harness.py measure [NAME...]          # peaks.csv
    python testdata/compile/harness.py export OUT [NAME...]       # OUT/<name>_<spelling>.onnx
    python testdata/compile/harness.py table OUT MEMPLAN          # the docs/MEASUREMENTS.md table

`measure` runs each model (f32, eval, under `torch.no_grad()`) three ways, each warmed up by
two calls and then measured over one call: PyTorch eager, `torch.compile` (Inductor, its
defaults: `reorder_for_peak_memory` on), and `torch.compile` with Inductor's `freezing` (its
usual inference setting: weights folded into constants, convolutions fused with their
residual adds). The peak is the highest running sum of the profiler's CPU allocation events
during the call (`torch.profiler.profile(profile_memory=True)`): the inputs are made inside the
profiled region, the weights (and frozen constants) before it, so it counts what memplan's
arena counts (activations, inputs and outputs).

`export` writes each model with the dynamo exporter at opsets 18, 20 and 23 and with the
TorchScript exporter (opset 17), batch and sequence symbolic, weights as external data and
deleted; the transformers also with their `eager` attention implementation (the attention
written out op by op), as `<name>_eager_<exporter>`. `table` plans each export with
`--fuse all --attention flash --schedule memory` (and without `--fuse`) at the dims of
peaks.csv and prints the table: memplan's arena against the smallest of the three peaks.

Versions used: torch 2.15.0, transformers 5.24.0, onnx 1.23.2, onnxscript 0.7.2 (CPU).
"""

import contextlib
import csv
import io
import json
import os
import subprocess
import sys
import warnings

import torch
import transformers
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    BertConfig,
    Gemma2Config,
    GPT2Config,
    LlamaConfig,
    ResNetConfig,
    ViTConfig,
    WhisperConfig,
    WhisperForConditionalGeneration,
)

HERE = os.path.dirname(os.path.abspath(__file__))
PEAKS = os.path.join(HERE, "peaks.csv")
torch.manual_seed(0)


class Hidden(torch.nn.Module):
    """An encoder returning its last hidden state."""

    def __init__(self, m, key):
        super().__init__()
        self.m, self.key = m, key

    def forward(self, x):
        return self.m(**{self.key: x}).last_hidden_state


class Logits(torch.nn.Module):
    """A causal LM returning its logits, given token ids and their padding mask."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask):
        return self.m(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits


class Classifier(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, pixel_values):
        return self.m(pixel_values=pixel_values).logits


def models(attn="sdpa"):
    """name -> (module builder, inputs builder, input names, dynamic axes, memplan dims)."""
    ids = lambda b, s: torch.randint(0, 1000, (b, s))
    tokens = {0: "batch", 1: "seq"}
    lm_axes = {"input_ids": tokens, "attention_mask": tokens}
    lm_in = lambda b, s: (ids(b, s), torch.ones(b, s, dtype=torch.int64))
    out = {}

    def lm(name, config, b, s, attn_impl=None):
        out[name] = (
            lambda: Logits(AutoModelForCausalLM.from_config(config, attn_implementation=attn_impl or attn)),
            lambda: lm_in(b, s),
            ["input_ids", "attention_mask"],
            lm_axes,
            [f"batch={b}", f"seq={s}"],
        )

    out["bert"] = (
        lambda: Hidden(AutoModel.from_config(BertConfig(
            vocab_size=1024, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
            intermediate_size=1024, max_position_embeddings=512,
        ), attn_implementation=attn, add_pooling_layer=False), "input_ids"),
        lambda: (ids(2, 512),), ["input_ids"], {"input_ids": tokens}, ["batch=2", "seq=512"],
    )
    lm("gpt", GPT2Config(vocab_size=1024, n_positions=1024, n_embd=256, n_layer=4, n_head=4,
                         bos_token_id=1, eos_token_id=2), 1, 512)
    lm("llama", LlamaConfig(vocab_size=1024, hidden_size=256, intermediate_size=688,
                            num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                            max_position_embeddings=1024), 1, 512)
    # Soft-capping: transformers runs it with its eager attention whatever is asked.
    lm("gemma2", Gemma2Config(vocab_size=1024, hidden_size=256, intermediate_size=512,
                              num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                              head_dim=64, max_position_embeddings=1024,
                              attn_logit_softcapping=50.0, final_logit_softcapping=30.0),
       1, 512, attn_impl="eager")
    image = {0: "batch"}
    out["vit"] = (
        lambda: Hidden(AutoModel.from_config(ViTConfig(
            hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
            image_size=224, patch_size=16,
        ), attn_implementation=attn, add_pooling_layer=False), "pixel_values"),
        lambda: (torch.randn(4, 3, 224, 224),), ["pixel_values"], {"pixel_values": image},
        ["batch=4"],
    )
    out["resnet50"] = (
        lambda: Classifier(transformers.ResNetForImageClassification(ResNetConfig(
            embedding_size=64, hidden_sizes=[256, 512, 1024, 2048], depths=[3, 4, 6, 3],
            layer_type="bottleneck", num_labels=1000,
        ))),
        lambda: (torch.randn(1, 3, 224, 224),), ["pixel_values"], {"pixel_values": image},
        ["batch=1"],
    )

    def whisper():
        w = WhisperForConditionalGeneration(WhisperConfig(
            vocab_size=1024, d_model=384, encoder_layers=2, decoder_layers=1,
            encoder_attention_heads=6, decoder_attention_heads=6, encoder_ffn_dim=1536,
            decoder_ffn_dim=1536, num_mel_bins=80, max_source_positions=1500,
            max_target_positions=64, pad_token_id=0, bos_token_id=1, eos_token_id=2,
            decoder_start_token_id=1,
        ))
        w.config._attn_implementation = attn
        return Hidden(w.get_encoder(), "input_features")

    out["whisper_encoder"] = (
        whisper, lambda: (torch.randn(1, 80, 3000),), ["input_features"],
        {"input_features": {0: "batch"}}, ["batch=1"],
    )
    return out


def peak_of(fn, make_inputs):
    """The peak of the running sum of CPU allocation events of one call of `fn`."""
    with torch.no_grad():
        for _ in range(2):
            fn(*make_inputs())
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True
        ) as prof:
            fn(*make_inputs())
    events = sorted(
        (e.start_ns(), e.nbytes())
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU
    )
    live = peak = 0
    for _, delta in events:
        live += delta
        peak = max(peak, live)
    return peak


def measure(only):
    rows = {}
    if os.path.exists(PEAKS):
        with open(PEAKS) as f:
            rows = {r["model"]: r for r in csv.DictReader(f)}
    for name, (make, make_inputs, _, _, dims) in models().items():
        if only and name not in only:
            continue
        module = make().eval()
        row = {"model": name, "dims": " ".join(dims)}
        row["eager"] = peak_of(module, make_inputs)
        import torch._inductor.config as ind

        torch._dynamo.reset()
        ind.freezing = False
        row["compile"] = peak_of(torch.compile(module), make_inputs)
        torch._dynamo.reset()
        ind.freezing = True
        row["compile_frozen"] = peak_of(torch.compile(module), make_inputs)
        ind.freezing = False
        torch._dynamo.reset()
        print(row, file=sys.stderr)
        rows[name] = row
    with open(PEAKS, "w", newline="") as f:
        w = csv.DictWriter(f, ["model", "dims", "eager", "compile", "compile_frozen"],
                           lineterminator="\n")
        w.writeheader()
        for r in rows.values():
            w.writerow(r)


EXPORTERS = {
    "dynamo18": dict(dynamo=True, opset_version=18),
    "dynamo20": dict(dynamo=True, opset_version=20),
    "dynamo23": dict(dynamo=True, opset_version=23),
    "torchscript": dict(dynamo=False, opset_version=17),
}


def strip(path):
    import onnx

    model = onnx.load(path)
    for node in model.graph.node:
        del node.metadata_props[:]
        node.doc_string = ""
    out = os.path.dirname(path)
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=os.path.basename(path) + ".data", size_threshold=1024)
    for f in os.listdir(out):
        if f.endswith(".data"):
            os.remove(os.path.join(out, f))


def export(out, only):
    os.makedirs(out, exist_ok=True)
    variants = [("", models("sdpa"))]
    variants.append(("_eager", {k: v for k, v in models("eager").items()
                                if k not in ("resnet50", "gemma2")}))
    for suffix, table in variants:
        for name, (make, make_inputs, names, axes, _) in table.items():
            if only and name not in only:
                continue
            module = make().eval()
            # Exporters specialise a dim of 1: the example has at least two of each.
            example = tuple(
                torch.cat([t, t]) if n in axes and 0 in axes[n] and t.shape[0] == 1 else t
                for n, t in zip(names, make_inputs())
            )
            for exporter, options in EXPORTERS.items():
                path = os.path.join(out, f"{name}{suffix}_{exporter}.onnx")
                kwargs = dict(input_names=names, **options)
                if options["dynamo"]:
                    dims = {}
                    shapes = []
                    for n in names:
                        spec = {}
                        for a, label in axes.get(n, {}).items():
                            dims.setdefault(label, torch.export.Dim(label, min=2, max=1024))
                            spec[a] = dims[label]
                        shapes.append(spec)
                    kwargs["dynamic_shapes"] = tuple(shapes)
                    kwargs["external_data"] = True
                else:
                    kwargs["dynamic_axes"] = axes
                try:
                    with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
                        warnings.simplefilter("ignore")
                        torch.onnx.export(module, example, path, **kwargs)
                    strip(path)
                    print(f"{name}{suffix} {exporter}", file=sys.stderr)
                except Exception as e:  # noqa: BLE001
                    print(f"{name}{suffix} {exporter} failed: {str(e)[:200]}", file=sys.stderr)


def arena(memplan, path, dims, extra):
    args = [memplan, "plan", path, "--format", "json", "-q", "--bound", "--attention", "flash",
            "--schedule", "memory", *extra]
    for d in dims.split():
        args += ["--dim", d]
    run = subprocess.run(args, capture_output=True, text=True)
    if run.returncode != 0:
        return None
    return json.loads(run.stdout)["arena_bytes"]


def table(out, memplan):
    with open(PEAKS) as f:
        peaks = {r["model"]: r for r in csv.DictReader(f)}
    mib = lambda b: f"{b / 2**20:.2f}"
    print("| model | export | eager | compile | compile, frozen | memplan | memplan `--fuse all` | fused / least |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for f in sorted(os.listdir(out)):
        if not f.endswith(".onnx"):
            continue
        stem = f[:-5]
        name = next((m for m in sorted(peaks, key=len, reverse=True) if stem.startswith(m + "_")), None)
        if name is None:
            continue
        r = peaks[name]
        least = min(int(r["eager"]), int(r["compile"]), int(r["compile_frozen"]))
        plain = arena(memplan, os.path.join(out, f), r["dims"], [])
        fused = arena(memplan, os.path.join(out, f), r["dims"], ["--fuse", "all"])
        show = lambda v: mib(v) if v is not None else "fails"
        ratio = f"{fused / least:.3f}" if fused is not None else ""
        print(f"| {name} | {stem[len(name) + 1:]} | {mib(int(r['eager']))} | {mib(int(r['compile']))} "
              f"| {mib(int(r['compile_frozen']))} | {show(plain)} | {show(fused)} | {ratio} |")


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "measure":
        measure(set(sys.argv[2:]))
    elif cmd == "export":
        export(sys.argv[2], set(sys.argv[3:]))
    elif cmd == "table":
        table(sys.argv[2], sys.argv[3])
    else:
        sys.exit("usage: harness.py measure [NAME...] | export OUT [NAME...] | table OUT MEMPLAN")
