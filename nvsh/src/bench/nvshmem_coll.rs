//! NVSHMEM's own host collectives on a stream, the benches' `nvshmem` candidate: the typed
//! `nvshmemx_<type>_<op>_reduce_on_stream` (allreduce) and `_reducescatter_on_stream`, and the
//! untyped `nvshmemx_broadcastmem_on_stream`, `nvshmemx_fcollectmem_on_stream` (allgather) and
//! `nvshmemx_alltoallmem_on_stream`, all over the world team. Where NVSHMEM has no such call
//! (a rooted reduce, the v forms, avg) or cannot make it here, [`family_refusal`] and
//! [`reduce_scatter_refusal`] say why, in words the report prints as the candidate's n/a.

use crate::bench::harness::{BenchDtype, BenchElement, Report};
use crate::bench::kind::Kind;
use cudarc::driver::CudaStream;
use nvshmem::sys;
use nvshmem::tools::raw_stream;
use nvshmem::tools::{parse_bool, parse_size, size_label};
use nvshmem::Collective;
use nvshmem::ReduceOp;
use nvshmem::SymView;
use nvshmem::{Error, Result};
use std::ffi::c_void;

/// Which of NVSHMEM's reductions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvshmemReduction {
    /// `nvshmemx_<type>_<op>_reduce_on_stream`: every PE gets the whole result (an allreduce).
    Reduce,
    /// `nvshmemx_<type>_<op>_reducescatter_on_stream`: PE r gets block r of the result.
    ReduceScatter,
}

