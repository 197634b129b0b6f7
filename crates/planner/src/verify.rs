//! The graph-level plan verifier: checks a [`Plan`] against its graph, knowing nothing of how
//! the planner made it.
//!
//! It reads the graph (for sizes, producers, readers and tensor kinds), the bindings of its
//! symbols, and the plan's schedule, buffers and weights. It checks that:
//!
//! - the schedule runs every node exactly once, each after the producers of its inputs;
//! - every activation with bytes has a buffer, every buffer is a non-weight tensor with its
//!   true size, listed once, and its `[first, last]` covers the steps the value is needed
//!   (producer, or 0 for a graph input, through the last reader; graph outputs through the
//!   last step);
//! - an alias names a parent in the arena that its producer reads, is one the op's memory
//!   semantics allow (the view at the op's offset, or an in-place write over an input the op
//!   may overwrite), and lies inside its root (following parents, without a cycle);
//! - an in-place write at step `s` overwrites no bytes of its storage that a tensor other than
//!   its own descendants still needs after `s`;
//! - no two storages (a root and everything aliased into it) live at the same step share a
//!   byte; every buffer lies inside the arena; every root offset is a multiple of the plan's
//!   alignment;
//! - every weight with bytes is listed once with its size, inside the weight region, and no
//!   two weights share a byte;
//! - workspaces and values captured by bodies pass `verify_workspace`'s checks.
//!
//! All problems are returned, each naming the tensors or nodes involved, in a deterministic
//! order (by check, then by tensor or schedule order).

use std::collections::HashMap;
use std::fmt;

use memplan_ir::{
    Bindings, Graph, IndexVec, MemorySemantics, NodeId, OpTable, TensorId, TensorKind,
};

use crate::plan::{AliasKind, Plan, PlannedBuffer};

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
        /// `is not a node of the graph` or `already ran`.
        reason: &'static str,
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
        /// Why.
        reason: String,
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
    #[error("{kind} `{tensor}` has {bytes} bytes but no place in the plan")]
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
    #[error("tensor `{tensor}` is planned with {planned} bytes but has {actual}")]
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
        reason: &'static str,
    },
    /// An alias that does not lie inside its root's bytes.
    #[error(
        "tensor `{tensor}` (bytes {start}..{end}) does not lie inside its root `{root}` (bytes {root_start}..{root_end})"
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
        "storages of `{a}` and `{b}` are both live at step {step} and share bytes {start}..{end}"
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
    #[error("tensor `{tensor}` ends at byte {end}, past the end of its region ({size} bytes)")]
    OutsideRegion {
        /// The tensor.
        tensor: String,
        /// One past its last byte (saturated).
        end: u64,
        /// The region's size.
        size: u64,
    },
    /// A root whose offset is not a multiple of the plan's alignment.
    #[error("tensor `{tensor}` starts at {offset}, not a multiple of the alignment {alignment}")]
    Misaligned {
        /// The tensor.
        tensor: String,
        /// Its offset.
        offset: u64,
        /// The plan's alignment.
        alignment: u64,
    },
    /// A workspace that names no node with bodies, is misplaced, too small, or missing.
    #[error("the workspace of node `{node}` is wrong: {reason}")]
    BadWorkspace {
        /// The node.
        node: String,
        /// What is wrong.
        reason: String,
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

struct Checker<'a> {
    graph: &'a Graph,
    plan: &'a Plan,
    out: Vec<PlanViolation>,
}

