//! One readable snapshot per corpus graph and per XLA graph: arena, lower bound, naive size,
//! aliasing, the memory-aware schedule's choice (every order it tried, one a line) and the
//! largest buffers. Every plan passes the verifier before its snapshot is taken, so a
//! snapshot never records a wrong plan.
//!
//! Corpus graphs are planned with the default options; the XLA graphs
//! (`testdata/xla/graphs`) as `memplan plan G --caller-inputs --caller-outputs --align 64`
//! plans them, in their own order and with `--schedule memory`.
//!
//! Placement here is heuristic only (no time-limited search), so the figures are the same on
//! every machine. Each fixture file is its own assertion (`insta::glob!`), so every broken
//! snapshot shows at once. Regenerate with `INSTA_UPDATE=always cargo test -p memplan-planner --test
//! plan_snapshots` and review the `.snap` files.

mod common;

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use memplan_ir::Graph;
use memplan_ir::GraphError as _;
use memplan_planner::{PlanOptions, ScheduleMode, plan_graph, verify_plan};

/// The graph a fixture file holds, named after the file.
fn load(path: &Path) -> (String, Graph) {
    let name = path.file_stem().unwrap().to_string_lossy().into_owned();
    (name, Graph::load_json(path).unwrap())
}

/// The digest of the plan in the graph's order, then the memory-aware schedule's choice.
fn snapshot(name: &str, graph: &Graph, options: &PlanOptions) -> String {
    let plan = plan_graph(graph, options).unwrap();
    verify_plan(graph, &plan).unwrap_or_else(|e| panic!("{name}: {}", e.with_graph(graph)));
    let memory = options.clone().with_schedule(ScheduleMode::Memory);
    let mem = plan_graph(graph, &memory).unwrap();
    verify_plan(graph, &mem)
        .unwrap_or_else(|e| panic!("{name} (memory schedule): {}", e.with_graph(graph)));

    let mut text = common::digest::digest(&plan, graph, 8);
    let c = &mem.stats.schedule;
    let change = (c.peak as f64 / c.given_peak as f64 - 1.0) * 100.0;
    let _ = writeln!(
        text,
        "memory schedule:        {} peak {} ({change:+.2}% vs given), arena {}{}",
        c.chosen,
        c.peak,
        mem.arena_bytes,
        if c.exact { " (exact)" } else { "" }
    );
    let _ = writeln!(
        text,
        "  any order needs:      {} (the arena is {:+.2}% above it)",
        c.any_order_bound,
        (mem.arena_bytes as f64 / c.any_order_bound.max(1) as f64 - 1.0) * 100.0
    );
    let _ = writeln!(text, "  orders tried:");
    for x in &c.candidates {
        let _ = writeln!(text, "    {:<24} {}", x.name, x.peak);
    }
    text
}

/// One snapshot per corpus graph (`testdata/graphs/json`), each its own assertion: every
/// broken snapshot shows at once.
#[test]
fn corpus_plans() {
    let options = PlanOptions::default().with_solve_time_limit(Duration::ZERO);
    insta::glob!("../../../testdata/graphs/json", "*.json", |path| {
        let (name, graph) = load(path);
        insta::assert_snapshot!(snapshot(&name, &graph, &options));
    });
}

/// One snapshot per XLA graph (`testdata/xla/graphs`).
#[test]
fn xla_plans() {
    let options = PlanOptions::default()
        .with_inputs_in_arena(false)
        .with_outputs_in_arena(false)
        .with_alignment(64)
        .with_solve_time_limit(Duration::ZERO)
        .with_fold_weights(false);
    insta::glob!("../../../testdata/xla/graphs", "*.json", |path| {
        let (name, graph) = load(path);
        insta::assert_snapshot!(snapshot(&name, &graph, &options));
    });
}
