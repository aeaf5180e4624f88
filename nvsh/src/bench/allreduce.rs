//! Allreduce benchmark behind `nvsh bench allreduce`: our algorithms (one-shot, two-shot and
//! the automatic choice), NCCL and NVSHMEM's own reduce, per message size and dtype, in one run
//! on the same GPUs, stream and symmetric buffers; and NCCL's symmetric-memory path on buffers
//! of NCCL's own (`nccl-sym`).
//!
//! This module supplies the candidates, the input pattern, the exact expected results and the
//! bus factor; the shared harness ([`crate::bench::harness`]) times them and checks every timed
//! call. Whether a candidate can run is agreed on by all PEs, so that a candidate missing on
//! every PE (NCCL not installed, an op NVSHMEM lacks) is reported as n/a and the run goes on.

use crate::bench::harness::{
    self, check_dtypes, dtype_refusal, integer_power_value, integer_value, pattern_hash,
    power_of_two_value, quarter_value, size_steps, window_only, BenchElement, Collective, Harness,
    Reduction, Report, SlotValues, NCCL_BASELINES, QUARTER_MAX,
};
use crate::bench::nvshmem_coll::{
    describe_nvshmem, nvshmem_status, shared_gpu_refusal, NvshmemElement, NvshmemReduction,
};
use crate::bench::render::NCCL_SYM_WORDING;
use crate::nccl_baseline::{bench_baselines, nccl_label, NcclBaseline, NcclCall};
use cudarc::driver::CudaStream;
use nvshmem::sys;
use nvshmem::tools::raw_stream;
use nvshmem::tools::size_label;
use nvshmem::Nvshmem;
use nvshmem::SymView;
use nvshmem::{Allreduce, AllreduceAlgo};
use nvshmem::{Error, Result};
use nvshmem::{ReduceOp, Reducible};

pub use crate::bench::harness::BenchDtype;

/// What is timed. The names are the command line's (clap lists them in `--help`, each with
/// the `help` given here rather than the doc comment, which is written for rustdoc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Candidate {
    /// [`AllreduceAlgo::OneShot`].
    #[value(name = "oneshot", help = "our one-shot allreduce")]
    OneShot,
    /// [`AllreduceAlgo::TwoShot`].
    #[value(name = "twoshot", help = "our two-shot allreduce")]
    TwoShot,
    /// [`AllreduceAlgo::Ring`].
    #[value(name = "ring", help = "our ring allreduce")]
    Ring,
    /// [`AllreduceAlgo::RecursiveDoubling`].
    #[value(name = "rd", help = "our recursive-doubling allreduce")]
    Rd,
    /// [`AllreduceAlgo::Hierarchical`]: on request only (not in [`Candidate::ALL`]); needs a
    /// job over several nodes, or pretend ones (NVSH_PRETEND_NODE_SIZE).
    #[value(
        name = "hier",
        help = "our hierarchical (node-aware) allreduce; needs several nodes or \
                NVSH_PRETEND_NODE_SIZE (on request only)"
    )]
    Hier,
    /// [`AllreduceAlgo::Auto`]: ours as users get it; the ratio compares it with NCCL.
    #[value(
        name = "auto",
        help = "our automatic choice (the ratio compares it with NCCL)"
    )]
    Auto,
    /// `ncclAllReduce` through [`NcclBaseline`].
    #[value(name = "nccl", help = "ncclAllReduce")]
    Nccl,
    /// `ncclAllReduce` on NCCL's registered symmetric memory
    /// ([`crate::nccl_baseline::NcclWindow`]).
    #[value(
        name = "nccl-sym",
        help = "ncclAllReduce on NCCL's own symmetric memory (ncclMemAlloc buffers registered as \
                windows: its symmetric kernels); in the default list, not running is no failure \
                unless named here"
    )]
    NcclSym,
    /// NVSHMEM's host `nvshmemx_<type>_<op>_reduce_on_stream` over the world team.
    #[value(
        name = "nvshmem",
        help = "NVSHMEM's reduce on a stream over the world team"
    )]
    Nvshmem,
    /// [`AllreduceAlgo::Auto`] with the buffers passed as the caller's own (non-symmetric)
    /// memory, so that the call stages them through its workspace: the staging's cost beside
    /// `auto`. On request only (not in [`Candidate::ALL`]).
    #[value(
        name = "ours-staged",
        help = "our automatic choice on buffers passed as your own memory (staged)"
    )]
    OursStaged,
    /// [`AllreduceAlgo::Auto`] on the caller's own memory registered into the symmetric heap
    /// once before timing (zero-copy): beside `auto` and `ours-staged`, what registration
    /// saves. On request only.
    #[value(
        name = "ours-registered",
        help = "our automatic choice on your own memory registered as symmetric once (zero-copy)"
    )]
    OursRegistered,
}

impl Candidate {
    /// The default candidates.
    pub const ALL: [Candidate; 8] = [
        Candidate::OneShot,
        Candidate::TwoShot,
        Candidate::Ring,
        Candidate::Rd,
        Candidate::Auto,
        Candidate::Nccl,
        Candidate::NcclSym,
        Candidate::Nvshmem,
    ];

    /// The name on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            Candidate::OneShot => "oneshot",
            Candidate::TwoShot => "twoshot",
            Candidate::Ring => "ring",
            Candidate::Rd => "rd",
            Candidate::Hier => "hier",
            Candidate::Auto => "auto",
            Candidate::Nccl => "nccl",
            Candidate::NcclSym => "nccl-sym",
            Candidate::Nvshmem => "nvshmem",
            Candidate::OursStaged => "ours-staged",
            Candidate::OursRegistered => "ours-registered",
        }
    }

    /// Our algorithm, for our candidates.
    pub fn algo(self) -> Option<AllreduceAlgo> {
        match self {
            Candidate::OneShot => Some(AllreduceAlgo::OneShot),
            Candidate::TwoShot => Some(AllreduceAlgo::TwoShot),
            Candidate::Ring => Some(AllreduceAlgo::Ring),
            Candidate::Rd => Some(AllreduceAlgo::RecursiveDoubling),
            Candidate::Hier => Some(AllreduceAlgo::Hierarchical),
            Candidate::Auto | Candidate::OursStaged | Candidate::OursRegistered => {
                Some(AllreduceAlgo::Auto)
            }
            Candidate::Nccl | Candidate::NcclSym | Candidate::Nvshmem => None,
        }
    }
}

/// The report's name of an algorithm.
pub fn algo_name(algo: AllreduceAlgo) -> &'static str {
    algo.name()
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
    /// Largest message, bytes (no size above it is run).
    pub max_bytes: usize,
    /// Growth factor of the sizes, at least 2: min, min * factor, ... up to max
    /// ([`size_steps`]).
    pub factor: usize,
    pub dtypes: Vec<BenchDtype>,
    pub op: ReduceOp,
    /// Timed groups per size (the median is reported).
    pub reps: usize,
    /// Untimed calls first (they also size the groups).
    pub warmup: usize,
    /// Columns of the report, in this order.
    pub candidates: Vec<Candidate>,
    /// Those of `candidates` that the default list brought, not the user: not running them is
    /// no failure ([`Report::optional`]).
    pub optional: Vec<Candidate>,
    /// Receive slot size of our workspace ([`Nvshmem::allreduce_workspace`]).
    pub slot_bytes: usize,
}

