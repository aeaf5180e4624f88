//! Host-initiated and stream-ordered RMA between two PEs, checked on the receiving PE.
//! Run by scripts/gpu_test.sh under `nvsh run -n 2` (tests named pe2_*).

mod common;

use common::{gpu_test, runtime, WAIT};
use nvshmem::{Cmp, Error, SignalOp};

fn pattern(pe: i32, n: usize, salt: i64) -> Vec<i64> {
    (0..n as i64)
        .map(|i| pe as i64 * 1_000_000 + i * 7 + salt)
        .collect()
}

gpu_test!(2, put_blocking_and_nbi_deliver_to_the_next_pe);
fn put_blocking_and_nbi_deliver_to_the_next_pe() {
    let nv = runtime(2);
    let (me, n) = (nv.my_pe(), nv.n_pes());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let len = 1000;
    let src = nv.alloc::<i64>(len).unwrap();
    let dst = nv.alloc::<i64>(len).unwrap();
    for (round, nbi) in [(1, false), (2, true)] {
        src.copy_from_host(&pattern(me, len, round)).unwrap();
        dst.copy_from_host(&vec![-1; len]).unwrap();
        nv.barrier_all().unwrap();
        if nbi {
            nv.put_nbi(&dst, &src, next).unwrap();
        } else {
            nv.put(&dst, &src, next).unwrap();
        }
        nv.quiet();
        nv.barrier_all().unwrap();
        assert_eq!(
            dst.to_vec().unwrap(),
            pattern(prev, len, round),
            "round {round}, nbi {nbi}"
        );
    }
}

gpu_test!(2, get_blocking_and_nbi_read_the_peer);
fn get_blocking_and_nbi_read_the_peer() {
    let nv = runtime(2);
    let me = nv.my_pe();
    let peer = 1 - me;
    let len = 4097; // not a multiple of anything convenient
    let src = nv.alloc::<i64>(len).unwrap();
    let dst = nv.alloc::<i64>(len).unwrap();
    src.copy_from_host(&pattern(me, len, 5)).unwrap();
    nv.barrier_all().unwrap();
    nv.get(&dst, &src, peer).unwrap();
    assert_eq!(dst.to_vec().unwrap(), pattern(peer, len, 5));
    dst.zero().unwrap();
    // A sub-range: elements 10..20 of the peer into 0..10 here.
    nv.get_nbi(dst.view(0..10).unwrap(), src.view(10..20).unwrap(), peer)
        .unwrap();
    nv.quiet();
    let got = dst.view(0..11).unwrap().to_vec().unwrap();
    assert_eq!(&got[..10], &pattern(peer, len, 5)[10..20]);
    assert_eq!(got[10], 0, "get must not write past its range");
    nv.barrier_all().unwrap();
}

gpu_test!(2, put_signal_host_wait_sees_data_with_the_signal);
fn put_signal_host_wait_sees_data_with_the_signal() {
    let nv = runtime(2);
    let me = nv.my_pe();
    let len = 1 << 16;
    let src = nv.alloc::<u32>(len).unwrap();
    let dst = nv.alloc::<u32>(len).unwrap();
    let sig = nv.alloc_zeroed::<u64>(1).unwrap();
    nv.barrier_all().unwrap();
    for (round, op, value, expect) in [
        (1u32, SignalOp::Set, 42u64, 42u64),
        (2, SignalOp::Add, 5, 47),
    ] {
        if me == 0 {
            let data: Vec<u32> = (0..len as u32).map(|i| i ^ (round << 20)).collect();
            src.copy_from_host(&data).unwrap();
            nv.put_signal(&dst, &src, &sig, value, op, 1).unwrap();
        } else {
            let seen = nv.signal_wait_until(&sig, Cmp::Eq, expect, WAIT).unwrap();
            assert_eq!(seen, expect);
            let want: Vec<u32> = (0..len as u32).map(|i| i ^ (round << 20)).collect();
            assert_eq!(
                dst.to_vec().unwrap(),
                want,
                "data must be complete once the signal is"
            );
        }
        nv.barrier_all().unwrap();
    }
}

