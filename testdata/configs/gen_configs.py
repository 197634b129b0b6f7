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
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

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


# The config class's defaults alone: a file with nothing but its model_type.
DEFAULTS = ["llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma",
            "gemma2", "gemma3_text", "phi3", "deepseek_v2", "deepseek_v3", "falcon", "gpt_neox",
            "starcoder2", "olmo2", "gpt2", "bert", "vit"]


def build(config):
    """The model memplan's count describes: the causal LM for decoders, BertModel (with its
    pooler) for bert, ViTForImageClassification for vit."""
    with torch.device("meta"):
        if config.model_type == "bert":
            return AutoModel.from_config(config)
        if config.model_type == "vit":
            return transformers.ViTForImageClassification(config)
        return AutoModelForCausalLM.from_config(config)


def text_config(config):
    return getattr(config, "text_config", None) or config


def routed_experts(model, config):
    """Parameters of the routed experts of each layer (the part of which only
    experts-per-token are active), from the module tree."""
    per_layer = []
    for name, module in model.named_modules():
        if name.endswith(".experts") or name.endswith("block_sparse_moe.experts"):
            per_layer.append(sum(p.numel() for p in module.parameters()))
    c = text_config(config)
    experts = (getattr(c, "num_local_experts", None) or getattr(c, "num_experts", None)
               or getattr(c, "n_routed_experts", None))
    return per_layer, experts, getattr(c, "num_experts_per_tok", None)


def kv_widths(config):
    """K and V floats per token per layer of transformers' cache for this config, and the
    window of each layer (None: full attention). The cache is built by the library itself
    where it can be (DynamicCache(config=...)); widths come from a meta forward of the
    attention shapes' definitions."""
    c = text_config(config)
    mt = c.model_type
    heads = c.num_attention_heads
    if mt in ("deepseek_v2", "deepseek_v3"):
        # transformers caches the decompressed K (nope + rope) and V per head.
        return {"k": heads * (c.qk_nope_head_dim + c.qk_rope_head_dim), "v": heads * c.v_head_dim,
                "latent": c.kv_lora_rank + c.qk_rope_head_dim}
    if mt == "falcon":
        if c.new_decoder_architecture:
            kv = c.num_kv_heads
        elif c.multi_query:
            kv = 1
        else:
            kv = heads
        d = c.hidden_size // heads
        return {"k": kv * d, "v": kv * d}
    if mt == "gpt2":
        return {"k": c.n_embd, "v": c.n_embd}
    kv = getattr(c, "num_key_value_heads", None) or heads
    d = getattr(c, "head_dim", None) or c.hidden_size // heads
    return {"k": kv * d, "v": kv * d}


def layer_windows(config):
    c = text_config(config)
    types = getattr(c, "layer_types", None)
    window = getattr(c, "sliding_window", None)
    if types is not None:
        return [window if t == "sliding_attention" else None for t in types]
    return None


def record(name, config, shapes):
    model = build(config)
    total = sum(p.numel() for p in model.parameters())
    per_layer, experts, per_tok = routed_experts(model, config)
    entry = {
        "model_type": config.model_type,
        "class": type(model).__name__,
        "parameters": total,
        "routed_expert_parameters_per_moe_layer": per_layer,
        "experts": experts,
        "experts_per_token": per_tok,
        "kv_floats_per_token_per_layer": kv_widths(config),
        "layer_windows": layer_windows(config),
    }
    if shapes:
        entry["shapes"] = {n: list(p.shape) for n, p in model.named_parameters()}
    return entry


def main():
    os.makedirs(OUT, exist_ok=True)
    expected = {"transformers": transformers.__version__, "torch": torch.__version__,
                "small": {}, "published": {}}
    for name, (model_type, kwargs) in SMALL.items():
        config = AutoConfig.for_model(model_type, **kwargs)
        with tempfile.TemporaryDirectory() as d:
            config.save_pretrained(d)
            with open(os.path.join(d, "config.json")) as f:
                text = f.read()
        with open(os.path.join(OUT, f"{name}.json"), "w") as f:
            f.write(text)
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
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
