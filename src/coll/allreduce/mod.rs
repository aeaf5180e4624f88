//! Allreduce over symmetric memory, built from device-initiated puts and signals (kernels in
//! `device/coll/`). Works where peers are only reachable through NVSHMEM (other nodes);
//! direct NVLink stores are a checked fast path inside the kernels.
//!
//! An [`Allreduce`] owns a workspace on the symmetric heap (allocated collectively) and a
//! sequence counter: signals carry ever-growing values, so calls can be issued back to back on a
//! stream with no barrier in between.

pub mod algo;
pub mod hier;
pub mod online;

pub use algo::AllreduceAlgo;

use crate::coll::family::check_elementwise;
use crate::coll::op::{ReduceOp, Reducible};
use crate::coll::select::{rule, select, SelectionRule};
use crate::coll::tuning::timing::measurement;
use crate::core::buffer::{SymView, SymmetricBuffer};
use crate::core::element::Dtype;
use crate::core::env_value::size_from_env;
use crate::core::error::{Error, Result};
use crate::core::outside::{InBuf, Located, OutBuf};
use crate::core::result::cuda_check;
use crate::core::runtime::Nvshmem;
use crate::core::status::WaitFailure;
use crate::core::stream::is_capturing;
use crate::core::stream::raw_stream;
use crate::p2p::device_put::LaunchShape;
use crate::proto::staging::StageIo;
use crate::proto::{CollectiveText, Workspace};
use crate::sys;
use crate::team::Team;
use cudarc::driver::CudaStream;
use online::{Online, OnlineTuning};
use std::time::Duration;

/// The environment variable that replaces `Auto` for every call of a process (an explicit
/// algorithm passed to [`Allreduce::run`] still wins).
pub const ALGO_ENV: &str = "NVSH_ALLREDUCE_ALGO";

/// Largest one-shot payload (bytes) sent with the low-latency protocol (data and flag in the same
/// line: no fence and no separate signal) when every member is mapped by NVLink/PCIe. `0` turns
/// it off. Default 512 KiB for 2 PEs, 256 KiB for more (`LL_MAX_DEFAULT`,
/// `LL_MAX_DEFAULT_WIDE`).
pub const LL_MAX_ENV: &str = "NVSH_ALLREDUCE_LL_MAX";
/// Measured on two NVLinked H200: the protocol beats NCCL up to 512 KiB (9.8 vs 10.1 us) and
/// the signal-based one-shot there (10.6 us); it loses to recursive doubling from 1 MiB.
pub const LL_MAX_DEFAULT: usize = 512 << 10;
/// From 3 PEs the protocol's doubled bytes cost more sooner: on 4 H200 at 512 KiB it took
/// 16.6 us, the signal-based one-shot 14.0 us (NCCL 14.2).
pub const LL_MAX_DEFAULT_WIDE: usize = 256 << 10;

/// [`size_from_env`] that must also pass `valid`; `expected` describes both.
fn bounded_size_from_env(
    var: &'static str,
    default: usize,
    expected: &'static str,
    valid: impl Fn(usize) -> bool,
) -> Result<usize> {
    let v = size_from_env(var, default, expected)?;
    if valid(v) {
        Ok(v)
    } else {
        Err(Error::InvalidEnv {
            var,
            value: v.to_string(),
            expected,
        })
    }
}

/// The low-latency protocol's limit for a team of `n` PEs.
fn ll_max_from_env(n: i32) -> Result<usize> {
    size_from_env(
        LL_MAX_ENV,
        if n <= 2 {
            LL_MAX_DEFAULT
        } else {
            LL_MAX_DEFAULT_WIDE
        },
        "a size in bytes such as 65536, 64K or 0 (off)",
    )
}

/// Two-shot messages from this many bytes on take the direct protocol (loads and stores over
/// the peer mappings, no receive slots) where every member is mapped; below, the slot protocol
/// that also runs across nodes. Default 0 (`DIRECT_MIN_DEFAULT`); a huge value (`1T`) turns the
/// direct protocol off.
pub const DIRECT_MIN_ENV: &str = "NVSH_ALLREDUCE_DIRECT_MIN";
/// The direct protocol's grid scales with the message, so it wins at every size where it runs.
pub const DIRECT_MIN_DEFAULT: usize = 0;
/// Threads per block of the direct two-shot (a multiple of 32, 32 to 512; default 512). 1024
/// would need fewer registers than its kernels use.
pub const DIRECT_THREADS_ENV: &str = "NVSH_ALLREDUCE_DIRECT_THREADS";
/// Most blocks of the direct two-shot (1 to 256; default 128).
pub const DIRECT_BLOCKS_ENV: &str = "NVSH_ALLREDUCE_DIRECT_BLOCKS";
/// Bytes of its own chunk each block of the direct two-shot reduces, at least (default 16K: two
/// 16-byte vectors per thread of 512); the grid is the chunk over this, up to the most blocks.
pub const DIRECT_BLOCK_BYTES_ENV: &str = "NVSH_ALLREDUCE_DIRECT_BLOCK_BYTES";

/// Direct two-shot messages from this many bytes on, when the output is not the input, take
/// the push protocol: only stores cross the links (each PE's chunks go into the peers' outputs,
/// which hold them until the reduced chunks overwrite them), at the cost of two more handshakes
/// per block. In place, or below, the pull protocol (loads of the peers' inputs). Default
/// 64 MiB for 3 and 4 PEs, 256 MiB for 2 (`PUSH_MIN_DEFAULT`, `PUSH_MIN_DEFAULT_TWO_PES`), off
/// from 5 (not measured there yet); `1T` turns it off.
pub const PUSH_MIN_ENV: &str = "NVSH_ALLREDUCE_PUSH_MIN";
/// Measured on 4 H200 (f32; NCCL 2.28.9 in the same runs at 312 / 329 / 339 GB/s): push at 64,
/// 128 and 256 MiB reached 304 / 321 / 333 GB/s busbw against pull's 299 / 307 / 312; at 32 MiB
/// they were level (291 / 288), below it pull was faster.
pub const PUSH_MIN_DEFAULT: usize = 64 << 20;
/// Measured on 2 H200 (three interleaved runs, f32 and bf16 alike): push took 0.98x pull's time
/// at 256 MiB (796 against 812 us) and 0.96x at 512 MiB and 1 GiB, but 1.02x at 128 MiB and
/// 1.07x at 64 MiB.
pub const PUSH_MIN_DEFAULT_TWO_PES: usize = 256 << 20;
/// Rounds the push protocol pipelines each block's part in: the next round's stores are issued
/// before this round's reduce, so the links stay busy meanwhile. `0` (default): one round per
/// 64 KiB (`PUSH_ROUND_BYTES`) of a block's part, 1 to 16; else that many.
pub const PUSH_ROUNDS_ENV: &str = "NVSH_ALLREDUCE_PUSH_ROUNDS";
/// Measured on 4 H200 with parts of 128, 256 and 512 KiB per block (64 / 128 / 256 MiB): 2, 4
/// and 8 rounds were the best of 1, 2, 4 and 8 (smaller rounds spend more on handshakes).
pub const PUSH_ROUND_BYTES: usize = 64 << 10;
/// Most rounds (device/abi.h).
const PUSH_ROUNDS_MAX: usize = sys::NVSHMEMRS_ALLREDUCE_PUSH_ROUNDS_MAX as usize;

