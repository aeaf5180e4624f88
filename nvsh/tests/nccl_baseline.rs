//! The collective benchmarks' NCCL baseline: a communicator bootstrapped through NVSHMEM, and
//! NCCL's results on symmetric buffers checked on every PE against the host reference.
//! Run by scripts/gpu_test.sh under `nvsh run -n 2` (tests named pe2_*).

mod common;

use common::{gpu_test, runtime, skip};
use cudarc::nccl::NcclType;
use nvsh::nccl_baseline::{self, NcclBaseline};
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

gpu_test!(2, nccl_allreduce_matches_the_host_reference);
fn nccl_allreduce_matches_the_host_reference() {
    // Decided the same way on both PEs (one machine), so both skip or neither does.
    if let Err(why) = nccl_baseline::library_status() {
        skip(&format!("NCCL is not loadable here: {why}"));
        return;
    }
    let nv = runtime(2);
    if nv.shares_gpus() {
        // NCCL refuses two ranks on one GPU (ncclInvalidUsage at ncclCommInitRank).
        skip("NCCL needs one GPU per rank (2-GPU machine)");
        return;
    }
    let nccl = NcclBaseline::new(&nv, nv.stream()).expect("NCCL communicator");
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
    if let Err(why) = nccl_baseline::library_status() {
        skip(&format!("NCCL is not loadable here: {why}"));
        return;
    }
    let nv = runtime(2);
    if nv.shares_gpus() {
        skip("NCCL needs one GPU per rank (2-GPU machine)");
        return;
    }
    let nccl = NcclBaseline::new(&nv, nv.stream()).expect("NCCL communicator");
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
