//! Running a call: locating and staging the buffers, the header exchange, the protocol and
//! launch shape of each kernel, and the hierarchical algorithm's flat steps.

use super::hier;
use super::meta::{header_meta, Protocol};
use super::settings::{low_latency_shape, parts, SLOT_BLOCKS_MAX};
use super::Allreduce;
use crate::coll::allreduce::algo::AllreduceAlgo;
use crate::coll::family::check_elementwise;
use crate::coll::op::{ReduceOp, Reducible};
use crate::core::buffer::SymView;
use crate::core::error::{Error, Result};
use crate::core::outside::{InBuf, Located, OutBuf};
use crate::core::result::cuda_check;
use crate::core::stream::is_capturing;
use crate::core::stream::raw_stream;
use crate::proto::staging::StageIo;
use crate::sys;
use cudarc::driver::CudaStream;
use std::time::Duration;

impl<'nv> Allreduce<'nv> {
    /// `output = op(input of every PE)`, element-wise, in stream order. `input` and `output`
    /// are of equal length (at least 1), and either the same range (in place) or not
    /// overlapping. Returns the algorithm used.
    ///
    /// Each buffer is a symmetric view or this PE's own device memory ([`InBuf`], [`OutBuf`]:
    /// a cudarc slice or view, or a raw pointer), the latter staged through the workspace's
    /// symmetric area (docs/staging.md): a device-to-device copy in before the
    /// reduction and one out after it, on `stream`. The area grows at the first call of a
    /// larger size (collectively: every member passes its own memory at the same calls) unless
    /// [`Allreduce::reserve_staging`] made it large enough.
    ///
    /// Every wait of the kernels has a deadline ([`Allreduce::set_timeout`]); a failure shows in
    /// [`Allreduce::check`] / [`Allreduce::sync`], and a call on a workspace that already failed
    /// returns that error at once.
    pub fn run<'a, 'b, T: Reducible>(
        &mut self,
        input: impl Into<InBuf<'a, T>>,
        output: impl Into<OutBuf<'b, T>>,
        op: ReduceOp,
        algo: AllreduceAlgo,
        stream: &CudaStream,
    ) -> Result<AllreduceAlgo> {
        let (input, mut output) = (input.into(), output.into());
        let located = self.ws.locate("allreduce", &input, &mut output, stream)?;
        self.run_located(located, op, algo, stream)
    }

