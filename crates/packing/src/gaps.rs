//! Sets of byte ranges that find their smallest gap of at least `size` bytes without reading
//! every range, and best fit against such a set and a few ranges more.
//!
//! A [`Ranges`] holds sorted, disjoint half-open ranges `[offset, end)`. Its *gaps* are the
//! maximal free intervals below its top: between consecutive ranges that do not touch, and
//! `[0, first)` when the first range starts above 0. (The space above the top is not a gap:
//! best fit places there only when no gap fits.) These are exactly the gaps that best fit
//! walks when it reads the ranges in offset order, so a gap found here is the gap it would
//! find, with the same length and start.
//!
//! Two kinds: a *live set* ([`Ranges::insert`], [`Ranges::remove`]) keeps every range as
//! given (ranges may touch), so that one can be taken out again, as the sweep of
//! `long-short` (`split`) needs; a *union* (`Ranges::add`, built by the tests only so far)
//! merges a range into the ranges it overlaps or touches, as the placed-buffer index's
//! covers would need to answer queries without reading every range.
//!
//! Ranges are kept in a [`Chunked`] sorted set, chunks of at most [`CHUNK`] entries under a
//! directory, so that adding or removing one moves at most a chunk's worth of memory whatever
//! the set's length. An *indexed* set also keeps its gaps in a second [`Chunked`] set, sorted
//! by `(length, start)`: the smallest gap of at least `size` bytes is the first suitable entry
//! at or after `(size, 0)`. A query reads `O(log n)` entries plus those it passes over (gaps
//! its caller excludes, or too short once aligned), never the whole set.
//!
//! [`fit`] is best fit against the union of an indexed set `D` and a short union `O` of
//! other ranges (which may overlap `D`'s): the smallest gap of `D` that `O` does not touch,
//! or a piece of free space next to a range of `O`, whichever is smaller.

use super::problem::align_up;

/// The most entries a chunk holds; a chunk that would hold more is split in two.
const CHUNK: usize = 64;

/// A position in a [`Chunked`] set: chunk and index in it.
type Pos = (usize, usize);

/// A sorted set of pairs, in chunks (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Chunked {
    /// The entries, chunk by chunk in order; no chunk is empty.
    chunks: Vec<Vec<(u64, u64)>>,
    /// The first entry of each chunk (a directory for binary searches).
    firsts: Vec<(u64, u64)>,
    len: usize,
}

impl Chunked {
    fn get(&self, (c, i): Pos) -> Option<(u64, u64)> {
        self.chunks.get(c).and_then(|chunk| chunk.get(i)).copied()
    }

    /// The same position, moved to the next chunk's first entry if it is past its chunk's
    /// end (as a removal can leave it).
    #[cfg(test)]
    fn normalize(&self, (c, i): Pos) -> Pos {
        match self.chunks.get(c) {
            Some(chunk) if i >= chunk.len() => (c + 1, 0),
            _ => (c, i),
        }
    }

    /// The position of the first entry not below `key` (one past the end if none).
    fn lower_bound(&self, key: (u64, u64)) -> Pos {
        let c = self.firsts.partition_point(|&f| f <= key).saturating_sub(1);
        let Some(chunk) = self.chunks.get(c) else {
            return (0, 0);
        };
        let i = chunk.partition_point(|&e| e < key);
        if i < chunk.len() { (c, i) } else { (c + 1, 0) }
    }

    fn next(&self, (c, i): Pos) -> Pos {
        match self.chunks.get(c) {
            Some(chunk) if i + 1 < chunk.len() => (c, i + 1),
            _ => (c + 1, 0),
        }
    }

    fn prev(&self, (c, i): Pos) -> Option<Pos> {
        if i > 0 {
            Some((c, i - 1))
        } else if c > 0 {
            let chunk = self.chunks.get(c - 1)?;
            Some((c - 1, chunk.len().checked_sub(1)?))
        } else {
            None
        }
    }

    fn last(&self) -> Option<(u64, u64)> {
        self.chunks.last().and_then(|c| c.last()).copied()
    }

