//! What a plan is asked for: schedule, aliasing, regions, alignment, placement strategy.
//!
//! [`PlanOptions::default`]: the graph's own node order, views and in-place writes on (never
//! over a graph input), graph inputs and outputs in the activation arena, 256-byte alignment
//! (and never less than an element's own), the engine's best placement, tensors computed
//! from weights alone computed once at load into the weight region, and fused attention ops
//! given the scratch of a kernel that materialises its scores; nothing fused that the graph
//! writes out op by op ([`Fusions::NONE`]).
//!
//! Determinism: the ordering search is limited by counts of explored states, not by wall time
//! (its time limit is a safety net that normal runs never reach). So is placement: the
//! engine's exact search stops after [`PlanOptions::solve_node_limit`] nodes, and its time
//! limit is only a safety net. A plan is the same bytes on every machine unless that net is
//! reached (or the node limit is unset). A time limit of zero gives heuristics only, which
//! the snapshot tests use so that engine search changes do not churn them.

use std::time::Duration;

use memplan_ir::{Bindings, DType, OpTable, SymbolId};

use memplan_packing::Strategy;

/// Which execution order to plan for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ScheduleMode {
    /// The graph's node order.
    #[default]
    Given,
    /// The order with the lowest peak found by the memory-aware search (never above the
    /// given order's).
    Memory,
}

impl ScheduleMode {
    /// The name used by the CLI and in reports (`given`, `memory`).
    pub fn name(self) -> &'static str {
        match self {
            ScheduleMode::Given => "given",
            ScheduleMode::Memory => "memory",
        }
    }
}

/// The kernel a fused attention op (ONNX `Attention`, ONNX Runtime's `Attention`,
/// `MultiHeadAttention` and `GroupQueryAttention`) runs with, which decides the scratch it
/// needs while it runs (its workspace).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AttentionKernel {
    /// Materialises the scores, `batch × heads × q × kv` in the score dtype (the safe
    /// assumption: every runtime has such a kernel).
    #[default]
    Eager,
    /// A flash kernel: per-row statistics only (a running max and sum, `f32`, per query row).
    Flash,
}

impl AttentionKernel {
    /// The name used by the CLI, plan files and reports (`eager`, `flash`).
    pub fn name(self) -> &'static str {
        match self {
            AttentionKernel::Eager => "eager",
            AttentionKernel::Flash => "flash",
        }
    }

    /// The kernel called `name`.
    pub fn from_name(name: &str) -> Option<AttentionKernel> {
        match name {
            "eager" => Some(AttentionKernel::Eager),
            "flash" => Some(AttentionKernel::Flash),
            _ => None,
        }
    }
}

/// The fused kernels an engine runs, which the planner plans as the fused kernel runs
/// (`memplan plan --fuse LIST`): each names a pattern of the graph that becomes one node
/// before planning ([`crate::fuse_graph`]; [`crate::plan_fused`] returns the fused graph, whose
/// nodes the engine runs, with its plan). None is the default: the graph as it is written.
/// What each fused node reads, writes and needs (its inputs by position, its attributes,
/// where it may write in place, its scratch): [`crate::fused_kernels`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Fusions {
    /// `attention`: `MatMul` → (scale, soft-cap, mask) → `Softmax` → `MatMul` chains, with
    /// the transposes and grouped-query repeats around them, become one attention node
    /// (`memplan.Attention`) with the scratch of [`PlanOptions::attention`].
    pub attention: bool,
    /// `conv-add`: a `Conv`, `ConvTranspose`, `Gemm` or `MatMul` (with its bias) whose only
    /// reader is an `Add` of a residual of its own shape writes into the residual's bytes.
    pub conv_add: bool,
    /// `gelu`: GELU written out (erf or tanh form, in any operand order) becomes `Gelu`;
    /// `x * sigmoid(1.702 x)` becomes `QuickGelu`.
    pub gelu: bool,
    /// `silu`: `x * sigmoid(x)` becomes `Swish`.
    pub silu: bool,
    /// `norm`: layer, RMS and group normalisation written out op by op become
    /// `LayerNormalization`, `RMSNormalization` and `GroupNormalization`.
    pub norm: bool,
    /// `bias-act`: a bias `Add` followed by an activation becomes one `memplan.BiasAct`.
    pub bias_act: bool,
    /// `constants`: tensors built from shapes and constants alone are made where they are
    /// used instead of kept from their first use to their last (or computed at load), unless
    /// keeping them costs no peak.
    pub constants: bool,
}

