//! Element-wise activations written out, and a bias before an activation.
//!
//! - GELU, erf form: `erf(x / c)` (or `x · c`), `+ 1`, then multiplied by `x` and by a
//!   scalar (the half) in any order and grouping: `(x·a)·h`, `(x·h)·a`, `x·(a·h)`,
//!   `x·(h·a)`, `h·(x·a)`. Tanh form: `tanh(c₁ · (x + c₂ · x³))` with `x³` as `Pow(x, 3)`,
//!   `x·x·x` or `x·x²`, then the same. One `Gelu` (`approximate = "tanh"` for the second).
//! - `x · σ(c · x)` becomes `QuickGelu`; `x · σ(x)` (SiLU) becomes `Swish`.
//! - A bias `Add` (an operand of fewer elements, broadcast) whose sum only an activation
//!   reads becomes, with it, `memplan.BiasAct` (inputs: the data, the bias; attribute
//!   `activation`, the activation's op, with its attributes). ONNX Runtime's transformer
//!   optimizer writes that pair as one node, `com.microsoft.BiasGelu(x, bias)` or
//!   `com.microsoft.FastGelu(x, bias)`; declared so, it becomes `memplan.BiasAct` too (the
//!   activation `com.microsoft.Gelu` or `com.microsoft.FastGelu`), which may write over `x`.
//!
//! The scalars' values are not in the graph (only their size is), so a written-out GELU is
//! recognised by its shape: what matters for memory is that the kernel reads `x` and writes
//! `y` element by element, which holds for every spelling matched.

use memplan_ir::{Attr, IndexVec, NodeId, TensorId};

use super::{Cx, Found, Kind};

/// Single-input activations a bias may precede.
const ACTIVATIONS: &[&str] = &[
    "Relu",
    "Gelu",
    "Sigmoid",
    "Tanh",
    "LeakyRelu",
    "Elu",
    "Selu",
    "Celu",
    "HardSigmoid",
    "HardSwish",
    "Mish",
    "Softplus",
    "Softsign",
    "Swish",
    "QuickGelu",
    "com.microsoft.QuickGelu",
    "com.microsoft.Gelu",
    "com.microsoft.FastGelu",
];

/// The non-scalar operand of binary node `m` whose other operand is a scalar.
fn scaled(cx: &Cx<'_>, m: NodeId) -> Option<TensorId> {
    let (a, b) = (cx.input(m, 0)?, cx.input(m, 1)?);
    match (cx.scalar(a), cx.scalar(b)) {
        (false, true) => Some(a),
        (true, false) if cx.node(m).op != "Div" => Some(b),
        _ => None,
    }
}

/// Whether `t` is made by node op `op` (its only output).
fn made_by<'a>(cx: &Cx<'a>, t: TensorId, op: &str) -> Option<NodeId> {
    let p = cx.producer(t)?;
    (cx.node(p).op == op && cx.output(p) == Some(t)).then_some(p)
}

/// From the term `a` (`1 + erf(..)` or `1 + tanh(..)`), the products with `x` and a scalar
/// that end the GELU: their nodes and the result.
fn times_x(cx: &Cx<'_>, a: TensorId, x: TensorId, nodes: &mut Vec<NodeId>) -> Option<TensorId> {
    let (mut t, mut with_x, mut with_half) = (a, false, false);
    loop {
        let m = cx.only_reader(t)?;
        if cx.node(m).op != "Mul" || !cx.internal(t, m) {
            return None;
        }
        let other = cx.other(m, t)?;
        if other == x && !with_x {
            with_x = true;
        } else if cx.scalar(other) && !with_half {
            with_half = true;
        } else if !with_x
            && let Some(h) = cx.producer(other)
            && matches!(cx.node(h).op.as_str(), "Mul" | "Div")
            && scaled(cx, h) == Some(x)
            && cx.internal(other, m)
        {
            // `x · h` made first.
            nodes.push(h);
            with_x = true;
            with_half = true;
        } else {
            return None;
        }
        nodes.push(m);
        t = cx.output(m)?;
        if with_x && with_half {
            return Some(t);
        }
    }
}

