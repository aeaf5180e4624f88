//! The exchanges (alltoallv, allgatherv, grouped send/recv) against host-computed expectations:
//! every element of every output on the receiving PE, outputs poisoned before each call (the
//! gaps between parts must stay poisoned), exact comparison. Skewed and zero counts, counts on
//! the host and in device memory, in place, send/recv patterns (ring, pairwise, all-to-all,
//! self, several per peer, a subset of PEs), NVSHMEM puts only, back-to-back calls, graph
//! replay, and mismatches ending in typed errors on both ends.
//! Run by scripts/gpu_test.sh (tests named peN_* run as N-PE jobs).

mod common;

use common::data::{expect, filled, laid_out, me_n, part_of};
use common::reference::Tag;
use common::{gpu_test, runtime};
use half::{bf16, f16};
use nvshmem::ExchangePairs;
use nvshmem::{
    Allgatherv, Alltoallv, DeviceParts, Error, FamilyProtocol, Nvshmem, P2p, P2pGroup, Parts,
    SymmetricBuffer,
};

/// Elements member `s` sends member `r` in alltoallv (scale `m`; 0 for some pairs).
fn pair_count(s: usize, r: usize, m: usize, salt: usize) -> usize {
    ((s * 5 + r * 3 + salt) % 4) * m + (s + r + salt) % 3
}

/// Element `k` of what `s` sends `r`: tags that differ by pair and position.
fn pair_tag<T: Tag>(s: usize, r: usize, k: usize, salt: usize) -> T {
    T::tag(s, k * 8 + r, salt)
}

/// A u64 device copy of `v` (the device-count forms).
fn device_u64<'nv>(nv: &'nv Nvshmem, v: &[usize]) -> SymmetricBuffer<'nv, u64> {
    filled(nv, v.len(), |i| v[i] as u64)
}

/// One workspace of each exchange over the world.
fn exchanges(nv: &Nvshmem) -> (Alltoallv<'_>, Allgatherv<'_>, P2pGroup<'_>) {
    (
        Alltoallv::world(nv).unwrap(),
        Allgatherv::world(nv).unwrap(),
        P2pGroup::world(nv).unwrap(),
    )
}

fn alltoallv<T: Tag>(nv: &Nvshmem, a: &mut Alltoallv<'_>, m: usize, salt: usize, device: bool) {
    let (me, n) = me_n(nv);
    let stream = nv.stream().clone();
    let send_counts: Vec<usize> = (0..n).map(|r| pair_count(me, r, m, salt)).collect();
    let recv_counts: Vec<usize> = (0..n).map(|s| pair_count(s, me, m, salt)).collect();
    let (send_displs, in_len) = laid_out(&send_counts, 1);
    let (recv_displs, out_len) = laid_out(&recv_counts, 2);
    let input = filled(nv, in_len, |i| {
        match part_of(i, &send_counts, &send_displs) {
            Some((r, k)) => pair_tag::<T>(me, r, k, salt),
            None => T::poison(),
        }
    });
    let output = filled(nv, out_len, |_| T::poison());
    if device {
        let sc = device_u64(nv, &send_counts);
        let sd = device_u64(nv, &send_displs);
        let rc = device_u64(nv, &recv_counts);
        let rd = device_u64(nv, &recv_displs);
        let send = DeviceParts {
            counts: (&sc).into(),
            displs: (&sd).into(),
        };
        let recv = DeviceParts {
            counts: (&rc).into(),
            displs: (&rd).into(),
        };
        a.run_device(&input, &send, &output, &recv, &stream)
            .unwrap();
        a.sync(&stream).unwrap();
    } else {
        let send = Parts {
            counts: &send_counts,
            displs: &send_displs,
        };
        let recv = Parts {
            counts: &recv_counts,
            displs: &recv_displs,
        };
        a.run(&input, send, &output, recv, &stream).unwrap();
        a.sync(&stream).unwrap();
    }
    let what = format!("alltoallv {} scale {m} (device counts: {device})", T::NAME);
    expect(&what, &output.to_vec().unwrap(), |i| {
        match part_of(i, &recv_counts, &recv_displs) {
            Some((s, k)) => pair_tag(s, me, k, salt),
            None => T::poison(),
        }
    });
    nv.barrier_all().unwrap();
}

/// Elements member `r` contributes to allgatherv; the last member none at even salts.
fn member_count(r: usize, n: usize, m: usize, salt: usize) -> usize {
    if n > 1 && r == n - 1 && salt % 2 == 0 {
        return 0;
    }
    ((r * 3 + salt) % 3) * m + (r + 1) % 2 + 1
}

fn allgatherv<T: Tag>(nv: &Nvshmem, a: &mut Allgatherv<'_>, m: usize, salt: usize, device: bool) {
    let (me, n) = me_n(nv);
    let stream = nv.stream().clone();
    let counts: Vec<usize> = (0..n).map(|r| member_count(r, n, m, salt)).collect();
    let (displs, len) = laid_out(&counts, 3);
    let want = |i: usize| match part_of(i, &counts, &displs) {
        Some((r, k)) => T::tag(r, k, salt),
        None => T::poison(),
    };
    let what = format!("allgatherv {} scale {m} (device counts: {device})", T::NAME);
    let (dc, dd) = (device_u64(nv, &counts), device_u64(nv, &displs));
    let parts = Parts {
        counts: &counts,
        displs: &displs,
    };
    let dparts = DeviceParts {
        counts: (&dc).into(),
        displs: (&dd).into(),
    };
    // Out of place; a zero-count member passes an empty view. Every member allocates the
    // largest count, so that the output after it lies at one symmetric address everywhere
    // (allgather's blocks put straight into it; sizes that differ between PEs leave the heaps
    // out of step, which NVSHMEM does not allow).
    let input = alike(nv, |r| counts[r], |k| T::tag(me, k, salt));
    let view = input.view(..counts[me]).unwrap();
    let output = filled(nv, len, |_| T::poison());
    if device {
        a.run_device(view, &output, &dparts, &stream).unwrap();
    } else {
        a.run(view, &output, parts, &stream).unwrap();
    }
    a.sync(&stream).unwrap();
    expect(&what, &output.to_vec().unwrap(), want);
    nv.barrier_all().unwrap();
    // In place: the own part of the output is the input.
    let buf = filled(nv, len, |i| match part_of(i, &counts, &displs) {
        Some((r, k)) if r == me => T::tag(me, k, salt),
        _ => T::poison(),
    });
    let own = buf.view(displs[me]..displs[me] + counts[me]).unwrap();
    if device {
        a.run_device(own, &buf, &dparts, &stream).unwrap();
    } else {
        a.run(own, &buf, parts, &stream).unwrap();
    }
    a.sync(&stream).unwrap();
    expect(&format!("{what}, in place"), &buf.to_vec().unwrap(), want);
    nv.barrier_all().unwrap();
}

