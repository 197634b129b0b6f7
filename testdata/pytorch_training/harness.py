#!/usr/bin/env python3
"""PyTorch's own memory during one training step, against memplan's plan of the same step
derived from an ONNX export of the same forward module (issue 41). Run by hand, never by CI.

    /work/venv/bin/python testdata/pytorch_training/harness.py export  [MODEL ...]
    /work/venv/bin/python testdata/pytorch_training/harness.py measure [MODEL ...]
    /work/venv/bin/python testdata/pytorch_training/harness.py table target/release/memplan [MODEL ...]

(any Python with torch, onnx and onnxscript; versions used: torch 2.15.0, onnx 1.23.2,
onnxscript 0.7.2, CPU, Linux x86-64.)

The models are built here (MODELS below), in f32, with fixed shapes, random weights and no
dropout. Every step is the same: `loss = cross_entropy(model(x), labels)`, `backward()`,
`AdamW.step()`, `zero_grad(set_to_none=True)`; the logits are not held by the caller.

`export` writes, per model, four exports of the forward module in eval mode:
`<model>_dynamo18.onnx`, `_dynamo20.onnx`, `_dynamo23.onnx` (`torch.onnx.export(dynamo=True)`
at opsets 18, 20 and 23: GELU becomes one `Gelu` op from opset 20, scaled dot-product
attention one `Attention` op at 23) and `_torchscript.onnx` (`dynamo=False`, opset 17).
Both exporters fold BatchNormalization into the convolution before it in eval mode, which
trains another network: for the models with BatchNormalization (`BN_MODELS`) the dynamo
exporter runs with `optimize=False` and the TorchScript exporter with
`training=TrainingMode.TRAINING` (BatchNormalization in training mode, its running statistics
as outputs). Weight data is stripped (every initializer of 1 KiB or more keeps its name, dtype
and dims, and no data, except one whose elements are all one value: its data is all it tells;
node metadata removed): memplan reads shapes and small constants only, and which constants
are of one value (recsys's `torch.zeros`, MoE's `zeros_like`; every file re-exported with
this rule in the eighth session).

`measure` (`CONFIGS=compile,...` in the environment to run some only) runs one step of each
model after two warm-up steps (the optimizer's state exists,
torch.compile has compiled) under `torch.profiler.profile(profile_memory=True)`: the peak of
the running sum of its CPU allocation events, plus the bytes live when the step starts
(parameters, buffers, optimizer state, the input and the labels, each storage once). On a
toy model the figure is PyTorch's allocations to the byte. It writes `peaks.csv`, one row per
model and configuration:

- `eager`: the module as it is, AdamW with `fused=True` (in place, no temporaries: what
  memplan's default `--optimizer-kernel fused` plans);
- `eager_foreach`, `eager_per_tensor`: the same with `foreach=True` (PyTorch's default on a
  GPU: `sqrt(exp_avg_sq)` for every parameter at once) and `foreach=False` (the default on a
  CPU: two parameter-sized temporaries at a time), for `--optimizer-kernel foreach` and
  `per-tensor`;
- `compile`: `torch.compile` of the module and the loss together (Inductor, whose
  AOTAutograd min-cut partitioner chooses what the backward recomputes), fused AdamW;
- `checkpoint`: every block of the model wrapped in `torch.utils.checkpoint.checkpoint`
  (`use_reentrant=False`), eager, fused AdamW: PyTorch's per-block checkpointing.

`table` plans every export with the memplan binary given (`plan --training adamw
--checkpoint none`, `cheap`, and `auto` at the `checkpoint` peak; every model with `--fuse
constants` (tensors built from constants alone made where used when that lowers the step's
need, as PyTorch builds them in the forward), with `--fuse attention --attention flash` too
for the models whose attention PyTorch runs as a flash kernel, and `--no-master-weights`
for the bf16 model, `MEMPLAN_ARGS`), and writes `memplan.csv` and
prints the markdown table of docs/MEASUREMENTS.md. Parameters that are not trained in
PyTorch (registered buffers the export keeps as initializers: rotary caches, causal masks)
are passed as `--frozen`. memplan plans at `--align 64`, the alignment of the allocator
measured: c10's CPU allocator (`alloc_cpu`) places every tensor on a 64-byte boundary
(`c10::gAlignment`); at memplan's default of 256 (a CUDA device's) a model of small tensors
pays up to 192 bytes per buffer that the CPU allocator does not. The profiler reports the
bytes each allocation asked for, not the 64-byte blocks it occupies, so `measure` also writes
the figures with every allocation (and every storage live at the start) rounded up to 64
(`peak_bytes_a64`), and `table` checks both targets twice: memplan at `--align 64` against
the rounded figures, and memplan at `--align 1` against the unrounded ones (a model of many
small tensors, such as MobileNet-V3's BatchNorm and squeeze-excite weights, differs by a few
KB between the two).
"""

import contextlib
import csv
import io
import math
import os
import subprocess
import sys
import warnings

import onnx
import onnx.numpy_helper
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "onnx")
PEAKS = os.path.join(HERE, "peaks.csv")
MEMPLAN_CSV = os.path.join(HERE, "memplan.csv")

EXPORTS = {
    "dynamo18": dict(dynamo=True, opset_version=18),
    "dynamo20": dict(dynamo=True, opset_version=20),
    "dynamo23": dict(dynamo=True, opset_version=23),
    "torchscript": dict(dynamo=False, opset_version=17),
}


# ---------------------------------------------------------------------------------------
# Models. Each has `blocks` run one after the other (what `checkpoint` wraps) and
# `forward(x, ckpt=False)`.


def run_blocks(blocks, x, ckpt):
    for b in blocks:
        x = checkpoint(b, x, use_reentrant=False) if ckpt else b(x)
    return x


class Mlp(nn.Module):
    """784 -> 1024 -> 1024 -> 10 with exact GELU and LayerNorm."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(
            [
                nn.Sequential(nn.Linear(784, 1024), nn.GELU(), nn.LayerNorm(1024)),
                nn.Sequential(nn.Linear(1024, 1024), nn.GELU(), nn.LayerNorm(1024)),
            ]
        )
        self.head = nn.Linear(1024, 10)

    def forward(self, x, ckpt=False):
        return self.head(run_blocks(self.blocks, x, ckpt))


def conv_bn(cin, cout, k=3, stride=1, groups=1, act=nn.ReLU):
    layers = [
        nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


class Basic(nn.Module):
    """A ResNet basic block: conv-BN-ReLU, conv-BN, a projection when the shape changes."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.a = conv_bn(cin, cout, 3, stride)
        self.b = conv_bn(cout, cout, 3, 1, act=None)
        self.proj = (
            conv_bn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else None
        )

    def forward(self, x):
        s = x if self.proj is None else self.proj(x)
        return F.relu(self.b(self.a(x)) + s)


class ResNet(nn.Module):
    """ResNet-ish: a stem, three stages of two basic blocks (32, 64, 128), pooled head."""

    def __init__(self):
        super().__init__()
        blocks = [conv_bn(3, 32)]
        cin = 32
        for i, c in enumerate([32, 64, 128]):
            for j in range(2):
                blocks.append(Basic(cin, c, 2 if (j == 0 and i > 0) else 1))
                cin = c
        self.blocks = nn.ModuleList(blocks)
        self.head = nn.Linear(128, 10)

    def forward(self, x, ckpt=False):
        x = run_blocks(self.blocks, x, ckpt)
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Inverted(nn.Module):
    """MobileNet-V2's inverted residual: 1x1 expand, 3x3 depthwise, 1x1 project (ReLU6)."""

    def __init__(self, cin, cout, stride, expand=4):
        super().__init__()
        mid = cin * expand
        self.body = nn.Sequential(
            conv_bn(cin, mid, 1, act=nn.ReLU6),
            conv_bn(mid, mid, 3, stride, groups=mid, act=nn.ReLU6),
            conv_bn(mid, cout, 1, act=None),
        )
        self.skip = stride == 1 and cin == cout

    def forward(self, x):
        y = self.body(x)
        return x + y if self.skip else y


