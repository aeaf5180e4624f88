//! Python bindings of the runtime: the extension module `nvshmem_rs._native`, which the package's
//! Python part (`python/nvshmem_rs/`) re-exports. This first slice covers init and finalize, the
//! PE's place in the job, the dtype table and errors; symmetric tensors and collectives are not
//! bound yet (python/README.md).
//!
//! Every runtime error reaches Python as `nvshmem_rs.NvshmemError` with the Rust error's text:
//! the bindings never panic across the boundary and never abort the process.

use nvshmem::bootstrap::{self, Bootstrap};
use nvshmem::{Dtype, Nvshmem};
use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyString;
use std::cell::RefCell;
use std::sync::Mutex;
use std::thread::ThreadId;

create_exception!(
    nvshmem_rs,
    NvshmemError,
    PyRuntimeError,
    "An error of the runtime. Its message is the Rust error's text; `kind` names the variant of \
     nvshmem::Error (\"BootstrapUnavailable\", \"NoCudaDriver\", ...) or, for the bindings' own \
     errors, \"NotInitialized\" or \"WrongThread\"."
);

thread_local! {
    /// The runtime, on the thread that initialised it: an `Nvshmem` stays on its thread (its
    /// CUDA context is bound there and NVSHMEM runs with thread level SERIALIZED).
    static RUNTIME: RefCell<Option<Held>> = const { RefCell::new(None) };
}

/// The runtime as its thread holds it. Its end, by finalize() or by the thread's exit (thread
/// locals are dropped then), also clears [`OWNER`].
struct Held(Nvshmem);

impl Drop for Held {
    fn drop(&mut self) {
        *owner() = None;
        // Then the field drops: the handle's Drop finalises NVSHMEM (and MPI, if init started
        // it).
    }
}

/// The thread that holds the runtime, so that a call from another thread says so instead of
/// claiming that nothing was initialised.
static OWNER: Mutex<Option<ThreadId>> = Mutex::new(None);

fn owner() -> std::sync::MutexGuard<'static, Option<ThreadId>> {
    // One Copy value: a panic elsewhere cannot leave it half-written.
    OWNER.lock().unwrap_or_else(|p| p.into_inner())
}

/// An `NvshmemError` with `message` and `kind`.
fn raise(py: Python<'_>, kind: &str, message: String) -> PyErr {
    let err = NvshmemError::new_err(message);
    match err.value(py).setattr("kind", kind) {
        Ok(()) => err,
        Err(e) => e,
    }
}

/// The runtime's error as an `NvshmemError`: its Display text unchanged, its variant as `kind`.
fn runtime_error(py: Python<'_>, err: nvshmem::Error) -> PyErr {
    // The variant's name is where its Debug form starts ("BootstrapUnavailable { reason: ..").
    let debug = format!("{err:?}");
    let kind: String = debug
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect();
    raise(py, &kind, err.to_string())
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
        .with_borrow(|rt| rt.as_ref().map(|held| f(&held.0)))
        .ok_or_else(|| not_here(py, what))
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
    if choice != Bootstrap::Auto || bootstrap::launcher_env()?.is_some() {
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
fn init(py: Python<'_>, bootstrap: Option<&str>) -> PyResult<()> {
    let choice = match bootstrap {
        Some(name) => parse_bootstrap(name)?,
        None => Bootstrap::from_env().map_err(|e| runtime_error(py, e))?,
    };
    refusals_before_cuda(choice).map_err(|e| runtime_error(py, e))?;
    let nv = Nvshmem::init_with(choice).map_err(|e| runtime_error(py, e))?;
    *owner() = Some(std::thread::current().id());
    RUNTIME.with_borrow_mut(|rt| *rt = Some(Held(nv)));
    Ok(())
}

/// Finalises NVSHMEM (collective: every PE calls it). Does nothing when the runtime was never
/// initialised or has ended; NVSHMEM cannot come up again in this process afterwards.
#[pyfunction]
fn finalize(py: Python<'_>) -> PyResult<()> {
    // Taken out first: the finalize below runs with no borrow of the thread local held.
    match RUNTIME.with_borrow_mut(Option::take) {
        Some(held) => {
            drop(held);
            Ok(())
        }
        None if owner().is_some() => Err(not_here(py, "finalize")),
        None => Ok(()),
    }
}

/// Whether this thread holds a live runtime.
#[pyfunction]
fn is_initialized() -> bool {
    RUNTIME.with_borrow(Option::is_some)
}

/// This PE's number, 0 ..= world_size() - 1.
#[pyfunction]
fn rank(py: Python<'_>) -> PyResult<i32> {
    with_runtime(py, "rank", Nvshmem::my_pe)
}

/// The number of PEs in the job.
#[pyfunction]
fn world_size(py: Python<'_>) -> PyResult<i32> {
    with_runtime(py, "world_size", Nvshmem::n_pes)
}

/// This PE's rank among the PEs of its node (it chose the GPU).
#[pyfunction]
fn local_rank(py: Python<'_>) -> PyResult<i32> {
    with_runtime(py, "local_rank", Nvshmem::local_rank)
}

/// The CUDA device this PE runs on (for torch.cuda.set_device).
#[pyfunction]
fn device(py: Python<'_>) -> PyResult<i32> {
    with_runtime(py, "device", Nvshmem::device)
}

/// The version of the NVSHMEM host library loaded (needs no GPU and no init).
#[pyfunction]
fn nvshmem_version() -> String {
    nvshmem::version_string(nvshmem::result::host_library_version())
}

/// PyTorch's name of a dtype. Exhaustive, so that a dtype added to the library fails to
/// compile here until it has one.
fn torch_name(dtype: Dtype) -> &'static str {
    match dtype {
        Dtype::F32 => "float32",
        Dtype::F64 => "float64",
        Dtype::F16 => "float16",
        Dtype::Bf16 => "bfloat16",
        Dtype::I32 => "int32",
        Dtype::I64 => "int64",
        Dtype::U32 => "uint32",
        Dtype::U64 => "uint64",
        Dtype::U8 => "uint8",
    }
}

/// The library's names, for messages.
fn known() -> String {
    let names: Vec<&str> = Dtype::ALL.iter().map(|d| d.name()).collect();
    names.join(", ")
}

fn lookup(name: &str) -> PyResult<Dtype> {
    Dtype::ALL
        .iter()
        .copied()
        .find(|d| d.name() == name)
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "unknown dtype {name:?}: the library's dtypes are {}",
                known()
            ))
        })
}

