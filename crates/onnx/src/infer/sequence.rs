//! Sequences of tensors: `SequenceConstruct`, `SequenceEmpty`, `SequenceInsert`,
//! `SequenceErase`, `SequenceAt`, `SequenceLength`, `SplitToSequence` and
//! `ConcatFromSequence`.
//!
//! A sequence is planned as its items back to back: a tensor of shape `[length, item dims]`
//! (a graph input whose items have no declared shape is `[length, item]`, each item a flat run
//! of elements). Items of different shapes make a data-dependent item dim, at most the sum of
//! the candidates (dims are not negative, so the sum bounds each). An empty sequence is `[0]`;
//! inserting into it gives the inserted tensor's dims.

use memplan_ir::{DType, Expr, Shape};

use super::elementwise::dtype_attr;
use super::{
    Ctx, Dim, InferError, Output, Quantity, Ranks, Res, add, mul, norm_axis, product, sub,
};
use crate::value::Value;

pub(super) fn infer(op: &str, ctx: &Ctx<'_>) -> Res<Option<Vec<Output>>> {
    let out = match op {
        "SequenceConstruct" => {
            let items: Vec<_> = ctx.inputs.iter().flatten().collect();
            let first = items.first().ok_or(InferError::MissingInput { index: 0 })?;
            let mut item: Vec<Dim> = first.shape.iter().cloned().map(Dim::Known).collect();
            for x in items.iter().skip(1) {
                item = merge(&item, x.shape)?;
            }
            let n =
                i64::try_from(items.len()).map_err(|_| InferError::overflow(Quantity::Count))?;
            item.insert(0, Dim::Known(Expr::constant(n)));
            vec![Output::with_dims(first.dtype, item)]
        }
        "SequenceEmpty" => {
            let dtype = dtype_attr("dtype", ctx.attrs.int_or("dtype", 1))?;
            vec![Output::new(
                dtype,
                [Expr::constant(0)].into_iter().collect(),
            )]
        }
        "SequenceInsert" => {
            let (seq, t) = (ctx.input(0)?, ctx.input(1)?);
            let out = match seq.shape.split_first() {
                Some((len, [])) if len.as_constant() == Some(0) => {
                    let mut shape = t.shape.clone();
                    shape.insert(0, Expr::constant(1));
                    Output::new(t.dtype, shape)
                }
                Some((len, item)) => {
                    let item: Vec<Dim> = item.iter().cloned().map(Dim::Known).collect();
                    let mut dims = merge(&item, t.shape)?;
                    dims.insert(0, Dim::Known(add(len, &Expr::constant(1))?));
                    Output::with_dims(seq.dtype, dims)
                }
                None => return Err(seq.rank_error(Ranks::AtLeast(1))),
            };
            vec![out]
        }
        "SequenceErase" => {
            let seq = ctx.input(0)?;
            let mut shape = seq.shape.clone();
            let len = shape
                .first_mut()
                .ok_or_else(|| seq.rank_error(Ranks::AtLeast(1)))?;
            *len = sub(len, &Expr::constant(1))?;
            vec![Output::new(seq.dtype, shape)]
        }
        "SequenceAt" => {
            let seq = ctx.input(0)?;
            let item: Shape = seq.shape.iter().skip(1).cloned().collect();
            vec![Output::new(seq.dtype, item)]
        }
        "SequenceLength" => {
            let seq = ctx.input(0)?;
            let len = seq.dim(0)?;
            vec![Output::with_value(
                DType::I64,
                Shape::new(),
                Some(Value::Ints(vec![len.clone()])),
            )]
        }
        "SplitToSequence" => split_to_sequence(ctx)?,
        "ConcatFromSequence" => {
            let seq = ctx.input(0)?;
            let (len, item) = seq
                .shape
                .split_first()
                .ok_or_else(|| seq.rank_error(Ranks::AtLeast(1)))?;
            let new_axis = ctx.attrs.int_or("new_axis", 0) != 0;
            let rank = item.len() + usize::from(new_axis);
            let axis = norm_axis(ctx.required_int("axis")?, rank)?;
            let mut shape: Shape = item.iter().cloned().collect();
            if new_axis {
                shape.insert(axis, len.clone());
            } else {
                shape[axis] = mul(&shape[axis], len)?;
            }
            vec![Output::new(seq.dtype, shape)]
        }
        _ => return Ok(None),
    };
    Ok(Some(out))
}

/// The item dims of a sequence holding items of dims `a` and of `b`: equal dims stay, others
/// are data-dependent, at most their sum.
fn merge(a: &[Dim], b: &Shape) -> Res<Vec<Dim>> {
    if a.len() != b.len() {
        return Err(InferError::SequenceRanks {
            first: a.len(),
            other: b.len(),
        });
    }
    a.iter()
        .zip(b)
        .map(|(x, y)| match x {
            Dim::Known(x) if x == y => Ok(Dim::Known(x.clone())),
            Dim::Known(x) => Ok(Dim::Data(Some(add(x, y)?))),
            Dim::Data(Some(bound)) => Ok(Dim::Data(Some(add(bound, y)?))),
            other => Ok(other.clone()),
        })
        .collect()
}

/// `SplitToSequence`: the chunks of `split` (or single slices without it) along `axis`. All
/// the chunks together hold the input's elements exactly.
fn split_to_sequence(ctx: &Ctx<'_>) -> Res<Vec<Output>> {
    let x = ctx.input(0)?;
    let axis = norm_axis(ctx.attrs.int_or("axis", 0), x.shape.len())?;
    let d = x.shape[axis].clone();
    let keep = ctx.attrs.int_or("keepdims", 1) != 0;
    let mut dims: Vec<Dim> = x.shape.iter().cloned().map(Dim::Known).collect();
    let Some(split) = ctx.opt(1) else {
        // One slice per index along the axis.
        if keep {
            dims[axis] = Dim::Known(Expr::constant(1));
        } else {
            dims.remove(axis);
        }
        dims.insert(0, Dim::Known(d));
        return Ok(vec![Output::with_dims(x.dtype, dims)]);
    };
    let values = split.value.and_then(Value::const_ints);
    let (count, chunk) = match (split.shape.len(), values.as_deref(), d.as_constant()) {
        // Equal chunks of `c`, the last one smaller.
        (0, Some([c]), Some(dv)) if *c > 0 => {
            let n = dv.div_euclid(*c) + i64::from(dv.rem_euclid(*c) != 0);
            let chunk = if dv % c == 0 {
                Dim::Known(Expr::constant(*c))
            } else {
                Dim::Data(Some(Expr::constant(*c)))
            };
            (Dim::Known(Expr::constant(n)), chunk)
        }
        (1, Some(list), _) => {
            let n = i64::try_from(list.len()).map_err(|_| InferError::overflow(Quantity::Count))?;
            let chunk = match list.split_first() {
                Some((first, rest)) if rest.iter().all(|c| c == first) => {
                    Dim::Known(Expr::constant(*first))
                }
                _ => Dim::Data(Some(Expr::constant(
                    list.iter().copied().max().unwrap_or(0),
                ))),
            };
            (Dim::Known(Expr::constant(n)), chunk)
        }
        (1, None, _) => (
            Dim::Known(split.dim(0)?.clone()),
            Dim::Data(Some(d.clone())),
        ),
        _ => (Dim::Data(Some(d.clone())), Dim::Data(Some(d.clone()))),
    };
    dims[axis] = chunk;
    dims.insert(0, count);
    Ok(vec![
        Output::with_dims(x.dtype, dims).with_element_count(product(x.shape)?),
    ])
}
