//! The executor: walks the schedule, writing each output's pattern and checking each read,
//! running bodies in their workspaces, and records what it finds in a [`CheckReport`].

use memplan_ir::{Graph, IndexVec, Node, NodeId, OpRule, OpTable, TensorId, TensorKind};
use memplan_planner::AliasKind;

use crate::layout::{Layout, Region, Slot};
use crate::op_effects;

use super::bytes::{K, Mismatch, PatternMemory, seed};
use super::report::{BadView, BodyRun, Cause, CheckReport, Clobber, Trusted, ViewFault};
use super::sampling::{CheckOptions, Sampling};

struct WriteRecord {
    region: Region,
    start: u64,
    end: u64,
    writer: TensorId,
    step: Option<u32>,
    /// The node whose workspace this write is (its `writer` is then a pseudo id).
    workspace: Option<NodeId>,
    /// The node whose in-place update this write is (`None`: the writer's first write).
    update: Option<NodeId>,
}

/// What a tensor's bytes should hold: the pattern of `writer` for the addresses from `at`,
/// as the node `update` left it when a node updated it in place.
#[derive(Clone, Copy)]
struct Expect {
    writer: TensorId,
    at: u64,
    update: Option<NodeId>,
}

/// The salt of the values node `n` writes over a tensor it updates in place: a bijection of
/// the id, never 0, so each update's pattern differs from the tensor's first write.
fn update_salt(n: NodeId) -> u64 {
    seed(TensorId(n.0), 0x7570_6461_7465_0000) | 1
}

struct Checker<'a, M> {
    graph: &'a Graph,
    layout: &'a Layout,
    ops: &'a OpTable,
    mem: &'a mut M,
    opts: CheckOptions,
    salt: u64,
    /// Per tensor: what it holds once written (views: their source's writer).
    expect: IndexVec<TensorId, Option<Expect>>,
    written: IndexVec<TensorId, bool>,
    reported: IndexVec<TensorId, bool>,
    /// Per tensor: the length of `log` when it was last checked whole and held; a later read
    /// re-reads its bytes only if a write since then touched them (bytes change only through
    /// the check's own writes).
    clean_at: IndexVec<TensorId, Option<usize>>,
    log: Vec<WriteRecord>,
    report: CheckReport,
    /// Per tensor: the nodes that update it in place, in node order (the graph's program
    /// order decides which version each reader sees).
    updaters: IndexVec<TensorId, Vec<NodeId>>,
}

impl<'a, M: PatternMemory> Checker<'a, M> {
    fn skipped(&self, slot: &Slot) -> bool {
        self.opts.skip_weights && slot.region != Region::Arena
    }

    fn expect(&self, t: TensorId, slot: &Slot) -> Expect {
        self.expect.get(t).copied().flatten().unwrap_or(Expect {
            writer: t,
            at: slot.offset,
            update: None,
        })
    }

    fn seed_of(&self, e: Expect) -> u64 {
        match e.update {
            None => seed(e.writer, self.salt),
            Some(n) => seed(e.writer, self.salt ^ update_salt(n)),
        }
    }

    /// The update of `t` a read by `reader` must see: the last updater before it in node
    /// order (after the last step, the last one).
    fn update_seen_by(&self, t: TensorId, reader: Option<NodeId>) -> Option<NodeId> {
        let list = self.updaters.get(t)?;
        match reader {
            Some(r) => list.iter().rev().find(|&&m| m < r).copied(),
            None => list.last().copied(),
        }
    }

    fn write(&mut self, t: TensorId, step: Option<u32>) -> Result<(), M::Error> {
        self.write_version(t, step, None)
    }

    /// Writes `t`'s pattern over its bytes: its first write (`update` `None`), or the new
    /// values node `update` gives it in place.
    fn write_version(
        &mut self,
        t: TensorId,
        step: Option<u32>,
        update: Option<NodeId>,
    ) -> Result<(), M::Error> {
        let Some(slot) = self.layout.slot(t) else {
            return Ok(());
        };
        if self.skipped(slot) {
            return Ok(());
        }
        let e = Expect {
            writer: t,
            at: slot.offset,
            update,
        };
        let s = self.seed_of(e);
        // Run by run: a strided Concat part leaves the bytes between its runs alone.
        for (start, end) in slot.runs() {
            self.mem.fill(slot.region, start, end - start, s)?;
        }
        if let Some(w) = self.written.get_mut(t) {
            *w = true;
        }
        if let Some(x) = self.expect.get_mut(t) {
            *x = Some(e);
        }
        if let Some(c) = self.clean_at.get_mut(t) {
            *c = None;
        }
        self.log.push(WriteRecord {
            region: slot.region,
            start: slot.offset,
            end: slot.end(),
            writer: t,
            step,
            workspace: None,
            update,
        });
        self.report.writes += 1;
        self.report.bytes_written = self.report.bytes_written.saturating_add(slot.bytes);
        Ok(())
    }