/// The send/recv patterns of a group: ring (two messages per neighbour), pairwise, all-to-all
/// with itself, itself only. Lengths differ per pair.
fn group_patterns<T: Tag>(nv: &Nvshmem, g: &mut P2pGroup<'_>, m: usize, salt: usize) {
    let (me, n) = me_n(nv);
    let stream = nv.stream().clone();
    let len = |s: usize, r: usize, j: usize| pair_count(s, r, m, salt + j) + 1;
    let tag = |s: usize, r: usize, j: usize, k: usize| pair_tag::<T>(s, r, k * 2 + j, salt);
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    // Ring, two messages each way, matched in order.
    let sends: Vec<_> = (0..2)
        .map(|j| filled(nv, len(me, next, j), |k| tag(me, next, j, k)))
        .collect();
    let recvs: Vec<_> = (0..2)
        .map(|j| filled(nv, len(prev, me, j), |_| T::poison()))
        .collect();
    let mut ops: Vec<P2p<'_>> = Vec::new();
    for j in 0..2 {
        ops.push(P2p::recv(&recvs[j], prev as i32));
        ops.push(P2p::send(&sends[j], next as i32));
    }
    g.run(&ops, &stream).unwrap();
    g.sync(&stream).unwrap();
    for (j, r) in recvs.iter().enumerate() {
        let what = format!("ring {} message {j} from {prev}", T::NAME);
        expect(&what, &r.to_vec().unwrap(), |k| tag(prev, me, j, k));
    }
    drop(ops);
    nv.barrier_all().unwrap();
    // All to all, itself included, every PE a different length.
    let sends: Vec<_> = (0..n)
        .map(|r| filled(nv, len(me, r, 0), |k| tag(me, r, 0, k)))
        .collect();
    let recvs: Vec<_> = (0..n)
        .map(|s| filled(nv, len(s, me, 0), |_| T::poison()))
        .collect();
    let ops: Vec<P2p<'_>> = (0..n)
        .flat_map(|r| {
            [
                P2p::send(&sends[r], r as i32),
                P2p::recv(&recvs[r], r as i32),
            ]
        })
        .collect();
    g.run(&ops, &stream).unwrap();
    g.sync(&stream).unwrap();
    for (s, r) in recvs.iter().enumerate() {
        expect(
            &format!("all to all {} from {s}", T::NAME),
            &r.to_vec().unwrap(),
            |k| tag(s, me, 0, k),
        );
    }
    drop(ops);
    nv.barrier_all().unwrap();
    // Pairwise (rank ^ 1; an odd last PE sends to itself).
    let partner = if (me ^ 1) < n { me ^ 1 } else { me };
    let send = filled(nv, len(me, partner, 1), |k| tag(me, partner, 1, k));
    let recv = filled(nv, len(partner, me, 1), |_| T::poison());
    let ops = [
        P2p::send(&send, partner as i32),
        P2p::recv(&recv, partner as i32),
    ];
    g.run(&ops, &stream).unwrap();
    g.sync(&stream).unwrap();
    expect(
        &format!("pairwise {} from {partner}", T::NAME),
        &recv.to_vec().unwrap(),
        |k| tag(partner, me, 1, k),
    );
    nv.barrier_all().unwrap();
}

fn every_exchange(nv: &Nvshmem, scales: &[usize]) {
    let (mut a2a, mut agv, mut g) = exchanges(nv);
    for (k, &m) in scales.iter().enumerate() {
        for device in [false, true] {
            alltoallv::<f32>(nv, &mut a2a, m, k, device);
            alltoallv::<u8>(nv, &mut a2a, m, k + 1, device);
            alltoallv::<bf16>(nv, &mut a2a, m, k + 2, device);
            alltoallv::<i64>(nv, &mut a2a, m, k + 3, device);
            allgatherv::<f32>(nv, &mut agv, m, k, device);
            allgatherv::<u8>(nv, &mut agv, m, k + 1, device);
            allgatherv::<i64>(nv, &mut agv, m, k + 2, device);
        }
        group_patterns::<f32>(nv, &mut g, m, k);
        group_patterns::<u8>(nv, &mut g, m, k + 1);
        group_patterns::<f64>(nv, &mut g, m, k + 2);
    }
}

/// Scales of the counts: a few elements, about 1000, about 65537, and over 1M (odd).
const SCALES: [usize; 4] = [1, 1000, 65537, (1 << 20) + 1];

gpu_test!(1, every_exchange_on_one_pe);
fn every_exchange_on_one_pe() {
    every_exchange(&runtime(1), &SCALES);
}

gpu_test!(2, every_exchange_skewed_and_zero_counts);
fn every_exchange_skewed_and_zero_counts() {
    every_exchange(&runtime(2), &SCALES);
}

gpu_test!(3, every_exchange_on_three_pes);
fn every_exchange_on_three_pes() {
    every_exchange(&runtime(3), &SCALES[..3]);
}

gpu_test!(4, every_exchange_on_four_pes);
fn every_exchange_on_four_pes() {
    every_exchange(&runtime(4), &SCALES[..3]);
}

gpu_test!(4, every_exchange_across_pretend_nodes);
/// 4 PEs as 2 pretend nodes x 2 (NVSH_PRETEND_NODE_SIZE): pairs inside a node may take lines or
/// direct stores, pairs across take NVSHMEM puts (docs/nodes.md).
fn every_exchange_across_pretend_nodes() {
    let Some(nv) = common::pretend_runtime(4, 2) else {
        return;
    };
    every_exchange(&nv, &SCALES[..3]);
}

gpu_test!(2, every_exchange_between_two_pretend_nodes);
/// 2 PEs as 2 pretend nodes of 1: no lines and no direct stores between them (docs/nodes.md).
fn every_exchange_between_two_pretend_nodes() {
    let Some(nv) = common::pretend_runtime(2, 1) else {
        return;
    };
    every_exchange(&nv, &SCALES[..3]);
}

gpu_test!(2, every_exchange_through_nvshmem_puts);
/// NVSHMEM puts even to mapped peers: the path across nodes.
fn every_exchange_through_nvshmem_puts() {
    std::env::set_var(nvshmem::NO_DIRECT_ENV, "1");
    every_exchange(&runtime(2), &SCALES[..3]);
}

gpu_test!(3, a_group_among_some_pes_leaves_the_others_out);
/// Grouped send/recv is not collective: PEs 0 and 1 exchange three times while PE 2 only
/// sends to itself once; then all three take part in one call and every pair still matches.
fn a_group_among_some_pes_leaves_the_others_out() {
    let nv = runtime(3);
    let (me, n) = me_n(&nv);
    let stream = nv.stream().clone();
    let mut g = P2pGroup::world(&nv).unwrap();
    let bufs: Vec<_> = (0..4)
        .map(|j| filled(&nv, 1000 + j, |_| u32::poison()))
        .collect();
    let srcs: Vec<_> = (0..4)
        .map(|j| filled(&nv, 1000 + j, |k| u32::tag(me, k, j)))
        .collect();
    if me < 2 {
        let peer = 1 - me;
        for j in 0..3 {
            let ops = [
                P2p::send(&srcs[j], peer as i32),
                P2p::recv(&bufs[j], peer as i32),
            ];
            g.run(&ops, &stream).unwrap();
        }
    } else {
        g.run(&[P2p::send(&srcs[0], 2), P2p::recv(&bufs[0], 2)], &stream)
            .unwrap();
    }
    // Now everyone: a ring over the three.
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    g.run(
        &[
            P2p::send(&srcs[3], next as i32),
            P2p::recv(&bufs[3], prev as i32),
        ],
        &stream,
    )
    .unwrap();
    g.sync(&stream).unwrap();
    if me < 2 {
        for (j, buf) in bufs.iter().enumerate().take(3) {
            expect(&format!("pair call {j}"), &buf.to_vec().unwrap(), |k| {
                u32::tag(1 - me, k, j)
            });
        }
    } else {
        expect("self call", &bufs[0].to_vec().unwrap(), |k| {
            u32::tag(2, k, 0)
        });
    }
    expect("ring", &bufs[3].to_vec().unwrap(), |k| u32::tag(prev, k, 3));
    nv.barrier_all().unwrap();
}