    /// [`Allreduce::run`] on located buffers: checks, stages, reduces, copies a staged output
    /// back.
    fn run_located<T: Reducible>(
        &mut self,
        [i, o]: [Located<'_, T>; 2],
        op: ReduceOp,
        algo: AllreduceAlgo,
        stream: &CudaStream,
    ) -> Result<AllreduceAlgo> {
        check_elementwise("allreduce", &self.ws, &i, &o)?;
        let staged = self
            .ws
            .stage("allreduce", [i, o], StageIo::BOTH, true, stream)?;
        let algo = self.run_symmetric(staged.input(), staged.output(), op, algo, stream)?;
        staged.finish(stream)?;
        Ok(algo)
    }

    /// The reduction on checked symmetric views.
    fn run_symmetric<T: Reducible>(
        &mut self,
        input: SymView<'_, T>,
        output: SymView<'_, T>,
        op: ReduceOp,
        algo: AllreduceAlgo,
        stream: &CudaStream,
    ) -> Result<AllreduceAlgo> {
        let algo = match algo {
            AllreduceAlgo::Auto => {
                let bytes = input.num_bytes();
                let serves = op.reduces_in_steps(T::DTYPE);
                let first = hier::auto_first(self.env_algo, self.hier_min(), bytes, serves);
                match (first, self.tuned(bytes, T::DTYPE)) {
                    (Some(a), _) | (None, Some(a)) => a,
                    // Never while capturing: the tuning synchronises the stream.
                    (None, None) if self.online.is_some() && !is_capturing(stream) => {
                        self.tune_online(input, output, op, stream)?
                    }
                    (None, None) => self.table_choice(bytes, T::DTYPE),
                }
            }
            a => a,
        };
        if algo == AllreduceAlgo::Hierarchical {
            return self.run_hier(input, output, op, stream);
        }
        let rank = self.ws.begin_call()?;
        let count = input.len();
        let elem = std::mem::size_of::<T>();
        let protocol = self.protocol(algo, &input, &output);
        log::debug!(
            "allreduce call {}: {count} x {} {} by {} ({protocol:?})",
            self.ws.calls(),
            T::DTYPE.name(),
            op.name(),
            algo.name()
        );
        self.ws.exchange_header(
            self.args(rank, &input, &output).hdr,
            header_meta(T::DTYPE, op, algo, protocol),
            sys::NVSHMEMRS_WAIT_OP_ALLREDUCE,
            -1,
            stream,
        )?;
        if protocol != Protocol::Slots {
            // One launch for the whole message: no slots, so no segments.
            self.step::<T>(algo, protocol, op, rank, input, output, stream)?;
            return Ok(algo);
        }
        let per16 = (16 / elem).max(1);
        let slot_elems = self.slot_bytes / elem / per16 * per16;
        let segment = if algo.whole_segment_per_slot() {
            slot_elems
        } else {
            slot_elems * self.ws.n_pes() as usize
        };
        let mut start = 0;
        while start < count {
            let len = segment.min(count - start);
            let (seg_in, seg_out) = (
                input.view(start..start + len)?,
                output.view(start..start + len)?,
            );
            self.step::<T>(algo, protocol, op, rank, seg_in, seg_out, stream)?;
            start += len;
        }
        Ok(algo)
    }

    /// The hierarchical algorithm ([`hier`]), where this workspace has it.
    fn run_hier<T: Reducible>(
        &mut self,
        input: SymView<'_, T>,
        output: SymView<'_, T>,
        op: ReduceOp,
        stream: &CudaStream,
    ) -> Result<AllreduceAlgo> {
        self.ws.begin_call()?;
        let Some(h) = self.hier.as_mut() else {
            return Err(Error::CollectiveShape {
                what: "allreduce",
                detail: "the hierarchical algorithm needs a workspace over the world on several \
                         nodes in blocks of consecutive PEs (or NVSH_PRETEND_NODE_SIZE); pick a \
                         flat one (auto, oneshot, twoshot, ring, rd)"
                    .into(),
            });
        };
        log::debug!(
            "allreduce call {}: {} x {} {} by hier over {} nodes of {}",
            self.ws.calls(),
            input.len(),
            T::DTYPE.name(),
            op.name(),
            h.layout().nodes(),
            h.layout().size()
        );
        h.run(input, output, op, stream)?;
        Ok(AllreduceAlgo::Hierarchical)
    }

    /// The kernel arguments for `input` -> `output` on this PE.
    fn args<T: Reducible>(
        &self,
        rank: i32,
        input: &SymView<'_, T>,
        output: &SymView<'_, T>,
    ) -> sys::nvshmemrs_allreduce_args {
        sys::nvshmemrs_allreduce_args {
            hdr: sys::nvshmemrs_coll_header {
                input: input.as_device_ptr().cast(),
                output: output.as_device_ptr().cast(),
                count: input.len(),
                scratch: self.scratch.as_device_ptr().cast(),
                slot_bytes: self.slot_bytes,
                flags: self.flags.as_device_ptr(),
                ll_scratch: self.ll.as_device_ptr().cast(),
                ll_slot_bytes: self.ll_slot_bytes,
                direct_flags: self.direct_flags.as_device_ptr(),
                ..self.ws.header(rank)
            },
            rounds: 1,
        }
    }

    /// How a call moves its data: a two-shot takes a direct protocol (one launch over the peer
    /// mappings, no slots) where every member is mapped, the buffers are 16-byte aligned and
    /// the message is large enough; push from [`PUSH_MIN_ENV`] when not in place. Everything
    /// else goes through the receive slots.
    ///
    /// [`PUSH_MIN_ENV`]: super::PUSH_MIN_ENV
    fn protocol<T: Reducible>(
        &self,
        algo: AllreduceAlgo,
        input: &SymView<'_, T>,
        output: &SymView<'_, T>,
    ) -> Protocol {
        let (i, o) = (
            input.as_device_ptr() as usize,
            output.as_device_ptr() as usize,
        );
        let bytes = input.num_bytes();
        let direct = algo == AllreduceAlgo::TwoShot
            && self.ws.all_mapped()
            && (i | o) % 16 == 0
            && self.ws.n_pes() as u32 <= sys::NVSHMEMRS_ALLREDUCE_DIRECT_MAX_PES
            && bytes >= self.direct_shape.min_bytes;
        if !direct {
            Protocol::Slots
        } else if self.ws.n_pes() >= 2 && i != o && bytes >= self.direct_shape.push_min {
            Protocol::Push
        } else {
            Protocol::Pull
        }
    }

    /// Launches one segment's kernel (with a direct `protocol`, the whole message's), as
    /// [`Self::protocol`] chose; the kernel reads and advances the device-side state.
    #[allow(clippy::too_many_arguments)]
    fn step<T: Reducible>(
        &mut self,
        algo: AllreduceAlgo,
        protocol: Protocol,
        op: ReduceOp,
        rank: i32,
        input: SymView<'_, T>,
        output: SymView<'_, T>,
        stream: &CudaStream,
    ) -> Result<()> {
        let n = self.ws.n_pes() as usize;
        let bytes = input.num_bytes();
        let aligned8 = (input.as_device_ptr() as usize | output.as_device_ptr() as usize) % 8 == 0;
        let low_latency = algo == AllreduceAlgo::OneShot
            && self.ws.all_mapped()
            && aligned8
            && self.ws.n_pes() as u32 <= sys::NVSHMEMRS_ALLREDUCE_LL_MAX_PES
            && bytes <= self.ll_max
            && 2 * bytes <= self.ll_slot_bytes;
        let (code, blocks, threads) = match (algo, protocol) {
            _ if low_latency => {
                let shape = low_latency_shape(bytes);
                (
                    sys::NVSHMEMRS_ALGO_ONESHOT_LL as i32,
                    shape.blocks as usize,
                    shape.threads as usize,
                )
            }
            (_, Protocol::Pull | Protocol::Push) => (
                protocol.code(),
                self.direct_shape.blocks(bytes, n),
                self.direct_shape.threads,
            ),
            // One 16 KiB part (of a chunk, or of the message) per block, up to 128 blocks:
            // 32 SMs cannot fill NVLink with stores.
            (AllreduceAlgo::TwoShot | AllreduceAlgo::Ring, Protocol::Slots) => (
                algo.code(),
                parts(bytes / n, 16 << 10, SLOT_BLOCKS_MAX),
                512,
            ),
            _ => (algo.code(), parts(bytes, 16 << 10, SLOT_BLOCKS_MAX), 512),
        };
        let mut args = self.args(rank, &input, &output);
        if protocol == Protocol::Push {
            args.rounds = self.direct_shape.rounds(bytes, n, blocks) as i32;
        }
        self.ws.runtime().bind()?;
        // SAFETY: symmetric input/output of `count` elements, the workspace's own scratch,
        // counters, state and PE table; every member launches the same algo and block count.
        let code = unsafe {
            sys::nvshmemrs_allreduce(
                code,
                T::DTYPE as i32,
                op as i32,
                args,
                blocks as i32,
                threads as i32,
                raw_stream(stream),
            )
        };
        cuda_check(code, "allreduce kernel launch")
    }

    /// [`Allreduce::run`] with the result written over `buffer` (a symmetric view, or this
    /// PE's own device memory, staged as `run` says).
    pub fn run_in_place<'a, T: Reducible>(
        &mut self,
        buffer: impl Into<OutBuf<'a, T>>,
        op: ReduceOp,
        algo: AllreduceAlgo,
        stream: &CudaStream,
    ) -> Result<AllreduceAlgo> {
        let mut buffer = buffer.into();
        let device = self.ws.runtime().device();
        let o = buffer.locate("allreduce", device, stream)?;
        // SAFETY: the span just located as the output (device memory of this GPU); the staged
        // call reads it (copy in) before it writes it (copy out), in stream order.
        let alias = unsafe { InBuf::from_raw(o.addr() as *const T, o.len()) };
        let i = match o.sym() {
            Some(v) => Located::symmetric(v),
            None => alias.locate("allreduce", device, stream)?,
        };
        self.run_located([i, o], op, algo, stream)
    }

