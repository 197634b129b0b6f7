//! Fused kernels: the graph rewritten as an engine whose kernels fuse patterns runs it
//! ([`fuse_graph`], asked for by [`crate::PlanOptions::fuse`], `memplan plan --fuse LIST`).
//!
//! Each fusion ([`crate::Fusions`]) is a matcher (one module each) that finds a pattern in
//! the graph as today's exporters write it and names the nodes one fused kernel runs, the
//! tensors it reads and the one it writes:
//!
//! - `attention` ([`attention`]): `MatMul` → scale, soft-cap, mask → `Softmax` → `MatMul`,
//!   with the transposes, reshapes and grouped-query repeats the exporters put around Q, K,
//!   V and the output, becomes one `memplan.Attention` node reading the tensors before those
//!   layout ops (the kernel reads them with strides) and writing the output after them; its
//!   scratch is [`crate::PlanOptions::attention`]'s;
//! - `conv-add` ([`conv_add`]): a `Conv`, `ConvTranspose`, `Gemm` or `MatMul` (with a bias
//!   `Add`) whose only reader is an `Add` of a residual of the output's shape becomes
//!   `memplan.ConvAdd` (`ConvTransposeAdd`, `GemmAdd`, `MatMulAdd`) with the residual as
//!   input 0: the kernel accumulates into it, so the output may take its bytes (oneDNN's sum
//!   post-op, cuDNN's `y = conv + z`);
//! - `gelu`, `silu` ([`pointwise`]): GELU written out (erf or tanh form, the half and the
//!   input multiplied in any order, `x³` as `Pow` or products), `x·σ(1.702x)` and `x·σ(x)`
//!   become `Gelu`, `QuickGelu` and `Swish`; `bias-act`: a bias `Add` before an activation
//!   (or before such a fused one) becomes `memplan.BiasAct`;
//! - `norm` ([`norm`]): layer, RMS and group normalisation written out op by op become
//!   `LayerNormalization`, `RMSNormalization` and `GroupNormalization`;
//! - `constants` ([`constants`]): a tensor built from shapes and constants alone is made
//!   where it is used (each reader a copy of the nodes that build it) instead of kept from
//!   its first reader to its last, where that lowers the peak (in a training step, the
//!   step's need: `crate::step`).
//!
//! Rules every matcher keeps: a tensor the fused kernel swallows is an activation whose
//! byte readers are all in the pattern (it is no graph output); values the kernel takes as
//! parameters (a scale, an epsilon) are tensors of at most one element; everything else it
//! reads is an input of the fused node. A `Shape` (or `Size`) that reads a swallowed tensor
//! goes with the pattern: its output becomes an extra output of the fused node, or goes away
//! with the nodes that only fed the pattern (nodes left without a reader by the fusion, that
//! have no effect, are removed). The fused node takes the place of the node that made its
//! output; a pattern whose extra outputs would be read before that is matched again without
//! swallowing tensors whose shape is read, or not fused.
//!
//! A fused node records what it replaced: `memplan.fusion` (its kind) and
//! `memplan.fused_nodes` (the ids of the original nodes, shape readers included), so that the
//! plan verifier (`verify::fusion`) can check the rewrite against the original graph with a
//! statement of its own. The fused graph is marked (metadata `memplan.fused`, the list), so
//! that planning or verifying it again does not fuse it twice. Matching is one pass per kind
//! over the nodes in order, so the result is deterministic and linear in the graph.

mod attention;
pub(crate) mod constants;
mod conv_add;
mod layout;
mod norm;
mod pointwise;

use memplan_ir::{Attr, Attrs, Graph, IndexVec, Node, NodeId, OpTable, TensorId, TensorKind};

use crate::error::PlanError;
use crate::options::{Fusions, PlanOptions};

/// The attribute naming a fused node's kind (`attention`, `conv-add`, ...).
pub const ATTR_FUSION: &str = "memplan.fusion";
/// The attribute listing the ids of the original nodes a fused node replaces.
pub const ATTR_FUSED_NODES: &str = "memplan.fused_nodes";
/// The graph metadata key a fused graph carries: the fusions it was made with.
pub const FUSED_MARK: &str = "memplan.fused";
/// The attribute a node copied by the `constants` fusion carries: it runs where it is used,
/// on every run, not at load (its value is `1`).
pub const ATTR_AT_USE: &str = "memplan.at_use";

