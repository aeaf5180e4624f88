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

/// Device address (CUdeviceptr) of f32 data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct F32Ptr(pub u64);

impl F32Ptr {
    /// The address `elems` f32 elements further on.
    pub fn at(self, elems: usize) -> F32Ptr {
        F32Ptr(self.0 + 4 * elems as u64)
    }
}

/// Device address (CUdeviceptr) of i32 data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct I32Ptr(pub u64);

impl I32Ptr {
    /// The address `elems` i32 elements further on.
    pub fn at(self, elems: usize) -> I32Ptr {
        I32Ptr(self.0 + 4 * elems as u64)
    }
}

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

    /// out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :]. Tokens must lie in 0..V (wte's rows):
    /// the kernel cannot check them (V is not an argument), the data loader does.
    pub fn encoder_forward(
        &self,
        out: F32Ptr,
        tokens: I32Ptr,
        wte: F32Ptr,
        wpe: F32Ptr,
        b: usize,
        t: usize,
        c: usize,
    ) -> Result<()> {
        const OP: &str = "encoder_forward";
        let n = prod(OP, &[b, t])?;
        let total = prod(OP, &[n, c])?;
        if total == 0 {
            return Ok(());
        }
        check_ptrs(
            OP,
            &[
                ("out", out.0),
                ("tokens", tokens.0),
                ("wte", wte.0),
                ("wpe", wpe.0),
            ],
        )?;
        let args = [
            out.into(),
            tokens.into(),
            wte.into(),
            wpe.into(),
            int(OP, "B*T", n)?.into(),
            int(OP, "T", t)?.into(),
            int(OP, "C", c)?.into(),
        ];
        self.launch_1d(K::EncoderForward, total, &args)
    }

    /// dwte[tokens[b, t], :] += dout[b, t, :], dwpe[t, :] += dout[b, t, :]. Deterministic
    /// without atomics (each dwte row is summed by one block, positions in order; see encoder.cu),
    /// in the same order as the CPU reference.
    pub fn encoder_backward(
        &self,
        dwte: F32Ptr,
        dwpe: F32Ptr,
        dout: F32Ptr,
        tokens: I32Ptr,
        b: usize,
        t: usize,
        c: usize,
    ) -> Result<()> {
        const OP: &str = "encoder_backward";
        let n = prod(OP, &[b, t])?;
        if prod(OP, &[n, c])? == 0 {
            return Ok(());
        }
        check_ptrs(
            OP,
            &[
                ("dwte", dwte.0),
                ("dwpe", dwpe.0),
                ("dout", dout.0),
                ("tokens", tokens.0),
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
            &[dwpe.into(), dout.into(), bi.into(), ti.into(), ci.into()],
        )?;
        self.launch(
            K::EncoderBackwardWte,
            (ni as u32, 1, 1),
            (BLOCK, 1, 1),
            &[
                dwte.into(),
                dout.into(),
                tokens.into(),
                ni.into(),
                ci.into(),
            ],
        )
    }

    /// LayerNorm of each of the n rows of width c (eps 1e-5): out = (x - mean) * rstd * w + bias;
    /// saves mean[n] and rstd[n] for the backward pass.
    pub fn layernorm_forward(
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
        const OP: &str = "layernorm_forward";
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
                ("out", out.0),
                ("mean", mean.0),
                ("rstd", rstd.0),
                ("inp", inp.0),
                ("w", w.0),
                ("bias", bias.0),
            ],
        )?;
        prod(OP, &[n, c])?;
        let args = [
            out.into(),
            mean.into(),
            rstd.into(),
            inp.into(),
            w.into(),
            bias.into(),
            int(OP, "N", n)?.into(),
            int(OP, "C", c)?.into(),
        ];
        self.launch_rows(K::LayernormForward, n, &args)
    }

    /// LayerNorm backward: dinp, dw and db all accumulate (+=).
    pub fn layernorm_backward(
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
        const OP: &str = "layernorm_backward";
        if n == 0 || c == 0 {
            return Ok(());
        }
        check_ptrs(
            OP,
            &[
                ("dinp", dinp.0),
                ("dw", dw.0),
                ("db", db.0),
                ("dout", dout.0),
                ("inp", inp.0),
                ("w", w.0),
                ("mean", mean.0),
                ("rstd", rstd.0),
            ],
        )?;
        prod(OP, &[n, c])?;
        let (ni, ci) = (int(OP, "N", n)?, int(OP, "C", c)?);
        self.launch_rows(
            K::LayernormBackwardInput,
            n,
            &[
                dinp.into(),
                dout.into(),
                inp.into(),
                w.into(),
                mean.into(),
                rstd.into(),
                ni.into(),
                ci.into(),
            ],
        )?;
        let (rows_per, parts) = row_partition(n);
        self.with_scratch(2 * parts * c, |partial| {
            self.launch(
                K::LayernormBackwardParamsPartial,
                (c.div_ceil(32) as u32, parts as u32, 1),
                (32, 8, 1),
                &[
                    partial.into(),
                    dout.into(),
                    inp.into(),
                    mean.into(),
                    rstd.into(),
                    ni.into(),
                    ci.into(),
                    (rows_per as i32).into(),
                ],
            )?;
            self.sum_partials(dw, partial, parts, c)?;
            self.sum_partials(db, partial.at(parts * c), parts, c)
        })
    }

    /// out[n, oc] = inp[n, c] . weight[oc, c]^T (+ bias[oc])
    pub fn matmul_forward(
        &self,
        out: F32Ptr,
        inp: F32Ptr,
        weight: F32Ptr,
        bias: Option<F32Ptr>,
        n: usize,
        c: usize,
        oc: usize,
    ) -> Result<()> {
        const OP: &str = "matmul_forward";
        if n == 0 || oc == 0 {
            return Ok(());
        }
        check_ptrs(OP, &[("out", out.0), ("inp", inp.0), ("weight", weight.0)])?;
        if let Some(bias) = bias {
            check_ptrs(OP, &[("bias", bias.0)])?;
        }
        let (ni, ci, oci) = (int(OP, "N", n)?, int(OP, "C", c)?, int(OP, "OC", oc)?);
        // Row-major out[n, oc] is column-major out^T (oc x n) = W (oc x c) . inp^T (c x n),
        // where W is column-major weight^T with ld c, read transposed.
        self.gemm(
            OP,
            Gemm {
                ta: true,
                tb: false,
                m: oci,
                n: ni,
                k: ci,
                alpha: 1.0,
                a: (weight, ci, 0),
                b: (inp, ci, 0),
                beta: 0.0,
                c: (out, oci, 0),
                batch: 1,
            },
        )?;
        if let Some(bias) = bias {
            let total = prod(OP, &[n, oc])?;
            self.launch_1d(
                K::AddBias,
                total,
                &[out.into(), bias.into(), ni.into(), oci.into()],
            )?;
        }
        Ok(())
    }

    /// dinp[n, c] = dout . weight (OVERWRITTEN); dweight[oc, c] += dout^T . inp; dbias[oc] += column sums of dout
    pub fn matmul_backward(
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
        const OP: &str = "matmul_backward";
        if n == 0 {
            return Ok(());
        }
        check_ptrs(
            OP,
            &[
                ("dinp", dinp.0),
                ("dweight", dweight.0),
                ("dout", dout.0),
                ("inp", inp.0),
                ("weight", weight.0),
            ],
        )?;
        if let Some(dbias) = dbias {
            check_ptrs(OP, &[("dbias", dbias.0)])?;
        }
        let (ni, ci, oci) = (int(OP, "N", n)?, int(OP, "C", c)?, int(OP, "OC", oc)?);
        if oc == 0 {
            // An empty sum: dinp = 0, nothing to accumulate.
            return self.zero(dinp, prod(OP, &[n, c])?);
        }
        if c > 0 {
            // dinp^T (c x n) = weight^T (column-major c x oc, ld c) . dout^T (oc x n, ld oc).
            self.gemm(
                OP,
                Gemm {
                    ta: false,
                    tb: false,
                    m: ci,
                    n: ni,
                    k: oci,
                    alpha: 1.0,
                    a: (weight, ci, 0),
                    b: (dout, oci, 0),
                    beta: 0.0,
                    c: (dinp, ci, 0),
                    batch: 1,
                },
            )?;
            // dweight^T (c x oc) += inp^T (c x n, ld c) . dout (n x oc: dout^T read transposed).
            self.gemm(
                OP,
                Gemm {
                    ta: false,
                    tb: true,
                    m: ci,
                    n: oci,
                    k: ni,
                    alpha: 1.0,
                    a: (inp, ci, 0),
                    b: (dout, oci, 0),
                    beta: 1.0,
                    c: (dweight, ci, 0),
                    batch: 1,
                },
            )?;
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
                        dout.into(),
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

    /// Causal multi-head self-attention. inp = qkv [B, T, 3C] (q, k, v each C = NH * hs);
    /// out [B, T, C]; qkvr scratch 3*B*T*C (saved for backward); att [B, NH, T, T] softmax probs (saved).
    ///
    /// att holds the probabilities of the scaled scores q.k/sqrt(hs), 0 above the diagonal.
    /// qkvr holds q, k, v in the per-head layout [B, NH, T, hs] (q first, then k, then v).
    pub fn attention_forward(
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
        const OP: &str = "attention_forward";
        let s = AttShape::new(OP, b, t, c, nh)?;
        if s.total == 0 {
            return Ok(());
        }
        check_ptrs(
            OP,
            &[
                ("out", out.0),
                ("qkvr", qkvr.0),
                ("att", att.0),
                ("inp", inp.0),
            ],
        )?;
        let (q, k, v) = (qkvr, qkvr.at(s.total), qkvr.at(2 * s.total));
        self.launch_1d(K::AttentionPermute, s.total, &s.permute_args(qkvr, inp))?;
        // Scores, per (b, h): att^T (column-major T x T) = k (T x hs) . q^T, scaled by 1/sqrt(hs).
        self.gemm(
            OP,
            Gemm {
                ta: true,
                tb: false,
                m: s.ti,
                n: s.ti,
                k: s.hsi,
                alpha: s.scale,
                a: (k, s.hsi, s.head_stride),
                b: (q, s.hsi, s.head_stride),
                beta: 0.0,
                c: (att, s.ti, s.att_stride),
                batch: s.bnh,
            },
        )?;
        self.launch_rows(
            K::AttentionSoftmaxForward,
            s.rows,
            &[att.into(), int(OP, "B*NH*T", s.rows)?.into(), s.ti.into()],
        )?;
        // y = att . v, written straight into out [B, T, C] (row stride C): one strided batch per
        // head over b, or per b over heads, whichever needs fewer calls.
        let (t_hs, t_t, t_c) = (t * s.hs, t * t, t * c);
        if nh <= b {
            for h in 0..nh {
                self.gemm(
                    OP,
                    Gemm {
                        ta: false,
                        tb: false,
                        m: s.hsi,
                        n: s.ti,
                        k: s.ti,
                        alpha: 1.0,
                        a: (v.at(h * t_hs), s.hsi, (nh * t_hs) as i64),
                        b: (att.at(h * t_t), s.ti, (nh * t_t) as i64),
                        beta: 0.0,
                        c: (out.at(h * s.hs), s.ci, t_c as i64),
                        batch: s.bi,
                    },
                )?;
            }
        } else {
            for bb in 0..b {
                self.gemm(
                    OP,
                    Gemm {
                        ta: false,
                        tb: false,
                        m: s.hsi,
                        n: s.ti,
                        k: s.ti,
                        alpha: 1.0,
                        a: (v.at(bb * nh * t_hs), s.hsi, t_hs as i64),
                        b: (att.at(bb * nh * t_t), s.ti, t_t as i64),
                        beta: 0.0,
                        c: (out.at(bb * t_c), s.ci, s.hs as i64),
                        batch: s.nhi,
                    },
                )?;
            }
        }
        Ok(())
    }

    /// dinp [B, T, 3C] OVERWRITTEN. dqkvr (3*B*T*C), datt (B*NH*T*T), scratch (B*T*C) are scratch.
    ///
    /// qkvr and att are what [`Ops::attention_forward`] saved.
    pub fn attention_backward(
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
        const OP: &str = "attention_backward";
        let s = AttShape::new(OP, b, t, c, nh)?;
        if s.total == 0 {
            return Ok(());
        }
        check_ptrs(
            OP,
            &[
                ("dinp", dinp.0),
                ("dqkvr", dqkvr.0),
                ("datt", datt.0),
                ("scratch", scratch.0),
                ("dout", dout.0),
                ("qkvr", qkvr.0),
                ("att", att.0),
            ],
        )?;
        let (q, k, v) = (qkvr, qkvr.at(s.total), qkvr.at(2 * s.total));
        let (dq, dk, dv) = (dqkvr, dqkvr.at(s.total), dqkvr.at(2 * s.total));
        let dy = scratch;
        self.launch_1d(K::AttentionPermuteHeads, s.total, &s.permute_args(dy, dout))?;
        // datt[t1, t2] = dy[t1] . v[t2] (same product shape as the forward scores).
        self.gemm(
            OP,
            Gemm {
                ta: true,
                tb: false,
                m: s.ti,
                n: s.ti,
                k: s.hsi,
                alpha: 1.0,
                a: (v, s.hsi, s.head_stride),
                b: (dy, s.hsi, s.head_stride),
                beta: 0.0,
                c: (datt, s.ti, s.att_stride),
                batch: s.bnh,
            },
        )?;
        // dv = att^T . dy: column-major dv^T (hs x T) = dy^T (hs x T) . att (att^T read transposed).
        self.gemm(
            OP,
            Gemm {
                ta: false,
                tb: true,
                m: s.hsi,
                n: s.ti,
                k: s.ti,
                alpha: 1.0,
                a: (dy, s.hsi, s.head_stride),
                b: (att, s.ti, s.att_stride),
                beta: 0.0,
                c: (dv, s.hsi, s.head_stride),
                batch: s.bnh,
            },
        )?;
        // datt becomes the gradient of the scaled scores (0 in the masked triangle).
        self.launch_rows(
            K::AttentionSoftmaxBackward,
            s.rows,
            &[
                datt.into(),
                att.into(),
                int(OP, "B*NH*T", s.rows)?.into(),
                s.ti.into(),
            ],
        )?;
        // dq = scale * dS . k: column-major dq^T (hs x T) = k^T (hs x T) . dS^T.
        self.gemm(
            OP,
            Gemm {
                ta: false,
                tb: false,
                m: s.hsi,
                n: s.ti,
                k: s.ti,
                alpha: s.scale,
                a: (k, s.hsi, s.head_stride),
                b: (datt, s.ti, s.att_stride),
                beta: 0.0,
                c: (dq, s.hsi, s.head_stride),
                batch: s.bnh,
            },
        )?;
        // dk = scale * dS^T . q: column-major dk^T (hs x T) = q^T (hs x T) . dS.
        self.gemm(
            OP,
            Gemm {
                ta: false,
                tb: true,
                m: s.hsi,
                n: s.ti,
                k: s.ti,
                alpha: s.scale,
                a: (q, s.hsi, s.head_stride),
                b: (datt, s.ti, s.att_stride),
                beta: 0.0,
                c: (dk, s.hsi, s.head_stride),
                batch: s.bnh,
            },
        )?;
        self.launch_1d(
            K::AttentionUnpermuteQkv,
            s.total,
            &s.permute_args(dinp, dqkvr),
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

    /// Softmax + cross-entropy over logits [n, vp] (only the first v columns are real; padded
    /// columns get probability 0 and gradient 0). losses[i] = -log p[i, targets[i]].
    /// If `dloss` is Some(s): logits is OVERWRITTEN in place with d(s * sum losses)/dlogits = s*(p - onehot).
    ///
    /// A target outside 0..v gives a NaN loss for its row (and no one-hot term in the gradient).
    pub fn fused_classifier(
        &self,
        logits: F32Ptr,
        losses: F32Ptr,
        targets: I32Ptr,
        n: usize,
        v: usize,
        vp: usize,
        dloss: Option<f32>,
    ) -> Result<()> {
        const OP: &str = "fused_classifier";
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
                ("logits", logits.0),
                ("losses", losses.0),
                ("targets", targets.0),
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
                logits.into(),
                losses.into(),
                targets.into(),
                int(OP, "V", v)?.into(),
                int(OP, "Vp", vp)?.into(),
                dloss.unwrap_or(0.0).into(),
                i32::from(dloss.is_some()).into(),
            ],
        )
    }

    /// AdamW step t (1-based) on n params: g = grads * grad_scale; m,v moments; decoupled weight decay.
    ///
    /// params -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * params), with
    /// mhat = m / (1 - beta1^t), vhat = v / (1 - beta2^t) (the new moments).
    pub fn adamw(
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
        const OP: &str = "adamw";
        let (bc1, bc2) = adamw_bias_corrections(OP, beta1, beta2, t)?;
        if n == 0 {
            return Ok(());
        }
        check_ptrs(
            OP,
            &[
                ("params", params.0),
                ("grads", grads.0),
                ("m", m.0),
                ("v", v.0),
            ],
        )?;
        let args = [
            params.into(),
            grads.into(),
            m.into(),
            v.into(),
            long(OP, "n", n)?.into(),
            lr.into(),
            beta1.into(),
            beta2.into(),
            bc1.into(),
            bc2.into(),
            eps.into(),
            weight_decay.into(),
            grad_scale.into(),
        ];
        self.launch_1d(K::Adamw, n, &args)
    }

    /// out[0] = sum of squares of x[..n] (OVERWRITTEN, deterministic: fixed reduction order).
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
    fn gemm(&self, op: &'static str, g: Gemm) -> Result<()> {
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

/// One cuBLAS GEMM: operands are (address, leading dimension, batch stride in elements).
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

/// Checked attention shape.
struct AttShape {
    hs: usize,
    total: usize,
    rows: usize,
    bnh: usize,
    bi: usize,
    nhi: usize,
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
            hs,
            total,
            rows,
            bnh,
            bi: b,
            nhi: nh,
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
                "{function} not found in {module}.fatbin"
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
