//! A product added to a residual: `y = conv(x) + r` (or `ConvTranspose`, `Gemm`, `MatMul`,
//! with or without a bias `Add` between, and reshapes: GPT-2's 2-D `Gemm` reshaped back to
//! three dims), where the product's output is read only by that
//! `Add` and `r` has the output's element count and dtype. One node,
//! `memplan.{Conv,ConvTranspose,Gemm,MatMul}Add`, whose input 0 is the residual and whose
//! other inputs are the product's (then the bias, when an `Add` applied it): the kernel
//! accumulates into the residual (oneDNN's sum post-op, cuDNN's `y = conv(x) + z`, a GEMM
//! with `β = 1`), so its output may take the residual's bytes when nothing later reads them
//! (the planner's choice, as for any in-place write). The product's own output never exists.
//!
//! Where both operands of the `Add` are such products (a ResNet block with a projection
//! shortcut), the one made later in node order is fused: the residual is then already there
//! when it runs.

use memplan_ir::{Attr, NodeId, TensorId};

use super::{Cx, Found, Kind};

const PRODUCTS: &[&str] = &["Conv", "ConvTranspose", "Gemm", "MatMul"];

/// Ops that only reshape what they read (a view, in memory): GPT-2's `Conv1D` is a 2-D
/// `Gemm` reshaped back to `[batch, seq, width]`.
const VIEWS: &[&str] = &["Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"];

/// Walks back from `x`, read by `reader`, through views only it reads: the tensor before
/// them, its reader, and the views passed.
fn through_views(
    cx: &Cx<'_>,
    mut x: TensorId,
    mut reader: NodeId,
    views: &mut Vec<NodeId>,
) -> Option<(TensorId, NodeId)> {
    loop {
        if !cx.internal(x, reader) {
            return None;
        }
        let p = cx.producer(x)?;
        if !VIEWS.contains(&cx.node(p).op.as_str()) {
            return Some((x, reader));
        }
        views.push(p);
        reader = p;
        x = cx.input(p, 0)?;
    }
}

/// A bias `Add` between a product and its residual: its node and its bias operand.
type BiasAdd = (NodeId, TensorId);

/// The product feeding operand `x` of Add node `add`, the bias `Add` between them if there
/// is one, and the views on the way.
fn product(
    cx: &Cx<'_>,
    add: NodeId,
    x: TensorId,
) -> Option<(NodeId, Option<BiasAdd>, Vec<NodeId>)> {
    let mut views = Vec::new();
    let (x, _) = through_views(cx, x, add, &mut views)?;
    let p = cx.producer(x)?;
    if PRODUCTS.contains(&cx.node(p).op.as_str()) {
        return Some((p, None, views));
    }
    if cx.node(p).op != "Add" {
        return None;
    }
    // A bias: an operand with fewer elements than the sum (broadcast over it).
    let (a, b) = (cx.input(p, 0)?, cx.input(p, 1)?);
    for (h, bias) in [(a, b), (b, a)] {
        let smaller = match (
            cx.g.tensor(bias).elements_expr(),
            cx.g.tensor(x).elements_expr(),
        ) {
            (Ok(nb), Ok(nx)) => {
                nb != nx && cx.g.tensor(bias).shape.len() <= cx.g.tensor(x).shape.len()
            }
            _ => false,
        };
        if !smaller {
            continue;
        }
        let mut more = views.clone();
        let Some((h, _)) = through_views(cx, h, p, &mut more) else {
            continue;
        };
        let q = cx.producer(h)?;
        if PRODUCTS.contains(&cx.node(q).op.as_str()) && cx.node(q).outputs.len() == 1 {
            return Some((q, Some((p, bias)), more));
        }
    }
    None
}

/// The pattern ending at Add node `n`.
pub(crate) fn find(cx: &Cx<'_>, n: NodeId) -> Option<Found> {
    let add = cx.node(n);
    if add.op != "Add" {
        return None;
    }
    let y = cx.output(n)?;
    let (a, b) = (cx.input(n, 0)?, cx.input(n, 1)?);
    if a == b {
        return None;
    }
    type Option3 = (NodeId, Option<(NodeId, TensorId)>, Vec<NodeId>, TensorId);
    let mut options: Vec<Option3> = [(a, b), (b, a)]
        .into_iter()
        .filter_map(|(x, r)| product(cx, n, x).map(|(p, bias, views)| (p, bias, views, r)))
        .filter(|(_, _, _, r)| {
            cx.same_elements(*r, y) && cx.g.tensor(*r).dtype == cx.g.tensor(y).dtype
        })
        .collect();
    // The product made later first.
    options.sort_by_key(|o| std::cmp::Reverse(o.0));
    let (p, bias, views, r) = options.into_iter().next()?;
    let prod = cx.node(p);
    // `x + linear(x)` fuses too: the kernel reads `x` twice, so the planner, which never
    // writes over an input another operand of the node reads, gives it bytes of its own.
    if prod.outputs.len() != 1 {
        return None;
    }
    let mut inputs = vec![Some(r)];
    inputs.extend(prod.inputs.iter().copied());
    let mut attrs = prod.attrs.clone();
    let mut nodes = vec![p, n];
    nodes.extend(views);
    if let Some((bias_add, bias)) = bias {
        // The bias after the product's own inputs, at a fixed place: Conv takes 3, Gemm 3,
        // ConvTranspose 3, MatMul 2.
        let slots = if prod.op == "MatMul" { 3 } else { 4 };
        inputs.resize(slots, None);
        inputs.push(Some(bias));
        attrs.push((
            "bias_input".to_owned(),
            Attr::Int(i64::try_from(slots).ok()?),
        ));
        nodes.push(bias_add);
    }
    nodes.sort_unstable();
    Some(Found {
        kind: Kind::ConvAdd,
        nodes,
        anchor: n,
        start: n,
        op: format!("memplan.{}Add", prod.op),
        inputs,
        output: y,
        attrs,
    })
}
