//! Device-initiated puts (kernels in `device/core/device_put.cu`), stream-ordered. The GPU moves the
//! data itself: no host round trip, and the same call works to PEs on other nodes.

use crate::core::buffer::SymView;
use crate::core::element::Element;
use crate::core::error::Result;
use crate::core::result::cuda_check;
use crate::core::runtime::Nvshmem;
use crate::core::stream::raw_stream;
use crate::p2p::rma::{put_signal_args, same_len};
use crate::p2p::signal::SignalOp;
use crate::sys;
use cudarc::driver::CudaStream;

/// Grid of a put kernel: `blocks` blocks of `threads` threads, each block one chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchShape {
    /// Thread blocks in the grid.
    pub blocks: u32,
    /// Threads per block.
    pub threads: u32,
}

impl LaunchShape {
    /// The shape used for a put of `bytes`: one block per 16 KiB up to 64 blocks, wider blocks
    /// for larger messages. Chosen from `nvsh bench put --sweep` on two NVLinked H200
    /// (2026-11-22): 64 blocks beat 32 from 1 MiB up (per call at 16 MiB: 64x512 351.7 GB/s,
    /// 32x1024 343.2), more than 64 gained nothing, and 1024 threads help only from 32 MiB.
    pub fn for_bytes(bytes: usize) -> LaunchShape {
        const CHUNK: usize = 16 << 10;
        let blocks = bytes.div_ceil(CHUNK).clamp(1, 64) as u32;
        let threads = match bytes {
            b if b < 256 << 10 => 256,
            b if b < 32 << 20 => 512,
            _ => 1024,
        };
        LaunchShape { blocks, threads }
    }
}

impl std::fmt::Display for LaunchShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.blocks, self.threads)
    }
}

/// When a device-initiated put's data is guaranteed to have arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// At the next quiet (e.g. [`Nvshmem::quiet_on_stream`]) or barrier: fastest.
    AtQuiet,
    /// When the kernel completes (each block ends with a quiet).
    InKernel,
}

impl Nvshmem {
    /// Device-initiated put of `src` (this PE) into `dest` on `pe`, in stream order, with the
    /// launch shape chosen for its size. The data has arrived after the next quiet on the
    /// stream. Returns the shape used.
    pub fn put_device<'a, 'b, T: Element>(
        &self,
        dest: impl Into<SymView<'a, T>>,
        src: impl Into<SymView<'b, T>>,
        pe: i32,
        stream: &CudaStream,
    ) -> Result<LaunchShape> {
        let (dest, src) = (dest.into(), src.into());
        let shape = LaunchShape::for_bytes(dest.num_bytes());
        self.put_device_with(dest, src, pe, shape, Completion::AtQuiet, stream)?;
        Ok(shape)
    }

    /// [`Nvshmem::put_device`] with an explicit launch shape and completion.
    pub fn put_device_with<'a, 'b, T: Element>(
        &self,
        dest: impl Into<SymView<'a, T>>,
        src: impl Into<SymView<'b, T>>,
        pe: i32,
        shape: LaunchShape,
        completion: Completion,
        stream: &CudaStream,
    ) -> Result<()> {
        let (dest, src) = (dest.into(), src.into());
        let bytes = same_len("put_device", &dest, &src)?;
        self.check_pe(pe)?;
        if bytes == 0 {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: checked symmetric ranges and pe; the kernel reads src and writes dest on pe.
        let code = unsafe {
            sys::nvshmemrs_put_block(
                dest.as_device_ptr().cast(),
                src.as_device_ptr().cast(),
                bytes,
                pe,
                shape.blocks.max(1) as i32,
                shape.threads as i32,
                (completion == Completion::InKernel) as i32,
                raw_stream(stream),
            )
        };
        cuda_check(code, "put kernel launch")
    }

    /// Device-initiated put with signal: `signal` on `pe` is updated by `op(value)` only after
    /// all of the data has landed, so the receiver can wait on the signal alone. With
    /// [`SignalOp::Add`] the transfer is split over up to `shape.blocks` blocks (each adds a share
    /// of `value`); with [`SignalOp::Set`] it runs in one block.
    #[allow(clippy::too_many_arguments)]
    pub fn put_signal_device<'a, 'b, 'c, T: Element>(
        &self,
        dest: impl Into<SymView<'a, T>>,
        src: impl Into<SymView<'b, T>>,
        signal: impl Into<SymView<'c, u64>>,
        value: u64,
        op: SignalOp,
        pe: i32,
        shape: LaunchShape,
        stream: &CudaStream,
    ) -> Result<()> {
        let (dest, src) = (dest.into(), src.into());
        let what = ("put_signal_device", "put_signal_device: the signal");
        let (bytes, sig) = put_signal_args(self, what, &dest, &src, &signal.into(), pe)?;
        self.bind()?;
        // SAFETY: as in put_device_with; the signal is one symmetric u64.
        let code = unsafe {
            sys::nvshmemrs_put_signal_block(
                dest.as_device_ptr().cast(),
                src.as_device_ptr().cast(),
                bytes,
                sig,
                value,
                op.raw(),
                pe,
                shape.blocks.max(1) as i32,
                shape.threads as i32,
                raw_stream(stream),
            )
        };
        cuda_check(code, "put-with-signal kernel launch")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_grow_with_size_and_cap_at_64_blocks() {
        let shape = |blocks, threads| LaunchShape { blocks, threads };
        assert_eq!(LaunchShape::for_bytes(4 << 10), shape(1, 256));
        assert_eq!(LaunchShape::for_bytes(64 << 10), shape(4, 256));
        assert_eq!(LaunchShape::for_bytes(1 << 20), shape(64, 512));
        assert_eq!(LaunchShape::for_bytes(16 << 20), shape(64, 512));
        assert_eq!(LaunchShape::for_bytes(256 << 20), shape(64, 1024));
    }
}
