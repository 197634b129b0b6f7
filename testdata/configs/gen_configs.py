#!/usr/bin/env python3
"""Regenerates testdata/configs/generated/ (run by hand, never by CI).

For every architecture memplan sizes, builds small configs (chosen to exercise each
structural switch: biases, tied or untied embeddings, grouped- and multi-query attention,
MLA with and without q_lora_rank, dense and sparse MoE layers, sliding layers) and the
hand-written configs of published models in testdata/configs/, instantiates each model
with `transformers` on the `meta` device (no memory, no weights), and records:

- generated/<name>.json: the config exactly as `save_pretrained` writes it (keys equal to
  the library's defaults are left out, so memplan's defaults are tested too);
- generated/expected.json: for each config, the exact parameter count of the model class
  (`sum(p.numel() for p in model.parameters())`, tied weights counted once), the routed-
  expert parameters of each MoE layer and the experts per token (to check active counts),
  the KV-cache floats per token per layer of the transformers cache (K and V widths), and
  for small configs every parameter's shape.

Usage (in a venv with `pip install torch transformers`):

    python testdata/configs/gen_configs.py

The published configs (testdata/configs/*.json, hand-written) are only read: their counts
go into expected.json under their file names.
"""

import json
import os
import sys
import tempfile

import torch
import transformers
from transformers import AutoConfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuzz_configs as fuzz  # noqa: E402  (the ground truth is the fuzzer's)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "generated")

