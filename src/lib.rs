//! Safe Rust runtime over NVIDIA NVSHMEM.
//!
//! [`sys`] holds the raw bindings and [`result`] the wrappers several types share (one call each,
//! status codes turned into [`Result`]); the RAII types, such as [`Nvshmem`] and
//! [`SymmetricBuffer`], also call the raw bindings directly in many places. The modules are
//! private: the public API is what the crate root re-exports, and [`tools`] holds what the
//! crate's own tools need, outside semver.
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

pub(crate) mod bootstrap;
pub(crate) mod coll;
pub(crate) mod core;
pub(crate) mod p2p;
pub(crate) mod pipeline;
pub(crate) mod proto;
pub(crate) mod sparse;
pub(crate) mod sync;
pub(crate) mod team;

/// Raw bindings (re-export of the `nvshmem-sys` crate).
pub mod sys {
    pub use nvshmem_sys::*;
}

/// One call each, status codes turned into [`Result`]: the wrappers the safe types share.
pub use crate::core::result;

pub use crate::bootstrap::pmi::PmiFlavour;
pub use crate::bootstrap::{launcher_env, Bootstrap, LauncherEnv};
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
    BusFactor, Collective, CollectiveRow, Placement, ScratchKind, Shape, COLLECTIVES,
};
pub use crate::coll::team_barrier::TeamBarrier;
pub use crate::coll::tuning::{
    CandidateTime, Measurement, OnlineTuning, Tuner, UserCandidate, MAX_SAMPLES,
};
pub use crate::core::buffer::{SymView, SymmetricBuffer};
pub use crate::core::deadline::DEFAULT_TIMEOUT;
pub use crate::core::element::{Atomic64, Dtype, Element};
pub use crate::core::error::{Error, Result};
pub use crate::core::leak::LiveBuffer;
pub use crate::core::node::NodeLayout;
pub use crate::core::outside::{InBuf, OutBuf};
pub use crate::core::registered::{Registered, RegistrableBuffer};
pub use crate::core::runtime::Nvshmem;
pub use crate::core::status::{FailureKind, WaitFailure, WaitOp};
pub use crate::core::tuning::{Fingerprint, Loaded, TuneMode, TuningTable};
pub use crate::core::unregistrable::Unregistrable;
pub use crate::core::{version_string, MIN_COMPUTE_CAPABILITY};
pub use crate::p2p::device_put::{Completion, LaunchShape};
pub use crate::p2p::signal::{Cmp, SignalOp};
pub use crate::pipeline::channel::{Channel, Received};
pub use crate::proto::family::{FamilyProtocol, Protocols};
pub use crate::proto::lines::ExchangePairs;
pub use crate::sparse::{
    scatter_add, sparse_k, HostSparse, SparseAllreduce, SparseIndex, SparseMerge, SparseMethod,
    SparseOptions, SparseSet, SparseValue, TopK,
};
pub use crate::team::Team;

// The environment variables a user may set, by the names the library reads them with (the
// allreduce's own get its prefix here, where they stand beside the family's).
pub use crate::bootstrap::pmi::ENV_PMI as PMI_ENV;
pub use crate::bootstrap::ENV_BOOTSTRAP as BOOTSTRAP_ENV;
pub use crate::coll::allreduce::hier::HIER_MIN_ENV as ALLREDUCE_HIER_MIN_ENV;
pub use crate::coll::allreduce::{
    ALGO_ENV as ALLREDUCE_ALGO_ENV, DIRECT_BLOCKS_ENV as ALLREDUCE_DIRECT_BLOCKS_ENV,
    DIRECT_BLOCK_BYTES_ENV as ALLREDUCE_DIRECT_BLOCK_BYTES_ENV,
    DIRECT_MIN_ENV as ALLREDUCE_DIRECT_MIN_ENV, DIRECT_THREADS_ENV as ALLREDUCE_DIRECT_THREADS_ENV,
    LL_MAX_ENV as ALLREDUCE_LL_MAX_ENV, PUSH_MIN_ENV as ALLREDUCE_PUSH_MIN_ENV,
    PUSH_ROUNDS_ENV as ALLREDUCE_PUSH_ROUNDS_ENV,
};
pub use crate::core::deadline::TIMEOUT_ENV;
pub use crate::core::node::PRETEND_NODE_SIZE_ENV;
pub use crate::core::tuning::{TUNE_BUDGET_ENV, TUNE_ENV, TUNING_FILE_ENV};
pub use crate::proto::checked::CHECKED_ENV;
pub use crate::proto::family::{
    FAMILY_LL_MAX_ENV, FAMILY_PULL_MIN_ENV, FAMILY_SPLIT_MIN_ENV, FAMILY_SPLIT_ROUND_ENV,
};
pub use crate::proto::lines::EXCHANGE_LL_MAX_ENV;
pub use crate::proto::node_steps::FAMILY_HIER_MIN_ENV;
pub use crate::proto::peer_table::PEER_TABLE_ENV;
pub use crate::proto::workspace::NO_DIRECT_ENV;

