//! The collective benches' shared harness. A collective supplies its candidates (how to call
//! each), its buffer shapes, its input and expected-value functions and its bus-bandwidth factor
//! ([`Collective`]); this module sizes, times and checks, and [`crate::bench::render`] writes
//! the report.
//!
//! Sizes follow nccl-tests: the size asked for becomes the collective's count argument (for
//! allgather, reduce-scatter and alltoall a per-PE block, rounded down to 16 bytes), and the
//! reported size is the larger of the input and output buffers of that count.
//!
//! Checking: every timed call writes its own output buffer. Per message size there are `slots`
//! input/output buffer pairs; input buffer k holds a pattern hashed from (PE, element, salt k),
//! so consecutive calls move or reduce different data. Calls are timed in groups of at most
//! `slots` calls, call k of a group reading input k and writing output k; the outputs are
//! filled with NaN before the group and compared with the exact host reference after it,
//! outside the timed events. So no timed call goes unchecked, a call that writes nothing or
//! writes stale data (peer data of an earlier call) is caught, and the reported time is the
//! median over groups. A collective whose output is defined on some PEs only (reduce: the
//! root) says so ([`Collective::checks_output`]); the other PEs' outputs are not compared.
//!
//! A candidate that is NCCL's call on NCCL's own registered buffers (nccl-sym,
//! [`Collective::nccl_window`]) gets the same discipline on those: per dtype one pool of inputs
//! and one of outputs from `ncclMemAlloc`, each registered as a symmetric window, the same
//! inputs copied in, its outputs poisoned before each group and checked after it.
//!
//! A candidate that runs on the caller's own memory registered into the symmetric heap
//! (ours-registered, [`Collective::registered`]) gets the same: per dtype one input pool and
//! one output pool from `Nvshmem::alloc_registrable`, registered once before any timing, the
//! same inputs copied in, poisoned and checked alike; its calls get views of the registered
//! memory.

use crate::bench::{elapsed_ms, median};
use crate::error::{ToolError, ToolResult};
use crate::nccl_baseline::{HostExchange, NcclBaseline, NcclBuf, NcclCall, NcclWindow};
use cudarc::driver::CudaStream;
use cudarc::nccl::NcclType;
use nvshmem::tools::size_label;
use nvshmem::tools::HostValue;
use nvshmem::Nvshmem;
use nvshmem::{Dtype, Element};
use nvshmem::{Error, Result};
use nvshmem::{InBuf, OutBuf};
use nvshmem::{ReduceOp, Reducible};
use nvshmem::{Registered, RegistrableBuffer};
use nvshmem::{SymView, SymmetricBuffer};
use serde_json::Value;
use std::sync::Arc;

/// Bytes each PE contributes to one host exchange: a flag, the wrong-output count and the
/// first mismatch (rep, call, element, got, expected).
const EXCHANGE_BYTES: usize = 64;

/// Work one timed group should hold at least, microseconds.
const MIN_GROUP_US: f64 = 1000.0;
/// Calls per timed group: at least this many...
const MIN_ITERS: usize = 20;
/// ...and at most this many.
pub const MAX_ITERS: usize = 1000;
/// Output (and input) buffer pairs per size: at least this many, so that data of the last
/// three calls never equals the current call's...
pub const MIN_SLOTS: usize = 4;
/// ...and as many more as fit in this many bytes of outputs (and as many of inputs).
pub const SLOT_BUDGET_BYTES: usize = 256 << 20;

/// Element types the benches run (the command line's names, with nccl-tests' and NCCL's names
/// as aliases; clap lists the names in `--help`). Every element type of the library: the
/// reductions take all but u8, data movement (broadcast, allgather, alltoall) all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum BenchDtype {
    #[value(name = "f32", alias = "float32", alias = "float")]
    F32,
    #[value(name = "bf16", alias = "bfloat16")]
    Bf16,
    #[value(name = "f16", alias = "float16", alias = "half")]
    F16,
    #[value(name = "f64", alias = "float64", alias = "double")]
    F64,
    #[value(name = "i32", alias = "int32", alias = "int")]
    I32,
    #[value(name = "u32", alias = "uint32")]
    U32,
    #[value(name = "i64", alias = "int64")]
    I64,
    #[value(name = "u64", alias = "uint64")]
    U64,
    #[value(name = "u8", alias = "uint8")]
    U8,
}

impl BenchDtype {
    /// Every type, in `--help`'s order: what data movement takes.
    pub const ALL: [BenchDtype; 9] = [
        BenchDtype::F32,
        BenchDtype::Bf16,
        BenchDtype::F16,
        BenchDtype::F64,
        BenchDtype::I32,
        BenchDtype::U32,
        BenchDtype::I64,
        BenchDtype::U64,
        BenchDtype::U8,
    ];

    /// The library's eight reducible types ([`Reducible`]): what the reductions take.
    pub const REDUCIBLE: [BenchDtype; 8] = [
        BenchDtype::F32,
        BenchDtype::Bf16,
        BenchDtype::F16,
        BenchDtype::F64,
        BenchDtype::I32,
        BenchDtype::U32,
        BenchDtype::I64,
        BenchDtype::U64,
    ];

    /// What `-d` defaults to: the training types, as before the other types were added.
    pub const DEFAULT: [BenchDtype; 2] = [BenchDtype::F32, BenchDtype::Bf16];

    /// The types a collective takes: [`BenchDtype::REDUCIBLE`] for a reduction, else all.
    pub fn taken_by(reduces: bool) -> &'static [BenchDtype] {
        if reduces {
            &Self::REDUCIBLE
        } else {
            &Self::ALL
        }
    }

    /// The library's dtype of the same element type.
    pub fn library(self) -> Dtype {
        match self {
            BenchDtype::F32 => Dtype::F32,
            BenchDtype::Bf16 => Dtype::Bf16,
            BenchDtype::F16 => Dtype::F16,
            BenchDtype::F64 => Dtype::F64,
            BenchDtype::I32 => Dtype::I32,
            BenchDtype::U32 => Dtype::U32,
            BenchDtype::I64 => Dtype::I64,
            BenchDtype::U64 => Dtype::U64,
            BenchDtype::U8 => Dtype::U8,
        }
    }

    /// The library's name ([`Dtype::name`]), which is also the command line's.
    pub fn name(self) -> &'static str {
        self.library().name()
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        self.library().size()
    }

    /// Whether the reductions take it (all but u8).
    pub fn reducible(self) -> bool {
        self != BenchDtype::U8
    }

    /// f32, bf16, f16 and f64.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            BenchDtype::F32 | BenchDtype::Bf16 | BenchDtype::F16 | BenchDtype::F64
        )
    }

    /// Signed integers (the float types are signed too, but take other patterns).
    pub fn is_signed_int(self) -> bool {
        matches!(self, BenchDtype::I32 | BenchDtype::I64)
    }

    /// Every integer up to this is exact in the type (2^significand bits for floats; for the
    /// 64-bit integers 2^53, since the host reference goes through f64).
    pub fn exact_integer_limit(self) -> f64 {
        match self {
            BenchDtype::F32 => (1u64 << 24) as f64,
            BenchDtype::Bf16 => 256.0,
            BenchDtype::F16 => 2048.0,
            BenchDtype::F64 | BenchDtype::I64 | BenchDtype::U64 => (1u64 << 53) as f64,
            BenchDtype::I32 => (1u64 << 31) as f64,
            BenchDtype::U32 => (1u64 << 32) as f64,
            BenchDtype::U8 => 256.0,
        }
    }

    /// Relative rounding error of one operation (half an ulp at 1); 0 for integers, whose
    /// operations on the benches' data are exact.
    pub fn unit_roundoff(self) -> f64 {
        match self {
            BenchDtype::F32 => 2f64.powi(-24),
            BenchDtype::Bf16 => 2f64.powi(-8),
            BenchDtype::F16 => 2f64.powi(-11),
            BenchDtype::F64 => 2f64.powi(-53),
            _ => 0.0,
        }
    }

    /// The byte outputs are filled with before a timed group: one whose element no correct
    /// output holds, so an element left unwritten is always caught. All ones: NaN in every
    /// float type and the maximum of an unsigned one (the patterns stay below it); 0x80 for
    /// the signed integers, a value near their minimum that the patterns never reach (all
    /// ones would be -1, a common sum).
    pub fn poison_byte(self) -> u8 {
        if self.is_signed_int() {
            0x80
        } else {
            0xff
        }
    }
}

/// Why a collective refuses `dtype`, in the command line's terms; None when it takes it.
pub fn dtype_refusal(collective: &str, reduces: bool, dtype: BenchDtype) -> Option<String> {
    if BenchDtype::taken_by(reduces).contains(&dtype) {
        return None;
    }
    let names: Vec<&str> = BenchDtype::REDUCIBLE.iter().map(|d| d.name()).collect();
    Some(format!(
        "{collective} reduces {}; {} is data movement only (broadcast, allgather and alltoall \
         take it)",
        names.join(", "),
        dtype.name()
    ))
}

/// An error naming the first of `dtypes` that `collective` does not take.
pub fn check_dtypes(
    collective: &str,
    reduces: bool,
    dtypes: &[BenchDtype],
) -> std::result::Result<(), String> {
    match dtypes
        .iter()
        .find_map(|&d| dtype_refusal(collective, reduces, d))
    {
        Some(why) => Err(why),
        None => Ok(()),
    }
}

/// A call of a reduction on a reducible element type: how a bench generic over every
/// [`BenchElement`] reaches the library's and NCCL's reductions, which take [`Reducible`]
/// types only ([`BenchElement::reduction`]).
pub trait Reduction {
    type Output;
    fn run<T: BenchElement + Reducible>(
        self,
        input: SymView<'_, T>,
        output: SymView<'_, T>,
    ) -> Result<Self::Output>;
}

/// Element types of the benches: ours, NCCL's, and host conversion.
pub trait BenchElement: Element + NcclType {
    const BENCH_DTYPE: BenchDtype;

    /// The element of a host value (exact for the benches' values, which the types hold).
    fn from_value(v: f64) -> Self;

    /// The element as a host value (exact below 2^53).
    fn value(self) -> f64;

    /// `r` run on this type where it is reducible; an error for u8, which no reduction takes
    /// (the benches refuse it before they start, so this is a backstop).
    fn reduction<R: Reduction>(
        r: R,
        input: SymView<'_, Self>,
        output: SymView<'_, Self>,
    ) -> Result<R::Output>;
}

/// The reducible types: the library's own host conversion, and the reduction runs.
macro_rules! reducible_bench_element {
    ($($t:ty => $d:ident),*) => {$(
        impl BenchElement for $t {
            const BENCH_DTYPE: BenchDtype = BenchDtype::$d;
            fn from_value(v: f64) -> Self {
                <$t as HostValue>::from_f64(v)
            }
            fn value(self) -> f64 {
                HostValue::to_f64(self)
            }
            fn reduction<R: Reduction>(
                r: R,
                input: SymView<'_, Self>,
                output: SymView<'_, Self>,
            ) -> Result<R::Output> {
                r.run(input, output)
            }
        }
    )*};
}
reducible_bench_element!(
    f32 => F32, half::bf16 => Bf16, half::f16 => F16, f64 => F64,
    i32 => I32, u32 => U32, i64 => I64, u64 => U64
);

impl BenchElement for u8 {
    const BENCH_DTYPE: BenchDtype = BenchDtype::U8;
    fn from_value(v: f64) -> Self {
        v as u8
    }
    fn value(self) -> f64 {
        self as f64
    }
    fn reduction<R: Reduction>(
        _r: R,
        _input: SymView<'_, Self>,
        _output: SymView<'_, Self>,
    ) -> Result<R::Output> {
        Err(Error::Io {
            what: "benchmark".into(),
            message: "u8 is data movement only: no reduction takes it".into(),
        })
    }
}

