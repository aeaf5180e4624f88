// Exact top-k by magnitude and threshold compaction (sparse/sparse.h), all in stream order.
// Only two kernels read the whole gradient; the rest work on the few elements they keep:
//
//   init       state and histograms reset (one block)
//   bucket     top-k only: a histogram of each key's top 12 bits (2048 buckets: the sign bit
//              is clear), BATCH 16-byte loads a thread in flight, plain shared atomics; the
//              last block to finish picks the bucket holding the k-th largest
//   filter     per segment of SEG elements (one warp each, all its loads in flight): the
//              element indexes of every key at or above the bucket's lowest key (or the
//              threshold's key), in index order, into a compact array at an offset each block
//              reserves with one atomic add
//   radix      over the compact array only, one launch per remaining digit (12 then 8 bits for
//              f32, 8 for bf16): the histogram of the digit among keys that match the bits
//              found so far; the last block picks the digit holding the k-th largest
//   count      over the compact array: per segment, keys above the threshold key and keys
//              equal to it (one atomic add per segment and warp)
//   scan       two levels (blocks of 2048 segments, then one block over the blocks): exclusive
//              sums of both counts over the segments, and the output count
//   write      per segment (one warp): every staged key above, and equal keys while fewer than
//              `take` came before (the lowest indexes), at their place in index order
//
// The compact array costs 4 bytes per element of workspace (8 past 2^32 elements), so no data
// can overflow it (every element may be staged) and no path falls back to full passes. Below
// a few million elements it is slower than full passes were: each search step has a fixed
// cost of several microseconds (its histograms and the last block's pick), which one
// cooperative launch for all of them did not remove (docs/measured.md, fifteenth run).
//
// A threshold whose selection overflows the output's capacity keeps the `capacity` largest
// magnitudes (ties to the lower index), never the lowest indexes: its scan, seeing more than
// `capacity`, marks the state overflowed with the top-`capacity` search ahead (prefix 0, take
// capacity), and every step of the search over the staged keys, a second count and a second
// scan, which return at once unless the state overflowed, find the capacity-th largest key
// before the write. Those keys are all at or above the threshold (at least `capacity` are),
// and the count stays the threshold's.
//
// After the search the state holds the k-th largest key itself (prefix) and how many keys
// equal to it the top k holds (remaining): the k - remaining larger keys all belong to it. The
// threshold reuses filter/count/scan/write with the threshold's key and take = all. No kernel
// needs a count from the host, so nothing is read back until the caller wants the result.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include <cub/block/block_scan.cuh>

#include "abi.h"
#include "prims/pdl.cuh"
#include "sparse/sparse.cuh"
#include "sparse/sparse.h"

namespace {

// Elements per segment: one warp's share of the filter, 32 lanes x 16 bytes x (8 rounds of
// f32, 4 of bf16), all loads in flight at once.
constexpr uint64_t SEG = 1024;
constexpr int WARPS = SPARSE_THREADS / 32;
// Threads of the scan block.
constexpr int SCAN_THREADS = 512;
// 16-byte runs each thread of a streaming pass loads before it counts them.
constexpr int BATCH = 4;
// The search's digits from the top: the bucket's 12 bits (11 counted: the sign's is clear),
// then 12, then 8. f32: bits 31..20, 19..8, 7..0; bf16: 15..4, then 7..0, whose top four are
// decided already (the match on the decided bits keeps them to the value found).
constexpr int STEPS_MAX = 3;
constexpr int BINS_MAX = 4096;
constexpr int BUCKETS = 2048;
struct Step {
    int shift;
    int bits;
};
__host__ __device__ constexpr int steps_of(int key_bits) { return key_bits == 32 ? 3 : 2; }
__host__ __device__ constexpr Step step_of(int key_bits, int i) {
    return i == 0 ? Step{key_bits - 12, 12} : (key_bits == 32 && i == 1) ? Step{8, 12} : Step{0, 8};
}
// The key bits steps before step i decided.
__host__ __device__ constexpr uint32_t decided_before(int key_bits, int i) {
    return i == 0 ? 0u : ~((1u << step_of(key_bits, i - 1).shift) - 1);
}
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
    // Keys the filter staged (the length of the compact array).
    unsigned long long staged_total;
    // Blocks finished, per step (the last one picks the digit).
    unsigned done[STEPS_MAX];
};
constexpr uint64_t STATE_WORDS = 8;
// One histogram per step.
constexpr uint64_t HIST_WORDS = (uint64_t)BINS_MAX * STEPS_MAX;
static_assert(sizeof(SelectState) <= STATE_WORDS * 8, "state fits its words");
// Segments per block of the first scan level.
constexpr uint64_t SCAN_SEGS = 4 * SCAN_THREADS;

