//! A training step planned from the forward graph alone: [`plan_training`].
//!
//! From a forward graph the step's memory graph is derived ([`derive`]): GELU and layer
//! normalisation written out op by op fused as ONNX Runtime fuses them ([`fuse`]), the
//! forward in training mode (BatchNormalization with batch statistics, normalisations keeping their
//! statistics, Dropout its mask, MaxPool its indices), a loss with a labels input, the
//! backward (one rule per op in [`rules`], saying what each gradient reads), gradient
//! accumulation for tensors read by several nodes, the weight gradients (in a gradient
//! region, or consumed by the optimizer right after they are made), and the optimizer step
//! with its persistent state (momentum one buffer, Adam and AdamW two moments, f32 master
//! weights for 16-bit parameters). Parameters, gradients and optimizer state are
//! [`memplan_ir::TensorKind::State`]: persistent, never in the arena.
//!
//! Which saved tensors the backward keeps and which it recomputes is the [`Checkpoint`]
//! policy ([`recompute`]): by default cheap element-wise ops and views whose inputs are saved
//! anyway are recomputed (as PyTorch's min-cut partitioner does); `none` keeps everything;
//! `every:N` and named nodes set checkpoints by hand; `auto` chooses checkpoints with the
//! fewest recomputed FLOPs ([`flops`]) that fit a budget.
//!
//! The joint graph is planned like any other graph, so the plan passes [`crate::verify_plan`],
//! whose own rules also check that each backward node reads what its forward op's gradient
//! needs.

mod auto;
mod bound;
mod cut;
mod derive;
mod exact;
mod flops;
mod fuse;
mod recompute;
mod rules;

use std::fmt;
use std::str::FromStr;

use memplan_ir::{Graph, IndexVec, NodeId, TensorId};

use crate::error::PlanError;
use crate::options::PlanOptions;
use crate::plan::Plan;

pub use bound::{RecomputeBound, recompute_lower_bound};
pub use derive::{ATTR_GRAD_OF, ATTR_RECOMPUTE_OF, ATTR_WRT};
pub use exact::{ExactCheckpoint, ExactSearch, exact_checkpoints};
pub use flops::node_flops;

/// The optimizer of a training step, by the state it keeps per parameter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Optimizer {
    /// Plain SGD: no state.
    Sgd,
    /// SGD with momentum: one velocity buffer.
    Momentum,
    /// Adam: two moments.
    Adam,
    /// AdamW: two moments.
    #[default]
    AdamW,
}

impl Optimizer {
    /// Every optimizer, in order.
    pub const ALL: [Optimizer; 4] = [
        Optimizer::Sgd,
        Optimizer::Momentum,
        Optimizer::Adam,
        Optimizer::AdamW,
    ];

    /// The CLI's name (`sgd`, `momentum`, `adam`, `adamw`).
    pub fn name(self) -> &'static str {
        match self {
            Optimizer::Sgd => "sgd",
            Optimizer::Momentum => "momentum",
            Optimizer::Adam => "adam",
            Optimizer::AdamW => "adamw",
        }
    }

    /// State buffers kept per parameter (each the parameter's shape).
    pub fn state_buffers(self) -> &'static [&'static str] {
        match self {
            Optimizer::Sgd => &[],
            Optimizer::Momentum => &["velocity"],
            Optimizer::Adam | Optimizer::AdamW => &["exp_avg", "exp_avg_sq"],
        }
    }

    /// The op of one parameter's update (see `memplan_ir::OpTable::mutated_inputs`).
    pub(crate) fn op(self) -> &'static str {
        match self {
            Optimizer::Sgd => "memplan.SGD",
            Optimizer::Momentum => "memplan.Momentum",
            Optimizer::Adam | Optimizer::AdamW => "memplan.Adam",
        }
    }
}

impl fmt::Display for Optimizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How an optimizer step runs over the parameters, after PyTorch's three implementations
/// (`torch.optim.AdamW(fused=True)`, `foreach=True`, `foreach=False`), which differ in the
/// temporaries they allocate. SGD and momentum update in place under all three (with
/// PyTorch's defaults: no weight decay, no Nesterov); Adam and AdamW differ:
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OptimizerKernel {
    /// One kernel per parameter that updates the moments and the weight in place: no
    /// temporaries (`fused=True`).
    #[default]
    Fused,
    /// Each step over all parameters of a dtype at once: `sqrt(exp_avg_sq)` of every one of
    /// them is made before any weight is updated, one temporary the size of the whole group
    /// (`foreach=True`, PyTorch's default on a GPU; `_multi_tensor_adam`).
    Foreach,
    /// One parameter after another: `exp_avg_sq.sqrt() / bias_correction2_sqrt` makes two
    /// temporaries the size of the parameter, one of which lives until its update
    /// (`foreach=False`, the default on a CPU; `_single_tensor_adam`).
    PerTensor,
}

