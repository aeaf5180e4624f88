//! The model's GPU kernels (gpt/kernels/*.cu) and cuBLAS matmuls behind one handle, [`Ops`].
//!
//! All tensors are fp32, row-major, in llm.c's GPT-2 layout (N = B*T rows of width C; NH heads
//! of size hs = C/NH; V vocabulary entries padded to Vp columns). Device memory is passed as raw
//! addresses ([`F32Ptr`], [`I32Ptr`]) so that one parameter/gradient/activation arena can be
//! sliced freely with [`F32Ptr::at`].
//!
//! Every operation is only enqueued on the stream given to [`Ops::new`]; nothing synchronises
//! the host. Argument errors (shapes, null or misaligned addresses) are returned before anything
//! is enqueued; a kernel fault shows up as a CUDA error at the caller's next synchronisation.
//!
//! Determinism: apart from cuBLAS (bitwise reproducible on one GPU model and library version),
//! no kernel uses atomics or a launch-dependent reduction order. Every reduction (bias and
//! LayerNorm parameter gradients, embedding gradients, sum of squares) uses a partition that
//! depends only on the shape, so equal inputs give equal bits on every run.
//!
//! Safety choice: the methods are safe `fn`s although they take raw device addresses, as the
//! shared API asks (call sites stay free of `unsafe`). The addresses must lie in live device
//! allocations of this stream's context, large enough for the stated shapes, and outputs must
//! not overlap inputs unless a method says so. A wrong address cannot be detected here: the
//! kernel then faults (the context becomes unusable and the next synchronisation reports it) or
//! overwrites other device memory; host memory is only at risk if the address names a
//! host allocation mapped into the device's address space.
#![allow(clippy::too_many_arguments)]

use std::sync::{Arc, Mutex};