impl Checker<'_> {
    fn tname(&self, t: TensorId) -> String {
        self.graph
            .tensors
            .get(t)
            .map_or_else(|| t.to_string(), |x| x.name.clone())
    }

    fn nname(&self, n: NodeId) -> String {
        self.graph
            .nodes
            .get(n)
            .map_or_else(|| n.to_string(), |x| x.name.clone())
    }

    /// Checks the schedule; returns each node's step (`None` for nodes that never run).
    fn schedule(&mut self) -> IndexVec<NodeId, Option<u32>> {
        let g = self.graph;
        let mut step_of: IndexVec<NodeId, Option<u32>> = IndexVec::from_elem(None, g.nodes.len());
        if self.plan.schedule.len() != g.nodes.len() {
            self.out.push(PlanViolation::ScheduleLength {
                expected: g.nodes.len(),
                got: self.plan.schedule.len(),
            });
        }
        for (step, &n) in self.plan.schedule.iter().enumerate() {
            let reason = match step_of.get(n) {
                None => Some("is not a node of the graph"),
                Some(Some(_)) => Some("already ran"),
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
            step_of[n] = u32::try_from(step).ok();
        }
        let producers = g.producers();
        for &n in &self.plan.schedule {
            let (Some(node), Some(Some(s))) = (g.nodes.get(n), step_of.get(n)) else {
                continue;
            };
            for t in node.present_inputs() {
                let Some(p) = producers.get(t).copied().flatten() else {
                    continue;
                };
                let ok = step_of.get(p).copied().flatten().is_some_and(|ps| ps < *s);
                if !ok {
                    self.out.push(PlanViolation::NotTopological {
                        node: node.name.clone(),
                        tensor: self.tname(t),
                        producer: self.nname(p),
                    });
                }
            }
        }
        step_of
    }
}

/// Checks `plan` against `graph` with its symbols bound by `bindings`, judging aliases by the
/// default op table; returns every problem.
pub fn verify_plan(graph: &Graph, bindings: &Bindings, plan: &Plan) -> Result<(), PlanViolations> {
    verify_plan_with_ops(graph, bindings, plan, &OpTable::default())
}

/// Why the op that produces `b` may not alias it to `parent` (at `b`'s offset), if it may not:
/// a view must be the view the op's semantics give (that input, that offset), an in-place
/// write must be over one of the inputs the semantics list, at the parent's offset.
fn semantics_forbid(
    graph: &Graph,
    bindings: &Bindings,
    ops: &OpTable,
    producers: &IndexVec<TensorId, Option<NodeId>>,
    b: &PlannedBuffer,
    parent: TensorId,
    parent_buf: Option<&PlannedBuffer>,
) -> Option<&'static str> {
    let node = producers
        .get(b.tensor)
        .copied()
        .flatten()
        .and_then(|n| graph.nodes.get(n))?;
    let j = node.outputs.iter().position(|&o| o == b.tensor)?;
    let parent_offset = parent_buf?.offset;
    let input_is_parent = |i: usize| node.inputs.get(i).copied().flatten() == Some(parent);
    match (b.alias, ops.semantics(graph, node, bindings).get(j)) {
        (Some(AliasKind::View), Some(MemorySemantics::View { input, offset })) => {
            let at = parent_offset.checked_add(*offset);
            if !input_is_parent(*input) {
                Some("the op's memory semantics make it a view of another input")
            } else if at != Some(b.offset) {
                Some("a view must sit at its parent's offset plus the op's view offset")
            } else {
                None
            }
        }
        (Some(AliasKind::InPlace), Some(MemorySemantics::InPlace { inputs })) => {
            if !inputs.iter().any(|&i| input_is_parent(i)) {
                Some("the op may not write this output over that input")
            } else if b.offset != parent_offset {
                Some("an in-place output must sit at its parent's offset")
            } else {
                None
            }
        }
        (Some(AliasKind::View), _) => {
            Some("the op's memory semantics do not make this output a view")
        }
        (Some(AliasKind::InPlace), _) => {
            Some("the op's memory semantics do not allow writing this output in place")
        }
        (None, _) => None,
    }
}

