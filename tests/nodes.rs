//! Pretend nodes (NVSH_PRETEND_NODE_SIZE) and the node-aware collectives on them: 4 PEs as
//! 2 nodes x 2 on 4 GPUs. Run by scripts/gpu_test.sh (tests named peN_* run as N-PE jobs);
//! each sets the variable before init, so it applies to that process only. Where the PEs share
//! GPUs (fewer than 4), init refuses pretend nodes and the tests skip.
//!
//! Results are compared element by element with the CPU reference of tests/common/reference.rs
//! on the receiving PE, outputs poisoned first (NaN, or 0x5A.. for integers), so an element a
//! step forgets fails. The hierarchical algorithm rounds after each step (the node's partial,
//! then the rail's), so where a partial needs more bits than the type has (`exact_partials`
//! false: bf16 sums past 2^8 quarters) the stated bound of tests/allreduce.rs applies, with one
//! rounding per member; everywhere else results must match exactly.

mod common;

use common::gpu_test;
use common::reference::RefElem;
use half::bf16;
use nvshmem::{AllreduceAlgo, Nvshmem, ReduceOp};

/// The runtime of 4 PEs as pretend nodes of `g`, or None (after a skip line).
fn pretend_runtime(g: i32) -> Option<Nvshmem> {
    common::pretend_runtime(4, g)
}

/// Counts: 1 (no whole shard: only the rest), odd ones (a shard and a rest), a count past one
/// receive slot of the steps (segments), and a large odd one.
const COUNTS: [usize; 8] = [1, 2, 3, 7, 1000, 4097, 65537, (1 << 20) + 3];

gpu_test!(4, pretend_nodes_map_peers_only_inside_them);
/// The host's view: peer mappings only inside a pretend node, node and rail teams of the
/// pretend layout, and every workspace over the world seeing an unmapped member.
fn pretend_nodes_map_peers_only_inside_them() {
    let Some(nv) = pretend_runtime(2) else { return };
    let me = nv.my_pe();
    let layout = nv.node_layout().expect("a node layout under pretend nodes");
    assert_eq!((layout.size(), layout.nodes()), (2, 2));
    assert_eq!(nv.pretend_nodes(), Some(layout));
    let buf = nv.alloc_zeroed::<u64>(16).unwrap();
    for pe in 0..4 {
        let mapped = buf.peer_ptr(pe).unwrap().is_some();
        assert_eq!(mapped, pe / 2 == me / 2, "PE {me} maps PE {pe}: {mapped}");
    }
    let world = nv.team_world();
    let members = |t: &nvshmem::Team<'_>| -> Vec<i32> {
        (0..t.n_pes())
            .map(|r| t.translate_pe(r, &world).unwrap().unwrap())
            .collect()
    };
    let node = nv.team_node();
    assert_eq!(members(&node), [me / 2 * 2, me / 2 * 2 + 1]);
    assert_eq!(members(&nv.team_shared()), members(&node));
    let rail = nv.team_rail().expect("a rail team over 2 nodes");
    assert_eq!(members(&rail), [me % 2, me % 2 + 2]);
    let ar = nv.allreduce_workspace(1 << 20).unwrap();
    assert_eq!(ar.node_layout(), Some(layout));
    let settings = ar.settings();
    assert!(
        settings.contains("hierarchical over 2 nodes of 2 from 0"),
        "{settings}"
    );
    assert_eq!(
        ar.choose(4 << 20, nvshmem::Dtype::F32),
        AllreduceAlgo::Hierarchical
    );
    // A workspace over one pretend node is flat (its members all map each other).
    let ar_node = node.allreduce_workspace(1 << 20).unwrap();
    assert_eq!(ar_node.node_layout(), None);
    drop(ar_node);
    drop(ar);
    nv.barrier_all().unwrap();
}