impl OptimizerKernel {
    /// Every kernel, in order.
    pub const ALL: [OptimizerKernel; 3] = [
        OptimizerKernel::Fused,
        OptimizerKernel::Foreach,
        OptimizerKernel::PerTensor,
    ];

    /// The CLI's name (`fused`, `foreach`, `per-tensor`).
    pub fn name(self) -> &'static str {
        match self {
            OptimizerKernel::Fused => "fused",
            OptimizerKernel::Foreach => "foreach",
            OptimizerKernel::PerTensor => "per-tensor",
        }
    }
}

impl fmt::Display for OptimizerKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for OptimizerKernel {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<OptimizerKernel, UnknownName> {
        OptimizerKernel::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| UnknownName {
                what: "optimizer kernel",
                given: s.to_owned(),
                expected: "fused, foreach or per-tensor",
            })
    }
}

/// A name that is not an optimizer (or loss, or checkpoint policy).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{given}` (expected {expected})")]
#[non_exhaustive]
pub struct UnknownName {
    what: &'static str,
    given: String,
    expected: &'static str,
}

impl FromStr for Optimizer {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Optimizer, UnknownName> {
        Optimizer::ALL
            .into_iter()
            .find(|o| o.name() == s)
            .ok_or_else(|| UnknownName {
                what: "optimizer",
                given: s.to_owned(),
                expected: "sgd, momentum, adam or adamw",
            })
    }
}

/// The loss put on the forward graph's first output (the first the model declares,
/// [`memplan_ir::Graph::outputs`]; other outputs are returned but get no gradient), as ONNX
/// Runtime's `generate_artifacts` puts it on `graph.output[0]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Loss {
    /// Softmax cross-entropy against integer class labels (`labels`, the output's shape
    /// without its class axis 1), mean over the batch.
    #[default]
    CrossEntropy,
    /// Mean squared error against a target of the output's shape (`target`).
    Mse,
    /// No loss: the output is differentiated as it is, its gradient an input
    /// (`<output>_grad`, of the output's shape) the caller gives.
    None,
}

impl Loss {
    /// The CLI's name (`cross-entropy`, `mse`, `none`).
    pub fn name(self) -> &'static str {
        match self {
            Loss::CrossEntropy => "cross-entropy",
            Loss::Mse => "mse",
            Loss::None => "none",
        }
    }
}

impl FromStr for Loss {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Loss, UnknownName> {
        [Loss::CrossEntropy, Loss::Mse, Loss::None]
            .into_iter()
            .find(|l| l.name() == s)
            .ok_or_else(|| UnknownName {
                what: "loss",
                given: s.to_owned(),
                expected: "cross-entropy, mse or none",
            })
    }
}

/// Which saved tensors the backward recomputes instead of keeping.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Checkpoint {
    /// Cheap element-wise ops and views whose inputs are saved anyway are recomputed; every
    /// other saved tensor is kept.
    #[default]
    Cheap,
    /// Nothing is recomputed.
    None,
    /// A checkpoint after every `N`-th forward node: what crosses it is kept, every other
    /// saved tensor is recomputed in the backward from the nearest checkpoint.
    Every(usize),
    /// Checkpoints after the named forward nodes (kept as for `Every`).
    After(Vec<String>),
    /// The checkpoints with the fewest recomputed FLOPs whose plan fits `budget` bytes of
    /// device memory (arena, persistent region and caller-owned inputs and outputs).
    Auto {
        /// The device memory to fit.
        budget: u64,
    },
}

impl Checkpoint {
    /// The CLI's spelling: `cheap`, `none`, `every:N`, `NODE,...`, `auto`.
    pub fn describe(&self) -> String {
        match self {
            Checkpoint::Cheap => "cheap".to_owned(),
            Checkpoint::None => "none".to_owned(),
            Checkpoint::Every(n) => format!("every:{n}"),
            Checkpoint::After(nodes) => nodes.join(","),
            Checkpoint::Auto { .. } => "auto".to_owned(),
        }
    }
}

