//! A host arena: a layout's regions in memory the engine owns, or in one allocation memplan
//! makes, with typed views, split borrows and the caller's own buffers bound to its tensors.
//!
//! [`HostArena`] is generic over its memory ([`HostMemory`]): a `&mut [u8]` the engine lends
//! ([`HostArena::over`]), memplan's own [`HostBuffer`] ([`HostArena::new`]: one zeroed
//! allocation per plan), or any type of the engine's that hands out its bytes (pinned memory,
//! a memory-mapped file). The regions sit in one buffer at [`Layout::region_start`], or each
//! in its own ([`HostArena::over_regions`], for weights kept across plans). Every base must
//! be aligned to [`Layout::buffer_alignment`]; a buffer that is too small or misaligned is a
//! [`HostError`], never a misaligned view.
//!
//! Tensors the plan leaves to the caller ([`crate::Placement::Caller`]) get their memory with
//! [`HostArena::bind`]; from then on every accessor serves them like placed tensors.
//!
//! This module has no `unsafe`: split borrows cut the memory with `split_at_mut` at the
//! mutable ranges, and the read-only ranges (which may overlap each other but no mutable one)
//! are sub-slices of the pieces between.

use std::fmt;
use std::ops::Range;

use half::{bf16, f16};

use memplan_ir::{AnyEntity, DType, GraphError, Names, TensorId};

use crate::element::Element;
use crate::layout::{Layout, Placement, Region, Slot};
use crate::view::ViewError;

/// The smallest base alignment of a [`HostBuffer`]: a cache line, and enough for any element.
pub const MIN_HOST_ALIGN: u64 = 64;

/// Bytes a host arena can live in.
pub trait HostMemory {
    /// The bytes.
    fn as_bytes(&self) -> &[u8];
    /// The bytes, mutably.
    fn as_bytes_mut(&mut self) -> &mut [u8];
}

impl HostMemory for &mut [u8] {
    fn as_bytes(&self) -> &[u8] {
        self
    }
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl HostMemory for Vec<u8> {
    fn as_bytes(&self) -> &[u8] {
        self
    }
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        self
    }
}

/// Why host memory could not be had or used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
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
    /// Memory given for the layout (the one buffer, or one region's) is too small.
    #[error("{} needs {needed} bytes, the memory given has {given}", region_text(*.region))]
    TooSmall {
        /// The region, or `None` for the one buffer.
        region: Option<Region>,
        /// Bytes needed.
        needed: u64,
        /// Bytes given.
        given: u64,
    },
    /// Memory given for the layout does not start on the alignment it needs.
    #[error("{} must start on a multiple of {align} bytes; the memory given starts at {address:#x}", region_text(*.region))]
    Misaligned {
        /// The region, or `None` for the one buffer.
        region: Option<Region>,
        /// The memory's address.
        address: u64,
        /// The alignment needed.
        align: u64,
    },
}

fn region_text(region: Option<Region>) -> String {
    match region {
        Some(r) => format!("the {r} region"),
        None => "the layout's buffer".to_owned(),
    }
}

/// Why a buffer cannot be bound to a tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BindError {
    /// The tensor is not the caller's: the layout places it (or it has no bytes).
    NotCaller {
        /// The tensor.
        tensor: TensorId,
        /// Where the layout has it.
        placement: String,
    },
    /// The tensor is not in the graph.
    UnknownTensor(TensorId),
    /// The buffer is smaller than the tensor.
    TooSmall {
        /// The tensor.
        tensor: TensorId,
        /// Bytes needed.
        needed: u64,
        /// Bytes given.
        given: u64,
    },
    /// The buffer does not start on the tensor's element alignment.
    Misaligned {
        /// The tensor.
        tensor: TensorId,
        /// The buffer's address.
        address: u64,
        /// The alignment needed.
        align: u64,
    },
}

impl GraphError for BindError {
    fn fmt_with(&self, names: Names<'_>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = |t: TensorId| names.name(t);
        match self {
            BindError::NotCaller { tensor, placement } => write!(
                f,
                "tensor {} is not bound by the caller: the layout says {placement}",
                n(*tensor)
            ),
            BindError::UnknownTensor(t) => write!(f, "tensor {} is not in the graph", n(*t)),
            BindError::TooSmall {
                tensor,
                needed,
                given,
            } => write!(
                f,
                "tensor {} needs {needed} bytes, the buffer has {given}",
                n(*tensor)
            ),
            BindError::Misaligned {
                tensor,
                address,
                align,
            } => write!(
                f,
                "tensor {} needs a buffer aligned to {align} bytes; the buffer starts at {address:#x}",
                n(*tensor)
            ),
        }
    }