uint64_t segs_of(uint64_t n) { return n == 0 ? 1 : (n + SEG - 1) / SEG; }
uint64_t scan_blocks_of(uint64_t segs) { return (segs + SCAN_SEGS - 1) / SCAN_SEGS; }
// The staged keys' element indexes: 32 bits wherever they fit.
bool wide_indexes(uint64_t n) { return n > 0xFFFFFFFFull; }

// Words: state, histograms; per segment a count word (above << 32 | equal), two exclusive sums
// inside its scan block (above, equal), the staged keys' offset in the compact array and their
// number; per scan block its totals and exclusive sums (two words each); then the compact
// array, one element index per staged key (every element may be staged).
uint64_t scratch_words(uint64_t n) {
    const uint64_t segs = segs_of(n);
    const uint64_t index_bytes = wide_indexes(n) ? 8 : 4;
    return STATE_WORDS + HIST_WORDS + 5 * segs + 4 * scan_blocks_of(segs) +
           (n * index_bytes + 7) / 8;
}

// The workspace's per-segment and per-scan-block parts, and the compact array.
struct Segments {
    uint64_t *counts;
    uint64_t *sums;
    uint64_t *offset;
    uint64_t *staged;
    uint64_t *block_totals;
    uint64_t *block_sums;
    void *compact;
    __device__ Segments(uint64_t *scratch, uint64_t segs)
        : counts(scratch + STATE_WORDS + HIST_WORDS), sums(counts + segs),
          offset(sums + 2 * segs), staged(offset + segs), block_totals(staged + segs),
          block_sums(block_totals + 2 * scan_blocks(segs)),
          compact(block_sums + 2 * scan_blocks(segs)) {}
    static __device__ uint64_t scan_blocks(uint64_t segs) {
        return (segs + SCAN_SEGS - 1) / SCAN_SEGS;
    }
};

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
        st->staged_total = 0;
        for (int p = 0; p < STEPS_MAX; ++p) st->done[p] = 0;
    }
}

// Adds a block's shared histogram into the global one; true in the last block to do so, which
// then sees every block's counts (threadFenceReduction pattern).
__device__ bool flush_histogram(const uint32_t *h, unsigned long long *hist, int bins,
                                unsigned *done) {
    __shared__ bool last;
    __syncthreads();
    for (int b = threadIdx.x; b < bins; b += blockDim.x) {
        if (h[b] != 0) atomicAdd(&hist[b], (unsigned long long)h[b]);
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(done, 1u) == gridDim.x - 1;
    __syncthreads();
    if (last) __threadfence();
    return last;
}

// The last block of a step: walks the counts from the top bin down and picks the bin holding
// the remaining-th largest key; its digit joins the prefix. Each thread sums BINS / threads
// bins, a block scan finds the thread, and that thread walks its own.
template <int BINS>
__device__ void pick_bin(const unsigned long long *hist, SelectState *st, int shift) {
    using Scan = cub::BlockScan<unsigned long long, SPARSE_THREADS>;
    __shared__ typename Scan::TempStorage tmp;
    constexpr int PER = BINS / SPARSE_THREADS;
    unsigned long long c[PER], sum = 0;
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        c[j] = __ldcg(hist + BINS - 1 - (threadIdx.x * PER + j));
        sum += c[j];
    }
    // Read before the scan, whose barriers order it before the one write below.
    const unsigned long long want = st->remaining;
    unsigned long long before;
    Scan(tmp).ExclusiveSum(sum, before);
    // want <= the keys counted here (at most the bin picked before), so exactly one thread
    // holds it.
    if (before < want && want <= before + sum) {
        unsigned long long acc = before;
        for (int j = 0; j < PER; ++j) {
            if (acc + c[j] >= want) {
                st->prefix |= (uint32_t)(BINS - 1 - (threadIdx.x * PER + j)) << shift;
                st->remaining = want - acc;
                break;
            }
            acc += c[j];
        }
    }
}

