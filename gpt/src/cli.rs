//! Command-line interface of `nvsh-gpt` (clap), and its translation into a run configuration.
//! Defaults are the Tiny Shakespeare recipe: 6 layers, width 384, 6 heads, context 256,
//! 64 sequences per step as 4 micro-batches of 16, AdamW lr 1e-3 with 100 warm-up steps and
//! cosine decay, weight decay 0.1, clipping at 1.0.

use crate::config::{ModelConfig, StageSplit};
use crate::error::{GptError, Result};
use crate::schedule::ScheduleKind;
use crate::session::SessionOptions;
use crate::trainer::RunConfig;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "nvsh-gpt",
    version,
    about = "GPT-2-style training, pipeline-parallel over NVSHMEM (run N PEs with `nvsh run -n N -- nvsh-gpt train ...`)"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Train on a text file (byte-level tokens).
    Train(Box<TrainArgs>),
    /// Compare the losses of two --log-json files step by step; exit status 1 if any step of
    /// the window differs by more than --rel (relative) or is missing.
    Compare(CompareArgs),
    /// Throughput and time shares of a --log-json file (key=value on one line).
    Summary(SummaryArgs),
    /// Draw the loss curves of one or more --log-json files as a PNG chart: training loss solid,
    /// validation loss dashed, a colour per log, against step.
    Plot(PlotArgs),
    /// Write the parameters of a --save (the checkpoints of every stage) as one file that
    /// PyTorch loads (nanoGPT names; see gpt/README.md).
    Export(ExportArgs),
}

#[derive(Args, Debug, Clone)]
pub struct TrainArgs {
    /// Training text; its last --val-frac is the validation split. Without it: 1 MiB of
    /// pseudo-English generated from --seed (enough to see the loss fall; use a real text,
    /// e.g. Tiny Shakespeare, for a real model).
    #[arg(long)]
    pub data: Option<PathBuf>,
    #[arg(long, default_value_t = 0.1)]
    pub val_frac: f64,

    /// Transformer blocks.
    #[arg(long, default_value_t = 6)]
    pub layers: usize,
    /// Attention heads (must divide --width).
    #[arg(long, default_value_t = 6)]
    pub heads: usize,
    /// Width (channels).
    #[arg(long, default_value_t = 384)]
    pub width: usize,
    /// Context length (tokens per sequence).
    #[arg(long, default_value_t = 256)]
    pub context: usize,
    /// Vocabulary (256: every byte).
    #[arg(long, default_value_t = 256)]
    pub vocab: usize,
    /// Give the LM head its own matrix instead of sharing the token embedding.
    #[arg(long)]
    pub untied: bool,

    /// Sequences per micro-batch.
    #[arg(long, short = 'b', default_value_t = 16)]
    pub micro_batch_size: usize,
    /// Micro-batches per step (per data-parallel replica).
    #[arg(long, short = 'm', default_value_t = 4)]
    pub micro_batches: usize,
    /// Steps (also the horizon of the cosine schedule).
    #[arg(long, default_value_t = 2000)]
    pub steps: usize,
    /// Stop after this many seconds of training (at a step boundary, then validate and sample).
    #[arg(long)]
    pub max_seconds: Option<f64>,

    /// Peak learning rate.
    #[arg(long, default_value_t = 1e-3)]
    pub lr: f32,
    /// Final learning rate as a fraction of --lr.
    #[arg(long, default_value_t = 0.1)]
    pub min_lr_frac: f32,
    /// Linear warm-up steps.
    #[arg(long, default_value_t = 100)]
    pub warmup: usize,
    /// AdamW weight decay (matrices and embeddings only, not biases or LayerNorm).
    #[arg(long, default_value_t = 0.1)]
    pub weight_decay: f32,
    #[arg(long, default_value_t = 0.9)]
    pub beta1: f32,
    #[arg(long, default_value_t = 0.95)]
    pub beta2: f32,
    #[arg(long, default_value_t = 1e-8)]
    pub eps: f32,
    /// Clip the global gradient norm to this (0: no clipping).
    #[arg(long, default_value_t = 1.0)]
    pub clip: f32,
    /// Seed of the initial weights, the data order and sampling.
    #[arg(long, default_value_t = 1337)]
    pub seed: u64,

