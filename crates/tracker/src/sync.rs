//! The atomics the tracker uses: `std`'s, or loom's when built with `--cfg loom` so that
//! `tests/loom.rs` can explore every interleaving of the compare-and-swap loop.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
