//! The collective benchmarks' NCCL baseline: a communicator bootstrapped through NVSHMEM, and
//! NCCL's results on symmetric buffers, and on NCCL's own buffers registered as symmetric
//! windows, checked on every PE against the host reference.
//! Run by scripts/gpu_test.sh under `nvsh run -n 2` (tests named pe2_*).

mod common;

use common::{gpu_test, runtime, skip};
use cudarc::nccl::NcclType;
use nvsh::nccl_baseline::{self, NcclBaseline, NcclCall};
use nvshmem::{Nvshmem, ReduceOp, Reducible};

/// Runs NCCL's `op` over PE inputs (pe + 1) * (1 + i % 4) and compares every element of this
/// PE's output with `expected(i)`.
fn check<T: Reducible + NcclType>(
    nv: &Nvshmem,
    nccl: &NcclBaseline<'_>,
    op: ReduceOp,
    convert: impl Fn(f32) -> T,
    expected: impl Fn(usize) -> f32,
) {
    let me = nv.my_pe();
    // Odd length: no size NCCL might special-case.
    let len = (1 << 20) + 3;
    let input = nv.alloc::<T>(len).unwrap();
    let output = nv.alloc::<T>(len).unwrap();
    let host: Vec<T> = (0..len)
        .map(|i| convert(((me + 1) as usize * (1 + i % 4)) as f32))
        .collect();
    input.copy_from_host(&host).unwrap();
    output.zero().unwrap();
    nv.context().synchronize().unwrap();
    nv.barrier_all().unwrap();
    nccl.all_reduce(&input, &output, op).unwrap();
    nccl.stream().synchronize().unwrap();
    let got = output.to_vec().unwrap();
    for (i, g) in got.iter().enumerate() {
        assert_eq!(*g, convert(expected(i)), "PE {me}, {op:?}, element {i}");
    }
    nv.barrier_all().unwrap();
}

/// NCCL over the job's two PEs, or None after a skip line saying why it cannot run here
/// (decided the same way on both PEs, one machine, so both skip or neither does).
fn nccl_or_skip(nv: &Nvshmem) -> Option<NcclBaseline<'_>> {
    if let Err(why) = nccl_baseline::library_status() {
        skip(&format!("NCCL is not loadable here: {why}"));
        return None;
    }
    if nv.shares_gpus() {
        // NCCL refuses two ranks on one GPU (ncclInvalidUsage at ncclCommInitRank).
        skip("NCCL needs one GPU per rank (2-GPU machine)");
        return None;
    }
    Some(NcclBaseline::new(nv, nv.stream()).expect("NCCL communicator"))
}

gpu_test!(2, nccl_allreduce_matches_the_host_reference);
fn nccl_allreduce_matches_the_host_reference() {
    let nv = runtime(2);
    let Some(nccl) = nccl_or_skip(&nv) else {
        return;
    };
    assert_eq!(
        (nccl.rank(), nccl.world_size()),
        (nv.my_pe() as usize, 2),
        "NCCL {}",
        nccl.version_string()
    );
    let m = |i: usize| (1 + i % 4) as f32;
    // 2 PEs: sum = 3m, max = 2m, exact in f32 and bf16.
    check(&nv, &nccl, ReduceOp::Sum, |v| v, |i| 3.0 * m(i));
    check(&nv, &nccl, ReduceOp::Sum, half::bf16::from_f32, |i| {
        3.0 * m(i)
    });
    check(&nv, &nccl, ReduceOp::Max, half::bf16::from_f32, |i| {
        2.0 * m(i)
    });
}

gpu_test!(2, nccl_family_calls_match_the_host_reference);
fn nccl_family_calls_match_the_host_reference() {
    let nv = runtime(2);
    let Some(nccl) = nccl_or_skip(&nv) else {
        return;
    };
    let (me, n) = (nv.my_pe() as usize, 2usize);
    // Odd block: no size NCCL might special-case. Element i of PE p's input: 1000 p + i % 1000
    // (exact in f32; sums of two stay below 2^24).
    let count = 4099;
    let value = |pe: usize, i: usize| (1000 * pe + i % 1000) as f32;
    let input = nv.alloc::<f32>(n * count).unwrap();
    let output = nv.alloc::<f32>(n * count).unwrap();
    let host: Vec<f32> = (0..n * count).map(|i| value(me, i)).collect();
    input.copy_from_host(&host).unwrap();
    let run = |what: &str,
               call: &dyn Fn() -> nvshmem::Result<()>,
               expected: &dyn Fn(usize) -> Option<f32>| {
        output.copy_from_host(&vec![f32::NAN; n * count]).unwrap();
        nv.context().synchronize().unwrap();
        nv.barrier_all().unwrap();
        call().unwrap_or_else(|e| panic!("{what}: {e}"));
        nccl.stream().synchronize().unwrap();
        let got = output.to_vec().unwrap();
        for (i, g) in got.iter().enumerate() {
            if let Some(e) = expected(i) {
                assert_eq!(*g, e, "PE {me}, {what}, element {i}");
            }
        }
        nv.barrier_all().unwrap();
    };
    // Block 0 of each: the count-element buffers of broadcast, allgather's input and so on.
    let (input0, output0) = (input.view(..count).unwrap(), output.view(..count).unwrap());
    run(
        "broadcast from 1",
        &|| nccl.broadcast(input0, output0, 1),
        &|i| (i < count).then(|| value(1, i)),
    );
    run("allgather", &|| nccl.all_gather(input0, &output), &|i| {
        Some(value(i / count, i % count))
    });
    run("alltoall", &|| nccl.all_to_all(&input, &output), &|i| {
        Some(value(i / count, me * count + i % count))
    });
    run(
        "reduce-scatter sum",
        &|| nccl.reduce_scatter(&input, output0, ReduceOp::Sum),
        &|i| (i < count).then(|| (0..n).map(|p| value(p, me * count + i)).sum()),
    );
    run(
        "reduce max to 1",
        &|| nccl.reduce(input0, output0, ReduceOp::Max, 1),
        // Only the root's output is defined.
        &|i| (me == 1 && i < count).then(|| value(1, i)),
    );
}

