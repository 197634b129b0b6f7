//! ONNX Runtime's `com.microsoft` contrib ops that optimised transformer exports use:
//! `Attention`, `MultiHeadAttention`, `GroupQueryAttention`, the fused normalizations
//! (`SkipLayerNormalization`, `SkipSimplifiedLayerNormalization`, and
//! `SimplifiedLayerNormalization`, which ONNX Runtime registers in the default domain), the
//! fused activations (`BiasGelu`, `FastGelu`, `QuickGelu`, `Gelu`), `FusedMatMul`,
//! `RotaryEmbedding`, `EmbedLayerNormalization` (BERT's embeddings, fused), and the 4-bit
//! weight ops `MatMulNBits` and `GatherBlockQuantized`.
//!
//! Shapes follow ONNX Runtime's operator documentation (`docs/ContribOperators.md`): packed
//! `[batch, seq, heads * head_size]` activations, BNSH key/value caches, a present cache of
//! `past + new` positions. A GroupQueryAttention cache whose length is the runtime
//! `total_sequence_length` is a data-dependent dim, at most `past + new` (a shared buffer keeps
//! the past's length, a growing one adds the new positions).

use memplan_ir::{DType, Expr, Shape};

use super::{Ctx, Dim, InferError, Input, Output, Quantity, Ranks, Res, add, mul};

/// Contrib ops ONNX Runtime registers in the default domain.
pub(super) fn infer_default(op: &str, ctx: &Ctx<'_>) -> Res<Option<Vec<Output>>> {
    match op {
        "SimplifiedLayerNormalization" => infer(op, ctx),
        _ => Ok(None),
    }
}

/// The `com.microsoft` ops memplan knows.
pub(super) fn infer(op: &str, ctx: &Ctx<'_>) -> Res<Option<Vec<Output>>> {
    let out = match op {
        "BiasGelu" | "FastGelu" | "QuickGelu" | "Gelu" | "RotaryEmbedding" => {
            let x = ctx.input(0)?;
            vec![Output::new(x.dtype, x.shape.clone())]
        }
        "SkipLayerNormalization" | "SkipSimplifiedLayerNormalization" => {
            let x = ctx.input(0)?;
            let stats = memplan_ir::ones_from(x.shape, x.shape.len().saturating_sub(1));
            vec![
                Output::new(x.dtype, x.shape.clone()),
                Output::new(DType::F32, stats.clone()),
                Output::new(DType::F32, stats),
                Output::new(x.dtype, x.shape.clone()),
            ]
        }
        "SimplifiedLayerNormalization" => {
            let x = ctx.input(0)?;
            let axis = super::norm_axis(ctx.attrs.int_or("axis", -1), x.shape.len())?;
            let stash =
                super::elementwise::dtype_attr("stash_type", ctx.attrs.int_or("stash_type", 1))?;
            vec![
                Output::new(x.dtype, x.shape.clone()),
                Output::new(stash, memplan_ir::ones_from(x.shape, axis)),
            ]
        }
        "FusedMatMul" => {
            let (a, b) = (ctx.input(0)?, ctx.input(1)?);
            let a_shape = transposed(
                a.shape,
                ctx.attrs.int_or("transBatchA", 0) != 0,
                ctx.attrs.int_or("transA", 0) != 0,
            );
            let b_shape = transposed(
                b.shape,
                ctx.attrs.int_or("transBatchB", 0) != 0,
                ctx.attrs.int_or("transB", 0) != 0,
            );
            vec![Output::new(
                a.dtype,
                super::nn::matmul(ctx, [a.name, b.name], &a_shape, &b_shape)?,
            )]
        }
        "MatMulNBits" => {
            let a = ctx.input(0)?;
            let n = ctx.required_int("N")?;
            let mut shape = a.shape.clone();
            match shape.last_mut() {
                Some(last) => *last = Expr::constant(n),
                None => return Err(a.rank_error(Ranks::AtLeast(1))),
            }
            vec![Output::new(a.dtype, shape)]
        }
        "GatherBlockQuantized" => gather_block_quantized(ctx)?,
        "EmbedLayerNormalization" => {
            // Token ids [batch, seq] and the word embedding [vocab, hidden]: the normalized
            // sum of the embeddings [batch, seq, hidden], the mask index [batch] (int32) and,
            // when asked, the sum before normalization.
            let (ids, words) = (ctx.input(0)?, ctx.input(2)?);
            let [b, s] = ids.shape.as_slice() else {
                return Err(ids.rank_error(Ranks::Exactly(2)));
            };
            let hidden = words.dim(1)?.clone();
            let hidden_shape: Shape = [b.clone(), s.clone(), hidden].into_iter().collect();
            vec![
                Output::new(words.dtype, hidden_shape.clone()),
                Output::new(DType::I32, [b.clone()].into_iter().collect()),
                Output::new(words.dtype, hidden_shape),
            ]
        }
        "Attention" => attention(ctx)?,
        "MultiHeadAttention" => multi_head_attention(ctx)?,
        "GroupQueryAttention" => group_query_attention(ctx)?,
        _ => return Ok(None),
    };
    Ok(Some(out))
}

