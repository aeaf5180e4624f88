//! The benches: message sizes, CUDA-event timing and medians here; the collective benches'
//! shared harness (checked timing groups, the report's rows) in [`harness`], its table, JSON and
//! CSV in [`render`]; one module per benchmark
//! (`family`: the collectives beside allreduce, which share candidates and options, listed in
//! [`kind`]);
//! the split of our small allreduce's time into rungs in [`probe`]; the sparse bench's
//! selection kernels alone in [`select`];
//! results as stored (`--json`) read back in [`stored`], drawn in [`plot`] and runs of two
//! builds set side by side in [`compare`].

pub mod allreduce;
pub mod compare;
pub mod family;
pub mod harness;
pub mod kind;
pub mod nvshmem_coll;
pub mod plot;
pub mod probe;
pub mod put;
pub mod render;
pub mod select;
pub mod sparse;
pub mod stored;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::CudaStream;
use nvshmem::{Nvshmem, Result};

/// Median of a non-empty list.
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Milliseconds between CUDA events recorded on `stream` before and after `work` enqueues.
pub fn elapsed_ms(
    nv: &Nvshmem,
    stream: &CudaStream,
    mut work: impl FnMut() -> Result<()>,
) -> Result<f64> {
    let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
    let start = nv.context().new_event(flags)?;
    let stop = nv.context().new_event(flags)?;
    start.record(stream)?;
    work()?;
    stop.record(stream)?;
    stop.synchronize()?;
    Ok(start.elapsed_ms(&stop)? as f64)
}

/// Median microseconds per call over `reps` timed groups of 3 calls each, after `warmup`
/// untimed calls. Every PE times; collective calls run on every PE together.
pub fn time_calls(
    nv: &Nvshmem,
    stream: &CudaStream,
    warmup: usize,
    reps: usize,
    mut call: impl FnMut() -> Result<()>,
) -> Result<f64> {
    const CALLS: usize = 3;
    for _ in 0..warmup {
        call()?;
    }
    stream.synchronize()?;
    let mut us = Vec::new();
    for _ in 0..reps.max(1) {
        let ms = elapsed_ms(nv, stream, || {
            for _ in 0..CALLS {
                call()?;
            }
            Ok(())
        })?;
        us.push(ms * 1e3 / CALLS as f64);
    }
    Ok(median(&us))
}
