//! Collectives on the caller's own device memory (cudarc `CudaSlice`, `CudaView` /
//! `CudaViewMut`, raw pointers with a length), staged through the workspace's symmetric area,
//! against the CPU reference (tests/common/reference.rs): every element on the receiving PE,
//! outputs poisoned before each call, exact comparison. Counts 1, 7, 1000 and 65537 at 1, 2 and
//! 3 PEs, symmetric and own memory mixed in one call, in place, the parts an allgatherv leaves
//! alone, graph capture with fresh data, and wrong buffers giving typed errors. Grouped
//! send/recv (ring, pairwise, all-to-all and self patterns) the same way, with its reserved
//! staging and the error without it.
//! Run by scripts/gpu_test.sh (tests named peN_* run as N-PE jobs).

mod common;

use common::data::{expect, filled, laid_out, me_n, part_of};
use common::reference::{RefElem, Tag};
use common::{gpu_test, runtime};
use cudarc::driver::{CudaSlice, DevicePtr, DeviceRepr};
use nvshmem::{
    Allgather, Allgatherv, Allreduce, AllreduceAlgo, Alltoall, Alltoallv, Broadcast, Error, InBuf,
    Nvshmem, OutBuf, P2p, P2pGroup, Parts, Reduce, ReduceOp, ReduceScatter, SymmetricBuffer,
};

const COUNTS: [usize; 4] = [1, 7, 1000, 65537];
/// Small slots, so that the reductions of 65537 elements run in segments.
const SLOT_BYTES: usize = 64 << 10;
/// What the exchanges reserve (their sizes differ between members, so calls cannot grow it).
const EXCHANGE_STAGING: usize = 8 << 20;
/// What grouped send/recv reserves (only the PEs with transfers take part in a call, so calls
/// cannot grow it); the largest call below (all-to-all on 3 PEs: 6 buffers of 65537 f32, each
/// rounded up to 256 bytes) needs about 1.6 MB.
const GROUP_STAGING: usize = 8 << 20;
/// Sides the buffers of a grouped call take in turn (from a rotation), so that calls mix
/// symmetric buffers with own memory of every kind.
const SIDES: [Side; 4] = [Side::Sym, Side::Slice, Side::View, Side::Raw];

/// How a test passes one buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    /// A symmetric buffer (no staging).
    Sym,
    /// `&CudaSlice` / `&mut CudaSlice`.
    Slice,
    /// `CudaView` / `CudaViewMut`.
    View,
    /// A raw device pointer with a length.
    Raw,
}

/// (input, output) sides every collective runs with: each own kind on both sides, and own
/// memory beside a symmetric buffer both ways round.
const PAIRS: [(Side, Side); 5] = [
    (Side::Slice, Side::Slice),
    (Side::View, Side::View),
    (Side::Raw, Side::Raw),
    (Side::Sym, Side::Raw),
    (Side::Slice, Side::Sym),
];

/// Test memory of one side: a symmetric buffer, or a cudarc slice with its device address.
enum Mem<'nv, T: Tag + DeviceRepr> {
    Sym(SymmetricBuffer<'nv, T>),
    Own(CudaSlice<T>, Side, u64),
}

impl<'nv, T: Tag + DeviceRepr> Mem<'nv, T> {
    /// `data` on `side` (symmetric allocation is collective: every PE the same sides and
    /// lengths).
    fn new(nv: &'nv Nvshmem, side: Side, data: &[T]) -> Mem<'nv, T> {
        if side == Side::Sym {
            return Mem::Sym(filled(nv, data.len(), |i| data[i]));
        }
        let stream = nv.stream();
        let s = stream.clone_htod(data).unwrap();
        let addr = s.device_ptr(stream).0;
        stream.synchronize().unwrap();
        Mem::Own(s, side, addr)
    }

    fn len(&self) -> usize {
        match self {
            Mem::Sym(b) => b.len(),
            Mem::Own(s, ..) => s.len(),
        }
    }

    fn input(&self) -> InBuf<'_, T> {
        match self {
            Mem::Sym(b) => b.into(),
            Mem::Own(s, Side::Slice, _) => s.into(),
            Mem::Own(s, Side::View, _) => s.slice(..).into(),
            // SAFETY: the slice's own memory, which it holds while the borrow lasts.
            Mem::Own(s, _, p) => unsafe { InBuf::from_raw(*p as *const T, s.len()) },
        }
    }

    fn output(&mut self) -> OutBuf<'_, T> {
        match self {
            Mem::Sym(b) => (&*b).into(),
            Mem::Own(s, Side::Slice, _) => s.into(),
            Mem::Own(s, Side::View, _) => s.slice_mut(..).into(),
            // SAFETY: as in `input`.
            Mem::Own(s, _, p) => unsafe { OutBuf::from_raw(*p as *mut T, s.len()) },
        }
    }

    /// Writes `data` over it; returns when it is there (the address stays the same).
    fn write(&mut self, nv: &Nvshmem, data: &[T]) {
        match self {
            Mem::Sym(b) => b.copy_from_host(data).unwrap(),
            Mem::Own(s, ..) => {
                nv.stream().memcpy_htod(data, s).unwrap();
                nv.stream().synchronize().unwrap();
            }
        }
    }

    /// The contents, after the work queued on the runtime's stream.
    fn to_vec(&self, nv: &Nvshmem) -> Vec<T> {
        match self {
            Mem::Sym(b) => b.to_vec().unwrap(),
            Mem::Own(s, ..) => nv.stream().clone_dtoh(s).unwrap(),
        }
    }
}

