//! Exact and anytime search for the dynamic storage allocation problem.
//!
//! [`search`] is a branch and bound over *canonical* placements (each buffer at the lowest
//! offset above the buffers placed before it, offsets never decreasing), in the spirit of
//! MiniMalloc (M. D. Moffitt, ASPLOS '23). Its phases, one module each:
//!
//! 1. `instance`: index the problem — time sections, conflicts, section totals, the lower
//!    bound; refuse instances too large to index.
//! 2. `dfs`: decide one capacity — depth-first search with canonical order, dominance,
//!    section inference and dynamic temporal decomposition, restarted over several static
//!    preorders with a doubling node limit.
//! 3. This module: decision mode runs (2) once at the capacity; minimize mode starts from the
//!    caller's incumbent (or a first solution of its own: (2) with no capacity, a greedy dive
//!    that never backtracks) and probes targets with (2) under a node budget that doubles
//!    each round: the lowest open target first, then bisection between it and the best
//!    arena (see `minimize`), until the bound is met, a probe just below the best is
//!    exhausted, or the budget runs out.
//! 4. `check`: every solution is checked before it is returned; the search never returns an
//!    invalid one.
//!
//! Results are deterministic: what is found depends only on the input and on how many nodes
//! the time limit allowed. The clock is read every thousand nodes or so. The search runs on a
//! thread of its own with a large stack (it recurses once per placed buffer). Instances over
//! the indexing budget (about 8 million overlapping pairs; see `instance`) or over
//! `MAX_SEARCH_BUFFERS` are not searched: the incumbent comes back unchanged, at once.

mod check;
mod dfs;
mod instance;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::index::IndexVec;
use crate::{BufferId, Problem, Solution};

use dfs::Decision;
use instance::{Instance, LocalId, Refusal};

/// The largest number of searched buffers; the search recurses once per placed buffer.
const MAX_SEARCH_BUFFERS: usize = 100_000;
/// Stack of the thread the search runs on.
const SEARCH_STACK_BYTES: usize = 256 << 20;

/// What to search for, and for how long.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SearchOptions {
    /// Wall-clock budget; the search returns what it has when it runs out.
    pub time_limit: Duration,
    /// Node budget over the whole search. When it, and not the clock, ends the search, the
    /// result depends only on the input: the same on every machine.
    pub node_limit: Option<u64>,
    /// Every buffer must end at or below this (and below [`Problem::capacity`] when both are
    /// set). Required to be useful in decision mode.
    pub capacity: Option<u64>,
    /// A valid solution to start minimizing from (ignored when invalid).
    pub incumbent: Option<Solution>,
    /// `false`: find any solution within the capacity. `true`: find the smallest arena.
    pub minimize: bool,
    /// Minimize mode stops once its best arena is within this gap of the lower bound it has
    /// proven (see [`crate::Gap`]).
    pub gap: crate::Gap,
    /// Threads for minimize mode's two searches (see [`search`]): 1 runs them one after the
    /// other on one thread, any other value side by side (0: when the machine has more than
    /// one core). The outcome is the same either way.
    pub threads: usize,
}

impl SearchOptions {
    /// These options with [`time_limit`](SearchOptions::time_limit) set to `time_limit`.
    pub fn with_time_limit(mut self, time_limit: Duration) -> SearchOptions {
        self.time_limit = time_limit;
        self
    }

    /// These options with [`node_limit`](SearchOptions::node_limit) set to `node_limit`.
    pub fn with_node_limit(mut self, node_limit: Option<u64>) -> SearchOptions {
        self.node_limit = node_limit;
        self
    }

    /// These options with [`capacity`](SearchOptions::capacity) set to `capacity`.
    pub fn with_capacity(mut self, capacity: Option<u64>) -> SearchOptions {
        self.capacity = capacity;
        self
    }

    /// These options with [`incumbent`](SearchOptions::incumbent) set to `incumbent`.
    pub fn with_incumbent(mut self, incumbent: Option<Solution>) -> SearchOptions {
        self.incumbent = incumbent;
        self
    }

