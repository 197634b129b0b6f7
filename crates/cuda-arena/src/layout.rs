//! Where every tensor of a plan lives: a region and a half-open byte range `[offset, offset +
//! bytes)` inside it.
//!
//! A [`Layout`] is built from a [`Plan`] and the graph it plans, and checks the plan on the way:
//! every range lies inside its region, every storage root sits on the plan's alignment, every
//! view on its element alignment and inside its parent, and every size agrees with the graph.
//! Nothing after construction can fail on a range, so backends (host, device) trust the
//! layout and only check what a caller asks for (a dtype, a length).
//!
//! Three regions:
//! - [`Region::Arena`]: activations, graph inputs and outputs, at the plan's offsets;
//! - [`Region::Weights`]: weights at their full precision, at the plan's offsets;
//! - [`Region::Half`]: with [`LayoutOptions::half_weights`], every `f32` weight stored as `f16`
//!   or `bf16`, packed in tensor id order at the plan's alignment. The weight region then holds
//!   the other weights only, packed the same way (so no holes are left where the `f32` ones
//!   were).
//!
//! Slots are in an index vector keyed by tensor id; every list this module returns is in
//! tensor id order.

use memplan_ir::{Bindings, DType, Graph, Idx, IndexVec, NodeId, TensorId, TensorKind};
use memplan_planner::{AliasKind, Plan};

use crate::element::Element;
use crate::view::{ViewDesc, ViewError};

/// One of a layout's memory regions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Region {
    /// The activation arena.
    Arena,
    /// The full-precision weight region.
    Weights,
    /// The half-precision weight region.
    Half,
}

impl Region {
    /// Every region, in order.
    pub const ALL: [Region; 3] = [Region::Arena, Region::Weights, Region::Half];

    /// A short name (`arena`, `weights`, `half`).
    pub fn name(self) -> &'static str {
        match self {
            Region::Arena => "arena",
            Region::Weights => "weights",
            Region::Half => "half",
        }
    }
}

impl std::fmt::Display for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The storage format of the half-precision weight region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HalfFormat {
    /// IEEE 754 binary16.
    F16,
    /// bfloat16.
    BF16,
}

impl HalfFormat {
    /// The dtype of weights stored in this format.
    pub fn dtype(self) -> DType {
        match self {
            HalfFormat::F16 => DType::F16,
            HalfFormat::BF16 => DType::BF16,
        }
    }
}

/// How to lay a plan out.
#[derive(Clone, Debug, Default)]
pub struct LayoutOptions {
    /// Symbol values the plan was made for (empty for static graphs).
    pub bindings: Bindings,
    /// Store every `f32` weight in the half region in this format.
    pub half_weights: Option<HalfFormat>,
}

/// Where one tensor lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slot {
    /// The tensor.
    pub tensor: TensorId,
    /// Its region.
    pub region: Region,
    /// First byte inside the region.
    pub offset: u64,
    /// Size in bytes (> 0).
    pub bytes: u64,
    /// The element type stored (for a weight in the half region, the half format).
    pub dtype: DType,
    /// The tensor whose storage this one shares, if any.
    pub alias_of: Option<TensorId>,
    /// How it shares it.
    pub alias: Option<AliasKind>,
    /// The storage root: the end of the `alias_of` chain (the tensor itself when unaliased).
    pub root: TensorId,
}

impl Slot {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        // Cannot overflow: checked when the layout was built.
        self.offset.saturating_add(self.bytes)
    }

    /// Whether this slot's bytes and `other`'s intersect (same region, overlapping ranges;
    /// ranges that only touch do not overlap).
    pub fn overlaps(&self, other: &Slot) -> bool {
        self.region == other.region && self.offset < other.end() && other.offset < self.end()
    }
}

