//! Bounds on the arena size: the [`lower_bound`] no placement can beat and the
//! [`naive_size`] that placing every buffer side by side needs.
//!
//! The lower bound is alignment-aware without being wrong. Rounding every live buffer up to
//! its alignment is *not* a valid bound (a 1-byte buffer aligned to 8 at offset 0 and a
//! 1-byte unaligned buffer at offset 1 fit in 2 bytes, not 9). What is valid: take the live
//! buffers at time `t` whose alignment is at least `A` (a power of two) and that have bytes.
//! Sorted by offset, each starts at a multiple of `A`, so the next one starts at least
//! `round_up(size, A)` above it, and the topmost one ends at least its own size above its
//! start. So the arena is at least `sum(round_up(size_i, A)) - (A - 1)` over those buffers.
//! [`lower_bound`] is the largest of these over every time and every alignment `A` that
//! occurs in the problem; `A = 1` is the classic bound, the most bytes live at once.
//! Zero-sized buffers count for nothing.

use super::problem::{Problem, ProblemError, align_up};

/// The largest, over time, of the bytes live at once, refined for alignment as the module
/// docs explain. No valid solution has a smaller arena. Runs in `O(n·k + span·k)` for `k`
/// distinct alignments (at most 64) when the times span at most a few times as many steps as
/// there are buffers (schedules numbered step by step), otherwise in `O(n log n + n·k)`.
/// Never panics: buffers with an empty interval count for nothing, an alignment that is not
/// a power of two counts as 1, and sums saturate.
pub fn lower_bound(problem: &Problem) -> u64 {
    let mut classes: Vec<u64> = problem.buffers.iter().map(|b| align_of(b.align)).collect();
    classes.push(1);
    classes.sort_unstable();
    classes.dedup();
    let counted = || {
        problem
            .buffers
            .iter()
            .filter(|b| b.end > b.start && b.size > 0)
    };
    let (min, max) = counted().fold((u64::MAX, 0), |(lo, hi), b| {
        (lo.min(b.start), hi.max(b.end))
    });
    // The dense path adds modulo 2^64, which is exact when no sum can exceed it.
    let largest = classes.last().copied().unwrap_or(1);
    let total = counted().try_fold(0u64, |sum, b| sum.checked_add(align_up(b.size, largest)?));
    let dense_limit = 4 * problem.len() as u64 + 1024;
    match max.checked_sub(min) {
        Some(span) if span <= dense_limit && total.is_some() => {
            by_difference(problem, &classes, min, span)
        }
        Some(_) => by_events(problem, &classes),
        None => 0,
    }
}

fn align_of(a: u64) -> u64 {
    if a.is_power_of_two() { a } else { 1 }
}

/// [`lower_bound`] for times in `[min, min + span]` whose sums cannot overflow: per
/// alignment class, the bytes that start and stop being live at each time, summed over time.
fn by_difference(problem: &Problem, classes: &[u64], min: u64, span: u64) -> u64 {
    let mut diff = vec![0u64; span as usize + 1];
    let mut best = 0u64;
    for &class in classes {
        diff.fill(0);
        for b in &problem.buffers {
            if b.end <= b.start || b.size == 0 || align_of(b.align) < class {
                continue;
            }
            // No overflow: `lower_bound` checked the sum of sizes rounded to the largest class.
            let rounded = align_up(b.size, class).unwrap_or(u64::MAX);
            if let Some(d) = diff.get_mut((b.start - min) as usize) {
                *d = d.wrapping_add(rounded);
            }
            if let Some(d) = diff.get_mut((b.end - min) as usize) {
                *d = d.wrapping_sub(rounded);
            }
        }
        // The sum only grows at a start, so its largest value is reached at one, where the
        // class has a live buffer (as the event sweep takes it).
        let mut live = 0u64;
        for &d in &diff {
            live = live.wrapping_add(d);
            best = best.max(live.saturating_sub(class - 1));
        }
    }
    best
}

