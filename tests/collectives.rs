//! The collective family (broadcast, allgather, alltoall, reduce-scatter, reduce) against the
//! CPU reference (tests/common/reference.rs): every element on the receiving PE, outputs
//! poisoned before each call, exact comparison (data movement copies; the reductions reduce in
//! rank order in one pass, as the reference does, on values whose results are exact). Counts 1,
//! 7, 1000, 65537 and 1M + 1; every root; in place; segmented reductions; graph capture and
//! replay with fresh data; 1000 back-to-back calls mixing them; NVSHMEM puts only
//! (NVSH_NO_DIRECT); checked-mode mismatches; refused calls; the low-latency lines and the
//! split protocol of broadcast and reduce, each at the sizes where it starts and stops.
//! Run by scripts/gpu_test.sh (tests named peN_* run as N-PE jobs).

mod common;

use common::data::{expect, filled, me_n};
use common::reference::{RefElem, Tag};
use common::{gpu_test, runtime};
use half::{bf16, f16};
use nvshmem::{
    Allgather, Allgatherv, Alltoall, Broadcast, Error, FamilyProtocol, Nvshmem, Parts, Reduce,
    ReduceOp, ReduceScatter, TeamBarrier,
};
use std::time::{Duration, Instant};

const COUNTS: [usize; 5] = [1, 7, 1000, 65537, (1 << 20) + 1];
/// Small slots, so that reductions of 65537 elements and more run in segments.
const SLOT_BYTES: usize = 64 << 10;

/// One workspace of each collective over the world (reductions with [`SLOT_BYTES`] slots).
struct Family<'nv> {
    bc: Broadcast<'nv>,
    ag: Allgather<'nv>,
    a2a: Alltoall<'nv>,
    rs: ReduceScatter<'nv>,
    r: Reduce<'nv>,
}

