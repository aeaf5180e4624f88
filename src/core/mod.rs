//! The runtime core: init and the handle, nodes (pretend ones too), symmetric buffers, registered own memory, element
//! types, errors, the raw call layer, environment values, leak tracking, streams, tuning
//! files, the deadline of every wait and the status record waits report failures through.

pub mod buffer;
pub mod deadline;
pub(crate) mod digest;
pub mod element;
pub mod env_value;
pub mod error;
pub mod leak;
pub mod node;
pub mod node_teams;
pub mod outside;
pub mod registered;
pub mod result;
pub mod runtime;
pub mod status;
pub mod stream;
pub mod tuning;
pub mod unregistrable;

/// Lowest compute capability the device code is built for (sm_80, INSTALL.md requirements);
/// `nvsh doctor` checks it and `Nvshmem::init` refuses GPUs below it.
pub const MIN_COMPUTE_CAPABILITY: (i32, i32) = (8, 0);

/// "major.minor.patch" of a version triple.
pub fn version_string((major, minor, patch): (i32, i32, i32)) -> String {
    format!("{major}.{minor}.{patch}")
}
