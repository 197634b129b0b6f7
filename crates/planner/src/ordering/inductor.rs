//! PyTorch Inductor's `reorder_for_peak_memory` orders (`torch/_inductor/memory.py`),
//! restated over memplan's model.
//!
//! - [`lpmf`]: least peak memory first. Among the ready nodes, if some run without raising
//!   the peak so far, the one leaving the least memory after its step; otherwise the one
//!   whose step peaks lowest. The key is `(max(during, peak so far), after - live, graph
//!   order)`. Inductor's "during" is the live bytes plus the node's outputs; the model's
//!   also subtracts what an in-place write saves and adds the node's workspace.
//! - [`bfs`]: among the ready nodes, the one whose predecessors ran earliest: its key is the
//!   ascending list of its predecessors' steps, compared lexicographically, then graph
//!   order (first-in, first-out, so buffers live briefly).
//! - [`dfs`]: a post-order visiting nodes, and each node's predecessors, by the bytes they
//!   touch (outputs plus the groups they read), smallest first, then graph order.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use memplan_ir::NodeId;

use super::heuristics::{release, start};
use super::model::{Model, Sim};

/// Least peak memory first (see the module docs).
pub(crate) fn lpmf(model: &Model) -> Vec<NodeId> {
    let (mut waiting, mut ready) = start(model);
    let mut sim = Sim::new(model);
    let mut order = Vec::with_capacity(model.len());
    while !ready.is_empty() {
        let mut best: Option<(usize, (u64, i128, u32))> = None;
        for (i, &m) in ready.iter().enumerate() {
            let (during, after) = sim.eval(m);
            let key = (
                during.max(sim.peak),
                i128::from(after) - i128::from(sim.live),
                m,
            );
            if best.is_none_or(|(_, k)| key < k) {
                best = Some((i, key));
            }
        }
        let Some((i, _)) = best else { break };
        let m = ready.swap_remove(i);
        sim.run(m);
        order.push(NodeId(m));
        ready.extend(release(model, &mut waiting, m));
    }
    order
}

/// Inductor's breadth-first order (see the module docs).
pub(crate) fn bfs(model: &Model) -> Vec<NodeId> {
    let (mut waiting, ready) = start(model);
    let mut step_of = vec![u32::MAX; model.len()];
    let key = |step_of: &[u32], m: u32| -> Reverse<(Vec<u32>, u32)> {
        let mut steps: Vec<u32> = model
            .deps
            .preds
            .get(m as usize)
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .map(|&p| step_of.get(p as usize).copied().unwrap_or(u32::MAX))
            .collect();
        steps.sort_unstable();
        Reverse((steps, m))
    };
    let mut heap: BinaryHeap<Reverse<(Vec<u32>, u32)>> =
        ready.into_iter().map(|m| key(&step_of, m)).collect();
    let mut order = Vec::with_capacity(model.len());
    while let Some(Reverse((_, m))) = heap.pop() {
        if let Some(s) = step_of.get_mut(m as usize) {
            *s = u32::try_from(order.len()).unwrap_or(u32::MAX);
        }
        order.push(NodeId(m));
        for s in release(model, &mut waiting, m) {
            heap.push(key(&step_of, s));
        }
    }
    order
}

/// Inductor's depth-first order (see the module docs).
pub(crate) fn dfs(model: &Model) -> Vec<NodeId> {
    let n = model.len();
    let touched: Vec<u64> = (0..n as u32)
        .map(|m| {
            model.reads(m).iter().fold(model.created_bytes(m), |a, &g| {
                a.saturating_add(model.size(g))
            })
        })
        .collect();
    let by_touched = |v: &mut Vec<u32>| v.sort_by_key(|&m| (touched[m as usize], m));
    let mut roots: Vec<u32> = (0..n as u32).collect();
    by_touched(&mut roots);
    let mut seen = vec![false; n];
    let mut order = Vec::with_capacity(n);
    let mut stack: Vec<(u32, Vec<u32>, usize)> = Vec::new();
    for root in roots {
        if seen[root as usize] {
            continue;
        }
        seen[root as usize] = true;
        let mut ops = model.deps.preds[root as usize].clone();
        by_touched(&mut ops);
        stack.push((root, ops, 0));
        while let Some((m, ops, next)) = stack.last_mut() {
            if let Some(&p) = ops.get(*next) {
                *next += 1;
                if !seen[p as usize] {
                    seen[p as usize] = true;
                    let mut o = model.deps.preds[p as usize].clone();
                    by_touched(&mut o);
                    stack.push((p, o, 0));
                }
            } else {
                order.push(NodeId(*m));
                stack.pop();
            }
        }
    }
    order
}
