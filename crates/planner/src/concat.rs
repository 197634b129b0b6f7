//! Concat elision: producers write straight into their slice of a Concat's output, so the
//! Concat's inputs need no storage of their own.
//!
//! An input may become a *part* of the output when its slice of each row of the output (the
//! output's elements before the Concat axis index its rows) starts and ends on a byte, and it
//! is an arena activation that appears once among the Concat's inputs, no other Concat reads,
//! no Concat produces, and the base aliasing leaves a storage root of its own (not a view,
//! not written in place over something else). The other inputs stay copies. With one row
//! (every dimension before the axis 1, as at batch 1 in NCHW) the slice is one contiguous
//! range; with several (batch 2, 3, ...) it is *strided*: one run per row, the output's row
//! apart, which its producer writes and its readers read with that stride (as cuDNN and
//! TensorRT tensor descriptors allow). So the decision is the same at every batch. A strided
//! part is nobody's view and nobody writes in place over it ([`strided_part`] tells).
//!
//! Eliding is not always a gain: a part makes the whole output live from the part's
//! production, so an input produced long before its Concat (a U-Net skip, a DenseNet feature)
//! can raise the peak. The planner decides by measuring: see [`choose`].

use memplan_ir::{Attr, Graph, IndexVec, MemorySemantics, NodeId, TensorId, TensorKind};

use crate::aliasing::{Aliases, ConcatParts};
use crate::bounded::Varying;
use crate::error::PlanError;
use crate::regions::Regions;

/// At most this many elision trials (each one re-measures the schedule's peak), in schedule
/// order: beyond it the remaining Concats keep their copies.
const MAX_TRIALS: usize = 2048;

/// How a set of parts is judged: the schedule's peak, then the live bytes summed over its
/// steps (lower is better in both).
pub(crate) type Score = (u64, u128);

/// One Concat whose output some inputs can be written into.
#[derive(Clone, Debug)]
pub(crate) struct Candidate {
    /// The Concat's output.
    pub output: TensorId,
    /// The inputs that may become parts, with their slice's byte offset in the output and
    /// whether it is strided (more than one row), latest produced first.
    pub parts: Vec<(TensorId, u64, bool)>,
}

/// The Concats of `schedule` (in schedule order) with at least one input that may be written
/// into the output, given the aliasing `base` made without elision.
pub(crate) fn candidates(
    graph: &Graph,
    schedule: &[NodeId],
    regions: &Regions,
    semantics: &IndexVec<NodeId, Vec<MemorySemantics>>,
    base: &Aliases,
    bindings: &memplan_ir::Bindings,
    varying: &Varying,
) -> Vec<Candidate> {
    let producers = graph.producers();
    let consumers = graph.consumers();
    let mut step_of: IndexVec<NodeId, u32> = IndexVec::from_elem(0, graph.nodes().len());
    for (s, &n) in (0u32..).zip(schedule) {
        step_of[n] = s;
    }
    let is_concat = |n: NodeId| graph.node(n).op == "Concat";
    let mut out = Vec::new();
    for &n in schedule {
        let node = graph.node(n);
        if node.op != "Concat"
            || node.outputs.len() != 1
            || node.inputs.len() < 2
            || !matches!(semantics[n].first(), Some(MemorySemantics::Opaque))
        {
            continue;
        }
        let Some(slices) = slices(graph, node, bindings) else {
            continue;
        };
        let y = node.outputs[0];
        if !regions.in_arena(y) {
            continue;
        }
        let mut parts: Vec<(TensorId, u64, bool)> = Vec::new();
        for (pos, &(offset, bytes, strided)) in slices.iter().enumerate() {
            let Some(x) = node.inputs[pos] else { continue };
            let eligible = regions.in_arena(x)
                && regions.bytes_of(x) == bytes
                && bytes > 0
                && graph.tensor(x).kind == TensorKind::Activation
                && node.inputs.iter().filter(|&&i| i == Some(x)).count() == 1
                && consumers[x].iter().all(|&c| c == n || !is_concat(c))
                && producers[x].is_some_and(|p| !is_concat(p))
                && base.parent[x].is_none()
                && base.root[x] == x
                && varying.part_holds(graph, node, pos);
            if eligible {
                parts.push((x, offset, strided));
            }
        }
        if parts.is_empty() {
            continue;
        }
        parts.sort_by_key(|&(x, _, _)| std::cmp::Reverse(producers[x].map_or(0, |p| step_of[p])));
        out.push(Candidate { output: y, parts });
    }
    out
}

