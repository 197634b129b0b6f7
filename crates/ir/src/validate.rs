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

use crate::entity::Names;
use crate::graph::{Graph, SizeError, Tensor, TensorKind};
use crate::ids::{IndexVec, NodeId, TensorId};

/// One problem found in a graph.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValidationError {
    /// The file could not be turned into a graph at all (syntax, types, missing fields).
    #[error("{0}")]
    Malformed(String),
    /// Two tensors share a name.
    #[error("tensor `{name}` is declared more than once")]
    DuplicateTensor {
        /// The repeated name.
        name: String,
    },
    /// Two nodes share a name.
    #[error("node `{name}` is declared more than once")]
    DuplicateNode {
        /// The repeated name.
        name: String,
    },
    /// A node names a tensor that does not exist.
    #[error("node `{node}` {role} `{tensor}`, which is not a tensor of the graph")]
    Dangling {
        /// The node.
        node: String,
        /// `reads` or `writes`.
        role: &'static str,
        /// The missing tensor name (or id).
        tensor: String,
    },
    /// Two nodes write the same tensor.
    #[error("tensor `{tensor}` is produced by both `{first}` and `{second}`")]
    TwoProducers {
        /// The tensor.
        tensor: String,
        /// The first producer in node order.
        first: String,
        /// A later producer.
        second: String,
    },
    /// A node writes a graph input or a weight.
    #[error("node `{node}` writes `{tensor}`, which is a graph {kind} and must not be produced")]
    ProducesInput {
        /// The node.
        node: String,
        /// The tensor.
        tensor: String,
        /// Its kind.
        kind: TensorKind,
    },
    /// A node reads a tensor that its producer writes only later in node order.
    #[error("node `{node}` reads `{tensor}` before its producer `{producer}` runs")]
    ReadBeforeProduced {
        /// The reading node.
        node: String,
        /// The tensor.
        tensor: String,
        /// Its producer, later in node order.
        producer: String,
    },
    /// Nodes that depend on each other in a cycle.
    #[error("cycle through nodes {}", .nodes.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(" -> "))]
    Cycle {
        /// The nodes of one cycle, in dependency order.
        nodes: Vec<String>,
    },
    /// An activation or output that no node produces.
    #[error("{kind} `{tensor}` is never produced by any node")]
    NeverProduced {
        /// The tensor.
        tensor: String,
        /// Its kind.
        kind: TensorKind,
    },
    /// A shape uses a symbol the graph does not declare.
    #[error("tensor `{tensor}` uses unknown symbol `{symbol}`")]
    UnknownSymbol {
        /// The tensor.
        tensor: String,
        /// The symbol.
        symbol: String,
    },
    /// A tensor's size does not fit in `u64`.
    #[error("tensor `{tensor}`: size overflows 64 bits")]
    SizeOverflow {
        /// The tensor.
        tensor: String,
    },
    /// A static dimension is negative.
    #[error("tensor `{tensor}`: dimension {dim} is negative ({value})")]
    NegativeDim {
        /// The tensor.
        tensor: String,
        /// The dimension's position.
        dim: usize,
        /// Its value.
        value: i64,
    },
    /// A constant value on a tensor that is not a weight: only weights (initializers and
    /// constants) have values known before the run.
    #[error("{kind} `{tensor}` has a constant value, but only weights may have one")]
    ValueOnNonWeight {
        /// The tensor.
        tensor: String,
        /// Its kind.
        kind: TensorKind,
    },
    /// A Split whose declared output disagrees with the chunk its own parameters give.
    #[error(
        "Split `{node}`: output `{output}` is declared with {declared} along the axis, but the op's parameters give {expected}"
    )]
    SplitMismatch {
        /// The node.
        node: String,
        /// The output (or `output N` when the node has fewer outputs than chunks).
        output: String,
        /// The length its parameters give (0 for a missing chunk).
        expected: u64,
        /// The declared length (0 for a missing output).
        declared: u64,
    },
    /// An op that keeps every element of its input (Reshape, Flatten, Squeeze, Unsqueeze,
    /// Identity) declared with an output of another element count or dtype.
    #[error(
        "{op} `{node}`: output `{output}` has {output_elements} {output_dtype} elements but input `{input}` has {input_elements} {input_dtype}"
    )]
    ElementsChanged {
        /// The node.
        node: String,
        /// Its op.
        op: String,
        /// Its data input.
        input: String,
        /// Elements of the input.
        input_elements: u64,
        /// The input's dtype.
        input_dtype: crate::DType,
        /// Its output.
        output: String,
        /// Elements of the output.
        output_elements: u64,
        /// The output's dtype.
        output_dtype: crate::DType,
    },
    /// A problem inside a body graph of a node.
    #[error("node `{node}`, body `{attr}`: {error}")]
    InBody {
        /// The node that runs the body.
        node: String,
        /// The attribute holding the body.
        attr: String,
        /// The problem in the body.
        error: Box<ValidationError>,
    },
    /// A body whose symbols are not its enclosing graph's.
    #[error("node `{node}`, body `{attr}`: its symbols differ from the enclosing graph's")]
    BodySymbols {
        /// The node.
        node: String,
        /// The attribute holding the body.
        attr: String,
    },
    /// A body captures a value of the enclosing graph that the node does not list among its
    /// implicit inputs, so the value could die before the node runs.
    #[error(
        "node `{node}`: body `{attr}` captures `{tensor}`, which is not among the node's implicit inputs"
    )]
    UnlistedCapture {
        /// The node.
        node: String,
        /// The attribute holding the body.
        attr: String,
        /// The captured tensor.
        tensor: String,
    },
    /// A `bytes` field that disagrees with dtype and shape.
    #[error("tensor `{tensor}`: bytes is {declared} but dtype and shape give {computed}")]
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
    #[error(
        "node `{node}`: body `{attr}` captures `{tensor}` from an outer graph, but this graph does not have `{tensor}`: list it as an input of every body in between and among each node's implicit inputs"
    )]
    DeepCapture {
        /// The node.
        node: String,
        /// The attribute holding the body.
        attr: String,
        /// The captured tensor.
        tensor: String,
    },
    /// A body input that names no value of an enclosing graph and is not one of the inputs
    /// the op hands its body (If has none; a Loop hands its iteration number, condition and
    /// carried values; a Scan its states and scanned slices).
    #[error(
        "{op} `{node}`: body `{attr}` has input `{tensor}`, which is neither one of the {formal} inputs the op hands its body nor a value of an enclosing graph"
    )]
    UnknownBodyInput {
        /// The node.
        node: String,
        /// Its op.
        op: String,
        /// The attribute holding the body.
        attr: String,
        /// The input.
        tensor: String,
        /// How many inputs the op hands its body.
        formal: usize,
    },
    /// A tensor with an empty name (an empty name marks an absent optional input).
    #[error("tensor {index} has an empty name (an empty name marks an absent optional input)")]
    EmptyName {
        /// Its position in the tensor list.
        index: usize,
    },
    /// An attribute or constant parameter the op's definition does not allow.
    #[error("{op} `{node}`: {reason}")]
    BadParameter {
        /// The node.
        node: String,
        /// Its op.
        op: String,
        /// What is wrong, naming the attribute.
        reason: String,
    },
    /// An output declared with a shape the op cannot make from its inputs.
    #[error(
        "{op} `{node}`: output `{output}` is declared {declared}, but its inputs give {expected}"
    )]
    WrongShape {
        /// The node.
        node: String,
        /// Its op.
        op: String,
        /// The output.
        output: String,
        /// The declared shape, as `[d0, d1, ...]`.
        declared: String,
        /// What the inputs give (dims that cannot be told are `?`).
        expected: String,
    },
}

