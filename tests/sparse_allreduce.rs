//! GPU tests of the sparse gradient allreduce (src/sparse/allreduce/) against a CPU
//! simulation of every member built from the reference (src/sparse/reference.rs): each PE
//! makes every member's gradients (seeded by step and member), runs the selections, the
//! exchange and error feedback on the host, and compares its own GPU results: the selection
//! (exact k, ties to the lower index), the reduced output (every element, poisoned before each
//! call), the residual, gTop-k's included pairs, the region methods' boundaries and reduced
//! regions, the Gaussian and Ok-Topk thresholds, and the conservation of error feedback
//! (residual + everything sent == the sum of the gradients, exactly). Data are small integers,
//! so every sum is exact in f32 and bf16 whatever the order of the adds.
//! Run by scripts/gpu_test.sh (tests named peN_* run as N-PE jobs).

mod common;

use common::{gpu_test, runtime, skip};
use cudarc::driver::CudaStream;
use half::bf16;
use nvshmem::tools::{sparse_reference as reference, sparse_simulation as simulation};
use nvshmem::{
    Error, HostSparse, Nvshmem, SparseAllreduce, SparseMethod, SparseOptions, SparseValue,
};
use std::sync::Arc;

/// Value types with a poison and conversions of the generated integers.
trait Value: SparseValue {
    fn poison() -> Self;
}

impl Value for f32 {
    fn poison() -> Self {
        f32::from_bits(0x7FBA_DBAD)
    }
}

impl Value for bf16 {
    fn poison() -> Self {
        bf16::from_bits(0xFFAB)
    }
}

/// splitmix64: reproducible data, the same on every PE.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Gradient kinds: integers in [-8, 8] (ties everywhere), all of one magnitude, all zeros,
/// mostly zeros, and ±1 (a Gaussian threshold above every element: empty selections).
#[derive(Clone, Copy, Debug)]
enum Kind {
    Ints,
    Equal,
    Zeros,
    Rare,
    Signs,
}

const KINDS: [Kind; 5] = [
    Kind::Ints,
    Kind::Equal,
    Kind::Zeros,
    Kind::Rare,
    Kind::Signs,
];

fn gradient<T: Value>(kind: Kind, n: usize, step: usize, pe: usize) -> Vec<T> {
    let seed = (step as u64) << 40 ^ (pe as u64) << 20 ^ n as u64;
    (0..n)
        .map(|i| {
            let r = mix(seed ^ (i as u64).wrapping_mul(0x1_0000_0001));
            let v = match kind {
                Kind::Ints => (r % 17) as f32 - 8.0,
                Kind::Equal => {
                    if r & 1 == 1 {
                        -3.0
                    } else {
                        3.0
                    }
                }
                Kind::Zeros => 0.0,
                Kind::Rare => {
                    if r % 97 == 0 {
                        (r % 7) as f32 + 1.0
                    } else {
                        0.0
                    }
                }
                Kind::Signs => {
                    if r & 1 == 1 {
                        -1.0
                    } else {
                        1.0
                    }
                }
            };
            T::of_f32(v)
        })
        .collect()
}

fn gaussian(m: SparseMethod) -> bool {
    matches!(
        m,
        SparseMethod::GaussianK | SparseMethod::GaussianKConcat | SparseMethod::GaussianKSa
    )
}

fn by_regions(m: SparseMethod) -> bool {
    matches!(
        m,
        SparseMethod::OkTopK | SparseMethod::TopKSa | SparseMethod::GaussianKSa
    )
}

fn reuses(m: SparseMethod) -> bool {
    matches!(m, SparseMethod::TopKAopt | SparseMethod::OkTopK)
}

fn add_all<T: Value>(a: &[T], b: &[T]) -> Vec<T> {
    a.iter().zip(b).map(|(&x, &y)| x.sparse_add(y)).collect()
}

