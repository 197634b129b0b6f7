//! Invariant: every activation with bytes has a buffer, every buffer is an arena tensor with
//! its true size, listed once, inside the arena, and its `[first, last]` covers the steps the
//! value is needed (producer, or 0 for a graph input, through the last reader; graph outputs
//! through the last step). Also the sizes and needed steps the other checks use, and the
//! bytes of strided Concat parts.

use memplan_ir::{SizeError, TensorKind};

use super::{Checker, PlanViolation, Span, rules};
use crate::plan::Alias;

impl Checker<'_> {
    /// The spans of Concat parts whose slice is one run per row of several (the rest stay
    /// ranges): from the Concat's definition, at the buffer's offset.
    pub(super) fn strided_parts(&mut self) {
        let g = self.graph;
        for (i, b) in self.plan.buffers.iter().enumerate() {
            let Some(Alias::Part { of, .. }) = b.alias else {
                continue;
            };
            let Some(node) = self.producers.get(of).copied().flatten().map(|n| g.node(n)) else {
                continue;
            };
            let slot = node
                .inputs
                .iter()
                .position(|&x| x == Some(b.tensor))
                .and_then(|pos| rules::concat_slot(g, node, pos, self.bindings));
            if let Some(slot) = slot.filter(|s| s.rows > 1) {
                self.spans[i] = Span {
                    start: b.offset,
                    run: slot.run,
                    rows: slot.rows,
                    stride: slot.stride,
                };
            }
        }
    }

    /// Sizes, and the steps each value is needed.
    pub(super) fn compute_needs(&mut self) {
        let g = self.graph;
        let end_step =
            u32::try_from(self.plan.schedule.len().saturating_sub(1)).unwrap_or(u32::MAX);
        for (t, tensor) in g.tensors().iter_enumerated() {
            match tensor.bytes(self.bindings) {
                Ok(b) => self.bytes[t] = b,
                Err(SizeError::Unbound(s)) => self.out.push(PlanViolation::Unbound {
                    tensor: t,
                    symbol: g
                        .symbols()
                        .get(s)
                        .map_or_else(|| s.to_string(), String::clone),
                }),
                Err(e) => self.out.push(PlanViolation::Size {
                    tensor: t,
                    reason: e,
                }),
            }
            if let Some(s) = self.producers[t].and_then(|p| self.step_of[p]) {
                self.need_first[t] = s;
                self.need_last[t] = s;
            }
        }
        for (n, node) in g.nodes().iter_enumerated() {
            let Some(s) = self.step_of[n] else { continue };
            let listed = node
                .inputs
                .iter()
                .enumerate()
                .filter(|&(p, _)| rules::reads_contents(node, p))
                .filter_map(|(_, t)| *t);
            for t in listed.chain(node.implicit_inputs.iter().copied()) {
                self.need_last[t] = self.need_last[t].max(s);
            }
        }
        let updated = self.updated_tensors();
        for (t, tensor) in g.tensors().iter_enumerated() {
            // The caller reads outputs, and inputs a node updated, after the last step.
            if tensor.kind == TensorKind::Output || (tensor.kind == TensorKind::Input && updated[t])
            {
                self.need_last[t] = end_step;
            }
        }
    }

    /// Invariant: one buffer per arena tensor with bytes, of its true size, in the arena
    /// region, live whenever its value is needed, inside the arena and the schedule.
    pub(super) fn check_buffers(&mut self) {
        let g = self.graph;
        let steps = self.plan.schedule.len();
        for (i, b) in self.plan.buffers.iter().enumerate() {
            let Some(tensor) = g.tensors().get(b.tensor) else {
                self.out
                    .push(PlanViolation::UnknownTensor { tensor: b.tensor });
                continue;
            };
            if self.slot[b.tensor].is_some() {
                self.out.push(PlanViolation::Duplicate { tensor: b.tensor });
                continue;
            }
            self.slot[b.tensor] = Some(i);
            let settings = &self.plan.settings;
            let caller_owned = match tensor.kind {
                TensorKind::Input => !settings.inputs_in_arena,
                TensorKind::Output => !settings.outputs_in_arena,
                TensorKind::Activation => false,
                TensorKind::Weight | TensorKind::State => true,
            };
            if caller_owned {
                self.out.push(PlanViolation::WrongRegion {
                    tensor: b.tensor,
                    kind: tensor.kind,
                });
            }
            if self.at_load[b.tensor] {
                self.out.push(PlanViolation::NotFolded { tensor: b.tensor });
            }
            let actual = self.bytes[b.tensor];
            if b.bytes != actual {
                self.out.push(PlanViolation::WrongBytes {
                    tensor: b.tensor,
                    planned: b.bytes,
                    actual,
                });
            }
            let (nf, nl) = (self.need_first[b.tensor], self.need_last[b.tensor]);
            if b.first > nf || b.last < nl || b.first > b.last {
                self.out.push(PlanViolation::TooShort {
                    tensor: b.tensor,
                    first: b.first,
                    last: b.last,
                    need_first: nf,
                    need_last: nl,
                });
            }
            if usize::try_from(b.last).map_or(true, |l| l >= steps.max(1)) {
                self.out.push(PlanViolation::PastSchedule {
                    tensor: b.tensor,
                    last: b.last,
                    steps,
                });
            }
            let end = b.offset.checked_add(b.bytes);
            let extent = self.spans[i].end();
            if end.is_none_or(|e| e.max(extent) > self.plan.arena_bytes) {
                self.out.push(PlanViolation::OutsideRegion {
                    tensor: b.tensor,
                    end: extent.max(b.offset.saturating_add(b.bytes)),
                    size: self.plan.arena_bytes,
                });
            }
        }
        let settings = &self.plan.settings;
        for (t, tensor) in g.tensors().iter_enumerated() {
            let in_arena = match tensor.kind {
                TensorKind::Activation => !self.at_load[t],
                TensorKind::Input => settings.inputs_in_arena,
                TensorKind::Output => settings.outputs_in_arena,
                TensorKind::Weight | TensorKind::State => false,
            };
            if in_arena && self.bytes[t] > 0 && self.slot[t].is_none() {
                self.out.push(PlanViolation::Missing {
                    tensor: t,
                    kind: tensor.kind,
                    bytes: self.bytes[t],
                });
            }
        }
    }
}