gpu_test!(2, stream_ordered_put_get_and_signal_wait);
fn stream_ordered_put_get_and_signal_wait() {
    let nv = runtime(2);
    let me = nv.my_pe();
    let stream = nv.stream().clone();
    let len = 3 << 20;
    let src = nv.alloc::<f32>(len).unwrap();
    let dst = nv.alloc::<f32>(len).unwrap();
    let back = nv.alloc::<f32>(len).unwrap();
    let sig = nv.alloc_zeroed::<u64>(1).unwrap();
    let data: Vec<f32> = (0..len).map(|i| i as f32 * 0.5 + me as f32).collect();
    src.copy_from_host(&data).unwrap();
    nv.barrier_all().unwrap();
    if me == 0 {
        nv.put_signal_on_stream(&dst, &src, &sig, 1, SignalOp::Set, 1, &stream)
            .unwrap();
        stream.synchronize().unwrap();
    } else {
        // The GPU waits for the signal, then reads the peer's source back with a stream get.
        nv.signal_wait_until_on_stream(&sig, Cmp::Ge, 1, &stream)
            .unwrap();
        nv.get_on_stream(&back, &src, 0, &stream).unwrap();
        stream.synchronize().unwrap();
        let want: Vec<f32> = (0..len).map(|i| i as f32 * 0.5).collect();
        assert_eq!(dst.to_vec().unwrap(), want);
        assert_eq!(back.to_vec().unwrap(), want);
    }
    // Phase 1 left PE 0's values in PE 1's dst, the very values phase 2 puts there: poison
    // them (NaN) so that a phase-2 put that delivers nothing fails.
    dst.copy_from_host(&vec![f32::NAN; len]).unwrap();
    nv.barrier_all().unwrap();
    // put_on_stream both ways at once.
    nv.put_on_stream(&dst, &src, 1 - me, &stream).unwrap();
    nv.quiet_on_stream(&stream);
    nv.barrier_all_on_stream(&stream).unwrap();
    stream.synchronize().unwrap();
    let want: Vec<f32> = (0..len).map(|i| i as f32 * 0.5 + (1 - me) as f32).collect();
    assert_eq!(dst.to_vec().unwrap(), want);
}

gpu_test!(2, atomics_fetch_add_and_compare_swap);
fn atomics_fetch_add_and_compare_swap() {
    let nv = runtime(2);
    let me = nv.my_pe();
    let counter = nv.alloc_zeroed::<u64>(1).unwrap();
    let word = nv.alloc_zeroed::<i64>(1).unwrap();
    nv.barrier_all().unwrap();
    // Both PEs add to PE 0's counter; every old value must be distinct.
    let olds: Vec<u64> = (0..500)
        .map(|_| nv.atomic_fetch_add(&counter, 1u64, 0).unwrap())
        .collect();
    nv.barrier_all().unwrap();
    if me == 0 {
        assert_eq!(counter.to_vec().unwrap(), vec![1000]);
    }
    assert!(
        olds.windows(2).all(|w| w[0] < w[1]),
        "fetch_add returned non-increasing values"
    );
    // Compare-swap on PE 1's word: exactly one PE wins the swap from 0.
    let old = nv
        .atomic_compare_swap(&word, 0i64, -(me as i64) - 5, 1)
        .unwrap();
    nv.barrier_all().unwrap();
    let won = old == 0;
    let final_value = nv.atomic_fetch_add(&word, 0i64, 1).unwrap();
    if won {
        assert_eq!(final_value, -(me as i64) - 5);
    } else {
        assert!(final_value == -5 || final_value == -6);
        assert_eq!(old, final_value, "the loser sees the winner's value");
    }
    nv.barrier_all().unwrap();
}

gpu_test!(2, barrier_orders_puts_before_reads);
fn barrier_orders_puts_before_reads() {
    let nv = runtime(2);
    let me = nv.my_pe();
    let cell = nv.alloc_zeroed::<u64>(64).unwrap();
    let src = nv.alloc::<u64>(64).unwrap();
    for round in 1..=200u64 {
        if me == 0 {
            src.copy_from_host(&[round; 64]).unwrap();
            nv.put_nbi(&cell, &src, 1).unwrap();
        }
        // barrier_all completes PE 0's puts before anyone passes it.
        nv.barrier_all().unwrap();
        if me == 1 {
            assert_eq!(cell.to_vec().unwrap(), vec![round; 64], "round {round}");
        }
        nv.barrier_all().unwrap();
    }
}

