//! What a call's checked-mode header says of it (the meta word and its reading), and the
//! names allreduce gives itself and its kernels in errors.

use crate::coll::allreduce::algo::AllreduceAlgo;
use crate::coll::op::ReduceOp;
use crate::core::element::Dtype;
use crate::proto::CollectiveText;
use crate::sys;

/// How a two-shot call moves its data (device/abi.h: NVSHMEMRS_ALGO_TWOSHOT, _TWOSHOT_DIRECT, _TWOSHOT_PUSH).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Protocol {
    /// Receive slots, segment by segment: works across nodes.
    Slots,
    /// One launch; each PE loads its chunk from every member's input over the mappings.
    Pull,
    /// One launch; each PE stores its chunks into the members' outputs (out of place only).
    Push,
}

impl Protocol {
    pub(super) fn code(self) -> i32 {
        (match self {
            Protocol::Slots => sys::NVSHMEMRS_ALGO_TWOSHOT,
            Protocol::Pull => sys::NVSHMEMRS_ALGO_TWOSHOT_DIRECT,
            Protocol::Push => sys::NVSHMEMRS_ALGO_TWOSHOT_PUSH,
        }) as i32
    }
}

/// The checked-mode header's `meta` word: what every member must agree on besides the count
/// (a two-shot's protocol too: members that disagree on it would wait on different counters).
pub(super) fn header_meta(
    dtype: Dtype,
    op: ReduceOp,
    algo: AllreduceAlgo,
    protocol: Protocol,
) -> u64 {
    let protocol = match protocol {
        Protocol::Slots => 0,
        Protocol::Pull => 1,
        Protocol::Push => 2,
    };
    dtype as u64 | (op as u64) << 8 | (algo.code() as u64) << 16 | protocol << 24
}

/// A checked-mode header's meta word in words ("bf16 max by ring (direct, push)").
fn describe_meta(value: u64) -> String {
    let code = |shift: u32| (value >> shift) & 0xff;
    let dtype = Dtype::from_code(code(0)).map_or("an unknown type", Dtype::name);
    let op = ReduceOp::ALL
        .into_iter()
        .find(|&o| o as u64 == code(8))
        .map_or("an unknown op", ReduceOp::name);
    let algo = AllreduceAlgo::ALL
        .into_iter()
        .find(|a| a.code() as u64 == code(16))
        .map_or("an unknown algorithm", AllreduceAlgo::name);
    let protocol = match code(24) {
        0 => "",
        1 => " (direct, pull)",
        2 => " (direct, push)",
        _ => " (unknown protocol)",
    };
    format!("{dtype} {op} by {algo}{protocol}")
}

/// Name of an allreduce kernel's algo code (device/abi.h) in messages.
fn protocol_name(code: u64) -> &'static str {
    match u32::try_from(code).unwrap_or(u32::MAX) {
        sys::NVSHMEMRS_ALGO_ONESHOT => "one-shot",
        sys::NVSHMEMRS_ALGO_TWOSHOT => "two-shot",
        sys::NVSHMEMRS_ALGO_RING => "ring",
        sys::NVSHMEMRS_ALGO_RECURSIVE_DOUBLING => "recursive doubling",
        sys::NVSHMEMRS_ALGO_ONESHOT_LL => "low-latency one-shot",
        sys::NVSHMEMRS_ALGO_TWOSHOT_DIRECT => "direct two-shot",
        sys::NVSHMEMRS_ALGO_TWOSHOT_PUSH => "push two-shot",
        _ => "unknown",
    }
}

/// What allreduce says about itself in errors.
pub(super) static TEXT: CollectiveText = CollectiveText {
    type_name: "Allreduce",
    call: "allreduce",
    algorithm: protocol_name,
    meta: describe_meta,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_fields_read_back_as_arguments() {
        assert_eq!(TEXT.header_field(0, 1000), "1000 elements");
        let slots = Protocol::Slots;
        let meta = header_meta(Dtype::Bf16, ReduceOp::Max, AllreduceAlgo::Ring, slots);
        assert_eq!(TEXT.header_field(1, meta), "bf16 max by ring");
        let meta = header_meta(
            Dtype::U64,
            ReduceOp::Avg,
            AllreduceAlgo::RecursiveDoubling,
            slots,
        );
        assert_eq!(TEXT.header_field(1, meta), "u64 avg by rd");
        assert_ne!(
            header_meta(Dtype::F32, ReduceOp::Sum, AllreduceAlgo::OneShot, slots),
            header_meta(Dtype::F32, ReduceOp::Sum, AllreduceAlgo::TwoShot, slots)
        );
        // Members that would take different two-shot protocols disagree in the header.
        let two = |p| header_meta(Dtype::F32, ReduceOp::Sum, AllreduceAlgo::TwoShot, p);
        assert_ne!(two(Protocol::Pull), two(Protocol::Push));
        assert_eq!(
            TEXT.header_field(1, two(Protocol::Push)),
            "f32 sum by twoshot (direct, push)"
        );
        assert_eq!(
            TEXT.header_field(1, two(Protocol::Pull)),
            "f32 sum by twoshot (direct, pull)"
        );
    }
}
