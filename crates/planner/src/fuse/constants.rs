//! Tensors built from shapes and constants alone, made where they are used.
//!
//! A node is *constant-built* when what it computes depends on no input's values: it reads
//! only the shape of what it reads (`Shape`, `Size`), or it reads at least one tensor and
//! every tensor it reads is a weight (not updated in place) or constant-built, it runs no
//! body and gives the same result on every run. Exporters build masks, position tables and
//! rotary caches so (ViT's `[batch, 1, 197, 197]` mask from an all-true constant, a causal
//! mask from `Trilu`, Llama's cos and sin from `Range(seq)`), once, and every layer reads
//! them: they live from the first reader to the last (or, computed from weights alone, in the
//! weight region for the whole run). PyTorch and Inductor make them again where used.
//!
//! For each such tensor `t` read by a node that is not constant-built and live where the
//! graph's arena peaks in its node order, or computed at load (largest first, the
//! [`MAX_TRIES`] largest of at least 1/1024 of the graph's need), each of those readers
//! gets its own copy of the nodes that build `t` (back to inputs smaller than an eighth of
//! `t`, which stay shared), placed right before it; an original left unread goes. The
//! copies carry `memplan.at_use` (they run on every run, where used: never at load) and
//! `memplan.copy_of` (the original node's name). Fused kernels are not copied. The rewrite is kept only when it lowers what
//! the graph needs in its node order (arena lower bound plus persistent region, at the
//! options' bindings): keeping a tensor that costs no peak (a table read only at the peak)
//! stays as it was.
//!
//! A weight whose elements are all one value ([`Graph::uniform_constants`], a
//! `torch.zeros(256, 4, 64)` the exporter made a constant, which `scatter_add` then writes
//! into) is tried the same way when it is a constant of the model (`fixed`: never a
//! trained parameter) that no node updates in place: each reader gets its own
//! `ConstantOfShape` (value attribute the weight's value, shape a new small int64 weight
//! `NAME.shape`), and the weight leaves the weight region once nothing reads it. A chain
//! that builds a tensor from such a weight makes its copy of the weight the same way.

use memplan_ir::{Attr, Graph, IndexVec, Node, NodeId, OpTable, TensorId, TensorKind};

use super::{ATTR_AT_USE, Cx};
use crate::error::PlanError;
use crate::options::PlanOptions;

/// At most this many tensors are tried.
const MAX_TRIES: usize = 16;

/// The attribute naming the node (by name) a copy was made from.
pub const ATTR_COPY_OF: &str = "memplan.copy_of";

/// Ops whose result differs from run to run.
fn per_run(op: &str) -> bool {
    let name = op.rsplit('.').next().unwrap_or(op);
    matches!(name, "Multinomial" | "Bernoulli")
        || name.starts_with("Random")
        || name.contains("Dropout")
        || op.contains("training")
        || op.starts_with("memplan.")
}

/// Which tensors of `g` are constant-built (see the module docs).
fn constant_built(g: &Graph, table: &OpTable) -> IndexVec<TensorId, bool> {
    let mut updated: IndexVec<TensorId, bool> = IndexVec::from_elem(false, g.tensors().len());
    for node in g.nodes().iter() {
        for pos in table.mutated_inputs(node) {
            if let Some(Some(t)) = node.inputs.get(pos) {
                updated[*t] = true;
            }
        }
    }
    let mut out: IndexVec<TensorId, bool> = IndexVec::from_elem(false, g.tensors().len());
    for node in g.nodes().iter() {
        if !node.bodies.is_empty()
            || per_run(&node.op)
            || node.outputs.iter().any(|&o| updated[o])
            || node.attr(super::ATTR_FUSION).is_some()
        {
            continue;
        }
        let shape_only = matches!(node.op.as_str(), "Shape" | "Size");
        let mut reads = node.present_inputs().peekable();
        let from_constants = reads.peek().is_some()
            && reads.all(|t| !updated[t] && (g.tensor(t).kind == TensorKind::Weight || out[t]));
        if shape_only || from_constants {
            for &o in &node.outputs {
                out[o] = g.tensor(o).kind == TensorKind::Activation;
            }
        }
    }
    out
}

/// What a graph needs and which of its tensors are live at its peak (those worth trying).
pub(crate) type Need<'a> =
    dyn Fn(&Graph) -> Result<(u64, IndexVec<TensorId, bool>), PlanError> + 'a;

/// Whether a weight of a graph is a constant of the model (never a trained parameter), so
/// that, all one value, it may be made where used.
pub(crate) type Fixed<'a> = dyn Fn(&Graph, TensorId) -> bool + 'a;

