//! The runtime on the thread that called init(), what the bindings keep beside it, and the
//! calls of its lifecycle: init, finalize, the PE's place in the job.

use crate::error::{raise, runtime_error};
use crate::release::{self, CollectError};
use crate::state::{State, Workspaces};
use nvshmem::tools::bootstrap;
use nvshmem::Nvshmem;
use nvshmem::{launcher_env, Bootstrap};
use pyo3::exceptions::{PyRuntimeWarning, PyValueError};
use pyo3::prelude::*;
use std::cell::RefCell;
use std::ffi::CString;
use std::sync::Mutex;
use std::thread::ThreadId;

thread_local! {
    /// The runtime, on the thread that initialised it: an `Nvshmem` stays on its thread (its
    /// CUDA context is bound there and NVSHMEM runs with thread level SERIALIZED).
    pub(crate) static RUNTIME: RefCell<Option<Held>> = const { RefCell::new(None) };
}

/// The runtime as its thread holds it, with what Python made over it. Its end, by finalize()
/// or by the thread's exit (thread locals are dropped then), also clears [`OWNER`].
pub(crate) struct Held {
    /// Leaked from a Box at init and taken back in Drop, so that the symmetric buffers and
    /// workspaces in `state` may borrow it for 'static: they end (or are forgotten) first.
    nv: &'static Nvshmem,
    pub(crate) state: RefCell<State>,
}

impl Drop for Held {
    fn drop(&mut self) {
        let state = self.state.get_mut();
        // The workspaces first: their drops free symmetric memory collectively, which needs
        // the runtime. Buffers Python still holds are forgotten: NVSHMEM releases them with
        // the heap, and the library's finalize warns of them.
        state.colls = Workspaces::default();
        state.release = None;
        // Sparse allreduces, teams (their workspaces, then the team) and channels too, each
        // in id order: the order every PE made them in. Sparse allreduces before teams: one
        // may run over a team.
        while state.sparse.pop_first().is_some() {}
        while state.teams.pop_first().is_some() {}
        while state.channels.pop_first().is_some() {}
        state.buffers.forget_all();
        release::clear();
        *owner() = None;
        // SAFETY: `nv` came from Box::leak in init() and is taken back once, here. Nothing
        // borrows it any more: the workspaces are dropped and the buffers forgotten above,
        // and calls borrow it only inside with_runtime and with_state, which hold the thread
        // local that is being emptied now. The handle's Drop finalises NVSHMEM (and MPI, if
        // init started it).
        drop(unsafe { Box::from_raw(std::ptr::from_ref(self.nv).cast_mut()) });
    }
}

/// The thread that holds the runtime, so that a call from another thread says so instead of
/// claiming that nothing was initialised.
static OWNER: Mutex<Option<ThreadId>> = Mutex::new(None);

fn owner() -> std::sync::MutexGuard<'static, Option<ThreadId>> {
    // One Copy value: a panic elsewhere cannot leave it half-written.
    OWNER.lock().unwrap_or_else(|p| p.into_inner())
}

/// Why `what` cannot run on this thread: nothing initialised, or another thread holds it.
fn not_here(py: Python<'_>, what: &str) -> PyErr {
    match *owner() {
        Some(id) => raise(
            py,
            "WrongThread",
            format!(
                "{what}: the runtime was initialised on another thread ({id:?}) and stays \
                 there; call nvshmem_rs from the thread that called init()"
            ),
        ),
        None => raise(
            py,
            "NotInitialized",
            format!("{what}: the runtime is not initialised; call nvshmem_rs.init() first"),
        ),
    }
}

/// Runs `f` on this thread's runtime.
fn with_runtime<R>(py: Python<'_>, what: &str, f: impl FnOnce(&Nvshmem) -> R) -> PyResult<R> {
    RUNTIME
        .with_borrow(|rt| rt.as_ref().map(|held| f(held.nv)))
        .ok_or_else(|| not_here(py, what))
}

