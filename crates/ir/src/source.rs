//! An engine's own graph, read through a trait: no ONNX op names, memory semantics declared
//! by the engine, and the map between the engine's ids and memplan's.
//!
//! [`GraphSource`]'s docs say what an engine declares and how it is read.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use smallvec::SmallVec;

use crate::dim::{Bindings, Expr, ParseExprError};
use crate::dtype::DType;
use crate::graph::{Attr, Graph, Node, Tensor, TensorKind};
use crate::ids::{IndexVec, NodeId, TensorId};
use crate::semantics::{MemorySemantics, OpRule, OpTable};
use crate::validate::ValidationErrors;

/// The node attribute that carries a node's declared memory semantics.
pub const SEMANTICS_ATTR: &str = "memplan.semantics";

/// The prefix of an imported node's op type (`engine.matmul`).
pub const ENGINE_DOMAIN: &str = "engine.";

/// One dimension of a declared shape: a number, or an expression over named symbols
/// (`batch`, `2*seq+1`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Dim {
    /// A fixed size.
    Fixed(u64),
    /// An expression over symbols, in the graph format's syntax.
    Expr(String),
}

impl From<u64> for Dim {
    fn from(v: u64) -> Dim {
        Dim::Fixed(v)
    }
}

impl From<usize> for Dim {
    /// An engine's `usize` dimension (its shapes' usual type).
    fn from(v: usize) -> Dim {
        Dim::Fixed(v as u64)
    }
}

impl From<u32> for Dim {
    fn from(v: u32) -> Dim {
        Dim::Fixed(u64::from(v))
    }
}

impl From<&str> for Dim {
    fn from(v: &str) -> Dim {
        Dim::Expr(v.to_owned())
    }
}

impl From<String> for Dim {
    fn from(v: String) -> Dim {
        Dim::Expr(v)
    }
}

/// What an engine says about one of its tensors.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TensorDecl<'a> {
    /// Its name (names the tensor in plans, snapshots and errors).
    pub name: Cow<'a, str>,
    /// Its element type.
    pub dtype: DType,
    /// Its dimensions.
    pub shape: Vec<Dim>,
    /// Its role: fed by the caller, read by the caller, a weight, or made and used inside.
    pub kind: TensorKind,
}

impl<'a> TensorDecl<'a> {
    /// A tensor called `name` of `dtype` and `shape`, playing `kind`.
    pub fn new(
        name: impl Into<Cow<'a, str>>,
        dtype: DType,
        shape: impl IntoIterator<Item = impl Into<Dim>>,
        kind: TensorKind,
    ) -> TensorDecl<'a> {
        TensorDecl {
            name: name.into(),
            dtype,
            shape: shape.into_iter().map(Into::into).collect(),
            kind,
        }
    }
}

/// What an engine says about one of its nodes: per output, what it may share with an input
/// ([`MemorySemantics`], kept only where the sizes allow it), the inputs it writes while they
/// stay live, and the scratch bytes its kernel needs while it runs.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeDecl<'a, T> {
    /// Its name.
    pub name: Cow<'a, str>,
    /// Its op, in the engine's own words (a label: it decides nothing).
    pub op: Cow<'a, str>,
    /// The tensors it reads, in order.
    pub inputs: Vec<T>,
    /// The tensors it writes, in order.
    pub outputs: Vec<T>,
    /// Per output, what it may share with an input (missing entries are opaque).
    pub memory: Vec<MemorySemantics>,
    /// Positions of the inputs it writes while they stay live.
    pub mutates: Vec<usize>,
    /// Scratch bytes its kernel needs while it runs (0: none).
    pub scratch: u64,
}

