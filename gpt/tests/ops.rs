//! The model kernels against the CPU references, and the references against finite differences.
//!
//! CPU tests (run by `cargo test`): every `reference::*_backward` is checked against central
//! finite differences of its `*_forward` (this proves the references), plus known values for
//! the classifier, AdamW and the sum of squares.
//!
//! GPU tests (`gpu_test!(1, name)`, the test `pe1_name`): every `Ops` kernel is checked against
//! the reference on small random shapes (T not a power of two, C and T past one warp, N past
//! one block, several reduction parts). They use cudarc directly on GPU 0's default stream and
//! need no NVSHMEM. Tolerances: the kernels compute in f32 with their own summation order and
//! the references accumulate in f64, so a sum of K terms of size ~1 may differ by ~K * 2^-24
//! relative to its terms; with K <= 3*48 here that is ~1e-5 of the largest value. Forward
//! checks use |got - want| <= 1e-4 |want| + 1e-5 max|want|; backward checks, whose sums cancel
//! more (softmax and LayerNorm gradients subtract means), use 1e-3 |want| + 1e-4 max|want|.
//! A wrong index or formula gives errors of the order of max|want| and fails either bound.

mod common;

use common::{assert_every, gpu_test, TF32_LOST, TF32_SHAPE};
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};
use nvsh_gpt::error::GptError;
use nvsh_gpt::op_args::{
    Adamw, AdamwStep, AttentionBackward, AttentionForward, EncoderBackward, EncoderForward,
    FusedClassifier, LayernormBackward, LayernormForward, MatmulBackward, MatmulForward,
};
use nvsh_gpt::ops::{F32Ptr, I32Ptr, Ops};
use nvsh_gpt::reference as cpu;

// ------------------------------------------------------------------ shared helpers

/// SplitMix64: deterministic test data without a dependency.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [-scale, scale).
    fn uniform(&mut self, scale: f32) -> f32 {
        let u = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        (2.0 * u - 1.0) * scale
    }
    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform(scale)).collect()
    }
    fn tokens(&mut self, n: usize, v: usize) -> Vec<i32> {
        (0..n)
            .map(|_| (self.next_u64() % v as u64) as i32)
            .collect()
    }
}

/// Every element within rtol * |want| + atol_rel * max|want| (see the module comment).
fn assert_close(what: &str, got: &[f32], want: &[f32], rtol: f64, atol_rel: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want.iter().fold(0f64, |m, &w| m.max((w as f64).abs()));
    let atol = atol_rel * scale.max(1e-30);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (g as f64 - w as f64).abs();
        let bound = rtol * (w as f64).abs() + atol;
        assert!(
            err <= bound,
            "{what}: element {i} is {g}, expected {w} (error {err:.3e} > bound {bound:.3e}; \
             largest |expected| {scale:.3e})"
        );
    }
    assert!(
        scale > 0.0 || want.is_empty(),
        "{what}: all-zero expectation tests nothing"
    );
}

const FWD: (f64, f64) = (1e-4, 1e-5);
const BWD: (f64, f64) = (1e-3, 1e-4);

/// Sum of out[i] * r[i] in f64: the scalar loss whose gradient with respect to out is r.
fn dot(out: &[f32], r: &[f32]) -> f64 {
    out.iter().zip(r).map(|(&a, &b)| a as f64 * b as f64).sum()
}

/// Central finite differences of `loss` at x (every coordinate).
fn numeric_grad(x: &[f32], eps: f32, loss: impl Fn(&[f32]) -> f64) -> Vec<f32> {
    let mut xp = x.to_vec();
    (0..x.len())
        .map(|i| {
            let orig = xp[i];
            xp[i] = orig + eps;
            let up = loss(&xp);
            xp[i] = orig - eps;
            let down = loss(&xp);
            xp[i] = orig;
            ((up - down) / (2.0 * (eps as f64))) as f32
        })
        .collect()
}

/// Finite-difference check: |analytic - numeric| <= 2e-3 max|analytic| + 2e-4 (absolute).
/// With eps = 1e-2 on O(1) inputs, truncation (~eps^2) and f32 rounding of the forward
/// (~1e-7 / eps per output) stay below ~1e-4; a wrong gradient is off by ~max|analytic|.
fn assert_grad(what: &str, analytic: &[f32], numeric: &[f32]) {
    assert_eq!(analytic.len(), numeric.len(), "{what}: length");
    let scale = analytic.iter().fold(0f32, |m, &a| m.max(a.abs()));
    assert!(
        scale > 1e-3,
        "{what}: gradient is ~0, the check would test nothing"
    );
    let bound = 2e-3 * scale + 2e-4;
    for (i, (&a, &n)) in analytic.iter().zip(numeric).enumerate() {
        assert!(
            (a - n).abs() <= bound,
            "{what}: element {i}: analytic {a}, finite difference {n} (bound {bound:.2e})"
        );
    }
}

fn sub(a: &[f32], b: &[f32]) -> Vec<f32> {
    a.iter().zip(b).map(|(x, y)| x - y).collect()
}

const EPS: f32 = 1e-2;

/// The reference LayerNorm of n rows of width c: (out, mean, rstd).
fn ln_forward(x: &[f32], w: &[f32], bias: &[f32], n: usize, c: usize) -> [Vec<f32>; 3] {
    let (mut out, mut mean, mut rstd) = (vec![0.0; n * c], vec![0.0; n], vec![0.0; n]);
    cpu::layernorm_forward(LayernormForward {
        out: &mut out,
        mean: &mut mean,
        rstd: &mut rstd,
        inp: x,
        w,
        bias,
        n,
        c,
    });
    [out, mean, rstd]
}

/// The reference attention over the qkv input: (out, att, qkvr).
fn att_forward(inp: &[f32], b: usize, t: usize, c: usize, nh: usize) -> [Vec<f32>; 3] {
    let (mut out, mut att) = (vec![0.0; b * t * c], vec![0.0; b * nh * t * t]);
    let mut qkvr = vec![0.0; b * t * 3 * c];
    cpu::attention_forward(AttentionForward {
        out: &mut out,
        qkvr: &mut qkvr,
        att: &mut att,
        inp,
        b,
        t,
        c,
        nh,
    });
    [out, att, qkvr]
}

/// The scalars of an AdamW step, in the kernel's argument order.
fn adamw_step(
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    weight_decay: f32,
    t: u32,
    gs: f32,
) -> AdamwStep {
    AdamwStep {
        lr,
        beta1,
        beta2,
        eps,
        weight_decay,
        t,
        grad_scale: gs,
    }
}

// ------------------------------------------------------------------ CPU: the references

