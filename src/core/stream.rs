//! The CUDA stream as NVSHMEM's and the project's C entry points take it.

use crate::sys;
use cudarc::driver::CudaStream;

/// NVSHMEM's stream type from a cudarc stream (both are CUstream).
pub fn raw_stream(stream: &CudaStream) -> sys::cudaStream_t {
    stream.cu_stream() as sys::cudaStream_t
}
