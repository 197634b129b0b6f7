//! The estimator against ground truth: published parameter counts, the weights of the corpus
//! graphs exported from the same configs, and the planner's arena for those graphs.

use std::path::PathBuf;

use memplan_ir::{DType, Graph, TensorKind};
use memplan_planner::{PlanOptions, plan_graph, verify_plan};
use memplan_tracker::estimate::{
    AttentionImpl, Checkpointing, EstimateError, Logits, Optimizer, OptimizerKernel, Precision,
    Runtime, Training, TransformerConfig, Workload, estimate,
};

fn testdata(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(path)
}

fn config(name: &str) -> TransformerConfig {
    let text = std::fs::read_to_string(testdata(&format!("configs/{name}.json"))).unwrap();
    TransformerConfig::from_hf_json(&text).unwrap()
}

#[test]
fn parameter_counts_match_the_published_totals() {
    for (name, expected) in [
        ("gpt2", 124_439_808),
        ("llama-2-7b", 6_738_415_616),
        ("mistral-7b", 7_241_732_096),
        ("qwen2-0.5b", 494_032_768),
        ("smollm-135m", 134_515_008),
        ("bert-base-uncased", 109_482_240),
        ("vit-base-patch16-224", 86_567_656),
    ] {
        assert_eq!(config(name).parameters().unwrap(), expected, "{name}");
    }
}

/// Float elements of a graph's weights that are parameters: every float weight except
/// scalars (folded constants such as a softmax scale), the `[hidden, vocab]` transposed copy
/// the exporter folds for a tied output head (it multiplies by the token embedding's
/// transpose; the embedding itself is the `[vocab, hidden]` weight), and tables the static
/// export folded at the traced sequence length (`[1, 1, seq, _]`: causal masks and rotary
/// cos/sin, computed from no parameter).
fn parameter_elements(graph: &Graph, tied_vocab: Option<u64>) -> u64 {
    graph
        .tensors()
        .iter()
        .filter(|t| t.kind == TensorKind::Weight && t.dtype.is_float())
        .filter_map(|t| t.static_dims())
        .filter(|dims| !dims.is_empty())
        .filter(|dims| !(dims.len() == 4 && dims[0] == 1 && dims[1] == 1))
        .filter(|dims| !(dims.len() == 2 && tied_vocab == Some(dims[1])))
        .map(|dims| dims.iter().product::<u64>())
        .sum()
}

#[test]
fn parameter_counts_match_the_corpus_weights() {
    for (graph, cfg, tied_vocab) in [
        ("graphs/dynamic/json/gpt2.json", "gpt2", Some(50_257)),
        (
            "graphs/dynamic/json/bert_base.json",
            "bert-base-uncased",
            None,
        ),
        (
            "graphs/dynamic/json/vit_base_patch16_224.json",
            "vit-base-patch16-224",
            None,
        ),
        (
            "graphs/json/smollm_135m_b1.json",
            "smollm-135m",
            Some(49_152),
        ),
    ] {
        let g = Graph::load_json(&testdata(graph)).unwrap();
        assert_eq!(
            parameter_elements(&g, tied_vocab),
            config(cfg).parameters().unwrap(),
            "{graph}"
        );
    }
}

/// One comparison point: the planner's arena of a corpus graph and the estimator's
/// inference activation peak at the same batch and sequence length, in f32 like the graphs.
fn compare(graph: &Graph, cfg: &TransformerConfig, batch: u64, seq: Option<u64>) -> (u64, u64) {
    let mut dims = Vec::new();
    if graph.find_symbol("batch").is_some() {
        dims.push(("batch", batch));
    }
    if let (Some(s), Some(_)) = (seq, graph.find_symbol("seq")) {
        dims.push(("seq", s));
    }
    let options = PlanOptions::default().with_bindings(graph.bind(&dims).unwrap());
    let plan = plan_graph(graph, &options).unwrap();
    verify_plan(graph, &plan).unwrap();
    // The exported graphs compute logits for every position (they score sequences; a
    // generation loop would take the last row only).
    // memplan's own plan is the arena runtime: the fused runtime's inference figure, eager
    // attention as the exports compute it.
    let workload = Workload::inference(batch, seq.unwrap_or(1), DType::F32)
        .with_logits(Logits::All)
        .with_runtime(Some(Runtime::Fused))
        .with_attention(AttentionImpl::Eager);
    let e = estimate(cfg, &workload).unwrap();
    (plan.arena_bytes, e.activation_bytes)
}

