//! Alltoallv with skewed counts, then grouped send/recv around a ring. PE s sends PE r
//! (s + 1) * (r + 2) elements of value s * 1000 + r, and every PE checks what it received;
//! then each PE sends 1M u8 of its rank to the next PE and receives from the previous one in
//! one group (a PE alone sends to itself).
//!
//!     nvsh run -n 2 -- target/release/examples/09_alltoallv_group
//!     target/release/examples/09_alltoallv_group             (one PE)
//!
//! Exit status: 0 on PASS, 1 on FAIL, 2 when the runtime could not start.

use nvshmem::{Alltoallv, Nvshmem, P2p, P2pGroup, Parts};
use std::process::ExitCode;

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("09_alltoallv_group: error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Elements PE s sends PE r.
fn count(s: usize, r: usize) -> usize {
    (s + 1) * (r + 2)
}

/// Counts laid out back to back, and the total.
fn displs(counts: &[usize]) -> (Vec<usize>, usize) {
    let mut at = 0;
    let d = counts
        .iter()
        .map(|c| {
            at += c;
            at - c
        })
        .collect();
    (d, at)
}

fn run() -> nvshmem::Result<bool> {
    let nv = Nvshmem::init()?;
    let (me, n) = (nv.my_pe() as usize, nv.n_pes() as usize);
    let stream = nv.stream();

    // Alltoallv: every PE knows only its own send and receive counts.
    let send_counts: Vec<usize> = (0..n).map(|r| count(me, r)).collect();
    let recv_counts: Vec<usize> = (0..n).map(|s| count(s, me)).collect();
    let (send_displs, in_len) = displs(&send_counts);
    let (recv_displs, out_len) = displs(&recv_counts);
    // Buffer sizes differ between PEs, but symmetric allocations must not: allocate the
    // largest any PE needs.
    let most = (0..n)
        .map(|p| (0..n).map(|q| count(p, q).max(count(q, p))).sum::<usize>())
        .max()
        .unwrap_or(1);
    let input = nv.alloc::<f32>(most)?;
    let output = nv.alloc::<f32>(most)?;
    let data: Vec<f32> = (0..n)
        .flat_map(|r| std::iter::repeat_n((me * 1000 + r) as f32, count(me, r)))
        .collect();
    input.copy_from_host(&data)?;
    let mut a2av = Alltoallv::world(&nv)?;
    a2av.run(
        input.view(..in_len)?,
        Parts {
            counts: &send_counts,
            displs: &send_displs,
        },
        output.view(..out_len)?,
        Parts {
            counts: &recv_counts,
            displs: &recv_displs,
        },
        stream,
    )?;

    // Grouped send/recv: a ring, one launch, no deadlock whatever the order of the two.
    let mut group = P2pGroup::world(&nv)?;
    let mine = nv.alloc::<u8>(1 << 20)?;
    let got = nv.alloc::<u8>(1 << 20)?;
    mine.copy_from_host(&vec![me as u8; 1 << 20])?;
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    group.run(
        &[P2p::recv(&got, prev as i32), P2p::send(&mine, next as i32)],
        stream,
    )?;
    a2av.sync(stream)?;
    group.check()?;

    let out = output.to_vec()?;
    let a2av_ok = (0..n).all(|s| {
        let part = &out[recv_displs[s]..recv_displs[s] + recv_counts[s]];
        part.iter().all(|&v| v == (s * 1000 + me) as f32)
    });
    let ring_ok = got.to_vec()?.iter().all(|&v| v == prev as u8);
    let v = |ok: bool| if ok { "PASS" } else { "FAIL" };
    println!(
        "PE {me}: alltoallv {}, ring group {}",
        v(a2av_ok),
        v(ring_ok)
    );
    Ok(a2av_ok && ring_ok)
}
