//! The staging area of a workspace: symmetric memory through which a collective moves the
//! caller's own device memory ([`crate::core::outside`]), which peers cannot address.
//!
//! A call with an input or output outside the symmetric heap copies that input into the area
//! (cudaMemcpyAsync device to device, on the call's stream), runs the symmetric call on the
//! area, and copies the output back; symmetric buffers of the same call are used as they are.
//! The staged buffers lie in the area in the call's order, each at a multiple of
//! [`STAGING_ALIGN`] bytes ([`staging_layout`]): for an input and an output, the input at offset
//! 0 and the output after it. Grouped send/recv stages any number of buffers of any element
//! types ([`Staging::place`] on byte [`Span`]s); the pair form is built on the same placement.
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
//! - never at a call whose sizes differ between members (allgatherv, alltoallv), in which only
//!   some members take part (grouped send/recv), or whose team is smaller than the world: such
//!   a call refuses with [`crate::Error::StagingTooSmall`], which names the size to reserve.
//!
#![doc = include_str!("../../docs/staging.md")]

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

/// One buffer of a call as the area sees it, in bytes: where it is on this PE, whether it is
/// symmetric (used as it is) and, if it is the caller's own, which copies it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// Device address on this PE.
    pub addr: usize,
    /// Size in bytes.
    pub bytes: usize,
    /// True for symmetric memory, used in place; false for the caller's own, staged.
    pub symmetric: bool,
    /// Copied into the area before the call: an input it reads, or an output whose parts the
    /// call does not write are kept.
    pub copy_in: bool,
    /// Copied back after the call: an output it writes.
    pub copy_out: bool,
}

/// Which spans of a call take room in the area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Room {
    /// Every span, symmetric or not: every member of a call that may grow the area then needs
    /// the same, whichever of its buffers are its own.
    Every,
    /// The caller's own spans only (calls that never grow the area: grouped send/recv).
    Own,
}

/// A call's spans placed in the area: the address the call uses for each (the caller's own for
/// a symmetric span), and the copies back it owes after the call ([`Placed::finish`]).
pub struct Placed<'s> {
    nv: &'s Nvshmem,
    addrs: Vec<usize>,
    /// (caller's memory, staged, bytes) to copy back after the call.
    copy_back: Vec<(usize, usize, usize)>,
}

/// One call's buffers as its symmetric call takes them: the caller's symmetric views, or views
/// of the area holding copies of its own memory; [`Staged::finish`] copies a staged output back.
pub struct Staged<'s, T: Element> {
    input: SymView<'s, T>,
    output: SymView<'s, T>,
    placed: Placed<'s>,
    /// The located buffers: their cudarc guards record cudarc's events when dropped, after the
    /// copies.
    _located: [Located<'s, T>; 2],
}

