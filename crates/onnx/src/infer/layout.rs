//! Layout and shape-arithmetic operators: `Reshape`, `Flatten`, `Transpose`, `Squeeze`,
//! `Unsqueeze`, `Concat`, `Split`, `Slice`, the `Gather` family, `Shape`, `Size`,
//! `ConstantOfShape`, `Range`, `Expand`, `Tile`, `Pad`, reductions, `ArgMax`/`ArgMin`, `TopK`,
//! `OneHot` and `Einsum`.
//!
//! These are the ops through which shape values flow, so most of them also carry the input's
//! value: `Shape` turns a (possibly symbolic) shape into a value, and `Gather`, `Slice`,
//! `Concat`, `Squeeze`, `Unsqueeze` and `Reshape` rearrange it. `Slice` with a symbolic
//! dim assumes that constant bounds lie inside it, and that a symbolic end does not run past
//! the dim (as in `position_ids[:, :seq]`), which is what exporters produce.

use memplan_ir::{DType, Expr, Shape};

use super::{Ctx, Output, Res, add, broadcast, divide, konst, mul, norm_axis, product, sub};
use crate::tensor::{self, MAX_VALUE_ELEMENTS};
use crate::value::{self, Value};

/// Reductions whose axes come from an input from opset 18 (13 for `ReduceSum`).
const REDUCE: &[&str] = &[
    "ReduceMean",
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
];

