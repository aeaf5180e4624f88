//! Stream-ordered RMA: the operation runs when `stream` reaches it, so it overlaps with host
//! work and orders with kernels on the same stream.

use crate::core::buffer::SymView;
use crate::core::deadline::timeout_ns;
use crate::core::element::Element;
use crate::core::error::Result;
use crate::core::result::cuda_check;
use crate::core::runtime::Nvshmem;
use crate::core::stream::raw_stream;
use crate::p2p::rma::{put_signal_args, same_len, single};
use crate::p2p::signal::{Cmp, SignalOp};
use crate::sys;
use cudarc::driver::CudaStream;
use std::os::raw::{c_int, c_void};

/// NVSHMEM's stream transfer calls: (dest, source, bytes, pe, stream).
type RawStreamTransfer =
    unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int, sys::cudaStream_t);

impl Nvshmem {
    /// Checks a transfer and hands it to one of NVSHMEM's `(dest, src, bytes, pe, stream)` calls.
    fn transfer_on_stream<T: Element>(
        &self,
        what: &'static str,
        dest: SymView<'_, T>,
        src: SymView<'_, T>,
        pe: i32,
        stream: &CudaStream,
        raw: RawStreamTransfer,
    ) -> Result<()> {
        let bytes = same_len(what, &dest, &src)?;
        self.check_pe(pe)?;
        self.bind()?;
        if bytes > 0 {
            // SAFETY: checked symmetric ranges, valid pe, live stream.
            unsafe {
                raw(
                    dest.as_device_ptr().cast(),
                    src.as_device_ptr().cast(),
                    bytes,
                    pe,
                    raw_stream(stream),
                )
            };
        }
        Ok(())
    }

    /// Stream-ordered [`Nvshmem::put`].
    pub fn put_on_stream<'a, 'b, T: Element>(
        &self,
        dest: impl Into<SymView<'a, T>>,
        src: impl Into<SymView<'b, T>>,
        pe: i32,
        stream: &CudaStream,
    ) -> Result<()> {
        let raw = sys::nvshmemx_putmem_on_stream;
        self.transfer_on_stream("put_on_stream", dest.into(), src.into(), pe, stream, raw)
    }

    /// Stream-ordered [`Nvshmem::get`].
    pub fn get_on_stream<'a, 'b, T: Element>(
        &self,
        dest: impl Into<SymView<'a, T>>,
        src: impl Into<SymView<'b, T>>,
        pe: i32,
        stream: &CudaStream,
    ) -> Result<()> {
        let raw = sys::nvshmemx_getmem_on_stream;
        self.transfer_on_stream("get_on_stream", dest.into(), src.into(), pe, stream, raw)
    }

    /// Stream-ordered put with signal: `signal` on `pe` is updated by `op(value)` after the data.
    #[allow(clippy::too_many_arguments)]
    pub fn put_signal_on_stream<'a, 'b, 'c, T: Element>(
        &self,
        dest: impl Into<SymView<'a, T>>,
        src: impl Into<SymView<'b, T>>,
        signal: impl Into<SymView<'c, u64>>,
        value: u64,
        op: SignalOp,
        pe: i32,
        stream: &CudaStream,
    ) -> Result<()> {
        let (dest, src) = (dest.into(), src.into());
        let what = ("put_signal", "put_signal: the signal");
        let (bytes, sig) = put_signal_args(self, what, &dest, &src, &signal.into(), pe)?;
        self.bind()?;
        // SAFETY: checked ranges, one-element signal, valid pe, live stream.
        unsafe {
            sys::nvshmemx_putmem_signal_on_stream(
                dest.as_device_ptr().cast(),
                src.as_device_ptr().cast(),
                bytes,
                sig,
                value,
                op.raw(),
                pe,
                raw_stream(stream),
            )
        };
        Ok(())
    }

    /// Makes `stream` wait (on the GPU, no host involvement) until this PE's
    /// `signal <cmp> value`, at most [`Nvshmem::timeout`]. A wait that runs out of time lets the
    /// stream go on, records the failure and marks the runtime's waits broken: it shows in
    /// [`Nvshmem::check`] (and every later barrier), so check before trusting data behind it.
    pub fn signal_wait_until_on_stream<'a>(
        &self,
        signal: impl Into<SymView<'a, u64>>,
        cmp: Cmp,
        value: u64,
        stream: &CudaStream,
    ) -> Result<()> {
        let sig = single("signal_wait_until_on_stream: the signal", &signal.into())?;
        self.bind()?;
        let waits = &self.waits;
        // SAFETY: one-element symmetric u64, the runtime's wait state and record, live stream.
        let code = unsafe {
            sys::nvshmemrs_signal_wait_on_stream(
                sig,
                cmp.raw(),
                value,
                -1,
                waits.state_ptr as *mut u64,
                waits.status.device_ptr() as *mut std::ffi::c_void,
                timeout_ns(self.timeout()),
                raw_stream(stream),
            )
        };
        cuda_check(code, "signal wait kernel launch")
    }
}
