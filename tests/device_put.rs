//! Device-initiated puts and puts with signal between two PEs, every size checked on the
//! receiver. Run by scripts/gpu_test.sh under `nvsh run -n 2`.

mod common;

use common::{gpu_test, runtime, WAIT};
use half::{bf16, f16};
use nvshmem::{Cmp, Completion, Element, LaunchShape, Nvshmem, SignalOp};

/// Puts `values` from each PE into the next one with the device kernel and checks what arrived.
fn exchange<T: Element>(nv: &Nvshmem, make: impl Fn(i32, usize) -> T, len: usize) {
    let (me, n) = (nv.my_pe(), nv.n_pes());
    let src = nv.alloc::<T>(len).unwrap();
    let dst = nv.alloc::<T>(len + 1).unwrap();
    let mine: Vec<T> = (0..len).map(|i| make(me, i)).collect();
    src.copy_from_host(&mine).unwrap();
    let guard = make(-1, 0);
    dst.copy_from_host(&vec![guard; len + 1]).unwrap();
    nv.barrier_all().unwrap();
    let stream = nv.stream().clone();
    nv.put_device(dst.view(..len).unwrap(), &src, (me + 1) % n, &stream)
        .unwrap();
    nv.quiet_on_stream(&stream);
    stream.synchronize().unwrap();
    nv.barrier_all().unwrap();
    let prev = (me + n - 1) % n;
    let got = dst.to_vec().unwrap();
    let want: Vec<T> = (0..len).map(|i| make(prev, i)).collect();
    assert_eq!(&got[..len], &want[..], "{} x {len}", T::NAME);
    assert_eq!(got[len], guard, "{} x {len}: wrote past the end", T::NAME);
}

gpu_test!(2, device_put_every_element_type);
fn device_put_every_element_type() {
    let nv = runtime(2);
    exchange(&nv, |pe, i| pe as f32 + i as f32 * 0.25, 1000);
    exchange(&nv, |pe, i| pe as f64 * 1e9 + i as f64, 1000);
    exchange(
        &nv,
        |pe, i| f16::from_f32(pe as f32 + (i % 512) as f32),
        1000,
    );
    exchange(
        &nv,
        |pe, i| bf16::from_f32(pe as f32 * 2.0 + (i % 128) as f32),
        1000,
    );
    exchange(&nv, |pe, i| pe * 100_000 + i as i32, 1000);
    exchange(&nv, |pe, i| -(pe as i64) << 40 | i as i64, 1000);
    exchange(
        &nv,
        |pe, i| (pe as u32).wrapping_mul(7_777) ^ i as u32,
        1000,
    );
    exchange(&nv, |pe, i| (pe as u64) << 48 | i as u64, 1000);
    exchange(&nv, |pe, i| (pe as u8).wrapping_mul(31) ^ i as u8, 1000);
}

gpu_test!(2, device_put_sizes_and_shapes);
fn device_put_sizes_and_shapes() {
    let nv = runtime(2);
    // Odd sizes (not multiples of 16 bytes) up to several chunks per block and beyond.
    for len in [1usize, 3, 17, 4095, 65_537, 1 << 20, (16 << 20) + 5] {
        exchange(&nv, |pe, i| (pe as u8) ^ (i % 251) as u8, len);
    }
    // Explicit shapes, completion inside the kernel.
    let me = nv.my_pe();
    let len = (8 << 20) + 3;
    let src = nv.alloc::<u8>(len).unwrap();
    let dst = nv.alloc::<u8>(len).unwrap();
    let stream = nv.stream().clone();
    for (k, shape) in [
        (1u8, 1u32, 32u32),
        (2, 7, 256),
        (3, 32, 1024),
        (4, 132, 1024),
    ]
    .map(|(k, b, t)| {
        (
            k,
            LaunchShape {
                blocks: b,
                threads: t,
            },
        )
    }) {
        let data: Vec<u8> = (0..len)
            .map(|i| (i as u8).wrapping_add(k * 13 + me as u8))
            .collect();
        src.copy_from_host(&data).unwrap();
        dst.zero().unwrap();
        nv.barrier_all().unwrap();
        nv.put_device_with(&dst, &src, 1 - me, shape, Completion::InKernel, &stream)
            .unwrap();
        stream.synchronize().unwrap();
        nv.barrier_all().unwrap();
        let want: Vec<u8> = (0..len)
            .map(|i| (i as u8).wrapping_add(k * 13 + (1 - me) as u8))
            .collect();
        assert!(dst.to_vec().unwrap() == want, "shape {shape}");
    }
}

