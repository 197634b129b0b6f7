//! Recent default-domain ops: signal processing (`DFT`, `STFT`, `MelWeightMatrix`), image ops
//! (`Col2Im`, `AffineGrid`, `DeformConv`, `MaxUnpool`, `ImageDecoder`), sequence-model ops
//! (`LinearAttention`, `CausalConvWithState`, `SwiGLU`, `TensorScatter`, `FlexAttention` of
//! `ai.onnx.preview`), `BitCast`, `TfIdfVectorizer` and the random generators.
//!
//! Shapes follow the ONNX operator specs. Where an output dim comes from a runtime value (a
//! `Col2Im` image shape, an `STFT` frame step, an `AffineGrid` size) it is a [`Dim::Data`],
//! unbounded unless the op bounds it (a one-sided `DFT` over an unknown axis is at most the
//! input's dim there; a `Col2Im` image dim at most what its block count allows).

use memplan_ir::{DType, Expr, Shape};

use super::elementwise::dtype_attr;
use super::{Ctx, Dim, InferError, Input, Output, Res, add, mul, norm_axis, sub};

pub(super) fn infer(op: &str, ctx: &Ctx<'_>) -> Res<Option<Vec<Output>>> {
    let out = match op {
        "DFT" => dft(ctx)?,
        "STFT" => stft(ctx)?,
        "MelWeightMatrix" => {
            let dtype = dtype_attr(ctx.attrs.int_or("output_datatype", 1))?;
            let bins = match ctx.opt(1).and_then(|i| scalar(&i)) {
                Some(n) => Dim::Known(Expr::constant(n.div_euclid(2) + 1)),
                None => Dim::Data(None),
            };
            let mels = match ctx.opt(0).and_then(|i| scalar(&i)) {
                Some(n) => Dim::Known(Expr::constant(n)),
                None => Dim::Data(None),
            };
            vec![Output::with_dims(dtype, vec![bins, mels])]
        }
        "Col2Im" => col2im(ctx)?,
        "AffineGrid" => {
            let theta = ctx.input(0)?;
            let [n, r, _] = theta.shape.as_slice() else {
                return Err(rank_error(&theta, "3"));
            };
            let spatial = ctx.konst(r, "theta's second dim")?;
            if !matches!(spatial, 2 | 3) {
                return Err(rank_error(&theta, "[N, 2, 3] or [N, 3, 4]"));
            }
            let size = ctx.input(1)?.value.and_then(|v| v.ints());
            let mut dims = vec![Dim::Known(n.clone())];
            let first = 2usize;
            for i in 0..usize::try_from(spatial).map_err(|_| "bad theta")? {
                dims.push(match size.and_then(|v| v.get(first + i)) {
                    Some(d) => Dim::Known(d.clone()),
                    None => Dim::Data(None),
                });
            }
            dims.push(Dim::Known(Expr::constant(spatial)));
            vec![Output::with_dims(theta.dtype, dims)]
        }
        "DeformConv" => {
            let (x, w) = (ctx.input(0)?, ctx.input(1)?);
            let kernel = super::nn::kernel(ctx, &w)?;
            let m = w.shape.first().cloned().ok_or("the weight has rank 0")?;
            vec![Output::new(
                x.dtype,
                super::nn::windowed(ctx, x.shape, &kernel, m)?,
            )]
        }
        "MaxUnpool" => max_unpool(ctx)?,
        "ImageDecoder" => {
            let channels = match ctx.attrs.string("pixel_format").unwrap_or("RGB") {
                "Grayscale" => 1,
                _ => 3,
            };
            vec![Output::with_dims(
                DType::U8,
                vec![
                    Dim::Data(None),
                    Dim::Data(None),
                    Dim::Known(Expr::constant(channels)),
                ],
            )]
        }
        "LinearAttention" => linear_attention(ctx)?,
        "CausalConvWithState" => {
            let (x, w) = (ctx.input(0)?, ctx.input(1)?);
            let [b, c, _] = x.shape.as_slice() else {
                return Err(rank_error(&x, "3"));
            };
            let k = w.shape.get(2).ok_or("the weight has rank < 3")?;
            let state: Shape = [b.clone(), c.clone(), sub(k, &Expr::constant(1))?]
                .into_iter()
                .collect();
            vec![
                Output::new(x.dtype, x.shape.clone()),
                Output::new(x.dtype, state),
            ]
        }
        "SwiGLU" | "TensorScatter" => {
            let x = ctx.input(0)?;
            vec![Output::new(x.dtype, x.shape.clone())]
        }
        "FlexAttention" => {
            let (q, v) = (ctx.input(0)?, ctx.input(2)?);
            let ([b, h, s, _], [.., dv]) = (q.shape.as_slice(), v.shape.as_slice()) else {
                return Err(rank_error(&q, "4"));
            };
            vec![Output::new(
                q.dtype,
                [b.clone(), h.clone(), s.clone(), dv.clone()]
                    .into_iter()
                    .collect(),
            )]
        }
        "BitCast" => {
            let x = ctx.input(0)?;
            let to = ctx.required_int("to")?;
            let dtype = dtype_attr(to)?;
            if dtype.bits() != x.dtype.bits() {
                return Err(InferError::BadAttr {
                    name: "to".to_owned(),
                    reason: format!("{dtype} is not as wide as the input's {}", x.dtype),
                });
            }
            vec![Output::new(dtype, x.shape.clone())]
        }
        "TfIdfVectorizer" => {
            let x = ctx.input(0)?;
            let width = ctx
                .attrs
                .ints("ngram_indexes")
                .and_then(|v| v.iter().copied().max())
                .ok_or_else(|| InferError::missing_attr("ngram_indexes"))?
                .checked_add(1)
                .ok_or("ngram index overflows")?;
            let mut shape: Shape = match x.shape.as_slice() {
                [_] => Shape::new(),
                [n, _] => [n.clone()].into_iter().collect(),
                _ => return Err(rank_error(&x, "1 or 2")),
            };
            shape.push(Expr::constant(width));
            vec![Output::new(DType::F32, shape)]
        }
        "RandomUniformLike" | "RandomNormalLike" => {
            let x = ctx.input(0)?;
            let dtype = ctx.attrs.int("dtype").map_or(Ok(x.dtype), dtype_attr)?;
            vec![Output::new(dtype, x.shape.clone())]
        }
        "RandomUniform" | "RandomNormal" => {
            let shape = ctx
                .attrs
                .ints("shape")
                .ok_or_else(|| InferError::missing_attr("shape"))?;
            let dtype = dtype_attr(ctx.attrs.int_or("dtype", 1))?;
            let shape: Shape = shape.iter().map(|&d| Expr::constant(d)).collect();
            ctx.check_dims(&shape)?;
            vec![Output::new(dtype, shape)]
        }
        "Multinomial" => {
            let x = ctx.input(0)?;
            let batch = x.shape.first().ok_or("the input is a scalar")?;
            let dtype = dtype_attr(ctx.attrs.int_or("dtype", 6))?;
            let n = Expr::constant(ctx.attrs.int_or("sample_size", 1));
            vec![Output::new(dtype, [batch.clone(), n].into_iter().collect())]
        }
        _ => return Ok(None),
    };
    Ok(Some(out))
}

