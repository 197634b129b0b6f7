//! Reordering search ("squeaky wheel"): better placement orders for best fit, on problems
//! too large for the exact search.
//!
//! Best fit is only as good as its order, and no fixed order is best on every instance. So,
//! starting from the order of a best-fit heuristic and its solution, each *round* moves the
//! buffers that ended up high earlier in the order and places everything again: a buffer
//! whose top is above the lower bound `L` moves `alpha · n · (top − L) / (H − L)` positions
//! forward, `H` being that solution's arena, so the buffers at the peak move most. The new
//! solution is the base of the next round. Rounds come in *chains* of [`CHAIN`]: each chain
//! starts again from the best solution seen, with the next step size `alpha` from
//! [`ALPHAS`] (a bad round does not lead the search astray for long, and small and large
//! moves are both tried). The best solution over all rounds is kept.
//!
//! One chain runs per starting order, on its own thread when there are several; the winner
//! is the smallest arena, the first starting order on ties. A round costs one best-fit
//! placement of every buffer (`O(n log n)`), and what it costs in time depends on the
//! instance as much as on `n` (long lifetimes make long queries), so each start's share of
//! the budget, counted in the placement index's work ([`crate::timeline`]), buys as many
//! rounds as its own first placement's work fits: a deterministic count, not the clock, so
//! the result depends only on the input. The clock is checked between rounds as a safety
//! net. A start's chains stop after [`STALE_ROUNDS`] rounds in a row without gain, and a
//! start behind the leader (the start of the smallest arena) after [`PROBE_ROUNDS`] rounds
//! unless they took it below the leader's arena and the best arena found before the search:
//! what such a start finds counts only where it overtakes both, and on the generator family
//! it does so within two rounds or not at all, while the leader's own gains come as late as
//! its sixth round. So the search's cost follows its gains: 10-37% less work over the whole
//! solve where it runs from several starts, with the same arenas (`docs/MEASUREMENTS.md`,
//! 2026-11-28, fourth session). A start's last round (the last its share pays for, the last
//! stale one, the last of a probe) counts only if it gains, so it is given up as soon as its
//! arena reaches the best one: 9-24% less work in the search on the heavy-tailed 30k
//! instances and `iopddl_S_1`/`somas_pangu_2.6B`, with the same answers (sixth session).
//!
//! (Measured on heavy-tailed generated instances and the idealloc ones, see
//! `docs/MEASUREMENTS.md`: the orders of `greedy-lifetime` and `greedy-breadth` gain most,
//! e.g. `iopddl_S_1` from 1.016 to 1.003 times its lower bound.)

use std::time::Instant;

use super::greedy::{GiveUp, Order, Scratch, best_fit_in, best_fit_within, placement_order};
use super::problem::{Problem, ProblemError, Solution};
use super::strategy::run_portfolio;
use super::timeline::TimeSlots;

/// Rounds per chain: the first round moves the best solution's order, the next ones move
/// their predecessor's.
const CHAIN: usize = 2;

/// The step sizes of successive chains, in thousandths of `n` positions for a buffer at the
/// peak (cycled).
const ALPHAS: [u64; 6] = [200, 100, 300, 50, 500, 150];

/// Where a reordering search starts: a best-fit order, the solution it gave and the work
/// that placement did in the index (the cost of one round from it).
#[derive(Debug)]
pub(crate) struct Start {
    pub order: Order,
    pub solution: Solution,
    pub work: u64,
}

/// The best solution the reordering search found, if it beat every start.
#[derive(Debug)]
pub(crate) struct Reordered {
    pub solution: Solution,
    pub arena: u64,
}

/// What a reordering search did: the best solution it found, if it beat every start, and the
/// rounds it ran.
#[derive(Debug, Default)]
pub(crate) struct Searched {
    pub best: Option<Reordered>,
    pub rounds: u64,
    /// Each start's rounds and the best arena its chains found, if any beat that start.
    pub per_start: Vec<(u64, Option<u64>)>,
}

/// A start's search stops once this many rounds in a row have gained nothing: the budget is
/// an upper bound, and a search that has stopped gaining rarely starts again (measured on the
/// generator family and the idealloc instances: `docs/MEASUREMENTS.md`).
const STALE_ROUNDS: usize = 6;