    fn entities(&self) -> Vec<AnyEntity> {
        match self {
            BindError::NotCaller { tensor: t, .. }
            | BindError::UnknownTensor(t)
            | BindError::TooSmall { tensor: t, .. }
            | BindError::Misaligned { tensor: t, .. } => vec![AnyEntity::Tensor(*t)],
        }
    }
}

/// The message with ids (`t3`); [`GraphError::with_graph`] names the tensors.
impl fmt::Display for BindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_with(Names::ids(), f)
    }
}

impl std::error::Error for BindError {}

/// The `len` bytes of `memory` from its first byte on a multiple of `align` (a power of
/// two), or `None` if they do not fit (or `align` is no power of two). How an engine lays a
/// layout over bytes it allocated itself, where nothing aligns them (a `Vec<u8>` may start
/// on any byte): allocate [`Layout::buffer_bytes`] plus [`Layout::buffer_alignment`] bytes
/// and hand [`HostArena::over`] this part of them; the same for a buffer bound to a
/// tensor, at its element's alignment.
///
/// ```
/// use memplan_layout::aligned_part;
///
/// let mut memory = vec![0u8; 1024 + 256];
/// let part = aligned_part(&mut memory, 256, 1024).unwrap();
/// assert_eq!((part.len(), part.as_ptr() as usize % 256), (1024, 0));
/// assert!(aligned_part(&mut [0u8; 16], 256, 1024).is_none());
/// ```
pub fn aligned_part(memory: &mut [u8], align: u64, len: u64) -> Option<&mut [u8]> {
    let align = usize::try_from(align)
        .ok()
        .filter(|a| a.is_power_of_two())?;
    let len = usize::try_from(len).ok()?;
    let pad = memory.as_ptr().align_offset(align);
    memory.get_mut(pad..pad.checked_add(len)?)
}

/// A zeroed host allocation whose first used byte sits on a chosen power-of-two alignment:
/// memplan's own memory for a [`HostArena`]. Allocation failure is an error, not an abort.
#[derive(Clone)]
pub struct HostBuffer {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostBuffer")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl HostBuffer {
    /// `bytes` zero bytes whose first byte is aligned to `align` (a power of two; raised to
    /// [`MIN_HOST_ALIGN`]).
    pub fn zeroed(bytes: u64, align: u64) -> Result<HostBuffer, HostError> {
        let bad = HostError::BadRequest { bytes, align };
        let align = usize::try_from(align.max(MIN_HOST_ALIGN)).map_err(|_| bad.clone())?;
        let len = usize::try_from(bytes).map_err(|_| bad.clone())?;
        if !align.is_power_of_two() {
            return Err(bad);
        }
        if len == 0 {
            return Ok(HostBuffer {
                storage: Vec::new(),
                start: 0,
                len: 0,
            });
        }
        let total = len.checked_add(align).ok_or_else(|| bad.clone())?;
        let mut storage = Vec::new();
        storage
            .try_reserve_exact(total)
            .map_err(|_| HostError::OutOfMemory(bytes))?;
        storage.resize(total, 0);
        let start = storage.as_ptr().align_offset(align);
        if start >= align {
            return Err(bad);
        }
        Ok(HostBuffer {
            storage,
            start,
            len,
        })
    }
}

impl HostMemory for HostBuffer {
    fn as_bytes(&self) -> &[u8] {
        self.storage
            .get(self.start..self.start + self.len)
            .unwrap_or(&[])
    }
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        let range = self.start..self.start + self.len;
        self.storage.get_mut(range).unwrap_or(&mut [])
    }
}

/// Tensors borrowed together by [`HostArena::split`], in the order asked for.
#[derive(Debug)]
#[non_exhaustive]
pub struct HostSplit<'a> {
    /// The read-only tensors.
    pub reads: Vec<&'a [u8]>,
    /// The mutable tensors.
    pub writes: Vec<&'a mut [u8]>,
}

/// A layout's memory on the host: the regions in one memory (the engine's
/// [`HostArena::over`], or memplan's [`HostArena::new`]) or one each
/// ([`HostArena::over_regions`]), with the caller's buffers bound to its tensors
/// ([`HostArena::bind`]); typed views and split borrows, all bound-checked.
#[derive(Debug)]
pub struct HostArena<M: HostMemory = HostBuffer> {
    layout: Layout,
    /// One memory for all regions, or one per region (arena, weights, half).
    memory: Vec<M>,
    /// Per region (arena, weights, half): which memory and from which byte.
    starts: [(usize, usize); 3],
    /// The caller's buffers, by tensor, in tensor id order.
    bound: Vec<(TensorId, M)>,
}

/// Where a tensor's bytes are: which memory (the regions' first, then the bound buffers),
/// and the range in it.
#[derive(Clone, Debug)]
struct Located {
    unit: usize,
    range: Range<usize>,
    tensor: TensorId,
}

