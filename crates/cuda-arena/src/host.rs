//! A host-memory arena with the device arena's API, so CPU engines and tests execute plans.
//!
//! [`AlignedBuf`] is one zeroed heap allocation whose first byte sits on a chosen power-of-two
//! alignment (the plan's alignment, at least 64 bytes). [`HostArena`] holds one per region of
//! a [`Layout`] and hands out per-tensor byte slices and typed slices; since every region's base
//! is aligned at least as much as the plan's offsets, a slot that is aligned in the region is
//! aligned in memory. [`HostArena::split`] borrows several tensors at once, mutable ones
//! disjoint from everything else asked for.

#![allow(unsafe_code)]

use std::alloc::{self, Layout as AllocLayout};
use std::ptr::NonNull;

use half::{bf16, f16};
use memplan_ir::{DType, TensorId};

use crate::element::Element;
use crate::half_region::{f32_into_bf16, f32_into_f16};
use crate::layout::{Layout, Region, Slot};
use crate::pattern::{MAX_THREADS, Salts};
use crate::pool::{ArenaPool, PoolBuffer};
use crate::view::ViewError;

/// The smallest base alignment of a host buffer: a cache line, and enough for any element.
pub const MIN_HOST_ALIGN: u64 = 64;

/// Why host memory could not be had.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// The size or alignment is not a valid allocation on this machine.
    #[error("cannot allocate {bytes} bytes aligned to {align} on the host")]
    BadRequest {
        /// Bytes asked for.
        bytes: u64,
        /// Alignment asked for.
        align: u64,
    },
    /// The allocator returned nothing.
    #[error("out of host memory allocating {0} bytes")]
    OutOfMemory(u64),
}

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

/// Host memory for every region of a layout.
#[derive(Debug)]
pub struct HostArena {
    layout: Layout,
    arena: AlignedBuf,
    weights: AlignedBuf,
    half: AlignedBuf,
    threads: usize,
    salts: Salts,
}

/// Threads the pattern check uses on large ranges by default: the machine's parallelism,
/// at most 8.
fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
}

/// Tensors borrowed together by [`HostArena::split`], in the order asked for.
#[derive(Debug)]
pub struct HostSplit<'a> {
    /// The read-only tensors.
    pub reads: Vec<&'a [u8]>,
    /// The mutable tensors.
    pub writes: Vec<&'a mut [u8]>,
}

fn region_len(layout: &Layout, region: Region) -> u64 {
    layout.region_bytes(region)
}

fn usize_range(slot: &Slot) -> Result<std::ops::Range<usize>, ViewError> {
    if slot.rows > 1 {
        return Err(ViewError::Strided(slot.tensor));
    }
    let start = usize::try_from(slot.offset).map_err(|_| ViewError::TooLarge(slot.tensor))?;
    let len = usize::try_from(slot.bytes).map_err(|_| ViewError::TooLarge(slot.tensor))?;
    let end = start
        .checked_add(len)
        .ok_or(ViewError::TooLarge(slot.tensor))?;
    Ok(start..end)
}

impl HostArena {
    /// The arena over `layout` in the three given buffers, with the default thread count.
    fn with_buffers(
        layout: Layout,
        arena: AlignedBuf,
        weights: AlignedBuf,
        half: AlignedBuf,
    ) -> HostArena {
        HostArena {
            layout,
            arena,
            weights,
            half,
            threads: default_threads(),
            salts: Salts::new(),
        }
    }

    /// Fresh zeroed host memory for `layout`.
    pub fn new(layout: Layout) -> Result<HostArena, HostError> {
        let align = layout.alignment();
        let arena = AlignedBuf::zeroed(region_len(&layout, Region::Arena), align)?;
        let weights = AlignedBuf::zeroed(region_len(&layout, Region::Weights), align)?;
        let half = AlignedBuf::zeroed(region_len(&layout, Region::Half), align)?;
        Ok(HostArena::with_buffers(layout, arena, weights, half))
    }

