// Device helpers shared by the sparse kernels (sparse/*.cu): magnitude keys, 16-byte runs of
// elements, set lengths, index search, value adds, and the (value type, index type) dispatch.
#ifndef NVSHMEM_RS_SPARSE_CUH
#define NVSHMEM_RS_SPARSE_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "abi.h"
#include "prims/pdl.cuh"

// Internal linkage: see prims/reduce.cuh.
namespace {

// Threads per block of every sparse kernel (the block scans are compiled for it).
constexpr int SPARSE_THREADS = 256;

// Magnitude keys. With the sign cleared, the bits of a float order like its magnitude (the
// exponent sits above the mantissa, and -0 becomes +0); every NaN becomes the largest key, so
// NaN sorts above infinity and all NaNs tie. BITS: the key's width for the radix passes.
template <typename T> struct Key;
template <> struct Key<float> {
    static constexpr int BITS = 32;
    static __device__ __forceinline__ uint32_t of(float x) {
        uint32_t m = __float_as_uint(x) & 0x7FFFFFFFu;
        return m > 0x7F800000u ? 0x7FFFFFFFu : m;
    }
};
template <> struct Key<__nv_bfloat16> {
    static constexpr int BITS = 16;
    static __device__ __forceinline__ uint32_t of(__nv_bfloat16 x) {
        uint32_t m = __bfloat16_as_ushort(x) & 0x7FFFu;
        return m > 0x7F80u ? 0x7FFFu : m;
    }
};

// Elements per 16-byte run.
template <typename T> struct Run {
    static constexpr int N = 16 / sizeof(T);
};

// Loads the run of elements i0 .. i0 + N - 1 (i0 a multiple of N) into x; returns how many of
// them lie below n. One 16-byte load where the gradient is 16-byte aligned (the usual case),
// element loads otherwise (a view at an odd offset).
template <typename T>
__device__ __forceinline__ int load_run(const T *g, uint64_t n, uint64_t i0, bool aligned,
                                        T (&x)[Run<T>::N]) {
    constexpr int N = Run<T>::N;
    if (i0 >= n) return 0;
    if (aligned && i0 + N <= n) {
        uint4 raw = __ldg(reinterpret_cast<const uint4 *>(g + i0));
        memcpy(x, &raw, 16);
        return N;
    }
    int c = n - i0 < (uint64_t)N ? (int)(n - i0) : N;
    for (int j = 0; j < c; ++j) x[j] = g[i0 + j];
    return c;
}

__device__ __forceinline__ bool aligned16(const void *p) {
    return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

// Pairs a set holds: its count, or its capacity when the count ran past it.
__device__ __forceinline__ uint64_t held(const nvshmemrs_sparse_set &s) {
    const uint64_t c = *s.count;
    return c < s.capacity ? c : s.capacity;
}

// How many of idx[0 .. c) are below x (idx sorted ascending).
template <typename I>
__device__ __forceinline__ uint64_t lower_bound(const I *idx, uint64_t c, I x) {
    uint64_t lo = 0, hi = c;
    while (lo < hi) {
        const uint64_t mid = lo + (hi - lo) / 2;
        if (idx[mid] < x) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

template <typename T> __device__ __forceinline__ T add_values(T x, T y) { return x + y; }
// In f32, rounded once to bf16 (as the collectives reduce bf16).
template <>
__device__ __forceinline__ __nv_bfloat16 add_values<__nv_bfloat16>(__nv_bfloat16 x,
                                                                   __nv_bfloat16 y) {
    return __float2bfloat16_rn(__bfloat162float(x) + __bfloat162float(y));
}

__device__ __forceinline__ void atomic_add_value(float *p, float v) { atomicAdd(p, v); }
// A compare-and-swap loop on the 16-bit word: the add is the one merge does (f32, rounded once),
// the same on every architecture.
__device__ __forceinline__ void atomic_add_value(__nv_bfloat16 *p, __nv_bfloat16 v) {
    unsigned short *word = reinterpret_cast<unsigned short *>(p);
    unsigned short seen = *word, was;
    do {
        was = seen;
        const __nv_bfloat16 sum = add_values(__ushort_as_bfloat16(was), v);
        seen = atomicCAS(word, was, __bfloat16_as_ushort(sum));
    } while (seen != was);
}

// Calls F::template run<T, I>() for the runtime value type and index type codes.
template <typename T, typename F> cudaError_t by_index(int index_type, F &f) {
    switch (index_type) {
    case NVSHMEMRS_DTYPE_I32: return f.template run<T, int32_t>();
    case NVSHMEMRS_DTYPE_I64: return f.template run<T, int64_t>();
    default: return cudaErrorInvalidValue;
    }
}

template <typename F> cudaError_t by_value_index(int dtype, int index_type, F &f) {
    switch (dtype) {
    case NVSHMEMRS_DTYPE_F32: return by_index<float>(index_type, f);
    case NVSHMEMRS_DTYPE_BF16: return by_index<__nv_bfloat16>(index_type, f);
    default: return cudaErrorInvalidValue;
    }
}

// Sets *count to `value` (the empty cases: k = 0, an empty gradient, empty inputs).
__global__ void sparse_set_count_kernel(uint64_t *count, uint64_t value) {
    wait_for_previous_kernel();
    *count = value;
}

// Into *blocks: enough blocks to give every one of `items` a thread, but at most `per_sm`
// blocks per SM (grid-stride loops take the rest).
static cudaError_t sparse_grid(uint64_t items, int per_sm, int *blocks) {
    int dev = 0, sms = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return err;
    }
    uint64_t want = (items + SPARSE_THREADS - 1) / SPARSE_THREADS;
    uint64_t most = (uint64_t)sms * per_sm;
    if (want < 1) want = 1;
    *blocks = (int)(want < most ? want : most);
    return cudaSuccess;
}

}  // namespace

#endif
