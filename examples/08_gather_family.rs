//! Allgather, reduce-scatter and alltoall over 64K f32 blocks. Every PE checks what it holds:
//! block r of the allgather is PE r's rank; block s of the alltoall is what PE s sent it
//! (s * 1000 + my rank); its reduce-scatter block is the sum of those over s.
//!
//!     nvsh run -n 2 -- target/release/examples/08_gather_family
//!     target/release/examples/08_gather_family             (one PE)
//!
//! Exit status: 0 on PASS, 1 on FAIL, 2 when the runtime could not start.

use nvshmem::{Allgather, Alltoall, Nvshmem, ReduceOp, ReduceScatter};
use std::process::ExitCode;

const BLOCK: usize = 1 << 16;

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("08_gather_family: error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> nvshmem::Result<bool> {
    let nv = Nvshmem::init()?;
    let (me, n) = (nv.my_pe() as usize, nv.n_pes() as usize);
    let stream = nv.stream();
    let mut ag = Allgather::world(&nv)?;
    let mut rs = ReduceScatter::world(&nv, 1 << 20)?;
    let mut a2a = Alltoall::world(&nv)?;
    let mine = nv.alloc::<f32>(BLOCK)?;
    let blocks = nv.alloc::<f32>(n * BLOCK)?;
    let gathered = nv.alloc::<f32>(n * BLOCK)?;
    let reduced = nv.alloc::<f32>(BLOCK)?;
    let exchanged = nv.alloc::<f32>(n * BLOCK)?;
    mine.copy_from_host(&vec![me as f32; BLOCK])?;
    // Block r of `blocks` holds me * 1000 + r: the alltoall sends it to PE r, and the
    // reduce-scatter sums block r over PEs into PE r's output.
    let send: Vec<f32> = (0..n * BLOCK)
        .map(|i| (me * 1000 + i / BLOCK) as f32)
        .collect();
    blocks.copy_from_host(&send)?;

    // Calls go back to back on the stream; one sync at the end.
    ag.run(&mine, &gathered, stream)?;
    a2a.run(&blocks, &exchanged, stream)?;
    rs.run(&blocks, &reduced, ReduceOp::Sum, stream)?;
    ag.sync(stream)?;
    a2a.check()?;
    rs.check()?;

    let g = gathered.to_vec()?;
    let ag_ok = (0..n * BLOCK).all(|i| g[i] == (i / BLOCK) as f32);
    let x = exchanged.to_vec()?;
    let a2a_ok = (0..n * BLOCK).all(|i| x[i] == ((i / BLOCK) * 1000 + me) as f32);
    // Block [me] of PE p's `blocks` holds p * 1000 + me.
    let want = (0..n).map(|p| (p * 1000 + me) as f32).sum::<f32>();
    let rs_ok = reduced.to_vec()?.iter().all(|&v| v == want);
    let v = |ok: bool| if ok { "PASS" } else { "FAIL" };
    println!(
        "PE {me}: allgather {}, alltoall {}, reduce-scatter {}",
        v(ag_ok),
        v(a2a_ok),
        v(rs_ok)
    );
    Ok(ag_ok && a2a_ok && rs_ok)
}
