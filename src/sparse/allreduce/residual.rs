//! Error feedback: the residual (and DGC's velocity) that keeps what was not sent. A sparse
//! call adds its gradient to it before the selection (after DGC's local clipping and momentum
//! correction) and clears what it sent after; the caller reads it, clears it or loads it from
//! a checkpoint, each of which restarts the schedule.

use super::exchange::Exchange;
use super::launch::{addr, zero_at};
use super::options::SparseMethod;
use super::state::SparseAllreduce;
use crate::core::error::{Error, Result};
use crate::core::result::cuda_check;
use crate::core::stream::raw_stream;
use crate::sparse::{value_code, SparseIndex, SparseValue};
use crate::sys;
use cudarc::driver::{CudaSlice, CudaStream};
use std::ffi::c_void;
use std::sync::Arc;

impl<T: SparseValue, I: SparseIndex> SparseAllreduce<'_, T, I> {
    /// The residual (None without error feedback): what this member has not sent yet. Save it
    /// with a checkpoint (`stream.clone_dtoh(r)`) and give it back to
    /// [`SparseAllreduce::load_residual`] on resume, or that gradient mass is lost.
    pub fn residual(&self) -> Option<&CudaSlice<T>> {
        self.residual.as_ref()
    }

    /// Momentum correction ([`SparseOptions::momentum`]): this member's velocity (None
    /// without): what it accumulates into the residual on the next call, times the momentum.
    ///
    /// [`SparseOptions::momentum`]: super::SparseOptions::momentum
    pub fn velocity(&self) -> Option<&CudaSlice<T>> {
        self.velocity.as_ref()
    }

    /// Sets the residual to zero, on `stream` (e.g. after a checkpoint restore that has no
    /// residual). The schedule starts again: the next sparse call re-estimates every threshold
    /// (`topk_aopt`, Ok-Topk) and the regions (a dense warm-up that has ended is not
    /// repeated). Call it on every member alike (the re-estimate is collective).
    pub fn clear_residual(&mut self, stream: &Arc<CudaStream>) -> Result<()> {
        if let Some(r) = &mut self.residual {
            stream.memset_zeros(r)?;
        }
        if let Some(u) = &mut self.velocity {
            stream.memset_zeros(u)?;
        }
        self.restart_schedule();
        Ok(())
    }

    /// Replaces the residual with `host` (a copy of [`SparseAllreduce::residual`] saved with a
    /// checkpoint), on `stream`: a resumed run then sends what the interrupted one had not sent
    /// yet, and its next call gives what the uninterrupted run's would. `host` may be dropped
    /// when this returns. The schedule starts again, as with
    /// [`SparseAllreduce::clear_residual`]: thresholds and region boundaries are not part of
    /// the residual, so the next sparse call re-estimates them (a run resumed between two
    /// re-estimates differs from the uninterrupted one until its next re-estimate); call it on
    /// every member alike. Errors, with the residual left as it was: [`Error::NoErrorFeedback`] when created
    /// without error feedback, [`Error::ResidualLength`] when `host` does not hold
    /// [`SparseAllreduce::len`] elements.
    pub fn load_residual(&mut self, host: &[T], stream: &Arc<CudaStream>) -> Result<()> {
        const LOAD: &str = "SparseAllreduce::load_residual";
        let len = self.n;
        let Some(r) = &mut self.residual else {
            return Err(Error::NoErrorFeedback { what: LOAD });
        };
        if host.len() != len {
            return Err(Error::ResidualLength {
                what: LOAD,
                len,
                got: host.len(),
            });
        }
        stream.memcpy_htod(host, r)?;
        if let Some(u) = &mut self.velocity {
            stream.memset_zeros(u)?;
        }
        self.restart_schedule();
        Ok(())
    }

    /// The sparse schedule starts again (the state it would reuse belongs to another run):
    /// the next sparse call re-estimates everything. A dense warm-up that has ended is not
    /// repeated; one under way starts over.
    fn restart_schedule(&mut self) {
        let warmup = self.opts.dense_warmup as u64;
        self.calls = if self.calls >= warmup { warmup } else { 0 };
    }

    /// The density ramp ([`SparseOptions::ramp_from`]) continues from sparse call `done` of an
    /// earlier run (a resume: the sparse calls that run made) instead of starting over: the
    /// next sparse call takes `density_at(done)`, the one after `density_at(done + 1)`. Clears
    /// and loads restart the other intervals but keep this offset. Call it on every member
    /// alike, after [`SparseAllreduce::load_residual`].
    ///
    /// [`SparseOptions::ramp_from`]: super::SparseOptions::ramp_from
    pub fn set_ramp_offset(&mut self, done: u64) {
        self.ramp_offset = done;
    }

    /// Error feedback before the selection: DGC's local clipping factor of the gradient, the
    /// momentum correction's velocity, the gradient added to the residual. Returns where the
    /// selection reads: the residual with error feedback, else the gradient (or `out`, holding
    /// it clipped).
    ///
    /// # Safety
    /// `grad` and `out` are device memory of n elements each, ordered on `stream`.
    pub(super) unsafe fn selection_source(
        &self,
        grad: u64,
        out: u64,
        p: i32,
        stream: &CudaStream,
    ) -> Result<u64> {
        let s = raw_stream(stream);
        let n = self.n;
        let dtype = value_code::<T>();
        // DGC's local clipping: the factor of this member's gradient, on the device.
        let clip = match &self.clip {
            Some((scratch, factor)) => {
                let f = addr(factor);
                // SAFETY: grad n elements (this function's contract), the workspace its words,
                // the factor one f32.
                let code = unsafe {
                    sys::nvshmemrs_sparse_clip_factor(
                        grad as *const c_void,
                        n as u64,
                        self.opts.local_clip_norm(p as usize),
                        dtype,
                        addr(scratch) as *mut f64,
                        scratch.len() as u64,
                        f as *mut f32,
                        s,
                    )
                };
                cuda_check(code, "local clipping norm kernel launch")?;
                Some(f)
            }
            None => None,
        };
        let clip_into = |d: u64, f: u64, accumulate: i32| -> Result<()> {
            // SAFETY: d and grad n elements (this function's contract; the residual's and
            // `out`'s length), f one f32, on `stream`.
            let code = unsafe {
                sys::nvshmemrs_sparse_clip_apply(
                    d as *mut c_void,
                    grad as *const c_void,
                    n as u64,
                    f as *const f32,
                    accumulate,
                    dtype,
                    s,
                )
            };
            cuda_check(code, "local clipping kernel launch")
        };
        let accumulate = |d: u64, src: u64, what: &'static str| -> Result<()> {
            // SAFETY: d and src n elements (this function's contract; the residual's, the
            // velocity's and the gradient's length), on `stream`.
            let code = unsafe {
                sys::nvshmemrs_sparse_accumulate(
                    d as *mut c_void,
                    src as *const c_void,
                    n as u64,
                    dtype,
                    s,
                )
            };
            cuda_check(code, what)
        };
        if let (Some(u), Some(r)) = (&self.velocity, &self.residual) {
            // Momentum correction: u = momentum x u + g (clipped first), then residual += u.
            let (u, r) = (addr(u), addr(r));
            // SAFETY: u, r and grad n elements (this function's contract; their lengths).
            let code = unsafe {
                sys::nvshmemrs_sparse_scale(
                    u as *mut c_void,
                    n as u64,
                    self.opts.momentum,
                    dtype,
                    s,
                )
            };
            cuda_check(code, "momentum kernel launch")?;
            match clip {
                Some(f) => clip_into(u, f, 1)?,
                None => accumulate(u, grad, "momentum accumulation kernel launch")?,
            }
            accumulate(r, u, "error-feedback accumulation kernel launch")?;
        }
        // The selection's source: residual + g with error feedback, else g (clipped: scaled
        // by the factor first; with momentum correction the residual holds it already).
        let src = match (&self.residual, clip) {
            (Some(r), _) if self.velocity.is_some() => addr(r),
            (Some(r), Some(f)) => {
                let r = addr(r);
                clip_into(r, f, 1)?;
                r
            }
            (None, Some(f)) => {
                // Into `out`: only the selection below reads the source, and every exchange
                // writes `out` whole after it.
                clip_into(out, f, 0)?;
                out
            }
            (None, None) => grad,
            (Some(r), None) => {
                let r = addr(r);
                accumulate(r, grad, "error-feedback accumulation kernel launch")?;
                r
            }
        };
        Ok(src)
    }

    /// Error feedback after the selection: what this member sent leaves its residual, and
    /// DGC's momentum factor masking clears the velocity there. gTop-k and Ok-Topk learn what
    /// counts as sent only in their exchange, which clears it then.
    ///
    /// # Safety
    /// `stream` is the one this call's selection was enqueued on (its set is read here).
    pub(super) unsafe fn clear_sent(&self, stream: &CudaStream) -> Result<()> {
        let n = self.n;
        let mine = self.mine.raw();
        // What is sent leaves the residual (gTop-k and Ok-Topk: only what made it into the
        // global set, below).
        let zero_sent = self.residual.is_some()
            && !matches!(self.ex, Exchange::Tree(_))
            && self.opts.method != SparseMethod::OkTopK;
        if let (true, Some(r)) = (zero_sent, &self.residual) {
            // SAFETY: the set's capacity and n elements of residual.
            unsafe { zero_at::<T, I>(mine, addr(r), n, stream, "residual update kernel launch")? };
            if let Some(u) = &self.velocity {
                // DGC's momentum factor masking: where the residual was cleared.
                // SAFETY: the set's capacity and n elements of velocity.
                unsafe {
                    zero_at::<T, I>(mine, addr(u), n, stream, "momentum masking kernel launch")?
                };
            }
        }
        Ok(())
    }
}
