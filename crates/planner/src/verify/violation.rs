//! What the verifier reports: one [`PlanViolation`] per problem, with the faults of a
//! schedule step, an alias and a workspace, and [`PlanViolations`], every problem of a plan.
//!
//! A violation holds the ids of the tensors and nodes it is about, never their names: its
//! message is written once ([`GraphError::fmt_with`]) and rendered with the graph by
//! [`GraphError::with_graph`] (names where the graph has the id, else the id). Its plain
//! [`Display`](fmt::Display) names the ids.

use std::fmt;

use memplan_ir::{
    AnyEntity, Entities, GraphError, Grouped, Names, NodeId, SizeError, TensorId, TensorKind,
};

use crate::plan::AliasKind;

/// One problem with a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PlanViolation {
    /// The schedule does not have one step per node.
    ScheduleLength {
        /// Nodes in the graph.
        expected: usize,
        /// Steps in the schedule.
        got: usize,
    },
    /// A schedule entry that is not a node, or a node scheduled twice.
    BadStep {
        /// The step.
        step: usize,
        /// The node (its id may name no node).
        node: NodeId,
        /// What is wrong with it.
        reason: StepFault,
    },
    /// A node that reads a tensor before its producer runs (or whose producer never runs).
    NotTopological {
        /// The reader.
        node: NodeId,
        /// The tensor.
        tensor: TensorId,
        /// Its producer.
        producer: NodeId,
    },
    /// A tensor whose size cannot be computed.
    Size {
        /// The tensor.
        tensor: TensorId,
        /// Why (an unbound symbol is [`PlanViolation::Unbound`]).
        reason: SizeError,
    },
    /// A tensor whose size needs a symbol the plan's bindings do not give.
    Unbound {
        /// The tensor.
        tensor: TensorId,
        /// The symbol.
        symbol: String,
    },
    /// A buffer or weight naming a tensor that does not exist.
    UnknownTensor {
        /// The id (not one of the graph's).
        tensor: TensorId,
    },
    /// A tensor listed twice.
    Duplicate {
        /// The tensor.
        tensor: TensorId,
    },
    /// An activation with bytes that has no buffer, or a weight with bytes that has no entry.
    Missing {
        /// The tensor.
        tensor: TensorId,
        /// Its kind.
        kind: TensorKind,
        /// Its size.
        bytes: u64,
    },
    /// A weight in the activation arena or a non-weight in the weight region.
    WrongRegion {
        /// The tensor.
        tensor: TensorId,
        /// Its kind.
        kind: TensorKind,
    },
    /// A buffer whose size is not the tensor's.
    WrongBytes {
        /// The tensor.
        tensor: TensorId,
        /// Bytes in the plan.
        planned: u64,
        /// Bytes of the tensor.
        actual: u64,
    },
    /// A buffer not live for every step its value is needed.
    TooShort {
        /// The tensor.
        tensor: TensorId,
        /// Planned first step.
        first: u32,
        /// Planned last step.
        last: u32,
        /// First step needed.
        need_first: u32,
        /// Last step needed.
        need_last: u32,
    },
    /// An alias with a missing kind or parent, a parent outside the arena, or a parent the
    /// producing node does not read.
    BadAlias {
        /// The tensor.
        tensor: TensorId,
        /// Its parent (`None`, written `-`, when the alias names none).
        parent: Option<TensorId>,
        /// What is wrong.
        reason: AliasFault,
    },
    /// An alias that does not lie inside its root's bytes.
    OutsideRoot {
        /// The tensor.
        tensor: TensorId,
        /// Its first byte.
        start: u64,
        /// One past its last byte.
        end: u64,
        /// The root.
        root: TensorId,
        /// The root's first byte.
        root_start: u64,
        /// One past the root's last byte.
        root_end: u64,
    },
    /// An in-place write over bytes still needed later.
    InPlaceTooEarly {
        /// The tensor written in place.
        tensor: TensorId,
        /// Its producing step.
        step: u32,
        /// The tensor whose bytes it overwrites.
        other: TensorId,
        /// That tensor's last step.
        other_last: u32,
    },
    /// Two storages live at the same step share bytes.
    Overlap {
        /// Root of one storage.
        a: Occupant,
        /// Root of the other.
        b: Occupant,
        /// A step at which both are live.
        step: u32,
        /// First shared byte.
        start: u64,
        /// One past the last shared byte.
        end: u64,
    },
    /// A buffer or weight past the end of its region.
    OutsideRegion {
        /// The tensor.
        tensor: TensorId,
        /// One past its last byte (saturated).
        end: u64,
        /// The region's size.
        size: u64,
    },
    /// A root whose offset is not a multiple of the plan's alignment.
    Misaligned {
        /// The tensor.
        tensor: TensorId,
        /// Its offset.
        offset: u64,
        /// The plan's alignment.
        alignment: u64,
    },
    /// The plan binds a symbol the graph does not have.
    UnknownSymbol {
        /// The symbol's name.
        symbol: String,
    },
    /// The graph itself is not valid, so no plan of it can be checked.
    InvalidGraph(memplan_ir::ValidationErrors),
    /// An in-place write over bytes that another input of the same node reads at that step.
    InPlaceOverRead {
        /// The tensor written in place.
        tensor: TensorId,
        /// The node writing it.
        node: NodeId,
        /// The other input it overwrites.
        other: TensorId,
    },
    /// An in-place write over bytes of a graph output, which the caller reads after the last
    /// step.
    InPlaceOverOutput {
        /// The tensor written in place.
        tensor: TensorId,
        /// The graph output it overwrites.
        output: TensorId,
    },
    /// An in-place write over a graph input when the plan's settings keep inputs intact.
    InPlaceOverInput {
        /// The tensor written in place.
        tensor: TensorId,
        /// The graph input it overwrites.
        input: TensorId,
    },
    /// An alias of a kind the plan's settings turn off.
    Policy {
        /// The tensor.
        tensor: TensorId,
        /// How it aliases.
        kind: AliasKind,
    },
    /// A Concat part written over bytes another tensor of its storage still holds.
    PartOverLive {
        /// The part.
        tensor: TensorId,
        /// The step its producer runs.
        step: u32,
        /// The tensor whose bytes it overwrites.
        other: TensorId,
    },
    /// An alias made by an op that the plan's own op table declares opaque (its kernels
    /// cannot write over an input or return a view).
    OpaqueOp {
        /// The tensor.
        tensor: TensorId,
        /// How it aliases.
        kind: AliasKind,
        /// The op.
        op: String,
    },
    /// An alias claimed by a user-supplied op rule that the verifier's own op rules cannot
    /// confirm (an error only when verifying strictly).
    Unconfirmed {
        /// The tensor.
        tensor: TensorId,
        /// Its parent.
        parent: TensorId,
        /// How it aliases.
        kind: AliasKind,
        /// The op type.
        op: String,
    },
    /// A workspace that names no node with bodies, is misplaced, too small, or missing.
    BadWorkspace {
        /// The node.
        node: NodeId,
        /// What is wrong.
        reason: WorkspaceFault,
    },
    /// A value a body captures that is not live when its node runs.
    CaptureDead {
        /// The node whose body reads it.
        node: NodeId,
        /// The captured tensor.
        tensor: TensorId,
        /// The node's step.
        step: u32,
        /// Planned first step.
        first: u32,
        /// Planned last step.
        last: u32,
    },
    /// A tensor computed from weights alone that the plan's settings fold into the weight
    /// region, planned elsewhere (or not at all).
    NotFolded {
        /// The tensor.
        tensor: TensorId,
    },
    /// Symbol values that do not hold together (dims that must broadcast and do not, a
    /// quotient symbol given a value its dim contradicts).
    Bindings(memplan_ir::BindError),
    /// A problem in the plan of a body of a control-flow node.
    InBody {
        /// The node.
        node: NodeId,
        /// The body's attribute.
        attr: String,
        /// The problem.
        problem: Box<PlanViolation>,
    },
    /// A plan made at upper bounds that fails below them: the first problem found at the
    /// first smaller binding that has any.
    BelowBound {
        /// The smaller values, `name=value` joined by commas.
        values: String,
        /// The first problem there.
        problem: Box<PlanViolation>,
        /// How many there are.
        count: usize,
    },
    /// A plan made at upper bounds that cannot be re-sized below them.
    BadBound {
        /// The smaller values, `name=value` joined by commas.
        values: String,
        /// Why.
        reason: crate::plan::ResizeError,
    },
    /// An alignment that is not a power of two (0 included).
    BadAlignment {
        /// The alignment.
        alignment: u64,
    },
    /// Buffers or weights not in tensor id order, which lookups by id rely on.
    OutOfOrder {
        /// Which list.
        what: PlanList,
        /// The first tensor out of place.
        tensor: TensorId,
        /// The tensor listed before it, whose id is larger.
        after: TensorId,
    },
    /// A node that reads a tensor some node updates in place, scheduled on the other side of
    /// the update than the graph's node order puts it.
    MovedAcrossUpdate {
        /// The node that runs first in the schedule.
        node: NodeId,
        /// The node the graph puts first.
        after: NodeId,
        /// The tensor updated in place.
        tensor: TensorId,
    },
    /// A tensor that a node updates in place sharing its storage with another tensor.
    UpdatedShared {
        /// The tensor updated in place.
        tensor: TensorId,
        /// The tensor sharing its storage.
        other: TensorId,
    },
    /// A training step whose backward does not read what a gradient needs.
    BackwardMissesSaved {
        /// The forward node.
        forward: NodeId,
        /// The input differentiated.
        input: usize,
        /// The tensor its gradient needs.
        tensor: TensorId,
    },
    /// A figure the plan states about itself that is not what its placement makes
    /// (`verify_plan_figures`): a total, the arena, a bound, a count.
    WrongFigure {
        /// The figure, as the plan file names it (`arena_bytes`, `stats.views`).
        figure: &'static str,
        /// What the plan says.
        said: u64,
        /// What its buffers, weights and workspaces make it.
        made: u64,
    },
    /// An output whose declared shape its op does not make at the plan's bindings (see
    /// `memplan_ir::ShapeConflict`): the plan sizes and places it by a shape the runtime
    /// will not have.
    DeclaredShape {
        /// The node.
        node: NodeId,
        /// The output.
        output: TensorId,
        /// What is wrong (`memplan_ir::ConflictKind` as text).
        problem: String,
    },
    /// A lower bound above the arena: no placement can be below its own bound.
    BoundAboveArena {
        /// The plan's lower bound.
        bound: u64,
        /// The plan's arena.
        arena: u64,
    },
    /// A step past the end of the schedule.
    PastSchedule {
        /// The tensor.
        tensor: TensorId,
        /// Its last step.
        last: u32,
        /// Steps in the schedule.
        steps: usize,
    },
}

