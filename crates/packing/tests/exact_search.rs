//! The exact search against brute force on tiny instances, and on the MiniMalloc files.
//!
//! Every solution is checked by `packing::verify` (independent of the search) and by a plain
//! pairwise check written here.

use std::time::Duration;

use memplan_packing::exact::{SearchOptions, SearchOutcome, search};
use memplan_packing::{Buffer, Gap, Problem, Solution, Strategy, csv, run_heuristic, verify};

/// Generous limit: the tests assert results, never speed.
const LIMIT: Duration = Duration::from_secs(120);

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn random_problem(rng: &mut Rng, max_buffers: u64, aligned: bool) -> Problem {
    let n = 1 + rng.below(max_buffers);
    let buffers = (0..n)
        .map(|_| {
            let start = rng.below(6);
            let end = start + 1 + rng.below(5);
            let size = 1 + rng.below(4);
            let align = if aligned { 1 << rng.below(3) } else { 1 };
            Buffer {
                start,
                end,
                size,
                align,
            }
        })
        .collect();
    Problem::new(buffers)
}

/// Pairwise validity, written independently of the search and of `verify`.
fn valid(problem: &Problem, offsets: &[u64], capacity: Option<u64>) -> bool {
    let b = &problem.buffers;
    offsets.len() == b.len()
        && (0..b.len()).all(|i| {
            offsets[i].is_multiple_of(b[i].align.max(1))
                && capacity.is_none_or(|c| offsets[i] + b[i].size <= c)
                && (0..i).all(|j| {
                    !b[i].overlaps_in_time(&b[j])
                        || b[i].size == 0
                        || b[j].size == 0
                        || offsets[i] + b[i].size <= offsets[j]
                        || offsets[j] + b[j].size <= offsets[i]
                })
        })
}

/// Asserts the outcome's solution (if any) is valid for `problem` within `capacity`.
fn assert_valid(problem: &Problem, outcome: &SearchOutcome, capacity: Option<u64>) {
    if let Some(s) = &outcome.solution {
        assert!(
            valid(problem, &s.offsets, capacity),
            "invalid solution {s:?} for {problem:?}"
        );
        let mut capped = problem.clone();
        capped.capacity = capacity;
        assert_eq!(
            verify(&capped, s),
            Ok(()),
            "verify rejects {s:?} for {problem:?}"
        );
    }
}

/// The smallest arena by exhaustive search over every aligned offset below the naive size.
fn brute_force_optimum(problem: &Problem) -> u64 {
    fn go(problem: &Problem, offsets: &mut Vec<u64>, height: u64, best: &mut u64) {
        let k = offsets.len();
        if k == problem.len() {
            *best = (*best).min(height);
            return;
        }
        let b = &problem.buffers[k];
        let mut offset = 0;
        while offset + b.size < *best {
            let clash = (0..k).any(|j| {
                let o = &problem.buffers[j];
                b.overlaps_in_time(o)
                    && offset < offsets[j] + o.size
                    && offsets[j] < offset + b.size
            });
            if !clash {
                offsets.push(offset);
                go(problem, offsets, height.max(offset + b.size), best);
                offsets.pop();
            }
            offset += b.align;
        }
    }
    let naive: u64 = problem.buffers.iter().map(|b| b.size + b.align).sum();
    let mut best = naive + 1;
    go(problem, &mut Vec::new(), 0, &mut best);
    best
}

fn minimize(problem: &Problem) -> SearchOutcome {
    minimize_options(problem, None)
}

/// Minimize mode from `incumbent` (used only when it is valid).
fn minimize_from(problem: &Problem, incumbent: Solution) -> SearchOutcome {
    minimize_options(problem, Some(incumbent))
}

fn minimize_options(problem: &Problem, incumbent: Option<Solution>) -> SearchOutcome {
    search(
        problem,
        &SearchOptions::default()
            .with_time_limit(LIMIT)
            .with_node_limit(None)
            .with_capacity(None)
            .with_incumbent(incumbent)
            .with_minimize(true)
            .with_gap(Gap::ZERO)
            .with_threads(0),
    )
}

fn decide(problem: &Problem, capacity: u64) -> SearchOutcome {
    let options = SearchOptions::default()
        .with_time_limit(LIMIT)
        .with_node_limit(None)
        .with_capacity(Some(capacity))
        .with_incumbent(None)
        .with_minimize(false)
        .with_gap(Gap::ZERO)
        .with_threads(0);
    search(problem, &options)
}

fn arena(problem: &Problem, outcome: &SearchOutcome) -> Option<u64> {
    outcome.solution.as_ref().map(|s| s.arena_size(problem))
}

