//! Turns a memplan plan into memory: per-tensor layout and typed views, a host arena that
//! executes plans, and (feature `cuda`) one device allocation per plan.
//!
//! - Layout: a [`Layout`] checks a [`memplan_planner::Plan`] against its graph and gives
//!   every tensor a region and a half-open byte range; [`Layout::view`] makes typed view
//!   descriptors that fail, never panic, on a dtype, size or alignment mismatch. With
//!   [`LayoutOptions::half_weights`], `f32` weights live in a half-precision side region.
//! - Host memory: [`HostArena`], aligned host memory for a layout, with typed slices, split
//!   borrows and `f32` loading (converted to `f16`/`bf16` where stored so).
//! - The pattern check ([`run_check`]), which executes a plan on real bytes (host or
//!   device) and reports any live tensor whose bytes another write destroyed; what each op
//!   does to memory, for that check, is stated independently in [`op_effects`].
//! - Pooling: [`ArenaPool`], a bounded pool reusing buffers across plans of similar size.
//! - `device` (feature `cuda`, the one public module besides `op_effects`): `device::DeviceArena`, one device allocation per region,
//!   typed `CudaView`/`CudaViewMut` per tensor, upload/download, memory info. Every way of
//!   failing to reach a GPU (no libcuda, no device, a driver error) is an `Err`.
//!
//! Every other item has one public path, at the crate root. `unsafe` appears only in the
//! host arena (the aligned allocation and split borrows) and `device`
//! (FFI through cudarc), each block with a `// SAFETY:` comment.
//!
//! ```
//! use memplan_cuda_arena::{CheckOptions, HostArena, Layout, LayoutOptions, run_check};
//! use memplan_ir::{DType, GraphBuilder};
//! use memplan_planner::{PlanOptions, plan_graph};
//!
//! let mut g = GraphBuilder::new("tiny");
//! let x = g.input("x", DType::F32, [256]);
//! let a = g.op("Conv", &[x], DType::F32, [256]);
//! let y = g.op("Relu", &[a], DType::F32, [256]);
//! g.mark_output(y);
//! let graph = g.build().unwrap();
//! let plan = plan_graph(&graph, &PlanOptions::default()).unwrap();
//!
//! // One host allocation for the whole arena; typed, bounds-checked views per tensor.
//! let layout = Layout::new(&graph, &plan, &LayoutOptions::default()).unwrap();
//! let mut arena = HostArena::new(layout.clone()).unwrap();
//! arena.upload(x, &[1.0f32; 256]).unwrap();
//! assert_eq!(arena.view::<f32>(x).unwrap()[0], 1.0);
//! // Execute the plan on real bytes: no live tensor is clobbered.
//! let report = run_check(&graph, &layout, &mut arena, CheckOptions::default()).unwrap();
//! assert!(report.is_clean());
//! ```

mod element;
pub mod fused_effects;
mod half_region;
mod host;
mod layout;
pub mod op_effects;
mod pattern;
mod pool;
mod view;

#[cfg(feature = "cuda")]
pub mod device;

#[cfg(test)]
mod test_util;

pub use element::Element;
pub use half_region::HalfData;
pub use host::{AlignedBuf, HostArena, HostError, HostPool, HostSplit, MIN_HOST_ALIGN};
pub use layout::{BodyLayout, HalfFormat, Layout, LayoutError, LayoutOptions, Region, Slot};
pub use pattern::{
    BadView, BodyMemoryError, BodyRun, Cause, CheckOptions, CheckReport, Clobber, MAX_THREADS,
    Mismatch, OutOfRegion, PatternMemory, Salts, Sampling, Trusted, ViewFault, run_check,
    run_check_observed, run_check_with_ops,
};
pub use pool::{ArenaPool, PoolBuffer, PoolLimits, PoolStats, serves};
pub use view::{ViewDesc, ViewError};

/// Lays `plan` out with default options, runs the pattern check on a fresh host arena, and
/// returns the report.
pub fn check_on_host(
    graph: &memplan_ir::Graph,
    plan: &memplan_planner::Plan,
    options: CheckOptions,
) -> Result<CheckReport, CheckError> {
    let layout = Layout::new(graph, plan, &LayoutOptions::default())?;
    let mut arena = HostArena::new(layout.clone())?;
    Ok(run_check(graph, &layout, &mut arena, options)?)
}

/// Why [`check_on_host`] could not run the check (a clobber is not an error: it is in the
/// report).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// The plan does not lay out.
    #[error("the plan cannot be laid out: {0}")]
    Layout(#[from] LayoutError),
    /// Host memory could not be had.
    #[error(transparent)]
    Host(#[from] HostError),
    /// The memory does not match the layout.
    #[error(transparent)]
    Range(#[from] OutOfRegion),
}