    /// Checks `t`'s bytes in `[from, to)` (its whole range when `None`).
    fn read(
        &mut self,
        t: TensorId,
        within: Option<(u64, u64)>,
        step: Option<u32>,
        reader: Option<NodeId>,
    ) -> Result<(), M::Error> {
        let Some(slot) = self.layout.slot(t) else {
            self.report.unplaced_reads += 1;
            return Ok(());
        };
        if self.skipped(slot) {
            self.report.weight_reads_skipped += 1;
            return Ok(());
        }
        let whole = within.is_none();
        // Which version an updated tensor must hold depends on the reader: check it anew.
        let writer = self.expect(t, slot).writer;
        let updated = self.updaters.get(writer).is_some_and(|u| !u.is_empty());
        if whole && !updated && self.unchanged_since_checked(t, slot) {
            self.report.reads += 1;
            self.report.reads_unchanged += 1;
            return Ok(());
        }
        let mut e = self.expect(t, slot);
        // An updated tensor must hold the version the graph's order gives this reader; a
        // view of one keeps the version its producer saw (fixed when it was made).
        let now = e.update;
        if e.writer == t && self.updaters.get(t).is_some_and(|u| !u.is_empty()) {
            e.update = self.update_seen_by(t, reader);
        }
        let s = self.seed_of(e);
        let (from, to) = within.unwrap_or((slot.offset, slot.end()));
        let mut bad: Option<Mismatch> = None;
        // Run by run (one for most tensors), each cut to `[from, to)`.
        for (start, end) in slot.runs() {
            let (from, to) = (from.max(start), to.min(end));
            if from >= to {
                continue;
            }
            for (offset, bytes) in self.opts.sampling.ranges(from, to - from) {
                let at = e.at.wrapping_add(offset.wrapping_sub(slot.offset));
                bad = Mismatch::merge(bad, self.mem.verify(slot.region, offset, bytes, s, at)?);
                self.report.bytes_checked = self.report.bytes_checked.saturating_add(bytes);
            }
        }
        self.report.reads += 1;
        let Some(m) = bad else {
            if whole && let Some(c) = self.clean_at.get_mut(t) {
                *c = Some(self.log.len());
            }
            return Ok(());
        };
        if !self.first_report(t) {
            return Ok(());
        }
        let cause = if !self.written.get(e.writer).copied().unwrap_or(false) {
            Cause::NotYetWritten
        } else if e.update != now {
            Cause::UpdateOrder {
                node: e.update.or(now).unwrap_or(NodeId(u32::MAX)),
            }
        } else {
            match self
                .log
                .iter()
                .rev()
                .find(|w| w.region == slot.region && w.start <= m.first && m.first < w.end)
            {
                Some(WriteRecord {
                    workspace: Some(node),
                    step: Some(step),
                    ..
                }) => Cause::Workspace {
                    node: *node,
                    step: *step,
                },
                Some(w) if w.writer != e.writer => Cause::Overwritten {
                    by: w.writer,
                    step: w.step,
                },
                Some(WriteRecord {
                    update: Some(node), ..
                }) if e.writer != t => Cause::UpdatedUnder { node: *node },
                _ => Cause::Unexplained,
            }
        };
        self.report.clobbers.push(Clobber {
            tensor: t,
            writer: e.writer,
            step,
            reader,
            region: slot.region,
            first_bad: m.first,
            bad_bytes: m.count,
            cause,
        });
        Ok(())
    }

    /// Whether `t` was checked whole and held, and no write since touched its bytes.
    fn unchanged_since_checked(&self, t: TensorId, slot: &Slot) -> bool {
        let Some(Some(k)) = self.clean_at.get(t).copied() else {
            return false;
        };
        self.log.get(k..).is_some_and(|since| {
            !since
                .iter()
                .any(|w| w.region == slot.region && w.start < slot.end() && slot.offset < w.end)
        })
    }

    /// Whether `t` has not been reported yet (and marks it reported).
    fn first_report(&mut self, t: TensorId) -> bool {
        match self.reported.get_mut(t) {
            Some(r) if !*r => {
                *r = true;
                true
            }
            _ => false,
        }
    }

    fn custom(&self, node: &Node) -> bool {
        matches!(self.ops.rule(&node.op), OpRule::Custom(_))
    }

    /// Output `j` of `node`, planned as a view: it must be the bytes the op's definition
    /// selects from its source. Sets what it holds: its source's pattern from the selected
    /// address.
    fn view(
        &mut self,
        node_id: NodeId,
        node: &Node,
        j: usize,
        slot: &Slot,
        step: u32,
    ) -> Result<(), M::Error> {
        let layout: &'a Layout = self.layout;
        let t = slot.tensor;
        let parent = slot.alias_of.and_then(|p| Some((p, layout.slot(p)?)));
        let trusted = self.custom(node) && !self.opts.strict;
        let sel = op_effects::view_selection(self.graph, node, j, layout.bindings());
        let (source, source_slot, offset, bytes) = match (sel, parent) {
            (_, _) if trusted => {
                self.report.trusted.push(Trusted {
                    tensor: t,
                    node: node_id,
                    alias: AliasKind::View,
                });
                let Some((p, ps)) = parent else { return Ok(()) };
                (p, ps, slot.offset.wrapping_sub(ps.offset), slot.bytes)
            }
            (Some(sel), _) => {
                let Some(src) = node.inputs.get(sel.input).copied().flatten() else {
                    return self.bad_view(t, node_id, step, ViewFault::NotAView);
                };
                if slot.alias_of != Some(src) {
                    return self.bad_view(
                        t,
                        node_id,
                        step,
                        ViewFault::WrongSource { expected: src },
                    );
                }
                let Some(ss) = layout.slot(src) else {
                    return self.bad_view(t, node_id, step, ViewFault::NotAView);
                };
                // A strided Concat part is runs, no range for a view to select from.
                if ss.rows > 1 {
                    return self.bad_view(t, node_id, step, ViewFault::NotAView);
                }
                (src, ss, sel.offset, sel.bytes)
            }
            (None, _) => return self.bad_view(t, node_id, step, ViewFault::NotAView),
        };
        let src = self.expect(source, source_slot);
        // The view holds the version of its source that the graph's order gives its
        // producer, for good: an update after it must not reach its bytes.
        let update =
            if src.writer == source && self.updaters.get(source).is_some_and(|u| !u.is_empty()) {
                self.update_seen_by(source, Some(node_id))
            } else {
                src.update
            };
        let e = Expect {
            writer: src.writer,
            at: src.at.wrapping_add(offset),
            update,
        };
        if let Some(x) = self.expect.get_mut(t) {
            *x = Some(e);
        }
        if let Some(c) = self.clean_at.get_mut(t) {
            *c = None;
        }
        let expected_offset = source_slot.offset.wrapping_add(offset);
        let in_place = slot.region == source_slot.region
            && slot.offset == expected_offset
            && slot.bytes == bytes;
        if !in_place && !trusted {
            // Not where the selected bytes are: say so (its bytes are then wrong too, unless
            // by accident; later reads of it are not reported again).
            self.bad_view(
                t,
                node_id,
                step,
                ViewFault::WrongPlace {
                    expected_offset,
                    expected_bytes: bytes,
                },
            )?;
        }
        // A view in place holds bytes its source's read just checked: nothing to re-read.
        Ok(())
    }

