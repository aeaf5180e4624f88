// Exact top-k by magnitude and threshold compaction (sparse/sparse.h), all in stream order:
//
//   init       state and histograms reset (one block)
//   radix      top-k only, one launch per 8-bit digit of the key (4 for f32, 2 for bf16): a
//              histogram of the digit over the keys that start with the digits found so far;
//              the last block to finish picks the digit holding the k-th largest key
//   count      per tile of TILE elements: keys above the threshold key, keys equal to it
//   scan       one block: exclusive sums of both counts over the tiles, and the output count
//   write      per tile: every key above, and equal keys while fewer than `take` came before
//              (the lowest indexes), at their place in index order
//
// A threshold whose selection overflows the output's capacity keeps the `capacity` largest
// magnitudes (ties to the lower index), never the lowest indexes: its scan, seeing more than
// `capacity`, marks the state overflowed with the top-`capacity` search ahead (prefix 0, take
// capacity), and the radix passes, a second count and a second scan, which return at once
// unless the state overflowed, find the capacity-th largest key before the write. Those keys
// are all at or above the threshold (at least `capacity` are), and the count stays the
// threshold's.
//
// After the radix passes the state holds the k-th largest key itself (prefix) and how many keys
// equal to it the top k holds (remaining): the k - remaining larger keys all belong to it. The
// threshold reuses count/scan/write with the threshold's key and take = all. No kernel needs a
// count from the host, so nothing is read back until the caller wants the result.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "abi.h"
#include "prims/pdl.cuh"
#include "sparse/sparse.cuh"
#include "sparse/sparse.h"

namespace {

// Elements per compaction tile: 256 threads x 16 bytes x (4 rounds of f32, 2 of bf16).
constexpr uint64_t TILE = 4096;
// Threads of the scan block.
constexpr int SCAN_THREADS = 512;
constexpr int RADIX_PASSES_MAX = 4;
constexpr uint64_t TAKE_ALL = ~(uint64_t)0;

// The workspace's first words.
struct SelectState {
    // Key bits found so far; after the last radix pass, the k-th largest key.
    uint32_t prefix;
    // A threshold selection found more keys than the output's capacity: the passes marked
    // "on overflow" run, and look for the top `capacity` instead.
    uint32_t overflow;
    // Keys still to take among those that start with `prefix`; after the last pass, how many
    // keys equal to the k-th largest the top k holds (the lowest indexes among them).
    uint64_t remaining;
    // Blocks finished, per radix pass (the last one picks the digit).
    unsigned done[RADIX_PASSES_MAX];
};
constexpr uint64_t STATE_WORDS = 8;
constexpr uint64_t HIST_WORDS = 256 * RADIX_PASSES_MAX;
static_assert(sizeof(SelectState) <= STATE_WORDS * 8, "state fits its words");

uint64_t tiles_of(uint64_t n) { return n == 0 ? 1 : (n + TILE - 1) / TILE; }

// Words: state, histograms, then per tile one count word (above << 32 | equal) and two
// exclusive sums (above, equal).
uint64_t scratch_words(uint64_t n) { return STATE_WORDS + HIST_WORDS + 3 * tiles_of(n); }

// The first key at or above threshold t (t <= 0: every key). A bf16 key is the top half of the
// f32 key of the same value, so the first bf16 key at or above t's f32 key is that key rounded
// up to a multiple of 2^16.
__host__ __device__ uint32_t threshold_key(float t, int key_bits) {
    uint32_t bits = 0;
    if (t > 0.0f) memcpy(&bits, &t, 4);
    return key_bits == 16 ? (bits + 0xFFFFu) >> 16 : bits;
}

// device_t: when not null, the threshold to read here (a NaN counts as +infinity) instead of
// the prefix given.
__global__ void select_init_kernel(uint64_t *scratch, uint32_t prefix, uint64_t remaining,
                                   const float *device_t, int key_bits) {
    wait_for_previous_kernel();
    if (device_t != nullptr) {
        const float t = *device_t;
        prefix = threshold_key(t != t ? __int_as_float(0x7F800000) : t, key_bits);
    }
    SelectState *st = reinterpret_cast<SelectState *>(scratch);
    unsigned long long *hist = reinterpret_cast<unsigned long long *>(scratch + STATE_WORDS);
    for (int i = threadIdx.x; i < (int)HIST_WORDS; i += blockDim.x) hist[i] = 0;
    if (threadIdx.x == 0) {
        st->prefix = prefix;
        st->remaining = remaining;
        st->overflow = 0;
        for (int p = 0; p < RADIX_PASSES_MAX; ++p) st->done[p] = 0;
    }
}

// Warp 0 of the last block of a radix pass: walks the 256 digit counts from the top and picks
// the digit whose bucket holds the remaining-th largest key. Each lane sums 8 buckets, a scan
// over the lanes finds the lane, and that lane walks its own 8.
__device__ void pick_digit(const unsigned long long *hist, SelectState *st, int shift) {
    if (threadIdx.x >= 32) return;
    const int lane = threadIdx.x;
    unsigned long long c[8], sum = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        c[j] = __ldcg(hist + 255 - (lane * 8 + j));
        sum += c[j];
    }
    unsigned long long incl = sum;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        unsigned long long t = __shfl_up_sync(0xFFFFFFFFu, incl, o);
        if (lane >= o) incl += t;
    }
    const unsigned long long before = incl - sum;
    const unsigned long long want = st->remaining;
    // want <= the keys counted here (it was at most the size of the bucket picked before), so
    // exactly one lane holds it.
    if (before < want && want <= incl) {
        unsigned long long acc = before;
        for (int j = 0; j < 8; ++j) {
            if (acc + c[j] >= want) {
                uint32_t digit = 255 - (lane * 8 + j);
                st->prefix |= digit << shift;
                st->remaining = want - acc;
                break;
            }
            acc += c[j];
        }
    }
}

