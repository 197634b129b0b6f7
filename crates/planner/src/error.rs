//! Why a graph could not be planned. Every variant names the tensor, node or option it is
//! about; none is a panic.

use std::fmt;

use memplan_ir::{BindError, ConflictKind, SizeError, TensorKind, ValidationErrors};

use memplan_packing::SolveError;

/// Why [`crate::plan_graph`] (or [`crate::plan_training`]) returned no plan.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The graph is not valid.
    #[error("invalid graph: {0}")]
    Invalid(ValidationErrors),
    /// A tensor's shape uses a symbol that has no value: give the symbol a value in the
    /// options' bindings (or plan it at its bound, for a data-dependent symbol).
    #[error("tensor `{tensor}` needs a value for symbol `{symbol}`")]
    UnboundSymbol {
        /// The tensor.
        tensor: String,
        /// The symbol's name.
        symbol: String,
    },
    /// A tensor's size cannot be computed (overflow, negative dimension, string dtype).
    #[error("tensor `{tensor}` has no byte size: {reason}")]
    Size {
        /// The tensor.
        tensor: String,
        /// What went wrong (never [`SizeError::Unbound`]: that is [`PlanError::UnboundSymbol`]).
        reason: SizeError,
    },
    /// An alignment that is not a power of two.
    #[error("alignment {align} is not a power of two")]
    BadAlignment {
        /// The alignment.
        align: u64,
    },
    /// A schedule that is not a topological order of every node.
    #[error("the schedule is not a topological order of graph `{graph}`: {reason}")]
    BadSchedule {
        /// The graph.
        graph: String,
        /// What is wrong.
        reason: ScheduleFault,
    },
    /// Byte arithmetic overflowed.
    #[error("byte arithmetic overflows while {what}")]
    Overflow {
        /// What was being computed.
        what: String,
    },
    /// The packing engine returned no placement (only possible with a capacity, which the
    /// planner never sets: reaching this is a bug worth reporting).
    #[error("the packing engine found no placement for {storages} storages")]
    NoPlacement {
        /// Storages to place.
        storages: usize,
    },
    /// The packing engine failed.
    #[error("placement failed: {0}")]
    Solve(#[from] SolveError),
    /// A body of a control-flow node could not be planned, so the node's workspace has no
    /// size.
    #[error("cannot size the workspace of node `{node}` (body `{attr}`): {error}")]
    Body {
        /// The node that runs the body.
        node: String,
        /// The attribute holding the body.
        attr: String,
        /// Why the body could not be planned (naming the body tensor).
        error: Box<PlanError>,
    },
    /// An output declared with a shape its op does not make at the bindings planned (or,
    /// for symbols planned at their bounds, at a smaller value), or a convolution or pooling
    /// window that does not fit there (see `memplan_ir::ShapeConflict`).
    #[error("node `{node}`: output `{output}` {problem}")]
    DeclaredShape {
        /// The node.
        node: String,
        /// The output.
        output: String,
        /// What is wrong, the op and the binding (boxed: it holds two shapes).
        problem: Box<ShapeProblem>,
    },
    /// The symbol values do not hold together: two dims that must broadcast do not, or a
    /// broadcast symbol is given a value its dims contradict.
    #[error("the symbol values do not hold together: {0}")]
    Bind(BindError),
    /// A node whose inputs do not have the shapes its op needs to size its scratch (a fused
    /// attention op's query of too low a rank, say).
    #[error("node `{node}` ({op}): {reason}")]
    BadNode {
        /// The node.
        node: String,
        /// Its op.
        op: String,
        /// What is wrong (boxed: it names a tensor).
        reason: Box<NodeFault>,
    },
    /// A size that could grow as a bounded data-dependent symbol falls (a negative term in
    /// it), so a plan at the bound would not hold smaller values: plan for one value of the
    /// symbol instead (bind it).
    #[error(
        "tensor `{tensor}` has dimension `{dim}`, which grows as `{symbol}` falls: a plan at the bound of `{symbol}` would not hold smaller values (plan for one value of `{symbol}`)"
    )]
    FallingSize {
        /// The tensor.
        tensor: String,
        /// The dimension, as written.
        dim: String,
        /// The bounded symbol.
        symbol: String,
    },
    /// A forward op with no backward rule (see `memplan_planner::UnknownOps`).
    #[error(
        "op `{op}` (node `{node}`) has no backward rule; planning its backward as reading all its inputs and outputs must be asked for (save-all)"
    )]
    NoBackwardRule {
        /// The forward node.
        node: String,
        /// Its op.
        op: String,
    },
    /// A schedule given for a graph that the options ask to fuse first: a schedule names the
    /// nodes of the graph planned, so fuse it first (`fuse_graph`) and give its schedule.
    #[error(
        "graph `{graph}` is planned with a schedule of its own, but the options fuse it ({fusions}): fuse it first and give a schedule of the fused graph"
    )]
    NotFused {
        /// The graph.
        graph: String,
        /// The fusions asked for.
        fusions: String,
    },
    /// A training step that cannot be derived (for a reason without a variant of its own).
    #[error("cannot derive the training step: {reason}")]
    Training {
        /// Why.
        reason: String,
    },
    /// Gradients accumulated across micro-steps together with an optimizer fused into the
    /// backward (`TrainingOptions::accumulate` and `fused_optimizer` both set).
    #[error(
        "cannot derive the training step: gradients that accumulate across micro-steps are applied after the last of them: accumulating does not go with updating each parameter in the backward (a fused optimizer)"
    )]
    AccumulateWithFusedOptimizer,
    /// A cross-entropy loss over an output that is not float scores of rank 2 or more (choose
    /// `Loss::Mse` or `Loss::None` for it).
    #[error(
        "cannot derive the training step: cross-entropy needs float scores of rank 2 or more (batch, classes, ...); output `{output}` is {dtype}[{rank}] (choose the mse loss or none)"
    )]
    LossNeedsScores {
        /// The output.
        output: String,
        /// Its dtype.
        dtype: memplan_ir::DType,
        /// Its rank.
        rank: usize,
    },
    /// A checkpoint named by `Checkpoint::After` that is no node of the forward graph.
    #[error("cannot derive the training step: checkpoint `{name}` is no forward node")]
    UnknownCheckpoint {
        /// The name given.
        name: String,
    },
    /// No checkpoint choice fits the budget.
    #[error(
        "no checkpointing fits the budget of {budget} bytes: the least memory found is {minimum} bytes (with {checkpoints} checkpoints)"
    )]
    BudgetTooSmall {
        /// The budget.
        budget: u64,
        /// The least total device bytes found.
        minimum: u64,
        /// Checkpoints of that choice.
        checkpoints: usize,
    },
    /// A forward and a backward graph that do not fit together.
    #[error("training graphs do not match: tensor `{tensor}` {reason}")]
    TrainingMismatch {
        /// The tensor both graphs name.
        tensor: String,
        /// What does not match.
        reason: TrainingFault,
    },
}

