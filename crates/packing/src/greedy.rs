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
//! less, because neighbouring ranges merge in the index and in the merge itself; the merges
//! are written without data-dependent branches, which the gap pattern defeats.
//!
//! At a million buffers the index outgrows the caches, so buffers are placed in a
//! locality order ([`for_locality`]) that visits the timeline chunk by chunk yet gives the
//! same offsets as the plain order, and each placement first reads a little of what the
//! next one's query will read, so that those cache misses overlap with its own work
//! ([`WARM_MIN_BUFFERS`]; timings: `docs/MEASUREMENTS.md`).

use std::fmt;
use std::hint::select_unpredictable;
use std::time::Instant;

use super::problem::{Problem, ProblemError, Solution, align_up};
use super::timeline::{PlacedIndex, TimeSlots};

/// How `greedy-size` orders buffers of equal size.
///
/// The default, [`TieBreak::EarlierStart`], was chosen by measurement (`bench_suite
/// --tie-breaks`): its mean arena / lower bound over the 17 instances of
/// `testdata/benchmarks` is 1.233 against 1.234 (longer-first), 1.240 (id) and 1.245
/// (shorter-first), and over the five idealloc instances, which come from real ML graphs,
/// 1.007 against 1.015, 1.018 and 1.049 (`somas_pangu_2.6B`: 1.008 against 1.033 for
/// longer-first). `auto` also tries the others on problems of up to 100,000 buffers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
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

