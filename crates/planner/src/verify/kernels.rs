//! The verifier's own statement of the scratch a fused attention kernel needs, written from
//! the operator definitions (ONNX `Attention` of opset 23, ONNX Runtime's `Attention`,
//! `MultiHeadAttention` and `GroupQueryAttention`, memplan's fused `memplan.Attention`) and
//! sharing nothing with the planner's `kernels` module.
//!
//! The query attends to every key: the past's (a cache input) and the new ones. An eager
//! kernel holds one score per (batch, query head, query position, key position), in the
//! softmax's precision; a flash kernel one running maximum and one running sum, both `f32`,
//! per (batch, query head, query position). ONNX Runtime's `Attention` takes the unprojected
//! input and its packed weights, so its kernel also holds the projected Q, K and V:
//! `batch × seq × weights' width` elements of the input's dtype.

use memplan_ir::{Attr, Bindings, DType, Graph, Node, Tensor};

use crate::options::AttentionKernel;

/// One query's shape facts.
struct Shape {
    batch: u64,
    heads: u64,
    queries: u64,
    keys: u64,
    precision: DType,
    packed_projection: u64,
}

/// The scratch bytes a fused attention `node` needs with `kernel`: `None` for other ops, and
/// for an attention node whose sizes cannot be computed (its tensors' sizes are checked
/// elsewhere).
pub(crate) fn attention_need(
    graph: &Graph,
    node: &Node,
    bindings: &Bindings,
    kernel: AttentionKernel,
) -> Option<u64> {
    let s = shape(graph, node, bindings)?;
    let rows = s.batch.checked_mul(s.heads)?.checked_mul(s.queries)?;
    let scratch = match kernel {
        AttentionKernel::Eager => s.precision.bytes_for(rows.checked_mul(s.keys)?)?,
        AttentionKernel::Flash => rows.checked_mul(8)?,
    };
    scratch.checked_add(s.packed_projection)
}

/// Whether `op` is one of the fused attention ops.
pub(crate) fn is_fused_attention(op: &str) -> bool {
    matches!(
        op,
        "Attention"
            | "memplan.Attention"
            | "com.microsoft.Attention"
            | "com.microsoft.MultiHeadAttention"
            | "com.microsoft.GroupQueryAttention"
    )
}

/// A `memplan.Attention` node: one score per (query row, key). Its output holds one value
/// vector per query row, along axis `dv_axis`; K holds the keys along axis `kv_axis`.
fn fused(graph: &Graph, node: &Node, b: &Bindings, query: DType) -> Option<Shape> {
    let axis = |name: &str| usize::try_from(node.attr(name).and_then(Attr::as_int)?).ok();
    let y = graph.tensors().get(*node.outputs.first()?)?;
    let k = graph.tensors().get(node.inputs.get(1).copied()??)?;
    let value = y.shape.get(axis("dv_axis")?)?.eval(b).ok()?;
    let keys = k.shape.get(axis("kv_axis")?)?.eval(b).ok()?;
    let rows = y.elements(b).ok()?.checked_div(value)?;
    let precision = match node.attr("score_dtype").and_then(Attr::as_int) {
        Some(1) => DType::F32,
        Some(10) => DType::F16,
        Some(11) => DType::F64,
        Some(16) => DType::BF16,
        _ => query,
    };
    Some(Shape {
        batch: rows,
        heads: 1,
        queries: 1,
        keys,
        precision,
        packed_projection: 0,
    })
}

fn shape(graph: &Graph, node: &Node, b: &Bindings) -> Option<Shape> {
    if !is_fused_attention(&node.op) {
        return None;
    }
    let t = |i: usize| -> Option<&Tensor> { graph.tensors().get(node.inputs.get(i).copied()??) };
    let dims =
        |i: usize| -> Option<Vec<u64>> { t(i)?.shape.iter().map(|d| d.eval(b).ok()).collect() };
    let heads_attr = |name: &str| {
        node.attr(name)
            .and_then(Attr::as_int)
            .and_then(|h| u64::try_from(h).ok())
    };
    let q = t(0)?;
    if node.op == "memplan.Attention" {
        return fused(graph, node, b, q.dtype);
    }
    let qd = dims(0)?;
    // The past's length, from a cache input whose positions are on axis `axis`.
    let past = |i: usize, axis: usize| -> Option<u64> {
        match t(i) {
            None => Some(0),
            Some(_) => dims(i)?.get(axis).copied(),
        }
    };
    let mut s = Shape {
        batch: *qd.first()?,
        heads: 0,
        queries: *qd.get(1)?,
        keys: 0,
        precision: q.dtype,
        packed_projection: 0,
    };
    match node.op.as_str() {
        "Attention" => {
            let kd = dims(1)?;
            // 4-D tensors are [batch, heads, positions, size]; 3-D [batch, positions, width].
            let keys = if kd.len() == 4 {
                *kd.get(2)?
            } else {
                *kd.get(1)?
            };
            if qd.len() == 4 {
                s.heads = qd[1];
                s.queries = *qd.get(2)?;
            } else {
                s.heads = heads_attr("q_num_heads")?;
            }
            s.keys = keys.checked_add(past(4, 2)?)?;
            if let Some(code) = node.attr("softmax_precision").and_then(Attr::as_int) {
                s.precision = match code {
                    1 => DType::F32,
                    10 => DType::F16,
                    11 => DType::F64,
                    16 => DType::BF16,
                    _ => q.dtype,
                };
            }
        }
        "com.microsoft.Attention" => {
            s.heads = heads_attr("num_heads")?;
            // past: [2, batch, heads, past, size].
            s.keys = s.queries.checked_add(past(4, 3)?)?;
            let width: u64 = match node.attr("qkv_hidden_sizes").and_then(Attr::as_ints) {
                Some(sizes) => sizes
                    .iter()
                    .map(|&w| u64::try_from(w).ok())
                    .sum::<Option<u64>>()?,
                None => *dims(1)?.get(1)?,
            };
            let elements = s.batch.checked_mul(s.queries)?.checked_mul(width)?;
            s.packed_projection = q.dtype.bytes_for(elements)?;
        }
        "com.microsoft.MultiHeadAttention" => {
            s.heads = heads_attr("num_heads")?;
            s.keys = match t(1) {
                // Packed QKV in the query: the keys are the queries (and a past's).
                None => s.queries.checked_add(past(6, 2)?)?,
                // A BNSH key is the whole cache: no past is added to it.
                Some(k) if k.shape.len() == 4 => *dims(1)?.get(2)?,
                Some(_) => dims(1)?.get(1)?.checked_add(past(6, 2)?)?,
            };
        }
        "com.microsoft.GroupQueryAttention" => {
            s.heads = heads_attr("num_heads")?;
            s.keys = s.queries.checked_add(past(3, 2)?)?;
        }
        _ => return None,
    }
    Some(s)
}