    fn bad_view(
        &mut self,
        t: TensorId,
        node: NodeId,
        step: u32,
        fault: ViewFault,
    ) -> Result<(), M::Error> {
        if self.first_report(t) {
            self.report.bad_views.push(BadView {
                tensor: t,
                node,
                step,
                fault,
            });
        }
        Ok(())
    }

    /// Whether input `x` of `node` may have been overwritten by the node's own outputs: an
    /// output planned in place over exactly its bytes, for an op that computes each output
    /// element from the same input element alone (or, trusted, a custom op).
    fn legal_in_place_source(&mut self, node_id: NodeId, node: &Node, x: TensorId) -> bool {
        let layout: &'a Layout = self.layout;
        let (Some(&y), Some(xs)) = (node.outputs.first(), layout.slot(x)) else {
            return false;
        };
        let Some(ys) = layout.slot(y) else {
            return false;
        };
        if ys.alias != Some(AliasKind::InPlace) || ys.alias_of != Some(x) {
            return false;
        }
        if self.custom(node) && !self.opts.strict {
            self.report.trusted.push(Trusted {
                tensor: y,
                node: node_id,
                alias: AliasKind::InPlace,
            });
            return true;
        }
        let same_bytes = (ys.region, ys.offset, ys.bytes) == (xs.region, xs.offset, xs.bytes)
            && xs.rows == 1
            && ys.rows == 1;
        same_bytes
            && node.inputs.iter().enumerate().any(|(i, &input)| {
                input == Some(x)
                    && op_effects::in_place_allowed(self.graph, node, i, layout.bindings())
            })
    }

    /// The inputs of `node` planned as parts of its output `out` (Concat elision) that sit
    /// exactly at the slice the op's definition gives them, pushed onto `parts`; a part
    /// anywhere else is reported as a bad view.
    fn legal_parts(
        &mut self,
        node_id: NodeId,
        node: &Node,
        out: &Slot,
        step: u32,
        parts: &mut Vec<TensorId>,
    ) -> Result<(), M::Error> {
        let layout: &'a Layout = self.layout;
        for (i, x) in node.inputs.iter().enumerate() {
            let Some(x) = *x else { continue };
            let Some(xs) = layout.slot(x) else { continue };
            if xs.alias != Some(AliasKind::Part) || xs.alias_of != Some(out.tensor) {
                continue;
            }
            if self.custom(node) && !self.opts.strict {
                self.report.trusted.push(Trusted {
                    tensor: x,
                    node: node_id,
                    alias: AliasKind::Part,
                });
                parts.push(x);
                continue;
            }
            match op_effects::concat_slot(self.graph, node, i, layout.bindings()) {
                Some(slot)
                    if xs.region == out.region
                        && out.offset.checked_add(slot.offset) == Some(xs.offset)
                        && xs.rows == slot.rows
                        && (slot.rows == 1 || xs.stride == slot.stride)
                        && slot.bytes.checked_mul(slot.rows) == Some(xs.bytes) =>
                {
                    parts.push(x);
                }
                Some(slot) => self.bad_view(
                    x,
                    node_id,
                    step,
                    ViewFault::WrongPlace {
                        expected_offset: out.offset.wrapping_add(slot.offset),
                        expected_bytes: slot.bytes.saturating_mul(slot.rows),
                    },
                )?,
                None => self.bad_view(x, node_id, step, ViewFault::NotAView)?,
            }
        }
        Ok(())
    }

    /// After `out`'s write over its legal `parts`: whatever held a part's pattern holds
    /// `out`'s now (same addresses, so the same place in the pattern).
    fn adopt(&mut self, parts: &[TensorId], out: TensorId) {
        if parts.is_empty() {
            return;
        }
        for (e, c) in self
            .expect
            .raw_mut()
            .iter_mut()
            .zip(self.clean_at.raw_mut())
        {
            if let Some(e) = e
                && parts.contains(&e.writer)
            {
                e.writer = out;
                *c = None;
            }
        }
    }

    /// Fills `node`'s workspace with a pattern of its own, as its bodies would scribble on it.
    fn scratch(
        &mut self,
        node: NodeId,
        offset: u64,
        bytes: u64,
        step: u32,
    ) -> Result<(), M::Error> {
        // A pseudo writer id no tensor has (ids count up from 0), so the pattern is its own.
        let writer = TensorId(u32::MAX - node.0);
        self.mem
            .fill(Region::Arena, offset, bytes, seed(writer, self.salt))?;
        self.log.push(WriteRecord {
            region: Region::Arena,
            start: offset,
            end: offset.saturating_add(bytes),
            writer,
            step: Some(step),
            workspace: Some(node),
            update: None,
        });
        self.report.writes += 1;
        self.report.bytes_written = self.report.bytes_written.saturating_add(bytes);
        Ok(())
    }