/// The harness's buffers as a collective takes them: symmetric views, or (`own`) passed as if
/// they were the caller's own (non-symmetric) memory, which the collective then stages through
/// its workspace (the `ours-staged` candidates: the staging's cost beside ours).
pub fn as_own<'a, 'b, T: Element>(
    input: SymView<'a, T>,
    output: SymView<'b, T>,
    own: bool,
) -> (InBuf<'a, T>, OutBuf<'b, T>) {
    if !own {
        return (input.into(), output.into());
    }
    // SAFETY: the harness's buffers, device memory of this GPU that outlives the call's work
    // (the harness synchronises before it frees or reads them).
    unsafe {
        (
            InBuf::from_raw(input.as_device_ptr(), input.len()),
            OutBuf::from_raw(output.as_device_ptr(), output.len()),
        )
    }
}

/// A well-mixed 64-bit hash of (pe, element, salt): splitmix64 at position `i` of a stream
/// seeded by (pe, salt), so the pattern has no short period along the elements.
pub fn pattern_hash(pe: i32, i: usize, salt: u64) -> u64 {
    let seed = salt
        .wrapping_mul(0xd605_bbb5_8c8a_bbb5)
        .wrapping_add((pe as u64).wrapping_mul(0xc2b2_ae3d_27d4_eb4f));
    let mut z = seed.wrapping_add((i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Largest magnitude of [`quarter_value`].
pub const QUARTER_MAX: f64 = 8.0;

/// A quarter-integer in [-8, 8] from a hash: 65 values, each exact in every float type, and
/// any sum of up to 8 of them (at most 256 quarters in magnitude) exact in bf16 too.
pub fn quarter_value(h: u64) -> f64 {
    ((h >> 32) % 65) as f64 / 4.0 - QUARTER_MAX
}

/// One of -2, -1, -1/2, 1/2, 1, 2 from a hash: products of up to 126 of them are exact powers
/// of two (with a sign) in f32 and bf16, of up to 15 in f16.
pub fn power_of_two_value(h: u64) -> f64 {
    let magnitude = [0.5, 1.0, 2.0][((h >> 32) % 3) as usize];
    if (h >> 40) & 1 == 1 {
        -magnitude
    } else {
        magnitude
    }
}

/// [`quarter_value`]'s 65 steps as integers: [-32, 32] for signed types, [0, 64] for unsigned
/// ones. Sums of n stay within 32n in magnitude, far inside every integer type for any PE
/// count a job can have, so every reduction of them is exact.
pub fn integer_value(h: u64, signed: bool) -> f64 {
    let q = ((h >> 32) % 65) as f64;
    if signed {
        q - 32.0
    } else {
        q
    }
}

/// 1 or 2 from a hash, with a random sign for signed types: the integer counterpart of
/// [`power_of_two_value`].
pub fn integer_power_value(h: u64, signed: bool) -> f64 {
    let magnitude = [1.0, 2.0][((h >> 32) % 2) as usize];
    if signed && (h >> 40) & 1 == 1 {
        -magnitude
    } else {
        magnitude
    }
}

/// An element for data movement (broadcast, allgather, alltoall) from a hash: quarter-integers
/// for the float types (exact in each); for the integers, values spread over most of the
/// type's bits, so that every byte moves data, yet never the poison
/// ([`BenchDtype::poison_byte`]) and exact in the f64 the reference goes through: u8 in
/// [0, 254], u32 in [0, 2^32 - 2], i32 in [-2^30, 2^30), u64 in [0, 2^53), i64 in
/// [-2^52, 2^52).
pub fn movement_value(dtype: BenchDtype, h: u64) -> f64 {
    let top = h >> 32;
    match dtype {
        BenchDtype::U8 => (top % 255) as f64,
        BenchDtype::U32 => (top % 0xffff_ffff) as f64,
        BenchDtype::I32 => (top >> 1) as f64 - (1u64 << 30) as f64,
        BenchDtype::U64 => (h >> 11) as f64,
        BenchDtype::I64 => (h >> 11) as f64 - (1u64 << 52) as f64,
        BenchDtype::F32 | BenchDtype::Bf16 | BenchDtype::F16 | BenchDtype::F64 => quarter_value(h),
    }
}

/// Salt of input buffer `slot` at message size `bytes`: different per buffer and per size.
pub fn salt(bytes: usize, slot: usize) -> u64 {
    (bytes as u64)
        .wrapping_mul(1_000_003)
        .wrapping_add(slot as u64)
}

/// Input/output buffer pairs at a message size: [`SLOT_BUDGET_BYTES`] worth, at least
/// [`MIN_SLOTS`], at most [`MAX_ITERS`] (no group has more calls).
pub fn slots_for(bytes: usize) -> usize {
    (SLOT_BUDGET_BYTES / bytes.max(1)).clamp(MIN_SLOTS, MAX_ITERS)
}

/// Calls per timed group from an estimate of one call: enough for MIN_GROUP_US of work, at
/// least MIN_ITERS, at most MAX_ITERS; the caller caps it at the size's slots.
pub fn iters_for(us_per_call: f64) -> usize {
    if us_per_call.is_nan() || us_per_call <= 0.0 {
        return MAX_ITERS;
    }
    let n = (MIN_GROUP_US / us_per_call).ceil().min(MAX_ITERS as f64) as usize;
    n.clamp(MIN_ITERS, MAX_ITERS)
}

/// Bytes / time in GB/s (1e9 bytes per second).
pub fn algbw_gbps(bytes: usize, us: f64) -> f64 {
    bytes as f64 / (us * 1e-6) / 1e9
}

/// Ours over theirs: below 1 means ours takes less time.
pub fn time_ratio(ours_us: f64, theirs_us: f64) -> f64 {
    ours_us / theirs_us
}

/// A collective's input and expected-output functions, apart from the collective: a few Copy
/// parameters (the reduction, the collective's kind, the root), so that host threads can
/// compute the slots' values while the collective, which holds communicators and workspaces
/// and is not Sync, stays on its thread. Every function must give the same answer on every PE
/// and thread.
pub trait SlotValues: Send + Sync + Copy {
    /// Element `i` of PE `pe`'s input with salt `salt`, for element type `dtype`.
    fn input_value(&self, dtype: BenchDtype, pe: i32, i: usize, salt: u64, n_pes: i32) -> f64;

    /// The exact value of element `i` of PE `pe`'s output for count argument `count`, when
    /// every PE's input used `salt`. Only asked where [`Collective::checks_output`] holds.
    fn expected_value(
        &self,
        dtype: BenchDtype,
        pe: i32,
        i: usize,
        count: usize,
        salt: u64,
        n_pes: i32,
    ) -> f64;
}

/// Most host threads one PE computes its slots' values on.
pub const MAX_FILL_THREADS: usize = 16;

/// Fewest elements worth a thread of their own: starting one costs tens of microseconds, an
/// element tens of nanoseconds.
pub const MIN_FILL_CHUNK: usize = 1 << 16;

/// Host threads per PE for the slots' values: the host's `cores` shared by the job's `n_pes`
/// (an upper bound of the PEs on this node), at least 1, at most [`MAX_FILL_THREADS`].
pub fn fill_threads(cores: usize, n_pes: i32) -> usize {
    (cores / n_pes.max(1) as usize).clamp(1, MAX_FILL_THREADS)
}

/// The threads worth starting for `len` elements: at most `threads`, one per
/// [`MIN_FILL_CHUNK`] elements, at least 1.
pub fn threads_for(len: usize, threads: usize) -> usize {
    len.div_ceil(MIN_FILL_CHUNK).clamp(1, threads.max(1))
}

/// Fills `out` on `threads` scoped threads (at most one per element), each calling
/// `fill(at, part)` on its own chunk `part`, which is `out[at..at + part.len()]`. Where each
/// element depends on its index only, the result is the serial loop's, bit for bit.
pub fn fill_parallel<T: Send>(
    out: &mut [T],
    threads: usize,
    fill: impl Fn(usize, &mut [T]) + Sync,
) {
    let threads = threads.clamp(1, out.len().max(1));
    if threads == 1 {
        return fill(0, out);
    }
    let chunk = out.len().div_ceil(threads);
    let fill = &fill;
    std::thread::scope(|s| {
        let mut parts = out.chunks_mut(chunk).enumerate();
        // The first chunk on this thread, which would otherwise only wait.
        let first = parts.next();
        for (c, part) in parts {
            s.spawn(move || fill(c * chunk, part));
        }
        if let Some((_, part)) = first {
            fill(0, part);
        }
    });
}

/// [`fill_parallel`] of slots of `len` elements from slot `first` on: element `i` of slot `k`
/// is `f(k, i)`. Counts slots and elements along each chunk rather than dividing every index,
/// which would cost a good part of an element's hashing.
pub fn fill_slots<T: Send>(
    out: &mut [T],
    threads: usize,
    first: usize,
    len: usize,
    f: impl Fn(usize, usize) -> T + Sync,
) {
    if len == 0 {
        return;
    }
    fill_parallel(out, threads, |at, part| {
        let (mut k, mut i) = (first + at / len, at % len);
        for x in part {
            *x = f(k, i);
            i += 1;
            if i == len {
                (k, i) = (k + 1, 0);
            }
        }
    });
}

/// One message size as its values see it: this PE, the job's PEs, the count argument, the
/// message size (which the salts derive from) and a PE's buffer lengths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotShape {
    pub me: i32,
    pub n_pes: i32,
    pub count: usize,
    pub bytes: usize,
    pub in_len: usize,
    pub out_len: usize,
}

impl SlotShape {
    /// Writes this PE's inputs of the slots from `first` on into `out` (whole slots, one after
    /// the other), on `threads` threads.
    pub fn fill_inputs<T: BenchElement, V: SlotValues>(
        &self,
        v: V,
        first: usize,
        out: &mut [T],
        threads: usize,
    ) {
        let dtype = T::BENCH_DTYPE;
        fill_slots(out, threads, first, self.in_len, |k, i| {
            let s = salt(self.bytes, k);
            T::from_value(v.input_value(dtype, self.me, i, s, self.n_pes))
        });
    }

    /// Writes this PE's expected outputs of the slots from `first` on into `out` (whole slots,
    /// one after the other), on `threads` threads.
    pub fn fill_expected<T: BenchElement, V: SlotValues>(
        &self,
        v: V,
        first: usize,
        out: &mut [T],
        threads: usize,
    ) {
        let dtype = T::BENCH_DTYPE;
        fill_slots(out, threads, first, self.out_len, |k, i| {
            let s = salt(self.bytes, k);
            T::from_value(v.expected_value(dtype, self.me, i, self.count, s, self.n_pes))
        });
    }
}

/// The GPU's name for PE 0's reports, empty on the other PEs. A failure here is PE 0's alone,
/// so it must not stop the run (the other PEs would wait for it): the name is only text.
pub fn gpu_name_on_pe0(nv: &Nvshmem) -> String {
    if nv.my_pe() == 0 {
        nv.context().name().unwrap_or_default()
    } else {
        String::new()
    }
}

/// What a collective bench supplies: its candidates, its data and its bus-bandwidth factor.
/// Every function must give the same answer on every PE (the harness runs them collectively).
pub trait Collective<T: BenchElement> {
    type Candidate: Copy;

    /// The candidate's name in the report.
    fn name(&self, c: Self::Candidate) -> &'static str;

    /// Why `c` cannot run in this job (the same on every PE), or Ok when it can.
    fn available(&self, c: Self::Candidate) -> std::result::Result<(), String>;

    /// One call of `c` from `input` into `output` on `stream`; a note for the report (what an
    /// automatic choice picked), if any.
    fn call(
        &mut self,
        c: Self::Candidate,
        input: SymView<'_, T>,
        output: SymView<'_, T>,
        stream: &CudaStream,
    ) -> Result<Option<&'static str>>;

    /// The collective's count argument for a requested message of `elems` elements of
    /// `elem_bytes` bytes, as nccl-tests derives it; 0 when no message of that size fits.
    fn count_for(&self, elems: usize, _elem_bytes: usize, _n_pes: i32) -> usize {
        elems
    }

    /// Input elements per PE for count argument `count`.
    fn input_len(&self, count: usize, _n_pes: i32) -> usize {
        count
    }

    /// Output elements per PE for count argument `count`.
    fn output_len(&self, count: usize, _n_pes: i32) -> usize {
        count
    }

    /// The collective's inputs and expected outputs, apart from its state.
    type Values: SlotValues;

    /// This collective's [`Collective::Values`].
    fn values(&self) -> Self::Values;

    /// Whether PE `pe`'s output is defined, and so compared with the expected values (reduce:
    /// only at the root).
    fn checks_output(&self, _pe: i32, _n_pes: i32) -> bool {
        true
    }

    /// How far a correct output may be from the expected value (0 where every step is exact).
    fn tolerance(&self, dtype: BenchDtype, n_pes: i32) -> f64;

    /// busbw / algbw at `n_pes` (nccl-tests' definitions).
    fn busbw_factor(&self, n_pes: i32) -> f64;

    /// For a candidate that is NCCL's collective on NCCL's own memory (nccl-sym): the
    /// communicator and the call. The harness then runs it on `ncclMemAlloc` buffers registered
    /// as symmetric windows instead of the symmetric buffers ([`Collective::call`] is not
    /// used), holding the same inputs, poisoned and checked alike. None (the default) for the
    /// others; asked only where [`Collective::available`] holds.
    fn nccl_window(&self, _c: Self::Candidate) -> Option<(&NcclBaseline<'_>, NcclCall)> {
        None
    }

    /// Whether `c` runs on the caller's own memory registered into the symmetric heap
    /// (ours-registered): the harness then passes [`Collective::call`] views of registered
    /// pools holding the same inputs, poisoned and checked alike. False (the default) for the
    /// others; asked only where [`Collective::available`] holds.
    fn registered(&self, _c: Self::Candidate) -> bool {
        false
    }
}

/// The message sizes asked for, as nccl-tests steps them: `min`, `min * factor`,
/// `min * factor^2`, ... while no larger than `max` (so `max` itself when a step lands on it,
/// and never a size above it). Empty when `min > max`; a factor below 2 is taken as 2, since
/// the command line refuses it and a factor of 1 would never end.
pub fn size_steps(min: usize, max: usize, factor: usize) -> Vec<usize> {
    let factor = factor.max(2);
    let mut out = Vec::new();
    let mut s = min.max(1);
    while s <= max {
        out.push(s);
        // A step past usize::MAX is past max too.
        match s.checked_mul(factor) {
            Some(next) => s = next,
            None => break,
        }
    }
    out
}

/// nccl-tests' size of a message: bytes of the larger of a PE's input and output buffers.
pub fn message_bytes(in_len: usize, out_len: usize, elem_bytes: usize) -> usize {
    in_len.max(out_len) * elem_bytes
}

/// (count argument, message bytes) per size asked for, in order, for `elem`-byte elements:
/// sizes that are no whole number of elements or give no message are left out, and so is a
/// size whose count repeats the previous one (the rounding of small sizes).
pub fn size_plan<T: BenchElement, C: Collective<T>>(
    coll: &C,
    sizes: &[usize],
    elem: usize,
    n_pes: i32,
) -> Vec<(usize, usize)> {
    let mut plan: Vec<(usize, usize)> = Vec::new();
    for &bytes in sizes.iter().filter(|&&b| b % elem == 0) {
        let count = coll.count_for(bytes / elem, elem, n_pes);
        if count == 0 || plan.last().is_some_and(|&(c, _)| c == count) {
            continue;
        }
        let (i, o) = (coll.input_len(count, n_pes), coll.output_len(count, n_pes));
        plan.push((count, message_bytes(i, o, elem)));
    }
    plan
}

/// One timed group ([`Harness::time_group`]), per call, microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupTime {
    /// The group: of the calls alone, or after compute of the (compute kernel, call) pairs.
    pub us: f64,
    /// After compute: the compute kernels alone.
    pub compute_us: Option<f64>,
    /// Host time to enqueue the group, per call, microseconds: where it reaches `us`, the
    /// calls were bound by the host, not the GPU.
    pub host_us: f64,
}

/// The time of a call after a compute kernel from the groups' per-call times with it and of
/// the compute alone: the difference of their medians (never below 0), microseconds.
pub fn after_compute_us(with_compute: &[f64], compute_alone: &[f64]) -> f64 {
    (median(with_compute) - median(compute_alone)).max(0.0)
}

/// One candidate at one size, timed and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    /// Calls per timed group.
    pub iters: usize,
    /// Median time of one call over the groups, microseconds.
    pub us: f64,
    /// Median time of one call when each call follows a compute kernel on the same stream (as
    /// in a training step, where a collective cannot overlap the previous one's tail): the
    /// group of (kernel, call) pairs less the group of kernels alone, per call, microseconds.
    pub us_after_compute: f64,
    /// Bytes / time, GB/s (1e9 bytes per second).
    pub algbw: f64,
    /// algbw times the collective's bus factor.
    pub busbw: f64,
    /// Median host time to enqueue one call back to back, microseconds ([`GroupTime`]).
    pub host_us: f64,
    /// Timed calls checked on each checking PE.
    pub checked: u64,
    /// PEs that compared their outputs (all but for reduce, whose only defined output is the
    /// root's).
    pub checked_pes: i32,
    /// Outputs found wrong, summed over PEs.
    pub wrong: u64,
    /// Each PE's first wrong output, when there was one.
    pub wrong_detail: Option<String>,
}

