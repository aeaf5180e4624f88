//! Where a stage's math runs. [`Backend`] mirrors [`crate::ops::Ops`] (same names, arguments
//! and semantics) plus memory and timing, with two implementations:
//!
//! * [`GpuBackend`]: the CUDA kernels and cuBLAS of `ops`, on one stream; device memory is
//!   allocated once and addressed by raw typed pointers ([`F32Ptr`], [`I32Ptr`]).
//! * [`CpuBackend`]: the CPU references of `reference`, on a host "heap" addressed by the
//!   same kind of pointers. The trainer's pipeline, schedule, gradient and optimizer logic
//!   run unchanged on it, which is how they are tested on machines without a GPU.

#![allow(clippy::too_many_arguments)]

use crate::error::{GptError, Result};
use crate::ops::{F32Ptr, I32Ptr, Ops};
use crate::reference as r;
use cudarc::driver::{CudaEvent, CudaStream};
use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Memory, timing and the model's kernels. Everything is stream-ordered (enqueued, no host
/// synchronisation) except the downloads, which wait (with a deadline) for the stream.
pub trait Backend {
    /// A point in the stream's timeline (CUDA event on the GPU).
    type Mark;

    /// `n` zeroed f32 values, alive as long as the backend.
    fn alloc_f32(&self, n: usize) -> Result<F32Ptr>;
    fn alloc_i32(&self, n: usize) -> Result<I32Ptr>;
    /// Stream-ordered copy from the host (the host slice may be reused on return).
    fn upload_f32(&self, dst: F32Ptr, src: &[f32]) -> Result<()>;
    fn upload_i32(&self, dst: I32Ptr, src: &[i32]) -> Result<()>;
    /// Waits for the stream (bounded), then copies to the host.
    fn download_f32(&self, src: F32Ptr, dst: &mut [f32]) -> Result<()>;
    fn download_i32(&self, src: I32Ptr, dst: &mut [i32]) -> Result<()>;
    /// Waits until everything enqueued so far has run (bounded by the backend's timeout).
    fn synchronize(&self) -> Result<()>;
    /// Records the current point of the stream.
    fn mark(&self) -> Result<Self::Mark>;
    /// Milliseconds between two marks (both must have been reached: call after a sync).
    fn elapsed_ms(&self, from: &Self::Mark, to: &Self::Mark) -> Result<f64>;

