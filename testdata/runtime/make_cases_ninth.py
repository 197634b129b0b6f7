"""Writes `cases_ninth.json` (usage: python make_cases_ninth.py OUT.json [GROUP ...]):
hand-built cases of the ninth session, counted by `harness.py --cases`.

- `ernie4_5`: ERNIE 4.5 dense (added in the ninth session): ERNIE-4.5-0.3B's layout at
  two layers (8:1 grouped heads of 128, tied), biased projections (`use_bias`) with MHA and
  an untied head, and a drawn config, over the eighth session's `GRID`;
- `ernie4_5_moe`: ERNIE 4.5 MoE: ERNIE-4.5-21B-A3B's layout at three layers, biased MHA
  with every second layer sparse and no shared expert, and a drawn config;
- `stablelm_qk`: StableLM with `qk_layernorm` (StableLM 2 12B's per-head LayerNorms of Q
  and K): the 12B's parallel blocks with 4:1 grouped heads, sequential blocks with biased
  Q/K/V, and a drawn config, over the same grid.
Each group draws from its own stream (seeds 2095, 2096, 2102)."""
import json, random, sys
sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
import harness
from make_cases_eighth import GRID, cfg


def ernie4_5():
    rng = random.Random(2095)
    a = cfg(rng, "ernie4_5", num_hidden_layers=2, hidden_size=1024, num_attention_heads=16,
            num_key_value_heads=2, head_dim=128, intermediate_size=3072, use_bias=False,
            tie_word_embeddings=True, vocab_size=103424)
    b = cfg(rng, "ernie4_5", num_hidden_layers=2, hidden_size=768, num_attention_heads=12,
            num_key_value_heads=12, head_dim=64, intermediate_size=2048, use_bias=True,
            tie_word_embeddings=False)
    c = cfg(rng, "ernie4_5", num_hidden_layers=3)
    return [["ernie4_5", kw, s] for kw in (a, b, c) for s in GRID]


def stablelm_qk():
    rng = random.Random(2096)
    a = cfg(rng, "stablelm", num_hidden_layers=2, hidden_size=1024, num_attention_heads=16,
            num_key_value_heads=4, intermediate_size=2816, use_qkv_bias=False,
            use_parallel_residual=True, partial_rotary_factor=0.25, hidden_dropout=0.0,
            attention_dropout=0.0, qk_layernorm=True)
    b = cfg(rng, "stablelm", num_hidden_layers=2, hidden_size=768, num_attention_heads=12,
            num_key_value_heads=12, intermediate_size=2048, use_qkv_bias=True,
            use_parallel_residual=False, partial_rotary_factor=0.25, hidden_dropout=0.0,
            attention_dropout=0.0, qk_layernorm=True)
    c = cfg(rng, "stablelm", num_hidden_layers=3, qk_layernorm=True)
    return [["stablelm", kw, s] for kw in (a, b, c) for s in GRID]


def ernie4_5_moe():
    rng = random.Random(2102)
    # ERNIE-4.5-21B-A3B's layout at small width (4:1 grouped heads of 128, 6 of 16 experts
    # and two shared ones, every layer sparse from the second, tied), biased MHA with every
    # second layer sparse from the first and no shared expert, and a drawn config.
    a = cfg(rng, "ernie4_5_moe", num_hidden_layers=3, hidden_size=1024, num_attention_heads=8,
            num_key_value_heads=2, intermediate_size=3072, moe_num_experts=16, moe_k=6,
            moe_intermediate_size=256, moe_num_shared_experts=2, moe_layer_start_index=1,
            moe_layer_interval=1, use_bias=False, tie_word_embeddings=True)
    a.pop("head_dim", None)
    b = cfg(rng, "ernie4_5_moe", num_hidden_layers=4, hidden_size=768, num_attention_heads=12,
            num_key_value_heads=12, intermediate_size=2048, moe_num_experts=8, moe_k=2,
            moe_intermediate_size=384, moe_num_shared_experts=0, moe_layer_start_index=0,
            moe_layer_interval=2, use_bias=True, tie_word_embeddings=False)
    b.pop("head_dim", None)
    c = cfg(rng, "ernie4_5_moe", num_hidden_layers=3)
    return [["ernie4_5_moe", kw, s] for kw in (a, b, c) for s in GRID]


MAKERS = {"ernie4_5": ernie4_5, "stablelm_qk": stablelm_qk, "ernie4_5_moe": ernie4_5_moe}
if __name__ == "__main__":
    groups = sys.argv[2:] or list(MAKERS)
    cases = [c for g in groups for c in MAKERS[g]()]
    json.dump(cases, open(sys.argv[1], "w"))
    print(len(cases))
