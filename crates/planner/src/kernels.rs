//! Kernel scratch: the memory a fused op's kernel needs while it runs, beyond its outputs.
//!
//! The fused attention ops (ONNX's `Attention`, opset 23, ONNX Runtime's
//! `com.microsoft.Attention`, `MultiHeadAttention` and `GroupQueryAttention`, and
//! `memplan.Attention`, which the `attention` fusion makes) compute `softmax(Q·Kᵀ)·V` in one
//! node. How much scratch that takes depends on the kernel
//! ([`AttentionKernel`]):
//!
//! - **eager** materialises the scores: `batch × q_heads × q_len × kv_len` elements in the
//!   score dtype (the softmax precision ONNX's `Attention` names in `softmax_precision`, else
//!   the query's dtype), softmax in place, then `P·V`;
//! - **flash** streams over key blocks and keeps per-row statistics only: a running max and
//!   sum per query row, `batch × q_heads × q_len × 2` `f32` values.
//!
//! A `memplan.Attention` node's query rows are its output's elements over the value size
//! (its axis `dv_axis`), its keys axis `kv_axis` of K, its score dtype `score_dtype` (an ONNX
//! type code) or the query's.
//!
//! `kv_len` counts the past: a cache's length plus the new keys (a shared cache buffer's own
//! length plus the new keys: an upper bound). ONNX Runtime's `Attention` also projects its
//! input to Q, K and V itself, into `batch × seq × (q + k + v)` elements of scratch, whatever
//! the kernel. The scratch is the node's workspace: live at its step only, in the arena.
//! The plan verifier states these sizes again on its own (`verify::kernels`).

use memplan_ir::{Attr, Bindings, DType, Graph, Node, NodeId, SizeError};

use crate::error::{NodeFault, PlanError};
use crate::options::AttentionKernel;

/// The fused attention ops, whose kernels need scratch (`Op`, or `domain.Op`).
pub const FUSED_ATTENTION_OPS: &[&str] = &[
    "Attention",
    "memplan.Attention",
    "com.microsoft.Attention",
    "com.microsoft.GroupQueryAttention",
    "com.microsoft.MultiHeadAttention",
];

/// The scratch bytes `node` (node `id`)'s kernel needs under `kernel` (0 for ops with none).
pub(crate) fn kernel_scratch(
    graph: &Graph,
    id: NodeId,
    node: &Node,
    bindings: &Bindings,
    kernel: AttentionKernel,
) -> Result<u64, PlanError> {
    let Some(a) = attention_dims(graph, id, node, bindings)? else {
        return Ok(0);
    };
    let overflow = || PlanError::Overflow {
        what: format!("sizing the attention scratch of node `{}`", node.name),
    };
    let rows = a
        .batch
        .checked_mul(a.heads)
        .and_then(|r| r.checked_mul(a.q_len))
        .ok_or_else(overflow)?;
    let scores = match kernel {
        AttentionKernel::Eager => rows
            .checked_mul(a.kv_len)
            .and_then(|n| a.score_dtype.bytes_for(n)),
        AttentionKernel::Flash => rows.checked_mul(2).and_then(|n| DType::F32.bytes_for(n)),
    }
    .ok_or_else(overflow)?;
    scores.checked_add(a.projection).ok_or_else(overflow)
}

/// What sizes one fused attention node's scratch.
struct AttentionDims {
    batch: u64,
    /// Query heads.
    heads: u64,
    q_len: u64,
    /// Keys attended to: the past's and the new ones.
    kv_len: u64,
    score_dtype: DType,
    /// Bytes of Q, K and V the op projects itself (ONNX Runtime's `Attention`), else 0.
    projection: u64,
}

