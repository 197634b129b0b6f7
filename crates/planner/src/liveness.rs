//! Liveness: the steps at which each tensor's value is needed, for one schedule.
//!
//! This is the one place the lifetime convention is stated. Step `i` is the `i`-th node of
//! the schedule (0-based, `N` steps). A tensor lives from the step that produces it (graph
//! inputs from step 0) through the last step that reads it; graph outputs live through step
//! `N - 1`; a tensor nobody reads lives at its own step only. `first` and `last` are
//! inclusive; in the packing engine's half-open terms a tensor occupies `[first, last + 1)`.
//! Weights get the whole schedule (they are never placed in the arena).
//!
//! Invariant: `first[t] <= last[t]` for every tensor, and every step is `< max(N, 1)`.

use memplan_ir::{Graph, IndexVec, Node, NodeId, TensorId, TensorKind};

use crate::error::{PlanError, ScheduleFault};

/// The inclusive live steps of every tensor for one schedule.
#[derive(Clone, Debug, Default)]
pub(crate) struct Lifetimes {
    /// First live step of each tensor.
    pub first: IndexVec<TensorId, u32>,
    /// Last live step of each tensor (inclusive).
    pub last: IndexVec<TensorId, u32>,
}

impl Lifetimes {
    /// Lifetimes of every tensor of `graph` when its nodes run in `schedule` order, with
    /// `mutated` the tensors some node writes in place, into `self` (its vectors cleared and
    /// refilled, not reallocated). The schedule must be a topological order of all nodes
    /// ([`check_schedule`]).
    pub fn fill(
        &mut self,
        graph: &Graph,
        schedule: &[NodeId],
        mutated: &IndexVec<TensorId, bool>,
    ) -> Result<(), PlanError> {
        let steps = u32::try_from(schedule.len()).map_err(|_| PlanError::BadSchedule {
            graph: graph.name.clone(),
            reason: ScheduleFault::TooManySteps,
        })?;
        let end = steps.saturating_sub(1);
        let n_tensors = graph.tensors().len();
        let Lifetimes { first, last } = self;
        first.reset(0, n_tensors);
        last.reset(0, n_tensors);
        // The graph is validated and the schedule checked: every id indexes its table.
        for (step, &n) in (0u32..).zip(schedule) {
            let node = &graph.nodes()[n];
            for &t in &node.outputs {
                first[t] = step;
                last[t] = last[t].max(step);
            }
            for t in byte_reads(node) {
                last[t] = last[t].max(step);
            }
        }
        for (t, tensor) in graph.tensors().iter_enumerated() {
            let mutated_input =
                tensor.kind == TensorKind::Input && mutated.get(t).copied().unwrap_or(false);
            if tensor.kind == TensorKind::Output || tensor.kind.is_persistent() || mutated_input {
                last[t] = end;
            }
            if tensor.kind.is_persistent() {
                first[t] = 0;
            }
        }
        Ok(())
    }
}

/// The tensors whose bytes `node` reads, so that they live through its step. The one rule
/// for this: lifetimes here and the ordering's memory model (`ordering::model`) both use
/// it, so an op that reads only metadata changes both at once. (A node still runs after
/// the producers of all its inputs: that is `ordering::deps`.) `Shape` and `Size` read only
/// their data input's shape, so it is not among them ([`memplan_ir::data_inputs`]).
pub(crate) fn byte_reads(node: &Node) -> impl Iterator<Item = TensorId> + '_ {
    memplan_ir::data_inputs(node)
}

/// Checks that `schedule` runs every node of `graph` exactly once, each after the producers
/// of its inputs.
pub(crate) fn check_schedule(graph: &Graph, schedule: &[NodeId]) -> Result<(), PlanError> {
    let bad = |reason: ScheduleFault| PlanError::BadSchedule {
        graph: graph.name.clone(),
        reason,
    };
    if schedule.len() != graph.nodes().len() {
        return Err(bad(ScheduleFault::WrongLength {
            steps: schedule.len(),
            nodes: graph.nodes().len(),
        }));
    }
    let producers = graph.producers();
    let mut done: IndexVec<NodeId, bool> = IndexVec::from_elem(false, graph.nodes().len());
    for &n in schedule {
        // The schedule is the caller's: its ids are checked; the graph's are valid.
        let node = graph
            .nodes()
            .get(n)
            .ok_or_else(|| bad(ScheduleFault::NotANode(n)))?;
        if done[n] {
            return Err(bad(ScheduleFault::RunsTwice(n)));
        }
        for t in node.present_inputs() {
            if let Some(p) = producers[t]
                && !done[p]
            {
                return Err(bad(ScheduleFault::BeforeProducer {
                    node: n,
                    producer: p,
                }));
            }
        }
        done[n] = true;
    }
    Ok(())
}
