//! Symmetric buffers: memory allocated at the same offset of every PE's symmetric heap, so a
//! local address also names the corresponding memory of each other PE.
//!
//! A [`SymmetricBuffer`] borrows the [`Nvshmem`] runtime, so it cannot outlive finalize; it is
//! freed on Drop. [`SymView`] is a borrowed sub-range, what the RMA calls take.
//!
//! nvshmem_malloc and nvshmem_free are collective: every PE must allocate and free the same
//! sizes in the same order.

use crate::core::element::Element;
use crate::core::error::{Error, Result};
use crate::core::leak::{self, LiveBuffer};
use crate::core::runtime::Nvshmem;
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
        // nvshmem_malloc waits for every PE inside, without a deadline.
        nv.enter_collective("symmetric allocation")?;
        let elem = std::mem::size_of::<T>();
        let bytes = len.checked_mul(elem).ok_or(Error::AllocFailed {
            bytes: usize::MAX,
            free: 0,
        })?;
        // NVSHMEM does not survive a request its heap cannot grow to (it faults in its own
        // barrier and exits), so refuse what cannot fit before it is asked.
        let (free, _total) = cudarc::driver::result::mem_get_info()?;
        if bytes > free.saturating_add(initial_heap_bytes()) {
            return Err(Error::AllocFailed { bytes, free });
        }
        // SAFETY: NVSHMEM is initialised while `nv` lives; these return null on failure.
        let raw = unsafe {
            match how {
                Alloc::Uninit => sys::nvshmem_malloc(bytes),
                Alloc::Zeroed => sys::nvshmem_calloc(len, elem),
                Alloc::Aligned(align) => {
                    if !align.is_power_of_two() {
                        return Err(Error::InvalidAlignment { align });
                    }
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
        Ok(SymmetricBuffer { ptr, len, nv })
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
        self.as_view().view(index..index + 1)
    }

    /// The runtime this buffer belongs to.
    pub fn runtime(&self) -> &'nv Nvshmem {
        self.nv
    }

    /// Device address of element 0 on this PE (for kernels: it is a plain device pointer).
    pub fn as_device_ptr(&self) -> *mut T {
        self.ptr.as_ptr()
    }

    /// Copies `src` from host memory into this buffer on this PE (synchronous).
    pub fn copy_from_host(&self, src: &[T]) -> Result<()> {
        self.as_view().copy_from_host(src)
    }

    /// Copies this buffer on this PE into `dst` (synchronous).
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        self.as_view().copy_to_host(dst)
    }

    /// This buffer on this PE as a Vec (synchronous).
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.as_view().to_vec()
    }

    /// Sets every byte of this buffer on this PE to zero (synchronous).
    pub fn zero(&self) -> Result<()> {
        self.as_view().zero()
    }

    /// A pointer through which this GPU can load and store `pe`'s copy directly (NVLink or PCIe
    /// peer mapping), or None when `pe` is reachable only through NVSHMEM calls (other nodes).
    pub fn peer_ptr(&self, pe: i32) -> Result<Option<NonNull<T>>> {
        self.nv.check_pe(pe)?;
        // SAFETY: the address is symmetric and NVSHMEM is initialised.
        let p = unsafe { sys::nvshmem_ptr(self.ptr.as_ptr().cast(), pe) };
        Ok(NonNull::new(p.cast::<T>()))
    }
}

// Interop: symmetric memory is ordinary device memory of this PE, so cudarc's copies and kernel
// launches can use it. No synchronisation is attached: ordering against NVSHMEM operations is
// the caller's (stream order, quiet, barriers), as for any device pointer.
impl<T: Element> DeviceSlice<T> for SymmetricBuffer<'_, T> {
    fn len(&self) -> usize {
        self.len
    }
    fn stream(&self) -> &Arc<CudaStream> {
        self.nv.stream()
    }
}

impl<T: Element> DevicePtr<T> for SymmetricBuffer<'_, T> {
    fn device_ptr<'a>(&'a self, _stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
        (self.ptr.as_ptr() as CUdeviceptr, SyncOnDrop::Sync(None))
    }
}

impl<T: Element> DevicePtrMut<T> for SymmetricBuffer<'_, T> {
    fn device_ptr_mut<'a>(&'a mut self, _stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
        (self.ptr.as_ptr() as CUdeviceptr, SyncOnDrop::Sync(None))
    }
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

/// The heap NVSHMEM reserves at init: NVSHMEM_SYMMETRIC_SIZE (NVSHMEM's syntax: a number with an
/// optional k/m/g/t suffix), default 1 GiB.
pub(crate) fn initial_heap_bytes() -> usize {
    std::env::var("NVSHMEM_SYMMETRIC_SIZE")
        .ok()
        .and_then(|v| crate::core::env_value::parse_size(&v))
        .unwrap_or(1 << 30)
}

impl<T: Element> Drop for SymmetricBuffer<'_, T> {
    fn drop(&mut self) {
        // Only free what the registry still holds: finalize may have taken it already.
        if leak::forget(self.ptr.as_ptr() as usize) {
            // nvshmem_free waits for every PE inside, without a deadline: after a peer failure
            // (or when this barrier finds one) the memory stays with the heap instead.
            if self.nv.enter_collective("symmetric free").is_err() {
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

    fn device_address(&self) -> cudarc::driver::sys::CUdeviceptr {
        self.ptr.as_ptr() as cudarc::driver::sys::CUdeviceptr
    }

    /// Copies `src` from host memory into this range on this PE (synchronous).
    pub fn copy_from_host(&self, src: &[T]) -> Result<()> {
        if src.len() != self.len {
            return Err(Error::HostLengthMismatch {
                what: "copy_from_host",
                host: src.len(),
                device: self.len,
            });
        }
        if self.len > 0 {
            // SAFETY: the range is valid device memory of len elements; the runtime made the
            // device's context current on this thread.
            unsafe { cudarc::driver::result::memcpy_htod_sync(self.device_address(), src) }?;
        }
        Ok(())
    }

    /// Copies this range on this PE into `dst` (synchronous).
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        if dst.len() != self.len {
            return Err(Error::HostLengthMismatch {
                what: "copy_to_host",
                host: dst.len(),
                device: self.len,
            });
        }
        if self.len > 0 {
            // SAFETY: as in copy_from_host.
            unsafe { cudarc::driver::result::memcpy_dtoh_sync(dst, self.device_address()) }?;
        }
        Ok(())
    }

    /// This range on this PE as a Vec (synchronous).
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut v = vec![T::default(); self.len];
        self.copy_to_host(&mut v)?;
        Ok(v)
    }

    /// Sets every byte of this range on this PE to zero (synchronous).
    pub fn zero(&self) -> Result<()> {
        if self.len > 0 {
            // SAFETY: valid device range of num_bytes bytes.
            unsafe {
                cudarc::driver::result::memset_d8_sync(self.device_address(), 0, self.num_bytes())
            }?;
        }
        Ok(())
    }
}