/// Largest grid of the direct two-shot (device/abi.h).
const DIRECT_BLOCKS_MAX: usize = sys::NVSHMEMRS_ALLREDUCE_DIRECT_BLOCKS as usize;
/// Largest grid of the slot protocols (their counters are per block).
const SLOT_BLOCKS_MAX: usize = sys::NVSHMEMRS_ALLREDUCE_SLOT_BLOCKS as usize;
/// Counter phases of the direct two-shot (device/abi.h).
const DIRECT_PHASES: usize = sys::NVSHMEMRS_ALLREDUCE_DIRECT_PHASES as usize;

/// How a two-shot call moves its data (device/abi.h: NVSHMEMRS_ALGO_TWOSHOT, _TWOSHOT_DIRECT, _TWOSHOT_PUSH).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    /// Receive slots, segment by segment: works across nodes.
    Slots,
    /// One launch; each PE loads its chunk from every member's input over the mappings.
    Pull,
    /// One launch; each PE stores its chunks into the members' outputs (out of place only).
    Push,
}

impl Protocol {
    fn code(self) -> i32 {
        (match self {
            Protocol::Slots => sys::NVSHMEMRS_ALGO_TWOSHOT,
            Protocol::Pull => sys::NVSHMEMRS_ALGO_TWOSHOT_DIRECT,
            Protocol::Push => sys::NVSHMEMRS_ALGO_TWOSHOT_PUSH,
        }) as i32
    }
}

/// When the direct two-shot runs and with what launch shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DirectShape {
    min_bytes: usize,
    push_min: usize,
    push_rounds: usize,
    threads: usize,
    max_blocks: usize,
    block_bytes: usize,
}

impl DirectShape {
    /// The shape for a team of `n` PEs (the push protocol's default depends on it).
    fn from_env(n: i32) -> Result<DirectShape> {
        Ok(DirectShape {
            min_bytes: size_from_env(
                DIRECT_MIN_ENV,
                DIRECT_MIN_DEFAULT,
                "a size in bytes such as 1M, or 1T to turn the direct protocol off",
            )?,
            push_min: size_from_env(
                PUSH_MIN_ENV,
                match n {
                    2 => PUSH_MIN_DEFAULT_TWO_PES,
                    3..=4 => PUSH_MIN_DEFAULT,
                    _ => PUSH_OFF,
                },
                "a size in bytes such as 64M, or 1T to turn the push protocol off",
            )?,
            push_rounds: bounded_size_from_env(
                PUSH_ROUNDS_ENV,
                0,
                "a round count from 1 to 16, or 0 (one per 64K of a block's part)",
                |r| r <= PUSH_ROUNDS_MAX,
            )?,
            threads: bounded_size_from_env(
                DIRECT_THREADS_ENV,
                512,
                "a multiple of 32 from 32 to 512",
                |t| t % 32 == 0 && (32..=512).contains(&t),
            )?,
            max_blocks: bounded_size_from_env(
                DIRECT_BLOCKS_ENV,
                128,
                "a block count from 1 to 256",
                |b| (1..=DIRECT_BLOCKS_MAX).contains(&b),
            )?,
            block_bytes: bounded_size_from_env(
                DIRECT_BLOCK_BYTES_ENV,
                16 << 10,
                "a size in bytes of at least 16, such as 16K",
                |b| b >= 16,
            )?,
        })
    }

    /// Blocks for a message of `bytes` over `n` members: one per `block_bytes` of a chunk.
    fn blocks(&self, bytes: usize, n: usize) -> usize {
        bytes
            .div_ceil(n.max(1))
            .div_ceil(self.block_bytes)
            .clamp(1, self.max_blocks)
    }

    /// Push rounds for a message of `bytes` over `n` members on `blocks` blocks.
    fn rounds(&self, bytes: usize, n: usize, blocks: usize) -> usize {
        if self.push_rounds > 0 {
            return self.push_rounds;
        }
        (bytes / n.max(1) / blocks.max(1) / PUSH_ROUND_BYTES).clamp(1, PUSH_ROUNDS_MAX)
    }
}

/// The push protocol's threshold when it is off (as `1T`: no message is that large).
const PUSH_OFF: usize = 1 << 40;

/// What `Auto` picks, from `nvsh bench allreduce` (f32 and bf16 alike, so no dtype-specific
/// row yet; the figures are in docs/measured.md). Two-shot here means its direct protocol where
/// every member is mapped (one node); across nodes it falls back to receive slots.
/// - 2 PEs (2 x H200, 2026-11-22; 4 x H100 2026-11-27): one-shot (low-latency protocol) up to
///   512 KiB, recursive doubling to 8 MiB, the ring to 16 MiB (on the H100s it beat the
///   two-shot at 16 MiB and lost at 32 and 64 MiB), two-shot above (out of place it pushes
///   from 256 MiB).
/// - 3-4 PEs (4 x H200 then; 4 x H100 2026-11-27; 4 x H200 2026-11-28): one-shot up to 512
///   KiB at 3 PEs and 256 KiB at 4, two-shot above (out of place it pushes from 64 MiB) except
///   the ring above 16 MiB to 64 MiB at 4 PEs. Since waits became acquire loads the two-shot
///   beat the one-shot at 512 KiB and recursive doubling at 1 MiB on 4 PEs (the tenth run of
///   docs/measured.md); the ring at 64 MiB is the bench's (two bench runs on two builds had it
///   ahead of the two-shot there, where the tuner, which times each call after a barrier, had
///   it behind). 3 PEs: not measured since, so no ring there.
/// - 5-8 PEs (measured at 8 before the direct two-shot's grid followed the message): one-shot
///   up to 128 KiB, recursive doubling to 2 MiB, two-shot above.
/// - more: recursive doubling for small messages, the ring for large ones.
pub const SELECTION: &[SelectionRule<AllreduceAlgo>] = &[
    rule(1, usize::MAX, AllreduceAlgo::OneShot),
    rule(2, 512 << 10, AllreduceAlgo::OneShot),
    rule(2, 8 << 20, AllreduceAlgo::RecursiveDoubling),
    rule(2, 16 << 20, AllreduceAlgo::Ring),
    rule(2, usize::MAX, AllreduceAlgo::TwoShot),
    rule(3, 512 << 10, AllreduceAlgo::OneShot),
    rule(3, usize::MAX, AllreduceAlgo::TwoShot),
    rule(4, 256 << 10, AllreduceAlgo::OneShot),
    rule(4, 16 << 20, AllreduceAlgo::TwoShot),
    rule(4, 64 << 20, AllreduceAlgo::Ring),
    rule(4, usize::MAX, AllreduceAlgo::TwoShot),
    rule(8, 128 << 10, AllreduceAlgo::OneShot),
    rule(8, 2 << 20, AllreduceAlgo::RecursiveDoubling),
    rule(8, usize::MAX, AllreduceAlgo::TwoShot),
    rule(i32::MAX, 64 << 10, AllreduceAlgo::RecursiveDoubling),
    rule(i32::MAX, usize::MAX, AllreduceAlgo::Ring),
];

/// `NVSH_ALLREDUCE_ALGO` if set (empty means unset).
fn algo_from_env() -> Result<Option<AllreduceAlgo>> {
    match std::env::var(ALGO_ENV) {
        Ok(v) if !v.trim().is_empty() => {
            AllreduceAlgo::parse(&v)
                .map(Some)
                .map_err(|_| Error::InvalidEnv {
                    var: ALGO_ENV,
                    value: v,
                    expected: algo::ALGO_NAMES,
                })
        }
        _ => Ok(None),
    }
}

/// The checked-mode header's `meta` word: what every member must agree on besides the count
/// (a two-shot's protocol too: members that disagree on it would wait on different counters).
fn header_meta(dtype: Dtype, op: ReduceOp, algo: AllreduceAlgo, protocol: Protocol) -> u64 {
    let protocol = match protocol {
        Protocol::Slots => 0,
        Protocol::Pull => 1,
        Protocol::Push => 2,
    };
    dtype as u64 | (op as u64) << 8 | (algo.code() as u64) << 16 | protocol << 24
}