/// One allreduce of `count` elements by `algo` on the world workspace `ar`, checked on this PE
/// against the CPU reference; returns the algorithm that ran.
#[allow(clippy::too_many_arguments)]
fn check<T: RefElem>(
    nv: &Nvshmem,
    ar: &mut nvshmem::Allreduce<'_>,
    count: usize,
    op: ReduceOp,
    algo: AllreduceAlgo,
    in_place: bool,
    salt: usize,
) -> AllreduceAlgo {
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
    output.copy_from_host(&vec![T::poison(); count]).unwrap();
    let stream = nv.stream().clone();
    let used = if in_place {
        ar.run_in_place(&input, op, algo, &stream).unwrap()
    } else {
        ar.run(&input, &output, op, algo, &stream).unwrap()
    };
    ar.sync(&stream).unwrap();
    let got = if in_place { &input } else { &output }.to_vec().unwrap();
    let rounds = matches!(
        used,
        AllreduceAlgo::Ring | AllreduceAlgo::RecursiveDoubling | AllreduceAlgo::Hierarchical
    );
    for (i, g) in got.iter().enumerate() {
        let vals: Vec<T> = (0..n).map(|p| T::gen(p, i, salt, op)).collect();
        let want = T::reduce(&vals, op);
        assert!(!T::is_poison(want), "the poison is a result: element {i}");
        let ok = if rounds && !T::exact_partials(&vals, op) {
            T::close_after(*g, want, &vals, op, n)
        } else {
            T::same(*g, want)
        };
        assert!(
            ok,
            "{} {op:?} {algo:?} (ran {used:?}) count {count} in_place {in_place}: element {i} \
             is {g:?}, want {want:?}",
            T::NAME
        );
    }
    nv.barrier_all().unwrap();
    used
}

gpu_test!(4, hierarchical_allreduce_two_by_two_against_the_cpu);
/// The hierarchical allreduce at 2 x 2, f32 and bf16, every float op, odd counts, in place and
/// not, asked for and picked by `Auto`; then integers (an integer average stays flat).
fn hierarchical_allreduce_two_by_two_against_the_cpu() {
    let Some(nv) = pretend_runtime(2) else { return };
    // Slots of 64 KiB: the larger counts run in segments inside the steps.
    let mut ar = nv.allreduce_workspace(64 << 10).unwrap();
    let mut salt = 0;
    for &count in &COUNTS {
        let ops: &[ReduceOp] = if count <= 65537 {
            &ReduceOp::ALL
        } else {
            &[ReduceOp::Sum, ReduceOp::Avg]
        };
        for &op in ops {
            for in_place in [false, true] {
                salt += 1;
                let h = AllreduceAlgo::Hierarchical;
                assert_eq!(check::<f32>(&nv, &mut ar, count, op, h, in_place, salt), h);
                assert_eq!(
                    check::<bf16>(&nv, &mut ar, count, op, h, in_place, salt + 1),
                    h
                );
            }
            let auto = AllreduceAlgo::Auto;
            let used = check::<f32>(&nv, &mut ar, count, op, auto, false, salt + 2);
            assert_eq!(used, AllreduceAlgo::Hierarchical, "Auto over 2 nodes");
        }
    }
    for &count in &COUNTS[..6] {
        salt += 1;
        let h = AllreduceAlgo::Hierarchical;
        check::<i32>(&nv, &mut ar, count, ReduceOp::Sum, h, false, salt);
        check::<i64>(&nv, &mut ar, count, ReduceOp::Max, h, true, salt + 1);
        let used = check::<i32>(
            &nv,
            &mut ar,
            count,
            ReduceOp::Avg,
            AllreduceAlgo::Auto,
            false,
            salt + 2,
        );
        assert_ne!(
            used,
            AllreduceAlgo::Hierarchical,
            "an integer average stays flat"
        );
    }
    // Asked for an integer average, every PE refuses before moving anything.
    let buf = nv.alloc_zeroed::<i32>(64).unwrap();
    let stream = nv.stream().clone();
    let err = ar
        .run_in_place(&buf, ReduceOp::Avg, AllreduceAlgo::Hierarchical, &stream)
        .unwrap_err()
        .to_string();
    assert!(err.contains("hierarchical"), "{err}");
    ar.sync(&stream).unwrap();
    nv.barrier_all().unwrap();
}

