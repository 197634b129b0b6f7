//! Graph validation: every structural problem, each naming the tensor or node it is about.
//!
//! [`Graph::validate`] does not stop at the first problem; it returns all of them, in a
//! deterministic order (by check, then by node or tensor order). A graph that validates has:
//! unique tensor and node names; ids that exist; at most one producer per tensor; no node
//! that writes a graph input or a weight; every read after its producer in node order (so
//! node order is a topological order, and there is no cycle); every activation and output
//! produced; every symbol declared; every static size representable in `u64`. Implicit inputs
//! (values a body captures) are reads like the listed ones: they must exist and be produced
//! before the node. Every body validates on its own (its problems come wrapped in
//! [`ValidationError::InBody`]), shares its graph's symbols, and each of its inputs named like
//! a tensor of the enclosing graph (a captured value) is among the node's implicit inputs; an
//! input named like a value of a graph further out must be passed on by every graph between
//! ([`ValidationError::DeepCapture`]), and an input naming no outer value must be one the op
//! hands its body (If none, Loop and Scan one per node input). Tensor names are not empty.
//! Op parameters and declared output shapes are checked against the op's definition (see
//! `op_checks`).

use std::fmt;

use crate::entity::{AnyEntity, Entities, ErrorGraph, GraphError, Names};
use crate::graph::{Graph, SizeError, Tensor, TensorKind};
use crate::ids::{IndexVec, NodeId, TensorId};

