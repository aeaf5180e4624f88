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
    NoCudaDriver { detail: String },

    /// A driver is present but no CUDA device is visible to this process.
    #[error("no CUDA device found ({detail}); check nvidia-smi and CUDA_VISIBLE_DEVICES")]
    NoCudaDevice { detail: String },

    /// A CUDA runtime call failed.
    #[error("CUDA call {call} failed: {name} ({message})")]
    Cuda {
        call: &'static str,
        code: i32,
        name: String,
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
    InitFailed { status: i32 },

    /// A device kernel saw other NVSHMEM state than the host (wrong device link or version).
    #[error(
        "the device saw (pe, n_pes, value) = {seen:?}, the host expected {expected:?}: NVSHMEM's \
         device state is not initialised for this binary (host and device library versions \
         differ, or device code was linked in a second module; see INSTALL.md)"
    )]
    DeviceStateMismatch {
        expected: (i32, i32, i32),
        seen: (i32, i32, i32),
    },

    /// A CUDA driver API call (through cudarc) failed; the driver's error is the source.
    #[error("CUDA driver call failed: {source}")]
    DriverCall {
        #[from]
        source: cudarc::driver::DriverError,
    },

    /// A CUDA-level failure known only as text (no driver error code to keep).
    #[error("CUDA driver call failed: {message}")]
    Driver { message: String },

    /// NVSHMEM came up with a lower thread level than the runtime asked for.
    #[error(
        "NVSHMEM provided thread level {provided}, the runtime needs {requested} (SERIALIZED): \
         this NVSHMEM build or its bootstrap does not support it; see INSTALL.md"
    )]
    ThreadLevel { requested: i32, provided: i32 },

    /// A PE number outside the job (or team).
    #[error("PE {pe} is out of range: this job has {n_pes} PE(s), numbered 0..{n_pes}")]
    InvalidPe { pe: i32, n_pes: i32 },

    /// A range that does not fit in the buffer.
    #[error(
        "range {start}..{end} is outside a symmetric buffer of {len} {elem} elements; \
         take a view that fits (buffer.view(a..b))"
    )]
    OutOfBounds {
        start: usize,
        end: usize,
        len: usize,
        elem: &'static str,
    },

    /// Source and destination of a transfer differ in length.
    #[error(
        "{what}: destination holds {dest} elements but source holds {src}; \
         make both views the same length"
    )]
    LengthMismatch {
        what: &'static str,
        dest: usize,
        src: usize,
    },

    /// A host slice of the wrong length for a copy.
    #[error("{what}: the host slice has {host} elements, the symmetric view {device}")]
    HostLengthMismatch {
        what: &'static str,
        host: usize,
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
    AllocFailed { bytes: usize, free: usize },

    /// A PE refused a symmetric allocation (too little device memory), so none made it.
    #[error(
        "symmetric allocation of {bytes} bytes refused on every PE: PE {pe} has {free} bytes of \
         device memory free and the heap could not grow to it; free buffers or ask for less \
         (NVSHMEM_SYMMETRIC_SIZE sets the initial heap, INSTALL.md)"
    )]
    AllocRefused { bytes: usize, pe: i32, free: usize },

    /// A PE refused a collective call (it could not take part), so no PE made it.
    #[error("{what} skipped on every PE: PE {pe} could not take part (its log says why)")]
    CollectiveRefused { what: &'static str, pe: i32 },

    /// The PEs were not in the same collective call.
    #[error(
        "{what}: PE {peer} was at another collective call than this PE (its vote is from another \
         round): the PEs called allocations, frees and barriers in different orders. End this \
         process and restart the job"
    )]
    CollectiveOutOfStep { what: &'static str, peer: i32 },

    /// NVSHMEM was initialised and finalised already in this process.
    #[error(
        "NVSHMEM comes up once per process and this process's runtime has ended{}: keep one \
         Nvshmem handle for the whole run (or start a new process)",
        if *abandoned { " (its finalize was skipped after a peer failure)" } else { "" }
    )]
    InitAfterFinalize { abandoned: bool },

    /// The GPU is of an architecture the binary carries no device code for.
    #[error(
        "GPU {device} ({name}) is sm_{major}{minor}, but this binary carries device code for \
         {built} only (code for sm_XY runs on GPUs of major X, minor Y or more): rebuild with \
         NVSHMEM_RS_CUDA_ARCHS naming {major}{minor} (INSTALL.md) or pick another GPU with \
         CUDA_VISIBLE_DEVICES"
    )]
    UnsupportedArchitecture {
        device: i32,
        name: String,
        major: i32,
        minor: i32,
        built: String,
    },

    /// An alignment that is not a power of two.
    #[error("alignment {align} is not a power of two")]
    InvalidAlignment { align: usize },

    /// A wait did not finish in time.
    #[error("timed out after {waited_ms} ms waiting for {what}; is the peer PE alive?")]
    Timeout { what: String, waited_ms: u128 },

    /// The chosen bootstrap cannot run in this build or environment.
    #[error("bootstrap unavailable: {reason}")]
    BootstrapUnavailable { reason: String },

    /// NVSHMEM came up with another PE count than the launcher announced.
    #[error(
        "NVSHMEM reports {got} PE(s) but the launcher started {expected}: bootstrap mismatch \
         (see INSTALL.md, 'every PE reports 1 PE')"
    )]
    PeCountMismatch { expected: i32, got: i32 },

    /// A team could not be created.
    #[error("team split failed (status {status}): {why}")]
    TeamSplit { status: i32, why: String },

    /// A team operation was called on a PE that is not a member of the team.
    #[error(
        "{what}: this PE is not a member of the team it was created for; call it only on members"
    )]
    NotInTeam { what: &'static str },

    /// MPI failed.
    #[error("MPI: {message}")]
    Mpi { message: String },

    /// A file could not be read or written.
    #[error("{what}: {message}")]
    Io { what: String, message: String },

    /// An environment variable the runtime reads has a value it cannot use.
    #[error("environment variable {var}={value:?} is not valid: expected {expected}")]
    InvalidEnv {
        var: &'static str,
        value: String,
        expected: &'static str,
    },

    /// A name (an algorithm, a method) this runtime does not know.
    #[error("no {what} named {name:?}: expected {expected}")]
    UnknownName {
        what: &'static str,
        name: String,
        expected: &'static str,
    },

    /// A channel call with arguments it cannot take (src/pipeline/channel.rs).
    #[error("channel: {what}; {hint}")]
    Channel { what: String, hint: &'static str },

    /// A channel message had another length than the receive asked for (checked on the GPU).
    #[error(
        "channel: message {seq} from PE {peer} holds {sent} elements but the receive on PE {pe} \
         asked for {expected}; it was dropped, not copied: send and receive the same lengths in \
         the same order"
    )]
    MessageLength {
        pe: i32,
        peer: i32,
        seq: u64,
        sent: u64,
        expected: u64,
    },

    /// An earlier wait timed out: a peer is dead or out of step, and this call would wait for it.
    #[error(
        "{what} refused: the runtime gave up on its peers after an earlier failure ({cause}); \
         collective calls, symmetric frees and finalize are skipped from now on. End this \
         process and restart the job"
    )]
    PeerFailed { what: &'static str, cause: String },

    /// A size computed from the caller's arguments does not fit in memory addresses.
    #[error("{what}: {detail} bytes is more than this machine can address; ask for less")]
    SizeOverflow { what: &'static str, detail: String },

    /// A collective call over zero elements.
    #[error("{what} of 0 elements: pass at least one element (every member the same count)")]
    EmptyCollective { what: &'static str },

    /// A collective's buffers do not have the lengths its shape needs (per-rank blocks).
    #[error("{what}: {detail}")]
    CollectiveShape { what: &'static str, detail: String },

    /// A root outside the team.
    #[error("{what}: root {root} is not a rank of this team (ranks 0..{n_pes}); pass a team rank")]
    InvalidRoot {
        what: &'static str,
        root: i32,
        n_pes: i32,
    },

    /// Input and output overlap without being the same range.
    #[error(
        "{what}: the output {output:#x?} overlaps the input {input:#x?} without being the same \
         range; pass the same view for in place, or disjoint buffers"
    )]
    Overlap {
        what: &'static str,
        input: (usize, usize),
        output: (usize, usize),
    },

    /// A collective's buffer that is not device memory of this PE's GPU.
    #[error(
        "{what}: the {which} ({bytes} bytes at {addr:#x}) is not device memory of this PE's GPU \
         {device}: {detail}; pass a symmetric view, or memory allocated on GPU {device} \
         (cudarc, cudaMalloc, cuMemCreate) holding every element"
    )]
    NotDeviceMemory {
        what: &'static str,
        which: &'static str,
        addr: usize,
        bytes: usize,
        device: i32,
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
        what: &'static str,
        needs: usize,
        has: usize,
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
        what: &'static str,
        needs: usize,
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
        what: &'static str,
        pe: i32,
        reason: crate::core::unregistrable::Unregistrable,
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
    RegistrationFailed { bytes: usize },

    /// Two PEs called the same collective with different arguments (checked mode).
    #[error(
        "{what}: PE {pe} called it with {mine} but PE {peer} with {theirs} (call {call} on this \
         workspace); every member must pass the same count, type, op and algorithm, in the same \
         order. Nothing was reduced; the workspace is broken now"
    )]
    CollectiveMismatch {
        what: &'static str,
        pe: i32,
        peer: i32,
        call: u64,
        mine: String,
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
        what: &'static str,
        pe: i32,
        peer: i32,
        call: u64,
        detail: String,
    },

    /// The NVSHMEM host library loaded at run time is not the version this binary was built
    /// with.
    #[error(
        "NVSHMEM host library {loaded} was loaded but this binary was built against {compiled}; \
         make LD_LIBRARY_PATH find libnvshmem_host.so.3 of version {compiled} (or rebuild \
         against {loaded}; see INSTALL.md)"
    )]
    LibraryVersion { compiled: String, loaded: String },

    /// The GPU is older than the runtime supports.
    #[error(
        "GPU {device} ({name}) has compute capability {major}.{minor}; this runtime needs 8.0 or \
         newer (A100, H100, H200): run on such a GPU or pick one with CUDA_VISIBLE_DEVICES"
    )]
    ComputeCapability {
        device: i32,
        name: String,
        major: i32,
        minor: i32,
    },

    /// The unique-ID bootstrap could not be prepared.
    #[error("NVSHMEM {call} failed with status {status}")]
    Bootstrap { call: &'static str, status: i32 },

    /// A sparse output set too small for what the call always writes (top-k: min(k, n) pairs).
    #[error(
        "{what}: the output set holds {capacity} pairs but the call writes {needed}; create it \
         with SparseSet::new(stream, {needed}) or more"
    )]
    SparseCapacity {
        what: &'static str,
        needed: usize,
        capacity: usize,
    },

    /// A gradient longer than the index type of the sparse set can number.
    #[error(
        "{what}: a gradient of {len} elements needs indexes up to {last}, more than {index} holds \
         (at most {max}); use i64 indexes (SparseSet<T, i64>)"
    )]
    IndexTooNarrow {
        what: &'static str,
        len: usize,
        last: usize,
        index: &'static str,
        max: u64,
    },

    /// A sparse workspace created for smaller inputs than a call passes.
    #[error(
        "{what}: the input holds {len} elements but the workspace was created for at most \
         {max_len}; create it for the largest input ({create})"
    )]
    WorkspaceTooSmall {
        what: &'static str,
        len: usize,
        max_len: usize,
        create: &'static str,
    },

    /// A threshold that selects nothing meaningful.
    #[error(
        "{what}: the threshold is NaN; pass a number (elements with |g| >= threshold are \
         selected, so 0 or less selects every element)"
    )]
    InvalidThreshold { what: &'static str },

    /// A sparse allreduce asked for something it cannot do (a density outside (0, 1], an
    /// unknown method, an empty gradient, a call on a PE outside its team); `detail` says what
    /// to pass instead.
    #[error("{what}: {detail}")]
    SparseConfig { what: &'static str, detail: String },

    /// A residual to load whose length is not the sparse allreduce's gradient length (saved by
    /// one made for other gradients).
    #[error(
        "{what}: the residual given holds {got} elements but the gradients hold {len}; load a \
         residual saved by a SparseAllreduce of the same length"
    )]
    ResidualLength {
        what: &'static str,
        len: usize,
        got: usize,
    },

    /// A residual to load into a sparse allreduce without error feedback, which keeps none.
    #[error(
        "{what}: it was created without error feedback and keeps no residual; create it with \
         error_feedback: true to load one, or drop the residual"
    )]
    NoErrorFeedback { what: &'static str },
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
