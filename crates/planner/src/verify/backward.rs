//! The verifier's own statement of what a training step's backward must read of the
//! forward pass, written from the gradient definitions (ONNX Runtime's gradient builder,
//! PyTorch's `derivatives.yaml`) and sharing no code or table with the planner's backward
//! rules (`step/rules.rs`).
//!
//! A backward node names its forward node (attribute `memplan.grad_of`) and the forward
//! inputs whose gradients it computes (`memplan.wrt`); a recompute node names the forward
//! node it runs again (`memplan.recompute_of`), its outputs standing for that node's. For
//! each forward node with backward nodes and each input `i` they differentiate, the
//! backward nodes computing `i`'s gradient must together read every tensor the gradient
//! needs (or its recomputed copy): a plan of a step that forgot one would free a tensor
//! the real backward still reads. Graphs without these attributes have nothing to check.

use std::collections::BTreeMap;

use memplan_ir::{Attr, IndexVec, Node, NodeId, TensorId};

use super::{Checker, PlanViolation};

/// A tensor of the forward node: its input or output at a position.
#[derive(Clone, Copy)]
enum Role {
    In(usize),
    Out(usize),
    /// An index input: it, or the smaller index an `Expand` broadcast into it (PyTorch's
    /// gradient reads the index as the stride-0 view `expand` makes, never a copy).
    Index(usize),
}

/// What the gradient of input `i` of `node` reads: groups of alternatives, one of each
/// group at least.
fn required(node: &Node, i: usize) -> Vec<Vec<Role>> {
    use Role::{In, Index, Out};
    let one = |r: Role| vec![vec![r]];
    match (node.op.as_str(), i) {
        // d(AB)/dA = dY B^T, d/dB = A^T dY; a convolution's likewise.
        ("MatMul" | "Gemm" | "com.microsoft.FusedMatMul" | "Conv" | "ConvTranspose", 0) => {
            one(In(1))
        }
        ("MatMul" | "Gemm" | "com.microsoft.FusedMatMul" | "Conv" | "ConvTranspose", 1) => {
            one(In(0))
        }
        ("Relu", 0) => vec![vec![Out(0), In(0)]],
        // dX = dY where X > 0, else alpha dY: Y's sign is X's only for a slope of 0 or more
        // (alpha < 0 makes Y > 0 on both sides).
        ("LeakyRelu", 0) if slope(node) >= 0.0 => vec![vec![Out(0), In(0)]],
        ("LeakyRelu", 0) => one(In(0)),
        // dX = dY where min < X < max: X and the bounds given as inputs.
        ("Clip", 0) => vec![vec![In(0)], vec![In(1)], vec![In(2)]],
        // Y = log(sum X): dX = dY / sum X = dY exp(-Y).
        ("ReduceLogSum", 0) => vec![vec![Out(0), In(0)]],
        (
            "Elu" | "Selu" | "Celu" | "Softplus" | "Softsign" | "HardSigmoid" | "HardSwish"
            | "Mish" | "Swish" | "ThresholdedRelu" | "Shrink" | "Asin" | "Acos" | "Atan" | "Sinh"
            | "Cosh" | "Asinh" | "Acosh" | "Atanh",
            0,
        ) => one(In(0)),
        ("Reciprocal" | "Tan", 0) => vec![vec![Out(0), In(0)]],
        ("Pow" | "PRelu", 0 | 1) => vec![vec![In(0)], vec![In(1)]],
        (
            "Gelu"
            | "com.microsoft.Gelu"
            | "com.microsoft.FastGelu"
            | "Erf"
            | "Log"
            | "Sin"
            | "Cos"
            | "Abs"
            // A fused element-wise region: a function of its one input.
            | "memplan.Pointwise",
            0,
        ) => one(In(0)),
        ("Tanh" | "Sigmoid" | "Exp" | "Sqrt" | "Softmax" | "LogSoftmax", 0) => one(Out(0)),
        // Layer norm: X, scale, and the saved mean and inverse standard deviation.
        ("LayerNormalization", 0) => vec![vec![In(0)], vec![In(1)], vec![Out(1)], vec![Out(2)]],
        ("LayerNormalization", 1) => vec![vec![In(0)], vec![Out(1)], vec![Out(2)]],
        // Batch norm in training: X, scale, the batch's saved mean and inverse std-dev.
        ("BatchNormalization" | "com.microsoft.BatchNormInternal", 0) => {
            vec![vec![In(0)], vec![In(1)], vec![Out(3)], vec![Out(4)]]
        }
        ("BatchNormalization" | "com.microsoft.BatchNormInternal", 1) => {
            vec![vec![In(0)], vec![Out(3)], vec![Out(4)]]
        }
        ("Mul", 0) => one(In(1)),
        ("Mul", 1) => one(In(0)),
        // d(A/B)/dA = dY / B; d/dB = -dY A / B^2.
        ("Div", 0) => one(In(1)),
        ("Div", 1) => vec![vec![In(0)], vec![In(1)]],
        ("GatherElements", 0) => one(Index(1)),
        ("Gather" | "GatherND", 0) => one(In(1)),
        ("Where", 1 | 2) => one(In(0)),
        ("MaxPool" | "Dropout" | "TopK", 0) => one(Out(1)),
        // The extreme input: where it equals the output.
        ("Max" | "Min", i) if node.inputs.len() > 1 => vec![vec![In(i)], vec![Out(0)]],
        ("ScatterElements", 0 | 2) => one(Index(1)),
        ("ScatterND", 0 | 2) => one(In(1)),
        // A rotation back by the cached angles at the positions (ONNX: X, cos, sin,
        // positions; ONNX Runtime: X, positions, cos, sin); a cache's gradient is dY times
        // X gathered at the positions.
        ("RotaryEmbedding" | "com.microsoft.RotaryEmbedding", 0) => {
            vec![vec![In(1)], vec![In(2)], vec![In(3)]]
        }
        ("RotaryEmbedding", 1 | 2) => vec![vec![In(0)], vec![In(3)]],
        ("com.microsoft.RotaryEmbedding", 2 | 3) => vec![vec![In(0)], vec![In(1)]],
        // softmax(QKᵀ)V: every gradient needs Q, K and V (V through dP = dY Vᵀ).
        ("Attention" | "memplan.Attention", 0..=3) => vec![vec![In(0)], vec![In(1)], vec![In(2)]],
        // A product added into a residual: the product's operands as the product's; the
        // residual's gradient is dY alone.
        (
            "memplan.ConvAdd"
            | "memplan.ConvTransposeAdd"
            | "memplan.GemmAdd"
            | "memplan.MatMulAdd",
            1,
        ) => one(In(2)),
        (
            "memplan.ConvAdd"
            | "memplan.ConvTransposeAdd"
            | "memplan.GemmAdd"
            | "memplan.MatMulAdd",
            2,
        ) => one(In(1)),
        // act(X + bias): both gradients need X and the bias.
        ("memplan.BiasAct", 0 | 1) => vec![vec![In(0)], vec![In(1)]],
        ("QuickGelu" | "com.microsoft.QuickGelu", 0) => one(In(0)),
        ("SoftmaxCrossEntropyLoss", 0) => vec![vec![Out(1)], vec![In(1)]],
        _ => Vec::new(),
    }
}

