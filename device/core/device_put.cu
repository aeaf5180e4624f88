// Device-initiated puts launched by src/p2p/device_put.rs. Each block moves one contiguous chunk:
// with direct stores into the peer's mapping when nvshmem_ptr gives one (NVLink/PCIe peers),
// else with a block-scoped NVSHMEM put (InfiniBand: one thread posts the transfer).
#include <cuda_runtime.h>
#include "core/nvshmem_device.cuh"

#include "prims/chunks.cuh"
#include "prims/pdl.cuh"
#include "core/device_put.h"

namespace {

// Fast path over NVLink/PCIe: the block copies its chunk straight into the peer's mapping with
// 16-byte loads and stores, four in flight per thread. Needs 16-byte aligned pointers.
__device__ __forceinline__ void block_copy_to_peer(char *dst, const char *src, size_t len) {
    const uint4 *s = reinterpret_cast<const uint4 *>(src);
    uint4 *d = reinterpret_cast<uint4 *>(dst);
    const size_t n = len / 16, stride = blockDim.x;
    size_t i = threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 a = __ldg(s + i), b = __ldg(s + i + stride), c = __ldg(s + i + 2 * stride),
              e = __ldg(s + i + 3 * stride);
        d[i] = a;
        d[i + stride] = b;
        d[i + 2 * stride] = c;
        d[i + 3 * stride] = e;
    }
    for (; i < n; i += stride) d[i] = __ldg(s + i);
    for (size_t j = n * 16 + threadIdx.x; j < len; j += stride) dst[j] = src[j];
}

// The peer's mapping of `dest` when loads and stores can reach it and both sides are 16-byte
// aligned; NULL means "use NVSHMEM's put" (other nodes, unaligned views).
__device__ __forceinline__ char *direct_peer(char *dest, const char *src, int pe) {
    if ((reinterpret_cast<uintptr_t>(dest) | reinterpret_cast<uintptr_t>(src)) & 15) return NULL;
    return static_cast<char *>(nvshmem_ptr(dest, pe));
}

__global__ void put_block_kernel(char *dest, const char *src, size_t bytes, int pe, int quiet) {
    wait_for_previous_kernel();
    size_t offset, len;
    chunk_of(bytes, gridDim.x, blockIdx.x, &offset, &len);
    char *peer = direct_peer(dest, src, pe);
    if (len > 0) {
        if (peer != NULL) {
            block_copy_to_peer(peer + offset, src + offset, len);
        } else {
            nvshmemx_putmem_nbi_block(dest + offset, src + offset, len, pe);
        }
    }
    if (quiet) {
        // Direct stores: visible to the peer once fenced; NVSHMEM's puts: once quieted.
        if (peer != NULL) __threadfence_system();
        __syncthreads();
        if (threadIdx.x == 0) nvshmem_quiet();
    }
}

__global__ void put_signal_block_kernel(char *dest, const char *src, size_t bytes, uint64_t *sig,
                                        uint64_t value, int sig_op, int pe) {
    wait_for_previous_kernel();
    size_t offset, len;
    chunk_of(bytes, gridDim.x, blockIdx.x, &offset, &len);
    uint64_t share = value;
    if (sig_op == NVSHMEM_SIGNAL_ADD) {
        // gridDim.x <= value (host side), so every share is at least 1.
        share = value / gridDim.x + ((uint64_t)blockIdx.x < value % gridDim.x ? 1 : 0);
    }
    char *peer = direct_peer(dest, src, pe);
    if (peer != NULL) {
        // Every thread fences its own stores before the block's one signal update.
        block_copy_to_peer(peer + offset, src + offset, len);
        __threadfence_system();
        __syncthreads();
        if (threadIdx.x == 0) nvshmemx_signal_op(sig, share, sig_op, pe);
    } else if (len > 0) {
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
    return (int)launch_pdl(put_block_kernel, blocks, clamp_threads(threads), stream,
                           (char *)dest, (const char *)src, bytes, pe, quiet);
}

extern "C" int nvshmemrs_put_signal_block(void *dest, const void *src, size_t bytes,
                                          uint64_t *sig, uint64_t value, int sig_op, int pe,
                                          int blocks, int threads, cudaStream_t stream) {
    if (sig_op != NVSHMEM_SIGNAL_ADD || blocks < 1) blocks = 1;
    if (sig_op == NVSHMEM_SIGNAL_ADD && (uint64_t)blocks > value) blocks = value > 0 ? (int)value : 1;
    return (int)launch_pdl(put_signal_block_kernel, blocks, clamp_threads(threads), stream,
                           (char *)dest, (const char *)src, bytes, sig, value, sig_op, pe);
}
