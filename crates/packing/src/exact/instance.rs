//! Preprocessing: the problem as the search sees it.
//!
//! Buffers that conflict with nothing (size zero, or an empty live interval) are left out of
//! the search and placed at offset 0. The others get a [`LocalId`] `0..m` in input order; the
//! search's tables are indexed by it, and only [`Instance::ids`] maps it back to the problem's
//! [`BufferId`].
//!
//! The time axis is cut into *sections*, one per distinct end time `e` of a searched buffer:
//! section `j` holds the buffers with `start < e_j <= end`, i.e. those live at time `e_j - 1`.
//! Two buffers overlap in time exactly when they share a section, every set of buffers live at
//! one time lies inside some section, and each buffer's sections form one contiguous range
//! `lo..hi` (never empty: its own end time is one of them).
//!
//! Setup is `O(n log n)` plus the number of overlapping pairs and section memberships; both are
//! counted before anything is built, and an instance over [`MAX_PAIRS`] or [`MAX_MEMBERSHIP`]
//! is refused so that setup never blows up on very large inputs. Byte arithmetic is checked once
//! here: [`Instance::bound`] bounds every height a canonical placement can reach, so the search
//! can add sizes without overflow.

use crate::index::{Idx, IndexVec};
use crate::{BufferId, Problem};

/// A searched buffer, numbered among the buffers the search places (not a [`BufferId`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct LocalId(pub(super) u32);

impl Idx for LocalId {
    fn from_index(i: usize) -> Self {
        // There are never more searched buffers than problem buffers, which fit in `u32`.
        LocalId(u32::try_from(i).expect("a problem has at most u32::MAX buffers"))
    }
    fn to_index(self) -> usize {
        self.0 as usize
    }
}

/// Most overlapping pairs the search will index, each counted from both ends (32 MiB).
pub(super) const MAX_PAIRS: u64 = 8_000_000;
/// Most (buffer, section) memberships the search will index.
pub(super) const MAX_MEMBERSHIP: u64 = 8_000_000;

/// Why an instance is not searched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Too many overlaps or memberships to index within the memory budget.
    TooLarge,
    /// The sum of sizes and alignments overflows `u64`.
    Overflow,
}

/// The searched buffers with their sections and conflicts, in compressed-sparse-row form.
#[derive(Debug)]
pub(super) struct Instance {
    /// The problem's id for each searched buffer.
    pub(super) ids: IndexVec<LocalId, BufferId>,
    pub(super) size: IndexVec<LocalId, u64>,
    /// Alignment, at least 1.
    pub(super) align: IndexVec<LocalId, u64>,
    /// Length of the live interval, `end - start`.
    pub(super) width: IndexVec<LocalId, u64>,
    /// First section of each buffer.
    pub(super) lo: IndexVec<LocalId, u32>,
    /// One past the last section of each buffer.
    pub(super) hi: IndexVec<LocalId, u32>,
    adj_start: Vec<usize>,
    adj: Vec<LocalId>,
    member_start: Vec<usize>,
    members: Vec<LocalId>,
    /// Sum of the sizes of the buffers in each section.
    pub(super) section_total: Vec<u64>,
    /// `cuts[s]`: buffers live in both section `s` and section `s + 1`.
    pub(super) cuts: Vec<u32>,
    /// Largest section total: a lower bound on the arena of the searched buffers.
    pub(super) load: u64,
    /// Largest size among the buffers left out of the search (they sit at offset 0).
    pub(super) fixed_size: u64,
    /// Sum of all sizes plus all `align - 1`: no canonical height exceeds it.
    pub(super) bound: u64,
    /// Greatest common divisor of the sizes and the alignments above 1: every canonical
    /// offset and height is a multiple of it (at least 1).
    pub(super) grain: u64,
}

