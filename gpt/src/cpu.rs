//! Runs a whole job on the CPU: one thread per PE, each with a [`CpuBackend`] (the CPU
//! references) and a [`LocalComm`]. Slow, but it exercises exactly the trainer code the GPU
//! runs: schedules, transfers, gradient reductions, clipping, checkpoints. Used by the tests
//! and by `nvsh-gpt train --cpu` for tiny models.

use crate::backend::CpuBackend;
use crate::comm::LocalComm;
use crate::data::Dataset;
use crate::error::{GptError, Result};
use crate::session::{run_session, SessionOptions, SessionResult};
use crate::trainer::{RunConfig, Trainer};
use std::io::Write;
use std::sync::{Arc, Mutex};

/// Runs `run` with `pp * dp` threads. The leader's output goes to `out`; the sample is printed
/// by whichever thread has it. Returns every PE's result (index = PE), or the first error
/// (a PE's own failure rather than the ones it caused in its peers).
pub fn run_local(
    run: &RunConfig,
    data: Arc<Dataset>,
    opts: &SessionOptions,
    out: Arc<Mutex<dyn Write + Send>>,
) -> Result<Vec<SessionResult>> {
    let slots = run.micro_batches.min(8);
    let comms = LocalComm::world(run.pp, run.dp, slots, run.timeout)?;
    let handles: Vec<_> = comms
        .into_iter()
        .enumerate()
        .map(|(pe, comm)| {
            let (run, data, opts, out) = (run.clone(), data.clone(), opts.clone(), out.clone());
            std::thread::Builder::new()
                .name(format!("pe{pe}"))
                .spawn(move || -> Result<SessionResult> {
                    let be = CpuBackend::new();
                    let mut tr = Trainer::new(&be, comm, run, data)?;
                    run_session(&mut tr, &opts, &mut SharedOut(out))
                })
                .map_err(|e| GptError::Comm(format!("cannot start a thread: {e}")))
        })
        .collect::<Result<_>>()?;
    let mut results: Vec<Result<SessionResult>> = handles
        .into_iter()
        .map(|h| {
            h.join()
                .unwrap_or_else(|_| Err(GptError::Comm("a simulated PE panicked".into())))
        })
        .collect();
    // Errors a failing PE causes in its peers (timeouts, stopped peers) rank after its own.
    let rank = |e: &GptError| match e {
        GptError::Comm(_) | GptError::Timeout { .. } => 1,
        _ => 0,
    };
    let worst = results
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.as_ref().err().map(|e| (rank(e), i)))
        .min();
    if let Some((_, i)) = worst {
        return Err(results.swap_remove(i).expect_err("an error"));
    }
    results.into_iter().collect()
}

/// A writer shared by threads: each write goes out whole under the lock.
struct SharedOut(Arc<Mutex<dyn Write + Send>>);

impl Write for SharedOut {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut o = self
            .0
            .lock()
            .map_err(|_| std::io::Error::other("output lock poisoned"))?;
        o.write_all(buf)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        let mut o = self
            .0
            .lock()
            .map_err(|_| std::io::Error::other("output lock poisoned"))?;
        o.flush()
    }
}
