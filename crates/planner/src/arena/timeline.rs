//! Compressed time and an index of placed buffers by time.
//!
//! [`Slots`] renumbers the distinct start and end times `t_0 < t_1 < ...` so that slot `j`
//! is the span `[t_j, t_{j+1})`; a buffer live over `[start, end)` covers the slots
//! `[lo, hi)` with `t_lo = start` and `t_hi = end`. Two buffers overlap in time exactly when
//! their slot ranges do.
//!
//! [`PlacedIndex`] holds the byte ranges of placed buffers and answers "which bytes do the
//! placed buffers overlapping these slots occupy". It is a segment tree over buckets of
//! consecutive slots: a buffer is stored at the canonical nodes covering the buckets it
//! spans completely, and at the leaf buckets it covers only in part (where a query filters
//! by slot range). Placement only needs the union of the occupied bytes, never which buffer
//! occupies them, so nodes store unions of byte ranges, which merge as the packing fills up.

use super::problem::Problem;

/// The slot range of every buffer (see the module docs).
#[derive(Debug)]
pub(crate) struct Slots {
    /// First slot of each buffer.
    pub lo: Vec<u32>,
    /// One past the last slot of each buffer.
    pub hi: Vec<u32>,
    /// The number of distinct times (an upper bound on every `hi`).
    pub count: u32,
}

impl Slots {
    /// Compresses the problem's times. Buffers must have `end > start` (checked by
    /// [`Problem::validate`]).
    pub fn new(problem: &Problem) -> Slots {
        let mut times: Vec<u64> = Vec::with_capacity(2 * problem.len());
        for b in &problem.buffers {
            times.push(b.start);
            times.push(b.end);
        }
        times.sort_unstable();
        times.dedup();
        let slot = |t: u64| u32::try_from(times.partition_point(|&x| x < t)).unwrap_or(u32::MAX);
        let lo = problem.buffers.iter().map(|b| slot(b.start)).collect();
        let hi = problem.buffers.iter().map(|b| slot(b.end)).collect();
        let count = u32::try_from(times.len()).unwrap_or(u32::MAX);
        Slots { lo, hi, count }
    }
}

/// A placed buffer stored at a leaf bucket it covers only in part: its bytes
/// `[offset, end)` and slots `[lo, hi)`.
#[derive(Clone, Copy, Debug)]
struct Partial {
    offset: u64,
    end: u64,
    lo: u32,
    hi: u32,
}

/// One node of the index. Byte ranges are kept as unions: sorted, disjoint, not touching.
#[derive(Clone, Debug, Default)]
struct Node {
    /// The union of the buffers stored here, which cover every slot of the node.
    own: Vec<(u64, u64)>,
    /// The union of every buffer stored in this node's subtree, itself included; kept only
    /// for nodes at most [`UNION_HEIGHT`] above the leaves.
    all: Vec<(u64, u64)>,
    /// At a leaf: buffers that cover only some of its slots, sorted by offset.
    partial: Vec<Partial>,
}

/// Placed buffers, queried by slot range (see the module docs).
///
/// Each node keeps the union of the byte ranges stored at it, and the low nodes also the
/// union over their whole subtree. Unions stay short when the packing is tight (neighbouring
/// buffers merge into one range), so a query reads `O(log n)` short unions whatever the
/// number of overlapping buffers: where it covers a low node whole it takes the subtree union
/// and stops. Higher nodes keep no subtree union (an insertion would pay for one at every
/// level, and queries rarely cover them); a query covering one descends to the low nodes.
#[derive(Debug)]
pub(crate) struct PlacedIndex {
    /// log2 of the number of slots per leaf bucket.
    shift: u32,
    /// Number of leaves, a power of two; node 1 is the root, node `leaves + b` is bucket `b`.
    leaves: usize,
    /// The lowest node index whose subtree union is kept.
    first_union: usize,
    nodes: Vec<Node>,
    /// Whether anything is stored in each node's subtree (apart from `nodes`, so that a query
    /// skips empty subtrees without loading them).
    filled: Vec<bool>,
    /// The insertion that last added to each node's subtree union (to add once per insert).
    stamp: Vec<u32>,
    inserts: u32,
    /// Reused traversal stack: (node, first bucket, one past the last bucket).
    stack: Vec<(usize, usize, usize)>,
}

