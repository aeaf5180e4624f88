//! NVSHMEM's init where a bootstrap placed this process, and the runtime's state built on it.

use super::device_check::{check_compute_capability, check_library_version};
use super::lifecycle::{lifecycle, Lifecycle};
use super::{Join, Nvshmem, Placement, Rendezvous, Seat, Waits};
use crate::core::deadline;
use crate::core::error::{Error, Result};
use crate::core::result::{self, CudaInfo};
use crate::core::status::StatusRecord;
use crate::core::tuning::{self, Fingerprint, TuneMode, TuningState};
use crate::sys;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

impl Nvshmem {
    /// Initialises NVSHMEM where `place` puts this process (a bootstrap's decision, taken once
    /// the lifecycle and the environment allow an init). The public calls are the bootstrap
    /// layer's: `Nvshmem::init`, `init_single_pe` and `init_with`.
    pub(crate) fn init_placed(place: impl FnOnce() -> Result<Placement>) -> Result<Nvshmem> {
        let cuda = result::cuda_probe()?;
        lifecycle(|state| -> Result<()> {
            *state = state.begin_init()?;
            Ok(())
        })?;
        let mut nvshmem_up = false;
        let r = Self::init_inner(place, cuda, &mut nvshmem_up);
        lifecycle(|state| {
            *state = match &r {
                Ok(_) => Lifecycle::Live,
                // A handle dropped inside init_inner has ended the lifecycle already.
                Err(_) if *state != Lifecycle::Initializing => *state,
                Err(_) => state.init_failed(nvshmem_up),
            }
        });
        r
    }

    fn init_inner(
        place: impl FnOnce() -> Result<Placement>,
        cuda: CudaInfo,
        nvshmem_up: &mut bool,
    ) -> Result<Nvshmem> {
        // Before anything is started: a bad NVSH_TIMEOUT_MS fails here, on every PE alike.
        let timeout = deadline::default_timeout()?;
        let tune_mode = tuning::tune_mode_from_env()?;
        tuning::budget_ms_from_env()?;
        check_library_version(result::compiled_version(), result::host_library_version())?;
        let Placement {
            seat,
            rendezvous,
            bootstrap,
            job,
        } = place()?;
        // NVSHMEM binds to the current device at init (INSTALL.md, illegal memory access).
        let device = seat.local_rank % cuda.device_count;
        log::info!(
            "bootstrap {bootstrap}: rank {} of {}, local rank {} -> GPU {device} of {} visible",
            seat.rank,
            seat.n_pes,
            seat.local_rank,
            cuda.device_count
        );
        let prepared = check_compute_capability(device)
            .and_then(|()| result::cuda_set_device(device))
            .and_then(|()| match rendezvous {
                Rendezvous::UniqueId(id) => id.map(Join::UniqueId),
                Rendezvous::Alone => result::get_unique_id().map(Join::UniqueId),
                Rendezvous::Environment { check_size } => Ok(Join::Environment { check_size }),
            });
        // NVSHMEM's init waits for every PE with no timeout: under MPI all ranks first agree
        // that each is ready, so that one rank's failure fails them all instead of hanging.
        let join = match &job {
            Some(job) => job.all_ready(prepared),
            None => prepared,
        }?;
        let started = Self::start(seat, device, cuda, join, timeout, nvshmem_up)
            .and_then(|mut nv| {
                let pretend = crate::core::node::pretend_node_size_from_env(nv.n_pes)?;
                nv.start_nodes(pretend).map(|()| nv)
            })
            .and_then(|nv| nv.start_tuning(tune_mode).map(|()| nv));
        // Past the agreement an error cannot be shared: the others may already wait inside
        // NVSHMEM's init, and MPI_Finalize would wait for them. End the whole MPI job.
        match (started, job) {
            (Err(e), Some(job)) => job.abort(&e),
            (Ok(mut nv), job) => {
                nv._job = job;
                Ok(nv)
            }
            (Err(e), None) => Err(e),
        }
    }

