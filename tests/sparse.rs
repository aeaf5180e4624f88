//! GPU tests of the sparse selection kernels (src/sparse/, device/sparse/): top-k, threshold
//! compaction, merge and scatter-add, each compared bit for bit with the CPU reference
//! (src/sparse/reference.rs). Every output is poisoned before each call (NaN payloads and
//! indexes no kernel writes, a count no call gives), so a kernel that writes nothing, too
//! little or past its pairs fails. One PE; run by scripts/gpu_test.sh (tests named pe1_*).

mod common;

use common::{gpu_test, runtime};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaStream, DevicePtr};
use half::bf16;
use nvshmem::tools::sparse_reference as reference;
use nvshmem::{
    scatter_add, Error, HostSparse, SparseIndex, SparseMerge, SparseSet, SparseValue, TopK,
};
use std::io::Write;
use std::sync::Arc;

/// Value types with a poison and a conversion from the generated f32 values.
trait Value: SparseValue {
    /// A NaN whose payload no kernel makes and no test gradient holds.
    fn poison() -> Self;
    fn of(v: f32) -> Self;
    fn as_f32(self) -> f32;
}

impl Value for f32 {
    fn poison() -> Self {
        f32::from_bits(0x7FBA_DBAD)
    }
    fn of(v: f32) -> Self {
        v
    }
    fn as_f32(self) -> f32 {
        self
    }
}

impl Value for bf16 {
    fn poison() -> Self {
        bf16::from_bits(0xFFAB)
    }
    fn of(v: f32) -> Self {
        bf16::from_f32(v)
    }
    fn as_f32(self) -> f32 {
        self.to_f32()
    }
}

/// Index types with a poison (negative: no selection writes it).
trait Index: SparseIndex {
    const POISON: Self;
}

impl Index for i32 {
    const POISON: Self = -0x05A5_A5A5;
}

impl Index for i64 {
    const POISON: Self = -0x5A5A_5A5A_5A5A;
}

/// A count no call writes.
const COUNT_POISON: u64 = 0xDEAD_BEEF_0BAD_F00D;

const SIZES: [usize; 6] = [1, 7, 1000, 65537, 1_000_001, 16 << 20];
const DENSITIES: [f64; 3] = [0.001, 0.01, 0.1];

fn k_of(n: usize, density: f64) -> usize {
    ((n as f64 * density).round() as usize).max(1)
}

/// splitmix64: reproducible test data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// Gradient-like values: random signs, magnitudes over 40 binades (few exact repeats in f32,
/// many once rounded to bf16).
fn spread(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng(seed);
    (0..n)
        .map(|_| {
            let m = (1.0 + r.unit()) * 2f32.powi(r.below(40) as i32 - 30);
            if r.next() & 1 == 1 {
                -m
            } else {
                m
            }
        })
        .collect()
}

/// Values from 65 levels (multiples of 1/8 up to 4 either side, zeros of both signs): ties
/// everywhere, at the k-th largest too.
fn duplicates(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng(seed);
    (0..n)
        .map(|_| {
            let v = (r.below(65) as i32 - 32) as f32 * 0.125;
            if v == 0.0 && r.next() & 1 == 1 {
                -0.0
            } else {
                v
            }
        })
        .collect()
}

type Make = fn(usize, u64) -> Vec<f32>;
const KINDS: [(&str, Make); 2] = [("spread", spread), ("duplicates", duplicates)];

fn values<T: Value>(v: Vec<f32>) -> Vec<T> {
    v.into_iter().map(T::of).collect()
}

fn poison<T: Value, I: Index>(set: &mut SparseSet<T, I>, s: &Arc<CudaStream>) {
    let cap = set.capacity();
    let (mut idx, mut val, count) = set.parts_mut();
    if cap > 0 {
        s.memcpy_htod(&vec![I::POISON; cap], &mut idx).unwrap();
        s.memcpy_htod(&vec![T::poison(); cap], &mut val).unwrap();
    }
    s.memcpy_htod(&[COUNT_POISON], count).unwrap();
}

/// A poisoned set of `capacity` pairs.
fn output<T: Value, I: Index>(s: &Arc<CudaStream>, capacity: usize) -> SparseSet<T, I> {
    let mut set = SparseSet::new(s, capacity).unwrap();
    poison(&mut set, s);
    set
}

