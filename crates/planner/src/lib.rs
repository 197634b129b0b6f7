//! Memory planning for memplan graphs.
//!
//! Two layers: [`arena`], a packing engine that assigns byte offsets to buffers with live
//! intervals and knows nothing about graphs; and the graph planner, which turns a
//! `memplan-ir` graph into buffers (lifetimes over a schedule, view and in-place aliasing,
//! memory-aware ordering) and places them with the engine.

pub mod arena;
pub mod plan;

pub use plan::{AliasKind, Plan, PlannedBuffer, PlannedWeight};
