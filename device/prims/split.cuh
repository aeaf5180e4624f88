// Parts of the split protocol (abi.h NVSHMEMRS_FAMILY_SPLIT): a buffer of `count` elements in
// n - 1 parts, one per member other than the root, and each part in one chunk per grid block
// (block b of every PE handles chunk b of a part, so it waits only for block b of its peers),
// moved as split_pieces() pieces.
#ifndef NVSHMEM_RS_SPLIT_CUH
#define NVSHMEM_RS_SPLIT_CUH

#include <stddef.h>

#include "abi.h"
#include "prims/chunks.cuh"

// Internal linkage: see prims/reduce.cuh.
namespace {

// The part of member r (r != root): the members other than the root in rank order.
__device__ __forceinline__ int split_part(int r, int root) { return r < root ? r : r - 1; }

// This block's chunk of a part, in elements of T from the buffer's start: [begin, end), in the
// part that starts at part_begin.
struct SplitChunk {
    size_t part_begin, begin, end;
};

// Pieces per block: a grid smaller than NVSHMEMRS_FAMILY_BLOCKS moves each block's chunk of a
// part as this many pieces in turn, each with its own DATA counter (slot split_slot(piece) of
// the block counters), so that a member forwards (broadcast) or reduces (reduce) piece k while
// piece k + 1 is still on its way: the two phases overlap instead of following each other.
__device__ __forceinline__ unsigned split_pieces() {
    const unsigned p = NVSHMEMRS_FAMILY_BLOCKS / gridDim.x;
    return p > 0 ? p : 1;
}

// The counter slot of this block's piece (pieces of all blocks in turn: piece 0 of every
// block, then piece 1, ...), below NVSHMEMRS_FAMILY_BLOCKS.
__device__ __forceinline__ unsigned split_slot(unsigned piece) {
    return piece * gridDim.x + blockIdx.x;
}

// Piece `piece` of this block of part k of `parts` equal, 16-byte aligned parts of
// [0, count) (part_of: trailing parts and pieces may be empty).
template <typename T>
__device__ __forceinline__ SplitChunk split_chunk(size_t count, int parts, int k,
                                                  unsigned piece) {
    size_t pb, pe, b, e;
    part_of<T>(count, parts, k, &pb, &pe);
    part_of<T>(pe - pb, (int)(gridDim.x * split_pieces()), (int)split_slot(piece), &b, &e);
    return SplitChunk{pb, pb + b, pb + e};
}

// Where the root starts its round of the other members (rank order, wrapping) for counter slot
// `slot`: a member that moves with the slot, so that at any time the root's blocks write to
// every member alike instead of all to the next one.
__device__ __forceinline__ int split_root_first(int n, int root, unsigned slot) {
    return (root + 1 + (int)(slot % (unsigned)(n - 1))) % n;
}

}  // namespace

#endif
