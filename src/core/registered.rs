//! The caller's own device memory made symmetric without a copy: NVSHMEM's symmetric buffer
//! registration, the zero-copy alternative to staging ([`crate::proto::staging`]).
//!
//! [`Nvshmem::alloc_registrable`] allocates this PE's memory the way NVSHMEM's heap is
//! allocated (local, not collective); [`Nvshmem::register_symmetric`] maps it into the
//! symmetric heap on every PE (collective) and gives a [`Registered`] buffer: a second,
//! symmetric address of the same physical memory, which converts into a [`SymView`] and so goes
//! to every collective as it is, with nothing staged. Dropping it unregisters (collective).
//! Registration is an explicit, one-time step for buffers reused across many calls (as NCCL's
//! window registration): it is collective and costly, so `InBuf` / `OutBuf` never register on
//! their own; memory that is not registered is staged.
//!
//! # What NVSHMEM 3.4.5 requires (read in its source, tag v3.4.5-0 of NVIDIA/nvshmem)
//!
//! - `void *nvshmemx_buffer_register_symmetric(void *buf_ptr, size_t size, int flags)` and
//!   `int nvshmemx_buffer_unregister_symmetric(void *mmap_ptr, size_t size)`
//!   (`src/include/host/nvshmemx_api.h`, installed as `include/host/nvshmemx_api.h`; bindgen
//!   exposes both through the `nvshmemx_.*` allow-list). Both are collective over all PEs
//!   (`src/host/mem/mem_heap.cpp`: register ends in `nvshmemi_barrier_all`, and the handle
//!   exchange inside is a bootstrap allgather; unregister starts with `nvshmemi_barrier_all`),
//!   and wait without a deadline.
//! - Only the VMM heap implements it (`nvshmemi_symmetric_heap_vidmem_dynamic_vmm::mmap_mem`);
//!   the static heap (`NVSHMEM_DISABLE_CUDA_VMM=1`) has `assert(0); return NULL`
//!   (`src/include/internal/host/nvshmemi_symmetric_heap.hpp`).
//! - `check_user_buffer_for_mmap` (`mem_heap.cpp`): `size` non-zero; `cuMemRetainAllocationHandle`
//!   must succeed (memory from `cuMemCreate` + `cuMemMap`, not `cudaMalloc` or stream-ordered
//!   pools); memory type device (or host for EGM) on NVSHMEM's GPU; `requestedHandleTypes`
//!   equal to the heap's (POSIX file descriptor on one node, FABRIC on multi-node NVLink, or
//!   `NVSHMEM_CUMEM_HANDLE_TYPE`); with `NVSHMEM_ENABLE_ERROR_CHECKS`, every PE's size equal and
//!   no PE of the node on PE 0's device ordinal. A size that is not a multiple of the heap's
//!   granularity is rounded up, and that many bytes of the allocation are then mapped:
//!   `max(NVSHMEM_CUMEM_GRANULARITY (default 512 MiB), the recommended granularity)`, at most
//!   2 GiB. `flags` must be 0.
//! - `mmap_mem` maps the allocation from offset 0 (`cuMemMap(.., mmap_offset = 0, ..)`), so
//!   `buf_ptr` must be the start of a `cuMemCreate` allocation of at least the rounded size,
//!   mapped with read-write access for the GPU (`cuMemGetAccess` is copied). It places the
//!   mapping at the top of the heap's address range, growing down; the range (NVSHMEM's
//!   `NVSHMEM_MAX_MEMORY_PER_GPU`, default 128 GiB) must hold the heap's own memory and every
//!   registration.
//! - The return value is the symmetric address (the same on every PE), or NULL on failure.
//!   On a failure inside `mmap_mem` NVSHMEM calls `cleanup_symmetric_heap()`, which unmaps the
//!   whole heap; a failure in the checks above can even loop (its `out:` label releases a
//!   handle it never retained and jumps back to itself on the error). So nothing is passed to
//!   NVSHMEM that its checks would refuse: every condition is checked here first, on every PE,
//!   and the PEs agree before any calls it ([`crate::Error::NotRegistrable`]). A NULL after
//!   that leaves the runtime unusable ([`crate::Error::RegistrationFailed`]).
//! - Unregistration (`unmap_mem`) takes the address and size registered, unmaps it on every
//!   PE and releases the handle NVSHMEM retained: the memory stays the caller's, to free after.
//!   `nvshmem_finalize` unmaps whatever is still registered.
//!
//! The physical memory is the same for both addresses, so the caller's kernels may keep using
//! [`RegistrableBuffer`]'s own address, ordered with the collectives on streams as usual.
//!
#![doc = include_str!("../../docs/registration.md")]

