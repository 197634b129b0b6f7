//! Training: one plan for a forward and a backward graph the caller made
//! ([`plan_forward_backward`]; [`crate::plan_training`] derives the backward itself).
//!
//! The backward graph names the forward tensors it reads (saved activations, the forward
//! inputs, the weights) with the same names, as its own graph inputs or weights. The two
//! graphs are joined into one: forward nodes, then backward nodes, with every shared name
//! mapped to the forward tensor. The joint graph is planned as any other graph, so
//!
//! - weights share one layout: forward weights come first in tensor id order, so they get the
//!   offsets a forward-only plan would give them, and the backward graph reuses them;
//! - saved activations stay live from their forward producer to their last backward reader,
//!   in one arena with everything else; nothing the backward reads is overwritten in place.
//!
//! [`TrainingPlan::forward`] and [`TrainingPlan::backward`] are the joint plan seen from each
//! graph (its own tensor ids, node names and steps); each passes [`crate::verify_plan`]
//! against its own graph. Backward graph inputs that the forward graph does not have (the
//! seed gradient) are graph inputs of the joint graph and so live from its first step.
//!
//! Symbols: the backward graph's symbols must extend the forward graph's (same names at the
//! same positions, new ones after), so shapes need no renaming.
//!
//! Nothing is folded (`PlanOptions::fold_weights` is ignored): an optimizer step changes the
//! weights, so a tensor computed from them (a tied layer's transpose) is recomputed every
//! step, in the arena.

use memplan_ir::{Graph, IndexVec, Node, NodeId, TensorId, TensorKind};

use crate::error::{PlanError, TrainingFault};
use crate::options::PlanOptions;
use crate::plan::{Alias, Plan, PlannedBuffer, PlannedWeight, PlannedWorkspace};
use crate::planner::plan_graph;

/// The memory plan of a training step.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TrainingPlan {
    /// The joint graph: forward nodes, then backward nodes; forward tensors keep their ids.
    pub joint: Graph,
    /// The plan of the joint graph.
    pub plan: Plan,
    /// The joint plan restricted to the forward graph (forward ids, forward steps).
    pub forward: Plan,
    /// The joint plan restricted to the backward graph (backward ids, backward steps).
    pub backward: Plan,
    /// For each backward tensor, the joint (and, for shared ones, forward) tensor.
    pub backward_to_joint: IndexVec<TensorId, TensorId>,
    /// Forward activations and outputs the backward graph reads (forward ids, id order).
    pub saved: Vec<TensorId>,
}

/// Joins `forward` and `backward` and plans them together: the backward graph names the
/// forward tensors it reads (saved activations, inputs, weights) by their forward names; the
/// joint graph is planned as any other, so weights share one layout and saved activations
/// stay live from their forward producer to their last backward reader.
pub fn plan_forward_backward(
    forward: &Graph,
    backward: &Graph,
    options: &PlanOptions,
) -> Result<TrainingPlan, PlanError> {
    forward.validate().map_err(PlanError::Invalid)?;
    backward.validate().map_err(PlanError::Invalid)?;
    let (joint, map) = join(forward, backward)?;
    // The weights change every step: what is computed from them is computed every step too,
    // never once at load.
    let options = PlanOptions {
        fold_weights: false,
        ..options.clone()
    };
    // The joint graph is this call's own: its errors carry it.
    let plan = plan_graph(&joint, &options).map_err(PlanError::in_graph(&joint))?;
    let n_fwd = forward.nodes().len();
    let is_fwd_node = |n: NodeId| (n.0 as usize) < n_fwd;
    let fwd_ids: IndexVec<TensorId, TensorId> = forward
        .tensors()
        .iter_enumerated()
        .map(|(t, _)| t)
        .collect();
    let forward_plan = restrict(&plan, forward, &fwd_ids, is_fwd_node, |n| n)?;
    let fwd_count = u32::try_from(n_fwd).unwrap_or(u32::MAX);
    let backward_plan = restrict(
        &plan,
        backward,
        &map,
        |n| !is_fwd_node(n),
        |n| NodeId(n.0.saturating_sub(fwd_count)),
    )?;
    let mut saved: Vec<TensorId> = map
        .iter()
        .copied()
        .filter(|&j| {
            forward
                .tensors()
                .get(j)
                .is_some_and(|t| matches!(t.kind, TensorKind::Activation | TensorKind::Output))
        })
        .collect();
    saved.sort_unstable();
    saved.dedup();
    Ok(TrainingPlan {
        joint,
        plan,
        forward: forward_plan,
        backward: backward_plan,
        backward_to_joint: map,
        saved,
    })
}