impl PlanError {
    /// Why tensor `tensor` of `graph` has no size: [`PlanError::UnboundSymbol`] naming the
    /// symbol, or [`PlanError::Size`].
    pub(crate) fn no_size(graph: &memplan_ir::Graph, tensor: &str, reason: SizeError) -> PlanError {
        match reason {
            SizeError::Unbound(s) => PlanError::UnboundSymbol {
                tensor: tensor.to_owned(),
                symbol: graph
                    .symbols()
                    .get(s)
                    .cloned()
                    .unwrap_or_else(|| s.to_string()),
            },
            other => PlanError::Size {
                tensor: tensor.to_owned(),
                reason: other,
            },
        }
    }
}

/// How a declared output shape contradicts its op ([`PlanError::DeclaredShape`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShapeProblem {
    /// The node's op.
    pub op: String,
    /// What is wrong.
    pub conflict: ConflictKind,
    /// The binding it is wrong at: each symbol given a value and its value, in the graph's
    /// symbol order (empty: at the graph's static shapes).
    pub at: Vec<(String, u64)>,
}

impl fmt::Display for ShapeProblem {
    /// `is declared [2, 3] but the op makes [2, 4] at this binding (Slice, at batch=1, seq=3)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}, ", self.conflict, self.op)?;
        if self.at.is_empty() {
            return f.write_str("at its static shapes)");
        }
        f.write_str("at ")?;
        for (i, (symbol, value)) in self.at.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{symbol}={value}")?;
        }
        f.write_str(")")
    }
}

