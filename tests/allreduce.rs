//! Allreduce against a CPU reference: every op x dtype x algorithm, edge counts, in place,
//! segmented messages, back-to-back calls, teams, CUDA graph replay; 2 PEs on two GPUs, 3 to 6
//! PEs on one GPU (non-powers of two exercise recursive doubling's fold-in).
//! Run by scripts/gpu_test.sh (tests named peN_* run as N-PE jobs).
//!
//! The reference reduces in PE order 0..n-1 in the kernels' accumulation type (f32 for f16 and
//! bf16, wrapping arithmetic for integers). Float inputs are quarters (products: quarters from
//! 0.5 to 2), so sums and products of up to 8 of them are exact in f32 and f64, whatever the
//! order, and avg divides that exact value by n as the kernels do (one correctly rounded
//! division, then the same conversion): results must match exactly. The one place rounding
//! truly happens is ring and recursive doubling on f16/bf16, which keep partial results in the
//! element type between hops, when a partial needs more bits than the type has
//! (`exact_partials`); only there a stated bound applies (`close_after`).
//!
//! Outputs are poisoned before each call with a value no case can produce (NaN for floats,
//! 0x5A5A... for integers; `check_members` asserts it is unreachable), so an element a kernel
//! forgets to write fails.

mod common;

use common::reference::RefElem;
use common::{gpu_test, runtime};
use half::{bf16, f16};
use nvshmem::{AllreduceAlgo, Nvshmem, ReduceOp};

const OPS: [ReduceOp; 5] = ReduceOp::ALL;
const ALGOS: [AllreduceAlgo; 5] = [
    AllreduceAlgo::OneShot,
    AllreduceAlgo::TwoShot,
    AllreduceAlgo::Ring,
    AllreduceAlgo::RecursiveDoubling,
    AllreduceAlgo::Auto,
];

/// The poison is no result of any case. Every PE's input seed depends on the element and salt
/// only through (i * 31 + salt * 131 + i * i % 101) mod 97, and 131 is prime to 97, so salts 0 to
/// 96 at element 0 give every input any test can see: the sweep is exhaustive.
#[test]
fn the_poison_is_no_reachable_result() {
    fn sweep<T: RefElem>() {
        for n in 1..=8 {
            for op in OPS {
                for salt in 0..97 {
                    let vals: Vec<T> = (0..n).map(|p| T::gen(p, 0, salt, op)).collect();
                    let want = T::reduce(&vals, op);
                    assert!(
                        !T::is_poison(want),
                        "{} {op:?} over {n} PEs, salt {salt}: the result is the poison",
                        T::NAME
                    );
                }
            }
        }
    }
    sweep::<f32>();
    sweep::<f64>();
    sweep::<f16>();
    sweep::<bf16>();
    sweep::<i32>();
    sweep::<i64>();
    sweep::<u32>();
    sweep::<u64>();
}

/// Where no partial rounds, one ulp off fails the check (the bound once allowed it); where a
/// 16-bit ring keeps rounded partials, the stated bound admits one rounding per hop.
#[test]
fn an_ulp_off_fails_unless_partials_round() {
    // 2 PEs, f16 and bf16 sums: quarters up to 24 in magnitude, exact in either type.
    let vals = [bf16::from_f32(11.75), bf16::from_f32(-3.5)];
    let want = bf16::reduce(&vals, ReduceOp::Sum);
    let off = bf16::from_bits(want.to_bits() + 1);
    assert!(bf16::exact_partials(&vals, ReduceOp::Sum));
    assert!(bf16::same(want, want) && !bf16::same(off, want));
    let vals = [f16::from_f32(-11.25), f16::from_f32(0.5)];
    let want = f16::reduce(&vals, ReduceOp::Sum);
    assert!(f16::exact_partials(&vals, ReduceOp::Sum));
    assert!(!f16::same(f16::from_bits(want.to_bits() + 1), want));
    // 8 PEs of bf16 near 12: partial sums pass 64 (8 significand bits hold quarters to 64),
    // so ring partials round; the bound takes one ulp of the largest partial per hop.
    let vals: Vec<bf16> = (0..8).map(|p| bf16::from_f32(11.75 - p as f32)).collect();
    assert!(!bf16::exact_partials(&vals, ReduceOp::Sum));
    let want = bf16::reduce(&vals, ReduceOp::Sum);
    let off = bf16::from_bits(want.to_bits() + 1);
    assert!(bf16::close_after(off, want, &vals, ReduceOp::Sum, 8));
    // Poison never passes, bound or not.
    assert!(!bf16::close_after(
        bf16::poison(),
        want,
        &vals,
        ReduceOp::Sum,
        8
    ));
}

