//! The protocol layer's rules (device/prims/), each checked where it breaks: slot waits that must
//! not need the whole grid resident, the low-latency lines' own region, and the source of an
//! in-place put that NVSHMEM may still be reading. Values are checked exactly on every PE; outputs
//! are poisoned first. Run by scripts/gpu_test.sh.

mod common;

use common::sm_hold::SmHold;
use common::{gpu_test, runtime};
use nvshmem::NO_DIRECT_ENV;
use nvshmem::{AllreduceAlgo, Nvshmem, ReduceOp};
use nvshmem::{ALLREDUCE_DIRECT_MIN_ENV, ALLREDUCE_LL_MAX_ENV};
use std::time::Duration;

const POISON: u32 = 0x5A5A_5A5A;

/// One u32 sum of `count` elements (element i of PE p is `value(p, i)`), out of place or in
/// place, checked exactly on this PE. Returns the algorithm that ran, or the error of the run.
fn sum_u32(
    nv: &Nvshmem,
    ar: &mut nvshmem::Allreduce<'_>,
    algo: AllreduceAlgo,
    count: usize,
    in_place: bool,
    value: impl Fn(usize, usize) -> u32,
) -> nvshmem::Result<AllreduceAlgo> {
    let me = nv.my_pe() as usize;
    let n = nv.n_pes() as usize;
    let input = nv.alloc::<u32>(count)?;
    let output = nv.alloc::<u32>(count)?;
    input.copy_from_host(&(0..count).map(|i| value(me, i)).collect::<Vec<_>>())?;
    output.copy_from_host(&vec![POISON; count])?;
    let stream = nv.stream().clone();
    let used = if in_place {
        ar.run_in_place(&input, ReduceOp::Sum, algo, &stream)?
    } else {
        ar.run(&input, &output, ReduceOp::Sum, algo, &stream)?
    };
    ar.sync(&stream)?;
    let got = if in_place {
        input.to_vec()?
    } else {
        output.to_vec()?
    };
    for (i, g) in got.iter().enumerate() {
        let want = (0..n).fold(0u32, |a, p| a.wrapping_add(value(p, i)));
        assert_ne!(want, POISON, "the poison is a result");
        assert_eq!(
            *g, want,
            "{algo:?} (ran {used:?}) count {count} in place {in_place}: element {i} on PE {me}"
        );
    }
    Ok(used)
}

gpu_test!(2, slot_protocols_finish_while_another_kernel_holds_most_sms);
fn slot_protocols_finish_while_another_kernel_holds_most_sms() {
    // The slot protocols launch 32 to 64 blocks per step here; a kernel holding all SMs but a
    // few (NVSH_TEST_FREE_SMS, default 4) leaves room for only some of them at a time, as another
    // job's kernels would. A block that waits for blocks of its peers that cannot become
    // resident never finishes: the call times out (10 s) while the hold still runs (120 s at
    // most). Buffers are filled before the hold and checked after it: only the calls run under
    // it (a symmetric allocation under the hold waits for the hold to end).
    std::env::set_var(ALLREDUCE_LL_MAX_ENV, "0");
    std::env::set_var(ALLREDUCE_DIRECT_MIN_ENV, "1T");
    let nv = runtime(2);
    let mut ar = nv.allreduce_workspace(1 << 20).unwrap();
    std::env::remove_var(ALLREDUCE_LL_MAX_ENV);
    std::env::remove_var(ALLREDUCE_DIRECT_MIN_ENV);
    ar.set_timeout(Duration::from_secs(10));
    let free: i32 = std::env::var("NVSH_TEST_FREE_SMS")
        .map(|v| v.parse().unwrap())
        .unwrap_or(4);
    let count = 256 << 10; // 1 MiB of u32: one step per call
    let value = |p: usize, i: usize| (i as u32).wrapping_mul(2654435761) ^ (p as u32 + 1);
    // Warm-up without the hold: the kernels are loaded and the peers are in step.
    for algo in AllreduceAlgo::ALL {
        sum_u32(&nv, &mut ar, algo, count, false, value).unwrap();
    }
    let me = nv.my_pe() as usize;
    let bufs: Vec<_> = AllreduceAlgo::ALL
        .iter()
        .map(|_| {
            let input = nv.alloc::<u32>(count).unwrap();
            let output = nv.alloc::<u32>(count).unwrap();
            input
                .copy_from_host(&(0..count).map(|i| value(me, i)).collect::<Vec<_>>())
                .unwrap();
            output.copy_from_host(&vec![POISON; count]).unwrap();
            (input, output)
        })
        .collect();
    nv.barrier_all().unwrap();
    let stream = nv.stream().clone();
    let hold = SmHold::start(nv.context(), free, Duration::from_secs(120));
    std::thread::sleep(Duration::from_millis(300));
    for (algo, (input, output)) in AllreduceAlgo::ALL.iter().zip(&bufs) {
        let t = std::time::Instant::now();
        let done = ar
            .run(input, output, ReduceOp::Sum, *algo, &stream)
            .and_then(|_| ar.sync(&stream));
        eprintln!(
            "PE {me}: {algo:?} with all SMs but {} held: {:.1} ms",
            hold.free_sms,
            t.elapsed().as_secs_f64() * 1e3
        );
        if let Err(e) = done {
            panic!("{algo:?} with all SMs but {} held: {e}", hold.free_sms);
        }
    }
    assert!(
        hold.release(),
        "the hold ended before the calls did, so it did not hold the SMs all along"
    );
    for (algo, (_, output)) in AllreduceAlgo::ALL.iter().zip(&bufs) {
        for (i, g) in output.to_vec().unwrap().iter().enumerate() {
            let want = (0..2).fold(0u32, |a, p| a.wrapping_add(value(p, i)));
            assert_eq!(*g, want, "{algo:?}: element {i} on PE {me}");
        }
    }
    nv.barrier_all().unwrap();
}

