//! Grouped send/recv (as `ncclGroupStart`, `ncclSend`/`ncclRecv`, `ncclGroupEnd`): any sends and
//! receives to and from any peers, itself included, in one launch. An exchange
//! ([`crate::proto::exchange`]; device/coll/group.cu): sends and receives between two PEs are
//! matched in order, call by call (the k-th call in which r receives from s with the k-th in
//! which s sends to r; within a call, in list order), so only the PEs with transfers in a call
//! take part in it, and no pattern in which every send has its receive can deadlock (each
//! receiver announces all its receives before any PE waits). Small pairs go as low-latency
//! lines (`NVSH_EXCHANGE_LL_MAX`): a send then completes without its receive, which takes the
//! lines in a later call; a sender runs at most two calls ahead of a receiver per pair.
//!
//! Each buffer is a symmetric view, moved as it is, or this PE's own device memory, staged
//! through the workspace's symmetric area ([`crate::proto::staging`]); the area is reserved
//! beforehand, since a call in which only some PEs take part cannot allocate collectively.

use crate::coll::dispatch::{each_element, table_collective, Peers};
use crate::coll::family::{describe_family_meta, family_code_name};
use crate::coll::table::Collective;
use crate::core::element::{Dtype, Element};
use crate::core::error::{Error, Result};
use crate::core::outside::{InBuf, Located, LocatedBytes, OutBuf};
use crate::proto::exchange::{check_list, Direction, ExchangeCall, Transfer, Transfers};
use crate::proto::family::family_methods;
use crate::proto::staging::Span;
use crate::proto::{CollectiveText, FamilyWorkspace};
use cudarc::driver::CudaStream;
use std::cell::{RefCell, RefMut};

static TEXT: CollectiveText = CollectiveText {
    type_name: "P2pGroup",
    call: "grouped send/recv",
    algorithm: family_code_name,
    meta: describe_family_meta,
};

/// Why a grouped send/recv call cannot grow the staging area (the error's words).
const FIXED_STAGING: &str = "only the PEs with transfers take part in a grouped send/recv \
                             call, so the call cannot grow the area collectively";

/// One send or receive of a [`P2pGroup::run`] call; it borrows its buffer until then.
pub struct P2p<'a> {
    dir: Direction,
    peer: i32,
    bytes: usize,
    dtype: Dtype,
    buf: Buf<'a>,
}

/// The buffer of a [`P2p`].
enum Buf<'a> {
    /// A symmetric view's device address: used as it is.
    Sym(usize),
    /// The caller's own memory, located at the call (cudarc's ordering needs the call's
    /// stream); a `RefCell` because `run` takes the list shared and an output's guard needs it
    /// mutably.
    Own(RefCell<Box<dyn OwnBuf + 'a>>),
}

/// The caller's own memory of one transfer, whatever its element type.
trait OwnBuf {
    fn locate<'s>(&'s mut self, device: i32, stream: &'s CudaStream) -> Result<LocatedBytes<'s>>;
}

impl<T: Element> OwnBuf for InBuf<'_, T> {
    fn locate<'s>(&'s mut self, device: i32, stream: &'s CudaStream) -> Result<LocatedBytes<'s>> {
        InBuf::locate(self, TEXT.call, device, stream).map(Located::into_bytes)
    }
}

impl<T: Element> OwnBuf for OutBuf<'_, T> {
    fn locate<'s>(&'s mut self, device: i32, stream: &'s CudaStream) -> Result<LocatedBytes<'s>> {
        OutBuf::locate(self, TEXT.call, device, stream).map(Located::into_bytes)
    }
}

impl<'a> P2p<'a> {
    fn new<T: Element>(
        dir: Direction,
        peer: i32,
        len: usize,
        sym: Option<usize>,
        own: impl OwnBuf + 'a,
    ) -> P2p<'a> {
        P2p {
            dir,
            peer,
            // Saturating: an own span's length is checked when it is located.
            bytes: len.saturating_mul(std::mem::size_of::<T>()),
            dtype: T::DTYPE,
            buf: match sym {
                Some(addr) => Buf::Sym(addr),
                None => Buf::Own(RefCell::new(Box::new(own))),
            },
        }
    }

    /// Sends `buf` to team rank `peer` (which receives as many elements of the same type): a
    /// symmetric view, or this PE's own device memory ([`InBuf`]: `&CudaSlice`, `CudaView`,
    /// [`InBuf::from_raw`]), copied into the staging area before the launch.
    pub fn send<T: Element>(buf: impl Into<InBuf<'a, T>>, peer: i32) -> P2p<'a> {
        let buf = buf.into();
        let sym = buf.sym().map(|v| v.as_device_ptr() as usize);
        P2p::new::<T>(Direction::Send, peer, buf.len(), sym, buf)
    }

    /// Receives into `buf` from team rank `peer`: a symmetric view, or this PE's own device
    /// memory ([`OutBuf`]: `&mut CudaSlice`, `CudaViewMut`, [`OutBuf::from_raw`]), received in
    /// the staging area and copied out after the launch.
    pub fn recv<T: Element>(buf: impl Into<OutBuf<'a, T>>, peer: i32) -> P2p<'a> {
        let buf = buf.into();
        let sym = buf.sym().map(|v| v.as_device_ptr() as usize);
        P2p::new::<T>(Direction::Recv, peer, buf.len(), sym, buf)
    }

    /// Whether its buffer is symmetric (moved as it is, no staging).
    pub fn is_symmetric(&self) -> bool {
        matches!(self.buf, Buf::Sym(_))
    }
}

impl std::fmt::Debug for P2p<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dir = match self.dir {
            Direction::Send => "send to",
            Direction::Recv => "recv from",
        };
        let kind = if self.is_symmetric() {
            "symmetric"
        } else {
            "own"
        };
        write!(
            f,
            "P2p({dir} {}, {} bytes of {}, {kind})",
            self.peer,
            self.bytes,
            self.dtype.name()
        )
    }
}

