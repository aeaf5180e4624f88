//! A whole run on one PE: resume, the step loop with validation and checkpoints, the progress
//! lines and JSON records (leader only), the sampled text (last stage of replica 0) and the
//! summary. Generic over backend and comm, so the GPU binary and the CPU simulation share it.

use crate::backend::Backend;
use crate::checkpoint::{
    commit_latest, latest_path, latest_set, resume_path, set_dir, set_stage_path, sync_dir,
    Checkpoint,
};
use crate::comm::Comm;
use crate::error::{GptError, Result};
use crate::log::{summarize, StepRecord};
use crate::residual::{residual_files, residual_path, ResidualFile, ResidualHeader, ResidualSpec};
use crate::trainer::Trainer;
use nvsh_plot::AtomicFile;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// What a run does besides training.
#[derive(Clone, Debug, Default)]
pub struct SessionOptions {
    /// Validation every this many steps (0: only at the end).
    pub val_every: usize,
    /// Per-step JSON records (written by the leader).
    pub log_json: Option<PathBuf>,
    /// Checkpoint prefix: a set `PREFIX.step-N/` and the pointer `PREFIX.latest` at the end (and
    /// every `save_every` steps); see [`crate::checkpoint`].
    pub save: Option<PathBuf>,
    pub save_every: usize,
    /// Checkpoint prefix to continue from.
    pub resume: Option<PathBuf>,
    /// Tokens to sample at the end (0: none).
    pub sample_tokens: usize,
    pub prompt: String,
    pub temperature: f32,
    /// Progress line every this many steps (the first and last step always print).
    pub print_every: usize,
}

/// What a run produced on this PE.
#[derive(Clone, Debug, Default)]
pub struct SessionResult {
    /// Every step's record (all PEs know them: the statistics are summed over PEs).
    pub records: Vec<StepRecord>,
    /// The sampled text (last stage of replica 0).
    pub sample: Option<Vec<u8>>,
    /// Stopped by Ctrl-C or SIGTERM ([`crate::interrupt`]), after saving when asked to.
    pub interrupted: bool,
}

