//! Sparse gradient allreduce benchmark behind `nvsh bench sparse`: per method, density and
//! gradient size, the time of the whole call (error-feedback accumulation, selection, exchange,
//! scatter-add), the bytes each PE sends, and the relative error of the result against the
//! exact dense sum of the same selected elements; dense allreduce (ours, and NCCL where it
//! runs) on the same gradients in the same run.
//!
//! Checking: gradients are quarter-integers hashed from (PE, element, size)
//! ([`quarter_value`]), so every sum is exact in f32 (and in bf16 up to 8 PEs). After the
//! timed calls, one more call runs on a zeroed residual into a poisoned output; the reference
//! is each PE's sent pairs ([`SparseAllreduce::selected`], gTop-k:
//! [`SparseAllreduce::included`]) scatter-added into a zeroed dense buffer and summed by the
//! dense allreduce (Ok-Topk: its selected pairs where the result holds a value, the pairs it
//! counts as sent). Top-k, Gaussian and region methods (Ok-Topk, `topk_sa`, `gaussiank_sa`)
//! must match it exactly (a relative error of 0); gTop-k's error is reported (a pair dropped in
//! a tree round whose index another PE kept is not in its sum), not failed. `topk_aopt`'s and
//! Ok-Topk's timed calls reuse their thresholds between re-estimates, as training does; the
//! checked call, after the residual is cleared, re-estimates. No dense warm-up. The dense rows are checked against the host sum of the
//! patterns. The selection kernels' rows (top-k, threshold, a copy as memory speed) are
//! [`crate::bench::select`]'s, on their own gradient.

use crate::bench::harness::{gpu_name_on_pe0, pattern_hash, quarter_value, size_steps};
use crate::bench::render::{rounded, BENCH_SCHEMA};
use crate::bench::select::{grid_normal, select_rows, SelectBuffers};
use crate::bench::time_calls;
use crate::nccl_baseline::NcclBaseline;
use cudarc::driver::CudaStream;
use half::bf16;
use nvshmem::tools::size_label;
use nvshmem::Nvshmem;
use nvshmem::{
    scatter_add, Allreduce, AllreduceAlgo, HostSparse, ReduceOp, SparseAllreduce, SparseMethod,
    SparseOptions, SparseSet, SparseValue,
};
use nvshmem::{Error, Result};
use serde_json::json;
use std::sync::Arc;

/// What to measure.
#[derive(Debug, Clone)]
pub struct SparseBenchOptions {
    pub methods: Vec<SparseMethod>,
    pub densities: Vec<f64>,
    /// Gradient sizes in bytes: min, min x factor, ... up to max.
    pub min_bytes: usize,
    pub max_bytes: usize,
    pub factor: usize,
    /// bf16 gradients instead of f32.
    pub bf16: bool,
    /// Timed repetitions (the median is reported) and untimed ones first.
    pub reps: usize,
    pub warmup: usize,
    /// Error feedback on (as training runs it).
    pub error_feedback: bool,
    /// Also time NCCL's dense allreduce.
    pub nccl: bool,
    /// Time the selection kernels alone ([`crate::bench::select`]).
    pub select: bool,
    /// Time the dense allreduces and the methods (false: the selection rows alone).
    pub exchange: bool,
}

impl Default for SparseBenchOptions {
    fn default() -> Self {
        SparseBenchOptions {
            methods: SparseMethod::ALL.to_vec(),
            densities: vec![0.001, 0.01, 0.1],
            min_bytes: 1 << 20,
            max_bytes: 256 << 20,
            factor: 4,
            bf16: false,
            reps: 5,
            warmup: 2,
            error_feedback: true,
            nccl: true,
            select: true,
            exchange: true,
        }
    }
}