/// Why a node's inputs, outputs or attributes cannot size its scratch
/// ([`PlanError::BadNode`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NodeFault {
    /// An input of lower rank than the op reads dims of.
    #[error("input {input} `{tensor}` has rank {rank}, too low for a fused attention op")]
    RankTooLow {
        /// The input's position.
        input: usize,
        /// The input tensor.
        tensor: String,
        /// Its rank.
        rank: usize,
    },
    /// No tensor where an axis attribute points (no output, or no input 1).
    #[error("has no tensor for `{attr}`")]
    NoTensorFor {
        /// The attribute.
        attr: &'static str,
    },
    /// An attribute the op needs, absent or not a non-negative integer.
    #[error("has no `{attr}` attribute")]
    NoAttribute {
        /// The attribute.
        attr: &'static str,
    },
    /// An axis attribute past the rank of the tensor it indexes.
    #[error("`{attr}` {axis} is past the rank of `{tensor}`")]
    AxisPastRank {
        /// The attribute.
        attr: &'static str,
        /// Its value.
        axis: usize,
        /// The tensor.
        tensor: String,
    },
    /// A node without the output the op sizes from.
    #[error("has no output")]
    NoOutput,
}

/// What is wrong with a caller's schedule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleFault {
    /// More steps than a `u32` counts.
    #[error("more than 2^32 steps")]
    TooManySteps,
    /// Not one step per node.
    #[error("it has {steps} steps for {nodes} nodes")]
    WrongLength {
        /// Steps in the schedule.
        steps: usize,
        /// Nodes in the graph.
        nodes: usize,
    },
    /// An entry that is not a node id of the graph.
    #[error("{0} is not a node")]
    NotANode(String),
    /// A node scheduled twice.
    #[error("node `{0}` runs twice")]
    RunsTwice(String),
    /// A node scheduled before the producer of one of its inputs.
    #[error("node `{node}` runs before `{producer}`, which produces its input")]
    BeforeProducer {
        /// The node.
        node: String,
        /// The producer it runs before.
        producer: String,
    },
    /// A node moved across an in-place write of a tensor it shares with another node (a
    /// reader of a gradient buffer before its accumulation, a weight's reader after its
    /// optimizer step), against the graph's node order.
    #[error(
        "node `{node}` runs before `{before}`, but the two touch a tensor one of them writes in place, and the graph orders `{before}` first"
    )]
    AcrossWrite {
        /// The node that runs too early.
        node: String,
        /// The node it must follow.
        before: String,
    },
}

/// How a backward graph's tensor disagrees with the forward graph.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TrainingFault {
    /// The backward graph's symbols do not extend the forward graph's.
    #[error(
        "is a backward symbol where the forward graph has `{forward}` (backward symbols must extend the forward ones)"
    )]
    Symbol {
        /// The forward graph's symbol at that position.
        forward: String,
    },
    /// Different dtype or shape.
    #[error("is {forward} in the forward graph but {backward} in the backward graph")]
    Shape {
        /// The forward tensor's dtype and shape.
        forward: String,
        /// The backward tensor's.
        backward: String,
    },
    /// A forward tensor that the backward graph computes.
    #[error(
        "is a forward tensor but a backward {0}; the backward graph may only read it (as an input or weight)"
    )]
    Written(TensorKind),
    /// A weight on one side only.
    #[error("is a forward {forward} but a backward {backward}")]
    Kind {
        /// Its kind in the forward graph.
        forward: TensorKind,
        /// Its kind in the backward graph.
        backward: TensorKind,
    },
}
