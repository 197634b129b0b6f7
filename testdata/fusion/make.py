#!/usr/bin/env python3
"""Exports of every spelling the `--fuse` matchers must recognise, for memplan's tests
(`crates/cli/tests/fusion.rs`): attention, GELU, SiLU, normalisations and products added to a
residual, each written by hand as the models that use it write it, and Hugging Face models in
their `eager` and `sdpa` attention implementations; each exported the ways exporters do it
today (the dynamo exporter at opsets 18, 20 and 23, the TorchScript exporter at opset 17, and
ONNX Runtime's transformer optimizer on the TorchScript export of BERT and GPT-2).

Run by hand (not by CI), in an environment with torch, transformers, onnx, onnxscript and
onnxruntime:

    python testdata/fusion/make.py [OUT]      # OUT/<name>_<exporter>.onnx and OUT/expect.json

OUT defaults to testdata/fusion/onnx. Every model is tiny (widths 16 to 64, one layer), in f32,
eval mode, with batch and sequence (or height and width) symbolic; weights are saved as external
data and the data files deleted, node metadata and doc strings removed: memplan reads shapes and
small constants only. `expect.json` says, per model, what it computes (attention layers, GELUs,
SiLUs, normalisations written out, products added to a residual), written here from the model's
definition, independently of memplan: the test checks that the fused graph computes each of them
with one fused kernel and leaves none of them written out.

Versions used for the vendored files: torch 2.15.0, transformers 5.24.0, onnx 1.23.2,
onnxscript 0.7.2, onnxruntime 1.32.0 (CPU, Linux x86-64).
"""

import contextlib
import io
import json
import math
import os
import sys
import warnings

import onnx
import torch
import torch.nn.functional as F
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(0)

E, H, D = 16, 2, 8  # width, heads, head size of the hand-written attention


class Proj(torch.nn.Module):
    """Q, K, V projections to [batch, heads, seq, size] and the output projection."""

    def __init__(self, kv_heads=H):
        super().__init__()
        self.q = torch.nn.Linear(E, H * D)
        self.k = torch.nn.Linear(E, kv_heads * D)
        self.v = torch.nn.Linear(E, kv_heads * D)
        self.o = torch.nn.Linear(H * D, E)
        self.kv = kv_heads

    def qkv(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, H, D).transpose(1, 2)
        k = self.k(x).view(b, s, self.kv, D).transpose(1, 2)
        v = self.v(x).view(b, s, self.kv, D).transpose(1, 2)
        return q, k, v

    def out(self, y):
        b, _, s, _ = y.shape
        return self.o(y.transpose(1, 2).reshape(b, s, H * D))


def repeat_kv(t, n):
    """Hugging Face's `repeat_kv`: key-value heads repeated for grouped-query attention."""
    b, h, s, d = t.shape
    return t[:, :, None, :, :].expand(b, h, n, s, d).reshape(b, h * n, s, d)


class Sdpa(Proj):
    """`F.scaled_dot_product_attention` without a mask, with a float or boolean mask,
    causal, or with fewer key-value heads (`enable_gqa`)."""

    def __init__(self, mode):
        super().__init__(1 if mode == "gqa" else H)
        self.mode = mode

    def forward(self, x, mask):
        q, k, v = self.qkv(x)
        if self.mode == "plain":
            y = F.scaled_dot_product_attention(q, k, v)
        elif self.mode == "mask":
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        elif self.mode == "bool":
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask > 0)
        elif self.mode == "causal":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        return self.out(y) + mask.sum() * 0