/// One problem found in a graph. Tensors and nodes of the graph are held by id and named
/// when the error is rendered ([`GraphError::with_graph`]; `Display` names ids, and
/// [`ValidationErrors`] renders with the graph it carries). A name stays where the name is
/// what is wrong or where the entity is no tensor or node of the graph: a repeated name, a
/// name that names nothing, an entry of a file before it is a graph.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ValidationError {
    /// The file could not be turned into a graph at all (syntax, types, missing fields).
    Malformed(String),
    /// Two tensors share a name.
    DuplicateTensor {
        /// The repeated name.
        name: String,
    },
    /// Two nodes share a name.
    DuplicateNode {
        /// The repeated name.
        name: String,
    },
    /// A node names a tensor that does not exist (found by the JSON reader, or an id out of
    /// range): names, since neither may be in the graph.
    Dangling {
        /// The node.
        node: String,
        /// `reads` or `writes`.
        role: &'static str,
        /// The missing tensor name (or id).
        tensor: String,
    },
    /// Two nodes write the same tensor.
    TwoProducers {
        /// The tensor.
        tensor: TensorId,
        /// The first producer in node order.
        first: NodeId,
        /// A later producer.
        second: NodeId,
    },
    /// A node writes a graph input or a weight.
    ProducesInput {
        /// The node.
        node: NodeId,
        /// The tensor.
        tensor: TensorId,
        /// Its kind.
        kind: TensorKind,
    },
    /// A node reads a tensor that its producer writes only later in node order.
    ReadBeforeProduced {
        /// The reading node.
        node: NodeId,
        /// The tensor.
        tensor: TensorId,
        /// Its producer, later in node order.
        producer: NodeId,
    },
    /// Nodes that depend on each other in a cycle.
    Cycle {
        /// The nodes of one cycle, in dependency order.
        nodes: Vec<NodeId>,
    },
    /// An activation or output that no node produces.
    NeverProduced {
        /// The tensor.
        tensor: TensorId,
        /// Its kind.
        kind: TensorKind,
    },
    /// A shape uses a symbol the graph does not declare (the tensor by name: the JSON reader
    /// finds it before the tensor is in a graph).
    UnknownSymbol {
        /// The tensor.
        tensor: String,
        /// The symbol.
        symbol: String,
    },
    /// A tensor's size does not fit in `u64`.
    SizeOverflow {
        /// The tensor.
        tensor: TensorId,
    },
    /// A static dimension is negative.
    NegativeDim {
        /// The tensor.
        tensor: TensorId,
        /// The dimension's position.
        dim: usize,
        /// Its value.
        value: i64,
    },
    /// A constant value on a tensor that is not a weight: only weights (initializers and
    /// constants) have values known before the run.
    ValueOnNonWeight {
        /// The tensor.
        tensor: TensorId,
        /// Its kind.
        kind: TensorKind,
    },
    /// A Split whose declared output disagrees with the chunk its own parameters give.
    SplitMismatch {
        /// The node.
        node: NodeId,
        /// The output (`None` when the node has fewer outputs than chunks).
        output: Option<TensorId>,
        /// The output's position among the node's outputs.
        position: usize,
        /// The length its parameters give (0 for a missing chunk).
        expected: u64,
        /// The declared length (0 for a missing output).
        declared: u64,
    },
    /// An op that keeps every element of its input (Reshape, Flatten, Squeeze, Unsqueeze,
    /// Identity) declared with an output of another element count or dtype.
    ElementsChanged {
        /// The node.
        node: NodeId,
        /// Its op.
        op: String,
        /// Its data input.
        input: TensorId,
        /// Elements of the input.
        input_elements: u64,
        /// The input's dtype.
        input_dtype: crate::DType,
        /// Its output.
        output: TensorId,
        /// Elements of the output.
        output_elements: u64,
        /// The output's dtype.
        output_dtype: crate::DType,
    },
    /// A problem inside a body graph of a node (its entities are the body's).
    InBody {
        /// The node that runs the body.
        node: NodeId,
        /// The attribute holding the body.
        attr: String,
        /// The problem in the body.
        error: Box<ValidationError>,
    },
    /// A body whose symbols are not its enclosing graph's.
    BodySymbols {
        /// The node.
        node: NodeId,
        /// The attribute holding the body.
        attr: String,
    },
    /// A body captures a value of the enclosing graph that the node does not list among its
    /// implicit inputs, so the value could die before the node runs.
    UnlistedCapture {
        /// The node.
        node: NodeId,
        /// The attribute holding the body.
        attr: String,
        /// The body's input that captures the value (a tensor of the body).
        tensor: TensorId,
    },
    /// A `bytes` field that disagrees with dtype and shape (found by the JSON reader, before
    /// the tensor is in a graph).
    BytesMismatch {
        /// The tensor.
        tensor: String,
        /// The stated byte count.
        declared: u64,
        /// The byte count from dtype and shape.
        computed: u64,
    },
    /// A body captures a value from a graph further out than the one around it, and the
    /// graph around it does not have the value: nothing keeps it live until the node
    /// holding that graph runs. (The JSON reader completes such captures itself.)
    DeepCapture {
        /// The node.
        node: NodeId,
        /// The attribute holding the body.
        attr: String,
        /// The captured tensor's name (no tensor of this graph has it).
        tensor: String,
    },
    /// A body input that names no value of an enclosing graph and is not one of the inputs
    /// the op hands its body (If has none; a Loop hands its iteration number, condition and
    /// carried values; a Scan its states and scanned slices).
    UnknownBodyInput {
        /// The node.
        node: NodeId,
        /// Its op.
        op: String,
        /// The attribute holding the body.
        attr: String,
        /// The input (a tensor of the body).
        tensor: TensorId,
        /// How many inputs the op hands its body.
        formal: usize,
    },
    /// A tensor with an empty name (an empty name marks an absent optional input).
    EmptyName {
        /// Its position in the tensor list.
        index: usize,
    },
    /// An attribute or constant parameter the op's definition does not allow.
    BadParameter {
        /// The node.
        node: NodeId,
        /// Its op.
        op: String,
        /// What is wrong, naming the attribute.
        reason: String,
    },
    /// An output declared with a shape the op cannot make from its inputs.
    WrongShape {
        /// The node.
        node: NodeId,
        /// Its op.
        op: String,
        /// The output.
        output: TensorId,
        /// The declared shape, as `[d0, d1, ...]`.
        declared: String,
        /// What the inputs give (dims that cannot be told are `?`).
        expected: String,
    },
}

