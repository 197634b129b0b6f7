//! A bounded pool of arena buffers, reused across plans of similar size.
//!
//! Serving many graphs (or one graph at several batch sizes) allocates an arena per plan.
//! An [`ArenaPool`] keeps buffers that were given back and hands one out again when a new
//! plan needs between its size and `max_slack` times its size, so a plan of 96 MiB reuses a
//! 100 MiB buffer but not a 1 GiB one. The pool is an explicit object the caller owns (no
//! global state) and is bounded in both buffer count and bytes; giving back a buffer past a
//! bound evicts (drops) the largest buffers, oldest first among equals.
//!
//! Choices are deterministic: `take` picks the smallest fitting buffer, the oldest among
//! equals. A reused buffer holds whatever its last user left in it.
//!
//! A buffer has an owner ([`PoolBuffer::owner`]: nobody in particular for host memory, the
//! device context for device memory), and a request names the owner it is for: the pool
//! never hands a buffer to a request of another owner ([`serves`] is the whole rule). A
//! backend whose buffers are used asynchronously finishes that use before giving one back.

/// A buffer the pool can hold.
pub trait PoolBuffer {
    /// Who may use the buffer (`()` for host memory, the device for device memory).
    type Owner: PartialEq + std::fmt::Debug;
    /// Usable bytes.
    fn capacity(&self) -> u64;
    /// The alignment of its first byte.
    fn alignment(&self) -> u64;
    /// The buffer's owner.
    fn owner(&self) -> Self::Owner;
}

/// Whether an idle `buffer` serves a request for `bytes` bytes aligned to `align` by `owner`
/// under `limits`: same owner, large enough, not much larger, aligned enough.
pub fn serves<B: PoolBuffer>(
    limits: &PoolLimits,
    buffer: &B,
    bytes: u64,
    align: u64,
    owner: &B::Owner,
) -> bool {
    let cap_limit = (bytes.saturating_mul(limits.max_slack_percent) / 100).max(bytes);
    let cap = buffer.capacity();
    buffer.owner() == *owner && cap >= bytes && cap <= cap_limit && buffer.alignment() >= align
}

/// Limits of an [`ArenaPool`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolLimits {
    /// At most this many idle buffers.
    pub max_buffers: usize,
    /// At most this many idle bytes.
    pub max_bytes: u64,
    /// A buffer serves a request of `n` bytes when its capacity is at most
    /// `n * max_slack_percent / 100` (and at least `n`).
    pub max_slack_percent: u64,
}

impl PoolLimits {
    /// These limits with at most `n` idle buffers.
    pub fn with_max_buffers(mut self, n: usize) -> PoolLimits {
        self.max_buffers = n;
        self
    }

    /// These limits with at most `bytes` idle bytes.
    pub fn with_max_bytes(mut self, bytes: u64) -> PoolLimits {
        self.max_bytes = bytes;
        self
    }

    /// These limits with a buffer serving requests down to `100 / percent` of its capacity
    /// (see [`PoolLimits::max_slack_percent`]).
    pub fn with_max_slack_percent(mut self, percent: u64) -> PoolLimits {
        self.max_slack_percent = percent;
        self
    }
}

impl Default for PoolLimits {
    fn default() -> Self {
        PoolLimits {
            max_buffers: 4,
            max_bytes: 8 << 30,
            max_slack_percent: 125,
        }
    }
}

/// Counters of what a pool did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolStats {
    /// Requests served by an idle buffer.
    pub hits: u64,
    /// Requests no idle buffer could serve.
    pub misses: u64,
    /// Buffers dropped to stay within the limits.
    pub evictions: u64,
}

/// Idle buffers waiting to be reused.
#[derive(Debug)]
pub struct ArenaPool<B> {
    limits: PoolLimits,
    /// Idle buffers with the sequence number of their return, oldest first.
    idle: Vec<(u64, B)>,
    next_seq: u64,
    stats: PoolStats,
}

impl<B: PoolBuffer> ArenaPool<B> {
    /// An empty pool with these limits.
    pub fn new(limits: PoolLimits) -> ArenaPool<B> {
        ArenaPool {
            limits,
            idle: Vec::new(),
            next_seq: 0,
            stats: PoolStats::default(),
        }
    }

