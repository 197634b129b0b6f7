//! Training state per parameter: gradients and optimizer states, by precision recipe.
//!
//! [`Precision`] names how the weights, gradients and states are kept (with `--dtype` the
//! 16-bit type):
//!
//! | precision | weights | gradients | master | states (Adam: m, v) | Adam bytes a parameter |
//! |---|---|---|---|---|---|
//! | `fp32` | f32 | f32 | — | f32 | 4 + 4 + 8 = 16 |
//! | `amp` | f32 | f32 | — | f32 | 16 (activations autocast to `--dtype`) |
//! | `mixed` | 16-bit | 16-bit | f32 | f32 | 2 + 2 + 4 + 8 = 16 (ZeRO's accounting) |
//! | `pure` | 16-bit | 16-bit | — | 16-bit | 2 + 2 + 4 = 8 (`torch.optim` keeps states in the parameter's dtype) |
//!
//! `--no-master-weights` is `pure`. [`OptimizerKernel`] is how the update runs
//! (`torch.optim`'s `foreach`, `fused` or one tensor at a time), which decides its
//! temporaries.

use std::fmt;
use std::str::FromStr;

/// An optimizer, by the state it keeps per parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Optimizer {
    /// Plain SGD: no state.
    Sgd,
    /// SGD with momentum: one `f32` buffer.
    Momentum,
    /// Adam: first and second moments in `f32`.
    Adam,
    /// AdamW: as Adam (the decay needs no state).
    AdamW,
}

impl Optimizer {
    /// Every optimizer, in declaration order.
    pub const ALL: [Optimizer; 4] = [
        Optimizer::Sgd,
        Optimizer::Momentum,
        Optimizer::Adam,
        Optimizer::AdamW,
    ];

    /// `f32` state buffers per parameter.
    pub fn states(self) -> u64 {
        match self {
            Optimizer::Sgd => 0,
            Optimizer::Momentum => 1,
            Optimizer::Adam | Optimizer::AdamW => 2,
        }
    }

    /// The name used on the command line (`sgd`, `momentum`, `adam`, `adamw`).
    pub fn name(self) -> &'static str {
        match self {
            Optimizer::Sgd => "sgd",
            Optimizer::Momentum => "momentum",
            Optimizer::Adam => "adam",
            Optimizer::AdamW => "adamw",
        }
    }
}

impl fmt::Display for Optimizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An optimizer name memplan does not know.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown optimizer `{0}` (expected sgd, momentum, adam or adamw)")]
#[non_exhaustive]
pub struct UnknownOptimizer(pub String);

impl FromStr for Optimizer {
    type Err = UnknownOptimizer;
    fn from_str(s: &str) -> Result<Optimizer, UnknownOptimizer> {
        Optimizer::ALL
            .into_iter()
            .find(|o| o.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownOptimizer(s.to_owned()))
    }
}

/// Activation recomputation in the backward pass (Korthikanti et al., 2022).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Checkpointing {
    /// Every layer keeps what its backward pass reads.
    #[default]
    None,
    /// Selective recomputation: the attention core (scores, softmax, their dropout) is
    /// recomputed; everything else is kept.
    Selective,
    /// Full recomputation: each layer keeps only its input and is run again in the
    /// backward pass, one layer at a time.
    Full,
}

impl Checkpointing {
    /// Every variant, in declaration order.
    pub const ALL: [Checkpointing; 3] = [
        Checkpointing::None,
        Checkpointing::Selective,
        Checkpointing::Full,
    ];

    /// The name used on the command line (`none`, `selective`, `full`).
    pub fn name(self) -> &'static str {
        match self {
            Checkpointing::None => "none",
            Checkpointing::Selective => "selective",
            Checkpointing::Full => "full",
        }
    }
}

impl FromStr for Checkpointing {
    type Err = String;
    fn from_str(s: &str) -> Result<Checkpointing, String> {
        Checkpointing::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!("unknown checkpointing `{s}` (expected none, selective or full)")
            })
    }
}

/// How a training step keeps its numbers (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Precision {
    /// Everything in f32.
    Fp32,
    /// f32 weights, gradients and states; the forward under autocast to the 16-bit dtype.
    Amp,
    /// 16-bit weights and gradients, f32 master weights and states.
    #[default]
    Mixed,
    /// Everything in the 16-bit dtype, optimizer states included.
    Pure,
}

impl Precision {
    /// Every recipe, in declaration order.
    pub const ALL: [Precision; 4] = [
        Precision::Fp32,
        Precision::Amp,
        Precision::Mixed,
        Precision::Pure,
    ];

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Amp => "amp",
            Precision::Mixed => "mixed",
            Precision::Pure => "pure",
        }
    }

    /// Whether an f32 master copy of the weights is kept.
    pub fn master_weights(self) -> bool {
        self == Precision::Mixed
    }
}

impl FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> Result<Precision, String> {
        Precision::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown precision `{s}` (expected fp32, amp, mixed or pure)"))
    }
}

