//! Invariant: every weight with bytes is listed once with its size, inside the weight region,
//! and no two weights share a byte (every pair, not only neighbours); a tensor computed from
//! weights alone (the verifier's own rule, `derived`) is there too when the plan's settings
//! fold such tensors, and in the arena otherwise; nothing else a node makes is in the
//! weight region.

use memplan_ir::{IndexVec, TensorId, TensorKind};

use super::{Checker, Occupant, PlanViolation};

impl Checker<'_> {
    /// Invariant: every weight with bytes is listed once, with its size, inside the weight
    /// region, and no two weights share a byte.
    pub(super) fn check_weights(&mut self) {
        let g = self.graph;
        let mut seen: IndexVec<TensorId, bool> = IndexVec::from_elem(false, g.tensors().len());
        let mut spans: Vec<(u64, u64, TensorId)> = Vec::new();
        for w in &self.plan.weights {
            let Some(tensor) = g.tensors().get(w.tensor) else {
                self.out
                    .push(PlanViolation::UnknownTensor { tensor: w.tensor });
                continue;
            };
            if seen[w.tensor] {
                self.out.push(PlanViolation::Duplicate { tensor: w.tensor });
                continue;
            }
            seen[w.tensor] = true;
            if !matches!(tensor.kind, TensorKind::Weight | TensorKind::State)
                && !self.at_load[w.tensor]
            {
                self.out.push(PlanViolation::WrongRegion {
                    tensor: w.tensor,
                    kind: tensor.kind,
                });
            }
            if w.bytes != self.bytes[w.tensor] {
                self.out.push(PlanViolation::WrongBytes {
                    tensor: w.tensor,
                    planned: w.bytes,
                    actual: self.bytes[w.tensor],
                });
            }
            let end = w.offset.checked_add(w.bytes);
            if end.is_none_or(|e| e > self.plan.weight_bytes) {
                self.out.push(PlanViolation::OutsideRegion {
                    tensor: w.tensor,
                    end: w.offset.saturating_add(w.bytes),
                    size: self.plan.weight_bytes,
                });
            }
            if w.bytes > 0 {
                spans.push((w.offset, w.offset.saturating_add(w.bytes), w.tensor));
            }
        }
        for (t, tensor) in g.tensors().iter_enumerated() {
            if matches!(tensor.kind, TensorKind::Weight | TensorKind::State)
                && self.bytes[t] > 0
                && !seen[t]
            {
                self.out.push(PlanViolation::Missing {
                    tensor: t,
                    kind: tensor.kind,
                    bytes: self.bytes[t],
                });
            }
            if self.at_load[t] && self.bytes[t] > 0 && !seen[t] && self.slot[t].is_none() {
                self.out.push(PlanViolation::NotFolded { tensor: t });
            }
        }
        // Every pair that shares a byte, not only neighbours: a sweep by start keeping the
        // spans that reach past it.
        spans.sort_unstable();
        let mut active: Vec<(u64, u64, TensorId)> = Vec::new();
        for s in spans {
            active.retain(|a| a.1 > s.0);
            for a in &active {
                self.out.push(PlanViolation::Overlap {
                    a: Occupant::Tensor(a.2),
                    b: Occupant::Tensor(s.2),
                    step: 0,
                    start: s.0,
                    end: a.1.min(s.1),
                });
            }
            active.push(s);
        }
    }
}
