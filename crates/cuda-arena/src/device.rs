//! The device arena (feature `cuda`): one device allocation per [`Layout`] (every region at
//! its [`Layout::region_start`]), with typed per-tensor views, uploads, downloads and memory
//! information, through cudarc's driver API.
//!
//! **Memory the engine owns.** An engine that has its own cudarc context and stream makes
//! its [`Device`] from them ([`Device::from_stream`], [`Device::from_context`]); one that has
//! its own allocation lends it to an arena ([`DeviceArena::in_slice`]: it must hold
//! [`Layout::buffer_bytes`] bytes from an address aligned to [`Layout::buffer_alignment`])
//! and takes it back, contents kept, with [`DeviceArena::into_slice`]. Tensors the plan
//! leaves to the caller ([`memplan_layout::Placement::Caller`]) get their allocation with
//! [`DeviceArena::bind`]; views, uploads and split borrows then serve them like the others.
//! An allocation the arena refuses comes back in the error ([`Refused`]), never freed.
//!
//! **Reaching a GPU never panics.** cudarc loads `libcuda` at first use and panics when it
//! cannot; so [`Device::open`] first probes for the library ([`driver_present`]), then asks
//! for the device count, then creates the context, and runs every driver call that could load
//! the library inside `catch_unwind` as a last guard. No driver, no device, or a driver error
//! each come back as a [`DeviceError`].
//!
//! **Streams.** A [`Device`] has one stream: its own from [`Device::open`] (not the legacy
//! default stream), or the engine's from [`Device::from_stream`].
//! Every transfer of the arena ([`DeviceArena::upload`], [`DeviceArena::download`], the
//! pattern check) is issued on it and is complete when the call returns: every copy waits
//! for the stream, so the device has read the host data (pinned or registered host memory
//! included, which the driver copies asynchronously) before an upload returns. Views carry their device address and that stream: work launched on the same
//! stream is ordered after earlier transfers; a view handed to cudarc with another stream
//! first waits for the arena's stream (a host-side synchronize) and makes that stream finish
//! its use before returning. Pass [`CudaView::kernel_arg`] to a kernel launched on
//! [`Device::stream`].
//!
//! **Pools.** A [`DeviceBuffer`] remembers its device's context ([`DeviceOwner`]) and the
//! stream it was last used on; a [`DevicePool`] hands a buffer only to an arena of the same
//! context. [`DeviceArena::release`] waits for the arena's stream before a buffer goes back,
//! and dropping an arena waits for it too, so no work of one stream is in flight on memory
//! that another stream reuses or that cudarc frees (on the stream that allocated it).
//!
//! **Borrows.** [`CudaView`] and [`CudaViewMut`] borrow the arena (shared and mutable), so a
//! view cannot outlive its memory and a mutable view excludes every other view; several
//! tensors are borrowed together with [`DeviceArena::split`], which refuses a mutable view that
//! shares a byte with anything else asked for.

#![allow(unsafe_code)]

use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use cudarc::driver::{DevicePtr, DevicePtrMut, DeviceSlice, SyncOnDrop, sys};
use memplan_ir::{DType, TensorId};

use memplan_layout::{BindError, Element, HalfData, HalfFormat, Placement, ViewDesc, ViewError};

/// cudarc's types as this module takes and gives them: the context, stream and allocation,
/// the driver's error ([`DeviceError::Driver`]), the bounds of typed uploads and downloads,
/// pinned host memory ([`Device::pinned_zeroed`]) and a device address
/// ([`CudaView::kernel_arg`]), so that an engine names the same cudarc version as the arena
/// with no `cudarc` dependency of its own.
pub use cudarc::driver::sys::CUdeviceptr;
pub use cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, DeviceRepr, DriverError, PinnedHostSlice, ValidAsZeroBits,
};

use crate::layout::{Layout, Region};
use crate::pattern::{Mismatch, PatternMemory, Salts, fill, verify};
use crate::pool::{ArenaPool, PoolBuffer};