impl Default for AllreduceBenchOptions {
    fn default() -> Self {
        AllreduceBenchOptions {
            min_bytes: 4 << 10,
            max_bytes: 256 << 20,
            factor: 2,
            dtypes: BenchDtype::DEFAULT.to_vec(),
            op: ReduceOp::Sum,
            reps: 20,
            warmup: 3,
            candidates: Candidate::ALL.to_vec(),
            optional: vec![Candidate::NcclSym],
            slot_bytes: 8 << 20,
        }
    }
}

/// The bus bandwidth factor of an allreduce (nccl-tests' definition): busbw = algbw * 2(n-1)/n.
pub fn busbw_factor(n_pes: i32) -> f64 {
    if n_pes < 1 {
        return 0.0;
    }
    let n = n_pes as f64;
    2.0 * (n - 1.0) / n
}

/// PEs from this rank on give products only a sign (their magnitudes are 1), so that a
/// product over any PE count stays within 2^8 in magnitude: exact in every type, f16's small
/// range and the integers included.
pub const PROD_MAGNITUDE_PES: i32 = 8;

/// Element `i` of PE `pe`'s input with salt `salt` for element type `dtype`, hashed from all
/// three. Float types: for prod one of +-1/2, +-1, +-2 (products stay signed powers of two),
/// for every other op a quarter-integer in [-8, 8] (sums of up to 8 stay exact in bf16, in any
/// order). Integer types: for prod 1 or 2 (with a sign when signed), for the others an
/// integer in [-32, 32] (signed) or [0, 64] (unsigned), so every result is exact and no sum
/// overflows. PEs from [`PROD_MAGNITUDE_PES`] on give prod only a sign.
pub fn input_value(op: ReduceOp, dtype: BenchDtype, pe: i32, i: usize, salt: u64) -> f64 {
    let h = pattern_hash(pe, i, salt);
    let signed = dtype.is_signed_int();
    match op {
        ReduceOp::Prod => {
            let v = if dtype.is_float() {
                power_of_two_value(h)
            } else {
                integer_power_value(h, signed)
            };
            if pe >= PROD_MAGNITUDE_PES {
                v.signum()
            } else {
                v
            }
        }
        _ if dtype.is_float() => quarter_value(h),
        _ => integer_value(h, signed),
    }
}

/// The integer average of a sum over `n_pes` PEs: truncated toward zero (Rust's `/`), as
/// [`ReduceOp::Avg`] documents for integer types and device/prims/reduce.cuh's finish()
/// computes. NCCL 2.28's ncclAvg on integers gives the same (it divides the magnitude of the
/// sum and restores the sign), so its results are checked against the same values.
pub fn integer_avg(sum: i64, n_pes: i32) -> i64 {
    sum / i64::from(n_pes.max(1))
}

/// The exact result at element `i` for the inputs of [`input_value`] on `n_pes` PEs, reduced
/// in f64 (exact for these values); float avg is the exact sum divided once, integer avg
/// [`integer_avg`].
pub fn expected_value(op: ReduceOp, dtype: BenchDtype, i: usize, salt: u64, n_pes: i32) -> f64 {
    let vals = (0..n_pes).map(|pe| input_value(op, dtype, pe, i, salt));
    match op {
        ReduceOp::Sum => vals.sum(),
        ReduceOp::Avg if dtype.is_float() => vals.sum::<f64>() / n_pes as f64,
        // The sums are small integers, exact in f64 and in i64.
        ReduceOp::Avg => integer_avg(vals.sum::<f64>() as i64, n_pes) as f64,
        ReduceOp::Prod => vals.product(),
        ReduceOp::Min => vals.fold(f64::INFINITY, f64::min),
        ReduceOp::Max => vals.fold(f64::NEG_INFINITY, f64::max),
    }
}

/// Whether every partial sum of [`input_value`]s over `n_pes` PEs is exact in `dtype`: at most
/// n * 32 quarters (floats) or units (integers) in magnitude, within the dtype's exact
/// integers.
pub fn sums_exact(dtype: BenchDtype, n_pes: i32) -> bool {
    n_pes as f64 * QUARTER_MAX * 4.0 <= dtype.exact_integer_limit()
}

/// How far a correct result may be from [`expected_value`]: 0 where every step is exact, which
/// is always for the integer types; for float avg (which NCCL computes as a sum of inputs
/// pre-scaled by 1/n, and whose expected value is itself rounded to the dtype) and for sums
/// past [`sums_exact`], a bound on the rounding of 2n + 2 operations on values no larger than
/// the largest partial sum.
pub fn tolerance(op: ReduceOp, dtype: BenchDtype, n_pes: i32) -> f64 {
    if !dtype.is_float() {
        return 0.0;
    }
    let n = n_pes.max(1) as f64;
    match op {
        ReduceOp::Avg => QUARTER_MAX * (2.0 * n + 2.0) * dtype.unit_roundoff(),
        ReduceOp::Sum if !sums_exact(dtype, n_pes) => {
            QUARTER_MAX * n * (2.0 * n + 2.0) * dtype.unit_roundoff()
        }
        _ => 0.0,
    }
}

/// One of our algorithms or NCCL's allreduce, as a [`Reduction`] (the harness is generic over
/// every element type; these calls take reducible ones). Its output is what auto picked.
enum AllreduceCall<'r, 'nv, 's> {
    Ours {
        ws: &'r mut Allreduce<'nv>,
        algo: AllreduceAlgo,
        op: ReduceOp,
        stream: &'s CudaStream,
        /// The buffers passed as the caller's own memory ([`harness::as_own`]).
        staged: bool,
    },
    Nccl {
        nccl: &'r NcclBaseline<'nv>,
        op: ReduceOp,
    },
}

impl Reduction for AllreduceCall<'_, '_, '_> {
    type Output = Option<AllreduceAlgo>;

    fn run<T: BenchElement + Reducible>(
        self,
        input: SymView<'_, T>,
        output: SymView<'_, T>,
    ) -> Result<Self::Output> {
        match self {
            AllreduceCall::Ours {
                ws,
                algo,
                op,
                stream,
                staged,
            } => {
                let (input, output) = harness::as_own(input, output, staged);
                ws.run(input, output, op, algo, stream).map(Some)
            }
            AllreduceCall::Nccl { nccl, op } => nccl.all_reduce(input, output, op).map(|()| None),
        }
    }
}

/// The allreduce's inputs and expected outputs ([`input_value`], [`expected_value`]) for the
/// harness's host threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllreduceValues {
    pub op: ReduceOp,
}