use crate::core::buffer::{device_interop, device_to_host, host_to_device, SymView};
use crate::core::element::Element;
use crate::core::env_value::{parse_bool, parse_size};
use crate::core::error::{Error, Result};
use crate::core::outside::{InBuf, OutBuf};
use crate::core::runtime::{Nvshmem, Vote};
pub use crate::core::unregistrable::Unregistrable;
use crate::sys;
use cudarc::driver::sys::{self as cu, CUdeviceptr, CUmemAllocationProp};
use std::marker::PhantomData;
use std::ops::RangeBounds;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

/// NVSHMEM's default `NVSHMEM_CUMEM_GRANULARITY` (`src/include/host/env/env_defs.h`).
pub const DEFAULT_CUMEM_GRANULARITY: usize = 1 << 29;
/// NVSHMEM's cap on its granularity (`NVSHMEMI_MAX_HANDLE_LENGTH`).
const MAX_GRANULARITY: usize = 1 << 31;
/// NVSHMEM's default `NVSHMEM_MAX_MEMORY_PER_GPU`: the heap's address range.
const DEFAULT_MAX_MEMORY_PER_GPU: usize = 128 << 30;

/// Bytes this process has registered and not unregistered (one runtime per process).
static REGISTERED_BYTES: AtomicUsize = AtomicUsize::new(0);

/// This PE's device memory allocated as NVSHMEM allocates its heap (CUDA VMM, the heap's
/// handle type and flags, a multiple of its granularity), so that
/// [`Nvshmem::register_symmetric`] can map it into the symmetric heap. Until then (and after)
/// it is ordinary device memory of this PE; collectives stage it like any own memory. Freed on
/// Drop (locally, after the device's queued work).
pub struct RegistrableBuffer<'nv, T: Element> {
    ptr: NonNull<T>,
    len: usize,
    /// Bytes allocated and mapped: the length rounded up to the granularity.
    mapped: usize,
    handle: cu::CUmemGenericAllocationHandle,
    nv: &'nv Nvshmem,
}

/// A [`RegistrableBuffer`] (or raw VMM memory) registered into the symmetric heap on every
/// PE: a symmetric address of the same memory, which every collective takes as a [`SymView`]
/// without staging. Unregistered on Drop (collective, after the device's queued work).
pub struct Registered<'b, T: Element> {
    ptr: NonNull<T>,
    len: usize,
    /// Bytes registered (a multiple of the granularity).
    bytes: usize,
    nv: &'b Nvshmem,
    _memory: PhantomData<&'b [T]>,
}

impl<T: Element> std::fmt::Debug for RegistrableBuffer<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RegistrableBuffer<{}>({:p}, len {}, mapped {})",
            T::NAME,
            self.ptr,
            self.len,
            self.mapped
        )
    }
}

impl<T: Element> std::fmt::Debug for Registered<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Registered<{}>({:p}, len {}, bytes {})",
            T::NAME,
            self.ptr,
            self.len,
            self.bytes
        )
    }
}

/// A refusal with what this PE knows about it.
type Refused = (Unregistrable, String);