impl GraphError for ValidationError {
    fn fmt_with(&self, names: Names<'_>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = |e: AnyEntity| names.name(e);
        use ValidationError as V;
        match self {
            V::Malformed(m) => f.write_str(m),
            V::DuplicateTensor { name } => write!(f, "tensor `{name}` is declared more than once"),
            V::DuplicateNode { name } => write!(f, "node `{name}` is declared more than once"),
            V::Dangling { node, role, tensor } => write!(
                f,
                "node `{node}` {role} `{tensor}`, which is not a tensor of the graph"
            ),
            V::TwoProducers {
                tensor,
                first,
                second,
            } => write!(
                f,
                "tensor `{}` is produced by both `{}` and `{}`",
                n((*tensor).into()),
                n((*first).into()),
                n((*second).into())
            ),
            V::ProducesInput { node, tensor, kind } => write!(
                f,
                "node `{}` writes `{}`, which is a graph {kind} and must not be produced",
                n((*node).into()),
                n((*tensor).into())
            ),
            V::ReadBeforeProduced {
                node,
                tensor,
                producer,
            } => write!(
                f,
                "node `{}` reads `{}` before its producer `{}` runs",
                n((*node).into()),
                n((*tensor).into()),
                n((*producer).into())
            ),
            V::Cycle { nodes } => {
                f.write_str("cycle through nodes ")?;
                for (i, &node) in nodes.iter().enumerate() {
                    if i > 0 {
                        f.write_str(" -> ")?;
                    }
                    write!(f, "`{}`", n(node.into()))?;
                }
                Ok(())
            }
            V::NeverProduced { tensor, kind } => write!(
                f,
                "{kind} `{}` is never produced by any node",
                n((*tensor).into())
            ),
            V::UnknownSymbol { tensor, symbol } => {
                write!(f, "tensor `{tensor}` uses unknown symbol `{symbol}`")
            }
            V::SizeOverflow { tensor } => {
                write!(
                    f,
                    "tensor `{}`: size overflows 64 bits",
                    n((*tensor).into())
                )
            }
            V::NegativeDim { tensor, dim, value } => write!(
                f,
                "tensor `{}`: dimension {dim} is negative ({value})",
                n((*tensor).into())
            ),
            V::ValueOnNonWeight { tensor, kind } => write!(
                f,
                "{kind} `{}` has a constant value, but only weights may have one",
                n((*tensor).into())
            ),
            V::SplitMismatch {
                node,
                output,
                position,
                expected,
                declared,
            } => {
                write!(f, "Split `{}`: output `", n((*node).into()))?;
                match output {
                    Some(t) => write!(f, "{}", n((*t).into()))?,
                    None => write!(f, "output {position}")?,
                }
                write!(
                    f,
                    "` is declared with {declared} along the axis, but the op's parameters give {expected}"
                )
            }
            V::ElementsChanged {
                node,
                op,
                input,
                input_elements,
                input_dtype,
                output,
                output_elements,
                output_dtype,
            } => write!(
                f,
                "{op} `{}`: output `{}` has {output_elements} {output_dtype} elements but input `{}` has {input_elements} {input_dtype}",
                n((*node).into()),
                n((*output).into()),
                n((*input).into())
            ),
            V::InBody { node, attr, error } => {
                write!(f, "node `{}`, body `{attr}`: ", n((*node).into()))?;
                error.fmt_with(names.body(*node, attr), f)
            }
            V::BodySymbols { node, attr } => write!(
                f,
                "node `{}`, body `{attr}`: its symbols differ from the enclosing graph's",
                n((*node).into())
            ),
            V::UnlistedCapture { node, attr, tensor } => write!(
                f,
                "node `{}`: body `{attr}` captures `{}`, which is not among the node's implicit inputs",
                n((*node).into()),
                names.body(*node, attr).name(*tensor)
            ),
            V::BytesMismatch {
                tensor,
                declared,
                computed,
            } => write!(
                f,
                "tensor `{tensor}`: bytes is {declared} but dtype and shape give {computed}"
            ),
            V::DeepCapture { node, attr, tensor } => write!(
                f,
                "node `{}`: body `{attr}` captures `{tensor}` from an outer graph, but this graph does not have `{tensor}`: list it as an input of every body in between and among each node's implicit inputs",
                n((*node).into())
            ),
            V::UnknownBodyInput {
                node,
                op,
                attr,
                tensor,
                formal,
            } => write!(
                f,
                "{op} `{}`: body `{attr}` has input `{}`, which is neither one of the {formal} inputs the op hands its body nor a value of an enclosing graph",
                n((*node).into()),
                names.body(*node, attr).name(*tensor)
            ),
            V::EmptyName { index } => write!(
                f,
                "tensor {index} has an empty name (an empty name marks an absent optional input)"
            ),
            V::BadParameter { node, op, reason } => {
                write!(f, "{op} `{}`: {reason}", n((*node).into()))
            }
            V::WrongShape {
                node,
                op,
                output,
                declared,
                expected,
            } => write!(
                f,
                "{op} `{}`: output `{}` is declared {declared}, but its inputs give {expected}",
                n((*node).into()),
                n((*output).into())
            ),
        }
    }