/// Per tensor of `g`: a weight of static shape whose elements are all one value (that
/// value, as an attribute), fixed, read by some node and updated by none.
fn uniform_weights(
    g: &Graph,
    table: &OpTable,
    fixed: &Fixed<'_>,
) -> IndexVec<TensorId, Option<Attr>> {
    let mut out: IndexVec<TensorId, Option<Attr>> = IndexVec::from_elem(None, g.tensors().len());
    for (name, value) in g.uniform_constants() {
        let Some(t) = g.find_tensor(name) else {
            continue;
        };
        let x = g.tensor(t);
        if x.kind != TensorKind::Weight || x.static_dims().is_none() || !fixed(g, t) {
            continue;
        }
        out[t] = if x.dtype.is_float() {
            value.parse::<f64>().ok().map(Attr::Float)
        } else {
            value.parse::<i64>().ok().map(Attr::Int)
        };
    }
    let consumers = g.consumers();
    for node in g.nodes().iter() {
        for pos in table.mutated_inputs(node) {
            if let Some(Some(t)) = node.inputs.get(pos) {
                out[*t] = None;
            }
        }
    }
    for t in g.outputs() {
        out[t] = None;
    }
    for t in consumers.ids() {
        if consumers[t].is_empty() {
            out[t] = None;
        }
    }
    out
}

/// `graph` with constant-built tensors made where they are used wherever that lowers what it
/// needs as `need` measures it (the graph's need under `options`, or a training step's, of
/// the step derived from the graph); returns how many copies were made.
pub(crate) fn remake_with(
    graph: &mut Graph,
    options: &PlanOptions,
    need: &Need<'_>,
    fixed: &Fixed<'_>,
) -> Result<usize, PlanError> {
    Ok(match remake_from(graph, options, need, fixed)? {
        Some((remade, copies)) => {
            *graph = remade;
            copies
        }
        None => 0,
    })
}

/// [`remake_with`] without touching `graph`: the graph remade and the copies made, `None`
/// where nothing is remade.
pub(crate) fn remake_from(
    graph: &Graph,
    options: &PlanOptions,
    need: &Need<'_>,
    fixed: &Fixed<'_>,
) -> Result<Option<(Graph, usize)>, PlanError> {
    let table = &options.op_table;
    let built = constant_built(graph, table);
    let uniform = uniform_weights(graph, table, fixed);
    let bytes = |g: &Graph, t: TensorId| g.tensor(t).bytes(&options.bindings).unwrap_or(0);
    // The constant-built tensors whose bytes a node that is not constant-built reads.
    let mut read_by_computed: IndexVec<TensorId, bool> =
        IndexVec::from_elem(false, graph.tensors().len());
    for node in graph.nodes().iter() {
        if matches!(node.op.as_str(), "Shape" | "Size") || node.outputs.iter().any(|&o| built[o]) {
            continue;
        }
        for t in node.present_inputs() {
            read_by_computed[t] |= built[t];
        }
    }
    for t in graph.outputs() {
        read_by_computed[t] = false;
    }
    // The need is at least the largest activation's or weight's bytes: a graph with no
    // constant-built tensor of 1/1024 of that, read by a node that is not constant-built,
    // has nothing worth a try, and is left without measuring it (most convolutional graphs:
    // their constant-built tensors are reshapes' shapes).
    let largest = graph
        .tensors()
        .iter_enumerated()
        .filter(|(_, x)| matches!(x.kind, TensorKind::Activation | TensorKind::Weight))
        .map(|(t, _)| bytes(graph, t))
        .max()
        .unwrap_or(0);
    let worth = |t: TensorId| {
        (read_by_computed[t] || uniform[t].is_some())
            && bytes(graph, t) > 0
            && bytes(graph, t) >= largest / 1024
    };
    if !graph.tensors().ids().any(worth) {
        return Ok(None);
    }
    // A graph whose sizes cannot be measured (a symbol without a value) is left as it is;
    // planning it reports why.
    let Ok((mut best, live_at_peak)) = need(graph) else {
        return Ok(None);
    };
    let cx = Cx::new(graph);
    // Folded tensors live in the weight region for the whole run: always at the peak.
    let folded = |t: TensorId| {
        options.fold_weights
            && cx.producer(t).is_some_and(|p| {
                cx.node(p)
                    .present_inputs()
                    .all(|i| graph.tensor(i).kind == TensorKind::Weight)
            })
    };
    let mut tries: Vec<(u64, String)> = graph
        .tensors()
        .iter_enumerated()
        .filter(|&(t, _)| worth(t) && (live_at_peak[t] || folded(t) || uniform[t].is_some()))
        .map(|(t, x)| (bytes(graph, t), x.name.clone()))
        .filter(|&(b, _)| b > 0 && b >= best / 1024)
        .collect();
    tries.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    tries.truncate(MAX_TRIES);
    let mut remade: Option<Graph> = None;
    let mut copies = 0;
    for (_, name) in tries {
        let current = remade.as_ref().unwrap_or(graph);
        let Some(t) = current.find_tensor(&name) else {
            continue;
        };
        let Some((candidate, made)) = remake_one(current, t, table, options, fixed) else {
            continue;
        };
        // Worth a copy per reader only when the need falls by more than rounding: keeping
        // what costs no peak (or next to none) stays.
        let margin = (bytes(current, t) / 16).max(4 * options.alignment);
        if let Ok((n, _)) = need(&candidate)
            && n.saturating_add(margin) <= best
        {
            best = n;
            remade = Some(candidate);
            copies += made;
        }
    }
    Ok(remade.map(|g| (g, copies)))
}