gpu_test!(
    2,
    low_latency_lines_ignore_what_other_protocols_left_in_the_slots
);
fn low_latency_lines_ignore_what_other_protocols_left_in_the_slots() {
    // Call 0 (signal-based one-shot, 8 KiB of 3s) leaves 3s in the receive slots of parity 0;
    // call 2 (low-latency, parity 0 again) polls for lines whose flag is 3. Were both protocols
    // to share the slots, a PE would take the leftover 3s for its peer's data before the peer
    // (one second late) wrote anything.
    std::env::set_var(ALLREDUCE_LL_MAX_ENV, "4K");
    let nv = runtime(2);
    let mut ar = nv.allreduce_workspace(64 << 10).unwrap();
    std::env::remove_var(ALLREDUCE_LL_MAX_ENV);
    assert!(
        ar.settings().starts_with("low-latency one-shot up to 4K"),
        "{}",
        ar.settings()
    );
    let probe = nv.alloc::<u32>(1).unwrap();
    if probe.peer_ptr(1 - nv.my_pe()).unwrap().is_none() {
        common::skip("the low-latency protocol needs every peer mapped (nvshmem_ptr)");
        return;
    }
    let one = AllreduceAlgo::OneShot;
    for _ in 0..2 {
        sum_u32(&nv, &mut ar, one, 2048, false, |_, _| 3).unwrap();
    }
    nv.barrier_all().unwrap();
    if nv.my_pe() == 1 {
        std::thread::sleep(Duration::from_secs(1));
    }
    sum_u32(&nv, &mut ar, one, 16, false, |p, i| {
        100 + 10 * p as u32 + i as u32
    })
    .unwrap();
    nv.barrier_all().unwrap();
}

gpu_test!(
    2,
    low_latency_lines_from_2_pow_32_steps_ago_are_not_taken_for_new_ones
);
fn low_latency_lines_from_2_pow_32_steps_ago_are_not_taken_for_new_ones() {
    // Step 0 writes 4096 lines of 7s with flag 1 into the low-latency region; the step count is
    // then moved on to 2^32, whose flag is 1 again in a slot of the same parity. A line still
    // holding step 0's data would pass for the peer's (one second late) new data.
    std::env::set_var(ALLREDUCE_LL_MAX_ENV, "64K");
    let nv = runtime(2);
    let mut ar = nv.allreduce_workspace(1 << 20).unwrap();
    std::env::remove_var(ALLREDUCE_LL_MAX_ENV);
    let probe = nv.alloc::<u32>(1).unwrap();
    if probe.peer_ptr(1 - nv.my_pe()).unwrap().is_none() {
        common::skip("the low-latency protocol needs every peer mapped (nvshmem_ptr)");
        return;
    }
    let one = AllreduceAlgo::OneShot;
    sum_u32(&nv, &mut ar, one, 8192, false, |_, _| 7).unwrap();
    let stream = nv.stream().clone();
    ar.skip_steps_for_test((1 << 32) - 1, &stream).unwrap();
    nv.barrier_all().unwrap();
    if nv.my_pe() == 1 {
        std::thread::sleep(Duration::from_secs(1));
    }
    sum_u32(&nv, &mut ar, one, 8192, false, |p, i| {
        1000 * p as u32 + i as u32
    })
    .unwrap();
    // And the protocol goes on from there, through the flag's wrap to 0 (which it skips).
    for k in 0..4 {
        sum_u32(&nv, &mut ar, one, 100 + k, false, |p, i| {
            p as u32 + i as u32 + k as u32
        })
        .unwrap();
    }
    nv.barrier_all().unwrap();
}

gpu_test!(2, in_place_calls_through_nvshmem_puts_every_small_size);
fn in_place_calls_through_nvshmem_puts_every_small_size() {
    // In place, the one-shot's reduction overwrites its puts' source. Across nodes NVSHMEM's
    // puts read it from a proxy, later: they must have read it first. NVSH_NO_DIRECT sends
    // every put through NVSHMEM on one node too (whose transport copies at once, so this shows
    // the path, checked exactly, not the interleaving: that needs two nodes).
    std::env::set_var(NO_DIRECT_ENV, "1");
    let nv = runtime(2);
    let mut ar = nv.allreduce_workspace(64 << 10).unwrap();
    std::env::remove_var(NO_DIRECT_ENV);
    assert!(
        ar.settings()
            .ends_with(&format!("NVSHMEM puts only ({NO_DIRECT_ENV})")),
        "{}",
        ar.settings()
    );
    let value = |p: usize, i: usize| (i as u32 * 7 + 3) << (p * 4);
    for count in 1..=130 {
        let used = sum_u32(&nv, &mut ar, AllreduceAlgo::OneShot, count, true, value).unwrap();
        assert_eq!(used, AllreduceAlgo::OneShot);
    }
    // Every slot protocol, in place and out, segmented past 64 KiB slots.
    for algo in AllreduceAlgo::ALL {
        for count in [1, 5, 1000, 16_385, 100_003] {
            for in_place in [true, false] {
                sum_u32(&nv, &mut ar, algo, count, in_place, value).unwrap();
            }
        }
    }
    nv.barrier_all().unwrap();
}
