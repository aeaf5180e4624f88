//! Sparse sets in device memory and their host copies.

use super::{SparseIndex, SparseValue};
use crate::core::error::{Error, Result};
use crate::sys;
use cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut};
use std::sync::Arc;

/// (index, value) pairs in device memory with their count in one device word, which kernels
/// read and write without the host: what [`crate::TopK`] and [`crate::SparseMerge`] write and
/// [`crate::SparseMerge`] and [`crate::scatter_add`] read.
///
/// The count is the true number of pairs, which a threshold or a merge may take past the
/// capacity: then the set holds `capacity` pairs (a threshold: those of largest magnitude; a
/// merge: the lowest indexes) and readers take `min(count, capacity)`. Pairs written by the selections and the merge are sorted by
/// index with no index twice; the merge needs its inputs so.
pub struct SparseSet<T: SparseValue, I: SparseIndex = i32> {
    idx: CudaSlice<I>,
    val: CudaSlice<T>,
    count: CudaSlice<u64>,
    capacity: usize,
}

/// A sparse set copied to the host ([`SparseSet::to_host`]); also what [`super::reference`]
/// computes. `idx` and `val` hold the first `min(count, capacity)` pairs.
#[derive(Debug, Clone, PartialEq)]
pub struct HostSparse<T, I = i32> {
    /// The device count: may exceed the pairs held (an overflowed threshold or merge).
    pub count: u64,
    /// The pairs' indexes into the dense gradient.
    pub idx: Vec<I>,
    /// The pairs' values, one per index.
    pub val: Vec<T>,
}

impl<T: SparseValue, I: SparseIndex> HostSparse<T, I> {
    /// An empty set.
    pub fn empty() -> Self {
        HostSparse {
            count: 0,
            idx: Vec::new(),
            val: Vec::new(),
        }
    }

    /// Where `self` and `other` differ (count, an index, or a value's bits: NaN payloads and
    /// the sign of zero count), described; None when they are the same bit for bit.
    pub fn difference(&self, other: &Self) -> Option<String> {
        if self.count != other.count {
            return Some(format!("count {} against {}", self.count, other.count));
        }
        if self.idx.len() != other.idx.len() || self.val.len() != other.val.len() {
            return Some(format!(
                "{} pairs held against {}",
                self.idx.len(),
                other.idx.len()
            ));
        }
        for (j, (a, b)) in self.idx.iter().zip(&other.idx).enumerate() {
            if a != b {
                return Some(format!("pair {j}: index {a:?} against {b:?}"));
            }
        }
        for (j, (a, b)) in self.val.iter().zip(&other.val).enumerate() {
            if a.to_bits64() != b.to_bits64() {
                return Some(format!(
                    "pair {j} (index {:?}): value {a:?} ({:#x}) against {b:?} ({:#x})",
                    self.idx[j],
                    a.to_bits64(),
                    b.to_bits64()
                ));
            }
        }
        None
    }
}

impl<T: SparseValue, I: SparseIndex> SparseSet<T, I> {
    /// An empty set (count 0) with room for `capacity` pairs, zeroed, allocated on `stream`.
    pub fn new(stream: &Arc<CudaStream>, capacity: usize) -> Result<Self> {
        // cudarc allocates at least one element: a set of capacity 0 keeps one unused.
        let room = capacity.max(1);
        Ok(SparseSet {
            idx: stream.alloc_zeros(room)?,
            val: stream.alloc_zeros(room)?,
            count: stream.alloc_zeros(1)?,
            capacity,
        })
    }

