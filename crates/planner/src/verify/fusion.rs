//! The verifier's own check of a fused graph against the graph it was fused from
//! ([`verify_fusion`]), sharing nothing with the planner's matchers (`fuse`).
//!
//! A fused graph is the original with some nodes replaced by fused kernels, some nodes
//! copied to run where their output is used, and nodes left without a reader removed. The
//! check states what each kind of kernel reads and writes, from the kernel's definition
//! (docs/PLANNING.md, "Fused kernels"), and holds the rewrite to it:
//!
//! - every node of the fused graph is an original node unchanged (same op, attributes,
//!   outputs; each input the original's, or a copy of it), a copy of an original node
//!   (`memplan.copy_of`, the same op and attributes, reading the same tensors or copies of
//!   them, `memplan.at_use` set), or a fused kernel (`memplan.fusion`, `memplan.fused_nodes`);
//!   graph outputs are the original's, in order, and the fused graph is valid;
//! - an original node gone from the fused graph is in exactly one kernel's list, or is
//!   removed without effect: nothing in the fused graph reads what it made, and it has no
//!   effect (no body, no in-place update);
//! - a kernel's list `S` is closed: the kernel's outputs are exactly the tensors `S` makes
//!   that something outside `S` reads (or the caller: graph outputs), output 0 first and any
//!   other outputs made by a `Shape` or `Size` in `S`; its inputs are tensors `S` reads from
//!   outside, and every such tensor `S` reads as data is one of them (a shape operand of a
//!   `Reshape`, `Expand`, `Unsqueeze`, `Squeeze`, the axes of a `ReduceMean`, a `Slice`'s
//!   bounds, and a value of at most one element are parameters, which the kernel may take
//!   as attributes; a `Shape` reads no data);
//! - each kind holds its own definition: an attention kernel is exactly two `MatMul`s and
//!   one `Softmax` with layout, scale, mask and cast ops around them, its Q, K and V reach
//!   the first product's operands and the second's right operand, and its `kv_axis` and
//!   `dv_axis` size the scores its list computes (`K[kv_axis]` is the scores' last dim; the
//!   output over its value size has the scores' rows), and a mask input it reads in place of
//!   the mask its list reads makes that mask by broadcasts and per-element ops with
//!   parameters (or, with its boolean mask, a `Where` of the two so made, `mask_keep` its
//!   sense); an attention kernel replacing one ONNX `Attention` node reads its Q, K, V and
//!   masks that make its mask; a `conv-add` is one product and its `Add`s (or a two-input `Sum`) and at
//!   most one inference `BatchNormalization` of a convolution, input 0 the residual, as
//!   large as the output; a GELU or SiLU, a normalisation
//!   and a bias-activation read one data tensor (and their scale and bias), element for
//!   element as large as their output; one ONNX Runtime node (`BiasGelu`, `FastGelu` with a
//!   bias, a one-output `SkipLayerNormalization`) replaced by memplan's kernel reads what
//!   that node reads.

use std::collections::{HashMap, HashSet};

use memplan_ir::{Attr, Graph, Node, NodeId, TensorId, TensorKind};

/// One way a fused graph is not a sound fusion of its original.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FusionFault {
    /// The fused graph is not a valid graph.
    #[error("the fused graph is not valid: {0}")]
    Invalid(String),
    /// A node of the fused graph that is no original node, copy or fused kernel.
    #[error("node `{node}` is no node of the original graph, no copy of one and no fused kernel")]
    Unknown {
        /// The node's name.
        node: String,
    },
    /// A node kept, or copied, that differs from its original.
    #[error("node `{node}` differs from the original `{original}`: {what}")]
    Changed {
        /// The node in the fused graph.
        node: String,
        /// The original node it claims to be (or copy).
        original: String,
        /// What differs.
        what: String,
    },
    /// An original node gone without a kernel replacing it, that could not go.
    #[error("original node `{node}` is gone, but {reason}")]
    Dropped {
        /// The original node.
        node: String,
        /// Why it could not go.
        reason: String,
    },
    /// A fused kernel that does not hold its definition.
    #[error("fused node `{node}` ({kind}): {reason}")]
    Kernel {
        /// The fused node.
        node: String,
        /// Its kind.
        kind: String,
        /// What is wrong.
        reason: String,
    },
    /// Graph outputs that differ from the original's.
    #[error("the graph outputs differ from the original's")]
    Outputs,
}

/// Every fault [`verify_fusion`] found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct FusionViolations(pub Vec<FusionFault>);

/// Input positions that are parameters of the op (a shape, axes, bounds), not data its
/// kernel reads element by element.
fn parameter(op: &str, pos: usize) -> bool {
    match op {
        "Shape" | "Size" => true,
        "Reshape" | "Expand" | "Unsqueeze" | "Squeeze" | "ReduceMean" | "Tile" => pos == 1,
        "Slice" => (1..=4).contains(&pos),
        _ => false,
    }
}

/// Ops an attention kernel's list may hold besides its two products and its softmax.
const ATTENTION_OPS: &[&str] = &[
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
    "Add",
    "Where",
    "Tanh",
    "IsNaN",
    "Dropout",
    "Shape",
    "Size",
];