gpu_test!(2, a_thousand_back_to_back_exchanges);
/// 1000 calls back to back (alltoallv with host counts, allgatherv with device counts, a ring
/// group), one sync at the end: each kind rotates over 4 outputs with inputs of their own.
fn a_thousand_back_to_back_exchanges() {
    let nv = runtime(2);
    let (me, n) = me_n(&nv);
    let stream = nv.stream().clone();
    let (mut a2a, mut agv, mut g) = exchanges(&nv);
    let m = 3000;
    struct Slot<'nv> {
        counts: Vec<usize>,
        displs: Vec<usize>,
        input: SymmetricBuffer<'nv, f32>,
        output: SymmetricBuffer<'nv, f32>,
    }
    // alltoallv slot s: send counts of salt s; allgatherv and ring: member counts of salt s.
    let a2a_slots: Vec<Slot> = (0..4)
        .map(|s| {
            let counts: Vec<usize> = (0..n).map(|r| pair_count(me, r, m, s)).collect();
            let (displs, len) = laid_out(&counts, 1);
            let input = filled(&nv, len, |i| match part_of(i, &counts, &displs) {
                Some((r, k)) => pair_tag::<f32>(me, r, k, s),
                None => f32::poison(),
            });
            let rc: Vec<usize> = (0..n).map(|p| pair_count(p, me, m, s)).collect();
            let (rd, out_len) = laid_out(&rc, 0);
            let output = filled(&nv, out_len, |_| f32::poison());
            // counts/displs here: the receive side; the send side is recomputed below.
            Slot {
                counts: rc,
                displs: rd,
                input,
                output,
            }
        })
        .collect();
    let agv_counts: Vec<Vec<usize>> = (0..4)
        .map(|s| (0..n).map(|r| member_count(r, n, m, s + 1)).collect())
        .collect();
    let agv_slots: Vec<_> = (0..4)
        .map(|s| {
            let (displs, len) = laid_out(&agv_counts[s], 0);
            let c = agv_counts[s][me].max(1);
            let input = filled(&nv, c, |k| f32::tag(me, k, s));
            let output = filled(&nv, len, |_| f32::poison());
            let dc = device_u64(&nv, &agv_counts[s]);
            let dd = device_u64(&nv, &displs);
            (input, output, dc, dd, displs)
        })
        .collect();
    let ring: Vec<_> = (0..4)
        .map(|s| {
            let input = filled(&nv, m + s, |k| f32::tag(me, k, s));
            let output = filled(&nv, m + s, |_| f32::poison());
            (input, output)
        })
        .collect();
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    for i in 0..1000 {
        let s = (i / 3) % 4;
        match i % 3 {
            0 => {
                let sl = &a2a_slots[s];
                let sc: Vec<usize> = (0..n).map(|r| pair_count(me, r, m, s)).collect();
                let (sd, _) = laid_out(&sc, 1);
                let send = Parts {
                    counts: &sc,
                    displs: &sd,
                };
                let recv = Parts {
                    counts: &sl.counts,
                    displs: &sl.displs,
                };
                a2a.run(&sl.input, send, &sl.output, recv, &stream).unwrap();
            }
            1 => {
                let (input, output, dc, dd, _) = &agv_slots[s];
                let c = agv_counts[s][me];
                let parts = DeviceParts {
                    counts: dc.into(),
                    displs: dd.into(),
                };
                let view = input.view(0..c).unwrap();
                agv.run_device(view, output, &parts, &stream).unwrap();
            }
            _ => {
                let (input, output) = &ring[s];
                g.run(
                    &[
                        P2p::send(input, next as i32),
                        P2p::recv(output, prev as i32),
                    ],
                    &stream,
                )
                .unwrap();
            }
        }
    }
    stream.synchronize().unwrap();
    a2a.check().unwrap();
    agv.check().unwrap();
    g.check().unwrap();
    for s in 0..4 {
        let sl = &a2a_slots[s];
        expect(
            &format!("alltoallv slot {s}"),
            &sl.output.to_vec().unwrap(),
            |i| {
                let (p, k) = part_of(i, &sl.counts, &sl.displs).unwrap();
                pair_tag(p, me, k, s)
            },
        );
        let (_, output, _, _, displs) = &agv_slots[s];
        expect(
            &format!("allgatherv slot {s}"),
            &output.to_vec().unwrap(),
            |i| {
                let (r, k) = part_of(i, &agv_counts[s], displs).unwrap();
                f32::tag(r, k, s)
            },
        );
        expect(
            &format!("ring slot {s}"),
            &ring[s].1.to_vec().unwrap(),
            |k| f32::tag(prev, k, s),
        );
    }
    nv.barrier_all().unwrap();
}

gpu_test!(2, replays_of_a_captured_graph_of_exchanges_see_fresh_data);
/// Alltoallv (host counts), allgatherv (device counts) and a group captured once, replayed 10
/// times with fresh inputs and poisoned outputs.
fn replays_of_a_captured_graph_of_exchanges_see_fresh_data() {
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    let nv = runtime(2);
    let (me, n) = me_n(&nv);
    let stream = nv.stream().clone();
    let (mut a2a, mut agv, mut g) = exchanges(&nv);
    let count = 70_001;
    let counts = vec![count; n];
    let displs: Vec<usize> = (0..n).map(|r| r * count).collect();
    let parts = Parts {
        counts: &counts,
        displs: &displs,
    };
    let input = nv.alloc::<f32>(n * count).unwrap();
    let out_a2a = nv.alloc::<f32>(n * count).unwrap();
    let out_agv = nv.alloc::<f32>(n * count).unwrap();
    let out_g = nv.alloc::<f32>(count).unwrap();
    let (dc, dd) = (device_u64(&nv, &counts), device_u64(&nv, &displs));
    let dparts = DeviceParts {
        counts: (&dc).into(),
        displs: (&dd).into(),
    };
    let own = input.view(..count).unwrap();
    let peer = ((me + 1) % n) as i32;
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .unwrap();
    a2a.run(&input, parts, &out_a2a, parts, &stream).unwrap();
    agv.run_device(own, &out_agv, &dparts, &stream).unwrap();
    g.run(&[P2p::send(own, peer), P2p::recv(&out_g, peer)], &stream)
        .unwrap();
    let graph = stream
        .end_capture(CUgraphInstantiate_flags(0))
        .unwrap()
        .expect("a graph was captured");
    for it in 0..10usize {
        input
            .copy_from_host(
                &(0..n * count)
                    .map(|i| f32::tag(me, i, it))
                    .collect::<Vec<_>>(),
            )
            .unwrap();
        for out in [&out_a2a, &out_agv] {
            out.copy_from_host(&vec![f32::NAN; n * count]).unwrap();
        }
        out_g.copy_from_host(&vec![f32::NAN; count]).unwrap();
        graph.launch().unwrap();
        stream.synchronize().unwrap();
        for c in [a2a.check(), agv.check(), g.check()] {
            c.unwrap();
        }
        let what = |w: &str| format!("replay {it}, {w}");
        expect(&what("alltoallv"), &out_a2a.to_vec().unwrap(), |i| {
            f32::tag(i / count, me * count + i % count, it)
        });
        expect(&what("allgatherv"), &out_agv.to_vec().unwrap(), |i| {
            f32::tag(i / count, i % count, it)
        });
        let from = (me + n - 1) % n;
        expect(&what("group"), &out_g.to_vec().unwrap(), |k| {
            f32::tag(from, k, it)
        });
        // Every PE checked this replay before anyone overwrites its input for the next.
        nv.barrier_all().unwrap();
    }
}

/// The error of a failed exchange, as text.
fn mismatch(r: nvshmem::Result<()>) -> String {
    match r {
        Err(e @ Error::TransferMismatch { .. }) => e.to_string(),
        other => panic!("want a transfer mismatch, got {other:?}"),
    }
}