fn same_values<T: Value>(what: &str, got: &[T], want: &[T]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        // Exact; +0 and -0 alike (a scatter-add into zeros may give either).
        assert!(
            g.to_f64() == w.to_f64(),
            "{what}: element {i} is {g:?}, want {w:?}"
        );
    }
}

fn same_set<T: Value>(what: &str, got: &HostSparse<T, i32>, want: &HostSparse<T, i32>) {
    if let Some(d) = got.difference(want) {
        panic!("{what}: GPU against the reference: {d}");
    }
}

/// The sparse calls `ar` has made since its schedule started.
fn sim_sparse_calls<T: Value>(ar: &SparseAllreduce<'_, T>, opts: SparseOptions) -> usize {
    ar.calls() as usize - opts.dense_warmup.min(ar.calls() as usize)
}

/// Runs `steps` calls of one configuration on every kind and checks this PE's results
/// against the CPU simulation of every member ([`simulation::Simulation`]).
fn check_config<T: Value>(
    nv: &Nvshmem,
    s: &Arc<CudaStream>,
    opts: SparseOptions,
    n: usize,
    steps: usize,
) {
    check_kinds::<T>(nv, s, opts, n, steps, &KINDS);
}

/// [`check_config`] on the gradient kinds `kinds`.
fn check_kinds<T: Value>(
    nv: &Nvshmem,
    s: &Arc<CudaStream>,
    opts: SparseOptions,
    n: usize,
    steps: usize,
    kinds: &[Kind],
) {
    let (me, p) = (nv.my_pe() as usize, nv.n_pes() as usize);
    let mut ar = SparseAllreduce::<T>::world(nv, n, opts).unwrap();
    let (k, cap) = (ar.k(), ar.capacity());
    let mut g = s.alloc_zeros::<T>(n).unwrap();
    let mut out = s.alloc_zeros::<T>(n).unwrap();
    let mut sim = simulation::Simulation::<T>::new(opts, n, p);
    assert_eq!(sim.k_cap(), (k, cap), "k and capacity");
    for &kind in kinds {
        let what = format!(
            "{} {} n {n} density {} ef {} avg {} every {}/{}/{} warm-up {} clip {} {kind:?}",
            opts.method.name(),
            T::NAME,
            opts.density,
            opts.error_feedback,
            opts.average,
            opts.reestimate_every,
            opts.global_every,
            opts.repartition_every,
            opts.dense_warmup,
            opts.local_clip,
        );
        // The first kind runs the dense warm-up; the others, after the clear, do not.
        ar.clear_residual(s).unwrap();
        sim.clear();
        for step in 0..steps {
            let what = format!("{what} step {step}");
            let grads: Vec<Vec<T>> = (0..p).map(|r| gradient(kind, n, step, r)).collect();
            s.memcpy_htod(&grads[me], &mut g).unwrap();
            s.memcpy_htod(&vec![T::poison(); n], &mut out).unwrap();
            ar.run(&g, &mut out, s).unwrap();
            let want = sim.step(&grads);
            let got = s.clone_dtoh(&out).unwrap();
            same_values(&format!("{what}: output"), &got, &want.out);
            if want.dense {
                continue;
            }
            let sparse_call = sim_sparse_calls(&ar, opts) - 1;
            match ar.clip_factor(s).unwrap() {
                Some(f) => {
                    let w = want.clip_factors[me];
                    assert_eq!(
                        f.to_bits(),
                        w.to_bits(),
                        "{what}: clip factor {f} against {w}"
                    );
                }
                None => assert!(opts.local_clip == 0.0, "{what}: no clip factor"),
            }
            let sel = ar.selected(s).unwrap();
            same_set(&format!("{what}: selection"), &sel, &want.selected[me]);
            if gaussian(opts.method) || reuses(opts.method) {
                // Integer data: the device's sums are exact, so its threshold is the
                // reference's bit for bit.
                let t = ar.threshold(s).unwrap().unwrap();
                let w = want.thresholds[me];
                assert_eq!(
                    t.to_bits(),
                    w.to_bits(),
                    "{what}: threshold {t} against {w}"
                );
                assert!(sel.idx.len() <= cap, "{what}: more than the capacity held");
                if reuses(opts.method) && sparse_call % opts.reestimate_every == 0 {
                    assert_eq!(
                        sel.count as usize,
                        ar.k().min(n),
                        "{what}: exact k (estimate)"
                    );
                }
            } else {
                assert_eq!(sel.count as usize, ar.k().min(n), "{what}: exact k");
                assert!(ar.threshold(s).unwrap().is_none(), "{what}: no threshold");
            }
            if by_regions(opts.method) {
                let b = ar.boundaries(s).unwrap().unwrap();
                assert_eq!(b, want.bounds, "{what}: region boundaries");
                let region = ar.region(s).unwrap().unwrap();
                same_set(&format!("{what}: region {me}"), &region, &want.regions[me]);
                assert_eq!(
                    ar.dense_fallback(s).unwrap(),
                    want.dense_fallback,
                    "{what}: topk_sa's dense fallback"
                );
            } else {
                assert!(ar.boundaries(s).unwrap().is_none());
            }
            if opts.method == SparseMethod::OkTopK {
                let t = ar.global_threshold(s).unwrap().unwrap();
                let w = want.global_threshold.unwrap();
                assert_eq!(
                    t.to_bits(),
                    w.to_bits(),
                    "{what}: global threshold {t} against {w}"
                );
            }
            if let Some(inc) = ar.included(s).unwrap() {
                same_set(&format!("{what}: included"), &inc, &want.sent[me]);
            }
            let m = &sim.members[me];
            match ar.velocity() {
                Some(u) => {
                    let u = s.clone_dtoh(u).unwrap();
                    same_values(&format!("{what}: velocity"), &u, &m.velocity);
                }
                None => assert!(opts.momentum == 0.0, "{what}: no velocity"),
            }
            if let Some(r) = ar.residual() {
                let res = s.clone_dtoh(r).unwrap();
                same_values(&format!("{what}: residual"), &res, &m.residual);
                // Conservation: nothing lost or made up over the steps.
                let back = add_all(&res, &m.sent);
                same_values(&format!("{what}: residual + sent"), &back, &m.grads);
            }
        }
    }
}