/// A graph rewritten with fused kernels, and what each fused node replaced.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct FusedGraph {
    /// The rewritten graph.
    pub graph: Graph,
    /// One entry per fused node, in node order.
    pub fused: Vec<FusedNode>,
    /// Nodes the `constants` fusion copied to their readers (copies made, in node order).
    pub remade: usize,
}

/// One fused node of a [`FusedGraph`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FusedNode {
    /// The node in the fused graph.
    pub node: NodeId,
    /// Its kind: `attention`, `conv-add`, `gelu`, `silu`, `norm`, `bias-act`.
    pub kind: &'static str,
    /// The original nodes it replaces, in id order.
    pub replaces: Vec<NodeId>,
}

impl FusedGraph {
    /// How many fused nodes of each kind, in [`crate::Fusions::NAMES`] order (kinds with none
    /// left out).
    pub fn counts(&self) -> Vec<(&'static str, usize)> {
        Fusions::NAMES
            .iter()
            .map(|&k| (k, self.fused.iter().filter(|f| f.kind == k).count()))
            .filter(|&(_, n)| n > 0)
            .collect()
    }
}

/// The kinds of fused node, as their `memplan.fusion` attribute spells them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Attention,
    ConvAdd,
    Gelu,
    Silu,
    Norm,
    BiasAct,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Attention => "attention",
            Kind::ConvAdd => "conv-add",
            Kind::Gelu => "gelu",
            Kind::Silu => "silu",
            Kind::Norm => "norm",
            Kind::BiasAct => "bias-act",
        }
    }
}

/// A pattern a matcher found: the nodes one kernel runs and the node that replaces them.
#[derive(Clone, Debug)]
pub(crate) struct Found {
    pub kind: Kind,
    /// The nodes the kernel runs (original ids).
    pub nodes: Vec<NodeId>,
    /// The node that makes the kernel's output: the fused node takes its place.
    pub anchor: NodeId,
    /// The node the matcher started from (set by [`find_all`]): where it is matched again
    /// strictly, or not at all.
    pub start: NodeId,
    pub op: String,
    pub inputs: Vec<Option<TensorId>>,
    /// The kernel's output (an output of `anchor`).
    pub output: TensorId,
    pub attrs: Attrs,
}

/// What the matchers read about the graph, computed once.
pub(crate) struct Cx<'g> {
    pub g: &'g Graph,
    producers: IndexVec<TensorId, Option<NodeId>>,
    consumers: IndexVec<TensorId, Vec<NodeId>>,
    is_output: IndexVec<TensorId, bool>,
    /// Whether a pattern may swallow a tensor whose shape a `Shape` reads.
    pub strict: bool,
    /// Whether the graph runs inference only: a kernel may then fold an inference
    /// normalisation into its weights, and ONNX Runtime's one-node skip normalisation becomes
    /// memplan's (in a training step each keeps its own backward: the step derives the skip
    /// normalisation's from the ONNX Runtime op, which saves the sum).
    pub inference: bool,
}

impl<'g> Cx<'g> {
    fn new(g: &'g Graph) -> Cx<'g> {
        let mut is_output = IndexVec::from_elem(false, g.tensors().len());
        for t in g.outputs() {
            is_output[t] = true;
        }
        Cx {
            g,
            producers: g.producers(),
            consumers: g.consumers(),
            is_output,
            strict: false,
            inference: true,
        }
    }

    pub fn node(&self, n: NodeId) -> &'g Node {
        self.g.node(n)
    }

    pub fn producer(&self, t: TensorId) -> Option<NodeId> {
        self.producers.get(t).copied().flatten()
    }

