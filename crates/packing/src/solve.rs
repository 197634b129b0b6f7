//! The entry point: run a strategy, improve with the exact search when asked, check.
//!
//! A solve has three phases. (1) Heuristics: the chosen strategy, or for `auto` every
//! heuristic in [`Strategy::HEURISTICS`] and, on problems of up to
//! [`AUTO_TIE_BREAKS_MAX_BUFFERS`] buffers, `greedy-size` with its other [`TieBreak`]s,
//! keeping the smallest arena (the first tried on ties). Heuristics always run to
//! completion, so the heuristic phase is deterministic; each is near-linear. They run in
//! parallel on the available cores, and their results are combined in the order above, so
//! the outcome is the one a sequential run gives. (2) Search: when the best
//! arena is above the lower bound and the strategy is `auto`, or `minimize` is set, or a
//! capacity is set and the heuristics did not meet it, the exact search gets the rest of the
//! time limit, the heuristic solution as its incumbent, and the capacity. (3) Check: in debug
//! builds every returned solution goes through [`verify`]; an invalid one is an error, never
//! an answer.
//!
//! The outcome is "proven optimal" only when the arena equals the lower bound or the search
//! proved it. The capacity, when both the options and the problem give one, is the smaller.

use std::fmt;
use std::time::{Duration, Instant};

use super::bound::lower_bound;
use super::exact;
use super::greedy::TieBreak;
use super::problem::{Problem, ProblemError, Solution};
use super::strategy::{Strategy, run_greedy_size, run_on, run_portfolio};
use super::timeline::TimeSlots;
use super::verify::{VerifyError, verify};

/// The exact search's default node budget: a few tenths of a second on the MiniMalloc
/// instances, enough to reach the lower bound on most graph plans the heuristics miss.
pub const DEFAULT_NODE_LIMIT: u64 = 20_000;

/// What to solve for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SolveOptions {
    /// Which strategy; `auto` by default.
    pub strategy: Strategy,
    /// Time for the whole solve; the heuristics always finish, the search stops at the limit.
    pub time_limit: Duration,
    /// Node budget for the exact search. When this, not the clock, ends the search, the
    /// outcome depends only on the input: the same bytes on every machine. The default
    /// ([`DEFAULT_NODE_LIMIT`], with a 10 s clock as a safety net) is deterministic; set
    /// `None` and a `time_limit` for an anytime search bounded by the clock.
    pub node_limit: Option<u64>,
    /// The largest arena allowed, in addition to the problem's own capacity.
    pub capacity: Option<u64>,
    /// Search for a smaller arena after the heuristic, whatever the strategy.
    pub minimize: bool,
}

impl Default for SolveOptions {
    fn default() -> SolveOptions {
        SolveOptions {
            strategy: Strategy::Auto,
            time_limit: Duration::from_secs(10),
            node_limit: Some(DEFAULT_NODE_LIMIT),
            capacity: None,
            minimize: false,
        }
    }
}

/// `auto` tries every [`TieBreak`] of `greedy-size` on problems of at most this many buffers.
pub const AUTO_TIE_BREAKS_MAX_BUFFERS: usize = 100_000;

/// What produced a solution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Producer {
    /// A heuristic strategy (never [`Strategy::Auto`]).
    Heuristic(Strategy),
    /// `greedy-size` with a tie-break other than the default (tried by `auto`).
    GreedySize(TieBreak),
    /// The exact search, starting from a heuristic's solution.
    ExactSearch,
}

impl fmt::Display for Producer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Producer::Heuristic(s) => write!(f, "{s}"),
            Producer::GreedySize(t) => write!(f, "{}/{t}", Strategy::GreedySize),
            Producer::ExactSearch => f.write_str("exact-search"),
        }
    }
}

/// The result of [`solve`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The best valid solution, or `None` when a capacity was set and nothing found within
    /// the time limit fits it.
    pub solution: Option<Solution>,
    /// The arena size of `solution`; without one, the smallest arena found (over capacity).
    pub arena: u64,
    /// The problem's [`lower_bound`].
    pub lower_bound: u64,
    /// Whether `solution` is known to be optimal (arena = lower bound, or proved by search).
    pub proven_optimal: bool,
    /// Whether the search proved that nothing fits the capacity.
    pub proven_infeasible: bool,
    /// The capacity solved against, if any.
    pub capacity: Option<u64>,
    /// What produced the best arena.
    pub produced_by: Producer,
    /// Wall-clock time of the whole solve.
    pub elapsed: Duration,
}

/// Why [`solve`] returned no outcome.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SolveError {
    /// The problem is not one the engine accepts.
    #[error(transparent)]
    Problem(#[from] ProblemError),
    /// A strategy produced an invalid solution (a bug in memplan; please report it).
    #[error("internal error: {producer} produced an invalid solution: {error}")]
    Invalid {
        /// What produced it.
        producer: Producer,
        /// What the verifier found.
        error: VerifyError,
    },
}