impl Timing {
    /// The time of one call on `on`'s timing.
    pub fn us_on(&self, on: RatioOn) -> f64 {
        match on {
            RatioOn::AfterCompute => self.us_after_compute,
            RatioOn::BackToBack => self.us,
        }
    }
}

/// Which of a candidate's two times the ratio to NCCL is taken on (`--ratio-on`); the ratio
/// on the other timing is reported beside it, and both times always are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, clap::ValueEnum)]
pub enum RatioOn {
    /// Each call after a compute kernel on the stream (`t|compute`): a training step's case,
    /// where a collective cannot overlap the tail of the one before.
    #[default]
    AfterCompute,
    /// Calls back to back (`time`), where a call may overlap the previous call's tail.
    BackToBack,
}

impl RatioOn {
    /// The flag's value, which is also the JSON's `ratio_on` and the CSV's.
    pub fn name(self) -> &'static str {
        match self {
            RatioOn::AfterCompute => "after-compute",
            RatioOn::BackToBack => "back-to-back",
        }
    }

    /// The timing the ratio is not taken on, reported beside it.
    pub fn other(self) -> RatioOn {
        match self {
            RatioOn::AfterCompute => RatioOn::BackToBack,
            RatioOn::BackToBack => RatioOn::AfterCompute,
        }
    }

    /// In the table's words.
    pub fn words(self) -> &'static str {
        match self {
            RatioOn::AfterCompute => "after compute",
            RatioOn::BackToBack => "back to back",
        }
    }

    /// The candidates' column of this time in the table.
    pub fn time_column(self) -> &'static str {
        match self {
            RatioOn::AfterCompute => "t|compute",
            RatioOn::BackToBack => "time",
        }
    }

    /// The table's heading of the ratio on this timing where it is the second ratio column.
    pub fn second_column(self) -> &'static str {
        match self {
            RatioOn::AfterCompute => "|compute",
            RatioOn::BackToBack => "|b2b",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Timed(Timing),
    /// Not run, and why (the same on every PE).
    Unavailable(String),
}

/// One size and dtype.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// nccl-tests' size: bytes of the larger of a PE's input and output buffers.
    pub bytes: usize,
    /// The collective's count argument (nccl-tests' count column): elements per PE's input for
    /// allreduce, broadcast and reduce, per block for allgather, reduce-scatter and alltoall.
    pub count: usize,
    pub dtype: BenchDtype,
    /// How far a checked output element could be from the host reference and still count as
    /// right: 0 is exact (bit for bit for data movement), more only for float rounding.
    pub tolerance: f64,
    /// By candidate name, in the report's candidate order.
    pub results: Vec<(&'static str, Outcome)>,
    /// The collective's note for this row (allreduce: what auto picked).
    pub note: Option<&'static str>,
}

impl Row {
    pub fn outcome(&self, c: &str) -> Option<&Outcome> {
        self.results.iter().find(|(k, _)| *k == c).map(|(_, o)| o)
    }

    /// The timing of `c` if it ran and every checked output was right.
    pub fn timing(&self, c: &str) -> Option<&Timing> {
        match self.outcome(c) {
            Some(Outcome::Timed(t)) if t.wrong == 0 => Some(t),
            _ => None,
        }
    }

    /// `ours`'s time over `theirs`'s on `on`'s timing, where both ran correctly.
    pub fn ratio(&self, ours: &str, theirs: &str, on: RatioOn) -> Option<f64> {
        Some(time_ratio(
            self.timing(ours)?.us_on(on),
            self.timing(theirs)?.us_on(on),
        ))
    }

