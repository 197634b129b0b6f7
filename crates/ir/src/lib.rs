//! The memplan graph IR.
//!
//! A [`Graph`] holds [`Tensor`]s (name, [`DType`], shape of possibly symbolic dims, kind)
//! and [`Node`]s (op type, ordered inputs and outputs, small attributes, and the [`Body`]
//! graphs of control flow with the outer values they capture), each in an
//! [`IndexVec`] keyed by a typed `u32` id. Shapes are [`Expr`] polynomials over symbols
//! such as `batch` and `seq`; sizes are computed for a [`Bindings`] of the symbols with
//! checked arithmetic. [`OpTable`] says which outputs may alias an input (views) or
//! overwrite one (in place). [`Graph::validate`] reports every structural problem, and the
//! `serde` feature (on by default) reads and writes the JSON graph format.
//!
//! Nothing here iterates a hash map into an output: every list is in id order.
//!
//! ```
//! use memplan_ir::{DType, Expr, GraphBuilder};
//!
//! // y = Relu(x) with x: f16[batch, 128].
//! let mut g = GraphBuilder::new("relu");
//! let batch = g.symbol("batch");
//! let x = g.input("x", DType::F16, [Expr::symbol(batch), 128.into()]);
//! let y = g.op("Relu", &[x], DType::F16, [Expr::symbol(batch), 128.into()]);
//! g.mark_output(y);
//! let graph = g.build().unwrap();
//!
//! let bindings = graph.bind(&[("batch", 8)]).unwrap();
//! assert_eq!(graph.tensors()[y].bytes(&bindings).unwrap(), 8 * 128 * 2);
//! assert!(graph.bind(&[("seq", 8)]).is_err()); // the graph has no `seq`
//! ```

mod axis;
mod builder;
mod captures;
mod dim;
mod dtype;
mod entity;
mod graph;
mod grouped;
mod ids;
#[cfg(feature = "serde")]
mod json;
mod op_checks;
mod semantics;
mod shape_rules;
mod source;
mod validate;

pub use axis::{axis_index, ones_from};
pub use builder::{GraphBuilder, IntoShape};
pub use dim::{Bindings, Expr, ExprError, ParseExprError};
pub use dtype::{DType, UnknownDType};
pub use entity::{AnyEntity, Entities, EntityName, ErrorGraph, GraphError, Names, WithGraph};
pub use graph::{
    Attr, Attrs, BindError, Body, CONSTANT_NODES, Graph, Node, Quotient, Shape, SizeError, Tensor,
    TensorKind, UNIFORM_CONSTANTS,
};
pub use grouped::{ExactBytes, Grouped, HumanBytes};
pub use ids::{Idx, IndexVec, NodeId, SymbolId, TensorId};
#[cfg(feature = "serde")]
pub use json::LoadError;
pub use semantics::{CustomRule, MemorySemantics, OpRule, OpTable, data_inputs, reads_bytes};
pub use shape_rules::{ConflictKind, ShapeConflict};
pub use source::{
    Dim, ENGINE_DOMAIN, GraphSource, ImportError, Imported, NodeDecl, SEMANTICS_ATTR, TensorDecl,
    import,
};
pub use validate::{ValidationError, ValidationErrors};

/// The small vector a [`Shape`] is (and [`MemorySemantics::InPlace`] and
/// [`OpTable::mutated_inputs`] hold), re-exported so that building one needs no `smallvec`
/// dependency of its own: `memplan_ir::smallvec![Expr::from(4), Expr::from(8)]`.
pub use smallvec::{SmallVec, smallvec};
