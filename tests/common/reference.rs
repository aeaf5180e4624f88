//! The one CPU reference of the collective tests: test values per (PE, element, salt, op), the
//! reduction in PE order in the kernels' accumulation type, output poisons no case produces, and
//! the rounding bound where partials are kept in a 16-bit type (tests/allreduce.rs says why the
//! values make every other result exact).

use half::{bf16, f16};
use nvshmem::{ReduceOp, Reducible};

/// A type with a CPU reference reduction and a test-value generator.
pub trait RefElem: Reducible {
    fn gen(pe: usize, i: usize, salt: usize, op: ReduceOp) -> Self;
    fn reduce(values: &[Self], op: ReduceOp) -> Self;
    /// The output poison: a value no reduction of `gen` values can give.
    fn poison() -> Self;
    fn is_poison(v: Self) -> bool;
    /// Exact equality (a NaN equals nothing).
    fn same(got: Self, want: Self) -> bool;
    /// Whether every partial result of `values` under `op`, in any order, is exactly
    /// representable in the type (always for integers: they wrap, exactly).
    fn exact_partials(_values: &[Self], _op: ReduceOp) -> bool {
        true
    }
    /// `got` within the rounding of `steps` partials kept in the element type (ring and
    /// recursive doubling, one per hop, as NCCL's ring does); only asked where
    /// `exact_partials` is false.
    fn close_after(got: Self, want: Self, _values: &[Self], _op: ReduceOp, _steps: usize) -> bool {
        Self::same(got, want)
    }
}

/// The integer poison: no sum, avg, product, min or max of `gen` values (from -40 to 56, products
/// of 1 to 3, at most 8 PEs; unsigned avgs of wrapped sums lie near 2^bits / n) comes near it.
pub const POISON_BITS: u64 = 0x5A5A_5A5A_5A5A_5A5A;

/// [`RefElem::exact_partials`] for float values with `sig` significand bits: partial sums are
/// multiples of 1/4 no larger than the sum of magnitudes, partial products are N / 4^k with N at
/// most the product of all the numerators (each from 2 to 8).
pub fn exact_with(values: &[f64], op: ReduceOp, sig: i32) -> bool {
    let limit = 2f64.powi(sig);
    match op {
        ReduceOp::Min | ReduceOp::Max => true,
        ReduceOp::Sum | ReduceOp::Avg => values.iter().map(|v| v.abs()).sum::<f64>() * 4.0 <= limit,
        ReduceOp::Prod => values.iter().map(|v| v.abs() * 4.0).product::<f64>() <= limit,
    }
}

/// The error `steps` roundings of partials can leave (`sig` significand bits): a sum's partial
/// is at most M = the sum of magnitudes and rounds by at most half an ulp of M, later additions
/// (in f32) are exact, and the final conversion adds another half ulp: `steps` ulps of M bound
/// it (avg divides it by n). A product's partial rounds by at most 2^-sig relative, and later
/// factors scale that error with the result: `steps` times 2^(1-sig) of the result, twice the
/// first-order error, bounds it.
pub fn hop_bound(values: &[f64], want: f64, op: ReduceOp, sig: i32, steps: usize) -> f64 {
    let ulp = |x: f64| 2f64.powi(x.abs().log2().floor() as i32 + 1 - sig);
    match op {
        ReduceOp::Min | ReduceOp::Max => 0.0,
        ReduceOp::Sum | ReduceOp::Avg => {
            steps as f64 * ulp(values.iter().map(|v| v.abs()).sum::<f64>())
        }
        ReduceOp::Prod => steps as f64 * want.abs() * 2f64.powi(1 - sig),
    }
}

pub fn seed(pe: usize, i: usize, salt: usize) -> usize {
    (pe * 7919 + i * 31 + salt * 131 + (i * i) % 101) % 97
}

macro_rules! int_ref {
    ($($t:ty),*) => {$(
        impl RefElem for $t {
            fn gen(pe: usize, i: usize, salt: usize, op: ReduceOp) -> Self {
                let s = seed(pe, i, salt);
                // Products of small factors stay meaningful; wrapping is defined anyway.
                if op == ReduceOp::Prod { (s % 3 + 1) as $t } else { (s as $t).wrapping_sub(40 as $t) }
            }
            fn reduce(v: &[Self], op: ReduceOp) -> Self {
                let n = v.len() as $t;
                match op {
                    ReduceOp::Sum => v.iter().fold(0 as $t, |a, b| a.wrapping_add(*b)),
                    ReduceOp::Avg => v.iter().fold(0 as $t, |a, b| a.wrapping_add(*b)) / n,
                    ReduceOp::Prod => v[1..].iter().fold(v[0], |a, b| a.wrapping_mul(*b)),
                    ReduceOp::Min => *v.iter().min().unwrap(),
                    ReduceOp::Max => *v.iter().max().unwrap(),
                }
            }
            fn poison() -> Self { POISON_BITS as $t }
            fn is_poison(v: Self) -> bool { v == POISON_BITS as $t }
            fn same(got: Self, want: Self) -> bool { got == want }
        }
    )*};
}
int_ref!(i32, i64, u32, u64);

