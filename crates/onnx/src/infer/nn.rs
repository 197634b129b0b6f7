//! Network layers: convolution and pooling windows, matrix products, recurrent layers,
//! resizing and the channel/space shuffles.
//!
//! Window arithmetic follows the ONNX operator specs: `out = floor((in + pads - ((k-1)*d+1)) /
//! s) + 1` (ceil with `ceil_mode`, dropping a last window that would start in the padding),
//! `ceil(in / s)` for `SAME_*` auto padding. A symbolic spatial dim is supported when the
//! stride divides the expression exactly (always for stride 1).

use memplan_ir::{DType, Expr, Shape};

use super::{Counted, InferError, Quantity, Ranks};
use super::{Ctx, Input, Output, Res, add, broadcast, mul, norm_axis, sub};

pub(super) fn infer(op: &str, ctx: &Ctx<'_>) -> Res<Option<Vec<Output>>> {
    let out = match op {
        "Conv" | "ConvInteger" | "QLinearConv" => conv(op, ctx)?,
        "ConvTranspose" => conv_transpose(ctx)?,
        "MaxPool" | "AveragePool" | "LpPool" => {
            let x = ctx.input(0)?;
            let kernel = ctx.required_ints("kernel_shape")?;
            let shape = windowed(ctx, &x, kernel, x.dim(1)?.clone())?;
            vec![
                Output::new(x.dtype, shape.clone()),
                Output::new(DType::I64, shape),
            ]
        }
        "GlobalAveragePool" | "GlobalMaxPool" | "GlobalLpPool" => {
            let x = ctx.input(0)?;
            if x.shape.len() < 2 {
                return Err(x.rank_error(Ranks::AtLeast(2)));
            }
            let shape = x
                .shape
                .iter()
                .enumerate()
                .map(|(i, d)| if i < 2 { d.clone() } else { Expr::constant(1) })
                .collect();
            vec![Output::new(x.dtype, shape)]
        }
        "MatMul" | "MatMulInteger" => {
            let (a, b) = (ctx.input(0)?, ctx.input(1)?);
            let dtype = if op == "MatMul" { a.dtype } else { DType::I32 };
            vec![Output::new(
                dtype,
                matmul(ctx, [a.name, b.name], a.shape, b.shape)?,
            )]
        }
        "Gemm" => {
            let (a, b) = (ctx.input(0)?, ctx.input(1)?);
            let [a0, a1] = a.shape.as_slice() else {
                return Err(a.rank_error(Ranks::Exactly(2)));
            };
            let [b0, b1] = b.shape.as_slice() else {
                return Err(b.rank_error(Ranks::Exactly(2)));
            };
            let m = if ctx.attrs.int_or("transA", 0) != 0 {
                a1
            } else {
                a0
            };
            let n = if ctx.attrs.int_or("transB", 0) != 0 {
                b0
            } else {
                b1
            };
            vec![Output::new(
                a.dtype,
                [m.clone(), n.clone()].into_iter().collect(),
            )]
        }
        "QLinearMatMul" => {
            let (a, b) = (ctx.input(0)?, ctx.input(3)?);
            let dtype = ctx.opt(7).map_or(a.dtype, |z| z.dtype);
            vec![Output::new(
                dtype,
                matmul(ctx, [a.name, b.name], a.shape, b.shape)?,
            )]
        }
        "Attention" => attention(ctx)?,
        "LSTM" | "GRU" | "RNN" => recurrent(ctx)?,
        "GridSample" => {
            let (x, grid) = (ctx.input(0)?, ctx.input(1)?);
            let lead: Shape = x.shape.iter().take(2).cloned().collect();
            let rank = grid.shape.len();
            if lead.len() != 2 {
                return Err(x.rank_error(Ranks::AtLeast(2)));
            }
            if rank < 3 {
                return Err(grid.rank_error(Ranks::AtLeast(3)));
            }
            let shape = lead
                .into_iter()
                .chain(grid.shape.iter().skip(1).take(rank - 2).cloned())
                .collect();
            vec![Output::new(x.dtype, shape)]
        }
        "RoiAlign" => {
            let (x, rois) = (ctx.input(0)?, ctx.input(1)?);
            let n = rois.dim(0)?;
            let c = x.dim(1)?;
            let h = Expr::constant(ctx.attrs.int_or("output_height", 1));
            let w = Expr::constant(ctx.attrs.int_or("output_width", 1));
            vec![Output::new(
                x.dtype,
                [n.clone(), c.clone(), h, w].into_iter().collect(),
            )]
        }
        "NegativeLogLikelihoodLoss" | "SoftmaxCrossEntropyLoss" => {
            let x = ctx.input(0)?;
            let loss: Shape = if ctx.attrs.string("reduction").unwrap_or("mean") == "none" {
                x.shape
                    .iter()
                    .enumerate()
                    .filter(|&(i, _)| i != 1)
                    .map(|(_, d)| d.clone())
                    .collect()
            } else {
                Shape::new()
            };
            vec![
                Output::new(x.dtype, loss),
                Output::new(x.dtype, x.shape.clone()),
            ]
        }
        "Resize" | "Upsample" => resize(op, ctx)?,
        "DepthToSpace" | "SpaceToDepth" => {
            let x = ctx.input(0)?;
            let b = Expr::constant(ctx.required_int("blocksize")?);
            let bb = mul(&b, &b)?;
            let [n, c, h, w] = x.shape.as_slice() else {
                return Err(x.rank_error(Ranks::Exactly(4)));
            };
            let shape: Shape = if op == "DepthToSpace" {
                let c = c.div_exact(&bb).ok_or_else(|| InferError::NotDivisible {
                    what: Quantity::Channels,
                    dim: ctx.show(c),
                    divisor: format!("blocksize^2 = {}", ctx.show(&bb)),
                })?;
                [n.clone(), c, mul(h, &b)?, mul(w, &b)?]
                    .into_iter()
                    .collect()
            } else {
                let by_block = |what: Quantity, d: &Expr| {
                    d.div_exact(&b).ok_or_else(|| InferError::NotDivisible {
                        what,
                        dim: ctx.show(d),
                        divisor: format!("blocksize {}", ctx.show(&b)),
                    })
                };
                let h = by_block(Quantity::Height, h)?;
                let w = by_block(Quantity::Width, w)?;
                [n.clone(), mul(c, &bb)?, h, w].into_iter().collect()
            };
            vec![Output::new(x.dtype, shape)]
        }
        _ => return Ok(None),
    };
    Ok(Some(out))
}

