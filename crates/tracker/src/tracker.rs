//! [`MemoryTracker`]: run-time accounting of bytes against a limit, safe to share between
//! threads.
//!
//! Invariant: the bytes in use never exceed the limit, under any interleaving of threads.
//! The check and the update are one compare-and-swap on the total (a load, a check and a
//! separate add would let two threads both pass the check and together overshoot). Per-tag
//! counters are updated after the total on allocation and before it on release, so the
//! total is always at least the sum of the tags, and a release can never take a tag (or the
//! total) below zero: releasing more than a tag holds is an error, not a wrap.
//!
//! High-water marks are `fetch_max`es of values the counters really took. A [`Reservation`]
//! gives its bytes back when dropped.

use std::fmt;

use crate::size::HumanBytes;
use crate::sync::{AtomicU64, Ordering};

/// What a block of memory is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Tag {
    /// Model weights.
    Weights,
    /// Activations of a forward (or backward) pass.
    Activations,
    /// Scratch memory of kernels.
    Workspace,
    /// The attention key/value cache.
    KvCache,
    /// Gradients.
    Gradients,
    /// Optimizer states.
    OptimizerState,
    /// Anything else.
    Other,
}

impl Tag {
    /// Every tag, in declaration order (the order of snapshots).
    pub const ALL: [Tag; 7] = [
        Tag::Weights,
        Tag::Activations,
        Tag::Workspace,
        Tag::KvCache,
        Tag::Gradients,
        Tag::OptimizerState,
        Tag::Other,
    ];

    /// A lower-case name (`weights`, `kv-cache`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Tag::Weights => "weights",
            Tag::Activations => "activations",
            Tag::Workspace => "workspace",
            Tag::KvCache => "kv-cache",
            Tag::Gradients => "gradients",
            Tag::OptimizerState => "optimizer",
            Tag::Other => "other",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Why an allocation or release was refused. Nothing changed when one is returned.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TrackerError {
    /// The allocation would pass the limit.
    #[error(
        "cannot allocate {} for {}: {} of {} in use, {} free",
        HumanBytes(*.requested), .tag.name(), HumanBytes(*.in_use), HumanBytes(*.limit),
        HumanBytes(.limit.saturating_sub(*.in_use))
    )]
    OverLimit {
        /// What the bytes were for.
        tag: Tag,
        /// Bytes asked for.
        requested: u64,
        /// Bytes in use when refused.
        in_use: u64,
        /// The limit.
        limit: u64,
    },
    /// A release of more bytes than the tag holds.
    #[error("cannot release {released} bytes of {}: only {held} held", .tag.name())]
    Underflow {
        /// The tag.
        tag: Tag,
        /// Bytes asked to release.
        released: u64,
        /// Bytes the tag held.
        held: u64,
    },
}

#[derive(Debug, Default)]
struct Counter {
    current: AtomicU64,
    peak: AtomicU64,
    allocations: AtomicU64,
}

/// Bytes in use against a limit, per tag, shared between threads (`&self` everywhere).
///
/// ```
/// use memplan_tracker::{MemoryTracker, Tag};
/// let tracker = MemoryTracker::new(1 << 20);
/// let weights = tracker.reserve(Tag::Weights, 600 << 10).unwrap();
/// assert!(tracker.reserve(Tag::Activations, 600 << 10).is_err()); // would pass 1 MiB
/// drop(weights);
/// assert_eq!(tracker.in_use(), 0);
/// assert_eq!(tracker.peak(), 600 << 10);
/// ```
#[derive(Debug)]
pub struct MemoryTracker {
    limit: AtomicU64,
    total: Counter,
    tags: [Counter; Tag::ALL.len()],
}

/// Bytes held until dropped, from [`MemoryTracker::reserve`].
#[derive(Debug)]
#[must_use = "a reservation is released as soon as it is dropped"]
pub struct Reservation<'a> {
    tracker: &'a MemoryTracker,
    tag: Tag,
    bytes: u64,
}

impl Reservation<'_> {
    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// What they are for.
    pub fn tag(&self) -> Tag {
        self.tag
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        // Cannot fail: the reservation's own bytes are part of its tag's count.
        let _ = self.tracker.deallocate(self.tag, self.bytes);
    }
}

/// Counters of one tag (or of all) at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Usage {
    /// Bytes in use.
    pub in_use: u64,
    /// High-water mark since creation or the last reset.
    pub peak: u64,
    /// Successful allocations since creation or the last reset.
    pub allocations: u64,
}