use cudarc::cublas::sys::{cublasMath_t, cublasOperation_t};
use cudarc::cublas::{result as blas, CudaBlas};
use cudarc::driver::{
    result as drv, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;

use crate::error::{GptError, Result};
use crate::op_args::{
    Adamw, AttentionBackward, AttentionForward, EncoderBackward, EncoderForward, FusedClassifier,
    LayernormBackward, LayernormForward, MatmulBackward, MatmulForward,
};
pub use crate::op_args::{F32Ptr, I32Ptr};

/// Declares the kernel index `K` and the table of (module, function) names it indexes.
macro_rules! kernels {
    ($($variant:ident => ($module:literal, $name:literal)),* $(,)?) => {
        #[derive(Clone, Copy, Debug)]
        enum K { $($variant),* }
        /// (module = kernels/<module>.cu, extern "C" function) of every kernel, in `K` order.
        const KERNELS: &[(&str, &str)] = &[$(($module, $name)),*];
    };
}

kernels! {
    EncoderForward => ("encoder", "encoder_forward"),
    EncoderBackwardWpe => ("encoder", "encoder_backward_wpe"),
    EncoderBackwardWte => ("encoder", "encoder_backward_wte"),
    LayernormForward => ("layernorm", "layernorm_forward"),
    LayernormBackwardInput => ("layernorm", "layernorm_backward_input"),
    LayernormBackwardParamsPartial => ("layernorm", "layernorm_backward_params_partial"),
    ColumnSumPartial => ("reduce", "column_sum_partial"),
    SumPartialsAccumulate => ("reduce", "sum_partials_accumulate"),
    SumSquaresPartial => ("reduce", "sum_squares_partial"),
    SumSquaresFinal => ("reduce", "sum_squares_final"),
    GeluForward => ("gelu", "gelu_forward"),
    GeluBackward => ("gelu", "gelu_backward"),
    AddInplace => ("elementwise", "add_inplace"),
    ScaleInplace => ("elementwise", "scale_inplace"),
    ResidualForward => ("elementwise", "residual_forward"),
    AddBias => ("elementwise", "add_bias"),
    Adamw => ("adamw", "adamw"),
    FusedClassifier => ("classifier", "fused_classifier"),
    AttentionPermute => ("attention", "attention_permute"),
    AttentionUnpermuteQkv => ("attention", "attention_unpermute_qkv"),
    AttentionPermuteHeads => ("attention", "attention_permute_heads"),
    AttentionSoftmaxForward => ("attention", "attention_softmax_forward"),
    AttentionSoftmaxBackward => ("attention", "attention_softmax_backward"),
}

/// Threads per block of the 1-D and warp-per-row kernels.
const BLOCK: u32 = 256;
/// Threads per block of the classifier (one block per row of Vp logits).
const CLASSIFIER_BLOCK: u32 = 512;
/// Most row blocks of a column reduction (partials per column, see `row_partition`).
const MAX_ROW_PARTS: usize = 128;
/// Fewest rows per block of a column reduction.
const MIN_ROWS_PER_PART: usize = 32;
/// Most blocks of the sum-of-squares first stage.
const MAX_SQ_PARTS: usize = 1024;
/// Elements per thread the sum-of-squares first stage aims for.
const SQ_ELEMS_PER_THREAD: usize = 16;

/// One kernel argument (the kernels take device addresses, int, long long and float).
enum Arg {
    Ptr(u64),
    I32(i32),
    I64(i64),
    F32(f32),
}

impl From<F32Ptr> for Arg {
    fn from(p: F32Ptr) -> Arg {
        Arg::Ptr(p.0)
    }
}
impl From<I32Ptr> for Arg {
    fn from(p: I32Ptr) -> Arg {
        Arg::Ptr(p.0)
    }
}
impl From<i32> for Arg {
    fn from(v: i32) -> Arg {
        Arg::I32(v)
    }
}
impl From<i64> for Arg {
    fn from(v: i64) -> Arg {
        Arg::I64(v)
    }
}
impl From<f32> for Arg {
    fn from(v: f32) -> Arg {
        Arg::F32(v)
    }
}

/// Loaded kernels and a cuBLAS handle, all bound to one stream.
///
/// `Ops` is `Send + Sync`, but its operations are meant to be issued from one thread at a time:
/// they all run on one stream, so concurrent callers would interleave their work on it anyway.
/// An internal scratch buffer (for the deterministic reductions) is guarded by a mutex.
pub struct Ops {
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    funcs: Vec<CudaFunction>,
    scratch: Mutex<Option<CudaSlice<f32>>>,
}

impl Ops {
    /// Loads every kernel module (crate::fatbins) into the stream's context and creates a cuBLAS
    /// handle bound to the stream (FP32 math, TF32 off).
    pub fn new(stream: Arc<CudaStream>) -> Result<Ops> {
        // SAFETY: only tries to dlopen libcublas under the names cudarc would use.
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            return Err(GptError::NoCublas {
                detail: format!(
                    "none of {:?} could be opened",
                    cudarc::get_lib_name_candidates("cublas")
                ),
            });
        }
        let ctx = stream.context().clone();
        let mut modules = Vec::new();
        for (name, bytes) in crate::fatbins::FATBINS {
            modules.push((*name, ctx.load_module(Ptx::from_binary(bytes.to_vec()))?));
        }
        let mut funcs = Vec::with_capacity(KERNELS.len());
        for (module, function) in KERNELS {
            let m = modules
                .iter()
                .find(|(name, _)| name == module)
                .map(|(_, m)| m)
                .ok_or_else(|| {
                    GptError::Config(format!(
                        "kernel module {module} is missing from this build (gpt/kernels/{module}.cu); \
                         rebuild the crate"
                    ))
                })?;
            funcs.push(m.load_function(function)?);
        }
        let blas = CudaBlas::new(stream.clone())?;
        Ok(Ops {
            stream,
            blas,
            funcs,
            scratch: Mutex::new(None),
        })
    }

    /// The stream every operation is enqueued on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Lets cuBLAS use TF32 tensor cores for the fp32 matmuls (faster, ~1e-3 relative error per
    /// product instead of ~1e-6). Off by default.
    pub fn set_tf32(&mut self, on: bool) -> Result<()> {
        let mode = if on {
            cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH
        } else {
            cublasMath_t::CUBLAS_DEFAULT_MATH
        };
        self.stream.context().bind_to_thread()?;
        // SAFETY: the handle is live (owned by self.blas).
        unsafe { cudarc::cublas::sys::cublasSetMathMode(*self.blas.handle(), mode) }.result()?;
        Ok(())
    }

    /// x[..n] = 0.
    pub fn zero(&self, x: F32Ptr, n: usize) -> Result<()> {
        const OP: &str = "zero";
        if n == 0 {
            return Ok(());
        }
        check_ptrs(OP, &[("x", x.0)])?;
        let bytes = bytes(OP, n)?;
        self.stream.context().bind_to_thread()?;
        // SAFETY: the caller names n floats at x (see the module's safety note).
        unsafe { drv::memset_d8_async(x.0, 0, bytes, self.stream.cu_stream()) }?;
        Ok(())
    }

    /// dst[..n] = src[..n] (the ranges must not overlap).
    pub fn copy(&self, dst: F32Ptr, src: F32Ptr, n: usize) -> Result<()> {
        const OP: &str = "copy";
        if n == 0 {
            return Ok(());
        }
        check_ptrs(OP, &[("dst", dst.0), ("src", src.0)])?;
        let bytes = bytes(OP, n)?;
        if dst.0 < src.0 + bytes as u64 && src.0 < dst.0 + bytes as u64 {
            return Err(invalid(
                OP,
                "source and destination overlap; copy through a temporary",
            ));
        }
        self.stream.context().bind_to_thread()?;
        // SAFETY: the caller names n floats at dst and src; they do not overlap (checked).
        unsafe { drv::memcpy_dtod_async(dst.0, src.0, bytes, self.stream.cu_stream()) }?;
        Ok(())
    }

    /// dst[..n] += src[..n].
    pub fn add_inplace(&self, dst: F32Ptr, src: F32Ptr, n: usize) -> Result<()> {
        const OP: &str = "add_inplace";
        if n == 0 {
            return Ok(());
        }
        check_ptrs(OP, &[("dst", dst.0), ("src", src.0)])?;
        self.launch_1d(
            K::AddInplace,
            n,
            &[dst.into(), src.into(), long(OP, "n", n)?.into()],
        )
    }

    /// x[..n] *= s.
    pub fn scale_inplace(&self, x: F32Ptr, s: f32, n: usize) -> Result<()> {
        const OP: &str = "scale_inplace";
        if n == 0 {
            return Ok(());
        }
        check_ptrs(OP, &[("x", x.0)])?;
        self.launch_1d(
            K::ScaleInplace,
            n,
            &[x.into(), s.into(), long(OP, "n", n)?.into()],
        )
    }

    /// [`EncoderForward`]. Tokens must lie in 0..V (wte's rows): the kernel cannot check them
    /// (V is not an argument), the data loader does.
    pub fn encoder_forward(&self, a: EncoderForward) -> Result<()> {
        const OP: &str = "encoder_forward";
        let (b, t, c) = (a.b, a.t, a.c);
        let n = prod(OP, &[b, t])?;
        let total = prod(OP, &[n, c])?;
        if total == 0 {
            return Ok(());
        }
        check_ptrs(
            OP,
            &[
                ("out", a.out.0),
                ("tokens", a.tokens.0),
                ("wte", a.wte.0),
                ("wpe", a.wpe.0),
            ],
        )?;
        let args = [
            a.out.into(),
            a.tokens.into(),
            a.wte.into(),
            a.wpe.into(),
            int(OP, "B*T", n)?.into(),
            int(OP, "T", t)?.into(),
            int(OP, "C", c)?.into(),
        ];
        self.launch_1d(K::EncoderForward, total, &args)
    }

    /// [`EncoderBackward`]. Deterministic without atomics (each dwte row is summed by one block,
    /// positions in order; see encoder.cu), in the same order as the CPU reference.
    pub fn encoder_backward(&self, a: EncoderBackward) -> Result<()> {
        const OP: &str = "encoder_backward";
        let (b, t, c) = (a.b, a.t, a.c);
        let n = prod(OP, &[b, t])?;
        if prod(OP, &[n, c])? == 0 {
            return Ok(());
        }
        check_ptrs(
            OP,
            &[
                ("dwte", a.dwte.0),
                ("dwpe", a.dwpe.0),
                ("dout", a.dout.0),
                ("tokens", a.tokens.0),
            ],
        )?;
        let (bi, ti, ci, ni) = (
            int(OP, "B", b)?,
            int(OP, "T", t)?,
            int(OP, "C", c)?,
            int(OP, "B*T", n)?,
        );
        self.launch_1d(
            K::EncoderBackwardWpe,
            prod(OP, &[t, c])?,
            &[
                a.dwpe.into(),
                a.dout.into(),
                bi.into(),
                ti.into(),
                ci.into(),
            ],
        )?;
        self.launch(
            K::EncoderBackwardWte,
            (ni as u32, 1, 1),
            (BLOCK, 1, 1),
            &[
                a.dwte.into(),
                a.dout.into(),
                a.tokens.into(),
                ni.into(),
                ci.into(),
            ],
        )
    }

    /// [`LayernormForward`].
    pub fn layernorm_forward(&self, a: LayernormForward) -> Result<()> {
        const OP: &str = "layernorm_forward";
        let (n, c) = (a.n, a.c);
        if n == 0 {
            return Ok(());
        }
        if c == 0 {
            return Err(invalid(
                OP,
                "C is 0: a LayerNorm row needs at least one element",
            ));
        }
        check_ptrs(
            OP,
            &[
                ("out", a.out.0),
                ("mean", a.mean.0),
                ("rstd", a.rstd.0),
                ("inp", a.inp.0),
                ("w", a.w.0),
                ("bias", a.bias.0),
            ],
        )?;
        prod(OP, &[n, c])?;
        let args = [
            a.out.into(),
            a.mean.into(),
            a.rstd.into(),
            a.inp.into(),
            a.w.into(),
            a.bias.into(),
            int(OP, "N", n)?.into(),
            int(OP, "C", c)?.into(),
        ];
        self.launch_rows(K::LayernormForward, n, &args)
    }

    /// [`LayernormBackward`]. dinp may be the same buffer as dout (then dout += the input
    /// gradient).
    pub fn layernorm_backward(&self, a: LayernormBackward) -> Result<()> {
        const OP: &str = "layernorm_backward";
        let (n, c) = (a.n, a.c);
        if n == 0 || c == 0 {
            return Ok(());
        }
        check_ptrs(
            OP,
            &[
                ("dinp", a.dinp.0),
                ("dw", a.dw.0),
                ("db", a.db.0),
                ("dout", a.dout.0),
                ("inp", a.inp.0),
                ("w", a.w.0),
                ("mean", a.mean.0),
                ("rstd", a.rstd.0),
            ],
        )?;
        prod(OP, &[n, c])?;
        let (ni, ci) = (int(OP, "N", n)?, int(OP, "C", c)?);
        let (rows_per, parts) = row_partition(n);
        self.with_scratch(2 * parts * c, |partial| {
            self.launch(
                K::LayernormBackwardParamsPartial,
                (c.div_ceil(32) as u32, parts as u32, 1),
                (32, 8, 1),
                &[
                    partial.into(),
                    a.dout.into(),
                    a.inp.into(),
                    a.mean.into(),
                    a.rstd.into(),
                    ni.into(),
                    ci.into(),
                    (rows_per as i32).into(),
                ],
            )?;
            self.sum_partials(a.dw, partial, parts, c)?;
            self.sum_partials(a.db, partial.at(parts * c), parts, c)
        })?;
        // dinp last, after every read of dout: a dinp that aliases dout stays correct.
        self.launch_rows(
            K::LayernormBackwardInput,
            n,
            &[
                a.dinp.into(),
                a.dout.into(),
                a.inp.into(),
                a.w.into(),
                a.mean.into(),
                a.rstd.into(),
                ni.into(),
                ci.into(),
            ],
        )
    }

    /// [`MatmulForward`] (cuBLAS).
    pub fn matmul_forward(&self, a: MatmulForward) -> Result<()> {
        const OP: &str = "matmul_forward";
        let (bias, n, c, oc) = (a.bias, a.n, a.c, a.oc);
        if n == 0 || oc == 0 {
            return Ok(());
        }
        check_ptrs(
            OP,
            &[("out", a.out.0), ("inp", a.inp.0), ("weight", a.weight.0)],
        )?;
        if let Some(bias) = bias {
            check_ptrs(OP, &[("bias", bias.0)])?;
        }
        let (ni, ci, oci) = (int(OP, "N", n)?, int(OP, "C", c)?, int(OP, "OC", oc)?);
        self.gemm(
            OP,
            &matmul_forward_gemm(a.out, a.inp, a.weight, ni, ci, oci),
        )?;
        if let Some(bias) = bias {
            let total = prod(OP, &[n, oc])?;
            self.launch_1d(
                K::AddBias,
                total,
                &[a.out.into(), bias.into(), ni.into(), oci.into()],
            )?;
        }
        Ok(())
    }

    /// [`MatmulBackward`] (cuBLAS; the bias gradient by a fixed-order column reduction).
    pub fn matmul_backward(&self, a: MatmulBackward) -> Result<()> {
        const OP: &str = "matmul_backward";
        let (dbias, n, c, oc) = (a.dbias, a.n, a.c, a.oc);
        if n == 0 {
            return Ok(());
        }
        check_ptrs(
            OP,
            &[
                ("dinp", a.dinp.0),
                ("dweight", a.dweight.0),
                ("dout", a.dout.0),
                ("inp", a.inp.0),
                ("weight", a.weight.0),
            ],
        )?;
        if let Some(dbias) = dbias {
            check_ptrs(OP, &[("dbias", dbias.0)])?;
        }
        let (ni, ci, oci) = (int(OP, "N", n)?, int(OP, "C", c)?, int(OP, "OC", oc)?);
        if oc == 0 {
            // An empty sum: dinp = 0, nothing to accumulate.
            return self.zero(a.dinp, prod(OP, &[n, c])?);
        }
        if c > 0 {
            for g in matmul_backward_gemms(a.dinp, a.dweight, a.dout, a.inp, a.weight, ni, ci, oci)
            {
                self.gemm(OP, &g)?;
            }
        }
        if let Some(dbias) = dbias {
            let (rows_per, parts) = row_partition(n);
            self.with_scratch(parts * oc, |partial| {
                self.launch(
                    K::ColumnSumPartial,
                    (oc.div_ceil(32) as u32, parts as u32, 1),
                    (32, 8, 1),
                    &[
                        partial.into(),
                        a.dout.into(),
                        ni.into(),
                        oci.into(),
                        (rows_per as i32).into(),
                    ],
                )?;
                self.sum_partials(dbias, partial, parts, oc)
            })?;
        }
        Ok(())
    }

    /// [`AttentionForward`]. qkvr holds q, k, v in the per-head layout [B, NH, T, hs] (q first,
    /// then k, then v).
    pub fn attention_forward(&self, a: AttentionForward) -> Result<()> {
        const OP: &str = "attention_forward";
        let (b, t, c, nh) = (a.b, a.t, a.c, a.nh);
        let s = AttShape::new(OP, b, t, c, nh)?;
        if s.total == 0 {
            return Ok(());
        }
        check_ptrs(
            OP,
            &[
                ("out", a.out.0),
                ("qkvr", a.qkvr.0),
                ("att", a.att.0),
                ("inp", a.inp.0),
            ],
        )?;
        let (q, k, v) = (a.qkvr, a.qkvr.at(s.total), a.qkvr.at(2 * s.total));
        self.launch_1d(K::AttentionPermute, s.total, &s.permute_args(a.qkvr, a.inp))?;
        self.gemm(OP, &s.scores_gemm(q, k, a.att))?;
        self.launch_rows(
            K::AttentionSoftmaxForward,
            s.rows,
            &[a.att.into(), int(OP, "B*NH*T", s.rows)?.into(), s.ti.into()],
        )?;
        for g in s.values_gemms(v, a.att, a.out) {
            self.gemm(OP, &g)?;
        }
        Ok(())
    }

    /// [`AttentionBackward`]: qkvr and att are what [`Ops::attention_forward`] saved.
    pub fn attention_backward(&self, a: AttentionBackward) -> Result<()> {
        const OP: &str = "attention_backward";
        let (b, t, c, nh) = (a.b, a.t, a.c, a.nh);
        let s = AttShape::new(OP, b, t, c, nh)?;
        if s.total == 0 {
            return Ok(());
        }
        check_ptrs(
            OP,
            &[
                ("dinp", a.dinp.0),
                ("dqkvr", a.dqkvr.0),
                ("datt", a.datt.0),
                ("scratch", a.scratch.0),
                ("dout", a.dout.0),
                ("qkvr", a.qkvr.0),
                ("att", a.att.0),
            ],
        )?;
        let (q, k, v) = (a.qkvr, a.qkvr.at(s.total), a.qkvr.at(2 * s.total));
        let (dq, dk, dv) = (a.dqkvr, a.dqkvr.at(s.total), a.dqkvr.at(2 * s.total));
        let dy = a.scratch;
        self.launch_1d(
            K::AttentionPermuteHeads,
            s.total,
            &s.permute_args(dy, a.dout),
        )?;
        self.gemm(OP, &s.datt_gemm(dy, v, a.datt))?;
        self.gemm(OP, &s.dv_gemm(dy, a.att, dv))?;
        // datt becomes the gradient of the scaled scores (0 in the masked triangle).
        self.launch_rows(
            K::AttentionSoftmaxBackward,
            s.rows,
            &[
                a.datt.into(),
                a.att.into(),
                int(OP, "B*NH*T", s.rows)?.into(),
                s.ti.into(),
            ],
        )?;
        self.gemm(OP, &s.dq_gemm(k, a.datt, dq))?;
        self.gemm(OP, &s.dk_gemm(q, a.datt, dk))?;
        self.launch_1d(
            K::AttentionUnpermuteQkv,
            s.total,
            &s.permute_args(a.dinp, a.dqkvr),
        )
    }

    /// out = gelu(inp) (tanh approximation), n elements.
    pub fn gelu_forward(&self, out: F32Ptr, inp: F32Ptr, n: usize) -> Result<()> {
        const OP: &str = "gelu_forward";
        if n == 0 {
            return Ok(());
        }
        check_ptrs(OP, &[("out", out.0), ("inp", inp.0)])?;
        self.launch_1d(
            K::GeluForward,
            n,
            &[out.into(), inp.into(), long(OP, "n", n)?.into()],
        )
    }

    /// dinp = gelu'(inp) * dout (OVERWRITTEN; dinp may be the same buffer as dout).
    pub fn gelu_backward(&self, dinp: F32Ptr, inp: F32Ptr, dout: F32Ptr, n: usize) -> Result<()> {
        const OP: &str = "gelu_backward";
        if n == 0 {
            return Ok(());
        }
        check_ptrs(OP, &[("dinp", dinp.0), ("inp", inp.0), ("dout", dout.0)])?;
        let args = [
            dinp.into(),
            inp.into(),
            dout.into(),
            long(OP, "n", n)?.into(),
        ];
        self.launch_1d(K::GeluBackward, n, &args)
    }

    /// out = a + b, n elements (out may be a or b).
    pub fn residual_forward(&self, out: F32Ptr, a: F32Ptr, b: F32Ptr, n: usize) -> Result<()> {
        const OP: &str = "residual_forward";
        if n == 0 {
            return Ok(());
        }
        check_ptrs(OP, &[("out", out.0), ("a", a.0), ("b", b.0)])?;
        let args = [out.into(), a.into(), b.into(), long(OP, "n", n)?.into()];
        self.launch_1d(K::ResidualForward, n, &args)
    }

    /// [`FusedClassifier`], one block per row.
    pub fn fused_classifier(&self, a: FusedClassifier) -> Result<()> {
        const OP: &str = "fused_classifier";
        let (n, v, vp, dloss) = (a.n, a.v, a.vp, a.dloss);
        if v == 0 || vp < v {
            return Err(invalid(
                OP,
                &format!("need 1 <= V <= Vp, got V = {v}, Vp = {vp}; Vp is V padded up"),
            ));
        }
        if n == 0 {
            return Ok(());
        }
        check_ptrs(
            OP,
            &[
                ("logits", a.logits.0),
                ("losses", a.losses.0),
                ("targets", a.targets.0),
            ],
        )?;
        prod(OP, &[n, vp])?;
        let grid = u32::try_from(n)
            .ok()
            .filter(|&g| g <= i32::MAX as u32)
            .ok_or_else(|| invalid(OP, &format!("{n} rows exceed the 2^31 - 1 grid limit")))?;
        self.launch(
            K::FusedClassifier,
            (grid, 1, 1),
            (CLASSIFIER_BLOCK, 1, 1),
            &[
                a.logits.into(),
                a.losses.into(),
                a.targets.into(),
                int(OP, "V", v)?.into(),
                int(OP, "Vp", vp)?.into(),
                dloss.unwrap_or(0.0).into(),
                i32::from(dloss.is_some()).into(),
            ],
        )
    }

    /// [`Adamw`], with the bias corrections computed once on the host.
    pub fn adamw(&self, a: Adamw) -> Result<()> {
        const OP: &str = "adamw";
        let n = a.n;
        let (bc1, bc2) = adamw_bias_corrections(OP, a.step.beta1, a.step.beta2, a.step.t)?;
        if n == 0 {
            return Ok(());
        }
        check_ptrs(
            OP,
            &[
                ("params", a.params.0),
                ("grads", a.grads.0),
                ("m", a.m.0),
                ("v", a.v.0),
            ],
        )?;
        let args = [
            a.params.into(),
            a.grads.into(),
            a.m.into(),
            a.v.into(),
            long(OP, "n", n)?.into(),
            a.step.lr.into(),
            a.step.beta1.into(),
            a.step.beta2.into(),
            bc1.into(),
            bc2.into(),
            a.step.eps.into(),
            a.step.weight_decay.into(),
            a.step.grad_scale.into(),
        ];
        self.launch_1d(K::Adamw, n, &args)
    }

    /// out\[0\] = sum of squares of x\[..n\] (OVERWRITTEN, deterministic: fixed reduction order).
    ///
    /// Accumulated in double precision; the block count depends only on n.
    pub fn sum_squares(&self, out: F32Ptr, x: F32Ptr, n: usize) -> Result<()> {
        const OP: &str = "sum_squares";
        check_ptrs(OP, &[("out", out.0)])?;
        if n == 0 {
            return self.zero(out, 1);
        }
        check_ptrs(OP, &[("x", x.0)])?;
        let parts = sum_squares_parts(n);
        // Two f32 slots per double partial (the scratch allocation is 256-byte aligned).
        self.with_scratch(2 * parts, |partial| {
            self.launch(
                K::SumSquaresPartial,
                (parts as u32, 1, 1),
                (BLOCK, 1, 1),
                &[partial.into(), x.into(), long(OP, "n", n)?.into()],
            )?;
            self.launch(
                K::SumSquaresFinal,
                (1, 1, 1),
                (BLOCK, 1, 1),
                &[out.into(), partial.into(), (parts as i32).into()],
            )
        })
    }

    // ---------------------------------------------------------------- helpers

    /// dst[c] += sum over the parts of partial[part, c] (in part order), c in 0..cols.
    fn sum_partials(&self, dst: F32Ptr, partial: F32Ptr, parts: usize, cols: usize) -> Result<()> {
        self.launch(
            K::SumPartialsAccumulate,
            (cols.div_ceil(BLOCK as usize) as u32, 1, 1),
            (BLOCK, 1, 1),
            &[
                dst.into(),
                partial.into(),
                (parts as i32).into(),
                (cols as i32).into(),
            ],
        )
    }

    /// Runs `f` with at least `len` floats of device scratch (grown on demand, kept for reuse).
    /// The lock is held while `f` enqueues, so no other caller can reuse or free the buffer
    /// before the work that reads it is on the stream; stream order does the rest.
    fn with_scratch<R>(&self, len: usize, f: impl FnOnce(F32Ptr) -> Result<R>) -> Result<R> {
        // A poisoned lock only means another caller panicked; the buffer itself is still fine.
        let mut guard = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let fits = guard.as_ref().is_some_and(|s| s.len() >= len);
        if !fits {
            // Free first (stream-ordered, after all earlier users) to not hold both buffers.
            *guard = None;
            *guard = Some(self.stream.alloc_zeros::<f32>(len.max(1 << 16))?);
        }
        let ptr = match guard.as_ref() {
            Some(s) => F32Ptr(s.device_ptr(&self.stream).0),
            None => unreachable!("scratch was just allocated"),
        };
        f(ptr)
    }

    /// Launches kernel `k` on the stream.
    fn launch(
        &self,
        k: K,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        args: &[Arg],
    ) -> Result<()> {
        let mut builder = self.stream.launch_builder(&self.funcs[k as usize]);
        for a in args {
            match a {
                Arg::Ptr(x) => builder.arg(x),
                Arg::I32(x) => builder.arg(x),
                Arg::I64(x) => builder.arg(x),
                Arg::F32(x) => builder.arg(x),
            };
        }
        let cfg = LaunchConfig {
            grid_dim: grid,
            block_dim: block,
            shared_mem_bytes: 0,
        };
        // SAFETY: each call site passes the arguments in the order and with the types of the
        // kernel's extern "C" signature in kernels/*.cu (CUdeviceptr = u64, int = i32,
        // long long = i64, float = f32); the addresses follow the module's safety note.
        unsafe { builder.launch(cfg) }?;
        Ok(())
    }

    /// One thread per element over `total` elements.
    fn launch_1d(&self, k: K, total: usize, args: &[Arg]) -> Result<()> {
        let blocks = total.div_ceil(BLOCK as usize);
        let grid = u32::try_from(blocks)
            .ok()
            .filter(|&g| g <= i32::MAX as u32)
            .ok_or_else(|| {
                invalid(
                    KERNELS[k as usize].1,
                    &format!("{total} elements exceed one launch"),
                )
            })?;
        self.launch(k, (grid, 1, 1), (BLOCK, 1, 1), args)
    }

    /// One warp per row over `rows` rows.
    fn launch_rows(&self, k: K, rows: usize, args: &[Arg]) -> Result<()> {
        let per_block = (BLOCK / 32) as usize;
        let grid = rows.div_ceil(per_block) as u32; // rows <= i32::MAX, checked by the callers
        self.launch(k, (grid, 1, 1), (BLOCK, 1, 1), args)
    }

    /// A (strided-batched) column-major cuBLAS SGEMM: C = alpha op(A) op(B) + beta C.
    fn gemm(&self, op: &'static str, g: &Gemm) -> Result<()> {
        let trans = |t: bool| {
            if t {
                cublasOperation_t::CUBLAS_OP_T
            } else {
                cublasOperation_t::CUBLAS_OP_N
            }
        };
        let batch = i32::try_from(g.batch)
            .map_err(|_| invalid(op, &format!("{} GEMM batches exceed 2^31 - 1", g.batch)))?;
        if batch == 0 {
            return Ok(());
        }
        self.stream.context().bind_to_thread()?;
        let h = *self.blas.handle();
        let (a, b, c) = (
            g.a.0 .0 as *const f32,
            g.b.0 .0 as *const f32,
            g.c.0 .0 as *mut f32,
        );
        // SAFETY: the operands are device addresses of the sizes the callers' shapes imply
        // (module safety note); alpha and beta are host values (cuBLAS's default pointer mode).
        unsafe {
            if batch == 1 {
                blas::sgemm(
                    h,
                    trans(g.ta),
                    trans(g.tb),
                    g.m,
                    g.n,
                    g.k,
                    &g.alpha,
                    a,
                    g.a.1,
                    b,
                    g.b.1,
                    &g.beta,
                    c,
                    g.c.1,
                )?;
            } else {
                blas::sgemm_strided_batched(
                    h,
                    trans(g.ta),
                    trans(g.tb),
                    g.m,
                    g.n,
                    g.k,
                    &g.alpha,
                    a,
                    g.a.1,
                    g.a.2,
                    b,
                    g.b.1,
                    g.b.2,
                    &g.beta,
                    c,
                    g.c.1,
                    g.c.2,
                    batch,
                )?;
            }
        }
        Ok(())
    }
}

