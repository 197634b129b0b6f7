//! The pattern check's host arena: `memplan-layout`'s [`memplan_layout::HostArena`] in one
//! [`AlignedBuf`] (one allocation per plan, lazily zeroed pages), with the salts and the
//! thread count of the pattern check.
//!
//! [`AlignedBuf`] is one zeroed heap allocation whose first byte sits on a chosen
//! power-of-two alignment (the layout's buffer alignment, at least 64 bytes); it is also what
//! a [`HostPool`] keeps. [`CheckArena`] dereferences to the layout crate's arena, so typed
//! views, split borrows, `f32` loading and the caller's bound buffers are that arena's.

#![allow(unsafe_code)]

use std::alloc::{self, Layout as AllocLayout};
use std::ptr::NonNull;

use memplan_layout::HostMemory;
pub use memplan_layout::{HostError, MIN_HOST_ALIGN};

use crate::layout::Layout;
use crate::pattern::{MAX_THREADS, Salts};
use crate::pool::{ArenaPool, PoolBuffer};

/// A zeroed, aligned, owned byte buffer.
pub struct AlignedBuf {
    /// Start of the allocation (dangling but aligned when `len == 0`).
    ptr: NonNull<u8>,
    /// Bytes in use (what the slices show).
    len: usize,
    /// Bytes allocated (`len <= cap`).
    cap: usize,
    align: usize,
    /// The allocation behind `ptr`: its start and layout (`None` when empty).
    alloc: Option<(NonNull<u8>, AllocLayout)>,
}

// SAFETY: `AlignedBuf` owns its allocation exclusively, like a `Vec<u8>`; nothing else holds
// the pointer, so moving it to or sharing `&AlignedBuf` with another thread is sound.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only reads through `&[u8]`; mutation needs `&mut self`.
unsafe impl Sync for AlignedBuf {}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .field("cap", &self.cap)
            .field("align", &self.align)
            .finish()
    }
}

impl AlignedBuf {
    /// `bytes` zero bytes whose first byte is aligned to `align` (a power of two; raised to
    /// [`MIN_HOST_ALIGN`]).
    pub fn zeroed(bytes: u64, align: u64) -> Result<AlignedBuf, HostError> {
        let bad = HostError::BadRequest { bytes, align };
        let align = align.max(MIN_HOST_ALIGN);
        let len = usize::try_from(bytes).map_err(|_| bad.clone())?;
        let align_us = usize::try_from(align).map_err(|_| bad.clone())?;
        if !align_us.is_power_of_two() {
            return Err(bad);
        }
        if len == 0 {
            // An aligned dangling pointer for an empty buffer: never read or freed.
            let ptr = NonNull::new(std::ptr::without_provenance_mut::<u8>(align_us))
                .ok_or(HostError::OutOfMemory(0))?;
            return Ok(AlignedBuf {
                ptr,
                len,
                cap: len,
                align: align_us,
                alloc: None,
            });
        }
        // Over-allocate at the allocator's natural alignment, so that a large zeroed request
        // is served by fresh, lazily zeroed pages (an over-aligned one is zeroed by a memset
        // that touches every page), then start at the first `align`-aligned byte.
        let total = len.checked_add(align_us).ok_or_else(|| bad.clone())?;
        let layout = AllocLayout::from_size_align(total, 16).map_err(|_| bad.clone())?;
        // SAFETY: `layout` has a non-zero size (`total > len > 0`) and a valid alignment.
        let raw = NonNull::new(unsafe { alloc::alloc_zeroed(layout) })
            .ok_or(HostError::OutOfMemory(bytes))?;
        let pad = raw.as_ptr().align_offset(align_us);
        if pad >= align_us {
            // SAFETY: `raw` came from `alloc_zeroed(layout)` just above and is freed once.
            unsafe { alloc::dealloc(raw.as_ptr(), layout) };
            return Err(bad);
        }
        // SAFETY: `pad < align_us`, so `pad + len <= total`: the start and the `len` bytes
        // after it lie inside the allocation.
        let ptr = unsafe { raw.add(pad) };
        Ok(AlignedBuf {
            ptr,
            len,
            cap: len,
            align: align_us,
            alloc: Some((raw, layout)),
        })
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `cap >= len` initialized (zeroed at allocation) bytes for as long
        // as `self` lives, and only `&mut self` methods hand out mutable access.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes this the only live access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes allocated (at least [`AlignedBuf::len`]).
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Uses the first `len` bytes (at most the capacity) and returns whether it could.
    /// Growing back exposes bytes that were written earlier, never uninitialized ones.
    pub fn set_len(&mut self, len: usize) -> bool {
        if len <= self.cap {
            self.len = len;
            true
        } else {
            false
        }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if let Some((raw, layout)) = self.alloc.take() {
            // SAFETY: `raw` came from `alloc_zeroed(layout)` with exactly this layout and is
            // freed only here, once (`take` leaves `None` behind).
            unsafe { alloc::dealloc(raw.as_ptr(), layout) };
        }
    }
}

impl HostMemory for AlignedBuf {
    fn as_bytes(&self) -> &[u8] {
        self.as_slice()
    }
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl PoolBuffer for AlignedBuf {
    /// Host memory serves any arena.
    type Owner = ();
    fn capacity(&self) -> u64 {
        self.cap as u64
    }
    fn alignment(&self) -> u64 {
        self.align as u64
    }
    fn owner(&self) {}
}

/// A pool of host buffers.
pub type HostPool = ArenaPool<AlignedBuf>;

/// The layout crate's host arena in one [`AlignedBuf`], with the pattern check's salts and
/// thread count (it dereferences to [`memplan_layout::HostArena`] for everything else).
#[derive(Debug)]
pub struct CheckArena {
    inner: memplan_layout::HostArena<AlignedBuf>,
    threads: usize,
    salts: Salts,
}

impl std::ops::Deref for CheckArena {
    type Target = memplan_layout::HostArena<AlignedBuf>;
    fn deref(&self) -> &Self::Target {
        &self.inner
    }
}

impl std::ops::DerefMut for CheckArena {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.inner
    }
}

/// Threads the pattern check uses on large ranges by default: the machine's parallelism,
/// at most 8.
fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
}

