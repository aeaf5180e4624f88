//! The bindings' errors: `NvshmemError`, raised with the Rust error's text and its variant's
//! name as `kind`.

use pyo3::create_exception;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

create_exception!(
    nvshmem_rs,
    NvshmemError,
    PyRuntimeError,
    "An error of the runtime. Its message is the Rust error's text; `kind` names the variant of \
     nvshmem::Error (\"BootstrapUnavailable\", \"NoCudaDriver\", ...) or, for the bindings' own \
     errors, \"NotInitialized\", \"WrongThread\", \"WrongDevice\" (a tensor of another GPU), \
     \"Finalized\" (a buffer used after finalize) or \"Busy\" (a call from inside another)."
);

/// An `NvshmemError` with `message` and `kind`.
pub(crate) fn raise(py: Python<'_>, kind: &str, message: String) -> PyErr {
    let err = NvshmemError::new_err(message);
    match err.value(py).setattr("kind", kind) {
        Ok(()) => err,
        Err(e) => e,
    }
}

/// The runtime's error as an `NvshmemError`: its Display text unchanged, its variant as `kind`.
pub(crate) fn runtime_error(py: Python<'_>, err: nvshmem::Error) -> PyErr {
    // The variant's name is where its Debug form starts ("BootstrapUnavailable { reason: ..").
    let debug = format!("{err:?}");
    let kind: String = debug
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect();
    raise(py, &kind, err.to_string())
}