    /// These options with [`minimize`](SearchOptions::minimize) set to `minimize`.
    pub fn with_minimize(mut self, minimize: bool) -> SearchOptions {
        self.minimize = minimize;
        self
    }

    /// These options with [`gap`](SearchOptions::gap) set to `gap`.
    pub fn with_gap(mut self, gap: crate::Gap) -> SearchOptions {
        self.gap = gap;
        self
    }

    /// These options with [`threads`](SearchOptions::threads) set to `threads`.
    pub fn with_threads(mut self, threads: usize) -> SearchOptions {
        self.threads = threads;
        self
    }
}

impl Default for SearchOptions {
    /// Minimize for ten seconds, with no capacity and no incumbent.
    fn default() -> SearchOptions {
        SearchOptions {
            time_limit: Duration::from_secs(10),
            node_limit: None,
            capacity: None,
            incumbent: None,
            minimize: true,
            gap: crate::Gap::ZERO,
            threads: 0,
        }
    }
}

/// What [`search`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SearchOutcome {
    /// The best valid solution known (the incumbent when nothing better was found).
    pub solution: Option<Solution>,
    /// The solution's arena is the smallest possible.
    pub proven_optimal: bool,
    /// No solution fits the capacity.
    pub proven_infeasible: bool,
    /// Search nodes explored.
    pub nodes: u64,
    /// A lower bound on the arena of any solution (the largest total size live at once, or
    /// the largest buffer).
    pub lower_bound: u64,
}

/// When a search must stop: at a wall-clock deadline, after `node_cap` nodes in all, or
/// when `stop` is raised (by a search running beside it that proved the optimum).
#[derive(Clone, Copy, Debug)]
pub(super) struct Budget<'s> {
    pub(super) deadline: Instant,
    pub(super) node_cap: u64,
    pub(super) stop: Option<&'s AtomicBool>,
    /// Minimize mode's searches stop once their best arena is within this gap of the bound
    /// they have proven.
    pub(super) gap: crate::Gap,
}

impl Budget<'_> {
    /// Whether the clock has run out or `stop` is raised. The loops that run one decision
    /// after another check this before each: a decision that finishes in a few nodes never
    /// reaches the search's own clock check (every `CLOCK_EVERY` visits), and a climb one
    /// byte at a time from a weak bound to an incumbent raised by a huge alignment can run
    /// billions of them.
    fn spent(&self) -> bool {
        Instant::now() >= self.deadline || self.stop.is_some_and(|s| s.load(Ordering::Relaxed))
    }
}

/// Searches for a placement of `problem`'s buffers: any one within the capacity (decision
/// mode) or the smallest arena within `options.time_limit` (minimize mode). See the module
/// documentation.
pub fn search(problem: &Problem, options: &SearchOptions) -> SearchOutcome {
    let start = Instant::now();
    let limits = Budget {
        deadline: start
            .checked_add(options.time_limit)
            .or_else(|| start.checked_add(Duration::from_secs(1 << 32)))
            .unwrap_or(start),
        node_cap: options.node_limit.unwrap_or(u64::MAX),
        stop: None,
        gap: options.gap,
    };
    let capacity = match (options.capacity, problem.capacity) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let incumbent = options
        .incumbent
        .as_ref()
        .filter(|s| check::is_valid(problem, &s.offsets, capacity))
        .cloned();
    let mut outcome = SearchOutcome {
        solution: incumbent,
        proven_optimal: false,
        proven_infeasible: false,
        nodes: 0,
        lower_bound: 0,
    };
    let inst = match Instance::new(problem) {
        Ok(inst) if inst.len() <= MAX_SEARCH_BUFFERS => inst,
        Ok(_) | Err(Refusal::TooLarge) | Err(Refusal::Overflow) => {
            // Not searched: report the engine's bound and hand back the incumbent.
            outcome.lower_bound = crate::lower_bound(problem);
            return outcome;
        }
    };
    outcome.lower_bound = inst.lower_bound();
    let searched = std::thread::scope(|scope| {
        let run = || {
            let mut outcome = outcome.clone();
            if options.minimize {
                minimize(
                    problem,
                    &inst,
                    capacity,
                    limits,
                    options.threads,
                    &mut outcome,
                );
            } else {
                decide(problem, &inst, capacity, limits, &mut outcome);
            }
            outcome
        };
        let handle = std::thread::Builder::new()
            .name("memplan-exact".into())
            .stack_size(SEARCH_STACK_BYTES)
            .spawn_scoped(scope, run)
            .ok()?;
        Some(
            handle
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
        )
    });
    let mut outcome = searched.unwrap_or(outcome);
    if let Some(s) = &outcome.solution {
        outcome.proven_optimal |= s.arena_size(problem) <= outcome.lower_bound;
    }
    outcome
}

