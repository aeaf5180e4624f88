//! The training loop of one PE: a stage of one pipeline replica. Every PE runs the same code;
//! the [`Comm`] joins them. One step:
//!
//! 1. draw the step's data (every PE draws the same windows: no token transfers needed);
//! 2. run the schedule's forward and backward actions (receives, compute, sends, all
//!    stream-ordered; receive waits timed with marks around them);
//! 3. average gradients over data-parallel replicas, sum the tied embedding's gradient between
//!    the first and the last stage, and compute this stage's sum of squared gradients;
//! 4. the step's single host synchronisation: read that sum and the losses, and sum a small
//!    vector of per-PE statistics over all PEs (loss, norm, timings, stop flag);
//! 5. clip by the global norm and apply AdamW (decayed and non-decayed groups).

use crate::backend::Backend;
use crate::checkpoint::{hash_f32, Checkpoint, CkptHeader, ScheduleSettings};
pub use crate::comm::stats_len;
use crate::comm::{Comm, Group, Reduce, STAT_SCALARS};
use crate::config::{ModelConfig, StageSplit, Topology};
use crate::data::{val_batch, Dataset, Loader};
use crate::error::{GptError, Result};
use crate::lr::LrSchedule;
use crate::model::{Dims, Head, StageModel};
use crate::op_args::{Adamw, AdamwStep};
use crate::params::{check_arena, StageLayout};
use crate::rng::{seed_for, Rng};
use crate::schedule::{actions, max_in_flight, Action, ScheduleKind};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Hyperparameters and layout of a run (the same on every PE).
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub model: ModelConfig,
    /// Sequences per micro-batch.
    pub micro_batch: usize,
    /// Micro-batches per step (per replica).
    pub micro_batches: usize,
    /// Nominal length of the run (the learning-rate schedule's horizon).
    pub steps: usize,
    pub lr: f32,
    pub min_lr: f32,
    pub warmup: usize,
    pub weight_decay: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    /// Global-norm clip (0 disables).
    pub clip: f32,
    /// With sparse averaging (`--grad-compress`): the first steps are averaged densely.
    pub dense_steps: usize,
    pub seed: u64,
    pub pp: usize,
    pub dp: usize,
    pub schedule: ScheduleKind,
    pub split: StageSplit,
    /// Validation batches (of `micro_batch` sequences) per evaluation.
    pub val_batches: usize,
    /// Stop after this many seconds of training (all PEs agree at a step boundary).
    pub max_seconds: Option<f64>,
    /// Longest host wait for a peer.
    pub timeout: Duration,
}

impl RunConfig {
    /// Tokens of one step over all replicas.
    pub fn tokens_per_step(&self) -> usize {
        self.dp * self.micro_batches * self.micro_batch * self.model.block_size
    }

    pub fn lr_schedule(&self) -> LrSchedule {
        LrSchedule {
            max_lr: self.lr,
            min_lr: self.min_lr,
            warmup: self.warmup,
            total: self.steps,
        }
    }