/// The allocation properties of NVSHMEM's heap, read from one of its allocations (the
/// runtime's own vote slots), or why there are none.
fn heap_props(nv: &Nvshmem) -> std::result::Result<CUmemAllocationProp, Refused> {
    let heap = nv.waits.arrivals.cast::<std::ffi::c_void>();
    let mut handle: cu::CUmemGenericAllocationHandle = 0;
    // SAFETY: a query; writes the handle only on success.
    let r = unsafe { cu::cuMemRetainAllocationHandle(&mut handle, heap) };
    if r != cu::CUresult::CUDA_SUCCESS {
        return Err((
            Unregistrable::HeapNotVmm,
            format!(
                "{} (cuMemRetainAllocationHandle on the heap: {r:?})",
                Unregistrable::HeapNotVmm.reason()
            ),
        ));
    }
    let props = allocation_props(handle);
    // SAFETY: releases the reference retained above (the heap keeps its own).
    unsafe { cu::cuMemRelease(handle) };
    props.map_err(|r| {
        (
            Unregistrable::HeapNotVmm,
            format!("the heap's allocation properties cannot be read ({r:?})"),
        )
    })
}

/// The properties `handle` was created with.
fn allocation_props(
    handle: cu::CUmemGenericAllocationHandle,
) -> std::result::Result<CUmemAllocationProp, cu::CUresult> {
    // SAFETY: a plain C struct of integers and a null pointer; all zeros is valid.
    let mut props: CUmemAllocationProp = unsafe { std::mem::zeroed() };
    // SAFETY: `handle` is a live allocation handle; the call writes `props`.
    let r = unsafe { cu::cuMemGetAllocationPropertiesFromHandle(&mut props, handle) };
    if r == cu::CUresult::CUDA_SUCCESS {
        Ok(props)
    } else {
        Err(r)
    }
}

/// NVSHMEM's heap granularity for allocations with `props` (module documentation): what a
/// registered size must be a multiple of.
fn granularity(props: &CUmemAllocationProp) -> Result<usize> {
    let mut recommended = 0usize;
    // SAFETY: `props` is a valid property struct; the call writes one size.
    unsafe {
        cu::cuMemGetAllocationGranularity(
            &mut recommended,
            props,
            cu::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
        )
    }
    .result()?;
    let asked = std::env::var("NVSHMEM_CUMEM_GRANULARITY")
        .ok()
        .and_then(|v| parse_size(&v))
        .unwrap_or(DEFAULT_CUMEM_GRANULARITY);
    Ok(asked.max(recommended).min(MAX_GRANULARITY))
}

/// Whether NVSHMEM runs its optional symmetry checks (`NVSHMEM_ENABLE_ERROR_CHECKS`).
fn error_checks_on() -> bool {
    std::env::var("NVSHMEM_ENABLE_ERROR_CHECKS")
        .ok()
        .and_then(|v| parse_bool(&v))
        .unwrap_or(false)
}

