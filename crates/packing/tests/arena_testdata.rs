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
