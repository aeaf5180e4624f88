//! Ordering and synchronisation: quiet, fence, barrier and sync, on the host and on a stream.
//!
//! Barriers are the runtime's own kernel (device/barrier.cu), not NVSHMEM's: NVSHMEM's wait for
//! a dead PE forever, these give up after [`Nvshmem::timeout`] with [`Error::Timeout`] naming
//! the PE that did not arrive.

use crate::deadline::timeout_ns;
use crate::error::Result;
use crate::result::cuda_check;
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

    /// Completes this PE's outstanding operations, then waits for every PE (collective), at
    /// most [`Nvshmem::timeout`]. A PE that does not arrive in time gives [`Error::Timeout`]
    /// naming it; the runtime then counts its peers as failed ([`Nvshmem::peer_failure`]).
    pub fn barrier_all(&self) -> Result<()> {
        self.quiet();
        self.blocking_barrier("barrier_all", true)
    }

    /// Waits for every PE without completing outstanding operations (collective), at most
    /// [`Nvshmem::timeout`], as [`Nvshmem::barrier_all`].
    pub fn sync_all(&self) -> Result<()> {
        self.blocking_barrier("sync_all", false)
    }

    /// Stream-ordered quiet: completes operations issued by this PE before this point of
    /// `stream` (device-initiated ones included).
    pub fn quiet_on_stream(&self, stream: &CudaStream) {
        // SAFETY: a live stream of this PE's context.
        unsafe { sys::nvshmemx_quiet_on_stream(raw_stream(stream)) }
    }

    /// Stream-ordered barrier_all. A barrier that runs out of time lets the stream go on and
    /// shows in [`Nvshmem::check`].
    pub fn barrier_all_on_stream(&self, stream: &CudaStream) -> Result<()> {
        self.launch_barrier("barrier_all_on_stream", true, stream)
    }

    /// Stream-ordered sync_all, as [`Nvshmem::barrier_all_on_stream`].
    pub fn sync_all_on_stream(&self, stream: &CudaStream) -> Result<()> {
        self.launch_barrier("sync_all_on_stream", false, stream)
    }

    /// The failure a barrier or stream signal wait recorded, without synchronising (it reads
    /// host-mapped memory); the runtime then counts its peers as failed.
    pub fn check(&self) -> Result<()> {
        let r = self.waits.status.check(self.my_pe());
        self.noted(r)
    }

    /// The barrier kernel on the runtime's stream, waited for, then its record checked.
    fn blocking_barrier(&self, what: &'static str, quiet: bool) -> Result<()> {
        self.launch_barrier(what, quiet, self.stream())?;
        self.stream().synchronize()?;
        self.check()
    }

    /// Enqueues the barrier kernel (refused once the peers count as failed).
    fn launch_barrier(&self, what: &'static str, quiet: bool, stream: &CudaStream) -> Result<()> {
        self.check_peers(what)?;
        let args = sys::nvshmemrs_barrier_args {
            arrivals: self.waits.arrivals,
            state: self.waits.state_ptr as *mut u64,
            wait_status: self.waits.status.device_ptr() as *mut std::ffi::c_void,
            timeout_ns: timeout_ns(self.timeout()),
            quiet: quiet as i32,
        };
        // SAFETY: the runtime's symmetric arrival counters and local state, a live stream.
        let code = unsafe { sys::nvshmemrs_barrier(args, raw_stream(stream)) };
        cuda_check(code, "barrier kernel launch")
    }
}
