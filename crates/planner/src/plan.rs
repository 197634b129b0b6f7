//! The memory plan of a graph: where every tensor lives and for how long.
//!
//! Steps are positions in [`Plan::schedule`] (0-based). A buffer's `first` and `last` are
//! inclusive steps; in the packing engine's half-open terms it occupies `[first, last + 1)`.
//! The activation arena holds graph inputs, outputs and activations (unless the options leave
//! inputs or outputs to the caller); weights live in their own persistent region with their
//! own offsets.
//!
//! Invariants of a plan the planner returns (and [`crate::verify_plan`] checks): buffers and
//! weights are in tensor id order; [`Plan::to_json`] is a pure function of the plan and the
//! graph, so the same input gives the same bytes.

use memplan_ir::{Bindings, Graph, NodeId, OpTable, TensorId};

use crate::options::{AttentionKernel, Fusions, ScheduleMode};

/// How a tensor shares its storage with another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AliasKind {
    /// The tensor is a view inside its parent's bytes (Reshape, Squeeze, a contiguous Slice).
    View,
    /// The op wrote the tensor over its parent, whose value was no longer needed.
    InPlace,
    /// The tensor's producer wrote it straight into its slice of its parent, the output of
    /// a Concat that reads it (Concat elision).
    Part,
}

impl AliasKind {
    /// The name used in the plan's JSON (`view`, `inplace`).
    pub fn name(self) -> &'static str {
        match self {
            AliasKind::View => "view",
            AliasKind::InPlace => "inplace",
            AliasKind::Part => "part",
        }
    }
}

/// One tensor held in the activation arena.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedBuffer {
    /// The tensor.
    pub tensor: TensorId,
    /// First byte in the activation arena.
    pub offset: u64,
    /// Size in bytes (> 0).
    pub bytes: u64,
    /// First step at which the tensor is live (inclusive).
    pub first: u32,
    /// Last step at which the tensor is live (inclusive).
    pub last: u32,
    /// How it shares the storage of another tensor (its direct parent), if it does.
    pub alias: Option<Alias>,
}

impl PlannedBuffer {
    /// The tensor whose storage this one shares, if any.
    pub fn parent(&self) -> Option<TensorId> {
        self.alias.map(|a| a.of())
    }

    /// How it shares that storage, if it does.
    pub fn alias_kind(&self) -> Option<AliasKind> {
        self.alias.map(|a| a.kind())
    }
}

/// How a tensor shares the storage of its parent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Alias {
    /// The tensor is the bytes of `of` from byte `offset` of `of` (its own `offset` in the
    /// arena is `of`'s plus this).
    View {
        /// The parent.
        of: TensorId,
        /// Where the view starts inside the parent, in bytes.
        offset: u64,
    },
    /// The op wrote the tensor over `of`, at `of`'s offset, once `of` was no longer needed.
    InPlace {
        /// The parent.
        of: TensorId,
    },
    /// Concat elision: `of` is the output of a Concat that reads this tensor, and the
    /// tensor's producer wrote it straight into its slice of `of`, from byte `offset` (its
    /// own `offset` in the arena is `of`'s plus this). The tensor lives before `of` is
    /// produced; the Concat then writes only the slices of its other inputs.
    Part {
        /// The Concat's output.
        of: TensorId,
        /// Where the slice starts inside `of`, in bytes.
        offset: u64,
    },
}

impl Alias {
    /// The parent.
    pub fn of(self) -> TensorId {
        match self {
            Alias::View { of, .. } | Alias::InPlace { of } | Alias::Part { of, .. } => of,
        }
    }

    /// The kind of alias.
    pub fn kind(self) -> AliasKind {
        match self {
            Alias::View { .. } => AliasKind::View,
            Alias::InPlace { .. } => AliasKind::InPlace,
            Alias::Part { .. } => AliasKind::Part,
        }
    }
}

/// The workspace of a node that runs bodies (If, Loop, Scan): the bodies' own intermediates,
/// results and constants, in the activation arena at the node's step only (see the
/// `workspace` module of the planner for how it is sized).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedWorkspace {
    /// The node.
    pub node: NodeId,
    /// First byte in the activation arena (a multiple of the plan's alignment).
    pub offset: u64,
    /// Size in bytes (> 0): the largest of its bodies' needs.
    pub bytes: u64,
    /// The step at which the node runs, the only step the workspace is live.
    pub step: u32,
    /// The plan of each of the node's bodies that makes bytes, in the node's body order: its
    /// arena from the workspace's first byte, then its weights (constants) from the first
    /// multiple of the body plan's alignment after that arena. The workspace holds the
    /// largest of them (bodies run one at a time), and the verifier checks each.
    pub bodies: Vec<BodyPlan>,
}

