// Device-initiated puts launched by src/device_put.rs. Each block moves one contiguous chunk
// with a block-scoped NVSHMEM put: over NVLink the block's threads copy cooperatively, over
// InfiniBand one thread posts the transfer.
#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include "device_put.h"

namespace {

// Bytes of chunk `b` of `blocks` equal chunks of `bytes` (16-byte aligned boundaries keep the
// block copies vectorised), and its offset.
__device__ __forceinline__ void chunk_of(size_t bytes, int blocks, int b, size_t *offset,
                                         size_t *len) {
    size_t per = (bytes + blocks - 1) / blocks;
    per = (per + 15) & ~(size_t)15;
    size_t start = per * (size_t)b;
    *offset = start;
    *len = start >= bytes ? 0 : (bytes - start < per ? bytes - start : per);
}

__global__ void put_block_kernel(char *dest, const char *src, size_t bytes, int pe, int quiet) {
    size_t offset, len;
    chunk_of(bytes, gridDim.x, blockIdx.x, &offset, &len);
    if (len > 0) {
        nvshmemx_putmem_nbi_block(dest + offset, src + offset, len, pe);
    }
    if (quiet) {
        __syncthreads();
        if (threadIdx.x == 0) nvshmem_quiet();
    }
}

__global__ void put_signal_block_kernel(char *dest, const char *src, size_t bytes, uint64_t *sig,
                                        uint64_t value, int sig_op, int pe) {
    size_t offset, len;
    chunk_of(bytes, gridDim.x, blockIdx.x, &offset, &len);
    uint64_t share = value;
    if (sig_op == NVSHMEM_SIGNAL_ADD) {
        // gridDim.x <= value (host side), so every share is at least 1.
        share = value / gridDim.x + ((uint64_t)blockIdx.x < value % gridDim.x ? 1 : 0);
    }
    if (len > 0) {
        nvshmemx_putmem_signal_nbi_block(dest + offset, src + offset, len, sig, share, sig_op, pe);
    } else if (threadIdx.x == 0) {
        // An empty trailing chunk still owes its share of the signal.
        nvshmemx_signal_op(sig, share, sig_op, pe);
    }
}

int clamp_threads(int threads) { return threads < 32 ? 32 : (threads > 1024 ? 1024 : threads); }

}  // namespace

extern "C" int nvshmemrs_put_block(void *dest, const void *src, size_t bytes, int pe, int blocks,
                                   int threads, int quiet, cudaStream_t stream) {
    if (blocks < 1) blocks = 1;
    put_block_kernel<<<blocks, clamp_threads(threads), 0, stream>>>(
        (char *)dest, (const char *)src, bytes, pe, quiet);
    return (int)cudaGetLastError();
}

extern "C" int nvshmemrs_put_signal_block(void *dest, const void *src, size_t bytes,
                                          uint64_t *sig, uint64_t value, int sig_op, int pe,
                                          int blocks, int threads, cudaStream_t stream) {
    if (sig_op != NVSHMEM_SIGNAL_ADD || blocks < 1) blocks = 1;
    if (sig_op == NVSHMEM_SIGNAL_ADD && (uint64_t)blocks > value) blocks = value > 0 ? (int)value : 1;
    put_signal_block_kernel<<<blocks, clamp_threads(threads), 0, stream>>>(
        (char *)dest, (const char *)src, bytes, sig, value, sig_op, pe);
    return (int)cudaGetLastError();
}
