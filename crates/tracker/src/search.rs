//! The largest value of a monotone predicate: exponential search up, then binary search.
//!
//! `fits(v)` must be monotone (true up to some value, false after). The search asks about
//! `min` first, then `min + 1, min + 3, min + 7, ...` (doubling steps) until a value does not
//! fit or `max` is reached, then bisects the last gap. Every value is asked about at most
//! once, and the answer `n` comes with `fits(n)` and (unless `n == max`) `!fits(n + 1)`
//! both asked: the search never claims a value it did not see.

/// The outcome of [`largest_fitting`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

#[cfg(test)]
mod tests {
    use super::*;

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
