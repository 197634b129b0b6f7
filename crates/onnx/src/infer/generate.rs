//! Generators: ops whose output shape comes from a value or an attribute rather than from an
//! input's shape: `Shape`, `Size`, `ConstantOfShape`, `Range`, `EyeLike` and the window
//! functions (`HannWindow`, `HammingWindow`, `BlackmanWindow`).
//!
//! `Shape` turns a (possibly symbolic) shape into a value; `Size` its element count;
//! `ConstantOfShape` and `Range` carry their values when small.

use memplan_ir::{DType, Expr, Shape};

use super::{Ctx, InferError, Output, Res, count, product, sub};
use crate::tensor::{self, MAX_VALUE_ELEMENTS};
use crate::value::Value;

pub(super) fn infer(op: &str, ctx: &Ctx<'_>) -> Res<Option<Vec<Output>>> {
    let out =
        match op {
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
                ctx.check_dims(&shape)?;
                let n = count(&shape);
                let value = match (fill, n) {
                    (Some(t), Some(n)) => tensor::values(t, dtype, 1).and_then(|v| v.splat(n)),
                    (None, Some(n)) => Value::Floats(vec![0.0]).splat(n),
                    _ => None,
                };
                vec![Output::with_value(dtype, shape, value)]
            }
            "Range" => range(ctx)?,
            "EyeLike" => {
                let x = ctx.input(0)?;
                let dtype = match ctx.attrs.int("dtype") {
                    Some(c) => tensor::dtype(i32::try_from(c).unwrap_or(-1), "")
                        .map_err(|e| e.to_string())?,
                    None => x.dtype,
                };
                vec![Output::new(dtype, x.shape.clone())]
            }
            "HannWindow" | "HammingWindow" | "BlackmanWindow" => {
                let n = ctx.ints(0)?.into_iter().next().ok_or("size is empty")?;
                let dtype = match ctx.attrs.int("output_datatype") {
                    Some(c) => tensor::dtype(i32::try_from(c).unwrap_or(-1), "")
                        .map_err(|e| e.to_string())?,
                    None => DType::F32,
                };
                let shape: Shape = [n].into_iter().collect();
                ctx.check_dims(&shape)?;
                vec![Output::new(dtype, shape)]
            }
            _ => return Ok(None),
        };
    Ok(Some(out))
}

fn range(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let x = ctx.input(0)?;
    let scalar = |i: usize| -> Res<Expr> {
        ctx.ints(i)?
            .into_iter()
            .next()
            .ok_or_else(|| format!("input {i} is empty").into())
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
            let input = ctx.input(0)?.name.to_owned();
            return Err(InferError::UnknownValue { input });
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
    let delta_c = ctx.konst(&delta, "the Range delta")?;
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
        _ => sub(&limit, &start)?.div_exact(&delta).ok_or_else(|| {
            format!(
                "symbolic Range from {} to {} by {delta_c}",
                ctx.show(&start),
                ctx.show(&limit)
            )
        })?,
    };
    Ok(vec![Output::new(x.dtype, [n].into_iter().collect())])
}