/// [`verify_plan`] with the op table the plan was made with (for graphs with custom ops).
pub fn verify_plan_with_ops(
    graph: &Graph,
    bindings: &Bindings,
    plan: &Plan,
    ops: &OpTable,
) -> Result<(), PlanViolations> {
    let mut c = Checker {
        graph,
        plan,
        out: Vec::new(),
    };
    let step_of = c.schedule();
    let steps = plan.schedule.len();
    let end_step = u32::try_from(steps.saturating_sub(1)).unwrap_or(u32::MAX);

    // Sizes and the steps each value is needed.
    let mut bytes: IndexVec<TensorId, u64> = IndexVec::from_elem(0, graph.tensors.len());
    for (t, tensor) in graph.tensors.iter_enumerated() {
        match tensor.bytes(bindings) {
            Ok(b) => bytes[t] = b,
            Err(e) => c.out.push(PlanViolation::Size {
                tensor: tensor.name.clone(),
                reason: e.to_string(),
            }),
        }
    }
    let producers = graph.producers();
    let mut need_first: IndexVec<TensorId, u32> = IndexVec::from_elem(0, graph.tensors.len());
    let mut need_last: IndexVec<TensorId, u32> = IndexVec::from_elem(0, graph.tensors.len());
    for (t, p) in producers.iter_enumerated() {
        if let Some(s) = p.and_then(|p| step_of.get(p).copied().flatten()) {
            need_first[t] = s;
            need_last[t] = s;
        }
    }
    for (n, node) in graph.nodes.iter_enumerated() {
        let Some(s) = step_of.get(n).copied().flatten() else {
            continue;
        };
        for t in node.present_inputs() {
            if let Some(l) = need_last.raw_mut().get_mut(t.0 as usize) {
                *l = (*l).max(s);
            }
        }
    }
    for (t, tensor) in graph.tensors.iter_enumerated() {
        if tensor.kind == TensorKind::Output {
            need_last[t] = end_step;
        }
    }

    // Buffers: one per tensor, right size, right region, long enough, inside the arena.
    let mut slot: IndexVec<TensorId, Option<usize>> =
        IndexVec::from_elem(None, graph.tensors.len());
    for (i, b) in plan.buffers.iter().enumerate() {
        let Some(tensor) = graph.tensors.get(b.tensor) else {
            c.out.push(PlanViolation::UnknownTensor {
                tensor: b.tensor.to_string(),
            });
            continue;
        };
        let name = tensor.name.clone();
        if slot[b.tensor].is_some() {
            c.out.push(PlanViolation::Duplicate { tensor: name });
            continue;
        }
        slot[b.tensor] = Some(i);
        if tensor.kind == TensorKind::Weight {
            c.out.push(PlanViolation::WrongRegion {
                tensor: name.clone(),
                kind: tensor.kind,
            });
        }
        let actual = bytes.get(b.tensor).copied().unwrap_or(0);
        if b.bytes != actual {
            c.out.push(PlanViolation::WrongBytes {
                tensor: name.clone(),
                planned: b.bytes,
                actual,
            });
        }
        let (nf, nl) = (need_first[b.tensor], need_last[b.tensor]);
        if b.first > nf || b.last < nl || b.first > b.last {
            c.out.push(PlanViolation::TooShort {
                tensor: name.clone(),
                first: b.first,
                last: b.last,
                need_first: nf,
                need_last: nl,
            });
        }
        if usize::try_from(b.last).map_or(true, |l| l >= steps.max(1)) {
            c.out.push(PlanViolation::PastSchedule {
                tensor: name.clone(),
                last: b.last,
                steps,
            });
        }
        let end = b.offset.saturating_add(b.bytes);
        if end > plan.arena_bytes || b.offset.checked_add(b.bytes).is_none() {
            c.out.push(PlanViolation::OutsideRegion {
                tensor: name,
                end,
                size: plan.arena_bytes,
            });
        }
    }
    for (t, tensor) in graph.tensors.iter_enumerated() {
        if tensor.kind == TensorKind::Activation && bytes[t] > 0 && slot[t].is_none() {
            c.out.push(PlanViolation::Missing {
                tensor: tensor.name.clone(),
                kind: tensor.kind,
                bytes: bytes[t],
            });
        }
    }

    // Aliases: parents exist, are read by the producer, no cycles; find each root.
    let buf = |t: TensorId| {
        slot.get(t)
            .copied()
            .flatten()
            .and_then(|i| plan.buffers.get(i))
    };
    let mut root_of: Vec<Option<TensorId>> = vec![None; plan.buffers.len()];
    for (i, b) in plan.buffers.iter().enumerate() {
        if slot.get(b.tensor).copied().flatten() != Some(i) {
            continue;
        }
        let name = c.tname(b.tensor);
        match (b.alias_of, b.alias) {
            (None, None) => {}
            (Some(p), Some(_)) => {
                let reads = producers
                    .get(b.tensor)
                    .copied()
                    .flatten()
                    .and_then(|n| graph.nodes.get(n))
                    .is_some_and(|node| node.present_inputs().any(|x| x == p));
                if buf(p).is_none() {
                    c.out.push(PlanViolation::BadAlias {
                        tensor: name,
                        parent: c.tname(p),
                        reason: "the parent is not in the arena",
                    });
                    continue;
                } else if !reads {
                    c.out.push(PlanViolation::BadAlias {
                        tensor: name,
                        parent: c.tname(p),
                        reason: "the producing node does not read the parent",
                    });
                    continue;
                } else if let Some(reason) =
                    semantics_forbid(graph, bindings, ops, &producers, b, p, buf(p))
                {
                    // Reported, and the alias still followed: its bytes are checked too.
                    c.out.push(PlanViolation::BadAlias {
                        tensor: name,
                        parent: c.tname(p),
                        reason,
                    });
                }
            }
            (p, _) => {
                let parent = p.map_or_else(|| "-".to_owned(), |p| c.tname(p));
                c.out.push(PlanViolation::BadAlias {
                    tensor: name,
                    parent,
                    reason: "alias and alias_of must both be set or both be null",
                });
                continue;
            }
        }
        // Follow parents to the root; more hops than buffers means a cycle.
        let mut cur = b;
        let mut hops = 0usize;
        let root = loop {
            match cur.alias_of.and_then(buf) {
                Some(p) if cur.alias.is_some() => {
                    cur = p;
                    hops += 1;
                    if hops > plan.buffers.len() {
                        break None;
                    }
                }
                _ => break Some(cur.tensor),
            }
        };
        match root {
            None => c.out.push(PlanViolation::BadAlias {
                tensor: c.tname(b.tensor),
                parent: b.alias_of.map_or_else(|| "-".to_owned(), |p| c.tname(p)),
                reason: "its parents form a cycle",
            }),
            Some(r) => {
                if let Some(slot) = root_of.get_mut(i) {
                    *slot = Some(r);
                }
                if let Some(rb) = buf(r) {
                    let (start, end) = (b.offset, b.offset.saturating_add(b.bytes));
                    let (rs, re) = (rb.offset, rb.offset.saturating_add(rb.bytes));
                    if start < rs || end > re {
                        c.out.push(PlanViolation::OutsideRoot {
                            tensor: c.tname(b.tensor),
                            start,
                            end,
                            root: c.tname(r),
                            root_start: rs,
                            root_end: re,
                        });
                    }
                    if r == b.tensor && plan.alignment > 0 && b.offset % plan.alignment != 0 {
                        c.out.push(PlanViolation::Misaligned {
                            tensor: c.tname(r),
                            offset: b.offset,
                            alignment: plan.alignment,
                        });
                    }
                }
            }
        }
    }

    // Storages: members by root (roots in buffer order).
    let mut members: HashMap<TensorId, Vec<&PlannedBuffer>> = HashMap::new();
    let mut roots: Vec<TensorId> = Vec::new();
    for (b, r) in plan.buffers.iter().zip(&root_of) {
        if let Some(r) = *r {
            let list = members.entry(r).or_default();
            if list.is_empty() {
                roots.push(r);
            }
            list.push(b);
        }
    }

    // In-place writes: nothing else in the storage that overlaps is needed after the write.
    let is_descendant = |z: &PlannedBuffer, y: TensorId| {
        let mut cur = z;
        for _ in 0..=plan.buffers.len() {
            if cur.tensor == y {
                return true;
            }
            match cur.alias_of.and_then(buf) {
                Some(p) => cur = p,
                None => return false,
            }
        }
        false
    };
    for (b, r) in plan.buffers.iter().zip(&root_of) {
        let (Some(r), Some(AliasKind::InPlace)) = (*r, b.alias) else {
            continue;
        };
        let step = need_first[b.tensor];
        let (ys, ye) = (b.offset, b.offset.saturating_add(b.bytes));
        for z in members.get(&r).map_or(&[][..], Vec::as_slice) {
            let (zs, ze) = (z.offset, z.offset.saturating_add(z.bytes));
            let overlaps = zs < ye && ys < ze;
            if overlaps && z.last > step && !is_descendant(z, b.tensor) {
                c.out.push(PlanViolation::InPlaceTooEarly {
                    tensor: c.tname(b.tensor),
                    step,
                    other: c.tname(z.tensor),
                    other_last: z.last,
                });
            }
        }
    }

    // Storages live at the same step share no byte: sweep by first step.
    let mut spans: Vec<(u32, u32, u64, u64, TensorId)> = roots
        .iter()
        .filter_map(|r| {
            let list = members.get(r)?;
            let rb = buf(*r)?;
            let first = list.iter().map(|m| m.first).min()?;
            let last = list.iter().map(|m| m.last).max()?;
            Some((
                first,
                last,
                rb.offset,
                rb.offset.saturating_add(rb.bytes),
                *r,
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
                c.out.push(PlanViolation::Overlap {
                    a: c.tname(a.4),
                    b: c.tname(s.4),
                    step: s.0,
                    start,
                    end,
                });
            }
        }
        active.push(s);
    }

    // Weights: each listed once, right size, inside the region, disjoint.
    let mut wseen: IndexVec<TensorId, bool> = IndexVec::from_elem(false, graph.tensors.len());
    let mut wspans: Vec<(u64, u64, TensorId)> = Vec::new();
    for w in &plan.weights {
        let Some(tensor) = graph.tensors.get(w.tensor) else {
            c.out.push(PlanViolation::UnknownTensor {
                tensor: w.tensor.to_string(),
            });
            continue;
        };
        if wseen[w.tensor] {
            c.out.push(PlanViolation::Duplicate {
                tensor: tensor.name.clone(),
            });
            continue;
        }
        wseen[w.tensor] = true;
        if tensor.kind != TensorKind::Weight {
            c.out.push(PlanViolation::WrongRegion {
                tensor: tensor.name.clone(),
                kind: tensor.kind,
            });
        }
        if w.bytes != bytes[w.tensor] {
            c.out.push(PlanViolation::WrongBytes {
                tensor: tensor.name.clone(),
                planned: w.bytes,
                actual: bytes[w.tensor],
            });
        }
        let end = w.offset.saturating_add(w.bytes);
        if end > plan.weight_bytes || w.offset.checked_add(w.bytes).is_none() {
            c.out.push(PlanViolation::OutsideRegion {
                tensor: tensor.name.clone(),
                end,
                size: plan.weight_bytes,
            });
        }
        if w.bytes > 0 {
            wspans.push((w.offset, end, w.tensor));
        }
    }
    for (t, tensor) in graph.tensors.iter_enumerated() {
        if tensor.kind == TensorKind::Weight && bytes[t] > 0 && !wseen[t] {
            c.out.push(PlanViolation::Missing {
                tensor: tensor.name.clone(),
                kind: tensor.kind,
                bytes: bytes[t],
            });
        }
    }
    wspans.sort_unstable();
    for w in wspans.windows(2) {
        if let [a, b] = w
            && b.0 < a.1
        {
            c.out.push(PlanViolation::Overlap {
                a: c.tname(a.2),
                b: c.tname(b.2),
                step: 0,
                start: b.0,
                end: a.1.min(b.1),
            });
        }
    }

    crate::verify_workspace::check_workspaces(graph, bindings, plan, &mut c.out);
    if c.out.is_empty() {
        Ok(())
    } else {
        Err(PlanViolations(c.out))
    }
}
