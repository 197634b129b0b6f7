//! Deterministic synthetic instances, shaped like the tensor lifetimes of real training
//! graphs, for tests and benchmarks.
//!
//! [`realistic`] walks a schedule of operator steps. Each step produces one to three buffers.
//! Three in four are short-lived (consumed within a few steps), one in five lives up to 64
//! steps, and one in twenty is long-lived: 64 to 4096 steps, log-uniform, like activations
//! kept for a backward pass. About a hundred buffers are live at once, whatever `n`, as in a
//! real graph whose concurrency does not grow with its length. Sizes are heavy-tailed: log-uniform over 256 B – 4 MiB, with
//! one buffer in fifty up to 64× larger, and most are multiples of 256. The random numbers
//! come from a tiny fixed PRNG (SplitMix64), so the same `(n, seed)` always gives the same
//! problem on every platform.

use super::problem::{Buffer, Problem};

/// SplitMix64: a small, fast, portable PRNG.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `[0, bound)`; 0 when `bound` is 0.
    pub fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 {
            0
        } else {
            ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
        }
    }
}

/// A realistic problem with `n` buffers (see the module docs); no capacity, alignment 1.
pub fn realistic(n: usize, seed: u64) -> Problem {
    let mut rng = SplitMix64::new(seed);
    let mut buffers = Vec::with_capacity(n);
    let mut step = 0u64;
    while buffers.len() < n {
        let produced = 1 + rng.below(3);
        for _ in 0..produced {
            if buffers.len() >= n {
                break;
            }
            let kind = rng.below(100);
            let len = if kind < 75 {
                1 + rng.below(4) + rng.below(4) * rng.below(3)
            } else if kind < 95 {
                1 + rng.below(64)
            } else {
                // Log-uniform over [64, 4096): 2^(6 + 6u).
                let exponent = 6 + rng.below(6);
                (1u64 << exponent) + rng.below(1u64 << exponent)
            };
            let exponent = 8 + rng.below(15);
            let mut size = (1u64 << exponent) + rng.below(1u64 << exponent);
            if rng.below(50) == 0 {
                size *= 1 + rng.below(64);
            }
            if rng.below(4) != 0 {
                size = size.div_ceil(256) * 256;
            }
            let name = format!("t{}", buffers.len());
            buffers.push(Buffer::new(name, step, step + len, size));
        }
        step += 1;
    }
    Problem::new(buffers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_problem() {
        assert_eq!(realistic(500, 7), realistic(500, 7));
        assert_ne!(realistic(500, 7), realistic(500, 8));
        assert_eq!(realistic(500, 7).len(), 500);
    }
}
