//! The state every collective embeds: its members (a PE table over a team), whether every member
//! is mapped for direct loads and stores, device-resident sequence state, the status record its
//! kernels write failures into, the timeout of their waits, and checked mode's header buffers.
//!
//! Allocation is collective over the WORLD (the symmetric heap must stay in step on every PE),
//! so PEs outside the team allocate too; they only refuse to run ([`Error::NotInTeam`]).

use crate::core::buffer::SymmetricBuffer;
use crate::core::deadline::timeout_ns;
use crate::core::element::Element;
use crate::core::error::{Error, Result};
use crate::core::outside::{InBuf, Located, OutBuf};
use crate::core::runtime::Nvshmem;
use crate::core::status::{FailureKind, FailureText, StatusRecord, WaitFailure};
use crate::core::stream::raw_stream;
use crate::proto::checked::checked_from_env;
use crate::proto::peer_table::{peer_table_from_env, PeerTable};
use crate::proto::staging::{Grow, Placed, Room, Span, StageIo, Staged, Staging};
use crate::sys;
use crate::team::Team;
use cudarc::driver::CudaStream;
use std::time::Duration;

/// What a collective built on a [`Workspace`] says about itself in errors.
#[derive(Debug)]
pub struct CollectiveText {
    /// The type users hold, as in "Allreduce::set_timeout".
    pub type_name: &'static str,
    /// The call as messages name it: "allreduce".
    pub call: &'static str,
    /// Name of a device algorithm code (the status record's index on a timeout).
    pub algorithm: fn(u64) -> &'static str,
    /// A checked-mode header's meta word in words ("bf16 max by ring").
    pub meta: fn(u64) -> String,
}

impl CollectiveText {
    /// Words of a checked-mode header as messages say them: field 0 is the count, field 1 the
    /// meta word.
    pub fn header_field(&self, field: u64, value: u64) -> String {
        if field == 0 {
            format!("{value} elements")
        } else {
            (self.meta)(value)
        }
    }
}

impl FailureText for CollectiveText {
    fn error(&self, f: &WaitFailure, me: i32) -> Error {
        let peer = f.peer;
        match f.kind {
            FailureKind::LengthMismatch => Error::TransferMismatch {
                what: self.call,
                pe: me,
                peer,
                call: f.seq + 1,
                detail: crate::proto::mismatch::mismatch_detail(f, me),
            },
            FailureKind::Mismatch => Error::CollectiveMismatch {
                what: self.call,
                pe: me,
                peer,
                call: f.seq,
                mine: self.header_field(f.index, f.want),
                theirs: self.header_field(f.index, f.seen),
            },
            _ => Error::Timeout {
                what: format!(
                    "PE {peer}'s part of {call} call {} on PE {me} ({} protocol): signal word \
                     {:#x} is {}, needs {}. PE {peer} is dead or did not make the same {call} \
                     calls on this workspace in the same order. The workspace is broken now \
                     (later calls move nothing); a longer wait: NVSH_TIMEOUT_MS or \
                     {}::set_timeout",
                    f.seq + 1,
                    (self.algorithm)(f.index),
                    f.signal,
                    f.seen,
                    f.want,
                    self.type_name,
                    call = self.call,
                ),
                waited_ms: f.waited.as_millis(),
            },
        }
    }
}

/// The environment variable that makes collectives move their data with NVSHMEM puts even to
/// peers reachable by direct stores (`1`; default `0`): the path they take across nodes, run on
/// one node, for diagnostics and tests. Algorithms that need every peer mapped (the low-latency
/// one-shot, the direct two-shots) are then not chosen.
pub const NO_DIRECT_ENV: &str = "NVSH_NO_DIRECT";

/// Whether [`NO_DIRECT_ENV`] turns direct stores off.
pub fn no_direct_from_env() -> Result<bool> {
    crate::core::env_value::bool_var(
        NO_DIRECT_ENV,
        false,
        "1 (collectives put through NVSHMEM even to mapped peers) or 0",
    )
}