gpu_test!(
    2,
    bad_lengths_pes_and_ranges_are_errors_and_the_runtime_goes_on
);
fn bad_lengths_pes_and_ranges_are_errors_and_the_runtime_goes_on() {
    let nv = runtime(2);
    let me = nv.my_pe();
    let a = nv.alloc::<i32>(16).unwrap();
    let b = nv.alloc::<i32>(8).unwrap();
    let sig = nv.alloc_zeroed::<u64>(2).unwrap();
    assert!(matches!(
        nv.put(&a, &b, 1 - me),
        Err(Error::LengthMismatch {
            dest: 16,
            src: 8,
            ..
        })
    ));
    assert!(matches!(
        nv.put(&b, &b, 2),
        Err(Error::InvalidPe { pe: 2, n_pes: 2 })
    ));
    assert!(matches!(nv.get(&b, &b, -1), Err(Error::InvalidPe { .. })));
    assert!(matches!(
        a.view(10..17),
        Err(Error::OutOfBounds {
            start: 10,
            end: 17,
            len: 16,
            ..
        })
    ));
    let (start, end) = (5, 3);
    assert!(matches!(a.view(start..end), Err(Error::OutOfBounds { .. })));
    assert!(matches!(
        nv.signal_fetch(&sig),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        nv.atomic_fetch_add(&sig, 1u64, 0),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        a.copy_from_host(&[1, 2, 3]),
        Err(Error::HostLengthMismatch { .. })
    ));
    assert!(matches!(nv.alloc::<u8>(0), Err(Error::ZeroLength)));
    assert!(matches!(
        nv.alloc_aligned::<u8>(8, 3),
        Err(Error::InvalidAlignment { align: 3 })
    ));
    assert!(matches!(b.peer_ptr(7), Err(Error::InvalidPe { .. })));
    let stream = nv.stream().clone();
    assert!(matches!(
        nv.put_device(&a, &b, 1 - me, &stream),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        nv.put_device(&b, &b, 5, &stream),
        Err(Error::InvalidPe { .. })
    ));
    // Still usable: a valid exchange after all the refused calls.
    b.copy_from_host(&[me + 10; 8]).unwrap();
    nv.barrier_all().unwrap();
    nv.put(a.view(0..8).unwrap(), &b, 1 - me).unwrap();
    nv.barrier_all().unwrap();
    assert_eq!(
        a.view(0..8).unwrap().to_vec().unwrap(),
        vec![(1 - me) + 10; 8]
    );
}

gpu_test!(2, buffers_freed_before_finalize_and_leaks_reported);
fn buffers_freed_before_finalize_and_leaks_reported() {
    let nv = runtime(2);
    let base = nvshmem::tools::live_buffers().len();
    {
        let bufs: Vec<_> = (1..=10)
            .map(|i| nv.alloc::<f64>(i * 1000).unwrap())
            .collect();
        assert_eq!(nvshmem::tools::live_buffers().len(), base + 10);
        drop(bufs);
    }
    assert_eq!(
        nvshmem::tools::live_buffers().len(),
        base,
        "dropped buffers are freed"
    );
    // Memory comes back: allocating and freeing 100 x 64 MiB must not exhaust a 1 GiB heap.
    for _ in 0..100 {
        let b = nv.alloc::<u8>(64 << 20).unwrap();
        drop(b);
    }
    let kept = nv.alloc::<u32>(1234).unwrap();
    std::mem::forget(kept);
    nv.barrier_all().unwrap();
    let leaked = nv.finalize();
    assert_eq!(leaked.len(), 1, "{leaked:?}");
    assert_eq!(
        (leaked[0].len, leaked[0].bytes, leaked[0].elem),
        (1234, 4936, "u32")
    );
    assert!(nvshmem::tools::live_buffers().is_empty());
}

gpu_test!(2, peer_pointers_and_teams);
fn peer_pointers_and_teams() {
    let nv = runtime(2);
    let me = nv.my_pe();
    let buf = nv.alloc::<u8>(64).unwrap();
    assert!(
        buf.peer_ptr(me).unwrap().is_some(),
        "own memory is always directly reachable"
    );
    // On one node with NVLink/PCIe peers the other PE is reachable directly too.
    assert!(buf.peer_ptr(1 - me).unwrap().is_some());
    let world = nv.team_world();
    assert_eq!((world.my_pe(), world.n_pes()), (me, 2));
    assert_eq!(nv.team_node().n_pes(), 2);
    let shared = nv.team_shared();
    assert_eq!(shared.n_pes(), 2);
    if nv.shares_gpus() {
        // NVSHMEM refuses team splits with several PEs per GPU; the runtime says so.
        let err = world.split_strided(1, 1, 1).unwrap_err();
        assert!(matches!(err, Error::TeamSplit { .. }), "{err}");
        nv.barrier_all().unwrap();
        common::skip("the team split part not run: it needs one GPU per PE (2-GPU machine)");
        return;
    }
    // PE 1 alone in a team of its own; PE 0 is not a member.
    let solo = world.split_strided(1, 1, 1).unwrap();
    assert_eq!(solo.is_some(), me == 1);
    if let Some(t) = &solo {
        assert_eq!((t.my_pe(), t.n_pes()), (0, 1));
        assert_eq!(t.translate_pe(0, &world).unwrap(), Some(1));
    }
    assert_eq!(world.translate_pe(0, &world).unwrap(), Some(0));
    assert!(
        world.split_strided(1, 1, 2).is_err(),
        "a split past the team is refused"
    );
    drop(solo);
    nv.barrier_all().unwrap();
}
