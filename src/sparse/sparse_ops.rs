//! Merge of two sparse sets and scatter-add into a dense buffer (device/sparse/sparse_ops.cu).

use super::set::SparseSet;
use super::{index_code, value_code, SparseIndex, SparseValue};
use crate::core::error::{Error, Result};
use crate::core::result::cuda_check;
use crate::core::stream::raw_stream;
use crate::sys;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtrMut};
use std::sync::Arc;

/// The reusable workspace of the merge of sparse sets of capacity up to `max_capacity` each
/// (a few words per 2048 pairs, plain device memory, allocated once). Calls must not overlap,
/// as for [`crate::TopK`].
pub struct SparseMerge {
    scratch: CudaSlice<u64>,
    max_capacity: usize,
}

impl SparseMerge {
    /// A workspace for inputs of capacity up to `max_capacity`, allocated on `stream`.
    pub fn new(stream: &Arc<CudaStream>, max_capacity: usize) -> Result<Self> {
        let max = max_capacity as u64;
        // SAFETY: a host function of its arguments only.
        let words = unsafe { sys::nvshmemrs_sparse_merge_scratch_words(max, max) };
        let words = usize::try_from(words).map_err(|_| Error::SizeOverflow {
            what: "SparseMerge::new",
            detail: format!("{words} words of workspace"),
        })?;
        Ok(SparseMerge {
            scratch: stream.alloc_zeros(words)?,
            max_capacity,
        })
    }

    /// The largest input capacity this workspace takes.
    pub fn max_capacity(&self) -> usize {
        self.max_capacity
    }

    /// Enqueues on `stream` `out = a ∪ b` by index: sorted by index, the values added where
    /// both hold an index (bf16: in f32, rounded once to nearest even), the others copied bit
    /// for bit. `out`'s count becomes the union's size on the device, even past its capacity:
    /// then `out` holds the lowest-index `capacity` pairs. Counts are read on the device: an
    /// input whose count ran past its capacity counts as the pairs it holds.
    ///
    /// `a` and `b` must each be sorted by index without repeats (what the selections and the
    /// merge write); other inputs give unspecified pairs, never a write outside `out`. Their
    /// capacities must be at most [`SparseMerge::max_capacity`].
    pub fn run<T: SparseValue, I: SparseIndex>(
        &mut self,
        a: &SparseSet<T, I>,
        b: &SparseSet<T, I>,
        out: &mut SparseSet<T, I>,
        stream: &CudaStream,
    ) -> Result<()> {
        let (a, _a_guards) = a.raw(stream);
        let (b, _b_guards) = b.raw(stream);
        let (out, _out_guards) = out.raw_mut(stream);
        // SAFETY: the sets are cudarc allocations of their capacities, ordered on `stream` by
        // the guards, which live until the kernels are enqueued; `out` is borrowed mutably, so
        // it is neither input.
        unsafe { self.run_raw::<T, I>(a, b, out, stream) }
    }

    /// [`SparseMerge::run`] on raw sets (capacities checked here).
    ///
    /// # Safety
    /// Each set's pointers are device memory of its capacity (and a count word), ordered on
    /// `stream`; `out` is neither input.
    pub(crate) unsafe fn run_raw<T: SparseValue, I: SparseIndex>(
        &mut self,
        a: sys::nvshmemrs_sparse_set,
        b: sys::nvshmemrs_sparse_set,
        out: sys::nvshmemrs_sparse_set,
        stream: &CudaStream,
    ) -> Result<()> {
        for input in [a.capacity as usize, b.capacity as usize] {
            if input > self.max_capacity {
                return Err(Error::WorkspaceTooSmall {
                    what: "sparse merge",
                    len: input,
                    max_len: self.max_capacity,
                    create: "SparseMerge::new(stream, capacity)",
                });
            }
        }
        stream.context().bind_to_thread()?;
        let scratch_words = self.scratch.len() as u64;
        let (scratch, _scratch_guard) = self.scratch.device_ptr_mut(stream);
        let args = sys::nvshmemrs_sparse_merge_args {
            a,
            b,
            out,
            scratch: scratch as *mut u64,
            scratch_words,
            dtype: value_code::<T>(),
            index_type: index_code::<I>(),
        };
        // SAFETY: the sets' pointers are device memory of their capacities and `out` neither
        // input (this function's contract), the workspace of its words (at least what both
        // capacities need, checked above), ordered on `stream` by its guard.
        let code = unsafe { sys::nvshmemrs_sparse_merge(args, raw_stream(stream)) };
        cuda_check(code, "sparse merge kernel launch")
    }
}

/// Enqueues on `stream` `dense[idx[j]] += val[j]` for every pair `set` holds (its count read on
/// the device). Repeated indexes are allowed: the adds are atomic, in no fixed order, so with
/// repeats the result is exact where every partial sum is (integers below 2^24 in f32, 2^8 in
/// bf16), else within rounding. bf16 adds in f32 and rounds once to nearest even per pair.
/// Indexes outside `0..dense.len()` are skipped.
pub fn scatter_add<T, I, D>(set: &SparseSet<T, I>, dense: &mut D, stream: &CudaStream) -> Result<()>
where
    T: SparseValue,
    I: SparseIndex,
    D: DevicePtrMut<T>,
{
    let n = dense.len();
    let (dense, _dense_guard) = dense.device_ptr_mut(stream);
    let (input, _in_guards) = set.raw(stream);
    // SAFETY: the set is cudarc memory of its capacity, `dense` of n elements, ordered on
    // `stream` by the guards, which live until the kernel is enqueued.
    unsafe { scatter_add_raw::<T, I>(input, (dense, n), stream) }
}

/// [`scatter_add`] of a raw set into the `len` elements at device address `dense`.
///
/// # Safety
/// The set's pointers are device memory of its capacity (and a count word), `dense` of `len`
/// elements, all ordered on `stream`.
pub(crate) unsafe fn scatter_add_raw<T: SparseValue, I: SparseIndex>(
    input: sys::nvshmemrs_sparse_set,
    dense: (u64, usize),
    stream: &CudaStream,
) -> Result<()> {
    stream.context().bind_to_thread()?;
    let args = sys::nvshmemrs_sparse_scatter_args {
        input,
        dense: dense.0 as *mut std::ffi::c_void,
        n: dense.1 as u64,
        dtype: value_code::<T>(),
        index_type: index_code::<I>(),
    };
    // SAFETY: the set's pointers are device memory of its capacity, `dense` of n elements (the
    // kernel skips indexes outside it), ordered on `stream` (this function's contract).
    let code = unsafe { sys::nvshmemrs_sparse_scatter_add(args, raw_stream(stream)) };
    cuda_check(code, "scatter-add kernel launch")
}
