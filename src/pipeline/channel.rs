//! Pipeline channels: stream-ordered messages between PEs over symmetric memory, for handing
//! activations forward and gradients backward between pipeline stages.
//!
//! A [`Channel`] has `K` receive slots on every PE. [`Channel::send`] enqueues a kernel that
//! waits on the GPU until slot `seq % K` on the receiver is free, writes the message into it
//! (direct stores over NVLink/PCIe, NVSHMEM puts to other nodes) and raises the slot's signal
//! after the data. [`Channel::recv_into`] enqueues a kernel that waits for that signal, checks the
//! length sent with the message, copies the slot out and hands the slot back to the sender with a
//! credit signal. Neither call synchronises the host, so the transfer of micro-batch `i` runs
//! while the stream computes `i + 1`; a fast sender stops (on its GPU) only when all `K` slots
//! are still in use.
//!
//! ```no_run
//! use nvshmem::{Channel, Nvshmem};
//!
//! # fn main() -> nvshmem::Result<()> {
//! let nv = Nvshmem::init()?;
//! let stream = nv.stream().clone();
//! // Collective: every PE creates its channels in the same order with the same arguments.
//! let fwd = Channel::<f32>::new(&nv, 2, 4096)?;
//! let mut act = stream.alloc_zeros::<f32>(4096)?;
//! for _micro_batch in 0..8 {
//!     if nv.my_pe() == 0 {
//!         // ... a kernel writes `act` on `stream` ...
//!         fwd.send(1, &act, 4096, &stream)?;
//!     } else {
//!         fwd.recv_into(0, &mut act, 4096, &stream)?;
//!         // ... kernels read `act` on `stream` ...
//!     }
//! }
//! fwd.sync(&stream)?; // or fwd.check() now and then: device-side timeouts, length mismatches
//! # Ok(())
//! # }
//! ```
//!
//! Rules: message `i` from a sender to a receiver is received as message `i` (per pair, in
//! order); a PE receives on one channel from one peer only (use one channel per sender), but
//! may send to several. Every wait on the GPU has a deadline ([`Channel::set_timeout`], default
//! `NVSH_TIMEOUT_MS`): a wait that runs out records what it waited for, its kernel exits without
//! moving data, and [`Channel::check`] returns the error. After an error the channel is broken
//! (its later kernels move nothing): drop it, collectively.
//!
//! Overlap: put channel calls on a stream of their own, ordered against the compute stream with
//! events: a send waits on its stream until a slot is free and a receive until the message is
//! there, which would hold up compute queued behind them on the same stream.
//!
//! Across nodes (where `nvshmem_ptr` is null) data moves with NVSHMEM's put-with-signal. A
//! source outside the symmetric heap (a cudarc allocation) is first copied into one of `slots`
//! staging slots on the sender, taken in turn by the channel's sends: sends of one channel on
//! several streams must not have more than `slots` such sends running at once.
//!
//! Memory ordering: the sender fences its data (and the length word) before it adds to the
//! slot's signal, and the receiver reads the slot only after the signal reached the message's
//! target, through L2. The receiver returns the credit only after its block's reads are done,
//! and the sender writes a slot only after seeing the credit, so a slot is never overwritten
//! while it is read. Signal words only grow (each message adds 64, see device/pipeline/channel.h), so
//! back-to-back use needs no barrier and no reset.

use crate::core::buffer::{SymView, SymmetricBuffer};
use crate::core::deadline::timeout_ns;
use crate::core::element::Element;
use crate::core::error::{Error, Result};
use crate::core::result::cuda_check;
use crate::core::runtime::Nvshmem;
use crate::core::status::{FailureKind, FailureText, StatusRecord, WaitFailure, WaitOp};
use crate::core::stream::raw_stream;
use crate::p2p::device_put::LaunchShape;
use crate::sys;
use cudarc::driver::{CudaEvent, CudaStream, DevicePtr, DevicePtrMut};
use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What each message (and each credit) adds to its counter; NVSHMEMRS_CHANNEL_TOTAL in
/// device/pipeline/channel.h (a test checks they agree). A receive runs at most TOTAL blocks, a send
/// TOTAL - 1 (the length word brings one unit).
const TOTAL: u64 = 64;
/// NVSHMEMRS_CHANNEL_NO_DIRECT.
const FLAG_NO_DIRECT: i32 = 1;

