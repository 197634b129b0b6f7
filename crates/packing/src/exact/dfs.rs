//! Depth-first branch and bound over canonical placements, for one capacity.
//!
//! A partial solution places buffers one at a time, each at its *minimum offset*: the lowest
//! offset (rounded up to its alignment) above every placed buffer it overlaps in time. Any
//! solution can be pushed down until no buffer can move lower; listing that solution by offset
//! gives a path of this search, so only these *canonical* paths are explored. Along a path:
//!
//! - **Canonical order.** Offsets never decrease; at equal offsets the preorder position
//!   increases. A buffer whose minimum offset is below the last placed offset must wait until
//!   something placed later raises it.
//! - **Dominance.** A buffer is not placed at or above `min_height`, the lowest
//!   `min_offset + size` of any unplaced buffer: that buffer's slot would stay empty below it,
//!   so the solution would not be pushed down.
//! - **Section inference.** In each section the unplaced buffers all overlap each other and will
//!   sit above the section's *floor* and above the current offset; the floor plus their total
//!   size must fit the capacity. The floor is the lowest minimum offset of the section's
//!   unplaced buffers, recomputed for every section the last placement touched.
//! - **Dynamic decomposition.** When no unplaced buffer crosses some section boundary, the
//!   unplaced buffers on either side no longer interact and are solved one side after the
//!   other (each with a fresh preorder); a failure on any side fails the branch. A group
//!   proven to fail is remembered (its buffers and their minimum offsets determine its
//!   search), so another branch that leaves the same group behind fails at once.
//!
//! The candidates at a node are tried by increasing minimum offset, then preorder position. The
//! preorder is one of a few static heuristics; [`decide`] runs them in turn with a node limit
//! that doubles each round, so one bad ordering cannot stall the search. Every change to the
//! state is recorded on a trail and undone on the way back, so the state after a run equals the
//! state before it.

use std::cmp::Reverse;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use super::Budget;
use super::instance::{Instance, LocalId, round_up};
use crate::index::IndexVec;

/// How one run of the search ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Status {
    Found,
    /// The search space is exhausted: no solution.
    NotFound,
    NodeLimit,
    /// The whole search's budget (its node cap or its clock) ran out.
    OutOfBudget,
}

/// The answer of [`decide`].
#[derive(Debug)]
pub(super) enum Decision {
    /// Offsets for every searched buffer, all within the capacity.
    Fits(IndexVec<LocalId, u64>),
    Infeasible,
    /// The node limit ran out first.
    Unknown,
    /// The whole search's budget (its node cap or its clock) ran out first.
    OutOfBudget,
}

#[derive(Clone, Copy, Debug)]
enum Key {
    /// Length of the live interval.
    Width,
    /// Size times width.
    Area,
    /// Largest remaining section total over the buffer's sections.
    Total,
}

/// Static preorders, each sorting by its keys in decreasing order, then by buffer.
const HEURISTICS: [&[Key]; 3] = [
    &[Key::Width, Key::Area, Key::Total],
    &[Key::Total, Key::Area, Key::Width],
    &[Key::Total, Key::Width, Key::Area],
];

/// Most words (`u64`) the memo of failed groups holds: 32 MiB.
const MAX_MEMO_WORDS: usize = 4 << 20;

/// Section updates that cost as much as one node. A node's own cost varies a hundredfold
/// with how many sections its placement touches (long buffers, many neighbours), so budgets
/// count those updates too: a node budget then bounds the time, and stays deterministic.
const WORK_PER_NODE: u64 = 4096;

/// How often (in nodes visited) the clock is read.
const CLOCK_EVERY: u64 = 1024;

/// Finds offsets for the searched buffers with every buffer ending at or below `capacity`,
/// trying each preordering heuristic in turn under a node limit that doubles each round, up to
/// `max_limit` nodes per run (then the answer is [`Decision::Unknown`]). `nodes` is increased
/// by the nodes explored.
pub(super) fn decide(
    inst: &Instance,
    capacity: u64,
    max_limit: u64,
    limits: Budget<'_>,
    nodes: &mut u64,
) -> Decision {
    if inst.load > capacity || inst.size.iter().any(|&s| s > capacity) {
        return Decision::Infeasible;
    }
    let mut searcher = Searcher::new(inst, capacity, limits);
    let mut limit = (inst.len() as u64).max(16);
    loop {
        if limit >= max_limit {
            return Decision::Unknown;
        }
        limit = limit.saturating_mul(2).min(max_limit);
        for heuristic in HEURISTICS {
            searcher.heuristic = heuristic;
            searcher.nodes_left = limit;
            searcher.nodes_before = *nodes;
            searcher.work = 0;
            let status = searcher.solve_root();
            *nodes += searcher.nodes;
            searcher.nodes = 0;
            match status {
                Status::Found => return Decision::Fits(searcher.solution),
                Status::NotFound => return Decision::Infeasible,
                Status::OutOfBudget => return Decision::OutOfBudget,
                Status::NodeLimit => {}
            }
        }
    }
}

