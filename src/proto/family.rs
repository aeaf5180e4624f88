//! What the collective family beside allreduce shares (device/coll/family.h): a [`Workspace`],
//! the per-block counters of the ARRIVE/DATA handshakes, receive slots for the reductions, the
//! launch shape and the kernel arguments. Each collective in `crate::coll` embeds one
//! [`FamilyWorkspace`] and adds its checks and its kernel.

use crate::core::buffer::SymmetricBuffer;
use crate::core::error::{Error, Result};
use crate::core::node::NodeLayout;
use crate::core::result::cuda_check;
use crate::core::runtime::Nvshmem;
use crate::core::stream::raw_stream;
use crate::proto::lines::{self, ExchangePairs, LineLimits};
use crate::proto::node_steps::{self, NodePlan, NodeSteps, FAMILY_HIER_MIN_ENV};
use crate::proto::{CollectiveText, Workspace};
use crate::sys;
use crate::team::Team;
use cudarc::driver::CudaStream;

/// Largest grid of the family's kernels (device/abi.h).
pub const FAMILY_BLOCKS: usize = sys::NVSHMEMRS_FAMILY_BLOCKS as usize;
/// Bytes of a peer's part each block moves, at least: the grid is the part over this.
const BLOCK_BYTES: usize = 16 << 10;
/// Threads per block of the family's kernels.
const THREADS: i32 = sys::NVSHMEMRS_FAMILY_THREADS as i32;
/// Largest block (bytes per rank block) the low-latency protocol carries, where the collective
/// has it (broadcast, reduce, allgather, alltoall, reduce-scatter) and every member is mapped;
/// 0 turns it off and allocates no line region. Every PE must set the same: the region is
/// symmetric.
pub const FAMILY_LL_MAX_ENV: &str = "NVSH_FAMILY_LL_MAX";
/// Default of [`FAMILY_LL_MAX_ENV`]: 256 KiB. On 4 x H100 at 2 and 4 PEs the lines took
/// 0.30-0.83x the handshake's time up to a 256 KiB block; at 1 MiB broadcast lost to it and
/// reduce gained little at 2 PEs (docs/measured.md). The region costs 4 x 256 KiB x world PEs
/// per workspace.
pub const FAMILY_LL_MAX_DEFAULT: usize = 256 << 10;
/// Checked mode's meta bit for a call under the low-latency protocol: members that disagree on
/// the protocol would wait on different words.
pub const META_LL: u64 = 1 << 24;
/// Checked mode's meta bit for a call under the split protocol ([`FamilyProtocol::Split`]).
pub const META_SPLIT: u64 = 1 << 25;
/// Checked mode's meta bit for a call under the pull protocol ([`FamilyProtocol::Pull`]).
pub const META_PULL: u64 = 1 << 26;
/// Smallest buffer (bytes; a rank block) that `Auto` moves by the pull protocol, where the
/// collective has it (reduce, reduce-scatter), the team has exactly 2 members, every one
/// mapped, and the lines do not fit. A huge value (`1T`) turns the choice off. Every PE must
/// set the same.
pub const FAMILY_PULL_MIN_ENV: &str = "NVSH_FAMILY_PULL_MIN";
/// Default of [`FAMILY_PULL_MIN_ENV`]: 4 MiB, from where the pull took no longer than the
/// handshake in reduce on 2 x H200 (docs/measured.md).
pub const FAMILY_PULL_MIN_DEFAULT: usize = 4 << 20;
/// Members at which `Auto` pulls: the only count measured so far (from 3 on the root's links
/// carry n - 1 buffers either way, and the split protocol takes the large sizes); `nvsh tune`
/// times the pull at every count.
pub const PULL_AUTO_PES: i32 = 2;
/// Smallest buffer (bytes) that `Auto` moves by the split protocol, where the collective has it
/// (broadcast, reduce) and the team has at least 3 members (`SPLIT_MIN_PES`): there the root's
/// links carry one buffer's worth instead of n - 1. A huge value (`1T`) turns the choice off.
/// Every PE must set the same (members that disagree fail checked mode, or time out).
pub const FAMILY_SPLIT_MIN_ENV: &str = "NVSH_FAMILY_SPLIT_MIN";
/// Default of [`FAMILY_SPLIT_MIN_ENV`]: 4 MiB, the smallest size at which the split took no
/// longer than the handshake on 4 x H100 (docs/measured.md).
pub const FAMILY_SPLIT_MIN_DEFAULT: usize = 4 << 20;
/// Fewest members for which `Auto` splits: at 2 the split moves what the handshake moves.
pub const SPLIT_MIN_PES: i32 = 3;
/// Bytes of a block's chunk the split protocol sends per round where every member is mapped
/// (abi.h NVSHMEMRS_FAMILY_SPLIT): a member passes round j on (broadcast) or reduces it
/// (reduce) while round j + 1 arrives. Smaller rounds start the second phase sooner and pay
/// a fence and a signal more often; `0` sends each chunk in one round. Every PE must set the
/// same.
pub const FAMILY_SPLIT_ROUND_ENV: &str = "NVSH_FAMILY_SPLIT_ROUND";
/// Default of [`FAMILY_SPLIT_ROUND_ENV`].
pub const FAMILY_SPLIT_ROUND_DEFAULT: usize = 32 << 10;
/// Threads per block of the low-latency launches: one 16-byte line each per pass.
const LL_THREADS: i32 = THREADS;
/// Payload bytes per block of a low-latency launch, and most blocks.
const LL_BLOCK_BYTES: usize = 4 << 10;
const LL_BLOCKS_MAX: usize = 32;

/// [`FAMILY_LL_MAX_ENV`], checked.
fn ll_max_from_env() -> Result<usize> {
    crate::core::env_value::size_from_env(
        FAMILY_LL_MAX_ENV,
        FAMILY_LL_MAX_DEFAULT,
        "a size in bytes such as 65536, 64K or 0 (off)",
    )
}

/// [`FAMILY_SPLIT_MIN_ENV`], checked.
fn split_min_from_env() -> Result<usize> {
    crate::core::env_value::size_from_env(
        FAMILY_SPLIT_MIN_ENV,
        FAMILY_SPLIT_MIN_DEFAULT,
        "a size in bytes such as 1048576, 1M or 1T (never)",
    )
}

/// [`FAMILY_PULL_MIN_ENV`], checked.
fn pull_min_from_env() -> Result<usize> {
    crate::core::env_value::size_from_env(
        FAMILY_PULL_MIN_ENV,
        FAMILY_PULL_MIN_DEFAULT,
        "a size in bytes such as 1048576, 1M or 1T (never)",
    )
}

/// [`FAMILY_HIER_MIN_ENV`], checked.
fn hier_min_from_env() -> Result<usize> {
    crate::core::env_value::size_from_env(
        FAMILY_HIER_MIN_ENV,
        node_steps::FAMILY_HIER_MIN_DEFAULT,
        "a size in bytes such as 1048576, 1M, 0 (always) or 1T (never)",
    )
}

/// [`FAMILY_SPLIT_ROUND_ENV`], checked.
fn split_round_from_env() -> Result<usize> {
    crate::core::env_value::size_from_env(
        FAMILY_SPLIT_ROUND_ENV,
        FAMILY_SPLIT_ROUND_DEFAULT,
        "a size in bytes such as 65536, 64K or 0 (one round)",
    )
}

/// Words of `nvshmemrs_allreduce_state` (the family's kernels use its step count).
const STATE_WORDS: usize = std::mem::size_of::<sys::nvshmemrs_allreduce_state>() / 8;

/// One call of a family collective, as its `run` describes it once the arguments are checked.
pub struct FamilyCall {
    /// The collective's code (its row's in src/coll/table.rs; what a timeout names).
    pub code: u32,
    /// Checked mode's meta word: what every member must agree on besides the count.
    pub meta: u64,
    /// Device address of the input (rank block 0).
    pub input: *const std::ffi::c_void,
    /// Device address of the output (rank block 0).
    pub output: *mut std::ffi::c_void,
    /// Elements per rank block.
    pub count: usize,
    /// Elements from one rank block to the next in the buffers that hold one per rank.
    pub stride: usize,
    /// Bytes per element.
    pub elem_bytes: usize,
    /// The root's team rank (0 where there is none).
    pub root: i32,
}