    /// The nodes that read `t`'s bytes (not `Shape` or `Size`).
    pub fn readers(&self, t: TensorId) -> impl Iterator<Item = NodeId> + '_ {
        self.consumers
            .get(t)
            .into_iter()
            .flatten()
            .copied()
            .filter(|&n| !is_shape_reader(self.g.node(n)))
    }

    /// The one node reading `t`'s bytes, if exactly one does.
    pub fn only_reader(&self, t: TensorId) -> Option<NodeId> {
        let mut r = self.readers(t);
        let first = r.next()?;
        r.next().is_none().then_some(first)
    }

    /// Whether a fused kernel may swallow `t`: an activation, no graph output, whose byte
    /// readers are all in `inside` (and, strictly, whose shape nothing reads).
    pub fn swallowable(&self, t: TensorId, inside: &[NodeId]) -> bool {
        let tensor = self.g.tensor(t);
        tensor.kind == TensorKind::Activation
            && !self.is_output[t]
            && self.producer(t).is_some()
            && self.readers(t).all(|n| inside.contains(&n))
            && (!self.strict
                || self
                    .consumers
                    .get(t)
                    .is_none_or(|c| c.iter().all(|n| inside.contains(n))))
    }

    /// [`Cx::swallowable`] with `reader` its one byte reader.
    pub fn internal(&self, t: TensorId, reader: NodeId) -> bool {
        self.swallowable(t, &[reader])
    }

    /// Whether `t` has at most one element whatever the symbols: a value a kernel takes as
    /// a parameter (a scale, an epsilon, a fill value).
    pub fn scalar(&self, t: TensorId) -> bool {
        self.g.tensor(t).static_elements().is_ok_and(|n| n <= 1)
    }

    /// Whether `a` and `b` have the same element count whatever the symbols.
    pub fn same_elements(&self, a: TensorId, b: TensorId) -> bool {
        match (
            self.g.tensor(a).elements_expr(),
            self.g.tensor(b).elements_expr(),
        ) {
            (Ok(x), Ok(y)) => x == y,
            _ => false,
        }
    }

    /// Input `i` of node `n`.
    pub fn input(&self, n: NodeId, i: usize) -> Option<TensorId> {
        self.g.node(n).inputs.get(i).copied().flatten()
    }

    /// The only output of node `n`.
    pub fn output(&self, n: NodeId) -> Option<TensorId> {
        match self.g.node(n).outputs.as_slice() {
            [y] => Some(*y),
            _ => None,
        }
    }

    /// The operand of binary node `n` other than `t` (when `t` is one of its two).
    pub fn other(&self, n: NodeId, t: TensorId) -> Option<TensorId> {
        match (self.input(n, 0), self.input(n, 1)) {
            (Some(a), b) if a == t => b,
            (a, Some(b)) if b == t => a,
            _ => None,
        }
    }
}

/// Whether `node` reads only the shape of its input.
fn is_shape_reader(node: &Node) -> bool {
    matches!(node.op.as_str(), "Shape" | "Size")
}

/// Ops a node may run without an effect beyond its outputs: a node left with no reader by
/// a fusion may go when its op is none of these.
fn has_effect(node: &Node, table: &OpTable) -> bool {
    !node.bodies.is_empty()
        || !table.mutated_inputs(node).is_empty()
        || node.op.contains("Random")
        || node.op.contains("training")
        || node.op.starts_with("memplan.")
}

/// `graph` with the kernels `options.fuse` names fused (each fused node's contract:
/// [`crate::fused_kernels`]; `constants`
/// measures what it changes at `options`' bindings, and changes nothing where a symbol has
/// no value). A graph already fused (its metadata says with what) gets only what it has
/// not had.
pub fn fuse_graph(graph: &Graph, options: &PlanOptions) -> Result<FusedGraph, PlanError> {
    fuse_graph_for(graph, options, false)
}

/// [`fuse_graph`] for inference, or for a training step's forward (`training`: kernels fold
/// no normalisation into their weights).
pub(crate) fn fuse_graph_for(
    graph: &Graph,
    options: &PlanOptions,
    training: bool,
) -> Result<FusedGraph, PlanError> {
    graph.validate().map_err(PlanError::Invalid)?;
    let mut out = fuse_changes(graph, options, training)?.unwrap_or_else(|| FusedGraph {
        graph: graph.clone(),
        fused: Vec::new(),
        remade: 0,
    });
    let mark = mark_of(graph, options);
    if !mark.is_none() {
        out.graph.set_metadata(FUSED_MARK, mark.describe());
    }
    Ok(out)
}