/// A checked-mode header's meta word in words ("bf16 max by ring (direct, push)").
fn describe_meta(value: u64) -> String {
    let code = |shift: u32| (value >> shift) & 0xff;
    let dtype = Dtype::from_code(code(0)).map_or("an unknown type", Dtype::name);
    let op = ReduceOp::ALL
        .into_iter()
        .find(|&o| o as u64 == code(8))
        .map_or("an unknown op", ReduceOp::name);
    let algo = AllreduceAlgo::ALL
        .into_iter()
        .find(|a| a.code() as u64 == code(16))
        .map_or("an unknown algorithm", AllreduceAlgo::name);
    let protocol = match code(24) {
        0 => "",
        1 => " (direct, pull)",
        2 => " (direct, push)",
        _ => " (unknown protocol)",
    };
    format!("{dtype} {op} by {algo}{protocol}")
}

/// Name of an allreduce kernel's algo code (device/abi.h) in messages.
fn protocol_name(code: u64) -> &'static str {
    match u32::try_from(code).unwrap_or(u32::MAX) {
        sys::NVSHMEMRS_ALGO_ONESHOT => "one-shot",
        sys::NVSHMEMRS_ALGO_TWOSHOT => "two-shot",
        sys::NVSHMEMRS_ALGO_RING => "ring",
        sys::NVSHMEMRS_ALGO_RECURSIVE_DOUBLING => "recursive doubling",
        sys::NVSHMEMRS_ALGO_ONESHOT_LL => "low-latency one-shot",
        sys::NVSHMEMRS_ALGO_TWOSHOT_DIRECT => "direct two-shot",
        sys::NVSHMEMRS_ALGO_TWOSHOT_PUSH => "push two-shot",
        _ => "unknown",
    }
}

/// What allreduce says about itself in errors.
static TEXT: CollectiveText = CollectiveText {
    type_name: "Allreduce",
    call: "allreduce",
    algorithm: protocol_name,
    meta: describe_meta,
};

/// Words of `nvshmemrs_allreduce_state` (device/abi.h).
const STATE_WORDS: usize = std::mem::size_of::<sys::nvshmemrs_allreduce_state>() / 8;

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
    online: Option<Box<Online<'nv>>>,
    /// The node-aware algorithm's steps, on a workspace over the world where it spans nodes.
    hier: Option<Box<hier::Hier<'nv, Allreduce<'nv>>>>,
}

/// Receive-slot bytes as allocated: at least 4 KiB, a multiple of 256, and 2 x world of them
/// must fit in memory (None past usize).
fn slot_layout(slot_bytes: usize, world: usize) -> Option<(usize, usize)> {
    let slot = slot_bytes.max(4096).checked_next_multiple_of(256)?;
    let total = slot.checked_mul(world)?.checked_mul(2)?;
    Some((slot, total))
}

/// The low-latency region's slot: its lines carry 8 payload bytes in 16, for payloads up to
/// `ll_max` but no larger than a receive slot's (a multiple of 256, at least 256: never empty).
/// Returns the slot and the region (2 x world of them).
fn ll_layout(ll_max: usize, slot_bytes: usize, world: usize) -> Option<(usize, usize)> {
    let slot = ll_max
        .min(slot_bytes / 2)
        .checked_mul(2)?
        .max(256)
        .checked_next_multiple_of(256)?;
    let total = slot.checked_mul(world)?.checked_mul(2)?;
    Some((slot, total))
}

impl Nvshmem {
    /// A workspace over all PEs whose receive slots hold `slot_bytes` each (2 x n_pes of them).
    /// Larger messages are reduced in segments of that size. Collective.
    pub fn allreduce_workspace(&self, slot_bytes: usize) -> Result<Allreduce<'_>> {
        self.allreduce_workspace_for(Some(&self.team_world()), slot_bytes)
    }

    /// A workspace over `team`. Collective over the WORLD (symmetric allocation): every PE calls
    /// it at the same point with the same `slot_bytes`, each passing its own team of the same
    /// split, or None if it is in none of them (it then only takes part in the allocation; runs
    /// on it return [`Error::NotInTeam`]).
    pub fn allreduce_workspace_for(
        &self,
        team: Option<&Team<'_>>,
        slot_bytes: usize,
    ) -> Result<Allreduce<'_>> {
        let online = self.tune_mode() == crate::core::tuning::TuneMode::Online;
        self.allreduce_workspace_with(team, slot_bytes, online, true)
    }

    /// [`Nvshmem::allreduce_workspace_for`] with online tuning on, whatever `NVSH_TUNE` says:
    /// the first `Auto` call at a size bucket and dtype class the tuned table does not cover
    /// times every algorithm there (outside graph capture) and records the winner. Collective
    /// over the world; every PE must ask for it alike.
    pub fn allreduce_workspace_online(
        &self,
        team: Option<&Team<'_>>,
        slot_bytes: usize,
    ) -> Result<Allreduce<'_>> {
        self.allreduce_workspace_with(team, slot_bytes, true, true)
    }

    /// A workspace that never tunes and has only the flat algorithms: the tuner's own MAX over
    /// PEs, and the hierarchical algorithm's steps, whose rail team is the whole world where
    /// nodes hold one PE each (building steps there again would never end).
    pub(crate) fn allreduce_workspace_untuned(
        &self,
        team: Option<&Team<'_>>,
        slot_bytes: usize,
    ) -> Result<Allreduce<'_>> {
        self.allreduce_workspace_with(team, slot_bytes, false, false)
    }

    fn allreduce_workspace_with(
        &self,
        team: Option<&Team<'_>>,
        slot_bytes: usize,
        online: bool,
        with_hier: bool,
    ) -> Result<Allreduce<'_>> {
        let env_algo = algo_from_env()?;
        let world = self.n_pes() as usize;
        let (slot_bytes, scratch_bytes) =
            slot_layout(slot_bytes, world).ok_or(Error::SizeOverflow {
                what: "allreduce receive slots",
                detail: format!("2 x {world} PEs x {slot_bytes} bytes"),
            })?;
        let ws = Workspace::new(self, team, &TEXT, STATE_WORDS)?;
        log::debug!(
            "allreduce workspace over {} PE(s): {} receive slots of {} bytes, all mapped: {}",
            ws.n_pes(),
            2 * world,
            slot_bytes,
            ws.all_mapped()
        );
        let ll_max = ll_max_from_env(ws.n_pes())?;
        let direct_shape = DirectShape::from_env(ws.n_pes())?;
        let (ll_slot_bytes, ll_bytes) =
            ll_layout(ll_max, slot_bytes, world).ok_or(Error::SizeOverflow {
                what: "allreduce low-latency slots",
                detail: format!("2 x {world} PEs x 2 x {ll_max} bytes"),
            })?;
        // Zeroed: peers fill the slots (see SymmetricBuffer::allocate).
        let scratch = self.alloc_zeroed::<u8>(scratch_bytes)?;
        let ll = self.alloc_zeroed::<u8>(ll_bytes)?;
        let flags =
            self.alloc_zeroed::<u64>(AllreduceAlgo::ALL.len() * 2 * 2 * world * SLOT_BLOCKS_MAX)?;
        let direct_flags = self.alloc_zeroed::<u64>(DIRECT_PHASES * world * DIRECT_BLOCKS_MAX)?;
        let online = if online {
            Some(Box::new(Online::new(self, team)?))
        } else {
            None
        };
        let tuning_key = crate::core::tuning::collective_key(TEXT.call, ws.n_pes(), self.n_pes());
        // Every PE is a member where the team is as large as the world, so all decide alike.
        let hier = if with_hier && ws.n_pes() == self.n_pes() {
            hier::Hier::new(self, slot_bytes, |team| {
                self.allreduce_workspace_untuned(Some(team), slot_bytes)
            })?
            .map(Box::new)
        } else {
            None
        };
        ws.ready()?;
        Ok(Allreduce {
            ws,
            scratch,
            flags,
            ll,
            ll_slot_bytes,
            direct_flags,
            slot_bytes,
            env_algo,
            ll_max,
            direct_shape,
            tuning_key,
            online,
            hier,
        })
    }
}