/// What a family workspace holds besides its counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scratch {
    /// Nothing: the data goes straight into the outputs (broadcast, allgather, alltoall).
    None,
    /// Receive slots of this many bytes, 2 x world of them (reductions); larger messages go in
    /// segments of a slot.
    Slots(usize),
    /// The exchange region (device/abi.h): counters, per-pair state and mailboxes of alltoallv,
    /// allgatherv and grouped send/recv.
    Exchange,
}

/// How a family collective moves data to peers that are mapped (NVLink or PCIe in one node);
/// unmapped peers always get NVSHMEM puts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FamilyProtocol {
    /// The tuned table's choice for the call's size and dtype class ("direct" or "put"), else
    /// direct stores.
    Auto,
    /// Direct stores (unless `NVSH_NO_DIRECT`).
    Direct,
    /// NVSHMEM puts with signal, as across nodes.
    Put,
    /// Low-latency lines where the call allows them (see [`FAMILY_LL_MAX_ENV`]), else direct
    /// stores.
    LowLatency,
    /// The buffer split into one part per member other than the root, which the members pass
    /// on to each other (broadcast: scatter, then allgather; reduce: reduce-scatter, then
    /// gather into the root's output), so that no member's links carry much more than one
    /// buffer's worth; where the collective has it (broadcast, reduce) and the team has at
    /// least 2 members, else direct stores. Mapped peers get direct stores, others NVSHMEM
    /// puts. `Auto` takes it from [`FAMILY_SPLIT_MIN_ENV`] bytes on at 3 members or more
    /// (`SPLIT_MIN_PES`).
    Split,
    /// The reducing members load the inputs from the peers' buffers over the mapping and
    /// reduce them in one pass, no receive slots (reduce: the root loads every input;
    /// reduce-scatter: every member loads its block of every input); where the collective has
    /// it (reduce, reduce-scatter), the team has 2 to 64 members and every one is mapped with
    /// direct stores on, else direct stores. `Auto` takes it from [`FAMILY_PULL_MIN_ENV`]
    /// bytes at 2 members.
    Pull,
    /// The node-aware steps (`crate::proto::node_steps`): the collective's own kernel on the
    /// node teams over NVLink and on the rails across nodes, one rail per local GPU; where the
    /// collective has them (allgather, reduce-scatter, broadcast, alltoall) and the workspace
    /// is over a world that spans nodes in blocks (pretend nodes included), else direct
    /// stores. `Auto` takes them from [`FAMILY_HIER_MIN_ENV`] bytes (default: never).
    Hierarchical,
}

impl FamilyProtocol {
    /// Every concrete protocol (not `Auto`), as tuning times them (`Split` only where the
    /// collective has it: [`FamilyProtocol::offered`]; `Pull` likewise).
    pub const ALL: [FamilyProtocol; 6] = [
        FamilyProtocol::Direct,
        FamilyProtocol::Put,
        FamilyProtocol::LowLatency,
        FamilyProtocol::Split,
        FamilyProtocol::Pull,
        FamilyProtocol::Hierarchical,
    ];

    /// The concrete protocols a collective with `protocols` runs as themselves (the others
    /// would fall back to direct stores).
    pub fn offered(protocols: Protocols) -> Vec<FamilyProtocol> {
        FamilyProtocol::ALL
            .into_iter()
            .filter(|&p| match p {
                FamilyProtocol::LowLatency => protocols.lines,
                FamilyProtocol::Split => protocols.split,
                FamilyProtocol::Pull => protocols.pull,
                FamilyProtocol::Hierarchical => protocols.nodes,
                _ => true,
            })
            .collect()
    }

    /// The name in tuning files and reports.
    pub fn name(self) -> &'static str {
        match self {
            FamilyProtocol::Auto => "auto",
            FamilyProtocol::Direct => "direct",
            FamilyProtocol::Put => "put",
            FamilyProtocol::LowLatency => "ll",
            FamilyProtocol::Split => "split",
            FamilyProtocol::Pull => "pull",
            FamilyProtocol::Hierarchical => "hier",
        }
    }

    /// Parses a [`FamilyProtocol::name`], in any case; [`Error::UnknownName`] names the
    /// accepted ones. Also `str::parse`.
    pub fn parse(s: &str) -> Result<FamilyProtocol> {
        Ok(match s.trim().to_ascii_lowercase().as_str() {
            "auto" => FamilyProtocol::Auto,
            "direct" => FamilyProtocol::Direct,
            "put" => FamilyProtocol::Put,
            "ll" => FamilyProtocol::LowLatency,
            "split" => FamilyProtocol::Split,
            "pull" => FamilyProtocol::Pull,
            "hier" => FamilyProtocol::Hierarchical,
            _ => {
                return Err(Error::UnknownName {
                    what: "family protocol",
                    name: s.to_string(),
                    expected: "auto, direct, put, ll, split, pull or hier",
                })
            }
        })
    }
}

impl std::str::FromStr for FamilyProtocol {
    type Err = Error;
    fn from_str(s: &str) -> Result<FamilyProtocol> {
        FamilyProtocol::parse(s)
    }
}

/// The protocols a family collective has besides the handshake (its kernel takes them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Protocols {
    /// Low-latency lines ([`FamilyProtocol::LowLatency`]).
    pub lines: bool,
    /// Parts passed on among the members ([`FamilyProtocol::Split`]).
    pub split: bool,
    /// Loads from the peers' buffers ([`FamilyProtocol::Pull`]).
    pub pull: bool,
    /// Node-aware steps ([`FamilyProtocol::Hierarchical`]; `crate::coll::node_plans`).
    pub nodes: bool,
}

impl Protocols {
    /// The handshake only.
    pub const NONE: Protocols = Protocols {
        lines: false,
        split: false,
        pull: false,
        nodes: false,
    };
    /// Low-latency lines too (allgather, alltoall, reduce-scatter).
    pub const LINES: Protocols = Protocols {
        lines: true,
        split: false,
        pull: false,
        nodes: false,
    };
    /// Lines and the pull (reduce-scatter).
    pub const LINES_PULL: Protocols = Protocols {
        lines: true,
        split: false,
        pull: true,
        nodes: false,
    };
    /// Lines and the split protocol (broadcast).
    pub const LINES_SPLIT: Protocols = Protocols {
        lines: true,
        split: true,
        pull: false,
        nodes: false,
    };
    /// Lines and node-aware steps (allgather, alltoall).
    pub const LINES_NODES: Protocols = Protocols {
        nodes: true,
        ..Protocols::LINES
    };
    /// Lines, the pull and node-aware steps (reduce-scatter).
    pub const LINES_PULL_NODES: Protocols = Protocols {
        nodes: true,
        ..Protocols::LINES_PULL
    };
    /// Lines, the split protocol and node-aware steps (broadcast).
    pub const LINES_SPLIT_NODES: Protocols = Protocols {
        nodes: true,
        ..Protocols::LINES_SPLIT
    };
    /// Lines, the split protocol and the pull (reduce).
    pub const LINES_SPLIT_PULL: Protocols = Protocols {
        lines: true,
        split: true,
        pull: true,
        nodes: false,
    };
}

/// What a call's protocol depends on besides the one asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CallFit {
    /// The call fits the low-latency lines (they are on, the block fits, every member is
    /// mapped, 8-byte alignment).
    lines: bool,
    /// The collective has the split protocol and the team at least 2 members.
    split: bool,
    /// The collective has the pull protocol, the team 2 to 64 members, every one mapped with
    /// direct stores on.
    pull: bool,
    /// Members.
    n: i32,
    /// The buffer's (rank block's) bytes.
    bytes: usize,
}

/// The sizes from which `Auto` takes the split and the pull protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Thresholds {
    split_min: usize,
    pull_min: usize,
}