/// `g` with tensor `t` made again right before each of its readers that are not
/// constant-built; the copies made. `None` when there is nothing to copy.
fn remake_one(
    g: &Graph,
    t: TensorId,
    table: &OpTable,
    options: &PlanOptions,
    fixed: &Fixed<'_>,
) -> Option<(Graph, usize)> {
    let built = constant_built(g, table);
    let uniform = uniform_weights(g, table, fixed);
    let cx = Cx::new(g);
    let bytes = |u: TensorId| g.tensor(u).bytes(&options.bindings).unwrap_or(u64::MAX);
    let floor = bytes(t) / 8;
    // The nodes that build `t`, back to small or weight inputs, in node order, and the
    // uniform weights of at least the floor they read (made by a `ConstantOfShape` each).
    let mut chain: Vec<NodeId> = Vec::new();
    let mut splat: Vec<TensorId> = Vec::new();
    let mut stack = Vec::new();
    match cx.producer(t) {
        Some(p) => stack.push(p),
        None if uniform[t].is_some() => splat.push(t),
        None => return None,
    }
    while let Some(p) = stack.pop() {
        if chain.contains(&p) {
            continue;
        }
        chain.push(p);
        for u in cx.node(p).present_inputs() {
            if !(built[u] || uniform[u].is_some()) || bytes(u) < floor {
                continue;
            }
            match cx.producer(u) {
                Some(q) => stack.push(q),
                None if uniform[u].is_some() && !splat.contains(&u) => splat.push(u),
                None => {}
            }
        }
    }
    chain.sort_unstable();
    splat.sort_unstable();
    let readers: Vec<NodeId> = cx
        .readers(t)
        .filter(|&r| cx.node(r).outputs.iter().all(|&o| !built[o]))
        .collect();
    if readers.is_empty() {
        return None;
    }
    // The new graph: copies before each reader, readers rewired.
    let mut out = g.clone();
    let mut new_nodes: Vec<Node> =
        Vec::with_capacity(g.nodes().len() + (chain.len() + splat.len()) * readers.len());
    let mut made = 0;
    let mut names: std::collections::HashSet<String> =
        g.nodes().iter().map(|n| n.name.clone()).collect();
    let unique_tensor = |out: &Graph, mut name: String| {
        while out.find_tensor(&name).is_some() {
            name.push('_');
        }
        name
    };
    // Each uniform weight's shape, a small int64 weight the copies share.
    let mut shapes: Vec<TensorId> = Vec::with_capacity(splat.len());
    for &u in &splat {
        let dims: Vec<i64> = g
            .tensor(u)
            .static_dims()?
            .into_iter()
            .map(i64::try_from)
            .collect::<Result<_, _>>()
            .ok()?;
        let name = unique_tensor(&out, format!("{}.shape", g.tensor(u).name));
        let rank = u64::try_from(dims.len()).ok()?;
        let shape =
            memplan_ir::Tensor::new(name, memplan_ir::DType::I64, &[rank], TensorKind::Weight)
                .with_int_value(Some(dims));
        shapes.push(out.add_tensor(shape));
    }
    for (id, node) in g.nodes().iter_enumerated() {
        let mut node = node.clone();
        if readers.contains(&id) {
            let mut map: Vec<(TensorId, TensorId)> = Vec::new();
            let mut copy_name = |orig: &str| {
                let mut name = format!("{orig}@{}", node.name);
                while !names.insert(name.clone()) {
                    name.push('_');
                }
                name
            };
            let at_use = |attrs: &mut memplan_ir::Attrs, orig: &str| {
                attrs.retain(|(k, _)| k != ATTR_AT_USE && k != ATTR_COPY_OF);
                attrs.push((ATTR_AT_USE.to_owned(), Attr::Int(1)));
                attrs.push((ATTR_COPY_OF.to_owned(), Attr::Str(orig.to_owned())));
            };
            for (&u, &shape) in splat.iter().zip(&shapes) {
                let weight = g.tensor(u);
                let mut tensor = weight.clone();
                tensor.kind = TensorKind::Activation;
                tensor.int_value = None;
                tensor.name = unique_tensor(&out, format!("{}@{}", weight.name, node.name));
                let new = out.add_tensor(tensor);
                map.push((u, new));
                let mut copy = Node::new(
                    copy_name(&weight.name),
                    "ConstantOfShape",
                    vec![Some(shape)],
                    vec![new],
                );
                copy.attrs.push(("value".to_owned(), uniform[u].clone()?));
                at_use(&mut copy.attrs, &weight.name);
                new_nodes.push(copy);
                made += 1;
            }
            for &c in &chain {
                let orig = cx.node(c);
                let mut copy = orig.clone();
                copy.name = copy_name(&orig.name);
                copy.inputs = orig
                    .inputs
                    .iter()
                    .map(|i| i.map(|u| map.iter().find(|m| m.0 == u).map_or(u, |m| m.1)))
                    .collect();
                copy.outputs = Vec::new();
                for &o in &orig.outputs {
                    let mut tensor = g.tensor(o).clone();
                    tensor.name = unique_tensor(&out, format!("{}@{}", tensor.name, node.name));
                    let new = out.add_tensor(tensor);
                    map.push((o, new));
                    copy.outputs.push(new);
                }
                at_use(&mut copy.attrs, &orig.name);
                new_nodes.push(copy);
                made += 1;
            }
            let t_copy = map.iter().find(|m| m.0 == t)?.1;
            for i in node.inputs.iter_mut().flatten() {
                if *i == t {
                    *i = t_copy;
                }
            }
        }
        new_nodes.push(node);
    }
    *out.nodes_mut() = new_nodes.into_iter().collect();
    Some((drop_unread(out, &chain, &splat, g), made))
}