gpu_test!(
    2,
    device_put_unaligned_views_take_the_nvshmem_path_and_arrive
);
fn device_put_unaligned_views_take_the_nvshmem_path_and_arrive() {
    let nv = runtime(2);
    let me = nv.my_pe();
    let stream = nv.stream().clone();
    let len = (1 << 20) + 13;
    let src = nv.alloc::<u8>(len + 64).unwrap();
    let dst = nv.alloc::<u8>(len + 64).unwrap();
    let data: Vec<u8> = (0..len + 64)
        .map(|i| (i as u8).wrapping_mul(5) ^ me as u8)
        .collect();
    src.copy_from_host(&data).unwrap();
    dst.zero().unwrap();
    nv.barrier_all().unwrap();
    // Source at offset 3, destination at offset 5: neither 16-byte aligned.
    let (s, d) = (src.view(3..3 + len).unwrap(), dst.view(5..5 + len).unwrap());
    nv.put_device(d, s, 1 - me, &stream).unwrap();
    nv.quiet_on_stream(&stream);
    stream.synchronize().unwrap();
    nv.barrier_all().unwrap();
    let got = dst.to_vec().unwrap();
    let theirs: Vec<u8> = (0..len + 64)
        .map(|i| (i as u8).wrapping_mul(5) ^ (1 - me) as u8)
        .collect();
    assert!(
        got[..5].iter().all(|&b| b == 0),
        "bytes before the view were written"
    );
    assert!(
        got[5..5 + len] == theirs[3..3 + len],
        "unaligned put delivered wrong data"
    );
    assert!(
        got[5 + len..].iter().all(|&b| b == 0),
        "bytes after the view were written"
    );
}

gpu_test!(2, device_put_signal_orders_data_before_signal);
fn device_put_signal_orders_data_before_signal() {
    let nv = runtime(2);
    let me = nv.my_pe();
    let stream = nv.stream().clone();
    let len = (4 << 20) + 7;
    let src = nv.alloc::<u32>(len).unwrap();
    let dst = nv.alloc::<u32>(len).unwrap();
    let sig = nv.alloc_zeroed::<u64>(1).unwrap();
    nv.barrier_all().unwrap();
    let mut expected_sig = 0u64;
    // Add with many blocks (shares of the value), Add with value smaller than the block count,
    // then Set in one block.
    for (round, op, value) in [
        (1u32, SignalOp::Add, 64u64),
        (2, SignalOp::Add, 3),
        (3, SignalOp::Set, 1000),
    ] {
        expected_sig = if op == SignalOp::Set {
            value
        } else {
            expected_sig + value
        };
        if me == 0 {
            let data: Vec<u32> = (0..len as u32)
                .map(|i| i.wrapping_mul(round) + round)
                .collect();
            src.copy_from_host(&data).unwrap();
            let shape = LaunchShape {
                blocks: 32,
                threads: 1024,
            };
            nv.put_signal_device(&dst, &src, &sig, value, op, 1, shape, &stream)
                .unwrap();
            stream.synchronize().unwrap();
        } else {
            // The receiver trusts the signal alone: no quiet, no barrier before reading.
            nv.signal_wait_until(&sig, Cmp::Eq, expected_sig, WAIT)
                .unwrap();
            let want: Vec<u32> = (0..len as u32)
                .map(|i| i.wrapping_mul(round) + round)
                .collect();
            assert!(
                dst.to_vec().unwrap() == want,
                "round {round}: data incomplete at signal"
            );
        }
        nv.barrier_all().unwrap();
    }
}
