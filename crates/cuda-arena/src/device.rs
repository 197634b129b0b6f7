//! The device arena (feature `cuda`): one device allocation per region of a [`Layout`], with
//! typed per-tensor views, uploads, downloads and memory information, through cudarc's
//! driver API.
//!
//! **Reaching a GPU never panics.** cudarc loads `libcuda` at first use and panics when it
//! cannot; so [`Device::open`] first probes for the library ([`driver_present`]), then asks
//! for the device count, then creates the context, and runs every driver call that could load
//! the library inside `catch_unwind` as a last guard. No driver, no device, or a driver error
//! each come back as a [`DeviceError`].
//!
//! **Streams.** A [`Device`] owns one stream of its own (not the legacy default stream).
//! Every transfer of the arena ([`DeviceArena::upload`], [`DeviceArena::download`], the
//! pattern check) is issued on it and is complete when the call returns (downloads wait for
//! the stream). Views carry their device address and that stream: work launched on the same
//! stream is ordered after earlier transfers; a view handed to cudarc with another stream
//! first waits for the arena's stream (a host-side synchronize) and makes that stream finish
//! its use before returning. Pass [`CudaView::kernel_arg`] to a kernel launched on
//! [`Device::stream`].
//!
//! **Borrows.** [`CudaView`] and [`CudaViewMut`] borrow the arena (shared and mutable), so a
//! view cannot outlive its memory and a mutable view excludes every other view; several
//! tensors are borrowed together with [`DeviceArena::split`], which refuses a mutable view that
//! shares a byte with anything else asked for.

#![allow(unsafe_code)]

use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, DeviceSlice,
    DriverError, SyncOnDrop, sys,
};
use memplan_ir::{DType, TensorId};

use crate::element::Element;
use crate::half_region::HalfData;
use crate::layout::{HalfFormat, Layout, Region, Slot};
use crate::pattern::{Mismatch, PatternMemory, fill, verify};
use crate::pool::{ArenaPool, PoolBuffer};
use crate::view::ViewError;

/// Why the device or its memory could not be used.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The CUDA driver library (`libcuda.so` / `nvcuda.dll`) cannot be loaded.
    #[error("no CUDA driver: the driver library (libcuda) cannot be loaded on this machine")]
    NoDriver,
    /// The driver reports fewer devices than the ordinal asked for.
    #[error("no CUDA device {ordinal}: the driver reports {count} device(s)")]
    NoDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// Devices present.
        count: usize,
    },
    /// A driver call failed.
    #[error("CUDA driver call {call} failed: {error}")]
    Driver {
        /// What was called.
        call: &'static str,
        /// The driver's error.
        error: DriverError,
    },
    /// A driver call panicked (caught; the process goes on).
    #[error("CUDA driver call {call} panicked: {message}")]
    Panicked {
        /// What was called.
        call: &'static str,
        /// The panic message.
        message: String,
    },
    /// The layout needs more device memory than is free.
    #[error("the layout needs {needed} bytes of device memory but only {free} of {total} are free")]
    OutOfMemory {
        /// Bytes needed.
        needed: u64,
        /// Bytes free.
        free: u64,
        /// Bytes on the device.
        total: u64,
    },
    /// An allocation's base address is not aligned as the layout needs.
    #[error("the {region} allocation at {address:#x} is not aligned to {align} bytes")]
    Misaligned {
        /// The region.
        region: Region,
        /// Its device address.
        address: u64,
        /// The alignment needed.
        align: u64,
    },
    /// A size does not fit this machine's `usize`.
    #[error("{0} bytes do not fit this machine's address space")]
    TooLarge(u64),
    /// A view could not be made.
    #[error(transparent)]
    View(#[from] ViewError),
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_owned()
    }
}

