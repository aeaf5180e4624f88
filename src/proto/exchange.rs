//! Exchanges (device/coll/exchange.h): transfers whose sizes only their two ends know, the
//! shared layer of alltoallv, allgatherv and grouped send/recv. A receiver tells each sender
//! where its data goes (a mailbox in the sender's exchange region: low-latency lines where
//! every member is mapped, else words and then an arrive counter); the sender puts the data
//! there and adds its bytes to the receiver's data counter. Sequences are per pair of PEs, so a
//! launch involves only the PEs with transfers in it.
//!
//! That is a round trip per transfer. Small pairs skip it with low-latency lines (device/abi.h
//! NVSHMEMRS_EXCHANGE_LINES): where every member is mapped, a call with its transfers listed on
//! the host (grouped send/recv, alltoallv and allgatherv with host counts) sends each pair
//! (peer, direction) a header of its sizes through a line slot per ordered pair, and the data
//! too where the pair's transfers together fit [`EXCHANGE_LL_MAX_ENV`]; the receiver copies
//! it out and later credits the sender, who reuses a slot only after that credit (no credits
//! where every call pairs every member with every other both ways, [`ExchangeCall::every_pair`]:
//! alltoallv and allgatherv; each pair's message of the previous call then proves the slot of
//! two calls back was read). Both ends
//! decide from the pair's sizes alone ([`pair_modes`]), so they agree whenever the sizes do;
//! the header catches them when the sizes differ: the receiver fails with a
//! [`crate::Error::TransferMismatch`] in that call, the sender in that call where it went
//! through the mailbox, else at its next call sending to that receiver. Device counts stay on
//! the mailbox: the host does not know their sizes, so it could neither decide nor report.
//!
//! This module turns a list of [`Transfer`]s into the kernel's arguments, checking what the host
//! can (peers, list size, transfers per peer, receive buffers apart from each other and from the
//! sends), launches it on a [`FamilyWorkspace`] with [`Scratch::Exchange`], and words the
//! failures the device records when the two ends of a transfer disagree.
//!
//! [`Scratch::Exchange`]: crate::proto::family::Scratch::Exchange

use crate::core::element::Dtype;
use crate::core::error::{Error, Result};
use crate::core::result::cuda_check;
use crate::core::stream::raw_stream;
use crate::proto::family::META_LL;
pub use crate::proto::lines::{pair_lines, ExchangePairs, LineLimits};
use crate::proto::FamilyWorkspace;
use crate::sys;
use cudarc::driver::CudaStream;
use std::ops::Range;

/// Transfers one launch takes (sends and receives together).
pub const MAX_OPS: usize = sys::NVSHMEMRS_EXCHANGE_MAX_OPS as usize;
/// Transfers between this PE and one peer in one direction, in one launch.
pub const MAX_PER_PEER: usize = sys::NVSHMEMRS_EXCHANGE_MAX_PER_PEER as usize;
/// Bytes of a peer's part each block moves, at least: the grid is the largest transfer over
/// this. Every PE picks its own grid (the counters count bytes, not blocks).
const BLOCK_BYTES: usize = 16 << 10;
const THREADS: i32 = 512;
const DTYPE_SHIFT: u32 = sys::NVSHMEMRS_EXCHANGE_DTYPE_SHIFT;
/// Payload bytes of a pair each block moves as lines (one 16-byte line per thread), and most
/// blocks for lines, as the family's lines.
const LL_BLOCK_BYTES: usize = 4 << 10;
const LL_BLOCKS_MAX: usize = 32;
/// Whether each transfer of `list` goes as lines: those of a pair (direction, peer other than
/// `rank`, this PE's team rank) whose sizes add up to at most `limits.max_bytes` and whose
/// lines ([`pair_lines`]) fit a slot; none without `limits` (the call has no lines). Both ends
/// of a pair compute this from their own list, each seeing the pair's transfers as the other
/// does when their sizes agree, so they agree. Also counts the pairs each way, and returns the
/// largest pair's bytes among those that go as lines (0 if none).
pub fn pair_modes(
    list: &[Transfer],
    rank: i32,
    limits: Option<LineLimits>,
) -> (Vec<bool>, ExchangePairs, usize) {
    // Linear scans over a few pairs: a call's host path is part of its time (no maps, no
    // allocation per pair).
    let of_pair = |key: (Direction, i32)| {
        list.iter()
            .filter(move |t| t.peer != rank && (t.dir, t.peer) == key)
            .map(|t| t.bytes)
    };
    // A pair's bytes where it goes as lines, else None.
    let lines = |key: (Direction, i32)| {
        let l = limits?;
        let total = of_pair(key).try_fold(0usize, |a, b| a.checked_add(b))?;
        (total <= l.max_bytes && pair_lines(of_pair(key)).saturating_mul(16) <= l.slot_bytes)
            .then_some(total)
    };
    // Each pair's mode, decided at its first transfer.
    let mut modes: Vec<((Direction, i32), Option<usize>)> = Vec::new();
    let each = list
        .iter()
        .map(|t| {
            if t.peer == rank {
                return false;
            }
            let key = (t.dir, t.peer);
            match modes.iter().find(|m| m.0 == key) {
                Some(m) => m.1.is_some(),
                None => {
                    let m = lines(key);
                    modes.push((key, m));
                    m.is_some()
                }
            }
        })
        .collect();
    let pairs = ExchangePairs {
        lines: modes.iter().filter(|m| m.1.is_some()).count(),
        mailbox: modes.iter().filter(|m| m.1.is_none()).count(),
    };
    let largest = modes.iter().filter_map(|m| m.1).max().unwrap_or(0);
    (each, pairs, largest)
}