    /// Runs the plan of each of `node`'s bodies inside its workspace `(offset, bytes)` (on
    /// the workspace's scratch pattern): the body's arena from the workspace's first byte,
    /// its weights from its `weights_at`, with a salt of their own. A body's check is its
    /// own report; a byte it would touch outside the workspace is reported, not touched.
    fn run_bodies(&mut self, node_id: NodeId, node: &Node, workspace: (u64, u64), step: u32) {
        let layout: &'a Layout = self.layout;
        for (k, body_layout) in layout.bodies(node_id).iter().enumerate() {
            let Some(body) = node.bodies.iter().find(|b| b.attr == body_layout.attr) else {
                continue;
            };
            let salt = seed(
                TensorId(u32::MAX - node_id.0),
                self.salt ^ (k as u64).wrapping_add(1).wrapping_mul(K),
            );
            let opts = CheckOptions {
                skip_weights: false,
                salt: Some(salt),
                ..self.opts
            };
            let mut window = Window {
                inner: &mut *self.mem,
                base: workspace.0,
                len: workspace.1,
                weights_at: body_layout.weights_at,
                outside: None,
            };
            let run = run_check_with_ops(
                &body.graph,
                &body_layout.layout,
                &mut window,
                opts,
                self.ops,
            );
            let outside = window.outside;
            let (report, failed) = match run {
                Ok(r) => (r, None),
                Err(e) => (CheckReport::default(), Some(e.to_string())),
            };
            self.report.writes = self.report.writes.saturating_add(report.writes);
            self.report.bytes_written = self
                .report
                .bytes_written
                .saturating_add(report.bytes_written);
            self.report.reads = self.report.reads.saturating_add(report.reads);
            self.report.bytes_checked = self
                .report
                .bytes_checked
                .saturating_add(report.bytes_checked);
            self.report.bodies.push(BodyRun {
                node: node_id,
                attr: body_layout.attr.clone(),
                step,
                report,
                outside,
                failed,
            });
        }
    }

    /// One step: check the inputs, write the workspace and the outputs (views: check they are what the op
    /// selects), then re-check every input that is not a legal in-place source where an
    /// output of this step was written over it.
    fn step(
        &mut self,
        step: u32,
        node_id: NodeId,
        node: &Node,
        inputs: &mut Vec<TensorId>,
    ) -> Result<(), M::Error> {
        let layout: &'a Layout = self.layout;
        inputs.clear();
        // Shape and Size read no bytes.
        inputs.extend(
            node.inputs
                .iter()
                .enumerate()
                .filter(|&(i, _)| op_effects::reads_bytes(node, i))
                .filter_map(|(_, t)| *t)
                .chain(node.implicit_inputs.iter().copied()),
        );
        // What its bodies read of this graph, found by name at any depth (ONNX resolves a
        // body's names in the scopes around it), whatever the node's implicit inputs say.
        captured_by_name(self.graph, node, inputs);
        inputs.sort_unstable();
        inputs.dedup();
        for &t in inputs.iter() {
            self.read(t, None, Some(step), Some(node_id))?;
        }
        if crate::fused_effects::needs_scratch(&node.op) && layout.workspace(node_id).is_none() {
            self.report.without_scratch.push((node_id, step));
        }
        if let Some((offset, bytes)) = layout.workspace(node_id) {
            self.scratch(node_id, offset, bytes, step)?;
            self.run_bodies(node_id, node, (offset, bytes), step);
            // Scratch destroys whatever it covers: every input under it is re-checked, an
            // in-place source too.
            for &x in inputs.iter() {
                let Some(xs) = layout.slot(x) else { continue };
                let end = offset.saturating_add(bytes);
                if xs.region == Region::Arena && offset < xs.end() && xs.offset < end {
                    let within = (offset.max(xs.offset), end.min(xs.end()));
                    self.read(x, Some(within), Some(step), Some(node_id))?;
                }
            }
        }
        let first_write = self.log.len();
        let mut parts: Vec<TensorId> = Vec::new();
        for (j, &t) in node.outputs.iter().enumerate() {
            match layout.slot(t) {
                Some(slot) if slot.alias == Some(AliasKind::View) => {
                    self.view(node_id, node, j, slot, step)?;
                }
                Some(slot) => {
                    let first_part = parts.len();
                    self.legal_parts(node_id, node, slot, step, &mut parts)?;
                    self.write(t, Some(step))?;
                    self.adopt(&parts[first_part..], t);
                }
                None => self.write(t, Some(step))?,
            }
        }
        for &x in inputs.iter() {
            let Some(xs) = layout.slot(x) else {
                continue;
            };
            let hits = self.writes_over(first_write, xs);
            if hits.is_empty() || parts.contains(&x) || self.legal_in_place_source(node_id, node, x)
            {
                continue;
            }
            for within in hits {
                self.read(x, Some(within), Some(step), Some(node_id))?;
            }
        }
        self.apply_updates(step, node_id, node, inputs)
    }

    /// The byte ranges of `slot` that the writes logged since `first_write` covered.
    fn writes_over(&self, first_write: usize, slot: &Slot) -> Vec<(u64, u64)> {
        self.log[first_write..]
            .iter()
            .filter(|w| w.region == slot.region && w.start < slot.end() && slot.offset < w.end)
            .map(|w| (w.start.max(slot.offset), w.end.min(slot.end())))
            .collect()
    }

    /// The in-place updates `node` makes (see [`op_effects::updated_values`]: its own, and
    /// what its bodies update of the values they capture or are handed, at any depth): each
    /// updated tensor gets the pattern of this update; every other input whose bytes it covers is checked
    /// again.
    fn apply_updates(
        &mut self,
        step: u32,
        node_id: NodeId,
        node: &Node,
        inputs: &[TensorId],
    ) -> Result<(), M::Error> {
        let layout: &'a Layout = self.layout;
        let updated = op_effects::updated_values(self.graph, node);
        if updated.is_empty() {
            return Ok(());
        }
        let first_write = self.log.len();
        for &t in &updated {
            self.write_version(t, Some(step), Some(node_id))?;
        }
        for &x in inputs {
            if updated.contains(&x) {
                continue;
            }
            let Some(xs) = layout.slot(x) else { continue };
            let hits = self.writes_over(first_write, xs);
            for within in hits {
                self.read(x, Some(within), Some(step), Some(node_id))?;
            }
        }
        Ok(())
    }
}

/// Appends the tensors of `graph` that `node`'s bodies read, at any depth: body inputs
/// named like a tensor of `graph`.
fn captured_by_name(graph: &Graph, node: &Node, out: &mut Vec<TensorId>) {
    for body in &node.bodies {
        for t in body.graph.tensors().iter() {
            if t.kind == TensorKind::Input
                && let Some(id) = graph.find_tensor(&t.name)
            {
                out.push(id);
            }
        }
        for inner in body.graph.nodes().iter() {
            captured_by_name(graph, inner, out);
        }
    }
}

