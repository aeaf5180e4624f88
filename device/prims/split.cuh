// Parts of the split protocol (abi.h NVSHMEMRS_FAMILY_SPLIT): a buffer of `count` elements in
// n - 1 parts, one per member other than the root, and each part in one chunk per grid block
// (block b of every PE handles chunk b of a part, so it waits only for block b of its peers).
#ifndef NVSHMEM_RS_SPLIT_CUH
#define NVSHMEM_RS_SPLIT_CUH

#include <stddef.h>
#include <stdint.h>

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

// Rounds of a block's chunk of `bytes`: about `round_bytes` each, at most
// NVSHMEMRS_SPLIT_ROUNDS_MAX (larger rounds past that); one where the data goes through
// NVSHMEM (put-with-signal operations to one PE are not ordered with each other, so a later
// round's signal could land before an earlier round's data), or where round_bytes is 0. The
// same on every PE for the same chunk.
__device__ __forceinline__ int split_rounds(const nvshmemrs_coll_header &h, size_t bytes,
                                            uint64_t round_bytes) {
    if (!h.all_mapped || round_bytes == 0) return 1;
    const uint64_t r = (bytes + round_bytes - 1) / round_bytes;
    return r < 1 ? 1 : r > NVSHMEMRS_SPLIT_ROUNDS_MAX ? NVSHMEMRS_SPLIT_ROUNDS_MAX : (int)r;
}

// Round j of `rounds` of chunk c, 16-byte aligned: [*b, *e) in elements of T from the
// buffer's start (trailing rounds may be empty).
template <typename T>
__device__ __forceinline__ void split_round(const SplitChunk &c, int rounds, int j, size_t *b,
                                            size_t *e) {
    part_of<T>(c.end - c.begin, rounds, j, b, e);
    *b += c.begin;
    *e += c.begin;
}

// What round j of the step whose counters take `step_value` sets counter ROUND to: the rounds
// of step s lie in ((s - 1) x MAX, s x MAX], above every value of step s - 1, so a counter only
// grows and a wait for round j is met by no earlier step.
__device__ __forceinline__ uint64_t split_round_value(uint64_t step_value, int j) {
    return (step_value - 1) * NVSHMEMRS_SPLIT_ROUNDS_MAX + (uint64_t)j + 1;
}

}  // namespace

#endif
