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
//!
#![doc = include_str!("../../../docs/tuning.md")]

pub mod timing;

pub use crate::coll::allreduce::online::OnlineTuning;
pub use timing::{CandidateTime, Measurement, MAX_SAMPLES};

use crate::coll::allreduce::algo::AllreduceAlgo;
use crate::coll::allreduce::Allreduce;
use crate::coll::op::{ReduceOp, Reducible};
use crate::core::buffer::SymView;
use crate::core::error::Result;
use crate::core::runtime::Nvshmem;
use crate::team::Team;
use cudarc::driver::CudaStream;
use std::time::Duration;
use timing::{measurement, Timer};

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
    /// A candidate called `name` that enqueues one call with `run`.
    pub fn new(
        name: impl Into<String>,
        run: impl FnMut(&CudaStream) -> Result<()> + 'a,
    ) -> UserCandidate<'a> {
        UserCandidate {
            name: name.into(),
            run: Box::new(run),
        }
    }

    /// The candidate's name.
    pub fn name(&self) -> &str {
        &self.name
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
