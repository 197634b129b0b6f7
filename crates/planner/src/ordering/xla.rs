//! XLA's memory schedulers (`hlo_memory_scheduler.cc`), restated over memplan's model.
//!
//! - [`list`]: `ListScheduler`. A greedy over the ready nodes: the one whose step frees the
//!   most bytes less the bytes it defines, then the one with the most users; effective
//!   scalars first. Equal keys go to the node that entered (or re-entered) the ready queue
//!   last, as XLA's `std::multimap` does: its end holds the newest of the largest key. A
//!   node's key is recomputed when a group it reads drops to its last reader, and it
//!   re-enters the queue only if the key changed.
//! - [`dfs`]: `DFSMemoryScheduler`. Every node gets, over its ancestors (with repeats, as
//!   XLA counts paths), the sum of `users - 1` ("extra users") and of the bytes it defines,
//!   each capped (XLA caps the first at the node count and the second at the running total
//!   of bytes). A post-order from the sinks then visits a node's operands by extra users,
//!   most first, then by that subtree size, largest first, then by name. On graphs
//!   converted from XLA's forward passes this is XLA's memory-optimized order, node for
//!   node (a test checks it).
//! - [`post_order`]: `PostOrderScheduler`: a post-order from each sink in graph order,
//!   operands first to last.
//!
//! XLA ignores parameters and constants; here graph inputs the caller owns are not in the
//! arena and so weigh nothing. (XLA's `BFScheduler` is memplan's breadth-first order.) Each
//! runs in `O((nodes + edges) log nodes)` plus, for the list scheduler, the readers scanned
//! when a group drops to its last reader.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use memplan_ir::NodeId;

use super::heuristics::{release, start};
use super::model::{Model, Sim};

/// XLA's list scheduler key: effective scalar, bytes freed minus bytes defined, users, and
/// the insertion sequence number (larger is newer); the largest key runs first.
type ListKey = (bool, i128, usize, u64);

/// XLA's list scheduler (see the module docs).
pub(crate) fn list(model: &Model) -> Vec<NodeId> {
    let n = model.len();
    let (mut waiting, ready) = start(model);
    let mut sim = Sim::new(model);
    let mut done = vec![false; n];
    let mut key_of: Vec<Option<ListKey>> = vec![None; n];
    let mut queue: BTreeMap<ListKey, u32> = BTreeMap::new();
    let mut seq: u64 = 0;
    let key = |sim: &Sim<'_>, m: u32, seq: u64| -> ListKey {
        if model.scalar(m) {
            return (true, i128::MAX, usize::MAX, seq);
        }
        let (_, after) = sim.eval(m);
        let users = model.deps.succs.get(m as usize).map_or(0, Vec::len);
        (false, i128::from(sim.live) - i128::from(after), users, seq)
    };
    let push = |queue: &mut BTreeMap<ListKey, u32>,
                key_of: &mut [Option<ListKey>],
                seq: &mut u64,
                sim: &Sim<'_>,
                m: u32| {
        *seq += 1;
        let k = key(sim, m, *seq);
        queue.insert(k, m);
        if let Some(slot) = key_of.get_mut(m as usize) {
            *slot = Some(k);
        }
    };
    for m in ready {
        push(&mut queue, &mut key_of, &mut seq, &sim, m);
    }
    let mut order = Vec::with_capacity(n);
    while let Some((_, m)) = queue.pop_last() {
        if let Some(slot) = key_of.get_mut(m as usize) {
            *slot = None;
        }
        sim.run(m);
        if let Some(d) = done.get_mut(m as usize) {
            *d = true;
        }
        order.push(NodeId(m));
        for s in release(model, &mut waiting, m) {
            push(&mut queue, &mut key_of, &mut seq, &sim, s);
        }
        // A group down to its last reader: that reader's key may have grown.
        for &g in model.reads(m) {
            if sim.remaining(g) != 1 {
                continue;
            }
            let Some(&r) = model
                .consumers(g)
                .iter()
                .find(|&&r| done.get(r as usize) == Some(&false))
            else {
                continue;
            };
            let Some(old) = key_of.get(r as usize).copied().flatten() else {
                continue;
            };
            let new = key(&sim, r, old.3);
            if (new.0, new.1, new.2) != (old.0, old.1, old.2) {
                queue.remove(&old);
                push(&mut queue, &mut key_of, &mut seq, &sim, r);
            }
        }
    }
    order
}