    /// The fastest of `baselines` that ran with every output right, by their times on `on`'s
    /// timing: its name and that time. The first listed wins a tie.
    pub fn fastest(&self, baselines: &[&'static str], on: RatioOn) -> Option<(&'static str, f64)> {
        let mut best: Option<(&'static str, f64)> = None;
        for &b in baselines {
            let Some(t) = self.timing(b) else { continue };
            let us = t.us_on(on);
            if !us.is_nan() && best.is_none_or(|(_, u)| us < u) {
                best = Some((b, us));
            }
        }
        best
    }

    /// `ours`'s time over the fastest of `baselines` ([`Row::fastest`]), both on `on`'s
    /// timing, and which baseline that was; None unless ours and one of them ran right.
    pub fn ratio_to_fastest(
        &self,
        ours: &str,
        baselines: &[&'static str],
        on: RatioOn,
    ) -> Option<(f64, &'static str)> {
        let mine = self.timing(ours)?.us_on(on);
        let (b, us) = self.fastest(baselines, on)?;
        Some((time_ratio(mine, us), b))
    }
}

/// NCCL's two paths, the baselines of every collective bench's ratio: its regular kernels on
/// the symmetric buffers, and its symmetric-memory kernels on NCCL's registered buffers. The
/// ratio takes the faster of them at each size.
pub const NCCL_BASELINES: &[&str] = &["nccl", "nccl-sym"];

/// The table's `vs` cell: which baseline the ratio used, and the second ratio (the other
/// timing) when that was another (`nccl|nccl-sym`).
pub fn baseline_cell(first: Option<&str>, second: Option<&str>) -> String {
    match (first, second) {
        (Some(a), Some(b)) if a == b => a.to_string(),
        (a, None) => a.unwrap_or("-").to_string(),
        (a, Some(b)) => format!("{}|{b}", a.unwrap_or("-")),
    }
}

/// PE 0's results of one collective bench.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// "allreduce", "broadcast", "reduce-scatter", ...
    pub collective: &'static str,
    pub n_pes: i32,
    pub gpu: String,
    /// When the bench ran: the UTC date, YYYY-MM-DD (the JSON's `date`, the charts' title).
    pub date: String,
    /// The reduction, for reductions.
    pub op: Option<ReduceOp>,
    pub reps: usize,
    pub warmup: usize,
    /// Lines of the collective's own (ours' settings, NCCL's version), printed after "# ".
    pub header: Vec<String>,
    /// Extra top-level JSON fields: name and value.
    pub json_fields: Vec<(&'static str, Value)>,
    pub candidates: Vec<&'static str>,
    /// (ours, baselines) for the ratio columns: ours's time over the fastest baseline that ran
    /// right at each size ([`Row::ratio_to_fastest`]), on the timing the rendering is given
    /// ([`RatioOn`]) and on the other; the column and JSON key are named after the first
    /// baseline ("ours/nccl").
    pub ratio: Option<(&'static str, &'static [&'static str])>,
    /// Candidates in the list only because the default list has them (nccl-sym): one that
    /// could not run is reported, but fails no run ([`Report::verify`]).
    pub optional: Vec<&'static str>,
    /// Heading and JSON key of the row note column (allreduce: "auto=", "auto_algo").
    pub note_column: Option<(&'static str, &'static str)>,
    /// Who compares outputs where not every PE does (reduce: the root), for the table's
    /// description of the check.
    pub checked_by: Option<String>,
    pub rows: Vec<Row>,
}

impl Report {
    /// The ratio's baselines that are among the candidates, in the ratio's order.
    pub fn ratio_baselines(&self) -> Vec<&'static str> {
        self.ratio.map_or(Vec::new(), |(_, bases)| {
            bases
                .iter()
                .copied()
                .filter(|b| self.candidates.contains(b))
                .collect()
        })
    }

    /// Whether the table names the baseline of each ratio (`vs`): where at some size more than
    /// one baseline ran right, so the ratio had a choice.
    pub fn shows_baseline_column(&self) -> bool {
        let Some((_, bases)) = self.ratio else {
            return false;
        };
        self.rows
            .iter()
            .any(|row| bases.iter().filter(|b| row.timing(b).is_some()).count() > 1)
    }

    /// The types that ran, each with its tolerance, in the rows' order: every output of every
    /// timed call of these was checked.
    pub fn checked_dtypes(&self) -> Vec<(BenchDtype, f64)> {
        let mut out: Vec<(BenchDtype, f64)> = Vec::new();
        for row in &self.rows {
            if !out.iter().any(|&(d, _)| d == row.dtype) {
                out.push((row.dtype, row.tolerance));
            }
        }
        out
    }

    /// "candidate dtype size: detail" for each candidate with wrong outputs.
    pub fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        for row in &self.rows {
            for (c, o) in &row.results {
                if let Outcome::Timed(t) = o {
                    if t.wrong > 0 {
                        out.push(format!(
                            "{c} {} {}: {} wrong output(s) of {} calls x {} PEs; {}",
                            row.dtype.name(),
                            size_label(row.bytes),
                            t.wrong,
                            t.checked,
                            t.checked_pes,
                            t.wrong_detail.as_deref().unwrap_or("")
                        ));
                    }
                }
            }
        }
        out
    }

    /// "candidate: why" for each candidate asked for by name that did not run (once per
    /// reason); the [`Report::optional`] ones are left out.
    pub fn not_run(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for row in &self.rows {
            for (c, o) in &row.results {
                if self.optional.contains(c) {
                    continue;
                }
                if let Outcome::Unavailable(why) = o {
                    let line = format!("{c}: {why}");
                    if !out.contains(&line) {
                        out.push(line);
                    }
                }
            }
        }
        out
    }

    /// An error when any output was wrong or any requested candidate could not run.
    pub fn verify(&self) -> ToolResult<()> {
        let failures = self.failures();
        if !failures.is_empty() {
            return Err(ToolError::DataMismatch {
                what: format!(
                    "{} benchmark: {} candidate(s) with wrong results: {}",
                    self.collective,
                    failures.len(),
                    failures.join("; ")
                ),
            });
        }
        let not_run = self.not_run();
        if !not_run.is_empty() {
            return Err(Error::Io {
                what: format!("{} benchmark", self.collective),
                message: format!(
                    "requested candidate(s) could not run: {} (leave them out with --algos)",
                    not_run.join("; ")
                ),
            }
            .into());
        }
        Ok(())
    }
}

/// What a run shares between dtypes, sizes and candidates.
pub struct Harness<'nv> {
    pub nv: &'nv Nvshmem,
    pub stream: Arc<CudaStream>,
    pub(crate) exchange: HostExchange<'nv>,
    /// What the compute kernel between calls writes ([`COMPUTE_BYTES`], a memset).
    compute: std::cell::RefCell<cudarc::driver::CudaSlice<u8>>,
    /// Timed groups per size and candidate.
    pub reps: usize,
    /// Untimed calls before them.
    pub warmup: usize,
    /// Host threads this PE computes its slots' values on ([`fill_threads`]).
    pub fill_threads: usize,
}

impl<'nv> Harness<'nv> {
    /// Collective.
    pub fn new(nv: &'nv Nvshmem, reps: usize, warmup: usize) -> Result<Self> {
        Ok(Harness {
            nv,
            stream: nv.stream().clone(),
            exchange: HostExchange::new(nv, EXCHANGE_BYTES)?,
            compute: std::cell::RefCell::new(nv.stream().alloc_zeros::<u8>(COMPUTE_BYTES)?),
            reps: reps.max(1),
            warmup: warmup.max(1),
            fill_threads: fill_threads(
                std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
                nv.n_pes(),
            ),
        })
    }

    /// Enqueues the compute kernel that separates calls in the second timing: a memset of
    /// [`COMPUTE_BYTES`] on the bench stream (bound by memory bandwidth, tens of microseconds).
    fn compute_kernel(&self) -> Result<()> {
        self.stream.memset_zeros(&mut *self.compute.borrow_mut())?;
        Ok(())
    }

    /// Calls per timed group for `call` (handed the call's index): [`iters_for`] of the time of
    /// the untimed warm-up calls, which it makes, PE 0's estimate being everyone's. The caller
    /// caps it where its calls need slots. Collective.
    pub fn group_size(&self, call: &mut dyn FnMut(usize) -> Result<()>) -> Result<usize> {
        self.nv.barrier_all()?;
        let ms = elapsed_ms(self.nv, &self.stream, || {
            for k in 0..self.warmup {
                call(k)?;
            }
            Ok(())
        })?;
        let iters = iters_for(ms * 1e3 / self.warmup as f64);
        Ok(self.exchange.broadcast_from_pe0(iters as u64)? as usize)
    }

    /// One timed group of `group` calls of `call` (handed the call's index 0..group), after a
    /// barrier so that skew between PEs is not timed. With `after_compute`, each call follows
    /// the compute kernel, and the compute kernels are then timed alone ([`after_compute_us`]
    /// takes the difference of the medians). Collective.
    pub fn time_group(
        &self,
        group: usize,
        after_compute: bool,
        call: &mut dyn FnMut(usize) -> Result<()>,
    ) -> Result<GroupTime> {
        let (nv, stream, group) = (self.nv, &*self.stream, group.max(1));
        nv.barrier_all()?;
        let mut host = std::time::Duration::ZERO;
        let ms = elapsed_ms(nv, stream, || {
            let t0 = std::time::Instant::now();
            for k in 0..group {
                if after_compute {
                    self.compute_kernel()?;
                }
                call(k)?;
            }
            host = t0.elapsed();
            Ok(())
        })?;
        let compute_us = if after_compute {
            let ms = elapsed_ms(nv, stream, || {
                for _ in 0..group {
                    self.compute_kernel()?;
                }
                Ok(())
            })?;
            Some(ms * 1e3 / group as f64)
        } else {
            None
        };
        Ok(GroupTime {
            us: ms * 1e3 / group as f64,
            compute_us,
            host_us: host.as_secs_f64() * 1e6 / group as f64,
        })
    }

    /// Agrees on a step's result across PEs: Ok(Some(value)) when it worked everywhere,
    /// Ok(None) with `why` when it failed everywhere, an error when only some PEs failed (they
    /// can no longer run the same sequence of calls).
    pub fn agree<V>(&self, what: &str, step: Result<V>) -> Result<std::result::Result<V, String>> {
        let failed = self.exchange.failed_pes(step.is_ok())?;
        match step {
            Err(e) if failed.len() == self.nv.n_pes() as usize => Ok(Err(e.to_string())),
            Err(e) => Err(e),
            Ok(_) if !failed.is_empty() => Err(failed_elsewhere(what, &failed)),
            Ok(v) => Ok(Ok(v)),
        }
    }

    /// [`Harness::run_dtypes`] with PE 0's report: `full(rows, gpu)` builds it from the rows and
    /// the GPU's name, handed to `partial` after every row (the rows so far) and returned at
    /// the end; None on the other PEs. Collective.
    pub fn run_reported<K, C>(
        &self,
        coll: &mut C,
        candidates: &[K],
        sizes: &[usize],
        dtypes: &[BenchDtype],
        full: &dyn Fn(Vec<Row>, String) -> Report,
        partial: &mut dyn FnMut(&Report),
    ) -> Result<Option<Report>>
    where
        K: Copy,
        C: Collective<f32, Candidate = K>
            + Collective<half::bf16, Candidate = K>
            + Collective<half::f16, Candidate = K>
            + Collective<f64, Candidate = K>
            + Collective<i32, Candidate = K>
            + Collective<u32, Candidate = K>
            + Collective<i64, Candidate = K>
            + Collective<u64, Candidate = K>
            + Collective<u8, Candidate = K>,
    {
        let pe0 = self.nv.my_pe() == 0;
        let gpu = gpu_name_on_pe0(self.nv);
        let mut on_row = |rows: &[Row]| {
            if pe0 {
                partial(&full(rows.to_vec(), gpu.clone()));
            }
        };
        let rows = self.run_dtypes(coll, candidates, sizes, dtypes, &mut on_row)?;
        self.nv.barrier_all()?;
        if !pe0 {
            return Ok(None);
        }
        Ok(Some(full(rows, self.nv.context().name()?)))
    }

    /// [`Harness::run_dtype`] for each of `dtypes` in turn: the report's rows, each handed
    /// with the ones before it to `on_row` as soon as it is measured. Collective. The caller
    /// has refused the types its collective does not take ([`check_dtypes`]).
    pub fn run_dtypes<K, C>(
        &self,
        coll: &mut C,
        candidates: &[K],
        sizes: &[usize],
        dtypes: &[BenchDtype],
        on_row: &mut dyn FnMut(&[Row]),
    ) -> Result<Vec<Row>>
    where
        K: Copy,
        C: Collective<f32, Candidate = K>
            + Collective<half::bf16, Candidate = K>
            + Collective<half::f16, Candidate = K>
            + Collective<f64, Candidate = K>
            + Collective<i32, Candidate = K>
            + Collective<u32, Candidate = K>
            + Collective<i64, Candidate = K>
            + Collective<u64, Candidate = K>
            + Collective<u8, Candidate = K>,
    {
        let mut rows = Vec::new();
        for &dtype in dtypes {
            let rows = &mut rows;
            match dtype {
                BenchDtype::F32 => {
                    self.run_dtype::<f32, _>(coll, candidates, sizes, rows, on_row)?
                }
                BenchDtype::Bf16 => {
                    self.run_dtype::<half::bf16, _>(coll, candidates, sizes, rows, on_row)?
                }
                BenchDtype::F16 => {
                    self.run_dtype::<half::f16, _>(coll, candidates, sizes, rows, on_row)?
                }
                BenchDtype::F64 => {
                    self.run_dtype::<f64, _>(coll, candidates, sizes, rows, on_row)?
                }
                BenchDtype::I32 => {
                    self.run_dtype::<i32, _>(coll, candidates, sizes, rows, on_row)?
                }
                BenchDtype::U32 => {
                    self.run_dtype::<u32, _>(coll, candidates, sizes, rows, on_row)?
                }
                BenchDtype::I64 => {
                    self.run_dtype::<i64, _>(coll, candidates, sizes, rows, on_row)?
                }
                BenchDtype::U64 => {
                    self.run_dtype::<u64, _>(coll, candidates, sizes, rows, on_row)?
                }
                BenchDtype::U8 => self.run_dtype::<u8, _>(coll, candidates, sizes, rows, on_row)?,
            }
        }
        Ok(rows)
    }

    /// Times and checks every candidate at every size in `sizes` (bytes asked for) for element
    /// type `T`, appending one row per size and handing all rows so far to `on_row` after
    /// each. Collective.
    pub fn run_dtype<T: BenchElement, C: Collective<T>>(
        &self,
        coll: &mut C,
        candidates: &[C::Candidate],
        sizes: &[usize],
        rows: &mut Vec<Row>,
        on_row: &mut dyn FnMut(&[Row]),
    ) -> Result<()> {
        let (nv, n) = (self.nv, self.nv.n_pes());
        let elem = std::mem::size_of::<T>();
        let plan = size_plan(coll, sizes, elem, n);
        // One pool of each kind for the whole dtype; each size takes a prefix as its slots.
        let pool = |len: &dyn Fn(usize) -> usize| {
            plan.iter()
                .map(|&(count, bytes)| slots_for(bytes) * len(count))
                .max()
                .unwrap_or(0)
        };
        let in_pool = pool(&|c| coll.input_len(c, n));
        let out_pool = pool(&|c| coll.output_len(c, n));
        if in_pool == 0 || out_pool == 0 {
            return Ok(());
        }
        let inputs = nv.alloc::<T>(in_pool)?;
        let outputs = nv.alloc::<T>(out_pool)?;
        let windows = self.nccl_windows(&*coll, candidates, in_pool, out_pool)?;
        let own = self.registrable_pools(&*coll, candidates, in_pool, out_pool)?;
        let registered = match &own {
            None => None,
            Some(Err(why)) => Some(Err(why.clone())),
            Some(Ok((i, o))) => Some(self.register_pools(i, o)?),
        };
        for (count, bytes) in plan {
            let pools = Pools {
                inputs: &inputs,
                outputs: &outputs,
                windows: windows.as_ref(),
                registered: registered.as_ref(),
            };
            let mut slots =
                Slots::new(coll, pools, count, slots_for(bytes), nv, self.fill_threads)?;
            let mut row = Row {
                bytes,
                count,
                dtype: T::BENCH_DTYPE,
                tolerance: slots.tolerance,
                results: Vec::new(),
                note: None,
            };
            for &c in candidates {
                let outcome = self.measure(coll, c, &mut slots, &mut row.note)?;
                row.results.push((coll.name(c), outcome));
            }
            rows.push(row);
            on_row(rows);
        }
        Ok(())
    }

    /// NCCL's buffers for a candidate that runs on them ([`Collective::nccl_window`]): a pool
    /// of `in_len` input and one of `out_len` output elements, each registered as a symmetric
    /// window; None when no candidate asks for them, the reason when they could not be made
    /// (the same on every PE). Collective.
    #[allow(clippy::type_complexity)]
    fn nccl_windows<T: BenchElement, C: Collective<T>>(
        &self,
        coll: &C,
        candidates: &[C::Candidate],
        in_len: usize,
        out_len: usize,
    ) -> Result<Option<std::result::Result<WindowPair<'nv, T>, String>>> {
        // Decided from state every PE shares, so all of them make windows or none does.
        let Some((nccl, _)) = candidates
            .iter()
            .filter(|&&c| coll.available(c).is_ok())
            .find_map(|&c| coll.nccl_window(c))
        else {
            return Ok(None);
        };
        let made = nccl.mem_alloc::<T>(self.nv, in_len).and_then(|i| {
            let o = nccl.mem_alloc::<T>(self.nv, out_len)?;
            Ok((i, o))
        });
        let (mut i, mut o) = match self.agree("ncclMemAlloc", made)? {
            Ok(pair) => pair,
            Err(why) => return Ok(Some(Err(why))),
        };
        // Collective: every PE registers the same two windows in the same order.
        let registered = i.register().and_then(|()| o.register());
        Ok(Some(
            self.agree("ncclCommWindowRegister", registered)?
                .map(|()| (i, o)),
        ))
    }

    /// This PE's memory for a candidate that runs on registered memory
    /// ([`Collective::registered`]): a pool of `in_len` input and one of `out_len` output
    /// elements from `alloc_registrable` (each rounded up to NVSHMEM's granularity, 512 MiB by
    /// default); None when no candidate asks for them, the reason when they could not be made
    /// on any PE. Collective (the PEs agree).
    #[allow(clippy::type_complexity)]
    fn registrable_pools<T: BenchElement, C: Collective<T>>(
        &self,
        coll: &C,
        candidates: &[C::Candidate],
        in_len: usize,
        out_len: usize,
    ) -> Result<Option<std::result::Result<RegistrablePair<'nv, T>, String>>> {
        // Decided from state every PE shares, so all of them make pools or none does.
        if !candidates
            .iter()
            .any(|&c| coll.available(c).is_ok() && coll.registered(c))
        {
            return Ok(None);
        }
        let made = self.nv.alloc_registrable::<T>(in_len).and_then(|i| {
            let o = self.nv.alloc_registrable::<T>(out_len)?;
            Ok((i, o))
        });
        Ok(Some(self.agree("alloc_registrable", made)?))
    }