/// What to do with a forward op that has no backward rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum UnknownOps {
    /// Refuse the graph, naming the op.
    #[default]
    Refuse,
    /// Plan its backward as one node reading every input, output and output gradient of the
    /// forward op and writing the gradient of each input that needs one.
    SaveAll,
}

/// Options of [`plan_training`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TrainingOptions {
    /// How the joint graph is planned (bindings, schedule, aliasing, alignment, ...).
    pub plan: PlanOptions,
    /// The optimizer.
    pub optimizer: Optimizer,
    /// The loss.
    pub loss: Loss,
    /// Run each parameter's update right after its gradient is complete, in the backward
    /// (PyTorch's optimizer in backward), instead of all updates after the backward.
    pub fused_optimizer: bool,
    /// Gradients accumulate across micro-steps: each lives in a persistent gradient region
    /// (training state) for the whole run, as ONNX Runtime's training graphs keep them.
    /// Without it, a gradient is an arena tensor from the node that makes it to its
    /// parameter's update, its bytes reused before and after (PyTorch's `backward()`, then
    /// `step()` and `zero_grad(set_to_none=True)`).
    pub accumulate: bool,
    /// How the optimizer step runs, which decides its temporaries.
    pub optimizer_kernel: OptimizerKernel,
    /// Which saved tensors to recompute.
    pub checkpoint: Checkpoint,
    /// Ops without a backward rule.
    pub unknown_ops: UnknownOps,
    /// Keep f32 master weights (and f32 optimizer state) for 16-bit float parameters.
    pub master_weights: bool,
    /// Name patterns (`*` wildcard) of float weights that are not trained.
    pub frozen: Vec<String>,
    /// Fuse element-wise regions of one input that no named fusion took (GELU, SiLU, ...
    /// in any spelling) into one op whose gradient reads the input alone (on by default;
    /// off, only ONNX Runtime's own fusions are made, as to compare with its graphs).
    pub pointwise_fusion: bool,
}

impl TrainingOptions {
    /// These options with [`plan`](TrainingOptions::plan) set to `plan`.
    pub fn with_plan(mut self, plan: PlanOptions) -> TrainingOptions {
        self.plan = plan;
        self
    }

    /// These options with [`optimizer`](TrainingOptions::optimizer) set to `optimizer`.
    pub fn with_optimizer(mut self, optimizer: Optimizer) -> TrainingOptions {
        self.optimizer = optimizer;
        self
    }

    /// These options with [`loss`](TrainingOptions::loss) set to `loss`.
    pub fn with_loss(mut self, loss: Loss) -> TrainingOptions {
        self.loss = loss;
        self
    }

    /// These options with [`fused_optimizer`](TrainingOptions::fused_optimizer) set
    /// to `fused_optimizer`.
    pub fn with_fused_optimizer(mut self, fused_optimizer: bool) -> TrainingOptions {
        self.fused_optimizer = fused_optimizer;
        self
    }

    /// These options with [`accumulate`](TrainingOptions::accumulate) set to `accumulate`.
    pub fn with_accumulate(mut self, accumulate: bool) -> TrainingOptions {
        self.accumulate = accumulate;
        self
    }

    /// These options with [`optimizer_kernel`](TrainingOptions::optimizer_kernel) set
    /// to `optimizer_kernel`.
    pub fn with_optimizer_kernel(mut self, optimizer_kernel: OptimizerKernel) -> TrainingOptions {
        self.optimizer_kernel = optimizer_kernel;
        self
    }

    /// These options with [`checkpoint`](TrainingOptions::checkpoint) set to `checkpoint`.
    pub fn with_checkpoint(mut self, checkpoint: Checkpoint) -> TrainingOptions {
        self.checkpoint = checkpoint;
        self
    }

    /// These options with [`unknown_ops`](TrainingOptions::unknown_ops) set to `unknown_ops`.
    pub fn with_unknown_ops(mut self, unknown_ops: UnknownOps) -> TrainingOptions {
        self.unknown_ops = unknown_ops;
        self
    }

    /// These options with [`master_weights`](TrainingOptions::master_weights) set
    /// to `master_weights`.
    pub fn with_master_weights(mut self, master_weights: bool) -> TrainingOptions {
        self.master_weights = master_weights;
        self
    }

    /// These options with [`frozen`](TrainingOptions::frozen) set to `frozen`.
    pub fn with_frozen(mut self, frozen: Vec<String>) -> TrainingOptions {
        self.frozen = frozen;
        self
    }

