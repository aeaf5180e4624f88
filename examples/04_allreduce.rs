//! Allreduce: every PE contributes rank + 1 in each of 1M f32 elements, and every PE checks that
//! each element of the result is the sum 1 + 2 + ... + n (exact in f32 for any job size here).
//!
//!     nvsh run -n 2 -- target/release/examples/04_allreduce
//!     mpirun -np 2 target/release/examples/04_allreduce   (built with --features nvshmem/mpi)
//!     target/release/examples/04_allreduce                 (one PE)
//!
//! Exit status: 0 on PASS, 1 on FAIL, 2 when the runtime could not start.

use nvshmem::{AllreduceAlgo, Nvshmem, ReduceOp};
use std::process::ExitCode;

const N: usize = 1 << 20;

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("04_allreduce: error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> nvshmem::Result<bool> {
    let nv = Nvshmem::init()?;
    let (me, n) = (nv.my_pe(), nv.n_pes());
    // The workspace is collective and reusable: create it once, call it many times.
    let mut ar = nv.allreduce_workspace(1 << 20)?;
    let input = nv.alloc::<f32>(N)?;
    let output = nv.alloc::<f32>(N)?;
    input.copy_from_host(&vec![(me + 1) as f32; N])?;
    output.copy_from_host(&vec![f32::NAN; N])?;
    let stream = nv.stream();
    let algo = ar.run(&input, &output, ReduceOp::Sum, AllreduceAlgo::Auto, stream)?;
    // Every wait has a deadline: a dead peer ends in an error here, never a hang.
    ar.sync(stream)?;
    let want = (n * (n + 1) / 2) as f32;
    let got = output.to_vec()?;
    let wrong = got.iter().filter(|&&v| v != want).count();
    println!(
        "PE {me}: sum of rank + 1 over {n} PE(s) by {}: {}",
        algo.name(),
        if wrong == 0 {
            "PASS".to_string()
        } else {
            format!("FAIL ({wrong} of {N} elements differ from {want})")
        }
    );
    Ok(wrong == 0)
}
