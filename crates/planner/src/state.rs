//! Training state: which graph inputs are persistent (parameters, gradient buffers,
//! optimizer moments) and so belong in the persistent region, never in the arena.
//!
//! A training graph as ONNX Runtime generates it passes its parameters and their gradient
//! buffers as plain graph inputs; planned as inputs, their bytes would be reused after their
//! last read, and the next step would find its weights overwritten. [`mark_state`] makes
//! them [`TensorKind::State`], recognised by
//!
//! - ONNX Runtime's naming: an input `p` beside an input `p_grad.accumulation.buffer` (both
//!   are state);
//! - an op that writes the input in place, or a control-flow node whose body does, at any
//!   depth ([`memplan_ir::OpTable::updated_tensors`]), and the weight, gradient and moment
//!   inputs of ONNX Runtime's optimizer ops;
//! - a name matching one of the caller's patterns (`*` matches any
//!   run of characters, the rest literally).

use memplan_ir::{Graph, IndexVec, OpTable, TensorId, TensorKind};

/// ONNX Runtime's suffix of a parameter's gradient buffer.
pub const ORT_GRAD_BUFFER: &str = "_grad.accumulation.buffer";

/// Why an input is training state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum StateReason {
    /// ONNX Runtime's naming: a parameter or its gradient buffer.
    OrtNaming,
    /// An op writes it in place, or an optimizer op reads it as state.
    Updated,
    /// A name pattern the caller gave.
    Pattern,
}

/// Why a persistent-state pattern (given to [`mark_state`]) is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// A pattern no graph input matches.
    #[error("persistent-state pattern `{pattern}` matches no graph input of `{graph}`")]
    NoMatch {
        /// The pattern.
        pattern: String,
        /// The graph.
        graph: String,
    },
}

/// Whether `name` matches `pattern` (`*` any run of characters, everything else literal).
pub fn name_matches(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let Some((first, rest)) = parts.split_first() else {
        return pattern == name;
    };
    let Some(mut tail) = name.strip_prefix(first) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return tail.is_empty();
    };
    for part in middle {
        match tail.find(part) {
            Some(i) => tail = &tail[i + part.len()..],
            None => return false,
        }
    }
    tail.len() >= last.len() && tail.ends_with(last)
}

/// The optimizer inputs ONNX Runtime's optimizer ops read as state (weights, gradients,
/// moments), by position.
fn optimizer_state_inputs(op: &str) -> &'static [usize] {
    match op {
        "com.microsoft.AdamWOptimizer" => &[2, 3, 4, 5],
        "com.microsoft.SGDOptimizerV2" => &[1, 2],
        _ => &[],
    }
}

/// Makes the graph inputs that are training state [`TensorKind::State`] (see the module
/// docs); returns them, with why, in tensor id order. Nested bodies are left alone.
pub fn mark_state(
    graph: &mut Graph,
    table: &OpTable,
    patterns: &[String],
) -> Result<Vec<(TensorId, StateReason)>, StateError> {
    let mut reason: IndexVec<TensorId, Option<StateReason>> =
        IndexVec::from_elem(None, graph.tensors().len());
    let is_input = |g: &Graph, t: TensorId| g.tensor(t).kind == TensorKind::Input;
    for (t, tensor) in graph.tensors().iter_enumerated() {
        if tensor.kind != TensorKind::Input {
            continue;
        }
        let buffer = format!("{}{ORT_GRAD_BUFFER}", tensor.name);
        if let Some(b) = graph.find_tensor(&buffer)
            && is_input(graph, b)
        {
            reason[t] = Some(StateReason::OrtNaming);
            reason[b] = Some(StateReason::OrtNaming);
        }
    }
    for node in graph.nodes().iter() {
        let listed = optimizer_state_inputs(&node.op)
            .iter()
            .filter_map(|&pos| node.inputs.get(pos).copied().flatten());
        for t in table.updated_tensors(graph, node).into_iter().chain(listed) {
            if is_input(graph, t) {
                reason[t].get_or_insert(StateReason::Updated);
            }
        }
    }
    for pattern in patterns {
        let mut any = false;
        for (t, tensor) in graph.tensors().iter_enumerated() {
            if tensor.kind == TensorKind::Input && name_matches(pattern, &tensor.name) {
                reason[t].get_or_insert(StateReason::Pattern);
                any = true;
            }
        }
        if !any {
            return Err(StateError::NoMatch {
                pattern: pattern.clone(),
                graph: graph.name.clone(),
            });
        }
    }
    let marked: Vec<(TensorId, StateReason)> = reason
        .iter_enumerated()
        .filter_map(|(t, r)| Some((t, (*r)?)))
        .collect();
    for &(t, _) in &marked {
        graph.set_kind(t, TensorKind::State);
    }
    Ok(marked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        assert!(name_matches("fc*.weight", "fc0.weight"));
        assert!(name_matches("*", "x"));
        assert!(name_matches("*.bias", "fc.bias"));
        assert!(!name_matches("*.bias", "fc.bias2"));
        assert!(name_matches("a*b*c", "aXbYc"));
        assert!(!name_matches("a*b*c", "aXcYb"));
        assert!(name_matches("exact", "exact"));
        assert!(!name_matches("exact", "exactly"));
        assert!(name_matches("a**", "a"));
        assert!(!name_matches("ab*ba", "aba"));
    }
}
