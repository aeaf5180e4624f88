//! The small kernel launches the steps share: a cudarc allocation's device address, a threshold
//! from an exact top-k's least magnitude, zeroing at a set's indexes or whole, and the
//! scatter-add of gathered parts in member order.

use crate::core::error::Result;
use crate::core::result::cuda_check;
use crate::core::stream::raw_stream;
use crate::sparse::{index_code, value_code, SparseIndex, SparseValue};
use crate::sys;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use std::ffi::c_void;

/// The device address of a cudarc allocation (ordered by the caller: everything here runs on
/// the call's stream after `new` synchronised the allocations).
pub(super) fn addr<T>(s: &CudaSlice<T>) -> u64 {
    let (p, _guard) = s.device_ptr(s.stream());
    p
}

/// After an exact top k into `set`: the threshold word `t` becomes the least magnitude the set
/// holds, and the adapting `state` restarts from it (an exact estimate's). `what` names a
/// failed launch of the first kernel.
///
/// # Safety
/// `set` is a sparse set of its capacity in device memory, `least` one u32 of workspace, `t`
/// one f32 and `state` one f64 of device memory, all ordered on `stream`.
pub(super) unsafe fn threshold_from_least<T: SparseValue, I: SparseIndex>(
    set: sys::nvshmemrs_sparse_set,
    (least, t, state): (&CudaSlice<u32>, *mut f32, *mut f64),
    what: &'static str,
    stream: &CudaStream,
) -> Result<()> {
    let s = raw_stream(stream);
    let (dtype, itype) = (value_code::<T>(), index_code::<I>());
    // SAFETY: this function's contract.
    let code = unsafe {
        sys::nvshmemrs_sparse_least_threshold(set, addr(least) as *mut u32, t, dtype, itype, s)
    };
    cuda_check(code, what)?;
    // SAFETY: one word each.
    let code = unsafe { sys::nvshmemrs_sparse_threshold_state(t, state, s) };
    cuda_check(code, "threshold state kernel launch")
}

/// Enqueues the zeroing of `dense[i]` at every index i of `set` on `stream`: what was sent
/// leaves the residual, and DGC's momentum factor masking clears the velocity there.
///
/// # Safety
/// `set` is device memory of its capacity (and a count word), `dense` n elements of T, both
/// ordered on `stream`.
pub(super) unsafe fn zero_at<T: SparseValue, I: SparseIndex>(
    set: sys::nvshmemrs_sparse_set,
    dense: u64,
    n: usize,
    stream: &CudaStream,
    what: &'static str,
) -> Result<()> {
    // SAFETY: this function's contract.
    let code = unsafe {
        sys::nvshmemrs_sparse_zero_at(
            set,
            dense as *mut c_void,
            n as u64,
            value_code::<T>(),
            index_code::<I>(),
            raw_stream(stream),
        )
    };
    cuda_check(code, what)
}

/// Enqueues `out[0 .. n] = 0` on `stream`.
///
/// # Safety
/// `out` is device memory of n elements of T, ordered on `stream`.
pub(super) unsafe fn zero_dense<T>(out: u64, n: usize, stream: &CudaStream) -> Result<()> {
    // SAFETY: this function's contract.
    unsafe {
        cudarc::driver::result::memset_d8_async(
            out,
            0,
            n * std::mem::size_of::<T>(),
            stream.cu_stream(),
        )
    }?;
    Ok(())
}

/// The parts of a gathered sparse set, one per member in member order, by device address.
#[derive(Clone, Copy)]
pub(super) struct Parts {
    pub(super) idx: u64,
    pub(super) val: u64,
    /// P device words: part r's pair count (at most `capacity` taken); 0: `capacity` each.
    pub(super) sizes: u64,
    /// P device words: where part r starts, in pairs; 0: at r x `capacity`.
    pub(super) displs: u64,
    pub(super) capacity: usize,
    pub(super) n_parts: i32,
}

/// Enqueues `dense[idx] += val` for the pairs of `parts`, part after part in member order, so
/// that every element's adds happen in member order: bit-identical results on every member
/// that scatters the same parts, at any team size (an atomic scatter-add of all parts at once
/// adds in no fixed order, which rounds differently from one member to the next for P >= 3).
///
/// # Safety
/// The parts' buffers hold every part as described, `dense.0` is device memory of `dense.1`
/// elements, all ordered on `stream`.
pub(super) unsafe fn scatter_parts<T: SparseValue, I: SparseIndex>(
    parts: Parts,
    dense: (u64, usize),
    stream: &CudaStream,
) -> Result<()> {
    // SAFETY: this function's contract.
    let code = unsafe {
        sys::nvshmemrs_sparse_scatter_parts(
            parts.idx as *const c_void,
            parts.val as *const c_void,
            parts.sizes as *const u64,
            parts.displs as *const u64,
            parts.capacity as u64,
            parts.n_parts,
            dense.0 as *mut c_void,
            dense.1 as u64,
            value_code::<T>(),
            index_code::<I>(),
            raw_stream(stream),
        )
    };
    cuda_check(code, "ordered scatter-add kernel launch")
}
