//! Safe Rust runtime over NVIDIA NVSHMEM.
//!
//! Layers, as in cudarc: [`sys`] (raw bindings), [`result`] (one call each, status codes turned
//! into [`Result`]), then RAII types such as [`Nvshmem`].

pub mod bench_put;
pub mod bootstrap;
pub mod buffer;
pub mod device_put;
pub mod doctor;
pub mod element;
pub mod error;
pub mod launcher;
pub mod leak;
#[cfg(feature = "mpi")]
mod mpi_bootstrap;
mod ordering;
pub mod result;
mod rma;
pub mod runtime;
pub mod signal;
mod stream_rma;
pub mod team;

/// Raw bindings (re-export of the `nvshmem-sys` crate).
pub mod sys {
    pub use nvshmem_sys::*;
}

pub use bootstrap::Bootstrap;
pub use buffer::{SymView, SymmetricBuffer};
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