impl Fusions {
    /// These fusions with [`attention`](Fusions::attention) set to `attention`.
    pub const fn with_attention(mut self, attention: bool) -> Fusions {
        self.attention = attention;
        self
    }

    /// These fusions with [`conv_add`](Fusions::conv_add) set to `conv_add`.
    pub const fn with_conv_add(mut self, conv_add: bool) -> Fusions {
        self.conv_add = conv_add;
        self
    }

    /// These fusions with [`gelu`](Fusions::gelu) set to `gelu`.
    pub const fn with_gelu(mut self, gelu: bool) -> Fusions {
        self.gelu = gelu;
        self
    }

    /// These fusions with [`silu`](Fusions::silu) set to `silu`.
    pub const fn with_silu(mut self, silu: bool) -> Fusions {
        self.silu = silu;
        self
    }

    /// These fusions with [`norm`](Fusions::norm) set to `norm`.
    pub const fn with_norm(mut self, norm: bool) -> Fusions {
        self.norm = norm;
        self
    }

    /// These fusions with [`bias_act`](Fusions::bias_act) set to `bias_act`.
    pub const fn with_bias_act(mut self, bias_act: bool) -> Fusions {
        self.bias_act = bias_act;
        self
    }

    /// These fusions with [`constants`](Fusions::constants) set to `constants`.
    pub const fn with_constants(mut self, constants: bool) -> Fusions {
        self.constants = constants;
        self
    }
}

impl Fusions {
    /// Nothing fused: the graph as it is written.
    pub const NONE: Fusions = Fusions {
        attention: false,
        conv_add: false,
        gelu: false,
        silu: false,
        norm: false,
        bias_act: false,
        constants: false,
    };

    /// Every fusion.
    pub const ALL: Fusions = Fusions {
        attention: true,
        conv_add: true,
        gelu: true,
        silu: true,
        norm: true,
        bias_act: true,
        constants: true,
    };

    /// The names `--fuse` takes, in the order lists are written.
    pub const NAMES: [&'static str; 7] = [
        "attention",
        "conv-add",
        "gelu",
        "silu",
        "norm",
        "bias-act",
        "constants",
    ];

    fn flags(&self) -> [bool; 7] {
        [
            self.attention,
            self.conv_add,
            self.gelu,
            self.silu,
            self.norm,
            self.bias_act,
            self.constants,
        ]
    }

    fn flag_mut(&mut self, name: &str) -> Option<&mut bool> {
        Some(match name {
            "attention" => &mut self.attention,
            "conv-add" => &mut self.conv_add,
            "gelu" => &mut self.gelu,
            "silu" => &mut self.silu,
            "norm" => &mut self.norm,
            "bias-act" => &mut self.bias_act,
            "constants" => &mut self.constants,
            _ => return None,
        })
    }

    /// Whether nothing is fused.
    pub fn is_none(&self) -> bool {
        *self == Fusions::NONE
    }

    /// The names of the fusions on, in [`Fusions::NAMES`] order (empty for none).
    pub fn names(&self) -> Vec<&'static str> {
        Fusions::NAMES
            .iter()
            .zip(self.flags())
            .filter(|(_, on)| *on)
            .map(|(name, _)| *name)
            .collect()
    }

    /// The list as `--fuse` and plan files write it: the names joined by commas, `none`
    /// for none and `all` for all.
    pub fn describe(&self) -> String {
        if self.is_none() {
            "none".to_owned()
        } else if *self == Fusions::ALL {
            "all".to_owned()
        } else {
            self.names().join(",")
        }
    }

    /// The fusions a comma-separated list names (`attention,gelu`, `all`, `none`; spaces
    /// around names ignored). An unknown name is the error, naming it.
    pub fn parse(list: &str) -> Result<Fusions, UnknownFusion> {
        let mut out = Fusions::NONE;
        for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match name {
                "all" => out = Fusions::ALL,
                "none" => {}
                _ => {
                    *out.flag_mut(name)
                        .ok_or_else(|| UnknownFusion(name.to_owned()))? = true;
                }
            }
        }
        Ok(out)
    }
}

/// A name `--fuse` does not know.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown fusion `{0}` (expected a comma-separated list of attention, conv-add, gelu, silu, norm, bias-act, constants, all, none)"
)]
#[non_exhaustive]
pub struct UnknownFusion(pub String);