/// How the optimizer's update runs (`torch.optim`'s implementations).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum OptimizerKernel {
    /// `foreach=True`, PyTorch's default on a GPU: one `sqrt(v)` per parameter, all at
    /// once.
    #[default]
    Foreach,
    /// `fused=True`: in place, no temporaries.
    Fused,
    /// `foreach=False`: one parameter at a time, two temporaries of its size.
    PerTensor,
}

impl OptimizerKernel {
    /// Every kernel, in declaration order.
    pub const ALL: [OptimizerKernel; 3] = [
        OptimizerKernel::Foreach,
        OptimizerKernel::Fused,
        OptimizerKernel::PerTensor,
    ];

    /// The command-line name (`foreach`, `fused`, `per-tensor`).
    pub fn name(self) -> &'static str {
        match self {
            OptimizerKernel::Foreach => "foreach",
            OptimizerKernel::Fused => "fused",
            OptimizerKernel::PerTensor => "per-tensor",
        }
    }
}

impl FromStr for OptimizerKernel {
    type Err = String;
    fn from_str(s: &str) -> Result<OptimizerKernel, String> {
        OptimizerKernel::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!("unknown optimizer kernel `{s}` (expected foreach, fused or per-tensor)")
            })
    }
}

/// A training step: what it keeps besides the weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Training {
    /// The optimizer.
    pub optimizer: Optimizer,
    /// How weights, gradients and states are kept.
    pub precision: Precision,
    /// How the update runs.
    pub kernel: OptimizerKernel,
    /// Activation recomputation.
    pub checkpointing: Checkpointing,
}

impl Training {
    /// This training step with [`optimizer`](Training::optimizer) set to `optimizer`.
    pub fn with_optimizer(mut self, optimizer: Optimizer) -> Training {
        self.optimizer = optimizer;
        self
    }

    /// This training step with [`precision`](Training::precision) set to `precision`.
    pub fn with_precision(mut self, precision: Precision) -> Training {
        self.precision = precision;
        self
    }

    /// This training step with [`kernel`](Training::kernel) set to `kernel`.
    pub fn with_kernel(mut self, kernel: OptimizerKernel) -> Training {
        self.kernel = kernel;
        self
    }

    /// This training step with [`checkpointing`](Training::checkpointing) set to `checkpointing`.
    pub fn with_checkpointing(mut self, checkpointing: Checkpointing) -> Training {
        self.checkpointing = checkpointing;
        self
    }
}

impl Training {
    /// AdamW, mixed precision, the foreach kernel, no recomputation.
    pub fn new(optimizer: Optimizer) -> Training {
        Training {
            optimizer,
            precision: Precision::Mixed,
            kernel: OptimizerKernel::Foreach,
            checkpointing: Checkpointing::None,
        }
    }

    /// Whether an f32 master copy of the weights is kept.
    pub fn master_weights(&self) -> bool {
        self.precision.master_weights()
    }

    /// Bytes of optimizer state per parameter, master copy included, for weights of
    /// `weight_bytes` bytes a parameter: f32 states and master (mixed), states in the
    /// weights' dtype (pure, and f32 weights).
    pub fn optimizer_bytes_per_parameter(&self, weight_bytes: u64) -> u64 {
        match self.precision {
            Precision::Pure => weight_bytes * self.optimizer.states(),
            Precision::Mixed => 4 * self.optimizer.states() + 4,
            Precision::Fp32 | Precision::Amp => 4 * self.optimizer.states(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for o in Optimizer::ALL {
            assert_eq!(o.name().parse::<Optimizer>(), Ok(o));
        }
        assert_eq!("AdamW".parse::<Optimizer>(), Ok(Optimizer::AdamW));
        assert!("lion".parse::<Optimizer>().is_err());
    }

    #[test]
    fn state_bytes() {
        let t = |optimizer, precision| Training {
            precision,
            ..Training::new(optimizer)
        };
        assert_eq!(
            t(Optimizer::Sgd, Precision::Fp32).optimizer_bytes_per_parameter(4),
            0
        );
        assert_eq!(
            t(Optimizer::Momentum, Precision::Fp32).optimizer_bytes_per_parameter(4),
            4
        );
        assert_eq!(
            t(Optimizer::Adam, Precision::Amp).optimizer_bytes_per_parameter(4),
            8
        );
        assert_eq!(
            t(Optimizer::AdamW, Precision::Mixed).optimizer_bytes_per_parameter(2),
            12
        );
        // Pure bf16: torch.optim's moments in bf16, as `plan --training
        // --no-master-weights` counts them (issue 36, item 9).
        assert_eq!(
            t(Optimizer::AdamW, Precision::Pure).optimizer_bytes_per_parameter(2),
            4
        );
    }

    #[test]
    fn recipe_and_kernel_names_round_trip() {
        for p in Precision::ALL {
            assert_eq!(p.name().parse::<Precision>(), Ok(p));
        }
        for k in OptimizerKernel::ALL {
            assert_eq!(k.name().parse::<OptimizerKernel>(), Ok(k));
        }
        assert!("bf16".parse::<Precision>().is_err());
        assert!("apex".parse::<OptimizerKernel>().is_err());
    }
}
