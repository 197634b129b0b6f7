//! Fusions made before the backward is derived, as ONNX Runtime's training graph builder
//! makes them (`GeluFusion`, `BiasGeluFusion`, `FastGeluFusion`, `LayerNormFusion`):
//! exporters spell GELU as `x * 0.5 * (1 + erf(x / √2))`, its tanh approximation op by op,
//! and older ones layer normalisation as
//! `(x - mean) / sqrt(var + eps) * scale + bias`. Differentiated op by op, these save every
//! intermediate; fused, their gradients read what `Gelu` and `LayerNormalization` read (the
//! input; the input, scale and statistics). Group normalisation as both PyTorch exporters
//! write it below opset 21 (`x` reshaped to `[n, groups, rest]`, `InstanceNormalization`
//! with constant ones and zeros, reshaped back, then `* scale + bias` per channel) becomes
//! `GroupNormalization`: op by op the scale's gradient keeps the normalised tensor, an
//! activation's worth that PyTorch's `group_norm` (and the fused op) does not save. Only patterns whose intermediates feed nothing
//! else are fused, so the forward computes the same values.
//!
//! Then, whatever spelling is left ([`pointwise`]): a region of element-wise ops with one
//! input tensor, one output and no intermediate read outside it is one element-wise
//! function of its input, `memplan.Pointwise` (attribute `memplan.ops`: how many ops it
//! runs), whose gradient reads the input alone (the region's intermediates are recomputed
//! inside the kernel from it, as PyTorch's `gelu`, `silu` and `mish` kernels do). Regions
//! whose ops are all affine in the input are left alone: their gradients read nothing.
//! GELU spelled with the half anywhere, `gelu_new` op by op, SiLU and Mish written out save
//! what the single op saves.

use memplan_ir::{Attr, Graph, IndexVec, Node, NodeId, TensorId, TensorKind};

/// What one fusion does: the nodes it removes, the intermediates they made, and the node
/// that replaces the last one.
struct Fusion {
    remove: Vec<NodeId>,
    last: NodeId,
    op: &'static str,
    inputs: Vec<Option<TensorId>>,
    attrs: Vec<(String, Attr)>,
}

/// `graph` with every fusable GELU and layer normalisation fused, and (`pointwise_fusion`)
/// every other element-wise region of one input.
pub(super) fn fuse(graph: Graph, pointwise_fusion: bool) -> Graph {
    let consumers = graph.consumers();
    let producers = graph.producers();
    let mut fusions = Vec::new();
    let mut taken: IndexVec<NodeId, bool> = IndexVec::from_elem(false, graph.nodes().len());
    for (n, node) in graph.nodes().iter_enumerated() {
        let found = match node.op.as_str() {
            "Erf" => gelu(&graph, &consumers, &producers, n),
            "Tanh" => fast_gelu(&graph, &consumers, &producers, n),
            "ReduceMean" => layer_norm(&graph, &consumers, n),
            "InstanceNormalization" => group_norm(&graph, &consumers, &producers, n),
            _ => None,
        };
        if let Some(f) = found
            && !f.remove.iter().chain([&f.last]).any(|&m| taken[m])
        {
            for &m in f.remove.iter().chain([&f.last]) {
                taken[m] = true;
            }
            fusions.push(f);
        }
    }
    if pointwise_fusion {
        fusions.extend(pointwise(&graph, &consumers, &producers, &mut taken));
    }
    if fusions.is_empty() {
        return graph;
    }
    rebuild(graph, &fusions)
}

/// The op of a fused element-wise region.
pub(crate) const POINTWISE_OP: &str = "memplan.Pointwise";
/// Attribute of a fused region: how many element-wise ops it runs.
pub(crate) const ATTR_OPS: &str = "memplan.ops";

/// Element-wise ops a fused region may hold (one output of the input's shape each).
const ELEMENTWISE: &[&str] = &[
    "Abs",
    "Add",
    "Celu",
    "Clip",
    "Cos",
    "Div",
    "Elu",
    "Erf",
    "Exp",
    "Gelu",
    "HardSigmoid",
    "HardSwish",
    "Identity",
    "LeakyRelu",
    "Log",
    "Max",
    "Min",
    "Mish",
    "Mul",
    "Neg",
    "Pow",
    "Reciprocal",
    "Relu",
    "Selu",
    "Sigmoid",
    "Sin",
    "Softplus",
    "Softsign",
    "Sqrt",
    "Sub",
    "Tanh",
];

