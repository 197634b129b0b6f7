#!/usr/bin/env python3
"""Ground truth for `memplan estimate --runtime hf`: the bytes PyTorch allocates in one
training step or one inference forward of a Hugging Face model (run by hand, never by CI).

Every model is built on PyTorch's fake tensors on the CPU device (no memory, no data), and
every storage an op returns is counted from the moment it is made until Python and autograd
release it (a weak reference on the storage). The step counted is the second one of a
training loop, so the optimizer states exist, as in every step but the first:

    loss = model(**inputs).loss     # the output object (and its logits) is dropped at once
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

Inference is one forward under `torch.no_grad()` with `use_cache=True` (generation's prefill:
the KV cache is filled) and `logits_to_keep=1` (`--logits last`) or 0 (`all`).

What is emulated, because fake CPU tensors would otherwise take CPU code paths:
- `torch.nn.functional.scaled_dot_product_attention` chooses its kernel as PyTorch does on a
  CUDA device of compute capability 9.0 (cuDNN when preferred, then flash, efficient, math;
  `sdp_utils.cpp`) and calls that kernel's own op, whose meta function allocates exactly what
  the CUDA kernel returns (the boolean mask converted to the query's dtype, as the CUDA path
  does, and padded for the efficient kernel);
- `--attention flash` registers an attention function that does what transformers'
  `flash_attention_forward` does around `flash_attn_func` (inputs as `[b, s, h, d]` views,
  `value` padded to the query's head width, f32 inputs cast to the autocast dtype) and
  calls PyTorch's flash kernel op, which returns what `flash_attn_func` returns;
- autocast (`--precision amp`) follows the CUDA autocast policy (ops cast to the 16-bit
  dtype, ops run in f32, ops that promote) as a `TorchFunctionMode`, with autocast's cache
  of weight casts kept for the whole forward.
Kernel workspaces that never pass through PyTorch's allocator as tensors (cuBLAS, the flash
backward's accumulators) are not seen: `gpu_check.py` measures them on a real device.

Precisions:
- `fp32`: f32 weights, gradients and AdamW states;
- `amp`: f32 weights, gradients and states, the forward under autocast to bf16;
- `mixed`: bf16 weights and gradients, f32 master weights and states: after the backward,
  each gradient is cast to f32 as its master's gradient and released, the optimizer steps
  the masters, and each master is copied back into its bf16 weight;
- `pure`: bf16 weights, gradients and states (AdamW on the bf16 parameters).
The 16-bit dtype is bf16 unless a setting says `"dtype": "f16"` (`--dtypes bf16 f16` draws
it): `amp` with f16 then trains as the Hugging Face Trainer does with `fp16=True` (through
accelerate): `torch.amp.GradScaler` scales the loss before the backward, `unscale_` divides
the gradients in place (before clipping), `step` runs the optimizer (a fused one reads the
scale and `found_inf` itself) and `update` moves the scale; the step taken is the one with
finite gradients (a skipped step allocates nothing). `mixed`/`pure` with f16 only change the
dtype (no scaler: `unscale_` refuses f16 gradients).
Optimizers: AdamW unless a setting says `"optimizer"`: `adam`, `momentum` (SGD, momentum
0.9), `sgd` (`--optimizers` draws them).
Optimizer kernels: `foreach` (`torch.optim.AdamW(foreach=True)`, PyTorch's default on a
GPU), `fused` (`fused=True`), `per-tensor` (`foreach=False`).
Checkpointing: `full` (transformers' `gradient_checkpointing_enable()`, non-reentrant),
`selective` (the attention core of every layer under `torch.utils.checkpoint`), `none`.

Configs: random ones for each of the 39 model types memplan reads (`--per-type N`), with
realistic widths and few layers, and every structural key flipped as
`testdata/configs/fuzz_configs.py` flips them. Each run writes one JSON line: the config,
the settings and what was counted (`--out FILE`). `--check-memtracker` also runs the step
under `torch.distributed._tools.mem_tracker.MemTracker` and records its peak.

Usage (a venv with torch and transformers):

    python testdata/runtime/harness.py --per-type 3 --seed 1 --out testdata/runtime/training.jsonl
    python testdata/runtime/harness.py --inference --per-type 3 --seed 2 --out testdata/runtime/inference.jsonl
"""

import argparse
import contextlib
import gc
import json
import math
import random
import sys
import time
import traceback
import warnings
import weakref

import torch
import torch.nn.functional as F
import transformers
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map_only

warnings.filterwarnings("ignore")
transformers.logging.set_verbosity_error()

TYPES = ["llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma",
         "gemma2", "gemma3_text", "gemma3", "phi3", "deepseek_v2", "deepseek_v3", "falcon",
         "gpt_neox", "starcoder2", "olmo2", "gpt2", "bert", "vit",
         # Added in the sixth session (drawn only when named, or with `--types` omitted).
         "granite", "smollm3", "phi", "cohere", "glm", "glm4", "olmo",
         # Added in the seventh session.
         "gpt_oss", "glm4_moe", "olmoe", "granitemoe", "cohere2", "seed_oss",
         # Added in the eighth session.
         "exaone4", "stablelm", "hunyuan_v1_dense",
         # Added in the ninth session.
         "ernie4_5", "ernie4_5_moe"]

CUDA_BLOCK = 512  # the caching allocator's rounding of every block


# --------------------------------------------------------------------------------------------
# Counting storages


class Counter(TorchDispatchMode):
    """Counts the storages op outputs hold, from creation until their last reference goes."""

    def __init__(self):
        super().__init__()
        self.refs = {}  # id(storage) -> (weakref, key)
        self.sizes = {}  # key -> bytes
        self.next_key = 0
        self.events = []  # (key, +1/-1, phase)
        self.phase = "setup"

    def track(self, t):
        if not isinstance(t, torch.Tensor):
            return
        st = t.untyped_storage()
        sid = id(st)
        entry = self.refs.get(sid)
        if entry is not None and entry[0]() is st:
            if st.nbytes() != self.sizes[entry[1]]:
                # A resize: count it as a free and a new allocation.
                self._free(entry[1])
                self._new(st, sid)
            return
        self._new(st, sid)

    def _new(self, st, sid):
        key = self.next_key
        self.next_key += 1
        self.sizes[key] = st.nbytes()
        self.events.append((key, 1, self.phase))

        def finalize(_ref, key=key, sid=sid, counter=self):
            counter._free(key)
            cur = counter.refs.get(sid)
            if cur is not None and cur[1] == key:
                del counter.refs[sid]

        self.refs[sid] = (weakref.ref(st, finalize), key)

    def _free(self, key):
        self.events.append((key, -1, self.phase))

    def key_of(self, t):
        entry = self.refs.get(id(t.untyped_storage()))
        return entry[1] if entry is not None and entry[0]() is t.untyped_storage() else None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tree_map_only(torch.Tensor, self.track, out)
        return out


