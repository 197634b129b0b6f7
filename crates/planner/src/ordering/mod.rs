//! Ordering: the execution order to plan for.
//!
//! [`ScheduleMode::Given`] keeps the graph's node order. [`ScheduleMode::Memory`] looks for a
//! topological order with a lower peak: the given order, depth-first, breadth-first, a greedy
//! that runs the ready node which frees the most and allocates the least, and the search over
//! executed sets ([`search`]: exact for small graphs, a beam for large ones). The candidates
//! are ranked in the [`model`], then each is *measured* by the caller's `measure` (the lower
//! bound of its lifetimes with the chosen aliasing), and the first with the smallest measured
//! peak wins. The given order is tried first, so the result is never worse than it.

mod heuristics;
pub(crate) mod model;
mod search;

use memplan_ir::NodeId;

use crate::error::PlanError;
use crate::options::{OrderingOptions, ScheduleMode};
use crate::plan::{OrderCandidate, ScheduleChoice};
use model::Model;

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
    let mut best = given;
    let mut orders: Vec<(&'static str, Vec<NodeId>)> = vec![
        ("depth-first", heuristics::depth_first(model)),
        ("breadth-first", heuristics::breadth_first(model)),
        ("greedy", heuristics::greedy(model)),
    ];
    let bound = std::iter::once(&best)
        .chain(orders.iter().map(|o| &o.1))
        .map(|o| model.peak(o))
        .min()
        .unwrap_or(u64::MAX);
    let found = search::search(model, bound, options);
    choice.exact = found.exact;
    if let Some(order) = found.order {
        orders.push((if found.exact { "exact" } else { "beam" }, order));
    }
    for (name, order) in orders {
        if order.len() != best.len() {
            continue;
        }
        let peak = measure(&order)?;
        choice.candidates.push(OrderCandidate {
            name: name.to_owned(),
            peak,
        });
        if peak < choice.peak {
            choice.peak = peak;
            choice.chosen = name.to_owned();
            best = order;
        }
    }
    Ok((best, choice))
}