fn io<T>(path: &std::path::Path, r: std::io::Result<T>) -> Result<T> {
    r.map_err(|source| GptError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// "12.5%, 3m 05s left" after `done` of `total` steps in `elapsed` seconds: the steps' pace,
/// or the `--max-seconds` limit when that comes first.
fn progress(done: usize, total: usize, elapsed: f64, max_seconds: Option<f64>) -> String {
    let mut fraction = done as f64 / total.max(1) as f64;
    let mut left = (done > 0).then(|| elapsed / done as f64 * total.saturating_sub(done) as f64);
    if let Some(limit) = max_seconds.filter(|m| *m > 0.0) {
        fraction = fraction.max(elapsed / limit);
        left = Some(left.map_or(limit - elapsed, |l| l.min(limit - elapsed)));
    }
    nvshmem::tools::progress_label(fraction, left)
}

/// Checks that `path` can be written where the run will write it, by creating (and, on drop,
/// removing) the temporary file a write to it would go through ([`AtomicFile`]).
fn check_writable(path: &std::path::Path, flag: &str) -> Result<()> {
    AtomicFile::create(path).map(drop).map_err(|e| {
        GptError::Config(format!(
            "{flag}: cannot write {} ({e}); fix the path: checked before training, so \
             nothing was trained",
            path.display()
        ))
    })
}

fn human(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

/// Runs the session. `out` receives the leader's progress (and the sample on the PE that has
/// it); other PEs write nothing there.
pub fn run_session<B: Backend, C: Comm<B>>(
    tr: &mut Trainer<'_, B, C>,
    opts: &SessionOptions,
    out: &mut dyn Write,
) -> Result<SessionResult> {
    let topo = tr.topo;
    let leader = topo.is_leader();
    let stdout_err = |e: std::io::Error| GptError::Io {
        path: "<stdout>".into(),
        source: e,
    };
    if let Some(prefix) = &opts.resume {
        let path = resume_path(prefix, topo.stage(), topo.pp)?;
        let ck = Checkpoint::load(&path)?;
        tr.restore(&ck)?;
        agree_on_resume(tr, &ck)?;
        let residual = resume_residual(tr, prefix)?;
        // The sparse steps the saved run made (its steps past --dense-steps): a density ramp
        // goes on from there.
        let sparse_steps = tr.step.saturating_sub(tr.run.dense_steps);
        tr.comm.continue_ramp(sparse_steps as u64);
        if leader {
            writeln!(out, "resumed from {} at step {}", path.display(), tr.step)
                .map_err(stdout_err)?;
            if let Some(line) = residual {
                writeln!(out, "{line}").map_err(stdout_err)?;
            }
            if let Some(was) = ck.header.schedule {
                let now = [tr.run.steps, tr.run.warmup, tr.run.micro_batches].map(|x| x as u64);
                let then = [was.steps, was.warmup, was.micro_batches];
                for ((name, a), b) in ["--steps", "--warmup", "--micro-batches"]
                    .iter()
                    .zip(now)
                    .zip(then)
                    .filter(|((_, a), b)| a != b)
                {
                    writeln!(
                        out,
                        "note: {name} is {a} now, {b} in the run that saved it (the learning-rate \
                         schedule and batches follow the new value)"
                    )
                    .map_err(stdout_err)?;
                }
            }
        }
    }
    let run = tr.run.clone();
    if leader {
        let m = &run.model;
        writeln!(
            out,
            "model: {} layers, {} heads, width {}, context {}, vocab {} ({}), {:.2}M parameters | \
             pp {} x dp {}, split {:?}, schedule {} | {} micro-batches of {} sequences = {} \
             tokens/step",
            m.n_layer,
            m.n_head,
            m.n_embd,
            m.block_size,
            m.vocab,
            if m.tied { "tied head" } else { "untied head" },
            m.num_params() as f64 / 1e6,
            run.pp,
            run.dp,
            run.split.layers(),
            run.schedule,
            run.micro_batches,
            run.micro_batch,
            run.tokens_per_step()
        )
        .map_err(stdout_err)?;
    }
    // Every output this PE will write is opened or probed before the first step, and the PEs
    // agree on the outcome: a mistyped path must not cost a whole run, and a PE that stops
    // alone would leave its peers waiting.
    let mut problem = None;
    if let Some(prefix) = &opts.save {
        // The sets and the pointer are created beside the pointer's name; each PE probes a name
        // of its own (PEs may share a file system, or a process).
        let mut probe = latest_path(prefix).into_os_string();
        probe.push(format!(".pe{}", topo.pe));
        problem = check_writable(std::path::Path::new(&probe), "--save").err();
    }
    let mut log = None;
    if let (Some(path), true) = (&opts.log_json, leader) {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(opts.resume.is_some())
            .truncate(opts.resume.is_none())
            .open(path);
        match io(path, f) {
            Ok(f) => log = Some((path.clone(), f)),
            Err(e) => problem = problem.or(Some(e)),
        }
    }
    let wait = tr.run.timeout;
    agree_no_problem(tr, problem, wait, |n| {
        GptError::Config(format!(
            "{n} other PE(s) cannot write their outputs (each reported its path); nothing was \
             trained"
        ))
    })?;

    let mut result = SessionResult::default();
    let mut last_val: Option<f64> = None;
    tr.start_clock();
    let print_every = opts.print_every.max(1);
    while tr.step < run.steps {
        let rep = tr.train_step()?;
        let last = rep.stop || tr.step >= run.steps;
        let val = if (opts.val_every > 0 && rep.step % opts.val_every == 0) || last {
            Some(tr.evaluate()?)
        } else {
            None
        };
        let rec = StepRecord {
            schema: crate::log::LOG_SCHEMA,
            step: rep.step as u64,
            loss: rep.loss,
            val_loss: val,
            lr: rep.lr as f64,
            ms: rep.ms,
            tok_s: rep.tok_s,
            elapsed_s: tr.elapsed_s(),
            grad_norm: rep.grad_norm,
            wait_pct: rep.wait_pct,
            bubble_pct: rep.bubble_pct,
            transfer_pct: rep.transfer_pct,
            sparse_selected: rep.sparse.map(|s| s.selected),
            sparse_k: rep.sparse.map(|s| s.k),
            sparse_threshold: rep.sparse.and_then(|s| s.threshold).map(f64::from),
            sparse_included: rep.sparse.and_then(|s| s.included),
            sparse_clip_factor: rep.sparse.and_then(|s| s.clip_factor).map(f64::from),
        };
        if let Some((path, f)) = &mut log {
            io(path, writeln!(f, "{}", rec.to_json()))?;
        }
        if leader && (rep.step == 1 || last || rep.step % print_every == 0) {
            writeln!(
                out,
                "step {:>5}/{} ({}) | loss {:.6} | lr {:.2e} | {:.1} ms | {} tok/s | norm {:.3} | \
                 wait {:.1}% (bubble {:.1}%, transfer {:.1}%)",
                rep.step,
                run.steps,
                progress(tr.step, run.steps, tr.elapsed_s(), run.max_seconds),
                rep.loss,
                rep.lr,
                rep.ms,
                human(rep.tok_s),
                rep.grad_norm,
                rep.wait_pct,
                rep.bubble_pct,
                rep.transfer_pct
            )
            .map_err(stdout_err)?;
            if let Some(sp) = rep.sparse {
                let t = sp
                    .threshold
                    .map_or(String::new(), |t| format!(" | threshold {t:.3e}"));
                let inc = sp
                    .included
                    .map_or(String::new(), |c| format!(" | included {c}"));
                let clip = sp
                    .clip_factor
                    .map_or(String::new(), |f| format!(" | local clip x{f:.3}"));
                writeln!(
                    out,
                    "      sparse: selected {} of k {}{t}{inc}{clip}",
                    sp.selected, sp.k
                )
                .map_err(stdout_err)?;
            }
        }
        if let (Some(v), true) = (val, leader) {
            writeln!(
                out,
                "step {:>5}: val loss {v:.6} ({:.1} s)",
                rep.step,
                tr.elapsed_s()
            )
            .map_err(stdout_err)?;
        }
        last_val = val.or(last_val);
        result.records.push(rec);
        if let Some(prefix) = &opts.save {
            if opts.save_every > 0 && rep.step % opts.save_every == 0 && !last {
                save(tr, prefix)?;
            }
        }
        if rep.stop && leader {
            let why = if rep.interrupted {
                "interrupted (Ctrl-C or SIGTERM)"
            } else {
                "--max-seconds reached"
            };
            let then = if opts.save.is_some() {
                "; saving the checkpoints, then exiting"
            } else {
                " (no --save: nothing is saved)"
            };
            writeln!(out, "stopping: {why} after step {}{then}", rep.step).map_err(stdout_err)?;
        }
        result.interrupted = rep.interrupted;
        if rep.stop {
            break;
        }
    }
    if let Some((path, f)) = &mut log {
        io(path, f.flush())?;
    }
    if let Some(prefix) = &opts.save {
        save(tr, prefix)?;
        if leader {
            let residuals = match tr.comm.residual_spec() {
                Some(_) => format!(", {} error-feedback residual file(s)", topo.pp * topo.dp),
                None => String::new(),
            };
            writeln!(
                out,
                "saved {} ({} stage file(s){residuals}); {} points to it",
                set_dir(prefix, tr.step as u64).display(),
                topo.pp,
                latest_path(prefix).display()
            )
            .map_err(stdout_err)?;
        }
    }
    // An interrupted run ends as soon as its checkpoints are written.
    if opts.sample_tokens > 0 && !result.interrupted {
        // Only replica 0 samples; the other replicas wait here for it, past the run's limit,
        // instead of running into the frees at the end (collective, under the deadline) alone.
        let sampled = tr.generate(opts.prompt.as_bytes(), opts.sample_tokens, opts.temperature);
        let (text, problem) = match sampled {
            Ok(text) => (text, None),
            Err(e) => (None, Some(e)),
        };
        let wait = sample_wait(&tr.run, opts.sample_tokens);
        agree_no_problem(tr, problem, wait, |n| {
            GptError::Comm(format!(
                "{n} other PE(s) failed while sampling (each said why)"
            ))
        })?;
        if let Some(text) = &text {
            writeln!(
                out,
                "sample ({} tokens, temperature {}):\n{}\n--- end of sample",
                opts.sample_tokens,
                opts.temperature,
                String::from_utf8_lossy(text)
            )
            .map_err(stdout_err)?;
        }
        result.sample = text;
    }
    if leader && !result.records.is_empty() {
        let recs = &result.records;
        let s = summarize(recs, usize::from(recs.len() > 1));
        let best = s
            .best_val
            .map_or("none".into(), |(v, t)| format!("{v:.4} at {t:.1} s"));
        writeln!(
            out,
            "summary: {} steps in {:.1} s | {:.1} ms/step, {} tok/s (step 1 excluded) | last loss \
             {:.4} | val loss {} (best {best}) | receive wait {:.1}% of step time: bubble {:.1}%, \
             transfer on the critical path {:.1}%",
            recs.len(),
            tr.elapsed_s(),
            s.mean_ms,
            human(s.tok_s),
            s.last_loss,
            last_val.map_or("none".into(), |v| format!("{v:.4}")),
            s.wait_pct,
            s.bubble_pct,
            s.transfer_pct
        )
        .map_err(stdout_err)?;
    }
    Ok(result)
}

/// How long the PEs wait for each other after a save: the run's limit plus the time to write
/// the largest stage's file (parameters and both moments) and an error-feedback residual of
/// that size at 20 MB/s, and at least 10 minutes more, so that a slow file system does not run
/// out the deadline of the PEs (other replicas, faster stages) that wait for the writers; a
/// dead PE still ends the wait.
pub fn save_wait(run: &crate::trainer::RunConfig) -> Duration {
    let bytes = 16.0 * run.max_stage_params() as f64;
    run.timeout + Duration::from_secs_f64(bytes / 20e6).max(Duration::from_secs(600))
}

/// How long the PEs wait for replica 0's sample of `tokens` tokens: the run's limit plus a
/// second per token (a forward pass over the context window each, far less on every model this
/// trainer builds), and at least 10 minutes more; a dead PE still ends the wait.
pub fn sample_wait(run: &crate::trainer::RunConfig, tokens: usize) -> Duration {
    run.timeout + Duration::from_secs(tokens as u64).max(Duration::from_secs(600))
}

/// Saves one set: replica 0 of every stage writes its file into the step's directory, every
/// PE that keeps an error-feedback residual writes that ([`crate::residual`]), the PEs agree
/// that every write succeeded, and only then the leader moves `PREFIX.latest` to the set. A PE
/// whose write failed fails the save on every PE, and the pointer stays on the last complete
/// set. Collective.
fn save<B: Backend, C: Comm<B>>(
    tr: &mut Trainer<'_, B, C>,
    prefix: &std::path::Path,
) -> Result<()> {
    let dir = set_dir(prefix, tr.step as u64);
    let problem = write_set_files(tr, &dir).err();
    let wait = save_wait(&tr.run);
    agree_no_problem(tr, problem, wait, |n| {
        GptError::Checkpoint(format!(
            "{n} other PE(s) could not write their files of {} (each reported why); {} still \
             points to the last complete set",
            dir.display(),
            latest_path(prefix).display()
        ))
    })?;
    if tr.topo.is_leader() {
        commit_latest(prefix, &dir)?;
    }
    Ok(())
}

/// This PE's files of the set in `dir`: its stage's (replica 0) and its residual (where it
/// keeps one), each synced, then the directory's entries.
fn write_set_files<B: Backend, C: Comm<B>>(
    tr: &mut Trainer<'_, B, C>,
    dir: &std::path::Path,
) -> Result<()> {
    let stage = tr.topo.replica() == 0;
    let spec = tr.comm.residual_spec();
    if !stage && spec.is_none() {
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(|source| GptError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    if stage {
        tr.checkpoint()?
            .save(&set_stage_path(dir, tr.topo.stage(), tr.topo.pp))?;
    }
    if let Some(spec) = spec {
        let values = tr.comm.residual(tr.be)?;
        let topo = tr.topo;
        ResidualFile {
            header: residual_header(tr, spec),
            values,
        }
        .save(&residual_path(dir, topo.pe, topo.pp * topo.dp))?;
    }
    sync_dir(dir)
}

/// This PE's residual header for a set at the trainer's step.
fn residual_header<B: Backend, C: Comm<B>>(
    tr: &Trainer<'_, B, C>,
    spec: ResidualSpec,
) -> ResidualHeader {
    let t = tr.topo;
    ResidualHeader {
        spec,
        pp: t.pp,
        dp: t.dp,
        pe: t.pe,
        step: tr.step as u64,
    }
}

/// Resume's error-feedback residuals, once the stages agreed on one set (collective). Each PE
/// that keeps a residual loads its own file of the set `PREFIX.latest` names, refused unless it
/// fits ([`ResidualFile::check_fits`]); a set with no residual file leaves the residuals zero.
/// A set with residual files that this run would drop (dense averaging, no error feedback,
/// another layout) is refused: their gradient mass would be lost without a word. The PEs agree
/// on the outcome; returns the leader's line saying what was loaded, if this run keeps a
/// residual.
fn resume_residual<B: Backend, C: Comm<B>>(
    tr: &mut Trainer<'_, B, C>,
    prefix: &std::path::Path,
) -> Result<Option<String>> {
    let set = latest_set(prefix)?;
    let spec = tr.comm.residual_spec();
    let mut load = || -> Result<bool> {
        // The version 1 layout predates residual files: there is no set to hold them.
        let Some(dir) = &set else {
            return Ok(false);
        };
        let files = residual_files(dir)?;
        let Some(first) = files.first() else {
            return Ok(false);
        };
        let drop_hint = format!(
            "or delete {}/residual-*.ckpt to continue without them (what they hold is then \
             never applied)",
            dir.display()
        );
        let Some(spec) = spec.clone() else {
            let saved = ResidualFile::load(first)?.header.spec.flag();
            return Err(GptError::Checkpoint(format!(
                "{} holds the error-feedback residuals of --grad-compress {saved} ({} file(s)), \
                 which this run would drop: it keeps none (dense averaging, \
                 --no-error-feedback, --dp 1 or --cpu); resume with --grad-compress {saved} \
                 (with error feedback), {drop_hint}",
                dir.display(),
                files.len()
            )));
        };
        let topo = tr.topo;
        let own = residual_path(dir, topo.pe, topo.pp * topo.dp);
        if !files.contains(&own) {
            let h = ResidualFile::load(first)?.header;
            return Err(GptError::Checkpoint(format!(
                "{} holds error-feedback residuals of another job ({} written by PE {} of \
                 --pp {} x --dp {}) but not {}, this PE's; resume with the --pp and --dp that \
                 saved it, {drop_hint}",
                dir.display(),
                first.display(),
                h.pe,
                h.pp,
                h.dp,
                own.display()
            )));
        }
        let file = ResidualFile::load(&own)?;
        file.check_fits(&residual_header(tr, spec), &own)?;
        tr.comm.load_residual(tr.be, &file.values)?;
        Ok(true)
    };
    let (loaded, problem) = match load() {
        Ok(l) => (l, None),
        Err(e) => (false, Some(e)),
    };
    let wait = tr.run.timeout;
    agree_no_problem(tr, problem, wait, |n| {
        GptError::Checkpoint(format!(
            "{n} other PE(s) could not resume their error-feedback residual (each said why)"
        ))
    })?;
    let Some(spec) = spec else {
        return Ok(None);
    };
    let from = set.as_ref().map_or_else(
        || format!("{} (the version 1 layout)", prefix.display()),
        |d| d.display().to_string(),
    );
    Ok(Some(if loaded {
        format!(
            "resumed the error-feedback residuals of --grad-compress {} ({} PE(s)) from {from}",
            spec.flag(),
            tr.topo.pp * tr.topo.dp
        )
    } else {
        format!(
            "note: {from} holds no error-feedback residual (a dense run's set, or one saved \
             before nvsh-gpt kept them): --grad-compress {} continues with a zero residual",
            spec.flag()
        )
    }))
}

/// Every PE learns whether any PE had a problem (collective): this PE's own error first, else
/// `others(n)` when `n` other PEs had one, so no PE goes on alone.
fn agree_no_problem<B: Backend, C: Comm<B>>(
    tr: &mut Trainer<'_, B, C>,
    problem: Option<GptError>,
    wait: Duration,
    others: impl FnOnce(f64) -> GptError,
) -> Result<()> {
    let mut failed = [f64::from(u8::from(problem.is_some()))];
    tr.comm.allreduce_host_within(tr.be, &mut failed, wait)?;
    match problem {
        Some(e) => Err(e),
        None if failed[0] > 0.0 => Err(others(failed[0])),
        None => Ok(()),
    }
}

/// Words each PE contributes to the resume agreement: step, loader state and seed (each as two
/// exact 32-bit halves), whether it holds a tied-embedding copy, and that copy's hash.
const AGREE_WORDS: usize = 9;

fn halves(x: u64) -> [f64; 2] {
    [(x >> 32) as f64, (x & 0xffff_ffff) as f64]
}

fn whole(h: &[f64]) -> u64 {
    ((h[0] as u64) << 32) | h[1] as u64
}

/// Errors on every PE unless the stages just loaded form one set: the same step, loader state
/// and seed everywhere, and the two copies of a tied embedding equal. Catches sets mixed by hand
/// (or written by a job killed between stages, in the version 1 layout). Collective.
fn agree_on_resume<B: Backend, C: Comm<B>>(
    tr: &mut Trainer<'_, B, C>,
    ck: &Checkpoint,
) -> Result<()> {
    let (pe, n) = (tr.topo.pe, tr.topo.pp * tr.topo.dp);
    let h = &ck.header;
    let mut v = vec![0.0; n * AGREE_WORDS];
    let mine = &mut v[pe * AGREE_WORDS..(pe + 1) * AGREE_WORDS];
    mine[0..2].copy_from_slice(&halves(h.step));
    mine[2..4].copy_from_slice(&halves(h.loader_state));
    mine[4..6].copy_from_slice(&halves(h.seed));
    let tied = tr.tied_copy(&ck.params).map(crate::checkpoint::hash_f32);
    mine[6] = f64::from(u8::from(tied.is_some()));
    mine[7..9].copy_from_slice(&halves(tied.unwrap_or(0)));
    tr.comm.allreduce_host(tr.be, &mut v)?;
    let of = |p: usize, k: usize| whole(&v[p * AGREE_WORDS + k..p * AGREE_WORDS + k + 2]);
    let pp = tr.topo.pp;
    let stage_of = |p: usize| p % pp;
    let mut why = Vec::new();
    for (k, what) in [(0, "step"), (2, "data-loader state"), (4, "seed")] {
        if let Some(p) = (1..n).find(|&p| of(p, k) != of(0, k)) {
            why.push(format!(
                "stage {} is at {what} {}, stage {} at {}",
                stage_of(0),
                of(0, k),
                stage_of(p),
                of(p, k)
            ));
        }
    }
    let copies: Vec<usize> = (0..n).filter(|&p| v[p * AGREE_WORDS + 6] > 0.0).collect();
    if let Some(&p) = copies.iter().find(|&&p| of(p, 7) != of(copies[0], 7)) {
        why.push(format!(
            "the tied token embedding differs between stage {} and stage {}",
            stage_of(copies[0]),
            stage_of(p)
        ));
    }
    if why.is_empty() {
        Ok(())
    } else {
        Err(GptError::Checkpoint(format!(
            "the checkpoints loaded are not one set ({}): resume from one save's files \
             (PREFIX.latest points to the last complete one)",
            why.join("; ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_follows_the_steps_or_the_time_limit() {
        // 50 of 200 steps in 10 s: 30 s left at this pace.
        assert_eq!(progress(50, 200, 10.0, None), "25.0%, 30s left");
        // A 20 s limit comes first: 50% of it used, 10 s left.
        assert_eq!(progress(50, 200, 10.0, Some(20.0)), "50.0%, 10s left");
        assert_eq!(progress(0, 200, 0.0, None), "0.0%");
    }
}
