//! Memory planning for memplan graphs.
//!
//! The graph planner turns a `memplan-ir` graph into buffers (lifetimes over a schedule,
//! view and in-place aliasing, memory-aware ordering) and places them with the packing
//! engine of `memplan-packing`, which knows nothing about graphs.
//!
//! The planner's phases each have a module, sequenced by [`plan_graph`]: `regions` (sizes,
//! which tensors the arena holds), `ordering` (the schedule), `liveness` (lifetimes:
//! the one place the lifetime convention is stated), `aliasing` (views and in-place writes
//! group tensors into storages) and `placement` (the engine places storages; weights get
//! their own region); `workspace` sizes the memory of control-flow nodes by planning the
//! bodies they run. [`verify_plan`] checks any [`Plan`] against its graph without knowing
//! how it was made; [`plan_training`] plans a forward and a backward graph together.
//!
//! ```
//! use memplan_ir::{DType, GraphBuilder};
//! use memplan_planner::{Alias, PlanOptions, plan_graph, verify_plan};
//!
//! // x -> Conv -> Relu -> Reshape -> output: the Relu writes over the Conv's output, and
//! // the Reshape is a view of the Relu's.
//! let mut g = GraphBuilder::new("tiny");
//! let x = g.input("x", DType::F32, [1, 64]);
//! let a = g.op("Conv", &[x], DType::F32, [1, 64]);
//! let r = g.op("Relu", &[a], DType::F32, [1, 64]);
//! let y = g.op("Reshape", &[r], DType::F32, [64]);
//! g.mark_output(y);
//! let graph = g.build().unwrap();
//!
//! let plan = plan_graph(&graph, &PlanOptions::default()).unwrap();
//! verify_plan(&graph, &plan).unwrap();
//! assert_eq!(plan.buffer(r).unwrap().alias, Some(Alias::InPlace { of: a }));
//! assert_eq!(plan.buffer(y).unwrap().alias, Some(Alias::View { of: r, offset: 0 }));
//! ```

mod plan;

mod aliasing;
mod bounded;
mod concat;
mod device;
mod error;
mod folding;
mod fuse;
pub mod fused_kernels;
mod kernels;
mod liveness;
mod mutation;
mod options;
mod ordering;
mod placement;
mod plan_file;
mod planner;
mod regions;
mod review;
mod source;
mod state;
mod step;
mod training;
mod verify;
mod verify_workspace;
mod workspace;

/// The graph crate whose types the planner reads and answers with (`Graph`, `GraphBuilder`,
/// `DType`, `TensorId`, `Bindings`, ...): `memplan_planner::ir::Graph` is
/// `memplan_ir::Graph`, so a planner user needs no `memplan-ir` dependency of its own.
pub use memplan_ir as ir;
/// The trait that renders [`PlanError`] and [`PlanViolations`] with a graph's names
/// (`error.with_graph(&graph)`), from `memplan-ir`, so that printing an error needs no other
/// import path than the planner's.
pub use memplan_ir::GraphError;
/// The packing engine the planner places with (its options and outcomes), for a user that
/// also packs buffers of its own.
pub use memplan_packing as packing;
/// The packing engine's types that the planner's options and errors hold
/// ([`PlanOptions::strategy`], [`PlanError::Solve`]), so that choosing a strategy needs no
/// `memplan-packing` dependency.
pub use memplan_packing::{SolveError, Strategy};
/// The JSON value [`Plan::to_json_value`] returns, with the crate that reads and writes it.
pub use serde_json::{self, Value as JsonValue};

pub use concat::strided_part;
pub use device::{DeviceBytes, DeviceBytesError};
pub use error::{NodeFault, PlanError, ScheduleFault, ShapeProblem, TrainingFault};
pub use fuse::{
    ATTR_AT_USE, ATTR_FUSED_NODES, ATTR_FUSION, FUSED_MARK, FusedGraph, FusedNode, fuse_graph,
};
pub use kernels::FUSED_ATTENTION_OPS;
pub use options::{
    AttentionKernel, Fusions, OrderingOptions, PLAN_NODE_LIMIT, PlanOptions, ScheduleMode,
    UnknownFusion,
};
pub use ordering::describe_order;
pub use plan::{
    Alias, AliasKind, BodyPlan, OrderCandidate, Plan, PlanSettings, PlanStats, PlannedBuffer,
    PlannedWeight, PlannedWorkspace, ResizeError, ScheduleChoice,
};
pub use plan_file::{PlanFileError, PlanHeader};
pub use planner::{PlanContext, peak_bytes, plan_fused, plan_graph, plan_with_schedule};
pub use review::Review;
pub use source::{SourceError, plan_imported, plan_source};
pub use state::{ORT_GRAD_BUFFER, StateError, StateReason, mark_state, name_matches};
pub use step::{
    ATTR_GRAD_OF, ATTR_RECOMPUTE_OF, ATTR_WRT, Checkpoint, ExactCheckpoint, ExactSearch, Loss,
    Optimizer, OptimizerKernel, Phase, RecomputeBound, RecomputeCost, TrainingOptions,
    TrainingStep, TrainingSummary, UnknownName, UnknownOps, exact_checkpoints, node_flops,
    plan_training, recompute_lower_bound,
};
pub use training::{TrainingPlan, plan_forward_backward};
pub use verify::{
    AliasFault, FusionFault, FusionViolations, Occupant, PlanList, PlanViolation, PlanViolations,
    StepFault, VerifyReport, WorkspaceFault, verify_fusion, verify_plan, verify_plan_figures,
    verify_plan_report,
};
