//! One pipeline stage of the GPT: its parameters, gradients and AdamW moments (flat arenas laid
//! out by [`StageLayout`]), the activations it keeps per micro-batch, and its forward and
//! backward passes (llm.c's GPT-2 layout: pre-LayerNorm blocks, fused classifier).
//!
//! A stage with PP = 1 is the whole model. The passes are split into input (encoder or a
//! receive), compute and output (a send) so that the trainer can time receive waits apart from
//! compute.

use crate::backend::Backend;
use crate::comm::Comm;
use crate::config::ModelConfig;
use crate::error::{GptError, Result};
use crate::op_args::{
    AttentionBackward, AttentionForward, EncoderBackward, EncoderForward, FusedClassifier,
    LayernormBackward, LayernormForward, MatmulBackward, MatmulForward,
};
use crate::ops::{F32Ptr, I32Ptr};
use crate::params::StageLayout;

/// Micro-batch shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    /// Sequences per micro-batch.
    pub b: usize,
    /// Tokens per sequence.
    pub t: usize,
}

impl Dims {
    pub fn n(&self) -> usize {
        self.b * self.t
    }
}

/// What the last stage does after the LM head.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Head {
    /// Losses, and the logits replaced by d(scale * sum of losses)/d(logits) for backward.
    Train { scale: f32 },
    /// Losses only (validation).
    Eval,
    /// Logits only (sampling).
    Logits,
}

/// Saved activations of one block for one micro-batch.
#[derive(Clone, Copy, Debug)]
struct LayerActs {
    ln1: F32Ptr,
    ln1_mean: F32Ptr,
    ln1_rstd: F32Ptr,
    qkvr: F32Ptr,
    att: F32Ptr,
    atty: F32Ptr,
    res2: F32Ptr,
    ln2: F32Ptr,
    ln2_mean: F32Ptr,
    ln2_rstd: F32Ptr,
    fch: F32Ptr,
    fch_gelu: F32Ptr,
    res3: F32Ptr,
}

/// Saved activations of one micro-batch on this stage.
#[derive(Clone, Debug)]
struct ActSet {
    /// The stage input: the embedding (first stage) or the received activations.
    input: F32Ptr,
    layers: Vec<LayerActs>,
    /// Last stage only.
    lnf: F32Ptr,
    lnf_mean: F32Ptr,
    lnf_rstd: F32Ptr,
    logits: F32Ptr,
}

impl ActSet {
    /// The stage output (what is sent on).
    fn output(&self) -> F32Ptr {
        self.layers.last().map_or(self.input, |l| l.res3)
    }
}

/// Buffers reused by every pass (one pass runs at a time on the stream).
#[derive(Clone, Copy, Debug)]
struct Scratch {
    qkv: F32Ptr,
    proj: F32Ptr,
    /// Gradient of the residual stream, two so that a send may still read one.
    dres: [F32Ptr; 2],
    da: F32Ptr,
    dqkv: F32Ptr,
    dqkvr: F32Ptr,
    datt: F32Ptr,
    att_scratch: F32Ptr,
    dfch_gelu: F32Ptr,
    dfch: F32Ptr,
}

/// A stage's device state.
pub struct StageModel {
    pub cfg: ModelConfig,
    pub layout: StageLayout,
    pub first: bool,
    pub last: bool,
    /// Shape the buffers were sized for.
    pub dims: Dims,
    pub params: F32Ptr,
    pub grads: F32Ptr,
    pub m: F32Ptr,
    pub v: F32Ptr,
    /// Inputs and targets of a step's micro-batches, [micro, b * t] each.
    pub tokens: I32Ptr,
    pub targets: I32Ptr,
    /// Per-token losses of a step's micro-batches (last stage).
    pub losses: F32Ptr,
    /// One value: the sum of squared gradients.
    pub norm: F32Ptr,
    /// One token for sampling.
    pub sampled: I32Ptr,
    acts: Vec<ActSet>,
    s: Scratch,
    micro: usize,
}

