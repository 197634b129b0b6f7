//! The memory plan of a graph: where every tensor lives and for how long.
//!
//! Steps are positions in [`Plan::schedule`] (0-based). A buffer's `first` and `last` are
//! inclusive steps; in the packing engine's half-open terms it occupies `[first, last + 1)`.
//! The activation arena holds graph inputs, outputs and activations (unless the options leave
//! inputs or outputs to the caller); weights live in their own persistent region with their
//! own offsets.

use memplan_ir::{NodeId, TensorId};

/// How a tensor shares its storage with another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AliasKind {
    /// The tensor is a view inside its parent's bytes (Reshape, Squeeze, a contiguous Slice).
    View,
    /// The op wrote the tensor over its parent, whose value was no longer needed.
    InPlace,
}

impl AliasKind {
    /// The name used in the plan's JSON (`view`, `inplace`).
    pub fn name(self) -> &'static str {
        match self {
            AliasKind::View => "view",
            AliasKind::InPlace => "inplace",
        }
    }
}

/// One tensor held in the activation arena.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedBuffer {
    /// The tensor.
    pub tensor: TensorId,
    /// First byte in the activation arena.
    pub offset: u64,
    /// Size in bytes (> 0).
    pub bytes: u64,
    /// First step at which the tensor is live (inclusive).
    pub first: u32,
    /// Last step at which the tensor is live (inclusive).
    pub last: u32,
    /// The tensor whose storage this one shares (its direct parent), if any.
    pub alias_of: Option<TensorId>,
    /// How it shares that storage.
    pub alias: Option<AliasKind>,
}

/// One weight in the persistent weight region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedWeight {
    /// The tensor.
    pub tensor: TensorId,
    /// First byte in the weight region.
    pub offset: u64,
    /// Size in bytes.
    pub bytes: u64,
}

/// A graph's memory plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The graph's name.
    pub graph: String,
    /// Size of the activation arena in bytes.
    pub arena_bytes: u64,
    /// No placement for this schedule and aliasing can use a smaller arena.
    pub lower_bound_bytes: u64,
    /// Bytes needed with one buffer per tensor and no reuse (no aliasing either).
    pub naive_bytes: u64,
    /// Size of the weight region in bytes.
    pub weight_bytes: u64,
    /// The alignment every offset is a multiple of.
    pub alignment: u64,
    /// Nodes in execution order.
    pub schedule: Vec<NodeId>,
    /// Every non-weight tensor with bytes > 0 that the arena holds, in tensor id order.
    pub buffers: Vec<PlannedBuffer>,
    /// Every weight with bytes > 0, in tensor id order.
    pub weights: Vec<PlannedWeight>,
}
