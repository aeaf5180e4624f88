//! Sparse gradient allreduce ([`SparseAllreduce`]): each PE selects a small part of its gradient
//! (top-k by magnitude, a Gaussian threshold, or Ok-Topk's reused threshold), the parts are
//! exchanged with the collectives (allgather, allgatherv with device counts, grouped send/recv,
//! broadcast; for the region methods alltoall, alltoallv with device counts and allreduce) and
//! scatter-added into a dense output on every member, part after part in member order, so that
//! every member's output is the same bits at any team size. Error feedback keeps what was not sent in
//! a residual that the next call adds to its gradient, so nothing is lost over steps.
//!
//! Everything is stream-ordered with no host round trip: counts stay on the device, and the
//! Gaussian and Ok-Topk thresholds and the region boundaries are computed and read on the GPU
//! (device/sparse/allreduce.cu). The region exchange's pairwise transfers (Ok-Topk's grouped
//! sends and receives per region) are alltoallv calls with device counts, one per throttled
//! round with zero counts for the peers outside it, rather than [`P2pGroup`] calls, whose sizes
//! are host values: the sizes per region are known only on the device.
//!
//! One file per part: the method and options (`options`); the handle, its creation and getters
//! (`state`); a call, step by step (`run`); error feedback and its residual (`residual`); what
//! the last call did, read back (`readback`); and what the calls use: sparse sets in symmetric
//! memory (`sym_set`), the small kernel launches (`launch`), each method's exchange
//! (`exchange`) and its allgatherv (`gathered`), gTop-k's tree (`tree`), the region exchange
//! (`regions`) with Ok-Topk's global phase (`oktopk`), and the reused local threshold (`reuse`).
//!
//! [`P2pGroup`]: crate::coll::group::P2pGroup

mod exchange;
mod gathered;
mod launch;
mod oktopk;
mod options;
mod readback;
mod regions;
mod residual;
mod reuse;
mod run;
mod state;
mod sym_set;
mod tree;

pub use options::{sparse_k, SparseMethod, SparseOptions};
pub use state::SparseAllreduce;
