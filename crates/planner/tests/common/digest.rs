//! A compact render of a plan in exact bytes, for the planner's snapshots: every figure a
//! change to the planner could move (arena, bounds, aliasing counts, the schedule's peaks,
//! the largest buffers' offsets) on a line of its own. It is a test fixture, not a report for
//! people: `memplan plan` renders the one user-facing report, in human units.

use std::fmt::Write as _;

use memplan_ir::{Graph, Names};
use memplan_planner::{Plan, PlannedBuffer};

/// The plan's figures in exact bytes: sizes, bounds, the schedule, aliasing, workspaces, and
/// the `top` largest buffers (size descending, then tensor id). The orders a memory-aware
/// schedule tried are left to the caller: `plan_snapshots` lists them for its second plan.
pub fn digest(plan: &Plan, graph: &Graph, top: usize) -> String {
    let mut s = String::new();
    let st = &plan.stats;
    let _ = writeln!(
        s,
        "graph {}: {} nodes, {} tensors",
        plan.graph,
        graph.nodes().len(),
        graph.tensors().len()
    );
    let _ = writeln!(s, "arena:                  {}", human(plan.arena_bytes));
    let _ = writeln!(
        s,
        "lower bound:            {}  arena/bound {}",
        human(plan.lower_bound_bytes),
        ratio(plan.arena_bytes, plan.lower_bound_bytes)
    );
    let _ = writeln!(
        s,
        "no-aliasing bound:      {}  arena/that {}",
        human(st.unaliased_lower_bound),
        ratio(plan.arena_bytes, st.unaliased_lower_bound)
    );
    let _ = writeln!(s, "naive:                  {}", human(plan.naive_bytes));
    let _ = writeln!(
        s,
        "weights:                {} in {} tensors",
        human(plan.weight_bytes),
        plan.weights.len()
    );
    let _ = writeln!(s, "alignment:              {}", plan.alignment);
    let _ = writeln!(
        s,
        "buffers:                {} in {} storages ({} views, {} in place{})",
        plan.buffers.len(),
        st.storages,
        st.views,
        st.inplace,
        if st.parts > 0 {
            format!(", {} written into a Concat", st.parts)
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        s,
        "placement:              {}{}",
        st.placed_by,
        if st.proven_optimal { " (optimal)" } else { "" }
    );
    let sc = &st.schedule;
    let _ = writeln!(
        s,
        "schedule:               {} -> {} (peak {}, given {})",
        sc.mode.name(),
        sc.chosen,
        sc.peak,
        sc.given_peak
    );
    if sc.any_order_bound > 0 {
        let _ = writeln!(
            s,
            "any order needs:        {} (no execution order peaks lower)",
            human(sc.any_order_bound)
        );
    }
    for w in &plan.workspaces {
        let op = graph.nodes().get(w.node).map_or("node", |n| n.op.as_str());
        let _ = writeln!(
            s,
            "workspace of {op} `{}`: {} bytes (offset {}, step {})",
            Names::of(graph).name(w.node),
            w.bytes,
            w.offset,
            w.step
        );
    }
    let mut largest: Vec<&PlannedBuffer> = plan.buffers.iter().collect();
    largest.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.tensor.cmp(&b.tensor)));
    let _ = writeln!(s, "largest buffers:");
    let _ = writeln!(
        s,
        "  {:>12} {:>12} {:>11}  tensor",
        "offset", "bytes", "steps"
    );
    for b in largest.into_iter().take(top) {
        let alias = match b.alias {
            Some(a) => format!(
                "  ({} of {})",
                a.kind().name(),
                Names::of(graph).name(a.of())
            ),
            None => String::new(),
        };
        let steps = format!("{}..={}", b.first, b.last);
        let _ = writeln!(
            s,
            "  {:>12} {:>12} {:>11}  {}{alias}",
            b.offset,
            b.bytes,
            steps,
            Names::of(graph).name(b.tensor)
        );
    }
    s
}

/// `1234567 (1.18 MiB)`.
fn human(bytes: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    #[allow(clippy::cast_precision_loss, reason = "display only")]
    let mib = bytes as f64 / MIB;
    format!("{bytes} ({mib:.2} MiB)")
}

fn ratio(a: u64, b: u64) -> String {
    if b == 0 {
        return "-".to_owned();
    }
    #[allow(clippy::cast_precision_loss, reason = "display only")]
    let r = a as f64 / b as f64;
    format!("{r:.4}")
}