impl StageModel {
    /// Allocates everything for micro-batches of `dims`, `micro` per step, with `slots`
    /// activation sets (the schedule's most in flight). `grads` is the arena the comm layer
    /// allocated (at least `layout.total` values).
    #[allow(clippy::too_many_arguments)]
    pub fn new<B: Backend>(
        be: &B,
        cfg: &ModelConfig,
        layout: StageLayout,
        first: bool,
        last: bool,
        dims: Dims,
        micro: usize,
        slots: usize,
        grads: F32Ptr,
    ) -> Result<StageModel> {
        let (c, nh, vp) = (cfg.n_embd, cfg.n_head, cfg.padded_vocab());
        let n = dims.n();
        let (nc, att) = (n * c, dims.b * nh * dims.t * dims.t);
        if dims.t > cfg.block_size || dims.b == 0 || dims.t == 0 || micro == 0 {
            return Err(GptError::Config(format!(
                "micro-batch {}x{} tokens ({micro} per step) does not fit context {}",
                dims.b, dims.t, cfg.block_size
            )));
        }
        let a = |k: usize| be.alloc_f32(k);
        let params = a(layout.total)?;
        let m = a(layout.total)?;
        let v = a(layout.total)?;
        let mut acts = Vec::new();
        for _ in 0..slots.max(1) {
            let input = a(nc)?;
            let mut layers = Vec::new();
            for _ in layout.layers.clone() {
                layers.push(LayerActs {
                    ln1: a(nc)?,
                    ln1_mean: a(n)?,
                    ln1_rstd: a(n)?,
                    qkvr: a(3 * nc)?,
                    att: a(att)?,
                    atty: a(nc)?,
                    res2: a(nc)?,
                    ln2: a(nc)?,
                    ln2_mean: a(n)?,
                    ln2_rstd: a(n)?,
                    fch: a(4 * nc)?,
                    fch_gelu: a(4 * nc)?,
                    res3: a(nc)?,
                });
            }
            let (lnf, lnf_mean, lnf_rstd, logits) = if last {
                (a(nc)?, a(n)?, a(n)?, a(n * vp)?)
            } else {
                let z = F32Ptr(0);
                (z, z, z, z)
            };
            acts.push(ActSet {
                input,
                layers,
                lnf,
                lnf_mean,
                lnf_rstd,
                logits,
            });
        }
        let s = Scratch {
            qkv: a(3 * nc)?,
            proj: a(nc)?,
            dres: [a(nc)?, a(nc)?],
            da: a(nc)?,
            dqkv: a(3 * nc)?,
            dqkvr: a(3 * nc)?,
            datt: a(att)?,
            att_scratch: a(nc)?,
            dfch_gelu: a(4 * nc)?,
            dfch: a(4 * nc)?,
        };
        Ok(StageModel {
            cfg: cfg.clone(),
            layout,
            first,
            last,
            dims,
            params,
            grads,
            m,
            v,
            tokens: be.alloc_i32(micro * n)?,
            targets: be.alloc_i32(micro * n)?,
            losses: a(micro * n)?,
            norm: a(1)?,
            sampled: be.alloc_i32(1)?,
            acts,
            s,
            micro,
        })
    }

    /// Activation sets allocated.
    pub fn slots(&self) -> usize {
        self.acts.len()
    }

    /// Micro-batches per step the token buffers hold.
    pub fn micro(&self) -> usize {
        self.micro
    }

    fn p(&self, off: usize) -> F32Ptr {
        self.params.at(off)
    }

    fn g(&self, off: usize) -> F32Ptr {
        self.grads.at(off)
    }

    fn check(&self, slot: usize, mb: usize, d: Dims) -> Result<()> {
        if slot >= self.acts.len()
            || mb >= self.micro
            || d.b > self.dims.b
            || d.t > self.dims.t
            || d.b * d.t == 0
        {
            return Err(GptError::Config(format!(
                "internal: pass on slot {slot}, micro-batch {mb}, {}x{} exceeds the buffers",
                d.b, d.t
            )));
        }
        Ok(())
    }

    /// Orders the next writes into activation set `slot` after sends that read it.
    pub fn reuse_slot<B: Backend, C: Comm<B>>(
        &self,
        be: &B,
        comm: &mut C,
        slot: usize,
    ) -> Result<()> {
        comm.before_overwrite(be, self.acts[slot].output())
    }