/// Grouped send/recv over the world or a team; create it as [`crate::Allreduce`] (collective
/// over the world), then call [`P2pGroup::run`] on the PEs that have transfers.
pub struct P2pGroup<'nv> {
    fam: FamilyWorkspace<'nv>,
}

impl<'nv> P2pGroup<'nv> {
    /// Runs `ops` as one launch in stream order: at most 128 sends and receives, at most 8 per
    /// peer and direction; receive buffers apart from every other buffer of the call. Each send
    /// needs its receive on the peer (same size and type); a mismatch fails on both ends with
    /// [`crate::Error::TransferMismatch`], a send with no receive in time with
    /// [`crate::Error::Timeout`]. Sends that go as low-latency lines (pairs up to
    /// `NVSH_EXCHANGE_LL_MAX`) do not wait for their receive: the sender learns of a mismatch
    /// at its next send to that peer, and of a missing receive when a send two calls later
    /// finds the line slot still unread. Nothing to do for an empty list.
    ///
    /// Buffers of this PE's own memory are staged through the workspace's symmetric area
    /// (docs/staging.md): sends copied in before the launch, receives copied out
    /// after it, all on `stream`; symmetric buffers of the same call are used as they are. Only
    /// the PEs with transfers take part in a call, so the area cannot grow at one: reserve it
    /// first ([`P2pGroup::reserve_staging`], collective; the call's own buffers, each rounded
    /// up to 256 bytes, fit), else the call fails on this PE with
    /// [`crate::Error::StagingTooSmall`], which names the size, before anything is enqueued.
    pub fn run(&mut self, ops: &[P2p<'_>], stream: &CudaStream) -> Result<()> {
        self.fam.ws().rank()?;
        if ops.is_empty() {
            return Ok(());
        }
        let device = self.fam.ws().runtime().device();
        // Each P2p is borrowed once: a list cannot hold the same one twice.
        let mut own: Vec<Option<RefMut<'_, Box<dyn OwnBuf + '_>>>> = ops
            .iter()
            .map(|o| match &o.buf {
                Buf::Sym(_) => None,
                Buf::Own(b) => Some(b.borrow_mut()),
            })
            .collect();
        // Declared after `own`, which they borrow: their guards record cudarc's events when
        // they drop, after the copies back.
        let located = own
            .iter_mut()
            .map(|b| b.as_mut().map(|b| b.locate(device, stream)).transpose())
            .collect::<Result<Vec<_>>>()?;
        let spans: Vec<Span> = ops
            .iter()
            .zip(&located)
            .map(|(o, l)| {
                let (addr, bytes, symmetric) = match (&o.buf, l) {
                    (Buf::Sym(addr), _) => (*addr, o.bytes, true),
                    // Its length checked by `locate` (o.bytes saturates).
                    (Buf::Own(_), Some(l)) => (l.addr(), l.num_bytes(), l.is_symmetric()),
                    (Buf::Own(_), None) => unreachable!("own buffers are located"),
                };
                Span {
                    addr,
                    bytes,
                    symmetric,
                    copy_in: o.dir == Direction::Send,
                    copy_out: o.dir == Direction::Recv,
                }
            })
            .collect();
        let transfers = |addr: &dyn Fn(usize) -> usize| -> Vec<Transfer> {
            ops.iter()
                .zip(&spans)
                .enumerate()
                .map(|(k, (o, s))| Transfer {
                    dir: o.dir,
                    peer: o.peer,
                    addr: addr(k),
                    bytes: s.bytes,
                    dtype: o.dtype,
                })
                .collect()
        };
        // The list's checks on the caller's addresses (receive buffers apart from the others)
        // before any staging: the staged copies would be apart whatever the caller passed.
        check_list(TEXT.call, &transfers(&|k| spans[k].addr), self.n_pes())?;
        let placed = self
            .fam
            .ws_mut()
            .place(TEXT.call, &spans, FIXED_STAGING, stream)?;
        let list = transfers(&|k| placed.addr(k));
        self.fam.exchange(
            "grouped send/recv kernel launch",
            &ExchangeCall {
                code: Collective::Group.code(),
                checked: None,
                transfers: Transfers::List(&list),
                every_pair: false,
                list_lines: true,
            },
            stream,
        )?;
        placed.finish(stream)
    }
}

family_methods!(P2pGroup, &TEXT, exchange);

table_collective!(
    P2pGroup, Group, choice: false,
    new: |nv, team, _slot_bytes| P2pGroup::new(nv, team),
    run: |c, call, stream| {
        let (n, me, peers) = (c.n_pes(), c.fam.ws().rank()?, call.peers);
        each_element!(call.bufs, |i, o| {
            let ops = match peers {
                Peers::Ring => vec![P2p::send(i, (me + 1) % n), P2p::recv(o, (me + n - 1) % n)],
                Peers::All => {
                    let blocks = i.blocks(n as usize).zip(o.blocks(n as usize));
                    let (sends, recvs) = blocks.ok_or_else(|| Error::CollectiveShape {
                        what: TEXT.call,
                        detail: "a call through the table splits symmetric views and raw \
                                 pointers into blocks, not cudarc buffers; pass one of those"
                            .into(),
                    })?;
                    let pairs = sends.into_iter().zip(recvs).zip(0..n);
                    pairs
                        .flat_map(|((s, r), peer)| [P2p::send(s, peer), P2p::recv(r, peer)])
                        .collect()
                }
            };
            c.run(&ops, stream)
        })
    }
);
