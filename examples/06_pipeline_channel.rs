//! A pipeline through every PE over channels: PE 0 sends micro-batches forward, each middle PE
//! receives and passes them on, the last PE sends each back to PE 0 on a backward channel, and
//! PE 0 checks that every micro-batch came back unchanged. Prints the time per micro-batch.
//!
//!     nvsh run -n 2 -- target/release/examples/06_pipeline_channel [ELEMS] [MICRO_BATCHES]
//!     target/release/examples/06_pipeline_channel                  (one PE: it sends to itself)
//!
//! Exit status: 0 on PASS, 1 on FAIL, 2 when the runtime or a channel failed.

use nvshmem::{Channel, Nvshmem};
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>());
    let elems = args.next().unwrap_or(Ok(1 << 18));
    let batches = args.next().unwrap_or(Ok(64));
    let (Ok(elems @ 1..), Ok(batches @ 1..)) = (elems, batches) else {
        eprintln!("usage: 06_pipeline_channel [ELEMS >= 1] [MICRO_BATCHES >= 1]");
        return ExitCode::from(2);
    };
    match run(elems, batches) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("pipeline_channel: error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Element `j` of micro-batch `m` (exact in f32).
fn value(m: usize, j: usize) -> f32 {
    ((m % 256) * 65_536 + j % 65_536) as f32
}

fn run(elems: usize, batches: usize) -> nvshmem::Result<bool> {
    let nv = Nvshmem::init()?;
    let (me, n) = (nv.my_pe(), nv.n_pes());
    let (prev, next, last) = ((me + n - 1) % n, (me + 1) % n, n - 1);
    // Collective: every PE makes both channels, in the same order.
    let fwd = Channel::<f32>::new(&nv, 2, elems)?;
    let bwd = Channel::<f32>::new(&nv, 2, elems)?;
    let stream = nv.stream().clone();
    // PE 0 receives the returning micro-batches on a stream of its own, so that its sends do
    // not wait for the round trip.
    let back = nv.context().new_stream()?;
    let batch: Vec<f32> = (0..elems).map(|j| value(0, j)).collect();
    let mut sources = Vec::new();
    if me == 0 {
        // A few distinct micro-batches, reused in turn (each send reads its source before the
        // stream moves on, so reuse is safe).
        for m in 0..4 {
            let data: Vec<f32> = (0..elems).map(|j| value(m, j)).collect();
            sources.push(stream.clone_htod(&data)?);
        }
    }
    let mut tmp = stream.clone_htod(&batch)?;
    let mut returned = back.alloc_zeros::<f32>(elems * batches.min(4))?;
    stream.synchronize()?;
    nv.barrier_all()?;

    let t = Instant::now();
    let mut ok = true;
    for m in 0..batches {
        if me == 0 {
            fwd.send(next, &sources[m % 4], elems, &stream)?;
        }
        if me != 0 || n == 1 {
            fwd.recv_into(prev, &mut tmp, elems, &stream)?;
            if me == last {
                bwd.send(0, &tmp, elems, &stream)?;
            } else {
                fwd.send(next, &tmp, elems, &stream)?;
            }
        }
        if me == 0 {
            let slot = m % 4;
            let mut out = returned.slice_mut(slot * elems..(slot + 1) * elems);
            bwd.recv_into(last, &mut out, elems, &back)?;
            if slot == 3 || m + 1 == batches {
                // Check the last few (the host waits here, once every 4 micro-batches).
                let got = back.clone_dtoh(&returned)?;
                for k in 0..=slot {
                    let mb = m - slot + k;
                    let want = (0..elems).map(|j| value(mb % 4, j));
                    if !got[k * elems..(k + 1) * elems].iter().copied().eq(want) {
                        eprintln!("PE 0: micro-batch {mb} came back changed");
                        ok = false;
                    }
                }
            }
        }
    }
    fwd.sync(&stream)?;
    bwd.sync(&stream)?;
    bwd.sync(&back)?;
    let secs = t.elapsed().as_secs_f64();
    let bytes = (elems * std::mem::size_of::<f32>()) as f64;
    println!(
        "PE {me}: {batches} micro-batches of {elems} f32 through {n} PE(s) and back: {:.1} us \
         each, {:.1} GB/s per hop{}",
        secs * 1e6 / batches as f64,
        bytes * batches as f64 / secs / 1e9,
        if me == 0 {
            if ok {
                ", PASS"
            } else {
                ", FAIL"
            }
        } else {
            ""
        }
    );
    nv.barrier_all()?;
    Ok(ok)
}