/// Where each of `pes` maps `buf` in this PE's address space (its own copy for this PE), or
/// None where it is not reachable by direct stores.
fn member_addresses<T: Element>(
    nv: &Nvshmem,
    pes: &[i32],
    buf: &SymmetricBuffer<'_, T>,
) -> Result<Vec<Option<usize>>> {
    pes.iter()
        .map(|&pe| match pe == nv.my_pe() {
            true => Ok(Some(buf.as_device_ptr() as usize)),
            false => Ok(buf.peer_ptr(pe)?.map(|p| p.as_ptr() as usize)),
        })
        .collect()
}

/// Checked mode's symmetric buffers: every member's header (world x HEADER_WORDS words) and
/// the signal each header put raises (world words).
struct Headers<'nv> {
    words: SymmetricBuffer<'nv, u64>,
    flags: SymmetricBuffer<'nv, u64>,
}

/// The shared part of a collective: see the module documentation.
pub struct Workspace<'nv> {
    nv: &'nv Nvshmem,
    text: &'static CollectiveText,
    /// World PE of each team rank (-1 past the team).
    pes: SymmetricBuffer<'nv, i32>,
    n: i32,
    rank: Option<i32>,
    /// Every member is reachable by direct stores (nvshmem_ptr non-null), and direct stores
    /// are not turned off ([`NO_DIRECT_ENV`]).
    all_mapped: bool,
    /// [`NO_DIRECT_ENV`], or [`Workspace::set_direct`] off: NVSHMEM puts even to mapped peers.
    no_direct: bool,
    /// Every member is reachable by direct stores (the probe, whatever no_direct says).
    mapped: bool,
    /// [`NO_DIRECT_ENV`] as read at creation.
    env_no_direct: bool,
    /// The members' heap map each launch's header carries.
    peer_table: PeerTable,
    /// Device-resident sequence state of the collective's kernels (zeroed at creation).
    state: SymmetricBuffer<'nv, u64>,
    headers: Option<Headers<'nv>>,
    /// Calls made so far (checked mode numbers its headers with it).
    calls: u64,
    timeout: Duration,
    /// Where calls stage the caller's own (non-symmetric) memory; empty until one does.
    staging: Staging<'nv>,
    /// Declared last: dropped after the buffers above, whose kernels write it.
    status: StatusRecord,
}