/// Runs a driver call, turning its error and any panic into a [`DeviceError`].
fn guarded<T>(
    call: &'static str,
    f: impl FnOnce() -> Result<T, DriverError>,
) -> Result<T, DeviceError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(error)) => Err(DeviceError::Driver { call, error }),
        Err(p) => Err(DeviceError::Panicked {
            call,
            message: panic_message(p.as_ref()),
        }),
    }
}

/// Whether the CUDA driver library can be loaded. Loads nothing else and runs no CUDA code.
pub fn driver_present() -> bool {
    // SAFETY: `is_culib_present` only tries `dlopen` on the driver library's usual names and
    // closes what it opened; it calls no symbol from the library. Loading libcuda runs its
    // initializers, which is what any use of the driver does first.
    catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false)
}

/// The number of CUDA devices, or why there is none to count.
pub fn device_count() -> Result<usize, DeviceError> {
    if !driver_present() {
        return Err(DeviceError::NoDriver);
    }
    let n = guarded("cuDeviceGetCount", CudaContext::device_count)?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// Free and total device memory in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemInfo {
    /// Bytes free now.
    pub free: u64,
    /// Bytes on the device.
    pub total: u64,
}

/// A CUDA device with a context and a stream of its own.
#[derive(Debug, Clone)]
pub struct Device {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
}

impl Device {
    /// Opens device `ordinal`: probe the driver library, count devices, create the context
    /// and a stream. Every failure is an `Err`.
    pub fn open(ordinal: usize) -> Result<Device, DeviceError> {
        let count = device_count()?;
        if ordinal >= count {
            return Err(DeviceError::NoDevice { ordinal, count });
        }
        let ctx = guarded("cuCtxCreate", || CudaContext::new(ordinal))?;
        let stream = guarded("cuStreamCreate", || ctx.new_stream())?;
        Ok(Device { ctx, stream })
    }

    /// The device's name.
    pub fn name(&self) -> Result<String, DeviceError> {
        guarded("cuDeviceGetName", || self.ctx.name())
    }

    /// The device's ordinal.
    pub fn ordinal(&self) -> usize {
        self.ctx.ordinal()
    }

    /// Free and total device memory now.
    pub fn mem_info(&self) -> Result<MemInfo, DeviceError> {
        let (free, total) = guarded("cuMemGetInfo", || self.ctx.mem_get_info())?;
        Ok(MemInfo {
            free: free as u64,
            total: total as u64,
        })
    }

    /// Checks that `layout` fits in the free device memory, keeping `headroom` bytes free.
    pub fn preflight(&self, layout: &Layout, headroom: u64) -> Result<MemInfo, DeviceError> {
        let info = self.mem_info()?;
        let needed = layout
            .total_bytes()
            .and_then(|b| b.checked_add(headroom))
            .ok_or(DeviceError::TooLarge(u64::MAX))?;
        if needed > info.free {
            return Err(DeviceError::OutOfMemory {
                needed,
                free: info.free,
                total: info.total,
            });
        }
        Ok(info)
    }

    /// The stream every arena transfer runs on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Waits for all work on the stream.
    pub fn synchronize(&self) -> Result<(), DeviceError> {
        guarded("cuStreamSynchronize", || self.stream.synchronize())
    }
}

/// One region's device memory.
#[derive(Debug, Default)]
struct DeviceRegion {
    /// `None` for an empty region (the driver refuses zero-byte allocations).
    buf: Option<DeviceBuffer>,
    /// Bytes of `buf` the region uses (a pooled buffer may be larger).
    len: usize,
}

impl DeviceRegion {
    fn base(&self) -> u64 {
        self.buf.as_ref().map_or(0, |b| b.base)
    }
}

/// One device allocation, as an [`ArenaPool`] holds it.
#[derive(Debug)]
pub struct DeviceBuffer {
    slice: CudaSlice<u8>,
    base: u64,
}