/// What shares bytes with another storage in an [`PlanViolation::Overlap`]: a tensor's
/// storage (by its root) or a node's workspace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Occupant {
    /// The storage rooted at this tensor.
    Tensor(TensorId),
    /// The workspace of this node.
    Workspace(NodeId),
}

impl Occupant {
    /// The entity it points at.
    pub fn entity(self) -> AnyEntity {
        match self {
            Occupant::Tensor(t) => AnyEntity::Tensor(t),
            Occupant::Workspace(n) => AnyEntity::Node(n),
        }
    }

    fn named<'a>(self, names: Names<'a>) -> impl fmt::Display + 'a {
        OccupantName(self, names)
    }
}

struct OccupantName<'a>(Occupant, Names<'a>);

impl fmt::Display for OccupantName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Occupant::Tensor(t) => self.1.name(t).fmt(f),
            Occupant::Workspace(n) => write!(f, "workspace of {}", self.1.name(n)),
        }
    }
}

/// A name, or `-` for none.
struct OrDash<T>(Option<T>);

impl<T: fmt::Display> fmt::Display for OrDash<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(x) => x.fmt(f),
            None => f.write_str("-"),
        }
    }
}

/// Which list of the plan a [`PlanViolation::OutOfOrder`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PlanList {
    /// The buffers of the activation arena.
    Buffers,
    /// The weights.
    Weights,
}