/// Offsets of buffers of `sizes` bytes laid out one after the other in the area, each at a
/// multiple of [`STAGING_ALIGN`], and the bytes they need in all (the last one not rounded).
pub fn staging_layout(sizes: impl IntoIterator<Item = usize>) -> Option<(Vec<usize>, usize)> {
    let mut offsets = Vec::new();
    let mut end = 0usize;
    for bytes in sizes {
        let at = end.checked_next_multiple_of(STAGING_ALIGN)?;
        offsets.push(at);
        end = at.checked_add(bytes)?;
    }
    Some((offsets, end))
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

    /// Device address of the area; where it has none, an aligned non-null address that only
    /// empty spans may take (nothing moves through it).
    pub(crate) fn base(&self) -> usize {
        self.buf
            .as_ref()
            .map_or(STAGING_ALIGN, |b| b.as_device_ptr() as usize)
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

    /// Places the `spans` of a call of `what` in the area, in order (those `room` names, each
    /// at a multiple of [`STAGING_ALIGN`]), growing it as `grow` allows, and enqueues the copies
    /// in on `stream`. All symmetric: nothing is copied or allocated.
    pub fn place(
        &mut self,
        nv: &'nv Nvshmem,
        what: &'static str,
        spans: &[Span],
        room: Room,
        grow: Grow,
        stream: &CudaStream,
    ) -> Result<Placed<'nv>> {
        let mut placed = Placed {
            nv,
            addrs: spans.iter().map(|s| s.addr).collect(),
            copy_back: Vec::new(),
        };
        if spans.iter().all(|s| s.symmetric) {
            return Ok(placed);
        }
        let takes_room = |s: &&Span| room == Room::Every || !s.symmetric;
        let sizes = spans.iter().filter(takes_room).map(|s| s.bytes);
        let (offsets, need) = staging_layout(sizes).ok_or_else(|| Error::SizeOverflow {
            what,
            detail: spans
                .iter()
                .filter(takes_room)
                .map(|s| s.bytes.to_string())
                .collect::<Vec<_>>()
                .join(" + "),
        })?;
        self.ensure(nv, what, need, grow, stream)?;
        nv.bind()?;
        // No area only when every staged span is empty: nothing moves through their addresses,
        // which stay non-null and aligned for any element type.
        let base = self.base();
        let mut offsets = offsets.into_iter();
        for (s, addr) in spans.iter().zip(&mut placed.addrs) {
            let at = if takes_room(&s) { offsets.next() } else { None };
            if s.symmetric {
                continue;
            }
            let staged = base + at.expect("every own span takes room");
            if s.copy_in {
                copy_dtod(staged, s.addr, s.bytes, stream)?;
            }
            if s.copy_out && s.bytes > 0 {
                placed.copy_back.push((s.addr, staged, s.bytes));
            }
            *addr = staged;
        }
        Ok(placed)
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
        let span = |l: &Located<'s, T>, copy_in, copy_out| Span {
            addr: l.addr(),
            bytes: l.num_bytes(),
            symmetric: l.sym().is_some(),
            copy_in,
            copy_out,
        };
        let [input, output] = &located;
        let spans = [span(input, io.read, false), span(output, io.keep, io.write)];
        // Room for both sides whichever is the caller's own: every member then needs the same.
        let placed = self.place(nv, what, &spans, Room::Every, grow, stream)?;
        let view = |l: &Located<'s, T>, addr: usize| match l.sym() {
            Some(v) => v,
            // SAFETY: `l.len()` elements at `addr` inside the area (placed there, at a multiple
            // of STAGING_ALIGN: aligned for T; or, empty with no area, a non-null aligned
            // address nothing reads); the area stays until the workspace goes or the next
            // growth, both after this call's kernels (a drop synchronises first).
            None => unsafe {
                let ptr = NonNull::new(addr as *mut T).expect("placed addresses are not null");
                SymView::from_raw(ptr, l.len(), nv.stream())
            },
        };
        Ok(Staged {
            input: view(input, placed.addr(0)),
            output: view(output, placed.addr(1)),
            placed,
            _located: located,
        })
    }
}

impl Placed<'_> {
    /// The address the call uses for span `k`.
    pub fn addr(&self, k: usize) -> usize {
        self.addrs[k]
    }

    /// Enqueues the copies of the staged outputs back into the caller's memory on `stream`,
    /// after the call. The caller's cudarc guards must drop after this.
    pub fn finish(self, stream: &CudaStream) -> Result<()> {
        if self.copy_back.is_empty() {
            return Ok(());
        }
        self.nv.bind()?;
        for (dst, src, bytes) in self.copy_back {
            copy_dtod(dst, src, bytes, stream)?;
        }
        Ok(())
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
        self.placed.finish(stream)
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

    /// Bytes a call of `input` and `output` bytes needs (the output after the input, aligned).
    fn staging_need(input: usize, output: usize) -> Option<usize> {
        staging_layout([input, output]).map(|(_, need)| need)
    }

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
    fn buffers_lie_in_order_each_aligned() {
        assert_eq!(staging_layout([]), Some((vec![], 0)));
        assert_eq!(staging_layout([7]), Some((vec![0], 7)));
        assert_eq!(
            staging_layout([7, 0, 512, 1]),
            Some((vec![0, 256, 256, 768], 769))
        );
        assert_eq!(staging_layout([1, usize::MAX - 100]), None);
    }

    #[test]
    fn growth_rounds_up_to_a_power_of_two() {
        assert_eq!(grown_capacity(1), MIN_STAGING);
        assert_eq!(grown_capacity(MIN_STAGING + 1), 2 * MIN_STAGING);
        assert_eq!(grown_capacity(3 << 20), 4 << 20);
        assert_eq!(grown_capacity(usize::MAX), usize::MAX);
    }
}
