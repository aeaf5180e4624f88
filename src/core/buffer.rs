//! Symmetric buffers: memory allocated at the same offset of every PE's symmetric heap, so a
//! local address also names the corresponding memory of each other PE.
//!
//! A [`SymmetricBuffer`] borrows the [`Nvshmem`] runtime, so it cannot outlive finalize; it is
//! freed on Drop. [`SymView`] is a borrowed sub-range, what the RMA calls take.
//!
//! nvshmem_malloc and nvshmem_free are collective: every PE must allocate and free the same
//! sizes in the same order.
//!
//! # GPU work queued on a buffer
//!
//! Calls that take a view (`put_device`, the `*_on_stream` calls, [`crate::Allreduce::run`],
//! [`crate::Channel::send`]) only enqueue work: the view's borrow ends when they return, while
//! the GPU may still read or write the buffer. So dropping a [`SymmetricBuffer`] first
//! synchronises the runtime's CUDA context (every stream of the device, the caller's included),
//! and only then frees it: the free cannot hand the range to a new allocation while queued work
//! still uses it. A drop therefore waits for all work queued on the device (bounded: the
//! runtime's own waits have deadlines; the caller's kernels are the caller's).
//!
//! Host copies ([`SymView::copy_from_host`], [`SymView::copy_to_host`], [`SymView::zero`]) run on
//! the runtime's stream ([`Nvshmem::stream`]) and synchronise it before they return: the data
//! is on the GPU (or the host) when they return, also from pageable host memory, so work
//! enqueued afterwards on any stream sees it.

use crate::core::element::Element;
use crate::core::env_value::initial_heap_bytes;
use crate::core::error::{Error, Result};
use crate::core::leak::{self, LiveBuffer};
use crate::core::runtime::{Nvshmem, Vote};
use crate::sys;
use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, SyncOnDrop};
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::ptr::NonNull;
use std::sync::Arc;

/// A typed allocation on the symmetric heap of every PE. Freed on Drop (collectively).
pub struct SymmetricBuffer<'nv, T: Element> {
    ptr: NonNull<T>,
    len: usize,
    nv: &'nv Nvshmem,
}

/// A borrowed range of a symmetric buffer: a symmetric address and a length (and the runtime's
/// stream, which cudarc's traits want).
#[derive(Clone, Copy)]
pub struct SymView<'a, T: Element> {
    ptr: NonNull<T>,
    len: usize,
    stream: &'a Arc<CudaStream>,
    _buffer: PhantomData<&'a T>,
}

impl<T: Element> std::fmt::Debug for SymmetricBuffer<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SymmetricBuffer<{}>({:p}, len {})",
            T::NAME,
            self.ptr,
            self.len
        )
    }
}

impl<T: Element> std::fmt::Debug for SymView<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SymView<{}>({:p}, len {})", T::NAME, self.ptr, self.len)
    }
}

/// How to allocate.
pub(crate) enum Alloc {
    Uninit,
    Zeroed,
    Aligned(usize),
}

impl<'nv, T: Element> SymmetricBuffer<'nv, T> {
    pub(crate) fn allocate(nv: &'nv Nvshmem, len: usize, how: Alloc) -> Result<Self> {
        if len == 0 {
            return Err(Error::ZeroLength);
        }
        let elem = std::mem::size_of::<T>();
        let bytes = len.checked_mul(elem).ok_or_else(|| Error::SizeOverflow {
            what: "symmetric allocation",
            detail: format!("{len} x {elem}"),
        })?;
        if let Alloc::Aligned(align) = how {
            if !align.is_power_of_two() {
                return Err(Error::InvalidAlignment { align });
            }
        }
        // The free memory of this PE's GPU, not of whatever device the thread has bound since.
        nv.bind()?;
        // NVSHMEM does not survive a request its heap cannot grow to (it faults in its own
        // barrier and exits), so refuse what cannot fit before it is asked. Every PE learns
        // every other's decision before any enters nvshmem_malloc, which waits for all of them
        // without a deadline: a refusal on one PE is a refusal on all.
        let (free, _total) = cudarc::driver::result::mem_get_info()?;
        let fits = bytes <= free.saturating_add(initial_heap_bytes());
        if let Some((pe, free)) =
            nv.agree_collective("symmetric allocation", Vote::alloc(fits, free))?
        {
            return Err(Error::AllocRefused {
                bytes,
                pe,
                free: free as usize,
            });
        }
        // SAFETY: NVSHMEM is initialised while `nv` lives; these return null on failure.
        let raw = unsafe {
            match how {
                Alloc::Uninit | Alloc::Zeroed => sys::nvshmem_malloc(bytes),
                Alloc::Aligned(align) => {
                    sys::nvshmem_align(align.max(std::mem::align_of::<T>()), bytes)
                }
            }
        };
        let ptr = NonNull::new(raw.cast::<T>()).ok_or(Error::AllocFailed { bytes, free })?;
        leak::record(LiveBuffer {
            address: ptr.as_ptr() as usize,
            len,
            bytes,
            elem: T::NAME,
        });
        let buf = SymmetricBuffer { ptr, len, nv };
        if let Alloc::Zeroed = how {
            // Zeroed by this process's own memset, not nvshmem_calloc's: compute-sanitizer's
            // initcheck does not see calloc's zeroing, and reads of counters and slots that
            // peers fill would all count as uninitialized. Then a barrier, as calloc has: no
            // peer writes into the buffer before every PE has zeroed its copy.
            buf.zero()?;
            nv.barrier_all()?;
        }
        Ok(buf)
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: zero-length allocations are refused.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size in bytes.
    pub fn num_bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// The whole buffer as a view.
    pub fn as_view(&self) -> SymView<'_, T> {
        SymView {
            ptr: self.ptr,
            len: self.len,
            stream: self.nv.stream(),
            _buffer: PhantomData,
        }
    }

