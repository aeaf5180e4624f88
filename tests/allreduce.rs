//! Allreduce against a CPU reference: every op x dtype x algorithm, edge counts, in place,
//! segmented messages, back-to-back calls; 2 PEs on two GPUs, 3 and 4 PEs on one GPU.
//! Run by scripts/gpu_test.sh (tests named peN_* run as N-PE jobs).
//!
//! The reference reduces in PE order 0..n-1 in the kernels' accumulation type (f32 for f16 and
//! bf16, wrapping arithmetic for integers), so results are expected to match exactly; floats are
//! still compared with a stated bound (1e-6 relative for f32, 1e-12 for f64, one unit in the
//! last place for f16/bf16) so that a compiler's contraction could not fail a correct kernel.

mod common;

use common::runtime;
use half::{bf16, f16};
use nvshmem::{AllreduceAlgo, Nvshmem, ReduceOp, Reducible};

const OPS: [ReduceOp; 5] = [
    ReduceOp::Sum,
    ReduceOp::Prod,
    ReduceOp::Min,
    ReduceOp::Max,
    ReduceOp::Avg,
];
const ALGOS: [AllreduceAlgo; 3] = [
    AllreduceAlgo::OneShot,
    AllreduceAlgo::TwoShot,
    AllreduceAlgo::Auto,
];

/// A type with a CPU reference reduction and a test-value generator.
trait RefElem: Reducible {
    fn gen(pe: usize, i: usize, salt: usize, op: ReduceOp) -> Self;
    fn reduce(values: &[Self], op: ReduceOp) -> Self;
    fn close(got: Self, want: Self) -> bool;
}

fn seed(pe: usize, i: usize, salt: usize) -> usize {
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
            fn close(got: Self, want: Self) -> bool { got == want }
        }
    )*};
}
int_ref!(i32, i64, u32, u64);

macro_rules! float_ref {
    ($t:ty, $acc:ty, $to:expr, $from:expr, $tol:expr) => {
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
            fn close(got: Self, want: Self) -> bool {
                let (g, w) = ($to(got) as f64, $to(want) as f64);
                (g - w).abs() <= $tol(w)
            }
        }
    };
}
float_ref!(f32, f32, |x: f32| x, |x: f32| x, |w: f64| 1e-6
    * w.abs().max(1.0));
float_ref!(f64, f64, |x: f64| x, |x: f64| x, |w: f64| 1e-12
    * w.abs().max(1.0));
float_ref!(f16, f32, |x: f16| x.to_f32(), f16::from_f32, |w: f64| (w
    .abs()
    * 2f64.powi(-10))
.max(1e-7));
float_ref!(bf16, f32, |x: bf16| x.to_f32(), bf16::from_f32, |w: f64| {
    (w.abs() * 2f64.powi(-7)).max(1e-7)
});

/// Runs one allreduce of `count` elements and checks every element on this PE.
fn check<T: RefElem>(
    nv: &Nvshmem,
    ar: &mut nvshmem::Allreduce<'_>,
    count: usize,
    op: ReduceOp,
    algo: AllreduceAlgo,
    in_place: bool,
    salt: usize,
) {
    let (me, n) = (nv.my_pe() as usize, nv.n_pes() as usize);
    let input = nv.alloc::<T>(count).unwrap();
    let output = nv.alloc::<T>(count).unwrap();
    input
        .copy_from_host(
            &(0..count)
                .map(|i| T::gen(me, i, salt, op))
                .collect::<Vec<_>>(),
        )
        .unwrap();
    // Poison the output: an element the kernel forgets cannot pass.
    output
        .copy_from_host(&vec![T::gen(99, 0, 7, ReduceOp::Sum); count])
        .unwrap();
    let stream = nv.stream().clone();
    let used = if in_place {
        ar.run_in_place(&input, op, algo, &stream).unwrap()
    } else {
        ar.run(&input, &output, op, algo, &stream).unwrap()
    };
    stream.synchronize().unwrap();
    let got = if in_place {
        input.to_vec()
    } else {
        output.to_vec()
    }
    .unwrap();
    for (i, g) in got.iter().enumerate() {
        let vals: Vec<T> = (0..n).map(|p| T::gen(p, i, salt, op)).collect();
        let want = T::reduce(&vals, op);
        assert!(
            T::close(*g, want),
            "{} {op:?} {algo:?} (ran {used:?}) count {count} in_place {in_place}: element {i} is {g:?}, want {want:?}",
            T::NAME
        );
    }
    nv.barrier_all();
}