/// The fusions a graph fused from `graph` under `options` has had: what it had already
/// (its metadata) and what `options` ask for.
fn mark_of(graph: &Graph, options: &PlanOptions) -> Fusions {
    let done = done_on(graph);
    let wanted = options.fuse;
    Fusions {
        constants: wanted.constants || done.constants,
        ..Fusions {
            constants: false,
            ..wanted
        }
    }
}

/// The fusions `graph`'s metadata says it has had (none for a graph never fused).
fn done_on(graph: &Graph) -> Fusions {
    graph
        .metadata_value(FUSED_MARK)
        .and_then(|m| Fusions::parse(m).ok())
        .unwrap_or(Fusions::NONE)
}

/// `graph` (valid) with the fusions `options.fuse` names fused, without the fused mark;
/// `None` where nothing matches and nothing is remade: the graph runs as it is, and is
/// neither copied nor rebuilt (the fixed cost of asking for fusions a graph does not have).
pub(crate) fn fuse_changes(
    graph: &Graph,
    options: &PlanOptions,
    training: bool,
) -> Result<Option<FusedGraph>, PlanError> {
    let wanted = options.fuse;
    // What the graph has had already (a graph fused before, say by `fit` once for all its
    // values, comes back with only what is left done).
    let done = done_on(graph);
    let kernels = Fusions {
        constants: false,
        ..wanted
    };
    let kernels_done = Fusions {
        constants: false,
        ..done
    };
    let mut out = if kernels.is_none() || kernels_done == kernels {
        None
    } else {
        fuse_kernels(graph, &kernels, &options.op_table, training)
    };
    if wanted.constants && !done.constants {
        let base = out.as_ref().map_or(graph, |f| &f.graph);
        // `remake_from` only measures with this: a graph (the base or a variant) whose need
        // has an error is left as it is, and planning it reports the error against the
        // graph planned, so no error of the need leaves `remake_from`.
        // Every weight of an inference graph is a constant of the model; a training step's
        // forward decides its constants on the step (`step::constants_at_use`).
        let need = |g: &Graph| crate::planner::given_order_need(g, options);
        if let Some((remade, copies)) =
            constants::remake_from(base, options, &need, &|_: &Graph, _| !training)?
        {
            let fused = out.map_or_else(Vec::new, |f| f.fused);
            out = Some(FusedGraph {
                graph: remade,
                fused,
                remade: copies,
            });
        }
    }
    Ok(out)
}

/// Matches every pattern `fusions` names, anchors in node order, kinds in a fixed order
/// (attention first: it swallows the transposes and scales the others would see).
fn find_all(cx: &mut Cx<'_>, fusions: &Fusions, strict_at: &[NodeId]) -> Vec<Found> {
    let n = cx.g.nodes().len();
    let mut taken: IndexVec<NodeId, bool> = IndexVec::from_elem(false, n);
    let mut found: Vec<Found> = Vec::new();
    let keep = |f: Option<Found>, found: &mut Vec<Found>, taken: &mut IndexVec<NodeId, bool>| {
        if let Some(f) = f
            && f.nodes.iter().all(|&m| !taken[m])
        {
            for &m in &f.nodes {
                taken[m] = true;
            }
            found.push(f);
        }
    };
    let ids: Vec<NodeId> = cx.g.nodes().ids().collect();
    let run = |cx: &mut Cx<'_>,
               found: &mut Vec<Found>,
               taken: &mut IndexVec<NodeId, bool>,
               find: &dyn Fn(&Cx<'_>, NodeId) -> Option<Found>| {
        for &id in &ids {
            if taken[id] {
                continue;
            }
            cx.strict = strict_at.contains(&id);
            let f = find(cx, id).map(|f| Found { start: id, ..f });
            keep(f, found, taken);
        }
        cx.strict = false;
    };
    if fusions.attention {
        run(cx, &mut found, &mut taken, &attention::find);
    }
    if fusions.conv_add {
        run(cx, &mut found, &mut taken, &conv_add::find);
    }
    if fusions.norm {
        run(cx, &mut found, &mut taken, &norm::find);
    }
    if fusions.gelu {
        run(cx, &mut found, &mut taken, &pointwise::gelu);
    }
    if fusions.silu {
        run(cx, &mut found, &mut taken, &pointwise::silu);
    }
    if fusions.bias_act {
        // A bias before an activation fused above joins that fusion.
        let mut merged = Vec::new();
        for f in &found {
            if matches!(f.kind, Kind::Gelu | Kind::Silu)
                && let Some(b) = pointwise::bias_before(cx, f, &taken)
            {
                merged.push(b);
            }
        }
        for b in merged {
            if let Some(k) = found.iter().position(|f| f.anchor == b.anchor) {
                for &m in &b.nodes {
                    taken[m] = true;
                }
                found[k] = b;
            }
        }
        run(cx, &mut found, &mut taken, &pointwise::bias_act);
    }
    found
}

