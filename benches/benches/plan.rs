//! Graph planning benchmarks, one case per corpus graph (drop a graph into
//! `testdata/graphs/json` and it becomes a case), throughput in nodes.
//!
//! `plan/given/<graph>`: the default plan (given order, views and in place, `auto`
//! placement). `plan/memory/<graph>`: the same with the memory-aware schedule, for the
//! largest graphs. `plan/memory-xla/<graph>`: the memory-aware schedule on each XLA graph
//! (`testdata/xla/graphs`, XLA's default order) as `memplan plan G --schedule memory
//! --caller-inputs --caller-outputs --align 64` plans it. `plan/memory-training/<graph>`:
//! training-shaped graphs (a forward joined with a backward mirrored from it,
//! `memplan_benches::training_shaped`), up to 19,800 nodes. Every plan is checked by the
//! plan verifier before it is timed. `cargo xtask order-report` prints the arenas beside
//! XLA's figures.
//!
//! ```text
//! cargo bench -p memplan-benches --bench plan [-- FILTER]
//! ```

#![allow(
    missing_docs,
    reason = "`criterion_group!` defines a public function with no doc comment"
)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use memplan_benches::training_shaped;
use memplan_ir::GraphError as _;
use memplan_ir::{DType, Graph};
use memplan_planner::{PlanOptions, ScheduleMode, plan_forward_backward, plan_graph, verify_plan};

fn corpus() -> Vec<(String, Graph)> {
    graphs_in("graphs/json")
}

/// The graphs in `testdata/<dir>`, by file name.
fn graphs_in(dir: &str) -> Vec<(String, Graph)> {
    memplan_benches::load_graphs(dir, "").unwrap_or_else(|e| panic!("{e}"))
}

/// Plans once and panics unless the plan passes the verifier.
fn check(name: &str, graph: &Graph, options: &PlanOptions) {
    let plan =
        plan_graph(graph, options).unwrap_or_else(|e| panic!("{name}: {}", e.with_graph(graph)));
    if let Err(e) = verify_plan(graph, &plan) {
        panic!(
            "{name}: the plan fails the verifier: {}",
            e.with_graph(graph)
        );
    }
}

fn bench_plan(c: &mut Criterion) {
    let graphs = corpus();
    let mut group = c.benchmark_group("plan/given");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    let options = PlanOptions::default();
    for (name, graph) in &graphs {
        check(name, graph, &options);
        group.throughput(Throughput::Elements(graph.nodes().len() as u64));
        group.bench_function(name.as_str(), |b| {
            b.iter(|| plan_graph(black_box(graph), &options))
        });
    }
    group.finish();

    let mut group = c.benchmark_group("plan/memory");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    let memory = PlanOptions::default().with_schedule(ScheduleMode::Memory);
    for (name, graph) in graphs.iter().filter(|(n, _)| {
        n.starts_with("sd15_unet_b1")
            || n.starts_with("smollm")
            || n.starts_with("light_inception_v1")
    }) {
        check(name, graph, &memory);
        group.throughput(Throughput::Elements(graph.nodes().len() as u64));
        group.bench_function(name.as_str(), |b| {
            b.iter(|| plan_graph(black_box(graph), &memory))
        });
    }
    group.finish();
}

fn bench_memory_xla(c: &mut Criterion) {
    let mut group = c.benchmark_group("plan/memory-xla");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    let options = memplan_benches::xla_options();
    for (name, graph) in graphs_in("xla/graphs")
        .iter()
        .filter(|(n, _)| !n.ends_with("_xlamem"))
    {
        check(name, graph, &options);
        group.throughput(Throughput::Elements(graph.nodes().len() as u64));
        group.bench_function(name.as_str(), |b| {
            b.iter(|| plan_graph(black_box(graph), &options))
        });
    }
    group.finish();
}

fn bench_memory_training(c: &mut Criterion) {
    let mut group = c.benchmark_group("plan/memory-training");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(3));
    let options = PlanOptions::default()
        .with_inputs_in_arena(false)
        .with_outputs_in_arena(false);
    let mut forwards: Vec<(String, Graph)> = corpus()
        .into_iter()
        .filter(|(n, _)| n == "smollm_135m_b1" || n == "sd15_unet_b1")
        .map(|(n, g)| (format!("{n}_train"), g))
        .collect();
    if let Ok(g) = training_shaped::transformer(600, 2048, 512, 512, 8, DType::BF16) {
        forwards.push(("tfm600_train".to_owned(), g));
    }
    let memory = options.clone().with_schedule(ScheduleMode::Memory);
    for (name, forward) in &forwards {
        let Ok(backward) = training_shaped::backward_of(forward) else {
            continue;
        };
        let joint = plan_forward_backward(forward, &backward, &options)
            .unwrap_or_else(|e| panic!("{name}: {}", e.with_graph(forward)))
            .joint;
        check(name, &joint, &memory);
        group.throughput(Throughput::Elements(joint.nodes().len() as u64));
        group.bench_function(name.as_str(), |b| {
            b.iter(|| plan_graph(black_box(&joint), &memory))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_plan, bench_memory_xla, bench_memory_training);
criterion_main!(benches);