pub(crate) fn placement_order(problem: &Problem, slots: &TimeSlots, order: Order) -> Vec<u32> {
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
fn busiest_slots(problem: &Problem, slots: &TimeSlots) -> Vec<(u64, u32)> {
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
#[derive(Clone, Copy, Debug)]
struct Pending {
    id: u32,
    lo: u32,
    hi: u32,
    size: u64,
    align: u64,
}

/// The working memory of best fit, kept from one problem to the next: the index of placed
/// buffers, the buffers to place and the lists of the locality order. [`crate::Solver`] keeps
/// one per thread.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    index: PlacedIndex,
    /// The buffers to place, in placement order.
    pending: Vec<Pending>,
    /// The same in locality order, when that differs.
    placed: Vec<Pending>,
    locality: Locality,
    /// Warm the next query's data whatever the problem's size (see [`WARM_MIN_BUFFERS`]), so
    /// that tests can check that warming changes no offset.
    always_warm: bool,
    /// An index shape of its own (bucket shift, cover group height, union band) instead of
    /// the engine's, so that tests can reach every path of the index on small problems.
    #[cfg(test)]
    shape: Option<(u32, u32, (u32, u32))>,
    /// Ask the index for the whole union of occupied bytes, not only the gaps that fit (see
    /// [`PlacedIndex::for_each_occupied`]), so that tests can compare the two.
    #[cfg(test)]
    unfiltered: bool,
}

/// The most buffers whose working memory a [`Scratch`] keeps after [`Scratch::trim`]: about
/// 4 MiB. A larger problem's placement costs far more than allocating its memory afresh
/// (under 1% of the time at a million buffers), so keeping it would only hold memory.
const SCRATCH_KEEP_BUFFERS: usize = 1 << 16;

impl Scratch {
    /// The work the last placement did in the index ([`PlacedIndex::work`]): a deterministic
    /// measure of its cost, by which the search over orders budgets its rounds.
    pub(crate) fn work(&self) -> u64 {
        self.index.work()
    }

    /// Frees the memory kept for a problem of more than [`SCRATCH_KEEP_BUFFERS`] buffers.
    pub(crate) fn trim(&mut self) {
        let kept = self.pending.capacity().max(self.placed.capacity());
        if kept > SCRATCH_KEEP_BUFFERS {
            *self = Scratch::default();
        }
    }
}

/// The lists of [`for_locality`].
#[derive(Debug, Default)]
struct Locality {
    /// Positions in the placement order, per chunk for the buffers inside one.
    inside: Vec<Vec<u32>>,
    /// Positions of the buffers that cross a chunk boundary.
    crossing: Vec<u32>,
    /// How many of each chunk's buffers are already in `order`.
    done: Vec<usize>,
    /// The locality order, as positions in the placement order.
    order: Vec<u32>,
}

/// Places every buffer best-fit in the given order. The problem must be valid
/// ([`Problem::validate`]); overflow is still reported rather than wrapped.
pub(crate) fn best_fit(
    problem: &Problem,
    slots: &TimeSlots,
    order: Order,
    scratch: &mut Scratch,
) -> Result<Solution, ProblemError> {
    best_fit_in(
        problem,
        slots,
        &placement_order(problem, slots, order),
        scratch,
    )
}

/// Places every buffer best-fit in the order `ids` (every buffer id once); otherwise as
/// [`best_fit`].
pub(crate) fn best_fit_in(
    problem: &Problem,
    slots: &TimeSlots,
    ids: &[u32],
    scratch: &mut Scratch,
) -> Result<Solution, ProblemError> {
    let placed = best_fit_within(problem, slots, ids, scratch, GiveUp::NEVER)?;
    // No placement does `u64::MAX` units of work: every buffer was placed.
    Ok(placed.unwrap_or(Solution {
        offsets: Vec::new(),
    }))
}

/// Rounds of [`repack`] at most.
pub(crate) const REPACK_ROUNDS: u64 = 3;

/// A round of [`repack`] follows another only where that one lowered the arena by at least
/// `1 / REPACK_MIN_GAIN` of it: later rounds gain less and less (heavy-1%-n/2 seed 13 at a
/// million buffers: 0.002% a round, one best fit's work each).
pub(crate) const REPACK_MIN_GAIN: u64 = 2048;

/// The solve repacks ([`repack`]) only where its answer is above `num / den` times the load
/// bound: on training steps at a million buffers (1.0001x) and on heavy-10%-n/2 (1.012x,
/// 1.019x) a round gains nothing for up to twice the first answer's work (+2.5 s there).
pub(crate) const REPACK_ABOVE: (u64, u64) = (51, 50);

/// Whether the solve repacks an answer of `arena` bytes, `bound` its load bound
/// ([`REPACK_ABOVE`]).
pub(crate) fn repack_wanted(arena: u64, bound: u64) -> bool {
    let (num, den) = REPACK_ABOVE;
    u128::from(arena) * u128::from(den) > u128::from(bound) * u128::from(num)
}

/// What [`repack`] found: the lowest placement below the answer it started from and its
/// arena, if any; the work spent; the rounds run.
pub(crate) type Repacked = (Option<(Solution, u64)>, u64, u64);

/// Best fit again from an answer (`offsets`, of arena `arena`): every buffer in order of its
/// top (offset + size) in the answer, highest first (ids break ties), a round at a time while
/// a round lowers the arena by enough ([`REPACK_MIN_GAIN`]), at most [`REPACK_ROUNDS`]
/// rounds. A round is given up once its arena reaches the best so far or its work passes
/// `work` (deterministic, whatever the machine); no round starts after the first once
/// `deadline` has passed.
pub(crate) fn repack(
    problem: &Problem,
    slots: &TimeSlots,
    (offsets, arena): (&[u64], u64),
    scratch: &mut Scratch,
    (work, deadline): (u64, Instant),
) -> Result<Repacked, ProblemError> {
    let mut best: Option<(Solution, u64)> = None;
    let (mut spent, mut rounds) = (0u64, 0u64);
    let mut ids: Vec<u32> = (0..problem.len() as u32).collect();
    let mut tops: Vec<u64> = offsets
        .iter()
        .zip(&problem.buffers)
        .map(|(&o, b)| o.saturating_add(b.size))
        .collect();
    let mut low = arena;
    while rounds < REPACK_ROUNDS && low > 0 && (rounds == 0 || Instant::now() < deadline) {
        rounds += 1;
        ids.sort_unstable_by_key(|&i| (std::cmp::Reverse(tops[i as usize]), i));
        let give_up = GiveUp {
            work,
            above: low - 1,
            after: 0,
        };
        let placed = best_fit_within(problem, slots, &ids, scratch, give_up)?;
        spent = spent.saturating_add(scratch.work());
        let Some(next) = placed else { break };
        let next_arena = next.arena_size(problem);
        if next_arena >= low {
            break;
        }
        let enough = (low - next_arena).saturating_mul(REPACK_MIN_GAIN) >= low;
        low = next_arena;
        for ((top, &o), b) in tops.iter_mut().zip(&next.offsets).zip(&problem.buffers) {
            *top = o.saturating_add(b.size);
        }
        best = Some((next, next_arena));
        if !enough {
            break;
        }
    }
    Ok((best, spent, rounds))
}

/// When [`best_fit_within`] gives a placement up: once its index has done more than `work`
/// units of work ([`PlacedIndex::work`]), or once its highest byte is above `above` after it
/// has done more than `after` units (the arena only grows as buffers are placed, so such a
/// placement ends above `above`). Both are deterministic, whatever the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GiveUp {
    /// The work cap.
    pub(crate) work: u64,
    /// The arena a placement must not pass...
    pub(crate) above: u64,
    /// ...once it has done this much work.
    pub(crate) after: u64,
}

