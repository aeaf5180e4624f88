// One-thread kernels behind the host API's 64-bit atomics (src/p2p/rma.rs).
#include <cuda_runtime.h>
#include "core/nvshmem_device.cuh"

#include "core/atomics.h"

namespace {

__global__ void fetch_add_kernel(uint64_t *dest, uint64_t value, int pe, uint64_t *old) {
    *old = nvshmem_uint64_atomic_fetch_add(dest, value, pe);
}

__global__ void compare_swap_kernel(uint64_t *dest, uint64_t cond, uint64_t value, int pe,
                                    uint64_t *old) {
    *old = nvshmem_uint64_atomic_compare_swap(dest, cond, value, pe);
}

}  // namespace

extern "C" int nvshmemrs_atomic_fetch_add_u64(uint64_t *dest, uint64_t value, int pe,
                                              uint64_t *old, cudaStream_t stream) {
    fetch_add_kernel<<<1, 1, 0, stream>>>(dest, value, pe, old);
    return (int)cudaGetLastError();
}

extern "C" int nvshmemrs_atomic_compare_swap_u64(uint64_t *dest, uint64_t cond, uint64_t value,
                                                 int pe, uint64_t *old, cudaStream_t stream) {
    compare_swap_kernel<<<1, 1, 0, stream>>>(dest, cond, value, pe, old);
    return (int)cudaGetLastError();
}
