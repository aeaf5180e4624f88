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

#![warn(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

/// The README's code blocks, compiled as doc tests (the example there stays true).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

pub mod bootstrap;
pub mod coll;
pub mod core;
pub mod p2p;
pub mod pipeline;
pub mod proto;
pub mod sparse;
pub mod sync;
pub mod team;

/// Raw bindings (re-export of the `nvshmem-sys` crate).
pub mod sys {
    pub use nvshmem_sys::*;
}

/// One call each, status codes turned into [`Result`] (the middle layer, as in cudarc).
pub use crate::core::result;

pub use crate::coll::allgather::Allgather;
pub use crate::coll::allgatherv::Allgatherv;
pub use crate::coll::allreduce::{Allreduce, AllreduceAlgo};
pub use crate::coll::alltoall::Alltoall;
pub use crate::coll::alltoallv::Alltoallv;
pub use crate::coll::broadcast::Broadcast;
pub use crate::coll::family::{DeviceParts, Parts};
pub use crate::coll::group::{P2p, P2pGroup};
pub use crate::coll::op::{ReduceOp, Reducible};
pub use crate::coll::reduce::Reduce;
pub use crate::coll::reduce_scatter::ReduceScatter;
pub use crate::coll::table::{
    BusFactor, Collective, CollectiveRow, ScratchKind, Shape, COLLECTIVES,
};
pub use crate::coll::team_barrier::TeamBarrier;
pub use crate::coll::tuning::{Measurement, Tuner, UserCandidate};
pub use crate::core::buffer::{SymView, SymmetricBuffer};
pub use crate::core::element::{Atomic64, Dtype, Element};
pub use crate::core::error::{Error, Result};
pub use crate::core::node::NodeLayout;
pub use crate::core::outside::{InBuf, OutBuf};
pub use crate::core::registered::{Registered, RegistrableBuffer};
pub use crate::core::runtime::Nvshmem;
pub use crate::core::unregistrable::Unregistrable;
pub use crate::core::version_string;
pub use crate::p2p::device_put::{Completion, LaunchShape};
pub use crate::p2p::signal::{Cmp, SignalOp};
pub use crate::pipeline::channel::{Channel, Received};
pub use crate::proto::family::FamilyProtocol;
pub use crate::sparse::{
    scatter_add, HostSparse, SparseAllreduce, SparseIndex, SparseMerge, SparseMethod,
    SparseOptions, SparseSet, SparseValue, TopK,
};
pub use bootstrap::Bootstrap;
pub use team::Team;
