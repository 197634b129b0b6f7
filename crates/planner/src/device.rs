//! What the device holds for a plan: the one place its total is computed.
//!
//! The device holds the activation arena, the weight (persistent) region, and the graph
//! inputs and outputs the plan leaves to the caller (sized with the plan's bindings). The
//! report, the plan file's `total_bytes`, `memplan check` and the tracker's `fit` all
//! take it from [`Plan::device_bytes`]. The sum is checked: a total past 2^64 is an error,
//! and so is a caller-owned tensor whose size is not known at the plan's bindings (it is not
//! counted as 0).

use memplan_ir::{Graph, SizeError, TensorId, TensorKind};

use crate::plan::Plan;

/// The device memory of a plan, term by term, and its total.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceBytes {
    /// The activation arena.
    pub arena: u64,
    /// The weight region (weights, and training state in a training step).
    pub weights: u64,
    /// Graph inputs the caller allocates (0 when the arena holds them).
    pub caller_inputs: u64,
    /// Graph outputs the caller allocates (0 when the arena holds them).
    pub caller_outputs: u64,
    /// The sum of the four.
    pub total: u64,
}

impl DeviceBytes {
    /// The arena and the weight region, without what the caller allocates (never
    /// overflows: it is at most [`DeviceBytes::total`]).
    pub fn planned(&self) -> u64 {
        self.arena + self.weights
    }
}

/// Why [`Plan::device_bytes`] has no answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceBytesError {
    /// The plan binds a symbol the graph does not have.
    #[error("the plan binds symbol `{0}`, which the graph does not have")]
    UnknownSymbol(String),
    /// A caller-owned input or output whose size is not known at the plan's bindings.
    #[error("the size of caller-owned tensor `{name}` is not known: {reason}")]
    UnknownSize {
        /// The tensor.
        tensor: TensorId,
        /// Its name.
        name: String,
        /// Why.
        reason: SizeError,
    },
    /// The total does not fit in 64 bits.
    #[error("the device memory of the plan adds up past 2^64 bytes")]
    Overflow,
}

impl Plan {
    /// What the device holds for this plan of `graph`: arena, weight region, and the graph
    /// inputs and outputs left to the caller, sized with the plan's bindings. Checked: an
    /// unknown caller-owned size or a sum past 2^64 is an error.
    pub fn device_bytes(&self, graph: &Graph) -> Result<DeviceBytes, DeviceBytesError> {
        let bindings = self
            .settings
            .bindings_for(graph)
            .map_err(DeviceBytesError::UnknownSymbol)?;
        let caller = |kind: TensorKind, in_arena: bool| -> Result<u64, DeviceBytesError> {
            if in_arena {
                return Ok(0);
            }
            let mut sum: u64 = 0;
            for (id, t) in graph.tensors().iter_enumerated() {
                if t.kind != kind {
                    continue;
                }
                let bytes = t.bytes(&bindings).map_err(|reason| match reason {
                    SizeError::Overflow => DeviceBytesError::Overflow,
                    reason => DeviceBytesError::UnknownSize {
                        tensor: id,
                        name: t.name.clone(),
                        reason,
                    },
                })?;
                sum = sum.checked_add(bytes).ok_or(DeviceBytesError::Overflow)?;
            }
            Ok(sum)
        };
        let caller_inputs = caller(TensorKind::Input, self.settings.inputs_in_arena)?;
        let caller_outputs = caller(TensorKind::Output, self.settings.outputs_in_arena)?;
        let total = [self.weight_bytes, caller_inputs, caller_outputs]
            .into_iter()
            .try_fold(self.arena_bytes, u64::checked_add)
            .ok_or(DeviceBytesError::Overflow)?;
        Ok(DeviceBytes {
            arena: self.arena_bytes,
            weights: self.weight_bytes,
            caller_inputs,
            caller_outputs,
            total,
        })
    }
}