impl<'nv> Family<'nv> {
    fn world(nv: &'nv Nvshmem) -> Family<'nv> {
        Family {
            bc: Broadcast::world(nv).unwrap(),
            ag: Allgather::world(nv).unwrap(),
            a2a: Alltoall::world(nv).unwrap(),
            rs: ReduceScatter::world(nv, SLOT_BYTES).unwrap(),
            r: Reduce::world(nv, SLOT_BYTES).unwrap(),
        }
    }
}

fn broadcast<T: Tag>(nv: &Nvshmem, bc: &mut Broadcast<'_>, count: usize, root: usize, salt: usize) {
    let (me, _) = me_n(nv);
    let stream = nv.stream().clone();
    let input = filled(nv, count, |i| T::tag(me, i, salt));
    let output = filled(nv, count, |_| T::poison());
    bc.run(&input, &output, root as i32, &stream).unwrap();
    bc.sync(&stream).unwrap();
    let what = format!("broadcast {} x {count} from {root}", T::NAME);
    expect(&what, &output.to_vec().unwrap(), |i| T::tag(root, i, salt));
    // In place at the root: its buffer is both; the others receive into theirs.
    let buf = filled(nv, count, |i| {
        if me == root {
            T::tag(me, i, salt + 1)
        } else {
            T::poison()
        }
    });
    bc.run(&buf, &buf, root as i32, &stream).unwrap();
    bc.sync(&stream).unwrap();
    expect(&format!("{what}, in place"), &buf.to_vec().unwrap(), |i| {
        T::tag(root, i, salt + 1)
    });
    nv.barrier_all().unwrap();
}

fn allgather<T: Tag>(nv: &Nvshmem, ag: &mut Allgather<'_>, count: usize, salt: usize) {
    let (me, n) = me_n(nv);
    let stream = nv.stream().clone();
    let input = filled(nv, count, |i| T::tag(me, i, salt));
    let output = filled(nv, n * count, |_| T::poison());
    ag.run(&input, &output, &stream).unwrap();
    ag.sync(&stream).unwrap();
    let what = format!("allgather {} x {count}", T::NAME);
    expect(&what, &output.to_vec().unwrap(), |i| {
        T::tag(i / count, i % count, salt)
    });
    // In place: the own block of the output is the input.
    let buf = filled(nv, n * count, |i| {
        if i / count == me {
            T::tag(me, i % count, salt + 1)
        } else {
            T::poison()
        }
    });
    ag.run(
        buf.view(me * count..(me + 1) * count).unwrap(),
        &buf,
        &stream,
    )
    .unwrap();
    ag.sync(&stream).unwrap();
    expect(&format!("{what}, in place"), &buf.to_vec().unwrap(), |i| {
        T::tag(i / count, i % count, salt + 1)
    });
    nv.barrier_all().unwrap();
}

fn alltoall<T: Tag>(nv: &Nvshmem, a2a: &mut Alltoall<'_>, count: usize, salt: usize) {
    let (me, n) = me_n(nv);
    let stream = nv.stream().clone();
    // Element j of block r of PE p's input: tag(p, r * count + j).
    let input = filled(nv, n * count, |i| T::tag(me, i, salt));
    let output = filled(nv, n * count, |_| T::poison());
    a2a.run(&input, &output, &stream).unwrap();
    a2a.sync(&stream).unwrap();
    // Block s of my output is block [me] of PE s's input.
    expect(
        &format!("alltoall {} x {count}", T::NAME),
        &output.to_vec().unwrap(),
        |i| T::tag(i / count, me * count + i % count, salt),
    );
    nv.barrier_all().unwrap();
}

/// The reference reduction of element `i` over PEs `0..n`.
fn reduced<T: RefElem>(n: usize, i: usize, salt: usize, op: ReduceOp) -> T {
    let vals: Vec<T> = (0..n).map(|p| T::gen(p, i, salt, op)).collect();
    let want = T::reduce(&vals, op);
    assert!(!T::is_poison(want), "the poison is a result here");
    want
}

fn check_reduced<T: RefElem>(what: &str, got: &[T], want: impl Fn(usize) -> T) {
    for (i, g) in got.iter().enumerate() {
        let w = want(i);
        assert!(T::same(*g, w), "{what}: element {i} is {g:?}, want {w:?}");
    }
}

fn reduce_scatter<T: RefElem>(
    nv: &Nvshmem,
    rs: &mut ReduceScatter<'_>,
    count: usize,
    op: ReduceOp,
    salt: usize,
) {
    let (me, n) = me_n(nv);
    let stream = nv.stream().clone();
    // Element j of block r of PE p's input is gen(p, r * count + j).
    let input = filled(nv, n * count, |i| T::gen(me, i, salt, op));
    let output = filled(nv, count, |_| T::poison());
    rs.run(&input, &output, op, &stream).unwrap();
    rs.sync(&stream).unwrap();
    let what = format!("reduce-scatter {} {op:?} x {count}", T::NAME);
    let want = |j: usize| reduced::<T>(n, me * count + j, salt, op);
    check_reduced(&what, &output.to_vec().unwrap(), want);
    // In place: the output is the own block of the input.
    rs.run(
        &input,
        input.view(me * count..(me + 1) * count).unwrap(),
        op,
        &stream,
    )
    .unwrap();
    rs.sync(&stream).unwrap();
    let got = input.to_vec().unwrap();
    check_reduced(
        &format!("{what}, in place"),
        &got[me * count..(me + 1) * count],
        want,
    );
    nv.barrier_all().unwrap();
}

fn reduce<T: RefElem>(
    nv: &Nvshmem,
    r: &mut Reduce<'_>,
    count: usize,
    op: ReduceOp,
    root: usize,
    salt: usize,
) {
    let (me, n) = me_n(nv);
    let stream = nv.stream().clone();
    let input = filled(nv, count, |i| T::gen(me, i, salt, op));
    let output = filled(nv, count, |_| T::poison());
    r.run(&input, &output, op, root as i32, &stream).unwrap();
    r.sync(&stream).unwrap();
    let got = output.to_vec().unwrap();
    let what = format!("reduce {} {op:?} x {count} to {root}", T::NAME);
    if me == root {
        check_reduced(&what, &got, |i| reduced::<T>(n, i, salt, op));
    } else {
        // Only the root's output is written.
        assert!(
            got.iter().all(|g| T::is_poison(*g)),
            "{what}: a non-root output was written"
        );
    }
    // In place.
    r.run(&input, &input, op, root as i32, &stream).unwrap();
    r.sync(&stream).unwrap();
    if me == root {
        check_reduced(
            &format!("{what}, in place"),
            &input.to_vec().unwrap(),
            |i| reduced::<T>(n, i, salt, op),
        );
    }
    nv.barrier_all().unwrap();
}

/// Every data-movement collective for element type T at `count`, every root.
fn move_type<T: Tag>(nv: &Nvshmem, f: &mut Family<'_>, count: usize, salt: usize) {
    for root in 0..nv.n_pes() as usize {
        broadcast::<T>(nv, &mut f.bc, count, root, salt + root);
    }
    allgather::<T>(nv, &mut f.ag, count, salt);
    alltoall::<T>(nv, &mut f.a2a, count, salt);
}

/// Both reductions for T and `op` at `count`, every root.
fn reduce_type<T: RefElem>(
    nv: &Nvshmem,
    f: &mut Family<'_>,
    count: usize,
    op: ReduceOp,
    salt: usize,
) {
    reduce_scatter::<T>(nv, &mut f.rs, count, op, salt);
    for root in 0..nv.n_pes() as usize {
        reduce::<T>(nv, &mut f.r, count, op, root, salt + root);
    }
}

/// Every collective at every count: data movement of u8 and f32 at every count, bf16 and i64
/// up to 65537, the other five types up to 1000; reductions with every op and dtype up to 65537
/// elements, and sums of f32 / bf16 / i64 at 1M + 1.
fn every_collective(nv: &Nvshmem) {
    every_collective_up_to(nv, usize::MAX)
}

/// [`every_collective`] at the counts up to `max_count`.
fn every_collective_up_to(nv: &Nvshmem, max_count: usize) {
    let f = &mut Family::world(nv);
    for (k, &count) in COUNTS.iter().enumerate() {
        if count > max_count {
            continue;
        }
        move_type::<u8>(nv, f, count, k);
        move_type::<f32>(nv, f, count, k + 1);
        if count <= 65537 {
            move_type::<bf16>(nv, f, count, k + 2);
            move_type::<i64>(nv, f, count, k + 3);
        }
        if count <= 1000 {
            move_type::<f16>(nv, f, count, k + 4);
            move_type::<f64>(nv, f, count, k + 5);
            move_type::<i32>(nv, f, count, k + 6);
            move_type::<u32>(nv, f, count, k + 7);
            move_type::<u64>(nv, f, count, k + 8);
        }
        let ops: &[ReduceOp] = if count <= 65537 {
            &ReduceOp::ALL
        } else {
            &[ReduceOp::Sum]
        };
        for (o, &op) in ops.iter().enumerate() {
            let salt = k * 10 + o;
            reduce_type::<f32>(nv, f, count, op, salt);
            reduce_type::<bf16>(nv, f, count, op, salt + 1);
            reduce_type::<i64>(nv, f, count, op, salt + 2);
            if count <= 65537 {
                reduce_type::<f64>(nv, f, count, op, salt + 3);
                reduce_type::<f16>(nv, f, count, op, salt + 4);
                reduce_type::<i32>(nv, f, count, op, salt + 5);
                reduce_type::<u32>(nv, f, count, op, salt + 6);
                reduce_type::<u64>(nv, f, count, op, salt + 7);
            }
        }
    }
}

gpu_test!(1, every_collective_on_one_pe);
fn every_collective_on_one_pe() {
    every_collective(&runtime(1));
}

gpu_test!(2, every_collective_dtype_count_and_root);
fn every_collective_dtype_count_and_root() {
    every_collective(&runtime(2));
}

gpu_test!(3, every_collective_on_three_pes);
fn every_collective_on_three_pes() {
    every_collective(&runtime(3));
}

gpu_test!(4, every_collective_on_four_pes);
/// Up to 65537 elements: four PEs sharing one GPU take turns in time slices of milliseconds per
/// call, and the 1M-element cases alone would take minutes there.
fn every_collective_on_four_pes() {
    every_collective_up_to(&runtime(4), 65537);
}

gpu_test!(4, every_collective_across_pretend_nodes);
/// 4 PEs as 2 pretend nodes x 2 (NVSH_PRETEND_NODE_SIZE): direct stores inside a node, NVSHMEM
/// puts and signals across, in one call (docs/nodes.md).
fn every_collective_across_pretend_nodes() {
    let Some(nv) = common::pretend_runtime(4, 2) else {
        return;
    };
    every_collective_up_to(&nv, 65537);
}

gpu_test!(2, every_collective_between_two_pretend_nodes);
/// 2 PEs as 2 pretend nodes of 1: every byte between them by NVSHMEM puts and signals, as
/// NVSH_NO_DIRECT, but decided per peer (docs/nodes.md).
fn every_collective_between_two_pretend_nodes() {
    let Some(nv) = common::pretend_runtime(2, 1) else {
        return;
    };
    every_collective_up_to(&nv, 65537);
}

gpu_test!(2, every_collective_through_nvshmem_puts);
/// NVSHMEM puts even to mapped peers: the path across nodes.
fn every_collective_through_nvshmem_puts() {
    std::env::set_var(nvshmem::NO_DIRECT_ENV, "1");
    let nv = runtime(2);
    let f = &mut Family::world(&nv);
    for (k, &count) in COUNTS.iter().enumerate() {
        move_type::<u8>(&nv, f, count, k);
        move_type::<f32>(&nv, f, count, k + 1);
        for op in [ReduceOp::Sum, ReduceOp::Max] {
            reduce_type::<f32>(&nv, f, count, op, k + 2);
            reduce_type::<bf16>(&nv, f, count, op, k + 3);
        }
    }
}

gpu_test!(
    2,
    replays_of_a_captured_graph_of_every_collective_see_fresh_data
);
/// Every collective captured once in a CUDA graph, replayed with fresh inputs; each writes an
/// output of its own, poisoned before every replay.
fn replays_of_a_captured_graph_of_every_collective_see_fresh_data() {
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    let nv = runtime(2);
    let (me, n) = me_n(&nv);
    let stream = nv.stream().clone();
    let Family {
        mut bc,
        mut ag,
        mut a2a,
        mut rs,
        mut r,
    } = Family::world(&nv);
    // 100003 f32 per block: the reductions run in segments.
    let count = 100_003;
    let input = nv.alloc::<f32>(n * count).unwrap();
    let own = input.view(..count).unwrap();
    let out_bc = nv.alloc::<f32>(count).unwrap();
    let out_ag = nv.alloc::<f32>(n * count).unwrap();
    let out_a2a = nv.alloc::<f32>(n * count).unwrap();
    let out_rs = nv.alloc::<f32>(count).unwrap();
    let out_r = nv.alloc::<f32>(count).unwrap();
    let root = n - 1;
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .unwrap();
    bc.run(own, &out_bc, root as i32, &stream).unwrap();
    ag.run(own, &out_ag, &stream).unwrap();
    a2a.run(&input, &out_a2a, &stream).unwrap();
    rs.run(&input, &out_rs, ReduceOp::Sum, &stream).unwrap();
    r.run(own, &out_r, ReduceOp::Max, root as i32, &stream)
        .unwrap();
    let graph = stream
        .end_capture(CUgraphInstantiate_flags(0))
        .unwrap()
        .expect("a graph was captured");
    for it in 0..20usize {
        let gen = |p: usize, i: usize, op| f32::gen(p, i, it, op);
        let data: Vec<f32> = (0..n * count).map(|i| gen(me, i, ReduceOp::Sum)).collect();
        input.copy_from_host(&data).unwrap();
        for out in [&out_bc, &out_rs, &out_r] {
            out.copy_from_host(&vec![f32::NAN; count]).unwrap();
        }
        for out in [&out_ag, &out_a2a] {
            out.copy_from_host(&vec![f32::NAN; n * count]).unwrap();
        }
        graph.launch().unwrap();
        stream.synchronize().unwrap();
        for c in [bc.check(), ag.check(), a2a.check(), rs.check(), r.check()] {
            c.unwrap();
        }
        let sum = |i: usize| (0..n).map(|p| gen(p, i, ReduceOp::Sum)).sum::<f32>();
        let check = |what: &str, got: Vec<f32>, want: &dyn Fn(usize) -> f32| {
            for (i, g) in got.iter().enumerate() {
                assert!(
                    *g == want(i),
                    "replay {it}, {what} element {i}: {g} want {}",
                    want(i)
                );
            }
        };
        check("broadcast", out_bc.to_vec().unwrap(), &|i| {
            gen(root, i, ReduceOp::Sum)
        });
        check("allgather", out_ag.to_vec().unwrap(), &|i| {
            gen(i / count, i % count, ReduceOp::Sum)
        });
        check("alltoall", out_a2a.to_vec().unwrap(), &|i| {
            gen(i / count, me * count + i % count, ReduceOp::Sum)
        });
        check("reduce-scatter", out_rs.to_vec().unwrap(), &|i| {
            sum(me * count + i)
        });
        if me == root {
            // Max of the same values: every input was generated with the Sum pattern.
            let max = |i: usize| {
                (0..n)
                    .map(|p| gen(p, i, ReduceOp::Sum))
                    .fold(f32::MIN, f32::max)
            };
            check("reduce", out_r.to_vec().unwrap(), &max);
        }
        // Every PE checked this replay before anyone overwrites its input for the next.
        nv.barrier_all().unwrap();
    }
}

gpu_test!(2, a_thousand_back_to_back_calls_mixing_every_collective);
/// 1000 calls back to back, mixing every collective, one sync at the end: each call kind
/// rotates over 4 output slots with inputs of their own, so the last call into each slot
/// decides what it holds.
fn a_thousand_back_to_back_calls_mixing_every_collective() {
    let nv = runtime(2);
    let (me, n) = me_n(&nv);
    let stream = nv.stream().clone();
    let Family {
        mut bc,
        mut ag,
        mut a2a,
        mut rs,
        mut r,
    } = Family::world(&nv);
    let count = 3001;
    const SLOTS: usize = 4;
    let inputs: Vec<_> = (0..SLOTS)
        .map(|s| filled(&nv, n * count, |i| u32::gen(me, i, s, ReduceOp::Sum)))
        .collect();
    let outs: Vec<Vec<_>> = (0..5)
        .map(|_| {
            (0..SLOTS)
                .map(|_| filled(&nv, n * count, |_| u32::MAX))
                .collect()
        })
        .collect();
    for k in 0..1000 {
        let (kind, s) = (k % 5, (k / 5) % SLOTS);
        let input = &inputs[s];
        let own = input.view(..count).unwrap();
        let out = &outs[kind][s];
        match kind {
            0 => bc.run(own, out.view(..count).unwrap(), (k % n) as i32, &stream),
            1 => ag.run(own, out, &stream),
            2 => a2a.run(input, out, &stream),
            3 => rs.run(input, out.view(..count).unwrap(), ReduceOp::Sum, &stream),
            _ => r.run(own, out.view(..count).unwrap(), ReduceOp::Sum, 0, &stream),
        }
        .unwrap();
    }
    stream.synchronize().unwrap();
    for c in [bc.check(), ag.check(), a2a.check(), rs.check(), r.check()] {
        c.unwrap();
    }
    let gen = |p: usize, i: usize, s: usize| u32::gen(p, i, s, ReduceOp::Sum);
    let sum = |i: usize, s: usize| (0..n).fold(0u32, |a, p| a.wrapping_add(gen(p, i, s)));
    #[allow(clippy::needless_range_loop)] // s is also the salt of slot s's input.
    for s in 0..SLOTS {
        // The last call of each kind into slot s: k = 5 * (s + SLOTS * j) + kind.
        let last_bc = (0..1000)
            .filter(|k| k % 5 == 0 && (k / 5) % SLOTS == s)
            .max()
            .unwrap();
        let root = last_bc % n;
        let got = outs[0][s].to_vec().unwrap();
        assert!(
            (0..count).all(|i| got[i] == gen(root, i, s)),
            "broadcast slot {s}"
        );
        let got = outs[1][s].to_vec().unwrap();
        assert!(
            (0..n * count).all(|i| got[i] == gen(i / count, i % count, s)),
            "allgather slot {s}"
        );
        let got = outs[2][s].to_vec().unwrap();
        assert!(
            (0..n * count).all(|i| got[i] == gen(i / count, me * count + i % count, s)),
            "alltoall slot {s}"
        );
        let got = outs[3][s].to_vec().unwrap();
        assert!(
            (0..count).all(|i| got[i] == sum(me * count + i, s)),
            "reduce-scatter slot {s}"
        );
        if me == 0 {
            let got = outs[4][s].to_vec().unwrap();
            assert!((0..count).all(|i| got[i] == sum(i, s)), "reduce slot {s}");
        }
    }
    nv.barrier_all().unwrap();
}

gpu_test!(2, checked_mode_catches_allgatherv_parts_that_differ);
/// Allgatherv with host counts as allgather's blocks (lines off): members whose parts differ
/// but add up to the same output end in a typed error naming the parts on both PEs, before any
/// data moves (the kernel trusts the parts; checked mode's header carries their digest).
fn checked_mode_catches_allgatherv_parts_that_differ() {
    std::env::set_var(nvshmem::CHECKED_ENV, "1");
    let nv = runtime(2);
    let me = nv.my_pe() as usize;
    let stream = nv.stream().clone();
    let buf = filled(&nv, 512, |_| 7.0f32);
    let out = filled(&nv, 200, |_| f32::NAN);
    let mut agv = Allgatherv::world(&nv).unwrap();
    assert!(agv.is_checked());
    agv.set_protocol(FamilyProtocol::Direct);
    let counts = if me == 0 { [100, 100] } else { [120, 80] };
    let displs = [0, counts[0]];
    let parts = Parts {
        counts: &counts,
        displs: &displs,
    };
    agv.run(buf.view(..counts[me]).unwrap(), &out, parts, &stream)
        .unwrap();
    match agv.sync(&stream).unwrap_err() {
        Error::CollectiveMismatch { mine, theirs, .. } => {
            assert!(
                mine.contains("parts") && theirs.contains("parts"),
                "{mine} / {theirs}"
            );
            assert_ne!(mine, theirs);
        }
        e => panic!("not a mismatch: {e:?}"),
    }
    assert!(
        out.to_vec().unwrap().iter().all(|v| v.is_nan()),
        "the mismatched call moved data"
    );
    // The same parts everywhere: a fresh workspace moves the data as blocks.
    let mut agv = Allgatherv::world(&nv).unwrap();
    agv.set_protocol(FamilyProtocol::Direct);
    let counts = [120, 80];
    let displs = [0, 120];
    let parts = Parts {
        counts: &counts,
        displs: &displs,
    };
    let input = filled(&nv, 120, |i| (1000 * me + i) as f32);
    agv.run(input.view(..counts[me]).unwrap(), &out, parts, &stream)
        .unwrap();
    agv.sync(&stream).unwrap();
    assert_ne!(agv.last_protocol(), FamilyProtocol::LowLatency);
    expect("allgatherv as blocks", &out.to_vec().unwrap(), |i| {
        if i < 120 {
            i as f32
        } else {
            (1000 + i - 120) as f32
        }
    });
    nv.barrier_all().unwrap();
}

gpu_test!(2, checked_mode_catches_count_root_and_type_mismatches);
/// Members that disagree on count, root or type end in a typed error on every PE, and the
/// runtime stays usable.
fn checked_mode_catches_count_root_and_type_mismatches() {
    std::env::set_var(nvshmem::CHECKED_ENV, "1");
    let nv = runtime(2);
    let me = nv.my_pe() as usize;
    let stream = nv.stream().clone();
    let buf = filled(&nv, 512, |_| 7.0f32);
    let out = filled(&nv, 1024, |_| f32::NAN);
    let mismatch = |err: Error, mine: &str, theirs: &str| match &err {
        Error::CollectiveMismatch {
            mine: m, theirs: t, ..
        } => {
            assert!(m.contains(mine) && t.contains(theirs), "{err}")
        }
        e => panic!("not a mismatch: {e:?}"),
    };
    // Counts differ.
    let mut ag = Allgather::world(&nv).unwrap();
    assert!(ag.is_checked());
    let count = if me == 0 { 100 } else { 200 };
    ag.run(
        buf.view(..count).unwrap(),
        out.view(..2 * count).unwrap(),
        &stream,
    )
    .unwrap();
    let err = ag.sync(&stream).unwrap_err();
    mismatch(
        err,
        &format!("{count} elements"),
        &format!("{} elements", 300 - count),
    );
    assert!(
        out.to_vec().unwrap().iter().all(|v| v.is_nan()),
        "the mismatched call moved data"
    );
    assert!(
        ag.run(&buf, &out, &stream).is_err(),
        "a broken workspace took a call"
    );
    // Roots differ.
    let mut bc = Broadcast::world(&nv).unwrap();
    bc.run(&buf, out.view(..512).unwrap(), me as i32, &stream)
        .unwrap();
    let err = bc.sync(&stream).unwrap_err();
    mismatch(err, &format!("root {me}"), &format!("root {}", 1 - me));
    // Types differ (same element size).
    // Symmetric allocations are collective: both PEs allocate both kinds.
    let ints = filled(&nv, 512, |_| 7u32);
    let iout = filled(&nv, 256, |_| 0u32);
    let mut rs = ReduceScatter::world(&nv, SLOT_BYTES).unwrap();
    if me == 0 {
        rs.run(&buf, out.view(..256).unwrap(), ReduceOp::Sum, &stream)
            .unwrap();
    } else {
        rs.run(&ints, &iout, ReduceOp::Sum, &stream).unwrap();
    }
    let err = rs.sync(&stream).unwrap_err();
    let (mine, theirs) = if me == 0 {
        ("f32 sum", "u32 sum")
    } else {
        ("u32 sum", "f32 sum")
    };
    mismatch(err, mine, theirs);
    // Protocols differ: one member splits the buffer, the other does not.
    let mut r = Reduce::world(&nv, SLOT_BYTES).unwrap();
    r.set_protocol(if me == 0 {
        FamilyProtocol::Split
    } else {
        FamilyProtocol::Direct
    });
    r.run(&buf, out.view(..512).unwrap(), ReduceOp::Sum, 0, &stream)
        .unwrap();
    let split = me == 0;
    assert_eq!(r.last_protocol(), r.protocol());
    match r.sync(&stream).unwrap_err() {
        Error::CollectiveMismatch { mine, theirs, .. } => {
            assert_eq!(mine.contains("split in parts"), split, "{mine} / {theirs}");
            assert_eq!(
                theirs.contains("split in parts"),
                !split,
                "{mine} / {theirs}"
            );
        }
        e => panic!("not a mismatch: {e:?}"),
    }
    // Not a dead peer: barriers and new workspaces still work.
    assert_eq!(nv.peer_failure(), None);
    nv.barrier_all().unwrap();
    let mut ag2 = Allgather::world(&nv).unwrap();
    ag2.run(&buf, &out, &stream).unwrap();
    ag2.sync(&stream).unwrap();
    assert!(out.to_vec().unwrap().iter().all(|&v| v == 7.0));
    nv.barrier_all().unwrap();
}

gpu_test!(2, wrong_shapes_roots_and_overlaps_are_refused);
/// Calls that cannot be right are refused on every PE before anything is launched, and the
/// workspaces still work afterwards.
fn wrong_shapes_roots_and_overlaps_are_refused() {
    let nv = runtime(2);
    let stream = nv.stream().clone();
    let buf = filled(&nv, 64, |i| i as f32);
    let Family {
        mut bc,
        mut ag,
        mut a2a,
        mut rs,
        mut r,
    } = Family::world(&nv);
    let v = |a: usize, b: usize| buf.view(a..b).unwrap();
    let is = |res: nvshmem::Result<()>, f: fn(&Error) -> bool, what: &str| {
        let err = res.unwrap_err();
        assert!(f(&err), "{what}: {err:?}");
    };
    is(
        bc.run(v(0, 8), v(8, 16), 2, &stream),
        |e| matches!(e, Error::InvalidRoot { .. }),
        "root",
    );
    is(
        bc.run(v(0, 8), v(8, 17), 0, &stream),
        |e| matches!(e, Error::LengthMismatch { .. }),
        "len",
    );
    is(
        bc.run(v(0, 8), v(4, 12), 0, &stream),
        |e| matches!(e, Error::Overlap { .. }),
        "overlap",
    );
    is(
        ag.run(v(0, 8), v(8, 23), &stream),
        |e| matches!(e, Error::CollectiveShape { .. }),
        "shape",
    );
    is(
        ag.run(v(0, 0), v(8, 8), &stream),
        |e| matches!(e, Error::EmptyCollective { .. }),
        "empty",
    );
    // The input inside the output but not at the own block.
    let me = nv.my_pe() as usize;
    let other = (1 - me) * 8;
    is(
        ag.run(v(other, other + 8), v(0, 16), &stream),
        |e| matches!(e, Error::Overlap { .. }),
        "ag",
    );
    is(
        a2a.run(v(0, 7), v(8, 15), &stream),
        |e| matches!(e, Error::CollectiveShape { .. }),
        "odd",
    );
    is(
        a2a.run(v(0, 16), v(8, 24), &stream),
        |e| matches!(e, Error::Overlap { .. }),
        "a2a",
    );
    is(
        rs.run(v(0, 16), v(16, 23), ReduceOp::Sum, &stream),
        |e| matches!(e, Error::CollectiveShape { .. }),
        "rs shape",
    );
    is(
        r.run(v(0, 8), v(8, 16), ReduceOp::Sum, -1, &stream),
        |e| matches!(e, Error::InvalidRoot { .. }),
        "reduce root",
    );
    // Refused calls were not numbered: the next good calls agree on every PE.
    nv.barrier_all().unwrap();
    allgather::<f32>(&nv, &mut ag, 8, 3);
    broadcast::<u8>(&nv, &mut bc, 9, 1, 4);
    reduce::<f32>(&nv, &mut r, 9, ReduceOp::Sum, 0, 5);
}

gpu_test!(2, team_workspaces_move_data_among_their_members_only);
/// Team workspaces reach their members only (one GPU per PE: NVSHMEM refuses team splits on a
/// shared GPU).
fn team_workspaces_move_data_among_their_members_only() {
    let nv = runtime(2);
    if nv.shares_gpus() {
        common::skip("team workspaces not run: they need one GPU per PE (2-GPU machine)");
        return;
    }
    let me = nv.my_pe();
    let world = nv.team_world();
    let solo = world.split_strided(1, 1, 1).unwrap();
    let mut ag = Allgather::new(&nv, solo.as_ref()).unwrap();
    let mut bc = Broadcast::new(&nv, solo.as_ref()).unwrap();
    let buf = filled(&nv, 16, |i| i as i64 + 100 * me as i64);
    let out = filled(&nv, 16, |_| -1i64);
    let stream = nv.stream().clone();
    if me == 1 {
        ag.run(&buf, &out, &stream).unwrap();
        ag.sync(&stream).unwrap();
        assert_eq!(out.to_vec().unwrap(), buf.to_vec().unwrap());
        bc.run(&buf, &out, 0, &stream).unwrap();
        bc.sync(&stream).unwrap();
    } else {
        let err = ag.run(&buf, &out, &stream).unwrap_err();
        assert!(matches!(err, Error::NotInTeam { .. }), "{err}");
        assert_eq!(out.to_vec().unwrap(), vec![-1; 16]);
    }
    nv.barrier_all().unwrap();
}

gpu_test!(
    2,
    a_team_barrier_waits_for_every_member_and_orders_their_puts
);
fn a_team_barrier_waits_for_every_member_and_orders_their_puts() {
    team_barrier_case(&runtime(2));
}

gpu_test!(3, a_team_barrier_on_three_pes);
fn a_team_barrier_on_three_pes() {
    team_barrier_case(&runtime(3));
}

/// A stream barrier over the world: a member's stream passes it only once the last member has
/// arrived, and a put issued before it has landed after it (64 rounds back to back, one sync).
fn team_barrier_case(nv: &Nvshmem) {
    let (me, n) = me_n(nv);
    let stream = nv.stream().clone();
    let mut bar = TeamBarrier::world(nv).unwrap();
    bar.set_timeout(Duration::from_secs(20));
    // The last PE arrives 500 ms late (host sleep): the others wait on their streams.
    nv.barrier_all().unwrap();
    if me == n - 1 {
        std::thread::sleep(Duration::from_millis(500));
    }
    let start = Instant::now();
    bar.run(&stream).unwrap();
    stream.synchronize().unwrap();
    bar.check().unwrap();
    let waited = start.elapsed();
    assert!(
        me == n - 1 || waited >= Duration::from_millis(400),
        "PE {me} passed the barrier after {waited:?}, before the late PE arrived"
    );

    // Round r: put this round's block into the next PE's landing half r % 2, barrier, then copy
    // what landed here into seen[r] (a put to this PE, in stream order after the barrier). A
    // half is written again two rounds later, after the reader passed the barrier between.
    const ROUNDS: usize = 64;
    const LEN: usize = 4099;
    let value =
        |pe: usize, r: usize, i: usize| ((pe * 1_000_003 + r * 7919 + i) as u32) ^ 0x5bd1_e995;
    let next = ((me + 1) % n) as i32;
    let prev = (me + n - 1) % n;
    let src = filled(nv, ROUNDS * LEN, |k| value(me, k / LEN, k % LEN));
    let landing = nv.alloc_zeroed::<u32>(2 * LEN).unwrap();
    let seen = filled(nv, ROUNDS * LEN, |_| 0xA5A5_A5A5u32);
    nv.barrier_all().unwrap();
    for r in 0..ROUNDS {
        let half = (r % 2) * LEN..(r % 2 + 1) * LEN;
        let block = r * LEN..(r + 1) * LEN;
        nv.put_device(
            landing.view(half.clone()).unwrap(),
            src.view(block.clone()).unwrap(),
            next,
            &stream,
        )
        .unwrap();
        bar.run(&stream).unwrap();
        nv.put_device(
            seen.view(block).unwrap(),
            landing.view(half).unwrap(),
            me as i32,
            &stream,
        )
        .unwrap();
    }
    stream.synchronize().unwrap();
    bar.check().unwrap();
    let got = seen.to_vec().unwrap();
    for r in 0..ROUNDS {
        for i in 0..LEN {
            assert_eq!(
                got[r * LEN + i],
                value(prev, r, i),
                "PE {me} round {r} element {i}: not PE {prev}'s put of that round"
            );
        }
    }
    nv.barrier_all().unwrap();
}

/// Counts of allgather and alltoall under the low-latency protocol: one 8-byte line, a partial
/// last line is impossible (blocks must be 8-byte aligned), many lines per block, the largest
/// block the lines take, and one past it (which goes by the handshake).
fn ll_counts<T>() -> [(usize, FamilyProtocol); 5] {
    let per_line = (8 / std::mem::size_of::<T>()).max(1);
    let max = LL_MAX / std::mem::size_of::<T>();
    [
        (per_line, FamilyProtocol::LowLatency),
        (per_line * 3, FamilyProtocol::LowLatency),
        (per_line * 4099, FamilyProtocol::LowLatency),
        (max, FamilyProtocol::LowLatency),
        (max + per_line, FamilyProtocol::Direct),
    ]
}

/// Reduce-scatter of T with `op` at [`ll_counts`], each call's protocol checked (past the
/// lines' limit the slots take it, in segments of [`SLOT_BYTES`]).
fn ll_reduce_type<T: RefElem>(nv: &Nvshmem, rs: &mut ReduceScatter<'_>, op: ReduceOp, salt: usize) {
    for (k, (count, protocol)) in ll_counts::<T>().into_iter().enumerate() {
        reduce_scatter::<T>(nv, rs, count, op, salt + k);
        assert_eq!(
            rs.last_protocol(),
            protocol,
            "reduce-scatter {} {op:?} x {count}",
            T::NAME
        );
    }
}

/// Broadcast and reduce (`op`) of T at [`ll_counts`] from every root, each call's protocol
/// checked.
fn ll_rooted_type<T: RefElem + Tag>(
    nv: &Nvshmem,
    bc: &mut Broadcast<'_>,
    r: &mut Reduce<'_>,
    op: ReduceOp,
    salt: usize,
) {
    for (k, (count, protocol)) in ll_counts::<T>().into_iter().enumerate() {
        for root in 0..nv.n_pes() as usize {
            broadcast::<T>(nv, bc, count, root, salt + k);
            assert_eq!(
                bc.last_protocol(),
                protocol,
                "broadcast {} x {count}",
                T::NAME
            );
            reduce::<T>(nv, r, count, op, root, salt + k);
            assert_eq!(
                r.last_protocol(),
                protocol,
                "reduce {} {op:?} x {count}",
                T::NAME
            );
        }
    }
}

/// The largest block the tests below turn the low-latency protocol on for.
const LL_MAX: usize = 256 << 10;

/// Allgather and alltoall of T at [`ll_counts`], each call's protocol checked.
fn ll_type<T: Tag>(nv: &Nvshmem, ag: &mut Allgather<'_>, a2a: &mut Alltoall<'_>, salt: usize) {
    for (k, (count, protocol)) in ll_counts::<T>().into_iter().enumerate() {
        allgather::<T>(nv, ag, count, salt + k);
        assert_eq!(
            ag.last_protocol(),
            protocol,
            "allgather {} x {count}",
            T::NAME
        );
        alltoall::<T>(nv, a2a, count, salt + k);
        assert_eq!(
            a2a.last_protocol(),
            protocol,
            "alltoall {} x {count}",
            T::NAME
        );
    }
}

/// Allgather, alltoall and reduce-scatter with the low-latency protocol on (NVSH_FAMILY_LL_MAX),
/// at sizes it takes and one it does not, in and out of place; then 200 calls back to back alternating
/// protocols and sizes with one sync at the end. Needs every member mapped (one node).
fn low_latency_lines(pes: i32) {
    // Before any workspace: the line region is sized at creation.
    std::env::set_var("NVSH_FAMILY_LL_MAX", LL_MAX.to_string());
    let nv = runtime(pes);
    let mut ag = Allgather::world(&nv).unwrap();
    let mut a2a = Alltoall::world(&nv).unwrap();
    ll_type::<u8>(&nv, &mut ag, &mut a2a, 0);
    ll_type::<f32>(&nv, &mut ag, &mut a2a, 10);
    ll_type::<bf16>(&nv, &mut ag, &mut a2a, 20);
    ll_type::<i64>(&nv, &mut ag, &mut a2a, 30);
    let mut rs = ReduceScatter::world(&nv, SLOT_BYTES).unwrap();
    for (o, op) in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg]
        .into_iter()
        .enumerate()
    {
        ll_reduce_type::<f32>(&nv, &mut rs, op, 50 + o);
        ll_reduce_type::<bf16>(&nv, &mut rs, op, 60 + o);
        ll_reduce_type::<i64>(&nv, &mut rs, op, 70 + o);
    }
    let mut bc = Broadcast::world(&nv).unwrap();
    let mut r = Reduce::world(&nv, SLOT_BYTES).unwrap();
    ll_rooted_type::<f32>(&nv, &mut bc, &mut r, ReduceOp::Sum, 80);
    ll_rooted_type::<bf16>(&nv, &mut bc, &mut r, ReduceOp::Max, 90);
    ll_rooted_type::<i64>(&nv, &mut bc, &mut r, ReduceOp::Sum, 95);
    rooted_back_to_back(&nv, &mut bc, &mut r);
    // An odd f32 count makes 4-byte-aligned blocks: the handshake takes it.
    allgather::<f32>(&nv, &mut ag, 7, 40);
    assert_eq!(ag.last_protocol(), FamilyProtocol::Direct);

