//! Unions of byte ranges in blocks that know their largest gap, so that a query for a gap of
//! `size` bytes reads a block's ranges only when the block holds such a gap.
//!
//! A [`BlockUnion`] holds sorted, disjoint, non-touching ranges `[offset, end)` (a union:
//! a range added is merged with every range it overlaps or touches). They are kept in
//! blocks of at most [`BLOCK`] consecutive ranges; beside each block a directory entry
//! keeps its first start, its last end and its *largest inner gap* (the longest free
//! interval between two consecutive ranges of the block). Adding a range moves at most a
//! block's worth of memory, whatever the union's length.
//!
//! [`BlockUnion::push_filtered`] appends the union to a list with every block whose largest
//! inner gap is shorter than `min_gap` replaced by one range from its first start to its last
//! end: the free intervals of at least `min_gap` bytes (and the top) are exactly those of
//! the union, because the only ones filled are inner gaps shorter than `min_gap`. That is the
//! guarantee the placed-buffer index's queries rely on (see
//! `PlacedIndex::for_each_occupied`): a query for a buffer of `size` bytes reads the
//! directory and the blocks that hold a gap it may use, not every range, so its cost does not
//! grow with the fragmentation of packed bytes it cannot use.

/// The most ranges a block holds; a block that would hold more is split in two.
pub(crate) const BLOCK: usize = 128;

/// A block's directory entry (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Meta {
    first: u64,
    last: u64,
    gap: u64,
}

/// A union of byte ranges in blocks (see the module docs).
#[derive(Clone, Debug, Default)]
pub(crate) struct BlockUnion {
    meta: Vec<Meta>,
    blocks: Vec<Vec<(u64, u64)>>,
    len: usize,
}

/// The largest gap between consecutive ranges of a sorted, disjoint list (0 when it has
/// fewer than two).
fn inner_gap(ranges: &[(u64, u64)]) -> u64 {
    ranges
        .windows(2)
        .map(|w| match w {
            [a, b] => b.0.saturating_sub(a.1),
            _ => 0,
        })
        .max()
        .unwrap_or(0)
}

fn meta_of(ranges: &[(u64, u64)]) -> Meta {
    Meta {
        first: ranges.first().map_or(0, |r| r.0),
        last: ranges.last().map_or(0, |r| r.1),
        gap: inner_gap(ranges),
    }
}

impl BlockUnion {
    pub(crate) fn clear(&mut self) {
        self.meta.clear();
        self.blocks.clear();
        self.len = 0;
    }