    fn zero(&self, x: F32Ptr, n: usize) -> Result<()>;
    fn copy(&self, dst: F32Ptr, src: F32Ptr, n: usize) -> Result<()>;
    fn add_inplace(&self, dst: F32Ptr, src: F32Ptr, n: usize) -> Result<()>;
    fn scale_inplace(&self, x: F32Ptr, s: f32, n: usize) -> Result<()>;
    fn encoder_forward(
        &self,
        out: F32Ptr,
        tokens: I32Ptr,
        wte: F32Ptr,
        wpe: F32Ptr,
        b: usize,
        t: usize,
        c: usize,
    ) -> Result<()>;
    fn encoder_backward(
        &self,
        dwte: F32Ptr,
        dwpe: F32Ptr,
        dout: F32Ptr,
        tokens: I32Ptr,
        b: usize,
        t: usize,
        c: usize,
    ) -> Result<()>;
    fn layernorm_forward(
        &self,
        out: F32Ptr,
        mean: F32Ptr,
        rstd: F32Ptr,
        inp: F32Ptr,
        w: F32Ptr,
        bias: F32Ptr,
        n: usize,
        c: usize,
    ) -> Result<()>;
    fn layernorm_backward(
        &self,
        dinp: F32Ptr,
        dw: F32Ptr,
        db: F32Ptr,
        dout: F32Ptr,
        inp: F32Ptr,
        w: F32Ptr,
        mean: F32Ptr,
        rstd: F32Ptr,
        n: usize,
        c: usize,
    ) -> Result<()>;
    fn matmul_forward(
        &self,
        out: F32Ptr,
        inp: F32Ptr,
        weight: F32Ptr,
        bias: Option<F32Ptr>,
        n: usize,
        c: usize,
        oc: usize,
    ) -> Result<()>;
    fn matmul_backward(
        &self,
        dinp: F32Ptr,
        dweight: F32Ptr,
        dbias: Option<F32Ptr>,
        dout: F32Ptr,
        inp: F32Ptr,
        weight: F32Ptr,
        n: usize,
        c: usize,
        oc: usize,
    ) -> Result<()>;
    fn attention_forward(
        &self,
        out: F32Ptr,
        qkvr: F32Ptr,
        att: F32Ptr,
        inp: F32Ptr,
        b: usize,
        t: usize,
        c: usize,
        nh: usize,
    ) -> Result<()>;
    fn attention_backward(
        &self,
        dinp: F32Ptr,
        dqkvr: F32Ptr,
        datt: F32Ptr,
        scratch: F32Ptr,
        dout: F32Ptr,
        qkvr: F32Ptr,
        att: F32Ptr,
        b: usize,
        t: usize,
        c: usize,
        nh: usize,
    ) -> Result<()>;
    fn gelu_forward(&self, out: F32Ptr, inp: F32Ptr, n: usize) -> Result<()>;
    fn gelu_backward(&self, dinp: F32Ptr, inp: F32Ptr, dout: F32Ptr, n: usize) -> Result<()>;
    fn residual_forward(&self, out: F32Ptr, a: F32Ptr, b: F32Ptr, n: usize) -> Result<()>;
    fn fused_classifier(
        &self,
        logits: F32Ptr,
        losses: F32Ptr,
        targets: I32Ptr,
        n: usize,
        v: usize,
        vp: usize,
        dloss: Option<f32>,
    ) -> Result<()>;
    fn adamw(
        &self,
        params: F32Ptr,
        grads: F32Ptr,
        m: F32Ptr,
        v: F32Ptr,
        n: usize,
        lr: f32,
        beta1: f32,
        beta2: f32,
        eps: f32,
        weight_decay: f32,
        t: u32,
        grad_scale: f32,
    ) -> Result<()>;
    fn sum_squares(&self, out: F32Ptr, x: F32Ptr, n: usize) -> Result<()>;
}

// ---------------------------------------------------------------------------------------------
// GPU

/// One device allocation, freed on drop.
struct DeviceAlloc(u64);

impl Drop for DeviceAlloc {
    fn drop(&mut self) {
        // SAFETY: allocated by malloc_sync below and freed only here, after GpuBackend's drop
        // synchronised the stream that used it.
        unsafe {
            let _ = cudarc::driver::result::free_sync(self.0);
        }
    }
}

/// The GPU backend: `Ops` on its stream, plus the device memory it handed out.
pub struct GpuBackend {
    ops: Ops,
    allocs: RefCell<Vec<DeviceAlloc>>,
    timeout: Duration,
}

impl GpuBackend {
    /// Kernels on `stream` (TF32 cuBLAS math if `tf32`); host waits give up after `timeout`.
    pub fn new(stream: Arc<CudaStream>, tf32: bool, timeout: Duration) -> Result<GpuBackend> {
        let mut ops = Ops::new(stream)?;
        ops.set_tf32(tf32)?;
        Ok(GpuBackend {
            ops,
            allocs: RefCell::new(Vec::new()),
            timeout,
        })
    }

    /// The compute stream.
    pub fn stream(&self) -> &Arc<CudaStream> {
        self.ops.stream()
    }

    fn raw_stream(&self) -> cudarc::driver::sys::CUstream {
        self.ops.stream().cu_stream()
    }

    fn alloc_bytes(&self, bytes: usize) -> Result<u64> {
        let bytes = bytes.max(4);
        // SAFETY: a fresh allocation in the current context (bound by the runtime), zeroed
        // before anyone sees it.
        let ptr = unsafe {
            let p = cudarc::driver::result::malloc_sync(bytes)?;
            cudarc::driver::result::memset_d8_sync(p, 0, bytes)?;
            p
        };
        self.allocs.borrow_mut().push(DeviceAlloc(ptr));
        Ok(ptr)
    }
}

