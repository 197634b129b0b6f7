//! A builder for writing graphs in Rust.
//!
//! ```
//! use memplan_ir::{DType, Expr, GraphBuilder};
//!
//! let mut b = GraphBuilder::new("mlp");
//! let batch = Expr::symbol(b.symbol("batch"));
//! let x = b.input("x", DType::F32, [batch.clone(), Expr::constant(784)]);
//! let w = b.weight("w", DType::F32, [784, 128]);
//! let h = b.op("MatMul", &[x, w], DType::F32, [batch.clone(), Expr::constant(128)]);
//! let y = b.op("Relu", &[h], DType::F32, [batch, Expr::constant(128)]);
//! b.mark_output(y);
//! let graph = b.build().unwrap();
//! assert_eq!(graph.nodes().len(), 2);
//! ```

use crate::dim::Expr;
use crate::dtype::DType;
use crate::graph::{Attr, Body, Graph, Node, Shape, Tensor, TensorKind};
use crate::ids::{NodeId, SymbolId, TensorId};
use crate::validate::ValidationErrors;

/// Things that convert into a [`Shape`]: arrays and slices of integers or [`Expr`]s.
pub trait IntoShape {
    /// The shape.
    fn into_shape(self) -> Shape;
}

impl<const N: usize> IntoShape for [i64; N] {
    fn into_shape(self) -> Shape {
        self.iter().map(|&d| Expr::constant(d)).collect()
    }
}

impl IntoShape for &[i64] {
    fn into_shape(self) -> Shape {
        self.iter().map(|&d| Expr::constant(d)).collect()
    }
}

impl<const N: usize> IntoShape for [Expr; N] {
    fn into_shape(self) -> Shape {
        self.into_iter().collect()
    }
}

impl IntoShape for Vec<Expr> {
    fn into_shape(self) -> Shape {
        self.into_iter().collect()
    }
}

impl IntoShape for Shape {
    fn into_shape(self) -> Shape {
        self
    }
}

impl From<SymbolId> for Expr {
    fn from(s: SymbolId) -> Expr {
        Expr::symbol(s)
    }
}

/// Builds a [`Graph`] node by node; [`GraphBuilder::build`] validates it.
#[derive(Debug)]
pub struct GraphBuilder {
    graph: Graph,
}

impl GraphBuilder {
    /// A builder for a graph called `name`.
    pub fn new(name: impl Into<String>) -> GraphBuilder {
        GraphBuilder {
            graph: Graph::new(name),
        }
    }

    /// The symbol called `name`, created if new.
    pub fn symbol(&mut self, name: &str) -> SymbolId {
        self.graph.symbol(name)
    }

    /// Adds a tensor of any kind.
    pub fn tensor(
        &mut self,
        name: impl Into<String>,
        dtype: DType,
        shape: impl IntoShape,
        kind: TensorKind,
    ) -> TensorId {
        self.graph.add_tensor(Tensor {
            name: name.into(),
            dtype,
            shape: shape.into_shape(),
            kind,
            int_value: None,
            element_count: None,
        })
    }

    /// Adds a graph input.
    pub fn input(
        &mut self,
        name: impl Into<String>,
        dtype: DType,
        shape: impl IntoShape,
    ) -> TensorId {
        self.tensor(name, dtype, shape, TensorKind::Input)
    }

    /// Adds a weight (initializer).
    pub fn weight(
        &mut self,
        name: impl Into<String>,
        dtype: DType,
        shape: impl IntoShape,
    ) -> TensorId {
        self.tensor(name, dtype, shape, TensorKind::Weight)
    }

    /// Adds a small integer constant with known values (a weight).
    pub fn int_constant(&mut self, name: impl Into<String>, values: &[i64]) -> TensorId {
        let t = self.tensor(name, DType::I64, [values.len() as i64], TensorKind::Weight);
        self.graph.set_int_value(t, Some(values.to_vec()));
        t
    }