impl<'nv> Workspace<'nv> {
    /// The workspace of a collective over `team` (None on PEs in no team of the split), with
    /// `state_words` words of zeroed device state. Collective over the world, like every
    /// symmetric allocation. The caller allocates its own buffers next, then calls
    /// [`Workspace::ready`] before the first kernel.
    pub fn new(
        nv: &'nv Nvshmem,
        team: Option<&Team<'_>>,
        text: &'static CollectiveText,
        state_words: usize,
    ) -> Result<Workspace<'nv>> {
        let checked = checked_from_env()?;
        let no_direct = no_direct_from_env()?;
        nv.check_peers(text.call)?;
        let world = nv.n_pes() as usize;
        let mut pes = vec![-1i32; world];
        let (n, rank) = match team {
            Some(t) => {
                let world_team = nv.team_world();
                for (r, pe) in pes.iter_mut().enumerate().take(t.n_pes() as usize) {
                    *pe = t.translate_pe(r as i32, &world_team)?.unwrap_or(-1);
                }
                (t.n_pes(), Some(t.my_pe()).filter(|&r| r >= 0))
            }
            None => (0, None),
        };
        let state = nv.alloc_zeroed::<u64>(state_words.max(1))?;
        let header_words = sys::NVSHMEMRS_ALLREDUCE_HEADER_WORDS as usize;
        let headers = if checked {
            Some(Headers {
                words: nv.alloc_zeroed::<u64>(world * header_words)?,
                flags: nv.alloc_zeroed::<u64>(world)?,
            })
        } else {
            None
        };
        let pes_buf = nv.alloc::<i32>(world)?;
        pes_buf.copy_from_host(&pes)?;
        // The mapping probe: nvshmem_ptr answers alike for every address of the heap.
        let local = pes_buf.as_device_ptr() as usize;
        let of_pes = member_addresses(nv, &pes[..n as usize], &pes_buf)?;
        let mapped = of_pes.iter().all(Option::is_some);
        let all_mapped = mapped && !no_direct;
        let mut peer_table = PeerTable::new(peer_table_from_env()?, local, &of_pes);
        // One delta per member must hold for every heap address: checked on another
        // allocation; where it does not, kernels look each member up as before.
        let other = state.as_device_ptr() as usize;
        if !peer_table.maps(other, &member_addresses(nv, &pes[..n as usize], &state)?) {
            log::warn!(
                "{}: a member's heap is not mapped at one offset; kernels look peers up",
                text.call
            );
            peer_table = PeerTable::default();
        }
        Ok(Workspace {
            nv,
            text,
            pes: pes_buf,
            n,
            rank,
            all_mapped,
            no_direct,
            mapped,
            env_no_direct: no_direct,
            peer_table,
            state,
            headers,
            calls: 0,
            timeout: nv.timeout(),
            staging: Staging::default(),
            status: StatusRecord::new(nv.context())?,
        })
    }

    /// Ends creation: every PE's zeroed counters and state are in place before any peer
    /// signals them. Collective.
    pub fn ready(&self) -> Result<()> {
        self.nv.barrier_all()
    }

    /// The runtime.
    pub fn runtime(&self) -> &'nv Nvshmem {
        self.nv
    }

    /// The collective's names and descriptions (what workspaces of its steps are made with).
    pub(crate) fn text(&self) -> &'static CollectiveText {
        self.text
    }

    /// The call as messages name it ("allreduce").
    pub fn call_name(&self) -> &'static str {
        self.text.call
    }

    /// Members (the team size).
    pub fn n_pes(&self) -> i32 {
        self.n
    }

    /// This PE's rank among the members, or [`Error::NotInTeam`].
    pub fn rank(&self) -> Result<i32> {
        self.rank.ok_or(Error::NotInTeam {
            what: self.text.call,
        })
    }

    /// Whether every member is reachable by direct loads and stores (and they are not turned
    /// off by [`NO_DIRECT_ENV`]).
    pub fn all_mapped(&self) -> bool {
        self.all_mapped
    }

    /// Whether [`NO_DIRECT_ENV`] turned direct stores off for every call of this workspace.
    pub fn env_no_direct(&self) -> bool {
        self.env_no_direct
    }

    /// Whether every member is reachable by direct stores and [`NO_DIRECT_ENV`] leaves them on,
    /// whatever [`Workspace::set_direct`] said last.
    pub fn mapped(&self) -> bool {
        self.mapped && !self.env_no_direct
    }

    /// Whether direct stores are off for this workspace's calls ([`NO_DIRECT_ENV`], or
    /// [`Workspace::set_direct`]).
    pub fn no_direct(&self) -> bool {
        self.no_direct
    }

    /// Turns direct stores to mapped peers on or off for the calls from now on (on only where
    /// [`NO_DIRECT_ENV`] allows). For the family's kernels, whose receivers wait on the same
    /// counters either way (a sender stores then signals, or puts with the signal); members
    /// set it alike, as tuning does.
    pub fn set_direct(&mut self, direct: bool) {
        self.no_direct = self.env_no_direct || !direct;
        self.all_mapped = self.mapped && !self.no_direct;
    }

    /// The common argument header (device/abi.h) with what the workspace owns: members, this
    /// PE's `rank`, device state, status record and timeout. The collective fills in its data
    /// (input, output, count, receive slots and counters).
    pub fn header(&self, rank: i32) -> sys::nvshmemrs_coll_header {
        let mut h = sys::nvshmemrs_coll_header {
            state: self.state_ptr().cast(),
            pes: self.pes_ptr(),
            n: self.n,
            rank,
            world: self.nv.n_pes(),
            all_mapped: self.all_mapped as i32,
            no_direct: self.no_direct as i32,
            wait_status: self.status_ptr(),
            timeout_ns: self.timeout_ns(),
            ..Default::default()
        };
        self.peer_table.fill(&mut h);
        h
    }

    /// Device address of the world PE table (team rank -> world PE).
    pub fn pes_ptr(&self) -> *const i32 {
        self.pes.as_device_ptr()
    }

    /// The device-resident sequence state itself (tests move it on; synchronise first).
    pub(crate) fn state_buffer(&self) -> &SymmetricBuffer<'nv, u64> {
        &self.state
    }

    /// Device address of the sequence state.
    pub fn state_ptr(&self) -> *mut u64 {
        self.state.as_device_ptr()
    }

    /// Device address of the status record, as kernels take it.
    pub fn status_ptr(&self) -> *mut std::ffi::c_void {
        self.status.device_ptr() as *mut std::ffi::c_void
    }

    /// The timeout of one wait, as kernels take it.
    pub fn timeout_ns(&self) -> u64 {
        timeout_ns(self.timeout)
    }

    /// How long the waits of one kernel may take before it gives up ([`Error::Timeout`]).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// The current timeout (starts as [`Nvshmem::timeout`]).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Calls made so far on this workspace.
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// Whether calls exchange a header ([`crate::proto::checked::CHECKED_ENV`]).
    pub fn is_checked(&self) -> bool {
        self.headers.is_some()
    }

    /// Bytes of the staging area ([`crate::proto::staging`]).
    pub fn staging_bytes(&self) -> usize {
        self.staging.capacity()
    }

    /// Makes the staging area hold at least `bytes`, so that calls with the caller's own
    /// memory up to that need allocate nothing (graph capture, allgatherv, alltoallv, teams).
    /// Collective over the world: every PE, members or not, at the same point with the same
    /// `bytes`.
    pub fn reserve_staging(&mut self, bytes: usize) -> Result<()> {
        self.staging.reserve(self.nv, bytes)
    }

    /// Locates a call's input and output on this PE (`what` names the call in errors): their
    /// addresses, cudarc's ordering on `stream`, and for the caller's own memory the check that
    /// it is device memory of this PE's GPU.
    pub fn locate<'s, T: Element>(
        &self,
        what: &'static str,
        input: &'s InBuf<'_, T>,
        output: &'s mut OutBuf<'_, T>,
        stream: &'s CudaStream,
    ) -> Result<[Located<'s, T>; 2]> {
        let device = self.nv.device();
        Ok([
            input.locate(what, device, stream)?,
            output.locate(what, device, stream)?,
        ])
    }

    /// Stages a call's located buffers ([`crate::proto::staging`]). `agreed`: every member
    /// stages the same sizes at this call, so the area may grow here (only where the team is
    /// the world: allocation is collective over the world).
    pub(crate) fn stage<'s, T: Element>(
        &mut self,
        what: &'static str,
        located: [Located<'s, T>; 2],
        io: StageIo,
        agreed: bool,
        stream: &CudaStream,
    ) -> Result<Staged<'s, T>>
    where
        'nv: 's,
    {
        let grow = if !agreed {
            Grow::Refuse(
                "the sizes of this call differ between members, so it cannot grow the area",
            )
        } else if self.n != self.nv.n_pes() {
            Grow::Refuse(
                "the team is smaller than the world, and symmetric allocation is collective \
                 over the world",
            )
        } else {
            Grow::Agreed
        };
        self.staging.stage(self.nv, what, located, io, grow, stream)
    }

    /// Places the caller's own `spans` of a call in which only some members take part
    /// (grouped send/recv) in the staging area, enqueuing the copies in on `stream`
    /// ([`Staging::place`]). Such a call cannot grow the area: too small, it refuses with
    /// [`crate::Error::StagingTooSmall`] (`why` says why).
    pub(crate) fn place(
        &mut self,
        what: &'static str,
        spans: &[Span],
        why: &'static str,
        stream: &CudaStream,
    ) -> Result<Placed<'nv>> {
        let grow = Grow::Refuse(why);
        self.staging
            .place(self.nv, what, spans, Room::Own, grow, stream)
    }

    /// Starts the next call: refuses a PE outside the team and a workspace that already
    /// failed, and numbers the call. Returns this PE's rank.
    pub fn begin_call(&mut self) -> Result<i32> {
        let rank = self.rank()?;
        self.check()?;
        self.calls += 1;
        Ok(rank)
    }

    /// Checked mode: enqueues the header exchange of this call before its first kernel (a
    /// no-op when checked mode is off). `hdr` carries the members, count and status record;
    /// `wait_op` and `index` (NVSHMEMRS_WAIT_OP_* and the collective's code) name a timeout.
    pub fn exchange_header(
        &self,
        hdr: sys::nvshmemrs_coll_header,
        meta: u64,
        wait_op: u32,
        index: i32,
        stream: &CudaStream,
    ) -> Result<()> {
        let Some(h) = &self.headers else {
            return Ok(());
        };
        // SAFETY: the workspace's own header buffers and state; every member calls this for
        // every call in checked mode (all PEs read NVSH_CHECKED alike).
        let code = unsafe {
            sys::nvshmemrs_check_header(
                hdr,
                h.words.as_device_ptr(),
                h.flags.as_device_ptr(),
                self.calls,
                meta,
                wait_op as i32,
                index,
                raw_stream(stream),
            )
        };
        crate::core::result::cuda_check(code, "header check launch")
    }

    /// The error a kernel of this workspace recorded (a wait past its deadline: a dead or
    /// out-of-step peer; in checked mode a peer with other arguments), without synchronising.
    /// `Ok` means none so far; work still queued may fail later. After an error the workspace
    /// is broken: later calls move nothing and return the same error.
    pub fn check(&self) -> Result<()> {
        self.nv.noted(self.status.check(self.nv.my_pe(), self.text))
    }

    /// Synchronises `stream` (bounded: every wait has a deadline), then [`Workspace::check`].
    pub fn sync(&self, stream: &CudaStream) -> Result<()> {
        stream.synchronize()?;
        self.check()
    }

    /// The first failure recorded, in detail.
    pub fn failure(&self) -> Option<WaitFailure> {
        self.status.failure()
    }
}