    /// A sub-range, checked against the length.
    pub fn view<R: RangeBounds<usize>>(&self, range: R) -> Result<SymView<'_, T>> {
        self.as_view().view(range)
    }

    /// A one-element view (signals, atomics).
    pub fn at(&self, index: usize) -> Result<SymView<'_, T>> {
        // Inclusive: `index + 1` would overflow for usize::MAX (an error, not a panic).
        self.as_view().view(index..=index)
    }

    /// The runtime this buffer belongs to.
    pub fn runtime(&self) -> &'nv Nvshmem {
        self.nv
    }

    /// Device address of element 0 on this PE (for kernels: it is a plain device pointer).
    pub fn as_device_ptr(&self) -> *mut T {
        self.ptr.as_ptr()
    }

    /// Copies `src` from host memory into this buffer on this PE, on the runtime's stream; returns
    /// when the data is on the GPU.
    pub fn copy_from_host(&self, src: &[T]) -> Result<()> {
        self.as_view().copy_from_host(src)
    }

    /// Copies this buffer on this PE into `dst`, on the runtime's stream (after the work queued
    /// there); returns when the data is in `dst`.
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        self.as_view().copy_to_host(dst)
    }

    /// This buffer on this PE as a Vec, as [`SymmetricBuffer::copy_to_host`].
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.as_view().to_vec()
    }

    /// Sets every byte of this buffer on this PE to zero, on the runtime's stream; returns when
    /// it is done (so a barrier after it orders it before peers' puts).
    pub fn zero(&self) -> Result<()> {
        self.as_view().zero()
    }

    /// A pointer through which this GPU can load and store `pe`'s copy directly (NVLink or PCIe
    /// peer mapping), or None when `pe` is reachable only through NVSHMEM calls (other nodes,
    /// pretend ones included: docs/nodes.md).
    pub fn peer_ptr(&self, pe: i32) -> Result<Option<NonNull<T>>> {
        self.nv.check_pe(pe)?;
        if !self.nv.may_map(pe) {
            // A peer on another pretend node (crate::core::node).
            return Ok(None);
        }
        // SAFETY: the address is symmetric and NVSHMEM is initialised.
        let p = unsafe { sys::nvshmem_ptr(self.ptr.as_ptr().cast(), pe) };
        Ok(NonNull::new(p.cast::<T>()))
    }
}

/// cudarc interop for a buffer type with `ptr: NonNull<T>`, `len` and `nv: &Nvshmem`: its memory
/// is ordinary device memory of this PE, so cudarc's copies and kernel launches can use it. No
/// synchronisation is attached: ordering against NVSHMEM operations is the caller's (stream
/// order, quiet, barriers), as for any device pointer.
macro_rules! device_interop {
    ($buffer:ident) => {
        impl<T: Element> cudarc::driver::DeviceSlice<T> for $buffer<'_, T> {
            fn len(&self) -> usize {
                self.len
            }
            fn stream(&self) -> &std::sync::Arc<cudarc::driver::CudaStream> {
                self.nv.stream()
            }
        }

        impl<T: Element> cudarc::driver::DevicePtr<T> for $buffer<'_, T> {
            fn device_ptr<'a>(
                &'a self,
                _stream: &'a cudarc::driver::CudaStream,
            ) -> (
                cudarc::driver::sys::CUdeviceptr,
                cudarc::driver::SyncOnDrop<'a>,
            ) {
                (
                    self.ptr.as_ptr() as cudarc::driver::sys::CUdeviceptr,
                    cudarc::driver::SyncOnDrop::Sync(None),
                )
            }
        }

        impl<T: Element> cudarc::driver::DevicePtrMut<T> for $buffer<'_, T> {
            fn device_ptr_mut<'a>(
                &'a mut self,
                _stream: &'a cudarc::driver::CudaStream,
            ) -> (
                cudarc::driver::sys::CUdeviceptr,
                cudarc::driver::SyncOnDrop<'a>,
            ) {
                (
                    self.ptr.as_ptr() as cudarc::driver::sys::CUdeviceptr,
                    cudarc::driver::SyncOnDrop::Sync(None),
                )
            }
        }
    };
}
pub(crate) use device_interop;