/// Every problem found in a graph, in a deterministic order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidationErrors(pub Vec<ValidationError>);

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        write!(f, "{n} problem{}:", if n == 1 { "" } else { "s" })?;
        for e in &self.0 {
            write!(f, "\n  - {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ValidationErrors {}

impl Graph {
    /// Checks the graph and returns every problem found, in a deterministic order (by check,
    /// then by node or tensor order), each naming its tensor or node. A graph that validates
    /// has unique names, ids that exist, at most one producer per tensor, every read after its
    /// producer in node order (no cycle), every activation and output produced, every symbol
    /// declared, and bodies that validate on their own.
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        self.validate_in(&[])
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
            Err(ValidationErrors(errors))
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
        for t in self.tensors().iter() {
            if t.int_value.is_some() && t.kind != TensorKind::Weight {
                errors.push(ValidationError::ValueOnNonWeight {
                    tensor: t.name.clone(),
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
                    errors.push(ValidationError::SizeOverflow {
                        tensor: t.name.clone(),
                    });
                }
                continue;
            }
            match t.static_bytes() {
                Ok(_) | Err(SizeError::Unsized(_)) | Err(SizeError::Unbound(_)) => {}
                Err(SizeError::Overflow) => errors.push(ValidationError::SizeOverflow {
                    tensor: t.name.clone(),
                }),
                Err(SizeError::NegativeDim { dim, value }) => {
                    errors.push(ValidationError::NegativeDim {
                        tensor: t.name.clone(),
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
                        node: node.name.clone(),
                        tensor: tensor.name.clone(),
                        kind: tensor.kind,
                    });
                }
                match producer[t] {
                    // A node listing the same output twice is two producers too.
                    Some(first) => errors.push(ValidationError::TwoProducers {
                        tensor: tensor.name.clone(),
                        first: self.nodes()[first].name.clone(),
                        second: node.name.clone(),
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
                        node: node.name.clone(),
                        tensor: Names::of(self).name(t).to_string(),
                        producer: self.nodes()[p].name.clone(),
                    });
                }
            }
        }
        for (t, tensor) in self.tensors().iter_enumerated() {
            if matches!(tensor.kind, TensorKind::Activation | TensorKind::Output)
                && producer[t].is_none()
            {
                errors.push(ValidationError::NeverProduced {
                    tensor: tensor.name.clone(),
                    kind: tensor.kind,
                });
            }
        }
        if let Some(cycle) = self.find_cycle(&producer) {
            errors.push(ValidationError::Cycle {
                nodes: cycle
                    .into_iter()
                    .map(|n| self.nodes()[n].name.clone())
                    .collect(),
            });
        }
    }

    /// Declared data that contradicts an op's own parameters (a Split's `split` against its
    /// declared outputs). Only static shapes are compared.
    fn check_ops(&self, errors: &mut Vec<ValidationError>) {
        const SAME_ELEMENTS: &[&str] = &["Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"];
        for node in self
            .nodes()
            .iter()
            .filter(|n| SAME_ELEMENTS.contains(&n.op.as_str()))
        {
            let x = node
                .inputs
                .first()
                .copied()
                .flatten()
                .and_then(|x| self.tensors().get(x));
            let y = node.outputs.first().and_then(|&y| self.tensors().get(y));
            let (Some(x), Some(y)) = (x, y) else { continue };
            let (Ok(xn), Ok(yn)) = (x.static_elements(), y.static_elements()) else {
                continue;
            };
            if xn != yn || x.dtype != y.dtype {
                errors.push(ValidationError::ElementsChanged {
                    node: node.name.clone(),
                    op: node.op.clone(),
                    input: x.name.clone(),
                    input_elements: xn,
                    input_dtype: x.dtype,
                    output: y.name.clone(),
                    output_elements: yn,
                    output_dtype: y.dtype,
                });
            }
        }
        for node in self.nodes().iter().filter(|n| n.op == "Split") {
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
                let out = node.outputs.get(i).and_then(|&y| self.tensors().get(y));
                let declared = match out.map(|t| t.static_dims()) {
                    Some(Some(d)) => d.get(axis).copied().unwrap_or(0),
                    Some(None) => continue,
                    None => 0,
                };
                if expected != declared {
                    errors.push(ValidationError::SplitMismatch {
                        node: node.name.clone(),
                        output: out.map_or_else(|| format!("output {i}"), |t| t.name.clone()),
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
        for node in self.nodes().iter() {
            for body in &node.bodies {
                let (node_name, attr) = (&node.name, &body.attr);
                if body.graph.symbols() != self.symbols() {
                    errors.push(ValidationError::BodySymbols {
                        node: node_name.clone(),
                        attr: attr.clone(),
                    });
                }
                if let Err(ValidationErrors(inner)) = body.graph.validate_in(&chain) {
                    errors.extend(inner.into_iter().map(|e| ValidationError::InBody {
                        node: node_name.clone(),
                        attr: attr.clone(),
                        error: Box::new(e),
                    }));
                }
                let mut formal = 0usize;
                for t in body.graph.tensors().iter() {
                    if t.kind != TensorKind::Input {
                        continue;
                    }
                    if let Some(outer) = self.find_tensor(&t.name) {
                        if !node.implicit_inputs.contains(&outer) {
                            errors.push(ValidationError::UnlistedCapture {
                                node: node_name.clone(),
                                attr: attr.clone(),
                                tensor: t.name.clone(),
                            });
                        }
                    } else if scopes.iter().any(|g| g.find_tensor(&t.name).is_some()) {
                        errors.push(ValidationError::DeepCapture {
                            node: node_name.clone(),
                            attr: attr.clone(),
                            tensor: t.name.clone(),
                        });
                    } else {
                        formal += 1;
                        if formal_inputs(node).is_some_and(|most| formal > most) {
                            errors.push(ValidationError::UnknownBodyInput {
                                node: node_name.clone(),
                                op: node.op.clone(),
                                attr: attr.clone(),
                                tensor: t.name.clone(),
                                formal: formal_inputs(node).unwrap_or(0),
                            });
                        }
                    }
                }
            }
        }
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
