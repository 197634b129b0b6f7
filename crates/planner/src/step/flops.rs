//! FLOP estimates from shapes, to compare what recomputation costs: 2 per multiply-add for
//! matrix products and convolutions (MatMul, Gemm, FusedMatMul, Einsum's output times the
//! contracted size is not known, so Einsum counts per element), 2 × output elements × the
//! reduced length for MatMul-like ops, 2 × output elements × (input channels / group ×
//! kernel elements) for Conv (and the transpose for ConvTranspose); one per output element
//! and op of a fused element-wise region (`memplan.Pointwise`); one per output element for
//! every other op. Saturating: an estimate, never an error.

use memplan_ir::{Attr, Bindings, Graph, Node, TensorId};

fn elements(g: &Graph, t: TensorId, b: &Bindings) -> u64 {
    g.tensors()
        .get(t)
        .and_then(|x| x.elements(b).ok())
        .unwrap_or(0)
}

fn dim(g: &Graph, t: TensorId, i: usize, b: &Bindings) -> u64 {
    g.tensors()
        .get(t)
        .and_then(|x| x.shape.get(i))
        .and_then(|d| d.eval(b).ok())
        .unwrap_or(1)
}

fn rank(g: &Graph, t: TensorId) -> usize {
    g.tensors().get(t).map_or(0, |x| x.shape.len())
}

/// The FLOPs of `node`, estimated from shapes: 2 per multiply-add for matrix products and
/// convolutions, one per output element for every other op; saturating, never an error.
pub fn node_flops(g: &Graph, node: &Node, b: &Bindings) -> u64 {
    let out: u64 = node
        .outputs
        .iter()
        .map(|&o| elements(g, o, b))
        .fold(0, u64::saturating_add);
    let input = |i: usize| node.inputs.get(i).copied().flatten();
    let flag = |k: &str| node.attr(k).and_then(Attr::as_int).unwrap_or(0) != 0;
    match node.op.as_str() {
        "MatMul" | "com.microsoft.FusedMatMul" | "Gemm" => {
            // The contracted length: A's last dim (its first when transposed).
            let Some(a) = input(0) else { return out };
            let r = rank(g, a);
            let k = if flag("transA") && r >= 2 {
                dim(g, a, r - 2, b)
            } else {
                dim(g, a, r.saturating_sub(1), b)
            };
            out.saturating_mul(k).saturating_mul(2)
        }
        "Conv" => {
            let Some(w) = input(1) else { return out };
            let per_output = elements(g, w, b) / dim(g, w, 0, b).max(1);
            out.saturating_mul(per_output).saturating_mul(2)
        }
        "ConvTranspose" => {
            let (Some(x), Some(w)) = (input(0), input(1)) else {
                return out;
            };
            let per_input = elements(g, w, b) / dim(g, w, 0, b).max(1);
            elements(g, x, b)
                .saturating_mul(per_input)
                .saturating_mul(2)
        }
        // A fused element-wise region runs its ops one after another.
        "memplan.Pointwise" => {
            let ops = node.attr("memplan.ops").and_then(Attr::as_int).unwrap_or(1);
            out.saturating_mul(u64::try_from(ops).unwrap_or(1).max(1))
        }
        _ => out,
    }
}