/// FusedMatMul's view of an operand: with `batch`, the first dim moves behind the batch dims
/// (`[d0, b.., m, k]` is read as `[b.., d0, k]`); with `last`, the last two dims swap.
fn transposed(shape: &Shape, batch: bool, last: bool) -> Shape {
    let mut s = shape.clone();
    let r = s.len();
    if batch && r >= 3 {
        let first = s.remove(0);
        s.insert(r - 2, first);
    }
    if last && r >= 2 {
        s.swap(r - 2, r - 1);
    }
    s
}

fn heads(ctx: &Ctx<'_>, name: &str) -> Res<Expr> {
    ctx.required_int(name).map(Expr::constant)
}

fn per_head(ctx: &Ctx<'_>, width: &Expr, heads: &Expr) -> Res<Expr> {
    width.div_exact(heads).ok_or_else(|| InferError::Heads {
        width: ctx.show(width),
        heads: ctx.show(heads),
    })
}

fn dims3(x: &Input<'_>) -> Res<[Expr; 3]> {
    match x.shape.as_slice() {
        [a, b, c] => Ok([a.clone(), b.clone(), c.clone()]),
        _ => Err(x.rank_error(Ranks::Exactly(3))),
    }
}

fn shape_of<const N: usize>(dims: [Expr; N]) -> Shape {
    dims.into_iter().collect()
}

/// `Attention`: input `[batch, seq, in]` times weights `[in, q + k + v]`; output `[batch,
/// seq, v]`, present `[2, batch, heads, past + seq, k / heads]`.
fn attention(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let (x, w) = (ctx.input(0)?, ctx.input(1)?);
    let [b, s, _] = dims3(&x)?;
    let n = heads(ctx, "num_heads")?;
    let (k_hidden, v_hidden) = match ctx.attrs.ints("qkv_hidden_sizes") {
        Some([_, k, v]) => (Expr::constant(*k), Expr::constant(*v)),
        Some(other) => {
            return Err(InferError::AttrLength {
                name: "qkv_hidden_sizes".to_owned(),
                count: other.len(),
                expected: 3,
            });
        }
        None => {
            let total = w.dim(1)?;
            let third =
                total
                    .div_exact(&Expr::constant(3))
                    .ok_or_else(|| InferError::NotDivisible {
                        what: Quantity::Width,
                        dim: ctx.show(total),
                        divisor: format!("3 (query, key and value in `{}`)", w.name),
                    })?;
            (third.clone(), third)
        }
    };
    let total = match ctx.opt(4) {
        Some(past) => add(past.dim(3)?, &s)?,
        None => s.clone(),
    };
    let h = per_head(ctx, &k_hidden, &n)?;
    Ok(vec![
        Output::new(x.dtype, shape_of([b.clone(), s, v_hidden])),
        Output::new(x.dtype, shape_of([Expr::constant(2), b, n, total, h])),
    ])
}