    /// NVSHMEM init and the runtime's own state, once every PE is ready. Sets `nvshmem_up` once
    /// NVSHMEM's own init succeeded.
    fn start(
        seat: Seat,
        device: i32,
        cuda: CudaInfo,
        join: Join,
        timeout: Duration,
        nvshmem_up: &mut bool,
    ) -> Result<Nvshmem> {
        fault_after_ready()?;
        let check_size = match join {
            Join::UniqueId(id) => {
                // SAFETY: the lifecycle is Initializing (NVSHMEM is not up; no other init runs)
                // and the device was made current above.
                unsafe { result::init_with_unique_id(seat.rank, seat.n_pes, &id) }?;
                None
            }
            Join::Environment { check_size } => {
                // SAFETY: as above.
                unsafe { result::init_from_environment() }?;
                Some(check_size)
            }
        };
        *nvshmem_up = true;
        let (my_pe, n_pes) = (result::my_pe(), result::n_pes());
        // A bootstrap that did not reach the launcher leaves each process a job of its own: say
        // so in the launcher's terms before building anything on it.
        if let Some(check_size) = check_size {
            check_size(n_pes).inspect_err(|_| {
                // SAFETY: NVSHMEM came up above and nothing else uses it yet.
                unsafe { result::finalize() };
            })?;
        }
        // Until the handle exists (it finalises on Drop), an error must finalise here.
        let parts = Self::runtime_parts(device, n_pes).inspect_err(|_| {
            // SAFETY: NVSHMEM came up above and nothing else uses it yet.
            unsafe { result::finalize() };
        })?;
        let (ctx, stream, atomic_scratch, waits) = parts;
        let nv = Nvshmem {
            my_pe,
            n_pes,
            local_rank: seat.local_rank,
            device,
            cuda,
            ctx,
            stream,
            atomic_scratch,
            timeout: Cell::new(timeout),
            waits,
            vote_round: Cell::new(0),
            peer_failure: RefCell::new(None),
            // Replaced by start_tuning once the runtime can compute its fingerprint.
            tuning: RefCell::new(TuningState::load(
                Fingerprint {
                    gpu: String::new(),
                    gpus: 0,
                    link: String::new(),
                    p2p_rank: -1,
                    pes: n_pes,
                    nvshmem: String::new(),
                    runtime: String::new(),
                },
                TuneMode::Off,
                None,
            )),
            finalized: false,
            pretend: None,
            node_teams: None,
            // Set by init_inner once the runtime is up.
            _job: None,
            _not_send: PhantomData,
        };
        if n_pes != seat.n_pes || my_pe != seat.rank {
            // Dropping `nv` finalises.
            return Err(Error::PeCountMismatch {
                expected: seat.n_pes,
                got: n_pes,
            });
        }
        log::info!(
            "PE {my_pe} of {n_pes} on GPU {device}: NVSHMEM {} (host library; built against {}), \
             symmetric heap {} (NVSHMEM_SYMMETRIC_SIZE), remote transport {} \
             (NVSHMEM_REMOTE_TRANSPORT), deadline {} ms",
            crate::core::version_string(result::host_library_version()),
            crate::core::version_string(result::compiled_version()),
            crate::core::env_value::size_label(crate::core::env_value::initial_heap_bytes()),
            std::env::var("NVSHMEM_REMOTE_TRANSPORT").unwrap_or_else(|_| "default".into()),
            timeout.as_millis()
        );
        Ok(nv)
    }

    /// The context, stream, scratch and wait state of a runtime whose NVSHMEM just came up.
    #[allow(clippy::type_complexity)]
    fn runtime_parts(
        device: i32,
        n_pes: i32,
    ) -> Result<(Arc<CudaContext>, Arc<CudaStream>, CudaSlice<u64>, Waits)> {
        let ctx = CudaContext::new(device as usize)?;
        ctx.bind_to_thread()?;
        let stream = ctx.new_stream()?;
        let atomic_scratch = stream.alloc_zeros::<u64>(1)?;
        let n = n_pes.max(1) as usize;
        // Collective, like every symmetric allocation: all PEs are here, just initialised. Not
        // in the leak registry: they live as long as the heap.
        // SAFETY: NVSHMEM is initialised; returns null on failure.
        let arrivals = unsafe { sys::nvshmem_malloc(8 * n) }.cast::<u64>();
        // SAFETY: as above.
        let votes = unsafe { sys::nvshmem_malloc(8 * 4 * n) }.cast::<u64>();
        if arrivals.is_null() || votes.is_null() {
            return Err(Error::AllocFailed {
                bytes: 8 * 5 * n,
                free: 0,
            });
        }
        // Zeroed by this process (initcheck does not see nvshmem_calloc's zeroing; see
        // SymmetricBuffer::allocate), then NVSHMEM's barrier: no peer signals them before
        // every PE has zeroed its copy. The runtime's own barrier uses these words.
        for (ptr, words) in [(arrivals, n), (votes, 4 * n)] {
            // SAFETY: a live device allocation of `words` u64 on this context.
            unsafe {
                cudarc::driver::result::memset_d8_async(
                    ptr as cudarc::driver::sys::CUdeviceptr,
                    0,
                    8 * words,
                    stream.cu_stream(),
                )
            }?;
        }
        stream.synchronize()?;
        // SAFETY: NVSHMEM is initialised; every PE comes here once, right after init.
        unsafe { sys::nvshmem_barrier_all() };
        let state = stream.alloc_zeros::<u64>(2)?;
        let state_ptr = {
            use cudarc::driver::DevicePtr;
            state.device_ptr(&stream).0
        };
        let waits = Waits {
            arrivals,
            votes,
            _state: state,
            state_ptr,
            status: StatusRecord::new(&ctx)?,
        };
        Ok((ctx, stream, atomic_scratch, waits))
    }
}

/// Fault injection for the launcher tests (`NVSH_FAULT_AFTER_READY=1` on one rank): this PE
/// fails right after every PE agreed it was ready, where the others already wait inside
/// NVSHMEM's init. NVSHMEM's own init failures exit the process themselves, so they cannot
/// show what the runtime does with an error of its own there.
fn fault_after_ready() -> Result<()> {
    match std::env::var_os("NVSH_FAULT_AFTER_READY") {
        Some(v) if !v.is_empty() && v != "0" => Err(Error::Mpi {
            message: "fault injected after the ready agreement (NVSH_FAULT_AFTER_READY)".into(),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_without_gpu_returns_error_and_can_be_retried() {
        if std::path::Path::new("/dev/nvidiactl").exists() {
            log::warn!("skipped: this machine has an NVIDIA driver");
            return;
        }
        for _ in 0..2 {
            let err = Nvshmem::init_single_pe().unwrap_err();
            assert!(err.to_string().contains("no CUDA"), "{err}");
        }
        assert_eq!(lifecycle(|s| *s), Lifecycle::Uninit);
    }
}