impl GiveUp {
    /// Never: every buffer is placed.
    pub(crate) const NEVER: GiveUp = GiveUp::at_work(u64::MAX);

    /// Only at a work cap.
    pub(crate) const fn at_work(work: u64) -> GiveUp {
        GiveUp {
            work,
            above: u64::MAX,
            after: u64::MAX,
        }
    }

    /// Whether a placement that has done `work` and reached `top` is given up.
    fn reached(&self, work: u64, top: u64) -> bool {
        work > self.work || (top > self.above && work > self.after)
    }
}

/// As [`best_fit_in`], but gives up, returning `None`, as soon as `give_up` says (see
/// [`GiveUp`]).
pub(crate) fn best_fit_within(
    problem: &Problem,
    slots: &TimeSlots,
    ids: &[u32],
    scratch: &mut Scratch,
    give_up: GiveUp,
) -> Result<Option<Solution>, ProblemError> {
    let mut offsets = vec![0u64; problem.len()];
    let spans: u64 = slots
        .lo
        .iter()
        .zip(&slots.hi)
        .map(|(&lo, &hi)| u64::from(hi - lo))
        .sum();
    let mean_span = spans / (problem.len() as u64).max(1);
    let Scratch {
        index,
        pending,
        placed,
        locality,
        always_warm,
        #[cfg(test)]
        shape,
        #[cfg(test)]
        unfiltered,
    } = scratch;
    index.reset(slots.count, mean_span);
    #[cfg(test)]
    if let Some((shift, group_height, unions)) = *shape {
        index.reshape(slots.count, shift, group_height, unions);
    }
    // Gathered in placement order first: the placement loop then reads memory in sequence,
    // and the gather's independent loads overlap their cache misses.
    pending.clear();
    pending.extend(ids.iter().filter_map(|&id| {
        let i = id as usize;
        let (b, &lo, &hi) = (problem.buffers.get(i)?, slots.lo.get(i)?, slots.hi.get(i)?);
        (b.size > 0).then_some(Pending {
            id,
            lo,
            hi,
            size: b.size,
            align: b.align,
        })
    }));
    // The locality order is gathered into a second list: its loads are independent, where
    // permuting in place follows cycles one dependent load at a time (measured 10% slower
    // on 1M buffers).
    let in_order: &[Pending] = if for_locality(pending, locality) {
        placed.clear();
        placed.extend(
            locality
                .order
                .iter()
                .filter_map(|&at| pending.get(at as usize).copied()),
        );
        if pending.capacity() > SCRATCH_KEEP_BUFFERS {
            // Not kept anyway (see `Scratch::trim`): free it before the placement loop.
            *pending = Vec::new();
            *locality = Locality::default();
        }
        placed
    } else {
        pending
    };
    // Over the caches: start the loads of the next placement's query while this one runs.
    let warm = *always_warm || in_order.len() >= WARM_MIN_BUFFERS;
    let mut warmth = 0u64;
    // The highest byte placed so far: while it is at most `u64::MAX / 2`, no aligned offset
    // overflows, and the query can leave out the gaps too short for the buffer (the answer
    // is the same); above, the whole union is read so that overflow is reported as before.
    let mut top = 0u64;
    for (k, p) in in_order.iter().enumerate() {
        if warm && let Some(next) = in_order.get(k + 1) {
            warmth = warmth.wrapping_add(index.warm(next.lo));
        }
        let mut gap = BestGap::new(p.size, p.align);
        let min_gap = if top <= u64::MAX / 2 { p.size } else { 1 };
        #[cfg(test)]
        let min_gap = if *unfiltered { 1 } else { min_gap };
        index.for_each_occupied(p.lo, p.hi, min_gap, |(offset, end)| {
            gap.occupied(offset, end)
        });
        let offset = gap.offset()?;
        let end = offset.checked_add(p.size).ok_or(ProblemError::TooLarge)?;
        top = top.max(end);
        index.insert(p.lo, p.hi, offset, end);
        if let Some(o) = offsets.get_mut(p.id as usize) {
            *o = offset;
        }
        if give_up.reached(index.work(), top) {
            return Ok(None);
        }
    }
    std::hint::black_box(warmth);
    Ok(Some(Solution { offsets }))
}

