//! A call ([`SparseAllreduce::run`]), step by step in stream order: the dense warm-up; or
//! error feedback's source (in `residual`), the call's density, the selection, what was sent
//! leaving the residual, the method's exchange into the dense output, and the average.

use super::exchange::Exchange;
use super::launch::{addr, scatter_parts, zero_at, zero_dense, Parts};
use super::options::{sparse_k, SparseMethod, WHAT};
use super::state::SparseAllreduce;
use crate::coll::allreduce::{Allreduce, AllreduceAlgo};
use crate::coll::family::DeviceParts;
use crate::coll::op::ReduceOp;
use crate::core::buffer::SymmetricBuffer;
use crate::core::error::{Error, Result};
use crate::core::result::cuda_check;
use crate::core::stream::raw_stream;
use crate::sparse::reference;
use crate::sparse::sparse_ops::scatter_add_raw;
use crate::sparse::{index_code, value_code, SparseIndex, SparseValue};
use crate::sys;
use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut};
use std::ffi::c_void;

impl<T: SparseValue, I: SparseIndex> SparseAllreduce<'_, T, I> {
    /// Enqueues on `stream` the sparse allreduce of `grad` (this member's gradient, `len`
    /// elements) into `out` (`len` elements; every element written). `grad` is read before
    /// `out` is written, so they may be the same memory ([`SparseAllreduce::run_in_place`]).
    pub fn run<G, D>(&mut self, grad: &G, out: &mut D, stream: &CudaStream) -> Result<()>
    where
        G: DevicePtr<T>,
        D: DevicePtrMut<T>,
    {
        self.check_len("gradient", grad.len())?;
        self.check_len("output", out.len())?;
        let (g, _grad_guard) = grad.device_ptr(stream);
        let (o, _out_guard) = out.device_ptr_mut(stream);
        // SAFETY: `len` elements each (checked), ordered on `stream` by the guards, which live
        // until everything is enqueued.
        unsafe { self.run_raw(g, o, stream) }
    }

    /// [`SparseAllreduce::run`] with the result written over the gradient.
    pub fn run_in_place<D: DevicePtrMut<T>>(
        &mut self,
        grad: &mut D,
        stream: &CudaStream,
    ) -> Result<()> {
        self.check_len("gradient", grad.len())?;
        let (g, _guard) = grad.device_ptr_mut(stream);
        // SAFETY: as in `run`.
        unsafe { self.run_raw(g, g, stream) }
    }

    fn check_len(&self, which: &'static str, len: usize) -> Result<()> {
        if len == self.n {
            return Ok(());
        }
        Err(Error::LengthMismatch {
            what: if which == "output" {
                "SparseAllreduce::run (the output against the gradient length it was created for)"
            } else {
                "SparseAllreduce::run (the gradient against the length it was created for)"
            },
            dest: self.n,
            src: len,
        })
    }

    /// [`SparseAllreduce::run`] on device addresses (`grad` may equal `out`).
    ///
    /// # Safety
    /// `grad` and `out` are device memory of `len` elements each, ordered on `stream`.
    pub unsafe fn run_raw(&mut self, grad: u64, out: u64, stream: &CudaStream) -> Result<()> {
        let Some((me, p)) = self.rank else {
            return Err(Error::SparseConfig {
                what: WHAT,
                detail: "this PE is not a member of the team it was created over; call run \
                         on the team's members only"
                    .into(),
            });
        };
        stream.context().bind_to_thread()?;
        let call = self.calls;
        self.calls += 1;
        if let (Some((ar, warm)), true) = (&mut self.warmup, call < self.opts.dense_warmup as u64) {
            // SAFETY: this function's contract.
            return unsafe {
                dense_warmup(ar, warm, self.opts.average, (grad, out, self.n), stream)
            };
        }
        // Sparse calls counted from the first after the warm-up: the intervals' schedule.
        let sparse_call = call - (self.opts.dense_warmup as u64).min(call);
        // SAFETY: this function's contract.
        let src = unsafe { self.selection_source(grad, out, p, stream)? };
        let (density, k) = self.take_density(sparse_call, stream)?;
        // SAFETY: the source holds n elements (the gradient, the residual or `out`).
        unsafe { self.select(src, (density, k), sparse_call, stream)? };
        // SAFETY: the selection above is on `stream`.
        unsafe { self.clear_sent(stream)? };
        // SAFETY: this function's contract.
        unsafe { self.exchange(out, (me, p), (sparse_call, k), stream)? };
        if self.opts.average && p > 1 {
            let (n, dtype, s) = (self.n, value_code::<T>(), raw_stream(stream));
            // SAFETY: `out` n elements.
            let code = unsafe {
                sys::nvshmemrs_sparse_scale(out as *mut c_void, n as u64, 1.0 / p as f32, dtype, s)
            };
            cuda_check(code, "average kernel launch")?;
        }
        Ok(())
    }

    /// The density of sparse call `sparse_call` (the ramp's, [`SparseOptions::density_at`]) and
    /// its k, which becomes [`SparseAllreduce::k`]; gTop-k's received and broadcast sets hold k
    /// pairs, so their counts follow it.
    ///
    /// [`SparseOptions::density_at`]: super::SparseOptions::density_at
    fn take_density(&mut self, sparse_call: u64, stream: &CudaStream) -> Result<(f64, usize)> {
        let n = self.n;
        let density = self.opts.density_at(sparse_call + self.ramp_offset);
        let k = sparse_k(n, density);
        if let Exchange::Tree(t) = &mut self.ex {
            if k != self.k {
                // The received and broadcast sets hold k pairs: their counts follow k.
                let kk = [k as u64];
                for count in [&t.recv.count, &t.global.count] {
                    // SAFETY: one word of device memory, ordered on `stream`; a copy from
                    // pageable memory is staged before the call returns.
                    unsafe {
                        cudarc::driver::result::memcpy_htod_async(
                            count.as_device_ptr() as u64,
                            &kk,
                            stream.cu_stream(),
                        )
                    }?;
                }
            }
        }
        self.k = k;
        Ok((density, k))
    }

    /// This member's selection of sparse call `sparse_call` from the `n` elements at `src`, into
    /// its set: at the Gaussian threshold, at the reused threshold (`topk_aopt`, Ok-Topk), or
    /// the exact top k.
    ///
    /// # Safety
    /// `src` is device memory of n elements, ordered on `stream`.
    unsafe fn select(
        &mut self,
        src: u64,
        (density, k): (f64, usize),
        sparse_call: u64,
        stream: &CudaStream,
    ) -> Result<()> {
        let s = raw_stream(stream);
        let n = self.n;
        let dtype = value_code::<T>();
        let mine = self.mine.raw();
        match (&self.gauss, &self.reuse) {
            (Some((scratch, t)), _) => {
                let z = reference::gaussian_z(density);
                let t = addr(t);
                // SAFETY: src holds n elements; the workspace its words; t one f32.
                let code = unsafe {
                    sys::nvshmemrs_sparse_gaussian_threshold(
                        src as *const c_void,
                        n as u64,
                        z,
                        reference::gaussian_need(k) as u64,
                        dtype,
                        addr(scratch) as *mut f64,
                        scratch.len() as u64,
                        t as *mut f32,
                        s,
                    )
                };
                cuda_check(code, "Gaussian threshold kernel launch")?;
                // SAFETY: src n elements, the set its capacity, t one f32, all on `stream`.
                unsafe {
                    self.topk
                        .threshold_at_raw::<T, I>((src, n), t as *const f32, mine, stream)?
                };
            }
            (None, Some(reuse)) => {
                // SAFETY: src n elements, the set its capacity, the reuse words, on `stream`.
                unsafe {
                    reuse.select::<T, I>(&mut self.topk, (src, n), k, sparse_call, mine, stream)?
                };
            }
            (None, None) => {
                // SAFETY: as above.
                unsafe { self.topk.run_raw::<T, I>((src, n), k, mine, stream)? };
            }
        }
        Ok(())
    }

    /// The method's exchange of this member's selection with the other members', the sum in
    /// `out`; gTop-k and Ok-Topk then clear from the residual (and the velocity) what made it
    /// into the global set.
    ///
    /// # Safety
    /// `out` is device memory of n elements, ordered on `stream`.
    unsafe fn exchange(
        &mut self,
        out: u64,
        (me, p): (i32, i32),
        (sparse_call, k): (u64, usize),
        stream: &CudaStream,
    ) -> Result<()> {
        let s = raw_stream(stream);
        let n = self.n;
        let dtype = value_code::<T>();
        let itype = index_code::<I>();
        let mine = self.mine.raw();
        let cap = self.capacity;
        let pu = p as usize;
        // SAFETY: `out` holds n elements (this function's contract).
        let zero_out = || unsafe { zero_dense::<T>(out, n, stream) };
        match &mut self.ex {
            Exchange::Fixed { idx, val } => {
                self.allgather
                    .run(self.mine.idx.view(0..k)?, idx.view(0..pu * k)?, stream)?;
                self.allgather
                    .run(self.mine.val.view(0..k)?, val.view(0..pu * k)?, stream)?;
                zero_out()?;
                let parts = Parts {
                    idx: idx.as_device_ptr() as u64,
                    val: val.as_device_ptr() as u64,
                    sizes: 0,
                    displs: 0,
                    capacity: k,
                    n_parts: p,
                };
                // SAFETY: P parts of k pairs of symmetric memory, `out` n elements.
                unsafe { scatter_parts::<T, I>(parts, (out, n), stream)? };
            }
            Exchange::Varying(g) => {
                // SAFETY: the selection its capacity, `out` n elements, on `stream`.
                unsafe {
                    g.run(
                        &mut self.allgather,
                        &self.mine,
                        (cap, pu * cap),
                        p,
                        (out, n),
                        stream,
                    )?
                };
            }
            Exchange::Concat {
                parts,
                packed,
                gathered,
                part_bytes,
            } => {
                let pb = *part_bytes;
                // SAFETY: the set's capacity packs into part_bytes (packed_bytes).
                let code = unsafe {
                    sys::nvshmemrs_sparse_pack_concat(
                        mine,
                        packed.as_device_ptr().cast(),
                        dtype,
                        itype,
                        s,
                    )
                };
                cuda_check(code, "sparse pack kernel launch")?;
                self.allgather.run(
                    self.mine.count.view(0..1)?,
                    parts.sizes.view(0..pu)?,
                    stream,
                )?;
                let units = (
                    std::mem::size_of::<I>() as u64,
                    std::mem::size_of::<T>() as u64,
                    8,
                );
                parts.offsets(p, cap, units, stream)?;
                let dp = DeviceParts {
                    counts: parts.counts.view(0..pu)?,
                    displs: parts.displs.view(0..pu)?,
                };
                parts.agv.run_device(
                    packed.view(0..pb)?,
                    gathered.view(0..pu * pb)?,
                    &dp,
                    stream,
                )?;
                zero_out()?;
                // SAFETY: P parts of pb bytes, the sizes and displacements P words each, `out`
                // n elements.
                let code = unsafe {
                    sys::nvshmemrs_sparse_scatter_concat(
                        gathered.as_device_ptr().cast(),
                        parts.sizes.as_device_ptr(),
                        cap as u64,
                        parts.displs.as_device_ptr(),
                        p,
                        out as *mut c_void,
                        n as u64,
                        dtype,
                        itype,
                        s,
                    )
                };
                cuda_check(code, "sparse scatter-add kernel launch")?;
            }
            Exchange::Tree(t) => {
                // SAFETY: every set is device memory of its capacity, on `stream`.
                unsafe { t.reduce(&mut self.topk, &self.mine, me, p, k, stream)? };
                zero_out()?;
                // SAFETY: the global set (k pairs), `out` n elements.
                unsafe { scatter_add_raw::<T, I>(t.global.raw(), (out, n), stream)? };
                let residual = self.residual.as_ref().map_or(0, addr);
                // SAFETY: the sets their capacities, mark k f32, the residual n elements.
                unsafe { t.include(&mut self.topk, &self.mine, residual, n, stream)? };
                if let Some(u) = &self.velocity {
                    // Momentum factor masking where the included pairs left the residual.
                    let (inc, _guards) = t.included.raw(stream);
                    // SAFETY: the included set its capacity, n elements of velocity.
                    unsafe {
                        zero_at::<T, I>(inc, addr(u), n, stream, "momentum masking kernel launch")?
                    };
                }
            }
            Exchange::Regions(r) => {
                let residual = self.residual.as_ref().map_or(0, addr);
                // SAFETY: the selection its capacity, `out` n elements, the residual 0 or n, on
                // `stream`.
                unsafe {
                    r.run(
                        &mut self.topk,
                        &mut self.allgather,
                        &self.mine,
                        (sparse_call, k, residual),
                        (me, p),
                        (out, n),
                        stream,
                    )?
                };
                if let (Some(u), SparseMethod::OkTopK) = (&self.velocity, self.opts.method) {
                    // Momentum factor masking where r.run cleared the residual: the pairs whose
                    // index has a result (`out`, not yet averaged). The other region methods'
                    // were masked with their residual above.
                    // SAFETY: the selection its capacity, `out` and the velocity n elements.
                    let code = unsafe {
                        sys::nvshmemrs_sparse_zero_sent(
                            mine,
                            out as *const c_void,
                            addr(u) as *mut c_void,
                            n as u64,
                            dtype,
                            itype,
                            s,
                        )
                    };
                    cuda_check(code, "momentum masking kernel launch")?;
                }
            }
        }
        Ok(())
    }
}

/// The dense warm-up's call: `out` = the allreduce of `grad` (`grad` may be `out`), through
/// the symmetric buffer `warm` (`n` elements each), averaged or summed.
///
/// # Safety
/// `grad` and `out` are device memory of `n` elements each, ordered on `stream`.
unsafe fn dense_warmup<T: SparseValue>(
    ar: &mut Allreduce<'_>,
    warm: &SymmetricBuffer<'_, T>,
    average: bool,
    (grad, out, n): (u64, u64, usize),
    stream: &CudaStream,
) -> Result<()> {
    let bytes = n * std::mem::size_of::<T>();
    let w = warm.as_device_ptr() as u64;
    // SAFETY: n elements each (this function's contract; the buffer's length).
    unsafe { cudarc::driver::result::memcpy_dtod_async(w, grad, bytes, stream.cu_stream()) }?;
    let op = if average {
        ReduceOp::Avg
    } else {
        ReduceOp::Sum
    };
    ar.run_in_place(warm.view(0..n)?, op, AllreduceAlgo::Auto, stream)?;
    // SAFETY: as above.
    unsafe { cudarc::driver::result::memcpy_dtod_async(out, w, bytes, stream.cu_stream()) }?;
    Ok(())
}