fn region_index(r: Region) -> usize {
    match r {
        Region::Arena => 0,
        Region::Weights => 1,
        Region::Half => 2,
    }
}

fn address(bytes: &[u8]) -> u64 {
    bytes.as_ptr() as usize as u64
}

fn usize_of(v: u64, t: TensorId) -> Result<usize, ViewError> {
    usize::try_from(v).map_err(|_| ViewError::TooLarge(t))
}

impl HostArena<HostBuffer> {
    /// Fresh zeroed host memory for `layout`: one allocation of [`Layout::buffer_bytes`].
    pub fn new(layout: Layout) -> Result<HostArena<HostBuffer>, HostError> {
        let buffer = HostBuffer::zeroed(layout.buffer_bytes(), layout.buffer_alignment())?;
        HostArena::over(layout, buffer)
    }
}

impl<M: HostMemory> HostArena<M> {
    /// The arena in `memory`, which holds every region at [`Layout::region_start`]: it must
    /// have at least [`Layout::buffer_bytes`] bytes and start on a multiple of
    /// [`Layout::buffer_alignment`]. Its contents are kept (an engine may have loaded the
    /// weights already).
    pub fn over(layout: Layout, memory: M) -> Result<HostArena<M>, HostError> {
        check_memory(memory.as_bytes(), None, &layout)?;
        let start = |r: Region| usize::try_from(layout.region_start(r)).unwrap_or(usize::MAX);
        let starts = [
            (0, start(Region::Arena)),
            (0, start(Region::Weights)),
            (0, start(Region::Half)),
        ];
        Ok(HostArena {
            layout,
            memory: vec![memory],
            starts,
            bound: Vec::new(),
        })
    }