impl<'nv> Team<'nv> {
    /// [`Nvshmem::allreduce_workspace_for`] this team (collective over the world).
    pub fn allreduce_workspace(&self, slot_bytes: usize) -> Result<Allreduce<'nv>> {
        self.runtime()
            .allreduce_workspace_for(Some(self), slot_bytes)
    }
}

impl<'nv> Allreduce<'nv> {
    /// Over `team` (None on PEs in no team of the split: they only take part in the
    /// allocation), with receive slots of `slot_bytes` each (2 x world of them); larger
    /// messages go in segments of that size. Collective over the world. The same contract as
    /// the family's `new` ([`crate::ReduceScatter::new`]); the same as
    /// [`Nvshmem::allreduce_workspace_for`].
    pub fn new(nv: &'nv Nvshmem, team: Option<&Team<'_>>, slot_bytes: usize) -> Result<Self> {
        nv.allreduce_workspace_for(team, slot_bytes)
    }

    /// Over every PE ([`Nvshmem::allreduce_workspace`]).
    pub fn world(nv: &'nv Nvshmem, slot_bytes: usize) -> Result<Self> {
        nv.allreduce_workspace(slot_bytes)
    }

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

    /// The algorithm `Auto` picks for `bytes` of `dtype` here: NVSH_ALLREDUCE_ALGO if set,
    /// else on a workspace over several nodes the hierarchical one (from
    /// [`hier::HIER_MIN_ENV`]), else the tuned table (a tuning file's, online tuning's:
    /// [`Nvshmem::tuning_table`]), else the built-in [`SELECTION`] table. For ops the hierarchical
    /// algorithm serves (all but integer averages, which a call keeps flat).
    pub fn choose(&self, bytes: usize, dtype: Dtype) -> AllreduceAlgo {
        match hier::auto_first(self.env_algo, self.hier_min(), bytes, true) {
            Some(a) => a,
            None => self
                .tuned(bytes, dtype)
                .unwrap_or_else(|| self.table_choice(bytes, dtype)),
        }
    }

    /// From how many bytes `Auto` takes the hierarchical algorithm, where this workspace has it
    /// (the tuned tables, measured on flat teams, do not see it).
    fn hier_min(&self) -> Option<usize> {
        self.hier.as_ref().map(|h| h.min_bytes)
    }

    /// The built-in table's choice.
    fn table_choice(&self, bytes: usize, dtype: Dtype) -> AllreduceAlgo {
        select(SELECTION, self.ws.n_pes(), bytes, dtype).unwrap_or(AllreduceAlgo::Ring)
    }

    /// The tuned table's choice, if it has one (a name this runtime does not know counts as
    /// none).
    fn tuned(&self, bytes: usize, dtype: Dtype) -> Option<AllreduceAlgo> {
        self.ws
            .runtime()
            .tuned(&self.tuning_key, bytes, dtype.size(), |c| {
                c.and_then(|name| AllreduceAlgo::parse(name).ok())
            })
            .filter(|&a| AllreduceAlgo::ALL.contains(&a))
    }

    /// The online tunings this workspace made, in order.
    pub fn online_tunings(&self) -> &[OnlineTuning] {
        self.online.as_ref().map_or(&[], |o| &o.records)
    }

    /// Whether `Auto` calls here tune unseen sizes ([`Nvshmem::allreduce_workspace_online`]).
    pub fn tunes_online(&self) -> bool {
        self.online.is_some()
    }

    /// Online tuning of the bucket of `input`'s size: every algorithm runs on the call's own
    /// buffers (in place, the data is saved first and put back after), timed as
    /// [`crate::coll::tuning`] says; the winner goes into the runtime's tuned table. The
    /// output's contents are undefined afterwards (the real call overwrites them).
    fn tune_online<T: Reducible>(
        &mut self,
        input: SymView<'_, T>,
        output: SymView<'_, T>,
        op: ReduceOp,
        stream: &CudaStream,
    ) -> Result<AllreduceAlgo> {
        let Some(mut online) = self.online.take() else {
            return Ok(self.table_choice(input.num_bytes(), T::DTYPE));
        };
        let r = self.tune_with(&mut online, input, output, op, stream);
        self.online = Some(online);
        r
    }

    fn tune_with<T: Reducible>(
        &mut self,
        online: &mut Online<'nv>,
        input: SymView<'_, T>,
        output: SymView<'_, T>,
        op: ReduceOp,
        stream: &CudaStream,
    ) -> Result<AllreduceAlgo> {
        use cudarc::driver::result as cu;
        let started = std::time::Instant::now();
        let bytes = input.num_bytes();
        let algos = AllreduceAlgo::ALL;
        let runs = online::online_runs(bytes, algos.len(), online.budget_ms);
        online.timer.set_timeout(self.ws.timeout());
        let in_place = input.as_device_ptr() == output.as_device_ptr();
        self.ws.runtime().bind()?;
        // In place, every run reduces the buffer again: keep the data to put back.
        let backup = if in_place {
            // SAFETY: a fresh allocation on this context, freed on the same stream below.
            let b = unsafe { cu::malloc_async(stream.cu_stream(), bytes) }?;
            // SAFETY: `bytes` of device memory on both sides, in stream order.
            unsafe {
                cu::memcpy_dtod_async(b, input.as_device_ptr() as u64, bytes, stream.cu_stream())
            }?;
            Some(b)
        } else {
            None
        };
        let timed = (|| -> Result<_> {
            let mut run =
                |i: usize, s: &CudaStream| self.run(input, output, op, algos[i], s).map(|_| ());
            let local = online.timer.run(algos.len(), 1, runs, &mut run, stream)?;
            self.check()?;
            let samples = online.timer.samples(local.len())?;
            self.run(
                samples,
                samples,
                ReduceOp::Max,
                AllreduceAlgo::OneShot,
                stream,
            )?;
            self.sync(stream)?;
            Ok((local, samples.to_vec()?))
        })();
        if let Some(b) = backup {
            // Every peer's last run is over once our MAX completed (theirs came after it in
            // their stream order), so nothing reads the buffer while it is put back.
            // SAFETY: as above; `b` is freed after the copy in stream order.
            unsafe {
                let _ = cu::memcpy_dtod_async(
                    input.as_device_ptr() as u64,
                    b,
                    bytes,
                    stream.cu_stream(),
                );
                let _ = cu::free_async(b, stream.cu_stream());
            }
        }
        let (local, maxed) = timed?;
        let names: Vec<String> = algos.iter().map(|a| a.name().to_string()).collect();
        let m = measurement(&names, &local, &maxed, runs);
        let choice = algos[m.best];
        let bucket = crate::core::tuning::size_bucket(bytes);
        self.ws
            .runtime()
            .record_tuned(&self.tuning_key, T::DTYPE.size(), bucket, choice.name());
        let wall = started.elapsed();
        log::info!(
            "allreduce online tuning at {} {}: {} ({:.1} us; {}) in {:.2} ms",
            crate::core::env_value::size_label(bytes),
            T::DTYPE.name(),
            choice.name(),
            m.winner().us,
            m.candidates
                .iter()
                .map(|c| format!("{} {:.1}", c.name, c.us))
                .collect::<Vec<_>>()
                .join(", "),
            wall.as_secs_f64() * 1e3
        );
        online.records.push(OnlineTuning {
            bytes,
            bucket,
            dtype: T::DTYPE,
            choice,
            wall,
            measurement: m,
        });
        Ok(choice)
    }