/// Distinguishes channels, so that a message is released on the channel it came from.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A pipeline channel carrying `T` elements; see docs/channels.md.
pub struct Channel<'nv, T: Element> {
    nv: &'nv Nvshmem,
    id: u64,
    shape: SlotShape,
    /// K slots of `shape.stride` elements (the receive side).
    data: SymmetricBuffer<'nv, T>,
    /// K slots for off-node puts from sources outside the symmetric heap (jobs over several
    /// nodes only).
    staging: Option<SymmetricBuffer<'nv, T>>,
    /// full[K], len[K], credit[n_pes][K], out_len[n_pes][K], broken (device/pipeline/channel.h).
    words: SymmetricBuffer<'nv, u64>,
    status: StatusRecord,
    timeout: Duration,
    direct: bool,
    /// Next message number to each peer.
    send_seq: RefCell<Vec<u64>>,
    /// Sends so far (to any peer): picks the staging slot.
    sends: Cell<u64>,
    recv: RefCell<RecvState>,
}

/// A message received in place ([`Channel::recv`]): its slot stays the message's until
/// [`Channel::release`] hands it back. The slot is readable on the receiving stream after the
/// point where `recv` was called (the wait is enqueued there).
///
/// It borrows its channel: the channel's buffers are freed when the channel is dropped, at the
/// same point on every PE (frees are collective), so no message may outlive it.
///
/// ```compile_fail,E0505
/// # fn f(nv: &nvshmem::Nvshmem, stream: &cudarc::driver::CudaStream) -> nvshmem::Result<()> {
/// let ch = nvshmem::Channel::<f32>::new(nv, 2, 16)?;
/// let msg = ch.recv(0, stream)?;
/// drop(ch); // the channel's slots would be freed under `msg`
/// let _ = msg.view()?;
/// # Ok(())
/// # }
/// ```
pub struct Received<'c, T: Element> {
    channel: &'c Channel<'c, T>,
    start: usize,
    capacity: usize,
    len_word: u64,
    seq: u64,
    slot: usize,
    peer: i32,
    arrived: CudaEvent,
}

/// Sizes of a channel's slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SlotShape {
    slots: usize,
    max_elems: usize,
    /// Elements from one slot to the next: max_elems rounded up to 16 bytes.
    stride: usize,
}

impl SlotShape {
    /// Checks `new`'s arguments for elements of `elem` bytes in a job of `n_pes`: every size
    /// the channel computes from them (slot bytes, word count) must fit in a usize.
    fn new(slots: usize, max_elems: usize, elem: usize, n_pes: usize) -> Result<SlotShape> {
        if slots == 0 {
            return Err(Error::Channel {
                what: "a channel of 0 slots was asked for".into(),
                hint: "ask for at least 1 (2 or more let the sender run ahead of the receiver)",
            });
        }
        if max_elems == 0 {
            return Err(Error::Channel {
                what: "a channel for messages of at most 0 elements was asked for".into(),
                hint: "max_elems is the largest message the channel carries: at least 1",
            });
        }
        let per16 = (16 / elem).max(1);
        let overflow = |detail: String| Error::SizeOverflow {
            what: "Channel::new",
            detail,
        };
        let stride = max_elems
            .checked_next_multiple_of(per16)
            .filter(|s| {
                s.checked_mul(slots)
                    .and_then(|n| n.checked_mul(elem))
                    .is_some()
            })
            .ok_or_else(|| overflow(format!("{slots} slots x {max_elems} elements x {elem}")))?;
        // The word buffer: full[K], len[K], credit[n][K], out_len[n][K], broken.
        n_pes
            .checked_add(1)
            .and_then(|m| m.checked_mul(2))
            .and_then(|m| m.checked_mul(slots))
            .and_then(|w| w.checked_add(1))
            .and_then(|w| w.checked_mul(8))
            .ok_or_else(|| overflow(format!("8 x (2 x {slots} x ({n_pes} + 1) + 1)")))?;
        Ok(SlotShape {
            slots,
            max_elems,
            stride,
        })
    }