/// Every condition NVSHMEM's registration puts on `bytes` at `addr` that this PE can check
/// alone (module documentation).
fn local_check(nv: &Nvshmem, addr: usize, bytes: usize) -> std::result::Result<(), Refused> {
    let heap = heap_props(nv)?;
    let gran = granularity(&heap).map_err(|e| (Unregistrable::HeapNotVmm, e.to_string()))?;
    if bytes == 0 || bytes % gran != 0 {
        return Err((
            Unregistrable::Granularity,
            format!(
                "{bytes} bytes is not a positive multiple of NVSHMEM's heap granularity {gran} \
                 (NVSHMEM_CUMEM_GRANULARITY); Nvshmem::alloc_registrable rounds up to it"
            ),
        ));
    }
    let mut handle: cu::CUmemGenericAllocationHandle = 0;
    // SAFETY: a query; writes the handle only on success.
    let r = unsafe { cu::cuMemRetainAllocationHandle(&mut handle, addr as *mut std::ffi::c_void) };
    if r != cu::CUresult::CUDA_SUCCESS {
        return Err((
            Unregistrable::NotVmm,
            format!(
                "the memory at {addr:#x} is not a CUDA VMM allocation (cuMemRetainAllocationHandle: \
                 {r:?}); cudaMalloc, cuMemAllocAsync and cudarc allocate such memory"
            ),
        ));
    }
    let props = allocation_props(handle);
    // SAFETY: releases the reference retained above.
    unsafe { cu::cuMemRelease(handle) };
    let props = props.map_err(|r| {
        (
            Unregistrable::NotVmm,
            format!("its allocation properties cannot be read ({r:?})"),
        )
    })?;
    let (kind, ordinal) = pointer_place(addr);
    if kind != Some(cu::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32) || ordinal != Some(nv.device()) {
        return Err((
            Unregistrable::OtherGpu,
            format!(
                "the memory at {addr:#x} is not device memory of GPU {} (memory type {kind:?}, \
                 GPU {ordinal:?})",
                nv.device()
            ),
        ));
    }
    if props.requestedHandleTypes != heap.requestedHandleTypes {
        return Err((
            Unregistrable::HandleType,
            format!(
                "the allocation's shareable handle type is {:?}, NVSHMEM's heap's is {:?}; \
                 allocate with Nvshmem::alloc_registrable, which copies the heap's properties",
                props.requestedHandleTypes, heap.requestedHandleTypes
            ),
        ));
    }
    let mut access: std::ffi::c_ulonglong = 0;
    // SAFETY: a query for the heap's own location (this PE's GPU); writes one value.
    let r = unsafe { cu::cuMemGetAccess(&mut access, &heap.location, addr as CUdeviceptr) };
    let read_write = cu::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE as u64;
    if r != cu::CUresult::CUDA_SUCCESS || access != read_write {
        return Err((
            Unregistrable::NoAccess,
            format!("this GPU's access to {addr:#x} is {access} ({r:?}), not read-write"),
        ));
    }
    // The heap's own memory is at most what this GPU has in use (its peers' on a shared GPU
    // and the registered memory count too: an over-estimate, never an under-estimate).
    let (free, total) = cudarc::driver::result::mem_get_info().map_err(|e| {
        (
            Unregistrable::HeapFull,
            format!("this GPU's free memory cannot be read ({e})"),
        )
    })?;
    let range = std::env::var("NVSHMEM_MAX_MEMORY_PER_GPU")
        .ok()
        .and_then(|v| parse_size(&v))
        .unwrap_or(DEFAULT_MAX_MEMORY_PER_GPU);
    let taken = (total - free)
        .saturating_add(REGISTERED_BYTES.load(Ordering::Relaxed))
        .saturating_add(bytes);
    if taken >= range {
        return Err((
            Unregistrable::HeapFull,
            format!(
                "{} ({} bytes in use on this GPU, {} registered, {bytes} asked, {range} in the \
                 range)",
                Unregistrable::HeapFull.reason(),
                total - free,
                REGISTERED_BYTES.load(Ordering::Relaxed)
            ),
        ));
    }
    Ok(())
}

/// The memory type and device ordinal of the byte at `addr` (None where the driver does not
/// say).
fn pointer_place(addr: usize) -> (Option<u32>, Option<i32>) {
    let mut kind: u32 = 0;
    let mut ordinal: i32 = -1;
    // SAFETY: queries of the driver's tables; each writes one value of the attribute's type.
    let (rk, ro) = unsafe {
        (
            cu::cuPointerGetAttribute(
                (&mut kind as *mut u32).cast(),
                cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                addr as CUdeviceptr,
            ),
            cu::cuPointerGetAttribute(
                (&mut ordinal as *mut i32).cast(),
                cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                addr as CUdeviceptr,
            ),
        )
    };
    let ok = cu::CUresult::CUDA_SUCCESS;
    ((rk == ok).then_some(kind), (ro == ok).then_some(ordinal))
}

