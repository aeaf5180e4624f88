//! Host-initiated RMA: put, get, put-with-signal, signal waits and 64-bit atomics. Every length
//! and PE is checked before NVSHMEM sees it.
//!
//! Completion follows NVSHMEM: a blocking put returns when the source may be reused, and the
//! data is delivered at the latest at the next [`Nvshmem::quiet`] (or barrier); non-blocking
//! (`_nbi`) calls may still read the source until then.

use crate::core::buffer::SymView;
use crate::core::element::{Atomic64, Element};
use crate::core::error::{Error, Result};
use crate::core::result::cuda_check;
use crate::core::runtime::Nvshmem;
use crate::core::stream::raw_stream;
use crate::p2p::signal::{Cmp, SignalOp};
use crate::sys;
use cudarc::driver::DevicePtr;
use std::os::raw::{c_int, c_void};
use std::time::{Duration, Instant};

/// NVSHMEM's host transfer calls: (dest, source, bytes, pe).
type RawTransfer = unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int);

/// Checks that two views have the same length and returns it in bytes.
pub(crate) fn same_len<T: Element>(
    what: &'static str,
    dest: &SymView<T>,
    src: &SymView<T>,
) -> Result<usize> {
    if dest.len() != src.len() {
        return Err(Error::LengthMismatch {
            what,
            dest: dest.len(),
            src: src.len(),
        });
    }
    Ok(dest.num_bytes())
}

/// Checks that a signal or atomic target is exactly one element.
pub(crate) fn single<T: Element>(what: &'static str, view: &SymView<T>) -> Result<*mut T> {
    if view.len() != 1 {
        return Err(Error::LengthMismatch {
            what,
            dest: view.len(),
            src: 1,
        });
    }
    Ok(view.as_device_ptr())
}

/// Checks a put-with-signal: equal lengths, a one-element signal, a valid PE. Returns the bytes
/// to move and the signal word.
pub(crate) fn put_signal_args<T: Element>(
    nv: &Nvshmem,
    (what, signal_what): (&'static str, &'static str),
    dest: &SymView<T>,
    src: &SymView<T>,
    signal: &SymView<u64>,
    pe: i32,
) -> Result<(usize, *mut u64)> {
    let bytes = same_len(what, dest, src)?;
    let sig = single(signal_what, signal)?;
    nv.check_pe(pe)?;
    Ok((bytes, sig))
}

impl Nvshmem {
    /// Checks a transfer and hands it to one of NVSHMEM's `(dest, src, bytes, pe)` calls.
    fn transfer<T: Element>(
        &self,
        what: &'static str,
        dest: SymView<'_, T>,
        src: SymView<'_, T>,
        pe: i32,
        raw: RawTransfer,
    ) -> Result<()> {
        let bytes = same_len(what, &dest, &src)?;
        self.check_pe(pe)?;
        self.bind()?;
        if bytes > 0 {
            // SAFETY: both ranges are symmetric, checked to hold `bytes`; pe is valid.
            unsafe {
                raw(
                    dest.as_device_ptr().cast(),
                    src.as_device_ptr().cast(),
                    bytes,
                    pe,
                )
            };
        }
        Ok(())
    }

    /// Copies `src` (this PE) into `dest` on `pe`; returns when `src` may be reused.
    pub fn put<'a, 'b, T: Element>(
        &self,
        dest: impl Into<SymView<'a, T>>,
        src: impl Into<SymView<'b, T>>,
        pe: i32,
    ) -> Result<()> {
        self.transfer("put", dest.into(), src.into(), pe, sys::nvshmem_putmem)
    }

    /// Like [`Nvshmem::put`] but may return before `src` is read; complete with `quiet`.
    pub fn put_nbi<'a, 'b, T: Element>(
        &self,
        dest: impl Into<SymView<'a, T>>,
        src: impl Into<SymView<'b, T>>,
        pe: i32,
    ) -> Result<()> {
        self.transfer(
            "put_nbi",
            dest.into(),
            src.into(),
            pe,
            sys::nvshmem_putmem_nbi,
        )
    }

    /// Copies `src` on `pe` into `dest` on this PE; returns when the data has arrived.
    pub fn get<'a, 'b, T: Element>(
        &self,
        dest: impl Into<SymView<'a, T>>,
        src: impl Into<SymView<'b, T>>,
        pe: i32,
    ) -> Result<()> {
        self.transfer("get", dest.into(), src.into(), pe, sys::nvshmem_getmem)
    }

    /// Like [`Nvshmem::get`] but may return before the data arrives; complete with `quiet`.
    pub fn get_nbi<'a, 'b, T: Element>(
        &self,
        dest: impl Into<SymView<'a, T>>,
        src: impl Into<SymView<'b, T>>,
        pe: i32,
    ) -> Result<()> {
        self.transfer(
            "get_nbi",
            dest.into(),
            src.into(),
            pe,
            sys::nvshmem_getmem_nbi,
        )
    }

