"""Runs harness.py's training and inference steps on the configs of public models that are
not in testdata/configs (Llama-3.2-3B, Qwen2.5-1.5B, Qwen3-1.7B, Phi-3.5-mini, Gemma-2-2B,
Mistral-Nemo-12B and a Mixtral-style MoE; their sizes as their `config.json` on the Hugging
Face Hub give them, Phi-3.5's long-rope scaling left out), at a reduced layer count, over a
fixed grid of settings (run by hand, never by CI). Rows carry `name` beside harness.py's keys.

    python testdata/runtime/named.py OUT.jsonl [--layers N] [--inference] [--only a,b]
"""
import json, os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H
import torch, torch.nn.functional as F

NAMED = {
 "llama-3.2-3b": ("llama", dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=28, num_attention_heads=24,
     num_key_value_heads=8, head_dim=128, vocab_size=128256, tie_word_embeddings=True, max_position_embeddings=131072,
     rms_norm_eps=1e-5, rope_theta=500000.0, hidden_act="silu")),
 "qwen2.5-1.5b": ("qwen2", dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
     num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=131072,
     rms_norm_eps=1e-6, rope_theta=1000000.0, use_sliding_window=False, sliding_window=32768, max_window_layers=21)),
 "qwen3-1.7b": ("qwen3", dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
     num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=40960,
     rms_norm_eps=1e-6, rope_theta=1000000.0)),
 "phi-3.5-mini": ("phi3", dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=32, num_attention_heads=32,
     num_key_value_heads=32, vocab_size=32064, tie_word_embeddings=False, max_position_embeddings=131072,
     original_max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=262144)),
 "gemma-2-2b": ("gemma2", dict(hidden_size=2304, intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8,
     num_key_value_heads=4, head_dim=256, vocab_size=256000, query_pre_attn_scalar=256, sliding_window=4096,
     final_logit_softcapping=30.0, attn_logit_softcapping=50.0, hidden_activation="gelu_pytorch_tanh",
     max_position_embeddings=8192)),
 "mistral-nemo-12b": ("mistral", dict(hidden_size=5120, intermediate_size=14336, num_hidden_layers=40, num_attention_heads=32,
     num_key_value_heads=8, head_dim=128, vocab_size=131072, max_position_embeddings=1024000, rope_theta=1000000.0,
     rms_norm_eps=1e-5, sliding_window=None, tie_word_embeddings=False)),
 "mixtral-style-moe": ("mixtral", dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=16, num_attention_heads=16,
     num_key_value_heads=4, vocab_size=32000, num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=32768,
     rope_theta=1000000.0, sliding_window=None, tie_word_embeddings=False)),
}

def main():
    out = sys.argv[1]
    layers = int(sys.argv[sys.argv.index("--layers") + 1]) if "--layers" in sys.argv else 2
    inference = "--inference" in sys.argv
    only = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else list(NAMED)
    H.register_attention(); H.device_like_masks(); H.fake_friendly_init()
    F.dropout = H.cuda_dropout; torch.nn.functional.dropout = H.cuda_dropout
    F.scaled_dot_product_attention = H.cuda_sdpa; torch.nn.functional.scaled_dot_product_attention = H.cuda_sdpa
    import torch.optim.adam as adam_module
    adam_module._get_value = lambda x: 2.0 if isinstance(x, torch.Tensor) else x
    if inference:
        grid = [dict(batch=1, seq=4096, dtype="bf16", attention="sdpa", logits="last"),
                dict(batch=2, seq=2048, dtype="bf16", attention="eager", logits="last"),
                dict(batch=4, seq=1024, dtype="f16", attention="sdpa", logits="all")]
    else:
        grid = [dict(batch=1, seq=4096, precision="mixed", attention="sdpa", checkpointing="none", kernel="foreach"),
                dict(batch=1, seq=4096, precision="mixed", attention="eager", checkpointing="none", kernel="foreach"),
                dict(batch=2, seq=2048, precision="amp", attention="sdpa", checkpointing="none", kernel="foreach"),
                dict(batch=4, seq=1024, precision="pure", attention="flash", checkpointing="full", kernel="fused"),
                dict(batch=1, seq=2048, precision="fp32", attention="sdpa", checkpointing="selective", kernel="per-tensor"),
                dict(batch=8, seq=512, precision="amp", attention="eager", checkpointing="full", kernel="foreach")]
    with open(out, "a") as f:
        for name in only:
            mt, kw = NAMED[name]
            kw = dict(kw, num_hidden_layers=layers)
            saved = H.memplan_config(mt, kw)
            for s in grid:
                s = dict(s)
                if mt == "gemma2" and s["attention"] == "sdpa":
                    s["attention"] = "eager"
                if s.get("precision") == "fp32" and s["attention"] == "flash":
                    s["attention"] = "sdpa"
                H.SDPA_CHOICES.clear()
                t0 = time.time()
                try:
                    st = H.infer_run(mt, kw, **s) if inference else H.train_run(mt, kw, memtracker=False, **s)
                except Exception as e:
                    print(name, s, "FAILED", type(e).__name__, e, file=sys.stderr); continue
                st.pop("phase_peaks", None)
                row = dict(model_type=mt, name=name, config=saved, **s, sdpa_kernels=dict(H.SDPA_CHOICES), **st,
                           seconds=round(time.time() - t0, 2))
                f.write(json.dumps(row, sort_keys=True) + "\n"); f.flush()
                print(name, s, st["peak_bytes"], st["peak_phase"], round(time.time() - t0, 1), file=sys.stderr)

main()