/// Ops by which the mask an attention kernel's nodes read may be made from the tensor the
/// kernel reads instead: a broadcast, and ops a kernel applies element by element.
const MASK_OPS: &[&str] = &[
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

/// Ops an element-wise activation's list may hold.
const POINTWISE_OPS: &[&str] = &[
    "Mul", "Div", "Add", "Sub", "Erf", "Tanh", "Pow", "Sigmoid", "Shape", "Size",
];

/// Ops a normalisation's list may hold.
const NORM_OPS: &[&str] = &[
    "ReduceMean",
    "Sub",
    "Pow",
    "Mul",
    "Add",
    "Sqrt",
    "Div",
    "Reciprocal",
    "Cast",
    "Reshape",
    "Shape",
    "Size",
];

/// Activations a bias may precede.
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

/// Attributes the rewrite adds, ignored when comparing a node with its original.
fn own_attr(name: &str) -> bool {
    matches!(
        name,
        "memplan.fusion" | "memplan.fused_nodes" | "memplan.at_use" | "memplan.copy_of"
    )
}

fn attrs_of(node: &Node) -> Vec<&(String, Attr)> {
    node.attrs.iter().filter(|(k, _)| !own_attr(k)).collect()
}

struct Check<'a> {
    original: &'a Graph,
    fused: &'a Graph,
    /// Original nodes by name.
    by_name: HashMap<&'a str, NodeId>,
    /// Original tensors by name.
    orig_tensor: HashMap<&'a str, TensorId>,
    orig_producers: memplan_ir::IndexVec<TensorId, Option<NodeId>>,
    orig_consumers: memplan_ir::IndexVec<TensorId, Vec<NodeId>>,
    fused_producers: memplan_ir::IndexVec<TensorId, Option<NodeId>>,
    out: Vec<FusionFault>,
}

/// Checks that `fused` is a sound fusion of `original` (see the module docs); returns every
/// fault found.
pub fn verify_fusion(original: &Graph, fused: &Graph) -> Result<(), FusionViolations> {
    if let Err(e) = fused.validate() {
        return Err(FusionViolations(vec![FusionFault::Invalid(e.to_string())]));
    }
    let mut c = Check {
        original,
        fused,
        by_name: original
            .nodes()
            .iter_enumerated()
            .map(|(id, n)| (n.name.as_str(), id))
            .collect(),
        orig_tensor: original
            .tensors()
            .iter_enumerated()
            .map(|(id, t)| (t.name.as_str(), id))
            .collect(),
        orig_producers: original.producers(),
        orig_consumers: original.consumers(),
        fused_producers: fused.producers(),
        out: Vec::new(),
    };
    let names = |g: &Graph, ts: Vec<TensorId>| -> Vec<String> {
        ts.into_iter().map(|t| g.tensor(t).name.clone()).collect()
    };
    if names(original, original.outputs()) != names(fused, fused.outputs()) {
        c.out.push(FusionFault::Outputs);
    }
    // Which original nodes each kernel replaces, and which survive by name.
    let mut replaced_by: HashMap<NodeId, NodeId> = HashMap::new();
    let mut survives: HashSet<NodeId> = HashSet::new();
    for (id, node) in fused.nodes().iter_enumerated() {
        if node.attr("memplan.fusion").is_some() {
            let list = node
                .attr("memplan.fused_nodes")
                .and_then(Attr::as_ints)
                .unwrap_or(&[]);
            for &raw in list {
                let m = u32::try_from(raw)
                    .ok()
                    .map(NodeId)
                    .filter(|&m| original.nodes().get(m).is_some());
                let Some(m) = m else {
                    c.kernel(
                        node,
                        format!("lists node {raw}, which the original does not have"),
                    );
                    continue;
                };
                if replaced_by.insert(m, id).is_some() {
                    c.kernel(
                        node,
                        format!(
                            "lists `{}`, which another fused node lists too",
                            original.node(m).name
                        ),
                    );
                }
            }
        } else if node.attr("memplan.copy_of").is_none()
            && let Some(&m) = c.by_name.get(node.name.as_str())
        {
            survives.insert(m);
        }
    }
    for (id, node) in fused.nodes().iter_enumerated() {
        if node.attr("memplan.fusion").is_some() {
            c.check_kernel(id, node, &replaced_by, &survives);
        } else if let Some(Attr::Str(of)) = node.attr("memplan.copy_of") {
            c.check_copy(node, of);
        } else if let Some(&m) = c.by_name.get(node.name.as_str()) {
            if replaced_by.contains_key(&m) {
                c.out.push(FusionFault::Changed {
                    node: node.name.clone(),
                    original: node.name.clone(),
                    what: "it is kept and also replaced by a fused node".to_owned(),
                });
            }
            c.check_kept(node, m);
        } else {
            c.out.push(FusionFault::Unknown {
                node: node.name.clone(),
            });
        }
    }
    c.check_dropped(&replaced_by, &survives);
    if c.out.is_empty() {
        Ok(())
    } else {
        Err(FusionViolations(c.out))
    }
}