/// Limits of the memory-aware ordering search.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct OrderingOptions {
    /// Graphs with at most this many nodes get the exact search over sets of executed nodes.
    pub exact_max_nodes: usize,
    /// The exact search gives up (and becomes a beam search) past this many states per step.
    pub max_states_per_step: usize,
    /// States kept per step by the beam search on larger graphs.
    pub beam_width: usize,
    /// The search's budget: steps evaluated over all its levels. Past it the exact search
    /// goes on as a beam, and a beam that would overrun it gives up.
    pub search_steps: u64,
    /// A safety net on the whole search, far above what any run needs: runs stop on the
    /// counted budgets (`search_steps`, the state limits) first, even on a loaded machine,
    /// so the order never depends on the clock.
    pub time_limit: Duration,
    /// Local improvement starts from this many of the best distinct orders (0: none).
    pub local_starts: usize,
    /// Work units of local improvement per node, shared by the `local_starts` starts (a
    /// unit is a tree operation, a node visited or a step rewritten); each start from
    /// another numbering gets the same share.
    pub local_work_per_node: u64,
    /// Local improvement also starts from this many of the best new orders of each other
    /// numbering of the nodes (orders of the same graph with its nodes numbered otherwise,
    /// which moves the search's tie-breaks), each with the same share of work
    /// as the others.
    pub numbering_starts: usize,
    /// Where placement misses the chosen order's peak, how many runners-up (other orders
    /// of the portfolio whose peak is below the arena) are placed too; the given order is
    /// placed besides, so that the arena is never above its arena. The smallest arena wins.
    pub placement_tries: usize,
}

impl OrderingOptions {
    /// These options with [`exact_max_nodes`](OrderingOptions::exact_max_nodes) set
    /// to `exact_max_nodes`.
    pub fn with_exact_max_nodes(mut self, exact_max_nodes: usize) -> OrderingOptions {
        self.exact_max_nodes = exact_max_nodes;
        self
    }

    /// These options with [`max_states_per_step`](OrderingOptions::max_states_per_step) set
    /// to `max_states_per_step`.
    pub fn with_max_states_per_step(mut self, max_states_per_step: usize) -> OrderingOptions {
        self.max_states_per_step = max_states_per_step;
        self
    }

    /// These options with [`beam_width`](OrderingOptions::beam_width) set to `beam_width`.
    pub fn with_beam_width(mut self, beam_width: usize) -> OrderingOptions {
        self.beam_width = beam_width;
        self
    }

    /// These options with [`search_steps`](OrderingOptions::search_steps) set to `search_steps`.
    pub fn with_search_steps(mut self, search_steps: u64) -> OrderingOptions {
        self.search_steps = search_steps;
        self
    }

    /// These options with [`time_limit`](OrderingOptions::time_limit) set to `time_limit`.
    pub fn with_time_limit(mut self, time_limit: Duration) -> OrderingOptions {
        self.time_limit = time_limit;
        self
    }

    /// These options with [`local_starts`](OrderingOptions::local_starts) set to `local_starts`.
    pub fn with_local_starts(mut self, local_starts: usize) -> OrderingOptions {
        self.local_starts = local_starts;
        self
    }

    /// These options with [`local_work_per_node`](OrderingOptions::local_work_per_node) set
    /// to `local_work_per_node`.
    pub fn with_local_work_per_node(mut self, local_work_per_node: u64) -> OrderingOptions {
        self.local_work_per_node = local_work_per_node;
        self
    }

    /// These options with [`numbering_starts`](OrderingOptions::numbering_starts) set
    /// to `numbering_starts`.
    pub fn with_numbering_starts(mut self, numbering_starts: usize) -> OrderingOptions {
        self.numbering_starts = numbering_starts;
        self
    }

    /// These options with [`placement_tries`](OrderingOptions::placement_tries) set
    /// to `placement_tries`.
    pub fn with_placement_tries(mut self, placement_tries: usize) -> OrderingOptions {
        self.placement_tries = placement_tries;
        self
    }
}

impl Default for OrderingOptions {
    fn default() -> OrderingOptions {
        OrderingOptions {
            exact_max_nodes: 400,
            max_states_per_step: 1_000,
            beam_width: 16,
            search_steps: 1_000_000,
            time_limit: Duration::from_secs(30),
            local_starts: 12,
            local_work_per_node: 6_000,
            numbering_starts: 3,
            placement_tries: 3,
        }
    }
}