/// The constant value of a scalar (or one-element) input, if known.
fn scalar(input: &Input<'_>) -> Option<i64> {
    input.value?.ints()?.first()?.as_constant()
}

fn rank_error(x: &Input<'_>, expected: &str) -> InferError {
    format!("`{}` has rank {}, not {expected}", x.name, x.shape.len()).into()
}

/// `DFT`: the signal axis becomes `dft_length` (or stays), halved plus one when one-sided;
/// the last dim becomes 2 (complex), or 1 for a one-sided inverse (a real result).
fn dft(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let x = ctx.input(0)?;
    let rank = x.shape.len();
    if rank < 2 {
        return Err(rank_error(&x, "at least 2"));
    }
    let inverse = ctx.attrs.int_or("inverse", 0) != 0;
    let onesided = ctx.attrs.int_or("onesided", 0) != 0;
    let axis = if ctx.opset < 20 {
        Some(ctx.attrs.int_or("axis", 1))
    } else {
        match ctx.opt(2) {
            None => Some(-2),
            Some(a) => scalar(&a),
        }
    };
    let length = match ctx.opt(1) {
        None => Some(None),
        Some(l) => scalar(&l).map(|n| Some(Expr::constant(n))),
    };
    let last = Expr::constant(if inverse && onesided { 1 } else { 2 });
    // The signal axis counts from the dims before the last (complex) one.
    let axis = match axis {
        Some(a) if a < 0 => Some(norm_axis(a, rank)?),
        Some(a) => Some(norm_axis(a, rank - 1)?),
        None => None,
    };
    let new_len = |d: &Expr| -> Res<Option<Expr>> {
        let n = match &length {
            Some(Some(n)) => n.clone(),
            Some(None) if inverse && onesided => {
                mul(&sub(d, &Expr::constant(1))?, &Expr::constant(2))?
            }
            Some(None) => d.clone(),
            None => return Ok(None),
        };
        if onesided && !inverse {
            match n.as_constant() {
                Some(c) => Ok(Some(Expr::constant(c.div_euclid(2) + 1))),
                None => Ok(None),
            }
        } else {
            Ok(Some(n))
        }
    };
    let changes = onesided || length.as_ref().is_some_and(Option::is_some);
    let mut dims: Vec<Dim> = x.shape.iter().cloned().map(Dim::Known).collect();
    match axis {
        Some(a) => {
            if let Some(d) = x.shape.get(a) {
                dims[a] = match new_len(d)? {
                    Some(n) => Dim::Known(n),
                    None => Dim::Data(None),
                };
            }
        }
        // A runtime axis: any signal dim may change. A one-sided transform halves it (at most
        // the dim); a one-sided inverse doubles it (below twice the dim).
        None if changes => {
            for (i, d) in x.shape.iter().enumerate().take(rank - 1).skip(1) {
                let bound = match (&length, inverse && onesided) {
                    (Some(None), false) => Some(d.clone()),
                    (Some(None), true) => Some(mul(d, &Expr::constant(2))?),
                    _ => None,
                };
                dims[i] = Dim::Data(bound);
            }
        }
        None => {}
    }
    dims[rank - 1] = Dim::Known(last);
    Ok(vec![Output::with_dims(x.dtype, dims)])
}