#[test]
fn minimize_matches_brute_force() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for case in 0..400 {
        let problem = random_problem(&mut rng, 6, case % 2 == 1);
        let optimum = brute_force_optimum(&problem);
        let outcome = minimize(&problem);
        assert_valid(&problem, &outcome, None);
        assert_eq!(
            arena(&problem, &outcome),
            Some(optimum),
            "case {case}: {problem:?}"
        );
        assert!(outcome.proven_optimal, "case {case}");
        assert!(outcome.lower_bound <= optimum, "case {case}");
    }
}

#[test]
fn decision_matches_brute_force() {
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    for case in 0..400 {
        let problem = random_problem(&mut rng, 6, case % 3 == 0);
        let optimum = brute_force_optimum(&problem);
        for capacity in optimum.saturating_sub(2)..=optimum + 1 {
            let outcome = decide(&problem, capacity);
            assert_valid(&problem, &outcome, Some(capacity));
            let fits = capacity >= optimum;
            assert_eq!(
                outcome.solution.is_some(),
                fits,
                "case {case} capacity {capacity}"
            );
            assert_eq!(
                outcome.proven_infeasible, !fits,
                "case {case} capacity {capacity}"
            );
        }
    }
}

/// Minimize mode under a capacity, with no incumbent: the optimum whenever it fits (the climb
/// from the bound and the bisection from the capacity run side by side), proven infeasible
/// otherwise, on one thread and on two.
#[test]
fn minimize_under_a_capacity_matches_brute_force() {
    let mut rng = Rng(0x0bad_cafe_f00d);
    for case in 0..200 {
        let problem = random_problem(&mut rng, 6, case % 2 == 0);
        let optimum = brute_force_optimum(&problem);
        for capacity in [optimum.saturating_sub(1), optimum, optimum + 3, 2 * optimum] {
            for threads in [1, 2] {
                let options = SearchOptions::default()
                    .with_time_limit(LIMIT)
                    .with_node_limit(None)
                    .with_capacity(Some(capacity))
                    .with_incumbent(None)
                    .with_minimize(true)
                    .with_gap(Gap::ZERO)
                    .with_threads(threads);
                let outcome = search(&problem, &options);
                assert_valid(&problem, &outcome, Some(capacity));
                let context = format!("case {case} capacity {capacity} threads {threads}");
                if capacity >= optimum {
                    assert_eq!(arena(&problem, &outcome), Some(optimum), "{context}");
                    assert!(outcome.proven_optimal, "{context}");
                } else {
                    assert!(outcome.solution.is_none(), "{context}");
                    assert!(outcome.proven_infeasible, "{context}");
                }
            }
        }
    }
}

#[test]
fn seven_buffers_match_brute_force() {
    let mut rng = Rng(0x5eed_0007);
    for case in 0..60 {
        let problem = random_problem(&mut rng, 7, case % 2 == 0);
        let optimum = brute_force_optimum(&problem);
        let outcome = minimize(&problem);
        assert_valid(&problem, &outcome, None);
        assert_eq!(
            arena(&problem, &outcome),
            Some(optimum),
            "case {case}: {problem:?}"
        );
    }
}

/// Medium instances (too big for brute force): the best arena must be consistent with the
/// bounds and, when proven optimal, with decision mode on both sides. Proving optimality is
/// hard on some of these (the optimum above the load bound), so minimize gets a short limit.
#[test]
fn medium_instances_are_consistent() {
    let mut rng = Rng(0xfeed_beef);
    for case in 0..30 {
        let n = 12 + rng.below(20);
        let buffers = (0..n)
            .map(|_| {
                let start = rng.below(30);
                let end = start + 1 + rng.below(10);
                let size = 1 + rng.below(16);
                let align = if case % 4 == 0 { 1 << rng.below(3) } else { 1 };
                Buffer {
                    start,
                    end,
                    size,
                    align,
                }
            })
            .collect();
        let problem = Problem::new(buffers);
        // A node budget, not the clock, so the test does the same work on any machine.
        let options = SearchOptions::default()
            .with_time_limit(LIMIT)
            .with_node_limit(Some(20_000))
            .with_capacity(None)
            .with_incumbent(None)
            .with_minimize(true)
            .with_gap(Gap::ZERO)
            .with_threads(0);
        let outcome = search(&problem, &options);
        assert_valid(&problem, &outcome, None);
        let best = arena(&problem, &outcome).unwrap_or_else(|| panic!("case {case}: no solution"));
        assert!(
            memplan_packing::lower_bound(&problem) <= best,
            "case {case}"
        );
        assert!(outcome.lower_bound <= best, "case {case}");
        if outcome.proven_optimal {
            assert!(decide(&problem, best - 1).solution.is_none(), "case {case}");
            let at = decide(&problem, best);
            assert_valid(&problem, &at, Some(best));
            assert!(at.solution.is_some(), "case {case}");
        }
    }
}