pub(super) fn infer(op: &str, ctx: &Ctx<'_>) -> Res<Option<Vec<Output>>> {
    let out = match op {
        "Reshape" => reshape(ctx)?,
        "Flatten" => {
            let x = ctx.input(0)?;
            let rank = x.shape.len();
            let axis = ctx.attrs.int_or("axis", 1);
            let axis = if axis == i64::try_from(rank).unwrap_or(i64::MAX) {
                rank
            } else {
                norm_axis(axis, rank)?
            };
            let (a, b) = x.shape.split_at(axis);
            vec![Output::with_value(
                x.dtype,
                [product(a)?, product(b)?].into_iter().collect(),
                x.value.cloned(),
            )]
        }
        "Transpose" => {
            let x = ctx.input(0)?;
            let rank = x.shape.len();
            let perm: Vec<usize> = match ctx.attrs.ints("perm") {
                Some(p) => p.iter().map(|&a| norm_axis(a, rank)).collect::<Res<_>>()?,
                None => (0..rank).rev().collect(),
            };
            let mut seen = vec![false; rank];
            for &p in &perm {
                match seen.get_mut(p) {
                    Some(s) if !*s => *s = true,
                    _ => return Err(format!("perm {perm:?} is not a permutation of rank {rank}")),
                }
            }
            if perm.len() != rank {
                return Err(format!("perm {perm:?} is not a permutation of rank {rank}"));
            }
            let shape = perm
                .iter()
                .filter_map(|&p| x.shape.get(p).cloned())
                .collect();
            let value = if rank <= 1 { x.value.cloned() } else { None };
            vec![Output::with_value(x.dtype, shape, value)]
        }
        "Squeeze" => {
            let x = ctx.input(0)?;
            let rank = x.shape.len();
            let shape: Shape = match ctx.axes(13, 1)? {
                Some(axes) if !axes.is_empty() => {
                    let axes: Vec<usize> = axes
                        .iter()
                        .map(|&a| norm_axis(a, rank))
                        .collect::<Res<_>>()?;
                    for &a in &axes {
                        if x.shape
                            .get(a)
                            .and_then(Expr::as_constant)
                            .is_some_and(|d| d != 1)
                        {
                            return Err(format!("axis {a} has size {:?}, not 1", x.shape.get(a)));
                        }
                    }
                    x.shape
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| !axes.contains(i))
                        .map(|(_, d)| d.clone())
                        .collect()
                }
                _ => x
                    .shape
                    .iter()
                    .filter(|d| d.as_constant() != Some(1))
                    .cloned()
                    .collect(),
            };
            vec![Output::with_value(x.dtype, shape, x.value.cloned())]
        }
        "Unsqueeze" => {
            let x = ctx.input(0)?;
            let axes = ctx.axes(13, 1)?.ok_or("no axes given")?;
            let rank = x
                .shape
                .len()
                .checked_add(axes.len())
                .ok_or("rank overflows")?;
            let mut axes: Vec<usize> = axes
                .iter()
                .map(|&a| norm_axis(a, rank))
                .collect::<Res<_>>()?;
            axes.sort_unstable();
            axes.dedup();
            if x.shape.len() + axes.len() != rank {
                return Err("repeated axes".into());
            }
            let mut dims = x.shape.iter();
            let shape = (0..rank)
                .map(|i| {
                    if axes.contains(&i) {
                        Some(Expr::constant(1))
                    } else {
                        dims.next().cloned()
                    }
                })
                .collect::<Option<Shape>>()
                .ok_or("axes out of range")?;
            vec![Output::with_value(x.dtype, shape, x.value.cloned())]
        }
        "Concat" => concat(ctx)?,
        "Split" => split(ctx)?,
        "Slice" => slice(ctx)?,
        "Gather" => gather(ctx)?,
        "GatherElements" => {
            let (x, idx) = (ctx.input(0)?, ctx.input(1)?);
            vec![Output::new(x.dtype, idx.shape.clone())]
        }
        "GatherND" => {
            let (x, idx) = (ctx.input(0)?, ctx.input(1)?);
            let b = usize::try_from(ctx.attrs.int_or("batch_dims", 0))
                .map_err(|_| "negative batch_dims")?;
            let k = idx.shape.last().ok_or("indices are a scalar")?;
            let k = usize::try_from(konst(k, "the last indices dim")?)
                .map_err(|_| "negative index depth")?;
            let lead = idx.shape.len() - 1;
            let tail = b
                .checked_add(k)
                .filter(|&t| t <= x.shape.len())
                .ok_or("indices are deeper than the data")?;
            let shape = idx
                .shape
                .iter()
                .take(lead)
                .chain(x.shape.iter().skip(tail))
                .cloned()
                .collect();
            vec![Output::new(x.dtype, shape)]
        }
        "Shape" => {
            let x = ctx.input(0)?;
            let rank = i64::try_from(x.shape.len()).map_err(|_| "rank too large")?;
            let clamp = |v: i64| {
                if v < 0 {
                    (v.saturating_add(rank)).max(0)
                } else {
                    v.min(rank)
                }
            };
            let start = usize::try_from(clamp(ctx.attrs.int_or("start", 0))).unwrap_or(0);
            let end = usize::try_from(clamp(ctx.attrs.int_or("end", rank))).unwrap_or(0);
            let dims: Vec<Expr> = x
                .shape
                .iter()
                .skip(start)
                .take(end.saturating_sub(start))
                .cloned()
                .collect();
            let n = i64::try_from(dims.len()).map_err(|_| "rank too large")?;
            vec![Output::with_value(
                DType::I64,
                [Expr::constant(n)].into_iter().collect(),
                Some(Value::Ints(dims)),
            )]
        }
        "Size" => {
            let x = ctx.input(0)?;
            vec![Output::with_value(
                DType::I64,
                Shape::new(),
                Some(Value::Ints(vec![product(x.shape)?])),
            )]
        }
        "ConstantOfShape" => {
            let dims = ctx.ints(0)?;
            let fill = ctx.attrs.tensor("value");
            let dtype = fill.map_or(Ok(DType::F32), |t| {
                tensor::dtype(t.data_type, "value").map_err(|e| e.to_string())
            })?;
            let shape: Shape = dims.into_iter().collect();
            check_dims(&shape)?;
            let n = count(&shape);
            let value = match (fill, n) {
                (Some(t), Some(n)) => tensor::values(t, dtype, 1).and_then(|v| v.splat(n)),
                (None, Some(n)) => Value::Floats(vec![0.0]).splat(n),
                _ => None,
            };
            vec![Output::with_value(dtype, shape, value)]
        }
        "Range" => range(ctx)?,
        "Expand" => {
            let x = ctx.input(0)?;
            let target: Shape = ctx.ints(1)?.into_iter().collect();
            check_dims(&target)?;
            let shape = broadcast(x.shape, &target)?;
            let value = match (x.value, count(&shape)) {
                (Some(v), Some(n)) if v.len() == 1 => v.splat(n),
                (Some(v), Some(n)) if v.len() == usize::try_from(n).unwrap_or(usize::MAX) => {
                    Some(v.clone())
                }
                _ => None,
            };
            vec![Output::with_value(x.dtype, shape, value)]
        }
        "Tile" => {
            let x = ctx.input(0)?;
            let reps = ctx.ints(1)?;
            if reps.len() != x.shape.len() {
                return Err(format!("{} repeats for rank {}", reps.len(), x.shape.len()));
            }
            let shape = x
                .shape
                .iter()
                .zip(&reps)
                .map(|(d, r)| mul(d, r))
                .collect::<Res<Shape>>()?;
            vec![Output::new(x.dtype, shape)]
        }
        "Pad" => pad(ctx)?,
        _ if REDUCE.contains(&op) => reduce(op, ctx)?,
        "ArgMax" | "ArgMin" => {
            let x = ctx.input(0)?;
            let axis = norm_axis(ctx.attrs.int_or("axis", 0), x.shape.len())?;
            let keep = ctx.attrs.int_or("keepdims", 1) != 0;
            vec![Output::new(DType::I64, reduced(x.shape, &[axis], keep))]
        }
        "TopK" => {
            let x = ctx.input(0)?;
            let k = ctx.ints(1)?.into_iter().next().ok_or("K is empty")?;
            let axis = norm_axis(ctx.attrs.int_or("axis", -1), x.shape.len())?;
            let mut shape = x.shape.clone();
            if let Some(d) = shape.get_mut(axis) {
                *d = k;
            }
            vec![
                Output::new(x.dtype, shape.clone()),
                Output::new(DType::I64, shape),
            ]
        }
        "OneHot" => {
            let (idx, values) = (ctx.input(0)?, ctx.input(2)?);
            let depth = ctx.ints(1)?.into_iter().next().ok_or("depth is empty")?;
            let rank = idx.shape.len() + 1;
            let axis = norm_axis(ctx.attrs.int_or("axis", -1), rank)?;
            let mut shape = idx.shape.clone();
            shape.insert(axis, depth);
            vec![Output::new(values.dtype, shape)]
        }
        "EyeLike" => {
            let x = ctx.input(0)?;
            let dtype = match ctx.attrs.int("dtype") {
                Some(c) => {
                    tensor::dtype(i32::try_from(c).unwrap_or(-1), "").map_err(|e| e.to_string())?
                }
                None => x.dtype,
            };
            vec![Output::new(dtype, x.shape.clone())]
        }
        "Einsum" => einsum(ctx)?,
        "CenterCropPad" => {
            let x = ctx.input(0)?;
            let sizes = ctx.ints(1)?;
            let rank = x.shape.len();
            let axes: Vec<usize> = match ctx.attrs.ints("axes") {
                Some(a) => a.iter().map(|&a| norm_axis(a, rank)).collect::<Res<_>>()?,
                None => (0..rank).collect(),
            };
            if axes.len() != sizes.len() {
                return Err(format!("{} sizes for {} axes", sizes.len(), axes.len()));
            }
            let mut shape = x.shape.clone();
            for (a, d) in axes.into_iter().zip(sizes) {
                shape[a] = d;
            }
            check_dims(&shape)?;
            vec![Output::new(x.dtype, shape)]
        }
        "HannWindow" | "HammingWindow" | "BlackmanWindow" => {
            let n = ctx.ints(0)?.into_iter().next().ok_or("size is empty")?;
            let dtype = match ctx.attrs.int("output_datatype") {
                Some(c) => {
                    tensor::dtype(i32::try_from(c).unwrap_or(-1), "").map_err(|e| e.to_string())?
                }
                None => DType::F32,
            };
            let shape: Shape = [n].into_iter().collect();
            check_dims(&shape)?;
            vec![Output::new(dtype, shape)]
        }
        "NonZero" | "Unique" | "Compress" | "NonMaxSuppression" | "StringSplit" => {
            return Err(
                "the output shape depends on the input data; the file must give it in value_info"
                    .into(),
            );
        }
        _ => return Ok(None),
    };
    Ok(Some(out))
}

