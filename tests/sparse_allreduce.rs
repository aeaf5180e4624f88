//! GPU tests of the sparse gradient allreduce (src/sparse/allreduce.rs) against a CPU
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
use nvshmem::sparse::reference;
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

/// One member on the host: its residual and everything it has sent, summed, and its Ok-Topk
/// threshold.
struct Member<T> {
    residual: Vec<T>,
    sent: Vec<T>,
    grads: Vec<T>,
    ok_threshold: f32,
}

/// What the members share on the host: calls since the residual was cleared, and the region
/// boundaries in use (Ok-Topk's, as last re-estimated).
struct Shared {
    calls: usize,
    bounds: Vec<u64>,
}

/// What one step gives on the host: each member's selection and the dense result.
struct Step<T: Value> {
    selected: Vec<HostSparse<T, i32>>,
    /// Gaussian methods and Ok-Topk: each member's threshold.
    thresholds: Vec<f32>,
    included: Vec<HostSparse<T, i32>>,
    /// Region methods: the boundaries and each member's region after the reduce.
    bounds: Vec<u64>,
    regions: Vec<HostSparse<T, i32>>,
    /// Ok-Topk: whether this call re-estimated (an exact top-k).
    estimated: bool,
    out: Vec<T>,
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

fn add_all<T: Value>(a: &[T], b: &[T]) -> Vec<T> {
    a.iter().zip(b).map(|(&x, &y)| x.sparse_add(y)).collect()
}

/// Everything the GPU should do in one step, for every member.
fn simulate<T: Value>(
    opts: SparseOptions,
    members: &mut [Member<T>],
    shared: &mut Shared,
    grads: &[Vec<T>],
    k: usize,
    cap: usize,
) -> Step<T> {
    let n = grads[0].len();
    let p = members.len();
    let ok = opts.method == SparseMethod::OkTopK;
    let estimated = ok && shared.calls % opts.reestimate_every == 0;
    shared.calls += 1;
    let mut selected = Vec::new();
    let mut thresholds = Vec::new();
    let mut accs = Vec::new();
    for (m, g) in members.iter_mut().zip(grads) {
        let acc = if opts.error_feedback {
            add_all(&m.residual, g)
        } else {
            g.clone()
        };
        m.grads = add_all(&m.grads, g);
        let sel = if gaussian(opts.method) {
            let t = reference::gaussian_threshold(&acc, opts.density);
            thresholds.push(t);
            reference::threshold::<T, i32>(&acc, t, cap)
        } else if ok && !estimated {
            thresholds.push(m.ok_threshold);
            reference::threshold::<T, i32>(&acc, m.ok_threshold, cap)
        } else {
            let sel = reference::topk::<T, i32>(&acc, k);
            if ok {
                m.ok_threshold = reference::least_threshold(&sel);
                thresholds.push(m.ok_threshold);
            }
            sel
        };
        selected.push(sel);
        accs.push(acc);
    }
    let mut regions = Vec::new();
    if estimated {
        let local: Vec<_> = selected
            .iter()
            .map(|s| reference::region_boundaries(s, n, p))
            .collect();
        shared.bounds = reference::average_boundaries(&local);
    } else if by_regions(opts.method) && !ok {
        shared.bounds = reference::equal_boundaries(n, p);
    }
    let (out, sent): (Vec<T>, Vec<HostSparse<T, i32>>) = if opts.method == SparseMethod::GTopK {
        let global = reference::gtopk(&selected, k);
        let inc: Vec<_> = selected
            .iter()
            .map(|s| reference::included(s, &global))
            .collect();
        (reference::sparse_sum(n, &[global]), inc)
    } else if by_regions(opts.method) {
        let (reduced, out) = reference::region_allreduce(&selected, &shared.bounds, n);
        // The regions' sum is every member's selection summed: nothing is lost in the exchange.
        same_values("region sum", &out, &reference::sparse_sum(n, &selected));
        regions = reduced;
        (out, selected.clone())
    } else {
        (reference::sparse_sum(n, &selected), selected.clone())
    };
    for ((m, acc), s) in members.iter_mut().zip(accs).zip(&sent) {
        if opts.error_feedback {
            m.residual = acc;
            for &i in &s.idx {
                m.residual[i as usize] = T::of_f32(0.0);
            }
        }
        reference::scatter_add(&mut m.sent, s);
    }
    let out = if opts.average && p > 1 {
        let s = 1.0 / p as f32;
        out.iter()
            .map(|v| T::of_f32(v.to_f64() as f32 * s))
            .collect()
    } else {
        out
    };
    let included = if opts.method == SparseMethod::GTopK {
        sent
    } else {
        Vec::new()
    };
    Step {
        selected,
        thresholds,
        included,
        bounds: shared.bounds.clone(),
        regions,
        estimated,
        out,
    }
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

const STEPS: usize = 3;

/// Runs `STEPS` calls of one configuration on every kind and checks this PE's results.
fn check_config<T: Value>(nv: &Nvshmem, s: &Arc<CudaStream>, opts: SparseOptions, n: usize) {
    let (me, p) = (nv.my_pe() as usize, nv.n_pes() as usize);
    let mut ar = SparseAllreduce::<T>::world(nv, n, opts).unwrap();
    let (k, cap) = (ar.k(), ar.capacity());
    let mut g = s.alloc_zeros::<T>(n).unwrap();
    let mut out = s.alloc_zeros::<T>(n).unwrap();
    for kind in KINDS {
        let what = format!(
            "{} {} n {n} density {} ef {} avg {} every {} {kind:?}",
            opts.method.name(),
            T::NAME,
            opts.density,
            opts.error_feedback,
            opts.average,
            opts.reestimate_every
        );
        ar.clear_residual(s).unwrap();
        let zero = vec![T::of_f32(0.0); n];
        let mut members: Vec<Member<T>> = (0..p)
            .map(|_| Member {
                residual: zero.clone(),
                sent: zero.clone(),
                grads: zero.clone(),
                ok_threshold: 0.0,
            })
            .collect();
        let mut shared = Shared {
            calls: 0,
            bounds: Vec::new(),
        };
        for step in 0..STEPS {
            let what = format!("{what} step {step}");
            let grads: Vec<Vec<T>> = (0..p).map(|r| gradient(kind, n, step, r)).collect();
            s.memcpy_htod(&grads[me], &mut g).unwrap();
            s.memcpy_htod(&vec![T::poison(); n], &mut out).unwrap();
            ar.run(&g, &mut out, s).unwrap();
            let want = simulate(opts, &mut members, &mut shared, &grads, k, cap);
            let sel = ar.selected(s).unwrap();
            same_set(&format!("{what}: selection"), &sel, &want.selected[me]);
            if gaussian(opts.method) || opts.method == SparseMethod::OkTopK {
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
                if want.estimated {
                    assert_eq!(sel.count as usize, k.min(n), "{what}: exact k (estimate)");
                }
            } else {
                assert_eq!(sel.count as usize, k.min(n), "{what}: exact k");
                assert!(ar.threshold(s).unwrap().is_none(), "{what}: no threshold");
            }
            if by_regions(opts.method) {
                let b = ar.boundaries(s).unwrap().unwrap();
                assert_eq!(b, want.bounds, "{what}: region boundaries");
                let region = ar.region(s).unwrap().unwrap();
                same_set(&format!("{what}: region {me}"), &region, &want.regions[me]);
                assert!(
                    ar.included(s).unwrap().is_none(),
                    "{what}: all selected is sent"
                );
            } else {
                assert!(ar.boundaries(s).unwrap().is_none());
            }
            let got = s.clone_dtoh(&out).unwrap();
            same_values(&format!("{what}: output"), &got, &want.out);
            if let Some(inc) = ar.included(s).unwrap() {
                same_set(&format!("{what}: included"), &inc, &want.included[me]);
            }
            let m = &members[me];
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
            // Ok-Topk re-estimates at steps 0 and 2 and reuses its threshold at step 1 (the
            // other methods ignore it).
            let opts = SparseOptions {
                error_feedback: ef,
                reestimate_every: 2,
                ..SparseOptions::new(method, density)
            };
            check_config::<f32>(&nv, &s, opts, n);
            check_config::<bf16>(&nv, &s, opts, n);
        }
    }
    // Ok-Topk: re-estimates on every call.
    let avg = SparseOptions {
        average: true,
        reestimate_every: 1,
        ..SparseOptions::new(method, 0.1)
    };
    check_config::<f32>(&nv, &s, avg, 1000);
    check_config::<bf16>(&nv, &s, avg, 1000);
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
    let want = reference::gaussian_threshold(&host, 0.01);
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

/// Members with zero residuals and nothing sent yet.
fn fresh_members<T: Value>(p: usize, n: usize) -> Vec<Member<T>> {
    let zero = vec![T::of_f32(0.0); n];
    (0..p)
        .map(|_| Member {
            residual: zero.clone(),
            sent: zero.clone(),
            grads: zero.clone(),
            ok_threshold: 0.0,
        })
        .collect()
}

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
        ..SparseOptions::new(method, 0.05)
    };
    let what = format!("{} {} reload", method.name(), T::NAME);
    let grads_of =
        |step: usize| -> Vec<Vec<T>> { (0..p).map(|r| gradient(Kind::Ints, n, step, r)).collect() };
    let mut a = SparseAllreduce::<T>::world(nv, n, opts).unwrap();
    let (k, cap) = (a.k(), a.capacity());
    let mut members = fresh_members::<T>(p, n);
    let mut shared = Shared {
        calls: 0,
        bounds: Vec::new(),
    };
    let mut g = s.alloc_zeros::<T>(n).unwrap();
    let mut out = s.alloc_zeros::<T>(n).unwrap();
    for step in 0..2 {
        let grads = grads_of(step);
        s.memcpy_htod(&grads[me], &mut g).unwrap();
        s.memcpy_htod(&vec![T::poison(); n], &mut out).unwrap();
        a.run(&g, &mut out, s).unwrap();
        simulate(opts, &mut members, &mut shared, &grads, k, cap);
    }
    let saved = s.clone_dtoh(a.residual().unwrap()).unwrap();
    same_values(
        &format!("{what}: saved residual"),
        &saved,
        &members[me].residual,
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
    let mut lost_members = fresh_members::<T>(p, n);
    let mut lost_shared = Shared {
        calls: 0,
        bounds: Vec::new(),
    };
    let lost = simulate(opts, &mut lost_members, &mut lost_shared, &grads, k, cap);
    let want = simulate(opts, &mut members, &mut shared, &grads, k, cap);
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
        &members[me].residual,
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
