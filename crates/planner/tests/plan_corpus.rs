//! The planner on every corpus graph: every plan passes the verifier, and the figures meet
//! the targets (placement within 2% of the lower bound, aliasing never raising the bound,
//! the memory schedule never worse than the given order).

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use memplan_ir::GraphError as _;
use memplan_ir::{Graph, NodeId};
use memplan_planner::{
    Plan, PlanError, PlanOptions, ScheduleMode, peak_bytes, plan_graph, verify_plan,
};

fn graphs_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/graphs")
}

fn corpus() -> Vec<(String, Graph)> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(graphs_dir().join("json"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    assert_eq!(paths.len(), 32);
    paths
        .into_iter()
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            let graph = Graph::load_json(&p).unwrap_or_else(|e| panic!("{name}: {e}"));
            (name, graph)
        })
        .collect()
}

/// summary.csv: graph name -> (lower_bound_bytes, naive_bytes).
fn summary() -> BTreeMap<String, (u64, u64)> {
    common::csv::two_columns(
        &graphs_dir().join("summary.csv"),
        "lower_bound_bytes",
        "naive_bytes",
    )
}

fn plan_ok(name: &str, graph: &Graph, options: &PlanOptions) -> Plan {
    let plan = plan_graph(graph, options).unwrap_or_else(|e| panic!("planning {name}: {e}"));
    if let Err(problems) = verify_plan(graph, &plan) {
        panic!(
            "plan of {name} fails the verifier: {}",
            problems.with_graph(graph)
        );
    }
    plan
}

#[test]
fn lifetimes_reproduce_the_corpus_lower_bounds() {
    let summary = summary();
    common::fixtures::each(corpus(), |name, graph| {
        let options = PlanOptions::default().with_alignment(1).without_aliasing();
        let given: Vec<NodeId> = graph.nodes().iter_enumerated().map(|(n, _)| n).collect();
        let (lb, _) = summary[&name];
        assert_eq!(peak_bytes(&graph, &given, &options).unwrap(), lb, "{name}");
    });
}

#[test]
fn placement_without_aliasing_is_within_two_percent_of_the_lower_bound() {
    let summary = summary();
    let mut log_sum = 0.0f64;
    let mut count = 0u32;
    common::fixtures::each(corpus(), |name, graph| {
        // A generous search budget: in release builds every graph is placed within 0.2% of
        // its bound in a few milliseconds; debug builds are slower.
        let options = PlanOptions::default()
            .with_solve_time_limit(Duration::from_millis(500))
            .without_aliasing();
        let plan = plan_ok(&name, &graph, &options);
        let ratio = plan.arena_bytes as f64 / plan.lower_bound_bytes as f64;
        assert!(plan.arena_bytes >= plan.lower_bound_bytes, "{name}");
        assert!(
            ratio <= 1.02,
            "{name}: arena {} is {ratio} x the bound {}",
            plan.arena_bytes,
            plan.lower_bound_bytes
        );
        assert!(
            plan.lower_bound_bytes >= summary[&name].0,
            "{name}: alignment only adds"
        );
        assert_eq!(plan.stats.views + plan.stats.inplace, 0);
        log_sum += ratio.ln();
        count += 1;
    });
    let mean = (log_sum / f64::from(count)).exp();
    assert!(mean <= 1.002, "geometric mean arena/bound {mean}");
}

#[test]
fn aliasing_never_raises_the_bound_and_lowers_it_where_it_applies() {
    let summary = summary();
    let mut below = 0;
    common::fixtures::each(corpus(), |name, graph| {
        let plan = plan_ok(&name, &graph, &PlanOptions::default());
        assert!(
            plan.lower_bound_bytes <= plan.stats.unaliased_lower_bound,
            "{name}"
        );
        assert!(plan.arena_bytes >= plan.lower_bound_bytes, "{name}");
        if plan.arena_bytes < summary[&name].0 {
            below += 1;
        }
    });
    // Views and in-place writes (elementwise and row-wise) take 23 of the 32 graphs below
    // the no-aliasing bound; the others peak where no op can alias (a Conv or MatMul reading
    // one big tensor into another, a graph output), or are so small that 256-byte alignment
    // costs more (silero_vad).
    assert!(
        below >= 23,
        "only {below} graphs below the no-aliasing bound"
    );
}

