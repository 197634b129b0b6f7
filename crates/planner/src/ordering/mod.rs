//! Ordering: the execution order to plan for.
//!
//! [`ScheduleMode::Given`] keeps the graph's node order. [`ScheduleMode::Memory`] runs a
//! portfolio of orders and keeps the one with the lowest peak:
//!
//! - memplan's own: depth-first, breadth-first (also XLA's `BFScheduler`), and a greedy that
//!   runs the ready node leaving the least memory ([`heuristics`]);
//! - XLA's memory schedulers: its list scheduler, its DFS scheduler and its post-order
//!   ([`xla`]);
//! - PyTorch Inductor's `reorder_for_peak_memory` orders: least peak memory first, BFS and
//!   DFS ([`inductor`]);
//! - the search over executed sets ([`search`]: exact for small graphs, a beam for large
//!   ones), bounded by the best order above;
//! - local improvement ([`local`]) of the best distinct orders so far: nodes, and chains of
//!   nodes, moved to where they lower the peak, until no move gains.
//!
//! Every algorithm reads which node may run when from one dependency model ([`deps`]), and
//! an order that breaks it is dropped. Each order is ranked in the memory [`model`], then
//! *measured* by the caller's `measure` (the lower bound of its lifetimes with the chosen
//! aliasing); the first with the smallest measured peak wins. The given order is measured
//! first, so the result is never worse than it. Every search is bounded by counts of work
//! ([`OrderingOptions`]), so the choice depends only on the input.

pub(crate) mod deps;
mod heuristics;
mod inductor;
mod local;
pub(crate) mod model;
mod profile;
mod search;
#[cfg(test)]
mod tests;
mod xla;

use memplan_ir::NodeId;

use crate::error::PlanError;
use crate::options::{OrderingOptions, ScheduleMode};
use crate::plan::{OrderCandidate, ScheduleChoice};
use model::Model;

/// What the order named `name` in a [`ScheduleChoice`] is, in words: `xla-list+local` is
/// "XLA's list scheduler, then local improvement".
pub fn describe_order(name: &str) -> String {
    let (base, local) = match name.strip_suffix("+local") {
        Some(b) => (b, true),
        None => (name, false),
    };
    let what = match base {
        "given" => "the graph's own order",
        "caller" => "the caller's order",
        "depth-first" => "memplan's depth-first order",
        "breadth-first" => "breadth-first, as XLA's BFS scheduler",
        "greedy" => "memplan's greedy: least memory after each step",
        "xla-list" => "XLA's list scheduler",
        "xla-dfs" => "XLA's DFS memory scheduler",
        "post-order" => "XLA's post-order",
        "inductor-lpmf" => "Inductor's least-peak-memory-first",
        "inductor-bfs" => "Inductor's BFS",
        "inductor-dfs" => "Inductor's DFS",
        "exact" => "the exact search over executed sets",
        "beam" => "the beam search over executed sets",
        other => other,
    };
    if local {
        format!("{what}, then local improvement")
    } else {
        what.to_owned()
    }
}

/// Chooses the schedule; `measure` gives the exact peak of an order.
pub(crate) fn choose(
    mode: ScheduleMode,
    given: Vec<NodeId>,
    model: Option<&Model>,
    options: &OrderingOptions,
    measure: &mut dyn FnMut(&[NodeId]) -> Result<u64, PlanError>,
) -> Result<(Vec<NodeId>, ScheduleChoice), PlanError> {
    let given_peak = measure(&given)?;
    let mut choice = ScheduleChoice {
        mode,
        chosen: "given".to_owned(),
        given_peak,
        peak: given_peak,
        candidates: vec![OrderCandidate {
            name: "given".to_owned(),
            peak: given_peak,
        }],
        exact: false,
        any_order_bound: 0,
    };
    let (ScheduleMode::Memory, Some(model)) = (mode, model) else {
        return Ok((given, choice));
    };
    let mut orders = portfolio(model, &given, options, &mut choice.exact);
    // Measure each distinct order once, in portfolio order; the first with the lowest
    // measured peak wins, so the given order wins every tie.
    let mut measured: Vec<(Vec<NodeId>, u64)> = vec![(given.clone(), given_peak)];
    let mut best = given;
    for (name, order) in orders.drain(..) {
        let peak = match measured.iter().find(|(o, _)| *o == order) {
            Some(&(_, peak)) => peak,
            None => {
                let peak = measure(&order)?;
                measured.push((order.clone(), peak));
                peak
            }
        };
        choice.candidates.push(OrderCandidate {
            name: name.clone(),
            peak,
        });
        if peak < choice.peak {
            choice.peak = peak;
            choice.chosen = name;
            best = order;
        }
    }
    Ok((best, choice))
}

/// An order of the portfolio, computed from the model alone.
type Algorithm = fn(&Model) -> Vec<NodeId>;

/// The portfolio's orders, by the names reports give them.
const ALGORITHMS: [(&str, Algorithm); 9] = [
    ("depth-first", heuristics::depth_first),
    ("breadth-first", heuristics::breadth_first),
    ("greedy", heuristics::greedy),
    ("xla-list", xla::list),
    ("xla-dfs", xla::dfs),
    ("post-order", xla::post_order),
    ("inductor-lpmf", inductor::lpmf),
    ("inductor-bfs", inductor::bfs),
    ("inductor-dfs", inductor::dfs),
];

/// Every order of the portfolio, named, in the order they are reported (the given order
/// not included). `exact` is set when the search over executed sets finished.
fn portfolio(
    model: &Model,
    given: &[NodeId],
    options: &OrderingOptions,
    exact: &mut bool,
) -> Vec<(String, Vec<NodeId>)> {
    let mut orders: Vec<(String, Vec<NodeId>)> = ALGORITHMS
        .iter()
        .map(|(name, f)| ((*name).to_owned(), f(model)))
        .filter(|(_, o)| model.deps.respects(o))
        .collect();
    let mut ranked: Vec<(u64, String, Vec<NodeId>)> =
        std::iter::once(("given".to_owned(), given.to_vec()))
            .filter(|(_, o)| model.deps.respects(o))
            .chain(orders.iter().cloned())
            .map(|(name, o)| (model.peak(&o), name, o))
            .collect();
    let bound = ranked.iter().map(|r| r.0).min().unwrap_or(u64::MAX);
    let found = search::search(model, bound, options);
    *exact = found.exact;
    if let Some(order) = found.order
        && model.deps.respects(&order)
    {
        let name = if found.exact { "exact" } else { "beam" };
        ranked.push((model.peak(&order), name.to_owned(), order.clone()));
        orders.push((name.to_owned(), order));
    }
    if found.exact {
        // Nothing beats the exact search's order in the model.
        return orders;
    }
    // Local improvement from the best distinct orders (ties: portfolio order).
    ranked.sort_by_key(|r| r.0);
    let mut starts: Vec<(String, Vec<NodeId>)> = Vec::new();
    for (_, name, order) in ranked {
        if starts.len() >= options.local_starts {
            break;
        }
        if !starts.iter().any(|(_, o)| *o == order) {
            starts.push((name, order));
        }
    }
    let n = u64::try_from(model.len()).unwrap_or(u64::MAX);
    let share = options
        .local_work_per_node
        .saturating_mul(n)
        .checked_div(u64::try_from(starts.len()).unwrap_or(1))
        .unwrap_or(0);
    for (name, order) in starts {
        let (improved, moves) = local::improve(model, &order, share);
        if moves > 0 && model.deps.respects(&improved) {
            orders.push((format!("{name}+local"), improved));
        }
    }
    orders
}