    /// These options with [`pointwise_fusion`](TrainingOptions::pointwise_fusion) set
    /// to `pointwise_fusion`.
    pub fn with_pointwise_fusion(mut self, pointwise_fusion: bool) -> TrainingOptions {
        self.pointwise_fusion = pointwise_fusion;
        self
    }
}

impl Default for TrainingOptions {
    fn default() -> TrainingOptions {
        TrainingOptions {
            plan: PlanOptions::default(),
            optimizer: Optimizer::AdamW,
            loss: Loss::CrossEntropy,
            fused_optimizer: false,
            accumulate: false,
            optimizer_kernel: OptimizerKernel::Fused,
            checkpoint: Checkpoint::Cheap,
            unknown_ops: UnknownOps::Refuse,
            master_weights: true,
            frozen: Vec::new(),
            pointwise_fusion: true,
        }
    }
}

/// The phase a node of the step belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Phase {
    /// The forward graph and the loss.
    Forward,
    /// Gradients, their accumulation, and recomputation.
    Backward,
    /// Parameter updates.
    Optimizer,
}

impl Phase {
    /// `forward`, `backward` or `optimizer`.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Optimizer => "optimizer",
        }
    }
}

/// What recomputation costs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecomputeCost {
    /// Recompute nodes inserted into the backward.
    pub nodes: u64,
    /// Their FLOPs (2 per multiply-add for MatMul, Gemm and Conv; one per output element
    /// otherwise).
    pub flops: u64,
    /// The forward graph's FLOPs, the same way.
    pub forward_flops: u64,
}

/// The breakdown of a training step's memory.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TrainingSummary {
    /// The optimizer.
    pub optimizer: Optimizer,
    /// The loss.
    pub loss: Loss,
    /// Whether updates run right after each gradient.
    pub fused_optimizer: bool,
    /// Whether gradients accumulate in a persistent region.
    pub accumulate: bool,
    /// How the optimizer step runs.
    pub optimizer_kernel: OptimizerKernel,
    /// The checkpoint policy asked for (`auto` as the policy, the chosen checkpoints in
    /// [`TrainingSummary::checkpoints`]).
    pub checkpoint: String,
    /// The forward nodes after which a checkpoint was set (`every`, named, `auto`).
    pub checkpoints: Vec<String>,
    /// Whether cheap ops are recomputed where that keeps fewer bytes (the `cheap` policy,
    /// also under checkpoints; `auto` may choose to recompute nothing).
    pub cheap_recompute: bool,
    /// The trained parameters (joint graph ids), in id order.
    pub parameters: Vec<TensorId>,
    /// Elements of the trained parameters.
    pub parameter_elements: u64,
    /// Forward tensors kept for the backward (forward inputs included), joint ids.
    pub saved: Vec<TensorId>,
    /// Their bytes.
    pub saved_bytes: u64,
    /// Bytes of the weights: trained parameters and constants.
    pub weight_bytes: u64,
    /// Bytes of the persistent gradient region (0 unless gradients accumulate).
    pub gradient_bytes: u64,
    /// Bytes of every parameter's final gradient, persistent or not.
    pub all_gradient_bytes: u64,
    /// Bytes of the optimizer state (moments, velocity, master weights).
    pub optimizer_state_bytes: u64,
    /// The persistent region: weights, gradients and optimizer state, aligned as placed.
    pub persistent_bytes: u64,
    /// Recomputation.
    pub recompute: RecomputeCost,
    /// The phase of each node of the joint graph.
    pub phases: IndexVec<NodeId, Phase>,
}

/// A planned training step.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TrainingStep {
    /// The step's graph: forward, loss, backward, optimizer.
    pub graph: Graph,
    /// Its plan.
    pub plan: Plan,
    /// The breakdown.
    pub summary: TrainingSummary,
}

impl TrainingStep {
    /// The step `graph` with its `plan` and `summary` (a step read back from a plan file).
    pub fn new(graph: Graph, plan: Plan, summary: TrainingSummary) -> TrainingStep {
        TrainingStep {
            graph,
            plan,
            summary,
        }
    }
}

