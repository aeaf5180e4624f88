//! `nvsh-gpt`: train a GPT on a text file, pipeline-parallel over NVSHMEM PEs; compare,
//! summarise and plot the JSON logs it writes. See `nvsh-gpt --help` and gpt/README.md.

use clap::Parser;
use nvsh_gpt::backend::GpuBackend;
use nvsh_gpt::cli::{Cli, Command, CompareArgs, ExportArgs, PlotArgs, SummaryArgs, TrainArgs};
use nvsh_gpt::config::Topology;
use nvsh_gpt::cpu::run_local;
use nvsh_gpt::data::{generated_text, Dataset, GENERATED_BYTES};
use nvsh_gpt::error::{GptError, Result};
use nvsh_gpt::log::{compare, first_val_below, read_log, summarize};
use nvsh_gpt::nvcomm::{symmetric_bytes, NvComm};
use nvsh_gpt::session::run_session;
use nvsh_gpt::trainer::{RunConfig, Trainer};
use nvshmem::Nvshmem;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

fn main() -> ExitCode {
    // The library's warnings show by default; RUST_LOG=info or debug shows more.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Train(args) => match train(&args) {
            // Saved (when asked) and stopped at a step boundary: not a finished run.
            Ok(true) => return ExitCode::from(nvsh_gpt::interrupt::EXIT_INTERRUPTED as u8),
            other => other.map(|_| true),
        },
        Command::Compare(args) => compare_logs(&args),
        Command::Summary(args) => summary(&args).map(|_| true),
        Command::Export(args) => export(&args).map(|_| true),
        Command::Plot(args) => plot(&args).map(|_| true),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("nvsh-gpt: error: {e}");
            ExitCode::from(1)
        }
    }
}

/// Trains; true when Ctrl-C or SIGTERM stopped the run (after its checkpoints were saved).
fn train(args: &TrainArgs) -> Result<bool> {
    let (run, opts) = args.to_config()?;
    nvsh_gpt::interrupt::install()?;
    let data = Arc::new(match &args.data {
        Some(path) => Dataset::from_file(path, args.val_frac, run.model.block_size)?,
        None => {
            if first_process() {
                println!(
                    "data: no --data given: {} KiB of generated pseudo-English (seed {})",
                    GENERATED_BYTES >> 10,
                    run.seed
                );
            }
            Dataset::from_bytes(
                &generated_text(GENERATED_BYTES, run.seed),
                args.val_frac,
                run.model.block_size,
            )?
        }
    });
    let compress = args.grad_compress()?;
    if args.cpu {
        if args.tf32 {
            return Err(GptError::Config("--tf32 applies to the GPU only".into()));
        }
        if compress.is_some() {
            return Err(GptError::Config(
                "--grad-compress applies to the GPU only (the CPU run averages densely)".into(),
            ));
        }
        let out: Arc<Mutex<dyn std::io::Write + Send>> = Arc::new(Mutex::new(std::io::stdout()));
        let results = run_local(&run, data, &opts, out)?;
        return Ok(results.iter().any(|r| r.interrupted));
    }
    let slots = channel_slots(&run);
    let act = run.micro_batch * run.model.block_size * run.model.n_embd;
    let n_pes = run.pp * run.dp;
    // NVSHMEM sizes its heap at init: ask for what this job allocates, unless the user did.
    if std::env::var_os("NVSHMEM_SYMMETRIC_SIZE").is_none() {
        let need = symmetric_bytes(
            n_pes,
            run.pp,
            run.dp,
            run.max_stage_params(),
            slots,
            act,
            run.micro_batches,
            compress.map(|c| c.max_density()),
        );
        let mib = (need + need / 4).div_ceil(1 << 20) + 256;
        std::env::set_var("NVSHMEM_SYMMETRIC_SIZE", format!("{mib}M"));
    }
    let nv = Nvshmem::init()?;
    let topo = Topology::new(run.pp, run.dp, nv.my_pe() as usize, nv.n_pes() as usize)?;
    // From here on a failing PE exits at once: unwinding would run collective frees (and
    // finalize) that its peers never join. `nvsh run` then stops the other PEs.
    let be = fatal(
        nv.context()
            .new_stream()
            .map_err(GptError::from)
            .and_then(|s| GpuBackend::new(s, args.tf32, run.timeout)),
        topo.pe,
    );
    let comm = fatal(
        NvComm::new(
            &nv,
            topo,
            be.stream().clone(),
            slots,
            act,
            run.micro_batches,
            run.model.tied,
            run.timeout,
            compress,
        ),
        topo.pe,
    );
    let mut tr = fatal(Trainer::new(&be, comm, run, data), topo.pe);
    let mut out = std::io::stdout();
    let result = fatal(run_session(&mut tr, &opts, &mut out), topo.pe);
    fatal(nvsh_gpt::backend::Backend::synchronize(&be), topo.pe);
    drop(tr); // collective frees, in the same order on every PE
    Ok(result.interrupted)
}