macro_rules! float_ref {
    ($t:ty, $acc:ty, $to:expr, $from:expr, $sig:expr) => {
        impl RefElem for $t {
            fn gen(pe: usize, i: usize, salt: usize, op: ReduceOp) -> Self {
                let s = seed(pe, i, salt) as f32;
                // Quarters are exact in every float type; products stay near 1.
                let v = if op == ReduceOp::Prod {
                    0.5 + (s % 7.0) * 0.25
                } else {
                    s / 4.0 - 12.0
                };
                $from(v as $acc)
            }
            fn reduce(v: &[Self], op: ReduceOp) -> Self {
                let a: Vec<$acc> = v.iter().map(|x| $to(*x)).collect();
                let r = match op {
                    ReduceOp::Sum | ReduceOp::Avg => a[1..].iter().fold(a[0], |s, x| s + x),
                    ReduceOp::Prod => a[1..].iter().fold(a[0], |s, x| s * x),
                    ReduceOp::Min => a[1..].iter().fold(a[0], |s, x| if *x < s { *x } else { s }),
                    ReduceOp::Max => a[1..].iter().fold(a[0], |s, x| if *x > s { *x } else { s }),
                };
                $from(if op == ReduceOp::Avg {
                    r / v.len() as $acc
                } else {
                    r
                })
            }
            fn poison() -> Self {
                $from(<$acc>::NAN)
            }
            fn is_poison(v: Self) -> bool {
                $to(v).is_nan()
            }
            fn same(got: Self, want: Self) -> bool {
                $to(got) == $to(want)
            }
            fn exact_partials(v: &[Self], op: ReduceOp) -> bool {
                let v: Vec<f64> = v.iter().map(|x| $to(*x) as f64).collect();
                exact_with(&v, op, $sig)
            }
            fn close_after(got: Self, want: Self, v: &[Self], op: ReduceOp, steps: usize) -> bool {
                let (g, w) = ($to(got) as f64, $to(want) as f64);
                let v: Vec<f64> = v.iter().map(|x| $to(*x) as f64).collect();
                (g - w).abs() <= hop_bound(&v, w, op, $sig, steps)
            }
        }
    };
}
// Significand bits, the implicit one included.
float_ref!(f32, f32, |x: f32| x, |x: f32| x, 24);
float_ref!(f64, f64, |x: f64| x, |x: f64| x, 53);
float_ref!(f16, f32, |x: f16| x.to_f32(), f16::from_f32, 11);
float_ref!(bf16, f32, |x: bf16| x.to_f32(), bf16::from_f32, 8);

/// Data-movement test values: every element type (u8 included), values that differ by PE and
/// element (modulo the type's exact range), and a poison no tag equals.
pub trait Tag: nvshmem::Element + PartialEq + std::fmt::Debug {
    fn tag(pe: usize, i: usize, salt: usize) -> Self;
    fn poison() -> Self;
}

fn tag_base(pe: usize, i: usize, salt: usize) -> u64 {
    (pe as u64) * 1_000_003 + (i as u64) * 7 + (salt as u64) * 131
}

macro_rules! int_tag {
    ($($t:ty),*) => {$(
        impl Tag for $t {
            // Below 2^25 for up to 8 PEs and 2M elements: never the poison (all ones).
            fn tag(pe: usize, i: usize, salt: usize) -> Self { tag_base(pe, i, salt) as $t }
            fn poison() -> Self { !(0 as $t) }
        }
    )*};
}
int_tag!(i32, i64, u32, u64);

impl Tag for u8 {
    // At most 250: never the poison 255.
    fn tag(pe: usize, i: usize, salt: usize) -> Self {
        (tag_base(pe, i, salt) % 251) as u8
    }
    fn poison() -> Self {
        0xff
    }
}

macro_rules! float_tag {
    ($t:ty, $modulus:expr, $from:expr, $nan:expr) => {
        impl Tag for $t {
            // Integers below the type's exact limit; a NaN poison equals nothing.
            fn tag(pe: usize, i: usize, salt: usize) -> Self {
                $from((tag_base(pe, i, salt) % $modulus) as f32)
            }
            fn poison() -> Self {
                $nan
            }
        }
    };
}
float_tag!(f32, 1 << 23, |x: f32| x, f32::NAN);
float_tag!(f64, 1 << 23, |x: f32| x as f64, f64::NAN);
float_tag!(f16, 2048, f16::from_f32, f16::NAN);
float_tag!(bf16, 256, bf16::from_f32, bf16::NAN);
