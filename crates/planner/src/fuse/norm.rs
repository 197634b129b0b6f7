//! Normalisations written out op by op, anchored at their `ReduceMean`:
//!
//! - layer normalisation: `d = x − mean(x)`, `n = d / √(mean(d²) + ε)` (or `d · 1/√(..)`),
//!   then a scale and a bias; becomes `LayerNormalization`;
//! - RMS normalisation: `n = x / √(mean(x²) + ε)` (or `x · 1/√(..)`, `x · (1 / √(..))`),
//!   then a scale (on either side); becomes `RMSNormalization`;
//! - group normalisation: layer normalisation of `x` reshaped to `[n, groups, rest]`,
//!   reshaped back and scaled and shifted per channel; becomes `GroupNormalization`.
//!
//! ONNX Runtime's transformer optimizer writes a residual add and the layer (or RMS)
//! normalisation after it as one node, `com.microsoft.SkipLayerNormalization(x, skip, gamma,
//! [beta], [bias])` (`SkipSimplifiedLayerNormalization`: RMS); declared so, a one-output one
//! (what a post-norm transformer writes: the sum is not kept) becomes `memplan.SkipNorm`
//! (same inputs, attribute `normalization` the original op), the engine's row-wise kernel,
//! which reads a row of `x` and of `skip` before it writes that row and so may write over
//! `x`. Inference only: a training step derives the backward of ONNX Runtime's op itself.
//!
//! `x²` is `Pow(x, 2)` or `x·x`; the mean is over the trailing axes (`axes` as an attribute
//! or a constant input); a cast of `x` to a wider float before, and of `n` back after, go
//! with it (PyTorch's half-precision RMS norms). A scale or bias is any operand with fewer
//! elements than `n` (a weight, or `1 + w`).

use memplan_ir::{Attr, NodeId, TensorId};

use super::{Cx, Found, Kind};

/// The reduced axes of ReduceMean node `m` are the trailing `k` axes of its input: `k`.
fn trailing_axes(cx: &Cx<'_>, m: NodeId) -> Option<usize> {
    let node = cx.node(m);
    let rank = i64::try_from(cx.g.tensor(cx.input(m, 0)?).shape.len()).ok()?;
    let axes: Vec<i64> = match node.attr("axes").and_then(Attr::as_ints) {
        Some(a) => a.to_vec(),
        None => cx.g.tensor(cx.input(m, 1)?).int_value.clone()?,
    };
    if node.attr("keepdims").and_then(Attr::as_int) == Some(0) || axes.is_empty() {
        return None;
    }
    let mut norm: Vec<i64> = axes
        .iter()
        .map(|&a| if a < 0 { a + rank } else { a })
        .collect();
    norm.sort_unstable();
    norm.dedup();
    let k = norm.len();
    let want: Vec<i64> = (rank - i64::try_from(k).ok()?..rank).collect();
    (norm == want).then_some(k)
}

/// `t²` as `Pow(t, 2)` or `t·t`: the node, when `t` is its input.
fn square_of(cx: &Cx<'_>, sq: NodeId, t: TensorId) -> bool {
    let node = cx.node(sq);
    match node.op.as_str() {
        "Pow" => cx.input(sq, 0) == Some(t) && cx.input(sq, 1).is_some_and(|e| cx.scalar(e)),
        "Mul" => cx.input(sq, 0) == Some(t) && cx.input(sq, 1) == Some(t),
        _ => false,
    }
}

/// From `v = mean(..)` to `n = num / √(v + ε)`: the nodes pushed, and `n`. `num` is the
/// numerator (`d`, or `x` for RMS).
fn normalise(cx: &Cx<'_>, v: TensorId, num: TensorId, nodes: &mut Vec<NodeId>) -> Option<TensorId> {
    let add = cx.only_reader(v)?;
    if cx.node(add).op != "Add"
        || !cx.internal(v, add)
        || !cx.other(add, v).is_some_and(|e| cx.scalar(e))
    {
        return None;
    }
    let e = cx.output(add)?;
    let sqrt = cx.only_reader(e)?;
    if cx.node(sqrt).op != "Sqrt" || !cx.internal(e, sqrt) {
        return None;
    }
    nodes.extend([add, sqrt]);
    let s = cx.output(sqrt)?;
    let r = cx.only_reader(s)?;
    if !cx.internal(s, r) {
        return None;
    }
    let last = match cx.node(r).op.as_str() {
        "Div" if cx.input(r, 0) == Some(num) && cx.input(r, 1) == Some(s) => r,
        "Reciprocal" | "Div" => {
            // 1/√(..), then num · it.
            if cx.node(r).op == "Div"
                && !(cx.input(r, 1) == Some(s) && cx.input(r, 0).is_some_and(|o| cx.scalar(o)))
            {
                return None;
            }
            let inv = cx.output(r)?;
            let m = cx.only_reader(inv)?;
            if cx.node(m).op != "Mul" || !cx.internal(inv, m) || cx.other(m, inv) != Some(num) {
                return None;
            }
            nodes.push(r);
            m
        }
        _ => return None,
    };
    nodes.push(last);
    cx.output(last)
}