/// Why the device or its memory could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// A size does not fit this machine's `usize`, or a range lies outside its allocation.
    #[error("{0} bytes do not fit this machine's address space")]
    TooLarge(u64),
    /// An allocation lent to the arena is smaller than the layout's buffer.
    #[error("the layout needs a buffer of {needed} bytes, the allocation has {given}")]
    TooSmall {
        /// Bytes needed.
        needed: u64,
        /// Bytes in the allocation.
        given: u64,
    },
    /// An allocation lent to the arena belongs to another context than the arena's device.
    #[error("the allocation belongs to another CUDA context (device {ordinal}) than the arena's")]
    OtherContext {
        /// The allocation's device ordinal.
        ordinal: usize,
    },
    /// A buffer cannot be bound to a tensor.
    #[error(transparent)]
    Bind(#[from] BindError),
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

/// Whether a driver error says that the machine has no CUDA device (`cuInit` answers so
/// where libcuda is installed but no GPU is visible, as in a container without one).
pub fn is_no_device(error: &DriverError) -> bool {
    error.0 == sys::cudaError_enum::CUDA_ERROR_NO_DEVICE
}

/// The device count from the driver's answer: `CUDA_ERROR_NO_DEVICE` is zero devices, not a
/// driver failure.
fn count_devices(answer: Result<i32, DeviceError>) -> Result<usize, DeviceError> {
    match answer {
        Ok(n) => Ok(usize::try_from(n).unwrap_or(0)),
        Err(DeviceError::Driver { ref error, .. }) if is_no_device(error) => Ok(0),
        Err(e) => Err(e),
    }
}

/// The number of CUDA devices (0 where the driver finds none), or why there is none to
/// count.
pub fn device_count() -> Result<usize, DeviceError> {
    if !driver_present() {
        return Err(DeviceError::NoDriver);
    }
    count_devices(guarded("cuDeviceGetCount", CudaContext::device_count))
}

/// Free and total device memory in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemInfo {
    /// Bytes free now.
    pub free: u64,
    /// Bytes on the device.
    pub total: u64,
}

/// A CUDA device: a context and the stream every arena transfer runs on (its own, or the
/// engine's).
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
        let ctx = match guarded("cuCtxCreate", || CudaContext::new(ordinal)) {
            Err(DeviceError::Driver { ref error, .. }) if is_no_device(error) => {
                return Err(DeviceError::NoDevice { ordinal, count: 0 });
            }
            other => other?,
        };
        let stream = guarded("cuStreamCreate", || ctx.new_stream())?;
        Ok(Device { ctx, stream })
    }

    /// The device of an engine's existing cudarc stream: arenas of this device run every
    /// transfer on `stream`, in its context, ordered with the engine's own work on it.
    pub fn from_stream(stream: Arc<CudaStream>) -> Device {
        Device {
            ctx: Arc::clone(stream.context()),
            stream,
        }
    }

    /// The device of an engine's existing cudarc context, with a new stream of its own.
    pub fn from_context(ctx: Arc<CudaContext>) -> Result<Device, DeviceError> {
        let stream = guarded("cuStreamCreate", || ctx.new_stream())?;
        Ok(Device { ctx, stream })
    }

    /// The context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
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

    /// `len` zeroed elements of page-locked (pinned) host memory, which the driver copies
    /// to and from asynchronously: the kind of host memory [`DeviceArena::upload`] must wait
    /// for.
    pub fn pinned_zeroed<T: Element + DeviceRepr + ValidAsZeroBits>(
        &self,
        len: usize,
    ) -> Result<PinnedHostSlice<T>, DeviceError> {
        let ctx = &self.ctx;
        // SAFETY: `alloc_pinned` leaves the memory uninitialised; nothing reads it before the
        // `write_bytes` below zeroes it.
        let mut pinned = guarded("cuMemHostAlloc", || unsafe { ctx.alloc_pinned::<T>(len) })?;
        let ptr = guarded("cuEventSynchronize", || pinned.as_mut_ptr())?;
        // SAFETY: `ptr` is the start of the `len` elements just allocated, owned by `pinned`
        // and referenced by nothing else; all-zero bytes are a valid `T` (`Element: Pod`).
        unsafe { std::ptr::write_bytes(ptr, 0, len) };
        Ok(pinned)
    }

    /// Who owns this device's buffers in a pool: its context.
    pub fn owner(&self) -> DeviceOwner {
        DeviceOwner {
            ordinal: self.ctx.ordinal(),
            context: self.ctx.cu_ctx() as usize,
        }
    }
}