/// Element types of the benches with NVSHMEM's reductions (every reducible type; u8 has none
/// here, since no reduction of ours takes it).
pub trait NvshmemElement: BenchElement {
    /// NVSHMEM's host reduction `which` on a stream for `op`: the call's name and its status;
    /// None where NVSHMEM has none (avg, u8). `n` is the output's length (`nreduce`).
    ///
    /// # Safety
    /// `dest` and `src` are symmetric addresses on every PE of `team`, of `n` elements (`src`:
    /// `n` times the team's size for a reduce-scatter), and `stream` a live stream of this PE's
    /// context.
    unsafe fn nvshmem_reduction(
        which: NvshmemReduction,
        op: ReduceOp,
        team: sys::nvshmem_team_t,
        dest: *mut Self,
        src: *const Self,
        n: usize,
        stream: sys::cudaStream_t,
    ) -> Option<(&'static str, i32)>;
}

/// [`NvshmemElement`] for a type from NVSHMEM's C type name, with NVSHMEM's pointer type (the
/// same bits as ours: half::f16 and `half`, half::bf16 and `__nv_bfloat16` are both 16-bit IEEE
/// / bfloat16 values).
macro_rules! nvshmem_element {
    ($($t:ty => $raw:ty, $name:ident;)*) => {$(
        impl NvshmemElement for $t {
            unsafe fn nvshmem_reduction(
                which: NvshmemReduction,
                op: ReduceOp,
                team: sys::nvshmem_team_t,
                dest: *mut Self,
                src: *const Self,
                n: usize,
                stream: sys::cudaStream_t,
            ) -> Option<(&'static str, i32)> {
                type Call = unsafe extern "C" fn(
                    sys::nvshmem_team_t,
                    *mut $raw,
                    *const $raw,
                    usize,
                    sys::cudaStream_t,
                ) -> i32;
                use NvshmemReduction::{Reduce, ReduceScatter};
                // NVSHMEM's call of a reduction and an op for this type, and its name.
                macro_rules! call {
                    ($op:ident, $coll:ident) => {
                        paste::paste! {(
                            stringify!([<nvshmemx_ $name _ $op _ $coll _on_stream>]),
                            sys::[<nvshmemx_ $name _ $op _ $coll _on_stream>],
                        )}
                    };
                }
                let (name, f): (&'static str, Call) = match (which, op) {
                    (_, ReduceOp::Avg) => return None,
                    (Reduce, ReduceOp::Sum) => call!(sum, reduce),
                    (Reduce, ReduceOp::Prod) => call!(prod, reduce),
                    (Reduce, ReduceOp::Min) => call!(min, reduce),
                    (Reduce, ReduceOp::Max) => call!(max, reduce),
                    (ReduceScatter, ReduceOp::Sum) => call!(sum, reducescatter),
                    (ReduceScatter, ReduceOp::Prod) => call!(prod, reducescatter),
                    (ReduceScatter, ReduceOp::Min) => call!(min, reducescatter),
                    (ReduceScatter, ReduceOp::Max) => call!(max, reducescatter),
                };
                Some((name, f(team, dest as *mut $raw, src as *const $raw, n, stream)))
            }
        }
    )*};
}

nvshmem_element!(
    f32 => f32, float;
    half::bf16 => sys::__nv_bfloat16, bfloat16;
    half::f16 => sys::half, half;
    f64 => f64, double;
    i32 => i32, int32;
    u32 => u32, uint32;
    i64 => i64, int64;
    u64 => u64, uint64;
);

impl NvshmemElement for u8 {
    unsafe fn nvshmem_reduction(
        _which: NvshmemReduction,
        _op: ReduceOp,
        _team: sys::nvshmem_team_t,
        _dest: *mut Self,
        _src: *const Self,
        _n: usize,
        _stream: sys::cudaStream_t,
    ) -> Option<(&'static str, i32)> {
        None
    }
}

/// Why NVSHMEM's collectives cannot run in a job whose PEs share GPUs (NVSHMEM's "limited
/// MPG" runs, without MPS): there NVSHMEM ends the process on any collective call, so the
/// candidate must not be called at all. None when every PE has its own GPU.
pub fn shared_gpu_refusal(shares_gpus: bool) -> Option<String> {
    shares_gpus.then(|| {
        "NVSHMEM's collectives need a GPU per PE (PEs share a GPU here; NVSHMEM would end the \
         process)"
            .to_string()
    })
}

/// The report's line on what the `nvshmem` candidate ran, from `NVSHMEM_DISABLE_NCCL`:
/// NVSHMEM 3.4 is built with NCCL and, unless told not to, hands its on-stream collectives to
/// NCCL wherever it loads `libnccl.so.2` with a GPU per PE.
pub fn nvshmem_label(disable_nccl: Option<&str>) -> String {
    match disable_nccl.and_then(parse_bool) {
        Some(true) => "nvshmem: NVSHMEM's own kernels (NVSHMEM_DISABLE_NCCL=1)".into(),
        _ => "nvshmem: NVSHMEM's collectives, which NVSHMEM hands to NCCL where it loads \
              libnccl.so.2; NVSHMEM_DISABLE_NCCL=1 times NVSHMEM's own kernels"
            .into(),
    }
}

/// Adds [`nvshmem_label`] of this process's environment to `report`'s header and JSON
/// (`nvshmem_disable_nccl`).
pub fn describe_nvshmem(report: &mut Report) {
    let value = std::env::var("NVSHMEM_DISABLE_NCCL").ok();
    report.header.push(nvshmem_label(value.as_deref()));
    report
        .json_fields
        .push(("nvshmem_disable_nccl", value.into()));
}

/// The status of an NVSHMEM call as a result; None (no such call) as the bench's refusal of
/// `--op`.
pub fn nvshmem_status(called: Option<(&'static str, i32)>, op: ReduceOp) -> Result<()> {
    match called {
        Some((_, 0)) => Ok(()),
        Some((call, status)) => Err(Error::Bootstrap { call, status }),
        None => Err(Error::InvalidEnv {
            var: "--op",
            value: op.name().into(),
            expected: "sum, prod, min or max for NVSHMEM's reductions",
        }),
    }
}

/// NVSHMEM's on-stream calls the benches time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NvshmemCall {
    Broadcast,
    Fcollect,
    Alltoall,
    ReduceScatter,
}

/// NVSHMEM's call for collective `kind`, or why it has none. NVSHMEM's API differs per
/// collective, so this is the one match over the table's collectives for it.
fn nvshmem_call(kind: Kind) -> std::result::Result<NvshmemCall, &'static str> {
    match kind.collective {
        Collective::Broadcast => Ok(NvshmemCall::Broadcast),
        Collective::Allgather => Ok(NvshmemCall::Fcollect),
        Collective::Alltoall => Ok(NvshmemCall::Alltoall),
        Collective::ReduceScatter => Ok(NvshmemCall::ReduceScatter),
        Collective::Reduce => {
            Err("NVSHMEM has no rooted reduce (its reduce leaves the result on every PE)")
        }
        Collective::Allgatherv => {
            Err("NVSHMEM has no allgatherv on a stream (fcollect takes equal counts)")
        }
        Collective::Alltoallv => {
            Err("NVSHMEM has no alltoallv on a stream (alltoall takes equal counts)")
        }
        Collective::Group => {
            Err("NVSHMEM has no grouped send/recv on a stream (its puts are one-sided)")
        }
        _ => Err("NVSHMEM has no such collective on a stream"),
    }
}

