//! Mutation: ops that write an input in place while it stays live (a gradient accumulator,
//! an optimizer step), stated by [`memplan_ir::OpTable::mutated_inputs`].
//!
//! Three consequences for a plan, all enforced here or by the phases that call this module:
//!
//! - a mutated tensor keeps its bytes to itself: it is no view, no in-place output and no
//!   Concat part, and nothing is made a view of it or written over it ([`unshare`]);
//! - a mutated graph input in the arena stays live through the last step, like a graph
//!   output: the caller reads the updated value back (`liveness` asks [`mutated`]);
//! - the order of the writes and of every other read of a mutated tensor is the graph's node
//!   order: a reader before the write in node order runs before it in every schedule, one
//!   after it runs after it ([`order_edges`], which the ordering search and
//!   [`check_order`] obey).

use memplan_ir::{Graph, IndexVec, MemorySemantics, NodeId, OpTable, TensorId};

use crate::error::{PlanError, ScheduleFault};

/// Which tensors some node writes in place.
pub(crate) fn mutated(graph: &Graph, table: &OpTable) -> IndexVec<TensorId, bool> {
    let mut out = IndexVec::from_elem(false, graph.tensors().len());
    if !table.has_mutations() {
        return out;
    }
    for node in graph.nodes().iter() {
        for t in table.updated_tensors(graph, node) {
            if let Some(m) = out.get_mut(t) {
                *m = true;
            }
        }
    }
    out
}

/// Makes every output that would share a mutated tensor's bytes opaque: a view of it, a view
/// that is it, an in-place write over it or by it.
pub(crate) fn unshare(
    graph: &Graph,
    mutated: &IndexVec<TensorId, bool>,
    semantics: &mut IndexVec<NodeId, Vec<MemorySemantics>>,
) {
    if !mutated.iter().any(|&m| m) {
        return;
    }
    let is = |t: Option<TensorId>| t.is_some_and(|t| mutated.get(t).copied().unwrap_or(false));
    for (n, node) in graph.nodes().iter_enumerated() {
        let Some(sems) = semantics.get_mut(n) else {
            continue;
        };
        for (j, sem) in sems.iter_mut().enumerate() {
            let y = node.outputs.get(j).copied();
            let shares = match sem {
                MemorySemantics::Opaque => false,
                MemorySemantics::View { input, .. } => {
                    is(y) || is(node.inputs.get(*input).copied().flatten())
                }
                MemorySemantics::InPlace { inputs } => {
                    is(y)
                        || inputs
                            .iter()
                            .any(|&i| is(node.inputs.get(i).copied().flatten()))
                }
            };
            if shares {
                *sem = MemorySemantics::Opaque;
            }
        }
    }
}

/// The ordering constraints mutation adds, as `(before, after)` node pairs: for each node
/// writing tensor `t` in place and each other node reading `t`'s bytes, the one earlier in
/// node order first. Sorted, without repeats.
pub(crate) fn order_edges(graph: &Graph, table: &OpTable) -> Vec<(NodeId, NodeId)> {
    if !table.has_mutations() {
        return Vec::new();
    }
    let mut readers: IndexVec<TensorId, Vec<NodeId>> =
        IndexVec::from_elem(Vec::new(), graph.tensors().len());
    for (n, node) in graph.nodes().iter_enumerated() {
        for t in memplan_ir::data_inputs(node) {
            if let Some(list) = readers.get_mut(t)
                && list.last() != Some(&n)
            {
                list.push(n);
            }
        }
    }
    let mut edges = Vec::new();
    for (m, node) in graph.nodes().iter_enumerated() {
        for t in table.updated_tensors(graph, node) {
            for &r in readers.get(t).map_or(&[][..], Vec::as_slice) {
                if r < m {
                    edges.push((r, m));
                } else if r > m {
                    edges.push((m, r));
                }
            }
        }
    }
    edges.sort_unstable();
    edges.dedup();
    edges
}

/// Checks that `schedule` keeps every mutation's order (see [`order_edges`]).
pub(crate) fn check_order(
    graph: &Graph,
    table: &OpTable,
    schedule: &[NodeId],
) -> Result<(), PlanError> {
    let edges = order_edges(graph, table);
    if edges.is_empty() {
        return Ok(());
    }
    let mut step: IndexVec<NodeId, usize> = IndexVec::from_elem(0, graph.nodes().len());
    for (s, &n) in schedule.iter().enumerate() {
        if let Some(x) = step.get_mut(n) {
            *x = s;
        }
    }
    for (a, b) in edges {
        if step[a] > step[b] {
            return Err(PlanError::BadSchedule {
                graph: graph.name.clone(),
                reason: ScheduleFault::AcrossWrite { node: b, before: a },
            });
        }
    }
    Ok(())
}
