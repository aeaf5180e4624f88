//! Allreduce against a CPU reference: every op x dtype x algorithm, edge counts, in place,
//! segmented messages, back-to-back calls, teams, CUDA graph replay; 2 PEs on two GPUs, 3 to 6
//! PEs on one GPU (non-powers of two exercise recursive doubling's fold-in).
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

const OPS: [ReduceOp; 5] = ReduceOp::ALL;
const ALGOS: [AllreduceAlgo; 5] = [
    AllreduceAlgo::OneShot,
    AllreduceAlgo::TwoShot,
    AllreduceAlgo::Ring,
    AllreduceAlgo::RecursiveDoubling,
    AllreduceAlgo::Auto,
];

/// A type with a CPU reference reduction and a test-value generator.
trait RefElem: Reducible {
    fn gen(pe: usize, i: usize, salt: usize, op: ReduceOp) -> Self;
    fn reduce(values: &[Self], op: ReduceOp) -> Self;
    fn close(got: Self, want: Self) -> bool;
    /// `close` with `steps` roundings allowed: ring and recursive doubling keep partial results
    /// in the element type, so 16-bit floats round once per hop (as NCCL's ring does).
    fn close_after(got: Self, want: Self, _steps: usize) -> bool {
        Self::close(got, want)
    }
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
            fn close_after(got: Self, want: Self, steps: usize) -> bool {
                let (g, w) = ($to(got) as f64, $to(want) as f64);
                (g - w).abs() <= $tol(w) * steps.max(1) as f64
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
    let members: Vec<usize> = (0..nv.n_pes() as usize).collect();
    check_members::<T>(nv, ar, &members, count, op, algo, in_place, salt);
    nv.barrier_all().unwrap();
}

/// [`check`] for a workspace over the team whose world PEs are `members` (in rank order); only
/// members call it.
#[allow(clippy::too_many_arguments)]
fn check_members<T: RefElem>(
    nv: &Nvshmem,
    ar: &mut nvshmem::Allreduce<'_>,
    members: &[usize],
    count: usize,
    op: ReduceOp,
    algo: AllreduceAlgo,
    in_place: bool,
    salt: usize,
) {
    let me = nv.my_pe() as usize;
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
        let vals: Vec<T> = members.iter().map(|&p| T::gen(p, i, salt, op)).collect();
        let want = T::reduce(&vals, op);
        let roundings = match used {
            AllreduceAlgo::Ring | AllreduceAlgo::RecursiveDoubling => members.len(),
            _ => 1,
        };
        assert!(
            T::close_after(*g, want, roundings),
            "{} {op:?} {algo:?} (ran {used:?}) count {count} in_place {in_place} members \
             {members:?}: element {i} is {g:?}, want {want:?}",
            T::NAME
        );
    }
}

/// [`check`] out of place for every dtype, the k-th with salt `salt + k`.
fn check_every_dtype(
    nv: &Nvshmem,
    ar: &mut nvshmem::Allreduce<'_>,
    count: usize,
    op: ReduceOp,
    algo: AllreduceAlgo,
    salt: usize,
) {
    check::<f32>(nv, ar, count, op, algo, false, salt);
    check::<f64>(nv, ar, count, op, algo, false, salt + 1);
    check::<f16>(nv, ar, count, op, algo, false, salt + 2);
    check::<bf16>(nv, ar, count, op, algo, false, salt + 3);
    check::<i32>(nv, ar, count, op, algo, false, salt + 4);
    check::<i64>(nv, ar, count, op, algo, false, salt + 5);
    check::<u32>(nv, ar, count, op, algo, false, salt + 6);
    check::<u64>(nv, ar, count, op, algo, false, salt + 7);
}