/// One method at one density and size.
#[derive(Debug, Clone, PartialEq)]
pub struct SparseRow {
    /// The method's name, or "dense (ours)" / "dense (nccl)".
    pub method: String,
    pub bytes: usize,
    /// 1 for the dense rows.
    pub density: f64,
    pub k: usize,
    /// Median time of one call, microseconds.
    pub us: f64,
    /// Bytes each PE sent, averaged over the PEs.
    pub sent_bytes_per_pe: f64,
    /// ||result - exact sum of the sent pairs|| / ||exact sum||, the largest over the PEs.
    pub rel_error: f64,
    /// Why the row did not run (NCCL unavailable), else None.
    pub na: Option<String>,
}

/// PE 0's results.
#[derive(Debug, Clone, PartialEq)]
pub struct SparseBenchReport {
    pub n_pes: i32,
    pub gpu: String,
    pub date: String,
    pub dtype: &'static str,
    pub error_feedback: bool,
    pub rows: Vec<SparseRow>,
}

/// Runs the benchmark on every PE. Returns the report on PE 0, None on the others; on PE 0
/// `partial` gets the report of the rows so far after every gradient size, so that a run cut
/// short leaves what it measured.
pub fn run(
    nv: &Nvshmem,
    opts: &SparseBenchOptions,
    partial: &mut dyn FnMut(&SparseBenchReport),
) -> Result<Option<SparseBenchReport>> {
    if opts.bf16 {
        run_typed::<bf16>(nv, opts, partial)
    } else {
        run_typed::<f32>(nv, opts, partial)
    }
}

/// Types the bench runs: the sparse value types the dense allreduce (and NCCL) take too.
trait Grad: SparseValue + nvshmem::Reducible + cudarc::nccl::NcclType {}
impl Grad for f32 {}
impl Grad for bf16 {}

