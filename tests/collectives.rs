//! The family's rows of the table whose `Auto` chooses a protocol per call (those with slots or
//! lines, what `nvsh tune` sweeps beside allreduce; allreduce has tests/allreduce.rs, the
//! exchanges tests/exchange.rs), called through the table (tests/common/table.rs) against each
//! row's CPU reference with the values of tests/common/reference.rs: every element on the
//! receiving PE, outputs poisoned before each call, exact comparison (data movement copies; the
//! reductions reduce in rank order in one pass, as the reference does, on values whose results
//! are exact). Counts 1, 7, 1000, 65537 and 1M + 1; every root; in place; segmented
//! reductions; graph capture and replay with fresh data; 1000 back-to-back calls mixing them;
//! NVSHMEM puts only (NVSH_NO_DIRECT); checked-mode mismatches; refused calls; timeouts that
//! name the collective; the low-latency lines and the split protocol, each at the sizes where it
//! starts and stops.
//! Run by scripts/gpu_test.sh (tests named peN_* run as N-PE jobs).

mod common;

use common::data::{expect, filled, me_n};
use common::table::Workspace;
use common::table::{ops_of, roots, run_sync, takes, with_type, world, Call, Value, Values};
use common::{gpu_test, runtime};
use nvshmem::tools::AnyCall;
use nvshmem::{
    Allgather, Allgatherv, Broadcast, Collective, CollectiveRow, Dtype, Error, FamilyProtocol,
    Nvshmem, Parts, Reduce, ReduceOp, ReduceScatter, ScratchKind, Shape, SymView, SymmetricBuffer,
    TeamBarrier, COLLECTIVES,
};
use std::time::{Duration, Instant};

const COUNTS: [usize; 5] = [1, 7, 1000, 65537, (1 << 20) + 1];
/// Small slots, so that reductions of 65537 elements and more run in segments.
const SLOT_BYTES: usize = 64 << 10;

/// Element types and the largest count each runs at: in the rows that move data, and in the
/// reductions (every op up to 65537 elements, sum alone past it).
const TYPES: [(Dtype, usize, usize); 9] = [
    (Dtype::U8, usize::MAX, 0),
    (Dtype::F32, usize::MAX, usize::MAX),
    (Dtype::Bf16, 65537, usize::MAX),
    (Dtype::I64, 65537, usize::MAX),
    (Dtype::F16, 1000, 65537),
    (Dtype::F64, 1000, 65537),
    (Dtype::I32, 1000, 65537),
    (Dtype::U32, 1000, 65537),
    (Dtype::U64, 1000, 65537),
];

/// The rows this file tests: the family's collectives with slots or lines, whose `Auto`
/// chooses one protocol per call.
fn family_rows() -> impl Iterator<Item = &'static CollectiveRow> {
    COLLECTIVES
        .iter()
        .filter(|r| matches!(r.scratch, ScratchKind::Slots | ScratchKind::Lines))
}

/// A row with its workspace.
type Row<'nv> = (&'static CollectiveRow, Workspace<'nv>);

/// A workspace of each of [`family_rows`] over the world (reductions with [`SLOT_BYTES`]
/// slots).
fn family(nv: &Nvshmem) -> Vec<Row<'_>> {
    world(nv, family_rows(), SLOT_BYTES)
}

/// One call of a row on symmetric buffers, out of place into a poisoned output, then in place
/// where the row has an in-place form ([`Call::in_place`]; fresh values, the buffer holding
/// this member's input where the call reads it, poison elsewhere): every element of the output
/// checked against the row's reference (those the call leaves: what they held).
fn row_case<T: Value>(nv: &Nvshmem, w: &mut Workspace<'_>, call: &Call, v: Values) {
    let me = call.me;
    let stream = nv.stream().clone();
    let poison: T = v.poison();
    let input = filled(nv, call.in_len, |i| v.input::<T>(me, i));
    let output = filled(nv, call.out_len, |_| poison);
    run_sync(w, call.any(&v, &input, &output), &stream);
    let what = call.describe::<T>(&v);
    call.check(&what, &v, &output.to_vec().unwrap(), |_| poison);
    if let Some((in_off, out_off, len)) = call.in_place() {
        let v = v.salted(1);
        let held: Vec<T> = (0..len)
            .map(|j| match j.checked_sub(in_off) {
                Some(i) if i < call.in_len => v.input(me, i),
                _ => v.poison(),
            })
            .collect();
        let buf = filled(nv, len, |j| held[j]);
        let i = buf.view(in_off..in_off + call.in_len).unwrap();
        let o = buf.view(out_off..out_off + call.out_len).unwrap();
        run_sync(w, call.any(&v, i, o), &stream);
        let got = buf.to_vec().unwrap();
        let out = out_off..out_off + call.out_len;
        call.check(&format!("{what}, in place"), &v, &got[out], |k| {
            held[out_off + k]
        });
    }
    nv.barrier_all().unwrap();
}

