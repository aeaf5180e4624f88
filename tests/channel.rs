//! Pipeline channels between PEs, checked message by message against values computed on the
//! CPU. Run by scripts/gpu_test.sh: tests named pe2_* under `nvsh run -n 2`, pe1_* alone.
//!
//! Messages are queued back to back with no host synchronisation in between (as a pipeline
//! would), into and out of distinct places of one large buffer per side, and compared once at
//! the end: a message that lands in the wrong slot, arrives out of order, is overwritten by a
//! fast sender or is not copied at all shows up as wrong values at its offset.

mod common;

use common::{gpu_test, runtime};
use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits};
use half::bf16;
use nvshmem::{Channel, Element, Error, Nvshmem};
use nvshmem::{FailureKind, WaitOp};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Lengths cycled through by the message tests: 1, odd counts, non-multiples of 16 bytes, and a
/// few that take several blocks.
const LENGTHS: [usize; 12] = [1, 3, 5, 8, 17, 255, 1000, 4099, 1, 64, 333, 70_001];

/// An element type with exact test values.
trait TestElem: Element + DeviceRepr + ValidAsZeroBits {
    /// Element `j` of message `msg`, distinct between neighbouring messages and elements.
    fn gen(msg: usize, j: usize) -> Self;
    /// A value no message contains (what the receiver's buffer holds before).
    fn poison() -> Self;
}

impl TestElem for f32 {
    fn gen(msg: usize, j: usize) -> Self {
        // Exact in f32: below 2^24.
        ((msg % 1000) * 10_000 + j % 10_000) as f32
    }
    fn poison() -> Self {
        -1.0
    }
}

impl TestElem for bf16 {
    fn gen(msg: usize, j: usize) -> Self {
        // Integers -128..128 are exact in bf16.
        bf16::from_f32(((msg * 7 + j * 3) % 256) as f32 - 128.0)
    }
    fn poison() -> Self {
        bf16::from_f32(1000.0)
    }
}

impl TestElem for i32 {
    fn gen(msg: usize, j: usize) -> Self {
        (msg * 1_000_003 + j) as i32
    }
    fn poison() -> Self {
        -1
    }
}

/// The messages one side of a test exchanges: lengths and offsets in one flat buffer.
struct Plan {
    lens: Vec<usize>,
    offsets: Vec<usize>,
    total: usize,
}

impl Plan {
    fn new(count: usize, lens: &[usize]) -> Plan {
        let lens: Vec<usize> = (0..count).map(|i| lens[i % lens.len()]).collect();
        let mut offsets = Vec::with_capacity(count);
        let mut total = 0;
        for len in &lens {
            offsets.push(total);
            total += len;
        }
        Plan {
            lens,
            offsets,
            total,
        }
    }

    fn max_len(&self) -> usize {
        self.lens.iter().copied().max().unwrap_or(1)
    }

    fn range(&self, i: usize) -> std::ops::Range<usize> {
        self.offsets[i]..self.offsets[i] + self.lens[i]
    }

    /// Every message's values, back to back (offsets are not aligned: views start anywhere).
    fn expected<T: TestElem>(&self) -> Vec<T> {
        let mut v = Vec::with_capacity(self.total);
        for (i, len) in self.lens.iter().enumerate() {
            v.extend((0..*len).map(|j| T::gen(i, j)));
        }
        v
    }

    /// Compares what arrived with what was sent, naming the first wrong message.
    fn check<T: TestElem>(&self, what: &str, got: &[T]) {
        let want = self.expected::<T>();
        assert_eq!(got.len(), want.len());
        for i in 0..self.lens.len() {
            let r = self.range(i);
            if got[r.clone()] != want[r.clone()] {
                let j = (0..self.lens[i])
                    .find(|&j| got[r.start + j] != want[r.start + j])
                    .unwrap_or(0);
                panic!(
                    "{what} ({}): message {i} of {} elements is wrong at element {j}: got {:?}, \
                     want {:?}",
                    T::NAME,
                    self.lens[i],
                    got[r.start + j],
                    want[r.start + j]
                );
            }
        }
    }
}

