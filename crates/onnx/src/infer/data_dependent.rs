//! Outputs whose shape depends on data: what each op knows about its size when it cannot know
//! its dims.
//!
//! [`infer`] handles the ops whose output is always data-dependent (`NonZero`, `Unique`,
//! `Compress`, `NonMaxSuppression`); [`fallback`] gives the data-dependent form of an op whose
//! ordinary rule failed because an input's value (a target shape, axes, slice bounds, a count)
//! is only known at run time. Each data-dependent dim is a [`Dim::Data`], which the importer
//! turns into a fresh symbol, stating what the op knows:
//!
//! - **equal**: the element count does not depend on the data even though the dims do
//!   (`Reshape`, `Squeeze`, `Unsqueeze` with runtime targets): the output carries the count
//!   ([`Output::with_element_count`]), so its bytes are exact;
//! - **bounded**: the dim is at most a known expression (`Slice`, `Split` and reductions with
//!   runtime parameters ≤ the input's dim; `NonZero`, `Unique` and `Compress` ≤ the input's
//!   elements; `TopK` ≤ its axis; `NonMaxSuppression` ≤ batch × classes × boxes per class);
//! - **unbounded**: nothing bounds it (`Expand`, `Tile`, `Pad`, `ConstantOfShape`, `Range`,
//!   `Resize`, `OneHot`, `CenterCropPad`, the windows): the user binds the symbol.
//!
//! Invariant: a bound is never below the true value for any input data the op accepts; where
//! the rank itself is unknown (a target shape of unknown length) the rule still fails.

use memplan_ir::{DType, Expr, Shape};

use super::{
    Along, Ctx, Dim, InferError, Input, Output, Quantity, Ranks, Res, add, norm_axis, product,
};
use crate::import::MAX_RANK;
use crate::tensor;

/// Ops whose output shape always depends on the data.
pub(super) fn infer(op: &str, ctx: &Ctx<'_>) -> Res<Option<Vec<Output>>> {
    let out = match op {
        "NonZero" => {
            let x = ctx.input(0)?;
            let rank = x.rank_value()?;
            // At most one non-zero element a fibre along an axis (a one-hot mask of distinct
            // indices, see `along`): at most one a fibre, the product of the other dims.
            let all: Vec<usize> = (0..x.shape.len()).collect();
            let count = match Along::divides(x.along, &all) {
                Some(a) => product(
                    x.shape
                        .iter()
                        .enumerate()
                        .filter(|&(i, _)| i != a)
                        .map(|(_, d)| d),
                )?,
                None => product(x.shape)?,
            };
            vec![Output::with_dims(
                DType::I64,
                vec![Dim::Known(Expr::constant(rank)), Dim::Data(Some(count))],
            )]
        }
        "Unique" => unique(ctx)?,
        "Compress" => {
            let x = ctx.input(0)?;
            let dims = match ctx.attrs.int("axis") {
                Some(a) => {
                    let axis = norm_axis(a, x.shape.len())?;
                    with_data_axes(x.shape, &[axis], true)
                }
                None => vec![Dim::Data(Some(product(x.shape)?))],
            };
            vec![Output::with_dims(x.dtype, dims)]
        }
        "NonMaxSuppression" => nms(ctx)?,
        _ => return Ok(None),
    };
    Ok(Some(out))
}