# name -> (model_type, kwargs). Small sizes; every switch the modeling code reads is set at
# least once away from its default.
SMALL = {
    "llama-tiny": ("llama", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, vocab_size=128)),
    "llama-bias-headdim": ("llama", dict(hidden_size=64, intermediate_size=80, num_hidden_layers=3,
                                         num_attention_heads=4, num_key_value_heads=1, head_dim=24,
                                         attention_bias=True, mlp_bias=True, vocab_size=100,
                                         tie_word_embeddings=True,
                                         rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                                       "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                       "original_max_position_embeddings": 64})),
    "mistral-tiny": ("mistral", dict(hidden_size=64, intermediate_size=112, num_hidden_layers=2,
                                     num_attention_heads=8, num_key_value_heads=2, vocab_size=90,
                                     sliding_window=16)),
    "mistral-headdim": ("mistral", dict(hidden_size=48, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                        vocab_size=70, sliding_window=None)),
    "mixtral-tiny": ("mixtral", dict(hidden_size=64, intermediate_size=48, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
                                     num_local_experts=4, num_experts_per_tok=2)),
    "qwen2-tiny": ("qwen2", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                                 num_attention_heads=4, num_key_value_heads=2, vocab_size=120,
                                 tie_word_embeddings=True, use_sliding_window=True,
                                 sliding_window=8, max_window_layers=2)),
    "qwen2_moe-tiny": ("qwen2_moe", dict(hidden_size=64, intermediate_size=80, num_hidden_layers=4,
                                         num_attention_heads=4, num_key_value_heads=4, vocab_size=100,
                                         num_experts=6, num_experts_per_tok=2, moe_intermediate_size=24,
                                         shared_expert_intermediate_size=40, decoder_sparse_step=2,
                                         mlp_only_layers=[3])),
    "qwen2_moe-few-keys": ("qwen2_moe", dict(hidden_size=32, num_hidden_layers=2,
                                             num_attention_heads=2, num_key_value_heads=2,
                                             vocab_size=50)),
    "qwen3-tiny": ("qwen3", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                 vocab_size=100)),
    "qwen3-bias-tied": ("qwen3", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2,
                                     attention_bias=True, vocab_size=100, tie_word_embeddings=True)),
    "qwen3_moe-tiny": ("qwen3_moe", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                                         num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                         vocab_size=100, num_experts=8, num_experts_per_tok=2,
                                         moe_intermediate_size=32, mlp_only_layers=[0])),
    "gemma-tiny": ("gemma", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=1, head_dim=32,
                                 vocab_size=100)),
    "gemma-untied": ("gemma", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=2, head_dim=16,
                                   vocab_size=100, tie_word_embeddings=False, attention_bias=True)),
    "gemma2-tiny": ("gemma2", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=24,
                                   vocab_size=100, sliding_window=8)),
    "gemma3_text-tiny": ("gemma3_text", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=7,
                                             num_attention_heads=4, num_key_value_heads=1, head_dim=32,
                                             vocab_size=100, sliding_window=8)),
    "gemma3-multimodal-tiny": ("gemma3", dict(
        text_config=dict(model_type="gemma3_text", hidden_size=64, intermediate_size=96,
                         num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1,
                         head_dim=16, vocab_size=300, sliding_window=8),
        vision_config=dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=48,
                           num_hidden_layers=2, num_attention_heads=2, image_size=28, patch_size=7,
                           vision_use_head=False),
        mm_tokens_per_image=4, image_token_index=299, boi_token_index=297, eoi_token_index=298)),
    "phi3-tiny": ("phi3", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
                               sliding_window=16, pad_token_id=0, bos_token_id=0, eos_token_id=0)),
    "deepseek_v2-tiny": ("deepseek_v2", dict(hidden_size=64, intermediate_size=96, moe_intermediate_size=24,
                                             num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                                             n_routed_experts=6, n_shared_experts=2, num_experts_per_tok=2,
                                             first_k_dense_replace=1, moe_layer_freq=1, q_lora_rank=None,
                                             kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
                                             v_head_dim=12, vocab_size=100, topk_method="greedy",
                                             n_group=1, topk_group=1)),
    "deepseek_v2-qlora": ("deepseek_v2", dict(hidden_size=64, intermediate_size=96, moe_intermediate_size=24,
                                              num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
                                              n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
                                              first_k_dense_replace=0, moe_layer_freq=2, q_lora_rank=48,
                                              kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
                                              v_head_dim=16, vocab_size=100, attention_bias=True,
                                              topk_method="greedy", n_group=1, topk_group=1)),
    "deepseek_v3-tiny": ("deepseek_v3", dict(hidden_size=64, intermediate_size=96, moe_intermediate_size=24,
                                             num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                                             n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
                                             first_k_dense_replace=1, q_lora_rank=40, kv_lora_rank=32,
                                             qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                                             n_group=2, topk_group=1, vocab_size=100)),
    "deepseek_v3-noqlora": ("deepseek_v3", dict(hidden_size=64, intermediate_size=96, moe_intermediate_size=24,
                                                num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                                                n_routed_experts=4, n_shared_experts=2, num_experts_per_tok=2,
                                                first_k_dense_replace=0, q_lora_rank=None, kv_lora_rank=16,
                                                qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8,
                                                n_group=1, topk_group=1, vocab_size=100,
                                                tie_word_embeddings=True)),
    "falcon-7b-style": ("falcon", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                       vocab_size=100, multi_query=True, parallel_attn=True, bias=False,
                                       new_decoder_architecture=False)),
    "falcon-new-arch": ("falcon", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=8,
                                       num_kv_heads=2, vocab_size=100, new_decoder_architecture=True,
                                       bias=False)),
    "falcon-new-arch-1ln": ("falcon", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=8,
                                           num_kv_heads=2, vocab_size=100, new_decoder_architecture=True,
                                           num_ln_in_parallel_attn=1, ffn_hidden_size=100, bias=True)),
    "falcon-sequential": ("falcon", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                         vocab_size=100, multi_query=False, parallel_attn=False, bias=True,
                                         alibi=True, tie_word_embeddings=False)),
    "gpt_neox-tiny": ("gpt_neox", dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                       num_attention_heads=4, vocab_size=100, rotary_pct=0.25)),
    "gpt_neox-sequential": ("gpt_neox", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                             num_attention_heads=4, vocab_size=100, use_parallel_residual=False,
                                             attention_bias=False, tie_word_embeddings=True)),
    "starcoder2-tiny": ("starcoder2", dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                           num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
                                           sliding_window=16)),
    "starcoder2-nobias": ("starcoder2", dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=1, vocab_size=100,
                                             use_bias=False, tie_word_embeddings=False)),
    "olmo2-tiny": ("olmo2", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, vocab_size=100)),
    "olmo2-bias": ("olmo2", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=4, vocab_size=100,
                                 attention_bias=True, tie_word_embeddings=True)),
    "gpt2-tiny": ("gpt2", dict(n_embd=64, n_layer=2, n_head=4, vocab_size=100, n_positions=32)),
    "bert-tiny": ("bert", dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=4, vocab_size=100, max_position_embeddings=32)),
    "vit-tiny": ("vit", dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, image_size=32, patch_size=8, num_labels=10)),
}