#[test]
fn reference_encoder_gradcheck() {
    let mut rng = Rng(1);
    let (b, t, c, v) = (2, 5, 6, 4); // 10 positions, 4 tokens: repeated tokens accumulate
    let tokens = rng.tokens(b * t, v);
    let (wte, wpe, r) = (
        rng.vec(v * c, 1.0),
        rng.vec(t * c, 1.0),
        rng.vec(b * t * c, 1.0),
    );
    let fwd = |wte: &[f32], wpe: &[f32]| {
        let mut out = vec![0.0; b * t * c];
        cpu::encoder_forward(EncoderForward {
            out: &mut out,
            tokens: &tokens,
            wte,
            wpe,
            b,
            t,
            c,
        });
        dot(&out, &r)
    };
    let (g0_te, g0_pe) = (rng.vec(v * c, 1.0), rng.vec(t * c, 1.0));
    let (mut dwte, mut dwpe) = (g0_te.clone(), g0_pe.clone());
    cpu::encoder_backward(EncoderBackward {
        dwte: &mut dwte,
        dwpe: &mut dwpe,
        dout: &r,
        tokens: &tokens,
        b,
        t,
        c,
    });
    assert_grad(
        "dwte",
        &sub(&dwte, &g0_te),
        &numeric_grad(&wte, EPS, |x| fwd(x, &wpe)),
    );
    assert_grad(
        "dwpe",
        &sub(&dwpe, &g0_pe),
        &numeric_grad(&wpe, EPS, |x| fwd(&wte, x)),
    );
}

#[test]
fn reference_layernorm_gradcheck() {
    let mut rng = Rng(2);
    let (n, c) = (5, 7);
    let (x, w, bias, r) = (
        rng.vec(n * c, 2.0),
        rng.vec(c, 1.5),
        rng.vec(c, 1.0),
        rng.vec(n * c, 1.0),
    );
    let fwd = |x: &[f32], w: &[f32], bias: &[f32]| {
        let [out, mean, rstd] = ln_forward(x, w, bias, n, c);
        (dot(&out, &r), out, mean, rstd)
    };
    let (_, out, mean, rstd) = fwd(&x, &w, &bias);
    // The saved statistics and the normalised rows are what LayerNorm means.
    for row in 0..n {
        let xs = &x[row * c..(row + 1) * c];
        let m = xs.iter().map(|&v| v as f64).sum::<f64>() / c as f64;
        let var = xs.iter().map(|&v| (v as f64 - m).powi(2)).sum::<f64>() / c as f64;
        assert!((mean[row] as f64 - m).abs() < 1e-6);
        assert!((rstd[row] as f64 - 1.0 / (var + 1e-5).sqrt()).abs() < 1e-5);
        let o0 = ((xs[0] as f64 - m) / (var + 1e-5).sqrt()) * w[0] as f64 + bias[0] as f64;
        assert!((out[row * c] as f64 - o0).abs() < 1e-5);
    }
    let (d0, dw0, db0) = (rng.vec(n * c, 1.0), rng.vec(c, 1.0), rng.vec(c, 1.0));
    let (mut dx, mut dw, mut db) = (d0.clone(), dw0.clone(), db0.clone());
    cpu::layernorm_backward(LayernormBackward {
        dinp: &mut dx,
        dw: &mut dw,
        db: &mut db,
        dout: &r,
        inp: &x,
        w: &w,
        mean: &mean,
        rstd: &rstd,
        n,
        c,
    });
    assert_grad(
        "dinp",
        &sub(&dx, &d0),
        &numeric_grad(&x, EPS, |v| fwd(v, &w, &bias).0),
    );
    assert_grad(
        "dw",
        &sub(&dw, &dw0),
        &numeric_grad(&w, EPS, |v| fwd(&x, v, &bias).0),
    );
    assert_grad(
        "db",
        &sub(&db, &db0),
        &numeric_grad(&bias, EPS, |v| fwd(&x, &w, v).0),
    );
}

#[test]
fn reference_matmul_gradcheck() {
    let mut rng = Rng(3);
    let (n, c, oc) = (4, 5, 3);
    let (x, wt, bias, r) = (
        rng.vec(n * c, 1.0),
        rng.vec(oc * c, 1.0),
        rng.vec(oc, 1.0),
        rng.vec(n * oc, 1.0),
    );
    let fwd = |x: &[f32], wt: &[f32], bias: &[f32]| {
        let mut out = vec![0.0; n * oc];
        cpu::matmul_forward(MatmulForward {
            out: &mut out,
            inp: x,
            weight: wt,
            bias: Some(bias),
            n,
            c,
            oc,
        });
        dot(&out, &r)
    };
    // One element by hand: out[1, 2] = x[1, :] . w[2, :] + bias[2].
    let mut out = vec![0.0; n * oc];
    cpu::matmul_forward(MatmulForward {
        out: &mut out,
        inp: &x,
        weight: &wt,
        bias: Some(&bias),
        n,
        c,
        oc,
    });
    let want: f32 = (0..c).map(|i| x[c + i] * wt[2 * c + i]).sum::<f32>() + bias[2];
    assert!((out[oc + 2] - want).abs() < 1e-5);
    // dinp is overwritten (start from garbage); dweight and dbias accumulate.
    let (dw0, db0) = (rng.vec(oc * c, 1.0), rng.vec(oc, 1.0));
    let (mut dx, mut dw, mut db) = (rng.vec(n * c, 9.0), dw0.clone(), db0.clone());
    cpu::matmul_backward(MatmulBackward {
        dinp: &mut dx,
        dweight: &mut dw,
        dbias: Some(&mut db),
        dout: &r,
        inp: &x,
        weight: &wt,
        n,
        c,
        oc,
    });
    assert_grad("dinp", &dx, &numeric_grad(&x, EPS, |v| fwd(v, &wt, &bias)));
    assert_grad(
        "dweight",
        &sub(&dw, &dw0),
        &numeric_grad(&wt, EPS, |v| fwd(&x, v, &bias)),
    );
    assert_grad(
        "dbias",
        &sub(&db, &db0),
        &numeric_grad(&bias, EPS, |v| fwd(&x, &wt, v)),
    );
}

#[test]
fn reference_attention_gradcheck() {
    let mut rng = Rng(4);
    for (b, t, c, nh) in [(1, 4, 6, 2), (2, 5, 8, 2), (1, 3, 9, 3)] {
        let (inp, r) = (rng.vec(b * t * 3 * c, 1.0), rng.vec(b * t * c, 1.0));
        let fwd = |inp: &[f32]| {
            let [out, att, qkvr] = att_forward(inp, b, t, c, nh);
            (dot(&out, &r), out, att, qkvr)
        };
        let (_, out, att, qkvr) = fwd(&inp);
        assert_eq!(qkvr, inp, "the CPU saves its input as qkvr");
        // Rows of att are causal distributions; position 0 attends only to itself, so its
        // output is v[0] exactly.
        let hs = c / nh;
        for row in 0..b * nh * t {
            let (tt, a) = (row % t, &att[row * t..(row + 1) * t]);
            assert!((a.iter().sum::<f32>() - 1.0).abs() < 1e-5);
            assert!(a[tt + 1..].iter().all(|&p| p == 0.0) && a[..=tt].iter().all(|&p| p > 0.0));
        }
        for h in 0..nh {
            for d in 0..hs {
                assert!((out[h * hs + d] - inp[2 * c + h * hs + d]).abs() < 1e-6);
            }
        }
        let mut dinp = rng.vec(b * t * 3 * c, 9.0); // overwritten
        cpu::attention_backward(AttentionBackward {
            dinp: &mut dinp,
            dqkvr: &mut [],
            datt: &mut [],
            scratch: &mut [],
            dout: &r,
            qkvr: &inp,
            att: &att,
            b,
            t,
            c,
            nh,
        });
        let what = format!("attention dinp (B={b}, T={t}, C={c}, NH={nh})");
        assert_grad(&what, &dinp, &numeric_grad(&inp, EPS, |v| fwd(v).0));
    }
}

