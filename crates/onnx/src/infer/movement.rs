//! Data movement: `Reshape`, `Flatten`, `Transpose`, `Squeeze`, `Unsqueeze`, `Concat`,
//! `Split`, `Slice`, `Expand`, `Tile`, `Pad` and `CenterCropPad`: ops that rearrange, copy or
//! pad elements without arithmetic on them; and `Optional`, `OptionalGetElement` and
//! `OptionalHasElement`, since an optional tensor is planned as its tensor.
//!
//! These are the ops through which shape values flow, so most of them also carry the input's
//! value: `Slice`, `Concat`, `Squeeze`, `Unsqueeze` and `Reshape` rearrange it. `Slice` with a
//! symbolic dim assumes that constant bounds lie inside it, and that a symbolic end does not
//! run past the dim (as in `position_ids[:, :seq]`), which is what exporters produce. Where a
//! target shape, repeat count or padding is a runtime value, module `data_dependent` gives the
//! output instead.

use memplan_ir::{Expr, Shape};

use super::{Counted, InferError, Quantity, Ranks, Refusal};
use super::{Ctx, Output, Res, add, broadcast, count, divide, mul, norm_axis, product, sub};
use crate::tensor::MAX_VALUE_ELEMENTS;
use crate::value;

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
                    _ => return Err(InferError::Permutation { perm, rank }),
                }
            }
            if perm.len() != rank {
                return Err(InferError::Permutation { perm, rank });
            }
            let shape = perm
                .iter()
                .filter_map(|&p| x.shape.get(p).cloned())
                .collect();
            let value = if rank <= 1 {
                x.value.cloned()
            } else {
                x.value.and_then(|v| transposed(v, x.shape, &perm))
            };
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
                        if let Some(d) = x
                            .shape
                            .get(a)
                            .and_then(Expr::as_constant)
                            .filter(|&d| d != 1)
                        {
                            return Err(InferError::Squeeze { axis: a, dim: d });
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
            let given = ctx.axes(13, 1)?.ok_or(InferError::NoAxes)?;
            let rank = x
                .shape
                .len()
                .checked_add(given.len())
                .ok_or(InferError::overflow(Quantity::Rank))?;
            let mut axes: Vec<usize> = given
                .iter()
                .map(|&a| norm_axis(a, rank))
                .collect::<Res<_>>()?;
            axes.sort_unstable();
            axes.dedup();
            if x.shape.len() + axes.len() != rank {
                return Err(InferError::RepeatedAxis { axes: given });
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
                .ok_or(InferError::RepeatedAxis { axes: given })?;
            vec![Output::with_value(x.dtype, shape, x.value.cloned())]
        }
        // An optional tensor is planned as its tensor.
        "Optional" | "OptionalGetElement" => match ctx.opt(0) {
            Some(x) => vec![Output::with_value(
                x.dtype,
                x.shape.clone(),
                x.value.cloned(),
            )],
            None => vec![empty_optional(op, ctx)?],
        },
        "OptionalHasElement" => vec![Output::new(memplan_ir::DType::Bool, Shape::new())],
        "Concat" => concat(ctx)?,
        "Split" => split(ctx)?,
        "Slice" => slice(ctx)?,
        "Expand" => {
            let x = ctx.input(0)?;
            let target: Shape = ctx.ints(1)?.into_iter().collect();
            ctx.check_dims(&target)?;
            let shape = broadcast(ctx, x.shape, &target)?;
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
                return Err(InferError::Count {
                    counted: Counted::Repeats,
                    count: reps.len(),
                    expected: x.shape.len(),
                });
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
        "CenterCropPad" => {
            let x = ctx.input(0)?;
            let sizes = ctx.ints(1)?;
            let rank = x.shape.len();
            let axes: Vec<usize> = match ctx.attrs.ints("axes") {
                Some(a) => a.iter().map(|&a| norm_axis(a, rank)).collect::<Res<_>>()?,
                None => (0..rank).collect(),
            };
            if axes.len() != sizes.len() {
                return Err(InferError::Count {
                    counted: Counted::Sizes,
                    count: sizes.len(),
                    expected: axes.len(),
                });
            }
            let mut shape = x.shape.clone();
            for (a, d) in axes.into_iter().zip(sizes) {
                shape[a] = d;
            }
            ctx.check_dims(&shape)?;
            vec![Output::new(x.dtype, shape)]
        }
        _ => return Ok(None),
    };
    Ok(Some(out))
}