    // Back to back: each call into its own output, alternating sizes (and so protocols).
    let (me, n) = me_n(&nv);
    let stream = nv.stream().clone();
    let counts = [2usize, 65536 + 2, 1024];
    let calls = 200;
    let inputs: Vec<_> = (0..calls)
        .map(|k| filled(&nv, counts[k % 3], |i| <f32 as Tag>::tag(me, i, 100 + k)))
        .collect();
    let outputs: Vec<_> = (0..calls)
        .map(|k| filled(&nv, n * counts[k % 3], |_| <f32 as Tag>::poison()))
        .collect();
    for k in 0..calls {
        ag.run(&inputs[k], &outputs[k], &stream).unwrap();
    }
    ag.sync(&stream).unwrap();
    for k in 0..calls {
        let count = counts[k % 3];
        expect(
            &format!("back-to-back allgather {k} of f32 x {count}"),
            &outputs[k].to_vec().unwrap(),
            |i| <f32 as Tag>::tag(i / count, i % count, 100 + k),
        );
    }
    nv.barrier_all().unwrap();
}

/// 300 broadcasts and reduces back to back, the root moving on each call and the sizes
/// alternating between the lines and the handshake, one sync at the end: the writers never
/// hear from the readers within a call, so this is what shows a slot written again before its
/// reader had read it (prims/ll_credit.cuh).
fn rooted_back_to_back(nv: &Nvshmem, bc: &mut Broadcast<'_>, r: &mut Reduce<'_>) {
    let (me, n) = me_n(nv);
    let stream = nv.stream().clone();
    let counts = [2usize, 1024, 65536 + 2];
    let calls = 300;
    let root = |k: usize| (k / 3) % n;
    let inputs: Vec<_> = (0..calls)
        .map(|k| filled(nv, counts[k % 3], |i| <u32 as Tag>::tag(me, i, 200 + k)))
        .collect();
    let bc_out: Vec<_> = (0..calls)
        .map(|k| filled(nv, counts[k % 3], |_| <u32 as Tag>::poison()))
        .collect();
    let r_out: Vec<_> = (0..calls)
        .map(|k| filled(nv, counts[k % 3], |_| <u32 as Tag>::poison()))
        .collect();
    for k in 0..calls {
        bc.run(&inputs[k], &bc_out[k], root(k) as i32, &stream)
            .unwrap();
        r.run(
            &inputs[k],
            &r_out[k],
            ReduceOp::Sum,
            root(k) as i32,
            &stream,
        )
        .unwrap();
    }
    bc.sync(&stream).unwrap();
    r.sync(&stream).unwrap();
    for k in 0..calls {
        let count = counts[k % 3];
        expect(
            &format!(
                "back-to-back broadcast {k} of u32 x {count} from {}",
                root(k)
            ),
            &bc_out[k].to_vec().unwrap(),
            |i| <u32 as Tag>::tag(root(k), i, 200 + k),
        );
        if me == root(k) {
            expect(
                &format!("back-to-back reduce {k} of u32 x {count} to {me}"),
                &r_out[k].to_vec().unwrap(),
                |i| {
                    (0..n)
                        .map(|p| <u32 as Tag>::tag(p, i, 200 + k))
                        .fold(0u32, u32::wrapping_add)
                },
            );
        }
    }
    nv.barrier_all().unwrap();
}