/// A plan that cannot be laid out. Each error names the tensor or node it is about.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// The plan's alignment is zero or not a power of two.
    #[error("alignment {0} is not a power of two")]
    BadAlignment(u64),
    /// A tensor id in the plan is not in the graph.
    #[error("plan names tensor {0}, which the graph does not have")]
    UnknownTensor(TensorId),
    /// A node id in the schedule is not in the graph.
    #[error("schedule names node {0}, which the graph does not have")]
    UnknownNode(NodeId),
    /// A tensor appears twice in the plan.
    #[error("tensor {0} is placed twice")]
    Duplicate(TensorId),
    /// A weight is placed in the arena, or a non-weight in the weight region.
    #[error("tensor {tensor} is a {kind} but placed in the {region} region")]
    WrongRegion {
        /// The tensor.
        tensor: TensorId,
        /// Its kind in the graph.
        kind: TensorKind,
        /// The region the plan puts it in.
        region: Region,
    },
    /// The plan's size for a tensor is not the graph's.
    #[error("tensor {tensor} has {planned} bytes in the plan but {actual} in the graph")]
    SizeMismatch {
        /// The tensor.
        tensor: TensorId,
        /// Bytes in the plan.
        planned: u64,
        /// Bytes in the graph.
        actual: u64,
    },
    /// A tensor's size cannot be computed (unbound symbol, overflow, string dtype).
    #[error("tensor {tensor} has no size: {reason}")]
    Unsized {
        /// The tensor.
        tensor: TensorId,
        /// Why.
        reason: memplan_ir::SizeError,
    },
    /// A range ends past its region.
    #[error(
        "tensor {tensor} at [{offset}, +{bytes}) ends past the {region} region ({region_bytes} bytes)"
    )]
    OutOfBounds {
        /// The tensor.
        tensor: TensorId,
        /// Its region.
        region: Region,
        /// Its offset.
        offset: u64,
        /// Its size.
        bytes: u64,
        /// The region's size.
        region_bytes: u64,
    },
    /// An offset is not a multiple of the alignment it needs.
    #[error("tensor {tensor} at offset {offset} is not aligned to {required} bytes")]
    Misaligned {
        /// The tensor.
        tensor: TensorId,
        /// Its offset.
        offset: u64,
        /// The alignment it needs (the plan's for a storage root, its element's for a view).
        required: u64,
    },
    /// `alias_of` and `alias` disagree, or `alias_of` names a tensor without a buffer.
    #[error("tensor {tensor} aliases {parent:?} as {kind:?}, which the plan does not support")]
    BadAlias {
        /// The tensor.
        tensor: TensorId,
        /// The parent it names.
        parent: Option<TensorId>,
        /// The alias kind it names.
        kind: Option<AliasKind>,
    },
    /// A view or in-place output does not lie inside its parent.
    #[error("tensor {tensor} at [{offset}, +{bytes}) is not inside its parent {parent}")]
    OutsideParent {
        /// The tensor.
        tensor: TensorId,
        /// Its parent.
        parent: TensorId,
        /// Its offset.
        offset: u64,
        /// Its size.
        bytes: u64,
    },
    /// Following `alias_of` from a tensor never reaches a storage root.
    #[error("the alias chain from tensor {0} has a cycle")]
    AliasCycle(TensorId),
    /// Byte arithmetic overflowed.
    #[error("byte arithmetic overflows at tensor {0}")]
    Overflow(TensorId),
}

/// Every tensor's region and byte range for one plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    graph: String,
    alignment: u64,
    arena_bytes: u64,
    weight_bytes: u64,
    half_bytes: u64,
    half_format: Option<HalfFormat>,
    schedule: Vec<NodeId>,
    slots: IndexVec<TensorId, Option<Slot>>,
}

fn tensor_bytes(
    graph: &Graph,
    t: TensorId,
    bindings: &Bindings,
) -> Result<(DType, TensorKind, u64), LayoutError> {
    let tensor = graph.tensors.get(t).ok_or(LayoutError::UnknownTensor(t))?;
    let bytes = tensor
        .bytes(bindings)
        .map_err(|reason| LayoutError::Unsized { tensor: t, reason })?;
    Ok((tensor.dtype, tensor.kind, bytes))
}