/// The element count of a constant shape, if it is one and small enough to hold as a value.
fn count(shape: &Shape) -> Option<u64> {
    let n = shape.iter().try_fold(1u64, |acc, d| {
        acc.checked_mul(u64::try_from(d.as_constant()?).ok()?)
    })?;
    (n <= MAX_VALUE_ELEMENTS).then_some(n)
}

/// Rejects negative constant dims in a shape built from a value.
fn check_dims(shape: &Shape) -> Res<()> {
    match shape
        .iter()
        .find(|d| d.as_constant().is_some_and(|c| c < 0))
    {
        Some(d) => Err(format!("negative dim {d:?} in shape {shape:?}")),
        None => Ok(()),
    }
}

fn reshape(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let x = ctx.input(0)?;
    let target = ctx.ints(1)?;
    let allow_zero = ctx.attrs.int_or("allowzero", 0) != 0;
    let mut out = Shape::with_capacity(target.len());
    let mut infer_at = None;
    for (i, t) in target.iter().enumerate() {
        match t.as_constant() {
            Some(0) if !allow_zero => out.push(x.shape.get(i).cloned().ok_or_else(|| {
                format!(
                    "target dim {i} is 0 but the input has rank {}",
                    x.shape.len()
                )
            })?),
            Some(-1) if infer_at.is_none() => {
                infer_at = Some(i);
                out.push(Expr::constant(1));
            }
            Some(c) if c < 0 => return Err(format!("invalid target dim {c} in {target:?}")),
            _ => out.push(t.clone()),
        }
    }
    if let Some(i) = infer_at {
        let known: Vec<Expr> = out
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != i)
            .map(|(_, d)| d.clone())
            .collect();
        let d = divide(x.shape, &known).map_err(|e| {
            format!(
                "cannot resolve -1 in {target:?} for input {:?}: {e}",
                x.shape
            )
        })?;
        if let Some(slot) = out.get_mut(i) {
            *slot = d;
        }
    }
    Ok(vec![Output::with_value(x.dtype, out, x.value.cloned())])
}