/// Solves a packing problem as the options ask (see the module docs).
pub fn solve(problem: &Problem, options: &SolveOptions) -> Result<Outcome, SolveError> {
    let started = Instant::now();
    problem.validate()?;
    let bound = lower_bound(problem);
    let capacity = match (options.capacity, problem.capacity) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };

    let slots = TimeSlots::new(problem);
    let single = [options.strategy];
    let strategies: &[Strategy] = if options.strategy == Strategy::Auto {
        &Strategy::HEURISTICS
    } else {
        &single
    };
    let mut tries: Vec<Producer> = strategies.iter().map(|&s| Producer::Heuristic(s)).collect();
    if options.strategy == Strategy::Auto && problem.len() <= AUTO_TIE_BREAKS_MAX_BUFFERS {
        let others = TieBreak::ALL
            .into_iter()
            .filter(|&t| t != TieBreak::default());
        tries.extend(others.map(Producer::GreedySize));
    }
    // The tries run in parallel; their results are read in order, as if run one by one.
    let results = run_portfolio(
        tries.len(),
        |i| -> Result<Option<(Solution, u64)>, SolveError> {
            let Some(&producer) = tries.get(i) else {
                return Ok(None);
            };
            let solution = match producer {
                Producer::Heuristic(strategy) => run_on(problem, &slots, strategy)?,
                Producer::GreedySize(tie_break) => run_greedy_size(problem, &slots, tie_break)?,
                Producer::ExactSearch => return Ok(None),
            };
            check(problem, &solution, producer)?;
            let arena = solution.arena_size(problem);
            Ok(Some((solution, arena)))
        },
        |result| matches!(result, Ok(Some((_, arena))) if *arena == bound),
    );
    let mut best: Option<(Solution, u64, Producer)> = None;
    for (&producer, result) in tries.iter().zip(results) {
        let Some(result) = result else {
            break;
        };
        let Some((solution, arena)) = result? else {
            continue;
        };
        if best.as_ref().is_none_or(|(_, a, _)| arena < *a) {
            best = Some((solution, arena, producer));
        }
        if arena == bound {
            break;
        }
    }
    let (mut solution, mut arena, mut produced_by) = match best {
        Some(b) => b,
        None => (
            Solution {
                offsets: Vec::new(),
            },
            0,
            Producer::Heuristic(options.strategy),
        ),
    };
    let mut proven_optimal = arena == bound;
    let mut proven_infeasible = capacity.is_some_and(|c| bound > c);
    let fits = |arena: u64| capacity.is_none_or(|c| arena <= c);

    let wants_search = options.strategy == Strategy::Auto || options.minimize || !fits(arena);
    let remaining = options.time_limit.saturating_sub(started.elapsed());
    if wants_search && !proven_optimal && !proven_infeasible && !remaining.is_zero() {
        let request = exact::SearchOptions {
            time_limit: remaining,
            node_limit: options.node_limit,
            capacity,
            incumbent: fits(arena).then(|| solution.clone()),
            // `auto` improves a heuristic answer that fits; one that does not fit first needs
            // any fitting placement (decision mode), which is what a capacity asks for.
            minimize: options.minimize || (options.strategy == Strategy::Auto && fits(arena)),
        };
        {
            let found = exact::search(problem, &request);
            if let Some(better) = found.solution {
                check(problem, &better, Producer::ExactSearch)?;
                let better_arena = better.arena_size(problem);
                if fits(better_arena) && (better_arena < arena || !fits(arena)) {
                    solution = better;
                    arena = better_arena;
                    produced_by = Producer::ExactSearch;
                }
                // The proof is about the search's solution; it covers ours at the same size.
                proven_optimal |= found.proven_optimal && better_arena == arena;
            }
            proven_infeasible |= found.proven_infeasible;
        }
    }

    let solution = fits(arena).then_some(solution);
    Ok(Outcome {
        proven_optimal: (proven_optimal || arena == bound) && solution.is_some(),
        solution,
        arena,
        lower_bound: bound,
        proven_infeasible,
        capacity,
        produced_by,
        elapsed: started.elapsed(),
    })
}

/// Verifies in debug builds (and so in every test); release builds trust the strategies and
/// leave checking to the caller (the CLI verifies every answer unless `--no-verify`).
fn check(problem: &Problem, solution: &Solution, producer: Producer) -> Result<(), SolveError> {
    if cfg!(debug_assertions) {
        verify(problem, solution).map_err(|error| SolveError::Invalid { producer, error })?;
    }
    Ok(())
}