    /// Checks a message length against the channel and the caller's buffer.
    fn check_len(&self, what: &'static str, len: usize, buffer: Option<usize>) -> Result<()> {
        if len == 0 {
            return Err(Error::Channel {
                what: format!("{what} of a message of 0 elements"),
                hint: "messages hold at least 1 element",
            });
        }
        if len > self.max_elems {
            return Err(Error::Channel {
                what: format!(
                    "{what} of {len} elements on a channel for at most {}",
                    self.max_elems
                ),
                hint: "make the channel with a max_elems that fits the largest message",
            });
        }
        match buffer {
            Some(have) if have < len => Err(Error::Channel {
                what: format!("{what} of {len} elements with a device buffer of {have}"),
                hint: "pass a buffer (or view) of at least `len` elements",
            }),
            _ => Ok(()),
        }
    }

    /// Index of full[s] in the word buffer.
    fn full(&self, s: usize) -> usize {
        s
    }

    /// Index of len[s].
    fn len_word(&self, s: usize) -> usize {
        self.slots + s
    }

    /// Index of credit[receiver][s] (kept on the sender).
    fn credit(&self, receiver: usize, s: usize) -> usize {
        2 * self.slots + receiver * self.slots + s
    }

    /// Index of out_len[receiver][s] (on the sender: the length word it puts).
    fn out_len(&self, n_pes: usize, receiver: usize, s: usize) -> usize {
        2 * self.slots + n_pes * self.slots + receiver * self.slots + s
    }

    /// Index of the broken flag; also one less than the word count.
    fn broken(&self, n_pes: usize) -> usize {
        2 * self.slots + 2 * n_pes * self.slots
    }
}

/// The receive side's bookkeeping: one sender, messages in order, slots held by [`Received`].
#[derive(Debug, Default)]
struct RecvState {
    peer: Option<i32>,
    next: u64,
    held: BTreeSet<u64>,
}

impl RecvState {
    /// The number of the next message from `peer`, after checking that it may be received.
    fn next_from(&self, me: i32, peer: i32, slots: usize) -> Result<u64> {
        if let Some(first) = self.peer.filter(|&p| p != peer) {
            return Err(Error::Channel {
                what: format!(
                    "PE {me} receives on this channel from PE {first}; a receive from PE \
                     {peer} was asked"
                ),
                hint: "a PE receives on a channel from one sender only: make one channel per \
                       sender (all PEs create it)",
            });
        }
        let seq = self.next;
        if let Some(old) = seq.checked_sub(slots as u64) {
            if self.held.contains(&old) {
                return Err(Error::Channel {
                    what: format!(
                        "message {seq} needs slot {} which still holds message {old}, received \
                         with Channel::recv and not released",
                        seq % slots as u64
                    ),
                    hint: "release received messages (Channel::release) before receiving more \
                           than `slots` ahead",
                });
            }
        }
        Ok(seq)
    }

    /// Records that message `seq` from `peer` has been enqueued.
    fn received(&mut self, peer: i32, seq: u64, held: bool) {
        self.peer = Some(peer);
        self.next = seq + 1;
        if held {
            self.held.insert(seq);
        }
    }
}

/// Blocks and threads of a channel kernel moving `bytes`, with at most `max_blocks` blocks.
fn launch_shape(bytes: usize, max_blocks: u64) -> (i32, i32) {
    let shape = LaunchShape::for_bytes(bytes);
    let blocks = (shape.blocks as u64).min(max_blocks) as i32;
    (blocks, shape.threads as i32)
}

impl<'nv, T: Element> Channel<'nv, T> {
    /// Collective (every PE calls it at the same point, with the same arguments): allocates on
    /// every PE `slots` receive slots of `max_elems` elements plus signal words (and, in jobs
    /// over several nodes, as many staging slots). A PE may send to any PEs, but receives on
    /// one channel from at most one peer.
    pub fn new(nv: &'nv Nvshmem, slots: usize, max_elems: usize) -> Result<Self> {
        let n_pes = nv.n_pes() as usize;
        let shape = SlotShape::new(slots, max_elems, std::mem::size_of::<T>(), n_pes)?;
        let timeout = nv.timeout();
        let status = StatusRecord::new(nv.context())?;
        let n = nv.n_pes() as usize;
        // Every PE decides alike: with several nodes no PE's node holds all PEs.
        let several_nodes = nv.team_node().n_pes() < nv.n_pes();
        let data = nv.alloc_aligned::<T>(slots * shape.stride, 256)?;
        let staging = if several_nodes {
            Some(nv.alloc_aligned::<T>(slots * shape.stride, 256)?)
        } else {
            None
        };
        // Zeroed by this process: peers fill the slots, and initcheck sees only this
        // process's writes (see SymmetricBuffer::allocate).
        data.zero()?;
        if let Some(s) = &staging {
            s.zero()?;
        }
        let words = nv.alloc_zeroed::<u64>(shape.broken(n) + 1)?;
        // The zeroed slots and counters are in place on every PE before any peer writes them.
        nv.barrier_all()?;
        Ok(Channel {
            nv,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            shape,
            data,
            staging,
            words,
            status,
            timeout,
            direct: true,
            send_seq: RefCell::new(vec![0; n]),
            sends: Cell::new(0),
            recv: RefCell::new(RecvState::default()),
        })
    }

