//! Indexing: `Gather`, `GatherElements`, `GatherND` and `OneHot`, whose output shapes come
//! from the indices' shape (and `OneHot`'s depth).
//!
//! `Gather` of a 1-D known value with constant indices carries the picked value, which is how
//! `Shape` → `Gather` picks one dim of a shape.

use memplan_ir::Shape;

use super::{Ctx, Output, Res, norm_axis};
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
            let b = usize::try_from(ctx.attrs.int_or("batch_dims", 0))
                .map_err(|_| "negative batch_dims")?;
            let k = idx.shape.last().ok_or("indices are a scalar")?;
            let k = usize::try_from(ctx.konst(k, "the last indices dim")?)
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
        "OneHot" => {
            let (idx, values) = (ctx.input(0)?, ctx.input(2)?);
            let depth = ctx.ints(1)?.into_iter().next().ok_or("depth is empty")?;
            let rank = idx.shape.len() + 1;
            let axis = norm_axis(ctx.attrs.int_or("axis", -1), rank)?;
            let mut shape = idx.shape.clone();
            shape.insert(axis, depth);
            vec![Output::new(values.dtype, shape)]
        }
        _ => return Ok(None),
    };
    Ok(Some(out))
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
