//! Estimates without a graph: the bytes of a tensor, of attention, and of a transformer's
//! weights, KV cache, activations, gradients and optimizer states; serving capacity (how
//! many KV-cache tokens fit beside the weights); the share of each device under tensor,
//! pipeline, expert and data parallelism with ZeRO; quantized weights.
//!
//! Every product and sum is checked: an estimate that does not fit in 64 bits is
//! [`EstimateError::Overflow`], naming what was being computed, never a wrapped number.
//! Sub-byte dtypes are exact: `n` elements of `i4` take `ceil(n / 2)` bytes.

mod allocator;
mod attention;
mod config;
pub mod eager;
mod hf;
mod params;
mod runtime;
mod serving;
mod step_arena;
mod training;
mod transformer;

pub use attention::{AttentionMemory, AttentionShape};
pub use config::{
    Activation, Architecture, ConfigError, EagerDetails, Mla, Mlp, Moe, Norm, QkNorm,
    TransformerConfig, Vision, VisionTower,
};
pub use eager::{PhasePeaks, StepPhase};
pub use params::{
    Parallelism, ParamTensor, Placement, QuantKind, Role, Shard, WeightFormat, count, device_share,
};
pub use runtime::Runtime;
pub use serving::{Serving, ServingCapacity, serving_capacity};
pub use step_arena::{StepArena, StepPlan, step_plan_options};
pub use training::{
    Checkpointing, Optimizer, OptimizerKernel, Precision, Training, UnknownOptimizer,
};
pub use transformer::{
    AttentionImpl, Breakdown, Estimate, Logits, Workload, estimate, estimate_with_arena, step_plan,
};

use memplan_ir::DType;

/// Why an estimate could not be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EstimateError {
    /// A product or sum passed `u64::MAX`.
    #[error("byte arithmetic overflows while computing {what}")]
    Overflow {
        /// What was being computed.
        what: String,
    },
    /// A dtype with no fixed size (strings).
    #[error("dtype {0} has no fixed size")]
    Unsized(DType),
    /// A workload or shape value that makes no sense (a zero batch, say).
    #[error("{0}")]
    Invalid(WorkloadFault),
    /// One setting of the workload or the serving engine that does not go with the model or
    /// the other settings: `setting` is its name as `memplan::estimate::WorkloadSettings` and
    /// the serving settings spell it (`tp`, `gpu_util`, `runtime`, ...).
    #[error("`{setting}` {reason}")]
    Setting {
        /// The setting's name.
        setting: &'static str,
        /// What is wrong with its value, in words that follow the name.
        reason: String,
    },
}

/// Why a workload or a shape makes no sense for the model ([`EstimateError::Invalid`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WorkloadFault {
    /// A zero batch or a zero sequence length.
    #[error("batch ({batch}) and sequence length ({seq}) must be positive")]
    Empty {
        /// The batch.
        batch: u64,
        /// The sequence length.
        seq: u64,
    },
    /// A sequence longer than the model's learned position table.
    #[error(
        "sequence length {seq} is past the {positions} positions of the model's learned position table"
    )]
    PastPositions {
        /// The sequence length.
        seq: u64,
        /// The positions the table has.
        positions: u64,
    },
    /// Attention heads that are not a positive multiple of the key/value heads.
    #[error(
        "attention heads {heads} must be a positive multiple of the key/value heads {kv_heads}"
    )]
    Heads {
        /// Query heads.
        heads: u64,
        /// Key/value heads.
        kv_heads: u64,
    },
    /// Serving asked of an encoder, which has no KV cache.
    #[error("a {architecture} model is an encoder: it has no KV cache to serve from")]
    Encoder {
        /// The architecture's name.
        architecture: &'static str,
    },
    /// A model without layers.
    #[error("the model has no layers")]
    NoLayers,
}

/// An [`EstimateError::Setting`] about `setting`.
pub(crate) fn bad_setting<T>(
    setting: &'static str,
    reason: impl Into<String>,
) -> Result<T, EstimateError> {
    Err(EstimateError::Setting {
        setting,
        reason: reason.into(),
    })
}

/// `a * b`, or an overflow error naming `what`.
pub(crate) fn mul(a: u64, b: u64, what: &str) -> Result<u64, EstimateError> {
    a.checked_mul(b).ok_or_else(|| overflow(what))
}

/// The product of `factors`, or an overflow error naming `what`.
pub(crate) fn product(factors: &[u64], what: &str) -> Result<u64, EstimateError> {
    factors.iter().try_fold(1u64, |acc, &f| mul(acc, f, what))
}

/// The sum of `terms`, or an overflow error naming `what`.
pub(crate) fn sum(terms: &[u64], what: &str) -> Result<u64, EstimateError> {
    terms.iter().try_fold(0u64, |acc, &t| {
        acc.checked_add(t).ok_or_else(|| overflow(what))
    })
}

fn overflow(what: &str) -> EstimateError {
    EstimateError::Overflow {
        what: what.to_owned(),
    }
}

/// Bytes of `elements` elements of `dtype` (`ceil(elements * bits / 8)`), checked.
pub fn elements_bytes(elements: u64, dtype: DType, what: &str) -> Result<u64, EstimateError> {
    if dtype.bits().is_none() {
        return Err(EstimateError::Unsized(dtype));
    }
    dtype.bytes_for(elements).ok_or_else(|| overflow(what))
}

/// Bytes of a tensor of `shape` and `dtype`: the product of the dims times the element
/// size, sub-byte types packed (`i4[3]` is 2 bytes), a scalar (`[]`) one element.
///
/// ```
/// use memplan_ir::DType;
/// use memplan_tracker::estimate::tensor_bytes;
/// assert_eq!(tensor_bytes(&[8, 512, 4096], DType::BF16), Ok(33_554_432));
/// assert_eq!(tensor_bytes(&[3], DType::I4), Ok(2));
/// assert!(tensor_bytes(&[u64::MAX, 2], DType::F32).is_err());
/// ```
pub fn tensor_bytes(shape: &[u64], dtype: DType) -> Result<u64, EstimateError> {
    let elements = product(shape, "the element count of the tensor")?;
    elements_bytes(elements, dtype, "the bytes of the tensor")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensor_bytes_per_dtype() {
        assert_eq!(tensor_bytes(&[], DType::F32), Ok(4));
        assert_eq!(tensor_bytes(&[0, 7], DType::F32), Ok(0));
        assert_eq!(tensor_bytes(&[2, 3], DType::F64), Ok(48));
        assert_eq!(tensor_bytes(&[5], DType::Bool), Ok(5));
        assert_eq!(tensor_bytes(&[5], DType::U4), Ok(3));
        assert_eq!(tensor_bytes(&[4096, 4096], DType::I4), Ok(8_388_608));
        assert_eq!(tensor_bytes(&[10], DType::F8E4M3), Ok(10));
        assert_eq!(tensor_bytes(&[10], DType::C128), Ok(160));
        assert_eq!(
            tensor_bytes(&[2], DType::String),
            Err(EstimateError::Unsized(DType::String))
        );
        // The element count fits but the bytes do not.
        assert!(matches!(
            tensor_bytes(&[u64::MAX / 2], DType::F32),
            Err(EstimateError::Overflow { .. })
        ));
        assert!(matches!(
            tensor_bytes(&[1 << 32, 1 << 32], DType::U8),
            Err(EstimateError::Overflow { .. })
        ));
    }
}
