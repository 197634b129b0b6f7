//! Graph planning benchmarks, one case per corpus graph (drop a graph into
//! `testdata/graphs/json` and it becomes a case), throughput in nodes.
//!
//! `plan/given/<graph>`: the default plan (given order, views and in place, `auto`
//! placement). `plan/memory/<graph>`: the same with the memory-aware schedule, for the
//! largest graphs. Every plan is checked by the plan verifier before it is timed.
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
use memplan_ir::Graph;
use memplan_planner::{PlanOptions, ScheduleMode, plan_graph, verify_plan};

fn corpus() -> Vec<(String, Graph)> {
    let dir = memplan_benches::testdata().join("graphs/json");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    paths.sort();
    paths
        .into_iter()
        .filter_map(|p| {
            let name = p.file_stem()?.to_string_lossy().into_owned();
            match Graph::load_json(&p) {
                Ok(g) => Some((name, g)),
                Err(e) => {
                    eprintln!("skipping {name}: {e}");
                    None
                }
            }
        })
        .collect()
}

/// Plans once and panics unless the plan passes the verifier.
fn check(name: &str, graph: &Graph, options: &PlanOptions) {
    let plan = plan_graph(graph, options).unwrap_or_else(|e| panic!("{name}: {e}"));
    if let Err(e) = verify_plan(graph, &plan) {
        panic!("{name}: the plan fails the verifier: {e}");
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
    let memory = PlanOptions {
        schedule: ScheduleMode::Memory,
        ..PlanOptions::default()
    };
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

criterion_group!(benches, bench_plan);
criterion_main!(benches);