/// One pattern with what fusing it removes beyond its own nodes.
struct Group {
    found: Found,
    /// `Shape`/`Size` nodes reading a swallowed tensor whose output a surviving node reads:
    /// the fused node makes their outputs.
    shape_outputs: Vec<(NodeId, TensorId)>,
    /// Every original node the fused node replaces (its pattern and the shape readers that
    /// go with it), sorted.
    replaces: Vec<NodeId>,
    /// Where the fused node goes: before this node (`None`: at the end), and before the
    /// fused nodes that go at that node's own place.
    place: (Option<NodeId>, u8),
}

/// The kernels of `fusions` (not `constants`) fused into `graph`, `None` where none matches.
fn fuse_kernels(
    graph: &Graph,
    fusions: &Fusions,
    table: &OpTable,
    training: bool,
) -> Option<FusedGraph> {
    let mut cx = Cx::new(graph);
    cx.inference = !training;
    let mut strict_at: Vec<NodeId> = Vec::new();
    let mut dropped: Vec<NodeId> = Vec::new();
    // Match; check every pattern's swallowed tensors and the place of its extra outputs;
    // match again strictly (or drop) those that fail, until every pattern holds. Each round
    // makes at least one more start strict or dropped, so this ends (in a few rounds: every
    // failing pattern of a round is dealt with in it).
    let (groups, dead) = loop {
        let mut found = find_all(&mut cx, fusions, &strict_at);
        found.retain(|f| !dropped.contains(&f.start));
        if found.is_empty() {
            return None;
        }
        let (groups, dead, bad) = settle(&cx, table, found);
        if bad.is_empty() {
            break (groups, dead);
        }
        for start in bad {
            if strict_at.contains(&start) {
                dropped.push(start);
            } else {
                strict_at.push(start);
            }
        }
    };
    Some(rebuild(graph, &groups, &dead))
}