    /// Forward input of a non-first stage: receive the previous stage's activations.
    pub fn forward_recv<B: Backend, C: Comm<B>>(
        &self,
        be: &B,
        comm: &mut C,
        slot: usize,
        d: Dims,
    ) -> Result<()> {
        if !self.first {
            comm.recv_act(be, self.acts[slot].input, d.n() * self.cfg.n_embd)?;
        }
        Ok(())
    }

    /// Forward compute of micro-batch `mb` (token index) in activation set `slot`.
    pub fn forward_compute<B: Backend>(
        &self,
        be: &B,
        slot: usize,
        mb: usize,
        d: Dims,
        head: Head,
    ) -> Result<()> {
        self.check(slot, mb, d)?;
        let (c, n) = (self.cfg.n_embd, d.n());
        let set = &self.acts[slot];
        let rows = mb * self.dims.n();
        if self.first {
            let (wte, wpe) = (self.layout.wte.unwrap_or(0), self.layout.wpe.unwrap_or(0));
            be.encoder_forward(EncoderForward {
                out: set.input,
                tokens: self.tokens.at(rows),
                wte: self.p(wte),
                wpe: self.p(wpe),
                b: d.b,
                t: d.t,
                c,
            })?;
        }
        let mut x = set.input;
        for (l, a) in set.layers.iter().enumerate() {
            self.layer_forward(be, l, x, a, d)?;
            x = a.res3;
        }
        if self.last {
            let lo = &self.layout;
            let (lnf_w, lnf_b, head_w) = (
                lo.lnf_w.unwrap_or(0),
                lo.lnf_b.unwrap_or(0),
                lo.head.unwrap_or(0),
            );
            let vp = self.cfg.padded_vocab();
            be.layernorm_forward(LayernormForward {
                out: set.lnf,
                mean: set.lnf_mean,
                rstd: set.lnf_rstd,
                inp: x,
                w: self.p(lnf_w),
                bias: self.p(lnf_b),
                n,
                c,
            })?;
            be.matmul_forward(MatmulForward {
                out: set.logits,
                inp: set.lnf,
                weight: self.p(head_w),
                bias: None,
                n,
                c,
                oc: vp,
            })?;
            let dloss = match head {
                Head::Train { scale } => Some(scale),
                Head::Eval => None,
                Head::Logits => return Ok(()),
            };
            be.fused_classifier(FusedClassifier {
                logits: set.logits,
                losses: self.losses.at(rows),
                targets: self.targets.at(rows),
                n,
                v: self.cfg.vocab,
                vp,
                dloss,
            })?;
        }
        Ok(())
    }

    /// Forward output of a non-last stage: send the activations on.
    pub fn forward_send<B: Backend, C: Comm<B>>(
        &self,
        be: &B,
        comm: &mut C,
        slot: usize,
        d: Dims,
    ) -> Result<()> {
        if !self.last {
            comm.send_act(be, self.acts[slot].output(), d.n() * self.cfg.n_embd)?;
        }
        Ok(())
    }

    /// Backward input of a non-last stage: receive the gradient of this stage's output into
    /// gradient buffer `ring` (0 or 1).
    pub fn backward_recv<B: Backend, C: Comm<B>>(
        &self,
        be: &B,
        comm: &mut C,
        ring: usize,
    ) -> Result<()> {
        let dres = self.s.dres[ring];
        comm.before_overwrite(be, dres)?;
        if !self.last {
            comm.recv_grad(be, dres, self.dims.n() * self.cfg.n_embd)?;
        }
        Ok(())
    }