/// `ceil(n / s)` or `floor(n / s)` for a constant or an exactly divisible expression.
fn div_round(ctx: &Ctx<'_>, n: &Expr, s: i64, ceil: bool) -> Res<Expr> {
    if s <= 0 {
        return Err(InferError::Stride { stride: s });
    }
    ctx.quotient(n, s, ceil)
}

/// `n / s` rounded down (or up) plus one, the count of window positions over a span of `n`:
/// one quotient `(n + s) / s`, so that an unknown dim's count is one symbol.
fn positions(ctx: &Ctx<'_>, n: &Expr, s: i64, ceil: bool) -> Res<Expr> {
    if s <= 0 {
        return Err(InferError::Stride { stride: s });
    }
    div_round(ctx, &add(n, &Expr::constant(s))?, s, ceil)
}

/// The output spatial dims of a sliding window (pooling or convolution) over `x`, with the
/// channel dim `channels`.
pub(super) fn windowed(
    ctx: &Ctx<'_>,
    input: &Input<'_>,
    kernel: &[i64],
    channels: Expr,
) -> Res<Shape> {
    let x = input.shape;
    let spatial = input.spatial()?;
    kernel_fits(kernel, spatial)?;
    let get = |name: &str, default: i64, n: usize| -> Res<Vec<i64>> {
        match ctx.attrs.ints(name) {
            Some(v) if v.len() == n => Ok(v.to_vec()),
            Some([]) => Ok(vec![default; n]),
            Some(v) => Err(InferError::AttrLength {
                name: name.to_owned(),
                count: v.len(),
                expected: n,
            }),
            None => Ok(vec![default; n]),
        }
    };
    let strides = get("strides", 1, spatial)?;
    let dilations = get("dilations", 1, spatial)?;
    let pads = get("pads", 0, spatial * 2)?;
    // A window of no elements, a step of none: the spec's arithmetic would give outputs
    // larger than the input, or divide by zero.
    for (name, values) in [
        ("kernel_shape", kernel),
        ("strides", strides.as_slice()),
        ("dilations", dilations.as_slice()),
    ] {
        if let Some(&v) = values.iter().find(|&&v| v < 1) {
            at_least(name, v, 1)?;
        }
    }
    let ceil = ctx.attrs.int_or("ceil_mode", 0) != 0;
    let auto_pad = ctx.attrs.string("auto_pad").unwrap_or("NOTSET");
    let mut out: Shape = x.iter().take(1).cloned().collect();
    out.push(channels);
    for (i, d) in x.iter().skip(2).enumerate() {
        let (k, s, dil) = (kernel[i], strides[i], dilations[i]);
        let effective = window(k, dil)?;
        let o = match auto_pad {
            "SAME_UPPER" | "SAME_LOWER" => div_round(ctx, d, s, true)?,
            "VALID" => positions(ctx, &sub(d, &Expr::constant(effective))?, s, false)?,
            "NOTSET" | "" => {
                let (pb, pe) = (pads[i], pads[i + spatial]);
                let total = pb
                    .checked_add(pe)
                    .ok_or(InferError::overflow(Quantity::Padding))?;
                let span = sub(&add(d, &Expr::constant(total))?, &Expr::constant(effective))?;
                if span.as_constant().is_some_and(|v| v < 0) {
                    return Err(InferError::Window {
                        window: effective,
                        dim: ctx.show(d),
                        pads: total,
                    });
                }
                let mut o = positions(ctx, &span, s, ceil)?;
                if ceil {
                    // The last window must start inside the input or the left padding.
                    if let (Some(ov), Some(dv)) = (o.as_constant(), d.as_constant())
                        && (ov - 1)
                            .checked_mul(s)
                            .is_some_and(|start| start >= dv.saturating_add(pb))
                    {
                        o = Expr::constant(ov - 1);
                    }
                }
                o
            }
            other => {
                return Err(InferError::AttrValue {
                    name: "auto_pad".to_owned(),
                    value: other.to_owned(),
                });
            }
        };
        out.push(o);
    }
    Ok(out)
}