fn reduced<T: RefElem>(n: usize, i: usize, salt: usize, op: ReduceOp) -> T {
    let vals: Vec<T> = (0..n).map(|p| T::gen(p, i, salt, op)).collect();
    T::reduce(&vals, op)
}

fn check_reduced<T: RefElem>(what: &str, got: &[T], want: impl Fn(usize) -> T) {
    for (i, g) in got.iter().enumerate() {
        let w = want(i);
        assert!(T::same(*g, w), "{what}: element {i} is {g:?}, want {w:?}");
    }
}

/// One workspace of each collective over the world; the exchanges with their staging reserved.
struct All<'nv> {
    ar: Allreduce<'nv>,
    bc: Broadcast<'nv>,
    r: Reduce<'nv>,
    ag: Allgather<'nv>,
    a2a: Alltoall<'nv>,
    rs: ReduceScatter<'nv>,
    agv: Allgatherv<'nv>,
    a2av: Alltoallv<'nv>,
}

impl<'nv> All<'nv> {
    fn world(nv: &'nv Nvshmem) -> All<'nv> {
        let mut all = All {
            ar: nv.allreduce_workspace(SLOT_BYTES).unwrap(),
            bc: Broadcast::world(nv).unwrap(),
            r: Reduce::world(nv, SLOT_BYTES).unwrap(),
            ag: Allgather::world(nv).unwrap(),
            a2a: Alltoall::world(nv).unwrap(),
            rs: ReduceScatter::world(nv, SLOT_BYTES).unwrap(),
            agv: Allgatherv::world(nv).unwrap(),
            a2av: Alltoallv::world(nv).unwrap(),
        };
        all.agv.reserve_staging(EXCHANGE_STAGING).unwrap();
        all.a2av.reserve_staging(EXCHANGE_STAGING).unwrap();
        assert_eq!(all.agv.staging_bytes(), EXCHANGE_STAGING);
        all
    }
}

fn allreduce(nv: &Nvshmem, ar: &mut Allreduce<'_>, count: usize, sides: (Side, Side), salt: usize) {
    let (me, n) = me_n(nv);
    let stream = nv.stream().clone();
    let op = ReduceOp::Sum;
    let data: Vec<f32> = (0..count).map(|i| f32::gen(me, i, salt, op)).collect();
    let input = Mem::new(nv, sides.0, &data);
    let mut output = Mem::new(nv, sides.1, &vec![<f32 as RefElem>::poison(); count]);
    ar.run(
        input.input(),
        output.output(),
        op,
        AllreduceAlgo::Auto,
        &stream,
    )
    .unwrap();
    ar.sync(&stream).unwrap();
    let what = format!("allreduce f32 x {count} {sides:?}");
    let want = |i| reduced::<f32>(n, i, salt, op);
    check_reduced(&what, &output.to_vec(nv), want);
    // In place on the output's side.
    let mut buf = Mem::new(nv, sides.1, &data);
    ar.run_in_place(buf.output(), op, AllreduceAlgo::Auto, &stream)
        .unwrap();
    ar.sync(&stream).unwrap();
    check_reduced(&format!("{what}, in place"), &buf.to_vec(nv), want);
    // Every algorithm through the staging area, bf16.
    for algo in AllreduceAlgo::ALL {
        let data: Vec<half::bf16> = (0..count)
            .map(|i| half::bf16::gen(me, i, salt + 1, op))
            .collect();
        let input = Mem::new(nv, sides.0, &data);
        let mut output = Mem::new(nv, sides.1, &vec![<half::bf16 as RefElem>::poison(); count]);
        ar.run(input.input(), output.output(), op, algo, &stream)
            .unwrap();
        ar.sync(&stream).unwrap();
        check_reduced(
            &format!("{what} bf16 by {algo:?}"),
            &output.to_vec(nv),
            |i| reduced::<half::bf16>(n, i, salt + 1, op),
        );
    }
    nv.barrier_all().unwrap();
}

fn broadcast_and_reduce(nv: &Nvshmem, all: &mut All<'_>, count: usize, sides: (Side, Side)) {
    let (me, n) = me_n(nv);
    let stream = nv.stream().clone();
    for root in 0..n {
        let salt = root + 3;
        let data: Vec<u32> = (0..count).map(|i| u32::tag(me, i, salt)).collect();
        let input = Mem::new(nv, sides.0, &data);
        let mut output = Mem::new(nv, sides.1, &vec![<u32 as Tag>::poison(); count]);
        all.bc
            .run(input.input(), output.output(), root as i32, &stream)
            .unwrap();
        all.bc.sync(&stream).unwrap();
        let what = format!("broadcast u32 x {count} from {root} {sides:?}");
        expect(&what, &output.to_vec(nv), |i| u32::tag(root, i, salt));

        let op = ReduceOp::Max;
        let data: Vec<f32> = (0..count).map(|i| f32::gen(me, i, salt, op)).collect();
        let input = Mem::new(nv, sides.0, &data);
        let mut output = Mem::new(nv, sides.1, &vec![<f32 as RefElem>::poison(); count]);
        all.r
            .run(input.input(), output.output(), op, root as i32, &stream)
            .unwrap();
        all.r.sync(&stream).unwrap();
        let got = output.to_vec(nv);
        let what = format!("reduce f32 max x {count} to {root} {sides:?}");
        if me == root {
            check_reduced(&what, &got, |i| reduced::<f32>(n, i, salt, op));
        } else {
            // Only the root's output is written: a staged one is not copied back elsewhere.
            assert!(
                got.iter().all(|g| f32::is_poison(*g)),
                "{what}: a non-root output was written"
            );
        }
        nv.barrier_all().unwrap();
    }
}

fn gather_family(nv: &Nvshmem, all: &mut All<'_>, count: usize, sides: (Side, Side)) {
    let (me, n) = me_n(nv);
    let stream = nv.stream().clone();
    let salt = count % 13;
    // Allgather.
    let data: Vec<u8> = (0..count).map(|i| u8::tag(me, i, salt)).collect();
    let input = Mem::new(nv, sides.0, &data);
    let mut output = Mem::new(nv, sides.1, &vec![<u8 as Tag>::poison(); n * count]);
    all.ag.run(input.input(), output.output(), &stream).unwrap();
    all.ag.sync(&stream).unwrap();
    let what = format!("allgather u8 x {count} {sides:?}");
    expect(&what, &output.to_vec(nv), |i| {
        u8::tag(i / count, i % count, salt)
    });
    // Alltoall: element j of block r of PE p's input is tag(p, r * count + j).
    let data: Vec<f32> = (0..n * count).map(|i| f32::tag(me, i, salt)).collect();
    let input = Mem::new(nv, sides.0, &data);
    let mut output = Mem::new(nv, sides.1, &vec![<f32 as Tag>::poison(); n * count]);
    all.a2a
        .run(input.input(), output.output(), &stream)
        .unwrap();
    all.a2a.sync(&stream).unwrap();
    expect(
        &format!("alltoall f32 x {count} {sides:?}"),
        &output.to_vec(nv),
        |i| f32::tag(i / count, me * count + i % count, salt),
    );
    // Reduce-scatter.
    let op = ReduceOp::Sum;
    let data: Vec<i64> = (0..n * count).map(|i| i64::gen(me, i, salt, op)).collect();
    let input = Mem::new(nv, sides.0, &data);
    let mut output = Mem::new(nv, sides.1, &vec![<i64 as RefElem>::poison(); count]);
    all.rs
        .run(input.input(), output.output(), op, &stream)
        .unwrap();
    all.rs.sync(&stream).unwrap();
    check_reduced(
        &format!("reduce-scatter i64 sum x {count} {sides:?}"),
        &output.to_vec(nv),
        |j| reduced::<i64>(n, me * count + j, salt, op),
    );
    nv.barrier_all().unwrap();
}

/// Allgather in place on own memory: the input is this PE's block of the output, both raw.
fn allgather_in_place(nv: &Nvshmem, ag: &mut Allgather<'_>, count: usize) {
    let (me, n) = me_n(nv);
    let stream = nv.stream().clone();
    let salt = 5;
    let data: Vec<u64> = (0..n * count)
        .map(|i| {
            if i / count == me {
                u64::tag(me, i % count, salt)
            } else {
                <u64 as Tag>::poison()
            }
        })
        .collect();
    let buf = Mem::new(nv, Side::Raw, &data);
    let Mem::Own(_, _, base) = &buf else {
        unreachable!()
    };
    let own = *base + (me * count * 8) as u64;
    // SAFETY: spans inside the slice `buf` holds, alive until the sync below.
    let (input, output) = unsafe {
        (
            InBuf::from_raw(own as *const u64, count),
            OutBuf::from_raw(*base as *mut u64, n * count),
        )
    };
    ag.run(input, output, &stream).unwrap();
    ag.sync(&stream).unwrap();
    expect(
        &format!("allgather u64 x {count} in place, raw"),
        &buf.to_vec(nv),
        |i| u64::tag(i / count, i % count, salt),
    );
    nv.barrier_all().unwrap();
}

/// Allgatherv and alltoallv on own memory of `side` (both buffers), parts with poisoned gaps
/// that must stay poisoned.
fn exchanges(nv: &Nvshmem, all: &mut All<'_>, m: usize, side: Side) {
    let (me, n) = me_n(nv);
    let stream = nv.stream().clone();
    let salt = m % 7;
    // Allgatherv: member r's part holds m + r % 3 elements.
    let counts: Vec<usize> = (0..n).map(|r| m + r % 3).collect();
    let (displs, out_len) = laid_out(&counts, 1);
    let data: Vec<f32> = (0..counts[me]).map(|k| f32::tag(me, k, salt)).collect();
    let input = Mem::new(nv, side, &data);
    let mut output = Mem::new(nv, side, &vec![<f32 as Tag>::poison(); out_len]);
    let parts = Parts {
        counts: &counts,
        displs: &displs,
    };
    all.agv
        .run(input.input(), output.output(), parts, &stream)
        .unwrap();
    all.agv.sync(&stream).unwrap();
    expect(
        &format!("allgatherv f32 m {m} {side:?}"),
        &output.to_vec(nv),
        |i| match part_of(i, &counts, &displs) {
            Some((r, k)) => f32::tag(r, k, salt),
            None => <f32 as Tag>::poison(),
        },
    );
    // Alltoallv: s sends r m + (3s + r) % 4 elements; receive parts with gaps of 2.
    let pair = |s: usize, r: usize| m + (3 * s + r) % 4;
    let send: Vec<usize> = (0..n).map(|r| pair(me, r)).collect();
    let recv: Vec<usize> = (0..n).map(|s| pair(s, me)).collect();
    let (send_displs, in_len) = laid_out(&send, 0);
    let (recv_displs, out_len) = laid_out(&recv, 2);
    let data: Vec<u32> = (0..in_len)
        .map(|i| match part_of(i, &send, &send_displs) {
            Some((r, k)) => u32::tag(me, k * 8 + r, salt),
            None => <u32 as Tag>::poison(),
        })
        .collect();
    let input = Mem::new(nv, side, &data);
    let mut output = Mem::new(nv, side, &vec![<u32 as Tag>::poison(); out_len]);
    let send_parts = Parts {
        counts: &send,
        displs: &send_displs,
    };
    let recv_parts = Parts {
        counts: &recv,
        displs: &recv_displs,
    };
    all.a2av
        .run(
            input.input(),
            send_parts,
            output.output(),
            recv_parts,
            &stream,
        )
        .unwrap();
    all.a2av.sync(&stream).unwrap();
    expect(
        &format!("alltoallv u32 m {m} {side:?}"),
        &output.to_vec(nv),
        |i| match part_of(i, &recv, &recv_displs) {
            Some((s, k)) => u32::tag(s, k * 8 + me, salt),
            None => <u32 as Tag>::poison(),
        },
    );
    nv.barrier_all().unwrap();
}

/// Every collective with own memory on every pair of sides at every count.
fn every_collective_on_own_memory(nv: &Nvshmem) {
    let mut all = All::world(nv);
    for (k, &count) in COUNTS.iter().enumerate() {
        for (p, &sides) in PAIRS.iter().enumerate() {
            allreduce(nv, &mut all.ar, count, sides, k * 10 + p);
            broadcast_and_reduce(nv, &mut all, count, sides);
            gather_family(nv, &mut all, count, sides);
        }
        allgather_in_place(nv, &mut all.ag, count);
        for side in [Side::Slice, Side::View, Side::Raw] {
            exchanges(nv, &mut all, count, side);
        }
    }
    // The equal-size collectives grew their areas at their calls.
    assert!(all.ar.staging_bytes() > 0 && all.a2a.staging_bytes() > 0);
}

gpu_test!(1, own_memory_on_one_pe);
fn own_memory_on_one_pe() {
    every_collective_on_own_memory(&runtime(1));
}

gpu_test!(2, own_memory_on_two_pes);
fn own_memory_on_two_pes() {
    every_collective_on_own_memory(&runtime(2));
}

gpu_test!(3, own_memory_on_three_pes);
fn own_memory_on_three_pes() {
    every_collective_on_own_memory(&runtime(3));
}

gpu_test!(2, replays_of_a_captured_graph_on_own_memory_see_fresh_data);
/// Allreduce, broadcast, allgather, reduce-scatter and alltoallv on own memory (slices without
/// cudarc's event tracking, and raw pointers) captured once after their staging was reserved,
/// replayed with fresh inputs into poisoned outputs.
fn replays_of_a_captured_graph_on_own_memory_see_fresh_data() {
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    let nv = runtime(2);
    let (me, n) = me_n(&nv);
    let stream = nv.stream().clone();
    // SAFETY: every slice below is used on the runtime's stream only.
    unsafe { nv.context().disable_event_tracking() };
    let count = 100_003;
    let mut all = All::world(&nv);
    let need = 3 * n * count * 4;
    all.ar.reserve_staging(need).unwrap();
    all.bc.reserve_staging(need).unwrap();
    all.ag.reserve_staging(need).unwrap();
    all.rs.reserve_staging(need).unwrap();
    let zeros = vec![0f32; n * count];
    let input = Mem::new(&nv, Side::Slice, &zeros);
    let mut out_ar = Mem::new(&nv, Side::Raw, &zeros[..count]);
    let mut out_bc = Mem::new(&nv, Side::View, &zeros[..count]);
    let mut out_ag = Mem::new(&nv, Side::Slice, &zeros);
    let mut out_rs = Mem::new(&nv, Side::Raw, &zeros[..count]);
    let mut out_v = Mem::new(&nv, Side::Raw, &zeros);
    let Mem::Own(in_slice, ..) = &input else {
        unreachable!()
    };
    let own = in_slice.slice(..count);
    let counts = vec![count; n];
    let displs: Vec<usize> = (0..n).map(|r| r * count).collect();
    let parts = Parts {
        counts: &counts,
        displs: &displs,
    };
    let root = n - 1;
    let op = ReduceOp::Sum;
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .unwrap();
    all.ar
        .run(&own, out_ar.output(), op, AllreduceAlgo::Auto, &stream)
        .unwrap();
    all.bc
        .run(&own, out_bc.output(), root as i32, &stream)
        .unwrap();
    all.ag.run(&own, out_ag.output(), &stream).unwrap();
    all.rs
        .run(input.input(), out_rs.output(), op, &stream)
        .unwrap();
    all.a2av
        .run(input.input(), parts, out_v.output(), parts, &stream)
        .unwrap();
    let graph = stream
        .end_capture(CUgraphInstantiate_flags(0))
        .unwrap()
        .expect("a graph was captured");

    let mut input = input;
    let poison = vec![f32::NAN; n * count];
    for it in 0..10usize {
        let gen = |p: usize, i: usize| f32::gen(p, i, it, op);
        let data: Vec<f32> = (0..n * count).map(|i| gen(me, i)).collect();
        // Fresh data into the same memory: the graph holds its address.
        input.write(&nv, &data);
        for out in [&mut out_ar, &mut out_bc, &mut out_rs] {
            out.write(&nv, &poison[..count]);
        }
        out_ag.write(&nv, &poison);
        out_v.write(&nv, &poison);
        graph.launch().unwrap();
        stream.synchronize().unwrap();
        for c in [
            all.ar.check(),
            all.bc.check(),
            all.ag.check(),
            all.rs.check(),
            all.a2av.check(),
        ] {
            c.unwrap();
        }
        let sum = |i: usize| (0..n).map(|p| gen(p, i)).sum::<f32>();
        let what = |c: &str| format!("replay {it}, {c}");
        check_reduced(&what("allreduce"), &out_ar.to_vec(&nv), sum);
        expect(&what("broadcast"), &out_bc.to_vec(&nv), |i| gen(root, i));
        expect(&what("allgather"), &out_ag.to_vec(&nv), |i| {
            gen(i / count, i % count)
        });
        check_reduced(&what("reduce-scatter"), &out_rs.to_vec(&nv), |i| {
            sum(me * count + i)
        });
        expect(&what("alltoallv"), &out_v.to_vec(&nv), |i| {
            gen(i / count, me * count + i % count)
        });
        // Every PE checked this replay before anyone overwrites its input for the next.
        nv.barrier_all().unwrap();
    }
}

gpu_test!(2, staging_does_not_grow_under_capture);
/// A first call with own memory under graph capture cannot allocate its staging area: a typed
/// error, nothing captured that breaks the stream; the same call outside capture then works.
fn staging_does_not_grow_under_capture() {
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    let nv = runtime(2);
    let (me, n) = me_n(&nv);
    let stream = nv.stream().clone();
    // SAFETY: the slices below are used on the runtime's stream only.
    unsafe { nv.context().disable_event_tracking() };
    let mut ar = nv.allreduce_workspace(SLOT_BYTES).unwrap();
    let count = 1000;
    let op = ReduceOp::Sum;
    let data: Vec<f32> = (0..count).map(|i| f32::gen(me, i, 1, op)).collect();
    let input = Mem::new(&nv, Side::Slice, &data);
    let mut output = Mem::new(&nv, Side::Slice, &vec![f32::NAN; count]);
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .unwrap();
    let err = ar
        .run(
            input.input(),
            output.output(),
            op,
            AllreduceAlgo::Auto,
            &stream,
        )
        .unwrap_err();
    let _ = stream.end_capture(CUgraphInstantiate_flags(0));
    match &err {
        Error::StagingDuringCapture { needs, has: 0, .. } => assert!(*needs >= 2 * count * 4),
        e => panic!("want StagingDuringCapture, got {e:?}"),
    }
    assert!(err.to_string().contains("reserve_staging"), "{err}");
    ar.run(
        input.input(),
        output.output(),
        op,
        AllreduceAlgo::Auto,
        &stream,
    )
    .unwrap();
    ar.sync(&stream).unwrap();
    check_reduced("after the refused capture", &output.to_vec(&nv), |i| {
        reduced::<f32>(n, i, 1, op)
    });
}

gpu_test!(2, wrong_own_buffers_give_typed_errors);
/// Lengths that differ, host memory, a span past its allocation, overlapping spans and an
/// exchange without reserved staging: typed errors in the caller's terms, on every PE alike
/// (nothing is launched or allocated), and the workspaces work afterwards.
fn wrong_own_buffers_give_typed_errors() {
    let nv = runtime(2);
    let (me, n) = me_n(&nv);
    let stream = nv.stream().clone();
    let mut ar = nv.allreduce_workspace(SLOT_BYTES).unwrap();
    let mut agv = Allgatherv::world(&nv).unwrap();
    let op = ReduceOp::Sum;
    let auto = AllreduceAlgo::Auto;
    let a = Mem::new(&nv, Side::Slice, &vec![1f32; 1000]);
    let mut b = Mem::new(&nv, Side::Slice, &vec![0f32; 999]);
    match ar.run(a.input(), b.output(), op, auto, &stream) {
        Err(Error::LengthMismatch {
            dest: 999,
            src: 1000,
            ..
        }) => {}
        r => panic!("lengths: {r:?}"),
    }
    // Host memory passed as a device pointer.
    let host = vec![0f32; 1000];
    let mut out = Mem::new(&nv, Side::Raw, &vec![0f32; 1000]);
    // SAFETY: refused before anything reads it.
    let input = unsafe { InBuf::from_raw(host.as_ptr(), host.len()) };
    match ar.run(input, out.output(), op, auto, &stream) {
        Err(e @ Error::NotDeviceMemory { which: "input", .. }) => {
            assert!(e.to_string().contains("not device memory"), "{e}")
        }
        r => panic!("host memory: {r:?}"),
    }
    // A span longer than its allocation.
    let Mem::Own(_, _, base) = &a else {
        unreachable!()
    };
    // SAFETY: refused before anything reads it.
    let past = unsafe { InBuf::from_raw(*base as *const f32, 1 << 30) };
    match ar.run(past, out.output(), op, auto, &stream) {
        Err(Error::NotDeviceMemory { detail, .. }) => {
            assert!(detail.contains("last element"), "{detail}")
        }
        r => panic!("past the allocation: {r:?}"),
    }
    // Input and output overlapping without being the same span.
    let Mem::Own(_, _, p) = &out else {
        unreachable!()
    };
    // SAFETY: refused before anything touches them.
    let (i, o) = unsafe {
        (
            InBuf::from_raw(*p as *const f32, 600),
            OutBuf::from_raw((*p as *mut f32).wrapping_add(300), 600),
        )
    };
    match ar.run(i, o, op, auto, &stream) {
        Err(Error::Overlap { .. }) => {}
        r => panic!("overlap: {r:?}"),
    }
    // An exchange whose staging was not reserved.
    let counts = vec![10usize; n];
    let displs: Vec<usize> = (0..n).map(|r| r * 10).collect();
    let src = Mem::new(&nv, Side::View, &[me as u32; 10]);
    let mut dst = Mem::new(&nv, Side::View, &vec![0u32; 10 * n]);
    let parts = Parts {
        counts: &counts,
        displs: &displs,
    };
    match agv.run(src.input(), dst.output(), parts, &stream) {
        Err(e @ Error::StagingTooSmall { has: 0, .. }) => {
            assert!(e.to_string().contains("reserve_staging"), "{e}")
        }
        r => panic!("unreserved exchange: {r:?}"),
    }
    // Both still work.
    agv.reserve_staging(1 << 20).unwrap();
    agv.run(src.input(), dst.output(), parts, &stream).unwrap();
    agv.sync(&stream).unwrap();
    expect("allgatherv after the errors", &dst.to_vec(&nv), |i| {
        (i / 10) as u32
    });
    let mut b = Mem::new(&nv, Side::Slice, &vec![0f32; 1000]);
    ar.run(a.input(), b.output(), op, auto, &stream).unwrap();
    ar.sync(&stream).unwrap();
    expect("allreduce after the errors", &b.to_vec(&nv), |_| n as f32);
    assert_eq!(a.len(), 1000);
}

/// One transfer of this PE in a grouped call: to or from `peer`, the `nth` with that peer and
/// direction (matched in order with the peer's).
#[derive(Clone, Copy, Debug)]
struct Slot {
    send: bool,
    peer: usize,
    nth: usize,
}

/// This PE's transfers in `pattern`, in list order. Every PE has the same directions and nths
/// in the same places, so buffers allocated per place (symmetric ones collectively) have the
/// same lengths everywhere.
fn group_pattern(pattern: &str, me: usize, n: usize) -> Vec<Slot> {
    let slot = |send, peer, nth| Slot { send, peer, nth };
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    match pattern {
        // Two each way, receives and sends interleaved.
        "ring" => vec![
            slot(false, prev, 0),
            slot(true, next, 0),
            slot(true, next, 1),
            slot(false, prev, 1),
        ],
        // Pairs (0, 1), (2, 3), ...; a PE without a partner sends to itself.
        "pairwise" => {
            let partner = if me ^ 1 < n { me ^ 1 } else { me };
            vec![slot(true, partner, 0), slot(false, partner, 0)]
        }
        "all-to-all" => (0..n)
            .flat_map(|r| [slot(true, r, 0), slot(false, r, 0)])
            .collect(),
        "self" => vec![slot(false, me, 0), slot(true, me, 0)],
        other => panic!("no pattern {other}"),
    }
}

/// One grouped call of `pattern`: transfer nth to or from a peer holds `m + nth` elements of T,
/// each buffer on side `SIDES[(place + rot) % 4]`; receives start poisoned and are checked on
/// the receiver element by element, sends are checked unchanged.
fn group_call<T: Tag + DeviceRepr>(
    nv: &Nvshmem,
    g: &mut P2pGroup<'_>,
    pattern: &str,
    m: usize,
    rot: usize,
    salt: usize,
) {
    let (me, n) = me_n(nv);
    let stream = nv.stream().clone();
    let slots = group_pattern(pattern, me, n);
    // The data of the nth transfer to PE `to`, as its sender tags it.
    let mix = |to: usize, nth: usize| salt * 64 + to * 8 + nth;
    let mut bufs: Vec<Mem<'_, T>> = slots
        .iter()
        .enumerate()
        .map(|(j, s)| {
            let len = m + s.nth;
            let data: Vec<T> = if s.send {
                (0..len)
                    .map(|i| T::tag(me, i, mix(s.peer, s.nth)))
                    .collect()
            } else {
                vec![T::poison(); len]
            };
            Mem::new(nv, SIDES[(j + rot) % SIDES.len()], &data)
        })
        .collect();
    let what = format!("{pattern} {} x {m}, sides from {rot}", T::NAME);
    {
        let ops: Vec<P2p<'_>> = bufs
            .iter_mut()
            .zip(&slots)
            .map(|(b, s)| match s.send {
                true => P2p::send(Mem::input(b), s.peer as i32),
                false => P2p::recv(b.output(), s.peer as i32),
            })
            .collect();
        g.run(&ops, &stream).unwrap();
        g.sync(&stream).unwrap();
    }
    for (b, s) in bufs.iter().zip(&slots) {
        let got = b.to_vec(nv);
        if s.send {
            let want = |i| T::tag(me, i, mix(s.peer, s.nth));
            expect(&format!("{what}: send {} to {}", s.nth, s.peer), &got, want);
        } else {
            let want = |i| T::tag(s.peer, i, mix(me, s.nth));
            expect(
                &format!("{what}: receive {} from {}", s.nth, s.peer),
                &got,
                want,
            );
        }
    }
    nv.barrier_all().unwrap();
}

/// Every pattern at every count, f32 on every rotation of the sides and u8 (odd byte counts:
/// the staged buffers after them start aligned) on one.
fn grouped_send_recv_on_own_memory(nv: &Nvshmem) {
    let mut g = P2pGroup::world(nv).unwrap();
    g.reserve_staging(GROUP_STAGING).unwrap();
    for (k, &m) in COUNTS.iter().enumerate() {
        for pattern in ["ring", "pairwise", "all-to-all", "self"] {
            for rot in 0..SIDES.len() {
                group_call::<f32>(nv, &mut g, pattern, m, rot, k);
            }
            group_call::<u8>(nv, &mut g, pattern, m, 1, k + COUNTS.len());
        }
    }
    // Calls never grow the area.
    assert_eq!(g.staging_bytes(), GROUP_STAGING);
}

gpu_test!(2, grouped_send_recv_on_own_memory_on_two_pes);
fn grouped_send_recv_on_own_memory_on_two_pes() {
    grouped_send_recv_on_own_memory(&runtime(2));
}

gpu_test!(3, grouped_send_recv_on_own_memory_on_three_pes);
fn grouped_send_recv_on_own_memory_on_three_pes() {
    grouped_send_recv_on_own_memory(&runtime(3));
}

gpu_test!(2, replays_of_a_captured_group_on_own_memory_see_fresh_data);
/// A grouped call (two sends to the peer, one own and one symmetric, and an own self-send, with
/// their receives: own raw, symmetric, own slice) captured once with its staging reserved,
/// replayed 10 times with fresh sends into poisoned receives.
fn replays_of_a_captured_group_on_own_memory_see_fresh_data() {
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    let nv = runtime(2);
    let (me, n) = me_n(&nv);
    let stream = nv.stream().clone();
    // SAFETY: every slice below is used on the runtime's stream only.
    unsafe { nv.context().disable_event_tracking() };
    let mut g = P2pGroup::world(&nv).unwrap();
    g.reserve_staging(GROUP_STAGING).unwrap();
    let count = 100_003;
    let peer = (me + 1) % n;
    // Transfer j goes to to[j] from send buffer j into the peer's receive buffer 3 + j.
    let to = [peer, peer, me];
    let sides = [
        Side::Slice,
        Side::Sym,
        Side::View,
        Side::Raw,
        Side::Sym,
        Side::Slice,
    ];
    let zeros = vec![0f32; count];
    let mut bufs: Vec<Mem<'_, f32>> = sides.iter().map(|&s| Mem::new(&nv, s, &zeros)).collect();
    let graph = {
        let (sends, recvs) = bufs.split_at_mut(3);
        let ops: Vec<P2p<'_>> = sends
            .iter()
            .zip(to)
            .map(|(b, r)| P2p::send(b.input(), r as i32))
            .chain(
                recvs
                    .iter_mut()
                    .zip(to)
                    .map(|(b, r)| P2p::recv(b.output(), r as i32)),
            )
            .collect();
        stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .unwrap();
        g.run(&ops, &stream).unwrap();
        stream
            .end_capture(CUgraphInstantiate_flags(0))
            .unwrap()
            .expect("a graph was captured")
    };
    let poison = vec![<f32 as Tag>::poison(); count];
    for it in 0..10usize {
        let tag = |pe: usize, i: usize, j: usize| f32::tag(pe, i, it * 16 + j);
        // Fresh data into the same memory: the graph holds its addresses.
        for (j, b) in bufs[..3].iter_mut().enumerate() {
            b.write(&nv, &(0..count).map(|i| tag(me, i, j)).collect::<Vec<_>>());
        }
        for b in &mut bufs[3..] {
            b.write(&nv, &poison);
        }
        graph.launch().unwrap();
        stream.synchronize().unwrap();
        g.check().unwrap();
        for (j, b) in bufs[3..].iter().enumerate() {
            let from = to[j];
            let what = format!("replay {it}, receive {j} from {from}");
            expect(&what, &b.to_vec(&nv), |i| tag(from, i, j));
        }
        // Every PE checked this replay before anyone overwrites its buffers for the next.
        nv.barrier_all().unwrap();
    }
    assert_eq!(g.staging_bytes(), GROUP_STAGING);
}

gpu_test!(2, grouped_own_memory_without_staging_gives_a_typed_error);
/// Own memory in a grouped call with no staging reserved, or too little: StagingTooSmall on
/// the calling PE naming the bytes, before anything is enqueued or allocated, outside graph
/// capture and under it, with a peer that makes no call too; symmetric calls work meanwhile
/// (zero-copy: still no area), overlapping own receives are refused on the caller's
/// addresses, host memory is refused, and after a reservation the same call works.
fn grouped_own_memory_without_staging_gives_a_typed_error() {
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    let nv = runtime(2);
    let (me, n) = me_n(&nv);
    let stream = nv.stream().clone();
    // SAFETY: the slices below are used on the runtime's stream only.
    unsafe { nv.context().disable_event_tracking() };
    let mut g = P2pGroup::world(&nv).unwrap();
    let count = 1000;
    let peer = (me + 1) % n;
    let sent = |pe: usize, i: usize| u32::tag(pe, i, 9);
    let send = Mem::new(
        &nv,
        Side::Slice,
        &(0..count).map(|i| sent(me, i)).collect::<Vec<_>>(),
    );
    let mut recv = Mem::new(&nv, Side::Raw, &vec![<u32 as Tag>::poison(); count]);
    // The send rounded up to 256 bytes, then the receive.
    let needs = (count * 4).next_multiple_of(256) + count * 4;
    let refused = |r: nvshmem::Result<()>, want_has: usize| {
        let e = r.expect_err("want StagingTooSmall");
        let &Error::StagingTooSmall {
            needs: got, has, ..
        } = &e
        else {
            panic!("want StagingTooSmall, got {e:?}")
        };
        assert_eq!((got, has), (needs, want_has), "{e}");
        let text = e.to_string();
        assert!(
            text.contains("grouped send/recv")
                && text.contains(&format!("reserve_staging({needs})")),
            "{text}"
        );
    };
    let p = peer as i32;
    refused(
        g.run(
            &[P2p::send(send.input(), p), P2p::recv(recv.output(), p)],
            &stream,
        ),
        0,
    );
    // Only PE 0 calls (a self-send); PE 1 makes no call and waits for nothing.
    if me == 0 {
        refused(
            g.run(
                &[P2p::recv(recv.output(), 0), P2p::send(send.input(), 0)],
                &stream,
            ),
            0,
        );
    }
    nv.barrier_all().unwrap();
    // Under capture: refused the same way, nothing captured.
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .unwrap();
    let r = g.run(
        &[P2p::send(send.input(), p), P2p::recv(recv.output(), p)],
        &stream,
    );
    let _ = stream.end_capture(CUgraphInstantiate_flags(0));
    refused(r, 0);
    g.check().unwrap();
    // Symmetric buffers need no area.
    let sym_send = filled(&nv, count, |i| sent(me, i) + 1);
    let sym_recv = filled(&nv, count, |_| <u32 as Tag>::poison());
    g.run(&[P2p::send(&sym_send, p), P2p::recv(&sym_recv, p)], &stream)
        .unwrap();
    g.sync(&stream).unwrap();
    expect("symmetric group", &sym_recv.to_vec().unwrap(), |i| {
        sent(peer, i) + 1
    });
    assert_eq!(g.staging_bytes(), 0, "a symmetric call staged");
    // Host memory as a send: refused before anything else.
    let host = vec![0u32; count];
    // SAFETY: refused before anything reads it.
    let bad = unsafe { InBuf::from_raw(host.as_ptr(), count) };
    match g.run(&[P2p::send(bad, p)], &stream) {
        Err(Error::NotDeviceMemory { which: "input", .. }) => {}
        r => panic!("host memory: {r:?}"),
    }
    // Too little reserved.
    g.reserve_staging(4096).unwrap();
    refused(
        g.run(
            &[P2p::send(send.input(), p), P2p::recv(recv.output(), p)],
            &stream,
        ),
        4096,
    );
    g.reserve_staging(needs).unwrap();
    // Own receives that overlap: refused on the caller's addresses (their staged copies
    // would lie apart).
    let Mem::Own(_, _, base) = &recv else {
        unreachable!()
    };
    let base = *base as *mut u32;
    // SAFETY: refused before anything touches them.
    let (r0, r1) = unsafe {
        (
            OutBuf::from_raw(base, 600),
            OutBuf::from_raw(base.wrapping_add(300), 600),
        )
    };
    match g.run(&[P2p::recv(r0, p), P2p::recv(r1, p)], &stream) {
        Err(Error::CollectiveShape { detail, .. }) => {
            assert!(detail.contains("overlaps"), "{detail}")
        }
        r => panic!("overlapping receives: {r:?}"),
    }
    // The refused calls left the workspace whole: the same call works now.
    g.run(
        &[P2p::send(send.input(), p), P2p::recv(recv.output(), p)],
        &stream,
    )
    .unwrap();
    g.sync(&stream).unwrap();
    expect("after the refusals", &recv.to_vec(&nv), |i| sent(peer, i));
    nv.barrier_all().unwrap();
}