/// The data-dependent form of `op`, for when its ordinary rule needs a runtime value; `None`
/// when the op has none.
pub(super) fn fallback(op: &str, ctx: &Ctx<'_>) -> Res<Option<Vec<Output>>> {
    let x = || ctx.input(0);
    let out = match op {
        "Reshape" => {
            let x = x()?;
            let rank = value_len(ctx, 1)?;
            equal_count(x, rank)?
        }
        "Squeeze" => {
            let x = x()?;
            let k = value_len(ctx, 1)?;
            let rank = x
                .shape
                .len()
                .checked_sub(k)
                .ok_or(InferError::TooManyAxes {
                    axes: k,
                    rank: x.shape.len(),
                })?;
            let ones = x
                .shape
                .iter()
                .filter(|d| d.as_constant() == Some(1))
                .count();
            if ones == k {
                // Exactly the unit dims go.
                let shape: Shape = x
                    .shape
                    .iter()
                    .filter(|d| d.as_constant() != Some(1))
                    .cloned()
                    .collect();
                vec![Output::new(x.dtype, shape)]
            } else {
                equal_count(x, rank)?
            }
        }
        "Unsqueeze" => {
            let x = x()?;
            let rank = x
                .shape
                .len()
                .checked_add(value_len(ctx, 1)?)
                .ok_or(InferError::overflow(Quantity::Rank))?;
            if x.shape.iter().all(|d| d.as_constant() == Some(1)) {
                vec![Output::new(
                    x.dtype,
                    (0..rank).map(|_| Expr::constant(1)).collect(),
                )]
            } else {
                equal_count(x, rank)?
            }
        }
        "Slice" if ctx.opset >= 10 => {
            let x = x()?;
            let rank = x.shape.len();
            let axes: Vec<usize> = match ctx.opt(3) {
                Some(a) => match a.value.and_then(|v| v.const_ints()) {
                    Some(axes) => axes
                        .iter()
                        .map(|&a| norm_axis(a, rank))
                        .collect::<Res<_>>()?,
                    // Runtime axes: any axis may be sliced.
                    None => (0..rank).collect(),
                },
                None => (0..value_len(ctx, 1)?.min(rank)).collect(),
            };
            vec![Output::with_dims(
                x.dtype,
                with_data_axes(x.shape, &axes, true),
            )]
        }
        "Split" => {
            let x = x()?;
            let axis = norm_axis(ctx.attrs.int_or("axis", 0), x.shape.len())?;
            let dims = with_data_axes(x.shape, &[axis], true);
            ctx.node
                .output
                .iter()
                .map(|_| Output::with_dims(x.dtype, dims.clone()))
                .collect()
        }
        _ if super::reduce::REDUCE.contains(&op) => reduce(ctx)?,
        "TopK" => {
            let x = x()?;
            let axis = norm_axis(ctx.attrs.int_or("axis", -1), x.shape.len())?;
            let dims = with_data_axes(x.shape, &[axis], true);
            let mut same = dims.clone();
            same[axis] = Dim::Same { output: 0, axis };
            vec![
                Output::with_dims(x.dtype, dims),
                Output::with_dims(DType::I64, same),
            ]
        }
        "Expand" => {
            let x = x()?;
            let k = value_len(ctx, 1)?;
            let rank = k.max(x.shape.len());
            let lead = rank - x.shape.len();
            // A bounded target bounds the dims it decides: where the input's dim is 1 (or
            // absent) the target's, elsewhere at most the input's dim plus it.
            let target = ctx.opt(1).and_then(|t| t.bound.cloned());
            let dims = (0..rank)
                .map(|i| match i.checked_sub(lead).and_then(|j| x.shape.get(j)) {
                    // A dim other than 1 stays: the target must be 1 or equal there.
                    Some(d) if d.as_constant().is_some_and(|c| c != 1) => Dim::Known(d.clone()),
                    Some(d) if d.as_constant() != Some(1) => {
                        Dim::Data(target.as_ref().and_then(|t| add(d, t).ok()))
                    }
                    _ => Dim::Data(target.clone()),
                })
                .collect();
            vec![Output::with_dims(x.dtype, dims)]
        }
        "Tile" => {
            let x = x()?;
            let dims = x
                .shape
                .iter()
                .map(|d| match d.as_constant() {
                    Some(0) => Dim::Known(Expr::constant(0)),
                    _ => Dim::Data(None),
                })
                .collect();
            vec![Output::with_dims(x.dtype, dims)]
        }
        "Pad" => {
            let x = x()?;
            let rank = x.shape.len();
            let axes: Vec<usize> = match ctx.opt(3).and_then(|a| a.value?.const_ints()) {
                Some(axes) if ctx.opset >= 18 => axes
                    .iter()
                    .map(|&a| norm_axis(a, rank))
                    .collect::<Res<_>>()?,
                _ => (0..rank).collect(),
            };
            vec![Output::with_dims(
                x.dtype,
                with_data_axes(x.shape, &axes, false),
            )]
        }
        "ConstantOfShape" => {
            let rank = value_len(ctx, 0)?;
            let dtype = match ctx.attrs.tensor("value") {
                Some(t) => tensor::dtype(t.data_type, "value").map_err(|_| InferError::DType {
                    what: "attribute `value`".to_owned(),
                    code: i64::from(t.data_type),
                })?,
                None => DType::F32,
            };
            // A target whose values are bounded bounds every dim.
            let bound = ctx.opt(0).and_then(|s| s.bound.cloned());
            vec![Output::with_dims(dtype, vec![Dim::Data(bound); rank])]
        }
        // Counting up from 0 or more by 1 or more: at most the limit's bound.
        "Range" => {
            let count = ctx.opt(1).and_then(|l| l.bound.cloned()).filter(|_| {
                let from_zero = ctx.opt(0).is_some_and(|s| {
                    s.bound.is_some() || s.value.and_then(super::bounds::of_value).is_some()
                });
                let step = ctx.opt(2).and_then(|d| d.value?.const_ints());
                from_zero && step.is_some_and(|d| d.first().is_some_and(|&d| d >= 1))
            });
            vec![Output::with_dims(x()?.dtype, vec![Dim::Data(count)])]
        }
        "HannWindow" | "HammingWindow" | "BlackmanWindow" => {
            let dtype = match ctx.attrs.int("output_datatype") {
                Some(c) => super::elementwise::dtype_attr("output_datatype", c)?,
                None => DType::F32,
            };
            vec![Output::with_dims(dtype, vec![Dim::Data(None)])]
        }
        "OneHot" => {
            let (idx, values) = (ctx.input(0)?, ctx.input(2)?);
            let rank = idx.shape.len() + 1;
            let axis = norm_axis(ctx.attrs.int_or("axis", -1), rank)?;
            let mut dims: Vec<Dim> = idx.shape.iter().cloned().map(Dim::Known).collect();
            dims.insert(axis, Dim::Data(None));
            vec![Output::with_dims(values.dtype, dims)]
        }
        "Resize" | "Upsample" | "CenterCropPad" => {
            let x = x()?;
            let rank = x.shape.len();
            let axes: Vec<usize> = match ctx.attrs.ints("axes") {
                Some(a) => a.iter().map(|&a| norm_axis(a, rank)).collect::<Res<_>>()?,
                None => (0..rank).collect(),
            };
            vec![Output::with_dims(
                x.dtype,
                with_data_axes(x.shape, &axes, false),
            )]
        }
        _ => return Ok(None),
    };
    Ok(Some(out))
}