impl Drop for GpuBackend {
    fn drop(&mut self) {
        // Kernels may still use the memory about to be freed (e.g. the last AdamW step).
        let _ = self.synchronize();
    }
}

/// Waits for `event` with a deadline: polls (CUDA would block forever on a peer that died).
pub fn wait_event(event: &CudaEvent, timeout: Duration, what: &str) -> Result<()> {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        if event.try_is_complete()? {
            return Ok(());
        }
        if start.elapsed() > timeout {
            return Err(GptError::Timeout {
                what: what.to_string(),
                waited_ms: start.elapsed().as_millis(),
            });
        }
        // Spin briefly (most waits are short), then sleep so an idle wait costs no CPU.
        spins += 1;
        if spins < 200 {
            std::hint::spin_loop();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

impl Backend for GpuBackend {
    type Mark = CudaEvent;

    fn alloc_f32(&self, n: usize) -> Result<F32Ptr> {
        Ok(F32Ptr(self.alloc_bytes(4 * n)?))
    }
    fn alloc_i32(&self, n: usize) -> Result<I32Ptr> {
        Ok(I32Ptr(self.alloc_bytes(4 * n)?))
    }
    fn upload_f32(&self, dst: F32Ptr, src: &[f32]) -> Result<()> {
        // SAFETY: dst was allocated by this backend with room for src (callers size it);
        // pageable host memory is staged before the call returns.
        unsafe { cudarc::driver::result::memcpy_htod_async(dst.0, src, self.raw_stream()) }?;
        Ok(())
    }
    fn upload_i32(&self, dst: I32Ptr, src: &[i32]) -> Result<()> {
        // SAFETY: as in upload_f32.
        unsafe { cudarc::driver::result::memcpy_htod_async(dst.0, src, self.raw_stream()) }?;
        Ok(())
    }
    fn download_f32(&self, src: F32Ptr, dst: &mut [f32]) -> Result<()> {
        self.synchronize()?;
        // SAFETY: src holds dst.len() values; the stream is idle, so the copy is immediate.
        unsafe { cudarc::driver::result::memcpy_dtoh_async(dst, src.0, self.raw_stream()) }?;
        self.synchronize()
    }
    fn download_i32(&self, src: I32Ptr, dst: &mut [i32]) -> Result<()> {
        self.synchronize()?;
        // SAFETY: as in download_f32.
        unsafe { cudarc::driver::result::memcpy_dtoh_async(dst, src.0, self.raw_stream()) }?;
        self.synchronize()
    }
    fn synchronize(&self) -> Result<()> {
        let event = self.ops.stream().record_event(None)?;
        wait_event(&event, self.timeout, "the GPU stream to finish its work")
    }
    fn mark(&self) -> Result<CudaEvent> {
        let stream = self.ops.stream();
        let event = stream
            .context()
            .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))?;
        event.record(stream)?;
        Ok(event)
    }
    fn elapsed_ms(&self, from: &CudaEvent, to: &CudaEvent) -> Result<f64> {
        Ok(from.elapsed_ms(to)? as f64)
    }

    fn zero(&self, x: F32Ptr, n: usize) -> Result<()> {
        self.ops.zero(x, n)
    }
    fn copy(&self, dst: F32Ptr, src: F32Ptr, n: usize) -> Result<()> {
        self.ops.copy(dst, src, n)
    }
    fn add_inplace(&self, dst: F32Ptr, src: F32Ptr, n: usize) -> Result<()> {
        self.ops.add_inplace(dst, src, n)
    }
    fn scale_inplace(&self, x: F32Ptr, s: f32, n: usize) -> Result<()> {
        self.ops.scale_inplace(x, s, n)
    }
    fn encoder_forward(
        &self,
        out: F32Ptr,
        tokens: I32Ptr,
        wte: F32Ptr,
        wpe: F32Ptr,
        b: usize,
        t: usize,
        c: usize,
    ) -> Result<()> {
        self.ops.encoder_forward(out, tokens, wte, wpe, b, t, c)
    }
    fn encoder_backward(
        &self,
        dwte: F32Ptr,
        dwpe: F32Ptr,
        dout: F32Ptr,
        tokens: I32Ptr,
        b: usize,
        t: usize,
        c: usize,
    ) -> Result<()> {
        self.ops.encoder_backward(dwte, dwpe, dout, tokens, b, t, c)
    }
    fn layernorm_forward(
        &self,
        out: F32Ptr,
        mean: F32Ptr,
        rstd: F32Ptr,
        inp: F32Ptr,
        w: F32Ptr,
        bias: F32Ptr,
        n: usize,
        c: usize,
    ) -> Result<()> {
        self.ops
            .layernorm_forward(out, mean, rstd, inp, w, bias, n, c)
    }
    fn layernorm_backward(
        &self,
        dinp: F32Ptr,
        dw: F32Ptr,
        db: F32Ptr,
        dout: F32Ptr,
        inp: F32Ptr,
        w: F32Ptr,
        mean: F32Ptr,
        rstd: F32Ptr,
        n: usize,
        c: usize,
    ) -> Result<()> {
        self.ops
            .layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, n, c)
    }
    fn matmul_forward(
        &self,
        out: F32Ptr,
        inp: F32Ptr,
        weight: F32Ptr,
        bias: Option<F32Ptr>,
        n: usize,
        c: usize,
        oc: usize,
    ) -> Result<()> {
        self.ops.matmul_forward(out, inp, weight, bias, n, c, oc)
    }
    fn matmul_backward(
        &self,
        dinp: F32Ptr,
        dweight: F32Ptr,
        dbias: Option<F32Ptr>,
        dout: F32Ptr,
        inp: F32Ptr,
        weight: F32Ptr,
        n: usize,
        c: usize,
        oc: usize,
    ) -> Result<()> {
        self.ops
            .matmul_backward(dinp, dweight, dbias, dout, inp, weight, n, c, oc)
    }
    fn attention_forward(
        &self,
        out: F32Ptr,
        qkvr: F32Ptr,
        att: F32Ptr,
        inp: F32Ptr,
        b: usize,
        t: usize,
        c: usize,
        nh: usize,
    ) -> Result<()> {
        self.ops.attention_forward(out, qkvr, att, inp, b, t, c, nh)
    }
    fn attention_backward(
        &self,
        dinp: F32Ptr,
        dqkvr: F32Ptr,
        datt: F32Ptr,
        scratch: F32Ptr,
        dout: F32Ptr,
        qkvr: F32Ptr,
        att: F32Ptr,
        b: usize,
        t: usize,
        c: usize,
        nh: usize,
    ) -> Result<()> {
        self.ops
            .attention_backward(dinp, dqkvr, datt, scratch, dout, qkvr, att, b, t, c, nh)
    }
    fn gelu_forward(&self, out: F32Ptr, inp: F32Ptr, n: usize) -> Result<()> {
        self.ops.gelu_forward(out, inp, n)
    }
    fn gelu_backward(&self, dinp: F32Ptr, inp: F32Ptr, dout: F32Ptr, n: usize) -> Result<()> {
        self.ops.gelu_backward(dinp, inp, dout, n)
    }
    fn residual_forward(&self, out: F32Ptr, a: F32Ptr, b: F32Ptr, n: usize) -> Result<()> {
        self.ops.residual_forward(out, a, b, n)
    }
    fn fused_classifier(
        &self,
        logits: F32Ptr,
        losses: F32Ptr,
        targets: I32Ptr,
        n: usize,
        v: usize,
        vp: usize,
        dloss: Option<f32>,
    ) -> Result<()> {
        self.ops
            .fused_classifier(logits, losses, targets, n, v, vp, dloss)
    }
    fn adamw(
        &self,
        params: F32Ptr,
        grads: F32Ptr,
        m: F32Ptr,
        v: F32Ptr,
        n: usize,
        lr: f32,
        beta1: f32,
        beta2: f32,
        eps: f32,
        weight_decay: f32,
        t: u32,
        grad_scale: f32,
    ) -> Result<()> {
        self.ops.adamw(
            params,
            grads,
            m,
            v,
            n,
            lr,
            beta1,
            beta2,
            eps,
            weight_decay,
            t,
            grad_scale,
        )
    }
    fn sum_squares(&self, out: F32Ptr, x: F32Ptr, n: usize) -> Result<()> {
        self.ops.sum_squares(out, x, n)
    }
}