/// The affine part after `n`: an optional cast back, a scale, a bias (each optional, the
/// bias only `with_bias` and after a scale), as (output, scale, bias); the nodes pushed.
fn affine(
    cx: &Cx<'_>,
    mut n: TensorId,
    with_bias: bool,
    nodes: &mut Vec<NodeId>,
) -> (TensorId, Option<TensorId>, Option<TensorId>) {
    let small = |t: TensorId, than: TensorId| {
        !cx.scalar(t)
            && !cx.same_elements(t, than)
            && cx.g.tensor(t).shape.len() <= cx.g.tensor(than).shape.len()
    };
    let step = |n: TensorId, op: &str| -> Option<(NodeId, TensorId, TensorId)> {
        let m = cx.only_reader(n)?;
        if cx.node(m).op != op || !cx.internal(n, m) {
            return None;
        }
        let w = cx.other(m, n)?;
        small(w, n).then_some((m, w, cx.output(m)?))
    };
    if let Some(c) = cx.only_reader(n)
        && cx.node(c).op == "Cast"
        && cx.internal(n, c)
        && let Some(out) = cx.output(c)
    {
        nodes.push(c);
        n = out;
    }
    let mut scale = None;
    let mut bias = None;
    if let Some((m, w, out)) = step(n, "Mul") {
        nodes.push(m);
        scale = Some(w);
        n = out;
        if with_bias && let Some((a, b, out)) = step(n, "Add") {
            nodes.push(a);
            bias = Some(b);
            n = out;
        }
    }
    (n, scale, bias)
}

/// `x`, or what a cast to `x` reads when only the pattern reads `x` (`inside` the nodes that
/// read it).
fn uncast(cx: &Cx<'_>, x: TensorId, inside: &[NodeId], nodes: &mut Vec<NodeId>) -> TensorId {
    if let Some(c) = cx.producer(x)
        && cx.node(c).op == "Cast"
        && cx.swallowable(x, inside)
        && let Some(src) = cx.input(c, 0)
    {
        nodes.push(c);
        return src;
    }
    x
}

/// ONNX Runtime's normalisations of a residual sum, one node each.
const SKIP_NORMS: &[&str] = &[
    "com.microsoft.SkipLayerNormalization",
    "com.microsoft.SkipSimplifiedLayerNormalization",
];

/// A written-out normalisation whose mean is ReduceMean node `m`, or `m` a one-node skip
/// normalisation.
pub(crate) fn find(cx: &Cx<'_>, m: NodeId) -> Option<Found> {
    if SKIP_NORMS.contains(&cx.node(m).op.as_str()) {
        return skip(cx, m);
    }
    if cx.node(m).op != "ReduceMean" {
        return None;
    }
    let k = trailing_axes(cx, m)?;
    let a = cx.input(m, 0)?;
    let mean = cx.output(m)?;
    layer(cx, m, a, mean, k).or_else(|| rms(cx, m, a, mean, k))
}

/// Skip normalisation node `n` as `memplan.SkipNorm`: when it makes only its output (no
/// statistics, no sum), reads `x` of the output's size, a skip no larger and a scale.
fn skip(cx: &Cx<'_>, n: NodeId) -> Option<Found> {
    let node = cx.node(n);
    if !cx.inference {
        return None;
    }
    let y = cx.output(n)?;
    let (x, skip) = (cx.input(n, 0)?, cx.input(n, 1)?);
    cx.input(n, 2)?;
    let rank = |t: TensorId| cx.g.tensor(t).shape.len();
    if !cx.same_elements(x, y) || rank(skip) > rank(y) || cx.scalar(skip) {
        return None;
    }
    let mut attrs = vec![("normalization".to_owned(), Attr::Str(node.op.clone()))];
    attrs.extend(node.attrs.iter().cloned());
    Some(Found {
        kind: Kind::Norm,
        nodes: vec![n],
        anchor: n,
        start: n,
        op: "memplan.SkipNorm".to_owned(),
        inputs: node.inputs.clone(),
        output: y,
        attrs,
    })
}