gpu_test!(2, low_latency_allgather_alltoall_and_reduce_scatter);
fn low_latency_allgather_alltoall_and_reduce_scatter() {
    low_latency_lines(2);
}

gpu_test!(4, low_latency_family_on_four_pes);
fn low_latency_family_on_four_pes() {
    low_latency_lines(4);
}

/// The split protocol's threshold (NVSH_FAMILY_SPLIT_MIN) in the split tests: small, so that
/// modest sizes take it under `Auto`.
const SPLIT_MIN: usize = 64 << 10;
/// The low-latency lines' limit in the split tests, so that their back-to-back stretch mixes
/// the lines, the handshake and the split protocol on one workspace.
const SPLIT_TEST_LL_MAX: usize = 1 << 10;

/// Counts of broadcast and reduce of T on `n` PEs for the split protocol, each with the
/// protocol set and the one the call must take. Forced (any size splits): one element; n - 1
/// elements (parts are 16-byte aligned, so all in the first part, the others empty); one
/// 16-byte vector per part, and one element more; counts neither n - 1 nor 16 bytes divide,
/// past a 64K slot per part (reduce in segments). Under `Auto`: one element below the
/// threshold (the handshake), at it (split from 3 PEs on, else the handshake), and with
/// `large` 1M + 1 and 16M + 5.
fn split_counts<T>(n: usize, large: bool) -> Vec<(usize, FamilyProtocol, FamilyProtocol)> {
    use FamilyProtocol::{Auto, Direct, Split};
    let size = std::mem::size_of::<T>();
    let per16 = (16 / size).max(1);
    let parts = n - 1;
    let min = SPLIT_MIN / size;
    let auto = if n >= 3 { Split } else { Direct };
    let mut counts = vec![
        (1, Split, Split),
        (parts, Split, Split),
        (parts * per16, Split, Split),
        (parts * per16 + 1, Split, Split),
        (1000, Split, Split),
        (65537, Split, Split),
        (min - 1, Auto, Direct),
        (min, Auto, auto),
    ];
    if large {
        counts.push(((1 << 20) + 1, Auto, auto));
        counts.push(((16 << 20) + 5, Auto, auto));
    }
    counts
}

