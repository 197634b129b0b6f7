//! Invariants on shared bytes: an in-place write at step `s` overwrites no bytes of its
//! storage that a tensor other than its own descendants needs (still needed after `s`, read
//! at `s` by another input of the writing node, a graph output, or a graph input when the
//! plan's settings keep inputs intact); a Concat part is written over no byte another tensor
//! of its storage holds then; and no two storages live at the same step share a byte.

use memplan_ir::{TensorId, TensorKind};

use super::{Checker, Occupant, PlanViolation, Storages};
use crate::plan::AliasKind;

impl Checker<'_> {
    /// Invariant: an in-place write at step `s` overwrites no byte that a tensor other than
    /// its own descendants needs: not one still needed after `s`, not one another input of
    /// the writing node reads at `s`, not a graph output (read by the caller after the last
    /// step), and not a graph input unless the plan's settings allow it.
    pub(super) fn check_inplace_writes(&mut self, storages: &Storages) {
        let g = self.graph;
        for (i, b) in self.plan.buffers.iter().enumerate() {
            let (Some(r), Some(AliasKind::InPlace)) = (self.root_of[i], b.alias_kind()) else {
                continue;
            };
            let step = self.need_first[b.tensor];
            let writer = self.producers[b.tensor].map(|n| &g.nodes()[n]);
            for &zi in &storages.members[r] {
                let z = &self.plan.buffers[zi];
                if !self.spans[zi].meets(&self.spans[i]) || self.descends_from(z, b.tensor) {
                    continue;
                }
                let kind = g.tensors()[z.tensor].kind;
                let read_here = Some(z.tensor) != b.parent()
                    && writer.is_some_and(|n| n.present_inputs().any(|x| x == z.tensor));
                let v = if read_here && let Some(node) = self.producers[b.tensor] {
                    PlanViolation::InPlaceOverRead {
                        tensor: b.tensor,
                        node,
                        other: z.tensor,
                    }
                } else if kind == TensorKind::Output {
                    PlanViolation::InPlaceOverOutput {
                        tensor: b.tensor,
                        output: z.tensor,
                    }
                } else if kind == TensorKind::Input && !self.plan.settings.inplace_over_inputs {
                    PlanViolation::InPlaceOverInput {
                        tensor: b.tensor,
                        input: z.tensor,
                    }
                } else if z.last.max(self.need_last[z.tensor]) > step {
                    PlanViolation::InPlaceTooEarly {
                        tensor: b.tensor,
                        step,
                        other: z.tensor,
                        other_last: z.last.max(self.need_last[z.tensor]),
                    }
                } else {
                    continue;
                };
                self.out.push(v);
            }
        }
    }

    /// Invariant: a Concat part's producer writes it at step `s` over no byte that another
    /// tensor of its storage holds at `s` (written before, or at `s`, and needed at `s` or
    /// later), other than its own descendants and the ancestors not produced yet (its
    /// Concat's output).
    pub(super) fn check_part_writes(&mut self, storages: &Storages) {
        for (i, b) in self.plan.buffers.iter().enumerate() {
            let (Some(r), Some(AliasKind::Part)) = (self.root_of[i], b.alias_kind()) else {
                continue;
            };
            let step = self.need_first[b.tensor];
            for &zi in &storages.members[r] {
                let z = &self.plan.buffers[zi];
                if !self.spans[zi].meets(&self.spans[i]) || self.descends_from(z, b.tensor) {
                    continue;
                }
                let z_first = z.first.min(self.need_first[z.tensor]);
                if self.descends_from(b, z.tensor) && z_first > step {
                    continue;
                }
                let z_last = z.last.max(self.need_last[z.tensor]);
                if z_first <= step && step <= z_last {
                    self.out.push(PlanViolation::PartOverLive {
                        tensor: b.tensor,
                        step,
                        other: z.tensor,
                    });
                }
            }
        }
    }

    /// Invariant: no two storages live at the same step share a byte (a sweep by first step).
    pub(super) fn check_overlaps(&mut self, storages: &Storages) {
        let mut spans: Vec<(u32, u32, u64, u64, TensorId)> = storages
            .roots
            .iter()
            .filter_map(|&r| {
                let list = &storages.members[r];
                let rb = self.buf(r)?;
                let first = list.iter().map(|&m| self.plan.buffers[m].first).min()?;
                let last = list.iter().map(|&m| self.plan.buffers[m].last).max()?;
                Some((
                    first,
                    last,
                    rb.offset,
                    rb.offset.saturating_add(rb.bytes),
                    r,
                ))
            })
            .collect();
        spans.sort_unstable_by_key(|s| (s.0, s.4));
        let mut active: Vec<(u32, u32, u64, u64, TensorId)> = Vec::new();
        for s in spans {
            active.retain(|a| a.1 >= s.0);
            for a in &active {
                let (start, end) = (a.2.max(s.2), a.3.min(s.3));
                if start < end {
                    self.out.push(PlanViolation::Overlap {
                        a: Occupant::Tensor(a.4),
                        b: Occupant::Tensor(s.4),
                        step: s.0,
                        start,
                        end,
                    });
                }
            }
            active.push(s);
        }
    }
}