impl Nvshmem {
    /// `len` elements of this PE's device memory that [`Nvshmem::register_symmetric`] can map
    /// into the symmetric heap: allocated as NVSHMEM allocates its heap (`cuMemCreate` with
    /// the heap's properties, mapped read-write for this GPU), the length rounded up to
    /// [`Nvshmem::registration_granularity`] (512 MiB unless NVSHMEM_CUMEM_GRANULARITY says
    /// otherwise). Local: not collective. [`Error::NotRegistrable`] when the heap is not
    /// CUDA VMM memory (NVSHMEM_DISABLE_CUDA_VMM=1).
    pub fn alloc_registrable<T: Element>(&self, len: usize) -> Result<RegistrableBuffer<'_, T>> {
        const WHAT: &str = "registrable allocation";
        if len == 0 {
            return Err(Error::ZeroLength);
        }
        let elem = std::mem::size_of::<T>();
        let overflow = || Error::SizeOverflow {
            what: WHAT,
            detail: format!("{len} x {elem}"),
        };
        let bytes = len.checked_mul(elem).ok_or_else(overflow)?;
        self.bind()?;
        let props = heap_props(self).map_err(|(reason, why)| Error::NotRegistrable {
            what: WHAT,
            pe: self.my_pe(),
            reason,
            why,
        })?;
        let gran = granularity(&props)?;
        let mapped = bytes.checked_next_multiple_of(gran).ok_or_else(overflow)?;
        let mut handle: cu::CUmemGenericAllocationHandle = 0;
        // SAFETY: `props` is the heap's own property struct; writes the handle on success.
        unsafe { cu::cuMemCreate(&mut handle, mapped, &props, 0) }.result()?;
        let mut va: CUdeviceptr = 0;
        // SAFETY: reserves address space only; writes the address on success.
        let mapped_at = unsafe { cu::cuMemAddressReserve(&mut va, mapped, gran, 0, 0) }
            .result()
            .and_then(|()| {
                // SAFETY: the reservation and the handle just made, both of `mapped` bytes.
                unsafe { cu::cuMemMap(va, mapped, 0, handle, 0) }.result()
            });
        let access = cu::CUmemAccessDesc {
            location: props.location,
            flags: cu::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        let ready = mapped_at.and_then(|()| {
            // SAFETY: the range just mapped; one descriptor.
            unsafe { cu::cuMemSetAccess(va, mapped, &access, 1) }.result()
        });
        let ptr = NonNull::new(va as *mut T);
        match (ready, ptr) {
            (Ok(()), Some(ptr)) => Ok(RegistrableBuffer {
                ptr,
                len,
                mapped,
                handle,
                nv: self,
            }),
            (r, _) => {
                // SAFETY: undoes what succeeded above (each call fails harmlessly on what was
                // not done: an unmapped or unreserved range).
                unsafe {
                    if va != 0 {
                        cu::cuMemUnmap(va, mapped);
                        cu::cuMemAddressFree(va, mapped);
                    }
                    cu::cuMemRelease(handle);
                }
                r?;
                Err(Error::Driver {
                    message: "cuMemAddressReserve returned address 0".into(),
                })
            }
        }
    }

    /// The multiple of bytes a registered size must be (NVSHMEM's heap granularity:
    /// max(NVSHMEM_CUMEM_GRANULARITY, default 512 MiB; the driver's recommended granularity),
    /// at most 2 GiB). [`Error::NotRegistrable`] when the heap is not CUDA VMM memory.
    pub fn registration_granularity(&self) -> Result<usize> {
        self.bind()?;
        let props = heap_props(self).map_err(|(reason, why)| Error::NotRegistrable {
            what: "registration granularity",
            pe: self.my_pe(),
            reason,
            why,
        })?;
        granularity(&props)
    }