/// The fewest buffers for which the placement loop warms the next query's data
/// ([`PlacedIndex::warm`]): then the index (about 20 bytes per buffer) outgrows the caches,
/// and the query's loads, most of them cache misses, overlap with the current placement.
/// Measured on heavy-tailed generated problems (`heur_time`, 2026-11-25): `greedy-size` on
/// 1M buffers 1.85 s to 1.30 s; at 600k mixed, within 10% either way; at 30k to 300k 5-13%
/// slower (the data is in cache and warming is extra work).
const WARM_MIN_BUFFERS: usize = 750_000;

/// The narrowest chunk of [`for_locality`], as log2 of its slots: 32 leaf buckets of the
/// placed-buffer index, whose data stays in cache while the chunk's buffers are placed.
/// (Measured on 1M generated buffers: chunks of 2^8 to 2^16 slots all save 12-20%.)
const CHUNK_SHIFT: u32 = 12;

/// Finds an order of buffers given in placement order (`pending`) in which the placement
/// loop stays in one stretch of time for many placements in a row, with the same offsets.
/// Returns whether it differs from the placement order; if so, `work.order` holds it as
/// positions in `pending`.
///
/// Best fit places a buffer against the already-placed buffers that overlap it in time, so
/// every order that keeps each pair of overlapping buffers in their relative order gives the
/// same offsets. Time is cut into chunks of `2^shift` slots. A buffer inside one chunk
/// overlaps only buffers of its own chunk and buffers that cross chunk boundaries; so the
/// crossing buffers are placed in their order, each right after the not yet placed buffers
/// of the chunks it spans that come before it, and the rest of each chunk is placed chunk
/// by chunk at the end. The chunks are widened until the crossing buffers span at most
/// `4n` chunks in all, which bounds the work at `O(n log n)`; when only one chunk is left
/// the order is kept.
fn for_locality(pending: &[Pending], work: &mut Locality) -> bool {
    let n = pending.len();
    let spanned = |shift: u32| -> u64 {
        pending
            .iter()
            .map(|p| u64::from((p.hi - 1) >> shift) - u64::from(p.lo >> shift))
            .filter(|&extra| extra > 0)
            .map(|extra| extra + 1)
            .sum()
    };
    let max_hi = pending.iter().map(|p| p.hi).max().unwrap_or(0);
    let Some(shift) = (CHUNK_SHIFT..u32::BITS)
        .take_while(|&shift| max_hi >> shift > 0)
        .find(|&shift| spanned(shift) <= 4 * n as u64)
    else {
        return false;
    };
    let chunks = (max_hi >> shift) as usize + 1;
    let Locality {
        inside,
        crossing,
        done,
        order,
    } = work;
    inside.truncate(chunks);
    inside.iter_mut().for_each(Vec::clear);
    inside.resize_with(chunks, Vec::new);
    crossing.clear();
    for (at, p) in (0u32..).zip(pending) {
        let (first, last) = (p.lo >> shift, (p.hi - 1) >> shift);
        match inside.get_mut(first as usize) {
            Some(chunk) if first == last => chunk.push(at),
            _ => crossing.push(at),
        }
    }
    done.clear();
    done.resize(chunks, 0);
    order.clear();
    for &at in crossing.iter() {
        let Some(p) = pending.get(at as usize) else {
            continue;
        };
        let first = (p.lo >> shift) as usize;
        let count = ((p.hi - 1) >> shift) as usize + 1 - first;
        for (chunk, done) in inside.iter().zip(done.iter_mut()).skip(first).take(count) {
            let rest = chunk.get(*done..).unwrap_or_default();
            let before = rest.partition_point(|&q| q < at);
            order.extend(rest.iter().take(before));
            *done += before;
        }
        order.push(at);
    }
    for (chunk, &done) in inside.iter().zip(done.iter()) {
        order.extend(chunk.iter().skip(done));
    }
    true
}