/// Checks that the kernel has one dim per spatial dim of the input.
pub(super) fn kernel_fits(kernel: &[i64], spatial: usize) -> Res<()> {
    if kernel.len() == spatial {
        return Ok(());
    }
    Err(InferError::Count {
        counted: Counted::Kernel,
        count: kernel.len(),
        expected: spatial,
    })
}

/// A window's extent, `dilation * (kernel - 1) + 1`, checked.
pub(super) fn window(kernel: i64, dilation: i64) -> Res<i64> {
    kernel
        .checked_sub(1)
        .and_then(|k| dilation.checked_mul(k))
        .and_then(|v| v.checked_add(1))
        .ok_or(InferError::overflow(Quantity::Window))
}

/// The kernel's spatial dims: the `kernel_shape` attribute, or the weight's dims after the
/// first two.
pub(super) fn kernel(ctx: &Ctx<'_>, w: &Input<'_>) -> Res<Vec<i64>> {
    match ctx.attrs.ints("kernel_shape") {
        Some(k) => Ok(k.to_vec()),
        None => w
            .shape
            .iter()
            .skip(2)
            .map(|d| ctx.konst(d, "a kernel dim"))
            .collect(),
    }
}

/// The int-list attribute `name` when it has `n` values, else `n` copies of `default`.
pub(super) fn ints_or(ctx: &Ctx<'_>, name: &str, default: i64, n: usize) -> Vec<i64> {
    ctx.attrs
        .ints(name)
        .filter(|v| v.len() == n)
        .map_or_else(|| vec![default; n], <[i64]>::to_vec)
}

