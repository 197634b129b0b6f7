//! The entry point: run a strategy, improve with the exact search or local improvement when
//! asked, check.
//!
//! A solve has four phases. (1) Heuristics: the chosen strategy, or for `auto` every
//! heuristic in [`Strategy::HEURISTICS`] and, on problems of up to
//! [`AUTO_TIE_BREAKS_MAX_BUFFERS`] buffers where at least a tenth of the bytes are in buffers
//! that share their size with another, `greedy-size` with its other [`TieBreak`]s, keeping
//! the smallest arena (the first tried on ties). Where sizes seldom tie, `greedy-lifetime`
//! and `first-fit-time` run first, and every other best-fit order is given up once its
//! placement index has done twice the work `greedy-lifetime`'s did (see `ORDER_WORK_CAP`),
//! which happens only where that order fragments the packing far more, or once its arena
//! passes the best of those two (and what a gap or capacity accepts) after it has done more
//! work than a start of the search over orders may (see `GIVE_UP_AFTER_STARTS`): it would end
//! above it, and the outcome is the one running it to its end gives. With a gap, an answer
//! of those two within it ends the portfolio. On problems of at least [`SCALE_MIN_BUFFERS`]
//! buffers every best-fit try, `greedy-lifetime` and `long-short`'s long buffers included, is
//! also given up once its index work passes [`SCALE_WORK_PER_BUFFER`] units per buffer (a
//! multiple of `first-fit-time`'s cost, one unit per buffer): where many buffers live long,
//! every best-fit order is quadratic there, and `first-fit-time`'s answer is kept (the cap
//! is never below [`SCALE_WORK_FLOOR`]). There
//! `long-short` runs in the first wave (first, where only the bound ends the portfolio), and
//! once `greedy-lifetime` is given up the other full best-fit orders are skipped, as the
//! outcome's phases say ([`Skip`]).
//! Work is counted, not timed, so the heuristic phase is
//! deterministic. They run in parallel on [`SolveOptions::threads`] threads, and their
//! results are combined in the order above, so the outcome is the one a sequential run gives,
//! whatever the thread count.
//! A capacity without `minimize` is a feasibility question: the first answer that fits it
//! answers it (the portfolio stops at the first try that fits, as at an answer within the
//! gap), and the phases below run only while nothing fits, each stopping as soon as
//! something does; a time limit is then only a cap.
//! (2) Search: when the best arena is above the lower bound and the strategy is `auto`
//! without a capacity, or `minimize` is set, or a capacity is set and the heuristics did not
//! meet it, the exact search gets the rest of the time limit, the heuristic solution as its
//! incumbent, and the capacity; it probes capacities between the bound and the incumbent
//! (see [`crate::exact`]). When minimizing, a capacity does not change that search (it runs
//! as if there were none, whether or not the heuristics meet it), so with `minimize` asking
//! for a capacity never gives a worse answer than not asking; only when its answer misses
//! the capacity too does a second search, with a budget of its own, look for a placement
//! under it.
//! Problems of more than [`EXACT_SEARCH_MAX_BUFFERS`] buffers are too large for it: the
//! outcome says so ([`Outcome::exact_search_skipped`]), and a search over best-fit orders
//! takes its place (see `reorder`): rounds of best fit in orders that move the buffers at the
//! peak earlier, starting from the best-fit heuristics' orders, as many as a budget of
//! [`REORDER_WORK_PER_NODE`] units of index work per node of the node budget allows.
//! (3) Local improvement: while the arena is still above the bound, the buffers around the
//! peak are taken out and placed again (see `improve`), under a work budget of
//! [`IMPROVE_WORK_PER_NODE`] units per node of the node budget. With
//! [`SolveOptions::minimize`] asked for, a problem of more than [`EXACT_SEARCH_MAX_BUFFERS`]
//! and at most [`MINIMIZE_SEARCH_MAX_BUFFERS`] buffers then gets the exact search too, from
//! the best answer so far, with the node budget (the caller asked to spend it). (4) Check: the returned
//! solution always goes through [`verify`], in release builds too (in debug builds, every
//! intermediate one as well); an invalid one is an error, never an answer.
//!
//! Determinism: phases (1) and (4) always are; (2) and (3) are bounded by the node budget
//! when one is set, and the outcome then depends only on the input, unless the clock
//! (`time_limit`, by default the [`SAFETY_NET`] that the default budgets end first) ran
//! out first. The thread count changes only the speed.
//!
//! The outcome is "proven optimal" only when the arena equals the lower bound or the search
//! proved it. The capacity, when both the options and the problem give one, is the smaller.
//!
//! A [`Solver`] keeps its working vectors between solves, so an engine that solves many
//! problems reuses them instead of reallocating.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::time::{Duration, Instant};

use super::bound::lower_bound;
use super::exact;
use super::greedy::{GiveUp, Scratch, TieBreak, repack, repack_wanted};
use super::improve::Improver;
use super::problem::{Problem, ProblemError, Solution};
use super::reorder::{Start, reorder, worth_starting};
use super::split::{replaces, reversed_placements, reversed_wanted};
use super::strategy::{Strategy, run_portfolio, run_within};
use super::timeline::TimeSlots;
use super::verify::{VerifyError, verify};

/// The default clock of [`SolveOptions`]: a safety net that the default budgets end every
/// phase before, so that the answer does not depend on the machine's speed or load. (It was
/// 10 s, which a loaded 2-core machine reached on 100k-buffer problems, cutting local
/// improvement short and changing the answer.) Every phase after the heuristics is bounded
/// by work: the exact search by nodes, the search over orders and local improvement by
/// budgets proportional to the heuristics' own work.
pub const SAFETY_NET: Duration = Duration::from_secs(600);

/// The default node budget of the exact search: up to about two seconds on the MiniMalloc
/// instances with two threads (the minimize mode's climb and bisection run side by side,
/// 625,000 nodes each), enough to reach the lower bound on most graph plans the heuristics
/// miss. A node is one placement, plus one per 4096 section updates (so that the budget
/// bounds the time; see [`crate::exact`]).
pub const DEFAULT_NODE_LIMIT: u64 = 1_250_000;

/// Problems of more buffers than this are too large for the exact search: [`solve`] spends
/// the budget on the search over orders and local improvement instead.
pub const EXACT_SEARCH_MAX_BUFFERS: usize = 5_000;

/// With [`SolveOptions::minimize`] asked for, problems of more than
/// [`EXACT_SEARCH_MAX_BUFFERS`] buffers and at most this many get the exact search after the
/// search over orders and local improvement, from their answer, with the node budget (the
/// exact search's own limit: it recurses once per placed buffer; a problem over its indexing
/// budget, about 8 million overlapping pairs, comes back at once, as heavy-tailed ones of
/// 60,000 and 100,000 buffers do in 0.3-0.6 s of the whole solve). Its nodes cost more there
/// (about 20-35 us each on a heavy-tailed problem of 30,000 buffers, so the `--minimize`
/// budget of 5,000,000 nodes is a minute or two), which is why `auto` alone does not run it;
/// but it finds what the heuristics miss: on the generator's heavy-tailed 30k seeds it took
/// seed 3 from 1.0074x to the lower bound (proven optimal) and seed 1 from 1.0748x to 1.0367x
/// (see `docs/MEASUREMENTS.md`, tenth session), so most of those gaps are the heuristics',
/// not the problems'.
pub const MINIMIZE_SEARCH_MAX_BUFFERS: usize = 100_000;

/// The budget of the search over orders, in units of the placement index's work (ranges
/// read and unions updated; a deterministic measure of time) per node of the node budget.
/// Each start's share pays for as many rounds as its own placement's work fits. The default
/// budget (250 million units) gives a heavy-tailed problem of 30,000 buffers about 20 rounds
/// from each of the three best-fit orders it starts from (about 0.45 s on two cores),
/// `iopddl_S_1`, whose rounds cost three times as much, 4 to 9, and a problem of a million
/// buffers none. (Measured on nine heavy-tailed 30k seeds, `docs/MEASUREMENTS.md`: 300 units
/// per node gained nothing more there and took `iopddl_S_1` to 0.95 s.)
pub const REORDER_WORK_PER_NODE: u64 = 200;

/// Over [`EXACT_SEARCH_MAX_BUFFERS`] buffers, the search over orders gets at most this many
/// times the work of the costliest heuristic placement of the portfolio (and never more than
/// [`REORDER_WORK_PER_NODE`] per node): a budget that follows what the problem costs to place,
/// so that a problem whose rounds cost much gets few, and one it gains nothing on costs
/// little (each start also stops after 6 rounds in a row that gained nothing, and a start
/// behind the best one after 3 rounds that did not overtake it).
pub const REORDER_COST_FACTOR: u64 = 24;