/// LeakyRelu's `alpha` (ONNX's default 0.01).
fn slope(node: &Node) -> f64 {
    match node.attr("alpha") {
        Some(Attr::Float(a)) => *a,
        Some(Attr::Int(a)) => *a as f64,
        _ => 0.01,
    }
}

fn text<'a>(node: &'a Node, name: &str) -> Option<&'a str> {
    match node.attr(name) {
        Some(Attr::Str(s)) => Some(s.as_str()),
        _ => None,
    }
}

impl Checker<'_> {
    /// Invariant: each backward node group reads what its gradients need (module docs).
    pub(super) fn check_backward(&mut self) {
        let g = self.graph;
        if !g
            .nodes()
            .iter()
            .any(|n| text(n, "memplan.grad_of").is_some())
        {
            return;
        }
        let by_name: BTreeMap<&str, NodeId> = g
            .nodes()
            .iter_enumerated()
            .map(|(id, n)| (n.name.as_str(), id))
            .collect();
        // A recomputed copy stands for the tensor it copies.
        let mut original: IndexVec<TensorId, TensorId> =
            g.tensors().iter_enumerated().map(|(t, _)| t).collect();
        for node in g.nodes().iter() {
            let Some(of) = text(node, "memplan.recompute_of").and_then(|n| by_name.get(n)) else {
                continue;
            };
            for (&copy, &orig) in node.outputs.iter().zip(&g.node(*of).outputs) {
                original[copy] = orig;
            }
        }
        // Per (forward node, input): the tensors its backward nodes read.
        let mut reads: BTreeMap<(NodeId, usize), Vec<TensorId>> = BTreeMap::new();
        for node in g.nodes().iter() {
            let Some(&fwd) = text(node, "memplan.grad_of").and_then(|n| by_name.get(n)) else {
                continue;
            };
            let Some(Attr::Ints(wrt)) = node.attr("memplan.wrt") else {
                continue;
            };
            for &i in wrt {
                let Ok(i) = usize::try_from(i) else { continue };
                let entry = reads.entry((fwd, i)).or_default();
                entry.extend(node.present_inputs().map(|t| original[t]));
            }
        }
        let producers = g.producers();
        for ((fwd, i), read) in reads {
            let node = g.node(fwd);
            for group in required(node, i) {
                let tensors = |r: Role| -> Vec<TensorId> {
                    match r {
                        Role::In(k) => node.inputs.get(k).copied().flatten().into_iter().collect(),
                        Role::Out(k) => node.outputs.get(k).copied().into_iter().collect(),
                        Role::Index(k) => {
                            let Some(x) = node.inputs.get(k).copied().flatten() else {
                                return Vec::new();
                            };
                            let source = producers[x]
                                .map(|p| g.node(p))
                                .filter(|p| p.op == "Expand")
                                .and_then(|p| p.inputs.first().copied().flatten());
                            std::iter::once(x).chain(source).collect()
                        }
                    }
                };
                let present: Vec<TensorId> = group.iter().flat_map(|&r| tensors(r)).collect();
                if present.is_empty() || present.iter().any(|t| read.contains(t)) {
                    continue;
                }
                self.out.push(PlanViolation::BackwardMissesSaved {
                    forward: fwd,
                    input: i,
                    tensor: present[0],
                });
            }
        }
    }
}
