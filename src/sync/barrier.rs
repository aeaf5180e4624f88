//! Ordering and synchronisation: quiet, fence, barrier and sync, on the host and on a stream.
//!
//! Barriers are the runtime's own kernel (device/core/barrier.cu), not NVSHMEM's: NVSHMEM's wait for
//! a dead PE forever, these give up after [`Nvshmem::timeout`] with [`Error::Timeout`] naming
//! the PE that did not arrive.

use crate::core::deadline::timeout_ns;
use crate::core::error::{Error, Result};
use crate::core::result::cuda_check;
use crate::core::runtime::Nvshmem;
use crate::core::status::{FailureKind, FailureText, WaitFailure, WaitOp};
use crate::core::stream::raw_stream;
use crate::sys;
use cudarc::driver::CudaStream;

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
        let r = self.waits.status.check(self.my_pe(), &RuntimeWaits);
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
        self.bind()?;
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

/// The words of the runtime's own waits (barriers and stream signal waits) in errors.
pub(crate) struct RuntimeWaits;

impl FailureText for RuntimeWaits {
    fn error(&self, f: &WaitFailure, me: i32) -> Error {
        let peer = f.peer;
        let what = match (f.kind, f.op) {
            (FailureKind::Timeout, WaitOp::Barrier) => format!(
                "PE {peer} to arrive at barrier {} (PE {me} waited): PE {peer} is dead or took \
                 another path; a longer wait: NVSH_TIMEOUT_MS or Nvshmem::set_timeout",
                f.seq
            ),
            (FailureKind::Timeout, WaitOp::SignalWait) => format!(
                "signal word {:#x} on PE {me} to reach {} (it is {}; signal_wait_until_on_stream): \
                 the PE that should signal it is dead or never did; a longer wait: \
                 NVSH_TIMEOUT_MS or Nvshmem::set_timeout",
                f.signal, f.want, f.seen
            ),
            (kind, op) => format!(
                "{} on PE {me} ({kind:?}, signal word {:#x} is {}, needs {}; PE {peer})",
                op.name(),
                f.signal,
                f.seen,
                f.want
            ),
        };
        Error::Timeout {
            what,
            waited_ms: f.waited.as_millis(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn barrier_timeouts_name_the_missing_pe() {
        let f = WaitFailure {
            kind: FailureKind::Timeout,
            op: WaitOp::Barrier,
            peer: 3,
            signal: 0x1000,
            index: 1,
            seq: 5,
            want: 384,
            seen: 320,
            waited: Duration::from_millis(250),
        };
        let text = RuntimeWaits.error(&f, 0).to_string();
        assert!(text.contains("PE 3 to arrive at barrier 5"), "{text}");
        let wait = WaitFailure {
            op: WaitOp::SignalWait,
            ..f
        };
        let text = RuntimeWaits.error(&wait, 2).to_string();
        assert!(
            text.contains("signal word 0x1000 on PE 2 to reach 384"),
            "{text}"
        );
    }
}
