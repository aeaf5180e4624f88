//! Ok-Topk's global phase ([`OkTopk`]): the global threshold (a global top-k of the reduced
//! regions now and then, adapted by the count gathered in between), the pairs that leave the
//! residual, and the region schedule.

use super::gathered::Gathered;
use super::launch::{addr, threshold_from_least, zero_dense};
use super::sym_set::SymSet;
use crate::coll::allreduce::Allreduce;
use crate::core::error::Result;
use crate::core::result::cuda_check;
use crate::core::stream::raw_stream;
use crate::sparse::reference;
use crate::sparse::select::TopK;
use crate::sparse::set::SparseSet;
use crate::sparse::sparse_ops::scatter_add_raw;
use crate::sparse::{index_code, value_code, SparseIndex, SparseValue};
use crate::sys;
use cudarc::driver::{CudaSlice, CudaStream};
use std::ffi::c_void;

/// Ok-Topk's global phase and region schedule.
pub(super) struct OkTopk<'nv, T: SparseValue, I: SparseIndex> {
    /// The boundaries' average over the members.
    pub(super) allreduce: Allreduce<'nv>,
    /// The global threshold in use (estimated on the device, reused in between) and its f64
    /// state.
    pub(super) threshold: CudaSlice<f32>,
    pub(super) state: CudaSlice<f64>,
    pub(super) least: CudaSlice<u32>,
    /// The global top k at an estimate.
    pub(super) global: SparseSet<T, I>,
    pub(super) global_every: u64,
    pub(super) repartition_every: u64,
}

impl<T: SparseValue, I: SparseIndex> OkTopk<'_, T, I> {
    /// Ok-Topk's global phase, after the reduced regions were gathered and scattered into
    /// `out`: on a global estimate call, the global top k of that sum (its least magnitude
    /// becomes the global threshold) replaces it; between estimates the regions were selected
    /// at the global threshold already, which adapts by the count gathered (the seed's / 1.01
    /// below 3k/4, x 1.008 above 5k/4). Then, with a residual, the pairs of `mine` whose index
    /// holds a value in `out` (the global set's are never zero) leave it.
    ///
    /// # Safety
    /// `out` device memory of n elements, `residual` 0 or n elements, on `stream`.
    pub(super) unsafe fn global(
        &mut self,
        topk: &mut TopK,
        mine: &SymSet<'_, T, I>,
        gathered: &Gathered<'_, T, I>,
        (estimate, k, residual): (bool, usize, u64),
        out: (u64, usize),
        stream: &CudaStream,
    ) -> Result<()> {
        let s = raw_stream(stream);
        let (dtype, itype) = (value_code::<T>(), index_code::<I>());
        let t = addr(&self.threshold) as *mut f32;
        let state = addr(&self.state) as *mut f64;
        if estimate {
            let (g, _guard) = self.global.raw_mut(stream);
            // SAFETY: `out` n elements, the global set of capacity k.
            unsafe { topk.run_raw::<T, I>(out, k, g, stream)? };
            // SAFETY: `g` a set of its capacity; least, t and state one word each.
            unsafe {
                threshold_from_least::<T, I>(
                    g,
                    (&self.least, t, state),
                    "Ok-Topk global threshold kernel launch",
                    stream,
                )?
            };
            // SAFETY: `out` n elements.
            unsafe { zero_dense::<T>(out.0, out.1, stream)? };
            // One part, no index twice: the same bits everywhere.
            // SAFETY: the global set of capacity k, `out` n elements.
            unsafe { scatter_add_raw::<T, I>(g, out, stream)? };
        } else {
            // SAFETY: the total word, the state and threshold one word each.
            let code = unsafe {
                sys::nvshmemrs_sparse_threshold_adapt(
                    addr(&gathered.parts.total) as *const u64,
                    k as u64,
                    reference::OK_GLOBAL_DOWN,
                    reference::OK_GLOBAL_UP,
                    state,
                    t,
                    s,
                )
            };
            cuda_check(code, "Ok-Topk global adaptation kernel launch")?;
        }
        if residual != 0 {
            // SAFETY: mine its capacity, `out` and the residual n elements.
            let code = unsafe {
                sys::nvshmemrs_sparse_zero_sent(
                    mine.raw(),
                    out.0 as *const c_void,
                    residual as *mut c_void,
                    out.1 as u64,
                    dtype,
                    itype,
                    s,
                )
            };
            cuda_check(code, "Ok-Topk residual update kernel launch")?;
        }
        Ok(())
    }
}
