//! An exact search for the checkpoint problem `--checkpoint auto` solves:
//! [`exact_checkpoints`], for checking `auto`'s answers, and [`search`], which `auto` runs
//! first on forwards of up to 64 nodes.
//!
//! The problem: among "recompute nothing" and every set of cut positions of the forward
//! (each under the `cheap` policy, what [`super::recompute::keep_for`] keeps), the one with
//! the fewest recomputed FLOPs whose plan fits the budget (its measured peak plus the bytes
//! outside the arena first, then its plan's total device bytes), as `auto` decides fit. The
//! search shares no candidate, pool or dynamic program with `auto`'s other configurations.
//!
//! What it walks. A set of cuts matters only through the dropped tensors the backward
//! makes again, `R` ([`super::auto::recomputed`]): two sets with the same `R` materialize the
//! same step. With the last cut `L` fixed, a tensor made at `p ≤ L` is kept exactly when a
//! cut lies in `[p, max(r, p + 1))`, `r` its last forward reader, so removing cuts only
//! drops tensors, `R` only grows, and the FLOPs never fall. A state is a pair `(L, R)`; its
//! cuts are the *maximal* set, every position up to `L` inside the interval of no tensor of
//! `R` (every set with that `L` and `R` lies inside it, and it has that `R` itself). A
//! state's children drop one tensor of its *frontier* (a tensor the backward reads, or an
//! input or output of a node that remakes `R`, not in `R`, droppable before `L`) by removing
//! the cuts in its interval. Every `R'` above `R` holds a frontier tensor `t` (follow the
//! recomputation of `R'` from the backward to the first tensor outside `R`), and dropping
//! `t` from the maximal set gives an `R''` with `R ⊂ R'' ⊆ R'`, so every state is reached.
//! Walking sets of cuts instead visits exponentially many equal ones: the test CNN (33
//! forward nodes) took 29,264 of them to prove an answer this walk proves in 3,730 states
//! (1,896 steps measured).
//!
//! A uniform-cost search from the roots (nothing recomputed; no cut; every `{0, ..., L}`)
//! pops the states in order of FLOPs; the first whose plan fits is the optimum. It stops
//! early, unproven, after `max_states` states; the states it pops are those with fewer
//! FLOPs than the optimum, so on small graphs it is exact, and a search proven at one budget
//! is proven at every larger one (it pops no state there that it did not pop here).
//!
//! Inside `auto` (`prune`), a step is not measured when the bytes of `R` cannot bring the
//! peak without recomputation down into the budget: dropping a tensor lowers the live bytes
//! of any step by at most its own bytes (recomputation and the inputs kept for it only add).
//! The bound held on every step the ignored table measures; it is not used by
//! [`exact_checkpoints`], which stays a check independent of it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};

use memplan_ir::{Graph, IndexVec, NodeId, TensorId};

use super::TrainingOptions;
use super::auto::recomputed;
use super::derive::Base;
use super::recompute::{Spans, all_kept, keep_for, last_cut, spans};
use crate::error::PlanError;
use crate::plan::Plan;
use crate::planner::PlanContext;

/// The optimum [`exact_checkpoints`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
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
#[non_exhaustive]
pub struct ExactSearch {
    /// The optimum, if a configuration fits (or the best found, when not proven).
    pub answer: Option<ExactCheckpoint>,
    /// Whether the search finished: every configuration with fewer FLOPs was tried.
    pub proven: bool,
    /// The configurations popped (each a different set of kept tensors; measured, or
    /// skipped as recomputing the same tensors as one measured).
    pub states: usize,
    /// A lower bound on the optimum's recomputed FLOPs: the answer's own when proven; when
    /// the search stopped unproven, the order key of the configuration it stopped at (the
    /// least of every configuration it did not try: none of those recomputes less, and none
    /// it tried fits with less). `None` when it proved that nothing fits.
    pub lower_bound: Option<u64>,
}

/// The exact answer to `auto`'s problem at `budget` (see the module docs), trying at most
/// `max_states` configurations. Exponential in the forward's length at worst: for checking
/// on graphs of a few dozen forward nodes.
pub fn exact_checkpoints(
    forward: &Graph,
    options: &TrainingOptions,
    budget: u64,
    max_states: usize,
) -> Result<ExactSearch, PlanError> {
    let base = Base::new(forward, options)?;
    let spans = spans(&base, &options.plan);
    let found = search(
        &base,
        options,
        &spans,
        budget,
        max_states,
        false,
        &mut PlanContext::new(),
    )?;
    let answer = found.best.map(|best| ExactCheckpoint {
        checkpoints: best.cuts.map(|cuts| {
            cuts.iter()
                .map(|&c| base.graph.node(NodeId(c)).name.clone())
                .collect()
        }),
        recompute_flops: best.flops,
        total_bytes: best.total,
    });
    Ok(ExactSearch {
        answer,
        proven: found.proven,
        states: found.states,
        lower_bound: found.lower_bound,
    })
}

