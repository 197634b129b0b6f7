//! Long and short buffers apart: the long-lived buffers first, stacked longest first, then
//! the short-lived ones in the gaps they leave, in one sweep over time.
//!
//! A training step is nested: an activation saved for the backward pass lives from its
//! producer to the backward step that mirrors it, so the saved activations' lifetimes nest
//! like parentheses, and stacking them longest first (each on the lowest bytes free over its
//! lifetime) is optimal for them: each one sits on the ones that enclose it. Placing every
//! buffer in one best-fit order mixes the two kinds: by size, the short buffers of the
//! forward pass land in the holes that later saved activations need, and every query reads
//! the fragmented stack.
//!
//! So: (1) the buffers that live at least [`LONG_SLOTS`] slots are placed by best fit,
//! longest first (`greedy-lifetime` on them alone). (2) The others are placed in one sweep
//! over time: at each slot, the buffers that end there leave the live set, the long ones that
//! start there join it, and each short one that starts there (largest first) takes the
//! smallest gap that holds it, best fit, against the live set and the long buffers that start
//! before it ends, then joins the live set. A short buffer overlaps exactly those: the
//! buffers live at its start, and the long ones that start during its life (the short ones
//! that start then come after it in the sweep, and avoid it).
//!
//! The live set keeps its gaps by length ([`Ranges`]), so a placement costs `O(log n)` plus
//! the few long buffers that start during the short one's life: the sweep is `O(n log n)`,
//! whatever the fragmentation. It is one candidate of `auto`'s portfolio, kept where it wins.
//!
//! At scale ([`CLASSES_MIN_BUFFERS`] buffers and more) step (1) is itself quadratic where
//! tens of thousands of long buffers are live at once, so the long buffers are split again,
//! into classes of lifetime each [`CLASS_RATIO`] times longer than the one below: only the
//! longest class is placed by best fit, and every other class, longest first, by the same
//! sweep, against everything placed before it ([`classes_then_short`]). A nested stack stays
//! a stack: each saved activation's enclosing ones are longer (placed before it) or of its
//! class and live at its start. Where that placement is cheap next to its cap, two more
//! place other classes (two by best fit; then also a ratio of 3), side by side on the
//! solve's threads, and `long-short` keeps the smallest arena (see [`SECOND_CLASSES_SHARE`]).
//! There the solve may, after its heuristics and only where its best answer is still far
//! above the bound, place four more times with time reversed ([`reversed_placements`],
//! [`LATER_PLACEMENTS`]).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::gaps::{Fit, Ranges, fit};
use super::greedy::{GiveUp, Order, Scratch, best_fit_within, placement_order};
use super::problem::{Problem, ProblemError, Solution, align_up};
use super::solve::{SCALE_WORK_FLOOR, SCALE_WORK_PER_BUFFER};
use super::strategy::run_portfolio;
use super::timeline::TimeSlots;

/// The fewest slots a buffer lives to count as long. Short-lived tensors of a step die
/// within a few operators, skip connections within tens; what lives for 64 slots or more is
/// a saved activation, a weight gradient or a cache. (Measured on the generator family:
/// 16, 32, 64 and 256 give the same arenas within 0.5% on heavy-tailed and training-shaped
/// members; see `docs/MEASUREMENTS.md`.)
pub(crate) const LONG_SLOTS: u32 = 64;

/// The ratio of lifetimes between one class of long buffers and the next, from
/// [`CLASSES_MIN_BUFFERS`] buffers on (see [`classes_then_short`]). Measured on the generator
/// family at a million buffers: 2 gave 1.0010-1.0500x the bound in 1.2-9.5 s of CPU on
/// mixed, heavy-3%-n/10, heavy-10%-n/100 and heavy-10%-n/2, against 1.0067-1.0937x for 4.
pub(crate) const CLASS_RATIO: u32 = 2;

/// From this many buffers on, `long-short` places the long buffers in classes
/// ([`classes_then_short`]); below, all of them by best fit ([`long_then_short`]).
pub(crate) const CLASSES_MIN_BUFFERS: usize = crate::solve::SCALE_MIN_BUFFERS;

/// Where [`classes_then_short`] with the longest class by best fit cost at most
/// `1 / SECOND_CLASSES_SHARE` of its work cap (and of `auto`'s cap at that size,
/// `SCALE_WORK_PER_BUFFER` per buffer, where nothing caps it), `long-short` places again with each of the
/// forward placements of [`LATER_PLACEMENTS`] and keeps the smallest arena; only there may
/// the solve run the reversed ones ([`reversed_wanted`]).
const SECOND_CLASSES_SHARE: u64 = 4;

/// The classes of `long-short`'s placements after the first, where the first was cheap (see
/// [`SECOND_CLASSES_SHARE`]): `(ratio, classes by best fit, shortest long lifetime in
/// slots)`, as [`classes_then_short`] takes them (the first is `(CLASS_RATIO, 1,
/// LONG_SLOTS)`). No placement wins everywhere, and an arena moves by a few percent from one
/// to the next with no pattern across seeds. On the generator family's heavy-10%-n/100
/// member at a million buffers, seeds 29 / 17 / 21 (the first placement at 1.0738 / 1.0699 /
/// 1.0936x the bound): two classes by best fit 1.0820 / 1.0797 / 1.0637x, ratio 3 with two
/// classes 1.0689 / 1.0745 / 1.0534x; the smallest of the three is within 1.07x on each
/// (`docs/MEASUREMENTS.md`, tenth session). A fourth, long from 90 slots with two classes,
/// took seed 17 to 1.0682x and seed 23 from 1.0566 to 1.0556x, but costs about a second
/// more there; not kept. Where many buffers live long (heavy-10%-n/2, training steps) the
/// first placement costs far more than a quarter of the cap, and none of these runs.
const MORE_PLACEMENTS: [(u32, u32, u32); 2] = [(CLASS_RATIO, 2, LONG_SLOTS), (3, 2, LONG_SLOTS)];