/// Options for [`crate::plan_graph`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PlanOptions {
    /// Values of the graph's shape symbols.
    pub bindings: Bindings,
    /// The symbols whose value in `bindings` is an upper bound, not the value: data-dependent
    /// sizes planned at their bounds (`memplan plan --bound`). The plan then holds for every
    /// value from 0 up to the bound: aliases that such a value would move are not made, and
    /// a size that could grow as one falls is an error.
    pub bounded: Vec<SymbolId>,
    /// Which execution order to plan.
    pub schedule: ScheduleMode,
    /// Limits of the ordering search (used with [`ScheduleMode::Memory`]).
    pub ordering: OrderingOptions,
    /// Let view outputs (Reshape, contiguous Slice, ...) live inside their input's bytes.
    pub views: bool,
    /// Let in-placeable ops write their output over a dead input.
    pub inplace: bool,
    /// Let in-place writes overwrite graph inputs (the caller gives their contents up).
    pub inplace_over_inputs: bool,
    /// Let producers write straight into their slice of a Concat's output where that lowers
    /// the peak (decided per Concat by measuring the plan).
    pub concat_elision: bool,
    /// Hold graph inputs in the activation arena (otherwise the caller provides them).
    pub inputs_in_arena: bool,
    /// Hold graph outputs in the activation arena (otherwise the caller provides them).
    pub outputs_in_arena: bool,
    /// Every buffer offset is a multiple of this (a power of two).
    pub alignment: u64,
    /// Larger alignments for tensors of some dtypes (each a power of two).
    pub dtype_alignment: Vec<(DType, u64)>,
    /// The packing strategy.
    pub strategy: Strategy,
    /// Time the packing engine may spend improving a heuristic placement (with
    /// [`Strategy::Auto`] only, and only when the heuristics miss the lower bound).
    pub solve_time_limit: Duration,
    /// Node budget of that search: with it, the plan is the same bytes on every machine unless
    /// the time limit, a safety net, is reached first.
    pub solve_node_limit: Option<u64>,
    /// Memory semantics of ops.
    pub op_table: OpTable,
    /// Compute every tensor made from weights and constants alone (a tied embedding's
    /// transpose, a weight cast, a dequantisation) once, at load, into the weight region, as
    /// runtimes that fold constants do; off, such tensors are activations, computed on every
    /// run.
    pub fold_weights: bool,
    /// The kernel fused attention ops run with (their scratch).
    pub attention: AttentionKernel,
    /// The fused kernels the engine runs: [`crate::plan_graph`] plans the graph as
    /// [`crate::fuse_graph`] rewrites it (the plan's tensors and nodes are then the fused
    /// graph's).
    pub fuse: Fusions,
}

impl PlanOptions {
    /// These options with [`bindings`](PlanOptions::bindings) set to `bindings`.
    pub fn with_bindings(mut self, bindings: Bindings) -> PlanOptions {
        self.bindings = bindings;
        self
    }

    /// These options with [`bounded`](PlanOptions::bounded) set to `bounded`.
    pub fn with_bounded(mut self, bounded: Vec<SymbolId>) -> PlanOptions {
        self.bounded = bounded;
        self
    }

    /// These options with [`schedule`](PlanOptions::schedule) set to `schedule`.
    pub fn with_schedule(mut self, schedule: ScheduleMode) -> PlanOptions {
        self.schedule = schedule;
        self
    }

    /// These options with [`ordering`](PlanOptions::ordering) set to `ordering`.
    pub fn with_ordering(mut self, ordering: OrderingOptions) -> PlanOptions {
        self.ordering = ordering;
        self
    }

    /// These options with [`views`](PlanOptions::views) set to `views`.
    pub fn with_views(mut self, views: bool) -> PlanOptions {
        self.views = views;
        self
    }

    /// These options with [`inplace`](PlanOptions::inplace) set to `inplace`.
    pub fn with_inplace(mut self, inplace: bool) -> PlanOptions {
        self.inplace = inplace;
        self
    }

    /// These options with [`inplace_over_inputs`](PlanOptions::inplace_over_inputs) set
    /// to `inplace_over_inputs`.
    pub fn with_inplace_over_inputs(mut self, inplace_over_inputs: bool) -> PlanOptions {
        self.inplace_over_inputs = inplace_over_inputs;
        self
    }

    /// These options with [`concat_elision`](PlanOptions::concat_elision) set to `concat_elision`.
    pub fn with_concat_elision(mut self, concat_elision: bool) -> PlanOptions {
        self.concat_elision = concat_elision;
        self
    }

    /// These options with [`inputs_in_arena`](PlanOptions::inputs_in_arena) set
    /// to `inputs_in_arena`.
    pub fn with_inputs_in_arena(mut self, inputs_in_arena: bool) -> PlanOptions {
        self.inputs_in_arena = inputs_in_arena;
        self
    }

