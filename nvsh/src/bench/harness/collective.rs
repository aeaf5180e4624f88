//! What a collective bench supplies to the harness ([`Collective`]), and helpers for its calls
//! on the harness's buffers.

use super::dtype::{BenchDtype, BenchElement};
use super::fill::SlotValues;
use crate::nccl_baseline::{NcclBaseline, NcclCall};
use cudarc::driver::CudaStream;
use nvshmem::Element;
use nvshmem::SymView;
use nvshmem::{Error, Result};
use nvshmem::{InBuf, OutBuf};

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

/// The error of [`Collective::call`] for a candidate the harness runs on NCCL's windows
/// ([`Collective::nccl_window`]), which never reaches it.
pub fn window_only(candidate: &str) -> Error {
    Error::Driver {
        message: format!("{candidate} runs on NCCL's windows, through the harness"),
    }
}
