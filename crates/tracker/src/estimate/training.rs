//! Training state per parameter: gradients and optimizer states.
//!
//! The accounting is ZeRO's (Rajbhandari et al., 2020): gradients in the weights' dtype;
//! optimizer states in `f32` (momentum: one, Adam/AdamW: two); with mixed precision an `f32`
//! master copy of the weights, counted with the optimizer states. Mixed-precision Adam is
//! therefore 2 (bf16 weights) + 2 (gradients) + 4 + 4 + 4 (master, m, v) = 16 bytes per
//! parameter, and so is pure `f32` Adam (4 + 4 + 4 + 4).

use std::fmt;
use std::str::FromStr;

/// An optimizer, by the state it keeps per parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
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

/// A training step: what it keeps besides the weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Training {
    /// The optimizer.
    pub optimizer: Optimizer,
    /// Keep an `f32` master copy of the weights (mixed precision).
    pub master_weights: bool,
    /// Activation recomputation.
    pub checkpointing: Checkpointing,
}

impl Training {
    /// Bytes of optimizer state per parameter, master copy included.
    pub fn optimizer_bytes_per_parameter(&self) -> u64 {
        4 * self.optimizer.states() + if self.master_weights { 4 } else { 0 }
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
        let t = |optimizer, master_weights| Training {
            optimizer,
            master_weights,
            checkpointing: Checkpointing::None,
        };
        assert_eq!(t(Optimizer::Sgd, false).optimizer_bytes_per_parameter(), 0);
        assert_eq!(
            t(Optimizer::Momentum, false).optimizer_bytes_per_parameter(),
            4
        );
        assert_eq!(t(Optimizer::Adam, false).optimizer_bytes_per_parameter(), 8);
        assert_eq!(
            t(Optimizer::AdamW, true).optimizer_bytes_per_parameter(),
            12
        );
    }
}
