//! The limits `memplan solve` gives the packing engine: a time limit that is a cap, a node
//! budget for `--minimize`, a capacity's own search ([`options`]).

use std::time::Duration;

use memplan_packing::{Gap, SolveOptions, Strategy};

use crate::{Context, Result};

/// The node budget for `--minimize` runs without explicit limits.
pub const SEARCH_NODE_LIMIT: u64 = 5_000_000;

/// What `memplan solve` asks of the packing engine.
#[derive(Clone, Copy, Debug, Default)]
pub struct SolveSettings {
    /// The strategy.
    pub strategy: Strategy,
    /// The largest arena allowed.
    pub capacity: Option<u64>,
    /// Keep searching for a smaller arena after the heuristic.
    pub minimize: bool,
    /// Seconds the search may take.
    pub time_limit: Option<f64>,
    /// Nodes the exact search may visit.
    pub node_limit: Option<u64>,
    /// Stop once within this fraction of the lower bound.
    pub gap: Gap,
    /// Threads (0: the machine's).
    pub threads: usize,
}

/// The engine's options for `settings`: without a time limit, a minute's clock for a capacity
/// or `minimize` (with a larger node budget for the latter), the engine's defaults otherwise.
pub fn options(settings: &SolveSettings) -> Result<SolveOptions> {
    let defaults = SolveOptions::default();
    let (time_limit, node_limit) = match settings.time_limit {
        Some(secs) => {
            let limit = Duration::try_from_secs_f64(secs)
                .with_context(|| format!("--time-limit {secs} is not a duration in seconds"))?;
            (limit, settings.node_limit)
        }
        // An arena to minimize is worth a real search: a larger node budget, still
        // deterministic, with a minute's clock as the safety net.
        None if settings.minimize => (
            Duration::from_secs(60),
            Some(settings.node_limit.unwrap_or(SEARCH_NODE_LIMIT)),
        ),
        // A capacity: the default budget, so that the answer is the default one whenever
        // that fits (and costs what it costs); a capacity it misses gets a search of its own
        // under it (`SolveOptions::capacity`), with a minute's clock as the safety net.
        None if settings.capacity.is_some() => (
            Duration::from_secs(60),
            settings.node_limit.or(defaults.node_limit),
        ),
        None => (
            defaults.time_limit,
            settings.node_limit.or(defaults.node_limit),
        ),
    };
    Ok(SolveOptions {
        strategy: settings.strategy,
        time_limit,
        node_limit,
        capacity: settings.capacity,
        minimize: settings.minimize,
        gap: settings.gap,
        threads: settings.threads,
    })
}
