//! MPI bootstrap (feature `mpi`): rank 0 takes an NVSHMEM unique ID and broadcasts it over
//! MPI_COMM_WORLD; every rank then initialises NVSHMEM with it. The node-local rank (which picks
//! the GPU) comes from a shared-memory split of the world communicator.

use crate::bootstrap::{unique_id_bytes, UNIQUE_ID_BYTES};
use crate::core::error::{Error, Result};
use crate::core::result;
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
    let local_rank = world.split_shared(rank).rank();

    // Status first, so that the other ranks do not wait for an ID that will never come.
    let mut id = vec![0u8; UNIQUE_ID_BYTES];
    let mut status = [0i32; 1];
    if rank == 0 {
        match result::get_unique_id() {
            Ok(uid) => id = unique_id_bytes(&uid),
            Err(e) => {
                status[0] = 1;
                log::error!("rank 0 could not take a unique ID: {e}");
            }
        }
    }
    let root = world.process_at_rank(0);
    root.broadcast_into(&mut status[..]);
    if status[0] != 0 {
        return Err(Error::Mpi {
            message: "rank 0 could not take an NVSHMEM unique ID (its error is printed above)"
                .into(),
        });
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