/// `set` equals `want` bit for bit, and every pair past those held is still poison.
fn expect_set<T: Value, I: Index>(
    what: &str,
    set: &SparseSet<T, I>,
    want: &HostSparse<T, I>,
    s: &Arc<CudaStream>,
) {
    let got = set.to_host(s).unwrap();
    if let Some(d) = got.difference(want) {
        panic!("{what}: GPU against the reference: {d}");
    }
    let (held, cap) = (got.idx.len(), set.capacity());
    if held < cap {
        let idx = s.clone_dtoh(&set.idx()).unwrap();
        let val = s.clone_dtoh(&set.val()).unwrap();
        for j in held..cap {
            assert!(
                idx[j] == I::POISON && val[j].to_bits64() == T::poison().to_bits64(),
                "{what}: pair {j}, past the {held} held, was written: ({:?}, {:?})",
                idx[j],
                val[j]
            );
        }
    }
}

/// Top-k of `grad` (holding `host`) on the GPU against the reference, into an output 3 pairs
/// larger than needed.
fn check_topk<T: Value, I: Index, G: DevicePtr<T>>(
    s: &Arc<CudaStream>,
    topk: &mut TopK,
    grad: &G,
    host: &[T],
    k: usize,
    what: &str,
) {
    let taken = k.min(host.len());
    let mut out = output::<T, I>(s, taken + 3);
    assert_eq!(topk.run(grad, k, &mut out, s).unwrap(), taken, "{what}");
    let what = format!(
        "{what}: top-{k} of {} {} ({})",
        host.len(),
        T::NAME,
        I::NAME
    );
    expect_set(&what, &out, &reference::topk::<T, I>(host, k), s);
}

/// Threshold compaction on the GPU against the reference, into `capacity` pairs.
fn check_threshold<T: Value, I: Index, G: DevicePtr<T>>(
    s: &Arc<CudaStream>,
    topk: &mut TopK,
    grad: &G,
    host: &[T],
    t: f32,
    capacity: usize,
    what: &str,
) -> u64 {
    let mut out = output::<T, I>(s, capacity);
    topk.threshold(grad, t, &mut out, s).unwrap();
    let want = reference::threshold::<T, I>(host, t, capacity);
    let what = format!(
        "{what}: threshold {t:e} of {} {} ({}), capacity {capacity}",
        host.len(),
        T::NAME,
        I::NAME
    );
    expect_set(&what, &out, &want, s);
    want.count
}

fn topk_sizes_and_densities<T: Value>() {
    let nv = runtime(1);
    let s = nv.stream().clone();
    let mut topk = TopK::new(&s, 16 << 20).unwrap();
    for (kind, make) in KINDS {
        for n in SIZES {
            let host: Vec<T> = values(make(n, n as u64 ^ 0x51));
            let grad = s.clone_htod(&host).unwrap();
            for d in DENSITIES {
                let what = format!("{kind}, density {d}");
                check_topk::<T, i32, _>(&s, &mut topk, &grad, &host, k_of(n, d), &what);
            }
        }
    }
}

gpu_test!(1, topk_f32_sizes_and_densities);
fn topk_f32_sizes_and_densities() {
    topk_sizes_and_densities::<f32>();
}

gpu_test!(1, topk_bf16_sizes_and_densities);
fn topk_bf16_sizes_and_densities() {
    topk_sizes_and_densities::<bf16>();
}

fn topk_edges<T: Value, I: Index>(s: &Arc<CudaStream>, topk: &mut TopK) {
    for n in [1, 2, 7, 1000, 4096, 4097, 65537] {
        let host: Vec<T> = values(spread(n, 7 * n as u64));
        let grad = s.clone_htod(&host).unwrap();
        for k in [0, 1, n - 1, n, n + 5, usize::MAX] {
            check_topk::<T, I, _>(s, topk, &grad, &host, k, "edge");
        }
        // An empty gradient: a view of none of it.
        for k in [0, 3] {
            check_topk::<T, I, _>(s, topk, &grad.slice(0..0), &[], k, "empty gradient");
        }
    }
}

gpu_test!(1, topk_k_zero_k_at_least_n_and_empty);
fn topk_k_zero_k_at_least_n_and_empty() {
    let nv = runtime(1);
    let s = nv.stream().clone();
    let mut topk = TopK::new(&s, 65537).unwrap();
    topk_edges::<f32, i32>(&s, &mut topk);
    topk_edges::<bf16, i32>(&s, &mut topk);
    topk_edges::<f32, i64>(&s, &mut topk);
    topk_edges::<bf16, i64>(&s, &mut topk);
}