/// Which way a transfer goes, seen from this PE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// From this PE to the peer.
    Send,
    /// From the peer to this PE.
    Recv,
}

/// One send or receive between this PE and team rank `peer`: `bytes` at device address `addr`
/// (symmetric for a receive: the sender writes there), of element type `dtype`.
#[derive(Clone, Debug)]
pub struct Transfer {
    /// Send or receive.
    pub dir: Direction,
    /// The other end's team rank.
    pub peer: i32,
    /// Device address of the data on this PE (symmetric for a receive).
    pub addr: usize,
    /// Size in bytes.
    pub bytes: usize,
    /// Element type; both ends of a transfer must agree on it.
    pub dtype: Dtype,
}

impl Transfer {
    fn range(&self) -> Range<usize> {
        self.addr..self.addr + self.bytes
    }
}

/// How a launch gives its transfers.
pub enum Transfers<'t> {
    /// A list (grouped send/recv, and the host-count forms).
    List(&'t [Transfer]),
    /// Counts in device memory (abi.h NVSHMEMRS_EXCHANGE_ALLGATHERV / _ALLTOALLV): device
    /// addresses of the arrays of n elements each, element size and type, and the input and
    /// output as base addresses with their lengths in elements.
    Device {
        /// NVSHMEMRS_EXCHANGE_ALLGATHERV or NVSHMEMRS_EXCHANGE_ALLTOALLV.
        mode: u32,
        /// Allgatherv: counts and displacements, then two nulls. Alltoallv: send counts, send
        /// displacements, receive counts, receive displacements.
        counts: [*const u64; 4],
        /// Element size in bytes, and element type.
        elem: (usize, Dtype),
        /// The input's device address and length in elements.
        input: (usize, usize),
        /// The output's device address and length in elements.
        output: (usize, usize),
    },
}

/// One exchange call as a collective describes it.
pub struct ExchangeCall<'t> {
    /// The collective's code (its row's in src/coll/table.rs; what a failure names).
    pub code: u32,
    /// Checked mode's count and meta word where every member takes part in every call (None:
    /// grouped send/recv, where only the PEs with transfers take part).
    pub checked: Option<(usize, u64)>,
    /// The sends and receives.
    pub transfers: Transfers<'t>,
    /// Every call on this workspace has a transfer to and from every other member (alltoallv,
    /// allgatherv; not grouped send/recv): the lines then need no credits (device/abi.h
    /// `every_pair`).
    pub every_pair: bool,
    /// A list launch may send pairs as lines. False where the workspace's line slots serve
    /// `FamilyWorkspace::parts` (allgatherv, alltoallv), which keeps no pair state: the two
    /// must not share the slots.
    pub list_lines: bool,
}

/// Allgatherv or alltoallv with counts on the host as one launch without the mailbox or pair
/// state (`FamilyWorkspace::parts`).
pub struct PartsCall<'t> {
    /// The collective's code (its row's in src/coll/table.rs; what a failure names).
    pub code: u32,
    /// Checked mode's meta word.
    pub meta: u64,
    /// The input: device address and bytes.
    pub input: (usize, usize),
    /// The output: device address and length in elements.
    pub output: (usize, usize),
    /// Element size in bytes, and element type.
    pub elem: (usize, Dtype),
    /// What this member receives from each member: (byte offset in the output, bytes). For
    /// allgatherv, each member's part, the same on every member.
    pub parts: &'t [(usize, usize)],
    /// Alltoallv: what this member sends to each member, (byte offset in the input, bytes).
    /// None: its whole input to every member (allgatherv).
    pub sends: Option<&'t [(usize, usize)]>,
}

/// Most members `FamilyWorkspace::parts` takes (the kernel's arguments hold a part
/// each); larger teams take the mailbox.
pub const PARTS_MAX_PES: usize = sys::NVSHMEMRS_PARTS_MAX_PES as usize;

/// The payload bytes of a part's size line. Grids of lines count it: a grid of a line per
/// thread for the data alone took a second pass for the size line in one thread per block.
const SIZE_LINE: usize = 8;

/// The line slot a part of `bytes` takes as lines: its data and one size line.
fn part_line_bytes(bytes: usize) -> usize {
    (bytes.div_ceil(8) + 1).saturating_mul(16)
}