impl Check<'_> {
    fn kernel(&mut self, node: &Node, reason: String) {
        self.out.push(FusionFault::Kernel {
            node: node.name.clone(),
            kind: match node.attr("memplan.fusion") {
                Some(Attr::Str(k)) => k.clone(),
                _ => "?".to_owned(),
            },
            reason,
        });
    }

    fn changed(&mut self, node: &Node, original: &str, what: String) {
        self.out.push(FusionFault::Changed {
            node: node.name.clone(),
            original: original.to_owned(),
            what,
        });
    }

    /// The original tensor that fused tensor `t` stands for: the same name, or, for a copy
    /// (made by a copy node), the original output at the same place of the copied node.
    fn stands_for(&self, t: TensorId) -> Option<TensorId> {
        if let Some(p) = self.fused_producers[t]
            && let Some(Attr::Str(of)) = self.fused.node(p).attr("memplan.copy_of")
        {
            let pos = self.fused.node(p).outputs.iter().position(|&o| o == t)?;
            let m = *self.by_name.get(of.as_str())?;
            return self.original.node(m).outputs.get(pos).copied();
        }
        self.orig_tensor
            .get(self.fused.tensor(t).name.as_str())
            .copied()
    }

    /// Node `node` (kept, or a copy) against original node `m`: op, attributes, inputs
    /// (each the original's or a copy of it), outputs (the same tensors, or copies of them
    /// with their dtype and shape).
    fn same_as(&mut self, node: &Node, m: NodeId, copy: bool) {
        let orig = self.original.node(m);
        if node.op != orig.op {
            self.changed(
                node,
                &orig.name,
                format!("op `{}` for `{}`", node.op, orig.op),
            );
            return;
        }
        if attrs_of(node) != attrs_of(orig) {
            self.changed(node, &orig.name, "other attributes".to_owned());
        }
        if node.inputs.len() != orig.inputs.len() {
            self.changed(node, &orig.name, "another number of inputs".to_owned());
            return;
        }
        for (pos, (a, b)) in node.inputs.iter().zip(&orig.inputs).enumerate() {
            let same = match (a, b) {
                (None, None) => true,
                (Some(a), Some(b)) => self.stands_for(*a) == Some(*b),
                _ => false,
            };
            if !same {
                self.changed(node, &orig.name, format!("input {pos} is another tensor"));
            }
        }
        if node.outputs.len() != orig.outputs.len() {
            self.changed(node, &orig.name, "another number of outputs".to_owned());
            return;
        }
        for (pos, (&a, &b)) in node.outputs.iter().zip(&orig.outputs).enumerate() {
            let (ta, tb) = (self.fused.tensor(a), self.original.tensor(b));
            let ok = if copy {
                ta.dtype == tb.dtype && ta.shape == tb.shape && ta.kind == TensorKind::Activation
            } else {
                ta.name == tb.name && ta.dtype == tb.dtype && ta.shape == tb.shape
            };
            if !ok {
                self.changed(node, &orig.name, format!("output {pos} is another tensor"));
            }
        }
    }

    fn check_kept(&mut self, node: &Node, m: NodeId) {
        self.same_as(node, m, false);
    }

    fn check_copy(&mut self, node: &Node, of: &str) {
        let Some(&m) = self.by_name.get(of) else {
            self.out.push(FusionFault::Unknown {
                node: node.name.clone(),
            });
            return;
        };
        if node.attr("memplan.at_use") != Some(&Attr::Int(1)) {
            self.changed(node, of, "a copy not marked to run where used".to_owned());
        }
        self.same_as(node, m, true);
    }

    /// Original nodes gone with no kernel listing them: nothing in the fused graph may read
    /// what they made, none of it may be a graph output, and they may have no effect.
    fn check_dropped(&mut self, replaced_by: &HashMap<NodeId, NodeId>, survives: &HashSet<NodeId>) {
        let read_by_name: HashSet<&str> = self
            .fused
            .nodes()
            .iter()
            .flat_map(Node::present_inputs)
            .map(|t| self.fused.tensor(t).name.as_str())
            .collect();
        let outputs: HashSet<TensorId> = self.original.outputs().into_iter().collect();
        let table = memplan_ir::OpTable::default();
        for (m, node) in self.original.nodes().iter_enumerated() {
            if replaced_by.contains_key(&m) || survives.contains(&m) {
                continue;
            }
            let reason = if !node.bodies.is_empty() || !table.mutated_inputs(node).is_empty() {
                Some("it has an effect beyond its outputs".to_owned())
            } else {
                node.outputs.iter().find_map(|&o| {
                    let name = self.original.tensor(o).name.as_str();
                    if outputs.contains(&o) {
                        Some(format!("its output `{name}` is a graph output"))
                    } else if read_by_name.contains(name) {
                        Some(format!("the fused graph reads its output `{name}`"))
                    } else {
                        None
                    }
                })
            };
            if let Some(reason) = reason {
                self.out.push(FusionFault::Dropped {
                    node: node.name.clone(),
                    reason,
                });
            }
        }
    }

    /// A fused kernel against the nodes it lists.
    fn check_kernel(
        &mut self,
        id: NodeId,
        node: &Node,
        replaced_by: &HashMap<NodeId, NodeId>,
        survives: &HashSet<NodeId>,
    ) {
        let list: Vec<NodeId> = replaced_by
            .iter()
            .filter(|&(_, &k)| k == id)
            .map(|(&m, _)| m)
            .collect();
        let mut list = list;
        list.sort_unstable();
        if list.is_empty() {
            self.kernel(node, "replaces no node".to_owned());
            return;
        }
        if let Some(&m) = list.iter().find(|m| survives.contains(m)) {
            self.kernel(
                node,
                format!(
                    "lists `{}`, which the fused graph keeps",
                    self.original.node(m).name
                ),
            );
            return;
        }
        let in_s = |m: NodeId| list.binary_search(&m).is_ok();
        let g = self.original;
        let made: HashSet<TensorId> = list
            .iter()
            .flat_map(|&m| g.node(m).outputs.iter().copied())
            .collect();
        // Reads from outside: all of them, and those read as data.
        let mut reads: HashSet<TensorId> = HashSet::new();
        let mut data: HashSet<TensorId> = HashSet::new();
        for &m in &list {
            let n = g.node(m);
            for (pos, t) in n.inputs.iter().enumerate() {
                let Some(t) = *t else { continue };
                if made.contains(&t) {
                    continue;
                }
                reads.insert(t);
                let scalar = g.tensor(t).static_elements().is_ok_and(|e| e <= 1);
                if !parameter(&n.op, pos) && !scalar {
                    data.insert(t);
                }
            }
        }
        // What outside reads of what S made: a surviving node, another kernel, the caller.
        let graph_outputs: HashSet<TensorId> = g.outputs().into_iter().collect();
        let mut needed: HashSet<TensorId> = HashSet::new();
        for &t in &made {
            let outside = graph_outputs.contains(&t)
                || self.orig_consumers[t]
                    .iter()
                    .any(|&r| !in_s(r) && (survives.contains(&r) || replaced_by.contains_key(&r)));
            if outside {
                needed.insert(t);
            }
        }
        let outs: Vec<Option<TensorId>> = node
            .outputs
            .iter()
            .map(|&o| {
                self.orig_tensor
                    .get(self.fused.tensor(o).name.as_str())
                    .copied()
            })
            .collect();
        if outs.iter().any(Option::is_none)
            || outs.iter().flatten().copied().collect::<HashSet<_>>() != needed
            || outs.len() != needed.len()
        {
            self.kernel(
                node,
                "its outputs are not the tensors its nodes make that are read outside them"
                    .to_owned(),
            );
            return;
        }
        for &o in outs.iter().skip(1).flatten() {
            let by_shape = self.orig_producers[o]
                .is_some_and(|p| matches!(g.node(p).op.as_str(), "Shape" | "Size"));
            if !by_shape {
                self.kernel(
                    node,
                    format!("extra output `{}` is not a shape", g.tensor(o).name),
                );
            }
        }
        let mut ins: Vec<Option<TensorId>> = node
            .inputs
            .iter()
            .map(|i| i.and_then(|t| self.stands_for(t)))
            .collect();
        if node
            .inputs
            .iter()
            .zip(&ins)
            .any(|(a, b)| a.is_some() && b.is_none())
        {
            self.kernel(
                node,
                "it reads a tensor the original graph does not have".to_owned(),
            );
            return;
        }
        let kind = match node.attr("memplan.fusion") {
            Some(Attr::Str(k)) => k.clone(),
            _ => String::new(),
        };
        // An attention kernel may read a mask's source instead of the mask its nodes read
        // (a broadcast of it, or made from it element by element with parameters): from
        // here on the input stands for the mask.
        if kind == "attention" {
            let sources: HashSet<TensorId> = ins.iter().skip(3).flatten().copied().collect();
            for t in &data {
                if sources.contains(t) {
                    continue;
                }
                if let Some(src) = self.mask_source(*t, &sources)
                    && let Some(slot) = ins.iter_mut().skip(3).find(|i| **i == Some(src))
                {
                    *slot = Some(*t);
                } else if self.split_mask(node, *t, &ins, &sources) {
                    // Both mask inputs stand for the mask they make together.
                    ins[3] = Some(*t);
                    ins[4] = None;
                } else if let Some(slot) = self.joined_mask(node, *t, &ins) {
                    // The mask input and input 5 stand for the mask they make joined.
                    ins[slot] = Some(*t);
                    ins[5] = None;
                }
            }
        }
        let present: HashSet<TensorId> = ins.iter().flatten().copied().collect();
        if let Some(t) = ins.iter().flatten().find(|t| !reads.contains(t)) {
            self.kernel(
                node,
                format!(
                    "it reads `{}`, which its nodes do not read from outside them",
                    g.tensor(*t).name
                ),
            );
            return;
        }
        if let Some(&t) = data.iter().find(|t| !present.contains(t)) {
            self.kernel(
                node,
                format!("its nodes read `{}`, which it does not", g.tensor(t).name),
            );
            return;
        }
        let y = match outs.first() {
            Some(Some(y)) => *y,
            _ => return,
        };
        let reason = match kind.as_str() {
            "attention" => self.attention(node, &list, &ins, y),
            "conv-add" => self.conv_add(node, &list, &ins, y),
            "gelu" | "silu" => self.pointwise(node, &kind, &list, &ins, y),
            "norm" => self.norm(node, &list, &ins, y),
            "bias-act" => self.bias_act(node, &list, &ins, y),
            _ => Some(format!("unknown fusion kind `{kind}`")),
        };
        if let Some(reason) = reason {
            self.kernel(node, reason);
        }
    }

    /// The tensor of `sources` that mask `t` is made from by broadcasts (`Expand`) and ops
    /// applied element by element with parameters (every other operand of at most one
    /// element), each making one tensor; `None` when `t` is made otherwise.
    fn mask_source(&self, t: TensorId, sources: &HashSet<TensorId>) -> Option<TensorId> {
        let g = self.original;
        let mut t = t;
        loop {
            if sources.contains(&t) {
                return Some(t);
            }
            let n = g.node(self.orig_producers[t]?);
            if !MASK_OPS.contains(&n.op.as_str()) || n.outputs.len() != 1 {
                return None;
            }
            let [only] = self.mask_data(n)[..] else {
                return None;
            };
            t = only;
        }
    }

    /// The operands of mask op `n` that are data: not a parameter (at most one element) nor
    /// the shape an `Expand` broadcasts to.
    fn mask_data(&self, n: &Node) -> Vec<TensorId> {
        let g = self.original;
        n.inputs
            .iter()
            .enumerate()
            .filter_map(|(pos, i)| {
                let i = (*i)?;
                let param = (n.op == "Expand" && pos == 1)
                    || g.tensor(i).static_elements().is_ok_and(|e| e <= 1);
                (!param).then_some(i)
            })
            .collect()
    }

    /// The slot (3 or 4) of the kernel's one mask input when mask `t` is that input and input
    /// 5 joined by the op attribute `mask_join` names (`And`, `Or` or `Add`, either operand
    /// order):
    /// each operand of the join made from one of the two as [`Check::mask_source`] allows, and
    /// `t` made from the join by broadcasts and ops applied element by element with
    /// parameters. Per element the kernel reads both (broadcast), joins them and applies those
    /// ops, which is what makes `t`.
    fn joined_mask(&self, node: &Node, t: TensorId, ins: &[Option<TensorId>]) -> Option<usize> {
        let g = self.original;
        let join = match node.attr("mask_join") {
            Some(Attr::Str(j)) if ["And", "Or", "Add"].contains(&j.as_str()) => j.as_str(),
            _ => return None,
        };
        let at = |i: usize| ins.get(i).copied().flatten();
        let second = at(5)?;
        let (slot, first) = match (at(3), at(4)) {
            (Some(a), None) => (3, a),
            (None, Some(b)) => (4, b),
            _ => return None,
        };
        let (one, two): (HashSet<TensorId>, HashSet<TensorId>) = ([first].into(), [second].into());
        let mut t = t;
        loop {
            let n = g.node(self.orig_producers[t]?);
            if !MASK_OPS.contains(&n.op.as_str()) || n.outputs.len() != 1 {
                return None;
            }
            match self.mask_data(n)[..] {
                [only] => t = only,
                [a, b] if n.op == join => {
                    let from =
                        |x: TensorId, s: &HashSet<TensorId>| self.mask_source(x, s).is_some();
                    let made = (from(a, &one) && from(b, &two)) || (from(a, &two) && from(b, &one));
                    return made.then_some(slot);
                }
                _ => return None,
            }
        }
    }

    /// Whether mask `t` is `Where(c, bias, fill)` (keeping where `c` holds: `mask_keep` 1) or
    /// `Where(c, fill, bias)` (`mask_keep` 0), `fill` of at most one element, with `bias` made
    /// from the kernel's additive mask (input 3) and `c` from its boolean one (input 4) as
    /// [`Check::mask_source`] allows: per score, `s + (c ? bias : fill)` is what a kernel
    /// adding input 3 and filling where input 4 drops computes.
    fn split_mask(
        &self,
        node: &Node,
        t: TensorId,
        ins: &[Option<TensorId>],
        sources: &HashSet<TensorId>,
    ) -> bool {
        let g = self.original;
        let Some(p) = self.orig_producers[t] else {
            return false;
        };
        let w = g.node(p);
        let one = |i: TensorId| g.tensor(i).static_elements().is_ok_and(|e| e <= 1);
        let (Some(c), Some(a), Some(b)) = (
            w.inputs.first().copied().flatten(),
            w.inputs.get(1).copied().flatten(),
            w.inputs.get(2).copied().flatten(),
        ) else {
            return false;
        };
        if w.op != "Where" || w.outputs.len() != 1 || w.inputs.len() != 3 {
            return false;
        }
        let (bias, keep) = match (one(a), one(b)) {
            (false, true) => (a, 1),
            (true, false) => (b, 0),
            _ => return false,
        };
        let (Some(add), Some(cond)) =
            (ins.get(3).copied().flatten(), ins.get(4).copied().flatten())
        else {
            return false;
        };
        node.attr("mask_keep").and_then(Attr::as_int) == Some(keep)
            && self.mask_source(bias, sources) == Some(add)
            && self.mask_source(c, sources) == Some(cond)
    }

    /// Whether data flows from tensor `from` to input `pos` of node `to` through nodes of
    /// `list` (or `from` is that input).
    fn reaches(&self, list: &[NodeId], from: TensorId, to: NodeId, pos: usize) -> bool {
        let target = self.original.node(to).inputs.get(pos).copied().flatten();
        let mut seen: HashSet<TensorId> = HashSet::new();
        let mut stack = vec![from];
        while let Some(t) = stack.pop() {
            if Some(t) == target {
                return true;
            }
            if !seen.insert(t) {
                continue;
            }
            for &r in &self.orig_consumers[t] {
                if list.binary_search(&r).is_ok()
                    && !matches!(self.original.node(r).op.as_str(), "Shape" | "Size")
                {
                    stack.extend(self.original.node(r).outputs.iter().copied());
                }
            }
        }
        false
    }

    fn ops_within(&self, list: &[NodeId], allowed: &[&str], core: &[&str]) -> Option<String> {
        list.iter()
            .map(|&m| self.original.node(m))
            .find(|n| !allowed.contains(&n.op.as_str()) && !core.contains(&n.op.as_str()))
            .map(|n| {
                format!(
                    "its nodes hold `{}` ({}), which its kind does not",
                    n.name, n.op
                )
            })
    }

    fn count(&self, list: &[NodeId], op: &str) -> Vec<NodeId> {
        list.iter()
            .copied()
            .filter(|&m| self.original.node(m).op == op)
            .collect()
    }

    fn attention(
        &self,
        node: &Node,
        list: &[NodeId],
        ins: &[Option<TensorId>],
        y: TensorId,
    ) -> Option<String> {
        let g = self.original;
        if node.op != "memplan.Attention" {
            return Some(format!("op `{}` is not memplan.Attention", node.op));
        }
        if let [one] = list
            && g.node(*one).op == "Attention"
        {
            return self.onnx_attention(node, *one, ins, y);
        }
        if let Some(r) = self.ops_within(list, ATTENTION_OPS, &["MatMul", "Softmax"]) {
            return Some(r);
        }
        let (products, softmax) = (self.count(list, "MatMul"), self.count(list, "Softmax"));
        let ([a, b], [sm]) = (products.as_slice(), softmax.as_slice()) else {
            return Some("its nodes are not two MatMuls and one Softmax".to_owned());
        };
        // Q·Kᵀ feeds the softmax; P·V reads what the softmax makes.
        let (qk, pv) = if self.reaches_node(list, *a, *sm) {
            (*a, *b)
        } else {
            (*b, *a)
        };
        let Some(&p) = g.node(*sm).outputs.first() else {
            return Some("its softmax makes nothing".to_owned());
        };
        let qk_out = g.node(qk).outputs.first().copied()?;
        if !self.reaches_node(list, qk, *sm) || !self.reaches(list, p, pv, 0) {
            return Some("its softmax is not between its two products".to_owned());
        }
        let role = [(0, qk, 0, "Q"), (1, qk, 1, "K"), (2, pv, 1, "V")];
        for (i, to, pos, name) in role {
            match ins.get(i).copied().flatten() {
                Some(t) if self.reaches(list, t, to, pos) => {}
                _ => return Some(format!("input {i} does not reach the product as {name}")),
            }
        }
        if !self.reaches(list, qk_out, pv, 0) {
            return Some("the scores do not reach the second product".to_owned());
        }
        // Masks act on the scores, before the softmax.
        for &m in ins.iter().skip(3).flatten() {
            if !self.reaches(list, m, *sm, 0) {
                return Some(format!(
                    "mask `{}` does not reach the softmax",
                    g.tensor(m).name
                ));
            }
        }
        // The output holds P·V's values.
        let pv_out = g.node(pv).outputs.first().copied()?;
        if pv_out != y && !self.flows_to(list, pv_out, y) {
            return Some("its output is not what the second product makes".to_owned());
        }
        // The scratch's sizes: K[kv_axis] is the scores' key count; the output over its value
        // size has the scores' rows.
        let axis = |name: &str| usize::try_from(node.attr(name).and_then(Attr::as_int)?).ok();
        let k = ins.get(1).copied().flatten()?;
        let scores = &g.tensor(qk_out).shape;
        let keys = scores.last()?;
        let kv = axis("kv_axis").and_then(|a| g.tensor(k).shape.get(a));
        if kv != Some(keys) {
            return Some("kv_axis is not the axis of K holding the keys".to_owned());
        }
        let Some(dv) = axis("dv_axis").and_then(|a| g.tensor(y).shape.get(a)) else {
            return Some("dv_axis is not an axis of the output".to_owned());
        };
        let value = g.tensor(pv_out).shape.last()?;
        let rows_match = (|| {
            let ye = g.tensor(y).elements_expr().ok()?;
            let se = g.tensor(qk_out).elements_expr().ok()?;
            Some(ye.checked_mul(keys).ok()? == se.checked_mul(dv).ok()?)
        })();
        if dv != value || rows_match != Some(true) {
            return Some(
                "dv_axis does not give the output the scores' rows of value vectors".to_owned(),
            );
        }
        None
    }

    /// An attention kernel replacing one ONNX `Attention` node `m` (4-D Q, K, V, a mask, no
    /// cache, one output): the same Q, K, V, its mask (input 3) standing for the kernel's
    /// masks (a boolean one as the kept-where-true mask), the keys on K's axis 2, the value
    /// size on the output's axis 3, the node's attributes kept.
    fn onnx_attention(
        &self,
        node: &Node,
        m: NodeId,
        ins: &[Option<TensorId>],
        y: TensorId,
    ) -> Option<String> {
        let g = self.original;
        let original = g.node(m);
        let at = |i: usize| original.inputs.get(i).copied().flatten();
        let rank4 = |t: Option<TensorId>| t.is_some_and(|t| g.tensor(t).shape.len() == 4);
        if original.outputs.len() != 1
            || original.inputs.len() > 4
            || ![at(0), at(1), at(2), Some(y)].into_iter().all(rank4)
        {
            return Some(format!(
                "`{}` is no 4-D attention without a cache and with one output",
                original.name
            ));
        }
        if ins.get(..3) != Some(&original.inputs[..3]) {
            return Some(format!("its Q, K, V are not `{}`'s", original.name));
        }
        let int = |name: &str| node.attr(name).and_then(Attr::as_int);
        let mask_ok = match (ins.get(3).copied().flatten(), ins.get(4).copied().flatten()) {
            (Some(a), None) => Some(a) == at(3),
            (None, Some(b)) => Some(b) == at(3) && int("mask_keep") == Some(1),
            _ => false,
        };
        if !mask_ok {
            return Some(format!("its masks do not make `{}`'s", original.name));
        }
        if int("kv_axis") != Some(2) || int("dv_axis") != Some(3) {
            return Some("kv_axis is not 2 or dv_axis is not 3".to_owned());
        }
        let kept = original
            .attrs
            .iter()
            .filter(|(k, _)| k != "softcap" && k != "softmax_precision")
            .all(|a| node.attrs.contains(a));
        if !kept {
            return Some(format!("it drops attributes of `{}`", original.name));
        }
        None
    }

    /// Whether node `from`'s outputs reach node `to` (any input) through nodes of `list`.
    fn reaches_node(&self, list: &[NodeId], from: NodeId, to: NodeId) -> bool {
        let g = self.original;
        g.node(from)
            .outputs
            .iter()
            .any(|&t| (0..g.node(to).inputs.len()).any(|pos| self.reaches(list, t, to, pos)))
    }

    /// Whether tensor `from` reaches tensor `to` through nodes of `list`.
    fn flows_to(&self, list: &[NodeId], from: TensorId, to: TensorId) -> bool {
        let mut seen: HashSet<TensorId> = HashSet::new();
        let mut stack = vec![from];
        while let Some(t) = stack.pop() {
            if t == to {
                return true;
            }
            if !seen.insert(t) {
                continue;
            }
            for &r in &self.orig_consumers[t] {
                if list.binary_search(&r).is_ok() {
                    stack.extend(self.original.node(r).outputs.iter().copied());
                }
            }
        }
        false
    }

    fn same_size(&self, a: TensorId, b: TensorId) -> bool {
        let (x, y) = (self.original.tensor(a), self.original.tensor(b));
        x.dtype == y.dtype
            && matches!((x.elements_expr(), y.elements_expr()), (Ok(p), Ok(q)) if p == q)
    }

    fn conv_add(
        &self,
        node: &Node,
        list: &[NodeId],
        ins: &[Option<TensorId>],
        y: TensorId,
    ) -> Option<String> {
        let g = self.original;
        let product = node.op.strip_prefix("memplan.")?.strip_suffix("Add")?;
        if !["Conv", "ConvTranspose", "Gemm", "MatMul"].contains(&product) {
            return Some(format!(
                "op `{}` is no product added into a residual",
                node.op
            ));
        }
        let products = self.count(list, product);
        // A two-input Sum adds as an Add does.
        let mut adds = self.count(list, "Add");
        adds.extend(
            self.count(list, "Sum")
                .into_iter()
                .filter(|&m| g.node(m).inputs.len() == 2),
        );
        let [p] = products.as_slice() else {
            return Some(format!("its nodes hold no single {product}"));
        };
        let views = ["Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"];
        let core = [
            product,
            "Add",
            "Sum",
            "BatchNormalization",
            "Mul",
            "Transpose",
            "Shape",
            "Size",
        ];
        if let Some(r) = self.ops_within(list, &views, &core) {
            return Some(r);
        }
        // An inference normalisation (one output) on a convolution's output folds into its
        // weights; a training one (running statistics out) does not, nor one on a product
        // that is no convolution.
        let norms = self.count(list, "BatchNormalization");
        if norms.len() > 1
            || norms.iter().any(|&m| g.node(m).outputs.len() != 1)
            || (!norms.is_empty() && !["Conv", "ConvTranspose"].contains(&product))
        {
            return Some(
                "its normalisation is not one inference BatchNormalization of a convolution"
                    .to_owned(),
            );
        }
        let between = adds.len() - 1 + norms.len();
        if adds.is_empty() || between > 1 {
            return Some(
                "its nodes are not one product, its residual add and at most one bias add or normalisation"
                    .to_owned(),
            );
        }
        // The Add making the output adds the residual, input 0, from outside.
        let last = self.orig_producers[y].filter(|m| adds.contains(m))?;
        let r = ins.first().copied().flatten()?;
        if !g.node(last).inputs.contains(&Some(r)) || !self.same_size(r, y) {
            return Some("input 0 is no residual of the output's size added last".to_owned());
        }
        // Then the product's own inputs, in order.
        let own = &g.node(*p).inputs;
        if ins.get(1..=own.len()) != Some(own.as_slice()) {
            return Some(format!("inputs 1 on are not the {product}'s inputs"));
        }
        self.epilogue(node, list, ins, *p, last, r)
    }

    /// A product kernel's epilogue: at most one `Mul` by input `scale_input` (broadcast:
    /// fewer elements than what it scales) of what the product (and its bias) made, and at
    /// most one `Transpose` by `out_perm`, whose output the residual `Add` (node `last`,
    /// residual `r`) adds: `y = r + transpose(scale · (product + bias))`. Neither without
    /// its attribute, nor an attribute without its node.
    fn epilogue(
        &self,
        node: &Node,
        list: &[NodeId],
        ins: &[Option<TensorId>],
        p: NodeId,
        last: NodeId,
        r: TensorId,
    ) -> Option<String> {
        let g = self.original;
        let (muls, transposes) = (self.count(list, "Mul"), self.count(list, "Transpose"));
        let made = g.node(p).outputs.first().copied()?;
        let other = g
            .node(last)
            .inputs
            .iter()
            .flatten()
            .copied()
            .find(|&t| t != r)?;
        let scale_at = node
            .attr("scale_input")
            .and_then(Attr::as_int)
            .and_then(|i| usize::try_from(i).ok());
        match (muls.as_slice(), scale_at) {
            ([], None) => {}
            ([m], Some(at)) => {
                let mul = g.node(*m);
                let (Some(out), Some(scale)) =
                    (mul.outputs.first().copied(), ins.get(at).copied().flatten())
                else {
                    return Some("its scale input is missing".to_owned());
                };
                let scaled = mul.inputs.iter().flatten().copied().find(|&t| t != scale);
                let smaller = match (
                    g.tensor(scale).elements_expr(),
                    g.tensor(out).elements_expr(),
                ) {
                    (Ok(a), Ok(b)) => a != b,
                    _ => false,
                };
                let from_product =
                    scaled.is_some_and(|t| t == made || self.flows_to(list, made, t));
                if !mul.inputs.contains(&Some(scale))
                    || !smaller
                    || !from_product
                    || !self.flows_to(list, out, other)
                {
                    return Some(
                        "its Mul does not scale the product by input scale_input before the residual add"
                            .to_owned(),
                    );
                }
            }
            _ => return Some("its Mul and scale_input do not match".to_owned()),
        }
        let perm = node.attr("out_perm").and_then(Attr::as_ints);
        match (transposes.as_slice(), perm) {
            ([], None) => None,
            ([t], Some(perm)) => {
                let tr = g.node(*t);
                let out = tr.outputs.first().copied()?;
                // After the scale: the scale broadcasts over the product's layout.
                let scaled_first = muls.iter().all(|&m| {
                    let (mo, ti) = (g.node(m).outputs.first(), tr.inputs.first());
                    matches!((mo, ti), (Some(&mo), Some(&Some(ti))) if self.flows_to(list, mo, ti))
                });
                let ok = tr.attr("perm").and_then(Attr::as_ints) == Some(perm)
                    && scaled_first
                    && self.flows_to(list, out, other);
                (!ok).then(|| {
                    "its Transpose is not out_perm's, just before the residual add".to_owned()
                })
            }
            _ => Some("its Transpose and out_perm do not match".to_owned()),
        }
    }

    fn pointwise(
        &self,
        node: &Node,
        kind: &str,
        list: &[NodeId],
        ins: &[Option<TensorId>],
        y: TensorId,
    ) -> Option<String> {
        let ops: &[&str] = if kind == "gelu" {
            &["Gelu", "QuickGelu"]
        } else {
            &["Swish"]
        };
        if !ops.contains(&node.op.as_str()) {
            return Some(format!("op `{}` is no {kind}", node.op));
        }
        if let Some(r) = self.ops_within(list, POINTWISE_OPS, &[]) {
            return Some(r);
        }
        let needs: &[&str] = if kind == "gelu" {
            &["Erf", "Tanh", "Sigmoid"]
        } else {
            &["Sigmoid"]
        };
        if !list
            .iter()
            .any(|&m| needs.contains(&self.original.node(m).op.as_str()))
        {
            return Some(format!("its nodes hold none of {needs:?}"));
        }
        match ins {
            [Some(x)] if self.same_size(*x, y) => None,
            _ => Some("it does not read one tensor of its output's size".to_owned()),
        }
    }

    fn norm(
        &self,
        node: &Node,
        list: &[NodeId],
        ins: &[Option<TensorId>],
        y: TensorId,
    ) -> Option<String> {
        if node.op == "memplan.SkipNorm" {
            return match list {
                [one] => self.skip_norm(node, *one, ins, y),
                _ => Some("a skip normalisation that replaces more than one node".to_owned()),
            };
        }
        if ![
            "LayerNormalization",
            "RMSNormalization",
            "GroupNormalization",
        ]
        .contains(&node.op.as_str())
        {
            return Some(format!("op `{}` is no normalisation", node.op));
        }
        if let Some(r) = self.ops_within(list, NORM_OPS, &[]) {
            return Some(r);
        }
        let means = self.count(list, "ReduceMean");
        let x = ins.first().copied().flatten()?;
        if means.is_empty() || !means.iter().any(|&m| self.reaches(list, x, m, 0)) {
            return Some("input 0 reaches no mean of its nodes".to_owned());
        }
        if !self.same_size(x, y) {
            return Some("input 0 is not as large as the output".to_owned());
        }
        None
    }

    /// A skip normalisation that replaces one node: ONNX Runtime's
    /// `SkipLayerNormalization(x, skip, gamma, [beta], [bias])` (or its RMS form,
    /// `SkipSimplifiedLayerNormalization`) making its output alone (neither the statistics
    /// nor the sum, which the kernel would write too), read the same way (the same inputs at
    /// the same places, the original's attributes, `normalization` naming its op), `x` as
    /// large as the output.
    fn skip_norm(
        &self,
        node: &Node,
        m: NodeId,
        ins: &[Option<TensorId>],
        y: TensorId,
    ) -> Option<String> {
        let original = self.original.node(m);
        if !matches!(
            original.op.as_str(),
            "com.microsoft.SkipLayerNormalization"
                | "com.microsoft.SkipSimplifiedLayerNormalization"
        ) {
            return Some(format!("one `{}` is no skip normalisation", original.op));
        }
        if node.attr("normalization") != Some(&Attr::Str(original.op.clone())) {
            return Some(format!("its `normalization` is not `{}`", original.op));
        }
        let own: Vec<&(String, Attr)> = attrs_of(node)
            .into_iter()
            .filter(|(k, _)| k != "normalization")
            .collect();
        if own != attrs_of(original) {
            return Some(format!("its attributes are not `{}`'s", original.name));
        }
        if original.outputs.len() != 1 {
            return Some(format!(
                "`{}` makes more than its output (the kernel makes one)",
                original.name
            ));
        }
        if ins != original.inputs.as_slice() {
            return Some(format!(
                "it does not read what `{}` reads, in its order",
                original.name
            ));
        }
        match ins.first() {
            Some(Some(x)) if self.same_size(*x, y) => None,
            _ => Some("input 0 is not as large as the output".to_owned()),
        }
    }

    /// A bias activation that replaces one node: ONNX Runtime's `BiasGelu(x, b)` (GELU,
    /// erf form, of `x + b`) or `FastGelu(x, b)` (its tanh form), reading the same `x` and
    /// `b`, `b` smaller than what it writes.
    fn own_bias(
        &self,
        m: NodeId,
        act: &str,
        ins: &[Option<TensorId>],
        y: TensorId,
    ) -> Option<String> {
        let original = self.original.node(m);
        let applies = match original.op.as_str() {
            "com.microsoft.BiasGelu" => "com.microsoft.Gelu",
            "com.microsoft.FastGelu" => "com.microsoft.FastGelu",
            other => return Some(format!("one `{other}` is no bias and activation")),
        };
        if act != applies {
            return Some(format!(
                "`{}` applies `{applies}`, not `{act}`",
                original.name
            ));
        }
        let (x, b) = match (ins, original.inputs.as_slice()) {
            ([Some(x), Some(b)], [Some(ox), Some(ob)]) if x == ox && b == ob => (*x, *b),
            _ => {
                return Some(format!(
                    "it does not read what `{}` reads (the data, then the bias)",
                    original.name
                ));
            }
        };
        if !self.same_size(x, y) || self.same_size(b, y) {
            return Some(
                "input 0 plus the bias (a smaller tensor) is not what it activates".to_owned(),
            );
        }
        None
    }

    fn bias_act(
        &self,
        node: &Node,
        list: &[NodeId],
        ins: &[Option<TensorId>],
        y: TensorId,
    ) -> Option<String> {
        let g = self.original;
        if node.op != "memplan.BiasAct" {
            return Some(format!("op `{}` is not memplan.BiasAct", node.op));
        }
        let act = match node.attr("activation") {
            Some(Attr::Str(a)) => a.clone(),
            _ => return Some("it names no activation".to_owned()),
        };
        if !ACTIVATIONS.contains(&act.as_str()) {
            return Some(format!("`{act}` is no activation"));
        }
        if let [one] = list {
            return self.own_bias(*one, &act, ins, y);
        }
        if let Some(r) = self.ops_within(list, POINTWISE_OPS, ACTIVATIONS) {
            return Some(r);
        }
        let (Some(x), Some(b)) = (
            ins.first().copied().flatten(),
            ins.get(1).copied().flatten(),
        ) else {
            return Some("it does not read a tensor and a bias".to_owned());
        };
        let adds = self.count(list, "Add");
        let first = adds.iter().copied().find(|&a| {
            let n = g.node(a);
            n.inputs.contains(&Some(x)) && n.inputs.contains(&Some(b))
        });
        if first.is_none() || !self.same_size(x, y) || self.same_size(b, y) {
            return Some(
                "input 0 plus the bias (a smaller tensor) is not what it activates".to_owned(),
            );
        }
        None
    }
}