/// A memory failure inside a body run, its cause kept as text (bodies nest to any depth on
/// one memory type, so the backend's own error type cannot be named).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BodyMemoryError(String);

/// [`PatternMemory`] with its error as text: what a body run writes through.
trait ErasedMemory {
    fn fill(
        &mut self,
        region: Region,
        offset: u64,
        bytes: u64,
        seed: u64,
    ) -> Result<(), BodyMemoryError>;
    fn verify(
        &mut self,
        region: Region,
        offset: u64,
        bytes: u64,
        seed: u64,
        pattern_at: u64,
    ) -> Result<Option<Mismatch>, BodyMemoryError>;
}

impl<M: PatternMemory> ErasedMemory for M {
    fn fill(
        &mut self,
        region: Region,
        offset: u64,
        bytes: u64,
        seed: u64,
    ) -> Result<(), BodyMemoryError> {
        PatternMemory::fill(self, region, offset, bytes, seed)
            .map_err(|e| BodyMemoryError(e.to_string()))
    }

    fn verify(
        &mut self,
        region: Region,
        offset: u64,
        bytes: u64,
        seed: u64,
        pattern_at: u64,
    ) -> Result<Option<Mismatch>, BodyMemoryError> {
        PatternMemory::verify(self, region, offset, bytes, seed, pattern_at)
            .map_err(|e| BodyMemoryError(e.to_string()))
    }
}

/// A node's workspace as the memory of a body's plan: the body's arena region is the
/// workspace from its first byte, its weight region the workspace from `weights_at`. A range
/// outside the workspace is recorded in `outside` and left alone.
struct Window<'m> {
    inner: &'m mut dyn ErasedMemory,
    base: u64,
    len: u64,
    weights_at: u64,
    outside: Option<(u64, u64)>,
}

impl Window<'_> {
    /// The arena range of a body range, if it lies inside the workspace.
    fn place(&mut self, region: Region, offset: u64, bytes: u64) -> Option<u64> {
        let start = match region {
            Region::Arena => Some(offset),
            Region::Weights => self.weights_at.checked_add(offset),
            Region::Half => None,
        };
        let end = start.and_then(|s| s.checked_add(bytes));
        match (start, end) {
            (Some(s), Some(e)) if e <= self.len => self.base.checked_add(s),
            _ => {
                let s = self.base.saturating_add(start.unwrap_or(u64::MAX));
                self.outside.get_or_insert((s, s.saturating_add(bytes)));
                None
            }
        }
    }
}

impl PatternMemory for Window<'_> {
    type Error = BodyMemoryError;

    fn next_salt(&mut self) -> u64 {
        // Body runs are always given their salt.
        0
    }

    fn fill(
        &mut self,
        region: Region,
        offset: u64,
        bytes: u64,
        seed: u64,
    ) -> Result<(), BodyMemoryError> {
        match self.place(region, offset, bytes) {
            Some(at) => self.inner.fill(Region::Arena, at, bytes, seed),
            None => Ok(()),
        }
    }

    fn verify(
        &mut self,
        region: Region,
        offset: u64,
        bytes: u64,
        seed: u64,
        pattern_at: u64,
    ) -> Result<Option<Mismatch>, BodyMemoryError> {
        match self.place(region, offset, bytes) {
            // Patterns are written for the arena's addresses: the address the pattern is
            // read from moves by as much as the range does.
            Some(at) => Ok(self
                .inner
                .verify(
                    Region::Arena,
                    at,
                    bytes,
                    seed,
                    pattern_at.wrapping_add(at.wrapping_sub(offset)),
                )?
                .map(|m| m.moved(at, offset))),
            None => Ok(None),
        }
    }
}

/// Runs the pattern check of `layout` (made for `graph`) on `mem`, with the default op table
/// (see [`run_check_with_ops`]).
pub fn run_check<M: PatternMemory>(
    graph: &Graph,
    layout: &Layout,
    mem: &mut M,
    opts: CheckOptions,
) -> Result<CheckReport, M::Error> {
    run_check_with_ops(graph, layout, mem, opts, &OpTable::default())
}

/// Runs the pattern check of `layout` (made for `graph`) on `mem`. An `Err` is a memory
/// failure; clobbers and refused views are in the report. `ops` serves only to know which
/// ops have a custom memory rule (their aliases are trusted unless
/// [`CheckOptions::strict`]); what a view selects and which in-place writes are legal come
/// from [`crate::op_effects`], never from the planner.
pub fn run_check_with_ops<M: PatternMemory>(
    graph: &Graph,
    layout: &Layout,
    mem: &mut M,
    opts: CheckOptions,
    ops: &OpTable,
) -> Result<CheckReport, M::Error> {
    run_check_observed(graph, layout, mem, opts, ops, &mut |_, _| {})
}

