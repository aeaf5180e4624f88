//! Device-initiated put benchmark behind `nvsh bench put`: bandwidth from PE 0 to PE 1 per
//! message size (with the launch shape used) and one-way latency from a p + wait ping-pong.
//! Every PE runs it (it is collective); PE 0 times with CUDA events and gets the report.
//!
//! Checking: all puts of one size and launch shape write the same destination from the same
//! source, so PE 1 checks the destination once after that size's timed loops (per-call and in
//! kernel), against a source pattern hashed with a salt of its own per size and shape, into a
//! destination zeroed before the loops: a size whose puts wrote nothing, or wrote only part,
//! fails.

use crate::bench::harness::{pattern_hash, salt, size_steps};
use crate::bench::render::{rounded, BENCH_SCHEMA};
use crate::bench::{elapsed_ms, median};
use crate::error::{ToolError, ToolResult};
use cudarc::driver::CudaStream;
use nvshmem::result::cuda_check;
use nvshmem::sys;
use nvshmem::tools::raw_stream;
use nvshmem::tools::size_label;
use nvshmem::Nvshmem;
use nvshmem::Result;
use nvshmem::{Completion, LaunchShape};
use serde_json::json;

/// What to measure.
#[derive(Debug, Clone)]
pub struct PutBenchOptions {
    /// Smallest message, bytes.
    pub min_bytes: usize,
    /// Largest message, bytes (no size above it is run).
    pub max_bytes: usize,
    /// Growth factor of the sizes, at least 2: min, min * factor, ... up to max
    /// ([`size_steps`]).
    pub factor: usize,
    /// Timed repetitions per size (the median is reported).
    pub reps: usize,
    /// Untimed repetitions first.
    pub warmup: usize,
    /// Also time a grid of launch shapes at a few sizes.
    pub sweep: bool,
    /// Round trips per latency repetition.
    pub latency_iters: usize,
}

impl Default for PutBenchOptions {
    fn default() -> Self {
        PutBenchOptions {
            min_bytes: 4 << 10,
            max_bytes: 256 << 20,
            factor: 2,
            reps: 20,
            warmup: 3,
            sweep: false,
            latency_iters: 1000,
        }
    }
}

/// Bandwidth of one size and shape.
#[derive(Debug, Clone, PartialEq)]
pub struct BandwidthRow {
    pub bytes: usize,
    pub shape: LaunchShape,
    /// Puts per timed repetition.
    pub iters: usize,
    /// Median time of one put, microseconds.
    pub us_per_put: f64,
    /// Median bandwidth of back-to-back `put_device` calls (one kernel per put), GB/s
    /// (1e9 bytes per second).
    pub gbps: f64,
    pub gbps_min: f64,
    pub gbps_max: f64,
    /// Median bandwidth of the same puts issued in a loop inside one kernel (no launch gaps;
    /// what NVSHMEM's perftests report), GB/s.
    pub gbps_in_kernel: f64,
}

/// One-way latency (half a round trip), microseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct LatencyResult {
    pub one_way_us: f64,
    pub one_way_us_min: f64,
    pub one_way_us_max: f64,
    pub iters: usize,
    pub reps: usize,
}

/// PE 0's results.
#[derive(Debug, Clone, PartialEq)]
pub struct PutBenchReport {
    pub n_pes: i32,
    pub gpu: String,
    /// When the bench ran: the UTC date, YYYY-MM-DD.
    pub date: String,
    pub rows: Vec<BandwidthRow>,
    pub sweep: Vec<BandwidthRow>,
    pub latency: LatencyResult,
}

/// Puts per timed repetition: back-to-back puts worth 512 MiB (at most 1000), so that the one
/// quiet that ends a repetition is spread over many puts, as in NVSHMEM's own perftests.
fn iters_for(bytes: usize) -> usize {
    ((512usize << 20) / bytes).clamp(1, 1000)
}

