//! Where every tensor of a plan lives: a region, a half-open byte range `[offset, offset +
//! bytes)` inside it, and the region's start inside one buffer.
//!
//! A [`Layout`] is built from a [`Plan`] and the graph it plans. [`Layout::new`] first runs the
//! planner's independent verifier ([`memplan_planner::verify_plan`]: ranges inside
//! their regions, sizes, root alignment, aliases inside their roots and allowed by the ops,
//! lifetimes), then checks what only a layout needs: a power-of-two alignment, every weight
//! on it, every alias on its element's alignment, and the half region's packing arithmetic.
//! [`Layout::new_unverified`] skips the verifier, to execute a broken plan on purpose; the
//! backends (host, device) bound-check every range they touch, so even such a layout gives an
//! error, never undefined behaviour.
//!
//! Three regions:
//! - [`Region::Arena`]: activations, graph inputs and outputs, at the plan's offsets;
//! - [`Region::Weights`]: weights at their full precision, and training state (parameters,
//!   gradients, optimizer moments), at the plan's offsets;
//! - [`Region::Half`]: with [`LayoutOptions::half_weights`], every `f32` weight (not training
//!   state, which keeps its precision) stored as `f16`
//!   or `bf16`, packed in tensor id order at the plan's alignment. The weight region then holds
//!   the other weights only, packed the same way (so no holes are left where the `f32` ones
//!   were).
//!
//! **One buffer.** The regions also have a place in one buffer of [`Layout::buffer_bytes`]
//! bytes: the arena from byte 0, then the weights, then the half region, each starting on a
//! multiple of [`Layout::buffer_alignment`] ([`Layout::region_start`]). A buffer whose first
//! byte is aligned so holds every tensor at `region_start(region) + offset`
//! ([`Layout::buffer_offset`]), aligned as the plan aligned it. An engine that keeps its
//! weights apart (to share them between plans) uses the regions' own offsets instead.
//!
//! **A placement answer for every tensor.** [`Layout::placement`] says where any tensor of
//! the graph is: in a region ([`Placement::Region`]), bound by the caller
//! ([`Placement::Caller`]: an input or output the plan leaves out of the arena, with the bytes
//! and dtype the caller's buffer must have), or nowhere because it has no bytes
//! ([`Placement::Empty`]). A tensor computed from weights alone at load time (the planner's
//! weight folding) sits in the weight region; [`Layout::computed_at_load`] says which.
//!
//! Slots are in an index vector keyed by tensor id; every list this module returns is in
//! tensor id order.

use std::fmt;

use memplan_ir::{
    AnyEntity, Attr, Bindings, DType, Graph, GraphError, IndexVec, Names, Node, NodeId, SizeError,
    TensorId, TensorKind,
};
use memplan_planner::{AliasKind, Plan, PlanViolations, verify_plan};

use crate::element::Element;
use crate::host::BindError;
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

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The storage format of the half-precision weight region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
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

/// How to lay a plan out. (The symbol bindings and op rules are the plan's own.)
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct LayoutOptions {
    /// Store every `f32` weight in the half region in this format.
    pub half_weights: Option<HalfFormat>,
}

impl LayoutOptions {
    /// These options with every `f32` weight stored in the half region in `format`.
    pub fn with_half_weights(mut self, format: HalfFormat) -> LayoutOptions {
        self.half_weights = Some(format);
        self
    }
}

/// Where one tensor lives.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Runs its bytes come in: 1 for one range; for a strided Concat part, the rows of the
    /// Concat's output, each run `bytes / rows` long and `stride` after the last.
    pub rows: u64,
    /// Bytes from one run's start to the next (`bytes` when `rows` is 1).
    pub stride: u64,
}

impl Slot {
    /// One past the last byte (of the last run).
    pub fn end(&self) -> u64 {
        // Cannot overflow: checked when the layout was built.
        self.offset
            .saturating_add(self.rows.saturating_sub(1).saturating_mul(self.stride))
            .saturating_add(self.run())
    }

    /// Bytes per run (all of them when there is one).
    pub fn run(&self) -> u64 {
        self.bytes / self.rows.max(1)
    }

    /// The `[start, end)` ranges of its runs, in address order.
    pub fn runs(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        (0..self.rows.max(1)).map(|r| {
            let start = self.offset.saturating_add(r.saturating_mul(self.stride));
            (start, start.saturating_add(self.run()))
        })
    }