/// Internals for nvsh, the trainer, the Python package and the tests; not covered by semver.
///
/// The library's modules are private; what its own tools need beyond the public API is
/// re-exported here, so that moving a file breaks none of them. Applications should not rely
/// on it.
pub mod tools {
    /// The launcher's protocol (`nvsh run` sets these variables) and what other launchers say.
    pub mod bootstrap {
        /// Bytes of hex text; None if it is not hex.
        pub use crate::bootstrap::decode_hex;
        /// Hex text of bytes (the unique ID in [`ENV_UNIQUE_ID`]).
        pub use crate::bootstrap::encode_hex;
        /// What a job step's launcher (mpirun, srun, torchrun) announced.
        pub use crate::bootstrap::step_env;
        /// NVSHMEM's unique ID as bytes.
        pub use crate::bootstrap::unique_id_bytes;
        /// A job step's launcher's announcement.
        pub use crate::bootstrap::StepEnv;
        /// Size of NVSHMEM's unique ID in bytes.
        pub use crate::bootstrap::UNIQUE_ID_BYTES;
        /// The launcher's variables for each process.
        pub use crate::bootstrap::{
            ENV_LOCAL_RANK, ENV_LOCAL_WORLD_SIZE, ENV_RANK, ENV_UNIQUE_ID, ENV_WORLD_SIZE,
        };
    }

    /// Tuning files: their format, where they live, how they are read and written.
    pub mod tuning {
        /// Where tuning files go when no path is given.
        pub use crate::core::tuning::default_path;
        /// The type class of a row (by element size).
        pub use crate::core::tuning::dtype_class;
        /// Reads a tuning file for a fingerprint.
        pub use crate::core::tuning::load;
        /// Reads a tuning file's text for a fingerprint.
        pub use crate::core::tuning::parse;
        /// Writes a table into a tuning file.
        pub use crate::core::tuning::save;
        /// One row of a tuning table.
        pub use crate::core::tuning::Row;
        /// A tuning file's entries, and one entry.
        pub use crate::core::tuning::{TuningEntry, TuningFile, FORMAT_VERSION};
    }

    /// CPU references of the sparse selections and merges, the GPU tests' expectations.
    pub use crate::sparse::reference as sparse_reference;
    /// CPU model of the sparse allreduce's methods, which the GPU tests compare with.
    pub use crate::sparse::simulation as sparse_simulation;

    /// Any collective of the table created and called through one signature
    /// ([`crate::Collective::create`]): what the tools and tests loop over.
    pub use crate::coll::dispatch::{AnyBufs, AnyCall, AnyParts, Create, Peers, TableCollective};
    /// The CPU reference of a call through the table: where each output element comes from,
    /// from the row's properties (what the tests check results against).
    pub use crate::coll::dispatch::{Expected, Source};

    /// The low-latency allreduce's launch shape for a size.
    pub use crate::coll::allreduce::low_latency_shape;
    /// The low-latency allreduce's default bound on wide types.
    pub use crate::coll::allreduce::LL_MAX_DEFAULT_WIDE;
    /// The allreduce's built-in selection table.
    pub use crate::coll::allreduce::SELECTION;
    /// The table's choice for a world size, message size and type.
    pub use crate::coll::select::select;
    /// One rule of a selection table.
    pub use crate::coll::select::SelectionRule;
    /// The timeout from `NVSH_TIMEOUT_MS`, else the default.
    pub use crate::core::deadline::default_timeout;
    /// Host-side conversions of element values (checks and references).
    pub use crate::core::element::HostValue;
    /// Sizes, booleans and progress as the tools parse and print them.
    pub use crate::core::env_value::{parse_bool, parse_size, progress_label, size_label};
    /// Buffers not yet freed (leak checks).
    pub use crate::core::leak::live_buffers;
    /// NVSHMEM's stream type from a cudarc stream.
    pub use crate::core::stream::raw_stream;
    /// Refuses a root outside the team.
    pub use crate::proto::family::check_root;
}
