//! Broadcast and reduce: the last PE broadcasts 1M u8 bytes (i mod 251) to every PE, then every
//! PE contributes rank + 1 in each of 1M f32 elements and PE 0 receives their sum. Each PE
//! checks what it received: the broadcast bytes everywhere, the sum 1 + 2 + ... + n at the root.
//!
//!     nvsh run -n 2 -- target/release/examples/07_broadcast_reduce
//!     target/release/examples/07_broadcast_reduce          (one PE)
//!
//! Exit status: 0 on PASS, 1 on FAIL, 2 when the runtime could not start.

use nvshmem::{Broadcast, Nvshmem, Reduce, ReduceOp};
use std::process::ExitCode;

const N: usize = 1 << 20;

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("07_broadcast_reduce: error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> nvshmem::Result<bool> {
    let nv = Nvshmem::init()?;
    let (me, n) = (nv.my_pe(), nv.n_pes());
    let stream = nv.stream();
    // Workspaces are collective and reusable: create them once, call them many times.
    let mut bc = Broadcast::world(&nv)?;
    let mut reduce = Reduce::world(&nv, 1 << 20)?;

    let root = n - 1;
    let bytes = nv.alloc::<u8>(N)?;
    let pattern: Vec<u8> = (0..N).map(|i| (i % 251) as u8).collect();
    if me == root {
        bytes.copy_from_host(&pattern)?;
    } else {
        bytes.copy_from_host(&vec![255; N])?;
    }
    // In place at the root: the same buffer is its input and everyone's output.
    bc.run(&bytes, &bytes, root, stream)?;
    bc.sync(stream)?;
    let bc_ok = bytes.to_vec()? == pattern;

    let input = nv.alloc::<f32>(N)?;
    let output = nv.alloc::<f32>(N)?;
    input.copy_from_host(&vec![(me + 1) as f32; N])?;
    output.copy_from_host(&vec![f32::NAN; N])?;
    reduce.run(&input, &output, ReduceOp::Sum, 0, stream)?;
    // Every wait has a deadline: a dead peer ends in an error here, never a hang.
    reduce.sync(stream)?;
    let want = (n * (n + 1) / 2) as f32;
    let reduce_ok = me != 0 || output.to_vec()?.iter().all(|&v| v == want);
    println!(
        "PE {me}: broadcast of {N} bytes from PE {root}: {}; reduce to PE 0: {}",
        verdict(bc_ok),
        if me == 0 {
            verdict(reduce_ok)
        } else {
            "not the root"
        }
    );
    Ok(bc_ok && reduce_ok)
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "FAIL"
    }
}