fn concat(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let inputs: Vec<_> = ctx.inputs.iter().flatten().collect();
    let first = inputs.first().ok_or("no inputs")?;
    let rank = first.shape.len();
    let axis = norm_axis(
        ctx.attrs.int("axis").ok_or("attribute `axis` is missing")?,
        rank,
    )?;
    let mut shape = first.shape.clone();
    for x in inputs.iter().skip(1) {
        if x.shape.len() != rank {
            return Err(format!(
                "input `{}` has rank {}, not {rank}",
                x.name,
                x.shape.len()
            ));
        }
        if let (Some(total), Some(d)) = (shape.get(axis).cloned(), x.shape.get(axis)) {
            shape[axis] = add(&total, d)?;
        }
    }
    let value = if axis == 0 {
        inputs
            .iter()
            .map(|x| x.value)
            .collect::<Option<Vec<_>>>()
            .and_then(value::concat)
    } else {
        None
    };
    Ok(vec![Output::with_value(first.dtype, shape, value)])
}

fn split(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let x = ctx.input(0)?;
    let axis = norm_axis(ctx.attrs.int_or("axis", 0), x.shape.len())?;
    let d = x.shape.get(axis).cloned().ok_or("bad axis")?;
    let n = ctx.node.output.len();
    let sizes: Vec<Expr> = match (ctx.opset < 13, ctx.opt(1)) {
        (true, _) if ctx.attrs.ints("split").is_some() => ctx
            .attrs
            .ints("split")
            .unwrap_or_default()
            .iter()
            .map(|&s| Expr::constant(s))
            .collect(),
        (false, Some(_)) => ctx.ints(1)?,
        _ => {
            if let Some(k) = ctx.attrs.int("num_outputs")
                && usize::try_from(k).ok() != Some(n)
            {
                return Err(format!("num_outputs is {k} but the node has {n} outputs"));
            }
            let k = i64::try_from(n).map_err(|_| "too many outputs")?;
            if k <= 0 {
                return Err("no outputs".into());
            }
            match d.as_constant() {
                Some(c) => {
                    let chunk = c.div_euclid(k) + i64::from(c.rem_euclid(k) != 0);
                    (0..k)
                        .map(|i| {
                            Expr::constant(
                                chunk.min(c.saturating_sub(chunk.saturating_mul(i)).max(0)),
                            )
                        })
                        .collect()
                }
                None => {
                    let chunk = d
                        .div_exact(&Expr::constant(k))
                        .ok_or_else(|| format!("{d:?} does not split in {k}"))?;
                    vec![chunk; n]
                }
            }
        }
    };
    let mut offset = 0usize;
    let mut out = Vec::with_capacity(sizes.len());
    for s in sizes {
        let mut shape = x.shape.clone();
        let value = match (
            x.value,
            s.as_constant().and_then(|c| usize::try_from(c).ok()),
        ) {
            (Some(v), Some(len)) if x.shape.len() == 1 => {
                let idx: Vec<usize> = (offset..offset.saturating_add(len)).collect();
                offset = offset.saturating_add(len);
                v.pick(&idx)
            }
            _ => None,
        };
        shape[axis] = s;
        out.push(Output::with_value(x.dtype, shape, value));
    }
    Ok(out)
}

