//! Reductions and contractions: the `Reduce*` family, `ArgMax`/`ArgMin`, `TopK` and
//! `Einsum`.
//!
//! A reduced axis is dropped, or kept as a 1 with `keepdims`; `TopK` replaces its axis by `K`;
//! `Einsum` reads its equation (with `...` broadcasting) for the output's labels.

use memplan_ir::{DType, Expr, Shape};

use super::InferError;
use super::{Ctx, Output, Res, broadcast, norm_axis};

/// Reductions whose axes come from an input from opset 18 (13 for `ReduceSum`).
pub(super) const REDUCE: &[&str] = &[
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
        "Einsum" => einsum(ctx)?,
        _ => return Ok(None),
    };
    Ok(Some(out))
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
        .ok_or_else(|| InferError::missing_attr("equation"))?
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
        )
        .into());
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
            return Err(format!("`{term}` has {labels} labels for rank {}", x.shape.len()).into());
        }
        let head_n = head.chars().count();
        let ell: Shape = x.shape.iter().skip(head_n).take(extra).cloned().collect();
        ellipsis = broadcast(ctx, &ellipsis, &ell)?;
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
    // Each output label once (numpy and ONNX Runtime refuse `ii->iiii`, whose output would
    // repeat an axis and be far larger than any input).
    let mut labels: Vec<char> = head.chars().chain(tail.chars()).collect();
    labels.sort_unstable();
    if let Some(w) = labels.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("output label `{}` appears more than once in `{eq}`", w[0]).into());
    }
    let lookup = |c: char| {
        dims.iter()
            .find(|(l, _)| *l == c)
            .map(|(_, d)| d.clone())
            .ok_or_else(|| InferError::from(format!("output label `{c}` is not in any input")))
    };
    let mut shape = head.chars().map(lookup).collect::<Res<Shape>>()?;
    if has_ellipsis {
        shape.extend(ellipsis);
    }
    shape.extend(tail.chars().map(lookup).collect::<Res<Vec<_>>>()?);
    let first = inputs.first().ok_or("no inputs")?;
    Ok(vec![Output::new(first.dtype, shape)])
}