/// Slots per leaf bucket, as a power of two; chosen by measurement (64 beat 8, 16 and 32 on
/// the generated and the idealloc instances).
const BUCKET_SHIFT: u32 = 6;

/// How many levels above the leaves keep subtree unions, from the mean lifetime in slots:
/// unions pay off for queries that cover whole nodes, so they are kept up to nodes about
/// four mean lifetimes wide. (Measured: 2 levels are best on the generated instances, whose
/// mean lifetime is ~60 slots, and 7-8 on `iopddl_Y_1`, whose mean is in the thousands.)
fn union_height(mean_span: u64) -> u32 {
    let nodes_wide = (4 * mean_span) >> BUCKET_SHIFT;
    u64::BITS - nodes_wide.leading_zeros()
}

/// Adds `[start, end)` to a union of ranges, merging it with every range it overlaps or
/// touches.
fn add_range(union: &mut Vec<(u64, u64)>, start: u64, end: u64) {
    let first = union.partition_point(|&(_, e)| e < start);
    let past = union.partition_point(|&(s, _)| s <= end);
    if first >= past {
        union.insert(first, (start, end));
        return;
    }
    let merged_start = union.get(first).map_or(start, |&(s, _)| s.min(start));
    let merged_end = union.get(past - 1).map_or(end, |&(_, e)| e.max(end));
    if let Some(slot) = union.get_mut(first) {
        *slot = (merged_start, merged_end);
    }
    union.drain(first + 1..past);
}

impl PlacedIndex {
    /// An empty index over `slots` slots, for buffers whose mean lifetime is `mean_span`
    /// slots.
    pub fn new(slots: u32, mean_span: u64) -> PlacedIndex {
        let buckets = ((slots as usize) >> BUCKET_SHIFT) + 1;
        let leaves = buckets.next_power_of_two();
        let first_union = leaves >> union_height(mean_span).min(leaves.trailing_zeros());
        PlacedIndex {
            shift: BUCKET_SHIFT,
            leaves,
            first_union,
            nodes: vec![Node::default(); 2 * leaves],
            filled: vec![false; 2 * leaves],
            stamp: vec![0; 2 * leaves],
            inserts: 0,
            stack: Vec::new(),
        }
    }

    /// Records a placed buffer with bytes `[offset, end)`, `offset < end`, over slots
    /// `[lo, hi)`, `lo < hi`.
    pub fn insert(&mut self, lo: u32, hi: u32, offset: u64, end: u64) {
        self.inserts = self.inserts.wrapping_add(1);
        let partial = Partial {
            offset,
            end,
            lo,
            hi,
        };
        let mask = (1u32 << self.shift) - 1;
        let first = (lo >> self.shift) as usize;
        let last = ((hi - 1) >> self.shift) as usize;
        if first == last && (lo & mask != 0 || (hi & mask != 0)) {
            self.store_partial(self.leaves + first, partial);
            return;
        }
        let mut from = first;
        if lo & mask != 0 {
            self.store_partial(self.leaves + first, partial);
            from += 1;
        }
        let mut to = last + 1;
        if hi & mask != 0 {
            self.store_partial(self.leaves + last, partial);
            to -= 1;
        }
        let (mut l, mut r) = (from + self.leaves, to + self.leaves);
        while l < r {
            if l & 1 == 1 {
                self.store_own(l, offset, end);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                self.store_own(r, offset, end);
            }
            l >>= 1;
            r >>= 1;
        }
    }

    fn store_own(&mut self, node: usize, offset: u64, end: u64) {
        if let Some(n) = self.nodes.get_mut(node) {
            add_range(&mut n.own, offset, end);
        }
        self.add_to_subtree_unions(node, offset, end);
    }

