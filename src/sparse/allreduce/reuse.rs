//! The local threshold of `topk_aopt` and Ok-Topk ([`Reuse`]): estimated by an exact top-k
//! now and then, reused in between.

use super::launch::{addr, threshold_from_least};
use crate::core::error::Result;
use crate::core::result::cuda_check;
use crate::core::stream::raw_stream;
use crate::sparse::reference;
use crate::sparse::select::TopK;
use crate::sparse::{value_code, SparseIndex, SparseValue};
use crate::sys;
use cudarc::driver::{CudaSlice, CudaStream};
use std::ffi::c_void;

/// The local threshold of `topk_aopt` and Ok-Topk: estimated by an exact top-k every `every`
/// calls, reused in between (Ok-Topk: raised and adapted as the seed does).
pub(super) struct Reuse {
    /// The threshold of the last call.
    pub(super) threshold: CudaSlice<f32>,
    /// The threshold carried to the next call, in f64 (the seed's Python float).
    pub(super) state: CudaSlice<f64>,
    /// The state's adaptation rounded, written by the adapt kernel (not used in selection).
    pub(super) next: CudaSlice<f32>,
    /// Workspace of the estimate and of the rise.
    pub(super) least: CudaSlice<u32>,
    pub(super) scratch: CudaSlice<f64>,
    pub(super) every: u64,
    /// Ok-Topk: the rise before a reused selection and the count adaptation after it.
    pub(super) adapt: bool,
}

impl Reuse {
    /// The local selection of sparse call `call` into `mine` from the `n` elements at `src`: on
    /// an estimate call the exact top k (its least magnitude becomes the threshold), else every
    /// element at or above the reused threshold (Ok-Topk: raised first while more than 3k/2
    /// pass, as the seed's add2residual; up to 2k pairs, past that the largest). Ok-Topk then
    /// adapts the threshold it carries by the count selected (the seed's x or / 1.012).
    ///
    /// # Safety
    /// `src` is device memory of `n` elements, `mine` a set of its capacity, on `stream`.
    pub(super) unsafe fn select<T: SparseValue, I: SparseIndex>(
        &self,
        topk: &mut TopK,
        (src, n): (u64, usize),
        k: usize,
        call: u64,
        mine: sys::nvshmemrs_sparse_set,
        stream: &CudaStream,
    ) -> Result<()> {
        let s = raw_stream(stream);
        let dtype = value_code::<T>();
        let t = addr(&self.threshold) as *mut f32;
        let state = addr(&self.state) as *mut f64;
        if call % self.every == 0 {
            // SAFETY: this function's contract.
            unsafe { topk.run_raw::<T, I>((src, n), k, mine, stream)? };
            // SAFETY: `mine` a set of its capacity; least, t and state one word each.
            unsafe {
                threshold_from_least::<T, I>(
                    mine,
                    (&self.least, t, state),
                    "threshold estimate kernel launch",
                    stream,
                )?
            };
        } else {
            if self.adapt {
                // SAFETY: src n elements, the state and threshold one word each, the workspace
                // its words.
                let code = unsafe {
                    sys::nvshmemrs_sparse_threshold_rise(
                        src as *const c_void,
                        n as u64,
                        (3 * k / 2) as u64,
                        state,
                        t,
                        dtype,
                        addr(&self.scratch) as *mut f64,
                        self.scratch.len() as u64,
                        s,
                    )
                };
                cuda_check(code, "Ok-Topk threshold rise kernel launch")?;
            }
            // SAFETY: this function's contract; t one f32.
            unsafe { topk.threshold_at_raw::<T, I>((src, n), t, mine, stream)? };
        }
        if self.adapt {
            // SAFETY: the set's count word, the state and a threshold word.
            let code = unsafe {
                sys::nvshmemrs_sparse_threshold_adapt(
                    mine.count,
                    k as u64,
                    reference::OK_LOCAL_SCALE,
                    reference::OK_LOCAL_SCALE,
                    state,
                    addr(&self.next) as *mut f32,
                    s,
                )
            };
            cuda_check(code, "Ok-Topk threshold adaptation kernel launch")?;
        }
        Ok(())
    }
}