    /// The arena with each region in its own memory (so that weights loaded once serve the
    /// plans of several batch sizes): each must hold its region's bytes from its first byte
    /// and start on a multiple of [`Layout::buffer_alignment`] (an empty region takes any
    /// memory, an empty slice included).
    pub fn over_regions(
        layout: Layout,
        arena: M,
        weights: M,
        half: M,
    ) -> Result<HostArena<M>, HostError> {
        for (region, m) in Region::ALL.into_iter().zip([&arena, &weights, &half]) {
            check_memory(m.as_bytes(), Some(region), &layout)?;
        }
        Ok(HostArena {
            layout,
            memory: vec![arena, weights, half],
            starts: [(0, 0), (1, 0), (2, 0)],
            bound: Vec::new(),
        })
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Gives `memory` to tensor `t`, which the layout leaves to the caller
    /// ([`crate::Placement::Caller`]): it must hold the tensor's bytes from its first byte,
    /// which must sit on the element's alignment. A buffer bound before is returned.
    pub fn bind(&mut self, t: TensorId, memory: M) -> Result<Option<M>, BindError> {
        let given = memory.as_bytes();
        self.layout
            .check_binding(t, given.len() as u64, address(given))?;
        match self.bound.binary_search_by_key(&t, |b| b.0) {
            Ok(i) => Ok(Some(std::mem::replace(&mut self.bound[i].1, memory))),
            Err(i) => {
                self.bound.insert(i, (t, memory));
                Ok(None)
            }
        }
    }

    /// Takes back the buffer bound to `t`, if one is.
    pub fn unbind(&mut self, t: TensorId) -> Option<M> {
        let i = self.bound.binary_search_by_key(&t, |b| b.0).ok()?;
        Some(self.bound.remove(i).1)
    }

    /// Whether a buffer is bound to `t`.
    pub fn is_bound(&self, t: TensorId) -> bool {
        self.bound.binary_search_by_key(&t, |b| b.0).is_ok()
    }

    /// The arena's memory back: the regions' (one, or three from
    /// [`HostArena::over_regions`]), then the bound buffers by tensor.
    #[allow(clippy::type_complexity)]
    pub fn into_memory(self) -> (Layout, Vec<M>, Vec<(TensorId, M)>) {
        (self.layout, self.memory, self.bound)
    }

    fn region_range(&self, region: Region) -> (usize, Range<usize>) {
        let (unit, start) = self.starts[region_index(region)];
        let len = usize::try_from(self.layout.region_bytes(region)).unwrap_or(usize::MAX);
        (unit, start..start.saturating_add(len))
    }

    /// A whole region.
    pub fn region(&self, region: Region) -> &[u8] {
        let (unit, range) = self.region_range(region);
        self.memory
            .get(unit)
            .and_then(|m| m.as_bytes().get(range))
            .unwrap_or(&[])
    }

    /// A whole region, mutably.
    pub fn region_mut(&mut self, region: Region) -> &mut [u8] {
        let (unit, range) = self.region_range(region);
        match self.memory.get_mut(unit) {
            Some(m) => m.as_bytes_mut().get_mut(range).unwrap_or(&mut []),
            None => &mut [],
        }
    }

    /// Where tensor `t`'s bytes are.
    fn locate(&self, t: TensorId) -> Result<Located, ViewError> {
        match self.layout.placement(t) {
            Some(Placement::Region(slot)) => {
                let range = slot_range(slot)?;
                let (unit, start) = self.starts[region_index(slot.region)];
                let range = start
                    .checked_add(range.start)
                    .zip(start.checked_add(range.end))
                    .map(|(a, b)| a..b)
                    .ok_or(ViewError::TooLarge(t))?;
                Ok(Located {
                    unit,
                    range,
                    tensor: t,
                })
            }
            Some(Placement::Caller { bytes, .. }) => {
                let i = self
                    .bound
                    .binary_search_by_key(&t, |b| b.0)
                    .map_err(|_| ViewError::Unbound(t))?;
                Ok(Located {
                    unit: self.memory.len() + i,
                    range: 0..usize_of(bytes, t)?,
                    tensor: t,
                })
            }
            _ => Err(ViewError::NotPlaced(t)),
        }
    }

    fn unit(&self, unit: usize) -> &[u8] {
        match unit.checked_sub(self.memory.len()) {
            None => self.memory.get(unit).map_or(&[], |m| m.as_bytes()),
            Some(i) => self.bound.get(i).map_or(&[], |b| b.1.as_bytes()),
        }
    }

    fn unit_mut(&mut self, unit: usize) -> &mut [u8] {
        match unit.checked_sub(self.memory.len()) {
            None => match self.memory.get_mut(unit) {
                Some(m) => m.as_bytes_mut(),
                None => &mut [],
            },
            Some(i) => match self.bound.get_mut(i) {
                Some(b) => b.1.as_bytes_mut(),
                None => &mut [],
            },
        }
    }

    /// Tensor `t`'s bytes.
    pub fn bytes(&self, t: TensorId) -> Result<&[u8], ViewError> {
        let at = self.locate(t)?;
        self.unit(at.unit)
            .get(at.range)
            .ok_or(ViewError::TooLarge(t))
    }

    /// Tensor `t`'s bytes, mutably.
    pub fn bytes_mut(&mut self, t: TensorId) -> Result<&mut [u8], ViewError> {
        let at = self.locate(t)?;
        self.unit_mut(at.unit)
            .get_mut(at.range)
            .ok_or(ViewError::TooLarge(t))
    }

    /// The dtype tensor `t` is stored as.
    fn stored_dtype(&self, t: TensorId) -> Result<DType, ViewError> {
        match self.layout.placement(t) {
            Some(Placement::Region(slot)) => Ok(slot.dtype),
            Some(Placement::Caller { dtype, .. }) => Ok(dtype),
            _ => Err(ViewError::NotPlaced(t)),
        }
    }

    /// The element count of tensor `t` as `[T]`, after the checks of [`Layout::view`] (for a
    /// bound tensor: the dtype and a whole number of elements).
    fn view_len<T: Element>(&self, t: TensorId) -> Result<usize, ViewError> {
        if self.layout.slot(t).is_some() {
            return Ok(self.layout.view::<T>(t)?.len());
        }
        let stored = self.stored_dtype(t)?;
        if stored != T::DTYPE {
            return Err(ViewError::DTypeMismatch {
                tensor: t,
                stored,
                requested: T::DTYPE,
            });
        }
        let bytes = self.locate(t)?.range.len();
        if !bytes.is_multiple_of(size_of::<T>()) {
            return Err(ViewError::SizeMismatch {
                tensor: t,
                bytes: bytes as u64,
                element: size_of::<T>() as u64,
            });
        }
        Ok(bytes / size_of::<T>())
    }

    /// Tensor `t` as `[T]` (see [`Layout::view`] for the checks).
    pub fn view<T: Element>(&self, t: TensorId) -> Result<&[T], ViewError> {
        let len = self.view_len::<T>(t)?;
        cast(self.bytes(t)?, t, len)
    }

    /// Tensor `t` as `[T]`, mutably.
    pub fn view_mut<T: Element>(&mut self, t: TensorId) -> Result<&mut [T], ViewError> {
        let len = self.view_len::<T>(t)?;
        cast_mut(self.bytes_mut(t)?, t, len)
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
        let r: Vec<Located> = reads
            .iter()
            .map(|&t| self.locate(t))
            .collect::<Result<_, _>>()?;
        let w: Vec<Located> = writes
            .iter()
            .map(|&t| self.locate(t))
            .collect::<Result<_, _>>()?;
        for (i, a) in w.iter().enumerate() {
            let clash = w.iter().skip(i + 1).chain(&r).find(|b| {
                a.unit == b.unit && a.range.start < b.range.end && b.range.start < a.range.end
            });
            if let Some(b) = clash {
                return Err(ViewError::Overlap {
                    first: a.tensor,
                    second: b.tensor,
                });
            }
        }
        let units = self.memory.len() + self.bound.len();
        let mut out_r: Vec<Option<&[u8]>> = vec![None; r.len()];
        let mut out_w: Vec<Option<&mut [u8]>> = Vec::with_capacity(w.len());
        out_w.resize_with(w.len(), || None);
        let memories = self
            .memory
            .iter_mut()
            .map(|m| m.as_bytes_mut())
            .chain(self.bound.iter_mut().map(|b| b.1.as_bytes_mut()));
        for (unit, bytes) in memories.enumerate().take(units) {
            let mut mine_w: Vec<(usize, &Located)> = w
                .iter()
                .enumerate()
                .filter(|(_, x)| x.unit == unit)
                .collect();
            let mine_r: Vec<(usize, &Located)> = r
                .iter()
                .enumerate()
                .filter(|(_, x)| x.unit == unit)
                .collect();
            if mine_w.is_empty() && mine_r.is_empty() {
                continue;
            }
            mine_w.sort_by_key(|(_, x)| x.range.start);
            cut(bytes, &mine_w, &mine_r, &mut out_w, &mut out_r)?;
        }
        Ok(HostSplit {
            reads: out_r.into_iter().flatten().collect(),
            writes: out_w.into_iter().flatten().collect(),
        })
    }

    /// [`HostArena::split`] with every tensor viewed as `[T]`: each must hold `T`'s dtype
    /// (see [`Layout::view`] for the checks). What a kernel over one element type takes.
    #[allow(clippy::type_complexity)]
    pub fn split_typed<T: Element>(
        &mut self,
        reads: &[TensorId],
        writes: &[TensorId],
    ) -> Result<(Vec<&[T]>, Vec<&mut [T]>), ViewError> {
        let lens: Vec<usize> = reads
            .iter()
            .chain(writes)
            .map(|&t| self.view_len::<T>(t))
            .collect::<Result<_, _>>()?;
        let (read_lens, write_lens) = lens.split_at(reads.len());
        let split = self.split(reads, writes)?;
        let r = split
            .reads
            .into_iter()
            .zip(reads.iter().zip(read_lens))
            .map(|(b, (&t, &n))| cast::<T>(b, t, n))
            .collect::<Result<_, _>>()?;
        let w = split
            .writes
            .into_iter()
            .zip(writes.iter().zip(write_lens))
            .map(|(b, (&t, &n))| cast_mut::<T>(b, t, n))
            .collect::<Result<_, _>>()?;
        Ok((r, w))
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
        match self.stored_dtype(t)? {
            DType::F32 => self.upload::<f32>(t, data)?,
            DType::F16 => {
                let dst = self.view_mut::<f16>(t)?;
                check_len(t, dst.len(), data.len())?;
                crate::half_region::f32_into_f16(dst, data);
            }
            DType::BF16 => {
                let dst = self.view_mut::<bf16>(t)?;
                check_len(t, dst.len(), data.len())?;
                crate::half_region::f32_into_bf16(dst, data);
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
        match self.stored_dtype(t)? {
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

/// Checks memory for the one buffer (`region` `None`) or one region.
fn check_memory(bytes: &[u8], region: Option<Region>, layout: &Layout) -> Result<(), HostError> {
    let needed = match region {
        None => layout.buffer_bytes(),
        Some(r) => layout.region_bytes(r),
    };
    let given = bytes.len() as u64;
    if given < needed {
        return Err(HostError::TooSmall {
            region,
            needed,
            given,
        });
    }
    let align = layout.buffer_alignment();
    if needed > 0 && !address(bytes).is_multiple_of(align) {
        return Err(HostError::Misaligned {
            region,
            address: address(bytes),
            align,
        });
    }
    Ok(())
}

/// A slot's byte range in its region (a strided slot has none).
fn slot_range(slot: &Slot) -> Result<Range<usize>, ViewError> {
    if slot.rows > 1 {
        return Err(ViewError::Strided(slot.tensor));
    }
    let start = usize_of(slot.offset, slot.tensor)?;
    let end = start
        .checked_add(usize_of(slot.bytes, slot.tensor)?)
        .ok_or(ViewError::TooLarge(slot.tensor))?;
    Ok(start..end)
}

/// Cuts one memory into the mutable ranges `writes` (sorted by start, disjoint) and the
/// pieces between, from which the shared ranges `reads` are taken; puts each borrow at its
/// request's index.
fn cut<'a>(
    bytes: &'a mut [u8],
    writes: &[(usize, &Located)],
    reads: &[(usize, &Located)],
    out_w: &mut [Option<&'a mut [u8]>],
    out_r: &mut [Option<&'a [u8]>],
) -> Result<(), ViewError> {
    let mut rest: &'a mut [u8] = bytes;
    let mut pos = 0usize;
    let mut gaps: Vec<(usize, &'a [u8])> = Vec::with_capacity(writes.len() + 1);
    for &(i, at) in writes {
        let t = at.tensor;
        let skip = at
            .range
            .start
            .checked_sub(pos)
            .ok_or(ViewError::TooLarge(t))?;
        if at.range.end.saturating_sub(pos) > rest.len() {
            return Err(ViewError::TooLarge(t));
        }
        let (gap, tail) = std::mem::take(&mut rest).split_at_mut(skip);
        let (mine, tail) = tail.split_at_mut(at.range.len());
        gaps.push((pos, gap));
        if let Some(slot) = out_w.get_mut(i) {
            *slot = Some(mine);
        }
        rest = tail;
        pos = at.range.end;
    }
    gaps.push((pos, rest));
    for &(i, at) in reads {
        let piece = gaps
            .iter()
            .find(|(start, g)| *start <= at.range.start && at.range.end <= start + g.len())
            .and_then(|(start, g)| g.get(at.range.start - start..at.range.end - start))
            .ok_or(ViewError::TooLarge(at.tensor))?;
        if let Some(slot) = out_r.get_mut(i) {
            *slot = Some(piece);
        }
    }
    Ok(())
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
        .map_err(|_| cast_error::<T>(t, address(bytes), bytes.len() as u64))?;
    check_view_len(t, s.len(), len)?;
    Ok(s)
}

fn cast_mut<T: Element>(bytes: &mut [u8], t: TensorId, len: usize) -> Result<&mut [T], ViewError> {
    let (addr, n) = (address(bytes), bytes.len() as u64);
    let s: &mut [T] =
        bytemuck::try_cast_slice_mut(bytes).map_err(|_| cast_error::<T>(t, addr, n))?;
    check_view_len(t, s.len(), len)?;
    Ok(s)
}

fn check_view_len(t: TensorId, got: usize, want: usize) -> Result<(), ViewError> {
    if got == want {
        Ok(())
    } else {
        Err(ViewError::LengthMismatch {
            tensor: t,
            len: got,
            requested: want,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{HalfFormat, LayoutOptions};
    use crate::test_util::{ChainIds, chain_graph, chain_plan};
    use memplan_ir::GraphBuilder;
    use memplan_planner::{PlanOptions, plan_graph};

    fn layout(half: Option<HalfFormat>) -> (Layout, ChainIds) {
        let (g, ids) = chain_graph();
        let plan = chain_plan(&g, &ids);
        let opts = LayoutOptions { half_weights: half };
        (Layout::new(&g, &plan, &opts).unwrap(), ids)
    }

    fn arena(half: Option<HalfFormat>) -> (HostArena, ChainIds) {
        let (l, ids) = layout(half);
        (HostArena::new(l).unwrap(), ids)
    }

    #[test]
    fn aligned_buffers() {
        for align in [1u64, 64, 256, 4096] {
            let mut b = HostBuffer::zeroed(1000, align).unwrap();
            assert_eq!(address(b.as_bytes()) % align.max(MIN_HOST_ALIGN), 0);
            assert_eq!(b.as_bytes_mut().len(), 1000);
            assert!(b.as_bytes().iter().all(|&x| x == 0));
        }
        assert!(HostBuffer::zeroed(0, 256).unwrap().as_bytes().is_empty());
        assert!(matches!(
            HostBuffer::zeroed(10, 96),
            Err(HostError::BadRequest { .. })
        ));
    }

    /// One allocation holds every region, each at its start in the buffer: a tensor's bytes
    /// are at `buffer_offset` of the one buffer.
    #[test]
    fn one_buffer_holds_every_region_at_its_start() {
        let (l, ids) = layout(Some(HalfFormat::F16));
        // arena 192 bytes, weights (the i64 constant, packed anew) 64, half 96.
        assert_eq!(l.region_start(Region::Arena), 0);
        assert_eq!(l.region_start(Region::Weights), 256);
        assert_eq!(l.region_start(Region::Half), 512);
        assert_eq!(l.buffer_bytes(), 512 + 96);
        let mut memory = HostBuffer::zeroed(l.buffer_bytes(), l.buffer_alignment()).unwrap();
        let mut arena = HostArena::over(l.clone(), memory.as_bytes_mut()).unwrap();
        arena.upload::<i64>(ids.k, &[7, 9]).unwrap();
        arena.load_f32(ids.w2, &[1.0; 16]).unwrap();
        arena.upload::<f32>(ids.b, &[3.0; 16]).unwrap();
        drop(arena);
        let raw = memory.as_bytes();
        let at = |t| usize::try_from(l.buffer_offset(t).unwrap()).unwrap();
        assert_eq!(raw[at(ids.k)..at(ids.k) + 8], 7i64.to_ne_bytes());
        assert_eq!(
            raw[at(ids.w2)..at(ids.w2) + 2],
            f16::from_f32(1.0).to_ne_bytes()
        );
        assert_eq!(raw[at(ids.b)..at(ids.b) + 4], 3.0f32.to_ne_bytes());
        // The view descriptor says the same, in elements.
        let v = l.view::<f32>(ids.b).unwrap();
        assert_eq!(v.buffer_range(), Some(at(ids.b) / 4..at(ids.b) / 4 + 16));
    }

    #[test]
    fn memory_too_small_or_misaligned_is_an_error() {
        let (l, _) = layout(None);
        let mut memory = HostBuffer::zeroed(l.buffer_bytes() + 64, 256).unwrap();
        let bytes = memory.as_bytes_mut();
        let needed = l.buffer_bytes();
        assert_eq!(
            HostArena::over(l.clone(), &mut bytes[..needed as usize - 1]).unwrap_err(),
            HostError::TooSmall {
                region: None,
                needed,
                given: needed - 1
            }
        );
        let err = HostArena::over(l.clone(), &mut bytes[64..]).unwrap_err();
        assert!(
            matches!(err, HostError::Misaligned { align: 256, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("multiple of 256"), "{err}");
    }

    #[test]
    fn regions_in_memories_of_their_own() {
        let (l, ids) = layout(None);
        let weights = vec![0u8; 0];
        assert!(matches!(
            HostArena::over_regions(l.clone(), Vec::new(), weights, Vec::new()),
            Err(HostError::TooSmall {
                region: Some(Region::Arena),
                ..
            })
        ));
        let mut a = HostBuffer::zeroed(l.region_bytes(Region::Arena), 256).unwrap();
        let mut w = HostBuffer::zeroed(l.region_bytes(Region::Weights), 256).unwrap();
        let mut h: [u8; 0] = [];
        {
            let mut arena =
                HostArena::over_regions(l.clone(), a.as_bytes_mut(), w.as_bytes_mut(), &mut h[..])
                    .unwrap();
            arena.upload::<f32>(ids.w, &[5.0; 16]).unwrap();
            arena.upload::<f32>(ids.a, &[6.0; 16]).unwrap();
            // The view shares the bytes of `a`; a weight at the same offset does not.
            assert_eq!(arena.view::<f32>(ids.v).unwrap(), &[6.0; 16]);
            assert!(arena.split(&[ids.w], &[ids.a]).is_ok());
        }
        assert_eq!(w.as_bytes()[..4], 5.0f32.to_ne_bytes());
        assert_eq!(a.as_bytes()[..4], 6.0f32.to_ne_bytes());
    }

    #[test]
    fn typed_views_write_through_to_views() {
        let (mut a, ids) = arena(None);
        let data: Vec<f32> = (0..16).map(|i| i as f32).collect();
        a.view_mut::<f32>(ids.a).unwrap().copy_from_slice(&data);
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
        assert_eq!(
            a.split(&[ids.v], &[ids.a]).unwrap_err(),
            ViewError::Overlap {
                first: ids.a,
                second: ids.v
            }
        );
        assert_eq!(
            a.split(&[], &[ids.x, ids.y]).unwrap_err(),
            ViewError::Overlap {
                first: ids.x,
                second: ids.y
            }
        );
        // Alone, the error names ids; with the graph, the tensors' names (the builder's
        // `t7_Add` is tensor `t7`).
        let e = a.split(&[], &[ids.x, ids.y]).unwrap_err();
        let text = "share bytes; they cannot be borrowed together mutably";
        assert_eq!(e.to_string(), format!("tensors t0 and t7 {text}"));
        let (g, _) = chain_graph();
        assert_eq!(
            e.with_graph(&g).to_string(),
            format!("tensors x and t7_Add {text}")
        );
        assert_eq!(
            e.entities(),
            [AnyEntity::Tensor(ids.x), AnyEntity::Tensor(ids.y)]
        );
        // The same tensor twice as a write is an overlap too.
        assert!(matches!(
            a.split(&[], &[ids.b, ids.b]),
            Err(ViewError::Overlap { .. })
        ));
        assert!(a.split(&[ids.w], &[ids.a]).is_ok());
        // Typed: every tensor must hold the type asked for.
        {
            let (r, w) = a.split_typed::<f32>(&[ids.a, ids.v], &[ids.b]).unwrap();
            assert_eq!((r[0].len(), r[1].len(), w[0].len()), (16, 16, 16));
            assert_eq!(w[0][0], f32::from_ne_bytes([7; 4]));
        }
        assert!(matches!(
            a.split_typed::<f32>(&[ids.k], &[ids.b]),
            Err(ViewError::DTypeMismatch { .. })
        ));
        // Reads and writes come back in the order asked, whatever their addresses.
        let s = a.split(&[ids.b, ids.a], &[ids.k, ids.w]).unwrap();
        assert_eq!(s.reads[0][0], 7);
        assert_eq!(s.writes[0].len(), 16);
        assert_eq!(s.writes[1].len(), 64);
    }

    #[test]
    fn loads_f32_into_half_weights() {
        let (mut a, ids) = arena(Some(HalfFormat::F16));
        let data: Vec<f32> = (0..16).map(|i| i as f32 * 0.5 - 3.0).collect();
        a.load_f32(ids.w, &data).unwrap();
        assert_eq!(a.read_f32(ids.w).unwrap(), data, "exact in f16");
        assert_eq!(a.view::<f16>(ids.w).unwrap()[1], f16::from_f32(-2.5));
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
        a.upload::<i64>(ids.k, &[4, 4]).unwrap();
        assert_eq!(a.download::<i64>(ids.k).unwrap(), vec![4, 4]);
    }

    /// `x -> Exp -> a -> Log -> y` with the input and output left to the caller.
    fn caller_graph() -> (memplan_ir::Graph, [TensorId; 3], Layout) {
        let mut g = GraphBuilder::new("caller");
        let x = g.input("x", DType::F32, [64]);
        let a = g.op("Exp", &[x], DType::F32, [64]);
        let y = g.op("Log", &[a], DType::F32, [64]);
        g.mark_output(y);
        let graph = g.build().unwrap();
        let options = PlanOptions::default()
            .with_inputs_in_arena(false)
            .with_outputs_in_arena(false);
        let plan = plan_graph(&graph, &options).unwrap();
        let l = Layout::new(&graph, &plan, &LayoutOptions::default()).unwrap();
        (graph, [x, a, y], l)
    }

    #[test]
    fn caller_tensors_are_answered_and_bound() {
        let (_, [x, a, y], l) = caller_graph();
        assert_eq!(
            l.placement(x),
            Some(Placement::Caller {
                bytes: 256,
                dtype: DType::F32
            })
        );
        assert_eq!(
            l.caller_tensors().collect::<Vec<_>>(),
            vec![(x, 256, DType::F32), (y, 256, DType::F32)]
        );
        assert_eq!(l.placements().count(), 3);
        let mut arena = HostArena::new(l).unwrap();
        assert_eq!(arena.view::<f32>(x).unwrap_err(), ViewError::Unbound(x));
        assert!(matches!(
            arena.bind(a, HostBuffer::zeroed(256, 64).unwrap()),
            Err(BindError::NotCaller { .. })
        ));
        let mut input = HostBuffer::zeroed(256, 64).unwrap();
        input.as_bytes_mut()[..4].copy_from_slice(&1.5f32.to_ne_bytes());
        // A buffer too small, or off the element's alignment, is refused.
        assert!(matches!(
            arena.bind(x, HostBuffer::zeroed(255, 64).unwrap()),
            Err(BindError::TooSmall { needed: 256, .. })
        ));
        assert_eq!(arena.bind(x, input).unwrap().map(|_| ()), None);
        assert_eq!(arena.view::<f32>(x).unwrap()[0], 1.5);
        arena.bind(y, HostBuffer::zeroed(512, 64).unwrap()).unwrap();
        // A bound buffer is its own memory: borrowed beside the arena's tensors.
        {
            let mut s = arena.split(&[x], &[a, y]).unwrap();
            assert_eq!(
                s.writes[1].len(),
                256,
                "the tensor's bytes, not the buffer's"
            );
            s.writes[1].fill(1);
        }
        assert!(matches!(
            arena.split(&[y], &[y]),
            Err(ViewError::Overlap { .. })
        ));
        assert!(arena.is_bound(y));
        let out = arena.unbind(y).unwrap();
        assert!(out.as_bytes()[..256].iter().all(|&b| b == 1));
        assert_eq!(arena.view::<f32>(y).unwrap_err(), ViewError::Unbound(y));
    }

    #[test]
    fn misaligned_caller_buffer_is_refused() {
        let (_, [x, ..], l) = caller_graph();
        let mut memory = HostBuffer::zeroed(l.buffer_bytes(), l.buffer_alignment()).unwrap();
        let mut off = HostBuffer::zeroed(300, 64).unwrap();
        let mut on = HostBuffer::zeroed(300, 64).unwrap();
        let mut arena = HostArena::over(l, memory.as_bytes_mut()).unwrap();
        // Two bytes in: off the f32's alignment.
        assert!(matches!(
            arena.bind(x, &mut off.as_bytes_mut()[2..]),
            Err(BindError::Misaligned { align: 4, .. })
        ));
        assert!(arena.bind(x, &mut on.as_bytes_mut()[4..]).is_ok());
    }
}