/// Each input's slice of the output: `(offset, bytes, strided)`, the offset of its run in the
/// output's first row, its bytes in all rows, and whether there is more than one row (see
/// the module docs), when every run starts and ends on a byte, the inputs match the output
/// outside the axis, and their lengths along it add up to the output's.
fn slices(
    graph: &Graph,
    node: &memplan_ir::Node,
    bindings: &memplan_ir::Bindings,
) -> Option<Vec<(u64, u64, bool)>> {
    let y = graph.tensor(*node.outputs.first()?);
    let dims = |t: &memplan_ir::Tensor| -> Option<Vec<u64>> {
        t.shape.iter().map(|d| d.eval(bindings).ok()).collect()
    };
    let y_dims = dims(y)?;
    let rank = i64::try_from(y_dims.len()).ok()?;
    let axis = node.attr("axis").and_then(Attr::as_int)?;
    let axis = usize::try_from(if axis < 0 { axis + rank } else { axis }).ok()?;
    if axis >= y_dims.len() {
        return None;
    }
    let rows: u64 = y_dims[..axis]
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))?;
    let inner: u64 = y_dims[axis + 1..]
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))?;
    let bits = u64::from(y.dtype.bits()?);
    let mut along: u64 = 0;
    let mut out = Vec::with_capacity(node.inputs.len());
    for x in &node.inputs {
        let xt = graph.tensor((*x)?);
        let x_dims = dims(xt)?;
        if xt.dtype != y.dtype
            || x_dims.len() != y_dims.len()
            || x_dims
                .iter()
                .zip(&y_dims)
                .enumerate()
                .any(|(i, (a, b))| i != axis && a != b)
        {
            return None;
        }
        let start_bits = along.checked_mul(inner)?.checked_mul(bits)?;
        along = along.checked_add(x_dims[axis])?;
        let end_bits = along.checked_mul(inner)?.checked_mul(bits)?;
        if start_bits % 8 != 0 || end_bits % 8 != 0 {
            return None;
        }
        let run = (end_bits - start_bits) / 8;
        out.push((start_bits / 8, run.checked_mul(rows)?, rows > 1));
    }
    (along == y_dims[axis]).then_some(out)
}

/// `(rows, stride)` of buffer `b` of `plan` when it is a strided Concat part (see the module
/// docs): the output's rows and the bytes between their starts; `None` for any other
/// buffer. For readers of a plan (the plan file, pictures) that draw or hand on its layout.
pub fn strided_part(
    graph: &Graph,
    plan: &crate::Plan,
    b: &crate::PlannedBuffer,
) -> Option<(u64, u64)> {
    let crate::Alias::Part { of, .. } = b.alias? else {
        return None;
    };
    let bindings = plan.settings.bindings_for(graph).ok()?;
    let y = graph.tensors().get(of)?;
    let node = graph.node(graph.producers().get(of).copied().flatten()?);
    let dims: Vec<u64> = y
        .shape
        .iter()
        .map(|d| d.eval(&bindings).ok())
        .collect::<Option<_>>()?;
    let axis = node.attr("axis").and_then(Attr::as_int)?;
    let rank = i64::try_from(dims.len()).ok()?;
    let axis = usize::try_from(if axis < 0 { axis + rank } else { axis }).ok()?;
    let rows = dims
        .get(..axis)?
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))?;
    if rows <= 1 {
        return None;
    }
    let bytes = y.bytes(&bindings).ok()?;
    Some((rows, bytes / rows))
}

/// Greedy elision by measurement: for each candidate in schedule order, its parts are tried
/// all together, then (if that did not pay) one at a time, latest produced first; a trial is
/// kept when `measure` (the schedule's peak with those parts, and the live bytes summed over
/// the steps as a tie-break) drops strictly. Returns the parts kept and their measure, or
/// `None` when none paid.
pub(crate) fn choose(
    n_tensors: usize,
    candidates: &[Candidate],
    base: Score,
    measure: &mut dyn FnMut(&ConcatParts) -> Result<Score, PlanError>,
) -> Result<Option<(ConcatParts, Score)>, PlanError> {
    let mut parts: ConcatParts = IndexVec::from_elem(None, n_tensors);
    let mut best = base;
    let mut kept = false;
    let mut trials = 0usize;
    for c in candidates {
        let mut groups: Vec<&[(TensorId, u64, bool)]> = vec![&c.parts];
        if c.parts.len() > 1 {
            groups.extend(c.parts.chunks(1));
        }
        for group in groups {
            if trials >= MAX_TRIALS {
                return Ok(kept.then_some((parts, best)));
            }
            trials += 1;
            let fresh: Vec<(TensorId, u64, bool)> = group
                .iter()
                .copied()
                .filter(|&(x, _, _)| parts[x].is_none())
                .collect();
            if fresh.is_empty() {
                continue;
            }
            for &(x, off, strided) in &fresh {
                parts[x] = Some((c.output, off, strided));
            }
            let score = measure(&parts)?;
            if score < best {
                best = score;
                kept = true;
            } else {
                for &(x, _, _) in &fresh {
                    parts[x] = None;
                }
            }
        }
    }
    Ok(kept.then_some((parts, best)))
}
