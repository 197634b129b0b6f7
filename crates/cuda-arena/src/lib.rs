//! Turns a memplan plan into memory on a device, and checks plans on real bytes.
//!
//! - `device` (feature `cuda`): `device::DeviceArena`, one device allocation per plan (every
//!   region in it), typed `CudaView`/`CudaViewMut` per tensor, upload/download, memory info;
//!   on a context and stream of its own or the engine's (`Device::from_stream`,
//!   `Device::from_context`), in its own allocation or one the engine lends
//!   (`DeviceArena::in_slice`), with the caller's allocations bound to its caller-owned
//!   tensors (`DeviceArena::bind`). Every way of failing to reach a GPU (no libcuda, no
//!   device, a driver error) is an `Err`.
//! - The pattern check ([`run_check`]), which executes a plan on real bytes (host or
//!   device) and reports any live tensor whose bytes another write destroyed; what each op
//!   does to memory, for that check, is stated independently in [`op_effects`].
//! - [`CheckArena`]: the pattern check's host arena, one allocation per plan
//!   ([`AlignedBuf`]); and [`ArenaPool`], a bounded pool reusing buffers across plans of
//!   similar size.
//! - Re-exported from `memplan-layout` (the backend-neutral part, which moved there):
//!   [`Layout`], [`Placement`], [`Slot`], [`Region`], [`ViewDesc`], [`Element`],
//!   [`HalfData`] and their errors; an engine that needs no device depends on that crate
//!   alone.
//!
//! Every other item has one public path, at the crate root. `unsafe` appears only in the
//! host buffer (the aligned allocation) and `device` (FFI through cudarc), each block with a
//! `// SAFETY:` comment.
//!
//! ```
//! use memplan_cuda_arena::{CheckOptions, CheckArena, Layout, LayoutOptions, run_check};
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
//! let mut arena = CheckArena::new(layout.clone()).unwrap();
//! arena.upload(x, &[1.0f32; 256]).unwrap();
//! assert_eq!(arena.view::<f32>(x).unwrap()[0], 1.0);
//! // Execute the plan on real bytes: no live tensor is clobbered.
//! let report = run_check(&graph, &layout, &mut arena, CheckOptions::default()).unwrap();
//! assert!(report.is_clean());
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod fused_effects;
mod host;
pub mod op_effects;
mod pattern;
mod pool;

/// What moved to `memplan-layout`, under the paths this crate's modules use.
mod layout {
    #[cfg(test)]
    pub(crate) use memplan_layout::LayoutOptions;
    pub(crate) use memplan_layout::{Layout, Region, Slot};
}

#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
pub mod device;

#[cfg(test)]
mod test_util;

pub use host::{AlignedBuf, CheckArena, HostPool};
pub use memplan_layout::{
    BindError, BodyLayout, Element, HalfData, HalfFormat, HostError, HostMemory, HostSplit, Layout,
    LayoutError, LayoutOptions, MIN_HOST_ALIGN, Placement, Region, Slot, ViewDesc, ViewError, bf16,
    f16,
};
pub use pattern::{
    BadView, BodyMemoryError, BodyRun, Cause, CheckOptions, CheckReport, Clobber, MAX_THREADS,
    Mismatch, OutOfRegion, PatternMemory, Salts, Sampling, Trusted, ViewFault, run_check,
    run_check_observed, run_check_with_ops,
};
pub use pool::{ArenaPool, PoolBuffer, PoolLimits, PoolStats, serves};

/// Lays `plan` out with default options, runs the pattern check on a fresh host arena, and
/// returns the report.
pub fn check_on_host(
    graph: &memplan_ir::Graph,
    plan: &memplan_planner::Plan,
    options: CheckOptions,
) -> Result<CheckReport, CheckError> {
    let layout = Layout::new(graph, plan, &LayoutOptions::default())?;
    let mut arena = CheckArena::new(layout.clone())?;
    Ok(run_check(graph, &layout, &mut arena, options)?)
}

/// Why [`check_on_host`] could not run the check (a clobber is not an error: it is in the
/// report).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
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
