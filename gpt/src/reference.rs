//! CPU references of the kernels in [`crate::ops`]: plain Rust on slices, taking the same
//! argument structs ([`crate::op_args`]) with host slices for buffers. They are the ground truth of the kernel tests (gpt/tests/ops.rs,
//! which also checks every backward here against finite differences of its forward) and of the
//! trainer's whole-model CPU check.
//!
//! Differences from [`crate::ops::Ops`]: scratch buffers that only the GPU needs are ignored
//! (they may be empty), and attention saves a copy of its qkv input in `qkvr` where the GPU
//! saves a permuted copy. Sizes that a slice implies are still passed, as the structs are
//! shared. Sums are accumulated in f64
//! (results stored as f32), so the references are at least as accurate as the kernels; the
//! embedding backward and AdamW follow the kernels' f32 operation order exactly.
//!
//! # Panics
//! Like slice indexing, every function panics if a slice is shorter than its shape implies
//! (a programming error in a test or a CPU model, not a user input).

use crate::op_args::{
    Adamw, AdamwStep, AttentionBackward, AttentionForward, EncoderBackward, EncoderForward,
    FusedClassifier, LayernormBackward, LayernormForward, MatmulBackward, MatmulForward,
};

/// LayerNorm epsilon (the kernels' LN_EPS).
pub const LN_EPS: f32 = 1e-5;

/// [`EncoderForward`].
pub fn encoder_forward(a: EncoderForward<&mut [f32], &[f32], &[i32]>) {
    let EncoderForward {
        out,
        tokens,
        wte,
        wpe,
        b,
        t,
        c,
    } = a;
    for n in 0..b * t {
        let tok = tokens[n] as usize;
        let pos = n % t;
        for i in 0..c {
            out[n * c + i] = wte[tok * c + i] + wpe[pos * c + i];
        }
    }
}

/// [`EncoderBackward`], positions in order (as the kernel).
pub fn encoder_backward(a: EncoderBackward<&mut [f32], &[f32], &[i32]>) {
    let EncoderBackward {
        dwte,
        dwpe,
        dout,
        tokens,
        b,
        t,
        c,
    } = a;
    for n in 0..b * t {
        let tok = tokens[n] as usize;
        let pos = n % t;
        for i in 0..c {
            dwte[tok * c + i] += dout[n * c + i];
            dwpe[pos * c + i] += dout[n * c + i];
        }
    }
}

/// [`LayernormForward`].
pub fn layernorm_forward(a: LayernormForward<&mut [f32], &[f32]>) {
    let LayernormForward {
        out,
        mean,
        rstd,
        inp,
        w,
        bias,
        n,
        c,
    } = a;
    for r in 0..n {
        let x = &inp[r * c..(r + 1) * c];
        let m = x.iter().map(|&v| v as f64).sum::<f64>() / c as f64;
        let var = x.iter().map(|&v| (v as f64 - m).powi(2)).sum::<f64>() / c as f64;
        let rs = 1.0 / (var + LN_EPS as f64).sqrt();
        for i in 0..c {
            let norm = (x[i] as f64 - m) * rs;
            out[r * c + i] = (norm * w[i] as f64 + bias[i] as f64) as f32;
        }
        mean[r] = m as f32;
        rstd[r] = rs as f32;
    }
}

/// [`LayernormBackward`].
pub fn layernorm_backward(a: LayernormBackward<&mut [f32], &[f32]>) {
    let LayernormBackward {
        dinp,
        dw,
        db,
        dout,
        inp,
        w,
        mean,
        rstd,
        n,
        c,
    } = a;
    let mut dw64 = vec![0f64; c];
    let mut db64 = vec![0f64; c];
    for r in 0..n {
        let (m, rs) = (mean[r] as f64, rstd[r] as f64);
        let row = r * c..(r + 1) * c;
        let (x, dy) = (&inp[row.clone()], &dout[row]);
        let norm = |i: usize| (x[i] as f64 - m) * rs;
        let mut mean_dn = 0.0;
        let mut mean_dn_n = 0.0;
        for i in 0..c {
            let dn = w[i] as f64 * dy[i] as f64;
            mean_dn += dn;
            mean_dn_n += dn * norm(i);
        }
        mean_dn /= c as f64;
        mean_dn_n /= c as f64;
        for i in 0..c {
            let dn = w[i] as f64 * dy[i] as f64;
            let d = (dn - mean_dn - norm(i) * mean_dn_n) * rs;
            dinp[r * c + i] = (dinp[r * c + i] as f64 + d) as f32;
            dw64[i] += dy[i] as f64 * norm(i);
            db64[i] += dy[i] as f64;
        }
    }
    for i in 0..c {
        dw[i] = (dw[i] as f64 + dw64[i]) as f32;
        db[i] = (db[i] as f64 + db64[i]) as f32;
    }
}

