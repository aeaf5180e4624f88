//! Online tuning of an allreduce workspace (`NVSH_TUNE=online`): what it holds and how many
//! runs a size gets, over the shared timing ([`crate::coll::tuning::timing`]).

use crate::coll::allreduce::algo::AllreduceAlgo;
use crate::coll::tuning::timing::{Measurement, Timer};
use crate::core::element::Dtype;
use crate::core::error::Result;
use crate::core::runtime::Nvshmem;
use crate::team::Team;
use std::time::Duration;

/// One online tuning, as [`crate::Allreduce::online_tunings`] reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct OnlineTuning {
    /// The call's message size, bytes.
    pub bytes: usize,
    /// The size bucket the choice was recorded for (bytes, inclusive).
    pub bucket: (u64, u64),
    /// The call's element type.
    pub dtype: Dtype,
    /// The algorithm recorded: the fastest measured.
    pub choice: AllreduceAlgo,
    /// Wall time the tuning took on this PE (enqueueing, the runs, the MAX, the waits).
    pub wall: Duration,
    /// Every candidate's time, as measured.
    pub measurement: Measurement,
}

/// What an allreduce workspace tunes online with.
pub(crate) struct Online<'nv> {
    pub timer: Timer<'nv>,
    pub budget_ms: u64,
    pub records: Vec<OnlineTuning>,
}

impl<'nv> Online<'nv> {
    /// Over `team`; collective over the world.
    pub(crate) fn new(nv: &'nv Nvshmem, team: Option<&Team<'_>>) -> Result<Online<'nv>> {
        Ok(Online {
            timer: Timer::new(nv, team)?,
            budget_ms: crate::core::tuning::budget_ms_from_env()?,
            records: Vec::new(),
        })
    }
}

/// Runs per candidate for an online tuning of a `bytes` message among `candidates` within
/// `budget_ms`: from an estimate of a call's time that depends on the size only (10 us plus
/// the bytes at 50 GB/s, plus a barrier), so that every PE arrives at the same count. 1 to 5.
pub(crate) fn online_runs(bytes: usize, candidates: usize, budget_ms: u64) -> usize {
    let call_us = 10.0 + bytes as f64 / 50e3 + 10.0;
    let per_run = call_us * candidates.max(1) as f64;
    // One untimed run each comes first.
    let runs = (budget_ms as f64 * 1000.0 / per_run) as usize;
    runs.saturating_sub(1).clamp(1, 5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn online_runs_shrink_with_the_message_and_stay_in_range() {
        assert_eq!(online_runs(4096, 4, 5), 5);
        assert_eq!(online_runs(1 << 20, 4, 5), 5);
        assert!(online_runs(16 << 20, 4, 5) < 5);
        assert_eq!(online_runs(256 << 20, 4, 5), 1);
        assert_eq!(online_runs(256 << 20, 4, 1000), 5);
    }
}