    fn insert(&mut self, key: (u64, u64)) {
        self.len += 1;
        if self.chunks.is_empty() {
            self.chunks.push(vec![key]);
            self.firsts.push(key);
            return;
        }
        let (mut c, mut i) = self.lower_bound(key);
        // Past a chunk's last entry and before the next chunk's first: the end of the lower
        // chunk, which keeps the directory's entries as they are.
        if c > 0 && (c >= self.chunks.len() || i == 0) {
            c -= 1;
            i = self.chunks.get(c).map_or(0, Vec::len);
        }
        let Some(chunk) = self.chunks.get_mut(c) else {
            return;
        };
        chunk.insert(i.min(chunk.len()), key);
        if i == 0
            && let Some(f) = self.firsts.get_mut(c)
        {
            *f = key;
        }
        if chunk.len() > CHUNK {
            let tail = chunk.split_off(CHUNK / 2);
            let first = tail.first().copied().unwrap_or(key);
            self.chunks.insert(c + 1, tail);
            self.firsts.insert(c + 1, first);
        }
    }

    /// Removes the entry at a position (which must hold one).
    fn remove_at(&mut self, (c, i): Pos) {
        let Some(chunk) = self.chunks.get_mut(c) else {
            return;
        };
        if i >= chunk.len() {
            return;
        }
        chunk.remove(i);
        self.len -= 1;
        match chunk.first() {
            Some(&first) => {
                if let Some(f) = self.firsts.get_mut(c) {
                    *f = first;
                }
            }
            None => {
                self.chunks.remove(c);
                self.firsts.remove(c);
            }
        }
    }

    /// Removes `key`; whether it was there.
    fn remove(&mut self, key: (u64, u64)) -> bool {
        let at = self.lower_bound(key);
        if self.get(at) == Some(key) {
            self.remove_at(at);
            true
        } else {
            false
        }
    }

    /// The entries from a position on, in order.
    fn iter_from(&self, (c, i): Pos) -> impl Iterator<Item = (u64, u64)> + '_ {
        let first = self
            .chunks
            .get(c)
            .and_then(|chunk| chunk.get(i..))
            .unwrap_or(&[]);
        let rest = self.chunks.get(c + 1..).unwrap_or(&[]);
        first.iter().chain(rest.iter().flatten()).copied()
    }
}

/// A set of disjoint byte ranges: a union or a live set (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Ranges {
    ranges: Chunked,
    /// Whether the gaps are kept by length.
    indexed: bool,
    /// The gaps as `(length, start)`, sorted (empty unless indexed).
    gaps: Chunked,
}

/// Where an offset falls in a [`Ranges`]: inside a range, or in the free space between the
/// end of the range below (`below`, 0 if none) and the start of the range above (`above`,
/// `None` above the top).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Around {
    Inside((u64, u64)),
    Free { below: u64, above: Option<u64> },
}

impl Ranges {
    /// An empty set that keeps its gaps by length when `indexed`.
    pub(crate) fn new(indexed: bool) -> Ranges {
        Ranges {
            indexed,
            ..Ranges::default()
        }
    }

    /// Whether the gaps are kept by length.
    #[cfg(test)]
    pub(crate) fn indexed(&self) -> bool {
        self.indexed
    }

    /// The end of the highest range (0 when empty).
    pub(crate) fn top(&self) -> u64 {
        self.ranges.last().map_or(0, |r| r.1)
    }