    /// Registers both pools into the symmetric heap, once, before any timing; the reason on
    /// every PE when NVSHMEM's registration is refused (every PE refuses alike). Collective.
    #[allow(clippy::type_complexity)]
    fn register_pools<'b, T: BenchElement>(
        &self,
        inputs: &'b RegistrableBuffer<'nv, T>,
        outputs: &'b RegistrableBuffer<'nv, T>,
    ) -> Result<std::result::Result<RegisteredPair<'b, T>, String>> {
        let registered = self.nv.register_symmetric(inputs).and_then(|i| {
            let o = self.nv.register_symmetric(outputs)?;
            Ok((i, o))
        });
        match registered {
            Ok(pair) => Ok(Ok(pair)),
            Err(e @ Error::NotRegistrable { .. }) => Ok(Err(e.to_string())),
            Err(e) => Err(e),
        }
    }

    /// One call of `c` on slot `k`: on the symmetric buffers, or for a candidate of NCCL's
    /// windows or of registered memory on those.
    fn call_slot<T: BenchElement, C: Collective<T>>(
        coll: &mut C,
        c: C::Candidate,
        slots: &Slots<'_, T>,
        k: usize,
        stream: &CudaStream,
    ) -> Result<Option<&'static str>> {
        match coll.nccl_window(c) {
            Some((nccl, call)) => {
                let w = slots.windows()?;
                nccl.run(call, w.input(k)?, w.output(k)?).map(|()| None)
            }
            None if coll.registered(c) => {
                let (i, o) = slots.registered(k)?;
                coll.call(c, i, o, stream)
            }
            None => coll.call(c, slots.input(k)?, slots.output(k)?, stream),
        }
    }

    /// Times one candidate at one size in checked groups. Collective.
    fn measure<T: BenchElement, C: Collective<T>>(
        &self,
        coll: &mut C,
        c: C::Candidate,
        slots: &mut Slots<'_, T>,
        note: &mut Option<&'static str>,
    ) -> Result<Outcome> {
        let (nv, stream, n) = (self.nv, &*self.stream, self.nv.n_pes());
        if let Err(why) = coll.available(c) {
            return Ok(Outcome::Unavailable(why));
        }
        let window = if coll.nccl_window(c).is_some() {
            On::NcclWindows
        } else if coll.registered(c) {
            On::Registered
        } else {
            On::Symmetric
        };
        if let Err(e) = slots.usable(window) {
            return Ok(Outcome::Unavailable(e.to_string()));
        }
        // A first call tells whether the candidate runs at all; the PEs agree before anyone
        // waits on the GPU, since a PE whose call launched may be waiting for the others.
        nv.barrier_all()?;
        let probe = Self::call_slot(coll, c, slots, 0, stream);
        match self.agree(coll.name(c), probe)? {
            Err(why) => return Ok(Outcome::Unavailable(why)),
            Ok(Some(picked)) => *note = Some(picked),
            Ok(None) => {}
        }
        stream.synchronize()?;

        let n_slots = slots.n_slots;
        let iters = self.group_size(&mut |k| {
            Self::call_slot(coll, c, slots, k % n_slots, stream).map(|_| ())
        })?;
        let group = iters.min(n_slots);
        slots.expect_first(coll.values(), group);

        let mut us = Vec::with_capacity(self.reps);
        let (mut with_compute, mut compute_alone) = (Vec::new(), Vec::new());
        let mut host_us = Vec::with_capacity(self.reps);
        let mut wrong = 0u64;
        let mut first: Option<Mismatch> = None;
        let host_len = if slots.checks {
            group * slots.out_len
        } else {
            0
        };
        let mut host = vec![T::default(); host_len];
        // Back to back, then each call after a compute kernel; every timed call is checked.
        for (rep, after_compute) in (0..self.reps)
            .map(|r| (r, false))
            .chain((0..self.reps).map(|r| (r, true)))
        {
            // NaN in every output, so a call that writes nothing (or only part) is caught.
            slots.poison(window, group)?;
            nv.context().synchronize()?;
            let t = self.time_group(group, after_compute, &mut |k| {
                Self::call_slot(coll, c, slots, k, stream).map(|_| ())
            })?;
            match t.compute_us {
                Some(alone) => {
                    with_compute.push(t.us);
                    compute_alone.push(alone);
                }
                None => {
                    us.push(t.us);
                    host_us.push(t.host_us);
                }
            }
            if !slots.checks {
                continue;
            }
            slots.read_outputs(window, group, &mut host)?;
            for (k, got) in host.chunks(slots.out_len).enumerate() {
                if let Some((i, got, expected)) = slots.first_mismatch(k, got) {
                    wrong += 1;
                    first.get_or_insert(Mismatch {
                        rep,
                        call: k,
                        element: i,
                        got,
                        expected,
                    });
                }
            }
        }
        let (wrong, wrong_detail) = self.gather_wrong(wrong, first)?;
        let us_after_compute = after_compute_us(&with_compute, &compute_alone);
        let us = median(&us);
        let algbw = algbw_gbps(slots.bytes, us);
        Ok(Outcome::Timed(Timing {
            iters: group,
            us,
            us_after_compute,
            algbw,
            busbw: algbw * coll.busbw_factor(n),
            host_us: median(&host_us),
            checked: (2 * group * self.reps) as u64,
            checked_pes: (0..n).filter(|&pe| coll.checks_output(pe, n)).count() as i32,
            wrong,
            wrong_detail,
        }))
    }

    /// Every PE's wrong-output count and first mismatch: the total and a description.
    fn gather_wrong(&self, wrong: u64, first: Option<Mismatch>) -> Result<(u64, Option<String>)> {
        let mut mine = wrong.to_le_bytes().to_vec();
        if let Some(m) = first {
            mine.extend((m.rep as u32).to_le_bytes());
            mine.extend((m.call as u32).to_le_bytes());
            mine.extend((m.element as u64).to_le_bytes());
            mine.extend(m.got.to_le_bytes());
            mine.extend(m.expected.to_le_bytes());
        }
        let all = self.exchange.all_gather(&mine)?;
        let word = |m: &[u8], at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&m[at..at + 8]);
            w
        };
        let half = |m: &[u8], at: usize| {
            let mut w = [0u8; 4];
            w.copy_from_slice(&m[at..at + 4]);
            u32::from_le_bytes(w)
        };
        let mut total = 0u64;
        let mut details = Vec::new();
        for (pe, m) in all.iter().enumerate() {
            let count = u64::from_le_bytes(word(m, 0));
            total += count;
            if count > 0 {
                details.push(format!(
                    "PE {pe}: {count} wrong, first in group {} call {} element {} = {} \
                     (expected {})",
                    half(m, 8),
                    half(m, 12),
                    u64::from_le_bytes(word(m, 16)),
                    f64::from_le_bytes(word(m, 24)),
                    f64::from_le_bytes(word(m, 32))
                ));
            }
        }
        Ok((total, (!details.is_empty()).then(|| details.join(", "))))
    }
}

/// A wrong output element on this PE.
#[derive(Debug, Clone, Copy)]
struct Mismatch {
    rep: usize,
    call: usize,
    element: usize,
    got: f64,
    expected: f64,
}

/// NCCL's input and output pools of one dtype, registered as windows.
type WindowPair<'nv, T> = (NcclWindow<'nv, T>, NcclWindow<'nv, T>);

/// This PE's own input and output pools of one dtype, registrable.
type RegistrablePair<'nv, T> = (RegistrableBuffer<'nv, T>, RegistrableBuffer<'nv, T>);

/// The same pools registered into the symmetric heap.
type RegisteredPair<'b, T> = (Registered<'b, T>, Registered<'b, T>);

/// One size's slots in registered memory: all its inputs, all its outputs.
type SymPair<'p, T> = (SymView<'p, T>, SymView<'p, T>);

/// Which buffers a candidate runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum On {
    Symmetric,
    NcclWindows,
    Registered,
}

/// One dtype's buffer pools, of which each size takes a prefix.
struct Pools<'p, 'nv, T: BenchElement> {
    inputs: &'p SymmetricBuffer<'nv, T>,
    outputs: &'p SymmetricBuffer<'nv, T>,
    /// NCCL's, where a candidate runs on them (or why they could not be made).
    windows: Option<&'p std::result::Result<WindowPair<'nv, T>, String>>,
    /// The caller's own, registered, where a candidate runs on them (or why they could not
    /// be made or registered).
    registered: Option<&'p std::result::Result<RegisteredPair<'p, T>, String>>,
}