    /// Registers `buf` into the symmetric heap on every PE: the result is a symmetric address
    /// of the same memory, which every collective takes as a [`SymView`] without staging.
    /// Collective over the world: every PE at the same point, each with a buffer of the same
    /// mapped size. Every condition NVSHMEM puts on it is checked on every PE first (module
    /// documentation), and the PEs agree before NVSHMEM is called: one PE's refusal is
    /// [`Error::NotRegistrable`] on every PE, with nothing registered. Unregistered (again
    /// collectively) when the result is dropped; `buf` cannot be freed before.
    pub fn register_symmetric<'b, T: Element>(
        &'b self,
        buf: &'b RegistrableBuffer<'_, T>,
    ) -> Result<Registered<'b, T>> {
        self.register_span(buf.ptr.as_ptr() as usize, buf.len, buf.mapped)
    }

    /// [`Nvshmem::register_symmetric`] for memory the caller allocated with the CUDA VMM API:
    /// `len` elements from `ptr`, of which `bytes` (a multiple of
    /// [`Nvshmem::registration_granularity`], at least `len` elements) are registered.
    /// Memory of another kind (cudaMalloc, cuMemAllocAsync, cudarc) is refused on every PE
    /// with [`Error::NotRegistrable`].
    ///
    /// # Safety
    /// `ptr` is the start of a `cuMemCreate` allocation of at least `bytes` bytes, mapped at
    /// offset 0 over `bytes` bytes (NVSHMEM maps the allocation's handle from offset 0: an
    /// address inside an allocation would register other memory than `ptr`'s), and it stays
    /// allocated and mapped until the result is dropped.
    pub unsafe fn register_symmetric_raw<T: Element>(
        &self,
        ptr: *mut T,
        len: usize,
        bytes: usize,
    ) -> Result<Registered<'_, T>> {
        let need =
            len.checked_mul(std::mem::size_of::<T>())
                .ok_or_else(|| Error::SizeOverflow {
                    what: "symmetric registration",
                    detail: format!("{len} x {}", std::mem::size_of::<T>()),
                })?;
        if need > bytes {
            return Err(Error::LengthMismatch {
                what: "symmetric registration (len elements in bytes)",
                dest: bytes / std::mem::size_of::<T>().max(1),
                src: len,
            });
        }
        self.register_span(ptr as usize, len, bytes)
    }

    /// The collective registration of `bytes` at `addr` as `len` elements (module
    /// documentation): agree on PE 0's size and device, check, agree, then call NVSHMEM.
    fn register_span<T: Element>(
        &self,
        addr: usize,
        len: usize,
        bytes: usize,
    ) -> Result<Registered<'_, T>> {
        const WHAT: &str = "symmetric registration";
        self.check_peers(WHAT)?;
        self.bind()?;
        // Every PE says its own value: the first "no" is PE 0's, which every PE then knows.
        let pe0 = |v: u64| -> Result<u64> {
            Ok(self
                .agree_collective(WHAT, Vote::No(v))?
                .map_or(v, |(_, theirs)| theirs))
        };
        let pe0_bytes = pe0(bytes as u64)?;
        let pe0_device = pe0(self.device() as u64)?;
        let me = self.my_pe();
        let shared_checked = error_checks_on()
            && (1..self.real_node_pes()).contains(&me)
            && pe0_device == self.device() as u64;
        let mine = if pe0_bytes != bytes as u64 {
            Err((
                Unregistrable::SizeDiffers,
                format!("this PE registers {bytes} bytes, PE 0 {pe0_bytes}"),
            ))
        } else if shared_checked {
            Err((
                Unregistrable::SharedGpuChecks,
                Unregistrable::SharedGpuChecks.reason().to_string(),
            ))
        } else {
            local_check(self, addr, bytes)
        };
        let vote = match &mine {
            Ok(()) => Vote::Yes,
            Err((r, _)) => Vote::No(*r as u64),
        };
        if let Some((pe, code)) = self.agree_collective(WHAT, vote)? {
            let why = match mine {
                Err((_, why)) if pe == me => why,
                _ => Unregistrable::from_code(code).map_or_else(
                    || format!("refusal code {code}"),
                    |r| r.reason().to_string(),
                ),
            };
            let reason = Unregistrable::from_code(code).unwrap_or(Unregistrable::NotVmm);
            return Err(Error::NotRegistrable {
                what: WHAT,
                pe,
                reason,
                why,
            });
        }
        // SAFETY: every PE checked its memory against NVSHMEM's conditions and every PE is
        // here with the same size; flags 0 is the only value NVSHMEM takes.
        let raw = unsafe { sys::nvshmemx_buffer_register_symmetric(addr as *mut _, bytes, 0) }
            .cast::<T>();
        let Some(ptr) = NonNull::new(raw) else {
            let err = Error::RegistrationFailed { bytes };
            self.give_up(err.to_string());
            return Err(err);
        };
        REGISTERED_BYTES.fetch_add(bytes, Ordering::Relaxed);
        Ok(Registered {
            ptr,
            len,
            bytes,
            nv: self,
            _memory: PhantomData,
        })
    }
}