/// One cuBLAS GEMM, column-major: C = alpha op(A) op(B) + beta C with op(A) m x k, op(B) k x n;
/// operands are (address, leading dimension, batch stride in elements).
#[derive(Clone, Debug, PartialEq)]
struct Gemm {
    ta: bool,
    tb: bool,
    m: i32,
    n: i32,
    k: i32,
    alpha: f32,
    a: (F32Ptr, i32, i64),
    b: (F32Ptr, i32, i64),
    beta: f32,
    c: (F32Ptr, i32, i64),
    batch: usize,
}

// The GEMM plans below are pure functions so that a CPU test (tests::gemm_plans_*) can replay
// them with a plain column-major GEMM and check them against the references. Row-major X[r, c]
// is the column-major matrix X^T (c x r) with leading dimension c.

/// out[n, oc] = inp . weight^T: column-major out^T (oc x n) = weight (read transposed from its
/// column-major c x oc storage) . inp^T (c x n).
fn matmul_forward_gemm(out: F32Ptr, inp: F32Ptr, weight: F32Ptr, n: i32, c: i32, oc: i32) -> Gemm {
    Gemm {
        ta: true,
        tb: false,
        m: oc,
        n,
        k: c,
        alpha: 1.0,
        a: (weight, c, 0),
        b: (inp, c, 0),
        beta: 0.0,
        c: (out, oc, 0),
        batch: 1,
    }
}

