//! Attention written out: `S = Q·Kᵀ`, then a scale, a soft-cap (`tanh(S / c) · c`), an
//! additive mask or a boolean one (`Where`), a cast to the softmax's precision, `Softmax`
//! over the last axis (with the `IsNaN`/`Where` guard of PyTorch's safe softmax), a cast
//! back, then `Y = P·V`; one `memplan.Attention` node.
//!
//! Around it the exporters move data about: `Q`, `K` and `V` are transposed from
//! `[batch, seq, heads, size]`, `Kᵀ` is a transpose (sometimes through a 3-D reshape and
//! back), grouped-query attention repeats `K` and `V` (`Unsqueeze`, `Expand`, `Reshape`),
//! the scale is applied to `Q` and `Kᵀ` before the product (`q·√s`, `kᵀ·√s`), and the
//! output is transposed back. A fused kernel reads its operands with strides and repeats
//! key-value heads itself, so the fused node reads each operand before those ops, as far back
//! as [`super::layout`] can follow it and the kernel can read it: the key and value
//! positions and the head sizes each one axis of the tensor read, the query's other axes
//! plain, repeats only of a key-value head. It writes the output after the transposes that
//! follow `P·V` (not after a final reshape: that is a view anyway).
//!
//! Inputs of the fused node: `Q`, `K`, `V`, the additive mask, the boolean mask (the last
//! two optional), and (inference only) a second mask that input 3 or 4, whichever is
//! present, is joined with (`mask_join`: `And` or `Or`) before the ops that make the mask
//! from them. Attributes: `kv_axis` (the axis of `K` holding the key positions),
//! `dv_axis` (the axis of the output holding the value size), which size the kernel's
//! scratch (`kernels`): `elements(Y) / Y[dv_axis]` query rows by `K[kv_axis]` keys;
//! `score_dtype` (the ONNX type code of the softmax's input, when it differs from Q's: the
//! precision of an eager kernel's scores); `softcap`, `mask_keep` (a boolean mask keeps
//! where true) and `mask_join` when present.

use memplan_ir::{Attr, NodeId, TensorId};

use super::layout::Axes;
use super::{Cx, Found, Kind};

/// Ops that move or scale an operand without changing which element is where beyond what
/// [`Axes::through`] follows.
const LAYOUT: &[&str] = &[
    "Transpose",
    "Reshape",
    "Flatten",
    "Unsqueeze",
    "Squeeze",
    "Expand",
    "Identity",
    "Cast",
    "Mul",
    "Div",
];

/// Ops the output may pass through after `P·V` (a fused kernel writes with strides).
const OUTPUT_LAYOUT: &[&str] = &[
    "Transpose",
    "Reshape",
    "Flatten",
    "Unsqueeze",
    "Squeeze",
    "Identity",
];