/// [`run_check_with_ops`], calling `on_step(done, total)` after each step (for a progress
/// display).
pub fn run_check_observed<M: PatternMemory>(
    graph: &Graph,
    layout: &Layout,
    mem: &mut M,
    opts: CheckOptions,
    ops: &OpTable,
    on_step: &mut dyn FnMut(u32, u32),
) -> Result<CheckReport, M::Error> {
    let n = graph.tensors().len();
    let total = u32::try_from(layout.schedule().len()).unwrap_or(u32::MAX);
    let salt = match opts.salt {
        Some(s) => s,
        None => mem.next_salt(),
    };
    let mut c = Checker {
        graph,
        layout,
        ops,
        mem,
        opts,
        salt,
        expect: IndexVec::from_elem(None, n),
        written: IndexVec::from_elem(false, n),
        reported: IndexVec::from_elem(false, n),
        clean_at: IndexVec::from_elem(None, n),
        log: Vec::new(),
        report: CheckReport {
            sampled: opts.sampling != Sampling::Full,
            ..CheckReport::default()
        },
        updaters: IndexVec::from_elem(Vec::new(), n),
    };
    for (m, node) in graph.nodes().iter_enumerated() {
        for t in op_effects::updated_values(graph, node) {
            if let Some(list) = c.updaters.get_mut(t) {
                list.push(m);
            }
        }
    }
    let producers = graph.producers();
    for (t, tensor) in graph.tensors().iter_enumerated() {
        // Training state a node writes gets its pattern then; fed state keeps the caller's.
        let fed_state = tensor.kind == TensorKind::State && producers[t].is_none();
        if matches!(tensor.kind, TensorKind::Weight | TensorKind::Input) || fed_state {
            c.write(t, None)?;
        }
    }
    let mut inputs: Vec<TensorId> = Vec::new();
    for (step, &node_id) in layout.schedule().iter().enumerate() {
        let step = u32::try_from(step).unwrap_or(u32::MAX);
        let Some(node) = graph.nodes().get(node_id) else {
            continue;
        };
        c.step(step, node_id, node, &mut inputs)?;
        c.report.steps = step.saturating_add(1);
        on_step(c.report.steps, total);
    }
    for (t, tensor) in graph.tensors().iter_enumerated() {
        // The caller reads outputs, and inputs and state it had updated, after the last step.
        let updated = matches!(tensor.kind, TensorKind::Input | TensorKind::State)
            && c.updaters.get(t).is_some_and(|u| !u.is_empty());
        if tensor.kind == TensorKind::Output || updated {
            c.read(t, None, None, None)?;
        }
    }
    Ok(c.report)
}

#[cfg(test)]
mod check_tests {
    use super::*;
    use crate::host::{CheckArena, HostPool};
    use crate::layout::LayoutOptions;
    use crate::pool::PoolLimits;
    use crate::test_util::{chain_graph, chain_plan};
    use memplan_ir::{DType, GraphBuilder};
    use memplan_planner::{Alias, Plan, PlanOptions, PlannedBuffer, plan_graph};

    /// Lays `plan` out without the planner's verifier (the mutants below are plans it
    /// rejects) and runs the check on a fresh host arena.
    fn check_with(plan: &Plan, g: &Graph, opts: CheckOptions) -> CheckReport {
        let layout = Layout::new_unverified(g, plan, &LayoutOptions::default()).unwrap();
        let mut arena = CheckArena::new(layout.clone()).unwrap();
        run_check(g, &layout, &mut arena, opts).unwrap()
    }

    fn check(plan: &Plan, g: &Graph) -> CheckReport {
        check_with(plan, g, CheckOptions::default())
    }

    fn buffer(plan: &mut Plan, t: TensorId) -> &mut PlannedBuffer {
        plan.buffers.iter_mut().find(|b| b.tensor == t).unwrap()
    }

    /// Makes `t` an alias of `parent` of this kind, `delta` bytes into it.
    fn claim(plan: &mut Plan, t: TensorId, parent: TensorId, kind: AliasKind, delta: u64) {
        let at = buffer(plan, parent).offset + delta;
        let b = buffer(plan, t);
        b.offset = at;
        b.alias = Some(match kind {
            AliasKind::View => Alias::View {
                of: parent,
                offset: delta,
            },
            AliasKind::InPlace => Alias::InPlace { of: parent },
            AliasKind::Part => Alias::Part {
                of: parent,
                offset: delta,
            },
        });
    }

    #[test]
    fn correct_plan_is_clean() {
        let (g, ids) = chain_graph();
        let r = check(&chain_plan(&g, &ids), &g);
        assert!(r.is_clean(), "{:?}", r.clobbers);
        assert_eq!(r.steps, 4);
        // w, w2, k, x before step 0; a, b, y by nodes (v is a view: no write).
        assert_eq!(r.writes, 7);
        assert_eq!(r.bytes_written, 64 * 6 + 16);
        // Reads: x,w | a,k | v,w2 | b,a | final y; y is written over x, which step 3 does
        // not read: no re-check. a, read again at step 3, was untouched since step 1.
        assert_eq!(r.reads, 9);
        assert_eq!(r.reads_unchanged, 1);
        assert_eq!(r.bytes_checked, 64 * 7 + 16);
        assert!(r.trusted.is_empty());
    }

    #[test]
    fn overlapping_live_buffers_are_caught() {
        let (g, ids) = chain_graph();
        let mut plan = chain_plan(&g, &ids);
        // b = Mul(v, w2) is written at step 2 over a, which step 3 still reads, and over its
        // own input v (a view of a): the re-check after the write finds v changed at step 2,
        // then step 3 finds a.
        buffer(&mut plan, ids.b).offset = 0;
        let r = check(&plan, &g);
        assert_eq!(r.clobbers.len(), 2, "{:?}", r.clobbers);
        let c = &r.clobbers[0];
        assert_eq!(
            (c.tensor, c.writer, c.step, c.cause),
            (
                ids.v,
                ids.a,
                Some(2),
                Cause::Overwritten {
                    by: ids.b,
                    step: Some(2)
                }
            )
        );
        let c = &r.clobbers[1];
        assert_eq!(
            (c.tensor, c.writer, c.step, c.reader),
            (ids.a, ids.a, Some(3), Some(NodeId(3)))
        );
        assert_eq!(
            c.cause,
            Cause::Overwritten {
                by: ids.b,
                step: Some(2)
            }
        );
        assert_eq!((c.region, c.first_bad), (Region::Arena, 0));
        let lines = r.render_clobbers(&g);
        assert!(
            lines[1].contains("t4 `t4_Add`") && lines[1].contains("overwritten by t6"),
            "{}",
            lines[1]
        );
    }

    #[test]
    fn check_on_host_lays_out_and_runs() {
        let (g, ids) = chain_graph();
        let r = crate::check_on_host(&g, &chain_plan(&g, &ids), CheckOptions::default()).unwrap();
        assert!(r.is_clean());
        let mut bad = chain_plan(&g, &ids);
        bad.alignment = 3;
        assert!(matches!(
            crate::check_on_host(&g, &bad, CheckOptions::default()),
            Err(crate::CheckError::Layout(crate::LayoutError::BadAlignment(
                3
            )))
        ));
    }