/// A start whose arena is above the smallest of the starts' (the leader's) stops after this
/// many rounds unless one of them went below the leader's arena and the incumbent (the best
/// arena before the search): its rounds pay off only where they overtake both, and those
/// that do, do so early.
const PROBE_ROUNDS: u64 = 3;

/// Whether a reordering search is worth starting from `order` when other best-fit orders are
/// at hand. Not from size order: moving the peak's buffers earlier mostly reshuffles
/// buffers of similar size, and its rounds are the slowest (its packings are the most
/// fragmented). Measured on `iopddl_S_1`: eight rounds from size order lower the arena from
/// 1.0157 to 1.0151 times the bound at 2 to 3 times the cost of a round from lifetime
/// order, whose first round reaches 1.0025.
pub(crate) fn worth_starting(order: Order) -> bool {
    !matches!(order, Order::Size(_))
}

/// Runs the reordering search from each start for as many rounds as its share of `budget`
/// (units of index work, split evenly between the starts) pays for (see the module docs), on
/// up to `threads` threads (0: every core). `bounds` is the lower bound, which the moves
/// measure from, the arena at or below which a chain stops (the bound itself, or more
/// with a gap), and the incumbent: the best arena found before the search (a start behind
/// the leader must go below it and below the leader's within its probe). Returns the best
/// solution found when it is smaller than every start's, the rounds run and the index work
/// they did. A start's search also stops after [`STALE_ROUNDS`] rounds in a row that gained
/// nothing, and one behind the leader after [`PROBE_ROUNDS`] rounds that did not overtake
/// it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn reorder(
    problem: &Problem,
    slots: &TimeSlots,
    (bound, accepted, incumbent): (u64, u64, u64),
    starts: &[Start],
    budget: u64,
    threads: usize,
    scratch: &mut Vec<Scratch>,
    deadline: Instant,
) -> Result<(Searched, u64), ProblemError> {
    let arena_of = |s: &Solution| s.arena_size(problem);
    let Some(floor) = starts.iter().map(|s| arena_of(&s.solution)).min() else {
        return Ok((Searched::default(), 0));
    };
    let share = budget / (starts.len() as u64).max(1);
    // The first start with the smallest arena: the others must beat it soon (see
    // [`PROBE_ROUNDS`]).
    let leader = starts
        .iter()
        .position(|s| arena_of(&s.solution) == floor)
        .unwrap_or(0);
    let results = run_portfolio(
        starts.len(),
        threads,
        scratch,
        |scratch, i| match starts.get(i) {
            Some(start) => {
                let rounds = usize::try_from(share / start.work.max(1)).unwrap_or(usize::MAX);
                let probe = (i != leader).then_some(floor.min(incumbent));
                chain(
                    problem,
                    slots,
                    (bound, accepted),
                    start,
                    (rounds, probe),
                    scratch,
                    deadline,
                )
            }
            None => Ok((None, 0, 0)),
        },
        |_| false,
    );
    let mut searched = Searched::default();
    let mut spent = 0u64;
    for result in results.into_iter().flatten() {
        let (found, rounds, work) = result?;
        searched
            .per_start
            .push((rounds, found.as_ref().map(|f| f.1)));
        searched.rounds += rounds;
        spent = spent.saturating_add(work);
        if let Some((solution, arena)) = found
            && arena < floor
            && searched.best.as_ref().is_none_or(|b| arena < b.arena)
        {
            searched.best = Some(Reordered { solution, arena });
        }
    }
    Ok((searched, spent))
}

/// What one start's chains give: the best solution and its arena if any beat the start, the
/// rounds run and the index work they did.
type Chained = (Option<(Solution, u64)>, u64, u64);