/// Values at or beyond this bound mean "to the end" (exporters write `INT64_MAX` or `INT32_MAX`).
const TO_END: i64 = i32::MAX as i64;

/// The length of `d[start:end:step]` and, when everything is constant, the indices taken.
fn slice_dim(d: &Expr, start: &Expr, end: &Expr, step: i64) -> Res<(Expr, Option<Vec<usize>>)> {
    if step == 0 {
        return Err("slice step is 0".into());
    }
    if let (Some(d), Some(s), Some(e)) = (d.as_constant(), start.as_constant(), end.as_constant()) {
        let (d, s, e, st) = (
            i128::from(d),
            i128::from(s),
            i128::from(e),
            i128::from(step),
        );
        let s = if s < 0 { s + d } else { s };
        let e = if e < 0 { e + d } else { e };
        let (s, e) = if st > 0 {
            (s.clamp(0, d), e.clamp(0, d))
        } else {
            (s.clamp(0, d - 1), e.clamp(-1, d - 1))
        };
        let len = if st > 0 {
            (e - s + st - 1).div_euclid(st)
        } else {
            (s - e - st - 1).div_euclid(-st)
        }
        .max(0);
        let idx = (len <= i128::from(MAX_VALUE_ELEMENTS))
            .then(|| {
                (0..len)
                    .map(|i| usize::try_from(s + i * st).ok())
                    .collect::<Option<Vec<_>>>()
            })
            .flatten();
        return Ok((
            Expr::constant(i64::try_from(len).map_err(|_| "slice length overflows")?),
            idx,
        ));
    }
    let whole = |e: &Expr, forward: bool| {
        e.as_constant()
            .is_some_and(|c| if forward { c >= TO_END } else { c <= -TO_END })
    };
    if step == -1 && start.as_constant() == Some(-1) && whole(end, false) {
        return Ok((d.clone(), None));
    }
    if step != 1 {
        return Err(format!("symbolic slice of {d:?} with step {step}"));
    }
    let bound = |e: &Expr| -> Res<Expr> {
        match e.as_constant() {
            Some(c) if c >= TO_END => Ok(d.clone()),
            Some(c) if c < 0 => add(d, e),
            Some(c) => match d.as_constant() {
                Some(dc) => Ok(Expr::constant(c.min(dc))),
                None => Ok(e.clone()),
            },
            None => Ok(e.clone()),
        }
    };
    let len = sub(&bound(end)?, &bound(start)?)?;
    if len.as_constant().is_some_and(|c| c < 0) {
        return Ok((Expr::constant(0), None));
    }
    Ok((len, None))
}