    #[test]
    fn reading_before_writing_is_caught() {
        let (g, ids) = chain_graph();
        let mut plan = chain_plan(&g, &ids);
        // Run y = Add(b, a) before b = Mul(v, w2): b is read before anything wrote it.
        plan.schedule = vec![NodeId(0), NodeId(1), NodeId(3), NodeId(2)];
        let r = check(&plan, &g);
        let c = r.clobbers.iter().find(|c| c.tensor == ids.b).unwrap();
        assert_eq!((c.step, c.cause), (Some(2), Cause::NotYetWritten));
    }

    /// A read before its write on memory that an earlier run left
    /// holding the same tensor ids' patterns. Unsalted patterns (one per tensor id and
    /// address) matched the stale bytes and passed.
    #[test]
    fn stale_patterns_from_an_earlier_run_or_arena_are_caught() {
        let (g, ids) = chain_graph();
        let good = chain_plan(&g, &ids);
        let mut bad = good.clone();
        bad.schedule = vec![NodeId(0), NodeId(1), NodeId(3), NodeId(2)];
        let opts = LayoutOptions::default();
        let layout = Layout::new(&g, &good, &opts).unwrap();
        let bad_layout = Layout::new_unverified(&g, &bad, &opts).unwrap();
        let stale = |r: &CheckReport| r.clobbers.iter().any(|c| c.tensor == ids.b);

        // The same arena, run again.
        let mut arena = CheckArena::new(layout.clone()).unwrap();
        assert!(
            run_check(&g, &layout, &mut arena, CheckOptions::default())
                .unwrap()
                .is_clean()
        );
        let r = run_check(&g, &bad_layout, &mut arena, CheckOptions::default()).unwrap();
        assert!(stale(&r), "a second run on one arena: {:?}", r.clobbers);

        // A new arena on the pooled buffers of the first.
        let mut pool = HostPool::new(PoolLimits::default());
        let mut first = CheckArena::from_pool(layout.clone(), &mut pool).unwrap();
        assert!(
            run_check(&g, &layout, &mut first, CheckOptions::default())
                .unwrap()
                .is_clean()
        );
        first.release(&mut pool);
        let mut second = CheckArena::from_pool(bad_layout.clone(), &mut pool).unwrap();
        assert!(pool.stats().hits >= 1, "the arena reuses pooled memory");
        let r = run_check(&g, &bad_layout, &mut second, CheckOptions::default()).unwrap();
        assert!(stale(&r), "a pooled arena: {:?}", r.clobbers);

        // With one salt for both runs the stale bytes would pass: the salt is what catches
        // them.
        let mut arena = CheckArena::new(layout.clone()).unwrap();
        let fixed = CheckOptions {
            salt: Some(7),
            ..CheckOptions::default()
        };
        assert!(
            run_check(&g, &layout, &mut arena, fixed)
                .unwrap()
                .is_clean()
        );
        assert!(!stale(
            &run_check(&g, &bad_layout, &mut arena, fixed).unwrap()
        ));
    }

    #[test]
    fn sampled_check_counts_fewer_bytes() {
        let (g, ids) = chain_graph();
        let plan = chain_plan(&g, &ids);
        let r = check_with(
            &plan,
            &g,
            CheckOptions {
                sampling: Sampling::Sampled {
                    block: 8,
                    stride: 32,
                },
                ..CheckOptions::default()
            },
        );
        assert!(r.is_clean() && r.sampled);
        assert!(r.bytes_checked < 64 * 8 + 16);
    }

    #[test]
    fn skipping_weights_touches_only_the_arena() {
        let (g, ids) = chain_graph();
        let r = check_with(
            &chain_plan(&g, &ids),
            &g,
            CheckOptions {
                skip_weights: true,
                ..CheckOptions::default()
            },
        );
        assert!(r.is_clean());
        assert_eq!(r.writes, 4, "x, a, b, y");
        assert_eq!(r.weight_reads_skipped, 3, "w, k, w2");
    }

    /// `x -> [Relu] r -> [Transpose] t -> [MatMul with w] m -> [Reshape] v -> [Add v, r] y`,
    /// f32[4, 4] (64 bytes), planned without aliases: every buffer of its own.
    fn kernel_graph() -> (Graph, [TensorId; 7]) {
        let mut b = GraphBuilder::new("kernels");
        let x = b.input("x", DType::F32, [4, 4]);
        let w = b.weight("w", DType::F32, [4, 4]);
        let shape = b.int_constant("shape", &[16]);
        let r = b.op("Relu", &[x], DType::F32, [4, 4]);
        let t = b.op("Transpose", &[r], DType::F32, [4, 4]);
        let m = b.op("MatMul", &[t, w], DType::F32, [4, 4]);
        let v = b.op("Reshape", &[m, shape], DType::F32, [16]);
        let r2 = b.op("Relu", &[r], DType::F32, [4, 4]);
        let y = b.op("Add", &[v, r2], DType::F32, [16]);
        b.mark_output(y);
        (b.build().unwrap(), [x, r, t, m, v, r2, y])
    }

    fn kernel_plan(g: &Graph) -> Plan {
        let plan = plan_graph(g, &PlanOptions::default().without_aliasing()).unwrap();
        assert!(
            crate::check_on_host(g, &plan, CheckOptions::default())
                .unwrap()
                .is_clean()
        );
        plan
    }

    /// Mutant: `t = Transpose(r)` written over its own input at the same step, claimed as
    /// in-place. The verifier refuses it; the check, which knows only the ONNX definition,
    /// finds `r` changed by its own reader's write.
    #[test]
    fn a_transpose_written_over_its_input_is_caught() {
        let (g, [_, r, t, ..]) = kernel_graph();
        let mut plan = kernel_plan(&g);
        claim(&mut plan, t, r, AliasKind::InPlace, 0);
        assert!(Layout::new(&g, &plan, &LayoutOptions::default()).is_err());
        let rep = check(&plan, &g);
        let c = rep
            .clobbers
            .iter()
            .find(|c| c.tensor == r)
            .expect("r clobbered");
        assert_eq!(
            c.cause,
            Cause::Overwritten {
                by: t,
                step: c.step
            }
        );
        // Unclaimed, the same placement is caught the same way.
        let tb = buffer(&mut plan, t);
        tb.alias = None;
        assert!(check(&plan, &g).clobbers.iter().any(|c| c.tensor == r));
    }

