//! Allreduce benchmark behind `nvsh bench allreduce`: our algorithms (one-shot, two-shot and
//! the automatic choice), NCCL and NVSHMEM's own reduce, per message size and dtype, in one run
//! on the same GPUs, stream and symmetric buffers.
//!
//! Every PE runs the same sequence of calls (it is collective); PE 0 times with CUDA events and
//! gets the report. Whether a candidate can run, and how many calls a repetition makes, are
//! agreed on by all PEs through symmetric memory, so that a candidate missing on every PE (NCCL
//! not installed, an algorithm not implemented) is reported as n/a and the run goes on.
//! After timing, each candidate's result is checked once against an exact host reference.

use crate::bench::{elapsed_ms, median, sizes};
use crate::nccl_baseline::{HostExchange, NcclBaseline};
use cudarc::driver::CudaStream;
use cudarc::nccl::NcclType;
use nvshmem::coll::allreduce::{Allreduce, AllreduceAlgo};
use nvshmem::coll::op::{ReduceOp, Reducible};
use nvshmem::core::buffer::SymView;
use nvshmem::core::element::HostValue;
use nvshmem::core::env_value::size_label;
use nvshmem::core::error::{Error, Result};
use nvshmem::core::runtime::Nvshmem;
use nvshmem::core::stream::raw_stream;
use nvshmem::sys;
use std::sync::Arc;

/// Bytes each PE contributes to one host exchange (a flag and a mismatch: index, got, expected).
const EXCHANGE_BYTES: usize = 32;

/// Work one timed repetition should hold at least, microseconds.
const MIN_REP_US: f64 = 1000.0;
/// Calls per repetition: at least this many...
const MIN_ITERS: usize = 20;
/// ...and at most this many.
const MAX_ITERS: usize = 1000;

/// What is timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Candidate {
    /// [`AllreduceAlgo::OneShot`].
    OneShot,
    /// [`AllreduceAlgo::TwoShot`].
    TwoShot,
    /// [`AllreduceAlgo::Ring`].
    Ring,
    /// [`AllreduceAlgo::RecursiveDoubling`].
    Rd,
    /// [`AllreduceAlgo::Auto`]: ours as users get it; the ratio compares it with NCCL.
    Auto,
    /// `ncclAllReduce` through [`NcclBaseline`].
    Nccl,
    /// NVSHMEM's host `nvshmemx_<type>_<op>_reduce_on_stream` over the world team.
    Nvshmem,
}

impl Candidate {
    pub const ALL: [Candidate; 7] = [
        Candidate::OneShot,
        Candidate::TwoShot,
        Candidate::Ring,
        Candidate::Rd,
        Candidate::Auto,
        Candidate::Nccl,
        Candidate::Nvshmem,
    ];

    /// The name on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            Candidate::OneShot => "oneshot",
            Candidate::TwoShot => "twoshot",
            Candidate::Ring => "ring",
            Candidate::Rd => "rd",
            Candidate::Auto => "auto",
            Candidate::Nccl => "nccl",
            Candidate::Nvshmem => "nvshmem",
        }
    }

    /// One of the names of [`Candidate::name`].
    pub fn parse(s: &str) -> std::result::Result<Candidate, String> {
        let s = s.trim().to_ascii_lowercase();
        Candidate::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| {
                format!(
                    "'{s}' is not an algorithm: use oneshot, twoshot, ring, rd, auto, nccl or \
                     nvshmem"
                )
            })
    }

    /// Our algorithm, for our candidates.
    pub fn algo(self) -> Option<AllreduceAlgo> {
        match self {
            Candidate::OneShot => Some(AllreduceAlgo::OneShot),
            Candidate::TwoShot => Some(AllreduceAlgo::TwoShot),
            Candidate::Ring => Some(AllreduceAlgo::Ring),
            Candidate::Rd => Some(AllreduceAlgo::RecursiveDoubling),
            Candidate::Auto => Some(AllreduceAlgo::Auto),
            Candidate::Nccl | Candidate::Nvshmem => None,
        }
    }
}

/// The report's name of an algorithm.
pub fn algo_name(algo: AllreduceAlgo) -> &'static str {
    algo.name()
}

/// Element types the benchmark runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BenchDtype {
    F32,
    Bf16,
}

impl BenchDtype {
    pub const ALL: [BenchDtype; 2] = [BenchDtype::F32, BenchDtype::Bf16];

    pub fn name(self) -> &'static str {
        match self {
            BenchDtype::F32 => "f32",
            BenchDtype::Bf16 => "bf16",
        }
    }

    /// "f32" (or "float32", "float") and "bf16" (or "bfloat16").
    pub fn parse(s: &str) -> std::result::Result<BenchDtype, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "float32" | "float" => Ok(BenchDtype::F32),
            "bf16" | "bfloat16" => Ok(BenchDtype::Bf16),
            other => Err(format!(
                "'{other}' is not a benchmark dtype: use f32 or bf16"
            )),
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            BenchDtype::F32 => 4,
            BenchDtype::Bf16 => 2,
        }
    }

    /// Every integer up to this is exact in the type (2^significand bits).
    pub fn exact_integer_limit(self) -> f64 {
        match self {
            BenchDtype::F32 => (1u64 << 24) as f64,
            BenchDtype::Bf16 => 256.0,
        }
    }

    /// Relative rounding error of one operation (half an ulp at 1).
    pub fn unit_roundoff(self) -> f64 {
        match self {
            BenchDtype::F32 => 2f64.powi(-24),
            BenchDtype::Bf16 => 2f64.powi(-8),
        }
    }
}

/// "sum", "prod", "min", "max" or "avg".
pub fn parse_op(s: &str) -> std::result::Result<ReduceOp, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "sum" => Ok(ReduceOp::Sum),
        "prod" => Ok(ReduceOp::Prod),
        "min" => Ok(ReduceOp::Min),
        "max" => Ok(ReduceOp::Max),
        "avg" => Ok(ReduceOp::Avg),
        other => Err(format!(
            "'{other}' is not a reduction: use sum, prod, min, max or avg"
        )),
    }
}

