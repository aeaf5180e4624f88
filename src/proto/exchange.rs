//! Exchanges (device/coll/exchange.h): transfers whose sizes only their two ends know, the
//! shared layer of alltoallv, allgatherv and grouped send/recv. A receiver tells each sender
//! where its data goes (a mailbox in the sender's exchange region, then an arrive counter);
//! the sender puts the data there and adds its bytes to the receiver's data counter. Sequences
//! are per pair of PEs, so a launch involves only the PEs with transfers in it.
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

/// Which way a transfer goes, seen from this PE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    Send,
    Recv,
}

/// One send or receive between this PE and team rank `peer`: `bytes` at device address `addr`
/// (symmetric for a receive: the sender writes there), of element type `dtype`.
#[derive(Clone, Debug)]
pub struct Transfer {
    pub dir: Direction,
    pub peer: i32,
    pub addr: usize,
    pub bytes: usize,
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
        mode: u32,
        counts: [*const u64; 4],
        elem: (usize, Dtype),
        input: (usize, usize),
        output: (usize, usize),
    },
}

/// One exchange call as a collective describes it.
pub struct ExchangeCall<'t> {
    /// The collective's NVSHMEMRS_COLL_* code (what a failure names).
    pub code: u32,
    /// Checked mode's count and meta word where every member takes part in every call (None:
    /// grouped send/recv, where only the PEs with transfers take part).
    pub checked: Option<(usize, u64)>,
    pub transfers: Transfers<'t>,
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
    let mut seen = std::collections::HashMap::<(Direction, i32), u8>::new();
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
        let k = seen.entry((t.dir, t.peer)).or_insert(0);
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
    let of = |t: &Transfer| seen[&(t.dir, t.peer)];
    Ok(list.iter().zip(nth).map(|(t, k)| (k, of(t))).collect())
}

impl FamilyWorkspace<'_> {
    /// Enqueues exchange `call`: numbers it (refusing a PE outside the team or a broken
    /// workspace), exchanges checked mode's header where it has one, then launches the kernel
    /// once. `what` names a launch that failed. The workspace must have the exchange region.
    pub fn exchange(
        &mut self,
        what: &'static str,
        call: &ExchangeCall<'_>,
        stream: &CudaStream,
    ) -> Result<()> {
        let rank = self.ws_mut().begin_call()?;
        let n = self.ws().n_pes();
        let mut a: Box<sys::nvshmemrs_exchange_args> = Box::default();
        a.hdr = sys::nvshmemrs_coll_header {
            scratch: self.scratch_ptr(),
            flags: self.flags_ptr(),
            ..self.ws().header(rank)
        };
        a.code = call.code as i32;
        let mut largest = 0;
        match &call.transfers {
            Transfers::List(list) => {
                let order = check_list(what, list, n)?;
                a.mode = sys::NVSHMEMRS_EXCHANGE_LIST as i32;
                let mut k = 0;
                for dir in [Direction::Send, Direction::Recv] {
                    for (t, &(nth, of)) in list.iter().zip(&order).filter(|(t, _)| t.dir == dir) {
                        a.ops[k] = sys::nvshmemrs_transfer {
                            addr: t.addr as *mut std::ffi::c_void,
                            bytes: t.bytes as u64,
                            peer: t.peer,
                            dtype: t.dtype as u8,
                            nth,
                            of,
                            pad: 0,
                        };
                        largest = largest.max(t.bytes);
                        k += 1;
                    }
                }
                a.n_send = list.iter().filter(|t| t.dir == Direction::Send).count() as i32;
                a.n_recv = (list.len() - a.n_send as usize) as i32;
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
            }
        }
        if let Some((count, meta)) = call.checked {
            let hdr = sys::nvshmemrs_coll_header { count, ..a.hdr };
            let op = sys::NVSHMEMRS_WAIT_OP_COLLECTIVE;
            self.ws()
                .exchange_header(hdr, meta, op, call.code as i32, stream)?;
        }
        self.ws().runtime().bind()?;
        let blocks = largest
            .div_ceil(BLOCK_BYTES)
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
        cuda_check(code, what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