    /// The number of ranges.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The ranges in offset order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.blocks.iter().flatten().copied()
    }

    /// The ranges of a union of at most one block, as a slice.
    fn single(&self) -> Option<&[(u64, u64)]> {
        match self.blocks.as_slice() {
            [] => Some(&[]),
            [block] => Some(block),
            _ => None,
        }
    }

    /// Adds `[start, end)`, `start < end`, merging it with every range it overlaps or
    /// touches.
    pub(crate) fn add(&mut self, start: u64, end: u64) {
        // The first block that may hold a range touching `[start, end]`: the first whose last
        // end is at or above `start` (ends grow with starts in a union).
        let b = self.meta.partition_point(|m| m.last < start);
        let Some(block) = self.blocks.get_mut(b) else {
            // Above every range (or the union is empty): a new last range.
            match self.blocks.last_mut() {
                Some(last) if last.len() < BLOCK => {
                    let gap = start - last.last().map_or(start, |r| r.1);
                    last.push((start, end));
                    if let Some(m) = self.meta.last_mut() {
                        m.last = end;
                        m.gap = m.gap.max(gap);
                    }
                }
                _ => {
                    self.blocks.push(vec![(start, end)]);
                    self.meta.push(Meta {
                        first: start,
                        last: end,
                        gap: 0,
                    });
                }
            }
            self.len += 1;
            return;
        };
        let first = block.partition_point(|&(_, e)| e < start);
        // Whether the merge stays inside block `b`: the next block starts above `end`.
        let next_first = self.meta.get(b + 1).map_or(u64::MAX, |m| m.first);
        if next_first > end {
            let past = block.partition_point(|&(s, _)| s <= end);
            if first >= past {
                block.insert(first, (start, end));
                self.len += 1;
            } else {
                let merged_start = block.get(first).map_or(start, |r| r.0.min(start));
                let merged_end = block.get(past - 1).map_or(end, |r| r.1.max(end));
                if let Some(slot) = block.get_mut(first) {
                    *slot = (merged_start, merged_end);
                }
                block.drain(first + 1..past);
                self.len -= past - first - 1;
            }
            self.refresh(b);
            return;
        }
        // The merge reaches later blocks: every range from block `b`'s `first` on that starts
        // at or below `end` goes into one.
        let last_b = self.meta.partition_point(|m| m.first <= end) - 1;
        let mut merged = (start, end);
        let mut removed = 0;
        for k in b..=last_b {
            let Some(block) = self.blocks.get_mut(k) else {
                break;
            };
            let from = if k == b { first } else { 0 };
            let to = if k == last_b {
                block.partition_point(|&(s, _)| s <= end)
            } else {
                block.len()
            };
            if let (Some(a), Some(z)) = (
                block.get(from),
                to.checked_sub(1).and_then(|t| block.get(t)),
            ) && from < to
            {
                merged = (merged.0.min(a.0), merged.1.max(z.1));
            }
            removed += to.saturating_sub(from);
            block.drain(from..to.max(from));
        }
        // The merged range goes at the end of block `b` (which keeps its earlier ranges).
        if let Some(block) = self.blocks.get_mut(b) {
            block.push(merged);
        }
        self.len = self.len + 1 - removed;
        for k in (b..=last_b).rev() {
            if self.blocks.get(k).is_some_and(Vec::is_empty) {
                self.blocks.remove(k);
                self.meta.remove(k);
            } else {
                self.refresh(k);
            }
        }
    }

    /// Recomputes block `b`'s directory entry, splitting the block when it is over
    /// [`BLOCK`] ranges.
    fn refresh(&mut self, b: usize) {
        let Some(block) = self.blocks.get_mut(b) else {
            return;
        };
        if block.len() > BLOCK {
            let tail = block.split_off(block.len() / 2);
            let (head_meta, tail_meta) = (meta_of(block), meta_of(&tail));
            if let Some(m) = self.meta.get_mut(b) {
                *m = head_meta;
            }
            self.blocks.insert(b + 1, tail);
            self.meta.insert(b + 1, tail_meta);
        } else if let Some(m) = self.meta.get_mut(b) {
            *m = meta_of(block);
        }
    }

    /// Appends the union to `out` in offset order, each block whose largest inner gap is
    /// shorter than `min_gap` as one range (see the module docs); `min_gap` 0 or 1 appends
    /// every range. Returns the number of ranges the union holds (the work of reading it
    /// unfiltered).
    pub(crate) fn push_filtered(&self, out: &mut Vec<(u64, u64)>, min_gap: u64) -> usize {
        for (m, block) in self.meta.iter().zip(&self.blocks) {
            if m.gap < min_gap {
                out.push((m.first, m.last));
            } else {
                out.extend_from_slice(block);
            }
        }
        self.len
    }

    /// Calls `f` with the union block by block in offset order, filtered for `min_gap` as
    /// [`BlockUnion::push_filtered`] (a block without such a gap as a one-range slice),
    /// and the first offset of the next block (`u64::MAX` after the last).
    pub(crate) fn for_each_block(&self, min_gap: u64, mut f: impl FnMut(&[(u64, u64)], u64)) {
        let mut blocks = self.meta.iter().zip(&self.blocks).peekable();
        while let Some((m, block)) = blocks.next() {
            let next = blocks.peek().map_or(u64::MAX, |(n, _)| n.first);
            if m.gap < min_gap {
                f(&[(m.first, m.last)], next);
            } else {
                f(block, next);
            }
        }
    }

    /// The union as a slice, filtered for `min_gap` as [`BlockUnion::push_filtered`]: the
    /// ranges themselves when the union is one block that holds such a gap, otherwise
    /// written into `buf`.
    pub(crate) fn view<'a>(
        &'a self,
        min_gap: u64,
        buf: &'a mut Vec<(u64, u64)>,
    ) -> &'a [(u64, u64)] {
        if let Some(ranges) = self.single()
            && self
                .meta
                .first()
                .is_none_or(|m| m.gap >= min_gap || ranges.len() <= 1)
        {
            return ranges;
        }
        buf.clear();
        self.push_filtered(buf, min_gap);
        buf
    }

    /// Checks the invariants (tests only): ranges sorted, disjoint and not touching, blocks
    /// non-empty and at most [`BLOCK`] long, the directory and the count right.
    #[cfg(test)]
    pub(crate) fn check(&self) {
        assert_eq!(self.meta.len(), self.blocks.len());
        let mut count = 0;
        for (m, block) in self.meta.iter().zip(&self.blocks) {
            assert!(!block.is_empty() && block.len() <= BLOCK);
            assert_eq!(*m, meta_of(block));
            count += block.len();
        }
        assert_eq!(count, self.len);
        let all: Vec<(u64, u64)> = self.iter().collect();
        for w in all.windows(2) {
            if let [a, b] = w {
                assert!(a.0 < a.1 && a.1 < b.0, "{a:?} then {b:?}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::SplitMix64;

    /// The union kept as one sorted list, merging as the index always did.
    fn add_plain(union: &mut Vec<(u64, u64)>, start: u64, end: u64) {
        let first = union.partition_point(|&(_, e)| e < start);
        let past = union.partition_point(|&(s, _)| s <= end);
        if first >= past {
            union.insert(first, (start, end));
            return;
        }
        let s = union.get(first).map_or(start, |r| r.0.min(start));
        let e = union.get(past - 1).map_or(end, |r| r.1.max(end));
        union[first] = (s, e);
        union.drain(first + 1..past);
    }

    /// The free intervals of at least `min_gap` bytes between the ranges (from 0) and the top.
    fn wide_gaps(ranges: &[(u64, u64)], min_gap: u64) -> (Vec<(u64, u64)>, u64) {
        let mut top = 0;
        let mut gaps = Vec::new();
        for &(s, e) in ranges {
            if s >= top + min_gap.max(1) {
                gaps.push((top, s));
            }
            top = top.max(e);
        }
        (gaps, top)
    }

    /// Random additions of short and long ranges, against the plain list: the same ranges
    /// after every addition, the invariants kept, and every filtered view leaves the same
    /// gaps of at least `min_gap` bytes, covers every range, and is sorted.
    #[test]
    fn blocks_keep_the_union_and_filter_exactly() {
        let mut rng = SplitMix64::new(40);
        for case in 0..60 {
            let mut blocks = BlockUnion::default();
            let mut plain = Vec::new();
            let span = 200 + rng.below(5000);
            let adds = 50 + rng.below(600);
            for step in 0..adds {
                let len = if rng.below(10) == 0 {
                    1 + rng.below(span / 4)
                } else {
                    1 + rng.below(6)
                };
                let start = rng.below(span);
                blocks.add(start, start + len);
                add_plain(&mut plain, start, start + len);
                if step % 17 == 0 || step + 1 == adds {
                    blocks.check();
                    let got: Vec<(u64, u64)> = blocks.iter().collect();
                    assert_eq!(got, plain, "case {case}, step {step}");
                    for min_gap in [0, 1, 2, 3, 5, 8, 13, 40] {
                        let mut out = Vec::new();
                        assert_eq!(blocks.push_filtered(&mut out, min_gap), plain.len());
                        assert!(out.is_sorted_by_key(|r| r.0));
                        assert_eq!(wide_gaps(&out, min_gap), wide_gaps(&plain, min_gap));
                        assert!(
                            plain
                                .iter()
                                .all(|&(s, e)| { out.iter().any(|&(a, b)| a <= s && e <= b) })
                        );
                        let mut buf = Vec::new();
                        let view = blocks.view(min_gap, &mut buf).to_vec();
                        assert_eq!(wide_gaps(&view, min_gap), wide_gaps(&plain, min_gap));
                    }
                }
            }
        }
    }

    /// A union of many short ranges with small gaps and one wide gap: a query for the wide
    /// gap reads the one block that holds it, and the others as one range each.
    #[test]
    fn a_query_reads_only_blocks_with_a_gap_that_fits() {
        let mut u = BlockUnion::default();
        for k in 0..1000u64 {
            let at = k * 10 + if k >= 500 { 100 } else { 0 };
            u.add(at, at + 8);
        }
        u.check();
        let mut out = Vec::new();
        assert_eq!(u.push_filtered(&mut out, 50), 1000);
        let blocks = u.blocks.len();
        assert!(
            out.len() < blocks + BLOCK,
            "{} ranges for {blocks} blocks",
            out.len()
        );
        assert_eq!(wide_gaps(&out, 50).0, vec![(4998, 5100)]);
        out.clear();
        u.push_filtered(&mut out, 1);
        assert_eq!(out.len(), 1000);
    }
}
