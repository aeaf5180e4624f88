// Element-wise reduction for the collectives: accumulation types, the five ops (NVSHMEMRS_REDOP_*
// codes as template arguments), and the block-wide and 16-byte-vector reduce loops.
#ifndef NVSHMEM_RS_REDUCE_CUH
#define NVSHMEM_RS_REDUCE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stddef.h>
#include <stdint.h>

#include <type_traits>

#include "abi.h"

// Internal linkage, as when every collective sat in one file: each compile unit keeps its own
// copies (no clashes at the device link) and the compiler inlines them as it did then.
namespace {

// Accumulation type: half types reduce in float; integers in their unsigned twin, so that
// overflow wraps (two's complement) instead of being undefined.
template <typename T> struct Acc { using type = T; };
template <> struct Acc<__half> { using type = float; };
template <> struct Acc<__nv_bfloat16> { using type = float; };
template <> struct Acc<int32_t> { using type = uint32_t; };
template <> struct Acc<int64_t> { using type = uint64_t; };

template <typename T> __device__ __forceinline__ typename Acc<T>::type to_acc(T v) {
    return static_cast<typename Acc<T>::type>(v);
}
template <> __device__ __forceinline__ float to_acc<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_acc<__nv_bfloat16>(__nv_bfloat16 v) {
    return __bfloat162float(v);
}

template <typename T> __device__ __forceinline__ T from_acc(typename Acc<T>::type v) {
    return static_cast<T>(v);
}
template <> __device__ __forceinline__ __half from_acc<__half>(float v) {
    return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

// min/max compare in the element type's own order (signed for signed integers).
template <typename T, int OP>
__device__ __forceinline__ typename Acc<T>::type combine(typename Acc<T>::type a,
                                                         typename Acc<T>::type b) {
    using A = typename Acc<T>::type;
    if (OP == NVSHMEMRS_REDOP_SUM || OP == NVSHMEMRS_REDOP_AVG) return a + b;
    if (OP == NVSHMEMRS_REDOP_PROD) return a * b;
    if (std::is_integral<T>::value) {
        T x = static_cast<T>(a), y = static_cast<T>(b);
        bool take_b = OP == NVSHMEMRS_REDOP_MIN ? (y < x) : (y > x);
        return take_b ? b : a;
    }
    return OP == NVSHMEMRS_REDOP_MIN ? (b < a ? b : a) : (b > a ? b : a);
}

template <typename T, int OP>
__device__ __forceinline__ T finish(typename Acc<T>::type acc, int n_pes) {
    if (OP == NVSHMEMRS_REDOP_AVG) {
        if (std::is_integral<T>::value) {
            // Sum in the type, then truncating division: what Rust's `/` does.
            return static_cast<T>(static_cast<T>(acc) / static_cast<T>(n_pes));
        }
        return from_acc<T>(acc / static_cast<typename Acc<T>::type>(n_pes));
    }
    return from_acc<T>(acc);
}

// Vectors per thread at once (block_reduce's U) where the sources are peers' memory read over
// NVLink: enough loads in flight to cover its latency.
constexpr int PEER_VECTORS = 4;

// block_reduce's 16-byte vectors v, v + stride, ..., v + (U - 1) * stride of the range from
// element b: the U loads of a source are in flight together.
template <typename T, int OP, int U, typename Src, typename Done>
__device__ __forceinline__ void reduce_vectors(Src src, int nsrc, T *out, size_t b, size_t v,
                                               size_t stride, Done done) {
    using A = typename Acc<T>::type;
    constexpr int V = 16 / sizeof(T);
    A acc[U][V];
    for (int s = 0; s < nsrc; ++s) {
        uint4 raw[U];
#pragma unroll
        for (int u = 0; u < U; ++u)
            raw[u] = *reinterpret_cast<const uint4 *>(src(s) + b + (v + u * stride) * V);
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const T *x = reinterpret_cast<const T *>(&raw[u]);
#pragma unroll
            for (int k = 0; k < V; ++k) {
                A val = to_acc<T>(x[k]);
                acc[u][k] = s == 0 ? val : combine<T, OP>(acc[u][k], val);
            }
        }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
        uint4 res;
        T *r = reinterpret_cast<T *>(&res);
#pragma unroll
        for (int k = 0; k < V; ++k) r[k] = done(acc[u][k]);
        // A plain store: into local memory it measured faster than store16 (one-shot at 4
        // PEs, 512 KiB: 13.99 against 14.27 us).
        *reinterpret_cast<uint4 *>(out + b + (v + u * stride) * V) = res;
    }
}

// out[i] = op over sources 0..nsrc-1 (in that order) of src(s)[i], for i in [b, e); with
// `last` set, the result is finished (avg divides by n_avg), else kept as a partial.
// Aligned ranges go 16 bytes at a time, U vectors per thread at once (U > 1 where sources are
// peers' memory read over NVLink: more loads in flight), the rest element by element.
template <typename T, int OP, int U = 1, typename Src>
__device__ void block_reduce(Src src, int nsrc, T *out, size_t b, size_t e, bool last,
                             int n_avg) {
    using A = typename Acc<T>::type;
    constexpr int V = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;
    uintptr_t addr_bits = reinterpret_cast<uintptr_t>(out + b);
    for (int s = 0; s < nsrc; ++s) addr_bits |= reinterpret_cast<uintptr_t>(src(s) + b);
    auto done = [&](A acc) -> T {
        return last ? finish<T, OP>(acc, n_avg) : from_acc<T>(acc);
    };
    size_t vb = b;
    if ((addr_bits & 15) == 0 && V > 1) {
        const size_t nvec = (e - b) / V, step = blockDim.x;
        size_t v = threadIdx.x;
        for (; v + (U - 1) * step < nvec; v += U * step)
            reduce_vectors<T, OP, U>(src, nsrc, out, b, v, step, done);
        for (; v < nvec; v += step) reduce_vectors<T, OP, 1>(src, nsrc, out, b, v, step, done);
        vb = b + nvec * V;
    }
    for (size_t i = vb + threadIdx.x; i < e; i += blockDim.x) {
        A acc{};
        for (int s = 0; s < nsrc; ++s) {
            A v = to_acc<T>(src(s)[i]);
            acc = s == 0 ? v : combine<T, OP>(acc, v);
        }
        out[i] = done(acc);
    }
    __syncthreads();
}

// The finished op over sources 0..n-1 (in that order) of one 16-byte vector, `load(r)` giving
// source r's; G sources are loaded before any is combined, so their loads are in flight together.
template <typename T, int OP, int G, typename Load>
__device__ __forceinline__ uint4 reduce_vec16(int n, Load load) {
    using A = typename Acc<T>::type;
    constexpr int V = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;
    A acc[V];
    for (int r0 = 0; r0 < n; r0 += G) {
        uint4 raw[G];
#pragma unroll
        for (int j = 0; j < G; ++j)
            if (r0 + j < n) raw[j] = load(r0 + j);
#pragma unroll
        for (int j = 0; j < G; ++j) {
            if (r0 + j >= n) continue;
            const T *x = reinterpret_cast<const T *>(&raw[j]);
#pragma unroll
            for (int k = 0; k < V; ++k) {
                A val = to_acc<T>(x[k]);
                acc[k] = r0 + j == 0 ? val : combine<T, OP>(acc[k], val);
            }
        }
    }
    uint4 res;
    T *out = reinterpret_cast<T *>(&res);
#pragma unroll
    for (int k = 0; k < V; ++k) out[k] = finish<T, OP>(acc[k], n);
    return res;
}

}  // namespace

#endif
