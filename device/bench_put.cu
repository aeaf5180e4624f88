// Latency kernel of the put benchmark (src/bench_put.rs): p + wait ping-pong, one thread.
#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include "bench_put.h"

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

}  // namespace

extern "C" int nvshmemrs_bench_pingpong(uint64_t *flag, int peer, int iters, uint64_t base,
                                        int initiator, cudaStream_t stream) {
    pingpong_kernel<<<1, 1, 0, stream>>>(flag, peer, iters, base, initiator);
    return (int)cudaGetLastError();
}
