//! A certified lower bound on the answer to `auto`'s problem: [`recompute_lower_bound`], an
//! exact dynamic programme over the cut positions on a relaxed memory model.
//!
//! The problem (see [`super::exact`]): among "recompute nothing" and every set of cut
//! positions of the forward, the one with the fewest recomputed FLOPs whose plan fits the
//! budget. Its fit is decided by planning, which no closed form gives; this module bounds it
//! from below, so that the least FLOPs of any configuration passing the bound's test is at or
//! below the true optimum.
//!
//! **What a set of cuts drops, gap by gap.** With cuts `c_1 < ... < c_k` (the last `L`), a
//! forward-made tensor made at `p ≤ L` is kept exactly when a cut lies in `[p, e)`, `e =
//! max(r, p + 1)` with `r` its last forward reader ([`super::recompute::keep_for`]). So it is
//! dropped exactly when `[p, e)` lies inside a *gap* `(a, b]` between consecutive cuts
//! (`a = -1` before the first): `a < p` and `e ≤ b`. Tensors made after `L` follow the
//! `cheap` policy (the *tail* of `L`). A dropped tensor's recomputation reads only dropped
//! tensors of its own gap (an input `x` of the producer of dropped `u` has `[p_x, e_x)`
//! reaching `p_u`, so a cut between them would keep `x`), so the recomputed FLOPs are the sum
//! over the gaps and the tail of what each recomputes alone: exact, not modelled.
//!
//! **The memory model.** Let `live(s)` be the live bytes at step `s` of the step without
//! recomputation (its measured profile). A saved tensor `t` dropped is not live from after
//! its last forward reader to before its first backward reader: at most `bytes(t)` less at
//! those steps, nothing less elsewhere, and recomputation only adds. So at every step the
//! planned step has at least `live(s)` less the bytes of the dropped saved tensors whose
//! window holds `s`; that bound is what the model asks to fit (with the bytes outside the
//! arena). To make it a programme over the gaps, each step has a *home* position: a forward
//! step its own; a backward step `j` the largest producer position of any forward-made
//! tensor a backward node at or after `j` reads (so every tensor made after its home has all
//! its readers, and its recomputation, before it: dropped or not, it is not live there in
//! either step). At a step homed in gap `(a, b]` the model subtracts every dropped saved
//! tensor of the earlier gaps (at least what they save there), the dropped saved tensors of
//! its own gap whose window holds it, and nothing for later gaps (they save nothing there).
//! Every subtraction is at least the true saving, so a configuration whose plan fits
//! passes the model's test.
//!
//! **What the remaking keeps alive.** A kept tensor `y` that a gap's remaking reads lives
//! until that remaking; where the backward does not read it, that is more than without
//! recomputation from after its last forward reader `r` on. The gap adds it at its own
//! home steps. If `r` is in the gap too, `y` is more at every later step, and the gap adds
//! its bytes to the earlier gaps' sum with the sign reversed. If `r` is after the gap (a
//! written-out normalisation's input, the residual stream, whose last reader is the next
//! residual add), `y` is *pending* ([`Pending`]): more at every backward step homed after
//! the gap, and at the forward steps after `r`, which lie in a later gap. A path carries its
//! pending tensors: their bytes are added at the later gaps' backward home steps at once,
//! at the tail's forward steps after `r`, and at every step of the gaps after the one
//! holding `r` (by then the path's last cut is at or after `r`; the gap holding `r` itself
//! adds nothing at its forward steps, which only lowers the model). A later gap whose
//! remaking reads `y` too (made before the gap: `y` is in its `cross`) would count it
//! again; on a path carrying `y` it leaves `y` out (its steps lower by at most `y`'s bytes,
//! and by at most as much as leaving out all of `cross`), and `y` is carried once.
//!
//! **The programme.** Over last cuts in order, it keeps a Pareto front of (bytes the earlier
//! gaps drop, FLOPs so far) per group of paths that carry the same pending tensors; a gap
//! `(a, b]` is taken when its steps fit given the bytes before it and the carried tensors.
//! It is exact for the model (the constraint of a gap depends on the earlier ones only
//! through that sum and those tensors); fronts longer than [`MAX_FRONT`] are merged by pairs
//! of a group into (most bytes, fewest FLOPs), which only relaxes it further. So its least
//! FLOPs bound the true optimum from below, and where a configuration that fits recomputes
//! exactly that, it is the optimum.

use memplan_ir::{IndexVec, TensorId};

use super::TrainingOptions;
use super::derive::Base;
use super::recompute::{Spans, all_kept, last_cut, spans};
use crate::error::PlanError;
use crate::planner::PlanContext;

/// The longest front of (bytes, FLOPs) kept per last cut before pairs are merged.
pub(super) const MAX_FRONT: usize = 256;

/// The longest forward (in nodes) [`Model::new`] builds a model for: its work grows with the
/// square of the cut positions.
pub(super) const MODEL_MAX_FORWARD: usize = 300;

/// One gap's figures: the bytes of the saved tensors it drops, the FLOPs it recomputes, and
/// per variant (`[0]`: every kept tensor the remaking reads counted; `[1]`: those in `cross`
/// left out) the bytes more at every later step (`extra`) and the most live bytes the model
/// gives its forward and backward home steps before the earlier gaps' drops.
#[derive(Clone, Debug, Default)]
struct Gap {
    saved: u64,
    flops: u64,
    extra: u64,
    need_f: [u64; 2],
    need_b: [u64; 2],
    /// `need_f[0].max(need_b[0])`: the most for a path that carries nothing.
    plain: u64,
    /// `None` where all its lists are empty (most gaps).
    lists: Option<Box<Lists>>,
}

/// A [`Gap`]'s lists.
#[derive(Clone, Debug, Default)]
struct Lists {
    /// Kept tensors the remaking reads, made before the gap and not read by the backward
    /// (sorted), their bytes, and whether they are in `extra`: those a path carries are
    /// left out (see [`Gap::need`]).
    cross: Vec<(TensorId, u64, bool)>,
    /// The gap's pending tensors, by last forward reader.
    pend: Vec<Pending>,
    /// Tails only: per forward home step (from the first), the most of variant `[1]` over
    /// it and the later ones.
    sfx: Vec<i128>,
}

/// A kept tensor made in a gap, read by its remaking and by no backward node, whose last
/// forward reader `read` is after the gap: live from its making to the remaking, so more
/// than without recomputation at every backward step homed after the gap, and at the forward
/// steps after `read`, which lie in a later gap. A path carries it until its last cut is at
/// or after `read` (then it is more at every later step, like `extra`); while it is carried,
/// a gap whose remaking reads it too (it is in the gap's `cross`) takes the variant that
/// leaves such tensors out, so it is counted once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Pending {
    read: usize,
    t: TensorId,
    bytes: u64,
}