const CONFIGS: [(usize, f64); 6] = [
    (1, 0.5),
    (7, 0.3),
    (1000, 0.01),
    (1000, 0.1),
    (70_000, 0.001),
    (70_000, 0.01),
];

fn method_case(pes: i32, method: SparseMethod) {
    let nv = runtime(pes);
    let s = nv.stream().clone();
    for (n, density) in CONFIGS {
        for ef in [true, false] {
            // Short intervals: estimates at calls 0 and 2, reuse at call 1, regions again at
            // call 3 (the other methods ignore them).
            let opts = SparseOptions {
                error_feedback: ef,
                reestimate_every: 2,
                global_every: 2,
                repartition_every: 3,
                ..SparseOptions::new(method, density)
            };
            check_config::<f32>(&nv, &s, opts, n, 4);
            check_config::<bf16>(&nv, &s, opts, n, 4);
        }
    }
    // Estimates on every call, averaged.
    let avg = SparseOptions {
        average: true,
        reestimate_every: 1,
        global_every: 1,
        repartition_every: 1,
        ..SparseOptions::new(method, 0.1)
    };
    check_config::<f32>(&nv, &s, avg, 1000, 3);
    check_config::<bf16>(&nv, &s, avg, 1000, 3);
    // The seed's intervals (32, 32, 64) over 40 calls: one estimate at 0 and one at 32, the
    // adaptations in between; f32 after 4 dense warm-up calls.
    let seed = SparseOptions::new(method, 0.01);
    check_config::<bf16>(&nv, &s, seed, 20_000, 40);
    let warm = SparseOptions {
        dense_warmup: 4,
        ..seed
    };
    check_config::<f32>(&nv, &s, warm, 20_000, 44);
    // DGC's density ramp: 10% falling to 1% over 8 calls, then 1%.
    let ramp = SparseOptions {
        ramp_from: 0.1,
        ramp_calls: 8,
        reestimate_every: 3,
        global_every: 3,
        repartition_every: 5,
        ..SparseOptions::new(method, 0.01)
    };
    check_config::<f32>(&nv, &s, ramp, 5000, 11);
    // DGC's momentum correction with factor masking: a momentum of 0.5 keeps the integer data
    // exact over these few calls (each call halves the velocity once), so every comparison,
    // the velocity's included, stays bit for bit.
    let momentum = SparseOptions {
        momentum: 0.5,
        reestimate_every: 2,
        global_every: 2,
        repartition_every: 3,
        ..SparseOptions::new(method, 0.1)
    };
    check_config::<f32>(&nv, &s, momentum, 1000, 4);
    check_config::<bf16>(&nv, &s, momentum, 1000, 4);
    // DGC's local clipping: every Kind::Equal gradient (±3, norm 3 sqrt(n)) halved exactly,
    // so that the values stay exact and the comparisons bit for bit; the other kinds here are
    // within the norm (factor 1) or zero.
    let p = nv.n_pes() as usize;
    let (n, local_clip) = clip_halving(p);
    let clip = SparseOptions {
        local_clip,
        reestimate_every: 2,
        global_every: 2,
        repartition_every: 3,
        ..SparseOptions::new(method, 0.01)
    };
    let kinds = [Kind::Equal, Kind::Signs, Kind::Zeros, Kind::Rare];
    for kind in kinds {
        for step in 0..4 {
            for r in 0..p {
                let g = gradient::<f32>(kind, n, step, r);
                let f = reference::clip_factor(&g, clip.local_clip_norm(p));
                let want = if matches!(kind, Kind::Equal) {
                    0.5
                } else {
                    1.0
                };
                assert_eq!(f, want, "{kind:?} step {step} member {r}: exact factors");
            }
        }
    }
    for ef in [true, false] {
        let o = SparseOptions {
            error_feedback: ef,
            ..clip
        };
        check_kinds::<f32>(&nv, &s, o, n, 4, &kinds);
        check_kinds::<bf16>(&nv, &s, o, n, 4, &kinds);
    }
}

