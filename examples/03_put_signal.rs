//! Put with signal: the GPU moves the data and then raises a signal word on the receiver, in
//! one device-initiated operation; the receiver waits for the signal (with a deadline), not for
//! a barrier. This is how data crosses nodes, where peers are not mapped for direct stores.
//!
//!     nvsh run -n 2 -- target/release/examples/03_put_signal
//!     target/release/examples/03_put_signal                  (one PE: it sends to itself)
//!
//! Exit status: 0 on PASS, 1 on FAIL, 2 when the runtime could not start.

use nvshmem::{Cmp, LaunchShape, Nvshmem, SignalOp};
use std::process::ExitCode;
use std::time::Duration;

const N: usize = 1 << 20;

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("03_put_signal: error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> nvshmem::Result<bool> {
    let nv = Nvshmem::init()?;
    let (me, n) = (nv.my_pe(), nv.n_pes());
    let src = nv.alloc::<f32>(N)?;
    let dst = nv.alloc::<f32>(N)?;
    let sig = nv.alloc_zeroed::<u64>(1)?;
    src.copy_from_host(&vec![me as f32 + 0.5; N])?;
    // NaN poison: no correct delivery leaves one behind.
    dst.copy_from_host(&vec![f32::NAN; N])?;
    // Nobody writes into a peer before that peer has poisoned its buffer.
    nv.barrier_all()?;
    let next = (me + 1) % n;
    let shape = LaunchShape::for_bytes(N * 4);
    nv.put_signal_device(&dst, &src, &sig, 1, SignalOp::Add, next, shape, nv.stream())?;
    // The signal is raised only after the data landed: waiting for it is enough.
    nv.signal_wait_until(&sig, Cmp::Ge, 1, Duration::from_secs(20))?;
    let prev = (me + n - 1) % n;
    let got = dst.to_vec()?;
    let pass = got.iter().all(|&v| v == prev as f32 + 0.5);
    println!(
        "PE {me}: received PE {prev}'s data: {}",
        if pass { "PASS" } else { "FAIL" }
    );
    nv.barrier_all()?;
    Ok(pass)
}