impl DeviceError {
    /// Whether the error only says that no GPU can be reached (no driver, no device): the
    /// case where a GPU test skips.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, DeviceError::NoDriver | DeviceError::NoDevice { .. })
    }
}

/// The owner of a device buffer: the device's context (two [`Device`]s of one GPU share the
/// primary context and so each other's pooled buffers; a buffer never goes to another GPU).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceOwner {
    /// The device ordinal.
    pub ordinal: usize,
    /// The context's handle, as a number.
    pub context: usize,
}

/// One device allocation, as an [`ArenaPool`] holds it: it remembers its context and the
/// stream it was last used on (cudarc frees it on the stream that allocated it).
#[derive(Debug)]
pub struct DeviceBuffer {
    slice: CudaSlice<u8>,
    base: u64,
    owner: DeviceOwner,
    last_stream: Arc<CudaStream>,
}

impl DeviceBuffer {
    /// `len` zeroed bytes on `device`.
    fn zeroed(device: &Device, len: usize) -> Result<DeviceBuffer, DeviceError> {
        let slice = guarded("cuMemAlloc", || device.stream.alloc_zeros::<u8>(len))?;
        let base = {
            let (ptr, _sync) = slice.device_ptr(&device.stream);
            ptr
        };
        Ok(DeviceBuffer {
            slice,
            base,
            owner: device.owner(),
            last_stream: Arc::clone(&device.stream),
        })
    }

    /// An allocation the engine lends, on `device`'s stream from now on (after the stream
    /// it was used on last finishes); refused, and given back, when it belongs to another
    /// context.
    fn adopt(device: &Device, slice: CudaSlice<u8>) -> Result<DeviceBuffer, Refused> {
        if slice.context().cu_ctx() != device.ctx.cu_ctx() {
            let ordinal = slice.ordinal();
            return Err(Refused {
                error: DeviceError::OtherContext { ordinal },
                slice,
            });
        }
        let base = {
            let (ptr, _sync) = slice.device_ptr(&device.stream);
            ptr
        };
        let mut b = DeviceBuffer {
            last_stream: Arc::clone(slice.stream()),
            slice,
            base,
            owner: device.owner(),
        };
        if let Err(error) = b.move_to(device) {
            return Err(Refused {
                error,
                slice: b.slice,
            });
        }
        Ok(b)
    }

    /// Hands the buffer to `device`'s stream: waits for the stream that used it last (a
    /// no-op after a release, which waited already) and records the new one.
    fn move_to(&mut self, device: &Device) -> Result<(), DeviceError> {
        if self.last_stream.cu_stream() != device.stream.cu_stream() {
            guarded("cuStreamSynchronize", || self.last_stream.synchronize())?;
            self.last_stream = Arc::clone(&device.stream);
        }
        Ok(())
    }
}

