//! The CPU model of [`crate::SparseAllreduce`] call by call ([`Simulation`]): the reference the
//! GPU tests compare every method with, built on the kernels' references in
//! [`super::reference`]. Apart from them because it takes the method's options
//! ([`crate::SparseOptions`]), which the allreduce's own file defines and which itself uses
//! those references: one file each way would be an import cycle.

use super::reference::*;
use super::set::HostSparse;
use super::SparseValue;

/// One member of a [`Simulation`]: its residual, everything it has sent and every gradient it
/// was given (summed), and its local threshold state (`topk_aopt`, Ok-Topk).
#[derive(Clone, Debug)]
pub struct SimMember<T> {
    /// What it has not sent yet.
    pub residual: Vec<T>,
    /// Everything it sent, summed (dense warm-up calls: their whole gradient).
    pub sent: Vec<T>,
    /// Every gradient it was given (after local clipping; with momentum correction the
    /// velocity each call accumulated instead), summed.
    pub grads: Vec<T>,
    /// Momentum correction: the velocity (zeros without).
    pub velocity: Vec<T>,
    local: f64,
}

/// What one call of a [`Simulation`] gives.
#[derive(Clone, Debug)]
pub struct SimStep<T> {
    /// Whether the call was a dense warm-up call (the rest is then empty).
    pub dense: bool,
    /// Each member's selection.
    pub selected: Vec<HostSparse<T, i32>>,
    /// Each member's local threshold of the call (Gaussian methods, `topk_aopt`, Ok-Topk).
    pub thresholds: Vec<f32>,
    /// Local clipping: each member's factor of the call (empty without).
    pub clip_factors: Vec<f32>,
    /// Each member's pairs that count as sent (gTop-k: the included ones; Ok-Topk: those in
    /// the global set; the others: the selection).
    pub sent: Vec<HostSparse<T, i32>>,
    /// Region methods: the boundaries.
    pub bounds: Vec<u64>,
    /// Region methods: each member's region after its reduce (Ok-Topk between global
    /// estimates: the pairs at or above the global threshold).
    pub regions: Vec<HostSparse<T, i32>>,
    /// `topk_sa`: whether the dense fallback was taken.
    pub dense_fallback: Option<bool>,
    /// Ok-Topk: the global threshold carried to the next call.
    pub global_threshold: Option<f32>,
    /// The output every member gets.
    pub out: Vec<T>,
}

/// The CPU model of [`crate::SparseAllreduce`] over `p` members, call by call, as the seed's
/// allreducer defines each method (its intervals and adaptations included) with this crate's
/// documented choices (|g| >= t, exact top-k at estimates, capacity 2k keeping the largest,
/// sums in member order): the reference the GPU tests compare output, residual, thresholds,
/// boundaries and regions with, bit for bit where the data make sums exact.
pub struct Simulation<T> {
    opts: crate::SparseOptions,
    n: usize,
    k: usize,
    cap: usize,
    calls: u64,
    ramp_offset: u64,
    bounds: Vec<u64>,
    global: f64,
    /// The members.
    pub members: Vec<SimMember<T>>,
}

impl<T: SparseValue> Simulation<T> {
    /// `p` members with gradients of `n` elements, as `SparseAllreduce::new` with `opts`.
    pub fn new(opts: crate::SparseOptions, n: usize, p: usize) -> Self {
        use crate::SparseMethod as M;
        let k = crate::sparse::sparse_k(n, opts.max_density());
        let cap = if opts.method.is_threshold_method() {
            (2 * k).min(n)
        } else {
            k
        };
        let zero = vec![T::of_f32(0.0); n];
        let bounds = match opts.method {
            M::TopKSa | M::GaussianKSa => equal_boundaries(n, p),
            _ => Vec::new(),
        };
        Simulation {
            opts,
            n,
            k,
            cap,
            calls: 0,
            ramp_offset: 0,
            bounds,
            global: 0.0,
            members: (0..p)
                .map(|_| SimMember {
                    residual: zero.clone(),
                    sent: zero.clone(),
                    grads: zero.clone(),
                    velocity: zero.clone(),
                    local: 0.0,
                })
                .collect(),
        }
    }

