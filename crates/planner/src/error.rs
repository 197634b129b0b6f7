//! Why a graph could not be planned. Every variant names the tensor, node or option it is
//! about; none is a panic.
//!
//! Tensors and nodes are held by id ([`TensorId`], [`NodeId`]) and named when the error is
//! rendered, through [`GraphError::with_graph`] with the graph the caller planned
//! (`Display` alone names ids: `t12`, `n3`). An error found in a graph the caller does not
//! hold (the fused graph, a training step's graphs, a variant the planner built) comes
//! wrapped in [`PlanError::InGraph`], which carries that graph and renders with it. A name
//! stays where the name is the data: a tensor matched by name across two graphs
//! ([`PlanError::TrainingMismatch`]), a checkpoint name that names no node.

use std::fmt;

use memplan_ir::{
    AnyEntity, BindError, ConflictKind, Entities, ErrorGraph, Graph, GraphError, Names, NodeId,
    SizeError, TensorId, TensorKind, ValidationErrors,
};

use memplan_packing::SolveError;

/// Why [`crate::plan_graph`] (or [`crate::plan_training`]) returned no plan. Render it with
/// the graph planned: `error.with_graph(&graph)` (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PlanError {
    /// The graph is not valid.
    Invalid(ValidationErrors),
    /// A tensor's shape uses a symbol that has no value: give the symbol a value in the
    /// options' bindings (or plan it at its bound, for a data-dependent symbol).
    UnboundSymbol {
        /// The tensor.
        tensor: TensorId,
        /// The symbol's name.
        symbol: String,
    },
    /// A tensor's size cannot be computed (overflow, negative dimension, string dtype).
    Size {
        /// The tensor.
        tensor: TensorId,
        /// What went wrong (never [`SizeError::Unbound`]: that is [`PlanError::UnboundSymbol`]).
        reason: SizeError,
    },
    /// An alignment that is not a power of two.
    BadAlignment {
        /// The alignment.
        align: u64,
    },
    /// A schedule that is not a topological order of every node.
    BadSchedule {
        /// The graph's name.
        graph: String,
        /// What is wrong.
        reason: ScheduleFault,
    },
    /// Byte arithmetic overflowed.
    Overflow {
        /// What was being computed.
        what: String,
    },
    /// The packing engine returned no placement (only possible with a capacity, which the
    /// planner never sets: reaching this is a bug worth reporting).
    NoPlacement {
        /// Storages to place.
        storages: usize,
    },
    /// The packing engine failed.
    Solve(SolveError),
    /// A body of a control-flow node could not be planned, so the node's workspace has no
    /// size.
    Body {
        /// The node that runs the body.
        node: NodeId,
        /// The attribute holding the body.
        attr: String,
        /// Why the body could not be planned (its entities are the body's).
        error: Box<PlanError>,
    },
    /// An output declared with a shape its op does not make at the bindings planned (or,
    /// for symbols planned at their bounds, at a smaller value), or a convolution or pooling
    /// window that does not fit there (see `memplan_ir::ShapeConflict`).
    DeclaredShape {
        /// The node.
        node: NodeId,
        /// The output.
        output: TensorId,
        /// What is wrong, the op and the binding (boxed: it holds two shapes).
        problem: Box<ShapeProblem>,
    },
    /// The symbol values do not hold together: two dims that must broadcast do not, or a
    /// broadcast symbol is given a value its dims contradict.
    Bind(BindError),
    /// A node whose inputs do not have the shapes its op needs to size its scratch (a fused
    /// attention op's query of too low a rank, say).
    BadNode {
        /// The node.
        node: NodeId,
        /// Its op.
        op: String,
        /// What is wrong (boxed: it names a tensor).
        reason: Box<NodeFault>,
    },
    /// A size that could grow as a bounded data-dependent symbol falls (a negative term in
    /// it), so a plan at the bound would not hold smaller values: plan for one value of the
    /// symbol instead (bind it).
    FallingSize {
        /// The tensor.
        tensor: TensorId,
        /// The dimension, as written.
        dim: String,
        /// The bounded symbol.
        symbol: String,
    },
    /// A forward op with no backward rule (see `memplan_planner::UnknownOps`).
    NoBackwardRule {
        /// The forward node.
        node: NodeId,
        /// Its op.
        op: String,
    },
    /// A schedule given for a graph that the options ask to fuse first: a schedule names the
    /// nodes of the graph planned, so fuse it first (`fuse_graph`) and give its schedule.
    NotFused {
        /// The graph's name.
        graph: String,
        /// The fusions asked for.
        fusions: String,
    },
    /// A training step that cannot be derived (for a reason without a variant of its own).
    Training {
        /// Why.
        reason: String,
    },
    /// Gradients accumulated across micro-steps together with an optimizer fused into the
    /// backward (`TrainingOptions::accumulate` and `fused_optimizer` both set).
    AccumulateWithFusedOptimizer,
    /// A cross-entropy loss over an output that is not float scores of rank 2 or more (choose
    /// `Loss::Mse` or `Loss::None` for it).
    LossNeedsScores {
        /// The output.
        output: TensorId,
        /// Its dtype.
        dtype: memplan_ir::DType,
        /// Its rank.
        rank: usize,
    },
    /// A checkpoint named by `Checkpoint::After` that is no node of the forward graph.
    UnknownCheckpoint {
        /// The name given.
        name: String,
    },
    /// No checkpoint choice fits the budget.
    BudgetTooSmall {
        /// The budget.
        budget: u64,
        /// The least total device bytes found.
        minimum: u64,
        /// Checkpoints of that choice.
        checkpoints: usize,
    },
    /// A forward and a backward graph that do not fit together.
    TrainingMismatch {
        /// The tensor both graphs name (by name: it is the key the two graphs share).
        tensor: String,
        /// What does not match.
        reason: TrainingFault,
    },
    /// An error found in a graph the caller does not hold (the fused graph, the joint
    /// forward-and-backward graph, a training step's graph, a variant the planner built):
    /// the error renders with that graph's names, whatever graph it is rendered with. Its
    /// entities are that graph's, so [`GraphError::entities`] gives none.
    InGraph {
        /// The graph the error was found in.
        graph: ErrorGraph,
        /// The error.
        error: Box<PlanError>,
    },
}