/// The placements after the first, where the first was cheap (see
/// [`SECOND_CLASSES_SHARE`]), as `(classes, time reversed)`: [`MORE_PLACEMENTS`] forward in
/// time, then the first's classes, the [`MORE_PLACEMENTS`] and a ratio of 3 with one class by
/// best fit, time reversed ([`reversed`]: the sweeps run from the last slot back, each
/// buffer entering at its end). A sweep places each buffer against what is live when it
/// starts, so a reversed one sees what is live when the buffer ends instead: a different
/// layout of the same problem, not a better one in general. On `generate::heavy_tailed` at a
/// million buffers (seeds 1, 2, 3, 6, whose first placements are at 1.135 / 1.095 / 1.116 /
/// 1.095x the load bound and the forward ones at best 1.083 / 1.077 / 1.116 / 1.092x) the
/// reversed ones reach 1.072 / 1.067 / 1.069 / 1.073x; each of the four reversed ones is the
/// smallest of all on one of those seeds (`docs/MEASUREMENTS.md`, twelfth session).
const LATER_PLACEMENTS: [((u32, u32, u32), bool); 6] = [
    (MORE_PLACEMENTS[0], false),
    (MORE_PLACEMENTS[1], false),
    ((CLASS_RATIO, 1, LONG_SLOTS), true),
    (MORE_PLACEMENTS[0], true),
    (MORE_PLACEMENTS[1], true),
    ((3, 1, LONG_SLOTS), true),
];

/// The solve places with time reversed ([`LATER_PLACEMENTS`], [`reversed_placements`]) only
/// where its best answer after the heuristics (every heuristic's, not only `long-short`'s) is
/// above `num / den` times the load bound. At 1.05x or below the answer is well within 1.07x
/// already, while the reversed placements cost as much again as the forward ones (on
/// heavy-10%-n/100 at a million buffers, forward placements at 1.041-1.043x: +5.3 s of CPU
/// for nothing; on `short` at a million buffers, where `greedy-size` is within it, +1.4 s)
/// and can lead local improvement elsewhere (heavy-3%-n/10 seed 13 went from 1.0325 to
/// 1.0388x after it; `docs/MEASUREMENTS.md`, twelfth session).
const REVERSED_ABOVE: (u64, u64) = (21, 20);

/// A reversed placement replaces the answer only where it is at least `1 / REVERSED_MARGIN`
/// of `long-short`'s forward arena lower: local improvement runs from `long-short`'s
/// answer and lowers it by up to about 1% on these problems, by different amounts from
/// different answers, so a slightly smaller start can end higher. On heavy-10%-n/100 seed 29
/// at a million buffers a reversed placement 0.035% below the forward one ended at 1.0685x
/// after local improvement, against 1.0631x from the forward one.
const REVERSED_MARGIN: u64 = 256;

/// Whether a reversed placement's arena `next` replaces the solve's answer so far (`arena`;
/// `forward`, `long-short`'s own answer, from its forward placements): lower, and at least
/// `1 / REVERSED_MARGIN` of `forward` lower where `back_in_time`.
pub(crate) fn replaces(next: u64, (arena, forward): (u64, u64), back_in_time: bool) -> bool {
    let margin = u128::from(REVERSED_MARGIN);
    next < arena
        && (!back_in_time || u128::from(next) * margin <= u128::from(forward) * (margin - 1))
}

/// The slots of every buffer with time reversed: slot `t` becomes `count - t`, so a buffer
/// over `[lo, hi)` lives over `[count - hi, count - lo)`. Two buffers overlap in time after
/// the reversal exactly when they did before, so a placement valid for one is valid for the
/// other.
fn reversed(slots: &TimeSlots) -> TimeSlots {
    let count = slots.count;
    let mut back = TimeSlots::default();
    back.lo = slots
        .hi
        .iter()
        .map(|&hi| count.saturating_sub(hi))
        .collect();
    back.hi = slots
        .lo
        .iter()
        .map(|&lo| count.saturating_sub(lo))
        .collect();
    back.count = count;
    back
}

/// [`classes_then_short`]'s sweeps are given up once the whole placement's work (the longest
/// class's best fit, the sweeps' reads and the placed buffers they read past) passes this
/// many times its [`GiveUp`]'s work cap: a sweep reads sorted lists in order, several times
/// cheaper per unit than best fit's scattered reads.
const SWEEP_CAP_FACTOR: u64 = 2;

/// `long-short`: [`classes_then_short`] from [`CLASSES_MIN_BUFFERS`] buffers on,
/// [`long_then_short`] below (see [`long_short_with`]).
pub(crate) fn long_short(
    problem: &Problem,
    slots: &TimeSlots,
    scratch: &mut Scratch,
    give_up: GiveUp,
    threads: usize,
) -> Result<Split, ProblemError> {
    Ok(long_short_with(problem, slots, scratch, give_up, threads)?.0)
}

