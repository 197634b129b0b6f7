"""Writes `cases_seventh.json` (usage: python make_cases_seventh.py OUT.json [TYPE ...]):
hand-built cases for the model types added in the seventh session, counted by
`harness.py --cases`. For each type: a few configs (the harness's random draw, then the
structure the published models use) over every precision (f16 under autocast too), eager
and flash attention (gpt-oss has no SDPA path), no/selective/full checkpointing, the three
optimizer kernels, batches 1-3 and sequences up to 8,192, and inference in f16, bf16 and
f32 with the last or all logits."""
import json, random, sys
sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
import harness
rng = random.Random(2070)


def fresh():
    """Each type draws from its own stream (seed 2070), so a type's cases do not depend on
    which other types are made with it."""
    global rng
    rng = random.Random(2070)
T = lambda b, s, p, a, c, k, **x: dict(batch=b, seq=s, precision=p, attention=a, checkpointing=c, kernel=k, **x)
I = lambda b, s, d, a, l: dict(batch=b, seq=s, dtype=d, attention=a, logits=l)


def cfg(t, **over):
    kw = harness.gen(t, rng)
    kw.update(over)
    return kw


def gpt_oss():
    fresh()
    out = []
    # The published layout: alternating sliding (128) / full layers, 4 of 32 experts, biases.
    a = cfg("gpt_oss", num_hidden_layers=2, num_local_experts=32, num_experts_per_tok=4,
            sliding_window=128, attention_bias=True, intermediate_size=720)
    a.pop("layer_types", None)
    # Grouped heads 8:1 and a window past the sequence, full layers only.
    b = cfg("gpt_oss", num_hidden_layers=3, hidden_size=768, num_attention_heads=12,
            num_key_value_heads=1, head_dim=64, num_local_experts=8, num_experts_per_tok=2,
            layer_types=["full_attention"] * 3, attention_bias=False, intermediate_size=512)
    # MHA, top-1, sliding on every layer.
    c = cfg("gpt_oss", num_hidden_layers=2, hidden_size=512, num_attention_heads=8,
            num_key_value_heads=8, head_dim=64, num_local_experts=4, num_experts_per_tok=1,
            sliding_window=64, layer_types=["sliding_attention"] * 2, intermediate_size=384)
    for kw in (a, b, c):
        for s in [T(1, 2048, "mixed", "eager", "none", "foreach"),
                  T(2, 1024, "amp", "eager", "none", "fused"),
                  T(1, 1024, "amp", "eager", "none", "foreach", dtype="f16"),
                  T(1, 4096, "pure", "flash", "none", "per-tensor"),
                  T(3, 777, "fp32", "eager", "selective", "foreach"),
                  T(1, 2048, "mixed", "eager", "full", "fused"),
                  T(2, 1024, "amp", "flash", "selective", "foreach", optimizer="adam"),
                  I(1, 4096, "bf16", "eager", "last"),
                  I(2, 1024, "f16", "eager", "all"),
                  I(1, 8192, "bf16", "flash", "all"),
                  I(3, 384, "f32", "eager", "last")]:
            out.append(["gpt_oss", kw, s])
    return out


def glm4_moe():
    fresh()
    out = []
    # GLM-4.5's layout: half of each head rotating, shared expert, the first layer dense,
    # 8:1 grouped heads.
    a = cfg("glm4_moe", num_hidden_layers=3, hidden_size=768, num_attention_heads=12,
            num_key_value_heads=2, head_dim=64, n_routed_experts=16, num_experts_per_tok=4,
            moe_intermediate_size=256, n_shared_experts=1, first_k_dense_replace=1,
            use_qk_norm=False, partial_rotary_factor=0.5, attention_bias=True)
    # Q/K norms, every layer sparse, no shared expert, a full rotation.
    b = cfg("glm4_moe", num_hidden_layers=2, hidden_size=512, num_attention_heads=8,
            num_key_value_heads=8, head_dim=64, n_routed_experts=8, num_experts_per_tok=2,
            moe_intermediate_size=128, n_shared_experts=0, first_k_dense_replace=0,
            use_qk_norm=True, partial_rotary_factor=1.0, attention_bias=False)
    for kw in (a, b):
        for s in [T(1, 2048, "mixed", "sdpa", "none", "foreach"),
                  T(2, 1024, "amp", "eager", "none", "fused"),
                  T(1, 1024, "amp", "sdpa", "none", "foreach", dtype="f16"),
                  T(1, 4096, "pure", "flash", "none", "per-tensor"),
                  T(3, 777, "fp32", "sdpa", "selective", "foreach"),
                  T(1, 2048, "mixed", "eager", "full", "fused"),
                  T(2, 1024, "amp", "flash", "selective", "foreach", optimizer="momentum"),
                  I(1, 4096, "bf16", "sdpa", "last"),
                  I(2, 1024, "f16", "eager", "all"),
                  I(1, 8192, "bf16", "sdpa", "all"),
                  I(3, 384, "f32", "eager", "last")]:
            out.append(["glm4_moe", kw, s])
    return out