/// The joint graph and the backward-to-joint tensor map.
fn join(
    forward: &Graph,
    backward: &Graph,
) -> Result<(Graph, IndexVec<TensorId, TensorId>), PlanError> {
    let mismatch = |tensor: &str, reason: TrainingFault| PlanError::TrainingMismatch {
        tensor: tensor.to_owned(),
        reason,
    };
    for (i, name) in backward.symbols().iter().enumerate() {
        if let Some(f) = forward.symbols().iter().nth(i)
            && f != name
        {
            return Err(mismatch(name, TrainingFault::Symbol { forward: f.clone() }));
        }
    }
    let mut joint = forward.clone();
    joint.name = format!("{}+{}", forward.name, backward.name);
    for name in backward.symbols().iter().skip(forward.symbols().len()) {
        joint.symbol(name);
    }
    let mut map: IndexVec<TensorId, TensorId> = IndexVec::new();
    for t in backward.tensors().iter() {
        match forward.find_tensor(&t.name) {
            Some(f) => {
                let ft = forward.tensor(f);
                if ft.dtype != t.dtype || ft.shape != t.shape {
                    return Err(mismatch(
                        &t.name,
                        TrainingFault::Shape {
                            forward: describe(forward, ft),
                            backward: describe(backward, t),
                        },
                    ));
                }
                if !matches!(t.kind, TensorKind::Input | TensorKind::Weight) {
                    return Err(mismatch(&t.name, TrainingFault::Written(t.kind)));
                }
                if (t.kind == TensorKind::Weight) != (ft.kind == TensorKind::Weight) {
                    return Err(mismatch(
                        &t.name,
                        TrainingFault::Kind {
                            forward: ft.kind,
                            backward: t.kind,
                        },
                    ));
                }
                map.push(f);
            }
            None => {
                map.push(joint.add_tensor(t.clone()));
            }
        }
    }
    for node in backward.nodes().iter() {
        let m = |t: TensorId| map.get(t).copied().unwrap_or(t);
        joint.add_node(
            Node::new(
                node.name.clone(),
                node.op.clone(),
                node.inputs.iter().map(|i| i.map(m)).collect(),
                node.outputs.iter().map(|&o| m(o)).collect(),
            )
            .with_attrs(node.attrs.clone())
            .with_bodies(node.bodies.clone())
            .with_implicit_inputs(node.implicit_inputs.iter().map(|&t| m(t)).collect()),
        );
    }
    joint.validate().map_err(PlanError::Invalid)?;
    Ok((joint, map))
}

fn describe(graph: &Graph, t: &memplan_ir::Tensor) -> String {
    let dims: Vec<String> = t
        .shape
        .iter()
        .map(|d| d.display(graph.symbols()).to_string())
        .collect();
    format!("{}[{}]", t.dtype.name(), dims.join(", "))
}

/// `plan` seen from `graph`, whose tensor `t` is joint tensor `ids[t]` and whose nodes are the
/// joint nodes that `keep` accepts (`local` gives their id in `graph`).
fn restrict(
    plan: &Plan,
    graph: &Graph,
    ids: &IndexVec<TensorId, TensorId>,
    keep: impl Fn(NodeId) -> bool,
    local: impl Fn(NodeId) -> NodeId,
) -> Result<Plan, PlanError> {
    // Joint step -> number of kept nodes strictly before it.
    let mut before: Vec<u32> = Vec::with_capacity(plan.schedule.len() + 1);
    let mut count = 0u32;
    for &n in &plan.schedule {
        before.push(count);
        if keep(n) {
            count += 1;
        }
    }
    before.push(count);
    let steps = count;
    let map_first = |s: u32| {
        before
            .get(s as usize)
            .copied()
            .unwrap_or(steps)
            .min(steps.saturating_sub(1))
    };
    let map_last = |s: u32| {
        before
            .get(s as usize + 1)
            .copied()
            .unwrap_or(steps)
            .saturating_sub(1)
    };
    let mut joint_to_local: IndexVec<TensorId, Option<TensorId>> = IndexVec::from_elem(
        None,
        ids.iter().map(|j| j.0 as usize + 1).max().unwrap_or(0),
    );
    for (t, &j) in ids.iter_enumerated() {
        if let Some(slot) = joint_to_local.get_mut(j) {
            *slot = Some(t);
        }
    }
    let local_of = |j: TensorId| joint_to_local.get(j).copied().flatten();
    let mut dropped_parent = false;
    let mut buffers: Vec<PlannedBuffer> = plan
        .buffers
        .iter()
        .filter_map(|b| {
            let t = local_of(b.tensor)?;
            let alias = b.alias.and_then(|a| {
                let of = local_of(a.of())?;
                Some(match a {
                    Alias::View { offset, .. } => Alias::View { of, offset },
                    Alias::InPlace { .. } => Alias::InPlace { of },
                    Alias::Part { offset, .. } => Alias::Part { of, offset },
                })
            });
            dropped_parent |= b.alias.is_some() && alias.is_none();
            Some(PlannedBuffer {
                tensor: t,
                first: map_first(b.first),
                last: map_last(b.last).max(map_first(b.first)),
                alias,
                ..b.clone()
            })
        })
        .collect();
    buffers.sort_by_key(|b| b.tensor);
    let mut weights: Vec<PlannedWeight> = plan
        .weights
        .iter()
        .filter_map(|w| {
            Some(PlannedWeight {
                tensor: local_of(w.tensor)?,
                ..w.clone()
            })
        })
        .collect();
    weights.sort_by_key(|w| w.tensor);
    let schedule = plan
        .schedule
        .iter()
        .copied()
        .filter(|&n| keep(n))
        .map(&local)
        .collect();
    let workspaces = plan
        .workspaces
        .iter()
        .filter(|w| keep(w.node))
        .map(|w| PlannedWorkspace {
            node: local(w.node),
            step: before.get(w.step as usize).copied().unwrap_or(steps),
            ..w.clone()
        })
        .collect();
    Ok(Plan {
        graph: graph.name.clone(),
        alignment: if dropped_parent { 1 } else { plan.alignment },
        schedule,
        workspaces,
        buffers,
        weights,
        ..plan.clone()
    })
}