/// The groups of `found` with their shape readers, the nodes left dead, and the starts of
/// the patterns that do not hold (a swallowed tensor read by a node outside it, or an extra
/// output read before the fused node's place).
fn settle(
    cx: &Cx<'_>,
    table: &OpTable,
    found: Vec<Found>,
) -> (Vec<Group>, IndexVec<NodeId, bool>, Vec<NodeId>) {
    let g = cx.g;
    let n = g.nodes().len();
    // Which group each node's kernel is in.
    let mut group_of: IndexVec<NodeId, Option<usize>> = IndexVec::from_elem(None, n);
    for (k, f) in found.iter().enumerate() {
        for &m in &f.nodes {
            group_of[m] = Some(k);
        }
    }
    let mut groups: Vec<Group> = found
        .into_iter()
        .map(|f| Group {
            replaces: Vec::new(),
            shape_outputs: Vec::new(),
            place: (Some(f.anchor), 1),
            found: f,
        })
        .collect();
    // Swallowed tensors: outputs of a pattern's nodes other than the kernel's output.
    let mut shape_group: IndexVec<NodeId, Option<usize>> = IndexVec::from_elem(None, n);
    let mut bad = Vec::new();
    'groups: for (k, grp) in groups.iter().enumerate() {
        for &m in &grp.found.nodes {
            for &t in &g.node(m).outputs {
                if t == grp.found.output {
                    continue;
                }
                for &c in &cx.consumers[t] {
                    if group_of[c] == Some(k) {
                        continue;
                    }
                    if group_of[c].is_none()
                        && is_shape_reader(g.node(c))
                        && shape_group[c].is_none_or(|s| s == k)
                    {
                        shape_group[c] = Some(k);
                    } else {
                        bad.push(grp.found.start);
                        continue 'groups;
                    }
                }
            }
        }
    }
    if !bad.is_empty() {
        return (groups, IndexVec::new(), bad);
    }
    // Nodes left without a reader, from the last node back: every output read only by
    // removed nodes (and read at all: a node the graph already left unread stays), none a
    // graph output, no effect.
    let mut removed: IndexVec<NodeId, bool> = IndexVec::from_elem(false, n);
    for (m, k) in group_of.iter_enumerated() {
        removed[m] = k.is_some();
    }
    // What the fused nodes read stays, whoever made it.
    let mut read_by_kernel: IndexVec<TensorId, bool> =
        IndexVec::from_elem(false, g.tensors().len());
    for grp in &groups {
        for t in grp.found.inputs.iter().flatten() {
            read_by_kernel[*t] = true;
        }
    }
    let mut dead: IndexVec<NodeId, bool> = IndexVec::from_elem(false, n);
    for (m, node) in g.nodes().iter_enumerated().rev() {
        if removed[m] || has_effect(node, table) || node.outputs.is_empty() {
            continue;
        }
        let unread = node.outputs.iter().all(|&t| {
            !cx.is_output[t]
                && !read_by_kernel[t]
                && !cx.consumers[t].is_empty()
                && cx.consumers[t].iter().all(|&c| removed[c])
        });
        if unread {
            removed[m] = true;
            dead[m] = shape_group[m].is_none();
            if let Some(k) = shape_group[m] {
                groups[k].replaces.push(m);
            }
        } else if let Some(k) = shape_group[m] {
            // A live shape reader: the fused node makes its output.
            groups[k]
                .shape_outputs
                .extend(node.outputs.iter().map(|&t| (m, t)));
            removed[m] = true;
            groups[k].replaces.push(m);
        }
    }
    // Each fused node at its anchor's place, or, where a shape output is read before it,
    // right after the last node making one of its inputs (the kernel can run as soon as they
    // are made); a pattern whose shape output is read before even that does not hold.
    let mut bad = Vec::new();
    for grp in &mut groups {
        let first_reader = grp
            .shape_outputs
            .iter()
            .flat_map(|&(_, t)| cx.consumers[t].iter().copied())
            .filter(|&c| !removed[c])
            .min();
        let Some(first_reader) = first_reader.filter(|&c| c < grp.found.anchor) else {
            continue;
        };
        let last_input = grp
            .found
            .inputs
            .iter()
            .flatten()
            .filter_map(|&t| cx.producer(t))
            .max();
        if last_input.is_some_and(|p| p >= first_reader) {
            bad.push(grp.found.start);
            continue;
        }
        let next = last_input.map_or(0, |p| p.0 + 1);
        grp.place = ((next < n as u32).then_some(NodeId(next)), 0);
    }
    if !bad.is_empty() {
        return (groups, dead, bad);
    }
    for grp in &mut groups {
        grp.shape_outputs.sort_unstable();
        grp.replaces.extend(grp.found.nodes.iter().copied());
        grp.replaces.sort_unstable();
        grp.replaces.dedup();
    }
    (groups, dead, Vec::new())
}