/// The tracker's counters, from [`MemoryTracker::snapshot`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Snapshot {
    /// The limit.
    pub limit: u64,
    /// All tags together.
    pub total: Usage,
    /// Per tag, in [`Tag::ALL`] order.
    pub tags: Vec<(Tag, Usage)>,
}

impl fmt::Display for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<12} {:>12} {:>12} {:>8}",
            "tag", "in use", "peak", "allocs"
        )?;
        let row = |f: &mut fmt::Formatter<'_>, name: &str, u: &Usage| {
            writeln!(
                f,
                "{:<12} {:>12} {:>12} {:>8}",
                name,
                HumanBytes(u.in_use).to_string(),
                HumanBytes(u.peak).to_string(),
                u.allocations
            )
        };
        for (tag, usage) in &self.tags {
            row(f, tag.name(), usage)?;
        }
        row(f, "total", &self.total)?;
        writeln!(f, "limit        {:>12}", HumanBytes(self.limit).to_string())
    }
}

impl MemoryTracker {
    /// A tracker with nothing in use and `limit` bytes available.
    pub fn new(limit: u64) -> MemoryTracker {
        MemoryTracker {
            limit: AtomicU64::new(limit),
            total: Counter::default(),
            tags: Default::default(),
        }
    }

    /// The limit.
    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Acquire)
    }

    /// Changes the limit. Lowering it below the bytes in use frees nothing; later
    /// allocations fail until enough is released.
    pub fn set_limit(&self, limit: u64) {
        self.limit.store(limit, Ordering::Release);
    }

    /// Bytes in use now.
    pub fn in_use(&self) -> u64 {
        self.total.current.load(Ordering::Acquire)
    }

    /// The most bytes ever in use at once (since creation or [`MemoryTracker::reset_peaks`]).
    pub fn peak(&self) -> u64 {
        self.total.peak.load(Ordering::Acquire)
    }

    /// Whether `bytes` more would fit now. Advisory: another thread may allocate before
    /// you do; [`MemoryTracker::allocate`] is the atomic check-and-take.
    pub fn would_fit(&self, bytes: u64) -> bool {
        self.in_use()
            .checked_add(bytes)
            .is_some_and(|total| total <= self.limit())
    }

    /// Takes `bytes` for `tag` if the total stays within the limit: the check and the update
    /// are one compare-and-swap. On error nothing changed.
    pub fn allocate(&self, tag: Tag, bytes: u64) -> Result<(), TrackerError> {
        let mut current = self.total.current.load(Ordering::Acquire);
        let new_total = loop {
            let limit = self.limit();
            let next = match current.checked_add(bytes) {
                Some(next) if next <= limit => next,
                _ => {
                    return Err(TrackerError::OverLimit {
                        tag,
                        requested: bytes,
                        in_use: current,
                        limit,
                    });
                }
            };
            match self.total.current.compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break next,
                Err(seen) => current = seen,
            }
        };
        raise_peak(&self.total.peak, new_total);
        self.total.allocations.fetch_add(1, Ordering::Relaxed);
        let counter = &self.tags[tag.index()];
        // Cannot overflow: the tag's bytes are part of the total, which just fitted.
        let tag_total = counter.current.fetch_add(bytes, Ordering::AcqRel) + bytes;
        raise_peak(&counter.peak, tag_total);
        counter.allocations.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Gives back `bytes` of `tag`. Releasing more than the tag holds is an error and changes
    /// nothing.
    pub fn deallocate(&self, tag: Tag, bytes: u64) -> Result<(), TrackerError> {
        let counter = &self.tags[tag.index()];
        let mut held = counter.current.load(Ordering::Acquire);
        loop {
            let Some(next) = held.checked_sub(bytes) else {
                return Err(TrackerError::Underflow {
                    tag,
                    released: bytes,
                    held,
                });
            };
            match counter.current.compare_exchange_weak(
                held,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(seen) => held = seen,
            }
        }
        // The total holds at least the tag's bytes, so this cannot go below zero.
        self.total.current.fetch_sub(bytes, Ordering::AcqRel);
        Ok(())
    }

    /// [`MemoryTracker::allocate`], with the bytes given back when the guard drops.
    pub fn reserve(&self, tag: Tag, bytes: u64) -> Result<Reservation<'_>, TrackerError> {
        self.allocate(tag, bytes)?;
        Ok(Reservation {
            tracker: self,
            tag,
            bytes,
        })
    }

    /// The counters of one tag.
    pub fn usage(&self, tag: Tag) -> Usage {
        usage(&self.tags[tag.index()])
    }

    /// Every counter. Each value is read atomically; under concurrent updates the values
    /// may come from slightly different moments.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            limit: self.limit(),
            total: usage(&self.total),
            tags: Tag::ALL.iter().map(|&t| (t, self.usage(t))).collect(),
        }
    }

    /// Sets every high-water mark to the bytes in use now and the allocation counts to
    /// zero (what `torch.cuda.reset_peak_memory_stats` does).
    pub fn reset_peaks(&self) {
        for c in std::iter::once(&self.total).chain(self.tags.iter()) {
            c.peak
                .store(c.current.load(Ordering::Acquire), Ordering::Release);
            c.allocations.store(0, Ordering::Release);
        }
    }

    /// Forgets everything: nothing in use, peaks and counts zero, the limit kept. Takes
    /// `&mut self`, so no [`Reservation`] can be outstanding; bytes taken with
    /// [`MemoryTracker::allocate`] and not given back are forgotten.
    pub fn reset(&mut self) {
        let limit = self.limit();
        *self = MemoryTracker::new(limit);
    }
}

