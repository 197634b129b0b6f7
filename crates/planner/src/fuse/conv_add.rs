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
//!
//! Older exporters (Caffe2's) write the residual add as a two-input `Sum` and leave an
//! inference `BatchNormalization` (one output) between the convolution and it; in inference
//! the kernel folds that normalisation into its weights and bias (as Inductor's freezing and
//! ONNX Runtime do), so the pattern takes it: its four parameters follow the product's inputs
//! (`norm_input` names the first). Training folds nothing (the normalisation's backward is
//! its own).
//!
//! In inference the kernel also applies an epilogue between the product (with its bias) and
//! the residual: a `Mul` by a tensor smaller than what it scales (ConvNeXt's layer scale,
//! which the kernel folds into its weights and bias; input `scale_input`, after the bias)
//! and then a `Transpose` (the kernel writes with strides; `out_perm`): ConvNeXt's block
//! ends `r + transpose(γ · (h·W + b))`.

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

/// A node between a product and its residual that the kernel applies: a bias `Add` or an
/// inference `BatchNormalization`; its node, the operands it adds beside the product's
/// output, and the attribute naming where they start among the kernel's inputs.
type Between = (NodeId, Vec<TensorId>, &'static str);

/// What an inference kernel applies to the product (after its bias) before it adds the
/// residual: a per-channel scale (ConvNeXt's layer scale, folded into the weights and the
/// bias) and a transpose (the kernel writes its output with strides): `y = r +
/// transpose(scale · (x·W + b))`. Its nodes, the scale and the permutation.
#[derive(Default)]
struct Epilogue {
    nodes: Vec<NodeId>,
    scale: Option<TensorId>,
    perm: Option<Vec<i64>>,
}

/// Walks back from `x` (the residual add's operand, past its views) over a `Transpose` and
/// then a `Mul` by a tensor smaller than its output, each output read only by the next node
/// (views between them go to `views`); in inference only. The tensor reached and the
/// epilogue passed.
fn epilogue(cx: &Cx<'_>, mut x: TensorId, views: &mut Vec<NodeId>) -> Option<(TensorId, Epilogue)> {
    let mut e = Epilogue::default();
    if !cx.inference {
        return Some((x, e));
    }
    if let Some(t) = cx.producer(x)
        && cx.node(t).op == "Transpose"
        && cx.node(t).outputs.len() == 1
    {
        e.perm = Some(cx.node(t).attr("perm").and_then(Attr::as_ints)?.to_vec());
        e.nodes.push(t);
        x = through_views(cx, cx.input(t, 0)?, t, views)?.0;
    }
    if let Some(m) = cx.producer(x)
        && cx.node(m).op == "Mul"
        && cx.node(m).outputs.len() == 1
    {
        let (a, b) = (cx.input(m, 0)?, cx.input(m, 1)?);
        let smaller = |s: TensorId| match (
            cx.g.tensor(s).elements_expr(),
            cx.g.tensor(x).elements_expr(),
        ) {
            (Ok(ns), Ok(nx)) => {
                ns != nx && cx.g.tensor(s).shape.len() <= cx.g.tensor(x).shape.len()
            }
            _ => false,
        };
        let (h, scale) = if smaller(b) {
            (a, b)
        } else if smaller(a) {
            (b, a)
        } else {
            return Some((x, e));
        };
        e.scale = Some(scale);
        e.nodes.push(m);
        x = through_views(cx, h, m, views)?.0;
    }
    Some((x, e))
}

/// The product feeding operand `x` of Add node `add`, the bias `Add` or normalisation
/// between them if there is one, the views on the way, and the epilogue.
fn product(
    cx: &Cx<'_>,
    add: NodeId,
    x: TensorId,
) -> Option<(NodeId, Option<Between>, Vec<NodeId>, Epilogue)> {
    let mut views = Vec::new();
    let (x, _) = through_views(cx, x, add, &mut views)?;
    let (x, e) = epilogue(cx, x, &mut views)?;
    let p = cx.producer(x)?;
    if PRODUCTS.contains(&cx.node(p).op.as_str()) {
        return Some((p, None, views, e));
    }
    if cx.inference && cx.node(p).op == "BatchNormalization" {
        let bn = cx.node(p);
        let h = cx.input(p, 0)?;
        let params: Vec<TensorId> = bn.inputs.iter().skip(1).copied().flatten().collect();
        if bn.outputs.len() != 1 || bn.inputs.len() != 5 || params.len() != 4 {
            return None;
        }
        let (h, _) = through_views(cx, h, p, &mut views)?;
        let q = cx.producer(h)?;
        if ["Conv", "ConvTranspose"].contains(&cx.node(q).op.as_str())
            && cx.node(q).outputs.len() == 1
        {
            return Some((q, Some((p, params, "norm_input")), views, e));
        }
        return None;
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
            return Some((q, Some((p, vec![bias], "bias_input")), more, e));
        }
    }
    None
}

/// The pattern ending at Add node `n`.
pub(crate) fn find(cx: &Cx<'_>, n: NodeId) -> Option<Found> {
    let add = cx.node(n);
    if add.op != "Add" && !(add.op == "Sum" && add.inputs.len() == 2) {
        return None;
    }
    let y = cx.output(n)?;
    let (a, b) = (cx.input(n, 0)?, cx.input(n, 1)?);
    if a == b {
        return None;
    }
    type Option3 = (NodeId, Option<Between>, Vec<NodeId>, Epilogue, TensorId);
    let mut options: Vec<Option3> = [(a, b), (b, a)]
        .into_iter()
        .filter_map(|(x, r)| product(cx, n, x).map(|(p, bias, views, e)| (p, bias, views, e, r)))
        .filter(|(_, _, _, _, r)| {
            cx.same_elements(*r, y) && cx.g.tensor(*r).dtype == cx.g.tensor(y).dtype
        })
        .collect();
    // The product made later first.
    options.sort_by_key(|o| std::cmp::Reverse(o.0));
    let (p, bias, views, epilogue, r) = options.into_iter().next()?;
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
    if let Some((between, extra, attr)) = bias {
        // The bias (or the normalisation's parameters) after the product's own inputs, at a
        // fixed place: Conv takes 3, Gemm 3, ConvTranspose 3, MatMul 2.
        let slots = if prod.op == "MatMul" { 3 } else { 4 };
        inputs.resize(slots, None);
        inputs.extend(extra.into_iter().map(Some));
        attrs.push((attr.to_owned(), Attr::Int(i64::try_from(slots).ok()?)));
        nodes.push(between);
    }
    if let Some(scale) = epilogue.scale {
        let slot = inputs.len().max(if prod.op == "MatMul" { 3 } else { 4 });
        inputs.resize(slot, None);
        inputs.push(Some(scale));
        attrs.push((
            "scale_input".to_owned(),
            Attr::Int(i64::try_from(slot).ok()?),
        ));
    }
    if let Some(perm) = epilogue.perm {
        attrs.push(("out_perm".to_owned(), Attr::Ints(perm)));
    }
    nodes.extend(epilogue.nodes);
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
