//! Times each arena heuristic (median and fastest of the repetitions) and prints its arena
//! over the lower bound and a checksum of its offsets, for comparing speed-ups that must not
//! change results. Every placement is checked by the independent verifier first.
//!
//! `cargo run --release -p memplan-benches --bin heur_time -- [gen:N | heavy:N | SHAPE:N[:SEED] | FILE.csv]... [-r REPS] [-s NAME]`
//!
//! `SHAPE` is a member of the generator family ([`generate::Shape`], e.g. `training-33%`);
//! generated instances use seed 42 unless one is given. `-v` prints `solve-auto`'s phases
//! (work, arena, bytes gained) to stderr; `-b` prints the stronger bound of
//! [`packing::window_bound`] (windows around the peak, sampled times of highest load; the
//! exact search with a fixed node budget) beside the load bound, to stderr.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use memplan_packing::{self as packing, Problem, Strategy, TieBreak, generate};

fn load(spec: &str) -> Result<Problem, String> {
    if let Some(n) = spec.strip_prefix("gen:") {
        let n: usize = n.parse().map_err(|e| format!("{spec}: {e}"))?;
        return Ok(generate::realistic(n, 42));
    }
    if let Some(n) = spec.strip_prefix("heavy:") {
        let n: usize = n.parse().map_err(|e| format!("{spec}: {e}"))?;
        return Ok(generate::heavy_tailed(n, 42));
    }
    let mut parts = spec.split(':');
    if let (Some(shape), Some(n)) = (parts.next(), parts.next())
        && let Ok(shape) = shape.parse::<generate::Shape>()
    {
        let n: usize = n.parse().map_err(|e| format!("{spec}: {e}"))?;
        let seed = match parts.next() {
            Some(seed) => seed.parse().map_err(|e| format!("{spec}: {e}"))?,
            None => 42,
        };
        return Ok(shape.generate(n, seed));
    }
    let text = std::fs::read_to_string(spec).map_err(|e| format!("{spec}: {e}"))?;
    packing::csv::read(&text)
        .map(|c| c.problem)
        .map_err(|e| format!("{spec}: {e}"))
}

/// The node budget of `-b`'s bound (the CLI's `--verbose` uses the same).
const WINDOW_NODES: u64 = 200_000;

fn main() -> ExitCode {
    let mut reps = 3usize;
    let mut specs = Vec::new();
    let mut only: Option<String> = None;
    let mut verbose = false;
    let mut strong = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "-s" {
            only = args.next();
        } else if a == "-v" {
            verbose = true;
        } else if a == "-b" {
            strong = true;
        } else if a == "-r" {
            reps = args.next().and_then(|r| r.parse().ok()).unwrap_or(3);
        } else {
            specs.push(a);
        }
    }
    for spec in specs {
        let problem = match load(&spec) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        let mut runs: Vec<(String, Box<dyn Fn() -> packing::Solution>)> = Vec::new();
        for s in Strategy::HEURISTICS {
            let p = &problem;
            runs.push((
                s.to_string(),
                Box::new(move || packing::run_heuristic(p, s).unwrap_or_else(|e| panic!("{e}"))),
            ));
        }
        for t in TieBreak::ALL.into_iter().skip(1) {
            let p = &problem;
            runs.push((
                format!("greedy-size/{t}"),
                Box::new(move || packing::greedy_size_with(p, t).unwrap_or_else(|e| panic!("{e}"))),
            ));
        }
        {
            let p = &problem;
            runs.push((
                "solve-auto".to_owned(),
                Box::new(move || {
                    let o = packing::solve(p, &packing::SolveOptions::default())
                        .unwrap_or_else(|e| panic!("{e}"));
                    if verbose {
                        for ph in &o.phases {
                            let arena = match (ph.arena, ph.skipped) {
                                (Some(a), _) => a.to_string(),
                                (None, Some(reason)) => format!("skipped ({reason})"),
                                (None, None) => "given up".to_owned(),
                            };
                            eprintln!(
                                "  phase {}: work {} arena {arena} gained {} rounds {}",
                                ph.producer, ph.work, ph.gained, ph.rounds
                            );
                        }
                    }
                    o.solution.unwrap_or(packing::Solution { offsets: vec![] })
                }),
            ));
        }
        let bound = packing::lower_bound(&problem).max(1);
        if strong {
            let t = Instant::now();
            let window = packing::window_bound(&problem, WINDOW_NODES);
            eprintln!(
                "{spec}\tload bound {bound}\twindow bound {window} ({:+.4}%, {:.1} s)",
                (window as f64 / bound as f64 - 1.0) * 100.0,
                t.elapsed().as_secs_f64()
            );
        }
        for (name, f) in &runs {
            if only.as_ref().is_some_and(|o| o != name) {
                continue;
            }
            let mut times = Vec::new();
            let mut hash = 0;
            let mut ratio = 0.0;
            for _ in 0..reps {
                let t = Instant::now();
                let sol = f();
                times.push(t.elapsed());
                if let Err(e) = packing::verify(&problem, &sol) {
                    eprintln!("error: {spec} {name}: the verifier refuses the placement: {e}");
                    return ExitCode::FAILURE;
                }
                let mut h = DefaultHasher::new();
                sol.offsets.hash(&mut h);
                hash = h.finish();
                ratio = sol.arena_size(&problem) as f64 / bound as f64;
            }
            times.sort();
            let median = times
                .get(times.len() / 2)
                .copied()
                .unwrap_or(Duration::ZERO);
            let fastest = times.first().copied().unwrap_or(Duration::ZERO);
            println!(
                "{spec}\t{name}\t{:.1} ms\t(min {:.1} ms)\t{ratio:.4}x\t{hash:016x}",
                median.as_secs_f64() * 1000.0,
                fastest.as_secs_f64() * 1000.0
            );
        }
    }
    ExitCode::SUCCESS
}