/// [`long_short`], and whether its first placement was cheap enough for the later ones (see
/// [`SECOND_CLASSES_SHARE`]): only then may the solve place again with time reversed
/// ([`reversed_placements`]).
pub(crate) fn long_short_with(
    problem: &Problem,
    slots: &TimeSlots,
    scratch: &mut Scratch,
    give_up: GiveUp,
    threads: usize,
) -> Result<(Split, bool), ProblemError> {
    let classes_from = CLASSES_MIN_BUFFERS;
    #[cfg(test)]
    let classes_from = tests::CLASSES_FROM
        .with(std::cell::Cell::get)
        .unwrap_or(classes_from);
    if problem.len() >= classes_from {
        let first = classes_then_short(
            problem,
            slots,
            scratch,
            give_up,
            (CLASS_RATIO, 1, LONG_SLOTS),
        )?;
        let Split::Placed(mut solution, sweep) = first else {
            return Ok((first, false));
        };
        // Cheap next to the cap: more placements with other classes (see
        // `LATER_PLACEMENTS`), the smallest arena kept (the first on ties). Their work adds
        // to the first's: the scratch holds the last best fit's, the rest is returned beside
        // it.
        // Cheap next to `auto`'s cap at this size, even where nothing caps the placement
        // (`long-short` asked for by name): the later ones are extra tries, and on a problem
        // whose first placement is quadratic they would triple its time.
        let spent = scratch.work().saturating_add(sweep);
        let cap = give_up.work.min(
            (problem.len() as u64)
                .saturating_mul(SCALE_WORK_PER_BUFFER)
                .max(SCALE_WORK_FLOOR),
        );
        if spent.saturating_mul(SECOND_CLASSES_SHARE) > cap {
            return Ok((Split::Placed(solution, sweep), false));
        }
        // The later placements run side by side on `threads` threads (each with working
        // memory of its own; the caller's scratch is the first thread's), and are read in
        // order: the answer and the work do not depend on the thread count. The reversed
        // ones are a later phase of the solve (see `reversed_placements`).
        let forward: Vec<(u32, u32, u32)> = LATER_PLACEMENTS
            .iter()
            .filter(|p| !p.1)
            .map(|p| p.0)
            .collect();
        let mut states = vec![std::mem::take(scratch)];
        let (placed, work) = placements(problem, slots, &mut states, give_up, threads, &forward)?;
        if let Some(first) = states.into_iter().next() {
            *scratch = first;
        }
        if let Some((next, next_arena)) = placed
            && next_arena < solution.arena_size(problem)
        {
            solution = next;
        }
        // Everything's work but what the caller reads in the scratch (the last best fit run
        // there).
        let total = spent.saturating_add(work);
        Ok((
            Split::Placed(solution, total.saturating_sub(scratch.work())),
            true,
        ))
    } else {
        Ok((long_then_short(problem, slots, scratch, give_up)?, false))
    }
}

/// Places with each of `classes` ([`classes_then_short`]) side by side on `threads` threads
/// (one of `states` each), read in order: the smallest arena (the first on ties) and every
/// placement's whole work (its best fit's and its sweep's), the same for any thread count.
fn placements(
    problem: &Problem,
    slots: &TimeSlots,
    states: &mut Vec<Scratch>,
    give_up: GiveUp,
    threads: usize,
    classes: &[(u32, u32, u32)],
) -> Result<(Option<(Solution, u64)>, u64), ProblemError> {
    let placed = run_portfolio(
        classes.len(),
        threads,
        states,
        |scratch: &mut Scratch, k| {
            let classes = classes.get(k).copied()?;
            Some(
                match classes_then_short(problem, slots, scratch, give_up, classes) {
                    Ok(Split::Placed(next, sweep)) => {
                        Ok((Some(next), scratch.work().saturating_add(sweep)))
                    }
                    Ok(Split::GivenUp(work)) => Ok((None, work)),
                    Ok(Split::Overflow) => Ok((None, scratch.work())),
                    Err(e) => Err(e),
                },
            )
        },
        |_| false,
    );
    let mut best: Option<(Solution, u64)> = None;
    let mut total = 0u64;
    for result in placed.into_iter().flatten().flatten() {
        let (next, work) = result?;
        total = total.saturating_add(work);
        if let Some(next) = next {
            let next_arena = next.arena_size(problem);
            if best.as_ref().is_none_or(|(_, a)| next_arena < *a) {
                best = Some((next, next_arena));
            }
        }
    }
    Ok((best, total))
}

/// Whether the solve places with time reversed ([`reversed_placements`]) after its
/// heuristics: only where `long-short`'s later placements ran (its first was cheap) and the
/// best answer so far, `best`, is above `num / den` times the load bound `bound`
/// ([`REVERSED_ABOVE`]) and above what the solve accepts (`accepted`).
pub(crate) fn reversed_wanted(best: u64, bound: u64, accepted: u64, cheap: bool) -> bool {
    let (num, den) = REVERSED_ABOVE;
    cheap
        && best > accepted
        && u128::from(best) * u128::from(den) > u128::from(bound) * u128::from(num)
}

/// `long-short`'s placements with time reversed ([`LATER_PLACEMENTS`]), a later phase of the
/// solve ([`reversed_wanted`]), side by side on `threads` threads: the smallest arena (the
/// first on ties), kept by the solve where it [`replaces`] the answer so far, and the work of
/// all of them.
pub(crate) fn reversed_placements(
    problem: &Problem,
    slots: &TimeSlots,
    states: &mut Vec<Scratch>,
    give_up: GiveUp,
    threads: usize,
) -> Result<(Option<(Solution, u64)>, u64), ProblemError> {
    let back = reversed(slots);
    let classes: Vec<(u32, u32, u32)> = LATER_PLACEMENTS
        .iter()
        .filter(|p| p.1)
        .map(|p| p.0)
        .collect();
    placements(problem, &back, states, give_up, threads, &classes)
}

/// What [`long_then_short`] or [`classes_then_short`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Split {
    /// Every buffer placed, and the sweep's work (entries of the live set read, searches
    /// made, buffers added and taken out; the long buffers' placement counts in the
    /// scratch's work).
    Placed(Solution, u64),
    /// Given up where its [`GiveUp`] said so, after this much work.
    GivenUp(u64),
    /// Offsets would pass `u64::MAX / 2` (the other heuristics report overflow exactly
    /// there).
    Overflow,
}