fn slice(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let x = ctx.input(0)?;
    let rank = x.shape.len();
    let consts = |v: &[i64]| v.iter().map(|&c| Expr::constant(c)).collect::<Vec<_>>();
    let (starts, ends, axes, steps) = if ctx.opset < 10 {
        let starts = consts(
            ctx.attrs
                .ints("starts")
                .ok_or("attribute `starts` is missing")?,
        );
        let ends = consts(
            ctx.attrs
                .ints("ends")
                .ok_or("attribute `ends` is missing")?,
        );
        (
            starts,
            ends,
            ctx.attrs.ints("axes").map(<[i64]>::to_vec),
            None,
        )
    } else {
        let axes = if ctx.opt(3).is_some() {
            Some(ctx.const_ints(3)?)
        } else {
            None
        };
        let steps = if ctx.opt(4).is_some() {
            Some(ctx.const_ints(4)?)
        } else {
            None
        };
        (ctx.ints(1)?, ctx.ints(2)?, axes, steps)
    };
    let n = starts.len();
    let axes = axes.unwrap_or_else(|| (0..n).filter_map(|i| i64::try_from(i).ok()).collect());
    let steps = steps.unwrap_or_else(|| vec![1; n]);
    if ends.len() != n || axes.len() != n || steps.len() != n {
        return Err(format!(
            "starts, ends, axes and steps have lengths {n}, {}, {}, {}",
            ends.len(),
            axes.len(),
            steps.len()
        ));
    }
    let mut shape = x.shape.clone();
    let mut picked = None;
    for i in 0..n {
        let a = norm_axis(axes[i], rank)?;
        let (len, idx) = slice_dim(&shape[a], &starts[i], &ends[i], steps[i])?;
        if rank == 1 {
            picked = idx;
        }
        shape[a] = len;
    }
    let value = match (x.value, picked) {
        (Some(v), Some(idx)) => v.pick(&idx),
        (Some(v), None) if n == 0 => Some(v.clone()),
        _ => None,
    };
    Ok(vec![Output::with_value(x.dtype, shape, value)])
}

fn gather(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let (x, idx) = (ctx.input(0)?, ctx.input(1)?);
    let axis = norm_axis(ctx.attrs.int_or("axis", 0), x.shape.len())?;
    let shape: Shape = x
        .shape
        .iter()
        .take(axis)
        .chain(idx.shape.iter())
        .chain(x.shape.iter().skip(axis + 1))
        .cloned()
        .collect();
    let value = match (x.value, idx.value.and_then(Value::const_ints)) {
        (Some(v), Some(indices)) if x.shape.len() == 1 => {
            let len = i64::try_from(v.len()).unwrap_or(i64::MAX);
            indices
                .iter()
                .map(|&i| usize::try_from(if i < 0 { i.saturating_add(len) } else { i }).ok())
                .collect::<Option<Vec<_>>>()
                .and_then(|at| v.pick(&at))
        }
        _ => None,
    };
    Ok(vec![Output::with_value(x.dtype, shape, value)])
}

