//! Deadlines for waits on the GPU, so that a dead or misbehaving peer never hangs a stream.
//!
//! Kernels wait with `nvshmemrs_wait_ge` (device/deadline.cuh): a spin on the signal word bounded
//! by `%globaltimer`. A wait that runs out of time writes what it waited for into a
//! [`StatusRecord`], pinned host memory mapped into the device, and returns false so that its
//! kernel exits without moving data. The host reads the record at any time without
//! synchronising a stream ([`StatusRecord::failure`]) and turns it into a typed [`Error`].
//!
//! The timeout of such waits defaults to `NVSH_TIMEOUT_MS` ([`default_timeout`]).

use crate::error::{Error, Result};
use cudarc::driver::sys::{CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_PORTABLE};
use cudarc::driver::CudaContext;
use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The environment variable that sets the default timeout of waits, in milliseconds.
pub const TIMEOUT_ENV: &str = "NVSH_TIMEOUT_MS";

/// The default when `NVSH_TIMEOUT_MS` is not set: one minute.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(60_000);

/// The timeout of waits that are not given one: `NVSH_TIMEOUT_MS` (milliseconds, at least 1),
/// default 60000. A value that is not a positive whole number is an [`Error::InvalidEnv`].
pub fn default_timeout() -> Result<Duration> {
    match std::env::var(TIMEOUT_ENV) {
        Ok(v) => parse_timeout_ms(&v),
        Err(std::env::VarError::NotPresent) => Ok(DEFAULT_TIMEOUT),
        Err(std::env::VarError::NotUnicode(v)) => Err(invalid(&v.to_string_lossy())),
    }
}

/// Parses a `NVSH_TIMEOUT_MS` value: a positive whole number of milliseconds.
pub fn parse_timeout_ms(value: &str) -> Result<Duration> {
    match value.trim().parse::<u64>() {
        Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => Err(invalid(value)),
    }
}

fn invalid(value: &str) -> Error {
    Error::InvalidEnv {
        var: TIMEOUT_ENV,
        value: value.to_string(),
        expected: "a whole number of milliseconds >= 1 (e.g. 60000), or unset for 60000",
    }
}

/// A timeout as the device's wait takes it: nanoseconds, at least 1.
pub(crate) fn timeout_ns(timeout: Duration) -> u64 {
    u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX).max(1)
}

/// What a failed device-side wait was part of (NVSHMEMRS_OP_* in device/channel.h).
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
    /// A code this version does not know.
    Other(u64),
}