    fn entities(&self) -> Vec<AnyEntity> {
        use ValidationError as V;
        let mut e = Entities::default();
        match self {
            V::Malformed(_)
            | V::DuplicateTensor { .. }
            | V::DuplicateNode { .. }
            | V::Dangling { .. }
            | V::UnknownSymbol { .. }
            | V::BytesMismatch { .. }
            | V::EmptyName { .. } => {}
            V::TwoProducers {
                tensor,
                first,
                second,
            } => {
                e.add(*tensor).add(*first).add(*second);
            }
            V::ProducesInput { node, tensor, .. } => {
                e.add(*node).add(*tensor);
            }
            V::ReadBeforeProduced {
                node,
                tensor,
                producer,
            } => {
                e.add(*node).add(*tensor).add(*producer);
            }
            V::Cycle { nodes } => {
                for &node in nodes {
                    e.add(node);
                }
            }
            V::NeverProduced { tensor, .. }
            | V::SizeOverflow { tensor }
            | V::NegativeDim { tensor, .. }
            | V::ValueOnNonWeight { tensor, .. } => {
                e.add(*tensor);
            }
            V::SplitMismatch { node, output, .. } => {
                e.add(*node);
                if let Some(t) = output {
                    e.add(*t);
                }
            }
            V::ElementsChanged {
                node,
                input,
                output,
                ..
            } => {
                e.add(*node).add(*output).add(*input);
            }
            // A body's tensors are the body's, not this graph's: only the node is.
            V::InBody { node, .. }
            | V::BodySymbols { node, .. }
            | V::UnlistedCapture { node, .. }
            | V::DeepCapture { node, .. }
            | V::UnknownBodyInput { node, .. }
            | V::BadParameter { node, .. } => {
                e.add(*node);
            }
            V::WrongShape { node, output, .. } => {
                e.add(*node).add(*output);
            }
        }
        e.into_vec()
    }
}

impl fmt::Display for ValidationError {
    /// The message naming entities by id (render with a graph: [`GraphError::with_graph`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_with(Names::ids(), f)
    }
}

impl std::error::Error for ValidationError {}

/// Every problem found in a graph, in a deterministic order, with the graph they were found
/// in where the caller may not hold it (a graph built, read or imported by the call that
/// failed): then `Display` names its entities by that graph's names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidationErrors {
    /// The problems.
    pub errors: Vec<ValidationError>,
    /// The graph they were found in (`None`: the caller's own, rendered with
    /// [`GraphError::with_graph`]).
    pub graph: Option<ErrorGraph>,
}

impl ValidationErrors {
    /// `errors`, found in a graph the caller holds.
    pub fn new(errors: Vec<ValidationError>) -> ValidationErrors {
        ValidationErrors {
            errors,
            graph: None,
        }
    }

    /// The same problems, carrying `graph`, the graph they were found in.
    #[must_use]
    pub fn found_in(self, graph: Graph) -> ValidationErrors {
        ValidationErrors {
            graph: Some(ErrorGraph::new(graph)),
            ..self
        }
    }
}

impl GraphError for ValidationErrors {
    /// Each problem named by the graph the errors carry, else by `names`.
    fn fmt_with(&self, names: Names<'_>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = self.graph.as_ref().map_or(names, |g| Names::of(g.graph()));
        let n = self.errors.len();
        write!(f, "{n} problem{}:", if n == 1 { "" } else { "s" })?;
        for e in &self.errors {
            f.write_str("\n  - ")?;
            e.fmt_with(names, f)?;
        }
        Ok(())
    }

    fn entities(&self) -> Vec<AnyEntity> {
        let mut all = Entities::default();
        for e in self.errors.iter().flat_map(GraphError::entities) {
            all.add(e);
        }
        all.into_vec()
    }
}

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_with(Names::ids(), f)
    }
}

impl std::error::Error for ValidationErrors {}