/// Checks a list against what the kernel and the host can promise: peers are team ranks, at
/// most [`MAX_OPS`] transfers and [`MAX_PER_PEER`] per peer and direction, every receive
/// buffer apart from every other buffer of the list (sends may share theirs). Returns each
/// transfer's (nth, of) among those with its peer and direction, in list order.
pub fn check_list(what: &'static str, list: &[Transfer], n: i32) -> Result<Vec<(u8, u8)>> {
    if list.len() > MAX_OPS {
        return Err(Error::CollectiveShape {
            what,
            detail: format!(
                "{} sends and receives in one call; one call takes at most {MAX_OPS}",
                list.len()
            ),
        });
    }
    // Transfers so far per (direction, peer): a linear scan, as in pair_modes.
    let mut seen: Vec<((Direction, i32), u8)> = Vec::new();
    let mut nth = Vec::with_capacity(list.len());
    for t in list {
        if !(0..n).contains(&t.peer) {
            return Err(Error::InvalidPe {
                pe: t.peer,
                n_pes: n,
            });
        }
        if t.bytes >> DTYPE_SHIFT != 0 {
            return Err(Error::SizeOverflow {
                what,
                detail: t.bytes.to_string(),
            });
        }
        let key = (t.dir, t.peer);
        let k = match seen.iter().position(|e| e.0 == key) {
            Some(i) => &mut seen[i].1,
            None => {
                seen.push((key, 0));
                &mut seen.last_mut().expect("just pushed").1
            }
        };
        nth.push(*k);
        *k += 1;
        if *k as usize > MAX_PER_PEER {
            let dir = match t.dir {
                Direction::Send => "sends to",
                Direction::Recv => "receives from",
            };
            return Err(Error::CollectiveShape {
                what,
                detail: format!(
                    "more than {MAX_PER_PEER} {dir} rank {} in one call; pass at most \
                     {MAX_PER_PEER} per peer and direction",
                    t.peer
                ),
            });
        }
    }
    // A receive buffer written while another transfer reads or writes it: refused.
    for (i, a) in list.iter().enumerate() {
        for b in &list[i + 1..] {
            let either_recv = a.dir == Direction::Recv || b.dir == Direction::Recv;
            let (x, y) = (a.range(), b.range());
            if either_recv && x.start < y.end && y.start < x.end {
                return Err(Error::CollectiveShape {
                    what,
                    detail: format!(
                        "a receive buffer overlaps another buffer of the call ({:#x}..{:#x} and \
                         {:#x}..{:#x}); receive into buffers apart from every other",
                        x.start, x.end, y.start, y.end
                    ),
                });
            }
        }
    }
    let of = |t: &Transfer| {
        seen.iter()
            .find(|e| e.0 == (t.dir, t.peer))
            .map_or(0, |e| e.1)
    };
    Ok(list.iter().zip(nth).map(|(t, k)| (k, of(t))).collect())
}

/// The order of `list` in the kernel's arguments (indexes into it): the sends, then the
/// receives; with `lines`, each peer's transfers of a direction together, in list (nth) order,
/// as the kernel reads a pair's lines (device/coll/exchange.cuh).
pub fn launch_order(list: &[Transfer], lines: bool) -> Vec<usize> {
    let mut order = Vec::with_capacity(list.len());
    for dir in [Direction::Send, Direction::Recv] {
        let start = order.len();
        order.extend((0..list.len()).filter(|&i| list[i].dir == dir));
        if lines {
            // Stable: nth order within a peer.
            order[start..].sort_by_key(|&i| list[i].peer);
        }
    }
    order
}

