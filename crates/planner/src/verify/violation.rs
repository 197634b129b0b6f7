//! What the verifier reports: one [`PlanViolation`] per problem, with the faults of a
//! schedule step, an alias and a workspace, and [`PlanViolations`], every problem of a plan.

use std::fmt;

use memplan_ir::{Grouped, SizeError, TensorKind};

/// One problem with a plan.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanViolation {
    /// The schedule does not have one step per node.
    #[error("the schedule has {got} steps but the graph has {expected} nodes")]
    ScheduleLength {
        /// Nodes in the graph.
        expected: usize,
        /// Steps in the schedule.
        got: usize,
    },
    /// A schedule entry that is not a node, or a node scheduled twice.
    #[error("schedule step {step} runs {node}, which {reason}")]
    BadStep {
        /// The step.
        step: usize,
        /// The node (name or id).
        node: String,
        /// What is wrong with it.
        reason: StepFault,
    },
    /// A node that reads a tensor before its producer runs (or whose producer never runs).
    #[error("node `{node}` reads `{tensor}` before its producer `{producer}` runs")]
    NotTopological {
        /// The reader.
        node: String,
        /// The tensor.
        tensor: String,
        /// Its producer.
        producer: String,
    },
    /// A tensor whose size cannot be computed.
    #[error("tensor `{tensor}` has no byte size: {reason}")]
    Size {
        /// The tensor.
        tensor: String,
        /// Why (an unbound symbol is [`PlanViolation::Unbound`]).
        reason: SizeError,
    },
    /// A tensor whose size needs a symbol the plan's bindings do not give.
    #[error("tensor `{tensor}` has no byte size: symbol `{symbol}` has no value")]
    Unbound {
        /// The tensor.
        tensor: String,
        /// The symbol.
        symbol: String,
    },
    /// A buffer or weight naming a tensor that does not exist.
    #[error("the plan names tensor {tensor}, which is not in the graph")]
    UnknownTensor {
        /// The id.
        tensor: String,
    },
    /// A tensor listed twice.
    #[error("tensor `{tensor}` is listed more than once")]
    Duplicate {
        /// The tensor.
        tensor: String,
    },
    /// An activation with bytes that has no buffer, or a weight with bytes that has no entry.
    #[error("{kind} `{tensor}` has {} bytes but no place in the plan", Grouped(*.bytes))]
    Missing {
        /// The tensor.
        tensor: String,
        /// Its kind.
        kind: TensorKind,
        /// Its size.
        bytes: u64,
    },
    /// A weight in the activation arena or a non-weight in the weight region.
    #[error("{kind} `{tensor}` is in the wrong region")]
    WrongRegion {
        /// The tensor.
        tensor: String,
        /// Its kind.
        kind: TensorKind,
    },
    /// A buffer whose size is not the tensor's.
    #[error(
        "tensor `{tensor}` is planned with {} bytes but has {}",
        Grouped(*.planned),
        Grouped(*.actual)
    )]
    WrongBytes {
        /// The tensor.
        tensor: String,
        /// Bytes in the plan.
        planned: u64,
        /// Bytes of the tensor.
        actual: u64,
    },
    /// A buffer not live for every step its value is needed.
    #[error(
        "tensor `{tensor}` is planned live over steps {first}..={last} but is needed over {need_first}..={need_last}"
    )]
    TooShort {
        /// The tensor.
        tensor: String,
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
    #[error("tensor `{tensor}` has a bad alias of `{parent}`: {reason}")]
    BadAlias {
        /// The tensor.
        tensor: String,
        /// Its parent (or `-`).
        parent: String,
        /// What is wrong.
        reason: AliasFault,
    },
    /// An alias that does not lie inside its root's bytes.
    #[error(
        "tensor `{tensor}` (bytes {}..{}) does not lie inside its root `{root}` (bytes {}..{})",
        Grouped(*.start),
        Grouped(*.end),
        Grouped(*.root_start),
        Grouped(*.root_end)
    )]
    OutsideRoot {
        /// The tensor.
        tensor: String,
        /// Its first byte.
        start: u64,
        /// One past its last byte.
        end: u64,
        /// The root.
        root: String,
        /// The root's first byte.
        root_start: u64,
        /// One past the root's last byte.
        root_end: u64,
    },
    /// An in-place write over bytes still needed later.
    #[error(
        "tensor `{tensor}` is written in place at step {step} over bytes of `{other}`, which is live until step {other_last}"
    )]
    InPlaceTooEarly {
        /// The tensor written in place.
        tensor: String,
        /// Its producing step.
        step: u32,
        /// The tensor whose bytes it overwrites.
        other: String,
        /// That tensor's last step.
        other_last: u32,
    },
    /// Two storages live at the same step share bytes.
    #[error(
        "storages of `{a}` and `{b}` are both live at step {step} and share bytes {}..{}",
        Grouped(*.start),
        Grouped(*.end)
    )]
    Overlap {
        /// Root of one storage.
        a: String,
        /// Root of the other.
        b: String,
        /// A step at which both are live.
        step: u32,
        /// First shared byte.
        start: u64,
        /// One past the last shared byte.
        end: u64,
    },
    /// A buffer or weight past the end of its region.
    #[error(
        "tensor `{tensor}` ends at byte {}, past the end of its region ({} bytes)",
        Grouped(*.end),
        Grouped(*.size)
    )]
    OutsideRegion {
        /// The tensor.
        tensor: String,
        /// One past its last byte (saturated).
        end: u64,
        /// The region's size.
        size: u64,
    },
    /// A root whose offset is not a multiple of the plan's alignment.
    #[error(
        "tensor `{tensor}` starts at {}, not a multiple of the alignment {alignment}",
        Grouped(*.offset)
    )]
    Misaligned {
        /// The tensor.
        tensor: String,
        /// Its offset.
        offset: u64,
        /// The plan's alignment.
        alignment: u64,
    },
    /// The plan binds a symbol the graph does not have.
    #[error("the plan binds symbol `{symbol}`, which the graph does not have")]
    UnknownSymbol {
        /// The symbol's name.
        symbol: String,
    },
    /// The graph itself is not valid, so no plan of it can be checked.
    #[error("the graph is not valid: {0}")]
    InvalidGraph(memplan_ir::ValidationErrors),
    /// An in-place write over bytes that another input of the same node reads at that step.
    #[error(
        "tensor `{tensor}` is written in place by `{node}` over bytes of `{other}`, which `{node}` also reads"
    )]
    InPlaceOverRead {
        /// The tensor written in place.
        tensor: String,
        /// The node writing it.
        node: String,
        /// The other input it overwrites.
        other: String,
    },
    /// An in-place write over bytes of a graph output, which the caller reads after the last
    /// step.
    #[error("tensor `{tensor}` is written in place over bytes of graph output `{output}`")]
    InPlaceOverOutput {
        /// The tensor written in place.
        tensor: String,
        /// The graph output it overwrites.
        output: String,
    },
    /// An in-place write over a graph input when the plan's settings keep inputs intact.
    #[error(
        "tensor `{tensor}` is written in place over graph input `{input}`, but the plan's settings do not allow overwriting inputs"
    )]
    InPlaceOverInput {
        /// The tensor written in place.
        tensor: String,
        /// The graph input it overwrites.
        input: String,
    },
    /// An alias of a kind the plan's settings turn off.
    #[error(
        "tensor `{tensor}` is aliased ({kind}), but the plan's settings turn {kind} aliasing off"
    )]
    Policy {
        /// The tensor.
        tensor: String,
        /// `view` or `inplace`.
        kind: &'static str,
    },
    /// A Concat part written over bytes another tensor of its storage still holds.
    #[error("Concat part `{tensor}` is written at step {step} over `{other}`, which is live then")]
    PartOverLive {
        /// The part.
        tensor: String,
        /// The step its producer runs.
        step: u32,
        /// The tensor whose bytes it overwrites.
        other: String,
    },
    /// An alias made by an op that the plan's own op table declares opaque (its kernels
    /// cannot write over an input or return a view).
    #[error(
        "tensor `{tensor}` is aliased ({kind}), but the plan's op table makes op `{op}` opaque"
    )]
    OpaqueOp {
        /// The tensor.
        tensor: String,
        /// `view` or `inplace`.
        kind: &'static str,
        /// The op.
        op: String,
    },
    /// An alias claimed by a user-supplied op rule that the verifier's own op rules cannot
    /// confirm (an error only when verifying strictly).
    #[error(
        "tensor `{tensor}` is a {kind} alias of `{parent}` by the custom rule of op `{op}`, which the verifier cannot confirm"
    )]
    Unconfirmed {
        /// The tensor.
        tensor: String,
        /// Its parent.
        parent: String,
        /// `view` or `inplace`.
        kind: &'static str,
        /// The op type.
        op: String,
    },
    /// A workspace that names no node with bodies, is misplaced, too small, or missing.
    #[error("the workspace of node `{node}` is wrong: {reason}")]
    BadWorkspace {
        /// The node.
        node: String,
        /// What is wrong.
        reason: WorkspaceFault,
    },
    /// A value a body captures that is not live when its node runs.
    #[error(
        "tensor `{tensor}` is captured by node `{node}` at step {step} but planned live over {first}..={last}"
    )]
    CaptureDead {
        /// The node whose body reads it.
        node: String,
        /// The captured tensor.
        tensor: String,
        /// The node's step.
        step: u32,
        /// Planned first step.
        first: u32,
        /// Planned last step.
        last: u32,
    },
    /// A tensor computed from weights alone that the plan's settings fold into the weight
    /// region, planned elsewhere (or not at all).
    #[error(
        "tensor `{tensor}` is computed from weights alone, so with folding on it belongs in the weight region"
    )]
    NotFolded {
        /// The tensor.
        tensor: String,
    },
    /// Symbol values that do not hold together (dims that must broadcast and do not).
    #[error("the plan's symbol values do not hold together: {0}")]
    Bindings(memplan_ir::BindError),
    /// A problem in the plan of a body of a control-flow node.
    #[error("in the plan of body `{attr}` of node `{node}`: {problem}")]
    InBody {
        /// The node.
        node: String,
        /// The body's attribute.
        attr: String,
        /// The problem.
        problem: Box<PlanViolation>,
    },
    /// A plan made at upper bounds that fails below them: the first problem found at the
    /// first smaller binding that has any.
    #[error(
        "at {values}, below the bounds the plan was made at: {problem} ({count} problems there)"
    )]
    BelowBound {
        /// The smaller values, `name=value` joined by commas.
        values: String,
        /// The first problem there.
        problem: Box<PlanViolation>,
        /// How many there are.
        count: usize,
    },
    /// A plan made at upper bounds that cannot be re-sized below them.
    #[error("at {values}, below the bounds the plan was made at: {reason}")]
    BadBound {
        /// The smaller values, `name=value` joined by commas.
        values: String,
        /// Why.
        reason: crate::plan::ResizeError,
    },
    /// An alignment that is not a power of two (0 included).
    #[error("the plan's alignment {alignment} is not a power of two")]
    BadAlignment {
        /// The alignment.
        alignment: u64,
    },
    /// Buffers or weights not in tensor id order, which lookups by id rely on.
    #[error("the plan's {what} are not in tensor id order: `{tensor}` comes after `{after}`")]
    OutOfOrder {
        /// `buffers` or `weights`.
        what: &'static str,
        /// The first tensor out of place.
        tensor: String,
        /// The tensor listed before it, whose id is larger.
        after: String,
    },
    /// A node that reads a tensor some node updates in place, scheduled on the other side of
    /// the update than the graph's node order puts it.
    #[error(
        "node `{node}` runs before `{after}`, but both touch `{tensor}`, which one of them updates in place, and the graph orders them the other way"
    )]
    MovedAcrossUpdate {
        /// The node that runs first in the schedule.
        node: String,
        /// The node the graph puts first.
        after: String,
        /// The tensor updated in place.
        tensor: String,
    },
    /// A tensor that a node updates in place sharing its storage with another tensor.
    #[error("tensor `{tensor}` is updated in place by a node, but shares its bytes with `{other}`")]
    UpdatedShared {
        /// The tensor updated in place.
        tensor: String,
        /// The tensor sharing its storage.
        other: String,
    },
    /// A training step whose backward does not read what a gradient needs.
    #[error(
        "the gradient of input {input} of `{forward}` needs `{tensor}`, which none of its backward nodes reads"
    )]
    BackwardMissesSaved {
        /// The forward node.
        forward: String,
        /// The input differentiated.
        input: usize,
        /// The tensor its gradient needs.
        tensor: String,
    },
    /// A step past the end of the schedule.
    #[error(
        "tensor `{tensor}` is planned live until step {last}, but the schedule has {steps} steps"
    )]
    PastSchedule {
        /// The tensor.
        tensor: String,
        /// Its last step.
        last: u32,
        /// Steps in the schedule.
        steps: usize,
    },
}

/// Why a schedule entry is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
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
}

/// Why a workspace is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
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

impl fmt::Display for PlanViolations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        write!(
            f,
            "the plan has {n} problem{}:",
            if n == 1 { "" } else { "s" }
        )?;
        for v in &self.0 {
            write!(f, "\n  - {v}")?;
        }
        Ok(())
    }
}

impl std::error::Error for PlanViolations {}
