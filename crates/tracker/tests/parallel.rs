//! Training and parallel figures against the published formulas they follow: Korthikanti
//! et al. (2022) for activations, DeepSpeed's ZeRO model-state estimators, and plain
//! arithmetic for tensor- and pipeline-parallel shares. The reference formulas here are
//! written from the papers, sharing nothing with the estimator.

use std::path::PathBuf;

use memplan_ir::DType;
use memplan_tracker::estimate::{
    Architecture, AttentionImpl, Checkpointing, Optimizer, OptimizerKernel, Parallelism, Precision,
    Runtime, Training, TransformerConfig, Workload, estimate,
};

fn read(name: &str) -> TransformerConfig {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/configs")
        .join(name);
    TransformerConfig::from_hf_json(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A GPT-3-style model (LayerNorm, 4h GELU MLP, dropout everywhere) of `layers` layers.
fn gpt(layers: u64) -> TransformerConfig {
    let mut c = TransformerConfig::new(Architecture::Gpt2);
    c.layers = layers;
    c.hidden = 1024;
    c.heads = 16;
    c.intermediate = 4096;
    c.vocab = 64;
    c.learned_positions = 2048;
    c.attention_dropout = true;
    c.hidden_dropout = true;
    c.finish().unwrap()
}

fn training_activations(layers: u64, s: u64, b: u64, tp: u64, sp: bool, ck: Checkpointing) -> u64 {
    let mut w = Workload::inference(b, s, DType::BF16);
    w.runtime = Some(Runtime::Fused);
    w.attention = AttentionImpl::Eager;
    w.training = Some(
        Training::new(Optimizer::AdamW)
            .with_precision(Precision::Mixed)
            .with_kernel(OptimizerKernel::Fused)
            .with_checkpointing(ck),
    );
    w.parallel = Parallelism::default()
        .with_tp(tp)
        .with_sequence_parallel(sp);
    estimate(&gpt(layers), &w)
        .unwrap()
        .per_device
        .activation_bytes
}

/// Korthikanti et al., section 4: activation bytes of one layer in 16-bit.
fn korthikanti(s: u64, b: u64, h: u64, a: u64, t: u64, sp: bool, ck: Checkpointing) -> u64 {
    let sbh = s * b * h;
    let quadratic = 5 * a * s * s * b / t; // 5as²b / t, the attention core
    match (ck, sp) {
        (Checkpointing::None, false) => sbh * 10 + sbh * 24 / t + quadratic,
        (Checkpointing::None, true) => sbh * 34 / t + quadratic,
        (Checkpointing::Selective, false) => sbh * 10 + sbh * 24 / t,
        (Checkpointing::Selective, true) => sbh * 34 / t,
        (Checkpointing::Full, false) => 2 * sbh,
        (Checkpointing::Full, true) => 2 * sbh / t,
        _ => unreachable!("the paper models none, selective and full recomputation"),
    }
}

#[test]
fn per_layer_training_activations_match_korthikanti() {
    // One more layer adds exactly one layer's saved activations (the head and the
    // backward working set do not change), which is the paper's per-layer figure.
    let (s, b, h, a) = (512, 2, 1024, 16);
    for tp in [1, 2, 4] {
        for sp in [false, true] {
            for ck in [
                Checkpointing::None,
                Checkpointing::Selective,
                Checkpointing::Full,
            ] {
                let one = training_activations(4, s, b, tp, sp, ck);
                let more = training_activations(5, s, b, tp, sp, ck);
                assert_eq!(
                    more - one,
                    korthikanti(s, b, h, a, tp, sp, ck),
                    "tp {tp}, sequence parallel {sp}, {ck:?}"
                );
            }
        }
    }
}

#[test]
fn zero_stages_against_deepspeed_estimators() {
    // Llama-2-7B, mixed-precision AdamW over 8 data-parallel replicas.
    let c = read("llama-2-7b.json");
    let p = c.parameters().unwrap();
    let largest = c.largest_layer_parameters().unwrap();
    let n = 8;
    let state = |zero: u8| {
        let mut w = Workload::inference(1, 128, DType::BF16);
        w.runtime = Some(Runtime::Fused);
        w.attention = AttentionImpl::Eager;
        w.training = Some(
            Training::new(Optimizer::AdamW)
                .with_precision(Precision::Mixed)
                .with_kernel(OptimizerKernel::Fused)
                .with_checkpointing(Checkpointing::Full),
        );
        w.parallel = Parallelism::default().with_dp(n).with_zero(zero);
        let d = estimate(&c, &w).unwrap().per_device;
        d.weights_bytes + d.gradients_bytes + d.optimizer_bytes
    };
    let shard = p.div_ceil(n);
    // The ZeRO paper's stages: 2 + 2 + 12 bytes a parameter, partitioned in turn.
    assert_eq!(state(0), 16 * p);
    assert_eq!(state(1), 4 * p + 12 * shard);
    assert_eq!(state(2), 2 * p + 14 * shard);
    assert_eq!(state(3), 16 * shard + 4 * largest);
    // DeepSpeed's estimate_zero2_model_states_mem_needs (no offload): 4P + 16P/N. It keeps
    // full 16-bit gradients on every device and an fp32 gradient partition; memplan counts
    // the reduced 16-bit partition only: DeepSpeed is 2P + 2P/N above.
    let deepspeed2 = 4 * p + 16 * p / n;
    assert_eq!(deepspeed2 - state(2), 2 * p + 2 * p / n);
    // estimate_zero3_model_states_mem_needs (no offload): 4 × largest layer + 18P/N; the
    // 2 bytes a parameter more are the fp32 gradient partition again.
    let deepspeed3 = 4 * largest + 18 * p / n;
    assert_eq!(deepspeed3 - state(3), 2 * p / n);
}

#[test]
fn tensor_and_pipeline_shares() {
    let c = read("llama-3.1-70b.json");
    let whole = |w: &Workload| estimate(&c, w).unwrap();
    let mut w = Workload::inference(1, 8192, DType::BF16);
    w.runtime = Some(Runtime::Fused);
    w.attention = AttentionImpl::Eager;
    w.parallel.tp = 4;
    let e = whole(&w);
    // Everything but the norms splits four ways: 80 layers × 2 + 1 norms of 8192.
    let norms = (2 * 80 + 1) * 8192;
    assert_eq!(
        e.per_device.weights_bytes,
        2 * ((e.parameters - norms) / 4 + norms)
    );
    // 8 KV heads over 4 devices: 2 each.
    assert_eq!(e.per_device.kv_cache_bytes, 8192 * 80 * 2 * 2 * 128 * 2);
    assert_eq!(e.devices, 4);
    // Pipeline: 80 layers in 3 stages (27, 27, 26; vLLM's order); the first holds the
    // embedding, the last the LM head; the busiest is the answer.
    w.parallel = Parallelism::default().with_pp(3);
    let e = whole(&w);
    let layer = c.layer_parameters(0).unwrap();
    let embedding = 128_256 * 8192;
    let first = 27 * layer + embedding;
    let last = 26 * layer + 8192 + embedding;
    assert_eq!(e.per_device.weights_bytes, 2 * first.max(last));
    // Eight KV heads on 16 devices are replicated: one head each.
    w.parallel = Parallelism::default().with_tp(16);
    assert_eq!(whole(&w).per_device.kv_cache_bytes, 8192 * 80 * 2 * 128 * 2);
    // 64 heads do not split three ways.
    w.parallel.tp = 3;
    assert!(estimate(&c, &w).is_err());
}

#[test]
fn expert_parallelism_spreads_whole_experts() {
    let c = read("mixtral-8x7b.json");
    let mut w = Workload::inference(1, 1024, DType::BF16);
    w.runtime = Some(Runtime::Fused);
    w.attention = AttentionImpl::Eager;
    let whole = estimate(&c, &w).unwrap();
    w.parallel = Parallelism::default().with_tp(8).with_ep(8);
    let e = estimate(&c, &w).unwrap();
    // One whole expert per device on each layer: 3 × 4096 × 14336 × 32 layers.
    let experts = 32 * 8 * 3 * 4096 * 14336u64;
    let dense = whole.parameters - experts;
    let norms = (2 * 32 + 1) * 4096;
    let router = 32 * 8 * 4096;
    let split = dense - norms - router;
    assert_eq!(
        e.per_device.weights_bytes,
        2 * (experts / 8 + split / 8 + norms + router)
    );
}
