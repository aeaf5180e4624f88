//! The staging area of a workspace: symmetric memory through which a collective moves the
//! caller's own device memory ([`crate::core::outside`]), which peers cannot address.
//!
//! A call with an input or output outside the symmetric heap copies that input into the area
//! (cudaMemcpyAsync device to device, on the call's stream), runs the symmetric call on the
//! area, and copies the output back; symmetric buffers of the same call are used as they are.
//! The input goes at offset 0, the output at the next multiple of [`STAGING_ALIGN`] bytes.
//! The area is reused call after call, as one pair of symmetric buffers would be: the
//! collectives' own handshakes keep a peer from writing into it before this PE's next call has
//! started (after the previous copy out, in stream order).
//!
//! The area is symmetric, so it is (re)allocated collectively over the world, at the same call
//! on every PE:
//! - [`Staging::reserve`] (every collective's `reserve_staging`): every PE at the same point,
//!   with the same size.
//! - at a call that needs more than the area holds, when the call's sizes are the same on every
//!   member (allreduce, broadcast, reduce, allgather, reduce-scatter, alltoall) and the team is
//!   the world: the area grows to the need rounded up to a power of two, at least
//!   [`MIN_STAGING`]. Every member must then pass its own memory at the same calls (on either
//!   side), and the first call of a size must not be under graph capture
//!   ([`crate::Error::StagingDuringCapture`]).
//! - never at a call whose sizes differ between members (allgatherv, alltoallv) or whose team is
//!   smaller than the world: such a call refuses with [`crate::Error::StagingTooSmall`], which
//!   names the size to reserve.

use crate::core::buffer::{SymView, SymmetricBuffer};
use crate::core::element::Element;
use crate::core::error::{Error, Result};
use crate::core::outside::Located;
use crate::core::runtime::Nvshmem;
use crate::core::stream::is_capturing;
use cudarc::driver::CudaStream;
use std::ptr::NonNull;

/// Alignment of the staged input and output in the area (bytes).
pub const STAGING_ALIGN: usize = 256;
/// Smallest area a call grows to (bytes).
pub const MIN_STAGING: usize = 64 << 10;

/// How a call uses its buffers on this PE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StageIo {
    /// Its kernels read the input here (broadcast: at the root only).
    pub read: bool,
    /// Its kernels write the output here (reduce: at the root only).
    pub write: bool,
    /// Its kernels may write only parts of the output (allgatherv, alltoallv): the staged
    /// output starts as a copy of the caller's, so what no part covers comes back unchanged.
    pub keep: bool,
}

impl StageIo {
    /// Reads the whole input, writes the whole output.
    pub const BOTH: StageIo = StageIo {
        read: true,
        write: true,
        keep: false,
    };

    /// Reads the whole input, writes parts of the output, the rest kept where `keep`
    /// (allgatherv, alltoallv).
    pub const fn parts(keep: bool) -> StageIo {
        StageIo {
            keep,
            ..StageIo::BOTH
        }
    }
}

/// Whether a call may grow the area when it needs more than the area holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grow {
    /// Every member stages the same sizes at this call: grow (collectively).
    Agreed,
    /// Refuse, saying why the call cannot grow it.
    Refuse(&'static str),
}

/// The area (see the module documentation).
#[derive(Default)]
pub struct Staging<'nv> {
    buf: Option<SymmetricBuffer<'nv, u8>>,
}

/// One call's buffers as its symmetric call takes them: the caller's symmetric views, or views
/// of the area holding copies of its own memory; [`Staged::finish`] copies a staged output back.
pub struct Staged<'s, T: Element> {
    nv: &'s Nvshmem,
    input: SymView<'s, T>,
    output: SymView<'s, T>,
    /// (caller's output, staged output, bytes) to copy back after the call.
    copy_back: Option<(usize, usize, usize)>,
    /// The located buffers: their cudarc guards record cudarc's events when dropped, after the
    /// copies.
    _located: [Located<'s, T>; 2],
}

/// Bytes a call of `input` and `output` bytes needs (the output after the input, aligned).
pub fn staging_need(input: usize, output: usize) -> Option<usize> {
    input
        .checked_next_multiple_of(STAGING_ALIGN)?
        .checked_add(output)
}

/// What a call that needs `need` bytes grows the area to.
pub fn grown_capacity(need: usize) -> usize {
    need.checked_next_power_of_two()
        .unwrap_or(need)
        .max(MIN_STAGING)
}

impl<'nv> Staging<'nv> {
    /// Bytes the area holds.
    pub fn capacity(&self) -> usize {
        self.buf.as_ref().map_or(0, |b| b.num_bytes())
    }

    /// Makes the area hold at least `bytes` (reallocated if it holds less: the old area is freed
    /// first, after the device's queued work). Collective over the world: every PE at the same
    /// point with the same `bytes`.
    pub fn reserve(&mut self, nv: &'nv Nvshmem, bytes: usize) -> Result<()> {
        if bytes <= self.capacity() {
            return Ok(());
        }
        self.buf = None;
        self.buf = Some(nv.alloc_aligned::<u8>(bytes, STAGING_ALIGN)?);
        Ok(())
    }

