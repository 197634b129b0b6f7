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
//!
//! [`heavy_tailed`] is harder on the engine: most buffers die within a few steps, but a few
//! percent live for thousands of steps, and that tail grows with `n`, so the number of
//! buffers live at once grows too and a long-lived buffer spans many time buckets.

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
    schedule(n, seed, |rng| {
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
        (len, size)
    })
}

/// Walks a schedule of steps, each producing one to three buffers whose lifetime and size
/// `draw` picks, until there are `n`. The buffers have no names.
fn schedule(n: usize, seed: u64, mut draw: impl FnMut(&mut SplitMix64) -> (u64, u64)) -> Problem {
    let mut rng = SplitMix64::new(seed);
    let mut buffers = Vec::with_capacity(n);
    let mut step = 0u64;
    while buffers.len() < n {
        let produced = 1 + rng.below(3);
        for _ in 0..produced {
            if buffers.len() >= n {
                break;
            }
            let (len, size) = draw(&mut rng);
            buffers.push(Buffer::new(step, step + len, size));
        }
        step += 1;
    }
    Problem::new(buffers)
}

/// A heavy-tailed problem with `n` buffers (see the module docs); no capacity, alignment 1.
///
/// Each step produces one to three buffers. Nine in ten die within four steps, one in
/// twenty lives up to 64 steps, and one in twenty-five is long-lived: log-uniform between
/// 256 steps and [`heavy_tail_steps`]`(n)`, which grows with `n` (skip connections, saved
/// activations, KV caches). Sizes are log-uniform over 256 B – 4 MiB.
pub fn heavy_tailed(n: usize, seed: u64) -> Problem {
    let tail = heavy_tail_steps(n);
    schedule(n, seed, |rng| {
        let kind = rng.below(100);
        let len = if kind < 91 {
            1 + rng.below(4)
        } else if kind < 96 {
            1 + rng.below(64)
        } else {
            log_uniform(rng, 256, tail)
        };
        (len, log_uniform(rng, 256, 4 << 20))
    })
}

/// The longest lifetime of [`heavy_tailed`]'s tail, in steps: `n / 64`, at least 4096.
pub fn heavy_tail_steps(n: usize) -> u64 {
    (n as u64 / 64).max(4096)
}

/// A number in `[lo, hi)`, log-uniform (`lo >= 1`, `hi > lo`).
fn log_uniform(rng: &mut SplitMix64, lo: u64, hi: u64) -> u64 {
    // 2^(log2 lo + u * log2(hi / lo)), with u in [0, 1) from 53 random bits.
    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    let (a, b) = ((lo as f64).ln(), (hi as f64).ln());
    ((a + u * (b - a)).exp() as u64).clamp(lo, hi - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_problem() {
        assert_eq!(realistic(500, 7), realistic(500, 7));
        assert_ne!(realistic(500, 7), realistic(500, 8));
        assert_eq!(realistic(500, 7).len(), 500);
        assert_eq!(heavy_tailed(500, 7), heavy_tailed(500, 7));
        assert_ne!(heavy_tailed(500, 7), heavy_tailed(500, 8));
    }

    #[test]
    fn heavy_tailed_has_a_long_tail_that_grows_with_n() {
        for n in [30_000usize, 300_000] {
            let p = heavy_tailed(n, 1);
            assert_eq!(p.len(), n);
            let lens: Vec<u64> = p.buffers.iter().map(|b| b.end - b.start).collect();
            let short = lens.iter().filter(|&&l| l <= 4).count();
            let long = lens.iter().filter(|&&l| l >= 256).count();
            assert!(short * 10 >= n * 8, "{n}: {short} short");
            assert!(
                long * 100 >= n * 3 && long * 100 <= n * 6,
                "{n}: {long} long"
            );
            let max = lens.iter().copied().max().unwrap_or(0);
            assert!(
                max >= heavy_tail_steps(n) / 2 && max < heavy_tail_steps(n),
                "{n}: {max}"
            );
            assert!(p.buffers.iter().all(|b| (256..4 << 20).contains(&b.size)));
        }
        assert!(heavy_tail_steps(1_000_000) > heavy_tail_steps(30_000));
    }
}
