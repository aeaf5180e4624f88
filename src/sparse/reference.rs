//! The CPU reference of the sparse kernels, exact and plain, for tests: top-k by magnitude
//! (ties to the lower index), threshold compaction, merge and scatter-add, and of the sparse
//! allreduce: the Gaussian threshold, gTop-k's tree and its included pairs, and Ok-Topk's
//! threshold estimate, index regions, throttled exchange and reduce per region. The magnitude order
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
/// the count is their number. Past `capacity` the pairs are the `capacity` of largest magnitude
/// among them (ties to the lower index: the top `capacity` of `g`, which all pass `t`), sorted
/// by index, never the lowest indexes. `t` must not be NaN.
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
    if chosen.len() <= capacity {
        return pairs(g, &chosen, count);
    }
    HostSparse {
        count,
        ..topk(g, capacity)
    }
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
/// those. The device adds in another order: equal within rounding. Without the count
/// correction ([`gaussian_corrected_threshold`]).
pub fn gaussian_threshold<T: SparseValue>(g: &[T], density: f64) -> f32 {
    as_threshold(gaussian_fit(g, density))
}

/// |mean| + z x std of `g` in f64, before rounding.
fn gaussian_fit<T: SparseValue>(g: &[T], density: f64) -> f64 {
    let n = g.len() as f64;
    let (s, q) = g.iter().fold((0.0, 0.0), |(s, q), v| {
        let x = v.to_f64();
        (s + x, q + x * x)
    });
    let mean = s / n;
    let var = (q / n - mean * mean).max(0.0);
    mean.abs() + gaussian_z(density) * var.sqrt()
}

/// DGC's local gradient clipping (Lin et al., ICLR 2018), as `nvshmemrs_sparse_clip_factor`:
/// `max_norm / ||g||_2` rounded to f32 where the norm is finite and above `max_norm`, else 1.
/// The sum of squares in f64 (the device adds in another order: equal where the sum is exact,
/// as for integer data), the square root and the quotient correctly rounded.
pub fn clip_factor<T: SparseValue>(g: &[T], max_norm: f64) -> f32 {
    let q = g.iter().fold(0.0f64, |q, v| {
        let x = v.to_f64();
        q + x * x
    });
    let norm = q.sqrt();
    if norm.is_finite() && norm > max_norm {
        (max_norm / norm) as f32
    } else {
        1.0
    }
}

/// `g` clipped by `factor` as `nvshmemrs_sparse_clip_apply` writes it: each value times the
/// factor in f32, rounded once to T.
pub fn clip_scaled<T: SparseValue>(g: &[T], factor: f32) -> Vec<T> {
    g.iter()
        .map(|&v| T::of_f32(v.to_f64() as f32 * factor))
        .collect()
}

/// A threshold as the selections take it: rounded to f32, +infinity where not finite, at least
/// the smallest positive f32.
pub fn as_threshold(t: f64) -> f32 {
    if !t.is_finite() {
        return f32::INFINITY;
    }
    (t as f32).max(f32::from_bits(1))
}

/// GaussianK's count correction: the threshold is divided by this while too few are selected.
pub const GAUSSIAN_SHRINK: f64 = 1.012;
/// GaussianK's count correction: at most this many divisions.
pub const GAUSSIAN_STEPS: usize = 50;

/// The fewest pairs GaussianK's count correction accepts for `k`: 3k/4 (rounded down).
pub fn gaussian_need(k: usize) -> usize {
    3 * k / 4
}

