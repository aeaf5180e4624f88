//! Collectives on the caller's own device memory (cudarc `CudaSlice`, `CudaView` /
//! `CudaViewMut`, raw pointers with a length), staged through the workspace's symmetric area:
//! every row of the table that moves data, called through the table (tests/common/table.rs),
//! against the row's CPU reference with the values of tests/common/reference.rs: every element
//! on the receiving PE, outputs poisoned before each call, exact comparison. Counts 1, 7, 1000
//! and 65537 at 1, 2 and 3 PEs, symmetric and own memory mixed in one call, in place, the v
//! forms' uneven parts and the gaps they leave alone, graph capture with fresh data, allreduce's
//! own algorithms and `run_in_place`, and wrong buffers giving typed errors. Grouped send/recv
//! (ring, pairwise, all-to-all and self patterns) the same way, with its reserved staging and
//! the error without it.
//! Run by scripts/gpu_test.sh (tests named peN_* run as N-PE jobs).

mod common;

use common::data::{expect, filled, me_n};
use common::reference::{RefElem, Tag};
use common::table::{data_rows, roots, run_sync, with_type, world, Call, Value, Values, Workspace};
use common::{gpu_test, runtime};
use cudarc::driver::{CudaSlice, DevicePtr, DeviceRepr};
use nvshmem::{
    Allgatherv, Allreduce, AllreduceAlgo, CollectiveRow, Dtype, Error, InBuf, Nvshmem, OutBuf, P2p,
    P2pGroup, Parts, Placement, ReduceOp, ScratchKind, SymmetricBuffer,
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

/// The rows this file runs through the table: every row that moves data but grouped send/recv,
/// whose patterns have tests of their own below (a table call splits only symmetric views and
/// raw pointers into its blocks, not cudarc's buffers).
fn own_rows() -> impl Iterator<Item = &'static CollectiveRow> {
    data_rows().filter(|r| r.placement != Placement::Peers)
}

/// Element types of the rows that move data, and (type, op) of the reductions: every row runs
/// each of its cases on every pair of sides.
const MOVES: [Dtype; 3] = [Dtype::U8, Dtype::U32, Dtype::F32];
const REDUCES: [(Dtype, ReduceOp); 3] = [
    (Dtype::F32, ReduceOp::Sum),
    (Dtype::F32, ReduceOp::Max),
    (Dtype::I64, ReduceOp::Sum),
];
/// The cases of the in-place calls: data movement, and reductions.
const IN_PLACE_MOVES: Dtype = Dtype::U64;
const IN_PLACE_REDUCES: (Dtype, ReduceOp) = (Dtype::F32, ReduceOp::Sum);

/// A row's (type, op) cases: [`REDUCES`] where it reduces, else [`MOVES`] (the op ignored).
fn cases(row: &CollectiveRow) -> Vec<(Dtype, ReduceOp)> {
    if row.reduces {
        REDUCES.to_vec()
    } else {
        MOVES.iter().map(|&d| (d, ReduceOp::Sum)).collect()
    }
}

/// A workspace of each of [`own_rows`] over the world, called through the table, the exchanges
/// with their staging reserved; and allreduce's own, for what only it has (its algorithms,
/// `run_in_place`).
struct All<'nv> {
    rows: Vec<(&'static CollectiveRow, Workspace<'nv>)>,
    ar: Allreduce<'nv>,
}