/// One size's slots in NCCL's windows.
struct WindowSlots<'p, T> {
    inputs: NcclBuf<'p, T>,
    outputs: NcclBuf<'p, T>,
    in_len: usize,
    out_len: usize,
}

impl<'p, T: BenchElement> WindowSlots<'p, T> {
    fn input(&self, k: usize) -> Result<NcclBuf<'p, T>> {
        self.inputs.view(k * self.in_len..(k + 1) * self.in_len)
    }

    fn output(&self, k: usize) -> Result<NcclBuf<'p, T>> {
        self.outputs.view(k * self.out_len..(k + 1) * self.out_len)
    }
}

/// One size's input/output buffer pairs, inputs written, expected outputs on the host.
struct Slots<'p, T: BenchElement> {
    inputs: SymView<'p, T>,
    outputs: SymView<'p, T>,
    /// The same slots in NCCL's windows, holding the same inputs (or why there are none).
    nccl: Option<std::result::Result<WindowSlots<'p, T>, String>>,
    /// The same slots in registered memory (inputs, outputs), holding the same inputs (or why
    /// there are none).
    reg: Option<std::result::Result<SymPair<'p, T>, String>>,
    /// Buffer pairs.
    n_slots: usize,
    /// nccl-tests' size of the message (the larger buffer), bytes.
    bytes: usize,
    in_len: usize,
    out_len: usize,
    /// Whether this PE's output is defined and compared.
    checks: bool,
    /// This PE's expected outputs of the slots groups have reached so far.
    expected: Expected<T>,
    /// How far an output element may be from its expected value ([`Collective::tolerance`]).
    tolerance: f64,
}

impl<'p, T: BenchElement> Slots<'p, T> {
    /// Writes every slot's input on this PE, computed on up to `threads` host threads; the
    /// expected outputs come later, as far as a candidate's groups reach
    /// ([`Slots::expect_first`]). Collective.
    fn new<C: Collective<T>>(
        coll: &C,
        pools: Pools<'p, '_, T>,
        count: usize,
        n_slots: usize,
        nv: &Nvshmem,
        threads: usize,
    ) -> Result<Self> {
        let (me, n) = (nv.my_pe(), nv.n_pes());
        let (in_len, out_len) = (coll.input_len(count, n), coll.output_len(count, n));
        let bytes = message_bytes(in_len, out_len, std::mem::size_of::<T>());
        let checks = coll.checks_output(me, n);
        let shape = SlotShape {
            me,
            n_pes: n,
            count,
            bytes,
            in_len,
            out_len,
        };
        let mut host = vec![T::default(); n_slots * in_len];
        let fill = threads_for(host.len(), threads);
        shape.fill_inputs(coll.values(), 0, &mut host, fill);
        let inputs = pools.inputs.view(..n_slots * in_len)?;
        inputs.copy_from_host(&host)?;
        let nccl = match pools.windows {
            None => None,
            Some(Err(why)) => Some(Err(why.clone())),
            Some(Ok((win_in, win_out))) => {
                let w = WindowSlots {
                    inputs: win_in.view(0..n_slots * in_len)?,
                    outputs: win_out.view(0..n_slots * out_len)?,
                    in_len,
                    out_len,
                };
                // The same inputs as the symmetric buffers'.
                // SAFETY: a device range of NCCL's of exactly host's length, on this PE.
                unsafe {
                    cudarc::driver::result::memcpy_htod_sync(
                        w.inputs.as_device_ptr() as cudarc::driver::sys::CUdeviceptr,
                        &host,
                    )
                }?;
                Some(Ok(w))
            }
        };
        let reg = match pools.registered {
            None => None,
            Some(Err(why)) => Some(Err(why.clone())),
            Some(Ok((reg_in, reg_out))) => {
                let inputs = reg_in.view(..n_slots * in_len)?;
                inputs.copy_from_host(&host)?;
                Some(Ok((inputs, reg_out.view(..n_slots * out_len)?)))
            }
        };
        // A synchronous copy from pageable memory may return before the data lands.
        nv.context().synchronize()?;
        // Nobody reads a peer's inputs before the peer wrote them.
        nv.barrier_all()?;
        Ok(Slots {
            inputs,
            outputs: pools.outputs.view(..n_slots * out_len)?,
            nccl,
            reg,
            n_slots,
            bytes,
            in_len,
            out_len,
            checks,
            expected: Expected::new(shape, checks, threads),
            tolerance: coll.tolerance(T::BENCH_DTYPE, n),
        })
    }

    /// Makes the expected outputs of the first `group` slots ready ([`Expected::reach`]).
    fn expect_first<V: SlotValues>(&mut self, values: V, group: usize) {
        self.expected.reach(values, group.min(self.n_slots));
    }

    fn input(&self, k: usize) -> Result<SymView<'p, T>> {
        self.inputs.view(k * self.in_len..(k + 1) * self.in_len)
    }

    fn output(&self, k: usize) -> Result<SymView<'p, T>> {
        self.outputs.view(k * self.out_len..(k + 1) * self.out_len)
    }

    /// The slots in NCCL's windows; an error saying why there are none.
    fn windows(&self) -> Result<&WindowSlots<'p, T>> {
        match &self.nccl {
            Some(Ok(w)) => Ok(w),
            Some(Err(why)) => Err(Error::Driver {
                message: why.clone(),
            }),
            None => Err(Error::Driver {
                message: "no NCCL windows were made for this run".into(),
            }),
        }
    }

    /// Slot `k` in registered memory (input, output); an error saying why there is none.
    fn registered(&self, k: usize) -> Result<SymPair<'p, T>> {
        match &self.reg {
            Some(Ok((i, o))) => Ok((
                i.view(k * self.in_len..(k + 1) * self.in_len)?,
                o.view(k * self.out_len..(k + 1) * self.out_len)?,
            )),
            Some(Err(why)) => Err(Error::Driver {
                message: why.clone(),
            }),
            None => Err(Error::Driver {
                message: "no registered memory was made for this run".into(),
            }),
        }
    }

    /// Ok when the buffers a candidate runs on (`on`) exist; the reason why not.
    fn usable(&self, on: On) -> Result<()> {
        match on {
            On::Symmetric => Ok(()),
            On::NcclWindows => self.windows().map(|_| ()),
            On::Registered => self.registered(0).map(|_| ()),
        }
    }

    /// The symmetric outputs a candidate on `on` writes: the symmetric buffers' or the
    /// registered ones' (None for NCCL's windows).
    fn symmetric_outputs(&self, on: On) -> Result<Option<SymView<'p, T>>> {
        match on {
            On::Symmetric => Ok(Some(self.outputs)),
            On::Registered => self.registered(0).map(|_| match &self.reg {
                Some(Ok((_, o))) => Some(*o),
                _ => None,
            }),
            On::NcclWindows => Ok(None),
        }
    }

    /// The first `group` outputs of the buffers of `on`.
    fn first_outputs(&self, on: On, group: usize) -> Result<NcclBuf<'p, T>> {
        match self.symmetric_outputs(on)? {
            Some(o) => Ok(o.view(..group * self.out_len)?.into()),
            None => self.windows()?.outputs.view(0..group * self.out_len),
        }
    }

    /// Copies the first `group` outputs (of the buffers of `on`) into `host`.
    fn read_outputs(&self, on: On, group: usize, host: &mut [T]) -> Result<()> {
        if let Some(o) = self.symmetric_outputs(on)? {
            return o.view(..group * self.out_len)?.copy_to_host(host);
        }
        let first = self.first_outputs(on, group)?;
        if first.len() != host.len() {
            return Err(Error::HostLengthMismatch {
                what: "NCCL window outputs",
                host: host.len(),
                device: first.len(),
            });
        }
        // SAFETY: a device range of NCCL's of host's length; the calls that wrote it are done
        // (the group's stop event was waited for).
        unsafe {
            cudarc::driver::result::memcpy_dtoh_sync(
                host,
                first.as_device_ptr() as cudarc::driver::sys::CUdeviceptr,
            )
        }?;
        Ok(())
    }

    /// Fills the first `group` outputs (of the buffers of `on`) with a value no correct output
    /// holds ([`BenchDtype::poison_byte`]: NaN for floats).
    fn poison(&self, on: On, group: usize) -> Result<()> {
        let first = self.first_outputs(on, group)?;
        if first.is_empty() {
            return Ok(());
        }
        // SAFETY: a valid device range of num_bytes bytes on this PE.
        unsafe {
            cudarc::driver::result::memset_d8_sync(
                first.as_device_ptr() as cudarc::driver::sys::CUdeviceptr,
                T::BENCH_DTYPE.poison_byte(),
                first.num_bytes(),
            )
        }?;
        Ok(())
    }

    /// The first element of slot `k`'s output `got` outside the tolerance: (index, got,
    /// expected). NaN is always wrong.
    fn first_mismatch(&self, k: usize, got: &[T]) -> Option<(usize, f64, f64)> {
        let expected = self.expected.slot(k);
        // Equal bytes are equal values, and comparing bytes runs near memory speed; only an
        // output that differs is compared element by element (which accepts avg's rounding).
        if as_bytes(got) == as_bytes(expected) {
            return None;
        }
        got.iter()
            .zip(expected)
            .enumerate()
            .find_map(|(i, (&g, &e))| {
                let (g, e) = (g.value(), e.value());
                let ok = g == e || (g - e).abs() <= self.tolerance;
                (!ok).then_some((i, g, e))
            })
    }
}

/// One size's expected outputs on this PE, computed as far as the groups reach: a group of g
/// calls uses slots 0..g only, and at sizes with many slots (up to [`MAX_ITERS`]) groups are
/// often far shorter, so most slots' outputs would never be compared.
struct Expected<T> {
    shape: SlotShape,
    /// Whether this PE's output is compared at all; none is computed where not.
    checks: bool,
    /// Host threads to compute them on.
    threads: usize,
    /// Slot after slot, the first `slots` slots.
    outputs: Vec<T>,
    slots: usize,
}

impl<T: BenchElement> Expected<T> {
    fn new(shape: SlotShape, checks: bool, threads: usize) -> Self {
        Expected {
            shape,
            checks,
            threads,
            outputs: Vec::new(),
            slots: 0,
        }
    }

    /// Computes the slots below `slots` not computed yet (where this PE's output is compared).
    fn reach<V: SlotValues>(&mut self, values: V, slots: usize) {
        if !self.checks || slots <= self.slots {
            return;
        }
        let at = self.outputs.len();
        self.outputs
            .resize(slots * self.shape.out_len, T::default());
        let more = &mut self.outputs[at..];
        let threads = threads_for(more.len(), self.threads);
        self.shape.fill_expected(values, self.slots, more, threads);
        self.slots = slots;
    }

    /// Slot `k`'s expected output; `k` must be below what [`Expected::reach`] reached.
    fn slot(&self, k: usize) -> &[T] {
        assert!(
            k < self.slots,
            "slot {k} compared before its reference was computed"
        );
        let len = self.shape.out_len;
        &self.outputs[k * len..(k + 1) * len]
    }
}