    /// Whether this slot's bytes and `other`'s may intersect (same region, overlapping
    /// extents; extents that only touch do not overlap). Exact for ranges; for strided
    /// Concat parts, by their extents.
    pub fn overlaps(&self, other: &Slot) -> bool {
        self.region == other.region && self.offset < other.end() && other.offset < self.end()
    }
}

/// The answer [`Layout::placement`] gives for a tensor: where its bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Placement<'a> {
    /// In one of the layout's regions, at this slot.
    Region(&'a Slot),
    /// Bound by the caller: an input or output that the plan leaves out of the arena
    /// (`PlanOptions::inputs_in_arena` / `outputs_in_arena` off). The caller's buffer must
    /// hold `bytes` bytes of `dtype`; a host or device arena takes it with its `bind`.
    Caller {
        /// Bytes the caller's buffer must hold.
        bytes: u64,
        /// The element type.
        dtype: DType,
    },
    /// Nowhere: the tensor has no bytes (a dimension is 0).
    Empty,
    /// The plan gives this tensor of `bytes` bytes no place although it is neither the
    /// caller's nor empty: the plan was not made for this graph or these options (a
    /// verified layout never answers this).
    Missing {
        /// The tensor's bytes.
        bytes: u64,
    },
}

impl Placement<'_> {
    /// A short description: the region and byte range, `bound by the caller`, `no bytes` or
    /// `not in the plan`.
    pub fn describe(&self) -> String {
        match self {
            Placement::Region(s) => format!("{} [{}, {})", s.region, s.offset, s.end()),
            Placement::Caller { .. } => "bound by the caller".to_owned(),
            Placement::Empty => "no bytes".to_owned(),
            Placement::Missing { .. } => "not in the plan".to_owned(),
        }
    }
}

/// What the layout holds for one tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Entry {
    Slot(Slot),
    Caller { bytes: u64, dtype: DType },
    Empty,
    Missing { bytes: u64 },
}

/// A plan that cannot be laid out. Each error names the tensor it is about, by id in its
/// `Display` (`t3`) and by name through [`GraphError::with_graph`] with the graph laid out.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LayoutError {
    /// The planner's verifier rejects the plan (regions, sizes, root alignment, aliases,
    /// lifetimes): every problem it found (by id), and their text with the graph's names
    /// (this error leaves the graph behind).
    Plan {
        /// The problems.
        problems: PlanViolations,
        /// Their text, rendered with the graph.
        message: String,
    },
    /// The plan's alignment is zero or not a power of two.
    BadAlignment(u64),
    /// A tensor id in the plan is not in the graph.
    UnknownTensor(TensorId),
    /// The plan binds a symbol the graph does not have.
    UnknownSymbol(String),
    /// A workspace of a node the graph does not have.
    UnknownNode(NodeId),
    /// A tensor appears twice in the plan.
    Duplicate(TensorId),
    /// An offset is not a multiple of the alignment it needs.
    Misaligned {
        /// The tensor.
        tensor: TensorId,
        /// Its offset.
        offset: u64,
        /// The alignment it needs (the plan's for a weight, its element's for an alias).
        required: u64,
    },
    /// Byte arithmetic overflowed.
    Overflow(TensorId),
    /// A body plan for a body the node does not have.
    UnknownBody {
        /// The node.
        node: NodeId,
        /// The body's attribute.
        attr: String,
    },
    /// A tensor whose size cannot be computed at the plan's symbol values.
    NoSize {
        /// The tensor.
        tensor: TensorId,
        /// Why.
        reason: SizeError,
    },
    /// A body plan that does not lay out.
    InBody {
        /// The node.
        node: NodeId,
        /// The body's attribute.
        attr: String,
        /// Why.
        error: Box<LayoutError>,
    },
}