    /// Pipeline stages.
    #[arg(long, default_value_t = 1)]
    pub pp: usize,
    /// Data-parallel replicas (PEs = pp x dp; pe = replica * pp + stage).
    #[arg(long, default_value_t = 1)]
    pub dp: usize,
    /// Pipeline schedule: gpipe or 1f1b.
    #[arg(long, default_value = "1f1b")]
    pub schedule: String,
    /// Layers per stage, e.g. 5,7 (default: even, extra layers to the first stages).
    #[arg(long)]
    pub split: Option<String>,
    /// TF32 tensor-core math in cuBLAS (faster, less exact).
    #[arg(long)]
    pub tf32: bool,
    /// Sparse data-parallel gradient averaging, METHOD:DENSITY (e.g. gtopk:0.01; methods:
    /// topk, topk_aopt, gaussiank, gaussiank_concat, gtopk, oktopk, topk_sa, gaussiank_sa),
    /// with error feedback; the density is of the gradient arena (the largest stage's
    /// parameters). Default: dense.
    #[arg(long, value_name = "METHOD:DENSITY")]
    pub grad_compress: Option<String>,
    /// With --grad-compress: drop what is not sent instead of keeping it for the next step.
    #[arg(long, requires = "grad_compress")]
    pub no_error_feedback: bool,
    /// With --grad-compress: average densely for the first N steps (default: the --warmup
    /// steps). Sparse averaging from step 1 slows AdamW training (see gpt/README.md).
    #[arg(long, requires = "grad_compress", value_name = "N")]
    pub dense_steps: Option<usize>,
    /// With --grad-compress: DGC's density ramp (Deep Gradient Compression, Lin et al., ICLR
    /// 2018), FROM:STEPS (e.g. 0.25:300): the first STEPS sparse steps (counted after
    /// --dense-steps) send a density falling from FROM to the --grad-compress density in four
    /// equal stages, geometrically (DGC's 25%, 6.25%, 1.5625%, 0.4%, then 0.1%). FROM must be
    /// above that density and at most 1. Default: no ramp.
    #[arg(long, requires = "grad_compress", value_name = "FROM:STEPS")]
    pub density_ramp: Option<String>,
    /// With --grad-compress: DGC's local gradient clipping (Deep Gradient Compression, Lin et
    /// al., ICLR 2018): on sparse steps each replica scales its own gradient, before error
    /// feedback adds it to the residual, to an L2 norm of at most C x sqrt(1/dp). 0 (the
    /// default): off. --clip still clips the averaged gradient.
    #[arg(long, requires = "grad_compress", value_name = "C")]
    pub sparse_clip: Option<f32>,
    /// With --grad-compress: DGC's momentum correction (Deep Gradient Compression, Lin et al.,
    /// ICLR 2018) with momentum factor masking, M in [0, 1) (e.g. 0.9): on sparse steps each
    /// replica keeps a velocity u = M x u + g, error feedback accumulates u instead of g, and
    /// u is zeroed where the residual is sent. AdamW then takes the averaged sparse velocity
    /// as its gradient (its own --beta1 momentum on top; see gpt/README.md). Needs error
    /// feedback. 0 (the default): off.
    #[arg(
        long,
        requires = "grad_compress",
        conflicts_with = "no_error_feedback",
        value_name = "M"
    )]
    pub momentum_correction: Option<f32>,

    /// Validate every N steps (and after the last).
    #[arg(long, default_value_t = 100)]
    pub val_every: usize,
    /// Validation batches (of --micro-batch-size sequences) per evaluation.
    #[arg(long, default_value_t = 20)]
    pub val_batches: usize,
    /// Print a progress line every N steps.
    #[arg(long, default_value_t = 1)]
    pub print_every: usize,
    /// Per-step JSON records (step, loss, val_loss, lr, ms, tok_s, ...), one per line.
    #[arg(long)]
    pub log_json: Option<PathBuf>,
    /// Save checkpoints at the end (or at the next step after Ctrl-C / SIGTERM, then exit
    /// status 130): one directory PREFIX.step-N per save, and PREFIX.latest naming the last
    /// complete one.
    #[arg(long)]
    pub save: Option<PathBuf>,
    /// Also save every N steps (with --save).
    #[arg(long, default_value_t = 0)]
    pub save_every: usize,
    /// Continue from the set PREFIX.latest names (or the older PREFIX.stageS-of-P.ckpt files);
    /// same model, --pp and --split.
    #[arg(long)]
    pub resume: Option<PathBuf>,

    /// Bytes of text to sample at the end (0: none).
    #[arg(long, default_value_t = 300)]
    pub sample_tokens: usize,
    /// Text the sample continues.
    #[arg(long, default_value = "\n")]
    pub prompt: String,
    /// Sampling temperature (0: greedy).
    #[arg(long, default_value_t = 0.8)]
    pub temperature: f32,

    /// Longest wait for a peer PE in milliseconds (default: NVSH_TIMEOUT_MS, else 60000).
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    /// Run every PE as a thread on the CPU (reference math; tiny models only): no GPU needed.
    #[arg(long)]
    pub cpu: bool,
}