/// Decision mode: any solution within `capacity`.
fn decide(
    problem: &Problem,
    inst: &Instance,
    capacity: Option<u64>,
    limits: Budget<'_>,
    outcome: &mut SearchOutcome,
) {
    if outcome.solution.is_some() {
        return;
    }
    let limit = capacity.unwrap_or(inst.bound.max(inst.fixed_size));
    if inst.fixed_size > limit {
        outcome.proven_infeasible = true;
        return;
    }
    match dfs::decide(inst, limit, u64::MAX, limits, &mut outcome.nodes) {
        Decision::Fits(local) => outcome.solution = expand(problem, inst, &local, capacity),
        Decision::Infeasible => outcome.proven_infeasible = true,
        Decision::Unknown | Decision::OutOfBudget => {}
    }
}

/// Probes that may run out of nodes in one round of [`bisect`] before the budget doubles:
/// each costs the whole budget, so a round costs at most this many budgets plus the probes
/// that fit.
const MAX_UNKNOWN_PROBES: u32 = 4;

/// The climb's share of minimize mode's node budget, as a fraction; the bisection has the
/// rest. Both need theirs in one piece: on the MiniMalloc set, E's decision run at its bound
/// fits after about 607,000 nodes, and D's bisection stops at 1,061,888 with 333,000 nodes,
/// at 1,042,432 with 500,000 or 625,000 (the default budget gives each 625,000).
const CLIMB_SHARE: (u64, u64) = (1, 2);