    /// The limits.
    pub fn limits(&self) -> PoolLimits {
        self.limits
    }

    /// What the pool did so far.
    pub fn stats(&self) -> PoolStats {
        self.stats
    }

    /// Idle buffers.
    pub fn len(&self) -> usize {
        self.idle.len()
    }

    /// Whether no buffer is idle.
    pub fn is_empty(&self) -> bool {
        self.idle.is_empty()
    }

    /// Idle bytes (saturating).
    pub fn idle_bytes(&self) -> u64 {
        self.idle
            .iter()
            .fold(0u64, |acc, (_, b)| acc.saturating_add(b.capacity()))
    }

    /// An idle buffer of `owner` of at least `bytes` bytes (and not much more) aligned to
    /// `align`, if the pool has one (see [`serves`]). Counts a hit or a miss.
    pub fn take(&mut self, bytes: u64, align: u64, owner: &B::Owner) -> Option<B> {
        let best = self
            .idle
            .iter()
            .enumerate()
            .filter(|(_, (_, b))| serves(&self.limits, b, bytes, align, owner))
            .min_by_key(|(_, (seq, b))| (b.capacity(), *seq))
            .map(|(i, _)| i);
        match best {
            Some(i) => {
                self.stats.hits += 1;
                Some(self.idle.remove(i).1)
            }
            None => {
                self.stats.misses += 1;
                None
            }
        }
    }

    /// An idle buffer as [`ArenaPool::take`] finds one, or a new one from `alloc`.
    pub fn take_or_else<E>(
        &mut self,
        bytes: u64,
        align: u64,
        owner: &B::Owner,
        alloc: impl FnOnce(u64, u64) -> Result<B, E>,
    ) -> Result<B, E> {
        match self.take(bytes, align, owner) {
            Some(b) => Ok(b),
            None => alloc(bytes, align),
        }
    }

    /// Takes an idle buffer of `owner` for each size in `sizes` (none for a size of 0, or
    /// where no idle buffer serves), then runs `build` with them. `build` moves out the
    /// buffers it keeps; when it fails, every buffer still in the slots goes back to the
    /// pool, so a failed build loses no pooled buffer.
    pub fn take_each<T, E, const N: usize>(
        &mut self,
        sizes: [u64; N],
        align: u64,
        owner: &B::Owner,
        build: impl FnOnce(&mut [Option<B>; N]) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut taken: [Option<B>; N] = sizes.map(|bytes| {
            (bytes > 0)
                .then(|| self.take(bytes, align, owner))
                .flatten()
        });
        let out = build(&mut taken);
        if out.is_err() {
            for b in taken.into_iter().flatten() {
                self.give(b);
            }
        }
        out
    }

    /// Gives `buffer` back for reuse, then evicts the largest idle buffers (oldest first
    /// among equals) until the pool is within its limits.
    pub fn give(&mut self, buffer: B) {
        self.idle.push((self.next_seq, buffer));
        self.next_seq += 1;
        while self.idle.len() > self.limits.max_buffers || self.idle_bytes() > self.limits.max_bytes
        {
            let victim = self
                .idle
                .iter()
                .enumerate()
                .max_by_key(|(_, (seq, b))| (b.capacity(), std::cmp::Reverse(*seq)))
                .map(|(i, _)| i);
            let Some(i) = victim else { break };
            drop(self.idle.remove(i));
            self.stats.evictions += 1;
        }
    }