/// The protocol a call takes: `asked` (the set one, or under `Auto` the tuned table's choice)
/// where the call allows it, else direct stores; `Auto` with no tuned choice takes the lines
/// where they fit, else the split protocol from `split_min` bytes at [`SPLIT_MIN_PES`] members
/// or more, else the pull from `pull_min` bytes at [`PULL_AUTO_PES`] members, else direct
/// stores.
fn decide(asked: FamilyProtocol, fit: CallFit, t: Thresholds) -> FamilyProtocol {
    use FamilyProtocol::*;
    match asked {
        Auto if fit.lines => LowLatency,
        Auto if fit.split && fit.n >= SPLIT_MIN_PES && fit.bytes >= t.split_min => Split,
        Auto if fit.pull && fit.n == PULL_AUTO_PES && fit.bytes >= t.pull_min => Pull,
        LowLatency if fit.lines => LowLatency,
        Split if fit.split => Split,
        Pull if fit.pull => Pull,
        Auto | LowLatency | Split | Pull | Hierarchical => Direct,
        Direct | Put => asked,
    }
}

/// [`FamilyWorkspace::settings`]: the lines' limit and the split threshold where the collective
/// has them, and whether [`crate::proto::workspace::NO_DIRECT_ENV`] turns direct stores off.
fn describe_settings(
    protocols: Protocols,
    ll_max: usize,
    ll_env: &str,
    t: Thresholds,
    puts_only: bool,
) -> String {
    use crate::core::env_value::size_label;
    let mut auto = Vec::new();
    if protocols.lines && ll_max > 0 {
        auto.push(format!("low-latency lines up to {}", size_label(ll_max)));
    }
    if protocols.split && t.split_min < usize::MAX {
        auto.push(format!(
            "split from {} at {SPLIT_MIN_PES} or more PEs",
            size_label(t.split_min)
        ));
    }
    if protocols.pull && t.pull_min < usize::MAX && !puts_only {
        auto.push(format!(
            "pull from {} at {PULL_AUTO_PES} PEs",
            size_label(t.pull_min)
        ));
    }
    let mut s = if auto.is_empty() {
        "auto takes the handshake".to_string()
    } else {
        format!("auto takes {}, else the handshake", auto.join(", "))
    };
    if protocols.lines && ll_max == 0 {
        s += &format!(" (low-latency lines off: {ll_env})");
    }
    if puts_only {
        s += &format!(
            "; NVSHMEM puts only ({})",
            crate::proto::workspace::NO_DIRECT_ENV
        );
    }
    s
}

/// The shared part of a family collective: see the module documentation.
pub struct FamilyWorkspace<'nv> {
    /// First field: its Drop waits for queued kernels before the buffers below are freed.
    ws: Workspace<'nv>,
    /// Counters [phase][parity][rank][block], only ever growing.
    flags: SymmetricBuffer<'nv, u64>,
    /// Receive slots [parity][rank] of `slot_bytes` (reductions), or the exchange region.
    scratch: Option<SymmetricBuffer<'nv, u8>>,
    /// 0 unless the scratch is receive slots.
    slot_bytes: usize,
    /// The low-latency protocol's line slots [parity][source rank] of `ll_slot_bytes`, where
    /// it is on ([`FAMILY_LL_MAX_ENV`]) and the collective moves data without slots.
    ll: Option<SymmetricBuffer<'nv, u8>>,
    ll_slot_bytes: usize,
    /// Largest rank block the line slots take, or for the exchange the largest pair (0: off).
    ll_max: usize,
    /// The protocols the collective's kernel has besides the handshake.
    protocols: Protocols,
    /// The smallest buffers `Auto` splits ([`FAMILY_SPLIT_MIN_ENV`]) and pulls
    /// ([`FAMILY_PULL_MIN_ENV`]).
    thresholds: Thresholds,
    /// The split protocol's round ([`FAMILY_SPLIT_ROUND_ENV`]; 0 where it has none).
    split_round: usize,
    protocol: FamilyProtocol,
    /// What the last call took: `Direct`, `Put`, `LowLatency`, `Split` or `Pull` (`Auto`
    /// before any call).
    last: FamilyProtocol,
    /// The exchange's: how the last call's pairs went.
    last_pairs: ExchangePairs,
    /// This workspace's key in the tuned tables (`tuning::collective_key`).
    tuning_key: String,
    /// What the workspace was made with, for the node-aware steps' workspaces.
    scratch_kind: Scratch,
    /// The smallest rank block `Auto` takes the node-aware steps for ([`FAMILY_HIER_MIN_ENV`];
    /// `usize::MAX` where the collective has none).
    hier_min: usize,
    /// The node-aware steps' workspaces and scratch, made by the first call that takes them.
    nodes: Option<Box<NodeSteps<'nv, FamilyWorkspace<'nv>>>>,
}