impl PoolBuffer for DeviceBuffer {
    type Owner = DeviceOwner;
    fn owner(&self) -> DeviceOwner {
        self.owner
    }
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

/// An allocation an arena did not take ([`DeviceArena::in_slice`], [`DeviceArena::bind`]),
/// given back with the reason.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
#[non_exhaustive]
pub struct Refused {
    /// Why.
    pub error: DeviceError,
    /// The allocation, untouched.
    pub slice: CudaSlice<u8>,
}

/// Device memory for every region of a layout: one allocation.
#[derive(Debug)]
pub struct DeviceArena {
    device: Device,
    layout: Layout,
    /// The one allocation (`None` for a layout of no bytes: the driver refuses zero-byte
    /// allocations).
    memory: Option<DeviceBuffer>,
    /// Bytes of it the layout uses (a pooled or lent allocation may be larger).
    len: usize,
    /// The caller's allocations, by tensor, in tensor id order.
    bound: Vec<(TensorId, DeviceBuffer)>,
    salts: Salts,
}

impl Drop for DeviceArena {
    /// Waits for the arena's stream before its buffers are freed: cudarc frees a buffer on
    /// the stream that allocated it, which may not be this arena's (a pooled buffer), so
    /// work still queued here must finish first. A failed wait is recorded in the context
    /// (cudarc reports it at its next call); a destructor has no one to return it to.
    fn drop(&mut self) {
        if self.memory.is_some() || !self.bound.is_empty() {
            let stream = &self.device.stream;
            stream.context().record_err(stream.synchronize());
        }
    }
}

/// Tensor bytes as a shared device view of `T`.
#[derive(Debug)]
pub struct CudaView<'a, T> {
    ptr: CUdeviceptr,
    len: usize,
    tensor: TensorId,
    stream: &'a Arc<CudaStream>,
    _marker: PhantomData<&'a [T]>,
}

/// Tensor bytes as a mutable device view of `T`.
#[derive(Debug)]
pub struct CudaViewMut<'a, T> {
    ptr: CUdeviceptr,
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
            pub fn kernel_arg(&self) -> &CUdeviceptr {
                &self.ptr
            }
        }

        // What these safe impls promise, since cudarc's safe copies (`memcpy_htod`,
        // `memcpy_dtoh`, launches) trust them for soundness:
        // - `[ptr, ptr + len * size_of::<T>())` is device memory of the arena's context,
        //   inside one region's allocation, alive for the view's lifetime `'a` (the view
        //   borrows the arena, whose `Drop` waits for its stream before freeing anything);
        // - `len` is the element count for `T` that the layout checked (dtype, size and
        //   alignment, see `Layout::view`; `u8` views of raw ranges are bound-checked);
        // - no mutable view overlaps any other live view (`&mut` borrows of the arena, and
        //   `split`'s disjointness check);
        // - `stream` is the arena's stream, and a use on another stream is ordered after it
        //   and finished before the returned guard is dropped (`order_with`).
        impl<T> DeviceSlice<T> for $name<'_, T> {
            fn len(&self) -> usize {
                self.len
            }
            fn stream(&self) -> &Arc<CudaStream> {
                self.stream
            }
        }

        impl<T> DevicePtr<T> for $name<'_, T> {
            fn device_ptr<'b>(&'b self, stream: &'b CudaStream) -> (CUdeviceptr, SyncOnDrop<'b>) {
                (self.ptr, order_with(self.stream, stream))
            }
        }
    };
}

view_common!(CudaView);
view_common!(CudaViewMut);

impl<T> DevicePtrMut<T> for CudaViewMut<'_, T> {
    fn device_ptr_mut<'b>(&'b mut self, stream: &'b CudaStream) -> (CUdeviceptr, SyncOnDrop<'b>) {
        (self.ptr, order_with(self.stream, stream))
    }
}

