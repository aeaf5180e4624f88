//! The trainer's error type. Every message says what went wrong and what to do about it.

use std::path::PathBuf;

use cudarc::cublas::result::CublasError;
use cudarc::driver::DriverError;

/// Errors of the GPT crate. Nothing in this crate panics on user error.
#[derive(Debug, thiserror::Error)]
pub enum GptError {
    /// A CUDA driver call (module load, kernel launch, memory operation) failed.
    #[error(
        "CUDA driver call failed: {0}; check that a GPU is visible (nvidia-smi) and that the \
         driver supports this CUDA version (see INSTALL.md)"
    )]
    Driver(#[from] DriverError),

    /// A cuBLAS call failed.
    #[error(
        "cuBLAS call failed: {0}; check that libcublas is installed next to the CUDA runtime \
         (see INSTALL.md) and that the matrix shapes are valid"
    )]
    Blas(#[from] CublasError),

    /// The nvshmem runtime (channels, allreduce, init) failed.
    #[error("nvshmem runtime: {0}")]
    Nvshmem(#[from] nvshmem::Error),

    /// A file could not be read or written.
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// An invalid configuration (model shape, batch, pipeline split, flags).
    #[error("invalid configuration: {0}")]
    Config(String),

    /// A checkpoint that cannot be loaded (format, version or shape mismatch).
    #[error("checkpoint: {0}")]
    Checkpoint(String),

    /// Training or validation data that cannot be used.
    #[error("data: {0}")]
    Data(String),

    /// A kernel was called with arguments it cannot handle (heads that do not divide the width,
    /// a padded vocabulary smaller than the vocabulary, a null or misaligned device address,
    /// sizes beyond 32-bit indexing, AdamW step 0).
    #[error("{op}: invalid argument: {detail}")]
    InvalidArgument { op: &'static str, detail: String },

    /// libcublas could not be loaded at run time.
    #[error(
        "cuBLAS is not loadable ({detail}); install the cuBLAS libraries of this build's CUDA \
         major version (libcublas and libcublasLt, e.g. from the nvidia-cublas wheel or the CUDA \
         toolkit) and put their lib directory on LD_LIBRARY_PATH"
    )]
    NoCublas { detail: String },

    /// A host-side wait gave up: a peer PE stopped, or a transfer or collective hung.
    #[error(
        "timed out after {waited_ms} ms waiting for {what}; check that every PE is alive (the \
         other ranks' output says why one stopped); --timeout-ms sets the limit"
    )]
    Timeout { what: String, waited_ms: u128 },

    /// Stages could not exchange data (a peer stopped, or the stages disagree on shapes).
    #[error("pipeline communication: {0}")]
    Comm(String),
}

/// Result with [`GptError`].
pub type Result<T> = std::result::Result<T, GptError>;

/// A file written through [`nvsh_plot::AtomicFile`] failed at the path it names.
impl From<nvsh_plot::CommitError> for GptError {
    fn from(e: nvsh_plot::CommitError) -> GptError {
        GptError::Io {
            path: e.path,
            source: e.source,
        }
    }
}
