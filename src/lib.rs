//! Safe Rust runtime over NVIDIA NVSHMEM.
//!
//! Layers, as in cudarc: [`sys`] (raw bindings), [`result`] (one call each, status codes turned
//! into [`Result`]), then RAII types such as [`Nvshmem`] and [`SymmetricBuffer`].
//!
//! ```no_run
//! use nvshmem::{Cmp, LaunchShape, Nvshmem, SignalOp};
//! use std::time::Duration;
//!
//! # fn main() -> nvshmem::Result<()> {
//! let nv = Nvshmem::init()?; // launcher env, MPI env or 1 PE; selects the GPU
//! let (me, n) = (nv.my_pe(), nv.n_pes());
//! let src = nv.alloc::<f32>(1 << 20)?; // symmetric: the same buffer on every PE
//! let dst = nv.alloc_zeroed::<f32>(1 << 20)?;
//! let sig = nv.alloc_zeroed::<u64>(1)?;
//! src.copy_from_host(&vec![me as f32; 1 << 20])?;
//! nv.barrier_all()?;
//! // The GPU moves the data and raises the signal after it; no host round trip.
//! let shape = LaunchShape::for_bytes(4 << 20);
//! nv.put_signal_device(&dst, &src, &sig, 1, SignalOp::Add, (me + 1) % n, shape, nv.stream())?;
//! nv.signal_wait_until(&sig, Cmp::Ge, 1, Duration::from_secs(10))?;
//! let got = dst.to_vec()?; // the previous PE's values
//! # let _ = got;
//! # Ok(())
//! # }
//! ```

pub mod allreduce;
pub mod bench_allreduce;
pub mod bench_put;
pub mod bootstrap;
pub mod buffer;
pub mod channel;
pub mod deadline;
pub mod device_put;
pub mod doctor;
pub mod element;
mod env_value;
pub mod error;
pub mod launcher;
pub mod leak;
#[cfg(feature = "mpi")]
mod mpi_bootstrap;
pub mod nccl_baseline;
mod ordering;
pub mod result;
mod rma;
pub mod runtime;
pub mod signal;
pub mod soak;
mod stream_rma;
pub mod team;

/// Raw bindings (re-export of the `nvshmem-sys` crate).
pub mod sys {
    pub use nvshmem_sys::*;
}

pub use allreduce::{Allreduce, AllreduceAlgo, ReduceOp, Reducible};
pub use bootstrap::Bootstrap;
pub use buffer::{SymView, SymmetricBuffer};
pub use channel::{Channel, Received};
pub use device_put::{Completion, LaunchShape};
pub use element::{Atomic64, Dtype, Element};
pub use error::{Error, Result};
pub use runtime::Nvshmem;
pub use signal::{Cmp, SignalOp};
pub use team::Team;

/// "major.minor.patch" of a version triple.
pub fn version_string((major, minor, patch): (i32, i32, i32)) -> String {
    format!("{major}.{minor}.{patch}")
}
