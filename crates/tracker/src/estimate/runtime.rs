//! Which runtime an estimate models, and the default for a workload.
//!
//! - [`Runtime::Hf`]: transformers on PyTorch, eager: the [`super::eager`] model, allocation
//!   by allocation, with the attention implementation, precision recipe and optimizer
//!   kernel the user runs. The default for a known `model_type` on one device.
//! - [`Runtime::Fused`]: fused kernels as Megatron or torchtitan run them: the activations
//!   each layer saves, term for term Korthikanti et al. (2022), summed with the weights,
//!   gradients and states. The default where the workload is spread with tensor, pipeline or
//!   expert parallelism or ZeRO, or uses a quantized or separate weight or KV format, which
//!   the `hf` model does not describe.
//! - [`Runtime::Vllm`]: vLLM's sizing of its KV cache, for `fit --serving`.

use std::fmt;
use std::str::FromStr;

/// The runtime whose allocations an estimate follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Runtime {
    /// transformers on PyTorch (eager).
    Hf,
    /// Fused kernels (Megatron, torchtitan).
    Fused,
    /// vLLM serving.
    Vllm,
}

impl Runtime {
    /// Every runtime, in declaration order.
    pub const ALL: [Runtime; 3] = [Runtime::Hf, Runtime::Fused, Runtime::Vllm];

    /// The command-line name (`hf`, `fused`, `vllm`).
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Hf => "hf",
            Runtime::Fused => "fused",
            Runtime::Vllm => "vllm",
        }
    }

    /// What the figures follow, for reports.
    pub fn describe(self) -> &'static str {
        match self {
            Runtime::Hf => "transformers on PyTorch (eager), allocation by allocation",
            Runtime::Fused => "fused kernels (Megatron-style saved activations)",
            Runtime::Vllm => "vLLM's KV-cache sizing",
        }
    }
}

impl fmt::Display for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Runtime {
    type Err = String;
    fn from_str(s: &str) -> Result<Runtime, String> {
        Runtime::ALL
            .into_iter()
            .find(|r| r.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown runtime `{s}` (expected hf, fused or vllm)"))
    }
}
