//! The text report of a plan, for `memplan plan` and `memplan fit`: one total device-memory
//! figure first, then what it is made of and how good the arena is, each term said in plain
//! words, sizes in human units (exact bytes are in the plan JSON).
//!
//! The report is a pure function of the graph and the plan: the same input gives the same
//! bytes.

use std::fmt::Write as _;

use memplan_ir::{Graph, TensorKind};
use memplan_planner::{AliasKind, Plan, ScheduleMode};

use crate::{Context as _, Result, group_digits, size};

/// Bytes of the weight region that nodes compute from weights at load (weight entries that
/// are not weights of the graph), and how many nodes compute them.
pub fn computed_from_weights(graph: &Graph, plan: &Plan) -> (u64, u64) {
    let mut computed = memplan_ir::IndexVec::from_elem(false, graph.tensors().len());
    let mut bytes: u64 = 0;
    for w in &plan.weights {
        if let Some(t) = graph.tensors().get(w.tensor)
            && t.kind == TensorKind::Activation
        {
            computed[w.tensor] = true;
            bytes = bytes.saturating_add(w.bytes);
        }
    }
    let nodes = graph
        .nodes()
        .iter()
        .filter(|n| n.outputs.iter().any(|&o| computed[o]))
        .count();
    (bytes, nodes as u64)
}

fn ratio(a: u64, b: u64) -> String {
    if b == 0 {
        return "-".to_owned();
    }
    #[allow(clippy::cast_precision_loss, reason = "display only")]
    let r = a as f64 / b as f64;
    format!("{r:.3}x")
}

/// Steps `first` through `last` for people: `637-638`, or `637` alone.
pub fn steps(first: u32, last: u32) -> String {
    if first == last {
        first.to_string()
    } else {
        format!("{first}-{last}")
    }
}

/// `n` and the noun for it: `1 node`, `1,024 nodes`.
pub fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", group_digits(n), if n == 1 { one } else { many })
}

