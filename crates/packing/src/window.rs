//! A stronger lower bound where the classic one leaves a gap open: the exact search's bound on
//! sub-problems that keep the conflict: a window of time around the peak, and the buffers live
//! at a few sampled times of high load, however far apart.
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
//! *Sampled times.* The same holds for any set of times `t_1 < ... < t_k`, not only a window:
//! keep the buffers live at one of them at least, and give each the times it is live at
//! (`[start, end)` becomes `[i, j)`, `t_i..t_j` being the sampled times in `[start, end)`:
//! contiguous, since a lifetime is an interval). Two kept buffers then overlap in time only
//! if they share a sampled time, so they overlapped in the problem: every placement of the
//! problem, restricted to the kept buffers, is a placement of the sampled problem with the
//! same offsets (sizes and alignments are kept), and the sampled problem's optimum is at most
//! the problem's. This cuts out the time between distant peaks (which a window cannot) and
//! keeps only the buffers that carry the conflict there: the long-lived ones tie the peaks
//! together, the short ones fill each peak's load. With every start time sampled it is the
//! problem itself (renumbered), so a large enough sample proves the optimum. Two sampled
//! times never prove more than the load: the buffers live at both at the bottom, the others
//! above, reach exactly the larger load.
//!
//! [`window_bound`] takes the time where the most bytes are live and widens a window around
//! it, step by step in compressed time, while it holds at most `max_buffers` buffers; then
//! samples the 3, 5, 9, 17, ... start times of the highest load while the sampled problem
//! holds at most [`SAMPLE_MAX_BUFFERS`] buffers. It runs the exact search (minimize mode, a
//! node budget, one thread: deterministic) on each and keeps the highest proven bound, never
//! below [`crate::lower_bound`].

use std::time::Duration;

use super::bound::lower_bound;
use super::exact::{SearchOptions, search};
use super::problem::{Buffer, Problem};

/// The largest windows searched, in buffers.
pub const WINDOW_MAX_BUFFERS: usize = 400;

/// The largest sampled problems searched, in buffers.
pub const SAMPLE_MAX_BUFFERS: usize = 1_000;

/// The widths tried, in distinct times on each side of the peak (the last ones may be cut
/// by [`WINDOW_MAX_BUFFERS`]).
const WIDTHS: [usize; 6] = [1, 2, 4, 8, 16, 32];

/// The lower bound proven on windows of time around the peak and on samples of the times of
/// highest load (see the module docs), spending at most `node_limit` nodes of the exact
/// search in all (half on each). At least [`lower_bound`]. Every buffer of the problem must
/// have `start < end` or count for nothing (as in [`lower_bound`]).
pub fn window_bound(problem: &Problem, node_limit: u64) -> u64 {
    let share = node_limit / 2;
    peak_window_bound(problem, share).max(sample_bound(problem, node_limit - share))
}

/// The bound of [`window_bound`]'s windows alone.
fn peak_window_bound(problem: &Problem, node_limit: u64) -> u64 {
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
        best = best.max(proven(window, share));
    }
    best
}

/// The number of times sampled, in order: 3, 5, 9, 17, ... (two never prove more than the
/// load; see the module docs).
const SAMPLES: [usize; 10] = [3, 5, 9, 17, 33, 65, 129, 257, 513, 1025];

/// The bound of [`window_bound`]'s sampled times alone: the exact search's proven bound on the
/// buffers live at the `k` start times of the highest load (ties: the earlier time), for each
/// `k` of [`SAMPLES`] while the sampled problem holds at most [`SAMPLE_MAX_BUFFERS`] buffers.
/// At least [`lower_bound`]; `node_limit` nodes in all.
pub(crate) fn sample_bound(problem: &Problem, node_limit: u64) -> u64 {
    let classic = lower_bound(problem);
    let mut by_load = start_loads(problem);
    // Highest load first, then the earlier time: a total order.
    by_load.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let share = node_limit / SAMPLES.len() as u64;
    let mut best = classic;
    for k in SAMPLES {
        let mut times: Vec<u64> = by_load.iter().take(k).map(|&(_, t)| t).collect();
        times.sort_unstable();
        let sampled = sample(problem, &times);
        if sampled.len() > SAMPLE_MAX_BUFFERS {
            break;
        }
        best = best.max(proven(sampled, share));
        if k >= by_load.len() {
            break;
        }
    }
    best
}

/// The buffers of `problem` live at one of `times` at least (sorted, distinct), each live over
/// the positions in `times` of the times it is live at (see the module docs). Zero-sized and
/// empty buffers are left out.
pub(crate) fn sample(problem: &Problem, times: &[u64]) -> Vec<Buffer> {
    problem
        .buffers
        .iter()
        .filter(|b| b.size > 0 && b.start < b.end)
        .filter_map(|b| {
            let first = times.partition_point(|&t| t < b.start);
            let past = times.partition_point(|&t| t < b.end);
            (first < past).then_some(Buffer {
                start: first as u64,
                end: past as u64,
                ..*b
            })
        })
        .collect()
}

