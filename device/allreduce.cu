// Allreduce kernels launched by src/allreduce.rs; the header documents the workspace layout.
// Data moves with direct stores when nvshmem_ptr maps the peer (NVLink/PCIe), else with
// NVSHMEM block puts; every block announces its delivery with one signal add per peer.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <type_traits>

#include "allreduce.h"

namespace {

enum Op { SUM = 0, PROD = 1, MIN = 2, MAX = 3, AVG = 4 };

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
    if (OP == SUM || OP == AVG) return a + b;
    if (OP == PROD) return a * b;
    if (std::is_integral<T>::value) {
        T x = static_cast<T>(a), y = static_cast<T>(b);
        bool take_b = OP == MIN ? (y < x) : (y > x);
        return take_b ? b : a;
    }
    return OP == MIN ? (b < a ? b : a) : (b > a ? b : a);
}

template <typename T, int OP>
__device__ __forceinline__ T finish(typename Acc<T>::type acc, int n_pes) {
    if (OP == AVG) {
        if (std::is_integral<T>::value) {
            // Sum in the type, then truncating division: what Rust's `/` does.
            return static_cast<T>(static_cast<T>(acc) / static_cast<T>(n_pes));
        }
        return from_acc<T>(acc / static_cast<typename Acc<T>::type>(n_pes));
    }
    return from_acc<T>(acc);
}

// Elements of a chunk rounded so that chunk boundaries stay 16-byte aligned.
template <typename T> __host__ __device__ __forceinline__ size_t round_elems(size_t n) {
    const size_t per16 = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;
    return (n + per16 - 1) / per16 * per16;
}

// [begin, end) of part `i` of `parts` equal, aligned parts of [0, count).
template <typename T>
__device__ __forceinline__ void part_of(size_t count, int parts, int i, size_t *begin,
                                        size_t *end) {
    size_t per = round_elems<T>((count + parts - 1) / parts);
    size_t b = per * (size_t)i;
    *begin = b < count ? b : count;
    *end = b + per < count ? b + per : count;
}

// The block copies `bytes` into the peer's mapping with 16-byte stores where it can.
__device__ __forceinline__ void block_store(char *dst, const char *src, size_t bytes) {
    if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) == 0) {
        const uint4 *s = reinterpret_cast<const uint4 *>(src);
        uint4 *d = reinterpret_cast<uint4 *>(dst);
        size_t n = bytes / 16;
        for (size_t i = threadIdx.x; i < n; i += blockDim.x) d[i] = s[i];
        for (size_t j = n * 16 + threadIdx.x; j < bytes; j += blockDim.x) dst[j] = src[j];
    } else {
        for (size_t j = threadIdx.x; j < bytes; j += blockDim.x) dst[j] = src[j];
    }
}

// Delivers `bytes` from local `src` to `dst` (a symmetric address) on `pe`, then adds 1 to the
// counter `flag` on `pe`, ordered after the data. Called by the whole block.
__device__ void block_put_signal(char *dst, const char *src, size_t bytes, uint64_t *flag,
                                 int pe) {
    char *peer = static_cast<char *>(nvshmem_ptr(dst, pe));
    if (peer != NULL) {
        block_store(peer, src, bytes);
        __threadfence_system();
        __syncthreads();
        if (threadIdx.x == 0) nvshmemx_signal_op(flag, 1, NVSHMEM_SIGNAL_ADD, pe);
    } else if (bytes > 0) {
        nvshmemx_putmem_signal_nbi_block(dst, src, bytes, flag, 1, NVSHMEM_SIGNAL_ADD, pe);
    } else if (threadIdx.x == 0) {
        nvshmemx_signal_op(flag, 1, NVSHMEM_SIGNAL_ADD, pe);
    }
    __syncthreads();
}

// Waits (thread t for PE t) until every peer's counter reached `expected`.
__device__ void block_wait_all(uint64_t *counters, uint64_t expected, int n_pes, int my_pe) {
    for (int p = threadIdx.x; p < n_pes; p += blockDim.x) {
        if (p != my_pe) nvshmem_uint64_wait_until(&counters[p], NVSHMEM_CMP_GE, expected);
    }
    __threadfence();
    __syncthreads();
}

