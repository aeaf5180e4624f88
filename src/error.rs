//! The runtime's error type. Every message says what went wrong and what to do about it.

/// Errors returned by the runtime. Nothing in this crate aborts the process.
#[derive(Debug, thiserror::Error)]
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

    /// An environment variable the runtime reads has a value it cannot use.
    #[error("environment variable {var}={value:?} is not valid: expected {expected}")]
    InvalidEnv {
        var: &'static str,
        value: String,
        expected: &'static str,
    },

    /// The unique-ID bootstrap could not be prepared.
    #[error("NVSHMEM {call} failed with status {status}")]
    Bootstrap { call: &'static str, status: i32 },
}

/// Result with the runtime's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