/// [`MatmulForward`].
pub fn matmul_forward(a: MatmulForward<&mut [f32], &[f32]>) {
    let MatmulForward {
        out,
        inp,
        weight,
        bias,
        n,
        c,
        oc,
    } = a;
    for r in 0..n {
        let x = &inp[r * c..(r + 1) * c];
        for o in 0..oc {
            let wr = &weight[o * c..(o + 1) * c];
            let mut acc = bias.map_or(0.0, |b| b[o] as f64);
            for i in 0..c {
                acc += x[i] as f64 * wr[i] as f64;
            }
            out[r * oc + o] = acc as f32;
        }
    }
}

/// [`MatmulBackward`].
pub fn matmul_backward(a: MatmulBackward<&mut [f32], &[f32]>) {
    let MatmulBackward {
        dinp,
        dweight,
        dbias,
        dout,
        inp,
        weight,
        n,
        c,
        oc,
    } = a;
    for r in 0..n {
        for i in 0..c {
            let mut acc = 0f64;
            for o in 0..oc {
                acc += dout[r * oc + o] as f64 * weight[o * c + i] as f64;
            }
            dinp[r * c + i] = acc as f32;
        }
    }
    for o in 0..oc {
        for i in 0..c {
            let mut acc = 0f64;
            for r in 0..n {
                acc += dout[r * oc + o] as f64 * inp[r * c + i] as f64;
            }
            dweight[o * c + i] = (dweight[o * c + i] as f64 + acc) as f32;
        }
    }
    if let Some(dbias) = dbias {
        for o in 0..oc {
            let acc: f64 = (0..n).map(|r| dout[r * oc + o] as f64).sum();
            dbias[o] = (dbias[o] as f64 + acc) as f32;
        }
    }
}

/// [`AttentionForward`]; saves `inp` itself in `qkvr` (3*B*T*C values), which is what
/// [`attention_backward`] reads.
pub fn attention_forward(a: AttentionForward<&mut [f32], &[f32]>) {
    let AttentionForward {
        out,
        qkvr,
        att,
        inp,
        b,
        t,
        c,
        nh,
    } = a;
    let hs = c / nh;
    let scale = 1.0 / (hs as f64).sqrt();
    let c3 = 3 * c;
    let mut scores = vec![0f64; t];
    for bb in 0..b {
        for h in 0..nh {
            for t1 in 0..t {
                let q = &inp[(bb * t + t1) * c3 + h * hs..][..hs];
                let mut mx = f64::NEG_INFINITY;
                for (t2, s) in scores.iter_mut().enumerate().take(t1 + 1) {
                    let k = &inp[(bb * t + t2) * c3 + c + h * hs..][..hs];
                    *s = scale * (0..hs).map(|d| q[d] as f64 * k[d] as f64).sum::<f64>();
                    mx = mx.max(*s);
                }
                let sum: f64 = scores[..=t1].iter().map(|s| (s - mx).exp()).sum();
                let arow = &mut att[((bb * nh + h) * t + t1) * t..][..t];
                for t2 in 0..t {
                    arow[t2] = if t2 <= t1 {
                        ((scores[t2] - mx).exp() / sum) as f32
                    } else {
                        0.0
                    };
                }
                for d in 0..hs {
                    let acc: f64 = (0..=t1)
                        .map(|t2| {
                            arow[t2] as f64 * inp[(bb * t + t2) * c3 + 2 * c + h * hs + d] as f64
                        })
                        .sum();
                    out[(bb * t + t1) * c + h * hs + d] = acc as f32;
                }
            }
        }
    }
    qkvr[..b * t * c3].copy_from_slice(&inp[..b * t * c3]);
}

/// [`AttentionBackward`] from the input copy in `qkvr` and the probabilities in `att`; the GPU
/// scratch buffers are not used.
pub fn attention_backward(a: AttentionBackward<&mut [f32], &[f32]>) {
    let AttentionBackward {
        dinp,
        dout,
        qkvr: inp,
        att,
        b,
        t,
        c,
        nh,
        ..
    } = a;
    let hs = c / nh;
    let scale = 1.0 / (hs as f64).sqrt();
    let c3 = 3 * c;
    let mut acc = vec![0f64; b * t * c3];
    let mut datt = vec![0f64; t];
    for bb in 0..b {
        for h in 0..nh {
            let qo = |tt: usize| (bb * t + tt) * c3 + h * hs;
            let (ko, vo) = (|tt: usize| qo(tt) + c, |tt: usize| qo(tt) + 2 * c);
            for t1 in 0..t {
                let arow = &att[((bb * nh + h) * t + t1) * t..][..t];
                let dy = &dout[(bb * t + t1) * c + h * hs..][..hs];
                // out[t1] = sum_t2 att[t1, t2] v[t2]
                for t2 in 0..=t1 {
                    datt[t2] = (0..hs).map(|d| dy[d] as f64 * inp[vo(t2) + d] as f64).sum();
                    for d in 0..hs {
                        acc[vo(t2) + d] += arow[t2] as f64 * dy[d] as f64;
                    }
                }
                // Softmax backward, then the scaled scores q[t1].k[t2] * scale.
                let dot: f64 = (0..=t1).map(|t2| arow[t2] as f64 * datt[t2]).sum();
                for t2 in 0..=t1 {
                    let ds = arow[t2] as f64 * (datt[t2] - dot) * scale;
                    for d in 0..hs {
                        acc[qo(t1) + d] += ds * inp[ko(t2) + d] as f64;
                        acc[ko(t2) + d] += ds * inp[qo(t1) + d] as f64;
                    }
                }
            }
        }
    }
    for (o, a) in dinp[..b * t * c3].iter_mut().zip(acc) {
        *o = a as f32;
    }
}