/// The length of the 1-D value input `i` (a target shape, axes), from its shape: the rank of
/// a data-dependent output. Fails when that length is itself unknown, or over the rank limit.
pub(super) fn value_len(ctx: &Ctx<'_>, i: usize) -> Res<usize> {
    let input = ctx.input(i)?;
    let n = match input.shape.as_slice() {
        [] => 1,
        [n] => ctx.konst(n, &format!("the length of `{}`", input.name))?,
        _ => return Err(input.rank_error(Ranks::OneOf(&[0, 1]))),
    };
    let n = usize::try_from(n).map_err(|_| InferError::NegativeDim {
        dim: n.to_string(),
        shape: ctx.show_dims(input.shape),
    })?;
    if n > MAX_RANK {
        return Err(InferError::RankLimit {
            input: input.name.to_owned(),
            entries: n,
            limit: MAX_RANK,
        });
    }
    Ok(n)
}

/// `x`'s dims with those at `axes` data-dependent: bounded by the input's dim (`bounded`), or
/// unbounded. A dim of constant 0 stays 0 when bounded.
fn with_data_axes(shape: &Shape, axes: &[usize], bounded: bool) -> Vec<Dim> {
    shape
        .iter()
        .enumerate()
        .map(|(i, d)| {
            if !axes.contains(&i) {
                Dim::Known(d.clone())
            } else if !bounded {
                Dim::Data(None)
            } else if d.as_constant() == Some(0) {
                Dim::Known(d.clone())
            } else {
                Dim::Data(Some(d.clone()))
            }
        })
        .collect()
}

/// An output of `rank` data-dependent dims with `x`'s element count (a runtime reshape): each
/// dim is at most that count, and the bytes are exact.
fn equal_count(x: Input<'_>, rank: usize) -> Res<Vec<Output>> {
    let n = product(x.shape)?;
    let out = match rank {
        0 => Output::new(x.dtype, Shape::new()),
        1 => Output::new(x.dtype, [n].into_iter().collect()),
        _ => {
            Output::with_dims(x.dtype, vec![Dim::Data(Some(n.clone())); rank]).with_element_count(n)
        }
    };
    Ok(vec![out])
}

