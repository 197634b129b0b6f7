//! The largest value of a monotone predicate: exponential search up, then binary search;
//! and of a predicate bounded by a monotone one ([`largest_fitting_beyond`]).
//!
//! `fits(v)` must be monotone (true up to some value, false after). The search asks about
//! `min` first, then `min + 1, min + 3, min + 7, ...` (doubling steps) until a value does not
//! fit or `max` is reached, then bisects the last gap. Every value is asked about at most
//! once, and the answer `n` comes with `fits(n)` and (unless `n == max`) `!fits(n + 1)`
//! both asked: the search never claims a value it did not see.

/// The outcome of [`largest_fitting`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SearchOutcome {
    /// The largest value that fits; `None` when even `min` does not.
    pub largest: Option<u64>,
    /// How many values were asked about.
    pub probes: u32,
}

/// The largest `v` in `min..=max` with `fits(v)`, for a monotone `fits`; errors from
/// `fits` stop the search.
///
/// ```
/// use memplan_tracker::largest_fitting;
/// let out = largest_fitting(1, 1 << 20, |v| Ok::<_, ()>(v * 3 <= 1000)).unwrap();
/// assert_eq!(out.largest, Some(333));
/// assert!(out.probes < 25);
/// ```
pub fn largest_fitting<E>(
    min: u64,
    max: u64,
    mut fits: impl FnMut(u64) -> Result<bool, E>,
) -> Result<SearchOutcome, E> {
    let mut probes = 0u32;
    let mut ask = |v: u64| {
        probes += 1;
        fits(v)
    };
    if min > max || !ask(min)? {
        return Ok(SearchOutcome {
            largest: None,
            probes,
        });
    }
    // Invariant: `lo` fits; `hi` (when set) does not.
    let mut lo = min;
    let mut step = 1u64;
    let mut hi = None;
    while lo < max {
        let v = lo.saturating_add(step).min(max);
        if ask(v)? {
            lo = v;
            step = step.saturating_mul(2);
        } else {
            hi = Some(v);
            break;
        }
    }
    if let Some(mut hi) = hi {
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if ask(mid)? {
                lo = mid;
            } else {
                hi = mid;
            }
        }
    }
    Ok(SearchOutcome {
        largest: Some(lo),
        probes,
    })
}

/// The outcome of [`largest_fitting_beyond`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BeyondOutcome {
    /// The largest value found that fits; `None` when none was found.
    pub largest: Option<u64>,
    /// The first value that did not fit, when a larger one does (the predicate is not
    /// monotone there).
    pub first_failure: Option<u64>,
    /// How many values were asked about (both predicates).
    pub probes: u32,
}

