//! Allreduce over symmetric memory, built from device-initiated puts and signals (kernels in
//! `device/coll/`). Works where peers are only reachable through NVSHMEM (other nodes);
//! direct NVLink stores are a checked fast path inside the kernels.
//!
//! An [`Allreduce`] owns a workspace on the symmetric heap (allocated collectively) and a
//! sequence counter: signals carry ever-growing values, so calls can be issued back to back on a
//! stream with no barrier in between.
//!
//! One file per part: the algorithms (`algo`); what the environment sets and the launch shapes
//! it gives (`settings`); the checked-mode header's meta word and the names errors use
//! (`meta`); building a workspace (`workspace`); what `Auto` picks, online tuning included
//! (`choose`); a call, from locating its buffers to the kernel launches (`run`); the row of the
//! collectives' table (`table`); the node-aware algorithm (`hier`) and online tuning's records
//! (`online`). This file holds the handle and its accessors.

pub mod algo;
mod choose;
pub mod hier;
mod meta;
pub mod online;
mod run;
mod settings;
mod table;
mod workspace;

pub use algo::AllreduceAlgo;
pub use choose::SELECTION;
pub use settings::{
    low_latency_shape, ALGO_ENV, DIRECT_BLOCKS_ENV, DIRECT_BLOCK_BYTES_ENV, DIRECT_MIN_ENV,
    DIRECT_THREADS_ENV, LL_MAX_DEFAULT_WIDE, LL_MAX_ENV, PUSH_MIN_ENV, PUSH_ROUNDS_ENV,
};
pub(crate) use table::create;

use crate::core::buffer::SymmetricBuffer;
use crate::core::error::Result;
use crate::core::status::WaitFailure;
use crate::proto::Workspace;
use cudarc::driver::CudaStream;
use online::Online;
use settings::{describe_settings, DirectShape};
use std::time::Duration;

/// An allreduce over the world or a team. Create it on every PE at the same point (the
/// allocation is collective over the world), then call [`Allreduce::run`] on every member with
/// the same lengths, op and algorithm, in the same order. The sequence state lives on the
/// device, so calls may be issued back to back with no barrier and captured in a CUDA graph.
pub struct Allreduce<'nv> {
    /// First field: its Drop waits for queued kernels before anything below is freed.
    ws: Workspace<'nv>,
    /// Receive slots: 2 parities x world slots of `slot_bytes`.
    scratch: SymmetricBuffer<'nv, u8>,
    /// Slot protocols' counters: algos x 2 phases x 2 parities x world x SLOT_BLOCKS words,
    /// only ever growing.
    flags: SymmetricBuffer<'nv, u64>,
    /// The low-latency one-shot's own receive region: 2 parities x world slots of
    /// `ll_slot_bytes` (zeroed; its reader zeroes every line it has read).
    ll: SymmetricBuffer<'nv, u8>,
    ll_slot_bytes: usize,
    /// Counters of the direct two-shot: DIRECT_PHASES x world x DIRECT_BLOCKS_MAX.
    direct_flags: SymmetricBuffer<'nv, u64>,
    slot_bytes: usize,
    /// What `Auto` resolves to when NVSH_ALLREDUCE_ALGO is set.
    env_algo: Option<AllreduceAlgo>,
    /// Low-latency one-shot up to this many bytes (0: never).
    ll_max: usize,
    direct_shape: DirectShape,
    /// This workspace's key in the tuned tables (`tuning::collective_key`).
    tuning_key: String,
    /// Online tuning's timer and records (NVSH_TUNE=online, or
    /// [`Nvshmem::allreduce_workspace_online`]); None: tables only.
    ///
    /// [`Nvshmem::allreduce_workspace_online`]: crate::Nvshmem::allreduce_workspace_online
    online: Option<Box<Online<'nv>>>,
    /// The node-aware algorithm's steps, on a workspace over the world where it spans nodes.
    hier: Option<Box<hier::Hier<'nv, Allreduce<'nv>>>>,
}