/// A gradient length n and a local clip whose P-scaled norm halves Kind::Equal's gradients of
/// n elements (every element ±3) exactly: the f32 nearest 1.5 sqrt(n) sqrt(P), or a neighbour
/// of it. Not every n has one (f32's steps of the clip can step over the ratios that round to
/// 0.5: at P = 2 and 8, n = 4096 has none), so n steps down from 4096 by 64 until one does.
fn clip_halving(p: usize) -> (usize, f32) {
    (0..32)
        .map(|j| 4096 - 64 * j)
        .find_map(|n| {
            let g = vec![3.0f32; n];
            let c = (1.5 * (n as f64).sqrt() * (p as f64).sqrt()) as f32;
            [0, 1, -1, 2, -2, 3, -3]
                .into_iter()
                .map(|d: i32| f32::from_bits((c.to_bits() as i32 + d) as u32))
                .find(|&c| {
                    let o = SparseOptions {
                        local_clip: c,
                        ..SparseOptions::new(SparseMethod::TopK, 0.01)
                    };
                    reference::clip_factor(&g, o.local_clip_norm(p)) == 0.5
                })
                .map(|c| (n, c))
        })
        .expect("a length and a clip that halve the norm exactly")
}

/// The GPU cases' clip exists at every PE count they run at (CPU only).
#[test]
fn clip_halving_exists_for_1_to_8_pes() {
    for p in 1..=8 {
        let (n, c) = clip_halving(p);
        let o = SparseOptions {
            local_clip: c,
            ..SparseOptions::new(SparseMethod::TopK, 0.01)
        };
        assert_eq!(
            reference::clip_factor(&vec![-3.0f32; n], o.local_clip_norm(p)),
            0.5
        );
    }
}