    /// The ranges in offset order.
    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges.iter_from((0, 0))
    }

    /// The position of the first range whose end is above `x`: ranges are disjoint, so ends
    /// grow with starts, and it is the range containing `x` or the first above it.
    fn first_ending_above(&self, x: u64) -> Pos {
        let at = self.ranges.lower_bound((x, u64::MAX));
        match self.ranges.prev(at) {
            Some(p) if self.ranges.get(p).is_some_and(|r| r.1 > x) => p,
            _ => at,
        }
    }

    /// Where `x` falls (see [`Around`]).
    pub(crate) fn around(&self, x: u64) -> Around {
        let at = self.first_ending_above(x);
        let below = self
            .ranges
            .prev(at)
            .and_then(|p| self.ranges.get(p))
            .map_or(0, |r| r.1);
        match self.ranges.get(at) {
            Some(r) if r.0 <= x => Around::Inside(r),
            above => Around::Free {
                below,
                above: above.map(|r| r.0),
            },
        }
    }

    fn add_gap(&mut self, start: u64, end: u64) {
        if self.indexed && end > start {
            self.gaps.insert((end - start, start));
        }
    }

    fn remove_gap(&mut self, start: u64, end: u64) {
        if self.indexed && end > start {
            self.gaps.remove((end - start, start));
        }
    }

    /// Adds `[start, end)`, `start < end`, to a union: merged with every range it overlaps
    /// or touches. Returns the number of ranges it merged with. (Only the tests build unions
    /// for now: the placed-buffer index keeps its own, see the module docs.)
    #[cfg(test)]
    pub(crate) fn add(&mut self, start: u64, end: u64) -> usize {
        // The first range that ends at or after `start`: the first that may touch or overlap.
        let mut first = self.first_ending_above(start.saturating_sub(1));
        let below = self
            .ranges
            .prev(first)
            .and_then(|p| self.ranges.get(p))
            .map_or(0, |r| r.1);
        let mut merged = (start, end);
        let mut count = 0;
        // The end of the last range merged (the gaps between merged ranges go).
        let mut last_end = None;
        while let Some(r) = self.ranges.get(first) {
            if r.0 > end {
                break;
            }
            match last_end {
                // The gap below the first merged range goes.
                None => self.remove_gap(below, r.0),
                Some(e) => self.remove_gap(e, r.0),
            }
            last_end = Some(r.1);
            merged = (merged.0.min(r.0), merged.1.max(r.1));
            self.ranges.remove_at(first);
            first = self.ranges.normalize(first);
            count += 1;
        }
        let above = self.ranges.get(first).map(|r| r.0);
        if let Some(above) = above {
            // The gap above: `[start, end)` fell in it, or it followed the last merged range.
            self.remove_gap(last_end.unwrap_or(below), above);
            self.add_gap(merged.1, above);
        }
        self.add_gap(below, merged.0);
        self.ranges.insert(merged);
        count
    }

    /// Adds `[start, end)`, which overlaps no range, to a live set, as an entry of its own.
    /// Returns `false` (and changes nothing) when it overlaps a range.
    pub(crate) fn insert(&mut self, start: u64, end: u64) -> bool {
        let at = self.first_ending_above(start);
        let below = self
            .ranges
            .prev(at)
            .and_then(|p| self.ranges.get(p))
            .map_or(0, |r| r.1);
        let above = self.ranges.get(at).map(|r| r.0);
        if above.is_some_and(|a| a < end) || end <= start {
            return false;
        }
        if let Some(above) = above {
            self.remove_gap(below, above);
            self.add_gap(end, above);
        }
        self.add_gap(below, start);
        self.ranges.insert((start, end));
        true
    }

    /// Takes the entry `[start, end)` out of a live set; whether it was there.
    pub(crate) fn remove(&mut self, start: u64, end: u64) -> bool {
        let at = self.ranges.lower_bound((start, end));
        if self.ranges.get(at) != Some((start, end)) {
            return false;
        }
        let below = self
            .ranges
            .prev(at)
            .and_then(|p| self.ranges.get(p))
            .map_or(0, |r| r.1);
        let above = self.ranges.get(self.ranges.next(at)).map(|r| r.0);
        self.remove_gap(below, start);
        if let Some(above) = above {
            self.remove_gap(end, above);
            self.add_gap(below, above);
        }
        self.ranges.remove_at(at);
        true
    }

    /// The smallest gap (by length, then start) of at least `size` bytes that holds `size`
    /// bytes at an offset aligned to `align` (a power of two) and for which `excluded` is
    /// false (given its start and end). Returns the gap's length and start, and the number of
    /// entries read. `None` also when the set is not indexed.
    pub(crate) fn smallest_gap(
        &self,
        size: u64,
        align: u64,
        mut excluded: impl FnMut(u64, u64) -> bool,
    ) -> (Option<(u64, u64)>, u64) {
        let mut read = 0u64;
        if !self.indexed || size == 0 {
            return (None, read);
        }
        for (len, start) in self.gaps.iter_from(self.gaps.lower_bound((size, 0))) {
            read += 1;
            let end = start + len;
            let fits = align_up(start, align).is_some_and(|a| a <= end && end - a >= size);
            if fits && !excluded(start, end) {
                return (Some((len, start)), read);
            }
        }
        (None, read)
    }

    /// Checks the invariants (tests only): ranges sorted and disjoint (and, in a union, not
    /// touching), the directories and counts right, and the index holding exactly the gaps.
    #[cfg(test)]
    pub(crate) fn check(&self, union: bool) {
        for set in [&self.ranges, &self.gaps] {
            assert_eq!(set.chunks.len(), set.firsts.len());
            let mut count = 0;
            for (chunk, &first) in set.chunks.iter().zip(&set.firsts) {
                assert!(!chunk.is_empty() && chunk.len() <= CHUNK);
                assert_eq!(first, chunk[0]);
                count += chunk.len();
            }
            assert_eq!(count, set.len);
            let all: Vec<(u64, u64)> = set.iter_from((0, 0)).collect();
            assert!(all.is_sorted(), "{all:?}");
        }
        let mut prev: Option<(u64, u64)> = None;
        let mut gaps = Vec::new();
        for r in self.iter() {
            assert!(r.0 < r.1, "{r:?}");
            let below = prev.map_or(0, |p| p.1);
            if let Some(p) = prev {
                assert!(p.1 <= r.0, "{p:?} then {r:?}");
                assert!(!union || p.1 < r.0, "{p:?} touches {r:?}");
            }
            if r.0 > below {
                gaps.push((r.0 - below, below));
            }
            prev = Some(r);
        }
        if self.indexed {
            let indexed: Vec<(u64, u64)> = self.gaps.iter_from((0, 0)).collect();
            gaps.sort_unstable();
            assert_eq!(indexed, gaps);
        }
    }
}

