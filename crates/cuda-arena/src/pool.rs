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

/// A buffer the pool can hold.
pub trait PoolBuffer {
    /// Usable bytes.
    fn capacity(&self) -> u64;
    /// The alignment of its first byte.
    fn alignment(&self) -> u64;
}

/// Limits of an [`ArenaPool`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolLimits {
    /// At most this many idle buffers.
    pub max_buffers: usize,
    /// At most this many idle bytes.
    pub max_bytes: u64,
    /// A buffer serves a request of `n` bytes when its capacity is at most
    /// `n * max_slack_percent / 100` (and at least `n`).
    pub max_slack_percent: u64,
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

    /// An idle buffer of at least `bytes` bytes (and not much more) aligned to `align`, if
    /// the pool has one. Counts a hit or a miss.
    pub fn take(&mut self, bytes: u64, align: u64) -> Option<B> {
        let cap_limit = bytes.saturating_mul(self.limits.max_slack_percent) / 100;
        let cap_limit = cap_limit.max(bytes);
        let best = self
            .idle
            .iter()
            .enumerate()
            .filter(|(_, (_, b))| {
                b.capacity() >= bytes && b.capacity() <= cap_limit && b.alignment() >= align
            })
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
        alloc: impl FnOnce(u64, u64) -> Result<B, E>,
    ) -> Result<B, E> {
        match self.take(bytes, align) {
            Some(b) => Ok(b),
            None => alloc(bytes, align),
        }
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
        fn capacity(&self) -> u64 {
            self.0
        }
        fn alignment(&self) -> u64 {
            self.1
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
        assert_eq!(p.take(2000, 64), None, "too small");
        assert_eq!(p.take(500, 64), None, "too large for 500 bytes");
        assert_eq!(p.take(900, 512), None, "not aligned enough");
        assert_eq!(p.take(900, 64), Some(Buf(1000, 256)));
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
        assert_eq!(p.take(1000, 1), Some(Buf(1100, 2)));
        assert_eq!(p.take(1000, 1), Some(Buf(1100, 3)));
        assert_eq!(p.take(1000, 1), Some(Buf(1200, 1)));
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
        let made: Result<Buf, ()> = p.take_or_else(5000, 1, |n, a| Ok(Buf(n, a)));
        assert_eq!(made, Ok(Buf(5000, 1)));
        p.clear();
        assert!(p.is_empty());
    }
}
