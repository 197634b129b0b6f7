//! The graph-level plan verifier: checks a [`Plan`] against its graph, knowing nothing of how
//! the planner made it.
//!
//! It reads the graph (for sizes, producers, readers and tensor kinds), the bindings of its
//! symbols, and the plan's schedule, buffers, weights and settings. Each invariant below is
//! one method of the checker. It checks that the graph is valid, and that:
//!
//! - the schedule runs every node exactly once, each after the producers of its inputs;
//! - every activation with bytes has a buffer, every buffer is an arena tensor with its
//!   true size, listed once, and its `[first, last]` covers the steps the value is needed
//!   (producer, or 0 for a graph input, through the last reader; graph outputs through the
//!   last step);
//! - an alias names a parent in the arena that its producer reads, is of a kind the plan's
//!   settings allow, is one the op's definition allows (judged by the verifier's own rules in
//!   `rules`, written from the ONNX operator definitions and sharing nothing with the
//!   planner's op table: the view at the range's start, or an in-place write over an input
//!   the op reads element by element), and lies inside its root (following parents, without
//!   a cycle);
//! - an in-place write at step `s` overwrites no bytes of its storage that a tensor other than
//!   its own descendants needs: still needed after `s`, read at `s` by another input of the
//!   writing node, a graph output (read by the caller after the last step), or a graph input
//!   when the plan's settings keep inputs intact;
//! - no two storages (a root and everything aliased into it) live at the same step share a
//!   byte; every buffer lies inside the arena; every root offset is a multiple of the plan's
//!   alignment;
//! - every weight with bytes is listed once with its size, inside the weight region, and no
//!   two weights share a byte (every pair, not only neighbours); a tensor computed from
//!   weights alone (the verifier's own rule, `derived`) is there too when the plan's settings
//!   fold such tensors, and in the arena otherwise; nothing else a node makes is in the
//!   weight region;
//! - the alignment is a power of two, and buffers and weights are in tensor id order (what
//!   [`Plan::buffer`] relies on); every graph input and output with bytes has a buffer when
//!   the plan's settings put them in the arena, and none when they leave them to the caller;
//! - the bindings hold together (two dims a broadcast symbol joins do broadcast, a quotient
//!   symbol is its dim's quotient), and the graph's declared shapes are what their ops make
//!   at them (`memplan_ir::Graph::shape_conflicts`: the views, chunks, parts and in-place
//!   writes rest on them; windows that do not fit are refused);
//! - workspaces and values captured by bodies pass `verify_workspace`'s checks (a fused
//!   attention node's workspace holds its kernel's scratch: `kernels`);
//! - a plan made at upper bounds of data-dependent sizes ([`crate::PlanSettings::bounded`])
//!   passes all of the above at smaller values too (`below_bounds`).
//! - a tensor some node updates in place (`mutation`: a gradient accumulator, an optimizer
//!   step) is alone in its storage, every other reader keeps its side of the update in the
//!   graph's node order, and a graph input so updated lives through the last step; `Shape`
//!   and `Size` read no bytes (`rules`);
//! - the backward of a training step reads what each gradient needs (`backward`).
//!
//! All problems are returned, each naming the tensors or nodes involved, in a deterministic
//! order (by check, then by tensor or schedule order).

use memplan_ir::{Bindings, Graph, IndexVec, NodeId, OpTable, TensorId};

use crate::plan::{Plan, PlannedBuffer};

mod aliases;
mod backward;
mod below_bounds;
mod buffers;
pub(crate) mod derived;
mod figures;
mod fusion;
mod header;
pub(crate) mod kernels;
mod mutation;
mod overlaps;
mod rules;
mod schedule;
mod spans;
mod violation;
mod weights;

pub use figures::verify_plan_figures;
pub use fusion::{FusionFault, FusionViolations, verify_fusion};
use spans::Span;
pub use violation::{
    AliasFault, Occupant, PlanList, PlanViolation, PlanViolations, StepFault, WorkspaceFault,
};

/// What [`verify_plan_report`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifyReport {
    /// Problems: the plan is unsafe, or not a plan of this graph.
    pub violations: Vec<PlanViolation>,
    /// Aliases the verifier trusted on the word of a custom op rule (each an
    /// [`PlanViolation::Unconfirmed`]); empty when verifying strictly, which reports them
    /// as violations instead.
    pub trusted: Vec<PlanViolation>,
}

impl VerifyReport {
    /// `Ok` when there are no violations.
    pub fn into_result(self) -> Result<(), PlanViolations> {
        if self.violations.is_empty() {
            Ok(())
        } else {
            Err(PlanViolations(self.violations))
        }
    }
}

/// Checks `plan` against `graph` with the bindings and op table the plan records; returns
/// every problem. Aliases are judged by the verifier's own op rules, those of custom rules
/// it cannot confirm are trusted (see [`verify_plan_report`] to list or refuse them); the
/// plan's recorded settings (views, in-place writes, overwriting inputs) are enforced.
pub fn verify_plan(graph: &Graph, plan: &Plan) -> Result<(), PlanViolations> {
    verify_plan_report(graph, plan, false).into_result()
}