impl PlanError {
    /// Why tensor `tensor` of `graph` has no size: [`PlanError::UnboundSymbol`] naming the
    /// symbol, or [`PlanError::Size`].
    pub(crate) fn no_size(graph: &Graph, tensor: TensorId, reason: SizeError) -> PlanError {
        match reason {
            SizeError::Unbound(s) => PlanError::UnboundSymbol {
                tensor,
                symbol: graph
                    .symbols()
                    .get(s)
                    .cloned()
                    .unwrap_or_else(|| s.to_string()),
            },
            other => PlanError::Size {
                tensor,
                reason: other,
            },
        }
    }

    /// This error, found in `graph`, a graph the caller does not hold: wrapped in
    /// [`PlanError::InGraph`] when it names a tensor or node (`graph` is made only then), as
    /// it is when it names none or is wrapped already.
    #[must_use]
    pub fn found_in(self, graph: impl FnOnce() -> Graph) -> PlanError {
        if matches!(self, PlanError::InGraph { .. }) || self.entities().is_empty() {
            return self;
        }
        PlanError::InGraph {
            graph: ErrorGraph::new(graph()),
            error: Box::new(self),
        }
    }

    /// A `map_err` that marks an error as found in `graph` ([`PlanError::found_in`], `graph`
    /// copied only for an error that names something).
    pub(crate) fn in_graph(graph: &Graph) -> impl FnOnce(PlanError) -> PlanError + '_ {
        move |e| e.found_in(|| graph.clone())
    }

    /// The error itself, out of any [`PlanError::InGraph`] (to match on what went wrong).
    pub fn inner(&self) -> &PlanError {
        match self {
            PlanError::InGraph { error, .. } => error.inner(),
            other => other,
        }
    }
}

impl From<SolveError> for PlanError {
    fn from(e: SolveError) -> PlanError {
        PlanError::Solve(e)
    }
}

