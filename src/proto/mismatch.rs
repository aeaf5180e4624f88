//! What an exchange's failure record says (a grouped send/recv, allgatherv or alltoallv whose
//! PEs disagree on sizes or counts), in the user's terms: the workspace reads it when a kernel
//! recorded such a failure, apart from the exchange code that launches them.

use crate::core::element::Dtype;
use crate::core::status::WaitFailure;
use crate::sys;

const DTYPE_SHIFT: u32 = sys::NVSHMEMRS_EXCHANGE_DTYPE_SHIFT;

/// A size word of the exchange (bytes | dtype << 56) in words: "4096 bytes of f32".
fn size_word(word: u64) -> String {
    let bytes = word & ((1 << DTYPE_SHIFT) - 1);
    let dtype = Dtype::from_code(word >> DTYPE_SHIFT).map_or("an unknown type", Dtype::name);
    format!("{bytes} bytes of {dtype}")
}

/// What an exchange's failure record (FAIL_LENGTH, the reason in `signal`) says, seen on PE
/// `me`.
pub fn mismatch_detail(f: &WaitFailure, me: i32) -> String {
    let peer = if f.peer == me {
        "itself".to_string()
    } else {
        format!("PE {}", f.peer)
    };
    match f.signal as u32 {
        sys::NVSHMEMRS_EXCHANGE_SIZES => format!(
            "{peer} receives {} from this PE where it sends {}",
            size_word(f.want),
            size_word(f.seen)
        ),
        sys::NVSHMEMRS_EXCHANGE_COUNT => format!(
            "{peer} posts {} receive(s) from this PE where it sends {}",
            f.want, f.seen
        ),
        sys::NVSHMEMRS_EXCHANGE_PEER => format!(
            "{peer} found that its transfers to this PE do not match this PE's receives (its \
             error says how)"
        ),
        sys::NVSHMEMRS_EXCHANGE_PEER_ARGS => {
            format!("{peer}'s device counts were out of range (its error says which)")
        }
        sys::NVSHMEMRS_EXCHANGE_BOUNDS => format!(
            "this PE's device counts reach element {} of a buffer of {} elements",
            f.seen, f.want
        ),
        sys::NVSHMEMRS_EXCHANGE_SENT_SIZES => format!(
            "{peer} sends {} to this PE where this PE receives {}",
            size_word(f.seen),
            size_word(f.want)
        ),
        sys::NVSHMEMRS_EXCHANGE_SENT_COUNT => format!(
            "{peer} sends {} transfer(s) to this PE where this PE posts {} receive(s)",
            f.seen, f.want
        ),
        sys::NVSHMEMRS_EXCHANGE_SENT_MODE => {
            let way = |lines: u64| match lines {
                1 => "as low-latency lines",
                _ => "through the mailbox",
            };
            format!(
                "{peer} sends its transfers to this PE {} where this PE takes them {}: \
                 NVSH_EXCHANGE_LL_MAX or the protocol set differs between the two",
                way(f.seen),
                way(f.want)
            )
        }
        sys::NVSHMEMRS_EXCHANGE_RECEIVER => format!(
            "{peer} found that this PE's sends to it (in this call or an earlier one) do not \
             match its receives (its error says how)"
        ),
        other => format!("transfer mismatch of unknown kind {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::status::{FailureKind, WaitOp};
    use std::time::Duration;

    #[test]
    fn mismatch_records_read_as_words() {
        let f = |signal: u32, peer: i32, want: u64, seen: u64| WaitFailure {
            kind: FailureKind::LengthMismatch,
            op: WaitOp::Collective,
            peer,
            signal: signal as u64,
            // Grouped send/recv's code (src/coll/table.rs); the text does not read it.
            index: 24,
            seq: 3,
            want,
            seen,
            waited: Duration::ZERO,
        };
        let word = |bytes: u64, d: Dtype| bytes | (d as u64) << DTYPE_SHIFT;
        let sizes = f(
            sys::NVSHMEMRS_EXCHANGE_SIZES,
            1,
            word(4096, Dtype::F32),
            word(2048, Dtype::Bf16),
        );
        assert_eq!(
            mismatch_detail(&sizes, 0),
            "PE 1 receives 4096 bytes of f32 from this PE where it sends 2048 bytes of bf16"
        );
        let count = f(sys::NVSHMEMRS_EXCHANGE_COUNT, 0, 1, 2);
        assert_eq!(
            mismatch_detail(&count, 0),
            "itself posts 1 receive(s) from this PE where it sends 2"
        );
        let bounds = f(sys::NVSHMEMRS_EXCHANGE_BOUNDS, 0, 100, 130);
        assert!(mismatch_detail(&bounds, 0).contains("reach element 130 of a buffer of 100"));
        assert!(mismatch_detail(&f(sys::NVSHMEMRS_EXCHANGE_PEER, 2, 0, 0), 0).contains("PE 2"));
        // Found by the receiver in the sender's lines: want is the receiver's own.
        let sent = f(
            sys::NVSHMEMRS_EXCHANGE_SENT_SIZES,
            0,
            word(48, Dtype::F32),
            word(40, Dtype::F32),
        );
        assert_eq!(
            mismatch_detail(&sent, 1),
            "PE 0 sends 40 bytes of f32 to this PE where this PE receives 48 bytes of f32"
        );
        assert_eq!(
            mismatch_detail(&f(sys::NVSHMEMRS_EXCHANGE_SENT_COUNT, 0, 2, 1), 1),
            "PE 0 sends 1 transfer(s) to this PE where this PE posts 2 receive(s)"
        );
        let mode = mismatch_detail(&f(sys::NVSHMEMRS_EXCHANGE_SENT_MODE, 0, 0, 1), 1);
        assert!(
            mode.contains("as low-latency lines where this PE takes them through the mailbox")
                && mode.contains("NVSH_EXCHANGE_LL_MAX"),
            "{mode}"
        );
        let receiver = mismatch_detail(&f(sys::NVSHMEMRS_EXCHANGE_RECEIVER, 1, 0, 0), 0);
        assert!(
            receiver.starts_with("PE 1 found that this PE's sends to it"),
            "{receiver}"
        );
    }
}