// out[i] = op over PEs 0..n-1 of (own[i] for my_pe, slot p[i] otherwise), for i in [b, e).
// Aligned ranges go 16 bytes at a time (one vector per source), the rest element by element.
template <typename T, int OP>
__device__ void block_reduce(const T *own, const char *slots, size_t slot_bytes, T *out,
                             size_t b, size_t e, int n_pes, int my_pe) {
    using A = typename Acc<T>::type;
    constexpr int V = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;
    auto src_of = [&](int p) -> const T * {
        return p == my_pe ? own : reinterpret_cast<const T *>(slots + (size_t)p * slot_bytes);
    };
    size_t vb = e;  // first element left to the scalar loop
    bool aligned = ((reinterpret_cast<uintptr_t>(own) | reinterpret_cast<uintptr_t>(out) |
                     reinterpret_cast<uintptr_t>(slots) | slot_bytes | (b * sizeof(T))) & 15) == 0;
    if (aligned && V > 1) {
        size_t nvec = (e - b) / V;
        vb = b + nvec * V;
        for (size_t v = threadIdx.x; v < nvec; v += blockDim.x) {
            size_t i = b + v * V;
            A acc[V];
            for (int p = 0; p < n_pes; ++p) {
                uint4 raw = *reinterpret_cast<const uint4 *>(src_of(p) + i);
                const T *x = reinterpret_cast<const T *>(&raw);
#pragma unroll
                for (int k = 0; k < V; ++k) {
                    A val = to_acc<T>(x[k]);
                    acc[k] = p == 0 ? val : combine<T, OP>(acc[k], val);
                }
            }
            uint4 res;
            T *r = reinterpret_cast<T *>(&res);
#pragma unroll
            for (int k = 0; k < V; ++k) r[k] = finish<T, OP>(acc[k], n_pes);
            *reinterpret_cast<uint4 *>(out + i) = res;
        }
    }
    for (size_t i = vb + threadIdx.x; i < e; i += blockDim.x) {
        A acc{};
        for (int p = 0; p < n_pes; ++p) {
            A v = to_acc<T>(src_of(p)[i]);
            acc = p == 0 ? v : combine<T, OP>(acc, v);
        }
        out[i] = finish<T, OP>(acc, n_pes);
    }
    __syncthreads();
}

template <typename T, int OP>
__global__ void oneshot_kernel(const T *input, T *output, size_t count, char *scratch,
                               size_t slot_bytes, uint64_t *flags, int parity, uint64_t expected,
                               int n_pes, int my_pe) {
    size_t b, e;
    part_of<T>(count, gridDim.x, blockIdx.x, &b, &e);
    char *slots = scratch + (size_t)parity * n_pes * slot_bytes;
    uint64_t *counters = flags + (size_t)parity * n_pes;  // phase 0
    // Push this block's part of the input into slot [parity][my_pe] of every peer.
    for (int k = 1; k < n_pes; ++k) {
        int pe = (my_pe + k) % n_pes;
        block_put_signal(slots + (size_t)my_pe * slot_bytes + b * sizeof(T),
                         reinterpret_cast<const char *>(input + b), (e - b) * sizeof(T),
                         &counters[my_pe], pe);
    }
    block_wait_all(counters, expected, n_pes, my_pe);
    // Slot p holds PE p's whole input at offset 0: index it like `input`.
    block_reduce<T, OP>(input, slots, slot_bytes, output, b, e, n_pes, my_pe);
}

template <typename T, int OP>
__global__ void twoshot_kernel(const T *input, T *output, size_t count, char *scratch,
                               size_t slot_bytes, uint64_t *flags, int parity,
                               uint64_t expected_scatter, uint64_t expected_gather, int n_pes,
                               int my_pe) {
    char *slots = scratch + (size_t)parity * n_pes * slot_bytes;
    uint64_t *scatter = flags + (size_t)parity * n_pes;             // phase 0
    uint64_t *gather = flags + (size_t)(2 + parity) * n_pes;        // phase 1
    const size_t chunk = round_elems<T>((count + n_pes - 1) / n_pes);
    // Reduce-scatter: part blockIdx.x of chunk p goes to PE p's slot [parity][my_pe].
    for (int k = 1; k < n_pes; ++k) {
        int pe = (my_pe + k) % n_pes;
        size_t c0 = chunk * pe < count ? chunk * pe : count;
        size_t c1 = c0 + chunk < count ? c0 + chunk : count;
        size_t b, e;
        part_of<T>(c1 - c0, gridDim.x, blockIdx.x, &b, &e);
        block_put_signal(slots + (size_t)my_pe * slot_bytes + b * sizeof(T),
                         reinterpret_cast<const char *>(input + c0 + b), (e - b) * sizeof(T),
                         &scatter[my_pe], pe);
    }
    block_wait_all(scatter, expected_scatter, n_pes, my_pe);
    // Reduce the own chunk; slot p holds PE p's copy of it at offset 0.
    size_t c0 = chunk * my_pe < count ? chunk * my_pe : count;
    size_t c1 = c0 + chunk < count ? c0 + chunk : count;
    size_t b, e;
    part_of<T>(c1 - c0, gridDim.x, blockIdx.x, &b, &e);
    block_reduce<T, OP>(input + c0, slots, slot_bytes, output + c0, b, e, n_pes, my_pe);
    // All-gather: the reduced part goes to the same place of every peer's output.
    for (int k = 1; k < n_pes; ++k) {
        int pe = (my_pe + k) % n_pes;
        block_put_signal(reinterpret_cast<char *>(output + c0 + b),
                         reinterpret_cast<const char *>(output + c0 + b), (e - b) * sizeof(T),
                         &gather[my_pe], pe);
    }
    block_wait_all(gather, expected_gather, n_pes, my_pe);
}