impl fmt::Display for PlanList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PlanList::Buffers => "buffers",
            PlanList::Weights => "weights",
        })
    }
}

/// A violation written with `names` (what [`GraphError::with_graph`] does with a graph).
struct WithNames<'a>(&'a PlanViolation, Names<'a>);

impl fmt::Display for WithNames<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt_with(self.1, f)
    }
}

impl PlanViolation {
    fn with_names<'a>(&'a self, names: Names<'a>) -> WithNames<'a> {
        WithNames(self, names)
    }
}

impl GraphError for PlanViolation {
    fn fmt_with(&self, names: Names<'_>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanViolation::ScheduleLength { expected, got } => write!(
                f,
                "the schedule has {got} steps but the graph has {expected} nodes"
            ),
            PlanViolation::BadStep { step, node, reason } => write!(
                f,
                "schedule step {step} runs {node}, which {reason}",
                node = names.name(*node)
            ),
            PlanViolation::NotTopological {
                node,
                tensor,
                producer,
            } => write!(
                f,
                "node `{node}` reads `{tensor}` before its producer `{producer}` runs",
                node = names.name(*node),
                tensor = names.name(*tensor),
                producer = names.name(*producer)
            ),
            PlanViolation::Size { tensor, reason } => write!(
                f,
                "tensor `{tensor}` has no byte size: {reason}",
                tensor = names.name(*tensor)
            ),
            PlanViolation::Unbound { tensor, symbol } => write!(
                f,
                "tensor `{tensor}` has no byte size: symbol `{symbol}` has no value",
                tensor = names.name(*tensor)
            ),
            PlanViolation::UnknownTensor { tensor } => write!(
                f,
                "the plan names tensor {tensor}, which is not in the graph",
                tensor = names.name(*tensor)
            ),
            PlanViolation::Duplicate { tensor } => write!(
                f,
                "tensor `{tensor}` is listed more than once",
                tensor = names.name(*tensor)
            ),
            PlanViolation::Missing {
                tensor,
                kind,
                bytes,
            } => write!(
                f,
                "{kind} `{tensor}` has {} bytes but no place in the plan",
                Grouped(*bytes),
                tensor = names.name(*tensor)
            ),
            PlanViolation::WrongRegion { tensor, kind } => write!(
                f,
                "{kind} `{tensor}` is in the wrong region",
                tensor = names.name(*tensor)
            ),
            PlanViolation::WrongBytes {
                tensor,
                planned,
                actual,
            } => write!(
                f,
                "tensor `{tensor}` is planned with {} bytes but has {}",
                Grouped(*planned),
                Grouped(*actual),
                tensor = names.name(*tensor)
            ),
            PlanViolation::TooShort {
                tensor,
                first,
                last,
                need_first,
                need_last,
            } => write!(
                f,
                "tensor `{tensor}` is planned live over steps {first}..={last} but is needed over {need_first}..={need_last}",
                tensor = names.name(*tensor)
            ),
            PlanViolation::BadAlias {
                tensor,
                parent,
                reason,
            } => write!(
                f,
                "tensor `{tensor}` has a bad alias of `{parent}`: {reason}",
                tensor = names.name(*tensor),
                parent = OrDash(parent.map(|p| names.name(p)))
            ),
            PlanViolation::OutsideRoot {
                tensor,
                start,
                end,
                root,
                root_start,
                root_end,
            } => write!(
                f,
                "tensor `{tensor}` (bytes {}..{}) does not lie inside its root `{root}` (bytes {}..{})",
                Grouped(*start),
                Grouped(*end),
                Grouped(*root_start),
                Grouped(*root_end),
                tensor = names.name(*tensor),
                root = names.name(*root)
            ),
            PlanViolation::InPlaceTooEarly {
                tensor,
                step,
                other,
                other_last,
            } => write!(
                f,
                "tensor `{tensor}` is written in place at step {step} over bytes of `{other}`, which is live until step {other_last}",
                tensor = names.name(*tensor),
                other = names.name(*other)
            ),
            PlanViolation::Overlap {
                a,
                b,
                step,
                start,
                end,
            } => write!(
                f,
                "storages of `{a}` and `{b}` are both live at step {step} and share bytes {}..{}",
                Grouped(*start),
                Grouped(*end),
                a = a.named(names),
                b = b.named(names)
            ),
            PlanViolation::OutsideRegion { tensor, end, size } => write!(
                f,
                "tensor `{tensor}` ends at byte {}, past the end of its region ({} bytes)",
                Grouped(*end),
                Grouped(*size),
                tensor = names.name(*tensor)
            ),
            PlanViolation::Misaligned {
                tensor,
                offset,
                alignment,
            } => write!(
                f,
                "tensor `{tensor}` starts at {}, not a multiple of the alignment {alignment}",
                Grouped(*offset),
                tensor = names.name(*tensor)
            ),
            PlanViolation::UnknownSymbol { symbol } => write!(
                f,
                "the plan binds symbol `{symbol}`, which the graph does not have"
            ),
            PlanViolation::InvalidGraph(v0) => write!(f, "the graph is not valid: {v0}"),
            PlanViolation::InPlaceOverRead {
                tensor,
                node,
                other,
            } => write!(
                f,
                "tensor `{tensor}` is written in place by `{node}` over bytes of `{other}`, which `{node}` also reads",
                tensor = names.name(*tensor),
                node = names.name(*node),
                other = names.name(*other)
            ),
            PlanViolation::InPlaceOverOutput { tensor, output } => write!(
                f,
                "tensor `{tensor}` is written in place over bytes of graph output `{output}`",
                tensor = names.name(*tensor),
                output = names.name(*output)
            ),
            PlanViolation::InPlaceOverInput { tensor, input } => write!(
                f,
                "tensor `{tensor}` is written in place over graph input `{input}`, but the plan's settings do not allow overwriting inputs",
                tensor = names.name(*tensor),
                input = names.name(*input)
            ),
            PlanViolation::Policy { tensor, kind } => write!(
                f,
                "tensor `{tensor}` is aliased ({kind}), but the plan's settings turn {kind} aliasing off",
                tensor = names.name(*tensor),
                kind = kind.name()
            ),
            PlanViolation::PartOverLive {
                tensor,
                step,
                other,
            } => write!(
                f,
                "Concat part `{tensor}` is written at step {step} over `{other}`, which is live then",
                tensor = names.name(*tensor),
                other = names.name(*other)
            ),
            PlanViolation::OpaqueOp { tensor, kind, op } => write!(
                f,
                "tensor `{tensor}` is aliased ({kind}), but the plan's op table makes op `{op}` opaque",
                tensor = names.name(*tensor),
                kind = kind.name()
            ),
            PlanViolation::Unconfirmed {
                tensor,
                parent,
                kind,
                op,
            } => write!(
                f,
                "tensor `{tensor}` is a {kind} alias of `{parent}` by the custom rule of op `{op}`, which the verifier cannot confirm",
                tensor = names.name(*tensor),
                parent = names.name(*parent),
                kind = kind.name()
            ),
            PlanViolation::BadWorkspace { node, reason } => write!(
                f,
                "the workspace of node `{node}` is wrong: {reason}",
                node = names.name(*node)
            ),
            PlanViolation::CaptureDead {
                node,
                tensor,
                step,
                first,
                last,
            } => write!(
                f,
                "tensor `{tensor}` is captured by node `{node}` at step {step} but planned live over {first}..={last}",
                node = names.name(*node),
                tensor = names.name(*tensor)
            ),
            PlanViolation::NotFolded { tensor } => write!(
                f,
                "tensor `{tensor}` is computed from weights alone, so with folding on it belongs in the weight region",
                tensor = names.name(*tensor)
            ),
            PlanViolation::Bindings(v0) => {
                write!(f, "the plan's symbol values do not hold together: {v0}")
            }
            PlanViolation::InBody {
                node,
                attr,
                problem,
            } => write!(
                f,
                "in the plan of body `{attr}` of node `{node}`: {problem}",
                node = names.name(*node),
                problem = problem.with_names(names.body(*node, attr))
            ),
            PlanViolation::BelowBound {
                values,
                problem,
                count,
            } => write!(
                f,
                "at {values}, below the bounds the plan was made at: {problem} ({count} problems there)",
                problem = problem.with_names(names)
            ),
            PlanViolation::BadBound { values, reason } => write!(
                f,
                "at {values}, below the bounds the plan was made at: {reason}"
            ),
            PlanViolation::BadAlignment { alignment } => {
                write!(f, "the plan's alignment {alignment} is not a power of two")
            }
            PlanViolation::OutOfOrder {
                what,
                tensor,
                after,
            } => write!(
                f,
                "the plan's {what} are not in tensor id order: `{tensor}` comes after `{after}`",
                tensor = names.name(*tensor),
                after = names.name(*after)
            ),
            PlanViolation::MovedAcrossUpdate {
                node,
                after,
                tensor,
            } => write!(
                f,
                "node `{node}` runs before `{after}`, but both touch `{tensor}`, which one of them updates in place, and the graph orders them the other way",
                node = names.name(*node),
                after = names.name(*after),
                tensor = names.name(*tensor)
            ),
            PlanViolation::UpdatedShared { tensor, other } => write!(
                f,
                "tensor `{tensor}` is updated in place by a node, but shares its bytes with `{other}`",
                tensor = names.name(*tensor),
                other = names.name(*other)
            ),
            PlanViolation::BackwardMissesSaved {
                forward,
                input,
                tensor,
            } => write!(
                f,
                "the gradient of input {input} of `{forward}` needs `{tensor}`, which none of its backward nodes reads",
                forward = names.name(*forward),
                tensor = names.name(*tensor)
            ),
            PlanViolation::WrongFigure { figure, said, made } => write!(
                f,
                "the plan says {figure} is {said}, but its placement makes it {made}"
            ),
            PlanViolation::DeclaredShape {
                node,
                output,
                problem,
            } => write!(
                f,
                "node `{node}`: output `{output}` {problem}",
                node = names.name(*node),
                output = names.name(*output)
            ),
            PlanViolation::BoundAboveArena { bound, arena } => write!(
                f,
                "the plan's lower bound ({bound} bytes) is above its arena ({arena} bytes): no placement is below its own lower bound"
            ),
            PlanViolation::PastSchedule {
                tensor,
                last,
                steps,
            } => write!(
                f,
                "tensor `{tensor}` is planned live until step {last}, but the schedule has {steps} steps",
                tensor = names.name(*tensor)
            ),
        }
    }

    fn entities(&self) -> Vec<AnyEntity> {
        let mut e = Entities::default();
        match self {
            PlanViolation::BadStep { node, .. }
            | PlanViolation::BadWorkspace { node, .. }
            | PlanViolation::InBody { node, .. } => {
                e.add(*node);
            }
            PlanViolation::Size { tensor, .. }
            | PlanViolation::Unbound { tensor, .. }
            | PlanViolation::UnknownTensor { tensor, .. }
            | PlanViolation::Duplicate { tensor, .. }
            | PlanViolation::Missing { tensor, .. }
            | PlanViolation::WrongRegion { tensor, .. }
            | PlanViolation::WrongBytes { tensor, .. }
            | PlanViolation::TooShort { tensor, .. }
            | PlanViolation::OutsideRegion { tensor, .. }
            | PlanViolation::Misaligned { tensor, .. }
            | PlanViolation::Policy { tensor, .. }
            | PlanViolation::OpaqueOp { tensor, .. }
            | PlanViolation::NotFolded { tensor, .. }
            | PlanViolation::PastSchedule { tensor, .. } => {
                e.add(*tensor);
            }
            PlanViolation::BadAlias { tensor, parent, .. } => {
                e.add(*tensor);
                if let Some(p) = parent {
                    e.add(*p);
                }
            }
            PlanViolation::OutsideRoot { tensor, root, .. } => {
                e.add(*tensor);
                e.add(*root);
            }
            PlanViolation::InPlaceTooEarly { tensor, other, .. }
            | PlanViolation::PartOverLive { tensor, other, .. }
            | PlanViolation::UpdatedShared { tensor, other, .. } => {
                e.add(*tensor);
                e.add(*other);
            }
            PlanViolation::Overlap { a, b, .. } => {
                e.add(a.entity());
                e.add(b.entity());
            }
            PlanViolation::InPlaceOverOutput { tensor, output, .. } => {
                e.add(*tensor);
                e.add(*output);
            }
            PlanViolation::InPlaceOverInput { tensor, input, .. } => {
                e.add(*tensor);
                e.add(*input);
            }
            PlanViolation::Unconfirmed { tensor, parent, .. } => {
                e.add(*tensor);
                e.add(*parent);
            }
            PlanViolation::CaptureDead { node, tensor, .. } => {
                e.add(*node);
                e.add(*tensor);
            }
            PlanViolation::OutOfOrder { tensor, after, .. } => {
                e.add(*tensor);
                e.add(*after);
            }
            PlanViolation::NotTopological {
                node,
                tensor,
                producer,
                ..
            } => {
                e.add(*node);
                e.add(*tensor);
                e.add(*producer);
            }
            PlanViolation::InPlaceOverRead {
                tensor,
                node,
                other,
                ..
            } => {
                e.add(*tensor);
                e.add(*node);
                e.add(*other);
            }
            PlanViolation::BelowBound { problem, .. } => return problem.entities(),
            PlanViolation::MovedAcrossUpdate {
                node,
                after,
                tensor,
                ..
            } => {
                e.add(*node);
                e.add(*after);
                e.add(*tensor);
            }
            PlanViolation::BackwardMissesSaved {
                forward, tensor, ..
            } => {
                e.add(*forward);
                e.add(*tensor);
            }
            PlanViolation::DeclaredShape { node, output, .. } => {
                e.add(*node);
                e.add(*output);
            }
            _ => {}
        }
        e.into_vec()
    }
}