impl Instance {
    /// Indexes `problem` for the search, or says why it will not be searched.
    pub(super) fn new(problem: &Problem) -> Result<Instance, Refusal> {
        let mut searched = Vec::new();
        let mut fixed_size = 0u64;
        let mut bound = 0u64;
        for (i, b) in problem.buffers.iter().enumerate() {
            let id = BufferId(u32::try_from(i).map_err(|_| Refusal::TooLarge)?);
            if b.size == 0 || b.start >= b.end {
                fixed_size = fixed_size.max(b.size);
                continue;
            }
            let align = b.align.max(1);
            bound = bound
                .checked_add(b.size)
                .and_then(|x| x.checked_add(align - 1))
                .ok_or(Refusal::Overflow)?;
            searched.push(id);
        }
        let ids: IndexVec<LocalId, BufferId> = searched.into();
        let field = |f: fn(&crate::Buffer) -> u64| -> IndexVec<LocalId, u64> {
            ids.iter().map(|&id| f(problem.buffer(id))).collect()
        };
        let size = field(|b| b.size);
        let align = field(|b| b.align.max(1));
        let start = field(|b| b.start);
        let end = field(|b| b.end);
        let width: IndexVec<LocalId, u64> = ids.ids().map(|l| end[l] - start[l]).collect();

        let mut ends = end.clone().into_raw();
        ends.sort_unstable();
        ends.dedup();
        let sections = ends.len();
        let to_u32 = |x: usize| u32::try_from(x).map_err(|_| Refusal::TooLarge);
        let mut lo = Vec::with_capacity(ids.len());
        let mut hi = Vec::with_capacity(ids.len());
        let mut membership = 0u64;
        for l in ids.ids() {
            let first = ends.partition_point(|&e| e <= start[l]);
            let past = ends.partition_point(|&e| e <= end[l]);
            membership += (past - first) as u64;
            lo.push(to_u32(first)?);
            hi.push(to_u32(past)?);
        }
        let (lo, hi): (IndexVec<LocalId, u32>, IndexVec<LocalId, u32>) = (lo.into(), hi.into());
        if membership > MAX_MEMBERSHIP {
            return Err(Refusal::TooLarge);
        }

        // Count overlapping pairs before building anything: a buffer `b` overlaps every `a`
        // with `start_a < end_b`, except those with `end_a <= start_b`, and itself.
        let mut starts_sorted = start.clone().into_raw();
        starts_sorted.sort_unstable();
        let mut ends_sorted = end.clone().into_raw();
        ends_sorted.sort_unstable();
        let mut pairs = 0u64;
        for l in ids.ids() {
            let before_end = starts_sorted.partition_point(|&s| s < end[l]);
            let gone = ends_sorted.partition_point(|&e| e <= start[l]);
            pairs += (before_end - gone - 1) as u64;
        }
        if pairs > MAX_PAIRS {
            return Err(Refusal::TooLarge);
        }

        // Conflicts by a sweep over start times; `active` holds the buffers still live.
        let mut by_start: Vec<LocalId> = ids.ids().collect();
        by_start.sort_unstable_by_key(|&l| (start[l], l));
        let mut neighbours: IndexVec<LocalId, Vec<LocalId>> =
            IndexVec::from_elem(Vec::new(), ids.len());
        let mut active: Vec<LocalId> = Vec::new();
        for &b in &by_start {
            let sb = start[b];
            active.retain(|&a| end[a] > sb);
            for &a in &active {
                neighbours[a].push(b);
                neighbours[b].push(a);
            }
            active.push(b);
        }
        let mut adj_start = Vec::with_capacity(ids.len() + 1);
        let mut adj = Vec::with_capacity(pairs as usize);
        adj_start.push(0);
        for mut list in neighbours.into_raw() {
            list.sort_unstable();
            adj.extend_from_slice(&list);
            adj_start.push(adj.len());
        }

        // Section members, totals and cuts.
        let mut count = vec![0usize; sections + 1];
        let mut total_diff = vec![0i128; sections + 1];
        let mut cut_diff = vec![0i64; sections + 1];
        for l in ids.ids() {
            let (first, past) = (lo[l] as usize, hi[l] as usize);
            for c in &mut count[first..past] {
                *c += 1;
            }
            total_diff[first] += i128::from(size[l]);
            total_diff[past] -= i128::from(size[l]);
            // Boundaries `s | s + 1` for `s` in `first..past - 1`.
            cut_diff[first] += 1;
            cut_diff[past - 1] -= 1;
        }
        let mut member_start = Vec::with_capacity(sections + 1);
        member_start.push(0usize);
        for s in 0..sections {
            member_start.push(member_start[s] + count[s]);
        }
        let mut fill = member_start.clone();
        let mut members = vec![LocalId(0); membership as usize];
        for l in ids.ids() {
            for s in lo[l] as usize..hi[l] as usize {
                members[fill[s]] = l;
                fill[s] += 1;
            }
        }
        let mut section_total = Vec::with_capacity(sections);
        let mut running = 0i128;
        for d in &total_diff[..sections] {
            running += d;
            // Never negative and never above the checked `bound`.
            section_total.push(u64::try_from(running).map_err(|_| Refusal::Overflow)?);
        }
        let mut cuts = Vec::with_capacity(sections.saturating_sub(1));
        let mut running = 0i64;
        for d in cut_diff.iter().take(sections.saturating_sub(1)) {
            running += d;
            cuts.push(u32::try_from(running).map_err(|_| Refusal::TooLarge)?);
        }
        let grain = size
            .iter()
            .chain(align.iter().filter(|&&a| a > 1))
            .fold(0, |g, &x| gcd(g, x))
            .max(1);
        let load = section_total.iter().copied().max().unwrap_or(0);
        Ok(Instance {
            ids,
            size,
            align,
            width,
            lo,
            hi,
            adj_start,
            adj,
            member_start,
            members,
            section_total,
            cuts,
            load,
            fixed_size,
            bound,
            grain,
        })
    }