/// `STFT`: `[batch, frames, bins, 2]` with `frames = (length - frame_length) / step + 1` and
/// `bins = frame_length / 2 + 1` when one-sided; with a runtime step or frame length, both
/// are at most the signal's length.
fn stft(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let x = ctx.input(0)?;
    let [batch, length, _] = x.shape.as_slice() else {
        return Err(rank_error(&x, "3"));
    };
    let step = scalar(&ctx.input(1)?);
    let frame = match (ctx.opt(3), ctx.opt(2)) {
        (Some(l), _) => scalar(&l).map(Expr::constant),
        (None, Some(w)) => w.shape.first().cloned(),
        (None, None) => Some(length.clone()),
    };
    // A frame is at least one sample and at most the signal, and the step at least 1: there
    // are at most `length` frames, and at most `length` bins.
    let frames = match (
        step,
        frame.as_ref().and_then(Expr::as_constant),
        length.as_constant(),
    ) {
        (Some(s), Some(f), Some(l)) if s > 0 && l >= f => {
            Dim::Known(Expr::constant((l - f).div_euclid(s) + 1))
        }
        _ => Dim::Data(Some(length.clone())),
    };
    let onesided = ctx.attrs.int_or("onesided", 1) != 0;
    let bins = match frame {
        Some(f) if !onesided => Dim::Known(f),
        Some(f) => match f.as_constant() {
            Some(c) => Dim::Known(Expr::constant(c.div_euclid(2) + 1)),
            None => Dim::Data(Some(f)),
        },
        None => Dim::Data(Some(length.clone())),
    };
    Ok(vec![Output::with_dims(
        x.dtype,
        vec![
            Dim::Known(batch.clone()),
            frames,
            bins,
            Dim::Known(Expr::constant(2)),
        ],
    )])
}