impl Gap {
    /// After a path carrying `pend`, this gap (ending at `b`; a tail when `b` is the last
    /// forward step): the most live bytes the model gives its home steps before the bytes
    /// the path frees (the gap fits when that less them is within the room).
    fn need(&self, b: usize, pend: &[Pending]) -> i128 {
        if pend.is_empty() {
            return i128::from(self.plain);
        }
        let carried: i128 = pend.iter().map(|p| i128::from(p.bytes)).sum();
        let Some(lists) = self.lists.as_deref() else {
            return i128::from(self.need_f[0]).max(i128::from(self.need_b[0]) + carried);
        };
        let (counted, _) = self.counted(pend);
        // Leaving out tensors lowers each step by at most their bytes, and by at most all
        // of `cross`'s.
        let f = i128::from(self.need_f[1]).max(i128::from(self.need_f[0]) - counted);
        let b_ = i128::from(self.need_b[1]).max(i128::from(self.need_b[0]) - counted);
        let mut need = f.max(b_ + carried);
        if !lists.sfx.is_empty() {
            // A tail: its forward steps start at `b + 1 - sfx.len()`; each carried tensor is
            // more after its last reader (`pend` is sorted by it).
            let start = (b + 1).saturating_sub(lists.sfx.len());
            let mut run = 0i128;
            for p in pend {
                run += i128::from(p.bytes);
                if let Some(&v) = p.read.checked_sub(start).and_then(|i| lists.sfx.get(i + 1)) {
                    need = need.max(v + run);
                }
            }
        }
        need
    }

    /// The bytes of the tensors of `cross` that `pend` carries (counted by the path, left
    /// out here), and of those of them in `extra[0]`.
    fn counted(&self, pend: &[Pending]) -> (i128, u64) {
        let (mut all, mut extra) = (0i128, 0u64);
        let cross = self.lists.as_deref().map_or(&[][..], |l| &l.cross[..]);
        if cross.is_empty() {
            return (all, extra);
        }
        for p in pend {
            if let Ok(i) = cross.binary_search_by_key(&p.t, |c| c.0) {
                all += i128::from(cross[i].1);
                if cross[i].2 {
                    extra = extra.saturating_add(cross[i].1);
                }
            }
        }
        (all, extra)
    }

    /// After a path carrying `pend`, the bytes this gap (ending at `b`) adds to those freed
    /// at later steps, and the tensors carried after it (sorted).
    fn carry(&self, b: usize, pend: &[Pending]) -> (i128, Vec<Pending>) {
        let (_, extra) = self.counted(pend);
        let mut freed = i128::from(self.saved) - i128::from(self.extra.saturating_sub(extra));
        let mut next: Vec<Pending> = Vec::with_capacity(pend.len());
        for &p in pend {
            if p.read <= b {
                freed -= i128::from(p.bytes);
            } else {
                next.push(p);
            }
        }
        if let Some(lists) = self.lists.as_deref() {
            next.extend_from_slice(&lists.pend);
        }
        next.sort_unstable();
        // One carried already (an earlier gap's remaking reads it too) is carried once.
        next.dedup();
        (freed, next)
    }
}

/// What [`Model::solve`] found: the least FLOPs and the cuts of a configuration reaching
/// them (`None` for recomputing nothing), `None` when nothing passes; and whether a front
/// was merged (then the answer bounds the model's least from below but need not be one).
pub(super) struct Solved {
    pub(super) answer: Option<(u64, Option<Vec<u32>>)>,
    pub(super) merged: bool,
}

/// The relaxed model of a step (see the module docs).
pub(super) struct Model {
    /// Cut positions run over `0..n`.
    n: usize,
    /// Forward steps (the last is every tail's end).
    nf: usize,
    /// `gaps[b][a + 1]`: the gap between cuts `a` (or the start, `a = -1`) and `b` (by end,
    /// so that the programme reads each end's gaps in order).
    gaps: Vec<Vec<Gap>>,
    /// `tail[l + 1]`: what follows the last cut `l` (`l = -1`: no cut, the `cheap` policy).
    tail: Vec<Gap>,
    /// The most live bytes of steps no drop lowers (homed before every position).
    fixed: u64,
    /// The most live bytes of the step without recomputation.
    none_peak: u64,
    /// What the arena may be below the model's most: the alignment class less one.
    slack: u64,
    /// The bytes outside the arena.
    outside: u64,
}

/// A droppable forward-made tensor: where it is made, the end of the positions a cut keeps
/// it at, its last forward reader, its bytes, and its first and last backward readers when
/// the backward reads it.
#[derive(Clone, Copy)]
struct Droppable {
    t: TensorId,
    prod: usize,
    end: usize,
    last_read: usize,
    bytes: u64,
    saved: Option<(usize, usize)>,
}

/// What the figures of every gap are computed from.
struct Steps<'a> {
    base: &'a Base,
    /// Live bytes per step of the step without recomputation.
    live: Vec<u64>,
    /// Forward steps.
    nf: usize,
    /// Each backward step's home (see the module docs), non-increasing; `None` after the
    /// last read of a forward-made tensor.
    home: Vec<Option<usize>>,
    /// Per tensor: its [`Droppable`] index, if any.
    index: IndexVec<TensorId, Option<usize>>,
    drops: Vec<Droppable>,
    bindings: &'a memplan_ir::Bindings,
}