/// The attention pattern around Softmax node `n`, or `n` an ONNX `Attention` reading a mask.
pub(crate) fn find(cx: &Cx<'_>, n: NodeId) -> Option<Found> {
    let sm = cx.node(n);
    if sm.op == "Attention" {
        return one_node(cx, n);
    }
    if sm.op != "Softmax" {
        return None;
    }
    let s = cx.input(n, 0)?;
    let rank = i64::try_from(cx.g.tensor(s).shape.len()).ok()?;
    let axis = sm.attr("axis").and_then(Attr::as_int).unwrap_or(-1);
    if rank < 2 || (axis != -1 && axis != rank - 1) {
        return None;
    }
    let mut nodes = vec![n];
    let scores = scores_side(cx, n, s, &mut nodes)?;
    let pv = probs_side(cx, n, &mut nodes)?;
    let (qk, score_dtype) = (scores.matmul, cx.g.tensor(s).dtype);
    nodes.push(qk);
    nodes.push(pv);
    let q = operand(cx, qk, 0, Role::Query)?;
    let k = operand(cx, qk, 1, Role::KeyT)?;
    let v = operand(cx, pv, 1, Role::Value)?;
    let out = output(cx, pv)?;
    for side in [&q, &k, &v] {
        nodes.extend(side.nodes.iter().copied());
    }
    nodes.extend(out.nodes.iter().copied());
    let mut inputs = vec![Some(q.source), Some(k.source), Some(v.source)];
    let single = match (scores.mask, scores.keep) {
        (Some(m), None) => Some((m, 3)),
        (None, Some((c, _))) => Some((c, 4)),
        _ => None,
    };
    let mut mask_attrs = Vec::new();
    let joined = single
        .filter(|_| cx.inference)
        .and_then(|(m, slot)| Some((joined_source(cx, m, &nodes)?, slot)));
    if let Some(((a, b, join), slot)) = joined {
        inputs.extend(if slot == 3 {
            [Some(a), None, Some(b)]
        } else {
            [None, Some(a), Some(b)]
        });
        if let Some((_, keep)) = scores.keep {
            mask_attrs.push(("mask_keep".to_owned(), Attr::Int(i64::from(keep))));
        }
        mask_attrs.push(("mask_join".to_owned(), Attr::Str(join.to_owned())));
    } else {
        let (mask, keep) = match (scores.mask, scores.keep) {
            (Some(m), None) => match split_mask(cx, m, &nodes) {
                Some((bias, cond, keep)) => (Some(bias), Some((cond, keep))),
                None => (Some(m), None),
            },
            other => other,
        };
        if mask.is_some() || keep.is_some() {
            inputs.push(mask.map(|m| mask_source(cx, m, &nodes)));
        }
        if let Some((cond, keep)) = keep {
            inputs.push(Some(mask_source(cx, cond, &nodes)));
            mask_attrs.push(("mask_keep".to_owned(), Attr::Int(i64::from(keep))));
        }
    }
    let mut attrs = vec![
        ("kv_axis".to_owned(), Attr::Int(i64::try_from(k.axis).ok()?)),
        (
            "dv_axis".to_owned(),
            Attr::Int(i64::try_from(out.dv_axis).ok()?),
        ),
    ];
    attrs.extend(mask_attrs);
    if score_dtype != cx.g.tensor(q.source).dtype
        && let Some(code) = onnx_type_code(score_dtype)
    {
        attrs.push(("score_dtype".to_owned(), Attr::Int(code)));
    }
    if scores.softcap {
        attrs.push(("softcap".to_owned(), Attr::Int(1)));
    }
    let anchor = cx.producer(out.tensor)?;
    nodes.sort_unstable();
    nodes.dedup();
    Some(Found {
        kind: Kind::Attention,
        nodes,
        anchor,
        start: anchor,
        op: "memplan.Attention".to_owned(),
        inputs,
        output: out.tensor,
        attrs,
    })
}