    /// Host memory for `layout`, reusing idle buffers from `pool` where they fit (their old
    /// contents stay; see [`ArenaPool`]). Give the buffers back with [`HostArena::release`].
    pub fn from_pool(layout: Layout, pool: &mut HostPool) -> Result<HostArena, HostError> {
        let align = layout.alignment().max(MIN_HOST_ALIGN);
        let mut get = |region| {
            let bytes = region_len(&layout, region);
            let mut b = pool.take_or_else(bytes, align, &(), AlignedBuf::zeroed)?;
            let len = usize::try_from(bytes).map_err(|_| HostError::BadRequest { bytes, align })?;
            if !b.set_len(len) {
                return Err(HostError::BadRequest { bytes, align });
            }
            Ok(b)
        };
        let arena = get(Region::Arena)?;
        let weights = get(Region::Weights)?;
        let half = get(Region::Half)?;
        Ok(HostArena::with_buffers(layout, arena, weights, half))
    }

    /// Gives this arena's buffers back to `pool` and returns the layout.
    pub fn release(self, pool: &mut HostPool) -> Layout {
        let HostArena {
            layout,
            arena,
            weights,
            half,
            ..
        } = self;
        for mut b in [arena, weights, half] {
            let cap = b.capacity();
            b.set_len(cap);
            if cap > 0 {
                pool.give(b);
            }
        }
        layout
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
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

    /// A whole region.
    pub fn region(&self, region: Region) -> &[u8] {
        match region {
            Region::Arena => self.arena.as_slice(),
            Region::Weights => self.weights.as_slice(),
            Region::Half => self.half.as_slice(),
        }
    }

    /// A whole region, mutably.
    pub fn region_mut(&mut self, region: Region) -> &mut [u8] {
        match region {
            Region::Arena => self.arena.as_mut_slice(),
            Region::Weights => self.weights.as_mut_slice(),
            Region::Half => self.half.as_mut_slice(),
        }
    }

    /// Tensor `t`'s bytes.
    pub fn bytes(&self, t: TensorId) -> Result<&[u8], ViewError> {
        let slot = self.layout.placed(t)?;
        let range = usize_range(slot)?;
        self.region(slot.region)
            .get(range)
            .ok_or(ViewError::TooLarge(t))
    }

    /// Tensor `t`'s bytes, mutably.
    pub fn bytes_mut(&mut self, t: TensorId) -> Result<&mut [u8], ViewError> {
        let slot = self.layout.placed(t)?;
        let (region, range) = (slot.region, usize_range(slot)?);
        self.region_mut(region)
            .get_mut(range)
            .ok_or(ViewError::TooLarge(t))
    }

    /// Tensor `t` as `[T]` (see [`Layout::view`] for the checks).
    pub fn view<T: Element>(&self, t: TensorId) -> Result<&[T], ViewError> {
        let desc = self.layout.view::<T>(t)?;
        let bytes = self.bytes(t)?;
        cast(bytes, t, desc.len())
    }

    /// Tensor `t` as `[T]`, mutably.
    pub fn view_mut<T: Element>(&mut self, t: TensorId) -> Result<&mut [T], ViewError> {
        let desc = self.layout.view::<T>(t)?;
        let bytes = self.bytes_mut(t)?;
        let offset = bytes.as_ptr() as u64;
        let len = bytes.len();
        bytemuck::try_cast_slice_mut(bytes)
            .map_err(|_| cast_error::<T>(t, offset, len as u64))
            .and_then(|s: &mut [T]| {
                if s.len() == desc.len() {
                    Ok(s)
                } else {
                    Err(ViewError::LengthMismatch {
                        tensor: t,
                        len: s.len(),
                        requested: desc.len(),
                    })
                }
            })
    }

    /// Borrows `reads` shared and `writes` mutably, all at once. A tensor in `writes` must
    /// share no byte with any other tensor asked for (an in-place output is borrowed through
    /// `writes` alone: read its parent's values from it); tensors in `reads` may overlap
    /// each other.
    pub fn split(
        &mut self,
        reads: &[TensorId],
        writes: &[TensorId],
    ) -> Result<HostSplit<'_>, ViewError> {
        let (r, w) = self.layout.split_slots(reads, writes)?;
        let read_slots: Vec<(Region, std::ops::Range<usize>, TensorId)> = r
            .iter()
            .map(|s| Ok((s.region, usize_range(s)?, s.tensor)))
            .collect::<Result<_, ViewError>>()?;
        let write_slots: Vec<(Region, std::ops::Range<usize>, TensorId)> = w
            .iter()
            .map(|s| Ok((s.region, usize_range(s)?, s.tensor)))
            .collect::<Result<_, ViewError>>()?;
        let bases: [(Region, *mut u8, usize); 3] = [
            (Region::Arena, self.arena.ptr.as_ptr(), self.arena.len),
            (Region::Weights, self.weights.ptr.as_ptr(), self.weights.len),
            (Region::Half, self.half.ptr.as_ptr(), self.half.len),
        ];
        let base = |region: Region,
                    range: &std::ops::Range<usize>,
                    t: TensorId|
         -> Result<*mut u8, ViewError> {
            let (_, ptr, len) = bases
                .iter()
                .find(|(r, _, _)| *r == region)
                .copied()
                .ok_or(ViewError::NotPlaced(t))?;
            if range.end > len {
                return Err(ViewError::TooLarge(t));
            }
            // SAFETY: `range.start <= range.end <= len`, so the offset stays inside (or one
            // past) the allocation of `len` bytes that `ptr` starts.
            Ok(unsafe { ptr.add(range.start) })
        };
        let mut out_reads = Vec::with_capacity(read_slots.len());
        for (region, range, t) in &read_slots {
            let p = base(*region, range, *t)?;
            // SAFETY: `[p, p + len)` lies inside a live allocation owned by `self` (bounds
            // checked in `base`); no mutable borrow handed out below overlaps it (checked
            // above), and `&mut self` keeps every other access out for the lifetime.
            out_reads.push(unsafe { std::slice::from_raw_parts(p.cast_const(), range.len()) });
        }
        let mut out_writes = Vec::with_capacity(write_slots.len());
        for (region, range, t) in &write_slots {
            let p = base(*region, range, *t)?;
            // SAFETY: as above; in addition this range overlaps no other range handed out
            // (reads or writes), so this `&mut` is the only reference to these bytes.
            out_writes.push(unsafe { std::slice::from_raw_parts_mut(p, range.len()) });
        }
        Ok(HostSplit {
            reads: out_reads,
            writes: out_writes,
        })
    }