impl Steps<'_> {
    /// The first backward step homed at or before `x` (`None`: before every position).
    fn first_at_most(&self, x: Option<usize>) -> usize {
        self.home.partition_point(|&h| match (h, x) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(h), Some(x)) => h > x,
        })
    }

    /// A gap's (or a tail's) figures: `members` are the tensors it drops (`dropped`), its
    /// home steps the forward positions `(a, b]` and the backward steps homed there.
    fn figures(
        &self,
        members: &[TensorId],
        dropped: &dyn Fn(TensorId) -> bool,
        a: Option<usize>,
        b: usize,
        remake: &mut IndexVec<TensorId, usize>,
        scratch: &mut IndexVec<TensorId, bool>,
    ) -> Gap {
        let g = &self.base.graph;
        let flops = {
            let roots: Vec<TensorId> = members
                .iter()
                .copied()
                .filter(|&t| self.index[t].is_some_and(|i| self.drops[i].saved.is_some()))
                .collect();
            closure_flops(self.base, dropped, &roots, scratch, self.bindings)
        };
        // When each dropped tensor is made again: before its first backward reader, or
        // before a tensor whose remaking reads it, whichever comes first (as
        // `Base::materialize` remakes them), walking producers from the last.
        let mut saved = 0u64;
        for &t in members {
            if let Some(d) = self.index[t].map(|i| self.drops[i])
                && let Some((first, _)) = d.saved
            {
                remake[t] = first;
                saved = saved.saturating_add(d.bytes);
            }
        }
        // Kept tensors the remaking reads, and the first backward step that does.
        let mut inputs: Vec<(TensorId, usize)> = Vec::new();
        let mut nodes: Vec<memplan_ir::NodeId> = members
            .iter()
            .filter_map(|&t| self.base.producer[t])
            .collect();
        nodes.sort_unstable_by(|x, y| y.cmp(x));
        nodes.dedup();
        for p in nodes {
            let node = g.node(p);
            let at = node
                .outputs
                .iter()
                .filter(|&&o| dropped(o))
                .map(|&o| remake[o])
                .min()
                .unwrap_or(usize::MAX);
            if at == usize::MAX {
                continue;
            }
            let apply = super::cut::normalization_apply(node).filter(|(_, _, stats)| {
                node.outputs
                    .first()
                    .is_some_and(|&y| dropped(y) && remake[y] == at)
                    && stats
                        .iter()
                        .all(|&o| node.outputs.get(o).is_some_and(|&s| !dropped(s)))
            });
            let reads: Vec<TensorId> = match apply {
                Some((_, inputs, _)) => inputs
                    .iter()
                    .filter_map(|&i| node.inputs.get(i).copied().flatten())
                    .collect(),
                None => {
                    for &o in &node.outputs {
                        if dropped(o) {
                            remake[o] = remake[o].min(at);
                        }
                    }
                    node.present_inputs().collect()
                }
            };
            for x in reads {
                if dropped(x) {
                    remake[x] = remake[x].min(at);
                } else if self.index[x].is_some() {
                    inputs.push((x, at));
                }
            }
        }
        inputs.sort_unstable();
        inputs.dedup_by_key(|e| e.0);
        // The live bytes of the home steps less the drops whose windows hold them, twice:
        // with every kept tensor the remaking reads ([0]), and without those of them made
        // before the gap and not read by the backward ([1], for paths where an earlier gap
        // counts them already: see `Pending`).
        let fwd = a.map_or(0, |a| a + 1)..b + 1;
        let bwd = self.nf + self.first_at_most(Some(b))..self.nf + self.first_at_most(a);
        // Made before the gap and not read by the backward: an earlier gap may count it.
        let crossing = |y: TensorId| {
            self.index[y].is_some_and(|i| {
                let d = &self.drops[i];
                d.saved.is_none() && a.is_some_and(|a| d.prod <= a)
            })
        };
        // Without such tensors both variants are one.
        let variants = 1 + usize::from(inputs.iter().any(|&(y, _)| crossing(y)));
        let mut diff_f = vec![vec![0i128; fwd.len() + 1]; variants];
        let mut diff_b = vec![vec![0i128; bwd.len() + 1]; variants];
        let mut add = |lo: usize, hi: usize, v: i128, both: bool| {
            for k in 0..if both { variants } else { 1 } {
                for (range, diff) in [(&fwd, &mut diff_f[k]), (&bwd, &mut diff_b[k])] {
                    let (l, h) = (lo.max(range.start), hi.min(range.end));
                    if l < h {
                        diff[l - range.start] += v;
                        diff[h - range.start] -= v;
                    }
                }
            }
        };
        for &t in members {
            if let Some(d) = self.index[t].map(|i| self.drops[i])
                && d.saved.is_some()
            {
                add(
                    d.last_read + 1,
                    self.nf.saturating_add(remake[t]),
                    -i128::from(d.bytes),
                    true,
                );
            }
        }
        // A kept tensor the remaking reads lives until then: more than without
        // recomputation from its natural end (after its last reader) on. Where that end is
        // in the forward by `b` and the remaking comes after every backward step homed after
        // `b`, the bytes are more at every step homed after the gap too (`extra`; no later
        // gap reads the tensor, as no forward node after `b` does). Where its end is after
        // the gap and it is made in the gap, it is `Pending`: more at every backward step
        // homed after the gap, and at the forward steps after its last reader.
        let later_homes = self.first_at_most(Some(b));
        let mut extra = 0u64;
        let mut cross = Vec::new();
        let mut pend = Vec::new();
        for &(y, at) in &inputs {
            let Some(d) = self.index[y].map(|i| self.drops[i]) else {
                continue;
            };
            let end = match d.saved {
                Some((_, last)) => self.nf + last + 1,
                None => d.last_read + 1,
            };
            let crossing = crossing(y);
            add(
                end,
                self.nf.saturating_add(at),
                i128::from(d.bytes),
                !crossing,
            );
            if crossing {
                cross.push((y, d.bytes, at >= later_homes && d.last_read <= b));
            }
            if d.saved.is_none() && at >= later_homes {
                if d.last_read <= b {
                    extra = extra.saturating_add(d.bytes);
                } else {
                    pend.push(Pending {
                        read: d.last_read,
                        t: y,
                        bytes: d.bytes,
                    });
                }
            }
        }
        for &t in members {
            remake[t] = usize::MAX;
        }
        let mut need_f = [0i128; 2];
        let mut need_b = [0i128; 2];
        // A tail ends at the forward's last step: it keeps its forward steps' figures (a
        // gap's would take memory cubic in the positions).
        let tail = b + 1 == self.nf;
        let mut sfx = Vec::new();
        for k in 0..variants {
            for (range, diff, need) in [
                (&fwd, &diff_f[k], &mut need_f[k]),
                (&bwd, &diff_b[k], &mut need_b[k]),
            ] {
                let mut run = 0i128;
                for (i, s) in range.clone().enumerate() {
                    run += diff[i];
                    let v = i128::from(self.live[s]) + run;
                    *need = (*need).max(v);
                    if k + 1 == variants && tail && range.start == fwd.start && range.end == fwd.end
                    {
                        sfx.push(v);
                    }
                }
            }
        }
        if variants == 1 {
            need_f[1] = need_f[0];
            need_b[1] = need_b[0];
        }
        // Suffix most, from each forward home step on.
        for i in (0..sfx.len().saturating_sub(1)).rev() {
            sfx[i] = sfx[i].max(sfx[i + 1]);
        }
        cross.sort_unstable();
        pend.sort_unstable_by_key(|p| (p.read, p.t));
        let clamp = |x: i128| u64::try_from(x.max(0)).unwrap_or(u64::MAX);
        let lists = if cross.is_empty() && pend.is_empty() && sfx.is_empty() {
            None
        } else {
            Some(Box::new(Lists { cross, pend, sfx }))
        };
        Gap {
            saved,
            flops,
            extra,
            need_f: need_f.map(clamp),
            need_b: need_b.map(clamp),
            plain: clamp(need_f[0].max(need_b[0])),
            lists,
        }
    }
}

