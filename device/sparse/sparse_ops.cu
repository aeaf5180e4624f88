// Merge of two sparse sets and scatter-add into a dense buffer (sparse/sparse.h).
//
// Merge, without any count from the host: a union element's place is the number of distinct
// indexes below it. For a[i] that is i + (b's indexes below it) - (a's indexes before i that b
// also holds); for b[j] alike with the roles swapped, and a b[j] that a also holds is not
// written (a[i] carries the sum). So each element needs one binary search in the other set and
// an exclusive sum of the "also in the other set" flags over its own set:
//
//   count   per tile of each set: how many of its held elements the other set holds
//   scan    one block: exclusive sums over each set's tiles, and the union's size
//   write   per tile: every element at its place (a's with b's value added where matched)
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "abi.h"
#include "prims/pdl.cuh"
#include "sparse/sparse.cuh"
#include "sparse/sparse.h"

namespace {

// Elements per merge tile: 256 threads x 8 rounds of one element.
constexpr int MERGE_ROUNDS = 8;
constexpr uint64_t MERGE_TILE = (uint64_t)SPARSE_THREADS * MERGE_ROUNDS;
constexpr int SCAN_THREADS = 512;

uint64_t merge_tiles(uint64_t capacity) { return (capacity + MERGE_TILE - 1) / MERGE_TILE; }

// Words: per tile of a then b, one count, then one exclusive sum.
uint64_t merge_words(uint64_t cap_a, uint64_t cap_b) {
    return 2 * (merge_tiles(cap_a) + merge_tiles(cap_b)) + 1;
}

// What one block of a merge kernel works on: blocks [0, tiles_a) take a's tiles, the rest b's.
struct MergeSide {
    nvshmemrs_sparse_set own, other;
    uint64_t tile;
    bool is_a;
};

__device__ __forceinline__ MergeSide merge_side(const nvshmemrs_sparse_set &a,
                                                const nvshmemrs_sparse_set &b,
                                                uint64_t tiles_a) {
    const bool is_a = blockIdx.x < tiles_a;
    return MergeSide{is_a ? a : b, is_a ? b : a, is_a ? blockIdx.x : blockIdx.x - tiles_a, is_a};
}

template <typename I>
__global__ void __launch_bounds__(SPARSE_THREADS)
    merge_count_kernel(nvshmemrs_sparse_set a, nvshmemrs_sparse_set b, uint64_t tiles_a,
                       uint64_t *scratch) {
    wait_for_previous_kernel();
    using Reduce = cub::BlockReduce<uint32_t, SPARSE_THREADS>;
    __shared__ typename Reduce::TempStorage tmp;
    const MergeSide s = merge_side(a, b, tiles_a);
    const I *own = static_cast<const I *>(s.own.idx);
    const I *other = static_cast<const I *>(s.other.idx);
    const uint64_t c_own = held(s.own), c_other = held(s.other);
    uint32_t matched = 0;
    for (int r = 0; r < MERGE_ROUNDS; ++r) {
        const uint64_t i = s.tile * MERGE_TILE + (uint64_t)r * SPARSE_THREADS + threadIdx.x;
        if (i >= c_own) break;
        const I x = own[i];
        const uint64_t lb = lower_bound(other, c_other, x);
        matched += lb < c_other && other[lb] == x;
    }
    const uint32_t sum = Reduce(tmp).Sum(matched);
    if (threadIdx.x == 0) scratch[blockIdx.x] = sum;
}

// Exclusive sums of counts[lo, hi) into sums[lo, hi) by the whole block; returns the total.
template <typename Scan>
__device__ uint64_t scan_range(typename Scan::TempStorage &tmp, const uint64_t *counts,
                               uint64_t *sums, uint64_t lo, uint64_t hi) {
    const uint64_t len = hi - lo;
    const uint64_t per = (len + SCAN_THREADS - 1) / SCAN_THREADS;
    const uint64_t b = lo + min(len, threadIdx.x * per), e = lo + min(len, threadIdx.x * per + per);
    unsigned long long mine = 0, before, all;
    for (uint64_t t = b; t < e; ++t) mine += counts[t];
    Scan(tmp).ExclusiveSum(mine, before, all);
    for (uint64_t t = b; t < e; ++t) {
        sums[t] = before;
        before += counts[t];
    }
    __syncthreads();  // tmp is reused by the next scan
    return all;
}

__global__ void __launch_bounds__(SCAN_THREADS)
    merge_scan_kernel(nvshmemrs_sparse_set a, nvshmemrs_sparse_set b, nvshmemrs_sparse_set out,
                      uint64_t tiles_a, uint64_t tiles_b, uint64_t *scratch) {
    wait_for_previous_kernel();
    using Scan = cub::BlockScan<unsigned long long, SCAN_THREADS>;
    __shared__ typename Scan::TempStorage tmp;
    const uint64_t tiles = tiles_a + tiles_b;
    const uint64_t common = scan_range<Scan>(tmp, scratch, scratch + tiles, 0, tiles_a);
    scan_range<Scan>(tmp, scratch, scratch + tiles, tiles_a, tiles);
    if (threadIdx.x == 0) *out.count = held(a) + held(b) - common;
}

template <typename T, typename I>
__global__ void __launch_bounds__(SPARSE_THREADS)
    merge_write_kernel(nvshmemrs_sparse_set a, nvshmemrs_sparse_set b, nvshmemrs_sparse_set out,
                       uint64_t tiles_a, uint64_t tiles_b, const uint64_t *scratch) {
    wait_for_previous_kernel();
    using Scan = cub::BlockScan<uint32_t, SPARSE_THREADS>;
    __shared__ typename Scan::TempStorage tmp;
    const MergeSide s = merge_side(a, b, tiles_a);
    const I *own = static_cast<const I *>(s.own.idx);
    const T *own_val = static_cast<const T *>(s.own.val);
    const I *other = static_cast<const I *>(s.other.idx);
    const T *other_val = static_cast<const T *>(s.other.val);
    I *out_idx = static_cast<I *>(out.idx);
    T *out_val = static_cast<T *>(out.val);
    const uint64_t c_own = held(s.own), c_other = held(s.other);
    // Own elements before this thread's that the other set also holds.
    uint64_t common = scratch[tiles_a + tiles_b + blockIdx.x];
    for (int r = 0; r < MERGE_ROUNDS; ++r) {
        const uint64_t i = s.tile * MERGE_TILE + (uint64_t)r * SPARSE_THREADS + threadIdx.x;
        I x{};
        uint64_t lb = 0;
        bool matched = false;
        if (i < c_own) {
            x = own[i];
            lb = lower_bound(other, c_other, x);
            matched = lb < c_other && other[lb] == x;
        }
        uint32_t before, all;
        Scan(tmp).ExclusiveSum((uint32_t)matched, before, all);
        if (i < c_own && (s.is_a || !matched)) {
            // i - (matched before i) >= 0: the place is at least lb, whatever the inputs.
            const uint64_t pos = i + lb - (common + before);
            if (pos < out.capacity) {
                out_idx[pos] = x;
                out_val[pos] = matched ? add_values(own_val[i], other_val[lb]) : own_val[i];
            }
        }
        common += all;
        __syncthreads();  // tmp is reused by the next round's scan
    }
}

struct MergeLaunch {
    nvshmemrs_sparse_merge_args args;
    cudaStream_t stream;

