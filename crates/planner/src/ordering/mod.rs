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
//! - the same nine again over two other numberings of the nodes, by depth and by height
//!   (`post-order/depth`: see [`numberings`]), since each breaks ties by node index;
//! - the search over executed sets ([`search`]: exact for small graphs, a beam for large
//!   ones), bounded by the best order above;
//! - local improvement ([`local`]) of the best distinct orders so far: nodes, and chains of
//!   nodes, moved to where they lower the peak, until no move gains.
//!
//! The orders that lose on peak are handed back as runners-up ([`RunnerUp`]): where
//! placement misses the winner's peak, the planner places a few of them and the given order
//! too and keeps the smallest arena, so the arena is never above the given order's.
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
    let (base, numbering) = match base.split_once('/') {
        Some((b, "depth")) => (b, ", nodes numbered by depth"),
        Some((b, "height")) => (b, ", nodes numbered by height"),
        _ => (base, ""),
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
        format!("{what}{numbering}, then local improvement")
    } else {
        format!("{what}{numbering}")
    }
}

/// An order the portfolio found that lost to the chosen one on peak, kept for placement:
/// where the chosen order's packing misses its peak, the planner packs these too (see
/// [`choose`]).
#[derive(Clone, Debug)]
pub(crate) struct RunnerUp {
    /// The name of the first algorithm that gave this order.
    pub name: String,
    pub order: Vec<NodeId>,
    /// Its measured peak (never above the given order's).
    pub peak: u64,
}