fn every_op_dtype_algorithm(nv: &Nvshmem, counts: &[usize]) {
    let mut ar = nv.allreduce_workspace(1 << 20).unwrap();
    for &count in counts {
        for op in OPS {
            for algo in ALGOS {
                check::<f32>(nv, &mut ar, count, op, algo, false, 1);
                check::<f64>(nv, &mut ar, count, op, algo, false, 2);
                check::<f16>(nv, &mut ar, count, op, algo, false, 3);
                check::<bf16>(nv, &mut ar, count, op, algo, false, 4);
                check::<i32>(nv, &mut ar, count, op, algo, false, 5);
                check::<i64>(nv, &mut ar, count, op, algo, false, 6);
                check::<u32>(nv, &mut ar, count, op, algo, false, 7);
                check::<u64>(nv, &mut ar, count, op, algo, false, 8);
            }
        }
    }
}

#[test]
#[ignore = "needs 2 GPUs"]
fn pe2_every_op_dtype_and_algorithm_against_the_cpu() {
    let nv = runtime(2);
    every_op_dtype_algorithm(&nv, &[1, 2, 7, 1000, 65_537]);
}

#[test]
#[ignore = "needs 2 GPUs"]
fn pe2_in_place_segmented_and_large_messages() {
    let nv = runtime(2);
    // A 64 KiB slot forces many segments (and both parities) per call.
    let mut small = nv.allreduce_workspace(64 << 10).unwrap();
    for algo in ALGOS {
        check::<f32>(&nv, &mut small, 1_000_003, ReduceOp::Sum, algo, false, 11);
        check::<i64>(&nv, &mut small, 300_007, ReduceOp::Max, algo, true, 12);
        check::<bf16>(&nv, &mut small, 200_001, ReduceOp::Avg, algo, true, 13);
    }
    let mut ar = nv.allreduce_workspace(8 << 20).unwrap();
    // 256 MiB of f32, two-shot and auto.
    check::<f32>(
        &nv,
        &mut ar,
        64 << 20,
        ReduceOp::Sum,
        AllreduceAlgo::Auto,
        false,
        14,
    );
    check::<u32>(
        &nv,
        &mut ar,
        (16 << 20) + 3,
        ReduceOp::Sum,
        AllreduceAlgo::TwoShot,
        true,
        15,
    );
}

#[test]
#[ignore = "needs 2 GPUs"]
fn pe2_a_thousand_back_to_back_calls_with_changing_data() {
    let nv = runtime(2);
    let (me, n) = (nv.my_pe() as usize, nv.n_pes() as usize);
    let mut ar = nv.allreduce_workspace(1 << 20).unwrap();
    let stream = nv.stream().clone();
    let count = 3001;
    let input = nv.alloc::<i64>(count).unwrap();
    let output = nv.alloc::<i64>(count).unwrap();
    for it in 0..1000usize {
        // Alternate algorithms so that both parities of both phases are exercised.
        let algo = [AllreduceAlgo::OneShot, AllreduceAlgo::TwoShot][it % 2];
        let data: Vec<i64> = (0..count)
            .map(|i| i64::gen(me, i, it, ReduceOp::Sum))
            .collect();
        input.copy_from_host(&data).unwrap();
        ar.run(&input, &output, ReduceOp::Sum, algo, &stream)
            .unwrap();
        stream.synchronize().unwrap();
        let got = output.to_vec().unwrap();
        for (i, g) in got.iter().enumerate() {
            let want: i64 = (0..n).map(|p| i64::gen(p, i, it, ReduceOp::Sum)).sum();
            assert_eq!(*g, want, "call {it}, element {i}");
        }
    }
    nv.barrier_all();
}

#[test]
#[ignore = "needs 2 GPUs"]
fn pe2_mismatched_lengths_are_refused() {
    let nv = runtime(2);
    let mut ar = nv.allreduce_workspace(1 << 20).unwrap();
    let a = nv.alloc::<f32>(10).unwrap();
    let b = nv.alloc::<f32>(11).unwrap();
    let stream = nv.stream().clone();
    assert!(ar
        .run(&a, &b, ReduceOp::Sum, AllreduceAlgo::Auto, &stream)
        .is_err());
    // Still usable afterwards.
    check::<f32>(
        &nv,
        &mut ar,
        10,
        ReduceOp::Sum,
        AllreduceAlgo::Auto,
        false,
        21,
    );
}

#[test]
#[ignore = "needs 1 GPU"]
fn pe1_single_pe_allreduce_is_the_identity_of_the_op() {
    let nv = runtime(1);
    every_op_dtype_algorithm(&nv, &[1, 1000]);
}

#[test]
#[ignore = "needs 1 GPU (3 PEs on it)"]
fn pe3_on_one_gpu_every_op_and_dtype() {
    let nv = runtime(3);
    every_op_dtype_algorithm(&nv, &[5, 1000]);
}

#[test]
#[ignore = "needs 1 GPU (4 PEs on it)"]
fn pe4_on_one_gpu_every_op_and_dtype() {
    let nv = runtime(4);
    every_op_dtype_algorithm(&nv, &[3, 1001]);
}