impl Drop for Workspace<'_> {
    /// Kernels of this collective may still be queued on any stream: they finish (their waits
    /// are bounded) before the state, the PE table, the status record or the owner's buffers are
    /// freed. A collective declares its workspace as its first field, so this runs before any of
    /// its own buffers go.
    fn drop(&mut self) {
        let _ = self.nv.context().bind_to_thread();
        let _ = self.nv.context().synchronize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::tests::with_env;

    #[test]
    fn direct_stores_go_off_only_when_asked() {
        with_env(&[], || assert!(!no_direct_from_env().unwrap()));
        with_env(&[(NO_DIRECT_ENV, "")], || {
            assert!(!no_direct_from_env().unwrap())
        });
        with_env(&[(NO_DIRECT_ENV, "1")], || {
            assert!(no_direct_from_env().unwrap())
        });
        with_env(&[(NO_DIRECT_ENV, "off")], || {
            assert!(!no_direct_from_env().unwrap())
        });
        with_env(&[(NO_DIRECT_ENV, "sometimes")], || {
            let err = no_direct_from_env().unwrap_err().to_string();
            assert!(err.contains(NO_DIRECT_ENV), "{err}");
        });
    }

    const TEXT: CollectiveText = CollectiveText {
        type_name: "Gather",
        call: "gather",
        algorithm: |code| if code == 5 { "direct" } else { "unknown" },
        meta: |meta| format!("meta {meta}"),
    };

    #[test]
    fn failures_name_the_peer_the_call_and_the_protocol() {
        let f = WaitFailure {
            kind: FailureKind::Timeout,
            op: crate::core::status::WaitOp::Allreduce,
            peer: 3,
            signal: 0x1000,
            index: 5,
            seq: 41,
            want: 384,
            seen: 320,
            waited: Duration::from_millis(250),
        };
        let text = TEXT.error(&f, 0).to_string();
        assert!(
            text.contains("PE 3's part of gather call 42 on PE 0")
                && text.contains("(direct protocol)")
                && text.contains("Gather::set_timeout"),
            "{text}"
        );
        let mismatch = WaitFailure {
            kind: FailureKind::Mismatch,
            index: 1,
            want: 7,
            seen: 9,
            ..f.clone()
        };
        match TEXT.error(&mismatch, 1) {
            Error::CollectiveMismatch {
                what, mine, theirs, ..
            } => {
                assert_eq!(
                    (what, mine.as_str(), theirs.as_str()),
                    ("gather", "meta 7", "meta 9")
                )
            }
            e => panic!("{e:?}"),
        }
        assert_eq!(TEXT.header_field(0, 1000), "1000 elements");
    }
}