/// Places every buffer as the module docs say; the long buffers' best fit is given up where
/// `give_up` says.
pub(crate) fn long_then_short(
    problem: &Problem,
    slots: &TimeSlots,
    scratch: &mut Scratch,
    give_up: GiveUp,
) -> Result<Split, ProblemError> {
    let n = problem.len();
    let long = |i: usize| {
        let (lo, hi) = (slots.lo.get(i).copied(), slots.hi.get(i).copied());
        lo.zip(hi).is_some_and(|(lo, hi)| hi - lo >= LONG_SLOTS)
    };
    // (1) The long buffers, best fit in lifetime order, on their own.
    let ids: Vec<u32> = placement_order(problem, slots, Order::Lifetime)
        .into_iter()
        .filter(|&id| long(id as usize))
        .collect();
    let Some(long_placed) = best_fit_within(problem, slots, &ids, scratch, give_up)? else {
        return Ok(Split::GivenUp(scratch.work()));
    };
    let mut offsets = long_placed.offsets;
    offsets.resize(n, 0);
    // (2) The sweep. Long buffers by start (to join the live set, and to be avoided by the
    // short ones they start during), short ones by start, then size descending, then id.
    let mut long_by_start: Vec<u32> = ids;
    long_by_start.sort_unstable_by_key(|&id| (slots.lo.get(id as usize).copied(), id));
    let short: Vec<u32> = (0..n as u32).filter(|&id| !long(id as usize)).collect();
    match sweep(
        problem,
        slots,
        &mut offsets,
        &long_by_start,
        short,
        u64::MAX,
    )? {
        Swept::Done { work, .. } => Ok(Split::Placed(Solution { offsets }, work + 2 * n as u64)),
        Swept::Overflow | Swept::GivenUp => Ok(Split::Overflow),
    }
}

/// As [`long_then_short`], but the long buffers in classes of lifetime, each `ratio` times
/// longer than the one below it (from `long_slots`, [`LONG_SLOTS`] in `long_then_short`; the
/// buffers living fewer slots are the short ones): the `best_fit_classes` longest classes by
/// best fit, longest first; then every other class, longest class first, in one sweep over time against
/// everything placed before it, as the short ones are (which come last). The best fit of all
/// the long buffers is quadratic where tens of thousands of them are live at once (heavy
/// tails reaching half the step at a million buffers: 100,000 long buffers, 17.8 s); the
/// longest class holds few of them, and a sweep costs `O(log n)` per buffer plus the longer
/// ones that start during its life.
pub(crate) fn classes_then_short(
    problem: &Problem,
    slots: &TimeSlots,
    scratch: &mut Scratch,
    give_up: GiveUp,
    (ratio, best_fit_classes, long_slots): (u32, u32, u32),
) -> Result<Split, ProblemError> {
    let n = problem.len();
    let class = |i: usize| {
        let (lo, hi) = (slots.lo.get(i).copied(), slots.hi.get(i).copied());
        let len = lo.zip(hi).map_or(0, |(lo, hi)| hi - lo);
        let mut k = 0u32;
        let mut from = long_slots.max(1);
        while len >= from {
            k += 1;
            from = from.saturating_mul(ratio.max(2));
            if from == u32::MAX {
                break;
            }
        }
        k
    };
    let classes: Vec<u32> = (0..n).map(class).collect();
    let top = classes.iter().copied().max().unwrap_or(0);
    // The classes placed by best fit: `from` up to `top` (never the short buffers, class 0).
    let from = top
        .saturating_sub(best_fit_classes.saturating_sub(1))
        .max(1);
    let ids: Vec<u32> = placement_order(problem, slots, Order::Lifetime)
        .into_iter()
        .filter(|&id| top > 0 && classes.get(id as usize).is_some_and(|&c| c >= from))
        .collect();
    let Some(top_placed) = best_fit_within(problem, slots, &ids, scratch, give_up)? else {
        return Ok(Split::GivenUp(scratch.work()));
    };
    let mut offsets = top_placed.offsets;
    offsets.resize(n, 0);
    let mut placed = ids;
    let mut work = (2 * n as u64).saturating_add(scratch.work());
    // The sweeps' work counts the placed buffers each placement reads past too (the
    // classes' sweeps read many: on a training step, every saved activation of a longer
    // class that starts during the life of one of a shorter class), so that a give-up at
    // `SWEEP_CAP_FACTOR` times the cap bounds them as well.
    let cap = give_up.work.saturating_mul(SWEEP_CAP_FACTOR);
    // Every class below the top one; with no long buffers, the short ones.
    for k in (0..from.min(top).max(1)).rev() {
        placed.sort_unstable_by_key(|&id| (slots.lo.get(id as usize).copied(), id));
        let class_k: Vec<u32> = (0..n as u32)
            .filter(|&id| classes.get(id as usize) == Some(&k))
            .collect();
        let left = cap.saturating_sub(work);
        match sweep(problem, slots, &mut offsets, &placed, class_k.clone(), left)? {
            Swept::Done {
                work: spent,
                scanned,
            } => work += spent + scanned,
            Swept::Overflow => return Ok(Split::Overflow),
            Swept::GivenUp => return Ok(Split::GivenUp(cap)),
        }
        placed.extend(class_k);
    }
    Ok(Split::Placed(
        Solution { offsets },
        work.saturating_sub(scratch.work()),
    ))
}

/// What [`sweep`] did.
enum Swept {
    /// Every buffer placed: the work (entries of the live set read, searches made) and the
    /// placed buffers read past.
    Done { work: u64, scanned: u64 },
    /// Offsets would pass `u64::MAX / 2`.
    Overflow,
    /// The work and the buffers read past passed the cap.
    GivenUp,
}