fn all_equal<T: Value>(s: &Arc<CudaStream>, topk: &mut TopK) {
    for n in [7, 65537, 1_000_001] {
        let level: Vec<T> = values((0..n).map(|i| [0.75, -0.75, 0.75][i % 3]).collect());
        let zeros: Vec<T> = values((0..n).map(|i| [0.0, -0.0][i % 2]).collect());
        let nans: Vec<T> = (0..n)
            .map(|i| {
                // NaNs of either sign and several payloads: all equal in the order.
                let f = f32::from_bits(0x7FC0_0000 | (i as u32 % 5) | ((i as u32 & 8) << 28));
                T::of(f)
            })
            .collect();
        for (kind, host) in [("±0.75", level), ("±0", zeros), ("NaN", nans)] {
            let grad = s.clone_htod(&host).unwrap();
            let mut ks: Vec<usize> = DENSITIES.iter().map(|&d| k_of(n, d)).collect();
            ks.extend([n / 2, n - 1]);
            for k in ks {
                let what = format!("all {kind}");
                check_topk::<T, i32, _>(s, topk, &grad, &host, k, &what);
                // The spec itself, not only the reference: exactly the k lowest indexes.
                let mut out = output::<T, i32>(s, k);
                topk.run(&grad, k, &mut out, s).unwrap();
                let got = out.to_host(s).unwrap();
                assert!(
                    got.idx.iter().enumerate().all(|(j, &i)| i == j as i32),
                    "{what}: top-{k} of {n} equal magnitudes is not indexes 0..{k}"
                );
            }
        }
    }
}

gpu_test!(1, topk_all_equal_magnitudes_take_the_lowest_indexes);
fn topk_all_equal_magnitudes_take_the_lowest_indexes() {
    let nv = runtime(1);
    let s = nv.stream().clone();
    let mut topk = TopK::new(&s, 1_000_001).unwrap();
    all_equal::<f32>(&s, &mut topk);
    all_equal::<bf16>(&s, &mut topk);
}

/// Small spread values with NaNs (several payloads, both signs), infinities, zeros of both
/// signs, the largest finite value and subnormals at random places.
fn specials<T: Value>(n: usize, seed: u64) -> Vec<T> {
    let mut r = Rng(seed);
    let special = [
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7FC0_1234),
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        f32::MAX,
        -f32::MAX,
        1e-40,
        -1e-40,
        f32::MIN_POSITIVE,
    ];
    spread(n, seed)
        .into_iter()
        .map(|v| {
            let v = if r.below(50) == 0 {
                special[r.below(special.len() as u64) as usize]
            } else {
                v * 2f32.powi(-60)
            };
            T::of(v)
        })
        .collect()
}

gpu_test!(1, topk_nan_infinity_zeros_and_subnormals);
fn topk_nan_infinity_zeros_and_subnormals() {
    let nv = runtime(1);
    let s = nv.stream().clone();
    let mut topk = TopK::new(&s, 1_000_001).unwrap();
    for n in [1000, 100_000, 1_000_001] {
        let f: Vec<f32> = specials(n, n as u64);
        let b: Vec<bf16> = specials(n, n as u64);
        let (gf, gb) = (s.clone_htod(&f).unwrap(), s.clone_htod(&b).unwrap());
        for k in [1, 5, 17, 50, 300, n / 100, n / 10, n / 2] {
            check_topk::<f32, i32, _>(&s, &mut topk, &gf, &f, k, "specials");
            check_topk::<bf16, i64, _>(&s, &mut topk, &gb, &b, k, "specials");
        }
        for t in [0.0, 1e-30, 1.0, 3.0e38, f32::INFINITY] {
            check_threshold::<f32, i32, _>(&s, &mut topk, &gf, &f, t, n + 1, "specials");
            check_threshold::<bf16, i32, _>(&s, &mut topk, &gb, &b, t, n + 1, "specials");
        }
    }
}

gpu_test!(1, topk_and_threshold_with_i64_indexes);
fn topk_and_threshold_with_i64_indexes() {
    let nv = runtime(1);
    let s = nv.stream().clone();
    let mut topk = TopK::new(&s, 1_000_001).unwrap();
    for (kind, make) in KINDS {
        for n in [7, 1000, 65537, 1_000_001] {
            let f: Vec<f32> = make(n, n as u64 + 3);
            let b: Vec<bf16> = values(f.clone());
            let (gf, gb) = (s.clone_htod(&f).unwrap(), s.clone_htod(&b).unwrap());
            for d in DENSITIES {
                check_topk::<f32, i64, _>(&s, &mut topk, &gf, &f, k_of(n, d), kind);
                check_topk::<bf16, i64, _>(&s, &mut topk, &gb, &b, k_of(n, d), kind);
            }
            check_threshold::<f32, i64, _>(&s, &mut topk, &gf, &f, 0.5, n + 1, kind);
            check_threshold::<bf16, i64, _>(&s, &mut topk, &gb, &b, 0.5, n + 1, kind);
        }
    }
}

