//! Ordering and synchronisation: quiet, fence, barrier and sync, on the host and on a stream.

use crate::runtime::Nvshmem;
use crate::sys;
use cudarc::driver::CudaStream;

/// NVSHMEM's stream type from a cudarc stream (both are CUstream).
pub(crate) fn raw_stream(stream: &CudaStream) -> sys::cudaStream_t {
    stream.cu_stream() as sys::cudaStream_t
}

impl Nvshmem {
    /// Completes every put, get, AMO and signal this PE issued (host-initiated).
    pub fn quiet(&self) {
        // SAFETY: NVSHMEM is initialised while self lives.
        unsafe { sys::nvshmem_quiet() }
    }

    /// Orders this PE's puts, AMOs and signals to each target PE (delivery stays asynchronous).
    pub fn fence(&self) {
        // SAFETY: as in quiet.
        unsafe { sys::nvshmem_fence() }
    }

    /// Completes this PE's outstanding operations, then waits for every PE (collective).
    pub fn barrier_all(&self) {
        // SAFETY: as in quiet.
        unsafe { sys::nvshmem_barrier_all() }
    }

    /// Waits for every PE without completing outstanding operations (collective).
    pub fn sync_all(&self) {
        // SAFETY: as in quiet.
        unsafe { sys::nvshmem_sync_all() }
    }

    /// Stream-ordered quiet: completes operations issued by this PE before this point of
    /// `stream` (device-initiated ones included).
    pub fn quiet_on_stream(&self, stream: &CudaStream) {
        // SAFETY: a live stream of this PE's context.
        unsafe { sys::nvshmemx_quiet_on_stream(raw_stream(stream)) }
    }

    /// Stream-ordered barrier_all.
    pub fn barrier_all_on_stream(&self, stream: &CudaStream) {
        // SAFETY: as in quiet_on_stream.
        unsafe { sys::nvshmemx_barrier_all_on_stream(raw_stream(stream)) }
    }

    /// Stream-ordered sync_all.
    pub fn sync_all_on_stream(&self, stream: &CudaStream) {
        // SAFETY: as in quiet_on_stream.
        unsafe { sys::nvshmemx_sync_all_on_stream(raw_stream(stream)) }
    }
}