    /// Copies `data` into tensor `t` (its dtype must be `T`'s and its length `data.len()`):
    /// the host twin of the device arena's `upload`.
    pub fn upload<T: Element>(&mut self, t: TensorId, data: &[T]) -> Result<(), ViewError> {
        let dst = self.view_mut::<T>(t)?;
        check_len(t, dst.len(), data.len())?;
        dst.copy_from_slice(data);
        Ok(())
    }

    /// Tensor `t`'s contents as `T`s: the host twin of the device arena's `download`.
    pub fn download<T: Element>(&self, t: TensorId) -> Result<Vec<T>, ViewError> {
        Ok(self.view::<T>(t)?.to_vec())
    }

    /// Stores `data` into tensor `t`, converting from `f32` to the stored dtype (`f32` is
    /// copied, `f16`/`bf16` rounded to nearest even). Other dtypes are a
    /// [`ViewError::DTypeMismatch`].
    pub fn load_f32(&mut self, t: TensorId, data: &[f32]) -> Result<(), ViewError> {
        let slot = self.layout.placed(t)?;
        let dtype = slot.dtype;
        match dtype {
            DType::F32 => {
                let dst = self.view_mut::<f32>(t)?;
                check_len(t, dst.len(), data.len())?;
                dst.copy_from_slice(data);
            }
            DType::F16 => {
                let dst = self.view_mut::<f16>(t)?;
                check_len(t, dst.len(), data.len())?;
                f32_into_f16(dst, data);
            }
            DType::BF16 => {
                let dst = self.view_mut::<bf16>(t)?;
                check_len(t, dst.len(), data.len())?;
                f32_into_bf16(dst, data);
            }
            stored => {
                return Err(ViewError::DTypeMismatch {
                    tensor: t,
                    stored,
                    requested: DType::F32,
                });
            }
        }
        Ok(())
    }

