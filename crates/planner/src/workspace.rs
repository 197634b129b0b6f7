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
//! the node's step only. A body that cannot be planned is an error naming the node.

use memplan_ir::{Graph, IndexVec, Node, NodeId};

use crate::error::PlanError;
use crate::options::PlanOptions;
use crate::plan::Plan;
use crate::planner::plan_graph;
use memplan_packing::align_up;

/// The workspace bytes of every node of `graph` (0 for a node without bodies).
pub(crate) fn workspace_sizes(
    graph: &Graph,
    options: &PlanOptions,
) -> Result<IndexVec<NodeId, u64>, PlanError> {
    let body_options = PlanOptions {
        inputs_in_arena: false,
        outputs_in_arena: true,
        ..options.clone()
    };
    graph
        .nodes()
        .iter()
        .map(|node| {
            let bodies = node_workspace(node, &body_options)?;
            let scratch =
                crate::kernels::kernel_scratch(graph, node, &options.bindings, options.attention)?;
            bodies
                .checked_add(scratch)
                .ok_or_else(|| PlanError::Overflow {
                    what: format!("sizing the workspace of node `{}`", node.name),
                })
        })
        .collect()
}

fn node_workspace(node: &Node, body_options: &PlanOptions) -> Result<u64, PlanError> {
    let mut most: u64 = 0;
    for body in &node.bodies {
        let wrap = |e: PlanError| PlanError::Body {
            node: node.name.clone(),
            attr: body.attr.clone(),
            error: Box::new(e),
        };
        let plan = plan_graph(&body.graph, body_options).map_err(wrap)?;
        most = most.max(body_bytes(&plan, body_options).map_err(wrap)?);
    }
    Ok(most)
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