fn unaligned<T: Value>(s: &Arc<CudaStream>, topk: &mut TopK) {
    for n in [7, 1000, 65537, 1_000_001] {
        let all: Vec<T> = values(duplicates(n + 8, n as u64 + 11));
        let grad = s.clone_htod(&all).unwrap();
        for off in [1, 2, 3, 5] {
            let (view, host) = (grad.slice(off..off + n), &all[off..off + n]);
            let what = format!("view at element {off}");
            for d in DENSITIES {
                check_topk::<T, i32, _>(s, topk, &view, host, k_of(n, d), &what);
            }
            check_topk::<T, i32, _>(s, topk, &view, host, n, &what);
            check_threshold::<T, i32, _>(s, topk, &view, host, 2.0, n + 1, &what);
        }
    }
}

gpu_test!(1, topk_and_threshold_over_unaligned_views);
fn topk_and_threshold_over_unaligned_views() {
    let nv = runtime(1);
    let s = nv.stream().clone();
    let mut topk = TopK::new(&s, 1_000_001).unwrap();
    unaligned::<f32>(&s, &mut topk);
    unaligned::<bf16>(&s, &mut topk);
}

gpu_test!(1, topk_beyond_2_pow_31_needs_i64_indexes);
fn topk_beyond_2_pow_31_needs_i64_indexes() {
    let nv = runtime(1);
    let s = nv.stream().clone();
    let n: usize = (1 << 31) + 1000;
    // 4 GiB of bf16 zeros with a few values at known places either side of 2^31.
    let mut grad = s.alloc_zeros::<bf16>(n).unwrap();
    let placed: [(usize, f32); 6] = [
        (5, 0.5),
        (1_000_000, -2.0),
        ((1 << 31) - 1, 2.0),
        (1 << 31, -4.0),
        ((1 << 31) + 7, 0.5),
        (n - 1, 1.0),
    ];
    for (at, v) in placed {
        s.memcpy_htod(&[bf16::from_f32(v)], &mut grad.slice_mut(at..at + 1))
            .unwrap();
    }
    let mut topk = TopK::new(&s, n).unwrap();
    // The top k of the placed values alone (the reference over them), then zeros from index 0.
    let values: Vec<bf16> = placed.iter().map(|p| bf16::from_f32(p.1)).collect();
    for k in [1, 3, 5, 6, 9] {
        let top = reference::topk::<bf16, i64>(&values, k);
        let mut want: Vec<(i64, bf16)> = top
            .idx
            .iter()
            .zip(&top.val)
            .map(|(&j, &v)| (placed[j as usize].0 as i64, v))
            .collect();
        want.extend((0..(k.saturating_sub(placed.len()))).map(|i| (i as i64, bf16::ZERO)));
        want.sort_by_key(|p| p.0);
        let want = HostSparse {
            count: k as u64,
            idx: want.iter().map(|p| p.0).collect(),
            val: want.iter().map(|p| p.1).collect(),
        };
        let mut out = output::<bf16, i64>(&s, k + 2);
        topk.run(&grad, k, &mut out, &s).unwrap();
        expect_set(&format!("top-{k} of 2^31 + 1000"), &out, &want, &s);
    }
    // Threshold: every placed value from 1 up, past 2^31 included.
    let mut out = output::<bf16, i64>(&s, 8);
    topk.threshold(&grad, 1.0, &mut out, &s).unwrap();
    let got = out.to_host(&s).unwrap();
    let want_idx = [1_000_000, (1 << 31) - 1, 1 << 31, n as i64 - 1];
    assert_eq!((got.count, got.idx.as_slice()), (4, &want_idx[..]));
    // i32 indexes reach 2^31 - 1: the full gradient is refused, the first 2^31 elements not.
    let mut narrow = output::<bf16, i32>(&s, 8);
    let err = topk.run(&grad, 3, &mut narrow, &s).unwrap_err();
    assert!(matches!(err, Error::IndexTooNarrow { .. }), "{err}");
    let head = grad.slice(0..1 << 31);
    topk.run(&head, 3, &mut narrow, &s).unwrap();
    let got = narrow.to_host(&s).unwrap();
    assert_eq!(got.idx, [5, 1_000_000, i32::MAX]);
}