impl SlotValues for AllreduceValues {
    fn input_value(&self, dtype: BenchDtype, pe: i32, i: usize, salt: u64, _n_pes: i32) -> f64 {
        input_value(self.op, dtype, pe, i, salt)
    }

    fn expected_value(
        &self,
        dtype: BenchDtype,
        _pe: i32,
        i: usize,
        _count: usize,
        salt: u64,
        n_pes: i32,
    ) -> f64 {
        expected_value(self.op, dtype, i, salt, n_pes)
    }
}

/// The allreduce as the harness sees it: the candidates' state and the reduction.
struct AllreduceBench<'nv> {
    op: ReduceOp,
    team: sys::nvshmem_team_t,
    /// PEs share GPUs, where NVSHMEM's collectives end the process ([`shared_gpu_refusal`]).
    shares_gpus: bool,
    ours: std::result::Result<Allreduce<'nv>, String>,
    nccl: std::result::Result<NcclBaseline<'nv>, String>,
    /// Whether nccl-sym can run, or why not.
    nccl_sym: std::result::Result<(), String>,
}

impl<T: NvshmemElement> Collective<T> for AllreduceBench<'_> {
    type Candidate = Candidate;

    fn name(&self, c: Candidate) -> &'static str {
        c.name()
    }

    // Decided from state every PE shares, so every PE skips the same candidates.
    fn available(&self, c: Candidate) -> std::result::Result<(), String> {
        // run() refuses such types first; this keeps the report's reason in the user's terms.
        if let Some(why) = dtype_refusal("allreduce", true, T::BENCH_DTYPE) {
            return Err(why);
        }
        match c {
            Candidate::Nccl => self.nccl.as_ref().map(|_| ()).map_err(Clone::clone),
            Candidate::NcclSym => self.nccl_sym.clone(),
            Candidate::Nvshmem if self.op == ReduceOp::Avg => {
                Err("NVSHMEM has no avg reduction".to_string())
            }
            Candidate::Nvshmem => shared_gpu_refusal(self.shares_gpus).map_or(Ok(()), Err),
            _ => self.ours.as_ref().map(|_| ()).map_err(Clone::clone),
        }
    }

    fn registered(&self, c: Candidate) -> bool {
        c == Candidate::OursRegistered
    }

    fn call(
        &mut self,
        c: Candidate,
        input: SymView<'_, T>,
        output: SymView<'_, T>,
        stream: &CudaStream,
    ) -> Result<Option<&'static str>> {
        let op = self.op;
        match (c.algo(), c) {
            (Some(algo), _) => {
                let ws = self.ours.as_mut().map_err(|why| Error::Driver {
                    message: why.clone(),
                })?;
                let call = AllreduceCall::Ours {
                    ws,
                    algo,
                    op,
                    stream,
                    staged: c == Candidate::OursStaged,
                };
                let picked = T::reduction(call, input, output)?;
                Ok(picked.filter(|_| c == Candidate::Auto).map(algo_name))
            }
            (None, Candidate::Nccl) => {
                let nccl = self.nccl.as_ref().map_err(|why| Error::Driver {
                    message: why.clone(),
                })?;
                T::reduction(AllreduceCall::Nccl { nccl, op }, input, output).map(|_| None)
            }
            (None, Candidate::NcclSym) => Err(window_only(c.name())),
            (None, _) => {
                // SAFETY: equal-length views of the benchmark's symmetric buffers, allocated on
                // every PE; the world team; the runtime's stream.
                let called = unsafe {
                    T::nvshmem_reduction(
                        NvshmemReduction::Reduce,
                        op,
                        self.team,
                        output.as_device_ptr(),
                        input.as_device_ptr(),
                        input.len(),
                        raw_stream(stream),
                    )
                };
                nvshmem_status(called, op).map(|()| None)
            }
        }
    }

    type Values = AllreduceValues;

    fn values(&self) -> AllreduceValues {
        AllreduceValues { op: self.op }
    }

    fn tolerance(&self, dtype: BenchDtype, n_pes: i32) -> f64 {
        tolerance(self.op, dtype, n_pes)
    }

    fn busbw_factor(&self, n_pes: i32) -> f64 {
        busbw_factor(n_pes)
    }

    fn nccl_window(&self, c: Candidate) -> Option<(&NcclBaseline<'_>, NcclCall)> {
        match (c, &self.nccl) {
            (Candidate::NcclSym, Ok(nccl)) => Some((nccl, NcclCall::AllReduce(self.op))),
            _ => None,
        }
    }
}

/// Runs the benchmark on every PE (collective; any PE count). Returns the report on PE 0, None
/// on the others. Wrong results and candidates that could not run are recorded in the report,
/// not returned as errors: call [`Report::verify`] after printing it.
pub fn run(nv: &Nvshmem, opts: &AllreduceBenchOptions) -> Result<Option<Report>> {
    run_reporting(nv, opts, &mut |_| {})
}

/// [`run`], handing PE 0's report of the rows so far to `partial` (on PE 0 only) after every
/// size and dtype, so that a run cut short can leave what it measured.
pub fn run_reporting(
    nv: &Nvshmem,
    opts: &AllreduceBenchOptions,
    partial: &mut dyn FnMut(&Report),
) -> Result<Option<Report>> {
    // The same options on every PE, so every PE refuses alike, before anything collective.
    check_dtypes("allreduce", true, &opts.dtypes).map_err(|why| Error::Io {
        what: "allreduce benchmark, --dtypes".into(),
        message: why,
    })?;
    let h = Harness::new(nv, opts.reps, opts.warmup)?;
    let ours = if opts.candidates.iter().any(|c| c.algo().is_some()) {
        h.agree("our workspace", nv.allreduce_workspace(opts.slot_bytes))?
    } else {
        Err("not requested".into())
    };
    let (nccl, nccl_sym) = bench_baselines(
        nv,
        &h.stream,
        opts.candidates.contains(&Candidate::Nccl),
        opts.candidates.contains(&Candidate::NcclSym),
    );
    let nccl_version = nccl.as_ref().ok().map(NcclBaseline::version_string);
    // The workspace rounds the slot size; report what ran.
    let slot_bytes = ours.as_ref().map_or(opts.slot_bytes, Allreduce::slot_bytes);
    let settings = ours.as_ref().ok().map(Allreduce::settings);
    let mut bench = AllreduceBench {
        op: opts.op,
        team: nv.team_world().handle(),
        shares_gpus: nv.shares_gpus(),
        ours,
        nccl,
        nccl_sym,
    };
    let list = size_steps(opts.min_bytes, opts.max_bytes, opts.factor);
    // PE 0's report of `rows` on `gpu`: the partial reports' and the final one.
    let nvls = std::env::var("NCCL_NVLS_ENABLE").ok();
    let full = |rows: Vec<harness::Row>, gpu: String| {
        let mut r = report(
            nv.n_pes(),
            gpu,
            opts,
            slot_bytes,
            settings.clone(),
            nccl_version.clone(),
            nvls.clone(),
            rows,
        );
        if opts.candidates.contains(&Candidate::Nvshmem) {
            describe_nvshmem(&mut r);
        }
        r
    };
    h.run_reported(
        &mut bench,
        &opts.candidates,
        &list,
        &opts.dtypes,
        &full,
        partial,
    )
}