fn run_typed<T: Grad>(
    nv: &Nvshmem,
    opts: &SparseBenchOptions,
    partial: &mut dyn FnMut(&SparseBenchReport),
) -> Result<Option<SparseBenchReport>> {
    let stream = nv.stream().clone();
    let (me, p) = (nv.my_pe(), nv.n_pes());
    let gpu = gpu_name_on_pe0(nv);
    let report = |rows: &[SparseRow]| SparseBenchReport {
        n_pes: p,
        gpu: gpu.clone(),
        date: nvsh_plot::today(),
        dtype: T::NAME,
        error_feedback: opts.error_feedback,
        rows: rows.to_vec(),
    };
    let elem = std::mem::size_of::<T>();
    let sizes: Vec<usize> = size_steps(opts.min_bytes, opts.max_bytes, opts.factor)
        .into_iter()
        .filter(|b| b % elem == 0)
        .collect();
    let max_n = sizes.last().map_or(1, |b| b / elem);
    let mut ar = nv.allreduce_workspace(4 << 20)?;
    let nccl = if opts.nccl && opts.exchange {
        NcclBaseline::for_bench(nv, &stream)
    } else {
        Err("NCCL not asked for (--no-nccl)".to_string())
    };
    // Symmetric: the dense baselines' buffers and the reference's f32 sum.
    let grad = nv.alloc::<T>(max_n)?;
    let dense_out = nv.alloc::<T>(max_n)?;
    let reference = nv.alloc::<f32>(max_n)?;
    let stats = nv.alloc::<f64>(2)?;
    let mut out = stream.alloc_zeros::<T>(max_n)?;
    let mut select_bufs = if opts.select {
        Some(SelectBuffers::<T>::new(&stream, max_n)?)
    } else {
        None
    };
    let mut rows = Vec::new();
    for &bytes in &sizes {
        let n = bytes / elem;
        let salt = bytes as u64;
        if let Some(bufs) = select_bufs.as_mut() {
            // Their own gradient (normal values), in `out` before the methods write it.
            let normal: Vec<T> = (0..n)
                .map(|i| T::of_f32(grid_normal(pattern_hash(me, i, salt)) as f32))
                .collect();
            stream.memcpy_htod(&normal, &mut out.slice_mut(0..n))?;
            let reps = (opts.warmup, opts.reps);
            let g = out.slice(0..n);
            let timed = select_rows(nv, &stream, bufs, &g, &normal, bytes, &opts.densities, reps)?;
            rows.extend(timed.into_iter().map(|t| SparseRow {
                method: t.method.into(),
                bytes,
                density: t.density,
                k: t.k,
                us: t.us,
                sent_bytes_per_pe: 0.0,
                rel_error: 0.0,
                na: None,
            }));
        }
        if !opts.exchange {
            if me == 0 {
                partial(&report(&rows));
            }
            continue;
        }
        let host: Vec<T> = (0..n)
            .map(|i| T::of_f32(quarter_value(pattern_hash(me, i, salt)) as f32))
            .collect();
        grad.view(0..n)?.copy_from_host(&host)?;
        let g = grad.view(0..n)?;
        // Dense: ours, then NCCL, checked against the host sum of every PE's pattern.
        let want: Vec<f64> = (0..n)
            .map(|i| {
                (0..p)
                    .map(|r| quarter_value(pattern_hash(r, i, salt)))
                    .sum::<f64>()
            })
            .collect();
        let d = dense_out.view(0..n)?;
        let us = time_calls(nv, &stream, opts.warmup, opts.reps, || {
            ar.run(g, d, ReduceOp::Sum, AllreduceAlgo::Auto, &stream)
                .map(|_| ())
        })?;
        check_dense("dense (ours)", &d.to_vec()?, &want)?;
        let dense_sent = 2.0 * (p - 1) as f64 / p as f64 * bytes as f64;
        rows.push(dense_row("dense (ours)", bytes, n, us, dense_sent, None));
        match &nccl {
            Ok(c) => {
                let cs = c.stream();
                let us = time_calls(nv, &cs, opts.warmup, opts.reps, || {
                    c.all_reduce(g, d, ReduceOp::Sum)
                })?;
                cs.synchronize()?;
                check_dense("dense (nccl)", &d.to_vec()?, &want)?;
                rows.push(dense_row("dense (nccl)", bytes, n, us, dense_sent, None));
            }
            Err(why) => rows.push(dense_row(
                "dense (nccl)",
                bytes,
                n,
                f64::NAN,
                0.0,
                Some(why.clone()),
            )),
        }
        drop(want);
        for &method in &opts.methods {
            for &density in &opts.densities {
                let o = SparseOptions {
                    error_feedback: opts.error_feedback,
                    ..SparseOptions::new(method, density)
                };
                let mut sp = SparseAllreduce::<T>::world(nv, n, o)?;
                let us = time_calls(nv, &stream, opts.warmup, opts.reps, || {
                    sp.run(&g, &mut out.slice_mut(0..n), &stream)
                })?;
                // The checked call: a zeroed residual (its selection is the gradient's own), a
                // poisoned output.
                sp.clear_residual(&stream)?;
                stream.memcpy_htod(&vec![T::of_f32(f32::NAN); n], &mut out.slice_mut(0..n))?;
                sp.run(&g, &mut out.slice_mut(0..n), &stream)?;
                let sent = match sp.included(&stream)? {
                    Some(inc) => inc,
                    None => sp.selected(&stream)?,
                };
                let sent_bytes = sp.sent_bytes(&stream)? as f64;
                let got = stream.clone_dtoh(&out.slice(0..n))?;
                // Ok-Topk sends (and clears from its residual) only its selected pairs that
                // made the global set: those where the result holds a value.
                let sent = if method == SparseMethod::OkTopK {
                    made_it(sent, &got)
                } else {
                    sent
                };
                let err = sparse_error(nv, &mut ar, &stream, &reference, &sent, &got)?;
                let (sent_avg, err_max) = agree(nv, &mut ar, &stream, &stats, sent_bytes, err)?;
                if method != SparseMethod::GTopK && err_max != 0.0 {
                    return Err(Error::Io {
                        what: "sparse bench check".into(),
                        message: format!(
                            "{} at density {density}, {}: the result differs from the exact \
                             sum of the selected pairs (relative error {err_max:e})",
                            method.name(),
                            size_label(bytes)
                        ),
                    });
                }
                rows.push(SparseRow {
                    method: method.name().into(),
                    bytes,
                    density,
                    k: sp.k(),
                    us,
                    sent_bytes_per_pe: sent_avg,
                    rel_error: err_max,
                    na: None,
                });
            }
        }
        if me == 0 {
            partial(&report(&rows));
        }
    }
    nv.barrier_all()?;
    if me != 0 {
        return Ok(None);
    }
    Ok(Some(report(&rows)))
}