/// The dims of a fused attention node, `None` for any other op.
fn attention_dims(
    graph: &Graph,
    id: NodeId,
    node: &Node,
    b: &Bindings,
) -> Result<Option<AttentionDims>, PlanError> {
    if !FUSED_ATTENTION_OPS.contains(&node.op.as_str()) {
        return Ok(None);
    }
    let input = |i: usize| node.inputs.get(i).copied().flatten();
    let tensor = |i: usize| input(i).and_then(|t| graph.tensors().get(t));
    // Dim `d` of input `i` (0 when the input is absent).
    let dim = |i: usize, d: usize| -> Result<u64, PlanError> {
        let (Some(ti), Some(t)) = (input(i), tensor(i)) else {
            return Ok(0);
        };
        let e = t.shape.get(d).ok_or_else(|| PlanError::BadNode {
            node: id,
            op: node.op.clone(),
            reason: Box::new(NodeFault::RankTooLow {
                input: i,
                tensor: ti,
                rank: t.shape.len(),
            }),
        })?;
        e.eval(b)
            .map_err(|e| PlanError::no_size(graph, ti, SizeError::of_dim(e, d)))
    };
    let rank = |i: usize| tensor(i).map_or(0, |t| t.shape.len());
    let int_attr = |name: &str| -> u64 {
        node.attr(name)
            .and_then(Attr::as_int)
            .and_then(|v| u64::try_from(v).ok())
            .unwrap_or(0)
    };
    // The past's length: axis `axis` of input `i`, 0 without one.
    let past = |i: usize, axis: usize| {
        if input(i).is_some() {
            dim(i, axis)
        } else {
            Ok(0)
        }
    };
    let Some(query) = tensor(0) else {
        return Ok(None);
    };
    if node.op == "memplan.Attention" {
        return fused_dims(graph, id, node, b, query.dtype).map(Some);
    }
    let seq = dim(0, 1)?;
    // Per op: (query heads, query positions, past positions, new keys, score dtype).
    let (heads, q_len, past, new, score_dtype) = match node.op.as_str() {
        "Attention" => {
            // Q: [batch, heads, q, size] or [batch, q, heads * size] with `q_num_heads`.
            let (heads, q_len) = if rank(0) == 4 {
                (seq, dim(0, 2)?)
            } else {
                (int_attr("q_num_heads"), seq)
            };
            let new = if rank(1) == 4 { dim(1, 2)? } else { dim(1, 1)? };
            let score_dtype = node
                .attr("softmax_precision")
                .and_then(Attr::as_int)
                .and_then(float_dtype)
                .unwrap_or(query.dtype);
            (heads, q_len, past(4, 2)?, new, score_dtype)
        }
        // Input [batch, seq, in] times weights [in, q + k + v]; past [2, batch, heads, past,
        // size].
        "com.microsoft.Attention" => (int_attr("num_heads"), seq, past(4, 3)?, seq, query.dtype),
        "com.microsoft.MultiHeadAttention" => {
            // Query [batch, seq, D] or packed [batch, seq, heads, 3, size]; key absent
            // (packed), [batch, kv, D], a BNSH cache [batch, heads, kv, size] (no past then)
            // or packed KV [batch, kv, heads, 2, size]; past key [batch, heads, past, size].
            let (new, past) = match (input(1).is_some(), rank(1)) {
                (false, _) => (seq, past(6, 2)?),
                (true, 4) => (dim(1, 2)?, 0),
                (true, _) => (dim(1, 1)?, past(6, 2)?),
            };
            (int_attr("num_heads"), seq, past, new, query.dtype)
        }
        // Query [batch, seq, D]; past key [batch, kv_heads, past, size] (a shared buffer
        // keeps its length: past + seq bounds it either way).
        _ => (int_attr("num_heads"), seq, past(3, 2)?, seq, query.dtype),
    };
    let projection = if node.op == "com.microsoft.Attention" {
        let widths = match node.attr("qkv_hidden_sizes").and_then(Attr::as_ints) {
            Some(list) => list
                .iter()
                .try_fold(0u64, |acc, &w| acc.checked_add(u64::try_from(w).ok()?)),
            None => Some(dim(1, 1)?),
        };
        widths
            .and_then(|w| dim(0, 0).ok()?.checked_mul(seq)?.checked_mul(w))
            .and_then(|n| query.dtype.bytes_for(n))
            .ok_or_else(|| PlanError::Overflow {
                what: format!("sizing the projections of node `{}`", node.name),
            })?
    } else {
        0
    };
    Ok(Some(AttentionDims {
        batch: dim(0, 0)?,
        heads,
        q_len,
        kv_len: past.checked_add(new).ok_or_else(|| PlanError::Overflow {
            what: format!("adding the past of node `{}`", node.name),
        })?,
        score_dtype,
        projection,
    }))
}