impl<'nv> All<'nv> {
    fn world(nv: &'nv Nvshmem) -> All<'nv> {
        let mut rows = world(nv, own_rows(), SLOT_BYTES);
        for (row, w) in rows.iter_mut() {
            if row.scratch == ScratchKind::Exchange {
                w.reserve_staging(EXCHANGE_STAGING).unwrap();
                assert_eq!(w.staging_bytes(), EXCHANGE_STAGING, "{}", row.name);
            }
        }
        All {
            rows,
            ar: nv.allreduce_workspace(SLOT_BYTES).unwrap(),
        }
    }
}

/// One call of a row with this member's input on `sides.0` and its output, poisoned, on
/// `sides.1`: every output element checked against the row's reference (the parts an uneven
/// call leaves alone still poisoned).
fn row_case<T: Value>(
    nv: &Nvshmem,
    w: &mut Workspace<'_>,
    call: &Call,
    sides: (Side, Side),
    v: Values,
) {
    let stream = nv.stream().clone();
    let input = Mem::new(nv, sides.0, &call.input::<T>(&v));
    let before: T = v.poison();
    let mut output = Mem::new(nv, sides.1, &vec![before; call.out_len]);
    run_sync(w, call.any(&v, input.input(), output.output()), &stream);
    let what = format!("{} {sides:?}", call.describe::<T>(&v));
    call.check(&what, &v, &output.to_vec(nv), |_| before);
    nv.barrier_all().unwrap();
}

/// A row's call in place on own memory through raw pointers, where it has an in-place form
/// ([`Call::in_place`]): one buffer holding this member's input where the call reads it and
/// poison elsewhere; its output span checked (elements the call leaves hold what they held).
fn in_place_case<T: Value>(nv: &Nvshmem, w: &mut Workspace<'_>, call: &Call, v: Values) {
    let Some((in_off, out_off, len)) = call.in_place() else {
        return;
    };
    let stream = nv.stream().clone();
    let before: Vec<T> = (0..len)
        .map(|j| match j.checked_sub(in_off) {
            Some(i) if i < call.in_len => v.input(call.me, i),
            _ => v.poison(),
        })
        .collect();
    let buf = Mem::new(nv, Side::Raw, &before);
    let Mem::Own(_, _, base) = &buf else {
        unreachable!()
    };
    let at = |off: usize| *base + (off * std::mem::size_of::<T>()) as u64;
    // SAFETY: spans inside the slice `buf` holds, alive until the call is waited for below.
    let (input, output) = unsafe {
        (
            InBuf::from_raw(at(in_off) as *const T, call.in_len),
            OutBuf::from_raw(at(out_off) as *mut T, call.out_len),
        )
    };
    run_sync(w, call.any(&v, input, output), &stream);
    let got = buf.to_vec(nv);
    call.check(
        &format!("{} in place, raw", call.describe::<T>(&v)),
        &v,
        &got[out_off..out_off + call.out_len],
        |i| before[out_off + i],
    );
    nv.barrier_all().unwrap();
}

/// Allreduce's own API on own memory: `run_in_place` on the output's side (f32), and every
/// algorithm through the staging area (bf16).
fn allreduce_own_api(
    nv: &Nvshmem,
    ar: &mut Allreduce<'_>,
    count: usize,
    sides: (Side, Side),
    salt: usize,
) {
    let (me, n) = me_n(nv);
    let stream = nv.stream().clone();
    let op = ReduceOp::Sum;
    let what = format!("allreduce f32 x {count} {sides:?}");
    // In place on the output's side.
    let data: Vec<f32> = (0..count).map(|i| f32::gen(me, i, salt, op)).collect();
    let mut buf = Mem::new(nv, sides.1, &data);
    ar.run_in_place(buf.output(), op, AllreduceAlgo::Auto, &stream)
        .unwrap();
    ar.sync(&stream).unwrap();
    check_reduced(&format!("{what}, in place"), &buf.to_vec(nv), |i| {
        reduced::<f32>(n, i, salt, op)
    });
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

/// Every row of [`own_rows`] with own memory on every pair of sides at every count (each of its
/// cases, every root), in place on raw pointers, and the v forms in uneven parts with gaps on
/// each own kind of memory; allreduce's own API on every pair of sides.
fn every_collective_on_own_memory(nv: &Nvshmem) {
    let (me, n) = me_n(nv);
    let mut all = All::world(nv);
    for (k, &count) in COUNTS.iter().enumerate() {
        for (p, &sides) in PAIRS.iter().enumerate() {
            let salt = (k * PAIRS.len() + p) * 100;
            for (r, (row, w)) in all.rows.iter_mut().enumerate() {
                for (c, (dtype, op)) in cases(row).into_iter().enumerate() {
                    for root in roots(row, n) {
                        let call = Call::blocks(row, me, n, count, root);
                        let v = Values::of(row, n, salt + r * 10 + c + root, op);
                        with_type!(dtype, T => row_case::<T>(nv, w, &call, sides, v));
                    }
                }
            }
            allreduce_own_api(nv, &mut all.ar, count, sides, k * 10 + p);
        }
        for (r, (row, w)) in all.rows.iter_mut().enumerate() {
            let (dtype, op) = if row.reduces {
                IN_PLACE_REDUCES
            } else {
                (IN_PLACE_MOVES, ReduceOp::Sum)
            };
            for root in roots(row, n) {
                let call = Call::blocks(row, me, n, count, root);
                let v = Values::of(row, n, 5 + r * 10 + root, op);
                with_type!(dtype, T => in_place_case::<T>(nv, w, &call, v));
            }
        }
        for side in [Side::Slice, Side::View, Side::Raw] {
            for (row, w) in all.rows.iter_mut() {
                if row.placement != Placement::Parts {
                    continue;
                }
                for (c, (dtype, op)) in cases(row).into_iter().enumerate() {
                    let call = Call::uneven(row, me, n, count);
                    let v = Values::of(row, n, count % 7 + c, op);
                    with_type!(dtype, T => row_case::<T>(nv, w, &call, (side, side), v));
                }
            }
        }
    }
    // The rows of equal sizes grew their areas at their calls; the exchanges' stayed what they
    // reserved (their calls never grow it).
    for (row, w) in &all.rows {
        let bytes = w.staging_bytes();
        if row.scratch == ScratchKind::Exchange {
            assert_eq!(bytes, EXCHANGE_STAGING, "{}", row.name);
        } else {
            assert!(bytes > 0, "{}: nothing staged", row.name);
        }
    }
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
/// Every row of [`own_rows`] on own memory (a slice without cudarc's event tracking as the
/// input, the outputs on slices, views and raw pointers in turn) captured once after their
/// staging was reserved, replayed with fresh inputs into poisoned outputs.
fn replays_of_a_captured_graph_on_own_memory_see_fresh_data() {
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    let nv = runtime(2);
    let (me, n) = me_n(&nv);
    let stream = nv.stream().clone();
    // SAFETY: every slice below is used on the runtime's stream only.
    unsafe { nv.context().disable_event_tracking() };
    let count = 100_003;
    let mut all = All::world(&nv);
    // The exchanges reserved theirs; the others reserve what their calls need (a capture
    // cannot grow the area).
    let need = 3 * n * count * 4;
    for (row, w) in all.rows.iter_mut() {
        if row.scratch != ScratchKind::Exchange {
            w.reserve_staging(need).unwrap();
        }
    }
    let root = n - 1;
    let calls: Vec<Call> = all
        .rows
        .iter()
        .map(|(row, _)| Call::blocks(row, me, n, count, root))
        .collect();
    let zeros = vec![0f32; n * count];
    let mut input = Mem::new(&nv, Side::Slice, &zeros);
    let own_kinds = [Side::Raw, Side::View, Side::Slice];
    let mut outs: Vec<Mem<'_, f32>> = calls
        .iter()
        .enumerate()
        .map(|(k, c)| Mem::new(&nv, own_kinds[k % 3], &zeros[..c.out_len]))
        .collect();
    let v = Values::gen(n, 0, ReduceOp::Sum);
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .unwrap();
    {
        let Mem::Own(in_slice, ..) = &input else {
            unreachable!()
        };
        for (((_, w), call), out) in all.rows.iter_mut().zip(&calls).zip(&mut outs) {
            // The whole slice where the row reads n blocks, a view of its first elements
            // otherwise.
            let any = if call.in_len == in_slice.len() {
                call.any(&v, input.input(), out.output())
            } else {
                call.any(&v, in_slice.slice(..call.in_len), out.output())
            };
            w.run_any(any, &stream).unwrap();
        }
    }
    let graph = stream
        .end_capture(CUgraphInstantiate_flags(0))
        .unwrap()
        .expect("a graph was captured");

    for it in 0..10usize {
        let v = Values::gen(n, it, ReduceOp::Sum);
        let data: Vec<f32> = (0..n * count).map(|i| v.input(me, i)).collect();
        // Fresh data into the same memory: the graph holds its address.
        input.write(&nv, &data);
        let poison: f32 = v.poison();
        for out in &mut outs {
            out.write(&nv, &vec![poison; out.len()]);
        }
        graph.launch().unwrap();
        stream.synchronize().unwrap();
        for (_, w) in &all.rows {
            w.check().unwrap();
        }
        for (call, out) in calls.iter().zip(&outs) {
            let what = format!("replay {it}, {}", call.describe::<f32>(&v));
            call.check(&what, &v, &out.to_vec(&nv), |_| poison);
        }
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
