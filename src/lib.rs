//! Safe Rust runtime over NVIDIA NVSHMEM.
//!
//! Layers, as in cudarc: [`sys`] (raw bindings), [`result`] (one call each, status codes turned
//! into [`Result`]), then RAII types such as [`Nvshmem`].

pub mod bootstrap;
pub mod error;
pub mod launcher;
pub mod result;
pub mod runtime;

/// Raw bindings (re-export of the `nvshmem-sys` crate).
pub mod sys {
    pub use nvshmem_sys::*;
}

pub use error::{Error, Result};
pub use runtime::Nvshmem;

/// "major.minor.patch" of a version triple.
pub fn version_string((major, minor, patch): (i32, i32, i32)) -> String {
    format!("{major}.{minor}.{patch}")
}