    /// Adds a node with explicit outputs (already added as activations or outputs).
    pub fn node(
        &mut self,
        name: impl Into<String>,
        op: &str,
        inputs: &[Option<TensorId>],
        outputs: &[TensorId],
    ) -> NodeId {
        self.graph
            .add_node(Node::new(name, op, inputs.to_vec(), outputs.to_vec()))
    }

    /// Adds a one-output node named `n<node id>_<op>` whose output is a new activation
    /// `t<tensor id>_<op>`; returns the output. The numbers are the ids, so the name
    /// `t2_Softmax` is always the tensor [`TensorId`] `t2` (the spelling of ids in an error
    /// rendered without a graph), never another one.
    pub fn op(
        &mut self,
        op: &str,
        inputs: &[TensorId],
        dtype: DType,
        shape: impl IntoShape,
    ) -> TensorId {
        let t = self.graph.tensors().len();
        let n = self.graph.nodes().len();
        let out = self.tensor(format!("t{t}_{op}"), dtype, shape, TensorKind::Activation);
        let ins: Vec<Option<TensorId>> = inputs.iter().copied().map(Some).collect();
        let node = self.node(format!("n{n}_{op}"), op, &ins, &[out]);
        debug_assert_eq!((out.index(), node.index()), (t, n));
        out
    }

    /// Adds a one-output node called `name` whose output, a new activation, is called `name`
    /// too; returns the output. Unlike [`GraphBuilder::op`]'s numbered names, these stay the
    /// same when a node is added elsewhere: what a plan's snapshot should show.
    pub fn named_op(
        &mut self,
        name: &str,
        op: &str,
        inputs: &[TensorId],
        dtype: DType,
        shape: impl IntoShape,
    ) -> TensorId {
        let out = self.tensor(name, dtype, shape, TensorKind::Activation);
        let ins: Vec<Option<TensorId>> = inputs.iter().copied().map(Some).collect();
        self.node(name, op, &ins, &[out]);
        out
    }

    /// Sets an attribute on the most recently added node.
    pub fn attr(&mut self, name: &str, value: Attr) -> &mut Self {
        if let Some(node) = self.graph.nodes_mut().raw_mut().last_mut() {
            node.attrs.push((name.to_owned(), value));
        }
        self
    }

    /// Gives the most recently added node a body graph under attribute `attr`. The body
    /// must use this graph's symbols (create them in the same order; a body whose symbols are
    /// a prefix of this graph's gets the rest, anything else fails validation). Each body
    /// input named like a tensor of this graph is a captured value, and that tensor becomes an
    /// implicit input of the node.
    pub fn body(&mut self, attr: &str, mut graph: Graph) -> &mut Self {
        graph.adopt_symbols_of(&self.graph);
        let captured: Vec<TensorId> = graph
            .tensors()
            .iter()
            .filter(|t| t.kind == TensorKind::Input)
            .filter_map(|t| self.graph.find_tensor(&t.name))
            .collect();
        if let Some(node) = self.graph.nodes_mut().raw_mut().last_mut() {
            node.implicit_inputs.extend(captured);
            node.implicit_inputs.sort_unstable();
            node.implicit_inputs.dedup();
            node.bodies.push(Body {
                attr: attr.to_owned(),
                graph,
            });
        }
        self
    }

    /// Marks `t` as a graph output, declared after the outputs marked before it
    /// ([`Graph::outputs`]).
    pub fn mark_output(&mut self, t: TensorId) {
        if self.graph.tensors().get(t).is_some() {
            self.graph.set_kind(t, TensorKind::Output);
            self.graph.push_output(t);
        }
    }

    /// The graph so far, unvalidated.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Validates and returns the graph.
    pub fn build(self) -> Result<Graph, ValidationErrors> {
        self.graph.validate()?;
        Ok(self.graph)
    }

    /// Returns the graph without validating it (for tests that build broken graphs).
    pub fn build_unchecked(self) -> Graph {
        self.graph
    }
}