impl DeviceBuffer {
    /// `len` zeroed bytes on `device`.
    fn zeroed(device: &Device, len: usize) -> Result<DeviceBuffer, DeviceError> {
        let slice = guarded("cuMemAlloc", || device.stream.alloc_zeros::<u8>(len))?;
        let base = {
            let (ptr, _sync) = slice.device_ptr(&device.stream);
            ptr
        };
        Ok(DeviceBuffer { slice, base })
    }
}

impl PoolBuffer for DeviceBuffer {
    fn capacity(&self) -> u64 {
        self.slice.len() as u64
    }
    fn alignment(&self) -> u64 {
        // The largest power of two dividing the address, counted up to 4 KiB.
        1u64 << self.base.trailing_zeros().min(12)
    }
}

/// A pool of device buffers, reused across plans of similar size.
pub type DevicePool = ArenaPool<DeviceBuffer>;

/// Device memory for every region of a layout.
#[derive(Debug)]
pub struct DeviceArena {
    device: Device,
    layout: Layout,
    regions: [DeviceRegion; 3],
}

fn region_index(r: Region) -> usize {
    match r {
        Region::Arena => 0,
        Region::Weights => 1,
        Region::Half => 2,
    }
}

/// Tensor bytes as a shared device view of `T`.
#[derive(Debug)]
pub struct CudaView<'a, T> {
    ptr: sys::CUdeviceptr,
    len: usize,
    tensor: TensorId,
    stream: &'a Arc<CudaStream>,
    _marker: PhantomData<&'a [T]>,
}

/// Tensor bytes as a mutable device view of `T`.
#[derive(Debug)]
pub struct CudaViewMut<'a, T> {
    ptr: sys::CUdeviceptr,
    len: usize,
    tensor: TensorId,
    stream: &'a Arc<CudaStream>,
    _marker: PhantomData<&'a mut [T]>,
}

macro_rules! view_common {
    ($name:ident) => {
        impl<T> $name<'_, T> {
            /// The tensor.
            pub fn tensor(&self) -> TensorId {
                self.tensor
            }
            /// Elements in the view.
            pub fn len(&self) -> usize {
                self.len
            }
            /// Whether the view has no elements.
            pub fn is_empty(&self) -> bool {
                self.len == 0
            }
            /// The device address, to pass to a kernel launched on the arena's stream
            /// (`launch_builder(...).arg(view.kernel_arg())`).
            pub fn kernel_arg(&self) -> &sys::CUdeviceptr {
                &self.ptr
            }
        }

        impl<T> DeviceSlice<T> for $name<'_, T> {
            fn len(&self) -> usize {
                self.len
            }
            fn stream(&self) -> &Arc<CudaStream> {
                self.stream
            }
        }

        impl<T> DevicePtr<T> for $name<'_, T> {
            fn device_ptr<'b>(
                &'b self,
                stream: &'b CudaStream,
            ) -> (sys::CUdeviceptr, SyncOnDrop<'b>) {
                (self.ptr, order_with(self.stream, stream))
            }
        }
    };
}

view_common!(CudaView);
view_common!(CudaViewMut);

impl<T> DevicePtrMut<T> for CudaViewMut<'_, T> {
    fn device_ptr_mut<'b>(
        &'b mut self,
        stream: &'b CudaStream,
    ) -> (sys::CUdeviceptr, SyncOnDrop<'b>) {
        (self.ptr, order_with(self.stream, stream))
    }
}

/// Orders use of arena memory on `user` after the arena's stream `own`: nothing to do on the
/// same stream; otherwise wait for `own` now and for `user` when the use is scheduled.
fn order_with<'b>(own: &Arc<CudaStream>, user: &'b CudaStream) -> SyncOnDrop<'b> {
    if own.cu_stream() == user.cu_stream() {
        SyncOnDrop::Sync(None)
    } else {
        own.context().record_err(own.synchronize());
        SyncOnDrop::sync_stream(user)
    }
}

/// The largest host staging buffer the pattern check uses at once.
const STAGING_BYTES: usize = 64 << 20;