impl FamilyWorkspace<'_> {
    /// Enqueues exchange `call`: numbers it (refusing a PE outside the team or a broken
    /// workspace), decides which pairs go as lines ([`pair_modes`]; a listed call under `Auto`
    /// or `LowLatency` on a workspace with lines), exchanges checked mode's header where it has
    /// one (its meta with [`META_LL`] where the call has lines), then launches the kernel once
    /// and records how the pairs went. `what` names a launch that failed. The workspace must
    /// have the exchange region.
    pub fn exchange(
        &mut self,
        what: &'static str,
        call: &ExchangeCall<'_>,
        stream: &CudaStream,
    ) -> Result<()> {
        let rank = self.ws_mut().begin_call()?;
        let n = self.ws().n_pes();
        // First: it sets whether stores go direct, which the header says. Lines only where
        // the host lists the transfers: both ends then know every size before the launch.
        let allowed = self.exchange_lines();
        let limits = match call.transfers {
            Transfers::List(_) if call.list_lines => allowed,
            _ => None,
        };
        let mut a: Box<sys::nvshmemrs_exchange_args> = Box::default();
        a.hdr = sys::nvshmemrs_coll_header {
            scratch: self.scratch_ptr(),
            flags: self.flags_ptr(),
            ..self.ws().header(rank)
        };
        a.code = call.code as i32;
        a.lines = limits.is_some() as i32;
        a.every_pair = (limits.is_some() && call.every_pair) as i32;
        if limits.is_some() {
            a.hdr.ll_scratch = self.ll_ptr();
            a.hdr.ll_slot_bytes = self.ll_slot_bytes();
        }
        // The largest mailbox transfer and the largest pair as lines (bytes): the grid.
        let (mut largest, mut largest_lines) = (0, 0);
        let pairs = match &call.transfers {
            Transfers::List(list) => {
                let order = check_list(what, list, n)?;
                let (lines, pairs, largest_pair) = pair_modes(list, rank, limits);
                a.mode = sys::NVSHMEMRS_EXCHANGE_LIST as i32;
                for (k, i) in launch_order(list, limits.is_some()).into_iter().enumerate() {
                    let (t, (nth, of)) = (&list[i], order[i]);
                    a.ops[k] = sys::nvshmemrs_transfer {
                        addr: t.addr as *mut std::ffi::c_void,
                        bytes: t.bytes as u64,
                        peer: t.peer,
                        dtype: t.dtype as u8,
                        nth,
                        of,
                        lines: if lines[i] {
                            sys::NVSHMEMRS_EXCHANGE_PAIR_LINES as u8
                        } else {
                            0
                        },
                    };
                    if !lines[i] {
                        largest = largest.max(t.bytes);
                    }
                }
                largest_lines = largest_pair;
                a.n_send = list.iter().filter(|t| t.dir == Direction::Send).count() as i32;
                a.n_recv = (list.len() - a.n_send as usize) as i32;
                pairs
            }
            Transfers::Device {
                mode,
                counts,
                elem,
                input,
                output,
            } => {
                a.mode = *mode as i32;
                a.counts = *counts;
                a.elem_bytes = elem.0 as i32;
                a.dtype = elem.1 as i32;
                a.hdr.input = input.0 as *const std::ffi::c_void;
                a.in_count = input.1 as u64;
                a.hdr.output = output.0 as *mut std::ffi::c_void;
                a.hdr.count = output.1;
                // Counts are on the device: size the grid by the larger buffer.
                largest = input.1.max(output.1) * elem.0 / n as usize;
                // Every member sends to and receives from every other, through the mailbox.
                ExchangePairs {
                    lines: 0,
                    mailbox: 2 * (n as usize).saturating_sub(1),
                }
            }
        };
        // Every pair with another PE as lines: the kernel leaves out the mailbox's steps.
        a.lines_only = (limits.is_some() && pairs.mailbox == 0) as i32;
        if let Some((count, meta)) = call.checked {
            // Members that disagree on lines would wait on different words.
            let meta = meta | if limits.is_some() { META_LL } else { 0 };
            let hdr = sys::nvshmemrs_coll_header { count, ..a.hdr };
            let op = sys::NVSHMEMRS_WAIT_OP_COLLECTIVE;
            self.ws()
                .exchange_header(hdr, meta, op, call.code as i32, stream)?;
        }
        self.ws().runtime().bind()?;
        let blocks = largest
            .div_ceil(BLOCK_BYTES)
            .max(largest_lines.div_ceil(LL_BLOCK_BYTES).min(LL_BLOCKS_MAX))
            .clamp(1, super::family::FAMILY_BLOCKS) as i32;
        let s = raw_stream(stream);
        // SAFETY: the arguments point at this workspace's region, state, status record and PE
        // table, and at buffers the collective checked (list: symmetric receive buffers apart
        // from the others; device counts: the kernel checks them against the lengths given).
        let code = unsafe {
            match &call.transfers {
                Transfers::List(_) => sys::nvshmemrs_exchange_list(&*a, blocks, THREADS, s),
                Transfers::Device { mode, .. } if *mode == sys::NVSHMEMRS_EXCHANGE_ALLGATHERV => {
                    sys::nvshmemrs_allgatherv(&*a, blocks, THREADS, s)
                }
                Transfers::Device { .. } => sys::nvshmemrs_alltoallv(&*a, blocks, THREADS, s),
            }
        };
        cuda_check(code, what)?;
        self.record_exchange(pairs);
        Ok(())
    }
}