    /// Number of receive slots (K).
    pub fn slots(&self) -> usize {
        self.shape.slots
    }

    /// Largest message, in elements.
    pub fn max_elems(&self) -> usize {
        self.shape.max_elems
    }

    /// How long each wait of this channel's kernels may take on the GPU (default
    /// `NVSH_TIMEOUT_MS`, else 60 s). Applies to operations enqueued afterwards.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// The current timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// With `false`, sends take NVSHMEM's put-with-signal even to peers whose memory this GPU
    /// can store to directly: the path used across nodes, testable on one. Default `true`.
    pub fn set_direct_stores(&mut self, direct: bool) {
        self.direct = direct;
    }

    /// Enqueues on `stream`: wait on the GPU until slot `seq % slots` on `peer` is free, put
    /// `src[..len]` into it and signal it. Returns at once (no host synchronisation); `src` may
    /// be reused once the stream has passed this send.
    pub fn send<S: DevicePtr<T>>(
        &self,
        peer: i32,
        src: &S,
        len: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        self.shape.check_len("send", len, Some(src.len()))?;
        let (ptr, record) = src.device_ptr(stream);
        // SAFETY: `src` holds at least `len` elements of this PE's device memory, and its
        // guard (dropped after the launch) orders other users after this send.
        let sent = unsafe { self.send_raw(peer, ptr, len, stream) };
        drop(record);
        sent
    }

    /// [`Channel::send`] from a raw device address.
    ///
    /// # Safety
    /// `src` must be device memory of this PE valid for `len` elements until `stream` has passed
    /// this send, and not written by other work before then.
    pub unsafe fn send_raw(
        &self,
        peer: i32,
        src: u64,
        len: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        self.shape.check_len("send", len, None)?;
        self.nv.check_pe(peer)?;
        let p = peer as usize;
        let seq = self.send_seq.borrow()[p];
        let k = self.shape.slots as u64;
        let s = (seq % k) as usize;
        let bytes = len * std::mem::size_of::<T>();
        let (blocks, threads) = launch_shape(bytes, TOTAL - 1);
        let staging = match &self.staging {
            Some(buffer) => self.slot_address(buffer, (self.sends.get() % k) as usize),
            None => 0,
        };
        let op = sys::nvshmemrs_channel_op {
            data: src,
            staging,
            // Slot s's previous message was number seq - K: consumed once the credit has grown
            // by TOTAL for every round before this one.
            target: (seq / k) * TOTAL,
            credit: self.word(self.shape.credit(p, s)),
            out_len: self.word(self.shape.out_len(self.nv.n_pes() as usize, p, s)),
            flags: if self.direct { 0 } else { FLAG_NO_DIRECT },
            ..self.op(s, seq, peer, len, blocks, threads)
        };
        self.nv.bind()?;
        // SAFETY: a checked op over this channel's memory; the caller vouches for `src`.
        let code = unsafe { sys::nvshmemrs_channel_send(&op, raw_stream(stream)) };
        cuda_check(code, "channel send kernel launch")?;
        self.send_seq.borrow_mut()[p] += 1;
        self.sends.set(self.sends.get() + 1);
        Ok(())
    }

