//! The CUDA stream as NVSHMEM's and the project's C entry points take it.

use crate::sys;
use cudarc::driver::CudaStream;

/// NVSHMEM's stream type from a cudarc stream (both are CUstream).
pub fn raw_stream(stream: &CudaStream) -> sys::cudaStream_t {
    stream.cu_stream() as sys::cudaStream_t
}

/// Whether `stream` is being captured into a CUDA graph (then nothing may synchronise it or
/// allocate). A stream whose status cannot be read counts as captured.
pub fn is_capturing(stream: &CudaStream) -> bool {
    use cudarc::driver::sys::CUstreamCaptureStatus as S;
    !matches!(
        stream.capture_status(),
        Ok(S::CU_STREAM_CAPTURE_STATUS_NONE)
    )
}