    /// Tensor `t`'s values widened to `f32` (for `f32`, `f16` and `bf16` tensors).
    pub fn read_f32(&self, t: TensorId) -> Result<Vec<f32>, ViewError> {
        let slot = self.layout.placed(t)?;
        match slot.dtype {
            DType::F32 => Ok(self.view::<f32>(t)?.to_vec()),
            DType::F16 => Ok(self.view::<f16>(t)?.iter().map(|v| v.to_f32()).collect()),
            DType::BF16 => Ok(self.view::<bf16>(t)?.iter().map(|v| v.to_f32()).collect()),
            stored => Err(ViewError::DTypeMismatch {
                tensor: t,
                stored,
                requested: DType::F32,
            }),
        }
    }
}

fn check_len(t: TensorId, expected: usize, actual: usize) -> Result<(), ViewError> {
    if expected == actual {
        Ok(())
    } else {
        Err(ViewError::DataLength {
            tensor: t,
            expected,
            actual,
        })
    }
}

fn cast_error<T>(t: TensorId, addr: u64, len: u64) -> ViewError {
    let size = size_of::<T>() as u64;
    if !len.is_multiple_of(size) {
        ViewError::SizeMismatch {
            tensor: t,
            bytes: len,
            element: size,
        }
    } else {
        ViewError::Misaligned {
            tensor: t,
            offset: addr,
            align: align_of::<T>() as u64,
        }
    }
}