gpu_test!(
    2,
    mismatched_transfers_fail_on_both_ends_and_the_runtime_goes_on
);
/// A send of 10 f32 against a receive of 12, then of f32 against i32 of the same size, then
/// device counts past the input: a typed error on both PEs each time, naming what differs;
/// the failed workspace stays failed, and a new one works. Through the mailbox (lines off:
/// mismatched_lines_fail_on_the_receiver_then_on_the_sender has them).
fn mismatched_transfers_fail_on_both_ends_and_the_runtime_goes_on() {
    let nv = runtime(2);
    let (me, _) = me_n(&nv);
    let stream = nv.stream().clone();
    let peer = (1 - me) as i32;
    let f10 = filled(&nv, 10, |k| f32::tag(me, k, 0));
    let f12 = filled(&nv, 12, |_| f32::poison());
    let i10 = filled(&nv, 10, |_| i32::poison());
    // Sizes.
    let mut g = P2pGroup::world(&nv).unwrap();
    g.set_protocol(FamilyProtocol::Direct);
    let ops = if me == 0 {
        [P2p::send(&f10, peer)]
    } else {
        [P2p::recv(&f12, peer)]
    };
    g.run(&ops, &stream).unwrap();
    let err = mismatch(g.sync(&stream));
    if me == 0 {
        assert!(
            err.contains(
                "PE 1 receives 48 bytes of f32 from this PE where it sends 40 bytes of f32"
            ),
            "{err}"
        );
    } else {
        assert!(err.contains("PE 0 found that its transfers"), "{err}");
    }
    // The failed workspace stays failed.
    assert!(matches!(
        g.run(&ops, &stream),
        Err(Error::TransferMismatch { .. })
    ));
    nv.barrier_all().unwrap();
    // Types.
    let mut g = P2pGroup::world(&nv).unwrap();
    g.set_protocol(FamilyProtocol::Direct);
    let ops = if me == 0 {
        [P2p::send(&f10, peer)]
    } else {
        [P2p::recv(&i10, peer)]
    };
    g.run(&ops, &stream).unwrap();
    let err = mismatch(g.sync(&stream));
    if me == 0 {
        assert!(
            err.contains("40 bytes of i32 from this PE where it sends 40 bytes of f32"),
            "{err}"
        );
    }
    nv.barrier_all().unwrap();
    // Device counts past the input on PE 1: out of range there, a peer's error on PE 0.
    let mut a = Alltoallv::world(&nv).unwrap();
    let send_counts = if me == 1 { [5usize, 50] } else { [5, 5] };
    let sc = device_u64(&nv, &send_counts);
    let sd = device_u64(&nv, &[0, 5]);
    let rc = device_u64(&nv, &[5, 5]);
    let rd = device_u64(&nv, &[0, 5]);
    let input = filled(&nv, 10, |k| f32::tag(me, k, 1));
    let output = filled(&nv, 10, |_| f32::poison());
    let send = DeviceParts {
        counts: (&sc).into(),
        displs: (&sd).into(),
    };
    let recv = DeviceParts {
        counts: (&rc).into(),
        displs: (&rd).into(),
    };
    a.run_device(&input, &send, &output, &recv, &stream)
        .unwrap();
    let err = mismatch(a.sync(&stream));
    if me == 1 {
        assert!(
            err.contains("reach element 55 of a buffer of 10 elements"),
            "{err}"
        );
    } else {
        assert!(err.contains("PE 1"), "{err}");
    }
    nv.barrier_all().unwrap();
    // The runtime goes on: a fresh group moves data.
    let mut g = P2pGroup::world(&nv).unwrap();
    let got = filled(&nv, 10, |_| f32::poison());
    g.run(&[P2p::send(&f10, peer), P2p::recv(&got, peer)], &stream)
        .unwrap();
    g.sync(&stream).unwrap();
    expect("after the failures", &got.to_vec().unwrap(), |k| {
        f32::tag(peer as usize, k, 0)
    });
    nv.barrier_all().unwrap();
}

gpu_test!(2, wrong_parts_and_lists_are_refused_before_launch);
/// Host checks: parts past a buffer, wrong numbers of counts, an input of the wrong length,
/// overlapping receives, a peer outside the team; then good calls on the same workspaces.
fn wrong_parts_and_lists_are_refused_before_launch() {
    let nv = runtime(2);
    let (me, _) = me_n(&nv);
    let stream = nv.stream().clone();
    let (mut a, mut agv, mut g) = exchanges(&nv);
    let input = filled(&nv, 8, |k| f32::tag(me, k, 0));
    let output = filled(&nv, 8, |_| f32::poison());
    let shape = |r: nvshmem::Result<()>| match r {
        Err(Error::CollectiveShape { detail, .. }) => detail,
        other => panic!("want a shape error, got {other:?}"),
    };
    let past = Parts {
        counts: &[4, 5],
        displs: &[0, 4],
    };
    let fine = Parts {
        counts: &[4, 4],
        displs: &[0, 4],
    };
    let d = shape(a.run(&input, past, &output, fine, &stream));
    assert!(
        d.contains("part 1 of the input (5 elements from 4) reaches past its 8"),
        "{d}"
    );
    let short = Parts {
        counts: &[8],
        displs: &[0],
    };
    let d = shape(a.run(&input, fine, &output, short, &stream));
    assert!(d.contains("1 counts and 1 displacements"), "{d}");
    let d = shape(agv.run(&input, &output, fine, &stream));
    assert!(
        d.contains("the input holds 8 elements but this member's count is 4"),
        "{d}"
    );
    let r0 = output.view(0..4).unwrap();
    let r1 = output.view(2..6).unwrap();
    let d = shape(g.run(&[P2p::recv(r0, 0), P2p::recv(r1, 1)], &stream));
    assert!(d.contains("overlaps"), "{d}");
    assert!(matches!(
        g.run(&[P2p::send(&input, 2)], &stream),
        Err(Error::InvalidPe { pe: 2, .. })
    ));
    // Nothing was launched: good calls go through.
    a.run(&input, fine, &output, fine, &stream).unwrap();
    a.sync(&stream).unwrap();
    expect("alltoallv after refusals", &output.to_vec().unwrap(), |i| {
        f32::tag(i / 4, me * 4 + i % 4, 0)
    });
    nv.barrier_all().unwrap();
}

// ---- Low-latency lines (NVSH_EXCHANGE_LL_MAX) ----

/// The lines' bound these tests set (the default, set before any workspace: the line region
/// is sized at creation).
const LL_MAX: usize = 256 << 10;

fn lines_on() {
    std::env::set_var(nvshmem::EXCHANGE_LL_MAX_ENV, LL_MAX.to_string());
}

/// The pairs a PE expects of a call in which it sends `send(r)` bytes to each other member r
/// and receives `recv(s)` from each other member s (zero bytes is a pair too), with lines up
/// to `limit` bytes (None: off).
fn expected_pairs(
    me: usize,
    n: usize,
    limit: Option<usize>,
    send: impl Fn(usize) -> usize,
    recv: impl Fn(usize) -> usize,
) -> ExchangePairs {
    let mut p = ExchangePairs::default();
    for peer in (0..n).filter(|&p| p != me) {
        for bytes in [send(peer), recv(peer)] {
            if limit.is_some_and(|l| bytes <= l) {
                p.lines += 1;
            } else {
                p.mailbox += 1;
            }
        }
    }
    p
}

/// A symmetric buffer every PE allocates alike (the largest `len(pe)` of any PE, at least 1:
/// allocation is collective), filled with `f`.
fn alike<'nv, T: Tag>(
    nv: &'nv Nvshmem,
    len: impl Fn(usize) -> usize,
    f: impl Fn(usize) -> T,
) -> SymmetricBuffer<'nv, T> {
    let most = (0..nv.n_pes() as usize).map(len).max().unwrap_or(0).max(1);
    filled(nv, most, f)
}

/// Alltoallv of T with host counts where member s sends member r `count(s, r)` elements,
/// parts `gap` elements apart (an odd gap leaves them unaligned for every type wider than a
/// byte), into a poisoned output; every element checked on the receiver and the pairs the
/// call took asserted (lines up to `limit` bytes; None: off).
fn ll_alltoallv<T: Tag>(
    nv: &Nvshmem,
    a: &mut Alltoallv<'_>,
    count: impl Fn(usize, usize) -> usize,
    gap: usize,
    limit: Option<usize>,
    salt: usize,
) {
    let (me, n) = me_n(nv);
    let stream = nv.stream().clone();
    let size = std::mem::size_of::<T>();
    let sends = |s: usize| (0..n).map(|r| count(s, r)).collect::<Vec<_>>();
    let recvs = |r: usize| (0..n).map(|s| count(s, r)).collect::<Vec<_>>();
    let (send_counts, recv_counts) = (sends(me), recvs(me));
    let (send_displs, _) = laid_out(&send_counts, gap);
    let (recv_displs, _) = laid_out(&recv_counts, gap + 1);
    let input = alike(
        nv,
        |p| laid_out(&sends(p), gap).1,
        |i| match part_of(i, &send_counts, &send_displs) {
            Some((r, k)) => pair_tag::<T>(me, r, k, salt),
            None => T::poison(),
        },
    );
    let output = alike(nv, |p| laid_out(&recvs(p), gap + 1).1, |_| T::poison());
    let send = Parts {
        counts: &send_counts,
        displs: &send_displs,
    };
    let recv = Parts {
        counts: &recv_counts,
        displs: &recv_displs,
    };
    a.run(&input, send, &output, recv, &stream).unwrap();
    a.sync(&stream).unwrap();
    let what = format!("lines alltoallv {} (salt {salt}, gap {gap})", T::NAME);
    expect(&what, &output.to_vec().unwrap(), |i| {
        match part_of(i, &recv_counts, &recv_displs) {
            Some((s, k)) => pair_tag(s, me, k, salt),
            None => T::poison(),
        }
    });
    let want = expected_pairs(
        me,
        n,
        limit,
        |r| send_counts[r] * size,
        |s| recv_counts[s] * size,
    );
    assert_eq!(a.last_pairs(), want, "{what}");
    let all = want.mailbox == 0 && want.lines > 0;
    assert_eq!(
        a.last_protocol() == FamilyProtocol::LowLatency,
        all,
        "{what}"
    );
    nv.barrier_all().unwrap();
}