/// Orders use of arena memory on `user` after the arena's stream `own`: nothing to do on the
/// same stream; otherwise wait for `own` now and for `user` when the use is scheduled.
///
/// The trait this serves cannot return an error, so a failed wait is recorded in the
/// contexts of both streams: cudarc checks a context's recorded error before its next call
/// on it (the user's copy or launch reports it), and every call of this module goes through
/// that check too.
fn order_with<'b>(own: &Arc<CudaStream>, user: &'b CudaStream) -> SyncOnDrop<'b> {
    if own.cu_stream() == user.cu_stream() {
        SyncOnDrop::Sync(None)
    } else {
        if let Err(e) = own.synchronize() {
            own.context().record_err::<()>(Err(e));
            user.context().record_err::<()>(Err(e));
        }
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
        pool: Option<&mut DevicePool>,
    ) -> Result<DeviceArena, DeviceError> {
        let bytes = layout.buffer_bytes();
        let align = layout.buffer_alignment();
        let len = usize::try_from(bytes).map_err(|_| DeviceError::TooLarge(bytes))?;
        let memory = if bytes == 0 {
            None
        } else {
            let taken = match pool {
                Some(p) => p.take(bytes, align, &device.owner()).map(|b| (b, p)),
                None => None,
            };
            Some(match taken {
                Some((mut b, p)) => match b.move_to(device) {
                    Ok(()) => b,
                    Err(e) => {
                        p.give(b);
                        return Err(e);
                    }
                },
                None => {
                    let info = device.mem_info()?;
                    if bytes > info.free {
                        return Err(DeviceError::OutOfMemory {
                            needed: bytes,
                            free: info.free,
                            total: info.total,
                        });
                    }
                    DeviceBuffer::zeroed(device, len)?
                }
            })
        };
        if let Some(b) = &memory
            && !b.base.is_multiple_of(align)
        {
            return Err(DeviceError::Misaligned {
                region: Region::Arena,
                address: b.base,
                align,
            });
        }
        device.synchronize()?;
        Ok(DeviceArena {
            device: device.clone(),
            layout,
            memory,
            len,
            bound: Vec::new(),
            salts: Salts::new(),
        })
    }

    /// The arena in an allocation the engine lends (`slice`, of `device`'s context): it must
    /// hold [`Layout::buffer_bytes`] bytes and start on a multiple of
    /// [`Layout::buffer_alignment`]. Its contents are kept (weights loaded already stay);
    /// from now on it is used on the arena's stream, after the work queued on the stream that
    /// used it last. Take it back with [`DeviceArena::into_slice`]. A refused allocation comes
    /// back in the error.
    pub fn in_slice(
        device: &Device,
        layout: Layout,
        slice: CudaSlice<u8>,
    ) -> Result<DeviceArena, Refused> {
        let needed = layout.buffer_bytes();
        let given = slice.num_bytes() as u64;
        let len = match usize::try_from(needed) {
            Ok(len) if given >= needed => len,
            _ => {
                return Err(Refused {
                    error: DeviceError::TooSmall { needed, given },
                    slice,
                });
            }
        };
        let b = DeviceBuffer::adopt(device, slice)?;
        let align = layout.buffer_alignment();
        if !b.base.is_multiple_of(align) {
            return Err(Refused {
                error: DeviceError::Misaligned {
                    region: Region::Arena,
                    address: b.base,
                    align,
                },
                slice: b.slice,
            });
        }
        Ok(DeviceArena {
            device: device.clone(),
            layout,
            memory: Some(b),
            len,
            bound: Vec::new(),
            salts: Salts::new(),
        })
    }

    /// Waits for every use of the arena's memory on its stream, then gives back its
    /// allocation (the one lent with [`DeviceArena::in_slice`], or the arena's own), contents
    /// kept; `None` for a layout of no bytes. Buffers still bound to the caller's tensors are
    /// freed: take them back first with [`DeviceArena::unbind`].
    pub fn into_slice(mut self) -> Result<Option<CudaSlice<u8>>, DeviceError> {
        self.device.synchronize()?;
        Ok(self.memory.take().map(|b| b.slice))
    }

    /// Gives `slice` (of the arena's context) to tensor `t`, which the layout leaves to the
    /// caller ([`Placement::Caller`]): it must hold the tensor's bytes and start on the
    /// element's alignment. Returns the allocation bound before, if any, once the arena's
    /// stream is done with it; a refused allocation comes back in the error.
    pub fn bind(
        &mut self,
        t: TensorId,
        slice: CudaSlice<u8>,
    ) -> Result<Option<CudaSlice<u8>>, Refused> {
        let b = DeviceBuffer::adopt(&self.device, slice)?;
        if let Err(e) = self.layout.check_binding(t, b.capacity(), b.base) {
            return Err(Refused {
                error: e.into(),
                slice: b.slice,
            });
        }
        let old = match self.bound.binary_search_by_key(&t, |x| x.0) {
            Ok(i) => Some(std::mem::replace(&mut self.bound[i].1, b)),
            Err(i) => {
                self.bound.insert(i, (t, b));
                None
            }
        };
        match old {
            Some(old) => match self.device.synchronize() {
                Ok(()) => Ok(Some(old.slice)),
                Err(error) => Err(Refused {
                    error,
                    slice: old.slice,
                }),
            },
            None => Ok(None),
        }
    }

    /// Takes back the allocation bound to `t`, if one is, once the arena's stream is done
    /// with it.
    pub fn unbind(&mut self, t: TensorId) -> Result<Option<CudaSlice<u8>>, DeviceError> {
        let Ok(i) = self.bound.binary_search_by_key(&t, |x| x.0) else {
            return Ok(None);
        };
        self.device.synchronize()?;
        Ok(Some(self.bound.remove(i).1.slice))
    }

    /// Waits for every use of this arena's memory on its stream, then gives the buffers back
    /// to `pool` and returns the layout. If the wait fails, the buffers are not pooled (their
    /// state is unknown) and the error is returned.
    pub fn release(mut self, pool: &mut DevicePool) -> Result<Layout, DeviceError> {
        self.device.synchronize()?;
        if let Some(b) = self.memory.take() {
            pool.give(b);
        }
        Ok(self.layout.clone())
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Device bytes of the arena's allocation (the layout's buffer, or the larger pooled or
    /// lent allocation it lives in).
    pub fn allocated_bytes(&self) -> u64 {
        self.memory.as_ref().map_or(0, PoolBuffer::capacity)
    }

    /// The device address of `[offset, offset + bytes)` of `region`, bound-checked against
    /// the region and the allocation.
    fn address(
        &self,
        region: Region,
        offset: u64,
        bytes: u64,
    ) -> Result<(CUdeviceptr, usize), DeviceError> {
        let len = usize::try_from(bytes).map_err(|_| DeviceError::TooLarge(bytes))?;
        let end = offset
            .checked_add(bytes)
            .ok_or(DeviceError::TooLarge(bytes))?;
        let start = self.layout.region_start(region);
        let region_end = start
            .checked_add(self.layout.region_bytes(region))
            .ok_or(DeviceError::TooLarge(start))?;
        if end > self.layout.region_bytes(region) || region_end > self.len as u64 {
            return Err(DeviceError::TooLarge(end));
        }
        let base = self.memory.as_ref().map_or(0, |b| b.base);
        let at = base
            .checked_add(start)
            .and_then(|a| a.checked_add(offset))
            .ok_or(DeviceError::TooLarge(offset))?;
        Ok((at, len))
    }

    /// Tensor `t`'s device address and bytes: in a region, or in the allocation bound to it.
    fn locate(&self, t: TensorId) -> Result<(CUdeviceptr, usize), DeviceError> {
        match self.layout.placement(t) {
            Some(Placement::Region(slot)) => {
                if slot.rows > 1 {
                    return Err(ViewError::Strided(t).into());
                }
                self.address(slot.region, slot.offset, slot.bytes)
            }
            Some(Placement::Caller { bytes, .. }) => {
                let i = self
                    .bound
                    .binary_search_by_key(&t, |x| x.0)
                    .map_err(|_| ViewError::Unbound(t))?;
                let len = usize::try_from(bytes).map_err(|_| DeviceError::TooLarge(bytes))?;
                Ok((self.bound[i].1.base, len))
            }
            _ => Err(ViewError::NotPlaced(t).into()),
        }
    }

    /// Tensor `t`'s address and element count as `[T]`, checked (dtype, whole elements,
    /// alignment; see [`Layout::view`]).
    fn typed<T: Element>(&self, t: TensorId) -> Result<(CUdeviceptr, usize), DeviceError> {
        let (ptr, bytes) = self.locate(t)?;
        match self.layout.placement(t) {
            Some(Placement::Region(slot)) => Ok((ptr, ViewDesc::<T>::new(slot)?.len())),
            Some(Placement::Caller { dtype, .. }) if dtype != T::DTYPE => {
                Err(ViewError::DTypeMismatch {
                    tensor: t,
                    stored: dtype,
                    requested: T::DTYPE,
                }
                .into())
            }
            _ if !bytes.is_multiple_of(size_of::<T>()) => Err(ViewError::SizeMismatch {
                tensor: t,
                bytes: bytes as u64,
                element: size_of::<T>() as u64,
            }
            .into()),
            _ => Ok((ptr, bytes / size_of::<T>())),
        }
    }

    /// Tensor `t` as a shared device view of `T` (see [`Layout::view`] for the checks).
    pub fn view<T: Element>(&self, t: TensorId) -> Result<CudaView<'_, T>, DeviceError> {
        let (ptr, len) = self.typed::<T>(t)?;
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
        let (ptr, len) = self.typed::<T>(t)?;
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
        let locate = |ts: &[TensorId]| -> Result<Vec<(TensorId, CUdeviceptr, usize)>, DeviceError> {
            ts.iter()
                .map(|&t| self.locate(t).map(|(p, n)| (t, p, n)))
                .collect()
        };
        let (r, w) = (locate(reads)?, locate(writes)?);
        // Device addresses are one space: ranges of distinct allocations never meet.
        for (i, a) in w.iter().enumerate() {
            let clash = w.iter().skip(i + 1).chain(&r).find(|b| {
                a.1 < b.1.saturating_add(b.2 as u64) && b.1 < a.1.saturating_add(a.2 as u64)
            });
            if let Some(b) = clash {
                return Err(ViewError::Overlap {
                    first: a.0,
                    second: b.0,
                }
                .into());
            }
        }
        let stream = &self.device.stream;
        let out_r = r
            .into_iter()
            .map(|(tensor, ptr, len)| CudaView {
                ptr,
                len,
                tensor,
                stream,
                _marker: PhantomData,
            })
            .collect();
        let out_w = w
            .into_iter()
            .map(|(tensor, ptr, len)| CudaViewMut {
                ptr,
                len,
                tensor,
                stream,
                _marker: PhantomData,
            })
            .collect();
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
        guarded("cuMemcpyHtoD", || stream.memcpy_htod(data, &mut dst))?;
        // The copy may still be reading `data` (pinned or registered host memory is copied
        // asynchronously): wait, so the caller may reuse `data` once this returns.
        self.device.synchronize()
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
        let stored = match self.layout.placement(t) {
            Some(Placement::Region(slot)) => slot.dtype,
            Some(Placement::Caller { dtype, .. }) => dtype,
            _ => return Err(ViewError::NotPlaced(t).into()),
        };
        match stored {
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
        guarded("cuMemcpyHtoD", || stream.memcpy_htod(bytes, &mut dst))?;
        // As in `upload`: the device has read `bytes` before the caller refills them.
        self.device.synchronize()
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

    fn next_salt(&mut self) -> u64 {
        self.salts.next_salt()
    }

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
        pattern_at: u64,
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
            let pat = pattern_at.wrapping_add(done);
            if let Some(m) = verify(&staging, pat, seed).map(|m| m.moved(pat, at)) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn driver(code: sys::cudaError_enum) -> Result<i32, DeviceError> {
        Err(DeviceError::Driver {
            call: "cuDeviceGetCount",
            error: DriverError(code),
        })
    }

    /// Libcuda without a GPU answers `CUDA_ERROR_NO_DEVICE`, which is
    /// zero devices (a clean skip), not a driver failure.
    #[test]
    fn no_device_from_the_driver_is_zero_devices() {
        assert_eq!(count_devices(Ok(2)).unwrap(), 2);
        assert_eq!(
            count_devices(driver(sys::cudaError_enum::CUDA_ERROR_NO_DEVICE)).unwrap(),
            0
        );
        let other = count_devices(driver(sys::cudaError_enum::CUDA_ERROR_UNKNOWN)).unwrap_err();
        assert!(matches!(other, DeviceError::Driver { .. }) && !other.is_unavailable());
        assert!(
            DeviceError::NoDevice {
                ordinal: 0,
                count: 0
            }
            .is_unavailable()
        );
        assert!(DeviceError::NoDriver.is_unavailable());
    }
}
