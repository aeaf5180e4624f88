//! Allreduce over symmetric memory, built from device-initiated puts and signals (kernels in
//! `device/allreduce.cu`). Works where peers are only reachable through NVSHMEM (other nodes);
//! direct NVLink stores are a checked fast path inside the kernels.
//!
//! An [`Allreduce`] owns a workspace on the symmetric heap (allocated collectively) and a
//! sequence counter: signals carry ever-growing values, so calls can be issued back to back on a
//! stream with no barrier in between.

use crate::buffer::{SymView, SymmetricBuffer};
use crate::element::{Dtype, Element};
use crate::error::{Error, Result};
use crate::ordering::raw_stream;
use crate::result::cuda_check;
use crate::runtime::Nvshmem;
use crate::sys;
use cudarc::driver::CudaStream;

/// The reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum ReduceOp {
    Sum = 0,
    Prod = 1,
    Min = 2,
    Max = 3,
    /// Sum divided by the PE count. For integer types the division truncates toward zero
    /// (as Rust's `/`), after summing in the type itself (wrapping on overflow).
    Avg = 4,
}

/// The algorithm; `Auto` picks one by message size, dtype and PE count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AllreduceAlgo {
    Auto,
    /// Every PE pushes its whole input to every peer, each reduces locally (small messages).
    OneShot,
    /// Reduce-scatter by puts, then all-gather by puts (medium and large messages).
    TwoShot,
}

/// Types an allreduce can reduce (every [`Element`] but u8).
pub trait Reducible: Element {}
impl Reducible for f32 {}
impl Reducible for f64 {}
impl Reducible for half::f16 {}
impl Reducible for half::bf16 {}
impl Reducible for i32 {}
impl Reducible for i64 {}
impl Reducible for u32 {}
impl Reducible for u64 {}

/// An allreduce workspace and its sequence state. Create it on every PE at the same point
/// (the allocation is collective), then call [`Allreduce::run`] on every PE with the same
/// lengths, op and algorithm, in the same order.
pub struct Allreduce<'nv> {
    nv: &'nv Nvshmem,
    /// Receive slots: 2 parities x n_pes slots of `slot_bytes`.
    scratch: SymmetricBuffer<'nv, u8>,
    /// Arrival counters: 2 phases x 2 parities x n_pes words, only ever growing.
    flags: SymmetricBuffer<'nv, u64>,
    slot_bytes: usize,
    /// Steps issued so far (each step uses parity step % 2).
    steps: u64,
    /// Per phase (scatter/one-shot, gather) and parity: what every peer's counter reaches once
    /// the last issued step has fully arrived. All PEs compute the same values.
    expected: [[u64; 2]; 2],
}

impl Nvshmem {
    /// A workspace whose receive slots hold `slot_bytes` each (2 x n_pes of them). Larger
    /// messages are reduced in segments of that size. Collective.
    pub fn allreduce_workspace(&self, slot_bytes: usize) -> Result<Allreduce<'_>> {
        let slot_bytes = slot_bytes.max(4096).next_multiple_of(256);
        let n = self.n_pes() as usize;
        let scratch = self.alloc::<u8>(2 * n * slot_bytes)?;
        let flags = self.alloc_zeroed::<u64>(2 * 2 * n)?;
        self.barrier_all();
        Ok(Allreduce {
            nv: self,
            scratch,
            flags,
            slot_bytes,
            steps: 0,
            expected: [[0; 2]; 2],
        })
    }
}

impl<'nv> Allreduce<'nv> {
    /// Bytes of one receive slot.
    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    /// The algorithm `Auto` picks for `bytes` of `dtype` on this job. Measured on two NVLinked
    /// H200 (2026-11-22, `nvsh bench allreduce`): one-shot is faster up to 2 MiB (18.7 vs 20.6
    /// us at 2 MiB f32), two-shot from 4 MiB (27.8 vs 29.0 us).
    pub fn choose(&self, bytes: usize, _dtype: Dtype) -> AllreduceAlgo {
        if bytes <= 2 << 20 {
            AllreduceAlgo::OneShot
        } else {
            AllreduceAlgo::TwoShot
        }
    }