fn range(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let x = ctx.input(0)?;
    let scalar = |i: usize| -> Res<Expr> {
        ctx.ints(i)?
            .into_iter()
            .next()
            .ok_or_else(|| format!("input {i} is empty"))
    };
    let float_scalar = |i: usize| {
        ctx.input(i)
            .ok()
            .and_then(|inp| inp.value)
            .and_then(Value::floats)
            .and_then(|v| v.first().copied())
    };
    if x.dtype.is_float() {
        let (s, l, d) = (float_scalar(0), float_scalar(1), float_scalar(2));
        let (Some(s), Some(l), Some(d)) = (s, l, d) else {
            return Err("float Range bounds are not known".into());
        };
        let n = ((l - s) / d).ceil().max(0.0);
        if !n.is_finite() || n > 9.0e18 {
            return Err("Range length overflows".into());
        }
        return Ok(vec![Output::new(
            x.dtype,
            [Expr::constant(n as i64)].into_iter().collect(),
        )]);
    }
    let (start, limit, delta) = (scalar(0)?, scalar(1)?, scalar(2)?);
    let delta_c = konst(&delta, "the Range delta")?;
    if delta_c == 0 {
        return Err("Range delta is 0".into());
    }
    if let (Some(s), Some(l)) = (start.as_constant(), limit.as_constant()) {
        let (s, l, d) = (i128::from(s), i128::from(l), i128::from(delta_c));
        let n = if d > 0 {
            (l - s + d - 1).div_euclid(d)
        } else {
            (s - l - d - 1).div_euclid(-d)
        }
        .max(0);
        let n64 = i64::try_from(n).map_err(|_| "Range length overflows")?;
        let value = (n <= i128::from(MAX_VALUE_ELEMENTS))
            .then(|| {
                (0..n)
                    .map(|i| i64::try_from(s + i * d).ok().map(Expr::constant))
                    .collect::<Option<Vec<_>>>()
            })
            .flatten()
            .map(Value::Ints);
        return Ok(vec![Output::with_value(
            x.dtype,
            [Expr::constant(n64)].into_iter().collect(),
            value,
        )]);
    }
    let n = match delta_c {
        1 => sub(&limit, &start)?,
        -1 => sub(&start, &limit)?,
        _ => sub(&limit, &start)?
            .div_exact(&delta)
            .ok_or_else(|| format!("symbolic Range from {start:?} to {limit:?} by {delta_c}"))?,
    };
    Ok(vec![Output::new(x.dtype, [n].into_iter().collect())])
}

fn pad(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let x = ctx.input(0)?;
    let rank = x.shape.len();
    let pads: Vec<Expr> = if ctx.opset < 11 {
        let p = ctx
            .attrs
            .ints("pads")
            .or_else(|| ctx.attrs.ints("paddings"))
            .ok_or("attribute `pads` is missing")?;
        p.iter().map(|&c| Expr::constant(c)).collect()
    } else {
        ctx.ints(1)?
    };
    let axes: Vec<usize> = match ctx.opt(3) {
        Some(_) if ctx.opset >= 18 => ctx
            .const_ints(3)?
            .iter()
            .map(|&a| norm_axis(a, rank))
            .collect::<Res<_>>()?,
        _ => (0..rank).collect(),
    };
    let k = axes.len();
    if pads.len() != 2 * k {
        return Err(format!("{} pads for {k} axes", pads.len()));
    }
    let mut shape = x.shape.clone();
    for (i, &a) in axes.iter().enumerate() {
        shape[a] = add(&add(&shape[a], &pads[i])?, &pads[i + k])?;
    }
    Ok(vec![Output::new(x.dtype, shape)])
}

/// `shape` reduced over `axes` (kept as 1s with `keep`).
fn reduced(shape: &Shape, axes: &[usize], keep: bool) -> Shape {
    shape
        .iter()
        .enumerate()
        .filter_map(|(i, d)| match (axes.contains(&i), keep) {
            (false, _) => Some(d.clone()),
            (true, true) => Some(Expr::constant(1)),
            (true, false) => None,
        })
        .collect()
}

