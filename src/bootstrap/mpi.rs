//! MPI bootstrap (feature `mpi`): rank 0 takes an NVSHMEM unique ID and broadcasts it over
//! MPI_COMM_WORLD; every rank then initialises NVSHMEM with it. The node-local rank (which picks
//! the GPU) comes from a shared-memory split of the world communicator.
//!
//! NVSHMEM's unique-ID bootstrap waits for every PE with no timeout, and MPI_Finalize waits for
//! every rank. So a rank must never leave the others behind: before init the ranks agree that
//! each is ready ([`MpiGuard::all_ready`]), and an error after that ends the whole MPI job
//! ([`MpiGuard::abort`]) instead of returning.

use crate::bootstrap::{failure_text, rank0_failed, unique_id_bytes, UNIQUE_ID_BYTES};
use crate::core::error::{Error, Result};
use crate::core::result;
use crate::core::runtime::{Job, Join};
use mpi::traits::*;

/// Keeps MPI initialised while NVSHMEM runs; finalises MPI on Drop if this crate started it.
pub(crate) struct MpiGuard {
    _universe: Option<mpi::environment::Universe>,
}

/// Returns (guard, rank, size, local rank, unique ID bytes).
pub(crate) fn exchange_unique_id() -> Result<(MpiGuard, i32, i32, i32, Vec<u8>)> {
    // None when the application initialised MPI itself: then it also finalises it.
    let universe = mpi::initialize();
    if universe.is_none() && !mpi::environment::is_initialized() {
        return Err(Error::Mpi {
            message: "MPI could not be initialised".into(),
        });
    }
    let world = mpi::topology::SimpleCommunicator::world();
    let (rank, size) = (world.rank(), world.size());
    // Every rank sees the same sizes, so all return here alike (and finalise together).
    if let Some(step) = crate::bootstrap::step_env() {
        step.check_size("MPI", size)?;
    }
    let local_rank = world.split_shared(rank).rank();

    // Rank 0's outcome first, so that the other ranks do not wait for an ID that will never
    // come: the length of its error text (0: the ID follows), then the text itself, so that
    // every rank reports what went wrong, not only rank 0's log.
    let mut id = vec![0u8; UNIQUE_ID_BYTES];
    let mut text = Vec::new();
    if rank == 0 {
        match result::get_unique_id() {
            Ok(uid) => id = unique_id_bytes(&uid),
            Err(e) => text = failure_text(&e.to_string()),
        }
    }
    let root = world.process_at_rank(0);
    let mut len = [text.len() as u64];
    root.broadcast_into(&mut len[..]);
    if len[0] != 0 {
        text.resize(len[0] as usize, 0);
        root.broadcast_into(&mut text[..]);
        return Err(rank0_failed(&text));
    }
    root.broadcast_into(&mut id[..]);
    Ok((
        MpiGuard {
            _universe: universe,
        },
        rank,
        size,
        local_rank,
        id,
    ))
}

impl MpiGuard {
    /// Tells every rank whether this one is ready for NVSHMEM init, and returns this rank's
    /// error, or an error when another rank failed: then every rank returns an error and can
    /// finalise MPI. Collective: every rank must call it.
    pub(crate) fn all_ready<T>(&self, local: Result<T>) -> Result<T> {
        let world = mpi::topology::SimpleCommunicator::world();
        let failed = i32::from(local.is_err());
        let mut total = 0i32;
        world.all_reduce_into(&failed, &mut total, mpi::collective::SystemOperation::sum());
        match local {
            Ok(_) if total > 0 => Err(Error::Mpi {
                message: format!(
                    "{total} other rank(s) failed before NVSHMEM init (each printed its error); \
                     this rank stops too"
                ),
            }),
            local => local,
        }
    }

    /// Ends the MPI job after an error past [`MpiGuard::all_ready`]: the other ranks may wait
    /// inside NVSHMEM's init for this one, and mpirun ends them only on MPI_Abort.
    pub(crate) fn abort(&self, err: &Error) -> ! {
        let world = mpi::topology::SimpleCommunicator::world();
        let reason = format!(
            "nvshmem: rank {}: {err}; aborting the MPI job (MPI_Abort), because the other ranks \
             may be waiting for this one inside NVSHMEM's init",
            world.rank()
        );
        // The process ends here: the reason goes through `log` where a logger takes errors,
        // else straight to stderr, so that it reaches the user whatever the application set up.
        if log::max_level() >= log::Level::Error {
            log::error!("{reason}");
        } else {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "{reason}");
        }
        world.abort(1)
    }
}

/// The runtime holds the guard as its job runtime: MPI agrees before NVSHMEM init, aborts after
/// it, and is finalised after NVSHMEM.
impl Job for MpiGuard {
    fn all_ready(&self, local: Result<Join>) -> Result<Join> {
        MpiGuard::all_ready(self, local)
    }

    fn abort(&self, err: &Error) -> ! {
        MpiGuard::abort(self, err)
    }
}
