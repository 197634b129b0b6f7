//! The arena bench suite: how close each strategy gets to the lower bound, and how fast.
//!
//! For every CSV under `testdata/benchmarks/` (sorted by path), runs each strategy once
//! (timing the best of up to five runs for fast ones), verifies every solution outside the
//! timing, and prints a markdown table of `arena / lower bound` and time per strategy. Then
//! it times the heuristics on generated realistic instances of 10k, 100k and 1M buffers, and
//! the heuristics and the default `auto` on heavy-tailed ones of 30k and 1M buffers
//! ([`generate::heavy_tailed`]: a few percent of buffers live for thousands of steps). Last,
//! `greedy-size` and the default `auto` on every member of the generator family
//! ([`generate::Shape::FAMILY`]: short-only, heavy-tailed at the corners and the middle of
//! its range, training-shaped, mixed), seed 42, at 100k and 1M buffers.
//!
//! Heuristic runs longer than 50 ms are timed by the CPU time of the running thread where
//! Linux reports it (`/proc/thread-self/schedstat`, which only advances at scheduler ticks,
//! hence the threshold), so that other work on a shared machine does not inflate them.
//! Shorter runs, other systems, and `auto` (whose search runs on a second thread) are timed
//! by the wall clock.
//! Run it in release mode:
//!
//! ```text
//! cargo run --release -p memplan-benches --bin bench_suite [-- --instances|--scale|--family|--tie-breaks] [--sizes N,N]
//! ```
//!
//! With no flag it prints the instance table, the scale tables and the family table.
//! `--sizes` sets the family's sizes (default `100000,1000000`). `--tie-breaks` compares the
//! tie-breaks of `greedy-size` on the instances instead.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use memplan_packing::{
    self as packing, Problem, Solution, SolveOptions, Strategy, TieBreak, csv, generate, verify,
};

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut sizes = vec![100_000, 1_000_000];
    if let Some(at) = args.iter().position(|a| a == "--sizes") {
        let parsed = args.get(at + 1).map(|list| {
            list.split(',')
                .map(|n| n.parse::<usize>().ok().filter(|&n| n > 0))
                .collect::<Option<Vec<usize>>>()
        });
        match parsed {
            Some(Some(list)) if !list.is_empty() => sizes = list,
            _ => {
                eprintln!("error: --sizes takes a list of buffer counts, such as 100000,1000000");
                return ExitCode::from(2);
            }
        }
        args.drain(at..at + 2);
    }
    let has = |flag: &str| args.iter().any(|a| a == flag);
    let flags = ["--instances", "--scale", "--family", "--tie-breaks"];
    if let Some(unknown) = args.iter().find(|a| !flags.contains(&a.as_str())) {
        eprintln!(
            "error: unknown argument {unknown:?}; expected --instances, --scale, --family, \
             --tie-breaks or --sizes"
        );
        return ExitCode::from(2);
    }
    if cfg!(debug_assertions) {
        eprintln!("warning: this is a debug build; times are not representative (use --release)");
    }
    let everything = args.is_empty();
    let result = (|| -> Result<(), String> {
        if everything || has("--instances") {
            instances()?;
        }
        if has("--tie-breaks") {
            tie_breaks()?;
        }
        if everything || has("--scale") {
            scale()?;
            heavy_scale()?;
        }
        if everything || has("--family") {
            family(&sizes)?;
        }
        Ok(())
    })();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(1)
        }
    }
}

/// Every CSV under `testdata/benchmarks/`, sorted.
fn instance_files() -> Result<Vec<PathBuf>, String> {
    let root = memplan_benches::testdata().join("benchmarks");
    let mut files = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for entry in entries {
            let path = entry.map_err(|e| format!("{}: {e}", dir.display()))?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "csv") {
                files.push(path);
            }
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(format!("no CSV files under {}", root.display()));
    }
    Ok(files)
}

fn load(path: &Path) -> Result<Problem, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    csv::read(&text)
        .map(|c| c.problem)
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn short_name(path: &Path) -> String {
    let parent = path
        .parent()
        .and_then(Path::file_name)
        .map(|p| p.to_string_lossy().into_owned());
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    match parent {
        Some(p) => format!("{p}/{stem}"),
        None => stem,
    }
}

/// CPU time of the calling thread, where Linux reports it.
fn thread_cpu_time() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let nanos: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(nanos))
}

