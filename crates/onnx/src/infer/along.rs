//! Facts along one axis of an integer or boolean tensor whose values only the data decides:
//! its elements are distinct along the axis, or at most one of them is non-zero.
//!
//! A mixture-of-experts router picks each token's top k experts (`TopK`'s indices: distinct
//! along the k axis), makes a one-hot mask of them (`OneHot`, or `Equal` against a range of
//! expert ids), and gathers the tokens one expert takes by `NonZero` of that expert's slice
//! of the mask, `[k, tokens]`. Its elements alone bound the count by `k × tokens`; that
//! the k indices of a token are distinct bounds it by `tokens`, since a token meets each
//! expert at most once. [`along`] states, per op, which fact an output keeps or gains from
//! its inputs'; [`Along::divides`] is what a count over the tensor gains from it (`NonZero`,
//! and [`super::bounds`]' `ReduceSum`).
//!
//! Invariant: a fact holds for every value of the inputs the op accepts; an op no rule
//! names keeps none, never a guess.

use memplan_ir::Expr;

use super::{Ctx, Input, Output, norm_axis};

/// What is known along one axis of a tensor, in its own axis numbering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Along {
    /// No two elements of one fibre along this axis are equal (`TopK`'s indices).
    Distinct(usize),
    /// At most one element of each fibre along this axis is non-zero (a one-hot mask of
    /// distinct indices).
    OneNonZero(usize),
}

impl Along {
    /// The axis the fact is about.
    pub(crate) fn axis(self) -> usize {
        match self {
            Along::Distinct(a) | Along::OneNonZero(a) => a,
        }
    }

    /// The same fact about axis `axis`.
    fn at(self, axis: usize) -> Along {
        match self {
            Along::Distinct(_) => Along::Distinct(axis),
            Along::OneNonZero(_) => Along::OneNonZero(axis),
        }
    }

    /// The axis whose length a count of the non-zero elements over `axes` of a tensor of
    /// shape `shape` may be divided by: this fact's, when it is a [`Along::OneNonZero`]
    /// inside `axes` (each fibre along it adds at most one).
    pub(crate) fn divides(this: Option<Along>, axes: &[usize]) -> Option<usize> {
        match this? {
            Along::OneNonZero(a) if axes.contains(&a) => Some(a),
            _ => None,
        }
    }
}

