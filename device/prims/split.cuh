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

// A block's chunk of a part, in elements from the buffer's start: [begin, end), in the part
// that starts at part_begin.
struct SplitChunk {
    size_t part_begin, begin, end;
};

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

// This block's chunk of a part, as element offsets within the part, and its rounds: `rounds`
// of `round` elements each (the last shorter, trailing ones empty).
struct SplitSide {
    size_t b, e, round;
    int rounds;
};

// This block's side of a part of `len` elements of T: part_of's chunk over the grid.
template <typename T>
__device__ __forceinline__ SplitSide split_side(const nvshmemrs_coll_header &h, size_t len,
                                                uint64_t round_bytes) {
    size_t b, e;
    part_of<T>(len, gridDim.x, blockIdx.x, &b, &e);
    const int r = split_rounds(h, (e - b) * sizeof(T), round_bytes);
    return SplitSide{b, e, round_elems<T>((e - b + r - 1) / r), r};
}

// Chunk b (this block's) of every member's part and its rounds, from divisions done once per
// launch: a division costs tens of instructions on the GPU, and the protocols ask for every
// member's chunk at every round. part_of's parts of [0, count): parts of `per` elements
// (16-byte aligned), then at most one shorter part with the rest, then empty ones.
template <typename T>
struct SplitPlan {
    size_t count, per;
    int root;
    SplitSide full, rest;

    __device__ SplitPlan(const nvshmemrs_coll_header &h, size_t count, int root,
                         uint64_t round_bytes)
        : count(count), root(root) {
        const int parts = h.n - 1;
        per = round_elems<T>((count + parts - 1) / parts);
        full = split_side<T>(h, per, round_bytes);
        rest = split_side<T>(h, per > 0 ? count % per : 0, round_bytes);
    }

    // Member r's part's start, and its side.
    __device__ __forceinline__ SplitSide side(int r, size_t *part_begin) const {
        const size_t start = per * (size_t)split_part(r, root);
        *part_begin = start < count ? start : count;
        if (start + per <= count) return full;
        if (start < count) return rest;
        return SplitSide{0, 0, 0, 1};
    }
    // Chunk b of member r's part, in elements from the buffer's start.
    __device__ __forceinline__ SplitChunk chunk(int r) const {
        size_t pb;
        const SplitSide s = side(r, &pb);
        return SplitChunk{pb, pb + s.b, pb + s.e};
    }
    __device__ __forceinline__ int rounds(int r) const {
        size_t pb;
        return side(r, &pb).rounds;
    }
    // Round j of chunk b of member r's part: [*b, *e) from the buffer's start.
    __device__ __forceinline__ void round(int r, int j, size_t *b, size_t *e) const {
        size_t pb;
        const SplitSide s = side(r, &pb);
        const size_t len = s.e - s.b, lo = s.round * (size_t)j, hi = lo + s.round;
        *b = pb + s.b + (lo < len ? lo : len);
        *e = pb + s.b + (hi < len ? hi : len);
    }
};

// What round j of the step whose counters take `step_value` sets counter ROUND to: the rounds
// of step s lie in ((s - 1) x MAX, s x MAX], above every value of step s - 1, so a counter only
// grows and a wait for round j is met by no earlier step.
__device__ __forceinline__ uint64_t split_round_value(uint64_t step_value, int j) {
    return (step_value - 1) * NVSHMEMRS_SPLIT_ROUNDS_MAX + (uint64_t)j + 1;
}

}  // namespace

#endif
