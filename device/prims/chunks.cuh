// Chunking shared by the put kernels (core/device_put.cu, bench/bench_put.cu): `blocks` equal
// chunks of `bytes`, boundaries rounded to 16 bytes so that block copies stay vectorised.
#ifndef NVSHMEM_RS_CHUNKS_CUH
#define NVSHMEM_RS_CHUNKS_CUH

#include <stddef.h>

// Offset and length of chunk `b`; trailing chunks may be empty.
static __device__ __forceinline__ void chunk_of(size_t bytes, int blocks, int b, size_t *offset,
                                                size_t *len) {
    size_t per = (bytes + blocks - 1) / blocks;
    per = (per + 15) & ~(size_t)15;
    size_t start = per * (size_t)b;
    *offset = start;
    *len = start >= bytes ? 0 : (bytes - start < per ? bytes - start : per);
}

// The collectives' parts, in elements of T. Internal linkage: see prims/reduce.cuh.
namespace {

// Elements of a chunk rounded so that chunk boundaries stay 16-byte aligned.
template <typename T> __host__ __device__ __forceinline__ size_t round_elems(size_t n) {
    const size_t per16 = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;
    return (n + per16 - 1) / per16 * per16;
}

// [begin, end) of part `i` of `parts` equal, aligned parts of [0, count).
template <typename T>
__device__ __forceinline__ void part_of(size_t count, int parts, int i, size_t *begin,
                                        size_t *end) {
    size_t per = round_elems<T>((count + parts - 1) / parts);
    size_t b = per * (size_t)i;
    *begin = b < count ? b : count;
    *end = b + per < count ? b + per : count;
}

}  // namespace

#endif
