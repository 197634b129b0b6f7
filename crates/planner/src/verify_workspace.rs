//! The plan verifier's checks for workspaces and implicit inputs.
//!
//! Knowing nothing of how the planner sized or placed them, it checks that every workspace
//! names a node that runs bodies or a fused attention kernel, once, at that node's step; lies
//! inside the arena at a multiple of the plan's alignment; shares no byte with a buffer live
//! at its step; and is at least as large as the largest tensor any of the node's bodies makes
//! (a necessary condition: the exact need is the bodies' own plan) plus the scratch of the
//! attention kernel the plan's settings name (`verify::kernels`). A node that needs bytes
//! must have a workspace. Every implicit input (a value a body captures) that has a buffer
//! must be live through the step of the node that reads it.

use memplan_ir::{Bindings, Graph, IndexVec, NodeId, TensorKind};

use crate::plan::Plan;
use crate::verify::kernels;
use crate::verify::{PlanViolation, WorkspaceFault};

/// The least workspace `node` needs: its largest body tensor and its kernel's scratch.
fn need(graph: &Graph, node: &memplan_ir::Node, bindings: &Bindings, plan: &Plan) -> u64 {
    let scratch = kernels::attention_need(graph, node, bindings, plan.settings.attention);
    largest_body_tensor(node, bindings).saturating_add(scratch.unwrap_or(0))
}

/// Appends every workspace and implicit-input problem of `plan` to `out`.
pub(crate) fn check_workspaces(
    graph: &Graph,
    bindings: &Bindings,
    plan: &Plan,
    out: &mut Vec<PlanViolation>,
) {
    let node_name = |n: NodeId| {
        graph
            .nodes()
            .get(n)
            .map_or_else(|| n.to_string(), |x| x.name.clone())
    };
    let mut step_of: IndexVec<NodeId, Option<u32>> = IndexVec::from_elem(None, graph.nodes().len());
    for (step, &n) in (0u32..).zip(&plan.schedule) {
        if let Some(slot) = step_of.get_mut(n) {
            slot.get_or_insert(step);
        }
    }
    let mut seen: IndexVec<NodeId, bool> = IndexVec::from_elem(false, graph.nodes().len());
    for w in &plan.workspaces {
        let name = node_name(w.node);
        let bad = |reason: WorkspaceFault| PlanViolation::BadWorkspace {
            node: name.clone(),
            reason,
        };
        let Some(node) = graph.nodes().get(w.node) else {
            out.push(bad(WorkspaceFault::NotANode));
            continue;
        };
        if std::mem::replace(&mut seen[w.node], true) {
            out.push(bad(WorkspaceFault::Duplicate));
            continue;
        }
        if node.bodies.is_empty() && !kernels::is_fused_attention(&node.op) {
            out.push(bad(WorkspaceFault::NoBody));
        }
        if step_of[w.node] != Some(w.step) {
            out.push(bad(WorkspaceFault::WrongStep(w.step)));
        }
        let end = w.offset.checked_add(w.bytes);
        if end.is_none_or(|e| e > plan.arena_bytes) {
            out.push(bad(WorkspaceFault::OutsideArena {
                start: w.offset,
                end: w.offset.saturating_add(w.bytes),
                arena: plan.arena_bytes,
            }));
        }
        if plan.alignment > 0 && w.offset % plan.alignment != 0 {
            out.push(bad(WorkspaceFault::Misaligned {
                offset: w.offset,
                alignment: plan.alignment,
            }));
        }
        let need = need(graph, node, bindings, plan);
        if w.bytes < need {
            out.push(bad(WorkspaceFault::TooSmall {
                bytes: w.bytes,
                need,
            }));
        }
        let (ws, we) = (w.offset, w.offset.saturating_add(w.bytes));
        for b in &plan.buffers {
            let (bs, be) = (b.offset, b.offset.saturating_add(b.bytes));
            if b.first <= w.step && w.step <= b.last && bs < we && ws < be {
                out.push(PlanViolation::Overlap {
                    a: format!("workspace of {name}"),
                    b: graph
                        .tensors()
                        .get(b.tensor)
                        .map_or_else(|| b.tensor.to_string(), |t| t.name.clone()),
                    step: w.step,
                    start: bs.max(ws),
                    end: be.min(we),
                });
            }
        }
    }
    for (n, node) in graph.nodes().iter_enumerated() {
        if !seen[n] && need(graph, node, bindings, plan) > 0 {
            out.push(PlanViolation::BadWorkspace {
                node: node.name.clone(),
                reason: WorkspaceFault::Missing,
            });
        }
        let Some(step) = step_of[n] else { continue };
        for &t in &node.implicit_inputs {
            let Some(b) = plan.buffers.iter().find(|b| b.tensor == t) else {
                continue;
            };
            if b.first > step || b.last < step {
                out.push(PlanViolation::CaptureDead {
                    node: node.name.clone(),
                    tensor: graph
                        .tensors()
                        .get(t)
                        .map_or_else(|| t.to_string(), |x| x.name.clone()),
                    step,
                    first: b.first,
                    last: b.last,
                });
            }
        }
    }
}

/// The largest tensor any body of `node` makes (not its inputs), 0 when none has bytes
/// (sizes that cannot be computed count as 0: the planner reports those).
fn largest_body_tensor(node: &memplan_ir::Node, bindings: &Bindings) -> u64 {
    node.bodies
        .iter()
        .flat_map(|b| b.graph.tensors().iter())
        .filter(|t| t.kind != TensorKind::Input)
        .filter_map(|t| t.bytes(bindings).ok())
        .max()
        .unwrap_or(0)
}