/// A post-order from the sinks (taken in the order `sinks` gives), visiting each node's
/// predecessors in the order `operands` gives.
fn post_order_from(
    model: &Model,
    sinks: &[u32],
    operands: impl Fn(u32) -> Vec<u32>,
) -> Vec<NodeId> {
    let n = model.len();
    // 0: unseen, 1: on the stack, 2: emitted.
    let mut state = vec![0u8; n];
    let mut order = Vec::with_capacity(n);
    let mut stack: Vec<(u32, Vec<u32>, usize)> = Vec::new();
    for &root in sinks {
        if state.get(root as usize) != Some(&0) {
            continue;
        }
        state[root as usize] = 1;
        stack.push((root, operands(root), 0));
        while let Some((m, ops, next)) = stack.last_mut() {
            if let Some(&p) = ops.get(*next) {
                *next += 1;
                if state.get(p as usize) == Some(&0) {
                    state[p as usize] = 1;
                    let o = operands(p);
                    stack.push((p, o, 0));
                }
            } else {
                let m = *m;
                state[m as usize] = 2;
                order.push(NodeId(m));
                stack.pop();
            }
        }
    }
    // Nodes no sink reaches cannot exist (every node reaches a sink), but keep the order
    // whole whatever the input.
    for m in model.deps.topological() {
        if state.get(m as usize) == Some(&0) {
            order.push(NodeId(m));
        }
    }
    order
}

/// The sinks (nodes no other node depends on), in graph order.
fn sinks(model: &Model) -> Vec<u32> {
    (0u32..)
        .zip(&model.deps.succs)
        .filter(|(_, s)| s.is_empty())
        .map(|(i, _)| i)
        .collect()
}

/// XLA's DFS memory scheduler (see the module docs).
pub(crate) fn dfs(model: &Model) -> Vec<NodeId> {
    let n = model.len();
    let cap_users = u64::try_from(n).unwrap_or(u64::MAX);
    let mut extra_users = vec![0u64; n];
    let mut total_sizes = vec![0u64; n];
    let mut cumulative: u64 = 0;
    for m in model.deps.topological() {
        let i = m as usize;
        let users = model.deps.succs.get(i).map_or(0, Vec::len);
        let own = model.created_bytes(m);
        cumulative = cumulative.saturating_add(own);
        let mut eu = u64::try_from(users.saturating_sub(1)).unwrap_or(u64::MAX);
        let mut ts = own;
        for &p in model.deps.preds.get(i).map_or(&[][..], Vec::as_slice) {
            eu = eu.saturating_add(extra_users[p as usize]);
            ts = ts.saturating_add(total_sizes[p as usize]);
        }
        extra_users[i] = eu.min(cap_users);
        total_sizes[i] = ts.min(cumulative);
    }
    let by_stats = |v: &mut Vec<u32>| {
        v.sort_by_key(|&p| {
            (
                Reverse(extra_users[p as usize]),
                Reverse(total_sizes[p as usize]),
                model.name_rank(p),
            )
        });
    };
    let mut roots = sinks(model);
    by_stats(&mut roots);
    post_order_from(model, &roots, |m| {
        let mut ops = model
            .deps
            .preds
            .get(m as usize)
            .cloned()
            .unwrap_or_default();
        by_stats(&mut ops);
        ops
    })
}

/// XLA's post-order scheduler (see the module docs).
pub(crate) fn post_order(model: &Model) -> Vec<NodeId> {
    post_order_from(model, &sinks(model), |m| {
        model
            .deps
            .preds
            .get(m as usize)
            .cloned()
            .unwrap_or_default()
    })
}