#[test]
fn reference_gelu_gradcheck() {
    let mut rng = Rng(5);
    let n = 40;
    let (x, r) = (rng.vec(n, 4.0), rng.vec(n, 1.0));
    let fwd = |x: &[f32]| {
        let mut out = vec![0.0; n];
        cpu::gelu_forward(&mut out, x, n);
        dot(&out, &r)
    };
    let mut out = vec![0.0; 3];
    cpu::gelu_forward(&mut out, &[0.0, 1.0, -1.0], 3);
    // Known values of the tanh approximation: gelu(1) = 0.841192, gelu(-1) = -0.158808.
    assert!(
        out[0] == 0.0 && (out[1] - 0.841_192).abs() < 1e-5 && (out[2] + 0.158_808).abs() < 1e-5
    );
    let mut dx = rng.vec(n, 9.0); // overwritten
    cpu::gelu_backward(&mut dx, &x, &r, n);
    assert_grad("gelu dinp", &dx, &numeric_grad(&x, EPS, fwd));
}

#[test]
fn reference_classifier_values_and_gradcheck() {
    let mut rng = Rng(6);
    let (n, v, vp, s) = (4, 7, 8, 0.7f32);
    let logits = rng.vec(n * vp, 2.0);
    let targets = vec![0, 6, 3, 3];
    let losses_of = |logits: &[f32]| {
        let (mut l, mut losses) = (logits.to_vec(), vec![0.0; n]);
        cpu::fused_classifier(FusedClassifier {
            logits: &mut l,
            losses: &mut losses,
            targets: &targets,
            n,
            v,
            vp,
            dloss: None,
        });
        assert_eq!(l, logits, "without dloss the logits stay");
        losses
    };
    let losses = losses_of(&logits);
    for r in 0..n {
        let row = &logits[r * vp..r * vp + v];
        let z: f64 = row.iter().map(|&x| (x as f64).exp()).sum();
        let want = -((row[targets[r] as usize] as f64).exp() / z).ln();
        assert!(
            (losses[r] as f64 - want).abs() < 1e-5,
            "row {r}: {} vs {want}",
            losses[r]
        );
    }
    // The padding column takes no part: a huge padded logit changes nothing.
    let mut padded = logits.clone();
    for r in 0..n {
        padded[r * vp + v] = 100.0;
    }
    assert_eq!(losses_of(&padded), losses);
    // Gradient of s * sum(losses), padding 0.
    let (mut grad, mut l2) = (logits.clone(), vec![0.0; n]);
    cpu::fused_classifier(FusedClassifier {
        logits: &mut grad,
        losses: &mut l2,
        targets: &targets,
        n,
        v,
        vp,
        dloss: Some(s),
    });
    assert_eq!(l2, losses);
    assert!((0..n).all(|r| grad[r * vp + v] == 0.0));
    let numeric = numeric_grad(&logits, EPS, |x| {
        s as f64 * losses_of(x).iter().map(|&l| l as f64).sum::<f64>()
    });
    assert_grad("classifier dlogits", &grad, &numeric);
    // A target outside 0..V gives NaN, not a panic or a read out of bounds.
    let mut l3 = vec![0.0; 1];
    cpu::fused_classifier(FusedClassifier {
        logits: &mut logits[..vp].to_vec(),
        losses: &mut l3,
        targets: &[7],
        n: 1,
        v,
        vp,
        dloss: Some(1.0),
    });
    assert!(l3[0].is_nan());
}

#[test]
fn reference_adamw_known_values() {
    // Step 1 without decay: mhat = g, vhat = g^2, so the step is lr * g / (|g| + eps).
    let (lr, eps) = (0.01f32, 1e-8f32);
    let mut p = vec![1.0f32, -2.0, 0.5, 3.0];
    let g = vec![0.5f32, -0.25, 0.0, 2.0];
    let (mut m, mut v) = (vec![0.0; 4], vec![0.0; 4]);
    cpu::adamw(Adamw {
        params: &mut p,
        grads: &g,
        m: &mut m,
        v: &mut v,
        n: 4,
        step: adamw_step(lr, 0.9, 0.999, eps, 0.0, 1, 1.0),
    });
    let want = [1.0 - lr, -2.0 + lr, 0.5, 3.0 - lr];
    for i in 0..4 {
        assert!(
            (p[i] - want[i]).abs() < 1e-6,
            "param {i}: {} vs {}",
            p[i],
            want[i]
        );
    }
    // m = 0.1 g, v = 0.001 g^2, up to the f32 rounding of 1 - beta (1 - 0.999f32 ~ 0.99999e-3).
    assert!((m[0] - 0.05).abs() < 1e-7 && (v[0] - 0.000_25).abs() < 1e-8);
    // Weight decay with a zero gradient: p -= lr * wd * p. grad_scale scales the gradient.
    let mut p = vec![2.0f32];
    let (mut m, mut v) = (vec![0.0; 1], vec![0.0; 1]);
    cpu::adamw(Adamw {
        params: &mut p,
        grads: &[0.0],
        m: &mut m,
        v: &mut v,
        n: 1,
        step: adamw_step(0.1, 0.9, 0.95, 1e-8, 0.5, 3, 1.0),
    });
    assert!((p[0] - (2.0 - 0.1 * 0.5 * 2.0)).abs() < 1e-6);
    // Step 2 by hand in f64 (grad_scale 0.5, decay 0.1).
    let (b1, b2, wd, gs) = (0.9f64, 0.99f64, 0.1f64, 0.5f64);
    let (p0, m0, v0, g0) = (0.3f64, 0.2f64, 0.04f64, -0.6f64);
    let gg = g0 * gs;
    let (m1, v1) = (b1 * m0 + (1.0 - b1) * gg, b2 * v0 + (1.0 - b2) * gg * gg);
    let step = (m1 / (1.0 - b1 * b1)) / ((v1 / (1.0 - b2 * b2)).sqrt() + 1e-8);
    let want = p0 - 0.01 * (step + wd * p0);
    let (mut p, mut m, mut v) = (vec![p0 as f32], vec![m0 as f32], vec![v0 as f32]);
    cpu::adamw(Adamw {
        params: &mut p,
        grads: &[g0 as f32],
        m: &mut m,
        v: &mut v,
        n: 1,
        step: adamw_step(0.01, b1 as f32, b2 as f32, 1e-8, wd as f32, 2, gs as f32),
    });
    assert!((p[0] as f64 - want).abs() < 1e-6, "{} vs {want}", p[0]);
    assert!((m[0] as f64 - m1).abs() < 1e-7 && (v[0] as f64 - v1).abs() < 1e-7);
}