/// `MultiHeadAttention`: query `[batch, seq, heads * size]` (or packed QKV `[batch, seq, heads,
/// 3, size]`); key and value 3-D, 4-D BNSH (used as the present cache as they are) or packed
/// KV `[batch, kv_seq, heads, 2, size]`. Outputs: `[batch, seq, heads * v_size]`, present key
/// and value `[batch, heads, past + kv_seq, size]`, and the QK product.
fn multi_head_attention(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let q = ctx.input(0)?;
    let n = heads(ctx, "num_heads")?;
    let (b, s, hq) = match q.shape.as_slice() {
        [b, s, d] => (b.clone(), s.clone(), per_head(ctx, d, &n)?),
        [b, s, _, _, h] => (b.clone(), s.clone(), h.clone()),
        _ => return Err(q.rank_error(Ranks::OneOf(&[3, 5]))),
    };
    // (kv positions, key head size, value head size, whether key/value are BNSH caches).
    let (l, hk, hv, bnsh) = match (ctx.opt(1), ctx.opt(2)) {
        (None, _) => (s.clone(), hq.clone(), hq.clone(), false),
        (Some(k), v) => match k.shape.as_slice() {
            [_, l, d] => {
                let hk = per_head(ctx, d, &n)?;
                let hv = match v.map(|v| v.shape.last().cloned()) {
                    Some(Some(dv)) if v.is_some_and(|v| v.shape.len() == 4) => dv,
                    Some(Some(dv)) => per_head(ctx, &dv, &n)?,
                    _ => hk.clone(),
                };
                (l.clone(), hk, hv, false)
            }
            [_, _, l, h] => {
                let hv = v
                    .and_then(|v| v.shape.last().cloned())
                    .unwrap_or_else(|| h.clone());
                (l.clone(), h.clone(), hv, true)
            }
            [_, l, _, _, h] => (l.clone(), h.clone(), h.clone(), false),
            _ => return Err(k.rank_error(Ranks::OneOf(&[3, 4, 5]))),
        },
    };
    let total = match (ctx.opt(6), bnsh) {
        (_, true) => l,
        (Some(p), false) => add(p.dim(2)?, &l)?,
        (None, false) => l,
    };
    Ok(vec![
        Output::new(q.dtype, shape_of([b.clone(), s.clone(), mul(&n, &hv)?])),
        Output::new(q.dtype, shape_of([b.clone(), n.clone(), total.clone(), hk])),
        Output::new(q.dtype, shape_of([b.clone(), n.clone(), total.clone(), hv])),
        Output::new(DType::F32, shape_of([b, n, s, total])),
    ])
}

/// `GroupQueryAttention`: query `[batch, seq, heads * size]` (or packed QKV `[batch, seq,
/// (heads + 2 * kv_heads) * size]` without key and value); output `[batch, seq, heads * size]`;
/// present key and value `[batch, kv_heads, cache, size]`.
fn group_query_attention(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let q = ctx.input(0)?;
    let n = heads(ctx, "num_heads")?;
    let kvn = heads(ctx, "kv_num_heads")?;
    let [b, s, d] = dims3(&q)?;
    let h = match ctx.opt(1) {
        Some(_) => per_head(ctx, &d, &n)?,
        None => per_head(ctx, &d, &add(&n, &mul(&kvn, &Expr::constant(2))?)?)?,
    };
    let total = ctx.opt(6).and_then(|t| t.value?.ints()?.first().cloned());
    let past = ctx.opt(3).map(|p| p.dim(2).cloned()).transpose()?;
    let cache = match (past, total) {
        (None, Some(t)) => Dim::Known(t),
        (None, None) => Dim::Known(s.clone()),
        (Some(p), t) => match (p.as_constant(), t.as_ref().and_then(Expr::as_constant)) {
            // A shared buffer keeps its length; a growing one ends at the total.
            (Some(pc), Some(tc)) => Dim::Known(Expr::constant(pc.max(tc))),
            _ => Dim::Data(Some(add(&p, &s)?)),
        },
    };
    let present = vec![
        Dim::Known(b.clone()),
        Dim::Known(kvn),
        cache,
        Dim::Known(h.clone()),
    ];
    let mut value = present.clone();
    value[2] = Dim::Same { output: 1, axis: 2 };
    Ok(vec![
        Output::new(q.dtype, shape_of([b, s, mul(&n, &h)?])),
        Output::with_dims(q.dtype, present),
        Output::with_dims(q.dtype, value),
    ])
}

/// `GatherBlockQuantized`: a Gather of block-quantized `data` (4-bit values packed two to a
/// `uint8`, or stored as `int4`/`uint4`) dequantized to the scales' dtype.
fn gather_block_quantized(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let (data, idx, scales) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
    let mut shape = data.shape.clone();
    if data.dtype == DType::U8 {
        let bits = ctx.attrs.int_or("bits", 4);
        if !matches!(bits, 1 | 2 | 4 | 8) {
            return Err(InferError::AttrBits {
                name: "bits".to_owned(),
                bits,
            });
        }
        if let Some(last) = shape.last_mut() {
            *last = mul(last, &Expr::constant(8 / bits))?;
        }
    }
    let axis = super::norm_axis(ctx.attrs.int_or("gather_axis", 0), shape.len())?;
    let out: Shape = shape
        .iter()
        .take(axis)
        .chain(idx.shape.iter())
        .chain(shape.iter().skip(axis + 1))
        .cloned()
        .collect();
    Ok(vec![Output::new(scales.dtype, out)])
}
