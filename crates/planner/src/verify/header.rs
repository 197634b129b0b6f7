//! Invariant: the plan's alignment is a power of two, and buffers and weights are listed in
//! tensor id order (what [`crate::Plan::buffer`] and [`crate::Plan::weight`] rely
//! on).

use super::{Checker, PlanList, PlanViolation};

impl Checker<'_> {
    /// Invariant: the alignment is a power of two, and buffers and weights are listed in
    /// tensor id order ([`Plan::buffer`] and [`Plan::weight`] search them by id).
    pub(super) fn check_header(&mut self) {
        let align = self.plan.alignment;
        if !align.is_power_of_two() {
            self.out
                .push(PlanViolation::BadAlignment { alignment: align });
        }
        let buffers = self.plan.buffers.iter().map(|b| b.tensor);
        let weights = self.plan.weights.iter().map(|w| w.tensor);
        for (what, ids) in [
            (PlanList::Buffers, buffers.collect::<Vec<_>>()),
            (PlanList::Weights, weights.collect()),
        ] {
            if let Some(w) = ids.windows(2).find(|w| w[1] < w[0]) {
                self.out.push(PlanViolation::OutOfOrder {
                    what,
                    tensor: w[1],
                    after: w[0],
                });
            }
        }
    }
}