/// Best fit for `size > 0` bytes aligned to `align` against the union of the indexed set `d`
/// and the union `o` (sorted, disjoint, not touching; it may overlap `d`): the smallest gap
/// of that union, by length then start, that holds the buffer, as [`Fit::Gap`] with the
/// lowest aligned offset in it, or [`Fit::Top`] with the union's top when none does. The
/// second value is the work done (entries read and searches made).
///
/// A gap of `d ∪ o` (a maximal free interval below its top) whose two ends are both ends of
/// ranges of `d` (or 0) is a gap of `d` that no range of `o` meets; the others have an end
/// at a range of `o`, and are found from that range: the free space just above its end, or
/// just below its start, up to the nearest range of either set. Callers keep offsets at
/// most `u64::MAX / 2`, so aligning never overflows.
pub(crate) fn fit(d: &Ranges, o: &[(u64, u64)], size: u64, align: u64) -> (Fit, u64) {
    let top = d.top().max(o.last().map_or(0, |r| r.1));
    let mut best: Option<(u64, u64)> = None;
    let mut consider = |from: u64, to: u64| {
        if to > from
            && let Some(aligned) = align_up(from, align)
            && aligned <= to
            && to - aligned >= size
            && best.is_none_or(|b| (to - from, from) < b)
        {
            best = Some((to - from, from));
        }
    };
    // The range of `o` that starts after `x`, if any, from position `k` on.
    let next_o = |k: usize| o.get(k).map(|r| r.0);
    let mut work = 0u64;
    for (k, &(start, end)) in o.iter().enumerate() {
        work += 2;
        // Below `start`: free down to the nearest range of either set, unless `start` is
        // inside a range of `d` or touches one.
        if let Around::Free { below, .. } = d.around(start.saturating_sub(1))
            && start > 0
        {
            let prev_o = k.checked_sub(1).and_then(|j| o.get(j)).map_or(0, |r| r.1);
            consider(below.max(prev_o), start);
        }
        // Above `end`: free up to the nearest range of either set, unless inside one of
        // `d`'s; above everything it is no gap.
        if let Around::Free { above, .. } = d.around(end) {
            let to = match (above, next_o(k + 1)) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if let Some(to) = to {
                consider(end, to);
            }
        }
    }
    // The gaps of `d` that `o` does not meet: the first range of `o` ending above a gap's
    // start must start at or after its end.
    let (own, read) = d.smallest_gap(size, align, |from, to| {
        let k = o.partition_point(|r| r.1 <= from);
        o.get(k).is_some_and(|r| r.0 < to)
    });
    work += read * (1 + u64::from(usize::BITS - o.len().leading_zeros()));
    if let Some(gap) = own
        && best.is_none_or(|b| gap < b)
    {
        best = Some(gap);
    }
    let found = match best.and_then(|(_, start)| align_up(start, align)) {
        Some(offset) => Fit::Gap(offset),
        None => Fit::Top(top),
    };
    (found, work)
}