class MobileNet(nn.Module):
    """MobileNet-ish: a Hardswish stem and six inverted residual blocks."""

    def __init__(self):
        super().__init__()
        spec = [(16, 24, 2), (24, 24, 1), (24, 32, 2), (32, 32, 1), (32, 64, 2), (64, 64, 1)]
        self.blocks = nn.ModuleList(
            [conv_bn(3, 16, act=nn.Hardswish)] + [Inverted(a, b, s) for a, b, s in spec]
        )
        self.head = nn.Linear(64, 10)

    def forward(self, x, ckpt=False):
        x = run_blocks(self.blocks, x, ckpt)
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Double(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.body = nn.Sequential(conv_bn(cin, cout), conv_bn(cout, cout))

    def forward(self, x):
        return self.body(x)


class UNet(nn.Module):
    """A small U-Net: three levels (16, 32, 64) and a bottleneck of 128, max pooling down,
    transposed convolutions up, skips concatenated; per-pixel scores over 4 classes."""

    def __init__(self):
        super().__init__()
        self.down = nn.ModuleList([Double(3, 16), Double(16, 32), Double(32, 64)])
        self.mid = Double(64, 128)
        self.up = nn.ModuleList(
            [nn.ConvTranspose2d(128, 64, 2, 2), nn.ConvTranspose2d(64, 32, 2, 2),
             nn.ConvTranspose2d(32, 16, 2, 2)]
        )
        self.dec = nn.ModuleList([Double(128, 64), Double(64, 32), Double(32, 16)])
        self.head = nn.Conv2d(16, 4, 1)

    def forward(self, x, ckpt=False):
        call = (lambda m, *a: checkpoint(m, *a, use_reentrant=False)) if ckpt else (
            lambda m, *a: m(*a))
        skips = []
        for d in self.down:
            x = call(d, x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = call(self.mid, x)
        for up, dec, s in zip(self.up, self.dec, reversed(skips)):
            x = call(lambda a, b, up=up, dec=dec: dec(torch.cat([up(a), b], 1)), x, s)
        return self.head(x)


def gelu_new(x):
    """Hugging Face's `gelu_new` (GPT-2's), op by op."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


ACTS = {
    "erf": lambda x: F.gelu(x),
    "tanh": lambda x: F.gelu(x, approximate="tanh"),
    "new": gelu_new,
    "silu": F.silu,
}


class Attention(nn.Module):
    """Multi-head attention written out (softmax of scaled scores), or through
    `scaled_dot_product_attention` (`sdpa`)."""

    def __init__(self, dim, heads, causal, seq, sdpa=False):
        super().__init__()
        self.heads, self.causal, self.sdpa = heads, causal, sdpa
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        if causal and not sdpa:
            self.register_buffer(
                "bias", torch.tril(torch.ones(seq, seq, dtype=torch.bool)).view(1, 1, seq, seq),
                persistent=False,
            )

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        else:
            s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h))
            if self.causal:
                s = s.masked_fill(~self.bias[:, :, :t, :t], float("-inf"))
            y = F.softmax(s, dim=-1) @ v
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    """A transformer block, pre-LN (`x + attn(ln(x))`, `x + mlp(ln(x))`) or post-LN."""

    def __init__(self, dim, heads, causal, seq, act, pre=True, sdpa=False):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, causal, seq, sdpa)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.act, self.pre = ACTS[act], pre

    def mlp(self, x):
        return self.fc2(self.act(self.fc1(x)))

    def forward(self, x):
        if self.pre:
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.mlp(x))


class Vit(nn.Module):
    """ViT-ish: 32x32 images in 4x4 patches (64 + a class token), width 192, 4 pre-LN
    blocks of 3 heads, exact GELU, the head on the class token."""

    def __init__(self):
        super().__init__()
        d = 192
        self.patch = nn.Conv2d(3, d, 4, 4)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.zeros(1, 65, d))
        self.blocks = nn.ModuleList([Block(d, 3, False, 65, "erf") for _ in range(4)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, 10)

    def forward(self, x, ckpt=False):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        x = run_blocks(self.blocks, x, ckpt)
        return self.head(self.ln(x[:, 0]))


class Bert(nn.Module):
    """BERT-ish: token, position and type embeddings, LayerNorm, 4 post-LN blocks of width
    256 and 4 heads, exact GELU, a masked-LM head over 4,000 tokens: logits
    `[batch, vocab, seq]` (the class axis 1)."""

    def __init__(self, vocab=4000, seq=128, d=256):
        super().__init__()
        self.tok, self.posn, self.typ = nn.Embedding(vocab, d), nn.Embedding(seq, d), nn.Embedding(2, d)
        self.ln = nn.LayerNorm(d)
        self.blocks = nn.ModuleList([Block(d, 4, False, seq, "erf", pre=False) for _ in range(4)])
        self.dense, self.ln_head = nn.Linear(d, d), nn.LayerNorm(d)
        self.decoder = nn.Linear(d, vocab)
        self.register_buffer("positions", torch.arange(seq).unsqueeze(0), persistent=False)

    def forward(self, ids, ckpt=False):
        t = ids.shape[1]
        pos = self.positions[:, :t]
        x = self.ln(self.tok(ids) + self.posn(pos) + self.typ(torch.zeros_like(ids)))
        x = run_blocks(self.blocks, x, ckpt)
        x = self.ln_head(F.gelu(self.dense(x)))
        return self.decoder(x).transpose(1, 2)


class Gpt2(nn.Module):
    """GPT-2-ish: 4 pre-LN causal blocks of width 256 and 4 heads, GELU spelled `act`,
    learned positions, the output layer tied to the token embedding; logits
    `[batch, vocab, seq]`."""

    def __init__(self, act, vocab=4000, seq=128, d=256, sdpa=False):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList([Block(d, 4, True, seq, act, sdpa=sdpa) for _ in range(4)])
        self.ln_f = nn.LayerNorm(d)
        self.register_buffer("positions", torch.arange(seq).unsqueeze(0), persistent=False)

    def forward(self, ids, ckpt=False):
        t = ids.shape[1]
        x = self.wte(ids) + self.wpe(self.positions[:, :t])
        x = run_blocks(self.blocks, x, ckpt)
        return (self.ln_f(x) @ self.wte.weight.t()).transpose(1, 2)


class RmsNorm(nn.Module):
    """Hugging Face's Llama RMSNorm, written out: `w * x * rsqrt(mean(x^2) + eps)`."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class LlamaBlock(nn.Module):
    """A Llama block: RMSNorm, rotary attention through `scaled_dot_product_attention`
    (causal), RMSNorm, a SiLU-gated MLP."""

    def __init__(self, d, heads, inter, sdpa):
        super().__init__()
        self.heads, self.sdpa = heads, sdpa
        self.n1, self.n2 = RmsNorm(d), RmsNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.gate, self.up = nn.Linear(d, inter, bias=False), nn.Linear(d, inter, bias=False)
        self.down = nn.Linear(inter, d, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, d = x.shape
        h = self.heads
        y = self.n1(x)
        q, k, v = (m(y).view(b, t, h, d // h).transpose(1, 2) for m in (self.q, self.k, self.v))
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if self.sdpa:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-2, -1)) / math.sqrt(d // h) + mask
            a = F.softmax(s, dim=-1) @ v
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        y = self.n2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class Llama(nn.Module):
    """Llama-ish: 4 blocks of width 256, 4 heads, SiLU-gated MLP of 688, rotary positions
    from cos/sin caches (buffers), RMSNorm written out; eager attention with an additive
    causal mask made from a buffer, or `sdpa`."""

    def __init__(self, vocab=4000, seq=128, d=256, sdpa=False):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([LlamaBlock(d, 4, 688, sdpa) for _ in range(4)])
        self.norm = RmsNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        hd = d // 4
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.outer(torch.arange(seq).float(), inv)
        ang = torch.cat([ang, ang], -1)
        self.register_buffer("cos_cached", ang.cos()[None, None], persistent=False)
        self.register_buffer("sin_cached", ang.sin()[None, None], persistent=False)
        mask = torch.full((seq, seq), float("-inf")).triu(1)[None, None]
        self.register_buffer("causal_mask", mask, persistent=False)

    def forward(self, ids, ckpt=False):
        t = ids.shape[1]
        cos, sin = self.cos_cached[:, :, :t], self.sin_cached[:, :, :t]
        mask = self.causal_mask[:, :, :t, :t]
        x = self.emb(ids)
        for b in self.blocks:
            x = checkpoint(b, x, cos, sin, mask, use_reentrant=False) if ckpt else b(x, cos, sin, mask)
        return self.lm_head(self.norm(x)).transpose(1, 2)


class ConvNext(nn.Module):
    """ConvNeXt-ish: a 4x4 patch stem, then per stage blocks of a 7x7 depthwise
    convolution, LayerNorm over channels (channels last), a GELU MLP of 4x, a residual; a
    2x2 strided downsampling between the two stages (48, 96 channels)."""

    class B(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.dw = nn.Conv2d(d, d, 7, padding=3, groups=d)
            self.ln = nn.LayerNorm(d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            y = self.dw(x).permute(0, 2, 3, 1)
            y = self.fc2(F.gelu(self.fc1(self.ln(y))))
            return x + y.permute(0, 3, 1, 2)

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(
            [nn.Conv2d(3, 48, 4, 4), self.B(48), self.B(48), nn.Conv2d(48, 96, 2, 2),
             self.B(96), self.B(96)]
        )
        self.head = nn.Linear(96, 10)

    def forward(self, x, ckpt=False):
        x = run_blocks(self.blocks, x, ckpt)
        return self.head(x.mean((2, 3)))


# Families added in the sixth session: MobileNet-V3 (depthwise, Hardswish, squeeze-excite),
# a GroupNorm + SiLU diffusion U-Net, LayerNorm written out, grouped-query Llama.


class SqueezeExcite(nn.Module):
    """Squeeze-and-excitation (MobileNet-V3's): global average, 1x1 reduce, ReLU, 1x1
    expand, hard sigmoid, the input scaled per channel."""

    def __init__(self, c, r=4):
        super().__init__()
        self.reduce, self.expand = nn.Conv2d(c, c // r, 1), nn.Conv2d(c // r, c, 1)

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        return x * F.hardsigmoid(self.expand(F.relu(self.reduce(s))))


class Bneck(nn.Module):
    """MobileNet-V3's bottleneck: 1x1 expand, depthwise k x k, squeeze-excite, 1x1 project;
    Hardswish or ReLU."""

    def __init__(self, cin, cout, k, stride, expand, act, se):
        super().__init__()
        mid = cin * expand
        self.expand = conv_bn(cin, mid, 1, act=act)
        self.dw = conv_bn(mid, mid, k, stride, groups=mid, act=act)
        self.se = SqueezeExcite(mid) if se else nn.Identity()
        self.project = conv_bn(mid, cout, 1, act=None)
        self.skip = stride == 1 and cin == cout

    def forward(self, x):
        y = self.project(self.se(self.dw(self.expand(x))))
        return x + y if self.skip else y


class MobileNet3(nn.Module):
    """MobileNet-V3-ish: a Hardswish stem, five bottlenecks (depthwise 3x3 and 5x5,
    squeeze-excite on four, Hardswish after the first two), a 1x1 Hardswish head."""

    def __init__(self):
        super().__init__()
        hs, relu = nn.Hardswish, nn.ReLU
        spec = [(16, 16, 3, 2, 1, relu, True), (16, 24, 3, 2, 4, relu, False),
                (24, 24, 3, 1, 3, relu, True), (24, 40, 5, 2, 3, hs, True),
                (40, 40, 5, 1, 3, hs, True)]
        self.blocks = nn.ModuleList(
            [conv_bn(3, 16, 3, 2, act=hs)] + [Bneck(*s) for s in spec] + [conv_bn(40, 96, 1, act=hs)]
        )
        self.head = nn.Linear(96, 10)

    def forward(self, x, ckpt=False):
        x = run_blocks(self.blocks, x, ckpt)
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class GnRes(nn.Module):
    """Stable Diffusion's ResnetBlock2D: GroupNorm, SiLU, 3x3 conv, twice, plus the input
    (a 1x1 convolution where the width changes)."""

    def __init__(self, cin, cout, groups=8):
        super().__init__()
        self.n1, self.c1 = nn.GroupNorm(groups, cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.n2, self.c2 = nn.GroupNorm(groups, cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x):
        h = self.c1(F.silu(self.n1(x)))
        h = self.c2(F.silu(self.n2(h)))
        return self.skip(x) + h


class GnAttention(nn.Module):
    """A diffusion U-Net's spatial self-attention: GroupNorm, one head over the pixels
    through `scaled_dot_product_attention`, a residual."""

    def __init__(self, c, groups=8):
        super().__init__()
        self.norm = nn.GroupNorm(groups, c)
        self.qkv, self.out = nn.Linear(c, 3 * c), nn.Linear(c, c)

    def forward(self, x):
        b, c, h, w = x.shape
        y = self.norm(x).flatten(2).transpose(1, 2)
        q, k, v = (z.unsqueeze(1) for z in self.qkv(y).chunk(3, dim=-1))
        y = self.out(F.scaled_dot_product_attention(q, k, v).squeeze(1))
        return x + y.transpose(1, 2).reshape(b, c, h, w)


class Diffusion(nn.Module):
    """A diffusion-style U-Net: GroupNorm + SiLU residual blocks at widths 32 and 64,
    strided-convolution down, nearest up + convolution, skips concatenated, self-attention
    in the middle; per-pixel scores over 4 classes."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 3, padding=1)
        self.d1, self.down = GnRes(32, 32), nn.Conv2d(32, 32, 3, 2, 1)
        self.d2 = GnRes(32, 64)
        self.mid = nn.Sequential(GnRes(64, 64), GnAttention(64), GnRes(64, 64))
        self.u2 = GnRes(128, 64)
        self.up = nn.Conv2d(64, 64, 3, padding=1)
        self.u1 = GnRes(96, 32)
        self.out_norm, self.out = nn.GroupNorm(8, 32), nn.Conv2d(32, 4, 3, padding=1)

    def forward(self, x, ckpt=False):
        call = (lambda m, *a: checkpoint(m, *a, use_reentrant=False)) if ckpt else (
            lambda m, *a: m(*a))
        x = self.stem(x)
        s1 = call(self.d1, x)
        s2 = call(self.d2, self.down(s1))
        x = call(self.mid, s2)
        x = call(self.u2, torch.cat([x, s2], 1))
        x = self.up(F.interpolate(x, scale_factor=2.0, mode="nearest"))
        x = call(self.u1, torch.cat([x, s1], 1))
        return self.out(F.silu(self.out_norm(x)))


def gelu_python(x):
    """Hugging Face's `gelu_python` (exact GELU written out with erf)."""
    return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


def quick_gelu(x):
    """Hugging Face's `quick_gelu` (CLIP's): `x * sigmoid(1.702 x)`."""
    return x * torch.sigmoid(1.702 * x)


ACTS.update({"python": gelu_python, "quick": quick_gelu})


class HandLayerNorm(nn.Module):
    """LayerNorm written out: `(x - mean) * rsqrt(var + eps) * w + b` (`rsqrt`), or
    `(x - mean) / sqrt(var + eps)` with `var(unbiased=False)` (`sqrt`)."""

    def __init__(self, d, spelling, eps=1e-5):
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d))
        self.spelling, self.eps = spelling, eps

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        if self.spelling == "rsqrt":
            xc = x - mu
            y = xc * torch.rsqrt((xc * xc).mean(-1, keepdim=True) + self.eps)
        else:
            y = (x - mu) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + self.eps)
        return y * self.weight + self.bias


class HandLn(nn.Module):
    """A pre-LN encoder with every LayerNorm written out (`HandLayerNorm`): 64 tokens of a
    4,000-word vocabulary, width 192, 4 blocks of 3 heads (attention written out), GELU
    spelled `act`; a per-token head over the vocabulary, logits `[batch, vocab, seq]`."""

    def __init__(self, act, spelling, vocab=4000, seq=64, d=192):
        super().__init__()
        self.tok, self.posn = nn.Embedding(vocab, d), nn.Parameter(torch.zeros(1, seq, d))
        self.blocks = nn.ModuleList([Block(d, 3, False, seq, act) for _ in range(4)])
        for b in self.blocks:
            b.ln1, b.ln2 = HandLayerNorm(d, spelling), HandLayerNorm(d, spelling)
        self.ln = HandLayerNorm(d, spelling)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids, ckpt=False):
        x = self.tok(ids) + self.posn
        x = run_blocks(self.blocks, x, ckpt)
        return self.head(self.ln(x)).transpose(1, 2)


def repeat_kv(x, n):
    """Hugging Face's `repeat_kv`: each key/value head used by `n` query heads."""
    b, h, t, d = x.shape
    return x[:, :, None].expand(b, h, n, t, d).reshape(b, h * n, t, d)


class GqaBlock(nn.Module):
    """A Llama-3-style block: RMSNorm written out, grouped
    query attention (4 query heads, 2 key/value heads) with rotary positions, eager with an
    additive mask or `sdpa`, a SiLU-gated MLP."""

    def __init__(self, d, heads, kv, inter, sdpa):
        super().__init__()
        self.heads, self.kv, self.sdpa, hd = heads, kv, sdpa, d // heads
        self.n1, self.n2 = RmsNorm(d), RmsNorm(d)
        self.q, self.o = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.k, self.v = nn.Linear(d, kv * hd, bias=False), nn.Linear(d, kv * hd, bias=False)
        self.gate, self.up = nn.Linear(d, inter, bias=False), nn.Linear(d, inter, bias=False)
        self.down = nn.Linear(inter, d, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, d = x.shape
        hd = d // self.heads
        y = self.n1(x)
        q = self.q(y).view(b, t, self.heads, hd).transpose(1, 2)
        k = self.k(y).view(b, t, self.kv, hd).transpose(1, 2)
        v = self.v(y).view(b, t, self.kv, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k, v = repeat_kv(k, self.heads // self.kv), repeat_kv(v, self.heads // self.kv)
        if self.sdpa:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = torch.matmul(q, k.transpose(2, 3)) * hd**-0.5 + mask
            a = torch.matmul(F.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype), v)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        y = self.n2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class LlamaGqa(nn.Module):
    """Llama-3-ish: 3 GQA blocks of width 256, rotary angles computed in the forward from an
    `inv_freq` buffer and the positions (as Hugging Face's rotary embedding does), the
    causal mask built in the forward, RMSNorm written out, an untied head."""

    def __init__(self, vocab=4000, seq=128, d=256, sdpa=False):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([GqaBlock(d, 4, 2, 512, sdpa) for _ in range(3)])
        self.norm = RmsNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        hd = d // 4
        inv = 1.0 / (500000 ** (torch.arange(0, hd, 2).float() / hd))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, ids, ckpt=False):
        t = ids.shape[1]
        pos = torch.arange(t, device=ids.device).float()
        ang = torch.outer(pos, self.inv_freq)
        ang = torch.cat([ang, ang], -1)
        cos, sin = ang.cos()[None, None], ang.sin()[None, None]
        mask = torch.full((t, t), float("-inf"), device=ids.device).triu(1)[None, None]
        x = self.emb(ids)
        for b in self.blocks:
            x = checkpoint(b, x, cos, sin, mask, use_reentrant=False) if ckpt else b(x, cos, sin, mask)
        return self.lm_head(self.norm(x)).transpose(1, 2)


# Families added in the seventh session: a T5-style encoder-decoder (cross-attention, RMSNorm
# without the mean, relative position buckets computed in the forward), a Whisper-style
# convolutional front end + encoder, an EfficientNet-style CNN (SiLU, squeeze-excite with a
# sigmoid, depthwise), a recommendation model of integer index ops (EmbeddingBag, gather,
# scatter-add), a Swin-style window attention (roll, window partition, a gathered relative
# position bias table), a mixture-of-experts MLP (top-k routing, scatter of the gates), and an
# LSTM.


def ckpt_call(ckpt):
    return (lambda m, *a: checkpoint(m, *a, use_reentrant=False)) if ckpt else (
        lambda m, *a: m(*a))


def t5_bucket(rel, bidirectional, buckets=32, max_distance=128):
    """T5's relative position bucket (integer ops, a log for the far ones)."""
    ret = torch.zeros_like(rel)
    if bidirectional:
        buckets //= 2
        ret = ret + (rel > 0).to(torch.long) * buckets
        rel = torch.abs(rel)
    else:
        rel = -torch.min(rel, torch.zeros_like(rel))
    exact = buckets // 2
    far = exact + (torch.log(rel.float() / exact) / math.log(max_distance / exact)
                   * (buckets - exact)).to(torch.long)
    far = torch.min(far, torch.full_like(far, buckets - 1))
    return ret + torch.where(rel < exact, rel, far)


class T5Attention(nn.Module):
    """T5's attention: no bias, no score scaling, an additive position bias (and mask)."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))

    def forward(self, x, kv, bias):
        b, t, d = x.shape
        s, h = kv.shape[1], self.heads
        q = self.q(x).view(b, t, h, d // h).transpose(1, 2)
        k = self.k(kv).view(b, s, h, d // h).transpose(1, 2)
        v = self.v(kv).view(b, s, h, d // h).transpose(1, 2)
        w = q @ k.transpose(-2, -1)
        if bias is not None:
            w = w + bias
        y = F.softmax(w.float(), dim=-1).type_as(w) @ v
        return self.o(y.transpose(1, 2).reshape(b, t, d))


class T5Ff(nn.Module):
    """T5 v1.1's gated feed-forward: `wo(gelu_new(wi_0 x) * wi_1 x)`."""

    def __init__(self, d, ff):
        super().__init__()
        self.wi0, self.wi1 = nn.Linear(d, ff, bias=False), nn.Linear(d, ff, bias=False)
        self.wo = nn.Linear(ff, d, bias=False)

    def forward(self, x):
        return self.wo(gelu_new(self.wi0(x)) * self.wi1(x))


class T5Enc(nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.n1, self.att, self.n2, self.ff = RmsNorm(d), T5Attention(d, heads), RmsNorm(d), T5Ff(d, ff)

    def forward(self, x, bias):
        y = self.n1(x)
        x = x + self.att(y, y, bias)
        return x + self.ff(self.n2(x))


class T5Dec(nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.n1, self.att = RmsNorm(d), T5Attention(d, heads)
        self.n2, self.cross = RmsNorm(d), T5Attention(d, heads)
        self.n3, self.ff = RmsNorm(d), T5Ff(d, ff)

    def forward(self, x, enc, bias):
        y = self.n1(x)
        x = x + self.att(y, y, bias)
        x = x + self.cross(self.n2(x), enc, None)
        return x + self.ff(self.n3(x))


class T5(nn.Module):
    """T5-v1.1-ish: a shared embedding, 2 encoder and 2 decoder layers of width 128 and 4
    heads, RMSNorm (no mean) written out, relative position biases from buckets computed in
    the forward (bidirectional in the encoder, causal in the decoder, each a trained
    `[32, heads]` table), decoder cross-attention over the encoder's output, an untied head."""

    def __init__(self, vocab=2000, d=128, heads=4, ff=256):
        super().__init__()
        self.shared = nn.Embedding(vocab, d)
        self.enc_rel, self.dec_rel = nn.Embedding(32, heads), nn.Embedding(32, heads)
        self.enc = nn.ModuleList([T5Enc(d, heads, ff) for _ in range(2)])
        self.dec = nn.ModuleList([T5Dec(d, heads, ff) for _ in range(2)])
        self.enc_norm, self.dec_norm = RmsNorm(d), RmsNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def bias(self, table, t, s, bidirectional):
        rel = torch.arange(s)[None, :] - torch.arange(t)[:, None]
        return table(t5_bucket(rel, bidirectional)).permute(2, 0, 1)[None]

    def forward(self, ids, dec_ids, ckpt=False):
        call = ckpt_call(ckpt)
        t, s = dec_ids.shape[1], ids.shape[1]
        eb = self.bias(self.enc_rel, s, s, True)
        causal = torch.full((t, t), float("-inf")).triu(1)
        db = self.bias(self.dec_rel, t, t, False) + causal
        x = self.shared(ids)
        for layer in self.enc:
            x = call(layer, x, eb)
        enc = self.enc_norm(x)
        y = self.shared(dec_ids)
        for layer in self.dec:
            y = call(layer, y, enc, db)
        return self.lm_head(self.dec_norm(y)).transpose(1, 2)


def sinusoids(length, d):
    """Whisper's fixed sinusoidal positions."""
    inc = math.log(10000) / (d // 2 - 1)
    inv = torch.exp(-inc * torch.arange(d // 2))
    t = torch.arange(length)[:, None] * inv[None, :]
    return torch.cat([torch.sin(t), torch.cos(t)], dim=1)


class WhisperAttention(nn.Module):
    """Whisper's attention: the key without bias, `d**-0.25` on the query and the key each."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d, bias=False), nn.Linear(d, d)
        self.out = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        scale = (d // h) ** -0.25
        q = self.q(x).view(b, t, h, -1).permute(0, 2, 1, 3) * scale
        k = self.k(x).view(b, t, h, -1).permute(0, 2, 3, 1) * scale
        v = self.v(x).view(b, t, h, -1).permute(0, 2, 1, 3)
        w = F.softmax((q @ k).float(), dim=-1).to(q.dtype)
        return self.out((w @ v).permute(0, 2, 1, 3).flatten(start_dim=2))


class WhisperBlock(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.att = nn.LayerNorm(d), WhisperAttention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.att(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Whisper(nn.Module):
    """Whisper-encoder-ish: 40 mel bins over 200 frames, two 1-D convolutions (the second
    strided) with exact GELU, fixed sinusoidal positions (a buffer), 3 pre-LN blocks of width
    128 and 4 heads, a per-frame head over 50 classes (logits `[batch, classes, frames]`)."""

    def __init__(self, mels=40, frames=200, d=128, heads=4, classes=50):
        super().__init__()
        self.conv1 = nn.Conv1d(mels, d, 3, padding=1)
        self.conv2 = nn.Conv1d(d, d, 3, stride=2, padding=1)
        self.register_buffer("positions", sinusoids(frames // 2, d), persistent=False)
        self.blocks = nn.ModuleList([WhisperBlock(d, heads) for _ in range(3)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x, ckpt=False):
        x = F.gelu(self.conv2(F.gelu(self.conv1(x)))).permute(0, 2, 1)
        x = run_blocks(self.blocks, x + self.positions, ckpt)
        return self.head(self.ln(x)).transpose(1, 2)


class MbConv(nn.Module):
    """EfficientNet's MBConv: 1x1 expand (SiLU), depthwise k x k (SiLU), squeeze-excite (mean,
    1x1 reduce, SiLU, 1x1 expand, sigmoid), 1x1 project; a residual where the shape keeps."""

    def __init__(self, cin, cout, k, stride, expand):
        super().__init__()
        mid = cin * expand
        self.expand = conv_bn(cin, mid, 1, act=nn.SiLU) if expand != 1 else nn.Identity()
        self.dw = conv_bn(mid, mid, k, stride, groups=mid, act=nn.SiLU)
        self.reduce, self.excite = nn.Conv2d(mid, max(1, cin // 4), 1), nn.Conv2d(max(1, cin // 4), mid, 1)
        self.project = conv_bn(mid, cout, 1, act=None)
        self.skip = stride == 1 and cin == cout

    def forward(self, x):
        y = self.dw(self.expand(x))
        s = torch.sigmoid(self.excite(F.silu(self.reduce(y.mean((2, 3), keepdim=True)))))
        y = self.project(y * s)
        return x + y if self.skip else y


class EfficientNet(nn.Module):
    """EfficientNet-B0-ish: a SiLU stem, six MBConv blocks (3x3 and 5x5 depthwise, expand 1
    and 6), a 1x1 SiLU head, pooled."""

    def __init__(self):
        super().__init__()
        spec = [(16, 16, 3, 1, 1), (16, 24, 3, 2, 6), (24, 24, 3, 1, 6), (24, 40, 5, 2, 6),
                (40, 40, 5, 1, 6), (40, 64, 3, 2, 6)]
        self.blocks = nn.ModuleList(
            [conv_bn(3, 16, 3, 1, act=nn.SiLU)] + [MbConv(*s) for s in spec]
            + [conv_bn(64, 128, 1, act=nn.SiLU)]
        )
        self.head = nn.Linear(128, 10)

    def forward(self, x, ckpt=False):
        x = run_blocks(self.blocks, x, ckpt)
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Recsys(nn.Module):
    """A DLRM-ish recommender of integer index ops: a dense MLP; two bags of 8 ids pooled by
    sum and by mean (`nn.EmbeddingBag`s with `bags`, which both exporters write as a Loop
    over the bags capturing the table; else an `Embedding` and a ReduceSum/ReduceMean); a
    sequence of 20 token embeddings summed into 4 groups by a
    per-token group id (`scatter_add`); pairwise dot products of the 4 pooled vectors with
    the upper triangle taken by `gather`; a top MLP over 2 classes."""

    def __init__(self, bags, d=64):
        super().__init__()
        self.bags = bags
        self.bottom = nn.Sequential(nn.Linear(13, 128), nn.ReLU(), nn.Linear(128, d), nn.ReLU())
        if bags:
            self.bag_a = nn.EmbeddingBag(5000, d, mode="sum")
            self.bag_b = nn.EmbeddingBag(3000, d, mode="mean")
        else:
            self.bag_a, self.bag_b = nn.Embedding(5000, d), nn.Embedding(3000, d)
        self.tok = nn.Embedding(4000, d)
        iu = torch.triu_indices(7, 7, 1)
        self.register_buffer("pairs", (iu[0] * 7 + iu[1]), persistent=False)
        self.blocks = nn.ModuleList([
            nn.Sequential(nn.Linear(d * 4 + 21 + d, 256), nn.ReLU()),
            nn.Sequential(nn.Linear(256, 256), nn.ReLU()),
        ])
        self.out = nn.Linear(256, 2)

    def forward(self, dense, bag_a, bag_b, toks, groups, ckpt=False):
        b = dense.shape[0]
        x = self.bottom(dense)
        e = self.tok(toks)  # [b, 20, d]
        g = torch.zeros(b, 4, e.shape[2]).scatter_add(1, groups[:, :, None].expand_as(e), e)
        if self.bags:
            a, c = self.bag_a(bag_a), self.bag_b(bag_b)
        else:
            a, c = self.bag_a(bag_a).sum(1), self.bag_b(bag_b).mean(1)
        z = torch.cat([x[:, None], a[:, None], c[:, None], g], 1)
        dots = (z @ z.transpose(1, 2)).flatten(1)
        pairs = torch.gather(dots, 1, self.pairs[None].expand(b, -1))
        y = torch.cat([x, g.flatten(1), pairs], 1)
        return self.out(run_blocks(self.blocks, y, ckpt))


def recsys_inputs(batch=256):
    def make():
        g = torch.Generator().manual_seed(1)
        return (torch.randn(batch, 13, generator=g),
                torch.randint(0, 5000, (batch, 8), generator=g),
                torch.randint(0, 3000, (batch, 8), generator=g),
                torch.randint(0, 4000, (batch, 20), generator=g),
                torch.randint(0, 4, (batch, 20), generator=g))
    return make


def windows(x, w):
    b, h, wd, c = x.shape
    return x.view(b, h // w, w, wd // w, w, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, w * w, c)


def unwindows(x, w, h, wd):
    c = x.shape[-1]
    b = x.shape[0] // ((h // w) * (wd // w))
    return x.view(b, h // w, wd // w, w, w, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, wd, c)


class SwinBlock(nn.Module):
    """Swin's block: LayerNorm, (shifted) window attention with a relative position bias
    gathered from a trained table by a constant index, LayerNorm, a GELU MLP."""

    def __init__(self, d, heads, res, w, shift):
        super().__init__()
        self.d, self.heads, self.res, self.w, self.shift = d, heads, res, w, shift
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.table = nn.Parameter(torch.zeros((2 * w - 1) ** 2, heads))
        c = torch.stack(torch.meshgrid(torch.arange(w), torch.arange(w), indexing="ij")).flatten(1)
        rel = (c[:, :, None] - c[:, None, :]).permute(1, 2, 0) + (w - 1)
        self.register_buffer("index", (rel[..., 0] * (2 * w - 1) + rel[..., 1]).flatten(),
                             persistent=False)
        if shift:
            img = torch.zeros(1, res, res, 1)
            cnt = 0
            for hs in (slice(0, -w), slice(-w, -w // 2), slice(-w // 2, None)):
                for ws in (slice(0, -w), slice(-w, -w // 2), slice(-w // 2, None)):
                    img[:, hs, ws, :] = cnt
                    cnt += 1
            m = windows(img, w).squeeze(-1)
            m = m[:, None, :] - m[:, :, None]
            self.register_buffer("mask", m.masked_fill(m != 0, -100.0).masked_fill(m == 0, 0.0),
                                 persistent=False)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, n, d = x.shape
        r, w, h = self.res, self.w, self.heads
        y = self.n1(x).view(b, r, r, d)
        if self.shift:
            y = torch.roll(y, (-(w // 2), -(w // 2)), (1, 2))
        y = windows(y, w)
        bw, t = y.shape[0], w * w
        qkv = self.qkv(y).reshape(bw, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        a = (q * (d // h) ** -0.5) @ k.transpose(-2, -1)
        a = a + self.table[self.index].view(t, t, h).permute(2, 0, 1)[None]
        if self.shift:
            nw = self.mask.shape[0]
            a = (a.view(bw // nw, nw, h, t, t) + self.mask[None, :, None]).view(bw, h, t, t)
        y = self.proj((F.softmax(a, -1) @ v).transpose(1, 2).reshape(bw, t, d))
        y = unwindows(y, w, r, r)
        if self.shift:
            y = torch.roll(y, (w // 2, w // 2), (1, 2))
        x = x + y.reshape(b, n, d)
        return x + self.mlp(self.n2(x))


class PatchMerge(nn.Module):
    """Swin's patch merging: 2x2 neighbours concatenated, LayerNorm, a linear map to 2d."""

    def __init__(self, d, res):
        super().__init__()
        self.res, self.norm, self.red = res, nn.LayerNorm(4 * d), nn.Linear(4 * d, 2 * d, bias=False)

    def forward(self, x):
        b, n, d = x.shape
        x = x.view(b, self.res, self.res, d)
        x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], -1)
        return self.red(self.norm(x.view(b, -1, 4 * d)))


class Swin(nn.Module):
    """Swin-ish: 32x32 images in 2x2 patches (16x16 tokens, width 48), two blocks (windows of
    4x4, the second shifted), patch merging to 8x8 x 96, two more blocks; pooled head."""

    def __init__(self):
        super().__init__()
        self.patch, self.pn = nn.Conv2d(3, 48, 2, 2), nn.LayerNorm(48)
        self.blocks = nn.ModuleList([
            SwinBlock(48, 3, 16, 4, False), SwinBlock(48, 3, 16, 4, True), PatchMerge(48, 16),
            SwinBlock(96, 6, 8, 4, False), SwinBlock(96, 6, 8, 4, True)])
        self.norm, self.head = nn.LayerNorm(96), nn.Linear(96, 10)

    def forward(self, x, ckpt=False):
        x = self.pn(self.patch(x).flatten(2).transpose(1, 2))
        x = run_blocks(self.blocks, x, ckpt)
        return self.head(self.norm(x).mean(1))


class MoeMlp(nn.Module):
    """A Mixtral-style sparse MLP written for a fixed-shape export: softmax router, top-2 of
    4 experts renormalised, the gates scattered into `[tokens, experts]`, every SwiGLU expert
    run on every token and weighted by its gate (zero where not chosen)."""

    def __init__(self, d, inter, experts=4, k=2):
        super().__init__()
        self.k = k
        self.router = nn.Linear(d, experts, bias=False)
        self.w1 = nn.ModuleList([nn.Linear(d, inter, bias=False) for _ in range(experts)])
        self.w3 = nn.ModuleList([nn.Linear(d, inter, bias=False) for _ in range(experts)])
        self.w2 = nn.ModuleList([nn.Linear(inter, d, bias=False) for _ in range(experts)])

    def forward(self, x):
        p = F.softmax(self.router(x), dim=-1, dtype=torch.float)
        w, idx = torch.topk(p, self.k, dim=-1)
        w = w / w.sum(-1, keepdim=True)
        gates = torch.zeros_like(p).scatter(-1, idx, w)
        out = 0
        for e in range(len(self.w1)):
            out = out + gates[..., e:e + 1] * self.w2[e](F.silu(self.w1[e](x)) * self.w3[e](x))
        return out


class MoeBlock(nn.Module):
    def __init__(self, d, heads, inter):
        super().__init__()
        self.n1, self.n2 = RmsNorm(d), RmsNorm(d)
        self.attn = Attention(d, heads, False, 0)
        self.moe = MoeMlp(d, inter)

    def forward(self, x):
        x = x + self.attn(self.n1(x))
        return x + self.moe(self.n2(x))


class Moe(nn.Module):
    """A mixture-of-experts encoder: 3 blocks of width 128, 4 heads (attention written out),
    RMSNorm written out, the MLP a top-2-of-4 SwiGLU mixture (`MoeMlp`); a per-token head."""

    def __init__(self, vocab=2000, d=128):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([MoeBlock(d, 4, 256) for _ in range(3)])
        self.norm, self.head = RmsNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, ids, ckpt=False):
        x = run_blocks(self.blocks, self.emb(ids), ckpt)
        return self.head(self.norm(x)).transpose(1, 2)


class Lstm(nn.Module):
    """An LSTM (or GRU) tagger: embeddings, a 2-layer recurrent layer of 128, a per-token
    head."""

    def __init__(self, vocab=2000, d=128, cell=nn.LSTM):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([cell(d, d, num_layers=2, batch_first=True)])
        self.head = nn.Linear(d, vocab)

    def forward(self, ids, ckpt=False):
        x = self.emb(ids)
        f = self.blocks[0]
        x = (checkpoint(f, x, use_reentrant=False) if ckpt else f(x))[0]
        return self.head(x).transpose(1, 2)


def image(batch, size):
    return lambda: (torch.randn(batch, 3, size, size),)


def tokens(batch, seq, vocab=4000):
    return lambda: (torch.randint(0, vocab, (batch, seq)),)


# name -> (constructor, inputs, labels shape, class count, input names, frozen patterns)
MODELS = {
    "mlp": (Mlp, lambda: (torch.randn(256, 784),), (256,), 10, ["x"], []),
    "resnet": (ResNet, image(32, 32), (32,), 10, ["x"], []),
    "mobilenet": (MobileNet, image(32, 32), (32,), 10, ["x"], []),
    "unet": (UNet, image(8, 64), (8, 64, 64), 4, ["x"], []),
    "convnext": (ConvNext, image(32, 32), (32,), 10, ["x"], []),
    "vit": (Vit, image(32, 32), (32,), 10, ["x"], []),
    "bert": (Bert, tokens(8, 128), (8, 128), 4000, ["input_ids"], []),
    "gpt2_erf": (lambda: Gpt2("erf"), tokens(8, 128), (8, 128), 4000, ["input_ids"], []),
    "gpt2_tanh": (lambda: Gpt2("tanh"), tokens(8, 128), (8, 128), 4000, ["input_ids"], []),
    "gpt2_new": (lambda: Gpt2("new"), tokens(8, 128), (8, 128), 4000, ["input_ids"], []),
    "llama": (Llama, tokens(8, 128), (8, 128), 4000, ["input_ids"], []),
    "llama_sdpa": (lambda: Llama(sdpa=True), tokens(8, 128), (8, 128), 4000, ["input_ids"], []),
    "mobilenet3": (MobileNet3, image(32, 64), (32,), 10, ["x"], []),
    "diffusion": (Diffusion, image(8, 32), (8, 32, 32), 4, ["x"], []),
    "lnhand_python": (lambda: HandLn("python", "sqrt"), tokens(16, 64), (16, 64), 4000,
                      ["input_ids"], []),
    "lnhand_erf": (lambda: HandLn("erf", "rsqrt"), tokens(16, 64), (16, 64), 4000,
                   ["input_ids"], []),
    "lnhand_quick": (lambda: HandLn("quick", "rsqrt"), tokens(16, 64), (16, 64), 4000,
                     ["input_ids"], []),
    "llama_gqa": (LlamaGqa, tokens(8, 128), (8, 128), 4000, ["input_ids"], []),
    "llama_gqa_sdpa": (lambda: LlamaGqa(sdpa=True), tokens(8, 128), (8, 128), 4000,
                       ["input_ids"], []),
    "t5": (T5, lambda: (torch.randint(0, 2000, (8, 64)), torch.randint(0, 2000, (8, 32))),
           (8, 32), 2000, ["input_ids", "decoder_input_ids"], []),
    "whisper": (Whisper, lambda: (torch.randn(8, 40, 200),), (8, 100), 50, ["x"], []),
    "efficientnet": (EfficientNet, image(32, 32), (32,), 10, ["x"], []),
    "recsys": (lambda: Recsys(False), recsys_inputs(), (256,), 2,
               ["dense", "bag_a", "bag_b", "tokens", "groups"], []),
    "recsys_bag": (lambda: Recsys(True), recsys_inputs(), (256,), 2,
                   ["dense", "bag_a", "bag_b", "tokens", "groups"], []),
    "swin": (Swin, image(16, 32), (16,), 10, ["x"], []),
    "moe": (Moe, tokens(8, 64, 2000), (8, 64), 2000, ["input_ids"], []),
    "lstm": (Lstm, tokens(8, 64, 2000), (8, 64), 2000, ["input_ids"], []),
    "gru": (lambda: Lstm(cell=nn.GRU), tokens(8, 64, 2000), (8, 64), 2000, ["input_ids"], []),
    "vit_bf16": (lambda: Vit().to(torch.bfloat16),
                 lambda: (torch.randn(32, 3, 32, 32).to(torch.bfloat16),), (32,), 10, ["x"], []),
}


# What memplan is told of the engine, per model: the models that call
# `scaled_dot_product_attention` run PyTorch's flash kernel on a CPU (it saves each row's
# log-sum-exp, not the probabilities: llama_gqa_sdpa's eager peak is 6.2 MB, its three layers'
# probabilities, under llama_gqa's), so memplan fuses the attention (the exports below opset
# 23 write it op by op) and plans flash kernels for them.
FLASH = ["--fuse", "attention,constants", "--attention", "flash"]
# Every model: tensors built from constants alone (masks, position tables, a `torch.zeros`
# the exporter made a constant) made where they are used when that lowers the step's need,
# as PyTorch builds them in the forward, instead of computed once at load and kept.
CONSTANTS = ["--fuse", "constants"]
MEMPLAN_ARGS = {"llama_sdpa": FLASH, "llama_gqa_sdpa": FLASH, "diffusion": FLASH,
                # PyTorch's AdamW on bf16 parameters keeps its state in bf16, no f32 copy.
                "vit_bf16": ["--no-master-weights", *CONSTANTS]}


# Models with BatchNormalization, exported so that it is not folded (see the module docs).
BN_MODELS = {"resnet", "mobilenet", "unet", "mobilenet3", "efficientnet"}


def build(name):
    torch.manual_seed(0)
    ctor, make, labels, classes, names, frozen = MODELS[name]
    model = ctor()
    # Every parameter random: the exporters merge initializers of equal values (LayerNorm's
    # ones and zeros), which would train one tensor for several.
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02)
    return model, make, labels, classes, names, frozen


# ---------------------------------------------------------------------------------------
# Export.


def uniform(t):
    """Whether every element of initializer `t` is the same value (a `torch.zeros` the
    exporter made a constant: all its information is that value and its shape)."""
    flat = onnx.numpy_helper.to_array(t).reshape(-1)
    return flat.size > 1 and bool((flat == flat[0]).all())


def strip(path):
    """Moves every tensor of 1 KiB or more to an external data file, deletes that file, and
    removes node metadata: shapes and small constants stay, and so do initializers of one
    value (a constant's data then tells what memplan may make where it is used; every
    parameter is randomized, so none is of one value)."""
    model = onnx.load(path)
    for node in model.graph.node:
        del node.metadata_props[:]
        node.doc_string = ""
    keep = {t.name: onnx.TensorProto.FromString(t.SerializeToString())
            for t in model.graph.initializer if uniform(t)}
    data = os.path.basename(path) + ".data"
    for f in os.listdir(OUT):
        if f.startswith(os.path.basename(path)) and f != os.path.basename(path):
            os.remove(os.path.join(OUT, f))
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data, size_threshold=1024)
    os.remove(os.path.join(OUT, data))
    if keep:
        model = onnx.load(path, load_external_data=False)
        for t in model.graph.initializer:
            if t.name in keep:
                t.CopyFrom(keep[t.name])
        onnx.save_model(model, path)


def export(only):
    os.makedirs(OUT, exist_ok=True)
    for name in MODELS:
        if only and name not in only:
            continue
        model, make, _, _, names, _ = build(name)
        model.eval()
        example = make()
        for exporter, options in EXPORTS.items():
            path = os.path.join(OUT, f"{name}_{exporter}.onnx")
            print(f"exporting {name} with {exporter}", file=sys.stderr)
            kwargs = dict(input_names=names, output_names=["logits"], **options)
            if options["dynamo"]:
                kwargs["external_data"] = True
                if name in BN_MODELS:
                    kwargs["optimize"] = False
            elif name in BN_MODELS:
                kwargs["training"] = torch.onnx.TrainingMode.TRAINING
            try:
                with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(
                    io.StringIO()
                ):
                    warnings.simplefilter("ignore")
                    torch.onnx.export(model, example, path, **kwargs)
                strip(path)
            except Exception as e:  # noqa: BLE001 - report and go on with the others
                print(f"  failed: {type(e).__name__}: {str(e)[:2000]}", file=sys.stderr)
                if os.path.exists(path):
                    os.remove(path)
    write_frozen()


def frozen_of(name, path):
    """The float initializers of rank 1 or more of an export that are no parameter of the
    PyTorch model (no parameter has their shape, nor its transpose): what the exporter made of
    buffers and folded constants (a rotary cache, a causal mask, ViT's `cls.expand(batch)`,
    BERT's token-type embedding of `zeros_like(ids)`). PyTorch trains none of them, so memplan
    is told they are frozen."""
    model = build(name)[0]
    shapes = set()
    for p in model.parameters():
        shapes.add(tuple(p.shape))
        shapes.add(tuple(reversed(p.shape)))
    graph = onnx.load(path, load_external_data=False).graph

    def parameter_like(dims):
        dims = tuple(dims)
        # ONNX's LSTM/GRU ops take a parameter with a leading direction axis (`W`, `R`:
        # `[1, 4h, d]`), and both of PyTorch's biases concatenated (`B`: `[1, 8h]`).
        lead = dims[1:] if len(dims) > 1 and dims[0] == 1 else dims
        return dims in shapes or lead in shapes or (
            # TorchScript stores a GroupNorm's weight `[C]` as the `[C, 1, 1]` it multiplies by.
            len(dims) > 1 and all(d == 1 for d in dims[1:]) and (dims[0],) in shapes) or (
            len(dims) == 2 and dims[0] == 1 and dims[1] % 2 == 0 and (dims[1] // 2,) in shapes)

    return sorted(
        i.name
        for i in graph.initializer
        if i.data_type in (1, 10, 11, 16) and len(i.dims) >= 1 and not parameter_like(i.dims)
    )


def write_frozen():
    """`exports.csv`: each export and its frozen initializers (`;`-separated)."""
    rows = []
    for f in sorted(os.listdir(OUT)):
        if not f.endswith(".onnx"):
            continue
        stem = f[: -len(".onnx")]
        name = stem.rsplit("_", 1)[0]
        rows.append((stem, ";".join(frozen_of(name, os.path.join(OUT, f)))))
    with open(os.path.join(HERE, "exports.csv"), "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["export", "frozen"])
        w.writerows(rows)


# ---------------------------------------------------------------------------------------
# Measurement.


def round_up(n, align):
    """`n` bytes rounded up to a multiple of `align` (a free's negative size likewise)."""
    return (1 if n >= 0 else -1) * (-(-abs(n) // align) * align)


def storage_bytes(tensors, align=1):
    """Bytes of the distinct storages of `tensors`, each rounded up to `align`."""
    seen, total = set(), 0
    for t in tensors:
        s = t.untyped_storage()
        if s.data_ptr() in seen or s.nbytes() == 0:
            continue
        seen.add(s.data_ptr())
        total += round_up(s.nbytes(), align)
    return total


def step_peak(model, inputs, labels, kind, ckpt=False, compiled=False):
    """The peak bytes of one step (see the module docs): (peak, live at the start), as
    requested, then with every allocation rounded up to 64 bytes (`ALIGN`)."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, fused=(kind == "fused"),
                            foreach=(kind == "foreach"))

    def loss_of(*xs):
        return F.cross_entropy(model(*xs, ckpt=ckpt), labels)

    # Every model compiles afresh: dynamo's cache is per code object, and one model's graphs
    # would count against the next one's recompilation limit (past it, it runs eagerly).
    torch._dynamo.reset()
    fn = torch.compile(loss_of) if compiled else loss_of

    def step():
        loss = fn(*inputs)
        loss.backward()
        del loss
        opt.step()
        opt.zero_grad(set_to_none=True)

    model.train()
    step()
    step()
    state = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
    held = list(model.parameters()) + list(model.buffers()) + state + list(inputs) + [labels]
    live, live64 = storage_bytes(held), storage_bytes(held, ALIGN)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                profile_memory=True) as prof:
        step()
    events = sorted(
        (e.start_ns(), e.nbytes())
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU
    )
    cur = peak = cur64 = peak64 = 0
    for _, d in events:
        cur += d
        peak = max(peak, cur)
        cur64 += round_up(d, ALIGN)
        peak64 = max(peak64, cur64)
    return live + peak, live, live64 + peak64, live64


# c10's CPU allocator places every allocation on a 64-byte boundary (`c10::gAlignment`); the
# profiler reports the bytes asked for. The `_a64` figures round each one up to 64: what the
# allocator occupies at least, and what memplan's `--align 64` plans.
ALIGN = 64

CONFIGS = {
    "eager": dict(kind="fused"),
    "eager_foreach": dict(kind="foreach"),
    "eager_per_tensor": dict(kind="per_tensor"),
    "compile": dict(kind="fused", compiled=True),
    "checkpoint": dict(kind="fused", ckpt=True),
}


def measure(only):
    rows = {}
    if os.path.exists(PEAKS):
        with open(PEAKS) as f:
            rows = {(r["model"], r["config"]): r for r in csv.DictReader(f)}
    torch.set_num_threads(1)
    for name in MODELS:
        if only and name not in only:
            continue
        for config, kw in CONFIGS.items():
            if os.environ.get("CONFIGS") and config not in os.environ["CONFIGS"].split(","):
                continue
            model, make, lshape, classes, _, _ = build(name)
            torch.manual_seed(1)
            inputs = make()
            labels = torch.randint(0, classes, lshape)
            try:
                peak, live, peak64, live64 = step_peak(model, inputs, labels, **kw)
            except Exception as e:  # noqa: BLE001
                print(f"{name} {config}: failed: {type(e).__name__}: {str(e)[:500]}",
                      file=sys.stderr)
                continue
            print(f"{name} {config}: peak {peak} (live at start {live})", file=sys.stderr)
            rows[(name, config)] = dict(model=name, config=config, peak_bytes=peak,
                                        start_bytes=live, peak_bytes_a64=peak64,
                                        start_bytes_a64=live64)
            with open(PEAKS, "w", newline="") as f:
                w = csv.DictWriter(f, ["model", "config", "peak_bytes", "start_bytes",
                                       "peak_bytes_a64", "start_bytes_a64"],
                                   lineterminator="\n")
                w.writeheader()
                for k in sorted(rows):
                    w.writerow(rows[k])


# ---------------------------------------------------------------------------------------
# memplan's side.


def memplan_total(binary, path, frozen, args, align=64):
    name = os.path.basename(path).rsplit("_", 1)[0]
    cmd = [binary, "plan", path, "--training", "adamw", "--format", "json", "--align", str(align),
           *MEMPLAN_ARGS.get(name, CONSTANTS), *args]
    if frozen:
        cmd += ["--frozen", ",".join(frozen)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed"
    import json

    plan = json.loads(r.stdout)
    return plan["total_bytes"], plan.get("training", {})


def table(binary, only=()):
    """Plans every export and checks the two targets twice: memplan at `--align 64` against
    PyTorch's allocations rounded up to 64 bytes (`_a64`), and memplan at `--align 1` against
    the bytes PyTorch asked for. The markdown table shows the first (MB = 10^6 bytes); the
    last column names every comparison that misses."""
    with open(PEAKS) as f:
        rows = list(csv.DictReader(f))
    peaks = {(r["model"], r["config"]): int(r["peak_bytes"]) for r in rows}
    peaks64 = {(r["model"], r["config"]): int(r["peak_bytes_a64"])
               for r in rows if r.get("peak_bytes_a64")}
    with open(os.path.join(HERE, "exports.csv")) as f:
        frozen_by = {r["export"]: [x for x in r["frozen"].split(";") if x] for r in csv.DictReader(f)}
    out = []
    mb = lambda b: f"{b / 1e6:,.2f}" if isinstance(b, int) else str(b)
    print("| model | export | PyTorch eager | torch.compile | per-block checkpoint | memplan none"
          " | memplan cheap | memplan auto at the checkpoint peak | misses |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for name in MODELS:
        if only and name not in only:
            continue
        eager, comp, ck = (peaks.get((name, c)) for c in ("eager", "compile", "checkpoint"))
        eager64, comp64, ck64 = (peaks64.get((name, c)) for c in ("eager", "compile",
                                                                  "checkpoint"))
        for exporter in EXPORTS:
            path = os.path.join(OUT, f"{name}_{exporter}.onnx")
            if not os.path.exists(path):
                continue
            frozen = frozen_by.get(f"{name}_{exporter}", [])
            none, _ = memplan_total(binary, path, frozen, ["--checkpoint", "none"])
            cheap, _ = memplan_total(binary, path, frozen, ["--checkpoint", "cheap"])
            none1, _ = memplan_total(binary, path, frozen, ["--checkpoint", "none"], align=1)
            cheap1, _ = memplan_total(binary, path, frozen, ["--checkpoint", "cheap"], align=1)
            auto = None
            budget = ck64 or ck
            if budget:
                auto, t = memplan_total(binary, path, frozen,
                                        ["--checkpoint", "auto", "--budget", str(budget)])
                if auto is not None:
                    r = t.get("recompute", {})
                    share = 100.0 * r.get("flops", 0) / max(r.get("forward_flops", 1), 1)
                    auto = f"{auto / 1e6:,.2f} ({share:.1f}%)"
            misses = [
                label
                for label, ours, theirs in (
                    ("none>eager@64", none, eager64), ("cheap>compile@64", cheap, comp64),
                    ("none>eager@1", none1, eager), ("cheap>compile@1", cheap1, comp),
                )
                if theirs is not None and (not isinstance(ours, int) or ours > theirs)
            ]
            row = dict(model=name, export=exporter, eager=eager, compile=comp, checkpoint=ck,
                       none=none, cheap=cheap, auto=auto, eager_a64=eager64,
                       compile_a64=comp64, checkpoint_a64=ck64, none_a1=none1,
                       cheap_a1=cheap1, misses=" ".join(misses))
            out.append(row)
            print(f"| {name} | {exporter} | {mb(eager64 or eager)} | {mb(comp64 or comp)}"
                  f" | {mb(ck64 or ck)} | {mb(none)} | {mb(cheap)}"
                  f" | {auto if isinstance(auto, str) else mb(auto)} | {' '.join(misses)} |",
                  flush=True)
    # Rows of the models not planned this time stay as they were.
    fresh = {(r["model"], r["export"]) for r in out}
    if only and os.path.exists(MEMPLAN_CSV):
        with open(MEMPLAN_CSV) as f:
            out += [r for r in csv.DictReader(f) if (r["model"], r["export"]) not in fresh]
    order = {m: i for i, m in enumerate(MODELS)}
    out.sort(key=lambda r: (order.get(r["model"], len(order)), list(EXPORTS).index(r["export"])))
    with open(MEMPLAN_CSV, "w", newline="") as f:
        fields = next((r for r in out if (r["model"], r["export"]) in fresh), out[0])
        w = csv.DictWriter(f, list(fields), lineterminator="\n", restval="")
        w.writeheader()
        w.writerows(out)


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("export", "frozen", "measure", "table"):
        sys.exit(__doc__)
    if sys.argv[1] == "export":
        export(sys.argv[2:])
    elif sys.argv[1] == "frozen":
        write_frozen()
    elif sys.argv[1] == "measure":
        measure(sys.argv[2:])
    else:
        table(sys.argv[2], sys.argv[3:])