    /// Makes the area hold `need` bytes for a call of `what`, growing it as `grow` allows.
    fn ensure(
        &mut self,
        nv: &'nv Nvshmem,
        what: &'static str,
        need: usize,
        grow: Grow,
        stream: &CudaStream,
    ) -> Result<()> {
        let has = self.capacity();
        if need <= has {
            return Ok(());
        }
        if let Grow::Refuse(why) = grow {
            return Err(Error::StagingTooSmall {
                what,
                needs: need,
                has,
                why,
            });
        }
        if is_capturing(stream) {
            return Err(Error::StagingDuringCapture {
                what,
                needs: need,
                has,
            });
        }
        let bytes = grown_capacity(need);
        log::debug!("{what}: staging area grows from {has} to {bytes} bytes");
        self.reserve(nv, bytes)
    }

    /// Stages `input` and `output` of a call of `what` as `io` says (module documentation),
    /// enqueuing the copies in on `stream`. Both symmetric: nothing is copied or allocated.
    pub(crate) fn stage<'s, T: Element>(
        &mut self,
        nv: &'nv Nvshmem,
        what: &'static str,
        located: [Located<'s, T>; 2],
        io: StageIo,
        grow: Grow,
        stream: &CudaStream,
    ) -> Result<Staged<'s, T>>
    where
        'nv: 's,
    {
        let [input, output] = &located;
        if let (Some(i), Some(o)) = (input.sym(), output.sym()) {
            return Ok(Staged {
                nv,
                input: i,
                output: o,
                copy_back: None,
                _located: located,
            });
        }
        let (in_bytes, out_bytes) = (input.num_bytes(), output.num_bytes());
        // Room for both sides whichever is the caller's own: every member then needs the same.
        let need = staging_need(in_bytes, out_bytes).ok_or_else(|| Error::SizeOverflow {
            what,
            detail: format!("{in_bytes} + {out_bytes}"),
        })?;
        self.ensure(nv, what, need, grow, stream)?;
        nv.bind()?;
        let base = self
            .buf
            .as_ref()
            .map_or(NonNull::dangling(), |b| {
                NonNull::new(b.as_device_ptr()).expect("symmetric buffers are not null")
            })
            .cast::<T>();
        let out_offset = need - out_bytes;
        let copy = |dst, src, bytes| copy_dtod(dst, src, bytes, stream);
        let input_view = match input.sym() {
            Some(v) => v,
            None => {
                if io.read {
                    copy(base.as_ptr() as usize, input.addr(), in_bytes)?;
                }
                // SAFETY: offset 0 of the area, `in_bytes` of it; the area stays until the
                // workspace goes or the next growth, both after this call's kernels (a drop
                // synchronises first).
                unsafe { SymView::from_raw(base, input.len(), nv.stream()) }
            }
        };
        let mut copy_back = None;
        let output_view = match output.sym() {
            Some(v) => v,
            None => {
                let staged = base.as_ptr() as usize + out_offset;
                if io.keep {
                    copy(staged, output.addr(), out_bytes)?;
                }
                if io.write && out_bytes > 0 {
                    copy_back = Some((output.addr(), staged, out_bytes));
                }
                let ptr = NonNull::new(staged as *mut T).unwrap_or(base);
                // SAFETY: `out_bytes` from `out_offset`, inside the area (`need` bytes), a
                // multiple of STAGING_ALIGN: aligned for T. Lifetime as for the input.
                unsafe { SymView::from_raw(ptr, output.len(), nv.stream()) }
            }
        };
        Ok(Staged {
            nv,
            input: input_view,
            output: output_view,
            copy_back,
            _located: located,
        })
    }
}

impl<'s, T: Element> Staged<'s, T> {
    /// The input as the symmetric call takes it.
    pub fn input(&self) -> SymView<'s, T> {
        self.input
    }

    /// The output as the symmetric call takes it.
    pub fn output(&self) -> SymView<'s, T> {
        self.output
    }

    /// Enqueues the copy of a staged output back into the caller's memory on `stream`, after
    /// the symmetric call; then cudarc's events are recorded (the guards drop).
    pub fn finish(self, stream: &CudaStream) -> Result<()> {
        if let Some((dst, src, bytes)) = self.copy_back {
            self.nv.bind()?;
            copy_dtod(dst, src, bytes, stream)?;
        }
        Ok(())
    }
}

/// Enqueues a copy of `bytes` from device address `src` to `dst` on `stream` (nothing for 0).
/// Both are spans of device memory of the bound context: a caller's checked span or the area
/// (which holds the call's need); the copy is ordered after the work queued there before.
fn copy_dtod(dst: usize, src: usize, bytes: usize, stream: &CudaStream) -> Result<()> {
    if bytes > 0 {
        // SAFETY: as the documentation says; stream-ordered.
        unsafe {
            cudarc::driver::result::memcpy_dtod_async(
                dst as u64,
                src as u64,
                bytes,
                stream.cu_stream(),
            )
        }?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_output_follows_the_input_aligned() {
        assert_eq!(staging_need(0, 100), Some(100));
        assert_eq!(staging_need(4, 100), Some(256 + 100));
        assert_eq!(staging_need(256, 4), Some(260));
        assert_eq!(staging_need(257, 0), Some(512));
        assert_eq!(staging_need(usize::MAX - 10, 1), None);
        assert_eq!(staging_need(256, usize::MAX), None);
    }

    #[test]
    fn growth_rounds_up_to_a_power_of_two() {
        assert_eq!(grown_capacity(1), MIN_STAGING);
        assert_eq!(grown_capacity(MIN_STAGING + 1), 2 * MIN_STAGING);
        assert_eq!(grown_capacity(3 << 20), 4 << 20);
        assert_eq!(grown_capacity(usize::MAX), usize::MAX);
    }
}