/// Host values into a device range of NCCL's of their length.
fn upload(buf: nccl_baseline::NcclBuf<'_, f32>, host: &[f32]) {
    assert_eq!(buf.len(), host.len());
    // SAFETY: a device range of exactly host's length.
    unsafe {
        cudarc::driver::result::memcpy_htod_sync(buf.as_device_ptr() as u64, host).unwrap();
    }
}

/// A device range of NCCL's, read back.
fn download(buf: nccl_baseline::NcclBuf<'_, f32>) -> Vec<f32> {
    let mut host = vec![0f32; buf.len()];
    // SAFETY: a device range of exactly host's length; the caller synchronised its writers.
    unsafe {
        cudarc::driver::result::memcpy_dtoh_sync(&mut host, buf.as_device_ptr() as u64).unwrap();
    }
    host
}

gpu_test!(2, nccl_sym_windows_match_the_host_reference);
fn nccl_sym_windows_match_the_host_reference() {
    let nv = runtime(2);
    let Some(nccl) = nccl_or_skip(&nv) else {
        return;
    };
    // Decided from the library, the same on both PEs.
    if let Err(why) = nccl.window_support() {
        skip(&format!("no NCCL windows: {why}"));
        return;
    }
    let (me, n) = (nv.my_pe() as usize, 2usize);
    // Odd block: no size NCCL might special-case; sums of two stay exact in f32.
    let count = (1 << 16) + 3;
    let value = |pe: usize, i: usize| (1000 * pe + i % 1000) as f32;
    let mut input = nccl.mem_alloc::<f32>(&nv, n * count).expect("ncclMemAlloc");
    let mut output = nccl.mem_alloc::<f32>(&nv, n * count).expect("ncclMemAlloc");
    // Collective, in the same order on both PEs; both fail alike where NCCL's symmetric memory
    // is off.
    if let Err(e) = input.register().and_then(|()| output.register()) {
        skip(&format!("NCCL registered no symmetric window: {e}"));
        return;
    }
    let host: Vec<f32> = (0..n * count).map(|i| value(me, i)).collect();
    upload(input.view(0..n * count).unwrap(), &host);
    let run = |what: &str, call: NcclCall, in_len: usize, out_len: usize| {
        let out = output.view(0..out_len).unwrap();
        upload(out, &vec![f32::NAN; out_len]);
        nv.context().synchronize().unwrap();
        nv.barrier_all().unwrap();
        nccl.run(call, input.view(0..in_len).unwrap(), out)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        nccl.stream().synchronize().unwrap();
        let got = download(out);
        nv.barrier_all().unwrap();
        got
    };
    // Sum of f32: NCCL's symmetric allreduce kernels where it has them.
    let got = run(
        "allreduce sum",
        NcclCall::AllReduce(ReduceOp::Sum),
        count,
        count,
    );
    for (i, g) in got.iter().enumerate() {
        assert_eq!(
            *g,
            value(0, i) + value(1, i),
            "PE {me}, allreduce, element {i}"
        );
    }
    let got = run("allgather", NcclCall::AllGather, count, n * count);
    for (i, g) in got.iter().enumerate() {
        assert_eq!(
            *g,
            value(i / count, i % count),
            "PE {me}, allgather, element {i}"
        );
    }
    let got = run(
        "reduce-scatter sum",
        NcclCall::ReduceScatter(ReduceOp::Sum),
        n * count,
        count,
    );
    for (i, g) in got.iter().enumerate() {
        let want: f32 = (0..n).map(|p| value(p, me * count + i)).sum();
        assert_eq!(*g, want, "PE {me}, reduce-scatter, element {i}");
    }
    // A call NCCL has no symmetric kernel for runs its regular one on the window.
    let got = run("alltoall", NcclCall::AllToAll, n * count, n * count);
    for (i, g) in got.iter().enumerate() {
        assert_eq!(
            *g,
            value(i / count, me * count + i % count),
            "PE {me}, alltoall, {i}"
        );
    }
    // The windows go (deregistered collectively, then freed) before the communicator.
    drop((input, output));
    drop(nccl);
    nv.barrier_all().unwrap();
}