impl fmt::Display for PlanViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_with(Names::ids(), f)
    }
}

impl std::error::Error for PlanViolation {}

/// Why a schedule entry is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StepFault {
    /// The id names no node.
    #[error("is not a node of the graph")]
    NotANode,
    /// The node ran at an earlier step.
    #[error("already ran")]
    AlreadyRan,
}

/// Why an alias is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AliasFault {
    /// The parent has no buffer in the arena.
    #[error("the parent is not in the arena")]
    ParentNotInArena,
    /// The tensor's producer does not read the parent.
    #[error("the producing node does not read the parent")]
    ParentNotRead,
    /// The Concat making the parent does not read the part.
    #[error("the parent's producer does not read the part")]
    PartNotRead,
    /// A graph input or output claimed as a Concat part.
    #[error("only an activation can be written into a Concat's output")]
    PartNotActivation,
    /// The alias's offset in its parent disagrees with the two buffers' arena offsets.
    #[error("its arena offset must be its parent's plus its offset in the parent")]
    OffsetDisagrees,
    /// Following parents comes back to the tensor.
    #[error("its parents form a cycle")]
    Cycle,
    /// The op's definition makes no output a contiguous range of an input.
    #[error("the op does not make this output a contiguous range of an input")]
    NotARange,
    /// The op's output is a range of another input.
    #[error("the op's output is a range of another input")]
    RangeOfAnotherInput,
    /// The view is not where the op's range starts.
    #[error("a view must sit at its parent's offset plus the range's start")]
    ViewMisplaced,
    /// The op's definition does not let the output overwrite that input.
    #[error(
        "the op does not compute this output element by element (or row by row) from that input"
    )]
    NotWritableOver,
    /// An in-place output elsewhere than its parent.
    #[error("an in-place output must sit at its parent's offset")]
    InPlaceMisplaced,
    /// A Concat part elsewhere than its input's slice.
    #[error("a Concat part must be exactly its input's contiguous slice of the output")]
    NotConcatSlice,
    /// A view of, or a write in place over, a strided Concat part (its bytes are runs).
    #[error("the parent is a strided Concat part, whose bytes are one run per row, not a range")]
    StridedParent,
    /// A Concat part that the Concat reads more than once.
    #[error("the Concat reads it more than once, so it fills more than one slice")]
    PartRepeated,
    /// A strided Concat part whose rows lie another stride apart at this binding than at
    /// the plan's: the output's row length moves with a bounded symbol.
    #[error(
        "its rows are the Concat output's row apart, and that row's length moves with a bounded symbol"
    )]
    StrideMoves,
}

