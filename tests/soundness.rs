//! Host-side soundness: queued GPU work and buffer frees, host copies against the runtime's
//! stream, barriers on two streams, decisions agreed before NVSHMEM's unbounded collective
//! calls, the init lifecycle, the bound CUDA context, checked sizes, failures kept.
//! Run by scripts/gpu_test.sh (pe1_* alone, pe2_* under `nvsh run -n 2`).

mod common;

use common::{gpu_test, runtime, skip, WAIT};
use cudarc::driver::{CudaContext, DevicePtr, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use nvshmem::{Cmp, Completion, Error, LaunchShape, Nvshmem};
use std::time::{Duration, Instant};

gpu_test!(
    1,
    a_buffer_dropped_under_queued_puts_is_not_reused_before_they_end
);
/// A buffer dropped while a put into it is still queued on another stream must not be handed
/// to the next allocation before the put is done. Before the fix the drop waited only for the
/// runtime's stream: the 32 slow one-warp puts below kept writing 1.0 into the range after
/// `again` had taken it and received its 7.0 canary.
fn a_buffer_dropped_under_queued_puts_is_not_reused_before_they_end() {
    let nv = runtime(1);
    let n = 64 << 20; // 256 MiB of f32
    let src = nv.alloc::<f32>(n).unwrap();
    src.copy_from_host(&vec![1.0; n]).unwrap();
    let stream = nv.context().new_stream().unwrap();
    let slow = LaunchShape {
        blocks: 1,
        threads: 32,
    };
    let address = {
        let tmp = nv.alloc::<f32>(n).unwrap();
        for _ in 0..32 {
            nv.put_device_with(&tmp, &src, 0, slow, Completion::InKernel, &stream)
                .unwrap();
        }
        tmp.as_device_ptr() as usize
    };
    let again = nv.alloc::<f32>(n).unwrap();
    assert_eq!(
        again.as_device_ptr() as usize,
        address,
        "NVSHMEM gave the new buffer another range: this test shows nothing then"
    );
    again.copy_from_host(&vec![7.0; n]).unwrap();
    stream.synchronize().unwrap();
    let got = again.to_vec().unwrap();
    let overwritten = got.iter().filter(|&&v| v != 7.0).count();
    assert_eq!(
        overwritten, 0,
        "{overwritten} of {n} canary elements were overwritten by puts queued on the dropped buffer"
    );
}

gpu_test!(
    2,
    copy_from_pageable_host_then_put_device_sends_the_new_data
);
/// copy_from_host from pageable memory returns when the data is on the GPU, so a put_device
/// on another stream right after it sends the new data. Before the fix the copy ran on the
/// legacy stream and returned once the data was staged: the put could read the tail of the
/// previous round's values.
fn copy_from_pageable_host_then_put_device_sends_the_new_data() {
    let nv = runtime(2);
    let (me, n_pes) = (nv.my_pe(), nv.n_pes());
    let (next, prev) = ((me + 1) % n_pes, (me + n_pes - 1) % n_pes);
    let n = 96 << 20; // 384 MiB of f32
    let src = nv.alloc_zeroed::<f32>(n).unwrap();
    let dst = nv.alloc_zeroed::<f32>(n).unwrap();
    let stream = nv.context().new_stream().unwrap();
    let value = |pe: i32, round: i32| (round * 10 + pe) as f32;
    for round in 1..=4 {
        // A fresh Vec: pageable memory the driver stages through its own buffers.
        let host = vec![value(me, round); n];
        src.copy_from_host(&host).unwrap();
        nv.put_device(&dst, &src, next, &stream).unwrap();
        nv.quiet_on_stream(&stream);
        stream.synchronize().unwrap();
        nv.barrier_all().unwrap();
        let got = dst.to_vec().unwrap();
        let want = value(prev, round);
        let stale: Vec<usize> = (0..n).filter(|&i| got[i] != want).collect();
        assert!(
            stale.is_empty(),
            "round {round}: {} of {n} elements from PE {prev} are stale (first at {}: {})",
            stale.len(),
            stale[0],
            got[stale[0]]
        );
        nv.barrier_all().unwrap();
    }
}

/// A kernel, as PTX: every thread spins for `ns` nanoseconds (%globaltimer), then p[i] = value
/// for i < n. Queued before a host copy, it shows whether the copy waits for it.
const SPIN_FILL_PTX: &str = r#"
.version 7.0
.target sm_80
.address_size 64

.visible .entry spin_fill_u32(
    .param .u64 p,
    .param .u32 n,
    .param .u32 value,
    .param .u64 ns
)
{
    .reg .pred %p<3>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [p];
    ld.param.u32 %r1, [n];
    ld.param.u32 %r6, [value];
    ld.param.u64 %rd5, [ns];
    mov.u64 %rd6, %globaltimer;
SPIN:
    mov.u64 %rd7, %globaltimer;
    sub.u64 %rd7, %rd7, %rd6;
    setp.lt.u64 %p2, %rd7, %rd5;
    @%p2 bra SPIN;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r6;
DONE:
    ret;
}
"#;

gpu_test!(
    1,
    host_copies_and_zero_come_after_the_runtime_streams_queued_work
);
/// copy_from_host, zero and copy_to_host run in order after the work queued on the runtime's
/// stream and are done when they return. Made deterministic by a kernel that writes 7s only
/// 300 ms after it starts: before the fix the copies ran on the legacy stream, which does not
/// wait for the runtime's non-blocking stream, so the 7s landed after the copy (or zero) and the
/// read-back saw the buffer before the 7s.
fn host_copies_and_zero_come_after_the_runtime_streams_queued_work() {
    let nv = runtime(1);
    let n = 1usize << 16; // one wave of blocks: the whole fill lands after one spin
    let buf = nv.alloc_zeroed::<u32>(n).unwrap();
    let stream = nv.stream().clone();
    let module = nv
        .context()
        .load_module(Ptx::from_src(SPIN_FILL_PTX))
        .unwrap();
    let spin_fill = module.load_function("spin_fill_u32").unwrap();
    let late_sevens = || {
        let (ptr, _sync) = buf.device_ptr(&stream);
        let (len, value, ns) = (n as u32, 7u32, 300_000_000u64);
        let mut launch = stream.launch_builder(&spin_fill);
        launch.arg(&ptr).arg(&len).arg(&value).arg(&ns);
        // SAFETY: the kernel writes n u32 starting at ptr, all inside the buffer.
        unsafe { launch.launch(LaunchConfig::for_num_elems(len)) }.unwrap();
    };
    let expect = |got: Vec<u32>, want: u32, what: &str| {
        let wrong = got.iter().filter(|&&x| x != want).count();
        assert_eq!(
            wrong, 0,
            "{what}: {wrong} of {n} are not {want} (first {})",
            got[0]
        );
    };

    late_sevens();
    buf.copy_from_host(&vec![5u32; n]).unwrap();
    stream.synchronize().unwrap();
    expect(
        buf.to_vec().unwrap(),
        5,
        "copy_from_host ran before the queued kernel",
    );

    late_sevens();
    buf.zero().unwrap();
    stream.synchronize().unwrap();
    expect(
        buf.to_vec().unwrap(),
        0,
        "zero ran before the queued kernel",
    );

    late_sevens();
    expect(
        buf.to_vec().unwrap(),
        7,
        "copy_to_host read before the queued kernel wrote",
    );
}

gpu_test!(2, zero_then_barrier_does_not_wipe_a_later_put);
/// zero() is done when it returns: a barrier after it orders it before a peer's put.
fn zero_then_barrier_does_not_wipe_a_later_put() {
    let nv = runtime(2);
    let me = nv.my_pe();
    let n = 64 << 20; // 512 MiB of u64: the memset takes a while
    let dst = nv.alloc::<u64>(n).unwrap();
    let src = nv.alloc::<u64>(n).unwrap();
    src.copy_from_host(&vec![me as u64 + 1; n]).unwrap();
    dst.copy_from_host(&vec![u64::MAX; n]).unwrap();
    nv.barrier_all().unwrap();
    dst.zero().unwrap();
    nv.barrier_all().unwrap();
    nv.put(&dst, &src, 1 - me).unwrap();
    nv.quiet();
    nv.barrier_all().unwrap();
    let got = dst.to_vec().unwrap();
    let wiped = got.iter().filter(|&&v| v != (1 - me) as u64 + 1).count();
    assert_eq!(wiped, 0, "{wiped} elements of the peer's put are not there");
}

gpu_test!(2, barriers_on_two_streams_take_two_epochs);
/// Two barriers running at once on two streams take two epochs. Before the fix both kernels
/// read the same epoch on PE 0 (both wait for PE 1, which sleeps) and every later barrier
/// there passed a round early: the timed barrier below returned without waiting for PE 1.
fn barriers_on_two_streams_take_two_epochs() {
    let nv = runtime(2);
    let me = nv.my_pe();
    nv.set_timeout(WAIT);
    let stream = nv.context().new_stream().unwrap();
    nv.barrier_all().unwrap();
    if me == 1 {
        std::thread::sleep(Duration::from_millis(300));
    }
    nv.barrier_all_on_stream(&stream).unwrap();
    // On PE 0 this runs while the stream barrier still waits for PE 1.
    nv.barrier_all().unwrap();
    stream.synchronize().unwrap();
    nv.check().unwrap();
    for round in 0..3 {
        if me == 1 {
            std::thread::sleep(Duration::from_millis(500));
        }
        let start = Instant::now();
        nv.barrier_all().unwrap();
        if me == 0 {
            let waited = start.elapsed();
            assert!(
                waited >= Duration::from_millis(400),
                "round {round}: PE 0's barrier passed after {waited:?}, before PE 1 arrived"
            );
        }
    }
    nv.barrier_all().unwrap();
}

gpu_test!(2, an_allocation_one_pe_refuses_is_refused_on_every_pe);
/// An allocation one PE refuses (too little free memory) is refused on every PE, and the PEs
/// stay in step. Before the fix PE 1 refused alone while PE 0 went into nvshmem_malloc and
/// waited there for PE 1 forever.
fn an_allocation_one_pe_refuses_is_refused_on_every_pe() {
    let nv = runtime(2);
    let me = nv.my_pe();
    nv.set_timeout(WAIT);
    let (free, _) = cudarc::driver::result::mem_get_info().unwrap();
    // PE 1 keeps 4 GiB free; PE 0 has tens of GiB.
    let hog = (me == 1).then(|| nv.stream().alloc_zeros::<u8>(free - (4 << 30)).unwrap());
    nv.barrier_all().unwrap();
    let want = 16usize << 30;
    // With both PEs on one GPU, PE 1's hog leaves PE 0 short too: the first refusing PE is named.
    let refusing = if nv.shares_gpus() { 0 } else { 1 };
    match nv.alloc::<u8>(want) {
        Err(Error::AllocRefused { bytes, pe, .. }) => assert_eq!((bytes, pe), (want, refusing)),
        other => panic!("PE {me}: expected AllocRefused by PE 1, got {other:?}"),
    }
    drop(hog);
    let small = nv.alloc_zeroed::<u64>(16).unwrap();
    nv.barrier_all().unwrap();
    assert_eq!(small.to_vec().unwrap(), vec![0; 16]);
}

gpu_test!(2, a_late_pe_times_out_instead_of_freeing_alone);
/// A PE that arrives after its peer gave up on a free times out too instead of entering
/// nvshmem_free alone. Before the fix PE 1 passed the barrier (PE 0's arrival was there) and
/// blocked in nvshmem_free for good.
fn a_late_pe_times_out_instead_of_freeing_alone() {
    let nv = runtime(2);
    let me = nv.my_pe();
    let buf = nv.alloc::<u64>(16).unwrap();
    nv.barrier_all().unwrap();
    nv.set_timeout(Duration::from_millis(300));
    if me == 1 {
        std::thread::sleep(Duration::from_millis(1500));
    }
    let start = Instant::now();
    drop(buf);
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "PE {me}: the free took {:?}",
        start.elapsed()
    );
    assert!(
        nv.peer_failure().is_some(),
        "PE {me}: the free went ahead without its peer"
    );
    // PE 0 stays (and keeps its memory mapped) until PE 1 has timed out too.
    if me == 0 {
        std::thread::sleep(Duration::from_secs(3));
    }
}