/// The estimator's activation peak is within 5% of the planner's arena for every
/// transformer in the corpus, over batches 1-16 and sequence lengths 64-512. The printed
/// table (`--nocapture`) is the accuracy report.
#[test]
fn activation_estimate_tracks_the_planner_arena() {
    let cases: [(&str, &str, &[Option<u64>]); 4] = [
        (
            "graphs/dynamic/json/gpt2.json",
            "gpt2",
            &[Some(64), Some(128), Some(512)],
        ),
        (
            "graphs/dynamic/json/bert_base.json",
            "bert-base-uncased",
            &[Some(64), Some(128), Some(512)],
        ),
        (
            "graphs/dynamic/json/vit_base_patch16_224.json",
            "vit-base-patch16-224",
            &[None],
        ),
        (
            "graphs/json/smollm_135m_b1.json",
            "smollm-135m",
            &[Some(256)],
        ),
    ];
    let mut worst: f64 = 0.0;
    println!(
        "{:<28} {:>5} {:>5} {:>14} {:>14} {:>8}",
        "graph", "batch", "seq", "arena", "estimate", "error"
    );
    for (path, cfg, seqs) in cases {
        let graph = Graph::load_json(&testdata(path)).unwrap();
        let cfg = config(cfg);
        let batches: &[u64] = if graph.find_symbol("batch").is_some() {
            &[1, 4, 16]
        } else {
            &[1]
        };
        for &seq in seqs {
            for &batch in batches {
                let (arena, est) = compare(&graph, &cfg, batch, seq);
                let error = (est as f64 - arena as f64) / arena as f64;
                worst = worst.max(error.abs());
                println!(
                    "{:<28} {:>5} {:>5} {:>14} {:>14} {:>+7.1}%",
                    graph.name,
                    batch,
                    seq.unwrap_or(cfg.fixed_sequence().unwrap_or(0)),
                    arena,
                    est,
                    100.0 * error
                );
            }
        }
    }
    assert!(worst < 0.05, "worst relative error {worst}");
}

#[test]
fn mixed_precision_adam_is_sixteen_bytes_per_parameter() {
    let cfg = config("llama-2-7b");
    let mut w = Workload::inference(1, 4096, DType::BF16);
    w.training = Some(
        Training::new(Optimizer::AdamW)
            .with_precision(Precision::Mixed)
            .with_kernel(OptimizerKernel::Fused)
            .with_checkpointing(Checkpointing::Full),
    );
    let e = estimate(&cfg, &w).unwrap();
    assert_eq!(e.weights_bytes, 2 * 6_738_415_616);
    assert_eq!(e.gradients_bytes, 2 * 6_738_415_616);
    assert_eq!(e.optimizer_bytes, 12 * 6_738_415_616);
    assert_eq!(e.kv_cache_bytes, 0);
    // Llama-2-7B at 4096 tokens in bf16: 2 GiB of KV cache per sequence.
    let serve = estimate(&cfg, &Workload::inference(1, 4096, DType::BF16)).unwrap();
    assert_eq!(serve.kv_cache_bytes, 2 << 30);
    // Mistral's grouped-query attention (8 of 32 heads) makes it a quarter (4096 tokens
    // is also its sliding window).
    let m = estimate(
        &config("mistral-7b"),
        &Workload::inference(1, 4096, DType::BF16),
    )
    .unwrap();
    assert_eq!(m.kv_cache_bytes, 512 << 20);
    // A context no machine has overflows cleanly.
    let huge = Workload::inference(u64::MAX / 2, 1 << 20, DType::BF16);
    assert!(matches!(
        estimate(&cfg, &huge),
        Err(EstimateError::Overflow { .. })
    ));
}
