//! Aliasing: which arena tensors share storage, for one schedule.
//!
//! A *storage* is one contiguous block of the arena, named by its root tensor. Every arena
//! tensor belongs to exactly one storage, at a byte offset inside it:
//!
//! - a *view* output (the op's semantics say "view of input i at offset o") lives inside its
//!   input's storage at the input's offset plus `o`, and keeps that storage live until its own
//!   last reader;
//! - an *in-place* output takes over its input's bytes when, at the producing step, nothing
//!   later reads any tensor of that storage, the input covers its whole storage (offset 0, same
//!   bytes), dtype and bytes match, no other input of the node lies in that storage, the
//!   storage holds no graph output and (unless the options allow it) its root is not a graph
//!   input. Weights are never in the arena, so never overwritten.
//!
//! - a Concat *part* (Concat elision, chosen before aliasing: see [`ConcatParts`]) is written
//!   by its producer straight into its slice of the Concat's output, which becomes its
//!   parent; it lives before its parent is produced, and nothing aliases it in place.
//!
//! Invariants: every child but a part is produced after its parent; `offset + bytes` of every
//! member is within its root's bytes; a storage's live steps are `[min first of members, max
//! last of members]` (`storage_first`, `storage_last`).

use memplan_ir::{Graph, IndexVec, MemorySemantics, NodeId, TensorId, TensorKind};

use crate::liveness::Lifetimes;
use crate::plan::AliasKind;
use crate::regions::Regions;

/// Which aliasing to apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AliasPolicy {
    pub views: bool,
    pub inplace: bool,
    pub inplace_over_inputs: bool,
}

/// The storage of every arena tensor.
#[derive(Clone, Debug, Default)]
pub(crate) struct Aliases {
    /// The direct parent of an aliased tensor, and how it aliases.
    pub parent: IndexVec<TensorId, Option<(TensorId, AliasKind)>>,
    /// The root of each tensor's storage (itself for a root or a tensor outside the arena).
    pub root: IndexVec<TensorId, TensorId>,
    /// Byte offset of each tensor inside its root.
    pub offset: IndexVec<TensorId, u64>,
    /// For a root: the last step any member of its storage is live.
    pub storage_last: IndexVec<TensorId, u32>,
    /// For a root: the first step any member of its storage is live.
    pub storage_first: IndexVec<TensorId, u32>,
    /// Strided Concat parts: their bytes are runs, not one range, so nothing is a view of
    /// them or written over them in place.
    pub strided: IndexVec<TensorId, bool>,
    /// Working memory of [`Aliases::fill`]: whether a storage holds a graph output.
    has_output: IndexVec<TensorId, bool>,
}

/// Concat elision: for each tensor written straight into a Concat's output, that output, the
/// byte offset of its slice (in the output's first row), and whether the slice is strided
/// (one run in each of several rows).
pub(crate) type ConcatParts = IndexVec<TensorId, Option<(TensorId, u64, bool)>>;

impl Aliases {
    /// Roots in tensor id order.
    pub fn roots<'a>(&'a self, regions: &'a Regions) -> impl Iterator<Item = TensorId> + 'a {
        self.root
            .iter_enumerated()
            .filter(move |&(t, &r)| t == r && regions.in_arena(t))
            .map(|(t, _)| t)
    }

