//! The allgatherv with device counts that most exchanges end in: [`VParts`] (counts and
//! displacements a kernel computes from the gathered sizes) and [`Gathered`] (indexes and
//! values gathered in member order, then scatter-added into the dense output).

use super::launch::{addr, scatter_parts, zero_dense, Parts};
use super::sym_set::SymSet;
use crate::coll::allgather::Allgather;
use crate::coll::allgatherv::Allgatherv;
use crate::coll::family::DeviceParts;
use crate::core::buffer::SymmetricBuffer;
use crate::core::error::Result;
use crate::core::result::cuda_check;
use crate::core::stream::raw_stream;
use crate::sparse::{SparseIndex, SparseValue};
use crate::sys;
use cudarc::driver::{CudaSlice, CudaStream};

/// Counts and displacements of an allgatherv whose counts a kernel computes.
pub(super) struct VParts<'nv> {
    pub(super) agv: Allgatherv<'nv>,
    /// The members' set sizes (allgathered count words).
    pub(super) sizes: SymmetricBuffer<'nv, u64>,
    pub(super) counts: SymmetricBuffer<'nv, u64>,
    pub(super) displs: SymmetricBuffer<'nv, u64>,
    /// Pairs gathered in all: the scatter-add's count.
    pub(super) total: CudaSlice<u64>,
}

/// An allgatherv of indexes and of values with device counts, packed in member order, and
/// their scatter-add into the dense output.
pub(super) struct Gathered<'nv, T: SparseValue, I: SparseIndex> {
    pub(super) parts: VParts<'nv>,
    pub(super) idx: SymmetricBuffer<'nv, I>,
    pub(super) val: SymmetricBuffer<'nv, T>,
}

impl VParts<'_> {
    /// Counts and displacements of the parts from the gathered sizes.
    pub(super) fn offsets(
        &mut self,
        p: i32,
        cap: usize,
        units: (u64, u64, u64),
        s: &CudaStream,
    ) -> Result<()> {
        // SAFETY: P words each of symmetric memory, the total word.
        let code = unsafe {
            sys::nvshmemrs_sparse_offsets(
                self.sizes.as_device_ptr(),
                p,
                cap as u64,
                units.0,
                units.1,
                units.2,
                self.counts.as_device_ptr(),
                self.displs.as_device_ptr(),
                addr(&self.total) as *mut u64,
                raw_stream(s),
            )
        };
        cuda_check(code, "sparse offsets kernel launch")
    }
}

impl<T: SparseValue, I: SparseIndex> Gathered<'_, T, I> {
    /// The pairs `set` holds (at most `caps.0`, its input length) from every member into the
    /// gathered buffers (`caps.1` pairs, at least the sum over the members), then `out` = their
    /// scatter-add into zeros.
    ///
    /// # Safety
    /// `out` is device memory of `dense.1` elements at `dense.0`, ordered on `stream`; the
    /// members' pairs together fit `caps.1`.
    pub(super) unsafe fn run(
        &mut self,
        allgather: &mut Allgather<'_>,
        set: &SymSet<'_, T, I>,
        caps: (usize, usize),
        p: i32,
        dense: (u64, usize),
        stream: &CudaStream,
    ) -> Result<()> {
        let (part, all) = caps;
        let pu = p as usize;
        let parts = &mut self.parts;
        allgather.run(set.count.view(0..1)?, parts.sizes.view(0..pu)?, stream)?;
        parts.offsets(p, part, (1, 0, 1), stream)?;
        let dp = DeviceParts {
            counts: parts.counts.view(0..pu)?,
            displs: parts.displs.view(0..pu)?,
        };
        parts
            .agv
            .run_device(set.idx.view(0..part)?, self.idx.view(0..all)?, &dp, stream)?;
        parts
            .agv
            .run_device(set.val.view(0..part)?, self.val.view(0..all)?, &dp, stream)?;
        // SAFETY: this function's contract.
        unsafe { zero_dense::<T>(dense.0, dense.1, stream)? };
        let gathered = Parts {
            idx: self.idx.as_device_ptr() as u64,
            val: self.val.as_device_ptr() as u64,
            sizes: parts.sizes.as_device_ptr() as u64,
            displs: parts.displs.as_device_ptr() as u64,
            capacity: part,
            n_parts: p,
        };
        // SAFETY: the members' parts within `all` pairs of symmetric memory (their sizes and
        // displacements P words each), `out` of its elements.
        unsafe { scatter_parts::<T, I>(gathered, dense, stream) }
    }
}