/// Broadcasts of T at [`split_counts`] from every root, in and out of place, each call's
/// protocol checked.
fn split_broadcast_type<T: Tag>(nv: &Nvshmem, bc: &mut Broadcast<'_>, salt: usize, large: bool) {
    let n = nv.n_pes() as usize;
    for (k, (count, set, want)) in split_counts::<T>(n, large).into_iter().enumerate() {
        bc.set_protocol(set);
        for root in 0..n {
            broadcast::<T>(nv, bc, count, root, salt + k);
            assert_eq!(
                bc.last_protocol(),
                want,
                "broadcast {} x {count} from {root}",
                T::NAME
            );
        }
    }
    bc.set_protocol(FamilyProtocol::Auto);
}

/// Reduces of T with `op` at [`split_counts`] to every root, in and out of place (non-root
/// outputs checked untouched), each call's protocol checked.
fn split_reduce_type<T: RefElem>(
    nv: &Nvshmem,
    r: &mut Reduce<'_>,
    op: ReduceOp,
    salt: usize,
    large: bool,
) {
    let n = nv.n_pes() as usize;
    for (k, (count, set, want)) in split_counts::<T>(n, large).into_iter().enumerate() {
        r.set_protocol(set);
        for root in 0..n {
            reduce::<T>(nv, r, count, op, root, salt + k);
            assert_eq!(
                r.last_protocol(),
                want,
                "reduce {} {op:?} x {count} to {root}",
                T::NAME
            );
        }
    }
    r.set_protocol(FamilyProtocol::Auto);
}