// ---------------------------------------------------------------------------------------------
// CPU

/// Address of the first f32 of the CPU heap (non-zero so that a null pointer is never valid).
const CPU_F32_BASE: u64 = 0x1000_0000;
/// Address of the first i32; far from the f32 heap so that a mixed-up pointer fails loudly.
const CPU_I32_BASE: u64 = 0x4000_0000_0000;

/// The CPU backend: `reference` on host vectors. Single-threaded (one per simulated PE).
#[derive(Default)]
pub struct CpuBackend {
    f: RefCell<Vec<f32>>,
    i: RefCell<Vec<i32>>,
}

impl CpuBackend {
    pub fn new() -> CpuBackend {
        CpuBackend::default()
    }

    fn range_f(&self, p: F32Ptr, n: usize) -> Result<std::ops::Range<usize>> {
        let len = self.f.borrow().len();
        let start =
            p.0.checked_sub(CPU_F32_BASE)
                .filter(|off| off % 4 == 0 && p.0 < CPU_I32_BASE)
                .map(|off| (off / 4) as usize);
        match start {
            Some(s) if s + n <= len => Ok(s..s + n),
            _ => Err(GptError::Config(format!(
                "CPU backend: f32 access {:#x}+{n} outside its heap of {len} values",
                p.0
            ))),
        }
    }