#[test]
fn reference_sum_squares_and_residual() {
    assert_eq!(cpu::sum_squares(&[1.0, -2.0, 3.0, 100.0], 3), 14.0);
    assert_eq!(cpu::sum_squares(&[], 0), 0.0);
    let mut out = vec![0.0; 3];
    cpu::residual_forward(&mut out, &[1.0, 2.0, 3.0], &[0.5, -2.0, 1.0], 3);
    assert_eq!(out, vec![1.5, 0.0, 4.0]);
}

// ------------------------------------------------------------------ GPU: the kernels

/// GPU 0's default stream, the kernels, and upload/download helpers.
struct Gpu {
    stream: Arc<CudaStream>,
    ops: Ops,
}

impl Gpu {
    fn new() -> Gpu {
        let ctx = CudaContext::new(0).expect("CUDA device 0 (this test needs 1 GPU)");
        let stream = ctx.default_stream();
        let ops = Ops::new(stream.clone()).expect("Ops::new (kernels and cuBLAS)");
        Gpu { stream, ops }
    }
    fn up(&self, host: &[f32]) -> CudaSlice<f32> {
        if host.is_empty() {
            return self.zeros(1);
        }
        self.stream.clone_htod(host).expect("upload")
    }
    fn up_i32(&self, host: &[i32]) -> CudaSlice<i32> {
        self.stream.clone_htod(host).expect("upload")
    }
    fn zeros(&self, n: usize) -> CudaSlice<f32> {
        self.stream.alloc_zeros(n.max(1)).expect("alloc")
    }
    fn p(&self, s: &CudaSlice<f32>) -> F32Ptr {
        F32Ptr(s.device_ptr(&self.stream).0)
    }
    fn pi(&self, s: &CudaSlice<i32>) -> I32Ptr {
        I32Ptr(s.device_ptr(&self.stream).0)
    }
    /// The kernels' attention forward on [out, qkvr, att, inp], shape (B, T, C, NH).
    fn attention_forward(&self, bufs: [&CudaSlice<f32>; 4], shape: (usize, usize, usize, usize)) {
        let [out, qkvr, att, inp] = bufs.map(|s| self.p(s));
        let (b, t, c, nh) = shape;
        let args = AttentionForward {
            out,
            qkvr,
            att,
            inp,
            b,
            t,
            c,
            nh,
        };
        self.ops.attention_forward(args).unwrap();
    }
    fn down(&self, s: &CudaSlice<f32>) -> Vec<f32> {
        self.stream
            .synchronize()
            .expect("kernels ran without a CUDA error");
        self.stream.clone_dtoh(s).expect("download")
    }
}

/// (B, T, C, NH): T not a power of two, T and C past one warp, NH both below and above B.
const SHAPES: [(usize, usize, usize, usize); 5] = [
    (2, 5, 8, 2),
    (2, 7, 12, 3),
    (1, 17, 48, 4),
    (3, 13, 32, 2),
    (2, 37, 40, 4),
];

gpu_test!(1, encoder_forward);
fn encoder_forward() {
    let g = Gpu::new();
    let mut rng = Rng(10);
    for (b, t, c, v) in [(2, 5, 8, 7), (1, 17, 48, 50), (4, 100, 24, 7)] {
        let (tokens, wte, wpe) = (
            rng.tokens(b * t, v),
            rng.vec(v * c, 1.0),
            rng.vec(t * c, 1.0),
        );
        let mut want = vec![0.0; b * t * c];
        cpu::encoder_forward(EncoderForward {
            out: &mut want,
            tokens: &tokens,
            wte: &wte,
            wpe: &wpe,
            b,
            t,
            c,
        });
        let (dt, dwte, dwpe, out) = (
            g.up_i32(&tokens),
            g.up(&wte),
            g.up(&wpe),
            g.zeros(b * t * c),
        );
        g.ops
            .encoder_forward(EncoderForward {
                out: g.p(&out),
                tokens: g.pi(&dt),
                wte: g.p(&dwte),
                wpe: g.p(&dwpe),
                b,
                t,
                c,
            })
            .unwrap();
        // One f32 add per element, as in the reference: exact.
        assert_eq!(g.down(&out), want, "encoder_forward B={b} T={t} C={c}");
    }
}

gpu_test!(1, encoder_backward);
fn encoder_backward() {
    let g = Gpu::new();
    let mut rng = Rng(11);
    // N = 400 > 256 exercises the multi-chunk token scans; V = 7 makes every token repeat.
    for (b, t, c, v) in [
        (2, 5, 8, 7),
        (1, 17, 48, 50),
        (4, 100, 24, 7),
        (2, 300, 8, 3),
    ] {
        let tokens = rng.tokens(b * t, v);
        let (dout, dwte0, dwpe0) = (
            rng.vec(b * t * c, 1.0),
            rng.vec(v * c, 1.0),
            rng.vec(t * c, 1.0),
        );
        let (mut want_te, mut want_pe) = (dwte0.clone(), dwpe0.clone());
        cpu::encoder_backward(EncoderBackward {
            dwte: &mut want_te,
            dwpe: &mut want_pe,
            dout: &dout,
            tokens: &tokens,
            b,
            t,
            c,
        });
        let (dt, dd, dte, dpe) = (g.up_i32(&tokens), g.up(&dout), g.up(&dwte0), g.up(&dwpe0));
        g.ops
            .encoder_backward(EncoderBackward {
                dwte: g.p(&dte),
                dwpe: g.p(&dpe),
                dout: g.p(&dd),
                tokens: g.pi(&dt),
                b,
                t,
                c,
            })
            .unwrap();
        // Same f32 additions in the same order as the reference (encoder.cu): exact.
        assert_eq!(g.down(&dte), want_te, "dwte B={b} T={t} C={c} V={v}");
        assert_eq!(g.down(&dpe), want_pe, "dwpe B={b} T={t} C={c} V={v}");
    }
}