fn upload<T: TestElem>(stream: &Arc<CudaStream>, values: &[T]) -> CudaSlice<T> {
    stream.clone_htod(values).expect("copy to the device")
}

fn poisoned<T: TestElem>(stream: &Arc<CudaStream>, n: usize) -> CudaSlice<T> {
    upload(stream, &vec![T::poison(); n])
}

/// PE 0 sends `count` messages to PE 1, which receives them; PE 1 checks every one.
fn one_way<T: TestElem>(nv: &Nvshmem, count: usize, slots: usize, direct: bool) {
    let me = nv.my_pe();
    let stream = nv.stream().clone();
    let plan = Plan::new(count, &LENGTHS);
    let mut ch = Channel::<T>::new(nv, slots, plan.max_len()).unwrap();
    ch.set_direct_stores(direct);
    if me == 0 {
        let src = upload(&stream, &plan.expected::<T>());
        for i in 0..count {
            let view = src.slice(plan.range(i));
            ch.send(1, &view, plan.lens[i], &stream).unwrap();
        }
        ch.sync(&stream).unwrap();
    } else {
        let mut dst = poisoned::<T>(&stream, plan.total);
        for i in 0..count {
            let mut view = dst.slice_mut(plan.range(i));
            ch.recv_into(0, &mut view, plan.lens[i], &stream).unwrap();
        }
        ch.sync(&stream).unwrap();
        let got = stream.clone_dtoh(&dst).unwrap();
        plan.check(&format!("one way, direct {direct}"), &got);
    }
    nv.barrier_all().unwrap();
}

gpu_test!(2, a_thousand_messages_arrive_in_order_with_their_values);
fn a_thousand_messages_arrive_in_order_with_their_values() {
    let nv = runtime(2);
    one_way::<f32>(&nv, 1000, 3, true);
    one_way::<bf16>(&nv, 1000, 3, true);
    one_way::<i32>(&nv, 100, 1, true);
}

gpu_test!(2, the_nvshmem_put_path_used_across_nodes_delivers_the_same);
fn the_nvshmem_put_path_used_across_nodes_delivers_the_same() {
    let nv = runtime(2);
    one_way::<f32>(&nv, 1000, 3, false);
    one_way::<bf16>(&nv, 1000, 2, false);
}

gpu_test!(2, messages_between_two_pretend_nodes_arrive_in_order);
/// 2 PEs as 2 pretend nodes of 1 (NVSH_PRETEND_NODE_SIZE, docs/nodes.md): no direct stores
/// between them even where asked for, and the channel's staging slots of a job over several
/// nodes carry the caller's own (non-symmetric) memory.
fn messages_between_two_pretend_nodes_arrive_in_order() {
    let Some(nv) = common::pretend_runtime(2, 1) else {
        return;
    };
    one_way::<f32>(&nv, 1000, 3, true);
    one_way::<bf16>(&nv, 1000, 2, true);
    one_way::<i32>(&nv, 100, 1, false);
}

