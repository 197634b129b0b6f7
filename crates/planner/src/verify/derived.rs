//! The verifier's own statement of which tensors a runtime computes from weights at load.
//!
//! Written from the definition, sharing nothing with the planner's `folding` module: a tensor
//! is computed at load when the node that makes it reads at least one tensor and every tensor
//! it reads (listed or captured by a body) is a weight or itself computed at load and is not
//! written in place by any node (an optimizer's weight is new every step), when that
//! node runs no body and gives the same result on every run (no random op, no dropout, no
//! training op) and is not marked to run where it is used (`memplan.at_use`: a copy made
//! so that its output lives only there), and when none of that node's outputs is a graph output or written in place.
//! It is decided by following producers (memoised; the graph is valid, so producers form no
//! cycle).

use memplan_ir::{Graph, IndexVec, NodeId, TensorId, TensorKind};

/// Ops whose outputs change from run to run: the random ones (`RandomNormal`,
/// `RandomUniformLike`, ...), `Multinomial`, `Bernoulli`, every dropout (`Dropout`,
/// `BiasDropout`) and the training domains' ops.
fn random(op: &str) -> bool {
    let name = op.rsplit('.').next().unwrap_or(op);
    matches!(name, "Multinomial" | "Bernoulli")
        || name.starts_with("Random")
        || name.contains("Dropout")
        || op.contains("training")
}

/// Which tensors of `graph` are computed at load.
pub(crate) fn computed_at_load(graph: &Graph) -> IndexVec<TensorId, bool> {
    let producers = graph.producers();
    // Tensors some node writes in place (an optimizer step's weight, an accumulator's
    // buffer, a value a control-flow body updates): they change from step to step, so they are no constants.
    let mut updated: IndexVec<TensorId, bool> = IndexVec::from_elem(false, graph.tensors().len());
    for node in graph.nodes().iter() {
        for t in super::rules::updates(graph, node) {
            updated[t] = true;
        }
    }
    let mut memo: IndexVec<NodeId, Option<bool>> = IndexVec::from_elem(None, graph.nodes().len());
    let mut out: IndexVec<TensorId, bool> = IndexVec::from_elem(false, graph.tensors().len());
    for (t, p) in producers.iter_enumerated() {
        if let Some(p) = *p {
            out[t] = at_load(graph, &producers, &updated, &mut memo, p);
        }
    }
    out
}

/// Whether node `n` runs at load, deciding its producers first (an explicit stack, so a long
/// chain cannot overflow the call stack).
fn at_load(
    graph: &Graph,
    producers: &IndexVec<TensorId, Option<NodeId>>,
    updated: &IndexVec<TensorId, bool>,
    memo: &mut IndexVec<NodeId, Option<bool>>,
    n: NodeId,
) -> bool {
    let mut stack = vec![n];
    while let Some(&top) = stack.last() {
        if memo[top].is_some() {
            stack.pop();
            continue;
        }
        let node = &graph.nodes()[top];
        // Producers of what it reads that are not decided yet go first.
        let pending: Vec<NodeId> = node
            .present_inputs()
            .filter_map(|t| producers.get(t).copied().flatten())
            .filter(|&p| memo[p].is_none())
            .collect();
        if !pending.is_empty() {
            stack.extend(pending);
            continue;
        }
        let reads: Vec<TensorId> = node.present_inputs().collect();
        let yes = !reads.is_empty()
            && node.bodies.is_empty()
            && !random(&node.op)
            && node.attr("memplan.at_use").is_none()
            && node
                .outputs
                .iter()
                .all(|&o| graph.tensors()[o].kind == TensorKind::Activation && !updated[o])
            && reads.iter().all(|&t| {
                !updated[t]
                    && (graph.tensors()[t].kind == TensorKind::Weight
                        || producers[t].is_some_and(|p| memo[p] == Some(true)))
            });
        memo[top] = Some(yes);
        stack.pop();
    }
    memo[n] == Some(true)
}