/// `g` without the original chain nodes nothing reads any more (from the last back), and
/// without the tensors they made, nor the weights of `splat` (ids of `g`) left unread.
fn drop_unread(g: Graph, chain: &[NodeId], splat: &[TensorId], original: &Graph) -> Graph {
    let names: Vec<&str> = chain
        .iter()
        .map(|&c| original.node(c).name.as_str())
        .collect();
    let consumers = g.consumers();
    let outputs: Vec<TensorId> = g.outputs();
    let mut dead: IndexVec<NodeId, bool> = IndexVec::from_elem(false, g.nodes().len());
    let mut dead_tensor: IndexVec<TensorId, bool> = IndexVec::from_elem(false, g.tensors().len());
    for (id, node) in g.nodes().iter_enumerated().rev() {
        if !names.contains(&node.name.as_str()) {
            continue;
        }
        let unread = node
            .outputs
            .iter()
            .all(|&o| !outputs.contains(&o) && consumers[o].iter().all(|&c| dead[c]));
        if unread {
            dead[id] = true;
            for &o in &node.outputs {
                dead_tensor[o] = true;
            }
        }
    }
    for &u in splat {
        if !outputs.contains(&u) && consumers[u].iter().all(|&c| dead[c]) {
            dead_tensor[u] = true;
        }
    }
    if !dead.iter().any(|&d| d) && !dead_tensor.iter().any(|&d| d) {
        return g;
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
    for (s, q) in g.symbol_quotients() {
        out.set_symbol_quotient(*s, q.clone());
    }
    let mut map: IndexVec<TensorId, Option<TensorId>> =
        IndexVec::from_elem(None, g.tensors().len());
    for (t, tensor) in g.tensors().iter_enumerated() {
        if !dead_tensor[t] {
            map[t] = Some(out.add_tensor(tensor.clone()));
        }
    }
    for (id, node) in g.nodes().iter_enumerated() {
        if dead[id] {
            continue;
        }
        let mut node = node.clone();
        node.inputs = node.inputs.iter().map(|i| i.and_then(|t| map[t])).collect();
        node.outputs = node.outputs.iter().filter_map(|&o| map[o]).collect();
        node.implicit_inputs = node
            .implicit_inputs
            .iter()
            .filter_map(|&t| map[t])
            .collect();
        out.add_node(node);
    }
    if g.has_output_order() {
        out.set_output_order(g.outputs().iter().filter_map(|&t| map[t]).collect());
    }
    out
}