/// A reduction over runtime axes: every dim is at most the input's (or 1, where an empty axis
/// is reduced to a 1); without `keepdims` the rank drops by the number of axes, and dim `j` is
/// one of the input's `j..=j+k`.
fn reduce(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let x = ctx.input(0)?;
    let rank = x.shape.len();
    let keep = ctx.attrs.int_or("keepdims", 1) != 0;
    if keep {
        let dims = x
            .shape
            .iter()
            .map(|d| match d.as_constant() {
                Some(1) => Dim::Known(Expr::constant(1)),
                // An empty axis reduced is kept as a 1.
                Some(0) => Dim::Data(Some(Expr::constant(1))),
                _ => Dim::Data(Some(d.clone())),
            })
            .collect();
        return Ok(vec![Output::with_dims(x.dtype, dims)]);
    }
    let k = value_len(ctx, 1)?;
    if k == 0 {
        let shape = if ctx.attrs.int_or("noop_with_empty_axes", 0) != 0 {
            x.shape.clone()
        } else {
            Shape::new()
        };
        return Ok(vec![Output::new(x.dtype, shape)]);
    }
    let out_rank = rank
        .checked_sub(k)
        .ok_or(InferError::TooManyAxes { axes: k, rank })?;
    let dims = (0..out_rank)
        .map(|j| {
            let candidates = &x.shape[j..=j + k];
            let consts: Option<Vec<i64>> = candidates.iter().map(Expr::as_constant).collect();
            let bound = match consts {
                Some(c) => Expr::constant(c.into_iter().max().unwrap_or(0)),
                // Dims are not negative, so their sum bounds each of them.
                None => candidates
                    .iter()
                    .try_fold(Expr::constant(0), |acc, d| add(&acc, d))?,
            };
            Ok(Dim::Data(Some(bound)))
        })
        .collect::<Res<Vec<Dim>>>()?;
    Ok(vec![Output::with_dims(x.dtype, dims)])
}

/// `Unique`: the unique values (flattened, or slices along `axis`) are at most the input's;
/// `indices` and `counts` have their count, `inverse_indices` one entry per input element (or
/// slice).
fn unique(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let x = ctx.input(0)?;
    let (y, along) = match ctx.attrs.int("axis") {
        Some(a) => {
            let axis = norm_axis(a, x.shape.len())?;
            let d = x.dim(axis)?.clone();
            (with_data_axes(x.shape, &[axis], true), (axis, d))
        }
        None => {
            let n = product(x.shape)?;
            (vec![Dim::Data(Some(n.clone()))], (0, n))
        }
    };
    let (axis, len) = along;
    let count = Dim::Same { output: 0, axis };
    Ok(vec![
        Output::with_dims(x.dtype, y),
        Output::with_dims(DType::I64, vec![count.clone()]),
        Output::new(DType::I64, [len].into_iter().collect()),
        Output::with_dims(DType::I64, vec![count]),
    ])
}

/// `NonMaxSuppression`: `[selected, 3]`, at most batch × classes × min(boxes,
/// max_output_boxes_per_class) rows; none when `max_output_boxes_per_class` is absent (0).
fn nms(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let (boxes, scores) = (ctx.input(0)?, ctx.input(1)?);
    let [batch, classes, n] = scores.shape.as_slice() else {
        return Err(scores.rank_error(Ranks::Exactly(3)));
    };
    if boxes.shape.len() != 3 {
        return Err(boxes.rank_error(Ranks::Exactly(3)));
    }
    let three = Dim::Known(Expr::constant(3));
    let max = match ctx.opt(2) {
        None => return Ok(vec![Output::new(DType::I64, shape2(0, 3))]),
        Some(m) => m
            .value
            .and_then(|v| v.ints())
            .and_then(|v| v.first().cloned()),
    };
    let per_class = match (max.as_ref().and_then(Expr::as_constant), n.as_constant()) {
        (Some(m), Some(c)) => Expr::constant(m.clamp(0, c)),
        (Some(0), None) => Expr::constant(0),
        _ => n.clone(),
    };
    let bound = product([batch, classes, &per_class])?;
    if bound.as_constant() == Some(0) {
        return Ok(vec![Output::new(DType::I64, shape2(0, 3))]);
    }
    Ok(vec![Output::with_dims(
        DType::I64,
        vec![Dim::Data(Some(bound)), three],
    )])
}

fn shape2(a: i64, b: i64) -> Shape {
    [Expr::constant(a), Expr::constant(b)].into_iter().collect()
}