/// A group of unplaced buffers that no other unplaced buffer interacts with.
#[derive(Debug)]
struct Partition {
    /// The buffers in preorder.
    order: Vec<LocalId>,
    /// Sections `lo..hi` hold every buffer of the partition.
    lo: u32,
    hi: u32,
}

#[derive(Debug)]
struct Searcher<'a> {
    inst: &'a Instance,
    capacity: u64,
    deadline: Instant,
    /// The search as a whole stops when `nodes_before + nodes` reaches this.
    node_cap: u64,
    /// Raised when the search is no longer wanted (read with the clock).
    stop: Option<&'a AtomicBool>,
    heuristic: &'static [Key],
    /// Nodes explored before the current run, in the current run, and how many more it may
    /// explore.
    nodes_before: u64,
    nodes: u64,
    nodes_left: u64,
    /// Section updates made by placements since the last node was charged for them (see
    /// [`WORK_PER_NODE`]), and nodes visited in this run (for reading the clock).
    work: u64,
    visits: u64,
    /// Per buffer: minimum offset, placed flag, current offset, offset in the last solution.
    min_offset: IndexVec<LocalId, u64>,
    placed: IndexVec<LocalId, bool>,
    offset: IndexVec<LocalId, u64>,
    solution: IndexVec<LocalId, u64>,
    /// Per section: floor (see [`Searcher::place`]), total size of unplaced buffers, and (per
    /// boundary) the number of unplaced buffers crossing it.
    floor: Vec<u64>,
    total: Vec<u64>,
    cuts: Vec<u32>,
    min_offset_trail: Vec<(LocalId, u64)>,
    floor_trail: Vec<(u32, u64)>,
    /// Sections touched by the current placement, deduplicated with `mark == epoch`.
    affected: Vec<u32>,
    mark: Vec<u32>,
    /// `at_height[s] == epoch`: the current placement raised a buffer of section `s` to
    /// exactly the placed buffer's top.
    at_height: Vec<u32>,
    epoch: u32,
    /// Candidates of every open node, `(min_offset, position, buffer)`, stacked.
    candidates: Vec<(u64, u32, LocalId)>,
    /// Groups proven to have no solution (see [`Searcher::memo_key`]), valid for this
    /// capacity whatever the heuristic; at most [`MAX_MEMO_WORDS`] words in all.
    failed: HashSet<Vec<u64>>,
    failed_words: usize,
}