/// Broadcast and reduce under the split protocol (NVSH_FAMILY_SPLIT_MIN = [`SPLIT_MIN`]):
/// [`split_counts`] for several types (reduce: several ops), every root, in and out of place;
/// 16M elements with 64K and 8M slots where every PE has a GPU of its own; 200 calls of each
/// back to back; again in rounds of 16 bytes (NVSH_FAMILY_SPLIT_ROUND: the most rounds) and in
/// one round per chunk; then the same over NVSHMEM puts only (NVSH_NO_DIRECT). At 2 PEs `Auto` never
/// splits: the forced calls there take the one-part form (the root's part to the other PE,
/// nothing passed on).
fn split_family(pes: i32) {
    // Before any workspace: both are read at creation.
    std::env::set_var(nvshmem::FAMILY_SPLIT_MIN_ENV, SPLIT_MIN.to_string());
    std::env::set_var("NVSH_FAMILY_LL_MAX", SPLIT_TEST_LL_MAX.to_string());
    let nv = runtime(pes);
    // PEs sharing a GPU take turns in time slices: 1M elements and more would take minutes
    // there (as in every_collective_on_four_pes).
    let large = !nv.shares_gpus();
    let mut bc = Broadcast::world(&nv).unwrap();
    split_broadcast_type::<u8>(&nv, &mut bc, 0, large);
    split_broadcast_type::<f32>(&nv, &mut bc, 100, large);
    split_broadcast_type::<bf16>(&nv, &mut bc, 200, false);
    split_broadcast_type::<i64>(&nv, &mut bc, 300, false);
    let mut r = Reduce::world(&nv, SLOT_BYTES).unwrap();
    split_reduce_type::<f32>(&nv, &mut r, ReduceOp::Sum, 400, large);
    split_reduce_type::<f32>(&nv, &mut r, ReduceOp::Avg, 420, false);
    split_reduce_type::<bf16>(&nv, &mut r, ReduceOp::Max, 440, large);
    split_reduce_type::<f16>(&nv, &mut r, ReduceOp::Min, 460, false);
    split_reduce_type::<i64>(&nv, &mut r, ReduceOp::Prod, 480, false);
    split_reduce_type::<u32>(&nv, &mut r, ReduceOp::Sum, 500, false);
    if large {
        // Parts larger than the benches' 8M slots: segments of n - 1 slots.
        let mut big = Reduce::world(&nv, 8 << 20).unwrap();
        big.set_protocol(FamilyProtocol::Split);
        for root in 0..pes as usize {
            reduce::<f32>(&nv, &mut big, (16 << 20) + 5, ReduceOp::Sum, root, 520);
            assert_eq!(big.last_protocol(), FamilyProtocol::Split);
        }
    }
    split_back_to_back(&nv, &mut bc, &mut r, true);

    // Rounds of 16 bytes: every chunk in as many rounds as it may have (the most, then larger
    // rounds), and none: one round per chunk.
    for (round, salt) in [("16", 530), ("0", 565)] {
        std::env::set_var(nvshmem::FAMILY_SPLIT_ROUND_ENV, round);
        let mut bc = Broadcast::world(&nv).unwrap();
        let mut r = Reduce::world(&nv, SLOT_BYTES).unwrap();
        split_broadcast_type::<u8>(&nv, &mut bc, salt, false);
        split_broadcast_type::<bf16>(&nv, &mut bc, salt + 8, false);
        split_reduce_type::<f32>(&nv, &mut r, ReduceOp::Sum, salt + 16, false);
        split_reduce_type::<f16>(&nv, &mut r, ReduceOp::Min, salt + 24, false);
        split_back_to_back(&nv, &mut bc, &mut r, true);
    }
    std::env::remove_var(nvshmem::FAMILY_SPLIT_ROUND_ENV);

    // NVSHMEM puts even to mapped peers, as across nodes.
    std::env::set_var(nvshmem::NO_DIRECT_ENV, "1");
    let mut bc = Broadcast::world(&nv).unwrap();
    let mut r = Reduce::world(&nv, SLOT_BYTES).unwrap();
    split_broadcast_type::<u8>(&nv, &mut bc, 600, false);
    split_broadcast_type::<f32>(&nv, &mut bc, 620, false);
    split_reduce_type::<f32>(&nv, &mut r, ReduceOp::Sum, 640, false);
    split_reduce_type::<bf16>(&nv, &mut r, ReduceOp::Max, 660, false);
    split_back_to_back(&nv, &mut bc, &mut r, false);
    std::env::remove_var(nvshmem::NO_DIRECT_ENV);
}