    fn range_i(&self, p: I32Ptr, n: usize) -> Result<std::ops::Range<usize>> {
        let len = self.i.borrow().len();
        let start =
            p.0.checked_sub(CPU_I32_BASE)
                .filter(|off| off % 4 == 0)
                .map(|off| (off / 4) as usize);
        match start {
            Some(s) if s + n <= len => Ok(s..s + n),
            _ => Err(GptError::Config(format!(
                "CPU backend: i32 access {:#x}+{n} outside its heap of {len} values",
                p.0
            ))),
        }
    }

    /// A copy of `n` values at `p`.
    fn get(&self, p: F32Ptr, n: usize) -> Result<Vec<f32>> {
        let r = self.range_f(p, n)?;
        Ok(self.f.borrow()[r].to_vec())
    }

    fn get_i(&self, p: I32Ptr, n: usize) -> Result<Vec<i32>> {
        let r = self.range_i(p, n)?;
        Ok(self.i.borrow()[r].to_vec())
    }

    fn put(&self, p: F32Ptr, v: &[f32]) -> Result<()> {
        let r = self.range_f(p, v.len())?;
        self.f.borrow_mut()[r].copy_from_slice(v);
        Ok(())
    }
}

impl Backend for CpuBackend {
    type Mark = Instant;

