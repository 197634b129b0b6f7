//! Plans made at upper bounds (`memplan plan --bound`), checked below them.
//!
//! A plan whose settings name bounded symbols ([`crate::PlanSettings::bounded`]) claims to
//! hold for every value of each from 0 up to the value it records. The verifier takes it at
//! its word: besides the recorded values it checks the same placement, every buffer re-sized
//! ([`Plan::at_values`]), at smaller ones: every bounded symbol at 0, at 1, at 2, at half its
//! bound and one below it, and (for up to 16 such symbols) each one alone at 0 and at 1 with
//! the others at their bounds. A value is never above the symbol's own bound in the graph
//! at the values before it, so each binding is one the graph allows. A view, Concat part or
//! in-place write whose place moves with such a value shows up here as a misplaced alias.

use memplan_ir::{Bindings, Graph};

use crate::plan::{Alias, Plan};

use super::{AliasFault, PlanViolation, rules};

/// The smaller bindings to check, each as the full list of the plan's values.
fn probes(graph: &Graph, plan: &Plan) -> Vec<Vec<(String, u64)>> {
    let set = &plan.settings;
    let bounded: Vec<(String, u64)> = set
        .bindings
        .iter()
        .filter(|(n, _)| set.bounded.contains(n))
        .cloned()
        .collect();
    if bounded.is_empty() {
        return Vec::new();
    }
    let mut wanted: Vec<Vec<u64>> = Vec::new();
    let uniform: [fn(u64) -> u64; 5] = [|_| 0, |_| 1, |_| 2, |b| b / 2, |b| b.saturating_sub(1)];
    for f in uniform {
        wanted.push(bounded.iter().map(|(_, b)| f(*b).min(*b)).collect());
    }
    if bounded.len() <= 16 {
        for i in 0..bounded.len() {
            for v in [0, 1] {
                wanted.push(
                    bounded
                        .iter()
                        .enumerate()
                        .map(|(j, (_, b))| if i == j { v.min(*b) } else { *b })
                        .collect(),
                );
            }
        }
    }
    let mut out: Vec<Vec<(String, u64)>> = Vec::new();
    for values in wanted {
        // In symbol order (the recorded bindings are), each at most its graph bound at the
        // values chosen so far.
        let mut bindings = Bindings::new();
        let mut full = set.bindings.clone();
        let mut k = 0;
        for (name, value) in &mut full {
            let Some(s) = graph.find_symbol(name) else {
                continue;
            };
            if set.bounded.contains(name) {
                let mut v = values[k];
                k += 1;
                if let Some(Ok(most)) = graph.symbol_bound(s).map(|e| e.eval(&bindings)) {
                    v = v.min(most);
                }
                *value = v;
            }
            bindings.set(s, *value);
        }
        if full != set.bindings && !out.contains(&full) {
            out.push(full);
        }
    }
    out
}

/// The problems of `plan` at the first smaller binding where it has any (see the module
/// docs); `check` verifies one plan.
pub(super) fn check(
    graph: &Graph,
    plan: &Plan,
    check: &mut dyn FnMut(&Plan) -> Vec<PlanViolation>,
) -> Option<PlanViolation> {
    for values in probes(graph, plan) {
        let shown = values
            .iter()
            .filter(|(n, _)| plan.settings.bounded.contains(n))
            .map(|(n, v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut small = match plan.at_values(graph, &values) {
            Ok(p) => p,
            Err(reason) => {
                return Some(PlanViolation::BadBound {
                    values: shown,
                    reason,
                });
            }
        };
        forget_bounds(&mut small);
        let mut problems = moving_strides(graph, plan, &values);
        problems.extend(check(&small));
        if let Some(first) = problems.first() {
            return Some(PlanViolation::BelowBound {
                values: shown,
                problem: Box::new(first.clone()),
                count: problems.len(),
            });
        }
    }
    None
}

/// The strided Concat parts of `plan` whose runs lie another stride apart at `values` than
/// at the plan's own bindings. The plan file records one stride per part (its bytes are
/// `rows` runs, each `stride` after the last): a runtime that follows it writes the rows
/// there at every value, so the stride must not move. (The re-sized plan's own check
/// cannot see it: it derives each part's runs from the Concat at the values it checks.)
fn moving_strides(graph: &Graph, plan: &Plan, values: &[(String, u64)]) -> Vec<PlanViolation> {
    let bind = |list: &[(String, u64)]| {
        let mut b = Bindings::new();
        for (name, value) in list {
            if let Some(s) = graph.find_symbol(name) {
                b.set(s, *value);
            }
        }
        b
    };
    let (at_plan, at_values) = (bind(&plan.settings.bindings), bind(values));
    let producers = graph.producers();
    let mut out = Vec::new();
    for b in &plan.buffers {
        let Some(Alias::Part { of, .. }) = b.alias else {
            continue;
        };
        let Some(node) = producers.get(of).copied().flatten().map(|n| graph.node(n)) else {
            continue;
        };
        let Some(pos) = node.inputs.iter().position(|&x| x == Some(b.tensor)) else {
            continue;
        };
        let slot = |bindings: &Bindings| rules::concat_slot(graph, node, pos, bindings);
        if let (Some(planned), Some(small)) = (slot(&at_plan), slot(&at_values))
            && planned.rows > 1
            && small.rows > 1
            && planned.stride != small.stride
        {
            out.push(PlanViolation::BadAlias {
                tensor: b.tensor,
                parent: Some(of),
                reason: AliasFault::StrideMoves,
            });
        }
    }
    out
}

/// The plan at its values, as if it had been made for them (its bodies' plans too): so that
/// checking it does not probe below them again.
fn forget_bounds(plan: &mut Plan) {
    plan.settings.bounded.clear();
    for w in &mut plan.workspaces {
        for body in &mut w.bodies {
            forget_bounds(&mut body.plan);
        }
    }
}