/// Allgatherv of T with host counts, member r contributing `count(r)` elements, parts `gap`
/// apart, out of place and in place; every element checked and the pairs asserted.
fn ll_allgatherv<T: Tag>(
    nv: &Nvshmem,
    a: &mut Allgatherv<'_>,
    count: impl Fn(usize) -> usize,
    gap: usize,
    salt: usize,
) {
    let (me, n) = me_n(nv);
    let stream = nv.stream().clone();
    let size = std::mem::size_of::<T>();
    let counts: Vec<usize> = (0..n).map(&count).collect();
    let (displs, len) = laid_out(&counts, gap);
    let parts = Parts {
        counts: &counts,
        displs: &displs,
    };
    let want = |i: usize| match part_of(i, &counts, &displs) {
        Some((r, k)) => T::tag(r, k, salt),
        None => T::poison(),
    };
    // One launch of lines where every part fits, else one of allgather's blocks: no pair
    // takes the mailbox either way (up to 16 members).
    let all_fit = counts.iter().all(|&c| c * size <= LL_MAX);
    let pairs = match all_fit {
        true => expected_pairs(me, n, Some(LL_MAX), |_| 0, |_| 0),
        false => ExchangePairs::default(),
    };
    let what = format!("lines allgatherv {} (salt {salt}, gap {gap})", T::NAME);
    let input = alike(nv, &count, |k| T::tag(me, k, salt));
    let output = filled(nv, len.max(1), |_| T::poison());
    a.run(input.view(..counts[me]).unwrap(), &output, parts, &stream)
        .unwrap();
    a.sync(&stream).unwrap();
    expect(&what, &output.to_vec().unwrap(), want);
    assert_eq!(a.last_pairs(), pairs, "{what}");
    assert_eq!(
        a.last_protocol() == FamilyProtocol::LowLatency,
        all_fit && n > 1,
        "{what}"
    );
    nv.barrier_all().unwrap();
    let buf = filled(nv, len.max(1), |i| match part_of(i, &counts, &displs) {
        Some((r, k)) if r == me => T::tag(me, k, salt),
        _ => T::poison(),
    });
    let own = buf.view(displs[me]..displs[me] + counts[me]).unwrap();
    a.run(own, &buf, parts, &stream).unwrap();
    a.sync(&stream).unwrap();
    expect(&format!("{what}, in place"), &buf.to_vec().unwrap(), want);
    assert_eq!(a.last_pairs(), pairs, "{what}, in place");
    nv.barrier_all().unwrap();
}

/// `total` elements in `k` transfers (the first takes what does not divide).
fn split(total: usize, k: usize) -> Vec<usize> {
    let mut sizes = vec![total / k; k];
    sizes[0] += total % k;
    sizes
}

/// Grouped send/recv of T: `k` transfers to the next PE adding up to `total` elements and as
/// many from the previous one, each buffer a view `offset` elements into its allocation (odd:
/// unaligned) with one element after it, plus one to itself; every receive buffer checked
/// whole (around the view it stays poisoned) and the pairs asserted.
fn ll_group<T: Tag>(
    nv: &Nvshmem,
    g: &mut P2pGroup<'_>,
    k: usize,
    total: usize,
    offset: usize,
    salt: usize,
) {
    let (me, n) = me_n(nv);
    let stream = nv.stream().clone();
    let size = std::mem::size_of::<T>();
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let sizes = split(total, k);
    let tag = |s: usize, j: usize, i: usize| T::tag(s, i * 8 + j, salt);
    let sends: Vec<_> = (0..k)
        .map(|j| {
            filled(nv, offset + sizes[j] + 1, |i| match i.checked_sub(offset) {
                Some(i) => tag(me, j, i),
                None => T::poison(),
            })
        })
        .collect();
    let recvs: Vec<_> = (0..k)
        .map(|j| filled(nv, offset + sizes[j] + 1, |_| T::poison()))
        .collect();
    let own_send = filled(nv, 5, |i| tag(me, 9, i));
    let own_recv = filled(nv, 5, |_| T::poison());
    let mut ops: Vec<P2p<'_>> = Vec::new();
    for j in 0..k {
        let at = offset..offset + sizes[j];
        ops.push(P2p::send(sends[j].view(at.clone()).unwrap(), next as i32));
        ops.push(P2p::recv(recvs[j].view(at).unwrap(), prev as i32));
    }
    ops.push(P2p::send(&own_send, me as i32));
    ops.push(P2p::recv(&own_recv, me as i32));
    g.run(&ops, &stream).unwrap();
    g.sync(&stream).unwrap();
    drop(ops);
    let what = format!(
        "lines group {} x {k} adding up to {total} (offset {offset})",
        T::NAME
    );
    for (j, r) in recvs.iter().enumerate() {
        expect(
            &format!("{what}, message {j}"),
            &r.to_vec().unwrap(),
            |i| match i.checked_sub(offset) {
                Some(i) if i < sizes[j] => tag(prev, j, i),
                _ => T::poison(),
            },
        );
    }
    expect(
        &format!("{what}, to itself"),
        &own_recv.to_vec().unwrap(),
        |i| tag(me, 9, i),
    );
    let bytes = total * size;
    let mut want = ExchangePairs::default();
    if n > 1 {
        // A ring: one pair each way, both ways the same peer at 2 PEs.
        let lines = bytes <= LL_MAX;
        want.lines = 2 * lines as usize;
        want.mailbox = 2 * !lines as usize;
    }
    assert_eq!(g.last_pairs(), want, "{what}");
    nv.barrier_all().unwrap();
}

/// Every case of the lines for one element type: alltoallv, allgatherv and groups at zero, one
/// element, odd counts, the bound and one element past it, mixes of those, aligned and not.
fn ll_every<T: Tag>(
    nv: &Nvshmem,
    a2a: &mut Alltoallv<'_>,
    agv: &mut Allgatherv<'_>,
    g: &mut P2pGroup<'_>,
    salt: usize,
) {
    let size = std::mem::size_of::<T>();
    let at = LL_MAX / size;
    let mix = move |s: usize, r: usize| [0, 1, at, at + 1, 1000 + s, 7][(s * 3 + r) % 6];
    ll_alltoallv::<T>(nv, a2a, |_, _| 0, 1, Some(LL_MAX), salt);
    ll_alltoallv::<T>(nv, a2a, |_, _| 1, 1, Some(LL_MAX), salt + 1);
    ll_alltoallv::<T>(nv, a2a, |s, r| 2 * (s + r) + 1, 1, Some(LL_MAX), salt + 2);
    ll_alltoallv::<T>(nv, a2a, |_, _| at, 0, Some(LL_MAX), salt + 3);
    ll_alltoallv::<T>(nv, a2a, |_, _| at, 1, Some(LL_MAX), salt + 4);
    ll_alltoallv::<T>(nv, a2a, |_, _| at + 1, 1, Some(LL_MAX), salt + 5);
    ll_alltoallv::<T>(nv, a2a, mix, 1, Some(LL_MAX), salt + 6);
    ll_alltoallv::<T>(nv, a2a, mix, 0, Some(LL_MAX), salt + 7);
    let agv_mix = move |r: usize| [at, at + 1, 3, 0][r % 4];
    ll_allgatherv::<T>(nv, agv, |_| 0, 1, salt);
    ll_allgatherv::<T>(nv, agv, |_| 1, 1, salt + 1);
    ll_allgatherv::<T>(nv, agv, |r| 2 * r + 1, 1, salt + 2);
    ll_allgatherv::<T>(nv, agv, |_| at, 0, salt + 3);
    ll_allgatherv::<T>(nv, agv, |_| at + 1, 1, salt + 4);
    ll_allgatherv::<T>(nv, agv, agv_mix, 1, salt + 5);
    for (k, total, offset) in [
        (1, 0, 0),
        (1, 1, 1),
        (3, 7, 1),
        (8, at, 0),
        (8, at, 3),
        (8, at + 1, 1),
        (1, at, 1),
        (1, at + 1, 0),
        (5, 1001, 1),
    ] {
        ll_group::<T>(nv, g, k, total, offset, salt + k + total % 7);
    }
}

