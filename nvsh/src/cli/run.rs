//! `nvsh run -n N [--gpus LIST] -- prog args`: CLI glue over [`nvsh::launcher`].

use nvsh::launcher::{self, LaunchError, LaunchSpec, OnFailure, Stop};
use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

/// Exit code for errors before anything was started, as for usage errors.
const EXIT_USAGE: u8 = 2;

#[derive(clap::Args)]
pub struct RunArgs {
    /// Number of processes (PEs) to start.
    #[arg(short = 'n', long = "np")]
    pub n: usize,
    /// GPUs to use, e.g. 0,1: sets CUDA_VISIBLE_DEVICES for every process, which then uses GPU
    /// (local rank % count) of the list. More processes than GPUs share them.
    #[arg(long, value_name = "LIST")]
    pub gpus: Option<String>,
    /// Seconds the processes get to exit after a stop signal before they are killed
    /// [default: 5].
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    pub grace_secs: Option<Duration>,
    /// When a process fails: `stop` the others at once (default), or `wait` for them to end on
    /// their own (their waits time out and name the failed PE; see NVSH_TIMEOUT_MS), killing
    /// them after --wait-secs.
    #[arg(long, value_name = "stop|wait", default_value = "stop", value_parser = ["stop", "wait"])]
    pub on_failure: String,
    /// With --on-failure wait: seconds until the others are killed [default: NVSH_TIMEOUT_MS
    /// plus 30 s].
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    pub wait_secs: Option<Duration>,
    /// The program and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<OsString>,
}

pub fn run(args: RunArgs) -> nvshmem::Result<ExitCode> {
    match launch(args) {
        Ok(code) => Ok(code),
        // NVSHMEM's own failure; nvsh reports those the same way for every subcommand.
        Err(LaunchError::UniqueId(e)) => Err(e),
        Err(e) => {
            eprintln!("nvsh run: error: {e}");
            Ok(ExitCode::from(EXIT_USAGE))
        }
    }
}

fn launch(args: RunArgs) -> Result<ExitCode, LaunchError> {
    let gpus = args.gpus.as_deref().map(launcher::parse_gpus).transpose()?;
    let mut command = args.command.into_iter();
    let program = command.next().expect("clap requires the command");
    if let Some(gpus) = &gpus {
        if args.n > gpus.len() {
            eprintln!(
                "nvsh run: note: {} processes on {} GPU(s); processes share GPUs (local rank % {})",
                args.n,
                gpus.len(),
                gpus.len()
            );
        }
    }
    let on_failure = if args.on_failure == "wait" {
        let wait = match args.wait_secs {
            Some(w) => w,
            None => {
                nvshmem::tools::default_timeout().unwrap_or(nvshmem::DEFAULT_TIMEOUT)
                    + Duration::from_secs(30)
            }
        };
        OnFailure::Wait(wait)
    } else {
        OnFailure::Stop
    };
    let spec = LaunchSpec {
        on_failure,
        // This process has no other children: orphans of the ranks are the job's.
        subreaper: true,
        gpus,
        grace: args.grace_secs.unwrap_or(launcher::DEFAULT_GRACE),
        ..LaunchSpec::new(args.n, program).args(command)
    };
    let outcome = launcher::launch(&spec)?;
    if let Some(Stop::Interrupted { signal }) = outcome.stop {
        // End by the same signal, so that the shell sees an interrupted command (a loop over
        // `nvsh run` stops at Ctrl-C). Not for SIGQUIT, whose default action would dump this
        // process's core: 128 + 3 says the same.
        if signal != libc::SIGQUIT {
            use std::io::Write;
            let _ = std::io::stdout().flush();
            let _ = std::io::stderr().flush();
            let _ = signal_hook::low_level::emulate_default_handler(signal);
        }
    }
    Ok(ExitCode::from(outcome.exit_code))
}

fn parse_secs(s: &str) -> Result<Duration, String> {
    s.trim()
        .parse::<f64>()
        .ok()
        .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
        .ok_or_else(|| "expected a non-negative number of seconds, e.g. 5 or 0.5".to_string())
}