/// [`row_case`] of every row of `rows` that `pick` takes, with `count` elements of `dtype` (every
/// op of `ops` where it reduces, every root where it has one).
fn rows_of_type(
    nv: &Nvshmem,
    rows: &mut [Row<'_>],
    pick: impl Fn(&CollectiveRow) -> bool,
    (count, dtype): (usize, Dtype),
    ops: &[ReduceOp],
    salt: usize,
) {
    let (me, n) = me_n(nv);
    for (row, w) in rows.iter_mut() {
        if !pick(row) || !takes(row, dtype) {
            continue;
        }
        for (o, &op) in ops_of(row, ops).iter().enumerate() {
            for root in roots(row, n) {
                let call = Call::blocks(row, me, n, count, root);
                let v = Values::of(row, n, salt + 10 * o + root, op);
                with_type!(dtype, T => row_case::<T>(nv, w, &call, v));
            }
        }
    }
}

/// Every row at every count: data movement of u8 and f32 at every count, bf16 and i64 up to
/// 65537, the other five types up to 1000; reductions with every op and dtype up to 65537
/// elements, and sums of f32 / bf16 / i64 at 1M + 1 ([`TYPES`]).
fn every_collective(nv: &Nvshmem) {
    every_collective_up_to(nv, usize::MAX)
}

/// [`every_collective`] at the counts up to `max_count`.
fn every_collective_up_to(nv: &Nvshmem, max_count: usize) {
    let rows = &mut family(nv);
    for (k, &count) in COUNTS.iter().enumerate() {
        if count > max_count {
            continue;
        }
        let ops: &[ReduceOp] = if count <= 65537 {
            &ReduceOp::ALL
        } else {
            &[ReduceOp::Sum]
        };
        for (t, &(dtype, moves_to, reduces_to)) in TYPES.iter().enumerate() {
            let salt = 100 * k + t;
            if count <= moves_to {
                rows_of_type(nv, rows, |r| !r.reduces, (count, dtype), ops, salt);
            }
            if count <= reduces_to {
                rows_of_type(nv, rows, |r| r.reduces, (count, dtype), ops, salt);
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

gpu_test!(4, hierarchical_family_across_pretend_nodes);
/// The node-aware steps (`FamilyProtocol::Hierarchical`, docs/nodes.md) at 4 PEs as 2 pretend
/// nodes x 2: [`hierarchical_family`].
fn hierarchical_family_across_pretend_nodes() {
    hierarchical_family(4, 2);
}

gpu_test!(2, hierarchical_family_between_two_pretend_nodes);
/// The node-aware steps at 2 PEs as 2 pretend nodes of 1: the rail steps and the steps'
/// workspaces, on 2 GPUs ([`hierarchical_family`]).
fn hierarchical_family_between_two_pretend_nodes() {
    hierarchical_family(2, 1);
}

gpu_test!(4, hierarchical_family_on_four_pretend_nodes_of_one);
/// The node-aware steps at 4 PEs as 4 pretend nodes of 1 (rails only): [`hierarchical_family`].
fn hierarchical_family_on_four_pretend_nodes_of_one() {
    hierarchical_family(4, 1);
}

/// Allgather, reduce-scatter, broadcast and alltoall asked for their node-aware steps over
/// `pes` PEs as pretend nodes of `g`: every count up to 65537 of every type (reductions with
/// every op), every root, in and out of place, each call checked against the reference and
/// its protocol checked; then with `NVSH_FAMILY_HIER_MIN=0` under `Auto`, back to back mixed
/// with flat calls.
fn hierarchical_family(pes: i32, g: i32) {
    let Some(nv) = common::pretend_runtime(pes, g) else {
        return;
    };
    let (me, n) = me_n(&nv);
    let hier = FamilyProtocol::Hierarchical;
    let mut rows = rows_with(&nv, SLOT_BYTES, hier);
    let mut names: Vec<&str> = rows.iter().map(|(r, _)| r.name).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["allgather", "alltoall", "broadcast", "reduce-scatter"],
        "the rows with node-aware steps"
    );
    for (_, w) in rows.iter_mut() {
        w.set_protocol(hier);
    }
    for (k, &count) in COUNTS.iter().enumerate().filter(|(_, &c)| c <= 65537) {
        for (t, &(dtype, moves_to, reduces_to)) in TYPES.iter().enumerate() {
            for (row, w) in rows.iter_mut() {
                let up_to = if row.reduces { reduces_to } else { moves_to };
                if count > up_to || !takes(row, dtype) {
                    continue;
                }
                for (o, &op) in ops_of(row, &ReduceOp::ALL).iter().enumerate() {
                    for root in roots(row, n) {
                        let call = Call::blocks(row, me, n, count, root);
                        let v = Values::of(row, n, 100 * k + t + 10 * o + root, op);
                        if row.reduces && !op.reduces_in_steps(dtype) {
                            // An integer average would truncate twice: asked for, refused.
                            with_type!(dtype, T => refused_case::<T>(&nv, w, &call, v));
                            continue;
                        }
                        with_type!(dtype, T => row_case::<T>(&nv, w, &call, v));
                        let what = format!("{} of {count} {dtype:?}, root {root}", row.name);
                        assert_eq!(w.last_protocol(), Some(hier), "{what}");
                    }
                }
            }
        }
    }
    drop(rows);
    std::env::set_var(nvshmem::FAMILY_HIER_MIN_ENV, "0");
    let mut rows = rows_with(&nv, SLOT_BYTES, hier);
    let taken = auto_back_to_back(&nv, &mut rows);
    assert!(taken.contains(&hier), "no call took {hier:?}: {taken:?}");
    std::env::remove_var(nvshmem::FAMILY_HIER_MIN_ENV);
}

/// A call `w` must refuse with [`Error::CollectiveShape`] before it moves anything: its
/// output stays poisoned, and the workspace takes the next call.
fn refused_case<T: Value>(nv: &Nvshmem, w: &mut Workspace<'_>, call: &Call, v: Values) {
    let poison: T = v.poison();
    let input = filled(nv, call.in_len, |i| v.input::<T>(call.me, i));
    let output = filled(nv, call.out_len, |_| poison);
    let stream = nv.stream().clone();
    let what = call.describe::<T>(&v);
    match w.run_any(call.any(&v, &input, &output), &stream) {
        Err(Error::CollectiveShape { .. }) => {}
        other => panic!("{what}: {other:?}, not a refusal"),
    }
    stream.synchronize().unwrap();
    assert!(
        output.to_vec().unwrap().iter().all(|x| *x == poison),
        "{what}: a refused call wrote its output"
    );
    nv.barrier_all().unwrap();
}

/// 200 calls of `rows` (50 where PEs share a GPU) back to back under `Auto`, every fifth asking
/// for direct stores: the protocols they took.
fn auto_back_to_back(nv: &Nvshmem, rows: &mut [Row<'_>]) -> Vec<FamilyProtocol> {
    let calls = if nv.shares_gpus() { 50 } else { 200 };
    let (me, n) = me_n(nv);
    let counts = [2usize, 1000, 65536 + 2];
    let root = |k: usize| (k / 3) % n;
    let values = |k: usize| Values::gen(n, 900 + k, ReduceOp::Sum);
    let inputs: Vec<_> = (0..calls)
        .map(|k| filled(nv, n * counts[k % 3], |i| values(k).input::<u32>(me, i)))
        .collect();
    let queue = queue(rows, &inputs, |k, row| {
        let call = Call::blocks(row, me, n, counts[k % 3], root(k));
        let set = match k % 5 {
            4 => FamilyProtocol::Direct,
            _ => FamilyProtocol::Auto,
        };
        Some((call, values(k), set))
    });
    back_to_back(nv, rows, &queue)
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

gpu_test!(2, every_collective_with_peers_looked_up_on_the_device);
/// NVSH_PEER_TABLE=0: kernels look each peer's mapping up on the GPU (the PE table, then
/// NVSHMEM's peer table), as they do for members past the launch's table of 8, instead of
/// reading it from the launch's arguments.
fn every_collective_with_peers_looked_up_on_the_device() {
    std::env::set_var(nvshmem::PEER_TABLE_ENV, "0");
    every_collective_up_to(&runtime(2), 65537);
}

gpu_test!(2, every_collective_through_nvshmem_puts);
/// NVSHMEM puts even to mapped peers: the path across nodes.
fn every_collective_through_nvshmem_puts() {
    std::env::set_var(nvshmem::NO_DIRECT_ENV, "1");
    let nv = runtime(2);
    let rows = &mut family(&nv);
    let ops = [ReduceOp::Sum, ReduceOp::Max];
    for (k, &count) in COUNTS.iter().enumerate() {
        for (t, dtype) in [Dtype::U8, Dtype::F32].into_iter().enumerate() {
            rows_of_type(&nv, rows, |r| !r.reduces, (count, dtype), &ops, 100 * k + t);
        }
        for (t, dtype) in [Dtype::F32, Dtype::Bf16].into_iter().enumerate() {
            rows_of_type(&nv, rows, |r| r.reduces, (count, dtype), &ops, 100 * k + t);
        }
    }
}

gpu_test!(
    2,
    replays_of_a_captured_graph_of_every_collective_see_fresh_data
);
/// Every row captured once in a CUDA graph (the reductions once with sum and once with max),
/// replayed with fresh inputs; each call writes an output of its own, poisoned before every
/// replay.
fn replays_of_a_captured_graph_of_every_collective_see_fresh_data() {
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    let nv = runtime(2);
    let (me, n) = me_n(&nv);
    let stream = nv.stream().clone();
    let mut rows = family(&nv);
    // 100003 f32 per block: the reductions run in segments.
    let count = 100_003;
    let input = nv.alloc::<f32>(n * count).unwrap();
    let root = n - 1;
    // (row, call, op) of each captured call.
    let calls: Vec<(usize, Call, ReduceOp)> = rows
        .iter()
        .enumerate()
        .flat_map(|(k, (row, _))| {
            let call = Call::blocks(row, me, n, count, root);
            ops_of(row, &[ReduceOp::Sum, ReduceOp::Max])
                .iter()
                .map(move |&op| (k, call.clone(), op))
        })
        .collect();
    let outs: Vec<_> = calls
        .iter()
        .map(|(_, c, _)| nv.alloc::<f32>(c.out_len).unwrap())
        .collect();
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .unwrap();
    for ((k, call, op), out) in calls.iter().zip(&outs) {
        let v = Values::gen(n, 0, *op);
        let i = input.view(..call.in_len).unwrap();
        rows[*k].1.run_any(call.any(&v, i, out), &stream).unwrap();
    }
    let graph = stream
        .end_capture(CUgraphInstantiate_flags(0))
        .unwrap()
        .expect("a graph was captured");
    for it in 0..20usize {
        // The inputs are the same under every op but prod.
        let fresh = Values::gen(n, it, ReduceOp::Sum);
        let data: Vec<f32> = (0..n * count).map(|i| fresh.input(me, i)).collect();
        input.copy_from_host(&data).unwrap();
        let poison: f32 = fresh.poison();
        for out in &outs {
            out.copy_from_host(&vec![poison; out.len()]).unwrap();
        }
        graph.launch().unwrap();
        stream.synchronize().unwrap();
        for (_, w) in &rows {
            w.check().unwrap();
        }
        for ((_, call, op), out) in calls.iter().zip(&outs) {
            let v = Values::gen(n, it, *op);
            let what = format!("replay {it}, {}", call.describe::<f32>(&v));
            call.check(&what, &v, &out.to_vec().unwrap(), |_| poison);
        }
        // Every PE checked this replay before anyone overwrites its input for the next.
        nv.barrier_all().unwrap();
    }
}

gpu_test!(2, a_thousand_back_to_back_calls_mixing_every_collective);
/// 1000 calls back to back, mixing every row, one sync at the end: each row rotates over 4
/// output slots with inputs of their own (the rooted ones' root moving), so the last call into
/// each slot decides what it holds.
fn a_thousand_back_to_back_calls_mixing_every_collective() {
    let nv = runtime(2);
    let (me, n) = me_n(&nv);
    let stream = nv.stream().clone();
    let mut rows = family(&nv);
    let count = 3001;
    const SLOTS: usize = 4;
    const CALLS: usize = 1000;
    let values = |s: usize| Values::gen(n, s, ReduceOp::Sum);
    let inputs: Vec<_> = (0..SLOTS)
        .map(|s| filled(&nv, n * count, |i| values(s).input::<u32>(me, i)))
        .collect();
    let poison: u32 = values(0).poison();
    let outs: Vec<Vec<_>> = rows
        .iter()
        .map(|_| {
            (0..SLOTS)
                .map(|_| filled(&nv, n * count, |_| poison))
                .collect()
        })
        .collect();
    // Call k: row k % rows, slot (k / rows) % SLOTS, root k % n.
    let kinds = rows.len();
    let of = |k: usize| (k % kinds, (k / kinds) % SLOTS);
    let call = |row: &'static CollectiveRow, k: usize| Call::blocks(row, me, n, count, k % n);
    for k in 0..CALLS {
        let (kind, s) = of(k);
        let (row, w) = &mut rows[kind];
        let c = call(row, k);
        let i = inputs[s].view(..c.in_len).unwrap();
        let o = outs[kind][s].view(..c.out_len).unwrap();
        w.run_any(c.any(&values(s), i, o), &stream).unwrap();
    }
    stream.synchronize().unwrap();
    for (_, w) in &rows {
        w.check().unwrap();
    }
    for (kind, (row, _)) in rows.iter().enumerate() {
        for (s, out) in outs[kind].iter().enumerate() {
            let last = (0..CALLS).filter(|&k| of(k) == (kind, s)).max().unwrap();
            let c = call(row, last);
            let got = out.view(..c.out_len).unwrap().to_vec().unwrap();
            // What the last call leaves (a non-root's reduce output) an earlier one with
            // another root may have written: not checked.
            let what = format!("{} slot {s}", c.describe::<u32>(&values(s)));
            c.check(&what, &values(s), &got, |i| got[i]);
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
    // Protocols differ: one member pulls, the other does not.
    let mut r = Reduce::world(&nv, SLOT_BYTES).unwrap();
    let offered = nvshmem::tools::TableCollective::protocols(&r);
    let pull = me == 0 && offered.contains(&FamilyProtocol::Pull);
    r.set_protocol(if me == 0 {
        FamilyProtocol::Pull
    } else {
        FamilyProtocol::Direct
    });
    r.run(&buf, out.view(..512).unwrap(), ReduceOp::Sum, 0, &stream)
        .unwrap();
    match r.sync(&stream) {
        Err(Error::CollectiveMismatch { mine, theirs, .. }) => {
            assert_eq!(mine.contains("pulled"), pull, "{mine} / {theirs}");
        }
        // Not mapped (NVSH_NO_DIRECT): both took the handshake.
        Ok(()) => assert!(!pull && r.last_protocol() == FamilyProtocol::Direct),
        Err(e) => panic!("not a mismatch: {e:?}"),
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

gpu_test!(2, a_timeout_names_the_collective_its_launch_carries);
/// PE 1 makes no call: PE 0's first call of each of the family's rows (a root that leaves PE 0
/// waiting for data: PE 1 for the copies, PE 0 for reductions) times out, and the error names
/// the row through the code its launch carried (the status record's index), and PE 1. Each
/// row's workspace times out on its own, though the first timeout ends PE 0's collective work.
fn a_timeout_names_the_collective_its_launch_carries() {
    let nv = runtime(2);
    let (me, n) = me_n(&nv);
    let stream = nv.stream().clone();
    let rows = COLLECTIVES
        .iter()
        .filter(|r| r.collective != Collective::Allreduce);
    // Workspaces take the runtime's timeout when they are made.
    nv.set_timeout(Duration::from_millis(300));
    let mut rows = world(&nv, rows, SLOT_BYTES);
    nv.set_timeout(Duration::from_secs(60));
    // Every buffer first: allocations are collective, and PE 1 makes no call after them.
    let calls: Vec<_> = rows
        .iter()
        .map(|(row, _)| {
            let root = if row.reduces { 0 } else { 1 };
            let call = Call::blocks(row, me, n, 1000, root);
            let input = filled(&nv, call.in_len.max(1), |i| i as f32);
            let output = filled(&nv, call.out_len.max(1), |_| -1.0f32);
            (call, input, output)
        })
        .collect();
    if me == 0 {
        for ((row, w), (call, input, output)) in rows.iter_mut().zip(&calls) {
            let v = Values::of(row, n, 3, ReduceOp::Sum);
            w.run_any(call.any(&v, input, output), &stream).unwrap();
            stream.synchronize().unwrap();
            let err = w.check().expect_err(row.name);
            let text = err.to_string();
            assert!(matches!(err, Error::Timeout { .. }), "{}: {text}", row.name);
            assert!(
                text.contains(&format!("({} protocol)", row.name)) && text.contains("PE 1"),
                "{}: {text}",
                row.name
            );
        }
        // Its first timeout made PE 0 give up on PE 1: collective calls now refuse at once
        // (each would wait for PE 1), so it makes none.
        assert!(nv.peer_failure().is_some());
    } else {
        // PE 1 keeps its memory mapped while PE 0's calls store into it, then finds that PE 0
        // never comes to the barrier.
        nv.set_timeout(Duration::from_secs(15));
        assert!(nv.barrier_all().is_err(), "PE 0 gave up on PE 1");
    }
}

gpu_test!(2, wrong_shapes_roots_and_overlaps_are_refused);
/// Calls that cannot be right are refused on every PE before anything is launched, and the
/// workspaces still work afterwards. Each row: a buffer one element short of its shape (lengths
/// that differ where the row takes whole buffers, blocks that do not fit otherwise), no
/// elements, input and output overlapping where no in-place form puts them (beside the own
/// block where the row has one), and roots outside the team.
fn wrong_shapes_roots_and_overlaps_are_refused() {
    let nv = runtime(2);
    let (me, n) = me_n(&nv);
    let stream = nv.stream().clone();
    let buf = filled(&nv, 64, |i| i as f32);
    let mut rows = family(&nv);
    let v = |a: usize, b: usize| buf.view(a..b).unwrap();
    let count = 8;
    for (row, w) in rows.iter_mut() {
        let (il, ol) = (
            row.input_len(count, n as i32),
            row.output_len(count, n as i32),
        );
        let mut is = |call: AnyCall<'_, '_>, f: fn(&Error) -> bool, what: &str| {
            let err = w.run_any(call, &stream).unwrap_err();
            assert!(f(&err), "{} {what}: {err:?}", row.name);
        };
        let shape: fn(&Error) -> bool = if row.shape == Shape::Whole {
            |e| matches!(e, Error::LengthMismatch { .. })
        } else {
            |e| matches!(e, Error::CollectiveShape { .. })
        };
        is(AnyCall::new(v(0, il - 1), v(32, 32 + ol)), shape, "input");
        is(AnyCall::new(v(0, il), v(32, 32 + ol - 1)), shape, "output");
        is(
            AnyCall::new(v(0, 0), v(32, 32)),
            |e| matches!(e, Error::EmptyCollective { .. }),
            "empty",
        );
        // The other member's block (gather, scatter), half a buffer on (whole buffers,
        // exchanges, which have no in-place form).
        let other = ((me + 1) % n) * count;
        let (i, o) = match row.shape {
            Shape::Gather => (other, 0),
            Shape::Scatter => (0, other),
            _ => (0, il / 2),
        };
        is(
            AnyCall::new(v(i, i + il), v(o, o + ol)),
            |e| matches!(e, Error::Overlap { .. }),
            "overlap",
        );
        if row.rooted {
            for root in [-1, n as i32] {
                is(
                    AnyCall::new(v(0, il), v(32, 32 + ol)).root(root),
                    |e| matches!(e, Error::InvalidRoot { .. }),
                    "root",
                );
            }
        }
    }
    // Refused calls were not numbered: the next good calls agree on every PE.
    nv.barrier_all().unwrap();
    for (k, (row, w)) in rows.iter_mut().enumerate() {
        let call = Call::blocks(row, me, n, 9, 1);
        row_case::<f32>(&nv, w, &call, Values::of(row, n, 3 + k, ReduceOp::Sum));
    }
}

gpu_test!(2, team_workspaces_move_data_among_their_members_only);
/// Team workspaces reach their members only (one GPU per PE: NVSHMEM refuses team splits on a
/// shared GPU): every row on a team of PE 1 alone, which PE 0 is refused.
fn team_workspaces_move_data_among_their_members_only() {
    let nv = runtime(2);
    if nv.shares_gpus() {
        common::skip("team workspaces not run: they need one GPU per PE (2-GPU machine)");
        return;
    }
    let me = nv.my_pe();
    let world = nv.team_world();
    let solo = world.split_strided(1, 1, 1).unwrap();
    let stream = nv.stream().clone();
    for (k, row) in family_rows().enumerate() {
        let mut w = row
            .collective
            .create(&nv, solo.as_ref(), SLOT_BYTES)
            .unwrap();
        // PE 1 is member 0 of 1.
        let call = Call::blocks(row, 0, 1, 16, 0);
        let v = Values::of(row, 1, k, ReduceOp::Sum);
        let poison: i64 = v.poison();
        let input = filled(&nv, call.in_len, |i| v.input::<i64>(0, i));
        let out = filled(&nv, call.out_len, |_| poison);
        if me == 1 {
            run_sync(&mut w, call.any(&v, &input, &out), &stream);
            let what = call.describe::<i64>(&v);
            call.check(&what, &v, &out.to_vec().unwrap(), |_| poison);
        } else {
            let err = w.run_any(call.any(&v, &input, &out), &stream).unwrap_err();
            assert!(
                matches!(err, Error::NotInTeam { .. }),
                "{}: {err}",
                row.name
            );
            assert_eq!(out.to_vec().unwrap(), vec![poison; call.out_len]);
        }
        nv.barrier_all().unwrap();
    }
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

/// The largest block the tests below turn the low-latency protocol on for.
const LL_MAX: usize = 256 << 10;
/// Element types of the low-latency tests, and the ops of their reductions.
const LL_TYPES: [Dtype; 4] = [Dtype::U8, Dtype::F32, Dtype::Bf16, Dtype::I64];
const LL_OPS: [ReduceOp; 3] = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg];

/// Every row with T at [`ll_counts`] (every op of [`LL_OPS`] where it reduces, every root where
/// it has one), in and out of place, each call's protocol checked (past the lines' limit the
/// handshake takes it; the reductions' slots in segments of [`SLOT_BYTES`]).
fn ll_type<T: Value>(nv: &Nvshmem, rows: &mut [Row<'_>], salt: usize) {
    let (me, n) = me_n(nv);
    for (k, (count, protocol)) in ll_counts::<T>().into_iter().enumerate() {
        for (row, w) in rows.iter_mut() {
            if !takes(row, T::DTYPE) {
                continue;
            }
            for (o, &op) in ops_of(row, &LL_OPS).iter().enumerate() {
                for root in roots(row, n) {
                    let call = Call::blocks(row, me, n, count, root);
                    let v = Values::of(row, n, salt + k + 10 * o, op);
                    row_case::<T>(nv, w, &call, v);
                    let what = call.describe::<T>(&v);
                    assert_eq!(w.last_protocol(), Some(protocol), "{what}");
                }
            }
        }
    }
}

/// Every row with the low-latency protocol on (NVSH_FAMILY_LL_MAX), at sizes it takes and one
/// it does not, in and out of place; the rooted ones back to back with their root moving; an odd
/// f32 count, which the lines do not take; then 200 calls of each row back to back alternating
/// protocols and sizes with one sync at the end. Needs every member mapped (one node).
fn low_latency_lines(pes: i32) {
    // Before any workspace: the line region is sized at creation.
    std::env::set_var("NVSH_FAMILY_LL_MAX", LL_MAX.to_string());
    // The handshake just past the lines, never the pull.
    std::env::set_var(nvshmem::FAMILY_PULL_MIN_ENV, "1T");
    let nv = runtime(pes);
    let (me, n) = me_n(&nv);
    let rows = &mut family(&nv);
    for (t, dtype) in LL_TYPES.into_iter().enumerate() {
        with_type!(dtype, T => ll_type::<T>(&nv, rows, 100 * t));
    }
    rooted_back_to_back(&nv, rows);
    // An odd f32 count makes 4-byte-aligned blocks: the handshake takes it.
    for (k, (row, w)) in rows.iter_mut().enumerate() {
        let call = Call::blocks(row, me, n, 7, 0);
        let v = Values::of(row, n, 40 + k, ReduceOp::Sum);
        row_case::<f32>(&nv, w, &call, v);
        let what = call.describe::<f32>(&v);
        assert_eq!(w.last_protocol(), Some(FamilyProtocol::Direct), "{what}");
    }

    // Back to back: each call into its own output, alternating sizes (and so protocols), the
    // roots moving.
    let counts = [2usize, 65536 + 2, 1024];
    let values = |k: usize| Values::gen(n, 100 + k, ReduceOp::Sum);
    let inputs: Vec<_> = (0..200)
        .map(|k| filled(&nv, n * counts[k % 3], |i| values(k).input::<f32>(me, i)))
        .collect();
    let queue = queue(rows, &inputs, |k, row| {
        let call = Call::blocks(row, me, n, counts[k % 3], k % n);
        Some((call, values(k), FamilyProtocol::Auto))
    });
    back_to_back(&nv, rows, &queue);
}

/// A call of a back-to-back stretch: (row index, call, values, protocol to set, input).
type Queued<'a, T> = (usize, Call, Values, FamilyProtocol, SymView<'a, T>);

/// The calls of a back-to-back stretch: call k on each row that `of(k, row)` gives one (with its
/// values and the protocol to set), on input k.
fn queue<'a, T: Value>(
    rows: &[Row<'_>],
    inputs: &'a [SymmetricBuffer<'_, T>],
    of: impl Fn(usize, &'static CollectiveRow) -> Option<(Call, Values, FamilyProtocol)>,
) -> Vec<Queued<'a, T>> {
    let mut queue = Vec::new();
    for (k, input) in inputs.iter().enumerate() {
        for (r, (row, _)) in rows.iter().enumerate() {
            if let Some((call, v, protocol)) = of(k, row) {
                let i = input.view(..call.in_len).unwrap();
                queue.push((r, call, v, protocol, i));
            }
        }
    }
    queue
}

/// Runs `queue` back to back, each call into a poisoned output of its own with its protocol
/// set, one sync at the end; checks every output against its row's reference and returns the
/// protocol each call took.
fn back_to_back<T: Value>(
    nv: &Nvshmem,
    rows: &mut [Row<'_>],
    queue: &[Queued<'_, T>],
) -> Vec<FamilyProtocol> {
    let stream = nv.stream().clone();
    let mut outputs = Vec::new();
    let mut taken = Vec::new();
    for (r, call, v, protocol, input) in queue {
        let w = &mut rows[*r].1;
        w.set_protocol(*protocol);
        let poison: T = v.poison();
        let out = filled(nv, call.out_len, |_| poison);
        w.run_any(call.any(v, *input, &out), &stream).unwrap();
        taken.push(w.last_protocol().unwrap());
        outputs.push(out);
    }
    for (_, w) in rows.iter_mut() {
        w.set_protocol(FamilyProtocol::Auto);
    }
    stream.synchronize().unwrap();
    for (_, w) in rows.iter() {
        w.check().unwrap();
    }
    for (k, ((_, call, v, _, _), out)) in queue.iter().zip(&outputs).enumerate() {
        let what = format!("back-to-back call {k}: {}", call.describe::<T>(v));
        let poison: T = v.poison();
        call.check(&what, v, &out.to_vec().unwrap(), |_| poison);
    }
    nv.barrier_all().unwrap();
    taken
}

/// 300 calls of each rooted row back to back, the root moving on each call and the sizes
/// alternating between the lines and the handshake, one sync at the end: the writers never
/// hear from the readers within a call, so this is what shows a slot written again before its
/// reader had read it (prims/ll_credit.cuh).
fn rooted_back_to_back(nv: &Nvshmem, rows: &mut [Row<'_>]) {
    let (me, n) = me_n(nv);
    let counts = [2usize, 1024, 65536 + 2];
    let root = |k: usize| (k / 3) % n;
    let values = |k: usize| Values::gen(n, 200 + k, ReduceOp::Sum);
    let inputs: Vec<_> = (0..300)
        .map(|k| filled(nv, counts[k % 3], |i| values(k).input::<u32>(me, i)))
        .collect();
    let queue = queue(rows, &inputs, |k, row| {
        let call = Call::blocks(row, me, n, counts[k % 3], root(k));
        row.rooted.then(|| (call, values(k), FamilyProtocol::Auto))
    });
    back_to_back(nv, rows, &queue);
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

/// Counts of broadcast and reduce of `size`-byte elements on `n` PEs for the split protocol,
/// each with the protocol set and the one the call must take. Forced (any size splits): one
/// element; n - 1 elements (parts are 16-byte aligned, so all in the first part, the others
/// empty); one 16-byte vector per part, and one element more; counts neither n - 1 nor 16
/// bytes divide,
/// past a 64K slot per part (reduce in segments). Under `Auto`: one element below the
/// threshold (the handshake), at it (split from 3 PEs on, else the handshake), and with
/// `large` 1M + 1 and 16M + 5.
fn split_counts(size: usize, n: usize, large: bool) -> Counts {
    use FamilyProtocol::{Direct, Split};
    let per16 = (16 / size).max(1);
    let parts = n - 1;
    let forced = [parts, parts * per16, parts * per16 + 1, 1000, 65537];
    let auto = if n >= 3 { Split } else { Direct };
    protocol_counts(Split, forced, SPLIT_MIN / size, auto, large)
}

/// One element and `forced` with `protocol` set (each must take it), then under `Auto` one
/// element below `min` (the handshake) and `min` itself (`auto`), and with `large` 1M + 1 and
/// 16M + 5 (`auto`).
fn protocol_counts(
    protocol: FamilyProtocol,
    forced: [usize; 5],
    min: usize,
    auto: FamilyProtocol,
    large: bool,
) -> Counts {
    use FamilyProtocol::{Auto, Direct};
    let mut counts: Counts = [1]
        .into_iter()
        .chain(forced)
        .map(|c| (c, protocol, protocol))
        .collect();
    counts.extend([(min - 1, Auto, Direct), (min, Auto, auto)]);
    if large {
        counts.extend([((1 << 20) + 1, Auto, auto), ((16 << 20) + 5, Auto, auto)]);
    }
    counts
}

/// The pull protocol's threshold (NVSH_FAMILY_PULL_MIN) in the pull tests.
const PULL_MIN: usize = 64 << 10;

/// Counts of the rows with the pull of `size`-byte elements on `n` PEs for the pull protocol, as
/// [`split_counts`]: forced, one element, an odd count, one 16-byte vector and one element
/// more, counts past a 64K slot (no segments: the pull takes none); under `Auto` one element
/// below [`PULL_MIN`] (the handshake) and at it (the pull at 2 PEs, else the handshake), and with
/// `large` 1M + 1 and 16M + 5.
fn pull_counts(size: usize, n: usize, large: bool) -> Counts {
    use FamilyProtocol::{Direct, Pull};
    let per16 = (16 / size).max(1);
    let auto = if n == 2 { Pull } else { Direct };
    let forced = [7, per16, per16 + 1, 1000, 65537];
    protocol_counts(Pull, forced, PULL_MIN / size, auto, large)
}

/// The (type, large) cases of the rows that move data and the (type, op, large) cases of those
/// that reduce.
type TypeLists<'a> = (&'a [(Dtype, bool)], &'a [(Dtype, ReduceOp, bool)]);

/// Counts with the protocol set and the one each call must take.
type Counts = Vec<(usize, FamilyProtocol, FamilyProtocol)>;
/// [`split_counts`] or [`pull_counts`]: (element size, PEs, large).
type CountsOf = fn(usize, usize, bool) -> Counts;

/// (type, large) of the split tests' data movement and (type, op, large) of their reductions:
/// `large` cases run at 1M + 1 and 16M + 5 elements too where every PE has a GPU of its own.
const SPLIT_MOVES: [(Dtype, bool); 4] = [
    (Dtype::U8, true),
    (Dtype::F32, true),
    (Dtype::Bf16, false),
    (Dtype::I64, false),
];
const SPLIT_REDUCES: [(Dtype, ReduceOp, bool); 6] = [
    (Dtype::F32, ReduceOp::Sum, true),
    (Dtype::F32, ReduceOp::Avg, false),
    (Dtype::Bf16, ReduceOp::Max, true),
    (Dtype::F16, ReduceOp::Min, false),
    (Dtype::I64, ReduceOp::Prod, false),
    (Dtype::U32, ReduceOp::Sum, false),
];

/// A workspace of each row of the family that offers `protocol` here, over the world.
fn rows_with(nv: &Nvshmem, slot_bytes: usize, protocol: FamilyProtocol) -> Vec<Row<'_>> {
    world(nv, family_rows(), slot_bytes)
        .into_iter()
        .filter(|(_, w)| w.protocols().contains(&protocol))
        .collect()
}

/// A workspace of each row of the family that has the split protocol, over the world.
fn split_rows(nv: &Nvshmem, slot_bytes: usize) -> Vec<Row<'_>> {
    rows_with(nv, slot_bytes, FamilyProtocol::Split)
}

/// A row's calls of T (with `op` where it reduces) at `counts` from or to every root, in and
/// out of place (non-root outputs checked untouched), each call's protocol checked.
fn split_type<T: Value>(
    nv: &Nvshmem,
    (row, w): &mut Row<'_>,
    op: ReduceOp,
    salt: usize,
    (counts, large): (CountsOf, bool),
) {
    let (me, n) = me_n(nv);
    let size = std::mem::size_of::<T>();
    for (k, (count, set, want)) in counts(size, n, large).into_iter().enumerate() {
        w.set_protocol(set);
        for root in roots(row, n) {
            let call = Call::blocks(row, me, n, count, root);
            let v = Values::of(row, n, salt + k, op);
            row_case::<T>(nv, w, &call, v);
            let what = call.describe::<T>(&v);
            assert_eq!(w.last_protocol(), Some(want), "{what}");
        }
    }
    w.set_protocol(FamilyProtocol::Auto);
}

/// [`split_type`] of each row at `counts`: each of `moves` where it moves data, each of
/// `reduces` where it reduces (`large` cases only where `large`).
fn split_types(
    nv: &Nvshmem,
    rows: &mut [Row<'_>],
    (moves, reduces): TypeLists<'_>,
    salt: usize,
    (counts, large): (CountsOf, bool),
) {
    for r in rows.iter_mut() {
        let cases: Vec<(Dtype, ReduceOp, bool)> = if r.0.reduces {
            reduces.to_vec()
        } else {
            moves.iter().map(|&(d, l)| (d, ReduceOp::Sum, l)).collect()
        };
        for (c, (dtype, op, l)) in cases.into_iter().enumerate() {
            let salt = salt + 20 * c;
            with_type!(dtype, T => split_type::<T>(nv, r, op, salt, (counts, large && l)));
        }
    }
}

/// The family's rows with the split protocol (NVSH_FAMILY_SPLIT_MIN = [`SPLIT_MIN`]):
/// [`split_counts`] for several types (the reductions: several ops), every root, in and out of
/// place; 16M elements with 64K and 8M slots where every PE has a GPU of its own; 200 calls of
/// each back to back; again in rounds of 16 bytes (NVSH_FAMILY_SPLIT_ROUND: the most rounds) and
/// in one round per chunk; then the same over NVSHMEM puts only (NVSH_NO_DIRECT). At 2 PEs
/// `Auto` never splits: the forced calls there take the one-part form (the root's part to the
/// other PE, nothing passed on).
fn split_family(pes: i32) {
    // Before any workspace: both are read at creation.
    std::env::set_var(nvshmem::FAMILY_SPLIT_MIN_ENV, SPLIT_MIN.to_string());
    std::env::set_var("NVSH_FAMILY_LL_MAX", SPLIT_TEST_LL_MAX.to_string());
    // The pull never under `Auto`: these sizes are the split's and the handshake's.
    std::env::set_var(nvshmem::FAMILY_PULL_MIN_ENV, "1T");
    let nv = runtime(pes);
    let (me, n) = me_n(&nv);
    // PEs sharing a GPU take turns in time slices: 1M elements and more would take minutes
    // there (as in every_collective_on_four_pes).
    let large = !nv.shares_gpus();
    let mut rows = split_rows(&nv, SLOT_BYTES);
    assert!(!rows.is_empty(), "no row has the split protocol");
    let types = (&SPLIT_MOVES[..], &SPLIT_REDUCES[..]);
    split_types(&nv, &mut rows, types, 0, (split_counts, large));
    if large {
        // Parts larger than the benches' 8M slots: segments of n - 1 slots.
        let slotted: Vec<&CollectiveRow> = rows
            .iter()
            .map(|(r, _)| *r)
            .filter(|r| r.scratch == ScratchKind::Slots)
            .collect();
        for row in slotted {
            let mut big = row.collective.world(&nv, 8 << 20).unwrap();
            big.set_protocol(FamilyProtocol::Split);
            for root in roots(row, n) {
                let call = Call::blocks(row, me, n, (16 << 20) + 5, root);
                let v = Values::of(row, n, 520, ReduceOp::Sum);
                row_case::<f32>(&nv, &mut big, &call, v);
                let what = call.describe::<f32>(&v);
                assert_eq!(big.last_protocol(), Some(FamilyProtocol::Split), "{what}");
            }
        }
    }
    split_back_to_back(&nv, &mut rows, FamilyProtocol::Split, true);

    // Rounds of 16 bytes: every chunk in as many rounds as it may have (the most, then larger
    // rounds), and none: one round per chunk.
    for (round, salt) in [("16", 530), ("0", 565)] {
        std::env::set_var(nvshmem::FAMILY_SPLIT_ROUND_ENV, round);
        let mut rows = split_rows(&nv, SLOT_BYTES);
        let moves = [(Dtype::U8, false), (Dtype::Bf16, false)];
        let reduces = [
            (Dtype::F32, ReduceOp::Sum, false),
            (Dtype::F16, ReduceOp::Min, false),
        ];
        split_types(
            &nv,
            &mut rows,
            (&moves, &reduces),
            salt,
            (split_counts, false),
        );
        split_back_to_back(&nv, &mut rows, FamilyProtocol::Split, true);
    }
    std::env::remove_var(nvshmem::FAMILY_SPLIT_ROUND_ENV);

    // NVSHMEM puts even to mapped peers, as across nodes.
    std::env::set_var(nvshmem::NO_DIRECT_ENV, "1");
    let mut rows = split_rows(&nv, SLOT_BYTES);
    let moves = [(Dtype::U8, false), (Dtype::F32, false)];
    let reduces = [
        (Dtype::F32, ReduceOp::Sum, false),
        (Dtype::Bf16, ReduceOp::Max, false),
    ];
    split_types(
        &nv,
        &mut rows,
        (&moves, &reduces),
        600,
        (split_counts, false),
    );
    split_back_to_back(&nv, &mut rows, FamilyProtocol::Split, false);
    std::env::remove_var(nvshmem::NO_DIRECT_ENV);
}

/// 200 calls of each row back to back, one sync at the end: the root moving every 4 calls, the
/// sizes taking the low-latency lines, the handshake and `forced` (the split or the pull
/// protocol, which `Auto` takes at the larger sizes where the test's thresholds say so, and
/// which every fifth call forces at any size), so that each protocol's step follows each
/// other's on the same counters and slots. `lines`: the 8-byte calls can take the lines (every
/// PE mapped, direct stores on). 50 calls instead of 200 where PEs share a GPU (time slices).
fn split_back_to_back(
    nv: &Nvshmem,
    rows: &mut [Row<'_>],
    forced_protocol: FamilyProtocol,
    lines: bool,
) {
    let calls = if nv.shares_gpus() { 50 } else { 200 };
    let (me, n) = me_n(nv);
    // u32: 8 bytes (lines where every PE is mapped), 4000 bytes (the handshake), just past
    // SPLIT_MIN, and 256K (reduce: two segments of 64K slots per part at 3 and 4 PEs).
    let counts = [2usize, 1000, SPLIT_MIN / 4 + 3, 65536 + 2];
    let root = |k: usize| (k / 4) % n;
    let forced = |k: usize| k % 5 == 4;
    let values = |k: usize| Values::gen(n, 700 + k, ReduceOp::Sum);
    // n blocks: reduce-scatter's input (the rooted rows read the first).
    let inputs: Vec<_> = (0..calls)
        .map(|k| filled(nv, n * counts[k % 4], |i| values(k).input::<u32>(me, i)))
        .collect();
    let queue = queue(rows, &inputs, |k, row| {
        let call = Call::blocks(row, me, n, counts[k % 4], root(k));
        let set = if forced(k) {
            forced_protocol
        } else {
            FamilyProtocol::Auto
        };
        Some((call, values(k), set))
    });
    let taken = back_to_back(nv, rows, &queue);
    let mut mixed = vec![FamilyProtocol::Direct, forced_protocol];
    if lines {
        mixed.push(FamilyProtocol::LowLatency);
    }
    for p in mixed {
        assert!(taken.contains(&p), "no call took {p:?}: {taken:?}");
    }
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

/// The family's rows with the pull protocol (reduce and reduce-scatter;
/// NVSH_FAMILY_PULL_MIN = [`PULL_MIN`], the split
/// never under `Auto`): [`pull_counts`] for several types (the reductions: several ops), every
/// root, in and out of place; 200 calls of each back to back mixing it with the lines and the
/// handshake; then over NVSHMEM puts only (NVSH_NO_DIRECT), where no row offers the pull and a
/// call that asks for it takes the handshake.
fn pull_family(pes: i32) {
    std::env::set_var(nvshmem::FAMILY_PULL_MIN_ENV, PULL_MIN.to_string());
    std::env::set_var(nvshmem::FAMILY_SPLIT_MIN_ENV, "1T");
    std::env::set_var("NVSH_FAMILY_LL_MAX", SPLIT_TEST_LL_MAX.to_string());
    let nv = runtime(pes);
    let (me, n) = me_n(&nv);
    let large = !nv.shares_gpus();
    let mut rows = rows_with(&nv, SLOT_BYTES, FamilyProtocol::Pull);
    assert_eq!(
        rows.len(),
        2,
        "reduce and reduce-scatter offer the pull on one node"
    );
    // PEs sharing a GPU take turns in time slices, so every wait of a step costs one: there
    // two types, else every one.
    let reduces = match large {
        true => &SPLIT_REDUCES[..],
        false => &SPLIT_REDUCES[..2],
    };
    split_types(&nv, &mut rows, (&[], reduces), 0, (pull_counts, large));
    split_back_to_back(&nv, &mut rows, FamilyProtocol::Pull, true);

    // NVSHMEM puts even to mapped peers: the pull is not offered, and asked for it falls back.
    std::env::set_var(nvshmem::NO_DIRECT_ENV, "1");
    assert!(rows_with(&nv, SLOT_BYTES, FamilyProtocol::Pull).is_empty());
    for (k, (row, w)) in family(&nv).iter_mut().enumerate() {
        w.set_protocol(FamilyProtocol::Pull);
        for root in roots(row, n) {
            let call = Call::blocks(row, me, n, 1000, root);
            let v = Values::of(row, n, 800 + k, ReduceOp::Sum);
            row_case::<f32>(&nv, w, &call, v);
            let what = call.describe::<f32>(&v);
            assert_eq!(w.last_protocol(), Some(FamilyProtocol::Direct), "{what}");
        }
    }
    std::env::remove_var(nvshmem::NO_DIRECT_ENV);
}

gpu_test!(2, allgather_alltoall_and_broadcast_of_large_blocks);
/// Rank blocks of 16 MiB, where each block of the grid copies its own part along with its
/// stores to the first peer (device/prims/put_signal.cuh FUSED_COPY_MIN; broadcast's root its
/// input to its output): 16-byte aligned and not (then one copy after the other), in and out of
/// place, from either root, every element checked.
fn allgather_alltoall_and_broadcast_of_large_blocks() {
    let nv = runtime(2);
    if nv.shares_gpus() {
        common::skip("16 MiB blocks on a shared GPU take minutes");
        return;
    }
    let (me, n) = me_n(&nv);
    let mut rows: Vec<Row<'_>> = family(&nv)
        .into_iter()
        .filter(|(r, _)| matches!(r.name, "allgather" | "alltoall" | "broadcast"))
        .collect();
    assert_eq!(rows.len(), 3);
    for (k, count) in [(4 << 20) + 4, (4 << 20) + 1].into_iter().enumerate() {
        for (row, w) in rows.iter_mut() {
            for root in roots(row, n) {
                let call = Call::blocks(row, me, n, count, root);
                let v = Values::of(row, n, 900 + k, ReduceOp::Sum);
                row_case::<f32>(&nv, w, &call, v);
                let what = call.describe::<f32>(&v);
                assert_eq!(w.last_protocol(), Some(FamilyProtocol::Direct), "{what}");
            }
        }
    }
}

gpu_test!(2, pull_reduce_and_reduce_scatter_on_two_pes);
fn pull_reduce_and_reduce_scatter_on_two_pes() {
    pull_family(2);
}

gpu_test!(3, pull_reduce_and_reduce_scatter_on_three_pes);
fn pull_reduce_and_reduce_scatter_on_three_pes() {
    pull_family(3);
}
