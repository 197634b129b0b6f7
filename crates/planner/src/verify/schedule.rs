//! Invariant: the schedule runs every node exactly once, each after the producers of its
//! inputs.

use super::{Checker, PlanViolation, StepFault};

impl Checker<'_> {
    /// Invariant: the schedule runs every node exactly once, each after the producers of its
    /// inputs.
    pub(super) fn check_schedule(&mut self) {
        let g = self.graph;
        if self.plan.schedule.len() != g.nodes().len() {
            self.out.push(PlanViolation::ScheduleLength {
                expected: g.nodes().len(),
                got: self.plan.schedule.len(),
            });
        }
        for (step, &n) in self.plan.schedule.iter().enumerate() {
            let reason = match self.step_of.get(n) {
                None => Some(StepFault::NotANode),
                Some(Some(_)) => Some(StepFault::AlreadyRan),
                Some(None) => None,
            };
            if let Some(reason) = reason {
                self.out.push(PlanViolation::BadStep {
                    step,
                    node: n,
                    reason,
                });
                continue;
            }
            self.step_of[n] = u32::try_from(step).ok();
        }
        for &n in &self.plan.schedule {
            let (Some(node), Some(Some(s))) = (g.nodes().get(n), self.step_of.get(n)) else {
                continue;
            };
            for t in node.present_inputs() {
                let Some(p) = self.producers[t] else { continue };
                if self.step_of[p].is_none_or(|ps| ps >= *s) {
                    self.out.push(PlanViolation::NotTopological {
                        node: n,
                        tensor: t,
                        producer: p,
                    });
                }
            }
        }
    }
}
