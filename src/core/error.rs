//! The runtime's error type. Every message says what went wrong and what to do about it.

/// Errors returned by the runtime. Nothing in this crate aborts the process. Non-exhaustive:
/// a later version may add variants, so a `match` needs a `_` arm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The CUDA driver (libcuda.so.1) is missing or too old for the CUDA runtime in this binary.
    #[error(
        "no CUDA driver found ({detail}); install the NVIDIA driver (CUDA 12 or 13) or run on a \
         GPU node (see INSTALL.md, troubleshooting)"
    )]
    NoCudaDriver {
        /// Why no usable driver was found (not loadable, or the CUDA version it supports).
        detail: String,
    },

    /// A driver is present but no CUDA device is visible to this process.
    #[error("no CUDA device found ({detail}); check nvidia-smi and CUDA_VISIBLE_DEVICES")]
    NoCudaDevice {
        /// What the CUDA probe reported.
        detail: String,
    },

    /// A CUDA runtime call failed.
    #[error("CUDA call {call} failed: {name} ({message})")]
    Cuda {
        /// The CUDA runtime call (or kernel launch) that failed.
        call: &'static str,
        /// Its `cudaError_t` code.
        code: i32,
        /// The code's name, as `cudaGetErrorName` gives it.
        name: String,
        /// The code's description, as `cudaGetErrorString` gives it.
        message: String,
    },

    /// NVSHMEM is already initialised in this process; use the existing handle.
    #[error("NVSHMEM is already initialised in this process; use the existing Nvshmem handle")]
    AlreadyInitialized,

    /// nvshmemi_init_thread returned a non-zero status.
    #[error(
        "NVSHMEM initialisation failed (status {status}); run with NVSHMEM_DEBUG=INFO for \
         NVSHMEM's own reason and see INSTALL.md, troubleshooting (on one node without \
         InfiniBand set NVSHMEM_REMOTE_TRANSPORT=none)"
    )]
    InitFailed {
        /// The status NVSHMEM's init returned.
        status: i32,
    },

    /// A device kernel saw other NVSHMEM state than the host (wrong device link or version).
    #[error(
        "the device saw (pe, n_pes, value) = {seen:?}, the host expected {expected:?}: NVSHMEM's \
         device state is not initialised for this binary (host and device library versions \
         differ, or device code was linked in a second module; see INSTALL.md)"
    )]
    DeviceStateMismatch {
        /// (PE, PE count, value written) as the host expected them.
        expected: (i32, i32, i32),
        /// (PE, PE count, value written) as the device kernel saw them.
        seen: (i32, i32, i32),
    },

    /// A CUDA driver API call (through cudarc) failed; the driver's error is the source.
    #[error("CUDA driver call failed: {source}")]
    DriverCall {
        /// The driver's error.
        #[from]
        source: cudarc::driver::DriverError,
    },

    /// A CUDA-level failure known only as text (no driver error code to keep).
    #[error("CUDA driver call failed: {message}")]
    Driver {
        /// What failed, as text.
        message: String,
    },

    /// NVSHMEM came up with a lower thread level than the runtime asked for.
    #[error(
        "NVSHMEM provided thread level {provided}, the runtime needs {requested} (SERIALIZED): \
         this NVSHMEM build or its bootstrap does not support it; see INSTALL.md"
    )]
    ThreadLevel {
        /// The thread level the runtime asked for (SERIALIZED).
        requested: i32,
        /// The thread level NVSHMEM provided.
        provided: i32,
    },

    /// A PE number outside the job (or team).
    #[error("PE {pe} is out of range: this job has {n_pes} PE(s), numbered 0..{n_pes}")]
    InvalidPe {
        /// The PE number passed.
        pe: i32,
        /// The number of PEs in the job (or team).
        n_pes: i32,
    },

    /// A range that does not fit in the buffer.
    #[error(
        "range {start}..{end} is outside a symmetric buffer of {len} {elem} elements; \
         take a view that fits (buffer.view(a..b))"
    )]
    OutOfBounds {
        /// First element of the requested range.
        start: usize,
        /// One past the last element of the requested range.
        end: usize,
        /// The buffer's length in elements.
        len: usize,
        /// The element type's name.
        elem: &'static str,
    },

    /// Source and destination of a transfer differ in length.
    #[error(
        "{what}: destination holds {dest} elements but source holds {src}; \
         make both views the same length"
    )]
    LengthMismatch {
        /// The call or operation that failed, as the user named it.
        what: &'static str,
        /// The destination's length in elements.
        dest: usize,
        /// The source's length in elements.
        src: usize,
    },

    /// A host slice of the wrong length for a copy.
    #[error("{what}: the host slice has {host} elements, the symmetric view {device}")]
    HostLengthMismatch {
        /// The copy that failed (`copy_from_host` or `copy_to_host`).
        what: &'static str,
        /// The host slice's length in elements.
        host: usize,
        /// The symmetric view's length in elements.
        device: usize,
    },

    /// Symmetric allocations of zero elements are refused (nvshmem_malloc is collective).
    #[error("a symmetric allocation of 0 elements was requested; ask for at least 1")]
    ZeroLength,

    /// The symmetric heap could not satisfy an allocation.
    #[error(
        "symmetric allocation of {bytes} bytes failed ({free} bytes of device memory free): the \
         symmetric heap is exhausted or the PEs asked for different sizes; free buffers, raise \
         NVSHMEM_SYMMETRIC_SIZE (default 1G, e.g. NVSHMEM_SYMMETRIC_SIZE=8G) and allocate the \
         same sizes in the same order on every PE"
    )]
    AllocFailed {
        /// The size asked for, in bytes.
        bytes: usize,
        /// Device memory free at the time, in bytes (0 where not measured).
        free: usize,
    },

    /// A PE refused a symmetric allocation (too little device memory), so none made it.
    #[error(
        "symmetric allocation of {bytes} bytes refused on every PE: PE {pe} has {free} bytes of \
         device memory free and the heap could not grow to it; free buffers or ask for less \
         (NVSHMEM_SYMMETRIC_SIZE sets the initial heap, INSTALL.md)"
    )]
    AllocRefused {
        /// The size asked for, in bytes.
        bytes: usize,
        /// The PE that refused.
        pe: i32,
        /// Device memory free on that PE, in bytes.
        free: usize,
    },

    /// A PE refused a collective call (it could not take part), so no PE made it.
    #[error("{what} skipped on every PE: PE {pe} could not take part (its log says why)")]
    CollectiveRefused {
        /// The call or operation that failed, as the user named it.
        what: &'static str,
        /// The PE that refused.
        pe: i32,
    },

    /// The PEs were not in the same collective call.
    #[error(
        "{what}: PE {peer} was at another collective call than this PE (its vote is from another \
         round): the PEs called allocations, frees and barriers in different orders. End this \
         process and restart the job"
    )]
    CollectiveOutOfStep {
        /// The call or operation that failed, as the user named it.
        what: &'static str,
        /// The PE whose vote belongs to another call.
        peer: i32,
    },

    /// NVSHMEM was initialised and finalised already in this process.
    #[error(
        "NVSHMEM comes up once per process and this process's runtime has ended{}: keep one \
         Nvshmem handle for the whole run (or start a new process)",
        if *abandoned { " (its finalize was skipped after a peer failure)" } else { "" }
    )]
    InitAfterFinalize {
        /// True when the earlier finalize was skipped after a peer failure.
        abandoned: bool,
    },

    /// The GPU is of an architecture the binary carries no device code for.
    #[error(
        "GPU {device} ({name}) is sm_{major}{minor}, but this binary carries device code for \
         {built} only (code for sm_XY runs on GPUs of major X, minor Y or more): rebuild with \
         NVSHMEM_RS_CUDA_ARCHS naming {major}{minor} (INSTALL.md) or pick another GPU with \
         CUDA_VISIBLE_DEVICES"
    )]
    UnsupportedArchitecture {
        /// The CUDA device number.
        device: i32,
        /// The GPU's name.
        name: String,
        /// Compute capability, major.
        major: i32,
        /// Compute capability, minor.
        minor: i32,
        /// The architectures the binary carries code for ("sm_80, sm_90").
        built: String,
    },

    /// An alignment that is not a power of two.
    #[error("alignment {align} is not a power of two")]
    InvalidAlignment {
        /// The alignment passed, in bytes.
        align: usize,
    },

    /// A wait did not finish in time.
    #[error("timed out after {waited_ms} ms waiting for {what}; is the peer PE alive?")]
    Timeout {
        /// What was waited for, and what to check.
        what: String,
        /// How long it waited, in milliseconds.
        waited_ms: u128,
    },

    /// The chosen bootstrap cannot run in this build or environment.
    #[error("bootstrap unavailable: {reason}")]
    BootstrapUnavailable {
        /// Why it cannot run.
        reason: String,
    },

    /// NVSHMEM came up with another PE count than the launcher announced.
    #[error(
        "NVSHMEM reports {got} PE(s) but the launcher started {expected}: bootstrap mismatch \
         (see INSTALL.md, 'every PE reports 1 PE')"
    )]
    PeCountMismatch {
        /// The PE count the launcher announced.
        expected: i32,
        /// The PE count NVSHMEM reports.
        got: i32,
    },

    /// A team could not be created.
    #[error("team split failed (status {status}): {why}")]
    TeamSplit {
        /// The status NVSHMEM returned (-1 where the runtime refused the arguments itself).
        status: i32,
        /// Why it failed, and what to pass instead.
        why: String,
    },

    /// A team operation was called on a PE that is not a member of the team.
    #[error(
        "{what}: this PE is not a member of the team it was created for; call it only on members"
    )]
    NotInTeam {
        /// The call or operation that failed, as the user named it.
        what: &'static str,
    },

    /// MPI failed.
    #[error("MPI: {message}")]
    Mpi {
        /// What MPI reported.
        message: String,
    },

    /// A file could not be read or written.
    #[error("{what}: {message}")]
    Io {
        /// The file or action concerned.
        what: String,
        /// The underlying I/O (or format) error, and what to do.
        message: String,
    },

    /// An environment variable the runtime reads has a value it cannot use.
    #[error("environment variable {var}={value:?} is not valid: expected {expected}")]
    InvalidEnv {
        /// The variable's name.
        var: &'static str,
        /// Its value.
        value: String,
        /// What values it takes.
        expected: &'static str,
    },

    /// A name (an algorithm, a method) this runtime does not know.
    #[error("no {what} named {name:?}: expected {expected}")]
    UnknownName {
        /// The kind of thing named ("family protocol", ...).
        what: &'static str,
        /// The name passed.
        name: String,
        /// The names that are known.
        expected: &'static str,
    },

    /// A channel call with arguments it cannot take (src/pipeline/channel.rs).
    #[error("channel: {what}; {hint}")]
    Channel {
        /// What was wrong with the call.
        what: String,
        /// What to pass instead.
        hint: &'static str,
    },

    /// A channel message had another length than the receive asked for (checked on the GPU).
    #[error(
        "channel: message {seq} from PE {peer} holds {sent} elements but the receive on PE {pe} \
         asked for {expected}; it was dropped, not copied: send and receive the same lengths in \
         the same order"
    )]
    MessageLength {
        /// This (receiving) PE.
        pe: i32,
        /// The sending PE.
        peer: i32,
        /// The message's sequence number on the channel.
        seq: u64,
        /// Elements the message holds.
        sent: u64,
        /// Elements the receive asked for.
        expected: u64,
    },

    /// An earlier wait timed out: a peer is dead or out of step, and this call would wait for it.
    #[error(
        "{what} refused: the runtime gave up on its peers after an earlier failure ({cause}); \
         collective calls, symmetric frees and finalize are skipped from now on. End this \
         process and restart the job"
    )]
    PeerFailed {
        /// The call that was refused.
        what: &'static str,
        /// The earlier failure, as its error text.
        cause: String,
    },

    /// A size computed from the caller's arguments does not fit in memory addresses.
    #[error("{what}: {detail} bytes is more than this machine can address; ask for less")]
    SizeOverflow {
        /// The call or operation that failed, as the user named it.
        what: &'static str,
        /// The size in bytes (or the product that overflowed).
        detail: String,
    },

    /// A collective call over zero elements.
    #[error("{what} of 0 elements: pass at least one element (every member the same count)")]
    EmptyCollective {
        /// The collective called.
        what: &'static str,
    },

    /// A collective's buffers do not have the lengths its shape needs (per-rank blocks).
    #[error("{what}: {detail}")]
    CollectiveShape {
        /// The collective called.
        what: &'static str,
        /// Which lengths are wrong and what they must be.
        detail: String,
    },

    /// A root outside the team.
    #[error("{what}: root {root} is not a rank of this team (ranks 0..{n_pes}); pass a team rank")]
    InvalidRoot {
        /// The collective called.
        what: &'static str,
        /// The root passed.
        root: i32,
        /// The number of ranks in the team.
        n_pes: i32,
    },

    /// Input and output overlap without being the same range.
    #[error(
        "{what}: the output {output:#x?} overlaps the input {input:#x?} without being the same \
         range; pass the same view for in place, or disjoint buffers"
    )]
    Overlap {
        /// The collective called.
        what: &'static str,
        /// The input's byte addresses, (start, end) with end exclusive.
        input: (usize, usize),
        /// The output's byte addresses, (start, end) with end exclusive.
        output: (usize, usize),
    },

    /// A collective's buffer that is not device memory of this PE's GPU.
    #[error(
        "{what}: the {which} ({bytes} bytes at {addr:#x}) is not device memory of this PE's GPU \
         {device}: {detail}; pass a symmetric view, or memory allocated on GPU {device} \
         (cudarc, cudaMalloc, cuMemCreate) holding every element"
    )]
    NotDeviceMemory {
        /// The collective called.
        what: &'static str,
        /// Which buffer ("input" or "output").
        which: &'static str,
        /// The buffer's device address.
        addr: usize,
        /// The buffer's size in bytes.
        bytes: usize,
        /// This PE's CUDA device number.
        device: i32,
        /// What the driver said about the memory.
        detail: String,
    },

    /// The staging area of a workspace is smaller than a call with the caller's own buffers
    /// needs, and the call cannot grow it (its sizes differ between members).
    #[error(
        "{what}: your own (non-symmetric) buffers are staged through {needs} bytes of the \
         workspace's symmetric staging area, which holds {has}; {why}. Call \
         reserve_staging({needs}) (or more: the largest call's need) on every member, at the \
         same point, before such calls, or pass symmetric buffers"
    )]
    StagingTooSmall {
        /// The collective called.
        what: &'static str,
        /// Staging the call needs, in bytes.
        needs: usize,
        /// Staging the workspace holds, in bytes.
        has: usize,
        /// Why the call cannot grow the area.
        why: &'static str,
    },

    /// A call with the caller's own buffers needs a larger staging area during graph capture,
    /// where nothing may be allocated.
    #[error(
        "{what}: your own (non-symmetric) buffers need {needs} bytes of staging, the workspace \
         holds {has}, and it cannot grow while the stream is captured into a graph (allocation \
         synchronises); make one call of this size before the capture, or call \
         reserve_staging({needs}) on every member first"
    )]
    StagingDuringCapture {
        /// The collective called.
        what: &'static str,
        /// Staging the call needs, in bytes.
        needs: usize,
        /// Staging the workspace holds, in bytes.
        has: usize,
    },

    /// Memory cannot be registered into the symmetric heap (`Nvshmem::register_symmetric`),
    /// checked on every PE before NVSHMEM is called, so no PE registered anything.
    #[error(
        "{what}: PE {pe} cannot register its memory as symmetric: {why}. Nothing was \
         registered on any PE. Only memory from Nvshmem::alloc_registrable (CUDA VMM with \
         NVSHMEM's allocation properties) can be registered; cudaMalloc, cuMemAllocAsync and \
         cudarc memory cannot: pass such buffers to the collectives directly (InBuf / OutBuf), \
         which stages them through the workspace"
    )]
    NotRegistrable {
        /// The call that was refused.
        what: &'static str,
        /// The PE whose memory cannot be registered.
        pe: i32,
        /// Why, as a code every PE can share.
        reason: crate::core::unregistrable::Unregistrable,
        /// Why, as text.
        why: String,
    },

    /// NVSHMEM failed to register memory that passed every check. NVSHMEM 3.4.5 tears its
    /// symmetric heap down when that happens, so the runtime cannot go on.
    #[error(
        "nvshmemx_buffer_register_symmetric failed for {bytes} bytes after every check passed; \
         NVSHMEM dismantles its symmetric heap on this failure, so this runtime refuses every \
         collective call from now on: end the process (NVSHMEM_DEBUG=INFO shows NVSHMEM's \
         reason)"
    )]
    RegistrationFailed {
        /// The size of the registration, in bytes.
        bytes: usize,
    },

    /// Two PEs called the same collective with different arguments (checked mode).
    #[error(
        "{what}: PE {pe} called it with {mine} but PE {peer} with {theirs} (call {call} on this \
         workspace); every member must pass the same count, type, op and algorithm, in the same \
         order. Nothing was reduced; the workspace is broken now"
    )]
    CollectiveMismatch {
        /// The collective called.
        what: &'static str,
        /// This PE.
        pe: i32,
        /// The PE whose arguments differ.
        peer: i32,
        /// The call's sequence number on this workspace.
        call: u64,
        /// The differing argument as this PE passed it.
        mine: String,
        /// The differing argument as the peer passed it.
        theirs: String,
    },

    /// The two ends of a transfer of an exchange (alltoallv, allgatherv, grouped send/recv)
    /// disagree on its size, type or number, or device counts reach past a buffer.
    #[error(
        "{what} (call {call} on PE {pe}): {detail}. Each send needs a receive of the same size \
         and type on its peer, in the same order. The workspace is broken now (later calls move \
         nothing)"
    )]
    TransferMismatch {
        /// The exchange called.
        what: &'static str,
        /// This PE.
        pe: i32,
        /// The PE at the other end of the transfer.
        peer: i32,
        /// The call's number on this workspace (the first is 1).
        call: u64,
        /// What the two ends disagree on.
        detail: String,
    },

    /// The NVSHMEM host library loaded at run time is not the version this binary was built
    /// with.
    #[error(
        "NVSHMEM host library {loaded} was loaded but this binary was built against {compiled}; \
         make LD_LIBRARY_PATH find libnvshmem_host.so.3 of version {compiled} (or rebuild \
         against {loaded}; see INSTALL.md)"
    )]
    LibraryVersion {
        /// The NVSHMEM version the binary was built with.
        compiled: String,
        /// The version of the host library loaded.
        loaded: String,
    },

    /// The GPU is older than the runtime supports.
    #[error(
        "GPU {device} ({name}) has compute capability {major}.{minor}; this runtime needs 8.0 or \
         newer (A100, H100, H200): run on such a GPU or pick one with CUDA_VISIBLE_DEVICES"
    )]
    ComputeCapability {
        /// The CUDA device number.
        device: i32,
        /// The GPU's name.
        name: String,
        /// Compute capability, major.
        major: i32,
        /// Compute capability, minor.
        minor: i32,
    },

    /// The unique-ID bootstrap could not be prepared.
    #[error("NVSHMEM {call} failed with status {status}")]
    Bootstrap {
        /// The NVSHMEM call that failed.
        call: &'static str,
        /// The status it returned.
        status: i32,
    },

    /// A sparse output set too small for what the call always writes (top-k: min(k, n) pairs).
    #[error(
        "{what}: the output set holds {capacity} pairs but the call writes {needed}; create it \
         with SparseSet::new(stream, {needed}) or more"
    )]
    SparseCapacity {
        /// The call or operation that failed, as the user named it.
        what: &'static str,
        /// Pairs the call writes.
        needed: usize,
        /// Pairs the output set holds.
        capacity: usize,
    },

    /// A gradient longer than the index type of the sparse set can number.
    #[error(
        "{what}: a gradient of {len} elements needs indexes up to {last}, more than {index} holds \
         (at most {max}); use i64 indexes (SparseSet<T, i64>)"
    )]
    IndexTooNarrow {
        /// The call or operation that failed, as the user named it.
        what: &'static str,
        /// The gradient's length in elements.
        len: usize,
        /// The largest index needed (`len - 1`).
        last: usize,
        /// The index type's name.
        index: &'static str,
        /// The largest index that type holds.
        max: u64,
    },

    /// A sparse workspace created for smaller inputs than a call passes.
    #[error(
        "{what}: the input holds {len} elements but the workspace was created for at most \
         {max_len}; create it for the largest input ({create})"
    )]
    WorkspaceTooSmall {
        /// The call or operation that failed, as the user named it.
        what: &'static str,
        /// The input's length in elements.
        len: usize,
        /// The largest input the workspace was created for, in elements.
        max_len: usize,
        /// The call that creates a workspace of a given size.
        create: &'static str,
    },

    /// A threshold that selects nothing meaningful.
    #[error(
        "{what}: the threshold is NaN; pass a number (elements with |g| >= threshold are \
         selected, so 0 or less selects every element)"
    )]
    InvalidThreshold {
        /// The call or operation that failed, as the user named it.
        what: &'static str,
    },

    /// A sparse allreduce asked for something it cannot do (a density outside (0, 1], an
    /// unknown method, an empty gradient, a call on a PE outside its team); `detail` says what
    /// to pass instead.
    #[error("{what}: {detail}")]
    SparseConfig {
        /// The call or operation that failed, as the user named it.
        what: &'static str,
        /// What is wrong and what to pass instead.
        detail: String,
    },

    /// A residual to load whose length is not the sparse allreduce's gradient length (saved by
    /// one made for other gradients).
    #[error(
        "{what}: the residual given holds {got} elements but the gradients hold {len}; load a \
         residual saved by a SparseAllreduce of the same length"
    )]
    ResidualLength {
        /// The call or operation that failed, as the user named it.
        what: &'static str,
        /// The gradients' length in elements.
        len: usize,
        /// The residual's length in elements.
        got: usize,
    },

    /// A residual to load into a sparse allreduce without error feedback, which keeps none.
    #[error(
        "{what}: it was created without error feedback and keeps no residual; create it with \
         error_feedback: true to load one, or drop the residual"
    )]
    NoErrorFeedback {
        /// The call or operation that failed, as the user named it.
        what: &'static str,
    },
}

/// Result with the runtime's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_errors_are_kept_as_the_source() {
        use cudarc::driver::{sys::CUresult, DriverError};
        let err: Error = DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY).into();
        let source = std::error::Error::source(&err).expect("the driver error as source");
        let driver = source.downcast_ref::<DriverError>().expect("a DriverError");
        assert_eq!(driver.0, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    }
}