    /// `output = op(input of every PE)`, element-wise, in stream order. `input` and `output`
    /// are of equal length (at least 1), and either the same range (in place) or not
    /// overlapping. Returns the algorithm used.
    ///
    /// Each buffer is a symmetric view or this PE's own device memory ([`InBuf`], [`OutBuf`]:
    /// a cudarc slice or view, or a raw pointer), the latter staged through the workspace's
    /// symmetric area (docs/staging.md): a device-to-device copy in before the
    /// reduction and one out after it, on `stream`. The area grows at the first call of a
    /// larger size (collectively: every member passes its own memory at the same calls) unless
    /// [`Allreduce::reserve_staging`] made it large enough.
    ///
    /// Every wait of the kernels has a deadline ([`Allreduce::set_timeout`]); a failure shows in
    /// [`Allreduce::check`] / [`Allreduce::sync`], and a call on a workspace that already failed
    /// returns that error at once.
    pub fn run<'a, 'b, T: Reducible>(
        &mut self,
        input: impl Into<InBuf<'a, T>>,
        output: impl Into<OutBuf<'b, T>>,
        op: ReduceOp,
        algo: AllreduceAlgo,
        stream: &CudaStream,
    ) -> Result<AllreduceAlgo> {
        let (input, mut output) = (input.into(), output.into());
        let located = self.ws.locate("allreduce", &input, &mut output, stream)?;
        self.run_located(located, op, algo, stream)
    }

    /// [`Allreduce::run`] on located buffers: checks, stages, reduces, copies a staged output
    /// back.
    fn run_located<T: Reducible>(
        &mut self,
        [i, o]: [Located<'_, T>; 2],
        op: ReduceOp,
        algo: AllreduceAlgo,
        stream: &CudaStream,
    ) -> Result<AllreduceAlgo> {
        check_elementwise("allreduce", &self.ws, &i, &o)?;
        let staged = self
            .ws
            .stage("allreduce", [i, o], StageIo::BOTH, true, stream)?;
        let algo = self.run_symmetric(staged.input(), staged.output(), op, algo, stream)?;
        staged.finish(stream)?;
        Ok(algo)
    }

    /// The reduction on checked symmetric views.
    fn run_symmetric<T: Reducible>(
        &mut self,
        input: SymView<'_, T>,
        output: SymView<'_, T>,
        op: ReduceOp,
        algo: AllreduceAlgo,
        stream: &CudaStream,
    ) -> Result<AllreduceAlgo> {
        let algo = match algo {
            AllreduceAlgo::Auto => {
                let bytes = input.num_bytes();
                let serves = hier::serves(op, T::DTYPE);
                let first = hier::auto_first(self.env_algo, self.hier_min(), bytes, serves);
                match (first, self.tuned(bytes, T::DTYPE)) {
                    (Some(a), _) | (None, Some(a)) => a,
                    // Never while capturing: the tuning synchronises the stream.
                    (None, None) if self.online.is_some() && !is_capturing(stream) => {
                        self.tune_online(input, output, op, stream)?
                    }
                    (None, None) => self.table_choice(bytes, T::DTYPE),
                }
            }
            a => a,
        };
        if algo == AllreduceAlgo::Hierarchical {
            return self.run_hier(input, output, op, stream);
        }
        let rank = self.ws.begin_call()?;
        let count = input.len();
        let elem = std::mem::size_of::<T>();
        let protocol = self.protocol(algo, &input, &output);
        log::debug!(
            "allreduce call {}: {count} x {} {} by {} ({protocol:?})",
            self.ws.calls(),
            T::DTYPE.name(),
            op.name(),
            algo.name()
        );
        self.ws.exchange_header(
            self.args(rank, &input, &output).hdr,
            header_meta(T::DTYPE, op, algo, protocol),
            sys::NVSHMEMRS_WAIT_OP_ALLREDUCE,
            -1,
            stream,
        )?;
        if protocol != Protocol::Slots {
            // One launch for the whole message: no slots, so no segments.
            self.step::<T>(algo, protocol, op, rank, input, output, stream)?;
            return Ok(algo);
        }
        let per16 = (16 / elem).max(1);
        let slot_elems = self.slot_bytes / elem / per16 * per16;
        let segment = if algo.whole_segment_per_slot() {
            slot_elems
        } else {
            slot_elems * self.ws.n_pes() as usize
        };
        let mut start = 0;
        while start < count {
            let len = segment.min(count - start);
            let (seg_in, seg_out) = (
                input.view(start..start + len)?,
                output.view(start..start + len)?,
            );
            self.step::<T>(algo, protocol, op, rank, seg_in, seg_out, stream)?;
            start += len;
        }
        Ok(algo)
    }

    /// The hierarchical algorithm ([`hier`]), where this workspace has it.
    fn run_hier<T: Reducible>(
        &mut self,
        input: SymView<'_, T>,
        output: SymView<'_, T>,
        op: ReduceOp,
        stream: &CudaStream,
    ) -> Result<AllreduceAlgo> {
        self.ws.begin_call()?;
        let Some(h) = self.hier.as_mut() else {
            return Err(Error::CollectiveShape {
                what: "allreduce",
                detail: "the hierarchical algorithm needs a workspace over the world on several \
                         nodes in blocks of consecutive PEs (or NVSH_PRETEND_NODE_SIZE); pick a \
                         flat one (auto, oneshot, twoshot, ring, rd)"
                    .into(),
            });
        };
        log::debug!(
            "allreduce call {}: {} x {} {} by hier over {} nodes of {}",
            self.ws.calls(),
            input.len(),
            T::DTYPE.name(),
            op.name(),
            h.layout().nodes(),
            h.layout().size()
        );
        h.run(input, output, op, stream)?;
        Ok(AllreduceAlgo::Hierarchical)
    }

    /// The kernel arguments for `input` -> `output` on this PE.
    fn args<T: Reducible>(
        &self,
        rank: i32,
        input: &SymView<'_, T>,
        output: &SymView<'_, T>,
    ) -> sys::nvshmemrs_allreduce_args {
        sys::nvshmemrs_allreduce_args {
            hdr: sys::nvshmemrs_coll_header {
                input: input.as_device_ptr().cast(),
                output: output.as_device_ptr().cast(),
                count: input.len(),
                scratch: self.scratch.as_device_ptr().cast(),
                slot_bytes: self.slot_bytes,
                flags: self.flags.as_device_ptr(),
                ll_scratch: self.ll.as_device_ptr().cast(),
                ll_slot_bytes: self.ll_slot_bytes,
                direct_flags: self.direct_flags.as_device_ptr(),
                ..self.ws.header(rank)
            },
            rounds: 1,
        }
    }

    /// How a call moves its data: a two-shot takes a direct protocol (one launch over the peer
    /// mappings, no slots) where every member is mapped, the buffers are 16-byte aligned and
    /// the message is large enough; push from [`PUSH_MIN_ENV`] when not in place. Everything
    /// else goes through the receive slots.
    fn protocol<T: Reducible>(
        &self,
        algo: AllreduceAlgo,
        input: &SymView<'_, T>,
        output: &SymView<'_, T>,
    ) -> Protocol {
        let (i, o) = (
            input.as_device_ptr() as usize,
            output.as_device_ptr() as usize,
        );
        let bytes = input.num_bytes();
        let direct = algo == AllreduceAlgo::TwoShot
            && self.ws.all_mapped()
            && (i | o) % 16 == 0
            && self.ws.n_pes() as u32 <= sys::NVSHMEMRS_ALLREDUCE_DIRECT_MAX_PES
            && bytes >= self.direct_shape.min_bytes;
        if !direct {
            Protocol::Slots
        } else if self.ws.n_pes() >= 2 && i != o && bytes >= self.direct_shape.push_min {
            Protocol::Push
        } else {
            Protocol::Pull
        }
    }

    /// Launches one segment's kernel (with a direct `protocol`, the whole message's), as
    /// [`Self::protocol`] chose; the kernel reads and advances the device-side state.
    #[allow(clippy::too_many_arguments)]
    fn step<T: Reducible>(
        &mut self,
        algo: AllreduceAlgo,
        protocol: Protocol,
        op: ReduceOp,
        rank: i32,
        input: SymView<'_, T>,
        output: SymView<'_, T>,
        stream: &CudaStream,
    ) -> Result<()> {
        let n = self.ws.n_pes() as usize;
        let bytes = input.num_bytes();
        let aligned8 = (input.as_device_ptr() as usize | output.as_device_ptr() as usize) % 8 == 0;
        let low_latency = algo == AllreduceAlgo::OneShot
            && self.ws.all_mapped()
            && aligned8
            && self.ws.n_pes() as u32 <= sys::NVSHMEMRS_ALLREDUCE_LL_MAX_PES
            && bytes <= self.ll_max
            && 2 * bytes <= self.ll_slot_bytes;
        let (code, blocks, threads) = match (algo, protocol) {
            _ if low_latency => {
                let shape = low_latency_shape(bytes);
                (
                    sys::NVSHMEMRS_ALGO_ONESHOT_LL as i32,
                    shape.blocks as usize,
                    shape.threads as usize,
                )
            }
            (_, Protocol::Pull | Protocol::Push) => (
                protocol.code(),
                self.direct_shape.blocks(bytes, n),
                self.direct_shape.threads,
            ),
            // One 16 KiB part (of a chunk, or of the message) per block, up to 128 blocks:
            // 32 SMs cannot fill NVLink with stores.
            (AllreduceAlgo::TwoShot | AllreduceAlgo::Ring, Protocol::Slots) => (
                algo.code(),
                parts(bytes / n, 16 << 10, SLOT_BLOCKS_MAX),
                512,
            ),
            _ => (algo.code(), parts(bytes, 16 << 10, SLOT_BLOCKS_MAX), 512),
        };
        let mut args = self.args(rank, &input, &output);
        if protocol == Protocol::Push {
            args.rounds = self.direct_shape.rounds(bytes, n, blocks) as i32;
        }
        self.ws.runtime().bind()?;
        // SAFETY: symmetric input/output of `count` elements, the workspace's own scratch,
        // counters, state and PE table; every member launches the same algo and block count.
        let code = unsafe {
            sys::nvshmemrs_allreduce(
                code,
                T::DTYPE as i32,
                op as i32,
                args,
                blocks as i32,
                threads as i32,
                raw_stream(stream),
            )
        };
        cuda_check(code, "allreduce kernel launch")
    }

    /// [`Allreduce::run`] with the result written over `buffer` (a symmetric view, or this
    /// PE's own device memory, staged as `run` says).
    pub fn run_in_place<'a, T: Reducible>(
        &mut self,
        buffer: impl Into<OutBuf<'a, T>>,
        op: ReduceOp,
        algo: AllreduceAlgo,
        stream: &CudaStream,
    ) -> Result<AllreduceAlgo> {
        let mut buffer = buffer.into();
        let device = self.ws.runtime().device();
        let o = buffer.locate("allreduce", device, stream)?;
        // SAFETY: the span just located as the output (device memory of this GPU); the staged
        // call reads it (copy in) before it writes it (copy out), in stream order.
        let alias = unsafe { InBuf::from_raw(o.addr() as *const T, o.len()) };
        let i = match o.sym() {
            Some(v) => Located::symmetric(v),
            None => alias.locate("allreduce", device, stream)?,
        };
        self.run_located([i, o], op, algo, stream)
    }