    template <typename T, typename I> cudaError_t run() const {
        const uint64_t tiles_a = merge_tiles(args.a.capacity);
        const uint64_t tiles_b = merge_tiles(args.b.capacity);
        if (args.scratch_words < merge_words(args.a.capacity, args.b.capacity)) {
            return cudaErrorInvalidValue;
        }
        if (tiles_a + tiles_b == 0) {
            return launch_pdl(sparse_set_count_kernel, 1, 1, stream, args.out.count,
                              (uint64_t)0);
        }
        if (tiles_a + tiles_b > 0x7FFFFFFFu) return cudaErrorInvalidValue;
        const int blocks = (int)(tiles_a + tiles_b);
        cudaError_t err = launch_pdl(merge_count_kernel<I>, blocks, SPARSE_THREADS, stream,
                                     args.a, args.b, tiles_a, args.scratch);
        if (err != cudaSuccess) return err;
        err = launch_pdl(merge_scan_kernel, 1, SCAN_THREADS, stream, args.a, args.b, args.out,
                         tiles_a, tiles_b, args.scratch);
        if (err != cudaSuccess) return err;
        return launch_pdl(merge_write_kernel<T, I>, blocks, SPARSE_THREADS, stream, args.a,
                          args.b, args.out, tiles_a, tiles_b, (const uint64_t *)args.scratch);
    }
};

template <typename T, typename I>
__global__ void __launch_bounds__(SPARSE_THREADS)
    scatter_add_kernel(nvshmemrs_sparse_set in, T *dense, uint64_t n) {
    wait_for_previous_kernel();
    const I *idx = static_cast<const I *>(in.idx);
    const T *val = static_cast<const T *>(in.val);
    const uint64_t c = held(in);
    for (uint64_t j = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; j < c;
         j += (uint64_t)gridDim.x * blockDim.x) {
        const I i = idx[j];
        if (i >= 0 && (uint64_t)i < n) atomic_add_value(dense + i, val[j]);
    }
}

struct ScatterLaunch {
    nvshmemrs_sparse_scatter_args args;
    cudaStream_t stream;

    template <typename T, typename I> cudaError_t run() const {
        if (args.input.capacity == 0) return cudaSuccess;
        int blocks = 0;
        cudaError_t err = sparse_grid(args.input.capacity, 8, &blocks);
        if (err != cudaSuccess) return err;
        return launch_pdl(scatter_add_kernel<T, I>, blocks, SPARSE_THREADS, stream, args.input,
                          static_cast<T *>(args.dense), args.n);
    }
};

}  // namespace

extern "C" uint64_t nvshmemrs_sparse_merge_scratch_words(uint64_t max_a, uint64_t max_b) {
    return merge_words(max_a, max_b);
}

extern "C" int nvshmemrs_sparse_merge(nvshmemrs_sparse_merge_args args, cudaStream_t stream) {
    MergeLaunch launch{args, stream};
    return by_value_index(args.dtype, args.index_type, launch);
}

extern "C" int nvshmemrs_sparse_scatter_add(nvshmemrs_sparse_scatter_args args,
                                            cudaStream_t stream) {
    ScatterLaunch launch{args, stream};
    return by_value_index(args.dtype, args.index_type, launch);
}
