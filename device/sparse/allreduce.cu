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
// GaussianK's count correction (as the seed's GaussianCompressor.compress): while fewer than
// `need` are selected, the threshold is divided by 1.012, at most 50 times. Candidates t_0 ..
// t_50 (t_j = t_0 / 1.012^j in f64, then rounded to f32), one histogram bucket each.
constexpr int CORRECT_STEPS = 50;
constexpr int CORRECT_SLOTS = CORRECT_STEPS + 1;
constexpr double CORRECT_SHRINK = 1.012;
// Workspace words after the partials: the candidates (f32, one word each), the histogram.
constexpr int CORRECT_AT = 2 * STAT_BLOCKS;
constexpr int GAUSS_WORDS = CORRECT_AT + 2 * CORRECT_SLOTS;

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

// DGC's local clipping factor from stats_kernel's partials (their sums of squares, in block
// order): max_norm / norm where the norm is finite and above max_norm, else 1.
__global__ void clip_finish_kernel(const double *partials, double max_norm, float *factor) {
    wait_for_previous_kernel();
    if (threadIdx.x != 0) return;
    double q = 0.0;
    for (int b = 0; b < STAT_BLOCKS; ++b) q += partials[2 * b + 1];
    const double norm = __dsqrt_rn(q);
    *factor = isfinite(norm) && norm > max_norm ? (float)__ddiv_rn(max_norm, norm) : 1.0f;
}

// The clipped gradient: rounded to T before any add (the CPU reference's order; __fmul_rn
// keeps the product out of a fused multiply-add).
template <typename T>
__global__ void __launch_bounds__(SPARSE_THREADS)
    clip_kernel(T *d, const T *g, uint64_t n, const float *factor, int accumulate) {
    wait_for_previous_kernel();
    const float f = *factor;
    GRID_STRIDE(i, n) {
        const T c = of_f32<T>(__fmul_rn(as_f32(g[i]), f));
        d[i] = accumulate ? add_values(d[i], c) : c;
    }
}

// A threshold as the selection takes it: t rounded to f32, +infinity where t is not finite, at
// least the smallest positive float (zeros are never worth sending).
__device__ __forceinline__ float as_threshold(double t) {
    const float f = (float)t;
    return !isfinite(t) ? __int_as_float(0x7F800000) : (f > 0.0f ? f : __int_as_float(1));
}

// need > 0: the candidates of the count correction into scratch (and its histogram zeroed)
// instead of the threshold itself.
__global__ void stats_finish_kernel(double *partials, uint64_t n, double z, float *out,
                                    uint64_t need) {
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
    double t = __dadd_rn(fabs(mean), __dmul_rn(z, __dsqrt_rn(var)));
    if (need == 0) {
        *out = as_threshold(t);
        return;
    }
    float *cand = reinterpret_cast<float *>(partials + CORRECT_AT);
    unsigned long long *hist = reinterpret_cast<unsigned long long *>(partials + CORRECT_AT +
                                                                      CORRECT_SLOTS);
    for (int j = 0; j < CORRECT_SLOTS; ++j) {
        cand[2 * j] = as_threshold(t);
        hist[j] = 0;
        t = __ddiv_rn(t, CORRECT_SHRINK);
    }
}

