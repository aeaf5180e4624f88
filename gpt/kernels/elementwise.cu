// Elementwise helpers (one thread per element; memory bound, coalesced).
#include "common.cuh"

// dst += src
extern "C" __global__ void add_inplace(float* dst, const float* src, long long n) {
    size_t i = global_index();
    if (i < (size_t)n) dst[i] += src[i];
}

// x *= s
extern "C" __global__ void scale_inplace(float* x, float s, long long n) {
    size_t i = global_index();
    if (i < (size_t)n) x[i] *= s;
}

// out = a + b (out may alias a or b)
extern "C" __global__ void residual_forward(float* out, const float* a, const float* b,
                                            long long n) {
    size_t i = global_index();
    if (i < (size_t)n) out[i] = a[i] + b[i];
}

// out[r, c] += bias[c] for an [N, C] row-major matrix (the bias of a matmul, after cuBLAS).
extern "C" __global__ void add_bias(float* out, const float* bias, int N, int C) {
    size_t i = global_index();
    if (i < (size_t)N * C) out[i] += bias[i % C];
}