    /// Assigns storage to every arena tensor of `graph` for `schedule`, into `self` (its
    /// vectors cleared and refilled, not reallocated).
    #[allow(clippy::too_many_arguments, reason = "the inputs of one analysis")]
    pub fn fill(
        &mut self,
        graph: &Graph,
        schedule: &[NodeId],
        regions: &Regions,
        lifetimes: &Lifetimes,
        semantics: &IndexVec<NodeId, Vec<MemorySemantics>>,
        policy: AliasPolicy,
        parts: Option<&ConcatParts>,
    ) {
        let n = graph.tensors().len();
        let a = self;
        a.parent.reset(None, n);
        a.root.reset(TensorId::new(0), n);
        for t in graph.tensors().ids() {
            a.root[t] = t;
        }
        a.offset.reset(0, n);
        a.storage_last.copy_from(&lifetimes.last);
        a.storage_first.copy_from(&lifetimes.first);
        a.strided.reset(false, n);
        let mut has_output = std::mem::take(&mut a.has_output);
        has_output.reset(false, n);
        for (t, tensor) in graph.tensors().iter_enumerated() {
            has_output[t] = tensor.kind == TensorKind::Output;
        }
        // Parts join their Concat output's storage up front: the output is a root, and its
        // storage starts with its earliest part.
        if let Some(parts) = parts {
            for (x, part) in parts.iter_enumerated() {
                let Some((y, off, strided)) = *part else {
                    continue;
                };
                a.strided[x] = strided;
                a.parent[x] = Some((y, AliasKind::Part));
                a.root[x] = y;
                a.offset[x] = off;
                a.storage_first[y] = a.storage_first[y].min(lifetimes.first[x]);
                a.storage_last[y] = a.storage_last[y].max(lifetimes.last[x]);
                has_output[y] |= has_output[x];
            }
        }
        for (step, &nid) in (0u32..).zip(schedule) {
            let (node, sems) = (&graph.nodes()[nid], &semantics[nid]);
            for (&y, sem) in node.outputs.iter().zip(sems) {
                if !regions.in_arena(y) || a.parent[y].is_some() {
                    continue;
                }
                let y_last = lifetimes.last[y];
                let y_out = has_output[y];
                let found = match *sem {
                    MemorySemantics::View { input, offset } if policy.views => a.view_parent(
                        node.inputs.get(input).copied().flatten(),
                        offset,
                        y,
                        regions,
                    ),
                    MemorySemantics::InPlace { ref inputs } if policy.inplace => {
                        inputs.iter().find_map(|&i| {
                            let x = node.inputs.get(i).copied().flatten()?;
                            a.inplace_ok(graph, node, x, y, step, regions, &has_output, policy)
                                .then_some((x, 0, AliasKind::InPlace))
                        })
                    }
                    _ => None,
                };
                if let Some((x, off, kind)) = found {
                    let r = a.root[x];
                    a.parent[y] = Some((x, kind));
                    a.root[y] = r;
                    a.offset[y] = off;
                    a.storage_last[r] = a.storage_last[r].max(y_last);
                    has_output[r] |= y_out;
                }
            }
        }
        a.has_output = has_output;
    }

    /// The parent, offset in root and kind for a view of `x` at `offset`, if allowed.
    fn view_parent(
        &self,
        x: Option<TensorId>,
        offset: u64,
        y: TensorId,
        regions: &Regions,
    ) -> Option<(TensorId, u64, AliasKind)> {
        let x = x?;
        if !regions.in_arena(x) || self.strided[x] {
            return None;
        }
        let end = offset.checked_add(regions.bytes_of(y))?;
        if end > regions.bytes_of(x) {
            return None;
        }
        let in_root = self.offset[x].checked_add(offset)?;
        Some((x, in_root, AliasKind::View))
    }

    /// The in-place rule's standing part, the one place it is stated: `y` may take over the
    /// whole storage of `x` when `x` is in the arena, covers its storage (offset 0, its root's
    /// bytes), `y` has `x`'s dtype and bytes (the op's semantics already asked for the same
    /// element count), the root is not a graph input (unless `over_inputs`), and no other
    /// input of `node` lies in that storage. The ordering model ranks orders with this part;
    /// [`Aliases::fill`] adds what depends on the schedule.
    pub fn may_take_over(
        &self,
        graph: &Graph,
        regions: &Regions,
        node: &memplan_ir::Node,
        x: TensorId,
        y: TensorId,
        over_inputs: bool,
    ) -> bool {
        let r = self.root[x];
        regions.in_arena(x)
            && !self.strided[x]
            && graph.tensors()[x].dtype == graph.tensors()[y].dtype
            && regions.bytes_of(x) == regions.bytes_of(y)
            && self.offset[x] == 0
            && regions.bytes_of(r) == regions.bytes_of(x)
            && (graph.tensors()[r].kind != TensorKind::Input || over_inputs)
            && node
                .present_inputs()
                .all(|other| other == x || self.root[other] != r)
    }

    /// [`Aliases::may_take_over`], and at this step: the storage holds no graph output, no
    /// member is read after `step`, and no other output of `node` lies in it.
    #[allow(clippy::too_many_arguments)]
    fn inplace_ok(
        &self,
        graph: &Graph,
        node: &memplan_ir::Node,
        x: TensorId,
        y: TensorId,
        step: u32,
        regions: &Regions,
        has_output: &IndexVec<TensorId, bool>,
        policy: AliasPolicy,
    ) -> bool {
        let r = self.root[x];
        self.may_take_over(graph, regions, node, x, y, policy.inplace_over_inputs)
            && !has_output[r]
            && self.storage_last[r] <= step
            && node
                .outputs
                .iter()
                .all(|&other| other == y || self.root[other] != r)
    }
}
