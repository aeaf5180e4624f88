//! Grouped send/recv (as `ncclGroupStart`, `ncclSend`/`ncclRecv`, `ncclGroupEnd`): any sends and
//! receives to and from any peers, itself included, in one launch. An exchange
//! ([`crate::proto::exchange`]; device/coll/group.cu): sends and receives between two PEs are
//! matched in order, call by call (the k-th call in which r receives from s with the k-th in
//! which s sends to r; within a call, in list order), so only the PEs with transfers in a call
//! take part in it, and no pattern in which every send has its receive can deadlock (each
//! receiver announces all its receives before any PE waits).

use crate::coll::family::{describe_family_meta, family_code_name};
use crate::core::buffer::SymView;
use crate::core::element::Element;
use crate::core::error::Result;
use crate::proto::exchange::{Direction, ExchangeCall, Transfer, Transfers};
use crate::proto::family::family_methods;
use crate::proto::{CollectiveText, FamilyWorkspace};
use crate::sys;
use cudarc::driver::CudaStream;
use std::marker::PhantomData;

static TEXT: CollectiveText = CollectiveText {
    type_name: "P2pGroup",
    call: "grouped send/recv",
    algorithm: family_code_name,
    meta: describe_family_meta,
};

/// One send or receive of a [`P2pGroup::run`] call; it borrows its buffer until then.
#[derive(Clone, Debug)]
pub struct P2p<'a> {
    transfer: Transfer,
    _buffer: PhantomData<SymView<'a, u8>>,
}

impl<'a> P2p<'a> {
    fn new<T: Element>(dir: Direction, buf: SymView<'a, T>, peer: i32) -> P2p<'a> {
        P2p {
            transfer: Transfer {
                dir,
                peer,
                addr: buf.as_device_ptr() as usize,
                bytes: buf.num_bytes(),
                dtype: T::DTYPE,
            },
            _buffer: PhantomData,
        }
    }

    /// Sends `buf` to team rank `peer` (which receives as many elements of the same type).
    pub fn send<T: Element>(buf: impl Into<SymView<'a, T>>, peer: i32) -> P2p<'a> {
        P2p::new(Direction::Send, buf.into(), peer)
    }

    /// Receives into `buf` from team rank `peer`.
    pub fn recv<T: Element>(buf: impl Into<SymView<'a, T>>, peer: i32) -> P2p<'a> {
        P2p::new(Direction::Recv, buf.into(), peer)
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
    /// [`crate::Error::Timeout`]. Nothing to do for an empty list.
    pub fn run(&mut self, ops: &[P2p<'_>], stream: &CudaStream) -> Result<()> {
        self.fam.ws().rank()?;
        if ops.is_empty() {
            return Ok(());
        }
        let list: Vec<Transfer> = ops.iter().map(|o| o.transfer.clone()).collect();
        self.fam.exchange(
            "grouped send/recv kernel launch",
            &ExchangeCall {
                code: sys::NVSHMEMRS_COLL_GROUP,
                checked: None,
                transfers: Transfers::List(&list),
            },
            stream,
        )
    }
}

family_methods!(P2pGroup, &TEXT, exchange);