impl<'a> Steps<'a> {
    /// The step without recomputation's figures (live bytes per step, homes, droppable
    /// tensors), the bytes outside the arena, and the alignment class counted.
    fn new(
        base: &'a Base,
        options: &'a TrainingOptions,
        spans: &Spans,
        work: &mut PlanContext,
    ) -> Result<(Steps<'a>, u64, u64), PlanError> {
        let bindings = &options.plan.bindings;
        let g = &base.graph;
        let none = base.materialize(&all_kept(base))?;
        // Counted as the packing's lower bound counts the plan's alignment (a power of two;
        // else 1): every figure of the model rounded up to it, and the arena at least the
        // model's most less `class - 1`.
        let class = if options.plan.alignment.is_power_of_two() {
            options.plan.alignment
        } else {
            1
        };
        let live = crate::planner::step_profile_in(&none.graph, &options.plan, work, class)
            .map_err(PlanError::in_graph(&none.graph))?;
        let outside = crate::planner::persistent_bytes(&none.graph, &options.plan)
            .map_err(PlanError::in_graph(&none.graph))?
            .saturating_add(super::auto::caller_bytes(&none, options));
        let nf = base.n_forward;
        let n_steps = nf + base.later.len();
        if live.len() != n_steps || !none.recompute.is_empty() {
            return Err(PlanError::Training {
                reason: format!(
                    "the step without recomputation has {} steps, not {n_steps}",
                    live.len()
                ),
            });
        }
        // First backward reader of each tensor, and each backward step's home.
        let mut first: IndexVec<TensorId, Option<(usize, usize)>> =
            IndexVec::from_elem(None, g.tensors().len());
        let mut reads_max: Vec<Option<usize>> = vec![None; base.later.len()];
        for (j, (node, _)) in base.later.iter().enumerate() {
            for t in node.present_inputs() {
                if base.forward_made[t] {
                    first[t] = Some(first[t].map_or((j, j), |(f, _)| (f, j)));
                    let p = spans.prod[t] as usize;
                    reads_max[j] = Some(reads_max[j].map_or(p, |m: usize| m.max(p)));
                }
            }
        }
        let mut home: Vec<Option<usize>> = vec![None; base.later.len()];
        let mut suffix: Option<usize> = None;
        for j in (0..base.later.len()).rev() {
            suffix = match (suffix, reads_max[j]) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            home[j] = suffix;
        }
        let mut drops: Vec<Droppable> = Vec::new();
        for (t, &made) in base.forward_made.iter_enumerated() {
            if !made || spans.pinned[t] {
                continue;
            }
            let prod = spans.prod[t] as usize;
            drops.push(Droppable {
                t,
                prod,
                end: (spans.last_read[t] as usize).max(prod + 1),
                last_read: spans.last_read[t] as usize,
                bytes: memplan_packing::align_up(g.tensor(t).bytes(bindings).unwrap_or(0), class)
                    .unwrap_or(u64::MAX),
                saved: first[t],
            });
        }
        // By end, for the gaps of one start grown one end at a time.
        drops.sort_by_key(|d| (d.end, d.t));
        let mut index: IndexVec<TensorId, Option<usize>> =
            IndexVec::from_elem(None, g.tensors().len());
        for (i, d) in drops.iter().enumerate() {
            index[d.t] = Some(i);
        }
        Ok((
            Steps {
                base,
                live,
                nf,
                home,
                index,
                drops,
                bindings,
            },
            outside,
            class,
        ))
    }
}

impl Model {
    /// The model of `base`'s step, or `None` when its forward is longer than
    /// [`MODEL_MAX_FORWARD`].
    pub(super) fn new(
        base: &Base,
        options: &TrainingOptions,
        spans: &Spans,
        work: &mut PlanContext,
    ) -> Result<Option<Model>, PlanError> {
        if base.n_forward > MODEL_MAX_FORWARD {
            return Ok(None);
        }
        let (steps, outside, class) = Steps::new(base, options, spans, work)?;
        let g = &base.graph;
        let (nf, n_steps) = (steps.nf, steps.live.len());
        let n = last_cut(base) as usize;
        let fixed = (nf + steps.first_at_most(None)..n_steps)
            .map(|s| steps.live[s])
            .max()
            .unwrap_or(0);
        let mut remake: IndexVec<TensorId, usize> =
            IndexVec::from_elem(usize::MAX, g.tensors().len());
        let mut scratch: IndexVec<TensorId, bool> = IndexVec::from_elem(false, g.tensors().len());
        let mut gaps: Vec<Vec<Gap>> = (0..n).map(|b| Vec::with_capacity(b + 1)).collect();
        for start in 0..n {
            // `a = start - 1`: the previous cut, or none.
            let a = start.checked_sub(1);
            let mut members: Vec<TensorId> = Vec::new();
            let mut next = 0;
            for (bcut, by_end) in gaps.iter_mut().enumerate().skip(start) {
                while next < steps.drops.len() && steps.drops[next].end <= bcut {
                    if steps.drops[next].prod >= start {
                        members.push(steps.drops[next].t);
                    }
                    next += 1;
                }
                let dropped = |t: TensorId| {
                    base.forward_made[t]
                        && !spans.pinned[t]
                        && spans.prod[t] as usize >= start
                        && (spans.last_read[t] as usize).max(spans.prod[t] as usize + 1) <= bcut
                };
                by_end.push(steps.figures(&members, &dropped, a, bcut, &mut remake, &mut scratch));
            }
        }
        // Tails: after last cut l (start = l + 1), the cheap policy's drops.
        let mut tail = Vec::with_capacity(n + 1);
        for start in 0..=n {
            let dropped = |t: TensorId| {
                base.forward_made[t]
                    && !spans.pinned[t]
                    && spans.prod[t] as usize >= start
                    && !spans.cheap[t]
            };
            let members: Vec<TensorId> = steps
                .drops
                .iter()
                .filter(|d| dropped(d.t))
                .map(|d| d.t)
                .collect();
            let mut t = steps.figures(
                &members,
                &dropped,
                start.checked_sub(1),
                nf - 1,
                &mut remake,
                &mut scratch,
            );
            t.saved = 0;
            tail.push(t);
        }
        Ok(Some(Model {
            n,
            nf,
            gaps,
            tail,
            fixed,
            none_peak: steps.live.iter().copied().max().unwrap_or(0),
            slack: class - 1,
            outside,
        }))
    }