impl GraphError for LayoutError {
    fn fmt_with(&self, names: Names<'_>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutError::Plan { message, .. } => f.write_str(message),
            LayoutError::BadAlignment(a) => write!(f, "alignment {a} is not a power of two"),
            LayoutError::UnknownTensor(t) => write!(
                f,
                "plan names tensor {}, which the graph does not have",
                names.name(*t)
            ),
            LayoutError::UnknownSymbol(s) => {
                write!(f, "plan binds symbol `{s}`, which the graph does not have")
            }
            LayoutError::UnknownNode(n) => write!(
                f,
                "plan gives a workspace to node {}, which the graph does not have",
                names.name(*n)
            ),
            LayoutError::Duplicate(t) => write!(f, "tensor {} is placed twice", names.name(*t)),
            LayoutError::Misaligned {
                tensor,
                offset,
                required,
            } => write!(
                f,
                "tensor {} at offset {offset} is not aligned to {required} bytes",
                names.name(*tensor)
            ),
            LayoutError::Overflow(t) => {
                write!(f, "byte arithmetic overflows at tensor {}", names.name(*t))
            }
            LayoutError::UnknownBody { node, attr } => write!(
                f,
                "plan gives node {} a plan of body `{attr}`, which the node does not have",
                names.name(*node)
            ),
            LayoutError::NoSize { tensor, reason } => write!(
                f,
                "tensor {} has no size at the plan's symbol values: {reason}",
                names.name(*tensor)
            ),
            LayoutError::InBody { node, attr, error } => {
                write!(
                    f,
                    "the plan of body `{attr}` of node {}: ",
                    names.name(*node)
                )?;
                // The body's tensors are named by the body.
                error.fmt_with(names.body(*node, attr), f)
            }
        }
    }

    fn entities(&self) -> Vec<AnyEntity> {
        match self {
            LayoutError::Plan { problems, .. } => problems.entities(),
            LayoutError::UnknownTensor(t)
            | LayoutError::Duplicate(t)
            | LayoutError::Overflow(t)
            | LayoutError::Misaligned { tensor: t, .. }
            | LayoutError::NoSize { tensor: t, .. } => vec![AnyEntity::Tensor(*t)],
            LayoutError::UnknownNode(n)
            | LayoutError::UnknownBody { node: n, .. }
            | LayoutError::InBody { node: n, .. } => vec![AnyEntity::Node(*n)],
            LayoutError::BadAlignment(_) | LayoutError::UnknownSymbol(_) => Vec::new(),
        }
    }
}

/// The message with ids (`t3`); [`GraphError::with_graph`] names the tensors and nodes (a
/// verifier's rejection is rendered with the graph already).
impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_with(Names::ids(), f)
    }
}

impl std::error::Error for LayoutError {}

/// Every tensor's region and byte range for one plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    graph: String,
    alignment: u64,
    arena_bytes: u64,
    weight_bytes: u64,
    half_bytes: u64,
    half_format: Option<HalfFormat>,
    /// Where each region starts in one buffer (arena, weights, half), and the buffer's size.
    starts: [u64; 3],
    buffer_bytes: u64,
    schedule: Vec<NodeId>,
    bindings: Bindings,
    slots: IndexVec<TensorId, Entry>,
    /// Per node: its workspace in the arena (offset, bytes), if it has one.
    workspaces: IndexVec<NodeId, Option<(u64, u64)>>,
    /// Per node: the layouts of its bodies' plans, which run inside its workspace.
    bodies: IndexVec<NodeId, Vec<BodyLayout>>,
}

/// The layout of one body's plan, which runs inside its node's workspace: the body's arena
/// region from the workspace's first byte, its weight region from `weights_at` bytes in.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BodyLayout {
    /// The attribute holding the body.
    pub attr: String,
    /// Where the body's weights start, in bytes from the workspace's first byte.
    pub weights_at: u64,
    /// The body plan's layout (its regions as the body sees them).
    pub layout: Layout,
}

fn tensor_dtype(graph: &Graph, t: TensorId) -> Result<DType, LayoutError> {
    let tensor = graph
        .tensors()
        .get(t)
        .ok_or(LayoutError::UnknownTensor(t))?;
    Ok(tensor.dtype)
}

fn align_up(value: u64, align: u64, tensor: TensorId) -> Result<u64, LayoutError> {
    value
        .checked_next_multiple_of(align)
        .ok_or(LayoutError::Overflow(tensor))
}