def replay(counter, start, classes):
    """Peaks of the events from `start` on: total (raw and rounded to CUDA blocks), the phase
    of the total's peak, and the peak of what is not weights, gradients or optimizer state."""
    live = {}
    for key, sign, _ in counter.events[:start]:
        if sign > 0:
            live[key] = counter.sizes[key]
        else:
            live.pop(key, None)
    total = sum(live.values())
    rounded = sum(round_block(b) for b in live.values())
    persistent = sum(b for k, b in live.items() if classes.get(k, "other") != "other")
    out = {"start_bytes": total, "peak_bytes": total, "peak_rounded_bytes": rounded,
           "peak_phase": "start", "activation_peak_bytes": total - persistent,
           "phase_peaks": {}}
    for key, sign, phase in counter.events[start:]:
        size = counter.sizes[key]
        cls = classes.get(key, "other")
        if sign > 0:
            if key in live:
                continue
            live[key] = size
            total += size
            rounded += round_block(size)
            if cls != "other":
                persistent += size
        else:
            if key not in live:
                continue
            del live[key]
            total -= size
            rounded -= round_block(size)
            if cls != "other":
                persistent -= size
        if total > out["peak_bytes"]:
            out["peak_bytes"] = total
            out["peak_phase"] = phase
        out["peak_rounded_bytes"] = max(out["peak_rounded_bytes"], rounded)
        if phase != "optimizer":
            out["activation_peak_bytes"] = max(out["activation_peak_bytes"], total - persistent)
        out["phase_peaks"][phase] = max(out["phase_peaks"].get(phase, 0), total)
    return out


def round_block(size):
    if size == 0:
        return 0
    return (size + CUDA_BLOCK - 1) // CUDA_BLOCK * CUDA_BLOCK


# --------------------------------------------------------------------------------------------
# SDPA as on a CUDA device of compute capability 9.0


def sdpa_backend(q, k, v, mask, dropout, is_causal, enable_gqa):
    half = q.dtype in (torch.float16, torch.bfloat16)
    d_qk, d_v = q.shape[-1], v.shape[-1]
    s_q, s_k = q.shape[-2], k.shape[-2]
    heads_ok = q.shape[1] == k.shape[1] or (enable_gqa and q.shape[1] % k.shape[1] == 0)
    # cuDNN first (preferred on sm90 with cuDNN > 9.15), then flash, efficient, math.
    cudnn = (half and heads_ok and d_qk <= 256 and d_v <= 256 and d_qk % 8 == 0 and d_v % 8 == 0
             and s_k != 1 and (dropout * 16) == math.floor(dropout * 16)
             and (d_qk <= 128 and d_v <= 128 or d_qk == d_v == 256 or (d_qk, d_v) == (192, 128)))
    if PREFER_CUDNN and cudnn:
        return "cudnn"
    flash = (half and mask is None and d_qk == d_v and d_qk <= 256 and heads_ok
             and (not is_causal or s_q == s_k))
    if flash:
        return "flash"
    align = 8 if half else 4
    # The efficient kernel takes key/value heads equal to the query's (its meta function, as
    # PyTorch releases before GQA support in it); grouped heads fall to the math path.
    efficient = d_qk % align == 0 and d_v % align == 0 and q.shape[1] == k.shape[1]
    if efficient:
        return "efficient"
    return "math"


PREFER_CUDNN = True
ORIGINAL_SDPA = F.scaled_dot_product_attention


def cuda_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
              enable_gqa=False):
    if AUTOCAST_ON:
        # Autocast casts SDPA's floating inputs (a float mask too) to the 16-bit dtype.
        def cast(t):
            if t is not None and t.is_floating_point() and t.dtype != AUTOCAST_DTYPE:
                return t.to(AUTOCAST_DTYPE)
            return t
        query, key, value, attn_mask = cast(query), cast(key), cast(value), cast(attn_mask)
    backend = sdpa_backend(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
    SDPA_CHOICES[backend] = SDPA_CHOICES.get(backend, 0) + 1
    if attn_mask is not None and attn_mask.dtype == torch.bool and backend != "math":
        # convert_boolean_attn_mask: zeros in the query's dtype, -inf where the mask is off.
        converted = torch.zeros_like(attn_mask, dtype=query.dtype)
        converted.masked_fill_(attn_mask.logical_not(), float("-inf"))
        attn_mask = converted
    elif attn_mask is not None and attn_mask.dtype == torch.bool:
        # convert_boolean_attn_mask before the math path: `where(logical_not(mask), -inf, 0)`.
        attn_mask = torch.where(attn_mask.logical_not(), float("-inf"),
                                torch.scalar_tensor(0.0, dtype=query.dtype))
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    if backend == "cudnn":
        out = torch.ops.aten._scaled_dot_product_cudnn_attention(
            query, key, value, attn_mask, grad, dropout_p, is_causal, False, scale=scale)[0]
    elif backend == "flash":
        out = torch.ops.aten._scaled_dot_product_flash_attention(
            query, key, value, dropout_p, is_causal, False, scale=scale)[0]
    elif backend == "efficient":
        if attn_mask is not None:
            # preprocess_mask: the last dimension padded to a multiple of 16, then sliced.
            last = attn_mask.shape[-1]
            pad = (16 - last % 16) % 16
            if pad:
                attn_mask = F.pad(attn_mask, (0, pad))[..., :last]
            attn_mask = attn_mask.expand(query.shape[0], query.shape[1], query.shape[2], last)
        out = torch.ops.aten._scaled_dot_product_efficient_attention(
            query, key, value, attn_mask, grad, dropout_p, is_causal, scale=scale)[0]
    else:
        out = torch.ops.aten._scaled_dot_product_attention_math(
            query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale,
            enable_gqa=enable_gqa)[0]
    return out


SDPA_CHOICES = {}


def flash_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                    sliding_window=None, softcap=None, is_causal=None, **kwargs):
    """transformers' `flash_attention_forward` around `flash_attn_func`: the same tensors."""
    query = query.transpose(1, 2)
    key = key.transpose(1, 2)
    value = value.transpose(1, 2)
    head_dim, v_head_dim = query.shape[-1], value.shape[-1]
    if v_head_dim != head_dim:
        value = F.pad(value, [0, head_dim - v_head_dim])
    if query.dtype == torch.float32:
        target = AUTOCAST_DTYPE if AUTOCAST_ON else next(
            m for m in module.modules() if isinstance(m, torch.nn.Linear)).weight.dtype
        query, key, value = query.to(target), key.to(target), value.to(target)
    causal = is_causal if is_causal is not None else module.is_causal
    out = torch.ops.aten._scaled_dot_product_flash_attention(
        query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), dropout, causal,
        False, scale=scaling)[0].transpose(1, 2)
    if v_head_dim != head_dim:
        out = out[..., :v_head_dim]
    return out, None


def checkpointed_attention(inner):
    """Selective checkpointing: the attention core recomputed in the backward. `inner` None
    is the model's own eager attention (`eager_attention_forward` of its modelling module:
    Gemma 2's softcapping, GPT-2's and BERT's own), as the model would call it."""
    def attention(module, query, key, value, attention_mask, **kwargs):
        fn = inner
        if fn is None:
            fn = getattr(sys.modules[type(module).__module__], "eager_attention_forward")

        def core(q, k, v, m):
            return fn(module, q, k, v, m, **kwargs)[0]
        return amp_checkpoint(core, query, key, value, attention_mask), None
    return attention