#[derive(Args, Debug, Clone)]
pub struct CompareArgs {
    pub log_a: PathBuf,
    pub log_b: PathBuf,
    /// Largest allowed relative difference of a step's loss.
    #[arg(long, default_value_t = 1e-5)]
    pub rel: f64,
    /// Compare steps 1..=N (default: every step of the first log).
    #[arg(long)]
    pub steps: Option<u64>,
}

#[derive(Args, Debug, Clone)]
pub struct SummaryArgs {
    pub log: PathBuf,
    /// Leave out the first N steps (warm-up) from the means.
    #[arg(long, default_value_t = 2)]
    pub skip: usize,
    /// Also report the first validation loss below this value and when it was logged.
    #[arg(long)]
    pub val_below: Option<f64>,
}

#[derive(Args, Debug, Clone)]
pub struct PlotArgs {
    /// --log-json files of `nvsh-gpt train` (the legend names each by its file name).
    #[arg(required = true, value_name = "LOG.json")]
    pub logs: Vec<PathBuf>,
    /// The PNG to write (checked before any log is read; written whole or not at all).
    #[arg(long, value_name = "FILE.png")]
    pub out: PathBuf,
}

#[derive(Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["checkpoints", "from"])))]
pub struct ExportArgs {
    /// Output format.
    #[arg(long, value_enum, default_value = "safetensors")]
    pub format: crate::export::ExportFormat,
    /// File to write (through a temporary file beside it, renamed when complete).
    #[arg(long)]
    pub out: PathBuf,
    /// The checkpoint files of every stage of one save (any order), e.g.
    /// run.step-00000100/stage0-of-2.ckpt run.step-00000100/stage1-of-2.ckpt.
    pub checkpoints: Vec<PathBuf>,
    /// Instead of listing the files: the --save prefix; exports the newest save (the set
    /// PREFIX.latest names), as --resume would load it. Needs --stages.
    #[arg(long, requires = "stages", conflicts_with = "checkpoints")]
    pub from: Option<PathBuf>,
    /// Pipeline stages of the save (with --from).
    #[arg(long, requires = "from")]
    pub stages: Option<usize>,
}

impl ExportArgs {
    /// The checkpoint files to export.
    pub fn checkpoint_paths(&self) -> Result<Vec<PathBuf>> {
        match (&self.from, self.stages) {
            (Some(prefix), Some(p)) => crate::export::prefix_paths(prefix, p),
            _ => Ok(self.checkpoints.clone()),
        }
    }
}

/// `--density-ramp FROM:STEPS` against the --grad-compress `density`: (FROM, STEPS).
fn parse_ramp(spec: &str, density: f64) -> Result<(f64, usize)> {
    let bad = |why: String| {
        GptError::Config(format!(
            "--density-ramp {spec}: {why}; pass FROM:STEPS, e.g. 0.25:300 (DGC's ramp to the \
             --grad-compress density {density})"
        ))
    };
    let (from, steps) = spec
        .split_once(':')
        .ok_or_else(|| bad("not FROM:STEPS".into()))?;
    let from: f64 = from
        .trim()
        .parse()
        .map_err(|_| bad(format!("FROM {from:?} is not a number")))?;
    let steps: usize = steps
        .trim()
        .parse()
        .map_err(|_| bad(format!("STEPS {steps:?} is not a whole number")))?;
    if !(from > density && from <= 1.0) {
        return Err(bad(format!(
            "FROM {from} must lie above the density {density} and be at most 1"
        )));
    }
    if steps == 0 {
        return Err(bad("STEPS must be at least 1".into()));
    }
    Ok((from, steps))
}

