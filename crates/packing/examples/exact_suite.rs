//! Runs the exact search on the benchmark instances and prints a results table.
//!
//! ```text
//! cargo run --release -p memplan-planner --example exact_suite -- [decide|minimize|idealloc] [SECONDS]
//! ```
//!
//! `decide` (the default) fits each MiniMalloc challenging instance A–K at capacity 1048576;
//! `minimize` minimizes C, D and J; `idealloc` minimizes the idealloc instances (no incumbent:
//! those too large to search print "no answer"). An optional third argument keeps only the
//! files whose name starts with it. Every solution is re-checked with `packing::verify`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use memplan_packing::exact::{SearchOptions, search};
use memplan_packing::{Problem, csv, verify};

fn read_csv(path: &Path) -> Result<Problem, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    csv::read(&text)
        .map(|c| c.problem)
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map_or("decide", String::as_str);
    let seconds: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(60);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/benchmarks");
    let (files, capacity, minimize): (Vec<PathBuf>, Option<u64>, bool) = match mode {
        "decide" => (
            "ABCDEFGHIJK"
                .chars()
                .map(|c| root.join(format!("minimalloc/{c}.1048576.csv")))
                .collect(),
            Some(1_048_576),
            false,
        ),
        "minimize" => (
            ["C", "D", "J"]
                .iter()
                .map(|c| root.join(format!("minimalloc/{c}.1048576.csv")))
                .collect(),
            None,
            true,
        ),
        "idealloc" => (
            [
                "somas_resnet50",
                "iopddl_G_1",
                "somas_pangu_2.6B",
                "iopddl_S_1",
                "iopddl_Y_1",
            ]
            .iter()
            .map(|c| root.join(format!("idealloc/{c}.csv")))
            .collect(),
            None,
            true,
        ),
        other => return Err(format!("unknown mode {other}")),
    };
    let only: Option<&str> = args.get(3).map(String::as_str);
    println!("| instance | n | lower bound | result | arena | proven | nodes | time |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut total = Duration::ZERO;
    for path in files {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("?")
            .to_string();
        if only.is_some_and(|o| !name.starts_with(o)) {
            continue;
        }
        let problem = read_csv(&path)?;
        let options = SearchOptions::default()
            .with_time_limit(Duration::from_secs(seconds))
            .with_node_limit(None)
            .with_capacity(capacity)
            .with_incumbent(None)
            .with_minimize(minimize)
            .with_gap(memplan_packing::Gap::ZERO)
            .with_threads(0);
        let t = Instant::now();
        let out = search(&problem, &options);
        let elapsed = t.elapsed();
        total += elapsed;
        let (result, arena) = match &out.solution {
            Some(s) => {
                let mut capped = problem.clone();
                capped.capacity = capacity;
                let ok = verify(&capped, s).is_ok();
                (
                    if ok { "fits" } else { "INVALID" },
                    s.arena_size(&problem).to_string(),
                )
            }
            None if out.proven_infeasible => ("infeasible", "-".into()),
            None => ("no answer", "-".into()),
        };
        let proven = if out.proven_optimal || out.proven_infeasible {
            "yes"
        } else {
            "no"
        };
        println!(
            "| {name} | {} | {} | {result} | {arena} | {proven} | {} | {:.2} s |",
            problem.len(),
            out.lower_bound,
            out.nodes,
            elapsed.as_secs_f64()
        );
    }
    println!("total {:.2} s", total.as_secs_f64());
    Ok(())
}