/// [dinp = dout . weight (overwritten), dweight += dout^T . inp].
fn matmul_backward_gemms(
    dinp: F32Ptr,
    dweight: F32Ptr,
    dout: F32Ptr,
    inp: F32Ptr,
    weight: F32Ptr,
    n: i32,
    c: i32,
    oc: i32,
) -> [Gemm; 2] {
    [
        // dinp^T (c x n) = weight^T (c x oc, ld c) . dout^T (oc x n, ld oc).
        Gemm {
            ta: false,
            tb: false,
            m: c,
            n,
            k: oc,
            alpha: 1.0,
            a: (weight, c, 0),
            b: (dout, oc, 0),
            beta: 0.0,
            c: (dinp, c, 0),
            batch: 1,
        },
        // dweight^T (c x oc) += inp^T (c x n, ld c) . dout (n x oc: dout^T read transposed).
        Gemm {
            ta: false,
            tb: true,
            m: c,
            n: oc,
            k: n,
            alpha: 1.0,
            a: (inp, c, 0),
            b: (dout, oc, 0),
            beta: 1.0,
            c: (dweight, c, 0),
            batch: 1,
        },
    ]
}

/// Checked attention shape.
struct AttShape {
    b: usize,
    t: usize,
    c: usize,
    nh: usize,
    hs: usize,
    total: usize,
    rows: usize,
    bnh: usize,
    ti: i32,
    ci: i32,
    hsi: i32,
    bi32: i32,
    nhi32: i32,
    head_stride: i64,
    att_stride: i64,
    scale: f32,
}

