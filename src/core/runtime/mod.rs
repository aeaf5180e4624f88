//! The `Nvshmem` runtime handle: initialises NVSHMEM once per process where a bootstrap placed
//! it (the bootstraps of [`crate::bootstrap`] stand on this layer and give the public `init`
//! calls), and finalises it exactly once on Drop.
//!
//! This file holds the handle, its accessors and its end; the rest is one concern a file: the
//! process's lifecycle (lifecycle.rs), what a bootstrap decides before init (join.rs), init
//! itself (init.rs), the tuned tables (tuning_state.rs), peer failure and collective agreement
//! (agree.rs), and the GPU, library and device state checks (device_check.rs).

mod agree;
mod device_check;
mod init;
mod join;
mod lifecycle;
mod tuning_state;

pub(crate) use join::{Job, Join, Placement, Rendezvous, Seat, Vote};

use crate::core::error::{Error, Result};
use crate::core::leak::{self, LiveBuffer};
use crate::core::result::{self, CudaInfo};
use crate::core::status::StatusRecord;
use crate::core::tuning::TuningState;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use lifecycle::lifecycle;
use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

/// An initialised NVSHMEM runtime. Dropping it finalises NVSHMEM (and MPI, if it started it).
///
/// Symmetric buffers borrow the handle, so none can be used after finalize. The handle stays on
/// the thread that created it (NVSHMEM is initialised with thread support "serialized" and the
/// CUDA context is bound to that thread).
pub struct Nvshmem {
    my_pe: i32,
    n_pes: i32,
    local_rank: i32,
    device: i32,
    cuda: CudaInfo,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// Device word the atomic kernels return their old value through.
    atomic_scratch: CudaSlice<u64>,
    /// Deadline of the runtime's own waits (barriers, stream signal waits), and the default of
    /// channels and allreduce workspaces created later.
    timeout: Cell<Duration>,
    /// State of the barrier and stream-wait kernels (device/core/barrier.h).
    pub(crate) waits: Waits,
    /// Decisions agreed so far ([`Nvshmem::agree_collective`]); picks the vote bank.
    vote_round: Cell<u64>,
    /// Set once a wait anywhere in the runtime timed out: a peer is dead or lost step. Collective
    /// calls are refused from then on and finalize is skipped (it would wait for the peer).
    peer_failure: RefCell<Option<String>>,
    /// The tuned tables `Auto` consults (a tuning file's, plus online tuning's results).
    tuning: RefCell<TuningState>,
    finalized: bool,
    /// Pretend nodes (NVSH_PRETEND_NODE_SIZE; `crate::core::node`).
    pub(crate) pretend: Option<crate::core::node::NodeLayout>,
    /// The world split into node and rail teams, where it spans blocked nodes.
    pub(crate) node_teams: Option<crate::core::node::NodeTeams>,
    /// Dropped after the finalize of Drop: the job runtime outlives NVSHMEM.
    _job: Option<Box<dyn Job>>,
    _not_send: PhantomData<*const ()>,
}

/// Device state of the runtime's barrier and stream signal waits (device/core/barrier.h).
pub(crate) struct Waits {
    /// Symmetric arrival counters, one per PE (allocated at init, released with the heap).
    pub arrivals: *mut u64,
    /// Symmetric vote slots: 2 banks x n_pes x [detail, round << 1 | no] (same lifetime).
    pub votes: *mut u64,
    /// [barriers taken, broken] (owned here; kernels get `state_ptr`).
    pub _state: CudaSlice<u64>,
    pub state_ptr: u64,
    pub status: StatusRecord,
}

impl std::fmt::Debug for Nvshmem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvshmem")
            .field("my_pe", &self.my_pe)
            .field("n_pes", &self.n_pes)
            .field("device", &self.device)
            .finish()
    }
}

impl Nvshmem {
    /// Makes this PE's CUDA context current on the calling thread, as cudarc does on entry: the
    /// caller may have bound another device since init. Cheap when it is current already.
    pub(crate) fn bind(&self) -> Result<()> {
        self.ctx.bind_to_thread()?;
        Ok(())
    }

    /// This PE's number, 0 ..= n_pes - 1.
    pub fn my_pe(&self) -> i32 {
        self.my_pe
    }