/// GELU, tanh approximation.
pub fn gelu_forward(out: &mut [f32], inp: &[f32], n: usize) {
    for i in 0..n {
        let x = inp[i] as f64;
        out[i] = (0.5 * x * (1.0 + (GELU_K * (x + GELU_A * x * x * x)).tanh())) as f32;
    }
}

/// dinp = gelu'(inp) * dout (overwritten).
pub fn gelu_backward(dinp: &mut [f32], inp: &[f32], dout: &[f32], n: usize) {
    for i in 0..n {
        let x = inp[i] as f64;
        let th = (GELU_K * (x + GELU_A * x * x * x)).tanh();
        let grad =
            0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * GELU_K * (1.0 + 3.0 * GELU_A * x * x);
        dinp[i] = (grad * dout[i] as f64) as f32;
    }
}

const GELU_K: f64 = 0.797_884_560_802_865_4; // sqrt(2 / pi)
const GELU_A: f64 = 0.044715;

/// out = a + b.
pub fn residual_forward(out: &mut [f32], a: &[f32], b: &[f32], n: usize) {
    for i in 0..n {
        out[i] = a[i] + b[i];
    }
}

/// [`FusedClassifier`].
pub fn fused_classifier(a: FusedClassifier<&mut [f32], &[i32]>) {
    let FusedClassifier {
        logits,
        losses,
        targets,
        n,
        v,
        vp,
        dloss,
    } = a;
    for r in 0..n {
        let row = &mut logits[r * vp..(r + 1) * vp];
        let mx = row[..v]
            .iter()
            .fold(f64::NEG_INFINITY, |m, &x| m.max(x as f64));
        let sum: f64 = row[..v].iter().map(|&x| (x as f64 - mx).exp()).sum();
        let target = usize::try_from(targets[r]).ok().filter(|&tg| tg < v);
        losses[r] = match target {
            Some(tg) => (sum.ln() - (row[tg] as f64 - mx)) as f32,
            None => f32::NAN,
        };
        if let Some(s) = dloss {
            for (j, x) in row.iter_mut().enumerate() {
                *x = if j < v {
                    let p = (*x as f64 - mx).exp() / sum;
                    let onehot = if Some(j) == target { 1.0 } else { 0.0 };
                    (s as f64 * (p - onehot)) as f32
                } else {
                    0.0
                };
            }
        }
    }
}

/// [`Adamw`]: the kernel's f32 formula in the kernel's order (see kernels/adamw.cu);
/// bias corrections from [`crate::ops::adamw_bias_corrections`].
///
/// # Panics
/// If t == 0 or a beta lies outside [0, 1) (errors in [`crate::ops::Ops::adamw`]).
pub fn adamw(a: Adamw<&mut [f32], &[f32]>) {
    let Adamw {
        params,
        grads,
        m,
        v,
        n,
        step,
    } = a;
    let AdamwStep {
        lr,
        beta1,
        beta2,
        eps,
        weight_decay,
        t,
        grad_scale,
    } = step;
    let (bc1, bc2) = crate::ops::adamw_bias_corrections("reference::adamw", beta1, beta2, t)
        .expect("valid AdamW step and betas");
    for i in 0..n {
        let g = grads[i] * grad_scale;
        let mi = beta1 * m[i] + (1.0 - beta1) * g;
        let vi = beta2 * v[i] + (1.0 - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        let p = params[i];
        let mhat = mi / bc1;
        let vhat = vi / bc2;
        params[i] = p - lr * (mhat / (vhat.sqrt() + eps) + weight_decay * p);
    }
}

/// Sum of squares of `x[..n]` (accumulated in f64).
pub fn sum_squares(x: &[f32], n: usize) -> f32 {
    x[..n].iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>() as f32
}