impl<'a> Searcher<'a> {
    fn new(inst: &'a Instance, capacity: u64, budget: Budget<'a>) -> Searcher<'a> {
        let m = inst.len();
        let sections = inst.sections();
        Searcher {
            inst,
            capacity,
            deadline: budget.deadline,
            node_cap: budget.node_cap,
            stop: budget.stop,
            heuristic: HEURISTICS[0],
            nodes_before: 0,
            nodes: 0,
            nodes_left: u64::MAX,
            work: 0,
            visits: 0,
            min_offset: IndexVec::from_elem(0, m),
            placed: IndexVec::from_elem(false, m),
            offset: IndexVec::from_elem(0, m),
            solution: IndexVec::from_elem(0, m),
            floor: vec![0; sections],
            total: inst.section_total.clone(),
            cuts: inst.cuts.clone(),
            min_offset_trail: Vec::new(),
            floor_trail: Vec::new(),
            affected: Vec::new(),
            mark: vec![0; sections],
            at_height: vec![0; sections],
            epoch: 0,
            candidates: Vec::new(),
            failed: HashSet::new(),
            failed_words: 0,
        }
    }

    /// Solves the whole instance, split at the boundaries no buffer crosses.
    fn solve_root(&mut self) -> Status {
        let all: Vec<LocalId> = self.inst.ids.ids().collect();
        let cutpoints: Vec<u32> = (0..self.cuts.len())
            .filter(|&s| self.cuts[s] == 0)
            .map(|s| s as u32 + 1)
            .collect();
        let load = self.inst.load;
        self.split_and_solve(&all, 0, self.inst.sections() as u32, &cutpoints, 0, load)
    }

    /// Splits the unplaced buffers among `buffers` (all in sections `lo..hi`) at `cutpoints`
    /// (sorted section indices where a new group begins) and solves the groups in turn.
    /// `max_total` bounds the total of every section from above.
    fn split_and_solve(
        &mut self,
        buffers: &[LocalId],
        lo: u32,
        hi: u32,
        cutpoints: &[u32],
        min_offset: u64,
        max_total: u64,
    ) -> Status {
        let mut groups: Vec<Vec<LocalId>> = vec![Vec::new(); cutpoints.len() + 1];
        for &b in buffers {
            if !self.placed[b] {
                let g = cutpoints.partition_point(|&c| c <= self.inst.lo[b]);
                groups[g].push(b);
            }
        }
        for (g, group) in groups.into_iter().enumerate() {
            if group.is_empty() {
                continue;
            }
            let part_lo = if g == 0 { lo } else { cutpoints[g - 1] };
            let part_hi = cutpoints.get(g).copied().unwrap_or(hi);
            let key = self.memo_key(&group, min_offset);
            if self.failed.contains(&key) {
                return Status::NotFound;
            }
            let part = self.partition(group, part_lo, part_hi);
            match self.search(&part, min_offset, 0, max_total) {
                Status::Found => {}
                Status::NotFound => {
                    if self.failed_words + key.len() <= MAX_MEMO_WORDS {
                        self.failed_words += key.len();
                        self.failed.insert(key);
                    }
                    return Status::NotFound;
                }
                other => return other,
            }
        }
        Status::Found
    }

    /// What determines the search of a group of unplaced buffers that nothing else unplaced
    /// interacts with: the canonical lower bound on offsets, and each buffer with its minimum
    /// offset (floors, totals and cuts of the group's sections follow from these).
    fn memo_key(&self, group: &[LocalId], min_offset: u64) -> Vec<u64> {
        let mut pairs: Vec<(LocalId, u64)> =
            group.iter().map(|&b| (b, self.min_offset[b])).collect();
        pairs.sort_unstable();
        let mut key = Vec::with_capacity(1 + 2 * pairs.len());
        key.push(min_offset);
        for (b, offset) in pairs {
            key.push(u64::from(b.0));
            key.push(offset);
        }
        key
    }

    /// A partition of `buffers`, sorted by the current heuristic.
    fn partition(&self, buffers: Vec<LocalId>, lo: u32, hi: u32) -> Partition {
        let inst = self.inst;
        let mut keyed: Vec<([u128; 3], LocalId)> = buffers
            .into_iter()
            .map(|b| {
                let total = self.total[inst.lo[b] as usize..inst.hi[b] as usize]
                    .iter()
                    .copied()
                    .max()
                    .unwrap_or(0);
                let mut keys = [0u128; 3];
                for (k, key) in keys.iter_mut().zip(self.heuristic) {
                    *k = match key {
                        Key::Width => u128::from(inst.width[b]),
                        Key::Area => u128::from(inst.width[b]) * u128::from(inst.size[b]),
                        Key::Total => u128::from(total),
                    };
                }
                (keys, b)
            })
            .collect();
        keyed.sort_unstable_by_key(|&(keys, b)| (Reverse(keys), b));
        Partition {
            order: keyed.into_iter().map(|(_, b)| b).collect(),
            lo,
            hi,
        }
    }

    /// Searches for placements of the unplaced buffers of `part`, each at or above
    /// `(min_offset, min_position)` in canonical order. The current state passes section
    /// inference, and `max_total` bounds every section total of `part` from above.
    fn search(
        &mut self,
        part: &Partition,
        min_offset: u64,
        min_position: u32,
        max_total: u64,
    ) -> Status {
        if self.nodes_left == 0 {
            return Status::NodeLimit;
        }
        // A node, plus one for every `WORK_PER_NODE` section updates since the last one.
        // Never past the whole search's cap: it stops exactly there.
        let room = (self.node_cap)
            .saturating_sub(self.nodes_before.saturating_add(self.nodes))
            .max(1);
        let charge = (1 + self.work / WORK_PER_NODE)
            .min(self.nodes_left)
            .min(room);
        self.work %= WORK_PER_NODE;
        self.nodes_left -= charge;
        self.nodes += charge;
        self.visits += 1;
        if self.nodes_before.saturating_add(self.nodes) >= self.node_cap
            || (self.visits.is_multiple_of(CLOCK_EVERY)
                && (Instant::now() >= self.deadline
                    || self.stop.is_some_and(|stop| stop.load(Ordering::Relaxed))))
        {
            return Status::OutOfBudget;
        }
        let inst = self.inst;
        let mut min_height = u64::MAX;
        for &b in &part.order {
            // Placed buffers have minimum offset `u64::MAX`.
            min_height = min_height.min(self.min_offset[b].saturating_add(inst.size[b]));
        }
        if min_height == u64::MAX {
            self.record(part);
            return Status::Found;
        }
        let base = self.candidates.len();
        for (position, &b) in part.order.iter().enumerate() {
            let offset = self.min_offset[b];
            let position = position as u32;
            if !self.placed[b]
                && offset < min_height
                && (offset > min_offset || (offset == min_offset && position >= min_position))
                && offset.saturating_add(inst.size[b]) <= self.capacity
            {
                self.candidates.push((offset, position, b));
            }
        }
        self.candidates[base..].sort_unstable();
        let mut status = Status::NotFound;
        // The largest section total of `part` at this node, and a section that has it.
        let mut node_max: Option<(u64, u32)> = None;
        let mut max_total = max_total;
        for k in base..self.candidates.len() {
            let (offset, position, b) = self.candidates[k];
            if offset.saturating_add(max_total) > self.capacity && node_max.is_none() {
                self.work += u64::from(part.hi - part.lo);
                let (total, s) = self.max_total(part);
                node_max = Some((total, s));
                max_total = total;
            }
            let (undo, mut feasible) = self.place(b, offset);
            // Section inference, second half: the current offset plus the largest total.
            // Placing `b` only lowers the totals of its own sections.
            let mut child_max_total = max_total;
            if feasible && offset.saturating_add(max_total) > self.capacity {
                let own = self.inst.lo[b]..self.inst.hi[b];
                match node_max {
                    // The section with the largest total is not one of `b`'s: still too full.
                    Some((_, s)) if !own.contains(&s) => feasible = false,
                    _ => {
                        self.work += u64::from(part.hi - part.lo);
                        child_max_total = self.max_total(part).0;
                        feasible = offset.saturating_add(child_max_total) <= self.capacity;
                    }
                }
            }
            if feasible {
                let cutpoints = self.new_cutpoints(b, part);
                status = if cutpoints.is_empty() {
                    self.search(part, offset, position + 1, child_max_total)
                } else {
                    self.record(part);
                    let (lo, hi) = (part.lo, part.hi);
                    self.split_and_solve(&part.order, lo, hi, &cutpoints, offset, child_max_total)
                };
            }
            self.unplace(b, undo);
            if status != Status::NotFound {
                break;
            }
        }
        self.candidates.truncate(base);
        status
    }

    /// Copies the offsets of the placed buffers of `part` into the solution.
    fn record(&mut self, part: &Partition) {
        for &b in &part.order {
            if self.placed[b] {
                self.solution[b] = self.offset[b];
            }
        }
    }

    /// The boundaries inside buffer `b`'s sections that no unplaced buffer crosses any more,
    /// as section indices where a new group begins.
    fn new_cutpoints(&self, b: LocalId, part: &Partition) -> Vec<u32> {
        let (lo, hi) = (self.inst.lo[b], self.inst.hi[b]);
        let mut cutpoints = Vec::new();
        for s in lo..hi - 1 {
            if self.cuts[s as usize] == 0 && s + 1 > part.lo && s + 1 < part.hi {
                cutpoints.push(s + 1);
            }
        }
        cutpoints
    }

    /// Places `b` at `offset` and updates minimum offsets, floors, totals and cuts; returns the
    /// trail lengths to undo to, and whether every changed section still passes the first half
    /// of section inference (`floor + total <= capacity`; the other sections passed before).
    ///
    /// Floors stay exact: `floor[s]` is the lowest minimum offset of the unplaced buffers of
    /// section `s` (`u64::MAX` when there are none; a placed buffer's minimum offset is
    /// `u64::MAX` too). A floor can only change when one of its minimizers is placed or
    /// raised, so only those sections are recomputed.
    fn place(&mut self, b: LocalId, offset: u64) -> ((usize, usize), bool) {
        let inst = self.inst;
        let undo = (self.min_offset_trail.len(), self.floor_trail.len());
        self.placed[b] = true;
        self.offset[b] = offset;
        self.min_offset_trail.push((b, self.min_offset[b]));
        self.min_offset[b] = u64::MAX;
        let height = offset + inst.size[b];
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.mark.fill(0);
            self.at_height.fill(0);
            self.epoch = 1;
        }
        self.affected.clear();
        for s in inst.lo[b]..inst.hi[b] {
            let su = s as usize;
            self.total[su] -= inst.size[b];
            if self.floor[su] == offset {
                self.mark[su] = self.epoch;
                self.affected.push(s);
            }
        }
        for s in inst.lo[b]..inst.hi[b] - 1 {
            self.cuts[s as usize] -= 1;
        }
        self.work += u64::from(inst.hi[b] - inst.lo[b]) + inst.neighbours(b).len() as u64;
        for &n in inst.neighbours(b) {
            let old = self.min_offset[n];
            if old >= height {
                continue;
            }
            self.work += u64::from(inst.hi[n] - inst.lo[n]);
            self.min_offset_trail.push((n, old));
            let raised = round_up(height, inst.align[n]);
            self.min_offset[n] = raised;
            for s in inst.lo[n]..inst.hi[n] {
                let su = s as usize;
                if raised == height {
                    self.at_height[su] = self.epoch;
                }
                if self.floor[su] == old && self.mark[su] != self.epoch {
                    self.mark[su] = self.epoch;
                    self.affected.push(s);
                }
            }
        }
        for k in 0..self.affected.len() {
            let s = self.affected[k];
            let su = s as usize;
            // No unplaced buffer of the section lies below its old floor, nor (in a section of
            // `b`, where every unplaced buffer overlaps `b`) below `b`'s top: the scan stops as
            // soon as it meets that bound.
            let in_own = (inst.lo[b]..inst.hi[b]).contains(&s);
            let lowest = if in_own && self.at_height[su] == self.epoch {
                height
            } else {
                let bound = if in_own { height } else { self.floor[su] };
                let mut lowest = u64::MAX;
                self.work += inst.members(s).len() as u64;
                for &n in inst.members(s) {
                    lowest = lowest.min(self.min_offset[n]);
                    if lowest <= bound {
                        break;
                    }
                }
                lowest
            };
            if self.floor[su] != lowest {
                self.floor_trail.push((s, self.floor[su]));
                self.floor[su] = lowest;
            }
        }
        let fits = |s: u32| {
            let (floor, total) = (self.floor[s as usize], self.total[s as usize]);
            total == 0 || floor.saturating_add(total) <= self.capacity
        };
        let feasible = (inst.lo[b]..inst.hi[b]).all(fits) && self.affected.iter().all(|&s| fits(s));
        (undo, feasible)
    }

    /// Undoes [`Searcher::place`] of `b`.
    fn unplace(&mut self, b: LocalId, (min_offsets, floors): (usize, usize)) {
        let inst = self.inst;
        while self.floor_trail.len() > floors {
            if let Some((s, f)) = self.floor_trail.pop() {
                self.floor[s as usize] = f;
            }
        }
        while self.min_offset_trail.len() > min_offsets {
            if let Some((n, o)) = self.min_offset_trail.pop() {
                self.min_offset[n] = o;
            }
        }
        for s in inst.lo[b]..inst.hi[b] {
            self.total[s as usize] += inst.size[b];
        }
        for s in inst.lo[b]..inst.hi[b] - 1 {
            self.cuts[s as usize] += 1;
        }
        self.placed[b] = false;
    }

    /// The largest section total of `part`, and the first section that has it.
    fn max_total(&self, part: &Partition) -> (u64, u32) {
        let mut best = (0, part.lo);
        for s in part.lo..part.hi {
            let total = self.total[s as usize];
            if total > best.0 {
                best = (total, s);
            }
        }
        best
    }
}