fn check_range(
    tensor: TensorId,
    region: Region,
    offset: u64,
    bytes: u64,
    region_bytes: u64,
) -> Result<(), LayoutError> {
    let end = offset
        .checked_add(bytes)
        .ok_or(LayoutError::Overflow(tensor))?;
    if end > region_bytes {
        return Err(LayoutError::OutOfBounds {
            tensor,
            region,
            offset,
            bytes,
            region_bytes,
        });
    }
    Ok(())
}

fn align_up(value: u64, align: u64, tensor: TensorId) -> Result<u64, LayoutError> {
    value
        .checked_next_multiple_of(align)
        .ok_or(LayoutError::Overflow(tensor))
}

impl Layout {
    /// Lays `plan` out for `graph`, checking it (see the module docs).
    pub fn new(graph: &Graph, plan: &Plan, options: &LayoutOptions) -> Result<Layout, LayoutError> {
        let align = plan.alignment;
        if align == 0 || !align.is_power_of_two() {
            return Err(LayoutError::BadAlignment(align));
        }
        if let Some(&n) = plan
            .schedule
            .iter()
            .find(|&&n| graph.nodes.get(n).is_none())
        {
            return Err(LayoutError::UnknownNode(n));
        }
        let mut slots: IndexVec<TensorId, Option<Slot>> =
            IndexVec::from_elem(None, graph.tensors.len());

        // Activation arena.
        for b in &plan.buffers {
            let (dtype, kind, actual) = tensor_bytes(graph, b.tensor, &options.bindings)?;
            if kind == TensorKind::Weight {
                return Err(LayoutError::WrongRegion {
                    tensor: b.tensor,
                    kind,
                    region: Region::Arena,
                });
            }
            if actual != b.bytes {
                return Err(LayoutError::SizeMismatch {
                    tensor: b.tensor,
                    planned: b.bytes,
                    actual,
                });
            }
            check_range(b.tensor, Region::Arena, b.offset, b.bytes, plan.arena_bytes)?;
            let slot = Slot {
                tensor: b.tensor,
                region: Region::Arena,
                offset: b.offset,
                bytes: b.bytes,
                dtype,
                alias_of: b.alias_of,
                alias: b.alias,
                root: b.tensor,
            };
            put(&mut slots, slot)?;
        }
        for b in &plan.buffers {
            resolve_alias(&mut slots, b.tensor, align)?;
        }

        // Weights: at the plan's offsets; or, with a half region, f32 weights packed into it
        // and the others packed anew into the weight region (no holes where f32 ones were).
        let repack = options.half_weights.is_some();
        let mut weight_end: u64 = 0;
        let mut half_end: u64 = 0;
        for w in &plan.weights {
            let (dtype, kind, actual) = tensor_bytes(graph, w.tensor, &options.bindings)?;
            if kind != TensorKind::Weight {
                return Err(LayoutError::WrongRegion {
                    tensor: w.tensor,
                    kind,
                    region: Region::Weights,
                });
            }
            if actual != w.bytes {
                return Err(LayoutError::SizeMismatch {
                    tensor: w.tensor,
                    planned: w.bytes,
                    actual,
                });
            }
            check_range(
                w.tensor,
                Region::Weights,
                w.offset,
                w.bytes,
                plan.weight_bytes,
            )?;
            if w.offset % align != 0 {
                return Err(LayoutError::Misaligned {
                    tensor: w.tensor,
                    offset: w.offset,
                    required: align,
                });
            }
            let slot = match options.half_weights {
                Some(format) if dtype == DType::F32 => {
                    let offset = align_up(half_end, align, w.tensor)?;
                    // f32 -> 16 bits: half the bytes, exactly (4 divides an f32 tensor's size).
                    let bytes = w.bytes / 2;
                    half_end = offset
                        .checked_add(bytes)
                        .ok_or(LayoutError::Overflow(w.tensor))?;
                    Slot {
                        tensor: w.tensor,
                        region: Region::Half,
                        offset,
                        bytes,
                        dtype: format.dtype(),
                        alias_of: None,
                        alias: None,
                        root: w.tensor,
                    }
                }
                _ => {
                    let offset = if repack {
                        let o = align_up(weight_end, align, w.tensor)?;
                        weight_end = o
                            .checked_add(w.bytes)
                            .ok_or(LayoutError::Overflow(w.tensor))?;
                        o
                    } else {
                        w.offset
                    };
                    Slot {
                        tensor: w.tensor,
                        region: Region::Weights,
                        offset,
                        bytes: w.bytes,
                        dtype,
                        alias_of: None,
                        alias: None,
                        root: w.tensor,
                    }
                }
            };
            put(&mut slots, slot)?;
        }
        let weight_bytes = match (repack, plan.weights.last()) {
            (true, Some(last)) => align_up(weight_end, align, last.tensor)?,
            (true, None) => 0,
            (false, _) => plan.weight_bytes,
        };

        Ok(Layout {
            graph: plan.graph.clone(),
            alignment: align,
            arena_bytes: plan.arena_bytes,
            weight_bytes,
            half_bytes: half_end,
            half_format: options.half_weights,
            schedule: plan.schedule.clone(),
            slots,
        })
    }

