// Local steps of the sparse gradient allreduce (sparse/allreduce.h): small elementwise and
// per-pair kernels between the selections and the collectives; counts are read on the device.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include <cub/block/block_reduce.cuh>

#include "abi.h"
#include "prims/pdl.cuh"
#include "sparse/allreduce.h"
#include "sparse/sparse.cuh"

namespace {

// Blocks of the Gaussian sums: a fixed number, so the f64 sums add in the same order on every
// run (partials per block, then one block adds them in block order).
constexpr int STAT_BLOCKS = 256;

template <typename T> __device__ __forceinline__ float as_f32(T x) { return (float)x; }
template <> __device__ __forceinline__ float as_f32(__nv_bfloat16 x) {
    return __bfloat162float(x);
}
template <typename T> __device__ __forceinline__ T of_f32(float x) { return (T)x; }
template <> __device__ __forceinline__ __nv_bfloat16 of_f32(float x) {
    return __float2bfloat16_rn(x);
}

#define GRID_STRIDE(j, count)                                                                   \
    for (uint64_t j = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; j < (count);             \
         j += (uint64_t)gridDim.x * blockDim.x)

// The elementwise steps over a dense buffer: d[i] = Op::apply(d[i], g, i, s).
struct AccumulateOp {
    template <typename T>
    static __device__ __forceinline__ T apply(T d, const T *g, uint64_t i, float) {
        return add_values(d, g[i]);
    }
};
struct ScaleOp {
    template <typename T>
    static __device__ __forceinline__ T apply(T d, const T *, uint64_t, float s) {
        return of_f32<T>(as_f32(d) * s);
    }
};

template <typename Op, typename T>
__global__ void __launch_bounds__(SPARSE_THREADS)
    dense_kernel(T *d, const T *g, uint64_t n, float s) {
    wait_for_previous_kernel();
    GRID_STRIDE(i, n) { d[i] = Op::template apply<T>(d[i], g, i, s); }
}

template <typename T, typename I>
__global__ void __launch_bounds__(SPARSE_THREADS)
    zero_at_kernel(nvshmemrs_sparse_set set, T *dense, uint64_t n) {
    wait_for_previous_kernel();
    const I *idx = static_cast<const I *>(set.idx);
    const uint64_t c = held(set);
    GRID_STRIDE(j, c) {
        const I i = idx[j];
        if (i >= 0 && (uint64_t)i < n) dense[i] = of_f32<T>(0.0f);
    }
}

template <typename T>
__global__ void __launch_bounds__(SPARSE_THREADS)
    stats_kernel(const T *g, uint64_t n, double *partials) {
    wait_for_previous_kernel();
    using Reduce = cub::BlockReduce<double, SPARSE_THREADS>;
    __shared__ typename Reduce::TempStorage tmp;
    double s = 0.0, q = 0.0;
    GRID_STRIDE(i, n) {
        const double x = as_f32(g[i]);
        s += x;
        q = __dadd_rn(q, __dmul_rn(x, x));
    }
    const double bs = Reduce(tmp).Sum(s);
    __syncthreads();
    const double bq = Reduce(tmp).Sum(q);
    if (threadIdx.x == 0) {
        partials[2 * blockIdx.x] = bs;
        partials[2 * blockIdx.x + 1] = bq;
    }
}

__global__ void stats_finish_kernel(const double *partials, uint64_t n, double z, float *out) {
    wait_for_previous_kernel();
    if (threadIdx.x != 0) return;
    double s = 0.0, q = 0.0;
    for (int b = 0; b < STAT_BLOCKS; ++b) {
        s += partials[2 * b];
        q += partials[2 * b + 1];
    }
    // Rounded op by op, no fused multiply-adds: the same bits as the CPU reference wherever the
    // sums are exact (integer data). Population variance; rounding may take it below 0.
    const double mean = __ddiv_rn(s, (double)n);
    const double var = fmax(__dsub_rn(__ddiv_rn(q, (double)n), __dmul_rn(mean, mean)), 0.0);
    const double t = __dadd_rn(fabs(mean), __dmul_rn(z, __dsqrt_rn(var)));
    // At least the smallest positive float: zeros are never worth sending.
    const float f = (float)t;
    *out = !isfinite(t) ? __int_as_float(0x7F800000) : (f > 0.0f ? f : __int_as_float(1));
}

__device__ __forceinline__ uint64_t round_up(uint64_t x, uint64_t a) {
    return (x + a - 1) / a * a;
}

__global__ void offsets_kernel(const uint64_t *sizes, int n_pes, uint64_t capacity,
                               uint64_t unit_a, uint64_t unit_b, uint64_t align,
                               uint64_t *counts, uint64_t *displs, uint64_t *total) {
    wait_for_previous_kernel();
    if (threadIdx.x != 0) return;
    uint64_t at = 0, pairs = 0;
    for (int r = 0; r < n_pes; ++r) {
        const uint64_t h = sizes[r] < capacity ? sizes[r] : capacity;
        const uint64_t c = round_up(h * unit_a, align) + round_up(h * unit_b, align);
        counts[r] = c;
        displs[r] = at;
        at += c;
        pairs += h;
    }
    *total = pairs;
}

// Index bytes of a packed part of h pairs, padded to 8: the values start there.
template <typename I> __device__ __forceinline__ uint64_t idx_block(uint64_t h) {
    return round_up(h * sizeof(I), 8);
}

template <typename T, typename I>
__global__ void __launch_bounds__(SPARSE_THREADS)
    pack_kernel(nvshmemrs_sparse_set set, char *out) {
    wait_for_previous_kernel();
    const uint64_t h = held(set);
    I *oi = reinterpret_cast<I *>(out);
    T *ov = reinterpret_cast<T *>(out + idx_block<I>(h));
    GRID_STRIDE(j, h) {
        oi[j] = static_cast<const I *>(set.idx)[j];
        ov[j] = static_cast<const T *>(set.val)[j];
    }
}

// blockIdx.y: the part.
template <typename T, typename I>
__global__ void __launch_bounds__(SPARSE_THREADS)
    scatter_concat_kernel(const char *gathered, const uint64_t *sizes, uint64_t capacity,
                          const uint64_t *displs, T *dense, uint64_t n) {
    wait_for_previous_kernel();
    const int r = blockIdx.y;
    const uint64_t h = sizes[r] < capacity ? sizes[r] : capacity;
    const char *part = gathered + displs[r];
    const I *idx = reinterpret_cast<const I *>(part);
    const T *val = reinterpret_cast<const T *>(part + idx_block<I>(h));
    GRID_STRIDE(j, h) {
        const I i = idx[j];
        if (i >= 0 && (uint64_t)i < n) atomic_add_value(dense + i, val[j]);
    }
}

template <typename T, typename I>
__global__ void __launch_bounds__(SPARSE_THREADS)
    gather_kernel(nvshmemrs_sparse_set pos, const I *src_idx, const T *src_val,
                  uint64_t src_len, nvshmemrs_sparse_set out) {
    wait_for_previous_kernel();
    const uint64_t h = held(pos);
    const I *p = static_cast<const I *>(pos.idx);
    GRID_STRIDE(j, h) {
        const I at = p[j];
        if (at >= 0 && (uint64_t)at < src_len) {
            static_cast<I *>(out.idx)[j] = src_idx[at];
            static_cast<T *>(out.val)[j] = src_val[at];
        }
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) *out.count = h;
}

template <typename T, typename I>
__global__ void __launch_bounds__(SPARSE_THREADS)
    mark_kernel(nvshmemrs_sparse_set mine, nvshmemrs_sparse_set global, float *mark,
                T *residual, uint64_t n) {
    wait_for_previous_kernel();
    const uint64_t h = held(mine), gh = held(global);
    const I *idx = static_cast<const I *>(mine.idx);
    const I *gidx = static_cast<const I *>(global.idx);
    GRID_STRIDE(j, mine.capacity) {
        bool in = false;
        if (j < h) {
            const I i = idx[j];
            const uint64_t at = lower_bound(gidx, gh, i);
            in = at < gh && gidx[at] == i;
            if (in && residual != nullptr && i >= 0 && (uint64_t)i < n) {
                residual[i] = of_f32<T>(0.0f);
            }
        }
        mark[j] = in ? 1.0f : 0.0f;
    }
}

// Ok-Topk's threshold estimate, in three steps: the least magnitude key of the pairs a set
// holds (atomicMin over the blocks into *least, reset first), then that key as a threshold.
__global__ void least_key_reset_kernel(uint32_t *least) {
    wait_for_previous_kernel();
    *least = 0xFFFFFFFFu;
}

struct MinKey {
    __device__ __forceinline__ uint32_t operator()(uint32_t a, uint32_t b) const {
        return a < b ? a : b;
    }
};

template <typename T>
__global__ void __launch_bounds__(SPARSE_THREADS)
    least_key_kernel(nvshmemrs_sparse_set set, uint32_t *least) {
    wait_for_previous_kernel();
    using Reduce = cub::BlockReduce<uint32_t, SPARSE_THREADS>;
    __shared__ typename Reduce::TempStorage tmp;
    const T *val = static_cast<const T *>(set.val);
    const uint64_t h = held(set);
    uint32_t m = 0xFFFFFFFFu;
    GRID_STRIDE(j, h) {
        const uint32_t key = Key<T>::of(val[j]);
        m = key < m ? key : m;
    }
    const uint32_t block = Reduce(tmp).Reduce(m, MinKey());
    if (threadIdx.x == 0 && block != 0xFFFFFFFFu) atomicMin(least, block);
}

// The key back to the magnitude it stands for (exact: a bf16 key is the top half of the f32
// bits of the same value); a NaN key or no pairs give +infinity; at least the smallest
// positive float (zeros are never worth sending).
template <typename T>
__global__ void least_key_threshold_kernel(const uint32_t *least, float *threshold) {
    wait_for_previous_kernel();
    const uint32_t key = *least;
    float t = __int_as_float(0x7F800000);
    if (key != 0xFFFFFFFFu) {
        t = __uint_as_float(Key<T>::BITS == 16 ? key << 16 : key);
        if (t != t) t = __int_as_float(0x7F800000);
    }
    *threshold = t > 0.0f ? t : __int_as_float(1);
}

// floor(j x n / p) without overflow (p < 2^31).
__device__ __forceinline__ uint64_t share_of(uint64_t n, uint64_t j, uint64_t p) {
    return n / p * j + n % p * j / p;
}

// How many of the c sorted, non-negative indexes lie below b.
template <typename I>
__device__ __forceinline__ uint64_t count_below(const I *idx, uint64_t c, uint64_t b) {
    uint64_t lo = 0, hi = c;
    while (lo < hi) {
        const uint64_t mid = lo + (hi - lo) / 2;
        if ((uint64_t)idx[mid] < b) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

// One block: bounds[0..p] from the pairs the set holds (see the header).
template <typename I>
__global__ void region_bounds_kernel(nvshmemrs_sparse_set set, uint64_t n, int p,
                                     uint64_t *bounds) {
    wait_for_previous_kernel();
    const I *idx = static_cast<const I *>(set.idx);
    const uint64_t c = held(set);
    for (int j = threadIdx.x; j <= p; j += blockDim.x) {
        uint64_t b = n;
        if (j == 0) {
            b = 0;
        } else if (j < p) {
            b = c == 0 ? share_of(n, j, p) : (uint64_t)idx[share_of(c, j, p)];
        }
        bounds[j] = b;
    }
}

// One block: the pairs of each region and where they start in the set.
template <typename I>
__global__ void region_split_kernel(nvshmemrs_sparse_set set, const uint64_t *bounds, int p,
                                    uint64_t *sizes, uint64_t *displs) {
    wait_for_previous_kernel();
    const I *idx = static_cast<const I *>(set.idx);
    const uint64_t c = held(set);
    for (int j = threadIdx.x; j < p; j += blockDim.x) {
        const uint64_t lo = j == 0 ? 0 : count_below(idx, c, bounds[j]);
        const uint64_t hi = j == p - 1 ? c : count_below(idx, c, bounds[j + 1]);
        sizes[j] = hi > lo ? hi - lo : 0;
        displs[j] = lo;
    }
}

// Round t's counts (see the header); thread 0 of block 0 also packs the receive parts.
__global__ void region_rounds_kernel(const uint64_t *send_sizes, const uint64_t *recv_sizes,
                                     int me, int p, int width, int rounds, uint64_t *send_counts,
                                     uint64_t *recv_counts, uint64_t *recv_displs,
                                     uint64_t *received) {
    wait_for_previous_kernel();
    GRID_STRIDE(e, (uint64_t)rounds * p) {
        const int t = (int)(e / p), r = (int)(e % p);
        const int to = (r - me + p) % p, from = (me - r + p) % p;
        send_counts[e] = to / width == t ? send_sizes[r] : 0;
        recv_counts[e] = from / width == t ? recv_sizes[r] : 0;
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        uint64_t at = 0;
        for (int r = 0; r < p; ++r) {
            recv_displs[r] = at;
            at += recv_sizes[r];
        }
        *received = at;
    }
}

// Value-type dispatch of the dense kernels.
template <typename F> cudaError_t by_value(int dtype, F &f) {
    switch (dtype) {
    case NVSHMEMRS_DTYPE_F32: return f.template run<float>();
    case NVSHMEMRS_DTYPE_BF16: return f.template run<__nv_bfloat16>();
    default: return cudaErrorInvalidValue;
    }
}

// Launches dense_kernel<Op, T> for the value type of by_value.
template <typename Op> struct Dense {
    void *d;
    const void *g;
    uint64_t n;
    float s;
    cudaStream_t stream;
    template <typename T> cudaError_t run() const {
        if (n == 0) return cudaSuccess;
        int blocks = 0;
        cudaError_t err = sparse_grid(n, 8, &blocks);
        if (err != cudaSuccess) return err;
        return launch_pdl(dense_kernel<Op, T>, blocks, SPARSE_THREADS, stream,
                          static_cast<T *>(d), static_cast<const T *>(g), n, s);
    }
};

struct Stats {
    const void *g;
    uint64_t n;
    double z;
    double *scratch;
    float *out;
    cudaStream_t stream;
    template <typename T> cudaError_t run() const {
        cudaError_t err = launch_pdl(stats_kernel<T>, STAT_BLOCKS, SPARSE_THREADS, stream,
                                     static_cast<const T *>(g), n, scratch);
        if (err != cudaSuccess) return err;
        return launch_pdl(stats_finish_kernel, 1, 32, stream, (const double *)scratch, n, z,
                          out);
    }
};

struct SetLaunch {
    int kind;  // 0 zero_at, 1 pack, 2 gather, 3 mark
    nvshmemrs_sparse_set a, b;
    void *dense;
    const void *src_idx, *src_val;
    float *mark;
    uint64_t n;
    cudaStream_t stream;
    template <typename T, typename I> cudaError_t run() const {
        const uint64_t items = a.capacity > 0 ? a.capacity : 1;
        int blocks = 0;
        cudaError_t err = sparse_grid(items, 8, &blocks);
        if (err != cudaSuccess) return err;
        switch (kind) {
        case 0:
            if (a.capacity == 0) return cudaSuccess;
            return launch_pdl(zero_at_kernel<T, I>, blocks, SPARSE_THREADS, stream, a,
                              static_cast<T *>(dense), n);
        case 1:
            if (a.capacity == 0) return cudaSuccess;
            return launch_pdl(pack_kernel<T, I>, blocks, SPARSE_THREADS, stream, a,
                              static_cast<char *>(dense));
        case 2:
            if (b.capacity < a.capacity) return cudaErrorInvalidValue;
            return launch_pdl(gather_kernel<T, I>, blocks, SPARSE_THREADS, stream, a,
                              static_cast<const I *>(src_idx), static_cast<const T *>(src_val),
                              n, b);
        default:
            if (a.capacity == 0) return cudaSuccess;
            return launch_pdl(mark_kernel<T, I>, blocks, SPARSE_THREADS, stream, a, b, mark,
                              static_cast<T *>(dense), n);
        }
    }
};

// The Ok-Topk region steps (kind 0 least key, 1 bounds, 2 split).
struct RegionLaunch {
    int kind;
    nvshmemrs_sparse_set set;
    uint32_t *least;
    float *threshold;
    const uint64_t *bounds_in;
    uint64_t *out_a, *out_b;
    uint64_t n;
    int p;
    cudaStream_t stream;
    template <typename T, typename I> cudaError_t run() const {
        if (kind == 1) {
            return launch_pdl(region_bounds_kernel<I>, 1, SPARSE_THREADS, stream, set, n, p,
                              out_a);
        }
        if (kind == 2) {
            return launch_pdl(region_split_kernel<I>, 1, SPARSE_THREADS, stream, set, bounds_in,
                              p, out_a, out_b);
        }
        int blocks = 0;
        cudaError_t err = sparse_grid(set.capacity > 0 ? set.capacity : 1, 8, &blocks);
        if (err == cudaSuccess) err = launch_pdl(least_key_reset_kernel, 1, 1, stream, least);
        if (err == cudaSuccess) {
            err = launch_pdl(least_key_kernel<T>, blocks, SPARSE_THREADS, stream, set, least);
        }
        if (err != cudaSuccess) return err;
        return launch_pdl(least_key_threshold_kernel<T>, 1, 1, stream, (const uint32_t *)least,
                          threshold);
    }
};

struct ScatterConcat {
    const void *gathered;
    const uint64_t *sizes, *displs;
    uint64_t capacity;
    int n_pes;
    void *dense;
    uint64_t n;
    cudaStream_t stream;
    template <typename T, typename I> cudaError_t run() const {
        if (capacity == 0 || n_pes <= 0) return cudaSuccess;
        if (n_pes > 65535) return cudaErrorInvalidValue;
        int blocks = 0;
        cudaError_t err = sparse_grid(capacity, 2, &blocks);
        if (err != cudaSuccess) return err;
        return launch_pdl(scatter_concat_kernel<T, I>, dim3(blocks, n_pes), SPARSE_THREADS,
                          stream, static_cast<const char *>(gathered), sizes, capacity, displs,
                          static_cast<T *>(dense), n);
    }
};

}  // namespace

extern "C" int nvshmemrs_sparse_accumulate(void *acc, const void *g, uint64_t n, int32_t dtype,
                                           cudaStream_t stream) {
    Dense<AccumulateOp> f{acc, g, n, 0.0f, stream};
    return by_value(dtype, f);
}

extern "C" int nvshmemrs_sparse_scale(void *dense, uint64_t n, float s, int32_t dtype,
                                      cudaStream_t stream) {
    Dense<ScaleOp> f{dense, nullptr, n, s, stream};
    return by_value(dtype, f);
}

extern "C" int nvshmemrs_sparse_zero_at(nvshmemrs_sparse_set set, void *dense, uint64_t n,
                                        int32_t dtype, int32_t index_type,
                                        cudaStream_t stream) {
    SetLaunch f{0, set, {}, dense, nullptr, nullptr, nullptr, n, stream};
    return by_value_index(dtype, index_type, f);
}

extern "C" uint64_t nvshmemrs_sparse_gaussian_scratch_words(void) { return 2 * STAT_BLOCKS; }

extern "C" int nvshmemrs_sparse_gaussian_threshold(const void *g, uint64_t n, double z,
                                                   int32_t dtype, double *scratch,
                                                   uint64_t scratch_words, float *threshold,
                                                   cudaStream_t stream) {
    if (n == 0 || scratch_words < 2 * STAT_BLOCKS) return cudaErrorInvalidValue;
    Stats f{g, n, z, scratch, threshold, stream};
    return by_value(dtype, f);
}

extern "C" int nvshmemrs_sparse_offsets(const uint64_t *sizes, int32_t n_pes, uint64_t capacity,
                                        uint64_t unit_a, uint64_t unit_b, uint64_t align,
                                        uint64_t *counts, uint64_t *displs,
                                        uint64_t *total_pairs, cudaStream_t stream) {
    if (n_pes <= 0 || align == 0) return cudaErrorInvalidValue;
    return launch_pdl(offsets_kernel, 1, 32, stream, sizes, (int)n_pes, capacity, unit_a, unit_b,
                      align, counts, displs, total_pairs);
}

extern "C" int nvshmemrs_sparse_pack_concat(nvshmemrs_sparse_set set, void *out, int32_t dtype,
                                            int32_t index_type, cudaStream_t stream) {
    SetLaunch f{1, set, {}, out, nullptr, nullptr, nullptr, 0, stream};
    return by_value_index(dtype, index_type, f);
}

extern "C" int nvshmemrs_sparse_scatter_concat(const void *gathered, const uint64_t *sizes,
                                               uint64_t capacity, const uint64_t *displs,
                                               int32_t n_pes, void *dense, uint64_t n,
                                               int32_t dtype, int32_t index_type,
                                               cudaStream_t stream) {
    ScatterConcat f{gathered, sizes, displs, capacity, n_pes, dense, n, stream};
    return by_value_index(dtype, index_type, f);
}

extern "C" int nvshmemrs_sparse_gather(nvshmemrs_sparse_set pos, const void *src_idx,
                                       const void *src_val, uint64_t src_len,
                                       nvshmemrs_sparse_set out, int32_t dtype,
                                       int32_t index_type, cudaStream_t stream) {
    SetLaunch f{2, pos, out, nullptr, src_idx, src_val, nullptr, src_len, stream};
    return by_value_index(dtype, index_type, f);
}

extern "C" int nvshmemrs_sparse_mark_included(nvshmemrs_sparse_set mine,
                                              nvshmemrs_sparse_set global, float *mark,
                                              void *residual, uint64_t n, int32_t dtype,
                                              int32_t index_type, cudaStream_t stream) {
    SetLaunch f{3, mine, global, residual, nullptr, nullptr, mark, n, stream};
    return by_value_index(dtype, index_type, f);
}

extern "C" int nvshmemrs_sparse_least_threshold(nvshmemrs_sparse_set set, uint32_t *scratch,
                                                float *threshold, int32_t dtype,
                                                int32_t index_type, cudaStream_t stream) {
    RegionLaunch f{0, set, scratch, threshold, nullptr, nullptr, nullptr, 0, 0, stream};
    return by_value_index(dtype, index_type, f);
}

extern "C" int nvshmemrs_sparse_region_bounds(nvshmemrs_sparse_set set, uint64_t n,
                                              int32_t n_regions, uint64_t *bounds,
                                              int32_t index_type, cudaStream_t stream) {
    if (n_regions <= 0) return cudaErrorInvalidValue;
    RegionLaunch f{1, set, nullptr, nullptr, nullptr, bounds, nullptr, n, n_regions, stream};
    return by_value_index(NVSHMEMRS_DTYPE_F32, index_type, f);
}

extern "C" int nvshmemrs_sparse_region_split(nvshmemrs_sparse_set set, const uint64_t *bounds,
                                             int32_t n_regions, uint64_t *sizes,
                                             uint64_t *displs, int32_t index_type,
                                             cudaStream_t stream) {
    if (n_regions <= 0) return cudaErrorInvalidValue;
    RegionLaunch f{2, set, nullptr, nullptr, bounds, sizes, displs, 0, n_regions, stream};
    return by_value_index(NVSHMEMRS_DTYPE_F32, index_type, f);
}

extern "C" int nvshmemrs_sparse_region_rounds(const uint64_t *send_sizes,
                                              const uint64_t *recv_sizes, int32_t me,
                                              int32_t n_pes, int32_t width, int32_t rounds,
                                              uint64_t *send_counts, uint64_t *recv_counts,
                                              uint64_t *recv_displs, uint64_t *received,
                                              cudaStream_t stream) {
    if (n_pes <= 0 || me < 0 || me >= n_pes || width <= 0 || rounds <= 0 ||
        (int64_t)rounds * width < n_pes)
        return cudaErrorInvalidValue;
    int blocks = 0;
    cudaError_t err = sparse_grid((uint64_t)rounds * n_pes, 1, &blocks);
    if (err != cudaSuccess) return err;
    return launch_pdl(region_rounds_kernel, blocks, SPARSE_THREADS, stream, send_sizes,
                      recv_sizes, (int)me, (int)n_pes, (int)width, (int)rounds, send_counts,
                      recv_counts, recv_displs, received);
}