/// The configuration [`search`] found.
pub(super) struct Best {
    /// `None` recomputes nothing; `Some(cuts)` the `cheap` policy with those cuts (the
    /// fewest that keep the same tensors).
    pub cuts: Option<Vec<u32>>,
    /// Its recomputed FLOPs, as the search orders them.
    pub flops: u64,
    /// Its plan's total device bytes.
    pub total: u64,
    /// Its plan.
    pub plan: Plan,
}

/// What [`search`] found.
pub(super) struct Found {
    pub best: Option<Best>,
    pub proven: bool,
    pub states: usize,
    /// See [`ExactSearch::lower_bound`].
    pub lower_bound: Option<u64>,
}

/// A state of the search: (order key, kind, last cut, tensors recomputed, FLOPs); kind 0
/// recomputes nothing, 1 the cuts under `cheap` (the last cut `None` for no cut; the cuts
/// the maximal set of the last cut and the tensors, [`maximal`]). The key is the FLOPs,
/// never below the parent's (equal wherever the lattice argument holds; a safeguard where a
/// normalisation's apply makes it uneven). Ties pop fewer recomputed tensors first, then
/// in order (deterministic).
type State = Reverse<(u64, u8, usize, Option<u32>, Vec<TensorId>, u64)>;

/// The search of the module docs on `base`, planning with `work`.
pub(super) fn search(
    base: &Base,
    options: &TrainingOptions,
    spans: &Spans,
    budget: u64,
    max_states: usize,
    prune: bool,
    work: &mut PlanContext,
) -> Result<Found, PlanError> {
    let b = &options.plan.bindings;
    let none = base.materialize(&all_kept(base))?;
    let none_peak = crate::planner::step_profile(&none.graph, &options.plan, work)
        .map_err(PlanError::in_graph(&none.graph))?
        .into_iter()
        .max()
        .unwrap_or(0);
    let outside = crate::planner::persistent_bytes(&none.graph, &options.plan)
        .map_err(PlanError::in_graph(&none.graph))?
        .saturating_add(super::auto::caller_bytes(&none, options));
    // No step can fit when dropping every tensor a cut can drop could not (see the
    // module docs): nothing to walk.
    let droppable = base
        .forward_made
        .iter_enumerated()
        .filter(|&(t, &m)| m && !spans.pinned[t])
        .map(|(t, _)| base.graph.tensor(t).bytes(b).unwrap_or(0))
        .fold(0u64, u64::saturating_add);
    if prune && none_peak.saturating_sub(droppable).saturating_add(outside) > budget {
        return Ok(Found {
            best: None,
            proven: true,
            states: 0,
            lower_bound: None,
        });
    }
    let mut heap: BinaryHeap<State> = BinaryHeap::new();
    // Every state pushed, so that each is walked once.
    let mut pushed: HashSet<(u8, Option<u32>, Vec<TensorId>)> = HashSet::new();
    let mut push = |heap: &mut BinaryHeap<State>,
                    key: u64,
                    kind: u8,
                    last: Option<u32>,
                    (f, made): (u64, Vec<TensorId>)| {
        if pushed.insert((kind, last, made.clone())) {
            heap.push(Reverse((key.max(f), kind, made.len(), last, made, f)));
        }
    };
    push(&mut heap, 0, 0, None, (0, Vec::new()));
    push(
        &mut heap,
        0,
        1,
        None,
        recomputed(base, &keep_for(base, spans, &[]), b),
    );
    for l in 0..last_cut(base) {
        let cuts: Vec<u32> = (0..=l).collect();
        push(
            &mut heap,
            0,
            1,
            Some(l),
            recomputed(base, &keep_for(base, spans, &cuts), b),
        );
    }
    // Whether each set of recomputed tensors fits (steps that recompute the same tensors
    // are the same graph, whatever their last cut).
    let mut fits: HashMap<Vec<TensorId>, bool> = HashMap::new();
    let mut best: Option<Best> = None;
    let mut states = 0usize;
    while let Some(Reverse((key, kind, _, last, made, flops))) = heap.pop() {
        if best.as_ref().is_some_and(|a| a.flops <= key) {
            let lower_bound = best.as_ref().map(|a| a.flops);
            return Ok(Found {
                best,
                proven: true,
                states,
                lower_bound,
            });
        }
        if states >= max_states {
            // Popped in order of keys, children never below their parent: every state not
            // popped has a key of at least this one's, and every popped one did not fit
            // (a fitting one with a smaller key would have been returned above).
            return Ok(Found {
                best,
                proven: false,
                states,
                lower_bound: Some(key),
            });
        }
        states += 1;
        let cuts = last.map_or_else(Vec::new, |l| maximal(base, spans, l, &made));
        let freed = made
            .iter()
            .map(|&t| base.graph.tensor(t).bytes(b).unwrap_or(0))
            .fold(0u64, u64::saturating_add);
        let bound = none_peak.saturating_sub(freed).saturating_add(outside);
        let fit = match fits.get(&made) {
            Some(&fit) => fit,
            None if prune && bound > budget => false,
            None => {
                let keep: IndexVec<TensorId, bool> = if kind == 0 {
                    all_kept(base)
                } else {
                    keep_for(base, spans, &cuts)
                };
                let derived = base.materialize(&keep)?;
                let peak = crate::planner::step_profile(&derived.graph, &options.plan, work)
                    .map_err(PlanError::in_graph(&derived.graph))?
                    .into_iter()
                    .max()
                    .unwrap_or(0);
                let mut fit = false;
                if peak.saturating_add(outside) <= budget {
                    let plan = work
                        .plan(&derived.graph, &options.plan)
                        .map_err(PlanError::in_graph(&derived.graph))?;
                    let total = super::auto::total_bytes(&derived, &plan);
                    if total <= budget {
                        fit = true;
                        if best.as_ref().is_none_or(|a| flops < a.flops) {
                            best = Some(Best {
                                cuts: (kind == 1).then(|| fewest(base, spans, &cuts, &made, b)),
                                flops,
                                total,
                                plan,
                            });
                        }
                    }
                }
                fits.insert(made.clone(), fit);
                fit
            }
        };
        // A fitting state's children recompute more: none is the answer.
        let Some(l) = last.filter(|_| !fit) else {
            continue;
        };
        for t in frontier(base, spans, l, &made) {
            let (p, end) = (spans.prod[t], interval_end(spans, t));
            let child: Vec<u32> = cuts
                .iter()
                .copied()
                .filter(|&c| c < p || c >= end)
                .collect();
            let child = recomputed(base, &keep_for(base, spans, &child), b);
            if child.1.len() > made.len() {
                push(&mut heap, key, 1, Some(l), child);
            }
        }
    }
    let lower_bound = best.as_ref().map(|a| a.flops);
    Ok(Found {
        best,
        proven: true,
        states,
        lower_bound,
    })
}