    /// Legal in-place writes (elementwise ops over inputs read by nobody after) pass.
    #[test]
    fn legal_in_place_writes_pass() {
        let mut b = GraphBuilder::new("inplace");
        let x = b.input("x", DType::F32, [16]);
        let a = b.op("Exp", &[x], DType::F32, [16]);
        let r = b.op("Relu", &[a], DType::F32, [16]);
        let y = b.op("Neg", &[r], DType::F32, [16]);
        b.mark_output(y);
        let g = b.build().unwrap();
        let plan = plan_graph(&g, &PlanOptions::default()).unwrap();
        assert!(
            plan.buffers
                .iter()
                .any(|b| b.alias_kind() == Some(AliasKind::InPlace))
        );
        let rep = check(&plan, &g);
        assert!(rep.is_clean(), "{:?}", rep.render_clobbers(&g));
    }

    /// Mutant: the Reshape view `v` at a wrong offset inside its source `m`'s range.
    #[test]
    fn a_view_at_a_wrong_offset_is_caught() {
        let (g, [.., m, v, _, _]) = kernel_graph();
        let mut plan = kernel_plan(&g);
        // 16 bytes into m (and 48 long, to stay inside it); the op selects m's 64 bytes.
        let mo = buffer(&mut plan, m).offset;
        claim(&mut plan, v, m, AliasKind::View, 16);
        buffer(&mut plan, v).bytes = 48;
        let rep = check(&plan, &g);
        let bad = rep
            .bad_views
            .iter()
            .find(|b| b.tensor == v)
            .expect("v refused");
        assert_eq!(
            bad.fault,
            ViewFault::WrongPlace {
                expected_offset: mo,
                expected_bytes: 64
            }
        );
        assert!(!rep.is_clean());
        assert!(
            rep.render_clobbers(&g)
                .iter()
                .any(|l| l.contains("does not hold the bytes"))
        );
    }

    /// Mutant: a MatMul output claimed as a view of its first input.
    #[test]
    fn a_matmul_claimed_as_a_view_is_caught() {
        let (g, [_, _, t, m, ..]) = kernel_graph();
        let mut plan = kernel_plan(&g);
        claim(&mut plan, m, t, AliasKind::View, 0);
        let rep = check(&plan, &g);
        let bad = rep
            .bad_views
            .iter()
            .find(|b| b.tensor == m)
            .expect("m refused");
        assert_eq!(bad.fault, ViewFault::NotAView);
    }

    /// A custom op's alias is trusted, not verified, unless strict.
    #[test]
    fn custom_ops_are_trusted_unless_strict() {
        let (g, [_, _, t, m, ..]) = kernel_graph();
        let mut plan = kernel_plan(&g);
        claim(&mut plan, m, t, AliasKind::View, 0);
        let layout = Layout::new_unverified(&g, &plan, &LayoutOptions::default()).unwrap();
        let mut ops = OpTable::default();
        ops.insert(
            "MatMul",
            OpRule::Custom(std::sync::Arc::new(|_, n, _| {
                vec![
                    memplan_ir::MemorySemantics::View {
                        input: 0,
                        offset: 0
                    };
                    n.outputs.len()
                ]
            })),
        );
        let mut arena = CheckArena::new(layout.clone()).unwrap();
        let rep =
            run_check_with_ops(&g, &layout, &mut arena, CheckOptions::default(), &ops).unwrap();
        // (Its bytes may still be clobbered later: the plan was made without this alias.)
        assert!(rep.bad_views.is_empty(), "{:?}", rep.bad_views);
        assert_eq!(rep.trusted.len(), 1);
        assert!(rep.render_trusted(&g)[0].contains("trusted, not verified"));
        let strict = CheckOptions {
            strict: true,
            ..CheckOptions::default()
        };
        let rep = run_check_with_ops(&g, &layout, &mut arena, strict, &ops).unwrap();
        assert!(rep.bad_views.iter().any(|b| b.tensor == m));
    }

    /// Every mutant of a hand-made graph's valid plan that makes one output a view or an
    /// in-place write of an input its op does not allow (9 of them: a Relu, a Transpose, a
    /// MatMul and an Add claimed as views, a Transpose, a MatMul and a Reshape claimed as
    /// in-place writes) is refused.
    #[test]
    fn every_illegal_alias_mutant_is_refused() {
        let (g, _) = kernel_graph();
        let plan = kernel_plan(&g);
        let mut passed = Vec::new();
        let mut built = 0;
        for node in g.nodes().iter() {
            let y = node.outputs[0];
            for (i, x) in node.present_inputs().enumerate() {
                let legal_view = node.op == "Reshape" && i == 0;
                let legal_in_place = node.op == "Relu" || node.op == "Add";
                for kind in [AliasKind::View, AliasKind::InPlace, AliasKind::Part] {
                    let legal = match kind {
                        AliasKind::View => legal_view,
                        AliasKind::InPlace => legal_in_place,
                        // No Concat here: a part of anything is illegal.
                        AliasKind::Part => false,
                    };
                    if legal || g.tensors()[x].kind == TensorKind::Weight {
                        continue;
                    }
                    let mut bad = plan.clone();
                    claim(&mut bad, y, x, kind, 0);
                    built += 1;
                    if check(&bad, &g).is_clean() {
                        passed.push(format!("{} {kind:?} of {x}", node.op));
                    }
                }
            }
        }
        assert_eq!(built, 16);
        assert!(passed.is_empty(), "mutants that passed: {passed:?}");
    }
}
