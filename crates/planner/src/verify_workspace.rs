//! The plan verifier's checks for workspaces and implicit inputs.
//!
//! Knowing nothing of how the planner sized or placed them, it checks that every workspace
//! names a node that runs bodies or a fused attention kernel, once, at that node's step; lies
//! inside the arena at a multiple of the plan's alignment; and shares no byte with a buffer
//! live at its step. Each body that makes bytes has a plan in the workspace
//! ([`crate::BodyPlan`]), made with the plan's bindings and no more aliasing than the plan
//! allows; that plan passes the whole verifier against the body graph (its own workspaces
//! and their bodies included, at any depth), and the workspace holds it: the body's arena,
//! then its weights at the next multiple of its alignment. A fused attention node's
//! workspace also holds the scratch of the kernel the plan's settings name
//! (`verify::kernels`), after its largest body plan. A node that needs bytes (bodies that
//! make tensors with bytes, or a kernel's scratch) must have a workspace. Every implicit
//! input (a value a body captures) that has a buffer must be live through the step of the
//! node that reads it.

use memplan_ir::{Bindings, Graph, IndexVec, NodeId, TensorKind};

use crate::plan::Plan;
use crate::verify::kernels;
use crate::verify::{PlanViolation, WorkspaceFault};

/// The scratch bytes `node`'s kernel needs with the plan's attention kernel (0 for nodes
/// that run no fused attention).
fn scratch(graph: &Graph, node: &memplan_ir::Node, bindings: &Bindings, plan: &Plan) -> u64 {
    kernels::attention_need(graph, node, bindings, plan.settings.attention).unwrap_or(0)
}

/// Appends every workspace and implicit-input problem of `plan` to `out`.
pub(crate) fn check_workspaces(
    graph: &Graph,
    bindings: &Bindings,
    plan: &Plan,
    ends: &[u64],
    strict: bool,
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
        let mut bodies_need: u64 = 0;
        for body in &node.bodies {
            let plan_of = w.bodies.iter().find(|b| b.attr == body.attr);
            let Some(bp) = plan_of else {
                if largest_body_tensor(&body.graph, bindings) > 0 {
                    out.push(bad(WorkspaceFault::NoBodyPlan(body.attr.clone())));
                }
                continue;
            };
            let (set, own) = (&bp.plan.settings, &plan.settings);
            let permits = |body: bool, outer: bool| !body || outer;
            if set.bindings != own.bindings
                || set.bounded != own.bounded
                || !permits(set.views, own.views)
                || !permits(set.inplace, own.inplace)
                || !permits(set.inplace_over_inputs, own.inplace_over_inputs)
                || !permits(set.concat_elision, own.concat_elision)
                || own
                    .op_table
                    .made_opaque()
                    .iter()
                    .any(|op| !set.op_table.made_opaque().contains(op))
            {
                out.push(bad(WorkspaceFault::BodySettings(body.attr.clone())));
            }
            let report = crate::verify::verify_plan_report(&body.graph, &bp.plan, strict);
            out.extend(
                report
                    .violations
                    .into_iter()
                    .map(|v| PlanViolation::InBody {
                        node: name.clone(),
                        attr: body.attr.clone(),
                        problem: Box::new(v),
                    }),
            );
            bodies_need = bodies_need.max(bp.bytes().unwrap_or(u64::MAX));
            match bp.bytes() {
                Some(need) if need <= w.bytes => {}
                need => out.push(bad(WorkspaceFault::TooSmall {
                    bytes: w.bytes,
                    attr: body.attr.clone(),
                    need: need.unwrap_or(u64::MAX),
                })),
            }
        }
        for b in &w.bodies {
            if !node.bodies.iter().any(|x| x.attr == b.attr) {
                out.push(bad(WorkspaceFault::NoSuchBody(b.attr.clone())));
            }
        }
        let scratch = scratch(graph, node, bindings, plan);
        if scratch > 0 {
            let need = bodies_need.saturating_add(scratch);
            if w.bytes < need {
                out.push(bad(WorkspaceFault::NoRoomForScratch {
                    bytes: w.bytes,
                    need,
                }));
            }
        }
        let (ws, we) = (w.offset, w.offset.saturating_add(w.bytes));
        for (b, &end) in plan.buffers.iter().zip(ends) {
            // Strided Concat parts by their extent: a workspace clear of it is clear of them.
            let (bs, be) = (b.offset, end);
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
        let makes = node
            .bodies
            .iter()
            .map(|b| largest_body_tensor(&b.graph, bindings))
            .max()
            .unwrap_or(0);
        if !seen[n] && (makes > 0 || scratch(graph, node, bindings, plan) > 0) {
            out.push(PlanViolation::BadWorkspace {
                node: node.name.clone(),
                reason: WorkspaceFault::Missing,
            });
        }
        let Some(step) = step_of[n] else { continue };
        for &t in &node.implicit_inputs {
            let Some(b) = plan.buffer(t) else {
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

/// The largest tensor a body makes (not its inputs), 0 when none has bytes (sizes that
/// cannot be computed count as 0: the body plan's own check reports those).
fn largest_body_tensor(body: &Graph, bindings: &Bindings) -> u64 {
    body.tensors()
        .iter()
        .filter(|t| t.kind != TensorKind::Input)
        .filter_map(|t| t.bytes(bindings).ok())
        .max()
        .unwrap_or(0)
}