/// Which clock [`timed`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Clock {
    /// The thread's CPU time when available, else wall-clock time.
    Cpu,
    /// Wall-clock time.
    Wall,
}

/// Runs `f` up to five times (while the total stays under half a second) and returns its
/// last result with the fastest time.
fn timed<T>(
    clock: Clock,
    mut f: impl FnMut() -> Result<T, String>,
) -> Result<(T, Duration), String> {
    let mut best = Duration::MAX;
    let mut total = Duration::ZERO;
    let mut result = None;
    for _ in 0..5 {
        let wall = Instant::now();
        let cpu = thread_cpu_time().filter(|_| clock == Clock::Cpu);
        let value = f()?;
        let took = match (cpu, thread_cpu_time()) {
            (Some(before), Some(after)) if wall.elapsed() > Duration::from_millis(50) => {
                after.saturating_sub(before)
            }
            _ => wall.elapsed(),
        };
        best = best.min(took);
        total += took;
        result = Some(value);
        if total > Duration::from_millis(500) {
            break;
        }
    }
    result
        .map(|r| (r, best))
        .ok_or_else(|| "nothing ran".to_owned())
}

fn checked(problem: &Problem, solution: &Solution, what: &str) -> Result<u64, String> {
    verify(problem, solution).map_err(|e| format!("{what}: {e}"))?;
    Ok(solution.arena_size(problem))
}

fn cell(arena: u64, bound: u64, time: Duration, proven: bool) -> String {
    let ratio = if bound == 0 {
        1.0
    } else {
        arena as f64 / bound as f64
    };
    let mark = if proven { "*" } else { "" };
    format!("{ratio:.3}{mark} ({})", ms(time))
}

