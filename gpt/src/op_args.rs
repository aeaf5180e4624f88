//! The argument list of each model op with more than a few arguments, written once as a struct
//! that [`crate::ops::Ops`], the [`crate::backend::Backend`] trait, both backends and the CPU
//! references in [`crate::reference`] all take. Named fields keep a call site readable where a
//! dozen positional pointers and sizes did not.
//!
//! Buffers are generic over their role so that one struct serves both kinds of memory:
//! `O` for outputs (written or accumulated), `I` for f32 inputs, `T` for i32 inputs (tokens,
//! targets). The defaults are device addresses ([`F32Ptr`], [`I32Ptr`]), as the GPU and the
//! backends pass them; the references take host slices (`&mut [f32]`, `&[f32]`, `&[i32]`).
//!
//! Shapes follow llm.c's GPT-2 layout: N = B*T rows of width C, NH heads of size hs = C/NH,
//! V vocabulary entries padded to Vp columns; all tensors row-major.

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

/// Token embedding: out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :].
#[derive(Clone, Copy, Debug)]
pub struct EncoderForward<O = F32Ptr, I = F32Ptr, T = I32Ptr> {
    /// [B, T, C]
    pub out: O,
    /// [B, T], each in 0..V (wte's rows)
    pub tokens: T,
    /// [V, C]
    pub wte: I,
    /// [T, C] (at least)
    pub wpe: I,
    pub b: usize,
    pub t: usize,
    pub c: usize,
}

/// Embedding backward: dwte[tokens[b, t], :] += dout[b, t, :] and dwpe[t, :] += dout[b, t, :],
/// positions in order.
#[derive(Clone, Copy, Debug)]
pub struct EncoderBackward<O = F32Ptr, I = F32Ptr, T = I32Ptr> {
    /// [V, C], accumulated
    pub dwte: O,
    /// [T, C], accumulated
    pub dwpe: O,
    /// [B, T, C]
    pub dout: I,
    /// [B, T]
    pub tokens: T,
    pub b: usize,
    pub t: usize,
    pub c: usize,
}

/// LayerNorm of each of the n rows of width c (eps 1e-5, biased variance):
/// out = (x - mean) * rstd * w + bias, rstd = 1/sqrt(var + eps); saves mean and rstd.
#[derive(Clone, Copy, Debug)]
pub struct LayernormForward<O = F32Ptr, I = F32Ptr> {
    /// [n, c]
    pub out: O,
    /// [n]
    pub mean: O,
    /// [n]
    pub rstd: O,
    /// [n, c]
    pub inp: I,
    /// [c]
    pub w: I,
    /// [c]
    pub bias: I,
    pub n: usize,
    pub c: usize,
}

/// LayerNorm backward from the statistics the forward saved; dinp, dw and db accumulate (+=).
#[derive(Clone, Copy, Debug)]
pub struct LayernormBackward<O = F32Ptr, I = F32Ptr> {
    /// [n, c], accumulated
    pub dinp: O,
    /// [c], accumulated
    pub dw: O,
    /// [c], accumulated
    pub db: O,
    /// [n, c]
    pub dout: I,
    /// [n, c]
    pub inp: I,
    /// [c]
    pub w: I,
    /// [n]
    pub mean: I,
    /// [n]
    pub rstd: I,
    pub n: usize,
    pub c: usize,
}

/// out\[n, oc\] = inp\[n, c\] . weight\[oc, c\]^T (+ bias\[oc\]).
#[derive(Clone, Copy, Debug)]
pub struct MatmulForward<O = F32Ptr, I = F32Ptr> {
    pub out: O,
    pub inp: I,
    pub weight: I,
    pub bias: Option<I>,
    pub n: usize,
    pub c: usize,
    pub oc: usize,
}

/// dinp\[n, c\] = dout . weight (overwritten); dweight\[oc, c\] += dout^T . inp;
/// dbias\[oc\] += column sums of dout.
#[derive(Clone, Copy, Debug)]
pub struct MatmulBackward<O = F32Ptr, I = F32Ptr> {
    pub dinp: O,
    pub dweight: O,
    pub dbias: Option<O>,
    /// [n, oc]
    pub dout: I,
    pub inp: I,
    pub weight: I,
    pub n: usize,
    pub c: usize,
    pub oc: usize,
}

/// Causal multi-head self-attention over the qkv input [B, T, 3C] (q, k, v, each NH heads of
/// hs = C/NH): att [B, NH, T, T] = softmax of q.k/sqrt(hs) over columns 0..=t (0 above the
/// diagonal); out [B, T, C] = att . v per head.
#[derive(Clone, Copy, Debug)]
pub struct AttentionForward<O = F32Ptr, I = F32Ptr> {
    /// [B, T, C]
    pub out: O,
    /// 3*B*T*C, saved for the backward: q, k, v in the per-head layout [B, NH, T, hs] on the
    /// GPU, a copy of `inp` on the CPU
    pub qkvr: O,
    /// [B, NH, T, T] softmax probabilities, saved for the backward
    pub att: O,
    /// [B, T, 3C]
    pub inp: I,
    pub b: usize,
    pub t: usize,
    pub c: usize,
    pub nh: usize,
}

/// Attention backward: dinp [B, T, 3C] (overwritten) from dout [B, T, C] and what
/// [`AttentionForward`] saved in qkvr and att.
#[derive(Clone, Copy, Debug)]
pub struct AttentionBackward<O = F32Ptr, I = F32Ptr> {
    pub dinp: O,
    /// GPU scratch of 3*B*T*C (the CPU needs none: may be empty there)
    pub dqkvr: O,
    /// GPU scratch of B*NH*T*T (may be empty on the CPU)
    pub datt: O,
    /// GPU scratch of B*T*C (may be empty on the CPU)
    pub scratch: O,
    pub dout: I,
    pub qkvr: I,
    pub att: I,
    pub b: usize,
    pub t: usize,
    pub c: usize,
    pub nh: usize,
}

/// Softmax + cross-entropy over logits [n, vp] (only the first v columns are real; padded
/// columns get probability 0 and gradient 0): losses\[i\] = -log p[i, targets\[i\]], NaN for a
/// target outside 0..v (which then has no one-hot term in the gradient). With `dloss` =
/// Some(s) the logits are overwritten in place with d(s * sum losses)/dlogits = s * (p - onehot).
#[derive(Clone, Copy, Debug)]
pub struct FusedClassifier<O = F32Ptr, T = I32Ptr> {
    /// [n, vp], read, and overwritten when `dloss` is given
    pub logits: O,
    /// [n]
    pub losses: O,
    /// [n]
    pub targets: T,
    pub n: usize,
    pub v: usize,
    pub vp: usize,
    pub dloss: Option<f32>,
}

/// AdamW step t (1-based) on n params: g = grads * grad_scale, the moments m and v updated
/// in place, then params -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * params) with
/// mhat = m / (1 - beta1^t), vhat = v / (1 - beta2^t) (the new moments; decoupled decay).
#[derive(Clone, Copy, Debug)]
pub struct Adamw<O = F32Ptr, I = F32Ptr> {
    pub params: O,
    pub grads: I,
    pub m: O,
    pub v: O,
    pub n: usize,
    pub step: AdamwStep,
}

/// The scalars of one [`Adamw`] step, apart from the buffers so that one step's settings can
/// be reused over several parameter ranges (and buffer kinds).
#[derive(Clone, Copy, Debug)]
pub struct AdamwStep {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    /// 1-based
    pub t: u32,
    pub grad_scale: f32,
}