/// Minimize mode: improve on the incumbent (or a first solution) by decision probes, until
/// proven or out of budget. Two searches share the node budget ([`CLIMB_SHARE`]):
///
/// - [`climb`] from the lower bound: a decision run at the lowest height not proven
///   infeasible, then the next one up, and so on. Where the optimum is the bound (as on most
///   MiniMalloc instances), the first run that fits proves it, however loose the incumbent.
/// - [`bisect`] down from the incumbent: probes between the two, each with a small budget
///   that doubles each round. It finds the better arenas above the bound that the climb,
///   stuck on an infeasible height it cannot prove, never reaches.
///
/// With two threads they run side by side, and a climb that fits stops the bisection (its
/// answer is optimal); on one thread the climb runs first and the bisection only when the
/// climb did not fit. Neither reads the other's progress, so the answer is the same either
/// way: the climb's when it fits, otherwise the bisection's. The node count reported is that
/// of the searches whose results the answer uses (a bisection stopped early by the climb is
/// not counted), so it is the same either way too.
fn minimize(
    problem: &Problem,
    inst: &Instance,
    capacity: Option<u64>,
    limits: Budget<'_>,
    threads: usize,
    outcome: &mut SearchOutcome,
) {
    // Without an incumbent, a capacity is the ceiling both searches start under (the
    // bisection's first probe is the capacity itself); without either, a first solution of
    // its own.
    let ceiling = match (&outcome.solution, capacity) {
        (Some(_), _) => None,
        (None, Some(c)) => Some(c),
        (None, None) => {
            decide(problem, inst, capacity, limits, outcome);
            if outcome.solution.is_none() {
                return;
            }
            None
        }
    };
    if ceiling.is_some_and(|c| inst.fixed_size > c) {
        outcome.proven_infeasible = true;
        return;
    }
    let (climb_cap, bisect_cap) = match limits.node_cap {
        u64::MAX => (u64::MAX, u64::MAX),
        cap => {
            let left = cap.saturating_sub(outcome.nodes);
            let climb = left / CLIMB_SHARE.1 * CLIMB_SHARE.0;
            (climb, left - climb)
        }
    };
    let stop = AtomicBool::new(false);
    let climb_limits = Budget {
        node_cap: climb_cap,
        ..limits
    };
    let bisect_limits = Budget {
        node_cap: bisect_cap,
        stop: Some(&stop),
        ..limits
    };
    let start = SearchOutcome {
        nodes: 0,
        ..outcome.clone()
    };
    let (mut up, mut down) = (start.clone(), start);
    let parallel = match threads {
        0 => crate::strategy::available_threads() > 1,
        n => n > 1,
    };
    let climb_then_stop = |up: &mut SearchOutcome| {
        climb(problem, inst, climb_limits, ceiling, up);
        if up.proven_optimal || up.proven_infeasible {
            stop.store(true, Ordering::Relaxed);
        }
    };
    let bisect_from_ceiling = |down: &mut SearchOutcome| {
        if let Some(c) = ceiling {
            decide(problem, inst, Some(c), bisect_limits, down);
        }
        if down.solution.is_some() {
            bisect(problem, inst, bisect_limits, down);
        }
    };
    let ran_side_by_side = parallel
        && std::thread::scope(|scope| {
            let Ok(helper) = std::thread::Builder::new()
                .name("memplan-exact-climb".into())
                .stack_size(SEARCH_STACK_BYTES)
                .spawn_scoped(scope, || climb_then_stop(&mut up))
            else {
                return false;
            };
            bisect_from_ceiling(&mut down);
            if let Err(panic) = helper.join() {
                std::panic::resume_unwind(panic);
            }
            true
        });
    if !ran_side_by_side {
        climb_then_stop(&mut up);
        if !up.proven_optimal && !up.proven_infeasible {
            bisect_from_ceiling(&mut down);
        }
    }
    let conclusive = up.proven_optimal || up.proven_infeasible;
    let best = if conclusive { up } else { down };
    outcome.nodes += best.nodes;
    outcome.lower_bound = outcome.lower_bound.max(best.lower_bound);
    outcome.proven_optimal = best.proven_optimal;
    outcome.proven_infeasible = best.proven_infeasible;
    outcome.solution = best.solution;
}

/// The climb of [`minimize`]: decision runs at the lowest height not yet proven infeasible,
/// moving up one grain each time one is, until one fits (the optimum), the incumbent is
/// reached, or the budget runs out. Without an incumbent, the climb goes up to `ceiling` (a
/// capacity) and proves the problem infeasible when nothing up to it fits.
fn climb(
    problem: &Problem,
    inst: &Instance,
    limits: Budget<'_>,
    ceiling: Option<u64>,
    outcome: &mut SearchOutcome,
) {
    let mut lo = outcome.lower_bound;
    loop {
        let hi = match (&outcome.solution, ceiling) {
            (Some(best), _) => best.arena_size(problem),
            (None, Some(c)) => c.saturating_add(1),
            (None, None) => break,
        };
        if hi <= limits.gap.accepted(lo) && outcome.solution.is_some() {
            // Close enough to the proven bound.
            break;
        }
        let target = instance::round_up(lo, inst.grain);
        if target >= hi {
            // Nothing below `hi` is left to try (heights are multiples of the grain).
            if outcome.solution.is_some() {
                outcome.proven_optimal = true;
            } else {
                outcome.proven_infeasible = true;
            }
            break;
        }
        if limits.spent() {
            break;
        }
        match dfs::decide(inst, target, u64::MAX, limits, &mut outcome.nodes) {
            Decision::Fits(local) => {
                if let Some(fit) = expand(problem, inst, &local, Some(target)) {
                    outcome.solution = Some(fit);
                    outcome.proven_optimal = true;
                }
                break;
            }
            Decision::Infeasible => lo = target.saturating_add(1),
            Decision::Unknown | Decision::OutOfBudget => break,
        }
    }
    outcome.lower_bound = outcome.lower_bound.max(lo);
}