    /// Checks what the model config does not cover.
    pub fn validate(&self) -> Result<()> {
        self.model.validate()?;
        let bad = |m: String| Err(GptError::Config(m));
        if self.micro_batch == 0 || self.micro_batches == 0 {
            return bad("--micro-batch-size and --micro-batches must be at least 1".into());
        }
        if self.split.stages() != self.pp
            || self.split.layers().iter().sum::<usize>() != self.model.n_layer
        {
            return bad(format!(
                "the split {:?} does not cover {} layers over {} stages",
                self.split.layers(),
                self.model.n_layer,
                self.pp
            ));
        }
        let finite_at_least = |x: f32, min: f32| x.is_finite() && x >= min;
        if !finite_at_least(self.lr, f32::MIN_POSITIVE) || !finite_at_least(self.min_lr, 0.0) {
            return bad(format!(
                "--lr {} must be positive (and --min-lr-frac >= 0)",
                self.lr
            ));
        }
        if !(0.0..1.0).contains(&self.beta1) || !(0.0..1.0).contains(&self.beta2) {
            return bad(format!(
                "betas {} and {} must lie in [0, 1)",
                self.beta1, self.beta2
            ));
        }
        if !finite_at_least(self.clip, 0.0)
            || !finite_at_least(self.weight_decay, 0.0)
            || !finite_at_least(self.eps, f32::MIN_POSITIVE)
        {
            return bad("--clip and --weight-decay must be >= 0 and eps > 0".into());
        }
        if self.steps == 0 {
            return bad("--steps must be at least 1".into());
        }
        let n = self.micro_batch * self.model.block_size;
        if (n as u64) * (self.model.padded_vocab().max(4 * self.model.n_embd) as u64) >= (1 << 31)
            || (self.micro_batch * self.model.n_head) as u64 * (self.model.block_size as u64).pow(2)
                >= (1 << 31)
        {
            return bad(format!(
                "a micro-batch of {} x {} tokens makes tensors beyond the kernels' 32-bit \
                 indexing; use a smaller --micro-batch-size",
                self.micro_batch, self.model.block_size
            ));
        }
        Ok(())
    }

    /// The largest parameter count over stages (the symmetric gradient arena's size).
    pub fn max_stage_params(&self) -> usize {
        (0..self.pp)
            .map(|s| StageLayout::new(&self.model, &self.split, s).total)
            .max()
            .unwrap_or(0)
    }
}

/// What one step did, as every PE sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepReport {
    /// 1-based step.
    pub step: usize,
    pub loss: f64,
    pub lr: f32,
    pub grad_norm: f64,
    pub ms: f64,
    pub tok_s: f64,
    pub wait_pct: f64,
    pub bubble_pct: f64,
    pub transfer_pct: f64,
    /// This PE's sparse averaging of the step (None: dense).
    pub sparse: Option<crate::comm::SparseStats>,
    /// Some PE reached --max-seconds, or was interrupted: everyone stops after this step.
    pub stop: bool,
    /// Some PE got Ctrl-C or SIGTERM ([`crate::interrupt`]): the stop is an interruption.
    pub interrupted: bool,
}

/// Per-PE statistics summed over all PEs once per step ([`stats_len`] values per PE): these
/// scalars, then per micro-batch the receive waits and send durations.
const STAT_NORM2: usize = 0;
const STAT_LOSS: usize = 1;
const STAT_COUNT: usize = 2;
const STAT_STOP: usize = 3;
const STAT_INTERRUPT: usize = 4;
/// Per-micro-batch series after the scalars, each `micro_batches` long.
const SERIES_FWD_WAIT: usize = 0;
const SERIES_BWD_WAIT: usize = 1;
const SERIES_FWD_SEND: usize = 2;
const SERIES_BWD_SEND: usize = 3;

/// Index of micro-batch `i` of `series` in one PE's statistics.
fn series_at(series: usize, micro_batches: usize, i: usize) -> usize {
    STAT_SCALARS + series * micro_batches + i
}

/// One PE's trainer.
pub struct Trainer<'a, B: Backend, C: Comm<B>> {
    pub be: &'a B,
    pub comm: C,
    pub run: RunConfig,
    pub topo: Topology,
    pub model: StageModel,
    data: Arc<Dataset>,
    loader: Loader,
    plan: Vec<Action>,
    /// Steps completed.
    pub step: usize,
    started: Instant,
}

