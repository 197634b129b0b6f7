//! The best-fit family of heuristics: place buffers one by one in a fixed order, each into
//! the smallest gap that fits it among the already-placed buffers it overlaps in time, or on
//! top of them when no gap fits (TFLite's and XLA's "greedy by size").
//!
//! The order is what distinguishes the strategies; every order is a total sort key ending in
//! the buffer id, so results are deterministic. A gap is the free span between two occupied
//! byte ranges of overlapping buffers (or below the lowest); among gaps that fit the buffer
//! at an aligned offset, the smallest wins, then the lowest.
//!
//! No placement scans every placed buffer: the occupied bytes come from [`PlacedIndex`],
//! which reads `O(log n)` nodes and returns `k` byte ranges whose union is what the buffers
//! overlapping the new one occupy, merged into offset order in `O(k log log n)`; one pass
//! over them finds the gaps. `k` is at most the number of overlapping buffers and usually far
//! less, because neighbouring ranges merge in the index and in the merge itself. Measured
//! (`heur_time -s greedy-size`, realistic generated instances, about a hundred buffers live
//! at once, medians on a shared 2-core machine whose speed drifts by half over a day):
//! 10k buffers in 10-12 ms, 100k in 0.15-0.17 s, 1M in 1.7-2.8 s; `iopddl_Y_1` (62k
//! buffers, long lifetimes) in 0.31-0.56 s.

use std::fmt;

use super::problem::{Problem, ProblemError, Solution, align_up};
use super::timeline::{PlacedIndex, Slots};

/// How `greedy-size` orders buffers of equal size.
///
/// The default, [`TieBreak::EarlierStart`], was chosen by measurement (`bench_suite
/// --tie-breaks`): its mean arena / lower bound over the 17 instances of
/// `testdata/benchmarks` is 1.233 against 1.234 (longer-first), 1.240 (id) and 1.245
/// (shorter-first), and over the five idealloc instances, which come from real ML graphs,
/// 1.007 against 1.015, 1.018 and 1.049 (`somas_pangu_2.6B`: 1.008 against 1.033 for
/// longer-first). `auto` also tries the others on problems of up to 100,000 buffers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TieBreak {
    /// Earlier start first, then longer lifetime, then id.
    #[default]
    EarlierStart,
    /// Longer lifetime first, then earlier start, then id.
    LongerFirst,
    /// Shorter lifetime first, then earlier start, then id.
    ShorterFirst,
    /// Input order (id).
    Id,
}

impl TieBreak {
    /// Every tie-break, the default first.
    pub const ALL: [TieBreak; 4] = [
        TieBreak::EarlierStart,
        TieBreak::LongerFirst,
        TieBreak::ShorterFirst,
        TieBreak::Id,
    ];
}

impl fmt::Display for TieBreak {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TieBreak::LongerFirst => "longer-first",
            TieBreak::EarlierStart => "earlier-start",
            TieBreak::ShorterFirst => "shorter-first",
            TieBreak::Id => "id",
        })
    }
}

/// The placement order of a best-fit heuristic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Order {
    /// Size descending, then the tie-break.
    Size(TieBreak),
    /// Lifetime descending, then size descending, then earlier start, then id.
    Lifetime,
    /// Size × lifetime descending, then size descending, then earlier start, then id.
    Area,
    /// TFLite's "greedy by breadth": the busiest time steps first. A buffer's key is the
    /// most bytes live at any one slot of its lifetime (descending), then the earliest slot
    /// where that peak occurs, then size descending, then lifetime descending, then id.
    Breadth,
}

/// Reverses the order of a key component.
fn desc(x: u64) -> u64 {
    !x
}