/// `x³` as `Pow(x, 3)`, `(x·x)·x`, `x·(x·x)` or `x·Pow(x, 2)`: its nodes.
fn cube_of(cx: &Cx<'_>, t: TensorId, x: TensorId, nodes: &mut Vec<NodeId>) -> bool {
    let Some(p) = cx.producer(t) else {
        return false;
    };
    let node = cx.node(p);
    match node.op.as_str() {
        "Pow" if cx.input(p, 0) == Some(x) && cx.input(p, 1).is_some_and(|e| cx.scalar(e)) => {
            nodes.push(p);
            true
        }
        "Mul" => {
            let (Some(a), Some(b)) = (cx.input(p, 0), cx.input(p, 1)) else {
                return false;
            };
            let square = |s: TensorId, nodes: &mut Vec<NodeId>| -> bool {
                let Some(q) = cx.producer(s) else {
                    return false;
                };
                let ok = cx.internal(s, p)
                    && match cx.node(q).op.as_str() {
                        "Mul" => cx.input(q, 0) == Some(x) && cx.input(q, 1) == Some(x),
                        "Pow" => {
                            cx.input(q, 0) == Some(x)
                                && cx.input(q, 1).is_some_and(|e| cx.scalar(e))
                        }
                        _ => false,
                    };
                if ok {
                    nodes.push(q);
                }
                ok
            };
            let found = (a == x && square(b, nodes)) || (b == x && square(a, nodes));
            if found {
                nodes.push(p);
            }
            found
        }
        _ => false,
    }
}

/// GELU around an `Erf` or `Tanh` node, or `x · σ(c·x)` around a `Sigmoid` (see the module
/// docs).
pub(crate) fn gelu(cx: &Cx<'_>, n: NodeId) -> Option<Found> {
    let node = cx.node(n);
    let u = cx.input(n, 0)?;
    let mut nodes = vec![n];
    let (x, approximate) = match node.op.as_str() {
        "Erf" => {
            let d = cx.producer(u)?;
            if !matches!(cx.node(d).op.as_str(), "Div" | "Mul") || !cx.internal(u, n) {
                return None;
            }
            nodes.push(d);
            (scaled(cx, d)?, None)
        }
        "Tanh" => {
            // u = c₁ · v, v = x + c₂ · x³.
            let m1 = cx.producer(u)?;
            if cx.node(m1).op != "Mul" || !cx.internal(u, n) {
                return None;
            }
            let v = scaled(cx, m1)?;
            let add = made_by(cx, v, "Add")?;
            if !cx.internal(v, m1) {
                return None;
            }
            nodes.extend([m1, add]);
            let (a, b) = (cx.input(add, 0)?, cx.input(add, 1)?);
            let mut found = None;
            for (x, w) in [(a, b), (b, a)] {
                let mut more = Vec::new();
                let Some(m2) = made_by(cx, w, "Mul") else {
                    continue;
                };
                let Some(cube) = scaled(cx, m2) else { continue };
                if cx.internal(w, add) && cx.internal(cube, m2) && cube_of(cx, cube, x, &mut more) {
                    more.push(m2);
                    found = Some((x, more));
                    break;
                }
            }
            let (x, more) = found?;
            nodes.extend(more);
            (x, Some("tanh"))
        }
        "Sigmoid" => {
            // QuickGelu: y = x · σ(c·x).
            let m = made_by(cx, u, "Mul")?;
            let x = scaled(cx, m)?;
            let s = cx.output(n)?;
            let y_node = cx.only_reader(s)?;
            if !cx.internal(u, n)
                || !cx.internal(s, y_node)
                || cx.node(y_node).op != "Mul"
                || cx.other(y_node, s) != Some(x)
            {
                return None;
            }
            nodes.extend([m, y_node]);
            return found(cx, Kind::Gelu, nodes, "QuickGelu", x, y_node, Vec::new());
        }
        _ => return None,
    };
    // a = t + 1.
    let t = cx.output(n)?;
    let one = cx.only_reader(t)?;
    if cx.node(one).op != "Add"
        || !cx.internal(t, one)
        || !cx.other(one, t).is_some_and(|c| cx.scalar(c))
    {
        return None;
    }
    nodes.push(one);
    let a = cx.output(one)?;
    let y = times_x(cx, a, x, &mut nodes)?;
    let anchor = cx.producer(y)?;
    let attrs = approximate
        .map(|a| vec![("approximate".to_owned(), Attr::Str(a.to_owned()))])
        .unwrap_or_default();
    found(cx, Kind::Gelu, nodes, "Gelu", x, anchor, attrs)
}

/// SiLU around a `Sigmoid` node: `x · σ(x)`.
pub(crate) fn silu(cx: &Cx<'_>, n: NodeId) -> Option<Found> {
    if cx.node(n).op != "Sigmoid" {
        return None;
    }
    let x = cx.input(n, 0)?;
    let s = cx.output(n)?;
    let m = cx.only_reader(s)?;
    if cx.node(m).op != "Mul" || !cx.internal(s, m) || cx.other(m, s) != Some(x) {
        return None;
    }
    found(cx, Kind::Silu, vec![n, m], "Swish", x, m, Vec::new())
}