class Eager(Proj):
    """Attention written out: scores divided by √d and a float mask added; the 3-D `bmm`
    form; Gemma-2's soft-capping with a float32 softmax; `masked_fill` with a boolean mask;
    grouped-query attention with Hugging Face's `repeat_kv` and the scale on Q."""

    def __init__(self, mode):
        super().__init__(1 if mode == "repeat_kv" else H)
        self.mode = mode

    def forward(self, x, mask):
        q, k, v = self.qkv(x)
        b, _, s, _ = q.shape
        if self.mode == "div":
            a = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(D)
            y = torch.matmul(torch.softmax(a + mask, dim=-1), v)
        elif self.mode == "bmm":
            q3 = q.reshape(b * H, s, D) * D**-0.5
            a = torch.bmm(q3, k.reshape(b * H, s, D).transpose(1, 2))
            y = torch.bmm(torch.softmax(a, dim=-1), v.reshape(b * H, s, D)).view(b, H, s, D)
        elif self.mode == "softcap":
            a = torch.matmul(q, k.transpose(2, 3)) * D**-0.5
            a = torch.tanh(a / 50.0) * 50.0
            p = torch.softmax(a + mask, dim=-1, dtype=torch.float32).to(q.dtype)
            y = torch.matmul(p, v)
        elif self.mode == "masked_fill":
            a = torch.matmul(q, k.transpose(-1, -2)) * D**-0.5
            a = a.masked_fill(mask < 0, float("-inf"))
            y = torch.matmul(torch.softmax(a, dim=-1), v)
        else:
            k, v = repeat_kv(k, H), repeat_kv(v, H)
            a = torch.matmul(q * D**-0.5, k.transpose(2, 3))
            y = torch.matmul(torch.softmax(a, dim=-1), v)
        return self.out(y)


class Act(torch.nn.Module):
    """A linear layer, an activation spelled `mode`, a linear layer: GELU exact
    (`F.gelu`), tanh (`F.gelu(approximate='tanh')`), Hugging Face's `gelu_new` and
    `quick_gelu` written out, SiLU (`F.silu`, and `x * sigmoid(x)`)."""

    def __init__(self, mode):
        super().__init__()
        self.a = torch.nn.Linear(E, 4 * E)
        self.b = torch.nn.Linear(4 * E, E)
        self.mode = mode

    def forward(self, x, mask):
        h = self.a(x)
        if self.mode == "gelu":
            h = F.gelu(h)
        elif self.mode == "gelu_tanh":
            h = F.gelu(h, approximate="tanh")
        elif self.mode == "gelu_new":
            h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
        elif self.mode == "quick_gelu":
            h = h * torch.sigmoid(1.702 * h)
        elif self.mode == "silu":
            h = F.silu(h)
        else:
            h = h * torch.sigmoid(h)
        return self.b(h) + mask.sum() * 0


class Norm(torch.nn.Module):
    """A normalisation written out: layer norm (mean, variance), Llama's RMS norm (float32
    casts, `rsqrt`), T5's, and group normalisation (`nn.GroupNorm` and by hand)."""

    def __init__(self, mode):
        super().__init__()
        self.mode = mode
        self.w = torch.nn.Parameter(torch.ones(E))
        self.b = torch.nn.Parameter(torch.zeros(E))
        self.gn = torch.nn.GroupNorm(4, E)

    def forward(self, x, mask):
        if self.mode == "layer":
            m = x.mean(-1, keepdim=True)
            d = x - m
            v = (d * d).mean(-1, keepdim=True)
            y = d / torch.sqrt(v + 1e-5) * self.w + self.b
        elif self.mode == "rms_llama":
            h = x.to(torch.float32)
            v = h.pow(2).mean(-1, keepdim=True)
            y = self.w * (h * torch.rsqrt(v + 1e-6)).to(x.dtype)
        elif self.mode == "rms_t5":
            v = x.pow(2).mean(-1, keepdim=True)
            y = self.w * (x / torch.sqrt(v + 1e-6))
        elif self.mode == "group":
            y = self.gn(x.transpose(1, 2)).transpose(1, 2)
        else:
            b, s, c = x.shape
            g = x.transpose(1, 2).reshape(b, 4, -1)
            m = g.mean(-1, keepdim=True)
            d = g - m
            v = (d * d).mean(-1, keepdim=True)
            n = (d / torch.sqrt(v + 1e-5)).reshape(b, c, s)
            y = (n * self.w[:, None] + self.b[:, None]).transpose(1, 2)
        return y + x + mask.sum() * 0