/// The bytes of a slice of symmetric-memory elements.
fn as_bytes<T: BenchElement>(v: &[T]) -> &[u8] {
    // SAFETY: Element types are plain old data without padding; the length is the slice's.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// The error for a step that worked here but failed on other PEs: the job cannot go on
/// together (this PE's stream may wait on them forever).
pub fn failed_elsewhere(what: &str, failed: &[i32]) -> Error {
    Error::Io {
        what: format!("benchmark, {what}"),
        message: format!(
            "failed on PE(s) {failed:?} but not on this one; stopping, since the PEs can no \
             longer run the same sequence of calls"
        ),
    }
}

/// The error of [`Collective::call`] for a candidate the harness runs on NCCL's windows
/// ([`Collective::nccl_window`]), which never reaches it.
pub fn window_only(candidate: &str) -> Error {
    Error::Driver {
        message: format!("{candidate} runs on NCCL's windows, through the harness"),
    }
}

/// Bytes the compute kernel between calls writes.
pub const COMPUTE_BYTES: usize = 64 << 20;

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn after_compute_is_the_difference_of_the_medians_never_negative() {
        assert_eq!(
            after_compute_us(&[10.0, 30.0, 12.0], &[4.0, 5.0, 100.0]),
            7.0
        );
        assert_eq!(after_compute_us(&[10.0, 12.0], &[4.0, 5.0]), 6.5);
        // Noise can put the compute alone above the pairs: the call then costs nothing.
        assert_eq!(after_compute_us(&[5.0], &[6.0]), 0.0);
    }

    #[test]
    fn sizes_step_by_the_factor_up_to_max() {
        // Factor 2 from a power of two: the old doubling.
        assert_eq!(
            size_steps(4 << 10, 32 << 10, 2),
            vec![4 << 10, 8 << 10, 16 << 10, 32 << 10]
        );
        assert_eq!(size_steps(4 << 10, 256 << 20, 2).len(), 17);
        // Factor 4: 4K, 16K, 64K, ...; max reached exactly is the last size.
        assert_eq!(
            size_steps(4 << 10, 1 << 20, 4),
            vec![4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20]
        );
        // A max between steps is never exceeded.
        assert_eq!(
            size_steps(4 << 10, 100 << 10, 4),
            vec![4 << 10, 16 << 10, 64 << 10]
        );
        assert_eq!(size_steps(1000, 9000, 3), vec![1000, 3000, 9000]);
        // One size when min is max; none when min is above max.
        assert_eq!(size_steps(1 << 20, 1 << 20, 8), vec![1 << 20]);
        assert!(size_steps(2 << 20, 1 << 20, 2).is_empty());
        // Steps near the top of usize end instead of wrapping.
        let top = size_steps(1 << 62, usize::MAX, 2);
        assert_eq!(top, vec![1 << 62, 1 << 63]);
        // A factor below 2 cannot loop forever.
        assert_eq!(size_steps(1, 4, 1), vec![1, 2, 4]);
        assert_eq!(size_steps(1, 4, 0), vec![1, 2, 4]);
    }

    /// What `-d` takes (clap's ValueEnum, any case): the report's names and the aliases, for
    /// every type, and nothing else.
    #[test]
    fn dtype_names_and_aliases_parse() {
        use clap::ValueEnum;
        let names: Vec<String> = BenchDtype::value_variants()
            .iter()
            .map(|d| d.to_possible_value().unwrap().get_name().to_string())
            .collect();
        // --help's order, which is ALL's.
        assert_eq!(
            names,
            ["f32", "bf16", "f16", "f64", "i32", "u32", "i64", "u64", "u8"]
        );
        assert_eq!(BenchDtype::value_variants(), BenchDtype::ALL);
        for d in BenchDtype::ALL {
            assert_eq!(BenchDtype::from_str(d.name(), true), Ok(d));
            assert_eq!(d.to_possible_value().unwrap().get_name(), d.name());
        }
        for (s, d) in [
            ("float32", BenchDtype::F32),
            ("Float", BenchDtype::F32),
            ("BF16", BenchDtype::Bf16),
            ("bfloat16", BenchDtype::Bf16),
            ("float16", BenchDtype::F16),
            ("half", BenchDtype::F16),
            ("float64", BenchDtype::F64),
            ("double", BenchDtype::F64),
            ("int32", BenchDtype::I32),
            ("int", BenchDtype::I32),
            ("uint32", BenchDtype::U32),
            ("int64", BenchDtype::I64),
            ("uint64", BenchDtype::U64),
            ("uint8", BenchDtype::U8),
            ("UINT8", BenchDtype::U8),
        ] {
            assert_eq!(BenchDtype::from_str(s, true), Ok(d), "{s}");
        }
        // Types the library does not have, and `all` (the command line's, not a type).
        for bad in ["int8", "i8", "fp8", "f8e4m3", "char", "all", ""] {
            assert!(BenchDtype::from_str(bad, true).is_err(), "{bad}");
        }
    }

    /// (dtype, the library's name, size) of a bench element type.
    fn described<T: BenchElement>() -> (BenchDtype, &'static str, usize) {
        (T::BENCH_DTYPE, T::NAME, std::mem::size_of::<T>())
    }

    /// Each Rust type's dtype agrees with the library's element table, and the lists are the
    /// library's: eight reducible types, u8 on top for data movement.
    #[test]
    fn dtypes_are_the_librarys_element_types() {
        let all = [
            described::<f32>(),
            described::<half::bf16>(),
            described::<half::f16>(),
            described::<f64>(),
            described::<i32>(),
            described::<u32>(),
            described::<i64>(),
            described::<u64>(),
            described::<u8>(),
        ];
        for (d, name, size) in all {
            assert_eq!((d.name(), d.size()), (name, size), "{d:?}");
            assert_eq!(d.library().name(), name);
        }
        let dtypes: Vec<BenchDtype> = all.iter().map(|t| t.0).collect();
        assert_eq!(dtypes, BenchDtype::ALL);
        assert_eq!(BenchDtype::REDUCIBLE, BenchDtype::ALL[..8]);
        assert!(BenchDtype::ALL
            .iter()
            .all(|d| d.reducible() != (*d == BenchDtype::U8)));
        assert_eq!(BenchDtype::taken_by(true), BenchDtype::REDUCIBLE);
        assert_eq!(BenchDtype::taken_by(false), BenchDtype::ALL);
        assert_eq!(BenchDtype::DEFAULT, [BenchDtype::F32, BenchDtype::Bf16]);
        let floats: Vec<&str> = BenchDtype::ALL
            .iter()
            .filter(|d| d.is_float())
            .map(|d| d.name())
            .collect();
        assert_eq!(floats, ["f32", "bf16", "f16", "f64"]);
        let signed: Vec<&str> = BenchDtype::ALL
            .iter()
            .filter(|d| d.is_signed_int())
            .map(|d| d.name())
            .collect();
        assert_eq!(signed, ["i32", "i64"]);
    }

    /// The poison byte's value in each type, as the checker reads it.
    fn poison<T: BenchElement>() -> T {
        let bytes = vec![T::BENCH_DTYPE.poison_byte(); std::mem::size_of::<T>()];
        // SAFETY: every bit pattern is a valid element (Element's contract).
        unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) }
    }

    /// No correct output holds the poison: NaN for floats, an integer outside every pattern's
    /// range otherwise (so an element a call leaves unwritten is always wrong).
    #[test]
    fn poison_is_never_a_value_the_patterns_produce() {
        assert!(poison::<f32>().is_nan() && poison::<f64>().is_nan());
        assert!(poison::<half::f16>().is_nan() && poison::<half::bf16>().is_nan());
        assert_eq!(poison::<u8>(), u8::MAX);
        assert_eq!(poison::<u32>(), u32::MAX);
        assert_eq!(poison::<u64>(), u64::MAX);
        assert_eq!(poison::<i32>(), -0x7f7f_7f80);
        assert_eq!(poison::<i64>(), -0x7f7f_7f7f_7f7f_7f80);
        // Hashes at the ends of each pattern's range, and every data movement value between.
        for h in [
            0,
            1,
            u64::MAX,
            u64::MAX - 1,
            1 << 63,
            (1 << 63) - 1,
            0xffff_fffe << 32,
        ] {
            for &d in &BenchDtype::ALL {
                let v = movement_value(d, h);
                assert!(v.fract() == 0.0 || d.is_float(), "{d:?} {h:x}");
                let (lo, hi) = match d {
                    BenchDtype::U8 => (0.0, 254.0),
                    BenchDtype::U32 => (0.0, (u32::MAX - 1) as f64),
                    BenchDtype::I32 => (-(2f64.powi(30)), 2f64.powi(30) - 1.0),
                    BenchDtype::U64 => (0.0, 2f64.powi(53) - 1.0),
                    BenchDtype::I64 => (-(2f64.powi(52)), 2f64.powi(52) - 1.0),
                    _ => (-QUARTER_MAX, QUARTER_MAX),
                };
                assert!((lo..=hi).contains(&v), "{d:?} {h:x}: {v}");
            }
            for signed in [true, false] {
                assert!(integer_value(h, signed).abs() <= 64.0);
                assert!(integer_power_value(h, signed).abs() <= 2.0);
            }
        }
        // The ends themselves are reached, and convert to the type exactly.
        assert_eq!(
            movement_value(BenchDtype::U32, 0xffff_fffe << 32),
            4294967294.0
        );
        assert_eq!(movement_value(BenchDtype::U32, u64::MAX), 0.0);
        assert_eq!(movement_value(BenchDtype::I32, u64::MAX), 1073741823.0);
        assert_eq!(movement_value(BenchDtype::I32, 0), -1073741824.0);
        assert_eq!(movement_value(BenchDtype::U8, 254 << 32), 254.0);
        assert_eq!(movement_value(BenchDtype::I64, 0), -4503599627370496.0);
        assert_eq!(
            movement_value(BenchDtype::U64, u64::MAX),
            9007199254740991.0
        );
        assert_eq!(i64::from_value(-4503599627370496.0), -(1 << 52));
        assert_eq!(u64::from_value(9007199254740991.0), (1 << 53) - 1);
        assert_eq!(u8::from_value(254.0), 254);
        assert_eq!(i32::from_value(-1073741824.0).value(), -1073741824.0);
    }

    fn timed(us: f64, after: f64, wrong: u64) -> Outcome {
        Outcome::Timed(Timing {
            iters: 20,
            us,
            us_after_compute: after,
            algbw: algbw_gbps(4096, us),
            busbw: algbw_gbps(4096, us),
            host_us: 1.0,
            checked: 40,
            checked_pes: 2,
            wrong,
            wrong_detail: None,
        })
    }

    /// The table's row of message size `size` ("4K"): the first line that starts with it.
    pub(crate) fn table_row<'t>(t: &'t str, size: &str) -> &'t str {
        t.lines()
            .find(|l| l.trim_start().starts_with(size))
            .unwrap()
    }

    /// A report of ours against NCCL's two paths: at 4K nccl-sym is the faster back to back
    /// but not after compute, at 8K nccl is the faster (nccl-sym ran, slower), at 16K
    /// nccl-sym's outputs were wrong and at 32K it did not run.
    pub(crate) fn two_baselines() -> Report {
        let row = |bytes: usize, results: Vec<(&'static str, Outcome)>| Row {
            bytes,
            count: bytes / 4,
            dtype: BenchDtype::F32,
            tolerance: 0.0,
            results,
            note: None,
        };
        Report {
            collective: "allgather",
            n_pes: 2,
            gpu: "NVIDIA H200".into(),
            date: "2026-12-01".into(),
            op: None,
            reps: 2,
            warmup: 1,
            header: vec![],
            json_fields: vec![],
            candidates: vec!["ours", "nccl", "nccl-sym"],
            ratio: Some(("ours", NCCL_BASELINES)),
            optional: vec!["nccl-sym"],
            note_column: None,
            checked_by: None,
            rows: vec![
                row(
                    4096,
                    vec![
                        ("ours", timed(4.0, 6.0, 0)),
                        ("nccl", timed(8.0, 10.0, 0)),
                        ("nccl-sym", timed(5.0, 12.0, 0)),
                    ],
                ),
                row(
                    8192,
                    vec![
                        ("ours", timed(9.0, 9.0, 0)),
                        ("nccl", timed(6.0, 6.0, 0)),
                        ("nccl-sym", timed(7.5, 7.5, 0)),
                    ],
                ),
                row(
                    16384,
                    vec![
                        ("ours", timed(10.0, 10.0, 0)),
                        ("nccl", timed(20.0, 20.0, 0)),
                        ("nccl-sym", timed(1.0, 1.0, 3)),
                    ],
                ),
                row(
                    32768,
                    vec![
                        ("ours", timed(10.0, 10.0, 0)),
                        ("nccl", timed(40.0, 40.0, 0)),
                        (
                            "nccl-sym",
                            Outcome::Unavailable("NCCL 2.26.2 has none".into()),
                        ),
                    ],
                ),
            ],
        }
    }

    /// The ratio takes the faster NCCL path that ran right, at each size and on each timing
    /// separately; a tie goes to the first listed (nccl).
    #[test]
    fn ratio_takes_the_faster_nccl_path_per_size() {
        use RatioOn::{AfterCompute as After, BackToBack as B2b};
        let r = two_baselines();
        let at = |i: usize, on: RatioOn| r.rows[i].ratio_to_fastest("ours", NCCL_BASELINES, on);
        // At 4K the two timings disagree on which NCCL path is the faster.
        assert_eq!(at(0, B2b), Some((0.8, "nccl-sym")));
        assert_eq!(at(0, After), Some((0.6, "nccl")));
        assert_eq!(
            r.rows[0].fastest(NCCL_BASELINES, B2b),
            Some(("nccl-sym", 5.0))
        );
        assert_eq!(
            r.rows[0].fastest(NCCL_BASELINES, After),
            Some(("nccl", 10.0))
        );
        assert_eq!(at(1, B2b), Some((1.5, "nccl")));
        // Wrong outputs and a path that did not run are never the baseline.
        assert_eq!(at(2, B2b), Some((0.5, "nccl")));
        assert_eq!(at(3, After), Some((0.25, "nccl")));
        // The single-baseline ratio, on either timing.
        assert_eq!(r.rows[0].ratio("ours", "nccl", B2b), Some(0.5));
        assert_eq!(r.rows[0].ratio("ours", "nccl", After), Some(0.6));
        assert_eq!(r.rows[0].ratio("ours", "nccl-sym", After), Some(0.5));
        let mut tie = r.rows[1].clone();
        tie.results[2] = ("nccl-sym", timed(6.0, 6.0, 0));
        assert_eq!(tie.fastest(NCCL_BASELINES, B2b), Some(("nccl", 6.0)));
        // Neither ran: no ratio; ours did not run: none either.
        let mut none = r.rows[3].clone();
        none.results[1] = ("nccl", Outcome::Unavailable("no NCCL".into()));
        assert_eq!(none.ratio_to_fastest("ours", NCCL_BASELINES, After), None);
        none.results = vec![("nccl", timed(1.0, 1.0, 0))];
        assert_eq!(none.ratio_to_fastest("ours", NCCL_BASELINES, After), None);
        assert_eq!(baseline_cell(Some("nccl"), Some("nccl")), "nccl");
        assert_eq!(
            baseline_cell(Some("nccl-sym"), Some("nccl")),
            "nccl-sym|nccl"
        );
        assert_eq!(baseline_cell(None, Some("nccl")), "-|nccl");
        assert_eq!(baseline_cell(Some("nccl"), None), "nccl");
        assert_eq!(baseline_cell(None, None), "-");
    }

    /// `--ratio-on` takes the two timings by name, after compute by default; the names are the
    /// JSON's and the CSV's.
    #[test]
    fn ratio_is_on_after_compute_unless_asked_otherwise() {
        use clap::ValueEnum;
        assert_eq!(RatioOn::default(), RatioOn::AfterCompute);
        for on in [RatioOn::AfterCompute, RatioOn::BackToBack] {
            assert_eq!(on.to_possible_value().unwrap().get_name(), on.name());
            assert_eq!(RatioOn::from_str(on.name(), true), Ok(on));
            assert_ne!(on.other(), on);
            assert_eq!(on.other().other(), on);
        }
        assert_eq!(RatioOn::value_variants().len(), 2);
        let t = Timing {
            us: 1.0,
            us_after_compute: 2.0,
            ..match timed(1.0, 2.0, 0) {
                Outcome::Timed(t) => t,
                _ => unreachable!(),
            }
        };
        assert_eq!(t.us_on(RatioOn::AfterCompute), 2.0);
        assert_eq!(t.us_on(RatioOn::BackToBack), 1.0);
    }

    /// After compute (the default): the first ratio column is on the times after compute, its
    /// baseline the path fastest after compute; back to back beside it; the header says which.
    /// Back to back (`--ratio-on back-to-back`): the table as before the flag, with its
    /// header saying so; after compute is the second ratio column.
    /// JSON: `ratio_on`, the ratio on it against the faster path with the baseline it used,
    /// both timings' ratios by name, the baselines and the optional candidates; every
    /// candidate's own times under `results`.
    /// `complete` is false in a report written while the bench runs and true in the final
    /// one, right after `schema`; nothing else differs.
    /// Every element gets its own index's value, whatever the threads (more than the elements
    /// included) and whether the length divides among them; by slots, each element its slot's
    /// and index's, with chunks that start and end inside slots.
    #[test]
    fn parallel_fill_sets_every_element_from_its_index() {
        let f = |j: usize| pattern_hash(3, j, 11);
        for len in [0, 1, 2, 5, 17, 1000, 4099] {
            for threads in [0, 1, 2, 3, 4, 7, 16, 5000] {
                let mut out = vec![0u64; len];
                fill_parallel(&mut out, threads, |at, part| {
                    for (j, x) in part.iter_mut().enumerate() {
                        *x = f(at + j);
                    }
                });
                let want: Vec<u64> = (0..len).map(f).collect();
                assert_eq!(out, want, "len {len}, {threads} threads");
                for (first, slot) in [(0, 1), (2, 3), (1, 7), (5, 1000)] {
                    let mut out = vec![(0, 0); len];
                    fill_slots(&mut out, threads, first, slot, |k, i| (k, i));
                    let want: Vec<(usize, usize)> =
                        (0..len).map(|j| (first + j / slot, j % slot)).collect();
                    assert_eq!(
                        out, want,
                        "len {len}, {threads} threads, {slot}-element slots"
                    );
                }
            }
        }
    }

    #[test]
    fn fill_threads_share_the_cores_among_the_pes() {
        assert_eq!(fill_threads(64, 8), 8);
        assert_eq!(fill_threads(64, 4), 16);
        assert_eq!(fill_threads(64, 1), MAX_FILL_THREADS);
        assert_eq!(fill_threads(16, 3), 5);
        assert_eq!(fill_threads(2, 4), 1);
        assert_eq!(fill_threads(0, 0), 1);
        assert_eq!(threads_for(0, 8), 1);
        assert_eq!(threads_for(MIN_FILL_CHUNK, 8), 1);
        assert_eq!(threads_for(MIN_FILL_CHUNK + 1, 8), 2);
        assert_eq!(threads_for(100 * MIN_FILL_CHUNK, 8), 8);
        assert_eq!(threads_for(100 * MIN_FILL_CHUNK, 0), 1);
    }

    /// The slots' inputs and expected outputs as Slots::new computed them before threading:
    /// slot after slot, element after element.
    fn serial_slots<T: BenchElement, V: SlotValues>(
        v: V,
        sh: &SlotShape,
        n_slots: usize,
    ) -> (Vec<T>, Vec<T>) {
        let (me, n, dtype) = (sh.me, sh.n_pes, T::BENCH_DTYPE);
        let (mut inputs, mut expected) = (Vec::new(), Vec::new());
        for k in 0..n_slots {
            let s = salt(sh.bytes, k);
            inputs.extend((0..sh.in_len).map(|i| T::from_value(v.input_value(dtype, me, i, s, n))));
            expected.extend(
                (0..sh.out_len)
                    .map(|i| T::from_value(v.expected_value(dtype, me, i, sh.count, s, n))),
            );
        }
        (inputs, expected)
    }

    /// The threaded fills of `v`'s values equal the serial ones bit for bit, on thread counts
    /// that divide the lengths and ones that do not, filled whole or from a later slot on; and
    /// the expected outputs computed as groups reach them equal them too.
    fn check_threaded_fill<T: BenchElement, V: SlotValues + std::fmt::Debug>(
        v: V,
        me: i32,
        n_pes: i32,
        count: usize,
        lens: (usize, usize),
    ) {
        let n_slots = 3;
        let sh = SlotShape {
            me,
            n_pes,
            count,
            bytes: message_bytes(lens.0, lens.1, std::mem::size_of::<T>()),
            in_len: lens.0,
            out_len: lens.1,
        };
        let (inputs, expected) = serial_slots::<T, V>(v, &sh, n_slots);
        let what = format!("{v:?} {:?} {sh:?}", T::BENCH_DTYPE);
        for threads in [1, 2, 3, 7, 16] {
            let mut got = vec![T::default(); inputs.len()];
            sh.fill_inputs(v, 0, &mut got, threads);
            assert_eq!(
                as_bytes(&got),
                as_bytes(&inputs),
                "inputs, {threads}: {what}"
            );
            let mut got = vec![T::default(); expected.len()];
            sh.fill_expected(v, 0, &mut got, threads);
            assert_eq!(
                as_bytes(&got),
                as_bytes(&expected),
                "expected, {threads}: {what}"
            );
            // From slot 1 on: the salts are the later slots'.
            let mut got = vec![T::default(); 2 * sh.in_len];
            sh.fill_inputs(v, 1, &mut got, threads);
            assert_eq!(as_bytes(&got), as_bytes(&inputs[sh.in_len..]), "{what}");
            let mut got = vec![T::default(); 2 * sh.out_len];
            sh.fill_expected(v, 1, &mut got, threads);
            assert_eq!(as_bytes(&got), as_bytes(&expected[sh.out_len..]), "{what}");
        }
        let mut e = Expected::<T>::new(sh, true, 3);
        for reach in [2, 1, 3] {
            e.reach(v, reach);
        }
        assert_eq!(e.slots, n_slots);
        for k in 0..n_slots {
            let want = &expected[k * sh.out_len..(k + 1) * sh.out_len];
            assert_eq!(as_bytes(e.slot(k)), as_bytes(want), "slot {k}: {what}");
        }
    }

    /// Both collectives' values, threaded, are the serial ones: allreduce with each reduction,
    /// every family collective, in float and integer types, on lengths of 1 element up to
    /// lengths no thread count here divides.
    #[test]
    fn threaded_slot_values_are_the_serial_ones() {
        use crate::bench::allreduce::AllreduceValues;
        use crate::bench::family::{FamilyValues, Kind};
        let ops = [
            ReduceOp::Sum,
            ReduceOp::Prod,
            ReduceOp::Min,
            ReduceOp::Max,
            ReduceOp::Avg,
        ];
        for count in [1, 5, 1001] {
            for op in ops {
                let v = AllreduceValues { op };
                check_threaded_fill::<f32, _>(v, 1, 4, count, (count, count));
                check_threaded_fill::<half::bf16, _>(v, 0, 3, count, (count, count));
                check_threaded_fill::<i64, _>(v, 2, 3, count, (count, count));
            }
            for kind in Kind::all() {
                let n = 3;
                let v = FamilyValues {
                    kind,
                    op: ReduceOp::Sum,
                    root: 1,
                };
                let lens = (kind.input_len(count, n), kind.output_len(count, n));
                check_threaded_fill::<f32, _>(v, 1, n, count, lens);
                check_threaded_fill::<half::bf16, _>(v, 2, n, count, lens);
                if !kind.reduces() {
                    check_threaded_fill::<u8, _>(v, 0, n, count, lens);
                }
            }
        }
    }

    fn small_shape() -> SlotShape {
        SlotShape {
            me: 0,
            n_pes: 2,
            count: 8,
            bytes: 32,
            in_len: 8,
            out_len: 8,
        }
    }

    /// A PE whose output is not compared computes no reference; one that is computes the
    /// slots the groups reached.
    #[test]
    fn expected_outputs_are_computed_only_where_compared() {
        let v = crate::bench::allreduce::AllreduceValues { op: ReduceOp::Sum };
        let mut none = Expected::<f32>::new(small_shape(), false, 2);
        none.reach(v, 4);
        assert!(none.outputs.is_empty() && none.slots == 0);
        let mut some = Expected::<f32>::new(small_shape(), true, 2);
        some.reach(v, 2);
        assert_eq!((some.outputs.len(), some.slots), (16, 2));
    }

    /// A slot beyond what the groups reached is never compared against a missing reference.
    #[test]
    #[should_panic(expected = "slot 2 compared before its reference was computed")]
    fn a_slot_not_reached_has_no_reference() {
        let v = crate::bench::allreduce::AllreduceValues { op: ReduceOp::Sum };
        let mut some = Expected::<f32>::new(small_shape(), true, 2);
        some.reach(v, 2);
        some.slot(2);
    }
}