    fn store_partial(&mut self, node: usize, partial: Partial) {
        if let Some(n) = self.nodes.get_mut(node) {
            let at = n.partial.partition_point(|p| p.offset <= partial.offset);
            n.partial.insert(at, partial);
        }
        self.add_to_subtree_unions(node, partial.offset, partial.end);
    }

    /// Adds the range to the subtree unions of `node` and its low ancestors, stopping at the
    /// first one this insertion already reached, and marks every ancestor filled.
    fn add_to_subtree_unions(&mut self, node: usize, offset: u64, end: u64) {
        let mut n = node;
        while let Some(filled) = self.filled.get_mut(n)
            && !*filled
        {
            *filled = true;
            n >>= 1;
        }
        let mut n = node;
        while n >= self.first_union {
            let (Some(stamp), Some(target)) = (self.stamp.get_mut(n), self.nodes.get_mut(n)) else {
                return;
            };
            if *stamp == self.inserts {
                return;
            }
            *stamp = self.inserts;
            add_range(&mut target.all, offset, end);
            n >>= 1;
        }
    }

    /// Replaces `out` with byte ranges whose union is exactly the union of the placed buffers
    /// that overlap slots `[lo, hi)`, `lo < hi`, sorted by offset (they may overlap).
    /// `runs` and `scratch` are reused buffers.
    pub fn collect(
        &mut self,
        lo: u32,
        hi: u32,
        out: &mut Vec<(u64, u64)>,
        runs: &mut Vec<usize>,
        scratch: &mut Vec<(u64, u64)>,
    ) {
        out.clear();
        runs.clear();
        let first = (lo >> self.shift) as usize;
        let last = ((hi - 1) >> self.shift) as usize;
        self.stack.clear();
        self.stack.push((1, 0, self.leaves));
        while let Some((index, l, r)) = self.stack.pop() {
            if r <= first || l > last || !self.filled.get(index).is_some_and(|&f| f) {
                continue;
            }
            let Some(node) = self.nodes.get(index) else {
                continue;
            };
            let covered = (lo as usize) <= (l << self.shift) && (r << self.shift) <= hi as usize;
            if covered && index >= self.first_union {
                push_run(out, runs, &node.all);
                continue;
            }
            push_run(out, runs, &node.own);
            if index >= self.leaves {
                // The partials are sorted by offset; overlapping or touching ones are merged
                // on the way, which keeps the run short without changing its union.
                let start = out.len();
                for p in node.partial.iter().filter(|p| p.lo < hi && lo < p.hi) {
                    push_merged(out, start, (p.offset, p.end));
                }
                if out.len() > start {
                    runs.push(start);
                }
            } else {
                let mid = (l + r) / 2;
                self.stack.push((2 * index + 1, mid, r));
                self.stack.push((2 * index, l, mid));
            }
        }
        merge_runs(out, runs, scratch);
    }
}

/// Appends a sorted list to `out` as one run.
fn push_run(out: &mut Vec<(u64, u64)>, runs: &mut Vec<usize>, list: &[(u64, u64)]) {
    if !list.is_empty() {
        runs.push(out.len());
        out.extend_from_slice(list);
    }
}

/// Appends `range` to the run of `out` that begins at `run_start`, which is sorted by offset
/// and no later than `range`, merging it into the run's last range when they overlap or
/// touch: the run's union is unchanged and it stays sorted, only shorter.
fn push_merged(out: &mut Vec<(u64, u64)>, run_start: usize, range: (u64, u64)) {
    match out.get_mut(run_start..).and_then(|run| run.last_mut()) {
        Some(last) if range.0 <= last.1 => last.1 = last.1.max(range.1),
        _ => out.push(range),
    }
}