impl DeviceArena {
    /// Allocates (zeroed) device memory for `layout` on `device`, after checking that it fits.
    pub fn new(device: &Device, layout: Layout) -> Result<DeviceArena, DeviceError> {
        DeviceArena::build(device, layout, None)
    }

    /// Device memory for `layout`, reusing idle buffers of similar size from `pool` (their
    /// old contents stay) and allocating (zeroed) the rest after checking that it fits. Give
    /// the buffers back with [`DeviceArena::release`].
    pub fn from_pool(
        device: &Device,
        layout: Layout,
        pool: &mut DevicePool,
    ) -> Result<DeviceArena, DeviceError> {
        DeviceArena::build(device, layout, Some(pool))
    }

    fn build(
        device: &Device,
        layout: Layout,
        mut pool: Option<&mut DevicePool>,
    ) -> Result<DeviceArena, DeviceError> {
        let align = layout.alignment();
        let mut taken: [Option<DeviceBuffer>; 3] = [None, None, None];
        let mut lens = [0usize; 3];
        let mut to_allocate: u64 = 0;
        for region in Region::ALL {
            let i = region_index(region);
            let bytes = layout.region_bytes(region);
            lens[i] = usize::try_from(bytes).map_err(|_| DeviceError::TooLarge(bytes))?;
            if bytes == 0 {
                continue;
            }
            taken[i] = pool.as_deref_mut().and_then(|p| p.take(bytes, align));
            if taken[i].is_none() {
                to_allocate = to_allocate
                    .checked_add(bytes)
                    .ok_or(DeviceError::TooLarge(bytes))?;
            }
        }
        let info = device.mem_info()?;
        if to_allocate > info.free {
            if let Some(p) = pool {
                taken.into_iter().flatten().for_each(|b| p.give(b));
            }
            return Err(DeviceError::OutOfMemory {
                needed: to_allocate,
                free: info.free,
                total: info.total,
            });
        }
        let mut regions: [DeviceRegion; 3] = Default::default();
        for region in Region::ALL {
            let i = region_index(region);
            let len = lens[i];
            let buf = match taken[i].take() {
                Some(b) => Some(b),
                None if len == 0 => None,
                None => Some(DeviceBuffer::zeroed(device, len)?),
            };
            if let Some(b) = &buf
                && !b.base.is_multiple_of(align)
            {
                return Err(DeviceError::Misaligned {
                    region,
                    address: b.base,
                    align,
                });
            }
            regions[i] = DeviceRegion { buf, len };
        }
        device.synchronize()?;
        Ok(DeviceArena {
            device: device.clone(),
            layout,
            regions,
        })
    }

    /// Gives this arena's buffers back to `pool` and returns the layout.
    pub fn release(self, pool: &mut DevicePool) -> Layout {
        let DeviceArena {
            layout, regions, ..
        } = self;
        for r in regions {
            if let Some(b) = r.buf {
                pool.give(b);
            }
        }
        layout
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Device bytes allocated for the regions.
    pub fn allocated_bytes(&self) -> u64 {
        self.regions
            .iter()
            .filter_map(|r| r.buf.as_ref())
            .map(|b| b.capacity())
            .sum()
    }

    fn address(
        &self,
        region: Region,
        offset: u64,
        bytes: u64,
    ) -> Result<(sys::CUdeviceptr, usize), DeviceError> {
        let r = self
            .regions
            .get(region_index(region))
            .ok_or(DeviceError::TooLarge(bytes))?;
        let len = usize::try_from(bytes).map_err(|_| DeviceError::TooLarge(bytes))?;
        let end = offset
            .checked_add(bytes)
            .ok_or(DeviceError::TooLarge(bytes))?;
        if end > r.len as u64 {
            return Err(DeviceError::TooLarge(end));
        }
        Ok((
            r.base()
                .checked_add(offset)
                .ok_or(DeviceError::TooLarge(offset))?,
            len,
        ))
    }

    fn slot_view<T: Element>(&self, slot: &Slot) -> Result<(sys::CUdeviceptr, usize), DeviceError> {
        let desc = crate::view::ViewDesc::<T>::new(slot)?;
        let (ptr, _) = self.address(slot.region, slot.offset, slot.bytes)?;
        Ok((ptr, desc.len()))
    }

    /// Tensor `t` as a shared device view of `T` (see [`Layout::view`] for the checks).
    pub fn view<T: Element>(&self, t: TensorId) -> Result<CudaView<'_, T>, DeviceError> {
        let (ptr, len) = self.slot_view::<T>(self.layout.placed(t)?)?;
        Ok(CudaView {
            ptr,
            len,
            tensor: t,
            stream: &self.device.stream,
            _marker: PhantomData,
        })
    }

