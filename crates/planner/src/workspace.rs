//! Workspaces: the memory a node needs while it runs, beyond its outputs: the bodies a
//! control-flow node runs, and the scratch of a fused kernel (`kernels`).
//!
//! A node with bodies (If's branches, a Loop's or Scan's body) runs each body as a graph of
//! its own. The body's inputs (formal inputs and captured outer values) belong to the caller
//! and are not in the body's memory; everything else the body makes, its results included, is
//! the node's *workspace*. Its size is found by planning each body with the caller's options
//! (same bindings, schedule mode, aliasing, alignment), graph inputs left to the caller and
//! graph outputs in the arena: the body's arena, then its own constants (weights) after it at
//! an aligned offset. Nested control flow counts inside the body's plan. A node's workspace is
//! the largest over its bodies (they run one at a time). It lives in the activation arena at
//! the node's step only, and carries the plans of its bodies (so that the verifier and the
//! pattern check can run them). A body that cannot be planned is an error naming the node.

use memplan_ir::{Graph, IndexVec, Node, NodeId};

use crate::error::PlanError;
use crate::options::PlanOptions;
use crate::plan::{BodyPlan, Plan};
use crate::planner::plan_graph;
use memplan_packing::align_up;

/// The workspace of every node of `graph`: its bytes (0 for a node without bodies) and the
/// plans of its bodies that make bytes.
pub(crate) struct Workspaces {
    pub bytes: IndexVec<NodeId, u64>,
    pub bodies: IndexVec<NodeId, Vec<BodyPlan>>,
}

/// The workspace of every node of `graph`.
pub(crate) fn workspace_sizes(
    graph: &Graph,
    options: &PlanOptions,
) -> Result<Workspaces, PlanError> {
    let body_options = PlanOptions {
        inputs_in_arena: false,
        outputs_in_arena: true,
        ..options.clone()
    };
    let mut out = Workspaces {
        bytes: IndexVec::new(),
        bodies: IndexVec::new(),
    };
    for (n, node) in graph.nodes().iter_enumerated() {
        let (bodies_bytes, bodies) = node_workspace(n, node, &body_options)?;
        let scratch =
            crate::kernels::kernel_scratch(graph, n, node, &options.bindings, options.attention)?;
        let bytes = bodies_bytes
            .checked_add(scratch)
            .ok_or_else(|| PlanError::Overflow {
                what: format!("sizing the workspace of node `{}`", node.name),
            })?;
        out.bytes.push(bytes);
        out.bodies.push(bodies);
    }
    Ok(out)
}

fn node_workspace(
    n: NodeId,
    node: &Node,
    body_options: &PlanOptions,
) -> Result<(u64, Vec<BodyPlan>), PlanError> {
    let mut most: u64 = 0;
    let mut plans = Vec::new();
    for body in &node.bodies {
        let wrap = |e: PlanError| PlanError::Body {
            node: n,
            attr: body.attr.clone(),
            error: Box::new(e),
        };
        let plan = plan_graph(&body.graph, body_options).map_err(wrap)?;
        let bytes = body_bytes(&plan, body_options).map_err(wrap)?;
        most = most.max(bytes);
        if bytes > 0 {
            plans.push(BodyPlan {
                attr: body.attr.clone(),
                plan,
            });
        }
    }
    Ok((most, plans))
}

/// Bytes of one planned body: its arena, then its weights at an offset aligned for any dtype.
fn body_bytes(plan: &Plan, options: &PlanOptions) -> Result<u64, PlanError> {
    if plan.weight_bytes == 0 {
        return Ok(plan.arena_bytes);
    }
    let alignment = options
        .dtype_alignment
        .iter()
        .map(|d| d.1)
        .fold(options.alignment, u64::max);
    align_up(plan.arena_bytes, alignment)
        .and_then(|a| a.checked_add(plan.weight_bytes))
        .ok_or_else(|| PlanError::Overflow {
            what: format!("sizing the workspace of body graph `{}`", plan.graph),
        })
}
