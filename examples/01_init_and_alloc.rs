//! The first steps: start the runtime (it finds its place in the job from `nvsh run`, mpirun or
//! runs alone), allocate symmetric buffers (the same buffer on every PE), copy data in and out.
//!
//!     target/release/examples/01_init_and_alloc
//!     nvsh run -n 2 -- target/release/examples/01_init_and_alloc
//!
//! Exit status: 0 on PASS, 1 on FAIL, 2 when the runtime could not start.

use nvshmem::Nvshmem;
use std::process::ExitCode;

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("01_init_and_alloc: error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> nvshmem::Result<bool> {
    // One handle per process; dropping it finalises NVSHMEM.
    let nv = Nvshmem::init()?;
    let (me, n) = (nv.my_pe(), nv.n_pes());
    println!("PE {me} of {n} on GPU {}", nv.device());
    // Symmetric allocation is collective: every PE allocates the same sizes in the same order.
    let buf = nv.alloc::<u32>(1024)?;
    let zeros = nv.alloc_zeroed::<u32>(1024)?;
    let values: Vec<u32> = (0..1024).map(|i| i * 7 + me as u32).collect();
    buf.copy_from_host(&values)?;
    let back = buf.to_vec()?;
    let pass = back == values && zeros.to_vec()?.iter().all(|&z| z == 0);
    println!("PE {me}: {}", if pass { "PASS" } else { "FAIL" });
    Ok(pass)
}