impl WaitOp {
    fn from_code(code: u64) -> WaitOp {
        match code {
            1 => WaitOp::ChannelSend,
            2 => WaitOp::ChannelRecvInto,
            3 => WaitOp::ChannelRecv,
            4 => WaitOp::Allreduce,
            5 => WaitOp::Barrier,
            6 => WaitOp::SignalWait,
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

/// The first failure a kernel recorded in a [`StatusRecord`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitFailure {
    pub kind: FailureKind,
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

impl WaitFailure {
    /// The typed error for this failure, seen on PE `me`.
    pub fn to_error(&self, me: i32) -> Error {
        let peer = self.peer;
        match self.kind {
            FailureKind::LengthMismatch => Error::MessageLength {
                pe: me,
                peer,
                seq: self.seq,
                sent: self.seen,
                expected: self.want,
            },
            FailureKind::Mismatch => Error::CollectiveMismatch {
                what: "allreduce",
                pe: me,
                peer,
                call: self.seq,
                mine: crate::allreduce::describe_header_field(self.index, self.want),
                theirs: crate::allreduce::describe_header_field(self.index, self.seen),
            },
            FailureKind::Timeout if self.op == WaitOp::Allreduce => Error::Timeout {
                what: format!(
                    "PE {peer}'s part of allreduce call {} on PE {me} ({} protocol): signal word \
                     {:#x} is {}, needs {}. PE {peer} is dead or did not make the same allreduce \
                     calls on this workspace in the same order. The workspace is broken now \
                     (later calls move nothing); a longer wait: NVSH_TIMEOUT_MS or \
                     Allreduce::set_timeout",
                    self.seq + 1,
                    allreduce_protocol(self.index),
                    self.signal,
                    self.seen,
                    self.want
                ),
                waited_ms: self.waited.as_millis(),
            },
            FailureKind::Timeout if self.op == WaitOp::Barrier => Error::Timeout {
                what: format!(
                    "PE {peer} to arrive at barrier {} (PE {me} waited): PE {peer} is dead or \
                     took another path; a longer wait: NVSH_TIMEOUT_MS or Nvshmem::set_timeout",
                    self.seq
                ),
                waited_ms: self.waited.as_millis(),
            },
            FailureKind::Timeout if self.op == WaitOp::SignalWait => Error::Timeout {
                what: format!(
                    "signal word {:#x} on PE {me} to reach {} (it is {}; \
                     signal_wait_until_on_stream): the PE that should signal it is dead or \
                     never did; a longer wait: NVSH_TIMEOUT_MS or Nvshmem::set_timeout",
                    self.signal, self.want, self.seen
                ),
                waited_ms: self.waited.as_millis(),
            },
            FailureKind::Timeout => {
                let (event, counterpart) = match self.op {
                    WaitOp::ChannelSend => (
                        format!(
                            "PE {peer} to free slot {} for message {} (PE {me}'s \
                             Channel::send)",
                            self.index, self.seq
                        ),
                        "Channel::recv_into or Channel::release",
                    ),
                    op => (
                        format!(
                            "message {} from PE {peer} in slot {} ({} on PE {me})",
                            self.seq,
                            self.index,
                            op.name()
                        ),
                        "Channel::send",
                    ),
                };
                Error::Timeout {
                    what: format!(
                        "{event}: signal word {:#x} is {}, needs {}; PE {peer} must make the \
                         matching {counterpart} on the same channel. The channel is broken now \
                         (its later kernels move nothing); a longer wait: NVSH_TIMEOUT_MS or \
                         Channel::set_timeout",
                        self.signal, self.seen, self.want
                    ),
                    waited_ms: self.waited.as_millis(),
                }
            }
        }
    }
}

/// Name of an allreduce kernel's algo code (device/allreduce.h) in messages.
fn allreduce_protocol(code: u64) -> &'static str {
    match code {
        0 => "one-shot",
        1 => "two-shot",
        2 => "ring",
        3 => "recursive doubling",
        4 => "low-latency one-shot",
        5 => "direct two-shot",
        6 => "push two-shot",
        _ => "unknown",
    }
}

/// `struct nvshmemrs_wait_status` (device/abi.h), as bindgen generates it.
type RawStatus = crate::sys::nvshmemrs_wait_status;

const FAIL_TIMEOUT: u64 = 1;
const FAIL_LENGTH: u64 = 2;
const FAIL_MISMATCH: u64 = 3;

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

    /// `Err` with the recorded failure as seen on PE `me`, `Ok` if there is none.
    pub fn check(&self, me: i32) -> Result<()> {
        match self.failure() {
            Some(f) => Err(f.to_error(me)),
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
    use crate::bootstrap::tests::ENV_LOCK;

    /// Runs `f` with NVSH_TIMEOUT_MS set to `value` (or unset), restoring it afterwards.
    fn with_timeout_env<R>(value: Option<&str>, f: impl FnOnce() -> R) -> R {
        let _guard = ENV_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        let saved = std::env::var_os(TIMEOUT_ENV);
        match value {
            Some(v) => std::env::set_var(TIMEOUT_ENV, v),
            None => std::env::remove_var(TIMEOUT_ENV),
        }
        let out = f();
        match saved {
            Some(v) => std::env::set_var(TIMEOUT_ENV, v),
            None => std::env::remove_var(TIMEOUT_ENV),
        }
        out
    }

    #[test]
    fn timeouts_parse_as_positive_milliseconds() {
        assert_eq!(parse_timeout_ms("250").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_timeout_ms(" 60000 ").unwrap(), DEFAULT_TIMEOUT);
        for bad in [
            "",
            "0",
            "-5",
            "1.5",
            "10s",
            "ten",
            "99999999999999999999999",
        ] {
            let err = parse_timeout_ms(bad).unwrap_err();
            assert!(
                matches!(err, Error::InvalidEnv { var: TIMEOUT_ENV, ref value, .. } if value == bad),
                "{bad:?}: {err:?}"
            );
            assert!(err.to_string().contains("NVSH_TIMEOUT_MS"), "{err}");
        }
    }

    #[test]
    fn default_timeout_comes_from_the_environment() {
        assert_eq!(
            with_timeout_env(None, default_timeout).unwrap(),
            DEFAULT_TIMEOUT
        );
        let set = with_timeout_env(Some("1500"), default_timeout);
        assert_eq!(set.unwrap(), Duration::from_millis(1500));
        let bad = with_timeout_env(Some("soon"), default_timeout).unwrap_err();
        assert!(bad.to_string().contains("\"soon\""), "{bad}");
    }

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
            (crate::sys::NVSHMEMRS_OP_SEND, WaitOp::ChannelSend),
            (crate::sys::NVSHMEMRS_OP_RECV_INTO, WaitOp::ChannelRecvInto),
            (crate::sys::NVSHMEMRS_OP_RECV, WaitOp::ChannelRecv),
            (crate::sys::NVSHMEMRS_OP_ALLREDUCE, WaitOp::Allreduce),
            (crate::sys::NVSHMEMRS_OP_BARRIER, WaitOp::Barrier),
            (crate::sys::NVSHMEMRS_OP_SIGNAL_WAIT, WaitOp::SignalWait),
        ];
        for (code, op) in pairs {
            assert_eq!(WaitOp::from_code(code as u64), op);
        }
        assert_eq!(crate::sys::NVSHMEMRS_FAIL_MISMATCH as u64, FAIL_MISMATCH);
    }

    #[test]
    fn device_timeouts_are_at_least_a_nanosecond() {
        assert_eq!(timeout_ns(Duration::ZERO), 1);
        assert_eq!(timeout_ns(Duration::from_millis(3)), 3_000_000);
        assert_eq!(timeout_ns(Duration::MAX), u64::MAX);
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
        let err = f.to_error(1);
        match &err {
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
        assert!(send.to_error(0).to_string().contains("PE 3 to free slot 1"));
        let ar = WaitFailure {
            op: WaitOp::Allreduce,
            index: 5,
            seq: 41,
            ..f.clone()
        };
        let text = ar.to_error(0).to_string();
        assert!(
            text.contains("PE 3's part of allreduce call 42 on PE 0")
                && text.contains("direct two-shot")
                && text.contains("NVSH_TIMEOUT_MS"),
            "{text}"
        );
        let barrier = WaitFailure {
            op: WaitOp::Barrier,
            ..f.clone()
        };
        assert!(barrier
            .to_error(0)
            .to_string()
            .contains("PE 3 to arrive at barrier 5"));
        let len = WaitFailure {
            kind: FailureKind::LengthMismatch,
            want: 11,
            seen: 10,
            ..f
        };
        assert!(matches!(
            len.to_error(1),
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