impl TrainArgs {
    /// The sparse gradient averaging of --grad-compress (None: dense), averaging over the
    /// replicas, with error feedback unless --no-error-feedback.
    pub fn grad_compress(&self) -> Result<Option<nvshmem::SparseOptions>> {
        let Some(spec) = &self.grad_compress else {
            return Ok(None);
        };
        let mut o = nvshmem::SparseOptions::parse(spec)
            .map_err(|e| GptError::Config(format!("--grad-compress: {e}")))?;
        o.error_feedback = !self.no_error_feedback;
        o.average = true;
        if let Some(ramp) = &self.density_ramp {
            (o.ramp_from, o.ramp_calls) = parse_ramp(ramp, o.density)?;
        }
        // The library's own checks, each under the flag that set the value.
        if let Some(c) = self.sparse_clip {
            o.local_clip = c;
            o.validate()
                .map_err(|e| GptError::Config(format!("--sparse-clip {c}: {e}")))?;
        }
        if let Some(m) = self.momentum_correction {
            o.momentum = m;
            o.validate()
                .map_err(|e| GptError::Config(format!("--momentum-correction {m}: {e}")))?;
        }
        Ok(Some(o))
    }

    /// The run's configuration and session options.
    pub fn to_config(&self) -> Result<(RunConfig, SessionOptions)> {
        let model = ModelConfig {
            n_layer: self.layers,
            n_head: self.heads,
            n_embd: self.width,
            block_size: self.context,
            vocab: self.vocab,
            tied: !self.untied,
        };
        model.validate()?;
        let split = match &self.split {
            Some(s) => StageSplit::parse(s, self.layers, self.pp)?,
            None => StageSplit::balanced(self.layers, self.pp)?,
        };
        let timeout = match self.timeout_ms {
            Some(0) => {
                return Err(GptError::Config("--timeout-ms must be at least 1".into()));
            }
            Some(ms) => Duration::from_millis(ms),
            None => nvshmem::tools::default_timeout()?,
        };
        if let Some(s) = self.max_seconds {
            if s.is_nan() || s <= 0.0 {
                return Err(GptError::Config(format!(
                    "--max-seconds {s} must be positive"
                )));
            }
        }
        if !(0.0..=1.0).contains(&self.min_lr_frac) {
            return Err(GptError::Config(format!(
                "--min-lr-frac {} must lie in [0, 1]",
                self.min_lr_frac
            )));
        }
        if self.temperature.is_nan() || self.temperature < 0.0 {
            return Err(GptError::Config("--temperature must be >= 0".into()));
        }
        if self.val_batches == 0 {
            return Err(GptError::Config("--val-batches must be at least 1".into()));
        }
        let run = RunConfig {
            model,
            micro_batch: self.micro_batch_size,
            micro_batches: self.micro_batches,
            steps: self.steps,
            lr: self.lr,
            min_lr: self.lr * self.min_lr_frac,
            warmup: self.warmup,
            weight_decay: self.weight_decay,
            beta1: self.beta1,
            beta2: self.beta2,
            eps: self.eps,
            clip: self.clip,
            dense_steps: match self.grad_compress {
                Some(_) => self.dense_steps.unwrap_or(self.warmup),
                None => 0,
            },
            seed: self.seed,
            pp: self.pp,
            dp: self.dp,
            schedule: ScheduleKind::parse(&self.schedule)?,
            split,
            val_batches: self.val_batches,
            max_seconds: self.max_seconds,
            timeout,
        };
        run.validate()?;
        let opts = SessionOptions {
            val_every: self.val_every,
            log_json: self.log_json.clone(),
            save: self.save.clone(),
            save_every: self.save_every,
            resume: self.resume.clone(),
            sample_tokens: self.sample_tokens,
            prompt: self.prompt.clone(),
            temperature: self.temperature,
            print_every: self.print_every,
        };
        Ok((run, opts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> std::result::Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("nvsh-gpt").chain(args.iter().copied()))
    }

    fn train(args: &[&str]) -> TrainArgs {
        match parse(args).unwrap().command {
            Command::Train(t) => *t,
            c => panic!("not train: {c:?}"),
        }
    }

    #[test]
    fn grad_compress_parses_method_density_and_error_feedback() {
        let t = train(&["train", "--dp", "2", "--grad-compress", "gtopk:0.01"]);
        let o = t.grad_compress().unwrap().unwrap();
        assert_eq!(o.method, nvshmem::SparseMethod::GTopK);
        assert!(o.error_feedback && o.average && o.density == 0.01);
        let t = train(&[
            "train",
            "--grad-compress",
            "topk:0.1",
            "--no-error-feedback",
        ]);
        assert!(!t.grad_compress().unwrap().unwrap().error_feedback);
        assert!(train(&["train"]).grad_compress().unwrap().is_none());
        for (spec, m) in [
            ("oktopk:0.01", nvshmem::SparseMethod::OkTopK),
            ("topk_sa:0.01", nvshmem::SparseMethod::TopKSa),
            ("gaussiank_sa:0.01", nvshmem::SparseMethod::GaussianKSa),
        ] {
            let t = train(&["train", "--dp", "4", "--grad-compress", spec]);
            assert_eq!(t.grad_compress().unwrap().unwrap().method, m, "{spec}");
        }
        let err = train(&["train", "--grad-compress", "topk:2"])
            .grad_compress()
            .unwrap_err();
        assert!(err.to_string().contains("--grad-compress"), "{err}");
    }

    #[test]
    fn density_ramp_parses_and_is_checked_against_the_density() {
        let c = ["train", "--dp", "2", "--grad-compress", "gtopk:0.001"];
        let o = train(&[&c[..], &["--density-ramp", "0.25:300"]].concat())
            .grad_compress()
            .unwrap()
            .unwrap();
        assert_eq!((o.ramp_from, o.ramp_calls, o.density), (0.25, 300, 0.001));
        assert_eq!(o.max_density(), 0.25);
        assert!(o.density_at(0) == 0.25 && o.density_at(300) == 0.001);
        let o = train(&c).grad_compress().unwrap().unwrap();
        assert_eq!((o.ramp_from, o.ramp_calls), (0.0, 0));
        assert_eq!(parse_ramp("1:1", 0.5).unwrap(), (1.0, 1));
        let err = |ramp: &str| {
            train(&[&c[..], &["--density-ramp", ramp]].concat())
                .grad_compress()
                .unwrap_err()
                .to_string()
        };
        for (ramp, why) in [
            ("0.25", "not FROM:STEPS"),
            ("x:300", "FROM \"x\" is not a number"),
            ("0.25:-1", "STEPS \"-1\" is not a whole number"),
            ("0.25:0", "STEPS must be at least 1"),
            ("0.001:300", "must lie above the density 0.001"),
            ("0.0005:300", "must lie above"),
            ("1.5:300", "at most 1"),
            ("NaN:300", "must lie above"),
        ] {
            let e = err(ramp);
            assert!(
                e.contains("--density-ramp") && e.contains(why),
                "{ramp}: {e}"
            );
        }
        // Only with sparse averaging.
        assert!(parse(&["train", "--density-ramp", "0.25:300"]).is_err());
    }

    #[test]
    fn momentum_correction_sets_the_momentum() {
        let c = ["train", "--dp", "2", "--grad-compress", "gtopk:0.01"];
        let opts = |extra: &[&str]| train(&[&c[..], extra].concat()).grad_compress();
        assert_eq!(opts(&[]).unwrap().unwrap().momentum, 0.0);
        let o = opts(&["--momentum-correction", "0.9"]).unwrap().unwrap();
        assert!(o.momentum == 0.9 && o.error_feedback);
        for bad in ["1", "1.5", "-0.1", "NaN"] {
            let e = opts(&[&format!("--momentum-correction={bad}")])
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("--momentum-correction") && e.contains("[0, 1)"),
                "{bad}: {e}"
            );
        }
        // Error feedback is what it corrects; only with sparse averaging.
        assert!(parse(
            &[
                &c[..],
                &["--momentum-correction", "0.9", "--no-error-feedback"]
            ]
            .concat()
        )
        .is_err());
        assert!(parse(&["train", "--momentum-correction", "0.9"]).is_err());
    }