    /// Enqueues on `stream`: wait on the GPU for the next message from `peer`, copy it into
    /// `dst[..len]` and return the slot to the sender. `len` must equal the sent length: this is
    /// checked on the GPU against the length sent with the message, and a mismatch is an error
    /// of [`Channel::check`] (the message is dropped, `dst` untouched).
    pub fn recv_into<D: DevicePtrMut<T>>(
        &self,
        peer: i32,
        dst: &mut D,
        len: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        self.shape.check_len("recv_into", len, Some(dst.len()))?;
        let (ptr, record) = dst.device_ptr_mut(stream);
        // SAFETY: `dst` holds at least `len` elements of this PE's device memory; its guard
        // orders other users after this receive.
        let received = unsafe { self.recv_into_raw(peer, ptr, len, stream) };
        drop(record);
        received
    }

    /// [`Channel::recv_into`] into a raw device address.
    ///
    /// # Safety
    /// `dst` must be device memory of this PE valid for `len` elements, not used by other work
    /// until `stream` has passed this receive.
    pub unsafe fn recv_into_raw(
        &self,
        peer: i32,
        dst: u64,
        len: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        self.shape.check_len("recv_into", len, None)?;
        self.nv.check_pe(peer)?;
        let seq = self
            .recv
            .borrow()
            .next_from(self.nv.my_pe(), peer, self.shape.slots)?;
        let s = (seq % self.shape.slots as u64) as usize;
        let (blocks, threads) = launch_shape(len * std::mem::size_of::<T>(), TOTAL);
        let op = sys::nvshmemrs_channel_op {
            data: dst,
            ..self.recv_op(s, seq, peer, len, blocks, threads)
        };
        self.nv.bind()?;
        // SAFETY: a checked op over this channel's memory; the caller vouches for `dst`.
        let code = unsafe { sys::nvshmemrs_channel_recv(&op, raw_stream(stream)) };
        cuda_check(code, "channel receive kernel launch")?;
        self.recv.borrow_mut().received(peer, seq, false);
        Ok(())
    }

    /// Zero-copy receive: enqueues on `stream` a wait for the next message from `peer` and
    /// returns its slot. Kernels enqueued on `stream` afterwards may read the slot
    /// ([`Received::view`]); [`Channel::release`] hands it back to the sender (a slot that is
    /// never released stops the sender after `slots` more messages).
    pub fn recv(&self, peer: i32, stream: &CudaStream) -> Result<Received<'_, T>> {
        self.nv.check_pe(peer)?;
        let seq = self
            .recv
            .borrow()
            .next_from(self.nv.my_pe(), peer, self.shape.slots)?;
        let s = (seq % self.shape.slots as u64) as usize;
        let op = self.recv_op(s, seq, peer, 0, 1, 32);
        self.nv.bind()?;
        // SAFETY: a checked op over this channel's memory.
        let code = unsafe { sys::nvshmemrs_channel_wait(&op, raw_stream(stream)) };
        cuda_check(code, "channel wait kernel launch")?;
        let arrived = stream.record_event(None)?;
        self.recv.borrow_mut().received(peer, seq, true);
        Ok(Received {
            channel: self,
            start: s * self.shape.stride,
            capacity: self.shape.max_elems,
            len_word: op.len_word,
            seq,
            slot: s,
            peer,
            arrived,
        })
    }

    /// Enqueues on `stream` the return of `msg`'s slot to its sender, after the work enqueued
    /// on `stream` before it (the kernels that read the slot).
    pub fn release(&self, msg: Received<'_, T>, stream: &CudaStream) -> Result<()> {
        if msg.channel.id != self.id {
            return Err(Error::Channel {
                what: format!(
                    "message {} from PE {} is released on another channel than it came from",
                    msg.seq, msg.peer
                ),
                hint: "release a message on the channel that received it",
            });
        }
        let op = self.recv_op(msg.slot, msg.seq, msg.peer, 0, 1, 32);
        self.nv.bind()?;
        // SAFETY: a checked op over this channel's memory.
        let code = unsafe { sys::nvshmemrs_channel_release(&op, raw_stream(stream)) };
        cuda_check(code, "channel release kernel launch")?;
        self.recv.borrow_mut().held.remove(&msg.seq);
        Ok(())
    }

    /// Returns an error a channel kernel recorded (a wait past its deadline, a length
    /// mismatch) without synchronising: it reads host-mapped memory. `Ok` means no kernel of
    /// this channel on this PE has failed so far (work still queued may fail later).
    pub fn check(&self) -> Result<()> {
        self.nv
            .noted(self.status.check(self.nv.my_pe(), &ChannelWaits))
    }

    /// Synchronises `stream` (bounded: every channel wait has a deadline), then
    /// [`Channel::check`].
    pub fn sync(&self, stream: &CudaStream) -> Result<()> {
        stream.synchronize()?;
        self.check()
    }

    /// The first failure a kernel of this channel recorded on this PE, in detail.
    pub fn failure(&self) -> Option<WaitFailure> {
        self.status.failure()
    }

    /// Device address of word `i` of the word buffer.
    fn word(&self, i: usize) -> u64 {
        self.words.as_device_ptr() as u64 + (i * std::mem::size_of::<u64>()) as u64
    }

    /// Device address of slot `s` of `buffer`.
    fn slot_address(&self, buffer: &SymmetricBuffer<'nv, T>, s: usize) -> u64 {
        buffer.as_device_ptr() as u64 + (s * self.shape.stride * std::mem::size_of::<T>()) as u64
    }

    /// The fields every operation on slot `s` shares.
    fn op(
        &self,
        s: usize,
        seq: u64,
        peer: i32,
        len: usize,
        blocks: i32,
        threads: i32,
    ) -> sys::nvshmemrs_channel_op {
        let n = self.nv.n_pes() as usize;
        sys::nvshmemrs_channel_op {
            data: 0,
            slot: self.slot_address(&self.data, s),
            staging: 0,
            full: self.word(self.shape.full(s)),
            len_word: self.word(self.shape.len_word(s)),
            credit: 0,
            out_len: 0,
            broken: self.word(self.shape.broken(n)),
            status: self.status.device_ptr(),
            bytes: (len * std::mem::size_of::<T>()) as u64,
            len: len as u64,
            target: 0,
            seq,
            slot_index: s as u64,
            timeout_ns: timeout_ns(self.timeout),
            peer,
            blocks,
            threads,
            flags: 0,
        }
    }

    /// An operation of the receive side on slot `s`: waits until message `seq` has arrived;
    /// its credit goes to credit[me][s] on the sender.
    fn recv_op(
        &self,
        s: usize,
        seq: u64,
        peer: i32,
        len: usize,
        blocks: i32,
        threads: i32,
    ) -> sys::nvshmemrs_channel_op {
        let me = self.nv.my_pe() as usize;
        sys::nvshmemrs_channel_op {
            target: (seq / self.shape.slots as u64 + 1) * TOTAL,
            credit: self.word(self.shape.credit(me, s)),
            ..self.op(s, seq, peer, len, blocks, threads)
        }
    }
}

