//! `nvsh run -n N [--gpus LIST] -- prog args`: CLI glue over [`nvshmem::launcher`].

use std::process::ExitCode;

#[derive(clap::Args)]
pub struct RunArgs {
    /// Number of processes (PEs) to start.
    #[arg(short = 'n', long = "np")]
    pub n: usize,
    /// The program and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

pub fn run(_args: RunArgs) -> nvshmem::Result<ExitCode> {
    unimplemented!("nvsh run")
}