/// Why NVSHMEM has no on-stream call for collective `kind` with `op` on `dtype`, or None when
/// it has one. The same on every PE.
pub fn family_refusal(kind: Kind, op: ReduceOp, dtype: BenchDtype) -> Option<String> {
    let why = match nvshmem_call(kind) {
        Err(why) => why,
        Ok(_) if !kind.reduces() => return None,
        Ok(_) if op == ReduceOp::Avg => "NVSHMEM has no avg reduction",
        Ok(_) if !dtype.reducible() => "NVSHMEM's reductions take no u8 here",
        Ok(_) => return None,
    };
    Some(why.to_string())
}

/// NVSHMEM's default `NVSHMEM_REDUCE_SCRATCH_SIZE` (512 KiB in NVSHMEM 3.4).
pub const DEFAULT_REDUCE_SCRATCH: usize = 512 << 10;

/// The reduce scratch NVSHMEM reserves per team: `NVSHMEM_REDUCE_SCRATCH_SIZE` (`value`, read
/// as NVSHMEM reads sizes) or its default.
pub fn reduce_scratch(value: Option<&str>) -> usize {
    value.and_then(parse_size).unwrap_or(DEFAULT_REDUCE_SCRATCH)
}

/// Why NVSHMEM's reduce-scatter cannot take `input_bytes` per PE with a reduce scratch of
/// `scratch` bytes, or None when it can. NVSHMEM 3.4's one-shot reduce-scatter puts every PE's
/// block into its peers' scratch in one go and only asserts on the device (a trap, or with
/// asserts compiled out, writes past the scratch) where the input exceeds half of it; its
/// NVLS form has no such limit, but whether it runs is NVSHMEM's choice, so larger inputs are
/// not called.
pub fn reduce_scatter_refusal(input_bytes: usize, scratch: usize) -> Option<String> {
    (input_bytes > scratch / 2).then(|| {
        format!(
            "NVSHMEM's reducescatter takes at most half its reduce scratch, {} of input per PE \
             (NVSHMEM_REDUCE_SCRATCH_SIZE {}); raise NVSHMEM_REDUCE_SCRATCH_SIZE for more",
            size_label(scratch / 2),
            size_label(scratch)
        )
    })
}

/// NVSHMEM's state for the family benches: the world team, its size and the reduce scratch.
pub struct NvshmemFamily {
    pub team: sys::nvshmem_team_t,
    pub n_pes: i32,
    /// [`reduce_scratch`] of this process's environment (every PE's, under one launcher).
    pub reduce_scratch: usize,
}

