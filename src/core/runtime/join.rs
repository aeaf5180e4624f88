//! What a bootstrap decides before NVSHMEM's init (where this process sits, how it finds the
//! other PEs, the job runtime it started), and a PE's vote in a collective agreement.

use crate::core::error::{Error, Result};
use crate::sys;

/// One PE's say in a decision every PE must take alike before a collective NVSHMEM call
/// ([`Nvshmem::agree_collective`](super::Nvshmem::agree_collective)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Vote {
    Yes,
    /// No, with a number the error reports (an allocation: this PE's free bytes).
    No(u64),
}

impl Vote {
    /// An allocation that fits (or not) next to `free` bytes of device memory.
    pub(crate) fn alloc(fits: bool, free: usize) -> Vote {
        if fits {
            Vote::Yes
        } else {
            Vote::No(free as u64)
        }
    }
}

/// Where this process sits in the job, decided by a bootstrap before NVSHMEM init.
pub(crate) struct Placement {
    pub seat: Seat,
    /// How NVSHMEM's init finds the other PEs.
    pub rendezvous: Rendezvous,
    /// Which bootstrap placed this process, for the log.
    pub bootstrap: &'static str,
    /// The job runtime the bootstrap started (MPI), if any.
    pub job: Option<Box<dyn Job>>,
}

/// Rank, size and node-local rank (which picks the GPU) a bootstrap expects for this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seat {
    pub rank: i32,
    pub n_pes: i32,
    pub local_rank: i32,
}

/// How NVSHMEM's init finds the other PEs.
pub(crate) enum Rendezvous {
    /// The unique ID every PE shares, or why the bootstrap's bytes are not one (reported after
    /// the device checks, among the errors all PEs agree on).
    UniqueId(Result<sys::nvshmemx_uniqueid_t>),
    /// This process alone: it takes its own unique ID.
    Alone,
    /// NVSHMEM's own bootstrap as its environment variables select it (PMI). `check_size` judges
    /// the PE count NVSHMEM found, in the launcher's terms: PMI that did not reach the launcher
    /// makes each process a job of 1.
    Environment {
        check_size: Box<dyn FnOnce(i32) -> Result<()>>,
    },
}

/// A [`Rendezvous`] once this PE is ready for NVSHMEM's init.
pub(crate) enum Join {
    UniqueId(sys::nvshmemx_uniqueid_t),
    Environment {
        check_size: Box<dyn FnOnce(i32) -> Result<()>>,
    },
}

/// A job runtime a bootstrap started (MPI), as init needs it: all PEs agree before NVSHMEM's
/// own init, an error past that ends the job, and it stays up as long as NVSHMEM (dropped with
/// the handle, after finalize). A trait of this layer so that the runtime needs no bootstrap.
pub(crate) trait Job {
    /// Every PE's readiness for NVSHMEM init: this PE's error, or one saying another PE failed.
    /// Collective: every PE must call it.
    fn all_ready(&self, local: Result<Join>) -> Result<Join>;
    /// Ends the whole job after an error past [`Job::all_ready`] (the others may wait inside
    /// NVSHMEM's init for this PE).
    fn abort(&self, err: &Error) -> !;
}