fn threshold_sizes<T: Value>() {
    let nv = runtime(1);
    let s = nv.stream().clone();
    let mut topk = TopK::new(&s, 16 << 20).unwrap();
    for (kind, make) in KINDS {
        for n in SIZES {
            let host: Vec<T> = values(make(n, n as u64 ^ 0x77));
            let grad = s.clone_htod(&host).unwrap();
            for d in DENSITIES {
                // The k-th largest magnitude: ties at the threshold are selected too.
                let top = reference::topk::<T, i32>(&host, k_of(n, d));
                let t = top
                    .val
                    .iter()
                    .map(|v| v.as_f32().abs())
                    .fold(f32::MAX, f32::min);
                // Just above it too (between two bf16 values where it is one).
                for t in [t, t * (1.0 + 1e-3)] {
                    let count = reference::threshold::<T, i32>(&host, t, 0).count as usize;
                    let what = format!("{kind}, density {d}");
                    check_threshold::<T, i32, _>(&s, &mut topk, &grad, &host, t, count + 3, &what);
                }
            }
        }
    }
}

gpu_test!(1, threshold_f32_sizes_and_densities);
fn threshold_f32_sizes_and_densities() {
    threshold_sizes::<f32>();
}

gpu_test!(1, threshold_bf16_sizes_and_densities);
fn threshold_bf16_sizes_and_densities() {
    threshold_sizes::<bf16>();
}

fn threshold_overflow<T: Value>(s: &Arc<CudaStream>, topk: &mut TopK) {
    let n = 1_000_001;
    let host: Vec<T> = values(spread(n, 99));
    let grad = s.clone_htod(&host).unwrap();
    let t = 2f32.powi(4);
    let count = reference::threshold::<T, i32>(&host, t, 0).count as usize;
    assert!(count > 10_000, "the case overflows by a lot: {count}");
    for cap in [
        0,
        1,
        4095,
        4096,
        4097,
        count / 2,
        count - 1,
        count,
        count + 1,
    ] {
        let got = check_threshold::<T, i32, _>(s, topk, &grad, &host, t, cap, "capacity");
        assert_eq!(got, count as u64, "the true count, whatever the capacity");
    }
    // 0 or less takes everything; NaN is refused and writes nothing.
    for t in [0.0, -0.0, -1.0, f32::NEG_INFINITY] {
        check_threshold::<T, i32, _>(s, topk, &grad, &host, t, n + 2, "t <= 0");
    }
    let mut out = output::<T, i32>(s, 10);
    let err = topk.threshold(&grad, f32::NAN, &mut out, s).unwrap_err();
    assert!(matches!(err, Error::InvalidThreshold { .. }), "{err}");
    assert_eq!(out.to_host(s).unwrap().count, COUNT_POISON);
}

gpu_test!(
    1,
    threshold_over_capacity_keeps_the_largest_magnitudes_and_the_count
);
fn threshold_over_capacity_keeps_the_largest_magnitudes_and_the_count() {
    let nv = runtime(1);
    let s = nv.stream().clone();
    let mut topk = TopK::new(&s, 1_000_001).unwrap();
    threshold_overflow::<f32>(&s, &mut topk);
    threshold_overflow::<bf16>(&s, &mut topk);
}

/// Indexes of 0..universe taken with probability p (and only those with `parity` when
/// given), with spread values.
fn random_set<T: Value, I: Index>(
    universe: usize,
    p: f64,
    parity: Option<usize>,
    seed: u64,
) -> HostSparse<T, I> {
    let mut r = Rng(seed);
    let idx: Vec<usize> = (0..universe)
        .filter(|&i| parity.is_none_or(|q| i % 2 == q) && (r.unit() as f64) < p)
        .collect();
    let val = values(spread(idx.len(), seed + 1));
    HostSparse {
        count: idx.len() as u64,
        idx: idx.into_iter().map(I::from_index).collect(),
        val,
    }
}

fn device_set<T: Value, I: Index>(s: &Arc<CudaStream>, h: &HostSparse<T, I>) -> SparseSet<T, I> {
    SparseSet::from_host(s, &h.idx, &h.val).unwrap()
}

fn check_merge<T: Value, I: Index>(
    s: &Arc<CudaStream>,
    merge: &mut SparseMerge,
    (a, ha): (&SparseSet<T, I>, &HostSparse<T, I>),
    (b, hb): (&SparseSet<T, I>, &HostSparse<T, I>),
    capacity: Option<usize>,
    what: &str,
) {
    let union = reference::merge(ha, hb, usize::MAX).count as usize;
    let cap = capacity.unwrap_or(union + 3);
    let mut out = output::<T, I>(s, cap);
    merge.run(a, b, &mut out, s).unwrap();
    let what = format!(
        "merge {what}: {} and {} pairs of {} ({}), capacity {cap}",
        ha.idx.len(),
        hb.idx.len(),
        T::NAME,
        I::NAME
    );
    expect_set(&what, &out, &reference::merge(ha, hb, cap), s);
}