/// Sorts `ranges` by offset, given that it is made of sorted runs starting at `runs`
/// (ascending), by merging the runs pairwise: `O(k log r)` for `k` ranges in `r` runs.
/// Ranges that overlap or touch are merged on the way, so the union is kept, not the list.
fn merge_runs(ranges: &mut Vec<(u64, u64)>, runs: &mut Vec<usize>, scratch: &mut Vec<(u64, u64)>) {
    while runs.len() > 1 {
        scratch.clear();
        let (count, len) = (runs.len(), ranges.len());
        let (mut read, mut write) = (0, 0);
        while read < count {
            let start = runs.get(read).copied().unwrap_or(len);
            let middle = runs.get(read + 1).copied().unwrap_or(len);
            let end = runs.get(read + 2).copied().unwrap_or(len);
            if let Some(slot) = runs.get_mut(write) {
                *slot = scratch.len();
            }
            let a = ranges.get(start..middle).unwrap_or(&[]);
            let b = ranges.get(middle..end).unwrap_or(&[]);
            let run_start = scratch.len();
            let (mut i, mut j) = (0, 0);
            while let (Some(&x), Some(&y)) = (a.get(i), b.get(j)) {
                if x.0 <= y.0 {
                    push_merged(scratch, run_start, x);
                    i += 1;
                } else {
                    push_merged(scratch, run_start, y);
                    j += 1;
                }
            }
            for &x in a
                .get(i..)
                .unwrap_or(&[])
                .iter()
                .chain(b.get(j..).unwrap_or(&[]))
            {
                push_merged(scratch, run_start, x);
            }
            read += 2;
            write += 1;
        }
        runs.truncate(write);
        std::mem::swap(ranges, scratch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::Buffer;

    #[test]
    fn slots_follow_distinct_times() {
        let p = Problem::new(vec![
            Buffer::new("a", 10, 20, 1),
            Buffer::new("b", 20, 40, 1),
        ]);
        let s = Slots::new(&p);
        assert_eq!((s.lo, s.hi, s.count), (vec![0, 1], vec![1, 2], 3));
    }

    #[test]
    fn add_range_merges_overlapping_and_touching_ranges() {
        let mut u = vec![(0, 2), (4, 6), (8, 10), (12, 14)];
        add_range(&mut u, 5, 8);
        assert_eq!(u, vec![(0, 2), (4, 10), (12, 14)]);
        add_range(&mut u, 2, 3);
        assert_eq!(u, vec![(0, 3), (4, 10), (12, 14)]);
        add_range(&mut u, 20, 30);
        add_range(&mut u, 15, 16);
        assert_eq!(u, vec![(0, 3), (4, 10), (12, 14), (15, 16), (20, 30)]);
        add_range(&mut u, 1, 25);
        assert_eq!(u, vec![(0, 30)]);
    }

    #[test]
    fn collect_reports_exactly_the_overlapping_buffers() {
        // Slot ranges of all shapes against every query range, compared with brute force.
        let mut ranges = Vec::new();
        for lo in 0..200u32 {
            for len in [1u32, 2, 7, 8, 9, 17, 33, 64, 65, 130] {
                ranges.push((lo, lo + len));
            }
        }
        let mut index = PlacedIndex::new(400, 40);
        for (i, &(lo, hi)) in ranges.iter().enumerate() {
            // Ranges that sometimes touch and sometimes leave gaps.
            index.insert(lo, hi, i as u64 * 10 + i as u64 % 3, i as u64 * 10 + 5);
        }
        let union = |ranges: &[(u64, u64)]| {
            let mut u = Vec::new();
            for &(s, e) in ranges {
                add_range(&mut u, s, e);
            }
            u
        };
        let (mut out, mut runs, mut scratch) = (Vec::new(), Vec::new(), Vec::new());
        for qlo in (0..300u32).step_by(7) {
            for qhi in (qlo + 1..qlo + 200).step_by(5) {
                index.collect(qlo, qhi, &mut out, &mut runs, &mut scratch);
                assert!(
                    out.is_sorted_by_key(|r| r.0),
                    "query [{qlo}, {qhi}): {out:?}"
                );
                let expected: Vec<(u64, u64)> = ranges
                    .iter()
                    .enumerate()
                    .filter(|&(_, &(lo, hi))| lo < qhi && qlo < hi)
                    .map(|(i, _)| (i as u64 * 10 + i as u64 % 3, i as u64 * 10 + 5))
                    .collect();
                assert_eq!(union(&out), union(&expected), "query [{qlo}, {qhi})");
            }
        }
    }
}