fn dense_row(
    name: &str,
    bytes: usize,
    n: usize,
    us: f64,
    sent: f64,
    na: Option<String>,
) -> SparseRow {
    SparseRow {
        method: name.into(),
        bytes,
        density: 1.0,
        k: n,
        us,
        sent_bytes_per_pe: sent,
        rel_error: 0.0,
        na,
    }
}

fn check_dense<T: SparseValue>(what: &str, got: &[T], want: &[f64]) -> Result<()> {
    match got.iter().zip(want).position(|(g, w)| g.to_f64() != *w) {
        None => Ok(()),
        Some(i) => Err(Error::Io {
            what: "sparse bench check".into(),
            message: format!(
                "{what}: element {i} is {}, the exact sum is {}",
                got[i].to_f64(),
                want[i]
            ),
        }),
    }
}

/// The relative error of `got` against the dense sum over the PEs of their `sent` pairs
/// (scatter-added in f32, summed by the dense allreduce: exact for the bench's data).
/// The pairs of `sel` whose index holds a value that is not zero in `got`.
fn made_it<T: Grad>(sel: HostSparse<T, i32>, got: &[T]) -> HostSparse<T, i32> {
    let keep: Vec<usize> = (0..sel.idx.len())
        .filter(|&j| got[sel.idx[j] as usize].to_f64() != 0.0)
        .collect();
    HostSparse {
        count: keep.len() as u64,
        idx: keep.iter().map(|&j| sel.idx[j]).collect(),
        val: keep.iter().map(|&j| sel.val[j]).collect(),
    }
}

fn sparse_error<T: Grad>(
    nv: &Nvshmem,
    ar: &mut Allreduce<'_>,
    stream: &Arc<CudaStream>,
    reference: &nvshmem::SymmetricBuffer<'_, f32>,
    sent: &HostSparse<T, i32>,
    got: &[T],
) -> Result<f64> {
    let n = got.len();
    let r = reference.view(0..n)?;
    r.zero()?;
    let vals: Vec<f32> = sent.val.iter().map(|v| v.to_f64() as f32).collect();
    let set = SparseSet::<f32, i32>::from_host(stream, &sent.idx, &vals)?;
    let mut rv = r;
    scatter_add(&set, &mut rv, stream)?;
    ar.run_in_place(r, ReduceOp::Sum, AllreduceAlgo::Auto, stream)?;
    stream.synchronize()?;
    let _ = nv;
    let want = r.to_vec()?;
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (g, w) in got.iter().zip(&want) {
        let (g, w) = (g.to_f64(), *w as f64);
        // A NaN (the poison where nothing was written) counts as an error of its own size.
        let d = if g.is_nan() { w.abs().max(1.0) } else { g - w };
        diff += d * d;
        norm += w * w;
    }
    Ok(if norm == 0.0 {
        diff.sqrt()
    } else {
        (diff / norm).sqrt()
    })
}

/// The mean of `sent` and the largest `err` over the PEs.
fn agree(
    _nv: &Nvshmem,
    ar: &mut Allreduce<'_>,
    stream: &Arc<CudaStream>,
    stats: &nvshmem::SymmetricBuffer<'_, f64>,
    sent: f64,
    err: f64,
) -> Result<(f64, f64)> {
    stats.copy_from_host(&[sent, err])?;
    let (s, e) = (stats.view(0..1)?, stats.view(1..2)?);
    ar.run_in_place(s, ReduceOp::Avg, AllreduceAlgo::Auto, stream)?;
    ar.run_in_place(e, ReduceOp::Max, AllreduceAlgo::Auto, stream)?;
    stream.synchronize()?;
    let v = stats.to_vec()?;
    Ok((v[0], v[1]))
}