impl<'nv> Allreduce<'nv> {
    /// Bytes of one receive slot.
    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    /// PEs taking part (the team size).
    pub fn n_pes(&self) -> i32 {
        self.ws.n_pes()
    }

    /// How long the waits of one kernel may take before it gives up ([`Error::Timeout`]).
    /// Starts as [`Nvshmem::timeout`] (`NVSH_TIMEOUT_MS`, default 60 s).
    ///
    /// [`Error::Timeout`]: crate::Error::Timeout
    /// [`Nvshmem::timeout`]: crate::Nvshmem::timeout
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.ws.set_timeout(timeout);
        if let Some(h) = &mut self.hier {
            h.set_timeout(timeout);
        }
    }

    /// The current timeout.
    pub fn timeout(&self) -> Duration {
        self.ws.timeout()
    }

    /// Whether calls exchange a header to catch PEs that disagree on their arguments
    /// ([`crate::proto::checked::CHECKED_ENV`]).
    pub fn is_checked(&self) -> bool {
        self.ws.is_checked()
    }

    /// The protocol settings this workspace runs with (from the environment and the team size),
    /// in words, for reports: "low-latency one-shot up to 512K; direct two-shot from 0 (no
    /// push), 512 threads x up to 128 blocks of 16K".
    pub fn settings(&self) -> String {
        let mut s = describe_settings(self.ll_max, &self.direct_shape);
        if let Some(h) = &self.hier {
            let l = h.layout();
            s += &format!(
                "; hierarchical over {} nodes of {} from {}",
                l.nodes(),
                l.size(),
                crate::core::env_value::size_label(h.min_bytes)
            );
        }
        if self.ws.no_direct() {
            format!(
                "{s}; NVSHMEM puts only ({})",
                crate::proto::workspace::NO_DIRECT_ENV
            )
        } else {
            s
        }
    }

    /// The error a kernel of this workspace recorded (a wait past its deadline: a dead or
    /// out-of-step peer; in checked mode a peer with other arguments), without synchronising.
    /// `Ok` means none so far; work still queued may fail later. After an error the workspace
    /// is broken: later calls move nothing and return the same error.
    ///
    /// After a timeout the outputs of the failed call and of every call queued after it are
    /// undefined, and stay so for a while: a peer that was late rather than dead may still
    /// store into this PE's output (the two-shots and the slot protocols write into their
    /// peers' memory) until its own kernels end, which their deadlines bound. Do not use them
    /// as results; reuse their memory only after every PE has dropped its workspace (the drop
    /// waits for that PE's kernels).
    pub fn check(&self) -> Result<()> {
        self.ws.check()?;
        self.hier.as_ref().map_or(Ok(()), |h| h.check())
    }

    /// Moves the device-side step count `n` steps on, as `n` launches would (every PE must do
    /// the same at the same point). For tests of what happens after 2^32 steps, which real
    /// calls would take hours to reach.
    #[doc(hidden)]
    pub fn skip_steps_for_test(&mut self, n: u64, stream: &CudaStream) -> Result<()> {
        stream.synchronize()?;
        let state = self.ws.state_buffer();
        let mut words = state.to_vec()?;
        // Word 0 is nvshmemrs_allreduce_state's step count.
        words[0] = words[0].wrapping_add(n);
        state.copy_from_host(&words)
    }

    /// Synchronises `stream` (bounded: every wait has a deadline), then [`Allreduce::check`].
    pub fn sync(&self, stream: &CudaStream) -> Result<()> {
        self.ws.sync(stream)?;
        self.check()
    }

    /// The nodes this workspace's hierarchical algorithm follows, where it has one (a
    /// workspace over the world where the world spans nodes in blocks, pretend ones included).
    pub fn node_layout(&self) -> Option<crate::core::node::NodeLayout> {
        self.hier.as_ref().map(|h| h.layout())
    }

    /// The first failure recorded, in detail.
    pub fn failure(&self) -> Option<WaitFailure> {
        self.ws.failure()
    }
}
