//! The search over sets of executed nodes (SERENITY-style dynamic programming).
//!
//! States are the sets of executed nodes reachable in `k` steps; the memory after a state
//! depends only on the set, so two paths to the same set need only the one with the lower
//! peak so far (memoization on the executed set). Level `k + 1` extends every state of level
//! `k` by each ready node. Paths whose peak reaches `bound` (the best order already known)
//! are dropped, since they cannot improve on it.
//!
//! Exact while every level fits in `max_states` states; a level that does not is cut to its
//! best states (lowest peak, then lowest memory, then discovery order) and the search goes on
//! as a beam search, no longer exact. Graphs above `exact_max_nodes` run as a beam of
//! `beam_width` from the start. Everything is deterministic; the time limit is only a safety
//! net (hitting it abandons the search).

use std::collections::HashMap;
use std::time::Instant;

use memplan_ir::NodeId;

use super::model::{Model, NodeSet};
use crate::options::OrderingOptions;

struct State {
    done: NodeSet,
    live: u64,
    peak: u64,
    ready: Vec<u32>,
    history: u32,
}

/// What the search found.
#[derive(Debug)]
pub(crate) struct Found {
    /// The best order, if one beat `bound`.
    pub order: Option<Vec<NodeId>>,
    /// Whether the search was exact (no level cut, finished in time).
    pub exact: bool,
}

/// Searches for an order with a model peak below `bound`.
pub(crate) fn search(model: &Model, bound: u64, options: &OrderingOptions) -> Found {
    let started = Instant::now();
    let n = model.len();
    let exact_start = n <= options.exact_max_nodes;
    let cap = if exact_start {
        options.max_states_per_step.max(1)
    } else {
        options.beam_width.max(1)
    };
    let mut exact = exact_start;
    let mut history: Vec<(u32, u32)> = Vec::new();
    let ready: Vec<u32> = (0u32..)
        .zip(&model.preds)
        .filter(|(_, p)| p.is_empty())
        .map(|(i, _)| i)
        .collect();
    let mut level = vec![State {
        done: NodeSet::new(n),
        live: model.initial,
        peak: model.initial,
        ready,
        history: u32::MAX,
    }];
    if model.initial >= bound {
        return Found { order: None, exact };
    }
    for _ in 0..n {
        if started.elapsed() > options.time_limit {
            return Found {
                order: None,
                exact: false,
            };
        }
        let mut next: Vec<State> = Vec::new();
        let mut index: HashMap<NodeSet, usize> = HashMap::new();
        for s in &level {
            for (i, &m) in s.ready.iter().enumerate() {
                let (during, after) = model.step(&s.done, s.live, m);
                let peak = s.peak.max(during);
                if peak >= bound {
                    continue;
                }
                let mut done = s.done.clone();
                done.insert(m);
                if let Some(&k) = index.get(&done) {
                    if let Some(existing) = next.get_mut(k) {
                        if peak < existing.peak {
                            existing.peak = peak;
                            history.push((s.history, m));
                            existing.history = u32::try_from(history.len() - 1).unwrap_or(u32::MAX);
                        }
                    }
                    continue;
                }
                let mut ready: Vec<u32> = s
                    .ready
                    .iter()
                    .enumerate()
                    .filter(|&(j, _)| j != i)
                    .map(|(_, &r)| r)
                    .collect();
                for &succ in model.succs.get(m as usize).map_or(&[][..], Vec::as_slice) {
                    let preds_done = model
                        .preds
                        .get(succ as usize)
                        .is_some_and(|p| p.iter().all(|&q| done.contains(q)));
                    if preds_done && !done.contains(succ) && !ready.contains(&succ) {
                        ready.push(succ);
                    }
                }
                ready.sort_unstable();
                history.push((s.history, m));
                let h = u32::try_from(history.len() - 1).unwrap_or(u32::MAX);
                index.insert(done.clone(), next.len());
                next.push(State {
                    done,
                    live: after,
                    peak,
                    ready,
                    history: h,
                });
            }
        }
        if next.is_empty() {
            return Found { order: None, exact };
        }
        if next.len() > cap {
            if exact_start {
                exact = false;
            }
            let mut keyed: Vec<(u64, u64, usize)> = next
                .iter()
                .enumerate()
                .map(|(i, s)| (s.peak, s.live, i))
                .collect();
            keyed.sort_unstable();
            keyed.truncate(cap);
            keyed.sort_unstable_by_key(|k| k.2);
            let mut keep = vec![false; next.len()];
            for k in &keyed {
                if let Some(x) = keep.get_mut(k.2) {
                    *x = true;
                }
            }
            next = next
                .into_iter()
                .zip(keep)
                .filter(|(_, k)| *k)
                .map(|(s, _)| s)
                .collect();
        }
        level = next;
    }
    let Some(best) = level.iter().min_by_key(|s| s.peak) else {
        return Found { order: None, exact };
    };
    let mut order = Vec::with_capacity(n);
    let mut h = best.history;
    while let Some(&(parent, node)) = history.get(h as usize) {
        order.push(NodeId(node));
        h = parent;
    }
    order.reverse();
    Found {
        order: (order.len() == n).then_some(order),
        exact,
    }
}