/// Every dtype as (library name, torch name, bytes per element), in the library's order.
#[pyfunction]
fn dtypes() -> Vec<(&'static str, &'static str, usize)> {
    Dtype::ALL
        .iter()
        .map(|&d| (d.name(), torch_name(d), d.size()))
        .collect()
}

/// The torch name ("bfloat16") of a library dtype ("bf16").
#[pyfunction]
fn torch_dtype_name(dtype: &str) -> PyResult<&'static str> {
    lookup(dtype).map(torch_name)
}

/// The library dtype ("bf16") of a torch dtype, given by name ("bfloat16", "torch.bfloat16")
/// or as a torch.dtype object (read through str(), so torch is never imported here).
#[pyfunction]
fn dtype_from_torch(dtype: &Bound<'_, PyAny>) -> PyResult<&'static str> {
    let text = if let Ok(s) = dtype.cast::<PyString>() {
        s.to_str()?.to_owned()
    } else if dtype
        .get_type()
        .getattr("__module__")?
        .extract::<String>()
        .is_ok_and(|m| m == "torch")
    {
        dtype.str()?.to_str()?.to_owned()
    } else {
        return Err(PyTypeError::new_err(format!(
            "dtype_from_torch takes a torch dtype name (\"bfloat16\") or a torch.dtype, not {}",
            dtype.get_type().name()?
        )));
    };
    let name = text.strip_prefix("torch.").unwrap_or(&text);
    Dtype::ALL
        .iter()
        .find(|&&d| torch_name(d) == name)
        .map(|d| d.name())
        .ok_or_else(|| {
            let torch: Vec<&str> = Dtype::ALL.iter().map(|&d| torch_name(d)).collect();
            PyValueError::new_err(format!(
                "torch dtype {text:?} has no counterpart in the library; it takes {}",
                torch.join(", ")
            ))
        })
}

/// Bytes per element of a library dtype.
#[pyfunction]
fn dtype_size(dtype: &str) -> PyResult<usize> {
    lookup(dtype).map(Dtype::size)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // As the nvsh binaries do: the library's warnings show, RUST_LOG=info or debug for more.
    // A logger set up already (another extension of the process) stays.
    let _ = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .try_init();
    let py = m.py();
    let error = py.get_type::<NvshmemError>();
    // None on instances raised by hand, NvshmemError("...").
    error.setattr("kind", py.None())?;
    m.add("NvshmemError", error)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(init, m)?)?;
    m.add_function(wrap_pyfunction!(finalize, m)?)?;
    m.add_function(wrap_pyfunction!(is_initialized, m)?)?;
    m.add_function(wrap_pyfunction!(rank, m)?)?;
    m.add_function(wrap_pyfunction!(world_size, m)?)?;
    m.add_function(wrap_pyfunction!(local_rank, m)?)?;
    m.add_function(wrap_pyfunction!(device, m)?)?;
    m.add_function(wrap_pyfunction!(nvshmem_version, m)?)?;
    m.add_function(wrap_pyfunction!(dtypes, m)?)?;
    m.add_function(wrap_pyfunction!(torch_dtype_name, m)?)?;
    m.add_function(wrap_pyfunction!(dtype_from_torch, m)?)?;
    m.add_function(wrap_pyfunction!(dtype_size, m)?)?;
    Ok(())
}
