//! The CUDA stream as NVSHMEM's and the project's C entry points take it, and streams of other
//! libraries (PyTorch's, CuPy's) as the calls that take a `&CudaStream` want them.

use crate::core::runtime::Nvshmem;
use crate::sys;
use cudarc::driver::CudaStream;
use std::sync::Arc;

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

impl Nvshmem {
    /// A stream that another library created (PyTorch's current stream,
    /// `torch.cuda.current_stream().cuda_stream`), given as its raw `cudaStream_t`, as a cudarc
    /// stream of this PE's context: what the collectives and the other `&CudaStream` calls
    /// take, so that their work runs in that library's stream order. Null is the default
    /// stream; `cudaStreamLegacy` (1) and `cudaStreamPerThread` (2) are accepted as CUDA
    /// accepts them. Dropping the value leaves the stream to its owner.
    ///
    /// # Safety
    /// `raw` is a live stream of this PE's device's primary context (the one CUDA's runtime
    /// API and PyTorch use, which the runtime shares), or one of the special values above, and
    /// stays alive while the returned value or work queued through it may use it.
    pub unsafe fn borrowed_stream(&self, raw: sys::cudaStream_t) -> Arc<CudaStream> {
        // SAFETY: the caller's promise above; cudarc does not destroy a borrowed stream.
        unsafe {
            self.context()
                .wrap_borrowed_stream(raw as cudarc::driver::sys::CUstream)
        }
    }
}