#[test]
fn touching_lifetimes_share_bytes() {
    let problem = Problem::new(vec![Buffer::new(0, 3, 8), Buffer::new(3, 6, 8)]);
    let outcome = minimize(&problem);
    assert_eq!(arena(&problem, &outcome), Some(8));
    assert!(outcome.proven_optimal);
}

#[test]
fn alignment_rounds_offsets_up() {
    let mut b = Buffer::new(0, 2, 4);
    b.align = 16;
    let problem = Problem::new(vec![Buffer::new(0, 2, 3), b]);
    let outcome = minimize(&problem);
    assert_valid(&problem, &outcome, None);
    // `a` at 0 and `b` at 16 (20), or `b` at 0 and `a` at 4 (7).
    assert_eq!(arena(&problem, &outcome), Some(7));
}

#[test]
fn zero_sized_buffers_sit_at_zero() {
    let problem = Problem::new(vec![
        Buffer::new(0, 4, 0),
        Buffer::new(0, 4, 3),
        Buffer::new(1, 3, 1),
    ]);
    let outcome = minimize(&problem);
    assert_valid(&problem, &outcome, None);
    assert_eq!(
        outcome.solution,
        Some(Solution {
            offsets: vec![0, 0, 3]
        })
    );
    assert!(outcome.proven_optimal);
}

#[test]
fn empty_live_intervals_do_not_panic() {
    // Not a valid problem (`Problem::validate` rejects it), but the search must not panic:
    // such a buffer conflicts with nothing and is put at offset 0.
    let problem = Problem::new(vec![Buffer::new(2, 2, 5), Buffer::new(0, 4, 3)]);
    let outcome = minimize(&problem);
    assert_eq!(
        outcome.solution,
        Some(Solution {
            offsets: vec![0, 0]
        })
    );
    assert!(decide(&problem, 4).proven_infeasible);
}

#[test]
fn lower_bound_off_the_grain_still_terminates() {
    // The empty-interval buffer (invalid input, handled anyway) sets the bound to 10, which
    // is not a multiple of the other sizes' grain 4.
    let problem = Problem::new(vec![
        Buffer::new(0, 2, 4),
        Buffer::new(0, 2, 4),
        Buffer::new(1, 1, 10),
    ]);
    let incumbent = Solution {
        offsets: vec![0, 12, 0],
    };
    let outcome = minimize_from(&problem, incumbent);
    assert_eq!(arena(&problem, &outcome), Some(10));
    assert!(outcome.proven_optimal);
}

#[test]
fn empty_problem() {
    let problem = Problem::new(Vec::new());
    let outcome = minimize(&problem);
    assert_eq!(
        outcome.solution,
        Some(Solution {
            offsets: Vec::new()
        })
    );
    assert!(outcome.proven_optimal);
}

#[test]
fn capacity_below_the_peak_is_infeasible() {
    let problem = Problem::new(vec![Buffer::new(0, 4, 6), Buffer::new(2, 5, 6)]);
    let outcome = decide(&problem, 11);
    assert!(outcome.proven_infeasible && outcome.solution.is_none());
    assert_valid(&problem, &decide(&problem, 12), Some(12));
}

#[test]
fn problem_capacity_is_respected_in_minimize_mode() {
    let mut problem = Problem::new(vec![Buffer::new(0, 4, 6), Buffer::new(2, 5, 6)]);
    problem.capacity = Some(11);
    let outcome = minimize(&problem);
    assert!(outcome.proven_infeasible && outcome.solution.is_none());
}

#[test]
fn invalid_incumbent_is_ignored_and_valid_one_is_improved() {
    let problem = Problem::new(vec![
        Buffer::new(0, 4, 4),
        Buffer::new(2, 6, 4),
        Buffer::new(5, 9, 4),
    ]);
    let clash = Solution {
        offsets: vec![0, 0, 0],
    };
    let outcome = minimize_from(&problem, clash);
    assert_valid(&problem, &outcome, None);
    assert_eq!(arena(&problem, &outcome), Some(8));

    let loose = Solution {
        offsets: vec![0, 4, 8],
    };
    let outcome = minimize_from(&problem, loose);
    assert_eq!(arena(&problem, &outcome), Some(8));
    assert!(outcome.proven_optimal);
}