/// Chooses the schedule; `measure` gives the exact peak of an order.
///
/// Also returns the runners-up: the other distinct orders whose peak is at most the given
/// order's (the given order among them unless it was chosen), the algorithms' own orders
/// first, then local improvement's, each lowest peak first. The peak is what an order
/// needs; the arena is what placement makes of it, and on some graphs (CNN training steps,
/// whose profile local improvement flattens) placement misses one order's peak by more
/// than a runner-up's peak is above it. The planner then places runners-up too, and the
/// given order, so that the arena is never above the given order's either.
pub(crate) fn choose(
    mode: ScheduleMode,
    given: Vec<NodeId>,
    model: Option<&Model>,
    options: &OrderingOptions,
    measure: &mut dyn FnMut(&[NodeId]) -> Result<u64, PlanError>,
) -> Result<(Vec<NodeId>, ScheduleChoice, Vec<RunnerUp>), PlanError> {
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
        return Ok((given, choice, Vec::new()));
    };
    let mut orders = portfolio(model, &given, options, &mut choice.exact);
    // Measure each distinct order once, in portfolio order; the first with the lowest
    // measured peak wins, so the given order wins every tie.
    let mut measured: Vec<RunnerUp> = vec![RunnerUp {
        name: "given".to_owned(),
        order: given,
        peak: given_peak,
    }];
    let mut best = 0usize;
    for (name, order) in orders.drain(..) {
        let peak = match measured.iter().find(|m| m.order == order) {
            Some(m) => m.peak,
            None => {
                let peak = measure(&order)?;
                measured.push(RunnerUp {
                    name: name.clone(),
                    order,
                    peak,
                });
                if peak < choice.peak {
                    best = measured.len() - 1;
                }
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
        }
    }
    let chosen = measured.remove(best);
    let mut runners_up: Vec<RunnerUp> = measured
        .into_iter()
        .filter(|m| m.peak <= given_peak)
        .collect();
    // Orders straight from the algorithms first, then local improvement's, each lowest
    // peak first (a stable sort: equal peaks keep portfolio order). A constructive order's
    // lifetimes nest as the program's do, which best-fit placement packs at the peak;
    // local improvement's moves stretch some lifetimes across others and flatten the
    // profile, and on CNN training steps the packing of those missed their peak by 1-2%
    // where a constructive order's, a little higher, packed at it.
    runners_up.sort_by_key(|m| (m.name.ends_with("+local"), m.peak));
    Ok((chosen.order, choice, runners_up))
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

/// The other numberings of the nodes the portfolio's algorithms run under, each named and
/// given as `new_of` (node `old` becomes `new_of[old]`): every algorithm breaks ties by node
/// index, and on graphs whose many equal layers tie everywhere, the given numbering decides
/// which layer's work comes first. The same program in XLA's two orders gave orders 10%
/// apart (a rematerialised transformer step, a stacked hourglass). So the algorithms run
/// again with the nodes numbered by depth (the longest path from a graph input, ASAP
/// levels: the program's layer order) and by height (the longest path to a sink, ALAP
/// levels), ties by given index; a numbering equal to the given one is skipped.
fn numberings(model: &Model) -> Vec<(&'static str, Vec<u32>)> {
    let n = model.len();
    let topo = model.deps.topological();
    if topo.len() != n {
        return Vec::new();
    }
    let mut depth = vec![0u32; n];
    for &m in &topo {
        let d = model.deps.preds[m as usize]
            .iter()
            .map(|&p| depth[p as usize].saturating_add(1))
            .max()
            .unwrap_or(0);
        depth[m as usize] = d;
    }
    let mut height = vec![0u32; n];
    for &m in topo.iter().rev() {
        let h = model.deps.succs[m as usize]
            .iter()
            .map(|&s| height[s as usize].saturating_add(1))
            .max()
            .unwrap_or(0);
        height[m as usize] = h;
    }
    let rank = |key: &dyn Fn(u32) -> (u32, u32)| -> Vec<u32> {
        let mut by: Vec<u32> = (0..n as u32).collect();
        by.sort_by_key(|&m| key(m));
        let mut new_of = vec![0u32; n];
        for (new, &old) in (0u32..).zip(&by) {
            new_of[old as usize] = new;
        }
        new_of
    };
    let identity = |v: &[u32]| (0u32..).zip(v).all(|(i, &x)| i == x);
    [
        ("depth", rank(&|m| (depth[m as usize], m))),
        ("height", rank(&|m| (u32::MAX - height[m as usize], m))),
    ]
    .into_iter()
    .filter(|(_, v)| !identity(v))
    .collect()
}

/// Every order of the portfolio, named, in the order they are reported (the given order
/// not included). `exact` is set when the search over executed sets finished.
///
/// First the nine algorithms over the given numbering, the search and local improvement of
/// the best `local_starts` of those; then the nine over each other numbering
/// ([`numberings`]): the best `numbering_starts` of each that are new, and their local
/// improvement. Every start gets the same share of work, so the first part is what it would
/// be alone, and the choice (first lowest peak wins) can only improve on it.
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
    let mut starts: Vec<(String, Vec<NodeId>)> = Vec::new();
    add_starts(&mut starts, ranked, options.local_starts);
    let n = u64::try_from(model.len()).unwrap_or(u64::MAX);
    let share = options
        .local_work_per_node
        .saturating_mul(n)
        .checked_div(u64::try_from(starts.len()).unwrap_or(1))
        .unwrap_or(0);
    let improve = |starts: &[(String, Vec<NodeId>)], orders: &mut Vec<(String, Vec<NodeId>)>| {
        for (name, order) in starts {
            let (improved, moves) = local::improve(model, order, share);
            if moves > 0 && model.deps.respects(&improved) {
                orders.push((format!("{name}+local"), improved));
            }
        }
    };
    improve(&starts, &mut orders);
    for (suffix, new_of) in numberings(model) {
        let renumbered = model.renumbered(&new_of);
        let mut old_of = vec![0u32; new_of.len()];
        for (old, &new) in (0u32..).zip(&new_of) {
            if let Some(o) = old_of.get_mut(new as usize) {
                *o = old;
            }
        }
        let mut ranked: Vec<(u64, String, Vec<NodeId>)> = Vec::new();
        for (name, f) in &ALGORITHMS {
            let order: Vec<NodeId> = f(&renumbered)
                .into_iter()
                .map(|m| NodeId(old_of.get(m.0 as usize).copied().unwrap_or(m.0)))
                .collect();
            if model.deps.respects(&order) && !orders.iter().any(|(_, o)| *o == order) {
                ranked.push((model.peak(&order), format!("{name}/{suffix}"), order));
            }
        }
        // Only the starts become candidates: the caller measures every candidate, which on
        // graphs with views and Concats costs an analysis each.
        let before = starts.len();
        add_starts(&mut starts, ranked, before + options.numbering_starts);
        let new_starts = starts.get(before..).unwrap_or(&[]).to_vec();
        orders.extend(new_starts.iter().cloned());
        improve(&new_starts, &mut orders);
    }
    orders
}

/// Adds to `starts` the orders of `ranked` (peak, name, order) lowest peak first (ties:
/// their order in `ranked`) that are not among them yet, up to `limit` starts in all.
fn add_starts(
    starts: &mut Vec<(String, Vec<NodeId>)>,
    mut ranked: Vec<(u64, String, Vec<NodeId>)>,
    limit: usize,
) {
    ranked.sort_by_key(|r| r.0);
    for (_, name, order) in ranked {
        if starts.len() >= limit {
            break;
        }
        if !starts.iter().any(|(_, o)| *o == order) {
            starts.push((name, order));
        }
    }
}
