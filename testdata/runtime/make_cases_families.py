"""Writes `cases_families.json` (usage: python make_cases_families.py OUT.json): hand-built cases
for families the random draw rarely hits, counted by `harness.py --cases`: Gemma 2 with both
softcaps and a window far below the sequence, Gemma 3 text with sliding layers at 4,096-8,192
tokens, MoE variants (Mixtral, Qwen2-MoE with a shared expert, Qwen3-MoE on every other layer,
DeepSeek-V2 with q-LoRA, DeepSeek-V3) at 8,192 tokens, partial rotary (Phi-3, GPT-NeoX at 0.5),
Falcon eager inference, Llama at 16,384 tokens; over pure bf16 with the fused kernel, amp with
the per-tensor kernel, selective and full checkpointing, f16 inference."""
import json, random, sys
sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
import harness
rng = random.Random(2040)
cases = []
def cfg(t, **over):
    kw = harness.gen(t, rng)
    kw.update(over)
    return kw
T = lambda b, s, p, a, c, k: dict(batch=b, seq=s, precision=p, attention=a, checkpointing=c, kernel=k)
I = lambda b, s, d, a, l: dict(batch=b, seq=s, dtype=d, attention=a, logits=l)
# Gemma 2: both softcaps, a window far below the sequence.
g2 = cfg("gemma2", sliding_window=64, attn_logit_softcapping=50.0, final_logit_softcapping=30.0)
for s in [T(1, 3000, "amp", "eager", "none", "foreach"), T(1, 3000, "pure", "eager", "selective", "fused"),
          T(2, 1024, "mixed", "eager", "full", "per-tensor"), T(1, 2048, "amp", "flash", "none", "foreach")]:
    cases.append(["gemma2", g2, s])
for s in [I(1, 3000, "f16", "eager", "all"), I(2, 1024, "bf16", "eager", "last")]:
    cases.append(["gemma2", g2, s])
# Gemma 3 text: sliding window 256 every other layer, long sequence.
g3 = cfg("gemma3_text", sliding_window=256, sliding_window_pattern=2)
for s in [T(1, 8192, "amp", "sdpa", "none", "foreach"), T(1, 4096, "mixed", "eager", "full", "fused"),
          T(1, 4096, "pure", "sdpa", "selective", "per-tensor")]:
    cases.append(["gemma3_text", g3, s])
for s in [I(1, 8192, "f16", "sdpa", "last"), I(1, 4096, "f16", "eager", "all")]:
    cases.append(["gemma3_text", g3, s])
# MoE variants.
mx = cfg("mixtral", num_local_experts=8, num_experts_per_tok=2)
q2 = cfg("qwen2_moe", num_experts=8, num_experts_per_tok=2, shared_expert_intermediate_size=512, decoder_sparse_step=1)
q3 = cfg("qwen3_moe", num_experts=16, num_experts_per_tok=4, decoder_sparse_step=2)
d2 = cfg("deepseek_v2", q_lora_rank=256, n_shared_experts=2, num_experts_per_tok=2)
d3 = cfg("deepseek_v3", n_shared_experts=1, num_experts_per_tok=2)
for t, kw in [("mixtral", mx), ("qwen2_moe", q2), ("qwen3_moe", q3), ("deepseek_v2", d2), ("deepseek_v3", d3)]:
    cases.append([t, kw, T(1, 8192, "pure", "sdpa", "none", "fused")])
    cases.append([t, kw, T(2, 2048, "amp", "eager", "selective", "per-tensor")])
    cases.append([t, kw, I(1, 8192, "f16", "sdpa", "all")])
# Partial rotary.
ph = cfg("phi3", partial_rotary_factor=0.5)
nx = cfg("gpt_neox", rotary_pct=0.5)
for t, kw in [("phi3", ph), ("gpt_neox", nx)]:
    cases.append([t, kw, T(1, 8192, "amp", "sdpa", "none", "foreach")])
    cases.append([t, kw, T(1, 4096, "pure", "eager", "full", "per-tensor")])
    cases.append([t, kw, I(1, 8192, "f16", "eager", "last")])
    cases.append([t, kw, I(3, 777, "f16", "sdpa", "all")])
# Falcon (the untraced over), and Llama f16 inference with f32 norms, long and small batch.
fa = cfg("falcon", new_decoder_architecture=False, parallel_attn=True, multi_query=True)
cases.append(["falcon", fa, I(1, 4096, "bf16", "eager", "last")])
cases.append(["falcon", fa, I(1, 4096, "f16", "eager", "all")])
ll = cfg("llama")
cases.append(["llama", ll, I(1, 16384, "f16", "eager", "last")])
cases.append(["llama", ll, T(1, 16384, "pure", "sdpa", "selective", "foreach")])
json.dump(cases, open(sys.argv[1], "w"))
print(len(cases))