# --------------------------------------------------------------------------------------------
# CUDA autocast as a TorchFunctionMode

AUTOCAST_ON = False
AUTOCAST_DTYPE = torch.bfloat16


class CudaAutocast(TorchFunctionMode):
    """The CUDA autocast policy: `lower` ops cast floating inputs to the 16-bit dtype (leaf
    weights through a cache kept until the mode exits), `fp32` ops cast them to f32,
    `set_dtype` ops compute in f32 without casting their input, `promote` ops run in the
    widest input dtype."""

    def __init__(self, dtype):
        super().__init__()
        self.dtype = dtype
        self.cache = {}
        T = torch.Tensor
        self.lower = {F.linear, torch.matmul, T.matmul, T.__matmul__, T.__rmatmul__, torch.bmm,
                      T.bmm, torch.mm, T.mm, torch.baddbmm, T.baddbmm, torch.addmm, T.addmm,
                      torch.addbmm, torch.einsum, F.conv2d, torch.conv2d, F.conv1d, torch.mv,
                      torch.addmv, F.scaled_dot_product_attention, F.prelu}
        self.fp32 = {torch.pow, T.pow, T.__pow__, torch.rsqrt, T.rsqrt, torch.exp, T.exp,
                     torch.log, T.log, torch.log1p, torch.expm1, torch.reciprocal, T.reciprocal,
                     torch.acos, torch.asin, torch.cosh, torch.sinh, torch.tan, torch.erfinv,
                     F.layer_norm, F.group_norm, F.softplus, F.mse_loss, F.nll_loss,
                     F.binary_cross_entropy_with_logits, F.l1_loss, F.smooth_l1_loss,
                     torch.logsumexp, T.logsumexp, torch.cdist, torch.dist}
        self.set_dtype = {F.softmax, torch.softmax, T.softmax, F.log_softmax, torch.log_softmax,
                          T.log_softmax, torch.cumsum, T.cumsum, torch.cumprod, torch.sum,
                          T.sum, torch.prod, T.prod}
        self.promote = {torch.cat, torch.stack, torch.addcdiv, torch.addcmul, torch.atan2,
                        torch.cross, torch.dot, torch.index_put, torch.scatter_add,
                        torch.tensordot}

    def cast(self, x, dtype):
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dtype == dtype:
            return x
        if x.is_leaf and x.requires_grad and dtype == self.dtype:
            cached = self.cache.get(id(x))
            if cached is not None and cached[0]() is x:
                return cached[1]
            y = x.to(dtype)
            self.cache[id(x)] = (weakref.ref(x), y)
            return y
        return x.to(dtype)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.cross_entropy:
            logits, target = args[0], args[1]
            rest = {k: v for k, v in kwargs.items() if k in ("ignore_index", "reduction", "weight")}
            return F.nll_loss(F.log_softmax(logits, 1, dtype=torch.float32), target, **rest)
        if func in self.lower:
            args = tree_map_only(torch.Tensor, lambda t: self.cast(t, self.dtype), args)
            kwargs = tree_map_only(torch.Tensor, lambda t: self.cast(t, self.dtype), kwargs)
        elif func in self.fp32:
            args = tree_map_only(torch.Tensor, lambda t: self.cast(t, torch.float32), args)
            kwargs = tree_map_only(torch.Tensor, lambda t: self.cast(t, torch.float32), kwargs)
        elif func in self.set_dtype:
            first = args[0] if args else None
            if (isinstance(first, torch.Tensor) and first.is_floating_point()
                    and first.dtype != torch.float32 and kwargs.get("dtype") is None):
                kwargs = dict(kwargs, dtype=torch.float32)
        elif func in self.promote:
            tensors = [t for t in _flatten(args) if isinstance(t, torch.Tensor)
                       and t.is_floating_point()]
            if tensors:
                widest = max((t.dtype for t in tensors), key=lambda d: torch.finfo(d).bits)
                args = tree_map_only(torch.Tensor, lambda t: self.cast(t, widest)
                                     if t.is_floating_point() else t, args)
        return func(*args, **kwargs)


def _flatten(x):
    if isinstance(x, (list, tuple)):
        for y in x:
            yield from _flatten(y)
    else:
        yield x


@contextlib.contextmanager
def autocast(enabled, dtype=torch.bfloat16):
    global AUTOCAST_ON, AUTOCAST_DTYPE
    if not enabled:
        yield
        return
    AUTOCAST_ON, AUTOCAST_DTYPE = True, dtype
    mode = CudaAutocast(dtype)
    try:
        with mode:
            yield
    finally:
        AUTOCAST_ON = False
        mode.cache.clear()


def amp_checkpoint(function, *args, **kwargs):
    """`torch.utils.checkpoint.checkpoint` (non-reentrant) whose recomputation runs under the
    emulated autocast when the forward did, as the real one re-enters `torch.autocast`."""
    from torch.utils.checkpoint import checkpoint
    amp = AUTOCAST_ON

    def run(*a, **k):
        if amp and not AUTOCAST_ON:
            with autocast(True, AUTOCAST_DTYPE):
                return function(*a, **k)
        return function(*a, **k)
    kwargs.setdefault("use_reentrant", False)
    return checkpoint(run, *args, **kwargs)


# --------------------------------------------------------------------------------------------
# Random configs


def pick(rng, xs):
    return rng.choice(xs)


# `--wide`: shapes and settings outside the default grid (odd head widths and head counts,
# large GQA ratios, vocabularies that are not multiples of 64, odd batch and sequence
# lengths, long sequences, partial rotary). The default grid is unchanged, so earlier seeds
# reproduce their rows.
WIDE = False