macro_rules! method_tests {
    ($method:expr, $($pes:literal $name:ident),*) => {
        $(
            gpu_test!($pes, $name);
            fn $name() {
                method_case($pes, $method);
            }
        )*
    };
}

method_tests!(SparseMethod::TopK, 1 topk, 2 topk_2, 3 topk_3, 4 topk_4);
method_tests!(
    SparseMethod::TopKAopt,
    1 topk_aopt,
    2 topk_aopt_2,
    3 topk_aopt_3,
    4 topk_aopt_4
);
method_tests!(
    SparseMethod::GaussianK,
    1 gaussiank,
    2 gaussiank_2,
    3 gaussiank_3,
    4 gaussiank_4
);
method_tests!(
    SparseMethod::GaussianKConcat,
    1 gaussiank_concat,
    2 gaussiank_concat_2,
    3 gaussiank_concat_3,
    4 gaussiank_concat_4
);
method_tests!(SparseMethod::GTopK, 1 gtopk, 2 gtopk_2, 3 gtopk_3, 4 gtopk_4);
method_tests!(
    SparseMethod::OkTopK,
    1 oktopk,
    2 oktopk_2,
    3 oktopk_3,
    4 oktopk_4
);
method_tests!(
    SparseMethod::TopKSa,
    1 topk_sa,
    2 topk_sa_2,
    3 topk_sa_3,
    4 topk_sa_4
);
method_tests!(
    SparseMethod::GaussianKSa,
    1 gaussiank_sa,
    2 gaussiank_sa_2,
    3 gaussiank_sa_3,
    4 gaussiank_sa_4
);

/// The Gaussian threshold of gradients that are not integers: the device's sums add in
/// another order, so its threshold is the reference's within rounding, and the selection is
/// exactly the reference's threshold compaction at the device's threshold.
fn gaussian_threshold_of_real_values() {
    let nv = runtime(1);
    let s = nv.stream().clone();
    let n = 100_003;
    let opts = SparseOptions {
        error_feedback: false,
        ..SparseOptions::new(SparseMethod::GaussianK, 0.01)
    };
    let mut ar = SparseAllreduce::<f32>::world(&nv, n, opts).unwrap();
    let host: Vec<f32> = (0..n)
        .map(|i| {
            // A rough bell: the sum of four uniforms, centred.
            let u = |j: u64| (mix(i as u64 * 4 + j) >> 40) as f32 / (1u64 << 24) as f32;
            u(0) + u(1) + u(2) + u(3) - 2.0
        })
        .collect();
    let g = s.clone_htod(&host).unwrap();
    let mut out = s.alloc_zeros::<f32>(n).unwrap();
    ar.run(&g, &mut out, &s).unwrap();
    let t = ar.threshold(&s).unwrap().unwrap();
    // With the count correction: the candidate t_j the reference picks (the device's sums
    // differ in rounding only, which moves no count here).
    let want = reference::gaussian_corrected_threshold(&host, 0.01, ar.k());
    assert!(
        ((t - want) / want).abs() < 1e-5,
        "threshold {t} against the reference's {want}"
    );
    let sel = ar.selected(&s).unwrap();
    same_set(
        "selection at the device's threshold",
        &sel,
        &reference::threshold::<f32, i32>(&host, t, ar.capacity()),
    );
    // A Gaussian-like gradient: about the density is selected.
    let share = sel.count as f64 / n as f64;
    assert!(
        (0.002..0.05).contains(&share),
        "selected {share} of the gradient"
    );
    same_values(
        "output",
        &s.clone_dtoh(&out).unwrap(),
        &reference::sparse_sum(n, &[sel]),
    );
}
gpu_test!(1, gaussian_threshold_of_real_values);

