//! The graph-level plan verifier: checks a [`Plan`] against its graph, knowing nothing of how
//! the planner made it.
//!
//! It reads the graph (for sizes, producers, readers and tensor kinds), the bindings of its
//! symbols, and the plan's schedule, buffers, weights and settings. Each invariant below is
//! one method of the checker. It checks that the graph is valid, and that:
//!
//! - the schedule runs every node exactly once, each after the producers of its inputs;
//! - every activation with bytes has a buffer, every buffer is an arena tensor with its
//!   true size, listed once, and its `[first, last]` covers the steps the value is needed
//!   (producer, or 0 for a graph input, through the last reader; graph outputs through the
//!   last step);
//! - an alias names a parent in the arena that its producer reads, is of a kind the plan's
//!   settings allow, is one the op's definition allows (judged by the verifier's own rules in
//!   `rules`, written from the ONNX operator definitions and sharing nothing with the
//!   planner's op table: the view at the range's start, or an in-place write over an input
//!   the op reads element by element), and lies inside its root (following parents, without
//!   a cycle);
//! - an in-place write at step `s` overwrites no bytes of its storage that a tensor other than
//!   its own descendants needs: still needed after `s`, read at `s` by another input of the
//!   writing node, a graph output (read by the caller after the last step), or a graph input
//!   when the plan's settings keep inputs intact;
//! - no two storages (a root and everything aliased into it) live at the same step share a
//!   byte; every buffer lies inside the arena; every root offset is a multiple of the plan's
//!   alignment;
//! - every weight with bytes is listed once with its size, inside the weight region, and no
//!   two weights share a byte (every pair, not only neighbours); a tensor computed from
//!   weights alone (the verifier's own rule, `derived`) is there too when the plan's settings
//!   fold such tensors, and in the arena otherwise; nothing else a node makes is in the
//!   weight region;
//! - the alignment is a power of two, and buffers and weights are in tensor id order (what
//!   [`Plan::buffer`] relies on); every graph input and output with bytes has a buffer when
//!   the plan's settings put them in the arena, and none when they leave them to the caller;
//! - the bindings hold together (two dims a broadcast symbol joins do broadcast);
//! - workspaces and values captured by bodies pass `verify_workspace`'s checks (a fused
//!   attention node's workspace holds its kernel's scratch: `kernels`);
//! - a plan made at upper bounds of data-dependent sizes ([`crate::PlanSettings::bounded`])
//!   passes all of the above at smaller values too (`below_bounds`).
//! - a tensor some node updates in place (`mutation`: a gradient accumulator, an optimizer
//!   step) is alone in its storage, every other reader keeps its side of the update in the
//!   graph's node order, and a graph input so updated lives through the last step; `Shape`
//!   and `Size` read no bytes (`rules`);
//! - the backward of a training step reads what each gradient needs (`backward`).
//!
//! All problems are returned, each naming the tensors or nodes involved, in a deterministic
//! order (by check, then by tensor or schedule order).

use std::fmt;

use memplan_ir::{
    Bindings, DType, Graph, Grouped, IndexVec, NodeId, OpRule, OpTable, SizeError, TensorId,
    TensorKind,
};

use crate::plan::{Alias, AliasKind, Plan, PlannedBuffer};

mod backward;
mod below_bounds;
pub(crate) mod derived;
pub(crate) mod kernels;
mod mutation;
mod rules;
mod spans;

use spans::Span;

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

/// What [`verify_plan_report`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Problems: the plan is unsafe, or not a plan of this graph.
    pub violations: Vec<PlanViolation>,
    /// Aliases the verifier trusted on the word of a custom op rule (each an
    /// [`PlanViolation::Unconfirmed`]); empty when verifying strictly, which reports them
    /// as violations instead.
    pub trusted: Vec<PlanViolation>,
}

impl VerifyReport {
    /// `Ok` when there are no violations.
    pub fn into_result(self) -> Result<(), PlanViolations> {
        if self.violations.is_empty() {
            Ok(())
        } else {
            Err(PlanViolations(self.violations))
        }
    }
}

/// Checks `plan` against `graph` with the bindings and op table the plan records; returns
/// every problem. Aliases are judged by the verifier's own op rules, those of custom rules
/// it cannot confirm are trusted (see [`verify_plan_report`] to list or refuse them); the
/// plan's recorded settings (views, in-place writes, overwriting inputs) are enforced.
pub fn verify_plan(graph: &Graph, plan: &Plan) -> Result<(), PlanViolations> {
    verify_plan_report(graph, plan, false).into_result()
}