/// Every element type through the lines, then a group of all-to-all with itself at mixed
/// sizes, asserting that `lines_max` reports the bound.
fn low_latency_exchanges(pes: i32) {
    lines_on();
    let nv = runtime(pes);
    let (mut a2a, mut agv, mut g) = exchanges(&nv);
    assert_eq!(a2a.lines_max(), LL_MAX);
    assert_eq!(g.lines_max(), LL_MAX);
    ll_every::<f32>(&nv, &mut a2a, &mut agv, &mut g, 0);
    ll_every::<f64>(&nv, &mut a2a, &mut agv, &mut g, 10);
    ll_every::<f16>(&nv, &mut a2a, &mut agv, &mut g, 20);
    ll_every::<bf16>(&nv, &mut a2a, &mut agv, &mut g, 30);
    ll_every::<i32>(&nv, &mut a2a, &mut agv, &mut g, 40);
    ll_every::<i64>(&nv, &mut a2a, &mut agv, &mut g, 50);
    ll_every::<u32>(&nv, &mut a2a, &mut agv, &mut g, 60);
    ll_every::<u64>(&nv, &mut a2a, &mut agv, &mut g, 70);
    ll_every::<u8>(&nv, &mut a2a, &mut agv, &mut g, 80);
    // The existing patterns (ring of two, all to all with itself, pairwise) with lines on.
    group_patterns::<f32>(&nv, &mut g, 1, 90);
    group_patterns::<u8>(&nv, &mut g, 1000, 91);
    // Lines off on request: the mailbox for every pair.
    a2a.set_protocol(FamilyProtocol::Direct);
    ll_alltoallv::<u8>(&nv, &mut a2a, |_, _| 9, 1, None, 95);
    a2a.set_protocol(FamilyProtocol::Auto);
}

gpu_test!(2, low_latency_exchanges_on_two_pes);
fn low_latency_exchanges_on_two_pes() {
    low_latency_exchanges(2);
}

gpu_test!(4, low_latency_exchanges_on_four_pes);
fn low_latency_exchanges_on_four_pes() {
    low_latency_exchanges(4);
}

/// One exchange call of the back-to-back run: its output and what each element must be.
type Check<'nv> = (
    String,
    SymmetricBuffer<'nv, f32>,
    Box<dyn Fn(usize) -> f32 + 'nv>,
);

/// 300 exchange calls back to back with lines on (alltoallv and allgatherv with host counts,
/// a group), the sizes of each pair cycling through lines, the bound, one past it and zero,
/// the group's peers moving every call, one sync at the end; every call into outputs of its
/// own, all checked afterwards. Then a one-way stream: PE 0 sends PE 1 sixty messages in a row
/// while PE 1 starts receiving late, so PE 0 runs ahead until the credits stop it: a slot
/// written again before it was read would show as a wrong message or a timeout.
fn lines_back_to_back(pes: i32) {
    lines_on();
    let nv = runtime(pes);
    let (me, n) = me_n(&nv);
    let stream = nv.stream().clone();
    let (mut a2a, mut agv, mut g) = exchanges(&nv);
    let at = LL_MAX / 4;
    let sizes = [2usize, 1000, 0, at, at + 1, 7];
    let size = |i: usize, k: usize| sizes[(i / 3 + k) % sizes.len()];
    let mut checks: Vec<Check<'_>> = Vec::new();
    let mut keep = Vec::new();
    for i in 0..300 {
        match i % 3 {
            0 => {
                let count = move |s: usize, r: usize| size(i, s + 2 * r);
                let sends = |s: usize| (0..n).map(|r| count(s, r)).collect::<Vec<_>>();
                let recvs = |r: usize| (0..n).map(|s| count(s, r)).collect::<Vec<_>>();
                let (sc, rc) = (sends(me), recvs(me));
                let (sd, _) = laid_out(&sc, 1);
                let (rd, _) = laid_out(&rc, 1);
                let input = alike(
                    &nv,
                    |p| laid_out(&sends(p), 1).1,
                    |j| match part_of(j, &sc, &sd) {
                        Some((r, k)) => pair_tag::<f32>(me, r, k, i),
                        None => f32::poison(),
                    },
                );
                let output = alike(&nv, |p| laid_out(&recvs(p), 1).1, |_| f32::poison());
                let send = Parts {
                    counts: &sc,
                    displs: &sd,
                };
                let recv = Parts {
                    counts: &rc,
                    displs: &rd,
                };
                a2a.run(&input, send, &output, recv, &stream).unwrap();
                let want = move |j: usize| match part_of(j, &rc, &rd) {
                    Some((s, k)) => pair_tag(s, me, k, i),
                    None => f32::poison(),
                };
                checks.push((format!("alltoallv call {i}"), output, Box::new(want)));
                keep.push(input);
            }
            1 => {
                let counts: Vec<usize> = (0..n).map(|r| size(i, r)).collect();
                let (displs, len) = laid_out(&counts, 1);
                let input = alike(&nv, |p| counts[p], |k| f32::tag(me, k, i));
                let output = filled(&nv, len, |_| f32::poison());
                let parts = Parts {
                    counts: &counts,
                    displs: &displs,
                };
                agv.run(input.view(..counts[me]).unwrap(), &output, parts, &stream)
                    .unwrap();
                let want = move |j: usize| match part_of(j, &counts, &displs) {
                    Some((r, k)) => f32::tag(r, k, i),
                    None => f32::poison(),
                };
                checks.push((format!("allgatherv call {i}"), output, Box::new(want)));
                keep.push(input);
            }
            _ => {
                let shift = 1 + (i / 3) % (n - 1).max(1);
                let (to, from) = ((me + shift) % n, (me + n - shift) % n);
                let len = size(i, 0);
                let input = filled(&nv, len.max(1), |k| f32::tag(me, k, i));
                let output = filled(&nv, len.max(1), |_| f32::poison());
                g.run(
                    &[
                        P2p::send(input.view(..len).unwrap(), to as i32),
                        P2p::recv(output.view(..len).unwrap(), from as i32),
                    ],
                    &stream,
                )
                .unwrap();
                let want = move |k: usize| match k < len {
                    true => f32::tag(from, k, i),
                    false => f32::poison(),
                };
                checks.push((
                    format!("group call {i} from {from}"),
                    output,
                    Box::new(want),
                ));
                keep.push(input);
            }
        }
    }
    stream.synchronize().unwrap();
    a2a.check().unwrap();
    agv.check().unwrap();
    g.check().unwrap();
    for (what, output, want) in &checks {
        expect(what, &output.to_vec().unwrap(), want);
    }
    drop((checks, keep));
    nv.barrier_all().unwrap();

    // One way: PE 0 sends, PE 1 receives late; the others sit it out.
    let messages = 60;
    let len = |j: usize| if j % 10 == 9 { at + 1 } else { 1000 + j };
    let bufs: Vec<_> = (0..messages)
        .map(|j| match me {
            0 => filled(&nv, at + 1, |k| f32::tag(0, k, 500 + j)),
            _ => filled(&nv, at + 1, |_| f32::poison()),
        })
        .collect();
    if me == 0 {
        for (j, b) in bufs.iter().enumerate() {
            g.run(&[P2p::send(b.view(..len(j)).unwrap(), 1)], &stream)
                .unwrap();
        }
    } else if me == 1 {
        std::thread::sleep(std::time::Duration::from_millis(300));
        for (j, b) in bufs.iter().enumerate() {
            g.run(&[P2p::recv(b.view(..len(j)).unwrap(), 0)], &stream)
                .unwrap();
        }
    }
    g.sync(&stream).unwrap();
    if me == 1 {
        for (j, b) in bufs.iter().enumerate() {
            expect(
                &format!("one-way message {j}"),
                &b.to_vec().unwrap(),
                |k| match k < len(j) {
                    true => f32::tag(0, k, 500 + j),
                    false => f32::poison(),
                },
            );
        }
    }
    nv.barrier_all().unwrap();
}

