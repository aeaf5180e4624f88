//! Where a stage's math runs. [`Backend`] mirrors [`crate::ops::Ops`] (same names, the argument
//! structs of [`crate::op_args`], same semantics) plus memory and timing, with two
//! implementations:
//!
//! * [`GpuBackend`]: the CUDA kernels and cuBLAS of `ops`, on one stream; device memory is
//!   allocated once and addressed by raw typed pointers ([`F32Ptr`], [`I32Ptr`]).
//! * [`CpuBackend`]: the CPU references of `reference`, on a host "heap" addressed by the
//!   same kind of pointers. The trainer's pipeline, schedule, gradient and optimizer logic
//!   run unchanged on it, which is how they are tested on machines without a GPU.

use crate::error::{GptError, Result};
use crate::op_args::{
    Adamw, AttentionBackward, AttentionForward, EncoderBackward, EncoderForward, FusedClassifier,
    LayernormBackward, LayernormForward, MatmulBackward, MatmulForward,
};
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
    fn encoder_forward(&self, a: EncoderForward) -> Result<()>;
    fn encoder_backward(&self, a: EncoderBackward) -> Result<()>;
    fn layernorm_forward(&self, a: LayernormForward) -> Result<()>;
    fn layernorm_backward(&self, a: LayernormBackward) -> Result<()>;
    fn matmul_forward(&self, a: MatmulForward) -> Result<()>;
    fn matmul_backward(&self, a: MatmulBackward) -> Result<()>;
    fn attention_forward(&self, a: AttentionForward) -> Result<()>;
    fn attention_backward(&self, a: AttentionBackward) -> Result<()>;
    fn gelu_forward(&self, out: F32Ptr, inp: F32Ptr, n: usize) -> Result<()>;
    fn gelu_backward(&self, dinp: F32Ptr, inp: F32Ptr, dout: F32Ptr, n: usize) -> Result<()>;
    fn residual_forward(&self, out: F32Ptr, a: F32Ptr, b: F32Ptr, n: usize) -> Result<()>;
    fn fused_classifier(&self, a: FusedClassifier) -> Result<()>;
    fn adamw(&self, a: Adamw) -> Result<()>;
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