gpu_test!(1, layernorm_forward);
fn layernorm_forward() {
    let g = Gpu::new();
    let mut rng = Rng(12);
    for (n, c) in [(10, 8), (17, 48), (37, 40), (300, 33)] {
        let (x, w, bias) = (rng.vec(n * c, 2.0), rng.vec(c, 1.5), rng.vec(c, 1.0));
        let [out, mean, rstd] = ln_forward(&x, &w, &bias, n, c);
        let (dx, dw, db) = (g.up(&x), g.up(&w), g.up(&bias));
        let (o, m, r) = (g.zeros(n * c), g.zeros(n), g.zeros(n));
        g.ops
            .layernorm_forward(LayernormForward {
                out: g.p(&o),
                mean: g.p(&m),
                rstd: g.p(&r),
                inp: g.p(&dx),
                w: g.p(&dw),
                bias: g.p(&db),
                n,
                c,
            })
            .unwrap();
        let what = format!("layernorm N={n} C={c}");
        assert_close(&format!("{what} out"), &g.down(&o), &out, FWD.0, FWD.1);
        assert_close(&format!("{what} mean"), &g.down(&m), &mean, FWD.0, FWD.1);
        assert_close(&format!("{what} rstd"), &g.down(&r), &rstd, FWD.0, FWD.1);
    }
}

gpu_test!(1, layernorm_backward);
fn layernorm_backward() {
    let g = Gpu::new();
    let mut rng = Rng(13);
    // N = 300 and 5000: several reduction parts, the last one partly filled.
    for (n, c) in [(10, 8), (17, 48), (37, 40), (300, 33), (5000, 24)] {
        let (x, w, bias, dout) = (
            rng.vec(n * c, 2.0),
            rng.vec(c, 1.5),
            rng.vec(c, 1.0),
            rng.vec(n * c, 1.0),
        );
        let [_, mean, rstd] = ln_forward(&x, &w, &bias, n, c);
        let (dx0, dw0, db0) = (rng.vec(n * c, 1.0), rng.vec(c, 1.0), rng.vec(c, 1.0));
        let (mut wdx, mut wdw, mut wdb) = (dx0.clone(), dw0.clone(), db0.clone());
        cpu::layernorm_backward(LayernormBackward {
            dinp: &mut wdx,
            dw: &mut wdw,
            db: &mut wdb,
            dout: &dout,
            inp: &x,
            w: &w,
            mean: &mean,
            rstd: &rstd,
            n,
            c,
        });
        let (gx, gw, gm, gr, gd) = (g.up(&x), g.up(&w), g.up(&mean), g.up(&rstd), g.up(&dout));
        let (gdx, gdw, gdb) = (g.up(&dx0), g.up(&dw0), g.up(&db0));
        let args = LayernormBackward {
            dinp: g.p(&gdx),
            dw: g.p(&gdw),
            db: g.p(&gdb),
            dout: g.p(&gd),
            inp: g.p(&gx),
            w: g.p(&gw),
            mean: g.p(&gm),
            rstd: g.p(&gr),
            n,
            c,
        };
        g.ops.layernorm_backward(args).unwrap();
        let what = format!("layernorm backward N={n} C={c}");
        // Compare the increments (the accumulated initial values are exact on both sides).
        assert_close(
            &format!("{what} dinp"),
            &sub(&g.down(&gdx), &dx0),
            &sub(&wdx, &dx0),
            BWD.0,
            BWD.1,
        );
        assert_close(
            &format!("{what} dw"),
            &sub(&g.down(&gdw), &dw0),
            &sub(&wdw, &dw0),
            BWD.0,
            BWD.1,
        );
        assert_close(
            &format!("{what} db"),
            &sub(&g.down(&gdb), &db0),
            &sub(&wdb, &db0),
            BWD.0,
            BWD.1,
        );
        // dinp may be dout itself: then dout += the input gradient, dw and db unchanged.
        let (gdw2, gdb2) = (g.up(&dw0), g.up(&db0));
        g.ops
            .layernorm_backward(LayernormBackward {
                dinp: g.p(&gd),
                dw: g.p(&gdw2),
                db: g.p(&gdb2),
                ..args
            })
            .unwrap();
        let want_alias: Vec<f32> = dout
            .iter()
            .zip(sub(&wdx, &dx0))
            .map(|(a, d)| a + d)
            .collect();
        assert_close(
            &format!("{what} dinp = dout"),
            &g.down(&gd),
            &want_alias,
            BWD.0,
            BWD.1,
        );
        assert_eq!(g.down(&gdw2), g.down(&gdw), "{what}: dw with dinp = dout");
        assert_eq!(g.down(&gdb2), g.down(&gdb), "{what}: db with dinp = dout");
    }
}

gpu_test!(1, matmul_forward);
fn matmul_forward() {
    let g = Gpu::new();
    let mut rng = Rng(14);
    for (n, c, oc, with_bias) in [
        (10, 8, 24, true),
        (17, 48, 144, true),
        (400, 32, 7, false),
        (37, 40, 8, true),
    ] {
        let (x, wt, bias) = (rng.vec(n * c, 1.0), rng.vec(oc * c, 1.0), rng.vec(oc, 1.0));
        let mut want = vec![0.0; n * oc];
        cpu::matmul_forward(MatmulForward {
            out: &mut want,
            inp: &x,
            weight: &wt,
            bias: with_bias.then_some(&bias[..]),
            n,
            c,
            oc,
        });
        let (gx, gw, gb, out) = (
            g.up(&x),
            g.up(&wt),
            g.up(&bias),
            g.up(&rng.vec(n * oc, 9.0)),
        );
        let gbias = with_bias.then(|| g.p(&gb));
        g.ops
            .matmul_forward(MatmulForward {
                out: g.p(&out),
                inp: g.p(&gx),
                weight: g.p(&gw),
                bias: gbias,
                n,
                c,
                oc,
            })
            .unwrap();
        assert_close(
            &format!("matmul N={n} C={c} OC={oc} bias={with_bias}"),
            &g.down(&out),
            &want,
            FWD.0,
            FWD.1,
        );
    }
}

gpu_test!(1, matmul_forward_tf32);
/// TF32 shown on, not only tolerated: inputs whose TF32 result differs exactly from FP32's.
fn matmul_forward_tf32() {
    let mut g = Gpu::new();
    let (n, c, oc) = (TF32_SHAPE, TF32_SHAPE, TF32_SHAPE);
    let (gx, gw, out) = (
        g.up(&vec![TF32_LOST; n * c]),
        g.up(&vec![1.0; oc * c]),
        g.zeros(n * oc),
    );
    let args = MatmulForward {
        out: g.p(&out),
        inp: g.p(&gx),
        weight: g.p(&gw),
        bias: None,
        n,
        c,
        oc,
    };
    g.ops.set_tf32(true).unwrap();
    g.ops.matmul_forward(args).unwrap();
    assert_every("matmul with TF32 on", &g.down(&out), c as f32);
    g.ops.set_tf32(false).unwrap();
    g.ops.matmul_forward(args).unwrap();
    assert_every(
        "matmul with TF32 off (strict FP32)",
        &g.down(&out),
        c as f32 * TF32_LOST,
    );
}

