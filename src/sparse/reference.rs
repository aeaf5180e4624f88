//! The CPU reference of the sparse kernels, exact and plain, for tests: top-k by magnitude
//! (ties to the lower index), threshold compaction, merge and scatter-add, and of the sparse
//! allreduce: the Gaussian threshold, gTop-k's tree and its included pairs. The magnitude order
//! is written here without the kernels' bit tricks: NaN above every number, else |v| compared
//! as f64 (exact for f32 and bf16), so -0 equals +0.

use super::set::HostSparse;
use super::{SparseIndex, SparseValue};
use std::cmp::Ordering;

/// `a`'s magnitude against `b`'s: NaN above every number and equal to every NaN.
pub fn magnitude_cmp<T: SparseValue>(a: T, b: T) -> Ordering {
    match (a.is_nan_value(), b.is_nan_value()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        // abs() of -0 is +0, so total_cmp sees the two zeros alike.
        (false, false) => a.to_f64().abs().total_cmp(&b.to_f64().abs()),
    }
}

/// The `min(k, g.len())` elements of largest magnitude, ties to the lower index, sorted by
/// index; the count is their number.
pub fn topk<T: SparseValue, I: SparseIndex>(g: &[T], k: usize) -> HostSparse<T, I> {
    let take = k.min(g.len());
    let mut order: Vec<usize> = (0..g.len()).collect();
    // Larger magnitude first, then lower index: a total order, so the first `take` after the
    // partition are exactly the top k.
    let before = |&a: &usize, &b: &usize| magnitude_cmp(g[b], g[a]).then(a.cmp(&b));
    if take > 0 && take < g.len() {
        order.select_nth_unstable_by(take - 1, before);
    }
    order.truncate(take);
    order.sort_unstable();
    pairs(g, &order, take as u64)
}

/// Every element with |g| >= t (compared in f64, exact; NaN always selected), sorted by index;
/// the count is their number, the pairs the first `capacity` of them. `t` must not be NaN.
pub fn threshold<T: SparseValue, I: SparseIndex>(
    g: &[T],
    t: f32,
    capacity: usize,
) -> HostSparse<T, I> {
    assert!(!t.is_nan(), "the reference takes no NaN threshold");
    let chosen: Vec<usize> = (0..g.len())
        .filter(|&i| g[i].is_nan_value() || g[i].to_f64().abs() >= t as f64)
        .collect();
    let count = chosen.len() as u64;
    pairs(g, &chosen[..chosen.len().min(capacity)], count)
}

fn pairs<T: SparseValue, I: SparseIndex>(g: &[T], at: &[usize], count: u64) -> HostSparse<T, I> {
    HostSparse {
        count,
        idx: at.iter().map(|&i| I::from_index(i)).collect(),
        val: at.iter().map(|&i| g[i]).collect(),
    }
}

/// The union of the pairs `a` and `b` hold (each sorted by index, no repeats), values added
/// ([`SparseValue::sparse_add`], a's first) where both hold an index; the count is the union's
/// size, the pairs the first `capacity` of it.
pub fn merge<T: SparseValue, I: SparseIndex>(
    a: &HostSparse<T, I>,
    b: &HostSparse<T, I>,
    capacity: usize,
) -> HostSparse<T, I> {
    let (mut i, mut j) = (0, 0);
    let mut out = HostSparse::empty();
    let push = |out: &mut HostSparse<T, I>, idx: I, val: T| {
        if out.idx.len() < capacity {
            out.idx.push(idx);
            out.val.push(val);
        }
        out.count += 1;
    };
    while i < a.idx.len() || j < b.idx.len() {
        let take_a = j == b.idx.len() || (i < a.idx.len() && a.idx[i] <= b.idx[j]);
        let take_b = i == a.idx.len() || (j < b.idx.len() && b.idx[j] <= a.idx[i]);
        match (take_a, take_b) {
            (true, true) => {
                push(&mut out, a.idx[i], a.val[i].sparse_add(b.val[j]));
                i += 1;
                j += 1;
            }
            (true, false) => {
                push(&mut out, a.idx[i], a.val[i]);
                i += 1;
            }
            _ => {
                push(&mut out, b.idx[j], b.val[j]);
                j += 1;
            }
        }
    }
    out
}

