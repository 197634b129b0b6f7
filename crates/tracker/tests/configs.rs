//! Every architecture against `transformers` itself: the configs in
//! `testdata/configs/generated/` were written by `save_pretrained` and counted by
//! instantiating each model on the meta device (`testdata/configs/gen_configs.py`), so the
//! expected figures come from the library's modeling code, not from memplan's rules. The
//! hand-written published configs in `testdata/configs/` are counted by the same script and
//! checked against the totals their authors published.

use std::path::PathBuf;

use memplan_ir::DType;
use memplan_tracker::estimate::{Runtime, TransformerConfig, Workload, estimate};
use serde_json::Value;

fn testdata(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(path)
}

fn expected() -> Value {
    let text = std::fs::read_to_string(testdata("configs/generated/expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn read(path: &str) -> TransformerConfig {
    let text = std::fs::read_to_string(testdata(path)).unwrap();
    TransformerConfig::from_hf_json(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// What transformers says about one config, checked field by field.
fn check(name: &str, config: &TransformerConfig, want: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let total = want["parameters"].as_u64().unwrap();
    let got = config.parameters().unwrap();
    if got != total {
        problems.push(format!("{name}: parameters {got}, transformers {total}"));
    }
    // Active parameters: the routed experts of each sparse layer count for
    // experts_per_token of experts.
    let routed: Vec<u64> = want["routed_expert_parameters_per_moe_layer"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    if !routed.is_empty() {
        let experts = want["experts"].as_u64().unwrap();
        let moe = config.moe.as_ref().unwrap();
        let per_token = want["experts_per_token"]
            .as_u64()
            .unwrap_or(moe.experts_per_token);
        // A router asked for more experts than there are sends each token to all of them.
        let inactive: u64 = routed
            .iter()
            .map(|r| r / experts * (experts - per_token.min(experts)))
            .sum();
        let active = config.active_parameters().unwrap();
        if active != total - inactive {
            problems.push(format!(
                "{name}: active {active}, transformers' experts give {}",
                total - inactive
            ));
        }
        let sparse = moe.sparse_layers.iter().filter(|&&s| s).count();
        if sparse != routed.len() {
            problems.push(format!(
                "{name}: {sparse} sparse layers, transformers {}",
                routed.len()
            ));
        }
    }
    // KV cache floats per token and layer: K plus V of the library's cache, or MLA's latent
    // (what serving engines cache).
    if config.architecture.is_decoder() {
        let kv = &want["kv_floats_per_token_per_layer"];
        let floats = match kv.get("latent") {
            Some(latent) => latent.as_u64().unwrap(),
            None => kv["k"].as_u64().unwrap() + kv["v"].as_u64().unwrap(),
        };
        let per_token = config.kv_bytes_per_token(DType::U8).unwrap();
        if per_token != floats * config.layers {
            problems.push(format!(
                "{name}: {per_token} KV elements a token, transformers {}",
                floats * config.layers
            ));
        }
    }
    // Sliding layers, where the config lists them.
    if let Some(windows) = want["layer_windows"].as_array() {
        let mine: Vec<Option<u64>> = (0..config.layers).map(|i| config.layer_window(i)).collect();
        let theirs: Vec<Option<u64>> = windows.iter().map(Value::as_u64).collect();
        if mine != theirs {
            problems.push(format!("{name}: windows {mine:?}, transformers {theirs:?}"));
        }
    }
    problems
}

#[test]
fn every_generated_config_matches_transformers() {
    let expected = expected();
    let small = expected["small"].as_object().unwrap();
    assert!(small.len() >= 50, "{} generated configs", small.len());
    let mut problems = Vec::new();
    let mut types = std::collections::BTreeSet::new();
    for (name, want) in small {
        // A refusal is a problem like any other, listed with the rest.
        let path = format!("configs/generated/{name}.json");
        let text = std::fs::read_to_string(testdata(&path)).unwrap();
        let config = match TransformerConfig::from_hf_json(&text) {
            Ok(c) => c,
            Err(e) => {
                problems.push(format!("{name}: refused: {e}"));
                continue;
            }
        };
        types.insert(config.architecture.name());
        problems.extend(check(name, &config, want));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // Every architecture memplan reads is among them.
    assert_eq!(types.len(), 20, "{types:?}");
}

#[test]
fn published_configs_match_transformers_and_the_published_totals() {
    let expected = expected();
    let published = expected["published"].as_object().unwrap();
    let mut problems = Vec::new();
    for (name, want) in published {
        let config = read(&format!("configs/{name}.json"));
        problems.extend(check(name, &config, want));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The totals and active counts their authors published.
    for (name, total, active) in [
        ("llama-3-8b", 8_030_261_248, None),
        ("llama-3.1-70b", 70_553_706_496, None),
        ("qwen2.5-7b", 7_615_616_512, None),
        ("mixtral-8x7b", 46_702_792_704, Some(12_879_925_248)),
        ("gemma-2-9b", 9_241_705_984, None),
        ("phi-3-mini-4k", 3_821_079_552, None),
        ("deepseek-v2-lite", 15_706_484_224, None),
        ("qwen1.5-moe-a2.7b", 14_315_784_192, None),
        ("falcon-7b", 6_921_720_704, None),
    ] {
        let config = read(&format!("configs/{name}.json"));
        assert_eq!(config.parameters().unwrap(), total, "{name}");
        if let Some(active) = active {
            assert_eq!(config.active_parameters().unwrap(), active, "{name}");
        }
    }
}

#[test]
fn gemma3_multimodal_configs_count_the_vision_tower() {
    // gemma-3-4b's text_config leaves heads, head_dim and vocabulary at the library's
    // defaults (8 heads, 4 key/value heads of 256, 262,208 words).
    let c = read("configs/gemma-3-4b.json");
    assert_eq!(
        (c.layers, c.hidden, c.heads, c.kv_heads, c.head_dim),
        (34, 2560, 8, 4, 256)
    );
    assert_eq!(c.vocab, 262_208);
    // SigLIP at 896 px in 14 px patches, 27 layers of 1152, by hand: patch conv 678,528,
    // positions 4,718,592, layers 27 × 15,239,504, post-norm 2,304; projector 2,950,272.
    let tower = 678_528 + 4_718_592 + 27 * 15_239_504 + 2_304 + 2_950_272;
    let mut text = c.clone();
    text.vision_tower = None;
    assert_eq!(c.parameters().unwrap() - text.parameters().unwrap(), tower);
    assert_eq!(c.parameters().unwrap(), 4_300_079_472);
}

#[test]
fn kv_cache_per_architecture() {
    // The KV cache a serving engine keeps (the fused runtime's accounting: a sliding layer
    // holds its window; transformers' prefill holds whole concatenations).
    let bf16 = |name: &str, seq: u64| {
        let c = read(&format!("configs/{name}.json"));
        let w = Workload::inference(1, seq, DType::BF16).with_runtime(Some(Runtime::Fused));
        estimate(&c, &w).unwrap()
    };
    // Llama-3-8B: 2 × 32 layers × 8 heads × 128 × 2 bytes = 128 KiB a token.
    assert_eq!(bf16("llama-3-8b", 1).kv_bytes_per_token, 128 << 10);
    // Falcon-7B is multi-query: one K/V head of 64 on 32 layers.
    assert_eq!(bf16("falcon-7b", 1).kv_bytes_per_token, 2 * 32 * 64 * 2);
    // DeepSeek-V2-Lite caches the 512 + 64 latent on 27 layers.
    assert_eq!(bf16("deepseek-v2-lite", 1).kv_bytes_per_token, 576 * 27 * 2);
    // Gemma-2-9B at 8192 tokens: 21 global layers hold 8192, 21 sliding ones 4096.
    let g = bf16("gemma-2-9b", 8192);
    let per_layer = 2 * 8 * 256 * 2;
    assert_eq!(g.kv_cache_bytes, (21 * 8192 + 21 * 4096) * per_layer);
    // Mistral-7B v0.1's window of 4096 caps every layer.
    let m = bf16("mistral-7b", 8192);
    assert_eq!(m.kv_cache_bytes, 4096 * 32 * 2 * 8 * 128 * 2);
    // An fp8 cache is half of bf16's.
    let c = read("configs/llama-3-8b.json");
    let mut w = Workload::inference(1, 100, DType::BF16);
    w.kv_dtype = Some(DType::F8E4M3);
    assert_eq!(estimate(&c, &w).unwrap().kv_bytes_per_token, 64 << 10);
}