/// Over [`EXACT_SEARCH_MAX_BUFFERS`] buffers, local improvement gets at most this many units
/// of its work (buffer pairs examined) per unit of that placement work.
pub const IMPROVE_COST_FACTOR: u64 = 2;

/// The budget of local improvement, in units of work (a buffer pair examined, a buffer
/// reported by the time index, one item of a sort) per node of the node budget: about a tenth
/// of a second for the default budget (measured on `iopddl_S_1`).
pub const IMPROVE_WORK_PER_NODE: u64 = 20;

/// How close to the lower bound is close enough: a solve stops improving once its arena is at
/// most `(1 + gap)` times the lower bound. [`Gap::ZERO`], the default, stops only at the bound
/// itself or when the budget runs out. Held in parts per billion, so that options compare
/// and hash exactly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Gap {
    ppb: u64,
}

impl Gap {
    /// No tolerance: only the lower bound itself stops a solve early.
    pub const ZERO: Gap = Gap { ppb: 0 };

    /// The range of fractions [`Gap::from_fraction`] accepts, as text: `[0, 1)`.
    pub const RANGE: &'static str = "[0, 1)";

    /// A gap of `fraction` of the lower bound (`0.001` is 0.1%), rounded down to parts per
    /// billion; `None` outside [`Gap::RANGE`], `[0, 1)` (negative, not finite, or a whole
    /// bound or more: an arena twice the bound is not "close to" it, and a caller that
    /// accepts any answer wants a heuristic `strategy`, not a gap).
    pub fn from_fraction(fraction: f64) -> Option<Gap> {
        if !(0.0..1.0).contains(&fraction) {
            return None;
        }
        Some(Gap {
            ppb: (fraction * 1e9) as u64,
        })
    }

    /// The gap as a fraction of the lower bound.
    pub fn fraction(self) -> f64 {
        self.ppb as f64 / 1e9
    }

    /// The largest arena within the gap of `bound`: `bound · (1 + gap)`, rounded down.
    pub fn accepted(self, bound: u64) -> u64 {
        let slack = u128::from(bound) * u128::from(self.ppb) / 1_000_000_000;
        bound.saturating_add(u64::try_from(slack).unwrap_or(u64::MAX))
    }
}

/// What to solve for.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SolveOptions {
    /// Which strategy; `auto` by default.
    pub strategy: Strategy,
    /// Time for the whole solve; the heuristics always finish, the search stops at the limit.
    pub time_limit: Duration,
    /// Node budget for the exact search. When this, not the clock, ends the search, the
    /// outcome depends only on the input: the same bytes on every machine. The default
    /// ([`DEFAULT_NODE_LIMIT`], with [`SAFETY_NET`] as the clock) is deterministic; set
    /// `None` and a `time_limit` for an anytime search bounded by the clock.
    pub node_limit: Option<u64>,
    /// The largest arena allowed, in addition to the problem's own capacity.
    pub capacity: Option<u64>,
    /// Search for a smaller arena after the heuristic, whatever the strategy.
    pub minimize: bool,
    /// Stop improving once the arena is within this gap of the lower bound (see [`Gap`]);
    /// [`Gap::ZERO`] by default.
    pub gap: Gap,
    /// Threads for the heuristic portfolio, the search over orders and the exact search (1
    /// runs its climb and bisection one after the other, more side by side); 0 for every
    /// available core. The outcome is the same for every thread count.
    pub threads: usize,
}

impl SolveOptions {
    /// These options with [`strategy`](SolveOptions::strategy) set to `strategy`.
    pub fn with_strategy(mut self, strategy: Strategy) -> SolveOptions {
        self.strategy = strategy;
        self
    }

    /// These options with [`time_limit`](SolveOptions::time_limit) set to `time_limit`.
    pub fn with_time_limit(mut self, time_limit: Duration) -> SolveOptions {
        self.time_limit = time_limit;
        self
    }

    /// These options with [`node_limit`](SolveOptions::node_limit) set to `node_limit`.
    pub fn with_node_limit(mut self, node_limit: Option<u64>) -> SolveOptions {
        self.node_limit = node_limit;
        self
    }

    /// These options with [`capacity`](SolveOptions::capacity) set to `capacity`.
    pub fn with_capacity(mut self, capacity: Option<u64>) -> SolveOptions {
        self.capacity = capacity;
        self
    }

    /// These options with [`minimize`](SolveOptions::minimize) set to `minimize`.
    pub fn with_minimize(mut self, minimize: bool) -> SolveOptions {
        self.minimize = minimize;
        self
    }

    /// These options with [`gap`](SolveOptions::gap) set to `gap`.
    pub fn with_gap(mut self, gap: Gap) -> SolveOptions {
        self.gap = gap;
        self
    }

    /// These options with [`threads`](SolveOptions::threads) set to `threads`.
    pub fn with_threads(mut self, threads: usize) -> SolveOptions {
        self.threads = threads;
        self
    }
}

impl Default for SolveOptions {
    fn default() -> SolveOptions {
        SolveOptions {
            strategy: Strategy::Auto,
            time_limit: SAFETY_NET,
            node_limit: Some(DEFAULT_NODE_LIMIT),
            capacity: None,
            minimize: false,
            gap: Gap::ZERO,
            threads: 0,
        }
    }
}

/// What one heuristic of the portfolio gives: its solution and arena (`None` when it was given
/// up at its work cap, or is not a heuristic), and the work it did.
type TryResult = Result<(Option<(Solution, u64)>, u64), SolveError>;

/// The work cap of `auto`'s second wave of heuristics, as a multiple of the work
/// `greedy-lifetime`'s placement did: an order whose placement index works harder than that
/// is given up. Where lifetimes are long and sizes are mixed (a training step), placing by
/// size makes the packing so fragmented that each query reads thousands of ranges: on the
/// generator family at 100k buffers, `greedy-size`, `greedy-breadth` and `greedy-area` did 2
/// to 7 times `greedy-lifetime`'s work on training-shaped and mixed problems, and came out
/// worse than it every time; on every other member they did 0.9 to 1.5 times as much, and
/// are never given up.
const ORDER_WORK_CAP: u64 = 2;

/// A best-fit heuristic's placement is a start of the search over orders only where it did at
/// most `1 / GIVE_UP_AFTER_STARTS` of that search's budget of work (so that the budget pays for
/// a round from each of up to four starts). A second-wave try of `auto` whose arena passes
/// the first wave's best is given up once it has done more work than that: past it, it can
/// be neither the answer nor a start, and the work it did already gives the search over orders
/// and local improvement their whole budgets (a first answer's cost of `budget / 4` is above
/// `budget / REORDER_COST_FACTOR` and above local improvement's `budget / 10 /
/// IMPROVE_COST_FACTOR`), so the outcome is the same as if it had run to its end. On problems
/// small enough for the exact search, which has no starts and budgets of its own, it is given
/// up as soon as it passes. Where a size-like order fragments a training step, this ends it
/// long before its work cap.
const GIVE_UP_AFTER_STARTS: u64 = 4;

/// From this many buffers on, `auto` bounds every best-fit order by the work of its cheapest
/// answer (see [`SCALE_WORK_PER_BUFFER`] and [`SCALE_WORK_FLOOR`]), skips the other full
/// best-fit orders once `greedy-lifetime` passes that bound ([`Skip`]), and places
/// `long-short`'s long buffers in classes. It was 200,000 until the ninth session: at 100,000
/// buffers the default spent 3.7 to 6.4 s of CPU on the generator family's training-shaped
/// members and about 1 s on mixed and heavy-10%-n/2 ones, in best-fit orders that gained 0
/// to 0.01% there; from 100,000 it spends 0.2 to 0.5 s on them. Every benchmark instance,
/// graph plan and corpus problem is smaller (the largest, `iopddl_Y_1`, has 62,185 buffers),
/// so none of their answers changes.
pub const SCALE_MIN_BUFFERS: usize = 100_000;

/// On problems of at least [`SCALE_MIN_BUFFERS`] buffers, every best-fit try of `auto`
/// (`greedy-lifetime` and `long-short`'s long buffers included) is given up once its placement
/// index has done this many units of work per buffer: `first-fit-time`, the first answer
/// `auto` always has, costs one unit per buffer (about two seconds at a million buffers), and
/// a try may cost this many times as much. Where lifetimes are short or few are long, best
/// fit costs 40 to 72 units per buffer at a million buffers (the generator family's short
/// and heavy-1%-n/100 members, every order), and nothing is given up; where many buffers
/// live long (a training step, heavy tails reaching half the step), each query reads
/// thousands of ranges and every best-fit order costs thousands of units per buffer (20 s to
/// over two minutes): those are given up at the cap, and `first-fit-time`'s answer (within
/// 0.01% of the bound on a training step) is what is kept. Below [`SCALE_MIN_BUFFERS`] no
/// such cap applies, so no graph plan or benchmark instance answer changes.
pub const SCALE_WORK_PER_BUFFER: u64 = 128;