/// [`ReduceOp::name`].
pub fn op_name(op: ReduceOp) -> &'static str {
    op.name()
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct AllreduceBenchOptions {
    /// Smallest message, bytes.
    pub min_bytes: usize,
    /// Largest message, bytes (sizes double from min to max).
    pub max_bytes: usize,
    pub dtypes: Vec<BenchDtype>,
    pub op: ReduceOp,
    /// Timed repetitions per size (the median is reported).
    pub reps: usize,
    /// Untimed calls first (they also size the repetitions).
    pub warmup: usize,
    /// Columns of the report, in this order.
    pub candidates: Vec<Candidate>,
    /// Receive slot size of our workspace ([`Nvshmem::allreduce_workspace`]).
    pub slot_bytes: usize,
}

impl Default for AllreduceBenchOptions {
    fn default() -> Self {
        AllreduceBenchOptions {
            min_bytes: 4 << 10,
            max_bytes: 256 << 20,
            dtypes: BenchDtype::ALL.to_vec(),
            op: ReduceOp::Sum,
            reps: 20,
            warmup: 3,
            candidates: Candidate::ALL.to_vec(),
            slot_bytes: 8 << 20,
        }
    }
}

/// The result check of a timed candidate.
#[derive(Debug, Clone, PartialEq)]
pub enum Check {
    /// Every PE's output equalled the host reference.
    Pass,
    /// Where it did not (per PE: first wrong element, value, expected).
    Fail(String),
}

/// One candidate at one size.
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    /// Calls per timed repetition.
    pub iters: usize,
    /// Median time of one call, microseconds.
    pub us: f64,
    /// Bytes / time, GB/s (1e9 bytes per second).
    pub algbw: f64,
    /// algbw * 2(n-1)/n: the bandwidth each GPU's links carry in a ring-optimal allreduce.
    pub busbw: f64,
    pub check: Check,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Timed(Timing),
    /// Not run, and why (the same on every PE).
    Unavailable(String),
}

/// One size and dtype.
#[derive(Debug, Clone, PartialEq)]
pub struct AllreduceRow {
    pub bytes: usize,
    pub dtype: BenchDtype,
    /// In the report's candidate order.
    pub results: Vec<(Candidate, Outcome)>,
    /// What `Auto` ran, when it ran.
    pub auto_algo: Option<AllreduceAlgo>,
}

impl AllreduceRow {
    pub fn outcome(&self, c: Candidate) -> Option<&Outcome> {
        self.results.iter().find(|(k, _)| *k == c).map(|(_, o)| o)
    }

    /// The timing of `c` if it ran and its result was right.
    pub fn timing(&self, c: Candidate) -> Option<&Timing> {
        match self.outcome(c) {
            Some(Outcome::Timed(t)) if t.check == Check::Pass => Some(t),
            _ => None,
        }
    }

    /// Auto's time over NCCL's (< 1: ours is faster), where both ran correctly.
    pub fn ratio_auto_over_nccl(&self) -> Option<f64> {
        let (ours, nccl) = (self.timing(Candidate::Auto)?, self.timing(Candidate::Nccl)?);
        Some(time_ratio(ours.us, nccl.us))
    }
}

/// PE 0's results.
#[derive(Debug, Clone, PartialEq)]
pub struct AllreduceBenchReport {
    pub n_pes: i32,
    pub gpu: String,
    pub op: ReduceOp,
    pub reps: usize,
    pub warmup: usize,
    pub slot_bytes: usize,
    /// Our protocol settings ([`Allreduce::settings`]), when our workspace was created.
    pub settings: Option<String>,
    /// The loaded NCCL, when the NCCL baseline ran.
    pub nccl_version: Option<String>,
    /// NCCL_NVLS_ENABLE as the job saw it (NVLink multicast changes NCCL's speed).
    pub nccl_nvls_enable: Option<String>,
    pub candidates: Vec<Candidate>,
    pub rows: Vec<AllreduceRow>,
}

impl AllreduceBenchReport {
    /// "candidate dtype size: detail" for each wrong result.
    pub fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        for row in &self.rows {
            for (c, o) in &row.results {
                if let Outcome::Timed(Timing {
                    check: Check::Fail(why),
                    ..
                }) = o
                {
                    out.push(format!(
                        "{} {} {}: {why}",
                        c.name(),
                        row.dtype.name(),
                        size_label(row.bytes)
                    ));
                }
            }
        }
        out
    }

    /// An error when any candidate produced a wrong result.
    pub fn verify(&self) -> Result<()> {
        let failures = self.failures();
        if failures.is_empty() {
            return Ok(());
        }
        Err(Error::DataMismatch {
            what: format!(
                "allreduce benchmark: {} wrong result(s): {}",
                failures.len(),
                failures.join("; ")
            ),
        })
    }
}

/// Bytes / time in GB/s (1e9 bytes per second).
pub fn algbw_gbps(bytes: usize, us: f64) -> f64 {
    bytes as f64 / (us * 1e-6) / 1e9
}

/// The bus bandwidth of an allreduce (nccl-tests' definition): algbw * 2(n-1)/n.
pub fn busbw_gbps(algbw: f64, n_pes: i32) -> f64 {
    if n_pes < 1 {
        return 0.0;
    }
    let n = n_pes as f64;
    algbw * 2.0 * (n - 1.0) / n
}

/// Ours over theirs: below 1 means ours takes less time.
pub fn time_ratio(ours_us: f64, theirs_us: f64) -> f64 {
    ours_us / theirs_us
}

/// Calls per timed repetition from an estimate of one call: enough for MIN_REP_US of work,
/// at least MIN_ITERS, at most MAX_ITERS.
pub fn iters_for(us_per_call: f64) -> usize {
    if us_per_call.is_nan() || us_per_call <= 0.0 {
        return MAX_ITERS;
    }
    let n = (MIN_REP_US / us_per_call).ceil().min(MAX_ITERS as f64) as usize;
    n.clamp(MIN_ITERS, MAX_ITERS)
}