/// The end (exclusive) of the positions a cut keeps forward-made `t` at (see `keep_for`).
fn interval_end(spans: &Spans, t: TensorId) -> u32 {
    spans.last_read[t].max(spans.prod[t] + 1)
}

/// The maximal set of cuts with last cut `l` that recomputes `made`: every position up to
/// `l` inside the interval of no tensor of `made` (any set of cuts that recomputes `made`
/// with that last cut is inside it, and it recomputes `made` itself).
fn maximal(base: &Base, spans: &Spans, l: u32, made: &[TensorId]) -> Vec<u32> {
    let n = l as usize + 1;
    let mut blocked = vec![0i64; n + 1];
    for &t in made {
        let p = spans.prod[t] as usize;
        if !base.forward_made[t] || spans.pinned[t] || p >= n {
            continue;
        }
        let end = (interval_end(spans, t) as usize).min(n);
        blocked[p] += 1;
        blocked[end] -= 1;
    }
    let mut open = 0i64;
    (0..n)
        .filter(|&c| {
            open += blocked[c];
            open == 0
        })
        .map(|c| c as u32)
        .collect()
}

/// The tensors whose drop would make more tensors recomputed than `made`, with last cut
/// `l`: those the backward reads, and the inputs and outputs of the nodes that remake
/// `made`, that cuts can drop (made at or before `l`, with `l` outside their interval) and
/// `made` does not hold. Every set of recomputed tensors above `made` holds one of them.
fn frontier(base: &Base, spans: &Spans, l: u32, made: &[TensorId]) -> Vec<TensorId> {
    let g = &base.graph;
    let mut is_made: IndexVec<TensorId, bool> = IndexVec::from_elem(false, g.tensors().len());
    for &t in made {
        is_made[t] = true;
    }
    let mut near: Vec<TensorId> = base
        .later
        .iter()
        .flat_map(|(n, _)| n.present_inputs())
        .collect();
    for &t in made {
        if let Some(p) = base.producer[t] {
            let node = g.node(p);
            near.extend(node.present_inputs());
            near.extend(node.outputs.iter().copied());
        }
    }
    near.sort_unstable();
    near.dedup();
    near.retain(|&t| {
        base.forward_made[t]
            && !spans.pinned[t]
            && !is_made[t]
            && spans.prod[t] <= l
            && interval_end(spans, t) <= l
    });
    near
}

/// The fewest of `cuts` that recompute the same tensors, `made`, found by dropping each cut
/// in turn where that changes nothing: the checkpoints reported.
fn fewest(
    base: &Base,
    spans: &Spans,
    cuts: &[u32],
    made: &[TensorId],
    bindings: &memplan_ir::Bindings,
) -> Vec<u32> {
    let mut out = cuts.to_vec();
    let mut i = 0;
    while i < out.len() {
        let mut fewer = out.clone();
        fewer.remove(i);
        if recomputed(base, &keep_for(base, spans, &fewer), bindings).1 == made {
            out = fewer;
        } else {
            i += 1;
        }
    }
    out
}