fn every_op_dtype_algorithm(nv: &Nvshmem, counts: &[usize]) {
    let mut ar = nv.allreduce_workspace(1 << 20).unwrap();
    for &count in counts {
        for op in OPS {
            for algo in ALGOS {
                check_every_dtype(nv, &mut ar, count, op, algo, 1);
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
        // Cycle through the algorithms (an odd count of them: each meets both parities).
        let algo = [
            AllreduceAlgo::OneShot,
            AllreduceAlgo::TwoShot,
            AllreduceAlgo::Ring,
            AllreduceAlgo::RecursiveDoubling,
            AllreduceAlgo::OneShot,
        ][it % 5];
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
    nv.barrier_all().unwrap();
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
    push_two_shot_every_op_and_dtype(&nv, &[3, 1001, 65_541]);
}

/// Fewer dtypes, every op and algorithm: 5 and 6 PEs give recursive doubling one and two PEs
/// to fold in, and the ring 5 and 6 hops.
fn every_op_and_algorithm_some_dtypes(nv: &Nvshmem) {
    let mut ar = nv.allreduce_workspace(64 << 10).unwrap();
    for count in [1, 13, 40_001] {
        for op in OPS {
            for algo in ALGOS {
                check::<f32>(nv, &mut ar, count, op, algo, false, 31);
                check::<bf16>(nv, &mut ar, count, op, algo, true, 32);
                check::<i64>(nv, &mut ar, count, op, algo, false, 33);
            }
        }
    }
}

#[test]
#[ignore = "needs 1 GPU (5 PEs on it)"]
fn pe5_on_one_gpu_every_op_and_algorithm() {
    let nv = runtime(5);
    every_op_and_algorithm_some_dtypes(&nv);
}

#[test]
#[ignore = "needs 1 GPU (6 PEs on it)"]
fn pe6_on_one_gpu_every_op_and_algorithm() {
    let nv = runtime(6);
    every_op_and_algorithm_some_dtypes(&nv);
}

#[test]
#[ignore = "needs 1 GPU (4 PEs on it)"]
fn pe4_teams_reduce_only_over_their_members() {
    let nv = runtime(4);
    if nv.shares_gpus() {
        // NVSHMEM aborts the process on a team split with several PEs per GPU ("limited
        // MPG"); the runtime must refuse it with an error instead. The reductions need 4 GPUs.
        let err = nv.team_world().split_strided(0, 2, 2).unwrap_err();
        assert!(matches!(err, nvshmem::Error::TeamSplit { .. }), "{err}");
        eprintln!("team reductions not run: they need one GPU per PE (4-GPU machine)");
        return;
    }
    let me = nv.my_pe();
    let world = nv.team_world();
    // Even and odd PEs: two teams of one split (collective over the world, every PE calls both).
    let even = world.split_strided(0, 2, 2).unwrap();
    let odd = world.split_strided(1, 2, 2).unwrap();
    let mine = even.as_ref().or(odd.as_ref()).unwrap();
    let mut ar = mine.allreduce_workspace(64 << 10).unwrap();
    let members: Vec<usize> = (0..2).map(|r| (2 * r + me % 2) as usize).collect();
    for algo in ALGOS {
        for op in OPS {
            check_members::<f32>(&nv, &mut ar, &members, 1001, op, algo, false, 41);
            check_members::<i32>(&nv, &mut ar, &members, 77_777, op, algo, true, 42);
        }
    }
    nv.barrier_all().unwrap();
    // A team of PEs 1..3 (3 members: a non-power of two); PE 0 only takes part in the allocation.
    let three = world.split_strided(1, 1, 3).unwrap();
    let mut ar3 = nv
        .allreduce_workspace_for(three.as_ref(), 64 << 10)
        .unwrap();
    let x = nv.alloc::<f32>(4).unwrap();
    if let Some(t) = &three {
        assert_eq!(t.n_pes(), 3);
        for algo in ALGOS {
            check_members::<i64>(
                &nv,
                &mut ar3,
                &[1, 2, 3],
                5003,
                ReduceOp::Sum,
                algo,
                false,
                43,
            );
        }
    } else {
        let err = ar3
            .run_in_place(&x, ReduceOp::Sum, AllreduceAlgo::Auto, nv.stream())
            .unwrap_err();
        assert!(matches!(err, nvshmem::Error::NotInTeam { .. }), "{err}");
        // Symmetric allocations are collective over the world: mirror the members' two per call.
        for _ in ALGOS {
            let _input = nv.alloc::<i64>(5003).unwrap();
            let _output = nv.alloc::<i64>(5003).unwrap();
        }
    }
    nv.barrier_all().unwrap();
}

#[test]
#[ignore = "needs 2 GPUs"]
fn pe2_replays_of_a_captured_cuda_graph_reduce_fresh_data() {
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    let nv = runtime(2);
    let (me, n) = (nv.my_pe() as usize, nv.n_pes() as usize);
    let mut ar = nv.allreduce_workspace(256 << 10).unwrap();
    let stream = nv.stream().clone();
    // 1M f32 = 4 MiB: several segments per call; then a second, in-place call.
    let count = 1 << 20;
    let input = nv.alloc::<f32>(count).unwrap();
    let output = nv.alloc::<f32>(count).unwrap();
    let small = nv.alloc::<i64>(1001).unwrap();
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .unwrap();
    ar.run(
        &input,
        &output,
        ReduceOp::Sum,
        AllreduceAlgo::TwoShot,
        &stream,
    )
    .unwrap();
    ar.run_in_place(&small, ReduceOp::Max, AllreduceAlgo::OneShot, &stream)
        .unwrap();
    ar.run(
        &input,
        &output,
        ReduceOp::Sum,
        AllreduceAlgo::RecursiveDoubling,
        &stream,
    )
    .unwrap();
    let graph = stream
        .end_capture(CUgraphInstantiate_flags(0))
        .unwrap()
        .expect("a graph was captured");
    for it in 0..50usize {
        let data: Vec<f32> = (0..count)
            .map(|i| f32::gen(me, i, it, ReduceOp::Sum))
            .collect();
        input.copy_from_host(&data).unwrap();
        let ints: Vec<i64> = (0..1001)
            .map(|i| i64::gen(me, i, it, ReduceOp::Max))
            .collect();
        small.copy_from_host(&ints).unwrap();
        graph.launch().unwrap();
        stream.synchronize().unwrap();
        let got = output.to_vec().unwrap();
        for (i, g) in got.iter().enumerate() {
            let vals: Vec<f32> = (0..n).map(|p| f32::gen(p, i, it, ReduceOp::Sum)).collect();
            let want = f32::reduce(&vals, ReduceOp::Sum);
            assert!(
                f32::close(*g, want),
                "replay {it}, element {i}: {g} want {want}"
            );
        }
        let got = small.to_vec().unwrap();
        for (i, g) in got.iter().enumerate() {
            let want = (0..n)
                .map(|p| i64::gen(p, i, it, ReduceOp::Max))
                .max()
                .unwrap();
            assert_eq!(*g, want, "replay {it}, max element {i}");
        }
        // Every PE checked this replay before anyone overwrites its input for the next.
        nv.barrier_all().unwrap();
    }
}

#[test]
#[ignore = "needs 2 GPUs"]
fn pe2_oneshot_without_the_low_latency_protocol() {
    // Small one-shot messages normally take the low-latency protocol; this covers the
    // signal-based path they take when it is off (and across nodes).
    std::env::set_var(nvshmem::coll::allreduce::LL_MAX_ENV, "0");
    let nv = runtime(2);
    let mut ar = nv.allreduce_workspace(1 << 20).unwrap();
    std::env::remove_var(nvshmem::coll::allreduce::LL_MAX_ENV);
    for count in [1, 7, 1000] {
        for op in OPS {
            check::<f32>(&nv, &mut ar, count, op, AllreduceAlgo::OneShot, false, 51);
            check::<f16>(&nv, &mut ar, count, op, AllreduceAlgo::OneShot, true, 52);
            check::<u64>(&nv, &mut ar, count, op, AllreduceAlgo::OneShot, false, 53);
        }
    }
}

#[test]
#[ignore = "needs 2 GPUs"]
fn pe2_team_workspaces_reduce_over_their_members_only() {
    let nv = runtime(2);
    let me = nv.my_pe();
    let world = nv.team_world();
    // The whole world as a split team, then a team of PE 1 alone (PE 0 outside it).
    let both = world.split_strided(0, 1, 2).unwrap().unwrap();
    let mut ar = both.allreduce_workspace(64 << 10).unwrap();
    for algo in ALGOS {
        check_members::<f32>(&nv, &mut ar, &[0, 1], 3001, ReduceOp::Sum, algo, false, 61);
    }
    nv.barrier_all().unwrap();
    let solo = world.split_strided(1, 1, 1).unwrap();
    assert_eq!(solo.is_some(), me == 1);
    let mut ar1 = nv.allreduce_workspace_for(solo.as_ref(), 64 << 10).unwrap();
    let x = nv.alloc::<f32>(4).unwrap();
    if me == 1 {
        for algo in ALGOS {
            check_members::<i32>(&nv, &mut ar1, &[1], 999, ReduceOp::Max, algo, true, 62);
        }
    } else {
        let err = ar1
            .run_in_place(&x, ReduceOp::Sum, AllreduceAlgo::Auto, nv.stream())
            .unwrap_err();
        assert!(matches!(err, nvshmem::Error::NotInTeam { .. }), "{err}");
        for _ in ALGOS {
            let _input = nv.alloc::<i32>(999).unwrap();
            let _output = nv.alloc::<i32>(999).unwrap();
        }
    }
    nv.barrier_all().unwrap();
}

#[test]
#[ignore = "needs 2 GPUs"]
fn pe2_direct_two_shot_every_op_and_dtype_on_large_odd_counts() {
    // Two-shot messages between mapped peers take the direct protocol (one launch, loads and
    // stores over the mappings; the grid grows with the message up to 128 blocks); odd counts
    // exercise the scalar tails.
    let nv = runtime(2);
    let mut ar = nv.allreduce_workspace(64 << 10).unwrap();
    for op in OPS {
        let t = AllreduceAlgo::TwoShot;
        check::<f32>(&nv, &mut ar, 262_147, op, t, false, 71);
        check::<f64>(&nv, &mut ar, 131_075, op, t, true, 72);
        check::<f16>(&nv, &mut ar, 524_291, op, t, false, 73);
        check::<bf16>(&nv, &mut ar, 524_291, op, t, true, 74);
        check::<i32>(&nv, &mut ar, 262_147, op, t, false, 75);
        check::<i64>(&nv, &mut ar, 131_075, op, t, true, 76);
        check::<u32>(&nv, &mut ar, 262_147, op, t, false, 77);
        check::<u64>(&nv, &mut ar, 131_075, op, t, false, 78);
    }
}

/// Two-shot sums of i32 at sizes from 3 to 2,000,000 elements (so 1 to 128 blocks), issued
/// back to back on one stream with no barrier or sync in between, then each checked on this PE;
/// call k reduces in place if `in_place(k)`, and its inputs use salt `salt + k`.
fn two_shot_back_to_back(
    nv: &Nvshmem,
    ar: &mut nvshmem::Allreduce<'_>,
    salt: usize,
    in_place: impl Fn(usize) -> bool,
) {
    let (me, n) = (nv.my_pe() as usize, nv.n_pes() as usize);
    let stream = nv.stream().clone();
    let counts = [
        1000,
        1 << 20,
        3,
        50_000,
        300_001,
        1 << 20,
        17,
        2_000_000,
        4096,
    ];
    let mut calls = Vec::new();
    for (k, &count) in counts.iter().enumerate() {
        let input = nv.alloc::<i32>(count).unwrap();
        let output = nv.alloc::<i32>(count).unwrap();
        let data: Vec<i32> = (0..count)
            .map(|i| i32::gen(me, i, salt + k, ReduceOp::Sum))
            .collect();
        input.copy_from_host(&data).unwrap();
        calls.push((count, input, output));
    }
    nv.barrier_all().unwrap();
    for (k, (_, input, output)) in calls.iter().enumerate() {
        if in_place(k) {
            ar.run_in_place(input, ReduceOp::Sum, AllreduceAlgo::TwoShot, &stream)
        } else {
            ar.run(
                input,
                output,
                ReduceOp::Sum,
                AllreduceAlgo::TwoShot,
                &stream,
            )
        }
        .unwrap();
    }
    ar.sync(&stream).unwrap();
    for (k, (count, input, output)) in calls.iter().enumerate() {
        let got = if in_place(k) { input } else { output }.to_vec().unwrap();
        assert_eq!(got.len(), *count);
        for (i, g) in got.iter().enumerate() {
            let want = (0..n).fold(0i32, |a, p| {
                a.wrapping_add(i32::gen(p, i, salt + k, ReduceOp::Sum))
            });
            assert_eq!(*g, want, "call {k} ({count} elements), element {i}");
        }
    }
    nv.barrier_all().unwrap();
}

#[test]
#[ignore = "needs 2 GPUs"]
fn pe2_direct_two_shot_back_to_back_with_the_grid_changing_between_calls() {
    // Each call's grid follows its size (1 to 128 blocks), so a block's counters skip the calls
    // too small to use it; calls go back to back with no barrier or sync in between.
    let nv = runtime(2);
    let mut ar = nv.allreduce_workspace(64 << 10).unwrap();
    two_shot_back_to_back(&nv, &mut ar, 80, |_| false);
}

/// A workspace whose direct two-shot pushes every out-of-place message
/// (`NVSH_ALLREDUCE_PUSH_MIN=0`) in `rounds` rounds; in-place calls still pull.
fn push_everywhere_workspace<'nv>(nv: &'nv Nvshmem, rounds: usize) -> nvshmem::Allreduce<'nv> {
    use nvshmem::coll::allreduce::{PUSH_MIN_ENV, PUSH_ROUNDS_ENV};
    std::env::set_var(PUSH_MIN_ENV, "0");
    std::env::set_var(PUSH_ROUNDS_ENV, rounds.to_string());
    let ar = nv.allreduce_workspace(64 << 10);
    std::env::remove_var(PUSH_MIN_ENV);
    std::env::remove_var(PUSH_ROUNDS_ENV);
    ar.unwrap()
}

/// The push two-shot on every op and dtype, out of place, with in-place (pull) calls in between
/// (after each op's pushes) on the same counters. Counts below n 16-byte vectors are all tail; odd counts have one; 3
/// rounds split parts unevenly (and leave small parts' last rounds empty).
fn push_two_shot_every_op_and_dtype(nv: &Nvshmem, counts: &[usize]) {
    let mut ar = push_everywhere_workspace(nv, 3);
    let t = AllreduceAlgo::TwoShot;
    for &count in counts {
        for op in OPS {
            check_every_dtype(nv, &mut ar, count, op, t, 101);
            check::<bf16>(nv, &mut ar, count, op, t, true, 109);
            check::<i64>(nv, &mut ar, count, op, t, true, 110);
        }
    }
}

#[test]
#[ignore = "needs 2 GPUs"]
fn pe2_push_two_shot_every_op_and_dtype_between_pulls() {
    let nv = runtime(2);
    push_two_shot_every_op_and_dtype(&nv, &[1, 7, 13, 1000, 262_147]);
    // One round (no pipelining) and the most rounds, on a large odd count.
    for rounds in [1, 16] {
        let mut ar = push_everywhere_workspace(&nv, rounds);
        for op in OPS {
            check::<f32>(
                &nv,
                &mut ar,
                1_048_579,
                op,
                AllreduceAlgo::TwoShot,
                false,
                100,
            );
        }
    }
}

#[test]
#[ignore = "needs 2 GPUs"]
fn pe2_push_and_pull_back_to_back_with_the_grid_changing_between_calls() {
    // Out-of-place calls push, in-place calls pull; both set the same arrive/done counters to
    // the shared call number, so they may follow each other with no barrier or sync, each with
    // its own grid (and push's per-round counters their own values).
    let nv = runtime(2);
    let mut ar = push_everywhere_workspace(&nv, 16);
    two_shot_back_to_back(&nv, &mut ar, 110, |k| k % 2 == 1);
}

#[test]
#[ignore = "needs 2 GPUs"]
fn pe2_two_shot_through_receive_slots() {
    // Mapped peers take the direct protocol; this covers the slot protocol that two-shot takes
    // across nodes (segmented: 64 KiB slots carry 128 KiB per launch at 2 PEs).
    std::env::set_var(nvshmem::coll::allreduce::DIRECT_MIN_ENV, "1T");
    let nv = runtime(2);
    let mut ar = nv.allreduce_workspace(64 << 10).unwrap();
    std::env::remove_var(nvshmem::coll::allreduce::DIRECT_MIN_ENV);
    for count in [1, 7, 1000, 100_003] {
        for op in OPS {
            let t = AllreduceAlgo::TwoShot;
            check::<f32>(&nv, &mut ar, count, op, t, false, 91);
            check::<bf16>(&nv, &mut ar, count, op, t, true, 92);
            check::<i64>(&nv, &mut ar, count, op, t, false, 93);
        }
    }
}

#[test]
#[ignore = "needs 2 GPUs"]
fn pe2_checked_mode_catches_pes_that_disagree_and_the_runtime_goes_on() {
    std::env::set_var(nvshmem::proto::checked::CHECKED_ENV, "1");
    let nv = runtime(2);
    let me = nv.my_pe();
    let stream = nv.stream().clone();
    let buf = nv.alloc::<f32>(256).unwrap();
    buf.copy_from_host(&[1.0; 256]).unwrap();
    // Counts differ: 100 on PE 0, 200 on PE 1.
    let mut ar = nv.allreduce_workspace(1 << 16).unwrap();
    assert!(ar.is_checked());
    let count = if me == 0 { 100 } else { 200 };
    ar.run_in_place(
        buf.view(..count).unwrap(),
        ReduceOp::Sum,
        AllreduceAlgo::Auto,
        &stream,
    )
    .unwrap();
    let err = ar.sync(&stream).unwrap_err();
    let other = 1 - me;
    match &err {
        nvshmem::Error::CollectiveMismatch {
            pe,
            peer,
            mine,
            theirs,
            ..
        } => {
            assert_eq!((*pe, *peer), (me, other), "{err}");
            assert_eq!(mine, &format!("{count} elements"), "{err}");
            assert_eq!(theirs, &format!("{} elements", 300 - count), "{err}");
        }
        e => panic!("not a mismatch: {e:?}"),
    }
    // Nothing was reduced, and the broken workspace refuses further calls at once.
    assert_eq!(buf.to_vec().unwrap(), vec![1.0; 256]);
    assert!(matches!(
        ar.run_in_place(&buf, ReduceOp::Sum, AllreduceAlgo::Auto, &stream),
        Err(nvshmem::Error::CollectiveMismatch { .. })
    ));
    // Ops differ on a fresh workspace: caught as well.
    let mut ar2 = nv.allreduce_workspace(1 << 16).unwrap();
    let op = if me == 0 {
        ReduceOp::Sum
    } else {
        ReduceOp::Max
    };
    ar2.run_in_place(&buf, op, AllreduceAlgo::OneShot, &stream)
        .unwrap();
    let err = ar2.sync(&stream).unwrap_err().to_string();
    assert!(
        err.contains("f32 sum by oneshot") && err.contains("f32 max by oneshot"),
        "{err}"
    );
    // A mismatch is not a dead peer: barriers and new workspaces still work.
    assert_eq!(nv.peer_failure(), None);
    nv.barrier_all().unwrap();
    let mut ar3 = nv.allreduce_workspace(1 << 16).unwrap();
    ar3.run_in_place(&buf, ReduceOp::Sum, AllreduceAlgo::Auto, &stream)
        .unwrap();
    ar3.sync(&stream).unwrap();
    assert_eq!(buf.to_vec().unwrap(), vec![2.0; 256]);
    nv.barrier_all().unwrap();
}

#[test]
#[ignore = "needs 2 GPUs"]
fn pe2_empty_and_overlapping_calls_are_refused_on_every_pe() {
    let nv = runtime(2);
    let stream = nv.stream().clone();
    let mut ar = nv.allreduce_workspace(1 << 16).unwrap();
    let buf = nv.alloc::<f32>(64).unwrap();
    let empty = buf.view(0..0).unwrap();
    assert!(matches!(
        ar.run(empty, empty, ReduceOp::Sum, AllreduceAlgo::Auto, &stream),
        Err(nvshmem::Error::EmptyCollective { .. })
    ));
    let err = ar
        .run(
            buf.view(0..32).unwrap(),
            buf.view(16..48).unwrap(),
            ReduceOp::Sum,
            AllreduceAlgo::Auto,
            &stream,
        )
        .unwrap_err();
    assert!(matches!(err, nvshmem::Error::Overlap { .. }), "{err:?}");
    // Refused before anything was launched: the workspace works on.
    check::<f32>(
        &nv,
        &mut ar,
        32,
        ReduceOp::Sum,
        AllreduceAlgo::Auto,
        false,
        5,
    );
}

#[test]
#[ignore = "needs 8 GPUs (runs with 8 PEs on fewer, without the team part)"]
fn pe8_every_op_dtype_algorithm_direct_two_shot_and_teams() {
    let nv = runtime(8);
    // Eight PEs time-sharing one GPU spend a scheduling round per wait (214 s on one H100 with
    // all four counts): there, two counts keep the suite within its time limit.
    let counts: &[usize] = if nv.shares_gpus() {
        &[7, 65_537]
    } else {
        &[1, 7, 1000, 65_537]
    };
    every_op_dtype_algorithm(&nv, counts);
    // Large two-shot messages, direct where all 8 are mapped (the grid at its largest).
    let mut ar = nv.allreduce_workspace(1 << 20).unwrap();
    for op in OPS {
        check::<f32>(&nv, &mut ar, 1 << 20, op, AllreduceAlgo::TwoShot, false, 51);
        check::<bf16>(
            &nv,
            &mut ar,
            (3 << 19) + 5,
            op,
            AllreduceAlgo::TwoShot,
            true,
            52,
        );
    }
    let push_counts: &[usize] = if nv.shares_gpus() {
        &[13, 65_537]
    } else {
        &[13, 65_537, (1 << 20) + 3]
    };
    push_two_shot_every_op_and_dtype(&nv, push_counts);
    if nv.shares_gpus() {
        eprintln!("team reductions not run: they need one GPU per PE");
        return;
    }
    // Two teams of 4 (PEs 0-3 and 4-7), one split each, called by every PE.
    let me = nv.my_pe();
    let world = nv.team_world();
    let low = world.split_strided(0, 1, 4).unwrap();
    let high = world.split_strided(4, 1, 4).unwrap();
    let mine = low.as_ref().or(high.as_ref()).unwrap();
    let mut ar4 = mine.allreduce_workspace(64 << 10).unwrap();
    let base = (me / 4 * 4) as usize;
    let members: Vec<usize> = (base..base + 4).collect();
    for algo in ALGOS {
        for op in OPS {
            check_members::<f32>(&nv, &mut ar4, &members, 40_001, op, algo, false, 53);
        }
    }
    nv.barrier_all().unwrap();
}