gpu_test!(1, matmul_backward);
fn matmul_backward() {
    let g = Gpu::new();
    let mut rng = Rng(16);
    for (n, c, oc, with_bias) in [
        (10, 8, 24, true),
        (17, 48, 144, true),
        (400, 32, 7, true),
        (37, 40, 8, false),
        (5000, 16, 40, true),
    ] {
        let (x, wt, dout) = (
            rng.vec(n * c, 1.0),
            rng.vec(oc * c, 1.0),
            rng.vec(n * oc, 1.0),
        );
        let (dw0, db0) = (rng.vec(oc * c, 1.0), rng.vec(oc, 1.0));
        let (mut wdx, mut wdw, mut wdb) = (vec![0.0; n * c], dw0.clone(), db0.clone());
        cpu::matmul_backward(MatmulBackward {
            dinp: &mut wdx,
            dweight: &mut wdw,
            dbias: with_bias.then_some(&mut wdb[..]),
            dout: &dout,
            inp: &x,
            weight: &wt,
            n,
            c,
            oc,
        });
        let (gx, gw, gd) = (g.up(&x), g.up(&wt), g.up(&dout));
        let (gdx, gdw, gdb) = (g.up(&rng.vec(n * c, 9.0)), g.up(&dw0), g.up(&db0)); // dinp: garbage, overwritten
        let gbias = with_bias.then(|| g.p(&gdb));
        g.ops
            .matmul_backward(MatmulBackward {
                dinp: g.p(&gdx),
                dweight: g.p(&gdw),
                dbias: gbias,
                dout: g.p(&gd),
                inp: g.p(&gx),
                weight: g.p(&gw),
                n,
                c,
                oc,
            })
            .unwrap();
        let what = format!("matmul backward N={n} C={c} OC={oc}");
        assert_close(&format!("{what} dinp"), &g.down(&gdx), &wdx, BWD.0, BWD.1);
        assert_close(
            &format!("{what} dweight"),
            &sub(&g.down(&gdw), &dw0),
            &sub(&wdw, &dw0),
            BWD.0,
            BWD.1,
        );
        if with_bias {
            assert_close(
                &format!("{what} dbias"),
                &sub(&g.down(&gdb), &db0),
                &sub(&wdb, &db0),
                BWD.0,
                BWD.1,
            );
        } else {
            assert_eq!(g.down(&gdb), db0, "{what}: dbias untouched without a bias");
        }
    }
}

gpu_test!(1, attention_forward);
fn attention_forward() {
    let g = Gpu::new();
    let mut rng = Rng(17);
    for (b, t, c, nh) in SHAPES {
        let inp = rng.vec(b * t * 3 * c, 1.0);
        let [out, att, _] = att_forward(&inp, b, t, c, nh);
        let (gi, gout, gq, ga) = (
            g.up(&inp),
            g.zeros(b * t * c),
            g.zeros(3 * b * t * c),
            g.up(&rng.vec(b * nh * t * t, 9.0)),
        );
        g.attention_forward([&gout, &gq, &ga, &gi], (b, t, c, nh));
        let what = format!("attention B={b} T={t} C={c} NH={nh}");
        assert_close(&format!("{what} out"), &g.down(&gout), &out, FWD.0, FWD.1);
        assert_close(&format!("{what} att"), &g.down(&ga), &att, FWD.0, FWD.1);
        // qkvr is q | k | v in [B, NH, T, hs].
        let (hs, qkvr) = (c / nh, g.down(&gq));
        for (i, &got) in qkvr.iter().enumerate() {
            let (which, rest) = (i / (b * t * c), i % (b * t * c));
            let (bb, h, tt, d) = (
                rest / (nh * t * hs),
                rest / (t * hs) % nh,
                rest / hs % t,
                rest % hs,
            );
            assert_eq!(
                got,
                inp[(bb * t + tt) * 3 * c + which * c + h * hs + d],
                "{what} qkvr[{i}]"
            );
        }
    }
}

gpu_test!(1, attention_backward);
fn attention_backward() {
    let g = Gpu::new();
    let mut rng = Rng(18);
    for (b, t, c, nh) in SHAPES {
        let (inp, dout) = (rng.vec(b * t * 3 * c, 1.0), rng.vec(b * t * c, 1.0));
        let [_, att, _] = att_forward(&inp, b, t, c, nh);
        let mut want = vec![0.0; b * t * 3 * c];
        cpu::attention_backward(AttentionBackward {
            dinp: &mut want,
            dqkvr: &mut [],
            datt: &mut [],
            scratch: &mut [],
            dout: &dout,
            qkvr: &inp,
            att: &att,
            b,
            t,
            c,
            nh,
        });
        // The GPU's own forward provides qkvr and att, as in training.
        let (gi, gout, gq, ga) = (
            g.up(&inp),
            g.zeros(b * t * c),
            g.zeros(3 * b * t * c),
            g.zeros(b * nh * t * t),
        );
        g.attention_forward([&gout, &gq, &ga, &gi], (b, t, c, nh));
        let gd = g.up(&dout);
        let gdinp = g.up(&rng.vec(b * t * 3 * c, 9.0)); // overwritten
        let (gdq, gdatt, gs) = (
            g.zeros(3 * b * t * c),
            g.zeros(b * nh * t * t),
            g.zeros(b * t * c),
        );
        g.ops
            .attention_backward(AttentionBackward {
                dinp: g.p(&gdinp),
                dqkvr: g.p(&gdq),
                datt: g.p(&gdatt),
                scratch: g.p(&gs),
                dout: g.p(&gd),
                qkvr: g.p(&gq),
                att: g.p(&ga),
                b,
                t,
                c,
                nh,
            })
            .unwrap();
        assert_close(
            &format!("attention backward B={b} T={t} C={c} NH={nh}"),
            &g.down(&gdinp),
            &want,
            BWD.0,
            BWD.1,
        );
    }
}

gpu_test!(1, gelu_forward);
fn gelu_forward() {
    let g = Gpu::new();
    let mut rng = Rng(19);
    let n = 1000;
    let x = rng.vec(n, 5.0);
    let mut want = vec![0.0; n];
    cpu::gelu_forward(&mut want, &x, n);
    let (gx, out) = (g.up(&x), g.zeros(n));
    g.ops.gelu_forward(g.p(&out), g.p(&gx), n).unwrap();
    // tanhf is within a few ulps; gelu(x) ~ 0 for x << 0 needs the absolute term.
    assert_close("gelu forward", &g.down(&out), &want, 1e-5, 1e-6);
}

