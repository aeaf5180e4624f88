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

#endif