/// Whether this process is rank 0 of its job (or alone), before NVSHMEM says so: the
/// launchers' rank variables.
fn first_process() -> bool {
    [
        "NVSH_RANK",
        "OMPI_COMM_WORLD_RANK",
        "PMI_RANK",
        "SLURM_PROCID",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok())
    .is_none_or(|r| r.trim() == "0")
}

/// Receive slots per channel: enough that a sender never waits within a step.
fn channel_slots(run: &RunConfig) -> usize {
    run.micro_batches.clamp(1, 8)
}

/// The value, or: print the error and exit with status 1 without unwinding.
fn fatal<T>(r: Result<T>, pe: usize) -> T {
    match r {
        Ok(v) => v,
        Err(e) => {
            eprintln!("nvsh-gpt: error (PE {pe}): {e}");
            std::process::exit(1);
        }
    }
}

fn compare_logs(args: &CompareArgs) -> Result<bool> {
    let (a, b) = (read_log(&args.log_a)?, read_log(&args.log_b)?);
    let c = compare(&a, &b, args.rel, args.steps);
    match c.worst {
        Some((step, x, y, d)) => println!(
            "compared {} steps; worst step {step}: {x} vs {y}, relative difference {d:.3e} \
             (limit {:.1e})",
            c.compared, args.rel
        ),
        None => println!("no step is in both logs"),
    }
    if !c.missing.is_empty() {
        println!(
            "steps missing from one log: {:?}",
            &c.missing[..c.missing.len().min(20)]
        );
    }
    println!("{}", if c.ok { "PASS" } else { "FAIL" });
    Ok(c.ok)
}

fn export(args: &ExportArgs) -> Result<()> {
    let s = nvsh_gpt::export::export(args.format, &args.checkpoint_paths()?, &args.out)?;
    println!(
        "exported {} tensors ({} parameters, step {}, {} stage(s)) to {}",
        s.tensors,
        s.elements,
        s.step,
        s.stages,
        args.out.display()
    );
    Ok(())
}

fn plot(args: &PlotArgs) -> Result<()> {
    let r = nvsh_gpt::plot::plot_logs(&args.logs, &args.out)?;
    println!(
        "wrote {} ({}x{} pixels, {} log(s))",
        args.out.display(),
        r.width,
        r.height,
        args.logs.len()
    );
    if let Some(w) = r.warning {
        eprintln!("nvsh-gpt: warning: {w}");
    }
    Ok(())
}

fn summary(args: &SummaryArgs) -> Result<()> {
    let recs = read_log(&args.log)?;
    let s = summarize(&recs, args.skip);
    let (best, at) = s.best_val.unwrap_or((f64::NAN, f64::NAN));
    println!(
        "steps={} mean_ms={:.3} tok_s={:.1} wait_pct={:.3} bubble_pct={:.3} transfer_pct={:.3} \
         best_val_loss={best} best_val_elapsed_s={at} last_loss={}{}",
        s.steps,
        s.mean_ms,
        s.tok_s,
        s.wait_pct,
        s.bubble_pct,
        s.transfer_pct,
        s.last_loss,
        match args.val_below {
            None => String::new(),
            Some(limit) => match first_val_below(&recs, limit) {
                Some(r) => format!(
                    " first_val_below_step={} first_val_below_loss={} first_val_below_elapsed_s={}",
                    r.step,
                    r.val_loss.unwrap_or(f64::NAN),
                    r.elapsed_s
                ),
                None => " first_val_below_step=none".into(),
            },
        }
    );
    Ok(())
}
