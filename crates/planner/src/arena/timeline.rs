//! Compressed time and an index of placed buffers by time.
//!
//! [`Slots`] renumbers the distinct start and end times `t_0 < t_1 < ...` so that slot `j`
//! is the span `[t_j, t_{j+1})`; a buffer live over `[start, end)` covers the slots
//! `[lo, hi)` with `t_lo = start` and `t_hi = end`. Two buffers overlap in time exactly when
//! their slot ranges do.
//!
//! [`PlacedIndex`] holds the byte ranges of placed buffers and answers "which placed buffers
//! overlap these slots" by visiting only those. It is a segment tree over buckets of
//! consecutive slots: a buffer is stored at the canonical nodes covering the buckets it
//! spans completely, and at the leaf buckets it covers only in part (where a query filters
//! by slot range). A query descends from the root, skipping subtrees that hold nothing or lie
//! outside the query, so it costs `O(log n)` plus the entries it reports. A buffer stored at
//! several visited nodes is reported more than once; callers only use the union of the byte
//! ranges, for which duplicates are harmless.

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

/// One placed buffer as the index stores it: its bytes `[offset, end)` and slots `[lo, hi)`.
#[derive(Clone, Copy, Debug)]
struct Entry {
    offset: u64,
    end: u64,
    lo: u32,
    hi: u32,
}

/// Placed buffers, queried by slot range (see the module docs).
#[derive(Debug)]
pub(crate) struct PlacedIndex {
    /// log2 of the number of slots per leaf bucket.
    shift: u32,
    /// Number of leaves, a power of two; node 1 is the root, node `leaves + b` is bucket `b`.
    leaves: usize,
    /// Entries stored at each node.
    lists: Vec<Vec<Entry>>,
    /// Entries stored in each node's subtree, itself included.
    counts: Vec<u32>,
    /// Reused traversal stack.
    stack: Vec<(usize, usize, usize)>,
}

/// Slots per leaf bucket, as a power of two; chosen by measurement on the generated
/// benchmark instances (buckets of 8 slots beat 1, 4 and 32).
const BUCKET_SHIFT: u32 = 3;

impl PlacedIndex {
    /// An empty index over `slots` slots.
    pub fn new(slots: u32) -> PlacedIndex {
        let buckets = ((slots as usize) >> BUCKET_SHIFT) + 1;
        let leaves = buckets.next_power_of_two();
        PlacedIndex {
            shift: BUCKET_SHIFT,
            leaves,
            lists: vec![Vec::new(); 2 * leaves],
            counts: vec![0; 2 * leaves],
            stack: Vec::new(),
        }
    }

    /// Records a placed buffer with bytes `[offset, end)` over slots `[lo, hi)`, `lo < hi`.
    pub fn insert(&mut self, lo: u32, hi: u32, offset: u64, end: u64) {
        let entry = Entry { offset, end, lo, hi };
        let mask = (1u32 << self.shift) - 1;
        let first = (lo >> self.shift) as usize;
        let last = ((hi - 1) >> self.shift) as usize;
        if first == last {
            self.store(self.leaves + first, entry);
            return;
        }
        let mut from = first;
        if lo & mask != 0 {
            self.store(self.leaves + first, entry);
            from += 1;
        }
        let mut to = last + 1;
        if hi & mask != 0 {
            self.store(self.leaves + last, entry);
            to -= 1;
        }
        let (mut l, mut r) = (from + self.leaves, to + self.leaves);
        while l < r {
            if l & 1 == 1 {
                self.store(l, entry);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                self.store(r, entry);
            }
            l >>= 1;
            r >>= 1;
        }
    }

    fn store(&mut self, node: usize, entry: Entry) {
        if let Some(list) = self.lists.get_mut(node) {
            list.push(entry);
        }
        let mut n = node;
        while n > 0 {
            if let Some(c) = self.counts.get_mut(n) {
                *c += 1;
            }
            n >>= 1;
        }
    }

    /// Appends `(offset, end)` of every placed buffer overlapping slots `[lo, hi)` to `out`,
    /// possibly more than once each, in no particular order.
    pub fn collect(&mut self, lo: u32, hi: u32, out: &mut Vec<(u64, u64)>) {
        let first = (lo >> self.shift) as usize;
        let last = ((hi - 1) >> self.shift) as usize;
        self.stack.clear();
        self.stack.push((1, 0, self.leaves));
        while let Some((node, l, r)) = self.stack.pop() {
            if r <= first || l > last || self.counts.get(node).is_none_or(|&c| c == 0) {
                continue;
            }
            let Some(list) = self.lists.get(node) else { continue };
            if node >= self.leaves {
                out.extend(
                    list.iter().filter(|e| e.lo < hi && lo < e.hi).map(|e| (e.offset, e.end)),
                );
            } else {
                out.extend(list.iter().map(|e| (e.offset, e.end)));
                let mid = (l + r) / 2;
                self.stack.push((2 * node + 1, mid, r));
                self.stack.push((2 * node, l, mid));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::Buffer;

    #[test]
    fn slots_follow_distinct_times() {
        let p = Problem::new(vec![Buffer::new("a", 10, 20, 1), Buffer::new("b", 20, 40, 1)]);
        let s = Slots::new(&p);
        assert_eq!((s.lo, s.hi, s.count), (vec![0, 1], vec![1, 2], 3));
    }

    #[test]
    fn collect_reports_exactly_the_overlapping_buffers() {
        // Slot ranges of all shapes against every query range, compared with brute force.
        let mut ranges = Vec::new();
        for lo in 0..40u32 {
            for len in [1u32, 2, 7, 8, 9, 17, 33] {
                ranges.push((lo, lo + len));
            }
        }
        let mut index = PlacedIndex::new(80);
        for (i, &(lo, hi)) in ranges.iter().enumerate() {
            index.insert(lo, hi, i as u64 * 10, i as u64 * 10 + 5);
        }
        let mut out = Vec::new();
        for qlo in 0..60u32 {
            for qhi in qlo + 1..qlo + 20 {
                out.clear();
                index.collect(qlo, qhi, &mut out);
                out.sort_unstable();
                out.dedup();
                let expected: Vec<(u64, u64)> = ranges
                    .iter()
                    .enumerate()
                    .filter(|(_, &(lo, hi))| lo < qhi && qlo < hi)
                    .map(|(i, _)| (i as u64 * 10, i as u64 * 10 + 5))
                    .collect();
                assert_eq!(out, expected, "query [{qlo}, {qhi})");
            }
        }
    }
}