    #[test]
    fn sparse_clip_sets_the_local_clip() {
        let c = ["train", "--dp", "4", "--grad-compress", "topk:0.01"];
        let opts = |extra: &[&str]| train(&[&c[..], extra].concat()).grad_compress();
        assert_eq!(opts(&[]).unwrap().unwrap().local_clip, 0.0);
        let o = opts(&["--sparse-clip", "2.5"]).unwrap().unwrap();
        assert_eq!((o.local_clip, o.local_clip_norm(4)), (2.5, 1.25));
        assert_eq!(
            opts(&["--sparse-clip", "0"]).unwrap().unwrap().local_clip,
            0.0
        );
        for bad in ["-1", "inf", "NaN"] {
            // `=`: clap would take a separate -1 for a flag.
            let e = opts(&[&format!("--sparse-clip={bad}")])
                .unwrap_err()
                .to_string();
            assert!(e.contains("--sparse-clip"), "{bad}: {e}");
        }
        assert!(parse(&["train", "--sparse-clip", "1"]).is_err());
    }

    #[test]
    fn sparse_averaging_starts_after_the_warmup_unless_told() {
        let steps = |a: &[&str]| train(a).to_config().unwrap().0.dense_steps;
        assert_eq!(steps(&["train", "--timeout-ms", "1"]), 0);
        let c = [
            "train",
            "--timeout-ms",
            "1",
            "--grad-compress",
            "gtopk:0.01",
        ];
        assert_eq!(steps(&c), 100);
        assert_eq!(steps(&[&c[..], &["--warmup", "30"]].concat()), 30);
        assert_eq!(steps(&[&c[..], &["--dense-steps", "0"]].concat()), 0);
        assert!(parse(&["train", "--dense-steps", "5"]).is_err());
    }