/// Ops affine in their one non-constant operand (with Mul and Div by a constant).
const AFFINE: &[&str] = &["Add", "Sub", "Neg", "Identity"];

/// Regions of element-wise ops not yet taken, each one function of one input (see the
/// module docs), found from their last node backwards: first every element-wise producer
/// whose output only the region reads and has the output's shape and dtype (up to
/// [`MAX_REGION`] nodes), then, for each tensor the region reads as its input `x`, the nodes
/// that read only `x`, constants and each other's outputs; the largest such region whose
/// other outputs only it reads is fused.
fn pointwise(
    g: &Graph,
    consumers: &IndexVec<TensorId, Vec<NodeId>>,
    producers: &IndexVec<TensorId, Option<NodeId>>,
    taken: &mut IndexVec<NodeId, bool>,
) -> Vec<Fusion> {
    let mut out = Vec::new();
    let mut inside: IndexVec<NodeId, bool> = IndexVec::from_elem(false, g.nodes().len());
    let mut chosen: IndexVec<NodeId, bool> = IndexVec::from_elem(false, g.nodes().len());
    let varying = |t: &Option<TensorId>| t.filter(|&t| !scalar(g, Some(t)));
    for (n, node) in g.nodes().iter_enumerated().rev() {
        if taken[n] || !ELEMENTWISE.contains(&node.op.as_str()) {
            continue;
        }
        let Some(y) = single_output(node) else {
            continue;
        };
        let like_y = |t: TensorId| {
            g.tensor(t).dtype == g.tensor(y).dtype && g.tensor(t).shape == g.tensor(y).shape
        };
        // Every element-wise producer only the region reads.
        let mut cone = vec![n];
        inside[n] = true;
        let mut k = 0;
        while k < cone.len() && cone.len() < MAX_REGION {
            let inputs: Vec<TensorId> = g.node(cone[k]).inputs.iter().filter_map(varying).collect();
            k += 1;
            for u in inputs {
                let Some(p) = producers[u] else { continue };
                let pn = g.node(p);
                let joins = !taken[p]
                    && !inside[p]
                    && ELEMENTWISE.contains(&pn.op.as_str())
                    && single_output(pn) == Some(u)
                    && g.tensor(u).kind == TensorKind::Activation
                    && like_y(u)
                    && consumers[u].iter().all(|&c| inside[c]);
                if joins {
                    inside[p] = true;
                    cone.push(p);
                    // A node joining may make an earlier frontier tensor's readers all
                    // inside: look again from the start.
                    k = 0;
                }
            }
        }
        cone.sort_unstable();
        // The inputs it could be a function of.
        let mut xs: Vec<TensorId> = cone
            .iter()
            .flat_map(|&m| g.node(m).inputs.iter().filter_map(varying))
            .filter(|&u| like_y(u))
            .collect();
        xs.sort_unstable();
        xs.dedup();
        let mut best: Option<(Vec<NodeId>, TensorId)> = None;
        for &x in &xs {
            // In node order (producers first): a node joins when all it reads is x, a
            // constant or a member's output.
            let mut region: Vec<NodeId> = Vec::new();
            for &m in &cone {
                let member = g.node(m).inputs.iter().filter_map(varying).all(|u| {
                    u == x || producers[u].is_some_and(|p| p != m && chosen[p] && inside[p])
                });
                if member && producers[x] != Some(m) {
                    chosen[m] = true;
                    region.push(m);
                }
            }
            // The output node must belong, and no other member's output be read outside.
            let closed = chosen[n]
                && region.iter().all(|&m| {
                    m == n
                        || g.node(m)
                            .outputs
                            .iter()
                            .all(|&o| consumers[o].iter().all(|&c| chosen[c]))
                });
            for &m in &region {
                chosen[m] = false;
            }
            let better = best.as_ref().is_none_or(|(b, _)| region.len() > b.len());
            if closed && region.len() >= 2 && better && nonlinear(g, &region, &varying) {
                best = Some((region, x));
            }
        }
        for &m in &cone {
            inside[m] = false;
        }
        let Some((mut region, x)) = best else {
            continue;
        };
        for &m in &region {
            taken[m] = true;
        }
        region.retain(|&m| m != n);
        out.push(Fusion {
            last: n,
            op: POINTWISE_OP,
            inputs: vec![Some(x)],
            attrs: vec![(ATTR_OPS.to_owned(), Attr::Int(region.len() as i64 + 1))],
            remove: region,
        });
    }
    out
}

