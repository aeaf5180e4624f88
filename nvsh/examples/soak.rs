//! The soak of `nvsh soak` (checked allreduces and channel transfers) under any launcher, in
//! particular mpirun (this example is built with the `mpi` feature; `nvsh` is not):
//!
//!     mpirun -np 2 target/release/examples/soak 60                  (60 s, mixed)
//!     mpirun -np 2 target/release/examples/soak 300 allreduce 1 200 (PE 1 dies at iteration 200)
//!
//! Arguments: SECONDS [allreduce|channel|mixed] [DIE_PE DIE_AFTER]. Exit status 0 when every
//! result matched, 1 otherwise (an error, such as the timeout that names a dead PE, is printed).

use nvsh::error::ToolError;
use nvsh::soak::{self, SoakOptions, Workload};
use nvshmem::Nvshmem;
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut opts = SoakOptions::default();
    if let Some(s) = args.first().and_then(|s| s.parse::<f64>().ok()) {
        opts.duration = Duration::from_secs_f64(s);
    }
    if let Some(w) = args.get(1) {
        match Workload::parse(w) {
            Ok(w) => opts.workload = w,
            Err(e) => {
                eprintln!("soak: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if let (Some(pe), Some(at)) = (args.get(2), args.get(3)) {
        opts.die = pe.parse().ok().zip(at.parse().ok());
    }
    let nv = match Nvshmem::init() {
        Ok(nv) => nv,
        Err(e) => {
            eprintln!("soak: error: {e}");
            return ExitCode::from(2);
        }
    };
    let me = nv.my_pe();
    match soak::run(&nv, &opts)
        .map_err(ToolError::from)
        .and_then(|r| {
            println!(
                "PE {me}: soak done: {} iterations, {} allreduces, {} messages, {} mismatches",
                r.iterations, r.allreduces, r.messages, r.mismatches
            );
            soak::verdict(&r)
        }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("PE {me}: soak: error: {e}");
            ExitCode::from(1)
        }
    }
}