    /// k (of the largest density, before any sparse call) and the capacity, as the
    /// allreduce's.
    pub fn k_cap(&self) -> (usize, usize) {
        (self.k, self.cap)
    }

    /// The schedule starts again as `clear_residual` and `load_residual` restart it (a dense
    /// warm-up that has ended is not repeated); the residuals and velocities are left to the
    /// caller.
    pub fn restart(&mut self) {
        let warmup = self.opts.dense_warmup as u64;
        self.calls = if self.calls >= warmup { warmup } else { 0 };
    }

    /// `set_ramp_offset`: the density ramp continues from sparse call `done`.
    pub fn set_ramp_offset(&mut self, done: u64) {
        self.ramp_offset = done;
    }

    /// `clear_residual` on every member: residuals, and what was sent and given, zero; the
    /// schedule restarted.
    pub fn clear(&mut self) {
        for m in &mut self.members {
            for v in [&mut m.residual, &mut m.sent, &mut m.grads, &mut m.velocity] {
                v.iter_mut().for_each(|x| *x = T::of_f32(0.0));
            }
        }
        self.restart();
    }

    /// One call with member r's gradient `grads[r]`.
    pub fn step(&mut self, grads: &[Vec<T>]) -> SimStep<T> {
        use crate::SparseMethod as M;
        let (n, cap, p) = (self.n, self.cap, self.members.len());
        let o = self.opts;
        let call = self.calls;
        self.calls += 1;
        let empty = SimStep {
            dense: false,
            selected: Vec::new(),
            thresholds: Vec::new(),
            clip_factors: Vec::new(),
            sent: Vec::new(),
            bounds: Vec::new(),
            regions: Vec::new(),
            dense_fallback: None,
            global_threshold: None,
            out: Vec::new(),
        };
        if call < o.dense_warmup as u64 {
            let mut out = vec![T::of_f32(0.0); n];
            for (m, g) in self.members.iter_mut().zip(grads) {
                for (i, &x) in g.iter().enumerate() {
                    out[i] = out[i].sparse_add(x);
                    m.sent[i] = m.sent[i].sparse_add(x);
                    m.grads[i] = m.grads[i].sparse_add(x);
                }
            }
            return SimStep {
                dense: true,
                out: self.scaled(out, p),
                ..empty
            };
        }
        let c = call - o.dense_warmup as u64;
        let density = o.density_at(c + self.ramp_offset);
        let k = crate::sparse::sparse_k(n, density);
        let mut selected = Vec::new();
        let mut thresholds = Vec::new();
        let mut clip_factors = Vec::new();
        let mut accs = Vec::new();
        for (m, g) in self.members.iter_mut().zip(grads) {
            // DGC's local clipping: the member's gradient scaled before anything else.
            let clipped;
            let g = if o.local_clip > 0.0 {
                let f = clip_factor(g, o.local_clip_norm(p));
                clip_factors.push(f);
                clipped = clip_scaled(g, f);
                &clipped
            } else {
                g
            };
            // DGC's momentum correction: u = momentum x u + g (each product rounded to T, as
            // the scale kernel), accumulated instead of g.
            let corrected;
            let g = if o.momentum > 0.0 {
                for (u, &x) in m.velocity.iter_mut().zip(g) {
                    *u = T::of_f32(u.to_f64() as f32 * o.momentum).sparse_add(x);
                }
                corrected = m.velocity.clone();
                &corrected
            } else {
                g
            };
            let acc: Vec<T> = if o.error_feedback {
                m.residual
                    .iter()
                    .zip(g)
                    .map(|(&r, &x)| r.sparse_add(x))
                    .collect()
            } else {
                g.clone()
            };
            for (s, &x) in m.grads.iter_mut().zip(g) {
                *s = s.sparse_add(x);
            }
            let sel = match o.method {
                M::GaussianK | M::GaussianKConcat | M::GaussianKSa => {
                    let t = gaussian_corrected_threshold(&acc, density, k);
                    thresholds.push(t);
                    threshold::<T, i32>(&acc, t, cap)
                }
                M::TopKAopt | M::OkTopK => {
                    let ok = o.method == M::OkTopK;
                    let sel = if c % o.reestimate_every as u64 == 0 {
                        let sel = topk::<T, i32>(&acc, k);
                        let t = least_threshold(&sel);
                        m.local = t as f64;
                        thresholds.push(t);
                        sel
                    } else {
                        if ok {
                            m.local = ok_rise(&acc, m.local, k);
                        }
                        let t = as_threshold(m.local);
                        thresholds.push(t);
                        threshold::<T, i32>(&acc, t, cap)
                    };
                    if ok {
                        m.local = ok_adapt(m.local, sel.count, k, OK_LOCAL_SCALE, OK_LOCAL_SCALE);
                    }
                    sel
                }
                _ => topk::<T, i32>(&acc, k),
            };
            selected.push(sel);
            accs.push(acc);
        }
        let mut step = SimStep {
            thresholds,
            clip_factors,
            ..empty
        };
        let (out, sent) = match o.method {
            M::GTopK => {
                let global = gtopk(&selected, k);
                let inc: Vec<_> = selected.iter().map(|s| included(s, &global)).collect();
                (sparse_sum(n, &[global]), inc)
            }
            M::TopKSa | M::GaussianKSa => {
                let (regions, out) = region_allreduce(&selected, &self.bounds, n);
                if o.method == M::TopKSa {
                    let pairs: usize = regions.iter().map(|r| r.idx.len()).sum();
                    step.dense_fallback = Some(sa_goes_dense(pairs as u64, n));
                }
                step.regions = regions;
                step.bounds = self.bounds.clone();
                (out, selected.clone())
            }
            M::OkTopK => {
                if c % o.repartition_every as u64 == 0 {
                    let local: Vec<_> = selected
                        .iter()
                        .map(|s| region_boundaries(s, n, p))
                        .collect();
                    self.bounds = average_boundaries(&local);
                }
                let (mut regions, _) = region_allreduce(&selected, &self.bounds, n);
                let out = if c % o.global_every as u64 == 0 {
                    let d = sparse_sum(n, &regions);
                    let global = topk::<T, i32>(&d, k);
                    let t = least_threshold(&global);
                    self.global = t as f64;
                    step.global_threshold = Some(t);
                    sparse_sum(n, &[global])
                } else {
                    let t = as_threshold(self.global);
                    for r in &mut regions {
                        *r = threshold::<T, i32>(
                            &sparse_sum(n, std::slice::from_ref(r)),
                            t,
                            usize::MAX,
                        );
                    }
                    let total: u64 = regions.iter().map(|r| r.count).sum();
                    self.global = ok_adapt(self.global, total, k, OK_GLOBAL_DOWN, OK_GLOBAL_UP);
                    step.global_threshold = Some(as_threshold(self.global));
                    sparse_sum(n, &regions)
                };
                step.regions = regions;
                step.bounds = self.bounds.clone();
                let sent = selected
                    .iter()
                    .map(|s| {
                        let keep: Vec<usize> = (0..s.idx.len())
                            .filter(|&j| {
                                out[s.idx[j] as usize].to_f64() != 0.0
                                    || out[s.idx[j] as usize].is_nan_value()
                            })
                            .collect();
                        HostSparse {
                            count: keep.len() as u64,
                            idx: keep.iter().map(|&j| s.idx[j]).collect(),
                            val: keep.iter().map(|&j| s.val[j]).collect(),
                        }
                    })
                    .collect();
                (out, sent)
            }
            _ => (sparse_sum(n, &selected), selected.clone()),
        };
        for ((m, acc), s) in self.members.iter_mut().zip(accs).zip(&sent) {
            if o.error_feedback {
                m.residual = acc;
                for &i in &s.idx {
                    m.residual[i as usize] = T::of_f32(0.0);
                }
            }
            if o.momentum > 0.0 {
                // Momentum factor masking: where the residual was cleared.
                for &i in &s.idx {
                    m.velocity[i as usize] = T::of_f32(0.0);
                }
            }
            scatter_add(&mut m.sent, s);
        }
        step.selected = selected;
        step.sent = sent;
        step.out = self.scaled(out, p);
        step
    }