impl NvshmemFamily {
    /// One call of NVSHMEM's collective `kind` from `input` into `output` on `stream` (root
    /// `root` for broadcast), with the family bench's buffers: `input` and `output` are views
    /// at the same offsets of symmetric buffers, so symmetric on every PE. The caller has
    /// refused what [`family_refusal`] refuses.
    pub fn call<T: NvshmemElement>(
        &self,
        kind: Kind,
        op: ReduceOp,
        root: i32,
        input: SymView<'_, T>,
        output: SymView<'_, T>,
        stream: &CudaStream,
    ) -> Result<()> {
        let elem = std::mem::size_of::<T>();
        let (team, n) = (self.team, self.n_pes.max(1) as usize);
        let (dest, src) = (output.as_device_ptr(), input.as_device_ptr() as *const T);
        let (dest_raw, src_raw) = (dest as *mut c_void, src as *const c_void);
        let stream = raw_stream(stream);
        // SAFETY (every call below): symmetric views of the lengths each call reads and writes
        // (the bench sizes them by `Kind`), the world team, the bench's live stream.
        let refused = |why: String| Error::Io {
            what: "nvshmem".into(),
            message: why,
        };
        let called = match nvshmem_call(kind) {
            // nelem: bytes of the root's buffer.
            Ok(NvshmemCall::Broadcast) => unsafe {
                let bytes = input.len() * elem;
                let status = sys::nvshmemx_broadcastmem_on_stream(
                    team, dest_raw, src_raw, bytes, root, stream,
                );
                Some(("nvshmemx_broadcastmem_on_stream", status))
            },
            // nelem: bytes of each PE's block; dest holds the blocks in PE order.
            Ok(NvshmemCall::Fcollect) => unsafe {
                let bytes = input.len() * elem;
                let status =
                    sys::nvshmemx_fcollectmem_on_stream(team, dest_raw, src_raw, bytes, stream);
                Some(("nvshmemx_fcollectmem_on_stream", status))
            },
            // nelem: bytes of each block; block s of PE r's dest is block r of PE s's source.
            Ok(NvshmemCall::Alltoall) => unsafe {
                let bytes = input.len() / n * elem;
                let status =
                    sys::nvshmemx_alltoallmem_on_stream(team, dest_raw, src_raw, bytes, stream);
                Some(("nvshmemx_alltoallmem_on_stream", status))
            },
            // nreduce: elements of each PE's output; the source holds n blocks of it.
            Ok(NvshmemCall::ReduceScatter) => {
                if let Some(why) = reduce_scatter_refusal(input.len() * elem, self.reduce_scratch) {
                    return Err(refused(why));
                }
                let which = NvshmemReduction::ReduceScatter;
                unsafe { T::nvshmem_reduction(which, op, team, dest, src, output.len(), stream) }
            }
            Err(why) => return Err(refused(why.to_string())),
        };
        nvshmem_status(called, op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvshmem_has_the_dense_collectives_and_says_why_not_the_others() {
        use Collective as C;
        for kind in [C::Broadcast, C::Allgather, C::Alltoall].map(Kind::of) {
            for &dtype in BenchDtype::taken_by(false) {
                assert_eq!(family_refusal(kind, ReduceOp::Avg, dtype), None, "{kind:?}");
            }
        }
        for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max] {
            for &dtype in BenchDtype::taken_by(true) {
                assert_eq!(family_refusal(Kind::of(C::ReduceScatter), op, dtype), None);
            }
        }
        let why = |c, op| family_refusal(Kind::of(c), op, BenchDtype::F32).unwrap();
        assert_eq!(
            why(C::ReduceScatter, ReduceOp::Avg),
            "NVSHMEM has no avg reduction"
        );
        assert!(why(C::Reduce, ReduceOp::Sum).contains("no rooted reduce"));
        assert!(why(C::Allgatherv, ReduceOp::Sum).contains("no allgatherv"));
        assert!(why(C::Alltoallv, ReduceOp::Sum).contains("no alltoallv"));
        let rs = Kind::of(C::ReduceScatter);
        assert!(family_refusal(rs, ReduceOp::Sum, BenchDtype::U8).is_some());
        assert!(why(C::Group, ReduceOp::Sum).contains("no grouped send/recv"));
        assert!(shared_gpu_refusal(true).unwrap().contains("a GPU per PE"));
        assert!(nvshmem_label(Some("1")).contains("own kernels (NVSHMEM_DISABLE_NCCL=1)"));
        for unset in [None, Some("0"), Some("junk")] {
            assert!(nvshmem_label(unset).contains("hands to NCCL"), "{unset:?}");
        }
        assert_eq!(shared_gpu_refusal(false), None);
    }

    #[test]
    fn reduce_scatter_stays_within_half_the_scratch() {
        assert_eq!(reduce_scratch(None), 512 << 10);
        assert_eq!(reduce_scratch(Some("2m")), 2 << 20);
        assert_eq!(reduce_scratch(Some("1048576")), 1 << 20);
        // Not a size: NVSHMEM refuses it at init; the default stands here.
        assert_eq!(reduce_scratch(Some("lots")), 512 << 10);
        let scratch = reduce_scratch(None);
        assert_eq!(reduce_scatter_refusal(256 << 10, scratch), None);
        let why = reduce_scatter_refusal((256 << 10) + 16, scratch).unwrap();
        assert!(
            why.contains("at most half its reduce scratch, 256K of input per PE")
                && why.contains("NVSHMEM_REDUCE_SCRATCH_SIZE 512K"),
            "{why}"
        );
        assert_eq!(reduce_scatter_refusal(1 << 20, 2 << 20), None);
    }

    /// Avg and u8 have no NVSHMEM reduction; the call is not made and the status says so.
    #[test]
    fn missing_reductions_are_refused_without_a_call() {
        for which in [NvshmemReduction::Reduce, NvshmemReduction::ReduceScatter] {
            // SAFETY: no call is made for avg or u8 (they return before touching anything).
            let (f, b) = unsafe {
                (
                    f32::nvshmem_reduction(which, ReduceOp::Avg, 0, null(), null(), 1, null()),
                    u8::nvshmem_reduction(which, ReduceOp::Sum, 0, null(), null(), 1, null()),
                )
            };
            assert_eq!((f, b), (None, None));
        }
        let err = nvshmem_status(None, ReduceOp::Avg).unwrap_err().to_string();
        assert!(err.contains("--op") && err.contains("avg"), "{err}");
        assert!(nvshmem_status(Some(("x", 0)), ReduceOp::Sum).is_ok());
        let err = nvshmem_status(Some(("nvshmemx_x", 7)), ReduceOp::Sum).unwrap_err();
        assert_eq!(err.to_string(), "NVSHMEM nvshmemx_x failed with status 7");
    }

    fn null<T>() -> *mut T {
        std::ptr::null_mut()
    }
}