impl CheckArena {
    fn with_buffer(layout: Layout, buffer: AlignedBuf) -> Result<CheckArena, HostError> {
        Ok(CheckArena {
            inner: memplan_layout::HostArena::over(layout, buffer)?,
            threads: default_threads(),
            salts: Salts::new(),
        })
    }

    /// Fresh zeroed host memory for `layout`: one allocation of
    /// [`Layout::buffer_bytes`] holding every region.
    pub fn new(layout: Layout) -> Result<CheckArena, HostError> {
        let buffer = AlignedBuf::zeroed(layout.buffer_bytes(), layout.buffer_alignment())?;
        CheckArena::with_buffer(layout, buffer)
    }

    /// Host memory for `layout`, reusing an idle buffer from `pool` where one fits (its old
    /// contents stay; see [`ArenaPool`]). Give the buffer back with [`CheckArena::release`].
    pub fn from_pool(layout: Layout, pool: &mut HostPool) -> Result<CheckArena, HostError> {
        let bytes = layout.buffer_bytes();
        let align = layout.buffer_alignment().max(MIN_HOST_ALIGN);
        let mut b = pool.take_or_else(bytes, align, &(), AlignedBuf::zeroed)?;
        let len = usize::try_from(bytes).map_err(|_| HostError::BadRequest { bytes, align })?;
        if !b.set_len(len) {
            return Err(HostError::BadRequest { bytes, align });
        }
        CheckArena::with_buffer(layout, b)
    }

    /// Gives this arena's buffers (its own and any bound to the caller's tensors) back to
    /// `pool` and returns the layout.
    pub fn release(self, pool: &mut HostPool) -> Layout {
        let (layout, memory, bound) = self.inner.into_memory();
        for mut b in memory.into_iter().chain(bound.into_iter().map(|(_, b)| b)) {
            let cap = b.capacity();
            b.set_len(cap);
            if cap > 0 {
                pool.give(b);
            }
        }
        layout
    }

    /// Threads the pattern check may use on large ranges.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Sets the threads the pattern check may use on large ranges, clamped to
    /// `1..=`[`MAX_THREADS`].
    pub fn set_threads(&mut self, threads: usize) {
        self.threads = threads.clamp(1, MAX_THREADS);
    }

    /// The pattern salts of this arena.
    pub(crate) fn salts_mut(&mut self) -> &mut Salts {
        &mut self.salts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{LayoutOptions, Region};
    use crate::pool::PoolLimits;
    use crate::test_util::{chain_graph, chain_plan};

    /// An absurd thread count is clamped.
    #[test]
    fn thread_count_is_clamped() {
        let (g, ids) = chain_graph();
        let layout = Layout::new(&g, &chain_plan(&g, &ids), &LayoutOptions::default()).unwrap();
        let mut arena = CheckArena::new(layout).unwrap();
        arena.set_threads(1_000_000);
        assert_eq!(arena.threads(), MAX_THREADS);
        arena.set_threads(0);
        assert_eq!(arena.threads(), 1);
    }

    #[test]
    fn aligned_buffers() {
        for align in [1u64, 64, 256, 4096] {
            let b = AlignedBuf::zeroed(1000, align).unwrap();
            assert_eq!(b.as_slice().as_ptr() as u64 % align.max(MIN_HOST_ALIGN), 0);
            assert!(b.as_slice().iter().all(|&x| x == 0));
        }
        let empty = AlignedBuf::zeroed(0, 256).unwrap();
        assert!(empty.is_empty() && empty.as_slice().is_empty());
        assert!(matches!(
            AlignedBuf::zeroed(10, 96),
            Err(HostError::BadRequest { .. })
        ));
    }

    /// One allocation per plan: the arena's memory is one buffer holding every region.
    #[test]
    fn one_allocation_per_plan() {
        let (g, ids) = chain_graph();
        let layout = Layout::new(&g, &chain_plan(&g, &ids), &LayoutOptions::default()).unwrap();
        let arena = CheckArena::new(layout.clone()).unwrap();
        let base = arena.region(Region::Arena).as_ptr() as usize;
        let weights = arena.region(Region::Weights).as_ptr() as usize;
        assert_eq!(
            weights - base,
            layout.region_start(Region::Weights) as usize
        );
        let (_, memory, _) = arena.inner.into_memory();
        assert_eq!(memory.len(), 1);
        assert_eq!(memory[0].len() as u64, layout.buffer_bytes());
    }

    #[test]
    fn pool_reuses_host_buffers() {
        let (g, ids) = chain_graph();
        let plan = chain_plan(&g, &ids);
        let layout = Layout::new(&g, &plan, &LayoutOptions::default()).unwrap();
        let mut pool = HostPool::new(PoolLimits::default());
        let a = CheckArena::from_pool(layout.clone(), &mut pool).unwrap();
        let arena_ptr = a.region(Region::Arena).as_ptr();
        let layout = a.release(&mut pool);
        assert_eq!(pool.len(), 1, "one buffer per plan");
        let b = CheckArena::from_pool(layout, &mut pool).unwrap();
        assert_eq!(b.region(Region::Arena).len(), 192);
        assert_eq!(b.region(Region::Arena).as_ptr(), arena_ptr);
        assert_eq!(pool.stats().hits, 1);
    }
}