    /// The graph's name.
    pub fn graph(&self) -> &str {
        &self.graph
    }

    /// The alignment of every storage root's offset (and of each region's base address).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// The size of a region in bytes.
    pub fn region_bytes(&self, region: Region) -> u64 {
        match region {
            Region::Arena => self.arena_bytes,
            Region::Weights => self.weight_bytes,
            Region::Half => self.half_bytes,
        }
    }

    /// Bytes of all regions together (checked; `None` on overflow).
    pub fn total_bytes(&self) -> Option<u64> {
        self.arena_bytes
            .checked_add(self.weight_bytes)?
            .checked_add(self.half_bytes)
    }

    /// The half region's format, when weights are stored at half precision.
    pub fn half_format(&self) -> Option<HalfFormat> {
        self.half_format
    }

    /// The plan's schedule.
    pub fn schedule(&self) -> &[NodeId] {
        &self.schedule
    }

    /// The slot of tensor `t`, if the plan gives it bytes.
    pub fn slot(&self, t: TensorId) -> Option<&Slot> {
        self.slots.get(t).and_then(Option::as_ref)
    }

    /// Every slot, in tensor id order.
    pub fn slots(&self) -> impl Iterator<Item = &Slot> + '_ {
        self.slots.iter().flatten()
    }

    /// The slot of `t`, or [`ViewError::NotPlaced`].
    pub fn placed(&self, t: TensorId) -> Result<&Slot, ViewError> {
        self.slot(t).ok_or(ViewError::NotPlaced(t))
    }

    /// A typed view of tensor `t` as `[T]`: fails when `T` is not the stored dtype, when the
    /// bytes are not a whole number of `T`, or when the offset is not aligned for `T`.
    pub fn view<T: Element>(&self, t: TensorId) -> Result<ViewDesc<T>, ViewError> {
        ViewDesc::new(self.placed(t)?)
    }

    /// Like [`Layout::view`], and the view must hold exactly `len` elements.
    pub fn view_len<T: Element>(&self, t: TensorId, len: usize) -> Result<ViewDesc<T>, ViewError> {
        let v = self.view::<T>(t)?;
        if v.len() != len {
            return Err(ViewError::LengthMismatch {
                tensor: t,
                len: v.len(),
                requested: len,
            });
        }
        Ok(v)
    }
}