fn reshape(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let x = ctx.input(0)?;
    let target = ctx.ints(1)?;
    let allow_zero = ctx.attrs.int_or("allowzero", 0) != 0;
    let mut out = Shape::with_capacity(target.len());
    let mut infer_at = None;
    for (i, t) in target.iter().enumerate() {
        match t.as_constant() {
            Some(0) if !allow_zero => {
                out.push(x.shape.get(i).cloned().ok_or(InferError::ReshapeCopy {
                    axis: i,
                    rank: x.shape.len(),
                })?)
            }
            Some(-1) if infer_at.is_none() => {
                infer_at = Some(i);
                out.push(Expr::constant(1));
            }
            Some(c) if c < 0 => {
                return Err(InferError::ReshapeTarget {
                    dim: c,
                    target: ctx.show_dims(&target),
                });
            }
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
        let d = divide(ctx.symbols, x.shape, &known).map_err(|e| InferError::ReshapeInfer {
            target: ctx.show_dims(&target),
            input: ctx.show_dims(x.shape),
            source: Box::new(e),
        })?;
        if let Some(slot) = out.get_mut(i) {
            *slot = d;
        }
    }
    Ok(vec![Output::with_value(x.dtype, out, x.value.cloned())])
}

fn concat(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let inputs: Vec<_> = ctx.inputs.iter().flatten().collect();
    let first = inputs.first().ok_or(InferError::NoInputs)?;
    let rank = first.shape.len();
    let axis = norm_axis(ctx.required_int("axis")?, rank)?;
    let mut shape = first.shape.clone();
    for x in inputs.iter().skip(1) {
        if x.shape.len() != rank {
            return Err(InferError::rank(
                x.name,
                x.shape.len(),
                Ranks::Exactly(rank),
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
    let given = ctx.attrs.int_or("axis", 0);
    let axis = norm_axis(given, x.shape.len())?;
    let d = x.shape.get(axis).cloned().ok_or(InferError::Axis {
        axis: given,
        rank: x.shape.len(),
    })?;
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
                return Err(InferError::SplitOutputs {
                    attr: k,
                    outputs: n,
                });
            }
            let k = i64::try_from(n).map_err(|_| InferError::overflow(Quantity::Count))?;
            if k <= 0 {
                return Err(InferError::OutputCount { count: 0, index: 0 });
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
                    let chunk = d.div_exact(&Expr::constant(k)).ok_or_else(|| {
                        InferError::NotDivisible {
                            what: Quantity::Dim,
                            dim: ctx.show(&d),
                            divisor: format!("{k} outputs"),
                        }
                    })?;
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

/// An empty `Optional` of its `type` attribute: a tensor type with constant dims is planned
/// at its bytes (what it holds when present, as optionals are); a sequence of such tensors has
/// no items, `[0, item dims]`.
fn empty_optional(op: &str, ctx: &Ctx<'_>) -> Res<Output> {
    use crate::proto::tensor_shape_proto::dimension::Value as D;
    use crate::proto::type_proto::Value as V;
    let refuse = || InferError::Unsupported {
        op: op.to_owned(),
        why: Refusal::OptionalType,
    };
    let mut t = ctx.attrs.type_proto("type").and_then(|t| t.value.as_ref());
    let mut shape = Shape::new();
    if let Some(V::SequenceType(s)) = t {
        t = s.elem_type.as_ref().and_then(|t| t.value.as_ref());
        shape.push(Expr::constant(0));
    }
    let Some(V::TensorType(tt)) = t else {
        return Err(refuse());
    };
    let dtype = super::elementwise::dtype_attr("type", i64::from(tt.elem_type))?;
    for d in &tt.shape.as_ref().ok_or_else(refuse)?.dim {
        match d.value {
            Some(D::DimValue(v)) if v >= 0 => shape.push(Expr::constant(v)),
            _ => return Err(refuse()),
        }
    }
    Ok(Output::new(dtype, shape))
}

/// Values at or beyond this bound mean "to the end" (exporters write `INT64_MAX` or `INT32_MAX`).
const TO_END: i64 = i32::MAX as i64;

/// The length of `d[start:end:step]` and, when everything is constant, the indices taken.
fn slice_dim(d: &Expr, start: &Expr, end: &Expr, step: i64) -> Res<(Expr, Option<Vec<usize>>)> {
    if step == 0 {
        return Err(InferError::Zero {
            what: Quantity::SliceStep,
        });
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
            Expr::constant(
                i64::try_from(len).map_err(|_| InferError::overflow(Quantity::SliceLength))?,
            ),
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
        return Err(InferError::SymbolicSlice { step });
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
        let starts = consts(ctx.required_ints("starts")?);
        let ends = consts(ctx.required_ints("ends")?);
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
        return Err(InferError::SliceLengths {
            starts: n,
            ends: ends.len(),
            axes: axes.len(),
            steps: steps.len(),
        });
    }
    let mut shape = x.shape.clone();
    // The indices each axis keeps, when every one is known (an axis not sliced keeps all).
    let dims = x.value.and_then(|v| value_dims(x.shape, v));
    let mut picked: Option<Vec<Vec<usize>>> = dims
        .as_ref()
        .map(|dims| dims.iter().map(|&d| (0..d).collect()).collect());
    for i in 0..n {
        let a = norm_axis(axes[i], rank)?;
        let (len, idx) = slice_dim(&shape[a], &starts[i], &ends[i], steps[i])?;
        match (picked.as_mut().and_then(|p| p.get_mut(a)), idx) {
            (Some(slot), Some(idx)) => *slot = idx,
            _ => picked = None,
        }
        shape[a] = len;
    }
    let value = match (x.value, picked) {
        (Some(v), Some(axes)) => dims
            .and_then(|d| gather_flat(&d, &axes))
            .and_then(|at| v.pick(&at)),
        _ => None,
    };
    Ok(vec![Output::with_value(x.dtype, shape, value)])
}

/// The dims of a tensor whose value `v` is known, when all are constants and their product is
/// the value's length, which is not 0 (so that no dim is larger than a tracked value).
fn value_dims(shape: &Shape, v: &value::Value) -> Option<Vec<usize>> {
    let dims: Vec<usize> = shape
        .iter()
        .map(|d| usize::try_from(d.as_constant()?).ok())
        .collect::<Option<_>>()?;
    let total = dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))?;
    (total == v.len() && total > 0).then_some(dims)
}

/// The flat (row-major) positions, in a tensor of dims `dims`, of the elements at every
/// combination of the indices `axes[k]` on each axis `k`, in the result's row-major order;
/// `None` when the result would be larger than a tracked value.
fn gather_flat(dims: &[usize], axes: &[Vec<usize>]) -> Option<Vec<usize>> {
    let total = axes
        .iter()
        .try_fold(1usize, |acc, a| acc.checked_mul(a.len()))?;
    if total > MAX_VALUE_ELEMENTS as usize {
        return None;
    }
    let mut at = vec![0usize];
    for (k, picks) in axes.iter().enumerate() {
        let extent = *dims.get(k)?;
        let mut next = Vec::with_capacity(at.len() * picks.len());
        for &base in &at {
            for &i in picks {
                next.push(base.checked_mul(extent)?.checked_add(i)?);
            }
        }
        at = next;
    }
    Some(at)
}

/// A small value transposed by `perm`, when the input's dims are constants.
fn transposed(v: &value::Value, dims: &Shape, perm: &[usize]) -> Option<value::Value> {
    let dims = value_dims(dims, v)?;
    // Output axis `k` runs over input axis `perm[k]`; the flat position of an output element
    // is that of the input element whose index on axis `perm[k]` is the output's on `k`.
    let strides: Vec<usize> = {
        let mut s = vec![1usize; dims.len()];
        for k in (0..dims.len().saturating_sub(1)).rev() {
            s[k] = s[k + 1].checked_mul(dims[k + 1])?;
        }
        s
    };
    let mut at = vec![0usize];
    for &p in perm {
        let (extent, stride) = (*dims.get(p)?, *strides.get(p)?);
        let mut next = Vec::with_capacity(at.len().checked_mul(extent)?);
        for &base in &at {
            for i in 0..extent {
                next.push(base.checked_add(i.checked_mul(stride)?)?);
            }
        }
        at = next;
    }
    v.pick(&at)
}

fn pad(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let x = ctx.input(0)?;
    let rank = x.shape.len();
    let pads: Vec<Expr> = if ctx.opset < 11 {
        let p = ctx
            .attrs
            .ints("pads")
            .or_else(|| ctx.attrs.ints("paddings"))
            .ok_or_else(|| InferError::missing_attr("pads"))?;
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
        return Err(InferError::Count {
            counted: Counted::Pads,
            count: pads.len(),
            expected: 2 * k,
        });
    }
    let mut shape = x.shape.clone();
    for (i, &a) in axes.iter().enumerate() {
        shape[a] = add(&add(&shape[a], &pads[i])?, &pads[i + k])?;
    }
    Ok(vec![Output::new(x.dtype, shape)])
}
