//! Training-step benchmarks: `training/plan/vit_b16` plans the step derived from ViT-B/16's
//! forward graph (`plan --training adamw`, target under 1 s); `training/auto/sd15_unet_b1`
//! runs the checkpoint search under a budget on the 1,571-node SD 1.5 UNet forward graph
//! (`--checkpoint auto`, target under 5 s). Every step is checked by the plan verifier once,
//! outside the timing.
//!
//! ```text
//! cargo bench -p memplan-benches --bench training [-- FILTER]
//! ```

#![allow(
    missing_docs,
    reason = "`criterion_group!` defines a public function with no doc comment"
)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use memplan_ir::Graph;
use memplan_ir::GraphError as _;
use memplan_planner::{Checkpoint, TrainingOptions, plan_training, verify_plan};

fn load(path: &str) -> Graph {
    let p = memplan_benches::testdata().join(path);
    memplan_onnx::load(&p, &memplan_onnx::ImportOptions::default())
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn check(name: &str, graph: &Graph, options: &TrainingOptions) {
    let step =
        plan_training(graph, options).unwrap_or_else(|e| panic!("{name}: {}", e.with_graph(graph)));
    if let Err(e) = verify_plan(&step.graph, &step.plan) {
        panic!(
            "{name}: the plan fails the verifier: {}",
            e.with_graph(&step.graph)
        );
    }
}

fn bench_training(c: &mut Criterion) {
    let vit = load("training/vit_b16/forward.onnx");
    let options = TrainingOptions::default();
    check("vit_b16", &vit, &options);
    let mut group = c.benchmark_group("training/plan");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(3));
    group.throughput(Throughput::Elements(vit.nodes().len() as u64));
    group.bench_function("vit_b16", |b| {
        b.iter(|| plan_training(black_box(&vit), &options))
    });
    group.finish();

    let unet = load("graphs/onnx/sd15_unet_b1.onnx");
    // 19.5 GB: the step without recomputation needs 19.9 GB (13.75 GB of it the persistent
    // AdamW state), so the search must recompute.
    let auto = TrainingOptions::default().with_checkpoint(Checkpoint::Auto {
        budget: 19_500_000_000,
    });
    check("sd15_unet_b1", &unet, &auto);
    let mut group = c.benchmark_group("training/auto");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Elements(unet.nodes().len() as u64));
    group.bench_function("sd15_unet_b1", |b| {
        b.iter(|| plan_training(black_box(&unet), &auto))
    });
    group.finish();
}

criterion_group!(benches, bench_training);
criterion_main!(benches);