gpu_test!(2, lines_back_to_back_on_two_pes);
fn lines_back_to_back_on_two_pes() {
    lines_back_to_back(2);
}

gpu_test!(4, lines_back_to_back_on_four_pes);
fn lines_back_to_back_on_four_pes() {
    lines_back_to_back(4);
}

gpu_test!(2, replays_of_a_captured_graph_with_lines_see_fresh_data);
/// Alltoallv and allgatherv with host counts and a ring group, captured once with lines for
/// some pairs and the mailbox for others (an allgatherv past the bound), replayed 10 times with
/// fresh inputs and poisoned outputs: the pair sequences, credits and slot parities live on the
/// device, so every replay takes the next ones.
fn replays_of_a_captured_graph_with_lines_see_fresh_data() {
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    lines_on();
    let nv = runtime(2);
    let (me, n) = me_n(&nv);
    let stream = nv.stream().clone();
    let (mut a2a, mut agv, mut g) = exchanges(&nv);
    let count = 1001;
    let big = LL_MAX / 4 + 1;
    let counts = vec![count; n];
    let displs: Vec<usize> = (0..n).map(|r| r * count).collect();
    let parts = Parts {
        counts: &counts,
        displs: &displs,
    };
    let big_counts = vec![big; n];
    let big_displs: Vec<usize> = (0..n).map(|r| r * big).collect();
    let big_parts = Parts {
        counts: &big_counts,
        displs: &big_displs,
    };
    let input = nv.alloc::<f32>(n * big).unwrap();
    let out_a2a = nv.alloc::<f32>(n * count).unwrap();
    let out_agv = nv.alloc::<f32>(n * count).unwrap();
    let out_big = nv.alloc::<f32>(n * big).unwrap();
    let out_g = nv.alloc::<f32>(count).unwrap();
    let peer = ((me + 1) % n) as i32;
    let small = input.view(..n * count).unwrap();
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .unwrap();
    a2a.run(small, parts, &out_a2a, parts, &stream).unwrap();
    agv.run(input.view(..count).unwrap(), &out_agv, parts, &stream)
        .unwrap();
    agv.run(input.view(..big).unwrap(), &out_big, big_parts, &stream)
        .unwrap();
    g.run(
        &[
            P2p::send(input.view(..count).unwrap(), peer),
            P2p::recv(&out_g, peer),
        ],
        &stream,
    )
    .unwrap();
    let graph = stream
        .end_capture(CUgraphInstantiate_flags(0))
        .unwrap()
        .expect("a graph was captured");
    for it in 0..10usize {
        input
            .copy_from_host(
                &(0..n * big)
                    .map(|i| f32::tag(me, i, it))
                    .collect::<Vec<_>>(),
            )
            .unwrap();
        for out in [&out_a2a, &out_agv] {
            out.copy_from_host(&vec![f32::NAN; n * count]).unwrap();
        }
        out_big.copy_from_host(&vec![f32::NAN; n * big]).unwrap();
        out_g.copy_from_host(&vec![f32::NAN; count]).unwrap();
        graph.launch().unwrap();
        stream.synchronize().unwrap();
        for c in [a2a.check(), agv.check(), g.check()] {
            c.unwrap();
        }
        let what = |w: &str| format!("replay {it}, {w}");
        expect(&what("alltoallv"), &out_a2a.to_vec().unwrap(), |i| {
            f32::tag(i / count, me * count + i % count, it)
        });
        expect(&what("allgatherv"), &out_agv.to_vec().unwrap(), |i| {
            f32::tag(i / count, i % count, it)
        });
        expect(
            &what("allgatherv past the bound"),
            &out_big.to_vec().unwrap(),
            |i| f32::tag(i / big, i % big, it),
        );
        let from = (me + n - 1) % n;
        expect(&what("group"), &out_g.to_vec().unwrap(), |k| {
            f32::tag(from, k, it)
        });
        nv.barrier_all().unwrap();
    }
}

gpu_test!(
    2,
    allgatherv_lines_with_parts_that_differ_fail_on_the_receiver
);
/// Allgatherv as lines where the members' parts differ: PE 1 expects 12 f32 from PE 0, which
/// sends 10 (then 2 where PE 0 sends 4): PE 1 fails in the call, naming both sizes, at once
/// (not at the deadline, though its wait for lines that never come would last that long);
/// PE 0, whose receives match, completes. The failed workspace stays failed; a fresh one
/// moves data.
fn allgatherv_lines_with_parts_that_differ_fail_on_the_receiver() {
    lines_on();
    let nv = runtime(2);
    let (me, _) = me_n(&nv);
    let stream = nv.stream().clone();
    // (PE 0's count as PE 0 sends it, as PE 1 expects it, PE 1's error)
    let cases = [
        (
            10usize,
            12usize,
            "PE 0 sends 40 bytes of f32 to this PE where this PE receives 48 bytes of f32",
        ),
        (
            4,
            2,
            "PE 0 sends 16 bytes of f32 to this PE where this PE receives 8 bytes of f32",
        ),
    ];
    for (k, (sent, expected, says)) in cases.into_iter().enumerate() {
        let mut a = Allgatherv::world(&nv).unwrap();
        let counts = if me == 0 { [sent, 3] } else { [expected, 3] };
        let displs = [0, counts[0]];
        // Symmetric buffers are alike on every PE: the part is a view.
        let whole = filled(&nv, 16, |i| f32::tag(me, i, k));
        let input = whole.view(..counts[me]).unwrap();
        let output = filled(&nv, 16, |_| f32::poison());
        let parts = Parts {
            counts: &counts,
            displs: &displs,
        };
        let start = std::time::Instant::now();
        a.run(input, &output, parts, &stream).unwrap();
        let r = a.sync(&stream);
        if me == 1 {
            let err = mismatch(r);
            assert!(err.contains(says), "case {k}: {err}");
            assert!(
                start.elapsed() < std::time::Duration::from_secs(5),
                "case {k}: the mismatch took {:?}",
                start.elapsed()
            );
            assert!(matches!(
                a.run(input, &output, parts, &stream),
                Err(Error::TransferMismatch { .. })
            ));
        } else {
            r.unwrap();
            assert_eq!(a.last_protocol(), FamilyProtocol::LowLatency, "case {k}");
        }
        nv.barrier_all().unwrap();
    }
    // The runtime goes on: a fresh workspace moves data as lines.
    let mut a = Allgatherv::world(&nv).unwrap();
    let counts = [5usize, 7];
    let displs = [0usize, 5];
    let whole = filled(&nv, 7, |i| f32::tag(me, i, 9));
    let input = whole.view(..counts[me]).unwrap();
    let output = filled(&nv, 12, |_| f32::poison());
    let parts = Parts {
        counts: &counts,
        displs: &displs,
    };
    a.run(input, &output, parts, &stream).unwrap();
    a.sync(&stream).unwrap();
    assert_eq!(a.last_protocol(), FamilyProtocol::LowLatency);
    expect("after the failures", &output.to_vec().unwrap(), |i| {
        if i < 5 {
            f32::tag(0, i, 9)
        } else {
            f32::tag(1, i - 5, 9)
        }
    });
    nv.barrier_all().unwrap();
}

