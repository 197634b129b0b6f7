//! An exact search for the checkpoint problem `--checkpoint auto` solves, for checking its
//! answers on small graphs: [`exact_checkpoints`].
//!
//! The problem: among "recompute nothing" and every set of cut positions of the forward
//! (each under the `cheap` policy, what [`super::recompute::keep_for`] keeps), the one with
//! the fewest recomputed FLOPs whose plan fits the budget (its measured peak plus the bytes
//! outside the arena first, then its plan's total device bytes), as `auto` decides fit. The
//! search shares no candidate, pool or dynamic program with `auto`: it walks every set of
//! cuts in order of recomputed FLOPs.
//!
//! Why that order can be walked: for a fixed last cut `L`, adding a cut before `L` only
//! keeps more (a tensor that crosses its next cut also crosses any earlier cut at or after
//! its producer), so it never recomputes more. So the sets whose last cut is `L` form a
//! lattice below the set of every position up to `L`, and removing cuts never lowers the
//! FLOPs. A uniform-cost search from the roots (nothing recomputed, no cut, and every
//! `{0, 1, ..., L}`), removing one cut at a time in increasing position order (so each set
//! is reached once), pops the sets in order of FLOPs; the first whose plan fits is the
//! optimum. The search stops early, unproven, after `max_states` sets; the states it pops
//! are the sets with fewer FLOPs than the optimum, so on small graphs it is exact, and a
//! search proven at one budget is proven at every larger one.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashSet};

use memplan_ir::{Graph, IndexVec, NodeId, TensorId};

use super::TrainingOptions;
use super::derive::Base;
use super::recompute::{all_kept, keep_for, last_cut, spans};
use crate::error::PlanError;
use crate::planner::PlanContext;

/// The optimum [`exact_checkpoints`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExactCheckpoint {
    /// The forward nodes after which a checkpoint is set; `None` when nothing is recomputed
    /// (the `none` policy), `Some(empty)` for the `cheap` policy alone.
    pub checkpoints: Option<Vec<String>>,
    /// The recomputed FLOPs, counted from what the configuration keeps (as `auto` orders
    /// its configurations).
    pub recompute_flops: u64,
    /// The plan's total device bytes.
    pub total_bytes: u64,
}

/// What [`exact_checkpoints`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExactSearch {
    /// The optimum, if a configuration fits (or the best found, when not proven).
    pub answer: Option<ExactCheckpoint>,
    /// Whether the search finished: every configuration with fewer FLOPs was tried.
    pub proven: bool,
    /// The configurations popped (measured or skipped as equal to one measured).
    pub states: usize,
}

/// The exact answer to `auto`'s problem at `budget` (see the module docs), trying at most
/// `max_states` configurations. Exponential in the forward's length: for checking on graphs
/// of a few dozen forward nodes.
pub fn exact_checkpoints(
    forward: &Graph,
    options: &TrainingOptions,
    budget: u64,
    max_states: usize,
) -> Result<ExactSearch, PlanError> {
    let base = Base::new(forward, options)?;
    let spans = spans(&base, &options.plan);
    let b = &options.plan.bindings;
    let mut work = PlanContext::new();
    let none = base.materialize(&all_kept(&base))?;
    let outside = crate::planner::persistent_bytes(&none.graph, &options.plan)?
        .saturating_add(super::auto::caller_bytes(&none, options));
    // A state: (order key, kind, number of cuts, cuts, FLOPs); kind 0 recomputes nothing, 1
    // the cuts under `cheap`. The key is the FLOPs, never below the parent's (equal on every
    // graph where the lattice argument holds; a safeguard where a normalisation's apply
    // makes it uneven). Ties pop fewer cuts first, then the cuts in order (deterministic).
    type State = Reverse<(u64, u8, usize, Vec<u32>, u64)>;
    let mut heap: BinaryHeap<State> = BinaryHeap::new();
    heap.push(Reverse((0, 0, 0, Vec::new(), 0)));
    let flops_of =
        |cuts: &[u32]| super::auto::recompute_flops_of(&base, &keep_for(&base, &spans, cuts), b);
    let f = flops_of(&[]);
    heap.push(Reverse((f, 1, 0, Vec::new(), f)));
    for l in 0..last_cut(&base) {
        let cuts: Vec<u32> = (0..=l).collect();
        let f = flops_of(&cuts);
        heap.push(Reverse((f, 1, cuts.len(), cuts, f)));
    }
    // Which cuts each state may still remove: those after the last removed one, before its
    // last cut. The removed positions are the gaps of `cuts` below its last cut.
    let removable = |cuts: &[u32]| -> Vec<u32> {
        let Some(&l) = cuts.last() else {
            return Vec::new();
        };
        let present: BTreeSet<u32> = cuts.iter().copied().collect();
        let last_removed = (0..l).rev().find(|p| !present.contains(p));
        cuts.iter()
            .copied()
            .filter(|&c| c < l && last_removed.is_none_or(|r| c > r))
            .collect()
    };
    let mut seen: HashSet<Vec<bool>> = HashSet::new();
    let mut best: Option<ExactCheckpoint> = None;
    let mut states = 0usize;
    while let Some(Reverse((key, kind, _, cuts, flops))) = heap.pop() {
        if best.as_ref().is_some_and(|a| a.recompute_flops <= key) {
            return Ok(ExactSearch {
                answer: best,
                proven: true,
                states,
            });
        }
        if states >= max_states {
            return Ok(ExactSearch {
                answer: best,
                proven: false,
                states,
            });
        }
        states += 1;
        let keep: IndexVec<TensorId, bool> = if kind == 0 {
            all_kept(&base)
        } else {
            keep_for(&base, &spans, &cuts)
        };
        let seen_key: Vec<bool> = keep.iter().copied().chain([kind == 0]).collect();
        if seen.insert(seen_key) {
            let derived = base.materialize(&keep)?;
            let peak = crate::planner::step_profile(&derived.graph, &options.plan, &mut work)?
                .into_iter()
                .max()
                .unwrap_or(0);
            if peak.saturating_add(outside) <= budget {
                let plan = work.plan(&derived.graph, &options.plan)?;
                let total = super::auto::total_bytes(&derived, &plan);
                if total <= budget && best.as_ref().is_none_or(|a| flops < a.recompute_flops) {
                    best = Some(ExactCheckpoint {
                        checkpoints: (kind == 1).then(|| {
                            cuts.iter()
                                .map(|&c| base.graph.node(NodeId(c)).name.clone())
                                .collect()
                        }),
                        recompute_flops: flops,
                        total_bytes: total,
                    });
                    continue;
                }
            }
        }
        for r in removable(&cuts) {
            let child: Vec<u32> = cuts.iter().copied().filter(|&c| c != r).collect();
            let f = flops_of(&child);
            heap.push(Reverse((f.max(key), 1, child.len(), child, f)));
        }
    }
    Ok(ExactSearch {
        answer: best,
        proven: true,
        states,
    })
}
