//! One readable snapshot per corpus graph: arena, lower bound, naive size, aliasing, the
//! memory-aware schedule's choice and the largest buffers. Every plan passes the verifier
//! before its snapshot is taken, so a snapshot never records a wrong plan.
//!
//! Placement here is heuristic only (no time-limited search), so the figures are the same on
//! every machine. Regenerate with `INSTA_UPDATE=always cargo test -p memplan-planner --test
//! plan_snapshots` and review the `.snap` files.

mod common;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use memplan_ir::Graph;
use memplan_planner::{PlanOptions, ScheduleMode, plan_graph, verify_plan};

#[test]
fn corpus_plans() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/graphs/json");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    for path in paths {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let graph = Graph::load_json(&path).unwrap();
        let options = PlanOptions {
            solve_time_limit: Duration::ZERO,
            ..PlanOptions::default()
        };
        let plan = plan_graph(&graph, &options).unwrap();
        verify_plan(&graph, &plan).unwrap_or_else(|e| panic!("{name}: {e}"));
        let memory = PlanOptions {
            schedule: ScheduleMode::Memory,
            ..options.clone()
        };
        let mem = plan_graph(&graph, &memory).unwrap();
        verify_plan(&graph, &mem).unwrap_or_else(|e| panic!("{name} (memory schedule): {e}"));

        let mut text = common::digest::digest(&plan, &graph, 8);
        let c = &mem.stats.schedule;
        let change = (c.peak as f64 / c.given_peak as f64 - 1.0) * 100.0;
        let tried: Vec<String> = c
            .candidates
            .iter()
            .map(|x| format!("{} {}", x.name, x.peak))
            .collect();
        let _ = writeln!(
            text,
            "memory schedule:        {} peak {} ({change:+.2}% vs given), arena {}",
            c.chosen, c.peak, mem.arena_bytes
        );
        let _ = writeln!(
            text,
            "  orders tried:         {}{}",
            tried.join(", "),
            if c.exact { " (exact)" } else { "" }
        );
        insta::assert_snapshot!(name, text);
    }
}