impl<'nv> FamilyWorkspace<'nv> {
    /// The workspace over `team` (None on PEs in no team of the split), with `scratch`, and
    /// for the `protocols` the collective's kernel has: the low-latency protocol's line slots
    /// where it is on ([`FAMILY_LL_MAX_ENV`]; for the exchange region
    /// [`lines::EXCHANGE_LL_MAX_ENV`]), the split protocol's threshold
    /// ([`FAMILY_SPLIT_MIN_ENV`]). Collective over the world.
    pub fn new(
        nv: &'nv Nvshmem,
        team: Option<&Team<'_>>,
        text: &'static CollectiveText,
        scratch: Scratch,
        protocols: Protocols,
    ) -> Result<FamilyWorkspace<'nv>> {
        let lines = protocols.lines;
        let scratch_kind = scratch;
        let world = nv.n_pes() as usize;
        let ws = Workspace::new(nv, team, text, STATE_WORDS)?;
        let phases = sys::NVSHMEMRS_FAMILY_PHASES as usize;
        let flags = nv.alloc_zeroed::<u64>(phases * 2 * world * FAMILY_BLOCKS)?;
        let exchange = scratch == Scratch::Exchange;
        let (scratch, slot_bytes) = match scratch {
            Scratch::Exchange => {
                let words = world * sys::NVSHMEMRS_EXCHANGE_WORDS_PER_PE as usize;
                // Zeroed: the counters and per-pair sequences start at 0 on every PE.
                (Some(nv.alloc_zeroed::<u8>(words * 8)?), 0)
            }
            Scratch::Slots(bytes) => {
                let (slot, total) =
                    slot_region(bytes.max(4096), world).ok_or_else(|| Error::SizeOverflow {
                        what: text.call,
                        detail: format!("2 x {world} PEs x {bytes}"),
                    })?;
                // Zeroed: peers fill the slots (see SymmetricBuffer::allocate).
                (Some(nv.alloc_zeroed::<u8>(total)?), slot)
            }
            Scratch::None => (None, 0),
        };
        // Lines carry 8 payload bytes in 16: a block of ll_max takes 2 x ll_max per slot, an
        // exchange pair a header and line padding more.
        let ll_max = match lines && ws.n_pes() as u32 <= sys::NVSHMEMRS_FAMILY_LL_MAX_PES {
            false => 0,
            true if exchange => lines::ll_max_from_env()?,
            true => ll_max_from_env()?,
        };
        let (ll, ll_slot_bytes) = if ll_max > 0 {
            let slot = match exchange {
                true => lines::line_slot_bytes(ll_max),
                false => ll_max.checked_mul(2),
            };
            let region = slot.and_then(|b| slot_region(b, world));
            let (slot, total) = region.ok_or_else(|| Error::SizeOverflow {
                what: text.call,
                detail: format!("2 x {world} PEs x 2 x {ll_max} bytes of lines"),
            })?;
            // Zeroed: a line's flag is never 0, and readers zero each line they read.
            (Some(nv.alloc_zeroed::<u8>(total)?), slot)
        } else {
            (None, 0)
        };
        let (split_min, split_round) = if protocols.split {
            (split_min_from_env()?, split_round_from_env()?)
        } else {
            (usize::MAX, 0)
        };
        let pull_min = match protocols.pull {
            true => pull_min_from_env()?,
            false => usize::MAX,
        };
        let hier_min = match protocols.nodes {
            true => hier_min_from_env()?,
            false => usize::MAX,
        };
        log::debug!(
            "{} workspace over {} PE(s): slots of {slot_bytes} bytes, low-latency lines up to \
             {ll_max} bytes, split from {split_min} bytes in rounds of {split_round}, pull \
             from {pull_min} bytes, all mapped: {}",
            text.call,
            ws.n_pes(),
            ws.all_mapped()
        );
        let tuning_key = crate::core::tuning::collective_key(text.call, ws.n_pes(), nv.n_pes());
        ws.ready()?;
        Ok(FamilyWorkspace {
            ws,
            flags,
            scratch,
            slot_bytes,
            ll,
            ll_slot_bytes,
            ll_max,
            protocols,
            thresholds: Thresholds {
                split_min,
                pull_min,
            },
            split_round,
            protocol: FamilyProtocol::Auto,
            last: FamilyProtocol::Auto,
            last_pairs: ExchangePairs::default(),
            tuning_key,
            scratch_kind,
            hier_min,
            nodes: None,
        })
    }

    /// The embedded workspace (members, state, status, timeout).
    pub fn ws(&self) -> &Workspace<'nv> {
        &self.ws
    }

    /// The embedded workspace, mutably (timeouts, call numbering).
    pub fn ws_mut(&mut self) -> &mut Workspace<'nv> {
        &mut self.ws
    }

    /// The first failure this workspace's kernels recorded (its node-aware steps' included),
    /// without synchronising.
    pub fn check(&self) -> Result<()> {
        self.ws.check()?;
        match &self.nodes {
            Some(n) => n.node.check().and_then(|()| n.rail.check()),
            None => Ok(()),
        }
    }

    /// Synchronises `stream` (bounded: every wait has a deadline), then [`Self::check`].
    pub fn sync(&self, stream: &CudaStream) -> Result<()> {
        self.ws.sync(stream)?;
        self.check()
    }

    /// The first failure recorded, in detail (the node-aware steps' after this workspace's).
    pub fn failure(&self) -> Option<crate::core::status::WaitFailure> {
        self.ws.failure().or_else(|| {
            let n = self.nodes.as_ref()?;
            n.node.failure().or_else(|| n.rail.failure())
        })
    }

    /// Sets the timeout of this workspace's kernels and of its node-aware steps'.
    pub fn set_timeout(&mut self, timeout: std::time::Duration) {
        self.ws.set_timeout(timeout);
        if let Some(n) = &mut self.nodes {
            n.node.set_timeout(timeout);
            n.rail.set_timeout(timeout);
        }
    }

    /// The nodes the node-aware steps follow ([`FamilyProtocol::Hierarchical`]): on a
    /// workspace over the world of a collective that has them, where the world spans more than
    /// one node in blocks (pretend nodes included); else None.
    pub fn node_layout(&self) -> Option<NodeLayout> {
        let nv = self.ws.runtime();
        let world = self.protocols.nodes && self.ws.n_pes() == nv.n_pes();
        nv.node_layout()
            .filter(|l| world && l.nodes() >= 2 && nv.team_rail().is_some())
    }

    /// The nodes a call of `bytes` per rank block in `elem_bytes`-byte elements follows where
    /// it takes the node-aware steps, else None: the workspace has a [`Self::node_layout`], and
    /// the call asks for them (set, or under `Auto` the tuned table) or, under `Auto` with no
    /// tuned choice, is of [`FAMILY_HIER_MIN_ENV`] bytes or more. Every member decides alike.
    pub(crate) fn nodes_for(&self, bytes: usize, elem_bytes: usize) -> Option<NodeLayout> {
        let layout = self.node_layout()?;
        match self.asked(bytes, elem_bytes) {
            FamilyProtocol::Hierarchical => Some(layout),
            FamilyProtocol::Auto => (bytes >= self.hier_min).then_some(layout),
            _ => None,
        }
    }

    /// Enqueues `call` (its buffers the whole call's) as the node-aware steps of `plan`, each
    /// the collective's kernel `entry` on the workspace over this PE's node or rail, which the
    /// first such call makes (collective over the world, as every call of a world workspace
    /// is), with the scratch the plan needs. `meta(root)`: checked mode's meta word of a step
    /// whose root is `root`. `what` names a launch that failed.
    pub(crate) fn call_nodes(
        &mut self,
        what: &'static str,
        plan: &NodePlan,
        call: &FamilyCall,
        meta: impl Fn(i32) -> u64,
        stream: &CudaStream,
        entry: impl Fn(sys::nvshmemrs_family_args, i32, i32, sys::cudaStream_t) -> i32,
    ) -> Result<()> {
        self.ws.begin_call()?;
        let nv = self.ws.runtime();
        let name = self.ws.call_name();
        let made = match self.nodes.take() {
            Some(steps) => steps,
            None => Box::new(self.node_workspaces(stream)?),
        };
        let steps = self.nodes.insert(made);
        let scratch_bytes =
            plan.scratch
                .checked_mul(call.elem_bytes)
                .ok_or_else(|| Error::SizeOverflow {
                    what: name,
                    detail: format!("{} x {} bytes of scratch", plan.scratch, call.elem_bytes),
                })?;
        steps.reserve(nv, name, scratch_bytes, stream)?;
        let bases = [call.input.cast_mut(), call.output, steps.scratch_ptr()];
        for s in &plan.steps {
            let step = FamilyCall {
                code: call.code,
                meta: meta(s.root),
                input: node_steps::address(bases, s.input, call.elem_bytes),
                output: node_steps::address(bases, s.output, call.elem_bytes),
                count: s.count,
                stride: s.stride,
                elem_bytes: call.elem_bytes,
                root: s.root,
            };
            steps.on(s.team).call(what, &step, stream, &entry)?;
        }
        self.last = FamilyProtocol::Hierarchical;
        Ok(())
    }

    /// The node-aware steps' workspaces: this collective's over this PE's node and over its
    /// rail, without node-aware steps of their own, with this workspace's timeout. Collective
    /// over the world; not during graph capture.
    fn node_workspaces(&self, stream: &CudaStream) -> Result<NodeSteps<'nv, FamilyWorkspace<'nv>>> {
        let name = self.ws.call_name();
        let nv = self.ws.runtime();
        let (Some(_), Some(rail)) = (self.node_layout(), nv.team_rail()) else {
            return Err(Error::CollectiveShape {
                what: name,
                detail: "the hierarchical steps need a workspace over the world where it spans \
                         nodes"
                    .to_string(),
            });
        };
        if crate::core::stream::is_capturing(stream) {
            return Err(Error::CollectiveShape {
                what: name,
                detail: "the hierarchical steps make their workspaces at the first call that \
                         takes them; make one before capturing the graph"
                    .to_string(),
            });
        }
        let protocols = Protocols {
            nodes: false,
            ..self.protocols
        };
        let make = |team: &Team<'_>| -> Result<FamilyWorkspace<'nv>> {
            let text = self.ws.text();
            let mut w = FamilyWorkspace::new(nv, Some(team), text, self.scratch_kind, protocols)?;
            w.set_timeout(self.ws.timeout());
            Ok(w)
        };
        let node = make(&nv.team_node())?;
        Ok(NodeSteps::new(node, make(&rail)?))
    }

    /// How calls move data to mapped peers from now on.
    pub fn set_protocol(&mut self, protocol: FamilyProtocol) {
        self.protocol = protocol;
    }

    /// The protocol set by [`FamilyWorkspace::set_protocol`] (`Auto` by default).
    pub fn protocol(&self) -> FamilyProtocol {
        self.protocol
    }

    /// The protocol the last call took (`Auto` before the first).
    pub fn last_protocol(&self) -> FamilyProtocol {
        self.last
    }

    /// How the last exchange call's pairs went (all zero before the first, and for the other
    /// collectives).
    pub fn last_pairs(&self) -> ExchangePairs {
        self.last_pairs
    }

    /// The largest block (the family) or pair (the exchange) in bytes that calls may move as
    /// low-latency lines on this workspace: 0 where it has none (the collective has no lines,
    /// its environment variable is 0, or not every member is mapped for direct stores).
    pub fn lines_max(&self) -> usize {
        match self.ll.is_some() && self.ws.mapped() {
            true => self.ll_max,
            false => 0,
        }
    }

    /// The exchange: readies the workspace for a call under the set protocol (NVSHMEM puts
    /// for `Put`, else direct stores where mapped) and says whether the call may take lines
    /// (`Auto` or `LowLatency`, the workspace has line slots, every member mapped), and
    /// within what limits. Not from the tuned table: its sizes are per call, and each pair's
    /// two ends must decide alike from what both know (the pair's sizes).
    pub(crate) fn exchange_lines(&mut self) -> Option<LineLimits> {
        let protocol = self.protocol;
        self.ws.set_direct(protocol != FamilyProtocol::Put);
        let allowed = matches!(protocol, FamilyProtocol::Auto | FamilyProtocol::LowLatency);
        (allowed && self.ll.is_some() && self.ws.all_mapped()).then_some(LineLimits {
            max_bytes: self.ll_max,
            slot_bytes: self.ll_slot_bytes,
        })
    }

    /// The exchange: records how a call's pairs went, and as `last_protocol` `LowLatency`
    /// where every pair took lines (and there was one), else `Direct` or `Put`.
    pub(crate) fn record_exchange(&mut self, pairs: ExchangePairs) {
        self.last_pairs = pairs;
        self.last = if pairs.lines > 0 && pairs.mailbox == 0 {
            FamilyProtocol::LowLatency
        } else if self.ws.no_direct() {
            FamilyProtocol::Put
        } else {
            FamilyProtocol::Direct
        };
    }

    /// Device address of the line region, or null.
    pub(crate) fn ll_ptr(&self) -> *mut i8 {
        self.ll
            .as_ref()
            .map_or(std::ptr::null_mut(), |l| l.as_device_ptr().cast())
    }

    /// Bytes of one line slot (0 without lines).
    pub(crate) fn ll_slot_bytes(&self) -> usize {
        self.ll_slot_bytes
    }

    /// What `Auto` chooses from without a tuned table, in words (benchmark reports).
    pub fn settings(&self) -> String {
        let s = describe_settings(
            self.protocols,
            self.ll_max,
            self.ll_env(),
            self.thresholds,
            self.ws.env_no_direct(),
        );
        match self.node_layout() {
            Some(l) => format!(
                "{s}; hierarchical over {} nodes of {} {}",
                l.nodes(),
                l.size(),
                match self.hier_min {
                    usize::MAX => format!("when asked ({FAMILY_HIER_MIN_ENV} unset)"),
                    m => format!("from {}", crate::core::env_value::size_label(m)),
                }
            ),
            None => s,
        }
    }

    /// The variable that bounds this workspace's lines: the exchange region's own
    /// ([`lines::EXCHANGE_LL_MAX_ENV`]), else the family's.
    fn ll_env(&self) -> &'static str {
        match self.scratch.is_some() && self.slot_bytes == 0 {
            true => lines::EXCHANGE_LL_MAX_ENV,
            false => FAMILY_LL_MAX_ENV,
        }
    }

    /// The protocol asked for a call of `bytes` in `elem_bytes`-byte elements: the set one,
    /// or under `Auto` the tuned table's choice, if any (else `Auto`).
    fn asked(&self, bytes: usize, elem_bytes: usize) -> FamilyProtocol {
        match self.protocol {
            FamilyProtocol::Auto => self
                .ws
                .runtime()
                .tuned(&self.tuning_key, bytes, elem_bytes, |c| {
                    c.and_then(|name| FamilyProtocol::parse(name).ok())
                })
                .unwrap_or(FamilyProtocol::Auto),
            p => p,
        }
    }

    /// Whether `call` fits the low-latency lines: the workspace has line slots (the collective
    /// has the protocol and it is on), the block fits, every member is mapped (after
    /// `set_direct`), and the buffers and blocks are 8-byte aligned (the lines move 8 bytes).
    fn fits_lines(&self, call: &FamilyCall) -> bool {
        let bytes = call.count * call.elem_bytes;
        self.ll.is_some()
            && bytes <= self.ll_max
            && bytes.div_ceil(8) * 16 <= self.ll_slot_bytes
            && self.ws.all_mapped()
            && (call.input as usize | call.output as usize) % 8 == 0
            && (call.stride * call.elem_bytes) % 8 == 0
    }

    /// Device address of the scratch (slots or exchange region), or null.
    pub(crate) fn scratch_ptr(&self) -> *mut i8 {
        self.scratch
            .as_ref()
            .map_or(std::ptr::null_mut(), |s| s.as_device_ptr().cast())
    }

    /// Device address of the counters.
    pub(crate) fn flags_ptr(&self) -> *mut u64 {
        self.flags.as_device_ptr()
    }

    /// Bytes of one receive slot (0 without slots).
    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    /// The concrete protocols this collective's kernel runs as themselves on this workspace
    /// ([`FamilyProtocol::offered`]; the pull only where every member is mapped and there
    /// are 2 to 64 of them, since elsewhere it falls back to direct stores; the node-aware
    /// steps only where the workspace has a [`Self::node_layout`]).
    pub fn offered(&self) -> Vec<FamilyProtocol> {
        let pulls = self.pulls();
        let nodes = self.node_layout().is_some();
        FamilyProtocol::offered(self.protocols)
            .into_iter()
            .filter(|&p| p != FamilyProtocol::Pull || pulls)
            .filter(|&p| p != FamilyProtocol::Hierarchical || nodes)
            .collect()
    }

    /// Whether calls may take the pull protocol: the collective has it, the team 2 to 64
    /// members, every one mapped with direct stores left on by
    /// [`crate::proto::workspace::NO_DIRECT_ENV`].
    fn pulls(&self) -> bool {
        self.protocols.pull
            && (2..=sys::NVSHMEMRS_FAMILY_LL_MAX_PES as i32).contains(&self.ws.n_pes())
            && self.ws.mapped()
    }

    /// Elements of `elem` bytes one launch through the slots carries: a slot's worth, rounded
    /// down to 16 bytes so that segments stay vector-aligned.
    fn segment_elems(&self, elem: usize) -> usize {
        let per16 = (16 / elem).max(1);
        (self.slot_bytes / elem / per16 * per16).max(1)
    }

    /// Enqueues `call`: numbers it (refusing a PE outside the team or a broken workspace),
    /// exchanges checked mode's header, then launches `entry` (a family entry point, in
    /// device/coll/<name>.cu) once, or with receive slots once per slot's worth of each rank
    /// block (a segment), each launch's pointers moved on to its segment. `what` names a
    /// launch that failed.
    pub fn call(
        &mut self,
        what: &'static str,
        call: &FamilyCall,
        stream: &CudaStream,
        entry: impl Fn(sys::nvshmemrs_family_args, i32, i32, sys::cudaStream_t) -> i32,
    ) -> Result<()> {
        let rank = self.ws.begin_call()?;
        let bytes = call.count * call.elem_bytes;
        let asked = self.asked(bytes, call.elem_bytes);
        self.ws.set_direct(asked != FamilyProtocol::Put);
        let n = self.ws.n_pes();
        let fit = CallFit {
            lines: self.fits_lines(call),
            split: self.protocols.split && n >= 2,
            // all_mapped after set_direct: false where this call's stores are off.
            pull: self.pulls() && self.ws.all_mapped(),
            n,
            bytes,
        };
        let protocol = decide(asked, fit, self.thresholds);
        self.last = protocol;
        let header = self.args(rank, call, 0, call.count, protocol);
        let meta = match protocol {
            FamilyProtocol::LowLatency => META_LL,
            FamilyProtocol::Split => META_SPLIT,
            FamilyProtocol::Pull => META_PULL,
            _ => 0,
        };
        self.ws.exchange_header(
            header.hdr,
            call.meta | meta,
            sys::NVSHMEMRS_WAIT_OP_COLLECTIVE,
            call.code as i32,
            stream,
        )?;
        let segment = match protocol {
            _ if self.slot_bytes == 0 => call.count,
            FamilyProtocol::LowLatency | FamilyProtocol::Pull => call.count,
            // A slot holds one of the n - 1 parts.
            FamilyProtocol::Split => self
                .segment_elems(call.elem_bytes)
                .saturating_mul(self.ws.n_pes() as usize - 1),
            _ => self.segment_elems(call.elem_bytes),
        };
        let ll = protocol == FamilyProtocol::LowLatency;
        self.ws.runtime().bind()?;
        let mut start = 0;
        while start < call.count {
            let len = segment.min(call.count - start);
            let args = self.args(rank, call, start, len, protocol);
            let bytes = len * call.elem_bytes;
            let (blocks, threads) = if ll {
                lines_grid(bytes)
            } else {
                handshake_grid(bytes)
            };
            cuda_check(entry(args, blocks, threads, raw_stream(stream)), what)?;
            start += len;
        }
        Ok(())
    }

    /// The kernel arguments of one launch of `call` as low-latency lines, whole.
    pub(crate) fn lines_args(&self, rank: i32, call: &FamilyCall) -> sys::nvshmemrs_family_args {
        self.args(rank, call, 0, call.count, FamilyProtocol::LowLatency)
    }

    /// The kernel arguments of one launch of `call` under the handshake, whole (no slots).
    pub(crate) fn blocks_args(&self, rank: i32, call: &FamilyCall) -> sys::nvshmemrs_family_args {
        self.args(rank, call, 0, call.count, FamilyProtocol::Direct)
    }

    /// The kernel arguments of the launch for elements `start .. start + len` of each rank
    /// block of `call` under `protocol` (as [`decide`] returns it).
    fn args(
        &self,
        rank: i32,
        call: &FamilyCall,
        start: usize,
        len: usize,
        protocol: FamilyProtocol,
    ) -> sys::nvshmemrs_family_args {
        let offset = start * call.elem_bytes;
        let ll_scratch = self.ll_ptr();
        sys::nvshmemrs_family_args {
            hdr: sys::nvshmemrs_coll_header {
                input: call.input.cast::<u8>().wrapping_add(offset).cast(),
                output: call.output.cast::<u8>().wrapping_add(offset).cast(),
                count: len,
                scratch: self.scratch_ptr(),
                slot_bytes: self.slot_bytes,
                flags: self.flags_ptr(),
                ll_scratch,
                ll_slot_bytes: self.ll_slot_bytes,
                ..self.ws.header(rank)
            },
            stride: call.stride,
            elem_bytes: call.elem_bytes as i32,
            root: call.root,
            protocol: match protocol {
                FamilyProtocol::LowLatency => sys::NVSHMEMRS_FAMILY_LL as i32,
                FamilyProtocol::Split => sys::NVSHMEMRS_FAMILY_SPLIT as i32,
                FamilyProtocol::Pull => sys::NVSHMEMRS_FAMILY_PULL as i32,
                _ => sys::NVSHMEMRS_FAMILY_HANDSHAKE as i32,
            },
            split_round_bytes: self.split_round as u64,
            code: call.code as i32,
        }
    }
}