    fn scaled(&self, out: Vec<T>, p: usize) -> Vec<T> {
        if !self.opts.average || p < 2 {
            return out;
        }
        let s = 1.0 / p as f32;
        out.iter()
            .map(|v| T::of_f32(v.to_f64() as f32 * s))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::reference::tests::ints;

    fn sim(method: crate::SparseMethod, n: usize, p: usize) -> Simulation<f32> {
        let opts = crate::SparseOptions {
            reestimate_every: 3,
            global_every: 2,
            repartition_every: 4,
            ..crate::SparseOptions::new(method, 0.05)
        };
        Simulation::new(opts, n, p)
    }

    #[test]
    fn every_simulated_method_conserves_the_gradients() {
        for method in crate::SparseMethod::ALL {
            let (n, p) = (400, 3);
            let mut s = sim(method, n, p);
            for step in 0..9 {
                let grads: Vec<_> = (0..p).map(|r| ints(n, step, r)).collect();
                let got = s.step(&grads);
                assert_eq!(got.out.len(), n);
                for m in &s.members {
                    for i in 0..n {
                        assert_eq!(
                            m.residual[i] + m.sent[i],
                            m.grads[i],
                            "{} step {step} element {i}",
                            method.name()
                        );
                    }
                }
                // The output is the sum of what was sent where every member's pairs count
                // whole (not gTop-k, whose tree drops some, nor Ok-Topk, whose global set
                // holds sums of pairs some of which did not make it).
                if !matches!(
                    method,
                    crate::SparseMethod::GTopK | crate::SparseMethod::OkTopK
                ) {
                    assert_eq!(got.out, sparse_sum(n, &got.sent), "{}", method.name());
                }
            }
        }
    }

    #[test]
    fn ok_topk_sends_about_k_and_keeps_the_rest_in_the_residual() {
        let (n, p) = (2000, 4);
        let mut s = sim(crate::SparseMethod::OkTopK, n, p);
        let k = s.k_cap().0;
        let mut before = 0.0f32;
        for step in 0..8 {
            let grads: Vec<_> = (0..p).map(|r| ints(n, step, r)).collect();
            let got = s.step(&grads);
            let nonzero = got.out.iter().filter(|v| **v != 0.0).count();
            let after = got.global_threshold.unwrap();
            // Estimates: exactly the global top k (no zero among them here). Between them,
            // what passes the global threshold carried in, which then adapts by that count.
            if step % 2 == 0 {
                assert_eq!(nonzero, k, "step {step}");
            } else {
                assert!(got.out.iter().all(|v| *v == 0.0 || v.abs() >= before));
                let c = nonzero * 4;
                let moved = if c < 3 * k {
                    after < before
                } else if c > 5 * k {
                    after > before
                } else {
                    after == before
                };
                assert!(
                    moved,
                    "step {step}: {nonzero} for k {k}: {before} to {after}"
                );
            }
            before = after;
            for (r, (sel, sent)) in got.selected.iter().zip(&got.sent).enumerate() {
                // Sent: exactly the selected pairs where the output holds a value.
                for (j, &i) in sel.idx.iter().enumerate() {
                    let made_it = got.out[i as usize] != 0.0;
                    assert_eq!(sent.idx.binary_search(&i).is_ok(), made_it, "member {r}");
                    let res = s.members[r].residual[i as usize];
                    if made_it {
                        assert_eq!(res, 0.0);
                    } else {
                        assert_eq!(res, sel.val[j], "kept in the residual");
                    }
                }
            }
            assert!(got.global_threshold.unwrap() > 0.0);
        }
    }

    #[test]
    fn topk_aopt_reuses_its_threshold_between_estimates() {
        let (n, p) = (1000, 2);
        let mut s = sim(crate::SparseMethod::TopKAopt, n, p);
        let k = s.k_cap().0;
        let mut thresholds = Vec::new();
        for step in 0..6 {
            let grads: Vec<_> = (0..p).map(|r| ints(n, step, r)).collect();
            let got = s.step(&grads);
            if step % 3 == 0 {
                assert!(got.selected.iter().all(|x| x.count as usize == k));
            }
            thresholds.push(got.thresholds[0]);
        }
        assert_eq!(thresholds[1], thresholds[0]);
        assert_eq!(thresholds[2], thresholds[0]);
        assert_eq!(thresholds[4], thresholds[3]);
    }

    #[test]
    fn the_density_ramp_falls_in_four_geometric_stages() {
        let o = crate::SparseOptions {
            ramp_from: 0.25,
            ramp_calls: 8,
            ..crate::SparseOptions::new(crate::SparseMethod::TopK, 0.001)
        };
        let d: Vec<f64> = (0..10).map(|c| o.density_at(c)).collect();
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12 * b.max(1e-12);
        // DGC: 25%, 6.25%, 1.5625%, 0.4% (here 0.25 x 0.004^(3/4) = 0.395%), then 0.1%.
        assert!(close(d[0], 0.25) && close(d[1], 0.25));
        assert!(close(d[2], 0.25 * 0.004f64.powf(0.25)));
        assert!(close(d[6], 0.25 * 0.004f64.powf(0.75)));
        assert!(close(d[8], 0.001) && close(d[9], 0.001));
        assert!(d.windows(2).all(|w| w[0] >= w[1]));
        assert_eq!(o.max_density(), 0.25);
        // No ramp: the density throughout.
        let plain = crate::SparseOptions::new(crate::SparseMethod::TopK, 0.01);
        assert_eq!((plain.density_at(0), plain.max_density()), (0.01, 0.01));
        // A ramp in the simulation: k follows the density, the capacity the largest.
        let mut s = Simulation::<f32>::new(o, 4000, 2);
        assert_eq!(s.k_cap(), (1000, 1000));
        let grads = vec![ints(4000, 0, 0), ints(4000, 0, 1)];
        assert_eq!(s.step(&grads).selected[0].count, 1000);
        for _ in 1..8 {
            s.step(&grads);
        }
        assert_eq!(s.step(&grads).selected[0].count, 4);
        // A resume 6 sparse calls into the ramp continues it (stage 3: 0.25 x 0.004^(3/4) of
        // 4000, 16 pairs), through a load that restarts the other intervals, then ends.
        let mut r = Simulation::<f32>::new(o, 4000, 2);
        r.set_ramp_offset(6);
        r.restart();
        let counts: Vec<u64> = (0..3).map(|_| r.step(&grads).selected[0].count).collect();
        assert_eq!(counts, [16, 16, 4]);
    }

    #[test]
    fn local_clipping_scales_each_gradient_before_error_feedback() {
        let (n, p) = (400, 4);
        // Every element ±3: norm 3 x 20 = 60. A clip of 60 (30 per member at P = 4) halves
        // each gradient exactly; 240 (120 each) leaves it alone.
        let equal: Vec<f32> = (0..n)
            .map(|i| if i % 3 == 0 { -3.0 } else { 3.0 })
            .collect();
        for (clip, factor) in [(60.0f32, 0.5f32), (240.0, 1.0)] {
            let opts = crate::SparseOptions {
                local_clip: clip,
                ..crate::SparseOptions::new(crate::SparseMethod::TopK, 0.05)
            };
            assert_eq!(opts.local_clip_norm(p), clip as f64 / 2.0);
            let mut s = Simulation::<f32>::new(opts, n, p);
            let grads = vec![equal.clone(); p];
            for step in 0..3 {
                let got = s.step(&grads);
                assert_eq!(got.clip_factors, vec![factor; p], "clip {clip} step {step}");
                for m in &s.members {
                    // What went in is the clipped gradient, conserved by error feedback.
                    let given = 3.0 * factor * (step + 1) as f32;
                    assert!(m.grads.iter().all(|x| x.abs() == given));
                    for i in 0..n {
                        assert_eq!(m.residual[i] + m.sent[i], m.grads[i]);
                    }
                }
                // The output sums what was sent, clipped values included.
                assert_eq!(got.out, sparse_sum(n, &got.sent));
            }
        }
        // Arbitrary data: each member's clipped gradient is within the norm (to rounding).
        let opts = crate::SparseOptions {
            local_clip: 10.0,
            error_feedback: false,
            ..crate::SparseOptions::new(crate::SparseMethod::GaussianK, 0.05)
        };
        let mut s = Simulation::<f32>::new(opts, n, p);
        let grads: Vec<_> = (0..p).map(|r| ints(n, 1, r)).collect();
        let got = s.step(&grads);
        for (g, &f) in grads.iter().zip(&got.clip_factors) {
            assert!(f < 1.0);
            let norm: f64 = clip_scaled(g, f)
                .iter()
                .map(|&x| (x as f64).powi(2))
                .sum::<f64>()
                .sqrt();
            assert!((norm - 5.0).abs() < 1e-4, "{norm}");
            assert_eq!(f, clip_factor(g, 5.0));
        }
        // Zeros and non-finite norms are left alone.
        assert_eq!(clip_factor(&[0.0f32; 8], 1.0), 1.0);
        assert_eq!(clip_factor(&[f32::NAN, 1e3], 1.0), 1.0);
        assert_eq!(clip_factor(&[f32::INFINITY], 1.0), 1.0);
    }

    #[test]
    fn momentum_correction_accumulates_a_masked_velocity() {
        let (n, p) = (400, 3);
        for method in crate::SparseMethod::ALL {
            let opts = crate::SparseOptions {
                momentum: 0.5,
                reestimate_every: 3,
                global_every: 2,
                repartition_every: 4,
                ..crate::SparseOptions::new(method, 0.05)
            };
            let mut s = Simulation::<f32>::new(opts, n, p);
            let mut before: Vec<Vec<f32>> = vec![vec![0.0; n]; p];
            for step in 0..6 {
                let grads: Vec<_> = (0..p).map(|r| ints(n, step, r)).collect();
                let got = s.step(&grads);
                for (r, m) in s.members.iter().enumerate() {
                    let sent = &got.sent[r];
                    for i in 0..n {
                        // u = 0.5 u + g (exact for these data), zeroed where sent.
                        let u = 0.5 * before[r][i] + grads[r][i];
                        let masked = sent.idx.binary_search(&(i as i32)).is_ok();
                        let want = if masked { 0.0 } else { u };
                        assert_eq!(m.velocity[i], want, "{} step {step}", method.name());
                        if masked {
                            assert_eq!(m.residual[i], 0.0);
                        }
                        // Conservation holds for what was accumulated: the velocities.
                        assert_eq!(m.residual[i] + m.sent[i], m.grads[i]);
                    }
                    before[r] = m.velocity.clone();
                }
            }
        }
        // Without momentum the velocity stays zero; clears zero it.
        let mut s = sim(crate::SparseMethod::TopK, 100, 2);
        s.step(&[ints(100, 0, 0), ints(100, 0, 1)]);
        assert!(s
            .members
            .iter()
            .all(|m| m.velocity.iter().all(|&u| u == 0.0)));
    }

    #[test]
    fn the_dense_warmup_sums_whole_gradients_then_goes_sparse() {
        let (n, p) = (100, 3);
        let opts = crate::SparseOptions {
            dense_warmup: 2,
            ..crate::SparseOptions::new(crate::SparseMethod::TopK, 0.1)
        };
        let mut s = Simulation::<f32>::new(opts, n, p);
        for step in 0..3 {
            let grads: Vec<_> = (0..p).map(|r| ints(n, step, r)).collect();
            let got = s.step(&grads);
            let sum: Vec<f32> = (0..n).map(|i| grads.iter().map(|g| g[i]).sum()).collect();
            assert_eq!(got.dense, step < 2);
            if step < 2 {
                assert_eq!(got.out, sum);
                assert!(s
                    .members
                    .iter()
                    .all(|m| m.residual.iter().all(|&r| r == 0.0)));
            } else {
                assert_eq!(got.selected[0].count, 10);
            }
        }
    }
}
