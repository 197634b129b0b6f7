//! memplan's cheap topological orders: depth-first, breadth-first, and a memory greedy.
//!
//! Each is Kahn's algorithm with a different choice among the ready nodes, and each breaks
//! ties by graph node order, so the result is deterministic. Breadth-first is also XLA's
//! `BFScheduler` (the CPU compiler's concurrency-optimized order): a FIFO of ready nodes
//! filled in program order.

use std::collections::VecDeque;

use memplan_ir::NodeId;

use super::model::{Model, Sim};

/// Remaining-predecessor counts and the initially ready nodes (ascending).
pub(super) fn start(model: &Model) -> (Vec<usize>, Vec<u32>) {
    let waiting: Vec<usize> = model.deps.preds.iter().map(Vec::len).collect();
    let ready = (0u32..)
        .zip(&waiting)
        .filter(|&(_, &w)| w == 0)
        .map(|(i, _)| i)
        .collect();
    (waiting, ready)
}

/// Marks `n` run; returns the successors that became ready, ascending.
pub(super) fn release(model: &Model, waiting: &mut [usize], n: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for &s in model
        .deps
        .succs
        .get(n as usize)
        .map_or(&[][..], Vec::as_slice)
    {
        if let Some(w) = waiting.get_mut(s as usize) {
            *w = w.saturating_sub(1);
            if *w == 0 {
                out.push(s);
            }
        }
    }
    out
}

/// Depth-first: run a successor of the node just run whenever one is ready.
pub(crate) fn depth_first(model: &Model) -> Vec<NodeId> {
    let (mut waiting, ready) = start(model);
    let mut stack: Vec<u32> = ready.into_iter().rev().collect();
    let mut order = Vec::with_capacity(model.len());
    while let Some(n) = stack.pop() {
        order.push(NodeId(n));
        stack.extend(release(model, &mut waiting, n).into_iter().rev());
    }
    order
}

/// Breadth-first: run ready nodes in the order they became ready.
pub(crate) fn breadth_first(model: &Model) -> Vec<NodeId> {
    let (mut waiting, ready) = start(model);
    let mut queue: VecDeque<u32> = ready.into();
    let mut order = Vec::with_capacity(model.len());
    while let Some(n) = queue.pop_front() {
        order.push(NodeId(n));
        queue.extend(release(model, &mut waiting, n));
    }
    order
}

/// Greedy: run the ready node that frees the most and allocates the least (the smallest
/// memory after the step, then the smallest during it, then graph order).
pub(crate) fn greedy(model: &Model) -> Vec<NodeId> {
    let (mut waiting, mut ready) = start(model);
    let mut sim = Sim::new(model);
    let mut order = Vec::with_capacity(model.len());
    while !ready.is_empty() {
        let mut best: Option<(usize, (u64, u64))> = None;
        for (i, &n) in ready.iter().enumerate() {
            let (during, after) = sim.eval(n);
            if best.is_none_or(|(_, (ba, bd))| (after, during) < (ba, bd)) {
                best = Some((i, (after, during)));
            }
        }
        let Some((i, _)) = best else { break };
        let n = ready.remove(i);
        sim.run(n);
        order.push(NodeId(n));
        for s in release(model, &mut waiting, n) {
            let pos = ready.partition_point(|&r| r < s);
            ready.insert(pos, s);
        }
    }
    order
}
