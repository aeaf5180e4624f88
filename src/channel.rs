//! Pipeline channels: stream-ordered point-to-point messages between PEs over symmetric memory.
//!
//! (API stub: the kernels come in the next commits; every call returns an error until then.)

use crate::buffer::SymView;
use crate::deadline::default_timeout;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::runtime::Nvshmem;
use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut};
use std::marker::PhantomData;
use std::time::Duration;

/// A channel of `slots` receive slots of `max_elems` elements on every PE.
pub struct Channel<'nv, T: Element> {
    nv: &'nv Nvshmem,
    slots: usize,
    max_elems: usize,
    timeout: Duration,
    _elem: PhantomData<T>,
}

/// A message received in place (zero-copy): a view of the slot it occupies until
/// [`Channel::release`] returns the slot to the sender.
pub struct Received<'nv, T: Element> {
    _nv: PhantomData<&'nv T>,
}

fn not_yet() -> Error {
    Error::Channel {
        what: "not implemented yet".into(),
        hint: "this is the API stub of branch `channel`",
    }
}

impl<'nv, T: Element> Channel<'nv, T> {
    /// Collective: allocates on every PE `slots` receive slots of `max_elems` elements plus
    /// signal words. A PE may send to any PEs, but receives on one channel from at most one peer.
    pub fn new(nv: &'nv Nvshmem, slots: usize, max_elems: usize) -> Result<Self> {
        let timeout = default_timeout()?;
        let _ = (nv, slots, max_elems, timeout);
        Err(not_yet())
    }

    /// Number of receive slots.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Largest message, in elements.
    pub fn max_elems(&self) -> usize {
        self.max_elems
    }

    /// How long a channel kernel waits for a peer before it records a timeout and exits.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// The current timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Enqueues on `stream`: wait on the GPU until the next slot on `peer` is free, put
    /// `src[..len]` into it and signal it. Returns at once.
    pub fn send<S: DevicePtr<T>>(
        &mut self,
        stream: &CudaStream,
        peer: i32,
        src: &S,
        len: usize,
    ) -> Result<()> {
        let _ = (stream, peer, src, len, self.nv);
        Err(not_yet())
    }

    /// [`Channel::send`] from a raw device address.
    ///
    /// # Safety
    /// `src` must be valid device memory of this PE for `len` elements until `stream` has passed
    /// this send.
    pub unsafe fn send_raw(
        &mut self,
        stream: &CudaStream,
        peer: i32,
        src: u64,
        len: usize,
    ) -> Result<()> {
        let _ = (stream, peer, src, len);
        Err(not_yet())
    }

    /// Enqueues: wait on the GPU for the next message from `peer`, copy it into `dst[..len]` and
    /// return the slot to the sender. `len` must equal the sent length (checked on the GPU).
    pub fn recv_into<D: DevicePtrMut<T>>(
        &mut self,
        stream: &CudaStream,
        peer: i32,
        dst: &mut D,
        len: usize,
    ) -> Result<()> {
        let _ = (stream, peer, dst, len);
        Err(not_yet())
    }

    /// [`Channel::recv_into`] into a raw device address.
    ///
    /// # Safety
    /// `dst` must be valid device memory of this PE for `len` elements, not used by other work
    /// until `stream` has passed this receive.
    pub unsafe fn recv_into_raw(
        &mut self,
        stream: &CudaStream,
        peer: i32,
        dst: u64,
        len: usize,
    ) -> Result<()> {
        let _ = (stream, peer, dst, len);
        Err(not_yet())
    }

    /// Zero-copy receive: enqueue a wait for the next message from `peer`; the returned view
    /// is valid on `stream` after that point, until [`Channel::release`].
    pub fn recv(&mut self, stream: &CudaStream, peer: i32) -> Result<Received<'nv, T>> {
        let _ = (stream, peer);
        Err(not_yet())
    }

    /// Enqueues the return of a received slot to its sender.
    pub fn release(&mut self, stream: &CudaStream, msg: Received<'nv, T>) -> Result<()> {
        let _ = (stream, msg);
        Err(not_yet())
    }

    /// Surfaces an error a channel kernel recorded (timeout, length mismatch) without
    /// synchronising.
    pub fn check(&self) -> Result<()> {
        Ok(())
    }

    /// Synchronises `stream`, then [`Channel::check`].
    pub fn sync(&self, stream: &CudaStream) -> Result<()> {
        stream.synchronize()?;
        self.check()
    }
}

impl<'nv, T: Element> Received<'nv, T> {
    /// The slot holding the message.
    pub fn view(&self) -> Result<SymView<'nv, T>> {
        Err(not_yet())
    }
}