gpu_test!(1, gelu_backward);
fn gelu_backward() {
    let g = Gpu::new();
    let mut rng = Rng(20);
    let n = 1000;
    let (x, dout) = (rng.vec(n, 5.0), rng.vec(n, 1.0));
    let mut want = vec![0.0; n];
    cpu::gelu_backward(&mut want, &x, &dout, n);
    let (gx, gd, gdx) = (g.up(&x), g.up(&dout), g.up(&rng.vec(n, 9.0)));
    g.ops
        .gelu_backward(g.p(&gdx), g.p(&gx), g.p(&gd), n)
        .unwrap();
    assert_close("gelu backward", &g.down(&gdx), &want, 1e-5, 1e-6);
    // In place (dinp = dout), as the model may call it.
    g.ops
        .gelu_backward(g.p(&gd), g.p(&gx), g.p(&gd), n)
        .unwrap();
    assert_close("gelu backward in place", &g.down(&gd), &want, 1e-5, 1e-6);
}

gpu_test!(1, residual_forward);
fn residual_forward() {
    let g = Gpu::new();
    let mut rng = Rng(21);
    let n = 777;
    let (a, b) = (rng.vec(n, 1.0), rng.vec(n, 1.0));
    let mut want = vec![0.0; n];
    cpu::residual_forward(&mut want, &a, &b, n);
    let (ga, gb, out) = (g.up(&a), g.up(&b), g.zeros(n));
    g.ops
        .residual_forward(g.p(&out), g.p(&ga), g.p(&gb), n)
        .unwrap();
    assert_eq!(g.down(&out), want);
}

gpu_test!(1, elementwise);
fn elementwise() {
    let g = Gpu::new();
    let mut rng = Rng(22);
    let n = 1025;
    let (x, y) = (rng.vec(n, 1.0), rng.vec(n, 1.0));
    let (gx, gy) = (g.up(&x), g.up(&y));
    g.ops.add_inplace(g.p(&gx), g.p(&gy), n).unwrap();
    let sum: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a + b).collect();
    assert_eq!(g.down(&gx), sum, "add_inplace");
    g.ops.scale_inplace(g.p(&gx), -0.5, n - 1).unwrap();
    let mut scaled: Vec<f32> = sum.iter().map(|v| v * -0.5).collect();
    scaled[n - 1] = sum[n - 1]; // past the count: untouched
    assert_eq!(g.down(&gx), scaled, "scale_inplace");
    g.ops.copy(g.p(&gy).at(1), g.p(&gx), 10).unwrap();
    let mut copied = y.clone();
    copied[1..11].copy_from_slice(&scaled[..10]);
    assert_eq!(g.down(&gy), copied, "copy at an offset");
    g.ops.zero(g.p(&gy).at(3), n - 4).unwrap();
    let mut zeroed = copied.clone();
    zeroed[3..n - 1].fill(0.0);
    assert_eq!(g.down(&gy), zeroed, "zero at an offset");
    assert!(matches!(
        g.ops.copy(g.p(&gy), g.p(&gy).at(2), 10),
        Err(GptError::InvalidArgument { op: "copy", .. })
    ));
}

gpu_test!(1, classifier_forward);
fn classifier_forward() {
    let g = Gpu::new();
    let mut rng = Rng(23);
    for (n, v, vp) in [(10, 7, 8), (37, 50, 64), (5, 1000, 1024), (3, 50257, 50304)] {
        let mut logits = rng.vec(n * vp, 3.0);
        for r in 0..n {
            logits[r * vp + v..(r + 1) * vp].fill(100.0); // padding must not count
        }
        let mut targets = rng.tokens(n, v);
        targets[n - 1] = v as i32; // out of range: NaN loss
        let (mut want, mut wl) = (logits.clone(), vec![0.0; n]);
        cpu::fused_classifier(FusedClassifier {
            logits: &mut want,
            losses: &mut wl,
            targets: &targets,
            n,
            v,
            vp,
            dloss: None,
        });
        let (gl, gt, gloss) = (g.up(&logits), g.up_i32(&targets), g.zeros(n));
        g.ops
            .fused_classifier(FusedClassifier {
                logits: g.p(&gl),
                losses: g.p(&gloss),
                targets: g.pi(&gt),
                n,
                v,
                vp,
                dloss: None,
            })
            .unwrap();
        let got = g.down(&gloss);
        assert!(
            got[n - 1].is_nan() && wl[n - 1].is_nan(),
            "a bad target gives NaN"
        );
        assert_close(
            &format!("losses N={n} V={v}"),
            &got[..n - 1],
            &wl[..n - 1],
            FWD.0,
            FWD.1,
        );
        assert_eq!(g.down(&gl), logits, "without dloss the logits stay");
    }
}

gpu_test!(1, classifier_backward);
fn classifier_backward() {
    let g = Gpu::new();
    let mut rng = Rng(24);
    for (n, v, vp) in [(10, 7, 8), (37, 50, 64), (5, 1000, 1024), (3, 50257, 50304)] {
        let logits = rng.vec(n * vp, 3.0);
        let targets = rng.tokens(n, v);
        let s = 1.0 / n as f32;
        let (mut want, mut wl) = (logits.clone(), vec![0.0; n]);
        cpu::fused_classifier(FusedClassifier {
            logits: &mut want,
            losses: &mut wl,
            targets: &targets,
            n,
            v,
            vp,
            dloss: Some(s),
        });
        let (gl, gt, gloss) = (g.up(&logits), g.up_i32(&targets), g.zeros(n));
        g.ops
            .fused_classifier(FusedClassifier {
                logits: g.p(&gl),
                losses: g.p(&gloss),
                targets: g.pi(&gt),
                n,
                v,
                vp,
                dloss: Some(s),
            })
            .unwrap();
        let what = format!("classifier N={n} V={v} Vp={vp}");
        assert_close(
            &format!("{what} losses"),
            &g.down(&gloss),
            &wl,
            FWD.0,
            FWD.1,
        );
        let grad = g.down(&gl);
        for r in 0..n {
            assert!(
                grad[r * vp + v..(r + 1) * vp].iter().all(|&x| x == 0.0),
                "{what}: padding gradient"
            );
        }
        // Probabilities ~1/V: compare with the row scale, not relative to tiny entries.
        assert_close(&format!("{what} dlogits"), &grad, &want, BWD.0, BWD.1);
    }
}

gpu_test!(1, adamw);
fn adamw() {
    let g = Gpu::new();
    let mut rng = Rng(25);
    let n = 3001;
    let (p, grads, m) = (rng.vec(n, 1.0), rng.vec(n, 0.1), rng.vec(n, 0.01));
    let v: Vec<f32> = rng.vec(n, 1e-3).iter().map(|x| x.abs()).collect();
    let (gp, gg, gm, gv) = (g.up(&p), g.up(&grads), g.up(&m), g.up(&v));
    let (mut wp, mut wm, mut wv) = (p.clone(), m.clone(), v.clone());
    let args = Adamw {
        params: g.p(&gp),
        grads: g.p(&gg),
        m: g.p(&gm),
        v: g.p(&gv),
        n,
        step: adamw_step(1e-3, 0.9, 0.95, 1e-8, 0.0, 1, 1.0),
    };
    for t in 1..=3u32 {
        let wd = if t == 2 { 0.0 } else { 0.1 };
        let s = adamw_step(1e-3, 0.9, 0.95, 1e-8, wd, t, 0.5);
        cpu::adamw(Adamw {
            params: &mut wp,
            grads: &grads,
            m: &mut wm,
            v: &mut wv,
            n,
            step: s,
        });
        g.ops.adamw(Adamw { step: s, ..args }).unwrap();
    }
    // Same f32 formula in the same order; only FMA contraction may differ (a few ulps).
    assert_close("adamw params", &g.down(&gp), &wp, 1e-5, 1e-6);
    assert_close("adamw m", &g.down(&gm), &wm, 1e-5, 1e-6);
    assert_close("adamw v", &g.down(&gv), &wv, 1e-5, 1e-6);
    assert!(matches!(
        g.ops.adamw(Adamw {
            step: AdamwStep { t: 0, ..args.step },
            ..args
        }),
        Err(GptError::InvalidArgument { op: "adamw", .. })
    ));
}