fn reduce(op: &str, ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let x = ctx.input(0)?;
    let rank = x.shape.len();
    let from = if op == "ReduceSum" { 13 } else { 18 };
    let axes = ctx.axes(from, 1)?.unwrap_or_default();
    let keep = ctx.attrs.int_or("keepdims", 1) != 0;
    if axes.is_empty() && ctx.attrs.int_or("noop_with_empty_axes", 0) != 0 {
        return Ok(vec![Output::new(x.dtype, x.shape.clone())]);
    }
    let axes: Vec<usize> = if axes.is_empty() {
        (0..rank).collect()
    } else {
        axes.iter()
            .map(|&a| norm_axis(a, rank))
            .collect::<Res<_>>()?
    };
    Ok(vec![Output::new(x.dtype, reduced(x.shape, &axes, keep))])
}

fn einsum(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let eq: String = ctx
        .attrs
        .string("equation")
        .ok_or("attribute `equation` is missing")?
        .split_whitespace()
        .collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    let inputs: Vec<_> = ctx.inputs.iter().flatten().collect();
    if terms.len() != inputs.len() {
        return Err(format!(
            "equation `{eq}` has {} operands for {} inputs",
            terms.len(),
            inputs.len()
        ));
    }
    let mut dims: Vec<(char, Expr)> = Vec::new();
    let mut counts: Vec<(char, usize)> = Vec::new();
    let mut ellipsis = Shape::new();
    for (term, x) in terms.iter().zip(&inputs) {
        let (head, tail) = term.split_once("...").unwrap_or((term, ""));
        let labels = head.chars().count() + tail.chars().count();
        let extra = x
            .shape
            .len()
            .checked_sub(labels)
            .ok_or_else(|| format!("`{term}` has more labels than `{}` has dims", x.name))?;
        if extra > 0 && !term.contains("...") {
            return Err(format!(
                "`{term}` has {labels} labels for rank {}",
                x.shape.len()
            ));
        }
        let head_n = head.chars().count();
        let ell: Shape = x.shape.iter().skip(head_n).take(extra).cloned().collect();
        ellipsis = broadcast(&ellipsis, &ell)?;
        let named = head
            .chars()
            .zip(x.shape.iter())
            .chain(tail.chars().zip(x.shape.iter().skip(head_n + extra)));
        for (c, d) in named {
            match dims.iter_mut().find(|(l, _)| *l == c) {
                Some((_, old)) if old.as_constant() == Some(1) => *old = d.clone(),
                Some(_) => {}
                None => dims.push((c, d.clone())),
            }
            match counts.iter_mut().find(|(l, _)| *l == c) {
                Some((_, n)) => *n += 1,
                None => counts.push((c, 1)),
            }
        }
    }
    let out_labels: String = match rhs {
        Some(r) => r.to_owned(),
        None => {
            let mut once: Vec<char> = counts
                .iter()
                .filter(|(_, n)| *n == 1)
                .map(|(c, _)| *c)
                .collect();
            once.sort_unstable();
            std::iter::once("...".to_owned())
                .chain(once.into_iter().map(String::from))
                .collect()
        }
    };
    let (head, tail) = out_labels.split_once("...").unwrap_or((&out_labels, ""));
    let has_ellipsis = out_labels.contains("...");
    let lookup = |c: char| {
        dims.iter()
            .find(|(l, _)| *l == c)
            .map(|(_, d)| d.clone())
            .ok_or_else(|| format!("output label `{c}` is not in any input"))
    };
    let mut shape = head.chars().map(lookup).collect::<Res<Shape>>()?;
    if has_ellipsis {
        shape.extend(ellipsis);
    }
    shape.extend(tail.chars().map(lookup).collect::<Res<Vec<_>>>()?);
    let first = inputs.first().ok_or("no inputs")?;
    Ok(vec![Output::new(first.dtype, shape)])
}