    /// Backward compute of micro-batch `mb` held in `slot`; gradients accumulate into the
    /// arena. Leaves the gradient of the stage input in buffer `ring`.
    pub fn backward_compute<B: Backend>(
        &self,
        be: &B,
        slot: usize,
        mb: usize,
        ring: usize,
    ) -> Result<()> {
        let d = self.dims;
        self.check(slot, mb, d)?;
        let (c, n, vp) = (self.cfg.n_embd, d.n(), self.cfg.padded_vocab());
        let set = &self.acts[slot];
        let (s, dres) = (&self.s, self.s.dres[ring]);
        if self.last {
            let lo = &self.layout;
            let (lnf_w, lnf_b, head_w) = (
                lo.lnf_w.unwrap_or(0),
                lo.lnf_b.unwrap_or(0),
                lo.head.unwrap_or(0),
            );
            // The logits hold d(loss)/d(logits) since the forward pass.
            be.matmul_backward(MatmulBackward {
                dinp: s.da,
                dweight: self.g(head_w),
                dbias: None,
                dout: set.logits,
                inp: set.lnf,
                weight: self.p(head_w),
                n,
                c,
                oc: vp,
            })?;
            be.zero(dres, n * c)?;
            be.layernorm_backward(LayernormBackward {
                dinp: dres,
                dw: self.g(lnf_w),
                db: self.g(lnf_b),
                dout: s.da,
                inp: set.output(),
                w: self.p(lnf_w),
                mean: set.lnf_mean,
                rstd: set.lnf_rstd,
                n,
                c,
            })?;
        }
        for l in (0..set.layers.len()).rev() {
            let x = if l == 0 {
                set.input
            } else {
                set.layers[l - 1].res3
            };
            self.layer_backward(be, l, x, &set.layers[l], dres, d)?;
        }
        if self.first {
            let (wte, wpe) = (self.layout.wte.unwrap_or(0), self.layout.wpe.unwrap_or(0));
            be.encoder_backward(EncoderBackward {
                dwte: self.g(wte),
                dwpe: self.g(wpe),
                dout: dres,
                tokens: self.tokens.at(mb * n),
                b: d.b,
                t: d.t,
                c,
            })?;
        }
        Ok(())
    }

    /// Backward output of a non-first stage: send the input gradient to the previous stage.
    pub fn backward_send<B: Backend, C: Comm<B>>(
        &self,
        be: &B,
        comm: &mut C,
        ring: usize,
    ) -> Result<()> {
        if !self.first {
            comm.send_grad(be, self.s.dres[ring], self.dims.n() * self.cfg.n_embd)?;
        }
        Ok(())
    }

    /// The logits row `row` of activation set 0 (after a [`Head::Logits`] pass), to the host.
    pub fn logits_row<B: Backend>(&self, be: &B, row: usize) -> Result<Vec<f32>> {
        let vp = self.cfg.padded_vocab();
        let mut out = vec![0.0; vp];
        be.download_f32(self.acts[0].logits.at(row * vp), &mut out)?;
        out.truncate(self.cfg.vocab);
        Ok(out)
    }

    fn layer_forward<B: Backend>(
        &self,
        be: &B,
        l: usize,
        x: F32Ptr,
        a: &LayerActs,
        d: Dims,
    ) -> Result<()> {
        let (c, nh, n) = (self.cfg.n_embd, self.cfg.n_head, d.n());
        let o = &self.layout.layer_offsets[l];
        let s = &self.s;
        be.layernorm_forward(LayernormForward {
            out: a.ln1,
            mean: a.ln1_mean,
            rstd: a.ln1_rstd,
            inp: x,
            w: self.p(o.ln1_w),
            bias: self.p(o.ln1_b),
            n,
            c,
        })?;
        be.matmul_forward(MatmulForward {
            out: s.qkv,
            inp: a.ln1,
            weight: self.p(o.qkv_w),
            bias: Some(self.p(o.qkv_b)),
            n,
            c,
            oc: 3 * c,
        })?;
        be.attention_forward(AttentionForward {
            out: a.atty,
            qkvr: a.qkvr,
            att: a.att,
            inp: s.qkv,
            b: d.b,
            t: d.t,
            c,
            nh,
        })?;
        be.matmul_forward(MatmulForward {
            out: s.proj,
            inp: a.atty,
            weight: self.p(o.attproj_w),
            bias: Some(self.p(o.attproj_b)),
            n,
            c,
            oc: c,
        })?;
        be.residual_forward(a.res2, x, s.proj, n * c)?;
        be.layernorm_forward(LayernormForward {
            out: a.ln2,
            mean: a.ln2_mean,
            rstd: a.ln2_rstd,
            inp: a.res2,
            w: self.p(o.ln2_w),
            bias: self.p(o.ln2_b),
            n,
            c,
        })?;
        be.matmul_forward(MatmulForward {
            out: a.fch,
            inp: a.ln2,
            weight: self.p(o.fc_w),
            bias: Some(self.p(o.fc_b)),
            n,
            c,
            oc: 4 * c,
        })?;
        be.gelu_forward(a.fch_gelu, a.fch, n * 4 * c)?;
        be.matmul_forward(MatmulForward {
            out: s.proj,
            inp: a.fch_gelu,
            weight: self.p(o.fcproj_w),
            bias: Some(self.p(o.fcproj_b)),
            n,
            c: 4 * c,
            oc: c,
        })?;
        be.residual_forward(a.res3, a.res2, s.proj, n * c)
    }