    /// Drops every idle buffer.
    pub fn clear(&mut self) {
        self.idle.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Eq)]
    struct Buf(u64, u64);
    impl PoolBuffer for Buf {
        type Owner = ();
        fn capacity(&self) -> u64 {
            self.0
        }
        fn alignment(&self) -> u64 {
            self.1
        }
        fn owner(&self) {}
    }

    /// A buffer of a device (context) and stream, like a device arena's.
    #[derive(Debug, PartialEq, Eq)]
    struct DevBuf {
        bytes: u64,
        device: u32,
    }
    impl PoolBuffer for DevBuf {
        type Owner = u32;
        fn capacity(&self) -> u64 {
            self.bytes
        }
        fn alignment(&self) -> u64 {
            256
        }
        fn owner(&self) -> u32 {
            self.device
        }
    }

    fn pool(max_buffers: usize, max_bytes: u64) -> ArenaPool<Buf> {
        ArenaPool::new(PoolLimits {
            max_buffers,
            max_bytes,
            max_slack_percent: 125,
        })
    }

    #[test]
    fn reuses_similar_sizes_only() {
        let mut p = pool(4, 1 << 20);
        p.give(Buf(1000, 256));
        assert_eq!(p.take(2000, 64, &()), None, "too small");
        assert_eq!(p.take(500, 64, &()), None, "too large for 500 bytes");
        assert_eq!(p.take(900, 512, &()), None, "not aligned enough");
        assert_eq!(p.take(900, 64, &()), Some(Buf(1000, 256)));
        assert!(p.is_empty());
        assert_eq!(
            p.stats(),
            PoolStats {
                hits: 1,
                misses: 3,
                evictions: 0
            }
        );
    }

    #[test]
    fn picks_smallest_then_oldest() {
        let mut p = pool(4, 1 << 20);
        p.give(Buf(1200, 1));
        p.give(Buf(1100, 2));
        p.give(Buf(1100, 3));
        assert_eq!(p.take(1000, 1, &()), Some(Buf(1100, 2)));
        assert_eq!(p.take(1000, 1, &()), Some(Buf(1100, 3)));
        assert_eq!(p.take(1000, 1, &()), Some(Buf(1200, 1)));
    }

    #[test]
    fn stays_within_limits() {
        let mut p = pool(2, 3000);
        p.give(Buf(1000, 1));
        p.give(Buf(1500, 1));
        p.give(Buf(100, 1));
        assert_eq!(p.len(), 2, "count bound evicts the largest");
        assert_eq!(p.idle_bytes(), 1100);
        p.give(Buf(2500, 1));
        assert_eq!(
            p.idle_bytes(),
            1100,
            "byte bound evicts the newcomer when it is largest"
        );
        assert_eq!(p.stats().evictions, 2);
        let made: Result<Buf, ()> = p.take_or_else(5000, 1, &(), |n, a| Ok(Buf(n, a)));
        assert_eq!(made, Ok(Buf(5000, 1)));
        p.clear();
        assert!(p.is_empty());
    }

    /// A buffer of one device is never handed to another, whatever its
    /// size and alignment.
    #[test]
    fn buffers_go_only_to_their_own_device() {
        let mut p: ArenaPool<DevBuf> = ArenaPool::new(PoolLimits::default());
        p.give(DevBuf {
            bytes: 1000,
            device: 0,
        });
        assert!(!serves(
            &p.limits(),
            &DevBuf {
                bytes: 1000,
                device: 0
            },
            1000,
            256,
            &1
        ));
        assert_eq!(
            p.take(1000, 256, &1),
            None,
            "device 1 gets nothing of device 0"
        );
        assert_eq!(
            p.take(1000, 256, &0),
            Some(DevBuf {
                bytes: 1000,
                device: 0
            })
        );
    }

    /// Buffers taken for a build that fails go back to the pool.
    #[test]
    fn a_failed_build_returns_what_it_took() {
        let mut p = pool(4, 1 << 20);
        p.give(Buf(1000, 64));
        p.give(Buf(4000, 64));
        let r: Result<(), &str> = p.take_each([1000, 0, 4000], 64, &(), |taken| {
            assert!(taken[0].is_some() && taken[1].is_none() && taken[2].is_some());
            Err("the third allocation failed")
        });
        assert!(r.is_err());
        assert_eq!(p.len(), 2, "both buffers are back");
        let kept = p.take_each([1000, 0, 0], 64, &(), |taken| Ok::<_, ()>(taken[0].take()));
        assert_eq!(kept, Ok(Some(Buf(1000, 64))));
        assert_eq!(p.len(), 1);
    }
}