/// The report as a table.
pub fn render_table(r: &SparseBenchReport) -> String {
    let mut s = format!(
        "# nvsh bench sparse: {} PEs, {}, {} gradients, error feedback {}, {}\n",
        r.n_pes,
        r.gpu,
        r.dtype,
        if r.error_feedback { "on" } else { "off" },
        r.date
    );
    if r.rows.iter().any(|row| row.method.starts_with("select")) {
        s += "# select rows: one PE's kernels on normal values on a 2^-12 grid; top-k (k = density x \
              n) and threshold (at top-k's k-th magnitude) each checked bit for bit against the \
              host's selection; copy = the gradient copied on the device (memory speed), checked\n";
    }
    s += &format!(
        "{:>18} {:>9} {:>8} {:>10} {:>12} {:>14} {:>10}\n",
        "method", "size", "density", "k", "time_us", "sent_B/PE", "rel_err"
    );
    for row in &r.rows {
        if let Some(na) = &row.na {
            s += &format!(
                "{:>18} {:>9} {:>8} {:>10} n/a: {na}\n",
                row.method,
                size_label(row.bytes),
                row.density,
                row.k
            );
            continue;
        }
        s += &format!(
            "{:>18} {:>9} {:>8} {:>10} {:>12.1} {:>14.0} {:>10.2e}\n",
            row.method,
            size_label(row.bytes),
            row.density,
            row.k,
            row.us,
            row.sent_bytes_per_pe,
            row.rel_error
        );
    }
    s
}

/// The finished report as JSON (`"complete": true`).
pub fn render_json(r: &SparseBenchReport) -> String {
    json_report(r, true)
}

/// The report of the rows so far as JSON: `"complete": false`, so that a file left by a run
/// cut short says so.
pub fn render_json_partial(r: &SparseBenchReport) -> String {
    json_report(r, false)
}

fn json_report(r: &SparseBenchReport, complete: bool) -> String {
    let rows: Vec<_> = r
        .rows
        .iter()
        .map(|row| {
            json!({
                "method": row.method,
                "bytes": row.bytes,
                "density": row.density,
                "k": row.k,
                // A row that did not run has no time.
                "time_us": if row.na.is_some() || row.us.is_nan() {
                    json!(null)
                } else {
                    rounded(row.us, 2)
                },
                "sent_bytes_per_pe": rounded(row.sent_bytes_per_pe, 0),
                "rel_error": row.rel_error,
                "na": row.na,
            })
        })
        .collect();
    json!({
        "schema": BENCH_SCHEMA,
        "bench": "sparse",
        "n_pes": r.n_pes,
        "gpu": r.gpu,
        "date": r.date,
        "dtype": r.dtype,
        "error_feedback": r.error_feedback,
        "complete": complete,
        "rows": rows,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_shows_every_row_and_na() {
        let row = |m: &str, na: Option<String>| SparseRow {
            method: m.into(),
            bytes: 1 << 20,
            density: 0.01,
            k: 2622,
            us: 123.4,
            sent_bytes_per_pe: 62928.0,
            rel_error: 0.0,
            na,
        };
        let r = SparseBenchReport {
            n_pes: 4,
            gpu: "NVIDIA H200".into(),
            date: "2025-01-01".into(),
            dtype: "f32",
            error_feedback: true,
            rows: vec![
                row("gtopk", None),
                row("dense (nccl)", Some("no NCCL".into())),
            ],
        };
        let t = render_table(&r);
        assert!(
            t.contains("gtopk") && t.contains("123.4") && t.contains("n/a: no NCCL"),
            "{t}"
        );
        let j: serde_json::Value = serde_json::from_str(&render_json(&r)).unwrap();
        assert_eq!(j["rows"][0]["k"], 2622);
        assert!(j["rows"][1]["time_us"].is_null());
        assert_eq!(j["complete"], true);
        // A run cut short: the same rows, marked incomplete.
        let mut p: serde_json::Value = serde_json::from_str(&render_json_partial(&r)).unwrap();
        assert_eq!(p["complete"], false);
        p["complete"] = serde_json::json!(true);
        assert_eq!(p, j);
    }
}