impl<'a, T> NodeDecl<'a, T> {
    /// A node called `name` running `op`, reading `inputs` and writing `outputs`, every
    /// output opaque.
    pub fn new(
        name: impl Into<Cow<'a, str>>,
        op: impl Into<Cow<'a, str>>,
        inputs: impl IntoIterator<Item = T>,
        outputs: impl IntoIterator<Item = T>,
    ) -> NodeDecl<'a, T> {
        NodeDecl {
            name: name.into(),
            op: op.into(),
            inputs: inputs.into_iter().collect(),
            outputs: outputs.into_iter().collect(),
            memory: Vec::new(),
            mutates: Vec::new(),
            scratch: 0,
        }
    }

    fn set(mut self, output: usize, m: MemorySemantics) -> Self {
        if self.memory.len() <= output {
            self.memory.resize(output + 1, MemorySemantics::Opaque);
        }
        self.memory[output] = m;
        self
    }

    /// Output `output` is the bytes of input `input` from byte `offset` (a view).
    pub fn view(self, output: usize, input: usize, offset: u64) -> Self {
        self.set(output, MemorySemantics::View { input, offset })
    }

    /// Output `output` may be written over any of `inputs` (positions, in order of
    /// preference) once nothing else reads it.
    pub fn in_place(self, output: usize, inputs: &[usize]) -> Self {
        self.set(
            output,
            MemorySemantics::InPlace {
                inputs: inputs.iter().copied().collect(),
            },
        )
    }

    /// The node writes the inputs at `positions` while they stay live.
    pub fn mutating(mut self, positions: &[usize]) -> Self {
        self.mutates = positions.to_vec();
        self
    }

    /// The node's kernel needs `bytes` of scratch while it runs.
    pub fn with_scratch(mut self, bytes: u64) -> Self {
        self.scratch = bytes;
        self
    }
}

/// An engine with an IR of its own implements [`GraphSource`] over it (as regalloc2 reads a
/// client's function through its `Function` trait): its tensors (name, dtype, shape, role)
/// and its nodes in execution order (inputs, outputs, and what each output may share with an
/// input). [`import`] reads it into a [`Graph`] and returns, in an [`Imported`], the graph,
/// the op rules that state exactly what the engine declared (an [`OpTable`] that knows no
/// other op), and the id map both ways. Nothing is decided by an op's name: each node's op
/// becomes `engine.<op>`, a name no built-in rule has, and its declared semantics travel
/// with the node (attribute [`SEMANTICS_ATTR`]), read back by one rule.
///
/// What an engine declares per node ([`NodeDecl`]):
/// - per output, [`MemorySemantics`]: opaque (its own bytes), a view of input `i` from byte
///   `offset` (a reshape, a contiguous slice), or in place over one of some inputs (an
///   elementwise kernel that may write over a dead input). The rule keeps a declaration only
///   where the sizes allow it (a view inside its input, an in-place output of its input's
///   bytes) and makes the output opaque otherwise, so a wrong declaration costs memory, never
///   correctness;
/// - the inputs the op writes while they stay live (a KV-cache append, an optimizer step);
/// - scratch bytes the kernel needs while it runs: an extra output `<node>.scratch` that no
///   node reads, so it lives for that node's step only ([`Imported::scratch`]).
///
/// Shapes may be symbolic (`"batch"`, `"2*seq+1"`): the symbols are created by name.
pub trait GraphSource {
    /// The engine's tensor handle.
    type Tensor: Copy + Eq + Hash + fmt::Debug;
    /// The engine's node handle.
    type Node: Copy + Eq + Hash + fmt::Debug;

    /// The graph's name.
    fn name(&self) -> Cow<'_, str>;
    /// Every tensor (memplan's ids follow this order).
    fn tensors(&self) -> impl Iterator<Item = Self::Tensor> + '_;
    /// What tensor `t` is.
    fn tensor(&self, t: Self::Tensor) -> TensorDecl<'_>;
    /// Every node, in execution order.
    fn nodes(&self) -> impl Iterator<Item = Self::Node> + '_;
    /// What node `n` does.
    fn node(&self, n: Self::Node) -> NodeDecl<'_, Self::Tensor>;
}

