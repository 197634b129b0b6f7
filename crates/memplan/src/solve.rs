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

/// The engine's options for `settings`. A time limit is a cap, never a target: the search
/// stops at its node budget (an arena to minimize is worth a larger one, still deterministic)
/// or when it has answered. Without a time limit, a search for a smaller arena or for a fit
/// gets a minute's clock as the safety net. Only a capacity without `minimize`, under an
/// explicit limit, searches without a node budget: it stops at the first placement that
/// fits, so the limit caps it.
pub fn options(settings: &SolveSettings) -> Result<SolveOptions> {
    let defaults = SolveOptions::default();
    let time_limit = match settings.time_limit {
        Some(secs) => Duration::try_from_secs_f64(secs)
            .with_context(|| format!("--time-limit {secs} is not a duration in seconds"))?,
        None if settings.minimize || settings.capacity.is_some() => Duration::from_secs(60),
        None => defaults.time_limit,
    };
    let node_limit = match (settings.node_limit, settings.time_limit) {
        (Some(n), _) => Some(n),
        (None, _) if settings.minimize => Some(SEARCH_NODE_LIMIT),
        (None, Some(_)) if settings.capacity.is_some() => None,
        (None, _) => defaults.node_limit,
    };
    Ok(SolveOptions::default()
        .with_strategy(settings.strategy)
        .with_time_limit(time_limit)
        .with_node_limit(node_limit)
        .with_capacity(settings.capacity)
        .with_minimize(settings.minimize)
        .with_gap(settings.gap)
        .with_threads(settings.threads))
}