    /// Number of PEs in the job.
    pub fn n_pes(&self) -> i32 {
        self.n_pes
    }

    /// Rank among the PEs of this node (chose the GPU).
    pub fn local_rank(&self) -> i32 {
        self.local_rank
    }

    /// The CUDA device this PE runs on.
    pub fn device(&self) -> i32 {
        self.device
    }

    /// Driver and runtime versions found at init.
    pub fn cuda_info(&self) -> CudaInfo {
        self.cuda
    }

    /// The cudarc context of this PE's device (its primary context, shared with NVSHMEM).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// A stream of this runtime's own, used by the blocking calls; also handy for users.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    pub(crate) fn atomic_scratch(&self) -> &CudaSlice<u64> {
        &self.atomic_scratch
    }

    /// Several PEs of this node share a GPU (NVSHMEM's "limited MPG" mode: puts and signals
    /// work; team splits and NVSHMEM's own collectives do not).
    pub fn shares_gpus(&self) -> bool {
        self.real_node_pes() > self.cuda_info().device_count
    }

    /// How long the runtime's waits may take (barriers, stream signal waits) before they fail
    /// with [`Error::Timeout`]; channels and allreduce workspaces created afterwards start with
    /// it too. From `NVSH_TIMEOUT_MS` at init (default 60 s).
    pub fn timeout(&self) -> Duration {
        self.timeout.get()
    }

    /// Sets [`Nvshmem::timeout`] (at least 1 ns is used).
    pub fn set_timeout(&self, timeout: Duration) {
        self.timeout.set(timeout);
    }

    /// Errors unless `pe` is a PE of this job.
    pub fn check_pe(&self, pe: i32) -> Result<()> {
        if (0..self.n_pes).contains(&pe) {
            Ok(())
        } else {
            Err(Error::InvalidPe {
                pe,
                n_pes: self.n_pes,
            })
        }
    }

    /// Finalises now and returns the symmetric buffers that were still alive (leaked with
    /// `mem::forget`); NVSHMEM releases them with the heap, so they are not freed again.
    pub fn finalize(mut self) -> Vec<LiveBuffer> {
        self.finalize_once()
    }

    fn finalize_once(&mut self) -> Vec<LiveBuffer> {
        if self.finalized {
            return Vec::new();
        }
        self.finalized = true;
        // Device work may still touch symmetric memory: let it finish before the heap goes
        // (bounded: every wait of the runtime's kernels has a deadline).
        let _ = self.ctx.synchronize();
        let leaked = leak::take_all();
        // NVSHMEM's finalize waits for every PE without a deadline: with a peer gone it would
        // never return. The process keeps the heap until it exits.
        match self.enter_collective("finalize", Vote::Yes) {
            Ok(()) => {}
            Err(Error::PeerFailed { .. }) => {
                // The cause was reported where it happened: say it short.
                log::warn!(
                    "PE {}: NVSHMEM finalize skipped after a peer failure (a \
                     timeout, reported where it happened); the GPU memory is released when the \
                     process exits",
                    self.my_pe
                );
                lifecycle(|state| *state = state.ended(false));
                return leaked;
            }
            Err(e) => {
                log::warn!("PE {}: NVSHMEM finalize skipped: {e}", self.my_pe);
                lifecycle(|state| *state = state.ended(false));
                return leaked;
            }
        }
        self.end_nodes();
        // SAFETY: NVSHMEM was initialised by this handle, which exists once; no buffer can be
        // used afterwards (they borrow the handle).
        unsafe { result::finalize() };
        lifecycle(|state| *state = state.ended(true));
        leaked
    }
}

impl Drop for Nvshmem {
    fn drop(&mut self) {
        let leaked = self.finalize_once();
        if !leaked.is_empty() {
            let bytes: usize = leaked.iter().map(|b| b.bytes).sum();
            log::warn!(
                "PE {}: {} symmetric buffer(s), {bytes} bytes, still alive at \
                 finalize (not freed twice; NVSHMEM releases them with the heap): {}",
                self.my_pe,
                leaked.len(),
                leaked
                    .iter()
                    .map(|b| format!("{}[{}] at {:#x}", b.elem, b.len, b.address))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
}