/// The largest `v` in `min..=max` with `fits(v)` where `fits` need not be monotone but
/// implies a monotone `bound` (`fits(v)` ⇒ `bound(v)`): a caching allocator's reserved
/// bytes against a budget, bounded by the allocated bytes, which grow with the batch.
///
/// [`largest_fitting`] finds the first failure `f` of `fits`; `bound`'s own largest value
/// `a` is the top past which nothing can fit. Between them, at most `scan` values are asked
/// about from `a` down (every value when `a - f <= scan`, else evenly spaced ones): the first
/// that fits is the answer. Every answer was asked about and fits; the search only ever
/// answers a value larger than plain [`largest_fitting`]'s, or the same.
///
/// ```
/// use memplan_tracker::largest_fitting_beyond;
/// // Fits at 1..=4 and at 7 only; the bound (v <= 8) is monotone.
/// let fits = |v: u64| Ok::<_, ()>(v <= 4 || v == 7);
/// let out = largest_fitting_beyond(1, 100, 16, fits, |v| Ok(v <= 8)).unwrap();
/// assert_eq!((out.largest, out.first_failure), (Some(7), Some(5)));
/// ```
pub fn largest_fitting_beyond<E>(
    min: u64,
    max: u64,
    scan: u64,
    mut fits: impl FnMut(u64) -> Result<bool, E>,
    bound: impl FnMut(u64) -> Result<bool, E>,
) -> Result<BeyondOutcome, E> {
    let first = largest_fitting(min, max, &mut fits)?;
    let mut probes = first.probes;
    let failure = match first.largest {
        Some(n) if n >= max => None,
        Some(n) => Some(n + 1),
        None if min <= max => Some(min),
        None => None,
    };
    let plain = BeyondOutcome {
        largest: first.largest,
        first_failure: None,
        probes,
    };
    let Some(f) = failure else {
        return Ok(plain);
    };
    let top = largest_fitting(f, max, bound)?;
    probes += top.probes;
    let Some(a) = top.largest.filter(|&a| a > f) else {
        return Ok(BeyondOutcome { probes, ..plain });
    };
    // Candidates in (f, a], from the top down.
    let span = a - f;
    let count = span.min(scan.max(1));
    for i in 0..count {
        // Evenly spaced: `a` first, `f + 1` last when all are asked.
        let v = if count == span {
            a - i
        } else {
            a - (i as u128 * (span - 1) as u128 / (count - 1).max(1) as u128) as u64
        };
        probes += 1;
        if fits(v)? {
            return Ok(BeyondOutcome {
                largest: Some(v),
                first_failure: Some(f),
                probes,
            });
        }
    }
    Ok(BeyondOutcome { probes, ..plain })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A predicate that fails in holes below its top: the answer is the largest value that
    /// fits within the scan, it fits, and it is never below the plain search's.
    #[test]
    fn beyond_the_first_failure() {
        for holes in 0..40u64 {
            // Fits where `v <= 60` except where `v % 7 < holes % 7` between 10 and 50.
            let truth = |v: u64| v <= 60 && !((10..50).contains(&v) && v % 7 < holes % 7);
            let bound = |v: u64| Ok::<_, ()>(v <= 60);
            let plain = largest_fitting(1, 100, |v| Ok::<_, ()>(truth(v))).unwrap();
            let out = largest_fitting_beyond(1, 100, 64, |v| Ok(truth(v)), bound).unwrap();
            assert_eq!(out.largest, Some(60), "holes {holes}");
            assert!(out.largest >= plain.largest);
            assert_eq!(out.first_failure.is_some(), plain.largest != Some(60));
            // A scan too short to reach down still answers only what fits.
            let short = largest_fitting_beyond(1, 100, 2, |v| Ok(truth(v)), bound).unwrap();
            assert!(short.largest.is_some_and(truth));
            assert!(short.largest >= plain.largest);
        }
        // Nothing fits at `min`, a larger value does.
        let out =
            largest_fitting_beyond(1, 10, 8, |v| Ok::<_, ()>(v == 3), |v| Ok(v <= 5)).unwrap();
        assert_eq!((out.largest, out.first_failure), (Some(3), Some(1)));
        // The bound stops at the first failure: the plain answer stands.
        let out =
            largest_fitting_beyond(1, 10, 8, |v| Ok::<_, ()>(v <= 4), |v| Ok(v <= 5)).unwrap();
        assert_eq!((out.largest, out.first_failure), (Some(4), None));
        // Spaced probes over a wide gap include its top and stay within it.
        let mut asked = Vec::new();
        let out = largest_fitting_beyond(
            1,
            1 << 20,
            16,
            |v| {
                asked.push(v);
                Ok::<_, ()>(v <= 100)
            },
            |v| Ok(v <= 100_000),
        )
        .unwrap();
        assert_eq!(out.largest, Some(100));
        assert!(asked.contains(&100_000));
        assert!(asked.iter().all(|&v| v <= 100_000));
    }

    /// Every threshold in a range, with the probes recorded: the answer is the threshold,
    /// the answer and the one after were both asked, and nothing was asked twice.
    #[test]
    fn finds_every_threshold() {
        for threshold in 0..=300u64 {
            let mut asked = Vec::new();
            let out = largest_fitting(1, 200, |v| {
                asked.push(v);
                Ok::<_, ()>(v <= threshold)
            })
            .unwrap();
            let expect = (threshold >= 1).then(|| threshold.min(200));
            assert_eq!(out.largest, expect, "threshold {threshold}");
            if let Some(n) = out.largest {
                assert!(asked.contains(&n));
                if n < 200 {
                    assert!(asked.contains(&(n + 1)), "threshold {threshold}: {asked:?}");
                }
            }
            let mut unique = asked.clone();
            unique.sort_unstable();
            unique.dedup();
            assert_eq!(unique.len(), asked.len(), "{asked:?}");
            assert!(out.probes <= 20, "{threshold}: {asked:?}");
        }
    }

    #[test]
    fn extremes() {
        let out = largest_fitting(0, u64::MAX, |_| Ok::<_, ()>(true)).unwrap();
        assert_eq!(out.largest, Some(u64::MAX));
        assert!(out.probes <= 70);
        let out = largest_fitting(5, 4, |_| Ok::<_, ()>(true)).unwrap();
        assert_eq!(out.largest, None);
        let err = largest_fitting(1, 10, |v| if v > 3 { Err(v) } else { Ok(true) });
        assert_eq!(err, Err(4));
    }
}