gpu_test!(2, forward_and_backward_channels_at_once_like_a_pipeline);
fn forward_and_backward_channels_at_once_like_a_pipeline() {
    // PE 0 sends activations on one stream and receives gradients on another; PE 1 receives
    // each activation and sends it back as the gradient. Half the gradients are received in
    // place (recv + copy + release), half with recv_into.
    let nv = runtime(2);
    let me = nv.my_pe();
    let count = 600;
    let plan = Plan::new(count, &[1, 17, 4099, 256, 3, 70_001]);
    let fwd = Channel::<f32>::new(&nv, 2, plan.max_len()).unwrap();
    let bwd = Channel::<f32>::new(&nv, 2, plan.max_len()).unwrap();
    let stream = nv.stream().clone();
    if me == 0 {
        let back_stream = nv.context().new_stream().unwrap();
        let src = upload(&stream, &plan.expected::<f32>());
        let mut grads = poisoned::<f32>(&back_stream, plan.total);
        for i in 0..count {
            fwd.send(1, &src.slice(plan.range(i)), plan.lens[i], &stream)
                .unwrap();
            let mut out = grads.slice_mut(plan.range(i));
            if i % 2 == 0 {
                bwd.recv_into(1, &mut out, plan.lens[i], &back_stream)
                    .unwrap();
            } else {
                let msg = bwd.recv(1, &back_stream).unwrap();
                assert_eq!(msg.seq(), i as u64);
                if i % 50 == 1 {
                    assert_eq!(msg.len().unwrap(), plan.lens[i], "message {i}");
                }
                let slot = msg.view().unwrap();
                let body = slot.view(0..plan.lens[i]).unwrap();
                back_stream.memcpy_dtod(&body, &mut out).unwrap();
                bwd.release(msg, &back_stream).unwrap();
            }
        }
        fwd.sync(&stream).unwrap();
        bwd.sync(&back_stream).unwrap();
        let got = back_stream.clone_dtoh(&grads).unwrap();
        plan.check("gradients back on PE 0", &got);
    } else {
        let mut tmp = stream.alloc_zeros::<f32>(plan.max_len()).unwrap();
        let mut seen = poisoned::<f32>(&stream, plan.total);
        for i in 0..count {
            let len = plan.lens[i];
            let mut head = tmp.slice_mut(0..len);
            fwd.recv_into(0, &mut head, len, &stream).unwrap();
            stream
                .memcpy_dtod(&tmp.slice(0..len), &mut seen.slice_mut(plan.range(i)))
                .unwrap();
            // The next receive into `tmp` is queued after this send has read it.
            bwd.send(0, &tmp.slice(0..len), len, &stream).unwrap();
        }
        fwd.sync(&stream).unwrap();
        bwd.sync(&stream).unwrap();
        let got = stream.clone_dtoh(&seen).unwrap();
        plan.check("activations on PE 1", &got);
    }
    nv.barrier_all().unwrap();
}