impl GraphError for PlanError {
    fn fmt_with(&self, names: Names<'_>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = |e: AnyEntity| names.name(e);
        use PlanError as P;
        match self {
            P::Invalid(errors) => {
                f.write_str("invalid graph: ")?;
                errors.fmt_with(names, f)
            }
            P::UnboundSymbol { tensor, symbol } => write!(
                f,
                "tensor `{}` needs a value for symbol `{symbol}`",
                n((*tensor).into())
            ),
            P::Size { tensor, reason } => write!(
                f,
                "tensor `{}` has no byte size: {reason}",
                n((*tensor).into())
            ),
            P::BadAlignment { align } => write!(f, "alignment {align} is not a power of two"),
            P::BadSchedule { graph, reason } => {
                write!(
                    f,
                    "the schedule is not a topological order of graph `{graph}`: "
                )?;
                reason.fmt_with(names, f)
            }
            P::Overflow { what } => write!(f, "byte arithmetic overflows while {what}"),
            P::NoPlacement { storages } => write!(
                f,
                "the packing engine found no placement for {storages} storages"
            ),
            P::Solve(e) => write!(f, "placement failed: {e}"),
            P::Body { node, attr, error } => {
                write!(
                    f,
                    "cannot size the workspace of node `{}` (body `{attr}`): ",
                    n((*node).into())
                )?;
                error.fmt_with(names.body(*node, attr), f)
            }
            P::DeclaredShape {
                node,
                output,
                problem,
            } => write!(
                f,
                "node `{}`: output `{}` {problem}",
                n((*node).into()),
                n((*output).into())
            ),
            P::Bind(e) => write!(f, "the symbol values do not hold together: {e}"),
            P::BadNode { node, op, reason } => {
                write!(f, "node `{}` ({op}): ", n((*node).into()))?;
                reason.fmt_with(names, f)
            }
            P::FallingSize {
                tensor,
                dim,
                symbol,
            } => write!(
                f,
                "tensor `{}` has dimension `{dim}`, which grows as `{symbol}` falls: a plan at the bound of `{symbol}` would not hold smaller values (plan for one value of `{symbol}`)",
                n((*tensor).into())
            ),
            P::NoBackwardRule { node, op } => write!(
                f,
                "op `{op}` (node `{}`) has no backward rule; planning its backward as reading all its inputs and outputs must be asked for (save-all)",
                n((*node).into())
            ),
            P::NotFused { graph, fusions } => write!(
                f,
                "graph `{graph}` is planned with a schedule of its own, but the options fuse it ({fusions}): fuse it first and give a schedule of the fused graph"
            ),
            P::Training { reason } => write!(f, "cannot derive the training step: {reason}"),
            P::AccumulateWithFusedOptimizer => f.write_str(
                "cannot derive the training step: gradients that accumulate across micro-steps are applied after the last of them: accumulating does not go with updating each parameter in the backward (a fused optimizer)",
            ),
            P::LossNeedsScores {
                output,
                dtype,
                rank,
            } => write!(
                f,
                "cannot derive the training step: cross-entropy needs float scores of rank 2 or more (batch, classes, ...); output `{}` is {dtype}[{rank}] (choose the mse loss or none)",
                n((*output).into())
            ),
            P::UnknownCheckpoint { name } => write!(
                f,
                "cannot derive the training step: checkpoint `{name}` is no forward node"
            ),
            P::BudgetTooSmall {
                budget,
                minimum,
                checkpoints,
            } => write!(
                f,
                "no checkpointing fits the budget of {budget} bytes: the least memory found is {minimum} bytes (with {checkpoints} checkpoints)"
            ),
            P::TrainingMismatch { tensor, reason } => {
                write!(f, "training graphs do not match: tensor `{tensor}` {reason}")
            }
            P::InGraph { graph, error } => error.fmt_with(Names::of(graph.graph()), f),
        }
    }

    fn entities(&self) -> Vec<AnyEntity> {
        use PlanError as P;
        let mut e = Entities::default();
        match self {
            P::Invalid(errors) if errors.graph.is_none() => return errors.entities(),
            P::UnboundSymbol { tensor, .. }
            | P::Size { tensor, .. }
            | P::FallingSize { tensor, .. }
            | P::LossNeedsScores { output: tensor, .. } => {
                e.add(*tensor);
            }
            P::BadSchedule { reason, .. } => return reason.entities(),
            // A body's entities are the body's: only the node is this graph's.
            P::Body { node, .. } | P::NoBackwardRule { node, .. } => {
                e.add(*node);
            }
            P::DeclaredShape { node, output, .. } => {
                e.add(*node).add(*output);
            }
            P::BadNode { node, reason, .. } => {
                e.add(*node);
                for x in reason.entities() {
                    e.add(x);
                }
            }
            // Found in a graph of their own (`InGraph`, validation errors that carry theirs),
            // or naming nothing of a graph.
            P::Invalid(_)
            | P::InGraph { .. }
            | P::BadAlignment { .. }
            | P::Overflow { .. }
            | P::NoPlacement { .. }
            | P::Solve(_)
            | P::Bind(_)
            | P::NotFused { .. }
            | P::Training { .. }
            | P::AccumulateWithFusedOptimizer
            | P::UnknownCheckpoint { .. }
            | P::BudgetTooSmall { .. }
            | P::TrainingMismatch { .. } => {}
        }
        e.into_vec()
    }
}

impl fmt::Display for PlanError {
    /// The message naming entities by id, unless the error carries its graph
    /// ([`PlanError::InGraph`], validation errors that carry theirs): render it with the
    /// graph planned, `error.with_graph(&graph)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_with(Names::ids(), f)
    }
}

impl std::error::Error for PlanError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PlanError::Solve(e) => Some(e),
            _ => None,
        }
    }
}