/// The offset best fit chooses for `size` bytes aligned to `align`, given the occupied byte
/// ranges in offset order (possibly overlapping or repeated): the lowest aligned offset of
/// the smallest fitting gap, or the first aligned offset above everything.
struct BestGap {
    size: u64,
    /// `align - 1`.
    mask: u64,
    /// The end of the occupied bytes seen so far.
    top: u64,
    /// The best gap so far, if `found`: its length and the aligned offset in it.
    best_gap: u64,
    best_offset: u64,
    found: bool,
    overflow: bool,
}

impl BestGap {
    fn new(size: u64, align: u64) -> BestGap {
        BestGap {
            size,
            mask: align.saturating_sub(1),
            top: 0,
            best_gap: 0,
            best_offset: 0,
            found: false,
            overflow: false,
        }
    }

    /// Takes the next occupied range; `offset` is no lower than any before.
    ///
    /// Branch-free: whether a gap fits and beats the best is as good as random, and this
    /// runs for every range of every query.
    fn occupied(&mut self, offset: u64, end: u64) {
        let (bumped, carry) = self.top.overflowing_add(self.mask);
        let candidate = bumped & !self.mask;
        let is_gap = offset > self.top;
        let gap = offset.wrapping_sub(self.top);
        let fits =
            is_gap & !carry & (candidate <= offset) & (offset.wrapping_sub(candidate) >= self.size);
        let better = fits & (!self.found | (gap < self.best_gap));
        self.best_gap = select_unpredictable(better, gap, self.best_gap);
        self.best_offset = select_unpredictable(better, candidate, self.best_offset);
        self.found |= better;
        self.overflow |= is_gap & carry;
        self.top = self.top.max(end);
    }