    /// The least recomputed FLOPs of any configuration that passes the model's test at
    /// `budget`, and the cuts of one that reaches it (before any merge of the fronts; `None`
    /// for recomputing nothing); `None` when no configuration passes.
    pub(super) fn least(&self, budget: u64) -> Option<(u64, Option<Vec<u32>>)> {
        self.solve(budget, MAX_FRONT).answer
    }

    /// [`Model::least`] with fronts of at most `max_front` entries. Without a merge
    /// ([`Solved::merged`] false) the answer is the least configuration passing the model's
    /// test at `budget` in one total order, the same at every budget: recomputing nothing
    /// first, then by recomputed FLOPs, then by the cut positions read as a binary number
    /// (bit `c` for a cut at `c`). So where the answer at `budget` passes the test at a
    /// smaller budget, it is the answer there too.
    ///
    /// Why the programme finds that least: the order is kept by a common continuation (the
    /// FLOPs add, and the continuation's cuts are all above the prefixes' last), so among
    /// prefixes ending at one cut with no more bytes dropped, only the least can start the
    /// least answer; a front sorted by (FLOPs, previous cut, previous entry) is sorted by that
    /// order (equal FLOPs and previous cut mean equal FLOPs before, where the previous
    /// front's entries are in the order), and answers are taken at the first strictly fewer
    /// FLOPs, last cuts ascending.
    pub(super) fn solve(&self, budget: u64, max_front: usize) -> Solved {
        let mut merged = false;
        let answer = self.solve_inner(budget, max_front, &mut merged);
        Solved { answer, merged }
    }

    fn solve_inner(
        &self,
        budget: u64,
        max_front: usize,
        merged: &mut bool,
    ) -> Option<(u64, Option<Vec<u32>>)> {
        let room = budget.checked_sub(self.outside)?.saturating_add(self.slack);
        if self.none_peak <= room {
            return Some((0, None));
        }
        if self.fixed > room {
            return None;
        }
        let room = i128::from(room);
        // fronts[c + 1]: entries (bytes the earlier gaps free at later steps, FLOPs, previous
        // cut + 1, its entry, its group) and the groups' carried tensors.
        let mut fronts: Vec<Front> = Vec::with_capacity(self.n + 1);
        fronts.push(Front {
            entries: vec![(0, 0, usize::MAX, usize::MAX, 0)],
            groups: vec![Vec::new()],
        });
        // The best answer so far (FLOPs, last cut + 1, entry): FLOPs only grow along a
        // path, so no entry at or above it can lead to a better one.
        let mut best: Option<(u64, usize, usize)> = None;
        let last = self.nf.saturating_sub(1);
        let finish = |start: usize, front: &Front, best: &mut Option<(u64, usize, usize)>| {
            let tail = &self.tail[start];
            let least: Vec<i128> = front
                .groups
                .iter()
                .map(|p| tail.need(last, p) - room)
                .collect();
            // The front is in the order, so the first that fits has the fewest FLOPs (with one
            // group, those that fit are a suffix).
            let slot = match &least[..] {
                [only] => front.entries.partition_point(|e| e.0 < *only),
                _ => front
                    .entries
                    .iter()
                    .position(|e| e.0 >= least[e.4 as usize])
                    .unwrap_or(front.entries.len()),
            };
            if let Some(&(_, flops, _, _, _)) = front.entries.get(slot) {
                let f = flops.saturating_add(tail.flops);
                if best.is_none_or(|(bf, _, _)| f < bf) {
                    *best = Some((f, start, slot));
                }
            }
        };
        finish(0, &fronts[0], &mut best);
        let mut next: Vec<Entry> = Vec::new();
        let mut least: Vec<i128> = Vec::new();
        let mut to: Vec<Option<(i128, u32)>> = Vec::new();
        // Where each start's run begins in `next`, and the merge's buffer.
        let mut runs: Vec<usize> = Vec::new();
        let mut scratch: Vec<Entry> = Vec::new();
        for bcut in 0..self.n {
            next.clear();
            let mut keys: std::collections::BTreeMap<Vec<Pending>, u32> =
                std::collections::BTreeMap::new();
            let mut groups: Vec<Vec<Pending>> = Vec::new();
            let cap = best.map_or(u64::MAX, |b| b.0);
            // Each start's entries are in the front's order (FLOPs grow by one constant, and
            // slots ascend): runs for `pareto`'s sort.
            for (start, front) in fronts.iter().enumerate() {
                runs.push(next.len());
                let gap = &self.gaps[bcut][start];
                // Per group: the least bytes freed that fit, then (lazily) what it adds and
                // the group after.
                least.clear();
                least.extend(front.groups.iter().map(|p| gap.need(bcut, p) - room));
                to.clear();
                to.resize(front.groups.len(), None);
                // The front is in the order, so by FLOPs, and within a group by bytes freed
                // strictly ascending: with one group, those that fit are a suffix.
                let skip = match &least[..] {
                    [only] => front.entries.partition_point(|e| e.0 < *only),
                    _ => 0,
                };
                for (slot, &(kept, flops, _, _, group)) in
                    front.entries.iter().enumerate().skip(skip)
                {
                    let gi = group as usize;
                    let f = flops.saturating_add(gap.flops);
                    if f >= cap {
                        // So do all after it.
                        break;
                    }
                    if kept < least[gi] {
                        continue;
                    }
                    let (freed, id) = *to[gi].get_or_insert_with(|| {
                        let (freed, carried) = gap.carry(bcut, &front.groups[gi]);
                        let id = *keys.entry(carried).or_insert_with_key(|k| {
                            groups.push(k.clone());
                            u32::try_from(groups.len() - 1).unwrap_or(u32::MAX)
                        });
                        (freed, id)
                    });
                    next.push((kept + freed, f, start, slot, id));
                }
            }
            // `next` keeps its capacity from one cut to the next.
            let (entries, m) = pareto(&mut next, &mut runs, &mut scratch, groups.len(), max_front);
            *merged |= m;
            let front = Front { entries, groups };
            finish(bcut + 1, &front, &mut best);
            fronts.push(front);
        }
        let (flops, mut at, mut slot) = best?;
        let mut cuts = Vec::new();
        while at != 0 && at != usize::MAX {
            cuts.push(u32::try_from(at - 1).unwrap_or(u32::MAX));
            let (_, _, pa, ps, _) = fronts[at].entries[slot];
            at = pa;
            slot = ps;
        }
        cuts.reverse();
        Some((flops, Some(cuts)))
    }