/// The most nodes a fused element-wise region gathers before choosing its input.
const MAX_REGION: usize = 64;

/// Whether a region is not affine in its input: some node is neither an affine op nor a Mul
/// or Div with one varying operand (its op-by-op gradient would read a tensor).
fn nonlinear(
    g: &Graph,
    region: &[NodeId],
    varying: &dyn Fn(&Option<TensorId>) -> Option<TensorId>,
) -> bool {
    region.iter().any(|&m| {
        let node = g.node(m);
        let k = node.inputs.iter().filter_map(varying).count();
        match node.op.as_str() {
            op if AFFINE.contains(&op) => false,
            "Mul" | "Div" => k > 1,
            _ => true,
        }
    })
}

/// The single node reading `t`, if exactly one does and `t` is an activation.
fn only_reader(
    g: &Graph,
    consumers: &IndexVec<TensorId, Vec<NodeId>>,
    t: TensorId,
) -> Option<NodeId> {
    match (g.tensor(t).kind, consumers[t].as_slice()) {
        (TensorKind::Activation, [c]) => Some(*c),
        _ => None,
    }
}

/// Whether `t` is a constant of at most one element.
fn scalar(g: &Graph, t: Option<TensorId>) -> bool {
    t.is_some_and(|t| {
        let x = g.tensor(t);
        x.kind == TensorKind::Weight && x.static_elements().is_ok_and(|n| n <= 1)
    })
}

fn input(node: &Node, i: usize) -> Option<TensorId> {
    node.inputs.get(i).copied().flatten()
}

fn single_output(node: &Node) -> Option<TensorId> {
    match node.outputs.as_slice() {
        [y] => Some(*y),
        _ => None,
    }
}

/// The other operand of a binary node, when one of its two operands is `t`.
fn other(node: &Node, t: TensorId) -> Option<TensorId> {
    match (input(node, 0), input(node, 1)) {
        (Some(a), b) if a == t => b,
        (a, Some(b)) if b == t => a,
        _ => None,
    }
}

/// GELU around the Erf node `e_node`: `d = x / c` (or `x * c`), `e = erf(d)`, `a = e + 1`,
/// then `y = (x * a) * 0.5` or `y = (x * 0.5) * a`.
fn gelu(
    g: &Graph,
    consumers: &IndexVec<TensorId, Vec<NodeId>>,
    producers: &IndexVec<TensorId, Option<NodeId>>,
    e_node: NodeId,
) -> Option<Fusion> {
    let erf = g.node(e_node);
    let d = input(erf, 0)?;
    let e = single_output(erf)?;
    let d_node = producers[d]?;
    let div = g.node(d_node);
    if !matches!(div.op.as_str(), "Div" | "Mul") || !scalar(g, input(div, 1)) {
        return None;
    }
    let x = input(div, 0)?;
    only_reader(g, consumers, d).filter(|&c| c == e_node)?;
    let a_node = only_reader(g, consumers, e)?;
    let add = g.node(a_node);
    if add.op != "Add" || !scalar(g, other(add, e)) {
        return None;
    }
    let a = single_output(add)?;
    let m_node = only_reader(g, consumers, a)?;
    let mul = g.node(m_node);
    if mul.op != "Mul" {
        return None;
    }
    let p = other(mul, a)?;
    let m = single_output(mul)?;
    let (remove, last) = if p == x {
        // (x * a) * 0.5
        let last = only_reader(g, consumers, m)?;
        let half = g.node(last);
        if half.op != "Mul" || !scalar(g, other(half, m)) {
            return None;
        }
        (vec![d_node, e_node, a_node, m_node], last)
    } else {
        // (x * 0.5) * a
        let h_node = producers[p]?;
        let half = g.node(h_node);
        if half.op != "Mul"
            || other(half, x).is_none_or(|c| !scalar(g, Some(c)))
            || only_reader(g, consumers, p) != Some(m_node)
        {
            return None;
        }
        (vec![d_node, e_node, a_node, h_node], m_node)
    };
    let y = single_output(g.node(last))?;
    if g.tensor(x).dtype != g.tensor(y).dtype || g.tensor(x).shape != g.tensor(y).shape {
        return None;
    }
    // x = p + bias, read only by the GELU: ONNX Runtime's BiasGelu(p, bias).
    let bias_gelu = bias_add(g, consumers, producers, x, &remove, last);
    Some(match bias_gelu {
        Some((b_node, p, bias)) => Fusion {
            remove: [b_node].into_iter().chain(remove).collect(),
            last,
            op: "com.microsoft.BiasGelu",
            inputs: vec![Some(p), Some(bias)],
            attrs: Vec::new(),
        },
        None => Fusion {
            remove,
            last,
            op: "Gelu",
            inputs: vec![Some(x)],
            attrs: Vec::new(),
        },
    })
}