/// An integer attribute that must be at least `min` when given (`group`, `hidden_size`).
pub(super) fn at_least(name: &str, value: i64, min: i64) -> Res<i64> {
    if value < min {
        return Err(InferError::AttrTooSmall {
            name: name.to_owned(),
            value,
            min,
        });
    }
    Ok(value)
}

fn conv(op: &str, ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let x = ctx.input(0)?;
    let w = ctx.input(if op == "QLinearConv" { 3 } else { 1 })?;
    at_least("group", ctx.attrs.int_or("group", 1), 1)?;
    let kernel = kernel(ctx, &w)?;
    let m = w.dim(0)?.clone();
    let dtype = match op {
        "ConvInteger" => DType::I32,
        "QLinearConv" => ctx.opt(7).map_or(DType::U8, |z| z.dtype),
        _ => x.dtype,
    };
    Ok(vec![Output::new(dtype, windowed(ctx, &x, &kernel, m)?)])
}

fn conv_transpose(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let (x, w) = (ctx.input(0)?, ctx.input(1)?);
    let spatial = x.spatial()?;
    let group = at_least("group", ctx.attrs.int_or("group", 1), 1)?;
    let m = mul(w.dim(1)?, &Expr::constant(group))?;
    let mut out: Shape = x.shape.iter().take(1).cloned().collect();
    out.push(m);
    if let Some(shape) = ctx.attrs.ints("output_shape") {
        let skip = shape.len().saturating_sub(spatial);
        out.extend(shape.iter().skip(skip).map(|&d| Expr::constant(d)));
        return Ok(vec![Output::new(x.dtype, out)]);
    }
    let kernel = kernel(ctx, &w)?;
    let get = |name: &str, default: i64, n: usize| ints_or(ctx, name, default, n);
    let strides = get("strides", 1, spatial);
    let dilations = get("dilations", 1, spatial);
    let pads = get("pads", 0, spatial * 2);
    let output_padding = get("output_padding", 0, spatial);
    let auto_pad = ctx.attrs.string("auto_pad").unwrap_or("NOTSET");
    kernel_fits(&kernel, spatial)?;
    for (i, d) in x.shape.iter().skip(2).enumerate() {
        let s = Expr::constant(strides[i]);
        let o = if auto_pad.starts_with("SAME") {
            mul(d, &s)?
        } else {
            let effective = window(kernel[i], dilations[i])?;
            let extra = output_padding[i]
                .checked_add(effective)
                .and_then(|v| v.checked_sub(pads[i]))
                .and_then(|v| v.checked_sub(pads[i + spatial]))
                .ok_or(InferError::overflow(Quantity::OutputDim))?;
            add(
                &mul(&s, &sub(d, &Expr::constant(1))?)?,
                &Expr::constant(extra),
            )?
        };
        out.push(o);
    }
    Ok(vec![Output::new(x.dtype, out)])
}

/// numpy `matmul` shapes of `a` and `b` (named by `names`).
pub(super) fn matmul(ctx: &Ctx<'_>, names: [&str; 2], a: &Shape, b: &Shape) -> Res<Shape> {
    for (name, s) in names.into_iter().zip([a, b]) {
        if s.is_empty() {
            return Err(InferError::rank(name, 0, Ranks::AtLeast(1)));
        }
    }
    let batch =
        |s: &Shape| -> Shape { s.iter().take(s.len().saturating_sub(2)).cloned().collect() };
    let mut out = broadcast(ctx, &batch(a), &batch(b))?;
    if let Some(m) = a.len().checked_sub(2).and_then(|i| a.get(i)) {
        out.push(m.clone());
    }
    if let (true, Some(n)) = (b.len() >= 2, b.last()) {
        out.push(n.clone());
    }
    Ok(out)
}

