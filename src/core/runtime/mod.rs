//! The `Nvshmem` runtime handle: initialises NVSHMEM once per process where a bootstrap placed
//! it (the bootstraps of [`crate::bootstrap`] stand on this layer and give the public `init`
//! calls), and finalises it exactly once on Drop.

use crate::core::deadline;
use crate::core::error::{Error, Result};
use crate::core::leak::{self, LiveBuffer};
use crate::core::result::{self, CudaInfo};
use crate::core::status::StatusRecord;
use crate::core::tuning::{self, Fingerprint, TuneMode, TuningState, TuningTable};
use crate::core::MIN_COMPUTE_CAPABILITY;
use crate::sys;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where the process stands with NVSHMEM. NVSHMEM supports one init per process (it documents
/// re-init only for its MPI bootstrap, which this runtime does not use that way), so the states
/// only move forward once NVSHMEM has come up:
///
/// ```text
/// Uninit --begin--> Initializing --up--> Live --finalized--> Finalized
///   ^                   |                  \--finalize skipped (peer failure)--> Abandoned
///   \--failed before NVSHMEM init--/
///                      \--failed after NVSHMEM init (it is finalised)--> Finalized
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lifecycle {
    /// NVSHMEM never came up in this process: init may (again) be tried.
    Uninit,
    /// An init is running (on some thread).
    Initializing,
    /// A handle exists.
    Live,
    /// NVSHMEM was finalised: it cannot come up again in this process.
    Finalized,
    /// NVSHMEM is still up without a handle (finalize skipped after a peer failure).
    Abandoned,
}

impl Lifecycle {
    /// The state an init moves to from `self`, or why it may not start.
    pub(crate) fn begin_init(self) -> Result<Lifecycle> {
        match self {
            Lifecycle::Uninit => Ok(Lifecycle::Initializing),
            Lifecycle::Initializing | Lifecycle::Live => Err(Error::AlreadyInitialized),
            Lifecycle::Finalized | Lifecycle::Abandoned => Err(Error::InitAfterFinalize {
                abandoned: self == Lifecycle::Abandoned,
            }),
        }
    }

    /// The state after an init that failed; `nvshmem_up` says whether NVSHMEM's own init had
    /// succeeded (and was finalised again) before the failure.
    pub(crate) fn init_failed(self, nvshmem_up: bool) -> Lifecycle {
        debug_assert_eq!(self, Lifecycle::Initializing);
        if nvshmem_up {
            Lifecycle::Finalized
        } else {
            Lifecycle::Uninit
        }
    }

    /// The state after the handle ended; `finalized` says whether NVSHMEM was finalised.
    pub(crate) fn ended(self, finalized: bool) -> Lifecycle {
        if finalized {
            Lifecycle::Finalized
        } else {
            Lifecycle::Abandoned
        }
    }
}

/// The process's [`Lifecycle`].
static LIFECYCLE: Mutex<Lifecycle> = Mutex::new(Lifecycle::Uninit);

/// Applies `step` to the process's lifecycle under its lock.
fn lifecycle<R>(step: impl FnOnce(&mut Lifecycle) -> R) -> R {
    // The state is one Copy value: a panic elsewhere cannot leave it half-written.
    step(&mut LIFECYCLE.lock().unwrap_or_else(|p| p.into_inner()))
}

/// One PE's say in a decision every PE must take alike before a collective NVSHMEM call
/// ([`Nvshmem::agree_collective`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Vote {
    Yes,
    /// No, with a number the error reports (an allocation: this PE's free bytes).
    No(u64),
}

impl Vote {
    /// An allocation that fits (or not) next to `free` bytes of device memory.
    pub(crate) fn alloc(fits: bool, free: usize) -> Vote {
        if fits {
            Vote::Yes
        } else {
            Vote::No(free as u64)
        }
    }
}

/// Where this process sits in the job, decided by a bootstrap before NVSHMEM init.
pub(crate) struct Placement {
    pub seat: Seat,
    /// How NVSHMEM's init finds the other PEs.
    pub rendezvous: Rendezvous,
    /// Which bootstrap placed this process, for the log.
    pub bootstrap: &'static str,
    /// The job runtime the bootstrap started (MPI), if any.
    pub job: Option<Box<dyn Job>>,
}