class Residual(torch.nn.Module):
    """A product whose only reader is a residual `Add`: a ResNet bottleneck block (with a
    projection shortcut, then without), `x + linear(x)` with a bias, and a transposed
    convolution added to its input's upsampling."""

    def __init__(self, mode):
        super().__init__()
        self.mode = mode
        c = 8
        self.c1 = torch.nn.Conv2d(c, c, 1)
        self.c2 = torch.nn.Conv2d(c, c, 3, padding=1)
        self.c3 = torch.nn.Conv2d(c, 2 * c, 1)
        self.sc = torch.nn.Conv2d(c, 2 * c, 1)
        self.d1 = torch.nn.Conv2d(2 * c, c, 1)
        self.d2 = torch.nn.Conv2d(c, 2 * c, 1)
        self.lin = torch.nn.Linear(2 * c, 2 * c)
        self.up = torch.nn.ConvTranspose2d(2 * c, 2 * c, 2, stride=2)

    def forward(self, x):
        if self.mode == "resnet":
            h = F.relu(self.c2(F.relu(self.c1(x))))
            y = F.relu(self.c3(h) + self.sc(x))
            return F.relu(self.d2(F.relu(self.d1(y))) + y)
        if self.mode == "linear":
            t = self.sc(x).flatten(2).transpose(1, 2)
            return t + self.lin(t)
        t = self.sc(x)
        return self.up(t) + F.interpolate(t, scale_factor=2.0)


def hf(name):
    """A one-layer Hugging Face model: (module, inputs, input names, dynamic axes)."""
    from transformers import (
        AutoModel,
        AutoModelForCausalLM,
        BertConfig,
        Gemma2Config,
        GPT2Config,
        LlamaConfig,
        ViTConfig,
        WhisperConfig,
        WhisperModel,
    )

    family, attn = name.rsplit("_", 1)
    ids = torch.randint(0, 100, (2, 9))
    tokens = {0: "batch", 1: "seq"}

    class Hidden(torch.nn.Module):
        def __init__(self, m, key):
            super().__init__()
            self.m, self.key = m, key

        def forward(self, x):
            return self.m(**{self.key: x}).last_hidden_state

    class Logits(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits

    lm_inputs = (ids, torch.ones(2, 9, dtype=torch.int64))
    lm_axes = {"input_ids": tokens, "attention_mask": tokens}
    small = dict(num_hidden_layers=1, num_attention_heads=4, hidden_size=64, intermediate_size=128)
    if family == "bert":
        m = AutoModel.from_config(BertConfig(vocab_size=100, max_position_embeddings=64, **small),
                                  attn_implementation=attn, add_pooling_layer=False)
        return Hidden(m, "input_ids"), (ids,), ["input_ids"], {"input_ids": tokens}
    if family == "gpt2":
        cfg = GPT2Config(vocab_size=100, n_positions=64, n_embd=64, n_layer=1, n_head=4,
                         bos_token_id=1, eos_token_id=2)
        m = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn)
        return Logits(m), lm_inputs, ["input_ids", "attention_mask"], lm_axes
    if family == "llama":
        cfg = LlamaConfig(vocab_size=100, num_key_value_heads=2, max_position_embeddings=64, **small)
        m = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn)
        return Logits(m), lm_inputs, ["input_ids", "attention_mask"], lm_axes
    if family == "gemma2":
        cfg = Gemma2Config(vocab_size=100, num_key_value_heads=2, head_dim=16,
                           max_position_embeddings=64, attn_logit_softcapping=50.0,
                           final_logit_softcapping=30.0, **small)
        m = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn)
        return Logits(m), lm_inputs, ["input_ids", "attention_mask"], lm_axes
    if family == "vit":
        cfg = ViTConfig(image_size=32, patch_size=8, **small)
        m = AutoModel.from_config(cfg, attn_implementation=attn, add_pooling_layer=False)
        return Hidden(m, "pixel_values"), (torch.randn(2, 3, 32, 32),), ["pixel_values"], {"pixel_values": {0: "batch"}}
    if family == "whisper":
        cfg = WhisperConfig(vocab_size=100, d_model=64, encoder_layers=1, decoder_layers=1,
                            encoder_attention_heads=4, decoder_attention_heads=4,
                            encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=16,
                            max_source_positions=50, max_target_positions=32,
                            pad_token_id=0, bos_token_id=1, eos_token_id=2,
                            decoder_start_token_id=1)
        m = WhisperModel(cfg).get_encoder()
        m.config._attn_implementation = attn
        return Hidden(m, "input_features"), (torch.randn(2, 16, 100),), ["input_features"], {"input_features": {0: "batch"}}
    raise ValueError(name)