    /// Tensor `t` as a mutable device view of `T`.
    pub fn view_mut<T: Element>(&mut self, t: TensorId) -> Result<CudaViewMut<'_, T>, DeviceError> {
        let (ptr, len) = self.slot_view::<T>(self.layout.placed(t)?)?;
        Ok(CudaViewMut {
            ptr,
            len,
            tensor: t,
            stream: &self.device.stream,
            _marker: PhantomData,
        })
    }

    /// Borrows `reads` as shared byte views and `writes` as mutable ones, at once; a tensor
    /// in `writes` may share no byte with any other tensor asked for.
    #[allow(clippy::type_complexity)]
    pub fn split(
        &mut self,
        reads: &[TensorId],
        writes: &[TensorId],
    ) -> Result<(Vec<CudaView<'_, u8>>, Vec<CudaViewMut<'_, u8>>), DeviceError> {
        let (r, w) = self.layout.split_slots(reads, writes)?;
        let stream = &self.device.stream;
        let mut out_r = Vec::with_capacity(r.len());
        for s in r {
            let (ptr, len) = self.address(s.region, s.offset, s.bytes)?;
            out_r.push(CudaView {
                ptr,
                len,
                tensor: s.tensor,
                stream,
                _marker: PhantomData,
            });
        }
        let mut out_w = Vec::with_capacity(w.len());
        for s in w {
            let (ptr, len) = self.address(s.region, s.offset, s.bytes)?;
            out_w.push(CudaViewMut {
                ptr,
                len,
                tensor: s.tensor,
                stream,
                _marker: PhantomData,
            });
        }
        Ok((out_r, out_w))
    }

    /// Copies `data` into tensor `t` (its dtype must be `T`'s and its length `data.len()`).
    pub fn upload<T: Element + DeviceRepr>(
        &mut self,
        t: TensorId,
        data: &[T],
    ) -> Result<(), DeviceError> {
        let stream = Arc::clone(&self.device.stream);
        let mut dst = self.view_mut::<T>(t)?;
        if dst.len() != data.len() {
            return Err(ViewError::DataLength {
                tensor: t,
                expected: dst.len(),
                actual: data.len(),
            }
            .into());
        }
        guarded("cuMemcpyHtoD", || stream.memcpy_htod(data, &mut dst))
    }

    /// Tensor `t`'s contents as `T`s.
    pub fn download<T: Element + DeviceRepr>(&self, t: TensorId) -> Result<Vec<T>, DeviceError> {
        let src = self.view::<T>(t)?;
        let mut out = vec![<T as bytemuck::Zeroable>::zeroed(); src.len()];
        let stream = &self.device.stream;
        guarded("cuMemcpyDtoH", || {
            stream.memcpy_dtoh(&src, out.as_mut_slice())
        })?;
        self.device.synchronize()?;
        Ok(out)
    }

    /// Stores `f32` data into tensor `t`, converted to its stored dtype (`f32`, or `f16` /
    /// `bf16` for a weight in the half region or a half tensor).
    pub fn upload_f32(&mut self, t: TensorId, data: &[f32]) -> Result<(), DeviceError> {
        match self.layout.placed(t)?.dtype {
            DType::F32 => self.upload::<f32>(t, data),
            DType::F16 => match HalfData::from_f32(data, HalfFormat::F16) {
                HalfData::F16(v) => self.upload(t, &v),
                HalfData::BF16(v) => self.upload(t, &v),
            },
            DType::BF16 => match HalfData::from_f32(data, HalfFormat::BF16) {
                HalfData::F16(v) => self.upload(t, &v),
                HalfData::BF16(v) => self.upload(t, &v),
            },
            stored => Err(ViewError::DTypeMismatch {
                tensor: t,
                stored,
                requested: DType::F32,
            }
            .into()),
        }
    }

    /// Copies host bytes into `[offset, offset + bytes.len())` of `region`.
    fn write_raw(&mut self, region: Region, offset: u64, bytes: &[u8]) -> Result<(), DeviceError> {
        let (ptr, len) = self.address(region, offset, bytes.len() as u64)?;
        let mut dst: CudaViewMut<'_, u8> = CudaViewMut {
            ptr,
            len,
            tensor: TensorId(u32::MAX),
            stream: &self.device.stream,
            _marker: PhantomData,
        };
        let stream = &self.device.stream;
        guarded("cuMemcpyHtoD", || stream.memcpy_htod(bytes, &mut dst))
    }

    /// Copies `[offset, offset + out.len())` of `region` into `out` and waits for it.
    fn read_raw(&self, region: Region, offset: u64, out: &mut [u8]) -> Result<(), DeviceError> {
        let (ptr, len) = self.address(region, offset, out.len() as u64)?;
        let src: CudaView<'_, u8> = CudaView {
            ptr,
            len,
            tensor: TensorId(u32::MAX),
            stream: &self.device.stream,
            _marker: PhantomData,
        };
        let stream = &self.device.stream;
        guarded("cuMemcpyDtoH", || stream.memcpy_dtoh(&src, out))?;
        self.device.synchronize()
    }
}