/// Rank, size and node-local rank (which picks the GPU) a bootstrap expects for this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seat {
    pub rank: i32,
    pub n_pes: i32,
    pub local_rank: i32,
}

/// How NVSHMEM's init finds the other PEs.
pub(crate) enum Rendezvous {
    /// The unique ID every PE shares, or why the bootstrap's bytes are not one (reported after
    /// the device checks, among the errors all PEs agree on).
    UniqueId(Result<sys::nvshmemx_uniqueid_t>),
    /// This process alone: it takes its own unique ID.
    Alone,
    /// NVSHMEM's own bootstrap as its environment variables select it (PMI). `check_size` judges
    /// the PE count NVSHMEM found, in the launcher's terms: PMI that did not reach the launcher
    /// makes each process a job of 1.
    Environment {
        check_size: Box<dyn FnOnce(i32) -> Result<()>>,
    },
}

/// A [`Rendezvous`] once this PE is ready for NVSHMEM's init.
pub(crate) enum Join {
    UniqueId(sys::nvshmemx_uniqueid_t),
    Environment {
        check_size: Box<dyn FnOnce(i32) -> Result<()>>,
    },
}

/// A job runtime a bootstrap started (MPI), as init needs it: all PEs agree before NVSHMEM's
/// own init, an error past that ends the job, and it stays up as long as NVSHMEM (dropped with
/// the handle, after finalize). A trait of this layer so that the runtime needs no bootstrap.
pub(crate) trait Job {
    /// Every PE's readiness for NVSHMEM init: this PE's error, or one saying another PE failed.
    /// Collective: every PE must call it.
    fn all_ready(&self, local: Result<Join>) -> Result<Join>;
    /// Ends the whole job after an error past [`Job::all_ready`] (the others may wait inside
    /// NVSHMEM's init for this PE).
    fn abort(&self, err: &Error) -> !;
}

/// An initialised NVSHMEM runtime. Dropping it finalises NVSHMEM (and MPI, if it started it).
///
/// Symmetric buffers borrow the handle, so none can be used after finalize. The handle stays on
/// the thread that created it (NVSHMEM is initialised with thread support "serialized" and the
/// CUDA context is bound to that thread).
pub struct Nvshmem {
    my_pe: i32,
    n_pes: i32,
    local_rank: i32,
    device: i32,
    cuda: CudaInfo,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// Device word the atomic kernels return their old value through.
    atomic_scratch: CudaSlice<u64>,
    /// Deadline of the runtime's own waits (barriers, stream signal waits), and the default of
    /// channels and allreduce workspaces created later.
    timeout: Cell<Duration>,
    /// State of the barrier and stream-wait kernels (device/core/barrier.h).
    pub(crate) waits: Waits,
    /// Decisions agreed so far ([`Nvshmem::agree_collective`]); picks the vote bank.
    vote_round: Cell<u64>,
    /// Set once a wait anywhere in the runtime timed out: a peer is dead or lost step. Collective
    /// calls are refused from then on and finalize is skipped (it would wait for the peer).
    peer_failure: RefCell<Option<String>>,
    /// The tuned tables `Auto` consults (a tuning file's, plus online tuning's results).
    tuning: RefCell<TuningState>,
    finalized: bool,
    /// Pretend nodes (NVSH_PRETEND_NODE_SIZE; `crate::core::node`).
    pub(crate) pretend: Option<crate::core::node::NodeLayout>,
    /// The world split into node and rail teams, where it spans blocked nodes.
    pub(crate) node_teams: Option<crate::core::node::NodeTeams>,
    /// Dropped after the finalize of Drop: the job runtime outlives NVSHMEM.
    _job: Option<Box<dyn Job>>,
    _not_send: PhantomData<*const ()>,
}

/// Device state of the runtime's barrier and stream signal waits (device/core/barrier.h).
pub(crate) struct Waits {
    /// Symmetric arrival counters, one per PE (allocated at init, released with the heap).
    pub arrivals: *mut u64,
    /// Symmetric vote slots: 2 banks x n_pes x [detail, round << 1 | no] (same lifetime).
    pub votes: *mut u64,
    /// [barriers taken, broken] (owned here; kernels get `state_ptr`).
    pub _state: CudaSlice<u64>,
    pub state_ptr: u64,
    pub status: StatusRecord,
}