// The bucket pass (top-k): the histogram of every key's top 12 bits (step 0); the last block
// picks the bucket holding the k-th largest key, whose lowest key becomes the filter's bound.
// Plain shared atomics: the 2048 buckets spread the adds enough that matching equal buckets
// across a warp first (__match_any_sync) cost three times more than it saved.
template <typename T>
__global__ void __launch_bounds__(SPARSE_THREADS)
    select_bucket_kernel(const T *g, uint64_t n, uint64_t *scratch) {
    wait_for_previous_kernel();
    constexpr int N = Run<T>::N;
    constexpr int SHIFT = step_of(Key<T>::BITS, 0).shift;
    __shared__ uint32_t h[BUCKETS];
    SelectState *st = reinterpret_cast<SelectState *>(scratch);
    unsigned long long *hist = reinterpret_cast<unsigned long long *>(scratch + STATE_WORDS);
    for (int b = threadIdx.x; b < BUCKETS; b += blockDim.x) h[b] = 0;
    __syncthreads();
    const bool aligned = aligned16(g);
    const uint64_t runs = (n + N - 1) / N;
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t r = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; r < runs;
         r += BATCH * stride) {
        T x[BATCH][N];
        int c[BATCH];
#pragma unroll
        for (int u = 0; u < BATCH; ++u) c[u] = load_run(g, n, (r + u * stride) * N, aligned, x[u]);
#pragma unroll
        for (int u = 0; u < BATCH; ++u) {
#pragma unroll
            for (int j = 0; j < N; ++j) {
                if (j < c[u]) atomicAdd(&h[Key<T>::of(x[u][j]) >> SHIFT], 1u);
            }
        }
    }
    if (flush_histogram(h, hist, BUCKETS, &st->done[0])) pick_bin<BUCKETS>(hist, st, SHIFT);
}

// Per segment (one warp): the element indexes of the keys at or above `prefix`, in index
// order, into the compact array at an offset the block reserves with one atomic add; the
// segment's offset and count, and its count word zeroed for the count pass.
template <typename T, typename S>
__global__ void __launch_bounds__(SPARSE_THREADS)
    select_filter_kernel(const T *g, uint64_t n, uint64_t *scratch, uint64_t segs) {
    wait_for_previous_kernel();
    constexpr int N = Run<T>::N;
    constexpr int ROUNDS = SEG / (32 * N);
    __shared__ uint32_t warp_count[WARPS];
    __shared__ unsigned long long block_offset;
    SelectState *st = reinterpret_cast<SelectState *>(scratch);
    const uint32_t lo = st->prefix;
    Segments s(scratch, segs);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint64_t seg = (uint64_t)blockIdx.x * WARPS + warp;
    const uint64_t base = seg * SEG;
    const bool aligned = aligned16(g);
    // Every round's load first, so they are all in flight together.
    T x[ROUNDS][N];
    uint32_t keep[ROUNDS], incl[ROUNDS], total[ROUNDS];
    uint32_t m = 0;
#pragma unroll
    for (int r = 0; r < ROUNDS; ++r) {
        const int c = seg < segs ? load_run(g, n, base + (uint64_t)(r * 32 + lane) * N, aligned,
                                            x[r])
                                 : 0;
        keep[r] = 0;
#pragma unroll
        for (int j = 0; j < N; ++j) {
            if (j < c && Key<T>::of(x[r][j]) >= lo) keep[r] |= 1u << j;
        }
    }
#pragma unroll
    for (int r = 0; r < ROUNDS; ++r) {
        const uint32_t mine = __popc(keep[r]);
        incl[r] = mine;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const uint32_t t = __shfl_up_sync(0xFFFFFFFFu, incl[r], o);
            if (lane >= o) incl[r] += t;
        }
        total[r] = __shfl_sync(0xFFFFFFFFu, incl[r], 31);
        m += total[r];
    }
    if (lane == 0) warp_count[warp] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long all = 0;
        for (int w = 0; w < WARPS; ++w) all += warp_count[w];
        block_offset = all == 0 ? 0 : atomicAdd(&st->staged_total, all);
    }
    __syncthreads();
    if (seg >= segs) return;
    uint64_t at = block_offset;
    for (int w = 0; w < warp; ++w) at += warp_count[w];
    if (lane == 0) {
        s.offset[seg] = at;
        s.staged[seg] = m;
        s.counts[seg] = 0;
    }
    S *compact = static_cast<S *>(s.compact);