/// `x = p + bias` (the bias a 1-D weight over the last axis, on either side of the Add),
/// read only by the fused nodes `remove` and `last`: the Add node, `p` and the bias, which
/// the fused op takes as its two inputs (ONNX Runtime's `BiasGeluFusion`).
fn bias_add(
    g: &Graph,
    consumers: &IndexVec<TensorId, Vec<NodeId>>,
    producers: &IndexVec<TensorId, Option<NodeId>>,
    x: TensorId,
    remove: &[NodeId],
    last: NodeId,
) -> Option<(NodeId, TensorId, TensorId)> {
    let b_node = producers[x]?;
    let add = g.node(b_node);
    if add.op != "Add" {
        return None;
    }
    let only_fused = g.tensor(x).kind == TensorKind::Activation
        && consumers[x]
            .iter()
            .all(|c| remove.contains(c) || *c == last);
    if !only_fused {
        return None;
    }
    let is_bias = |t: TensorId| {
        let b = g.tensor(t);
        b.kind.is_persistent() && b.shape.len() == 1 && b.shape.last() == g.tensor(x).shape.last()
    };
    let (a, b) = (input(add, 0)?, input(add, 1)?);
    [(a, b), (b, a)]
        .into_iter()
        .find(|&(p, bias)| is_bias(bias) && g.tensor(p).shape == g.tensor(x).shape)
        .map(|(p, bias)| (b_node, p, bias))
}

/// The producer of `t` when it is a `op` node with one output that only `reader` reads.
fn feeding(
    g: &Graph,
    consumers: &IndexVec<TensorId, Vec<NodeId>>,
    producers: &IndexVec<TensorId, Option<NodeId>>,
    t: TensorId,
    op: &str,
    reader: NodeId,
) -> Option<NodeId> {
    let p = producers[t]?;
    (g.node(p).op == op
        && single_output(g.node(p)) == Some(t)
        && only_reader(g, consumers, t) == Some(reader))
    .then_some(p)
}

/// The non-scalar operand of binary `node` whose other operand is a scalar constant.
fn scaled(g: &Graph, node: &Node) -> Option<TensorId> {
    match (input(node, 0), input(node, 1)) {
        (Some(a), b) if scalar(g, b) => Some(a),
        (a, Some(b)) if scalar(g, a) => Some(b),
        _ => None,
    }
}