#[test]
fn the_memory_schedule_is_never_worse_than_the_given_order() {
    let mut improved = 0;
    common::fixtures::each(corpus(), |name, graph| {
        let options = PlanOptions::default().with_schedule(ScheduleMode::Memory);
        let plan = plan_ok(&name, &graph, &options);
        let choice = &plan.stats.schedule;
        assert!(choice.peak <= choice.given_peak, "{name}: {choice:?}");
        assert!(
            0 < choice.any_order_bound && choice.any_order_bound <= choice.peak,
            "{name}: {choice:?}"
        );
        assert_eq!(plan.lower_bound_bytes, choice.peak, "{name}");
        if choice.peak < choice.given_peak {
            improved += 1;
        }
    });
    assert!(improved >= 1);
}

#[test]
fn symbolic_graphs_plan_for_each_binding() {
    let dir = graphs_dir().join("dynamic/json");
    for file in [
        "bert_base",
        "gpt2",
        "smp_unet_resnet34",
        "tv_mobilenet_v3_large",
        "vit_base_patch16_224",
    ] {
        let graph = Graph::load_json(&dir.join(format!("{file}.json"))).unwrap();
        let err = plan_graph(&graph, &PlanOptions::default()).unwrap_err();
        assert!(
            matches!(&err, PlanError::UnboundSymbol { symbol, .. } if symbol == "batch" || symbol == "seq"),
            "{file}: {err}"
        );
        let mut arenas = Vec::new();
        for batch in [1, 2] {
            let mut values = vec![("batch", batch)];
            if graph.find_symbol("seq").is_some() {
                values.push(("seq", 32));
            }
            let bindings = graph.bind(&values).unwrap();
            let plan = plan_ok(
                file,
                &graph,
                &PlanOptions::default().with_bindings(bindings),
            );
            arenas.push(plan.arena_bytes);
        }
        assert!(arenas[1] > arenas[0], "{file}: {arenas:?}");
    }
}

#[test]
fn plans_are_deterministic() {
    let graphs = corpus()
        .into_iter()
        .filter(|(n, _)| n.starts_with("light_inception") || n.starts_with("bert_base_b1"))
        .collect::<Vec<_>>();
    common::fixtures::each(graphs, |name, graph| {
        let options = PlanOptions::default().with_solve_time_limit(Duration::ZERO);
        let a = plan_ok(&name, &graph, &options).to_json(&graph);
        let b = plan_ok(&name, &graph, &options).to_json(&graph);
        assert_eq!(a, b, "{name}");
    });
}

/// Row-wise in place and Concat elision never cost bytes: on every corpus graph, with
/// several option sets, the arena is never above the plan made with both off (row-wise ops
/// made opaque, elision off); and with them, SD 1.5's UNet is at least 45% below its
/// no-aliasing bound, the ResNet-34 U-Net at least 12%.
#[test]
fn row_wise_and_concat_elision_never_cost_bytes() {
    let summary = summary();
    let without = memplan_ir::OpTable::default().without(&memplan_ir::OpRule::RowWise);
    let option_sets = [
        PlanOptions::default(),
        PlanOptions::default()
            .with_schedule(ScheduleMode::Memory)
            .with_alignment(64),
        PlanOptions::default()
            .with_alignment(1)
            .with_inputs_in_arena(false)
            .with_outputs_in_arena(false),
        PlanOptions::default()
            .with_inplace_over_inputs(true)
            .with_views(false),
    ];
    common::fixtures::each(corpus(), |name, graph| {
        for options in &option_sets {
            let with = plan_ok(&name, &graph, options);
            let plain = plan_ok(
                &name,
                &graph,
                &options
                    .clone()
                    .with_op_table(without.clone())
                    .with_concat_elision(false),
            );
            assert!(
                with.arena_bytes <= plain.arena_bytes,
                "{name}: {} > {} with {options:?}",
                with.arena_bytes,
                plain.arena_bytes
            );
        }
        let saving = |min: f64| {
            let plan = plan_ok(&name, &graph, &PlanOptions::default());
            let bound = summary[&name].0 as f64;
            let saving = 1.0 - plan.arena_bytes as f64 / bound;
            assert!(
                saving >= min,
                "{name}: {saving:.4} below the no-aliasing bound"
            );
        };
        match name.as_str() {
            "sd15_unet_b1" | "sd15_unet_b2" => saving(0.45),
            "smp_unet_resnet34_b1" => saving(0.12),
            _ => {}
        }
    });
}