/// 200 broadcasts and 200 reduces back to back, one sync at the end: the root moving every
/// 4 calls, the sizes taking the low-latency lines, the handshake and the split protocol (and
/// the split protocol forced at small sizes every fifth call), so that each protocol's step
/// follows each other's on the same counters and slots. `lines`: the 8-byte calls can take the
/// lines (every PE mapped, direct stores on).
fn split_back_to_back(nv: &Nvshmem, bc: &mut Broadcast<'_>, r: &mut Reduce<'_>, lines: bool) {
    let (me, n) = me_n(nv);
    let stream = nv.stream().clone();
    // u32: 8 bytes (lines where every PE is mapped), 4000 bytes (the handshake), just past
    // SPLIT_MIN, and 256K (reduce: two segments of 64K slots per part at 3 and 4 PEs).
    let counts = [2usize, 1000, SPLIT_MIN / 4 + 3, 65536 + 2];
    let calls = 200;
    let root = |k: usize| (k / 4) % n;
    let count = |k: usize| counts[k % 4];
    let forced = |k: usize| k % 5 == 4;
    let inputs: Vec<_> = (0..calls)
        .map(|k| filled(nv, count(k), |i| <u32 as Tag>::tag(me, i, 700 + k)))
        .collect();
    let bc_out: Vec<_> = (0..calls)
        .map(|k| filled(nv, count(k), |_| <u32 as Tag>::poison()))
        .collect();
    let r_out: Vec<_> = (0..calls)
        .map(|k| filled(nv, count(k), |_| <u32 as Tag>::poison()))
        .collect();
    let mut taken = Vec::new();
    for k in 0..calls {
        let set = if forced(k) {
            FamilyProtocol::Split
        } else {
            FamilyProtocol::Auto
        };
        bc.set_protocol(set);
        r.set_protocol(set);
        bc.run(&inputs[k], &bc_out[k], root(k) as i32, &stream)
            .unwrap();
        taken.push(bc.last_protocol());
        r.run(
            &inputs[k],
            &r_out[k],
            ReduceOp::Sum,
            root(k) as i32,
            &stream,
        )
        .unwrap();
        taken.push(r.last_protocol());
    }
    bc.set_protocol(FamilyProtocol::Auto);
    r.set_protocol(FamilyProtocol::Auto);
    bc.sync(&stream).unwrap();
    r.sync(&stream).unwrap();
    let mut mixed = vec![FamilyProtocol::Direct, FamilyProtocol::Split];
    if lines {
        mixed.push(FamilyProtocol::LowLatency);
    }
    for p in mixed {
        assert!(taken.contains(&p), "no call took {p:?}: {taken:?}");
    }
    for k in 0..calls {
        let c = count(k);
        expect(
            &format!("back-to-back broadcast {k} of u32 x {c} from {}", root(k)),
            &bc_out[k].to_vec().unwrap(),
            |i| <u32 as Tag>::tag(root(k), i, 700 + k),
        );
        let got = r_out[k].to_vec().unwrap();
        if me == root(k) {
            expect(
                &format!("back-to-back reduce {k} of u32 x {c} to {me}"),
                &got,
                |i| {
                    (0..n)
                        .map(|p| <u32 as Tag>::tag(p, i, 700 + k))
                        .fold(0u32, u32::wrapping_add)
                },
            );
        } else {
            assert!(
                got.iter().all(|&g| g == <u32 as Tag>::poison()),
                "back-to-back reduce {k}: a non-root output was written"
            );
        }
    }
    nv.barrier_all().unwrap();
}

gpu_test!(2, split_broadcast_and_reduce_on_two_pes);
fn split_broadcast_and_reduce_on_two_pes() {
    split_family(2);
}

gpu_test!(3, split_broadcast_and_reduce_on_three_pes);
fn split_broadcast_and_reduce_on_three_pes() {
    split_family(3);
}

gpu_test!(4, split_broadcast_and_reduce_on_four_pes);
fn split_broadcast_and_reduce_on_four_pes() {
    split_family(4);
}