/// `dense[idx[j]] += val[j]` ([`SparseValue::sparse_add`]) for the pairs `set` holds, in order;
/// indexes outside `dense` skipped.
pub fn scatter_add<T: SparseValue, I: SparseIndex>(dense: &mut [T], set: &HostSparse<T, I>) {
    for (&i, &v) in set.idx.iter().zip(&set.val) {
        let i = i.to_i64();
        if i >= 0 && (i as u64) < dense.len() as u64 {
            dense[i as usize] = dense[i as usize].sparse_add(v);
        }
    }
}

/// The pairs of `set` as a dense vector over their positions, for top-k over a set's values.
fn topk_of_set<T: SparseValue, I: SparseIndex>(
    set: &HostSparse<T, I>,
    k: usize,
) -> HostSparse<T, I> {
    let at: HostSparse<T, i64> = topk(&set.val, k);
    HostSparse {
        count: at.count,
        idx: at.idx.iter().map(|&j| set.idx[j as usize]).collect(),
        val: at.val,
    }
}

/// Phi^-1(p) for 0 < p < 1: Acklam's rational approximation (relative error below 1.2e-9).
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    const LOW: f64 = 0.02425;
    if p < LOW {
        tail((-2.0 * p.ln()).sqrt())
    } else if p <= 1.0 - LOW {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    }
}

/// GaussianK's z for `density` in (0, 1]: a Gaussian holds that share of its mass at least z
/// standard deviations from its mean (0 for density 1).
pub fn gaussian_z(density: f64) -> f64 {
    if density >= 1.0 {
        0.0
    } else {
        normal_quantile(1.0 - density / 2.0)
    }
}

/// GaussianK's threshold of `g` at `density`: |mean| + z x std (population std, from f64
/// sums), rounded to f32 and at least the smallest positive f32 (zeros are never worth
/// sending); +infinity when a sum is not finite (a NaN or infinity in g), which selects only
/// those. The device adds in another order: equal within rounding.
pub fn gaussian_threshold<T: SparseValue>(g: &[T], density: f64) -> f32 {
    let n = g.len() as f64;
    let (s, q) = g.iter().fold((0.0, 0.0), |(s, q), v| {
        let x = v.to_f64();
        (s + x, q + x * x)
    });
    let mean = s / n;
    let var = (q / n - mean * mean).max(0.0);
    let t = mean.abs() + gaussian_z(density) * var.sqrt();
    if !t.is_finite() {
        return f32::INFINITY;
    }
    (t as f32).max(f32::from_bits(1))
}

/// gTop-k's tree over the members' local top-k sets (`local[r]`: member r's): in rounds of
/// step 1, 2, 4, ..., member r with r % 2step == 0 merges r + step's set into its own (union,
/// values added, receiver's first) and keeps the top k of the union (ties to the lower
/// index); the result is member 0's set.
pub fn gtopk<T: SparseValue, I: SparseIndex>(
    local: &[HostSparse<T, I>],
    k: usize,
) -> HostSparse<T, I> {
    let mut sets = local.to_vec();
    let p = sets.len();
    let mut step = 1;
    while step < p {
        for r in (0..p).step_by(2 * step) {
            if r + step < p {
                let u = merge(&sets[r], &sets[r + step], usize::MAX);
                sets[r] = topk_of_set(&u, k);
            }
        }
        step *= 2;
    }
    sets.into_iter().next().unwrap_or_else(HostSparse::empty)
}

/// The pairs of `mine` whose index `global` holds, in `mine`'s order.
pub fn included<T: SparseValue, I: SparseIndex>(
    mine: &HostSparse<T, I>,
    global: &HostSparse<T, I>,
) -> HostSparse<T, I> {
    let keep: Vec<usize> = (0..mine.idx.len())
        .filter(|&j| global.idx.binary_search(&mine.idx[j]).is_ok())
        .collect();
    HostSparse {
        count: keep.len() as u64,
        idx: keep.iter().map(|&j| mine.idx[j]).collect(),
        val: keep.iter().map(|&j| mine.val[j]).collect(),
    }
}

