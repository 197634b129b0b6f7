//! Captured values at any depth of nesting: [`Graph::complete_captures`].
//!
//! A body reads an outer value by having an input of the same name (see [`crate::Body`]).
//! When a body nested inside another body reads a value of a graph further out, every body
//! in between must pass it on (have it as an input of its own), and every node in between
//! must list it among its implicit inputs, or nothing keeps the value live until the
//! outermost of those nodes runs. The ONNX importer does this as it resolves names; a graph
//! written by hand (the JSON format) may leave the intermediate levels out, and
//! [`Graph::complete_captures`] adds them. Validation refuses what is still missing.

use crate::graph::{Graph, Tensor, TensorKind};

impl Graph {
    /// Completes the captures of every body at any depth: a body input named after a value
    /// of an enclosing graph is a captured value; each graph between that value's graph and
    /// the body gets an input of the same name (its dtype, shape and element count), and each
    /// node between lists the value among its implicit inputs. Inputs that name no outer
    /// value (a Loop's iteration number, say) are left alone.
    pub fn complete_captures(&mut self) {
        complete(self, &[]);
    }
}

/// Completes the bodies of `g`, which sits inside `scopes` (outermost first).
fn complete(g: &mut Graph, scopes: &[&Graph]) {
    for n in 0..g.nodes().len() {
        let id = crate::NodeId(u32::try_from(n).unwrap_or(u32::MAX));
        let mut bodies = std::mem::take(&mut g.node_mut(id).bodies);
        let mut captured = Vec::new();
        for body in &mut bodies {
            {
                let mut chain: Vec<&Graph> = scopes.to_vec();
                chain.push(g);
                complete(&mut body.graph, &chain);
            }
            for t in body.graph.tensors().iter() {
                if t.kind != TensorKind::Input {
                    continue;
                }
                if let Some(own) = g.find_tensor(&t.name) {
                    captured.push(own);
                    continue;
                }
                let outer = scopes
                    .iter()
                    .rev()
                    .find_map(|s| s.find_tensor(&t.name).map(|id| s.tensor(id)));
                if let Some(outer) = outer {
                    // Passed on by `g` itself: an input of `g`, which its own node captures
                    // in turn (the caller's loop sees it as a body input of `g`).
                    let own = g.add_tensor(Tensor {
                        name: outer.name.clone(),
                        dtype: outer.dtype,
                        shape: outer.shape.clone(),
                        kind: TensorKind::Input,
                        int_value: None,
                        element_count: outer.element_count.clone(),
                    });
                    captured.push(own);
                }
            }
        }
        let node = g.node_mut(id);
        node.bodies = bodies;
        node.implicit_inputs.extend(captured);
        node.implicit_inputs.sort_unstable();
        node.implicit_inputs.dedup();
    }
}