/// The fact output `k` of the node in `ctx` keeps or gains, given the outputs inference made.
pub(crate) fn along(op: &str, ctx: &Ctx<'_>, outputs: &[Output], k: usize) -> Option<Along> {
    let out = outputs.get(k)?;
    if out.dtype.is_float() || !out.data_dims.is_empty() {
        return None;
    }
    let x = |i: usize| ctx.opt(i);
    let rank = out.shape.len();
    match op {
        "TopK" if k == 1 => {
            let axis = norm_axis(ctx.attrs.int("axis").unwrap_or(-1), rank).ok()?;
            Some(Along::Distinct(axis))
        }
        // Elements kept in place, or a subset of each fibre.
        "Identity" | "Slice" => x(0)?.along,
        // Zero stays zero; distinct integers may not stay distinct in a narrower type.
        "Cast" => x(0)?.along.filter(|a| matches!(a, Along::OneNonZero(_))),
        "Unsqueeze" => {
            let x = x(0)?;
            let fact = x.along?;
            let mut axes = inserted_axes(ctx, rank)?;
            axes.sort_unstable();
            // The axis moves up by the inserted axes at or before its new position.
            let mut axis = fact.axis();
            for &a in &axes {
                if a <= axis {
                    axis += 1;
                }
            }
            Some(fact.at(axis))
        }
        "Squeeze" => {
            let x = x(0)?;
            let fact = x.along?;
            let removed: Vec<usize> = (0..x.shape.len())
                .filter(|&i| !kept_by_squeeze(ctx, x.shape, i))
                .collect();
            if removed.contains(&fact.axis()) {
                return None;
            }
            let below = removed.iter().filter(|&&a| a < fact.axis()).count();
            Some(fact.at(fact.axis() - below))
        }
        "Transpose" => {
            let x = x(0)?;
            let fact = x.along?;
            let perm: Vec<usize> = match ctx.attrs.ints("perm") {
                Some(p) => p
                    .iter()
                    .map(|&a| usize::try_from(a).ok())
                    .collect::<Option<_>>()?,
                None => (0..rank).rev().collect(),
            };
            let new = perm.iter().position(|&a| a == fact.axis())?;
            Some(fact.at(new))
        }
        "Gather" => {
            // Data [.., d_g, ..] gathered along g by indices of rank q: the axes before g
            // stay, those after move by q - 1; gathering along the fact's own axis may repeat
            // or drop elements of a fibre, so the fact goes.
            let data = x(0)?;
            let fact = data.along?;
            let g = norm_axis(ctx.attrs.int("axis").unwrap_or(0), data.shape.len()).ok()?;
            let q = x(1)?.shape.len();
            match fact.axis().cmp(&g) {
                std::cmp::Ordering::Less => Some(fact),
                std::cmp::Ordering::Equal => None,
                std::cmp::Ordering::Greater => Some(fact.at(fact.axis() + q - 1)),
            }
        }
        // `a == b` where a is distinct along an axis that b is constant along: at most one
        // element of each fibre along it is equal to b's one value there.
        "Equal" => {
            let from = |i: usize, j: usize| -> Option<Along> {
                let (a, b) = (x(i)?, x(j)?);
                let Along::Distinct(axis) = a.along? else {
                    return None;
                };
                let out_axis = axis + rank.checked_sub(a.shape.len())?;
                constant_along(&b, rank, out_axis).then_some(Along::OneNonZero(out_axis))
            };
            from(0, 1).or_else(|| from(1, 0))
        }
        // A one-hot of indices distinct along an axis, with 0 for off: along that axis (as
        // the output numbers it) each class is on at most once.
        "OneHot" => {
            let indices = x(0)?;
            let Along::Distinct(axis) = indices.along? else {
                return None;
            };
            let off = x(2)?.value?.ints()?.first()?.as_constant()?;
            if off != 0 {
                return None;
            }
            let depth_axis = norm_axis(ctx.attrs.int("axis").unwrap_or(-1), rank).ok()?;
            Some(Along::OneNonZero(if axis < depth_axis {
                axis
            } else {
                axis + 1
            }))
        }
        // Zero where either operand is: a fibre of the result has no more non-zero elements
        // than the operand's fibre it was computed from, when that operand is not broadcast
        // along the axis.
        "Mul" | "And" => {
            let from = |i: usize| -> Option<Along> {
                let a = x(i)?;
                let Along::OneNonZero(axis) = a.along? else {
                    return None;
                };
                let out_axis = axis + rank.checked_sub(a.shape.len())?;
                (a.shape.get(axis)? == out.shape.get(out_axis)?)
                    .then_some(Along::OneNonZero(out_axis))
            };
            from(0).or_else(|| from(1))
        }
        _ => None,
    }
}

/// Whether `b`, broadcast to rank `rank`, has one element along output axis `axis` (it lacks
/// the axis or its dim there is 1).
fn constant_along(b: &Input<'_>, rank: usize, axis: usize) -> bool {
    match (axis + b.shape.len()).checked_sub(rank) {
        None => true,
        Some(j) => b.shape.get(j) == Some(&Expr::constant(1)),
    }
}

/// The axes an `Unsqueeze` inserts, in the output's numbering.
fn inserted_axes(ctx: &Ctx<'_>, rank: usize) -> Option<Vec<usize>> {
    ctx.axes(13, 1)
        .ok()??
        .iter()
        .map(|&a| norm_axis(a, rank).ok())
        .collect()
}

/// Whether a `Squeeze` keeps axis `i` of an input of shape `shape`.
fn kept_by_squeeze(ctx: &Ctx<'_>, shape: &[Expr], i: usize) -> bool {
    match ctx.axes(13, 1).ok().flatten() {
        Some(axes) if !axes.is_empty() => !axes
            .iter()
            .any(|&a| norm_axis(a, shape.len()).ok() == Some(i)),
        _ => shape.get(i).and_then(Expr::as_constant) != Some(1),
    }
}