/// The chains from one start: the best solution they found and its arena, if any beat the
/// start, the rounds run and the index work they did.
fn chain(
    problem: &Problem,
    slots: &TimeSlots,
    (bound, accepted): (u64, u64),
    start: &Start,
    (rounds, probe): (usize, Option<u64>),
    scratch: &mut Scratch,
    deadline: Instant,
) -> Result<Chained, ProblemError> {
    let mut best_ids = placement_order(problem, slots, start.order);
    let mut best_arena = start.solution.arena_size(problem);
    let mut found: Option<Solution> = None;
    let mut ids = Vec::with_capacity(best_ids.len());
    let mut keyed = Vec::with_capacity(best_ids.len());
    // The solution the next round's order comes from (`None`: the best one).
    let mut base: Option<Solution> = None;
    let (mut ran, mut work, mut stale) = (0u64, 0u64, 0usize);
    for round in 0..rounds {
        // A start behind the leader that has not overtaken it (and the incumbent) within its
        // probe stops there.
        let behind = probe.is_some_and(|floor| best_arena >= floor && ran >= PROBE_ROUNDS);
        if accepted >= best_arena || Instant::now() >= deadline || stale >= STALE_ROUNDS || behind {
            break;
        }
        let alpha = ALPHAS
            .get((round / CHAIN) % ALPHAS.len())
            .copied()
            .unwrap_or(0);
        if round % CHAIN == 0 {
            base = None;
            ids.clone_from(&best_ids);
        }
        let from = base.as_ref().or(found.as_ref()).unwrap_or(&start.solution);
        squeak(problem, bound, from, alpha, &mut ids, &mut keyed);
        // A round after which the start stops unless it gains (its last, its last stale
        // one, or the last of a probe that has not overtaken) is given up as soon as its
        // arena reaches the best one: only a gain would be kept, and no later round reads
        // it. Any other round is the base of the next one, so it runs to its end.
        let last_unless_gain = round + 1 == rounds
            || stale + 1 >= STALE_ROUNDS
            || probe.is_some_and(|floor| best_arena >= floor && ran + 1 >= PROBE_ROUNDS);
        #[cfg(test)]
        let last_unless_gain = last_unless_gain
            && !tests::RUN_LAST_ROUNDS_OUT.load(std::sync::atomic::Ordering::Relaxed);
        let give_up = GiveUp {
            work: u64::MAX,
            above: best_arena.saturating_sub(1),
            after: 0,
        };
        let placed = if last_unless_gain {
            best_fit_within(problem, slots, &ids, scratch, give_up)?
        } else {
            Some(best_fit_in(problem, slots, &ids, scratch)?)
        };
        ran += 1;
        work = work.saturating_add(scratch.work());
        let Some(solution) = placed else {
            // It would have gained nothing, and it was the last.
            break;
        };
        let arena = solution.arena_size(problem);
        if arena < best_arena {
            best_arena = arena;
            best_ids.clone_from(&ids);
            found = Some(solution.clone());
            stale = 0;
        } else {
            stale += 1;
        }
        base = Some(solution);
    }
    Ok((found.map(|s| (s, best_arena)), ran, work))
}