/// GELU's tanh approximation around the Tanh node `t_node`, spelled as ONNX Runtime's
/// `FastGeluFusion` fuses it (found by running its training graph builder on every
/// operand order): `u = (x + x³ · 0.044715) · √(2/π)` with the cube a `Pow(x, 3)`,
/// `y = (x · 0.5) · (tanh(u) + 1)`, scalars on either side of each Mul and Add. With the
/// cube written `x · x · x`, or the half applied last, ONNX Runtime leaves the ops as they
/// are, and so does this. `x = p + bias` read only by it becomes `FastGelu(p, bias)`.
fn fast_gelu(
    g: &Graph,
    consumers: &IndexVec<TensorId, Vec<NodeId>>,
    producers: &IndexVec<TensorId, Option<NodeId>>,
    t_node: NodeId,
) -> Option<Fusion> {
    let tanh = g.node(t_node);
    let t = single_output(tanh)?;
    let u = input(tanh, 0)?;
    let u_node = feeding(g, consumers, producers, u, "Mul", t_node)?;
    let s = scaled(g, g.node(u_node))?;
    let s_node = feeding(g, consumers, producers, s, "Add", u_node)?;
    let add = g.node(s_node);
    // One operand of the Add is x, the other x³ · 0.044715.
    let (x, m_node) = [
        (input(add, 0)?, input(add, 1)?),
        (input(add, 1)?, input(add, 0)?),
    ]
    .into_iter()
    .find_map(|(x, m)| {
        let m_node = feeding(g, consumers, producers, m, "Mul", s_node)?;
        let cube = scaled(g, g.node(m_node))?;
        let pow_node = feeding(g, consumers, producers, cube, "Pow", m_node)?;
        let pow = g.node(pow_node);
        (input(pow, 0) == Some(x) && scalar(g, input(pow, 1))).then_some((x, m_node))
    })?;
    let pow_node = producers[scaled(g, g.node(m_node))?]?;
    let a1_node = only_reader(g, consumers, t)?;
    if g.node(a1_node).op != "Add" || scaled(g, g.node(a1_node)) != Some(t) {
        return None;
    }
    let a1 = single_output(g.node(a1_node))?;
    let y_node = only_reader(g, consumers, a1)?;
    let last = g.node(y_node);
    let hx = other(last, a1).filter(|_| last.op == "Mul")?;
    let hx_node = feeding(g, consumers, producers, hx, "Mul", y_node)?;
    if scaled(g, g.node(hx_node)) != Some(x) {
        return None;
    }
    let y = single_output(last)?;
    if g.tensor(x).dtype != g.tensor(y).dtype || g.tensor(x).shape != g.tensor(y).shape {
        return None;
    }
    let remove = vec![pow_node, m_node, s_node, u_node, t_node, a1_node, hx_node];
    let bias = bias_add(g, consumers, producers, x, &remove, y_node);
    Some(match bias {
        Some((b_node, p, bias)) => Fusion {
            remove: [b_node].into_iter().chain(remove).collect(),
            last: y_node,
            op: "com.microsoft.FastGelu",
            inputs: vec![Some(p), Some(bias)],
            attrs: Vec::new(),
        },
        None => Fusion {
            remove,
            last: y_node,
            op: "com.microsoft.FastGelu",
            inputs: vec![Some(x)],
            attrs: Vec::new(),
        },
    })
}