    /// Number of searched buffers.
    pub(super) fn len(&self) -> usize {
        self.ids.len()
    }

    /// Number of sections.
    pub(super) fn sections(&self) -> usize {
        self.section_total.len()
    }

    /// The buffers whose live intervals intersect that of `b`.
    pub(super) fn neighbours(&self, b: LocalId) -> &[LocalId] {
        let b = b.to_index();
        &self.adj[self.adj_start[b]..self.adj_start[b + 1]]
    }

    /// The buffers live in section `s`.
    pub(super) fn members(&self, s: u32) -> &[LocalId] {
        let s = s as usize;
        &self.members[self.member_start[s]..self.member_start[s + 1]]
    }

    /// A lower bound on the arena of any solution of the whole problem. Pushing a solution
    /// down never raises its arena and leaves every height a multiple of [`Instance::grain`],
    /// so the largest section total can be rounded up to the grain.
    pub(super) fn lower_bound(&self) -> u64 {
        round_up(self.load, self.grain).max(self.fixed_size)
    }
}

/// `x` rounded up to a multiple of `align` (at least 1); saturates instead of overflowing.
pub(super) fn round_up(x: u64, align: u64) -> u64 {
    if align <= 1 {
        return x;
    }
    match x % align {
        0 => x,
        r => x.saturating_add(align - r),
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Buffer;

    fn ids(raw: &[u32]) -> Vec<LocalId> {
        raw.iter().copied().map(LocalId).collect()
    }

    fn instance(buffers: Vec<Buffer>) -> Instance {
        match Instance::new(&Problem::new(buffers)) {
            Ok(inst) => inst,
            Err(refusal) => panic!("refused: {refusal:?}"),
        }
    }

    #[test]
    fn touching_intervals_do_not_overlap() {
        let inst = instance(vec![
            Buffer::new(0, 3, 4),
            Buffer::new(3, 6, 4),
            Buffer::new(2, 4, 8),
        ]);
        assert_eq!(inst.neighbours(LocalId(0)), &ids(&[2]));
        assert_eq!(inst.neighbours(LocalId(1)), &ids(&[2]));
        assert_eq!(inst.neighbours(LocalId(2)), &ids(&[0, 1]));
        // End times 3, 4, 6: sections {a, c}, {b, c}, {b}.
        assert_eq!(inst.sections(), 3);
        assert_eq!(inst.members(0), &ids(&[0, 2]));
        assert_eq!(inst.members(1), &ids(&[1, 2]));
        assert_eq!(inst.members(2), &ids(&[1]));
        assert_eq!(inst.section_total, vec![12, 12, 4]);
        assert_eq!(inst.cuts, vec![1, 1]);
        assert_eq!(inst.lower_bound(), 12);
    }

    #[test]
    fn zero_cuts_separate_independent_groups() {
        let inst = instance(vec![Buffer::new(0, 2, 1), Buffer::new(2, 4, 1)]);
        assert_eq!(inst.cuts, vec![0]);
    }

    #[test]
    fn buffers_that_conflict_with_nothing_are_left_out() {
        let inst = instance(vec![
            Buffer::new(0, 5, 0),
            Buffer::new(3, 3, 9),
            Buffer::new(0, 5, 2),
        ]);
        assert_eq!(inst.ids.iter().collect::<Vec<_>>(), [&BufferId(2)]);
        assert_eq!(inst.fixed_size, 9);
        assert_eq!(inst.lower_bound(), 9);
    }

    #[test]
    fn grain_rounds_the_lower_bound() {
        let mut b = Buffer::new(0, 2, 8);
        b.align = 4;
        let inst = instance(vec![Buffer::new(0, 2, 12), b]);
        assert_eq!(inst.grain, 4);
        let inst = instance(vec![Buffer::new(0, 2, 6), Buffer::new(0, 2, 4)]);
        assert_eq!(inst.grain, 2);
        assert_eq!(inst.lower_bound(), 10);
    }

    #[test]
    fn overflowing_sizes_are_refused() {
        let problem = Problem::new(vec![Buffer::new(0, 2, u64::MAX), Buffer::new(0, 2, 1)]);
        assert_eq!(Instance::new(&problem).err(), Some(Refusal::Overflow));
    }

    #[test]
    fn round_up_to_alignment() {
        assert_eq!(round_up(0, 8), 0);
        assert_eq!(round_up(1, 8), 8);
        assert_eq!(round_up(8, 8), 8);
        assert_eq!(round_up(9, 1), 9);
        assert_eq!(round_up(u64::MAX, 8), u64::MAX);
    }
}