# Configs the differential fuzzer (fuzz_configs.py) found memplan wrong on, each reduced to a
# small case: (model_type, kwargs, edits to the saved file) where older files leave keys out.
FOUND = {
    # MLA has no key/value heads: V3's default of 128 with 4 query heads was refused.
    "deepseek_v3-kv-heads-default": ("deepseek_v3", dict(
        hidden_size=32, intermediate_size=48, moe_intermediate_size=8, num_hidden_layers=2,
        num_attention_heads=4, n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
        first_k_dense_replace=1, q_lora_rank=16, kv_lora_rank=8, qk_nope_head_dim=8,
        qk_rope_head_dim=4, v_head_dim=8, n_group=1, topk_group=1, vocab_size=64),
        {"drop": ["num_key_value_heads"]}),
    # V3 keeps its experts in n_routed_experts (num_local_experts its alias): a stray
    # num_experts is not read; a left-out num_experts_per_tok (8) passes the 4 experts.
    "deepseek_v3-stray-num-experts": ("deepseek_v3", dict(
        hidden_size=32, intermediate_size=48, moe_intermediate_size=8, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, n_routed_experts=4, num_experts=2,
        n_shared_experts=0, first_k_dense_replace=0, q_lora_rank=None, kv_lora_rank=8,
        qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=4, n_group=1, topk_group=1,
        vocab_size=64), {"drop": ["num_experts_per_tok"]}),
    # V2 builds its shared MLP even with n_shared_experts 0: its down projection's bias.
    "deepseek_v2-no-shared-bias": ("deepseek_v2", dict(
        hidden_size=16, intermediate_size=32, moe_intermediate_size=8, num_hidden_layers=2,
        num_attention_heads=2, n_routed_experts=4, n_shared_experts=0, num_experts_per_tok=2,
        first_k_dense_replace=1, q_lora_rank=None, kv_lora_rank=8, qk_nope_head_dim=4,
        qk_rope_head_dim=2, v_head_dim=4, mlp_bias=True, topk_method="greedy", vocab_size=64)),
    # Qwen3-MoE's window is on every layer (no max_window_layers, no layer_types).
    "qwen3_moe-sliding": ("qwen3_moe", dict(
        hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=16, use_sliding_window=True, sliding_window=4, vocab_size=64)),
    # Qwen2-MoE slides the even layers below max_window_layers (layer_types left out), and
    # writes sliding_window 0 for no window.
    "qwen2_moe-sliding-no-types": ("qwen2_moe", dict(
        hidden_size=32, intermediate_size=48, num_hidden_layers=5, num_attention_heads=2,
        num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
        shared_expert_intermediate_size=24, use_sliding_window=True, sliding_window=4,
        max_window_layers=3, vocab_size=64), {"drop": ["layer_types"]}),
    "qwen2_moe-no-window-types": ("qwen2_moe", dict(
        hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=2,
        num_experts=4, num_experts_per_tok=1, moe_intermediate_size=16, vocab_size=64,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"])),
    # Qwen2 and Qwen3: layer_types marks sliding layers but use_sliding_window is off (the
    # window is null): every layer global; Qwen2 has Q/K/V biases whatever qkv_bias says.
    "qwen3-types-without-window": ("qwen3", dict(
        hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, vocab_size=64,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"])),
    "qwen2-qkv-bias-key": ("qwen2", dict(
        hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=64, qkv_bias=False, use_sliding_window=True,
        sliding_window=5, layer_types=["sliding_attention", "full_attention"])),
    # Gemma 2 with a null window: the sliding layers attend globally (it was refused).
    "gemma2-null-window": ("gemma2", dict(
        hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, vocab_size=64, sliding_window=None)),
    # Gemma 3's multimodal model ties (or not) by its own tie_word_embeddings, not the text
    # config's.
    "gemma3-multimodal-untied": ("gemma3", dict(
        text_config=dict(model_type="gemma3_text", hidden_size=32, intermediate_size=48,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         head_dim=16, vocab_size=80, sliding_window=8, tie_word_embeddings=True),
        vision_config=dict(model_type="siglip_vision_model", hidden_size=16, intermediate_size=32,
                           num_hidden_layers=1, num_attention_heads=2, image_size=16, patch_size=8,
                           vision_use_head=False),
        mm_tokens_per_image=4, image_token_index=79, boi_token_index=77, eoi_token_index=78,
        tie_word_embeddings=False)),
    "gemma3-multimodal-text-untied": ("gemma3", dict(
        text_config=dict(model_type="gemma3_text", hidden_size=32, intermediate_size=48,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         head_dim=16, vocab_size=80, sliding_window=8, tie_word_embeddings=False),
        vision_config=dict(model_type="siglip_vision_model", hidden_size=16, intermediate_size=32,
                           num_hidden_layers=1, num_attention_heads=2, image_size=16, patch_size=8),
        mm_tokens_per_image=4, image_token_index=79, boi_token_index=77, eoi_token_index=78,
        dtype="bfloat16")),
    # A mistral config with layer_types is read as Ministral: the window on those layers only.
    "mistral-layer-types": ("mistral", dict(
        hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=64, sliding_window=3,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"])),
    # Key/value heads left at the class default (8) above the 4 query heads, and a width that
    # is no whole number of heads: transformers builds both (hidden // heads), memplan refused.
    "mistral-kv-default-above-heads": ("mistral", dict(
        hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        vocab_size=64, sliding_window=None)),
    "mixtral-uneven-width": ("mixtral", dict(
        hidden_size=28, intermediate_size=40, num_hidden_layers=2, num_attention_heads=6,
        num_key_value_heads=2, num_local_experts=3, num_experts_per_tok=2, vocab_size=64)),
    # GPT-2 and a BERT decoder with cross-attention blocks.
    "gpt2-cross-attention": ("gpt2", dict(n_embd=32, n_layer=2, n_head=2, vocab_size=64,
                                          n_positions=16, add_cross_attention=True)),
    "bert-decoder-cross-attention": ("bert", dict(
        hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
        vocab_size=64, max_position_embeddings=16, is_decoder=True, add_cross_attention=True)),
    # ViT with a [height, width] image and sides that are no whole number of patches.
    "vit-rectangular": ("vit", dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                    num_attention_heads=2, image_size=[20, 28], patch_size=8,
                                    num_labels=3)),
    # ViT (transformers 5) splits hidden // heads without refusing an uneven width (16 over
    # the class's 12 heads), and takes a head_dim its class has no field for.
    "vit-uneven-heads": ("vit", dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                     image_size=16, patch_size=8, num_labels=2),
                         {"drop": ["num_attention_heads"]}),
    "vit-head-dim": ("vit", dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                 num_attention_heads=2, head_dim=24, image_size=16, patch_size=8,
                                 num_labels=2)),
    # Nulls: num_key_value_heads null is num_attention_heads (not the class's 32), head_dim
    # null hidden // heads; the older torch_dtype spelling.
    "qwen2-null-kv-heads": ("qwen2", dict(
        hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        vocab_size=64, dtype="bfloat16"),
        {"set": {"num_key_value_heads": None}, "rename": {"dtype": "torch_dtype"}}),
}
SMALL.update(FOUND)


# The config class's defaults alone: a file with nothing but its model_type.
DEFAULTS = ["llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma",
            "gemma2", "gemma3_text", "phi3", "deepseek_v2", "deepseek_v3", "falcon", "gpt_neox",
            "starcoder2", "olmo2", "gpt2", "bert", "vit"]


def build(config):
    """The model memplan's count describes: the causal LM for decoders, BertModel (with its
    pooler) for bert, ViTForImageClassification for vit, Gemma3ForConditionalGeneration
    for a multimodal gemma3."""
    return fuzz.build(config)


def text_config(config):
    return fuzz.text_config(config)


def routed_experts(model, config):
    """Parameters of the routed experts of each layer (the part of which only
    experts-per-token are active) and the experts per layer, from the module tree."""
    per_layer = []
    experts = None
    for name, module in model.named_modules():
        if name.endswith(".experts"):
            params = list(module.parameters())
            per_layer.append(sum(p.numel() for p in params))
            experts = len(module) if isinstance(module, torch.nn.ModuleList) else params[0].shape[0]
    c = text_config(config)
    return per_layer, experts, getattr(c, "num_experts_per_tok", None)


def kv_widths(model, config):
    """K and V floats per token per layer, from the attention modules' projections (a fused
    QKV split by the query width); for MLA also the latent serving engines cache
    (`kv_a_proj_with_mqa`'s width: kv_lora_rank + qk_rope_head_dim), beside the
    decompressed per-head K and V transformers' own cache holds."""
    c = text_config(config)
    attns = fuzz.attention_modules(model)
    if c.model_type in ("deepseek_v2", "deepseek_v3"):
        heads = c.num_attention_heads
        return {"k": heads * (c.qk_nope_head_dim + c.qk_rope_head_dim), "v": heads * c.v_head_dim,
                "latent": attns[0].kv_a_proj_with_mqa.out_features}
    a = attns[0]
    if hasattr(a, "k_proj"):
        return {"k": a.k_proj.out_features, "v": a.v_proj.out_features}
    half = fuzz.kv_width(a, config) // 2
    return {"k": half, "v": half}


def layer_windows(model, config):
    """The window of each decoder layer's attention (None: global), as the modeling code
    applies it."""
    if config.model_type in ("bert", "vit"):
        return None
    return [fuzz.layer_window(a, config) for a in fuzz.attention_modules(model)]


def record(name, config, shapes):
    model = build(config)
    total = sum(p.numel() for p in model.parameters())
    per_layer, experts, per_tok = routed_experts(model, config)
    decoder = config.model_type not in ("bert", "vit")
    entry = {
        "model_type": config.model_type,
        "class": type(model).__name__,
        "parameters": total,
        "routed_expert_parameters_per_moe_layer": per_layer,
        "experts": experts,
        "experts_per_token": per_tok,
        "kv_floats_per_token_per_layer": kv_widths(model, config) if decoder else None,
        "layer_windows": layer_windows(model, config),
    }
    if shapes:
        entry["shapes"] = {n: list(p.shape) for n, p in model.named_parameters()}
    return entry


def edit(path, edits):
    """Rewrites a saved config as older versions and hand-written files have it: keys left
    out (`drop`, `text_config.KEY` inside the text config), set (`set`), or renamed
    (`rename`, e.g. `dtype` to `torch_dtype`)."""
    with open(path) as f:
        d = json.load(f)
    for key in edits.get("drop", []):
        if key.startswith("text_config."):
            d["text_config"].pop(key[len("text_config."):], None)
        else:
            d.pop(key, None)
    for key, value in edits.get("set", {}).items():
        d[key] = value
    for old, new in edits.get("rename", {}).items():
        if old in d:
            d[new] = d.pop(old)
    with open(path, "w") as f:
        json.dump(d, f, indent=2, sort_keys=True)
        f.write("\n")


def main():
    os.makedirs(OUT, exist_ok=True)
    expected = {"transformers": transformers.__version__, "torch": torch.__version__,
                "small": {}, "published": {}}
    for name, spec in SMALL.items():
        model_type, kwargs = spec[0], spec[1]
        config = AutoConfig.for_model(model_type, **kwargs)
        with tempfile.TemporaryDirectory() as d:
            config.save_pretrained(d)
            with open(os.path.join(d, "config.json")) as f:
                text = f.read()
        with open(os.path.join(OUT, f"{name}.json"), "w") as f:
            f.write(text)
        if len(spec) > 2:
            edit(os.path.join(OUT, f"{name}.json"), spec[2])
        # Count from the file as written, as a user's tool would read it.
        config = AutoConfig.from_pretrained(os.path.join(OUT, f"{name}.json"))
        expected["small"][name] = record(name, config, shapes=True)
        print(name, expected["small"][name]["parameters"], file=sys.stderr)
    for model_type in DEFAULTS:
        name = f"{model_type}-defaults"
        config = AutoConfig.for_model(model_type)
        with tempfile.TemporaryDirectory() as d:
            config.save_pretrained(d)
            with open(os.path.join(d, "config.json")) as f:
                text = f.read()
        with open(os.path.join(OUT, f"{name}.json"), "w") as f:
            f.write(text)
        config = AutoConfig.from_pretrained(os.path.join(OUT, f"{name}.json"))
        expected["small"][name] = record(name, config, shapes=False)
        print(name, expected["small"][name]["parameters"], file=sys.stderr)
    for file in sorted(os.listdir(HERE)):
        if not file.endswith(".json"):
            continue
        config = AutoConfig.from_pretrained(os.path.join(HERE, file))
        expected["published"][file[:-5]] = record(file, config, shapes=False)
        print(file, expected["published"][file[:-5]]["parameters"], file=sys.stderr)
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        f.write(dumps(expected))
        f.write("\n")


def dumps(obj, indent=0):
    """JSON with one key a line and lists of numbers (shapes, windows) on one line."""
    pad = " " * (indent + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{pad}{json.dumps(k)}: {dumps(v, indent + 1)}" for k, v in sorted(obj.items())]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    if isinstance(obj, list) and any(isinstance(v, (dict, list)) for v in obj):
        items = [pad + dumps(v, indent + 1) for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"
    return json.dumps(obj)


if __name__ == "__main__":
    main()