/// The dims of a `memplan.Attention` node (made by the `attention` fusion): its query rows
/// are the output's elements over its value size (axis `dv_axis`), its keys axis `kv_axis`
/// of K (input 1); its scores in `score_dtype`, else the query's dtype.
fn fused_dims(
    graph: &Graph,
    id: NodeId,
    node: &Node,
    b: &Bindings,
    query: DType,
) -> Result<AttentionDims, PlanError> {
    let bad = |reason: NodeFault| PlanError::BadNode {
        node: id,
        op: node.op.clone(),
        reason: Box::new(reason),
    };
    let axis_dim =
        |t: Option<memplan_ir::TensorId>, attr: &'static str| -> Result<u64, PlanError> {
            let (ti, t) = t
                .and_then(|t| Some((t, graph.tensors().get(t)?)))
                .ok_or_else(|| bad(NodeFault::NoTensorFor { attr }))?;
            let axis = node
                .attr(attr)
                .and_then(Attr::as_int)
                .and_then(|a| usize::try_from(a).ok())
                .ok_or_else(|| bad(NodeFault::NoAttribute { attr }))?;
            let d = t.shape.get(axis).ok_or_else(|| {
                bad(NodeFault::AxisPastRank {
                    attr,
                    axis,
                    tensor: ti,
                })
            })?;
            d.eval(b)
                .map_err(|e| PlanError::no_size(graph, ti, SizeError::of_dim(e, axis)))
        };
    let y = node.outputs.first().copied();
    let dv = axis_dim(y, "dv_axis")?;
    let kv_len = axis_dim(node.inputs.get(1).copied().flatten(), "kv_axis")?;
    let (yi, out) = y
        .and_then(|y| Some((y, graph.tensors().get(y)?)))
        .ok_or_else(|| bad(NodeFault::NoOutput))?;
    let elements = out
        .elements(b)
        .map_err(|e| PlanError::no_size(graph, yi, e))?;
    let rows = elements.checked_div(dv).unwrap_or(0);
    Ok(AttentionDims {
        batch: rows,
        heads: 1,
        q_len: 1,
        kv_len,
        score_dtype: node
            .attr("score_dtype")
            .and_then(Attr::as_int)
            .and_then(float_dtype)
            .unwrap_or(query),
        projection: 0,
    })
}