fn merges<T: Value, I: Index>(s: &Arc<CudaStream>, merge: &mut SparseMerge) {
    let cases: [(&str, usize, f64, f64, bool); 6] = [
        ("overlapping, small", 1000, 0.3, 0.3, false),
        ("overlapping, skewed", 100_000, 0.1, 0.5, false),
        ("overlapping, large", 4_000_000, 0.25, 0.25, false),
        ("sparse in a large range", 2_000_000, 0.001, 0.05, false),
        ("disjoint", 100_000, 0.4, 0.4, true),
        ("disjoint, large", 2_000_000, 0.5, 0.5, true),
    ];
    for (what, universe, pa, pb, disjoint) in cases {
        let seed = universe as u64;
        let ha = random_set::<T, I>(universe, pa, disjoint.then_some(0), seed);
        let hb = random_set::<T, I>(universe, pb, disjoint.then_some(1), seed + 10);
        let (a, b) = (device_set(s, &ha), device_set(s, &hb));
        check_merge(s, merge, (&a, &ha), (&b, &hb), None, what);
        check_merge(s, merge, (&b, &hb), (&a, &ha), None, what);
        // The same set twice: every value doubled.
        check_merge(s, merge, (&a, &ha), (&a, &ha), None, "with itself");
        // Over capacity: the lowest indexes, and the true count.
        let union = reference::merge(&ha, &hb, usize::MAX).count as usize;
        for cap in [0, 1, union / 2, union - 1] {
            check_merge(s, merge, (&a, &ha), (&b, &hb), Some(cap), "over capacity");
        }
    }
    // Empty sets, with and without room.
    let h = random_set::<T, I>(10_000, 0.2, None, 5);
    let a = device_set(s, &h);
    let empty_h = HostSparse::empty();
    for room in [0, 100] {
        let mut empty = SparseSet::<T, I>::new(s, room).unwrap();
        empty.set_count(s, 0).unwrap();
        check_merge(
            s,
            merge,
            (&a, &h),
            (&empty, &empty_h),
            None,
            "with an empty set",
        );
        check_merge(
            s,
            merge,
            (&empty, &empty_h),
            (&a, &h),
            None,
            "with an empty set",
        );
        check_merge(
            s,
            merge,
            (&empty, &empty_h),
            (&empty, &empty_h),
            None,
            "of empty sets",
        );
    }
    // A subset, and an input whose count ran past its capacity (an overflowed threshold).
    let sub_idx: Vec<I> = h.idx.iter().step_by(3).copied().collect();
    let sub = HostSparse {
        count: sub_idx.len() as u64,
        val: values(spread(sub_idx.len(), 8)),
        idx: sub_idx,
    };
    let sub_d = device_set(s, &sub);
    check_merge(s, merge, (&a, &h), (&sub_d, &sub), None, "with a subset");
    let mut over = device_set(s, &h);
    over.set_count(s, h.idx.len() as u64 + 7).unwrap();
    let over_h = HostSparse {
        count: h.idx.len() as u64 + 7,
        ..h.clone()
    };
    check_merge(
        s,
        merge,
        (&over, &over_h),
        (&sub_d, &sub),
        None,
        "count past capacity",
    );
}

gpu_test!(1, merge_overlapping_disjoint_empty_and_over_capacity);
fn merge_overlapping_disjoint_empty_and_over_capacity() {
    let nv = runtime(1);
    let s = nv.stream().clone();
    let mut merge = SparseMerge::new(&s, 2_000_000).unwrap();
    merges::<f32, i32>(&s, &mut merge);
    merges::<bf16, i32>(&s, &mut merge);
    merges::<f32, i64>(&s, &mut merge);
    merges::<bf16, i64>(&s, &mut merge);
}