impl std::fmt::Debug for Nvshmem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvshmem")
            .field("my_pe", &self.my_pe)
            .field("n_pes", &self.n_pes)
            .field("device", &self.device)
            .finish()
    }
}

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

    /// Loads the tuning file for this machine's fingerprint, then checks that every PE holds
    /// the same table and mode: `Auto` must pick alike everywhere, so if any PE differs (another
    /// file on its node, another NVSH_TUNE) every PE falls back to the built-in tables, with a
    /// warning. Collective (after NVSHMEM's init, where every PE is).
    fn start_tuning(&self, mode: TuneMode) -> Result<()> {
        let fp = self.tuning_fingerprint();
        *self.tuning.borrow_mut() = TuningState::load(fp, mode, tuning::path_from_env());
        self.agree_on_tuning()
    }

    /// Two rounds of votes: PE 0's hash of its tuning reaches every PE, then every PE says
    /// whether its own differs; one that does sends all to the built-in tables.
    fn agree_on_tuning(&self) -> Result<()> {
        let mine = self.tuning.borrow().agreement_hash();
        let theirs = self
            .agree_collective("tuning agreement", Vote::No(mine))?
            .map_or(mine, |(_, hash)| hash);
        let vote = if theirs == mine {
            Vote::Yes
        } else {
            Vote::No(1)
        };
        if let Some((pe, _)) = self.agree_collective("tuning agreement", vote)? {
            log::warn!(
                "PE {pe} holds another tuning file or {} than PE 0; every PE uses the built-in \
                 tables without online tuning (give all PEs the same {} and {})",
                tuning::TUNE_ENV,
                tuning::TUNING_FILE_ENV,
                tuning::TUNE_ENV
            );
            let mut t = self.tuning.borrow_mut();
            t.table = TuningTable::default();
            t.mode = TuneMode::Off;
            t.source = format!("built-in (PE {pe}'s tuning differed)");
        }
        Ok(())
    }

    /// What a tuning is valid for on this job (see [`Fingerprint`]): the same on every PE of a
    /// job of like nodes, and the same in `nvsh tune` as at init.
    pub fn tuning_fingerprint(&self) -> Fingerprint {
        use cudarc::driver::sys::CUdevice_P2PAttribute as Attr;
        let local = self.real_node_pes().max(1);
        let per_node = local.min(self.cuda.device_count).max(1);
        let gpus = per_node * (self.n_pes / local).max(1);
        // The runtime's arrival counters are symmetric: nvshmem_ptr maps them where the peer's
        // whole heap is mapped.
        let mapped = (0..self.n_pes).all(|pe| {
            // SAFETY: a symmetric address of this runtime's heap and a PE of the job.
            pe == self.my_pe
                || self.may_map(pe)
                    && !unsafe {
                        sys::nvshmem_ptr(self.waits.arrivals as *const std::ffi::c_void, pe)
                    }
                    .is_null()
        });
        // GPUs 0 and 1 stand for every pair: nodes are alike.
        let p2p = |attr: Attr| -> i32 {
            let mut v = -1;
            let devs = (
                cudarc::driver::result::device::get(0),
                cudarc::driver::result::device::get(1),
            );
            if let (Ok(a), Ok(b)) = devs {
                // SAFETY: an out-pointer to an int and two device handles of this process.
                let r = unsafe { cudarc::driver::sys::cuDeviceGetP2PAttribute(&mut v, attr, a, b) };
                if r != cudarc::driver::sys::CUresult::CUDA_SUCCESS {
                    v = -1;
                }
            }
            v
        };
        let (link, p2p_rank) = if self.n_pes == 1 {
            ("none", -1)
        } else if !mapped {
            ("network", -1)
        } else if per_node == 1 {
            ("same-gpu", -1)
        } else {
            let rank = p2p(Attr::CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK);
            match p2p(Attr::CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED) {
                1 => ("nvlink", rank),
                _ => ("pcie", rank),
            }
        };
        Fingerprint {
            gpu: self.ctx.name().unwrap_or_else(|_| "unknown GPU".into()),
            gpus,
            link: link.into(),
            p2p_rank,
            pes: self.n_pes,
            nvshmem: crate::core::version_string(result::host_library_version()),
            runtime: env!("CARGO_PKG_VERSION").into(),
        }
    }

    /// Whether `Auto` calls tune unseen sizes at run time (`NVSH_TUNE`, agreed by all PEs).
    pub fn tune_mode(&self) -> TuneMode {
        self.tuning.borrow().mode
    }

    /// The tuned table `Auto` consults before the built-in ones (empty: built-in only).
    pub fn tuning_table(&self) -> TuningTable {
        self.tuning.borrow().table.clone()
    }

    /// Where the tuned table came from, in words (for logs and reports).
    pub fn tuning_source(&self) -> String {
        self.tuning.borrow().source.clone()
    }

    /// The tuning file loaded at init (or None): where [`Nvshmem::save_tuning`] writes by default.
    pub fn tuning_path(&self) -> Option<std::path::PathBuf> {
        self.tuning.borrow().path.clone()
    }

    /// Replaces the tuned table (`nvsh tune` installs what it measured; tests clear it).
    /// Every PE must pass the same table at the same point, as with any collective setting.
    pub fn set_tuning_table(&self, table: TuningTable, source: &str) {
        let mut t = self.tuning.borrow_mut();
        t.table = table;
        t.source = source.to_string();
    }

    /// Loads the entry for this machine from the tuning file at `path` in place of the current
    /// table, as init does, and returns what was found; an unusable file or another machine's
    /// leaves the built-in tables. Collective: every PE calls it with a file of the same
    /// content (checked: if one differs, all use the built-in tables).
    pub fn load_tuning_file(&self, path: &std::path::Path) -> Result<tuning::Loaded> {
        let fp = self.tuning.borrow().fingerprint.clone();
        let loaded = tuning::load(path, &fp);
        let mode = self.tune_mode();
        let mut state = TuningState::load(fp, mode, Some(path.to_path_buf()));
        std::mem::swap(&mut *self.tuning.borrow_mut(), &mut state);
        self.agree_on_tuning()?;
        // A disagreement turned tuning off; what was asked for stays.
        self.tuning.borrow_mut().mode = mode;
        Ok(loaded)
    }

    /// The tuned choice of `collective` (a table key, `tuning::collective_key`) for `bytes` of
    /// `elem_bytes`-byte elements, if the tuned table has one; `f` sees it while the table is
    /// borrowed.
    pub(crate) fn tuned<R>(
        &self,
        collective: &str,
        bytes: usize,
        elem_bytes: usize,
        f: impl FnOnce(Option<&str>) -> R,
    ) -> R {
        let t = self.tuning.borrow();
        if t.table.collectives.is_empty() {
            return f(None);
        }
        f(t.table.lookup(collective, bytes, elem_bytes))
    }

    /// Records an online tuning's choice for `min ..= max` bytes.
    pub(crate) fn record_tuned(
        &self,
        collective: &str,
        elem_bytes: usize,
        (min, max): (u64, u64),
        choice: &str,
    ) {
        self.tuning
            .borrow_mut()
            .table
            .insert(collective, elem_bytes, min, max, choice);
    }

    /// Writes the tuned table (a tuning file's plus online results) as this machine's entry of
    /// the tuning file at `path`, else the one loaded at init, else the default cache path;
    /// other machines' entries there stay. Returns the path written.
    pub fn save_tuning(&self, path: Option<&std::path::Path>) -> Result<std::path::PathBuf> {
        let t = self.tuning.borrow();
        let path = path
            .map(std::path::Path::to_path_buf)
            .or_else(|| t.path.clone())
            .or_else(tuning::default_path)
            .ok_or(Error::Io {
                what: "saving the tuning".into(),
                message: format!(
                    "no path: set {} or HOME, or pass a path",
                    tuning::TUNING_FILE_ENV
                ),
            })?;
        tuning::save(&path, &t.fingerprint, &t.table, None)?;
        log::info!("tuning saved to {}", path.display());
        Ok(path)
    }

    /// Makes this PE's CUDA context current on the calling thread, as cudarc does on entry: the
    /// caller may have bound another device since init. Cheap when it is current already.
    pub(crate) fn bind(&self) -> Result<()> {
        self.ctx.bind_to_thread()?;
        Ok(())
    }

    /// This PE's number, 0 ..= n_pes - 1.
    pub fn my_pe(&self) -> i32 {
        self.my_pe
    }

    /// Number of PEs in the job.
    pub fn n_pes(&self) -> i32 {
        self.n_pes
    }

    /// Rank among the PEs of this node (chose the GPU).
    pub fn local_rank(&self) -> i32 {
        self.local_rank
    }

    /// The CUDA device this PE runs on.
    pub fn device(&self) -> i32 {
        self.device
    }

    /// Driver and runtime versions found at init.
    pub fn cuda_info(&self) -> CudaInfo {
        self.cuda
    }

    /// The cudarc context of this PE's device (its primary context, shared with NVSHMEM).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// A stream of this runtime's own, used by the blocking calls; also handy for users.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    pub(crate) fn atomic_scratch(&self) -> &CudaSlice<u64> {
        &self.atomic_scratch
    }

    /// Several PEs of this node share a GPU (NVSHMEM's "limited MPG" mode: puts and signals
    /// work; team splits and NVSHMEM's own collectives do not).
    pub fn shares_gpus(&self) -> bool {
        self.real_node_pes() > self.cuda_info().device_count
    }

    /// How long the runtime's waits may take (barriers, stream signal waits) before they fail
    /// with [`Error::Timeout`]; channels and allreduce workspaces created afterwards start with
    /// it too. From `NVSH_TIMEOUT_MS` at init (default 60 s).
    pub fn timeout(&self) -> Duration {
        self.timeout.get()
    }

    /// Sets [`Nvshmem::timeout`] (at least 1 ns is used).
    pub fn set_timeout(&self, timeout: Duration) {
        self.timeout.set(timeout);
    }

    /// What made the runtime give up on its peers (the first wait that timed out), if anything
    /// did. Once set, collective calls return [`Error::PeerFailed`], symmetric buffers are not
    /// freed and finalize is skipped: each would wait for the failed peer.
    pub fn peer_failure(&self) -> Option<String> {
        self.peer_failure.borrow().clone()
    }

    /// Records `err` as the peer failure if it is a timeout or shows the PEs out of step (the
    /// first one wins) and returns it.
    pub(crate) fn note(&self, err: Error) -> Error {
        let fails_peers = matches!(
            err,
            Error::Timeout { .. } | Error::CollectiveOutOfStep { .. }
        );
        if fails_peers && self.peer_failure.borrow().is_none() {
            *self.peer_failure.borrow_mut() = Some(err.to_string());
        }
        err
    }

    /// Records `cause` as the failure that ends collective work (the first one wins), for a
    /// failure that is not a timeout but leaves NVSHMEM unusable (its heap torn down).
    pub(crate) fn give_up(&self, cause: String) {
        if self.peer_failure.borrow().is_none() {
            *self.peer_failure.borrow_mut() = Some(cause);
        }
    }

    /// Passes `r` through, recording a timeout in it as the peer failure.
    pub(crate) fn noted<T>(&self, r: Result<T>) -> Result<T> {
        r.map_err(|e| self.note(e))
    }

    /// `Err(PeerFailed)` once a peer failure was recorded.
    pub(crate) fn check_peers(&self, what: &'static str) -> Result<()> {
        match self.peer_failure.borrow().as_ref() {
            None => Ok(()),
            Some(cause) => Err(Error::PeerFailed {
                what,
                cause: cause.clone(),
            }),
        }
    }

    /// Before a call of NVSHMEM that is collective over all PEs and waits inside without a
    /// deadline (malloc, free, finalize): every PE's `vote` reaches every PE within the
    /// runtime's deadline, so the PEs decide alike. Returns the first PE that voted no, and
    /// its number; `Ok(None)` means every PE goes in.
    ///
    /// Two barriers: the first delivers the votes (each barrier quiets first); the second
    /// keeps a PE that passed the first late, after a peer gave up on it, from entering
    /// NVSHMEM's call alone: the peer that gave up never arrives, so the late PE times out
    /// there too. (A PE that stalls for a whole timeout between the two can still get
    /// through; nothing bounded closes that.)
    pub(crate) fn agree_collective(
        &self,
        what: &'static str,
        vote: Vote,
    ) -> Result<Option<(i32, u64)>> {
        self.check_peers(what)?;
        self.bind()?;
        let n = self.n_pes.max(1) as usize;
        let me = self.my_pe as usize;
        let round = self.vote_round.get() + 1;
        self.vote_round.set(round);
        // Two banks: a PE can be one round ahead (it passed this round's barriers), not two.
        let bank = (round & 1) as usize * n * 2;
        let (no, detail) = match vote {
            Vote::Yes => (0, 0),
            Vote::No(d) => (1, d),
        };
        let mine = self.waits.votes.wrapping_add(bank + 2 * me);
        for pe in 0..n as i32 {
            // SAFETY: `mine` and `mine + 1` lie in the symmetric vote slots (4 * n words);
            // NVSHMEM is initialised while self lives and `pe` is a PE of the job.
            unsafe {
                sys::nvshmem_uint64_p(mine, detail, pe);
                sys::nvshmem_uint64_p(mine.add(1), round << 1 | no, pe);
            }
        }
        self.barrier_all()?;
        let mut words = vec![0u64; 2 * n];
        // SAFETY: this bank's 2 * n words of the local vote slots; the copy is synchronised
        // before `words` is read or dropped.
        unsafe {
            cudarc::driver::result::memcpy_dtoh_async(
                &mut words,
                self.waits.votes.wrapping_add(bank) as u64,
                self.stream.cu_stream(),
            )
        }?;
        self.stream.synchronize()?;
        let mut refusal = None;
        for (pe, slot) in words.chunks_exact(2).enumerate() {
            if slot[1] >> 1 != round {
                return Err(self.note(Error::CollectiveOutOfStep {
                    what,
                    peer: pe as i32,
                }));
            }
            if slot[1] & 1 == 1 && refusal.is_none() {
                refusal = Some((pe as i32, slot[0]));
            }
        }
        if refusal.is_none() {
            self.barrier_all()?;
        }
        Ok(refusal)
    }

    /// [`Nvshmem::agree_collective`] for a call every PE makes unless one refuses:
    /// `Err(CollectiveRefused)` naming it.
    pub(crate) fn enter_collective(&self, what: &'static str, vote: Vote) -> Result<()> {
        match self.agree_collective(what, vote)? {
            None => Ok(()),
            Some((pe, _)) => Err(Error::CollectiveRefused { what, pe }),
        }
    }

    /// Errors unless `pe` is a PE of this job.
    pub fn check_pe(&self, pe: i32) -> Result<()> {
        if (0..self.n_pes).contains(&pe) {
            Ok(())
        } else {
            Err(Error::InvalidPe {
                pe,
                n_pes: self.n_pes,
            })
        }
    }

    /// Runs one device thread that uses NVSHMEM's device API (my_pe, n_pes, a put to itself) and
    /// checks what it saw. Fails when the device state was not initialised for this binary's
    /// device-linked module.
    pub fn device_self_check(&self) -> Result<()> {
        self.bind()?;
        // SAFETY: NVSHMEM is initialised while self lives; self is !Send, so this is the
        // thread that holds the handle; the check's allocation is collective like every
        // method that allocates (every PE calls it at the same point).
        let (pe, n, value) = unsafe { result::device_self_check() }?;
        let expected = (self.my_pe, self.n_pes, 1000 + self.my_pe);
        if (pe, n, value) == expected {
            Ok(())
        } else {
            Err(Error::DeviceStateMismatch {
                expected,
                seen: (pe, n, value),
            })
        }
    }

    /// Finalises now and returns the symmetric buffers that were still alive (leaked with
    /// `mem::forget`); NVSHMEM releases them with the heap, so they are not freed again.
    pub fn finalize(mut self) -> Vec<LiveBuffer> {
        self.finalize_once()
    }

    fn finalize_once(&mut self) -> Vec<LiveBuffer> {
        if self.finalized {
            return Vec::new();
        }
        self.finalized = true;
        // Device work may still touch symmetric memory: let it finish before the heap goes
        // (bounded: every wait of the runtime's kernels has a deadline).
        let _ = self.ctx.synchronize();
        let leaked = leak::take_all();
        // NVSHMEM's finalize waits for every PE without a deadline: with a peer gone it would
        // never return. The process keeps the heap until it exits.
        match self.enter_collective("finalize", Vote::Yes) {
            Ok(()) => {}
            Err(Error::PeerFailed { .. }) => {
                // The cause was reported where it happened: say it short.
                log::warn!(
                    "PE {}: NVSHMEM finalize skipped after a peer failure (a \
                     timeout, reported where it happened); the GPU memory is released when the \
                     process exits",
                    self.my_pe
                );
                lifecycle(|state| *state = state.ended(false));
                return leaked;
            }
            Err(e) => {
                log::warn!("PE {}: NVSHMEM finalize skipped: {e}", self.my_pe);
                lifecycle(|state| *state = state.ended(false));
                return leaked;
            }
        }
        self.end_nodes();
        // SAFETY: NVSHMEM was initialised by this handle, which exists once; no buffer can be
        // used afterwards (they borrow the handle).
        unsafe { result::finalize() };
        lifecycle(|state| *state = state.ended(true));
        leaked
    }
}