/// Places the buffers of `short` (the others' offsets are in `offsets` already; `placed`
/// holds them sorted by start slot, then id) in one sweep over time, each at the smallest gap
/// that holds it among the buffers live at its start and the placed ones that start during
/// its life (see the module docs); given up once its work and the placed buffers it read past
/// pass `cap`.
fn sweep(
    problem: &Problem,
    slots: &TimeSlots,
    offsets: &mut [u64],
    placed: &[u32],
    mut short: Vec<u32>,
    cap: u64,
) -> Result<Swept, ProblemError> {
    let mut scanned = 0u64;
    let long_by_start = placed;
    short.retain(|&id| problem.buffers.get(id as usize).is_some_and(|b| b.size > 0));
    short.sort_unstable_by_key(|&id| {
        let size = problem.buffers.get(id as usize).map_or(0, |b| b.size);
        (slots.lo.get(id as usize).copied(), !size, id)
    });
    // Ends, earliest first: every placed buffer leaves the live set at its end.
    let mut ends: BinaryHeap<Reverse<(u32, u32)>> = BinaryHeap::with_capacity(problem.len());
    let mut live = Ranges::new(true);
    let mut o: Vec<(u64, u64)> = Vec::new();
    let limit = u64::MAX / 2;
    let range_of = |id: u32, offsets: &[u64]| {
        let i = id as usize;
        let size = problem.buffers.get(i).map_or(0, |b| b.size);
        let offset = offsets.get(i).copied().unwrap_or(0);
        (offset, offset.saturating_add(size))
    };
    for &id in long_by_start {
        if let Some(&hi) = slots.hi.get(id as usize)
            && problem.buffers.get(id as usize).is_some_and(|b| b.size > 0)
        {
            ends.push(Reverse((hi, id)));
        }
    }
    let (mut next_long, mut next_short) = (0, 0);
    let mut work = 0u64;
    // Slots where something happens, in order.
    loop {
        let t_long = long_by_start
            .get(next_long)
            .and_then(|&id| slots.lo.get(id as usize));
        let t_short = short
            .get(next_short)
            .and_then(|&id| slots.lo.get(id as usize));
        let Some(t) = [t_long, t_short].into_iter().flatten().min().copied() else {
            break;
        };
        // Everything that ended at or before `t` leaves.
        while let Some(&Reverse((end, id))) = ends.peek()
            && end <= t
        {
            ends.pop();
            let (offset, end) = range_of(id, offsets);
            let removed = live.remove(offset, end);
            debug_assert!(removed, "buffer {id} was not live");
        }
        while let Some(&id) = long_by_start.get(next_long)
            && slots.lo.get(id as usize) == Some(&t)
        {
            let (offset, end) = range_of(id, offsets);
            if end > offset {
                let inserted = live.insert(offset, end);
                debug_assert!(inserted, "long buffer {id} overlaps a live one");
            }
            next_long += 1;
        }
        while let Some(&id) = short.get(next_short)
            && slots.lo.get(id as usize) == Some(&t)
        {
            let i = id as usize;
            let (Some(b), Some(&hi)) = (problem.buffers.get(i), slots.hi.get(i)) else {
                next_short += 1;
                continue;
            };
            // The long buffers that start during this one's life (after `t`).
            o.clear();
            let from = long_by_start
                .partition_point(|&l| slots.lo.get(l as usize).is_some_and(|&lo| lo <= t));
            for &l in long_by_start.get(from..).unwrap_or(&[]) {
                if slots.lo.get(l as usize).is_none_or(|&lo| lo >= hi) {
                    break;
                }
                scanned += 1;
                let (offset, end) = range_of(l, offsets);
                if end > offset {
                    o.push((offset, end));
                }
            }
            union_in_place(&mut o);
            if live.top() > limit || o.last().is_some_and(|r| r.1 > limit) {
                return Ok(Swept::Overflow);
            }
            let (found, spent) = fit(&live, &o, b.size, b.align);
            work += spent + 2;
            if work.saturating_add(scanned) > cap {
                return Ok(Swept::GivenUp);
            }
            let offset = match found {
                Fit::Gap(offset) => offset,
                Fit::Top(top) => align_up(top, b.align).ok_or(ProblemError::TooLarge)?,
            };
            let end = offset.checked_add(b.size).ok_or(ProblemError::TooLarge)?;
            if let Some(slot) = offsets.get_mut(i) {
                *slot = offset;
            }
            let inserted = live.insert(offset, end);
            debug_assert!(inserted, "short buffer {id} placed over a live one");
            ends.push(Reverse((hi, id)));
            next_short += 1;
        }
    }
    Ok(Swept::Done { work, scanned })
}

/// Sorts ranges and merges those that overlap or touch.
fn union_in_place(ranges: &mut Vec<(u64, u64)>) {
    ranges.sort_unstable();
    let mut kept: usize = 0;
    for k in 0..ranges.len() {
        let Some(&r) = ranges.get(k) else { break };
        match kept.checked_sub(1).and_then(|j| ranges.get_mut(j)) {
            Some(last) if r.0 <= last.1 => last.1 = last.1.max(r.1),
            _ => {
                if let Some(slot) = ranges.get_mut(kept) {
                    *slot = r;
                }
                kept += 1;
            }
        }
    }
    ranges.truncate(kept);
}

#[cfg(test)]
mod tests {
    thread_local! {
        /// Replaces `CLASSES_MIN_BUFFERS` in `long_short` on this thread.
        pub(super) static CLASSES_FROM: std::cell::Cell<Option<usize>> =
            const { std::cell::Cell::new(None) };
    }

    use super::*;
    use crate::generate::{Shape, SplitMix64};
    use crate::problem::Buffer;
    use crate::{Gap, Producer, SolveOptions, lower_bound, verify};

    fn place(problem: &Problem) -> Solution {
        let slots = TimeSlots::new(problem);
        let placed = long_then_short(problem, &slots, &mut Scratch::default(), GiveUp::NEVER);
        let Split::Placed(solution, _) = placed.expect("valid") else {
            panic!("no overflow, never given up");
        };
        verify(problem, &solution).expect("long-short's placement is valid");
        solution
    }