fn found(
    cx: &Cx<'_>,
    kind: Kind,
    mut nodes: Vec<NodeId>,
    op: &str,
    x: TensorId,
    anchor: NodeId,
    attrs: Vec<(String, Attr)>,
) -> Option<Found> {
    let y = cx.output(anchor)?;
    // Element by element: the output is as large as the input.
    if !cx.same_elements(x, y) {
        return None;
    }
    nodes.sort_unstable();
    nodes.dedup();
    Some(Found {
        kind,
        nodes,
        anchor,
        start: anchor,
        op: op.to_owned(),
        inputs: vec![Some(x)],
        output: y,
        attrs,
    })
}

/// The data and bias operands of Add node `p` making `x`, when one operand is a bias: fewer
/// elements, no higher rank, broadcast over the other.
fn bias_add(cx: &Cx<'_>, p: NodeId, x: TensorId) -> Option<(TensorId, TensorId)> {
    if cx.node(p).op != "Add" || cx.output(p) != Some(x) {
        return None;
    }
    let (a, b) = (cx.input(p, 0)?, cx.input(p, 1)?);
    [(a, b), (b, a)].into_iter().find(|&(h, bias)| {
        cx.same_elements(h, x)
            && !cx.same_elements(bias, x)
            && !cx.scalar(bias)
            && cx.g.tensor(bias).shape.len() <= cx.g.tensor(x).shape.len()
    })
}

/// ONNX Runtime's one-node bias activations, and the activation each applies to the sum.
const WITH_BIAS: &[(&str, &str)] = &[
    ("com.microsoft.BiasGelu", "com.microsoft.Gelu"),
    ("com.microsoft.FastGelu", "com.microsoft.FastGelu"),
];

/// A bias `Add` before activation node `n`, or `n` an activation that adds its bias itself.
pub(crate) fn bias_act(cx: &Cx<'_>, n: NodeId) -> Option<Found> {
    let node = cx.node(n);
    if node.outputs.len() != 1 {
        return None;
    }
    if let Some(&(_, act)) = WITH_BIAS.iter().find(|(op, _)| *op == node.op) {
        return with_own_bias(cx, n, act);
    }
    if !ACTIVATIONS.contains(&node.op.as_str()) {
        return None;
    }
    let x = cx.input(n, 0)?;
    if !cx.internal(x, n) {
        return None;
    }
    let p = cx.producer(x)?;
    let (h, bias) = bias_add(cx, p, x)?;
    let mut attrs = vec![("activation".to_owned(), Attr::Str(node.op.clone()))];
    attrs.extend(node.attrs.iter().cloned());
    Some(Found {
        kind: Kind::BiasAct,
        nodes: if p < n { vec![p, n] } else { vec![n, p] },
        anchor: n,
        start: n,
        op: "memplan.BiasAct".to_owned(),
        inputs: vec![Some(h), Some(bias)],
        output: cx.output(n)?,
        attrs,
    })
}

/// Node `n`, `act(x + bias)` in one ONNX Runtime node, as `memplan.BiasAct`: when it reads
/// exactly a tensor and a smaller bias.
fn with_own_bias(cx: &Cx<'_>, n: NodeId, act: &str) -> Option<Found> {
    let node = cx.node(n);
    let (x, bias) = match node.inputs.as_slice() {
        [Some(x), Some(b)] => (*x, *b),
        _ => return None,
    };
    let y = cx.output(n)?;
    if !cx.same_elements(x, y)
        || cx.same_elements(bias, y)
        || cx.scalar(bias)
        || cx.g.tensor(bias).shape.len() > cx.g.tensor(y).shape.len()
    {
        return None;
    }
    let mut attrs = vec![("activation".to_owned(), Attr::Str(act.to_owned()))];
    attrs.extend(node.attrs.iter().cloned());
    Some(Found {
        kind: Kind::BiasAct,
        nodes: vec![n],
        anchor: n,
        start: n,
        op: "memplan.BiasAct".to_owned(),
        inputs: vec![Some(x), Some(bias)],
        output: y,
        attrs,
    })
}

/// `f` (a fused GELU or SiLU) with the bias `Add` before it, when there is one that no other
/// pattern took.
pub(crate) fn bias_before(cx: &Cx<'_>, f: &Found, taken: &IndexVec<NodeId, bool>) -> Option<Found> {
    let x = (*f.inputs.first()?)?;
    let p = cx.producer(x)?;
    if taken[p] || !cx.swallowable(x, &f.nodes) {
        return None;
    }
    let (h, bias) = bias_add(cx, p, x)?;
    let mut attrs = vec![("activation".to_owned(), Attr::Str(f.op.clone()))];
    attrs.extend(f.attrs.iter().cloned());
    let mut nodes = f.nodes.clone();
    nodes.push(p);
    nodes.sort_unstable();
    Some(Found {
        kind: Kind::BiasAct,
        nodes,
        anchor: f.anchor,
        start: f.start,
        op: "memplan.BiasAct".to_owned(),
        inputs: vec![Some(h), Some(bias)],
        output: f.output,
        attrs,
    })
}
