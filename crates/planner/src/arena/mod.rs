//! The arena packing engine: byte offsets for buffers with lifetimes, in one arena.
//!
//! This is the dynamic storage allocation problem. The engine knows nothing about graphs:
//! a user with their own IR builds a [`Problem`] and calls it directly.

pub mod exact;
mod problem;

pub use problem::{Buffer, BufferId, Problem, Solution};