/// The plan of one body of a control-flow node, inside the node's workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BodyPlan {
    /// The attribute holding the body (`then_branch`, `body`, ...).
    pub attr: String,
    /// The body's plan: its inputs are the caller's (the node hands them over), its outputs
    /// in its arena.
    pub plan: Plan,
}

impl BodyPlan {
    /// The bytes the body needs in its workspace: its arena, then its weights at the first
    /// multiple of its alignment (`None` on overflow).
    pub fn bytes(&self) -> Option<u64> {
        let plan = &self.plan;
        if plan.weight_bytes == 0 {
            return Some(plan.arena_bytes);
        }
        plan.arena_bytes
            .checked_next_multiple_of(plan.alignment.max(1))?
            .checked_add(plan.weight_bytes)
    }

    /// Where the body's weights start in the workspace (`None` on overflow).
    pub fn weights_offset(&self) -> Option<u64> {
        self.plan
            .arena_bytes
            .checked_next_multiple_of(self.plan.alignment.max(1))
    }
}

/// One weight in the persistent weight region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedWeight {
    /// The tensor.
    pub tensor: TensorId,
    /// First byte in the weight region.
    pub offset: u64,
    /// Size in bytes.
    pub bytes: u64,
}

/// One execution order the memory-aware scheduler considered.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct OrderCandidate {
    /// Its name: `given`, `depth-first`, `breadth-first`, `greedy`, `exact` or `beam`.
    pub name: String,
    /// Its peak: the lower bound of the lifetimes for that order with the chosen aliasing.
    pub peak: u64,
}

/// How the schedule was chosen (the default: the given order, nothing measured).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScheduleChoice {
    /// The mode asked for.
    pub mode: ScheduleMode,
    /// The name of the chosen order (`given` unless another was strictly better).
    pub chosen: String,
    /// Peak of the given order.
    pub given_peak: u64,
    /// Peak of the chosen order: the lower bound of the lifetimes placed (never above
    /// `given_peak`, but where the plain lifetimes, Concat parts not elided, packed smaller).
    pub peak: u64,
    /// Every order considered, in the order they were tried.
    pub candidates: Vec<OrderCandidate>,
    /// Whether the exact search finished, so no order has a lower peak in its memory model.
    pub exact: bool,
    /// What every topological order must hold live at some moment (with the same
    /// aliasing): no order's peak is below it, so `peak` against it shows how far the
    /// chosen order can be from the best one.
    pub any_order_bound: u64,
}

/// Figures about how a plan was made (the default: all zero, a plan made by hand).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PlanStats {
    /// The lower bound for the chosen schedule with views and in-place writes off.
    pub unaliased_lower_bound: u64,
    /// Tensors placed as views of another.
    pub views: u32,
    /// Tensors written in place over another.
    pub inplace: u32,
    /// Tensors written straight into a Concat's output (Concat elision).
    pub parts: u32,
    /// Distinct storages (arena blocks) placed by the engine.
    pub storages: u32,
    /// The packing strategy that produced the offsets.
    pub placed_by: String,
    /// Whether the arena is known to be the smallest for these storages.
    pub proven_optimal: bool,
    /// How the schedule was chosen.
    pub schedule: ScheduleChoice,
}

/// What a plan was made with, so that it can be checked later without repeating the
/// options: the verifier enforces the aliasing policy recorded here.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PlanSettings {
    /// Values of the graph's shape symbols, by symbol name, in symbol order.
    pub bindings: Vec<(String, u64)>,
    /// The bound symbols whose value is an upper bound (data-dependent sizes planned at
    /// their bounds, `memplan plan --bound`), in symbol order: the plan holds for every
    /// value from 0 up to it, and the verifier checks it at smaller values too.
    pub bounded: Vec<String>,
    /// Views were allowed.
    pub views: bool,
    /// In-place writes were allowed.
    pub inplace: bool,
    /// In-place writes over graph inputs were allowed.
    pub inplace_over_inputs: bool,
    /// Concat elision was allowed (producers writing into a Concat's output).
    pub concat_elision: bool,
    /// Graph inputs are in the activation arena (otherwise the caller provides them).
    pub inputs_in_arena: bool,
    /// Graph outputs are in the activation arena (otherwise the caller provides them).
    pub outputs_in_arena: bool,
    /// The packing strategy asked for (its name).
    pub strategy: String,
    /// The schedule mode asked for.
    pub schedule: ScheduleMode,
    /// The op memory rules the plan was made with, so that it is verified against them
    /// (custom rules are closures: a plan read from a file has the default table).
    pub op_table: OpTable,
    /// Tensors computed from weights alone were computed once at load into the weight region
    /// (`PlanOptions::fold_weights`); otherwise they are activations.
    pub fold_weights: bool,
    /// The kernel fused attention ops were given scratch for.
    pub attention: AttentionKernel,
    /// The fusions the planned graph was rewritten with ([`crate::fuse_graph`]): the plan's
    /// tensors and nodes are those of the fused graph.
    pub fuse: Fusions,
    /// Larger alignments for tensors of some dtypes ([`crate::PlanOptions::dtype_alignment`]),
    /// so that the plan's lower bound can be checked with them.
    pub dtype_alignment: Vec<(memplan_ir::DType, u64)>,
}