# What each model computes, from its definition: attention layers, GELUs, SiLUs,
# normalisations written out op by op, products added to a residual.
HAND = {}
for mode in ["plain", "mask", "bool", "causal", "gqa"]:
    HAND[f"sdpa_{mode}"] = (lambda m=mode: Sdpa(m), dict(attention=1))
for mode in ["div", "bmm", "softcap", "masked_fill", "repeat_kv"]:
    HAND[f"eager_{mode}"] = (lambda m=mode: Eager(m), dict(attention=1))
for mode in ["gelu", "gelu_tanh", "gelu_new", "quick_gelu"]:
    HAND[f"act_{mode}"] = (lambda m=mode: Act(m), dict(gelu=1))
for mode in ["silu", "silu_written"]:
    HAND[f"act_{mode}"] = (lambda m=mode: Act(m), dict(silu=1))
for mode in ["layer", "rms_llama", "rms_t5", "group", "group_written"]:
    HAND[f"norm_{mode}"] = (lambda m=mode: Norm(m), dict(norm=1))
RESIDUAL = {
    "residual_resnet": (lambda: Residual("resnet"), dict(conv_add=2)),
    "residual_linear": (lambda: Residual("linear"), dict(conv_add=1)),
    "residual_upsample": (lambda: Residual("upsample"), dict(conv_add=1)),
}
# Normalisations count every one the model computes (written out or not): one kernel each.
HF = {
    "bert_eager": dict(attention=1, gelu=1, norm=3, conv_add=2),
    "bert_sdpa": dict(attention=1, gelu=1, norm=3, conv_add=2),
    "gpt2_eager": dict(attention=1, gelu=1, norm=3, conv_add=2),
    "gpt2_sdpa": dict(attention=1, gelu=1, norm=3, conv_add=2),
    "llama_eager": dict(attention=1, silu=1, norm=3, conv_add=2),
    "llama_sdpa": dict(attention=1, silu=1, norm=3, conv_add=2),
    "gemma2_eager": dict(attention=1, gelu=1, norm=5),
    "vit_sdpa": dict(attention=1, gelu=1, norm=3, conv_add=2),
    "whisper_sdpa": dict(attention=1, gelu=3, norm=3, conv_add=2),
}
# ONNX Runtime's optimizer adds the residuals in its `SkipLayerNormalization` (one kernel
# with the normalisation after it).
ORT = {
    "bert_eager": ("bert", dict(attention=1, gelu=1, norm=3)),
    "gpt2_eager": ("gpt2", dict(attention=1, gelu=1, norm=3)),
}

EXPORTERS = {
    "dynamo18": dict(dynamo=True, opset_version=18),
    "dynamo20": dict(dynamo=True, opset_version=20),
    "dynamo23": dict(dynamo=True, opset_version=23),
    "torchscript": dict(dynamo=False, opset_version=17),
}


