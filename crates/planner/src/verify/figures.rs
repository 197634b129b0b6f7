//! The verifier's check of a plan's figures: every number a plan states about itself must
//! be what its own buffers, weights and workspaces make (issue 36). A person or a runtime
//! sizes memory from these figures; the rest of the verifier checks that the placement is
//! safe, this that the figures describe it.
//!
//! Stated on its own, from the plan's definition and sharing no code with the planner's
//! `placement` or the packing engine's bound:
//!
//! - `arena_bytes` is the end of the highest buffer or workspace (a strided Concat part
//!   ends at its last run); `weight_bytes` the end of the highest weight;
//! - `lower_bound_bytes` is the most bytes live at one step of the plan's storages (each
//!   root's bytes, live from its first member's first step to its last member's last, and
//!   each workspace at its step), refined for alignment: for each alignment `A` that a
//!   storage has, the storages live at a step whose alignment is at least `A`, each rounded
//!   up to `A`, less `A - 1` (sorted by offset, each starts on a multiple of `A`, so the
//!   next starts a rounded size above it). It is at most `arena_bytes`;
//! - `naive_bytes` is every arena tensor side by side in tensor id order, each at an offset
//!   aligned for it;
//! - the counts of views, in-place writes, Concat parts and storages, and the unaliased
//!   lower bound (the same bound with every arena tensor a storage of its own, live over
//!   its own steps), are those of the buffers; the schedule's recorded peak is its lower
//!   bound, and the order-free bound is at most the peak of every order measured.
//!
//! A tensor's alignment is the plan's, raised to its dtype's natural one and to any
//! per-dtype alignment the plan records ([`crate::PlanSettings::dtype_alignment`]). The
//! figures are the plan's at its own bindings: a plan re-sized below its bounds
//! ([`Plan::at_values`]) keeps the figures of the bound, and is not checked here. Stats a
//! plan file did not carry (read back as `placed_by` "plan file") are not checked.

use std::collections::BTreeMap;

use memplan_ir::{Graph, TensorId};

use super::PlanViolation;
use crate::plan::{Alias, Plan};

/// The figures of `plan` (and of each body plan of its workspaces) that are not what its
/// placement makes. Sizes come from the plan's buffers; [`crate::verify_plan`] checks those
/// against the graph.
pub fn verify_plan_figures(graph: &Graph, plan: &Plan) -> Vec<PlanViolation> {
    let mut out = Vec::new();
    figures(graph, plan, &mut out);
    for w in &plan.workspaces {
        let Some(node) = graph.nodes().get(w.node) else {
            continue;
        };
        for body in &w.bodies {
            let Some(b) = node.bodies.iter().find(|b| b.attr == body.attr) else {
                continue;
            };
            for problem in verify_plan_figures(&b.graph, &body.plan) {
                out.push(PlanViolation::InBody {
                    node: w.node,
                    attr: body.attr.clone(),
                    problem: Box::new(problem),
                });
            }
        }
    }
    out
}

/// One alignment class of a storage or workspace: size, alignment, live steps `[a, b)`.
struct Live {
    size: u64,
    align: u64,
    from: u64,
    to: u64,
}

fn round_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a).saturating_mul(a)
}

/// The largest over steps and alignment classes of the live bytes rounded to the class,
/// less the class's slack (see the module docs).
fn bound(items: &[Live]) -> u64 {
    let mut classes: Vec<u64> = items.iter().map(|l| l.align).collect();
    classes.push(1);
    classes.sort_unstable();
    classes.dedup();
    // Events sorted by step, ends before starts (half-open intervals).
    let mut events: Vec<(u64, bool, usize)> = Vec::with_capacity(items.len() * 2);
    for (i, l) in items.iter().enumerate() {
        if l.size > 0 && l.to > l.from {
            events.push((l.from, true, i));
            events.push((l.to, false, i));
        }
    }
    events.sort_unstable();
    let mut best = 0u64;
    for &class in &classes {
        let mut live = 0u64;
        for &(_, start, i) in &events {
            let l = &items[i];
            if l.align < class {
                continue;
            }
            let r = round_up(l.size, class);
            if start {
                live = live.saturating_add(r);
                best = best.max(live.saturating_sub(class - 1));
            } else {
                live = live.saturating_sub(r);
            }
        }
    }
    best
}