/// Layer normalisation starting at `ReduceMean` node `mu_node` over the last axis:
/// `c = x - mean(x)`, `v = mean(c^2)` (`Pow(c, 2)` or `c * c`), `s = sqrt(v + eps)`,
/// `n = c / s`, then `n * scale + bias` with 1-D weights.
fn layer_norm(
    g: &Graph,
    consumers: &IndexVec<TensorId, Vec<NodeId>>,
    mu_node: NodeId,
) -> Option<Fusion> {
    let reduce = g.node(mu_node);
    let x = input(reduce, 0)?;
    let rank = g.tensor(x).shape.len() as i64;
    let last_axis = |node: &Node| {
        let axes: Option<Vec<i64>> = match node.attr("axes") {
            Some(a) => a.as_ints().map(<[i64]>::to_vec),
            None => input(node, 1).and_then(|t| g.tensor(t).int_value.clone()),
        };
        axes.is_some_and(|a| a.len() == 1 && (a[0] == -1 || a[0] == rank - 1))
            && node.attr("keepdims").and_then(Attr::as_int).unwrap_or(1) != 0
    };
    if !last_axis(reduce) {
        return None;
    }
    let mu = single_output(reduce)?;
    let sub_node = only_reader(g, consumers, mu)?;
    let sub = g.node(sub_node);
    if sub.op != "Sub" || input(sub, 0) != Some(x) || input(sub, 1) != Some(mu) {
        return None;
    }
    let c = single_output(sub)?;
    // c feeds the square and the division.
    let readers = consumers[c].as_slice();
    if g.tensor(c).kind != TensorKind::Activation || readers.len() != 2 {
        return None;
    }
    let (mut sq_node, mut div_node) = (None, None);
    for &r in readers {
        let node = g.node(r);
        match node.op.as_str() {
            "Pow" if input(node, 0) == Some(c) => sq_node = Some(r),
            "Mul" if input(node, 0) == Some(c) && input(node, 1) == Some(c) => sq_node = Some(r),
            "Div" if input(node, 0) == Some(c) => div_node = Some(r),
            _ => {}
        }
    }
    let (sq_node, div_node) = (sq_node?, div_node?);
    let sq = single_output(g.node(sq_node))?;
    let var_node = only_reader(g, consumers, sq)?;
    if g.node(var_node).op != "ReduceMean" || !last_axis(g.node(var_node)) {
        return None;
    }
    let var = single_output(g.node(var_node))?;
    let eps_node = only_reader(g, consumers, var)?;
    let eps = g.node(eps_node);
    if eps.op != "Add" || !scalar(g, other(eps, var)) {
        return None;
    }
    let ve = single_output(eps)?;
    let sqrt_node = only_reader(g, consumers, ve)?;
    if g.node(sqrt_node).op != "Sqrt" {
        return None;
    }
    let sd = single_output(g.node(sqrt_node))?;
    if only_reader(g, consumers, sd) != Some(div_node) || input(g.node(div_node), 1) != Some(sd) {
        return None;
    }
    let n = single_output(g.node(div_node))?;
    let one_d = |t: Option<TensorId>| {
        t.filter(|&t| {
            let w = g.tensor(t);
            w.kind.is_persistent()
                && w.shape.len() == 1
                && w.shape.last() == g.tensor(x).shape.last()
        })
    };
    let scale_node = only_reader(g, consumers, n)?;
    let scale_mul = g.node(scale_node);
    let scale = one_d(other(scale_mul, n)).filter(|_| scale_mul.op == "Mul")?;
    let ns = single_output(scale_mul)?;
    let bias_node = only_reader(g, consumers, ns)?;
    let bias_add = g.node(bias_node);
    let bias = one_d(other(bias_add, ns)).filter(|_| bias_add.op == "Add")?;
    let y = single_output(bias_add)?;
    let epsilon = 1e-5;
    (g.tensor(y).shape == g.tensor(x).shape).then(|| Fusion {
        remove: vec![
            mu_node, sub_node, sq_node, var_node, eps_node, sqrt_node, div_node, scale_node,
        ],
        last: bias_node,
        op: "LayerNormalization",
        inputs: vec![Some(x), Some(scale), Some(bias)],
        attrs: vec![
            ("axis".to_owned(), Attr::Int(-1)),
            ("epsilon".to_owned(), Attr::Float(epsilon)),
        ],
    })
}