/// The dense sum over `n` elements of the pairs of `sets`, in order ([`scatter_add`]).
pub fn sparse_sum<T: SparseValue, I: SparseIndex>(n: usize, sets: &[HostSparse<T, I>]) -> Vec<T> {
    let mut dense = vec![T::of_f32(0.0); n];
    for s in sets {
        scatter_add(&mut dense, s);
    }
    dense
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    fn set(idx: &[i32], val: &[f32]) -> HostSparse<f32, i32> {
        HostSparse {
            count: idx.len() as u64,
            idx: idx.to_vec(),
            val: val.to_vec(),
        }
    }

    fn same(got: &HostSparse<f32, i32>, want: &HostSparse<f32, i32>) {
        assert_eq!(got.difference(want), None, "got {got:?}, want {want:?}");
    }

    #[test]
    fn topk_breaks_ties_by_the_lower_index() {
        let g = [1.0, -3.0, 3.0, 2.0, -3.0, 0.0];
        same(&topk(&g, 2), &set(&[1, 2], &[-3.0, 3.0]));
        same(&topk(&g, 3), &set(&[1, 2, 4], &[-3.0, 3.0, -3.0]));
        same(&topk(&g, 4), &set(&[1, 2, 3, 4], &[-3.0, 3.0, 2.0, -3.0]));
    }

    #[test]
    fn topk_of_zero_and_of_at_least_n() {
        let g = [0.5f32, -2.0, 1.0];
        same(&topk(&g, 0), &set(&[], &[]));
        let all = set(&[0, 1, 2], &g);
        same(&topk(&g, 3), &all);
        same(&topk(&g, 10), &all);
        same(&topk::<f32, i32>(&[], 4), &set(&[], &[]));
    }

    #[test]
    fn topk_of_equal_magnitudes_takes_the_lowest_indexes() {
        let g: Vec<f32> = (0..10)
            .map(|i| if i % 2 == 0 { 0.5 } else { -0.5 })
            .collect();
        same(&topk(&g, 4), &set(&[0, 1, 2, 3], &g[..4]));
        let zeros = [0.0f32, -0.0, 0.0, -0.0];
        let got = topk::<f32, i32>(&zeros, 2);
        same(&got, &set(&[0, 1], &[0.0, -0.0]));
        assert!(
            got.val[1].is_sign_negative(),
            "the value is copied bit for bit"
        );
    }

    #[test]
    fn topk_orders_by_magnitude_not_by_value() {
        same(&topk(&[-5.0f32, 1.0, 2.0], 1), &set(&[0], &[-5.0]));
        same(
            &topk(&[-1.0f32, -2.0, 0.5, -0.25], 2),
            &set(&[0, 1], &[-1.0, -2.0]),
        );
    }

    #[test]
    fn topk_takes_signed_zeros_as_equal() {
        let g = [0.0f32, -0.0, 0.0, 1.0];
        let got = topk::<f32, i32>(&g, 3);
        same(&got, &set(&[0, 1, 3], &[0.0, -0.0, 1.0]));
        // -0 against +0 by bits: the comparison sees the sign.
        assert!(got.difference(&set(&[0, 1, 3], &[0.0, 0.0, 1.0])).is_some());
    }

    #[test]
    fn topk_puts_nan_above_infinity() {
        let g = [f32::INFINITY, f32::NAN, f32::NEG_INFINITY, 1.0, f32::NAN];
        let one = topk::<f32, i32>(&g, 1);
        assert_eq!(one.idx, [1]);
        assert_eq!(topk::<f32, i32>(&g, 2).idx, [1, 4]);
        assert_eq!(topk::<f32, i32>(&g, 3).idx, [0, 1, 4]);
        let h: Vec<bf16> = g.iter().map(|&v| bf16::from_f32(v)).collect();
        assert_eq!(topk::<bf16, i64>(&h, 4).idx, [0, 1, 2, 4]);
    }

    #[test]
    fn threshold_takes_at_or_above_and_counts_past_capacity() {
        let g = [0.5f32, -1.0, 1.0, 2.0, f32::NAN, 0.999];
        let got = threshold::<f32, i32>(&g, 1.0, 2);
        assert_eq!((got.count, got.idx.as_slice()), (4, &[1, 2][..]));
        let got = threshold::<f32, i32>(&g, 1.0, 10);
        assert_eq!((got.count, got.idx.as_slice()), (4, &[1, 2, 3, 4][..]));
        let got = threshold::<f32, i32>(&g, 1.0, 0);
        assert_eq!((got.count, got.idx.len()), (4, 0));
        let got = threshold::<f32, i32>(&g, f32::INFINITY, 10);
        assert_eq!(got.idx, [4]);
    }

    #[test]
    fn threshold_of_zero_or_below_takes_every_element() {
        let g = [0.0f32, -0.0, 1.0, f32::NAN];
        for t in [0.0, -0.0, -1.0, f32::NEG_INFINITY] {
            let got = threshold::<f32, i32>(&g, t, 10);
            assert_eq!(got.idx, [0, 1, 2, 3], "t = {t}");
        }
    }

    #[test]
    fn threshold_compares_bf16_in_f32() {
        // 1 + 2^-7 is the bf16 after 1; a threshold between them takes only the larger.
        let g = [bf16::from_f32(1.0), bf16::from_f32(-1.0078125)];
        assert_eq!(threshold::<bf16, i32>(&g, 1.004, 10).idx, [1]);
        assert_eq!(threshold::<bf16, i32>(&g, 1.0, 10).idx, [0, 1]);
    }

    #[test]
    fn merge_unites_by_index_and_adds_where_both_hold_one() {
        let a = set(&[1, 4, 7], &[1.0, 2.0, 3.0]);
        let b = set(&[0, 4, 9], &[10.0, 20.0, 30.0]);
        let want = set(&[0, 1, 4, 7, 9], &[10.0, 1.0, 22.0, 3.0, 30.0]);
        same(&merge(&a, &b, 10), &want);
        same(&merge(&b, &a, 10), &want);
        let disjoint = merge(&set(&[0, 2], &[1.0, 2.0]), &set(&[1, 3], &[3.0, 4.0]), 10);
        same(&disjoint, &set(&[0, 1, 2, 3], &[1.0, 3.0, 2.0, 4.0]));
        let empty = set(&[], &[]);
        same(&merge(&a, &empty, 10), &a);
        same(&merge(&empty, &b, 10), &b);
        same(&merge(&empty, &empty, 10), &empty);
        let over = merge(&a, &b, 2);
        assert_eq!((over.count, over.idx.as_slice()), (5, &[0, 1][..]));
    }

    #[test]
    fn bf16_adds_round_once_to_nearest_even() {
        let v = |x: f32| bf16::from_f32(x);
        // Half an ulp above 1 (ulp 2^-7): a tie, to the even 1.
        assert_eq!(v(1.0).sparse_add(v(1.0 / 256.0)), v(1.0));
        // Half an ulp above 1 + 2^-7 (odd): up to 1 + 2^-6.
        assert_eq!(v(1.0078125).sparse_add(v(1.0 / 256.0)), v(1.015625));
        let a = HostSparse::<bf16, i32> {
            count: 1,
            idx: vec![3],
            val: vec![v(1.0078125)],
        };
        let b = HostSparse {
            val: vec![v(1.0 / 256.0)],
            ..a.clone()
        };
        assert_eq!(merge(&a, &b, 1).val, [v(1.015625)]);
    }

    #[test]
    fn scatter_add_sums_repeats_and_skips_outside_indexes() {
        let mut dense = [0.5f32; 5];
        let s = set(
            &[1, 3, 1, 1, 7, -1, 4],
            &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, -0.5],
        );
        scatter_add(&mut dense, &s);
        assert_eq!(dense, [0.5, 8.5, 0.5, 2.5, 0.0]);
    }

    #[test]
    fn the_normal_quantile_matches_known_values() {
        for (p, z) in [
            (0.5, 0.0),
            (0.975, 1.959_963_984_540_054),
            (0.995, 2.575_829_303_548_901),
            (0.9995, 3.290_526_731_491_926),
            (0.025, -1.959_963_984_540_054),
            (0.01, -2.326_347_874_040_841),
        ] {
            let got = normal_quantile(p);
            assert!((got - z).abs() < 1e-8, "p = {p}: {got} against {z}");
        }
        assert!((gaussian_z(0.01) - 2.575_829_303_548_901).abs() < 1e-8);
        assert_eq!(gaussian_z(1.0), 0.0);
    }

    #[test]
    fn the_gaussian_threshold_is_mean_plus_z_std_and_never_zero() {
        // mean 0, std 2: 2 z.
        let g = [2.0f32, -2.0, 2.0, -2.0];
        let t = gaussian_threshold(&g, 0.05);
        assert!((t as f64 - 2.0 * 1.959_963_984_540_054).abs() < 1e-5, "{t}");
        // mean -1, std 0: |mean|.
        assert_eq!(gaussian_threshold(&[-1.0f32; 5], 0.1), 1.0);
        // All zeros: the smallest positive f32, which takes no zero.
        let zeros = [0.0f32, -0.0, 0.0];
        let t = gaussian_threshold(&zeros, 0.5);
        assert_eq!(t, f32::from_bits(1));
        assert_eq!(threshold::<f32, i32>(&zeros, t, 3).count, 0);
        assert_eq!(gaussian_threshold(&[1.0f32, f32::NAN], 0.1), f32::INFINITY);
        assert_eq!(
            gaussian_threshold(&[1.0f32, f32::INFINITY], 0.1),
            f32::INFINITY
        );
    }

    #[test]
    fn gtopk_merges_in_a_tree_and_keeps_the_top_k() {
        let a = set(&[0, 5], &[4.0, 1.0]);
        let b = set(&[5, 7], &[2.0, -3.0]);
        let c = set(&[1, 2], &[1.0, 1.0]);
        // One member: its own set.
        same(&gtopk(std::slice::from_ref(&a), 2), &a);
        // Two: union {0: 4, 5: 3, 7: -3}; top 2 by magnitude, ties to the lower index.
        same(
            &gtopk(&[a.clone(), b.clone()], 2),
            &set(&[0, 5], &[4.0, 3.0]),
        );
        // Three: round 1 merges 0 and 1 (2 idles), round 2 merges {0, 5} with c.
        same(
            &gtopk(&[a.clone(), b.clone(), c.clone()], 2),
            &set(&[0, 5], &[4.0, 3.0]),
        );
        same(
            &gtopk(&[c.clone(), a.clone(), b.clone()], 2),
            &set(&[0, 7], &[4.0, -3.0]),
        );
        // Four: (a + b) against (c + a).
        let four = gtopk(&[a.clone(), b, c, a], 3);
        same(&four, &set(&[0, 5, 7], &[8.0, 3.0, -3.0]));
    }

    #[test]
    fn included_pairs_are_mine_whose_index_is_global() {
        let mine = set(&[1, 3, 5, 9], &[1.0, 2.0, 3.0, 4.0]);
        let global = set(&[0, 3, 9], &[7.0, 7.0, 7.0]);
        same(&included(&mine, &global), &set(&[3, 9], &[2.0, 4.0]));
        same(&included(&mine, &set(&[], &[])), &set(&[], &[]));
    }

    #[test]
    fn sparse_sums_add_every_set() {
        let got = sparse_sum(4, &[set(&[0, 2], &[1.0, 2.0]), set(&[2, 3], &[3.0, 4.0])]);
        assert_eq!(got, [1.0, 0.0, 5.0, 4.0]);
    }

    #[test]
    fn host_sets_compare_values_by_bits() {
        let nan = set(&[0], &[f32::NAN]);
        assert_eq!(nan.difference(&nan.clone()), None);
        assert!(set(&[0], &[0.0]).difference(&set(&[0], &[-0.0])).is_some());
        assert!(set(&[0], &[1.0]).difference(&set(&[1], &[1.0])).is_some());
        let mut more = set(&[0], &[1.0]);
        more.count = 2;
        assert!(more.difference(&set(&[0], &[1.0])).is_some());
    }
}