impl<T: Element> Drop for Channel<'_, T> {
    fn drop(&mut self) {
        // Kernels of this channel may still be queued; they end by their deadlines at the
        // latest. The buffers are freed (collectively) after them.
        let _ = self.nv.context().synchronize();
        let held = self.recv.get_mut().held.len();
        if held > 0 {
            log::warn!(
                "PE {}: a channel was dropped with {held} received message(s) not released \
                 (its slots are freed with it)",
                self.nv.my_pe(),
            );
        }
    }
}

impl<T: Element> std::fmt::Debug for Channel<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Channel<{}>({} slots of {} elements)",
            T::NAME,
            self.shape.slots,
            self.shape.max_elems
        )
    }
}

impl<T: Element> Received<'_, T> {
    /// The message's slot: `capacity()` elements, of which the message fills the first
    /// `len()`. Valid on the receiving stream after the `recv`, until the release.
    pub fn view(&self) -> Result<SymView<'_, T>> {
        self.channel
            .data
            .view(self.start..self.start + self.capacity)
    }

    /// Device address of the slot (of the message's first element).
    pub fn device_ptr(&self) -> u64 {
        self.channel.data.as_device_ptr() as u64 + (self.start * std::mem::size_of::<T>()) as u64
    }

    /// Device address of the u64 word holding the message's length in elements, for kernels
    /// that read the length on the GPU.
    pub fn len_device_ptr(&self) -> u64 {
        self.len_word
    }

    /// The channel's max_elems: how many elements the view covers.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The sender.
    pub fn peer(&self) -> i32 {
        self.peer
    }

    /// The message's number from its sender (0, 1, ...).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The message's length in elements. The host learns it only once the message has arrived,
    /// so this waits on the host until the stream has passed the receive (at most the
    /// channel's timeout from this call), then reads the length word.
    pub fn len(&self) -> Result<usize> {
        let (me, status) = (self.channel.nv.my_pe(), &self.channel.status);
        let start = Instant::now();
        let mut pause = Duration::from_micros(2);
        while !self.arrived.try_is_complete()? {
            status.check(me, &ChannelWaits)?;
            if start.elapsed() > self.channel.timeout {
                return Err(Error::Timeout {
                    what: format!(
                        "the stream of PE {} to reach its receive of message {} from PE {} \
                         (Received::len waits for the message on the host)",
                        me, self.seq, self.peer
                    ),
                    waited_ms: start.elapsed().as_millis(),
                });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
        }
        // A failed wait completes its kernel too: then the length word is stale.
        status.check(me, &ChannelWaits)?;
        let mut len = [0u64; 1];
        // SAFETY: an 8-byte device word of this PE, written before the wait completed.
        unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut len, self.len_word) }?;
        Ok(len[0] as usize)
    }

    /// Always false: messages hold at least one element.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// The words of a channel's device waits in errors.