/// The grid (blocks, threads) of a launch of low-latency lines that moves `bytes` per peer:
/// one 16-byte line per thread per pass, 4 KiB of each block per grid block.
pub(crate) fn lines_grid(bytes: usize) -> (i32, i32) {
    (
        bytes.div_ceil(LL_BLOCK_BYTES).clamp(1, LL_BLOCKS_MAX) as i32,
        LL_THREADS,
    )
}

/// The grid (blocks, threads) of a launch under the handshake that moves `bytes` per peer:
/// one block per 16 KiB, 1 to FAMILY_BLOCKS.
pub(crate) fn handshake_grid(bytes: usize) -> (i32, i32) {
    (
        bytes.div_ceil(BLOCK_BYTES).clamp(1, FAMILY_BLOCKS) as i32,
        THREADS,
    )
}

/// A region of slots [parity][rank] of at least `bytes` each, rounded up to 256: (slot bytes,
/// region bytes), or None where that overflows.
fn slot_region(bytes: usize, world: usize) -> Option<(usize, usize)> {
    let slot = bytes.checked_next_multiple_of(256)?;
    Some((slot, slot.checked_mul(2 * world)?))
}

/// A root that is a rank of a team of `n` members, else [`Error::InvalidRoot`].
pub fn check_root(what: &'static str, root: i32, n: i32) -> Result<()> {
    if (0..n).contains(&root) {
        Ok(())
    } else {
        Err(Error::InvalidRoot {
            what,
            root,
            n_pes: n,
        })
    }
}

