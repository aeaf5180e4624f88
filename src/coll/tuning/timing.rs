//! The timing every tuning shares ([`crate::Tuner`] and allreduce's online tuning): each run
//! of a candidate after a team barrier on the stream, between two CUDA events; every run's time
//! then its maximum over the PEs, and a candidate's time the median of those (see
//! [`crate::coll::tuning`]).

use crate::coll::team_barrier::TeamBarrier;
use crate::core::buffer::{SymView, SymmetricBuffer};
use crate::core::error::{Error, Result};
use crate::core::runtime::Nvshmem;
use crate::team::Team;
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaStream};
use std::time::Duration;

/// Most timed runs one measurement holds (candidates x runs).
pub const MAX_SAMPLES: usize = 256;

/// One candidate's timing.
#[derive(Debug, Clone, PartialEq)]
pub struct CandidateTime {
    /// The candidate's name.
    pub name: String,
    /// Median over runs of each run's time on its slowest PE, microseconds: the same on every PE.
    pub us: f64,
    /// This PE's own median, microseconds (before the maximum over PEs).
    pub local_us: f64,
    /// Each run's time on its slowest PE, microseconds.
    pub runs_us: Vec<f64>,
}

/// What a measurement found: every candidate's time, and the fastest (the first of equals).
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    /// Every candidate's time, in the order given.
    pub candidates: Vec<CandidateTime>,
    /// Index of the fastest in `candidates`.
    pub best: usize,
}

impl Measurement {
    /// The fastest candidate.
    pub fn winner(&self) -> &CandidateTime {
        &self.candidates[self.best]
    }

    /// The time of the candidate called `name`, microseconds.
    pub fn time_of(&self, name: &str) -> Option<f64> {
        self.candidates
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.us)
    }
}

/// Median of a non-empty list.
fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The candidates' times from `local` (this PE's, run-major per candidate) and `maxed` (each
/// run's maximum over PEs), `runs` per candidate; the winner is the lowest median of the maxed
/// times, the first on ties, so PEs holding the same `maxed` pick alike.
pub(crate) fn measurement(
    names: &[String],
    local: &[f64],
    maxed: &[f64],
    runs: usize,
) -> Measurement {
    let candidates: Vec<CandidateTime> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let r = i * runs..(i + 1) * runs;
            CandidateTime {
                name: name.clone(),
                us: median(&maxed[r.clone()]),
                local_us: median(&local[r.clone()]),
                runs_us: maxed[r].to_vec(),
            }
        })
        .collect();
    let best = (0..candidates.len())
        .min_by(|&a, &b| candidates[a].us.total_cmp(&candidates[b].us))
        .unwrap_or(0);
    Measurement { candidates, best }
}

/// The timing engine [`Tuner`] and online tuning share: the barrier, CUDA events, and the
/// symmetric buffer the times are maxed in (by the owner's allreduce).
pub(crate) struct Timer<'nv> {
    nv: &'nv Nvshmem,
    barrier: TeamBarrier<'nv>,
    samples: SymmetricBuffer<'nv, f64>,
    /// Start and stop events, reused from one measurement to the next.
    events: Vec<(CudaEvent, CudaEvent)>,
}

impl<'nv> Timer<'nv> {
    /// Over `team` (None on PEs in none). Collective over the world.
    pub(crate) fn new(nv: &'nv Nvshmem, team: Option<&Team<'_>>) -> Result<Timer<'nv>> {
        Ok(Timer {
            nv,
            barrier: TeamBarrier::new(nv, team)?,
            samples: nv.alloc_zeroed::<f64>(MAX_SAMPLES)?,
            events: Vec::new(),
        })
    }

    pub(crate) fn set_timeout(&mut self, timeout: Duration) {
        self.barrier.set_timeout(timeout);
    }

    /// Runs candidates `0..n` in order, each `warmup` times untimed and `runs` times timed,
    /// every run after a barrier; waits for them and returns this PE's times (microseconds,
    /// run-major per candidate), also left in the samples buffer for the maximum over PEs.
    pub(crate) fn run(
        &mut self,
        n: usize,
        warmup: usize,
        runs: usize,
        run: &mut dyn FnMut(usize, &CudaStream) -> Result<()>,
        stream: &CudaStream,
    ) -> Result<Vec<f64>> {
        let samples = n * runs;
        if n == 0 || runs == 0 || samples > MAX_SAMPLES {
            return Err(Error::CollectiveShape {
                what: "tuning",
                detail: format!(
                    "{n} candidate(s) x {runs} run(s): pass 1 to {MAX_SAMPLES} timed runs in all, \
                     at least one candidate and one run"
                ),
            });
        }
        let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
        while self.events.len() < samples {
            let ctx = self.nv.context();
            self.events
                .push((ctx.new_event(flags)?, ctx.new_event(flags)?));
        }
        for c in 0..n {
            for _ in 0..warmup {
                self.barrier.run(stream)?;
                run(c, stream)?;
            }
            for r in 0..runs {
                let (start, stop) = &self.events[c * runs + r];
                self.barrier.run(stream)?;
                start.record(stream)?;
                run(c, stream)?;
                stop.record(stream)?;
            }
        }
        // Bounded: every barrier and every kernel of ours has a deadline.
        self.barrier.sync(stream)?;
        let mut local = Vec::with_capacity(samples);
        for (start, stop) in &self.events[..samples] {
            local.push(start.elapsed_ms(stop)? as f64 * 1000.0);
        }
        self.samples.view(0..samples)?.copy_from_host(&local)?;
        Ok(local)
    }

    /// The first `len` samples, for the owner's allreduce (MAX, in place).
    pub(crate) fn samples(&self, len: usize) -> Result<SymView<'_, f64>> {
        self.samples.view(0..len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slowest_pe_of_each_run_decides_and_ties_go_to_the_first() {
        let names: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        // 3 runs each; this PE saw b fast, but another PE was slow in b's runs.
        let local = [5.0, 5.0, 5.0, 1.0, 1.0, 1.0, 4.0, 4.0, 4.0];
        let maxed = [5.0, 6.0, 5.0, 9.0, 9.0, 8.0, 4.0, 5.0, 4.0];
        let m = measurement(&names, &local, &maxed, 3);
        assert_eq!(m.winner().name, "c");
        assert_eq!(m.time_of("b"), Some(9.0));
        assert_eq!(m.candidates[1].local_us, 1.0);
        assert_eq!(m.candidates[0].runs_us, vec![5.0, 6.0, 5.0]);
        let tie = measurement(&names[..2], &[1.0, 1.0], &[2.0, 2.0], 1);
        assert_eq!(tie.best, 0);
        assert_eq!(median(&[3.0, 1.0, 2.0, 10.0]), 2.5);
    }
}
