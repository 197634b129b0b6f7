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
use std::hash::{BuildHasherDefault, Hasher};
use std::time::Instant;

use memplan_ir::NodeId;

use super::model::{Model, NodeSet};
use crate::options::OrderingOptions;

/// Hashes a key that is already a uniformly random `u64` (a Zobrist hash) by passing it on.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// Zobrist keys: one fixed pseudo-random `u64` per node (SplitMix64), so the key of a set is
/// the xor of its nodes' keys and is updated in O(1) per step.
fn zobrist(n: usize) -> Vec<u64> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        })
        .collect()
}

/// Whether `a` plus node `an` is the same set as `b` plus node `bn`.
fn same_extension(a: &NodeSet, an: u32, b: &NodeSet, bn: u32) -> bool {
    let bit = |i: usize, n: u32| {
        if i == (n / 64) as usize {
            1u64 << (n % 64)
        } else {
            0
        }
    };
    a.0.len() == b.0.len()
        && a.0
            .iter()
            .zip(&b.0)
            .enumerate()
            .all(|(i, (&x, &y))| x | bit(i, an) == y | bit(i, bn))
}

/// One extension of a state, before it is built.
#[derive(Clone, Copy)]
struct Candidate {
    peak: u64,
    live: u64,
    parent: usize,
    node: u32,
    key: u64,
}

struct State {
    key: u64,
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
    let mut cap = cap;
    let mut exact = exact_start;
    // Steps evaluated so far: the search's work, bounded by `options.search_steps`.
    let mut steps: u64 = 0;
    let mut history: Vec<(u32, u32)> = Vec::new();
    let ready: Vec<u32> = (0u32..)
        .zip(&model.deps.preds)
        .filter(|(_, p)| p.is_empty())
        .map(|(i, _)| i)
        .collect();
    let keys = zobrist(n);
    let mut level = vec![State {
        key: 0,
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
        let next_steps: u64 = level.iter().map(|s| s.ready.len() as u64).sum();
        if steps.saturating_add(next_steps) > options.search_steps {
            if cap > options.beam_width.max(1) {
                // The exact search ran out of budget: go on as a beam, at a fraction of
                // the cost per level.
                cap = options.beam_width.max(1);
                exact = false;
                level.sort_by_key(|s| (s.peak, s.live));
                level.truncate(cap);
            } else {
                // Even the beam would overrun: give up.
                return Found {
                    order: None,
                    exact: false,
                };
            }
        }
        steps = steps.saturating_add(level.iter().map(|s| s.ready.len() as u64).sum());
        // Every extension of every state, deduplicated by executed set (lowest peak wins,
        // then discovery order); only the states kept are built.
        let mut cands: Vec<Candidate> = Vec::new();
        let mut index: HashMap<u64, usize, BuildHasherDefault<PassThrough>> = HashMap::default();
        for (si, s) in level.iter().enumerate() {
            for &m in &s.ready {
                let (during, after) = model.step(&s.done, s.live, m);
                let peak = s.peak.max(during);
                if peak >= bound {
                    continue;
                }
                let key = s.key ^ keys.get(m as usize).copied().unwrap_or(0);
                let same = |c: &Candidate| {
                    level
                        .get(c.parent)
                        .is_some_and(|p| same_extension(&p.done, c.node, &s.done, m))
                };
                match index.get(&key).copied() {
                    Some(k) if cands.get(k).is_some_and(same) => {
                        if let Some(c) = cands.get_mut(k)
                            && peak < c.peak
                        {
                            *c = Candidate {
                                peak,
                                live: after,
                                parent: si,
                                node: m,
                                key,
                            };
                        }
                    }
                    Some(_) => cands.push(Candidate {
                        peak,
                        live: after,
                        parent: si,
                        node: m,
                        key,
                    }),
                    None => {
                        index.insert(key, cands.len());
                        cands.push(Candidate {
                            peak,
                            live: after,
                            parent: si,
                            node: m,
                            key,
                        });
                    }
                }
            }
        }
        if cands.is_empty() {
            return Found { order: None, exact };
        }
        if cands.len() > cap {
            if exact_start {
                exact = false;
            }
            let mut order: Vec<usize> = (0..cands.len()).collect();
            order.sort_unstable_by_key(|&i| {
                cands
                    .get(i)
                    .map_or((u64::MAX, u64::MAX, i), |c| (c.peak, c.live, i))
            });
            order.truncate(cap);
            order.sort_unstable();
            cands = order
                .into_iter()
                .filter_map(|i| cands.get(i).cloned())
                .collect();
        }
        let mut next: Vec<State> = Vec::with_capacity(cands.len());
        for c in cands {
            let Some(parent) = level.get(c.parent) else {
                continue;
            };
            let mut done = parent.done.clone();
            done.insert(c.node);
            let mut ready: Vec<u32> = parent
                .ready
                .iter()
                .copied()
                .filter(|&r| r != c.node)
                .collect();
            for &succ in model
                .deps
                .succs
                .get(c.node as usize)
                .map_or(&[][..], Vec::as_slice)
            {
                let preds_done = model
                    .deps
                    .preds
                    .get(succ as usize)
                    .is_some_and(|p| p.iter().all(|&q| done.contains(q)));
                if preds_done && !done.contains(succ) && !ready.contains(&succ) {
                    ready.push(succ);
                }
            }
            ready.sort_unstable();
            history.push((parent.history, c.node));
            let h = u32::try_from(history.len() - 1).unwrap_or(u32::MAX);
            next.push(State {
                key: c.key,
                done,
                live: c.live,
                peak: c.peak,
                ready,
                history: h,
            });
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