#pragma unroll
    for (int r = 0; r < ROUNDS; ++r) {
        uint64_t pos = at + incl[r] - __popc(keep[r]);
        const uint64_t first = base + (uint64_t)(r * 32 + lane) * N;
#pragma unroll
        for (int j = 0; j < N; ++j) {
            if (keep[r] >> j & 1) compact[pos++] = (S)(first + j);
        }
        at += total[r];
    }
}

// One step of the search over the staged keys: the histogram of digit (key >> shift) over
// those whose `decided` bits equal the prefix found so far. Grid-stride over the compact
// array, BATCH keys a thread in flight, so the gathers stream and few blocks add histograms.
template <typename T, typename S, int BINS>
__global__ void __launch_bounds__(SPARSE_THREADS)
    select_radix_kernel(const T *g, uint64_t *scratch, uint64_t segs, int step, int shift,
                        uint32_t decided, bool on_overflow) {
    wait_for_previous_kernel();
    SelectState *st = reinterpret_cast<SelectState *>(scratch);
    if (on_overflow && st->overflow == 0) return;
    unsigned long long *hist =
        reinterpret_cast<unsigned long long *>(scratch + STATE_WORDS) + BINS_MAX * step;
    __shared__ uint32_t h[BINS];
    for (int b = threadIdx.x; b < BINS; b += blockDim.x) h[b] = 0;
    __syncthreads();
    const uint32_t prefix = st->prefix & decided;
    const uint64_t total = st->staged_total;
    const S *compact = static_cast<const S *>(Segments(scratch, segs).compact);
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t w = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; w < total;
         w += BATCH * stride) {
        uint64_t at[BATCH];
#pragma unroll
        for (int u = 0; u < BATCH; ++u) {
            at[u] = w + u * stride < total ? (uint64_t)compact[w + u * stride] : ~(uint64_t)0;
        }
#pragma unroll
        for (int u = 0; u < BATCH; ++u) {
            if (at[u] != ~(uint64_t)0) {
                const uint32_t key = Key<T>::of(g[at[u]]);
                if ((key & decided) == prefix) atomicAdd(&h[(key >> shift) & (BINS - 1)], 1u);
            }
        }
    }
    if (flush_histogram(h, hist, BINS, &st->done[step])) pick_bin<BINS>(hist, st, shift);
}

// Over the staged keys: per segment, keys above the threshold key and keys equal to it (the
// lanes of a warp with keys of one segment add once, together).
template <typename T, typename S>
__global__ void __launch_bounds__(SPARSE_THREADS)
    select_count_kernel(const T *g, uint64_t *scratch, uint64_t segs, bool on_overflow) {
    wait_for_previous_kernel();
    const SelectState *st = reinterpret_cast<const SelectState *>(scratch);
    if (on_overflow && st->overflow == 0) return;
    const Segments s(scratch, segs);
    const uint32_t thr = st->prefix;
    const uint64_t total = st->staged_total;
    const S *compact = static_cast<const S *>(s.compact);
    const int lane = threadIdx.x & 31;
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t w = (uint64_t)blockIdx.x * blockDim.x + (threadIdx.x & ~31); w < total;
         w += stride) {
        const bool here = w + lane < total;
        uint64_t seg = ~(uint64_t)0;
        uint32_t key = 0;
        if (here) {
            const uint64_t i = compact[w + lane];
            seg = i / SEG;
            key = Key<T>::of(g[i]);
        }
        const uint32_t above = __ballot_sync(0xFFFFFFFFu, here && key > thr);
        const uint32_t equal = __ballot_sync(0xFFFFFFFFu, here && key == thr);
        const unsigned peers = __match_any_sync(0xFFFFFFFFu, seg);
        if (here && lane == __ffs(peers) - 1) {
            const uint64_t add =
                (uint64_t)__popc(above & peers) << 32 | (uint64_t)__popc(equal & peers);
            if (add != 0) atomicAdd((unsigned long long *)&s.counts[seg], add);
        }
    }
}