/// ONNX's `Attention` (opset 23) node `n` over 4-D `[batch, heads, seq, size]` Q, K, V with
/// a mask (input 3), no cache and one output: as `memplan.Attention`, the same kernel, reading
/// the mask at its source (as a written-out pattern's): a float mask as the additive one (or
/// split into a bias and a condition), a boolean one as the boolean mask (kept where true).
/// The node's attributes (`scale`, `is_causal`, ..) go with it; `softcap` is a flag there.
fn one_node(cx: &Cx<'_>, n: NodeId) -> Option<Found> {
    let node = cx.node(n);
    let y = cx.output(n)?;
    let rank4 = |t: TensorId| cx.g.tensor(t).shape.len() == 4;
    let (q, k, v, m) = (
        cx.input(n, 0)?,
        cx.input(n, 1)?,
        cx.input(n, 2)?,
        cx.input(n, 3)?,
    );
    if node.inputs.len() > 4 || ![q, k, v, y].into_iter().all(rank4) {
        return None;
    }
    let nodes = [n];
    let mut inputs = vec![Some(q), Some(k), Some(v)];
    let mut attrs = vec![
        ("kv_axis".to_owned(), Attr::Int(2)),
        ("dv_axis".to_owned(), Attr::Int(3)),
    ];
    let boolean = cx.g.tensor(m).dtype == memplan_ir::DType::Bool;
    let joined = if cx.inference {
        joined_source(cx, m, &nodes)
    } else {
        None
    };
    let keep = if let Some((a, b, join)) = joined {
        inputs.extend(if boolean {
            [None, Some(a), Some(b)]
        } else {
            [Some(a), None, Some(b)]
        });
        if boolean {
            attrs.push(("mask_keep".to_owned(), Attr::Int(1)));
        }
        attrs.push(("mask_join".to_owned(), Attr::Str(join.to_owned())));
        None
    } else if boolean {
        inputs.push(None);
        Some((m, true))
    } else if let Some((bias, cond, keep)) = split_mask(cx, m, &nodes) {
        inputs.push(Some(mask_source(cx, bias, &nodes)));
        Some((cond, keep))
    } else {
        inputs.push(Some(mask_source(cx, m, &nodes)));
        None
    };
    if let Some((cond, keep)) = keep {
        inputs.push(Some(mask_source(cx, cond, &nodes)));
        attrs.push(("mask_keep".to_owned(), Attr::Int(i64::from(keep))));
    }
    // Nothing to gain where the kernel reads the mask as the node does.
    if inputs[3..].iter().flatten().copied().eq([m]) {
        return None;
    }
    for (name, value) in &node.attrs {
        match name.as_str() {
            "softcap" => {
                if matches!(value, Attr::Float(c) if *c != 0.0) {
                    attrs.push(("softcap".to_owned(), Attr::Int(1)));
                }
            }
            "softmax_precision" => attrs.push(("score_dtype".to_owned(), value.clone())),
            _ => attrs.push((name.clone(), value.clone())),
        }
    }
    Some(Found {
        kind: Kind::Attention,
        nodes: vec![n],
        anchor: n,
        start: n,
        op: "memplan.Attention".to_owned(),
        inputs,
        output: y,
        attrs,
    })
}

/// Ops a kernel can apply to a mask element by element as it reads it, when every operand
/// but one is a parameter (at most one element); `Expand` is a broadcast.
const MASK_RECIPE: &[&str] = &[
    "Expand",
    "Where",
    "Cast",
    "Not",
    "Neg",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Equal",
    "Less",
    "LessOrEqual",
    "Greater",
    "GreaterOrEqual",
    "And",
    "Or",
];

/// The tensor the kernel reads for mask `m` (read from outside the pattern's `nodes`): as
/// far back as `m` is a broadcast of it (`Expand`) or computed from it element by element
/// with parameters (a `Where` choosing between two scalars, a `Cast`, a comparison with a
/// scalar). The kernel broadcasts what it reads to the scores and applies those ops per
/// element, as a flash kernel with a mask function does; the mask itself (often
/// `[batch, 1, seq, seq]`, made once and read by every layer) need not exist. A `Cast` to a
/// narrower type is not undone (its input would be larger).
fn mask_source(cx: &Cx<'_>, m: TensorId, nodes: &[NodeId]) -> TensorId {
    let mut t = m;
    while let Some(p) = cx.producer(t) {
        let node = cx.node(p);
        if !MASK_RECIPE.contains(&node.op.as_str()) || node.outputs.len() != 1 || nodes.contains(&p)
        {
            break;
        }
        let data: Vec<TensorId> = if node.op == "Expand" {
            cx.input(p, 0).into_iter().collect()
        } else {
            node.present_inputs().filter(|&i| !cx.scalar(i)).collect()
        };
        let [src] = data[..] else { break };
        let (from, to) = (cx.g.tensor(src).dtype.bits(), cx.g.tensor(t).dtype.bits());
        if !matches!((from, to), (Some(f), Some(t)) if f <= t) {
            break;
        }
        t = src;
    }
    t
}

