//! The classic NVSHMEM ring exchange: every PE fills 8 ints with `pe * 100 + i`, puts them with a
//! device-initiated put into the next PE's buffer, quiets, waits at a barrier, and checks that it
//! received the previous PE's values.
//!
//!     mpirun -np 2 target/release/examples/ring_exchange      (built with --features mpi)
//!     nvsh run -n 2 -- target/release/examples/ring_exchange
//!     target/release/examples/ring_exchange                   (one PE: it sends to itself)
//!
//! Exit status: 0 on PASS, 1 on FAIL, 2 when the runtime could not start.

use nvshmem::Nvshmem;
use std::process::ExitCode;

const N: usize = 8;

pub fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match exchange() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("ring_exchange: error: {e}");
            ExitCode::from(2)
        }
    }
}

fn exchange() -> nvshmem::Result<bool> {
    let nv = Nvshmem::init()?;
    let (me, n) = (nv.my_pe(), nv.n_pes());
    let name = nv.context().name()?;
    println!("PE {me}: GPU {} ({name}), {n} PE(s) in total", nv.device());

    let src = nv.alloc::<i32>(N)?;
    let dst = nv.alloc::<i32>(N)?;
    let values: Vec<i32> = (0..N as i32).map(|i| me * 100 + i).collect();
    src.copy_from_host(&values)?;
    // Poison the destination so that an unwritten element cannot pass.
    dst.copy_from_host(&[-1; N])?;
    // Nobody may write into a peer before that peer has poisoned its buffer.
    nv.barrier_all()?;

    let next = (me + 1) % n;
    println!("PE {me}: sending {values:?} to PE {next}");
    let stream = nv.stream();
    nv.put_device(&dst, &src, next, stream)?;
    nv.quiet_on_stream(stream);
    stream.synchronize()?;
    nv.barrier_all()?;

    let prev = (me + n - 1) % n;
    let expected: Vec<i32> = (0..N as i32).map(|i| prev * 100 + i).collect();
    let got = dst.to_vec()?;
    println!("PE {me}: received {got:?} from PE {prev}");
    let pass = got == expected;
    if pass {
        println!("PE {me}: PASS");
    } else {
        println!("PE {me}: FAIL (expected {expected:?})");
    }
    Ok(pass)
}