/// At scale, `greedy-lifetime` (in `auto`'s first wave) is given up at this many times the
/// other best-fit tries' cap, where that is [`SCALE_WORK_PER_BUFFER`] per buffer (from
/// 200,000 buffers; below, where [`SCALE_WORK_FLOOR`] sets the cap, at the same cap: on the
/// generator family at 100,000 buffers the longer cap only cost time, up to 0.55 s of CPU on
/// mixed seed 11, for the same offsets). Where it finishes past the others' cap, they are
/// still skipped ([`Skip`]). Where few buffers live long, the tail reaching a hundredth of
/// the step (the family's heavy-10%-n/100 member at 1M buffers), its placement costs about
/// 3 times the cap (375M units, 1.5 s) and gives an answer beside `long-short`'s: seed 83
/// 1.0606x the bound against 1.0763x, seed 59 1.0261x against 1.0330x. Where it is quadratic
/// (thousands of units per buffer), it is given up 4 times later than the others: 0.4 to
/// 1.6 s more CPU at 1M, on the thread beside `long-short`.
const LIFETIME_SCALE_FACTOR: u64 = 4;

/// The least work cap of a best-fit try at scale, whatever the problem's size: the cap of a
/// problem of 200,000 buffers ([`SCALE_WORK_PER_BUFFER`] per buffer), which problems of
/// 100,000 to 200,000 buffers get as well. On a problem of 100,000 buffers that is 256 units
/// per buffer: where few buffers live long, every best-fit order costs 110 to 140 there (the
/// generator family's heavy-3%-n/10 and heavy-10%-n/100 members), finishes, and starts the
/// search over orders (which takes heavy-3%-n/10 seed 3 from 1.04x to 1.0000x the bound);
/// where many do (training-shaped, mixed, heavy-10%-n/2), `greedy-lifetime` costs 470 to
/// 3,000 and is given up at it.
pub const SCALE_WORK_FLOOR: u64 = 25_600_000;

/// `auto` tries every [`TieBreak`] of `greedy-size` on problems of at most this many buffers
/// (and only where sizes tie often enough for the tie-break to matter: at least a tenth of
/// the bytes in buffers that share their size with another).
pub const AUTO_TIE_BREAKS_MAX_BUFFERS: usize = 100_000;

/// Whether at least a tenth of the bytes are in buffers that share their size with another.
/// A tie-break of `greedy-size` orders only buffers of equal size; where the sizes that tie
/// are only small ones (sizes drawn from a wide continuous range, where ties happen only
/// among the few hundred values of the lowest octaves), every tie-break gives nearly the same
/// packing, and trying three more of them would triple the heuristics' cost for nothing. Real
/// graphs and the MiniMalloc and idealloc instances put 24% to 100% of their bytes in tied
/// buffers; the generator family, whose sizes are log-uniform over 256 B - 4 MiB, about 2%.
fn sizes_tie_often(problem: &Problem) -> bool {
    let mut sizes: Vec<u64> = problem
        .buffers
        .iter()
        .map(|b| b.size)
        .filter(|&s| s > 0)
        .collect();
    sizes.sort_unstable();
    let (mut tied, mut total) = (0u128, 0u128);
    for run in sizes.chunk_by(|a, b| a == b) {
        let bytes = run.iter().map(|&s| u128::from(s)).sum::<u128>();
        total += bytes;
        if run.len() > 1 {
            tied += bytes;
        }
    }
    tied > 0 && tied * 10 >= total
}

/// What produced a solution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Producer {
    /// A heuristic strategy (never [`Strategy::Auto`]).
    Heuristic(Strategy),
    /// `greedy-size` with a tie-break other than the default (tried by `auto`).
    GreedySize(TieBreak),
    /// The exact search, starting from a heuristic's solution.
    ExactSearch,
    /// The reordering search (best fit in orders that move the peak's buffers earlier),
    /// starting from the best-fit heuristics' orders.
    Reordering,
    /// Local improvement around the peak, starting from the best solution before it.
    LocalImprovement,
    /// `long-short`'s placements with time reversed, after the heuristics, where the best
    /// answer is still far above the load bound.
    ReversedLongShort,
    /// Best fit again at scale, after local improvement, in order of each buffer's top in
    /// the answer, highest first.
    Repacking,
}

impl fmt::Display for Producer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Producer::Heuristic(s) => write!(f, "{s}"),
            Producer::GreedySize(t) => write!(f, "{}/{t}", Strategy::GreedySize),
            Producer::ExactSearch => f.write_str("exact-search"),
            Producer::Reordering => f.write_str("reordering"),
            Producer::LocalImprovement => f.write_str("local-improvement"),
            Producer::ReversedLongShort => f.write_str("long-short/reversed"),
            Producer::Repacking => f.write_str("repacking"),
        }
    }
}

/// One phase of a solve, in the order it ran ([`Outcome::phases`]): what ran, the work it did,
/// and what it gained. Work is counted, not timed, in the phase's own unit: the placement
/// index's work (ranges read and unions updated) for best fit, `long-short` and the search
/// over orders; the buffers for `first-fit-time` and `naive`; nodes for the exact search; and
/// buffer pairs examined for local improvement. All deterministic.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Phase {
    /// What ran: a heuristic of the portfolio, the exact search, the search over orders or
    /// local improvement.
    pub producer: Producer,
    /// The work it did.
    pub work: u64,
    /// The arena it reached; `None` for a heuristic given up (at its work cap, or once its
    /// arena passed the first wave's best: see the module docs).
    pub arena: Option<u64>,
    /// The bytes it took off the best arena before it (0 for the first answer, and where
    /// it gained nothing).
    pub gained: u64,
    /// Rounds run (the search over orders) or moves kept (local improvement); 0 otherwise.
    pub rounds: u64,
    /// Why it did not run, where `auto` skipped it (its work is then 0 and its arena `None`).
    pub skipped: Option<Skip>,
}

/// Why `auto` skipped a phase instead of running it ([`Phase::skipped`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Skip {
    /// At scale (see [`SCALE_MIN_BUFFERS`]) `greedy-lifetime`, the cheapest best-fit order
    /// where lifetimes are long, did more than the work cap (and was given up at a few times
    /// it, or finished): there every other full
    /// best-fit order costs at least as much and was given up at the same cap with no gain
    /// (the generator family's training-shaped and heavy-tailed members at 1M buffers), so
    /// they are not run; `long-short`, whose long buffers only are placed by best fit, still
    /// is.
    LifetimeOrderGivenUp,
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skip::LifetimeOrderGivenUp => f.write_str(
                "greedy-lifetime passed the work cap of a problem this large, and every other \
                 full best-fit order costs at least as much",
            ),
        }
    }
}

impl Phase {
    /// A phase after the heuristics, which took the arena from `before` to `arena`.
    fn after(producer: Producer, work: u64, before: u64, arena: u64, rounds: u64) -> Phase {
        Phase {
            producer,
            work,
            arena: Some(arena),
            gained: before.saturating_sub(arena),
            rounds,
            skipped: None,
        }
    }
}

/// The result of [`solve`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Whether the exact search was wanted but the problem is too large for it (more than
    /// [`EXACT_SEARCH_MAX_BUFFERS`] buffers, and, with [`SolveOptions::minimize`], more than
    /// [`MINIMIZE_SEARCH_MAX_BUFFERS`]); the search over orders and local improvement had the
    /// budget instead.
    pub exact_search_skipped: bool,
    /// Wall-clock time of the whole solve.
    pub elapsed: Duration,
    /// Every phase that ran, in order, with its work and what it gained.
    pub phases: Vec<Phase>,
}

/// Why [`solve`] returned no outcome.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
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

/// Solves a packing problem as the options ask: the chosen strategy (for `auto`, every
/// heuristic, keeping the smallest arena, then the exact search or local improvement while
/// [`SolveOptions`]' budgets allow), and the result checked by [`crate::verify`].
pub fn solve(problem: &Problem, options: &SolveOptions) -> Result<Outcome, SolveError> {
    Solver::default().solve(problem, options)
}

/// A reusable solver: [`Solver::solve`] does what [`solve`] does, and keeps its working
/// memory for the next problem: the compressed times, one best-fit workspace (the index of
/// placed buffers and the placement lists) per thread, and the vectors of local improvement.
/// They are cleared, not freed, between problems, so an engine that solves many problems
/// allocates little more than the solutions it gets back. The best-fit workspaces of a
/// problem of more than 65,536 buffers are freed after use: allocating them costs under 1%
/// of such a solve, and keeping them would hold tens of megabytes per thread. The answer
/// never depends on what an earlier problem left behind.
#[derive(Debug, Default)]
pub struct Solver {
    slots: TimeSlots,
    scratch: Vec<Scratch>,
    improver: Improver,
}

