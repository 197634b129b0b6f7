//! Plans every corpus graph and prints the per-graph table the planner's targets are
//! measured by.
//!
//! ```text
//! cargo run --release -p memplan-planner --example corpus_report [-- GRAPH_NAME_FILTER]
//! ```
//!
//! Columns: `lb0`/`arena0` = lower bound and arena in the given order with aliasing off
//! (target: arena0 <= 1.02 lb0, geometric mean <= 1.002); `csv_lb` = the no-aliasing lower
//! bound in testdata/graphs/summary.csv; `arena` = the default plan (views and in place on)
//! and how far it is below `csv_lb`; `mem_peak` = the peak of `--schedule memory` against the
//! given order's peak with the same aliasing, and the order chosen (`*`: the exact search
//! finished). `ratio` = the default plan's arena over its own lower bound. `ms` = wall time
//! of the default plan (including the placement search, up to its default node budget, when
//! the heuristics miss the bound). Every plan is checked by `verify_plan`.
//!
//! A second table adds the aliasing features in turn, against the no-aliasing bound:
//! views and elementwise in place (row-wise ops made opaque, Concat elision off), then
//! row-wise in place, then Concat elision, then the memory-aware order; `saving` is the best
//! of them below the bound, and the median over the graphs closes the table.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use memplan_ir::Graph;
use memplan_planner::{PlanOptions, ScheduleMode, plan_graph, verify_plan};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let filter = std::env::args().nth(1).unwrap_or_default();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/graphs");
    let summary = std::fs::read_to_string(root.join("summary.csv"))?;
    let mut csv_lb = BTreeMap::new();
    let mut lines = summary.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let col = header
        .iter()
        .position(|&c| c == "lower_bound_bytes")
        .ok_or("no lower_bound_bytes column")?;
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        if let (Some(name), Some(lb)) = (f.first(), f.get(col).and_then(|v| v.parse::<u64>().ok()))
        {
            csv_lb.insert((*name).to_owned(), lb);
        }
    }
    let mut paths: Vec<PathBuf> = std::fs::read_dir(root.join("json"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    paths.sort();
    println!(
        "{:<36} {:>5} {:>12} {:>12} {:>7} {:>12} {:>12} {:>7} {:>8} {:>12} {:>8} {:<15} {:>7}",
        "graph",
        "nodes",
        "lb0",
        "arena0",
        "ratio0",
        "csv_lb",
        "arena",
        "ratio",
        "vs_csv",
        "mem_peak",
        "vs_given",
        "order",
        "ms"
    );
    let mut log_sum = 0.0f64;
    let mut worst = 0.0f64;
    let mut count = 0u32;
    for path in paths {
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_owned();
        if !name.contains(&filter) {
            continue;
        }
        let graph = Graph::load_json(&path)?;
        let plain = PlanOptions::default().without_aliasing();
        let p0 = plan_graph(&graph, &plain)?;
        verify_plan(&graph, &p0)?;
        let options = PlanOptions::default();
        let started = Instant::now();
        let p1 = plan_graph(&graph, &options)?;
        let ms = started.elapsed().as_secs_f64() * 1e3;
        verify_plan(&graph, &p1)?;
        let memory = PlanOptions::default().with_schedule(ScheduleMode::Memory);
        let p2 = plan_graph(&graph, &memory)?;
        verify_plan(&graph, &p2)?;
        let r0 = p0.arena_bytes as f64 / p0.lower_bound_bytes.max(1) as f64;
        log_sum += r0.ln();
        worst = worst.max(r0);
        count += 1;
        let lb = csv_lb.get(&name).copied().unwrap_or(0);
        let vs_csv = (p1.arena_bytes as f64 / lb.max(1) as f64 - 1.0) * 100.0;
        let sc = &p2.stats.schedule;
        let vs_given = (sc.peak as f64 / sc.given_peak.max(1) as f64 - 1.0) * 100.0;
        println!(
            "{:<36} {:>5} {:>12} {:>12} {:>7.4} {:>12} {:>12} {:>7.4} {:>7.2}% {:>12} {:>7.2}% {:<15} {:>7.1}",
            name,
            graph.nodes().len(),
            p0.lower_bound_bytes,
            p0.arena_bytes,
            r0,
            lb,
            p1.arena_bytes,
            p1.arena_bytes as f64 / p1.lower_bound_bytes.max(1) as f64,
            vs_csv,
            sc.peak,
            vs_given,
            format!("{}{}", sc.chosen, if sc.exact { "*" } else { "" }),
            ms
        );
    }
    if count > 0 {
        println!(
            "aliasing off, given order: geometric mean arena/lb0 = {:.5}, worst = {:.5} ({count} graphs)",
            (log_sum / f64::from(count)).exp(),
            worst
        );
    }
    features(&root, &filter, &csv_lb)
}

/// The arena with each aliasing feature added in turn, against the no-aliasing bound of
/// `summary.csv`: views and elementwise in place; row-wise in place; Concat elision; the
/// memory-aware order. Every plan is verified.
fn features(
    root: &std::path::Path,
    filter: &str,
    csv_lb: &BTreeMap<String, u64>,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(root.join("json"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    paths.sort();
    println!();
    println!(
        "{:<36} {:>12} {:>12} {:>12} {:>12} {:>12} {:>8}",
        "graph", "no_alias_lb", "views+elem", "+row-wise", "+concat", "+order", "saving"
    );
    let mut savings = Vec::new();
    for path in paths {
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_owned();
        if !name.contains(filter) {
            continue;
        }
        let graph = Graph::load_json(&path)?;
        let elementwise = memplan_ir::OpTable::default().without(&memplan_ir::OpRule::RowWise);
        let steps = [
            PlanOptions::default()
                .with_op_table(elementwise)
                .with_concat_elision(false),
            PlanOptions::default().with_concat_elision(false),
            PlanOptions::default(),
            PlanOptions::default().with_schedule(ScheduleMode::Memory),
        ];
        let mut arenas = Vec::new();
        for options in &steps {
            let plan = plan_graph(&graph, options)?;
            verify_plan(&graph, &plan)?;
            arenas.push(plan.arena_bytes);
        }
        let lb = csv_lb.get(&name).copied().unwrap_or(0);
        let best = arenas.iter().copied().min().unwrap_or(0);
        let saving = (1.0 - best as f64 / lb.max(1) as f64) * 100.0;
        savings.push(saving);
        println!(
            "{:<36} {:>12} {:>12} {:>12} {:>12} {:>12} {:>7.2}%",
            name, lb, arenas[0], arenas[1], arenas[2], arenas[3], saving
        );
    }
    savings.sort_by(f64::total_cmp);
    if !savings.is_empty() {
        let mid = savings.len() / 2;
        let median = if savings.len() % 2 == 0 {
            (savings[mid - 1] + savings[mid]) / 2.0
        } else {
            savings[mid]
        };
        println!(
            "median saving against the no-aliasing bound: {median:.2}% ({} graphs)",
            savings.len()
        );
    }
    Ok(())
}