fn cast<T: Element>(bytes: &[u8], t: TensorId, len: usize) -> Result<&[T], ViewError> {
    let s: &[T] = bytemuck::try_cast_slice(bytes)
        .map_err(|_| cast_error::<T>(t, bytes.as_ptr() as u64, bytes.len() as u64))?;
    if s.len() == len {
        Ok(s)
    } else {
        Err(ViewError::LengthMismatch {
            tensor: t,
            len: s.len(),
            requested: len,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An absurd thread count is clamped, and a large range is cut into
    /// at most that many pieces.
    #[test]
    fn thread_count_is_clamped() {
        let (g, ids) = chain_graph();
        let layout = Layout::new(&g, &chain_plan(&g, &ids), &LayoutOptions::default()).unwrap();
        let mut arena = HostArena::new(layout).unwrap();
        arena.set_threads(1_000_000);
        assert_eq!(arena.threads(), MAX_THREADS);
        arena.set_threads(0);
        assert_eq!(arena.threads(), 1);
    }
    use crate::layout::{HalfFormat, LayoutOptions};
    use crate::pool::PoolLimits;
    use crate::test_util::{chain_graph, chain_plan};

    fn arena(half: Option<HalfFormat>) -> (HostArena, crate::test_util::ChainIds) {
        let (g, ids) = chain_graph();
        let plan = chain_plan(&g, &ids);
        let opts = LayoutOptions { half_weights: half };
        let layout = Layout::new(&g, &plan, &opts).unwrap();
        (HostArena::new(layout).unwrap(), ids)
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

    #[test]
    fn typed_views_write_through_to_views() {
        let (mut a, ids) = arena(None);
        let data: Vec<f32> = (0..16).map(|i| i as f32).collect();
        a.view_mut::<f32>(ids.a).unwrap().copy_from_slice(&data);
        // v is a view of a: same bytes.
        assert_eq!(a.view::<f32>(ids.v).unwrap(), &data[..]);
        assert_eq!(a.bytes(ids.a).unwrap().len(), 64);
        assert_eq!(
            a.view::<f16>(ids.a).unwrap_err(),
            ViewError::DTypeMismatch {
                tensor: ids.a,
                stored: DType::F32,
                requested: DType::F16
            }
        );
        assert_eq!(
            a.view::<f32>(TensorId(999)).unwrap_err(),
            ViewError::NotPlaced(TensorId(999))
        );
        assert_eq!(a.view::<i64>(ids.k).unwrap(), &[0, 0]);
    }

    #[test]
    fn split_borrows_disjoint_writes_only() {
        let (mut a, ids) = arena(None);
        {
            let s = a.split(&[ids.a, ids.v, ids.w], &[ids.b, ids.x]).unwrap();
            assert_eq!(s.reads.len(), 3);
            let [b, x] = <[&mut [u8]; 2]>::try_from(s.writes).unwrap();
            b.fill(7);
            x.fill(9);
        }
        assert!(a.bytes(ids.b).unwrap().iter().all(|&v| v == 7));
        assert!(a.bytes(ids.x).unwrap().iter().all(|&v| v == 9));
        // a and v share bytes: one of them mutable is refused.
        assert_eq!(
            a.split(&[ids.v], &[ids.a]).unwrap_err(),
            ViewError::Overlap {
                first: ids.a,
                second: ids.v
            }
        );
        // x and y share bytes (y reuses x's slot).
        assert_eq!(
            a.split(&[], &[ids.x, ids.y]).unwrap_err(),
            ViewError::Overlap {
                first: ids.x,
                second: ids.y
            }
        );
        // Same offsets in different regions do not overlap.
        assert!(a.split(&[ids.w], &[ids.a]).is_ok());
    }

    #[test]
    fn loads_f32_into_half_weights() {
        let (mut a, ids) = arena(Some(HalfFormat::F16));
        let data: Vec<f32> = (0..16).map(|i| i as f32 * 0.5 - 3.0).collect();
        a.load_f32(ids.w, &data).unwrap();
        assert_eq!(
            a.read_f32(ids.w).unwrap(),
            data,
            "these values are exact in f16"
        );
        assert_eq!(a.view::<f16>(ids.w).unwrap()[1], f16::from_f32(-2.5));
        assert_eq!(a.layout().slot(ids.w).unwrap().region, Region::Half);
        assert_eq!(
            a.load_f32(ids.w, &data[..3]).unwrap_err(),
            ViewError::DataLength {
                tensor: ids.w,
                expected: 16,
                actual: 3
            }
        );
        assert!(matches!(
            a.load_f32(ids.k, &[1.0, 2.0]),
            Err(ViewError::DTypeMismatch { .. })
        ));
        // f32 activations copy.
        a.load_f32(ids.a, &data).unwrap();
        assert_eq!(a.view::<f32>(ids.a).unwrap(), &data[..]);
        // Typed upload and download.
        a.upload::<i64>(ids.k, &[4, 4]).unwrap();
        assert_eq!(a.download::<i64>(ids.k).unwrap(), vec![4, 4]);
        assert!(matches!(
            a.upload::<i64>(ids.k, &[4]),
            Err(ViewError::DataLength { .. })
        ));
        assert!(matches!(
            a.download::<f32>(ids.k),
            Err(ViewError::DTypeMismatch { .. })
        ));
    }

    #[test]
    fn pool_reuses_host_buffers() {
        let (g, ids) = chain_graph();
        let plan = chain_plan(&g, &ids);
        let layout = Layout::new(&g, &plan, &LayoutOptions::default()).unwrap();
        let mut pool = HostPool::new(PoolLimits::default());
        let a = HostArena::from_pool(layout.clone(), &mut pool).unwrap();
        let arena_ptr = a.region(Region::Arena).as_ptr();
        let layout = a.release(&mut pool);
        assert_eq!(
            pool.len(),
            2,
            "arena and weights (the empty half region is not pooled)"
        );
        let b = HostArena::from_pool(layout, &mut pool).unwrap();
        assert_eq!(b.region(Region::Arena).len(), 192);
        let reused = [Region::Arena, Region::Weights]
            .iter()
            .any(|&r| b.region(r).as_ptr() == arena_ptr);
        assert!(reused);
        assert_eq!(pool.stats().hits, 2);
    }
}