    /// Makes the staging area through which calls move this PE's own (non-symmetric) device
    /// memory hold at least `bytes` (an input and an output of n bytes each need 2n rounded up
    /// to 256), so that such calls up to that size allocate nothing: needed before graph
    /// capture and for workspaces over a team smaller than the world. Collective over the
    /// world: every PE, members or not, at the same point with the same `bytes`.
    pub fn reserve_staging(&mut self, bytes: usize) -> Result<()> {
        self.ws.reserve_staging(bytes)
    }

    /// Bytes of the staging area (0 until a call or [`Allreduce::reserve_staging`] needs one).
    pub fn staging_bytes(&self) -> usize {
        self.ws.staging_bytes()
    }
}

impl hier::FlatStep for Allreduce<'_> {
    fn reduce<T: Reducible>(
        &mut self,
        input: SymView<'_, T>,
        output: SymView<'_, T>,
        op: ReduceOp,
        stream: &CudaStream,
    ) -> Result<()> {
        // A step's workspace spans one node or one rail: `Auto` picks a flat algorithm there.
        let algo = self.choose(input.num_bytes(), T::DTYPE);
        self.run_symmetric(input, output, op, algo, stream)
            .map(|_| ())
    }

    fn check(&self) -> Result<()> {
        Allreduce::check(self)
    }

    fn set_timeout(&mut self, timeout: Duration) {
        Allreduce::set_timeout(self, timeout)
    }
}

/// The launch of the low-latency one-shot for a message of `bytes`: a block per 4 KiB, at most
/// 32, of 512 threads, one 16-byte line (8 payload bytes) per thread per pass. Public so that
/// the tools' probe (`nvsh bench probe`) launches its kernels alike.
pub fn low_latency_shape(bytes: usize) -> LaunchShape {
    LaunchShape {
        blocks: parts(bytes, 4 << 10, 32) as u32,
        threads: 512,
    }
}

/// Blocks for `bytes` at one per `unit` bytes, 1 to `max`.
fn parts(bytes: usize, unit: usize, max: usize) -> usize {
    bytes.div_ceil(unit).clamp(1, max)
}

/// [`Allreduce::settings`] for these values.
fn describe_settings(ll_max: usize, d: &DirectShape) -> String {
    use crate::core::env_value::size_label;
    let ll = if ll_max == 0 {
        "low-latency one-shot off".to_string()
    } else {
        format!("low-latency one-shot up to {}", size_label(ll_max))
    };
    let rounds = match d.push_rounds {
        0 => format!(
            "a round per {} of a block's part",
            size_label(PUSH_ROUND_BYTES)
        ),
        r => format!("{r} rounds"),
    };
    let push = if d.push_min >= PUSH_OFF {
        "no push".to_string()
    } else {
        format!(
            "push from {} out of place, {rounds}",
            size_label(d.push_min)
        )
    };
    format!(
        "{ll}; direct two-shot from {} ({push}), {} threads x up to {} blocks of {}",
        size_label(d.min_bytes),
        d.threads,
        d.max_blocks,
        size_label(d.block_bytes)
    )
}

