//! Invariant: an alias names a parent in the arena that its producer reads, is of a kind the
//! plan's settings allow, is one the op's definition allows (judged by the verifier's own
//! rules in `rules`, sharing nothing with the planner's op table), and lies inside its root
//! (following parents, without a cycle); every root offset is a multiple of the plan's
//! alignment.

use memplan_ir::{DType, IndexVec, OpRule, TensorId, TensorKind};

use super::{AliasFault, Checker, PlanViolation, Storages, rules};
use crate::plan::{Alias, AliasKind, PlannedBuffer};

impl Checker<'_> {
    /// Invariant: an alias names a parent in the arena that its producer reads, is allowed by
    /// the plan's settings and by the op's definition (the verifier's own rules), and lies
    /// inside its root (found by following parents, without a cycle); roots are aligned.
    pub(super) fn check_aliases(&mut self) {
        for i in 0..self.plan.buffers.len() {
            let b = &self.plan.buffers[i];
            if self.slot.get(b.tensor).copied().flatten() != Some(i) {
                continue;
            }
            if let Some(a) = b.alias
                && !self.check_parent(b, a)
            {
                continue;
            }
            self.find_root(i);
        }
    }

    /// Checks the alias of `b` to `p`; false when the parent cannot be followed.
    pub(super) fn check_parent(&mut self, b: &PlannedBuffer, alias: Alias) -> bool {
        let (p, kind) = (alias.of(), alias.kind());
        let g = self.graph;
        // The node that makes the alias: the tensor's producer, reading its parent; for a
        // Concat part, the parent's producer (the Concat), reading the part.
        let (made_by, read) = match kind {
            AliasKind::Part => (self.producers.get(p).copied().flatten(), b.tensor),
            AliasKind::View | AliasKind::InPlace => (self.producers[b.tensor], p),
        };
        let node = made_by.map(|n| &g.nodes()[n]);
        let reads = node.is_some_and(|node| node.inputs.iter().flatten().any(|&x| x == read));
        let Some(p_offset) = self.buf(p).map(|pb| pb.offset) else {
            self.out.push(PlanViolation::BadAlias {
                tensor: b.tensor,
                parent: Some(p),
                reason: AliasFault::ParentNotInArena,
            });
            return false;
        };
        let (Some(node), true) = (node, reads) else {
            self.out.push(PlanViolation::BadAlias {
                tensor: b.tensor,
                parent: Some(p),
                reason: if kind == AliasKind::Part {
                    AliasFault::PartNotRead
                } else {
                    AliasFault::ParentNotRead
                },
            });
            return false;
        };
        if kind == AliasKind::Part && g.tensors()[b.tensor].kind != TensorKind::Activation {
            self.out.push(PlanViolation::BadAlias {
                tensor: b.tensor,
                parent: Some(p),
                reason: AliasFault::PartNotActivation,
            });
        }
        // The view's place in its parent and its place in the arena must agree.
        if let Alias::View { offset, .. } | Alias::Part { offset, .. } = alias
            && p_offset.checked_add(offset) != Some(b.offset)
        {
            self.out.push(PlanViolation::BadAlias {
                tensor: b.tensor,
                parent: Some(p),
                reason: AliasFault::OffsetDisagrees,
            });
        }
        let settings = &self.plan.settings;
        let allowed = match kind {
            AliasKind::View => settings.views,
            AliasKind::InPlace => settings.inplace,
            AliasKind::Part => settings.concat_elision,
        };
        if !allowed {
            self.out.push(PlanViolation::Policy {
                tensor: b.tensor,
                kind,
            });
        }
        if kind != AliasKind::Part && *self.ops.rule(&node.op) == OpRule::Opaque {
            self.out.push(PlanViolation::OpaqueOp {
                tensor: b.tensor,
                kind,
                op: node.op.clone(),
            });
        }
        // Reported, and the alias still followed: its bytes are checked too.
        if let Some(reason) = self.op_forbids(node, b, p, p_offset, kind) {
            if matches!(self.ops.rule(&node.op), OpRule::Custom(_)) {
                let v = PlanViolation::Unconfirmed {
                    tensor: b.tensor,
                    parent: p,
                    kind,
                    op: node.op.clone(),
                };
                if self.strict {
                    self.out.push(v);
                } else {
                    self.trusted.push(v);
                }
            } else {
                self.out.push(PlanViolation::BadAlias {
                    tensor: b.tensor,
                    parent: Some(p),
                    reason,
                });
            }
        }
        true
    }

    /// Why the op's definition does not allow `b` to alias `p` (at `p_offset`), if it does
    /// not: the verifier's own rules ([`rules`]), not the planner's op table.
    pub(super) fn op_forbids(
        &self,
        node: &memplan_ir::Node,
        b: &PlannedBuffer,
        p: TensorId,
        p_offset: u64,
        kind: AliasKind,
    ) -> Option<AliasFault> {
        if kind == AliasKind::Part {
            // A tensor the Concat reads twice fills two slices: written into one, the
            // Concat must copy it into the other from inside its own output. Not a part.
            let slots = node.inputs.iter().filter(|&&x| x == Some(b.tensor)).count();
            if slots > 1 {
                return Some(AliasFault::PartRepeated);
            }
            let fits = node.inputs.iter().enumerate().any(|(pos, &x)| {
                x == Some(b.tensor)
                    && rules::concat_slot(self.graph, node, pos, self.bindings)
                        .is_some_and(|slot| p_offset.checked_add(slot.start) == Some(b.offset))
            });
            return (!fits).then_some(AliasFault::NotConcatSlice);
        }
        let j = node.outputs.iter().position(|&o| o == b.tensor)?;
        // A strided part's bytes are runs: no op's output is a range of them, and nothing
        // written as one range lands on them.
        if let Some(pi) = self.slot.get(p).copied().flatten()
            && self.spans[pi].strided()
        {
            return Some(AliasFault::StridedParent);
        }
        match kind {
            AliasKind::View => match rules::view_range(self.graph, node, j, self.bindings) {
                None => Some(AliasFault::NotARange),
                Some((x, _)) if x != p => Some(AliasFault::RangeOfAnotherInput),
                Some((_, off)) if p_offset.checked_add(off) != Some(b.offset) => {
                    Some(AliasFault::ViewMisplaced)
                }
                Some(_) => None,
            },
            AliasKind::Part => None,
            AliasKind::InPlace => {
                let allowed = node.inputs.iter().enumerate().any(|(pos, x)| {
                    *x == Some(p) && rules::may_write_over(self.graph, node, j, pos, self.bindings)
                });
                if !allowed {
                    Some(AliasFault::NotWritableOver)
                } else if b.offset != p_offset {
                    Some(AliasFault::InPlaceMisplaced)
                } else {
                    None
                }
            }
        }
    }

    /// Follows buffer `i`'s parents to its root: no cycle, inside the root, root aligned.
    pub(super) fn find_root(&mut self, i: usize) {
        let b = &self.plan.buffers[i];
        let mut cur = b;
        let mut hops = 0usize;
        let root = loop {
            match cur.parent().and_then(|p| self.buf(p)) {
                Some(p) => {
                    cur = p;
                    hops += 1;
                    if hops > self.plan.buffers.len() {
                        break None;
                    }
                }
                _ => break Some(cur.tensor),
            }
        };
        let Some(r) = root else {
            self.out.push(PlanViolation::BadAlias {
                tensor: b.tensor,
                parent: b.parent(),
                reason: AliasFault::Cycle,
            });
            return;
        };
        self.root_of[i] = Some(r);
        let Some(rb) = self.buf(r) else { return };
        let (start, end) = (b.offset, self.spans[i].end());
        let (rs, re) = (rb.offset, rb.offset.saturating_add(rb.bytes));
        if start < rs || end > re {
            self.out.push(PlanViolation::OutsideRoot {
                tensor: b.tensor,
                start,
                end,
                root: r,
                root_start: rs,
                root_end: re,
            });
        }
        let align = self.plan.alignment;
        if r == b.tensor && align > 0 && !b.offset.is_multiple_of(align) {
            self.out.push(PlanViolation::Misaligned {
                tensor: r,
                offset: b.offset,
                alignment: align,
            });
        }
        // Every element on its natural boundary: the bytes of one element (of one component
        // for complex numbers); sub-byte dtypes on any byte.
        let dtype = self.graph.tensors()[b.tensor].dtype;
        if let Some(bits) = dtype.bits() {
            let component = if matches!(dtype, DType::C64 | DType::C128) {
                bits / 2
            } else {
                bits
            };
            let natural = u64::from(component / 8).max(1);
            if !b.offset.is_multiple_of(natural) {
                self.out.push(PlanViolation::Misaligned {
                    tensor: b.tensor,
                    offset: b.offset,
                    alignment: natural,
                });
            }
        }
    }

    /// Buffers grouped by the root of their storage.
    pub(super) fn storages(&self) -> Storages {
        let mut s = Storages {
            roots: Vec::new(),
            members: IndexVec::from_elem(Vec::new(), self.graph.tensors().len()),
        };
        for (i, r) in self.root_of.iter().enumerate() {
            if let Some(r) = *r {
                if s.members[r].is_empty() {
                    s.roots.push(r);
                }
                s.members[r].push(i);
            }
        }
        s
    }

    /// Whether following `z`'s parents reaches `y`.
    pub(super) fn descends_from(&self, z: &PlannedBuffer, y: TensorId) -> bool {
        let mut cur = z;
        for _ in 0..=self.plan.buffers.len() {
            if cur.tensor == y {
                return true;
            }
            match cur.parent().and_then(|p| self.buf(p)) {
                Some(p) => cur = p,
                None => return false,
            }
        }
        false
    }
}