/// The two tensors mask `m` is made from where its making joins two masks (`And`, `Or`, or
/// for a float mask `Add`) each smaller than `m`, each read at its source ([`mask_source`]),
/// and the join: before the join and after it only broadcasts and per-element ops with
/// parameters. Hugging Face's masking utilities join a padding mask `[batch, 1, 1, seq]` and
/// a causal or bidirectional one `[1, 1, seq, seq]`; Swin's exports add its relative
/// position bias `[1, heads, n, n]` and its shifted-window mask `[windows, 1, n, n]` into a
/// scores-sized `[windows, heads, n, n]` bias. The kernel reads both and joins them per
/// element (a flash kernel's mask function, FlexAttention's `and_masks` or a `score_mod`
/// adding two biases), so the joined mask, made once and read by every layer or made for
/// each, need not exist.
fn joined_source(
    cx: &Cx<'_>,
    m: TensorId,
    nodes: &[NodeId],
) -> Option<(TensorId, TensorId, &'static str)> {
    let joined = mask_source(cx, m, nodes);
    let p = cx.producer(joined)?;
    let node = cx.node(p);
    let float = cx.g.tensor(joined).dtype.is_float();
    let join = match node.op.as_str() {
        "And" => "And",
        "Or" => "Or",
        "Add" if float => "Add",
        _ => return None,
    };
    if node.outputs.len() != 1 || node.inputs.len() != 2 || nodes.contains(&p) {
        return None;
    }
    let side = |i: usize| {
        let t = cx.input(p, i)?;
        let src = mask_source(cx, t, nodes);
        (!cx.scalar(t) && !cx.same_elements(src, joined)).then_some(src)
    };
    Some((side(0)?, side(1)?, join))
}

/// An additive mask `m = Where(c, bias, fill)` (or `Where(c, fill, bias)`, `fill` a scalar)
/// read from outside the pattern's `nodes`, as the kernel reads it: the bias as its additive
/// mask and `c` as its boolean one (keeping where true for the first form), which is the same
/// per score (`s + (c ? bias : fill)` is `c ? s + bias : s + fill`, and the kernel fills what
/// its boolean mask drops). T5's relative position bias comes so, `[batch, heads, seq, seq]`
/// made once from a `[1, heads, seq, seq]` bias and a `[batch, 1, seq, seq]` condition and
/// read by every layer. Taken when both parts (back to their sources) are smaller than `m`
/// (broadcast into it): the kernel then reads less than the mask, and `m` is never made.
fn split_mask(cx: &Cx<'_>, m: TensorId, nodes: &[NodeId]) -> Option<(TensorId, TensorId, bool)> {
    let p = cx.producer(m)?;
    if cx.node(p).op != "Where" || cx.node(p).outputs.len() != 1 || nodes.contains(&p) {
        return None;
    }
    let (c, a, b) = (cx.input(p, 0)?, cx.input(p, 1)?, cx.input(p, 2)?);
    let (bias, keep) = match (cx.scalar(a), cx.scalar(b)) {
        (false, true) => (a, true),
        (true, false) => (b, false),
        _ => return None,
    };
    let smaller = |t: TensorId| {
        let src = mask_source(cx, t, nodes);
        !cx.scalar(src) && !cx.same_elements(src, m)
    };
    (smaller(bias) && smaller(c)).then_some((bias, c, keep))
}

/// What lies between `Q·Kᵀ` and the softmax.
struct Scores {
    matmul: NodeId,
    mask: Option<TensorId>,
    /// A boolean mask and whether it keeps where true.
    keep: Option<(TensorId, bool)>,
    softcap: bool,
}