/// How a declared output shape contradicts its op ([`PlanError::DeclaredShape`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
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
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeFault {
    /// An input of lower rank than the op reads dims of.
    RankTooLow {
        /// The input's position.
        input: usize,
        /// The input tensor.
        tensor: TensorId,
        /// Its rank.
        rank: usize,
    },
    /// No tensor where an axis attribute points (no output, or no input 1).
    NoTensorFor {
        /// The attribute.
        attr: &'static str,
    },
    /// An attribute the op needs, absent or not a non-negative integer.
    NoAttribute {
        /// The attribute.
        attr: &'static str,
    },
    /// An axis attribute past the rank of the tensor it indexes.
    AxisPastRank {
        /// The attribute.
        attr: &'static str,
        /// Its value.
        axis: usize,
        /// The tensor.
        tensor: TensorId,
    },
    /// A node without the output the op sizes from.
    NoOutput,
}

impl GraphError for NodeFault {
    fn fmt_with(&self, names: Names<'_>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeFault::RankTooLow {
                input,
                tensor,
                rank,
            } => write!(
                f,
                "input {input} `{}` has rank {rank}, too low for a fused attention op",
                names.name(*tensor)
            ),
            NodeFault::NoTensorFor { attr } => write!(f, "has no tensor for `{attr}`"),
            NodeFault::NoAttribute { attr } => write!(f, "has no `{attr}` attribute"),
            NodeFault::AxisPastRank { attr, axis, tensor } => write!(
                f,
                "`{attr}` {axis} is past the rank of `{}`",
                names.name(*tensor)
            ),
            NodeFault::NoOutput => f.write_str("has no output"),
        }
    }

    fn entities(&self) -> Vec<AnyEntity> {
        match self {
            NodeFault::RankTooLow { tensor, .. } | NodeFault::AxisPastRank { tensor, .. } => {
                vec![AnyEntity::Tensor(*tensor)]
            }
            NodeFault::NoTensorFor { .. } | NodeFault::NoAttribute { .. } | NodeFault::NoOutput => {
                Vec::new()
            }
        }
    }
}

impl fmt::Display for NodeFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_with(Names::ids(), f)
    }
}

impl std::error::Error for NodeFault {}

/// What is wrong with a caller's schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScheduleFault {
    /// More steps than a `u32` counts.
    TooManySteps,
    /// Not one step per node.
    WrongLength {
        /// Steps in the schedule.
        steps: usize,
        /// Nodes in the graph.
        nodes: usize,
    },
    /// An entry that is not a node id of the graph.
    NotANode(NodeId),
    /// A node scheduled twice.
    RunsTwice(NodeId),
    /// A node scheduled before the producer of one of its inputs.
    BeforeProducer {
        /// The node.
        node: NodeId,
        /// The producer it runs before.
        producer: NodeId,
    },
    /// A node moved across an in-place write of a tensor it shares with another node (a
    /// reader of a gradient buffer before its accumulation, a weight's reader after its
    /// optimizer step), against the graph's node order.
    AcrossWrite {
        /// The node that runs too early.
        node: NodeId,
        /// The node it must follow.
        before: NodeId,
    },
}

impl GraphError for ScheduleFault {
    fn fmt_with(&self, names: Names<'_>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScheduleFault::TooManySteps => f.write_str("more than 2^32 steps"),
            ScheduleFault::WrongLength { steps, nodes } => {
                write!(f, "it has {steps} steps for {nodes} nodes")
            }
            // Not a node of the graph: its id.
            ScheduleFault::NotANode(n) => write!(f, "{n} is not a node"),
            ScheduleFault::RunsTwice(n) => write!(f, "node `{}` runs twice", names.name(*n)),
            ScheduleFault::BeforeProducer { node, producer } => write!(
                f,
                "node `{}` runs before `{}`, which produces its input",
                names.name(*node),
                names.name(*producer)
            ),
            ScheduleFault::AcrossWrite { node, before } => write!(
                f,
                "node `{}` runs before `{}`, but the two touch a tensor one of them writes in place, and the graph orders `{}` first",
                names.name(*node),
                names.name(*before),
                names.name(*before)
            ),
        }
    }

    fn entities(&self) -> Vec<AnyEntity> {
        let mut e = Entities::default();
        match self {
            ScheduleFault::TooManySteps
            | ScheduleFault::WrongLength { .. }
            | ScheduleFault::NotANode(_) => {}
            ScheduleFault::RunsTwice(n) => {
                e.add(*n);
            }
            ScheduleFault::BeforeProducer {
                node,
                producer: other,
            }
            | ScheduleFault::AcrossWrite {
                node,
                before: other,
            } => {
                e.add(*node).add(*other);
            }
        }
        e.into_vec()
    }
}

impl fmt::Display for ScheduleFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_with(Names::ids(), f)
    }
}

impl std::error::Error for ScheduleFault {}

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