/// Why an engine's graph cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// Two tensors of the engine map to one handle.
    #[error("tensor {0} is listed twice")]
    DuplicateTensor(String),
    /// Two nodes of the engine map to one handle.
    #[error("node {0} is listed twice")]
    DuplicateNode(String),
    /// A node reads or writes a tensor the graph does not list.
    #[error("node `{node}` uses tensor {tensor}, which the graph does not list")]
    UnknownTensor {
        /// The node.
        node: String,
        /// The engine's handle of the tensor.
        tensor: String,
    },
    /// A dimension that does not parse.
    #[error("tensor `{tensor}`: {error}")]
    BadDim {
        /// The tensor.
        tensor: String,
        /// Why.
        error: ParseExprError,
    },
    /// A dimension too large for the graph format.
    #[error("tensor `{tensor}`: dimension {dim} is too large")]
    DimTooLarge {
        /// The tensor.
        tensor: String,
        /// The dimension.
        dim: u64,
    },
    /// A declaration that names an input or output the node does not have.
    #[error("node `{node}`: {reason}")]
    BadDeclaration {
        /// The node.
        node: String,
        /// What is wrong.
        reason: String,
    },
    /// Two nodes of one op declare different mutated inputs (a mutation belongs to the op).
    #[error(
        "op `{op}` is declared to write inputs {first:?} on one node and {second:?} on another"
    )]
    MutationsDiffer {
        /// The op.
        op: String,
        /// One node's positions.
        first: Vec<usize>,
        /// Another's.
        second: Vec<usize>,
    },
    /// The graph read is not a valid graph.
    #[error("the graph is not valid: {0}")]
    Invalid(ValidationErrors),
}

/// An engine's graph read into memplan's, with the op rules it declared and the id map.
#[derive(Clone, Debug)]
pub struct Imported<T, N> {
    graph: Graph,
    op_table: OpTable,
    tensor_ids: HashMap<T, TensorId>,
    tensors: IndexVec<TensorId, Option<T>>,
    node_ids: HashMap<N, NodeId>,
    nodes: IndexVec<NodeId, N>,
    scratch: IndexVec<NodeId, Option<TensorId>>,
}

impl<T: Copy + Eq + Hash, N: Copy + Eq + Hash> Imported<T, N> {
    /// The graph.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The op rules: the engine's declarations, and nothing else (pass them to the planner
    /// as its `op_table`).
    pub fn op_table(&self) -> &OpTable {
        &self.op_table
    }

    /// memplan's id of the engine's tensor `t`.
    pub fn tensor_id(&self, t: T) -> Option<TensorId> {
        self.tensor_ids.get(&t).copied()
    }

    /// The engine's tensor of memplan's id `id` (`None` for a scratch tensor memplan made).
    pub fn tensor_of(&self, id: TensorId) -> Option<T> {
        self.tensors.get(id).copied().flatten()
    }

    /// memplan's id of the engine's node `n`.
    pub fn node_id(&self, n: N) -> Option<NodeId> {
        self.node_ids.get(&n).copied()
    }

    /// The engine's node of memplan's id `id`.
    pub fn node_of(&self, id: NodeId) -> Option<N> {
        self.nodes.get(id).copied()
    }

    /// The scratch tensor of the engine's node `n`, if it declared scratch.
    pub fn scratch(&self, n: N) -> Option<TensorId> {
        self.scratch.get(self.node_id(n)?).copied().flatten()
    }
}

