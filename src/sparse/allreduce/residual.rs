//! Error feedback's residual (and DGC's velocity): read, cleared, or loaded from a checkpoint,
//! each of which restarts the schedule.

use super::state::SparseAllreduce;
use crate::core::error::{Error, Result};
use crate::sparse::{SparseIndex, SparseValue};
use cudarc::driver::{CudaSlice, CudaStream};
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
}
