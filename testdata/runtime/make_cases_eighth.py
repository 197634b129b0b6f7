"""Writes `cases_eighth.json` (usage: python make_cases_eighth.py OUT.json [GROUP ...]):
hand-built cases of the eighth session, counted by `harness.py --cases`.

- `recompute`: full activation checkpointing where the step peaks inside a recomputed
  layer's attention backward (eager attention, long sequences), so what the backward holds
  from before the recomputation counts: PyTorch's non-reentrant checkpoint recomputes at the
  first unpacked saved tensor, and the nodes the backward reaches before it (residual adds,
  casts, views, the gradient of a reduction copied by a `reshape`: gpt-oss's experts'
  `[tokens, k, hidden]` f32 tensor) have run by then. gpt-oss's four rows of the seventh
  session (0.991-0.998 before the fix) and new ones over the types with parallel blocks,
  routers and casts at the layer's end.
- one group per model type added in the eighth session (`exaone4`, `stablelm`, `hunyuan_v1_dense`): a few configs (the
  harness's random draw, then the structure the published models use) over `GRID`.
Each group draws from its own stream (seeds 2090, 2091, ...)."""
import json, random, sys
sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
import harness
from make_cases_seventh import T, I


def cfg(rng, t, **over):
    kw = harness.gen(t, rng)
    kw.update(over)
    return kw


def recompute():
    rng = random.Random(2090)
    out = []
    # The seventh session's rows: a gpt-oss with 32 experts, top-2, one KV head.
    oss = dict(attention_bias=True, head_dim=64, hidden_size=960, intermediate_size=1024,
               num_attention_heads=10, num_experts_per_tok=2, num_hidden_layers=2,
               num_key_value_heads=1, num_local_experts=32, sliding_window=256,
               tie_word_embeddings=True, vocab_size=49155)
    sgd = dict(dtype="bf16", optimizer="sgd")
    for layers, b, s in [(["full_attention"] * 2, 2, 4096), (["sliding_attention"] * 2, 2, 4096),
                         (["sliding_attention", "full_attention"], 1, 4096),
                         (["sliding_attention", "full_attention"], 6, 16384)]:
        out.append(["gpt_oss", dict(oss, layer_types=layers), T(b, s, "amp", "eager", "full", "fused", **sgd)])
    # New: top-4 of 16 with a wider model, f16 autocast, mixed bf16, AdamW foreach.
    wide = dict(oss, hidden_size=1536, num_attention_heads=12, num_key_value_heads=2,
                num_local_experts=16, num_experts_per_tok=4, intermediate_size=768)
    out.append(["gpt_oss", wide, T(2, 4096, "amp", "eager", "full", "foreach", dtype="f16")])
    out.append(["gpt_oss", wide, T(1, 8192, "mixed", "eager", "full", "fused")])
    out.append(["gpt_oss", wide, T(2, 4096, "pure", "eager", "selective", "per-tensor")])
    # Other types, drawn, at sequences where the recomputed attention backward is the peak.
    for t, s in [("mixtral", T(2, 4096, "amp", "eager", "full", "foreach")),
                 ("qwen3_moe", T(2, 4096, "mixed", "eager", "full", "fused")),
                 ("olmoe", T(1, 8192, "amp", "eager", "full", "fused", dtype="f16")),
                 ("granitemoe", T(2, 4096, "amp", "eager", "full", "per-tensor")),
                 ("glm4_moe", T(2, 4096, "amp", "eager", "full", "foreach")),
                 ("deepseek_v3", T(1, 8192, "mixed", "eager", "full", "foreach")),
                 ("gpt_neox", T(2, 4096, "amp", "eager", "full", "fused")),
                 ("cohere", T(2, 4096, "amp", "eager", "full", "foreach")),
                 ("phi", T(1, 8192, "amp", "eager", "full", "foreach", dtype="f16")),
                 ("gemma2", T(2, 4096, "amp", "eager", "full", "fused")),
                 ("llama", T(2, 4096, "fp32", "eager", "full", "foreach")),
                 ("falcon", T(2, 4096, "amp", "eager", "full", "foreach"))]:
        out.append([t, cfg(rng, t, num_hidden_layers=2), s])
    return out


# Each new type's configs run over this grid: every precision (f16 under autocast too),
# eager, SDPA and flash, no/selective/full checkpointing, the three kernels, other
# optimizers, and inference in bf16, f16 and f32 with the last or all logits.
GRID = [T(1, 2048, "mixed", "eager", "none", "foreach"),
        T(2, 1024, "amp", "sdpa", "none", "fused"),
        T(1, 1024, "amp", "eager", "none", "foreach", dtype="f16"),
        T(1, 4096, "pure", "flash", "none", "per-tensor"),
        T(3, 777, "fp32", "sdpa", "selective", "foreach"),
        T(1, 2048, "mixed", "eager", "full", "fused"),
        T(2, 1024, "amp", "sdpa", "full", "foreach", optimizer="adam"),
        T(1, 1536, "mixed", "sdpa", "none", "foreach", dtype="f16", optimizer="momentum"),
        I(1, 4096, "bf16", "sdpa", "last"),
        I(2, 1024, "f16", "eager", "all"),
        I(1, 8192, "bf16", "flash", "all"),
        I(3, 384, "f32", "sdpa", "last")]


