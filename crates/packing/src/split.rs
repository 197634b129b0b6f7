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

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::gaps::{Fit, Ranges, fit};
use super::greedy::{GiveUp, Order, Scratch, best_fit_within, placement_order};
use super::problem::{Problem, ProblemError, Solution, align_up};
use super::timeline::TimeSlots;

/// The fewest slots a buffer lives to count as long. Short-lived tensors of a step die
/// within a few operators, skip connections within tens; what lives for 64 slots or more is
/// a saved activation, a weight gradient or a cache. (Measured on the generator family:
/// 16, 32, 64 and 256 give the same arenas within 0.5% on heavy-tailed and training-shaped
/// members; see `docs/MEASUREMENTS.md`.)
pub(crate) const LONG_SLOTS: u32 = 64;

/// What [`long_then_short`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Split {
    /// Every buffer placed, and the sweep's work (entries of the live set read, searches
    /// made, buffers added and taken out; the long buffers' placement counts in the
    /// scratch's work).
    Placed(Solution, u64),
    /// The long buffers' best fit was given up (its [`GiveUp`] said so).
    GivenUp,
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
        return Ok(Split::GivenUp);
    };
    let mut offsets = long_placed.offsets;
    offsets.resize(n, 0);
    // (2) The sweep. Long buffers by start (to join the live set, and to be avoided by the
    // short ones they start during), short ones by start, then size descending, then id.
    let mut long_by_start: Vec<u32> = ids;
    long_by_start.sort_unstable_by_key(|&id| (slots.lo.get(id as usize).copied(), id));
    let mut short: Vec<u32> = (0..n as u32)
        .filter(|&id| {
            !long(id as usize) && problem.buffers.get(id as usize).is_some_and(|b| b.size > 0)
        })
        .collect();
    short.sort_unstable_by_key(|&id| {
        let size = problem.buffers.get(id as usize).map_or(0, |b| b.size);
        (slots.lo.get(id as usize).copied(), !size, id)
    });
    // Ends, earliest first: every placed buffer leaves the live set at its end.
    let mut ends: BinaryHeap<Reverse<(u32, u32)>> = BinaryHeap::with_capacity(n);
    let mut live = Ranges::new(true);
    let mut o: Vec<(u64, u64)> = Vec::new();
    let limit = u64::MAX / 2;
    let range_of = |id: u32, offsets: &[u64]| {
        let i = id as usize;
        let size = problem.buffers.get(i).map_or(0, |b| b.size);
        let offset = offsets.get(i).copied().unwrap_or(0);
        (offset, offset.saturating_add(size))
    };
    for &id in &long_by_start {
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
            let (offset, end) = range_of(id, &offsets);
            let removed = live.remove(offset, end);
            debug_assert!(removed, "buffer {id} was not live");
        }
        while let Some(&id) = long_by_start.get(next_long)
            && slots.lo.get(id as usize) == Some(&t)
        {
            let (offset, end) = range_of(id, &offsets);
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
                let (offset, end) = range_of(l, &offsets);
                if end > offset {
                    o.push((offset, end));
                }
            }
            union_in_place(&mut o);
            if live.top() > limit || o.last().is_some_and(|r| r.1 > limit) {
                return Ok(Split::Overflow);
            }
            let (found, spent) = fit(&live, &o, b.size, b.align);
            work += spent + 2;
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
    work += 2 * n as u64;
    Ok(Split::Placed(Solution { offsets }, work))
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
    use super::*;
    use crate::generate::{Shape, SplitMix64};
    use crate::problem::Buffer;
    use crate::{lower_bound, verify};

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
    /// the next step, as does each backward step. Stacked longest first, each saved
    /// activation sits on those that enclose it, and each temporary on top of the ones live:
    /// the arena is the peak of live bytes, exactly.
    #[test]
    fn nested_saved_activations_stack_to_the_bound() {
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
        let problem = Problem::new(buffers);
        let solution = place(&problem);
        let bound = lower_bound(&problem);
        assert_eq!(solution.arena_size(&problem), bound);
    }

    /// Every shape of the family, aligned or not: a valid placement, the same one twice, and
    /// the work counted the same way.
    #[test]
    fn every_shape_places_validly_and_deterministically() {
        for (k, shape) in Shape::FAMILY.into_iter().enumerate() {
            let mut problem = shape.generate(3000, 40 + k as u64);
            if k % 2 == 1 {
                let mut rng = SplitMix64::new(k as u64);
                for b in &mut problem.buffers {
                    b.align = 1 << rng.below(7);
                }
            }
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
}