/// Runs one allreduce of `count` elements and checks every element on this PE; returns the
/// algorithm that ran.
fn check<T: RefElem>(
    nv: &Nvshmem,
    ar: &mut nvshmem::Allreduce<'_>,
    count: usize,
    op: ReduceOp,
    algo: AllreduceAlgo,
    in_place: bool,
    salt: usize,
) -> AllreduceAlgo {
    let members: Vec<usize> = (0..nv.n_pes() as usize).collect();
    let used = check_members::<T>(nv, ar, &members, count, op, algo, in_place, salt);
    nv.barrier_all().unwrap();
    used
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
) -> AllreduceAlgo {
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
    output.copy_from_host(&vec![T::poison(); count]).unwrap();
    let stream = nv.stream().clone();
    let used = if in_place {
        ar.run_in_place(&input, op, algo, &stream).unwrap()
    } else {
        ar.run(&input, &output, op, algo, &stream).unwrap()
    };
    stream.synchronize().unwrap();
    // A wait that ran out of time leaves the output as it was: say so (the typed timeout)
    // rather than report the poison it left as a wrong value.
    ar.check().unwrap();
    let got = if in_place {
        input.to_vec()
    } else {
        output.to_vec()
    }
    .unwrap();
    for (i, g) in got.iter().enumerate() {
        let vals: Vec<T> = members.iter().map(|&p| T::gen(p, i, salt, op)).collect();
        let want = T::reduce(&vals, op);
        assert!(
            !T::is_poison(want),
            "the poison is a result here: {} {op:?} element {i}",
            T::NAME
        );
        // Only ring and recursive doubling keep rounded partials (one per hop).
        let hops = matches!(used, AllreduceAlgo::Ring | AllreduceAlgo::RecursiveDoubling);
        let ok = if hops && !T::exact_partials(&vals, op) {
            T::close_after(*g, want, &vals, op, members.len())
        } else {
            T::same(*g, want)
        };
        assert!(
            ok,
            "{} {op:?} {algo:?} (ran {used:?}) count {count} in_place {in_place} members \
             {members:?}: element {i} is {g:?}, want {want:?}",
            T::NAME
        );
    }
    used
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

gpu_test!(2, every_op_dtype_and_algorithm_against_the_cpu);
fn every_op_dtype_and_algorithm_against_the_cpu() {
    let nv = runtime(2);
    every_op_dtype_algorithm(&nv, &[1, 2, 7, 1000, 65_537]);
}

gpu_test!(2, in_place_segmented_and_large_messages);
fn in_place_segmented_and_large_messages() {
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

/// `calls` allreduces issued back to back on one stream with no sync, barrier or host check in
/// between, the k-th with algorithm `algos[k % len]`, its own input (salt `salt + k`) and its own
/// poisoned output, counts cycling through one element, a low-latency one-shot size and a
/// message of several 64 KiB slot segments; then one sync, and every call's output checked.
fn back_to_back(nv: &Nvshmem, algos: &[AllreduceAlgo], calls: usize, salt: usize) {
    let (me, n) = (nv.my_pe() as usize, nv.n_pes() as usize);
    let mut ar = nv.allreduce_workspace(64 << 10).unwrap();
    let stream = nv.stream().clone();
    let counts = [1, 3001, 40_003];
    let mut bufs = Vec::new();
    for k in 0..calls {
        let count = counts[k % counts.len()];
        let input = nv.alloc::<i64>(count).unwrap();
        let output = nv.alloc::<i64>(count).unwrap();
        let data: Vec<i64> = (0..count)
            .map(|i| i64::gen(me, i, salt + k, ReduceOp::Sum))
            .collect();
        input.copy_from_host(&data).unwrap();
        output.copy_from_host(&vec![i64::poison(); count]).unwrap();
        bufs.push((input, output));
    }
    nv.barrier_all().unwrap();
    let mut used = Vec::new();
    for (k, (input, output)) in bufs.iter().enumerate() {
        let algo = algos[k % algos.len()];
        used.push(ar.run(input, output, ReduceOp::Sum, algo, &stream).unwrap());
    }
    ar.sync(&stream).unwrap();
    for (k, (_, output)) in bufs.iter().enumerate() {
        assert_eq!(used[k], algos[k % algos.len()], "call {k}");
        for (i, g) in output.to_vec().unwrap().iter().enumerate() {
            let want = (0..n).fold(0i64, |a, p| {
                a.wrapping_add(i64::gen(p, i, salt + k, ReduceOp::Sum))
            });
            assert_eq!(*g, want, "call {k} ({:?}), element {i}", used[k]);
        }
    }
    nv.barrier_all().unwrap();
}

gpu_test!(
    2,
    back_to_back_calls_of_each_algorithm_and_a_mix_with_one_sync
);
fn back_to_back_calls_of_each_algorithm_and_a_mix_with_one_sync() {
    let nv = runtime(2);
    for (k, algo) in AllreduceAlgo::ALL.into_iter().enumerate() {
        back_to_back(&nv, &[algo], 60, 200 + 100 * k);
    }
    // Five in the cycle (one-shot twice) against three counts: each algorithm meets each count.
    let mix = [
        AllreduceAlgo::OneShot,
        AllreduceAlgo::TwoShot,
        AllreduceAlgo::Ring,
        AllreduceAlgo::RecursiveDoubling,
        AllreduceAlgo::OneShot,
    ];
    back_to_back(&nv, &mix, 150, 700);
}

gpu_test!(2, allreduce_as_the_environment_chooses);
/// Allreduce with `Auto` on every op, a few dtypes and counts, in place and not, under whatever
/// NVSH_ALLREDUCE_* variables the environment holds: scripts/sanitize.sh runs it once per
/// protocol. NVSH_TEST_EXPECT_ALGO (an algorithm name) and NVSH_TEST_EXPECT_SETTINGS (a part
/// of `Allreduce::settings()`), when set, are asserted, so that a forcing variable that stopped
/// working fails the run instead of sanitising the default protocol again.
fn allreduce_as_the_environment_chooses() {
    let nv = runtime(2);
    let mut ar = nv.allreduce_workspace(64 << 10).unwrap();
    let settings = ar.settings();
    if let Ok(want) = std::env::var("NVSH_TEST_EXPECT_SETTINGS") {
        assert!(
            settings.contains(&want),
            "settings {settings:?}, want {want:?}"
        );
    }
    let want = std::env::var("NVSH_TEST_EXPECT_ALGO")
        .ok()
        .map(|a| AllreduceAlgo::parse(&a).expect("NVSH_TEST_EXPECT_ALGO: an algorithm name"));
    let auto = AllreduceAlgo::Auto;
    // 20,003 f32 fill more than one 64 KiB slot: the slot protocols segment them.
    for count in [7, 1000, 20_003] {
        for op in OPS {
            let used = [
                check::<f32>(&nv, &mut ar, count, op, auto, false, 120),
                check::<bf16>(&nv, &mut ar, count, op, auto, false, 121),
                check::<i64>(&nv, &mut ar, count, op, auto, true, 122),
            ];
            if let Some(want) = want {
                assert_eq!(used, [want; 3], "{settings}");
            }
        }
    }
}

gpu_test!(2, a_thousand_back_to_back_calls_with_changing_data);
fn a_thousand_back_to_back_calls_with_changing_data() {
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
        ar.check().unwrap();
        let got = output.to_vec().unwrap();
        for (i, g) in got.iter().enumerate() {
            let want: i64 = (0..n).map(|p| i64::gen(p, i, it, ReduceOp::Sum)).sum();
            assert_eq!(*g, want, "call {it}, element {i}");
        }
    }
    nv.barrier_all().unwrap();
}

gpu_test!(2, mismatched_lengths_are_refused);
fn mismatched_lengths_are_refused() {
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

gpu_test!(1, single_pe_allreduce_is_the_identity_of_the_op);
fn single_pe_allreduce_is_the_identity_of_the_op() {
    let nv = runtime(1);
    every_op_dtype_algorithm(&nv, &[1, 1000]);
}

// Needs 1 GPU (3 PEs on it).
gpu_test!(3, on_one_gpu_every_op_and_dtype);
fn on_one_gpu_every_op_and_dtype() {
    let nv = runtime(3);
    every_op_dtype_algorithm(&nv, &[5, 1000]);
}

// Needs 1 GPU (4 PEs on it).
// (Named apart from the 3-PE test: one name per function.)
gpu_test!(4, on_one_gpu_every_op_dtype_and_push);
fn on_one_gpu_every_op_dtype_and_push() {
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

// Needs 1 GPU (5 PEs on it).
gpu_test!(5, on_one_gpu_every_op_and_algorithm);
fn on_one_gpu_every_op_and_algorithm() {
    let nv = runtime(5);
    every_op_and_algorithm_some_dtypes(&nv);
}

// Needs 1 GPU (6 PEs on it).
gpu_test!(6, on_one_gpu_every_op_and_algorithm_two_to_fold_in);
fn on_one_gpu_every_op_and_algorithm_two_to_fold_in() {
    let nv = runtime(6);
    every_op_and_algorithm_some_dtypes(&nv);
}

// Needs 1 GPU (4 PEs on it).
gpu_test!(4, teams_reduce_only_over_their_members);
fn teams_reduce_only_over_their_members() {
    let nv = runtime(4);
    if nv.shares_gpus() {
        // NVSHMEM aborts the process on a team split with several PEs per GPU ("limited
        // MPG"); the runtime must refuse it with an error instead. The reductions need 4 GPUs.
        let err = nv.team_world().split_strided(0, 2, 2).unwrap_err();
        assert!(matches!(err, nvshmem::Error::TeamSplit { .. }), "{err}");
        common::skip("team reductions not run: they need one GPU per PE (4-GPU machine)");
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

gpu_test!(2, replays_of_a_captured_cuda_graph_reduce_fresh_data);
fn replays_of_a_captured_cuda_graph_reduce_fresh_data() {
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    let nv = runtime(2);
    let (me, n) = (nv.my_pe() as usize, nv.n_pes() as usize);
    let mut ar = nv.allreduce_workspace(256 << 10).unwrap();
    let stream = nv.stream().clone();
    // 1M f32 = 4 MiB: several segments per call. Each captured call writes an output of its
    // own, checked after every replay: with one shared output a broken two-shot replay would
    // be overwritten by the recursive doubling before anyone looked.
    let count = 1 << 20;
    let input = nv.alloc::<f32>(count).unwrap();
    let out_two_shot = nv.alloc::<f32>(count).unwrap();
    let out_rd = nv.alloc::<f32>(count).unwrap();
    let small = nv.alloc::<i64>(1001).unwrap();
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .unwrap();
    ar.run(
        &input,
        &out_two_shot,
        ReduceOp::Sum,
        AllreduceAlgo::TwoShot,
        &stream,
    )
    .unwrap();
    ar.run_in_place(&small, ReduceOp::Max, AllreduceAlgo::OneShot, &stream)
        .unwrap();
    ar.run(
        &input,
        &out_rd,
        ReduceOp::Sum,
        AllreduceAlgo::RecursiveDoubling,
        &stream,
    )
    .unwrap();
    let graph = stream
        .end_capture(CUgraphInstantiate_flags(0))
        .unwrap()
        .expect("a graph was captured");
    let poison = vec![f32::poison(); count];
    for it in 0..50usize {
        let data: Vec<f32> = (0..count)
            .map(|i| f32::gen(me, i, it, ReduceOp::Sum))
            .collect();
        input.copy_from_host(&data).unwrap();
        let ints: Vec<i64> = (0..1001)
            .map(|i| i64::gen(me, i, it, ReduceOp::Max))
            .collect();
        small.copy_from_host(&ints).unwrap();
        // A replay that writes nothing leaves the poison, not the previous replay's sums.
        out_two_shot.copy_from_host(&poison).unwrap();
        out_rd.copy_from_host(&poison).unwrap();
        graph.launch().unwrap();
        stream.synchronize().unwrap();
        for (what, output) in [("two-shot", &out_two_shot), ("rd", &out_rd)] {
            let got = output.to_vec().unwrap();
            for (i, g) in got.iter().enumerate() {
                let vals: Vec<f32> = (0..n).map(|p| f32::gen(p, i, it, ReduceOp::Sum)).collect();
                let want = f32::reduce(&vals, ReduceOp::Sum);
                assert!(
                    f32::same(*g, want),
                    "replay {it}, {what} element {i}: {g} want {want}"
                );
            }
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

gpu_test!(2, oneshot_without_the_low_latency_protocol);
fn oneshot_without_the_low_latency_protocol() {
    // Small one-shot messages normally take the low-latency protocol; this covers the
    // signal-based path they take when it is off (and across nodes).
    std::env::set_var(nvshmem::ALLREDUCE_LL_MAX_ENV, "0");
    let nv = runtime(2);
    let mut ar = nv.allreduce_workspace(1 << 20).unwrap();
    std::env::remove_var(nvshmem::ALLREDUCE_LL_MAX_ENV);
    // The variable took: else this would test the low-latency protocol again.
    assert!(
        ar.settings().starts_with("low-latency one-shot off;"),
        "{}",
        ar.settings()
    );
    let one = AllreduceAlgo::OneShot;
    for count in [1, 7, 1000] {
        for op in OPS {
            assert_eq!(check::<f32>(&nv, &mut ar, count, op, one, false, 51), one);
            assert_eq!(check::<f16>(&nv, &mut ar, count, op, one, true, 52), one);
            assert_eq!(check::<u64>(&nv, &mut ar, count, op, one, false, 53), one);
        }
    }
}

gpu_test!(2, team_workspaces_reduce_over_their_members_only);
fn team_workspaces_reduce_over_their_members_only() {
    let nv = runtime(2);
    if nv.shares_gpus() {
        // NVSHMEM refuses team splits with several PEs per GPU; the runtime says so.
        let err = nv.team_world().split_strided(0, 1, 2).unwrap_err();
        assert!(matches!(err, nvshmem::Error::TeamSplit { .. }), "{err}");
        common::skip("team workspaces not run: they need one GPU per PE (2-GPU machine)");
        return;
    }
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

gpu_test!(2, direct_two_shot_every_op_and_dtype_on_large_odd_counts);
fn direct_two_shot_every_op_and_dtype_on_large_odd_counts() {
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

gpu_test!(
    2,
    direct_two_shot_back_to_back_with_the_grid_changing_between_calls
);
fn direct_two_shot_back_to_back_with_the_grid_changing_between_calls() {
    // Each call's grid follows its size (1 to 128 blocks), so a block's counters skip the calls
    // too small to use it; calls go back to back with no barrier or sync in between.
    let nv = runtime(2);
    let mut ar = nv.allreduce_workspace(64 << 10).unwrap();
    two_shot_back_to_back(&nv, &mut ar, 80, |_| false);
}

/// A workspace whose direct two-shot pushes every out-of-place message
/// (`NVSH_ALLREDUCE_PUSH_MIN=0`) in `rounds` rounds; in-place calls still pull.
fn push_everywhere_workspace<'nv>(nv: &'nv Nvshmem, rounds: usize) -> nvshmem::Allreduce<'nv> {
    use nvshmem::{ALLREDUCE_PUSH_MIN_ENV, ALLREDUCE_PUSH_ROUNDS_ENV};
    std::env::set_var(ALLREDUCE_PUSH_MIN_ENV, "0");
    std::env::set_var(ALLREDUCE_PUSH_ROUNDS_ENV, rounds.to_string());
    let ar = nv.allreduce_workspace(64 << 10);
    std::env::remove_var(ALLREDUCE_PUSH_MIN_ENV);
    std::env::remove_var(ALLREDUCE_PUSH_ROUNDS_ENV);
    let ar = ar.unwrap();
    // The variables took: else out-of-place calls would pull, and the push go untested.
    let want = format!("push from 0 out of place, {rounds} rounds)");
    assert!(ar.settings().contains(&want), "{}", ar.settings());
    ar
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

gpu_test!(2, push_two_shot_every_op_and_dtype_between_pulls);
fn push_two_shot_every_op_and_dtype_between_pulls() {
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

gpu_test!(
    2,
    push_and_pull_back_to_back_with_the_grid_changing_between_calls
);
fn push_and_pull_back_to_back_with_the_grid_changing_between_calls() {
    // Out-of-place calls push, in-place calls pull; both set the same arrive/done counters to
    // the shared call number, so they may follow each other with no barrier or sync, each with
    // its own grid (and push's per-round counters their own values).
    let nv = runtime(2);
    let mut ar = push_everywhere_workspace(&nv, 16);
    two_shot_back_to_back(&nv, &mut ar, 110, |k| k % 2 == 1);
}

gpu_test!(2, two_shot_through_receive_slots);
fn two_shot_through_receive_slots() {
    // Mapped peers take the direct protocol; this covers the slot protocol that two-shot takes
    // across nodes (segmented: 64 KiB slots carry 128 KiB per launch at 2 PEs).
    std::env::set_var(nvshmem::ALLREDUCE_DIRECT_MIN_ENV, "1T");
    let nv = runtime(2);
    let mut ar = nv.allreduce_workspace(64 << 10).unwrap();
    std::env::remove_var(nvshmem::ALLREDUCE_DIRECT_MIN_ENV);
    // The variable took (1T = 1024G): else every call here would take the direct protocol.
    assert!(
        ar.settings().contains("direct two-shot from 1024G "),
        "{}",
        ar.settings()
    );
    let t = AllreduceAlgo::TwoShot;
    for count in [1, 7, 1000, 100_003] {
        for op in OPS {
            assert_eq!(check::<f32>(&nv, &mut ar, count, op, t, false, 91), t);
            assert_eq!(check::<bf16>(&nv, &mut ar, count, op, t, true, 92), t);
            assert_eq!(check::<i64>(&nv, &mut ar, count, op, t, false, 93), t);
        }
    }
}

gpu_test!(
    2,
    checked_mode_catches_pes_that_disagree_and_the_runtime_goes_on
);
fn checked_mode_catches_pes_that_disagree_and_the_runtime_goes_on() {
    std::env::set_var(nvshmem::CHECKED_ENV, "1");
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

gpu_test!(2, empty_and_overlapping_calls_are_refused_on_every_pe);
fn empty_and_overlapping_calls_are_refused_on_every_pe() {
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

// Needs 8 GPUs (runs with 8 PEs on fewer, without the team part).
gpu_test!(8, every_op_dtype_algorithm_direct_two_shot_and_teams);
fn every_op_dtype_algorithm_direct_two_shot_and_teams() {
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
        common::skip("team part not run: it needs one GPU per PE (8-GPU machine)");
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