    /// The model's figures for one set of cuts (sorted, each below the last cut position):
    /// its recomputed FLOPs (exact) and the least device bytes the model allows its plan.
    pub(super) fn config(&self, cuts: &[u32]) -> (u64, u64) {
        let mut kept = 0i128;
        let mut pend: Vec<Pending> = Vec::new();
        let mut flops = 0u64;
        let mut need = i128::from(self.fixed);
        let mut start = 0usize;
        for &c in cuts {
            let c = c as usize;
            let gap = &self.gaps[c][start];
            need = need.max(gap.need(c, &pend) - kept);
            let (freed, carried) = gap.carry(c, &pend);
            kept += freed;
            pend = carried;
            flops = flops.saturating_add(gap.flops);
            start = c + 1;
        }
        let tail = &self.tail[start];
        need = need.max(tail.need(self.nf.saturating_sub(1), &pend) - kept);
        (
            flops.saturating_add(tail.flops),
            u64::try_from(need.max(0))
                .unwrap_or(u64::MAX)
                .saturating_sub(self.slack)
                .saturating_add(self.outside),
        )
    }

    /// The bytes outside the arena.
    pub(super) fn outside(&self) -> u64 {
        self.outside
    }

    /// The model bytes of the step without recomputation: the least budget at which
    /// [`Model::solve`] answers "recompute nothing".
    pub(super) fn none_bytes(&self) -> u64 {
        self.none_peak
            .saturating_sub(self.slack)
            .saturating_add(self.outside)
    }

    /// The walk of the answers at every budget from `budget` down (see [`Walk`]).
    pub(super) fn walk(&self, budget: u64) -> Walk<'_> {
        Walk {
            model: self,
            next: Some(budget),
            merged: false,
        }
    }

    /// The least budget at which [`Model::least`] finds a configuration, to within 1/1024
    /// of the step without recomputation (bisection; the test is monotone in the budget).
    pub(super) fn least_budget(&self) -> u64 {
        let (mut lo, mut hi) = (0u64, self.none_peak.saturating_add(self.outside));
        let close = hi / 1024;
        while lo < hi && hi - lo > close {
            let mid = lo + (hi - lo) / 2;
            if self.least(mid).is_some() {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        hi
    }
}

/// The longest front [`Walk`] lets [`Model::solve`] keep: past it the answers are not the
/// total order's least, and the walk stops.
pub(super) const WALK_FRONT: usize = 4096;

/// The answers of [`Model::solve`] at every budget from one down, each once, in the total
/// order of [`Model::solve`]: the answer at the budget, then the answer below its model
/// bytes, and so on. Each answer is the least configuration passing the model's test at
/// every budget from its model bytes to the budget it was found at, so every budget at or
/// below the first has its answer among them, and a walk from a larger budget meets every
/// configuration this one meets. Each step lowers the budget, and the walk stops at the first
/// merged front ([`Walk::merged`]). `auto` merges the answers walked in segments instead
/// (`super::auto::Segmented`), built on the same order; this walk lowers the least it names
/// when nothing fits.
pub(super) struct Walk<'a> {
    model: &'a Model,
    next: Option<u64>,
    /// Whether a front was merged (and the walk stopped there).
    pub(super) merged: bool,
}

impl Walk<'_> {
    /// The next configuration with cuts (recomputing nothing is passed over), with its
    /// recomputed FLOPs and model bytes; `None` when no configuration is left.
    pub(super) fn next_config(&mut self) -> Option<(u64, Vec<u32>, u64)> {
        loop {
            let x = self.next.take()?;
            let solved = self.model.solve(x, WALK_FRONT);
            if solved.merged {
                self.merged = true;
                return None;
            }
            let (flops, cuts) = solved.answer?;
            let bytes = match &cuts {
                None => self
                    .model
                    .none_peak
                    .saturating_sub(self.model.slack)
                    .saturating_add(self.model.outside),
                Some(cuts) => self.model.config(cuts).1,
            };
            self.next = bytes.min(x).checked_sub(1);
            if let Some(cuts) = cuts {
                return Some((flops, cuts, bytes));
            }
        }
    }
}

/// One front of [`Model::solve`]: its entries (bytes the earlier gaps free at later steps,
/// FLOPs, previous cut + 1, its entry there, its group) and per group the tensors its paths
/// carry ([`Pending`]).
struct Front {
    entries: Vec<Entry>,
    groups: Vec<Vec<Pending>>,
}

/// An entry of a [`Front`].
type Entry = (i128, u64, usize, usize, u32);

/// The Pareto front of `entries` (of `groups` groups): in the order of [`Model::solve`]
/// (FLOPs, then the previous cut and its entry), within each group bytes freed strictly
/// ascending (paths of one group carry the same tensors, so the later steps treat them
/// alike but for the bytes); at most `max_front` long where merging can get there
/// (neighbours of a group merged into the most bytes and fewest FLOPs of the pair, a
/// relaxation), and whether a merge happened. `entries` is runs already in that order, one
/// per previous cut, starting at `runs` ([`merge_runs`]).
fn pareto(
    entries: &mut Vec<Entry>,
    runs: &mut Vec<usize>,
    scratch: &mut Vec<Entry>,
    groups: usize,
    max_front: usize,
) -> (Vec<Entry>, bool) {
    // (start, slot) is unique: a total order.
    let order = |x: &Entry, y: &Entry| x.1.cmp(&y.1).then(x.2.cmp(&y.2)).then(x.3.cmp(&y.3));
    merge_runs(entries, runs, scratch);
    let mut most: Vec<Option<i128>> = vec![None; groups];
    let mut front: Vec<Entry> = Vec::new();
    for &e in entries.iter() {
        let m = &mut most[e.4 as usize];
        if m.is_none_or(|m| e.0 > m) {
            *m = Some(e.0);
            front.push(e);
        }
    }
    let mut merged = false;
    while front.len() > max_front.max(1) {
        // Each pair of a group becomes (the second's bytes, the first's FLOPs): the first's
        // parent, so the cuts reported are a real configuration's, and the bound only
        // falls. Every round halves each group of two or more; it ends when none is left.
        let mut by_group: Vec<Vec<Entry>> = vec![Vec::new(); groups];
        for e in front.drain(..) {
            by_group[e.4 as usize].push(e);
        }
        if by_group.iter().all(|g| g.len() < 2) {
            front = by_group.into_iter().flatten().collect();
            front.sort_unstable_by(order);
            break;
        }
        merged = true;
        for g in by_group {
            front.extend(g.chunks(2).map(|c| {
                let last = c[c.len() - 1];
                (last.0, c[0].1, c[0].2, c[0].3, c[0].4)
            }));
        }
        front.sort_unstable_by(order);
    }
    (front, merged)
}