fn scatter<T: Value, I: Index>(s: &Arc<CudaStream>) {
    let n = 1000;
    let mut r = Rng(42);
    // Repeats: small integers, so every partial sum is exact in any order (|sum| < 256 for
    // bf16: about 50 adds of -1, 0 or 1 per index, onto values from -4 to 4).
    let init: Vec<T> = (0..n).map(|i| T::of((i % 9) as f32 - 4.0)).collect();
    let pairs = 50_000;
    let mut idx: Vec<I> = (0..pairs)
        .map(|_| I::from_index(r.below(n as u64) as usize))
        .collect();
    let mut val: Vec<T> = (0..pairs).map(|_| T::of(r.below(3) as f32 - 1.0)).collect();
    // Indexes outside the dense buffer are skipped.
    for (j, bad) in [
        (0usize, -1i64),
        (10, -5),
        (20, n as i64),
        (30, n as i64 + 100),
    ] {
        idx[j] = I::from_index(bad as usize);
        val[j] = T::of(1000.0);
    }
    let h = HostSparse {
        count: pairs as u64,
        idx,
        val,
    };
    let set = device_set(s, &h);
    let mut dense = s.clone_htod(&init).unwrap();
    scatter_add(&set, &mut dense, s).unwrap();
    let mut want = init.clone();
    reference::scatter_add(&mut want, &h);
    expect_dense(
        "scatter-add with repeats",
        &s.clone_dtoh(&dense).unwrap(),
        &want,
    );

    // No repeats, spread values onto spread values: each element gets one add, so the GPU's
    // rounding equals the reference's whatever the order. Into a symmetric buffer too.
    let big = 1_000_001;
    let h = random_set::<T, I>(big, 0.1, None, 3);
    let set = device_set(s, &h);
    let init: Vec<T> = values(spread(big, 4));
    let mut dense = s.clone_htod(&init).unwrap();
    scatter_add(&set, &mut dense, s).unwrap();
    let mut want = init.clone();
    reference::scatter_add(&mut want, &h);
    expect_dense(
        "scatter-add of a set",
        &s.clone_dtoh(&dense).unwrap(),
        &want,
    );

    // Only the pairs held count: a count past the capacity adds the capacity's pairs, a count
    // of 0 adds nothing.
    let mut set = device_set(s, &h);
    set.set_count(s, h.idx.len() as u64 + 1000).unwrap();
    let mut dense = s.clone_htod(&init).unwrap();
    scatter_add(&set, &mut dense, s).unwrap();
    expect_dense("count past capacity", &s.clone_dtoh(&dense).unwrap(), &want);
    set.set_count(s, 0).unwrap();
    scatter_add(&set, &mut dense, s).unwrap();
    expect_dense("count 0", &s.clone_dtoh(&dense).unwrap(), &want);
}

fn expect_dense<T: Value>(what: &str, got: &[T], want: &[T]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.to_bits64() == w.to_bits64(),
            "{what} ({}): element {i} is {g:?}, want {w:?}",
            T::NAME
        );
    }
}

gpu_test!(1, scatter_add_with_repeats_and_outside_indexes);
fn scatter_add_with_repeats_and_outside_indexes() {
    let nv = runtime(1);
    let s = nv.stream().clone();
    scatter::<f32, i32>(&s);
    scatter::<bf16, i32>(&s);
    scatter::<f32, i64>(&s);
    scatter::<bf16, i64>(&s);
    // Into symmetric memory: any DevicePtrMut is a dense target.
    let h = random_set::<f32, i32>(5000, 0.3, None, 9);
    let set = device_set(&s, &h);
    let mut sym = nv.alloc_zeroed::<f32>(5000).unwrap();
    scatter_add(&set, &mut sym, &s).unwrap();
    let mut want = vec![0.0f32; 5000];
    reference::scatter_add(&mut want, &h);
    expect_dense(
        "scatter-add into symmetric memory",
        &sym.to_vec().unwrap(),
        &want,
    );
}

gpu_test!(1, selection_merge_and_scatter_queue_without_host_reads);
fn selection_merge_and_scatter_queue_without_host_reads() {
    let nv = runtime(1);
    let s = nv.stream().clone();
    let n = 1_000_001;
    let (g1, g2): (Vec<f32>, Vec<f32>) = (spread(n, 1), spread(n, 2));
    let (d1, d2) = (s.clone_htod(&g1).unwrap(), s.clone_htod(&g2).unwrap());
    let mut topk = TopK::new(&s, n).unwrap();
    let mut merge = SparseMerge::new(&s, 20_000).unwrap();
    let (k, t) = (10_000, 2f32.powi(8));
    // Everything enqueued back to back; the host reads only at the end.
    let mut a = output::<f32, i32>(&s, k);
    let mut b = output::<f32, i32>(&s, 20_000);
    let mut u = output::<f32, i32>(&s, 40_000);
    let mut dense = s.clone_htod(&vec![0.0f32; n]).unwrap();
    topk.run(&d1, k, &mut a, &s).unwrap();
    topk.threshold(&d2, t, &mut b, &s).unwrap();
    merge.run(&a, &b, &mut u, &s).unwrap();
    scatter_add(&u, &mut dense, &s).unwrap();
    let ha = reference::topk::<f32, i32>(&g1, k);
    let hb = reference::threshold::<f32, i32>(&g2, t, 20_000);
    let hu = reference::merge(&ha, &hb, 40_000);
    let mut want = vec![0.0f32; n];
    reference::scatter_add(&mut want, &hu);
    expect_dense(
        "the chain's dense result",
        &s.clone_dtoh(&dense).unwrap(),
        &want,
    );
    expect_set("the chain's top-k", &a, &ha, &s);
    expect_set("the chain's threshold", &b, &hb, &s);
    expect_set("the chain's merge", &u, &hu, &s);
}