struct ChannelWaits;

impl FailureText for ChannelWaits {
    fn error(&self, f: &WaitFailure, me: i32) -> Error {
        let peer = f.peer;
        if f.kind == FailureKind::LengthMismatch {
            return Error::MessageLength {
                pe: me,
                peer,
                seq: f.seq,
                sent: f.seen,
                expected: f.want,
            };
        }
        let (event, counterpart) = match f.op {
            WaitOp::ChannelSend => (
                format!(
                    "PE {peer} to free slot {} for message {} (PE {me}'s Channel::send)",
                    f.index, f.seq
                ),
                "Channel::recv_into or Channel::release",
            ),
            op => (
                format!(
                    "message {} from PE {peer} in slot {} ({} on PE {me})",
                    f.seq,
                    f.index,
                    op.name()
                ),
                "Channel::send",
            ),
        };
        Error::Timeout {
            what: format!(
                "{event}: signal word {:#x} is {}, needs {}; PE {peer} must make the matching \
                 {counterpart} on the same channel. The channel is broken now (its later kernels \
                 move nothing); a longer wait: NVSH_TIMEOUT_MS or Channel::set_timeout",
                f.signal, f.seen, f.want
            ),
            waited_ms: f.waited.as_millis(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_channel_error(r: Result<impl std::fmt::Debug>, needle: &str) {
        match r {
            Err(Error::Channel { what, .. }) => assert!(what.contains(needle), "{what}"),
            other => panic!("expected a channel error containing {needle:?}, got {other:?}"),
        }
    }

    #[test]
    fn the_device_adds_the_same_total_per_message() {
        // SAFETY: returns a constant.
        assert_eq!(unsafe { sys::nvshmemrs_channel_total() } as u64, TOTAL);
    }

    #[test]
    fn slot_shapes_round_to_16_bytes_and_refuse_empty_channels() {
        let shape = SlotShape::new(3, 5, 4, 2).unwrap();
        assert_eq!((shape.slots, shape.max_elems, shape.stride), (3, 5, 8));
        assert_eq!(SlotShape::new(2, 7, 2, 2).unwrap().stride, 8);
        assert_eq!(SlotShape::new(2, 1, 1, 2).unwrap().stride, 16);
        assert_eq!(SlotShape::new(2, 3, 8, 2).unwrap().stride, 4);
        assert_eq!(SlotShape::new(1, 16, 4, 2).unwrap().stride, 16);
        is_channel_error(SlotShape::new(0, 10, 4, 2), "0 slots");
        is_channel_error(SlotShape::new(2, 0, 4, 2), "0 elements");
    }

    #[test]
    fn channel_sizes_that_overflow_are_size_overflow_errors() {
        let overflow = |r: Result<SlotShape>| match r {
            Err(Error::SizeOverflow { what, .. }) => assert_eq!(what, "Channel::new"),
            other => panic!("expected SizeOverflow, got {other:?}"),
        };
        overflow(SlotShape::new(4, usize::MAX / 2, 4, 2));
        // Rounding max_elems up to 16 bytes would wrap.
        overflow(SlotShape::new(1, usize::MAX, 1, 2));
        // Slots fit, but the signal words of 16 PEs do not.
        overflow(SlotShape::new(usize::MAX / 32, 1, 1, 16));
    }

    #[test]
    fn word_layout_does_not_overlap() {
        let shape = SlotShape::new(3, 10, 4, 2).unwrap();
        let n = 4;
        let mut seen = BTreeSet::new();
        for s in 0..3 {
            assert!(seen.insert(shape.full(s)));
            assert!(seen.insert(shape.len_word(s)));
            for r in 0..n {
                assert!(seen.insert(shape.credit(r, s)));
                assert!(seen.insert(shape.out_len(n, r, s)));
            }
        }
        assert!(seen.insert(shape.broken(n)));
        assert_eq!(seen.len(), shape.broken(n) + 1);
        assert_eq!(*seen.iter().max().unwrap(), shape.broken(n));
    }

    #[test]
    fn message_lengths_are_checked_before_the_gpu() {
        let shape = SlotShape::new(2, 100, 4, 2).unwrap();
        assert!(shape.check_len("send", 1, None).is_ok());
        assert!(shape.check_len("send", 100, Some(100)).is_ok());
        is_channel_error(shape.check_len("send", 0, None), "0 elements");
        is_channel_error(shape.check_len("recv_into", 101, None), "at most 100");
        is_channel_error(shape.check_len("send", 50, Some(49)), "buffer of 49");
    }

    #[test]
    fn a_pe_receives_on_a_channel_from_one_peer_only() {
        let mut state = RecvState::default();
        assert_eq!(state.next_from(1, 0, 2).unwrap(), 0);
        state.received(0, 0, false);
        assert_eq!(state.next_from(1, 0, 2).unwrap(), 1);
        is_channel_error(state.next_from(1, 2, 2), "from PE 0; a receive from PE 2");
        // The refused receive changed nothing.
        assert_eq!(state.next_from(1, 0, 2).unwrap(), 1);
    }

    #[test]
    fn unreleased_messages_block_their_slot_with_an_error_not_a_hang() {
        let mut state = RecvState::default();
        for seq in 0..2 {
            assert_eq!(state.next_from(0, 1, 2).unwrap(), seq);
            state.received(1, seq, true);
        }
        // Message 2 needs slot 0, which message 0 still holds.
        is_channel_error(state.next_from(0, 1, 2), "still holds message 0");
        state.held.remove(&0);
        assert_eq!(state.next_from(0, 1, 2).unwrap(), 2);
        state.received(1, 2, false);
        is_channel_error(state.next_from(0, 1, 2), "still holds message 1");
    }

    #[test]
    fn launch_shapes_stay_within_the_signal_total() {
        for bytes in [1, 4096, 1 << 20, 1 << 30] {
            for max in [TOTAL - 1, TOTAL] {
                let (blocks, threads) = launch_shape(bytes, max);
                assert!(blocks >= 1 && blocks as u64 <= max, "{bytes}: {blocks}");
                assert!((32..=1024).contains(&threads));
            }
        }
    }

    #[test]
    fn failures_become_typed_errors_naming_the_peer() {
        let f = WaitFailure {
            kind: FailureKind::Timeout,
            op: WaitOp::ChannelRecvInto,
            peer: 3,
            signal: 0x1000,
            index: 1,
            seq: 5,
            want: 384,
            seen: 320,
            waited: Duration::from_millis(250),
        };
        match &ChannelWaits.error(&f, 1) {
            Error::Timeout { what, waited_ms } => {
                assert_eq!(*waited_ms, 250);
                assert!(what.contains("message 5 from PE 3"), "{what}");
                assert!(what.contains("Channel::recv_into on PE 1"), "{what}");
            }
            e => panic!("not a timeout: {e:?}"),
        }
        let send = WaitFailure {
            op: WaitOp::ChannelSend,
            ..f.clone()
        };
        let text = ChannelWaits.error(&send, 0).to_string();
        assert!(text.contains("PE 3 to free slot 1"), "{text}");
        let len = WaitFailure {
            kind: FailureKind::LengthMismatch,
            want: 11,
            seen: 10,
            ..f
        };
        assert!(matches!(
            ChannelWaits.error(&len, 1),
            Error::MessageLength {
                pe: 1,
                peer: 3,
                seq: 5,
                sent: 10,
                expected: 11
            }
        ));
    }
}