/// GaussianK's threshold with the seed's count correction: with t_0 the Gaussian fit's value
/// in f64 ([`gaussian_threshold`] before rounding) and t_j = t_{j-1} / 1.012, the first t_j
/// (j < 50), rounded as [`gaussian_threshold`], at which at least [`gaussian_need`]`(k)`
/// elements have |g| >= t_j (NaN always counts), else t_50. The seed compares |g| > t; here
/// |g| >= t, as every threshold of this crate.
pub fn gaussian_corrected_threshold<T: SparseValue>(g: &[T], density: f64, k: usize) -> f32 {
    let need = gaussian_need(k) as u64;
    let mut t = gaussian_fit(g, density);
    for _ in 0..GAUSSIAN_STEPS {
        let f = as_threshold(t);
        let count = g
            .iter()
            .filter(|v| v.is_nan_value() || v.to_f64().abs() >= f as f64)
            .count() as u64;
        if count >= need {
            return f;
        }
        t /= GAUSSIAN_SHRINK;
    }
    as_threshold(t)
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

/// Peers per round of the throttled region exchange (Ok-Topk's throttle, at most 4).
pub const THROTTLE: usize = 4;

/// (width, rounds) of the region exchange among `p` members: at most `min(4, p)` peers per
/// round (itself included, in round 0), `ceil(p / width)` rounds.
pub fn exchange_rounds(p: usize) -> (usize, usize) {
    let width = THROTTLE.min(p).max(1);
    (width, p.div_ceil(width).max(1))
}

/// The round of the region exchange in which member `from` sends to member `to` (and `to`
/// receives from `from`), of `p` members: `((to - from) mod p) / width`.
pub fn exchange_round(from: usize, to: usize, p: usize) -> usize {
    ((to + p - from) % p) / exchange_rounds(p).0
}

/// floor(j x n / p) without overflow.
fn share_of(n: u64, j: u64, p: u64) -> u64 {
    n / p * j + n % p * j / p
}

/// One member's region boundaries over `n` elements for `p` regions (p + 1 values): 0, then
/// the index at position floor(c / p) x j of its `c` held pairs for j = 1 .. p - 1 (the seed's
/// chunks, so that each region holds about c / p of them; equal shares of `n` without pairs),
/// then `n`. Region j is `[b[j], b[j + 1])`.
pub fn region_boundaries<T: SparseValue, I: SparseIndex>(
    selected: &HostSparse<T, I>,
    n: usize,
    p: usize,
) -> Vec<u64> {
    let c = selected.idx.len() as u64;
    if c == 0 {
        return equal_boundaries(n, p);
    }
    let (n, p64) = (n as u64, p as u64);
    (0..=p64)
        .map(|j| match j {
            0 => 0,
            j if j == p64 => n,
            j => selected.idx[(c / p64 * j) as usize].to_i64() as u64,
        })
        .collect()
}

/// Boundaries of `p` regions of equal shares of `n`: floor(j x n / p).
pub fn equal_boundaries(n: usize, p: usize) -> Vec<u64> {
    (0..=p as u64)
        .map(|j| share_of(n as u64, j, p as u64))
        .collect()
}

/// The members' boundaries averaged as the u64 allreduce (Avg) does: floor of the sum over the
/// members divided by their number, per boundary.
pub fn average_boundaries(local: &[Vec<u64>]) -> Vec<u64> {
    let m = local.len() as u128;
    (0..local.first().map_or(0, Vec::len))
        .map(|j| (local.iter().map(|b| b[j] as u128).sum::<u128>() / m) as u64)
        .collect()
}

/// The held pairs of `set` (sorted by index) per region of `bounds`: region j takes the
/// indexes in `[bounds[j], bounds[j + 1])`, the first region everything below, the last
/// everything from its start.
pub fn split_regions<T: SparseValue, I: SparseIndex>(
    set: &HostSparse<T, I>,
    bounds: &[u64],
) -> Vec<HostSparse<T, I>> {
    let p = bounds.len() - 1;
    let below = |b: u64| set.idx.partition_point(|&i| (i.to_i64() as u64) < b);
    (0..p)
        .map(|j| {
            let lo = if j == 0 { 0 } else { below(bounds[j]) };
            let hi = if j == p - 1 {
                set.idx.len()
            } else {
                below(bounds[j + 1])
            };
            let hi = hi.max(lo);
            HostSparse {
                count: (hi - lo) as u64,
                idx: set.idx[lo..hi].to_vec(),
                val: set.val[lo..hi].to_vec(),
            }
        })
        .collect()
}

/// Member `r`'s region after the reduce: what every member sent for region `r`, united by
/// index with the values added (member order), pairs whose sum is zero dropped (they add
/// nothing to the result).
pub fn region_reduce<T: SparseValue, I: SparseIndex>(
    local: &[HostSparse<T, I>],
    bounds: &[u64],
    r: usize,
) -> HostSparse<T, I> {
    let sum = local.iter().fold(HostSparse::empty(), |acc, set| {
        merge(&acc, &split_regions(set, bounds)[r], usize::MAX)
    });
    let keep: Vec<usize> = (0..sum.idx.len())
        .filter(|&j| sum.val[j].is_nan_value() || sum.val[j].to_f64() != 0.0)
        .collect();
    HostSparse {
        count: keep.len() as u64,
        idx: keep.iter().map(|&j| sum.idx[j]).collect(),
        val: keep.iter().map(|&j| sum.val[j]).collect(),
    }
}

/// The split-and-allgather exchange (Ok-Topk, `topk_sa`, `gaussiank_sa`) of the members'
/// selections `local` over regions `bounds`: each member's region after the reduce, and the
/// dense result every member gets (the regions scattered into zeros).
pub fn region_allreduce<T: SparseValue, I: SparseIndex>(
    local: &[HostSparse<T, I>],
    bounds: &[u64],
    n: usize,
) -> (Vec<HostSparse<T, I>>, Vec<T>) {
    let regions: Vec<_> = (0..bounds.len() - 1)
        .map(|r| region_reduce(local, bounds, r))
        .collect();
    let dense = sparse_sum(n, &regions);
    (regions, dense)
}

/// `topk_sa`'s dense fallback (the seed's test): the reduced regions' `pairs` in all, as index
/// and value words, reach two thirds of the `n` dense elements (`2 pairs >= floor(2n / 3)`).
pub fn sa_goes_dense(pairs: u64, n: usize) -> bool {
    2 * pairs >= 2 * n as u64 / 3
}

/// Ok-Topk's local threshold adaptation (the seed's `_scale`): divided by this below 3k/4
/// selected, multiplied above 5k/4.
pub const OK_LOCAL_SCALE: f64 = 1.012;
/// Ok-Topk's global threshold: divided by this below 3k/4 gathered (the seed's
/// `_scale_global_increase`).
pub const OK_GLOBAL_DOWN: f64 = 1.01;
/// Ok-Topk's global threshold: multiplied by this above 5k/4 gathered (the seed's
/// `_scale_global_decrease`).
pub const OK_GLOBAL_UP: f64 = 1.008;
/// Ok-Topk's local threshold rise between estimates (the seed's add2residual): multiplied by
/// this while more than 3k/2 pass, at most [`OK_RISE_STEPS`] times.
pub const OK_RISE: f64 = 1.03;
/// Ok-Topk's local threshold rise: at most this many steps.
pub const OK_RISE_STEPS: usize = 5;

/// Ok-Topk's threshold estimate from an exact top-k selection: the least magnitude among its
/// held pairs (+infinity where that is a NaN or there are none), at least the smallest
/// positive f32 (zeros are never worth sending).
pub fn least_threshold<T: SparseValue, I: SparseIndex>(set: &HostSparse<T, I>) -> f32 {
    let least = set.val.iter().copied().min_by(|&a, &b| magnitude_cmp(a, b));
    let t = match least {
        None => f32::INFINITY,
        Some(v) if v.is_nan_value() => f32::INFINITY,
        // Exact: an f32 or bf16 magnitude is an f32.
        Some(v) => v.to_f64().abs() as f32,
    };
    t.max(f32::from_bits(1))
}

/// The dense sum over `n` elements of the pairs of `sets`, in order ([`scatter_add`]).
pub fn sparse_sum<T: SparseValue, I: SparseIndex>(n: usize, sets: &[HostSparse<T, I>]) -> Vec<T> {
    let mut dense = vec![T::of_f32(0.0); n];
    for s in sets {
        scatter_add(&mut dense, s);
    }
    dense
}

/// A threshold as the selections take it (f32, +infinity where not finite, at least the
/// smallest positive f32), of a threshold carried in f64.
pub fn threshold_of(t: f64) -> f32 {
    as_threshold(t)
}

/// How many of `g` pass threshold `t` (|g| >= t, NaN always).
fn passing<T: SparseValue>(g: &[T], t: f32) -> u64 {
    g.iter()
        .filter(|v| v.is_nan_value() || v.to_f64().abs() >= t as f64)
        .count() as u64
}

/// Ok-Topk's rise of a reused local threshold `state` over `acc` (the seed's add2residual):
/// multiplied by 1.03 while more than `3k/2` pass, at most 5 times. Returns the new state.
pub fn ok_rise<T: SparseValue>(acc: &[T], state: f64, k: usize) -> f64 {
    let limit = (3 * k / 2) as u64;
    let mut t = state;
    for _ in 0..OK_RISE_STEPS {
        if passing(acc, as_threshold(t)) <= limit {
            break;
        }
        t *= OK_RISE;
    }
    t
}

/// Ok-Topk's adaptation of a threshold `state` by the `count` it selected for `k`: divided by
/// `down` where 4 count < 3k, multiplied by `up` where 4 count > 5k.
pub fn ok_adapt(state: f64, count: u64, k: usize, down: f64, up: f64) -> f64 {
    let k = k as u64;
    if 4 * count < 3 * k {
        state / down
    } else if 4 * count > 5 * k {
        state * up
    } else {
        state
    }
}

#[cfg(test)]
pub(crate) mod tests {
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
        // Past the capacity: the largest magnitudes (NaN, then 2), not the lowest indexes.
        let got = threshold::<f32, i32>(&g, 1.0, 2);
        assert_eq!((got.count, got.idx.as_slice()), (4, &[3, 4][..]));
        // Ties among the largest go to the lower index: 1 and 2 tie at |1|.
        let got = threshold::<f32, i32>(&g, 1.0, 3);
        assert_eq!((got.count, got.idx.as_slice()), (4, &[1, 3, 4][..]));
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
    fn the_count_correction_lowers_the_threshold_until_3k_over_4_pass() {
        // mean 0, std 2: t_0 = 2 z(0.05) ~ 3.92, above every element.
        let mut g = vec![2.0f32, -2.0, 2.0, -2.0];
        g.extend([0.0f32; 4]);
        let t0 = gaussian_threshold(&g, 0.05);
        // Nothing is needed (k = 1: 3/4 rounds to 0): t_0 as it is.
        assert_eq!(gaussian_corrected_threshold(&g, 0.05, 1), t0);
        // k = 4 needs 3: the first t_j at or below 2, i.e. the first j with t_0 / 1.012^j <= 2.
        let got = gaussian_corrected_threshold(&g, 0.05, 4);
        let mut t = gaussian_fit(&g, 0.05);
        let mut j = 0;
        while as_threshold(t) > 2.0 {
            t /= GAUSSIAN_SHRINK;
            j += 1;
        }
        assert_eq!(got, as_threshold(t));
        assert!(got <= 2.0 && j > 0 && j < GAUSSIAN_STEPS, "j {j}");
        assert_eq!(threshold::<f32, i32>(&g, got, 8).count, 4);
        // Never enough (k = 100 needs 75 of 8): t_50.
        let mut t = gaussian_fit(&g, 0.05);
        for _ in 0..GAUSSIAN_STEPS {
            t /= GAUSSIAN_SHRINK;
        }
        assert_eq!(gaussian_corrected_threshold(&g, 0.05, 100), as_threshold(t));
        assert_eq!(gaussian_need(4), 3);
        assert_eq!(gaussian_need(10), 7);
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
    fn region_boundaries_balance_the_selected_indexes() {
        // 8 pairs, 4 regions: the indexes at positions 2, 4 and 6 start regions 1 to 3.
        let s = set(&[1, 3, 4, 9, 10, 11, 50, 90], &[1.0; 8]);
        assert_eq!(region_boundaries(&s, 100, 4), [0, 4, 10, 50, 100]);
        for (j, r) in split_regions(&s, &[0, 4, 10, 50, 100]).iter().enumerate() {
            assert_eq!(r.idx.len(), 2, "region {j}");
        }
        // Not a multiple: chunks of floor(5 / 3) = 1, positions 1 and 2.
        let s5 = set(&[2, 4, 6, 8, 10], &[1.0; 5]);
        assert_eq!(region_boundaries(&s5, 12, 3), [0, 4, 6, 12]);
        // One region: everything.
        assert_eq!(region_boundaries(&s5, 12, 1), [0, 12]);
        // No pairs: equal shares.
        let none = set(&[], &[]);
        assert_eq!(region_boundaries(&none, 10, 4), [0, 2, 5, 7, 10]);
        assert_eq!(equal_boundaries(10, 4), [0, 2, 5, 7, 10]);
        assert_eq!(equal_boundaries(3, 4), [0, 0, 1, 2, 3]);
        // Fewer pairs than regions: chunks of 0, every inner boundary the first index.
        let two = set(&[5, 7], &[1.0, 1.0]);
        assert_eq!(region_boundaries(&two, 10, 4), [0, 5, 5, 5, 10]);
        let parts = split_regions(&two, &[0, 5, 7, 7, 10]);
        let sizes: Vec<usize> = parts.iter().map(|r| r.idx.len()).collect();
        assert_eq!(sizes, [0, 1, 0, 1]);
        // Large values: no overflow in j x n.
        let big = equal_boundaries(usize::MAX / 2, 3);
        assert_eq!(big[3], (usize::MAX / 2) as u64);
        assert!(big.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn averaged_boundaries_are_the_floor_of_the_mean_and_stay_sorted() {
        let a = vec![0, 4, 10, 50, 100];
        let b = vec![0, 7, 11, 20, 100];
        let avg = average_boundaries(&[a.clone(), b]);
        assert_eq!(avg, [0, 5, 10, 35, 100]);
        assert!(avg.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(average_boundaries(std::slice::from_ref(&a)), a);
        // Past 2^64 in the sum: still the mean.
        let m = u64::MAX - 1;
        assert_eq!(average_boundaries(&[vec![0, m], vec![0, m]]), [0, m]);
    }

    #[test]
    fn split_regions_partition_every_held_pair() {
        let s = set(&[0, 3, 4, 9, 12], &[1.0, 2.0, 3.0, 4.0, 5.0]);
        let bounds = [0, 4, 9, 13];
        let parts = split_regions(&s, &bounds);
        same(&parts[0], &set(&[0, 3], &[1.0, 2.0]));
        same(&parts[1], &set(&[4], &[3.0]));
        same(&parts[2], &set(&[9, 12], &[4.0, 5.0]));
        // Every pair in exactly one region, in order.
        let back: Vec<i32> = parts.iter().flat_map(|r| r.idx.clone()).collect();
        assert_eq!(back, s.idx);
        // A set whose count ran past the pairs held: only the held pairs are split.
        let mut over = s.clone();
        over.count = 9;
        assert_eq!(split_regions(&over, &bounds)[2].count, 2);
    }

    #[test]
    fn regions_reduce_by_index_and_drop_zero_sums() {
        let a = set(&[0, 3, 6], &[1.0, 2.0, 3.0]);
        let b = set(&[3, 5, 6], &[5.0, 1.0, -3.0]);
        let bounds = [0, 4, 8];
        same(
            &region_reduce(&[a.clone(), b.clone()], &bounds, 0),
            &set(&[0, 3], &[1.0, 7.0]),
        );
        // 6: 3 + -3 = 0, dropped.
        same(
            &region_reduce(&[a.clone(), b.clone()], &bounds, 1),
            &set(&[5], &[1.0]),
        );
        let (regions, dense) = region_allreduce(&[a.clone(), b.clone()], &bounds, 8);
        assert_eq!(regions.len(), 2);
        assert_eq!(dense, sparse_sum(8, &[a, b]));
        // One member, one region: its own set (zeros dropped).
        let z = set(&[1, 2], &[0.0, 4.0]);
        same(
            &region_reduce(std::slice::from_ref(&z), &[0, 8], 0),
            &set(&[2], &[4.0]),
        );
    }

    #[test]
    fn exchange_rounds_take_at_most_four_peers_and_pair_up() {
        assert_eq!(exchange_rounds(1), (1, 1));
        assert_eq!(exchange_rounds(3), (3, 1));
        assert_eq!(exchange_rounds(4), (4, 1));
        assert_eq!(exchange_rounds(5), (4, 2));
        assert_eq!(exchange_rounds(9), (4, 3));
        for p in 1..=12 {
            let (width, rounds) = exchange_rounds(p);
            for me in 0..p {
                // Round 0 is itself; each round at most `width` destinations, each once.
                assert_eq!(exchange_round(me, me, p), 0);
                let mut per_round = vec![0; rounds];
                for to in 0..p {
                    per_round[exchange_round(me, to, p)] += 1;
                }
                assert!(per_round.iter().all(|&c| c >= 1 && c <= width), "p {p}");
                assert_eq!(per_round.iter().sum::<usize>(), p);
            }
        }
    }

    #[test]
    fn the_least_threshold_is_the_smallest_selected_magnitude() {
        assert_eq!(least_threshold(&set(&[0, 1, 2], &[-3.0, 5.0, 4.0])), 3.0);
        // Zeros: the smallest positive f32; nothing held: +infinity.
        assert_eq!(
            least_threshold(&set(&[0, 1], &[0.0, 2.0])),
            f32::from_bits(1)
        );
        assert_eq!(least_threshold(&set(&[], &[])), f32::INFINITY);
        // NaN is above every number: only an all-NaN set gives +infinity.
        assert_eq!(least_threshold(&set(&[0, 1], &[f32::NAN, -2.0])), 2.0);
        assert_eq!(least_threshold(&set(&[0], &[f32::NAN])), f32::INFINITY);
        let h = HostSparse::<bf16, i32> {
            count: 1,
            idx: vec![0],
            val: vec![bf16::from_f32(-1.0078125)],
        };
        assert_eq!(least_threshold(&h), 1.0078125);
        // The threshold takes the selection again (and every tie of its least magnitude).
        let g = [1.0f32, -3.0, 3.0, 0.5, 4.0];
        let sel = topk::<f32, i32>(&g, 2);
        let again = threshold::<f32, i32>(&g, least_threshold(&sel), 10);
        assert_eq!(again.idx, [1, 2, 4]);
    }

    #[test]
    fn topk_sa_goes_dense_past_two_thirds_of_n_words() {
        // n = 300: 200 words, 100 pairs.
        assert!(!sa_goes_dense(99, 300));
        assert!(sa_goes_dense(100, 300));
        // n = 10: floor(20 / 3) = 6 words, 3 pairs.
        assert!(!sa_goes_dense(2, 10));
        assert!(sa_goes_dense(3, 10));
        // n = 1: nothing to save, always dense.
        assert!(sa_goes_dense(0, 1));
    }

    #[test]
    fn ok_topk_rises_while_too_many_pass_and_adapts_by_the_count() {
        let g: Vec<f32> = (1..=100).map(|i| i as f32).collect();
        // k = 10: at most 15 may pass. From 50 (51 pass): x 1.03 five times at most.
        let t = ok_rise(&g, 50.0, 10);
        let mut want = 50.0f64;
        for _ in 0..OK_RISE_STEPS {
            want *= OK_RISE;
        }
        assert_eq!(t, want, "51 pass at every step: five rises");
        // From 85 (16 pass), one rise to 87.55 (13 pass), then stop.
        assert_eq!(ok_rise(&g, 85.0, 10), 85.0 * OK_RISE);
        // Few enough already: unchanged.
        assert_eq!(ok_rise(&g, 95.0, 10), 95.0);
        // Adaptation: below 3k/4, within, above 5k/4.
        assert_eq!(ok_adapt(1.0, 7, 10, 1.012, 1.5), 1.0 / 1.012);
        assert_eq!(ok_adapt(1.0, 8, 10, 1.012, 1.5), 1.0);
        assert_eq!(ok_adapt(1.0, 12, 10, 1.012, 1.5), 1.0);
        assert_eq!(ok_adapt(1.0, 13, 10, 1.012, 1.5), 1.5);
    }

    /// Small integer gradients of member `r` at `step`, the same for every run.
    pub(crate) fn ints(n: usize, step: usize, r: usize) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let x = (i * 7 + step * 13 + r * 29) % 17;
                let sign = if (i + step + r) % 3 == 0 { -1.0 } else { 1.0 };
                sign * x as f32
            })
            .collect()
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