/// `Col2Im`: `[N, C, image...]` from an input `[N, C × Π block, L]`. Where the image shape
/// is a runtime value, each image dim `i` is at most `s_i × L + d_i × (k_i - 1) - pads_i`: the
/// blocks along `i` number `n_i = (image_i + pads_i - d_i × (k_i - 1) - 1) / s_i + 1` (rounded
/// down), and `|n_i| ≤ L` since the counts multiply to `L ≠ 0`. A runtime block dim `k_i` is at
/// most `C × Π block`, as every block dim and `C` are at least 1 when that product is. The
/// bound needs `L` (and, for a runtime block shape, `C × Π block`) to be a positive constant;
/// otherwise (or with a stride or dilation below 1) the dim is unbounded.
fn col2im(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let x = ctx.input(0)?;
    let [n, cb, l] = x.shape.as_slice() else {
        return Err(rank_error(&x, "3"));
    };
    let image = ctx.input(1)?;
    let spatial = super::data_dependent::value_len(ctx, 1)?;
    let mut dims = vec![Dim::Known(n.clone())];
    let image_dims = image.value.and_then(|v| v.ints());
    let block_dims = ctx.opt(2).and_then(|b| b.value?.ints());
    dims.push(match block_dims.map(super::product) {
        Some(b) => Dim::Known(
            cb.div_exact(&b?)
                .ok_or("the channels are not divisible by the block size")?,
        ),
        None => Dim::Data(Some(cb.clone())),
    });
    let positive = |d: &Expr| d.as_constant().filter(|&c| c > 0);
    let strides = super::nn::ints_or(ctx, "strides", 1, spatial);
    let dilations = super::nn::ints_or(ctx, "dilations", 1, spatial);
    let pads = super::nn::ints_or(ctx, "pads", 0, 2 * spatial);
    for i in 0..spatial {
        if let Some(d) = image_dims.and_then(|v| v.get(i)) {
            dims.push(Dim::Known(d.clone()));
            continue;
        }
        let block = match block_dims {
            Some(v) => v.get(i).and_then(positive),
            None => positive(cb),
        };
        let (s, d) = (strides[i], dilations[i]);
        let bound = match (positive(l), block) {
            (Some(l), Some(k)) if s > 0 && d > 0 => {
                let bound = s
                    .checked_mul(l)
                    .zip(d.checked_mul(k - 1))
                    .and_then(|(a, b)| a.checked_add(b))
                    .and_then(|v| v.checked_sub(pads[i]))
                    .and_then(|v| v.checked_sub(pads[i + spatial]))
                    .ok_or("the image bound overflows")?;
                Some(Expr::constant(bound.max(0)))
            }
            _ => None,
        };
        dims.push(Dim::Data(bound));
    }
    Ok(vec![Output::with_dims(x.dtype, dims)])
}

/// `MaxUnpool`: the spatial dims of `output_shape` when given, else `(in - 1) * stride +
/// kernel - pads`.
fn max_unpool(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let x = ctx.input(0)?;
    let spatial = x.shape.len().checked_sub(2).ok_or("input rank < 2")?;
    if let Some(shape) = ctx.opt(2) {
        let dims = match shape.value.and_then(|v| v.ints()) {
            Some(v) => v.iter().cloned().map(Dim::Known).collect(),
            None => {
                let mut d: Vec<Dim> = x.shape.iter().take(2).cloned().map(Dim::Known).collect();
                d.extend((0..spatial).map(|_| Dim::Data(None)));
                d
            }
        };
        return Ok(vec![Output::with_dims(x.dtype, dims)]);
    }
    let kernel = ctx
        .attrs
        .ints("kernel_shape")
        .ok_or_else(|| InferError::missing_attr("kernel_shape"))?;
    if kernel.len() != spatial {
        return Err(format!(
            "kernel has {} dims for {spatial} spatial dims",
            kernel.len()
        )
        .into());
    }
    let strides = super::nn::ints_or(ctx, "strides", 1, spatial);
    let pads = super::nn::ints_or(ctx, "pads", 0, 2 * spatial);
    let mut shape: Shape = x.shape.iter().take(2).cloned().collect();
    for (i, d) in x.shape.iter().skip(2).enumerate() {
        let extra = kernel[i]
            .checked_sub(pads[i])
            .and_then(|v| v.checked_sub(pads[i + spatial]))
            .ok_or("overflow")?;
        shape.push(add(
            &mul(&sub(d, &Expr::constant(1))?, &Expr::constant(strides[i]))?,
            &Expr::constant(extra),
        )?);
    }
    Ok(vec![Output::new(x.dtype, shape)])
}

/// `LinearAttention`: packed `[batch, seq, heads * size]` query, key and value; the output is
/// `[batch, seq, q_heads * v_size]`, the recurrent state `[batch, kv_heads, k_size, v_size]`.
fn linear_attention(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let (q, k, v) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
    let heads = |name: &str| ctx.required_int(name).map(Expr::constant);
    let (qh, kvh) = (heads("q_num_heads")?, heads("kv_num_heads")?);
    let ([b, t, _], [.., kw], [.., vw]) =
        (q.shape.as_slice(), k.shape.as_slice(), v.shape.as_slice())
    else {
        return Err(rank_error(&q, "3"));
    };
    let per_head = |w: &Expr| {
        w.div_exact(&kvh).ok_or_else(|| {
            InferError::from(format!(
                "{} is not divisible by {} heads",
                ctx.show(w),
                ctx.show(&kvh)
            ))
        })
    };
    let (dk, dv) = (per_head(kw)?, per_head(vw)?);
    let state_dtype = ctx.opt(3).map_or(q.dtype, |p| p.dtype);
    Ok(vec![
        Output::new(
            q.dtype,
            [b.clone(), t.clone(), mul(&qh, &dv)?].into_iter().collect(),
        ),
        Output::new(state_dtype, [b.clone(), kvh, dk, dv].into_iter().collect()),
    ])
}