/// The harness report with allreduce's header lines, JSON fields, ratio and auto column.
#[allow(clippy::too_many_arguments)]
fn report(
    n_pes: i32,
    gpu: String,
    opts: &AllreduceBenchOptions,
    slot_bytes: usize,
    settings: Option<String>,
    nccl_version: Option<String>,
    nccl_nvls_enable: Option<String>,
    rows: Vec<harness::Row>,
) -> Report {
    let nccl = nccl_label(nccl_version.as_deref(), nccl_nvls_enable.as_deref());
    let mut header = vec![format!(
        "{nccl}; our workspace slots {}",
        size_label(slot_bytes)
    )];
    if let Some(s) = &settings {
        header.push(format!("ours: {s}"));
    }
    if opts.candidates.contains(&Candidate::NcclSym) {
        header.push(NCCL_SYM_WORDING.to_string());
    }
    header.push("bus factor 2(n-1)/n; auto= what auto ran".to_string());
    Report {
        collective: "allreduce",
        n_pes,
        gpu,
        date: nvsh_plot::today(),
        op: Some(opts.op),
        reps: opts.reps.max(1),
        warmup: opts.warmup.max(1),
        header,
        json_fields: vec![
            ("slot_bytes", slot_bytes.into()),
            ("settings", settings.into()),
            ("nccl_version", nccl_version.into()),
            ("nccl_nvls_enable", nccl_nvls_enable.into()),
        ],
        candidates: opts.candidates.iter().map(|c| c.name()).collect(),
        ratio: Some(("auto", NCCL_BASELINES)),
        optional: opts
            .candidates
            .iter()
            .filter(|c| opts.optional.contains(c))
            .map(|c| c.name())
            .collect(),
        note_column: Some(("auto=", "auto_algo")),
        checked_by: None,
        rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::harness::{
        algbw_gbps, iters_for, salt, slots_for, time_ratio, Outcome, RatioOn, Row, Timing,
        MAX_ITERS, MIN_SLOTS,
    };
    use crate::bench::render::{render_csv, render_json, render_table};

    /// The reports as the command line renders them by default (ratio on after compute).
    fn table(r: &Report) -> String {
        render_table(r, RatioOn::default())
    }

    fn json(r: &Report) -> String {
        render_json(r, RatioOn::default())
    }

    fn csv(r: &Report) -> String {
        render_csv(r, RatioOn::default())
    }

    fn timing(us: f64, bytes: usize, n: i32) -> Outcome {
        let algbw = algbw_gbps(bytes, us);
        Outcome::Timed(Timing {
            iters: 20,
            us,
            // After a compute kernel, as if the tail no longer overlapped: 2 us more.
            us_after_compute: us + 2.0,
            algbw,
            busbw: algbw * busbw_factor(n),
            host_us: 1.0,
            checked: 400,
            checked_pes: n,
            wrong: 0,
            wrong_detail: None,
        })
    }

    fn sample_report() -> Report {
        let bytes = 1 << 20;
        let mut wrong = timing(30.0, 4096, 2);
        if let Outcome::Timed(t) = &mut wrong {
            t.wrong = 3;
            t.wrong_detail =
                Some("PE 1: 3 wrong, first in group 0 call 2 element 3 = 5 (expected 6)".into());
        }
        let opts = AllreduceBenchOptions::default();
        report(
            2,
            "NVIDIA H200".into(),
            &opts,
            8 << 20,
            Some("low-latency one-shot up to 512K; direct two-shot from 0".into()),
            Some("2.27.3".into()),
            Some("0".into()),
            vec![
                Row {
                    bytes,
                    count: bytes / 4,
                    dtype: BenchDtype::F32,
                    tolerance: 0.0,
                    results: vec![
                        ("oneshot", timing(20.0, bytes, 2)),
                        ("twoshot", timing(10.0, bytes, 2)),
                        ("auto", timing(10.0, bytes, 2)),
                        ("nccl", timing(12.5, bytes, 2)),
                        ("nvshmem", Outcome::Unavailable("status \"7\"".into())),
                    ],
                    note: Some("twoshot"),
                },
                Row {
                    bytes: 4096,
                    count: 2048,
                    dtype: BenchDtype::Bf16,
                    tolerance: 0.0,
                    results: vec![
                        ("oneshot", wrong),
                        (
                            "twoshot",
                            Outcome::Unavailable("not implemented yet".into()),
                        ),
                        ("auto", Outcome::Unavailable("not implemented yet".into())),
                        ("nccl", timing(8.0, 4096, 2)),
                        ("nvshmem", Outcome::Unavailable("status \"7\"".into())),
                    ],
                    note: None,
                },
            ],
        )
    }

    #[test]
    fn bandwidths_follow_nccl_tests() {
        // 1 MiB in 10 us: 104.8576 GB/s; busbw on 2 PEs equals algbw, on 8 PEs 7/4 of it.
        let algbw = algbw_gbps(1 << 20, 10.0);
        assert!((algbw - 104.8576).abs() < 1e-9, "{algbw}");
        assert_eq!(busbw_factor(2), 1.0);
        assert!((busbw_factor(8) - 1.75).abs() < 1e-12);
        assert_eq!(busbw_factor(1), 0.0);
        assert!((busbw_factor(4) - 1.5).abs() < 1e-12);
    }

    #[test]
    fn ratio_is_ours_over_nccl_and_needs_both_right() {
        let r = sample_report();
        assert_eq!(
            r.rows[0].ratio("auto", "nccl", RatioOn::BackToBack),
            Some(0.8)
        );
        assert_eq!(
            r.rows[0].ratio("auto", "nccl", RatioOn::AfterCompute),
            Some(12.0 / 14.5)
        );
        assert_eq!(r.rows[1].ratio("auto", "nccl", RatioOn::AfterCompute), None);
        assert_eq!(time_ratio(15.0, 10.0), 1.5);
    }

    #[test]
    fn groups_fill_a_millisecond_within_bounds_and_slots() {
        assert_eq!(iters_for(10.0), 100);
        assert_eq!(iters_for(200.0), 20);
        assert_eq!(iters_for(0.5), 1000);
        assert_eq!(iters_for(0.0), 1000);
        assert_eq!(iters_for(f64::NAN), 1000);
        assert_eq!(iters_for(30.0), 34);
        assert_eq!(slots_for(4 << 10), MAX_ITERS);
        assert_eq!(slots_for(16 << 20), 16);
        assert_eq!(slots_for(256 << 20), MIN_SLOTS);
        assert_eq!(slots_for(1 << 30), MIN_SLOTS);
        // Different salts for every buffer of a size and across sizes.
        assert_ne!(salt(4096, 0), salt(4096, 1));
        assert_ne!(salt(4096, 0), salt(8192, 0));
    }

    /// The report's names are the command line's (clap's ValueEnum parses the flags; the op
    /// names are checked where the CLI maps them, in cli/bench.rs).
    #[test]
    fn names_parse_back() {
        use clap::ValueEnum;
        for c in Candidate::ALL {
            assert_eq!(Candidate::from_str(c.name(), true), Ok(c));
        }
        for d in BenchDtype::ALL {
            assert_eq!(BenchDtype::from_str(d.name(), true), Ok(d));
        }
        assert_eq!(BenchDtype::from_str("BFloat16", true), Ok(BenchDtype::Bf16));
        assert_eq!(BenchDtype::from_str("f16", true), Ok(BenchDtype::F16));
        assert!(Candidate::from_str("butterfly", true).is_err());
        // A type the library does not have.
        assert!(BenchDtype::from_str("int8", true).is_err());
    }

    /// No period p up to half the window repeats the inputs or the expected results over the
    /// first 4096 elements (a shift by any vector width is seen).
    #[test]
    fn pattern_is_not_periodic_over_4096_elements() {
        const N: usize = 4096;
        for dtype in [BenchDtype::F32, BenchDtype::I32, BenchDtype::U64] {
            for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max] {
                for s in [salt(4096, 0), salt(1 << 28, 3)] {
                    let series: Vec<Vec<f64>> = vec![
                        (0..N).map(|i| input_value(op, dtype, 0, i, s)).collect(),
                        (0..N).map(|i| input_value(op, dtype, 1, i, s)).collect(),
                        (0..N).map(|i| expected_value(op, dtype, i, s, 2)).collect(),
                        (0..N).map(|i| expected_value(op, dtype, i, s, 8)).collect(),
                    ];
                    for v in &series {
                        for p in 1..=N / 2 {
                            assert!(
                                (0..N - p).any(|i| v[i] != v[i + p]),
                                "{dtype:?} {op:?} salt {s}: period {p}"
                            );
                        }
                    }
                }
            }
        }
        // Another salt or another PE gives other data (stale or misrouted data is seen).
        for dtype in BenchDtype::REDUCIBLE {
            let v = |pe: i32, s: u64| -> Vec<f64> {
                (0..64)
                    .map(|i| input_value(ReduceOp::Sum, dtype, pe, i, s))
                    .collect()
            };
            assert!(v(0, 1) != v(0, 2) && v(0, 1) != v(1, 1), "{dtype:?}");
        }
    }

    /// `x` rounded to a float dtype, as the device stores each partial result.
    fn round_to(dtype: BenchDtype, x: f64) -> f64 {
        match dtype {
            BenchDtype::F32 => x as f32 as f64,
            BenchDtype::Bf16 => half::bf16::from_f64(x).to_f64(),
            BenchDtype::F16 => half::f16::from_f64(x).to_f64(),
            BenchDtype::F64 => x,
            _ => panic!("{dtype:?} is not a float type"),
        }
    }

    fn fold_in(dtype: BenchDtype, vals: &[f64], f: fn(f64, f64) -> f64) -> f64 {
        let r = |x: f64| round_to(dtype, x);
        vals[1..].iter().fold(r(vals[0]), |acc, &v| r(f(acc, r(v))))
    }

    const FLOATS: [BenchDtype; 4] = [
        BenchDtype::F32,
        BenchDtype::Bf16,
        BenchDtype::F16,
        BenchDtype::F64,
    ];
    const INTEGERS: [BenchDtype; 4] = [
        BenchDtype::I32,
        BenchDtype::U32,
        BenchDtype::I64,
        BenchDtype::U64,
    ];

    /// Every input and every expected sum, product, min and max is exact in every float type
    /// up to 8 PEs, and so is every step of a reduction in the dtype (forward, backward and
    /// pairwise, as rings, two-shots and recursive doubling combine).
    #[test]
    fn values_and_results_are_exact_in_every_float_type_up_to_8_pes() {
        for dtype in FLOATS {
            let exact = |x: f64| round_to(dtype, x) == x;
            for n in 1..=8 {
                assert!(sums_exact(dtype, n), "{dtype:?} {n}");
                for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max] {
                    assert_eq!(tolerance(op, dtype, n), 0.0);
                    let f: fn(f64, f64) -> f64 = match op {
                        ReduceOp::Sum => |a, b| a + b,
                        ReduceOp::Prod => |a, b| a * b,
                        ReduceOp::Min => f64::min,
                        _ => f64::max,
                    };
                    for s in [salt(4096, 0), salt(65536, 5)] {
                        for i in 0..4096 {
                            let vals: Vec<f64> =
                                (0..n).map(|p| input_value(op, dtype, p, i, s)).collect();
                            let e = expected_value(op, dtype, i, s, n);
                            assert!(vals.iter().all(|&v| exact(v)));
                            assert!(exact(e), "{dtype:?} {op:?} n={n} i={i}: {e}");
                            let back: Vec<f64> = vals.iter().rev().copied().collect();
                            let pairs: Vec<f64> = vals
                                .chunks(2)
                                .map(|c| if c.len() == 2 { f(c[0], c[1]) } else { c[0] })
                                .collect();
                            for order in [&vals, &back, &pairs] {
                                assert_eq!(fold_in(dtype, order, f), e, "{dtype:?} {op:?} n={n}");
                            }
                        }
                    }
                }
            }
        }
        // Past 8 PEs bf16 sums may round, past 64 f16's; the check then allows it.
        assert!(!sums_exact(BenchDtype::Bf16, 9));
        assert!(sums_exact(BenchDtype::F16, 64) && !sums_exact(BenchDtype::F16, 65));
        assert!(tolerance(ReduceOp::Sum, BenchDtype::Bf16, 16) > 0.0);
        assert_eq!(tolerance(ReduceOp::Sum, BenchDtype::F16, 64), 0.0);
        assert!(tolerance(ReduceOp::Sum, BenchDtype::F16, 65) > 0.0);
        assert!(tolerance(ReduceOp::Avg, BenchDtype::F32, 2) > 0.0);
        assert!(tolerance(ReduceOp::Avg, BenchDtype::F64, 3) < 1e-13);
    }

    /// Products stay exact on any PE count: PEs from the eighth on give only a sign, so no
    /// product leaves f16's range (65504) or overflows an integer.
    #[test]
    fn products_are_exact_on_many_pes() {
        let s = salt(4096, 2);
        for dtype in BenchDtype::REDUCIBLE {
            for i in 0..512 {
                for pe in PROD_MAGNITUDE_PES..PROD_MAGNITUDE_PES + 56 {
                    assert_eq!(
                        input_value(ReduceOp::Prod, dtype, pe, i, s).abs(),
                        1.0,
                        "{dtype:?} pe {pe}"
                    );
                }
                let e = expected_value(ReduceOp::Prod, dtype, i, s, 64);
                assert!((1.0 / 256.0..=256.0).contains(&e.abs()), "{dtype:?} {e}");
                if dtype.is_float() {
                    assert_eq!(round_to(dtype, e), e, "{dtype:?} {e}");
                }
            }
        }
        // Unsigned products are 1 or 2 per PE, signed ones take a sign too.
        let vals: Vec<f64> = (0..4096)
            .map(|i| input_value(ReduceOp::Prod, BenchDtype::U32, 0, i, s))
            .collect();
        assert!(vals.iter().all(|&v| v == 1.0 || v == 2.0));
        assert!(vals.contains(&1.0) && vals.contains(&2.0));
        let vals: Vec<f64> = (0..4096)
            .map(|i| input_value(ReduceOp::Prod, BenchDtype::I64, 0, i, s))
            .collect();
        for want in [-2.0, -1.0, 1.0, 2.0] {
            assert!(vals.contains(&want), "{want}");
        }
    }

    /// The integer op over `vals` in i128 (no overflow there), with every partial result checked
    /// to fit `dtype`, so a result that would wrap on the device is caught here.
    fn integer_fold(dtype: BenchDtype, op: ReduceOp, vals: &[f64]) -> i128 {
        let (lo, hi): (i128, i128) = match dtype {
            BenchDtype::I32 => (i32::MIN.into(), i32::MAX.into()),
            BenchDtype::U32 => (0, u32::MAX.into()),
            BenchDtype::I64 => (i64::MIN.into(), i64::MAX.into()),
            BenchDtype::U64 => (0, u64::MAX.into()),
            _ => panic!("{dtype:?} is not an integer type"),
        };
        let vals: Vec<i128> = vals.iter().map(|&v| v as i128).collect();
        let mut acc = vals[0];
        for &v in &vals[1..] {
            acc = match op {
                ReduceOp::Sum | ReduceOp::Avg => acc + v,
                ReduceOp::Prod => acc * v,
                ReduceOp::Min => acc.min(v),
                ReduceOp::Max => acc.max(v),
            };
            assert!(
                (lo..=hi).contains(&acc),
                "{dtype:?} {op:?}: {acc} overflows"
            );
        }
        if op == ReduceOp::Avg {
            // Rust's i128 `/` truncates toward zero, as the device and NCCL do.
            acc / vals.len() as i128
        } else {
            acc
        }
    }

    /// Every integer input is a whole number in the type's range (unsigned types never
    /// negative), and every expected result, avg included, is the integer op's exact result.
    #[test]
    fn integer_results_are_exact_and_never_overflow() {
        for dtype in INTEGERS {
            for n in [1, 2, 3, 5, 8, 9, 64] {
                for op in ReduceOp::ALL {
                    assert_eq!(tolerance(op, dtype, n), 0.0, "{dtype:?} {op:?}");
                    let s = salt(4096, n as usize);
                    for i in 0..1024 {
                        let vals: Vec<f64> =
                            (0..n).map(|p| input_value(op, dtype, p, i, s)).collect();
                        for &v in &vals {
                            assert_eq!(v.fract(), 0.0);
                            assert!(dtype.is_signed_int() || v >= 0.0, "{dtype:?} {v}");
                        }
                        let e = expected_value(op, dtype, i, s, n);
                        assert_eq!(
                            e as i128,
                            integer_fold(dtype, op, &vals),
                            "{dtype:?} {op:?}"
                        );
                        assert_eq!(e.fract(), 0.0);
                    }
                }
            }
            assert!(sums_exact(dtype, 1 << 20));
        }
        // Signed types see negative values, unsigned ones values up to 64.
        let signed: Vec<f64> = (0..4096)
            .map(|i| input_value(ReduceOp::Sum, BenchDtype::I32, 0, i, 9))
            .collect();
        assert!(signed.contains(&-32.0) && signed.contains(&32.0));
        let unsigned: Vec<f64> = (0..4096)
            .map(|i| input_value(ReduceOp::Min, BenchDtype::U64, 0, i, 9))
            .collect();
        assert!(unsigned.contains(&0.0) && unsigned.contains(&64.0));
    }

    /// Integer avg truncates toward zero (ReduceOp::Avg's documented rounding, and NCCL's),
    /// not toward minus infinity.
    #[test]
    fn integer_avg_truncates_toward_zero() {
        for (sum, n, want) in [
            (7, 2, 3),
            (-7, 2, -3),
            (-1, 8, 0),
            (-9, 4, -2),
            (9, 4, 2),
            (-8, 4, -2),
            (5, 1, 5),
            (-5, 0, -5),
        ] {
            assert_eq!(integer_avg(sum, n), want, "{sum} / {n}");
        }
        // A negative sum over 3 PEs that a floor would round down: i32 and i64 alike.
        let s = salt(4096, 0);
        let i = 1;
        for dtype in [BenchDtype::I32, BenchDtype::I64] {
            let vals: Vec<f64> = (0..3)
                .map(|p| input_value(ReduceOp::Avg, dtype, p, i, s))
                .collect();
            assert_eq!(vals, [-11.0, -20.0, 5.0], "{dtype:?}");
            assert_eq!(expected_value(ReduceOp::Sum, dtype, i, s, 3), -26.0);
            // -26 / 3 = -8.67: -8, where a floor would give -9.
            assert_eq!(expected_value(ReduceOp::Avg, dtype, i, s, 3), -8.0);
            // -31 / 2 = -15.5: -15, not -16.
            assert_eq!(expected_value(ReduceOp::Avg, dtype, i, s, 2), -15.0);
        }
        // Unsigned: the same hashes shifted to [0, 64]; 70 / 3 = 23.33 and 33 / 2 = 16.5.
        let vals: Vec<f64> = (0..3)
            .map(|p| input_value(ReduceOp::Avg, BenchDtype::U32, p, i, s))
            .collect();
        assert_eq!(vals, [21.0, 12.0, 37.0]);
        assert_eq!(
            expected_value(ReduceOp::Avg, BenchDtype::U32, i, s, 3),
            23.0
        );
        assert_eq!(
            expected_value(ReduceOp::Avg, BenchDtype::U64, i, s, 2),
            16.0
        );
    }

    #[test]
    fn f32_avg_tolerance_allows_rounding_not_a_wrong_quarter() {
        // The smallest change one wrong input makes to an average is a quarter over n; bf16's
        // own rounding near 8 (1/32) is that coarse, so only f32 can promise it per element.
        for n in [2, 3, 8] {
            assert!(
                tolerance(ReduceOp::Avg, BenchDtype::F32, n) < 0.25 / n as f64,
                "{n}"
            );
        }
    }

    /// The time after a compute kernel is a column of its own, and the ratio is on it, in the
    /// table, the JSON and the CSV (auto 10 + 2 us against NCCL 12.5 + 2 us); back to back's
    /// ratio beside it.
    #[test]
    fn the_time_after_a_compute_kernel_is_reported_beside_back_to_back() {
        let r = sample_report();
        let t = table(&r);
        assert!(
            t.contains("# t|compute: us per call when each call follows"),
            "{t}"
        );
        let row = t
            .lines()
            .find(|l| l.trim_start().starts_with("1M"))
            .unwrap();
        // 12/14.5 after compute, 10/12.5 back to back.
        assert!(row.ends_with(" 0.83      0.80 twoshot"), "{row}");
        assert!(
            row.contains("     10.00   104.9   104.9      0     12.00"),
            "{row}"
        );
        let j = json(&r);
        assert!(j.contains("\"us\":10.0,\"us_after_compute\":12.0"), "{j}");
        let csv = csv(&r);
        let auto = csv.lines().find(|l| l.contains(",auto,")).unwrap();
        // Then the row's ratio against NCCL after compute, then back to back and after
        // compute by name.
        assert!(
            auto.ends_with(",12.000,after-compute,0.8276,nccl,0.8000,nccl,0.8276,nccl"),
            "{auto}"
        );
    }

    #[test]
    fn csv_has_a_line_per_size_and_candidate_read_back_by_a_csv_reader() {
        let text = csv(&sample_report());
        let mut rd = csv::Reader::from_reader(text.as_bytes());
        let head: Vec<String> = rd.headers().unwrap().iter().map(String::from).collect();
        assert_eq!(
            head.join(","),
            "collective,size,count,type,redop,candidate,time_us,algbw_gbps,busbw_gbps,wrong,\
             calls,checked,status,tolerance,time_after_compute_us,ratio_on,ratio,\
             ratio_baseline,ratio_back_to_back,ratio_back_to_back_baseline,ratio_after_compute,\
             ratio_after_compute_baseline"
        );
        let rows: Vec<csv::StringRecord> = rd.records().map(|r| r.unwrap()).collect();
        assert_eq!(rows.len(), 10);
        let line = |i: usize| rows[i].iter().collect::<Vec<_>>();
        assert_eq!(
            line(0),
            [
                "allreduce",
                "1048576",
                "262144",
                "f32",
                "sum",
                "oneshot",
                "20.000",
                "52.429",
                "52.429",
                "0",
                "20",
                "400",
                "ok",
                "0",
                "22.000",
                "after-compute",
                "0.8276",
                "nccl",
                "0.8000",
                "nccl",
                "0.8276",
                "nccl"
            ]
        );
        // The reason keeps its quotes and commas inside one field.
        assert_eq!(
            line(4)[5..],
            [
                "nvshmem",
                "",
                "",
                "",
                "",
                "",
                "",
                "n/a: status \"7\"",
                "0",
                "",
                "after-compute",
                "0.8276",
                "nccl",
                "0.8000",
                "nccl",
                "0.8276",
                "nccl"
            ]
        );
        assert_eq!(line(5)[5..7], ["oneshot", "30.000"]);
        assert_eq!(line(5)[9], "3");
        assert_eq!(line(5)[12], "wrong");
        // The bf16 row: ours (auto) did not run, so no ratio.
        assert_eq!(line(5)[15..], ["after-compute", "", "", "", "", "", ""]);
    }

    #[test]
    fn table_has_every_column_the_ratio_the_wrong_count_and_notes() {
        let t = table(&sample_report());
        assert!(t.contains("NCCL 2.27.3 (NCCL_NVLS_ENABLE=0)"), "{t}");
        assert!(
            t.contains("\n# ours: low-latency one-shot up to 512K; direct two-shot from 0\n"),
            "{t}"
        );
        assert!(
            t.contains("# checked: every timed call writes its own output"),
            "{t}"
        );
        assert!(
            t.contains("\n# types checked: f32 exact, bf16 exact\n"),
            "{t}"
        );
        // Not an avg: no word on integer rounding.
        assert!(!t.contains("integer avg"), "{t}");
        for c in Candidate::ALL {
            assert!(t.contains(&format!(" {} ", c.name())), "{t}");
        }
        let header = t.lines().find(|l| l.contains("redop")).unwrap();
        for col in [
            "size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong",
        ] {
            assert!(header.contains(col), "{header}");
        }
        assert!(
            header.contains("auto/nccl") && header.ends_with("auto="),
            "{header}"
        );
        let row = t
            .lines()
            .find(|l| l.trim_start().starts_with("1M"))
            .unwrap();
        assert!(row.contains(" 262144 ") && row.contains(" sum "), "{row}");
        assert!(row.contains("10.00") && row.contains("104.9"), "{row}");
        assert!(row.contains(" 0.80 ") && row.ends_with("twoshot"), "{row}");
        let small = t
            .lines()
            .find(|l| l.trim_start().starts_with("4K"))
            .unwrap();
        // oneshot's #wrong is 3, the ratio is absent, n/a where a candidate did not run.
        assert!(
            small.contains(" 30.00 ") && small.contains(" 3 "),
            "{small}"
        );
        assert!(
            small.contains("n/a") && small.ends_with("      -"),
            "{small}"
        );
        assert!(t.contains("# auto: n/a (not implemented yet)"), "{t}");
        assert_eq!(t.matches("# nvshmem: n/a").count(), 1, "{t}");
        assert!(
            t.contains("# WRONG RESULT: oneshot bf16 4K: 3 wrong output"),
            "{t}"
        );
        // Header and rows line up.
        assert_eq!(header.len(), row.len(), "{header}\n{row}");
    }

    #[test]
    fn json_is_well_formed_and_escaped() {
        let j = json(&sample_report());
        assert!(
            j.starts_with(
                "{\"schema\":1,\"complete\":true,\"collective\":\"allreduce\",\"n_pes\":2,\"gpu\":\"NVIDIA H200\",\"op\":\"sum\""
            ),
            "{j}"
        );
        assert!(
            j.contains("\"settings\":\"low-latency one-shot up to 512K; direct two-shot from 0\""),
            "{j}"
        );
        // The ratio on the times after compute by default, and so named.
        assert!(j.contains("\"ratio_auto_over_nccl\":0.8276,"), "{j}");
        assert!(
            j.contains("\"ratio_back_to_back_auto_over_nccl\":0.8,"),
            "{j}"
        );
        assert!(j.contains("\"ratio_auto_over_nccl\":null"), "{j}");
        assert!(j.contains("\"ratio_on\":\"after-compute\""), "{j}");
        assert!(j.contains("\"auto_algo\":\"twoshot\""), "{j}");
        assert!(
            j.contains("\"nvshmem\":{\"na\":\"status \\\"7\\\"\"}"),
            "{j}"
        );
        assert!(
            j.contains("\"wrong\":3,\"wrong_detail\":\"PE 1: 3 wrong"),
            "{j}"
        );
        assert!(
            j.contains("\"checked\":400,\"wrong\":0,\"wrong_detail\":null"),
            "{j}"
        );
        assert!(j.contains("\"busbw\":104.858"), "{j}");
        assert!(j.contains("\"dtypes\":[\"f32\",\"bf16\"],"), "{j}");
        assert!(j.contains("\"dtype\":\"bf16\",\"tolerance\":0.0,"), "{j}");
        let v: serde_json::Value = serde_json::from_str(&j).expect("valid JSON");
        assert_eq!(v["schema"], 1);
        assert_eq!(v["rows"][0]["results"]["nvshmem"]["na"], "status \"7\"");
    }

    /// What the bench writes `nvsh plot` reads: the report's JSON parses back into the
    /// charts' lines, wrong and missing results left out with a note.
    #[test]
    fn json_reads_back_for_the_charts() {
        use crate::bench::stored::{parse_bench_json, BenchJson};
        let r = sample_report();
        let j = json(&r);
        assert!(
            j.contains(&format!("\"op\":\"sum\",\"date\":\"{}\"", r.date)),
            "{j}"
        );
        let BenchJson::Collective(c) = parse_bench_json(&j).unwrap() else {
            panic!("not a collective: {j}")
        };
        assert_eq!(c.candidates, r.candidates);
        let (fig, notes) = BenchJson::Collective(c).figure();
        assert_eq!(
            fig.title,
            format!("allreduce (sum), 2 PEs, NVIDIA H200, {}", r.date)
        );
        // f32 and bf16: a row of time and busbw each, a line per candidate.
        assert_eq!(fig.panels.len(), 4);
        let twoshot = &fig.panels[0].series[1];
        assert_eq!(twoshot.label, "twoshot");
        assert_eq!(twoshot.points, vec![((1 << 20) as f64, 10.0)]);
        let busbw = fig.panels[1].series[1].points[0].1;
        assert!((busbw - 104.858).abs() < 1e-9, "{busbw}");
        // After every candidate's line, its line after compute: dotted, in its colour.
        let n = r.candidates.len();
        assert_eq!(fig.panels[0].series.len(), 2 * n);
        let after = &fig.panels[0].series[n + 1];
        assert_eq!((after.stroke, after.color), (nvsh_plot::Stroke::Dotted, 1));
        assert_eq!(after.points, vec![((1 << 20) as f64, 12.0)]);
        assert!(!fig.panels[0].key.is_empty());
        // bf16's one-shot had wrong outputs: no point, and a note.
        assert!(fig.panels[2].series[0].points.is_empty());
        assert!(fig.panels[2].series[n].points.is_empty());
        assert_eq!(fig.panels[2].series[5].points, vec![(4096.0, 8.0)]);
        assert!(
            notes.contains(&"oneshot bf16 4K: left out, 3 wrong output(s)".to_string()),
            "{notes:?}"
        );
        assert!(
            notes.contains(&"nvshmem: not run (status \"7\")".to_string()),
            "{notes:?}"
        );
    }

    /// The CLI returns verify()'s error, which makes the exit status non-zero.
    #[test]
    fn wrong_results_or_candidates_that_did_not_run_fail_verify() {
        let mut r = sample_report();
        let err = r.verify().unwrap_err().to_string();
        assert!(
            err.contains("1 candidate(s) with wrong results: oneshot bf16 4K"),
            "{err}"
        );
        r.rows.pop();
        let err = r.verify().unwrap_err().to_string();
        assert!(
            err.contains("could not run: nvshmem: status \"7\""),
            "{err}"
        );
        r.rows[0].results.pop();
        assert!(r.verify().is_ok());
        // Every candidate unavailable: an error, not success.
        r.rows[0].results = vec![("nccl", Outcome::Unavailable("NCCL: not found".into()))];
        assert!(r.verify().is_err());
    }

    /// An avg over a float and an integer type: the table names each type with its tolerance
    /// and says how integer averages round; JSON and CSV carry the same.
    #[test]
    fn reports_name_the_types_checked_and_integer_avg_rounding() {
        let opts = AllreduceBenchOptions {
            op: ReduceOp::Avg,
            dtypes: vec![BenchDtype::F32, BenchDtype::I32],
            ..AllreduceBenchOptions::default()
        };
        let row = |dtype: BenchDtype| Row {
            bytes: 4096,
            count: 1024,
            dtype,
            tolerance: tolerance(ReduceOp::Avg, dtype, 2),
            results: vec![
                ("auto", timing(5.0, 4096, 2)),
                ("nccl", timing(6.0, 4096, 2)),
            ],
            note: Some("oneshot"),
        };
        let r = report(
            2,
            "NVIDIA H200".into(),
            &opts,
            8 << 20,
            None,
            Some("2.28.9".into()),
            None,
            vec![row(BenchDtype::F32), row(BenchDtype::I32)],
        );
        assert_eq!(r.rows[0].tolerance, 48.0 * 2f64.powi(-24));
        assert_eq!(r.rows[1].tolerance, 0.0);
        let t = table(&r);
        assert!(
            t.contains("\n# types checked: f32 within 2.86e-6, i32 exact\n"),
            "{t}"
        );
        assert!(
            t.contains(
                "\n# integer avg: the sum divided by the PE count, truncated toward zero (-7 \
                 over 2 PEs is -3), as our ReduceOp::Avg documents; NCCL 2.28's ncclAvg on \
                 integers rounds the same way, so both are checked against the same values\n"
            ),
            "{t}"
        );
        let row = t
            .lines()
            .find(|l| l.trim_start().starts_with("4K") && l.contains(" i32 "))
            .unwrap();
        assert!(row.contains(" avg "), "{row}");
        let j = json(&r);
        assert!(j.contains("\"dtypes\":[\"f32\",\"i32\"]"), "{j}");
        assert!(
            j.contains("\"dtype\":\"f32\",\"tolerance\":2.86102294921875e-6"),
            "{j}"
        );
        let csv = csv(&r);
        // The tolerance column, the one before the time after compute and the ratios.
        let last: Vec<&str> = csv.lines().map(|l| l.rsplit(',').nth(8).unwrap()).collect();
        assert_eq!(
            last,
            [
                "tolerance",
                "0.00000286102294921875",
                "0.00000286102294921875",
                "0",
                "0"
            ]
        );
        // A float avg alone says nothing about integer rounding.
        let mut r = r;
        r.rows.pop();
        assert!(!table(&r).contains("integer avg"));
    }

    /// u8 is refused before anything runs, in the user's terms; every reducible type is taken.
    #[test]
    fn allreduce_takes_the_eight_reducible_types_and_refuses_u8() {
        assert_eq!(
            check_dtypes("allreduce", true, &BenchDtype::REDUCIBLE),
            Ok(())
        );
        assert_eq!(
            check_dtypes("allreduce", true, &[BenchDtype::F32, BenchDtype::U8]),
            Err(
                "allreduce reduces f32, bf16, f16, f64, i32, u32, i64, u64; u8 is data \
                 movement only (broadcast, allgather and alltoall take it)"
                    .to_string()
            )
        );
        let defaults = AllreduceBenchOptions::default();
        assert_eq!(defaults.dtypes, [BenchDtype::F32, BenchDtype::Bf16]);
    }
}