/// The pattern check on the device: patterns are made on the host and copied in chunks of at
/// most 64 MiB (`cuMemcpyHtoD`); checks copy the bytes back (`cuMemcpyDtoH`) and compare on
/// the host. Every copy is on the arena's stream, in schedule order.
impl PatternMemory for DeviceArena {
    type Error = DeviceError;

    fn fill(
        &mut self,
        region: Region,
        offset: u64,
        bytes: u64,
        seed: u64,
    ) -> Result<(), DeviceError> {
        let mut staging = Vec::new();
        let mut done: u64 = 0;
        while done < bytes {
            let n = usize::try_from((bytes - done).min(STAGING_BYTES as u64))
                .map_err(|_| DeviceError::TooLarge(bytes))?;
            staging.resize(n, 0);
            let at = offset
                .checked_add(done)
                .ok_or(DeviceError::TooLarge(offset))?;
            fill(&mut staging, at, seed);
            self.write_raw(region, at, &staging)?;
            done += n as u64;
        }
        Ok(())
    }

    fn verify(
        &mut self,
        region: Region,
        offset: u64,
        bytes: u64,
        seed: u64,
    ) -> Result<Option<Mismatch>, DeviceError> {
        let mut staging = Vec::new();
        let mut done: u64 = 0;
        let mut out: Option<Mismatch> = None;
        while done < bytes {
            let n = usize::try_from((bytes - done).min(STAGING_BYTES as u64))
                .map_err(|_| DeviceError::TooLarge(bytes))?;
            staging.resize(n, 0);
            let at = offset
                .checked_add(done)
                .ok_or(DeviceError::TooLarge(offset))?;
            self.read_raw(region, at, &mut staging)?;
            if let Some(m) = verify(&staging, at, seed) {
                out = Some(match out {
                    Some(o) => Mismatch {
                        first: o.first.min(m.first),
                        count: o.count.saturating_add(m.count),
                    },
                    None => m,
                });
            }
            done += n as u64;
        }
        Ok(out)
    }
}