// One radix pass: the histogram of key digit (key >> shift) & 255 over the keys whose bits
// above the digit equal the prefix found so far.
template <typename T>
__global__ void __launch_bounds__(SPARSE_THREADS)
    select_radix_kernel(const T *g, uint64_t n, uint64_t *scratch, int pass, int shift,
                        bool on_overflow) {
    wait_for_previous_kernel();
    constexpr int N = Run<T>::N;
    SelectState *st = reinterpret_cast<SelectState *>(scratch);
    if (on_overflow && st->overflow == 0) return;
    unsigned long long *hist =
        reinterpret_cast<unsigned long long *>(scratch + STATE_WORDS) + 256 * pass;
    __shared__ uint32_t h[256];
    __shared__ bool last;
    for (int b = threadIdx.x; b < 256; b += blockDim.x) h[b] = 0;
    __syncthreads();
    const uint32_t prefix = st->prefix;
    // The first pass has no digits above it (and a shift by 32 would be undefined).
    const uint32_t hi = shift + 8 >= Key<T>::BITS ? 0u : (0xFFFFFFFFu << (shift + 8));
    const bool aligned = aligned16(g);
    const int lane = threadIdx.x & 31;
    const uint64_t runs = (n + N - 1) / N;
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    // The loop bound is the warp's first run, so all 32 lanes take the same turns and the
    // match below sees the whole warp. Lanes with the same digit add once, together: gradients
    // crowd into few exponents, and same-address shared atomics would serialise.
    for (uint64_t w = (uint64_t)blockIdx.x * blockDim.x + (threadIdx.x & ~31); w < runs;
         w += stride) {
        T x[N];
        const int c = load_run(g, n, (w + lane) * N, aligned, x);
#pragma unroll
        for (int j = 0; j < N; ++j) {
            uint32_t d = 256;  // no bucket
            if (j < c) {
                const uint32_t key = Key<T>::of(x[j]);
                if ((key & hi) == (prefix & hi)) d = (key >> shift) & 255;
            }
            const unsigned peers = __match_any_sync(0xFFFFFFFFu, d);
            if (d != 256 && lane == __ffs(peers) - 1) atomicAdd(&h[d], (uint32_t)__popc(peers));
        }
    }
    __syncthreads();
    for (int b = threadIdx.x; b < 256; b += blockDim.x) {
        if (h[b] != 0) atomicAdd(&hist[b], (unsigned long long)h[b]);
    }
    // The last block to arrive sees every block's counts (threadFenceReduction pattern).
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(&st->done[pass], 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    pick_digit(hist, st, shift);
}

// Per tile: keys above the threshold key, keys equal to it.
template <typename T>
__global__ void __launch_bounds__(SPARSE_THREADS)
    select_count_kernel(const T *g, uint64_t n, uint64_t *scratch, bool on_overflow) {
    wait_for_previous_kernel();
    constexpr int N = Run<T>::N;
    constexpr int ROUNDS = TILE / (SPARSE_THREADS * N);
    using Reduce = cub::BlockReduce<uint32_t, SPARSE_THREADS>;
    __shared__ typename Reduce::TempStorage tmp;
    const SelectState *st = reinterpret_cast<const SelectState *>(scratch);
    if (on_overflow && st->overflow == 0) return;
    uint64_t *counts = scratch + STATE_WORDS + HIST_WORDS;
    const uint32_t thr = st->prefix;
    const bool aligned = aligned16(g);
    const uint64_t base = (uint64_t)blockIdx.x * TILE;
    uint32_t above = 0, equal = 0;
#pragma unroll
    for (int r = 0; r < ROUNDS; ++r) {
        T x[N];
        const int c = load_run(g, n, base + ((uint64_t)r * SPARSE_THREADS + threadIdx.x) * N,
                               aligned, x);
#pragma unroll
        for (int j = 0; j < N; ++j) {
            if (j < c) {
                const uint32_t key = Key<T>::of(x[j]);
                above += key > thr;
                equal += key == thr;
            }
        }
    }
    // A tile's counts are at most TILE (< 2^16) each: one sum of both.
    const uint32_t sum = Reduce(tmp).Sum(above << 16 | equal);
    if (threadIdx.x == 0) counts[blockIdx.x] = (uint64_t)(sum >> 16) << 32 | (sum & 0xFFFFu);
}

// How a scan runs: a top-k's; a threshold's first (the output count, and the overflow check
// against the capacity); the second after an overflow (no output count: the threshold's stays).
enum ScanMode { SCAN_TOPK = 0, SCAN_THRESHOLD = 1, SCAN_ON_OVERFLOW = 2 };

// One block: the exclusive sums of the tiles' counts, and the output count (every key above,
// and at most `take` of the equal ones).
__global__ void __launch_bounds__(SCAN_THREADS)
    select_scan_kernel(uint64_t *scratch, uint64_t tiles, uint64_t *out_count, int mode,
                       uint64_t capacity) {
    wait_for_previous_kernel();
    using Scan = cub::BlockScan<unsigned long long, SCAN_THREADS>;
    __shared__ typename Scan::TempStorage tmp;
    SelectState *st = reinterpret_cast<SelectState *>(scratch);
    if (mode == SCAN_ON_OVERFLOW && st->overflow == 0) return;
    const uint64_t *counts = scratch + STATE_WORDS + HIST_WORDS;
    uint64_t *sums = scratch + STATE_WORDS + HIST_WORDS + tiles;
    // Each thread a contiguous share of the tiles.
    const uint64_t per = (tiles + SCAN_THREADS - 1) / SCAN_THREADS;
    const uint64_t lo = min(tiles, threadIdx.x * per), hi = min(tiles, lo + per);
    unsigned long long above = 0, equal = 0;
    for (uint64_t t = lo; t < hi; ++t) {
        above += counts[t] >> 32;
        equal += counts[t] & 0xFFFFFFFFu;
    }
    unsigned long long above_before, equal_before, above_all, equal_all;
    Scan(tmp).ExclusiveSum(above, above_before, above_all);
    __syncthreads();
    Scan(tmp).ExclusiveSum(equal, equal_before, equal_all);
    for (uint64_t t = lo; t < hi; ++t) {
        sums[2 * t] = above_before;
        sums[2 * t + 1] = equal_before;
        above_before += counts[t] >> 32;
        equal_before += counts[t] & 0xFFFFFFFFu;
    }
    if (threadIdx.x == 0 && mode != SCAN_ON_OVERFLOW) {
        const unsigned long long take = st->remaining;
        const unsigned long long total = above_all + (equal_all < take ? equal_all : take);
        *out_count = total;
        if (mode == SCAN_THRESHOLD && capacity > 0 && total > capacity) {
            // The top `capacity` instead: the radix passes start from no digits.
            st->overflow = 1;
            st->prefix = 0;
            st->remaining = capacity;
        }
    }
}

// Per tile, in index order: a key above the threshold key goes to (keys above before it) +
// min(equal keys before it, take); an equal key with fewer than `take` equal ones before it to
// (keys above before it) + (equal keys before it). Positions at or past capacity are dropped.
template <typename T, typename I>
__global__ void __launch_bounds__(SPARSE_THREADS)
    select_write_kernel(const T *g, uint64_t n, const uint64_t *scratch, uint64_t tiles,
                        I *out_idx, T *out_val, uint64_t capacity) {
    wait_for_previous_kernel();
    constexpr int N = Run<T>::N;
    constexpr int ROUNDS = TILE / (SPARSE_THREADS * N);
    using Scan = cub::BlockScan<uint32_t, SPARSE_THREADS>;
    __shared__ typename Scan::TempStorage tmp;
    const SelectState *st = reinterpret_cast<const SelectState *>(scratch);
    const uint64_t *sums = scratch + STATE_WORDS + HIST_WORDS + tiles;
    const uint32_t thr = st->prefix;
    const uint64_t take = st->remaining;
    const bool aligned = aligned16(g);
    const uint64_t base = (uint64_t)blockIdx.x * TILE;
    uint64_t above_run = sums[2 * blockIdx.x], equal_run = sums[2 * blockIdx.x + 1];
    // Round r covers SPARSE_THREADS runs in a row; thread t holds run t of them, so a block
    // scan over the threads' counts orders the round's elements by index.
    for (int r = 0; r < ROUNDS; ++r) {
        const uint64_t i0 = base + ((uint64_t)r * SPARSE_THREADS + threadIdx.x) * N;
        T x[N];
        const int c = load_run(g, n, i0, aligned, x);
        uint32_t key[N], above = 0, equal = 0;
#pragma unroll
        for (int j = 0; j < N; ++j) {
            key[j] = j < c ? Key<T>::of(x[j]) : 0;
            above += j < c && key[j] > thr;
            equal += j < c && key[j] == thr;
        }
        uint32_t before, all;
        Scan(tmp).ExclusiveSum(above << 16 | equal, before, all);
        uint64_t a = above_run + (before >> 16), e = equal_run + (before & 0xFFFFu);
#pragma unroll
        for (int j = 0; j < N; ++j) {
            if (j >= c) continue;
            uint64_t pos = ~(uint64_t)0;
            if (key[j] > thr) {
                pos = a + (e < take ? e : take);
                ++a;
            } else if (key[j] == thr) {
                if (e < take) pos = a + e;
                ++e;
            }
            if (pos < capacity) {
                out_idx[pos] = (I)(i0 + j);
                out_val[pos] = x[j];
            }
        }
        above_run += all >> 16;
        equal_run += all & 0xFFFFu;
        __syncthreads();  // tmp is reused by the next round's scan
    }
}

struct SelectLaunch {
    nvshmemrs_sparse_select_args args;
    cudaStream_t stream;
    bool topk;

    template <typename T, typename I> cudaError_t run() const {
        const T *g = static_cast<const T *>(args.grad);
        const uint64_t n = args.n;
        uint64_t *scratch = args.scratch;
        uint64_t *count = args.out.count;
        if (args.scratch_words < scratch_words(n)) return cudaErrorInvalidValue;
        if (n == 0 || (topk && args.k == 0)) {
            return launch_pdl(sparse_set_count_kernel, 1, 1, stream, count, (uint64_t)0);
        }
        const uint64_t tiles = tiles_of(n);
        if (tiles > 0x7FFFFFFFu) return cudaErrorInvalidValue;
        uint32_t prefix = 0;
        uint64_t take = TAKE_ALL;
        if (!topk) {
            float t = args.threshold;
            if (t != t && args.device_threshold == nullptr) return cudaErrorInvalidValue;
            // |g| >= t in key terms: every key from t's up.
            if (args.device_threshold == nullptr) prefix = threshold_key(t, Key<T>::BITS);
        } else if (args.k < n) {
            // Radix passes find the key; k >= n takes every element (prefix 0, take all).
            take = args.k;
        }
        const float *device_t = topk ? nullptr : args.device_threshold;
        cudaError_t err = launch_pdl(select_init_kernel, 1, SPARSE_THREADS, stream, scratch,
                                     prefix, take, device_t, Key<T>::BITS);
        if (err != cudaSuccess) return err;
        int blocks = 0;
        err = sparse_grid((n + Run<T>::N - 1) / Run<T>::N, 8, &blocks);
        if (err != cudaSuccess) return err;
        // The radix passes: a top-k's always (below n), a threshold's only on overflow.
        auto radix = [&](bool on_overflow) {
            cudaError_t e = cudaSuccess;
            for (int pass = 0; e == cudaSuccess && pass < Key<T>::BITS / 8; ++pass) {
                e = launch_pdl(select_radix_kernel<T>, blocks, SPARSE_THREADS, stream, g, n,
                               scratch, pass, Key<T>::BITS - 8 * (pass + 1), on_overflow);
            }
            return e;
        };
        if (topk && args.k < n) err = radix(false);
        if (err != cudaSuccess) return err;
        err = launch_pdl(select_count_kernel<T>, (int)tiles, SPARSE_THREADS, stream, g, n,
                         scratch, false);
        if (err != cudaSuccess) return err;
        err = launch_pdl(select_scan_kernel, 1, SCAN_THREADS, stream, scratch, tiles, count,
                         (int)(topk ? SCAN_TOPK : SCAN_THRESHOLD), args.out.capacity);
        if (err != cudaSuccess) return err;
        if (!topk) {
            err = radix(true);
            if (err == cudaSuccess) {
                err = launch_pdl(select_count_kernel<T>, (int)tiles, SPARSE_THREADS, stream, g,
                                 n, scratch, true);
            }
            if (err == cudaSuccess) {
                err = launch_pdl(select_scan_kernel, 1, SCAN_THREADS, stream, scratch, tiles,
                                 count, (int)SCAN_ON_OVERFLOW, args.out.capacity);
            }
            if (err != cudaSuccess) return err;
        }
        return launch_pdl(select_write_kernel<T, I>, (int)tiles, SPARSE_THREADS, stream, g, n,
                          (const uint64_t *)scratch, tiles, static_cast<I *>(args.out.idx),
                          static_cast<T *>(args.out.val), args.out.capacity);
    }
};

}  // namespace

extern "C" uint64_t nvshmemrs_sparse_select_scratch_words(uint64_t max_n) {
    return scratch_words(max_n);
}

extern "C" int nvshmemrs_sparse_topk(nvshmemrs_sparse_select_args args, cudaStream_t stream) {
    SelectLaunch launch{args, stream, true};
    return by_value_index(args.dtype, args.index_type, launch);
}

extern "C" int nvshmemrs_sparse_threshold(nvshmemrs_sparse_select_args args,
                                          cudaStream_t stream) {
    SelectLaunch launch{args, stream, false};
    return by_value_index(args.dtype, args.index_type, launch);
}