/// Sorts `entries`, runs already sorted by (FLOPs, previous cut, its entry) starting at the
/// indices `runs` (ascending; emptied), by merging neighbouring runs pairwise until one is
/// left (each round halves the runs).
fn merge_runs(entries: &mut Vec<Entry>, runs: &mut Vec<usize>, scratch: &mut Vec<Entry>) {
    let key = |e: &Entry| (e.1, e.2, e.3);
    runs.push(entries.len());
    runs.dedup();
    if runs.first() != Some(&0) {
        runs.insert(0, 0);
    }
    // `runs` holds every run's start and the end.
    while runs.len() > 2 {
        scratch.clear();
        let mut ends = vec![0];
        for w in runs.windows(3).step_by(2) {
            let (a, b) = (&entries[w[0]..w[1]], &entries[w[1]..w[2]]);
            let (mut i, mut j) = (0, 0);
            while i < a.len() && j < b.len() {
                if key(&b[j]) < key(&a[i]) {
                    scratch.push(b[j]);
                    j += 1;
                } else {
                    scratch.push(a[i]);
                    i += 1;
                }
            }
            scratch.extend_from_slice(&a[i..]);
            scratch.extend_from_slice(&b[j..]);
            ends.push(scratch.len());
        }
        if runs.len().is_multiple_of(2) {
            // An odd number of runs: the last is copied as it is.
            let last = runs[runs.len() - 2];
            scratch.extend_from_slice(&entries[last..]);
            ends.push(scratch.len());
        }
        std::mem::swap(entries, scratch);
        *runs = ends;
    }
    runs.clear();
}

/// The FLOPs of making `roots` again through the `dropped` tensors they need, as
/// [`super::auto::recomputed`] counts them; `scratch` is all false before and after.
fn closure_flops(
    base: &Base,
    dropped: &dyn Fn(TensorId) -> bool,
    roots: &[TensorId],
    scratch: &mut IndexVec<TensorId, bool>,
    bindings: &memplan_ir::Bindings,
) -> u64 {
    let mut touched = Vec::new();
    let flops = super::auto::remake_walk(base, dropped, roots, scratch, &mut touched, bindings);
    for t in touched {
        scratch[t] = false;
    }
    flops
}

/// What [`recompute_lower_bound`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecomputeBound {
    /// A lower bound on the fewest recomputed FLOPs of any configuration whose plan fits.
    pub lower_bound: u64,
    /// A configuration that recomputes exactly that many FLOPs and passes the model's test
    /// (`None`: recompute nothing; `Some(names)`: the `cheap` policy with checkpoints after
    /// those forward nodes). Where its plan fits the budget, it is the optimum.
    pub checkpoints: Option<Vec<String>>,
}

/// A certified lower bound on the fewest recomputed FLOPs of any configuration `auto`
/// chooses from (recomputing nothing, or any set of cut positions under the `cheap`
/// policy) whose plan fits `budget` (see the module docs), in the reverse forward order of
/// the backward; `None` when no configuration's plan can fit. Its work grows with the
/// square of the forward's length; forwards of more than 300 nodes are refused.
pub fn recompute_lower_bound(
    forward: &memplan_ir::Graph,
    options: &TrainingOptions,
    budget: u64,
) -> Result<Option<RecomputeBound>, PlanError> {
    let base = Base::new(forward, options)?;
    let spans = spans(&base, &options.plan);
    let model = Model::new(&base, options, &spans, &mut PlanContext::new())?.ok_or_else(|| {
        PlanError::Training {
            reason: format!(
                "the forward has {} nodes; the lower bound is made for at most {MODEL_MAX_FORWARD}",
                base.n_forward
            ),
        }
    })?;
    // Fronts as long as the walk's: the bound is tighter where shorter fronts merge.
    Ok(model
        .solve(budget, WALK_FRONT)
        .answer
        .map(|(lower_bound, cuts)| RecomputeBound {
            lower_bound,
            checkpoints: cuts.map(|cuts| {
                cuts.iter()
                    .map(|&c| base.graph.node(memplan_ir::NodeId(c)).name.clone())
                    .collect()
            }),
        }))
}

#[cfg(test)]
pub(super) mod tests {
    use memplan_ir::{DType, GraphBuilder};

    use super::*;
    use crate::step::Loss;
    use crate::step::recompute::keep_for;

    /// Residual blocks with a gate by an earlier tensor and a long skip to the end.
    fn skips() -> memplan_ir::Graph {
        let mut b = GraphBuilder::new("skips");
        let mut x = b.input("x", DType::F32, [16, 32]);
        let mut made = vec![x];
        for j in 0..8 {
            let w = b.weight(format!("w{j}"), DType::F32, [32, 32]);
            let y = b.named_op(&format!("mm{j}"), "MatMul", &[x, w], DType::F32, [16, 32]);
            let mut a = b.named_op(&format!("act{j}"), "Tanh", &[y], DType::F32, [16, 32]);
            if j % 3 == 1 {
                a = b.named_op(
                    &format!("gate{j}"),
                    "Mul",
                    &[a, made[j - 1]],
                    DType::F32,
                    [16, 32],
                );
            }
            x = b.named_op(&format!("res{j}"), "Add", &[x, a], DType::F32, [16, 32]);
            made.push(x);
        }
        let x = b.named_op("long", "Add", &[x, made[1]], DType::F32, [16, 32]);
        b.mark_output(x);
        b.build().unwrap()
    }