// How a scan runs: a top-k's; a threshold's first (the output count, and the overflow check
// against the capacity); the second after an overflow (no output count: the threshold's stays).
enum ScanMode { SCAN_TOPK = 0, SCAN_THRESHOLD = 1, SCAN_ON_OVERFLOW = 2 };

// First scan level, a block per SCAN_SEGS segments: the exclusive sums of the segments' counts
// inside the block, and the block's totals.
__global__ void __launch_bounds__(SCAN_THREADS)
    select_scan_blocks_kernel(uint64_t *scratch, uint64_t segs, int mode) {
    wait_for_previous_kernel();
    using Scan = cub::BlockScan<unsigned long long, SCAN_THREADS>;
    __shared__ typename Scan::TempStorage tmp;
    const SelectState *st = reinterpret_cast<const SelectState *>(scratch);
    if (mode == SCAN_ON_OVERFLOW && st->overflow == 0) return;
    const Segments s(scratch, segs);
    constexpr uint64_t PER = SCAN_SEGS / SCAN_THREADS;
    const uint64_t lo = min(segs, blockIdx.x * SCAN_SEGS + threadIdx.x * PER);
    const uint64_t hi = min(segs, lo + PER);
    unsigned long long above = 0, equal = 0;
    for (uint64_t t = lo; t < hi; ++t) {
        above += s.counts[t] >> 32;
        equal += s.counts[t] & 0xFFFFFFFFu;
    }
    unsigned long long above_before, equal_before, above_all, equal_all;
    Scan(tmp).ExclusiveSum(above, above_before, above_all);
    __syncthreads();
    Scan(tmp).ExclusiveSum(equal, equal_before, equal_all);
    for (uint64_t t = lo; t < hi; ++t) {
        s.sums[2 * t] = above_before;
        s.sums[2 * t + 1] = equal_before;
        above_before += s.counts[t] >> 32;
        equal_before += s.counts[t] & 0xFFFFFFFFu;
    }
    if (threadIdx.x == 0) {
        s.block_totals[2 * blockIdx.x] = above_all;
        s.block_totals[2 * blockIdx.x + 1] = equal_all;
    }
}

// Second scan level, one block: the exclusive sums of the blocks' totals, and the output count
// (every key above, and at most `take` of the equal ones). A threshold's first scan, seeing
// more than the capacity, sets up the top-`capacity` search and clears the counts for it.
__global__ void __launch_bounds__(SCAN_THREADS)
    select_scan_top_kernel(uint64_t *scratch, uint64_t segs, uint64_t *out_count, int mode,
                           uint64_t capacity) {
    wait_for_previous_kernel();
    using Scan = cub::BlockScan<unsigned long long, SCAN_THREADS>;
    __shared__ typename Scan::TempStorage tmp;
    __shared__ bool overflowed;
    SelectState *st = reinterpret_cast<SelectState *>(scratch);
    if (mode == SCAN_ON_OVERFLOW && st->overflow == 0) return;
    const Segments s(scratch, segs);
    const uint64_t blocks = Segments::scan_blocks(segs);
    const uint64_t per = (blocks + SCAN_THREADS - 1) / SCAN_THREADS;
    const uint64_t lo = min(blocks, threadIdx.x * per), hi = min(blocks, lo + per);
    unsigned long long above = 0, equal = 0;
    for (uint64_t b = lo; b < hi; ++b) {
        above += s.block_totals[2 * b];
        equal += s.block_totals[2 * b + 1];
    }
    unsigned long long above_before, equal_before, above_all, equal_all;
    Scan(tmp).ExclusiveSum(above, above_before, above_all);
    __syncthreads();
    Scan(tmp).ExclusiveSum(equal, equal_before, equal_all);
    for (uint64_t b = lo; b < hi; ++b) {
        s.block_sums[2 * b] = above_before;
        s.block_sums[2 * b + 1] = equal_before;
        above_before += s.block_totals[2 * b];
        equal_before += s.block_totals[2 * b + 1];
    }
    if (threadIdx.x == 0) {
        overflowed = false;
        if (mode != SCAN_ON_OVERFLOW) {
            const unsigned long long take = st->remaining;
            const unsigned long long all = above_all + (equal_all < take ? equal_all : take);
            *out_count = all;
            if (mode == SCAN_THRESHOLD && capacity > 0 && all > capacity) {
                // The top `capacity` instead: the radix passes start from no digits.
                st->overflow = 1;
                st->prefix = 0;
                st->remaining = capacity;
                overflowed = true;
            }
        }
    }
    __syncthreads();
    if (overflowed) {
        for (uint64_t t = threadIdx.x; t < segs; t += SCAN_THREADS) s.counts[t] = 0;
    }
}