impl AttShape {
    fn new(op: &'static str, b: usize, t: usize, c: usize, nh: usize) -> Result<AttShape> {
        if nh == 0 || c % nh != 0 {
            return Err(invalid(
                op,
                &format!(
                    "the width C = {c} must be a positive multiple of the head count NH = {nh}"
                ),
            ));
        }
        let hs = c / nh;
        let total = prod(op, &[b, t, c])?;
        let bnh = prod(op, &[b, nh])?;
        let rows = prod(op, &[bnh, t])?;
        prod(op, &[rows, t])?;
        prod(op, &[total, 3])?;
        int(op, "B*NH*T", rows)?;
        Ok(AttShape {
            b,
            t,
            c,
            nh,
            hs,
            total,
            rows,
            bnh,
            ti: int(op, "T", t)?,
            ci: int(op, "C", c)?,
            hsi: int(op, "hs", hs)?,
            bi32: int(op, "B", b)?,
            nhi32: int(op, "NH", nh)?,
            head_stride: (t * hs) as i64,
            att_stride: (t * t) as i64,
            scale: if hs == 0 {
                1.0
            } else {
                1.0 / (hs as f32).sqrt()
            },
        })
    }

    /// One GEMM batched over the B*NH heads of the per-head layout [B, NH, T, hs] / [B, NH, T, T].
    fn head_gemm(
        &self,
        ta: bool,
        tb: bool,
        m: i32,
        k: i32,
        alpha: f32,
        a: (F32Ptr, bool),
        b: (F32Ptr, bool),
        c: (F32Ptr, bool),
    ) -> Gemm {
        // (address, is a T x T matrix) -> (address, leading dimension, batch stride)
        let op = |(p, square): (F32Ptr, bool)| {
            if square {
                (p, self.ti, self.att_stride)
            } else {
                (p, self.hsi, self.head_stride)
            }
        };
        Gemm {
            ta,
            tb,
            m,
            n: self.ti,
            k,
            alpha,
            a: op(a),
            b: op(b),
            beta: 0.0,
            c: op(c),
            batch: self.bnh,
        }
    }