def heads_for(rng, hidden_choices=(256, 384, 512, 768, 1024, 1536, 2048)):
    if WIDE:
        head_dim = pick(rng, [48, 80, 96, 112, 128, 160, 192, 256])
        heads = pick(rng, [3, 5, 6, 10, 14, 20, 24, 28, 40])
        while heads * head_dim > 5120:
            heads = max(1, heads // 2)
        return heads, head_dim
    head_dim = pick(rng, [32, 64, 64, 128, 128])
    heads = pick(rng, [2, 4, 8, 12, 16, 32])
    while heads * head_dim > 4096:
        heads //= 2
    return heads, head_dim


def kv_heads(rng, heads, modes=("mha", "gqa", "gqa", "mqa", "omit")):
    mode = pick(rng, modes)
    divisors = [d for d in range(2, heads) if heads % d == 0]
    if mode == "gqa" and not divisors:
        mode = "mha"
    return {"mha": heads, "mqa": 1, "gqa": pick(rng, divisors) if divisors else heads,
            "omit": None}[mode]


def base(rng, head_dim_key=True):
    heads, head_dim = heads_for(rng)
    hidden = heads * head_dim
    kw = dict(hidden_size=hidden, num_attention_heads=heads,
              intermediate_size=int(hidden * pick(rng, [2, 2.5, 2.75, 3.5, 4])) // 8 * 8,
              num_hidden_layers=rng.randint(1, 4),
              vocab_size=pick(rng, [1000, 4096, 32000, 50257, 65536, 128256, 151936]))
    if WIDE:
        kw["intermediate_size"] = int(hidden * pick(rng, [1.5, 2.6875, 3.5, 5.25])) // 4 * 4 + 4
        kw["vocab_size"] = pick(rng, [32001, 49155, 50280, 100352, 152064, 256000])
    if head_dim_key and rng.random() < 0.3:
        kw["head_dim"] = pick(rng, [64, 128, 256] if not WIDE else [72, 96, 160, 256])
    return kw


def gen(model_type, rng):
    kw = base(rng, head_dim_key=model_type not in ("gpt_neox", "falcon", "gpt2", "bert", "vit",
                                                    "deepseek_v2", "deepseek_v3", "phi",
                                                    "olmoe"))
    heads = kw["num_attention_heads"]
    kv = kv_heads(rng, heads)
    if model_type in ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
                      "gemma", "gemma2", "gemma3_text", "phi3", "starcoder2", "olmo2", "granite", "smollm3", "cohere", "glm", "glm4", "olmo"):
        if kv is not None:
            kw["num_key_value_heads"] = kv
        kw["tie_word_embeddings"] = rng.random() < 0.3
    if model_type == "smollm3":
        # Its class default of 4 key/value heads need not divide the drawn head count.
        kw["num_key_value_heads"] = kv or heads
        kw["pad_token_id"] = 0  # its default (128004) is outside small vocabularies
        if rng.random() < 0.5:
            kw["no_rope_layer_interval"] = pick(rng, [2, 3, 4])
        else:
            kw["no_rope_layers"] = [pick(rng, [0, 1, 1]) for _ in range(kw["num_hidden_layers"])]
        if rng.random() < 0.3:
            kw["use_sliding_window"] = True
            kw["sliding_window"] = pick(rng, [64, 256, 4096])
    if model_type in ("llama", "granite", "smollm3"):
        kw["attention_bias"] = rng.random() < 0.2
        kw["mlp_bias"] = rng.random() < 0.2
    if model_type == "granite":
        kw["embedding_multiplier"] = pick(rng, [1.0, 12.0])
        kw["residual_multiplier"] = pick(rng, [1.0, 0.22])
        kw["attention_multiplier"] = pick(rng, [0.0078125, 0.015625])
        kw["logits_scaling"] = pick(rng, [1.0, 8.0])
    if model_type in ("mistral", "mixtral", "starcoder2", "phi3"):
        kw["sliding_window"] = pick(rng, [None, None, 64, 256, 4096])
    if model_type == "mixtral":
        kw["num_local_experts"] = pick(rng, [2, 4, 8])
        kw["num_experts_per_tok"] = rng.randint(1, min(2, kw["num_local_experts"]))
        kw["intermediate_size"] = kw["intermediate_size"] // 2 // 8 * 8
    if model_type in ("qwen2", "qwen3"):
        if rng.random() < 0.3:
            kw["use_sliding_window"] = True
            kw["sliding_window"] = pick(rng, [64, 256])
            kw["max_window_layers"] = rng.randint(0, kw["num_hidden_layers"])
    if model_type in ("qwen2_moe", "qwen3_moe"):
        kw["num_experts"] = pick(rng, [4, 8, 16])
        kw["num_experts_per_tok"] = pick(rng, [1, 2, 4])
        kw["moe_intermediate_size"] = pick(rng, [128, 256, 512])
        if rng.random() < 0.3:
            kw["decoder_sparse_step"] = 2
        if model_type == "qwen2_moe":
            kw["shared_expert_intermediate_size"] = pick(rng, [0, 512, 1024])
    if model_type in ("gemma", "gemma2", "gemma3_text"):
        kw["head_dim"] = pick(rng, [64, 128, 256])
        kw["tie_word_embeddings"] = True
    if model_type in ("gemma2", "gemma3_text"):
        kw["sliding_window"] = pick(rng, [64, 256, 4096])
        if model_type == "gemma2":
            kw["attn_logit_softcapping"] = pick(rng, [None, 50.0])
            kw["final_logit_softcapping"] = pick(rng, [None, 30.0])
        else:
            kw["sliding_window_pattern"] = pick(rng, [2, 6])
    if model_type == "gemma3":
        text = gen("gemma3_text", rng)
        text["model_type"] = "gemma3_text"
        vision = dict(model_type="siglip_vision_model", hidden_size=pick(rng, [128, 256]),
                      intermediate_size=512, num_hidden_layers=rng.randint(1, 2),
                      num_attention_heads=4, image_size=224, patch_size=14)
        text["vocab_size"] = max(text["vocab_size"], 4096)
        return dict(text_config=text, vision_config=vision, mm_tokens_per_image=16,
                    image_token_index=text["vocab_size"] - 1,
                    boi_token_index=text["vocab_size"] - 3, eoi_token_index=text["vocab_size"] - 2)
    if model_type == "qwen3":
        kw["attention_bias"] = rng.random() < 0.2
        kw.setdefault("head_dim", kw["hidden_size"] // heads)
    if model_type == "phi3":
        kw["pad_token_id"] = 0
        kw["bos_token_id"] = 0
        kw["eos_token_id"] = 0
        kw.pop("head_dim", None)
        if WIDE and rng.random() < 0.5:
            kw["partial_rotary_factor"] = pick(rng, [0.5, 0.75])
    if model_type in ("deepseek_v2", "deepseek_v3"):
        kw.pop("head_dim", None)
        kw["q_lora_rank"] = pick(rng, [None, 256, 512])
        kw["kv_lora_rank"] = pick(rng, [128, 256, 512])
        kw["qk_nope_head_dim"] = pick(rng, [64, 128])
        kw["qk_rope_head_dim"] = pick(rng, [32, 64])
        kw["v_head_dim"] = pick(rng, [64, 128])
        e = pick(rng, [4, 8, 16])
        kw["n_routed_experts"] = e
        kw["num_experts_per_tok"] = pick(rng, [1, 2, 4])
        kw["n_shared_experts"] = pick(rng, [0, 1, 2])
        kw["moe_intermediate_size"] = pick(rng, [128, 256])
        kw["first_k_dense_replace"] = rng.randint(0, kw["num_hidden_layers"])
        if model_type == "deepseek_v3":
            kw["n_group"] = 1
            kw["topk_group"] = 1
        else:
            kw["topk_method"] = "greedy"
    if model_type == "falcon":
        kw.pop("intermediate_size")
        kw["new_decoder_architecture"] = rng.random() < 0.5
        if kw["new_decoder_architecture"]:
            kw["num_kv_heads"] = kv or heads
        else:
            kw["multi_query"] = rng.random() < 0.5
        kw["parallel_attn"] = rng.random() < 0.7
        kw["bias"] = rng.random() < 0.3
    if model_type == "olmo":
        kw["attention_bias"] = rng.random() < 0.2
        kw["pad_token_id"] = 0
    if model_type == "seed_oss":
        kw["num_key_value_heads"] = kv or heads
        kw["tie_word_embeddings"] = rng.random() < 0.2
        kw["attention_bias"] = rng.random() < 0.8
        kw["attention_out_bias"] = rng.random() < 0.2
        kw["mlp_bias"] = rng.random() < 0.2
        kw["attention_dropout"] = pick(rng, [0.0, 0.1])
        kw["residual_dropout"] = pick(rng, [0.0, 0.1])
        kw["pad_token_id"] = 0
    if model_type == "olmoe":
        if kv is not None:
            kw["num_key_value_heads"] = kv
        kw["tie_word_embeddings"] = rng.random() < 0.2
        kw["attention_bias"] = rng.random() < 0.2
        kw["num_experts"] = pick(rng, [4, 8, 16])
        kw["num_experts_per_tok"] = pick(rng, [1, 2, 4])
        kw["intermediate_size"] = pick(rng, [128, 256, 512])
        kw["norm_topk_prob"] = rng.random() < 0.5
    if model_type == "granitemoe":
        if kv is not None:
            kw["num_key_value_heads"] = kv
        kw["tie_word_embeddings"] = rng.random() < 0.3
        kw["attention_bias"] = rng.random() < 0.2
        kw["num_local_experts"] = pick(rng, [4, 8, 16])
        kw["num_experts_per_tok"] = pick(rng, [1, 2, 4])
        kw["intermediate_size"] = pick(rng, [128, 256, 512])
        kw["embedding_multiplier"] = pick(rng, [1.0, 12.0])
        kw["residual_multiplier"] = pick(rng, [1.0, 0.22])
        kw["attention_multiplier"] = pick(rng, [0.0078125, 0.015625])
        kw["logits_scaling"] = pick(rng, [1.0, 8.0])
    if model_type == "glm4_moe":
        kw["num_key_value_heads"] = kv or heads
        kw.setdefault("head_dim", kw["hidden_size"] // heads)
        kw["tie_word_embeddings"] = rng.random() < 0.2
        kw["attention_bias"] = rng.random() < 0.5
        kw["use_qk_norm"] = rng.random() < 0.4
        kw["partial_rotary_factor"] = pick(rng, [0.5, 0.5, 0.25, 1.0])
        kw["n_routed_experts"] = pick(rng, [4, 8, 16])
        kw["num_experts_per_tok"] = pick(rng, [1, 2, 4])
        kw["moe_intermediate_size"] = pick(rng, [128, 256, 384])
        kw["n_shared_experts"] = pick(rng, [0, 1, 1, 2])
        kw["first_k_dense_replace"] = rng.randint(0, kw["num_hidden_layers"])
        kw["norm_topk_prob"] = rng.random() < 0.7
        kw["routed_scaling_factor"] = pick(rng, [1.0, 2.5])
        kw["pad_token_id"] = 0
    if model_type == "gpt_oss":
        # Its class default of 8 key/value heads need not divide the drawn head count.
        kw["num_key_value_heads"] = kv or heads
        kw["tie_word_embeddings"] = rng.random() < 0.2
        kw["attention_bias"] = rng.random() < 0.8
        kw["num_local_experts"] = pick(rng, [4, 8, 16, 32])
        kw["num_experts_per_tok"] = pick(rng, [1, 2, 4])
        kw["intermediate_size"] = pick(rng, [256, 384, 720, 1024])
        kw["sliding_window"] = pick(rng, [64, 128, 256, 4096])
        if rng.random() < 0.3:
            kw["layer_types"] = [pick(rng, ["sliding_attention", "full_attention"])
                                 for _ in range(kw["num_hidden_layers"])]
    if model_type in ("glm", "glm4"):
        kw["attention_bias"] = rng.random() < 0.8
        kw["partial_rotary_factor"] = pick(rng, [0.5, 0.5, 0.25, 1.0])
        kw["pad_token_id"] = 0
        kw.setdefault("head_dim", kw["hidden_size"] // heads)
    if model_type == "cohere2":
        kw["num_key_value_heads"] = kv or heads
        kw["tie_word_embeddings"] = rng.random() < 0.7
        kw["sliding_window"] = pick(rng, [64, 256, 4096])
        if rng.random() < 0.3:
            kw["layer_types"] = [pick(rng, ["sliding_attention", "full_attention"])
                                 for _ in range(kw["num_hidden_layers"])]
        else:
            kw["sliding_window_pattern"] = pick(rng, [2, 4])
    if model_type == "exaone4":
        # Its class default of 32 key/value heads need not divide the drawn head count.
        kw["num_key_value_heads"] = kv or heads
        kw["tie_word_embeddings"] = rng.random() < 0.5
        kw["pad_token_id"] = 0
        kw["sliding_window"] = pick(rng, [64, 256, 4096, None])
        if kw["sliding_window"] is None:
            # Without a window the config class needs the list (its pattern becomes 0).
            kw["layer_types"] = ["full_attention"] * kw["num_hidden_layers"]
        elif rng.random() < 0.3:
            kw["layer_types"] = [pick(rng, ["sliding_attention", "full_attention"])
                                 for _ in range(kw["num_hidden_layers"])]
        else:
            kw["sliding_window_pattern"] = pick(rng, [2, 4])
    if model_type == "hunyuan_v1_dense":
        # Its attention reads `head_dim` as given (None fails).
        kw.setdefault("head_dim", kw["hidden_size"] // heads)
        kw["num_key_value_heads"] = kv or heads
        kw["tie_word_embeddings"] = rng.random() < 0.3
        kw["attention_bias"] = rng.random() < 0.3
        kw["pad_token_id"] = 0
    if model_type == "stablelm":
        # Its attention splits `hidden_size` evenly (it never reads `head_dim`).
        kw.pop("head_dim", None)
        kw["num_key_value_heads"] = kv or heads
        kw["tie_word_embeddings"] = rng.random() < 0.2
        kw["use_qkv_bias"] = rng.random() < 0.5
        kw["use_parallel_residual"] = rng.random() < 0.4
        kw["partial_rotary_factor"] = pick(rng, [0.25, 0.25, 0.5, 1.0])
        kw["hidden_dropout"] = pick(rng, [0.0, 0.0, 0.1])
        kw["attention_dropout"] = pick(rng, [0.0, 0.0, 0.1])
        kw["pad_token_id"] = 0
        # StableLM 2 12B's per-head LayerNorms of Q and K (ninth session), drawn from a
        # stream of the config's own: the seed's stream (every later draw) is unchanged.
        if random.Random(json.dumps(kw, sort_keys=True)).random() < 0.4:
            kw["qk_layernorm"] = True
    if model_type == "ernie4_5_moe":
        kw["moe_num_experts"] = pick(rng, [4, 8, 16])
        kw["moe_k"] = pick(rng, [1, 2, 4])
        kw["moe_intermediate_size"] = pick(rng, [128, 256, 512])
        kw["moe_num_shared_experts"] = pick(rng, [0, 1, 2])
        kw["moe_layer_start_index"] = pick(rng, [0, 1])
        kw["moe_layer_interval"] = pick(rng, [1, 1, 2])
    if model_type in ("ernie4_5", "ernie4_5_moe"):
        # Llama's layers; `use_bias` on every projection but the head; its class default
        # of 2 key/value heads need not divide the drawn head count.
        kw["num_key_value_heads"] = kv or heads
        kw["tie_word_embeddings"] = rng.random() < 0.6
        kw["use_bias"] = rng.random() < 0.4
        kw["pad_token_id"] = 0
    if model_type in ("cohere", "cohere2"):
        kw["attention_bias"] = rng.random() < 0.2
        kw["logit_scale"] = pick(rng, [0.0625, 0.125, 1.0])
        kw["pad_token_id"] = 0
    if model_type == "phi":
        if kv is not None:
            kw["num_key_value_heads"] = kv
        kw["tie_word_embeddings"] = rng.random() < 0.2
        kw["partial_rotary_factor"] = pick(rng, [0.5, 0.5, 0.25, 0.75, 1.0])
        kw["resid_pdrop"] = pick(rng, [0.0, 0.1])
        kw["embd_pdrop"] = pick(rng, [0.0, 0.1])
        kw["attention_dropout"] = pick(rng, [0.0, 0.0, 0.1])
        kw["hidden_act"] = pick(rng, ["gelu_new", "gelu_new", "gelu"])
    if model_type == "gpt_neox":
        kw["use_parallel_residual"] = rng.random() < 0.7
        kw["rotary_pct"] = pick(rng, [0.25, 1.0] if not WIDE else [0.25, 0.5, 1.0])
        kw["attention_bias"] = rng.random() < 0.7
    if model_type == "starcoder2":
        pass
    if model_type == "olmo2":
        pass
    if model_type == "gpt2":
        return dict(n_embd=kw["hidden_size"], n_layer=kw["num_hidden_layers"], n_head=heads,
                    vocab_size=kw["vocab_size"], n_positions=pick(rng, [1024, 2048, 4096]),
                    attn_pdrop=pick(rng, [0.0, 0.1]), resid_pdrop=pick(rng, [0.0, 0.1]),
                    embd_pdrop=pick(rng, [0.0, 0.1]))
    if model_type == "bert":
        kw["max_position_embeddings"] = pick(rng, [512, 1024, 2048])
        kw["vocab_size"] = pick(rng, [30522, 50000])
        kw["attention_probs_dropout_prob"] = pick(rng, [0.0, 0.1])
        kw["hidden_dropout_prob"] = pick(rng, [0.0, 0.1])
    if model_type == "vit":
        kw.pop("vocab_size")
        kw["image_size"] = pick(rng, [224, 384])
        kw["patch_size"] = pick(rng, [16, 32])
        kw["num_labels"] = pick(rng, [10, 1000])
        kw["attention_probs_dropout_prob"] = pick(rng, [0.0, 0.1])
        kw["hidden_dropout_prob"] = pick(rng, [0.0, 0.1])
    return kw


# --------------------------------------------------------------------------------------------
# Building and running


def build(model_type, kw, dtype, attention, checkpointing):
    from transformers import AutoConfig
    import transformers as tf
    cfg_kw = dict(kw)
    config = AutoConfig.for_model(model_type, **cfg_kw)
    if model_type == "gemma3":
        config.text_config._attn_implementation = attn_name(attention)
    config._attn_implementation = attn_name(attention)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        if model_type == "bert":
            model = tf.BertForSequenceClassification(config)
        elif model_type == "vit":
            model = tf.ViTForImageClassification(config)
        elif model_type == "gemma3":
            model = tf.Gemma3ForConditionalGeneration(config)
        else:
            model = tf.AutoModelForCausalLM.from_config(config, dtype=dtype)
    finally:
        torch.set_default_dtype(previous)
    if checkpointing == "full":
        model.gradient_checkpointing_enable()
        for m in model.modules():
            if getattr(m, "gradient_checkpointing", False):
                m._gradient_checkpointing_func = amp_checkpoint
    return model, config


def attn_name(attention):
    return {"eager": "eager", "sdpa": "sdpa", "flash": "memplan_fa",
            "eager_selective": "memplan_eager_selective",
            "sdpa_selective": "memplan_sdpa_selective",
            "flash_selective": "memplan_fa_selective"}[attention]


def device_like_masks():
    """Masks as transformers builds them on a device: its mask code treats fake tensors as a
    trace (it cannot read their values) and would build a full mask where a device run skips
    it (`is_causal`), or find packed sequences in plain position ids."""
    import transformers.masking_utils as mu
    mu.is_tracing = lambda tensor=None: False
    mu.find_packed_sequence_indices = lambda position_ids: None


ORIGINAL_DROPOUT = F.dropout


def cuda_dropout(input, p=0.5, training=True, inplace=False):
    """Dropout as on a CUDA device: `native_dropout`, which saves a one-byte mask (the CPU
    path multiplies by a noise tensor of the input's dtype)."""
    if training and 0.0 < p < 1.0 and input.numel() > 0:
        return torch.ops.aten.native_dropout(input, p, True)[0]
    return ORIGINAL_DROPOUT(input, p, training, inplace)


def fake_friendly_init():
    """SigLIP's truncated-normal init reads values; fake tensors have none (the values do
    not matter here)."""
    import transformers.initialization as init
    init.TORCH_INIT_FUNCTIONS["trunc_normal_"] = lambda tensor, *a, **k: tensor


def register_attention():
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask
    AttentionInterface.register("memplan_fa", flash_attention)
    AttentionInterface.register("memplan_eager_selective", checkpointed_attention(None))
    AttentionInterface.register("memplan_sdpa_selective", checkpointed_attention(sdpa_attention_forward))
    # The masks the selective variants get are the ones their kernel would (transformers
    # builds none for an attention name its mask interface does not know).
    AttentionMaskInterface.register("memplan_eager_selective", eager_mask)
    AttentionMaskInterface.register("memplan_sdpa_selective", sdpa_mask)
    AttentionInterface.register("memplan_fa_selective", checkpointed_attention(flash_attention))


def inputs_for(model_type, config, batch, seq):
    if model_type == "vit":
        size = config.image_size
        return dict(pixel_values=torch.randn(batch, config.num_channels, size, size),
                    labels=torch.randint(0, config.num_labels, (batch,)))
    if model_type == "bert":
        return dict(input_ids=torch.randint(0, config.vocab_size, (batch, seq)),
                    labels=torch.randint(0, config.num_labels, (batch,)))
    vocab = config.text_config.vocab_size if model_type == "gemma3" else config.vocab_size
    ids = torch.randint(0, vocab - 8, (batch, seq))
    return dict(input_ids=ids, labels=ids)


def classify(counter, model, optimizer, masters):
    classes = {}
    for p in model.parameters():
        classes[counter.key_of(p)] = "weights"
        if p.grad is not None:
            classes[counter.key_of(p.grad)] = "gradients"
    for b in model.buffers():
        classes[counter.key_of(b)] = "weights"
    for m in masters:
        classes[counter.key_of(m)] = "optimizer"
        if m.grad is not None:
            classes[counter.key_of(m.grad)] = "gradients"
    for state in optimizer.state.values():
        for v in state.values():
            if isinstance(v, torch.Tensor):
                classes[counter.key_of(v)] = "optimizer"
    classes.pop(None, None)
    return classes


def train_run(model_type, kw, batch, seq, precision, attention, checkpointing, kernel,
              memtracker=False, dtype="bf16", optimizer="adamw"):
    half = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    dtype = {"fp32": torch.float32, "amp": torch.float32, "mixed": half, "pure": half}[precision]
    # f16 autocast trains with a loss scaler, as the Hugging Face Trainer does with
    # `fp16=True` (accelerate's `GradScaler`): the loss is scaled before the backward, the
    # gradients unscaled in place (`unscale_` before clipping), the step taken, the scale
    # updated. bf16 needs no scaler.
    scaler = torch.amp.GradScaler("cpu") if precision == "amp" and half == torch.float16 else None
    attn = attention if checkpointing != "selective" else attention + "_selective"
    counter = Counter()
    with FakeTensorMode(allow_non_fake_inputs=True) as fake:
        with counter:
            model, config = build(model_type, kw, dtype, attn,
                                  "full" if checkpointing == "full" else "none")
            model.train()
            masters = [p.detach().float() for p in model.parameters()] if precision == "mixed" else []
            for m in masters:
                m.requires_grad_(True)
            opt_params = masters if precision == "mixed" else list(model.parameters())
            # Every tensor that is ever a parameter's gradient counts as a gradient (a
            # parameter used twice, as tied embeddings are, has two in turn).
            ever_grads = set()
            # (ERNIE 4.5 MoE's router correction bias is a parameter that needs none.)
            for p in (p for p in model.parameters() if p.requires_grad):
                p.register_post_accumulate_grad_hook(
                    lambda p: ever_grads.add(counter.key_of(p.grad)))
    kernel_kw = {"foreach": dict(foreach=True), "fused": dict(fused=True),
                 "per-tensor": dict(foreach=False)}[kernel]
    optimizer_name = optimizer
    if optimizer_name == "adamw":
        optimizer = torch.optim.AdamW(opt_params, lr=1e-4, **kernel_kw)
    elif optimizer_name == "adam":
        optimizer = torch.optim.Adam(opt_params, lr=1e-4, **kernel_kw)
    elif optimizer_name == "momentum":
        optimizer = torch.optim.SGD(opt_params, lr=1e-3, momentum=0.9, **kernel_kw)
    else:
        optimizer = torch.optim.SGD(opt_params, lr=1e-3, **kernel_kw)
    inputs = None

    def step(phase_log):
        nonlocal inputs
        with fake:
            with counter:
                inputs = inputs_for(model_type, config, batch, seq)
                ever_grads.clear()
                counter.phase = "forward"
                with autocast(precision == "amp", half):
                    out = model(**inputs, use_cache=False) if model_type not in ("bert", "vit") \
                        else model(**inputs)
                loss = out.loss
                del out
                if scaler is not None:
                    loss = scaler.scale(loss)
                counter.phase = "backward"
                loss.backward()
                del loss
                counter.phase = "optimizer"
                # The gradients as the backward left them (mixed precision replaces them).
                phase_log["grads"] = {counter.key_of(p.grad) for p in model.parameters()
                                      if p.grad is not None} | ever_grads
                if precision == "mixed":
                    for p, m in zip(model.parameters(), masters):
                        m.grad = p.grad.float() if p.grad is not None else None
                        p.grad = None
                if scaler is not None:
                    if not getattr(optimizer, "_step_supports_amp_scaling", False):
                        scaler.unscale_(optimizer)
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    optimizer.step()
                if precision == "mixed":
                    with torch.no_grad():
                        for p, m in zip(model.parameters(), masters):
                            p.copy_(m)
                phase_log["classes"] = classify(counter, model, optimizer, masters)
                for key in phase_log["grads"]:
                    phase_log["classes"].setdefault(key, "gradients")
                optimizer.zero_grad(set_to_none=True)
                model.zero_grad(set_to_none=True)
                counter.phase = "after"

    log1 = {}
    step(log1)
    del inputs
    gc.collect()
    start = len(counter.events)
    log2 = {}
    gc.disable()
    try:
        step(log2)
    finally:
        gc.enable()
    stats = replay(counter, start, log2["classes"])
    params = sum(p.numel() for p in model.parameters())
    stats["parameters"] = params
    stats["weights_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
    stats["state_bytes"] = sum(v.numel() * v.element_size() for s in optimizer.state.values()
                               for v in s.values() if isinstance(v, torch.Tensor) and v.dim() > 0)
    stats["master_bytes"] = sum(m.numel() * 4 for m in masters)
    if memtracker:
        stats["memtracker_peak_bytes"] = memtracker_step(model, optimizer, masters, fake,
                                                         model_type, config, batch, seq, precision)
    return stats


def memtracker_step(model, optimizer, masters, fake, model_type, config, batch, seq, precision):
    from torch.distributed._tools.mem_tracker import MemTracker
    mt = MemTracker()
    with fake:
        mt.track_external(model, optimizer, *masters)
        inputs = inputs_for(model_type, config, batch, seq)
        with mt:
            with autocast(precision == "amp"):
                out = model(**inputs, use_cache=False) if model_type not in ("bert", "vit") \
                    else model(**inputs)
            loss = out.loss
            del out
            loss.backward()
            del loss
            if precision == "mixed":
                for p, m in zip(model.parameters(), masters):
                    m.grad = p.grad.float() if p.grad is not None else None
                    p.grad = None
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            model.zero_grad(set_to_none=True)
    return max(snap["Total"] for snap in mt.get_tracker_snapshot("peak").values())


def infer_run(model_type, kw, batch, seq, dtype, attention, logits):
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[dtype]
    counter = Counter()
    with FakeTensorMode(allow_non_fake_inputs=True):
        with counter:
            model, config = build(model_type, kw, dtype, attention, "none")
            model.eval()
            inputs = inputs_for(model_type, config, batch, seq)
            inputs.pop("labels")
            start = len(counter.events)
            counter.phase = "forward"
            with torch.no_grad():
                if model_type in ("bert", "vit"):
                    out = model(**inputs)
                else:
                    out = model(**inputs, use_cache=True, logits_to_keep=1 if logits == "last" else 0)
            counter.phase = "after"
            classes = {counter.key_of(p): "weights" for p in model.parameters()}
            for b in model.buffers():
                classes[counter.key_of(b)] = "weights"
            classes.pop(None, None)
            kv = 0
            cache = getattr(out, "past_key_values", None) or getattr(out, "cache", None)
            if cache is not None:
                for layer in getattr(cache, "layers", []):
                    for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
                        if isinstance(t, torch.Tensor):
                            kv += t.numel() * t.element_size()
            del out
    stats = replay(counter, start, classes)
    stats["parameters"] = sum(p.numel() for p in model.parameters())
    stats["weights_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
    stats["kv_cache_bytes"] = kv
    return stats


def memplan_config(model_type, kw):
    """The config as `config.json` holds it, for memplan to read."""
    from transformers import AutoConfig
    config = AutoConfig.for_model(model_type, **kw)
    d = config.to_diff_dict()
    d["model_type"] = model_type
    return d


def run_cases(path, out_path):
    """Counts each `[model_type, config keywords, setting]` of the JSON list at `path`."""
    failures = 0
    with open(path) as f:
        cases = json.load(f)
    with open(out_path, "w") as out:
        for model_type, kw, setting in cases:
            SDPA_CHOICES.clear()
            t0 = time.time()
            try:
                if "precision" in setting:
                    stats = train_run(model_type, kw, **setting)
                else:
                    stats = infer_run(model_type, kw, **setting)
            except Exception as e:
                failures += 1
                print(f"{model_type} {setting}: {type(e).__name__}: {e}", file=sys.stderr)
                continue
            stats.pop("phase_peaks", None)
            row = dict(model_type=model_type, config=memplan_config(model_type, kw), **setting,
                       sdpa_kernels=dict(SDPA_CHOICES), **stats, seconds=round(time.time() - t0, 2))
            out.write(json.dumps(row, sort_keys=True) + "\n")
            out.flush()
    print(f"failures: {failures}", file=sys.stderr)
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--types", nargs="*", default=TYPES)
    ap.add_argument("--per-type", type=int, default=2)
    ap.add_argument("--runs-per-config", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--inference", action="store_true")
    ap.add_argument("--check-memtracker", action="store_true")
    ap.add_argument("--out", required=True)
    ap.add_argument("--wide", action="store_true",
                    help="shapes and settings outside the default grid (see WIDE)")
    ap.add_argument("--dtypes", nargs="*", default=["bf16"],
                    help="training: the 16-bit dtypes drawn for amp/mixed/pure (f16 amp trains "
                    "with a GradScaler); one value draws nothing, so earlier seeds reproduce")
    ap.add_argument("--optimizers", nargs="*", default=["adamw"],
                    help="training: the optimizers drawn (adamw, adam, momentum, sgd)")
    ap.add_argument("--cases", help="a JSON list of [model_type, config keywords, setting] "
                    "to count instead of random configs (a setting with `precision` is a "
                    "training step, one with `dtype` an inference forward)")
    args = ap.parse_args()
    global WIDE
    WIDE = args.wide
    register_attention()
    device_like_masks()
    fake_friendly_init()
    F.dropout = cuda_dropout
    torch.nn.functional.dropout = cuda_dropout
    F.scaled_dot_product_attention = cuda_sdpa
    torch.nn.functional.scaled_dot_product_attention = cuda_sdpa
    # The step count is a tensor the fake mode cannot read; the update's value does not
    # change what it allocates.
    import torch.optim.adam as adam_module
    adam_module._get_value = lambda x: 2.0 if isinstance(x, torch.Tensor) else x
    # The scaler reads `found_inf` (`.item()`) to skip a step with non-finite gradients; fake
    # tensors have no value. The step taken (finite gradients, every step but a few) is the
    # one that allocates: a skipped step allocates nothing.
    torch.amp.GradScaler._maybe_opt_step = (
        lambda self, optimizer, state, *a, **k: optimizer.step(*a, **k))
    if args.cases:
        sys.exit(run_cases(args.cases, args.out))
    rng = random.Random(args.seed)
    failures = 0
    with open(args.out, "w") as out:
        for model_type in args.types:
            for c in range(args.per_type):
                kw = gen(model_type, rng)
                try:
                    saved = memplan_config(model_type, kw)
                except Exception as e:  # a config transformers refuses
                    print(f"{model_type}: config refused: {e}", file=sys.stderr)
                    continue
                for r in range(args.runs_per_config):
                    batch = pick(rng, [1, 1, 2, 4, 8] if not WIDE else [1, 3, 6, 16])
                    seq = pick(rng, [128, 256, 512, 1024, 2048, 4096] if not WIDE
                               else [100, 384, 777, 3000, 8192, 16384])
                    if model_type == "gpt2":
                        seq = min(seq, kw["n_positions"])
                    if model_type == "bert":
                        seq = min(seq, kw["max_position_embeddings"])
                    if args.inference:
                        setting = dict(batch=batch, seq=seq, dtype=pick(rng, ["bf16", "bf16", "f16", "f32"]),
                                       attention=pick(rng, ["eager", "sdpa", "sdpa"]),
                                       logits=pick(rng, ["last", "last", "all"]))
                        if model_type in ("gemma2", "gpt_oss"):
                            # transformers has no SDPA path for Gemma 2's softcapping, nor
                            # for gpt-oss's attention sinks.
                            setting["attention"] = "eager"
                    else:
                        precision = pick(rng, ["fp32", "amp", "amp", "mixed", "mixed", "pure"])
                        attention = pick(rng, ["eager", "sdpa", "sdpa", "flash"])
                        if attention == "flash" and precision == "fp32":
                            attention = "sdpa"
                        setting = dict(batch=batch, seq=seq, precision=precision, attention=attention,
                                       checkpointing=pick(rng, ["none", "none", "full", "selective"]),
                                       kernel=pick(rng, ["foreach", "foreach", "fused", "per-tensor"]))
                        if len(args.dtypes) > 1 and precision != "fp32":
                            setting["dtype"] = pick(rng, args.dtypes)
                        if len(args.optimizers) > 1:
                            setting["optimizer"] = pick(rng, args.optimizers)
                        if model_type == "vit" or model_type == "bert":
                            if setting["attention"] == "flash":
                                setting["attention"] = "sdpa"
                        if model_type in ("gemma2", "gpt_oss") and setting["attention"] == "sdpa":
                            setting["attention"] = "eager"
                        if model_type == "gemma3" and setting["attention"] == "flash":
                            # Gemma 3's multimodal model refuses flash attention.
                            setting["attention"] = "sdpa"
                    SDPA_CHOICES.clear()
                    t0 = time.time()
                    try:
                        if args.inference:
                            stats = infer_run(model_type, kw, **setting)
                        else:
                            stats = train_run(model_type, kw, memtracker=args.check_memtracker, **setting)
                    except Exception as e:
                        failures += 1
                        print(f"{model_type} {setting}: {type(e).__name__}: {e}", file=sys.stderr)
                        traceback.print_exc(limit=4)
                        continue
                    stats.pop("phase_peaks", None)
                    row = dict(model_type=model_type, config=saved, **setting, sdpa_kernels=dict(SDPA_CHOICES),
                               **stats, seconds=round(time.time() - t0, 2))
                    out.write(json.dumps(row, sort_keys=True) + "\n")
                    out.flush()
                    print(f"{model_type} {setting} peak {stats['peak_bytes']:,} ({stats['peak_phase']})",
                          file=sys.stderr)
    print(f"failures: {failures}", file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