fn ms(time: Duration) -> String {
    let ms = time.as_secs_f64() * 1e3;
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

/// The default `solve`, timed by the wall clock and verified: its table cell.
fn auto_cell(problem: &Problem, bound: u64, what: &str) -> Result<String, String> {
    let options = SolveOptions::default();
    let (outcome, time) = timed(Clock::Wall, || {
        packing::solve(problem, &options).map_err(|e| format!("{what}: {e}"))
    })?;
    let solution = outcome
        .solution
        .ok_or_else(|| format!("{what}: no solution"))?;
    let arena = checked(problem, &solution, what)?;
    Ok(cell(arena, bound, time, outcome.proven_optimal))
}

fn instances() -> Result<(), String> {
    println!("### arena / lower bound per strategy (time)\n");
    print!("| instance | buffers | lower bound |");
    for s in Strategy::ALL {
        print!(" {s} |");
    }
    println!();
    println!("|---|---:|---:|{}", "---:|".repeat(Strategy::ALL.len()));
    for path in instance_files()? {
        let problem = load(&path)?;
        let bound = packing::lower_bound(&problem);
        print!("| {} | {} | {} |", short_name(&path), problem.len(), bound);
        for s in Strategy::ALL {
            let what = format!("{} {s}", short_name(&path));
            let text = if s == Strategy::Auto {
                auto_cell(&problem, bound, &what)?
            } else {
                let (solution, time) = timed(Clock::Cpu, || {
                    packing::run_heuristic(&problem, s).map_err(|e| format!("{what}: {e}"))
                })?;
                let arena = checked(&problem, &solution, &what)?;
                cell(arena, bound, time, arena == bound)
            };
            print!(" {text} |");
        }
        println!();
    }
    println!(
        "\n`*`: proven optimal. Heuristics: thread CPU time (wall time under 50 ms). `auto`: wall-clock time with the \
         default search budget of {} nodes (its heuristics always finish).\n",
        packing::DEFAULT_NODE_LIMIT
    );
    Ok(())
}

fn tie_breaks() -> Result<(), String> {
    println!("### greedy-size: arena / lower bound per tie-break\n");
    print!("| instance |");
    for t in TieBreak::ALL {
        print!(" {t} |");
    }
    println!();
    println!("|---|{}", "---:|".repeat(TieBreak::ALL.len()));
    let mut sums = [0.0f64; TieBreak::ALL.len()];
    let mut count = 0usize;
    for path in instance_files()? {
        let problem = load(&path)?;
        let bound = packing::lower_bound(&problem);
        print!("| {} |", short_name(&path));
        for (t, sum) in TieBreak::ALL.into_iter().zip(sums.iter_mut()) {
            let what = format!("{} {t}", short_name(&path));
            let solution =
                packing::greedy_size_with(&problem, t).map_err(|e| format!("{what}: {e}"))?;
            let arena = checked(&problem, &solution, &what)?;
            let ratio = arena as f64 / bound.max(1) as f64;
            *sum += ratio;
            print!(" {ratio:.3} |");
        }
        count += 1;
        println!();
    }
    print!("| **mean** |");
    for sum in sums {
        print!(" **{:.3}** |", sum / count.max(1) as f64);
    }
    println!("\n");
    Ok(())
}

fn scale() -> Result<(), String> {
    scale_table(
        "realistic",
        &[10_000, 100_000, 1_000_000],
        generate::realistic,
        false,
    )
}

fn heavy_scale() -> Result<(), String> {
    scale_table(
        "heavy-tailed",
        &[30_000, 1_000_000],
        generate::heavy_tailed,
        true,
    )
}

/// `greedy-size` and the default `auto` on every member of the generator family, seed 42, at
/// each size. `greedy-size` by the thread's CPU time, `auto` by the wall clock (its portfolio
/// and searches use every core).
fn family(sizes: &[usize]) -> Result<(), String> {
    println!("### generator family: arena / lower bound (time), seed 42\n");
    println!("| member | buffers | lower bound | greedy-size | auto | auto produced by |");
    println!("|---|---:|---:|---:|---:|---|");
    for shape in generate::Shape::FAMILY {
        for &n in sizes {
            let problem = shape.generate(n, 42);
            let bound = packing::lower_bound(&problem);
            let what = format!("{shape} {n}");
            let (solution, time) = timed(Clock::Cpu, || {
                packing::run_heuristic(&problem, Strategy::GreedySize)
                    .map_err(|e| format!("{what} greedy-size: {e}"))
            })?;
            let arena = checked(&problem, &solution, &what)?;
            let greedy = cell(arena, bound, time, arena == bound);
            let options = SolveOptions::default();
            let (outcome, time) = timed(Clock::Wall, || {
                packing::solve(&problem, &options).map_err(|e| format!("{what} auto: {e}"))
            })?;
            let solution = outcome
                .solution
                .as_ref()
                .ok_or_else(|| format!("{what} auto: no solution"))?;
            let arena = checked(&problem, solution, &what)?;
            println!(
                "| {shape} | {n} | {bound} | {greedy} | {} | {} |",
                cell(arena, bound, time, outcome.proven_optimal),
                outcome.produced_by
            );
        }
    }
    println!(
        "\n`greedy-size`: thread CPU time; `auto`: wall-clock time, default budget \
         (deterministic). Other members: `gen_csv NAME N SEED` and `memplan solve`.\n"
    );
    Ok(())
}

/// The heuristics (and, with `auto`, the default solve) on generated instances of each size.
fn scale_table(
    kind: &str,
    sizes: &[usize],
    generate: fn(usize, u64) -> Problem,
    auto: bool,
) -> Result<(), String> {
    let strategies = [
        Strategy::GreedySize,
        Strategy::GreedyLifetime,
        Strategy::GreedyArea,
        Strategy::GreedyBreadth,
        Strategy::FirstFitTime,
    ];
    println!("### generated {kind} instances: arena / lower bound (time)\n");
    print!("| buffers | lower bound |");
    for s in strategies {
        print!(" {s} |");
    }
    println!("{}", if auto { " auto |" } else { "" });
    let columns = strategies.len() + usize::from(auto);
    println!("|---:|---:|{}", "---:|".repeat(columns));
    for &n in sizes {
        let problem = generate(n, 42);
        let bound = packing::lower_bound(&problem);
        print!("| {n} | {bound} |");
        for s in strategies {
            let what = format!("{kind} {n} {s}");
            let (solution, time) = timed(Clock::Cpu, || {
                packing::run_heuristic(&problem, s).map_err(|e| format!("{what}: {e}"))
            })?;
            let arena = checked(&problem, &solution, &what)?;
            print!(" {} |", cell(arena, bound, time, arena == bound));
        }
        if auto {
            print!(
                " {} |",
                auto_cell(&problem, bound, &format!("{kind} {n} auto"))?
            );
        }
        println!();
    }
    println!(
        "\nHeuristics: thread CPU time (wall time under 50 ms); `auto`: wall-clock time, default \
         budget (deterministic).\n"
    );
    Ok(())
}