/// Checks `plan` against `graph`; returns the violations and the aliases trusted on the word
/// of a custom op rule (with `strict`, those are violations instead).
pub fn verify_plan_report(graph: &Graph, plan: &Plan, strict: bool) -> VerifyReport {
    let mut report = verify_at(graph, plan, strict);
    // A plan at upper bounds, sound where it was made: checked below them too.
    if report.violations.is_empty()
        && !plan.settings.bounded.is_empty()
        && let Some(v) = below_bounds::check(graph, plan, &mut |small| {
            verify_at(graph, small, strict).violations
        })
    {
        report.violations.push(v);
    }
    report
}

/// [`verify_plan_report`] at the plan's recorded values only.
fn verify_at(graph: &Graph, plan: &Plan, strict: bool) -> VerifyReport {
    if let Err(e) = graph.validate() {
        return VerifyReport {
            violations: vec![PlanViolation::InvalidGraph(e)],
            trusted: Vec::new(),
        };
    }
    let bindings = match plan.settings.bindings_for(graph).map(|b| graph.resolve(&b)) {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => {
            return VerifyReport {
                violations: vec![PlanViolation::Bindings(e)],
                trusted: Vec::new(),
            };
        }
        Err(symbol) => {
            return VerifyReport {
                violations: vec![PlanViolation::UnknownSymbol { symbol }],
                trusted: Vec::new(),
            };
        }
    };
    // The graph's declarations at these bindings (dims declared with a bounded symbol follow
    // the data and are not compared).
    let mut bounded: Vec<memplan_ir::SymbolId> = plan
        .settings
        .bounded
        .iter()
        .filter_map(|name| graph.find_symbol(name))
        .collect();
    // Data-dependent symbols (those with a bound) follow the data too.
    bounded.extend(graph.symbol_bounds().iter().map(|(s, _)| *s));
    let declared: Vec<PlanViolation> = graph
        .shape_conflicts(&bindings, &bounded)
        .into_iter()
        .map(|c| PlanViolation::DeclaredShape {
            node: c.node,
            output: c.output,
            problem: c.kind.to_string(),
        })
        .collect();
    let mut c = Checker {
        graph,
        plan,
        bindings: &bindings,
        ops: &plan.settings.op_table,
        strict,
        out: declared,
        trusted: Vec::new(),
        producers: graph.producers(),
        step_of: IndexVec::from_elem(None, graph.nodes().len()),
        bytes: IndexVec::from_elem(0, graph.tensors().len()),
        need_first: IndexVec::from_elem(0, graph.tensors().len()),
        need_last: IndexVec::from_elem(0, graph.tensors().len()),
        slot: IndexVec::from_elem(None, graph.tensors().len()),
        root_of: vec![None; plan.buffers.len()],
        at_load: if plan.settings.fold_weights {
            derived::computed_at_load(graph)
        } else {
            IndexVec::from_elem(false, graph.tensors().len())
        },
        spans: plan
            .buffers
            .iter()
            .map(|b| Span::range(b.offset, b.bytes))
            .collect(),
    };
    c.check_header();
    c.check_schedule();
    c.compute_needs();
    c.strided_parts();
    c.check_buffers();
    c.check_aliases();
    let members = c.storages();
    c.check_inplace_writes(&members);
    c.check_part_writes(&members);
    c.check_overlaps(&members);
    let updated = c.updated_tensors();
    c.check_update_order();
    c.check_updated_alone(&updated, &members);
    c.check_backward();
    c.check_weights();
    let ends: Vec<u64> = c.spans.iter().map(Span::end).collect();
    crate::verify_workspace::check_workspaces(graph, &bindings, plan, &ends, strict, &mut c.out);
    VerifyReport {
        violations: c.out,
        trusted: c.trusted,
    }
}

/// The members of each storage, by root, roots in buffer order.
struct Storages {
    roots: Vec<TensorId>,
    members: IndexVec<TensorId, Vec<usize>>,
}

struct Checker<'a> {
    graph: &'a Graph,
    plan: &'a Plan,
    bindings: &'a Bindings,
    ops: &'a OpTable,
    strict: bool,
    out: Vec<PlanViolation>,
    trusted: Vec<PlanViolation>,
    producers: IndexVec<TensorId, Option<NodeId>>,
    /// Each node's step (`None` for nodes that never run).
    step_of: IndexVec<NodeId, Option<u32>>,
    /// Each tensor's true size.
    bytes: IndexVec<TensorId, u64>,
    /// The steps each value is needed: producer (0 for graph inputs) through last reader;
    /// graph outputs through the last step.
    need_first: IndexVec<TensorId, u32>,
    need_last: IndexVec<TensorId, u32>,
    /// The buffer of each tensor (its index in `plan.buffers`).
    slot: IndexVec<TensorId, Option<usize>>,
    /// The root of each buffer's storage, once its aliases check out.
    root_of: Vec<Option<TensorId>>,
    /// The tensors computed from weights at load, when the plan folds them (else none).
    at_load: IndexVec<TensorId, bool>,
    /// The bytes each buffer occupies: its range, or one run per row for a strided Concat
    /// part.
    spans: Vec<Span>,
}

impl Checker<'_> {
    /// The buffer of `t`, if the plan has one.
    fn buf(&self, t: TensorId) -> Option<&PlannedBuffer> {
        self.slot
            .get(t)
            .copied()
            .flatten()
            .map(|i| &self.plan.buffers[i])
    }
}