device_interop!(SymmetricBuffer);

/// Copies `src` into `len` elements of device memory at `addr` (of the bound context) on
/// `stream`, and waits, so that the caller may reuse `src` and later work on any stream sees the
/// data (pageable memory too).
pub(crate) fn host_to_device<T: Element>(
    stream: &Arc<CudaStream>,
    addr: CUdeviceptr,
    len: usize,
    src: &[T],
) -> Result<()> {
    if src.len() != len {
        return Err(Error::HostLengthMismatch {
            what: "copy_from_host",
            host: src.len(),
            device: len,
        });
    }
    if len > 0 {
        // SAFETY: the caller's addr holds len elements of device memory of the bound context;
        // `src` stays borrowed until the stream is synchronised below.
        unsafe { cudarc::driver::result::memcpy_htod_async(addr, src, stream.cu_stream()) }?;
        stream.synchronize()?;
    }
    Ok(())
}

/// Copies `len` elements of device memory at `addr` into `dst` on `stream` (after the work
/// queued there), and waits.
pub(crate) fn device_to_host<T: Element>(
    stream: &Arc<CudaStream>,
    addr: CUdeviceptr,
    len: usize,
    dst: &mut [T],
) -> Result<()> {
    if dst.len() != len {
        return Err(Error::HostLengthMismatch {
            what: "copy_to_host",
            host: dst.len(),
            device: len,
        });
    }
    if len > 0 {
        // SAFETY: as in host_to_device; `dst` stays borrowed until the synchronise below.
        unsafe { cudarc::driver::result::memcpy_dtoh_async(dst, addr, stream.cu_stream()) }?;
        stream.synchronize()?;
    }
    Ok(())
}

impl<T: Element> DeviceSlice<T> for SymView<'_, T> {
    fn len(&self) -> usize {
        self.len
    }
    fn stream(&self) -> &Arc<CudaStream> {
        self.stream
    }
}

impl<T: Element> DevicePtr<T> for SymView<'_, T> {
    fn device_ptr<'a>(&'a self, _stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
        (self.ptr.as_ptr() as CUdeviceptr, SyncOnDrop::Sync(None))
    }
}

impl<T: Element> DevicePtrMut<T> for SymView<'_, T> {
    fn device_ptr_mut<'a>(&'a mut self, _stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
        (self.ptr.as_ptr() as CUdeviceptr, SyncOnDrop::Sync(None))
    }
}

// The allocation calls of the runtime handle live beside the buffer they make, so that the
// runtime needs nothing of this module.
impl Nvshmem {
    /// Allocates `len` elements on every PE's symmetric heap (collective: every PE must call it
    /// with the same length, in the same order). Contents are undefined.
    pub fn alloc<T: Element>(&self, len: usize) -> Result<SymmetricBuffer<'_, T>> {
        SymmetricBuffer::allocate(self, len, Alloc::Uninit)
    }

    /// Like [`Nvshmem::alloc`], zero-filled on every PE before any PE returns (collective).
    pub fn alloc_zeroed<T: Element>(&self, len: usize) -> Result<SymmetricBuffer<'_, T>> {
        SymmetricBuffer::allocate(self, len, Alloc::Zeroed)
    }

    /// Like [`Nvshmem::alloc`], aligned to `align` bytes (a power of two; nvshmem_align).
    pub fn alloc_aligned<T: Element>(
        &self,
        len: usize,
        align: usize,
    ) -> Result<SymmetricBuffer<'_, T>> {
        SymmetricBuffer::allocate(self, len, Alloc::Aligned(align))
    }
}