/// Checks `plan` against `graph`; returns the violations and the aliases trusted on the word
/// of a custom op rule (with `strict`, those are violations instead).
pub fn verify_plan_report(graph: &Graph, plan: &Plan, strict: bool) -> VerifyReport {
    let mut report = verify_at(graph, plan, strict);
    // A plan at upper bounds, sound where it was made: checked below them too.
    if report.violations.is_empty()
        && !plan.settings.bounded.is_empty()
        && let Some(v) = below_bounds::check(graph, plan, &mut |small| {
            verify_at(graph, small, strict).violations
        })
    {
        report.violations.push(v);
    }
    report
}

/// [`verify_plan_report`] at the plan's recorded values only.
fn verify_at(graph: &Graph, plan: &Plan, strict: bool) -> VerifyReport {
    if let Err(e) = graph.validate() {
        return VerifyReport {
            violations: vec![PlanViolation::InvalidGraph(e)],
            trusted: Vec::new(),
        };
    }
    let bindings = match plan.settings.bindings_for(graph).map(|b| graph.resolve(&b)) {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => {
            return VerifyReport {
                violations: vec![PlanViolation::Bindings(e)],
                trusted: Vec::new(),
            };
        }
        Err(symbol) => {
            return VerifyReport {
                violations: vec![PlanViolation::UnknownSymbol { symbol }],
                trusted: Vec::new(),
            };
        }
    };
    let mut c = Checker {
        graph,
        plan,
        bindings: &bindings,
        ops: &plan.settings.op_table,
        strict,
        out: Vec::new(),
        trusted: Vec::new(),
        producers: graph.producers(),
        step_of: IndexVec::from_elem(None, graph.nodes().len()),
        bytes: IndexVec::from_elem(0, graph.tensors().len()),
        need_first: IndexVec::from_elem(0, graph.tensors().len()),
        need_last: IndexVec::from_elem(0, graph.tensors().len()),
        slot: IndexVec::from_elem(None, graph.tensors().len()),
        root_of: vec![None; plan.buffers.len()],
        at_load: if plan.settings.fold_weights {
            derived::computed_at_load(graph)
        } else {
            IndexVec::from_elem(false, graph.tensors().len())
        },
        spans: plan
            .buffers
            .iter()
            .map(|b| Span::range(b.offset, b.bytes))
            .collect(),
    };
    c.check_header();
    c.check_schedule();
    c.compute_needs();
    c.strided_parts();
    c.check_buffers();
    c.check_aliases();
    let members = c.storages();
    c.check_inplace_writes(&members);
    c.check_part_writes(&members);
    c.check_overlaps(&members);
    let updated = c.updated_tensors();
    c.check_update_order();
    c.check_updated_alone(&updated, &members);
    c.check_backward();
    c.check_weights();
    let ends: Vec<u64> = c.spans.iter().map(Span::end).collect();
    crate::verify_workspace::check_workspaces(graph, &bindings, plan, &ends, strict, &mut c.out);
    VerifyReport {
        violations: c.out,
        trusted: c.trusted,
    }
}

/// The members of each storage, by root, roots in buffer order.
struct Storages {
    roots: Vec<TensorId>,
    members: IndexVec<TensorId, Vec<usize>>,
}

struct Checker<'a> {
    graph: &'a Graph,
    plan: &'a Plan,
    bindings: &'a Bindings,
    ops: &'a OpTable,
    strict: bool,
    out: Vec<PlanViolation>,
    trusted: Vec<PlanViolation>,
    producers: IndexVec<TensorId, Option<NodeId>>,
    /// Each node's step (`None` for nodes that never run).
    step_of: IndexVec<NodeId, Option<u32>>,
    /// Each tensor's true size.
    bytes: IndexVec<TensorId, u64>,
    /// The steps each value is needed: producer (0 for graph inputs) through last reader;
    /// graph outputs through the last step.
    need_first: IndexVec<TensorId, u32>,
    need_last: IndexVec<TensorId, u32>,
    /// The buffer of each tensor (its index in `plan.buffers`).
    slot: IndexVec<TensorId, Option<usize>>,
    /// The root of each buffer's storage, once its aliases check out.
    root_of: Vec<Option<TensorId>>,
    /// The tensors computed from weights at load, when the plan folds them (else none).
    at_load: IndexVec<TensorId, bool>,
    /// The bytes each buffer occupies: its range, or one run per row for a strided Concat
    /// part.
    spans: Vec<Span>,
}