fn figures(graph: &Graph, plan: &Plan, out: &mut Vec<PlanViolation>) {
    let mut wrong = |figure: &'static str, said: u64, made: u64| {
        if said != made {
            out.push(PlanViolation::WrongFigure { figure, said, made });
        }
    };
    let align_of = |t: TensorId| -> u64 {
        let Some(tensor) = graph.tensors().get(t) else {
            return plan.alignment.max(1);
        };
        let natural = tensor.dtype.element_align();
        plan.settings
            .dtype_alignment
            .iter()
            .filter(|(d, _)| *d == tensor.dtype)
            .map(|&(_, a)| a)
            .fold(plan.alignment.max(natural), u64::max)
    };
    // Where each buffer ends (a strided part at its last run).
    let end_of = |b: &crate::plan::PlannedBuffer| -> u64 {
        match crate::concat::strided_part(graph, plan, b) {
            Some((rows, stride)) if rows > 1 => {
                let run = b.bytes / rows;
                b.offset
                    .saturating_add(stride.saturating_mul(rows - 1))
                    .saturating_add(run)
            }
            _ => b.offset.saturating_add(b.bytes),
        }
    };
    let arena_end = plan
        .buffers
        .iter()
        .map(end_of)
        .chain(
            plan.workspaces
                .iter()
                .map(|w| w.offset.saturating_add(w.bytes)),
        )
        .max()
        .unwrap_or(0);
    wrong("arena_bytes", plan.arena_bytes, arena_end);
    let weight_end = plan
        .weights
        .iter()
        .map(|w| w.offset.saturating_add(w.bytes))
        .max()
        .unwrap_or(0);
    wrong("weight_bytes", plan.weight_bytes, weight_end);

    // Storages: each buffer's root, following its parents (a cycle or a missing parent is
    // the verifier's to report; such a buffer counts as a storage of its own here).
    let index: BTreeMap<TensorId, usize> = plan
        .buffers
        .iter()
        .enumerate()
        .map(|(i, b)| (b.tensor, i))
        .collect();
    let root_of = |mut i: usize| -> usize {
        for _ in 0..plan.buffers.len() {
            let parent = match plan.buffers[i].alias {
                Some(Alias::View { of, .. } | Alias::InPlace { of } | Alias::Part { of, .. }) => {
                    index.get(&of).copied()
                }
                None => None,
            };
            match parent {
                Some(p) => i = p,
                None => return i,
            }
        }
        i
    };
    let mut span: BTreeMap<usize, (u64, u64)> = BTreeMap::new();
    for (i, b) in plan.buffers.iter().enumerate() {
        let r = root_of(i);
        let e = span
            .entry(r)
            .or_insert((u64::from(b.first), u64::from(b.last)));
        e.0 = e.0.min(u64::from(b.first));
        e.1 = e.1.max(u64::from(b.last));
    }
    let workspaces = plan.workspaces.iter().map(|w| Live {
        size: w.bytes,
        align: plan.alignment.max(1),
        from: u64::from(w.step),
        to: u64::from(w.step) + 1,
    });
    let storages: Vec<Live> = span
        .iter()
        .map(|(&r, &(first, last))| {
            let b = &plan.buffers[r];
            Live {
                size: b.bytes,
                align: align_of(b.tensor),
                from: first,
                to: last + 1,
            }
        })
        .chain(workspaces.clone())
        .collect();
    let lower = bound(&storages);
    if plan.lower_bound_bytes > plan.arena_bytes {
        out.push(PlanViolation::BoundAboveArena {
            bound: plan.lower_bound_bytes,
            arena: plan.arena_bytes,
        });
    }
    let mut wrong = |figure: &'static str, said: u64, made: u64| {
        if said != made {
            out.push(PlanViolation::WrongFigure { figure, said, made });
        }
    };
    wrong("lower_bound_bytes", plan.lower_bound_bytes, lower);
    let mut naive = 0u64;
    for b in &plan.buffers {
        naive = round_up(naive, align_of(b.tensor)).saturating_add(b.bytes);
    }
    wrong("naive_bytes", plan.naive_bytes, naive);

    let s = &plan.stats;
    if s.placed_by == "plan file" {
        return;
    }
    let count = |kind: crate::AliasKind| {
        u64::try_from(
            plan.buffers
                .iter()
                .filter(|b| b.alias_kind() == Some(kind))
                .count(),
        )
        .unwrap_or(u64::MAX)
    };
    for (figure, said, kind) in [
        ("stats.views", s.views, crate::AliasKind::View),
        ("stats.inplace", s.inplace, crate::AliasKind::InPlace),
        ("stats.parts", s.parts, crate::AliasKind::Part),
    ] {
        wrong(figure, u64::from(said), count(kind));
    }
    wrong(
        "stats.storages",
        u64::from(s.storages),
        u64::try_from(span.len()).unwrap_or(u64::MAX),
    );
    let unaliased: Vec<Live> = plan
        .buffers
        .iter()
        .map(|b| Live {
            size: b.bytes,
            align: align_of(b.tensor),
            from: u64::from(b.first),
            to: u64::from(b.last) + 1,
        })
        .chain(workspaces)
        .collect();
    wrong(
        "stats.unaliased_lower_bound",
        s.unaliased_lower_bound,
        bound(&unaliased),
    );
    wrong("stats.peak", s.schedule.peak, lower);
    let floor = s.schedule.any_order_bound;
    let above = |peak: u64| peak < floor;
    if above(s.schedule.peak)
        || above(s.schedule.given_peak)
        || s.schedule.candidates.iter().any(|c| above(c.peak))
    {
        out.push(PlanViolation::WrongFigure {
            figure: "stats.any_order_bound",
            said: floor,
            made: s
                .schedule
                .candidates
                .iter()
                .map(|c| c.peak)
                .chain([s.schedule.peak, s.schedule.given_peak])
                .min()
                .unwrap_or(0),
        });
    }
}