gpu_test!(1, sparse_arguments_are_checked_before_any_kernel);
fn sparse_arguments_are_checked_before_any_kernel() {
    let nv = runtime(1);
    let s = nv.stream().clone();
    let host = spread(1000, 3);
    let grad = s.clone_htod(&host).unwrap();
    let mut topk = TopK::new(&s, 999).unwrap();
    let mut out = output::<f32, i32>(&s, 10);
    let err = topk.run(&grad, 5, &mut out, &s).unwrap_err();
    assert!(
        matches!(
            err,
            Error::WorkspaceTooSmall {
                len: 1000,
                max_len: 999,
                ..
            }
        ),
        "{err}"
    );
    let mut topk = TopK::new(&s, 1000).unwrap();
    let err = topk.run(&grad, 11, &mut out, &s).unwrap_err();
    assert!(
        matches!(
            err,
            Error::SparseCapacity {
                needed: 11,
                capacity: 10,
                ..
            }
        ),
        "{err}"
    );
    let err = topk.threshold(&grad, f32::NAN, &mut out, &s).unwrap_err();
    assert!(matches!(err, Error::InvalidThreshold { .. }), "{err}");
    // Refused calls left the output as it was.
    let still = out.to_host(&s).unwrap();
    assert_eq!(still.count, COUNT_POISON);
    assert!(still.idx.iter().all(|&i| i == i32::POISON));
    let mut merge = SparseMerge::new(&s, 10).unwrap();
    let big = SparseSet::<f32, i32>::new(&s, 11).unwrap();
    let err = merge.run(&big, &out, &mut output(&s, 30), &s).unwrap_err();
    assert!(
        matches!(
            err,
            Error::WorkspaceTooSmall {
                len: 11,
                max_len: 10,
                ..
            }
        ),
        "{err}"
    );
    let err = SparseSet::<f32, i32>::from_host(&s, &[1, 2], &[1.0])
        .err()
        .unwrap();
    assert!(matches!(err, Error::LengthMismatch { .. }), "{err}");
}

gpu_test!(1, topk_timing_64m_f32_informational);
fn topk_timing_64m_f32_informational() {
    let nv = runtime(1);
    let s = nv.stream().clone();
    let n = 64 << 20;
    let k = k_of(n, 0.01);
    let host = spread(n, 64);
    let grad = s.clone_htod(&host).unwrap();
    let mut topk = TopK::new(&s, n).unwrap();
    let mut out = output::<f32, i32>(&s, k);
    // Checked once, like every other case.
    topk.run(&grad, k, &mut out, &s).unwrap();
    expect_set(
        "64M top-k",
        &out,
        &reference::topk::<f32, i32>(&host, k),
        &s,
    );
    let timed = |what: &str, f: &mut dyn FnMut()| {
        f(); // warm
        let iters = 20;
        let start = s
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .unwrap();
        for _ in 0..iters {
            f();
        }
        let stop = s
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .unwrap();
        let ms = start.elapsed_ms(&stop).unwrap() / iters as f32;
        let gbs = (n * 4) as f64 / (ms as f64 * 1e-3) / 1e9;
        // Straight to the stdout handle: libtest captures print!, and the script shows this.
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(
            stdout,
            "\ninformational: {what} of {n} f32 (k = {k}): {ms:.3} ms per call (mean of \
             {iters}; {gbs:.0} GB/s of gradient per call)"
        );
    };
    timed("top-k 1%", &mut || {
        topk.run(&grad, k, &mut out, &s).unwrap();
    });
    let t = out
        .to_host(&s)
        .unwrap()
        .val
        .iter()
        .map(|v| v.abs())
        .fold(f32::MAX, f32::min);
    let mut th = output::<f32, i32>(&s, 2 * k);
    let mut topk2 = TopK::new(&s, n).unwrap();
    timed("threshold at the 1% value", &mut || {
        topk2.threshold(&grad, t, &mut th, &s).unwrap();
    });
}