/// The bisection of [`minimize`].
///
/// Keeps a proven range `lo..=hi` for the optimum (`hi` the best arena found) and a soft
/// floor `soft >= lo`: every target below it ran out of the current per-probe node budget.
/// Each probe is a decision run at one target height, a multiple of the grain, halfway
/// through `soft..hi` (the lowest target is the climb's). A fit lowers `hi` to the arena
/// found; an exhausted probe raises `lo` (and `soft`); a probe that runs out of nodes raises
/// `soft` just above its target. When `soft` reaches `hi`, or after [`MAX_UNKNOWN_PROBES`]
/// probes that ran out of nodes, the round ends: the per-probe budget doubles and `soft`
/// drops back to `lo`.
///
/// Bisection rather than crawling down from `hi`: loose targets are often *harder* than
/// tight ones (weak inference lets the search wander), so the capacity a single decision
/// probe would meet is found within a few probes, whatever the incumbent.
fn bisect(problem: &Problem, inst: &Instance, limits: Budget<'_>, outcome: &mut SearchOutcome) {
    let grain = inst.grain;
    let mut lo = outcome.lower_bound;
    let mut soft = lo;
    let mut budget = (inst.len() as u64).saturating_mul(8).max(256);
    let mut unknowns = 0;
    while let Some(best) = &outcome.solution {
        let hi = best.arena_size(problem);
        if hi <= lo {
            outcome.proven_optimal = true;
            break;
        }
        if hi <= limits.gap.accepted(lo) {
            // Close enough to the proven bound.
            break;
        }
        // Searched heights are multiples of the grain; `lo` itself may not be.
        let lowest = instance::round_up(soft, grain);
        let top = (hi - 1) / grain * grain;
        if lowest > top && soft <= lo {
            // Every height below `hi` is below the proven bound (heights are multiples of
            // the grain once pushed down).
            outcome.proven_optimal = true;
            break;
        }
        if lowest > top || unknowns > MAX_UNKNOWN_PROBES {
            budget = budget.saturating_mul(2);
            soft = lo;
            unknowns = 0;
            continue;
        }
        let target = lowest + (top - lowest) / grain / 2 * grain;
        if limits.spent() {
            break;
        }
        match dfs::decide(inst, target, budget, limits, &mut outcome.nodes) {
            Decision::Fits(local) => match expand(problem, inst, &local, Some(target)) {
                Some(better) => outcome.solution = Some(better),
                None => return,
            },
            Decision::Infeasible => {
                lo = lo.max(target.saturating_add(1));
                soft = soft.max(lo);
            }
            Decision::Unknown => {
                soft = soft.max(target.saturating_add(1));
                unknowns += 1;
            }
            Decision::OutOfBudget => {
                outcome.lower_bound = lo;
                return;
            }
        }
    }
    outcome.lower_bound = lo;
}

/// The full solution for the searched buffers' offsets `local` (left-out buffers at 0),
/// when it is valid.
fn expand(
    problem: &Problem,
    inst: &Instance,
    local: &IndexVec<LocalId, u64>,
    capacity: Option<u64>,
) -> Option<Solution> {
    let mut offsets: IndexVec<BufferId, u64> = IndexVec::from_elem(0, problem.len());
    for (l, &id) in inst.ids.iter_enumerated() {
        offsets[id] = local[l];
    }
    let offsets = offsets.into_raw();
    let valid = check::is_valid(problem, &offsets, capacity);
    debug_assert!(valid, "the exact search produced an invalid solution");
    valid.then_some(Solution { offsets })
}