impl Default for PlanSettings {
    /// The planner's default policy. A plan file without settings is read as this, but
    /// without folding (files written before folding existed put every tensor a node makes
    /// in the arena or with the caller).
    fn default() -> PlanSettings {
        PlanSettings {
            bindings: Vec::new(),
            bounded: Vec::new(),
            views: true,
            inplace: true,
            inplace_over_inputs: false,
            concat_elision: true,
            inputs_in_arena: true,
            outputs_in_arena: true,
            strategy: "auto".to_owned(),
            schedule: ScheduleMode::Given,
            op_table: OpTable::default(),
            fold_weights: true,
            attention: AttentionKernel::Eager,
            fuse: Fusions::NONE,
            dtype_alignment: Vec::new(),
        }
    }
}

impl PlanSettings {
    /// The bindings as the IR's [`Bindings`] for `graph` (symbols matched by name); a name
    /// the graph does not have is returned as the error.
    pub fn bindings_for(&self, graph: &Graph) -> Result<Bindings, String> {
        let mut b = Bindings::new();
        for (name, value) in &self.bindings {
            let s = graph.find_symbol(name).ok_or_else(|| name.clone())?;
            b.set(s, *value);
        }
        Ok(b)
    }
}

/// A graph's memory plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The graph's name.
    pub graph: String,
    /// Size of the activation arena in bytes.
    pub arena_bytes: u64,
    /// No placement for this schedule and aliasing can use a smaller arena.
    pub lower_bound_bytes: u64,
    /// Bytes needed with one buffer per tensor and no reuse (no aliasing either).
    pub naive_bytes: u64,
    /// Size of the weight region in bytes.
    pub weight_bytes: u64,
    /// The alignment every storage offset is a multiple of.
    pub alignment: u64,
    /// Nodes in execution order.
    pub schedule: Vec<NodeId>,
    /// Every non-weight tensor with bytes > 0 that the arena holds, in tensor id order.
    pub buffers: Vec<PlannedBuffer>,
    /// Every weight with bytes > 0, in tensor id order.
    pub weights: Vec<PlannedWeight>,
    /// What the plan was made with.
    pub settings: PlanSettings,
    /// The workspace of every node with bodies that needs bytes, in schedule order.
    pub workspaces: Vec<PlannedWorkspace>,
    /// How the plan was made.
    pub stats: PlanStats,
}

/// `t`'s name in `graph`, or its id where the graph has no such tensor.
pub(crate) fn tensor_name(graph: &Graph, t: TensorId) -> String {
    memplan_ir::Names::of(graph).name(t).to_string()
}

/// `n`'s name in `graph`, or its id where the graph has no such node.
pub(crate) fn node_name(graph: &Graph, n: NodeId) -> String {
    memplan_ir::Names::of(graph).name(n).to_string()
}