    /// A training step by hand: forward step `i` of `k` saves an activation read at the
    /// mirrored backward step (nested like parentheses) and makes a temporary that dies at
    /// the next step, as does each backward step.
    fn nested_step() -> Problem {
        let k = 300u64;
        let mut rng = SplitMix64::new(7);
        let mut buffers = Vec::new();
        // The turn (the loss and its gradient) lasts 64 steps with a temporary each, so that
        // every saved activation lives at least 64 slots: long.
        let turn = 2 * k + 64;
        for t in k..k + 64 {
            buffers.push(Buffer::new(t, t + 1, 1 + rng.below(5000)));
        }
        for i in 0..k {
            buffers.push(Buffer::new(i, turn - i, 1 + rng.below(1000)));
            buffers.push(Buffer::new(i, i + 1, 1 + rng.below(5000)));
            buffers.push(Buffer::new(turn - i, turn - i + 1, 1 + rng.below(5000)));
        }
        Problem::new(buffers)
    }

    /// Stacked longest first, each saved activation of [`nested_step`] sits on those that
    /// enclose it, and each temporary on top of the ones live: the arena is the peak of live
    /// bytes, exactly.
    #[test]
    fn nested_saved_activations_stack_to_the_bound() {
        let problem = nested_step();
        let solution = place(&problem);
        let bound = lower_bound(&problem);
        assert_eq!(solution.arena_size(&problem), bound);
    }

    /// [`nested_step`] in classes of lifetime: each saved activation still goes
    /// on the ones that enclose it (longer, so placed before it, or of its class and live
    /// at its start), so the classes stack to the bound too.
    #[test]
    fn nested_saved_activations_in_classes_stack_to_the_bound() {
        let problem = nested_step();
        let slots = TimeSlots::new(&problem);
        for ratio in [2, 3, 4] {
            let placed = classes_then_short(
                &problem,
                &slots,
                &mut Scratch::default(),
                GiveUp::NEVER,
                (ratio, 1, LONG_SLOTS),
            );
            let Split::Placed(solution, _) = placed.expect("valid") else {
                panic!("no overflow, never given up");
            };
            verify(&problem, &solution).expect("a valid placement");
            assert_eq!(
                solution.arena_size(&problem),
                lower_bound(&problem),
                "{ratio}"
            );
        }
    }

    /// With one class of long buffers (a ratio no lifetime reaches), or every class by best
    /// fit, the classes are `long_then_short` exactly: same offsets (and same work, for the
    /// first). With more, in the classes of every placement `long_short` makes at scale
    /// (one or two by best fit, ratios 2 to 4), every shape of the
    /// family, aligned or not, places validly and the same way twice, and `long_short` picks
    /// by size.
    #[test]
    fn classes_are_long_then_short_with_one_class_and_valid_with_many() {
        for (k, shape) in Shape::FAMILY.into_iter().enumerate() {
            let problem = family_member(shape, k, 60, k % 2 == 0);
            let slots = TimeSlots::new(&problem);
            let classes_by = |classes: (u32, u32, u32)| {
                let mut scratch = Scratch::default();
                let placed =
                    classes_then_short(&problem, &slots, &mut scratch, GiveUp::NEVER, classes);
                (placed.expect("valid"), scratch.work())
            };
            let classes = |ratio: u32| classes_by((ratio, 1, LONG_SLOTS));
            let offsets = |split: &Split| match split {
                Split::Placed(solution, _) => solution.offsets.clone(),
                other => panic!("{shape}: {other:?}"),
            };
            let mut scratch = Scratch::default();
            let long = long_then_short(&problem, &slots, &mut scratch, GiveUp::NEVER);
            let one_class = classes(u32::MAX);
            assert_eq!(
                offsets(&one_class.0),
                offsets(&long.expect("valid")),
                "{shape}"
            );
            assert_eq!(one_class.1, scratch.work(), "{shape}");
            // Every class by best fit: `long_then_short` again, whatever the ratio.
            let mut scratch = Scratch::default();
            let long = long_then_short(&problem, &slots, &mut scratch, GiveUp::NEVER);
            assert_eq!(
                offsets(&classes_by((2, u32::MAX, LONG_SLOTS)).0),
                offsets(&long.expect("valid")),
                "{shape}"
            );
            // The first placement at scale, another ratio, and every later one.
            let tried = [(CLASS_RATIO, 1, LONG_SLOTS), (4, 1, LONG_SLOTS)];
            for classes in tried.into_iter().chain(MORE_PLACEMENTS) {
                let (first, second) = (classes_by(classes), classes_by(classes));
                let Split::Placed(solution, _) = &first.0 else {
                    panic!("{shape}: no overflow, never given up");
                };
                verify(&problem, solution).unwrap_or_else(|e| panic!("{shape} {classes:?}: {e}"));
                assert_eq!(first, second, "{shape} {classes:?}");
            }
            let mut scratch = Scratch::default();
            let picked = long_short(&problem, &slots, &mut scratch, GiveUp::NEVER, 2);
            let mut scratch = Scratch::default();
            let long = long_then_short(&problem, &slots, &mut scratch, GiveUp::NEVER);
            assert_eq!(picked.expect("valid"), long.expect("valid"), "{shape}");
        }
    }