/// Moves the buffers of `ids` (the order that gave `solution`) forward by how far their top
/// is above `bound`, relative to the arena: `alpha / 1000 · n` positions at the arena.
fn squeak(
    problem: &Problem,
    bound: u64,
    solution: &Solution,
    alpha: u64,
    ids: &mut Vec<u32>,
    keyed: &mut Vec<(i128, u32)>,
) {
    let arena = solution.arena_size(problem);
    let Some(over) = arena.checked_sub(bound).filter(|&o| o > 0) else {
        return;
    };
    let n = ids.len() as u128;
    keyed.clear();
    keyed.extend((0i128..).zip(ids.iter()).map(|(pos, &id)| {
        let i = id as usize;
        let top = match (solution.offsets.get(i), problem.buffers.get(i)) {
            (Some(&offset), Some(b)) => offset.saturating_add(b.size),
            _ => 0,
        };
        let above = u128::from(top.saturating_sub(bound));
        let shift = u128::from(alpha) * n * above / (1000 * u128::from(over));
        (pos - i128::try_from(shift).unwrap_or(i128::MAX), id)
    }));
    keyed.sort_unstable();
    ids.clear();
    ids.extend(keyed.iter().map(|&(_, id)| id));
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::generate::heavy_tailed;
    use crate::strategy::Strategy;
    use crate::{lower_bound, verify};

    fn starts(problem: &Problem, slots: &TimeSlots) -> Vec<Start> {
        [Strategy::GreedyLifetime, Strategy::GreedyBreadth]
            .into_iter()
            .filter_map(|s| s.best_fit_order())
            .map(|order| {
                let mut scratch = Scratch::default();
                let solution =
                    crate::greedy::best_fit(problem, slots, order, &mut scratch).expect("valid");
                Start {
                    order,
                    solution,
                    work: scratch.work(),
                }
            })
            .collect()
    }

    /// Runs every round to its end, last rounds too (for comparing; the answer is the same).
    pub(super) static RUN_LAST_ROUNDS_OUT: std::sync::atomic::AtomicBool =
        std::sync::atomic::AtomicBool::new(false);

    /// A start's last round (its budget's, its last stale one, its probe's) is given up once
    /// its arena reaches the best one, and the search finds what running it out finds: the
    /// same solution, rounds and per-start results, for less work.
    #[test]
    fn last_rounds_given_up_at_the_best_arena_change_nothing() {
        let far = Instant::now() + Duration::from_secs(600);
        let mut saved = 0;
        for (n, seed, rounds) in [(3000, 7, 3), (3000, 11, 12), (4000, 5, 5)] {
            let problem = heavy_tailed(n, seed);
            let slots = TimeSlots::new(&problem);
            let bound = lower_bound(&problem);
            let starts = starts(&problem, &slots);
            let budget = rounds_budget(&starts, rounds);
            let run = || {
                reorder(
                    &problem,
                    &slots,
                    (bound, bound, u64::MAX),
                    &starts,
                    budget,
                    1,
                    &mut Vec::new(),
                    far,
                )
                .expect("valid")
            };
            let (early, early_work) = run();
            RUN_LAST_ROUNDS_OUT.store(true, std::sync::atomic::Ordering::Relaxed);
            let (full, full_work) = run();
            RUN_LAST_ROUNDS_OUT.store(false, std::sync::atomic::Ordering::Relaxed);
            let context = format!("{n}/{seed}, {rounds} rounds");
            assert_eq!(early.rounds, full.rounds, "{context}");
            assert_eq!(early.per_start, full.per_start, "{context}");
            let answer = |s: &Searched| s.best.as_ref().map(|b| (b.solution.clone(), b.arena));
            assert_eq!(answer(&early), answer(&full), "{context}");
            if let Some(best) = &early.best {
                verify(&problem, &best.solution).expect("valid");
            }
            assert!(early_work <= full_work, "{context}");
            saved += u64::from(early_work < full_work);
        }
        assert!(saved >= 2, "only {saved} searches gave a last round up");
    }

    /// A budget that pays for at least `rounds` rounds from every start.
    fn rounds_budget(starts: &[Start], rounds: u64) -> u64 {
        let most = starts.iter().map(|s| s.work).max().unwrap_or(0);
        rounds * most * starts.len() as u64
    }

    /// On heavy-tailed problems the search beats every start, its answer passes the
    /// verifier, and the thread count does not change it.
    #[test]
    fn reordering_beats_its_starts_and_is_deterministic() {
        let far = Instant::now() + Duration::from_secs(600);
        for (n, seed) in [(6000, 42), (3000, 7)] {
            let problem = heavy_tailed(n, seed);
            let slots = TimeSlots::new(&problem);
            let bound = lower_bound(&problem);
            let starts = starts(&problem, &slots);
            let floor = starts
                .iter()
                .map(|s| s.solution.arena_size(&problem))
                .min()
                .unwrap_or(0);
            let budget = rounds_budget(&starts, 4);
            let on_threads = |threads| {
                let mut scratch = Vec::new();
                reorder(
                    &problem,
                    &slots,
                    (bound, bound, u64::MAX),
                    &starts,
                    budget,
                    threads,
                    &mut scratch,
                    far,
                )
                .expect("valid")
                .0
                .best
            };
            let (one, two) = (on_threads(1), on_threads(2));
            let found = one.expect("a better order on a heavy-tailed problem");
            assert!(found.arena < floor, "{n}: {} vs {floor}", found.arena);
            assert!(found.arena >= bound);
            assert_eq!(found.solution.arena_size(&problem), found.arena);
            verify(&problem, &found.solution).expect("reordered solution is valid");
            let two = two.expect("the same answer on two threads");
            assert_eq!(two.solution, found.solution, "{n}: thread count changed it");
        }
    }

    /// A start behind the leader (the start of the smallest arena) runs at most
    /// [`PROBE_ROUNDS`] rounds unless its chains go below the leader's arena and the
    /// incumbent; the leader's chains are bounded only by the budget and [`STALE_ROUNDS`].
    #[test]
    fn starts_behind_the_leader_stop_after_their_probe() {
        let far = Instant::now() + Duration::from_secs(600);
        let mut probed = 0;
        for (n, seed) in [(6000, 42), (3000, 7), (3000, 11), (4000, 5)] {
            let problem = heavy_tailed(n, seed);
            let slots = TimeSlots::new(&problem);
            let bound = lower_bound(&problem);
            let mut starts = starts(&problem, &slots);
            let area = Order::Area;
            let mut scratch = Scratch::default();
            let solution =
                crate::greedy::best_fit(&problem, &slots, area, &mut scratch).expect("valid");
            starts.push(Start {
                order: area,
                solution,
                work: scratch.work(),
            });
            let arenas: Vec<u64> = starts
                .iter()
                .map(|s| s.solution.arena_size(&problem))
                .collect();
            let floor = arenas.iter().copied().min().unwrap_or(0);
            let leader = arenas.iter().position(|&a| a == floor).unwrap_or(0);
            let budget = rounds_budget(&starts, 12);
            // The incumbent above every start, then below them all (as when a heuristic that
            // is not a start, such as `greedy-size`, did best).
            for incumbent in [u64::MAX, bound] {
                let target = floor.min(incumbent);
                let (searched, _) = reorder(
                    &problem,
                    &slots,
                    (bound, bound, incumbent),
                    &starts,
                    budget,
                    2,
                    &mut Vec::new(),
                    far,
                )
                .expect("valid");
                assert_eq!(searched.per_start.len(), starts.len());
                for (i, &(rounds, found)) in searched.per_start.iter().enumerate() {
                    if i == leader || found.is_some_and(|a| a < target) {
                        continue;
                    }
                    assert!(
                        rounds <= PROBE_ROUNDS,
                        "{n}/{seed}, start {i} of {arenas:?}, incumbent {incumbent}: \
                         {rounds} rounds, found {found:?}"
                    );
                    probed += 1;
                }
                let leader_rounds = searched.per_start.get(leader).map_or(0, |s| s.0);
                assert!(leader_rounds > PROBE_ROUNDS, "{n}/{seed}: {leader_rounds}");
            }
        }
        assert!(probed > 0, "no start was stopped by its probe");
    }

    /// No rounds, or a start already at the bound: nothing to report.
    #[test]
    fn nothing_found_without_rounds_or_room() {
        let far = Instant::now() + Duration::from_secs(600);
        let problem = heavy_tailed(2000, 3);
        let slots = TimeSlots::new(&problem);
        let starts = starts(&problem, &slots);
        let bound = lower_bound(&problem);
        assert!(
            reorder(
                &problem,
                &slots,
                (bound, bound, u64::MAX),
                &starts,
                0,
                1,
                &mut Vec::new(),
                far
            )
            .expect("valid")
            .0
            .best
            .is_none()
        );
        let first = starts.get(..1).unwrap_or_default();
        let top = first
            .iter()
            .map(|s| s.solution.arena_size(&problem))
            .min()
            .unwrap_or(0);
        assert!(
            reorder(
                &problem,
                &slots,
                (top, top, u64::MAX),
                first,
                rounds_budget(first, 4),
                1,
                &mut Vec::new(),
                far
            )
            .expect("valid")
            .0
            .best
            .is_none()
        );
        assert!(
            reorder(
                &problem,
                &slots,
                (bound, bound, u64::MAX),
                &[],
                1 << 40,
                1,
                &mut Vec::new(),
                far
            )
            .expect("valid")
            .0
            .best
            .is_none()
        );
    }

    /// Squeaking moves the buffers above the bound forward, the highest most, and keeps
    /// every id once.
    #[test]
    fn squeak_moves_high_buffers_forward() {
        let problem = Problem::new(vec![
            crate::Buffer::new(0, 2, 10),
            crate::Buffer::new(0, 2, 10),
            crate::Buffer::new(0, 2, 10),
            crate::Buffer::new(0, 2, 10),
        ]);
        // Stacked a, b, c, d bottom up: the arena is 40; with a bound of 20, c is 10 above
        // and d 20 above it.
        let solution = Solution {
            offsets: vec![0, 10, 20, 30],
        };
        let (mut ids, mut keyed) = (vec![0, 1, 2, 3], Vec::new());
        // Step 1000: a buffer at the arena moves n = 4 positions, c 2.
        squeak(&problem, 20, &solution, 1000, &mut ids, &mut keyed);
        assert_eq!(ids, vec![3, 0, 2, 1]);
        // A solution at the bound moves nothing.
        let mut ids = vec![3, 2, 1, 0];
        squeak(&problem, 40, &solution, 1000, &mut ids, &mut keyed);
        assert_eq!(ids, vec![3, 2, 1, 0]);
    }
}