/// Why [`Plan::at_values`] cannot re-size a plan.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResizeError {
    /// A symbol the plan does not bind, or binds to a value, not to a bound.
    #[error(
        "the plan was made for {symbol}={planned}, not {symbol}={asked} (only a symbol planned at its bound serves smaller values)"
    )]
    NotBounded {
        /// The symbol.
        symbol: String,
        /// Its value in the plan (0 when the plan does not bind it).
        planned: u64,
        /// The value asked for.
        asked: u64,
    },
    /// A value above the bound the plan was made at.
    #[error("{symbol}={asked} is above the bound the plan was made at ({symbol}={bound})")]
    AboveBound {
        /// The symbol.
        symbol: String,
        /// The value asked for.
        asked: u64,
        /// The plan's bound.
        bound: u64,
    },
    /// A symbol the graph does not have.
    #[error("the graph has no symbol `{0}`")]
    UnknownSymbol(String),
    /// A tensor whose size cannot be computed at the values asked for.
    #[error("tensor `{tensor}` has no byte size at these values: {reason}")]
    Size {
        /// The tensor.
        tensor: String,
        /// Why.
        reason: memplan_ir::SizeError,
    },
    /// A tensor larger at the smaller values than in the plan.
    #[error("tensor `{tensor}` needs {bytes} bytes at these values, more than its {planned}")]
    Grows {
        /// The tensor.
        tensor: String,
        /// Its bytes at the values asked for.
        bytes: u64,
        /// Its bytes in the plan.
        planned: u64,
    },
}

impl Plan {
    /// The same plan at smaller values of its bounded symbols (see
    /// [`PlanSettings::bounded`]): every buffer and weight keeps its place and takes its size
    /// at `values` (a tensor with no bytes there leaves the plan), and the settings record
    /// the values. A value for a symbol the plan binds exactly must be that value. The result
    /// is what the runtime holds at those values, for the verifier to check.
    pub fn at_values(&self, graph: &Graph, values: &[(String, u64)]) -> Result<Plan, ResizeError> {
        let mut out = self.clone();
        for (name, value) in values {
            graph
                .find_symbol(name)
                .ok_or_else(|| ResizeError::UnknownSymbol(name.clone()))?;
            let planned = self
                .settings
                .bindings
                .iter()
                .find(|(n, _)| n == name)
                .map(|&(_, v)| v);
            let bounded = self.settings.bounded.contains(name);
            match planned {
                Some(p) if p == *value => {}
                Some(p) if bounded && *value < p => {}
                Some(p) if bounded => {
                    return Err(ResizeError::AboveBound {
                        symbol: name.clone(),
                        asked: *value,
                        bound: p,
                    });
                }
                p => {
                    return Err(ResizeError::NotBounded {
                        symbol: name.clone(),
                        planned: p.unwrap_or(0),
                        asked: *value,
                    });
                }
            }
            if let Some(slot) = out.settings.bindings.iter_mut().find(|(n, _)| n == name) {
                slot.1 = *value;
            }
        }
        let bindings = out
            .settings
            .bindings_for(graph)
            .map_err(ResizeError::UnknownSymbol)?;
        let resize = |t: TensorId, planned: u64| -> Result<u64, ResizeError> {
            let tensor = graph.tensors().get(t);
            let name = || tensor_name(graph, t);
            let bytes = tensor
                .map_or(Ok(planned), |x| x.bytes(&bindings))
                .map_err(|reason| ResizeError::Size {
                    tensor: name(),
                    reason,
                })?;
            if bytes > planned {
                return Err(ResizeError::Grows {
                    tensor: name(),
                    bytes,
                    planned,
                });
            }
            Ok(bytes)
        };
        let mut buffers = Vec::with_capacity(out.buffers.len());
        for mut b in std::mem::take(&mut out.buffers) {
            b.bytes = resize(b.tensor, b.bytes)?;
            if b.bytes > 0 {
                buffers.push(b);
            }
        }
        out.buffers = buffers;
        let mut weights = Vec::with_capacity(out.weights.len());
        for mut w in std::mem::take(&mut out.weights) {
            w.bytes = resize(w.tensor, w.bytes)?;
            if w.bytes > 0 {
                weights.push(w);
            }
        }
        out.weights = weights;
        for w in &mut out.workspaces {
            let Some(node) = graph.nodes().get(w.node) else {
                continue;
            };
            for body in &mut w.bodies {
                if let Some(b) = node.bodies.iter().find(|b| b.attr == body.attr) {
                    body.plan = body.plan.at_values(&b.graph, values)?;
                }
            }
        }
        Ok(out)
    }

    /// The buffer of tensor `t`, if the arena holds it (buffers are in tensor id order).
    pub fn buffer(&self, t: TensorId) -> Option<&PlannedBuffer> {
        let i = self.buffers.binary_search_by_key(&t, |b| b.tensor).ok()?;
        self.buffers.get(i)
    }

    /// The weight entry of tensor `t`, if it is a weight with bytes.
    pub fn weight(&self, t: TensorId) -> Option<&PlannedWeight> {
        let i = self.weights.binary_search_by_key(&t, |w| w.tensor).ok()?;
        self.weights.get(i)
    }
}