impl Graph {
    /// Checks the graph and returns every problem found, in a deterministic order (by check,
    /// then by node or tensor order), each naming its tensor or node. A graph that validates
    /// has unique names, ids that exist, at most one producer per tensor, every read after its
    /// producer in node order (no cycle), every activation and output produced, every symbol
    /// declared, and bodies that validate on their own. The errors carry a copy of the graph,
    /// so they render with its names wherever they are printed.
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        self.validate_in(&[]).map_err(|e| e.found_in(self.clone()))
    }

    /// [`Graph::validate`] for a graph inside `scopes` (the enclosing graphs, outermost
    /// first): a body's inputs resolve in them.
    fn validate_in(&self, scopes: &[&Graph]) -> Result<(), ValidationErrors> {
        let mut errors = Vec::new();
        self.check_names(&mut errors);
        self.check_tensors(&mut errors);
        self.check_edges(&mut errors);
        self.check_ops(&mut errors);
        self.check_op_params(&mut errors);
        self.check_bodies(scopes, &mut errors);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ValidationErrors::new(errors))
        }
    }

    fn check_names(&self, errors: &mut Vec<ValidationError>) {
        for (index, t) in self.tensors().iter().enumerate() {
            if t.name.is_empty() {
                errors.push(ValidationError::EmptyName { index });
            }
        }
        let mut names: Vec<&str> = self.tensors().iter().map(|t| t.name.as_str()).collect();
        names.sort_unstable();
        for w in names.windows(2) {
            if w[0] == w[1]
                && (errors.iter().all(
                    |e| !matches!(e, ValidationError::DuplicateTensor { name } if name == w[0]),
                ))
            {
                errors.push(ValidationError::DuplicateTensor {
                    name: w[0].to_owned(),
                });
            }
        }
        let mut names: Vec<&str> = self.nodes().iter().map(|n| n.name.as_str()).collect();
        names.sort_unstable();
        for w in names.windows(2) {
            if w[0] == w[1]
                && (errors
                    .iter()
                    .all(|e| !matches!(e, ValidationError::DuplicateNode { name } if name == w[0])))
            {
                errors.push(ValidationError::DuplicateNode {
                    name: w[0].to_owned(),
                });
            }
        }
    }

    fn check_tensors(&self, errors: &mut Vec<ValidationError>) {
        for (id, t) in self.tensors().iter_enumerated() {
            if t.int_value.is_some() && t.kind != TensorKind::Weight {
                errors.push(ValidationError::ValueOnNonWeight {
                    tensor: id,
                    kind: t.kind,
                });
            }
            let mut symbolic = false;
            for d in t.shape.iter().chain(t.element_count.iter()) {
                for s in d.symbols() {
                    symbolic = true;
                    if self.symbols().get(s).is_none() {
                        errors.push(ValidationError::UnknownSymbol {
                            tensor: t.name.clone(),
                            symbol: s.to_string(),
                        });
                    }
                }
            }
            if symbolic {
                if t.elements_expr().is_err() {
                    errors.push(ValidationError::SizeOverflow { tensor: id });
                }
                continue;
            }
            match t.static_bytes() {
                Ok(_) | Err(SizeError::Unsized(_)) | Err(SizeError::Unbound(_)) => {}
                Err(SizeError::Overflow) => {
                    errors.push(ValidationError::SizeOverflow { tensor: id })
                }
                Err(SizeError::NegativeDim { dim, value }) => {
                    errors.push(ValidationError::NegativeDim {
                        tensor: id,
                        dim,
                        value,
                    })
                }
            }
        }
    }

    fn check_edges(&self, errors: &mut Vec<ValidationError>) {
        let mut producer: IndexVec<TensorId, Option<NodeId>> =
            IndexVec::from_elem(None, self.tensors().len());
        for (n, node) in self.nodes().iter_enumerated() {
            for &t in &node.outputs {
                let Some(tensor) = self.tensors().get(t) else {
                    errors.push(ValidationError::Dangling {
                        node: node.name.clone(),
                        role: "writes",
                        tensor: t.to_string(),
                    });
                    continue;
                };
                if matches!(tensor.kind, TensorKind::Input | TensorKind::Weight) {
                    errors.push(ValidationError::ProducesInput {
                        node: n,
                        tensor: t,
                        kind: tensor.kind,
                    });
                }
                match producer[t] {
                    // A node listing the same output twice is two producers too.
                    Some(first) => errors.push(ValidationError::TwoProducers {
                        tensor: t,
                        first,
                        second: n,
                    }),
                    None => producer[t] = Some(n),
                }
            }
        }
        for (n, node) in self.nodes().iter_enumerated() {
            let listed = node.inputs.iter().flatten().map(|&t| (t, "reads"));
            let implicit = node.implicit_inputs.iter().map(|&t| (t, "captures"));
            for (t, role) in listed.chain(implicit) {
                if self.tensors().get(t).is_none() {
                    errors.push(ValidationError::Dangling {
                        node: node.name.clone(),
                        role,
                        tensor: t.to_string(),
                    });
                    continue;
                }
                if let Some(p) = producer[t]
                    && p >= n
                {
                    errors.push(ValidationError::ReadBeforeProduced {
                        node: n,
                        tensor: t,
                        producer: p,
                    });
                }
            }
        }
        for (t, tensor) in self.tensors().iter_enumerated() {
            if matches!(tensor.kind, TensorKind::Activation | TensorKind::Output)
                && producer[t].is_none()
            {
                errors.push(ValidationError::NeverProduced {
                    tensor: t,
                    kind: tensor.kind,
                });
            }
        }
        if let Some(cycle) = self.find_cycle(&producer) {
            errors.push(ValidationError::Cycle { nodes: cycle });
        }
    }

    /// Declared data that contradicts an op's own parameters (a Split's `split` against its
    /// declared outputs). Only static shapes are compared.
    fn check_ops(&self, errors: &mut Vec<ValidationError>) {
        const SAME_ELEMENTS: &[&str] = &["Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"];
        for (n, node) in self
            .nodes()
            .iter_enumerated()
            .filter(|(_, n)| SAME_ELEMENTS.contains(&n.op.as_str()))
        {
            let x = node.inputs.first().copied().flatten();
            let y = node.outputs.first().copied();
            let (Some((xi, x)), Some((yi, y))) = (self.tensor_of(x), self.tensor_of(y)) else {
                continue;
            };
            let (Ok(xn), Ok(yn)) = (x.static_elements(), y.static_elements()) else {
                continue;
            };
            if xn != yn || x.dtype != y.dtype {
                errors.push(ValidationError::ElementsChanged {
                    node: n,
                    op: node.op.clone(),
                    input: xi,
                    input_elements: xn,
                    input_dtype: x.dtype,
                    output: yi,
                    output_elements: yn,
                    output_dtype: y.dtype,
                });
            }
        }
        for (n, node) in self
            .nodes()
            .iter_enumerated()
            .filter(|(_, n)| n.op == "Split")
        {
            let Some(in_dims) = node
                .inputs
                .first()
                .copied()
                .flatten()
                .and_then(|x| self.tensors().get(x))
                .and_then(Tensor::static_dims)
            else {
                continue;
            };
            let Some(lengths) = crate::semantics::split_lengths(self, node, &in_dims) else {
                continue;
            };
            let axis = node.attr("axis").and_then(crate::Attr::as_int).unwrap_or(0);
            let Some(axis) = crate::axis_index(axis, in_dims.len()) else {
                continue;
            };
            for i in 0..lengths.len().max(node.outputs.len()) {
                let expected = lengths.get(i).copied().unwrap_or(0);
                let out = self.tensor_of(node.outputs.get(i).copied());
                let declared = match out.map(|(_, t)| t.static_dims()) {
                    Some(Some(d)) => d.get(axis).copied().unwrap_or(0),
                    Some(None) => continue,
                    None => 0,
                };
                if expected != declared {
                    errors.push(ValidationError::SplitMismatch {
                        node: n,
                        output: out.map(|(id, _)| id),
                        position: i,
                        expected,
                        declared,
                    });
                }
            }
        }
    }

    /// Bodies: each valid on its own (inside this graph and `scopes`), with the enclosing
    /// graph's symbols; every value it captures from this graph listed among the node's
    /// implicit inputs, none captured past this graph, and no other input than those the op
    /// hands its body.
    fn check_bodies(&self, scopes: &[&Graph], errors: &mut Vec<ValidationError>) {
        let mut chain: Vec<&Graph> = scopes.to_vec();
        chain.push(self);
        for (n, node) in self.nodes().iter_enumerated() {
            for body in &node.bodies {
                let attr = &body.attr;
                if body.graph.symbols() != self.symbols() {
                    errors.push(ValidationError::BodySymbols {
                        node: n,
                        attr: attr.clone(),
                    });
                }
                if let Err(inner) = body.graph.validate_in(&chain) {
                    errors.extend(inner.errors.into_iter().map(|e| ValidationError::InBody {
                        node: n,
                        attr: attr.clone(),
                        error: Box::new(e),
                    }));
                }
                let mut formal = 0usize;
                for (id, t) in body.graph.tensors().iter_enumerated() {
                    if t.kind != TensorKind::Input {
                        continue;
                    }
                    if let Some(outer) = self.find_tensor(&t.name) {
                        if !node.implicit_inputs.contains(&outer) {
                            errors.push(ValidationError::UnlistedCapture {
                                node: n,
                                attr: attr.clone(),
                                tensor: id,
                            });
                        }
                    } else if scopes.iter().any(|g| g.find_tensor(&t.name).is_some()) {
                        errors.push(ValidationError::DeepCapture {
                            node: n,
                            attr: attr.clone(),
                            tensor: t.name.clone(),
                        });
                    } else {
                        formal += 1;
                        if formal_inputs(node).is_some_and(|most| formal > most) {
                            errors.push(ValidationError::UnknownBodyInput {
                                node: n,
                                op: node.op.clone(),
                                attr: attr.clone(),
                                tensor: id,
                                formal: formal_inputs(node).unwrap_or(0),
                            });
                        }
                    }
                }
            }
        }
    }

    /// Tensor `t` with its id, where `t` is some tensor of the graph.
    fn tensor_of(&self, t: Option<TensorId>) -> Option<(TensorId, &Tensor)> {
        let t = t?;
        Some((t, self.tensors().get(t)?))
    }

    /// One dependency cycle among the nodes, if there is any (iterative depth-first search).
    fn find_cycle(&self, producer: &IndexVec<TensorId, Option<NodeId>>) -> Option<Vec<NodeId>> {
        // Edges: node -> the producers of its inputs.
        let deps = |n: NodeId| -> Vec<NodeId> {
            let mut d: Vec<NodeId> = self.nodes()[n]
                .present_inputs()
                .filter_map(|t| producer.get(t).copied().flatten())
                .collect();
            d.sort_unstable();
            d.dedup();
            d
        };
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            New,
            Open,
            Done,
        }
        let mut mark = IndexVec::<NodeId, Mark>::from_elem(Mark::New, self.nodes().len());
        for root in self.nodes().ids() {
            if mark[root] != Mark::New {
                continue;
            }
            let mut stack: Vec<(NodeId, Vec<NodeId>, usize)> = vec![(root, deps(root), 0)];
            mark[root] = Mark::Open;
            while let Some((n, ds, i)) = stack.last_mut() {
                if let Some(&d) = ds.get(*i) {
                    *i += 1;
                    match mark[d] {
                        Mark::New => {
                            mark[d] = Mark::Open;
                            let dd = deps(d);
                            stack.push((d, dd, 0));
                        }
                        Mark::Open => {
                            // The cycle is the stack from `d` to the top, reversed so that
                            // each node comes before the one that depends on it.
                            let start = stack.iter().position(|(x, _, _)| *x == d).unwrap_or(0);
                            let mut cycle: Vec<NodeId> =
                                stack[start..].iter().map(|(x, _, _)| *x).collect();
                            cycle.reverse();
                            return Some(cycle);
                        }
                        Mark::Done => {}
                    }
                } else {
                    mark[*n] = Mark::Done;
                    stack.pop();
                }
            }
        }
        None
    }
}

/// How many inputs op `node` hands each of its bodies, where the ONNX definition says: If
/// none; Loop its iteration number, condition and carried values (one per node input);
/// Scan its states and one slice per scanned input (one per node input). `None` for other
/// ops with bodies.
fn formal_inputs(node: &crate::graph::Node) -> Option<usize> {
    match node.op.as_str() {
        "If" => Some(0),
        "Loop" | "Scan" => Some(node.inputs.len()),
        _ => None,
    }
}
