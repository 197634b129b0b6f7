//! PyTorch's CUDA caching allocator, replayed: how much it reserves from the device for a
//! sequence of allocations and frees, beyond what is allocated.
//!
//! The rules are those of `c10/cuda/CUDACachingAllocator.cpp` with its default settings
//! (no expandable segments, no split-size limit, one stream):
//!
//! - every request is rounded up to a multiple of 512 bytes;
//! - requests up to 1 MiB come from the small pool, larger ones from the large pool;
//! - the free block that serves a request is the smallest one in its pool that is large
//!   enough (the lowest address among equals);
//! - a block larger than the request is split when the remainder is at least 512 bytes
//!   (small pool) or more than 1 MiB (large pool); otherwise the request holds the whole
//!   block, and the allocator counts the whole block as allocated;
//! - with no free block large enough, a new segment is reserved from the device: 2 MiB for a
//!   small request, 20 MiB for a request under 10 MiB, else the request rounded up to 2 MiB;
//! - a freed block merges with free neighbours of its segment; segments are never returned
//!   (no `empty_cache`).
//!
//! [`margin`] is the largest reserved total minus the largest allocated total: the bytes a
//! device must hold beyond PyTorch's `max_memory_allocated` (its `max_memory_reserved`
//! minus it). It comes from three places: requests rounded up, segments larger than the
//! requests that made them (20 MiB for a 3 MiB tensor), and free space between live blocks
//! that the next request does not fit, which the allocator can only grow past.

use std::collections::BTreeSet;

use super::eager::Event;

const SMALL: u64 = 1 << 20;
const SMALL_SEGMENT: u64 = 2 << 20;
const LARGE_SEGMENT: u64 = 20 << 20;
const MIN_LARGE_ALLOC: u64 = 10 << 20;
const ROUND_LARGE: u64 = 2 << 20;

#[derive(Clone, Copy, Debug)]
struct Block {
    addr: u64,
    size: u64,
    free: bool,
    small: bool,
    prev: Option<usize>,
    next: Option<usize>,
}

/// The allocator's state.
#[derive(Debug, Default)]
pub(crate) struct Allocator {
    blocks: Vec<Block>,
    /// Free blocks by (size, address, block).
    small_pool: BTreeSet<(u64, u64, usize)>,
    large_pool: BTreeSet<(u64, u64, usize)>,
    /// Live storage → its block.
    live: Vec<Option<usize>>,
    reserved: u64,
    allocated: u64,
    peak_reserved: u64,
    peak_allocated: u64,
    next_addr: u64,
}

fn round(size: u64) -> u64 {
    size.div_ceil(512).saturating_mul(512).max(512)
}

fn segment_size(size: u64) -> u64 {
    if size <= SMALL {
        SMALL_SEGMENT
    } else if size < MIN_LARGE_ALLOC {
        LARGE_SEGMENT
    } else {
        size.div_ceil(ROUND_LARGE).saturating_mul(ROUND_LARGE)
    }
}

impl Allocator {
    fn pool(&mut self, small: bool) -> &mut BTreeSet<(u64, u64, usize)> {
        if small {
            &mut self.small_pool
        } else {
            &mut self.large_pool
        }
    }

    /// Serves a request of `bytes` for storage `id`.
    pub(crate) fn alloc(&mut self, id: u32, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let size = round(bytes);
        let small = size <= SMALL;
        let found = self.pool(small).range((size, 0, 0)..).next().copied();
        let b = match found {
            Some(key) => {
                self.pool(small).remove(&key);
                key.2
            }
            None => {
                let seg = segment_size(size);
                let addr = self.next_addr;
                self.next_addr = self.next_addr.saturating_add(seg);
                self.reserved = self.reserved.saturating_add(seg);
                self.peak_reserved = self.peak_reserved.max(self.reserved);
                self.blocks.push(Block {
                    addr,
                    size: seg,
                    free: true,
                    small,
                    prev: None,
                    next: None,
                });
                self.blocks.len() - 1
            }
        };
        let remaining = self.blocks[b].size - size;
        let split = if small {
            remaining >= 512
        } else {
            remaining > SMALL
        };
        if split {
            let rest = Block {
                addr: self.blocks[b].addr + size,
                size: remaining,
                free: true,
                small,
                prev: Some(b),
                next: self.blocks[b].next,
            };
            self.blocks.push(rest);
            let r = self.blocks.len() - 1;
            if let Some(n) = rest.next {
                self.blocks[n].prev = Some(r);
            }
            self.blocks[b].next = Some(r);
            self.blocks[b].size = size;
            self.pool(small).insert((remaining, rest.addr, r));
        }
        self.blocks[b].free = false;
        self.allocated = self.allocated.saturating_add(self.blocks[b].size);
        self.peak_allocated = self.peak_allocated.max(self.allocated);
        let id = id as usize;
        if self.live.len() <= id {
            self.live.resize(id + 1, None);
        }
        self.live[id] = Some(b);
    }

