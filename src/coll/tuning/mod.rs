//! Autotuning: times candidate implementations of a collective on the caller's buffers and
//! picks the fastest, the same on every PE.
//!
//! Each run of a candidate starts after a team barrier on the stream (so the PEs start it
//! together) and is timed with CUDA events around what it enqueues: the time is GPU time in
//! stream order. The runs are queued without waiting on the host, so work a candidate does on
//! the host is not timed once the GPU has a backlog; after N runs per candidate, every run's time is
//! replaced by its maximum over the PEs (our own allreduce, MAX), and a candidate's time is the
//! median of those. Every PE then holds the same numbers and picks the same winner by
//! construction. Every wait (the barriers, the candidates' kernels, the MAX) has the workspace
//! deadline: a PE that stalls ends the tuning in [`crate::Error::Timeout`] naming it.
//!
//! [`Tuner`] is the explicit form (`nvsh tune` and applications, which can add their own
//! candidates, [`UserCandidate`]); `NVSH_TUNE=online` runs the same timing inside
//! [`crate::Allreduce::run`] the first time `Auto` meets a size bucket (see
//! [`crate::core::tuning`] for the tables and files).

use crate::coll::allreduce::{Allreduce, AllreduceAlgo};
use crate::coll::op::{ReduceOp, Reducible};
use crate::coll::team_barrier::TeamBarrier;
use crate::core::buffer::{SymView, SymmetricBuffer};
use crate::core::element::Dtype;
use crate::core::error::{Error, Result};
use crate::core::runtime::Nvshmem;
use crate::team::Team;
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaStream};
use std::time::Duration;

/// Most timed runs one measurement holds (candidates x runs).
pub const MAX_SAMPLES: usize = 256;

/// A candidate of the caller's own: a name and a closure that enqueues one call of its
/// collective on the stream it is given, on buffers it holds. What it enqueues is timed, not
/// what it does on the host (see the module documentation). Every PE must pass the same
/// candidates in the same order, and each call must be collective like ours (or the barrier
/// before the next run waits for it).
pub struct UserCandidate<'a> {
    name: String,
    run: Box<RunFn<'a>>,
}

/// What a [`UserCandidate`] runs: one call enqueued on the stream given.
type RunFn<'a> = dyn FnMut(&CudaStream) -> Result<()> + 'a;

impl<'a> UserCandidate<'a> {
    pub fn new(
        name: impl Into<String>,
        run: impl FnMut(&CudaStream) -> Result<()> + 'a,
    ) -> UserCandidate<'a> {
        UserCandidate {
            name: name.into(),
            run: Box::new(run),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

/// One candidate's timing.
#[derive(Debug, Clone, PartialEq)]
pub struct CandidateTime {
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
    pub candidates: Vec<CandidateTime>,
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

/// Times candidates of a collective over a team: see the module documentation. Create it on
/// every PE at the same point (collective over the world, like a workspace).
pub struct Tuner<'nv> {
    timer: Timer<'nv>,
    /// The MAX over PEs; never tunes itself.
    max: Allreduce<'nv>,
    warmup: usize,
    runs: usize,
}

/// Untimed runs per candidate by default (first launches load kernels).
pub const WARMUP_DEFAULT: usize = 2;
/// Timed runs per candidate by default.
pub const RUNS_DEFAULT: usize = 10;

impl Nvshmem {
    /// A [`Tuner`] over all PEs. Collective.
    pub fn tuner(&self) -> Result<Tuner<'_>> {
        Tuner::new(self, Some(&self.team_world()))
    }
}

impl<'nv> Tuner<'nv> {
    /// Over `team` (None on PEs in no team of the split). Collective over the world.
    pub fn new(nv: &'nv Nvshmem, team: Option<&Team<'_>>) -> Result<Tuner<'nv>> {
        Ok(Tuner {
            timer: Timer::new(nv, team)?,
            max: nv.allreduce_workspace_untuned(team, 4096)?,
            warmup: WARMUP_DEFAULT,
            runs: RUNS_DEFAULT,
        })
    }

    /// Untimed and timed runs per candidate (at least one timed; candidates x runs at most
    /// [`MAX_SAMPLES`]).
    pub fn set_runs(&mut self, warmup: usize, runs: usize) {
        self.warmup = warmup;
        self.runs = runs;
    }

    /// How long each wait may take ([`crate::Error::Timeout`] after it).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timer.set_timeout(timeout);
        self.max.set_timeout(timeout);
    }

    /// Times candidates `names[i]`, each run enqueued by `run(i, stream)`, and returns the
    /// measurement, the same on every PE. Every PE passes the same names in the same order.
    pub fn measure(
        &mut self,
        names: &[&str],
        mut run: impl FnMut(usize, &CudaStream) -> Result<()>,
        stream: &CudaStream,
    ) -> Result<Measurement> {
        let runs = self.runs;
        let local = self
            .timer
            .run(names.len(), self.warmup, runs, &mut run, stream)?;
        let samples = self.timer.samples(local.len())?;
        self.max
            .run_in_place(samples, ReduceOp::Max, AllreduceAlgo::OneShot, stream)?;
        self.max.sync(stream)?;
        let maxed = samples.to_vec()?;
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        Ok(measurement(&names, &local, &maxed, runs))
    }

    /// Times our allreduce algorithms `algos` on `ar`, then `user`'s candidates, on `input` ->
    /// `output` with `op`. Candidates are named by [`AllreduceAlgo::name`] and
    /// [`UserCandidate::name`]. The output (in place: the buffer) is undefined afterwards.
    #[allow(clippy::too_many_arguments)]
    pub fn tune_allreduce<'a, 'b, T: Reducible>(
        &mut self,
        ar: &mut Allreduce<'_>,
        input: impl Into<SymView<'a, T>>,
        output: impl Into<SymView<'b, T>>,
        op: ReduceOp,
        algos: &[AllreduceAlgo],
        user: &mut [UserCandidate<'_>],
        stream: &CudaStream,
    ) -> Result<Measurement> {
        let (input, output) = (input.into(), output.into());
        let names: Vec<&str> = algos
            .iter()
            .map(|a| a.name())
            .chain(user.iter().map(|u| u.name.as_str()))
            .collect::<Vec<_>>();
        let names: Vec<String> = names.into_iter().map(str::to_string).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let k = algos.len();
        let m = self.measure(
            &refs,
            |i, s| {
                if i < k {
                    ar.run(input, output, op, algos[i], s).map(|_| ())
                } else {
                    (user[i - k].run)(s)
                }
            },
            stream,
        )?;
        ar.check()?;
        Ok(m)
    }
}

/// One online tuning, as [`crate::Allreduce::online_tunings`] reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct OnlineTuning {
    /// The call's message size, bytes.
    pub bytes: usize,
    /// The size bucket the choice was recorded for (bytes, inclusive).
    pub bucket: (u64, u64),
    pub dtype: Dtype,
    pub choice: AllreduceAlgo,
    /// Wall time the tuning took on this PE (enqueueing, the runs, the MAX, the waits).
    pub wall: Duration,
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

pub(crate) use crate::core::stream::is_capturing;

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

    #[test]
    fn online_runs_shrink_with_the_message_and_stay_in_range() {
        assert_eq!(online_runs(4096, 4, 5), 5);
        assert_eq!(online_runs(1 << 20, 4, 5), 5);
        assert!(online_runs(16 << 20, 4, 5) < 5);
        assert_eq!(online_runs(256 << 20, 4, 5), 1);
        assert_eq!(online_runs(256 << 20, 4, 1000), 5);
    }
}
