//! Shared helpers of the trainer tests: a small deterministic text, tiny run configurations,
//! and a thread-per-PE runner on the CPU backend that returns what each PE saw.
#![allow(dead_code)]

// The library's GPU-test helpers: gpu_test!, skip(), runtime().
#[path = "../../../tests/common/mod.rs"]
mod library;

#[allow(unused_imports)]
pub use library::*;

use nvsh_gpt::backend::CpuBackend;
use nvsh_gpt::comm::LocalComm;
use nvsh_gpt::config::{ModelConfig, StageSplit};
use nvsh_gpt::data::Dataset;
use nvsh_gpt::schedule::ScheduleKind;
use nvsh_gpt::session::SessionOptions;
use nvsh_gpt::trainer::{RunConfig, Trainer};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Runs this build's `nvsh-gpt` with `args`.
pub fn run_gpt(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_nvsh-gpt"))
        .args(args)
        .output()
        .expect("run nvsh-gpt")
}

/// A command's standard output, then its standard error.
pub fn text_of(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// An empty directory of this test process under the temporary directory.
pub fn workdir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("nvsh-gpt-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The tiny model of the CLI tests: 2 layers, 2 heads, width 16, context 8, 4 micro-batches
/// of 2 sequences.
pub const TINY_MODEL_ARGS: &[&str] = &[
    "--layers",
    "2",
    "--heads",
    "2",
    "--width",
    "16",
    "--context",
    "8",
    "-b",
    "2",
    "-m",
    "4",
];

/// No validation, one validation batch at the end, no sample, a 60 s wait limit: the quiet
/// end of a CLI test's run.
pub const QUIET_RUN_ARGS: &[&str] = &[
    "--val-every",
    "0",
    "--val-batches",
    "1",
    "--sample-tokens",
    "0",
    "--timeout-ms",
    "60000",
];

/// About `n` bytes of pseudo-English (the trainer's generated corpus).
pub fn text(n: usize, seed: u64) -> Vec<u8> {
    nvsh_gpt::data::generated_text(n, seed)
}

/// A tiny model: `layers` blocks of width 16, 2 heads, context 8.
pub fn tiny(layers: usize, tied: bool) -> ModelConfig {
    ModelConfig {
        n_layer: layers,
        n_head: 2,
        n_embd: 16,
        block_size: 8,
        vocab: 256,
        tied,
    }
}

/// A run of `model` with `pp` x `dp` PEs, 2 sequences per micro-batch, `micro` per step.
pub fn run_config(
    model: ModelConfig,
    pp: usize,
    dp: usize,
    micro: usize,
    schedule: ScheduleKind,
) -> RunConfig {
    let split = StageSplit::balanced(model.n_layer, pp).unwrap();
    RunConfig {
        model,
        micro_batch: 2,
        micro_batches: micro,
        steps: 1000,
        lr: 3e-3,
        min_lr: 3e-4,
        warmup: 2,
        weight_decay: 0.1,
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        clip: 1.0,
        dense_steps: 0,
        seed: 7,
        pp,
        dp,
        schedule,
        split,
        val_batches: 3,
        max_seconds: None,
        timeout: Duration::from_secs(60),
    }
}

/// Options of a session that saves a set to `prefix` (`save`) or resumes from it (`resume`):
/// a line every step, no validation.
pub fn save_resume_options(prefix: &Path, save: bool, resume: bool) -> SessionOptions {
    SessionOptions {
        val_every: 0,
        save: save.then(|| prefix.to_path_buf()),
        resume: resume.then(|| prefix.to_path_buf()),
        print_every: 1,
        ..Default::default()
    }
}

/// The tiny corpus as a dataset.
pub fn dataset() -> Arc<Dataset> {
    Arc::new(Dataset::from_bytes(&text(20_000, 3), 0.1, 8).unwrap())
}

/// What one PE ended with.
#[derive(Debug, Clone)]
pub struct PeOutcome {
    pub losses: Vec<f64>,
    pub norms: Vec<f64>,
    /// (wait, bubble, transfer) percentages of each step.
    pub shares: Vec<(f64, f64, f64)>,
    pub val: f64,
    /// Parameters by tensor name.
    pub params: BTreeMap<String, Vec<f32>>,
    pub sample: Option<Vec<u8>>,
}

/// Runs `steps` training steps on every PE (threads, CPU backend), then one evaluation and,
/// if `sample` > 0, greedy sampling of that many tokens.
pub fn run_cpu(run: &RunConfig, data: Arc<Dataset>, steps: usize, sample: usize) -> Vec<PeOutcome> {
    let comms = LocalComm::world(run.pp, run.dp, run.micro_batches.min(8), run.timeout).unwrap();
    let handles: Vec<_> = comms
        .into_iter()
        .map(|comm| {
            let (run, data) = (run.clone(), data.clone());
            std::thread::spawn(move || {
                let be = CpuBackend::new();
                let mut tr = Trainer::new(&be, comm, run, data).unwrap();
                let mut losses = Vec::new();
                let mut norms = Vec::new();
                let mut shares = Vec::new();
                for _ in 0..steps {
                    let r = tr.train_step().unwrap();
                    losses.push(r.loss);
                    norms.push(r.grad_norm);
                    shares.push((r.wait_pct, r.bubble_pct, r.transfer_pct));
                }
                let val = tr.evaluate().unwrap();
                let p = tr.params().unwrap();
                let params = tr
                    .model
                    .layout
                    .tensors
                    .iter()
                    .map(|t| (t.name.clone(), p[t.offset..t.offset + t.len].to_vec()))
                    .collect();
                let sample = if sample > 0 {
                    tr.generate(b"The ", sample, 0.0).unwrap()
                } else {
                    None
                };
                PeOutcome {
                    losses,
                    norms,
                    shares,
                    val,
                    params,
                    sample,
                }
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Largest relative difference of two sequences (|a - b| / max(|a|, |b|, floor)).
pub fn max_rel(a: &[f64], b: &[f64], floor: f64) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / x.abs().max(y.abs()).max(floor))
        .fold(0.0, f64::max)
}

// ------------------------------------------------------------------ TF32 shown on

/// 1 + 2^-13: exact in FP32; TF32 keeps 10 mantissa bits, so it reads 1 whether the tensor
/// cores truncate the low bits or round them (2^-13 is under half of TF32's 2^-10 step).
/// Times a weight of 1, summed over C in FP32, FP32 gives exactly C + C * 2^-13 and TF32 gives
/// exactly C.
pub const TF32_LOST: f32 = 1.0 + 1.0 / 8192.0;
/// Large enough that cuBLAS takes a tensor-core kernel when TF32 is allowed.
pub const TF32_SHAPE: usize = 256;

/// Every element of `got` is exactly `want`, else a panic naming the first that is not.
pub fn assert_every(what: &str, got: &[f32], want: f32) {
    let bad = got.iter().position(|&x| x != want);
    assert!(
        bad.is_none(),
        "{what}: element {} is {} (want exactly {want})",
        bad.unwrap_or(0),
        got[bad.unwrap_or(0)]
    );
}