impl FamilyWorkspace<'_> {
    /// Whether an allgatherv of parts of these sizes (bytes, one per member) goes as lines
    /// (`FamilyWorkspace::parts`): lines allowed (as for the exchange's), at most
    /// [`PARTS_MAX_PES`] members, every part within the line bound and, with its size line, a
    /// slot. Every member decides from the same parts, so all agree when their parts do.
    /// Readies the workspace (direct stores or puts) as the exchange does.
    fn gather_fits_lines(&mut self, parts: impl Iterator<Item = usize>) -> bool {
        let Some(l) = self.exchange_lines() else {
            return false;
        };
        self.ws().n_pes() as usize <= PARTS_MAX_PES
            && parts
                .into_iter()
                .all(|b| b <= l.max_bytes && part_line_bytes(b) <= l.slot_bytes)
    }

    /// Whether an alltoallv with counts on the host takes [`FamilyWorkspace::parts`]: lines
    /// allowed and at most [`PARTS_MAX_PES`] members, whatever the sizes (each part decides
    /// alone between the lines and the receiver's handshake, so the two ends of a pair agree
    /// when their sizes do). Readies the workspace as the exchange does. Where it answers
    /// false, the exchange takes the call: the line slots then serve neither.
    pub(crate) fn scatter_takes_parts(&mut self) -> bool {
        self.exchange_lines().is_some() && self.ws().n_pes() as usize <= PARTS_MAX_PES
    }

    /// Launches `call` once, without the mailbox's round trip or pair state (device/abi.h
    /// nvshmemrs_parts_args). Allgatherv (`call.sends` None): as lines where every part fits
    /// them (no ARRIVE; a member whose sizes differ fails on the receiver, the sender at its
    /// next call), else as allgather's blocks (ARRIVE, then puts; parts that differ are caught
    /// by checked mode's header only, whose `call.meta` carries a digest of them). Alltoallv
    /// (`call.sends`, where [`FamilyWorkspace::scatter_takes_parts`]): each part as lines up to
    /// the line bound, else its size line and the receiver's handshake. At most
    /// [`PARTS_MAX_PES`] members.
    pub(crate) fn parts(
        &mut self,
        what: &'static str,
        call: &PartsCall<'_>,
        stream: &CudaStream,
    ) -> Result<()> {
        let limits = self.exchange_lines();
        let lines = match call.sends {
            Some(_) => true,
            None => self.gather_fits_lines(call.parts.iter().map(|p| p.1)),
        };
        let rank = self.ws_mut().begin_call()?;
        let n = self.ws().n_pes() as usize;
        let (output, count) = call.output;
        let fam_call = crate::proto::family::FamilyCall {
            code: call.code,
            meta: call.meta,
            input: call.input.0 as *const std::ffi::c_void,
            output: output as *mut std::ffi::c_void,
            count,
            stride: 0,
            elem_bytes: call.elem.0,
            root: 0,
        };
        let fam = match lines {
            true => self.lines_args(rank, &fam_call),
            false => self.blocks_args(rank, &fam_call),
        };
        let mut a = sys::nvshmemrs_parts_args {
            fam,
            dtype: call.elem.1 as i32,
            ..Default::default()
        };
        for (r, &(displ, bytes)) in call.parts.iter().enumerate().take(n) {
            a.displ[r] = displ as u64;
            a.bytes[r] = bytes as u64;
        }
        let op = sys::NVSHMEMRS_WAIT_OP_COLLECTIVE;
        let meta = call.meta | if lines { META_LL } else { 0 };
        // Alltoallv's outputs differ between members by design: the meta word only.
        let hdr = sys::nvshmemrs_coll_header {
            count: if call.sends.is_some() { 0 } else { count },
            ..a.fam.hdr
        };
        self.ws()
            .exchange_header(hdr, meta, op, call.code as i32, stream)?;
        self.ws().runtime().bind()?;
        let largest = call.parts.iter().map(|p| p.1).max().unwrap_or(0);
        let stream = raw_stream(stream);
        let others = n.saturating_sub(1);
        // SAFETY: the header points at this workspace's state, status, PE table, counters and
        // line slots, and at the caller's checked parts, input and output; the launchers check
        // the parts against the buffers' lengths (and, for lines, the slots).
        let (code, pairs) = match call.sends {
            Some(sends) => {
                // The caller asked scatter_takes_parts: lines are allowed.
                let line_max = limits.map_or(0, |l| l.max_bytes);
                let mut args = sys::nvshmemrs_alltoallv_parts_args {
                    recv: a,
                    in_bytes: call.input.1 as u64,
                    line_max: line_max as u64,
                    ..Default::default()
                };
                for (r, &(displ, bytes)) in sends.iter().enumerate().take(n) {
                    args.send_displ[r] = displ as u64;
                    args.send_bytes[r] = bytes as u64;
                }
                // The parts to and from other members (this PE's own is a copy): how many go
                // by the handshake, the largest as lines, the largest this PE stores (its own
                // part included). A member's own grid: nothing is per block across members.
                let me = rank as usize;
                let (mut puts, mut in_lines) = (0, 0);
                let mut by_puts = sends.get(me).map_or(0, |p| p.1);
                for (r, (send, recv)) in sends.iter().zip(call.parts).enumerate() {
                    if r == me {
                        continue;
                    }
                    for (bytes, sent) in [(send.1, true), (recv.1, false)] {
                        if bytes <= line_max {
                            in_lines = in_lines.max(bytes);
                        } else {
                            puts += 1;
                            if sent {
                                by_puts = by_puts.max(bytes);
                            }
                        }
                    }
                }
                let (blocks, threads) = crate::proto::family::lines_grid(in_lines + SIZE_LINE);
                let blocks = blocks.max(crate::proto::family::handshake_grid(by_puts).0);
                let pairs = ExchangePairs {
                    lines: 2 * others - puts,
                    mailbox: puts,
                };
                // SAFETY: as above.
                let code = unsafe { sys::nvshmemrs_alltoallv_parts(args, blocks, threads, stream) };
                (code, pairs)
            }
            None => {
                // The family's grids, from the largest part: the same on every member (block b
                // waits for block b of every sender).
                // SAFETY: as above.
                let code = unsafe {
                    if lines {
                        let lines = largest + SIZE_LINE;
                        let (blocks, threads) = crate::proto::family::lines_grid(lines);
                        sys::nvshmemrs_allgatherv_lines(a, blocks, threads, stream)
                    } else {
                        let (blocks, threads) = crate::proto::family::handshake_grid(largest);
                        sys::nvshmemrs_allgatherv_blocks(a, blocks, threads, stream)
                    }
                };
                let pairs = ExchangePairs {
                    lines: if lines { 2 * others } else { 0 },
                    mailbox: 0,
                };
                (code, pairs)
            }
        };
        cuda_check(code, what)?;
        self.record_exchange(pairs);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// cudaErrorInvalidValue, what the launchers return for arguments they refuse.
    const INVALID_VALUE: i32 = 1;

    /// A list launch between ranks 0 and 1 of 2, never launched: every case below is refused
    /// before the launch, with no GPU needed.
    fn launch_args(
        ops: &[(Direction, u8)],
        lines: bool,
        every_pair: bool,
    ) -> Box<sys::nvshmemrs_exchange_args> {
        let mut a: Box<sys::nvshmemrs_exchange_args> = Box::default();
        a.hdr.n = 2;
        a.hdr.world = 2;
        a.hdr.rank = 0;
        // Never dereferenced: the launcher refuses before it launches.
        a.hdr.scratch = std::ptr::NonNull::<std::ffi::c_char>::dangling().as_ptr();
        if lines {
            a.hdr.ll_scratch = a.hdr.scratch;
            a.hdr.ll_slot_bytes = 4096;
            a.hdr.all_mapped = 1;
        }
        a.lines = lines as i32;
        a.every_pair = every_pair as i32;
        let mut sends = 0;
        for (k, &(dir, l)) in ops.iter().enumerate() {
            a.ops[k] = sys::nvshmemrs_transfer {
                addr: std::ptr::null_mut(),
                bytes: 64,
                peer: 1,
                dtype: 0,
                nth: 0,
                of: 1,
                lines: l,
            };
            sends += (dir == Direction::Send) as i32;
        }
        a.n_send = sends;
        a.n_recv = ops.len() as i32 - sends;
        a
    }

    /// What the list launcher answers for `a`, which every caller below builds to be refused.
    fn list_launch(a: &sys::nvshmemrs_exchange_args) -> i32 {
        // SAFETY: the arguments are refused before anything is read through their pointers.
        unsafe { sys::nvshmemrs_exchange_list(a, 1, THREADS, std::ptr::null_mut()) }
    }

    #[test]
    fn the_launcher_refuses_every_pair_without_lines_or_without_a_pair_each_way() {
        let pl = sys::NVSHMEMRS_EXCHANGE_PAIR_LINES as u8;
        // No credits without lines: every_pair is only for the lines' slots.
        let a = launch_args(&[(Direction::Send, 0), (Direction::Recv, 0)], false, true);
        assert_eq!(list_launch(&a), INVALID_VALUE);
        // A send to member 1 and no receive from it: no message back proves its slot read.
        let a = launch_args(&[(Direction::Send, pl)], true, true);
        assert_eq!(list_launch(&a), INVALID_VALUE);
        let a = launch_args(&[(Direction::Recv, pl)], true, true);
        assert_eq!(list_launch(&a), INVALID_VALUE);
    }

    #[test]
    fn the_launcher_refuses_lines_only_where_a_pair_takes_the_mailbox() {
        let pl = sys::NVSHMEMRS_EXCHANGE_PAIR_LINES as u8;
        // Without lines there is nothing to go as lines only.
        let mut a = launch_args(&[(Direction::Send, 0), (Direction::Recv, 0)], false, false);
        a.lines_only = 1;
        assert_eq!(list_launch(&a), INVALID_VALUE);
        // The receive from member 1 goes through the mailbox: the step would skip its wait.
        let mut a = launch_args(&[(Direction::Send, pl), (Direction::Recv, 0)], true, false);
        a.lines_only = 1;
        assert_eq!(list_launch(&a), INVALID_VALUE);
    }

    #[test]
    fn the_gather_lines_launcher_refuses_what_its_kernel_cannot_do() {
        // Two members, 64 f32 of output: parts of 100 and 156 bytes, slots of 4096.
        let good = || {
            let mut a = sys::nvshmemrs_parts_args::default();
            let h = &mut a.fam.hdr;
            (h.n, h.world, h.rank, h.count, h.all_mapped) = (2, 2, 0, 64, 1);
            // Never dereferenced: the launcher refuses before it launches.
            h.ll_scratch = std::ptr::NonNull::<std::ffi::c_char>::dangling().as_ptr();
            h.ll_slot_bytes = 4096;
            a.fam.elem_bytes = 4;
            (a.bytes[0], a.bytes[1], a.displ[1]) = (100, 156, 100);
            a
        };
        let refused = |a: sys::nvshmemrs_parts_args| {
            // SAFETY: the arguments are refused before anything is read through their pointers.
            let code =
                unsafe { sys::nvshmemrs_allgatherv_lines(a, 1, THREADS, std::ptr::null_mut()) };
            code == INVALID_VALUE
        };
        let with = |f: &dyn Fn(&mut sys::nvshmemrs_parts_args)| {
            let mut a = good();
            f(&mut a);
            a
        };
        // More members than the arguments hold parts for.
        assert!(refused(
            with(&|a| (a.fam.hdr.n, a.fam.hdr.world) = (17, 17))
        ));
        // No line slots, a member not mapped, puts asked for.
        assert!(refused(with(
            &|a| a.fam.hdr.ll_scratch = std::ptr::null_mut()
        )));
        assert!(refused(with(&|a| a.fam.hdr.all_mapped = 0)));
        assert!(refused(with(&|a| a.fam.hdr.no_direct = 1)));
        // A part past the output (257 of 256 bytes), a part and its size line past a slot.
        assert!(refused(with(&|a| a.displ[1] = 101)));
        assert!(refused(with(&|a| a.fam.hdr.ll_slot_bytes = 256)));
        // A grid past the family's.
        let a = good();
        // SAFETY: as above.
        let code = unsafe {
            sys::nvshmemrs_allgatherv_lines(
                a,
                crate::proto::family::FAMILY_BLOCKS as i32 + 1,
                THREADS,
                std::ptr::null_mut(),
            )
        };
        assert_eq!(code, INVALID_VALUE);
        // The blocks' launcher: the same parts and grid checks, and the handshake only (its
        // arguments as lines are refused; it needs no line slots or mapping).
        let blocks_refused = |a: sys::nvshmemrs_parts_args, grid: i32| {
            // SAFETY: as above.
            let code =
                unsafe { sys::nvshmemrs_allgatherv_blocks(a, grid, THREADS, std::ptr::null_mut()) };
            code == INVALID_VALUE
        };
        let handshake = |f: &dyn Fn(&mut sys::nvshmemrs_parts_args)| {
            with(&|a| {
                a.fam.protocol = sys::NVSHMEMRS_FAMILY_HANDSHAKE as i32;
                f(a)
            })
        };
        assert!(blocks_refused(
            with(&|a| a.fam.protocol = sys::NVSHMEMRS_FAMILY_LL as i32),
            1
        ));
        assert!(blocks_refused(
            handshake(&|a| (a.fam.hdr.n, a.fam.hdr.world) = (17, 17)),
            1
        ));
        assert!(blocks_refused(handshake(&|a| a.displ[1] = 101), 1));
        assert!(blocks_refused(handshake(&|a| a.bytes[0] = 257), 1));
        let too_many = crate::proto::family::FAMILY_BLOCKS as i32 + 1;
        assert!(blocks_refused(handshake(&|_| {}), too_many));
    }

    #[test]
    fn the_alltoallv_parts_launcher_refuses_what_its_kernel_cannot_do() {
        // Two members, 64 f32 each way: parts of 100 and 156 bytes, slots of 4096, lines up
        // to 1024 bytes.
        let good = || {
            let mut a = sys::nvshmemrs_alltoallv_parts_args::default();
            let h = &mut a.recv.fam.hdr;
            (h.n, h.world, h.rank, h.count, h.all_mapped) = (2, 2, 0, 64, 1);
            // Never dereferenced: the launcher refuses before it launches.
            h.ll_scratch = std::ptr::NonNull::<std::ffi::c_char>::dangling().as_ptr();
            h.ll_slot_bytes = 4096;
            a.recv.fam.elem_bytes = 4;
            (a.recv.bytes[0], a.recv.bytes[1], a.recv.displ[1]) = (100, 156, 100);
            (a.send_bytes[0], a.send_bytes[1], a.send_displ[1]) = (100, 156, 100);
            (a.in_bytes, a.line_max) = (256, 1024);
            a
        };
        let refused = |a: sys::nvshmemrs_alltoallv_parts_args, grid: i32| {
            // SAFETY: the arguments are refused before anything is read through their pointers.
            let code =
                unsafe { sys::nvshmemrs_alltoallv_parts(a, grid, THREADS, std::ptr::null_mut()) };
            code == INVALID_VALUE
        };
        let with = |f: &dyn Fn(&mut sys::nvshmemrs_alltoallv_parts_args)| {
            let mut a = good();
            f(&mut a);
            a
        };
        // More members than the arguments hold parts for.
        assert!(refused(
            with(&|a| (a.recv.fam.hdr.n, a.recv.fam.hdr.world) = (17, 17)),
            1
        ));
        // No line slots, a member not mapped, puts asked for.
        assert!(refused(
            with(&|a| a.recv.fam.hdr.ll_scratch = std::ptr::null_mut()),
            1
        ));
        assert!(refused(with(&|a| a.recv.fam.hdr.all_mapped = 0), 1));
        assert!(refused(with(&|a| a.recv.fam.hdr.no_direct = 1), 1));
        // A receive part past the output (257 of 256 bytes), a send part past the input.
        assert!(refused(with(&|a| a.recv.displ[1] = 101), 1));
        assert!(refused(with(&|a| a.send_bytes[1] = 157), 1));
        assert!(refused(with(&|a| a.in_bytes = 255), 1));
        // The lines' bound and its size line past a slot, or at the handshake's mark bit.
        assert!(refused(with(&|a| a.line_max = 4096), 1));
        assert!(refused(with(&|a| a.line_max = 1 << 55), 1));
        // A grid past the family's, or none.
        assert!(refused(good(), 0));
        let too_many = crate::proto::family::FAMILY_BLOCKS as i32 + 1;
        assert!(refused(good(), too_many));
    }

    fn t(dir: Direction, peer: i32, addr: usize, bytes: usize) -> Transfer {
        Transfer {
            dir,
            peer,
            addr,
            bytes,
            dtype: Dtype::F32,
        }
    }

    #[test]
    fn lists_are_numbered_per_peer_and_direction() {
        use Direction::*;
        let list = [
            t(Send, 1, 0, 64),
            t(Recv, 1, 1000, 64),
            t(Send, 1, 0, 64),
            t(Send, 0, 0, 8),
            t(Recv, 0, 2000, 8),
        ];
        let order = check_list("group", &list, 2).unwrap();
        assert_eq!(order, vec![(0, 2), (0, 1), (1, 2), (0, 1), (0, 1)]);
    }

    #[test]
    fn bad_lists_are_refused_in_the_users_terms() {
        use Direction::*;
        let err = check_list("group", &[t(Send, 2, 0, 4)], 2).unwrap_err();
        assert!(matches!(err, Error::InvalidPe { pe: 2, n_pes: 2 }), "{err}");
        let many: Vec<_> = (0..9).map(|i| t(Recv, 1, i * 100, 4)).collect();
        let err = check_list("group", &many, 2).unwrap_err().to_string();
        assert!(err.contains("more than 8 receives from rank 1"), "{err}");
        let long: Vec<_> = (0..MAX_OPS + 1).map(|i| t(Send, 0, 0, i)).collect();
        let err = check_list("group", &long, 200).unwrap_err().to_string();
        assert!(err.contains("129 sends and receives"), "{err}");
        // A receive overlapping a send, or another receive: refused; sends may share.
        let err = check_list("group", &[t(Send, 0, 0, 64), t(Recv, 1, 32, 64)], 2)
            .unwrap_err()
            .to_string();
        assert!(err.contains("overlaps"), "{err}");
        assert!(check_list("group", &[t(Recv, 0, 0, 64), t(Recv, 1, 63, 4)], 2).is_err());
        assert!(check_list("group", &[t(Send, 0, 0, 64), t(Send, 1, 0, 64)], 2).is_ok());
        assert!(check_list("group", &[t(Recv, 0, 0, 64), t(Recv, 1, 64, 4)], 2).is_ok());
    }

    const LIMITS: LineLimits = LineLimits {
        max_bytes: 256 << 10,
        slot_bytes: (512 << 10) + 512,
    };

    #[test]
    fn pairs_go_as_lines_up_to_the_bound_on_their_sizes_alone() {
        use Direction::*;
        let max = LIMITS.max_bytes;
        // Rank 0: to 1 at the bound (two transfers), to 2 one byte past it, from 1 nothing
        // (zero bytes), from 2 one byte, itself (never lines).
        let list = [
            t(Send, 1, 0, max - 100),
            t(Send, 2, 0, max + 1),
            t(Recv, 1, 1 << 20, 0),
            t(Send, 1, 0, 100),
            t(Recv, 2, 2 << 20, 1),
            t(Send, 0, 0, 8),
            t(Recv, 0, 3 << 20, 8),
        ];
        let (each, pairs, largest) = pair_modes(&list, 0, Some(LIMITS));
        assert_eq!(each, [true, false, true, true, true, false, false]);
        assert_eq!(
            pairs,
            ExchangePairs {
                lines: 3,
                mailbox: 1
            }
        );
        // The largest pair as lines: the two sends to 1, together at the bound.
        assert_eq!(largest, max);
        // The receiving end of each pair, with the same sizes, decides the same: rank 1 gets
        // the two sends to it (together at the bound), rank 2 the one past it.
        let on_1 = [t(Recv, 0, 0, max - 100), t(Recv, 0, 1 << 20, 100)];
        assert_eq!(pair_modes(&on_1, 1, Some(LIMITS)).0, [true, true]);
        let on_2 = [t(Recv, 0, 0, max + 1)];
        assert_eq!(pair_modes(&on_2, 2, Some(LIMITS)).0, [false]);
        // No lines for the call: every pair through the mailbox.
        let (each, pairs, largest) = pair_modes(&list, 0, None);
        assert_eq!(largest, 0);
        assert!(each.iter().all(|&l| !l));
        assert_eq!(
            pairs,
            ExchangePairs {
                lines: 0,
                mailbox: 4
            }
        );
        // A bound of 0 bytes still takes zero-byte pairs (the header alone).
        let none = LineLimits {
            max_bytes: 0,
            ..LIMITS
        };
        let zero = [t(Send, 1, 0, 0), t(Recv, 1, 0, 1)];
        assert_eq!(pair_modes(&zero, 0, Some(none)).0, [true, false]);
    }

    #[test]
    fn launches_with_lines_keep_each_pairs_transfers_together_in_order() {
        use Direction::*;
        let list = [
            t(Recv, 2, 1000, 1),
            t(Send, 1, 0, 2),
            t(Recv, 1, 2000, 3),
            t(Send, 2, 0, 4),
            t(Send, 1, 0, 5),
            t(Recv, 2, 3000, 6),
        ];
        assert_eq!(launch_order(&list, false), [1, 3, 4, 0, 2, 5]);
        let order = launch_order(&list, true);
        assert_eq!(order, [1, 4, 3, 2, 0, 5]);
        // nth ascending within each pair, as check_list numbers them.
        let nth = check_list("group", &list, 3).unwrap();
        let seq: Vec<_> = order.iter().map(|&i| (list[i].peer, nth[i].0)).collect();
        assert_eq!(seq, [(1, 0), (1, 1), (2, 0), (1, 0), (2, 0), (2, 1)]);
    }
}