/// Runs the benchmark on every PE (needs at least 2). Returns the report on PE 0, None on the
/// others.
pub fn run(nv: &Nvshmem, opts: &PutBenchOptions) -> ToolResult<Option<PutBenchReport>> {
    if nv.n_pes() < 2 {
        return Err(ToolError::NeedsPes {
            what: "the put benchmark",
            needed: 2,
            have: nv.n_pes(),
            hint: "run it as `nvsh run -n 2 -- nvsh bench put`",
        });
    }
    let me = nv.my_pe();
    let sizes = size_steps(opts.min_bytes, opts.max_bytes, opts.factor);
    let max = sizes.last().copied().unwrap_or(opts.min_bytes);
    let src = nv.alloc::<u8>(max)?;
    let dst = nv.alloc::<u8>(max)?;
    let flag = nv.alloc_zeroed::<u64>(1)?;
    let stream = nv.stream().clone();
    nv.barrier_all()?;

    // `salt` differs per call of this closure, so data left by an earlier size or shape fails.
    let measure = |bytes, shape: LaunchShape, salt: u64| -> ToolResult<Option<BandwidthRow>> {
        match me {
            0 => src
                .view(..bytes)?
                .copy_from_host(&put_pattern(bytes, salt))?,
            1 => dst.view(..bytes)?.zero()?,
            _ => {}
        }
        // Synchronous copies from pageable memory may return before the data lands.
        nv.context().synchronize()?;
        nv.barrier_all()?;
        let row = if me == 0 {
            let (d, s) = (dst.view(..bytes)?, src.view(..bytes)?);
            let iters = iters_for(bytes);
            let batch = || -> Result<()> {
                for _ in 0..iters {
                    nv.put_device_with(d, s, 1, shape, Completion::AtQuiet, &stream)?;
                }
                nv.quiet_on_stream(&stream);
                Ok(())
            };
            for _ in 0..opts.warmup {
                batch()?;
            }
            stream.synchronize()?;
            let mut gbps = Vec::with_capacity(opts.reps);
            let mut us = Vec::with_capacity(opts.reps);
            for _ in 0..opts.reps.max(1) {
                let ms = elapsed_ms(nv, &stream, batch)?;
                gbps.push((bytes * iters) as f64 / (ms * 1e-3) / 1e9);
                us.push(ms * 1e3 / iters as f64);
            }
            let in_kernel = || put_loop(d, s, 1, iters, shape, &stream);
            in_kernel()?;
            let mut gbps_loop = Vec::with_capacity(opts.reps);
            for _ in 0..opts.reps.max(1) {
                let ms = elapsed_ms(nv, &stream, in_kernel)?;
                gbps_loop.push((bytes * iters) as f64 / (ms * 1e-3) / 1e9);
            }
            Some(BandwidthRow {
                bytes,
                shape,
                iters,
                us_per_put: median(&us),
                gbps: median(&gbps),
                gbps_min: gbps.iter().copied().fold(f64::INFINITY, f64::min),
                gbps_max: gbps.iter().copied().fold(0.0, f64::max),
                gbps_in_kernel: median(&gbps_loop),
            })
        } else {
            None
        };
        // PE 0's loops ended with a quiet: the data is complete on PE 1 after the barrier.
        nv.barrier_all()?;
        if me == 1 {
            check_put(&dst.view(..bytes)?.to_vec()?, bytes, shape, salt)?;
        }
        Ok(row)
    };

    let mut rows = Vec::new();
    for &bytes in &sizes {
        rows.extend(measure(
            bytes,
            LaunchShape::for_bytes(bytes),
            salt(bytes, 0),
        )?);
    }

    let mut sweep = Vec::new();
    if opts.sweep {
        for bytes in [64usize << 10, 1 << 20, 16 << 20, 256 << 20] {
            if bytes > max {
                continue;
            }
            let mut k = 0;
            for threads in [256u32, 512, 1024] {
                for blocks in [4u32, 16, 32, 64, 128, 132, 264] {
                    k += 1;
                    let shape = LaunchShape { blocks, threads };
                    sweep.extend(measure(bytes, shape, salt(bytes, k))?);
                }
            }
        }
    }

    let latency = measure_latency(nv, &flag, &stream, opts)?;
    nv.barrier_all()?;
    if me != 0 {
        return Ok(None);
    }
    Ok(Some(PutBenchReport {
        n_pes: nv.n_pes(),
        gpu: nv.context().name()?,
        date: nvsh_plot::today(),
        rows,
        sweep,
        latency: latency.expect("PE 0 measures latency"),
    }))
}

/// The source bytes of a put of `bytes` with `salt`: a hash of (byte / 8, salt), eight bytes
/// per hash, so no short period.
fn put_pattern(bytes: usize, salt: u64) -> Vec<u8> {
    (0..bytes.div_ceil(8))
        .flat_map(|w| pattern_hash(0, w, salt).to_le_bytes())
        .take(bytes)
        .collect()
}

/// PE 1's check of what the puts of one size and shape left in its destination.
fn check_put(got: &[u8], bytes: usize, shape: LaunchShape, salt: u64) -> ToolResult<()> {
    let want = put_pattern(bytes, salt);
    match got.iter().zip(&want).position(|(a, b)| a != b) {
        None => Ok(()),
        Some(at) => Err(ToolError::DataMismatch {
            what: format!(
                "put benchmark: PE 1 received wrong data for {} puts with shape {shape} (first \
                 mismatch at byte {at}: {} instead of {})",
                size_label(bytes),
                got[at],
                want[at]
            ),
        }),
    }
}