impl Layout {
    /// The slots of `reads` and `writes`, checking that every slot in `writes` shares no
    /// byte with any other slot asked for (slots in `reads` may overlap each other). This is
    /// the rule both arenas' split borrows follow.
    pub fn split_slots(
        &self,
        reads: &[TensorId],
        writes: &[TensorId],
    ) -> Result<(Vec<&Slot>, Vec<&Slot>), ViewError> {
        let r: Vec<&Slot> = reads
            .iter()
            .map(|&t| self.placed(t))
            .collect::<Result<_, _>>()?;
        let w: Vec<&Slot> = writes
            .iter()
            .map(|&t| self.placed(t))
            .collect::<Result<_, _>>()?;
        for (i, a) in w.iter().enumerate() {
            if let Some(b) = w.iter().skip(i + 1).chain(r.iter()).find(|b| a.overlaps(b)) {
                return Err(ViewError::Overlap {
                    first: a.tensor,
                    second: b.tensor,
                });
            }
        }
        Ok((r, w))
    }
}

fn put(slots: &mut IndexVec<TensorId, Option<Slot>>, slot: Slot) -> Result<(), LayoutError> {
    let t = slot.tensor;
    let entry = slots
        .raw_mut()
        .get_mut(t.index())
        .ok_or(LayoutError::UnknownTensor(t))?;
    if entry.is_some() {
        return Err(LayoutError::Duplicate(t));
    }
    *entry = Some(slot);
    Ok(())
}