/// Runs `f` on this thread's runtime and the bindings' state beside it.
pub(crate) fn with_state<R>(
    py: Python<'_>,
    what: &str,
    f: impl FnOnce(&'static Nvshmem, &mut State) -> PyResult<R>,
) -> PyResult<R> {
    RUNTIME.with_borrow(|rt| {
        let held = rt.as_ref().ok_or_else(|| not_here(py, what))?;
        // Only reentry can find it borrowed (no call of the bindings runs Python code).
        let mut state = held.state.try_borrow_mut().map_err(|_| {
            raise(
                py,
                "Busy",
                format!("{what}: called while another call of nvshmem_rs runs on this thread"),
            )
        })?;
        f(held.nv, &mut state)
    })
}

/// As [`with_state`], for a call that is a collection point (release.rs): first frees what
/// every PE has released, then runs `f`. Every call that creates symmetric objects is one.
pub(crate) fn with_collected_state<R>(
    py: Python<'_>,
    what: &str,
    f: impl FnOnce(&'static Nvshmem, &mut State) -> PyResult<R>,
) -> PyResult<R> {
    with_state(py, what, |nv, state| {
        collected(py, nv, state)?;
        f(nv, state)
    })
}

/// Runs the collection point on the state; returns how many objects were freed.
fn collected(py: Python<'_>, nv: &'static Nvshmem, state: &mut State) -> PyResult<usize> {
    let State {
        buffers,
        sparse,
        channels,
        teams,
        release: control,
        ..
    } = state;
    // Each drop is the library's: a collective free after the device's work.
    let free = |seq| {
        if let Some(b) = buffers.take(seq) {
            drop(b);
        } else if let Some(s) = sparse.remove(&seq) {
            drop(s);
        } else if let Some(c) = channels.remove(&seq) {
            drop(c);
        } else if let Some(t) = teams.remove(&seq) {
            drop(t);
        }
    };
    release::collect(nv, control, free).map_err(|e| match e {
        CollectError::Runtime(e) => runtime_error(py, e),
        CollectError::OutOfStep(text) => raise(py, "CollectiveOutOfStep", text),
    })
}

/// Frees, collectively, the symmetric objects (buffers and tensors over them, teams,
/// channels, sparse allreduces) that every PE has released; returns how many. Collective:
/// every PE calls it at the same point. Creations, `barrier_all()` and `finalize()` do the
/// same, so calling it is only needed to free memory earlier.
#[pyfunction]
pub(crate) fn collect(py: Python<'_>) -> PyResult<usize> {
    with_state(py, "collect", |nv, state| collected(py, nv, state))
}

/// How many symmetric objects this PE has released that are not freed yet (they wait for
/// every PE to release them, and for a collection point).
#[pyfunction]
pub(crate) fn pending_releases() -> usize {
    release::queued().len()
}

/// The agreed-release exchange without a GPU, for tests: every PE's released sequence
/// numbers in, (what is freed, newest first; rounds of the exchange) out. `created`: each
/// PE's count of created objects (default: the same on every PE).
#[pyfunction]
#[pyo3(signature = (queues, created = None))]
pub(crate) fn _simulate_release(
    queues: Vec<Vec<u64>>,
    created: Option<Vec<u64>>,
) -> PyResult<(Vec<u64>, usize)> {
    let created = created.unwrap_or_else(|| vec![0; queues.len()]);
    if created.len() != queues.len() {
        return Err(PyValueError::new_err("one created count per PE"));
    }
    let queues: Vec<Vec<u64>> = queues
        .into_iter()
        .map(|mut q| {
            q.sort_unstable();
            q.dedup();
            q
        })
        .collect();
    release::simulate(&queues, &created).map_err(PyValueError::new_err)
}

/// The bootstrap a Python caller named, as `NVSH_BOOTSTRAP` spells them.
fn parse_bootstrap(name: &str) -> PyResult<Bootstrap> {
    match name {
        "auto" => Ok(Bootstrap::Auto),
        "launcher" => Ok(Bootstrap::Launcher),
        "mpi" => Ok(Bootstrap::Mpi),
        "single" => Ok(Bootstrap::Single),
        other => Err(PyValueError::new_err(format!(
            "bootstrap {other:?} is not one of \"auto\", \"launcher\", \"mpi\", \"single\" \
             (or None: NVSH_BOOTSTRAP decides, as Nvshmem::init does)"
        ))),
    }
}

/// The refusals of the automatic bootstrap that need no GPU, in the order `Nvshmem::init` meets
/// them. The library probes CUDA first, so without this a machine with no GPU would report the
/// missing driver instead of the launcher it cannot work under (torchrun).
fn refusals_before_cuda(choice: Bootstrap) -> nvshmem::Result<()> {
    if choice != Bootstrap::Auto || launcher_env()?.is_some() {
        return Ok(());
    }
    match bootstrap::step_env() {
        Some(step) if step.size > 1 => step.check_mpi_capable(),
        _ => Ok(()),
    }
}

/// Initialises NVSHMEM for this process, as `Nvshmem::init` does: under `nvsh run` from its
/// environment, under mpirun/srun over MPI (a build with the `mpi` feature), else as the only
/// PE. `bootstrap` ("auto", "launcher", "mpi", "single") overrides `NVSH_BOOTSTRAP`. The
/// runtime belongs to the calling thread; NVSHMEM comes up once per process.
#[pyfunction]
#[pyo3(signature = (bootstrap = None))]
pub(crate) fn init(py: Python<'_>, bootstrap: Option<&str>) -> PyResult<()> {
    let choice = match bootstrap {
        Some(name) => parse_bootstrap(name)?,
        None => Bootstrap::from_env().map_err(|e| runtime_error(py, e))?,
    };
    refusals_before_cuda(choice).map_err(|e| runtime_error(py, e))?;
    let nv = Nvshmem::init_with(choice).map_err(|e| runtime_error(py, e))?;
    *owner() = Some(std::thread::current().id());
    let held = Held {
        nv: Box::leak(Box::new(nv)),
        state: RefCell::new(State::default()),
    };
    RUNTIME.with_borrow_mut(|rt| *rt = Some(held));
    Ok(())
}

/// Finalises NVSHMEM (collective: every PE calls it). Does nothing when the runtime was never
/// initialised or has ended; NVSHMEM cannot come up again in this process afterwards. Warns
/// (RuntimeWarning) when symmetric buffers or tensors over them are still referenced: their
/// memory goes with the heap, so they must not be used afterwards.
#[pyfunction]
pub(crate) fn finalize(py: Python<'_>) -> PyResult<()> {
    // Taken out first: the finalize below runs with no borrow of the thread local held.
    // A collection point (every PE calls finalize at the same point): what every PE
    // released is freed; what some PE still holds goes with the heap.
    let collect_failed = RUNTIME.with_borrow(|rt| {
        let held = rt.as_ref()?;
        let mut state = held.state.try_borrow_mut().ok()?;
        collected(py, held.nv, &mut state).err()
    });
    if let Some(err) = collect_failed {
        log::warn!("finalize: the agreed release of symmetric objects failed ({err}); they go with the heap");
    }
    match RUNTIME.with_borrow_mut(Option::take) {
        Some(held) => {
            let live = held
                .state
                .borrow()
                .buffers
                .live_not_queued(release::is_queued);
            drop(held);
            if live > 0 {
                let warning = py.get_type::<PyRuntimeWarning>();
                let text = format!(
                    "finalize: {live} symmetric buffer(s) still referenced (SymmetricBuffer \
                     objects or tensors over them); their memory was released with the heap, \
                     so they must not be used any more"
                );
                PyErr::warn(py, &warning, &CString::new(text)?, 1)?;
            }
            Ok(())
        }
        None if owner().is_some() => Err(not_here(py, "finalize")),
        None => Ok(()),
    }
}

/// Whether this thread holds a live runtime.
#[pyfunction]
pub(crate) fn is_initialized() -> bool {
    RUNTIME.with_borrow(Option::is_some)
}

/// This PE's number, 0 ..= world_size() - 1.
#[pyfunction]
pub(crate) fn rank(py: Python<'_>) -> PyResult<i32> {
    with_runtime(py, "rank", Nvshmem::my_pe)
}

/// The number of PEs in the job.
#[pyfunction]
pub(crate) fn world_size(py: Python<'_>) -> PyResult<i32> {
    with_runtime(py, "world_size", Nvshmem::n_pes)
}

/// This PE's rank among the PEs of its node (it chose the GPU).
#[pyfunction]
pub(crate) fn local_rank(py: Python<'_>) -> PyResult<i32> {
    with_runtime(py, "local_rank", Nvshmem::local_rank)
}

/// The CUDA device this PE runs on (for torch.cuda.set_device).
#[pyfunction]
pub(crate) fn device(py: Python<'_>) -> PyResult<i32> {
    with_runtime(py, "device", Nvshmem::device)
}

/// A fresh NVSHMEM unique ID, hex-encoded as `nvsh run` passes it in `NVSH_UNIQUE_ID` (needs no
/// GPU and no init). One process of a job makes it and hands it to the others through a store
/// they share, as NCCL's unique ID is handed round (`init_with_store` in the package).
#[pyfunction]
pub(crate) fn unique_id(py: Python<'_>) -> PyResult<String> {
    nvshmem::result::get_unique_id()
        .map(|id| bootstrap::encode_hex(&bootstrap::unique_id_bytes(&id)))
        .map_err(|e| runtime_error(py, e))
}

/// The version of the NVSHMEM host library loaded (needs no GPU and no init).
#[pyfunction]
pub(crate) fn nvshmem_version() -> String {
    nvshmem::version_string(nvshmem::result::host_library_version())
}