/// Reads an engine's graph: a [`Graph`] whose nodes run `engine.<op>` with the declared
/// semantics, the [`OpTable`] that states them and no other rule, and the id map both ways.
/// Scratch becomes an output `<node>.scratch` that no node reads.
pub fn import<S: GraphSource>(src: &S) -> Result<Imported<S::Tensor, S::Node>, ImportError> {
    let mut graph = Graph::new(src.name());
    let mut tensor_ids = HashMap::new();
    let mut tensors: IndexVec<TensorId, Option<S::Tensor>> = IndexVec::new();
    let mut outputs = Vec::new();
    for t in src.tensors() {
        let decl = src.tensor(t);
        let mut shape = SmallVec::new();
        for d in &decl.shape {
            shape.push(dim_expr(&mut graph, &decl.name, d)?);
        }
        let id = graph.add_tensor(Tensor {
            name: decl.name.into_owned(),
            dtype: decl.dtype,
            shape,
            kind: decl.kind,
            int_value: None,
            element_count: None,
        });
        if decl.kind == TensorKind::Output {
            outputs.push(id);
        }
        if tensor_ids.insert(t, id).is_some() {
            return Err(ImportError::DuplicateTensor(format!("{t:?}")));
        }
        tensors.push(Some(t));
    }
    graph.set_output_order(outputs);

    let rule = OpRule::Custom(Arc::new(declared_rule));
    let mut op_table = OpTable::empty();
    let mut mutations: HashMap<String, Vec<usize>> = HashMap::new();
    let mut node_ids = HashMap::new();
    let mut nodes: IndexVec<NodeId, S::Node> = IndexVec::new();
    let mut scratch: IndexVec<NodeId, Option<TensorId>> = IndexVec::new();
    for n in src.nodes() {
        let decl = src.node(n);
        let name = decl.name.into_owned();
        let op = format!("{ENGINE_DOMAIN}{}", decl.op);
        let lookup = |t: S::Tensor| {
            tensor_ids
                .get(&t)
                .copied()
                .ok_or_else(|| ImportError::UnknownTensor {
                    node: name.clone(),
                    tensor: format!("{t:?}"),
                })
        };
        let inputs: Vec<Option<TensorId>> = decl
            .inputs
            .iter()
            .map(|&t| lookup(t).map(Some))
            .collect::<Result<_, _>>()?;
        let mut outs: Vec<TensorId> = decl
            .outputs
            .iter()
            .map(|&t| lookup(t))
            .collect::<Result<_, _>>()?;
        let code = encode(&name, &decl.memory, decl.outputs.len(), inputs.len())?;
        if let Some(&bad) = decl.mutates.iter().find(|&&p| p >= inputs.len()) {
            return Err(ImportError::BadDeclaration {
                node: name,
                reason: format!("it writes input {bad} of {}", inputs.len()),
            });
        }
        match mutations.get(&op) {
            Some(first) if *first != decl.mutates => {
                return Err(ImportError::MutationsDiffer {
                    op: decl.op.into_owned(),
                    first: first.clone(),
                    second: decl.mutates,
                });
            }
            Some(_) => {}
            None => {
                if !decl.mutates.is_empty() {
                    op_table.insert_mutation(&op, &decl.mutates);
                }
                mutations.insert(op.clone(), decl.mutates.clone());
            }
        }
        let scratch_id = (decl.scratch > 0)
            .then(|| {
                let bytes = i64::try_from(decl.scratch).map_err(|_| ImportError::DimTooLarge {
                    tensor: format!("{name}.scratch"),
                    dim: decl.scratch,
                })?;
                let id = graph.add_tensor(Tensor {
                    name: format!("{name}.scratch"),
                    dtype: DType::U8,
                    shape: [Expr::constant(bytes)].into_iter().collect(),
                    kind: TensorKind::Activation,
                    int_value: None,
                    element_count: None,
                });
                tensors.push(None);
                Ok(id)
            })
            .transpose()?;
        outs.extend(scratch_id);
        op_table.insert(&op, rule.clone());
        let mut node = Node::new(name, &op, inputs, outs);
        node.attrs
            .push((SEMANTICS_ATTR.to_owned(), Attr::Ints(code)));
        let id = graph.add_node(node);
        if node_ids.insert(n, id).is_some() {
            return Err(ImportError::DuplicateNode(format!("{n:?}")));
        }
        nodes.push(n);
        scratch.push(scratch_id);
    }
    graph.validate().map_err(ImportError::Invalid)?;
    Ok(Imported {
        graph,
        op_table,
        tensor_ids,
        tensors,
        node_ids,
        nodes,
        scratch,
    })
}