fn pe_sum(n_pes: i32) -> f64 {
    let n = n_pes as f64;
    n * (n + 1.0) / 2.0
}

/// The input pattern repeats with this period: the largest of 4, 2 and 1 for which every
/// partial sum over PEs stays an integer the dtype holds exactly (so sums are exact in any
/// order). 4 for f32 always, and for bf16 up to 8 PEs.
pub fn pattern_period(n_pes: i32, dtype: BenchDtype) -> usize {
    let s = pe_sum(n_pes);
    [4usize, 2, 1]
        .into_iter()
        .find(|&k| k as f64 * s <= dtype.exact_integer_limit())
        .unwrap_or(1)
}

/// Element `i` of PE `pe`'s input. Prod: 2 on one PE per element, 1 on the others (products stay
/// powers of two); every other op: (pe + 1) * (1 + i % period).
pub fn input_value(op: ReduceOp, pe: i32, i: usize, n_pes: i32, period: usize) -> f64 {
    match op {
        ReduceOp::Prod => {
            if (i + pe as usize) % n_pes.max(1) as usize == 0 {
                2.0
            } else {
                1.0
            }
        }
        _ => (pe + 1) as f64 * (1 + i % period.max(1)) as f64,
    }
}

/// The exact result at element `i` for the pattern of [`input_value`], in closed form:
/// with m = 1 + i % period, sum m*n(n+1)/2, avg m(n+1)/2, min m, max m*n, prod 2.
pub fn expected_value(op: ReduceOp, i: usize, n_pes: i32, period: usize) -> f64 {
    let m = (1 + i % period.max(1)) as f64;
    let n = n_pes as f64;
    match op {
        ReduceOp::Sum => m * pe_sum(n_pes),
        ReduceOp::Avg => m * (n + 1.0) / 2.0,
        ReduceOp::Min => m,
        ReduceOp::Max => m * n,
        ReduceOp::Prod => 2.0,
    }
}

/// How far a correct result may be from [`expected_value`]: 0 where the pattern keeps every
/// step exact; for avg (which NCCL computes as a sum of inputs pre-scaled by 1/n) and for sums
/// past the dtype's exact integers, a bound on the rounding of 2n + 1 operations.
pub fn tolerance(op: ReduceOp, dtype: BenchDtype, n_pes: i32, expected: f64) -> f64 {
    let rounding = expected.abs() * (2.0 * n_pes as f64 + 1.0) * dtype.unit_roundoff();
    match op {
        ReduceOp::Avg => rounding,
        ReduceOp::Sum if pe_sum(n_pes) > dtype.exact_integer_limit() => rounding,
        _ => 0.0,
    }
}

/// First element of `got` outside the tolerance: (index, got, expected).
pub fn first_mismatch(
    got: impl IntoIterator<Item = f64>,
    op: ReduceOp,
    dtype: BenchDtype,
    n_pes: i32,
    period: usize,
) -> Option<(usize, f64, f64)> {
    let period = period.max(1);
    let table: Vec<(f64, f64)> = (0..period)
        .map(|i| {
            let e = expected_value(op, i, n_pes, period);
            (e, tolerance(op, dtype, n_pes, e))
        })
        .collect();
    got.into_iter().enumerate().find_map(|(i, g)| {
        let (e, tol) = table[i % period];
        // Written so that NaN counts as wrong.
        let ok = (g - e).abs() <= tol;
        (!ok).then_some((i, g, e))
    })
}