    fn alloc_f32(&self, n: usize) -> Result<F32Ptr> {
        let mut f = self.f.borrow_mut();
        let at = f.len();
        f.resize(at + n.max(1), 0.0);
        Ok(F32Ptr(CPU_F32_BASE + 4 * at as u64))
    }
    fn alloc_i32(&self, n: usize) -> Result<I32Ptr> {
        let mut i = self.i.borrow_mut();
        let at = i.len();
        i.resize(at + n.max(1), 0);
        Ok(I32Ptr(CPU_I32_BASE + 4 * at as u64))
    }
    fn upload_f32(&self, dst: F32Ptr, src: &[f32]) -> Result<()> {
        self.put(dst, src)
    }
    fn upload_i32(&self, dst: I32Ptr, src: &[i32]) -> Result<()> {
        let r = self.range_i(dst, src.len())?;
        self.i.borrow_mut()[r].copy_from_slice(src);
        Ok(())
    }
    fn download_f32(&self, src: F32Ptr, dst: &mut [f32]) -> Result<()> {
        dst.copy_from_slice(&self.get(src, dst.len())?);
        Ok(())
    }
    fn download_i32(&self, src: I32Ptr, dst: &mut [i32]) -> Result<()> {
        dst.copy_from_slice(&self.get_i(src, dst.len())?);
        Ok(())
    }
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
    fn mark(&self) -> Result<Instant> {
        Ok(Instant::now())
    }
    fn elapsed_ms(&self, from: &Instant, to: &Instant) -> Result<f64> {
        Ok(to.saturating_duration_since(*from).as_secs_f64() * 1e3)
    }

