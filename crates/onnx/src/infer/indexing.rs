//! Indexing: `Gather`, `GatherElements`, `GatherND` and `OneHot`, whose output shapes come
//! from the indices' shape (and `OneHot`'s depth).
//!
//! `Gather` of a 1-D known value with constant indices carries the picked value, which is how
//! `Shape` → `Gather` picks one dim of a shape. `OneHot` of known indices, depth and values
//! carries its value too: the TorchScript exporter builds `repeat_interleave`'s `Tile`
//! repeats as `OneHot([1], 3, [1, k])`, that is `[1, k, 1]`.

use memplan_ir::{Expr, Shape};

use super::{Ctx, InferError, Input, Output, Res, norm_axis};
use crate::tensor::MAX_VALUE_ELEMENTS;
use crate::value::Value;

pub(super) fn infer(op: &str, ctx: &Ctx<'_>) -> Res<Option<Vec<Output>>> {
    let out = match op {
        "Gather" => gather(ctx)?,
        "GatherElements" => {
            let (x, idx) = (ctx.input(0)?, ctx.input(1)?);
            vec![Output::new(x.dtype, idx.shape.clone())]
        }
        "GatherND" => {
            let (x, idx) = (ctx.input(0)?, ctx.input(1)?);
            let batch_dims = ctx.attrs.int_or("batch_dims", 0);
            let b = usize::try_from(batch_dims).map_err(|_| InferError::AttrTooSmall {
                name: "batch_dims".to_owned(),
                value: batch_dims,
                min: 0,
            })?;
            let k = idx.last()?;
            let k = usize::try_from(ctx.konst(k, "the last indices dim")?).map_err(|_| {
                InferError::NegativeDim {
                    dim: ctx.show(k),
                    shape: ctx.show_dims(idx.shape),
                }
            })?;
            let lead = idx.shape.len() - 1;
            let tail =
                b.checked_add(k)
                    .filter(|&t| t <= x.shape.len())
                    .ok_or(InferError::IndexDepth {
                        depth: k,
                        batch_dims: b,
                        rank: x.shape.len(),
                    })?;
            let shape = idx
                .shape
                .iter()
                .take(lead)
                .chain(x.shape.iter().skip(tail))
                .cloned()
                .collect();
            vec![Output::new(x.dtype, shape)]
        }
        "OneHot" => {
            let (idx, values) = (ctx.input(0)?, ctx.input(2)?);
            let depth = ctx.first_int(1)?;
            let rank = idx.shape.len() + 1;
            let axis = norm_axis(ctx.attrs.int_or("axis", -1), rank)?;
            let mut shape = idx.shape.clone();
            shape.insert(axis, depth.clone());
            let value = one_hot_value(idx, &depth, values, axis);
            vec![Output::with_value(values.dtype, shape, value)]
        }
        _ => return Ok(None),
    };
    Ok(Some(out))
}

/// `OneHot`'s value when its indices and depth are constants and its values (off, on) known,
/// and it is small: each output element picks `on` where its index along `axis` is the index
/// the input holds there (negative indices count from `depth`), else `off`.
fn one_hot_value(idx: Input<'_>, depth: &Expr, values: Input<'_>, axis: usize) -> Option<Value> {
    let depth = usize::try_from(depth.as_constant()?).ok()?;
    let indices = idx.value?.const_ints()?;
    let values = values.value.filter(|v| v.len() == 2)?;
    let count = indices.len().checked_mul(depth)?;
    if count > MAX_VALUE_ELEMENTS as usize {
        return None;
    }
    // `indices` is row-major over the indices' shape: the dims before `axis`, then after.
    let inner = idx.shape.iter().skip(axis).try_fold(1usize, |acc, d| {
        acc.checked_mul(usize::try_from(d.as_constant()?).ok()?)
    })?;
    if indices.is_empty() {
        return values.pick(&[]);
    }
    if inner == 0 || indices.len() % inner != 0 {
        return None;
    }
    let depth_i = i64::try_from(depth).ok()?;
    let mut picks = Vec::with_capacity(count);
    for outer in indices.chunks(inner) {
        for d in 0..depth_i {
            picks.extend(outer.iter().map(|&i| {
                let i = if i < 0 { i.saturating_add(depth_i) } else { i };
                usize::from(i == d)
            }));
        }
    }
    values.pick(&picks)
}

fn gather(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let (x, idx) = (ctx.input(0)?, ctx.input(1)?);
    let axis = norm_axis(ctx.attrs.int_or("axis", 0), x.shape.len())?;
    // Constant indices into a constant dim must lie in `-dim..dim`.
    if let (Some(indices), Some(dim)) = (
        idx.value.and_then(Value::const_ints),
        x.shape.get(axis).and_then(Expr::as_constant),
    ) && let Some(&index) = indices.iter().find(|&&i| i < -dim || i >= dim)
    {
        return Err(InferError::IndexRange { index, dim });
    }
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
