#!/usr/bin/env python3
"""Differential fuzzer: memplan's LLM sizing against `transformers` itself (run by hand,
never by CI).

For every model_type memplan reads, draws random small configs that flip the structural
keys the config class and the modeling code read (biases, tied embeddings both ways and
left out, head_dim set / None / apart from hidden / heads, MHA / GQA / MQA / left-out
key-value heads, sliding windows and layer_types, every MoE key, MLA with and without
q_lora_rank, Falcon's layouts, GPT-NeoX's residual, rope scaling dicts, `dtype` and the
older `torch_dtype`), writes each with `save_pretrained` (so the JSON is what the library
writes), and in a third of the cases strips a random subset of its keys (as older
`transformers` versions and hand-written files leave them out: the library's defaults then
apply, and the ground truth is taken from the stripped file as the library reads it).

Ground truth, from the model built on the meta device from the file:
- `parameters`: `sum(p.numel())` over the unique parameters (tied weights once);
- `active_parameters` (MoE): the total minus, for every routed-experts module, the share of
  the experts a token is not sent to;
- `kv_bytes_per_token`: layers × (K width + V width) of each attention module's actual
  projections (fused QKV split by the query width; MLA: `kv_a_proj_with_mqa`'s width, the
  latent plus the rotary key, as serving engines cache it) × the KV dtype's bytes;
- windows: each attention layer's window (the module's `sliding_window`, or the
  config-wide one the model's mask applies to every layer), checked through
  `kv_cache_bytes` at a sequence longer than every window: `Σ_layers min(seq, window)`.

Then `memplan estimate --config FILE --format json [--seq S]` is run on each and the four
are compared. Every mismatch, refusal and crash is printed with its file; `--keep DIR` keeps
the configs (failing ones under DIR/fail/).

Usage (in a venv with torch and transformers):

    python testdata/configs/fuzz_configs.py --memplan target/release/memplan --per-type 40
    python testdata/configs/fuzz_configs.py --memplan ... --types gemma3_text falcon --seed 7
"""

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
import warnings

import torch
import transformers
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

warnings.filterwarnings("ignore")
transformers.logging.set_verbosity_error()

TYPES = ["llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma",
         "gemma2", "gemma3_text", "gemma3", "phi3", "deepseek_v2", "deepseek_v3", "falcon",
         "gpt_neox", "starcoder2", "olmo2", "gpt2", "bert", "vit",
         # Sixth and seventh sessions.
         "granite", "smollm3", "phi", "cohere", "glm", "glm4", "olmo", "gpt_oss", "glm4_moe",
         "olmoe", "granitemoe", "cohere2", "seed_oss",
         # Eighth session.
         "exaone4", "stablelm", "hunyuan_v1_dense",
         # Ninth session.
         "ernie4_5", "ernie4_5_moe"]

# Keys never stripped (memplan needs a model_type; the rest may all go).
KEEP = {"model_type"}
# Windows and sizes are kept small so a short sequence passes every window.
SMALL_WINDOWS = [3, 4, 5, 7, 8, 12, 16, 33]


def maybe(rng, p=0.5):
    return rng.random() < p


def choose_heads(rng, kv_modes=("mha", "mqa", "gqa", "omit")):
    """Heads, a key/value head count (None: leave the key out) and its mode."""
    heads = rng.choice([1, 2, 3, 4, 6, 8])
    mode = rng.choice(kv_modes)
    divisors = [d for d in range(2, heads) if heads % d == 0]
    if mode == "gqa" and not divisors:
        mode = "mha"
    kv = {"mha": heads, "mqa": 1, "gqa": rng.choice(divisors) if divisors else heads,
          "omit": None}[mode]
    return heads, kv, mode


def common_decoder(rng, heads, head_dim_modes=("omit", "none", "same", "diff"),
                   divisible=True):
    """hidden, intermediate, layers, vocab and the head_dim key (or absent)."""
    per_head = rng.choice([4, 8, 12, 16])
    hidden = heads * per_head
    if not divisible and maybe(rng, 0.3):
        hidden += rng.choice([2, 4, 8])
    kw = dict(hidden_size=hidden, num_attention_heads=heads, intermediate_size=rng.choice([16, 24, 40, 64, 96, 100]),
              num_hidden_layers=rng.randint(1, 7), vocab_size=rng.choice([50, 64, 97, 128, 256]))
    mode = rng.choice(head_dim_modes)
    if mode == "none":
        kw["head_dim"] = None
    elif mode == "same":
        kw["head_dim"] = hidden // heads
    elif mode == "diff":
        kw["head_dim"] = rng.choice([d for d in [6, 8, 12, 16, 20, 24, 32] if d * heads != hidden])
    return kw


def tie(rng, kw, key="tie_word_embeddings"):
    t = rng.choice(["omit", True, False])
    if t != "omit":
        kw[key] = t


def rope(rng, kw, types=("linear", "dynamic", "llama3", "yarn")):
    if maybe(rng, 0.3):
        t = rng.choice(types)
        d = {"rope_type": t, "factor": rng.choice([2.0, 4.0, 8.0])}
        if t == "llama3":
            d.update(low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64)
        if t == "yarn":
            d.update(original_max_position_embeddings=64)
        kw["rope_scaling"] = d


def dtype(rng, kw):
    d = rng.choice([None, None, "bfloat16", "float16", "float32"])
    if d is not None:
        kw["dtype"] = d


def kvh(kw, kv, key="num_key_value_heads"):
    if kv is not None:
        kw[key] = kv


def window(rng, kw, allow_default=True):
    m = rng.choice(["omit", "none", "set", "set"] if allow_default else ["none", "set"])
    if m == "none":
        kw["sliding_window"] = None
    elif m == "set":
        kw["sliding_window"] = rng.choice(SMALL_WINDOWS)


def layer_types(rng, layers, p_sliding=0.5):
    return ["sliding_attention" if maybe(rng, p_sliding) else "full_attention" for _ in range(layers)]


# ---- per type ----

