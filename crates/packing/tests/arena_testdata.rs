//! The benchmark instances in `testdata/benchmarks/` through every strategy, each solution
//! verified, with the lower bounds the READMEs state.

use std::path::PathBuf;

use memplan_packing::{self as packing, Problem, Strategy, csv, verify};

fn load(relative: &str) -> Problem {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/benchmarks")
        .join(relative);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    csv::read(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .problem
}

#[test]
fn lower_bounds_match_the_readmes() {
    let expected = [
        ("minimalloc/A.1048576.csv", 1_048_576),
        ("minimalloc/C.1048576.csv", 1_039_360),
        ("minimalloc/D.1048576.csv", 986_112),
        ("minimalloc/J.1048576.csv", 989_184),
        ("minimalloc/input.12.csv", 12),
        ("idealloc/somas_resnet50.csv", 1_515_472_556),
        ("idealloc/iopddl_G_1.csv", 3_030_937_746),
        ("idealloc/somas_pangu_2.6B.csv", 5_530_099_775),
        ("idealloc/iopddl_S_1.csv", 1_498_635_932),
        ("idealloc/iopddl_Y_1.csv", 497_261_190_115),
    ];
    for (file, bound) in expected {
        assert_eq!(packing::lower_bound(&load(file)), bound, "{file}");
    }
}

#[test]
fn every_strategy_solves_the_minimalloc_instances() {
    for letter in 'A'..='K' {
        let file = format!("minimalloc/{letter}.1048576.csv");
        let problem = load(&file);
        let bound = packing::lower_bound(&problem);
        for strategy in Strategy::ALL {
            let solution = packing::run_heuristic(&problem, strategy).expect("valid");
            if let Err(e) = verify(&problem, &solution) {
                panic!("{file} {strategy}: {e}");
            }
            assert!(solution.arena_size(&problem) >= bound);
        }
    }
}

#[test]
fn best_fit_solves_the_idealloc_instances_near_the_bound() {
    for file in [
        "idealloc/somas_resnet50.csv",
        "idealloc/iopddl_G_1.csv",
        "idealloc/somas_pangu_2.6B.csv",
    ] {
        let problem = load(file);
        let bound = packing::lower_bound(&problem);
        for strategy in [
            Strategy::GreedySize,
            Strategy::GreedyBreadth,
            Strategy::FirstFitTime,
        ] {
            let solution = packing::run_heuristic(&problem, strategy).expect("valid");
            if let Err(e) = verify(&problem, &solution) {
                panic!("{file} {strategy}: {e}");
            }
            let arena = solution.arena_size(&problem);
            assert!(
                arena >= bound && arena as f64 <= 1.2 * bound as f64,
                "{file} {strategy}: {arena} vs {bound}"
            );
        }
    }
}

/// With `minimize`, asking for a capacity never gives a worse answer than not asking: on
/// MiniMalloc's `C` the default solve reaches the lower bound (1,039,360 bytes) and proves
/// it; with a capacity of 1 MiB, which the heuristics miss, it once stopped at the first
/// placement that fitted (1,047,552 bytes, not proven). The same holds for a capacity at the
/// optimum, and a capacity below the bound is proven infeasible.
#[test]
fn a_capacity_never_gives_a_worse_answer_than_none_when_minimizing() {
    let problem = load("minimalloc/C.1048576.csv");
    let plain = packing::solve(&problem, &packing::SolveOptions::default()).expect("valid");
    assert!(plain.proven_optimal);
    assert_eq!(plain.arena, 1_039_360);
    for capacity in [1_048_576, 1_039_360, 1_100_000] {
        let options = packing::SolveOptions::default()
            .with_capacity(Some(capacity))
            .with_minimize(true);
        let asked = packing::solve(&problem, &options).expect("valid");
        let solution = asked.solution.as_ref().expect("fits the capacity");
        verify(&problem, solution).expect("valid");
        assert!(asked.arena <= capacity);
        assert_eq!(asked.arena, plain.arena, "capacity {capacity}");
        assert!(asked.proven_optimal, "capacity {capacity}");
    }
    for minimize in [false, true] {
        let options = packing::SolveOptions::default()
            .with_capacity(Some(1_039_359))
            .with_minimize(minimize);
        let below = packing::solve(&problem, &options).expect("valid");
        assert!(below.solution.is_none() && below.proven_infeasible);
    }
}

/// Without `minimize`, a capacity is a feasibility question: the first answer that fits it
/// is the answer, and nothing searches past it, whatever the clock allows. On every
/// MiniMalloc instance at 1 MiB with no node budget and a minute's clock (which the search
/// used to run to): an answer within 1 MiB, the first heuristic's that fits where one does
/// (no search improves it), well before the minute.
#[test]
fn a_capacity_without_minimize_stops_at_the_first_fit() {
    for name in ["A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K"] {
        let problem = load(&format!("minimalloc/{name}.1048576.csv"));
        let options = packing::SolveOptions::default()
            .with_capacity(Some(1 << 20))
            .with_node_limit(None)
            .with_time_limit(std::time::Duration::from_secs(60));
        let outcome = packing::solve(&problem, &options).expect("valid");
        let solution = outcome.solution.as_ref().expect("fits 1 MiB");
        verify(&problem, solution).expect("valid");
        assert!(outcome.arena <= 1 << 20, "{name}");
        let first_fit = Strategy::HEURISTICS
            .into_iter()
            .map(|s| packing::run_heuristic(&problem, s).expect("valid"))
            .map(|s| s.arena_size(&problem))
            .find(|&arena| arena <= 1 << 20);
        if let Some(first) = first_fit {
            assert_eq!(outcome.arena, first, "{name}: searched past the first fit");
            assert!(
                matches!(outcome.produced_by, packing::Producer::Heuristic(_)),
                "{name}"
            );
        }
        assert!(
            outcome.elapsed < std::time::Duration::from_secs(40),
            "{name}: {:?}",
            outcome.elapsed
        );
    }
}