/// The floating-point dtype of an ONNX `TensorProto.DataType` code, if it is one.
fn float_dtype(code: i64) -> Option<DType> {
    Some(match code {
        1 => DType::F32,
        10 => DType::F16,
        11 => DType::F64,
        16 => DType::BF16,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use memplan_ir::{Attr, Bindings, DType, GraphBuilder, TensorId, TensorKind};

    use super::*;

    fn shape(dims: &[i64]) -> memplan_ir::Shape {
        dims.iter()
            .map(|&d| memplan_ir::Expr::constant(d))
            .collect()
    }

    /// One fused attention node of `op` with query `q`, key `k` (or none) and a past of
    /// `past` positions (or none), in `dtype`.
    fn node(
        op: &str,
        q: &[i64],
        k: Option<&[i64]>,
        past: Option<(usize, Vec<i64>)>,
        dtype: DType,
        attrs: &[(&str, Attr)],
    ) -> Graph {
        let mut g = GraphBuilder::new("attention");
        let qt = g.input("q", dtype, shape(q));
        let kt = k.map(|k| g.input("k", dtype, shape(k)));
        let mut inputs: Vec<Option<TensorId>> = vec![Some(qt), kt, kt];
        if op == "com.microsoft.Attention" {
            // Input, weights [in, q + k + v], bias.
            let w = g.weight("w", dtype, [*q.last().unwrap(), 3 * 64]);
            inputs = vec![Some(qt), Some(w), None];
        }
        if let Some((at, shape)) = past {
            inputs.resize(at, None);
            inputs.push(Some(g.input("past", dtype, self::shape(&shape))));
        }
        let y = g.tensor("y", dtype, [1], TensorKind::Output);
        g.node("n", op, &inputs, &[y]);
        for (name, value) in attrs {
            g.attr(name, value.clone());
        }
        g.build_unchecked()
    }

    #[test]
    fn the_planner_and_the_verifier_agree_on_attention_scratch() {
        let heads = |n: i64| ("num_heads", Attr::Int(n));
        let cases = vec![
            node(
                "Attention",
                &[2, 4, 8, 16],
                Some(&[2, 4, 8, 16]),
                None,
                DType::F32,
                &[],
            ),
            node(
                "Attention",
                &[2, 8, 64],
                Some(&[2, 5, 32]),
                Some((4, vec![2, 2, 11, 16])),
                DType::F16,
                &[
                    ("q_num_heads", Attr::Int(4)),
                    ("kv_num_heads", Attr::Int(2)),
                ],
            ),
            node(
                "Attention",
                &[1, 2, 3, 8],
                Some(&[1, 2, 3, 8]),
                None,
                DType::BF16,
                &[("softmax_precision", Attr::Int(1))],
            ),
            node(
                "com.microsoft.Attention",
                &[2, 7, 48],
                None,
                Some((4, vec![2, 2, 4, 9, 16])),
                DType::F16,
                &[heads(4)],
            ),
            node(
                "com.microsoft.Attention",
                &[2, 7, 48],
                None,
                None,
                DType::F32,
                &[heads(4), ("qkv_hidden_sizes", Attr::Ints(vec![64, 64, 32]))],
            ),
            node(
                "com.microsoft.MultiHeadAttention",
                &[2, 6, 32],
                Some(&[2, 10, 32]),
                Some((6, vec![2, 4, 5, 8])),
                DType::F32,
                &[heads(4)],
            ),
            node(
                "com.microsoft.MultiHeadAttention",
                &[2, 6, 32],
                Some(&[2, 4, 10, 8]),
                Some((6, vec![2, 4, 5, 8])),
                DType::F32,
                &[heads(4)],
            ),
            node(
                "com.microsoft.MultiHeadAttention",
                &[2, 6, 4, 3, 8],
                None,
                None,
                DType::F16,
                &[heads(4)],
            ),
            node(
                "com.microsoft.MultiHeadAttention",
                &[2, 6, 4, 3, 8],
                None,
                Some((6, vec![2, 4, 3, 8])),
                DType::F16,
                &[heads(4)],
            ),
            node(
                "com.microsoft.GroupQueryAttention",
                &[1, 5, 64],
                Some(&[1, 5, 32]),
                Some((3, vec![1, 2, 7, 16])),
                DType::F16,
                &[heads(4), ("kv_num_heads", Attr::Int(2))],
            ),
            node("Relu", &[4], None, None, DType::F32, &[]),
        ];
        let b = Bindings::new();
        for g in &cases {
            let n = g.nodes().iter().next().unwrap();
            for kernel in [AttentionKernel::Eager, AttentionKernel::Flash] {
                let planner = kernel_scratch(g, NodeId(0), n, &b, kernel).unwrap();
                let verifier = crate::verify::kernels::attention_need(g, n, &b, kernel);
                assert_eq!(
                    Some(planner).filter(|&s| s > 0),
                    verifier,
                    "{} {kernel:?}",
                    n.op
                );
            }
        }
        // memplan's fused attention: output [2, 6, 3, 8] (batch, queries, heads, value size),
        // K [2, 1, 9, 8] (one key-value head, 9 keys on axis 2), f16 scores in f32.
        let mut fb = GraphBuilder::new("fused");
        let q = fb.input("q", DType::F16, shape(&[2, 3, 6, 8]));
        let k = fb.input("k", DType::F16, shape(&[2, 1, 9, 8]));
        let v = fb.input("v", DType::F16, shape(&[2, 1, 9, 8]));
        let y = fb.tensor("y", DType::F16, shape(&[2, 6, 3, 8]), TensorKind::Output);
        fb.node(
            "attention",
            "memplan.Attention",
            &[Some(q), Some(k), Some(v)],
            &[y],
        );
        fb.attr("kv_axis", Attr::Int(2))
            .attr("dv_axis", Attr::Int(3))
            .attr("score_dtype", Attr::Int(1));
        let fused = fb.build_unchecked();
        let n = fused.nodes().iter().next().unwrap();
        let rows = 2 * 6 * 3;
        for (kernel, want) in [
            (AttentionKernel::Eager, rows * 9 * 4),
            (AttentionKernel::Flash, rows * 8),
        ] {
            assert_eq!(
                kernel_scratch(&fused, NodeId(0), n, &b, kernel).unwrap(),
                want
            );
            assert_eq!(
                crate::verify::kernels::attention_need(&fused, n, &b, kernel),
                Some(want)
            );
        }
        // One by hand: GroupQueryAttention, 1 x 4 heads x 5 queries x (7 + 5) keys, f16.
        let gqa = &cases[9];
        let n = gqa.nodes().iter().next().unwrap();
        assert_eq!(
            kernel_scratch(gqa, NodeId(0), n, &b, AttentionKernel::Eager).unwrap(),
            4 * 5 * 12 * 2
        );
        // ONNX Runtime's Attention: 2 x 4 x 7 x (9 + 7) f16 scores and 2 x 7 x 192 f16
        // projections.
        let ort = &cases[3];
        let n = ort.nodes().iter().next().unwrap();
        assert_eq!(
            kernel_scratch(ort, NodeId(0), n, &b, AttentionKernel::Eager).unwrap(),
            2 * 4 * 7 * 16 * 2 + 2 * 7 * 192 * 2
        );
    }
}