/// Wrong lengths and PEs outside the team end in typed errors, before anything is enqueued.
fn sparse_allreduce_refuses_bad_calls() {
    let nv = runtime(2);
    let s = nv.stream().clone();
    let opts = SparseOptions::new(SparseMethod::TopK, 0.1);
    let mut ar = SparseAllreduce::<f32>::world(&nv, 100, opts).unwrap();
    let short = s.alloc_zeros::<f32>(99).unwrap();
    let mut out = s.alloc_zeros::<f32>(100).unwrap();
    assert!(matches!(
        ar.run(&short, &mut out, &s),
        Err(Error::LengthMismatch { .. })
    ));
    let err = SparseAllreduce::<f32>::world(&nv, 0, opts).err().unwrap();
    assert!(matches!(err, Error::SparseConfig { .. }), "{err}");
    let never = SparseOptions {
        reestimate_every: 0,
        ..SparseOptions::new(SparseMethod::OkTopK, 0.1)
    };
    let err = SparseAllreduce::<f32>::world(&nv, 100, never)
        .err()
        .unwrap();
    assert!(err.to_string().contains("reestimate_every"), "{err}");
    // A team of PE 0 alone: PE 1 is outside it.
    let world = nv.team_world();
    let team = match world.split_strided(0, 1, 1) {
        Ok(t) => t,
        Err(e) => {
            skip(&format!("no team split: {e}"));
            return;
        }
    };
    let mut solo = SparseAllreduce::<f32>::new(&nv, team.as_ref(), 100, opts).unwrap();
    let g = s.alloc_zeros::<f32>(100).unwrap();
    let got = solo.run(&g, &mut out, &s);
    if nv.my_pe() == 0 {
        got.unwrap();
        assert_eq!(s.clone_dtoh(&out).unwrap(), vec![0.0; 100]);
    } else {
        assert!(matches!(got, Err(Error::SparseConfig { .. })), "{got:?}");
    }
    drop(solo);
    drop(team);
    nv.barrier_all().unwrap();
}
gpu_test!(2, sparse_allreduce_refuses_bad_calls);

fn same_bits<T: Value>(what: &str, got: &[T], want: &[T]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(
            g.to_bits64(),
            w.to_bits64(),
            "{what}: element {i} is {g:?}, want {w:?}"
        );
    }
}