gpu_test!(1, init_after_finalize_is_refused);
/// NVSHMEM comes up once per process. Before the fix the second init re-initialised it.
fn init_after_finalize_is_refused() {
    let nv = runtime(1);
    drop(nv);
    match Nvshmem::init() {
        Err(Error::InitAfterFinalize { abandoned: false }) => {}
        other => panic!("expected InitAfterFinalize, got {other:?}"),
    }
}

gpu_test!(
    1,
    another_device_bound_on_the_thread_does_not_misdirect_work
);
/// The runtime binds its context on entry. Before the fix a put_device launched on a stream
/// of GPU 0's context with GPU 1's context current, and failed.
fn another_device_bound_on_the_thread_does_not_misdirect_work() {
    let nv = runtime(1);
    if nv.cuda_info().device_count < 2 {
        skip("another device cannot be bound: one visible GPU (2-GPU machine)");
        return;
    }
    let other = CudaContext::new(((nv.device() + 1) % 2) as usize).unwrap();
    let data: Vec<u32> = (0..4096).collect();
    other.bind_to_thread().unwrap();
    let src = nv.alloc::<u32>(data.len()).unwrap();
    other.bind_to_thread().unwrap();
    src.copy_from_host(&data).unwrap();
    let dst = nv.alloc_zeroed::<u32>(data.len()).unwrap();
    other.bind_to_thread().unwrap();
    nv.put_device(&dst, &src, 0, nv.stream()).unwrap();
    nv.quiet_on_stream(nv.stream());
    other.bind_to_thread().unwrap();
    nv.barrier_all().unwrap();
    other.bind_to_thread().unwrap();
    assert_eq!(dst.to_vec().unwrap(), data);
}