template <typename T, int OP>
cudaError_t launch_oneshot(const void *input, void *output, size_t count, char *scratch,
                           size_t slot_bytes, uint64_t *flags, int parity, uint64_t expected,
                           int n_pes, int my_pe, int blocks, int threads, cudaStream_t stream) {
    oneshot_kernel<T, OP><<<blocks, threads, 0, stream>>>(
        static_cast<const T *>(input), static_cast<T *>(output), count, scratch, slot_bytes,
        flags, parity, expected, n_pes, my_pe);
    return cudaGetLastError();
}

template <typename T, int OP>
cudaError_t launch_twoshot(const void *input, void *output, size_t count, char *scratch,
                           size_t slot_bytes, uint64_t *flags, int parity, uint64_t expected_s,
                           uint64_t expected_g, int n_pes, int my_pe, int blocks, int threads,
                           cudaStream_t stream) {
    twoshot_kernel<T, OP><<<blocks, threads, 0, stream>>>(
        static_cast<const T *>(input), static_cast<T *>(output), count, scratch, slot_bytes,
        flags, parity, expected_s, expected_g, n_pes, my_pe);
    return cudaGetLastError();
}

// Calls F::template run<T, OP>() for the runtime dtype and op codes.
template <typename F, typename T> cudaError_t by_op(int op, F f) {
    switch (op) {
    case SUM: return f.template run<T, SUM>();
    case PROD: return f.template run<T, PROD>();
    case MIN: return f.template run<T, MIN>();
    case MAX: return f.template run<T, MAX>();
    case AVG: return f.template run<T, AVG>();
    default: return cudaErrorInvalidValue;
    }
}

template <typename F> cudaError_t by_dtype(int dtype, int op, F f) {
    switch (dtype) {
    case 0: return by_op<F, float>(op, f);
    case 1: return by_op<F, double>(op, f);
    case 2: return by_op<F, __half>(op, f);
    case 3: return by_op<F, __nv_bfloat16>(op, f);
    case 4: return by_op<F, int32_t>(op, f);
    case 5: return by_op<F, int64_t>(op, f);
    case 6: return by_op<F, uint32_t>(op, f);
    case 7: return by_op<F, uint64_t>(op, f);
    default: return cudaErrorInvalidValue;
    }
}

struct OneShot {
    const void *input;
    void *output;
    size_t count;
    char *scratch;
    size_t slot_bytes;
    uint64_t *flags;
    int parity;
    uint64_t expected;
    int n_pes, my_pe, blocks, threads;
    cudaStream_t stream;
    template <typename T, int OP> cudaError_t run() const {
        return launch_oneshot<T, OP>(input, output, count, scratch, slot_bytes, flags, parity,
                                     expected, n_pes, my_pe, blocks, threads, stream);
    }
};

struct TwoShot {
    const void *input;
    void *output;
    size_t count;
    char *scratch;
    size_t slot_bytes;
    uint64_t *flags;
    int parity;
    uint64_t expected_scatter, expected_gather;
    int n_pes, my_pe, blocks, threads;
    cudaStream_t stream;
    template <typename T, int OP> cudaError_t run() const {
        return launch_twoshot<T, OP>(input, output, count, scratch, slot_bytes, flags, parity,
                                     expected_scatter, expected_gather, n_pes, my_pe, blocks,
                                     threads, stream);
    }
};

}  // namespace

extern "C" int nvshmemrs_allreduce_oneshot(int dtype, int op, const void *input, void *output,
                                           size_t count, char *scratch, size_t slot_bytes,
                                           uint64_t *flags, int parity, uint64_t expected,
                                           int n_pes, int my_pe, int blocks, int threads,
                                           cudaStream_t stream) {
    OneShot f{input, output, count, scratch, slot_bytes, flags, parity, expected,
              n_pes, my_pe, blocks, threads, stream};
    return (int)by_dtype(dtype, op, f);
}

extern "C" int nvshmemrs_allreduce_twoshot(int dtype, int op, const void *input, void *output,
                                           size_t count, char *scratch, size_t slot_bytes,
                                           uint64_t *flags, int parity, uint64_t expected_scatter,
                                           uint64_t expected_gather, int n_pes, int my_pe,
                                           int blocks, int threads, cudaStream_t stream) {
    TwoShot f{input,  output,           count,           scratch, slot_bytes, flags,  parity,
              expected_scatter, expected_gather, n_pes, my_pe,    blocks, threads, stream};
    return (int)by_dtype(dtype, op, f);
}