impl<'nv, T: Element> RegistrableBuffer<'nv, T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: zero-length allocations are refused.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size in bytes of the elements.
    pub fn num_bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// Bytes allocated and mapped (and registered by [`Nvshmem::register_symmetric`]): the
    /// size rounded up to the registration granularity.
    pub fn mapped_bytes(&self) -> usize {
        self.mapped
    }

    /// This PE's device address of element 0 (not symmetric: peers cannot address it).
    pub fn as_device_ptr(&self) -> *mut T {
        self.ptr.as_ptr()
    }

    /// Copies `src` from host memory into the buffer, on the runtime's stream; returns when the
    /// data is on the GPU.
    pub fn copy_from_host(&self, src: &[T]) -> Result<()> {
        self.nv.bind()?;
        host_to_device(
            self.nv.stream(),
            self.ptr.as_ptr() as CUdeviceptr,
            self.len,
            src,
        )
    }

    /// Copies the buffer into `dst`, on the runtime's stream (after the work queued there);
    /// returns when the data is in `dst`.
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        self.nv.bind()?;
        device_to_host(
            self.nv.stream(),
            self.ptr.as_ptr() as CUdeviceptr,
            self.len,
            dst,
        )
    }

    /// The buffer as a Vec, as [`RegistrableBuffer::copy_to_host`].
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut v = vec![T::default(); self.len];
        self.copy_to_host(&mut v)?;
        Ok(v)
    }
}

impl<T: Element> Drop for RegistrableBuffer<'_, T> {
    fn drop(&mut self) {
        // Queued work may still use the memory: let it finish before the range goes.
        if let Err(e) = self.nv.context().synchronize() {
            log::warn!("synchronising before freeing a registrable buffer failed ({e})");
        }
        let va = self.ptr.as_ptr() as CUdeviceptr;
        // SAFETY: the mapping, reservation and handle this buffer made; no registration of it
        // is alive (a Registered borrows the buffer). NVSHMEM released its own reference of
        // the handle when it unregistered.
        let r = unsafe {
            [
                cu::cuMemUnmap(va, self.mapped),
                cu::cuMemAddressFree(va, self.mapped),
                cu::cuMemRelease(self.handle),
            ]
        };
        if let Some(bad) = r.iter().find(|r| **r != cu::CUresult::CUDA_SUCCESS) {
            log::warn!(
                "freeing a registrable buffer of {} bytes: {bad:?}",
                self.mapped
            );
        }
    }
}