impl Drop for Nvshmem {
    fn drop(&mut self) {
        let leaked = self.finalize_once();
        if !leaked.is_empty() {
            let bytes: usize = leaked.iter().map(|b| b.bytes).sum();
            log::warn!(
                "PE {}: {} symmetric buffer(s), {bytes} bytes, still alive at \
                 finalize (not freed twice; NVSHMEM releases them with the heap): {}",
                self.my_pe,
                leaked.len(),
                leaked
                    .iter()
                    .map(|b| format!("{}[{}] at {:#x}", b.elem, b.len, b.address))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
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

/// Refuses GPUs below [`MIN_COMPUTE_CAPABILITY`] before NVSHMEM touches them.
fn check_compute_capability(device: i32) -> Result<()> {
    use cudarc::driver::sys::CUdevice_attribute as A;
    cudarc::driver::result::init()?;
    let dev = cudarc::driver::result::device::get(device)?;
    // SAFETY: a device handle just obtained; plain attribute queries.
    let (major, minor) = unsafe {
        (
            cudarc::driver::result::device::get_attribute(
                dev,
                A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
            )?,
            cudarc::driver::result::device::get_attribute(
                dev,
                A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
            )?,
        )
    };
    compute_capability_supported(device, (major, minor), BUILT_ARCHS, || {
        cudarc::driver::result::device::get_name(dev).unwrap_or_else(|_| "unknown".into())
    })
}

/// The compute capabilities the device code was built for ("80,90"), as nvshmem-sys's build
/// script reported them (build.rs passes them on); None when it did not.
const BUILT_ARCHS: Option<&str> = option_env!("NVSHMEM_RS_BUILT_ARCHS");

/// The check behind [`check_compute_capability`], without a GPU: at least
/// [`MIN_COMPUTE_CAPABILITY`], and device code in the binary the GPU can run. A cubin for
/// sm_XY runs on GPUs of major X and minor Y or more (so sm_80 code runs on 8.6 and 8.9, but
/// neither sm_80 nor sm_90 code runs on 10.0 or 12.0).
fn compute_capability_supported(
    device: i32,
    (major, minor): (i32, i32),
    built: Option<&str>,
    name: impl FnOnce() -> String,
) -> Result<()> {
    if (major, minor) < MIN_COMPUTE_CAPABILITY {
        return Err(Error::ComputeCapability {
            device,
            name: name(),
            major,
            minor,
        });
    }
    let Some(built) = built else { return Ok(()) };
    let archs: Vec<i32> = built
        .split([',', ';'])
        .filter_map(|a| a.trim().parse().ok())
        .collect();
    if archs.iter().any(|&a| a / 10 == major && a % 10 <= minor) {
        return Ok(());
    }
    Err(Error::UnsupportedArchitecture {
        device,
        name: name(),
        major,
        minor,
        built: archs
            .iter()
            .map(|a| format!("sm_{a}"))
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// Refuses to run with an NVSHMEM host library of another version than the headers and device
/// library the binary was built with: their device state layouts differ.
fn check_library_version(compiled: (i32, i32, i32), loaded: (i32, i32, i32)) -> Result<()> {
    if compiled == loaded {
        return Ok(());
    }
    Err(Error::LibraryVersion {
        compiled: crate::core::version_string(compiled),
        loaded: crate::core::version_string(loaded),
    })
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

    #[test]
    fn gpus_below_compute_capability_8_are_refused() {
        let built = Some("80,90");
        assert!(compute_capability_supported(0, (8, 0), built, || "A100".into()).is_ok());
        assert!(compute_capability_supported(0, (9, 0), built, || "H200".into()).is_ok());
        let err =
            compute_capability_supported(1, (7, 0), built, || "Tesla V100".into()).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("7.0") && text.contains("8.0") && text.contains("Tesla V100"),
            "{text}"
        );
    }

    #[test]
    fn gpus_without_device_code_in_the_binary_are_refused_at_init() {
        let built = Some("80,90");
        // sm_80 code runs on every 8.x GPU.
        assert!(compute_capability_supported(0, (8, 6), built, || "A40".into()).is_ok());
        assert!(compute_capability_supported(0, (8, 9), built, || "L40S".into()).is_ok());
        for (cc, name) in [((10, 0), "B200"), ((12, 0), "RTX PRO 6000")] {
            let err = compute_capability_supported(2, cc, built, || name.into()).unwrap_err();
            assert!(
                matches!(err, Error::UnsupportedArchitecture { .. }),
                "{err:?}"
            );
            let text = err.to_string();
            assert!(
                text.contains("sm_80, sm_90")
                    && text.contains(name)
                    && text.contains("NVSHMEM_RS_CUDA_ARCHS"),
                "{text}"
            );
        }
        // A binary built for 9.0 alone does not run on 8.0.
        assert!(compute_capability_supported(0, (8, 0), Some("90"), || "A100".into()).is_err());
        // The build script of this very build said what it carries.
        assert!(
            BUILT_ARCHS.is_some_and(|a| a.contains("90")),
            "{BUILT_ARCHS:?}"
        );
    }

    #[test]
    fn the_lifecycle_allows_one_nvshmem_per_process() {
        use Lifecycle::*;
        // A failure before NVSHMEM's init may be retried.
        let s = Uninit.begin_init().unwrap();
        assert_eq!(s, Initializing);
        assert_eq!(s.init_failed(false), Uninit);
        // A failure after it (NVSHMEM was finalised again) may not: no second NVSHMEM init.
        assert_eq!(s.init_failed(true), Finalized);
        assert!(matches!(
            Initializing.begin_init(),
            Err(Error::AlreadyInitialized)
        ));
        assert!(matches!(Live.begin_init(), Err(Error::AlreadyInitialized)));
        // init -> finalize -> init is refused.
        assert_eq!(Live.ended(true), Finalized);
        let err = Finalized.begin_init().unwrap_err();
        assert!(
            matches!(err, Error::InitAfterFinalize { abandoned: false }),
            "{err:?}"
        );
        assert!(err.to_string().contains("once per process"), "{err}");
        // A skipped finalize leaves NVSHMEM up: refused too.
        assert_eq!(Live.ended(false), Abandoned);
        assert!(matches!(
            Abandoned.begin_init(),
            Err(Error::InitAfterFinalize { abandoned: true })
        ));
    }

    #[test]
    fn another_nvshmem_library_version_is_refused_by_name() {
        assert!(check_library_version((3, 4, 5), (3, 4, 5)).is_ok());
        let err = check_library_version((3, 4, 5), (3, 3, 9)).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, Error::LibraryVersion { .. }), "{err:?}");
        assert!(
            text.contains("3.4.5") && text.contains("3.3.9") && text.contains("LD_LIBRARY_PATH"),
            "{text}"
        );
    }
}
