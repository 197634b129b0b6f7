//! The named strategies a user can ask for, and the runner for the heuristic ones.
//!
//! Every heuristic is deterministic: the same problem gives the same offsets, because each
//! order is a total sort key ending in the buffer id and no hash order reaches the output.

use std::fmt;
use std::str::FromStr;

use super::first_fit::first_fit_by_time;
use super::greedy::{Order, TieBreak, best_fit};
use super::problem::{Problem, ProblemError, Solution, align_up};
use super::timeline::Slots;

/// How to place buffers. Names (for [`FromStr`] and [`fmt::Display`]) are in kebab case:
/// `naive`, `greedy-size`, `greedy-lifetime`, `greedy-area`, `greedy-breadth`,
/// `first-fit-time`, `auto`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// Side by side in id order, each offset aligned, no reuse.
    Naive,
    /// Best fit, largest first; equal sizes by [`TieBreak::EarlierStart`].
    GreedySize,
    /// Best fit, longest lifetime first.
    GreedyLifetime,
    /// Best fit, largest size × lifetime first.
    GreedyArea,
    /// Best fit, buffers live at the busiest time steps first (TFLite's greedy by breadth).
    GreedyBreadth,
    /// First fit in order of start time.
    FirstFitTime,
    /// Every heuristic above, keep the smallest arena, then improve it with the exact search
    /// while the time limit allows.
    #[default]
    Auto,
}

impl Strategy {
    /// Every strategy, in the order the names are listed.
    pub const ALL: [Strategy; 7] = [
        Strategy::Naive,
        Strategy::GreedySize,
        Strategy::GreedyLifetime,
        Strategy::GreedyArea,
        Strategy::GreedyBreadth,
        Strategy::FirstFitTime,
        Strategy::Auto,
    ];

    /// The strategies `auto` runs before searching, in the order it prefers them on ties.
    pub const HEURISTICS: [Strategy; 5] = [
        Strategy::GreedySize,
        Strategy::GreedyBreadth,
        Strategy::GreedyArea,
        Strategy::GreedyLifetime,
        Strategy::FirstFitTime,
    ];

    /// The strategy's name.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Naive => "naive",
            Strategy::GreedySize => "greedy-size",
            Strategy::GreedyLifetime => "greedy-lifetime",
            Strategy::GreedyArea => "greedy-area",
            Strategy::GreedyBreadth => "greedy-breadth",
            Strategy::FirstFitTime => "first-fit-time",
            Strategy::Auto => "auto",
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
    "unknown strategy {name:?}; expected one of naive, greedy-size, greedy-lifetime, greedy-area, greedy-breadth, first-fit-time, auto"
)]
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
/// search; [`crate::arena::solve`] is the entry point that also searches.
pub fn run_heuristic(problem: &Problem, strategy: Strategy) -> Result<Solution, ProblemError> {
    problem.validate()?;
    let slots = Slots::new(problem);
    match strategy {
        Strategy::Auto => {
            let mut best: Option<Solution> = None;
            for s in Strategy::HEURISTICS {
                let solution = run_on(problem, &slots, s)?;
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
        s => run_on(problem, &slots, s),
    }
}

/// Runs a non-`auto` heuristic on a validated problem with its slots computed.
pub(crate) fn run_on(
    problem: &Problem,
    slots: &Slots,
    strategy: Strategy,
) -> Result<Solution, ProblemError> {
    match strategy {
        Strategy::Naive => naive(problem),
        Strategy::GreedySize => best_fit(problem, slots, Order::Size(TieBreak::default())),
        Strategy::GreedyLifetime => best_fit(problem, slots, Order::Lifetime),
        Strategy::GreedyArea => best_fit(problem, slots, Order::Area),
        Strategy::GreedyBreadth => best_fit(problem, slots, Order::Breadth),
        Strategy::FirstFitTime => first_fit_by_time(problem),
        Strategy::Auto => best_fit(problem, slots, Order::Size(TieBreak::default())),
    }
}

/// Best fit by size with a given tie-break, on a validated problem with its slots computed.
pub(crate) fn run_greedy_size(
    problem: &Problem,
    slots: &Slots,
    tie_break: TieBreak,
) -> Result<Solution, ProblemError> {
    best_fit(problem, slots, Order::Size(tie_break))
}

/// Best fit in size order with the given tie-break, for comparing tie-breaks.
pub fn greedy_size_with(problem: &Problem, tie_break: TieBreak) -> Result<Solution, ProblemError> {
    problem.validate()?;
    let slots = Slots::new(problem);
    best_fit(problem, &slots, Order::Size(tie_break))
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
}