/// Why a workspace is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WorkspaceFault {
    /// The id names no node.
    #[error("it is not a node of the graph")]
    NotANode,
    /// A second workspace for the node.
    #[error("the node has more than one workspace")]
    Duplicate,
    /// The node runs no body.
    #[error("the node runs no body")]
    NoBody,
    /// Not at the node's step.
    #[error("it is placed at step {0}, not the node's")]
    WrongStep(u32),
    /// Past the arena's end.
    #[error(
        "bytes {}..{} are outside the arena ({} bytes)",
        Grouped(*.start),
        Grouped(*.end),
        Grouped(*.arena)
    )]
    OutsideArena {
        /// First byte.
        start: u64,
        /// One past the last byte.
        end: u64,
        /// The arena's size.
        arena: u64,
    },
    /// An offset off the plan's alignment.
    #[error("offset {} is not a multiple of the alignment {alignment}", Grouped(*.offset))]
    Misaligned {
        /// The offset.
        offset: u64,
        /// The alignment.
        alignment: u64,
    },
    /// Too small for a body's plan.
    #[error(
        "{} bytes cannot hold the plan of body `{attr}`, which needs {}",
        Grouped(*.bytes),
        Grouped(*.need)
    )]
    TooSmall {
        /// The workspace's bytes.
        bytes: u64,
        /// The body.
        attr: String,
        /// What its plan needs: its arena, then its weights aligned.
        need: u64,
    },
    /// Too small for the fused attention kernel's scratch (after the largest body plan).
    #[error(
        "{} bytes cannot hold the attention kernel's scratch, which needs {}",
        Grouped(*.bytes),
        Grouped(*.need)
    )]
    NoRoomForScratch {
        /// The workspace's bytes.
        bytes: u64,
        /// What the scratch needs (after any body plan).
        need: u64,
    },
    /// A body that makes bytes and has no plan in the workspace.
    #[error("body `{0}` makes tensors but the workspace has no plan of it")]
    NoBodyPlan(String),
    /// A body plan for a body the node does not have.
    #[error("it has a plan of body `{0}`, which the node does not have")]
    NoSuchBody(String),
    /// A body plan made with other bindings or more aliasing than the plan allows.
    #[error(
        "the plan of body `{0}` was made with other bindings or more aliasing than the plan allows"
    )]
    BodySettings(String),
    /// Bodies that make tensors, and no workspace.
    #[error("its bodies make tensors but it has no workspace")]
    Missing,
}

/// Every problem with a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanViolations(pub Vec<PlanViolation>);

impl GraphError for PlanViolations {
    fn fmt_with(&self, names: Names<'_>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        write!(
            f,
            "the plan has {n} problem{}:",
            if n == 1 { "" } else { "s" }
        )?;
        for v in &self.0 {
            write!(f, "\n  - {}", v.with_names(names))?;
        }
        Ok(())
    }

    fn entities(&self) -> Vec<AnyEntity> {
        let mut e = Entities::default();
        for v in &self.0 {
            for x in v.entities() {
                e.add(x);
            }
        }
        e.into_vec()
    }
}

impl fmt::Display for PlanViolations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_with(Names::ids(), f)
    }
}

impl std::error::Error for PlanViolations {}