/// Allreduce in the table ([`crate::coll::table::COLLECTIVES`]): `Auto`'s algorithm, no family
/// protocols.
impl<'nv> crate::coll::dispatch::TableCollective<'nv> for Allreduce<'nv> {
    fn collective(&self) -> crate::coll::table::Collective {
        crate::coll::table::Collective::Allreduce
    }

    fn run_any(
        &mut self,
        call: crate::coll::dispatch::AnyCall<'_, '_>,
        stream: &CudaStream,
    ) -> Result<()> {
        let op = call.op;
        crate::coll::dispatch::each_reducible!("allreduce", call.bufs, |i, o| self
            .run(i, o, op, AllreduceAlgo::Auto, stream)
            .map(|_| ()))
    }

    fn n_pes(&self) -> i32 {
        Allreduce::n_pes(self)
    }

    fn check(&self) -> Result<()> {
        Allreduce::check(self)
    }

    fn reserve_staging(&mut self, bytes: usize) -> Result<()> {
        Allreduce::reserve_staging(self, bytes)
    }

    fn staging_bytes(&self) -> usize {
        Allreduce::staging_bytes(self)
    }

    fn lines_max(&self) -> usize {
        0
    }

    fn slot_bytes(&self) -> Option<usize> {
        Some(Allreduce::slot_bytes(self))
    }

    fn protocols(&self) -> Vec<crate::proto::family::FamilyProtocol> {
        Vec::new()
    }

    fn set_protocol(&mut self, _: crate::proto::family::FamilyProtocol) {}

    fn last_protocol(&self) -> Option<crate::proto::family::FamilyProtocol> {
        None
    }

    fn settings(&self) -> Option<String> {
        Some(Allreduce::settings(self))
    }
}

