// Shared helpers for the model kernels. Every kernel is extern "C" so the host loads it by its
// plain name (gpt/src/ops.rs, KERNELS). Offsets are computed in size_t: B*T*Vp and B*NH*T*T can
// exceed 2^31 elements for real shapes even where each dimension fits an int.
#pragma once
#include <cuda_runtime.h>
#include <math.h>

static inline __host__ __device__ int ceil_div(int a, int b) { return (a + b - 1) / b; }

#define FULL_MASK 0xffffffffu

// Butterfly reductions: every lane ends with the same value, combined in the same order, so a
// row's result does not depend on which lane reads it (and is identical run to run).
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

// Global index of this thread in a 1-D launch, as size_t (grids may cover more than 2^31).
__device__ __forceinline__ size_t global_index() {
    return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}

// Row handled by this warp in the "one warp per row" kernels (blockDim.x a multiple of 32).
__device__ __forceinline__ int warp_row() {
    return blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
}