/// [`lower_bound`] by a sweep over sorted start and end events.
fn by_events(problem: &Problem, classes: &[u64]) -> u64 {
    // (time, is_start, buffer); ends sort before starts at the same time (half-open).
    let mut events: Vec<(u64, bool, u32)> = Vec::with_capacity(2 * problem.len());
    for (i, b) in problem.buffers.iter().enumerate() {
        if b.end > b.start && b.size > 0 {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            events.push((b.start, true, i));
            events.push((b.end, false, i));
        }
    }
    events.sort_unstable();

    let mut live = vec![0u64; classes.len()];
    let mut best = 0u64;
    for &(_, is_start, i) in &events {
        let Some(b) = problem.buffers.get(i as usize) else {
            continue;
        };
        let align = align_of(b.align);
        for (sum, &class) in live.iter_mut().zip(classes) {
            if class > align {
                break;
            }
            let rounded = align_up(b.size, class).unwrap_or(u64::MAX);
            if is_start {
                *sum = sum.saturating_add(rounded);
                best = best.max(sum.saturating_sub(class - 1));
            } else {
                *sum = sum.saturating_sub(rounded);
            }
        }
    }
    best
}

/// The arena size of the naive placement: buffers in id order, each at the first offset
/// aligned for it above the previous one, with no reuse. An upper bound on the optimum.
pub fn naive_size(problem: &Problem) -> Result<u64, ProblemError> {
    let mut top = 0u64;
    let mut arena = 0u64;
    for b in &problem.buffers {
        let align = if b.align.is_power_of_two() {
            b.align
        } else {
            1
        };
        let offset = align_up(top, align).ok_or(ProblemError::TooLarge)?;
        top = offset.checked_add(b.size).ok_or(ProblemError::TooLarge)?;
        arena = arena.max(top);
    }
    Ok(arena)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Buffer;

    fn aligned(start: u64, end: u64, size: u64, align: u64) -> Buffer {
        Buffer {
            align,
            ..Buffer::new(start, end, size)
        }
    }

    #[test]
    fn touching_intervals_do_not_add_up() {
        let p = Problem::new(vec![Buffer::new(0, 3, 4), Buffer::new(3, 5, 6)]);
        assert_eq!(lower_bound(&p), 6);
    }

    #[test]
    fn overlapping_intervals_add_up() {
        let p = Problem::new(vec![Buffer::new(0, 4, 4), Buffer::new(3, 5, 6)]);
        assert_eq!(lower_bound(&p), 10);
    }

    #[test]
    fn rounding_every_buffer_up_would_be_wrong() {
        // Fits in 2 bytes: the aligned one at 0, the other at 1.
        let p = Problem::new(vec![aligned(0, 2, 1, 8), aligned(0, 2, 1, 1)]);
        assert_eq!(lower_bound(&p), 2);
    }

    #[test]
    fn alignment_refines_the_bound() {
        // Two 1-byte buffers aligned to 8 need offsets 0 and 8: the arena is at least 9.
        let p = Problem::new(vec![aligned(0, 2, 1, 8), aligned(0, 2, 1, 8)]);
        assert_eq!(lower_bound(&p), 9);
    }

    #[test]
    fn dense_and_sparse_times_give_the_same_bound() {
        // Times numbered step by step take the difference path; the same problem spread
        // over sparse times takes the event path. Random sizes, lifetimes and alignments.
        let mut rng = crate::generate::SplitMix64::new(3);
        for case in 0..200 {
            let n = 1 + rng.below(60) as usize;
            let buffers: Vec<Buffer> = (0..n)
                .map(|_| {
                    let start = rng.below(40);
                    let end = start + rng.below(12);
                    let size = rng.below(3) * rng.below(1000);
                    aligned(start, end, size, [1, 1, 2, 8, 64, 3][rng.below(6) as usize])
                })
                .collect();
            let spread: Vec<Buffer> = buffers
                .iter()
                .map(|b| Buffer {
                    start: b.start << 40,
                    end: b.end << 40,
                    ..*b
                })
                .collect();
            let dense = lower_bound(&Problem::new(buffers));
            let sparse = lower_bound(&Problem::new(spread));
            assert_eq!(dense, sparse, "case {case}");
        }
        // Sums that overflow take the event path and saturate.
        let huge = Problem::new(vec![Buffer::new(0, 2, u64::MAX), Buffer::new(1, 3, 5)]);
        assert_eq!(lower_bound(&huge), u64::MAX);
    }

    #[test]
    fn naive_size_aligns_each_offset() {
        let p = Problem::new(vec![aligned(0, 1, 3, 1), aligned(5, 6, 4, 8)]);
        assert_eq!(naive_size(&p), Ok(12));
    }

    #[test]
    fn naive_size_overflow_is_an_error() {
        let p = Problem::new(vec![Buffer::new(0, 1, u64::MAX), Buffer::new(0, 1, 1)]);
        assert_eq!(naive_size(&p), Err(ProblemError::TooLarge));
    }
}
