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
Each group draws from its own stream (seed 2090)."""
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


MAKERS = {"recompute": recompute}
if __name__ == "__main__":
    groups = sys.argv[2:] or list(MAKERS)
    cases = [c for g in groups for c in MAKERS[g]()]
    json.dump(cases, open(sys.argv[1], "w"))
    print(len(cases))