/// Backend methods that are [`Ops`]'s own, arguments passed through unchanged.
macro_rules! to_ops {
    ($($name:ident($($arg:ident: $ty:ty),*)),* $(,)?) => {
        $(fn $name(&self, $($arg: $ty),*) -> Result<()> {
            self.ops.$name($($arg),*)
        })*
    };
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

    to_ops! {
        zero(x: F32Ptr, n: usize),
        copy(dst: F32Ptr, src: F32Ptr, n: usize),
        add_inplace(dst: F32Ptr, src: F32Ptr, n: usize),
        scale_inplace(x: F32Ptr, s: f32, n: usize),
        encoder_forward(a: EncoderForward),
        encoder_backward(a: EncoderBackward),
        layernorm_forward(a: LayernormForward),
        layernorm_backward(a: LayernormBackward),
        matmul_forward(a: MatmulForward),
        matmul_backward(a: MatmulBackward),
        attention_forward(a: AttentionForward),
        attention_backward(a: AttentionBackward),
        gelu_forward(out: F32Ptr, inp: F32Ptr, n: usize),
        gelu_backward(dinp: F32Ptr, inp: F32Ptr, dout: F32Ptr, n: usize),
        residual_forward(out: F32Ptr, a: F32Ptr, b: F32Ptr, n: usize),
        fused_classifier(a: FusedClassifier),
        adamw(a: Adamw),
        sum_squares(out: F32Ptr, x: F32Ptr, n: usize),
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
    fn encoder_forward(&self, a: EncoderForward) -> Result<()> {
        let (b, t, c) = (a.b, a.t, a.c);
        let tokens = self.get_i(a.tokens, b * t)?;
        let vmax = tokens.iter().copied().max().unwrap_or(0) as usize + 1;
        let (wte, wpe) = (self.get(a.wte, vmax * c)?, self.get(a.wpe, t * c)?);
        let mut out = vec![0.0; b * t * c];
        r::encoder_forward(EncoderForward {
            out: &mut out,
            tokens: &tokens,
            wte: &wte,
            wpe: &wpe,
            b,
            t,
            c,
        });
        self.put(a.out, &out)
    }
    fn encoder_backward(&self, a: EncoderBackward) -> Result<()> {
        let (b, t, c) = (a.b, a.t, a.c);
        let tokens = self.get_i(a.tokens, b * t)?;
        let vmax = tokens.iter().copied().max().unwrap_or(0) as usize + 1;
        let (mut dwte, mut dwpe) = (self.get(a.dwte, vmax * c)?, self.get(a.dwpe, t * c)?);
        let dout = self.get(a.dout, b * t * c)?;
        r::encoder_backward(EncoderBackward {
            dwte: &mut dwte,
            dwpe: &mut dwpe,
            dout: &dout,
            tokens: &tokens,
            b,
            t,
            c,
        });
        self.put(a.dwte, &dwte)?;
        self.put(a.dwpe, &dwpe)
    }
    fn layernorm_forward(&self, a: LayernormForward) -> Result<()> {
        let (n, c) = (a.n, a.c);
        let (inp, w, bias) = (
            self.get(a.inp, n * c)?,
            self.get(a.w, c)?,
            self.get(a.bias, c)?,
        );
        let (mut out, mut mean, mut rstd) = (vec![0.0; n * c], vec![0.0; n], vec![0.0; n]);
        r::layernorm_forward(LayernormForward {
            out: &mut out,
            mean: &mut mean,
            rstd: &mut rstd,
            inp: &inp,
            w: &w,
            bias: &bias,
            n,
            c,
        });
        self.put(a.out, &out)?;
        self.put(a.mean, &mean)?;
        self.put(a.rstd, &rstd)
    }
    fn layernorm_backward(&self, a: LayernormBackward) -> Result<()> {
        let (n, c) = (a.n, a.c);
        let (mut dinp, mut dw, mut db) = (
            self.get(a.dinp, n * c)?,
            self.get(a.dw, c)?,
            self.get(a.db, c)?,
        );
        let (dout, inp, w) = (
            self.get(a.dout, n * c)?,
            self.get(a.inp, n * c)?,
            self.get(a.w, c)?,
        );
        let (mean, rstd) = (self.get(a.mean, n)?, self.get(a.rstd, n)?);
        r::layernorm_backward(LayernormBackward {
            dinp: &mut dinp,
            dw: &mut dw,
            db: &mut db,
            dout: &dout,
            inp: &inp,
            w: &w,
            mean: &mean,
            rstd: &rstd,
            n,
            c,
        });
        self.put(a.dinp, &dinp)?;
        self.put(a.dw, &dw)?;
        self.put(a.db, &db)
    }
    fn matmul_forward(&self, a: MatmulForward) -> Result<()> {
        let (n, c, oc) = (a.n, a.c, a.oc);
        let (inp, weight) = (self.get(a.inp, n * c)?, self.get(a.weight, oc * c)?);
        let bias = a.bias.map(|p| self.get(p, oc)).transpose()?;
        let mut out = vec![0.0; n * oc];
        r::matmul_forward(MatmulForward {
            out: &mut out,
            inp: &inp,
            weight: &weight,
            bias: bias.as_deref(),
            n,
            c,
            oc,
        });
        self.put(a.out, &out)
    }
    fn matmul_backward(&self, a: MatmulBackward) -> Result<()> {
        let (n, c, oc) = (a.n, a.c, a.oc);
        // dinp is overwritten: start from zeros whatever the reference does with it.
        let mut dinp = vec![0.0; n * c];
        let mut dweight = self.get(a.dweight, oc * c)?;
        let mut dbias = a.dbias.map(|p| self.get(p, oc)).transpose()?;
        let (dout, inp, weight) = (
            self.get(a.dout, n * oc)?,
            self.get(a.inp, n * c)?,
            self.get(a.weight, oc * c)?,
        );
        r::matmul_backward(MatmulBackward {
            dinp: &mut dinp,
            dweight: &mut dweight,
            dbias: dbias.as_deref_mut(),
            dout: &dout,
            inp: &inp,
            weight: &weight,
            n,
            c,
            oc,
        });
        self.put(a.dinp, &dinp)?;
        self.put(a.dweight, &dweight)?;
        if let (Some(p), Some(v)) = (a.dbias, dbias) {
            self.put(p, &v)?;
        }
        Ok(())
    }
    fn attention_forward(&self, a: AttentionForward) -> Result<()> {
        let (b, t, c, nh) = (a.b, a.t, a.c, a.nh);
        let inp = self.get(a.inp, b * t * 3 * c)?;
        let (mut out, mut att) = (vec![0.0; b * t * c], vec![0.0; b * nh * t * t]);
        let mut qkvr = vec![0.0; b * t * 3 * c];
        r::attention_forward(AttentionForward {
            out: &mut out,
            qkvr: &mut qkvr,
            att: &mut att,
            inp: &inp,
            b,
            t,
            c,
            nh,
        });
        self.put(a.out, &out)?;
        self.put(a.att, &att)?;
        self.put(a.qkvr, &qkvr)
    }
    fn attention_backward(&self, a: AttentionBackward) -> Result<()> {
        let (b, t, c, nh) = (a.b, a.t, a.c, a.nh);
        let mut dinp = vec![0.0; b * t * 3 * c];
        let (dout, qkvr, att) = (
            self.get(a.dout, b * t * c)?,
            self.get(a.qkvr, b * t * 3 * c)?,
            self.get(a.att, b * nh * t * t)?,
        );
        r::attention_backward(AttentionBackward {
            dinp: &mut dinp,
            dqkvr: &mut [],
            datt: &mut [],
            scratch: &mut [],
            dout: &dout,
            qkvr: &qkvr,
            att: &att,
            b,
            t,
            c,
            nh,
        });
        self.put(a.dinp, &dinp)
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
    fn fused_classifier(&self, a: FusedClassifier) -> Result<()> {
        let n = a.n;
        let mut logits = self.get(a.logits, n * a.vp)?;
        let targets = self.get_i(a.targets, n)?;
        let mut losses = vec![0.0; n];
        r::fused_classifier(FusedClassifier {
            logits: &mut logits,
            losses: &mut losses,
            targets: &targets,
            n,
            v: a.v,
            vp: a.vp,
            dloss: a.dloss,
        });
        self.put(a.logits, &logits)?;
        self.put(a.losses, &losses)
    }
    fn adamw(&self, a: Adamw) -> Result<()> {
        let n = a.n;
        let (mut params, grads, mut m, mut v) = (
            self.get(a.params, n)?,
            self.get(a.grads, n)?,
            self.get(a.m, n)?,
            self.get(a.v, n)?,
        );
        r::adamw(Adamw {
            params: &mut params,
            grads: &grads,
            m: &mut m,
            v: &mut v,
            n,
            step: a.step,
        });
        self.put(a.params, &params)?;
        self.put(a.m, &m)?;
        self.put(a.v, &v)
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
