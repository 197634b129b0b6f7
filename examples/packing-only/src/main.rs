//! A downstream allocator that places its own buffers with memplan's packing engine alone.
//!
//! `packing-only [N]` makes a request log of `N` buffers (default 100,000) shaped like an
//! inference server's (short-lived activations, a few long-lived caches), then places it
//! with both presets of `packing_only` and prints the arena, the lower bound, and the time
//! each took.

use std::time::Instant;

use packing_only::{Preset, requests, solve};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = match std::env::args().nth(1) {
        Some(a) => a.parse()?,
        None => 100_000,
    };
    let problem = requests(n, 7);
    for preset in [Preset::Fast, Preset::Thorough] {
        let t = Instant::now();
        let placed = solve(&problem, preset)?;
        println!(
            "{n} buffers, {preset:?}: arena {} bytes, lower bound {} ({:+.2}%), {:.3} s",
            placed.arena,
            placed.lower_bound,
            (placed.arena as f64 / placed.lower_bound.max(1) as f64 - 1.0) * 100.0,
            t.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