impl Checker<'_> {
    /// A tensor's name; plan-supplied ids may be out of range.
    fn tname(&self, t: TensorId) -> String {
        self.graph
            .tensors()
            .get(t)
            .map_or_else(|| t.to_string(), |x| x.name.clone())
    }

    fn nname(&self, n: NodeId) -> String {
        self.graph
            .nodes()
            .get(n)
            .map_or_else(|| n.to_string(), |x| x.name.clone())
    }

    /// The buffer of `t`, if the plan has one.
    fn buf(&self, t: TensorId) -> Option<&PlannedBuffer> {
        self.slot
            .get(t)
            .copied()
            .flatten()
            .map(|i| &self.plan.buffers[i])
    }

    /// Invariant: the alignment is a power of two, and buffers and weights are listed in
    /// tensor id order ([`Plan::buffer`] and [`Plan::weight`] search them by id).
    fn check_header(&mut self) {
        let align = self.plan.alignment;
        if !align.is_power_of_two() {
            self.out
                .push(PlanViolation::BadAlignment { alignment: align });
        }
        let buffers = self.plan.buffers.iter().map(|b| b.tensor);
        let weights = self.plan.weights.iter().map(|w| w.tensor);
        for (what, ids) in [
            ("buffers", buffers.collect::<Vec<_>>()),
            ("weights", weights.collect()),
        ] {
            if let Some(w) = ids.windows(2).find(|w| w[1] < w[0]) {
                self.out.push(PlanViolation::OutOfOrder {
                    what,
                    tensor: self.tname(w[1]),
                    after: self.tname(w[0]),
                });
            }
        }
    }

    /// Invariant: the schedule runs every node exactly once, each after the producers of its
    /// inputs.
    fn check_schedule(&mut self) {
        let g = self.graph;
        if self.plan.schedule.len() != g.nodes().len() {
            self.out.push(PlanViolation::ScheduleLength {
                expected: g.nodes().len(),
                got: self.plan.schedule.len(),
            });
        }
        for (step, &n) in self.plan.schedule.iter().enumerate() {
            let reason = match self.step_of.get(n) {
                None => Some(StepFault::NotANode),
                Some(Some(_)) => Some(StepFault::AlreadyRan),
                Some(None) => None,
            };
            if let Some(reason) = reason {
                self.out.push(PlanViolation::BadStep {
                    step,
                    node: self.nname(n),
                    reason,
                });
                continue;
            }
            self.step_of[n] = u32::try_from(step).ok();
        }
        for &n in &self.plan.schedule {
            let (Some(node), Some(Some(s))) = (g.nodes().get(n), self.step_of.get(n)) else {
                continue;
            };
            for t in node.present_inputs() {
                let Some(p) = self.producers[t] else { continue };
                if self.step_of[p].is_none_or(|ps| ps >= *s) {
                    self.out.push(PlanViolation::NotTopological {
                        node: node.name.clone(),
                        tensor: self.tname(t),
                        producer: self.nname(p),
                    });
                }
            }
        }
    }

    /// The spans of Concat parts whose slice is one run per row of several (the rest stay
    /// ranges): from the Concat's definition, at the buffer's offset.
    fn strided_parts(&mut self) {
        let g = self.graph;
        for (i, b) in self.plan.buffers.iter().enumerate() {
            let Some(Alias::Part { of, .. }) = b.alias else {
                continue;
            };
            let Some(node) = self.producers.get(of).copied().flatten().map(|n| g.node(n)) else {
                continue;
            };
            let slot = node
                .inputs
                .iter()
                .position(|&x| x == Some(b.tensor))
                .and_then(|pos| rules::concat_slot(g, node, pos, self.bindings));
            if let Some(slot) = slot.filter(|s| s.rows > 1) {
                self.spans[i] = Span {
                    start: b.offset,
                    run: slot.run,
                    rows: slot.rows,
                    stride: slot.stride,
                };
            }
        }
    }

    /// Sizes, and the steps each value is needed.
    fn compute_needs(&mut self) {
        let g = self.graph;
        let end_step =
            u32::try_from(self.plan.schedule.len().saturating_sub(1)).unwrap_or(u32::MAX);
        for (t, tensor) in g.tensors().iter_enumerated() {
            match tensor.bytes(self.bindings) {
                Ok(b) => self.bytes[t] = b,
                Err(SizeError::Unbound(s)) => self.out.push(PlanViolation::Unbound {
                    tensor: tensor.name.clone(),
                    symbol: g
                        .symbols()
                        .get(s)
                        .map_or_else(|| s.to_string(), String::clone),
                }),
                Err(e) => self.out.push(PlanViolation::Size {
                    tensor: tensor.name.clone(),
                    reason: e,
                }),
            }
            if let Some(s) = self.producers[t].and_then(|p| self.step_of[p]) {
                self.need_first[t] = s;
                self.need_last[t] = s;
            }
        }
        for (n, node) in g.nodes().iter_enumerated() {
            let Some(s) = self.step_of[n] else { continue };
            let listed = node
                .inputs
                .iter()
                .enumerate()
                .filter(|&(p, _)| rules::reads_contents(node, p))
                .filter_map(|(_, t)| *t);
            for t in listed.chain(node.implicit_inputs.iter().copied()) {
                self.need_last[t] = self.need_last[t].max(s);
            }
        }
        let updated = self.updated_tensors();
        for (t, tensor) in g.tensors().iter_enumerated() {
            // The caller reads outputs, and inputs a node updated, after the last step.
            if tensor.kind == TensorKind::Output || (tensor.kind == TensorKind::Input && updated[t])
            {
                self.need_last[t] = end_step;
            }
        }
    }

    /// Invariant: one buffer per arena tensor with bytes, of its true size, in the arena
    /// region, live whenever its value is needed, inside the arena and the schedule.
    fn check_buffers(&mut self) {
        let g = self.graph;
        let steps = self.plan.schedule.len();
        for (i, b) in self.plan.buffers.iter().enumerate() {
            let Some(tensor) = g.tensors().get(b.tensor) else {
                self.out.push(PlanViolation::UnknownTensor {
                    tensor: b.tensor.to_string(),
                });
                continue;
            };
            let name = tensor.name.clone();
            if self.slot[b.tensor].is_some() {
                self.out.push(PlanViolation::Duplicate { tensor: name });
                continue;
            }
            self.slot[b.tensor] = Some(i);
            let settings = &self.plan.settings;
            let caller_owned = match tensor.kind {
                TensorKind::Input => !settings.inputs_in_arena,
                TensorKind::Output => !settings.outputs_in_arena,
                TensorKind::Activation => false,
                TensorKind::Weight | TensorKind::State => true,
            };
            if caller_owned {
                self.out.push(PlanViolation::WrongRegion {
                    tensor: name.clone(),
                    kind: tensor.kind,
                });
            }
            if self.at_load[b.tensor] {
                self.out.push(PlanViolation::NotFolded {
                    tensor: name.clone(),
                });
            }
            let actual = self.bytes[b.tensor];
            if b.bytes != actual {
                self.out.push(PlanViolation::WrongBytes {
                    tensor: name.clone(),
                    planned: b.bytes,
                    actual,
                });
            }
            let (nf, nl) = (self.need_first[b.tensor], self.need_last[b.tensor]);
            if b.first > nf || b.last < nl || b.first > b.last {
                self.out.push(PlanViolation::TooShort {
                    tensor: name.clone(),
                    first: b.first,
                    last: b.last,
                    need_first: nf,
                    need_last: nl,
                });
            }
            if usize::try_from(b.last).map_or(true, |l| l >= steps.max(1)) {
                self.out.push(PlanViolation::PastSchedule {
                    tensor: name.clone(),
                    last: b.last,
                    steps,
                });
            }
            let end = b.offset.checked_add(b.bytes);
            let extent = self.spans[i].end();
            if end.is_none_or(|e| e.max(extent) > self.plan.arena_bytes) {
                self.out.push(PlanViolation::OutsideRegion {
                    tensor: name,
                    end: extent.max(b.offset.saturating_add(b.bytes)),
                    size: self.plan.arena_bytes,
                });
            }
        }
        let settings = &self.plan.settings;
        for (t, tensor) in g.tensors().iter_enumerated() {
            let in_arena = match tensor.kind {
                TensorKind::Activation => !self.at_load[t],
                TensorKind::Input => settings.inputs_in_arena,
                TensorKind::Output => settings.outputs_in_arena,
                TensorKind::Weight | TensorKind::State => false,
            };
            if in_arena && self.bytes[t] > 0 && self.slot[t].is_none() {
                self.out.push(PlanViolation::Missing {
                    tensor: tensor.name.clone(),
                    kind: tensor.kind,
                    bytes: self.bytes[t],
                });
            }
        }
    }

    /// Invariant: an alias names a parent in the arena that its producer reads, is allowed by
    /// the plan's settings and by the op's definition (the verifier's own rules), and lies
    /// inside its root (found by following parents, without a cycle); roots are aligned.
    fn check_aliases(&mut self) {
        for i in 0..self.plan.buffers.len() {
            let b = &self.plan.buffers[i];
            if self.slot.get(b.tensor).copied().flatten() != Some(i) {
                continue;
            }
            if let Some(a) = b.alias
                && !self.check_parent(b, a)
            {
                continue;
            }
            self.find_root(i);
        }
    }

    /// Checks the alias of `b` to `p`; false when the parent cannot be followed.
    fn check_parent(&mut self, b: &PlannedBuffer, alias: Alias) -> bool {
        let (p, kind) = (alias.of(), alias.kind());
        let g = self.graph;
        let name = self.tname(b.tensor);
        // The node that makes the alias: the tensor's producer, reading its parent; for a
        // Concat part, the parent's producer (the Concat), reading the part.
        let (made_by, read) = match kind {
            AliasKind::Part => (self.producers.get(p).copied().flatten(), b.tensor),
            AliasKind::View | AliasKind::InPlace => (self.producers[b.tensor], p),
        };
        let node = made_by.map(|n| &g.nodes()[n]);
        let reads = node.is_some_and(|node| node.inputs.iter().flatten().any(|&x| x == read));
        let Some(p_offset) = self.buf(p).map(|pb| pb.offset) else {
            self.out.push(PlanViolation::BadAlias {
                tensor: name,
                parent: self.tname(p),
                reason: AliasFault::ParentNotInArena,
            });
            return false;
        };
        let (Some(node), true) = (node, reads) else {
            self.out.push(PlanViolation::BadAlias {
                tensor: name,
                parent: self.tname(p),
                reason: if kind == AliasKind::Part {
                    AliasFault::PartNotRead
                } else {
                    AliasFault::ParentNotRead
                },
            });
            return false;
        };
        if kind == AliasKind::Part && g.tensors()[b.tensor].kind != TensorKind::Activation {
            self.out.push(PlanViolation::BadAlias {
                tensor: name.clone(),
                parent: self.tname(p),
                reason: AliasFault::PartNotActivation,
            });
        }
        // The view's place in its parent and its place in the arena must agree.
        if let Alias::View { offset, .. } | Alias::Part { offset, .. } = alias
            && p_offset.checked_add(offset) != Some(b.offset)
        {
            self.out.push(PlanViolation::BadAlias {
                tensor: name.clone(),
                parent: self.tname(p),
                reason: AliasFault::OffsetDisagrees,
            });
        }
        let settings = &self.plan.settings;
        let allowed = match kind {
            AliasKind::View => settings.views,
            AliasKind::InPlace => settings.inplace,
            AliasKind::Part => settings.concat_elision,
        };
        if !allowed {
            self.out.push(PlanViolation::Policy {
                tensor: name.clone(),
                kind: kind.name(),
            });
        }
        if kind != AliasKind::Part && *self.ops.rule(&node.op) == OpRule::Opaque {
            self.out.push(PlanViolation::OpaqueOp {
                tensor: name.clone(),
                kind: kind.name(),
                op: node.op.clone(),
            });
        }
        // Reported, and the alias still followed: its bytes are checked too.
        if let Some(reason) = self.op_forbids(node, b, p, p_offset, kind) {
            if matches!(self.ops.rule(&node.op), OpRule::Custom(_)) {
                let v = PlanViolation::Unconfirmed {
                    tensor: name,
                    parent: self.tname(p),
                    kind: kind.name(),
                    op: node.op.clone(),
                };
                if self.strict {
                    self.out.push(v);
                } else {
                    self.trusted.push(v);
                }
            } else {
                self.out.push(PlanViolation::BadAlias {
                    tensor: name,
                    parent: self.tname(p),
                    reason,
                });
            }
        }
        true
    }

    /// Why the op's definition does not allow `b` to alias `p` (at `p_offset`), if it does
    /// not: the verifier's own rules ([`rules`]), not the planner's op table.
    fn op_forbids(
        &self,
        node: &memplan_ir::Node,
        b: &PlannedBuffer,
        p: TensorId,
        p_offset: u64,
        kind: AliasKind,
    ) -> Option<AliasFault> {
        if kind == AliasKind::Part {
            // A tensor the Concat reads twice fills two slices: written into one, the
            // Concat must copy it into the other from inside its own output. Not a part.
            let slots = node.inputs.iter().filter(|&&x| x == Some(b.tensor)).count();
            if slots > 1 {
                return Some(AliasFault::PartRepeated);
            }
            let fits = node.inputs.iter().enumerate().any(|(pos, &x)| {
                x == Some(b.tensor)
                    && rules::concat_slot(self.graph, node, pos, self.bindings)
                        .is_some_and(|slot| p_offset.checked_add(slot.start) == Some(b.offset))
            });
            return (!fits).then_some(AliasFault::NotConcatSlice);
        }
        let j = node.outputs.iter().position(|&o| o == b.tensor)?;
        // A strided part's bytes are runs: no op's output is a range of them, and nothing
        // written as one range lands on them.
        if let Some(pi) = self.slot.get(p).copied().flatten()
            && self.spans[pi].strided()
        {
            return Some(AliasFault::StridedParent);
        }
        match kind {
            AliasKind::View => match rules::view_range(self.graph, node, j, self.bindings) {
                None => Some(AliasFault::NotARange),
                Some((x, _)) if x != p => Some(AliasFault::RangeOfAnotherInput),
                Some((_, off)) if p_offset.checked_add(off) != Some(b.offset) => {
                    Some(AliasFault::ViewMisplaced)
                }
                Some(_) => None,
            },
            AliasKind::Part => None,
            AliasKind::InPlace => {
                let allowed = node.inputs.iter().enumerate().any(|(pos, x)| {
                    *x == Some(p) && rules::may_write_over(self.graph, node, j, pos, self.bindings)
                });
                if !allowed {
                    Some(AliasFault::NotWritableOver)
                } else if b.offset != p_offset {
                    Some(AliasFault::InPlaceMisplaced)
                } else {
                    None
                }
            }
        }
    }

    /// Follows buffer `i`'s parents to its root: no cycle, inside the root, root aligned.
    fn find_root(&mut self, i: usize) {
        let b = &self.plan.buffers[i];
        let mut cur = b;
        let mut hops = 0usize;
        let root = loop {
            match cur.parent().and_then(|p| self.buf(p)) {
                Some(p) => {
                    cur = p;
                    hops += 1;
                    if hops > self.plan.buffers.len() {
                        break None;
                    }
                }
                _ => break Some(cur.tensor),
            }
        };
        let Some(r) = root else {
            self.out.push(PlanViolation::BadAlias {
                tensor: self.tname(b.tensor),
                parent: b.parent().map_or_else(|| "-".to_owned(), |p| self.tname(p)),
                reason: AliasFault::Cycle,
            });
            return;
        };
        self.root_of[i] = Some(r);
        let Some(rb) = self.buf(r) else { return };
        let (start, end) = (b.offset, self.spans[i].end());
        let (rs, re) = (rb.offset, rb.offset.saturating_add(rb.bytes));
        if start < rs || end > re {
            self.out.push(PlanViolation::OutsideRoot {
                tensor: self.tname(b.tensor),
                start,
                end,
                root: self.tname(r),
                root_start: rs,
                root_end: re,
            });
        }
        let align = self.plan.alignment;
        if r == b.tensor && align > 0 && !b.offset.is_multiple_of(align) {
            self.out.push(PlanViolation::Misaligned {
                tensor: self.tname(r),
                offset: b.offset,
                alignment: align,
            });
        }
        // Every element on its natural boundary: the bytes of one element (of one component
        // for complex numbers); sub-byte dtypes on any byte.
        let dtype = self.graph.tensors()[b.tensor].dtype;
        if let Some(bits) = dtype.bits() {
            let component = if matches!(dtype, DType::C64 | DType::C128) {
                bits / 2
            } else {
                bits
            };
            let natural = u64::from(component / 8).max(1);
            if !b.offset.is_multiple_of(natural) {
                self.out.push(PlanViolation::Misaligned {
                    tensor: self.tname(b.tensor),
                    offset: b.offset,
                    alignment: natural,
                });
            }
        }
    }

    /// Buffers grouped by the root of their storage.
    fn storages(&self) -> Storages {
        let mut s = Storages {
            roots: Vec::new(),
            members: IndexVec::from_elem(Vec::new(), self.graph.tensors().len()),
        };
        for (i, r) in self.root_of.iter().enumerate() {
            if let Some(r) = *r {
                if s.members[r].is_empty() {
                    s.roots.push(r);
                }
                s.members[r].push(i);
            }
        }
        s
    }

    /// Whether following `z`'s parents reaches `y`.
    fn descends_from(&self, z: &PlannedBuffer, y: TensorId) -> bool {
        let mut cur = z;
        for _ in 0..=self.plan.buffers.len() {
            if cur.tensor == y {
                return true;
            }
            match cur.parent().and_then(|p| self.buf(p)) {
                Some(p) => cur = p,
                None => return false,
            }
        }
        false
    }

    /// Invariant: an in-place write at step `s` overwrites no byte that a tensor other than
    /// its own descendants needs: not one still needed after `s`, not one another input of
    /// the writing node reads at `s`, not a graph output (read by the caller after the last
    /// step), and not a graph input unless the plan's settings allow it.
    fn check_inplace_writes(&mut self, storages: &Storages) {
        let g = self.graph;
        for (i, b) in self.plan.buffers.iter().enumerate() {
            let (Some(r), Some(AliasKind::InPlace)) = (self.root_of[i], b.alias_kind()) else {
                continue;
            };
            let step = self.need_first[b.tensor];
            let writer = self.producers[b.tensor].map(|n| &g.nodes()[n]);
            for &zi in &storages.members[r] {
                let z = &self.plan.buffers[zi];
                if !self.spans[zi].meets(&self.spans[i]) || self.descends_from(z, b.tensor) {
                    continue;
                }
                let kind = g.tensors()[z.tensor].kind;
                let read_here = Some(z.tensor) != b.parent()
                    && writer.is_some_and(|n| n.present_inputs().any(|x| x == z.tensor));
                let v = if read_here {
                    PlanViolation::InPlaceOverRead {
                        tensor: self.tname(b.tensor),
                        node: writer.map_or_else(String::new, |n| n.name.clone()),
                        other: self.tname(z.tensor),
                    }
                } else if kind == TensorKind::Output {
                    PlanViolation::InPlaceOverOutput {
                        tensor: self.tname(b.tensor),
                        output: self.tname(z.tensor),
                    }
                } else if kind == TensorKind::Input && !self.plan.settings.inplace_over_inputs {
                    PlanViolation::InPlaceOverInput {
                        tensor: self.tname(b.tensor),
                        input: self.tname(z.tensor),
                    }
                } else if z.last.max(self.need_last[z.tensor]) > step {
                    PlanViolation::InPlaceTooEarly {
                        tensor: self.tname(b.tensor),
                        step,
                        other: self.tname(z.tensor),
                        other_last: z.last.max(self.need_last[z.tensor]),
                    }
                } else {
                    continue;
                };
                self.out.push(v);
            }
        }
    }

    /// Invariant: a Concat part's producer writes it at step `s` over no byte that another
    /// tensor of its storage holds at `s` (written before, or at `s`, and needed at `s` or
    /// later), other than its own descendants and the ancestors not produced yet (its
    /// Concat's output).
    fn check_part_writes(&mut self, storages: &Storages) {
        for (i, b) in self.plan.buffers.iter().enumerate() {
            let (Some(r), Some(AliasKind::Part)) = (self.root_of[i], b.alias_kind()) else {
                continue;
            };
            let step = self.need_first[b.tensor];
            for &zi in &storages.members[r] {
                let z = &self.plan.buffers[zi];
                if !self.spans[zi].meets(&self.spans[i]) || self.descends_from(z, b.tensor) {
                    continue;
                }
                let z_first = z.first.min(self.need_first[z.tensor]);
                if self.descends_from(b, z.tensor) && z_first > step {
                    continue;
                }
                let z_last = z.last.max(self.need_last[z.tensor]);
                if z_first <= step && step <= z_last {
                    self.out.push(PlanViolation::PartOverLive {
                        tensor: self.tname(b.tensor),
                        step,
                        other: self.tname(z.tensor),
                    });
                }
            }
        }
    }

    /// Invariant: no two storages live at the same step share a byte (a sweep by first step).
    fn check_overlaps(&mut self, storages: &Storages) {
        let mut spans: Vec<(u32, u32, u64, u64, TensorId)> = storages
            .roots
            .iter()
            .filter_map(|&r| {
                let list = &storages.members[r];
                let rb = self.buf(r)?;
                let first = list.iter().map(|&m| self.plan.buffers[m].first).min()?;
                let last = list.iter().map(|&m| self.plan.buffers[m].last).max()?;
                Some((
                    first,
                    last,
                    rb.offset,
                    rb.offset.saturating_add(rb.bytes),
                    r,
                ))
            })
            .collect();
        spans.sort_unstable_by_key(|s| (s.0, s.4));
        let mut active: Vec<(u32, u32, u64, u64, TensorId)> = Vec::new();
        for s in spans {
            active.retain(|a| a.1 >= s.0);
            for a in &active {
                let (start, end) = (a.2.max(s.2), a.3.min(s.3));
                if start < end {
                    self.out.push(PlanViolation::Overlap {
                        a: self.tname(a.4),
                        b: self.tname(s.4),
                        step: s.0,
                        start,
                        end,
                    });
                }
            }
            active.push(s);
        }
    }

    /// Invariant: every weight with bytes is listed once, with its size, inside the weight
    /// region, and no two weights share a byte.
    fn check_weights(&mut self) {
        let g = self.graph;
        let mut seen: IndexVec<TensorId, bool> = IndexVec::from_elem(false, g.tensors().len());
        let mut spans: Vec<(u64, u64, TensorId)> = Vec::new();
        for w in &self.plan.weights {
            let Some(tensor) = g.tensors().get(w.tensor) else {
                self.out.push(PlanViolation::UnknownTensor {
                    tensor: w.tensor.to_string(),
                });
                continue;
            };
            if seen[w.tensor] {
                self.out.push(PlanViolation::Duplicate {
                    tensor: tensor.name.clone(),
                });
                continue;
            }
            seen[w.tensor] = true;
            if !matches!(tensor.kind, TensorKind::Weight | TensorKind::State)
                && !self.at_load[w.tensor]
            {
                self.out.push(PlanViolation::WrongRegion {
                    tensor: tensor.name.clone(),
                    kind: tensor.kind,
                });
            }
            if w.bytes != self.bytes[w.tensor] {
                self.out.push(PlanViolation::WrongBytes {
                    tensor: tensor.name.clone(),
                    planned: w.bytes,
                    actual: self.bytes[w.tensor],
                });
            }
            let end = w.offset.checked_add(w.bytes);
            if end.is_none_or(|e| e > self.plan.weight_bytes) {
                self.out.push(PlanViolation::OutsideRegion {
                    tensor: tensor.name.clone(),
                    end: w.offset.saturating_add(w.bytes),
                    size: self.plan.weight_bytes,
                });
            }
            if w.bytes > 0 {
                spans.push((w.offset, w.offset.saturating_add(w.bytes), w.tensor));
            }
        }
        for (t, tensor) in g.tensors().iter_enumerated() {
            if matches!(tensor.kind, TensorKind::Weight | TensorKind::State)
                && self.bytes[t] > 0
                && !seen[t]
            {
                self.out.push(PlanViolation::Missing {
                    tensor: tensor.name.clone(),
                    kind: tensor.kind,
                    bytes: self.bytes[t],
                });
            }
            if self.at_load[t] && self.bytes[t] > 0 && !seen[t] && self.slot[t].is_none() {
                self.out.push(PlanViolation::NotFolded {
                    tensor: tensor.name.clone(),
                });
            }
        }
        // Every pair that shares a byte, not only neighbours: a sweep by start keeping the
        // spans that reach past it.
        spans.sort_unstable();
        let mut active: Vec<(u64, u64, TensorId)> = Vec::new();
        for s in spans {
            active.retain(|a| a.1 > s.0);
            for a in &active {
                self.out.push(PlanViolation::Overlap {
                    a: self.tname(a.2),
                    b: self.tname(s.2),
                    step: 0,
                    start: s.0,
                    end: a.1.min(s.1),
                });
            }
            active.push(s);
        }
    }
}