impl<'a, B: Backend, C: Comm<B>> Trainer<'a, B, C> {
    /// Builds this PE's stage: allocations (collective where symmetric), initial weights.
    pub fn new(be: &'a B, mut comm: C, run: RunConfig, data: Arc<Dataset>) -> Result<Self> {
        run.validate()?;
        data.check_vocab(run.model.vocab)?;
        let topo = comm.topology();
        if topo.pp != run.pp || topo.dp != run.dp {
            return Err(GptError::Config(format!(
                "the job has pp={} dp={} but the run asks for pp={} dp={}",
                topo.pp, topo.dp, run.pp, run.dp
            )));
        }
        let stage = topo.stage();
        let layout = StageLayout::new(&run.model, &run.split, stage);
        check_arena(&layout)?;
        let grads = comm.alloc_grads(be, run.max_stage_params())?;
        let slots = max_in_flight(run.schedule, stage, run.pp, run.micro_batches);
        let dims = Dims {
            b: run.micro_batch,
            t: run.model.block_size,
        };
        let init = layout.init(run.seed);
        let model = StageModel::new(
            be,
            &run.model,
            layout,
            topo.is_first(),
            topo.is_last(),
            dims,
            run.micro_batches,
            slots,
            grads,
        )?;
        be.upload_f32(model.params, &init)?;
        let plan = actions(run.schedule, stage, run.pp, run.micro_batches);
        Ok(Trainer {
            be,
            comm,
            loader: Loader::new(run.seed),
            run,
            topo,
            model,
            data,
            plan,
            step: 0,
            started: Instant::now(),
        })
    }

    /// Restarts the clock of `--max-seconds` (call when training begins).
    pub fn start_clock(&mut self) {
        self.started = Instant::now();
    }