fn layer(cx: &Cx<'_>, m: NodeId, x: TensorId, mean: TensorId, k: usize) -> Option<Found> {
    let sub = cx.only_reader(mean)?;
    if cx.node(sub).op != "Sub"
        || cx.input(sub, 0) != Some(x)
        || cx.input(sub, 1) != Some(mean)
        || !cx.internal(mean, sub)
    {
        return None;
    }
    let d = cx.output(sub)?;
    let readers: Vec<NodeId> = cx.readers(d).collect();
    let sq = *readers.iter().find(|&&r| square_of(cx, r, d))?;
    let p = cx.output(sq)?;
    let m2 = cx.only_reader(p)?;
    if cx.node(m2).op != "ReduceMean" || trailing_axes(cx, m2) != Some(k) || !cx.internal(p, m2) {
        return None;
    }
    let mut nodes = vec![m, sub, sq, m2];
    let v = cx.output(m2)?;
    let n = normalise(cx, v, d, &mut nodes)?;
    if !cx.swallowable(d, &nodes) {
        return None;
    }
    let x0 = uncast(cx, x, &[m, sub], &mut nodes);
    // Group normalisation: x is x0 reshaped to [n, groups, rest], n reshaped back, then the
    // per-channel affine.
    if let Some(found) = group(cx, x0, n, &nodes) {
        return Some(found);
    }
    let (y, scale, bias) = affine(cx, n, true, &mut nodes);
    let axis = -i64::try_from(k).ok()?;
    done(
        cx,
        "LayerNormalization",
        nodes,
        vec![Some(x0), scale, bias],
        y,
        vec![("axis".to_owned(), Attr::Int(axis))],
    )
}

fn rms(cx: &Cx<'_>, m: NodeId, p: TensorId, _mean: TensorId, k: usize) -> Option<Found> {
    let sq = cx.producer(p)?;
    let x = cx.input(sq, 0)?;
    if !square_of(cx, sq, x) || !cx.internal(p, m) {
        return None;
    }
    let mut nodes = vec![sq, m];
    let v = cx.output(m)?;
    let n = normalise(cx, v, x, &mut nodes)?;
    let inside: Vec<NodeId> = nodes.clone();
    let x0 = uncast(cx, x, &inside, &mut nodes);
    let (y, scale, _) = affine(cx, n, false, &mut nodes);
    let axis = -i64::try_from(k).ok()?;
    done(
        cx,
        "RMSNormalization",
        nodes,
        vec![Some(x0), scale],
        y,
        vec![("axis".to_owned(), Attr::Int(axis))],
    )
}

/// Group normalisation around the layer-normalised `n` of `x`, when `x` is `x0` reshaped to
/// `[n, groups, rest]` and `n` is reshaped back to `x0`'s shape, then scaled and shifted.
fn group(cx: &Cx<'_>, x: TensorId, n: TensorId, core: &[NodeId]) -> Option<Found> {
    let reshape = cx.producer(x)?;
    if cx.node(reshape).op != "Reshape" {
        return None;
    }
    let x0 = cx.input(reshape, 0)?;
    let mut nodes = core.to_vec();
    if !cx.swallowable(x, &nodes) {
        return None;
    }
    let back = cx.only_reader(n)?;
    if cx.node(back).op != "Reshape" || !cx.internal(n, back) {
        return None;
    }
    let n0 = cx.output(back)?;
    if cx.g.tensor(n0).shape != cx.g.tensor(x0).shape {
        return None;
    }
    let groups = cx.g.tensor(x).shape.get(1)?.as_constant()?;
    nodes.extend([reshape, back]);
    let (y, scale, bias) = affine(cx, n0, true, &mut nodes);
    scale?;
    done(
        cx,
        "GroupNormalization",
        nodes,
        vec![Some(x0), scale, bias],
        y,
        vec![("num_groups".to_owned(), Attr::Int(groups))],
    )
}

fn done(
    cx: &Cx<'_>,
    op: &str,
    mut nodes: Vec<NodeId>,
    mut inputs: Vec<Option<TensorId>>,
    y: TensorId,
    attrs: Vec<(String, Attr)>,
) -> Option<Found> {
    let x = (*inputs.first()?)?;
    if !cx.same_elements(x, y) {
        return None;
    }
    while inputs.last() == Some(&None) {
        inputs.pop();
    }
    let anchor = cx.producer(y)?;
    nodes.sort_unstable();
    nodes.dedup();
    Some(Found {
        kind: Kind::Norm,
        nodes,
        anchor,
        start: anchor,
        op: op.to_owned(),
        inputs,
        output: y,
        attrs,
    })
}