impl Layout {
    /// Lays `plan` out for `graph`: first the planner's verifier
    /// ([`memplan_planner::verify_plan`], with the bindings and op rules the plan records)
    /// checks the plan, then the layout adds its own: a power-of-two alignment, every weight
    /// on it, every alias on its element's alignment, and the half region's arithmetic.
    pub fn new(graph: &Graph, plan: &Plan, options: &LayoutOptions) -> Result<Layout, LayoutError> {
        if !plan.alignment.is_power_of_two() {
            return Err(LayoutError::BadAlignment(plan.alignment));
        }
        verify_plan(graph, plan).map_err(|problems| LayoutError::Plan {
            message: problems.with_graph(graph).to_string(),
            problems,
        })?;
        Layout::new_unverified(graph, plan, options)
    }

    /// Lays `plan` out without the planner's verifier, keeping only the layout's own checks.
    /// For executing a plan the verifier rejects (the pattern check of a broken plan shows
    /// what its bytes do): such a layout may put ranges past their region or over each
    /// other, and the memory backends bound-check every range they touch, so using it is an
    /// error at worst, never unsound.
    pub fn new_unverified(
        graph: &Graph,
        plan: &Plan,
        options: &LayoutOptions,
    ) -> Result<Layout, LayoutError> {
        let align = plan.alignment;
        if align == 0 || !align.is_power_of_two() {
            return Err(LayoutError::BadAlignment(align));
        }
        let mut slots: IndexVec<TensorId, Entry> =
            IndexVec::from_elem(Entry::Missing { bytes: 0 }, graph.tensors().len());

        // Activation arena. A Concat part whose slice is one run per row of the output comes
        // in those runs (see `concat_rows`).
        let bindings = plan
            .settings
            .bindings_for(graph)
            .map_err(LayoutError::UnknownSymbol)?;
        let producers = graph.producers();
        for b in &plan.buffers {
            let dtype = tensor_dtype(graph, b.tensor)?;
            let (mut rows, mut stride) = (1, b.bytes);
            if let Some(memplan_planner::Alias::Part { of, .. }) = b.alias
                && let Some(node) = producers.get(of).copied().flatten().map(|n| graph.node(n))
                && let Some((r, s)) = concat_rows(graph, node, b.bytes, &bindings)
            {
                (rows, stride) = (r, s);
            }
            let slot = Slot {
                tensor: b.tensor,
                region: Region::Arena,
                offset: b.offset,
                bytes: b.bytes,
                dtype,
                alias_of: b.parent(),
                alias: b.alias_kind(),
                root: b.tensor,
                rows,
                stride,
            };
            put(&mut slots, slot)?;
        }
        for b in &plan.buffers {
            resolve_alias(&mut slots, b.tensor)?;
        }

        // Weights: at the plan's offsets; or, with a half region, f32 weights packed into it
        // and the others packed anew into the weight region (no holes where f32 ones were).
        let repack = options.half_weights.is_some();
        let mut weight_end: u64 = 0;
        let mut half_end: u64 = 0;
        for w in &plan.weights {
            let dtype = tensor_dtype(graph, w.tensor)?;
            if w.offset % align != 0 {
                return Err(LayoutError::Misaligned {
                    tensor: w.tensor,
                    offset: w.offset,
                    required: align,
                });
            }
            // Training state (moments, master weights, gradients) keeps its precision.
            let constant = graph
                .tensors()
                .get(w.tensor)
                .is_some_and(|t| t.kind == TensorKind::Weight);
            let slot = match options.half_weights {
                Some(format) if dtype == DType::F32 && constant => {
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
                        rows: 1,
                        stride: bytes,
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
                        rows: 1,
                        stride: w.bytes,
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

        let mut workspaces: IndexVec<NodeId, Option<(u64, u64)>> =
            IndexVec::from_elem(None, graph.nodes().len());
        let mut bodies: IndexVec<NodeId, Vec<BodyLayout>> =
            IndexVec::from_elem(Vec::new(), graph.nodes().len());
        for w in &plan.workspaces {
            let slot = workspaces
                .get_mut(w.node)
                .ok_or(LayoutError::UnknownNode(w.node))?;
            *slot = Some((w.offset, w.bytes));
            let node = graph.node(w.node);
            for b in &w.bodies {
                let body = node
                    .bodies
                    .iter()
                    .find(|x| x.attr == b.attr)
                    .ok_or_else(|| LayoutError::UnknownBody {
                        node: w.node,
                        attr: b.attr.clone(),
                    })?;
                // Body constants are planned in the workspace at full precision.
                let layout =
                    Layout::new_unverified(&body.graph, &b.plan, &LayoutOptions::default())
                        .map_err(|e| LayoutError::InBody {
                            node: w.node,
                            attr: b.attr.clone(),
                            error: Box::new(e),
                        })?;
                bodies[w.node].push(BodyLayout {
                    attr: b.attr.clone(),
                    weights_at: b
                        .weights_offset()
                        .ok_or(LayoutError::Overflow(TensorId(0)))?,
                    layout,
                });
            }
        }
        // Every tensor the plan does not place: the caller's, empty, or missing.
        for (t, tensor) in graph.tensors().iter_enumerated() {
            let Some(entry) = slots.get_mut(t) else {
                continue;
            };
            if matches!(entry, Entry::Slot(_)) {
                continue;
            }
            let bytes = tensor
                .bytes(&bindings)
                .map_err(|reason| LayoutError::NoSize { tensor: t, reason })?;
            let caller = match tensor.kind {
                TensorKind::Input => !plan.settings.inputs_in_arena,
                TensorKind::Output => !plan.settings.outputs_in_arena,
                _ => false,
            };
            *entry = match bytes {
                0 => Entry::Empty,
                _ if caller => Entry::Caller {
                    bytes,
                    dtype: tensor.dtype,
                },
                _ => Entry::Missing { bytes },
            };
        }

        let buffer_align = align.max(MIN_BUFFER_ALIGN);
        let overflow = || LayoutError::Overflow(TensorId(0));
        let weights_start = align_up(plan.arena_bytes, buffer_align, TensorId(0))?;
        let half_start = align_up(
            weights_start
                .checked_add(weight_bytes)
                .ok_or_else(overflow)?,
            buffer_align,
            TensorId(0),
        )?;
        let buffer_bytes = half_start.checked_add(half_end).ok_or_else(overflow)?;
        Ok(Layout {
            workspaces,
            bodies,
            graph: plan.graph.clone(),
            alignment: align,
            arena_bytes: plan.arena_bytes,
            weight_bytes,
            half_bytes: half_end,
            half_format: options.half_weights,
            starts: [0, weights_start, half_start],
            buffer_bytes,
            schedule: plan.schedule.clone(),
            bindings,
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

    /// The symbol values the plan was laid out for.
    pub fn bindings(&self) -> &Bindings {
        &self.bindings
    }

    /// The slot of tensor `t`, if the plan gives it bytes in a region.
    pub fn slot(&self, t: TensorId) -> Option<&Slot> {
        match self.slots.get(t) {
            Some(Entry::Slot(s)) => Some(s),
            _ => None,
        }
    }

    /// Where tensor `t` is: in a region, bound by the caller, or nowhere (see
    /// [`Placement`]); `None` only for an id the graph does not have.
    pub fn placement(&self, t: TensorId) -> Option<Placement<'_>> {
        Some(match self.slots.get(t)? {
            Entry::Slot(s) => Placement::Region(s),
            &Entry::Caller { bytes, dtype } => Placement::Caller { bytes, dtype },
            Entry::Empty => Placement::Empty,
            &Entry::Missing { bytes } => Placement::Missing { bytes },
        })
    }

    /// What tensor `t` shares its bytes with, and how: `(AliasKind::InPlace, x)` when the
    /// plan writes `t` over `x` (its kernel then reads `x`'s values from `t` itself: borrow
    /// `t` alone), `(AliasKind::View, x)` when `t` is bytes of `x` (nothing to compute),
    /// `(AliasKind::Part, x)` when its producer writes it into `x`. `None` when `t` has bytes
    /// of its own, none, or is not in the region.
    pub fn alias(&self, t: TensorId) -> Option<(AliasKind, TensorId)> {
        let slot = self.slot(t)?;
        slot.alias.zip(slot.alias_of)
    }

    /// Every tensor of the graph with its placement, in tensor id order.
    pub fn placements(&self) -> impl Iterator<Item = (TensorId, Placement<'_>)> + '_ {
        self.slots
            .iter_enumerated()
            .filter_map(|(t, _)| Some((t, self.placement(t)?)))
    }

    /// The tensors bound by the caller, with the bytes and dtype each buffer must have, in
    /// tensor id order.
    pub fn caller_tensors(&self) -> impl Iterator<Item = (TensorId, u64, DType)> + '_ {
        self.slots.iter_enumerated().filter_map(|(t, e)| match e {
            &Entry::Caller { bytes, dtype } => Some((t, bytes, dtype)),
            _ => None,
        })
    }

    /// Checks that a buffer of `len` bytes at `address` may be bound to tensor `t`: the
    /// tensor is the caller's ([`Placement::Caller`]), the buffer holds its bytes, and its
    /// first byte sits on the element's alignment. Host and device arenas check this before
    /// they take a buffer.
    pub fn check_binding(&self, t: TensorId, len: u64, address: u64) -> Result<(), BindError> {
        let (bytes, dtype) = match self.placement(t) {
            Some(Placement::Caller { bytes, dtype }) => (bytes, dtype),
            Some(other) => {
                return Err(BindError::NotCaller {
                    tensor: t,
                    placement: other.describe(),
                });
            }
            None => return Err(BindError::UnknownTensor(t)),
        };
        if len < bytes {
            return Err(BindError::TooSmall {
                tensor: t,
                needed: bytes,
                given: len,
            });
        }
        let align = dtype.element_align();
        if !address.is_multiple_of(align) {
            return Err(BindError::Misaligned {
                tensor: t,
                address,
                align,
            });
        }
        Ok(())
    }

    /// Whether tensor `t` is computed by a node yet lives in the weight region: computed
    /// once at load from weights alone (the planner's weight folding), so the engine runs
    /// its producer when it loads the weights, not on every run.
    pub fn computed_at_load(&self, graph: &Graph, t: TensorId) -> bool {
        self.slot(t).is_some_and(|s| s.region == Region::Weights)
            && graph
                .tensors()
                .get(t)
                .is_some_and(|x| matches!(x.kind, TensorKind::Activation | TensorKind::Output))
    }

    /// The alignment of the one buffer's first byte and of every region's start in it: the
    /// plan's alignment, at least 256 bytes (what a CUDA allocation guarantees).
    pub fn buffer_alignment(&self) -> u64 {
        self.alignment.max(MIN_BUFFER_ALIGN)
    }

    /// Bytes of one buffer holding every region, each from a multiple of
    /// [`Layout::buffer_alignment`].
    pub fn buffer_bytes(&self) -> u64 {
        self.buffer_bytes
    }

    /// Where `region` starts in the one buffer, in bytes.
    pub fn region_start(&self, region: Region) -> u64 {
        match region {
            Region::Arena => self.starts[0],
            Region::Weights => self.starts[1],
            Region::Half => self.starts[2],
        }
    }

    /// Where tensor `t`'s first byte is in the one buffer: its region's start plus its
    /// offset. [`ViewError::NotPlaced`] for a tensor the layout holds no bytes of (the
    /// caller's, or an empty one: see [`Layout::placement`]).
    pub fn buffer_offset(&self, t: TensorId) -> Result<u64, ViewError> {
        let s = self.placed(t)?;
        // Cannot overflow: the buffer's size was computed with checked arithmetic.
        Ok(self.region_start(s.region).saturating_add(s.offset))
    }

    /// The workspace of `node` in the arena region (offset, bytes), if the plan gives it one:
    /// scratch bytes its bodies use while it runs.
    pub fn workspace(&self, node: NodeId) -> Option<(u64, u64)> {
        self.workspaces.get(node).copied().flatten()
    }

    /// The layouts of the plans of `node`'s bodies, which run inside its workspace, in the
    /// node's body order.
    pub fn bodies(&self, node: NodeId) -> &[BodyLayout] {
        self.bodies.get(node).map_or(&[], Vec::as_slice)
    }

    /// Every slot, in tensor id order.
    pub fn slots(&self) -> impl Iterator<Item = &Slot> + '_ {
        self.slots.iter().filter_map(|e| match e {
            Entry::Slot(s) => Some(s),
            _ => None,
        })
    }

    /// The slot of `t`, or [`ViewError::NotPlaced`].
    pub fn placed(&self, t: TensorId) -> Result<&Slot, ViewError> {
        self.slot(t).ok_or(ViewError::NotPlaced(t))
    }

    /// A typed view of tensor `t` as `[T]`: fails when `T` is not the stored dtype, when the
    /// bytes are not a whole number of `T`, or when the offset is not aligned for `T`.
    pub fn view<T: Element>(&self, t: TensorId) -> Result<ViewDesc<T>, ViewError> {
        let slot = self.placed(t)?;
        ViewDesc::new(slot)?.in_buffer(self.region_start(slot.region))
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
        if let Some(s) = r.iter().chain(&w).find(|s| s.rows > 1) {
            return Err(ViewError::Strided(s.tensor));
        }
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

/// The smallest alignment of the one buffer's first byte and of each region's start in it.
const MIN_BUFFER_ALIGN: u64 = 256;

fn put(slots: &mut IndexVec<TensorId, Entry>, slot: Slot) -> Result<(), LayoutError> {
    let t = slot.tensor;
    let entry = slots
        .raw_mut()
        .get_mut(t.index())
        .ok_or(LayoutError::UnknownTensor(t))?;
    if matches!(entry, Entry::Slot(_)) {
        return Err(LayoutError::Duplicate(t));
    }
    *entry = Entry::Slot(slot);
    Ok(())
}

/// `(rows, stride)` of a strided Concat part of `bytes` bytes written into the output of
/// `concat`: the rows are the output's dims before the axis, the stride one row of the output
/// in bytes; `None` unless there are several rows and the part fills whole bytes of each.
/// This is ONNX Concat's definition, stated here on its own (the planner and the pattern
/// check each state it too).
fn concat_rows(graph: &Graph, concat: &Node, bytes: u64, b: &Bindings) -> Option<(u64, u64)> {
    if concat.op != "Concat" {
        return None;
    }
    let y = graph.tensors().get(*concat.outputs.first()?)?;
    let dims: Vec<u64> = y
        .shape
        .iter()
        .map(|d| d.eval(b).ok())
        .collect::<Option<_>>()?;
    let axis = memplan_ir::axis_index(concat.attr("axis").and_then(Attr::as_int)?, dims.len())?;
    let rows = dims
        .get(..axis)?
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))?;
    let total = y.bytes(b).ok()?;
    if rows <= 1 || !total.is_multiple_of(rows) || !bytes.is_multiple_of(rows) {
        return None;
    }
    let stride = total / rows;
    (bytes / rows <= stride).then_some((rows, stride))
}

/// Checks that alias `t` sits on its element's alignment and sets its storage root (the end
/// of its `alias_of` chain; the verifier has excluded cycles, and an unverified layout stops
/// after one hop per tensor).
fn resolve_alias(slots: &mut IndexVec<TensorId, Entry>, t: TensorId) -> Result<(), LayoutError> {
    let Some(Entry::Slot(slot)) = slots.get(t) else {
        return Err(LayoutError::UnknownTensor(t));
    };
    let Some(parent) = slot.alias_of else {
        return Ok(());
    };
    let required = slot.dtype.element_align();
    if slot.offset % required != 0 {
        return Err(LayoutError::Misaligned {
            tensor: t,
            offset: slot.offset,
            required,
        });
    }
    let mut root = parent;
    for _ in 0..slots.len() {
        let next = match slots.get(root) {
            Some(Entry::Slot(s)) => s.alias_of,
            _ => None,
        };
        match next {
            Some(next) if next != t => root = next,
            _ => break,
        }
    }
    if let Some(Entry::Slot(s)) = slots.get_mut(t) {
        s.root = root;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{chain_graph, chain_plan};
    use memplan_planner::{Alias, PlannedBuffer};

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
            rows: 1,
            stride: bytes,
        };
        assert!(!s(0, 64).overlaps(&s(64, 64)));
        assert!(s(0, 65).overlaps(&s(64, 64)));
        assert!(s(64, 1).overlaps(&s(0, 128)));
        let mut w = s(0, 64);
        w.region = Region::Weights;
        assert!(!w.overlaps(&s(0, 64)));
    }

    /// The verifier's problems, as text.
    fn violations(r: Result<Layout, LayoutError>) -> String {
        match r {
            Err(LayoutError::Plan { message, .. }) => message,
            other => panic!("expected the verifier to reject the plan, got {other:?}"),
        }
    }

    #[test]
    fn the_planners_verifier_rejects_bad_plans() {
        let (g, ids) = chain_graph();
        let opts = LayoutOptions::default();
        let edit = |f: &dyn Fn(&mut Plan)| {
            let mut plan = chain_plan(&g, &ids);
            f(&mut plan);
            Layout::new(&g, &plan, &opts)
        };
        fn root(p: &mut Plan, t: TensorId) -> &mut PlannedBuffer {
            p.buffers.iter_mut().find(|b| b.tensor == t).unwrap()
        }
        let misaligned = violations(edit(&|p| root(p, ids.b).offset = 68));
        assert!(
            misaligned.contains("not a multiple of the alignment"),
            "{misaligned}"
        );
        let outside = violations(edit(&|p| p.arena_bytes = 100));
        assert!(outside.contains("past the end of its region"), "{outside}");
        let size = violations(edit(&|p| root(p, ids.a).bytes = 32));
        assert!(size.contains("planned with 32 bytes but has 64"), "{size}");
        let view = violations(edit(&|p| root(p, ids.v).offset = 64));
        assert!(view.contains("view"), "{view}");
        let weight = violations(edit(&|p| p.buffers[0].tensor = ids.w));
        assert!(weight.contains("wrong region"), "{weight}");
        // The same plans lay out unverified (a broken plan can still be executed).
        let mut plan = chain_plan(&g, &ids);
        root(&mut plan, ids.v).offset = 64;
        let layout = Layout::new_unverified(&g, &plan, &opts).unwrap();
        assert_eq!(layout.slot(ids.v).unwrap().offset, 64);
        assert_eq!(layout.slot(ids.v).unwrap().root, ids.a);
    }

    #[test]
    fn layout_specific_checks_remain() {
        let (g, ids) = chain_graph();
        let opts = LayoutOptions::default();
        let mut plan = chain_plan(&g, &ids);
        plan.alignment = 48;
        assert_eq!(
            Layout::new_unverified(&g, &plan, &opts),
            Err(LayoutError::BadAlignment(48))
        );
        // A weight off the alignment (the verifier does not align weights).
        let mut plan = chain_plan(&g, &ids);
        plan.weights[1].offset = 200;
        plan.weight_bytes = 320;
        let e = Layout::new(&g, &plan, &opts).unwrap_err();
        assert_eq!(
            e,
            LayoutError::Misaligned {
                tensor: ids.w2,
                offset: 200,
                required: 64
            }
        );
        // By id alone, by name with the graph laid out.
        assert_eq!(
            e.to_string(),
            format!(
                "tensor t{} at offset 200 is not aligned to 64 bytes",
                ids.w2.0
            )
        );
        assert_eq!(
            e.with_graph(&g).to_string(),
            "tensor w2 at offset 200 is not aligned to 64 bytes"
        );
        assert_eq!(e.entities(), vec![AnyEntity::Tensor(ids.w2)]);
        // A view off its element's alignment.
        let mut plan = chain_plan(&g, &ids);
        plan.buffers
            .iter_mut()
            .find(|b| b.tensor == ids.v)
            .unwrap()
            .offset = 2;
        assert!(matches!(
            Layout::new_unverified(&g, &plan, &opts),
            Err(LayoutError::Misaligned { tensor, required: 4, .. }) if tensor == ids.v
        ));
        // Unknown ids and duplicates are errors, not panics, without the verifier too.
        let mut plan = chain_plan(&g, &ids);
        plan.buffers.push(PlannedBuffer {
            tensor: TensorId(999),
            offset: 0,
            bytes: 4,
            first: 0,
            last: 0,
            alias: None,
        });
        assert_eq!(
            Layout::new_unverified(&g, &plan, &opts),
            Err(LayoutError::UnknownTensor(TensorId(999)))
        );
        let mut plan = chain_plan(&g, &ids);
        let dup = plan.buffers[1].clone();
        plan.buffers.push(dup.clone());
        assert_eq!(
            Layout::new_unverified(&g, &plan, &opts),
            Err(LayoutError::Duplicate(dup.tensor))
        );
        // An alias cycle ends the root search instead of looping.
        let mut plan = chain_plan(&g, &ids);
        let a = plan.buffers.iter_mut().find(|b| b.tensor == ids.a).unwrap();
        a.alias = Some(Alias::View {
            of: ids.v,
            offset: 0,
        });
        assert!(Layout::new_unverified(&g, &plan, &opts).is_ok());
        assert!(violations(Layout::new(&g, &plan, &opts)).contains("cycle"));
    }

    #[test]
    fn half_region_packs_f32_weights() {
        let (g, ids) = chain_graph();
        let plan = chain_plan(&g, &ids);
        let opts = LayoutOptions {
            half_weights: Some(HalfFormat::BF16),
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
