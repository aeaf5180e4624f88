//! The status record of device-side waits, so that a dead or misbehaving peer never hangs a
//! stream: a wait that runs out of time (or, in checked mode, a header that differs) writes what
//! it waited for into a [`StatusRecord`], pinned host memory mapped into the device, and its
//! kernel exits without moving data. The host reads the record at any time without synchronising
//! a stream ([`StatusRecord::failure`]); the record's owner turns it into a typed [`Error`]
//! ([`FailureText`]): only the owner knows what its words mean.

use crate::core::error::{Error, Result};
use crate::sys;
use cudarc::driver::sys::{CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_PORTABLE};
use cudarc::driver::CudaContext;
use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What a failed device-side wait was part of (NVSHMEMRS_WAIT_OP_* in device/abi.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitOp {
    /// `Channel::send` waiting for the receiver to free the slot (its credit).
    ChannelSend,
    /// `Channel::recv_into` waiting for a message.
    ChannelRecvInto,
    /// `Channel::recv` (zero-copy) waiting for a message.
    ChannelRecv,
    /// An allreduce step waiting for a peer's data or handshake.
    Allreduce,
    /// A barrier waiting for a PE to arrive.
    Barrier,
    /// `signal_wait_until_on_stream`.
    SignalWait,
    /// A call of the collective family (broadcast, allgather, alltoall, reduce-scatter,
    /// reduce) waiting for a peer's data or handshake.
    Collective,
    /// A code this version does not know.
    Other(u64),
}

impl WaitOp {
    fn from_code(code: u64) -> WaitOp {
        match code {
            c if c == sys::NVSHMEMRS_WAIT_OP_SEND as u64 => WaitOp::ChannelSend,
            c if c == sys::NVSHMEMRS_WAIT_OP_RECV_INTO as u64 => WaitOp::ChannelRecvInto,
            c if c == sys::NVSHMEMRS_WAIT_OP_RECV as u64 => WaitOp::ChannelRecv,
            c if c == sys::NVSHMEMRS_WAIT_OP_ALLREDUCE as u64 => WaitOp::Allreduce,
            c if c == sys::NVSHMEMRS_WAIT_OP_BARRIER as u64 => WaitOp::Barrier,
            c if c == sys::NVSHMEMRS_WAIT_OP_SIGNAL_WAIT as u64 => WaitOp::SignalWait,
            c if c == sys::NVSHMEMRS_WAIT_OP_COLLECTIVE as u64 => WaitOp::Collective,
            c => WaitOp::Other(c),
        }
    }

    /// The call's name in messages.
    pub fn name(self) -> String {
        match self {
            WaitOp::ChannelSend => "Channel::send".into(),
            WaitOp::ChannelRecvInto => "Channel::recv_into".into(),
            WaitOp::ChannelRecv => "Channel::recv".into(),
            WaitOp::Allreduce => "Allreduce::run".into(),
            WaitOp::Barrier => "barrier".into(),
            WaitOp::SignalWait => "signal_wait_until_on_stream".into(),
            WaitOp::Collective => "a collective call".into(),
            WaitOp::Other(c) => format!("device wait (op {c})"),
        }
    }
}

/// How a device-side operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// A wait ran past its deadline.
    Timeout,
    /// A received message had another length than asked for (`want` asked, `seen` sent).
    LengthMismatch,
    /// Checked mode: a peer's call header differed (`index`: the field, `want`: this PE's
    /// value, `seen`: the peer's, `seq`: the call number).
    Mismatch,
}

/// The first failure a kernel recorded in its status record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitFailure {
    /// How it failed.
    pub kind: FailureKind,
    /// The operation whose wait failed.
    pub op: WaitOp,
    /// The PE whose signal did not come (or whose message had the wrong length).
    pub peer: i32,
    /// Device address of the signal word waited on (for a length mismatch: the length word).
    pub signal: u64,
    /// Slot of that word.
    pub index: u64,
    /// Message number of the (sender, receiver) pair.
    pub seq: u64,
    /// The value the signal had to reach (for a length mismatch: the length asked for).
    pub want: u64,
    /// The value it had at the end (for a length mismatch: the length sent).
    pub seen: u64,
    /// How long the wait ran.
    pub waited: Duration,
}

/// How the owner of a [`StatusRecord`] (a collective, a channel, the runtime's barrier) turns
/// its failures into errors: the record is generic, the meaning of its words is the owner's.
pub trait FailureText {
    /// The typed error for `failure`, seen on PE `me`.
    fn error(&self, failure: &WaitFailure, me: i32) -> Error;
}

/// `struct nvshmemrs_wait_status` (device/abi.h), as bindgen generates it.
type RawStatus = sys::nvshmemrs_wait_status;

const FAIL_TIMEOUT: u64 = sys::NVSHMEMRS_FAIL_TIMEOUT as u64;
const FAIL_LENGTH: u64 = sys::NVSHMEMRS_FAIL_LENGTH as u64;
const FAIL_MISMATCH: u64 = sys::NVSHMEMRS_FAIL_MISMATCH as u64;

