//! [`SymSet`]: a sparse set in symmetric memory, so that the collectives can move it, with its
//! count on the device.

use crate::core::buffer::SymmetricBuffer;
use crate::core::error::Result;
use crate::core::runtime::Nvshmem;
use crate::sparse::set::HostSparse;
use crate::sparse::{SparseIndex, SparseValue};
use crate::sys;
use cudarc::driver::CudaStream;
use std::sync::Arc;

/// A sparse set in symmetric memory (so collectives can move it); counts on the device.
pub(super) struct SymSet<'nv, T: SparseValue, I: SparseIndex> {
    pub(super) idx: SymmetricBuffer<'nv, I>,
    pub(super) val: SymmetricBuffer<'nv, T>,
    pub(super) count: SymmetricBuffer<'nv, u64>,
    pub(super) capacity: usize,
}

impl<'nv, T: SparseValue, I: SparseIndex> SymSet<'nv, T, I> {
    /// Collective over the world (same capacity everywhere); the count is zeroed.
    pub(super) fn new(nv: &'nv Nvshmem, capacity: usize) -> Result<Self> {
        Ok(SymSet {
            idx: nv.alloc_zeroed(capacity.max(1))?,
            val: nv.alloc_zeroed(capacity.max(1))?,
            count: nv.alloc_zeroed(1)?,
            capacity,
        })
    }

    pub(super) fn raw(&self) -> sys::nvshmemrs_sparse_set {
        sys::nvshmemrs_sparse_set {
            idx: self.idx.as_device_ptr().cast(),
            val: self.val.as_device_ptr().cast(),
            count: self.count.as_device_ptr(),
            capacity: self.capacity as u64,
        }
    }

    pub(super) fn to_host(&self, stream: &Arc<CudaStream>) -> Result<HostSparse<T, I>> {
        let count = stream.clone_dtoh(&self.count)?[0];
        let held = count.min(self.capacity as u64) as usize;
        if held == 0 {
            return Ok(HostSparse {
                count,
                ..HostSparse::empty()
            });
        }
        Ok(HostSparse {
            count,
            idx: stream.clone_dtoh(&self.idx.view(0..held)?)?,
            val: stream.clone_dtoh(&self.val.view(0..held)?)?,
        })
    }
}