/// Checks tensor `t`'s alias against its parent and sets its storage root.
fn resolve_alias(
    slots: &mut IndexVec<TensorId, Option<Slot>>,
    t: TensorId,
    align: u64,
) -> Result<(), LayoutError> {
    let Some(slot) = slots.get(t).and_then(Option::as_ref) else {
        return Err(LayoutError::UnknownTensor(t));
    };
    let (offset, bytes, dtype) = (slot.offset, slot.bytes, slot.dtype);
    let parent = match (slot.alias_of, slot.alias) {
        (None, None) => {
            if offset % align != 0 {
                return Err(LayoutError::Misaligned {
                    tensor: t,
                    offset,
                    required: align,
                });
            }
            return Ok(());
        }
        (Some(p), Some(kind)) => (p, kind),
        (p, kind) => {
            return Err(LayoutError::BadAlias {
                tensor: t,
                parent: p,
                kind,
            });
        }
    };
    let (p, kind) = parent;
    let Some(ps) = slots.get(p).and_then(Option::as_ref) else {
        return Err(LayoutError::BadAlias {
            tensor: t,
            parent: Some(p),
            kind: Some(kind),
        });
    };
    if ps.region != Region::Arena {
        return Err(LayoutError::BadAlias {
            tensor: t,
            parent: Some(p),
            kind: Some(kind),
        });
    }
    let end = offset.checked_add(bytes).ok_or(LayoutError::Overflow(t))?;
    let inside = offset >= ps.offset && end <= ps.end();
    let ok = match kind {
        AliasKind::View => inside,
        AliasKind::InPlace => inside && offset == ps.offset,
    };
    if !ok {
        return Err(LayoutError::OutsideParent {
            tensor: t,
            parent: p,
            offset,
            bytes,
        });
    }
    let required = dtype.element_align();
    if offset % required != 0 {
        return Err(LayoutError::Misaligned {
            tensor: t,
            offset,
            required,
        });
    }
    // Follow the chain to its root, at most one step per tensor.
    let mut root = p;
    for _ in 0..=slots.len() {
        match slots
            .get(root)
            .and_then(Option::as_ref)
            .and_then(|s| s.alias_of)
        {
            Some(next) if next == t => return Err(LayoutError::AliasCycle(t)),
            Some(next) => root = next,
            None => {
                if let Some(Some(s)) = slots.raw_mut().get_mut(t.index()) {
                    s.root = root;
                }
                return Ok(());
            }
        }
    }
    Err(LayoutError::AliasCycle(t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{chain_graph, chain_plan};
    use memplan_planner::PlannedBuffer;

    #[test]
    fn lays_out_a_plan() {
        let (g, ids) = chain_graph();
        let plan = chain_plan(&g, &ids);
        let layout = Layout::new(&g, &plan, &LayoutOptions::default()).unwrap();
        let a = layout.slot(ids.a).unwrap();
        assert_eq!(
            (a.region, a.offset, a.bytes, a.dtype),
            (Region::Arena, 0, 64, DType::F32)
        );
        let w = layout.slot(ids.w).unwrap();
        assert_eq!(w.region, Region::Weights);
        let v = layout.slot(ids.v).unwrap();
        assert_eq!(v.root, ids.a);
        assert_eq!(layout.region_bytes(Region::Half), 0);
        assert_eq!(
            layout.slots().count(),
            plan.buffers.len() + plan.weights.len()
        );
    }

    #[test]
    fn touching_ranges_do_not_overlap() {
        let s = |offset, bytes| Slot {
            tensor: TensorId(0),
            region: Region::Arena,
            offset,
            bytes,
            dtype: DType::U8,
            alias_of: None,
            alias: None,
            root: TensorId(0),
        };
        assert!(!s(0, 64).overlaps(&s(64, 64)));
        assert!(s(0, 65).overlaps(&s(64, 64)));
        assert!(s(64, 1).overlaps(&s(0, 128)));
        let mut w = s(0, 64);
        w.region = Region::Weights;
        assert!(!w.overlaps(&s(0, 64)));
    }

    #[test]
    fn rejects_misaligned_root() {
        let (g, ids) = chain_graph();
        let mut plan = chain_plan(&g, &ids);
        plan.buffers
            .iter_mut()
            .find(|b| b.tensor == ids.b)
            .unwrap()
            .offset = 68;
        let err = Layout::new(&g, &plan, &LayoutOptions::default()).unwrap_err();
        assert_eq!(
            err,
            LayoutError::Misaligned {
                tensor: ids.b,
                offset: 68,
                required: 64
            }
        );
    }

    #[test]
    fn rejects_out_of_bounds_and_overflow() {
        let (g, ids) = chain_graph();
        let mut plan = chain_plan(&g, &ids);
        plan.arena_bytes = 100;
        assert!(matches!(
            Layout::new(&g, &plan, &LayoutOptions::default()),
            Err(LayoutError::OutOfBounds {
                region: Region::Arena,
                region_bytes: 100,
                ..
            })
        ));
        let mut plan = chain_plan(&g, &ids);
        plan.buffers
            .iter_mut()
            .find(|b| b.tensor == ids.b)
            .unwrap()
            .offset = u64::MAX - 7;
        assert_eq!(
            Layout::new(&g, &plan, &LayoutOptions::default()),
            Err(LayoutError::Overflow(ids.b))
        );
    }

    #[test]
    fn rejects_size_mismatch_and_unknown_ids() {
        let (g, ids) = chain_graph();
        let mut plan = chain_plan(&g, &ids);
        plan.buffers
            .iter_mut()
            .find(|b| b.tensor == ids.a)
            .unwrap()
            .bytes = 32;
        assert_eq!(
            Layout::new(&g, &plan, &LayoutOptions::default()),
            Err(LayoutError::SizeMismatch {
                tensor: ids.a,
                planned: 32,
                actual: 64
            })
        );
        let mut plan = chain_plan(&g, &ids);
        plan.buffers.push(PlannedBuffer {
            tensor: TensorId(999),
            offset: 0,
            bytes: 4,
            first: 0,
            last: 0,
            alias_of: None,
            alias: None,
        });
        assert_eq!(
            Layout::new(&g, &plan, &LayoutOptions::default()),
            Err(LayoutError::UnknownTensor(TensorId(999)))
        );
        let mut plan = chain_plan(&g, &ids);
        plan.schedule.push(NodeId(77));
        assert_eq!(
            Layout::new(&g, &plan, &LayoutOptions::default()),
            Err(LayoutError::UnknownNode(NodeId(77)))
        );
    }

    #[test]
    fn rejects_views_outside_their_parent_and_bad_alias() {
        let (g, ids) = chain_graph();
        let mut plan = chain_plan(&g, &ids);
        plan.buffers
            .iter_mut()
            .find(|b| b.tensor == ids.v)
            .unwrap()
            .offset = 64;
        assert!(matches!(
            Layout::new(&g, &plan, &LayoutOptions::default()),
            Err(LayoutError::OutsideParent { tensor, .. }) if tensor == ids.v
        ));
        let mut plan = chain_plan(&g, &ids);
        plan.buffers
            .iter_mut()
            .find(|b| b.tensor == ids.v)
            .unwrap()
            .alias = None;
        assert!(matches!(
            Layout::new(&g, &plan, &LayoutOptions::default()),
            Err(LayoutError::BadAlias { tensor, .. }) if tensor == ids.v
        ));
        let mut plan = chain_plan(&g, &ids);
        plan.buffers
            .iter_mut()
            .find(|b| b.tensor == ids.v)
            .unwrap()
            .alias_of = Some(ids.w);
        assert!(matches!(
            Layout::new(&g, &plan, &LayoutOptions::default()),
            Err(LayoutError::BadAlias { tensor, .. }) if tensor == ids.v
        ));
    }

    #[test]
    fn rejects_alias_cycles() {
        let (g, ids) = chain_graph();
        let mut plan = chain_plan(&g, &ids);
        // a is a view of v and v a view of a: same range, so only the cycle is wrong.
        let a = plan.buffers.iter_mut().find(|b| b.tensor == ids.a).unwrap();
        a.alias_of = Some(ids.v);
        a.alias = Some(AliasKind::View);
        assert_eq!(
            Layout::new(&g, &plan, &LayoutOptions::default()),
            Err(LayoutError::AliasCycle(ids.a))
        );
    }

    #[test]
    fn rejects_weights_in_the_arena_and_duplicates() {
        let (g, ids) = chain_graph();
        let mut plan = chain_plan(&g, &ids);
        plan.buffers[0].tensor = ids.w;
        plan.buffers[0].bytes = 64;
        assert!(matches!(
            Layout::new(&g, &plan, &LayoutOptions::default()),
            Err(LayoutError::WrongRegion {
                region: Region::Arena,
                ..
            })
        ));
        let mut plan = chain_plan(&g, &ids);
        let dup = plan.buffers[1].clone();
        plan.buffers.push(dup.clone());
        assert_eq!(
            Layout::new(&g, &plan, &LayoutOptions::default()),
            Err(LayoutError::Duplicate(dup.tensor))
        );
        let mut plan = chain_plan(&g, &ids);
        plan.alignment = 48;
        assert_eq!(
            Layout::new(&g, &plan, &LayoutOptions::default()),
            Err(LayoutError::BadAlignment(48))
        );
    }

    #[test]
    fn half_region_packs_f32_weights() {
        let (g, ids) = chain_graph();
        let plan = chain_plan(&g, &ids);
        let opts = LayoutOptions {
            half_weights: Some(HalfFormat::BF16),
            ..LayoutOptions::default()
        };
        let layout = Layout::new(&g, &plan, &opts).unwrap();
        let w = layout.slot(ids.w).unwrap();
        assert_eq!(
            (w.region, w.offset, w.bytes, w.dtype),
            (Region::Half, 0, 32, DType::BF16)
        );
        let w2 = layout.slot(ids.w2).unwrap();
        assert_eq!((w2.region, w2.offset, w2.bytes), (Region::Half, 64, 32));
        assert_eq!(layout.region_bytes(Region::Half), 96);
        // The i64 constant stays at full precision, packed anew: the weight region shrinks
        // to it.
        let k = layout.slot(ids.k).unwrap();
        assert_eq!((k.region, k.offset, k.bytes), (Region::Weights, 0, 16));
        assert_eq!(layout.region_bytes(Region::Weights), 64);
        assert_eq!(layout.half_format(), Some(HalfFormat::BF16));
    }
}