/// One kernel putting `src` into `dest` on `pe` `iters` times, then quieting.
fn put_loop(
    dest: nvshmem::SymView<'_, u8>,
    src: nvshmem::SymView<'_, u8>,
    pe: i32,
    iters: usize,
    shape: LaunchShape,
    stream: &CudaStream,
) -> Result<()> {
    // SAFETY: equal-length symmetric ranges (views of the benchmark's buffers), a valid pe.
    let code = unsafe {
        sys::nvshmemrs_bench_put_loop(
            dest.as_device_ptr().cast(),
            src.as_device_ptr().cast(),
            dest.len().min(src.len()),
            pe,
            iters as i32,
            shape.blocks as i32,
            shape.threads as i32,
            raw_stream(stream),
        )
    };
    cuda_check(code, "put-loop kernel launch")
}

fn pingpong(
    flag: &nvshmem::SymmetricBuffer<'_, u64>,
    peer: i32,
    iters: usize,
    base: u64,
    initiator: bool,
    stream: &CudaStream,
) -> Result<()> {
    // SAFETY: a one-element symmetric u64 and a valid peer; the kernel only touches the flag.
    let code = unsafe {
        sys::nvshmemrs_bench_pingpong(
            flag.as_device_ptr(),
            peer,
            iters as i32,
            base,
            initiator as i32,
            raw_stream(stream),
        )
    };
    cuda_check(code, "ping-pong kernel launch")
}

fn measure_latency(
    nv: &Nvshmem,
    flag: &nvshmem::SymmetricBuffer<'_, u64>,
    stream: &CudaStream,
    opts: &PutBenchOptions,
) -> Result<Option<LatencyResult>> {
    let me = nv.my_pe();
    let iters = opts.latency_iters.max(1);
    let reps = opts.reps.max(1);
    let mut one_way = Vec::with_capacity(reps);
    // Values only grow (base advances each round), so the flag never needs a reset.
    for round in 0..(opts.warmup + reps) {
        let base = (round * iters) as u64;
        nv.barrier_all()?;
        match me {
            0 => {
                let ms = elapsed_ms(nv, stream, || pingpong(flag, 1, iters, base, true, stream))?;
                if round >= opts.warmup {
                    one_way.push(ms * 1e3 / (2 * iters) as f64);
                }
            }
            1 => {
                pingpong(flag, 0, iters, base, false, stream)?;
                stream.synchronize()?;
            }
            _ => {}
        }
    }
    if me != 0 {
        return Ok(None);
    }
    Ok(Some(LatencyResult {
        one_way_us: median(&one_way),
        one_way_us_min: one_way.iter().copied().fold(f64::INFINITY, f64::min),
        one_way_us_max: one_way.iter().copied().fold(0.0, f64::max),
        iters,
        reps,
    }))
}

/// The report as a table.
pub fn render_table(r: &PutBenchReport) -> String {
    let mut s = format!(
        "# device-initiated put, PE 0 -> PE 1, {} PEs, {}; median of timed repetitions\n",
        r.n_pes, r.gpu
    );
    s += "# per call: back-to-back put_device calls, one kernel each (min..max over reps);\n\
          # in kernel: the same puts looped inside one kernel, as NVSHMEM's perftests measure\n\
          # checked: after each size's (and sweep shape's) timed loops, PE 1 compares the whole \
          destination with the source, a pattern salted per size and shape, zeroed before the \
          loops\n";
    s += &format!(
        "{:>8} {:>9} {:>6} {:>10} {:>14} {:>15} {:>16}\n",
        "bytes", "shape", "iters", "us/put", "per-call GB/s", "min..max", "in-kernel GB/s"
    );
    let row = |b: &BandwidthRow| {
        format!(
            "{:>8} {:>9} {:>6} {:>10.2} {:>14.1} {:>15} {:>16.1}\n",
            size_label(b.bytes),
            b.shape.to_string(),
            b.iters,
            b.us_per_put,
            b.gbps,
            format!("{:.1}..{:.1}", b.gbps_min, b.gbps_max),
            b.gbps_in_kernel
        )
    };
    for b in &r.rows {
        s += &row(b);
    }
    if !r.sweep.is_empty() {
        s += "# launch-shape sweep (blocks x threads)\n";
        for b in &r.sweep {
            s += &row(b);
        }
    }
    s += &format!(
        "one-way latency (nvshmem_uint64_p + wait ping-pong, {} round trips x {} reps): \
         median {:.2} us (min {:.2}, max {:.2})\n",
        r.latency.iters,
        r.latency.reps,
        r.latency.one_way_us,
        r.latency.one_way_us_min,
        r.latency.one_way_us_max
    );
    s
}