    /// Residual blocks whose stream is read by a subtraction (a normalisation written out:
    /// the stream is not saved, the difference is, and remaking it reads the stream) and by
    /// the next residual add: where cuts drop the difference and keep the stream, the stream
    /// lives from that add to the remaking ([`Pending`]).
    fn normed() -> memplan_ir::Graph {
        let mut b = GraphBuilder::new("normed");
        let mut x = b.input("x", DType::F32, [16, 32]);
        for j in 0..8 {
            let bias = b.weight(format!("b{j}"), DType::F32, [16, 32]);
            let c = b.named_op(&format!("sub{j}"), "Sub", &[x, bias], DType::F32, [16, 32]);
            let h = b.named_op(&format!("sq{j}"), "Mul", &[c, c], DType::F32, [16, 32]);
            let w = b.weight(format!("w{j}"), DType::F32, [32, 32]);
            let y = b.named_op(&format!("mm{j}"), "MatMul", &[h, w], DType::F32, [16, 32]);
            let mut a = b.named_op(&format!("act{j}"), "Tanh", &[y], DType::F32, [16, 32]);
            if j % 3 == 1 {
                // A second difference of the stream, late in the block: two gaps' remakings
                // may read the stream.
                let bias = b.weight(format!("d{j}"), DType::F32, [16, 32]);
                let d = b.named_op(&format!("late{j}"), "Sub", &[x, bias], DType::F32, [16, 32]);
                a = b.named_op(&format!("gate{j}"), "Mul", &[a, d], DType::F32, [16, 32]);
            }
            x = b.named_op(&format!("res{j}"), "Add", &[x, a], DType::F32, [16, 32]);
        }
        b.mark_output(x);
        b.build().unwrap()
    }

    /// The options (no loss), base, spans and model of `graph`'s step.
    fn model_of(
        graph: &memplan_ir::Graph,
        work: &mut PlanContext,
    ) -> (TrainingOptions, Base, Spans, Model) {
        let options = TrainingOptions {
            loss: Loss::None,
            ..TrainingOptions::default()
        };
        let base = Base::new(graph, &options).unwrap();
        let spans = spans(&base, &options.plan);
        let model = Model::new(&base, &options, &spans, work).unwrap().unwrap();
        (options, base, spans, model)
    }

    /// The options (no loss), base, spans and model of [`skips`]'s step.
    pub(in crate::step) fn skips_model(
        work: &mut PlanContext,
    ) -> (TrainingOptions, Base, Spans, Model) {
        model_of(&skips(), work)
    }

    /// Whether the path of `cuts` carries a [`Pending`] tensor.
    fn carries(model: &Model, cuts: &[u32]) -> bool {
        let mut start = 0;
        cuts.iter().any(|&c| {
            let gap = &model.gaps[c as usize][start];
            start = c as usize + 1;
            gap.lists.as_ref().is_some_and(|l| !l.pend.is_empty())
        })
    }

    /// The programme's answer is the least of one total order that passes: at every budget
    /// from its model bytes up to where it was found it is the answer again, and the walk
    /// from a budget meets configurations in order, each the answer at every budget from its
    /// model bytes to the budget it was met at, and every configuration a walk from a
    /// smaller budget meets.
    #[test]
    fn answers_are_the_least_of_one_order_at_every_budget_they_pass() {
        for graph in [skips(), normed()] {
            let (_, _, _, model) = model_of(&graph, &mut PlanContext::new());
            let hi = model
                .none_peak
                .saturating_sub(model.slack)
                .saturating_add(model.outside);
            let lo = model.least_budget();
            assert!(lo < hi);
            let walked = |from: u64| {
                let mut walk = model.walk(from);
                let mut out = Vec::new();
                while let Some(e) = walk.next_config() {
                    out.push(e);
                }
                assert!(!walk.merged);
                out
            };
            let top = walked(hi - 1);
            // At least 3 answers on `skips`, 1 on `normed`.
            assert!(
                top.len() + 2 * usize::from(graph.name == "normed") >= 3,
                "{}",
                top.len()
            );
            let mut last: Option<u64> = None;
            for (flops, cuts, bytes) in &top {
                assert!(last.is_none_or(|l| l <= *flops));
                last = Some(*flops);
                assert_eq!(model.config(cuts), (*flops, *bytes));
                // The answer at its own model bytes and halfway up to the next's.
                for b in [*bytes, bytes + (hi - 1 - bytes) / 2] {
                    let at = model.solve(b, WALK_FRONT);
                    assert!(!at.merged);
                    let (f, c) = at.answer.unwrap();
                    if b == *bytes {
                        assert_eq!((f, c.as_ref()), (*flops, Some(cuts)));
                    } else {
                        assert!(f <= *flops);
                    }
                }
            }
            // A walk from a smaller budget meets a subsequence of the walk from the top.
            for k in 1..8u64 {
                let from = lo + (hi - 1 - lo) * k / 8;
                let part = walked(from);
                let mut it = top.iter();
                for e in &part {
                    assert!(it.any(|x| x == e), "from {from}: {e:?} not in the top walk");
                }
            }
        }
    }

    /// On every one of 120 sets of cuts drawn from a seed, on both graphs: the model's FLOPs
    /// are those `auto` counts, and its least device bytes are at most its plan's. On
    /// [`normed`], some sets carry a [`Pending`] stream and are within 1 KiB of their plan
    /// (2 KiB below it without the stream counted after its last forward reader).
    #[test]
    fn the_model_counts_the_flops_and_never_passes_the_measured_peak() {
        let mut work = PlanContext::new();
        for (k_graph, graph) in [skips(), normed()].into_iter().enumerate() {
            let (options, base, spans, model) = model_of(&graph, &mut work);
            let n = last_cut(&base);
            let mut state = 7u64;
            let (mut tight, mut tight_carrying) = (0, 0);
            for k in 0..120 {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let density = 1 + (k % 5) as u64;
                let cuts: Vec<u32> = (0..n)
                    .filter(|&c| (state >> (c % 60)).wrapping_mul(u64::from(c) + 3) % 8 < density)
                    .collect();
                let keep = keep_for(&base, &spans, &cuts);
                let (flops, bound) = model.config(&cuts);
                let counted =
                    super::super::auto::recompute_flops_of(&base, &keep, &options.plan.bindings);
                assert_eq!(flops, counted, "cuts {cuts:?}");
                let derived = base.materialize(&keep).unwrap();
                let plan = work.plan(&derived.graph, &options.plan).unwrap();
                let total = super::super::auto::total_bytes(&derived, &plan);
                assert!(
                    bound <= total,
                    "{}: cuts {cuts:?}: {bound} > {total}",
                    graph.name
                );
                tight += usize::from(bound + 1024 >= total);
                tight_carrying += usize::from(bound + 1024 >= total && carries(&model, &cuts));
            }
            // The bound is not vacuous: within 1 KiB of the plan on some sets.
            assert!(tight > 0);
            if k_graph == 1 {
                assert!(tight_carrying > 0, "{tight} tight, none carrying");
            }
        }
    }
}