/// What every family collective has besides its `run`: constructors over a team or the world
/// (with `slots`: receive slots of a given size) and the methods it forwards to its workspace
/// (timeout, checks, failure). `$text` is its [`CollectiveText`].
macro_rules! family_methods {
    ($ty:ident, $text:expr) => {
        $crate::proto::family::family_methods!(@plain $ty, $text, None, NONE);
    };
    ($ty:ident, $text:expr, lines) => {
        $crate::proto::family::family_methods!(@plain $ty, $text, None, LINES);
    };
    ($ty:ident, $text:expr, lines, split) => {
        $crate::proto::family::family_methods!(@plain $ty, $text, None, LINES_SPLIT);
    };
    ($ty:ident, $text:expr, lines, nodes) => {
        $crate::proto::family::family_methods!(@plain $ty, $text, None, LINES_NODES);
    };
    ($ty:ident, $text:expr, lines, split, nodes) => {
        $crate::proto::family::family_methods!(@plain $ty, $text, None, LINES_SPLIT_NODES);
    };
    ($ty:ident, $text:expr, exchange) => {
        $crate::proto::family::family_methods!(@plain $ty, $text, Exchange, LINES);
        impl<'nv> $ty<'nv> {
            /// How the last call's pairs (a peer other than this PE, a direction) went: as
            /// low-latency lines or through the mailbox.
            pub fn last_pairs(&self) -> $crate::proto::lines::ExchangePairs {
                self.fam.last_pairs()
            }
        }
    };
    (@plain $ty:ident, $text:expr, $scratch:ident, $protocols:ident) => {
        impl<'nv> $ty<'nv> {
            /// Over `team` (None on PEs in no team of the split: they only take part in the
            /// allocation). Collective over the world.
            pub fn new(
                nv: &'nv $crate::Nvshmem,
                team: Option<&$crate::Team<'_>>,
            ) -> $crate::Result<$ty<'nv>> {
                Ok($ty {
                    fam: $crate::proto::FamilyWorkspace::new(
                        nv,
                        team,
                        $text,
                        $crate::proto::family::Scratch::$scratch,
                        $crate::proto::family::Protocols::$protocols,
                    )?,
                })
            }

            /// Over every PE.
            pub fn world(nv: &'nv $crate::Nvshmem) -> $crate::Result<$ty<'nv>> {
                $ty::new(nv, Some(&nv.team_world()))
            }
        }
        $crate::proto::family::family_methods!(@common $ty);
    };
    ($ty:ident, $text:expr, slots) => {
        $crate::proto::family::family_methods!(@slots $ty, $text, NONE);
    };
    ($ty:ident, $text:expr, slots, lines) => {
        $crate::proto::family::family_methods!(@slots $ty, $text, LINES);
    };
    ($ty:ident, $text:expr, slots, lines, pull) => {
        $crate::proto::family::family_methods!(@slots $ty, $text, LINES_PULL);
    };
    ($ty:ident, $text:expr, slots, lines, pull, nodes) => {
        $crate::proto::family::family_methods!(@slots $ty, $text, LINES_PULL_NODES);
    };
    ($ty:ident, $text:expr, slots, lines, split, pull) => {
        $crate::proto::family::family_methods!(@slots $ty, $text, LINES_SPLIT_PULL);
    };
    (@slots $ty:ident, $text:expr, $protocols:ident) => {
        impl<'nv> $ty<'nv> {
            /// Over `team` (None on PEs in no team of the split), with receive slots of
            /// `slot_bytes` each (2 x world of them); larger messages go in segments of that
            /// size. Collective over the world.
            pub fn new(
                nv: &'nv $crate::Nvshmem,
                team: Option<&$crate::Team<'_>>,
                slot_bytes: usize,
            ) -> $crate::Result<$ty<'nv>> {
                Ok($ty {
                    fam: $crate::proto::FamilyWorkspace::new(
                        nv,
                        team,
                        $text,
                        $crate::proto::family::Scratch::Slots(slot_bytes),
                        $crate::proto::family::Protocols::$protocols,
                    )?,
                })
            }

            /// Over every PE.
            pub fn world(nv: &'nv $crate::Nvshmem, slot_bytes: usize) -> $crate::Result<$ty<'nv>> {
                $ty::new(nv, Some(&nv.team_world()), slot_bytes)
            }

            /// Bytes of one receive slot.
            pub fn slot_bytes(&self) -> usize {
                self.fam.slot_bytes()
            }
        }
        $crate::proto::family::family_methods!(@common $ty);
    };
    (@common $ty:ident) => {
        impl<'nv> $ty<'nv> {
            /// PEs taking part (the team size).
            pub fn n_pes(&self) -> i32 {
                self.fam.ws().n_pes()
            }

            /// How long the waits of one kernel may take before it gives up
            /// ([`crate::Error::Timeout`]). Starts as [`crate::Nvshmem::timeout`].
            pub fn set_timeout(&mut self, timeout: std::time::Duration) {
                self.fam.set_timeout(timeout);
            }

            /// The current timeout.
            pub fn timeout(&self) -> std::time::Duration {
                self.fam.ws().timeout()
            }

            /// Whether calls exchange a header to catch PEs that disagree on their arguments
            /// ([`crate::proto::checked::CHECKED_ENV`]).
            pub fn is_checked(&self) -> bool {
                self.fam.ws().is_checked()
            }

            /// The error a kernel of this workspace recorded (a wait past its deadline, or in
            /// checked mode a peer with other arguments), without synchronising. After an error
            /// the workspace is broken: later calls move nothing and return the same error, and
            /// the outputs of the failed call and of calls queued after it are undefined.
            pub fn check(&self) -> crate::Result<()> {
                self.fam.check()
            }

            /// Synchronises `stream` (bounded: every wait has a deadline), then `check`.
            pub fn sync(&self, stream: &cudarc::driver::CudaStream) -> crate::Result<()> {
                self.fam.sync(stream)
            }

            /// The first failure recorded, in detail.
            pub fn failure(&self) -> Option<crate::core::status::WaitFailure> {
                self.fam.failure()
            }

            /// Makes the staging area through which calls move this PE's own
            /// (non-symmetric) device memory hold at least `bytes` (the call's input bytes
            /// rounded up to 256, plus its output bytes), so that such calls up to that size
            /// allocate nothing: needed before graph capture, for workspaces over a team
            /// smaller than the world, for allgatherv and alltoallv (whose sizes differ
            /// between members) and for grouped send/recv (in whose calls only the PEs with
            /// transfers take part; it needs the call's own buffers, each rounded up to 256
            /// bytes). Collective over the world: every PE, members or not, at the same point
            /// with the same `bytes`.
            pub fn reserve_staging(&mut self, bytes: usize) -> $crate::Result<()> {
                self.fam.ws_mut().reserve_staging(bytes)
            }

            /// Bytes of the staging area (0 until a call or `reserve_staging` needs one).
            pub fn staging_bytes(&self) -> usize {
                self.fam.ws().staging_bytes()
            }

            /// How calls move data from now on: direct stores, NVSHMEM puts, low-latency
            /// lines or split parts where the collective and the call allow them (else direct
            /// stores), or (`Auto`, the default) what the tuned table says for the call's size,
            /// else by size ([`crate::proto::family::FamilyProtocol`]). Every member sets the
            /// same.
            pub fn set_protocol(&mut self, protocol: $crate::proto::family::FamilyProtocol) {
                self.fam.set_protocol(protocol);
            }

            /// The protocol set ([`Self::set_protocol`]).
            pub fn protocol(&self) -> $crate::proto::family::FamilyProtocol {
                self.fam.protocol()
            }

            /// The protocol the last call took (`Auto` before the first): `Direct`, `Put`,
            /// `LowLatency` or `Split`.
            pub fn last_protocol(&self) -> $crate::proto::family::FamilyProtocol {
                self.fam.last_protocol()
            }

            /// The largest block (an exchange: pair) in bytes that calls may move as
            /// low-latency lines on this workspace; 0 where it has none.
            pub fn lines_max(&self) -> usize {
                self.fam.lines_max()
            }

            /// What `Auto` chooses from without a tuned table, in words: the low-latency
            /// lines' limit and the split threshold where the collective has them
            /// (benchmark reports).
            pub fn settings(&self) -> String {
                self.fam.settings()
            }
        }
    };
}
pub(crate) use family_methods;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_names_round_trip() {
        for p in FamilyProtocol::ALL
            .into_iter()
            .chain([FamilyProtocol::Auto])
        {
            assert_eq!(FamilyProtocol::parse(p.name()).unwrap(), p);
            assert_eq!(p.name().parse::<FamilyProtocol>().unwrap(), p);
        }
        assert_eq!(FamilyProtocol::parse(" Put ").unwrap(), FamilyProtocol::Put);
        let err = FamilyProtocol::parse("nvlink").unwrap_err();
        assert!(matches!(err, Error::UnknownName { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            "no family protocol named \"nvlink\": expected auto, direct, put, ll, split, pull or \
             hier"
        );
    }

    #[test]
    fn split_and_pull_are_offered_where_the_kernels_have_them() {
        use FamilyProtocol::*;
        assert_eq!(FamilyProtocol::offered(Protocols::NONE), [Direct, Put]);
        assert_eq!(
            FamilyProtocol::offered(Protocols::LINES),
            [Direct, Put, LowLatency]
        );
        assert_eq!(
            FamilyProtocol::offered(Protocols::LINES_SPLIT),
            [Direct, Put, LowLatency, Split]
        );
        assert_eq!(
            FamilyProtocol::offered(Protocols::LINES_SPLIT_PULL),
            [Direct, Put, LowLatency, Split, Pull]
        );
        assert_eq!(
            FamilyProtocol::offered(Protocols::LINES_PULL),
            [Direct, Put, LowLatency, Pull]
        );
        // Node-aware steps only where the collective has them; a call asking for them where
        // the workspace has no nodes takes direct stores.
        assert_eq!(
            FamilyProtocol::offered(Protocols::LINES_SPLIT_NODES),
            [Direct, Put, LowLatency, Split, Hierarchical]
        );
        assert_eq!(
            FamilyProtocol::offered(Protocols::LINES_PULL_NODES),
            [Direct, Put, LowLatency, Pull, Hierarchical]
        );
        assert_eq!(
            FamilyProtocol::offered(Protocols::LINES_NODES),
            [Direct, Put, LowLatency, Hierarchical]
        );
        assert_eq!(
            decide(Hierarchical, rooted(4, 1 << 20), thresholds(None)),
            Direct
        );
        assert_eq!(FamilyProtocol::parse("HIER").unwrap(), Hierarchical);
        assert_eq!(FamilyProtocol::parse("SPLIT").unwrap(), Split);
        assert_eq!(FamilyProtocol::parse("Pull").unwrap(), Pull);
    }

    /// Thresholds at the defaults, or both at `min`.
    fn thresholds(min: Option<usize>) -> Thresholds {
        Thresholds {
            split_min: min.unwrap_or(FAMILY_SPLIT_MIN_DEFAULT),
            pull_min: min.unwrap_or(FAMILY_PULL_MIN_DEFAULT),
        }
    }

    /// A call of reduce (split and pull) on `n` members, all mapped, that the lines do not fit.
    fn rooted(n: i32, bytes: usize) -> CallFit {
        CallFit {
            lines: false,
            split: n >= 2,
            pull: n >= 2,
            n,
            bytes,
        }
    }

    #[test]
    fn auto_splits_large_buffers_from_three_members() {
        use FamilyProtocol::*;
        let min = FAMILY_SPLIT_MIN_DEFAULT;
        let t = thresholds(None);
        // The threshold is inclusive; below it the handshake.
        assert_eq!(decide(Auto, rooted(4, min), t), Split);
        assert_eq!(decide(Auto, rooted(3, 256 << 20), t), Split);
        assert_eq!(decide(Auto, rooted(4, min - 1), t), Direct);
        assert_eq!(decide(Auto, rooted(1, 256 << 20), t), Direct);
        // A collective without the split protocol never takes it.
        let no_split = CallFit {
            split: false,
            ..rooted(4, 1 << 30)
        };
        assert_eq!(decide(Auto, no_split, t), Direct);
        assert_eq!(decide(Split, no_split, t), Direct);
        // Lines that fit come first; a threshold of 0 splits every size.
        let lines = CallFit {
            lines: true,
            ..rooted(4, 4096)
        };
        assert_eq!(decide(Auto, lines, thresholds(Some(0))), LowLatency);
        assert_eq!(decide(Auto, rooted(4, 1), thresholds(Some(0))), Split);
        let never = thresholds(Some(usize::MAX));
        assert_eq!(decide(Auto, rooted(4, 1 << 30), never), Direct);
    }

    #[test]
    fn auto_pulls_from_its_threshold_at_two_members_only() {
        use FamilyProtocol::*;
        let min = FAMILY_PULL_MIN_DEFAULT;
        let t = thresholds(None);
        assert_eq!(decide(Auto, rooted(2, min), t), Pull);
        assert_eq!(decide(Auto, rooted(2, 256 << 20), t), Pull);
        assert_eq!(decide(Auto, rooted(2, min - 1), t), Direct);
        // From 3 members the split takes large sizes and the handshake the rest.
        assert_eq!(decide(Auto, rooted(3, t.split_min - 1), t), Direct);
        assert_eq!(decide(Auto, rooted(3, 1 << 30), t), Split);
        // Not mapped (another node, or direct stores off): the handshake, even when forced.
        let unmapped = CallFit {
            pull: false,
            ..rooted(2, 1 << 30)
        };
        assert_eq!(decide(Auto, unmapped, t), Direct);
        assert_eq!(decide(Pull, unmapped, t), Direct);
        // Lines that fit come first.
        let lines = CallFit {
            lines: true,
            ..rooted(2, 4096)
        };
        assert_eq!(decide(Auto, lines, thresholds(Some(0))), LowLatency);
        assert_eq!(
            decide(Auto, rooted(2, 1 << 30), thresholds(Some(usize::MAX))),
            Direct
        );
    }

    #[test]
    fn a_forced_protocol_is_taken_where_the_call_allows_it() {
        use FamilyProtocol::*;
        let fit = |lines, split, n| CallFit {
            lines,
            split,
            pull: split,
            n,
            bytes: 64,
        };
        let t = thresholds(None);
        // Forced split and pull run at any size from 2 members; forced lines where they fit.
        assert_eq!(decide(Split, fit(false, true, 2), t), Split);
        assert_eq!(decide(Split, fit(true, true, 4), t), Split);
        assert_eq!(decide(Pull, fit(false, true, 2), t), Pull);
        assert_eq!(decide(Pull, fit(true, true, 4), t), Pull);
        assert_eq!(decide(Pull, fit(true, false, 4), t), Direct);
        assert_eq!(decide(LowLatency, fit(true, true, 4), t), LowLatency);
        assert_eq!(decide(LowLatency, fit(false, true, 4), t), Direct);
        // Direct and put are always what they say.
        for f in [fit(true, true, 4), fit(false, false, 1)] {
            assert_eq!(decide(Direct, f, thresholds(Some(0))), Direct);
            assert_eq!(decide(Put, f, thresholds(Some(0))), Put);
        }
    }

    #[test]
    fn settings_say_what_auto_chooses_from() {
        let mb = 1 << 20;
        let t = |split_min, pull_min| Thresholds {
            split_min,
            pull_min,
        };
        assert_eq!(
            describe_settings(
                Protocols::LINES_SPLIT_PULL,
                256 << 10,
                FAMILY_LL_MAX_ENV,
                t(mb, 2 * mb),
                false
            ),
            "auto takes low-latency lines up to 256K, split from 1M at 3 or more PEs, pull \
             from 2M at 2 PEs, else the handshake"
        );
        // Puts only: no pull.
        assert_eq!(
            describe_settings(
                Protocols::LINES_SPLIT_PULL,
                0,
                FAMILY_LL_MAX_ENV,
                t(4 * mb, mb),
                true
            ),
            "auto takes split from 4M at 3 or more PEs, else the handshake (low-latency lines \
             off: NVSH_FAMILY_LL_MAX); NVSHMEM puts only (NVSH_NO_DIRECT)"
        );
        let never = t(usize::MAX, usize::MAX);
        assert_eq!(
            describe_settings(Protocols::NONE, 0, FAMILY_LL_MAX_ENV, never, false),
            "auto takes the handshake"
        );
        // The exchanges name their own bound.
        let env = lines::EXCHANGE_LL_MAX_ENV;
        assert_eq!(
            describe_settings(Protocols::LINES, 0, env, never, false),
            "auto takes the handshake (low-latency lines off: NVSH_EXCHANGE_LL_MAX)"
        );
    }

    #[test]
    fn the_pull_threshold_is_read_from_the_environment() {
        use crate::bootstrap::tests::with_env;
        with_env(&[], || {
            assert_eq!(pull_min_from_env().unwrap(), FAMILY_PULL_MIN_DEFAULT)
        });
        with_env(&[(FAMILY_PULL_MIN_ENV, "64K")], || {
            assert_eq!(pull_min_from_env().unwrap(), 64 << 10)
        });
        with_env(&[(FAMILY_PULL_MIN_ENV, "soon")], || {
            let err = pull_min_from_env().unwrap_err();
            assert!(matches!(err, Error::InvalidEnv { .. }), "{err:?}");
            assert!(err.to_string().contains(FAMILY_PULL_MIN_ENV), "{err}");
        });
    }

    #[test]
    fn the_split_round_is_read_from_the_environment() {
        use crate::bootstrap::tests::with_env;
        with_env(&[], || {
            assert_eq!(split_round_from_env().unwrap(), FAMILY_SPLIT_ROUND_DEFAULT)
        });
        with_env(&[(FAMILY_SPLIT_ROUND_ENV, "16K")], || {
            assert_eq!(split_round_from_env().unwrap(), 16 << 10)
        });
        with_env(&[(FAMILY_SPLIT_ROUND_ENV, "0")], || {
            assert_eq!(split_round_from_env().unwrap(), 0)
        });
        with_env(&[(FAMILY_SPLIT_ROUND_ENV, "often")], || {
            let err = split_round_from_env().unwrap_err();
            assert!(matches!(err, Error::InvalidEnv { .. }), "{err:?}");
            assert!(err.to_string().contains(FAMILY_SPLIT_ROUND_ENV), "{err}");
        });
    }

    #[test]
    fn the_split_threshold_is_read_from_the_environment() {
        use crate::bootstrap::tests::with_env;
        with_env(&[], || {
            assert_eq!(split_min_from_env().unwrap(), FAMILY_SPLIT_MIN_DEFAULT)
        });
        with_env(&[(FAMILY_SPLIT_MIN_ENV, "")], || {
            assert_eq!(split_min_from_env().unwrap(), 4 << 20)
        });
        with_env(&[(FAMILY_SPLIT_MIN_ENV, "64K")], || {
            assert_eq!(split_min_from_env().unwrap(), 64 << 10)
        });
        with_env(&[(FAMILY_SPLIT_MIN_ENV, "0")], || {
            assert_eq!(split_min_from_env().unwrap(), 0)
        });
        with_env(&[(FAMILY_SPLIT_MIN_ENV, "1T")], || {
            assert_eq!(split_min_from_env().unwrap(), 1 << 40)
        });
        with_env(&[(FAMILY_SPLIT_MIN_ENV, "big")], || {
            let err = split_min_from_env().unwrap_err();
            assert!(matches!(err, Error::InvalidEnv { .. }), "{err:?}");
            let text = err.to_string();
            assert!(
                text.contains(FAMILY_SPLIT_MIN_ENV) && text.contains("1M"),
                "{text}"
            );
        });
    }

    #[test]
    fn slot_regions_round_up_and_refuse_overflow() {
        assert_eq!(slot_region(4096, 4), Some((4096, 4096 * 8)));
        assert_eq!(slot_region(1, 2), Some((256, 256 * 4)));
        assert_eq!(slot_region(usize::MAX, 2), None);
        assert_eq!(slot_region(usize::MAX / 4, 4), None);
    }

    #[test]
    fn roots_outside_the_team_are_refused() {
        assert!(check_root("broadcast", 0, 1).is_ok());
        assert!(check_root("broadcast", 3, 4).is_ok());
        for root in [-1, 4, i32::MAX] {
            let err = check_root("broadcast", root, 4).unwrap_err().to_string();
            assert!(err.contains("not a rank") && err.contains("0..4"), "{err}");
        }
    }
}