    /// Makes the staging area through which calls move this PE's own (non-symmetric) device
    /// memory hold at least `bytes` (an input and an output of n bytes each need 2n rounded up
    /// to 256), so that such calls up to that size allocate nothing: needed before graph
    /// capture and for workspaces over a team smaller than the world. Collective over the
    /// world: every PE, members or not, at the same point with the same `bytes`.
    pub fn reserve_staging(&mut self, bytes: usize) -> Result<()> {
        self.ws.reserve_staging(bytes)
    }

    /// Bytes of the staging area (0 until a call or [`Allreduce::reserve_staging`] needs one).
    pub fn staging_bytes(&self) -> usize {
        self.ws.staging_bytes()
    }
}

impl hier::FlatStep for Allreduce<'_> {
    fn reduce<T: Reducible>(
        &mut self,
        input: SymView<'_, T>,
        output: SymView<'_, T>,
        op: ReduceOp,
        stream: &CudaStream,
    ) -> Result<()> {
        // A step's workspace spans one node or one rail: `Auto` picks a flat algorithm there.
        let algo = self.choose(input.num_bytes(), T::DTYPE);
        self.run_symmetric(input, output, op, algo, stream)
            .map(|_| ())
    }

    fn check(&self) -> Result<()> {
        Allreduce::check(self)
    }

    fn set_timeout(&mut self, timeout: Duration) {
        Allreduce::set_timeout(self, timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::family::refuse_overlap;

    #[test]
    fn outputs_overlapping_the_input_are_refused_unless_in_place() {
        // Allreduce runs in place only when the views are the same (check_elementwise).
        let overlap_check = |what, i: std::ops::Range<usize>, o: std::ops::Range<usize>| {
            refuse_overlap(what, i.clone(), o.clone(), i == o)
        };
        assert!(overlap_check("allreduce", 0..64, 0..64).is_ok());
        assert!(overlap_check("allreduce", 0..64, 64..128).is_ok());
        assert!(overlap_check("allreduce", 64..128, 0..64).is_ok());
        for (i, o) in [
            (0..64, 32..96),
            (32..96, 0..64),
            (0..64, 0..32),
            (0..64, 16..48),
        ] {
            let err = overlap_check("allreduce", i.clone(), o.clone()).unwrap_err();
            assert!(matches!(err, Error::Overlap { .. }), "{i:?} {o:?}: {err:?}");
            assert!(err.to_string().contains("in place"), "{err}");
        }
    }
}