/// The fused graph: every tensor but those the removed nodes made (the kernels' outputs and
/// their shape outputs kept), every node but the removed ones, each fused node at its
/// place.
fn rebuild(g: &Graph, groups: &[Group], dead: &IndexVec<NodeId, bool>) -> FusedGraph {
    let n = g.nodes().len();
    let mut removed: IndexVec<NodeId, bool> = dead.clone();
    if removed.len() != n {
        removed = IndexVec::from_elem(false, n);
    }
    // The fused nodes to emit before each node (and at the end), in place order.
    let mut before: IndexVec<NodeId, Vec<usize>> = IndexVec::from_elem(Vec::new(), n);
    let mut at_end: Vec<usize> = Vec::new();
    let mut keep_tensor: IndexVec<TensorId, bool> = IndexVec::from_elem(true, g.tensors().len());
    let mut order: Vec<usize> = (0..groups.len()).collect();
    order.sort_by_key(|&k| {
        (
            groups[k].place.0.map_or(u32::MAX, |p| p.0),
            groups[k].place.1,
            k,
        )
    });
    for &k in &order {
        for &m in &groups[k].replaces {
            removed[m] = true;
        }
        match groups[k].place.0 {
            Some(p) => before[p].push(k),
            None => at_end.push(k),
        }
    }
    for (m, node) in g.nodes().iter_enumerated() {
        if removed[m] {
            for &t in &node.outputs {
                keep_tensor[t] = false;
            }
        }
    }
    for grp in groups {
        keep_tensor[grp.found.output] = true;
        for &(_, t) in &grp.shape_outputs {
            keep_tensor[t] = true;
        }
    }
    let mut out = Graph::with_symbols_of(g.name.clone(), g);
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
        if keep_tensor[t] {
            map[t] = Some(out.add_tensor(tensor.clone()));
        }
    }
    let m = |t: TensorId| map[t];
    // Names taken: the original nodes' (borrowed, not copied) and the fused nodes' so far.
    let names: std::collections::HashSet<&str> =
        g.nodes().iter().map(|n| n.name.as_str()).collect();
    let mut new_names: Vec<String> = Vec::new();
    let mut fused = Vec::new();
    let mut emit = |k: usize, out: &mut Graph, fused: &mut Vec<FusedNode>| {
        let grp = &groups[k];
        let f = &grp.found;
        let mut name = format!("{}_{}", f.kind.name(), g.node(f.anchor).name);
        while names.contains(name.as_str()) || new_names.contains(&name) {
            name.push('_');
        }
        new_names.push(name.clone());
        let mut fused_node = Node::new(
            name,
            f.op.clone(),
            f.inputs.iter().map(|i| i.and_then(m)).collect(),
            std::iter::once(f.output)
                .chain(grp.shape_outputs.iter().map(|&(_, t)| t))
                .filter_map(m)
                .collect(),
        );
        fused_node.attrs = f.attrs.clone();
        fused_node
            .attrs
            .push((ATTR_FUSION.to_owned(), Attr::Str(f.kind.name().to_owned())));
        fused_node.attrs.push((
            ATTR_FUSED_NODES.to_owned(),
            Attr::Ints(grp.replaces.iter().map(|r| i64::from(r.0)).collect()),
        ));
        let new_id = out.add_node(fused_node);
        fused.push(FusedNode {
            node: new_id,
            kind: f.kind.name(),
            replaces: grp.replaces.clone(),
        });
    };
    for (id, node) in g.nodes().iter_enumerated() {
        for &k in &before[id] {
            emit(k, &mut out, &mut fused);
        }
        if removed[id] {
            continue;
        }
        let mut node = node.clone();
        node.inputs = node.inputs.iter().map(|i| i.and_then(m)).collect();
        node.outputs = node.outputs.iter().filter_map(|&o| m(o)).collect();
        node.implicit_inputs = node.implicit_inputs.iter().filter_map(|&t| m(t)).collect();
        out.add_node(node);
    }
    for &k in &at_end {
        emit(k, &mut out, &mut fused);
    }
    if g.has_output_order() {
        out.set_output_order(g.outputs().iter().filter_map(|&t| m(t)).collect());
    }
    FusedGraph {
        graph: out,
        fused,
        remade: 0,
    }
}