/// Element types of the benchmark: ours, NCCL's, and NVSHMEM's reduce for them.
trait BenchElement: Reducible + NcclType + HostValue {
    const BENCH_DTYPE: BenchDtype;
    /// NVSHMEM's host reduce on a stream for `op` and its name; None where NVSHMEM has none.
    ///
    /// # Safety
    /// `dest` and `src` are symmetric addresses of `n` elements on every PE of `team`, and
    /// `stream` a live stream of this PE's context.
    unsafe fn nvshmem_reduce(
        op: ReduceOp,
        team: sys::nvshmem_team_t,
        dest: *mut Self,
        src: *const Self,
        n: usize,
        stream: sys::cudaStream_t,
    ) -> Option<(&'static str, i32)>;
}

/// The four NVSHMEM reductions of one C type name, with NVSHMEM's pointer type.
macro_rules! nvshmem_reduce_fns {
    ($op:expr, $team:expr, $dest:expr, $src:expr, $n:expr, $stream:expr, $raw:ty,
     $sum:ident, $prod:ident, $min:ident, $max:ident) => {{
        let (dest, src) = ($dest as *mut $raw, $src as *const $raw);
        match $op {
            ReduceOp::Sum => Some((stringify!($sum), sys::$sum($team, dest, src, $n, $stream))),
            ReduceOp::Prod => Some((stringify!($prod), sys::$prod($team, dest, src, $n, $stream))),
            ReduceOp::Min => Some((stringify!($min), sys::$min($team, dest, src, $n, $stream))),
            ReduceOp::Max => Some((stringify!($max), sys::$max($team, dest, src, $n, $stream))),
            ReduceOp::Avg => None,
        }
    }};
}

impl BenchElement for f32 {
    const BENCH_DTYPE: BenchDtype = BenchDtype::F32;
    unsafe fn nvshmem_reduce(
        op: ReduceOp,
        team: sys::nvshmem_team_t,
        dest: *mut Self,
        src: *const Self,
        n: usize,
        stream: sys::cudaStream_t,
    ) -> Option<(&'static str, i32)> {
        nvshmem_reduce_fns!(
            op,
            team,
            dest,
            src,
            n,
            stream,
            f32,
            nvshmemx_float_sum_reduce_on_stream,
            nvshmemx_float_prod_reduce_on_stream,
            nvshmemx_float_min_reduce_on_stream,
            nvshmemx_float_max_reduce_on_stream
        )
    }
}

impl BenchElement for half::bf16 {
    const BENCH_DTYPE: BenchDtype = BenchDtype::Bf16;
    unsafe fn nvshmem_reduce(
        op: ReduceOp,
        team: sys::nvshmem_team_t,
        dest: *mut Self,
        src: *const Self,
        n: usize,
        stream: sys::cudaStream_t,
    ) -> Option<(&'static str, i32)> {
        // half::bf16 and __nv_bfloat16 are both the 16 bits of a bfloat16.
        nvshmem_reduce_fns!(
            op,
            team,
            dest,
            src,
            n,
            stream,
            sys::__nv_bfloat16,
            nvshmemx_bfloat16_sum_reduce_on_stream,
            nvshmemx_bfloat16_prod_reduce_on_stream,
            nvshmemx_bfloat16_min_reduce_on_stream,
            nvshmemx_bfloat16_max_reduce_on_stream
        )
    }
}

/// Whatever the run shares between dtypes and sizes.
struct Bench<'o, 'nv> {
    nv: &'nv Nvshmem,
    opts: &'o AllreduceBenchOptions,
    stream: Arc<CudaStream>,
    exchange: HostExchange<'nv>,
    ours: std::result::Result<Allreduce<'nv>, String>,
    nccl: std::result::Result<NcclBaseline<'nv>, String>,
}

/// One candidate, ready to be called.
enum Runner<'x, 'nv> {
    Ours(&'x mut Allreduce<'nv>, AllreduceAlgo),
    Nccl(&'x NcclBaseline<'nv>),
    Nvshmem(sys::nvshmem_team_t),
}

impl Runner<'_, '_> {
    /// One allreduce of `input` into `output`, issued on `stream`; what Auto picked, for ours.
    fn call<T: BenchElement>(
        &mut self,
        input: SymView<'_, T>,
        output: SymView<'_, T>,
        op: ReduceOp,
        stream: &CudaStream,
    ) -> Result<Option<AllreduceAlgo>> {
        match self {
            Runner::Ours(ws, algo) => ws.run(input, output, op, *algo, stream).map(Some),
            Runner::Nccl(nccl) => nccl.all_reduce(input, output, op).map(|()| None),
            Runner::Nvshmem(team) => {
                // SAFETY: equal-length views of the benchmark's symmetric buffers, allocated on
                // every PE; the world team; the runtime's stream.
                let called = unsafe {
                    T::nvshmem_reduce(
                        op,
                        *team,
                        output.as_device_ptr(),
                        input.as_device_ptr(),
                        input.len(),
                        raw_stream(stream),
                    )
                };
                match called {
                    Some((_, 0)) => Ok(None),
                    Some((call, status)) => Err(Error::Bootstrap { call, status }),
                    None => Err(Error::InvalidEnv {
                        var: "--op",
                        value: op_name(op).into(),
                        expected: "sum, prod, min or max for NVSHMEM's reduce",
                    }),
                }
            }
        }
    }
}

/// Runs the benchmark on every PE (collective; any PE count). Returns the report on PE 0, None
/// on the others. Wrong results are recorded in the report, not returned as errors: call
/// [`AllreduceBenchReport::verify`] after printing it.
pub fn run(nv: &Nvshmem, opts: &AllreduceBenchOptions) -> Result<Option<AllreduceBenchReport>> {
    let stream = nv.stream().clone();
    let exchange = HostExchange::new(nv, EXCHANGE_BYTES)?;
    let ours = if opts.candidates.iter().any(|c| c.algo().is_some()) {
        let ws = nv.allreduce_workspace(opts.slot_bytes);
        let failed = exchange.failed_pes(ws.is_ok())?;
        match ws {
            Err(e) if failed.len() == nv.n_pes() as usize => Err(e.to_string()),
            Err(e) => return Err(e),
            Ok(_) if !failed.is_empty() => return Err(failed_elsewhere("our workspace", &failed)),
            Ok(ws) => Ok(ws),
        }
    } else {
        Err("not requested".into())
    };
    let nccl = if opts.candidates.contains(&Candidate::Nccl) {
        NcclBaseline::new(nv, &stream).map_err(|e| match e {
            // Already says "NCCL: ..."; the variant's "CUDA driver call failed" would mislead.
            Error::Driver { message } => message,
            e => e.to_string(),
        })
    } else {
        Err("not requested".into())
    };
    let nccl_version = nccl.as_ref().ok().map(NcclBaseline::version_string);
    // The workspace rounds the slot size; report what ran.
    let slot_bytes = ours.as_ref().map_or(opts.slot_bytes, Allreduce::slot_bytes);
    let settings = ours.as_ref().ok().map(Allreduce::settings);
    let mut bench = Bench {
        nv,
        opts,
        stream,
        exchange,
        ours,
        nccl,
    };
    let mut rows = Vec::new();
    for &dtype in &opts.dtypes {
        match dtype {
            BenchDtype::F32 => bench_dtype::<f32>(&mut bench, &mut rows)?,
            BenchDtype::Bf16 => bench_dtype::<half::bf16>(&mut bench, &mut rows)?,
        }
    }
    nv.barrier_all()?;
    if nv.my_pe() != 0 {
        return Ok(None);
    }
    Ok(Some(AllreduceBenchReport {
        n_pes: nv.n_pes(),
        gpu: nv.context().name()?,
        op: opts.op,
        reps: opts.reps.max(1),
        warmup: opts.warmup.max(1),
        slot_bytes,
        settings,
        nccl_version,
        nccl_nvls_enable: std::env::var("NCCL_NVLS_ENABLE").ok(),
        candidates: opts.candidates.clone(),
        rows,
    }))
}

/// The error for a step that worked here but failed on other PEs: the job cannot go on
/// together (this PE's stream may wait on them forever).
fn failed_elsewhere(what: &str, failed: &[i32]) -> Error {
    Error::Io {
        what: format!("allreduce benchmark, {what}"),
        message: format!(
            "failed on PE(s) {failed:?} but not on this one; stopping, since the PEs can no \
             longer run the same sequence of calls"
        ),
    }
}

fn bench_dtype<T: BenchElement>(b: &mut Bench<'_, '_>, rows: &mut Vec<AllreduceRow>) -> Result<()> {
    let (nv, opts) = (b.nv, b.opts);
    let (me, n) = (nv.my_pe(), nv.n_pes());
    let elem = std::mem::size_of::<T>();
    let list: Vec<usize> = sizes(opts.min_bytes, opts.max_bytes)
        .into_iter()
        .filter(|bytes| bytes % elem == 0)
        .collect();
    let Some(&max) = list.last() else {
        return Ok(());
    };
    // The largest size once; every size is a prefix of it.
    let len_max = max / elem;
    let input = nv.alloc::<T>(len_max)?;
    let output = nv.alloc::<T>(len_max)?;
    let period = pattern_period(n, T::BENCH_DTYPE);
    let host: Vec<T> = (0..len_max)
        .map(|i| T::from_f64(input_value(opts.op, me, i, n, period)))
        .collect();
    input.copy_from_host(&host)?;
    drop(host);
    // A synchronous copy from pageable memory may return before the data lands.
    nv.context().synchronize()?;
    nv.barrier_all()?;
    for bytes in list {
        let len = bytes / elem;
        let (inp, out) = (input.view(..len)?, output.view(..len)?);
        let mut row = AllreduceRow {
            bytes,
            dtype: T::BENCH_DTYPE,
            results: Vec::new(),
            auto_algo: None,
        };
        for &c in &opts.candidates {
            let outcome = measure(b, c, inp, out, period, &mut row.auto_algo)?;
            row.results.push((c, outcome));
        }
        rows.push(row);
    }
    Ok(())
}

/// Times one candidate at one size and checks its result once. Collective.
fn measure<T: BenchElement>(
    b: &mut Bench<'_, '_>,
    c: Candidate,
    inp: SymView<'_, T>,
    out: SymView<'_, T>,
    period: usize,
    auto_algo: &mut Option<AllreduceAlgo>,
) -> Result<Outcome> {
    let Bench {
        nv,
        opts,
        stream,
        exchange,
        ours,
        nccl,
    } = b;
    let (nv, op, n) = (*nv, opts.op, nv.n_pes());
    // Decided from state every PE shares, so every PE skips the same candidates.
    let mut runner = match (c.algo(), c) {
        (Some(algo), _) => match ours {
            Ok(ws) => Runner::Ours(ws, algo),
            Err(why) => return Ok(Outcome::Unavailable(why.clone())),
        },
        (None, Candidate::Nccl) => match nccl {
            Ok(nccl) => Runner::Nccl(nccl),
            Err(why) => return Ok(Outcome::Unavailable(why.clone())),
        },
        (None, _) => {
            if op == ReduceOp::Avg {
                return Ok(Outcome::Unavailable(
                    "NVSHMEM has no avg reduction".to_string(),
                ));
            }
            Runner::Nvshmem(nv.team_world().handle())
        }
    };
    let call = |runner: &mut Runner<'_, '_>| runner.call(inp, out, op, stream);

    // A first call tells whether the candidate runs at all; the PEs agree before anyone waits
    // on the GPU, since a PE whose call launched may be waiting for the others.
    nv.barrier_all()?;
    let probe = call(&mut runner);
    let failed = exchange.failed_pes(probe.is_ok())?;
    match probe {
        Err(e) if failed.len() == n as usize => return Ok(Outcome::Unavailable(e.to_string())),
        Err(e) => return Err(e),
        Ok(_) if !failed.is_empty() => return Err(failed_elsewhere(c.name(), &failed)),
        Ok(picked) => {
            if c == Candidate::Auto {
                *auto_algo = picked;
            }
        }
    }
    stream.synchronize()?;

    // Warm-up, timed to size the repetitions; PE 0's estimate is everyone's.
    let warmup = opts.warmup.max(1);
    nv.barrier_all()?;
    let ms = elapsed_ms(nv, stream, || {
        for _ in 0..warmup {
            call(&mut runner)?;
        }
        Ok(())
    })?;
    let iters = exchange.broadcast_from_pe0(iters_for(ms * 1e3 / warmup as f64) as u64)? as usize;

    let mut us = Vec::with_capacity(opts.reps.max(1));
    for _ in 0..opts.reps.max(1) {
        // Every repetition starts together, so skew between PEs is not timed.
        nv.barrier_all()?;
        let ms = elapsed_ms(nv, stream, || {
            for _ in 0..iters {
                call(&mut runner)?;
            }
            Ok(())
        })?;
        us.push(ms * 1e3 / iters as f64);
    }
    let us = median(&us);

    // One checked call into a zeroed output (the expected values are never 0), so the result
    // is this candidate's own.
    nv.barrier_all()?;
    out.zero()?;
    nv.context().synchronize()?;
    nv.barrier_all()?;
    call(&mut runner)?;
    stream.synchronize()?;
    let got = out.to_vec()?;
    let mismatch = first_mismatch(
        got.into_iter().map(T::to_f64),
        op,
        T::BENCH_DTYPE,
        n,
        period,
    );
    let mut mine = vec![mismatch.is_none() as u8];
    if let Some((i, g, e)) = mismatch {
        mine.extend((i as u64).to_le_bytes());
        mine.extend(g.to_le_bytes());
        mine.extend(e.to_le_bytes());
    }
    let all = exchange.all_gather(&mine)?;
    let wrong: Vec<String> = all
        .iter()
        .enumerate()
        .filter(|(_, m)| m[0] != 1)
        .map(|(pe, m)| {
            let word = |at: usize| {
                let mut w = [0u8; 8];
                w.copy_from_slice(&m[at..at + 8]);
                w
            };
            format!(
                "PE {pe} element {} = {} (expected {})",
                u64::from_le_bytes(word(1)),
                f64::from_le_bytes(word(9)),
                f64::from_le_bytes(word(17))
            )
        })
        .collect();
    let check = if wrong.is_empty() {
        Check::Pass
    } else {
        Check::Fail(wrong.join(", "))
    };
    let algbw = algbw_gbps(inp.num_bytes(), us);
    Ok(Outcome::Timed(Timing {
        iters,
        us,
        algbw,
        busbw: busbw_gbps(algbw, n),
        check,
    }))
}

/// Width of one candidate's group of columns.
const GROUP: usize = 25;

/// The report as a table: one row per size and dtype, us / algbw / busbw per candidate.
pub fn render_table(r: &AllreduceBenchReport) -> String {
    let nccl = match (&r.nccl_version, &r.nccl_nvls_enable) {
        (Some(v), Some(nvls)) => format!("NCCL {v} (NCCL_NVLS_ENABLE={nvls})"),
        (Some(v), None) => format!("NCCL {v} (NCCL_NVLS_ENABLE unset)"),
        (None, _) => "no NCCL".to_string(),
    };
    let mut s = format!(
        "# allreduce ({}) on {} PE(s), {}; {}; our workspace slots {}\n",
        op_name(r.op),
        r.n_pes,
        r.gpu,
        nccl,
        size_label(r.slot_bytes)
    );
    if let Some(settings) = &r.settings {
        s += &format!("# ours: {settings}\n");
    }
    s += &format!(
        "# us: median over {} reps of one call (CUDA events around back-to-back calls on one \
         stream, after {} warm-up calls)\n",
        r.reps, r.warmup
    );
    s += "# algbw = bytes / time, busbw = algbw * 2(n-1)/n, GB/s (1e9 B/s); \
          auto/nccl = auto's time over NCCL's (< 1: ours is faster)\n";
    s += &format!("{:>8} {:>5}", "", "");
    for c in &r.candidates {
        s += &format!(" {:-^GROUP$}", format!(" {} ", c.name()));
    }
    s += "\n";
    s += &format!("{:>8} {:>5}", "bytes", "dtype");
    for _ in &r.candidates {
        s += &format!(" {:>9} {:>7} {:>7}", "us", "algbw", "busbw");
    }
    s += &format!(" {:>9} {:>7}\n", "auto/nccl", "auto=");
    let mut notes: Vec<String> = Vec::new();
    for row in &r.rows {
        s += &format!("{:>8} {:>5}", size_label(row.bytes), row.dtype.name());
        for &c in &r.candidates {
            s += &match row.outcome(c) {
                Some(Outcome::Timed(t)) if t.check == Check::Pass => {
                    format!(" {:>9.2} {:>7.1} {:>7.1}", t.us, t.algbw, t.busbw)
                }
                Some(Outcome::Timed(_)) => format!(" {:>9} {:>7} {:>7}", "WRONG", "-", "-"),
                Some(Outcome::Unavailable(why)) => {
                    let note = format!("# {}: n/a ({why})", c.name());
                    if !notes.contains(&note) {
                        notes.push(note);
                    }
                    format!(" {:>9} {:>7} {:>7}", "n/a", "-", "-")
                }
                None => format!(" {:>9} {:>7} {:>7}", "-", "-", "-"),
            };
        }
        let ratio = row
            .ratio_auto_over_nccl()
            .map_or("-".to_string(), |x| format!("{x:.2}"));
        let picked = row.auto_algo.map_or("-", algo_name);
        s += &format!(" {ratio:>9} {picked:>7}\n");
    }
    for note in notes {
        s += &note;
        s += "\n";
    }
    let failures = r.failures();
    if failures.is_empty() {
        s += "# every timed result was checked against the exact host reference on every PE\n";
    } else {
        for f in failures {
            s += &format!("# WRONG RESULT: {f}\n");
        }
    }
    s
}

/// A JSON string literal.
fn json_str(v: &str) -> String {
    let mut out = String::with_capacity(v.len() + 2);
    out.push('"');
    for ch in v.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_opt_str(v: Option<&str>) -> String {
    v.map_or("null".to_string(), json_str)
}

/// The report as JSON.
pub fn render_json(r: &AllreduceBenchReport) -> String {
    let outcome = |o: &Outcome| match o {
        Outcome::Timed(t) => {
            let check = match &t.check {
                Check::Pass => "\"check\":\"pass\"".to_string(),
                Check::Fail(why) => {
                    format!("\"check\":\"fail\",\"check_detail\":{}", json_str(why))
                }
            };
            format!(
                "{{\"us\":{:.3},\"algbw\":{:.3},\"busbw\":{:.3},\"iters\":{},{check}}}",
                t.us, t.algbw, t.busbw, t.iters
            )
        }
        Outcome::Unavailable(why) => format!("{{\"na\":{}}}", json_str(why)),
    };
    let row = |row: &AllreduceRow| {
        let results = row
            .results
            .iter()
            .map(|(c, o)| format!("{}:{}", json_str(c.name()), outcome(o)))
            .collect::<Vec<_>>()
            .join(",");
        format!(
            "{{\"bytes\":{},\"dtype\":{},\"auto_algo\":{},\"ratio_auto_over_nccl\":{},\
             \"results\":{{{results}}}}}",
            row.bytes,
            json_str(row.dtype.name()),
            json_opt_str(row.auto_algo.map(algo_name)),
            row.ratio_auto_over_nccl()
                .map_or("null".to_string(), |x| format!("{x:.4}"))
        )
    };
    format!(
        "{{\"n_pes\":{},\"gpu\":{},\"op\":{},\"reps\":{},\"warmup\":{},\"slot_bytes\":{},\
         \"settings\":{},\"nccl_version\":{},\"nccl_nvls_enable\":{},\"candidates\":[{}],\
         \"rows\":[{}]}}",
        r.n_pes,
        json_str(&r.gpu),
        json_str(op_name(r.op)),
        r.reps,
        r.warmup,
        r.slot_bytes,
        json_opt_str(r.settings.as_deref()),
        json_opt_str(r.nccl_version.as_deref()),
        json_opt_str(r.nccl_nvls_enable.as_deref()),
        r.candidates
            .iter()
            .map(|c| json_str(c.name()))
            .collect::<Vec<_>>()
            .join(","),
        r.rows.iter().map(row).collect::<Vec<_>>().join(",")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(us: f64, bytes: usize, n: i32) -> Outcome {
        let algbw = algbw_gbps(bytes, us);
        Outcome::Timed(Timing {
            iters: 20,
            us,
            algbw,
            busbw: busbw_gbps(algbw, n),
            check: Check::Pass,
        })
    }

    fn report() -> AllreduceBenchReport {
        let bytes = 1 << 20;
        let mut wrong = timing(30.0, bytes, 2);
        if let Outcome::Timed(t) = &mut wrong {
            t.check = Check::Fail("PE 1 element 3 = 5 (expected 6)".into());
        }
        AllreduceBenchReport {
            n_pes: 2,
            gpu: "NVIDIA H200".into(),
            op: ReduceOp::Sum,
            reps: 20,
            warmup: 3,
            slot_bytes: 8 << 20,
            settings: Some("low-latency one-shot up to 512K; direct two-shot from 0".into()),
            nccl_version: Some("2.27.3".into()),
            nccl_nvls_enable: Some("0".into()),
            candidates: Candidate::ALL.to_vec(),
            rows: vec![
                AllreduceRow {
                    bytes,
                    dtype: BenchDtype::F32,
                    results: vec![
                        (Candidate::OneShot, timing(20.0, bytes, 2)),
                        (Candidate::TwoShot, timing(10.0, bytes, 2)),
                        (Candidate::Auto, timing(10.0, bytes, 2)),
                        (Candidate::Nccl, timing(12.5, bytes, 2)),
                        (
                            Candidate::Nvshmem,
                            Outcome::Unavailable("status \"7\"".into()),
                        ),
                    ],
                    auto_algo: Some(AllreduceAlgo::TwoShot),
                },
                AllreduceRow {
                    bytes: 4096,
                    dtype: BenchDtype::Bf16,
                    results: vec![
                        (Candidate::OneShot, wrong),
                        (
                            Candidate::TwoShot,
                            Outcome::Unavailable("not implemented yet".into()),
                        ),
                        (
                            Candidate::Auto,
                            Outcome::Unavailable("not implemented yet".into()),
                        ),
                        (Candidate::Nccl, timing(8.0, 4096, 2)),
                        (
                            Candidate::Nvshmem,
                            Outcome::Unavailable("status \"7\"".into()),
                        ),
                    ],
                    auto_algo: None,
                },
            ],
        }
    }

    #[test]
    fn bandwidths_follow_nccl_tests() {
        // 1 MiB in 10 us: 104.8576 GB/s; busbw on 2 PEs equals algbw, on 8 PEs 7/4 of it.
        let algbw = algbw_gbps(1 << 20, 10.0);
        assert!((algbw - 104.8576).abs() < 1e-9, "{algbw}");
        assert_eq!(busbw_gbps(algbw, 2), algbw);
        assert!((busbw_gbps(100.0, 8) - 175.0).abs() < 1e-9);
        assert_eq!(busbw_gbps(100.0, 1), 0.0);
        assert!((busbw_gbps(100.0, 4) - 150.0).abs() < 1e-9);
    }

    #[test]
    fn ratio_is_ours_over_nccl_and_needs_both() {
        let r = report();
        assert_eq!(r.rows[0].ratio_auto_over_nccl(), Some(0.8));
        assert_eq!(r.rows[1].ratio_auto_over_nccl(), None);
        assert_eq!(time_ratio(15.0, 10.0), 1.5);
    }

    #[test]
    fn iterations_fill_a_millisecond_within_bounds() {
        assert_eq!(iters_for(10.0), 100);
        assert_eq!(iters_for(200.0), 20);
        assert_eq!(iters_for(0.5), 1000);
        assert_eq!(iters_for(0.0), 1000);
        assert_eq!(iters_for(f64::NAN), 1000);
        assert_eq!(iters_for(30.0), 34);
    }

    #[test]
    fn names_parse_back() {
        for c in Candidate::ALL {
            assert_eq!(Candidate::parse(c.name()), Ok(c));
        }
        for d in BenchDtype::ALL {
            assert_eq!(BenchDtype::parse(d.name()), Ok(d));
        }
        assert_eq!(BenchDtype::parse("BFloat16"), Ok(BenchDtype::Bf16));
        assert!(Candidate::parse("butterfly").is_err());
        assert!(BenchDtype::parse("f16").is_err());
        for op in [
            ReduceOp::Sum,
            ReduceOp::Prod,
            ReduceOp::Min,
            ReduceOp::Max,
            ReduceOp::Avg,
        ] {
            assert_eq!(parse_op(op_name(op)), Ok(op));
        }
        assert!(parse_op("xor").is_err());
    }

    #[test]
    fn sums_stay_exact_in_bf16_up_to_eight_pes() {
        assert_eq!(pattern_period(2, BenchDtype::Bf16), 4);
        assert_eq!(pattern_period(8, BenchDtype::Bf16), 4); // 4 * 36 = 144 <= 256
        assert_eq!(pattern_period(12, BenchDtype::Bf16), 2); // 4 * 78 > 256
        assert_eq!(pattern_period(16, BenchDtype::Bf16), 1);
        assert_eq!(pattern_period(64, BenchDtype::F32), 4);
        assert_eq!(
            tolerance(ReduceOp::Sum, BenchDtype::Bf16, 8, 144.0),
            0.0,
            "exact"
        );
        assert!(tolerance(ReduceOp::Sum, BenchDtype::Bf16, 32, 528.0) > 0.0);
    }

    /// The closed forms against a brute-force reduction of the pattern in f64 and, for the
    /// exact ops, in the dtype itself (step by step, as a GPU would).
    #[test]
    fn closed_forms_match_the_pattern() {
        for n in [1, 2, 3, 4, 8] {
            for dtype in BenchDtype::ALL {
                let period = pattern_period(n, dtype);
                for op in [
                    ReduceOp::Sum,
                    ReduceOp::Prod,
                    ReduceOp::Min,
                    ReduceOp::Max,
                    ReduceOp::Avg,
                ] {
                    for i in 0..13 {
                        let vals: Vec<f64> =
                            (0..n).map(|p| input_value(op, p, i, n, period)).collect();
                        let reference = match op {
                            ReduceOp::Sum => vals.iter().sum(),
                            ReduceOp::Prod => vals.iter().product(),
                            ReduceOp::Min => vals.iter().copied().fold(f64::INFINITY, f64::min),
                            ReduceOp::Max => vals.iter().copied().fold(0.0, f64::max),
                            ReduceOp::Avg => vals.iter().sum::<f64>() / n as f64,
                        };
                        let e = expected_value(op, i, n, period);
                        assert_eq!(e, reference, "{op:?} n={n} i={i}");
                        if op == ReduceOp::Sum && dtype == BenchDtype::Bf16 {
                            let acc = vals.iter().fold(half::bf16::ZERO, |a, &v| {
                                half::bf16::from_f64(a.to_f64() + half::bf16::from_f64(v).to_f64())
                            });
                            assert_eq!(acc.to_f64(), e, "bf16 sum n={n} i={i}");
                        }
                    }
                }
            }
        }
        // Every PE contributes something different, so a PE that kept its own input fails.
        assert_ne!(
            input_value(ReduceOp::Sum, 0, 5, 2, 4),
            input_value(ReduceOp::Sum, 1, 5, 2, 4)
        );
    }

    #[test]
    fn mismatches_are_found_and_nan_is_wrong() {
        let (op, n, period) = (ReduceOp::Sum, 2, 4);
        let mut got: Vec<f64> = (0..10).map(|i| expected_value(op, i, n, period)).collect();
        assert_eq!(
            first_mismatch(got.iter().copied(), op, BenchDtype::F32, n, period),
            None
        );
        got[6] = f64::NAN;
        let m = first_mismatch(got.iter().copied(), op, BenchDtype::F32, n, period).unwrap();
        assert_eq!((m.0, m.2), (6, 9.0));
        got[6] = 9.0;
        got[2] = 8.0;
        assert_eq!(
            first_mismatch(got.iter().copied(), op, BenchDtype::F32, n, period),
            Some((2, 8.0, 9.0))
        );
        // Avg allows rounding, not more.
        let e = expected_value(ReduceOp::Avg, 0, 3, 4);
        let close = [e * (1.0 + 2f64.powi(-9))];
        assert_eq!(
            first_mismatch(close, ReduceOp::Avg, BenchDtype::Bf16, 3, 4),
            None
        );
        let far = [e * 1.1];
        assert!(first_mismatch(far, ReduceOp::Avg, BenchDtype::Bf16, 3, 4).is_some());
    }

    #[test]
    fn table_has_every_candidate_the_ratio_and_notes() {
        let t = render_table(&report());
        assert!(t.contains("NCCL 2.27.3 (NCCL_NVLS_ENABLE=0)"), "{t}");
        assert!(
            t.contains("\n# ours: low-latency one-shot up to 512K; direct two-shot from 0\n"),
            "{t}"
        );
        for c in Candidate::ALL {
            assert!(t.contains(&format!(" {} ", c.name())), "{t}");
        }
        let row = t
            .lines()
            .find(|l| l.trim_start().starts_with("1M"))
            .unwrap();
        assert!(row.contains("10.00") && row.contains("104.9"), "{row}");
        assert!(row.contains(" 0.80 ") && row.ends_with("twoshot"), "{row}");
        let small = t
            .lines()
            .find(|l| l.trim_start().starts_with("4K"))
            .unwrap();
        assert!(small.contains("WRONG") && small.contains("n/a"), "{small}");
        assert!(t.contains("# auto: n/a (not implemented yet)"), "{t}");
        assert_eq!(t.matches("# nvshmem: n/a").count(), 1, "{t}");
        assert!(
            t.contains("# WRONG RESULT: oneshot bf16 4K: PE 1 element 3"),
            "{t}"
        );
        // Header and rows line up.
        let header = t.lines().find(|l| l.contains("dtype")).unwrap();
        assert_eq!(header.len(), row.len(), "{header}\n{row}");
    }

    #[test]
    fn json_is_well_formed_and_escaped() {
        let j = render_json(&report());
        assert!(
            j.starts_with("{\"n_pes\":2,\"gpu\":\"NVIDIA H200\",\"op\":\"sum\""),
            "{j}"
        );
        assert!(
            j.contains("\"settings\":\"low-latency one-shot up to 512K; direct two-shot from 0\""),
            "{j}"
        );
        assert!(j.contains("\"ratio_auto_over_nccl\":0.8000"), "{j}");
        assert!(j.contains("\"ratio_auto_over_nccl\":null"), "{j}");
        assert!(j.contains("\"auto_algo\":\"twoshot\""), "{j}");
        assert!(
            j.contains("\"nvshmem\":{\"na\":\"status \\\"7\\\"\"}"),
            "{j}"
        );
        assert!(
            j.contains("\"check\":\"fail\",\"check_detail\":\"PE 1 element 3"),
            "{j}"
        );
        assert!(j.contains("\"busbw\":104.858"), "{j}");
        // Balanced outside strings.
        let (mut depth, mut in_str, mut esc) = (0i32, false, false);
        for ch in j.chars() {
            match (in_str, esc, ch) {
                (true, true, _) => esc = false,
                (true, false, '\\') => esc = true,
                (true, false, '"') => in_str = false,
                (false, _, '"') => in_str = true,
                (false, _, '{' | '[') => depth += 1,
                (false, _, '}' | ']') => depth -= 1,
                _ => {}
            }
            assert!(depth >= 0);
        }
        assert_eq!((depth, in_str), (0, false));
        assert_eq!(json_str("a\u{1}\n"), "\"a\\u0001\\n\"");
    }

    #[test]
    fn wrong_results_make_verify_fail() {
        let mut r = report();
        let err = r.verify().unwrap_err().to_string();
        assert!(err.contains("1 wrong result(s): oneshot bf16 4K"), "{err}");
        r.rows.pop();
        assert!(r.verify().is_ok());
    }
}