impl<T: Element> Registered<'_, T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size in bytes of the elements.
    pub fn num_bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// Bytes registered (a multiple of the registration granularity).
    pub fn registered_bytes(&self) -> usize {
        self.bytes
    }

    /// The symmetric address of element 0 on this PE.
    pub fn as_device_ptr(&self) -> *mut T {
        self.ptr.as_ptr()
    }

    /// The whole buffer as a symmetric view.
    pub fn as_view(&self) -> SymView<'_, T> {
        // SAFETY: `len` elements at the registered symmetric address, aligned (the mapping
        // is granularity-aligned); registered while `self` lives.
        unsafe { SymView::from_raw(self.ptr, self.len, self.nv.stream()) }
    }

    /// A sub-range, checked against the length.
    pub fn view<R: RangeBounds<usize>>(&self, range: R) -> Result<SymView<'_, T>> {
        self.as_view().view(range)
    }
}

impl<T: Element> Drop for Registered<'_, T> {
    fn drop(&mut self) {
        // As a symmetric free: queued work may still use the mapping, and every PE must
        // unregister alike (a PE that cannot synchronise votes no, and none unregisters).
        let vote = match self.nv.context().synchronize() {
            Ok(()) => Vote::Yes,
            Err(e) => {
                log::warn!(
                    "PE {}: synchronising before unregistering failed ({e}); the buffer stays \
                     registered on every PE until finalize",
                    self.nv.my_pe()
                );
                Vote::No(0)
            }
        };
        // NVSHMEM's unregistration waits for every PE without a deadline: after a peer
        // failure the mapping stays (finalize, if it runs, removes it).
        if self
            .nv
            .enter_collective("symmetric unregistration", vote)
            .is_err()
        {
            return;
        }
        // SAFETY: the address and size registered, not unregistered yet; every PE is here.
        let r = unsafe {
            sys::nvshmemx_buffer_unregister_symmetric(self.ptr.as_ptr().cast(), self.bytes)
        };
        if r == 0 {
            REGISTERED_BYTES.fetch_sub(self.bytes, Ordering::Relaxed);
        } else {
            log::warn!(
                "nvshmemx_buffer_unregister_symmetric of {} bytes returned {r}",
                self.bytes
            );
        }
    }
}

impl<'a, T: Element> From<&'a Registered<'_, T>> for SymView<'a, T> {
    fn from(r: &'a Registered<'_, T>) -> Self {
        r.as_view()
    }
}

impl<'a, T: Element> From<&'a Registered<'_, T>> for InBuf<'a, T> {
    fn from(r: &'a Registered<'_, T>) -> Self {
        r.as_view().into()
    }
}

impl<'a, T: Element> From<&'a Registered<'_, T>> for OutBuf<'a, T> {
    fn from(r: &'a Registered<'_, T>) -> Self {
        r.as_view().into()
    }
}

// Not registered, a registrable buffer is the caller's own memory: staged like any other.
impl<'a, T: Element> From<&'a RegistrableBuffer<'_, T>> for InBuf<'a, T> {
    fn from(b: &'a RegistrableBuffer<'_, T>) -> Self {
        // SAFETY: `len` elements of this PE's device memory, borrowed for 'a.
        unsafe { InBuf::from_raw(b.ptr.as_ptr(), b.len) }
    }
}

impl<'a, T: Element> From<&'a mut RegistrableBuffer<'_, T>> for OutBuf<'a, T> {
    fn from(b: &'a mut RegistrableBuffer<'_, T>) -> Self {
        // SAFETY: as above, borrowed mutably for 'a.
        unsafe { OutBuf::from_raw(b.ptr.as_ptr(), b.len) }
    }
}

device_interop!(RegistrableBuffer);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_codes_round_trip() {
        for r in Unregistrable::ALL {
            assert_eq!(Unregistrable::from_code(r as u64), Some(r));
            assert!(!r.reason().is_empty());
        }
        assert_eq!(Unregistrable::from_code(0), None);
        assert_eq!(Unregistrable::from_code(99), None);
    }
}