    /// A set holding the pairs `idx[j], val[j]` (capacity and count: their number). Nothing is
    /// checked but the lengths: [`crate::SparseMerge`] needs the indexes sorted without
    /// repeats, [`crate::scatter_add`] takes any. Returns when the copy is done.
    pub fn from_host(stream: &Arc<CudaStream>, idx: &[I], val: &[T]) -> Result<Self> {
        if idx.len() != val.len() {
            return Err(Error::LengthMismatch {
                what: "SparseSet::from_host (indexes and values)",
                dest: idx.len(),
                src: val.len(),
            });
        }
        let mut set = Self::new(stream, idx.len())?;
        if !idx.is_empty() {
            stream.memcpy_htod(idx, &mut set.idx)?;
            stream.memcpy_htod(val, &mut set.val)?;
        }
        set.set_count(stream, idx.len() as u64)?;
        Ok(set)
    }

    /// Pairs the set can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The indexes, `capacity` of them (past the count: whatever was there).
    pub fn idx(&self) -> CudaView<'_, I> {
        self.idx.slice(..self.capacity)
    }

    /// The values, `capacity` of them.
    pub fn val(&self) -> CudaView<'_, T> {
        self.val.slice(..self.capacity)
    }

    /// The count word (one u64).
    pub fn count(&self) -> &CudaSlice<u64> {
        &self.count
    }

    /// The indexes, values and count word for writing (e.g. poisoning them in tests, or a
    /// kernel of the caller's own that fills the set).
    pub fn parts_mut(&mut self) -> (CudaViewMut<'_, I>, CudaViewMut<'_, T>, &mut CudaSlice<u64>) {
        let cap = self.capacity;
        (
            self.idx.slice_mut(..cap),
            self.val.slice_mut(..cap),
            &mut self.count,
        )
    }

    /// Writes `count` into the count word; returns when it is done.
    pub fn set_count(&mut self, stream: &Arc<CudaStream>, count: u64) -> Result<()> {
        stream.memcpy_htod(&[count], &mut self.count)?;
        Ok(())
    }

    /// Copies the count and the pairs held to the host, after the work queued on `stream`;
    /// returns when done.
    pub fn to_host(&self, stream: &Arc<CudaStream>) -> Result<HostSparse<T, I>> {
        let count = stream.clone_dtoh(&self.count)?[0];
        let held = (count.min(self.capacity as u64)) as usize;
        let (idx, val) = if held == 0 {
            (Vec::new(), Vec::new())
        } else {
            (
                stream.clone_dtoh(&self.idx.slice(..held))?,
                stream.clone_dtoh(&self.val.slice(..held))?,
            )
        };
        Ok(HostSparse { count, idx, val })
    }

    /// The raw set for a kernel, with the guards that order its memory on `stream` (they must
    /// live until the launch is enqueued).
    pub(super) fn raw_mut<'a>(
        &'a mut self,
        stream: &'a CudaStream,
    ) -> (
        sys::nvshmemrs_sparse_set,
        [cudarc::driver::SyncOnDrop<'a>; 3],
    ) {
        let (idx, gi) = self.idx.device_ptr_mut(stream);
        let (val, gv) = self.val.device_ptr_mut(stream);
        let (count, gc) = self.count.device_ptr_mut(stream);
        (
            sys::nvshmemrs_sparse_set {
                idx: idx as *mut std::ffi::c_void,
                val: val as *mut std::ffi::c_void,
                count: count as *mut u64,
                capacity: self.capacity as u64,
            },
            [gi, gv, gc],
        )
    }

    /// [`SparseSet::raw_mut`] for a set the kernel only reads.
    pub(super) fn raw<'a>(
        &'a self,
        stream: &'a CudaStream,
    ) -> (
        sys::nvshmemrs_sparse_set,
        [cudarc::driver::SyncOnDrop<'a>; 3],
    ) {
        let (idx, gi) = self.idx.device_ptr(stream);
        let (val, gv) = self.val.device_ptr(stream);
        let (count, gc) = self.count.device_ptr(stream);
        (
            sys::nvshmemrs_sparse_set {
                idx: idx as *mut std::ffi::c_void,
                val: val as *mut std::ffi::c_void,
                count: count as *mut u64,
                capacity: self.capacity as u64,
            },
            [gi, gv, gc],
        )
    }
}