gpu_test!(1, sizes_from_user_input_overflow_into_errors);
/// Sizes from user input are checked: errors, not panics or wrapped sizes. Before the fix
/// at(usize::MAX) panicked (overflow in debug builds) and the overflowing allocation was an
/// AllocFailed.
fn sizes_from_user_input_overflow_into_errors() {
    let nv = runtime(1);
    let buf = nv.alloc::<u64>(4).unwrap();
    assert!(matches!(buf.at(usize::MAX), Err(Error::OutOfBounds { .. })));
    assert!(matches!(
        nv.alloc::<u64>(usize::MAX / 4),
        Err(Error::SizeOverflow { .. })
    ));
    // The refusal happened before any collective call: the runtime is still in step.
    nv.barrier_all().unwrap();
}

gpu_test!(1, a_host_signal_wait_timeout_is_a_peer_failure);
/// A host signal wait that times out counts as a peer failure, like the device waits. Before
/// the fix the runtime went on as if nothing had happened.
fn a_host_signal_wait_timeout_is_a_peer_failure() {
    let nv = runtime(1);
    let sig = nv.alloc_zeroed::<u64>(1).unwrap();
    let waited = nv.signal_wait_until(&sig, Cmp::Ge, 1, Duration::from_millis(50));
    assert!(matches!(waited, Err(Error::Timeout { .. })), "{waited:?}");
    assert!(nv.peer_failure().is_some());
    assert!(matches!(nv.barrier_all(), Err(Error::PeerFailed { .. })));
}