    /// Seconds since [`Trainer::start_clock`].
    pub fn elapsed_s(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Runs one training step.
    pub fn train_step(&mut self) -> Result<StepReport> {
        let t_begin = Instant::now();
        let be = self.be;
        let run = self.run.clone();
        let (m, d) = (run.micro_batches, self.model.dims);
        let n = d.n();
        let batch =
            self.loader
                .next_step(&self.data, m * d.b, d.t, self.topo.replica(), self.topo.dp);
        if self.model.first {
            be.upload_i32(self.model.tokens, &batch.inputs)?;
        }
        if self.model.last {
            be.upload_i32(self.model.targets, &batch.targets)?;
        }
        let total = self.model.layout.total;
        be.zero(self.model.grads, total)?;
        // Mean over every token of the step (this replica; replicas are averaged below).
        let scale = 1.0 / (m * n) as f32;
        let slots = self.model.slots();
        self.comm.time_sends();
        // Marks around each receive: how long the compute stream waited for it.
        let mut waits = Vec::with_capacity(self.plan.len());
        for &action in &self.plan {
            let (a0, a1);
            match action {
                Action::Forward(i) => {
                    let slot = i % slots;
                    self.model.reuse_slot(be, &mut self.comm, slot)?;
                    a0 = be.mark()?;
                    self.model.forward_recv(be, &mut self.comm, slot, d)?;
                    a1 = be.mark()?;
                    self.model
                        .forward_compute(be, slot, i, d, Head::Train { scale })?;
                    self.model.forward_send(be, &mut self.comm, slot, d)?;
                }
                Action::Backward(i) => {
                    let (slot, ring) = (i % slots, i % 2);
                    a0 = be.mark()?;
                    self.model.backward_recv(be, &mut self.comm, ring)?;
                    a1 = be.mark()?;
                    self.model.backward_compute(be, slot, i, ring)?;
                    self.model.backward_send(be, &mut self.comm, ring)?;
                }
            }
            waits.push((action, a0, a1));
        }
        self.comm.join_sends(be)?;
        self.reduce_gradients()?;
        let lo = &self.model.layout;
        be.sum_squares(
            self.model.norm,
            self.model.grads.at(lo.shared_prefix),
            total - lo.shared_prefix,
        )?;

        // The step's one synchronisation point.
        let mut norm2 = [0.0f32];
        be.download_f32(self.model.norm, &mut norm2)?;
        self.comm.check()?;
        let per_pe = stats_len(m);
        let mut stats = vec![0.0f64; self.topo.pp * self.topo.dp * per_pe];
        let mine = &mut stats[self.topo.pe * per_pe..(self.topo.pe + 1) * per_pe];
        mine[STAT_NORM2] = norm2[0] as f64;
        if self.model.last {
            let mut losses = vec![0.0f32; m * n];
            be.download_f32(self.model.losses, &mut losses)?;
            mine[STAT_LOSS] = losses.iter().map(|&x| x as f64).sum();
            mine[STAT_COUNT] = (m * n) as f64;
        }
        let mut sends = self.comm.send_times_ms(be)?.into_iter();
        for (action, a0, a1) in &waits {
            // Forward actions receive except on the first stage and send except on the last;
            // backward ones the other way round. Sends come back in plan order.
            let (first, last) = (self.model.first, self.model.last);
            let (wait, send, receives, sends_here, i) = match *action {
                Action::Forward(i) => (SERIES_FWD_WAIT, SERIES_FWD_SEND, !first, !last, i),
                Action::Backward(i) => (SERIES_BWD_WAIT, SERIES_BWD_SEND, !last, !first, i),
            };
            if receives {
                mine[series_at(wait, m, i)] += be.elapsed_ms(a0, a1)?;
            }
            if sends_here {
                let ms = sends.next().ok_or_else(|| {
                    GptError::Comm("fewer timed sends than the schedule issued".into())
                })?;
                mine[series_at(send, m, i)] += ms;
            }
        }
        if sends.next().is_some() {
            return Err(GptError::Comm(
                "more timed sends than the schedule issued".into(),
            ));
        }
        if run
            .max_seconds
            .is_some_and(|limit| self.elapsed_s() >= limit)
        {
            mine[STAT_STOP] = 1.0;
        }
        if crate::interrupt::requested() {
            mine[STAT_INTERRUPT] = 1.0;
        }
        self.comm.allreduce_host(be, &mut stats)?;

        let at = |pe: usize, k: usize| stats[pe * per_pe + k];
        let pp = self.topo.pp;
        // Replicas hold identical gradients after averaging: the norm of one is the norm.
        let norm = (0..pp)
            .map(|s| at(self.topo.pe_of(s), STAT_NORM2))
            .sum::<f64>()
            .sqrt();
        let pes = 0..pp * self.topo.dp;
        let loss = pes.clone().map(|p| at(p, STAT_LOSS)).sum::<f64>()
            / pes.clone().map(|p| at(p, STAT_COUNT)).sum::<f64>();
        if !loss.is_finite() || !norm.is_finite() {
            return Err(GptError::Config(format!(
                "training diverged at step {} (loss {loss}, gradient norm {norm}); lower --lr \
                 or raise --warmup",
                self.step + 1
            )));
        }
        let interrupted = pes.clone().any(|p| at(p, STAT_INTERRUPT) > 0.0);
        let stop = interrupted || pes.clone().any(|p| at(p, STAT_STOP) > 0.0);

        let grad_scale = if run.clip > 0.0 && norm > run.clip as f64 {
            (run.clip as f64 / (norm + 1e-6)) as f32
        } else {
            1.0
        };
        let lr = run.lr_schedule().at(self.step);
        let t = (self.step + 1) as u32;
        let (p, g, mm, v) = (
            self.model.params,
            self.model.grads,
            self.model.m,
            self.model.v,
        );
        let nd = lo.n_decay;
        let step = AdamwStep {
            lr,
            beta1: run.beta1,
            beta2: run.beta2,
            eps: run.eps,
            weight_decay: run.weight_decay,
            t,
            grad_scale,
        };
        be.adamw(Adamw {
            params: p,
            grads: g,
            m: mm,
            v,
            n: nd,
            step,
        })?;
        if total > nd {
            be.adamw(Adamw {
                params: p.at(nd),
                grads: g.at(nd),
                m: mm.at(nd),
                v: v.at(nd),
                n: total - nd,
                step: AdamwStep {
                    weight_decay: 0.0,
                    ..step
                },
            })?;
        }
        self.step += 1;
        let sparse = if self.topo.dp > 1 {
            self.comm.sparse_stats(self.be)?
        } else {
            None
        };

        let ms = t_begin.elapsed().as_secs_f64() * 1e3;
        let (wait, bubble, transfer) = pipeline_shares(&stats, &run, ms);
        Ok(StepReport {
            step: self.step,
            loss,
            lr,
            grad_norm: norm,
            ms,
            tok_s: run.tokens_per_step() as f64 / (ms / 1e3),
            wait_pct: wait,
            bubble_pct: bubble,
            transfer_pct: transfer,
            sparse,
            stop,
            interrupted,
        })
    }

    /// Data-parallel averaging, then the tied embedding's sum (first + last stage).
    fn reduce_gradients(&mut self) -> Result<()> {
        let total = self.model.layout.total;
        if self.topo.dp > 1 {
            self.comm
                .sparse_averaging(self.step >= self.run.dense_steps);
            self.comm
                .allreduce_grads(self.be, Group::StageReplicas, 0, total, Reduce::Avg)?;
        }
        let cfg = &self.run.model;
        if cfg.tied && self.topo.pp > 1 && (self.topo.is_first() || self.topo.is_last()) {
            let len = cfg.padded_vocab() * cfg.n_embd;
            self.comm
                .allreduce_grads(self.be, Group::Tied, 0, len, Reduce::Sum)?;
        }
        Ok(())
    }

    /// Mean validation loss over `run.val_batches` batches (replicas share the batches out).
    /// Collective: every PE calls it at the same point.
    pub fn evaluate(&mut self) -> Result<f64> {
        let be = self.be;
        let d = self.model.dims;
        let n = d.n();
        let m = self.model.micro();
        let mine: Vec<usize> = (self.topo.replica()..self.run.val_batches)
            .step_by(self.topo.dp)
            .collect();
        let (mut sum, mut count) = (0.0f64, 0.0f64);
        // Losses of up to `m` batches collect on the device before one download.
        for chunk in mine.chunks(m) {
            for (k, &j) in chunk.iter().enumerate() {
                let batch = val_batch(&self.data, j, d.b, d.t);
                if self.model.first {
                    be.upload_i32(self.model.tokens.at(k * n), &batch.inputs)?;
                }
                if self.model.last {
                    be.upload_i32(self.model.targets.at(k * n), &batch.targets)?;
                }
                self.model.reuse_slot(be, &mut self.comm, 0)?;
                self.model.forward_recv(be, &mut self.comm, 0, d)?;
                self.model.forward_compute(be, 0, k, d, Head::Eval)?;
                self.model.forward_send(be, &mut self.comm, 0, d)?;
            }
            if self.model.last {
                let mut losses = vec![0.0f32; chunk.len() * n];
                be.download_f32(self.model.losses, &mut losses)?;
                sum += losses.iter().map(|&x| x as f64).sum::<f64>();
                count += losses.len() as f64;
            }
        }
        self.comm.join_sends(be)?;
        be.synchronize()?;
        self.comm.check()?;
        let mut v = [sum, count];
        self.comm.allreduce_host(be, &mut v)?;
        Ok(v[0] / v[1].max(1.0))
    }

    /// Samples `n_new` tokens after `prompt` with replica 0's pipeline (other replicas return
    /// at once). Returns the whole text on the last stage of replica 0, None elsewhere.
    /// `temperature` 0 picks the most likely token.
    pub fn generate(
        &mut self,
        prompt: &[u8],
        n_new: usize,
        temperature: f32,
    ) -> Result<Option<Vec<u8>>> {
        if self.topo.replica() != 0 {
            return Ok(None);
        }
        let be = self.be;
        let t_max = self.model.dims.t;
        let mut tokens: Vec<i32> = if prompt.is_empty() {
            vec![b'\n' as i32]
        } else {
            prompt.iter().map(|&b| b as i32).collect()
        };
        tokens
            .iter_mut()
            .for_each(|t| *t = (*t).min(self.run.model.vocab as i32 - 1));
        let mut rng = Rng::new(seed_for(self.run.seed, "sample"));
        let pp = self.topo.pp;
        for _ in 0..n_new {
            let window = &tokens[tokens.len().saturating_sub(t_max)..];
            let d = Dims {
                b: 1,
                t: window.len(),
            };
            if self.model.first {
                be.upload_i32(self.model.tokens, window)?;
            }
            self.model.reuse_slot(be, &mut self.comm, 0)?;
            self.model.forward_recv(be, &mut self.comm, 0, d)?;
            self.model.forward_compute(be, 0, 0, d, Head::Logits)?;
            self.model.forward_send(be, &mut self.comm, 0, d)?;
            let next = if self.model.last {
                let logits = self.model.logits_row(be, d.t - 1)?;
                let tok = sample(&logits, temperature, &mut rng);
                if pp > 1 {
                    be.upload_i32(self.model.sampled, &[tok])?;
                    self.comm.send_token(be, self.model.sampled)?;
                }
                tok
            } else if self.model.first {
                self.comm.recv_token(be, self.model.sampled)?;
                let mut t = [0i32];
                be.download_i32(self.model.sampled, &mut t)?;
                t[0]
            } else {
                0 // middle stages only need the length
            };
            tokens.push(next);
        }
        self.comm.join_sends(be)?;
        be.synchronize()?;
        self.comm.check()?;
        Ok(self
            .model
            .last
            .then(|| tokens.iter().map(|&t| t.clamp(0, 255) as u8).collect()))
    }

    /// This stage's state for a checkpoint (downloads; the step and loader state included).
    pub fn checkpoint(&self) -> Result<Checkpoint> {
        let n = self.model.layout.total;
        let mut params = vec![0.0; n];
        let mut m = vec![0.0; n];
        let mut v = vec![0.0; n];
        self.be.download_f32(self.model.params, &mut params)?;
        self.be.download_f32(self.model.m, &mut m)?;
        self.be.download_f32(self.model.v, &mut v)?;
        Ok(Checkpoint {
            header: CkptHeader {
                model: self.run.model.clone(),
                stages: self.topo.pp,
                stage: self.topo.stage(),
                layers: self.model.layout.layers.clone(),
                step: self.step as u64,
                loader_state: self.loader.state(),
                seed: self.run.seed,
                schedule: Some(ScheduleSettings {
                    steps: self.run.steps as u64,
                    warmup: self.run.warmup as u64,
                    micro_batches: self.run.micro_batches as u64,
                }),
                tied_hash: self.tied_copy(&params).map(hash_f32),
            },
            params,
            m,
            v,
        })
    }

    /// This stage's copy of the tied token embedding, when the pipeline keeps two (the first
    /// and the last stage of a tied model over several stages).
    pub fn tied_copy<'p>(&self, params: &'p [f32]) -> Option<&'p [f32]> {
        let lo = &self.model.layout;
        let two_copies = self.run.model.tied && self.topo.pp > 1;
        let t = lo.tensor("wte").filter(|_| two_copies)?;
        params.get(t.offset..t.offset + t.len)
    }

    /// Continues from a checkpoint of this stage.
    pub fn restore(&mut self, ck: &Checkpoint) -> Result<()> {
        let lo = &self.model.layout;
        ck.check_fits(
            &self.run.model,
            self.topo.pp,
            self.topo.stage(),
            &lo.layers,
            lo.total,
        )?;
        self.be.upload_f32(self.model.params, &ck.params)?;
        self.be.upload_f32(self.model.m, &ck.m)?;
        self.be.upload_f32(self.model.v, &ck.v)?;
        self.step = ck.header.step as usize;
        self.loader = Loader::from_state(ck.header.loader_state);
        self.be.synchronize()
    }

    /// The parameters of this stage (host copy).
    pub fn params(&self) -> Result<Vec<f32>> {
        let mut p = vec![0.0; self.model.layout.total];
        self.be.download_f32(self.model.params, &mut p)?;
        Ok(p)
    }

    /// Replaces this stage's parameters.
    pub fn set_params(&mut self, params: &[f32]) -> Result<()> {
        if params.len() != self.model.layout.total {
            return Err(GptError::Config(format!(
                "{} parameters given, the stage holds {}",
                params.len(),
                self.model.layout.total
            )));
        }
        self.be.upload_f32(self.model.params, params)
    }

    /// For gradient checks of a whole model on one PE (PP = 1, DP = 1): the mean loss of one
    /// step's batch (`micro_batches * micro_batch` sequences, row-major) under the current
    /// parameters and, if `with_grads`, its gradient (arena layout). Updates nothing.
    pub fn loss_and_grads(
        &mut self,
        inputs: &[i32],
        targets: &[i32],
        with_grads: bool,
    ) -> Result<(f64, Vec<f32>)> {
        if !(self.model.first && self.model.last) || self.topo.dp != 1 {
            return Err(GptError::Config(
                "loss_and_grads needs a single-stage, single-replica job".into(),
            ));
        }
        let be = self.be;
        let (m, d) = (self.model.micro(), self.model.dims);
        let n = d.n();
        if inputs.len() != m * n || targets.len() != m * n {
            return Err(GptError::Config(format!(
                "a batch of {} inputs and {} targets, expected {}",
                inputs.len(),
                targets.len(),
                m * n
            )));
        }
        be.upload_i32(self.model.tokens, inputs)?;
        be.upload_i32(self.model.targets, targets)?;
        let total = self.model.layout.total;
        be.zero(self.model.grads, total)?;
        let scale = 1.0 / (m * n) as f32;
        for i in 0..m {
            if with_grads {
                self.model
                    .forward_compute(be, 0, i, d, Head::Train { scale })?;
                self.model.backward_compute(be, 0, i, 0)?;
            } else {
                self.model.forward_compute(be, 0, i, d, Head::Eval)?;
            }
        }
        let mut losses = vec![0.0f32; m * n];
        be.download_f32(self.model.losses, &mut losses)?;
        let mut grads = Vec::new();
        if with_grads {
            grads = vec![0.0f32; total];
            be.download_f32(self.model.grads, &mut grads)?;
        }
        Ok((
            losses.iter().map(|&x| x as f64).sum::<f64>() / (m * n) as f64,
            grads,
        ))
    }
}