/// Group normalisation around `InstanceNormalization` node `in_node`: `r = Reshape(x)` to
/// `[n, groups, rest]`, `i = InstanceNormalization(r, s, b)` with constant `s` and `b` of
/// `groups` elements (the exporters' ones and zeros), `v = Reshape(i)` back to `x`'s shape,
/// then `v * scale + bias` with per-channel weights (`[c]` or `[c, 1, ...]`).
fn group_norm(
    g: &Graph,
    consumers: &IndexVec<TensorId, Vec<NodeId>>,
    producers: &IndexVec<TensorId, Option<NodeId>>,
    in_node: NodeId,
) -> Option<Fusion> {
    let norm = g.node(in_node);
    let r = input(norm, 0)?;
    let i = single_output(norm)?;
    let r_node = producers[r]?;
    let reshape = g.node(r_node);
    let x = input(reshape, 0)?;
    only_reader(g, consumers, r).filter(|&c| c == in_node)?;
    let (xs, rs) = (&g.tensor(x).shape, &g.tensor(r).shape);
    if reshape.op != "Reshape" || xs.len() < 3 || rs.len() != 3 || xs[0] != rs[0] {
        return None;
    }
    let groups = rs[1].as_constant()?;
    let channels = xs[1].as_constant()?;
    if groups < 1 || channels % groups != 0 {
        return None;
    }
    // The instance normalisation's own scale and bias: constants of one value per group.
    let per_group = |t: Option<TensorId>| {
        t.is_some_and(|t| {
            let w = g.tensor(t);
            w.kind == TensorKind::Weight
                && producers[t].is_none()
                && w.static_elements().is_ok_and(|n| n == groups as u64)
        })
    };
    if !per_group(input(norm, 1)) || !per_group(input(norm, 2)) {
        return None;
    }
    let back_node = only_reader(g, consumers, i)?;
    let back = g.node(back_node);
    let v = single_output(back)?;
    if back.op != "Reshape" || g.tensor(v).shape != *xs {
        return None;
    }
    // A weight of one value per channel, laid out along axis 1 of `x`: `[c]` is not (it
    // broadcasts over the last axis), `[c, 1, ...]` of rank `rank(x) - 1` is.
    let per_channel = |t: Option<TensorId>| {
        t.filter(|&t| {
            let w = g.tensor(t);
            let dims: Option<Vec<i64>> = w.shape.iter().map(|d| d.as_constant()).collect();
            w.kind.is_persistent()
                && dims.is_some_and(|d| {
                    d.len() + 1 == xs.len() && d[0] == channels && d[1..].iter().all(|&k| k == 1)
                })
        })
    };
    let scale_node = only_reader(g, consumers, v)?;
    let scale_mul = g.node(scale_node);
    let scale = per_channel(other(scale_mul, v)).filter(|_| scale_mul.op == "Mul")?;
    let vs = single_output(scale_mul)?;
    let bias_node = only_reader(g, consumers, vs)?;
    let bias_add = g.node(bias_node);
    let bias = per_channel(other(bias_add, vs)).filter(|_| bias_add.op == "Add")?;
    let y = single_output(bias_add)?;
    if g.tensor(y).shape != *xs {
        return None;
    }
    let epsilon = norm.attr("epsilon").cloned().unwrap_or(Attr::Float(1e-5));
    Some(Fusion {
        remove: vec![r_node, in_node, back_node, scale_node],
        last: bias_node,
        op: "GroupNormalization",
        inputs: vec![Some(x), Some(scale), Some(bias)],
        attrs: vec![
            ("num_groups".to_owned(), Attr::Int(groups)),
            ("epsilon".to_owned(), epsilon),
        ],
    })
}

/// The graph without the fused nodes and their intermediates, each fusion's last node
/// replaced by its fused op.
fn rebuild(g: Graph, fusions: &[Fusion]) -> Graph {
    let mut drop_node: IndexVec<NodeId, bool> = IndexVec::from_elem(false, g.nodes().len());
    let mut replace: IndexVec<NodeId, Option<usize>> = IndexVec::from_elem(None, g.nodes().len());
    let mut drop_tensor: IndexVec<TensorId, bool> = IndexVec::from_elem(false, g.tensors().len());
    for (k, f) in fusions.iter().enumerate() {
        for &n in &f.remove {
            drop_node[n] = true;
            for &t in &g.node(n).outputs {
                drop_tensor[t] = true;
            }
        }
        replace[f.last] = Some(k);
    }
    let mut out = Graph::with_symbols_of(g.name.clone(), &g);
    out.batch = g.batch;
    for (k, v) in g.metadata() {
        out.set_metadata(k.clone(), v.clone());
    }
    for (s, e) in g.symbol_bounds() {
        out.set_symbol_bound(*s, e.clone());
    }
    for (s, a, b) in g.symbol_broadcasts() {
        out.set_symbol_broadcast(*s, a.clone(), b.clone());
    }
    let mut map: IndexVec<TensorId, Option<TensorId>> =
        IndexVec::from_elem(None, g.tensors().len());
    for (t, tensor) in g.tensors().iter_enumerated() {
        if !drop_tensor[t] {
            map[t] = Some(out.add_tensor(tensor.clone()));
        }
    }
    let m = |t: TensorId| map[t];
    for (n, node) in g.nodes().iter_enumerated() {
        if drop_node[n] {
            continue;
        }
        let mut node = node.clone();
        if let Some(k) = replace[n] {
            let f = &fusions[k];
            node.op = f.op.to_owned();
            node.inputs = f.inputs.clone();
            node.attrs = f.attrs.clone();
        }
        node.inputs = node.inputs.iter().map(|i| i.and_then(m)).collect();
        node.outputs = node.outputs.iter().filter_map(|&o| m(o)).collect();
        node.implicit_inputs = node.implicit_inputs.iter().filter_map(|&t| m(t)).collect();
        out.add_node(node);
    }
    out.set_output_order(g.outputs().iter().filter_map(|&t| m(t)).collect());
    out
}