    /// A cap on the work gives the classes up (with the work done, about the cap) where
    /// the sweeps read more than that, and changes nothing where they read less.
    #[test]
    fn classes_are_given_up_past_twice_the_cap() {
        let problem = Shape::Training { saved_percent: 33 }.generate(4000, 3);
        let slots = TimeSlots::new(&problem);
        let run = |cap: u64| {
            let mut scratch = Scratch::default();
            let split = classes_then_short(
                &problem,
                &slots,
                &mut scratch,
                GiveUp::at_work(cap),
                (2, 1, LONG_SLOTS),
            );
            (split.expect("valid"), scratch.work())
        };
        // The longest class's best fit, then the sweeps.
        let (Split::Placed(solution, sweeps), top) = run(u64::MAX) else {
            panic!("never given up");
        };
        let whole = top + sweeps;
        // A cap the best fit stays under, and twice which the sweeps pass.
        assert!(top < whole / 2 - 1, "{sweeps} {top}");
        assert_eq!(run(whole.div_ceil(2)).0, Split::Placed(solution, sweeps));
        let cap = whole / 2 - 1;
        assert_eq!(run(cap).0, Split::GivenUp(cap * SWEEP_CAP_FACTOR));
    }

    /// The family's `k`-th shape at 3,000 buffers (seed `seed + k`), with alignments of 1 to
    /// 64 bytes drawn per buffer where `aligned`.
    fn family_member(shape: Shape, k: usize, seed: u64, aligned: bool) -> Problem {
        let mut problem = shape.generate(3000, seed + k as u64);
        if aligned {
            let mut rng = SplitMix64::new(k as u64);
            for b in &mut problem.buffers {
                b.align = 1 << rng.below(7);
            }
        }
        problem
    }

    /// Every shape of the family, aligned or not: a valid placement, the same one twice, and
    /// the work counted the same way.
    #[test]
    fn every_shape_places_validly_and_deterministically() {
        for (k, shape) in Shape::FAMILY.into_iter().enumerate() {
            let problem = family_member(shape, k, 40, k % 2 == 1);
            let slots = TimeSlots::new(&problem);
            let run = || {
                long_then_short(&problem, &slots, &mut Scratch::default(), GiveUp::NEVER)
                    .expect("valid")
            };
            let (first, second) = (run(), run());
            let Split::Placed(solution, _) = &first else {
                panic!("{shape}: no overflow, never given up");
            };
            verify(&problem, solution).unwrap_or_else(|e| panic!("{shape}: {e}"));
            assert_eq!(first, second, "{shape}");
            assert!(solution.arena_size(&problem) >= lower_bound(&problem));
        }
    }

    /// A heavy-tailed problem of 6,000 buffers (a tenth of them in the long tail), whose
    /// `long-short` placements end far above the load bound.
    fn heavy_problem() -> Problem {
        Shape::HeavyTailed {
            tail_permille: 100,
            divisor: 100,
        }
        .generate(6000, 7)
    }

    /// Time reversed, two buffers overlap exactly where they did (every pair of a problem
    /// with many shared and touching ends), every slot stays within the count, and reversing
    /// twice gives the slots back.
    #[test]
    fn reversed_time_keeps_every_overlap() {
        let mut rng = SplitMix64::new(11);
        let buffers: Vec<Buffer> = (0..300)
            .map(|_| {
                let start = rng.below(40);
                Buffer::new(start, start + 1 + rng.below(6), 1 + rng.below(100))
            })
            .collect();
        let problem = Problem::new(buffers);
        let slots = TimeSlots::new(&problem);
        let back = reversed(&slots);
        let overlap = |s: &TimeSlots, i: usize, j: usize| s.lo[i] < s.hi[j] && s.lo[j] < s.hi[i];
        let mut overlapping = 0;
        for (i, a) in problem.buffers.iter().enumerate() {
            assert!(back.lo[i] < back.hi[i] && back.hi[i] <= back.count);
            for (j, b) in problem.buffers.iter().enumerate() {
                assert_eq!(overlap(&back, i, j), a.overlaps_in_time(b), "{a:?} {b:?}");
                overlapping += usize::from(a.overlaps_in_time(b));
            }
        }
        assert!(overlapping > 300 * 20, "{overlapping}");
        let again = reversed(&back);
        assert_eq!((again.lo, again.hi), (slots.lo.clone(), slots.hi.clone()));
    }

    /// `long-short`'s later placements, time reversed ones included, each valid; on this
    /// problem a reversed one is smaller than every forward one by more than
    /// [`REVERSED_MARGIN`] asks: [`reversed_placements`] returns it (on one thread or two),
    /// and the solve keeps it, in a phase of its own.
    #[test]
    fn reversed_placements_are_valid_and_kept_where_smaller() {
        let problem = heavy_problem();
        let slots = TimeSlots::new(&problem);
        let back = reversed(&slots);
        let arena_of = |classes: (u32, u32, u32), back_in_time: bool| {
            let slots = if back_in_time { &back } else { &slots };
            let split = classes_then_short(
                &problem,
                slots,
                &mut Scratch::default(),
                GiveUp::NEVER,
                classes,
            );
            let Ok(Split::Placed(solution, _)) = split else {
                panic!("never given up");
            };
            verify(&problem, &solution).expect("valid");
            solution.arena_size(&problem)
        };
        let first = arena_of((CLASS_RATIO, 1, LONG_SLOTS), false);
        let (mut forward, mut backward) = (first, u64::MAX);
        for (classes, back_in_time) in LATER_PLACEMENTS {
            let arena = arena_of(classes, back_in_time);
            if back_in_time {
                backward = backward.min(arena);
            } else {
                forward = forward.min(arena);
            }
        }
        assert!(
            backward * REVERSED_MARGIN <= forward * (REVERSED_MARGIN - 1),
            "{backward} {forward}"
        );
        for threads in [1, 2] {
            let placed =
                reversed_placements(&problem, &slots, &mut Vec::new(), GiveUp::NEVER, threads);
            let (Some((solution, arena)), _) = placed.expect("valid") else {
                panic!("never given up");
            };
            verify(&problem, &solution).expect("valid");
            assert_eq!((solution.arena_size(&problem), arena), (backward, backward));
        }
        let outcome = solve_long_short(&problem, Gap::default());
        verify(&problem, outcome.solution.as_ref().expect("solved")).expect("valid");
        assert_eq!(outcome.arena, backward);
        assert_eq!(outcome.produced_by, Producer::ReversedLongShort);
    }