    /// Puts `src` into `dest` on `pe`, then updates `signal` on `pe` with `op(value)`; the
    /// signal update becomes visible only after the data. Returns when both are issued and
    /// `src` may be reused (NVSHMEM's host API has only the stream form: this one runs it on
    /// the runtime's stream and waits).
    pub fn put_signal<'a, 'b, 'c, T: Element>(
        &self,
        dest: impl Into<SymView<'a, T>>,
        src: impl Into<SymView<'b, T>>,
        signal: impl Into<SymView<'c, u64>>,
        value: u64,
        op: SignalOp,
        pe: i32,
    ) -> Result<()> {
        self.put_signal_on_stream(dest, src, signal, value, op, pe, self.stream())?;
        self.stream().synchronize()?;
        Ok(())
    }

    /// Reads this PE's signal word.
    pub fn signal_fetch<'a>(&self, signal: impl Into<SymView<'a, u64>>) -> Result<u64> {
        let sig = single("signal_fetch: the signal", &signal.into())?;
        // SAFETY: a one-element symmetric u64.
        Ok(unsafe { sys::nvshmem_signal_fetch(sig) })
    }

    /// Waits on the host until this PE's `signal <cmp> value`, polling; returns the signal's
    /// value. Fails with [`Error::Timeout`] after `timeout` (a dead peer never hangs the caller).
    pub fn signal_wait_until<'a>(
        &self,
        signal: impl Into<SymView<'a, u64>>,
        cmp: Cmp,
        value: u64,
        timeout: Duration,
    ) -> Result<u64> {
        let signal = signal.into();
        single("signal_wait_until: the signal", &signal)?;
        let start = Instant::now();
        let mut pause = Duration::from_micros(1);
        loop {
            let now = self.signal_fetch(signal)?;
            if cmp.holds(now, value) {
                return Ok(now);
            }
            if start.elapsed() >= timeout {
                // A peer that never signals is a failed peer, as for the device waits.
                return Err(self.note(Error::Timeout {
                    what: format!(
                        "signal at {:p} to become {cmp:?} {value} (it is {now})",
                        signal.as_device_ptr()
                    ),
                    waited_ms: start.elapsed().as_millis(),
                }));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_micros(100));
        }
    }

    /// Atomically adds `value` to `target` on `pe`, returning the previous value.
    pub fn atomic_fetch_add<'a, T: Atomic64>(
        &self,
        target: impl Into<SymView<'a, T>>,
        value: T,
        pe: i32,
    ) -> Result<T> {
        let dest = single("atomic_fetch_add: the target", &target.into())?;
        self.check_pe(pe)?;
        // NVSHMEM's host AMOs are not implemented over P2P: one device thread does it.
        // Two's complement makes the u64 form right for i64 too.
        let old = self.run_atomic(|old, stream| {
            // SAFETY: a one-element symmetric 64-bit target, a valid pe, device scratch `old`.
            unsafe {
                sys::nvshmemrs_atomic_fetch_add_u64(dest.cast(), value.to_bits(), pe, old, stream)
            }
        })?;
        Ok(T::from_bits(old))
    }

    /// Atomically sets `target` on `pe` to `value` if it equals `cond`; returns the previous
    /// value (equal to `cond` when the swap happened).
    pub fn atomic_compare_swap<'a, T: Atomic64>(
        &self,
        target: impl Into<SymView<'a, T>>,
        cond: T,
        value: T,
        pe: i32,
    ) -> Result<T> {
        let dest = single("atomic_compare_swap: the target", &target.into())?;
        self.check_pe(pe)?;
        let old = self.run_atomic(|old, stream| {
            // SAFETY: as in atomic_fetch_add.
            unsafe {
                sys::nvshmemrs_atomic_compare_swap_u64(
                    dest.cast(),
                    cond.to_bits(),
                    value.to_bits(),
                    pe,
                    old,
                    stream,
                )
            }
        })?;
        Ok(T::from_bits(old))
    }

    /// Launches an atomic kernel that writes the old value into device scratch, and reads it.
    fn run_atomic(&self, launch: impl FnOnce(*mut u64, sys::cudaStream_t) -> i32) -> Result<u64> {
        self.bind()?;
        let stream = self.stream();
        // Same stream for the kernel and the read-back, so the write is ordered before the read.
        let (old, sync) = self.atomic_scratch().device_ptr(stream);
        let code = launch(old as *mut u64, raw_stream(stream));
        drop(sync);
        cuda_check(code, "atomic kernel launch")?;
        Ok(stream.clone_dtoh(self.atomic_scratch())?[0])
    }
}
