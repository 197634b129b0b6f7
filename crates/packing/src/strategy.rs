//! The named strategies a user can ask for, and the runner for the heuristic ones.
//!
//! Every heuristic is deterministic: the same problem gives the same offsets, because each
//! order is a total sort key ending in the buffer id and no hash order reaches the output.

use std::fmt;
use std::num::NonZeroUsize;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::first_fit::first_fit_by_time;
use super::greedy::{GiveUp, Order, Scratch, TieBreak, best_fit, best_fit_within, placement_order};
use super::problem::{Problem, ProblemError, Solution, align_up};
use super::split::{Split, long_short, long_short_with};
use super::timeline::TimeSlots;

/// Declares [`Strategy`], [`Strategy::ALL`] and [`Strategy::name`] from one list, so a new
/// strategy is named in one place; what it does is then asked for by the exhaustive matches
/// in [`Strategy::best_fit_order`] and [`run_on`].
macro_rules! strategies {
    ($($(#[$attr:meta])* $variant:ident = $name:literal,)*) => {
        /// How to place buffers. Names (for [`FromStr`] and [`fmt::Display`]) are in kebab
        /// case: `naive`, `greedy-size`, `greedy-lifetime`, `greedy-area`, `greedy-breadth`,
        /// `first-fit-time`, `auto`.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Strategy {
            $($(#[$attr])* $variant,)*
        }

        impl Strategy {
            /// Every strategy, in the order the names are listed.
            pub const ALL: [Strategy; [$($name),*].len()] = [$(Strategy::$variant),*];

            /// The strategy's name.
            pub fn name(self) -> &'static str {
                match self {
                    $(Strategy::$variant => $name,)*
                }
            }
        }
    };
}

strategies! {
    /// Side by side in id order, each offset aligned, no reuse.
    Naive = "naive",
    /// Best fit, largest first; equal sizes by [`TieBreak::EarlierStart`].
    GreedySize = "greedy-size",
    /// Best fit, longest lifetime first.
    GreedyLifetime = "greedy-lifetime",
    /// Best fit, largest size × lifetime first.
    GreedyArea = "greedy-area",
    /// Best fit, buffers live at the busiest time steps first (TFLite's greedy by breadth).
    GreedyBreadth = "greedy-breadth",
    /// First fit in order of start time.
    FirstFitTime = "first-fit-time",
    /// Long-lived buffers first, best fit longest first; then the short-lived ones in one
    /// sweep over time, each in the smallest gap that holds it (training steps' saved
    /// activations nest, and stack best this way).
    LongShort = "long-short",
    /// Every heuristic in [`Strategy::HEURISTICS`], keep the smallest arena, then improve it
    /// (the exact search, or over 5,000 buffers the search over orders, then local
    /// improvement) while the budget allows.
    #[default]
    Auto = "auto",
}

impl Strategy {
    /// The strategies `auto` runs before searching, in the order it prefers them on ties.
    pub const HEURISTICS: [Strategy; 6] = [
        Strategy::GreedySize,
        Strategy::GreedyBreadth,
        Strategy::GreedyArea,
        Strategy::GreedyLifetime,
        Strategy::FirstFitTime,
        Strategy::LongShort,
    ];
}

impl Strategy {
    /// The placement order of a best-fit strategy; `None` for the others.
    pub(crate) fn best_fit_order(self) -> Option<Order> {
        match self {
            Strategy::GreedySize => Some(Order::Size(TieBreak::default())),
            Strategy::GreedyLifetime => Some(Order::Lifetime),
            Strategy::GreedyArea => Some(Order::Area),
            Strategy::GreedyBreadth => Some(Order::Breadth),
            Strategy::Naive | Strategy::FirstFitTime | Strategy::LongShort | Strategy::Auto => None,
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A strategy name that is not one of [`Strategy::ALL`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown strategy {name:?}; expected one of {}",
    Strategy::ALL.map(Strategy::name).join(", ")
)]
#[non_exhaustive]
pub struct ParseStrategyError {
    /// The name given.
    pub name: String,
}

impl FromStr for Strategy {
    type Err = ParseStrategyError;

    fn from_str(s: &str) -> Result<Strategy, ParseStrategyError> {
        Strategy::ALL
            .into_iter()
            .find(|strategy| strategy.name() == s)
            .ok_or_else(|| ParseStrategyError { name: s.to_owned() })
    }
}

/// Runs one heuristic and returns its solution. [`Strategy::Auto`] runs every heuristic in
/// [`Strategy::HEURISTICS`] and returns the smallest arena (the first on ties), without any
/// search; [`crate::solve`] is the entry point that also searches.
pub fn run_heuristic(problem: &Problem, strategy: Strategy) -> Result<Solution, ProblemError> {
    problem.validate()?;
    let slots = TimeSlots::new(problem);
    match strategy {
        Strategy::Auto => {
            let heuristics = Strategy::HEURISTICS;
            let results = run_portfolio(
                heuristics.len(),
                0,
                &mut Vec::new(),
                |scratch, i| match heuristics.get(i) {
                    Some(&s) => run_on(problem, &slots, s, scratch),
                    None => naive(problem),
                },
                |_| false,
            );
            let mut best: Option<Solution> = None;
            for result in results.into_iter().flatten() {
                let solution = result?;
                if best
                    .as_ref()
                    .is_none_or(|b| solution.arena_size(problem) < b.arena_size(problem))
                {
                    best = Some(solution);
                }
            }
            match best {
                Some(b) => Ok(b),
                None => naive(problem),
            }
        }
        s => run_on(problem, &slots, s, &mut Scratch::default()),
    }
}

/// The threads [`std::thread::available_parallelism`] allows, read once per process: the
/// standard library reads the cgroup files on every call, which took 9-20% of a 0.5 ms plan
/// (perf, 2026-11-28).
pub(crate) fn available_threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, NonZeroUsize::get))
}

/// Runs `run(state, 0)`, ..., `run(state, count - 1)` on up to `threads` threads (0: as many
/// as [`std::thread::available_parallelism`]; 1: on the calling thread) and returns the
/// results by index, so that a caller that reads them in order sees exactly what a
/// sequential loop would have computed.
///
/// Each thread has one of `states` (working memory that `run` reuses from try to try);
/// `states` grows with default values to one per thread, and keeps them for the next call.
/// A try's result must not depend on what an earlier try left in the state.
///
/// A caller's sequential loop may stop at the first result that is `done`: tries after the
/// first `done` one in index order may be skipped (`None`), but every try up to and including
/// it always runs. Tries are handed out in index order, so no thread starts a try it will
/// not need unless an earlier one is still running.
pub(crate) fn run_portfolio<S: Default + Send, T: Send>(
    count: usize,
    threads: usize,
    states: &mut Vec<S>,
    run: impl Fn(&mut S, usize) -> T + Sync,
    done: impl Fn(&T) -> bool + Sync,
) -> Vec<Option<T>> {
    let threads = if threads == 0 {
        available_threads()
    } else {
        threads
    };
    let threads = threads.min(count).max(1);
    if states.len() < threads {
        states.resize_with(threads, S::default);
    }
    let next = AtomicUsize::new(0);
    // The lowest index whose result is `done`; it only decreases.
    let stop = AtomicUsize::new(usize::MAX);
    let work = |state: &mut S| {
        let mut mine = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= count || i > stop.load(Ordering::Relaxed) {
                return mine;
            }
            let result = run(state, i);
            if done(&result) {
                stop.fetch_min(i, Ordering::Relaxed);
            }
            mine.push((i, result));
        }
    };
    let (first, others) = match states.split_first_mut() {
        Some((first, others)) => (first, others),
        None => return (0..count).map(|_| None).collect(),
    };
    let mut finished = if threads == 1 {
        work(first)
    } else {
        std::thread::scope(|scope| {
            let helpers: Vec<_> = others
                .iter_mut()
                .take(threads - 1)
                .map(|state| scope.spawn(|| work(state)))
                .collect();
            let mut all = work(first);
            for helper in helpers {
                match helper.join() {
                    Ok(theirs) => all.extend(theirs),
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
            all
        })
    };
    finished.sort_unstable_by_key(|&(i, _)| i);
    let mut results: Vec<Option<T>> = (0..count).map(|_| None).collect();
    for (i, result) in finished {
        if let Some(slot) = results.get_mut(i) {
            *slot = Some(result);
        }
    }
    results
}

/// Runs a non-`auto` heuristic on a validated problem with its slots computed.
pub(crate) fn run_on(
    problem: &Problem,
    slots: &TimeSlots,
    strategy: Strategy,
    scratch: &mut Scratch,
) -> Result<Solution, ProblemError> {
    let order = strategy.best_fit_order();
    match strategy {
        Strategy::Naive => naive(problem),
        Strategy::FirstFitTime => first_fit_by_time(problem),
        Strategy::LongShort => match long_short(problem, slots, scratch, GiveUp::NEVER, 1)? {
            Split::Placed(solution, _) => Ok(solution),
            // Offsets past `u64::MAX / 2`: best fit in lifetime order, which reports overflow
            // where it happens.
            Split::Overflow | Split::GivenUp(_) => {
                best_fit(problem, slots, Order::Lifetime, scratch)
            }
        },
        Strategy::GreedySize
        | Strategy::GreedyLifetime
        | Strategy::GreedyArea
        | Strategy::GreedyBreadth
        | Strategy::Auto => best_fit(
            problem,
            slots,
            order.unwrap_or(Order::Size(TieBreak::default())),
            scratch,
        ),
    }
}

/// Runs a non-`auto` heuristic as [`run_on`] does, but gives up (`None`) a best-fit one where
/// `give_up` says (a work cap, or an arena passed after some work; see [`GiveUp`]); the
/// others always finish.
/// Also returns the work done: the index's for best fit and `long-short`, the number of
/// buffers for the others. `long-short` runs its later placements on `threads` threads (as
/// [`run_portfolio`] counts them; the answer is the same for any count), and says whether
/// they ran (the third value; false for every other strategy).
pub(crate) fn run_within(
    problem: &Problem,
    slots: &TimeSlots,
    order: Result<Strategy, TieBreak>,
    scratch: &mut Scratch,
    give_up: GiveUp,
    threads: usize,
) -> Result<(Option<Solution>, u64, bool), ProblemError> {
    let best_fit_order = match order {
        Ok(Strategy::LongShort) => {
            match long_short_with(problem, slots, scratch, give_up, threads)? {
                (Split::Placed(solution, sweep), later) => {
                    return Ok((Some(solution), scratch.work().saturating_add(sweep), later));
                }
                (Split::GivenUp(work), _) => return Ok((None, work, false)),
                (Split::Overflow, _) => Order::Lifetime,
            }
        }
        Ok(strategy) => match strategy.best_fit_order() {
            Some(order) => order,
            None => {
                let solution = run_on(problem, slots, strategy, scratch)?;
                return Ok((Some(solution), problem.len() as u64, false));
            }
        },
        Err(tie_break) => Order::Size(tie_break),
    };
    let ids = placement_order(problem, slots, best_fit_order);
    let solution = best_fit_within(problem, slots, &ids, scratch, give_up)?;
    Ok((solution, scratch.work(), false))
}

/// Best fit in size order with the given tie-break, for comparing tie-breaks (feature
/// `bench-support`).
#[cfg(feature = "bench-support")]
pub fn greedy_size_with(problem: &Problem, tie_break: TieBreak) -> Result<Solution, ProblemError> {
    problem.validate()?;
    let slots = TimeSlots::new(problem);
    best_fit(
        problem,
        &slots,
        Order::Size(tie_break),
        &mut Scratch::default(),
    )
}

fn naive(problem: &Problem) -> Result<Solution, ProblemError> {
    let mut top = 0u64;
    let mut offsets = Vec::with_capacity(problem.len());
    for b in &problem.buffers {
        let offset = align_up(top, b.align).ok_or(ProblemError::TooLarge)?;
        top = offset.checked_add(b.size).ok_or(ProblemError::TooLarge)?;
        offsets.push(offset);
    }
    Ok(Solution { offsets })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in Strategy::ALL {
            assert_eq!(s.to_string().parse::<Strategy>(), Ok(s));
        }
        assert!("greedy".parse::<Strategy>().is_err());
    }

    #[test]
    fn portfolio_returns_results_in_order() {
        let mut states: Vec<usize> = Vec::new();
        let results = run_portfolio(7, 0, &mut states, |_, i| i * 10, |_| false);
        let expected: Vec<Option<usize>> = (0..7).map(|i| Some(i * 10)).collect();
        assert_eq!(results, expected);
        assert!(run_portfolio(0, 0, &mut states, |_, i| i, |_| true).is_empty());
        assert_eq!(
            run_portfolio(7, 1, &mut states, |_, i| i * 10, |_| false),
            expected
        );
    }

    #[test]
    fn portfolio_threads_keep_their_state_between_calls() {
        // Each state counts the tries its thread ran: every try runs once, on one thread.
        let mut states: Vec<usize> = Vec::new();
        for round in 1..=3 {
            let results = run_portfolio(
                9,
                3,
                &mut states,
                |ran, i| {
                    *ran += 1;
                    i
                },
                |_| false,
            );
            assert_eq!(results.iter().flatten().count(), 9);
            assert_eq!(states.len(), 3);
            assert_eq!(states.iter().sum::<usize>(), 9 * round);
        }
    }

    #[test]
    fn portfolio_runs_every_try_up_to_the_first_done_one() {
        for _ in 0..20 {
            let results =
                run_portfolio(8, 2, &mut Vec::<()>::new(), |_, i| i, |&r| r == 3 || r == 5);
            let prefix: Vec<Option<usize>> = (0..4).map(Some).collect();
            assert_eq!(results.get(..4), Some(prefix.as_slice()));
        }
    }
}