/// The report, listing the `top` largest buffers; an error when the device total has no
/// answer ([`Plan::device_bytes`]).
#[allow(clippy::too_many_lines, reason = "one report, top to bottom")]
pub fn plan_report(graph: &Graph, plan: &Plan, top: usize) -> Result<String> {
    let mut s = String::new();
    let names = memplan_ir::Names::of(graph);
    let st = &plan.stats;
    let set = &plan.settings;
    let _ = writeln!(
        s,
        "graph {}: {}, {}, {}",
        plan.graph,
        plural(graph.nodes().len() as u64, "node", "nodes"),
        plural(graph.tensors().len() as u64, "tensor", "tensors"),
        plural(plan.schedule.len() as u64, "step", "steps"),
    );
    // Broadcast and divided dims follow from the others: the plan file records them, the
    // report leaves them out.
    let b: Vec<String> = set
        .bindings
        .iter()
        .filter(|(n, _)| !graph.find_symbol(n).is_some_and(|s| graph.is_derived(s)))
        .map(|(n, v)| format!("{n}={v}"))
        .collect();
    if !b.is_empty() {
        let _ = writeln!(s, "with {}", b.join(", "));
    }
    let device = plan
        .device_bytes(graph)
        .with_context(|| format!("the device memory of the plan of graph `{}`", graph.name))?;
    let (caller_in, caller_out, total) =
        (device.caller_inputs, device.caller_outputs, device.total);
    let _ = writeln!(s, "\ndevice memory: {}", memplan_ir::ExactBytes(total));
    let row = |s: &mut String, name: &str, bytes: u64, what: &str| {
        let _ = writeln!(s, "  {name:<17}{:>12}  {what}", size(bytes));
    };
    row(
        &mut s,
        "arena",
        plan.arena_bytes,
        "one block for every activation (and the graph's inputs and outputs unless the caller owns them), its bytes reused once a tensor is dead",
    );
    let state = plan
        .weights
        .iter()
        .filter(|w| {
            graph
                .tensors()
                .get(w.tensor)
                .is_some_and(|t| t.kind == TensorKind::State)
        })
        .count() as u64;
    if state == 0 {
        row(
            &mut s,
            "+ weights",
            plan.weight_bytes,
            &format!(
                "{}, in their own region for the whole run",
                plural(plan.weights.len() as u64, "tensor", "tensors")
            ),
        );
    } else {
        row(
            &mut s,
            "+ persistent",
            plan.weight_bytes,
            &format!(
                "{} and {} (parameters, gradients, optimizer state), never reused",
                plural(plan.weights.len() as u64 - state, "weight", "weights"),
                plural(state, "training-state tensor", "training-state tensors")
            ),
        );
    }
    let (computed, computers) = computed_from_weights(graph, plan);
    if computed > 0 {
        let _ = writeln!(
            s,
            "  {:<31}of which computed once from weights: {}, from {}, at load (--no-fold-weights: on every run, in the arena)",
            "",
            memplan_ir::ExactBytes(computed),
            plural(computers, "node", "nodes")
        );
    }
    if !set.inputs_in_arena {
        row(
            &mut s,
            "+ caller inputs",
            caller_in,
            "graph inputs the caller allocates (--caller-inputs)",
        );
    }
    if !set.outputs_in_arena {
        row(
            &mut s,
            "+ caller outputs",
            caller_out,
            "graph outputs the caller allocates (--caller-outputs)",
        );
    }

    let _ = writeln!(s, "\nhow good the arena is");
    row(
        &mut s,
        "lower bound",
        plan.lower_bound_bytes,
        &format!(
            "the most bytes live at one step: no placement of this schedule can use less (the arena is {} of it)",
            ratio(plan.arena_bytes, plan.lower_bound_bytes)
        ),
    );
    if st.unaliased_lower_bound > 0 {
        row(
            &mut s,
            "without aliasing",
            st.unaliased_lower_bound,
            "the same bound if no tensor shared another's bytes (views and in-place writes off)",
        );
    }
    row(
        &mut s,
        "no reuse",
        plan.naive_bytes,
        "every tensor in a buffer of its own, as one allocation per tensor would need",
    );

    let _ = writeln!(s, "\nhow it was made");
    let sc = &st.schedule;
    let schedule = match sc.mode {
        ScheduleMode::Given => "the graph's own node order".to_owned(),
        ScheduleMode::Memory if sc.chosen == "given" => format!(
            "memory-aware search; the graph's own order was best (peak {})",
            size(sc.peak)
        ),
        ScheduleMode::Memory => format!(
            "memory-aware search chose the `{}` order ({}): peak {}, the graph's own order {}",
            sc.chosen,
            memplan_planner::describe_order(&sc.chosen),
            size(sc.peak),
            size(sc.given_peak)
        ),
        other => format!("the `{}` schedule", other.name()),
    };
    let _ = writeln!(s, "  {:<17}{schedule}", "schedule");
    if sc.any_order_bound > 0 {
        let gap = if sc.peak <= sc.any_order_bound {
            "; this order reaches it, so no order is better".to_owned()
        } else {
            format!(
                "; this order peaks {:.1}% above it",
                (sc.peak as f64 / sc.any_order_bound as f64 - 1.0) * 100.0
            )
        };
        let _ = writeln!(
            s,
            "  {:<17}{}: what every execution order holds live at some moment, so no order peaks lower{gap}",
            "any order needs",
            size(sc.any_order_bound)
        );
    }
    if sc.candidates.len() > 1 {
        let list: Vec<String> = sc
            .candidates
            .iter()
            .map(|c| format!("{} {}", c.name, size(c.peak)))
            .collect();
        let _ = writeln!(
            s,
            "  {:<17}{}{}",
            "orders tried",
            list.join(", "),
            if sc.exact {
                " (the exact search finished: no order is better)"
            } else {
                ""
            }
        );
    }
    let _ = writeln!(
        s,
        "  {:<17}{}{}",
        "placement",
        st.placed_by,
        if st.proven_optimal {
            ", proven optimal for this schedule"
        } else {
            ""
        }
    );
    let _ = writeln!(
        s,
        "  {:<17}{}: {} in {}",
        "sharing",
        match (set.views, set.inplace) {
            (true, true) => "views and in-place writes on",
            (true, false) => "views on, in-place writes off",
            (false, true) => "views off, in-place writes on",
            (false, false) => "views and in-place writes off",
        },
        plural(plan.buffers.len() as u64, "buffer", "buffers"),
        plural(u64::from(st.storages), "storage", "storages"),
    );
    let mut shared = Vec::new();
    if st.views > 0 {
        shared.push(format!(
            "{} inside another tensor's bytes",
            plural(u64::from(st.views), "view", "views")
        ));
    }
    if st.inplace > 0 {
        shared.push(format!(
            "{} over a dead input",
            plural(u64::from(st.inplace), "output written", "outputs written")
        ));
    }
    if st.parts > 0 {
        shared.push(format!(
            "{} straight into a Concat's output",
            plural(u64::from(st.parts), "input written", "inputs written")
        ));
    }
    if !shared.is_empty() {
        let _ = writeln!(s, "  {:<17}{}", "", shared.join(", "));
    }
    let opaque = set.op_table.made_opaque();
    if !opaque.is_empty() {
        let _ = writeln!(
            s,
            "  {:<17}{}: their kernels get outputs of their own",
            "opaque ops",
            opaque.join(", ")
        );
    }
    let _ = writeln!(s, "  {:<17}{} bytes", "alignment", plan.alignment);
    if !set.fold_weights {
        let _ = writeln!(
            s,
            "  {:<17}off: tensors computed from weights alone are activations, computed on every run",
            "weight folding"
        );
    }
    let attention = |n: memplan_ir::NodeId| {
        graph
            .nodes()
            .get(n)
            .is_some_and(|node| memplan_planner::FUSED_ATTENTION_OPS.contains(&node.op.as_str()))
    };
    let fused = graph
        .nodes()
        .iter()
        .filter(|n| memplan_planner::FUSED_ATTENTION_OPS.contains(&n.op.as_str()))
        .count();
    if fused > 0 {
        let largest = plan
            .workspaces
            .iter()
            .filter(|w| attention(w.node))
            .map(|w| w.bytes)
            .max()
            .unwrap_or(0);
        let kernel = match set.attention {
            memplan_planner::AttentionKernel::Eager => {
                "eager kernels (the scores materialised, batch x heads x q x kv; --attention flash for kernels that keep per-row statistics only)"
            }
            memplan_planner::AttentionKernel::Flash => {
                "flash kernels (per-row statistics only; --attention eager for kernels that materialise the scores)"
            }
            _ => "the kernels asked for",
        };
        let _ = writeln!(
            s,
            "  {:<17}{}, scratch up to {} each while it runs: {kernel}",
            "attention",
            plural(fused as u64, "fused node", "fused nodes"),
            size(largest),
        );
    }
    for w in &plan.workspaces {
        if attention(w.node) {
            continue;
        }
        let node = graph.nodes().get(w.node);
        let _ = writeln!(
            s,
            "  {:<17}{} for {} `{}` at step {} (offset {})",
            "workspace",
            size(w.bytes),
            node.map_or("node", |n| n.op.as_str()),
            names.name(w.node),
            w.step,
            group_digits(w.offset)
        );
    }

    if top > 0 && !plan.buffers.is_empty() {
        let mut largest: Vec<_> = plan.buffers.iter().collect();
        largest.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.tensor.cmp(&b.tensor)));
        let shown = top.min(largest.len());
        let _ = writeln!(
            s,
            "\nlargest buffers ({shown} of {})",
            group_digits(plan.buffers.len() as u64)
        );
        let _ = writeln!(
            s,
            "  {:>11} {:>14} {:>11}  tensor",
            "size", "offset", "steps"
        );
        for b in largest.into_iter().take(top) {
            let name = names.name(b.tensor);
            let alias = match (b.alias_kind(), b.parent()) {
                (Some(kind), Some(p)) => {
                    let parent = names.name(p);
                    match kind {
                        AliasKind::View => format!("  (a view inside {parent})"),
                        AliasKind::InPlace => format!("  (written over {parent})"),
                        AliasKind::Part => format!("  (written into its slice of {parent})"),
                    }
                }
                _ => String::new(),
            };
            let _ = writeln!(
                s,
                "  {:>11} {:>14} {:>11}  {name}{alias}",
                size(b.bytes),
                group_digits(b.offset),
                steps(b.first, b.last),
            );
        }
    }
    Ok(s)
}