/// Plans a training step of `forward`: derives the step's graph (the forward in training
/// mode, a loss, the backward, gradient accumulation, the optimizer step with its persistent
/// state), picks what to recompute by `options.checkpoint`, and plans it.
pub fn plan_training(
    forward: &Graph,
    options: &TrainingOptions,
) -> Result<TrainingStep, PlanError> {
    let remade;
    let forward = if options.plan.fuse.constants {
        remade = constants_at_use(forward, options)?;
        &remade
    } else {
        forward
    };
    if let Checkpoint::Auto { .. } = options.checkpoint {
        return auto_both_orders(forward, options);
    }
    let (base, choice, derived, plan) = plan_ordered(forward, options, false)?;
    // Under the `cheap` policy, the backward finishing the earliest branch first (what a
    // memory-aware reordering such as Inductor's often finds), kept only when its plan needs
    // less. Not under the others but `auto` (see [`auto_both_orders`]): `none`, `every` and
    // named checkpoints keep the reverse forward order.
    let (base, choice, derived, plan) = match options.checkpoint {
        Checkpoint::Cheap => {
            // Planned only when its liveness peak (the plan's lower bound) is below this
            // order's: packing is the dear part.
            let peak = |g: &Graph| -> Result<u64, PlanError> {
                let mut work = crate::planner::PlanContext::new();
                Ok(crate::planner::step_profile(g, &options.plan, &mut work)
                    .map_err(PlanError::in_graph(g))?
                    .into_iter()
                    .max()
                    .unwrap_or(0))
            };
            let other_base = derive::Base::ordered(forward, options, true)?;
            let other_choice = recompute::choose(&other_base, options)?;
            let other_derived = other_base.materialize(&other_choice.keep)?;
            let other = if other_choice.plan.is_none()
                && peak(&other_derived.graph)? < peak(&derived.graph)?
            {
                let plan = crate::planner::plan_graph(&other_derived.graph, &options.plan)
                    .map_err(PlanError::in_graph(&other_derived.graph))?;
                Some((other_base, other_choice, other_derived, plan))
            } else {
                None
            };
            if let Some(other) = other.filter(|other| {
                other.3.arena_bytes < plan.arena_bytes
                    && other.3.weight_bytes <= plan.weight_bytes
                    && other.2.recompute.len() <= derived.recompute.len()
            }) {
                other
            } else {
                (base, choice, derived, plan)
            }
        }
        _ => (base, choice, derived, plan),
    };
    finish_step((base, choice, derived, plan), options)
}

/// The training step of a planned choice, with its summary.
fn finish_step(
    (base, choice, derived, plan): (derive::Base, recompute::Choice, derive::Derived, Plan),
    options: &TrainingOptions,
) -> Result<TrainingStep, PlanError> {
    let summary = derived
        .summary(&base, options, &plan, &choice)
        .map_err(PlanError::in_graph(&derived.graph))?;
    Ok(TrainingStep {
        graph: derived.graph,
        plan,
        summary,
    })
}

/// `auto` in both backward orders: the reverse forward order, and, where its step without
/// recomputation has a lower liveness peak (and the order differs), the one finishing the
/// earliest branch first. The answer with fewer recomputed FLOPs is kept (ties: the smaller
/// plan, then the reverse order); when neither fits, the error gives the least memory
/// either found. Each order's answers are monotone in the budget, so their least is too,
/// and it is never above the reverse order's alone (what the simple rules are planned in).
fn auto_both_orders(forward: &Graph, options: &TrainingOptions) -> Result<TrainingStep, PlanError> {
    let step = |base: derive::Base| finish_step(plan_base(base, options)?, options);
    let order =
        |b: &derive::Base| -> Vec<String> { b.later.iter().map(|(n, _)| n.name.clone()).collect() };
    let none_peak = |b: &derive::Base| -> Result<u64, PlanError> {
        let none = b.materialize(&recompute::all_kept(b))?;
        let mut work = crate::planner::PlanContext::new();
        Ok(
            crate::planner::step_profile(&none.graph, &options.plan, &mut work)
                .map_err(PlanError::in_graph(&none.graph))?
                .into_iter()
                .max()
                .unwrap_or(0),
        )
    };
    let reverse = derive::Base::ordered(forward, options, false)?;
    let (reverse_order, reverse_peak) = (order(&reverse), none_peak(&reverse)?);
    let first = step(reverse);
    // Nothing recomputed cannot be beaten.
    if first.as_ref().is_ok_and(|s| s.summary.recompute.flops == 0) {
        return first;
    }
    let other = derive::Base::ordered(forward, options, true)?;
    if order(&other) == reverse_order || none_peak(&other)? >= reverse_peak {
        return first;
    }
    let second = step(other);
    let total = |s: &TrainingStep| s.plan.device_bytes(&s.graph).map_or(u64::MAX, |b| b.total);
    match (first, second) {
        (Ok(a), Ok(b)) => {
            let key = |s: &TrainingStep| (s.summary.recompute.flops, total(s));
            Ok(if key(&b) < key(&a) { b } else { a })
        }
        (Ok(a), Err(_)) => Ok(a),
        (Err(PlanError::BudgetTooSmall { .. }), Ok(b)) => Ok(b),
        (
            Err(PlanError::BudgetTooSmall {
                budget,
                minimum: m1,
                checkpoints: c1,
            }),
            Err(PlanError::BudgetTooSmall {
                minimum: m2,
                checkpoints: c2,
                ..
            }),
        ) => Err(PlanError::BudgetTooSmall {
            budget,
            minimum: m1.min(m2),
            checkpoints: if m2 < m1 { c2 } else { c1 },
        }),
        (Err(e), _) => Err(e),
    }
}