    /// Returns storage `id`'s block.
    pub(crate) fn free(&mut self, id: u32) {
        let Some(b) = self.live.get_mut(id as usize).and_then(Option::take) else {
            return;
        };
        self.allocated -= self.blocks[b].size;
        let small = self.blocks[b].small;
        self.blocks[b].free = true;
        let mut b = b;
        // Merge with the previous block, then the next, when free.
        if let Some(p) = self.blocks[b].prev
            && self.blocks[p].free
        {
            let key = (self.blocks[p].size, self.blocks[p].addr, p);
            self.pool(small).remove(&key);
            let next = self.blocks[b].next;
            self.blocks[p].size += self.blocks[b].size;
            self.blocks[p].next = next;
            if let Some(n) = next {
                self.blocks[n].prev = Some(p);
            }
            b = p;
        }
        if let Some(n) = self.blocks[b].next
            && self.blocks[n].free
        {
            let key = (self.blocks[n].size, self.blocks[n].addr, n);
            self.pool(small).remove(&key);
            let next = self.blocks[n].next;
            self.blocks[b].size += self.blocks[n].size;
            self.blocks[b].next = next;
            if let Some(x) = next {
                self.blocks[x].prev = Some(b);
            }
        }
        let key = (self.blocks[b].size, self.blocks[b].addr, b);
        self.pool(small).insert(key);
    }

    /// The largest reserved total so far.
    pub(crate) fn peak_reserved(&self) -> u64 {
        self.peak_reserved
    }

    /// The largest allocated total so far (whole blocks).
    #[cfg(test)]
    pub(crate) fn peak_allocated(&self) -> u64 {
        self.peak_allocated
    }
}

/// Replays `events` and returns the largest reserved total minus `allocated_peak` (the
/// allocated peak the caller reports), at least the blocks' own rounding.
pub(crate) fn margin(events: &[Event], allocated_peak: u64) -> u64 {
    // Every allocation makes at most two blocks and names one storage: room for all of
    // them up front (the replay of a deep MoE step is hundreds of thousands of events).
    let mut a = Allocator {
        blocks: Vec::with_capacity(events.len()),
        live: Vec::with_capacity(events.len()),
        ..Allocator::default()
    };
    for &e in events {
        match e {
            Event::Alloc(id, bytes) => a.alloc(id, bytes),
            Event::Free(id) => a.free(id),
        }
    }
    a.peak_reserved().saturating_sub(allocated_peak)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_by_request_size() {
        assert_eq!(segment_size(512), 2 << 20);
        assert_eq!(segment_size(1 << 20), 2 << 20);
        assert_eq!(segment_size((1 << 20) + 512), 20 << 20);
        assert_eq!(segment_size(10 << 20), 10 << 20);
        assert_eq!(segment_size((10 << 20) + 1), 12 << 20);
        assert_eq!(round(1), 512);
        assert_eq!(round(513), 1024);
    }

    #[test]
    fn small_requests_share_a_segment_and_large_ones_split_theirs() {
        let mut a = Allocator::default();
        for i in 0..4 {
            a.alloc(i, 1000);
        }
        // Four 1 KiB blocks in one 2 MiB segment.
        assert_eq!(a.peak_reserved(), 2 << 20);
        assert_eq!(a.peak_allocated(), 4 * 1024);
        // A 3 MiB request reserves 20 MiB and leaves 17 MiB free for the next ones.
        a.alloc(10, 3 << 20);
        a.alloc(11, 3 << 20);
        assert_eq!(a.peak_reserved(), (2 << 20) + (20 << 20));
        // A freed block merges with its free neighbour and serves a larger request.
        a.free(10);
        a.free(11);
        a.alloc(12, 15 << 20);
        assert_eq!(a.peak_reserved(), (2 << 20) + (20 << 20));
    }

    #[test]
    fn fragmentation_grows_the_reservation() {
        // Two 12 MiB blocks, the first freed: a 14 MiB request does not fit its hole.
        let mut a = Allocator::default();
        a.alloc(0, 12 << 20);
        a.alloc(1, 12 << 20);
        a.free(0);
        a.alloc(2, 14 << 20);
        assert_eq!(a.peak_reserved(), (12 + 12 + 14) << 20);
        assert_eq!(
            margin(
                &[
                    Event::Alloc(0, 12 << 20),
                    Event::Alloc(1, 12 << 20),
                    Event::Free(0),
                    Event::Alloc(2, 14 << 20),
                ],
                26 << 20
            ),
            12 << 20
        );
        // A request that leaves less than 1 MiB of its large block takes it whole.
        let mut b = Allocator::default();
        b.alloc(0, (13 << 20) + (512 << 10));
        assert_eq!(b.peak_reserved(), 14 << 20);
        assert_eq!(b.peak_allocated(), 14 << 20);
    }
}
