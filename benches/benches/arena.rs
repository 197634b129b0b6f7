//! Criterion benchmarks of the arena heuristics.
//!
//! One group per instance class. `arena/generated`: deterministic realistic instances
//! ([`packing::generate::realistic`]) of 10k, 100k and 1M buffers. `arena/heavy-tailed`:
//! [`packing::generate::heavy_tailed`] instances of 30k and 1M buffers (a long-lived tail that
//! grows with n). Both time the heuristics and, below a million buffers, the default `solve`.
//! `arena/family`: every member of the generator family ([`packing::generate::Shape::FAMILY`]:
//! short-only, heavy-tailed, training-shaped, mixed) at 100k buffers, `greedy-size`,
//! `first-fit-time` and the default `solve` (`cargo xtask bench-suite` reports them at 1M
//! too, one run each). `arena/idealloc` and
//! `arena/minimalloc`: every CSV in `testdata/benchmarks/idealloc/` and
//! `testdata/benchmarks/minimalloc/`, named after its file (drop a file there and it becomes
//! a case); MiniMalloc's also with the default `solve`. Throughput is in buffers. Every
//! solution is verified once, outside the timing.
//!
//! ```text
//! cargo bench -p memplan-benches --bench arena [-- FILTER]
//! ```

#![allow(
    missing_docs,
    reason = "`criterion_group!` defines a public function with no doc comment"
)]

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use memplan_packing::{self as packing, Problem, Strategy, csv};

/// Runs a heuristic once and panics unless the verifier accepts its solution.
fn verified(problem: &Problem, strategy: Strategy, case: &str) {
    let solution = packing::run_heuristic(problem, strategy)
        .unwrap_or_else(|e| panic!("{case} {strategy}: {e}"));
    if let Err(e) = packing::verify(problem, &solution) {
        panic!("{case} {strategy}: {e}");
    }
}

fn bench_one(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    problem: &Problem,
    strategy: Strategy,
    case: &str,
) {
    verified(problem, strategy, case);
    group.bench_with_input(
        BenchmarkId::new(strategy.name(), case),
        problem,
        |b, problem| b.iter(|| packing::run_heuristic(problem, strategy)),
    );
}

fn generated(c: &mut Criterion) {
    generated_group(
        c,
        "arena/generated",
        &[10_000, 100_000, 1_000_000],
        packing::generate::realistic,
    );
}

fn heavy_tailed(c: &mut Criterion) {
    generated_group(
        c,
        "arena/heavy-tailed",
        &[30_000, 1_000_000],
        packing::generate::heavy_tailed,
    );
}

fn family(c: &mut Criterion) {
    let mut group = c.benchmark_group("arena/family");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500));
    let n = 100_000;
    group.throughput(Throughput::Elements(n as u64));
    for shape in packing::generate::Shape::FAMILY {
        let problem = shape.generate(n, 42);
        let case = format!("{shape}/{n}");
        for strategy in [Strategy::GreedySize, Strategy::FirstFitTime] {
            bench_one(&mut group, &problem, strategy, &case);
        }
        bench_solve(&mut group, &problem, &case);
    }
    group.finish();
}

/// One group of generated instances (seed 42) of each size: every heuristic, only the fast
/// ones at a million buffers, and the default `solve` below that.
fn generated_group(
    c: &mut Criterion,
    name: &str,
    sizes: &[usize],
    generate: fn(usize, u64) -> Problem,
) {
    let mut group = c.benchmark_group(name);
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500));
    for &n in sizes {
        let problem = generate(n, 42);
        group.throughput(Throughput::Elements(n as u64));
        let strategies: &[Strategy] = if n >= 1_000_000 {
            &[Strategy::GreedySize, Strategy::FirstFitTime]
        } else {
            &Strategy::HEURISTICS
        };
        for &strategy in strategies {
            bench_one(&mut group, &problem, strategy, &format!("{n}"));
        }
        if n < 1_000_000 {
            bench_solve(&mut group, &problem, &format!("{n}"));
        }
    }
    group.finish();
}

/// Benchmarks the default `solve` (heuristics, then the exact search or, over 5,000 buffers,
/// the search over orders, then local improvement, all under the default node budget, which
/// makes it deterministic), verified once outside the timing.
fn bench_solve(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    problem: &Problem,
    case: &str,
) {
    let options = packing::SolveOptions::default();
    let outcome = packing::solve(problem, &options).unwrap_or_else(|e| panic!("{case}: {e}"));
    let solution = outcome
        .solution
        .unwrap_or_else(|| panic!("{case}: no solution"));
    if let Err(e) = packing::verify(problem, &solution) {
        panic!("{case} solve: {e}");
    }
    group.bench_with_input(BenchmarkId::new("solve", case), problem, |b, problem| {
        b.iter(|| packing::solve(problem, &options))
    });
}

/// The problems of every CSV in `testdata/benchmarks/<dir>/`, by file name.
fn csv_cases(dir: &str) -> Vec<(String, Problem)> {
    let dir = memplan_benches::testdata().join("benchmarks").join(dir);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "csv"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let problem = csv::read(&text)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
                .problem;
            let case = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            (case, problem)
        })
        .collect()
}

fn minimalloc(c: &mut Criterion) {
    csv_group(c, "minimalloc", &[Strategy::GreedySize]);
}

fn idealloc(c: &mut Criterion) {
    csv_group(
        c,
        "idealloc",
        &[
            Strategy::GreedySize,
            Strategy::GreedyBreadth,
            Strategy::FirstFitTime,
        ],
    );
}

/// One group, `arena/<dir>`, over every CSV of `testdata/benchmarks/<dir>/`: each of
/// `strategies`, then the default `solve`.
fn csv_group(c: &mut Criterion, dir: &str, strategies: &[Strategy]) {
    let mut group = c.benchmark_group(format!("arena/{dir}"));
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500));
    for (case, problem) in csv_cases(dir) {
        group.throughput(Throughput::Elements(problem.len() as u64));
        for &strategy in strategies {
            bench_one(&mut group, &problem, strategy, &case);
        }
        bench_solve(&mut group, &problem, &case);
    }
    group.finish();
}

criterion_group!(
    benches,
    generated,
    heavy_tailed,
    family,
    idealloc,
    minimalloc
);
criterion_main!(benches);