    /// `long-short` by name through the solve, its classes at any size on this thread, on
    /// one thread.
    fn solve_long_short(problem: &Problem, gap: Gap) -> crate::Outcome {
        let options = SolveOptions::default()
            .with_strategy(crate::Strategy::LongShort)
            .with_threads(1)
            .with_gap(gap);
        CLASSES_FROM.with(|c| c.set(Some(0)));
        let outcome = crate::solve(problem, &options);
        CLASSES_FROM.with(|c| c.set(None));
        outcome.expect("solves")
    }

    /// A forward placement replaces the answer where it is lower at all; a reversed one only
    /// where it is at least 1/256 of the forward answer lower, and lower than the answer so
    /// far.
    #[test]
    fn reversed_placements_replace_only_by_a_margin() {
        let forward = 256_000;
        assert!(replaces(forward - 1, (forward, forward), false));
        assert!(!replaces(forward, (forward, forward), false));
        assert!(!replaces(forward - 999, (forward, forward), true));
        assert!(replaces(forward - 1000, (forward, forward), true));
        assert!(!replaces(forward - 1000, (forward - 1000, forward), true));
        assert!(replaces(forward - 1001, (forward - 1000, forward), true));
        assert!(replaces(0, (u64::MAX, u64::MAX), true));
        assert!(!replaces(u64::MAX - 1, (u64::MAX, u64::MAX), true));
    }

    /// The reversed placements run (a phase of the solve) only where the best answer so far
    /// is above 1.05x the load bound ([`REVERSED_ABOVE`]) and above what the solve accepts,
    /// and only after `long-short`'s later placements: on a nested step (the forward ones at
    /// the bound) no such phase, on a heavy-tailed problem whose forward placements end
    /// higher one with work and its arena, and none there with a gap that accepts their answer.
    #[test]
    fn reversed_placements_run_only_far_above_the_bound() {
        let (num, den) = REVERSED_ABOVE;
        assert!(reversed_wanted(num * 100 + 1, den * 100, 0, true));
        assert!(!reversed_wanted(num * 100, den * 100, 0, true));
        assert!(!reversed_wanted(num * 100 + 1, den * 100, 0, false));
        assert!(!reversed_wanted(
            num * 100 + 1,
            den * 100,
            num * 100 + 1,
            true
        ));
        assert!(reversed_wanted(u64::MAX, u64::MAX / 2, 0, true));
        for (problem, far) in [(nested_step(), false), (heavy_problem(), true)] {
            let bound = lower_bound(&problem);
            let mut best = u64::MAX;
            let slots = TimeSlots::new(&problem);
            let first = (CLASS_RATIO, 1, LONG_SLOTS);
            for classes in std::iter::once(first).chain(MORE_PLACEMENTS) {
                let placed = classes_then_short(
                    &problem,
                    &slots,
                    &mut Scratch::default(),
                    GiveUp::NEVER,
                    classes,
                );
                let Ok(Split::Placed(solution, _)) = placed else {
                    panic!("never given up");
                };
                best = best.min(solution.arena_size(&problem));
            }
            assert_eq!(best * den > bound * num, far);
            let outcome = solve_long_short(&problem, Gap::default());
            verify(&problem, outcome.solution.as_ref().expect("solved")).expect("valid");
            assert!(outcome.arena <= best);
            let reversed_phase = |outcome: &crate::Outcome| {
                let producer = Producer::ReversedLongShort;
                outcome
                    .phases
                    .iter()
                    .find(|p| p.producer == producer)
                    .cloned()
            };
            match reversed_phase(&outcome) {
                Some(phase) => {
                    assert!(far, "{phase:?}");
                    assert!(phase.work > 0 && phase.arena.is_some(), "{phase:?}");
                    assert_eq!(phase.gained, best - outcome.arena, "{phase:?}");
                }
                None => assert!(!far, "{:?}", outcome.phases),
            }
            // A gap that accepts the forward placements' answer.
            let above = (best - bound) as f64 / bound as f64 + 1e-3;
            let accepting = solve_long_short(&problem, Gap::from_fraction(above).expect("a gap"));
            assert_eq!(reversed_phase(&accepting), None);
            assert_eq!(accepting.arena, best);
        }
    }

    /// `long-short` in classes (the threshold lowered on this thread) with its later
    /// placements on one thread or two: the same answer and the same work, valid, never above
    /// the first placement's, and the later placements ran (more work than the first).
    #[test]
    fn later_placements_side_by_side_change_nothing() {
        let problem = heavy_problem();
        let slots = TimeSlots::new(&problem);
        let mut scratch = Scratch::default();
        let first = classes_then_short(
            &problem,
            &slots,
            &mut scratch,
            GiveUp::NEVER,
            (CLASS_RATIO, 1, LONG_SLOTS),
        );
        let Ok(Split::Placed(first, sweep)) = first else {
            panic!("never given up");
        };
        let first_work = scratch.work() + sweep;
        CLASSES_FROM.with(|c| c.set(Some(0)));
        let run = |threads: usize| {
            let mut scratch = Scratch::default();
            let split = long_short(&problem, &slots, &mut scratch, GiveUp::NEVER, threads);
            match split.expect("valid") {
                Split::Placed(solution, rest) => (solution, scratch.work() + rest),
                other => panic!("{other:?}"),
            }
        };
        let (one, two) = (run(1), run(2));
        CLASSES_FROM.with(|c| c.set(None));
        assert_eq!(one, two);
        verify(&problem, &one.0).expect("valid");
        assert!(one.0.arena_size(&problem) <= first.arena_size(&problem));
        assert!(one.1 > first_work, "{} <= {first_work}", one.1);
    }
}
