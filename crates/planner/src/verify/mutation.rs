//! The verifier's checks of in-place updates of inputs (a gradient accumulator, an
//! optimizer step: [`rules::written_in_place`]; a control-flow node whose body updates a
//! value it captures or is handed, at any depth: [`rules::updates`]), written from the ops'
//! definitions and sharing nothing with the planner's `mutation` module:
//!
//! - every other reader of an updated tensor runs on the side of the update that the graph's
//!   node order puts it (the graph is the program: a reader listed before an update reads
//!   the old value, one listed after reads the new one);
//! - an updated tensor in the arena shares its bytes with no other tensor (no view of it, no
//!   tensor written over it or into it), since the update would change that tensor too.
//!
//! That an updated graph input stays live through the last step (the caller reads the
//! result back) is part of the liveness the checker computes for every buffer.

use memplan_ir::{IndexVec, NodeId, TensorId};

use super::{Checker, PlanViolation, Storages, rules};

impl Checker<'_> {
    /// Whether some node updates `t` in place.
    pub(super) fn updated_tensors(&self) -> IndexVec<TensorId, bool> {
        let mut out = IndexVec::from_elem(false, self.graph.tensors().len());
        for node in self.graph.nodes().iter() {
            for t in rules::updates(self.graph, node) {
                if let Some(x) = out.get_mut(t) {
                    *x = true;
                }
            }
        }
        out
    }

    /// Invariant: readers of an updated tensor keep their side of each update.
    pub(super) fn check_update_order(&mut self) {
        let g = self.graph;
        for (m, writer) in g.nodes().iter_enumerated() {
            let Some(Some(ms)) = self.step_of.get(m).copied() else {
                continue;
            };
            for t in rules::updates(g, writer) {
                for (r, reader) in g.nodes().iter_enumerated() {
                    if r == m {
                        continue;
                    }
                    let reads = reader
                        .inputs
                        .iter()
                        .enumerate()
                        .any(|(p, x)| *x == Some(t) && rules::reads_contents(reader, p))
                        || reader.implicit_inputs.contains(&t);
                    let Some(Some(rs)) = self.step_of.get(r).copied() else {
                        continue;
                    };
                    if reads && (r < m) != (rs < ms) {
                        let (early, late): (NodeId, NodeId) = if rs < ms { (r, m) } else { (m, r) };
                        self.out.push(PlanViolation::MovedAcrossUpdate {
                            node: early,
                            after: late,
                            tensor: t,
                        });
                    }
                }
            }
        }
    }

    /// Invariant: an updated tensor in the arena is alone in its storage.
    pub(super) fn check_updated_alone(
        &mut self,
        updated: &IndexVec<TensorId, bool>,
        storages: &Storages,
    ) {
        for (i, b) in self.plan.buffers.iter().enumerate() {
            let Some(r) = self.root_of.get(i).copied().flatten() else {
                continue;
            };
            for &zi in &storages.members[r] {
                let z = self.plan.buffers[zi].tensor;
                if z != b.tensor && updated.get(b.tensor).copied().unwrap_or(false) {
                    self.out.push(PlanViolation::UpdatedShared {
                        tensor: b.tensor,
                        other: z,
                    });
                }
            }
        }
    }
}
