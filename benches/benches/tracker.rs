//! Tracker and fit benchmarks.
//!
//! `tracker/uncontended`: one `allocate` + `deallocate` pair on a tracker no other thread
//! touches (target: under 20 ns). `tracker/reserve`: the same through a RAII reservation.
//! `tracker/8-threads`: eight threads each doing allocate + deallocate pairs on one shared
//! tracker; the time is wall time per pair per thread (each thread's ns/op under
//! contention). `fit/<graph>`: `fit_graph` of `batch` on the dynamic corpus graphs (the
//! largest is GPT-2, 638 nodes; target: under 1 s), the answer checked by independent plans
//! at N and N + 1 before it is timed. `llm/estimate/<config>` and `llm/serving/<config>`:
//! reading a Hugging Face config and answering `memplan estimate` (inference, bf16, 4096
//! tokens) or `memplan fit --serving` (80 GiB, tp 4 for the 70B) for the published configs
//! in `testdata/configs` (target, with process start-up: under 50 ms; see
//! docs/MEASUREMENTS.md for whole-process times). `llm/train-hf/<config>`: the heaviest
//! estimate, a training step under the `hf` runtime (AdamW foreach, mixed precision, SDPA,
//! batch 1 × 4096 tokens on one device: the step's tape of allocations and the caching
//! allocator's replay over it).
//!
//! ```text
//! cargo bench -p memplan-benches --bench tracker [-- FILTER]
//! ```

#![allow(
    missing_docs,
    reason = "`criterion_group!` defines a public function with no doc comment"
)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use memplan_ir::{Graph, GraphError as _};
use memplan_planner::{PlanOptions, plan_graph, verify_plan};
use memplan_tracker::{FitRequest, MemoryTracker, Tag, fit_graph, plan_peak};

fn bench_tracker(c: &mut Criterion) {
    let mut group = c.benchmark_group("tracker");
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    let tracker = MemoryTracker::new(1 << 40);
    group.bench_function("uncontended", |b| {
        b.iter(|| {
            tracker.allocate(Tag::Activations, black_box(4096)).unwrap();
            tracker
                .deallocate(Tag::Activations, black_box(4096))
                .unwrap();
        })
    });
    group.bench_function("reserve", |b| {
        b.iter(|| {
            drop(black_box(
                tracker.reserve(Tag::Workspace, black_box(4096)).unwrap(),
            ))
        })
    });
    group.bench_function("8-threads", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            std::thread::scope(|s| {
                for t in 0..8 {
                    let tracker = &tracker;
                    let tag = Tag::ALL[t % Tag::ALL.len()];
                    s.spawn(move || {
                        for _ in 0..iters {
                            tracker.allocate(tag, black_box(4096)).unwrap();
                            tracker.deallocate(tag, black_box(4096)).unwrap();
                        }
                    });
                }
            });
            start.elapsed()
        })
    });
    group.finish();
    assert_eq!(tracker.in_use(), 0);
}

fn bench_fit(c: &mut Criterion) {
    let mut group = c.benchmark_group("fit");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for (model, dims, budget) in [
        ("gpt2", &[("seq", 512)][..], 24u64 << 30),
        ("bert_base", &[("seq", 512)][..], 24 << 30),
        ("smp_unet_resnet34", &[][..], 24 << 30),
    ] {
        let path = memplan_benches::testdata().join(format!("graphs/dynamic/json/{model}.json"));
        let graph = Graph::load_json(&path).unwrap_or_else(|e| panic!("{model}: {e}"));
        let options = PlanOptions::default().with_bindings(graph.bind(dims).unwrap());
        let request = FitRequest::new("batch", budget);
        check(&graph, &options, &request);
        group.bench_function(model, |b| {
            b.iter(|| fit_graph(black_box(&graph), &options, &request).unwrap())
        });
    }
    group.finish();
}

/// The fit's plan passes the verifier, and independent plans at N and N + 1 straddle the
/// budget.
fn check(graph: &Graph, options: &PlanOptions, request: &FitRequest) {
    let fit = fit_graph(graph, options, request).unwrap();
    let n = fit.value.unwrap();
    let batch = graph.find_symbol("batch").unwrap();
    for (value, fits) in [(n, true), (n + 1, false)] {
        let o = options
            .clone()
            .with_bindings(options.bindings.clone().with(batch, value));
        let plan = plan_graph(graph, &o).unwrap_or_else(|e| panic!("{}", e.with_graph(graph)));
        verify_plan(graph, &plan).unwrap_or_else(|e| panic!("{}", e.with_graph(graph)));
        let peak = plan_peak(graph, &plan, false).unwrap();
        assert_eq!(
            peak <= request.budget,
            fits,
            "{}: batch {value}",
            graph.name
        );
    }
}

fn bench_llm(c: &mut Criterion) {
    use memplan_ir::DType;
    use memplan_tracker::estimate::{
        Optimizer, Runtime, Serving, Training, TransformerConfig, Workload, estimate,
        serving_capacity,
    };
    let mut group = c.benchmark_group("llm");
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    for (name, tp) in [
        ("llama-3-8b", 1),
        ("llama-3.1-70b", 4),
        ("mixtral-8x7b", 1),
        ("deepseek-v3", 8),
        ("gemma-2-9b", 1),
    ] {
        let path = memplan_benches::testdata().join(format!("configs/{name}.json"));
        let text = std::fs::read_to_string(&path).unwrap();
        group.bench_function(format!("estimate/{name}"), |b| {
            b.iter(|| {
                let config = TransformerConfig::from_hf_json(black_box(&text)).unwrap();
                estimate(&config, &Workload::inference(1, 4096, DType::BF16)).unwrap()
            })
        });
        group.bench_function(format!("train-hf/{name}"), |b| {
            b.iter(|| {
                let config = TransformerConfig::from_hf_json(black_box(&text)).unwrap();
                let mut w = Workload::inference(1, 4096, DType::BF16);
                w.runtime = Some(Runtime::Hf);
                w.training = Some(Training::new(Optimizer::AdamW));
                estimate(&config, &w).unwrap()
            })
        });
        group.bench_function(format!("serving/{name}"), |b| {
            b.iter(|| {
                let config = TransformerConfig::from_hf_json(black_box(&text)).unwrap();
                let mut w = Workload::inference(1, 4096, DType::BF16);
                w.parallel.tp = tp;
                let serving = Serving::new(80 << 30).with_seq(Some(4096));
                serving_capacity(&config, &w, &serving).unwrap()
            })
        });
    }
}

criterion_group!(benches, bench_tracker, bench_fit, bench_llm);
criterion_main!(benches);