/// What best fit found: the aligned offset in the smallest gap that fits, or, when none
/// does, the top of the occupied bytes (to be aligned up by the caller).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fit {
    /// The lowest aligned offset of the smallest gap that fits.
    Gap(u64),
    /// No gap fits; the occupied bytes end here.
    Top(u64),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::SplitMix64;

    /// The obvious union: a sorted vector, merged on every insertion.
    fn add_plain(union: &mut Vec<(u64, u64)>, start: u64, end: u64) {
        let first = union.partition_point(|&(_, e)| e < start);
        let past = union.partition_point(|&(s, _)| s <= end);
        if first >= past {
            union.insert(first, (start, end));
            return;
        }
        let merged = (union[first].0.min(start), union[past - 1].1.max(end));
        union[first] = merged;
        union.drain(first + 1..past);
    }

    /// Best fit read in offset order, as the heuristics do: the smallest gap (then lowest)
    /// that holds `size` bytes aligned, or the top.
    fn fit_plain(ranges: &[(u64, u64)], size: u64, align: u64) -> Fit {
        let mut sorted = ranges.to_vec();
        sorted.sort_unstable();
        let mut top = 0;
        let mut best: Option<(u64, u64)> = None;
        for &(s, e) in &sorted {
            if s > top {
                let aligned = top.div_ceil(align) * align;
                if aligned <= s && s - aligned >= size && best.is_none_or(|b| s - top < b.0) {
                    best = Some((s - top, top));
                }
            }
            top = top.max(e);
        }
        match best {
            Some((_, start)) => Fit::Gap(start.div_ceil(align) * align),
            None => Fit::Top(top),
        }
    }

    /// Random additions to a union and random insertions and removals in a live set, of all
    /// lengths, some spanning many chunks: the ranges, their gaps and where offsets fall agree
    /// with the obvious implementation, and best fit against the set and a few other ranges
    /// (overlapping it or not) agrees with best fit over everything read in order.
    #[test]
    fn ranges_and_fit_agree_with_the_obvious_ones() {
        let mut rng = SplitMix64::new(40);
        for case in 0..80 {
            let union = case % 2 == 0;
            let mut set = Ranges::new(case % 8 != 7);
            let mut plain: Vec<(u64, u64)> = Vec::new();
            let span = 16 + rng.below(1 << (6 + case % 12));
            let steps = 50 + rng.below(700);
            for step in 0..steps {
                let start = rng.below(span);
                let len = 1 + if rng.below(40) == 0 {
                    rng.below(span)
                } else {
                    rng.below(1 + span / 100)
                };
                if union {
                    set.add(start, start + len);
                    add_plain(&mut plain, start, start + len);
                } else if rng.below(3) == 0 && !plain.is_empty() {
                    let k = rng.below(plain.len() as u64) as usize;
                    let (s, e) = plain.remove(k);
                    assert!(set.remove(s, e));
                    assert!(!set.remove(s, e));
                } else {
                    let free = plain.iter().all(|&(s, e)| start + len <= s || e <= start);
                    assert_eq!(set.insert(start, start + len), free, "case {case}");
                    if free {
                        let at = plain.partition_point(|r| r.0 < start);
                        plain.insert(at, (start, start + len));
                    }
                }
                if step % 23 != 0 && step + 1 != steps {
                    continue;
                }
                set.check(union);
                assert_eq!(set.iter().collect::<Vec<_>>(), plain, "case {case}");
                assert_eq!(set.top(), plain.last().map_or(0, |r| r.1));
                for _ in 0..10 {
                    let x = rng.below(span + 10);
                    let expected = match plain.iter().find(|&&(s, e)| s <= x && x < e) {
                        Some(&r) => Around::Inside(r),
                        None => Around::Free {
                            below: plain
                                .iter()
                                .filter(|r| r.1 <= x)
                                .map(|r| r.1)
                                .max()
                                .unwrap_or(0),
                            above: plain.iter().find(|r| r.0 > x).map(|r| r.0),
                        },
                    };
                    assert_eq!(set.around(x), expected, "case {case} x {x}");
                }
                if !set.indexed() {
                    continue;
                }
                for _ in 0..15 {
                    // `o`: a few ranges anywhere, as a union.
                    let mut o = Vec::new();
                    for _ in 0..rng.below(6) {
                        let s = rng.below(span + span / 4);
                        add_plain(&mut o, s, s + 1 + rng.below(1 + span / 30));
                    }
                    let size = 1 + rng.below(1 + span / 40);
                    let align = 1 << rng.below(4);
                    let mut all = plain.clone();
                    all.extend(&o);
                    let (got, _) = fit(&set, &o, size, align);
                    assert_eq!(
                        got,
                        fit_plain(&all, size, align),
                        "case {case} size {size} align {align} o {o:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn gaps_start_at_zero_and_stop_at_the_top() {
        let mut set = Ranges::new(true);
        set.add(10, 20);
        set.add(30, 35);
        set.check(true);
        // Gaps [0, 10) and [20, 30); nothing above 35.
        let none = |_, _| false;
        assert_eq!(set.smallest_gap(10, 1, none).0, Some((10, 0)));
        assert_eq!(set.smallest_gap(5, 1, none).0, Some((10, 0)));
        assert_eq!(set.smallest_gap(5, 1, |s, _| s == 0).0, Some((10, 20)));
        assert_eq!(set.smallest_gap(11, 1, none).0, None);
        // Aligned to 16, [20, 30) holds nothing of 5 bytes.
        assert_eq!(set.smallest_gap(5, 16, |s, _| s == 0).0, None);
        assert_eq!(
            set.around(25),
            Around::Free {
                below: 20,
                above: Some(30)
            }
        );
        assert_eq!(
            set.around(5),
            Around::Free {
                below: 0,
                above: Some(10)
            }
        );
        assert_eq!(
            set.around(40),
            Around::Free {
                below: 35,
                above: None
            }
        );
        assert_eq!(set.around(10), Around::Inside((10, 20)));
        // A range above the top, then one that merges everything.
        set.add(50, 60);
        assert_eq!(set.smallest_gap(15, 1, none).0, Some((15, 35)));
        set.add(0, 55);
        set.check(true);
        assert_eq!(set.iter().collect::<Vec<_>>(), vec![(0, 60)]);
        assert_eq!(set.smallest_gap(1, 1, none).0, None);
        // Best fit with a range of `o` above the top: the gap below it counts, not above.
        assert_eq!(fit(&set, &[(70, 80)], 10, 1).0, Fit::Gap(60));
        assert_eq!(fit(&set, &[(70, 80)], 11, 1).0, Fit::Top(80));
    }
}