impl Solver {
    /// A solver with no vectors allocated yet.
    pub fn new() -> Solver {
        Solver::default()
    }

    /// Solves a packing problem as the options ask (see [`solve`]), reusing this solver's
    /// buffers.
    pub fn solve(
        &mut self,
        problem: &Problem,
        options: &SolveOptions,
    ) -> Result<Outcome, SolveError> {
        let started = Instant::now();
        problem.validate()?;
        self.slots.fill(problem);
        let outcome = solve_with(self, problem, options, started)?;
        // A feasibility question (a capacity without `minimize`) takes a shorter road than
        // minimizing: its search looks for any placement under the capacity, with the node
        // budget, and can give up where the minimizing phases would have found one that fits
        // (a 14-buffer problem capped at the default answer plus 11 bytes, budget 1,920).
        // "Nothing found" must not be the answer where solving without a capacity fits, so
        // those phases run then, on what is left of the time limit.
        let capacity = match (options.capacity, problem.capacity) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(capacity) = capacity.filter(|_| !options.minimize)
            && outcome.solution.is_none()
            && !outcome.proven_infeasible
        {
            let minimizing = SolveOptions {
                minimize: true,
                ..options.clone()
            };
            let second = solve_with(self, problem, &minimizing, started)?;
            if second.solution.is_some() && second.arena <= capacity {
                return Ok(second);
            }
        }
        Ok(outcome)
    }
}