#[test]
fn results_are_deterministic() {
    let mut rng = Rng(42);
    for _ in 0..50 {
        let problem = random_problem(&mut rng, 6, true);
        let first = minimize(&problem);
        let second = minimize(&problem);
        assert_eq!(first.solution, second.solution);
        assert_eq!(first.nodes, second.nodes);
    }
}

#[test]
fn huge_instance_returns_the_incumbent_quickly() {
    // Every buffer overlaps every other: far more pairs than the search indexes.
    let n = 20_000u64;
    let buffers: Vec<Buffer> = (0..n).map(|i| Buffer::new(i, n + 1 + i, 1)).collect();
    let problem = Problem::new(buffers);
    let incumbent = Solution {
        offsets: (0..n).collect(),
    };
    let outcome = minimize_from(&problem, incumbent.clone());
    assert_eq!(outcome.solution, Some(incumbent));
    assert!(!outcome.proven_infeasible);
}

fn benchmark(name: &str) -> Problem {
    let path = format!(
        "{}/../../testdata/benchmarks/minimalloc/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    csv::read(&text)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .problem
}

#[test]
fn input_12_fits_capacity_12() {
    let problem = benchmark("input.12.csv");
    let outcome = decide(&problem, 12);
    assert_valid(&problem, &outcome, Some(12));
    assert!(outcome.solution.is_some());
    let outcome = minimize(&problem);
    assert_eq!(arena(&problem, &outcome), Some(12));
    assert!(outcome.proven_optimal);
    assert!(decide(&problem, 11).proven_infeasible);
}

#[test]
fn challenging_instances_fit_in_decision_mode() {
    for name in ["A.1048576.csv", "J.1048576.csv"] {
        let problem = benchmark(name);
        let outcome = decide(&problem, 1_048_576);
        assert!(outcome.solution.is_some(), "{name} did not fit");
        assert_valid(&problem, &outcome, Some(1_048_576));
    }
}

#[test]
fn challenging_c_minimizes_to_its_lower_bound() {
    let problem = benchmark("C.1048576.csv");
    let outcome = minimize(&problem);
    assert_valid(&problem, &outcome, None);
    assert_eq!(arena(&problem, &outcome), Some(1_039_360));
    assert!(outcome.proven_optimal);
}

/// With a node budget (and a clock that never runs out) the search stops at the same place
/// on every run and every machine: the same nodes, the same arena, the same offsets.
#[test]
fn a_node_limit_makes_minimize_reproducible() {
    let problem = benchmark("D.1048576.csv");
    let options = SearchOptions::default()
        .with_time_limit(LIMIT)
        .with_node_limit(Some(3_000))
        .with_capacity(None)
        .with_incumbent(None)
        .with_minimize(true)
        .with_gap(Gap::ZERO)
        .with_threads(2);
    let first = search(&problem, &options);
    // One thread runs the climb and the bisection one after the other, two side by side:
    // the same outcome.
    let second = search(
        &problem,
        &options
            .clone()
            .with_threads(if options.threads == 1 { 2 } else { 1 }),
    );
    assert_valid(&problem, &first, None);
    assert!(first.solution.is_some());
    assert!(
        !first.proven_optimal,
        "D is not proven optimal within 3,000 nodes"
    );
    assert_eq!(first, second);
    // The budget bounds the work: each run stops within one node of it.
    assert!(first.nodes <= 3_000, "{} nodes", first.nodes);
}

/// Where the optimum is the lower bound, minimize mode's climb fits there and proves it, and
/// the bisection beside it stops: one thread and two give the same outcome, node count
/// included (the count is that of the climb, whose answer it is).
#[test]
fn the_climb_proves_the_bound_on_one_thread_or_two() {
    for name in ["K.1048576.csv", "G.1048576.csv"] {
        let problem = benchmark(name);
        let bound = memplan_packing::lower_bound(&problem);
        // A heuristic incumbent above the bound, so that the climb and the bisection run.
        let incumbent = run_heuristic(&problem, Strategy::GreedySize).expect("valid");
        assert!(incumbent.arena_size(&problem) > bound, "{name}");
        let outcomes: Vec<SearchOutcome> = [1, 2]
            .into_iter()
            .map(|threads| {
                search(
                    &problem,
                    &SearchOptions::default()
                        .with_time_limit(LIMIT)
                        .with_node_limit(Some(200_000))
                        .with_incumbent(Some(incumbent.clone()))
                        .with_threads(threads),
                )
            })
            .collect();
        let [one, two] = outcomes.as_slice() else {
            unreachable!("two outcomes")
        };
        assert_valid(&problem, one, None);
        assert_eq!(arena(&problem, one), Some(bound), "{name}");
        assert!(one.proven_optimal, "{name}");
        assert_eq!(one, two, "{name}");
    }
}
