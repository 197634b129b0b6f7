//! A memplan plan as memory the engine owns: where every tensor is inside one buffer, typed
//! view descriptors, and a host arena over the engine's own bytes. Nothing here is tied to a
//! backend; the device arena of `memplan-cuda-arena` is built on the same [`Layout`].
//!
//! - [`Layout`]: checks a [`memplan_planner::Plan`] against its graph and gives every tensor
//!   an answer ([`Layout::placement`]): a region and a half-open byte range
//!   ([`Placement::Region`]), bound by the caller ([`Placement::Caller`]), or no bytes
//!   ([`Placement::Empty`]). The three regions (activation arena, weights, half-precision
//!   weights) have a place in one buffer of [`Layout::buffer_bytes`] bytes
//!   ([`Layout::region_start`], [`Layout::buffer_offset`]).
//! - [`ViewDesc`]: a typed view of one tensor as `[T]` (an [`Element`]), which fails, never
//!   panics, on a dtype, size or alignment mismatch; it knows its element range in the
//!   region and in the one buffer.
//! - [`HostArena`]: the regions in host memory: a `&mut [u8]` the engine lends
//!   ([`HostArena::over`]), or one zeroed allocation per plan ([`HostArena::new`]), or one
//!   memory per region ([`HostArena::over_regions`]). Typed slices, split borrows, `f32`
//!   loading into `f16`/`bf16` weights, and the caller's buffers bound to its tensors
//!   ([`HostArena::bind`]).
//!
//! This crate has no `unsafe`.
//!
//! ```
//! use memplan_ir::{DType, GraphBuilder};
//! use memplan_layout::{HostArena, HostBuffer, HostMemory, Layout, LayoutOptions, Placement};
//! use memplan_planner::{PlanOptions, plan_graph};
//!
//! let mut g = GraphBuilder::new("tiny");
//! let x = g.input("x", DType::F32, [256]);
//! let a = g.op("Exp", &[x], DType::F32, [256]);
//! let y = g.op("Log", &[a], DType::F32, [256]);
//! g.mark_output(y);
//! let graph = g.build().unwrap();
//! // The engine keeps its input and output in its own buffers.
//! let options = PlanOptions::default()
//!     .with_inputs_in_arena(false)
//!     .with_outputs_in_arena(false);
//! let plan = plan_graph(&graph, &options).unwrap();
//! let layout = Layout::new(&graph, &plan, &LayoutOptions::default()).unwrap();
//! assert!(matches!(layout.placement(x), Some(Placement::Caller { bytes: 1024, .. })));
//! assert!(matches!(layout.placement(a), Some(Placement::Region(_))));
//!
//! // One buffer for the plan, and the engine's own input and output buffers.
//! let align = layout.buffer_alignment();
//! let mut memory = HostBuffer::zeroed(layout.buffer_bytes(), align).unwrap();
//! let mut input = HostBuffer::zeroed(1024, 64).unwrap();
//! let mut output = HostBuffer::zeroed(1024, 64).unwrap();
//! let mut arena = HostArena::over(layout.clone(), memory.as_bytes_mut()).unwrap();
//! arena.bind(x, input.as_bytes_mut()).unwrap();
//! arena.bind(y, output.as_bytes_mut()).unwrap();
//! arena.upload(x, &[2.0f32; 256]).unwrap();
//! // Run the two ops: each borrows its input shared and its output mutably.
//! for (src, dst, f) in [(x, a, f32::exp as fn(f32) -> f32), (a, y, f32::ln)] {
//!     let mut s = arena.split(&[src], &[dst]).unwrap();
//!     let out = s.writes.pop().unwrap();
//!     for (d, v) in out.chunks_exact_mut(4).zip(s.reads[0].chunks_exact(4)) {
//!         let v = f32::from_ne_bytes([v[0], v[1], v[2], v[3]]);
//!         d.copy_from_slice(&f(v).to_ne_bytes());
//!     }
//! }
//! assert!(arena.view::<f32>(y).unwrap().iter().all(|&v| (v - 2.0).abs() < 1e-5));
//! ```

mod element;
mod half_region;
mod host;
mod layout;
mod view;

#[cfg(test)]
mod test_util;

pub use element::{Element, as_elements, as_elements_mut};
pub use half_region::HalfData;
pub use host::{
    BindError, HostArena, HostBuffer, HostError, HostMemory, HostSplit, MIN_HOST_ALIGN,
    aligned_part,
};
pub use layout::{
    BodyLayout, HalfFormat, Layout, LayoutError, LayoutOptions, Placement, Region, Slot,
};
pub use view::{ViewDesc, ViewError};

/// The graph crate and the planner a layout is built from (`Graph`, `Plan`, `PlanOptions`,
/// `plan_graph`): `memplan_layout::planner::plan_graph` is `memplan_planner::plan_graph`,
/// so an engine that runs plans needs no other memplan dependency.
pub use memplan_ir as ir;
pub use memplan_planner as planner;

/// How a tensor shares another's bytes ([`Slot::alias`], [`Layout::alias`]): the planner's
/// type, so that a kernel matching it needs no other import path.
pub use memplan_planner::AliasKind;

/// The half-precision element types of `f16` and `bf16` views, re-exported from the `half`
/// crate so that a view of them needs no dependency of its own.
pub use half::{bf16, f16};

/// The `bytemuck` traits an [`Element`] type has (a type of the engine's own that stores
/// one element of a dtype implements them, then [`Element`]).
pub use bytemuck::{Pod, Zeroable};