fn solve_with(
    solver: &mut Solver,
    problem: &Problem,
    options: &SolveOptions,
    started: Instant,
) -> Result<Outcome, SolveError> {
    let Solver {
        slots,
        scratch,
        improver,
    } = solver;
    let slots = &*slots;
    let bound = lower_bound(problem);
    let capacity = match (options.capacity, problem.capacity) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    // A capacity without `minimize` asks whether something fits: any arena that does answers
    // it (see the module docs).
    let feasibility = capacity.filter(|_| !options.minimize);
    // An arena at or below this is done: nothing more is searched for.
    let accepted = options
        .gap
        .accepted(bound)
        .max(feasibility.unwrap_or_default());

    let single = [options.strategy];
    let strategies: &[Strategy] = if options.strategy == Strategy::Auto {
        &Strategy::HEURISTICS
    } else {
        &single
    };
    let mut tries: Vec<Producer> = strategies.iter().map(|&s| Producer::Heuristic(s)).collect();
    let ties = options.strategy == Strategy::Auto && sizes_tie_often(problem);
    if ties && problem.len() <= AUTO_TIE_BREAKS_MAX_BUFFERS {
        let others = TieBreak::ALL
            .into_iter()
            .filter(|&t| t != TieBreak::default());
        tries.extend(others.map(Producer::GreedySize));
    }
    // The work cap of every best-fit try of `auto` at scale (see `SCALE_WORK_PER_BUFFER`).
    let scale_min = SCALE_MIN_BUFFERS;
    #[cfg(test)]
    let scale_min = tests::SCALE_FROM
        .with(std::cell::Cell::get)
        .unwrap_or(scale_min);
    let scale_floor = SCALE_WORK_FLOOR;
    #[cfg(test)]
    let scale_floor = match tests::SCALE_FROM.with(std::cell::Cell::get) {
        Some(_) => 0,
        None => scale_floor,
    };
    let scale_cap = if options.strategy == Strategy::Auto && problem.len() >= scale_min {
        (problem.len() as u64)
            .saturating_mul(SCALE_WORK_PER_BUFFER)
            .max(scale_floor)
    } else {
        u64::MAX
    };
    // `greedy-lifetime`'s cap at scale (see `LIFETIME_SCALE_FACTOR`): the others' where
    // their floor sets it.
    let per_buffer = (problem.len() as u64).saturating_mul(SCALE_WORK_PER_BUFFER);
    let lifetime_cap = if per_buffer >= scale_cap {
        per_buffer.saturating_mul(LIFETIME_SCALE_FACTOR)
    } else {
        scale_cap
    };
    // One try: its solution, arena and index work (what a round of the search over orders
    // from it would cost), or `None` where `give_up` gave it up (a best-fit order only).
    // `long-short` is given up only at the scale cap: its long buffers' best fit is no
    // start of the search over orders, and its work is not `greedy-lifetime`'s.
    // Whether `long-short` ran its later placements (its first was cheap): only then may the
    // reversed ones run after the heuristics (see `split::reversed_wanted`). Set by the one
    // try of `long-short`, so the same for any thread count.
    let long_short_later = AtomicBool::new(false);
    let run_try = |scratch: &mut Scratch, i: usize, give_up: GiveUp| -> TryResult {
        let Some(&producer) = tries.get(i) else {
            return Ok((None, 0));
        };
        let give_up = if producer == Producer::Heuristic(Strategy::LongShort) {
            GiveUp::at_work(scale_cap)
        } else if producer == Producer::Heuristic(Strategy::GreedyLifetime) && scale_cap < u64::MAX
        {
            GiveUp::at_work(lifetime_cap)
        } else {
            give_up
        };
        let order = match producer {
            Producer::Heuristic(strategy) => Ok(strategy),
            Producer::GreedySize(tie_break) => Err(tie_break),
            Producer::ExactSearch
            | Producer::Reordering
            | Producer::LocalImprovement
            | Producer::ReversedLongShort
            | Producer::Repacking => {
                return Ok((None, 0));
            }
        };
        let (solution, work, later) =
            run_within(problem, slots, order, scratch, give_up, options.threads)?;
        if later {
            long_short_later.store(true, AtomicOrdering::Relaxed);
        }
        let Some(solution) = solution else {
            return Ok((None, work));
        };
        debug_check(problem, &solution, producer)?;
        let arena = solution.arena_size(problem);
        Ok((Some((solution, arena)), work))
    };
    let done =
        |result: &TryResult| matches!(result, Ok((Some((_, arena)), _)) if *arena <= accepted);
    // `auto` runs its tries in two waves. First `greedy-lifetime` and `first-fit-time`, the
    // cheapest orders where lifetimes are long; then the others, each given up once its
    // placement index has done [`ORDER_WORK_CAP`] times the work `greedy-lifetime`'s did
    // (see the constant), and only those before the first try of the first wave that is
    // done. Within a wave the tries run in parallel; every result is read in order, as if
    // run one by one.
    let lifetime = tries
        .iter()
        .position(|&p| p == Producer::Heuristic(Strategy::GreedyLifetime));
    let first_fit = tries
        .iter()
        .position(|&p| p == Producer::Heuristic(Strategy::FirstFitTime));
    // Only where sizes seldom tie: where they repeat (real graphs, MiniMalloc, idealloc), size
    // order packs equal buffers side by side and does about the work of lifetime order
    // (`iopddl_Y_1`: 0.7 s against 1.0 s), so nothing is given up, and one wave lets the
    // portfolio stop at the first order at the bound (there `greedy-breadth`, which the two
    // waves ran only after the first, doubling the solve's time).
    //
    // At scale, and where nothing but the bound stops the portfolio (no gap, no capacity to
    // fit), `long-short` runs in the first wave too, and starts first: where lifetimes are
    // long it is the costliest try that finishes and the one whose answer is kept, so it runs
    // on one thread while the other does `greedy-lifetime` and `first-fit-time`. Every try of
    // that wave runs to its end (none stops it early), so what is read does not depend on
    // which thread finished first.
    let long_short = tries
        .iter()
        .position(|&p| p == Producer::Heuristic(Strategy::LongShort));
    let at_scale = scale_cap < u64::MAX;
    let eager_long_short = at_scale && accepted == bound;
    //
    // At scale the two waves are kept where sizes tie often too (a million sizes drawn from
    // the generator family's range tie often enough), so that the rule above applies; the
    // second wave is then bounded by the scale cap alone, as one wave would be.
    let wave_one: Vec<usize> = match (options.strategy, lifetime, first_fit) {
        (Strategy::Auto, Some(l), Some(f)) if !ties || at_scale => long_short
            .filter(|_| eager_long_short)
            .into_iter()
            .chain([l.min(f), l.max(f)])
            .collect(),
        _ => (0..tries.len()).collect(),
    };
    let wave_one_done = |result: &TryResult| !eager_long_short && done(result);
    let mut results: Vec<Option<TryResult>> = (0..tries.len()).map(|_| None).collect();
    let first = run_portfolio(
        wave_one.len(),
        options.threads,
        scratch,
        |scratch, k| {
            run_try(
                scratch,
                wave_one.get(k).copied().unwrap_or(usize::MAX),
                GiveUp::at_work(scale_cap),
            )
        },
        wave_one_done,
    );
    for (&i, result) in wave_one.iter().zip(first) {
        if let Some(slot) = results.get_mut(i) {
            *slot = result;
        }
    }
    let first_done = wave_one
        .iter()
        .copied()
        .filter(|&i| results.get(i).is_some_and(|r| r.as_ref().is_some_and(done)))
        .min();
    let cap = match lifetime.and_then(|l| results.get(l)) {
        Some(Some(Ok((Some(_), work)))) if !ties => work.saturating_mul(ORDER_WORK_CAP),
        _ => u64::MAX,
    }
    .min(scale_cap);
    let searchable = problem.len() <= EXACT_SEARCH_MAX_BUFFERS;
    // The budget of the search over orders, in units of index work. Without a node budget
    // (a search bounded by the clock): the default budget for each ten seconds of the time
    // limit.
    let nodes = options.node_limit.unwrap_or_else(|| {
        let tens = (options.time_limit.as_secs() / 10).max(1);
        DEFAULT_NODE_LIMIT.saturating_mul(tens)
    });
    let reorder_budget = nodes.saturating_mul(REORDER_WORK_PER_NODE);
    // A second-wave try whose arena passes the first wave's best (and what the gap or the
    // capacity accepts) ends above it: it can be neither the answer nor, on ties, picked
    // before it. It is given up there once it can no longer matter to a later phase either
    // (see `GIVE_UP_AFTER_STARTS`).
    let first_best = wave_one
        .iter()
        .filter_map(|&i| match results.get(i) {
            Some(Some(Ok((Some((_, arena)), _)))) => Some(*arena),
            _ => None,
        })
        .min();
    #[cfg(test)]
    let first_best = first_best.filter(|_| !tests::NO_EARLY_GIVE_UP.with(std::cell::Cell::get));
    let give_up = match first_best {
        Some(best) if options.strategy == Strategy::Auto => GiveUp {
            work: cap,
            above: best.max(accepted),
            after: if searchable {
                0
            } else if options.node_limit.is_some() {
                reorder_budget / GIVE_UP_AFTER_STARTS
            } else {
                u64::MAX
            },
        },
        _ => GiveUp::at_work(cap),
    };
    // With a gap or a capacity to fit, a first-wave answer within it ends the portfolio:
    // the user accepts any answer within it, and the tries before it would only be run to pick, among
    // answers the user accepts, the one a sequential run picks. Without a gap (an answer at
    // the bound), they still run, so that default plans keep their bytes.
    let stop_at_first_wave = first_done.is_some() && accepted > bound;
    // At scale, once `greedy-lifetime` passed the cap (given up at `LIFETIME_SCALE_FACTOR`
    // times it, or finished past it), the other full best-fit orders are skipped (see
    // `Skip::LifetimeOrderGivenUp`): they would be given up at the cap. `long-short` still
    // runs.
    let lifetime_given_up = at_scale
        && match lifetime.and_then(|l| results.get(l)) {
            Some(Some(Ok((None, _)))) => true,
            Some(Some(Ok((Some(_), work)))) => *work > scale_cap,
            _ => false,
        };
    let skipped = |i: usize| {
        lifetime_given_up
            && match tries.get(i) {
                Some(Producer::Heuristic(strategy)) => strategy.best_fit_order().is_some(),
                Some(Producer::GreedySize(_)) => true,
                _ => false,
            }
    };
    let wave_two: Vec<usize> = (0..tries.len())
        .filter(|&i| {
            !stop_at_first_wave
                && !wave_one.contains(&i)
                && first_done.is_none_or(|d| i < d)
                && !skipped(i)
        })
        .collect();
    let second = run_portfolio(
        wave_two.len(),
        options.threads,
        scratch,
        |scratch, k| {
            run_try(
                scratch,
                wave_two.get(k).copied().unwrap_or(usize::MAX),
                give_up,
            )
        },
        done,
    );
    for (&i, result) in wave_two.iter().zip(second) {
        if let Some(slot) = results.get_mut(i) {
            *slot = result;
        }
    }
    // The best-fit heuristics' solutions, where a search over orders may start; kept only
    // when the budget allows a round from each of up to four of them.
    let keep_start =
        |work: u64| !searchable && work.saturating_mul(GIVE_UP_AFTER_STARTS) <= reorder_budget;
    let mut starts: Vec<Start> = Vec::new();
    let mut best: Option<(Solution, u64, Producer)> = None;
    let mut phases: Vec<Phase> = Vec::new();
    // The cost of the first answer: the work of the costliest heuristic that finished (in
    // index work for best fit, so that `first-fit-time`'s answer, counted in buffers, does
    // not leave the later phases a budget below one placement).
    let mut first_cost = 0u64;
    // `long-short`'s arena and work, where it finished.
    let mut long_short_done: Option<(u64, u64)> = None;
    for (i, (&producer, result)) in tries.iter().zip(results).enumerate() {
        // A try not run: skipped at scale (said in its phase), after the first answer
        // within the gap (never read), or in the second wave when the first wave's answer
        // ended the portfolio.
        let Some(result) = result else {
            if skipped(i) && !stop_at_first_wave && first_done.is_none_or(|d| i < d) {
                phases.push(Phase {
                    producer,
                    work: 0,
                    arena: None,
                    gained: 0,
                    rounds: 0,
                    skipped: Some(Skip::LifetimeOrderGivenUp),
                });
            }
            continue;
        };
        let (finished, work) = result?;
        if producer == Producer::Heuristic(Strategy::LongShort) {
            long_short_done = finished.as_ref().map(|f| (f.1, work));
        }
        let before = best.as_ref().map(|b| b.1);
        phases.push(Phase {
            producer,
            work,
            arena: finished.as_ref().map(|f| f.1),
            gained: match (before, &finished) {
                (Some(b), Some((_, a))) => b.saturating_sub(*a),
                _ => 0,
            },
            rounds: 0,
            skipped: None,
        });
        let Some((solution, arena)) = finished else {
            // Given up above the first wave's best rather than at the work cap. Run on, it
            // would have finished (and counted, at more work) or reached the cap later; either
            // way the later phases get their whole budgets, as this cost gives them, and so
            // does `greedy-lifetime`'s, at least half the cap (see `GIVE_UP_AFTER_STARTS`).
            // At scale, a try given up at the scale cap did that work too: it counts, so that
            // local improvement of `first-fit-time`'s answer gets the budget of a placement.
            if work <= cap || scale_cap < u64::MAX {
                first_cost = first_cost.max(work);
            }
            continue;
        };
        first_cost = first_cost.max(work);
        if let Producer::Heuristic(strategy) = producer
            && let Some(order) = strategy.best_fit_order()
            && keep_start(work)
        {
            starts.push(Start {
                order,
                solution: solution.clone(),
                work,
            });
        }
        if best.as_ref().is_none_or(|(_, a, _)| arena < *a) {
            best = Some((solution, arena, producer));
        }
        if arena <= accepted {
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
    // `long-short` with time reversed: a phase of its own after the heuristics, only where
    // `long-short`'s later placements ran and the best answer is still far above the bound
    // (`split::reversed_wanted`); its placements run side by side on the solve's threads.
    // Its answer is kept where it is lower than the best, and lower than `long-short`'s own
    // by a margin (`split::replaces`). Its work counts in the first answer's cost, as the
    // rest of `long-short`'s does (the later phases' budgets follow it).
    if let Some((forward, long_short_work)) = long_short_done
        && reversed_wanted(
            arena,
            bound,
            accepted,
            long_short_later.load(AtomicOrdering::Relaxed),
        )
    {
        let (placed, work) = reversed_placements(
            problem,
            slots,
            scratch,
            GiveUp::at_work(scale_cap),
            options.threads,
        )?;
        let before = arena;
        let reached = placed.as_ref().map(|p| p.1);
        if let Some((next, next_arena)) = placed {
            debug_check(problem, &next, Producer::ReversedLongShort)?;
            if replaces(next_arena, (arena, forward), true) {
                (solution, arena, produced_by) = (next, next_arena, Producer::ReversedLongShort);
            }
        }
        first_cost = first_cost.max(long_short_work.saturating_add(work));
        phases.push(Phase {
            producer: Producer::ReversedLongShort,
            work,
            arena: reached,
            gained: before.saturating_sub(arena),
            rounds: 0,
            skipped: None,
        });
    }
    let mut proven_optimal = arena == bound;
    let mut proven_infeasible = capacity.is_some_and(|c| bound > c);
    let fits = |arena: u64| capacity.is_none_or(|c| arena <= c);
    let minimize =
        options.minimize || (options.strategy == Strategy::Auto && feasibility.is_none());
    // When minimizing, the search, the search over orders and local improvement run as if
    // there were no capacity, whether or not the heuristics meet it: so asking for a capacity
    // never gives a worse answer than not asking (the answer is the same whenever the
    // uncapped one fits). A capacity changes what a phase keeps and which heights the search
    // probes: capped at the default answer plus 7 bytes, a 21-buffer problem came out at 263
    // where the uncapped phases found 259 (the capped search kept a fitting 263 that local
    // improvement could not lower; uncapped, local improvement took the heuristics' 269 to
    // 259). Only an answer that still misses the capacity gets a search of its own under it,
    // with a budget of its own, after them. Another strategy that misses the capacity asks
    // the search for any fitting placement (decision mode).
    let phase_capacity = if minimize { None } else { capacity };
    let phase_fits = |arena: u64| phase_capacity.is_none_or(|c| arena <= c);

    let wants_search = minimize || !fits(arena);
    // Whether a phase may still improve an answer of `arena`: one within the gap that fits
    // is done, and so is a proven one.
    let open = |arena: u64, proven_optimal: bool, proven_infeasible: bool| {
        wants_search
            && !proven_optimal
            && !proven_infeasible
            && (arena > accepted || !phase_fits(arena))
    };
    // Keeps a search's answer where it improves on ours (under `fits`, the capacity of the
    // phase), and what it proved.
    let take = |found: exact::SearchOutcome,
                fits: &dyn Fn(u64) -> bool,
                (solution, arena, produced_by): (&mut Solution, &mut u64, &mut Producer),
                (proven_optimal, proven_infeasible): (&mut bool, &mut bool)|
     -> Result<(), SolveError> {
        if let Some(better) = found.solution {
            debug_check(problem, &better, Producer::ExactSearch)?;
            let better_arena = better.arena_size(problem);
            if fits(better_arena) && (better_arena < *arena || !fits(*arena)) {
                *solution = better;
                *arena = better_arena;
                *produced_by = Producer::ExactSearch;
            }
            // The proof is about the search's solution; it covers ours at the same size.
            *proven_optimal |= found.proven_optimal && better_arena == *arena;
            // An optimum above the capacity: nothing fits it.
            *proven_infeasible |= found.proven_optimal && !fits(better_arena);
        }
        // The search's bound (raised by the heights it proved infeasible) is above it.
        *proven_infeasible |= found.proven_infeasible || !fits(found.lower_bound);
        Ok(())
    };
    // The exact search from the best answer so far, under the phase's capacity, with what is
    // left of the time limit.
    let search_from = |(solution, arena, produced_by): (&mut Solution, &mut u64, &mut Producer),
                       (proven_optimal, proven_infeasible): (&mut bool, &mut bool),
                       phases: &mut Vec<Phase>|
     -> Result<(), SolveError> {
        let remaining = options.time_limit.saturating_sub(started.elapsed());
        if remaining.is_zero() {
            return Ok(());
        }
        let first = exact::SearchOptions {
            time_limit: remaining,
            node_limit: options.node_limit,
            capacity: phase_capacity,
            incumbent: phase_fits(*arena).then(|| solution.clone()),
            minimize,
            gap: options.gap,
            threads: options.threads,
        };
        let before = *arena;
        let found = exact::search(problem, &first);
        let nodes = found.nodes;
        take(
            found,
            &phase_fits,
            (solution, arena, produced_by),
            (proven_optimal, proven_infeasible),
        )?;
        phases.push(Phase::after(
            Producer::ExactSearch,
            nodes,
            before,
            *arena,
            0,
        ));
        Ok(())
    };
    if open(arena, proven_optimal, proven_infeasible) && searchable {
        search_from(
            (&mut solution, &mut arena, &mut produced_by),
            (&mut proven_optimal, &mut proven_infeasible),
            &mut phases,
        )?;
    }

    let deadline = started
        .checked_add(options.time_limit)
        .unwrap_or_else(|| started + Duration::from_secs(1 << 32));
    // Too large for the exact search: search over best-fit orders instead, from each
    // best-fit heuristic's order, for as many rounds as its share of the budget pays for.
    if open(arena, proven_optimal, proven_infeasible) && !searchable && Instant::now() < deadline {
        if starts.iter().any(|s| worth_starting(s.order)) {
            starts.retain(|s| worth_starting(s.order));
        }
        // Proportional to the first answer's cost, within the node budget's share.
        let budget = reorder_budget.min(first_cost.saturating_mul(REORDER_COST_FACTOR));
        let (found, spent) = reorder(
            problem,
            slots,
            (bound, accepted, arena),
            &starts,
            budget,
            options.threads,
            scratch,
            deadline,
        )?;
        let before = arena;
        if let Some(better) = found.best.filter(|r| r.arena < arena) {
            debug_check(problem, &better.solution, Producer::Reordering)?;
            solution = better.solution;
            arena = better.arena;
            produced_by = Producer::Reordering;
        }
        phases.push(Phase::after(
            Producer::Reordering,
            spent,
            before,
            arena,
            found.rounds,
        ));
    }
    drop(starts);
    // Best fit is done: keep its working memory for the next problem only where that is
    // small (see `Scratch::trim`).
    scratch.iter_mut().for_each(Scratch::trim);

    // Local improvement around the peak, with the same budget, whether or not the exact
    // search ran: it lowers what the search could not, at any scale. Over the exact search's
    // size, its budget also follows the first answer's cost.
    let improve_work = options
        .node_limit
        .map_or(u64::MAX, |n| n.saturating_mul(IMPROVE_WORK_PER_NODE));
    let improve_work = if searchable {
        improve_work
    } else {
        improve_work.min(first_cost.saturating_mul(IMPROVE_COST_FACTOR))
    };
    let mut improve = |solution: &mut Solution,
                       arena: &mut u64,
                       produced_by: &mut Producer,
                       phases: &mut Vec<Phase>| {
        let mut offsets = solution.offsets.clone();
        // Layer moves for `auto` at scale, where a window around a peak takes out long-lived
        // buffers that rarely move (see `Improver::try_layers`): the work of the first
        // answer, at most `SCALE_WORK_PER_BUFFER` per buffer (deterministic, whatever the
        // machine).
        improver.layer_work = if scale_cap < u64::MAX {
            first_cost.min(per_buffer)
        } else {
            0
        };
        let improved = improver.improve(
            problem,
            slots,
            &mut offsets,
            accepted,
            improve_work,
            deadline,
        );
        let before = *arena;
        if improved.changed && improved.arena < *arena {
            let better = Solution { offsets };
            debug_check(problem, &better, Producer::LocalImprovement)?;
            *solution = better;
            *arena = improved.arena;
            *produced_by = Producer::LocalImprovement;
        }
        phases.push(Phase::after(
            Producer::LocalImprovement,
            improved.work,
            before,
            *arena,
            improved.moves,
        ));
        Ok::<(), SolveError>(())
    };
    if open(arena, proven_optimal, proven_infeasible)
        && !solution.offsets.is_empty()
        && Instant::now() < deadline
    {
        improve(&mut solution, &mut arena, &mut produced_by, &mut phases)?;
    }
    // At scale, best fit again from the answer, highest tops first (`greedy::repack`): on
    // heavy-tailed problems at a million buffers it lowers what local improvement leaves by
    // up to 0.6%, for about one best fit's work a round (up to twice the first answer's cost
    // each, at most `greedy::REPACK_ROUNDS` rounds); only above 1.02x the bound.
    if scale_cap < u64::MAX
        && open(arena, proven_optimal, proven_infeasible)
        && repack_wanted(arena, bound)
        && !solution.offsets.is_empty()
        && Instant::now() < deadline
    {
        let budget = first_cost.saturating_mul(2);
        let mut own = Scratch::default();
        let state = scratch.first_mut().unwrap_or(&mut own);
        let (found, work, rounds) = match repack(
            problem,
            slots,
            (&solution.offsets, arena),
            state,
            (budget, deadline),
        ) {
            Ok(found) => found,
            // An order whose offsets would overflow gives no answer: the one we have stands.
            Err(ProblemError::TooLarge) => (None, 0, 1),
            Err(e) => return Err(e.into()),
        };
        let before = arena;
        if let Some((next, next_arena)) = found.filter(|f| f.1 < arena) {
            debug_check(problem, &next, Producer::Repacking)?;
            (solution, arena, produced_by) = (next, next_arena, Producer::Repacking);
        }
        phases.push(Phase::after(
            Producer::Repacking,
            work,
            before,
            arena,
            rounds,
        ));
    }
    // Asked to minimize, a problem over the exact search's default size but within its own
    // limit gets it now, from the answer of the phases above (see
    // `MINIMIZE_SEARCH_MAX_BUFFERS`).
    let searched_late =
        options.minimize && !searchable && problem.len() <= MINIMIZE_SEARCH_MAX_BUFFERS;
    if searched_late && open(arena, proven_optimal, proven_infeasible) {
        search_from(
            (&mut solution, &mut arena, &mut produced_by),
            (&mut proven_optimal, &mut proven_infeasible),
            &mut phases,
        )?;
    }

    // A capacity the minimizing phases' answer misses: a search of its own under it, then
    // local improvement of what it finds.
    if minimize && !fits(arena) {
        proven_infeasible |= proven_optimal;
        let remaining = options.time_limit.saturating_sub(started.elapsed());
        if !proven_infeasible && (searchable || searched_late) && !remaining.is_zero() {
            let under = exact::SearchOptions {
                time_limit: remaining,
                node_limit: options.node_limit,
                capacity,
                incumbent: None,
                minimize: options.minimize,
                gap: options.gap,
                threads: options.threads,
            };
            proven_optimal = false;
            let before = arena;
            let found = exact::search(problem, &under);
            let nodes = found.nodes;
            take(
                found,
                &fits,
                (&mut solution, &mut arena, &mut produced_by),
                (&mut proven_optimal, &mut proven_infeasible),
            )?;
            phases.push(Phase::after(Producer::ExactSearch, nodes, before, arena, 0));
            if fits(arena)
                && !proven_optimal
                && arena > accepted
                && !solution.offsets.is_empty()
                && Instant::now() < deadline
            {
                improve(&mut solution, &mut arena, &mut produced_by, &mut phases)?;
            }
        }
    }

    let solution = fits(arena).then_some(solution);
    if let Some(s) = &solution {
        // Every returned solution is verified, in release builds too; `fits` has checked the
        // options' capacity (the verifier checks the problem's).
        verify(problem, s).map_err(|error| SolveError::Invalid {
            producer: produced_by,
            error,
        })?;
    }
    Ok(Outcome {
        proven_optimal: (proven_optimal || arena == bound) && solution.is_some(),
        solution,
        arena,
        lower_bound: bound,
        proven_infeasible,
        capacity,
        produced_by,
        exact_search_skipped: wants_search && !searchable && !searched_late && arena > bound,
        elapsed: started.elapsed(),
        phases,
    })
}

/// Verifies an intermediate solution in debug builds (and so in every test); release builds
/// verify only the returned one.
fn debug_check(
    problem: &Problem,
    solution: &Solution,
    producer: Producer,
) -> Result<(), SolveError> {
    if cfg!(debug_assertions) {
        verify(problem, solution).map_err(|error| SolveError::Invalid { producer, error })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Buffer;
    use crate::generate::Shape;

    thread_local! {
        /// Turns the second wave's give-up above the first wave's best off on this thread.
        pub(super) static NO_EARLY_GIVE_UP: std::cell::Cell<bool> =
            const { std::cell::Cell::new(false) };
        /// Replaces `SCALE_MIN_BUFFERS` on this thread.
        pub(super) static SCALE_FROM: std::cell::Cell<Option<usize>> =
            const { std::cell::Cell::new(None) };
    }

    /// At scale, every best-fit try of `auto` (`greedy-lifetime` and `long-short` too) is
    /// given up once its index work passes `SCALE_WORK_PER_BUFFER` per buffer; below the
    /// threshold nothing changes. A training step whose best-fit orders cost more than that
    /// (the threshold lowered to its size on this thread) keeps `first-fit-time`'s answer
    /// or a finished try's; one buffer fewer than the threshold gives the outcome of no
    /// threshold at all, byte for byte. Once `greedy-lifetime` is given up, the other full
    /// best-fit orders are skipped and their phases say why; `long-short` still runs. The
    /// same holds where sizes tie often (each size given to two buffers), where below the
    /// threshold `auto` runs every try in one wave.
    #[test]
    fn at_scale_best_fit_orders_are_bounded_by_the_cheapest_answers_work() {
        let n = 8_000;
        let generated = Shape::Training { saved_percent: 33 }.generate(n, 6);
        // Every size given to two buffers: all bytes tie.
        let mut tied = generated.clone();
        let sizes: Vec<u64> = tied.buffers.iter().map(|b| b.size).collect();
        for (i, buffer) in tied.buffers.iter_mut().enumerate() {
            buffer.size = sizes[i & !1];
        }
        assert!(!sizes_tie_often(&generated) && sizes_tie_often(&tied));
        for problem in [generated, tied] {
            at_scale_case(&problem, n);
        }
    }

    fn at_scale_case(problem: &Problem, n: usize) {
        let options = SolveOptions {
            node_limit: Some(5_000),
            threads: 2,
            ..SolveOptions::default()
        };
        let with_threshold = |from: usize| {
            SCALE_FROM.with(|s| s.set(Some(from)));
            let outcome = solve(problem, &options);
            SCALE_FROM.with(|s| s.set(None));
            outcome.expect("solves")
        };
        let plain = solve(problem, &options).expect("solves");
        let below = with_threshold(n + 1);
        assert_eq!(below.solution, plain.solution);
        assert_eq!(below.phases, plain.phases);
        let scaled = with_threshold(n);
        let cap = n as u64 * SCALE_WORK_PER_BUFFER;
        let heuristic = |outcome: &Outcome, strategy: Strategy| {
            let producer = Producer::Heuristic(strategy);
            let phase = outcome.phases.iter().find(|p| p.producer == producer);
            phase.cloned().expect("every heuristic runs")
        };
        let lifetime = heuristic(&plain, Strategy::GreedyLifetime);
        assert!(
            lifetime.arena.is_some() && lifetime.work > cap,
            "{lifetime:?}"
        );
        // `greedy-lifetime` passes the cap, so the other full best-fit orders are skipped,
        // and say so; `long-short` still runs.
        let mut skipped = Vec::new();
        for phase in &scaled.phases {
            let Producer::Heuristic(strategy) = phase.producer else {
                continue;
            };
            if strategy == Strategy::FirstFitTime {
                let plain = heuristic(&plain, strategy);
                assert_eq!((phase.work, phase.arena), (plain.work, plain.arena));
            } else if let Some(reason) = phase.skipped {
                assert_eq!(reason, Skip::LifetimeOrderGivenUp);
                assert_eq!((phase.work, phase.arena), (0, None), "{phase:?}");
                skipped.push(strategy);
            } else if phase.arena.is_none() {
                assert!(phase.work > cap, "{phase:?}");
            } else if strategy != Strategy::GreedyLifetime {
                assert!(phase.work <= cap, "{phase:?}");
            }
        }
        // `greedy-lifetime` passed the cap (so the others are skipped), and is given up at
        // `LIFETIME_SCALE_FACTOR` times it, and only there.
        let lifetime = heuristic(&scaled, Strategy::GreedyLifetime);
        assert!(lifetime.work > cap, "{lifetime:?}");
        assert_eq!(
            lifetime.arena.is_none(),
            lifetime.work > cap * LIFETIME_SCALE_FACTOR,
            "{lifetime:?}"
        );
        assert_eq!(
            skipped,
            [
                Strategy::GreedySize,
                Strategy::GreedyBreadth,
                Strategy::GreedyArea
            ]
        );
        let long_short = heuristic(&scaled, Strategy::LongShort);
        assert!(long_short.skipped.is_none() && long_short.work > 0);
        let first_fit = heuristic(&scaled, Strategy::FirstFitTime).arena;
        assert!(first_fit.is_some_and(|a| scaled.arena <= a));
        let solution = scaled.solution.as_ref().expect("an answer");
        assert_eq!(verify(problem, solution), Ok(()));
    }

    /// A second-wave order whose arena passes the first wave's best is given up before its
    /// end (as soon as it passes, where the exact search runs; past a start's share of the
    /// search over orders' budget, where that search runs), and the outcome is the one
    /// running it to its end gives: the same offsets, producer and later phases.
    #[test]
    fn orders_above_the_first_waves_best_are_given_up_without_changing_the_outcome() {
        let heavy = Shape::HeavyTailed {
            tail_permille: 100,
            divisor: 2,
        };
        let cases = [
            (heavy, 3_000, 1),
            (Shape::Training { saved_percent: 33 }, 3_000, 2),
            (Shape::Mixed, 6_000, 3),
            (Shape::Training { saved_percent: 33 }, 6_000, 4),
            (heavy, 6_000, 5),
        ];
        let mut earlier = 0;
        for (shape, n, seed) in cases {
            let problem = shape.generate(n, seed);
            // A node budget small enough that a start's share (a quarter of 200 units per
            // node) is below what these orders cost.
            let options = SolveOptions {
                node_limit: Some(5_000),
                threads: 2,
                ..SolveOptions::default()
            };
            let early = solve(&problem, &options).expect("solves");
            NO_EARLY_GIVE_UP.with(|off| off.set(true));
            let full = solve(&problem, &options);
            NO_EARLY_GIVE_UP.with(|off| off.set(false));
            let full = full.expect("solves");
            let context = format!("{shape} {n} seed {seed}");
            assert_eq!(early.solution, full.solution, "{context}");
            assert_eq!(early.produced_by, full.produced_by, "{context}");
            assert_eq!(early.phases.len(), full.phases.len(), "{context}");
            let first_best = early
                .phases
                .iter()
                .filter(|p| {
                    matches!(
                        p.producer,
                        Producer::Heuristic(Strategy::GreedyLifetime | Strategy::FirstFitTime)
                    )
                })
                .filter_map(|p| p.arena)
                .min()
                .expect("the first wave answers");
            for (e, f) in early.phases.iter().zip(&full.phases) {
                assert_eq!(e.producer, f.producer, "{context}");
                if e.arena == f.arena && e.work == f.work {
                    // A heuristic's gain is over the tries before it, which may have been
                    // given up; everything else is the same.
                    let gained = match e.producer {
                        Producer::Heuristic(_) => f.gained,
                        _ => e.gained,
                    };
                    assert_eq!(
                        &Phase {
                            gained,
                            ..e.clone()
                        },
                        f,
                        "{context}"
                    );
                    continue;
                }
                // Given up early: it would have ended above the first wave's best (or been
                // given up at its work cap), after more work.
                assert_eq!(e.arena, None, "{context}: {e:?} {f:?}");
                assert!(f.arena.is_none_or(|a| a > first_best), "{context}: {f:?}");
                assert!(e.work < f.work, "{context}: {e:?} {f:?}");
                earlier += 1;
            }
            assert_eq!(
                verify(&problem, early.solution.as_ref().expect("an answer")),
                Ok(())
            );
        }
        assert!(earlier >= 5, "only {earlier} orders were given up early");
    }

    #[test]
    fn sizes_tie_often_weighs_tied_buffers_by_their_bytes() {
        let with_sizes =
            |sizes: &[u64]| Problem::new(sizes.iter().map(|&s| Buffer::new(0, 1, s)).collect());
        // Sizes 1 to 100 (5,050 bytes), no ties; then 7 twice: 14 of 5,057 bytes tie.
        let mut sizes: Vec<u64> = (1..=100).collect();
        assert!(!sizes_tie_often(&with_sizes(&sizes)));
        sizes.push(7);
        assert!(!sizes_tie_often(&with_sizes(&sizes)));
        // 90 twice: 14 + 180 = 194 of 5,147 bytes, under a tenth; 500 twice: 1,194 of 6,147.
        sizes.push(90);
        assert!(!sizes_tie_often(&with_sizes(&sizes)));
        sizes.push(500);
        sizes.push(500);
        assert!(sizes_tie_often(&with_sizes(&sizes)));
        // Zero-sized buffers do not count, tied or not.
        let mut zeros = vec![0; 50];
        zeros.extend(1..=100);
        assert!(!sizes_tie_often(&with_sizes(&zeros)));
        assert!(!sizes_tie_often(&with_sizes(&[0, 0])));
        assert!(!sizes_tie_often(&with_sizes(&[])));
        assert!(sizes_tie_often(&with_sizes(&[64, 64])));
        // The generator family draws sizes log-uniformly over 256 B - 4 MiB: only small sizes
        // tie (about 44% of the buffers, 1.5% of the bytes).
        for shape in Shape::FAMILY {
            assert!(!sizes_tie_often(&shape.generate(100_000, 1)), "{shape}");
        }
        // A stack of twelve identical blocks, each with one tensor of a size of its own: the
        // blocks' sizes tie, the one-off tensors do not.
        let mut blocks: Vec<u64> = (0..12).flat_map(|_| [4096, 16_384, 1 << 20]).collect();
        blocks.extend((0..12).map(|k| 3000 + k));
        assert!(sizes_tie_often(&with_sizes(&blocks)));
    }

    /// `repack` from a valid answer (`first-fit-time`'s on a heavy-tailed problem, far above
    /// best fit's): a lower arena, valid, within its rounds and work; from its own answer
    /// again never an arena that is not lower; with its deadline passed, one round only.
    #[test]
    fn repacking_lowers_a_valid_answer() {
        let problem = Shape::HeavyTailed {
            tail_permille: 100,
            divisor: 100,
        }
        .generate(3000, 7);
        let slots = TimeSlots::new(&problem);
        let start = crate::first_fit::first_fit_by_time(&problem).expect("placed");
        let arena = start.arena_size(&problem);
        let mut scratch = Scratch::default();
        let later = Instant::now() + Duration::from_secs(3600);
        let mut run = |offsets: &[u64], arena: u64, work: u64| {
            repack(
                &problem,
                &slots,
                (offsets, arena),
                &mut scratch,
                (work, later),
            )
            .expect("no overflow")
        };
        let (found, work, rounds) = run(&start.offsets, arena, u64::MAX);
        let (next, next_arena) = found.expect("lower");
        verify(&problem, &next).expect("valid");
        assert_eq!(next.arena_size(&problem), next_arena);
        assert!(next_arena < arena && next_arena >= lower_bound(&problem));
        assert!(work > 0 && (1..=crate::greedy::REPACK_ROUNDS).contains(&rounds));
        let (again, _, _) = run(&next.offsets, next_arena, u64::MAX);
        assert!(again.is_none_or(|(s, a)| a < next_arena && verify(&problem, &s).is_ok()));
        // A work cap of one unit gives every round up at once.
        let (capped, _, rounds) = run(&start.offsets, arena, 1);
        assert!(capped.is_none() && rounds == 1);
        // A deadline already passed: one round only.
        let (_, _, rounds) = repack(
            &problem,
            &slots,
            (&start.offsets, arena),
            &mut Scratch::default(),
            (u64::MAX, Instant::now()),
        )
        .expect("no overflow");
        assert_eq!(rounds, 1);
    }

    /// `solve` with `SCALE_MIN_BUFFERS` replaced by `from` on this thread.
    fn solve_scaled_from(problem: &Problem, options: &SolveOptions, from: usize) -> Outcome {
        SCALE_FROM.with(|s| s.set(Some(from)));
        let outcome = solve(problem, options);
        SCALE_FROM.with(|s| s.set(None));
        outcome.expect("solves")
    }

    /// At scale (the threshold lowered to the problem's size on this thread) `auto` repacks
    /// after local improvement on a heavy-tailed problem, and its phase says what it spent
    /// and gained; below the threshold there is no such phase, and none on a training step
    /// whose answer is within 1.02x of the bound.
    #[test]
    fn repacking_runs_at_scale_only() {
        let (num, den) = crate::greedy::REPACK_ABOVE;
        assert!(repack_wanted(num * 100 + 1, den * 100));
        assert!(!repack_wanted(num * 100, den * 100));
        assert!(repack_wanted(u64::MAX, u64::MAX / 2));
        assert!(!repack_wanted(u64::MAX, u64::MAX));
        // Over the exact search's size: local improvement runs, then the repacking.
        let n = EXACT_SEARCH_MAX_BUFFERS + 1000;
        let problem = crate::generate::heavy_tailed(n, 1);
        let options = SolveOptions {
            node_limit: Some(5_000),
            threads: 1,
            ..SolveOptions::default()
        };
        let phase = |from: usize| {
            let outcome = solve_scaled_from(&problem, &options, from);
            verify(&problem, outcome.solution.as_ref().expect("solved")).expect("valid");
            let found = outcome
                .phases
                .iter()
                .find(|p| p.producer == Producer::Repacking);
            (found.cloned(), outcome)
        };
        let (below, _) = phase(n + 1);
        assert_eq!(below, None);
        let step = Shape::Training { saved_percent: 33 }.generate(n, 6);
        let outcome = solve_scaled_from(&step, &options, n);
        assert!(!repack_wanted(outcome.arena, lower_bound(&step)));
        let producers: Vec<Producer> = outcome.phases.iter().map(|p| p.producer).collect();
        assert!(
            producers.contains(&Producer::LocalImprovement),
            "{producers:?}"
        );
        assert!(!producers.contains(&Producer::Repacking), "{producers:?}");
        let (at_scale, outcome) = phase(n);
        let at_scale = at_scale.unwrap_or_else(|| panic!("{:?}", outcome.phases));
        assert!(at_scale.work > 0 && at_scale.rounds >= 1, "{at_scale:?}");
        assert_eq!(at_scale.arena, Some(outcome.arena), "{at_scale:?}");
        let improved = outcome
            .phases
            .iter()
            .find(|p| p.producer == Producer::LocalImprovement);
        let before = improved
            .and_then(|p| p.arena)
            .expect("local improvement ran");
        assert_eq!(
            at_scale.gained,
            before - outcome.arena,
            "{:?}",
            outcome.phases
        );
    }
}