gpu_test!(4, hierarchical_allreduce_back_to_back_with_one_sync);
/// Forty calls of changing sizes back to back on one stream, alternating hierarchical and flat
/// on the same workspace, one sync at the end: the steps' handshakes and the flat kernels'
/// counters keep the calls apart.
fn hierarchical_allreduce_back_to_back_with_one_sync() {
    let Some(nv) = pretend_runtime(2) else { return };
    let (me, n) = (nv.my_pe() as usize, nv.n_pes() as usize);
    let mut ar = nv.allreduce_workspace(64 << 10).unwrap();
    let stream = nv.stream().clone();
    let calls = 40;
    let count = |k: usize| [1usize, 3, 4097, 65537, 200_001][k % 5];
    let algo = |k: usize| {
        [
            AllreduceAlgo::Hierarchical,
            AllreduceAlgo::OneShot,
            AllreduceAlgo::Hierarchical,
            AllreduceAlgo::TwoShot,
            AllreduceAlgo::Ring,
            AllreduceAlgo::Hierarchical,
            AllreduceAlgo::RecursiveDoubling,
        ][k % 7]
    };
    let val = |pe: usize, i: usize, k: usize| ((pe * 13 + i * 7 + k * 5) % 61) as f32 - 30.0;
    let bufs: Vec<_> = (0..calls)
        .map(|k| {
            let input = nv.alloc::<f32>(count(k)).unwrap();
            input
                .copy_from_host(&(0..count(k)).map(|i| val(me, i, k)).collect::<Vec<_>>())
                .unwrap();
            let output = nv.alloc::<f32>(count(k)).unwrap();
            output.copy_from_host(&vec![f32::NAN; count(k)]).unwrap();
            (input, output)
        })
        .collect();
    nv.barrier_all().unwrap();
    for (k, (input, output)) in bufs.iter().enumerate() {
        ar.run(input, output, ReduceOp::Sum, algo(k), &stream)
            .unwrap();
    }
    ar.sync(&stream).unwrap();
    for (k, (_, output)) in bufs.iter().enumerate() {
        let got = output.to_vec().unwrap();
        for (i, g) in got.iter().enumerate() {
            let want: f32 = (0..n).map(|p| val(p, i, k)).sum();
            assert_eq!(*g, want, "call {k} ({:?}) element {i}", algo(k));
        }
    }
    nv.barrier_all().unwrap();
}

gpu_test!(4, flat_allreduce_across_pretend_nodes_against_the_cpu);
/// Every flat algorithm over the world at 2 x 2: direct stores inside a pretend node, NVSHMEM
/// puts and signals across (the mixed path a job over real nodes takes).
fn flat_allreduce_across_pretend_nodes_against_the_cpu() {
    let Some(nv) = pretend_runtime(2) else { return };
    let mut ar = nv.allreduce_workspace(64 << 10).unwrap();
    let mut salt = 100;
    for &count in &COUNTS {
        for algo in AllreduceAlgo::ALL {
            for op in [ReduceOp::Sum, ReduceOp::Max] {
                salt += 1;
                assert_eq!(
                    check::<f32>(&nv, &mut ar, count, op, algo, false, salt),
                    algo
                );
                if count <= 65537 {
                    check::<bf16>(&nv, &mut ar, count, op, algo, true, salt + 1);
                }
            }
        }
    }
}

gpu_test!(4, pretend_nodes_of_one_pe_are_all_remote);
/// Nodes of 1: no peer is mapped, so every algorithm moves all data with NVSHMEM puts; the
/// hierarchical one degenerates to a rail over all four (no reduce-scatter to speak of).
fn pretend_nodes_of_one_pe_are_all_remote() {
    let Some(nv) = pretend_runtime(1) else { return };
    let buf = nv.alloc_zeroed::<u64>(1).unwrap();
    for pe in 0..4 {
        assert_eq!(buf.peer_ptr(pe).unwrap().is_some(), pe == nv.my_pe());
    }
    let mut ar = nv.allreduce_workspace(64 << 10).unwrap();
    for (k, &count) in COUNTS[..7].iter().enumerate() {
        for algo in [
            AllreduceAlgo::Hierarchical,
            AllreduceAlgo::OneShot,
            AllreduceAlgo::TwoShot,
        ] {
            check::<f32>(&nv, &mut ar, count, ReduceOp::Sum, algo, false, 300 + k);
        }
    }
}