/// Draws a token from `logits` at `temperature` (0: the most likely).
pub fn sample(logits: &[f32], temperature: f32, rng: &mut Rng) -> i32 {
    let best = logits
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i);
    if temperature <= 0.0 {
        return best as i32;
    }
    let top = logits[best] as f64;
    let w: Vec<f64> = logits
        .iter()
        .map(|&l| ((l as f64 - top) / temperature as f64).exp())
        .collect();
    let mut u = rng.uniform() * w.iter().sum::<f64>();
    for (i, x) in w.iter().enumerate() {
        if u < *x {
            return i as i32;
        }
        u -= x;
    }
    best as i32
}

/// (wait, bubble, transfer) as percentages of a step of `ms`, from replica 0's statistics;
/// wait = bubble + transfer, each from measured intervals:
///
/// * wait: mean over stages of the time their compute streams waited on receives (events
///   around each receive);
/// * transfer: of each receive's wait, the part the message spent being sent: at most the
///   sender's send duration (events on its transfer stream from the send's start, once the data
///   was ready, to its completion). A send's duration includes waiting for a free slot at the
///   receiver, but then the receiver is behind and hardly waits for that message;
/// * bubble: the rest of each wait, when the sender had not produced the data yet (the
///   schedule's idle time, and any stage slower than its neighbours).
pub fn pipeline_shares(stats: &[f64], run: &RunConfig, ms: f64) -> (f64, f64, f64) {
    let (pp, m) = (run.pp, run.micro_batches);
    let per_pe = stats_len(m);
    let at = |pe: usize, series: usize, i: usize| stats[pe * per_pe + series_at(series, m, i)];
    let (mut wait, mut transfer) = (0.0, 0.0);
    for s in 0..pp {
        for i in 0..m {
            let fwd = at(s, SERIES_FWD_WAIT, i);
            let bwd = at(s, SERIES_BWD_WAIT, i);
            let fwd_send = if s > 0 {
                at(s - 1, SERIES_FWD_SEND, i)
            } else {
                0.0
            };
            let bwd_send = if s + 1 < pp {
                at(s + 1, SERIES_BWD_SEND, i)
            } else {
                0.0
            };
            wait += fwd + bwd;
            transfer += fwd.min(fwd_send) + bwd.min(bwd_send);
        }
    }
    let pct = |x: f64| {
        if ms > 0.0 {
            100.0 * x / ms / pp as f64
        } else {
            0.0
        }
    };
    (pct(wait), pct(wait - transfer), pct(transfer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_follows_the_distribution_and_greedy_picks_the_max() {
        let logits = [0.0f32, (3.0f32).ln(), f32::NEG_INFINITY, 0.0];
        let mut rng = Rng::new(1);
        assert_eq!(sample(&logits, 0.0, &mut rng), 1);
        let mut counts = [0usize; 4];
        for _ in 0..20_000 {
            counts[sample(&logits, 1.0, &mut rng) as usize] += 1;
        }
        // Probabilities 1/5, 3/5, 0, 1/5.
        assert_eq!(counts[2], 0);
        assert!(
            (counts[1] as f64 / 20_000.0 - 0.6).abs() < 0.02,
            "{counts:?}"
        );
        assert!(
            (counts[0] as f64 / 20_000.0 - 0.2).abs() < 0.02,
            "{counts:?}"
        );
    }

    #[test]
    fn shares_split_each_receive_wait_into_transfer_and_bubble() {
        let model = ModelConfig {
            n_layer: 2,
            n_head: 1,
            n_embd: 4,
            block_size: 4,
            vocab: 8,
            tied: true,
        };
        let run = RunConfig {
            model,
            micro_batch: 1,
            micro_batches: 4,
            steps: 1,
            lr: 1e-3,
            min_lr: 0.0,
            warmup: 0,
            weight_decay: 0.0,
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            clip: 1.0,
            dense_steps: 0,
            seed: 0,
            pp: 2,
            dp: 1,
            schedule: ScheduleKind::OneFOneB,
            split: StageSplit::balanced(2, 2).unwrap(),
            val_batches: 1,
            max_seconds: None,
            timeout: Duration::from_secs(1),
        };
        // Stage 0's forward sends take 2 ms each, stage 1's backward sends 1 ms. Stage 1 waits
        // 3 ms for forward message 0 (2 ms transfer, 1 ms bubble) and 0.5 ms for each other one
        // (a send longer than the wait: all transfer). Stage 0 waits 4 ms for backward message 0
        // (1 ms transfer, 3 ms bubble).
        let per_pe = stats_len(4);
        let mut stats = vec![0.0; 2 * per_pe];
        let mut set = |pe: usize, series: usize, i: usize, x: f64| {
            stats[pe * per_pe + series_at(series, 4, i)] = x;
        };
        set(1, SERIES_FWD_WAIT, 0, 3.0);
        for i in 0..4 {
            set(0, SERIES_FWD_SEND, i, 2.0);
            set(1, SERIES_BWD_SEND, i, 1.0);
        }
        for i in 1..4 {
            set(1, SERIES_FWD_WAIT, i, 0.5);
        }
        set(0, SERIES_BWD_WAIT, 0, 4.0);
        // Waits 3 + 1.5 + 4 = 8.5 ms, transfer 2 + 1.5 + 1 = 4.5 ms, bubble 4 ms; shares are
        // means over the 2 stages, of a 10 ms step.
        let (w, b, t) = pipeline_shares(&stats, &run, 10.0);
        assert!((w - 42.5).abs() < 1e-9, "{w}");
        assert!((t - 22.5).abs() < 1e-9, "{t}");
        assert!((b - 20.0).abs() < 1e-9, "{b}");
        assert!((w - b - t).abs() < 1e-9);
    }
}