/// The load (bytes live) at each time a buffer starts, once per time, as `(load, time)`.
/// Saturating sums: a load past `u64::MAX` reads as `u64::MAX`.
fn start_loads(problem: &Problem) -> Vec<(u64, u64)> {
    // (time, is_start, size); ends before starts at the same time (half-open lifetimes).
    let mut events: Vec<(u64, bool, u64)> = Vec::with_capacity(2 * problem.len());
    for b in &problem.buffers {
        if b.start < b.end && b.size > 0 {
            events.push((b.start, true, b.size));
            events.push((b.end, false, b.size));
        }
    }
    events.sort_unstable();
    let mut loads: Vec<(u64, u64)> = Vec::new();
    let (mut load, mut over) = (0u64, 0u64);
    for (t, is_start, size) in events {
        // `over` counts the bytes past u64::MAX, so ends take back exactly what starts added.
        if is_start {
            let (sum, carried) = load.overflowing_add(size);
            load = sum;
            over += u64::from(carried);
            match loads.last_mut() {
                Some(last) if last.1 == t => last.0 = if over > 0 { u64::MAX } else { load },
                _ => loads.push((if over > 0 { u64::MAX } else { load }, t)),
            }
        } else {
            let (diff, borrowed) = load.overflowing_sub(size);
            load = diff;
            over -= u64::from(borrowed);
        }
    }
    loads
}

/// The exact search's proven lower bound on `buffers` (minimize mode, `node_limit` nodes, one
/// thread: deterministic).
fn proven(buffers: Vec<Buffer>, node_limit: u64) -> u64 {
    search(
        &Problem::new(buffers),
        &SearchOptions {
            time_limit: Duration::from_secs(600),
            node_limit: Some(node_limit),
            threads: 1,
            ..SearchOptions::default()
        },
    )
    .lower_bound
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
            let sampled = sample_bound(&problem, 20_000);
            assert!(classic <= sampled && sampled <= window, "case {case}");
            stronger += usize::from(window > classic);
        }
        assert!(stronger > 0, "never stronger than the classic bound");
    }

    /// A random small problem: up to `max_n` buffers over times 0..10, sizes 1-9, a few
    /// aligned.
    fn random_buffers(rng: &mut SplitMix64, max_n: u64) -> Vec<Buffer> {
        let n = 2 + rng.below(max_n - 1) as usize;
        (0..n)
            .map(|_| {
                let start = rng.below(6);
                let mut b = Buffer::new(start, start + 1 + rng.below(4), 1 + rng.below(9));
                b.align = [1, 1, 1, 2, 4][rng.below(5) as usize];
                b
            })
            .collect()
    }

    type Reduction = fn(&Problem, &[u64]) -> Vec<Buffer>;

    /// The first of `cases` random problems and random sets of sampled times on which
    /// `reduce`'s problem needs a larger arena than the problem (both optima by exhaustion),
    /// and how many reduced problems needed more than the classic bound.
    fn counterexample(reduce: Reduction, cases: usize) -> (Option<String>, usize) {
        let mut rng = SplitMix64::new(4040);
        let mut stronger = 0;
        for case in 0..cases {
            let buffers = random_buffers(&mut rng, 5);
            let times: Vec<u64> = (0..10).filter(|_| rng.below(2) == 0).collect();
            let problem = Problem::new(buffers.clone());
            let (whole, reduced) = (optimum(&buffers), optimum(&reduce(&problem, &times)));
            if reduced > whole {
                return (
                    Some(format!(
                        "case {case}: {reduced} > optimum {whole}: {times:?} {buffers:?}"
                    )),
                    stronger,
                );
            }
            stronger += usize::from(reduced > lower_bound(&problem));
        }
        (None, stronger)
    }

    /// On 3,000 random small problems and random sets of times, the sampled problem's optimum
    /// is never above the problem's (both by exhaustion, not by the exact search), and it is
    /// above the classic bound on some.
    #[test]
    fn sampling_times_never_raises_the_optimum() {
        let (found, stronger) = counterexample(sample, 3_000);
        assert_eq!(found, None);
        assert!(stronger > 0, "sampling never proved more than the load");
    }

    /// The same check catches sampled problems built wrongly: lifetimes closed at the end (a
    /// buffer ending at a sampled time kept live there), sizes rounded up, buffers live at no
    /// sampled time kept at the next one.
    #[test]
    fn a_wrong_reduction_is_caught() {
        fn closed_ends(problem: &Problem, times: &[u64]) -> Vec<Buffer> {
            let mut wrong = Vec::new();
            for b in &problem.buffers {
                let first = times.partition_point(|&t| t < b.start);
                let past = times.partition_point(|&t| t <= b.end);
                if first < past {
                    wrong.push(Buffer {
                        start: first as u64,
                        end: past as u64,
                        ..*b
                    });
                }
            }
            wrong
        }
        fn rounded_up(problem: &Problem, times: &[u64]) -> Vec<Buffer> {
            let mut wrong = sample(problem, times);
            for b in &mut wrong {
                b.size = b.size.div_ceil(4) * 4;
            }
            wrong
        }
        fn kept_between(problem: &Problem, times: &[u64]) -> Vec<Buffer> {
            let mut wrong = Vec::new();
            for b in &problem.buffers {
                let first = times.partition_point(|&t| t < b.start);
                let past = times.partition_point(|&t| t < b.end).max(first + 1);
                wrong.push(Buffer {
                    start: first as u64,
                    end: past as u64,
                    ..*b
                });
            }
            wrong
        }
        for (name, wrong) in [
            ("closed ends", closed_ends as Reduction),
            ("rounded up", rounded_up),
            ("kept between", kept_between),
        ] {
            assert!(
                counterexample(wrong, 3_000).0.is_some(),
                "{name} not caught"
            );
        }
    }

    /// Sampling every start time gives the problem back (renumbered): the same optimum, on
    /// 200 small random problems.
    #[test]
    fn sampling_every_start_is_the_problem() {
        let mut rng = SplitMix64::new(41);
        for _ in 0..200 {
            let buffers = random_buffers(&mut rng, 6);
            let problem = Problem::new(buffers.clone());
            let all: Vec<u64> = start_loads(&problem).iter().map(|&(_, t)| t).collect();
            assert_eq!(optimum(&sample(&problem, &all)), optimum(&buffers));
        }
    }
}