def d_llama(rng):
    heads, kv, _ = choose_heads(rng)
    kw = common_decoder(rng, heads)
    kvh(kw, kv)
    for k in ["attention_bias", "mlp_bias"]:
        if maybe(rng):
            kw[k] = maybe(rng)
    tie(rng, kw)
    rope(rng, kw)
    dtype(rng, kw)
    if maybe(rng, 0.2):
        kw["pretraining_tp"] = 2
    return kw


def d_mistral(rng):
    heads, kv, _ = choose_heads(rng)
    kw = common_decoder(rng, heads, divisible=False)
    kvh(kw, kv)
    window(rng, kw)
    tie(rng, kw)
    rope(rng, kw)
    dtype(rng, kw)
    return kw


def d_mixtral(rng):
    kw = d_mistral(rng)
    e = rng.choice([2, 3, 4, 8])
    if maybe(rng, 0.8):
        kw["num_local_experts"] = e
    else:
        e = 8
    if maybe(rng, 0.8):
        kw["num_experts_per_tok"] = rng.randint(1, e)
    elif e < 2:
        kw["num_experts_per_tok"] = 1
    return kw


def qwen_window(rng, kw, layers, moe=False):
    if maybe(rng):
        kw["use_sliding_window"] = maybe(rng, 0.7)
    if maybe(rng, 0.6):
        kw["sliding_window"] = rng.choice(SMALL_WINDOWS + [None])
    if maybe(rng, 0.5) and not moe:
        kw["max_window_layers"] = rng.randint(0, layers + 1)
    if maybe(rng, 0.25) and not moe:
        kw["layer_types"] = layer_types(rng, layers)


def d_qwen2(rng):
    heads, kv, _ = choose_heads(rng)
    kw = common_decoder(rng, heads, head_dim_modes=("omit", "omit", "diff"), divisible=False)
    kvh(kw, kv)
    qwen_window(rng, kw, kw["num_hidden_layers"])
    tie(rng, kw)
    rope(rng, kw)
    dtype(rng, kw)
    return kw


def d_qwen3(rng):
    kw = d_qwen2(rng)
    if maybe(rng):
        kw["attention_bias"] = maybe(rng)
    if maybe(rng, 0.3):
        kw.pop("head_dim", None)  # the class default, 128
    elif "head_dim" not in kw:
        kw["head_dim"] = rng.choice([8, 16, 24])
    return kw


def moe_qwen(rng, kw, layers, shared):
    e = rng.choice([1, 2, 4, 6, 8])
    kw["num_experts"] = e if maybe(rng, 0.9) else 0
    kw["num_experts_per_tok"] = rng.randint(1, max(e, 1))
    if maybe(rng, 0.8):
        kw["moe_intermediate_size"] = rng.choice([8, 16, 24, 40])
    if maybe(rng):
        kw["decoder_sparse_step"] = rng.choice([1, 2, 3])
    if maybe(rng):
        kw["mlp_only_layers"] = sorted(rng.sample(range(layers), rng.randint(0, layers)))
    if maybe(rng):
        kw["norm_topk_prob"] = maybe(rng)
    if shared:
        if maybe(rng, 0.7):
            kw["shared_expert_intermediate_size"] = rng.choice([0, 8, 24, 48])
        if maybe(rng, 0.3):
            kw["qkv_bias"] = maybe(rng)


def d_qwen2_moe(rng):
    heads, kv, _ = choose_heads(rng)
    kw = common_decoder(rng, heads, head_dim_modes=("omit", "omit", "diff"), divisible=False)
    kvh(kw, kv)
    layers = kw["num_hidden_layers"]
    qwen_window(rng, kw, layers, moe=True)
    if maybe(rng, 0.4):
        kw["max_window_layers"] = rng.randint(0, layers + 1)
    moe_qwen(rng, kw, layers, shared=True)
    tie(rng, kw)
    dtype(rng, kw)
    return kw


def d_qwen3_moe(rng):
    heads, kv, _ = choose_heads(rng)
    kw = common_decoder(rng, heads, head_dim_modes=("omit", "same", "diff"), divisible=False)
    kvh(kw, kv)
    layers = kw["num_hidden_layers"]
    qwen_window(rng, kw, layers, moe=True)
    moe_qwen(rng, kw, layers, shared=False)
    if maybe(rng):
        kw["attention_bias"] = maybe(rng)
    tie(rng, kw)
    dtype(rng, kw)
    return kw


def d_gemma(rng):
    heads, kv, _ = choose_heads(rng)
    kw = common_decoder(rng, heads, head_dim_modes=("omit", "same", "diff"), divisible=False)
    kvh(kw, kv)
    if maybe(rng):
        kw["attention_bias"] = maybe(rng)
    tie(rng, kw)
    rope(rng, kw)
    dtype(rng, kw)
    return kw


def d_gemma2(rng):
    heads, kv, _ = choose_heads(rng)
    kw = common_decoder(rng, heads, head_dim_modes=("omit", "same", "diff"))
    kvh(kw, kv)
    window(rng, kw)
    if maybe(rng, 0.3):
        kw["layer_types"] = layer_types(rng, kw["num_hidden_layers"])
    if maybe(rng):
        kw["attention_bias"] = maybe(rng)
    tie(rng, kw)
    dtype(rng, kw)
    return kw


def d_gemma3_text(rng):
    kw = d_gemma2(rng)
    if "layer_types" not in kw and maybe(rng, 0.5):
        kw["sliding_window_pattern"] = rng.choice([1, 2, 3, 6])
    if maybe(rng, 0.15) and kw.get("sliding_window", 0):
        kw["use_bidirectional_attention"] = True
    rope(rng, kw, types=("linear",))
    return kw