def moe_pair(model_type, over_a, over_b):
    """Two configs of a plain MoE family over the same settings as GLM-4.5's."""
    fresh()
    out = []
    for over in (over_a, over_b):
        kw = cfg(model_type, **over)
        for s in [T(1, 2048, "mixed", "sdpa", "none", "foreach"),
                  T(2, 1024, "amp", "eager", "none", "fused"),
                  T(1, 1024, "amp", "sdpa", "none", "foreach", dtype="f16"),
                  T(1, 4096, "pure", "flash", "none", "per-tensor"),
                  T(3, 777, "fp32", "sdpa", "selective", "foreach"),
                  T(1, 2048, "mixed", "eager", "full", "fused"),
                  T(2, 1024, "amp", "flash", "selective", "foreach", optimizer="sgd"),
                  I(1, 4096, "bf16", "sdpa", "last"),
                  I(2, 1024, "f16", "eager", "all"),
                  I(1, 8192, "bf16", "sdpa", "all"),
                  I(3, 384, "f32", "eager", "last")]:
            out.append([model_type, kw, s])
    return out


def olmoe():
    # OLMoE-1B-7B's layout (8 of 64 experts, MHA) scaled down, then GQA with normalised
    # top-k and biases.
    return moe_pair("olmoe",
                    dict(num_hidden_layers=2, hidden_size=512, num_attention_heads=8,
                         num_key_value_heads=8, num_experts=16, num_experts_per_tok=4,
                         intermediate_size=256, norm_topk_prob=False, attention_bias=False),
                    dict(num_hidden_layers=3, hidden_size=768, num_attention_heads=12,
                         num_key_value_heads=4, num_experts=8, num_experts_per_tok=2,
                         intermediate_size=384, norm_topk_prob=True, attention_bias=True))


def granitemoe():
    # Granite-3.0-1B-A400M's layout (8 of 32 experts, multipliers) scaled down, then GQA,
    # tied embeddings, top-1.
    return moe_pair("granitemoe",
                    dict(num_hidden_layers=2, hidden_size=512, num_attention_heads=8,
                         num_key_value_heads=8, num_local_experts=16, num_experts_per_tok=4,
                         intermediate_size=256, embedding_multiplier=12.0,
                         residual_multiplier=0.22, attention_multiplier=0.015625,
                         logits_scaling=6.0, tie_word_embeddings=True),
                    dict(num_hidden_layers=3, hidden_size=768, num_attention_heads=12,
                         num_key_value_heads=4, num_local_experts=8, num_experts_per_tok=1,
                         intermediate_size=384, tie_word_embeddings=False))


def cohere2():
    # Command R7B's layout (three sliding layers of 4,096 to one NoPE global) with a window
    # far below the sequence, then one sliding to one global with GQA and a bias.
    return moe_pair("cohere2",
                    dict(num_hidden_layers=4, hidden_size=512, num_attention_heads=8,
                         num_key_value_heads=8, intermediate_size=1536, sliding_window=256,
                         sliding_window_pattern=4, logit_scale=0.25, tie_word_embeddings=True),
                    dict(num_hidden_layers=2, hidden_size=768, num_attention_heads=12,
                         num_key_value_heads=4, intermediate_size=2048, sliding_window=64,
                         sliding_window_pattern=2, attention_bias=True,
                         tie_word_embeddings=False))


def seed_oss():
    # Seed-OSS's defaults (biased Q/K/V, dropout 0.1 on the probabilities and both branches,
    # 10:1 grouped heads of 128), then no dropout with an O bias.
    return moe_pair("seed_oss",
                    dict(num_hidden_layers=2, hidden_size=1024, num_attention_heads=10,
                         num_key_value_heads=1, head_dim=128, intermediate_size=2816,
                         attention_bias=True, attention_out_bias=False, mlp_bias=False,
                         attention_dropout=0.1, residual_dropout=0.1),
                    dict(num_hidden_layers=2, hidden_size=768, num_attention_heads=12,
                         num_key_value_heads=4, head_dim=64, intermediate_size=2048,
                         attention_dropout=0.0, residual_dropout=0.0, attention_out_bias=True))


MAKERS = {"gpt_oss": gpt_oss, "glm4_moe": glm4_moe, "olmoe": olmoe, "granitemoe": granitemoe,
          "cohere2": cohere2, "seed_oss": seed_oss}
if __name__ == "__main__":
    types = sys.argv[2:] or list(MAKERS)
    cases = [c for t in types for c in MAKERS[t]()]
    json.dump(cases, open(sys.argv[1], "w"))
    print(len(cases))