def strip(path):
    """Weights to external data, then deleted; node metadata and doc strings removed."""
    model = onnx.load(path)
    for node in model.graph.node:
        del node.metadata_props[:]
        node.doc_string = ""
    out = os.path.dirname(path)
    data = os.path.basename(path) + ".data"
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data, size_threshold=1024)
    for f in os.listdir(out):
        if f.endswith(".data"):
            os.remove(os.path.join(out, f))


def export(module, inputs, names, axes, path, options, before_strip=None):
    module.eval()
    kwargs = dict(input_names=names, **options)
    if options["dynamo"]:
        dims = {}
        shapes = []
        for n in names:
            spec = {}
            for a, label in axes.get(n, {}).items():
                dims.setdefault(label, torch.export.Dim(label, min=2, max=4096))
                spec[a] = dims[label]
            shapes.append(spec)
        kwargs["dynamic_shapes"] = tuple(shapes)
        kwargs["external_data"] = True
    else:
        kwargs["dynamic_axes"] = axes
    with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(module, inputs, path, **kwargs)
    if before_strip:
        before_strip(path)
    strip(path)


def ort_optimized(src, dst, model_type):
    """ONNX Runtime's transformer optimizer on an export, weights still there (its fused
    `Attention`, `SkipLayerNormalization`, `BiasGelu` and friends)."""
    from onnxruntime.transformers.optimizer import optimize_model

    with contextlib.redirect_stdout(io.StringIO()):
        opt = optimize_model(src, model_type=model_type, num_heads=4, hidden_size=64,
                             opt_level=1, use_gpu=False)
    opt.save_model_to_file(dst)
    strip(dst)


def main(out):
    os.makedirs(out, exist_ok=True)
    expect = {}
    seq_axes = {"x": {0: "batch", 1: "seq"}, "mask": {0: "batch", 2: "seq", 3: "seq"}}
    x, mask = torch.randn(2, 9, E), torch.randn(2, 1, 9, 9)
    jobs = []
    for name, (make, counts) in HAND.items():
        jobs.append((name, make, (x, mask), ["x", "mask"], seq_axes, counts))
    image = {"x": {0: "batch", 2: "height", 3: "width"}}
    for name, (make, counts) in RESIDUAL.items():
        jobs.append((name, make, (torch.randn(2, 8, 12, 12),), ["x"], image, counts))
    for name, counts in HF.items():
        module, inputs, names, axes = hf(name)
        jobs.append((name, lambda module=module: module, inputs, names, axes, counts))
    for name, make, inputs, names, axes, counts in jobs:
        module = make()
        for exporter, options in EXPORTERS.items():
            # Opsets 20 and 23 only where they spell something differently from 18: GELU
            # (opset 20's `Gelu`) and attention (opset 23's `Attention`).
            if exporter == "dynamo20" and not (name.startswith("act_gelu") or name in HF):
                continue
            if exporter == "dynamo23" and not (name.startswith("sdpa") or name.endswith("_sdpa")):
                continue
            path = os.path.join(out, f"{name}_{exporter}.onnx")
            hook = None
            if exporter == "torchscript" and name in ORT:
                model_type, ort_counts = ORT[name]
                ort_path = os.path.join(out, f"{name}_ort.onnx")

                def hook(p, ort_path=ort_path, model_type=model_type, c=ort_counts):
                    try:
                        ort_optimized(p, ort_path, model_type)
                        expect[f"{name}_ort"] = c
                    except Exception as e:  # noqa: BLE001
                        print(f"{name} ort: {type(e).__name__}: {str(e)[:300]}", file=sys.stderr)
            try:
                export(module, inputs, names, axes, path, options, hook)
            except Exception as e:  # noqa: BLE001 - report and go on
                print(f"{name} {exporter}: {type(e).__name__}: {str(e)[:300]}", file=sys.stderr)
                continue
            expect[f"{name}_{exporter}"] = counts
            print(f"{name} {exporter}", file=sys.stderr)
    with open(os.path.join(out, "expect.json"), "w") as f:
        json.dump(dict(sorted(expect.items())), f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "onnx"))
