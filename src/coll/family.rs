//! What the collectives beside allreduce share above the protocol layer: the checked-mode meta
//! word and the names of their kernels in messages. The protocol part is
//! [`crate::proto::family`].

use crate::coll::op::ReduceOp;
use crate::core::buffer::SymView;
use crate::core::element::{Dtype, Element};
use crate::core::error::{Error, Result};
use crate::sys;
use std::ops::Range;

/// The byte range a view covers on this PE.
pub(crate) fn byte_range<T: Element>(v: &SymView<'_, T>) -> Range<usize> {
    let start = v.as_device_ptr() as usize;
    start..start + v.num_bytes()
}

/// Input and output may overlap only where the call runs in place (`in_place`: the caller
/// found the input where the collective's in-place form puts it); else [`Error::Overlap`].
pub(crate) fn refuse_overlap(
    what: &'static str,
    input: Range<usize>,
    output: Range<usize>,
    in_place: bool,
) -> Result<()> {
    if in_place || input.end <= output.start || output.end <= input.start {
        return Ok(());
    }
    Err(Error::Overlap {
        what,
        input: (input.start, input.end),
        output: (output.start, output.end),
    })
}

/// A buffer holding one block of `block` elements per member: its length must be
/// `n` x `block`, else [`Error::CollectiveShape`] naming `which` buffer.
pub(crate) fn check_blocks(
    what: &'static str,
    which: &str,
    len: usize,
    block: usize,
    n: i32,
) -> Result<()> {
    match block.checked_mul(n as usize) {
        Some(need) if need == len => Ok(()),
        _ => Err(Error::CollectiveShape {
            what,
            detail: format!(
                "the {which} holds {len} elements, but {n} members x {block} elements need \
                 {}; pass one block per member",
                block.saturating_mul(n as usize)
            ),
        }),
    }
}

/// A checked-mode meta word of the family: element type, op (reductions), the collective's
/// code and root + 1 (rooted ones; 0 otherwise).
pub fn family_meta(dtype: Dtype, op: Option<ReduceOp>, code: u32, root: Option<i32>) -> u64 {
    let op = op.map_or(0xff, |o| o as u64);
    let root = root.map_or(0, |r| r as u64 + 1);
    dtype as u64 | op << 8 | (code as u64) << 16 | root << 32
}

/// [`family_meta`] in words: "f32 sum, root 1", "bf16".
pub fn describe_family_meta(meta: u64) -> String {
    let dtype = Dtype::from_code(meta & 0xff).map_or("an unknown type", Dtype::name);
    let mut s = dtype.to_string();
    let op = (meta >> 8) & 0xff;
    if op != 0xff {
        let name = ReduceOp::ALL
            .into_iter()
            .find(|&o| o as u64 == op)
            .map_or("an unknown op", ReduceOp::name);
        s = format!("{s} {name}");
    }
    let root = meta >> 32;
    if root > 0 {
        s = format!("{s}, root {}", root - 1);
    }
    s
}

/// Name of a family kernel's code (the status record's index) in messages.
pub fn family_code_name(code: u64) -> &'static str {
    match u32::try_from(code).unwrap_or(u32::MAX) {
        sys::NVSHMEMRS_COLL_BROADCAST => "broadcast",
        sys::NVSHMEMRS_COLL_ALLGATHER => "allgather",
        sys::NVSHMEMRS_COLL_ALLTOALL => "alltoall",
        sys::NVSHMEMRS_COLL_REDUCE_SCATTER => "reduce-scatter, receive slots",
        sys::NVSHMEMRS_COLL_REDUCE => "reduce, receive slots",
        _ => "header check",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_and_overlaps_are_checked() {
        assert!(check_blocks("allgather", "output", 12, 3, 4).is_ok());
        let err = check_blocks("allgather", "output", 12, 4, 4)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("holds 12 elements") && err.contains("need 16"),
            "{err}"
        );
        assert!(check_blocks("alltoall", "input", 5, usize::MAX, 2).is_err());
        assert!(refuse_overlap("reduce", 0..64, 64..96, false).is_ok());
        assert!(refuse_overlap("reduce", 0..64, 32..96, true).is_ok());
        assert!(matches!(
            refuse_overlap("reduce", 0..64, 32..96, false),
            Err(Error::Overlap { .. })
        ));
    }

    #[test]
    fn meta_words_read_back_as_arguments() {
        let code = sys::NVSHMEMRS_COLL_REDUCE;
        let m = family_meta(Dtype::Bf16, Some(ReduceOp::Max), code, Some(3));
        assert_eq!(describe_family_meta(m), "bf16 max, root 3");
        let m = family_meta(Dtype::U8, None, sys::NVSHMEMRS_COLL_ALLGATHER, None);
        assert_eq!(describe_family_meta(m), "u8");
        // Roots, ops and types that differ give different words.
        let a = family_meta(Dtype::F32, None, sys::NVSHMEMRS_COLL_BROADCAST, Some(0));
        let b = family_meta(Dtype::F32, None, sys::NVSHMEMRS_COLL_BROADCAST, Some(1));
        assert_ne!(a, b);
        assert_ne!(
            family_meta(Dtype::F32, Some(ReduceOp::Sum), code, Some(0)),
            family_meta(Dtype::F32, Some(ReduceOp::Avg), code, Some(0))
        );
        assert_eq!(
            family_code_name(sys::NVSHMEMRS_COLL_ALLTOALL as u64),
            "alltoall"
        );
    }
}