fn recurrent(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let x = ctx.input(0)?;
    let hidden = Expr::constant(at_least(
        "hidden_size",
        ctx.required_int("hidden_size")?,
        1,
    )?);
    let dirs = Expr::constant(if ctx.attrs.string("direction") == Some("bidirectional") {
        2
    } else {
        1
    });
    let [a, b, _] = x.shape.as_slice() else {
        return Err(x.rank_error(Ranks::Exactly(3)));
    };
    let batch_first = ctx.attrs.int_or("layout", 0) != 0;
    let (seq, batch) = if batch_first { (b, a) } else { (a, b) };
    let y: Shape = if batch_first {
        [batch.clone(), seq.clone(), dirs.clone(), hidden.clone()]
            .into_iter()
            .collect()
    } else {
        [seq.clone(), dirs.clone(), batch.clone(), hidden.clone()]
            .into_iter()
            .collect()
    };
    let state: Shape = if batch_first {
        [batch.clone(), dirs, hidden].into_iter().collect()
    } else {
        [dirs, batch.clone(), hidden].into_iter().collect()
    };
    Ok(vec![
        Output::new(x.dtype, y),
        Output::new(x.dtype, state.clone()),
        Output::new(x.dtype, state),
    ])
}

/// `floor(d * scale)` for a constant dim, or `d * scale` for a symbolic one and an integer scale.
fn scale_dim(ctx: &Ctx<'_>, d: &Expr, scale: f64) -> Res<Expr> {
    if !scale.is_finite() || scale < 0.0 {
        return Err(InferError::Scale { scale });
    }
    match d.as_constant() {
        Some(c) => {
            let v = (c as f64 * scale).floor();
            if v > 9.0e18 {
                return Err(InferError::overflow(Quantity::ScaledDim));
            }
            Ok(Expr::constant(v as i64))
        }
        None if scale.fract() == 0.0 && scale < 1.0e9 => mul(d, &Expr::constant(scale as i64)),
        None => Err(InferError::SymbolicScale {
            dim: ctx.show(d),
            scale,
        }),
    }
}

fn resize(op: &str, ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let x = ctx.input(0)?;
    let rank = x.shape.len();
    let axes: Vec<usize> = match ctx.attrs.ints("axes") {
        Some(a) => a.iter().map(|&a| norm_axis(a, rank)).collect::<Res<_>>()?,
        None => (0..rank).collect(),
    };
    let nonempty = |i: usize| {
        ctx.opt(i)
            .filter(|inp| inp.value.is_none_or(|v| v.len() > 0) && !is_empty(inp))
    };
    let (scales_at, sizes_at) = match (op, ctx.opset) {
        ("Upsample", v) if v < 9 => (None, None),
        ("Upsample", _) | (_, ..=10) => (Some(1), None),
        _ => (Some(2), Some(3)),
    };
    let mut shape = x.shape.clone();
    if let Some(sizes) = sizes_at.and_then(nonempty) {
        let sizes = sizes
            .value
            .and_then(|v| v.ints())
            .ok_or_else(|| InferError::UnknownValue {
                input: sizes.name.to_owned(),
            })?;
        if sizes.len() != axes.len() {
            return Err(InferError::Count {
                counted: Counted::Sizes,
                count: sizes.len(),
                expected: axes.len(),
            });
        }
        let policy = ctx
            .attrs
            .string("keep_aspect_ratio_policy")
            .unwrap_or("stretch");
        if policy != "stretch" {
            let ratio = |i: usize, a: usize| -> Res<f64> {
                Ok(ctx.konst(&sizes[i], "a size")? as f64
                    / ctx.konst(&x.shape[a], "an input dim")? as f64)
            };
            let ratios: Vec<f64> = axes
                .iter()
                .enumerate()
                .map(|(i, &a)| ratio(i, a))
                .collect::<Res<_>>()?;
            let s = if policy == "not_larger" {
                ratios.iter().copied().fold(f64::INFINITY, f64::min)
            } else {
                ratios.iter().copied().fold(0.0, f64::max)
            };
            for &a in &axes {
                let v = (ctx.konst(&x.shape[a], "an input dim")? as f64 * s + 0.5).floor();
                shape[a] = Expr::constant(v as i64);
            }
        } else {
            for (i, &a) in axes.iter().enumerate() {
                shape[a] = sizes[i].clone();
            }
        }
        return Ok(vec![Output::new(x.dtype, shape)]);
    }
    let scales: Vec<f64> = match scales_at {
        None => ctx
            .attrs
            .floats("scales")
            .ok_or_else(|| InferError::missing_attr("scales"))?
            .iter()
            .map(|&f| f64::from(f))
            .collect(),
        Some(i) => {
            let s = nonempty(i).ok_or(InferError::NoScales)?;
            s.value
                .and_then(|v| v.floats())
                .ok_or_else(|| InferError::UnknownValue {
                    input: s.name.to_owned(),
                })?
        }
    };
    if scales.len() != axes.len() {
        return Err(InferError::Count {
            counted: Counted::Scales,
            count: scales.len(),
            expected: axes.len(),
        });
    }
    for (i, &a) in axes.iter().enumerate() {
        shape[a] = scale_dim(ctx, &x.shape[a], scales[i])?;
    }
    Ok(vec![Output::new(x.dtype, shape)])
}