/// Error feedback survives a checkpoint (one method, one value type): after two calls the
/// residual is copied to the host (as the reference's), loaded into a fresh SparseAllreduce,
/// and the third call of the fresh one gives the output of the uninterrupted one's, bit for
/// bit, and the CPU simulation's; so do the residuals after it. Without the residual the
/// simulation's output differs, so a load that did nothing would fail here. Ok-Topk
/// re-estimates every 2 calls: its third call re-estimates in both runs, as a fresh one must.
/// A residual of another length and a load without error feedback are refused.
fn residual_reload_case<T: Value>(nv: &Nvshmem, s: &Arc<CudaStream>, method: SparseMethod) {
    let (me, p) = (nv.my_pe() as usize, nv.n_pes() as usize);
    let n = 1000;
    let opts = SparseOptions {
        reestimate_every: 2,
        global_every: 2,
        repartition_every: 2,
        ..SparseOptions::new(method, 0.05)
    };
    let what = format!("{} {} reload", method.name(), T::NAME);
    let grads_of =
        |step: usize| -> Vec<Vec<T>> { (0..p).map(|r| gradient(Kind::Ints, n, step, r)).collect() };
    let mut a = SparseAllreduce::<T>::world(nv, n, opts).unwrap();
    let mut sim = simulation::Simulation::<T>::new(opts, n, p);
    let mut g = s.alloc_zeros::<T>(n).unwrap();
    let mut out = s.alloc_zeros::<T>(n).unwrap();
    for step in 0..2 {
        let grads = grads_of(step);
        s.memcpy_htod(&grads[me], &mut g).unwrap();
        s.memcpy_htod(&vec![T::poison(); n], &mut out).unwrap();
        a.run(&g, &mut out, s).unwrap();
        sim.step(&grads);
    }
    let saved = s.clone_dtoh(a.residual().unwrap()).unwrap();
    same_values(
        &format!("{what}: saved residual"),
        &saved,
        &sim.members[me].residual,
    );

    // Collective: created on every PE in the same order.
    let mut b = SparseAllreduce::<T>::world(nv, n, opts).unwrap();
    let no_ef = SparseOptions {
        error_feedback: false,
        ..opts
    };
    let mut c = SparseAllreduce::<T>::world(nv, n, no_ef).unwrap();
    let err = b.load_residual(&saved[1..], s).unwrap_err();
    assert!(
        matches!(err, Error::ResidualLength { len, got, .. } if len == n && got == n - 1),
        "{what}: {err}"
    );
    let err = c.load_residual(&saved, s).unwrap_err();
    assert!(
        matches!(err, Error::NoErrorFeedback { .. }),
        "{what}: {err}"
    );
    assert!(err.to_string().contains("error_feedback"), "{err}");
    drop(c);
    // The refused load left b's residual zero.
    let zero = vec![T::of_f32(0.0); n];
    same_bits(
        &format!("{what}: residual after a refused load"),
        &s.clone_dtoh(b.residual().unwrap()).unwrap(),
        &zero,
    );
    b.load_residual(&saved, s).unwrap();
    same_bits(
        &format!("{what}: loaded residual"),
        &s.clone_dtoh(b.residual().unwrap()).unwrap(),
        &saved,
    );

    let grads = grads_of(2);
    let lost = simulation::Simulation::<T>::new(opts, n, p).step(&grads);
    let want = sim.step(&grads);
    assert!(
        lost.out
            .iter()
            .zip(&want.out)
            .any(|(x, y)| x.to_f64() != y.to_f64()),
        "{what}: the residual does not change the output; the test could not see it lost"
    );
    let mut outs = Vec::new();
    for ar in [&mut a, &mut b] {
        s.memcpy_htod(&grads[me], &mut g).unwrap();
        s.memcpy_htod(&vec![T::poison(); n], &mut out).unwrap();
        ar.run(&g, &mut out, s).unwrap();
        outs.push(s.clone_dtoh(&out).unwrap());
    }
    same_values(
        &format!("{what}: uninterrupted output"),
        &outs[0],
        &want.out,
    );
    same_bits(&format!("{what}: reloaded output"), &outs[1], &outs[0]);
    let ra = s.clone_dtoh(a.residual().unwrap()).unwrap();
    let rb = s.clone_dtoh(b.residual().unwrap()).unwrap();
    same_values(
        &format!("{what}: residual after"),
        &ra,
        &sim.members[me].residual,
    );
    same_bits(&format!("{what}: reloaded residual after"), &rb, &ra);
    drop(b);
    drop(a);
    nv.barrier_all().unwrap();
}

/// [`residual_reload_case`] for every method, in f32 and bf16.
fn residual_reload_gives_the_uninterrupted_result() {
    let nv = runtime(2);
    let s = nv.stream().clone();
    for method in SparseMethod::ALL {
        residual_reload_case::<f32>(&nv, &s, method);
        residual_reload_case::<bf16>(&nv, &s, method);
    }
}
gpu_test!(2, residual_reload_gives_the_uninterrupted_result);

/// Random f32 gradients of one member at one step: a rough bell (the sum of four uniforms)
/// times a scale that changes per member, with full mantissas, so that sums in another order
/// round differently.
fn random_gradient(n: usize, step: usize, pe: usize) -> Vec<f32> {
    let seed = mix((step as u64) << 32 ^ (pe as u64) << 16 ^ 0x5EED);
    let scale = 1.0e-3 * (1.0 + pe as f32 * 0.37);
    (0..n)
        .map(|i| {
            let u = |j: u64| {
                (mix(seed ^ (i as u64 * 4 + j).wrapping_mul(0x9E37)) >> 40) as f32
                    / (1u64 << 24) as f32
            };
            (u(0) + u(1) + u(2) + u(3) - 2.0) * scale
        })
        .collect()
}