def d_gemma3(rng):
    text = d_gemma3_text(rng)
    text.pop("dtype", None)
    text["vocab_size"] = max(text["vocab_size"], 64) + 8
    text["model_type"] = "gemma3_text"
    vh = rng.choice([1, 2, 4]) * 16
    patch = rng.choice([4, 7, 8])
    vision = dict(model_type="siglip_vision_model", hidden_size=vh,
                  intermediate_size=rng.choice([32, 48, 64]),
                  num_hidden_layers=rng.randint(1, 3), num_attention_heads=rng.choice([1, 2, 4]),
                  image_size=patch * rng.choice([2, 4]), patch_size=patch)
    if maybe(rng):
        vision["vision_use_head"] = maybe(rng)
    if maybe(rng, 0.2):
        vision["num_channels"] = 1
    side = vision["image_size"] // patch
    kw = dict(text_config=text, vision_config=vision,
              mm_tokens_per_image=rng.choice([t * t for t in range(1, side + 1) if side % t == 0]),
              image_token_index=text["vocab_size"] - 1, boi_token_index=text["vocab_size"] - 3,
              eoi_token_index=text["vocab_size"] - 2)
    tie(rng, kw)
    dtype(rng, kw)
    return kw


def d_phi3(rng):
    heads, kv, _ = choose_heads(rng)
    kw = common_decoder(rng, heads, head_dim_modes=("omit", "omit", "diff"))
    kvh(kw, kv)
    window(rng, kw, allow_default=True)
    tie(rng, kw)
    if maybe(rng, 0.3):
        half = kw.get("head_dim") or kw["hidden_size"] // heads
        kw["rope_scaling"] = {"type": "longrope", "short_factor": [1.0] * (half // 2),
                              "long_factor": [2.0] * (half // 2)}
        kw["original_max_position_embeddings"] = 64
    kw.update(pad_token_id=0, bos_token_id=0, eos_token_id=0)
    dtype(rng, kw)
    return kw


def d_deepseek(rng, v3):
    heads = rng.choice([1, 2, 4, 8])
    kw = dict(hidden_size=heads * rng.choice([8, 16]), intermediate_size=rng.choice([24, 48, 96]),
              num_hidden_layers=rng.randint(1, 6), num_attention_heads=heads,
              vocab_size=rng.choice([64, 100]))
    if maybe(rng, 0.3):
        kw["num_key_value_heads"] = heads
    kw["q_lora_rank"] = rng.choice([None, 16, 24, 40]) if maybe(rng, 0.8) else kw.get("q_lora_rank")
    if kw["q_lora_rank"] is None and maybe(rng, 0.3):
        del kw["q_lora_rank"]  # the class default, 1536
    kw.update(kv_lora_rank=rng.choice([8, 16, 32]), qk_nope_head_dim=rng.choice([4, 8, 16]),
              qk_rope_head_dim=rng.choice([2, 4, 8]), v_head_dim=rng.choice([4, 8, 12, 16]))
    e = rng.choice([2, 4, 6, 8])
    key = rng.choice(["n_routed_experts", "num_experts"] + (["num_local_experts"] if v3 else []))
    kw[key] = e
    kw["num_experts_per_tok"] = rng.randint(1, e)
    kw["n_shared_experts"] = rng.choice([0, 1, 2]) if maybe(rng, 0.8) else None
    if kw["n_shared_experts"] is None:
        del kw["n_shared_experts"]
    kw["moe_intermediate_size"] = rng.choice([8, 16, 24])
    kw["first_k_dense_replace"] = rng.randint(0, kw["num_hidden_layers"])
    if maybe(rng):
        kw["moe_layer_freq"] = rng.choice([1, 2])
    if v3:
        g = rng.choice([1, 2])
        if e % g == 0:
            kw["n_group"] = g
            kw["topk_group"] = 1
        else:
            kw["n_group"] = 1
            kw["topk_group"] = 1
    else:
        kw["topk_method"] = "greedy"
        if maybe(rng):
            kw["mlp_bias"] = maybe(rng)
        if maybe(rng, 0.3):
            kw["n_group"] = 1
            kw["topk_group"] = 1
    if maybe(rng):
        kw["norm_topk_prob"] = maybe(rng)
    if maybe(rng):
        kw["attention_bias"] = maybe(rng)
    tie(rng, kw)
    dtype(rng, kw)
    return kw


def d_falcon(rng):
    heads = rng.choice([1, 2, 4, 8])
    kw = dict(hidden_size=heads * rng.choice([8, 16]), num_hidden_layers=rng.randint(1, 4),
              num_attention_heads=heads, vocab_size=rng.choice([64, 100]))
    for k in ["new_decoder_architecture", "multi_query", "parallel_attn", "bias", "alibi"]:
        if maybe(rng, 0.6):
            kw[k] = maybe(rng)
    new = kw.get("new_decoder_architecture", False)
    if new and maybe(rng, 0.8):
        kw["num_kv_heads"] = rng.choice([d for d in range(1, heads + 1) if heads % d == 0])
    elif not new and maybe(rng, 0.3) and not kw.get("multi_query", True):
        kw["num_kv_heads"] = heads
    if maybe(rng, 0.5):
        kw["num_ln_in_parallel_attn"] = rng.choice([None, 1, 2])
    if maybe(rng, 0.4):
        kw["ffn_hidden_size"] = rng.choice([24, 50, 100])
    tie(rng, kw)
    dtype(rng, kw)
    return kw


def d_gpt_neox(rng):
    heads = rng.choice([1, 2, 4, 8])
    kw = dict(hidden_size=heads * rng.choice([8, 16]), intermediate_size=rng.choice([24, 64, 100]),
              num_hidden_layers=rng.randint(1, 4), num_attention_heads=heads,
              vocab_size=rng.choice([64, 100]))
    if maybe(rng):
        kw["use_parallel_residual"] = maybe(rng)
    if maybe(rng):
        kw["attention_bias"] = maybe(rng)
    if maybe(rng):
        kw["rotary_pct"] = rng.choice([0.25, 0.5, 1.0])
    rope(rng, kw, types=("linear", "dynamic"))
    tie(rng, kw)
    dtype(rng, kw)
    return kw


def d_starcoder2(rng):
    heads, kv, _ = choose_heads(rng)
    kw = common_decoder(rng, heads, head_dim_modes=("omit",))
    kvh(kw, kv)
    window(rng, kw)
    if maybe(rng):
        kw["use_bias"] = maybe(rng)
    tie(rng, kw)
    dtype(rng, kw)
    return kw


def d_olmo2(rng):
    heads, kv, _ = choose_heads(rng)
    kw = common_decoder(rng, heads, head_dim_modes=("omit",))
    kvh(kw, kv)
    if maybe(rng):
        kw["attention_bias"] = maybe(rng)
    tie(rng, kw)
    rope(rng, kw)
    dtype(rng, kw)
    return kw


def d_gpt2(rng):
    heads = rng.choice([1, 2, 4])
    kw = dict(n_embd=heads * rng.choice([8, 16]), n_layer=rng.randint(1, 3), n_head=heads,
              vocab_size=rng.choice([64, 100]), n_positions=rng.choice([16, 32, 64]))
    if maybe(rng, 0.3):
        kw["n_inner"] = rng.choice([None, 24, 100])
    if maybe(rng, 0.15):
        kw["add_cross_attention"] = True
    tie(rng, kw)
    dtype(rng, kw)
    return kw


def d_bert(rng):
    heads = rng.choice([1, 2, 4])
    kw = dict(hidden_size=heads * rng.choice([8, 16]), intermediate_size=rng.choice([24, 64]),
              num_hidden_layers=rng.randint(1, 3), num_attention_heads=heads,
              vocab_size=rng.choice([64, 100]), max_position_embeddings=rng.choice([16, 64]))
    if maybe(rng, 0.4):
        kw["type_vocab_size"] = rng.choice([1, 2, 4])
    if maybe(rng, 0.2):
        kw["is_decoder"] = True
        kw["add_cross_attention"] = maybe(rng)
    tie(rng, kw)
    dtype(rng, kw)
    return kw


def d_vit(rng):
    heads = rng.choice([1, 2, 4])
    patch = rng.choice([4, 8])
    kw = dict(hidden_size=heads * rng.choice([8, 16]), intermediate_size=rng.choice([24, 64]),
              num_hidden_layers=rng.randint(1, 3), num_attention_heads=heads,
              image_size=patch * rng.choice([2, 3]) + rng.choice([0, 0, 0, 1, 3]), patch_size=patch)
    if maybe(rng, 0.2):
        kw["image_size"] = [kw["image_size"], kw["image_size"] + patch]
    if maybe(rng, 0.4):
        kw["num_labels"] = rng.choice([1, 3, 10])
    if maybe(rng, 0.3):
        kw["qkv_bias"] = maybe(rng)
    if maybe(rng, 0.2):
        kw["num_channels"] = 1
    dtype(rng, kw)
    return kw


def d_granite(rng):
    kw = d_llama(rng)
    kw.pop("pretraining_tp", None)
    for k, vs in [("embedding_multiplier", [1.0, 12.0]), ("residual_multiplier", [1.0, 0.22]),
                  ("attention_multiplier", [0.0078125, 1.0]), ("logits_scaling", [1.0, 8.0])]:
        if maybe(rng):
            kw[k] = rng.choice(vs)
    return kw


def d_smollm3(rng):
    heads, kv, _ = choose_heads(rng, kv_modes=("mha", "mqa", "gqa"))
    kw = common_decoder(rng, heads, head_dim_modes=("omit",))
    kvh(kw, kv)
    layers = kw["num_hidden_layers"]
    m = rng.choice(["omit", "interval", "list"])
    if m == "interval":
        kw["no_rope_layer_interval"] = rng.choice([1, 2, 3, 4])
    elif m == "list":
        kw["no_rope_layers"] = [rng.choice([0, 1]) for _ in range(layers)]
    if maybe(rng, 0.4):
        kw["use_sliding_window"] = maybe(rng, 0.7)
        window(rng, kw)
        if maybe(rng, 0.3):
            kw["layer_types"] = layer_types(rng, layers)
    for k in ["attention_bias", "mlp_bias"]:
        if maybe(rng, 0.3):
            kw[k] = maybe(rng)
    kw["pad_token_id"] = 0
    tie(rng, kw)
    dtype(rng, kw)
    return kw


def d_phi(rng):
    heads, kv, _ = choose_heads(rng)
    kw = common_decoder(rng, heads, head_dim_modes=("omit",))
    kvh(kw, kv)
    if maybe(rng, 0.6):
        kw["partial_rotary_factor"] = rng.choice([0.25, 0.5, 0.75, 1.0])
    tie(rng, kw)
    dtype(rng, kw)
    return kw


def d_cohere(rng):
    heads, kv, _ = choose_heads(rng)
    kw = common_decoder(rng, heads, head_dim_modes=("omit",))
    kvh(kw, kv)
    if maybe(rng):
        kw["attention_bias"] = maybe(rng)
    if maybe(rng, 0.3):
        kw["logit_scale"] = rng.choice([0.0625, 1.0])
    kw["pad_token_id"] = 0
    tie(rng, kw)
    dtype(rng, kw)
    return kw


def d_glm(rng):
    heads, kv, _ = choose_heads(rng)
    kw = common_decoder(rng, heads, head_dim_modes=("omit", "same", "diff"))
    kvh(kw, kv)
    if maybe(rng):
        kw["attention_bias"] = maybe(rng)
    if maybe(rng, 0.6):
        kw["partial_rotary_factor"] = rng.choice([0.25, 0.5, 1.0])
    kw["pad_token_id"] = 0
    tie(rng, kw)
    dtype(rng, kw)
    return kw


def biased_decoder(rng, head_dim_modes, key="attention_bias"):
    """A decoder whose one structural key is a bias switch, `key` (OLMo and Hunyuan dense:
    `attention_bias`; ERNIE 4.5: `use_bias`)."""
    heads, kv, _ = choose_heads(rng)
    kw = common_decoder(rng, heads, head_dim_modes=head_dim_modes)
    kvh(kw, kv)
    if maybe(rng):
        kw[key] = maybe(rng)
    kw["pad_token_id"] = 0
    tie(rng, kw)
    dtype(rng, kw)
    return kw


def d_olmo(rng):
    return biased_decoder(rng, ("omit",))


def d_gpt_oss(rng):
    heads, kv, _ = choose_heads(rng, kv_modes=("mha", "mqa", "gqa"))
    kw = common_decoder(rng, heads, head_dim_modes=("omit", "same", "diff"))
    kvh(kw, kv)
    layers = kw["num_hidden_layers"]
    if maybe(rng):
        kw["attention_bias"] = maybe(rng)
    e = rng.choice([2, 4, 8])
    if maybe(rng, 0.8):
        kw["num_local_experts"] = e
    else:
        e = 128
    kw["num_experts_per_tok"] = rng.randint(1, min(e, 4))
    window(rng, kw)
    if maybe(rng, 0.3):
        kw["layer_types"] = layer_types(rng, layers)
    tie(rng, kw)
    dtype(rng, kw)
    return kw


def d_glm4_moe(rng):
    heads, kv, _ = choose_heads(rng)
    kw = common_decoder(rng, heads, head_dim_modes=("omit", "same", "diff"))
    kvh(kw, kv)
    layers = kw["num_hidden_layers"]
    for k in ["attention_bias", "use_qk_norm"]:
        if maybe(rng):
            kw[k] = maybe(rng)
    if maybe(rng, 0.5):
        kw["partial_rotary_factor"] = rng.choice([0.25, 0.5, 1.0])
    e = rng.choice([2, 4, 8])
    if maybe(rng, 0.8):
        kw["n_routed_experts"] = e
    else:
        e = 128
    kw["num_experts_per_tok"] = rng.randint(1, min(e, 8))
    for k, vs in [("moe_intermediate_size", [8, 16, 24]), ("n_shared_experts", [0, 1, 2]),
                  ("first_k_dense_replace", list(range(layers + 1)))]:
        if maybe(rng, 0.8):
            kw[k] = rng.choice(vs)
    kw["pad_token_id"] = 0
    tie(rng, kw)
    dtype(rng, kw)
    return kw


def d_olmoe(rng):
    kw = d_olmo(rng)
    e = rng.choice([2, 4, 8])
    if maybe(rng, 0.8):
        kw["num_experts"] = e
    else:
        e = 64
    kw["num_experts_per_tok"] = rng.randint(1, min(e, 8))
    if maybe(rng):
        kw["norm_topk_prob"] = maybe(rng)
    return kw


def d_granitemoe(rng):
    kw = d_granite(rng)
    kw.pop("mlp_bias", None)
    e = rng.choice([2, 4, 8])
    if maybe(rng, 0.8):
        kw["num_local_experts"] = e
    else:
        e = 8
    if maybe(rng, 0.8):
        kw["num_experts_per_tok"] = rng.randint(1, e)
    return kw


def d_cohere2(rng):
    kw = d_cohere(rng)
    layers = kw["num_hidden_layers"]
    window(rng, kw)
    m = rng.choice(["omit", "pattern", "types"])
    if m == "pattern":
        kw["sliding_window_pattern"] = rng.choice([1, 2, 3, 4])
    elif m == "types":
        kw["layer_types"] = layer_types(rng, layers)
    return kw


def d_seed_oss(rng):
    heads, kv, _ = choose_heads(rng)
    kw = common_decoder(rng, heads, head_dim_modes=("omit", "same", "diff"))
    kvh(kw, kv)
    for k in ["attention_bias", "attention_out_bias", "mlp_bias"]:
        if maybe(rng):
            kw[k] = maybe(rng)
    kw["pad_token_id"] = 0
    tie(rng, kw)
    dtype(rng, kw)
    return kw


def d_exaone4(rng):
    heads, kv, _ = choose_heads(rng)
    kw = common_decoder(rng, heads, head_dim_modes=("omit", "same", "diff"))
    kvh(kw, kv)
    layers = kw["num_hidden_layers"]
    window(rng, kw)
    if kw.get("sliding_window", 1) is None:
        # Without a window the config class divides by a zero pattern unless the layers are
        # listed (memplan refuses such a config by name).
        kw["layer_types"] = layer_types(rng, layers, p_sliding=0.0)
    else:
        m = rng.choice(["omit", "pattern", "types"])
        if m == "pattern":
            kw["sliding_window_pattern"] = rng.choice([1, 2, 3, 4])
        elif m == "types":
            kw["layer_types"] = layer_types(rng, layers)
    kw["pad_token_id"] = 0
    tie(rng, kw)
    dtype(rng, kw)
    return kw


def d_hunyuan_v1_dense(rng):
    # Its attention reads `head_dim` as given (transformers fails without it).
    return biased_decoder(rng, ("same", "diff"))


def d_stablelm(rng):
    heads, kv, _ = choose_heads(rng)
    # Its attention splits `hidden_size` evenly; a `head_dim` key is never read.
    kw = common_decoder(rng, heads, head_dim_modes=("omit", "diff"))
    kvh(kw, kv)
    for k in ["use_qkv_bias", "use_parallel_residual"]:
        if maybe(rng):
            kw[k] = maybe(rng)
    if maybe(rng, 0.6):
        kw["partial_rotary_factor"] = rng.choice([0.25, 0.5, 1.0])
    # StableLM 2 12B's per-head LayerNorms of Q and K (ninth session).
    if maybe(rng):
        kw["qk_layernorm"] = maybe(rng)
    tie(rng, kw)
    dtype(rng, kw)
    return kw


def d_ernie4_5(rng):
    # Left out, `head_dim` is the class default (128); null, hidden / heads.
    return biased_decoder(rng, ("omit", "none", "same", "diff"), key="use_bias")


def d_ernie4_5_moe(rng):
    # Its attention reads `head_dim` with `getattr` (left out: hidden / heads; a null one
    # fails), and the config class aliases `num_experts`/`num_experts_per_tok`.
    kw = biased_decoder(rng, ("omit", "same", "diff"), key="use_bias")
    layers = kw["num_hidden_layers"]
    e = rng.choice([2, 4, 8])
    kw["moe_num_experts" if maybe(rng) else "num_experts"] = e
    if maybe(rng, 0.8):
        kw["moe_k"] = rng.randint(1, e)
    if maybe(rng, 0.8):
        kw["moe_intermediate_size"] = rng.choice([8, 16, 24, 40])
    if maybe(rng, 0.7):
        kw["moe_num_shared_experts"] = rng.choice([0, 1, 2])
    if maybe(rng):
        kw["moe_layer_start_index"] = rng.randint(0, layers)
    if maybe(rng):
        kw["moe_layer_end_index"] = rng.choice([-1, rng.randint(0, layers - 1)])
    if maybe(rng):
        kw["moe_layer_interval"] = rng.choice([1, 2, 3])
    return kw


DRAW = {"llama": d_llama, "mistral": d_mistral, "mixtral": d_mixtral, "qwen2": d_qwen2,
        "qwen2_moe": d_qwen2_moe, "qwen3": d_qwen3, "qwen3_moe": d_qwen3_moe, "gemma": d_gemma,
        "gemma2": d_gemma2, "gemma3_text": d_gemma3_text, "gemma3": d_gemma3, "phi3": d_phi3,
        "deepseek_v2": lambda r: d_deepseek(r, False), "deepseek_v3": lambda r: d_deepseek(r, True),
        "falcon": d_falcon, "gpt_neox": d_gpt_neox, "starcoder2": d_starcoder2,
        "olmo2": d_olmo2, "gpt2": d_gpt2, "bert": d_bert, "vit": d_vit,
        "granite": d_granite, "smollm3": d_smollm3, "phi": d_phi, "cohere": d_cohere,
        "glm": d_glm, "glm4": d_glm, "olmo": d_olmo, "gpt_oss": d_gpt_oss,
        "glm4_moe": d_glm4_moe, "olmoe": d_olmoe, "granitemoe": d_granitemoe,
        "cohere2": d_cohere2, "seed_oss": d_seed_oss, "exaone4": d_exaone4,
        "stablelm": d_stablelm, "hunyuan_v1_dense": d_hunyuan_v1_dense,
        "ernie4_5": d_ernie4_5, "ernie4_5_moe": d_ernie4_5_moe}


def extra_keys(rng, model_type, kw):
    """Keys the family's config class has no field for (the library keeps them as
    attributes, and modeling code that reads them with getattr uses them): biases, head_dim,
    windows and layer types, cross-attention."""
    layers = kw.get("num_hidden_layers", kw.get("n_layer", 2))
    pool = {
        "attention_bias": lambda: maybe(rng),
        "mlp_bias": lambda: maybe(rng),
        "qkv_bias": lambda: maybe(rng),
        "use_bias": lambda: maybe(rng),
        "bias": lambda: maybe(rng),
        "head_dim": lambda: rng.choice([8, 12, 16]),
        "sliding_window": lambda: rng.choice(SMALL_WINDOWS),
        "layer_types": lambda: layer_types(rng, layers),
        "num_kv_heads": lambda: 1,
        "add_cross_attention": lambda: True,
    }
    if model_type == "gemma3":
        return
    if model_type == "vit":
        kw["head_dim"] = rng.choice([4, 8, 12])
        return
    for key in rng.sample(sorted(pool), rng.randint(1, 3)):
        if key not in kw:
            kw[key] = pool[key]()


# ---- ground truth ----

def build(config):
    with torch.device("meta"):
        if config.model_type == "bert":
            return AutoModel.from_config(config)
        if config.model_type == "vit":
            return transformers.ViTForImageClassification(config)
        if config.model_type == "gemma3":
            return transformers.Gemma3ForConditionalGeneration(config)
        return AutoModelForCausalLM.from_config(config)


def text_config(config):
    return config.get_text_config() if config.model_type == "gemma3" else config


def routed_inactive(model, config):
    """Parameters of the routed experts a token does not go through, summed over layers;
    None when the config leaves the experts per token unset."""
    c = text_config(config)
    k = getattr(c, "num_experts_per_tok", None)
    inactive = 0
    found = False
    for name, module in model.named_modules():
        if not name.endswith(".experts"):
            continue
        found = True
        params = list(module.parameters())
        if isinstance(module, torch.nn.ModuleList):
            e = len(module)
        else:
            e = params[0].shape[0]
        total = sum(p.numel() for p in params)
        if k is None:
            return None
        inactive += total // e * (e - min(k, e))
    return inactive if found else 0


def attention_modules(model):
    """The self-attention module of each decoder layer, in order (not the vision tower's)."""
    pattern = re.compile(r"\.(layers|h)\.\d+\.(self_attn|self_attention|attention|attn)$")
    return [m for n, m in model.named_modules() if pattern.search(n) and "vision" not in n]


def kv_width(attn, config):
    """K + V floats per token of one attention module, from its projections."""
    c = text_config(config)
    if hasattr(attn, "kv_a_proj_with_mqa"):
        return attn.kv_a_proj_with_mqa.out_features
    if hasattr(attn, "k_proj") and hasattr(attn, "v_proj"):
        return attn.k_proj.out_features + attn.v_proj.out_features
    if hasattr(attn, "qkv_proj"):  # phi3: [q | k | v]
        return attn.qkv_proj.out_features - attn.o_proj.in_features
    if hasattr(attn, "query_key_value"):  # falcon, gpt_neox
        q = attn.dense.in_features
        return attn.query_key_value.out_features - q
    if hasattr(attn, "c_attn"):  # gpt2: Conv1D(n_embd, 3 n_embd)
        return attn.c_attn.weight.shape[1] * 2 // 3
    raise RuntimeError(f"no K/V projections found in {type(attn).__name__}")


GLOBAL_MASK = {"mistral", "mixtral", "phi3", "starcoder2", "qwen3_moe"}


def layer_window(attn, config):
    c = text_config(config)
    if getattr(attn, "is_sliding", True) is False:
        # EXAONE 4's full layers keep the config's window as an attribute and pass none.
        w = None
    elif hasattr(attn, "sliding_window"):
        w = attn.sliding_window
    elif c.model_type in GLOBAL_MASK:
        w = getattr(c, "sliding_window", None)
    else:
        w = None
    return w or None


DTYPE_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "f64": 8, "f8e4m3": 1, "f8e5m2": 1}
TORCH_NAMES = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}


def truth(path):
    config = AutoConfig.from_pretrained(path)
    model = build(config)
    total = sum(p.numel() for p in model.parameters())
    inactive = routed_inactive(model, config)
    t = {"parameters": total,
         "active_parameters": None if inactive is None else total - inactive}
    c = text_config(config)
    if config.model_type not in ("bert", "vit"):
        attns = attention_modules(model)
        layers = c.num_hidden_layers if config.model_type != "gpt2" else c.n_layer
        if len(attns) != layers:
            raise RuntimeError(f"{len(attns)} attention modules for {layers} layers")
        t["kv_widths"] = [kv_width(a, config) for a in attns]
        t["windows"] = [layer_window(a, config) for a in attns]
    if config.model_type in ("gpt2", "bert"):
        t["positions"] = c.n_positions if config.model_type == "gpt2" else c.max_position_embeddings
    d = getattr(config, "dtype", None)
    if d is not None and not isinstance(d, str):
        d = str(d).replace("torch.", "")
    t["dtype"] = TORCH_NAMES.get(d) if d else None
    return t


def run_memplan(memplan, path, seq):
    # The fused runtime's KV accounting is a serving engine's (a sliding layer holds its
    # window), which the windows are checked against; the `hf` runtime (the default) counts
    # transformers' prefill cache, which keeps every layer's whole concatenation.
    cmd = [memplan, "estimate", "--config", path, "--format", "json", "-q", "--runtime", "fused"]
    if seq is not None:
        cmd += ["--seq", str(seq)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        return None, (p.stderr.strip() or p.stdout.strip())[-600:], p.returncode
    return json.loads(p.stdout), None, 0


def compare(t, got):
    problems = []
    if got["parameters"] != t["parameters"]:
        problems.append(f"parameters {got['parameters']}, transformers {t['parameters']}")
    if t["active_parameters"] is not None and got["active_parameters"] != t["active_parameters"]:
        problems.append(f"active {got['active_parameters']}, transformers {t['active_parameters']}")
    if t["dtype"] is not None and got["dtype"] != t["dtype"]:
        problems.append(f"dtype {got['dtype']}, config {t['dtype']}")
    if "kv_widths" in t:
        b = DTYPE_BYTES[got["kv_dtype"]]
        want = sum(t["kv_widths"]) * b
        if got["kv_bytes_per_token"] != want:
            problems.append(f"kv_bytes_per_token {got['kv_bytes_per_token']}, transformers {want} "
                            f"(widths {t['kv_widths']})")
        seq = got["seq"]
        cache = sum(min(seq, w or seq) * kw for kw, w in zip(t["kv_widths"], t["windows"])) * b \
            * got["batch"]
        if got["kv_cache_bytes"] != cache:
            problems.append(f"kv_cache_bytes at seq {seq} {got['kv_cache_bytes']}, transformers "
                            f"{cache} (windows {t['windows']})")
    return problems


def memplan_json(memplan, args):
    """(json or None, problem or None): a crash or an unclear refusal is a problem."""
    p = subprocess.run([memplan] + args + ["--format", "json", "-q"], capture_output=True,
                       text=True, timeout=60)
    if p.returncode != 0:
        err = (p.stderr.strip() or p.stdout.strip())
        if p.returncode == 3:  # fit: nothing fits (the reserve alone may pass a small budget)
            return None, None
        if "panicked" in err or p.returncode not in (1, 2) or not err.startswith("error"):
            return None, f"crash (rc {p.returncode}) on {' '.join(args[1:])}: {err[-300:]}"
        return None, None
    return json.loads(p.stdout), None


def sanity(memplan, path, rng, t, plain):
    """Serving, parallel and training answers: no crash, and the arithmetic they state holds
    (totals are their parts, blocks hold block_size tokens, the single-device figures agree
    with `estimate`'s, a device holds no more than the whole)."""
    problems = []
    decoder = "kv_widths" in t
    if decoder:
        seq = rng.choice([1, 7, 100, 4096])
        budget = rng.choice(["64MiB", "1GiB", "80GiB"])
        extra = rng.choice([[], ["--kv-dtype", "fp8"], ["--weight-dtype", "int4"], ["--tp", "2"],
                            ["--pp", "2"], ["--max-batched-tokens", "512", "--max-seqs", "8"]])
        v, err = memplan_json(memplan, ["fit", "--config", path, "--serving", "--budget", budget,
                                        "--seq", str(seq)] + extra)
        if err:
            problems.append(err)
        elif v is not None:
            label = f"serving {budget} seq {seq} {' '.join(extra)}"
            if v["kv_tokens"] != v["kv_blocks"] * v["block_size"]:
                problems.append(f"{label}: kv_tokens {v['kv_tokens']} != blocks × block_size")
            parts = v["weights_bytes"] + v["activation_bytes"] + v["reserve_bytes"] + v["kv_cache_bytes"]
            if v["total_bytes"] != parts:
                problems.append(f"{label}: total_bytes {v['total_bytes']} != parts {parts}")
            if v["fits"] and v["total_bytes"] > v["usable_bytes"]:
                problems.append(f"{label}: total {v['total_bytes']} past usable {v['usable_bytes']}")
            if v["max_concurrent_seqs"] is not None and v["max_concurrent_seqs"] > v["max_seqs"]:
                problems.append(f"{label}: more sequences than max_seqs")
            # Serving runs a float32 or dtype-less config in bf16 (vLLM's dtype auto).
            same = not extra and v["dtype"] == plain["dtype"]
            if same and v["kv_bytes_per_token"] != plain["kv_bytes_per_token"]:
                problems.append(f"{label}: kv_bytes_per_token {v['kv_bytes_per_token']} != "
                                f"estimate's {plain['kv_bytes_per_token']}")
            if same and v["weights_bytes"] != plain["weights_bytes"]:
                problems.append(f"{label}: weights {v['weights_bytes']} != estimate's "
                                f"{plain['weights_bytes']}")
    par = rng.choice([["--tp", "2"], ["--tp", "4"], ["--pp", "2"], ["--tp", "2", "--pp", "2"],
                      ["--ep", "2"], ["--training", "adamw", "--dp", "4", "--zero", "3"],
                      ["--training", "adamw", "--checkpointing", "selective", "--tp", "2"],
                      ["--training", "sgd", "--checkpointing", "full"]])
    seq = ["--seq", "8"] if t.get("positions") else []
    v, err = memplan_json(memplan, ["estimate", "--config", path] + par + seq)
    if err:
        problems.append(err)
    elif v is not None:
        d = v["per_device"]
        label = f"estimate {' '.join(par)}"
        for whole in (v, d):
            parts = sum(whole[k] for k in ("weights_bytes", "kv_cache_bytes", "activation_bytes",
                                           "gradients_bytes", "optimizer_bytes"))
            if whole["total_bytes"] != parts:
                problems.append(f"{label}: total_bytes {whole['total_bytes']} != parts {parts}")
        if "--zero" not in par and d["weights_bytes"] > v["weights_bytes"] + v["weights_bytes"] // 2:
            problems.append(f"{label}: a device's weights {d['weights_bytes']} exceed the "
                            f"model's {v['weights_bytes']}")
        if v["weights_bytes_per_device"] != d["weights_bytes"]:
            problems.append(f"{label}: weights_bytes_per_device != per_device.weights_bytes")
    return problems


def strip(rng, path):
    """Leaves out a random subset of the keys (never model_type), as older versions and
    hand-written files do; in a nested gemma3 config, of the text config's keys too."""
    with open(path) as f:
        d = json.load(f)
    removed = []

    def thin(obj, prefix):
        for k in list(obj):
            if k in KEEP or isinstance(obj[k], dict) and k.endswith("_config"):
                continue
            if maybe(rng, 0.35):
                removed.append(prefix + k)
                del obj[k]
    thin(d, "")
    for sub in ("text_config", "vision_config"):
        if isinstance(d.get(sub), dict):
            thin(d[sub], sub + ".")
    # The older spelling of the dtype key.
    if "dtype" in d and maybe(rng, 0.5):
        d["torch_dtype"] = d.pop("dtype")
        removed.append("dtype->torch_dtype")
    with open(path, "w") as f:
        json.dump(d, f, indent=2, sort_keys=True)
    return removed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--memplan", required=True)
    ap.add_argument("--per-type", type=int, default=40)
    ap.add_argument("--seed", type=int, default=25)
    ap.add_argument("--types", nargs="*", default=TYPES)
    ap.add_argument("--keep", help="keep the configs here (failures under fail/)")
    ap.add_argument("--strip", type=float, default=0.33, help="share of configs thinned")
    ap.add_argument("--sanity", action="store_true",
                    help="also run serving, parallel and training commands on each config and "
                         "check their stated arithmetic")
    ap.add_argument("--extra", type=float, default=0.25,
                    help="share of configs given keys their class has no field for")
    args = ap.parse_args()
    work = args.keep or tempfile.mkdtemp(prefix="fuzz25-")
    os.makedirs(os.path.join(work, "fail"), exist_ok=True)
    stats = {}
    failures = []
    for model_type in args.types:
        rng = random.Random(f"{args.seed}-{model_type}")
        s = stats.setdefault(model_type, {"ok": 0, "bad": 0, "refused": 0, "skipped": 0})
        i = 0
        tries = 0
        while i < args.per_type and tries < args.per_type * 5:
            tries += 1
            kw = DRAW[model_type](rng)
            if maybe(rng, args.extra):
                extra_keys(rng, model_type, kw)
            name = f"{model_type}-{args.seed}-{tries}"
            d = os.path.join(work, name)
            try:
                config = AutoConfig.for_model(model_type, **kw)
                config.save_pretrained(d)
                path = os.path.join(d, "config.json")
                removed = strip(rng, path) if maybe(rng, args.strip) else []
                t = truth(path)
            except Exception as e:  # the library refuses the draw: not a memplan case
                s["skipped"] += 1
                shutil.rmtree(d, ignore_errors=True)
                if os.environ.get("FUZZ_VERBOSE"):
                    print(f"skip {name}: {type(e).__name__}: {e}", file=sys.stderr)
                continue
            i += 1
            seq = None
            if "windows" in t and model_type != "gpt2":
                ws = [w for w in t["windows"] if w]
                seq = 2 * max(ws) + 3 if ws else 40
            got, err, rc = run_memplan(args.memplan, path, seq)
            if got is None:
                kind = "crash" if rc not in (1, 2) or "panicked" in (err or "") else "refused"
                s["refused"] += 1
                problems = [f"{kind}: {err}"]
            else:
                problems = compare(t, got)
                if args.sanity:
                    problems += sanity(args.memplan, path, rng, t, got)
            if problems:
                s["bad"] += 1
                keep = os.path.join(work, "fail", name + ".json")
                shutil.copy(path, keep)
                failures.append((name, removed, problems, keep))
            else:
                s["ok"] += 1
            if not args.keep:
                shutil.rmtree(d, ignore_errors=True)
    for name, removed, problems, keep in failures:
        print(f"FAIL {name} ({keep})" + (f" stripped {removed}" if removed else ""))
        for p in problems:
            print(f"    {p}")
    print()
    print(f"{'type':<12} {'ok':>4} {'bad':>4} {'refused':>8} {'skipped':>8}")
    for t, s in stats.items():
        print(f"{t:<12} {s['ok']:>4} {s['bad']:>4} {s['refused']:>8} {s['skipped']:>8}")
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, seed {args.seed}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
