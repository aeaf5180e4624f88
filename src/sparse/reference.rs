//! The CPU reference of the sparse kernels, exact and plain, for tests: top-k by magnitude
//! (ties to the lower index), threshold compaction, merge and scatter-add. The magnitude order
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