def exaone4():
    # EXAONE 4.0-32B's layout at small width (three 128-token sliding layers, then a full
    # NoPE one; 4:1 grouped heads of 128), a config without a window (every layer full and
    # rotating, tied), and listed layer types with a 64-token window and MHA.
    rng = random.Random(2091)
    a = cfg(rng, "exaone4", num_hidden_layers=4, hidden_size=1024, num_attention_heads=8,
            num_key_value_heads=2, head_dim=128, intermediate_size=2816, sliding_window=128,
            sliding_window_pattern=4, tie_word_embeddings=False)
    a.pop("layer_types", None)
    b = cfg(rng, "exaone4", num_hidden_layers=2, hidden_size=768, num_attention_heads=12,
            num_key_value_heads=4, head_dim=64, intermediate_size=2048, sliding_window=None,
            layer_types=["full_attention"] * 2, tie_word_embeddings=True)
    b.pop("sliding_window_pattern", None)
    c = cfg(rng, "exaone4", num_hidden_layers=3, hidden_size=512, num_attention_heads=8,
            num_key_value_heads=8, head_dim=64, intermediate_size=1536, sliding_window=64,
            layer_types=["full_attention", "sliding_attention", "sliding_attention"])
    c.pop("sliding_window_pattern", None)
    return [["exaone4", kw, s] for kw in (a, b, c) for s in GRID]


def stablelm():
    # StableLM-2-1.6B's layout at small width (sequential blocks, biased Q/K/V, a quarter
    # of each head rotated), StableLM-2-12B's parallel blocks (one norm; its per-head Q/K
    # LayerNorms are refused) with grouped heads, and the 3B-4E1T's (no biases) with half
    # the head rotated and dropout on the MLP's output and the probabilities.
    rng = random.Random(2092)
    a = cfg(rng, "stablelm", num_hidden_layers=2, hidden_size=1024, num_attention_heads=16,
            num_key_value_heads=16, intermediate_size=2816, use_qkv_bias=True,
            use_parallel_residual=False, partial_rotary_factor=0.25, hidden_dropout=0.0,
            attention_dropout=0.0)
    b = cfg(rng, "stablelm", num_hidden_layers=2, hidden_size=1024, num_attention_heads=16,
            num_key_value_heads=4, intermediate_size=2816, use_qkv_bias=False,
            use_parallel_residual=True, partial_rotary_factor=0.25, hidden_dropout=0.0,
            attention_dropout=0.0)
    c = cfg(rng, "stablelm", num_hidden_layers=3, hidden_size=768, num_attention_heads=12,
            num_key_value_heads=12, intermediate_size=2048, use_qkv_bias=False,
            use_parallel_residual=False, partial_rotary_factor=0.5, hidden_dropout=0.1,
            attention_dropout=0.1)
    return [["stablelm", kw, s] for kw in (a, b, c) for s in GRID]


def hunyuan_v1_dense():
    # Hunyuan-7B's layout at small width (8:1 grouped heads of 128, no biases), biased
    # Q/K/V/O with MHA and tied embeddings, and a drawn config.
    rng = random.Random(2093)
    a = cfg(rng, "hunyuan_v1_dense", num_hidden_layers=2, hidden_size=1024,
            num_attention_heads=8, num_key_value_heads=1, head_dim=128, intermediate_size=2816,
            attention_bias=False, tie_word_embeddings=False)
    b = cfg(rng, "hunyuan_v1_dense", num_hidden_layers=2, hidden_size=768,
            num_attention_heads=12, num_key_value_heads=12, head_dim=64, intermediate_size=2048,
            attention_bias=True, tie_word_embeddings=True)
    # (Its attention reads `head_dim` as given: transformers cannot build one without it.)
    c = cfg(rng, "hunyuan_v1_dense", num_hidden_layers=3)
    c.setdefault("head_dim", c["hidden_size"] // c["num_attention_heads"])
    return [["hunyuan_v1_dense", kw, s] for kw in (a, b, c) for s in GRID]


MAKERS = {"recompute": recompute, "exaone4": exaone4, "stablelm": stablelm,
          "hunyuan_v1_dense": hunyuan_v1_dense}
if __name__ == "__main__":
    groups = sys.argv[2:] or list(MAKERS)
    cases = [c for g in groups for c in MAKERS[g]()]
    json.dump(cases, open(sys.argv[1], "w"))
    print(len(cases))