gpu_test!(2, alltoallv_parts_that_differ_fail_on_both_ends);
/// Alltoallv with host counts (one launch, no mailbox) where PE 0 sends PE 1 another size than
/// PE 1 receives, each case on a fresh workspace: both as lines, both past the lines (the
/// receiver's handshake), and each end taking the other way. PE 1 fails in the call on PE 0's
/// size line, naming both sizes, at once. PE 0 fails in the call where it waits for PE 1's
/// handshake (its size or PE 1's mark), else at its next call (PE 1's mark in its slot); the
/// failed workspace stays failed. Then a fresh workspace moves data.
fn alltoallv_parts_that_differ_fail_on_both_ends() {
    lines_on();
    let nv = runtime(2);
    let (me, _) = me_n(&nv);
    let stream = nv.stream().clone();
    let at = LL_MAX / 4;
    let len = 2 + at + 12;
    let input = filled(&nv, len, |k| f32::tag(me, k, 0));
    let output = filled(&nv, len, |_| f32::poison());
    let sender_said = "PE 1 found that this PE's sends to it";
    let bytes = |c: usize| c * 4;
    // (what PE 0 sends PE 1, what PE 1 receives from PE 0, whether PE 0 fails in the call)
    let cases = [
        (10, 12, false),
        (at + 10, at + 12, true),
        (at + 1, at, true),
        (at, at + 1, false),
    ];
    for (k, (sent, expected, at_once)) in cases.into_iter().enumerate() {
        let mut a = Alltoallv::world(&nv).unwrap();
        // Own part at 0 (2 elements), the peer's from 2; PE 1 sends PE 0 3 elements.
        let (send, recv) = if me == 0 {
            ([2usize, sent], [2usize, 3])
        } else {
            ([3, 2], [expected, 2])
        };
        let displs = if me == 0 { [0usize, 2] } else { [2, 0] };
        let run = |a: &mut Alltoallv<'_>| {
            let send = Parts {
                counts: &send,
                displs: &displs,
            };
            let recv = Parts {
                counts: &recv,
                displs: &displs,
            };
            a.run(&input, send, &output, recv, &stream).unwrap();
            a.sync(&stream)
        };
        let start = std::time::Instant::now();
        let r = run(&mut a);
        let quick = |what: &str| {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(5),
                "case {k}: {what} took {:?}",
                start.elapsed()
            )
        };
        if me == 1 {
            let err = mismatch(r);
            let says = format!(
                "PE 0 sends {} bytes of f32 to this PE where this PE receives {} bytes of f32",
                bytes(sent),
                bytes(expected)
            );
            assert!(err.contains(&says), "case {k}: {err}");
            quick("the receiver's failure");
        } else if at_once {
            let err = mismatch(r);
            let says = match sent > at && expected > at {
                true => format!(
                    "PE 1 receives {} bytes of f32 from this PE where it sends {} bytes of f32",
                    bytes(expected),
                    bytes(sent)
                ),
                false => sender_said.to_string(),
            };
            assert!(err.contains(&says), "case {k}: {err}");
            quick("the sender's failure");
        } else {
            // Its lines went out without waiting; the receiver's mark meets its next call.
            r.unwrap();
            let err = mismatch(run(&mut a));
            assert!(err.contains(sender_said), "case {k}: {err}");
            quick("the sender's failure at its next call");
        }
        let send_parts = Parts {
            counts: &send,
            displs: &displs,
        };
        let recv_parts = Parts {
            counts: &recv,
            displs: &displs,
        };
        assert!(matches!(
            a.run(&input, send_parts, &output, recv_parts, &stream),
            Err(Error::TransferMismatch { .. })
        ));
        nv.barrier_all().unwrap();
    }
    // The runtime goes on: a fresh workspace moves data, lines and handshake.
    let input = filled(&nv, 2 * (at + 3), |k| f32::tag(me, k, 0));
    for count in [5, at + 3] {
        let mut a = Alltoallv::world(&nv).unwrap();
        let parts = [count, count];
        let displs = [0, count];
        let out = filled(&nv, 2 * count, |_| f32::poison());
        let p = Parts {
            counts: &parts,
            displs: &displs,
        };
        a.run(&input, p, &out, p, &stream).unwrap();
        a.sync(&stream).unwrap();
        expect("after the failures", &out.to_vec().unwrap(), |i| {
            let (from, k) = (i / count, i % count);
            f32::tag(from, me * count + k, 0)
        });
        nv.barrier_all().unwrap();
    }
}

gpu_test!(2, mismatched_lines_fail_on_the_receiver_then_on_the_sender);
/// Transfers whose two ends disagree, with lines on, each on a fresh group: the receiver
/// fails in the call (it reads the sender's header), naming both sizes; a sender whose lines
/// went out without waiting fails at its next send to that receiver, one that took the mailbox
/// (its pair past the bound) in the same call. Then a fresh group moves data.
fn mismatched_lines_fail_on_the_receiver_then_on_the_sender() {
    lines_on();
    let nv = runtime(2);
    let (me, _) = me_n(&nv);
    let stream = nv.stream().clone();
    let big = 300 << 10;
    let bytes = filled(&nv, big, |k| u8::tag(me, k, 0));
    let f10 = filled(&nv, 10, |k| f32::tag(me, k, 0));
    let f12 = filled(&nv, 12, |_| f32::poison());
    let i10 = filled(&nv, 10, |_| i32::poison());
    let sender_said = "PE 1 found that this PE's sends to it";
    // (what PE 0 sends, what PE 1 receives, PE 1's error, whether PE 0 fails in the call)
    type Ops<'a> = Vec<P2p<'a>>;
    let cases: Vec<(Ops<'_>, Ops<'_>, &str, bool)> = vec![
        (
            vec![P2p::send(&f10, 1)],
            vec![P2p::recv(&f12, 0)],
            "PE 0 sends 40 bytes of f32 to this PE where this PE receives 48 bytes of f32",
            false,
        ),
        (
            vec![P2p::send(&f10, 1)],
            vec![P2p::recv(&i10, 0)],
            "PE 0 sends 40 bytes of f32 to this PE where this PE receives 40 bytes of i32",
            false,
        ),
        (
            vec![
                P2p::send(f10.view(..2).unwrap(), 1),
                P2p::send(f10.view(2..4).unwrap(), 1),
            ],
            vec![P2p::recv(f12.view(..2).unwrap(), 0)],
            "PE 0 sends 2 transfer(s) to this PE where this PE posts 1 receive(s)",
            false,
        ),
        (
            vec![P2p::send(&bytes, 1)],
            vec![P2p::recv(bytes.view(..100 << 10).unwrap(), 0)],
            "PE 0 sends 307200 bytes of u8 to this PE where this PE receives 102400 bytes of u8",
            true,
        ),
        (
            vec![P2p::send(bytes.view(..100 << 10).unwrap(), 1)],
            vec![P2p::recv(&bytes, 0)],
            "PE 0 sends 102400 bytes of u8 to this PE where this PE receives 307200 bytes of u8",
            false,
        ),
    ];
    for (k, (send, recv, receiver_says, sender_at_once)) in cases.into_iter().enumerate() {
        let mut g = P2pGroup::world(&nv).unwrap();
        let ops = if me == 0 { send } else { recv };
        g.run(&ops, &stream).unwrap();
        let r = g.sync(&stream);
        if me == 1 {
            let err = mismatch(r);
            assert!(err.contains(receiver_says), "case {k}: {err}");
        } else if sender_at_once {
            let err = mismatch(r);
            assert!(err.contains(sender_said), "case {k}: {err}");
        } else {
            // Its lines went out without waiting; the receiver's mark meets its next send.
            r.unwrap();
            nv.barrier_all().unwrap();
            g.run(&[P2p::send(&f10, 1)], &stream).unwrap();
            let err = mismatch(g.sync(&stream));
            assert!(err.contains(sender_said), "case {k}: {err}");
            // The workspace stays failed.
            assert!(matches!(
                g.run(&[P2p::send(&f10, 1)], &stream),
                Err(Error::TransferMismatch { .. })
            ));
        }
        if me == 1 && !sender_at_once {
            nv.barrier_all().unwrap();
        }
        drop(ops);
        nv.barrier_all().unwrap();
    }
    // The runtime goes on: a fresh group moves data both ways as lines.
    let mut g = P2pGroup::world(&nv).unwrap();
    let peer = 1 - me as i32;
    let got = filled(&nv, 10, |_| f32::poison());
    g.run(&[P2p::send(&f10, peer), P2p::recv(&got, peer)], &stream)
        .unwrap();
    g.sync(&stream).unwrap();
    assert_eq!(g.last_protocol(), FamilyProtocol::LowLatency);
    expect("after the failures", &got.to_vec().unwrap(), |k| {
        f32::tag(peer as usize, k, 0)
    });
    nv.barrier_all().unwrap();
}