/// Raises a high-water mark to `value`. The plain load skips the read-modify-write in the
/// common case (the mark is already higher: marks only rise between resets).
fn raise_peak(peak: &AtomicU64, value: u64) {
    if peak.load(Ordering::Relaxed) < value {
        peak.fetch_max(value, Ordering::AcqRel);
    }
}

fn usage(c: &Counter) -> Usage {
    Usage {
        in_use: c.current.load(Ordering::Acquire),
        peak: c.peak.load(Ordering::Acquire),
        allocations: c.allocations.load(Ordering::Acquire),
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn limit_is_exact_and_errors_change_nothing() {
        let t = MemoryTracker::new(100);
        t.allocate(Tag::Weights, 60).unwrap();
        assert!(t.would_fit(40));
        assert!(!t.would_fit(41));
        let err = t.allocate(Tag::Activations, 41).unwrap_err();
        assert_eq!(
            err,
            TrackerError::OverLimit {
                tag: Tag::Activations,
                requested: 41,
                in_use: 60,
                limit: 100
            }
        );
        assert!(err.to_string().contains("40 B free"), "{err}");
        t.allocate(Tag::Activations, 40).unwrap();
        assert_eq!(t.in_use(), 100);
        assert!(t.allocate(Tag::Other, 1).is_err());
        assert!(t.allocate(Tag::Other, u64::MAX).is_err());
        assert_eq!(t.usage(Tag::Other).allocations, 0);
        let err = t.deallocate(Tag::Activations, 41).unwrap_err();
        assert!(matches!(err, TrackerError::Underflow { held: 40, .. }));
        assert_eq!(t.in_use(), 100);
        t.deallocate(Tag::Activations, 40).unwrap();
        t.deallocate(Tag::Weights, 60).unwrap();
        assert_eq!(t.in_use(), 0);
        assert_eq!(t.peak(), 100);
    }

    #[test]
    fn reservations_tags_and_peaks() {
        let mut t = MemoryTracker::new(1000);
        {
            let _w = t.reserve(Tag::Weights, 500).unwrap();
            let kv = t.reserve(Tag::KvCache, 300).unwrap();
            assert_eq!((kv.bytes(), kv.tag()), (300, Tag::KvCache));
            drop(kv);
            let _a = t.reserve(Tag::Activations, 100).unwrap();
            let s = t.snapshot();
            assert_eq!(s.total.in_use, 600);
            assert_eq!(s.total.peak, 800);
            assert_eq!(s.total.allocations, 3);
            let kv = &s.tags[Tag::KvCache.index()].1;
            assert_eq!((kv.in_use, kv.peak, kv.allocations), (0, 300, 1));
            assert!(s.to_string().contains("kv-cache"));
            t.reset_peaks();
            assert_eq!(t.peak(), 600);
            assert_eq!(t.usage(Tag::KvCache).peak, 0);
        }
        assert_eq!(t.in_use(), 0);
        t.set_limit(10);
        assert!(t.reserve(Tag::Other, 11).is_err());
        t.allocate(Tag::Other, 5).unwrap();
        t.reset();
        assert_eq!(
            t.snapshot().total,
            Usage {
                in_use: 0,
                peak: 0,
                allocations: 0
            }
        );
        assert_eq!(t.limit(), 10);
    }
}