    /// Scaled scores q.k^T / sqrt(hs): column-major att^T (T x T) = k (T x hs, read transposed
    /// from its hs x T storage) . q^T (hs x T), so att[t1, t2] = q[t1] . k[t2] * scale.
    fn scores_gemm(&self, q: F32Ptr, k: F32Ptr, att: F32Ptr) -> Gemm {
        self.head_gemm(
            true,
            false,
            self.ti,
            self.hsi,
            self.scale,
            (k, false),
            (q, false),
            (att, true),
        )
    }

    /// datt[t1, t2] = dy[t1] . v[t2]: the scores' product with (q, k) -> (dy, v), unscaled.
    fn datt_gemm(&self, dy: F32Ptr, v: F32Ptr, datt: F32Ptr) -> Gemm {
        Gemm {
            alpha: 1.0,
            ..self.scores_gemm(dy, v, datt)
        }
    }

    /// dv = att^T . dy: column-major dv^T (hs x T) = dy^T (hs x T) . att (att^T read transposed).
    fn dv_gemm(&self, dy: F32Ptr, att: F32Ptr, dv: F32Ptr) -> Gemm {
        self.head_gemm(
            false,
            true,
            self.hsi,
            self.ti,
            1.0,
            (dy, false),
            (att, true),
            (dv, false),
        )
    }

    /// dq = scale * dS . k: column-major dq^T (hs x T) = k^T (hs x T) . dS^T.
    fn dq_gemm(&self, k: F32Ptr, ds: F32Ptr, dq: F32Ptr) -> Gemm {
        self.head_gemm(
            false,
            false,
            self.hsi,
            self.ti,
            self.scale,
            (k, false),
            (ds, true),
            (dq, false),
        )
    }

    /// dk = scale * dS^T . q: column-major dk^T (hs x T) = q^T (hs x T) . dS.
    fn dk_gemm(&self, q: F32Ptr, ds: F32Ptr, dk: F32Ptr) -> Gemm {
        self.head_gemm(
            false,
            true,
            self.hsi,
            self.ti,
            self.scale,
            (q, false),
            (ds, true),
            (dk, false),
        )
    }

    /// y = att . v written straight into out [B, T, C] (row stride C), as column-major
    /// y^T (hs x T) = v^T (hs x T) . att^T per head. Head (b, h) of out starts at b*T*C + h*hs,
    /// which is not one stride apart over all B*NH heads, so this is one strided batch per head
    /// over b, or per b over the heads, whichever takes fewer calls.
    fn values_gemms(&self, v: F32Ptr, att: F32Ptr, out: F32Ptr) -> Vec<Gemm> {
        let (b, t, c, nh, hs) = (self.b, self.t, self.c, self.nh, self.hs);
        let (t_hs, t_t, t_c) = (t * hs, t * t, t * c);
        let gemm = |a: (F32Ptr, i64), bb: (F32Ptr, i64), cc: (F32Ptr, i64), batch: usize| Gemm {
            ta: false,
            tb: false,
            m: self.hsi,
            n: self.ti,
            k: self.ti,
            alpha: 1.0,
            a: (a.0, self.hsi, a.1),
            b: (bb.0, self.ti, bb.1),
            beta: 0.0,
            c: (cc.0, self.ci, cc.1),
            batch,
        };
        if nh <= b {
            (0..nh)
                .map(|h| {
                    gemm(
                        (v.at(h * t_hs), (nh * t_hs) as i64),
                        (att.at(h * t_t), (nh * t_t) as i64),
                        (out.at(h * hs), t_c as i64),
                        b,
                    )
                })
                .collect()
        } else {
            (0..b)
                .map(|bb| {
                    gemm(
                        (v.at(bb * nh * t_hs), t_hs as i64),
                        (att.at(bb * nh * t_t), t_t as i64),
                        (out.at(bb * t_c), hs as i64),
                        nh,
                    )
                })
                .collect()
        }
    }

    /// (dst, src, B, T, NH, hs): the argument list of the three permute kernels.
    fn permute_args(&self, dst: F32Ptr, src: F32Ptr) -> [Arg; 6] {
        [
            dst.into(),
            src.into(),
            self.bi32.into(),
            self.ti.into(),
            self.nhi32.into(),
            self.hsi.into(),
        ]
    }
}

fn invalid(op: &'static str, detail: &str) -> GptError {
    GptError::InvalidArgument {
        op,
        detail: detail.to_string(),
    }
}

/// Device addresses must be non-null and 4-byte aligned (f32 / i32 data).
fn check_ptrs(op: &'static str, ptrs: &[(&str, u64)]) -> Result<()> {
    for &(name, p) in ptrs {
        if p == 0 {
            return Err(invalid(op, &format!("{name} is a null device address")));
        }
        if p % 4 != 0 {
            return Err(invalid(
                op,
                &format!(
                    "{name} = {p:#x} is not 4-byte aligned; offset f32/i32 arenas with .at(elems)"
                ),
            ));
        }
    }
    Ok(())
}

/// A dimension passed to a kernel as int.
fn int(op: &'static str, name: &str, v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| invalid(op, &format!("{name} = {v} exceeds 2^31 - 1")))
}

/// An element count passed to a kernel as long long.
fn long(op: &'static str, name: &str, v: usize) -> Result<i64> {
    i64::try_from(v).map_err(|_| invalid(op, &format!("{name} = {v} exceeds 2^63 - 1")))
}

/// Byte size of n floats.
fn bytes(op: &'static str, n: usize) -> Result<usize> {
    n.checked_mul(4)
        .ok_or_else(|| invalid(op, &format!("{n} elements overflow a byte count")))
}