fn dim_expr(graph: &mut Graph, tensor: &str, d: &Dim) -> Result<Expr, ImportError> {
    match d {
        &Dim::Fixed(v) => {
            i64::try_from(v)
                .map(Expr::constant)
                .map_err(|_| ImportError::DimTooLarge {
                    tensor: tensor.to_owned(),
                    dim: v,
                })
        }
        Dim::Expr(text) => {
            Expr::parse(text, |name| Ok(graph.symbol(name))).map_err(|error| ImportError::BadDim {
                tensor: tensor.to_owned(),
                error,
            })
        }
    }
}

/// The declared semantics as the attribute's integers: per output, `0` (opaque), `1 input
/// offset` (a view), or `2 count input...` (in place).
fn encode(
    node: &str,
    memory: &[MemorySemantics],
    outputs: usize,
    inputs: usize,
) -> Result<Vec<i64>, ImportError> {
    let bad = |reason: String| ImportError::BadDeclaration {
        node: node.to_owned(),
        reason,
    };
    if memory.len() > outputs {
        return Err(bad(format!(
            "it declares the memory of {} outputs and has {outputs}",
            memory.len()
        )));
    }
    let position = |i: usize| {
        if i < inputs {
            Ok(i as i64)
        } else {
            Err(bad(format!("it names input {i} of {inputs}")))
        }
    };
    let mut code = Vec::new();
    for m in memory {
        match m {
            MemorySemantics::Opaque => code.push(0),
            MemorySemantics::View { input, offset } => {
                let offset = i64::try_from(*offset)
                    .map_err(|_| bad(format!("view offset {offset} is too large")))?;
                code.extend([1, position(*input)?, offset]);
            }
            MemorySemantics::InPlace { inputs: c } => {
                code.extend([2, c.len() as i64]);
                for &i in c {
                    code.push(position(i)?);
                }
            }
        }
    }
    Ok(code)
}

/// The rule every imported op has: the semantics its node declared, each kept only where
/// the sizes allow it (a view inside its input, an in-place output of its input's bytes).
fn declared_rule(graph: &Graph, node: &Node, b: &Bindings) -> Vec<MemorySemantics> {
    let code = match node.attr(SEMANTICS_ATTR) {
        Some(Attr::Ints(v)) => v.as_slice(),
        _ => &[],
    };
    let bytes = |t: Option<TensorId>| graph.tensors().get(t?)?.bytes(b).ok();
    let input = |i: i64| {
        usize::try_from(i)
            .ok()
            .and_then(|i| node.inputs.get(i).copied().flatten())
    };
    let mut out = Vec::with_capacity(node.outputs.len());
    let mut rest = code;
    // The scratch output, past the declared ones, finds no code and stays opaque.
    for &o in &node.outputs {
        let out_bytes = bytes(Some(o));
        let m = match rest {
            [0, tail @ ..] => {
                rest = tail;
                MemorySemantics::Opaque
            }
            [1, i, offset, tail @ ..] => {
                rest = tail;
                let fits = out_bytes
                    .zip(bytes(input(*i)))
                    .zip(u64::try_from(*offset).ok())
                    .is_some_and(|((o, x), off)| off.checked_add(o).is_some_and(|e| e <= x));
                match (fits, usize::try_from(*i), u64::try_from(*offset)) {
                    (true, Ok(input), Ok(offset)) => MemorySemantics::View { input, offset },
                    _ => MemorySemantics::Opaque,
                }
            }
            [2, n, tail @ ..] => {
                let n = usize::try_from(*n).unwrap_or(0).min(tail.len());
                let (cands, tail) = tail.split_at(n);
                rest = tail;
                let inputs: SmallVec<[usize; 2]> = cands
                    .iter()
                    .filter(|&&i| out_bytes.is_some() && bytes(input(i)) == out_bytes)
                    .filter_map(|&i| usize::try_from(i).ok())
                    .collect();
                if inputs.is_empty() {
                    MemorySemantics::Opaque
                } else {
                    MemorySemantics::InPlace { inputs }
                }
            }
            _ => {
                rest = &[];
                MemorySemantics::Opaque
            }
        };
        out.push(m);
    }
    out
}
