//! Planning an engine's own graph, read through [`GraphSource`] (see
//! [`memplan_ir::import`]): the plan, and the map between the engine's ids and the plan's.
//!
//! ```
//! use std::borrow::Cow;
//! use memplan_ir::{DType, GraphSource, NodeDecl, TensorDecl, TensorKind};
//! use memplan_planner::{Alias, PlanOptions, plan_source, verify_plan};
//!
//! /// An engine's op list: each op makes one tensor from earlier ones.
//! enum Op { Input, Weight, MatMul(usize, usize), Gelu(usize), Reshape(usize) }
//! struct Model(Vec<(&'static str, Op, Vec<u64>)>);
//!
//! impl GraphSource for Model {
//!     type Tensor = usize;
//!     type Node = usize;
//!     fn name(&self) -> Cow<'_, str> { "mlp".into() }
//!     fn tensors(&self) -> impl Iterator<Item = usize> + '_ { 0..self.0.len() }
//!     fn tensor(&self, t: usize) -> TensorDecl<'_> {
//!         let (name, op, shape) = &self.0[t];
//!         let kind = match op {
//!             Op::Input => TensorKind::Input,
//!             Op::Weight => TensorKind::Weight,
//!             _ if t + 1 == self.0.len() => TensorKind::Output,
//!             _ => TensorKind::Activation,
//!         };
//!         TensorDecl::new(*name, DType::F32, shape.iter().copied(), kind)
//!     }
//!     fn nodes(&self) -> impl Iterator<Item = usize> + '_ {
//!         (0..self.0.len()).filter(|&t| !matches!(self.0[t].1, Op::Input | Op::Weight))
//!     }
//!     fn node(&self, t: usize) -> NodeDecl<'_, usize> {
//!         let name = self.0[t].0;
//!         match self.0[t].1 {
//!             // The engine says what shares memory: no op name decides it.
//!             Op::MatMul(a, b) => NodeDecl::new(name, "matmul", [a, b], [t]).with_scratch(4096),
//!             Op::Gelu(a) => NodeDecl::new(name, "gelu", [a], [t]).in_place(0, &[0]),
//!             Op::Reshape(a) => NodeDecl::new(name, "reshape", [a], [t]).view(0, 0, 0),
//!             Op::Input | Op::Weight => unreachable!("not nodes"),
//!         }
//!     }
//! }
//!
//! let model = Model(vec![
//!     ("x", Op::Input, vec![8, 64]),
//!     ("w", Op::Weight, vec![64, 64]),
//!     ("h", Op::MatMul(0, 1), vec![8, 64]),
//!     ("g", Op::Gelu(2), vec![8, 64]),
//!     ("y", Op::Reshape(3), vec![512]),
//! ]);
//! let (ids, plan) = plan_source(&model, &PlanOptions::default()).unwrap();
//! verify_plan(ids.graph(), &plan).unwrap();
//! let (h, g, y) = (ids.tensor_id(2).unwrap(), ids.tensor_id(3).unwrap(), ids.tensor_id(4).unwrap());
//! assert_eq!(plan.buffer(g).unwrap().alias, Some(Alias::InPlace { of: h }));
//! assert_eq!(plan.buffer(y).unwrap().alias, Some(Alias::View { of: g, offset: 0 }));
//! // The matmul's scratch lives at its step only.
//! let scratch = plan.buffer(ids.scratch(2).unwrap()).unwrap();
//! assert_eq!((scratch.bytes, scratch.first, scratch.last), (4096, 0, 0));
//! ```

use std::hash::Hash;

use memplan_ir::{GraphSource, ImportError, Imported, import};

use crate::error::PlanError;
use crate::options::PlanOptions;
use crate::plan::Plan;
use crate::planner::plan_graph;

/// Why [`plan_source`] returned no plan.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// The engine's graph cannot be read.
    #[error(transparent)]
    Import(#[from] ImportError),
    /// The graph cannot be planned.
    #[error(transparent)]
    Plan(#[from] PlanError),
}

/// Reads `src` and plans it with `options`, the op rules replaced by the ones the engine
/// declared (so no built-in rule applies to an engine's op). Returns the read graph with the
/// id map, and the plan.
#[allow(clippy::type_complexity)]
pub fn plan_source<S: GraphSource>(
    src: &S,
    options: &PlanOptions,
) -> Result<(Imported<S::Tensor, S::Node>, Plan), SourceError> {
    let imported = import(src)?;
    // The imported graph is returned only with a plan: its errors carry it.
    let plan = plan_imported(&imported, options).map_err(PlanError::in_graph(imported.graph()))?;
    Ok((imported, plan))
}

/// Plans a graph read from an engine ([`import`]) with `options`, the op rules replaced by
/// the ones the engine declared: [`plan_source`] after the import. What an engine with
/// symbolic shapes calls: its symbols get their ids in the import, so bind them by name on
/// the imported graph ([`memplan_ir::Graph::bind`]) and plan once per binding, reading the
/// engine's graph once.
///
/// ```
/// use std::borrow::Cow;
/// use memplan_ir::{DType, Dim, GraphSource, NodeDecl, TensorDecl, TensorKind, import};
/// use memplan_planner::{PlanOptions, plan_imported};
///
/// /// `y = relu(x)`, `x` of `batch` rows.
/// struct Relu;
/// impl GraphSource for Relu {
///     type Tensor = u8;
///     type Node = u8;
///     fn name(&self) -> Cow<'_, str> { "relu".into() }
///     fn tensors(&self) -> impl Iterator<Item = u8> + '_ { 0..2 }
///     fn tensor(&self, t: u8) -> TensorDecl<'_> {
///         let (name, kind) = [("x", TensorKind::Input), ("y", TensorKind::Output)][t as usize];
///         TensorDecl::new(name, DType::F32, [Dim::from("batch"), Dim::Fixed(16)], kind)
///     }
///     fn nodes(&self) -> impl Iterator<Item = u8> + '_ { 0..1 }
///     fn node(&self, _: u8) -> NodeDecl<'_, u8> {
///         NodeDecl::new("relu", "relu", [0], [1]).in_place(0, &[0])
///     }
/// }
///
/// let imported = import(&Relu).unwrap();
/// for batch in [1, 8] {
///     let bindings = imported.graph().bind(&[("batch", batch)]).unwrap();
///     let options = PlanOptions::default().with_bindings(bindings);
///     let plan = plan_imported(&imported, &options).unwrap();
///     let y = imported.tensor_id(1).unwrap();
///     assert_eq!(plan.buffer(y).unwrap().bytes, batch * 16 * 4);
/// }
/// ```
///
/// An error names the imported graph's ids: render it with `imported.graph()`
/// ([`memplan_ir::GraphError::with_graph`]) or attach it ([`PlanError::found_in`]).
pub fn plan_imported<T: Copy + Eq + Hash, N: Copy + Eq + Hash>(
    imported: &Imported<T, N>,
    options: &PlanOptions,
) -> Result<Plan, PlanError> {
    let options = PlanOptions {
        op_table: imported.op_table().clone(),
        ..options.clone()
    };
    plan_graph(imported.graph(), &options)
}