    /// On entry `dres` is d(loss)/d(block output); on return d(loss)/d(block input) `x`.
    fn layer_backward<B: Backend>(
        &self,
        be: &B,
        l: usize,
        x: F32Ptr,
        a: &LayerActs,
        dres: F32Ptr,
        d: Dims,
    ) -> Result<()> {
        let (c, nh, n) = (self.cfg.n_embd, self.cfg.n_head, d.n());
        let o = &self.layout.layer_offsets[l];
        let s = &self.s;
        let (p, g) = (|k| self.p(k), |k| self.g(k));
        // MLP: res3 = res2 + fcproj(gelu(fc(ln2(res2)))).
        be.matmul_backward(MatmulBackward {
            dinp: s.dfch_gelu,
            dweight: g(o.fcproj_w),
            dbias: Some(g(o.fcproj_b)),
            dout: dres,
            inp: a.fch_gelu,
            weight: p(o.fcproj_w),
            n,
            c: 4 * c,
            oc: c,
        })?;
        be.gelu_backward(s.dfch, a.fch, s.dfch_gelu, n * 4 * c)?;
        be.matmul_backward(MatmulBackward {
            dinp: s.da,
            dweight: g(o.fc_w),
            dbias: Some(g(o.fc_b)),
            dout: s.dfch,
            inp: a.ln2,
            weight: p(o.fc_w),
            n,
            c,
            oc: 4 * c,
        })?;
        // The residual path's gradient passes through; LayerNorm's adds to it.
        be.layernorm_backward(LayernormBackward {
            dinp: dres,
            dw: g(o.ln2_w),
            db: g(o.ln2_b),
            dout: s.da,
            inp: a.res2,
            w: p(o.ln2_w),
            mean: a.ln2_mean,
            rstd: a.ln2_rstd,
            n,
            c,
        })?;
        // Attention: res2 = x + attproj(attention(qkv(ln1(x)))).
        be.matmul_backward(MatmulBackward {
            dinp: s.da,
            dweight: g(o.attproj_w),
            dbias: Some(g(o.attproj_b)),
            dout: dres,
            inp: a.atty,
            weight: p(o.attproj_w),
            n,
            c,
            oc: c,
        })?;
        be.attention_backward(AttentionBackward {
            dinp: s.dqkv,
            dqkvr: s.dqkvr,
            datt: s.datt,
            scratch: s.att_scratch,
            dout: s.da,
            qkvr: a.qkvr,
            att: a.att,
            b: d.b,
            t: d.t,
            c,
            nh,
        })?;
        be.matmul_backward(MatmulBackward {
            dinp: s.da,
            dweight: g(o.qkv_w),
            dbias: Some(g(o.qkv_b)),
            dout: s.dqkv,
            inp: a.ln1,
            weight: p(o.qkv_w),
            n,
            c,
            oc: 3 * c,
        })?;
        be.layernorm_backward(LayernormBackward {
            dinp: dres,
            dw: g(o.ln1_w),
            db: g(o.ln1_b),
            dout: s.da,
            inp: x,
            w: p(o.ln1_w),
            mean: a.ln1_mean,
            rstd: a.ln1_rstd,
            n,
            c,
        })
    }
}