/// Walks back from the softmax's input `s` to `Q·Kᵀ`, collecting the nodes on the way.
fn scores_side(
    cx: &Cx<'_>,
    softmax: NodeId,
    s: TensorId,
    nodes: &mut Vec<NodeId>,
) -> Option<Scores> {
    let mut out = Scores {
        matmul: softmax,
        mask: None,
        keep: None,
        softcap: false,
    };
    let (mut t, mut next) = (s, softmax);
    loop {
        if !cx.internal(t, next) {
            return None;
        }
        let m = cx.producer(t)?;
        let chain = match cx.node(m).op.as_str() {
            "MatMul" => {
                out.matmul = m;
                return Some(out);
            }
            "Add" => {
                let (a, b) = (cx.input(m, 0)?, cx.input(m, 1)?);
                let (c, mask) = if reaches_product(cx, a, 8) {
                    (a, b)
                } else if reaches_product(cx, b, 8) {
                    (b, a)
                } else {
                    return None;
                };
                if out.mask.replace(mask).is_some() || cx.scalar(mask) {
                    return None;
                }
                c
            }
            "Mul" => {
                let (a, b) = (cx.input(m, 0)?, cx.input(m, 1)?);
                match (cx.scalar(a), cx.scalar(b)) {
                    (false, true) => a,
                    (true, false) => b,
                    _ => return None,
                }
            }
            "Div" => cx
                .input(m, 1)
                .filter(|&d| cx.scalar(d))
                .and(cx.input(m, 0))?,
            "Tanh" => {
                out.softcap = true;
                cx.input(m, 0)?
            }
            "Cast" => cx.input(m, 0)?,
            "Where" => {
                let (cond, a, b) = (cx.input(m, 0)?, cx.input(m, 1)?, cx.input(m, 2)?);
                let (c, keep) = match (cx.scalar(a), cx.scalar(b)) {
                    (false, true) => (a, true),
                    (true, false) => (b, false),
                    _ => return None,
                };
                if out.keep.replace((cond, keep)).is_some() {
                    return None;
                }
                c
            }
            _ => return None,
        };
        nodes.push(m);
        (t, next) = (chain, m);
    }
}

/// Whether `t` is made by a `MatMul` through at most `depth` of the ops a score chain holds.
fn reaches_product(cx: &Cx<'_>, t: TensorId, depth: usize) -> bool {
    let Some(m) = cx.producer(t) else {
        return false;
    };
    let node = cx.node(m);
    match node.op.as_str() {
        "MatMul" => true,
        _ if depth == 0 => false,
        "Add" | "Mul" | "Div" | "Tanh" | "Cast" | "Where" => node
            .inputs
            .iter()
            .flatten()
            .any(|&i| !cx.scalar(i) && reaches_product(cx, i, depth - 1)),
        _ => false,
    }
}

/// Walks forward from the softmax to `P·V`, collecting the nodes on the way.
fn probs_side(cx: &Cx<'_>, softmax: NodeId, nodes: &mut Vec<NodeId>) -> Option<NodeId> {
    let mut t = cx.output(softmax)?;
    loop {
        let readers: Vec<NodeId> = cx.readers(t).collect();
        if let [a, b] = readers.as_slice() {
            // PyTorch's safe softmax: `Where(IsNaN(p), 0, p)`.
            let (isnan, w) = if cx.node(*a).op == "IsNaN" {
                (*a, *b)
            } else {
                (*b, *a)
            };
            let flag = cx.output(isnan)?;
            let guard = cx.node(isnan).op == "IsNaN"
                && cx.node(w).op == "Where"
                && cx.input(w, 0) == Some(flag)
                && cx.input(w, 2) == Some(t)
                && cx.input(w, 1).is_some_and(|z| cx.scalar(z))
                && cx.internal(flag, w)
                && cx.swallowable(t, &[isnan, w]);
            if !guard {
                return None;
            }
            nodes.extend([isnan, w]);
            t = cx.output(w)?;
            continue;
        }
        let [r] = readers.as_slice() else {
            return None;
        };
        let r = *r;
        if !cx.internal(t, r) {
            return None;
        }
        match cx.node(r).op.as_str() {
            "MatMul" if cx.input(r, 0) == Some(t) => return Some(r),
            "Cast" | "Identity" | "Dropout" => {
                nodes.push(r);
                t = *cx.node(r).outputs.first()?;
            }
            _ => return None,
        }
    }
}

/// Which operand a chain feeds, for what the kernel needs of its layout.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    /// `Q` of `Q·Kᵀ`: `[..., q, size]`.
    Query,
    /// `Kᵀ` of `Q·Kᵀ`: `[..., size, kv]`.
    KeyT,
    /// `V` of `P·V`: `[..., kv, size]`.
    Value,
}

/// What the kernel reads for one operand.
struct Operand {
    source: TensorId,
    /// The layout nodes between the source and the product.
    nodes: Vec<NodeId>,
    /// The source's axis holding the key positions (`KeyT`, `Value`) or the query
    /// positions (`Query`).
    axis: usize,
}