/// The report as JSON.
pub fn render_json(r: &PutBenchReport) -> String {
    let row = |b: &BandwidthRow| {
        json!({
            "bytes": b.bytes,
            "blocks": b.shape.blocks,
            "threads": b.shape.threads,
            "iters": b.iters,
            "us_per_put": rounded(b.us_per_put, 3),
            "gbps": rounded(b.gbps, 3),
            "gbps_min": rounded(b.gbps_min, 3),
            "gbps_max": rounded(b.gbps_max, 3),
            "gbps_in_kernel": rounded(b.gbps_in_kernel, 3),
        })
    };
    json!({
        "schema": BENCH_SCHEMA,
        "n_pes": r.n_pes,
        "gpu": r.gpu,
        "date": r.date,
        "bandwidth": r.rows.iter().map(row).collect::<Vec<_>>(),
        "sweep": r.sweep.iter().map(row).collect::<Vec<_>>(),
        "latency": {
            "one_way_us": rounded(r.latency.one_way_us, 3),
            "one_way_us_min": rounded(r.latency.one_way_us_min, 3),
            "one_way_us_max": rounded(r.latency.one_way_us_max, 3),
            "iters": r.latency.iters,
            "reps": r.latency.reps,
        },
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_lists() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    #[test]
    fn sizes_double_from_min_to_max() {
        let o = PutBenchOptions::default();
        let sizes = |min, max| size_steps(min, max, o.factor);
        assert_eq!(sizes(4 << 10, 32 << 10), vec![4096, 8192, 16384, 32768]);
        assert_eq!(sizes(4 << 10, 256 << 20).len(), 17);
    }

    #[test]
    fn put_data_is_checked_per_size_and_salt() {
        let shape = LaunchShape::for_bytes(4096);
        let data = put_pattern(4096, salt(4096, 0));
        assert!(check_put(&data, 4096, shape, salt(4096, 0)).is_ok());
        // Data of another size or shape (another salt) is wrong, and so is an untouched buffer.
        let err = check_put(&data, 4096, shape, salt(4096, 1)).unwrap_err();
        assert!(err.to_string().contains("4K puts"), "{err}");
        assert!(check_put(&vec![0; 4096], 4096, shape, salt(4096, 0)).is_err());
        let prefix = put_pattern(8192, salt(8192, 0));
        assert!(check_put(&prefix[..4096], 4096, shape, salt(4096, 0)).is_err());
        // Not periodic: no shift up to 2048 bytes maps the pattern onto itself.
        for p in 1..=2048 {
            assert!((0..4096 - p).any(|i| data[i] != data[i + p]), "period {p}");
        }
        assert_eq!(put_pattern(13, 1).len(), 13);
    }

    #[test]
    fn labels_and_json_are_well_formed() {
        assert_eq!(size_label(4096), "4K");
        assert_eq!(size_label(256 << 20), "256M");
        let row = BandwidthRow {
            bytes: 16 << 20,
            shape: LaunchShape {
                blocks: 32,
                threads: 1024,
            },
            iters: 2,
            us_per_put: 45.0,
            gbps: 372.0,
            gbps_min: 360.0,
            gbps_max: 380.0,
            gbps_in_kernel: 371.0,
        };
        let r = PutBenchReport {
            n_pes: 2,
            gpu: "NVIDIA H200".into(),
            date: "2026-11-22".into(),
            rows: vec![row],
            sweep: vec![],
            latency: LatencyResult {
                one_way_us: 1.2,
                one_way_us_min: 1.1,
                one_way_us_max: 1.4,
                iters: 1000,
                reps: 20,
            },
        };
        let j = render_json(&r);
        assert!(
            j.starts_with("{\"schema\":1,\"n_pes\":2,\"gpu\":\"NVIDIA H200\""),
            "{j}"
        );
        assert!(j.contains("\"blocks\":32,\"threads\":1024"), "{j}");
        let v: serde_json::Value = serde_json::from_str(&j).expect("valid JSON");
        assert_eq!(v["latency"]["one_way_us"], 1.2);
        assert_eq!(v["date"], "2026-11-22");
        // `nvsh plot` reads it back, in-kernel bandwidth included.
        use crate::bench::stored::{parse_bench_json, BenchJson};
        let Ok(BenchJson::Put(p)) = parse_bench_json(&j) else {
            panic!("not read back as put: {j}")
        };
        assert_eq!(p.bandwidth[0].gbps_in_kernel, Some(371.0));
        assert_eq!(p.date.as_deref(), Some("2026-11-22"));
        let t = render_table(&r);
        assert!(
            t.contains("16M") && t.contains("32x1024") && t.contains("372.0"),
            "{t}"
        );
    }
}
