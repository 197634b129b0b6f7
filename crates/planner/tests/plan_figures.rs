//! A plan's figures are its own (issue 36): `verify_plan_figures` recomputes the arena,
//! weight region, lower bound, naive arena and counts from the plan's buffers, weights and
//! workspaces, and refuses a plan (or a body plan) any of whose figures differs; a lower
//! bound above the arena is refused as such. Every plan the planner's tests make passes it
//! (`common::plan_ok`).

mod common;

use common::body_updates::{Flow, Target, Updater, case};
use common::mutants::{concat_parts, corpus_graph, partial_views};
use common::plan_ok;
use memplan_ir::{DType, Graph, GraphBuilder, TensorKind};
use memplan_planner::{Plan, PlanOptions, PlanViolation, verify_plan_figures};

fn figures(graph: &Graph, plan: &Plan) -> Vec<String> {
    verify_plan_figures(graph, plan)
        .into_iter()
        .map(|v| match v {
            PlanViolation::WrongFigure { figure, .. } => figure.to_owned(),
            PlanViolation::BoundAboveArena { .. } => "bound above arena".to_owned(),
            PlanViolation::InBody { problem, .. } => format!("body: {problem}"),
            other => panic!("{other}"),
        })
        .collect()
}

/// Each figure edited alone is named; the plan itself passes.
#[test]
fn every_edited_figure_is_refused() {
    let graphs = [
        corpus_graph("light_squeezenet_b1"),
        corpus_graph("silero_vad_16k_b1"),
        partial_views(),
        concat_parts(),
    ];
    let mut edits = 0;
    for graph in &graphs {
        let plan = plan_ok(graph, &PlanOptions::default());
        assert!(figures(graph, &plan).is_empty());
        let mut edit = |name: &str, f: &dyn Fn(&mut Plan)| {
            let mut p = plan.clone();
            f(&mut p);
            let found = figures(graph, &p);
            assert!(
                found.iter().any(|x| x == name),
                "{}: {name}: {found:?}",
                graph.name
            );
            edits += 1;
        };
        edit("arena_bytes", &|p| p.arena_bytes += 256);
        edit("weight_bytes", &|p| p.weight_bytes += 1);
        edit("lower_bound_bytes", &|p| p.lower_bound_bytes -= 1);
        edit("bound above arena", &|p| {
            p.lower_bound_bytes = p.arena_bytes + 1;
        });
        edit("naive_bytes", &|p| p.naive_bytes = 1);
        edit("stats.views", &|p| p.stats.views += 1);
        edit("stats.inplace", &|p| p.stats.inplace += 1);
        edit("stats.parts", &|p| p.stats.parts += 1);
        edit("stats.storages", &|p| p.stats.storages -= 1);
        edit("stats.unaliased_lower_bound", &|p| {
            p.stats.unaliased_lower_bound += 8;
        });
        edit("stats.peak", &|p| p.stats.schedule.peak += 8);
        edit("stats.any_order_bound", &|p| {
            p.stats.schedule.any_order_bound = p.stats.schedule.peak + 1;
        });
    }
    assert_eq!(edits, 4 * 12);
}

/// The figures of the plans of control-flow bodies are checked too, at any depth.
#[test]
fn a_body_plans_figures_are_checked() {
    let c = case(
        &[Flow::If, Flow::Loop],
        Updater::Sgd,
        TensorKind::Input,
        Target::Captured,
    );
    let plan = plan_ok(&c.graph, &PlanOptions::default());
    let mut p = plan.clone();
    let w = p
        .workspaces
        .iter_mut()
        .find(|w| !w.bodies.is_empty())
        .expect("a body plan");
    w.bodies[0].plan.naive_bytes += 1;
    let found = figures(&c.graph, &p);
    assert!(
        found
            .iter()
            .any(|f| f.starts_with("body:") && f.contains("naive_bytes")),
        "{found:?}"
    );
}

/// A per-dtype alignment the plan was made with is recorded, so that its lower bound
/// (refined for that alignment) is checked with it, and the file keeps it.
#[test]
fn a_per_dtype_alignment_is_recorded_and_checked() {
    let mut g = GraphBuilder::new("aligned");
    let x = g.input("x", DType::F16, [100]);
    let mut h = x;
    for _ in 0..4 {
        h = g.op("Relu", &[h], DType::F16, [100]);
        let k = g.op("Neg", &[h], DType::F16, [100]);
        h = g.op("Add", &[h, k], DType::F16, [100]);
    }
    g.mark_output(h);
    let graph = g.build().unwrap();
    let options = PlanOptions::default()
        .with_alignment(8)
        .with_dtype_alignment(vec![(DType::F16, 512)]);
    let plan = plan_ok(&graph, &options);
    assert_eq!(plan.settings.dtype_alignment, [(DType::F16, 512)]);
    let back = Plan::from_json(&graph, &plan.to_json(&graph)).unwrap();
    assert_eq!(back, plan);
    assert!(figures(&graph, &back).is_empty());
    // Without the record, the bound it states is above what plain alignment gives.
    let mut forgot = plan.clone();
    forgot.settings.dtype_alignment.clear();
    assert!(
        figures(&graph, &forgot).contains(&"lower_bound_bytes".to_owned()),
        "{:?}",
        figures(&graph, &forgot)
    );
}