    fn offset(self) -> Result<u64, ProblemError> {
        if self.overflow {
            Err(ProblemError::TooLarge)
        } else if self.found {
            Ok(self.best_offset)
        } else {
            align_up(self.top, self.mask + 1).ok_or(ProblemError::TooLarge)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::SplitMix64;

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
    fn best_gap_reports_overflow_only_where_it_would_place() {
        // Nothing fits below a top whose next aligned offset overflows.
        assert_eq!(
            best_gap(&[(0, u64::MAX - 3)], 1, 8),
            Err(ProblemError::TooLarge)
        );
        // A gap below it still does.
        assert_eq!(best_gap(&[(10, u64::MAX - 3)], 4, 8), Ok(0));
    }

    /// Random buffers in a random order: `for_locality` is a permutation that keeps every
    /// pair of buffers overlapping in time in order, whatever the chunk width it picks.
    #[test]
    fn locality_order_keeps_overlapping_buffers_in_order() {
        let mut rng = SplitMix64::new(7);
        let mut reordered = 0;
        for case in 0..200u64 {
            let n = 1 + rng.below(400) as u32;
            // Spans from a few slots to far more than a chunk, so that some cases widen the
            // chunks and some keep the order.
            let horizon = 1 + rng.below(1 << (6 + case % 14));
            let reach = 1 + rng.below(horizon.min(1 << (2 + case % 16)));
            let pending: Vec<Pending> = (0..n)
                .map(|id| {
                    let lo = rng.below(horizon) as u32;
                    let hi = lo + 1 + rng.below(reach) as u32;
                    Pending {
                        id,
                        lo,
                        hi,
                        size: 1,
                        align: 1,
                    }
                })
                .collect();
            let spans: Vec<(u32, u32)> = pending.iter().map(|p| (p.lo, p.hi)).collect();
            let mut work = Locality::default();
            let order: Vec<u32> = if for_locality(&pending, &mut work) {
                work.order
                    .iter()
                    .map(|&at| pending[at as usize].id)
                    .collect()
            } else {
                pending.iter().map(|p| p.id).collect()
            };
            let mut at = vec![usize::MAX; n as usize];
            for (position, &id) in order.iter().enumerate() {
                assert_eq!(at[id as usize], usize::MAX, "case {case}: {id} twice");
                at[id as usize] = position;
            }
            assert_eq!(order.len(), n as usize, "case {case}");
            reordered += usize::from(order.iter().zip(0..).any(|(&id, i)| id != i));
            for (i, &(lo_i, hi_i)) in spans.iter().enumerate() {
                for (j, &(lo_j, hi_j)) in spans.iter().enumerate().skip(i + 1) {
                    if lo_i < hi_j && lo_j < hi_i {
                        assert!(at[i] < at[j], "case {case}: {i} and {j} swapped");
                    }
                }
            }
        }
        assert!(reordered >= 50, "only {reordered} of 200 orders changed");
    }

    /// Warming the next query's data is only reads: every best-fit order gives the same
    /// offsets with and without it.
    #[test]
    fn warming_changes_no_offset() {
        for problem in [
            crate::generate::heavy_tailed(5000, 3),
            crate::generate::realistic(5000, 8),
        ] {
            let slots = TimeSlots::new(&problem);
            for order in [
                Order::Size(TieBreak::default()),
                Order::Lifetime,
                Order::Breadth,
            ] {
                let plain = best_fit(&problem, &slots, order, &mut Scratch::default());
                let mut warm = Scratch {
                    always_warm: true,
                    ..Scratch::default()
                };
                let warmed = best_fit(&problem, &slots, order, &mut warm);
                assert_eq!(plain, warmed);
                assert!(plain.is_ok());
            }
        }
    }

    /// The index's shape changes no offset: family problems with long lifetimes give the same
    /// offsets with the engine's shape (checked against the obvious implementation in
    /// `tests/arena_strategies.rs`) and with small buckets and cover groups, where their
    /// buffers reach many groups of covers and many heights of subtree unions.
    #[test]
    fn the_index_shape_changes_no_offset() {
        let mut checked = 0;
        for name in [
            "heavy-10%-n/2",
            "training-33%",
            "mixed",
            "heavy-3%-n/10",
            "short",
        ] {
            let shape: crate::generate::Shape = name.parse().expect("a family name");
            let problem = shape.generate(4000, 5);
            let slots = TimeSlots::new(&problem);
            for order in [Order::Size(TieBreak::default()), Order::Lifetime] {
                let plain = best_fit(&problem, &slots, order, &mut Scratch::default());
                for index_shape in [
                    (0, 1, (0, 3)),
                    (1, 2, (1, 30)),
                    (2, 3, (3, 5)),
                    (3, 30, (30, 30)),
                ] {
                    let mut scratch = Scratch {
                        shape: Some(index_shape),
                        ..Scratch::default()
                    };
                    let shaped = best_fit(&problem, &slots, order, &mut scratch);
                    assert_eq!(plain, shaped, "{name} {order:?} {index_shape:?}");
                    checked += 1;
                }
                assert!(plain.is_ok());
            }
        }
        assert_eq!(checked, 40);
    }

    /// Asking the index only for the gaps a buffer fits in changes no offset and no work
    /// count: random problems with long lifetimes (family members with random parameters and
    /// seeds, and small random problems whose sizes repeat, so that many gaps tie or just
    /// miss), every best-fit order, the engine's index shape and small ones.
    #[test]
    fn filtering_short_gaps_changes_no_offset_and_no_work() {
        let mut rng = SplitMix64::new(28);
        let mut problems = Vec::new();
        for _ in 0..6 {
            let tail = 1 + rng.below(10);
            let divisor = 2 + rng.below(30);
            let saved = 10 + rng.below(80);
            for name in [
                format!("heavy-{tail}%-n/{divisor}"),
                format!("training-{saved}%"),
                "mixed".to_owned(),
            ] {
                let shape: crate::generate::Shape = name.parse().expect("a family name");
                problems.push((
                    name,
                    shape.generate(1500 + rng.below(2500) as usize, rng.below(1000)),
                ));
            }
        }
        for case in 0..30 {
            let n = 50 + rng.below(400);
            let horizon = 1 + rng.below(3 * n);
            let buffers = (0..n)
                .map(|_| {
                    let start = rng.below(horizon);
                    let long = rng.below(3) == 0;
                    let life = 1 + if long {
                        rng.below(horizon)
                    } else {
                        rng.below(8)
                    };
                    let size = [1, 3, 8, 16, 24, 100][rng.below(6) as usize] * (1 + rng.below(4));
                    let mut b = crate::Buffer::new(start, start + life, size);
                    b.align = [1, 1, 2, 8, 16][rng.below(5) as usize];
                    b
                })
                .collect();
            problems.push((format!("random {case}"), Problem::new(buffers)));
        }
        let mut compared = 0;
        for (name, problem) in &problems {
            let slots = TimeSlots::new(problem);
            for order in [
                Order::Size(TieBreak::default()),
                Order::Lifetime,
                Order::Breadth,
                Order::Area,
            ] {
                for index_shape in [None, Some((0, 1, (0, 3))), Some((2, 3, (1, 30)))] {
                    let mut plain = Scratch {
                        unfiltered: true,
                        shape: index_shape,
                        ..Scratch::default()
                    };
                    let mut filtered = Scratch {
                        shape: index_shape,
                        ..Scratch::default()
                    };
                    let expected = best_fit(problem, &slots, order, &mut plain);
                    let got = best_fit(problem, &slots, order, &mut filtered);
                    let context = format!("{name} {order:?} {index_shape:?}");
                    let Ok(solution) = &expected else {
                        panic!("{context}: {expected:?}");
                    };
                    assert_eq!(
                        crate::verify::verify(problem, solution),
                        Ok(()),
                        "{context}"
                    );
                    assert_eq!(got, expected, "{context}");
                    assert_eq!(filtered.work(), plain.work(), "{context}");
                    compared += 1;
                }
            }
        }
        assert_eq!(compared, problems.len() * 12);
    }

    /// A work cap gives up a placement exactly when its index works harder than the cap, and
    /// a cap it stays under changes nothing.
    #[test]
    fn a_work_cap_gives_up_only_above_it() {
        let problem = crate::generate::Shape::Training { saved_percent: 30 }.generate(3000, 2);
        let slots = TimeSlots::new(&problem);
        let ids = placement_order(&problem, &slots, Order::Size(TieBreak::default()));
        let mut scratch = Scratch::default();
        let full = best_fit_in(&problem, &slots, &ids, &mut scratch).expect("valid");
        let work = scratch.work();
        let at = best_fit_within(&problem, &slots, &ids, &mut scratch, GiveUp::at_work(work))
            .expect("valid");
        assert_eq!(at.as_ref(), Some(&full));
        let under = best_fit_within(
            &problem,
            &slots,
            &ids,
            &mut scratch,
            GiveUp::at_work(work - 1),
        );
        assert_eq!(under, Ok(None));
        assert!(
            scratch.work() < work + work / 10,
            "it stops as soon as it is over"
        );
    }

    #[test]
    fn best_gap_handles_overlapping_and_repeated_ranges() {
        let ranges = [(0, 10), (0, 10), (5, 12), (20, 30)];
        assert_eq!(best_gap(&ranges, 8, 1), Ok(12));
        assert_eq!(best_gap(&ranges, 9, 1), Ok(30));
    }
}