/// The step of `forward` derived with its backward in reverse forward order or, with
/// `earliest_first`, finishing the earliest branch first ([`derive::Base::ordered`]),
/// recomputed by `options.checkpoint`, and its plan.
fn plan_ordered(
    forward: &Graph,
    options: &TrainingOptions,
    earliest_first: bool,
) -> Result<(derive::Base, recompute::Choice, derive::Derived, Plan), PlanError> {
    plan_base(
        derive::Base::ordered(forward, options, earliest_first)?,
        options,
    )
}

/// `base` recomputed by `options.checkpoint`, and its plan.
fn plan_base(
    base: derive::Base,
    options: &TrainingOptions,
) -> Result<(derive::Base, recompute::Choice, derive::Derived, Plan), PlanError> {
    let choice = recompute::choose(&base, options)?;
    let derived = base.materialize(&choice.keep)?;
    let plan = match &choice.plan {
        Some(p) => p.clone(),
        None => crate::planner::plan_graph(&derived.graph, &options.plan)
            .map_err(PlanError::in_graph(&derived.graph))?,
    };
    Ok((base, choice, derived, plan))
}

/// `forward` with its kernels fused and its constant-built tensors made where they are used
/// wherever that lowers what the training step needs (the `constants` fusion, decided on
/// the step: its measured peak, under the checkpoint policy asked for (`cheap` for `auto`),
/// plus its persistent region). A tensor kept computed once (at load, or by its first
/// reader) is one whose copies would not lower the step's need.
fn constants_at_use(forward: &Graph, options: &TrainingOptions) -> Result<Graph, PlanError> {
    let kernels = PlanOptions {
        fuse: crate::Fusions {
            constants: false,
            ..options.plan.fuse
        },
        ..options.plan.clone()
    };
    let mut g = crate::fuse::fuse_graph(forward, &kernels)?.graph;
    let inner = TrainingOptions {
        plan: kernels.clone(),
        ..options.clone()
    };
    let need = |candidate: &Graph| {
        let base = derive::Base::new(candidate, &inner)?;
        let keep = match inner.checkpoint {
            Checkpoint::Auto { .. } => cut::min_cut_keep(&base, &inner.plan),
            _ => recompute::choose(&base, &inner)?.keep,
        };
        let step = base.materialize(&keep)?;
        let mut work = crate::planner::PlanContext::new();
        let peak = crate::planner::step_profile(&step.graph, &inner.plan, &mut work)
            .map_err(PlanError::in_graph(&step.graph))?
            .into_iter()
            .max()
            .unwrap_or(0);
        let persistent = crate::planner::persistent_bytes(&step.graph, &inner.plan)
            .map_err(PlanError::in_graph(&step.graph))?;
        // Every constant-built tensor of the forward is worth trying: the step's peak is
        // often in its backward, where the forward's liveness says nothing.
        let all = IndexVec::from_elem(true, candidate.tensors().len());
        Ok((peak.saturating_add(persistent), all))
    };
    // A uniform weight is made where used only when it is a constant of the model: a
    // `Constant` node's output, not a float, or frozen (a parameter changes with every
    // update).
    let fixed = |g: &Graph, t: TensorId| {
        let name = g.tensor(t).name.as_str();
        !g.tensor(t).dtype.is_float()
            || g.constant_node_outputs().any(|c| c == name)
            || options
                .frozen
                .iter()
                .any(|p| crate::state::name_matches(p, name))
    };
    crate::fuse::constants::remake_with(&mut g, &options.plan, &need, &fixed)?;
    Ok(g)
}
