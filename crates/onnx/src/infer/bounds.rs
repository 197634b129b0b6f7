//! Value bounds: an upper bound on every element of an integer tensor whose values only the
//! data decides, when its elements are never negative.
//!
//! A count computed from data (how many tokens a mixture-of-experts router sends to one
//! expert: the sum of a one-hot or boolean mask) is unknown, but bounded: a sum of `n`
//! elements each at most `b` is at most `n × b`. Where such a count becomes a size (the
//! length of a `Range` the tokens are gathered with), the bound bounds the size, so
//! `memplan plan --bound` can plan it. [`bound`] states, per op, the bound of an output from
//! its inputs' bounds and known values; a tensor gets none where a rule cannot tell (a
//! subtraction, a float input): never a guess.
//!
//! Invariant: a bound `b` of a tensor means every element `e` of it is `0 <= e <= b` for every
//! value of the symbols.

use memplan_ir::{DType, Expr};

use super::{Along, Ctx, Input, Output, add, divide, mul, norm_axis, product};
use crate::value::Value;

/// The bound a known value gives: its largest element when every element is a constant, else
/// the sum of its elements (each at least 0): `None` when an element may be negative.
pub(crate) fn of_value(v: &Value) -> Option<Expr> {
    let ints = v.ints()?;
    if ints.iter().any(|e| e.min_value().is_none_or(|m| m < 0)) {
        return None;
    }
    if let Some(consts) = ints
        .iter()
        .map(Expr::as_constant)
        .collect::<Option<Vec<_>>>()
    {
        return Some(Expr::constant(consts.into_iter().max().unwrap_or(0)));
    }
    ints.iter()
        .try_fold(Expr::constant(0), |acc, e| add(&acc, e).ok())
}

/// An input's bound: from its value when known, from its dtype when boolean, else the one
/// inference recorded for it.
fn input_bound(x: &Input<'_>) -> Option<Expr> {
    if let Some(b) = x.value.and_then(of_value) {
        return Some(b);
    }
    if x.dtype == DType::Bool {
        return Some(Expr::constant(1));
    }
    x.bound.cloned()
}

/// The sum of two bounds (a bound of their larger one too).
fn either(a: Option<Expr>, b: Option<Expr>) -> Option<Expr> {
    add(&a?, &b?).ok()
}

/// The bound of output `k` of the node in `ctx`, given the outputs inference made.
pub(crate) fn bound(op: &str, ctx: &Ctx<'_>, outputs: &[Output], k: usize) -> Option<Expr> {
    let out = outputs.get(k)?;
    if out.dtype.is_float() {
        return None;
    }
    if let Some(b) = out.value.as_ref().and_then(of_value) {
        return Some(b);
    }
    if out.dtype == DType::Bool {
        return Some(Expr::constant(1));
    }
    let x = |i: usize| ctx.opt(i);
    let b = |i: usize| x(i).and_then(|x| input_bound(&x));
    match op {
        // Elements moved, not changed.
        "Identity" | "Reshape" | "Squeeze" | "Unsqueeze" | "Flatten" | "Transpose" | "Expand"
        | "Tile" | "Gather" | "GatherElements" | "GatherND" | "Slice" | "Split" | "ReduceMax"
        | "ReduceMin" | "Compress" | "DepthToSpace" | "SpaceToDepth" => b(0),
        "Cast" | "CastLike" => x(0).filter(|x| !x.dtype.is_float()).and(b(0)),
        "Concat" | "Max" | "Sum" => (0..ctx.inputs.len())
            .filter(|&i| x(i).is_some())
            .try_fold(Expr::constant(0), |acc, i| add(&acc, &b(i)?).ok()),
        "Where" => either(b(1), b(2)),
        "Add" => either(b(0), b(1)),
        "Mul" => mul(&b(0)?, &b(1)?).ok(),
        // At most either input, and at least 0 only if both are.
        "Min" => b(1).and(b(0)),
        // Integer division by a positive constant never grows a non-negative value.
        "Div" => x(1)?
            .value?
            .const_ints()?
            .iter()
            .all(|&d| d >= 1)
            .then(|| b(0))
            .flatten(),
        "ReduceSum" => {
            // Each output element sums the reduced dims' elements; where at most one element
            // a fibre along a reduced axis is non-zero (see `along`), it sums one a fibre.
            let x0 = x(0)?;
            let rank = x0.shape.len();
            let axes: Vec<usize> = match ctx.axes(13, 1).ok().flatten() {
                Some(a) if !a.is_empty() => a
                    .iter()
                    .map(|&a| norm_axis(a, rank).ok())
                    .collect::<Option<_>>()?,
                _ if ctx.attrs.int("noop_with_empty_axes").unwrap_or(0) != 0 => Vec::new(),
                _ => (0..rank).collect(),
            };
            let reduced = match Along::divides(x0.along, &axes) {
                Some(a) => product(
                    axes.iter()
                        .filter(|&&i| i != a)
                        .filter_map(|&i| x0.shape.get(i)),
                )
                .ok()?,
                None => divide(ctx.symbols, x0.shape, &out.shape)
                    .or_else(|_| product(x0.shape))
                    .ok()?,
            };
            mul(&b(0)?, &reduced).ok()
        }
        "CumSum" => mul(&b(0)?, &product(x(0)?.shape).ok()?).ok(),
        // Indices along an axis are below its length; a NonZero's below the largest dim.
        "ArgMax" | "ArgMin" => product(x(0)?.shape).ok(),
        "TopK" if k == 1 => product(x(0)?.shape).ok(),
        "NonZero" => x(0)?
            .shape
            .iter()
            .try_fold(Expr::constant(0), |acc, d| add(&acc, d).ok()),
        "OneHot" => x(2)?.value.and_then(of_value),
        "Range" => {
            // From a start of 0 or more upward: at most the limit.
            let delta = x(2)?.value?.const_ints()?;
            (delta.first().is_some_and(|&d| d >= 1) && b(0).is_some())
                .then(|| b(1))
                .flatten()
        }
        _ => None,
    }
}