impl<T: Element> Drop for SymmetricBuffer<'_, T> {
    fn drop(&mut self) {
        // Only free what the registry still holds: finalize may have taken it already.
        if leak::forget(self.ptr.as_ptr() as usize) {
            // Queued work on any stream may still use the range (module documentation): let it
            // finish before the range can be handed out again.
            // A PE that cannot synchronise votes no: then no PE frees (heaps stay in step).
            let vote = match self.nv.context().synchronize() {
                Ok(()) => Vote::Yes,
                Err(e) => {
                    log::warn!(
                        "PE {}: synchronising before a symmetric free failed ({e}); the buffer \
                         is not freed on any PE (NVSHMEM releases it with the heap)",
                        self.nv.my_pe()
                    );
                    Vote::No(0)
                }
            };
            // nvshmem_free waits for every PE inside, without a deadline: after a peer failure
            // (or when this barrier finds one) the memory stays with the heap instead.
            if self.nv.enter_collective("symmetric free", vote).is_err() {
                return;
            }
            // SAFETY: allocated by nvshmem_malloc/calloc/align and not freed yet.
            unsafe { sys::nvshmem_free(self.ptr.as_ptr().cast()) };
        }
    }
}

impl<'a, T: Element> From<&'a SymmetricBuffer<'_, T>> for SymView<'a, T> {
    fn from(buffer: &'a SymmetricBuffer<'_, T>) -> Self {
        buffer.as_view()
    }
}

impl<'a, T: Element> From<&SymView<'a, T>> for SymView<'a, T> {
    fn from(view: &SymView<'a, T>) -> Self {
        *view
    }
}

impl<'a, T: Element> SymView<'a, T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty range.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size in bytes.
    pub fn num_bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// Symmetric device address of the first element on this PE.
    pub fn as_device_ptr(&self) -> *mut T {
        self.ptr.as_ptr()
    }

    /// A sub-range of this view, checked.
    pub fn view<R: RangeBounds<usize>>(&self, range: R) -> Result<SymView<'a, T>> {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.saturating_add(1),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => self.len,
        };
        if start > end || end > self.len {
            return Err(Error::OutOfBounds {
                start,
                end,
                len: self.len,
                elem: T::NAME,
            });
        }
        Ok(SymView {
            // SAFETY: start <= len, so the offset stays inside (or one past) the allocation.
            ptr: unsafe { NonNull::new_unchecked(self.ptr.as_ptr().add(start)) },
            len: end - start,
            stream: self.stream,
            _buffer: PhantomData,
        })
    }

    /// A view of `len` elements from `ptr`, which must lie in the symmetric heap.
    ///
    /// # Safety
    /// `ptr .. ptr + len` is inside one symmetric allocation that outlives every use of the
    /// view (the lifetime is the caller's promise), and `ptr` is aligned for `T`.
    pub(crate) unsafe fn from_raw(
        ptr: NonNull<T>,
        len: usize,
        stream: &'a Arc<CudaStream>,
    ) -> SymView<'a, T> {
        SymView {
            ptr,
            len,
            stream,
            _buffer: PhantomData,
        }
    }

    /// Makes the runtime's context current on this thread (the caller may have bound another).
    fn bind(&self) -> Result<()> {
        self.stream.context().bind_to_thread()?;
        Ok(())
    }

    fn device_address(&self) -> cudarc::driver::sys::CUdeviceptr {
        self.ptr.as_ptr() as cudarc::driver::sys::CUdeviceptr
    }

    /// Copies `src` from host memory into this range on this PE, on the runtime's stream; returns
    /// when the data is on the GPU (pageable memory too), so later work on any stream sees it.
    pub fn copy_from_host(&self, src: &[T]) -> Result<()> {
        self.bind()?;
        host_to_device(self.stream, self.device_address(), self.len, src)
    }

    /// Copies this range on this PE into `dst`, on the runtime's stream (after the work queued
    /// there); returns when the data is in `dst`.
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        self.bind()?;
        device_to_host(self.stream, self.device_address(), self.len, dst)
    }

    /// This range on this PE as a Vec, as [`SymView::copy_to_host`].
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut v = vec![T::default(); self.len];
        self.copy_to_host(&mut v)?;
        Ok(v)
    }

    /// Sets every byte of this range on this PE to zero, on the runtime's stream; returns when it
    /// is done.
    pub fn zero(&self) -> Result<()> {
        if self.len > 0 {
            self.bind()?;
            // SAFETY: valid device range of num_bytes bytes on the context just bound.
            unsafe {
                cudarc::driver::result::memset_d8_async(
                    self.device_address(),
                    0,
                    self.num_bytes(),
                    self.stream.cu_stream(),
                )
            }?;
            self.stream.synchronize()?;
        }
        Ok(())
    }
}