gpu_test!(1, sum_squares);
fn sum_squares() {
    let g = Gpu::new();
    let mut rng = Rng(26);
    for n in [1, 1000, 4097, 1_000_003, 20_000_000] {
        let x = rng.vec(n, 1.0);
        let want = cpu::sum_squares(&x, n);
        let (gx, out) = (g.up(&x), g.up(&[123.0]));
        g.ops.sum_squares(g.p(&out), g.p(&gx), n).unwrap();
        let got = g.down(&out)[0];
        // Both accumulate in f64 and round once: equal up to one f32 rounding.
        assert!(
            ((got - want) / want).abs() < 1e-6,
            "sum_squares n={n}: {got} vs {want}"
        );
        g.ops.sum_squares(g.p(&out), g.p(&gx), n).unwrap();
        assert_eq!(
            g.down(&out)[0].to_bits(),
            got.to_bits(),
            "sum_squares n={n} repeats bit for bit"
        );
    }
    let out = g.up(&[5.0]);
    g.ops.sum_squares(g.p(&out), F32Ptr(0), 0).unwrap();
    assert_eq!(g.down(&out), vec![0.0], "empty sum");
}

gpu_test!(1, backward_deterministic);
/// The backward kernels give the same bits on every run (no atomics, fixed reduction order):
/// what lets the trainer reproduce a 1-stage run with 2 pipeline stages.
fn backward_deterministic() {
    let g = Gpu::new();
    let mut rng = Rng(27);
    let (b, t, c, nh, v) = (4, 64, 48, 4, 11);
    let n = b * t;
    let tokens = g.up_i32(&rng.tokens(n, v));
    let x = g.up(&rng.vec(n * 3 * c, 1.0));
    let dout = g.up(&rng.vec(n * 3 * c, 1.0));
    let w = g.up(&rng.vec(3 * c * c, 1.0));
    let (mean, rstd) = (g.up(&rng.vec(n, 0.1)), g.up(&rng.vec(n, 1.0)));
    let (qkvr, att, out) = (g.zeros(3 * n * c), g.zeros(b * nh * t * t), g.zeros(n * c));
    g.attention_forward([&out, &qkvr, &att, &x], (b, t, c, nh));
    let run = || {
        let (dwte, dwpe) = (g.zeros(v * c), g.zeros(t * c));
        g.ops
            .encoder_backward(EncoderBackward {
                dwte: g.p(&dwte),
                dwpe: g.p(&dwpe),
                dout: g.p(&dout),
                tokens: g.pi(&tokens),
                b,
                t,
                c,
            })
            .unwrap();
        let (dx, dw, db) = (g.zeros(n * c), g.zeros(c), g.zeros(c));
        g.ops
            .layernorm_backward(LayernormBackward {
                dinp: g.p(&dx),
                dw: g.p(&dw),
                db: g.p(&db),
                dout: g.p(&dout),
                inp: g.p(&x),
                w: g.p(&w),
                mean: g.p(&mean),
                rstd: g.p(&rstd),
                n,
                c,
            })
            .unwrap();
        let (mdx, mdw, mdb) = (g.zeros(n * c), g.zeros(3 * c * c), g.zeros(3 * c));
        g.ops
            .matmul_backward(MatmulBackward {
                dinp: g.p(&mdx),
                dweight: g.p(&mdw),
                dbias: Some(g.p(&mdb)),
                dout: g.p(&dout),
                inp: g.p(&x),
                weight: g.p(&w),
                n,
                c,
                oc: 3 * c,
            })
            .unwrap();
        let (adx, adq, ada, asc) = (
            g.zeros(3 * n * c),
            g.zeros(3 * n * c),
            g.zeros(b * nh * t * t),
            g.zeros(n * c),
        );
        g.ops
            .attention_backward(AttentionBackward {
                dinp: g.p(&adx),
                dqkvr: g.p(&adq),
                datt: g.p(&ada),
                scratch: g.p(&asc),
                dout: g.p(&dout),
                qkvr: g.p(&qkvr),
                att: g.p(&att),
                b,
                t,
                c,
                nh,
            })
            .unwrap();
        [dwte, dwpe, dx, dw, db, mdx, mdw, mdb, adx]
            .map(|s| g.down(&s).iter().map(|v| v.to_bits()).collect::<Vec<u32>>())
    };
    let first = run();
    for _ in 0..3 {
        assert!(
            first == run(),
            "a backward kernel changed its bits between runs"
        );
    }
}

gpu_test!(1, invalid_arguments);
fn invalid_arguments() {
    let g = Gpu::new();
    let buf = g.zeros(1024);
    let p = g.p(&buf);
    let invalid = |r: Result<(), GptError>| matches!(r, Err(GptError::InvalidArgument { .. }));
    assert!(
        invalid(g.ops.attention_forward(AttentionForward {
            out: p,
            qkvr: p,
            att: p,
            inp: p,
            b: 1,
            t: 4,
            c: 10,
            nh: 3
        })),
        "C not a multiple of NH"
    );
    assert!(
        invalid(g.ops.fused_classifier(FusedClassifier {
            logits: p,
            losses: p,
            targets: I32Ptr(p.0),
            n: 2,
            v: 9,
            vp: 8,
            dloss: None
        })),
        "Vp < V"
    );
    assert!(invalid(g.ops.gelu_forward(F32Ptr(0), p, 4)), "null address");
    assert!(
        invalid(g.ops.gelu_forward(F32Ptr(p.0 + 2), p, 4)),
        "misaligned address"
    );
    assert!(
        invalid(g.ops.matmul_forward(MatmulForward {
            out: p,
            inp: p,
            weight: p,
            bias: None,
            n: 1,
            c: 1 << 31,
            oc: 1
        })),
        "C beyond 2^31 - 1"
    );
    // Nothing was enqueued by the failed calls: the stream is still healthy.
    g.ops.zero(p, 1024).unwrap();
    assert_eq!(g.down(&buf), vec![0.0; 1024]);
}