fn placement_order(problem: &Problem, slots: &Slots, order: Order) -> Vec<u32> {
    let peaks = match order {
        Order::Breadth => busiest_slots(problem, slots),
        _ => Vec::new(),
    };
    let keys: Vec<[u64; 4]> = problem
        .buffers
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let len = b.end - b.start;
            match order {
                Order::Size(TieBreak::LongerFirst) => [desc(b.size), desc(len), b.start, 0],
                Order::Size(TieBreak::EarlierStart) => [desc(b.size), b.start, desc(len), 0],
                Order::Size(TieBreak::ShorterFirst) => [desc(b.size), len, b.start, 0],
                Order::Size(TieBreak::Id) => [desc(b.size), 0, 0, 0],
                Order::Lifetime => [desc(len), desc(b.size), b.start, 0],
                Order::Area => {
                    let area = u128::from(b.size) * u128::from(len);
                    [
                        desc((area >> 64) as u64),
                        desc(area as u64),
                        desc(b.size),
                        b.start,
                    ]
                }
                Order::Breadth => {
                    let (peak, slot) = peaks.get(i).copied().unwrap_or((0, 0));
                    [desc(peak), u64::from(slot), desc(b.size), desc(len)]
                }
            }
        })
        .collect();
    // Sorted on the first component and the id (small elements, fast), then each run that
    // ties on the first component on the whole key: the same order as sorting whole keys.
    let mut sorted: Vec<(u64, u32)> = keys
        .iter()
        .zip(0u32..)
        .map(|(key, id)| (key[0], id))
        .collect();
    sorted.sort_unstable();
    let key = |id: u32| keys.get(id as usize).copied().unwrap_or_default();
    for run in sorted.chunk_by_mut(|a, b| a.0 == b.0) {
        if run.len() > 1 {
            run.sort_unstable_by_key(|&(_, id)| (key(id), id));
        }
    }
    sorted.into_iter().map(|(_, id)| id).collect()
}

/// For each buffer, the most bytes live at one slot of its lifetime and the first slot where
/// that happens. Uses a max segment tree over slots, `O(n log n)`.
fn busiest_slots(problem: &Problem, slots: &Slots) -> Vec<(u64, u32)> {
    let count = slots.count as usize;
    let mut delta = vec![0i128; count + 1];
    for ((b, &lo), &hi) in problem.buffers.iter().zip(&slots.lo).zip(&slots.hi) {
        if let Some(d) = delta.get_mut(lo as usize) {
            *d += i128::from(b.size);
        }
        if let Some(d) = delta.get_mut(hi as usize) {
            *d -= i128::from(b.size);
        }
    }
    let size = count.max(1).next_power_of_two();
    // (bytes live, slot); a better node has more bytes, then an earlier slot.
    let mut tree = vec![(0u64, u32::MAX); 2 * size];
    let mut live: i128 = 0;
    for (j, d) in delta.iter().take(count).enumerate() {
        live += d;
        if let Some(node) = tree.get_mut(size + j) {
            *node = (u64::try_from(live).unwrap_or(u64::MAX), j as u32);
        }
    }
    let better = |a: (u64, u32), b: (u64, u32)| {
        if b.0 > a.0 || (b.0 == a.0 && b.1 < a.1) {
            b
        } else {
            a
        }
    };
    for n in (1..size).rev() {
        tree[n] = better(tree[2 * n], tree[2 * n + 1]);
    }
    slots
        .lo
        .iter()
        .zip(&slots.hi)
        .map(|(&lo, &hi)| {
            let mut best = (0u64, u32::MAX);
            let (mut l, mut r) = (lo as usize + size, hi as usize + size);
            while l < r {
                if l & 1 == 1 {
                    best = better(best, tree[l]);
                    l += 1;
                }
                if r & 1 == 1 {
                    r -= 1;
                    best = better(best, tree[r]);
                }
                l >>= 1;
                r >>= 1;
            }
            best
        })
        .collect()
}

/// A buffer to place: its id, slots and size.
struct Pending {
    id: u32,
    lo: u32,
    hi: u32,
    size: u64,
    align: u64,
}