// The count correction's histogram: each element into the first candidate it passes (|g| >=
// t_j; NaN passes every one). The candidates do not increase, so passing is monotone in j.
template <typename T>
__global__ void __launch_bounds__(SPARSE_THREADS)
    correct_count_kernel(const T *g, uint64_t n, double *scratch) {
    wait_for_previous_kernel();
    __shared__ float cand[CORRECT_SLOTS];
    __shared__ unsigned h[CORRECT_SLOTS];
    const float *c = reinterpret_cast<const float *>(scratch + CORRECT_AT);
    for (int j = threadIdx.x; j < CORRECT_SLOTS; j += blockDim.x) {
        cand[j] = c[2 * j];
        h[j] = 0;
    }
    __syncthreads();
    GRID_STRIDE(i, n) {
        const float v = fabsf(as_f32(g[i]));
        if (v != v) {
            atomicAdd(&h[0], 1u);
            continue;
        }
        if (!(v >= cand[CORRECT_SLOTS - 1])) continue;
        int lo = 0, hi = CORRECT_SLOTS - 1;  // the first j with v >= cand[j] is in [lo, hi]
        while (lo < hi) {
            const int mid = (lo + hi) / 2;
            if (v >= cand[mid]) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        atomicAdd(&h[lo], 1u);
    }
    __syncthreads();
    unsigned long long *hist =
        reinterpret_cast<unsigned long long *>(scratch + CORRECT_AT + CORRECT_SLOTS);
    for (int j = threadIdx.x; j < CORRECT_SLOTS; j += blockDim.x) {
        if (h[j] != 0) atomicAdd(&hist[j], (unsigned long long)h[j]);
    }
}

// The first candidate that selects at least `need` (at most 50 divisions, as the seed).
__global__ void correct_pick_kernel(const double *scratch, uint64_t need, float *out) {
    wait_for_previous_kernel();
    if (threadIdx.x != 0) return;
    const float *c = reinterpret_cast<const float *>(scratch + CORRECT_AT);
    const unsigned long long *hist =
        reinterpret_cast<const unsigned long long *>(scratch + CORRECT_AT + CORRECT_SLOTS);
    unsigned long long selected = 0;
    int j = 0;
    for (; j < CORRECT_STEPS; ++j) {
        selected += hist[j];
        if (selected >= need) break;
    }
    *out = c[2 * j];
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

// Ok-Topk's local threshold rise (the seed's add2residual): candidates c_j = state x 1.03^j
// (f64, j = 0 .. 5), each rounded as a threshold; the histogram counts, per element, how many
// candidates it passes (|g| >= c_j; NaN passes all), so count(c_j) = the elements that pass
// more than j. Workspace: the candidates (f32, one word each), then the histogram.
constexpr int RISE_STEPS = 5;
constexpr int RISE_SLOTS = RISE_STEPS + 1;
constexpr double RISE_FACTOR = 1.03;
constexpr int RISE_WORDS = RISE_SLOTS + RISE_SLOTS + 1;

__global__ void rise_prepare_kernel(const double *state, double *scratch) {
    wait_for_previous_kernel();
    if (threadIdx.x != 0) return;
    float *cand = reinterpret_cast<float *>(scratch);
    unsigned long long *hist = reinterpret_cast<unsigned long long *>(scratch + RISE_SLOTS);
    double t = *state;
    for (int j = 0; j < RISE_SLOTS; ++j) {
        cand[2 * j] = as_threshold(t);
        t = __dmul_rn(t, RISE_FACTOR);
    }
    for (int j = 0; j <= RISE_SLOTS; ++j) hist[j] = 0;
}

template <typename T>
__global__ void __launch_bounds__(SPARSE_THREADS)
    rise_count_kernel(const T *g, uint64_t n, double *scratch) {
    wait_for_previous_kernel();
    __shared__ float cand[RISE_SLOTS];
    __shared__ unsigned h[RISE_SLOTS + 1];
    const float *c = reinterpret_cast<const float *>(scratch);
    for (int j = threadIdx.x; j <= RISE_SLOTS; j += blockDim.x) {
        if (j < RISE_SLOTS) cand[j] = c[2 * j];
        h[j] = 0;
    }
    __syncthreads();
    GRID_STRIDE(i, n) {
        const float v = fabsf(as_f32(g[i]));
        int passed = 0;
        if (v != v) {
            passed = RISE_SLOTS;
        } else {
            while (passed < RISE_SLOTS && v >= cand[passed]) ++passed;
        }
        if (passed > 0) atomicAdd(&h[passed], 1u);
    }
    __syncthreads();
    unsigned long long *hist = reinterpret_cast<unsigned long long *>(scratch + RISE_SLOTS);
    for (int j = threadIdx.x; j <= RISE_SLOTS; j += blockDim.x) {
        if (h[j] != 0) atomicAdd(&hist[j], (unsigned long long)h[j]);
    }
}

// The first c_j (j < 5) that selects at most `limit`, else c_5: into the state (f64) and the
// threshold word.
__global__ void rise_pick_kernel(const double *scratch, uint64_t limit, double *state,
                                 float *threshold) {
    wait_for_previous_kernel();
    if (threadIdx.x != 0) return;
    const float *cand = reinterpret_cast<const float *>(scratch);
    const unsigned long long *hist =
        reinterpret_cast<const unsigned long long *>(scratch + RISE_SLOTS);
    double t = *state;
    int j = 0;
    for (; j < RISE_STEPS; ++j) {
        unsigned long long count = 0;  // elements passing more than j candidates
        for (int b = j + 1; b <= RISE_SLOTS; ++b) count += hist[b];
        if (count <= limit) break;
        t = __dmul_rn(t, RISE_FACTOR);
    }
    *state = t;
    *threshold = cand[2 * j];
}

// Ok-Topk's threshold adaptation by the count a threshold selected: below 3k/4 the state is
// divided by `down`, above 5k/4 multiplied by `up`; the threshold word follows the state.
__global__ void adapt_kernel(const uint64_t *count, uint64_t k, double down, double up,
                             double *state, float *threshold) {
    wait_for_previous_kernel();
    if (threadIdx.x != 0) return;
    const uint64_t c = *count;
    double t = *state;
    if (4 * c < 3 * k) {
        t = __ddiv_rn(t, down);
    } else if (4 * c > 5 * k) {
        t = __dmul_rn(t, up);
    }
    *state = t;
    *threshold = as_threshold(t);
}

// The state from a threshold word (an exact estimate): exact, f32 into f64.
__global__ void state_set_kernel(const float *threshold, double *state) {
    wait_for_previous_kernel();
    if (threadIdx.x == 0) *state = (double)*threshold;
}

// residual[i] = 0 at every index i of the pairs `set` holds where result[i] is not zero (the
// pairs of this member that made the global set: its values there are not zero).
template <typename T, typename I>
__global__ void __launch_bounds__(SPARSE_THREADS)
    zero_sent_kernel(nvshmemrs_sparse_set set, const T *result, T *residual, uint64_t n) {
    wait_for_previous_kernel();
    const I *idx = static_cast<const I *>(set.idx);
    const uint64_t c = held(set);
    GRID_STRIDE(j, c) {
        const I i = idx[j];
        if (i >= 0 && (uint64_t)i < n && as_f32(result[i]) != 0.0f) {
            residual[i] = of_f32<T>(0.0f);
        }
    }
}

struct Rise {
    const void *g;
    uint64_t n, limit;
    double *state, *scratch;
    float *threshold;
    cudaStream_t stream;
    template <typename T> cudaError_t run() const {
        cudaError_t err = launch_pdl(rise_prepare_kernel, 1, 32, stream, (const double *)state,
                                     scratch);
        if (err != cudaSuccess) return err;
        if (n > 0) {
            int blocks = 0;
            err = sparse_grid(n, 8, &blocks);
            if (err == cudaSuccess) {
                err = launch_pdl(rise_count_kernel<T>, blocks, SPARSE_THREADS, stream,
                                 static_cast<const T *>(g), n, scratch);
            }
            if (err != cudaSuccess) return err;
        }
        return launch_pdl(rise_pick_kernel, 1, 32, stream, (const double *)scratch, limit, state,
                          threshold);
    }
};

struct ZeroSent {
    nvshmemrs_sparse_set set;
    const void *result;
    void *residual;
    uint64_t n;
    cudaStream_t stream;
    template <typename T, typename I> cudaError_t run() const {
        if (set.capacity == 0) return cudaSuccess;
        int blocks = 0;
        cudaError_t err = sparse_grid(set.capacity, 8, &blocks);
        if (err != cudaSuccess) return err;
        return launch_pdl(zero_sent_kernel<T, I>, blocks, SPARSE_THREADS, stream, set,
                          static_cast<const T *>(result), static_cast<T *>(residual), n);
    }
};

// topk_sa's choice between the sparse and the dense allgather of the reduced regions (see the
// header); thread 0 only.
__global__ void sa_choice_kernel(const uint64_t *sizes, int n_pes, uint64_t capacity,
                                 const uint64_t *bounds, uint64_t n, uint64_t *counts,
                                 uint64_t *displs, uint64_t *total, uint64_t *dense_counts,
                                 uint64_t *dense_displs, uint32_t *dense) {
    wait_for_previous_kernel();
    if (threadIdx.x != 0) return;
    uint64_t pairs = 0;
    for (int r = 0; r < n_pes; ++r) pairs += sizes[r] < capacity ? sizes[r] : capacity;
    // The seed's test: the sparse exchange's words (an index and a value per pair) against
    // two thirds of the dense elements.
    const bool go_dense = 2 * pairs >= 2 * n / 3;
    uint64_t at = 0;
    for (int r = 0; r < n_pes; ++r) {
        const uint64_t h = go_dense ? 0 : (sizes[r] < capacity ? sizes[r] : capacity);
        counts[r] = h;
        displs[r] = at;
        at += h;
        dense_counts[r] = go_dense ? bounds[r + 1] - bounds[r] : 0;
        dense_displs[r] = bounds[r];
    }
    *total = at;
    *dense = go_dense ? 1u : 0u;
}

template <typename T>
__global__ void __launch_bounds__(SPARSE_THREADS)
    copy_if_kernel(T *dst, const T *src, uint64_t n, const uint32_t *flag) {
    wait_for_previous_kernel();
    if (*flag == 0) return;
    GRID_STRIDE(i, n) { dst[i] = src[i]; }
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

// Part r only: the launches of the parts follow one another in part order, so every
// element's adds happen in member order.
template <typename T, typename I>
__global__ void __launch_bounds__(SPARSE_THREADS)
    scatter_concat_kernel(const char *gathered, const uint64_t *sizes, uint64_t capacity,
                          const uint64_t *displs, int r, T *dense, uint64_t n) {
    wait_for_previous_kernel();
    const uint64_t h = sizes[r] < capacity ? sizes[r] : capacity;
    const char *part = gathered + displs[r];
    const I *idx = reinterpret_cast<const I *>(part);
    const T *val = reinterpret_cast<const T *>(part + idx_block<I>(h));
    GRID_STRIDE(j, h) {
        const I i = idx[j];
        if (i >= 0 && (uint64_t)i < n) atomic_add_value(dense + i, val[j]);
    }
}

// Part r of a gathered set (see nvshmemrs_sparse_scatter_parts): atomic adds, though within a
// part no index repeats, so no two adds of one launch meet.
template <typename T, typename I>
__global__ void __launch_bounds__(SPARSE_THREADS)
    scatter_part_kernel(const I *idx, const T *val, const uint64_t *sizes,
                        const uint64_t *displs, uint64_t capacity, int r, T *dense, uint64_t n) {
    wait_for_previous_kernel();
    const uint64_t size = sizes == nullptr ? capacity : sizes[r];
    const uint64_t h = size < capacity ? size : capacity;
    const uint64_t at = displs == nullptr ? (uint64_t)r * capacity : displs[r];
    GRID_STRIDE(j, h) {
        const I i = idx[at + j];
        if (i >= 0 && (uint64_t)i < n) atomic_add_value(dense + i, val[at + j]);
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
            // The seed's chunks: position floor(c / p) x j.
            b = c == 0 ? share_of(n, j, p) : (uint64_t)idx[(c / p) * j];
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

struct ClipFactor {
    const void *g;
    uint64_t n;
    double max_norm;
    double *scratch;
    float *factor;
    cudaStream_t stream;
    template <typename T> cudaError_t run() const {
        cudaError_t err = launch_pdl(stats_kernel<T>, STAT_BLOCKS, SPARSE_THREADS, stream,
                                     static_cast<const T *>(g), n, scratch);
        if (err != cudaSuccess) return err;
        return launch_pdl(clip_finish_kernel, 1, 32, stream, (const double *)scratch, max_norm,
                          factor);
    }
};

struct ClipApply {
    void *d;
    const void *g;
    uint64_t n;
    const float *factor;
    int accumulate;
    cudaStream_t stream;
    template <typename T> cudaError_t run() const {
        if (n == 0) return cudaSuccess;
        int blocks = 0;
        cudaError_t err = sparse_grid(n, 8, &blocks);
        if (err != cudaSuccess) return err;
        return launch_pdl(clip_kernel<T>, blocks, SPARSE_THREADS, stream, static_cast<T *>(d),
                          static_cast<const T *>(g), n, factor, accumulate);
    }
};

struct Stats {
    const void *g;
    uint64_t n;
    double z;
    double *scratch;
    float *out;
    uint64_t need;
    cudaStream_t stream;
    template <typename T> cudaError_t run() const {
        cudaError_t err = launch_pdl(stats_kernel<T>, STAT_BLOCKS, SPARSE_THREADS, stream,
                                     static_cast<const T *>(g), n, scratch);
        if (err != cudaSuccess) return err;
        err = launch_pdl(stats_finish_kernel, 1, 32, stream, scratch, n, z, out, need);
        if (err != cudaSuccess || need == 0) return err;
        int blocks = 0;
        err = sparse_grid(n, 8, &blocks);
        if (err != cudaSuccess) return err;
        err = launch_pdl(correct_count_kernel<T>, blocks, SPARSE_THREADS, stream,
                         static_cast<const T *>(g), n, scratch);
        if (err != cudaSuccess) return err;
        return launch_pdl(correct_pick_kernel, 1, 32, stream, (const double *)scratch, need,
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
        int blocks = 0;
        cudaError_t err = sparse_grid(capacity, 2, &blocks);
        for (int r = 0; err == cudaSuccess && r < n_pes; ++r) {
            err = launch_pdl(scatter_concat_kernel<T, I>, blocks, SPARSE_THREADS, stream,
                             static_cast<const char *>(gathered), sizes, capacity, displs, r,
                             static_cast<T *>(dense), n);
        }
        return err;
    }
};

struct CopyIf {
    void *dst;
    const void *src;
    uint64_t n;
    const uint32_t *flag;
    cudaStream_t stream;
    template <typename T> cudaError_t run() const {
        if (n == 0) return cudaSuccess;
        int blocks = 0;
        cudaError_t err = sparse_grid(n, 8, &blocks);
        if (err != cudaSuccess) return err;
        return launch_pdl(copy_if_kernel<T>, blocks, SPARSE_THREADS, stream, static_cast<T *>(dst),
                          static_cast<const T *>(src), n, flag);
    }
};

// The parts of a gathered set, one launch each in part order.
struct ScatterParts {
    const void *idx, *val;
    const uint64_t *sizes, *displs;
    uint64_t capacity;
    int n_pes;
    void *dense;
    uint64_t n;
    cudaStream_t stream;
    template <typename T, typename I> cudaError_t run() const {
        if (capacity == 0 || n_pes <= 0) return cudaSuccess;
        int blocks = 0;
        cudaError_t err = sparse_grid(capacity, 2, &blocks);
        for (int r = 0; err == cudaSuccess && r < n_pes; ++r) {
            err = launch_pdl(scatter_part_kernel<T, I>, blocks, SPARSE_THREADS, stream,
                             static_cast<const I *>(idx), static_cast<const T *>(val), sizes,
                             displs, capacity, r, static_cast<T *>(dense), n);
        }
        return err;
    }
};

}  // namespace

extern "C" int nvshmemrs_sparse_accumulate(void *acc, const void *g, uint64_t n, int32_t dtype,
                                           cudaStream_t stream) {
    Dense<AccumulateOp> f{acc, g, n, 0.0f, stream};
    return by_value(dtype, f);
}

extern "C" uint64_t nvshmemrs_sparse_clip_scratch_words(void) { return 2 * STAT_BLOCKS; }

extern "C" int nvshmemrs_sparse_clip_factor(const void *g, uint64_t n, double max_norm,
                                            int32_t dtype, double *scratch,
                                            uint64_t scratch_words, float *factor,
                                            cudaStream_t stream) {
    if (scratch_words < 2 * STAT_BLOCKS) return cudaErrorInvalidValue;
    ClipFactor f{g, n, max_norm, scratch, factor, stream};
    return by_value(dtype, f);
}

extern "C" int nvshmemrs_sparse_clip_apply(void *d, const void *g, uint64_t n,
                                           const float *factor, int32_t accumulate,
                                           int32_t dtype, cudaStream_t stream) {
    ClipApply f{d, g, n, factor, accumulate, stream};
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

extern "C" uint64_t nvshmemrs_sparse_gaussian_scratch_words(void) { return GAUSS_WORDS; }

extern "C" int nvshmemrs_sparse_gaussian_threshold(const void *g, uint64_t n, double z,
                                                   uint64_t need, int32_t dtype,
                                                   double *scratch, uint64_t scratch_words,
                                                   float *threshold, cudaStream_t stream) {
    if (n == 0 || scratch_words < GAUSS_WORDS) return cudaErrorInvalidValue;
    Stats f{g, n, z, scratch, threshold, need, stream};
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

extern "C" int nvshmemrs_sparse_scatter_parts(const void *idx, const void *val,
                                              const uint64_t *sizes, const uint64_t *displs,
                                              uint64_t capacity, int32_t n_parts, void *dense,
                                              uint64_t n, int32_t dtype, int32_t index_type,
                                              cudaStream_t stream) {
    ScatterParts f{idx, val, sizes, displs, capacity, n_parts, dense, n, stream};
    return by_value_index(dtype, index_type, f);
}

extern "C" int nvshmemrs_sparse_sa_choice(const uint64_t *sizes, int32_t n_pes, uint64_t capacity,
                                          const uint64_t *bounds, uint64_t n, uint64_t *counts,
                                          uint64_t *displs, uint64_t *total,
                                          uint64_t *dense_counts, uint64_t *dense_displs,
                                          uint32_t *dense, cudaStream_t stream) {
    if (n_pes <= 0) return cudaErrorInvalidValue;
    return launch_pdl(sa_choice_kernel, 1, 32, stream, sizes, (int)n_pes, capacity, bounds, n,
                      counts, displs, total, dense_counts, dense_displs, dense);
}

extern "C" int nvshmemrs_sparse_copy_if(void *dst, const void *src, uint64_t n, int32_t dtype,
                                        const uint32_t *flag, cudaStream_t stream) {
    CopyIf f{dst, src, n, flag, stream};
    return by_value(dtype, f);
}

extern "C" uint64_t nvshmemrs_sparse_rise_scratch_words(void) { return RISE_WORDS; }

extern "C" int nvshmemrs_sparse_threshold_rise(const void *g, uint64_t n, uint64_t limit,
                                               double *state, float *threshold, int32_t dtype,
                                               double *scratch, uint64_t scratch_words,
                                               cudaStream_t stream) {
    if (scratch_words < RISE_WORDS) return cudaErrorInvalidValue;
    Rise f{g, n, limit, state, scratch, threshold, stream};
    return by_value(dtype, f);
}

extern "C" int nvshmemrs_sparse_threshold_adapt(const uint64_t *count, uint64_t k, double down,
                                                double up, double *state, float *threshold,
                                                cudaStream_t stream) {
    return launch_pdl(adapt_kernel, 1, 32, stream, count, k, down, up, state, threshold);
}

extern "C" int nvshmemrs_sparse_threshold_state(const float *threshold, double *state,
                                                cudaStream_t stream) {
    return launch_pdl(state_set_kernel, 1, 32, stream, threshold, state);
}

extern "C" int nvshmemrs_sparse_zero_sent(nvshmemrs_sparse_set set, const void *result,
                                          void *residual, uint64_t n, int32_t dtype,
                                          int32_t index_type, cudaStream_t stream) {
    ZeroSent f{set, result, residual, n, stream};
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