    fn zero(&self, x: F32Ptr, n: usize) -> Result<()> {
        self.put(x, &vec![0.0; n])
    }
    fn copy(&self, dst: F32Ptr, src: F32Ptr, n: usize) -> Result<()> {
        let v = self.get(src, n)?;
        self.put(dst, &v)
    }
    fn add_inplace(&self, dst: F32Ptr, src: F32Ptr, n: usize) -> Result<()> {
        let (mut d, s) = (self.get(dst, n)?, self.get(src, n)?);
        d.iter_mut().zip(&s).for_each(|(a, b)| *a += b);
        self.put(dst, &d)
    }
    fn scale_inplace(&self, x: F32Ptr, s: f32, n: usize) -> Result<()> {
        let mut v = self.get(x, n)?;
        v.iter_mut().for_each(|a| *a *= s);
        self.put(x, &v)
    }
    fn encoder_forward(
        &self,
        out: F32Ptr,
        tokens: I32Ptr,
        wte: F32Ptr,
        wpe: F32Ptr,
        b: usize,
        t: usize,
        c: usize,
    ) -> Result<()> {
        let tok = self.get_i(tokens, b * t)?;
        let vmax = tok.iter().copied().max().unwrap_or(0) as usize + 1;
        let (wte, wpe) = (self.get(wte, vmax * c)?, self.get(wpe, t * c)?);
        let mut o = vec![0.0; b * t * c];
        r::encoder_forward(&mut o, &tok, &wte, &wpe, b, t, c);
        self.put(out, &o)
    }
    fn encoder_backward(
        &self,
        dwte: F32Ptr,
        dwpe: F32Ptr,
        dout: F32Ptr,
        tokens: I32Ptr,
        b: usize,
        t: usize,
        c: usize,
    ) -> Result<()> {
        let tok = self.get_i(tokens, b * t)?;
        let vmax = tok.iter().copied().max().unwrap_or(0) as usize + 1;
        let (mut dte, mut dpe) = (self.get(dwte, vmax * c)?, self.get(dwpe, t * c)?);
        let d = self.get(dout, b * t * c)?;
        r::encoder_backward(&mut dte, &mut dpe, &d, &tok, b, t, c);
        self.put(dwte, &dte)?;
        self.put(dwpe, &dpe)
    }
    fn layernorm_forward(
        &self,
        out: F32Ptr,
        mean: F32Ptr,
        rstd: F32Ptr,
        inp: F32Ptr,
        w: F32Ptr,
        bias: F32Ptr,
        n: usize,
        c: usize,
    ) -> Result<()> {
        let (x, w, bb) = (self.get(inp, n * c)?, self.get(w, c)?, self.get(bias, c)?);
        let (mut o, mut m, mut rs) = (vec![0.0; n * c], vec![0.0; n], vec![0.0; n]);
        r::layernorm_forward(&mut o, &mut m, &mut rs, &x, &w, &bb, n, c);
        self.put(out, &o)?;
        self.put(mean, &m)?;
        self.put(rstd, &rs)
    }
    fn layernorm_backward(
        &self,
        dinp: F32Ptr,
        dw: F32Ptr,
        db: F32Ptr,
        dout: F32Ptr,
        inp: F32Ptr,
        w: F32Ptr,
        mean: F32Ptr,
        rstd: F32Ptr,
        n: usize,
        c: usize,
    ) -> Result<()> {
        let (mut di, mut dwv, mut dbv) =
            (self.get(dinp, n * c)?, self.get(dw, c)?, self.get(db, c)?);
        let (d, x, wv) = (
            self.get(dout, n * c)?,
            self.get(inp, n * c)?,
            self.get(w, c)?,
        );
        let (m, rs) = (self.get(mean, n)?, self.get(rstd, n)?);
        r::layernorm_backward(&mut di, &mut dwv, &mut dbv, &d, &x, &wv, &m, &rs, n, c);
        self.put(dinp, &di)?;
        self.put(dw, &dwv)?;
        self.put(db, &dbv)
    }
    fn matmul_forward(
        &self,
        out: F32Ptr,
        inp: F32Ptr,
        weight: F32Ptr,
        bias: Option<F32Ptr>,
        n: usize,
        c: usize,
        oc: usize,
    ) -> Result<()> {
        let (x, w) = (self.get(inp, n * c)?, self.get(weight, oc * c)?);
        let b = bias.map(|p| self.get(p, oc)).transpose()?;
        let mut o = vec![0.0; n * oc];
        r::matmul_forward(&mut o, &x, &w, b.as_deref(), n, c, oc);
        self.put(out, &o)
    }
    fn matmul_backward(
        &self,
        dinp: F32Ptr,
        dweight: F32Ptr,
        dbias: Option<F32Ptr>,
        dout: F32Ptr,
        inp: F32Ptr,
        weight: F32Ptr,
        n: usize,
        c: usize,
        oc: usize,
    ) -> Result<()> {
        // dinp is overwritten: start from zeros whatever the reference does with it.
        let mut di = vec![0.0; n * c];
        let mut dw = self.get(dweight, oc * c)?;
        let mut dbv = dbias.map(|p| self.get(p, oc)).transpose()?;
        let (d, x, w) = (
            self.get(dout, n * oc)?,
            self.get(inp, n * c)?,
            self.get(weight, oc * c)?,
        );
        r::matmul_backward(&mut di, &mut dw, dbv.as_deref_mut(), &d, &x, &w, n, c, oc);
        self.put(dinp, &di)?;
        self.put(dweight, &dw)?;
        if let (Some(p), Some(v)) = (dbias, dbv) {
            self.put(p, &v)?;
        }
        Ok(())
    }
    fn attention_forward(
        &self,
        out: F32Ptr,
        qkvr: F32Ptr,
        att: F32Ptr,
        inp: F32Ptr,
        b: usize,
        t: usize,
        c: usize,
        nh: usize,
    ) -> Result<()> {
        let x = self.get(inp, b * t * 3 * c)?;
        let (mut o, mut a) = (vec![0.0; b * t * c], vec![0.0; b * nh * t * t]);
        r::attention_forward(&mut o, &mut a, &x, b, t, c, nh);
        self.put(out, &o)?;
        self.put(att, &a)?;
        // The CPU saves the input itself where the GPU saves its permuted copy: backward
        // reads it back from there.
        self.put(qkvr, &x)
    }
    fn attention_backward(
        &self,
        dinp: F32Ptr,
        _dqkvr: F32Ptr,
        _datt: F32Ptr,
        _scratch: F32Ptr,
        dout: F32Ptr,
        qkvr: F32Ptr,
        att: F32Ptr,
        b: usize,
        t: usize,
        c: usize,
        nh: usize,
    ) -> Result<()> {
        let mut di = vec![0.0; b * t * 3 * c];
        let (d, x, a) = (
            self.get(dout, b * t * c)?,
            self.get(qkvr, b * t * 3 * c)?,
            self.get(att, b * nh * t * t)?,
        );
        r::attention_backward(&mut di, &d, &x, &a, b, t, c, nh);
        self.put(dinp, &di)
    }
    fn gelu_forward(&self, out: F32Ptr, inp: F32Ptr, n: usize) -> Result<()> {
        let x = self.get(inp, n)?;
        let mut o = vec![0.0; n];
        r::gelu_forward(&mut o, &x, n);
        self.put(out, &o)
    }
    fn gelu_backward(&self, dinp: F32Ptr, inp: F32Ptr, dout: F32Ptr, n: usize) -> Result<()> {
        let (x, d) = (self.get(inp, n)?, self.get(dout, n)?);
        let mut di = vec![0.0; n];
        r::gelu_backward(&mut di, &x, &d, n);
        self.put(dinp, &di)
    }
    fn residual_forward(&self, out: F32Ptr, a: F32Ptr, b: F32Ptr, n: usize) -> Result<()> {
        let (x, y) = (self.get(a, n)?, self.get(b, n)?);
        let mut o = vec![0.0; n];
        r::residual_forward(&mut o, &x, &y, n);
        self.put(out, &o)
    }
    fn fused_classifier(
        &self,
        logits: F32Ptr,
        losses: F32Ptr,
        targets: I32Ptr,
        n: usize,
        v: usize,
        vp: usize,
        dloss: Option<f32>,
    ) -> Result<()> {
        let mut l = self.get(logits, n * vp)?;
        let tg = self.get_i(targets, n)?;
        let mut lo = vec![0.0; n];
        r::fused_classifier(&mut l, &mut lo, &tg, n, v, vp, dloss);
        self.put(logits, &l)?;
        self.put(losses, &lo)
    }
    fn adamw(
        &self,
        params: F32Ptr,
        grads: F32Ptr,
        m: F32Ptr,
        v: F32Ptr,
        n: usize,
        lr: f32,
        beta1: f32,
        beta2: f32,
        eps: f32,
        weight_decay: f32,
        t: u32,
        grad_scale: f32,
    ) -> Result<()> {
        let (mut p, g, mut mv, mut vv) = (
            self.get(params, n)?,
            self.get(grads, n)?,
            self.get(m, n)?,
            self.get(v, n)?,
        );
        r::adamw(
            &mut p,
            &g,
            &mut mv,
            &mut vv,
            n,
            lr,
            beta1,
            beta2,
            eps,
            weight_decay,
            t,
            grad_scale,
        );
        self.put(params, &p)?;
        self.put(m, &mv)?;
        self.put(v, &vv)
    }
    fn sum_squares(&self, out: F32Ptr, x: F32Ptr, n: usize) -> Result<()> {
        let v = self.get(x, n)?;
        self.put(out, &[r::sum_squares(&v, n)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_heap_round_trips_and_checks_bounds() {
        let be = CpuBackend::new();
        let a = be.alloc_f32(4).unwrap();
        let b = be.alloc_f32(3).unwrap();
        assert_eq!(b, a.at(4));
        be.upload_f32(b, &[1.0, 2.0, 3.0]).unwrap();
        be.add_inplace(a.at(1), b, 3).unwrap();
        be.scale_inplace(a, 2.0, 4).unwrap();
        let mut out = [0.0; 4];
        be.download_f32(a, &mut out).unwrap();
        assert_eq!(out, [0.0, 2.0, 4.0, 6.0]);
        assert!(be.get(b, 4).is_err());
        let t = be.alloc_i32(2).unwrap();
        be.upload_i32(t, &[7, 8]).unwrap();
        let mut ti = [0; 2];
        be.download_i32(t, &mut ti).unwrap();
        assert_eq!(ti, [7, 8]);
        // An i32 pointer used as f32 (or the reverse) is refused.
        assert!(be.get(F32Ptr(t.0), 1).is_err());
        assert!(be.get_i(I32Ptr(a.0), 1).is_err());
    }
}