/// The tensor the kernel reads for input `pos` of the product `m`: as far back through
/// layout ops as the kernel can read it (see the module docs).
fn operand(cx: &Cx<'_>, m: NodeId, pos: usize, role: Role) -> Option<Operand> {
    let first = cx.input(m, pos)?;
    // The chain back: tensors[k] is made by chain[k] from tensors[k + 1].
    let mut tensors = vec![first];
    let mut chain: Vec<NodeId> = Vec::new();
    let (mut t, mut next) = (first, m);
    while cx.internal(t, next) {
        let Some(p) = cx.producer(t) else { break };
        let node = cx.node(p);
        if !LAYOUT.contains(&node.op.as_str()) {
            break;
        }
        let src = match node.op.as_str() {
            "Mul" => {
                let (a, b) = (cx.input(p, 0)?, cx.input(p, 1)?);
                match (cx.scalar(a), cx.scalar(b)) {
                    (false, true) => a,
                    (true, false) => b,
                    _ => break,
                }
            }
            "Div" if !cx.input(p, 1).is_some_and(|d| cx.scalar(d)) => break,
            _ => cx.input(p, 0)?,
        };
        chain.push(p);
        tensors.push(src);
        (t, next) = (src, p);
    }
    // The longest readable chain.
    for k in (0..tensors.len()).rev() {
        let source = tensors[k];
        let mut axes = Axes::of(cx, source);
        let mut ok = true;
        for j in (0..k).rev() {
            match axes.through(cx, chain[j], tensors[j]) {
                Some(a) => axes = a,
                None => {
                    ok = false;
                    break;
                }
            }
        }
        if !ok {
            continue;
        }
        let r = axes.rank();
        if r < 2 {
            continue;
        }
        let (major, minor) = (axes.single(r - 2), axes.single(r - 1));
        let (Some(major), Some(minor)) = (major, minor) else {
            continue;
        };
        let axis = match role {
            Role::Query if (0..r - 2).all(|a| axes.plain(a)) => major,
            Role::KeyT if axes.repeats_grouped() => minor,
            Role::Value if axes.repeats_grouped() => major,
            _ => continue,
        };
        return Some(Operand {
            source,
            nodes: chain[..k].to_vec(),
            axis,
        });
    }
    None
}

/// What the kernel writes.
struct Output {
    tensor: TensorId,
    nodes: Vec<NodeId>,
    dv_axis: usize,
}

/// The kernel's output: `P·V`'s, or the last transpose the layout ops after it reach.
fn output(cx: &Cx<'_>, pv: NodeId) -> Option<Output> {
    let first = cx.output(pv)?;
    let rank = cx.g.tensor(first).shape.len();
    let mut tensors = vec![first];
    let mut chain: Vec<NodeId> = Vec::new();
    let mut t = first;
    while let Some(r) = cx.only_reader(t) {
        if !cx.internal(t, r) || !OUTPUT_LAYOUT.contains(&cx.node(r).op.as_str()) {
            break;
        }
        let Some(y) = cx.output(r) else { break };
        chain.push(r);
        tensors.push(y);
        t = y;
    }
    let dv_of = |axes: &Axes| (0..axes.rank()).find(|&a| axes.single(a) == Some(rank - 1));
    let mut axes = vec![Axes::of(cx, first)];
    for (j, &r) in chain.iter().enumerate() {
        match axes[j].through(cx, r, tensors[j + 1]) {
            Some(a) => axes.push(a),
            None => break,
        }
    }
    // The last transpose reached, else `P·V`'s own output.
    let end = (1..axes.len())
        .rev()
        .find(|&k| cx.node(chain[k - 1]).op == "Transpose" && dv_of(&axes[k]).is_some())
        .unwrap_or(0);
    Some(Output {
        tensor: tensors[end],
        nodes: chain[..end].to_vec(),
        dv_axis: dv_of(&axes[end])?,
    })
}

/// The ONNX `TensorProto.DataType` code of a float dtype.
fn onnx_type_code(d: memplan_ir::DType) -> Option<i64> {
    use memplan_ir::DType;
    Some(match d {
        DType::F32 => 1,
        DType::F16 => 10,
        DType::F64 => 11,
        DType::BF16 => 16,
        _ => return None,
    })
}