    #[test]
    fn defaults_are_the_tiny_shakespeare_recipe() {
        let t = train(&["train", "--data", "x.txt", "--timeout-ms", "5000"]);
        let (run, opts) = t.to_config().unwrap();
        let m = &run.model;
        assert_eq!(
            (m.n_layer, m.n_head, m.n_embd, m.block_size, m.vocab),
            (6, 6, 384, 256, 256)
        );
        assert!(m.tied);
        assert_eq!(run.micro_batch * run.micro_batches, 64);
        assert_eq!((run.lr, run.weight_decay, run.clip), (1e-3, 0.1, 1.0));
        assert!((run.min_lr - 1e-4).abs() < 1e-9);
        assert_eq!(
            (run.pp, run.dp, run.schedule),
            (1, 1, ScheduleKind::OneFOneB)
        );
        assert_eq!(run.timeout, Duration::from_millis(5000));
        assert_eq!(opts.val_every, 100);
        assert!(opts.log_json.is_none() && opts.save.is_none());
    }

    #[test]
    fn pipeline_flags_parse() {
        let t = train(&[
            "train",
            "--data",
            "d",
            "--layers",
            "12",
            "--heads",
            "12",
            "--width",
            "768",
            "--context",
            "1024",
            "-b",
            "4",
            "-m",
            "8",
            "--pp",
            "2",
            "--schedule",
            "gpipe",
            "--split",
            "5,7",
            "--untied",
            "--tf32",
            "--log-json",
            "l.json",
            "--max-seconds",
            "600",
            "--timeout-ms",
            "100",
        ]);
        let (run, opts) = t.to_config().unwrap();
        assert_eq!(run.split.layers(), &[5, 7]);
        assert_eq!(run.schedule, ScheduleKind::GPipe);
        assert!(!run.model.tied && t.tf32);
        assert_eq!(run.tokens_per_step(), 4 * 8 * 1024);
        assert_eq!(run.max_seconds, Some(600.0));
        assert_eq!(opts.log_json, Some(PathBuf::from("l.json")));
    }

    #[test]
    fn bad_values_are_config_errors() {
        let bad = |args: &[&str]| {
            let mut a = vec!["train", "--data", "d", "--timeout-ms", "100"];
            a.extend_from_slice(args);
            train(&a).to_config().unwrap_err().to_string()
        };
        assert!(bad(&["--heads", "5"]).contains("multiple"));
        assert!(bad(&["--schedule", "zb"]).contains("gpipe or 1f1b"));
        assert!(bad(&["--pp", "2", "--split", "1,2"]).contains("--split"));
        assert!(bad(&["--pp", "7"]).contains("at least one layer"));
        assert!(bad(&["--beta2", "1.0"]).contains("betas"));
        assert!(bad(&["--max-seconds", "0"]).contains("--max-seconds"));
        assert!(bad(&["-m", "0"]).contains("--micro-batches"));
        // Without --data: the generated corpus.
        assert!(train(&["train"]).data.is_none());
        assert!(parse(&["train", "--data", "d", "--lr", "x"]).is_err());
    }

    #[test]
    fn compare_and_summary_parse() {
        match parse(&[
            "compare", "a.json", "b.json", "--rel", "1e-5", "--steps", "20",
        ])
        .unwrap()
        .command
        {
            Command::Compare(c) => {
                assert_eq!((c.rel, c.steps), (1e-5, Some(20)));
                assert_eq!(c.log_b, PathBuf::from("b.json"));
            }
            c => panic!("{c:?}"),
        }
        match parse(&["summary", "a.json"]).unwrap().command {
            Command::Summary(s) => assert_eq!((s.skip, s.val_below), (2, None)),
            c => panic!("{c:?}"),
        }
    }
}