// Per segment (one warp), in index order: a staged key above the threshold key goes to (keys
// above before it) + min(equal keys before it, take); an equal key with fewer than `take`
// equal ones before it to (keys above before it) + (equal keys before it). Positions at or
// past capacity are dropped.
template <typename T, typename I, typename S>
__global__ void __launch_bounds__(SPARSE_THREADS)
    select_write_kernel(const T *g, uint64_t *scratch, uint64_t segs, I *out_idx, T *out_val,
                        uint64_t capacity) {
    wait_for_previous_kernel();
    const uint64_t seg = (uint64_t)blockIdx.x * WARPS + (threadIdx.x >> 5);
    if (seg >= segs) return;
    const SelectState *st = reinterpret_cast<const SelectState *>(scratch);
    const Segments s(scratch, segs);
    const uint32_t thr = st->prefix;
    const uint64_t take = st->remaining;
    const int lane = threadIdx.x & 31;
    const uint32_t below = (1u << lane) - 1;
    const uint32_t m = (uint32_t)s.staged[seg];
    const S *compact = static_cast<const S *>(s.compact) + s.offset[seg];
    const uint64_t block = seg / SCAN_SEGS;
    uint64_t a = s.block_sums[2 * block] + s.sums[2 * seg];
    uint64_t e = s.block_sums[2 * block + 1] + s.sums[2 * seg + 1];
    for (uint32_t i = 0; i < m; i += 32) {
        const bool here = i + lane < m;
        const uint64_t at = here ? (uint64_t)compact[i + lane] : seg * SEG;
        const T x = g[at];
        const uint32_t key = here ? Key<T>::of(x) : 0;
        const bool above = here && key > thr, equal = here && key == thr;
        const uint32_t above_mask = __ballot_sync(0xFFFFFFFFu, above);
        const uint32_t equal_mask = __ballot_sync(0xFFFFFFFFu, equal);
        const uint64_t ab = a + __popc(above_mask & below), eb = e + __popc(equal_mask & below);
        uint64_t pos = ~(uint64_t)0;
        if (above) {
            pos = ab + (eb < take ? eb : take);
        } else if (equal && eb < take) {
            pos = ab + eb;
        }
        if (pos < capacity) {
            out_idx[pos] = (I)at;
            out_val[pos] = x;
        }
        a += __popc(above_mask);
        e += __popc(equal_mask);
    }
}

struct SelectLaunch {
    nvshmemrs_sparse_select_args args;
    cudaStream_t stream;
    bool topk;

    template <typename T, typename I> cudaError_t run() const {
        const uint64_t n = args.n;
        if (args.scratch_words < scratch_words(n)) return cudaErrorInvalidValue;
        if (n == 0 || (topk && args.k == 0)) {
            return launch_pdl(sparse_set_count_kernel, 1, 1, stream, args.out.count,
                              (uint64_t)0);
        }
        return wide_indexes(n) ? go<T, I, uint64_t>() : go<T, I, uint32_t>();
    }