gpu_test!(
    2,
    a_slow_receiver_holds_back_a_fast_sender_without_losing_data
);
fn a_slow_receiver_holds_back_a_fast_sender_without_losing_data() {
    // Two slots, 200 messages queued at once by the sender while the receiver has not started:
    // the sender's host must not block, and its GPU must wait for the slots (credits) instead of
    // overwriting messages the receiver has not read yet.
    let nv = runtime(2);
    let me = nv.my_pe();
    let count = 200;
    let plan = Plan::new(count, &[1000, 999, 4096, 7]);
    let ch = Channel::<f32>::new(&nv, 2, plan.max_len()).unwrap();
    let stream = nv.stream().clone();
    let src = upload(&stream, &plan.expected::<f32>());
    let mut dst = poisoned::<f32>(&stream, plan.total);
    stream.synchronize().unwrap();
    nv.barrier_all().unwrap();
    let receiver_starts = Duration::from_millis(1500);
    if me == 0 {
        let t = Instant::now();
        for i in 0..count {
            ch.send(1, &src.slice(plan.range(i)), plan.lens[i], &stream)
                .unwrap();
        }
        let enqueue = t.elapsed();
        assert!(
            enqueue < Duration::from_millis(1000),
            "queueing {count} sends took {enqueue:?}: send must not wait on the host"
        );
        ch.sync(&stream).unwrap();
        assert!(
            t.elapsed() >= Duration::from_millis(1000),
            "all sends completed before the receiver started: no back-pressure"
        );
    } else {
        std::thread::sleep(receiver_starts);
        for i in 0..count {
            let mut view = dst.slice_mut(plan.range(i));
            ch.recv_into(0, &mut view, plan.lens[i], &stream).unwrap();
            if i % 20 == 19 {
                // A slow consumer now and then, too.
                stream.synchronize().unwrap();
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        ch.sync(&stream).unwrap();
        let got = stream.clone_dtoh(&dst).unwrap();
        plan.check("slow receiver", &got);
    }
    nv.barrier_all().unwrap();
}

gpu_test!(2, three_channels_used_interleaved);
fn three_channels_used_interleaved() {
    // a: f32 0 -> 1 (2 slots), b: bf16 1 -> 0 (3 slots), c: i32 0 -> 1 (1 slot).
    let nv = runtime(2);
    let me = nv.my_pe();
    let stream = nv.stream().clone();
    let schedule: Vec<usize> = (0..500).map(|i| [0, 1, 2, 0, 2][i % 5]).collect();
    let count = |c: usize| schedule.iter().filter(|&&x| x == c).count();
    let plans = [
        Plan::new(count(0), &[1, 100, 4099, 33]),
        Plan::new(count(1), &[7, 2048, 1]),
        Plan::new(count(2), &[5, 1, 999]),
    ];
    let a = Channel::<f32>::new(&nv, 2, plans[0].max_len()).unwrap();
    let b = Channel::<bf16>::new(&nv, 3, plans[1].max_len()).unwrap();
    let c = Channel::<i32>::new(&nv, 1, plans[2].max_len()).unwrap();
    let a_src = upload(&stream, &plans[0].expected::<f32>());
    let b_src = upload(&stream, &plans[1].expected::<bf16>());
    let c_src = upload(&stream, &plans[2].expected::<i32>());
    let mut a_dst = poisoned::<f32>(&stream, plans[0].total);
    let mut b_dst = poisoned::<bf16>(&stream, plans[1].total);
    let mut c_dst = poisoned::<i32>(&stream, plans[2].total);
    let mut next = [0usize; 3];
    for &which in &schedule {
        let i = next[which];
        next[which] += 1;
        let (plan, len) = (&plans[which], plans[which].lens[i]);
        match (which, me) {
            (0, 0) => a.send(1, &a_src.slice(plan.range(i)), len, &stream),
            (0, _) => a.recv_into(0, &mut a_dst.slice_mut(plan.range(i)), len, &stream),
            (1, 1) => b.send(0, &b_src.slice(plan.range(i)), len, &stream),
            (1, _) => b.recv_into(1, &mut b_dst.slice_mut(plan.range(i)), len, &stream),
            (_, 0) => c.send(1, &c_src.slice(plan.range(i)), len, &stream),
            (_, _) => c.recv_into(0, &mut c_dst.slice_mut(plan.range(i)), len, &stream),
        }
        .unwrap();
    }
    stream.synchronize().unwrap();
    a.check().unwrap();
    b.check().unwrap();
    c.check().unwrap();
    if me == 0 {
        plans[1].check("channel b", &stream.clone_dtoh(&b_dst).unwrap());
    } else {
        plans[0].check("channel a", &stream.clone_dtoh(&a_dst).unwrap());
        plans[2].check("channel c", &stream.clone_dtoh(&c_dst).unwrap());
    }
    nv.barrier_all().unwrap();
}

/// Polls `check()` (no stream synchronisation) until it reports an error, at most `limit`.
fn first_error<T: Element>(ch: &Channel<'_, T>, limit: Duration) -> Error {
    let t = Instant::now();
    loop {
        if let Err(e) = ch.check() {
            return e;
        }
        assert!(
            t.elapsed() < limit,
            "no error recorded after {limit:?}: a device wait did not honour its deadline"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

gpu_test!(2, waits_that_never_end_are_timeouts_naming_the_peer);
fn waits_that_never_end_are_timeouts_naming_the_peer() {
    // PE 1 waits for a message PE 0 never sends; PE 0 sends more messages than there are slots
    // on a channel PE 1 never reads. Both must fail within their deadlines, naming the peer.
    let nv = runtime(2);
    let me = nv.my_pe();
    let stream = nv.stream().clone();
    let timeout = Duration::from_millis(300);
    let mut silent = Channel::<f32>::new(&nv, 2, 16).unwrap();
    let mut unread = Channel::<f32>::new(&nv, 2, 16).unwrap();
    silent.set_timeout(timeout);
    unread.set_timeout(timeout);
    let mut buf = poisoned::<f32>(&stream, 16);
    stream.synchronize().unwrap();
    nv.barrier_all().unwrap();
    let t = Instant::now();
    let (ch, peer, op) = if me == 1 {
        silent.recv_into(0, &mut buf, 16, &stream).unwrap();
        (&silent, 0, WaitOp::ChannelRecvInto)
    } else {
        for _ in 0..3 {
            unread.send(1, &buf, 16, &stream).unwrap();
        }
        (&unread, 1, WaitOp::ChannelSend)
    };
    let err = first_error(ch, timeout + Duration::from_secs(5));
    let elapsed = t.elapsed();
    assert!(
        elapsed >= timeout,
        "failed after {elapsed:?}, before its deadline"
    );
    match &err {
        // The device's clock starts a hair after the deadline is set: allow 1 ms of rounding.
        Error::Timeout { waited_ms, .. } => assert!(*waited_ms + 1 >= 300, "{err}"),
        e => panic!("expected a timeout, got {e:?}"),
    }
    assert!(err.to_string().contains(&format!("PE {peer}")), "{err}");
    let f = ch.failure().unwrap();
    assert_eq!(
        (f.kind, f.op, f.peer),
        (FailureKind::Timeout, op, peer),
        "{f:?}"
    );
    if me == 1 {
        assert_eq!((f.seq, f.index, f.want, f.seen), (0, 0, 64, 0), "{f:?}");
    } else {
        // The third send waits for slot 0's first credit.
        assert_eq!((f.seq, f.index, f.want, f.seen), (2, 0, 64, 0), "{f:?}");
    }
    // The stream went on (the kernel exited), and sync reports the same error.
    assert!(matches!(ch.sync(&stream), Err(Error::Timeout { .. })));
    // A broken channel gives up at once instead of waiting out another timeout.
    let t = Instant::now();
    if me == 1 {
        silent.recv_into(0, &mut buf, 16, &stream).unwrap();
        assert!(silent.sync(&stream).is_err());
    } else {
        unread.send(1, &buf, 16, &stream).unwrap();
        assert!(unread.sync(&stream).is_err());
    }
    assert!(t.elapsed() < timeout, "{:?}", t.elapsed());
    if me == 1 {
        assert_eq!(stream.clone_dtoh(&buf).unwrap(), vec![-1.0; 16]);
    }
    // A timeout counts the peers as failed: collective calls are refused from now on (they
    // would wait for a PE that may be dead), with the first timeout as the cause; the process
    // then ends without NVSHMEM's finalize, which would wait the same way.
    match nv.barrier_all() {
        Err(Error::PeerFailed { what, cause }) => {
            assert_eq!(what, "barrier_all");
            assert!(cause.contains(&format!("PE {peer}")), "{cause}");
        }
        r => panic!("expected PeerFailed, got {r:?}"),
    }
    assert!(nv.peer_failure().is_some());
}

gpu_test!(2, a_length_mismatch_is_a_typed_error_and_copies_nothing);
fn a_length_mismatch_is_a_typed_error_and_copies_nothing() {
    let nv = runtime(2);
    let me = nv.my_pe();
    let stream = nv.stream().clone();
    let ch = Channel::<f32>::new(&nv, 2, 64).unwrap();
    if me == 0 {
        let src = upload(
            &stream,
            &(0..10).map(|j| f32::gen(0, j)).collect::<Vec<_>>(),
        );
        ch.send(1, &src, 10, &stream).unwrap();
        // The receiver drops the message but still frees the slot: the sender is fine.
        ch.sync(&stream).unwrap();
    } else {
        let mut dst = poisoned::<f32>(&stream, 11);
        ch.recv_into(0, &mut dst, 11, &stream).unwrap();
        let err = ch.sync(&stream).unwrap_err();
        assert!(
            matches!(
                err,
                Error::MessageLength {
                    pe: 1,
                    peer: 0,
                    seq: 0,
                    sent: 10,
                    expected: 11
                }
            ),
            "{err:?}"
        );
        assert_eq!(stream.clone_dtoh(&dst).unwrap(), vec![-1.0; 11]);
        assert_eq!(ch.failure().unwrap().kind, FailureKind::LengthMismatch);
    }
    nv.barrier_all().unwrap();
}

gpu_test!(2, receiving_from_a_second_peer_is_refused);
fn receiving_from_a_second_peer_is_refused() {
    let nv = runtime(2);
    let me = nv.my_pe();
    let stream = nv.stream().clone();
    let ch = Channel::<i32>::new(&nv, 2, 8).unwrap();
    let mut buf = poisoned::<i32>(&stream, 8);
    if me == 1 {
        let src = upload(&stream, &(0..8).map(|j| i32::gen(0, j)).collect::<Vec<_>>());
        ch.send(0, &src, 8, &stream).unwrap();
        ch.sync(&stream).unwrap();
    } else {
        ch.recv_into(1, &mut buf, 8, &stream).unwrap();
        let err = ch.recv_into(0, &mut buf, 8, &stream).unwrap_err();
        assert!(
            matches!(&err, Error::Channel { what, .. } if what.contains("from PE 1")),
            "{err:?}"
        );
        ch.sync(&stream).unwrap();
        let want: Vec<i32> = (0..8).map(|j| i32::gen(0, j)).collect();
        assert_eq!(stream.clone_dtoh(&buf).unwrap(), want);
    }
    nv.barrier_all().unwrap();
}

gpu_test!(
    1,
    bad_arguments_are_typed_errors_and_leave_the_channel_usable
);
fn bad_arguments_are_typed_errors_and_leave_the_channel_usable() {
    let nv = runtime(1);
    let stream = nv.stream().clone();
    assert!(matches!(
        Channel::<f32>::new(&nv, 0, 10),
        Err(Error::Channel { .. })
    ));
    assert!(matches!(
        Channel::<f32>::new(&nv, 2, 0),
        Err(Error::Channel { .. })
    ));
    // Channels start with the runtime's timeout (NVSH_TIMEOUT_MS, read and checked at init).
    let default = nv.timeout();
    nv.set_timeout(Duration::from_millis(2500));
    let ch = Channel::<f32>::new(&nv, 2, 10).unwrap();
    nv.set_timeout(default);
    assert_eq!(ch.timeout(), Duration::from_millis(2500));
    assert_eq!((ch.slots(), ch.max_elems()), (2, 10));

    let src = upload(
        &stream,
        &(0..20).map(|j| f32::gen(3, j)).collect::<Vec<_>>(),
    );
    let mut dst = poisoned::<f32>(&stream, 20);
    let channel_err = |r: nvshmem::Result<()>| matches!(r, Err(Error::Channel { .. }));
    assert!(channel_err(ch.send(0, &src, 0, &stream)));
    assert!(channel_err(ch.send(0, &src, 11, &stream)));
    assert!(channel_err(ch.send(0, &src.slice(0..4), 5, &stream)));
    assert!(channel_err(ch.recv_into(0, &mut dst, 0, &stream)));
    assert!(channel_err(ch.recv_into(0, &mut dst, 11, &stream)));
    assert!(channel_err(ch.recv_into(
        0,
        &mut dst.slice_mut(0..3),
        4,
        &stream
    )));
    for pe in [1, -1] {
        assert!(matches!(
            ch.send(pe, &src, 4, &stream),
            Err(Error::InvalidPe { .. })
        ));
        assert!(matches!(
            ch.recv_into(pe, &mut dst, 4, &stream),
            Err(Error::InvalidPe { .. })
        ));
        assert!(matches!(ch.recv(pe, &stream), Err(Error::InvalidPe { .. })));
    }
    // Nothing was queued by the refused calls: message 0 is still the next one.
    ch.send(0, &src, 10, &stream).unwrap();
    ch.recv_into(0, &mut dst, 10, &stream).unwrap();
    ch.sync(&stream).unwrap();
    let got = stream.clone_dtoh(&dst).unwrap();
    let want: Vec<f32> = (0..10).map(|j| f32::gen(3, j)).collect();
    assert_eq!(&got[..10], &want[..]);
    assert_eq!(&got[10..], &vec![-1.0; 10][..], "received past its length");
}

gpu_test!(1, a_pe_sends_to_itself_copying_and_in_place);
fn a_pe_sends_to_itself_copying_and_in_place() {
    // One PE, one stream: every message is sent, then received, alternately with recv_into and
    // with recv + release; both put paths.
    let nv = runtime(1);
    let stream = nv.stream().clone();
    for direct in [true, false] {
        let count = 300;
        let plan = Plan::new(count, &LENGTHS);
        let mut ch = Channel::<bf16>::new(&nv, 2, plan.max_len()).unwrap();
        ch.set_direct_stores(direct);
        let src = upload(&stream, &plan.expected::<bf16>());
        let mut dst = poisoned::<bf16>(&stream, plan.total);
        for i in 0..count {
            let len = plan.lens[i];
            ch.send(0, &src.slice(plan.range(i)), len, &stream).unwrap();
            let mut out = dst.slice_mut(plan.range(i));
            if i % 3 == 0 {
                let msg = ch.recv(0, &stream).unwrap();
                assert_eq!((msg.peer(), msg.seq()), (0, i as u64));
                assert_eq!(msg.capacity(), plan.max_len());
                if i % 30 == 0 {
                    assert_eq!(msg.len().unwrap(), len, "message {i}");
                }
                let slot = msg.view().unwrap();
                stream
                    .memcpy_dtod(&slot.view(0..len).unwrap(), &mut out)
                    .unwrap();
                ch.release(msg, &stream).unwrap();
            } else {
                ch.recv_into(0, &mut out, len, &stream).unwrap();
            }
        }
        ch.sync(&stream).unwrap();
        plan.check(
            &format!("to itself, direct {direct}"),
            &stream.clone_dtoh(&dst).unwrap(),
        );
    }
}

gpu_test!(1, unreleased_messages_are_refused_before_they_deadlock);
fn unreleased_messages_are_refused_before_they_deadlock() {
    let nv = runtime(1);
    let stream = nv.stream().clone();
    let ch = Channel::<i32>::new(&nv, 2, 4).unwrap();
    let other = Channel::<i32>::new(&nv, 2, 4).unwrap();
    let src = upload(&stream, &[1, 2, 3, 4]);
    for _ in 0..2 {
        ch.send(0, &src, 4, &stream).unwrap();
    }
    let first = ch.recv(0, &stream).unwrap();
    let second = ch.recv(0, &stream).unwrap();
    assert_eq!(first.len().unwrap(), 4);
    assert_eq!(first.view().unwrap().to_vec().unwrap(), vec![1, 2, 3, 4]);
    // Both slots are held: a third receive could never complete.
    assert!(matches!(ch.recv(0, &stream), Err(Error::Channel { .. })));
    // A message goes back to its own channel only.
    let refused = other.release(first, &stream);
    assert!(matches!(refused, Err(Error::Channel { .. })));
    ch.release(second, &stream).unwrap();
    ch.sync(&stream).unwrap();
}
