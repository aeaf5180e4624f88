//! [`Exchange`]: each method's exchange with its buffers, and the size of a packed part
//! (`gaussiank_concat`).

use super::gathered::{Gathered, VParts};
use super::regions::Regions;
use super::tree::Tree;
use crate::core::buffer::SymmetricBuffer;
use crate::sparse::{SparseIndex, SparseValue};

/// The exchange of each method, with its buffers.
pub(super) enum Exchange<'nv, T: SparseValue, I: SparseIndex> {
    /// Allgather of k indexes and k values into P x k each.
    Fixed {
        idx: SymmetricBuffer<'nv, I>,
        val: SymmetricBuffer<'nv, T>,
    },
    /// Allgatherv of indexes and of values, packed in member order.
    Varying(Gathered<'nv, T, I>),
    /// One allgatherv of packed (indexes, values) parts.
    Concat {
        parts: VParts<'nv>,
        packed: SymmetricBuffer<'nv, u8>,
        gathered: SymmetricBuffer<'nv, u8>,
        part_bytes: usize,
    },
    /// gTop-k's tree, broadcast and included indexes.
    Tree(Box<Tree<'nv, T, I>>),
    /// Ok-Topk's region exchange (also `topk_sa`, `gaussiank_sa`).
    Regions(Box<Regions<'nv, T, I>>),
}

/// Bytes of a packed part of `pairs` pairs: indexes, then values, each padded to 8 bytes.
pub(super) fn packed_bytes<T, I>(pairs: usize) -> usize {
    let up = |b: usize| b.div_ceil(8) * 8;
    up(pairs * std::mem::size_of::<I>()) + up(pairs * std::mem::size_of::<T>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_parts_keep_both_arrays_aligned() {
        assert_eq!(packed_bytes::<f32, i32>(3), 16 + 16);
        assert_eq!(packed_bytes::<half::bf16, i32>(3), 16 + 8);
        assert_eq!(packed_bytes::<f32, i32>(0), 0);
    }
}
