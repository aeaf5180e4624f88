//! Python bindings of the runtime: the extension module `nvshmem_rs._native`, which the package's
//! Python part (`python/nvshmem_rs/`) re-exports: init and finalize, the PE's place in the job
//! (runtime.rs), the dtype table (dtypes.rs), symmetric allocations exported to torch by DLPack
//! (memory.rs, dlpack.rs), the collectives on CUDA tensors in the caller's stream order
//! (coll.rs; those whose sizes differ between members and grouped send/recv: vcoll.rs), over
//! the world or a split team (teams.rs), the tuner (tune.rs), the sparse allreduce
//! (sparse.rs), and pipeline channels (channel.rs).
//!
//! Every runtime error reaches Python as `nvshmem_rs.NvshmemError` with the Rust error's text
//! (error.rs): the bindings never panic across the boundary and never abort the process.

mod channel;
mod coll;
mod dlpack;
mod dtypes;
mod error;
mod memory;
mod release;
mod runtime;
mod sparse;
mod state;
mod teams;
mod tune;
mod vcoll;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // As the nvsh binaries do: the library's warnings show, RUST_LOG=info or debug for more.
    // A logger set up already (another extension of the process) stays.
    let _ = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .try_init();
    let py = m.py();
    let error = py.get_type::<error::NvshmemError>();
    // None on instances raised by hand, NvshmemError("...").
    error.setattr("kind", py.None())?;
    m.add("NvshmemError", error)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(runtime::init, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::finalize, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::is_initialized, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::rank, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::world_size, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::local_rank, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::device, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::nvshmem_version, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::unique_id, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::collect, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::pending_releases, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::_simulate_release, m)?)?;
    m.add_function(wrap_pyfunction!(coll::configure, m)?)?;
    m.add_function(wrap_pyfunction!(coll::_allreduce_host_loop, m)?)?;
    m.add_function(wrap_pyfunction!(dtypes::dtypes, m)?)?;
    m.add_function(wrap_pyfunction!(dtypes::torch_dtype_name, m)?)?;
    m.add_function(wrap_pyfunction!(dtypes::dtype_from_torch, m)?)?;
    m.add_function(wrap_pyfunction!(dtypes::dtype_size, m)?)?;
    m.add_class::<memory::SymmetricBuffer>()?;
    m.add_function(wrap_pyfunction!(memory::alloc, m)?)?;
    m.add_function(wrap_pyfunction!(coll::allreduce, m)?)?;
    m.add_function(wrap_pyfunction!(coll::broadcast, m)?)?;
    m.add_function(wrap_pyfunction!(coll::reduce, m)?)?;
    m.add_function(wrap_pyfunction!(coll::allgather, m)?)?;
    m.add_function(wrap_pyfunction!(coll::reduce_scatter, m)?)?;
    m.add_function(wrap_pyfunction!(coll::alltoall, m)?)?;
    m.add_function(wrap_pyfunction!(coll::barrier, m)?)?;
    m.add_function(wrap_pyfunction!(coll::barrier_all, m)?)?;
    m.add_function(wrap_pyfunction!(coll::check, m)?)?;
    m.add_function(wrap_pyfunction!(vcoll::allgatherv, m)?)?;
    m.add_function(wrap_pyfunction!(vcoll::alltoallv, m)?)?;
    m.add_function(wrap_pyfunction!(vcoll::grouped_p2p, m)?)?;
    m.add_function(wrap_pyfunction!(vcoll::reserve_staging, m)?)?;
    m.add_class::<channel::Channel>()?;
    m.add_function(wrap_pyfunction!(tune::tune_allreduce, m)?)?;
    m.add_class::<teams::PyTeam>()?;
    m.add_function(wrap_pyfunction!(teams::split_strided, m)?)?;
    m.add_class::<sparse::PySparse>()?;
    m.add_function(wrap_pyfunction!(dlpack::_dlpack_probe, m)?)?;
    m.add_function(wrap_pyfunction!(dlpack::_dlpack_probes_released, m)?)?;
    Ok(())
}