    template <typename T, typename I, typename S> cudaError_t go() const {
        const T *g = static_cast<const T *>(args.grad);
        const uint64_t n = args.n;
        uint64_t *scratch = args.scratch;
        uint64_t *count = args.out.count;
        const uint64_t segs = segs_of(n);
        const uint64_t warp_blocks = (segs + WARPS - 1) / WARPS;
        const uint64_t scan_blocks = scan_blocks_of(segs);
        if (warp_blocks > 0x7FFFFFFFu) return cudaErrorInvalidValue;
        uint32_t prefix = 0;
        uint64_t take = TAKE_ALL;
        if (!topk) {
            float t = args.threshold;
            if (t != t && args.device_threshold == nullptr) return cudaErrorInvalidValue;
            // |g| >= t in key terms: every key from t's up.
            if (args.device_threshold == nullptr) prefix = threshold_key(t, Key<T>::BITS);
        } else if (args.k < n) {
            // The bucket and radix passes find the key; k >= n takes every element (prefix
            // 0, take all).
            take = args.k;
        }
        const bool search = topk && args.k < n;
        const float *device_t = topk ? nullptr : args.device_threshold;
        cudaError_t err = launch_pdl(select_init_kernel, 1, SPARSE_THREADS, stream, scratch,
                                     prefix, take, device_t, Key<T>::BITS);
        if (err != cudaSuccess) return err;
        // The passes over the staged keys stream a grid-stride loop; a few blocks per SM keep
        // the histogram adds few. Sized for every key staged.
        int stream_blocks = 0;
        err = sparse_grid(n, 4, &stream_blocks);
        if (err != cudaSuccess) return err;
        const int grid = (int)warp_blocks;
        // Step i of the search over the staged keys.
        auto radix = [&](int i, bool on_overflow) {
            const Step st = step_of(Key<T>::BITS, i);
            const uint32_t decided = decided_before(Key<T>::BITS, i);
            if (st.bits == 12) {
                return launch_pdl(select_radix_kernel<T, S, 4096>, stream_blocks, SPARSE_THREADS,
                                  stream, g, scratch, segs, i, st.shift, decided, on_overflow);
            }
            return launch_pdl(select_radix_kernel<T, S, 256>, stream_blocks, SPARSE_THREADS,
                              stream, g, scratch, segs, i, st.shift, decided, on_overflow);
        };
        auto count_and_scan = [&](int mode) {
            cudaError_t e =
                launch_pdl(select_count_kernel<T, S>, stream_blocks, SPARSE_THREADS, stream, g,
                           scratch, segs, mode == SCAN_ON_OVERFLOW);
            if (e == cudaSuccess) {
                e = launch_pdl(select_scan_blocks_kernel, (int)scan_blocks, SCAN_THREADS, stream,
                               scratch, segs, mode);
            }
            if (e == cudaSuccess) {
                e = launch_pdl(select_scan_top_kernel, 1, SCAN_THREADS, stream, scratch, segs,
                               count, mode, args.out.capacity);
            }
            return e;
        };
        if (search) {
            // One full wave: the bucket pass strides over the gradient, so blocks past those
            // resident would only form a partial second wave (docs/measured.md, sixteenth run).
            int resident = 0, blocks = 0;
            err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident,
                                                                select_bucket_kernel<T>,
                                                                SPARSE_THREADS, 0);
            if (err == cudaSuccess) {
                err = sparse_grid((n + Run<T>::N - 1) / Run<T>::N, resident > 0 ? resident : 1,
                                  &blocks);
            }
            if (err == cudaSuccess) {
                err = launch_pdl(select_bucket_kernel<T>, blocks, SPARSE_THREADS, stream, g, n,
                                 scratch);
            }
        }
        if (err == cudaSuccess) {
            err = launch_pdl(select_filter_kernel<T, S>, grid, SPARSE_THREADS, stream, g, n,
                             scratch, segs);
        }
        // The steps below the bucket's.
        for (int i = 1; search && err == cudaSuccess && i < steps_of(Key<T>::BITS); ++i) {
            err = radix(i, false);
        }
        if (err == cudaSuccess) err = count_and_scan(topk ? SCAN_TOPK : SCAN_THRESHOLD);
        if (err != cudaSuccess) return err;
        if (!topk) {
            // The top `capacity` of the staged keys: every step, from the top.
            for (int i = 0; err == cudaSuccess && i < steps_of(Key<T>::BITS); ++i) {
                err = radix(i, true);
            }
            if (err == cudaSuccess) err = count_and_scan(SCAN_ON_OVERFLOW);
            if (err != cudaSuccess) return err;
        }
        return launch_pdl(select_write_kernel<T, I, S>, grid, SPARSE_THREADS, stream, g,
                          scratch, segs, static_cast<I *>(args.out.idx),
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
