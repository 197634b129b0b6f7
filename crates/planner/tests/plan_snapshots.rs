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
//! every machine. Regenerate with `INSTA_UPDATE=always cargo test -p memplan-planner --test
//! plan_snapshots` and review the `.snap` files.

mod common;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use memplan_ir::Graph;
use memplan_planner::{PlanOptions, ScheduleMode, plan_graph, verify_plan};

fn graphs(dir: &Path) -> Vec<(String, Graph)> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            (name, Graph::load_json(&p).unwrap())
        })
        .collect()
}

/// The digest of the plan in the graph's order, then the memory-aware schedule's choice.
fn snapshot(name: &str, graph: &Graph, options: &PlanOptions) -> String {
    let plan = plan_graph(graph, options).unwrap();
    verify_plan(graph, &plan).unwrap_or_else(|e| panic!("{name}: {e}"));
    let memory = PlanOptions {
        schedule: ScheduleMode::Memory,
        ..options.clone()
    };
    let mem = plan_graph(graph, &memory).unwrap();
    verify_plan(graph, &mem).unwrap_or_else(|e| panic!("{name} (memory schedule): {e}"));

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

#[test]
fn corpus_plans() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/graphs/json");
    let options = PlanOptions {
        solve_time_limit: Duration::ZERO,
        ..PlanOptions::default()
    };
    for (name, graph) in graphs(&dir) {
        let text = snapshot(&name, &graph, &options);
        insta::assert_snapshot!(name, text);
    }
}

#[test]
fn xla_plans() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/xla/graphs");
    let options = PlanOptions {
        inputs_in_arena: false,
        outputs_in_arena: false,
        alignment: 64,
        solve_time_limit: Duration::ZERO,
        // XLA computes its broadcasts of constants on every run: compare like with like.
        fold_weights: false,
        ..PlanOptions::default()
    };
    for (name, graph) in graphs(&dir) {
        let text = snapshot(&name, &graph, &options);
        insta::assert_snapshot!(format!("xla_{name}"), text);
    }
}