/// Places every buffer best-fit in the given order. The problem must be valid
/// ([`Problem::validate`]); overflow is still reported rather than wrapped.
pub(crate) fn best_fit(
    problem: &Problem,
    slots: &Slots,
    order: Order,
) -> Result<Solution, ProblemError> {
    let mut offsets = vec![0u64; problem.len()];
    let spans: u64 = slots
        .lo
        .iter()
        .zip(&slots.hi)
        .map(|(&lo, &hi)| u64::from(hi - lo))
        .sum();
    let mean_span = spans / (problem.len() as u64).max(1);
    let mut index = PlacedIndex::new(slots.count, mean_span);
    // Gathered in placement order first: the placement loop then reads memory in sequence,
    // and the gather's independent loads overlap their cache misses.
    let pending: Vec<Pending> = placement_order(problem, slots, order)
        .into_iter()
        .filter_map(|id| {
            let i = id as usize;
            let (b, &lo, &hi) = (problem.buffers.get(i)?, slots.lo.get(i)?, slots.hi.get(i)?);
            (b.size > 0).then_some(Pending {
                id,
                lo,
                hi,
                size: b.size,
                align: b.align,
            })
        })
        .collect();
    for p in pending {
        let mut gap = BestGap::new(p.size, p.align);
        index.for_each_occupied(p.lo, p.hi, |(offset, end)| gap.occupied(offset, end));
        let offset = gap.offset()?;
        let end = offset.checked_add(p.size).ok_or(ProblemError::TooLarge)?;
        index.insert(p.lo, p.hi, offset, end);
        if let Some(o) = offsets.get_mut(p.id as usize) {
            *o = offset;
        }
    }
    Ok(Solution { offsets })
}

/// The offset best fit chooses for `size` bytes aligned to `align`, given the occupied byte
/// ranges in offset order (possibly overlapping or repeated): the lowest aligned offset of
/// the smallest fitting gap, or the first aligned offset above everything.
struct BestGap {
    size: u64,
    align: u64,
    /// The end of the occupied bytes seen so far.
    top: u64,
    /// The best gap so far: (its length, the aligned offset in it).
    best: Option<(u64, u64)>,
    overflow: bool,
}

impl BestGap {
    fn new(size: u64, align: u64) -> BestGap {
        BestGap {
            size,
            align,
            top: 0,
            best: None,
            overflow: false,
        }
    }

    /// Takes the next occupied range; `offset` is no lower than any before.
    fn occupied(&mut self, offset: u64, end: u64) {
        if offset > self.top {
            match align_up(self.top, self.align) {
                Some(candidate) => {
                    let gap = offset - self.top;
                    if candidate <= offset
                        && offset - candidate >= self.size
                        && self.best.is_none_or(|(best_gap, _)| gap < best_gap)
                    {
                        self.best = Some((gap, candidate));
                    }
                }
                None => self.overflow = true,
            }
        }
        self.top = self.top.max(end);
    }

    fn offset(self) -> Result<u64, ProblemError> {
        match self.best {
            _ if self.overflow => Err(ProblemError::TooLarge),
            Some((_, offset)) => Ok(offset),
            None => align_up(self.top, self.align).ok_or(ProblemError::TooLarge),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn best_gap(ranges: &[(u64, u64)], size: u64, align: u64) -> Result<u64, ProblemError> {
        let mut gap = BestGap::new(size, align);
        for &(offset, end) in ranges {
            gap.occupied(offset, end);
        }
        gap.offset()
    }

    #[test]
    fn best_gap_prefers_the_smallest_fitting_gap() {
        // Gaps: [0, 10) of 10, [20, 24) of 4, [30, 35) of 5; top at 40.
        let ranges = [(10, 20), (24, 30), (35, 40)];
        assert_eq!(best_gap(&ranges, 4, 1), Ok(20));
        assert_eq!(best_gap(&ranges, 5, 1), Ok(30));
        assert_eq!(best_gap(&ranges, 6, 1), Ok(0));
        assert_eq!(best_gap(&ranges, 11, 1), Ok(40));
    }

    #[test]
    fn best_gap_respects_alignment() {
        // The gap [21, 30) holds 8 bytes at 24 when aligned to 8, not 9.
        let ranges = [(0, 21), (30, 40)];
        assert_eq!(best_gap(&ranges, 6, 8), Ok(24));
        assert_eq!(best_gap(&ranges, 7, 8), Ok(40));
    }

    #[test]
    fn best_gap_handles_overlapping_and_repeated_ranges() {
        let ranges = [(0, 10), (0, 10), (5, 12), (20, 30)];
        assert_eq!(best_gap(&ranges, 8, 1), Ok(12));
        assert_eq!(best_gap(&ranges, 9, 1), Ok(30));
    }
}