/// Whether an input has a zero-length dim (the empty `roi`/`scales` placeholders).
fn is_empty(input: &Input<'_>) -> bool {
    input.shape.iter().any(|d| d.as_constant() == Some(0))
}

/// The `Attention` operator (opset 23): 4-D `[batch, heads, seq, head_size]` inputs, or 3-D
/// `[batch, seq, hidden]` ones with `q_num_heads`/`kv_num_heads`. Outputs: Y, present key and
/// value (past concatenated with the new keys/values), and the QK product.
fn attention(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let (q, k, v) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
    let heads = |name: &str| ctx.required_int(name).map(Expr::constant);
    // Per tensor: (batch, heads, seq, head_size).
    let split = |x: &Input<'_>, heads: Res<Expr>| -> Res<[Expr; 4]> {
        match x.shape.as_slice() {
            [b, h, s, d] => Ok([b.clone(), h.clone(), s.clone(), d.clone()]),
            [b, s, hidden] => {
                let h = heads?;
                let d = hidden.div_exact(&h).ok_or_else(|| InferError::Heads {
                    width: ctx.show(hidden),
                    heads: ctx.show(&h),
                })?;
                Ok([b.clone(), h, s.clone(), d])
            }
            _ => Err(x.rank_error(Ranks::OneOf(&[3, 4]))),
        }
    };
    let [b, qh, qs, _] = split(&q, heads("q_num_heads"))?;
    let [_, kh, ks, kd] = split(&k, heads("kv_num_heads"))?;
    let [_, _, _, vd] = split(&v, heads("kv_num_heads"))?;
    let past = ctx.opt(4).map(|p| p.dim(2).cloned()).transpose()?;
    let total = match past {
        Some(p) => add(&p, &ks)?,
        None => ks,
    };
    let y: Shape = if q.shape.len() == 4 {
        [b.clone(), qh.clone(), qs.clone(), vd.clone()]
            .into_iter()
            .collect()
    } else {
        [b.clone(), qs.clone(), mul(&qh, &vd)?]
            .into_iter()
            .collect()
    };
    Ok(vec![
        Output::new(q.dtype, y),
        Output::new(
            k.dtype,
            [b.clone(), kh.clone(), total.clone(), kd]
                .into_iter()
                .collect(),
        ),
        Output::new(
            v.dtype,
            [b.clone(), kh, total.clone(), vd].into_iter().collect(),
        ),
        Output::new(q.dtype, [b, qh, qs, total].into_iter().collect()),
    ])
}