/// A failure record in pinned host memory that kernels write through its device address. Reading
/// it needs no stream synchronisation. The first failure wins; the record is not reset (an object
/// that failed stays failed).
pub struct StatusRecord {
    host: NonNull<RawStatus>,
    device: u64,
    ctx: Arc<CudaContext>,
}

impl std::fmt::Debug for StatusRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StatusRecord({:#x})", self.device)
    }
}

impl StatusRecord {
    /// A zeroed record, mapped into `ctx`'s device.
    pub fn new(ctx: &Arc<CudaContext>) -> Result<StatusRecord> {
        ctx.bind_to_thread()?;
        let bytes = std::mem::size_of::<RawStatus>();
        let flags = CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: a plain allocation; zeroed below before anything reads it.
        let raw = unsafe { cudarc::driver::result::malloc_host(bytes, flags) }?;
        let host = NonNull::new(raw.cast::<RawStatus>()).ok_or(Error::Driver {
            message: "cuMemHostAlloc returned NULL".into(),
        })?;
        // SAFETY: `bytes` of fresh pinned memory, page aligned.
        unsafe { host.as_ptr().write_volatile(RawStatus::default()) };
        let mut device = 0;
        // SAFETY: `raw` was allocated with DEVICEMAP in this context.
        let mapped =
            unsafe { cudarc::driver::sys::cuMemHostGetDevicePointer_v2(&mut device, raw, 0) };
        if let Err(e) = mapped.result() {
            // SAFETY: allocated above, not shared yet.
            let _ = unsafe { cudarc::driver::result::free_host(raw) };
            return Err(e.into());
        }
        Ok(StatusRecord {
            host,
            device,
            ctx: ctx.clone(),
        })
    }

    /// The address kernels write the record through.
    pub fn device_ptr(&self) -> u64 {
        self.device
    }

    /// The recorded failure, if any. Reads host memory only.
    pub fn failure(&self) -> Option<WaitFailure> {
        let p = self.host.as_ptr();
        // SAFETY: the record lives as long as self; kernels write it, so read it volatile.
        let code = unsafe { std::ptr::addr_of!((*p).code).read_volatile() };
        if code == 0 {
            return None;
        }
        // The device writes `code` last, after a system fence: the rest is complete.
        fence(Ordering::Acquire);
        // SAFETY: as above.
        let raw = unsafe { p.read_volatile() };
        Some(WaitFailure {
            kind: match code {
                FAIL_LENGTH => FailureKind::LengthMismatch,
                FAIL_MISMATCH => FailureKind::Mismatch,
                _ => {
                    debug_assert_eq!(code, FAIL_TIMEOUT);
                    FailureKind::Timeout
                }
            },
            op: WaitOp::from_code(raw.op),
            peer: raw.peer as i32,
            signal: raw.signal,
            index: raw.index,
            seq: raw.seq,
            want: raw.want,
            seen: raw.seen,
            waited: Duration::from_nanos(raw.waited_ns),
        })
    }

    /// `Err` with the recorded failure as `owner` words it on PE `me`, `Ok` if there is none.
    pub fn check(&self, me: i32, owner: &dyn FailureText) -> Result<()> {
        match self.failure() {
            Some(f) => Err(owner.error(&f, me)),
            None => Ok(()),
        }
    }
}

impl Drop for StatusRecord {
    fn drop(&mut self) {
        // Kernels may still hold the address: let them finish (their waits are bounded).
        let _ = self.ctx.bind_to_thread();
        let _ = self.ctx.synchronize();
        // SAFETY: allocated by malloc_host in new, freed once.
        let _ = unsafe { cudarc::driver::result::free_host(self.host.as_ptr().cast()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rust_record_has_the_device_layout() {
        // SAFETY: returns a constant.
        let device = unsafe { crate::sys::nvshmemrs_wait_status_size() };
        assert_eq!(std::mem::size_of::<RawStatus>(), device);
        assert_eq!(std::mem::size_of::<RawStatus>(), 72);
    }

    #[test]
    fn op_codes_match_the_device_headers() {
        let pairs = [
            (crate::sys::NVSHMEMRS_WAIT_OP_SEND, WaitOp::ChannelSend),
            (
                crate::sys::NVSHMEMRS_WAIT_OP_RECV_INTO,
                WaitOp::ChannelRecvInto,
            ),
            (crate::sys::NVSHMEMRS_WAIT_OP_RECV, WaitOp::ChannelRecv),
            (crate::sys::NVSHMEMRS_WAIT_OP_ALLREDUCE, WaitOp::Allreduce),
            (crate::sys::NVSHMEMRS_WAIT_OP_BARRIER, WaitOp::Barrier),
            (
                crate::sys::NVSHMEMRS_WAIT_OP_SIGNAL_WAIT,
                WaitOp::SignalWait,
            ),
        ];
        for (code, op) in pairs {
            assert_eq!(WaitOp::from_code(code as u64), op);
        }
        assert_eq!(crate::sys::NVSHMEMRS_FAIL_MISMATCH as u64, FAIL_MISMATCH);
    }
}