/// Product of dimensions, erroring on overflow.
fn prod(op: &'static str, dims: &[usize]) -> Result<usize> {
    dims.iter().try_fold(1usize, |acc, &d| {
        acc.checked_mul(d)
            .ok_or_else(|| invalid(op, &format!("the shape {dims:?} overflows")))
    })
}

/// (rows per part, parts) of a column reduction over n > 0 rows: at least MIN_ROWS_PER_PART
/// rows per part, at most MAX_ROW_PARTS parts. Depends only on n, so the summation order (and
/// the bits) are the same on every GPU and run for the same shape.
fn row_partition(n: usize) -> (usize, usize) {
    let rows_per = MIN_ROWS_PER_PART.max(n.div_ceil(MAX_ROW_PARTS));
    (rows_per, n.div_ceil(rows_per))
}

/// Blocks of the sum-of-squares first stage for n > 0 elements (depends only on n).
fn sum_squares_parts(n: usize) -> usize {
    n.div_ceil(BLOCK as usize * SQ_ELEMS_PER_THREAD)
        .clamp(1, MAX_SQ_PARTS)
}

/// AdamW's bias corrections (1 - beta1^t, 1 - beta2^t), computed in f64, for step t >= 1
/// (shared with [`crate::reference::adamw`]).
pub fn adamw_bias_corrections(
    op: &'static str,
    beta1: f32,
    beta2: f32,
    t: u32,
) -> Result<(f32, f32)> {
    if t == 0 {
        return Err(invalid(
            op,
            "the step t is 1-based (the first step is t = 1)",
        ));
    }
    if !(0.0..1.0).contains(&beta1) || !(0.0..1.0).contains(&beta2) {
        return Err(invalid(
            op,
            &format!("beta1 = {beta1} and beta2 = {beta2} must lie in [0, 1)"),
        ));
    }
    let t = i32::try_from(t).unwrap_or(i32::MAX);
    let bc1 = 1.0 - (beta1 as f64).powi(t);
    let bc2 = 1.0 - (beta2 as f64).powi(t);
    Ok((bc1 as f32, bc2 as f32))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fake device memory for replaying GEMM plans on the CPU: buffer i lives at (i + 1) << 36.
    struct Mem(Vec<Vec<f32>>);

    impl Mem {
        fn ptr(i: usize) -> F32Ptr {
            F32Ptr((i as u64 + 1) << 36)
        }
        fn locate(p: F32Ptr, idx: i64) -> (usize, usize) {
            let buf = (p.0 >> 36) as usize - 1;
            let off = ((p.0 & ((1 << 36) - 1)) / 4) as i64 + idx;
            (
                buf,
                usize::try_from(off).expect("GEMM reads before its buffer"),
            )
        }
        fn get(&self, p: F32Ptr, idx: i64) -> f32 {
            let (b, o) = Mem::locate(p, idx);
            self.0[b][o]
        }
        fn set(&mut self, p: F32Ptr, idx: i64, v: f32) {
            let (b, o) = Mem::locate(p, idx);
            self.0[b][o] = v;
        }
        /// Column-major SGEMM with the BLAS definition (C is not read when beta is 0).
        fn gemm(&mut self, g: &Gemm) {
            let (m, n, k) = (g.m as i64, g.n as i64, g.k as i64);
            let (lda, ldb, ldc) = (g.a.1 as i64, g.b.1 as i64, g.c.1 as i64);
            for bt in 0..g.batch as i64 {
                for j in 0..n {
                    for i in 0..m {
                        let mut acc = 0f64;
                        for l in 0..k {
                            let ai = if g.ta { l + i * lda } else { i + l * lda };
                            let bi = if g.tb { j + l * ldb } else { l + j * ldb };
                            acc += self.get(g.a.0, ai + bt * g.a.2) as f64
                                * self.get(g.b.0, bi + bt * g.b.2) as f64;
                        }
                        let ci = i + j * ldc + bt * g.c.2;
                        let mut v = g.alpha as f64 * acc;
                        if g.beta != 0.0 {
                            v += g.beta as f64 * self.get(g.c.0, ci) as f64;
                        }
                        self.set(g.c.0, ci, v as f32);
                    }
                }
            }
        }
    }

    fn pseudo_random(n: usize, seed: u64) -> Vec<f32> {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    fn assert_near(what: &str, got: &[f32], want: &[f32], tol: f32) {
        assert_eq!(got.len(), want.len());
        let scale = want.iter().fold(1e-6f32, |m, w| m.max(w.abs()));
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() <= tol * scale, "{what}[{i}]: {g} vs {w}");
        }
    }

    /// The matmul GEMM plans, replayed with a CPU GEMM, match the references.
    #[test]
    fn gemm_plans_matmul() {
        use crate::reference as cpu;
        let (n, c, oc) = (5usize, 4usize, 3usize);
        let (x, w, dout) = (
            pseudo_random(n * c, 1),
            pseudo_random(oc * c, 2),
            pseudo_random(n * oc, 3),
        );
        let dw0 = pseudo_random(oc * c, 4);
        // 0 inp, 1 weight, 2 out, 3 dinp, 4 dweight, 5 dout
        let mut mem = Mem(vec![
            x.clone(),
            w.clone(),
            vec![f32::NAN; n * oc],
            vec![f32::NAN; n * c],
            dw0.clone(),
            dout.clone(),
        ]);
        let p = Mem::ptr;
        let (ni, ci, oci) = (n as i32, c as i32, oc as i32);
        mem.gemm(&matmul_forward_gemm(p(2), p(0), p(1), ni, ci, oci));
        let mut want = vec![0.0; n * oc];
        cpu::matmul_forward(MatmulForward {
            out: &mut want,
            inp: &x,
            weight: &w,
            bias: None,
            n,
            c,
            oc,
        });
        assert_near("out", &mem.0[2], &want, 1e-6);
        for g in matmul_backward_gemms(p(3), p(4), p(5), p(0), p(1), ni, ci, oci) {
            mem.gemm(&g);
        }
        let (mut wdx, mut wdw) = (vec![0.0; n * c], dw0);
        cpu::matmul_backward(MatmulBackward {
            dinp: &mut wdx,
            dweight: &mut wdw,
            dbias: None,
            dout: &dout,
            inp: &x,
            weight: &w,
            n,
            c,
            oc,
        });
        assert_near("dinp", &mem.0[3], &wdx, 1e-6);
        assert_near("dweight", &mem.0[4], &wdw, 1e-6);
    }

    /// The attention GEMM plans, with CPU versions of the permute and softmax kernels around
    /// them, match the references (both values-GEMM batchings: NH <= B and NH > B).
    #[test]
    fn gemm_plans_attention() {
        use crate::reference as cpu;
        for (b, t, c, nh) in [(2, 5, 8, 2), (1, 4, 6, 3), (3, 3, 8, 2), (2, 6, 12, 4)] {
            let s = AttShape::new("t", b, t, c, nh).unwrap();
            let (hs, total) = (c / nh, b * t * c);
            let inp = pseudo_random(b * t * 3 * c, 5);
            let dout = pseudo_random(total, 6);
            // 0 inp, 1 qkvr, 2 att, 3 out, 4 dout, 5 dy, 6 dqkvr, 7 datt, 8 dinp
            let mut mem = Mem(vec![
                inp.clone(),
                vec![0.0; 3 * total],
                vec![f32::NAN; b * nh * t * t],
                vec![f32::NAN; total],
                dout.clone(),
                vec![0.0; total],
                vec![f32::NAN; 3 * total],
                vec![f32::NAN; b * nh * t * t],
                vec![0.0; 3 * total],
            ]);
            let p = Mem::ptr;
            // Index of (b, t, h, d) in the model layout, and of (b, h, t, d) in the head layout.
            let model = |bb: usize, tt: usize, h: usize, d: usize, width: usize| {
                (bb * t + tt) * width + h * hs + d
            };
            let head = |bb: usize, tt: usize, h: usize, d: usize| ((bb * nh + h) * t + tt) * hs + d;
            let each = |f: &mut dyn FnMut(usize, usize, usize, usize)| {
                for bb in 0..b {
                    for tt in 0..t {
                        for h in 0..nh {
                            for d in 0..hs {
                                f(bb, tt, h, d)
                            }
                        }
                    }
                }
            };
            each(&mut |bb, tt, h, d| {
                for w in 0..3 {
                    mem.0[1][w * total + head(bb, tt, h, d)] =
                        inp[model(bb, tt, h, d, 3 * c) + w * c];
                }
            });
            let (q, k, v) = (p(1), p(1).at(total), p(1).at(2 * total));
            mem.gemm(&s.scores_gemm(q, k, p(2)));
            for row in mem.0[2].chunks_mut(t).enumerate().map(|(r, a)| (r % t, a)) {
                let (tt, a) = row;
                let mx = a[..=tt].iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
                let sum: f32 = a[..=tt].iter().map(|&x| (x - mx).exp()).sum();
                for (j, x) in a.iter_mut().enumerate() {
                    *x = if j <= tt { (*x - mx).exp() / sum } else { 0.0 };
                }
            }
            for g in s.values_gemms(v, p(2), p(3)) {
                mem.gemm(&g);
            }
            let (mut want, mut watt) = (vec![0.0; total], vec![0.0; b * nh * t * t]);
            cpu::attention_forward(AttentionForward {
                out: &mut want,
                qkvr: &mut vec![0.0; 3 * total],
                att: &mut watt,
                inp: &inp,
                b,
                t,
                c,
                nh,
            });
            let what = format!("B={b} T={t} C={c} NH={nh}");
            assert_near(&format!("att {what}"), &mem.0[2], &watt, 1e-5);
            assert_near(&format!("out {what}"), &mem.0[3], &want, 1e-5);

            each(&mut |bb, tt, h, d| mem.0[5][head(bb, tt, h, d)] = dout[model(bb, tt, h, d, c)]);
            let (dq, dk, dv) = (p(6), p(6).at(total), p(6).at(2 * total));
            mem.gemm(&s.datt_gemm(p(5), v, p(7)));
            mem.gemm(&s.dv_gemm(p(5), p(2), dv));
            for r in 0..b * nh * t {
                let tt = r % t;
                let (a, da) = (&mem.0[2][r * t..(r + 1) * t], &mem.0[7][r * t..(r + 1) * t]);
                let dot: f32 = (0..=tt).map(|j| a[j] * da[j]).sum();
                let ds: Vec<f32> = (0..t)
                    .map(|j| if j <= tt { a[j] * (da[j] - dot) } else { 0.0 })
                    .collect();
                mem.0[7][r * t..(r + 1) * t].copy_from_slice(&ds);
            }
            mem.gemm(&s.dq_gemm(k, p(7), dq));
            mem.gemm(&s.dk_gemm(q, p(7), dk));
            each(&mut |bb, tt, h, d| {
                for w in 0..3 {
                    mem.0[8][model(bb, tt, h, d, 3 * c) + w * c] =
                        mem.0[6][w * total + head(bb, tt, h, d)];
                }
            });
            let mut wdinp = vec![0.0; 3 * total];
            cpu::attention_backward(AttentionBackward {
                dinp: &mut wdinp,
                dqkvr: &mut [],
                datt: &mut [],
                scratch: &mut [],
                dout: &dout,
                qkvr: &inp,
                att: &watt,
                b,
                t,
                c,
                nh,
            });
            assert_near(&format!("dinp {what}"), &mem.0[8], &wdinp, 1e-4);
        }
    }

    #[test]
    fn every_kernel_is_in_its_fatbin() {
        // The fat binaries hold uncompressed cubins whose section names include the kernel
        // names, so a renamed kernel or a missing module fails here, without a GPU.
        for (module, function) in KERNELS {
            let bytes = crate::fatbins::FATBINS
                .iter()
                .find(|(name, _)| name == module)
                .unwrap_or_else(|| panic!("no fatbin for module {module}"))
                .1;
            let needle = format!(".text.{function}\0");
            assert!(
                bytes.windows(needle.len()).any(|w| w == needle.as_bytes()),
                "{function} not found in {module}.fatbin (renamed kernel, or a compressed fat binary)"
            );
        }
    }

    #[test]
    fn pointer_checks() {
        assert!(check_ptrs("t", &[("x", 0x1000)]).is_ok());
        assert!(matches!(
            check_ptrs("t", &[("x", 0)]),
            Err(GptError::InvalidArgument { op: "t", .. })
        ));
        assert!(check_ptrs("t", &[("x", 0x1002)]).is_err());
        assert_eq!(F32Ptr(0x1000).at(3), F32Ptr(0x100c));
        assert_eq!(I32Ptr(0x1000).at(5), I32Ptr(0x1014));
    }

    #[test]
    fn shape_checks() {
        assert!(AttShape::new("t", 2, 5, 12, 3).is_ok());
        assert!(AttShape::new("t", 2, 5, 12, 5).is_err());
        assert!(AttShape::new("t", 2, 5, 12, 0).is_err());
        assert!(AttShape::new("t", usize::MAX, 5, 12, 3).is_err());
        assert!(int("t", "x", 1 << 31).is_err());
        assert_eq!(int("t", "x", (1 << 31) - 1).unwrap(), i32::MAX);
        assert!(prod("t", &[usize::MAX, 2]).is_err());
    }

    #[test]
    fn partitions_cover_all_rows() {
        for n in [1, 7, 31, 32, 33, 100, 4096, 4097, 16384, 1 << 20] {
            let (per, parts) = row_partition(n);
            assert!(parts <= MAX_ROW_PARTS && per >= MIN_ROWS_PER_PART);
            assert!(per * parts >= n && per * (parts - 1) < n, "n = {n}");
        }
        assert_eq!(sum_squares_parts(1), 1);
        assert_eq!(sum_squares_parts(usize::MAX / 2), MAX_SQ_PARTS);
    }

    #[test]
    fn adamw_corrections() {
        let (b1, b2) = adamw_bias_corrections("t", 0.9, 0.999, 1).unwrap();
        // 0.9f32 and 0.999f32 are not exact: compare within a few f32 ulps of 0.1 and 0.001.
        assert!((b1 - 0.1).abs() < 1e-7 && (b2 - 0.001).abs() < 2e-8);
        assert!(adamw_bias_corrections("t", 0.9, 0.999, 0).is_err());
        assert!(adamw_bias_corrections("t", 1.0, 0.999, 1).is_err());
    }
}