/// Its row's constructor ([`crate::Collective::create`]).
pub(crate) fn create<'nv>(
    nv: &'nv Nvshmem,
    team: Option<&Team<'_>>,
    slot_bytes: usize,
) -> Result<Box<dyn crate::coll::dispatch::TableCollective<'nv> + 'nv>> {
    Ok(Box::new(Allreduce::new(nv, team, slot_bytes)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::tests::with_env;
    use crate::coll::family::refuse_overlap;

    #[test]
    fn low_latency_launch_has_a_block_per_4k_up_to_32() {
        let shape = |bytes| low_latency_shape(bytes).to_string();
        assert_eq!(shape(8), "1x512");
        assert_eq!(shape(4 << 10), "1x512");
        assert_eq!(shape((4 << 10) + 8), "2x512");
        assert_eq!(shape(128 << 10), "32x512");
        assert_eq!(shape(1 << 20), "32x512");
    }

    #[test]
    fn outputs_overlapping_the_input_are_refused_unless_in_place() {
        // Allreduce runs in place only when the views are the same (check_elementwise).
        let overlap_check = |what, i: std::ops::Range<usize>, o: std::ops::Range<usize>| {
            refuse_overlap(what, i.clone(), o.clone(), i == o)
        };
        assert!(overlap_check("allreduce", 0..64, 0..64).is_ok());
        assert!(overlap_check("allreduce", 0..64, 64..128).is_ok());
        assert!(overlap_check("allreduce", 64..128, 0..64).is_ok());
        for (i, o) in [
            (0..64, 32..96),
            (32..96, 0..64),
            (0..64, 0..32),
            (0..64, 16..48),
        ] {
            let err = overlap_check("allreduce", i.clone(), o.clone()).unwrap_err();
            assert!(matches!(err, Error::Overlap { .. }), "{i:?} {o:?}: {err:?}");
            assert!(err.to_string().contains("in place"), "{err}");
        }
    }

    #[test]
    fn the_low_latency_region_fits_its_largest_payload_twice() {
        // 512 KiB payloads need 1 MiB lines per source, unless the receive slots are smaller.
        assert_eq!(ll_layout(512 << 10, 4 << 20, 8), Some((1 << 20, 16 << 20)));
        assert_eq!(
            ll_layout(512 << 10, 64 << 10, 2),
            Some((64 << 10, 256 << 10))
        );
        // Off, or tiny: one 256-byte slot each, never an empty allocation.
        assert_eq!(ll_layout(0, 1 << 20, 4), Some((256, 2048)));
        assert_eq!(ll_layout(100, 1 << 20, 1), Some((256, 512)));
        // An odd limit rounds the slot up, so 2 x the payload always fits.
        let (slot, _) = ll_layout(1000, 1 << 20, 2).unwrap();
        assert!(slot >= 2000 && slot % 256 == 0);
        assert_eq!(ll_layout(usize::MAX / 2, usize::MAX, 2), None);
    }

    #[test]
    fn header_fields_read_back_as_arguments() {
        assert_eq!(TEXT.header_field(0, 1000), "1000 elements");
        let slots = Protocol::Slots;
        let meta = header_meta(Dtype::Bf16, ReduceOp::Max, AllreduceAlgo::Ring, slots);
        assert_eq!(TEXT.header_field(1, meta), "bf16 max by ring");
        let meta = header_meta(
            Dtype::U64,
            ReduceOp::Avg,
            AllreduceAlgo::RecursiveDoubling,
            slots,
        );
        assert_eq!(TEXT.header_field(1, meta), "u64 avg by rd");
        assert_ne!(
            header_meta(Dtype::F32, ReduceOp::Sum, AllreduceAlgo::OneShot, slots),
            header_meta(Dtype::F32, ReduceOp::Sum, AllreduceAlgo::TwoShot, slots)
        );
        // Members that would take different two-shot protocols disagree in the header.
        let two = |p| header_meta(Dtype::F32, ReduceOp::Sum, AllreduceAlgo::TwoShot, p);
        assert_ne!(two(Protocol::Pull), two(Protocol::Push));
        assert_eq!(
            TEXT.header_field(1, two(Protocol::Push)),
            "f32 sum by twoshot (direct, push)"
        );
        assert_eq!(
            TEXT.header_field(1, two(Protocol::Pull)),
            "f32 sum by twoshot (direct, pull)"
        );
    }

    #[test]
    fn the_table_picks_by_pe_count_and_size() {
        let pick = |n, bytes| select(SELECTION, n, bytes, Dtype::F32).unwrap();
        assert_eq!(pick(1, 1 << 30), AllreduceAlgo::OneShot);
        assert_eq!(pick(2, 4096), AllreduceAlgo::OneShot);
        assert_eq!(pick(2, 512 << 10), AllreduceAlgo::OneShot);
        assert_eq!(pick(2, 1 << 20), AllreduceAlgo::RecursiveDoubling);
        assert_eq!(pick(2, 8 << 20), AllreduceAlgo::RecursiveDoubling);
        assert_eq!(pick(2, 16 << 20), AllreduceAlgo::Ring);
        assert_eq!(pick(2, 32 << 20), AllreduceAlgo::TwoShot);
        assert_eq!(pick(2, 64 << 20), AllreduceAlgo::TwoShot);
        assert_eq!(pick(3, 512 << 10), AllreduceAlgo::OneShot);
        assert_eq!(pick(3, 1 << 20), AllreduceAlgo::TwoShot);
        assert_eq!(pick(3, 64 << 20), AllreduceAlgo::TwoShot);
        assert_eq!(pick(4, 256 << 10), AllreduceAlgo::OneShot);
        assert_eq!(pick(4, 512 << 10), AllreduceAlgo::TwoShot);
        assert_eq!(pick(4, 1 << 20), AllreduceAlgo::TwoShot);
        assert_eq!(pick(4, 2 << 20), AllreduceAlgo::TwoShot);
        assert_eq!(pick(4, 16 << 20), AllreduceAlgo::TwoShot);
        assert_eq!(pick(4, 32 << 20), AllreduceAlgo::Ring);
        assert_eq!(pick(4, 64 << 20), AllreduceAlgo::Ring);
        assert_eq!(pick(4, 128 << 20), AllreduceAlgo::TwoShot);
        assert_eq!(pick(4, 256 << 20), AllreduceAlgo::TwoShot);
        assert_eq!(pick(8, 4096), AllreduceAlgo::OneShot);
        assert_eq!(pick(8, 128 << 10), AllreduceAlgo::OneShot);
        assert_eq!(pick(8, 256 << 10), AllreduceAlgo::RecursiveDoubling);
        assert_eq!(pick(8, 1 << 20), AllreduceAlgo::RecursiveDoubling);
        assert_eq!(pick(8, 64 << 20), AllreduceAlgo::TwoShot);
        assert_eq!(pick(16, 4096), AllreduceAlgo::RecursiveDoubling);
        assert_eq!(pick(16, 256 << 20), AllreduceAlgo::Ring);
    }

    #[test]
    fn the_direct_shape_comes_from_the_environment_and_scales_with_the_message() {
        let shape = with_env(&[], || DirectShape::from_env(8)).unwrap();
        assert_eq!(shape.min_bytes, DIRECT_MIN_DEFAULT);
        assert_eq!(shape.push_rounds, 0);
        // Push by default only where it was measured to win: 2 to 4 PEs.
        for (n, push_min) in [
            (1, PUSH_OFF),
            (2, PUSH_MIN_DEFAULT_TWO_PES),
            (3, PUSH_MIN_DEFAULT),
            (4, PUSH_MIN_DEFAULT),
            (5, PUSH_OFF),
        ] {
            let s = with_env(&[], || DirectShape::from_env(n)).unwrap();
            assert_eq!(s.push_min, push_min, "{n} PEs");
        }
        assert_eq!(shape.push_min, PUSH_OFF);
        // A round per 64 KiB of a block's part, 1 to 16.
        assert_eq!(shape.rounds(16 << 20, 4, 128), 1);
        assert_eq!(shape.rounds(64 << 20, 4, 128), 2);
        assert_eq!(shape.rounds(256 << 20, 4, 128), 8);
        assert_eq!(shape.rounds(1 << 30, 2, 128), 16);
        assert_eq!(
            (shape.threads, shape.max_blocks, shape.block_bytes),
            (512, 128, 16 << 10)
        );
        // One block per 16 KiB of a PE's chunk, from 1 to 128.
        assert_eq!(shape.blocks(4096, 8), 1);
        assert_eq!(shape.blocks(1 << 20, 8), 8);
        assert_eq!(shape.blocks(2 << 20, 2), 64);
        assert_eq!(shape.blocks(8 << 20, 2), 128);
        assert_eq!(shape.blocks(256 << 20, 8), 128);
        let tuned = with_env(
            &[
                (DIRECT_MIN_ENV, "1M"),
                (PUSH_MIN_ENV, "32M"),
                (PUSH_ROUNDS_ENV, "16"),
                (DIRECT_THREADS_ENV, "256"),
                (DIRECT_BLOCKS_ENV, "256"),
                (DIRECT_BLOCK_BYTES_ENV, "16K"),
            ],
            // The variable also turns push on where its default is off.
            || DirectShape::from_env(2),
        )
        .unwrap();
        assert_eq!(
            tuned,
            DirectShape {
                min_bytes: 1 << 20,
                push_min: 32 << 20,
                push_rounds: 16,
                threads: 256,
                max_blocks: 256,
                block_bytes: 16 << 10
            }
        );
        for (var, value) in [
            (DIRECT_THREADS_ENV, "100"),
            (DIRECT_THREADS_ENV, "1024"),
            (PUSH_ROUNDS_ENV, "17"),
            (DIRECT_BLOCKS_ENV, "0"),
            (DIRECT_BLOCKS_ENV, "257"),
            (DIRECT_BLOCK_BYTES_ENV, "8"),
            (DIRECT_MIN_ENV, "big"),
            (PUSH_MIN_ENV, "-1"),
        ] {
            let err = with_env(&[(var, value)], || DirectShape::from_env(4)).unwrap_err();
            assert!(err.to_string().contains(var), "{var}={value}: {err}");
        }
    }

    #[test]
    fn settings_read_as_the_bench_header_says() {
        let shape = with_env(&[], || DirectShape::from_env(2)).unwrap();
        assert_eq!(
            describe_settings(LL_MAX_DEFAULT, &shape),
            "low-latency one-shot up to 512K; direct two-shot from 0 (push from 256M out of \
             place, a round per 64K of a block's part), 512 threads x up to 128 blocks of 16K"
        );
        let shape = with_env(&[], || DirectShape::from_env(8)).unwrap();
        assert!(describe_settings(LL_MAX_DEFAULT_WIDE, &shape).contains("from 0 (no push),"));
        let shape = with_env(&[], || DirectShape::from_env(4)).unwrap();
        assert_eq!(
            describe_settings(LL_MAX_DEFAULT_WIDE, &shape),
            "low-latency one-shot up to 256K; direct two-shot from 0 (push from 64M out of \
             place, a round per 64K of a block's part), 512 threads x up to 128 blocks of 16K"
        );
        let fixed = with_env(&[(PUSH_ROUNDS_ENV, "3")], || DirectShape::from_env(4)).unwrap();
        assert!(describe_settings(0, &fixed).contains("64M out of place, 3 rounds)"));
        assert!(describe_settings(0, &shape).starts_with("low-latency one-shot off; "));
    }

    #[test]
    fn names_round_trip_and_the_env_override_is_checked() {
        let every = [AllreduceAlgo::Auto, AllreduceAlgo::Hierarchical];
        for a in AllreduceAlgo::ALL.into_iter().chain(every) {
            assert_eq!(AllreduceAlgo::parse(a.name()).unwrap(), a);
            assert_eq!(a.name().parse::<AllreduceAlgo>().unwrap(), a);
        }
        assert_eq!(
            AllreduceAlgo::parse("Recursive-Doubling").unwrap(),
            AllreduceAlgo::RecursiveDoubling
        );
        assert_eq!(
            AllreduceAlgo::parse("hierarchical").unwrap(),
            AllreduceAlgo::Hierarchical
        );
        assert!(!AllreduceAlgo::ALL.contains(&AllreduceAlgo::Hierarchical));
        let err = AllreduceAlgo::parse("fastest").unwrap_err();
        assert!(matches!(err, Error::UnknownName { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            "no allreduce algorithm named \"fastest\": expected auto, oneshot, twoshot, ring, rd or hier"
        );
        with_env(&[(ALGO_ENV, "ring")], || {
            assert_eq!(algo_from_env().unwrap(), Some(AllreduceAlgo::Ring));
        });
        with_env(&[(ALGO_ENV, "")], || {
            assert_eq!(algo_from_env().unwrap(), None)
        });
        with_env(&[(LL_MAX_ENV, "0")], || {
            assert_eq!(ll_max_from_env(2).unwrap(), 0)
        });
        with_env(&[(LL_MAX_ENV, "256K")], || {
            assert_eq!(ll_max_from_env(8).unwrap(), 256 << 10)
        });
        with_env(&[], || {
            assert_eq!(ll_max_from_env(2).unwrap(), LL_MAX_DEFAULT);
            assert_eq!(ll_max_from_env(4).unwrap(), LL_MAX_DEFAULT_WIDE)
        });
        with_env(&[(LL_MAX_ENV, "lots")], || {
            assert!(ll_max_from_env(2).is_err())
        });
        with_env(&[(ALGO_ENV, "fastest")], || {
            let err = algo_from_env().unwrap_err().to_string();
            assert!(
                err.contains("NVSH_ALLREDUCE_ALGO") && err.contains("ring"),
                "{err}"
            );
        });
    }
}
