//! A stronger lower bound where the classic one leaves a gap open: the exact search's bound on
//! a window of time around the peak.
//!
//! Any placement of a problem, restricted to some of its buffers, is a placement of those
//! buffers; and cutting their lifetimes shorter only removes conflicts. So the smallest arena
//! of the buffers that overlap a window of time `[t0, t1)`, each live only over its part of
//! the window, is a lower bound on the whole problem's arena. The exact search
//! ([`crate::exact`]) proves heights of such a small problem infeasible: its proven bound is
//! then a bound of the whole problem too, and can be above the most bytes live at once (the
//! window's buffers may not pack at the peak without gaps that their neighbours in time
//! force).
//!
//! [`window_bound`] takes the time where the most bytes are live and widens a window around
//! it, step by step in compressed time, while it holds at most `max_buffers` buffers; it runs
//! the exact search (minimize mode, a node budget, one thread: deterministic) on each
//! window and keeps the highest proven bound, never below [`crate::lower_bound`].

use std::time::Duration;

use super::bound::lower_bound;
use super::exact::{SearchOptions, search};
use super::problem::{Buffer, Problem};

/// The largest windows searched, in buffers.
pub const WINDOW_MAX_BUFFERS: usize = 400;

/// The widths tried, in distinct times on each side of the peak (the last ones may be cut
/// by [`WINDOW_MAX_BUFFERS`]).
const WIDTHS: [usize; 6] = [1, 2, 4, 8, 16, 32];

/// The lower bound proven on windows of time around the peak (see the module docs), spending
/// at most `node_limit` nodes of the exact search in all. At least [`lower_bound`]. Every
/// buffer of the problem must have `start < end` or count for nothing (as in
/// [`lower_bound`]).
pub fn window_bound(problem: &Problem, node_limit: u64) -> u64 {
    let classic = lower_bound(problem);
    let live: Vec<&Buffer> = problem
        .buffers
        .iter()
        .filter(|b| b.end > b.start && b.size > 0)
        .collect();
    let Some(peak) = peak_time(&live) else {
        return classic;
    };
    // The distinct times, to widen the window by steps of the schedule.
    let mut times: Vec<u64> = live.iter().flat_map(|b| [b.start, b.end]).collect();
    times.sort_unstable();
    times.dedup();
    let at = times.partition_point(|&t| t < peak);
    let mut best = classic;
    let mut last_len = 0;
    let share = node_limit / WIDTHS.len() as u64;
    for width in WIDTHS {
        let t0 = times.get(at.saturating_sub(width)).copied().unwrap_or(peak);
        let t1 = times
            .get(at + width)
            .copied()
            .unwrap_or_else(|| times.last().copied().unwrap_or(peak));
        let t1 = t1.max(peak + 1);
        let window: Vec<Buffer> = live
            .iter()
            .filter(|b| b.start < t1 && t0 < b.end)
            .map(|b| Buffer {
                start: b.start.max(t0),
                end: b.end.min(t1),
                ..**b
            })
            .collect();
        if window.len() > WINDOW_MAX_BUFFERS {
            break;
        }
        if window.len() == last_len {
            continue;
        }
        last_len = window.len();
        let found = search(
            &Problem::new(window),
            &SearchOptions {
                time_limit: Duration::from_secs(600),
                node_limit: Some(share),
                threads: 1,
                ..SearchOptions::default()
            },
        );
        best = best.max(found.lower_bound);
    }
    best
}

/// A time at which the most bytes are live (the first such start), or `None` without buffers.
fn peak_time(live: &[&Buffer]) -> Option<u64> {
    let mut events: Vec<(u64, bool, u64)> = Vec::with_capacity(2 * live.len());
    for b in live {
        events.push((b.start, true, b.size));
        events.push((b.end, false, b.size));
    }
    // Ends before starts at the same time (half-open lifetimes).
    events.sort_unstable_by_key(|&(t, is_start, _)| (t, is_start));
    let (mut load, mut best, mut at) = (0u64, 0u64, None);
    for (t, is_start, size) in events {
        if is_start {
            load = load.saturating_add(size);
            if load > best {
                best = load;
                at = Some(t);
            }
        } else {
            load = load.saturating_sub(size);
        }
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::SplitMix64;

    /// The optimum by exhaustion, sharing nothing with the exact search: every order of the
    /// buffers, each placed at the lowest aligned offset where it overlaps nothing placed
    /// before it. (Some order gives the optimum: sort an optimal placement by offset; placing
    /// in that order, each buffer lands at or below its optimal offset.)
    fn optimum(buffers: &[Buffer]) -> u64 {
        fn place(buffers: &[Buffer], order: &[usize]) -> u64 {
            let mut placed: Vec<(usize, u64)> = Vec::new();
            let mut top = 0;
            for &i in order {
                let b = &buffers[i];
                let align = b.align.max(1);
                let mut offset = 0u64;
                loop {
                    offset = offset.div_ceil(align) * align;
                    let clash = placed.iter().find(|&&(j, o)| {
                        let c = &buffers[j];
                        c.start < b.end
                            && b.start < c.end
                            && o < offset + b.size
                            && offset < o + c.size
                    });
                    match clash {
                        Some(&(j, o)) => offset = o + buffers[j].size,
                        None => break,
                    }
                }
                placed.push((i, offset));
                top = top.max(offset + b.size);
            }
            top
        }
        fn permute(buffers: &[Buffer], order: &mut Vec<usize>, k: usize, best: &mut u64) {
            if k == order.len() {
                *best = (*best).min(place(buffers, order));
                return;
            }
            for j in k..order.len() {
                order.swap(k, j);
                permute(buffers, order, k + 1, best);
                order.swap(k, j);
            }
        }
        let mut order: Vec<usize> = (0..buffers.len()).collect();
        let mut best = u64::MAX;
        permute(buffers, &mut order, 0, &mut best);
        if buffers.is_empty() { 0 } else { best }
    }

    /// On random small problems (up to 7 buffers, random lifetimes, sizes and alignments) the
    /// window bound is never above the optimum found by exhaustion and never below the
    /// classic bound; on some it is above the classic bound (it proves more).
    #[test]
    fn the_window_bound_is_a_lower_bound() {
        let mut rng = SplitMix64::new(40);
        let mut stronger = 0;
        for case in 0..300 {
            let n = 2 + rng.below(6) as usize;
            let buffers: Vec<Buffer> = (0..n)
                .map(|_| {
                    let start = rng.below(6);
                    let mut b = Buffer::new(start, start + 1 + rng.below(4), 1 + rng.below(9));
                    b.align = [1, 1, 1, 2, 4][rng.below(5) as usize];
                    b
                })
                .collect();
            let problem = Problem::new(buffers.clone());
            let (classic, window, best) = (
                lower_bound(&problem),
                window_bound(&problem, 20_000),
                optimum(&buffers),
            );
            assert!(classic <= window, "case {case}: {classic} > {window}");
            assert!(
                window <= best,
                "case {case}: {window} > optimum {best}: {buffers:?}"
            );
            stronger += usize::from(window > classic);
        }
        assert!(stronger > 0, "never stronger than the classic bound");
    }
}