/// Every replica's output of one method, bit for bit, at this run's PE count, on random f32
/// data over several calls with error feedback: PE r's output is allgathered and compared with
/// every other's. Where the selection is exact on the host too (the top-k methods, gTop-k and
/// Ok-Topk, whose thresholds come from exact top-k), the output is also compared bit for bit
/// with the CPU simulation, which sums in member order. A scatter-add with atomics in no fixed
/// order fails this at 3 and more PEs (P = 2 is exact: a + b == b + a).
fn replicas_case(nv: &Nvshmem, s: &Arc<CudaStream>, method: SparseMethod) {
    let (me, p) = (nv.my_pe() as usize, nv.n_pes() as usize);
    let n = 20_000;
    let opts = SparseOptions {
        reestimate_every: 3,
        global_every: 2,
        repartition_every: 3,
        ..SparseOptions::new(method, 0.02)
    };
    let what = format!("{} replicas at {p} PEs", method.name());
    let mut ar = SparseAllreduce::<f32>::world(nv, n, opts).unwrap();
    let mut ag = nvshmem::Allgather::world(nv).unwrap();
    let mine = nv.alloc_zeroed::<f32>(n).unwrap();
    let all = nv.alloc_zeroed::<f32>(p * n).unwrap();
    let mut sim = simulation::Simulation::<f32>::new(opts, n, p);
    let exact_on_host = !gaussian(method);
    let mut g = s.alloc_zeros::<f32>(n).unwrap();
    let mut out = s.alloc_zeros::<f32>(n).unwrap();
    let mut differs_from_member_order_sum = false;
    for step in 0..5 {
        let what = format!("{what} step {step}");
        let grads: Vec<Vec<f32>> = (0..p).map(|r| random_gradient(n, step, r)).collect();
        s.memcpy_htod(&grads[me], &mut g).unwrap();
        s.memcpy_htod(&vec![f32::poison(); n], &mut out).unwrap();
        ar.run(&g, &mut out, s).unwrap();
        let got = s.clone_dtoh(&out).unwrap();
        assert!(
            got.iter().all(|v| !v.is_nan()),
            "{what}: poison left in the output"
        );
        if exact_on_host {
            let want = sim.step(&grads);
            same_bits(
                &format!("{what}: output against the reference"),
                &got,
                &want.out,
            );
            // The data must be able to tell orders apart: the members' selections summed in
            // reverse order differ somewhere from the member-order sum.
            let rev: Vec<_> = want.selected.iter().rev().cloned().collect();
            let back = reference::sparse_sum(n, &rev);
            differs_from_member_order_sum |= back
                .iter()
                .zip(&reference::sparse_sum(n, &want.selected))
                .any(|(a, b)| a.to_bits() != b.to_bits());
        }
        mine.copy_from_host(&got).unwrap();
        ag.run(&mine, &all, s).unwrap();
        ag.sync(s).unwrap();
        let every = all.to_vec().unwrap();
        for r in 0..p {
            same_bits(
                &format!("{what}: PE {r}'s output against PE {me}'s"),
                &every[r * n..(r + 1) * n],
                &got,
            );
        }
    }
    if exact_on_host && p >= 3 && method != SparseMethod::GTopK {
        assert!(
            differs_from_member_order_sum,
            "{what}: the data never round differently in another order; the test is blind"
        );
    }
    drop(ar);
    nv.barrier_all().unwrap();
}

/// [`replicas_case`] for every method.
fn replicas_are_bit_identical(pes: i32) {
    let nv = runtime(pes);
    let s = nv.stream().clone();
    for method in SparseMethod::ALL {
        replicas_case(&nv, &s, method);
    }
}

gpu_test!(3, replicas_are_bit_identical_3);
fn replicas_are_bit_identical_3() {
    replicas_are_bit_identical(3);
}

gpu_test!(4, replicas_are_bit_identical_4);
fn replicas_are_bit_identical_4() {
    replicas_are_bit_identical(4);
}