    /// `output = op(input of every PE)`, element-wise, in stream order. `input` and `output`
    /// are symmetric, of equal length, and may be the same view (in place). Returns the
    /// algorithm used.
    pub fn run<'a, 'b, T: Reducible>(
        &mut self,
        input: impl Into<SymView<'a, T>>,
        output: impl Into<SymView<'b, T>>,
        op: ReduceOp,
        algo: AllreduceAlgo,
        stream: &CudaStream,
    ) -> Result<AllreduceAlgo> {
        let (input, output) = (input.into(), output.into());
        if input.len() != output.len() {
            return Err(Error::LengthMismatch {
                what: "allreduce",
                dest: output.len(),
                src: input.len(),
            });
        }
        let algo = match algo {
            AllreduceAlgo::Auto => self.choose(input.num_bytes(), T::DTYPE),
            a => a,
        };
        let count = input.len();
        let elem = std::mem::size_of::<T>();
        // Segments: one-shot sends a whole segment per slot, two-shot one chunk per slot.
        let per16 = (16 / elem).max(1);
        let slot_elems = self.slot_bytes / elem / per16 * per16;
        let n = self.nv.n_pes() as usize;
        let segment = match algo {
            AllreduceAlgo::OneShot => slot_elems,
            _ => slot_elems * n,
        };
        let mut start = 0;
        while start < count {
            let len = segment.min(count - start);
            let (seg_in, seg_out) = (
                input.view(start..start + len)?,
                output.view(start..start + len)?,
            );
            self.step::<T>(algo, op, seg_in, seg_out, stream)?;
            start += len;
        }
        Ok(algo)
    }

    /// Launches one segment's kernel with the next parity and counter targets.
    fn step<T: Reducible>(
        &mut self,
        algo: AllreduceAlgo,
        op: ReduceOp,
        input: SymView<'_, T>,
        output: SymView<'_, T>,
        stream: &CudaStream,
    ) -> Result<()> {
        let n = self.nv.n_pes();
        let bytes = input.num_bytes();
        let parity = (self.steps % 2) as usize;
        let per_block = |bytes: usize, unit: usize, max: usize| bytes.div_ceil(unit).clamp(1, max);
        let (scratch, flags) = (self.scratch.as_device_ptr(), self.flags.as_device_ptr());
        let code = match algo {
            AllreduceAlgo::OneShot => {
                let blocks = per_block(bytes, 16 << 10, 32);
                self.expected[0][parity] += blocks as u64;
                // SAFETY: symmetric input/output of `len` elements, the workspace's own scratch
                // and counters, and counter targets every PE computes alike.
                unsafe {
                    sys::nvshmemrs_allreduce_oneshot(
                        T::DTYPE as i32,
                        op as i32,
                        input.as_device_ptr().cast(),
                        output.as_device_ptr().cast(),
                        input.len(),
                        scratch.cast(),
                        self.slot_bytes,
                        flags,
                        parity as i32,
                        self.expected[0][parity],
                        n,
                        self.nv.my_pe(),
                        blocks as i32,
                        512,
                        raw_stream(stream),
                    )
                }
            }
            _ => {
                let blocks = per_block(bytes / n as usize, 32 << 10, 64);
                self.expected[0][parity] += blocks as u64;
                self.expected[1][parity] += blocks as u64;
                // SAFETY: as for one-shot.
                unsafe {
                    sys::nvshmemrs_allreduce_twoshot(
                        T::DTYPE as i32,
                        op as i32,
                        input.as_device_ptr().cast(),
                        output.as_device_ptr().cast(),
                        input.len(),
                        scratch.cast(),
                        self.slot_bytes,
                        flags,
                        parity as i32,
                        self.expected[0][parity],
                        self.expected[1][parity],
                        n,
                        self.nv.my_pe(),
                        blocks as i32,
                        512,
                        raw_stream(stream),
                    )
                }
            }
        };
        self.steps += 1;
        cuda_check(code, "allreduce kernel launch")
    }

    /// [`Allreduce::run`] with the result written over `buffer`.
    pub fn run_in_place<'a, T: Reducible>(
        &mut self,
        buffer: impl Into<SymView<'a, T>>,
        op: ReduceOp,
        algo: AllreduceAlgo,
        stream: &CudaStream,
    ) -> Result<AllreduceAlgo> {
        let buffer = buffer.into();
        self.run(buffer, buffer, op, algo, stream)
    }
}
