//! gTop-k's tree ([`Tree`]): ceil(log2 P) rounds in which the even partner merges what the
//! odd one sends and keeps the top k, the broadcast of the global top k from rank 0, and the
//! local pairs that made it (what error feedback counts as sent).

use super::launch::{addr, zero_dense};
use super::sym_set::SymSet;
use crate::coll::broadcast::Broadcast;
use crate::coll::group::{P2p, P2pGroup};
use crate::core::error::Result;
use crate::core::result::cuda_check;
use crate::core::stream::raw_stream;
use crate::sparse::select::TopK;
use crate::sparse::set::SparseSet;
use crate::sparse::sparse_ops::SparseMerge;
use crate::sparse::{index_code, value_code, SparseIndex, SparseValue};
use crate::sys;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtrMut};
use std::ffi::c_void;

pub(super) struct Tree<'nv, T: SparseValue, I: SparseIndex> {
    pub(super) p2p: P2pGroup<'nv>,
    pub(super) bcast: Broadcast<'nv>,
    /// The received set (count k, set once).
    pub(super) recv: SymSet<'nv, T, I>,
    /// The merged set of the rounds so far (count k after the first merge).
    pub(super) cur: SymSet<'nv, T, I>,
    /// The global top k (count k, set once).
    pub(super) global: SymSet<'nv, T, I>,
    pub(super) union: SparseSet<T, I>,
    pub(super) pos: SparseSet<T, I>,
    pub(super) merge: SparseMerge,
    /// 1 where the local pair made it into the global set.
    pub(super) mark: CudaSlice<f32>,
    pub(super) mark_pos: SparseSet<f32, I>,
    /// 0.5: the threshold that takes the marks.
    pub(super) half: CudaSlice<f32>,
    pub(super) included: SparseSet<T, I>,
}

impl<T: SparseValue, I: SparseIndex> Tree<'_, T, I> {
    /// The tree rounds, then the broadcast of the global top k from rank 0 into `global`.
    ///
    /// # Safety
    /// Sets of their capacities on `stream`.
    pub(super) unsafe fn reduce(
        &mut self,
        topk: &mut TopK,
        mine: &SymSet<'_, T, I>,
        me: i32,
        p: i32,
        k: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        // Which set holds this member's running top k: its selection until it first merges.
        let mut merged = false;
        let mut step = 1;
        while step < p {
            if me % (2 * step) == 0 && me + step < p {
                let from = me + step;
                self.p2p.run(
                    &[
                        P2p::recv(self.recv.idx.view(0..k)?, from),
                        P2p::recv(self.recv.val.view(0..k)?, from),
                    ],
                    stream,
                )?;
                let a = if merged { self.cur.raw() } else { mine.raw() };
                // Past the union's count the values must not win the top k: zeros lose to
                // every pair of the union (ties go to the lower position, and the union holds
                // at least k pairs).
                {
                    // A raw memset, not cudarc's memset_zeros: that one wants an Arc'd stream,
                    // and run takes a plain &CudaStream like every collective.
                    let (_, mut val, _) = self.union.parts_mut();
                    let len = val.len();
                    let (v, _guard) = val.device_ptr_mut(stream);
                    // SAFETY: the union's `len` values, ordered on `stream` by the guard.
                    unsafe { zero_dense::<T>(v, len, stream)? };
                }
                // Addresses without guards: these sets are used on this stream only.
                let u = self.union.raw_mut(stream).0;
                let ps = self.pos.raw_mut(stream).0;
                // SAFETY: this function's contract; the union is neither input.
                unsafe { self.merge.run_raw::<T, I>(a, self.recv.raw(), u, stream)? };
                // SAFETY: the union's 2k values, the positions set of k.
                unsafe { topk.run_raw::<T, I>((u.val as u64, 2 * k), k, ps, stream)? };
                // SAFETY: positions below 2k into the union, out k pairs.
                let code = unsafe {
                    sys::nvshmemrs_sparse_gather(
                        ps,
                        u.idx,
                        u.val,
                        2 * k as u64,
                        self.cur.raw(),
                        value_code::<T>(),
                        index_code::<I>(),
                        raw_stream(stream),
                    )
                };
                cuda_check(code, "sparse gather kernel launch")?;
                merged = true;
            } else if me % (2 * step) == step {
                let (idx, val) = if merged {
                    (&self.cur.idx, &self.cur.val)
                } else {
                    (&mine.idx, &mine.val)
                };
                let to = me - step;
                self.p2p.run(
                    &[
                        P2p::send(idx.view(0..k)?, to),
                        P2p::send(val.view(0..k)?, to),
                    ],
                    stream,
                )?;
            }
            step *= 2;
        }
        let (idx, val) = if merged {
            (&self.cur.idx, &self.cur.val)
        } else {
            (&mine.idx, &mine.val)
        };
        self.bcast
            .run(idx.view(0..k)?, self.global.idx.view(0..k)?, 0, stream)?;
        self.bcast
            .run(val.view(0..k)?, self.global.val.view(0..k)?, 0, stream)?;
        Ok(())
    }

    /// The pairs of `mine` whose index is in the global set into `included`, and (residual
    /// not 0) those elements of the residual set to zero.
    ///
    /// # Safety
    /// Sets of their capacities, `residual` 0 or n elements, on `stream`.
    pub(super) unsafe fn include(
        &mut self,
        topk: &mut TopK,
        mine: &SymSet<'_, T, I>,
        residual: u64,
        n: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let s = raw_stream(stream);
        let (dtype, itype) = (value_code::<T>(), index_code::<I>());
        let k = mine.capacity;
        let mark = addr(&self.mark);
        // SAFETY: mine and global k pairs, mark k f32, residual 0 or n elements.
        let code = unsafe {
            sys::nvshmemrs_sparse_mark_included(
                mine.raw(),
                self.global.raw(),
                mark as *mut f32,
                residual as *mut c_void,
                n as u64,
                dtype,
                itype,
                s,
            )
        };
        cuda_check(code, "sparse mark kernel launch")?;
        let (mp, _mg) = self.mark_pos.raw_mut(stream);
        // Positions of the marks, in order: a threshold compaction of the 0/1 marks.
        let half = addr(&self.half) as *const f32;
        // SAFETY: k f32 of marks, the positions set of k, the threshold word.
        unsafe { topk.threshold_at_raw::<f32, I>((mark, k), half, mp, stream)? };
        let (inc, _ig) = self.included.raw_mut(stream);
        // SAFETY: positions below k into mine, out k pairs.
        let code = unsafe {
            sys::nvshmemrs_sparse_gather(
                mp,
                mine.idx.as_device_ptr().cast(),
                mine.val.as_device_ptr().cast(),
                k as u64,
                inc,
                dtype,
                itype,
                s,
            )
        };
        cuda_check(code, "sparse gather kernel launch")
    }
}
