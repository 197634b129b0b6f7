//! Placement for an allocator's own buffers with `memplan-packing` alone: buffers with
//! lifetimes in, offsets out, checked by the engine's independent verifier.
//!
//! Two presets, speed against quality:
//! - [`Preset::Fast`]: one heuristic, best fit largest first (`Strategy::GreedySize`): a
//!   single pass, for placing on the request path;
//! - [`Preset::Thorough`]: every heuristic, then the exact search or local improvement while
//!   a budget allows (`Strategy::Auto`), for plans made once and kept.

use std::time::Duration;

use memplan_packing::{Buffer, Problem, SolveOptions, Strategy, lower_bound, verify};

/// How hard to look for a small arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preset {
    /// One best-fit pass.
    Fast,
    /// Every heuristic, then search within a budget.
    Thorough,
}

impl Preset {
    /// The solver's options for this preset.
    pub fn options(self) -> SolveOptions {
        match self {
            Preset::Fast => SolveOptions::default().with_strategy(Strategy::GreedySize),
            Preset::Thorough => SolveOptions::default()
                .with_strategy(Strategy::Auto)
                .with_time_limit(Duration::from_secs(5)),
        }
    }
}

/// Where every buffer goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placed {
    /// Each buffer's offset, in the problem's order.
    pub offsets: Vec<u64>,
    /// The arena's size.
    pub arena: u64,
    /// No placement can use less.
    pub lower_bound: u64,
}

/// Places `problem` with `preset`; every placement is checked by the verifier.
pub fn solve(problem: &Problem, preset: Preset) -> Result<Placed, Box<dyn std::error::Error>> {
    let outcome = memplan_packing::solve(problem, &preset.options())?;
    let solution = outcome.solution.ok_or("no placement")?;
    verify(problem, &solution)?;
    Ok(Placed {
        offsets: solution.offsets.clone(),
        arena: outcome.arena,
        lower_bound: lower_bound(problem),
    })
}

/// A request log of `n` buffers, deterministic from `seed`: most live a few steps, one in
/// twenty for hundreds; sizes from 256 B to 1 MiB, multiples of 256.
pub fn requests(n: usize, seed: u64) -> Problem {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let buffers = (0..n as u64)
        .map(|i| {
            let start = i / 2;
            let life = if next() % 20 == 0 {
                100 + next() % 400
            } else {
                1 + next() % 8
            };
            let size = 256 * (1 + next() % 4096);
            Buffer::new(start, start + life, size)
        })
        .collect();
    Problem::new(buffers)
}
