// Latency kernel of the put benchmark (nvsh/src/bench/put.rs): p + wait ping-pong, one thread.
#include <cuda_runtime.h>
#include "core/nvshmem_device.cuh"

#include "bench/bench_put.h"
#include "prims/chunks.cuh"

namespace {

__global__ void pingpong_kernel(uint64_t *flag, int peer, int iters, uint64_t base,
                                int initiator) {
    for (int i = 1; i <= iters; ++i) {
        uint64_t v = base + (uint64_t)i;
        if (initiator) {
            nvshmem_uint64_p(flag, v, peer);
            nvshmem_uint64_wait_until(flag, NVSHMEM_CMP_GE, v);
        } else {
            nvshmem_uint64_wait_until(flag, NVSHMEM_CMP_GE, v);
            nvshmem_uint64_p(flag, v, peer);
        }
    }
}

__global__ void put_loop_kernel(char *dest, const char *src, size_t bytes, int pe, int iters) {
    size_t offset, len;
    chunk_of(bytes, gridDim.x, blockIdx.x, &offset, &len);
    for (int i = 0; i < iters && len > 0; ++i) {
        nvshmemx_putmem_nbi_block(dest + offset, src + offset, len, pe);
    }
    __syncthreads();
    if (threadIdx.x == 0) nvshmem_quiet();
}

}  // namespace

extern "C" int nvshmemrs_bench_pingpong(uint64_t *flag, int peer, int iters, uint64_t base,
                                        int initiator, cudaStream_t stream) {
    pingpong_kernel<<<1, 1, 0, stream>>>(flag, peer, iters, base, initiator);
    return (int)cudaGetLastError();
}

extern "C" int nvshmemrs_bench_put_loop(void *dest, const void *src, size_t bytes, int pe,
                                        int iters, int blocks, int threads, cudaStream_t stream) {
    put_loop_kernel<<<blocks, threads, 0, stream>>>((char *)dest, (const char *)src, bytes, pe,
                                                    iters);
    return (int)cudaGetLastError();
}