    /// These options with [`outputs_in_arena`](PlanOptions::outputs_in_arena) set
    /// to `outputs_in_arena`.
    pub fn with_outputs_in_arena(mut self, outputs_in_arena: bool) -> PlanOptions {
        self.outputs_in_arena = outputs_in_arena;
        self
    }

    /// These options with [`alignment`](PlanOptions::alignment) set to `alignment`.
    pub fn with_alignment(mut self, alignment: u64) -> PlanOptions {
        self.alignment = alignment;
        self
    }

    /// These options with [`dtype_alignment`](PlanOptions::dtype_alignment) set
    /// to `dtype_alignment`.
    pub fn with_dtype_alignment(mut self, dtype_alignment: Vec<(DType, u64)>) -> PlanOptions {
        self.dtype_alignment = dtype_alignment;
        self
    }

    /// These options with [`strategy`](PlanOptions::strategy) set to `strategy`.
    pub fn with_strategy(mut self, strategy: Strategy) -> PlanOptions {
        self.strategy = strategy;
        self
    }

    /// These options with [`solve_time_limit`](PlanOptions::solve_time_limit) set
    /// to `solve_time_limit`.
    pub fn with_solve_time_limit(mut self, solve_time_limit: Duration) -> PlanOptions {
        self.solve_time_limit = solve_time_limit;
        self
    }

    /// These options with [`solve_node_limit`](PlanOptions::solve_node_limit) set
    /// to `solve_node_limit`.
    pub fn with_solve_node_limit(mut self, solve_node_limit: Option<u64>) -> PlanOptions {
        self.solve_node_limit = solve_node_limit;
        self
    }

    /// These options with [`op_table`](PlanOptions::op_table) set to `op_table`.
    pub fn with_op_table(mut self, op_table: OpTable) -> PlanOptions {
        self.op_table = op_table;
        self
    }

    /// These options with [`fold_weights`](PlanOptions::fold_weights) set to `fold_weights`.
    pub fn with_fold_weights(mut self, fold_weights: bool) -> PlanOptions {
        self.fold_weights = fold_weights;
        self
    }

    /// These options with [`attention`](PlanOptions::attention) set to `attention`.
    pub fn with_attention(mut self, attention: AttentionKernel) -> PlanOptions {
        self.attention = attention;
        self
    }

    /// These options with [`fuse`](PlanOptions::fuse) set to `fuse`.
    pub fn with_fuse(mut self, fuse: Fusions) -> PlanOptions {
        self.fuse = fuse;
        self
    }
}

impl Default for PlanOptions {
    fn default() -> PlanOptions {
        PlanOptions {
            bindings: Bindings::new(),
            bounded: Vec::new(),
            schedule: ScheduleMode::Given,
            ordering: OrderingOptions::default(),
            views: true,
            inplace: true,
            inplace_over_inputs: false,
            concat_elision: true,
            inputs_in_arena: true,
            outputs_in_arena: true,
            alignment: 256,
            dtype_alignment: Vec::new(),
            strategy: Strategy::Auto,
            solve_time_limit: Duration::from_secs(10),
            solve_node_limit: Some(PLAN_NODE_LIMIT),
            op_table: OpTable::default(),
            fold_weights: true,
            attention: AttentionKernel::Eager,
            fuse: Fusions::NONE,
        }
    }
}

/// The engine's node budget for one plan: smaller than the engine's default
/// ([`memplan_packing::DEFAULT_NODE_LIMIT`]), because `fit`, the tracker and the ordering
/// search plan the same graph many times, and the heuristics reach (or come within an
/// alignment of) the lower bound on most graphs.
pub const PLAN_NODE_LIMIT: u64 = 20_000;

impl PlanOptions {
    /// These options with views, in-place writes and Concat elision off.
    pub fn without_aliasing(mut self) -> PlanOptions {
        self.views = false;
        self.inplace = false;
        self.concat_elision = false;
        self
    }

    /// The alignment of a tensor of `dtype`: the largest of the global alignment, any
    /// per-dtype one, and the dtype's natural alignment (an `f16` is never at an odd byte,
    /// even with `alignment` 1: devices fault or read garbage on misaligned elements).
    pub fn alignment_for(&self, dtype: DType) -> u64 {
        self.dtype_alignment
            .iter()
            .filter(|(d, _)| *d == dtype)
            .map(|&(_, a)| a)
            .fold(self.alignment.max(dtype.element_align()), u64::max)
    }
}
