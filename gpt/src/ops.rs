//! The model's GPU kernels (gpt/kernels/*.cu) and cuBLAS matmuls behind one handle, [`Ops`].
//! STUB: signatures are final, bodies land next.
#![allow(clippy::too_many_arguments)]

use std::sync::Arc;

use cudarc::driver::CudaStream;

use crate::error::Result;

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

/// Loaded kernels and a cuBLAS handle, all bound to one stream.
pub struct Ops {
    stream: Arc<CudaStream>,
}

impl Ops {
    pub fn new(stream: Arc<CudaStream>) -> Result<Ops> {
        let _ = &stream;
        todo!()
    }
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
    pub fn set_tf32(&mut self, on: bool) -> Result<()> {
        todo!("{on}")
    }
    pub fn zero(&self, x: F32Ptr, n: usize) -> Result<()> {
        todo!("{x:?} {n}")
    }
    pub fn copy(&self, dst: F32Ptr, src: F32Ptr, n: usize) -> Result<()> {
        todo!("{dst:?} {src:?} {n}")
    }
    pub fn add_inplace(&self, dst: F32Ptr, src: F32Ptr, n: usize) -> Result<()> {
        todo!("{dst:?} {src:?} {n}")
    }
    pub fn scale_inplace(&self, x: F32Ptr, s: f32, n: usize) -> Result<()> {
        todo!("{x:?} {s} {n}")
    }
    pub fn encoder_forward(&self, out: F32Ptr, tokens: I32Ptr, wte: F32Ptr, wpe: F32Ptr, b: usize, t: usize, c: usize) -> Result<()> {
        todo!("{out:?} {tokens:?} {wte:?} {wpe:?} {b} {t} {c}")
    }
    pub fn encoder_backward(&self, dwte: F32Ptr, dwpe: F32Ptr, dout: F32Ptr, tokens: I32Ptr, b: usize, t: usize, c: usize) -> Result<()> {
        todo!("{dwte:?} {dwpe:?} {dout:?} {tokens:?} {b} {t} {c}")
    }
    pub fn layernorm_forward(&self, out: F32Ptr, mean: F32Ptr, rstd: F32Ptr, inp: F32Ptr, w: F32Ptr, bias: F32Ptr, n: usize, c: usize) -> Result<()> {
        todo!("{out:?} {mean:?} {rstd:?} {inp:?} {w:?} {bias:?} {n} {c}")
    }
    pub fn layernorm_backward(&self, dinp: F32Ptr, dw: F32Ptr, db: F32Ptr, dout: F32Ptr, inp: F32Ptr, w: F32Ptr, mean: F32Ptr, rstd: F32Ptr, n: usize, c: usize) -> Result<()> {
        todo!("{dinp:?} {dw:?} {db:?} {dout:?} {inp:?} {w:?} {mean:?} {rstd:?} {n} {c}")
    }
    /// out[n, oc] = inp[n, c] . weight[oc, c]^T (+ bias[oc])
    pub fn matmul_forward(&self, out: F32Ptr, inp: F32Ptr, weight: F32Ptr, bias: Option<F32Ptr>, n: usize, c: usize, oc: usize) -> Result<()> {
        todo!("{out:?} {inp:?} {weight:?} {bias:?} {n} {c} {oc}")
    }
    /// dinp[n, c] = dout . weight (OVERWRITTEN); dweight[oc, c] += dout^T . inp; dbias[oc] += column sums of dout
    pub fn matmul_backward(&self, dinp: F32Ptr, dweight: F32Ptr, dbias: Option<F32Ptr>, dout: F32Ptr, inp: F32Ptr, weight: F32Ptr, n: usize, c: usize, oc: usize) -> Result<()> {
        todo!("{dinp:?} {dweight:?} {dbias:?} {dout:?} {inp:?} {weight:?} {n} {c} {oc}")
    }
    pub fn attention_forward(&self, out: F32Ptr, qkvr: F32Ptr, att: F32Ptr, inp: F32Ptr, b: usize, t: usize, c: usize, nh: usize) -> Result<()> {
        todo!("{out:?} {qkvr:?} {att:?} {inp:?} {b} {t} {c} {nh}")
    }
    pub fn attention_backward(&self, dinp: F32Ptr, dqkvr: F32Ptr, datt: F32Ptr, scratch: F32Ptr, dout: F32Ptr, qkvr: F32Ptr, att: F32Ptr, b: usize, t: usize, c: usize, nh: usize) -> Result<()> {
        todo!("{dinp:?} {dqkvr:?} {datt:?} {scratch:?} {dout:?} {qkvr:?} {att:?} {b} {t} {c} {nh}")
    }
    pub fn gelu_forward(&self, out: F32Ptr, inp: F32Ptr, n: usize) -> Result<()> {
        todo!("{out:?} {inp:?} {n}")
    }
    pub fn gelu_backward(&self, dinp: F32Ptr, inp: F32Ptr, dout: F32Ptr, n: usize) -> Result<()> {
        todo!("{dinp:?} {inp:?} {dout:?} {n}")
    }
    pub fn residual_forward(&self, out: F32Ptr, a: F32Ptr, b: F32Ptr, n: usize) -> Result<()> {
        todo!("{out:?} {a:?} {b:?} {n}")
    }
    pub fn fused_classifier(&self, logits: F32Ptr, losses: F32Ptr, targets: I32Ptr, n: usize, v: usize, vp: usize, dloss: Option<f32>) -> Result<()> {
        todo!("{logits:?} {losses:?} {targets:?} {n} {v} {vp} {dloss:?}")
    }
    pub fn adamw(&self, params: F32Ptr, grads: F32Ptr, m: F32Ptr, v: F32Ptr, n: usize, lr: f32, beta1: f32, beta2: f32, eps: f32, weight_decay: f32, t: u32, grad_scale: f32) -> Result<()> {
        todo!("{params:?} {grads:?} {m:?} {v:?} {n} {lr} {beta1} {beta2} {eps} {weight_decay} {t} {grad_scale}")
    }
    pub fn sum_squares(&self, out: F32Ptr, x: F32Ptr, n: usize) -> Result<()> {
        todo!("{out:?} {x:?} {n}")
    }
}
