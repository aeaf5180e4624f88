// Parts of the split protocol (abi.h NVSHMEMRS_FAMILY_SPLIT): a buffer of `count` elements in
// n - 1 parts, one per member other than the root, and each part in one chunk per grid block
// (block b of every PE handles chunk b of a part, so it waits only for block b of its peers).
#ifndef NVSHMEM_RS_SPLIT_CUH
#define NVSHMEM_RS_SPLIT_CUH

#include <stddef.h>

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

// Chunk blockIdx.x of part k of `parts` equal, 16-byte aligned parts of [0, count) (part_of:
// trailing parts and chunks may be empty).
template <typename T>
__device__ __forceinline__ SplitChunk split_chunk(size_t count, int parts, int k) {
    size_t pb, pe, b, e;
    part_of<T>(count, parts, k, &pb, &pe);
    part_of<T>(pe - pb, gridDim.x, blockIdx.x, &b, &e);
    return SplitChunk{pb, pb + b, pb + e};
}

// Where the root's block starts its round of the other members (rank order, wrapping): a
// member that moves with the block, so that at any time the root's blocks write to every
// member alike instead of all to the next one.
__device__ __forceinline__ int split_root_first(int n, int root) {
    return (root + 1 + (int)(blockIdx.x % (unsigned)(n - 1))) % n;
}

}  // namespace

#endif
