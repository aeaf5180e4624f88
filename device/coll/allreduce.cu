// Allreduce kernels launched by src/allreduce.rs; the header documents the workspace layout.
// Data moves with direct stores when nvshmem_ptr maps the peer (NVLink/PCIe), else with
// NVSHMEM block puts; every block announces its delivery with one signal add per peer.
// Every kernel splits its work into gridDim.x parts, block b always handling part b, so a block
// only ever waits for the same-numbered blocks of its peers. Kernels are launched with
// programmatic dependent launch (prims/pdl.cuh): back to back on a stream, the next call's
// blocks are resident before this one ends, and wait for it before touching memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <type_traits>

#include "coll/allreduce.h"
#include "prims/deadline.cuh"
#include "prims/fence.cuh"
#include "prims/pdl.cuh"
#include "prims/vec.cuh"

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
// counter `flag` on `pe`, ordered after the data. Called by the whole block. With `reuse_src`
// the NVSHMEM path blocks until `src` may be overwritten (the caller writes it next); direct
// stores have read it by the time they return anyway.
__device__ void block_put_signal(char *dst, const char *src, size_t bytes, uint64_t *flag, int pe,
                                 bool reuse_src = false) {
    char *peer = static_cast<char *>(nvshmem_ptr(dst, pe));
    if (peer != NULL) {
        block_store(peer, src, bytes);
        fence_acq_rel_sys();
        __syncthreads();
        if (threadIdx.x == 0) nvshmemx_signal_op(flag, 1, NVSHMEM_SIGNAL_ADD, pe);
    } else if (bytes > 0 && reuse_src) {
        nvshmemx_putmem_signal_block(dst, src, bytes, flag, 1, NVSHMEM_SIGNAL_ADD, pe);
    } else if (bytes > 0) {
        nvshmemx_putmem_signal_nbi_block(dst, src, bytes, flag, 1, NVSHMEM_SIGNAL_ADD, pe);
    } else if (threadIdx.x == 0) {
        nvshmemx_signal_op(flag, 1, NVSHMEM_SIGNAL_ADD, pe);
    }
    __syncthreads();
}


// block_put_signal to every other member at once: member r gets `bytes` from src(r) at dst
// (a symmetric address) and 1 added to `flag`. Mapped members take direct stores, then one fence
// for all of them and their signals in parallel (thread k signals the k-th); the others take
// NVSHMEM puts with signal. `part(r, &src, &bytes)` names what goes to rank r; dst(r) likewise.
template <typename Part>
__device__ void block_put_signal_all(const nvshmemrs_allreduce_args &a, Part part,
                                     uint64_t *flag) {
    bool mapped_any = false;
    for (int k = 1; k < a.hdr.n; ++k) {
        const int r = (a.hdr.rank + k) % a.hdr.n;
        char *dst;
        const char *src;
        size_t bytes;
        part(r, &dst, &src, &bytes);
        char *peer = static_cast<char *>(nvshmem_ptr(dst, a.hdr.pes[r]));
        if (peer != NULL) {
            block_store(peer, src, bytes);
            mapped_any = true;
        } else if (bytes > 0) {
            nvshmemx_putmem_signal_nbi_block(dst, src, bytes, flag, 1, NVSHMEM_SIGNAL_ADD,
                                             a.hdr.pes[r]);
        } else if (threadIdx.x == 0) {
            nvshmemx_signal_op(flag, 1, NVSHMEM_SIGNAL_ADD, a.hdr.pes[r]);
        }
    }
    if (mapped_any) {
        fence_acq_rel_sys();
        __syncthreads();
        for (int k = 1 + threadIdx.x; k < a.hdr.n; k += blockDim.x) {
            const int r = (a.hdr.rank + k) % a.hdr.n;
            char *dst;
            const char *src;
            size_t bytes;
            part(r, &dst, &src, &bytes);
            if (nvshmem_ptr(dst, a.hdr.pes[r]) != NULL)
                nvshmemx_signal_op(flag, 1, NVSHMEM_SIGNAL_ADD, a.hdr.pes[r]);
        }
    }
    __syncthreads();
}

// The timeout of one launch's waits (each wait's deadline starts at its first clock check) and
// where a miss is recorded.
struct Waiter {
    nvshmemrs_wait_status *status;
    uint64_t *broken;
    uint64_t timeout_ns;
    uint64_t seq;
    int algo;
    __device__ Waiter(const nvshmemrs_allreduce_args &a, int algo_code)
        : status(static_cast<nvshmemrs_wait_status *>(a.hdr.wait_status)),
          broken(&a.hdr.state->broken),
          timeout_ns(a.hdr.timeout_ns),
          seq(a.hdr.state->steps),
          algo(algo_code) {}
    __device__ nvshmemrs_wait_site site(int peer) const {
        nvshmemrs_wait_site s;
        s.status = status;
        s.broken = broken;
        s.op = NVSHMEMRS_WAIT_OP_ALLREDUCE;
        s.peer = peer;
        s.index = (uint64_t)algo;
        s.seq = seq;
        return s;
    }
    // Until *sig >= want (signalled by world PE `peer`) or the deadline.
    __device__ bool ge(uint64_t *sig, uint64_t want, int peer) const {
        return nvshmemrs_wait_ge_for(reinterpret_cast<volatile uint64_t *>(sig), want, timeout_ns,
                                     site(peer));
    }
    // For waits that poll data instead of a counter (low-latency lines), called every 256
    // polls with the wait's first clock reading in *start (0 before the first call): true
    // when the wait must end, having recorded a timeout if it was the first failure.
    __device__ bool give_up(const void *word, uint64_t want, uint64_t seen, uint64_t *start,
                            int peer) const {
        if (*(volatile uint64_t *)broken != 0) return true;
        uint64_t now = nvshmemrs_globaltimer();
        if (*start == 0) *start = now;
        if (now - *start < timeout_ns) return false;
        nvshmemrs_record_failure(site(peer), NVSHMEMRS_FAIL_TIMEOUT, (uint64_t)(uintptr_t)word,
                                 want, seen, now - *start);
        return true;
    }
};

// True, for every thread of the block, if the workspace was broken before this launch: the
// kernel must then return at once (one thread reads the flag so that all agree).
__device__ __forceinline__ bool block_broken(const nvshmemrs_allreduce_args &a) {
    return __syncthreads_or(threadIdx.x == 0 && *(volatile uint64_t *)&a.hdr.state->broken != 0);
}

// Waits (thread t for rank t) until the counter of every rank but `rank` reached `want`.
// False, for every thread, when a wait failed: the kernel must return without using the data.
__device__ bool block_wait_others(const Waiter &w, const nvshmemrs_allreduce_args &a,
                                  uint64_t *counters, uint64_t want) {
    bool ok = true;
    for (int r = threadIdx.x; r < a.hdr.n && ok; r += blockDim.x)
        if (r != a.hdr.rank) ok = w.ge(&counters[r], want, a.hdr.pes[r]);
    // Each waiting thread acquired (w.ge); the barrier passes that on to the block.
    return !__syncthreads_or(!ok);
}

// Thread 0 waits for one counter, signalled by world PE `peer`. False as above.
__device__ bool block_wait_one(const Waiter &w, uint64_t *counter, uint64_t want, int peer) {
    bool ok = threadIdx.x != 0 || w.ge(counter, want, peer);
    return !__syncthreads_or(!ok);
}

// out[i] = op over sources 0..nsrc-1 (in that order) of src(s)[i], for i in [b, e); with
// `last` set, the result is finished (avg divides by n_avg), else kept as a partial.
// Aligned ranges go 16 bytes at a time (one vector per source), the rest element by element.
template <typename T, int OP, typename Src>
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
        size_t nvec = (e - b) / V;
        for (size_t v = threadIdx.x; v < nvec; v += blockDim.x) {
            size_t i = b + v * V;
            A acc[V];
            for (int s = 0; s < nsrc; ++s) {
                uint4 raw = *reinterpret_cast<const uint4 *>(src(s) + i);
                const T *x = reinterpret_cast<const T *>(&raw);
#pragma unroll
                for (int k = 0; k < V; ++k) {
                    A val = to_acc<T>(x[k]);
                    acc[k] = s == 0 ? val : combine<T, OP>(acc[k], val);
                }
            }
            uint4 res;
            T *r = reinterpret_cast<T *>(&res);
#pragma unroll
            for (int k = 0; k < V; ++k) r[k] = done(acc[k]);
            // A plain store: into local memory it measured faster than store16 (one-shot at 4
            // PEs, 512 KiB: 13.99 against 14.27 us).
            *reinterpret_cast<uint4 *>(out + i) = res;
        }
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

// This launch's view of the device-resident state: parity and counter targets.
struct Step {
    int parity;
    uint64_t want[2];  // per phase
};

__device__ Step begin_step(const nvshmemrs_allreduce_state *st, int algo) {
    Step s;
    s.parity = (int)(st->steps & 1);
    for (int ph = 0; ph < 2; ++ph) s.want[ph] = st->expected[algo][ph][s.parity] + gridDim.x;
    return s;
}

// Called by thread 0 of every block at the end of a launch: the last block to get here applies
// `update` to the state and advances the step count for the next launch on the stream. Every
// block has read the state by then: a block can only finish after it started. A lone block is
// the last one: no atomic round trip. No fence before the count either way: every thread's
// reads of the state returned before the block's barrier, and the next launch on the stream sees
// the new state once this one has completed.
template <typename Update>
__device__ __forceinline__ void advance_state(nvshmemrs_allreduce_state *st, Update update) {
    const bool last = gridDim.x == 1 || atomicAdd(&st->done, 1u) == gridDim.x - 1;
    if (last) {
        update(st);
        st->steps += 1;
        st->done = 0;
        __threadfence();
    }
}

// The end of a step of the slot protocols: advance_state with this step's counter targets.
// algo < 0: a protocol without counters (low-latency one-shot) only advances the step count.
__device__ void end_step(const nvshmemrs_allreduce_args &a, int algo, const Step &s) {
    __syncthreads();
    if (threadIdx.x == 0) {
        // Puts that went through NVSHMEM (no peer mapping) complete here, so the caller may
        // reuse input and output as soon as the kernel is done.
        if (!a.hdr.all_mapped) nvshmem_quiet();
        advance_state(a.hdr.state, [&](nvshmemrs_allreduce_state *st) {
            if (algo >= 0) {
                st->expected[algo][0][s.parity] = s.want[0];
                st->expected[algo][1][s.parity] = s.want[1];
            }
        });
    }
}

struct Layout {
    const nvshmemrs_allreduce_args &a;
    int algo, parity;
    __device__ char *slot(int i) const {
        return a.hdr.scratch + ((size_t)parity * a.hdr.world + i) * a.hdr.slot_bytes;
    }
    __device__ uint64_t *counters(int phase) const {
        return a.hdr.flags + ((size_t)(algo * 2 + phase) * 2 + parity) * a.hdr.world;
    }
};

// One-shot: push the own part of the input into slot [rank] of every peer, wait for all, reduce
// the part over ranks 0..n-1 (same order everywhere: bit-identical results).
template <typename T, int OP>
__global__ void oneshot_kernel(nvshmemrs_allreduce_args a) {
    wait_for_previous_kernel();
    const int algo = 0;
    if (block_broken(a)) return;
    const Waiter w(a, algo);
    Step s = begin_step(a.hdr.state, algo);
    Layout L{a, algo, s.parity};
    const T *input = static_cast<const T *>(a.hdr.input);
    size_t b, e;
    part_of<T>(a.hdr.count, gridDim.x, blockIdx.x, &b, &e);
    uint64_t *cnt = L.counters(0);
    block_put_signal_all(
        a,
        [&](int, char **dst, const char **src, size_t *bytes) {
            *dst = L.slot(a.hdr.rank) + b * sizeof(T);
            *src = reinterpret_cast<const char *>(input + b);
            *bytes = (e - b) * sizeof(T);
        },
        &cnt[a.hdr.rank]);
    if (!block_wait_others(w, a, cnt, s.want[0])) return;
    auto src = [&](int r) -> const T * {
        return r == a.hdr.rank ? input : reinterpret_cast<const T *>(L.slot(r));
    };
    block_reduce<T, OP>(src, a.hdr.n, static_cast<T *>(a.hdr.output), b, e, true, a.hdr.n);
    end_step(a, algo, s);
}

// Two-shot: chunk c belongs to rank c. Reduce-scatter: part b of chunk c goes to rank c's slot
// [rank]; wait; reduce the own chunk. All-gather: the reduced part goes to the same place of
// every peer's output; wait for theirs.
template <typename T, int OP>
__global__ void twoshot_kernel(nvshmemrs_allreduce_args a) {
    wait_for_previous_kernel();
    const int algo = 1;
    if (block_broken(a)) return;
    const Waiter w(a, algo);
    Step s = begin_step(a.hdr.state, algo);
    Layout L{a, algo, s.parity};
    const T *input = static_cast<const T *>(a.hdr.input);
    T *output = static_cast<T *>(a.hdr.output);
    const size_t chunk = round_elems<T>((a.hdr.count + a.hdr.n - 1) / a.hdr.n);
    auto chunk_range = [&](int c, size_t *c0, size_t *c1) {
        *c0 = chunk * c < a.hdr.count ? chunk * c : a.hdr.count;
        *c1 = *c0 + chunk < a.hdr.count ? *c0 + chunk : a.hdr.count;
    };
    uint64_t *scatter = L.counters(0), *gather = L.counters(1);
    block_put_signal_all(
        a,
        [&](int peer, char **dst, const char **src, size_t *bytes) {
            size_t c0, c1, b, e;
            chunk_range(peer, &c0, &c1);
            part_of<T>(c1 - c0, gridDim.x, blockIdx.x, &b, &e);
            *dst = L.slot(a.hdr.rank) + b * sizeof(T);
            *src = reinterpret_cast<const char *>(input + c0 + b);
            *bytes = (e - b) * sizeof(T);
        },
        &scatter[a.hdr.rank]);
    if (!block_wait_others(w, a, scatter, s.want[0])) return;
    size_t c0, c1, b, e;
    chunk_range(a.hdr.rank, &c0, &c1);
    part_of<T>(c1 - c0, gridDim.x, blockIdx.x, &b, &e);
    auto src = [&](int r) -> const T * {
        return r == a.hdr.rank ? input + c0 : reinterpret_cast<const T *>(L.slot(r));
    };
    block_reduce<T, OP>(src, a.hdr.n, output + c0, b, e, true, a.hdr.n);
    block_put_signal_all(
        a,
        [&](int, char **dst, const char **src, size_t *bytes) {
            *dst = reinterpret_cast<char *>(output + c0 + b);
            *src = reinterpret_cast<const char *>(output + c0 + b);
            *bytes = (e - b) * sizeof(T);
        },
        &gather[a.hdr.rank]);
    if (!block_wait_others(w, a, gather, s.want[1])) return;
    end_step(a, algo, s);
}

// Ring: n chunks. Reduce-scatter step k (0..n-2): send the partial of chunk (rank - k) to the
// next rank's slot [k] (step 0 sends the own input), receive chunk (rank - k - 1) from the
// previous rank and fold the own input into it; after n-1 steps chunk (rank + 1) is complete.
// All-gather step k: forward chunk (rank + 1 - k) into the next rank's output. Each rank only
// talks to its neighbours, so the traffic per link stays 2(n-1)/n of the message.
template <typename T, int OP>
__global__ void ring_kernel(nvshmemrs_allreduce_args a) {
    wait_for_previous_kernel();
    const int algo = 2;
    if (block_broken(a)) return;
    const Waiter w(a, algo);
    Step s = begin_step(a.hdr.state, algo);
    Layout L{a, algo, s.parity};
    const T *input = static_cast<const T *>(a.hdr.input);
    T *output = static_cast<T *>(a.hdr.output);
    const int n = a.hdr.n, next = a.hdr.pes[(a.hdr.rank + 1) % n],
              prev = a.hdr.pes[(a.hdr.rank + n - 1) % n];
    const size_t chunk = round_elems<T>((a.hdr.count + n - 1) / n);
    // Part b of chunk c (absolute element range).
    auto part = [&](int c, size_t *pb, size_t *pe) {
        c = ((c % n) + n) % n;
        size_t c0 = chunk * c < a.hdr.count ? chunk * c : a.hdr.count;
        size_t c1 = c0 + chunk < a.hdr.count ? c0 + chunk : a.hdr.count;
        part_of<T>(c1 - c0, gridDim.x, blockIdx.x, pb, pe);
        *pb += c0;
        *pe += c0;
    };
    uint64_t *rs = L.counters(0), *ag = L.counters(1);
    if (n == 1) {
        size_t b, e;
        part(0, &b, &e);
        auto own = [&](int) { return input; };
        block_reduce<T, OP>(own, 1, output, b, e, true, 1);
    }
    for (int k = 0; k + 1 < n; ++k) {
        size_t b, e;
        part(a.hdr.rank - k, &b, &e);
        const T *from = k == 0 ? input : output;
        // Slot k holds chunk-sized data at offset 0: the part goes to its offset in the chunk.
        size_t off = (b - (size_t)(((a.hdr.rank - k) % n + n) % n) * chunk) * sizeof(T);
        block_put_signal(L.slot(k) + off, reinterpret_cast<const char *>(from + b),
                         (e - b) * sizeof(T), &rs[k], next);
        if (!block_wait_one(w, &rs[k], s.want[0], prev)) return;
        int c = ((a.hdr.rank - k - 1) % n + n) % n;
        part(c, &b, &e);
        const T *recv = reinterpret_cast<const T *>(L.slot(k)) - (size_t)c * chunk;
        auto src = [&](int i) { return i == 0 ? recv : input; };
        block_reduce<T, OP>(src, 2, output, b, e, k + 2 == n, n);
    }
    for (int k = 0; k + 1 < n; ++k) {
        size_t b, e;
        part(a.hdr.rank + 1 - k, &b, &e);
        block_put_signal(reinterpret_cast<char *>(output + b),
                         reinterpret_cast<const char *>(output + b), (e - b) * sizeof(T), &ag[k],
                         next);
        if (!block_wait_one(w, &ag[k], s.want[1], prev)) return;
    }
    end_step(a, algo, s);
}

// Recursive doubling over the largest power of two p <= n: step k exchanges the whole partial
// with rank ^ 2^k and combines lower rank first (both partners compute the same bits). The
// r = n - p ranks above p first hand their input to rank - p (slot [log2 p]) and get the
// result back into their output at the end (phase 1 counter 0).
template <typename T, int OP>
__global__ void rd_kernel(nvshmemrs_allreduce_args a) {
    wait_for_previous_kernel();
    const int algo = 3;
    if (block_broken(a)) return;
    const Waiter w(a, algo);
    Step s = begin_step(a.hdr.state, algo);
    Layout L{a, algo, s.parity};
    const T *input = static_cast<const T *>(a.hdr.input);
    T *output = static_cast<T *>(a.hdr.output);
    int steps = 0;
    while ((2 << steps) <= a.hdr.n) ++steps;
    const int p = 1 << steps, extra = a.hdr.n - p;
    size_t b, e;
    part_of<T>(a.hdr.count, gridDim.x, blockIdx.x, &b, &e);
    const size_t bytes = (e - b) * sizeof(T);
    uint64_t *c0 = L.counters(0), *c1 = L.counters(1);
    if (a.hdr.rank >= p) {
        block_put_signal(L.slot(steps) + b * sizeof(T), reinterpret_cast<const char *>(input + b),
                         bytes, &c0[steps], a.hdr.pes[a.hdr.rank - p]);
        if (!block_wait_one(w, &c1[0], s.want[1], a.hdr.pes[a.hdr.rank - p])) return;
        end_step(a, algo, s);
        return;
    }
    const T *acc = input;
    if (a.hdr.rank < extra) {
        if (!block_wait_one(w, &c0[steps], s.want[0], a.hdr.pes[a.hdr.rank + p])) return;
        const T *theirs = reinterpret_cast<const T *>(L.slot(steps));
        auto src = [&](int i) { return i == 0 ? input : theirs; };
        block_reduce<T, OP>(src, 2, output, b, e, steps == 0, a.hdr.n);
        acc = output;
    }
    if (steps == 0 && a.hdr.rank >= extra) {
        auto own = [&](int) { return input; };
        block_reduce<T, OP>(own, 1, output, b, e, true, a.hdr.n);
    }
    for (int k = 0; k < steps; ++k) {
        int partner = a.hdr.rank ^ (1 << k);
        // acc is the output from step 1 on, overwritten right after the wait.
        block_put_signal(L.slot(k) + b * sizeof(T), reinterpret_cast<const char *>(acc + b), bytes,
                         &c0[k], a.hdr.pes[partner], acc == output);
        if (!block_wait_one(w, &c0[k], s.want[0], a.hdr.pes[partner])) return;
        const T *theirs = reinterpret_cast<const T *>(L.slot(k));
        const T *lo = a.hdr.rank < partner ? acc : theirs,
                *hi = a.hdr.rank < partner ? theirs : acc;
        auto src = [&](int i) { return i == 0 ? lo : hi; };
        block_reduce<T, OP>(src, 2, output, b, e, k + 1 == steps, a.hdr.n);
        acc = output;
    }
    if (a.hdr.rank < extra) {
        block_put_signal(reinterpret_cast<char *>(output + b),
                         reinterpret_cast<const char *>(output + b), bytes, &c1[0],
                         a.hdr.pes[a.hdr.rank + p]);
    }
    end_step(a, algo, s);
}

// Low-latency one-shot (algo 4). Line i of a slot carries payload bytes [8i, 8i + 8) as
// {data0, flag, data1, flag}; flag = low 32 bits of steps + 1 (never 0, the heap's initial value,
// and different from the previous use of the same parity slot).
__device__ __forceinline__ void st_line(uint4 *p, uint32_t d0, uint32_t d1, uint32_t flag) {
    asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(d0),
                 "r"(flag), "r"(d1), "r"(flag)
                 : "memory");
}

// Loads line p once, bypassing L1 (the peer writes it over NVLink).
__device__ __forceinline__ uint4 ld_line_once(const uint4 *p) {
    uint4 v;
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
}

// Line i of the slots of ranks r0 .. r0 + G - 1 (those below n, except `skip`), polled together
// until each carries `flag` in both halves: G loads in flight per pass instead of one peer's
// round trip after another, which at 8 PEs cost more than the data's flight. Payloads land in
// out[j] (slot j of the group). False when the timeout passed or the workspace broke meanwhile;
// the clock is read every 256 passes only.
template <int G>
__device__ __forceinline__ bool ld_lines(const Layout &L, size_t i, int r0, int n, int skip,
                                         uint32_t flag, uint2 (&out)[G], const Waiter &w) {
    uint32_t pending = 0;
#pragma unroll
    for (int j = 0; j < G; ++j)
        if (r0 + j < n && r0 + j != skip) pending |= 1u << j;
    uint64_t start = 0;
    for (uint32_t spin = 1; pending != 0; ++spin) {
        uint4 v[G];
#pragma unroll
        for (int j = 0; j < G; ++j)
            if (pending >> j & 1) v[j] = ld_line_once(reinterpret_cast<const uint4 *>(L.slot(r0 + j)) + i);
        uint32_t seen = 0;
        int late = -1;
#pragma unroll
        for (int j = 0; j < G; ++j) {
            if (!(pending >> j & 1)) continue;
            if (v[j].y == flag && v[j].w == flag) {
                out[j] = make_uint2(v[j].x, v[j].z);
                pending &= ~(1u << j);
            } else if (late < 0) {
                late = j;
                seen = v[j].y != flag ? v[j].y : v[j].w;
            }
        }
        if (pending != 0 && (spin & 255) == 0 &&
            w.give_up(reinterpret_cast<const uint4 *>(L.slot(r0 + late)) + i, flag, seen, &start,
                      L.a.hdr.pes[r0 + late]))
            return false;
    }
    return true;
}

// 8 payload bytes at byte offset 8*i of buf (zero past `bytes`). buf is 8-byte aligned. The
// tail is assembled in a register: a byte array would live in local memory.
__device__ __forceinline__ uint2 load8(const char *buf, size_t i, size_t bytes) {
    if (8 * i + 8 <= bytes) return *reinterpret_cast<const uint2 *>(buf + 8 * i);
    uint64_t v = 0;
    for (size_t j = 8 * i; j < bytes; ++j)
        v |= (uint64_t)(uint8_t)buf[j] << (8 * (j - 8 * i));
    return make_uint2((uint32_t)v, (uint32_t)(v >> 32));
}

// Writes the first min(8, bytes - 8*i) bytes of v at byte offset 8*i of buf.
__device__ __forceinline__ void store8(char *buf, size_t i, size_t bytes, uint2 v) {
    if (8 * i + 8 <= bytes) {
        *reinterpret_cast<uint2 *>(buf + 8 * i) = v;
        return;
    }
    const uint64_t w = (uint64_t)v.x | (uint64_t)v.y << 32;
    for (size_t j = 8 * i; j < bytes; ++j) buf[j] = (char)(w >> (8 * (j - 8 * i)));
}

// Lines polled together (ld_lines); larger teams go group after group.
constexpr int LL_GROUP = 8;

template <typename T, int OP>
__global__ void oneshot_ll_kernel(nvshmemrs_allreduce_args a) {
    wait_for_previous_kernel();
    // Read with the broken flag below: one round trip for both.
    const uint64_t steps = a.hdr.state->steps;
    if (block_broken(a)) return;
    const Waiter w(a, 4);
    const int parity = (int)(steps & 1);
    Layout L{a, 0, parity};
    const uint32_t flag = (uint32_t)(steps + 1) == 0 ? 1u : (uint32_t)(steps + 1);
    const char *in = static_cast<const char *>(a.hdr.input);
    char *out = static_cast<char *>(a.hdr.output);
    const size_t bytes = a.hdr.count * sizeof(T), lines = (bytes + 7) / 8;
    // Slot [rank] on every member, looked up once for the block (nvshmem_ptr reads a table).
    __shared__ uint4 *dst[NVSHMEMRS_ALLREDUCE_LL_MAX_PES];
    for (int r = threadIdx.x; r < a.hdr.n; r += blockDim.x)
        dst[r] = static_cast<uint4 *>(nvshmem_ptr(L.slot(a.hdr.rank), a.hdr.pes[r]));
    __syncthreads();
    // Block b owns lines [l0, l1); one line per thread per pass.
    size_t per = (lines + gridDim.x - 1) / gridDim.x;
    size_t l0 = per * blockIdx.x < lines ? per * blockIdx.x : lines;
    size_t l1 = l0 + per < lines ? l0 + per : lines;
    for (size_t i = l0 + threadIdx.x; i < l1; i += blockDim.x) {
        uint2 v = load8(in, i, bytes);
        for (int k = 1, r = a.hdr.rank + 1; k < a.hdr.n; ++k, ++r) {
            if (r == a.hdr.n) r = 0;
            st_line(dst[r] + i, v.x, v.y, flag);
        }
    }
    using A = typename Acc<T>::type;
    constexpr int PER = 8 / sizeof(T) > 0 ? 8 / sizeof(T) : 1;
    bool ok = true;
    for (size_t i = l0 + threadIdx.x; i < l1 && ok; i += blockDim.x) {
        const uint2 mine = load8(in, i, bytes);
        A acc[PER];
        // Ranks in order 0..n-1 on every PE: bit-identical results.
        for (int r0 = 0; r0 < a.hdr.n && ok; r0 += LL_GROUP) {
            uint2 got[LL_GROUP];
            if (!ld_lines<LL_GROUP>(L, i, r0, a.hdr.n, a.hdr.rank, flag, got, w)) {
                ok = false;
                break;
            }
#pragma unroll
            for (int j = 0; j < LL_GROUP; ++j) {
                if (r0 + j >= a.hdr.n) continue;
                const uint2 v = r0 + j == a.hdr.rank ? mine : got[j];
                const T *x = reinterpret_cast<const T *>(&v);
#pragma unroll
                for (int k = 0; k < PER; ++k) {
                    A val = to_acc<T>(x[k]);
                    acc[k] = r0 + j == 0 ? val : combine<T, OP>(acc[k], val);
                }
            }
        }
        if (!ok) break;
        uint2 res;
        T *r = reinterpret_cast<T *>(&res);
#pragma unroll
        for (int k = 0; k < PER; ++k) r[k] = finish<T, OP>(acc[k], a.hdr.n);
        store8(out, i, bytes, res);
    }
    if (__syncthreads_or(!ok)) return;
    Step s{parity, {0, 0}};
    end_step(a, -1, s);
}

// Sources loaded before any is combined in the direct two-shot: one round trip over NVLink
// for a group instead of one per peer.
constexpr int DIRECT_GROUP = 8;

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

// Thread r (r != rank) sets this block's counter on member r to `value`.
__device__ __forceinline__ void direct_signal(const nvshmemrs_allreduce_args &a,
                                              uint64_t *counters, uint64_t value) {
    constexpr int DB = NVSHMEMRS_ALLREDUCE_DIRECT_BLOCKS;
    const size_t mine = (size_t)a.hdr.rank * DB + blockIdx.x;
    for (int r = threadIdx.x; r < a.hdr.n; r += blockDim.x)
        if (r != a.hdr.rank)
            nvshmemx_signal_op(&counters[mine], value, NVSHMEM_SIGNAL_SET, a.hdr.pes[r]);
}

// Thread r waits until member r set this block's counter here to at least `value`. False, for
// every thread, when a wait failed.
__device__ __forceinline__ bool direct_wait(const Waiter &w, const nvshmemrs_allreduce_args &a,
                                            uint64_t *counters, uint64_t value) {
    constexpr int DB = NVSHMEMRS_ALLREDUCE_DIRECT_BLOCKS;
    bool ok = true;
    for (int r = threadIdx.x; r < a.hdr.n && ok; r += blockDim.x)
        if (r != a.hdr.rank) ok = w.ge(&counters[(size_t)r * DB + blockIdx.x], value, a.hdr.pes[r]);
    return !__syncthreads_or(!ok);
}

// The direct two-shot's handshake for this block: direct_signal (with `stored`, after a system
// fence, so that what the block stored is visible first), then direct_wait.
__device__ bool direct_handshake(const Waiter &w, const nvshmemrs_allreduce_args &a,
                                 uint64_t *counters, uint64_t call, bool stored) {
    if (stored) {
        fence_acq_rel_sys();
        __syncthreads();
    }
    direct_signal(a, counters, call);
    return direct_wait(w, a, counters, call);
}

// Direct two-shot (algo 5), see the header. Loads bypass L1 (__ldcg): peers' inputs were
// written by other GPUs. Counters are set to the call number (not added to), so a call may use
// any grid up to NVSHMEMRS_ALLREDUCE_DIRECT_BLOCKS: a counter skipped by small calls still
// reads below the next call's number.
// No __launch_bounds__: it fits 512 threads without (at most 96 registers), and with it the
// kernel measured about 1 us slower per call at 4 PEs (17.1 against 18.3 us at 1 MiB).
template <typename T, int OP>
__global__ void twoshot_direct_kernel(nvshmemrs_allreduce_args a) {
    wait_for_previous_kernel();
    constexpr int DB = NVSHMEMRS_ALLREDUCE_DIRECT_BLOCKS;
    const uint64_t call = a.hdr.state->direct_calls + 1;
    if (block_broken(a)) return;
    const Waiter w(a, 5);
    uint64_t *arrive = a.hdr.direct_flags, *done = a.hdr.direct_flags + (size_t)a.hdr.world * DB;
    __shared__ const T *src[NVSHMEMRS_ALLREDUCE_DIRECT_MAX_PES];
    __shared__ T *dst[NVSHMEMRS_ALLREDUCE_DIRECT_MAX_PES];
    for (int r = threadIdx.x; r < a.hdr.n; r += blockDim.x) {
        src[r] = r == a.hdr.rank ? static_cast<const T *>(a.hdr.input)
                             : static_cast<const T *>(nvshmem_ptr(a.hdr.input, a.hdr.pes[r]));
        dst[r] = r == a.hdr.rank ? static_cast<T *>(a.hdr.output)
                             : static_cast<T *>(nvshmem_ptr(a.hdr.output, a.hdr.pes[r]));
    }
    // Entry: every member's input is ready. A peer that never arrived may still be writing its
    // input: touch nothing.
    if (!direct_handshake(w, a, arrive, call, false)) return;
    using A = typename Acc<T>::type;
    constexpr int V = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;
    const size_t chunk = round_elems<T>((a.hdr.count + a.hdr.n - 1) / a.hdr.n);
    size_t c0 = chunk * a.hdr.rank < a.hdr.count ? chunk * a.hdr.rank : a.hdr.count;
    size_t c1 = c0 + chunk < a.hdr.count ? c0 + chunk : a.hdr.count;
    size_t b, e;
    part_of<T>(c1 - c0, gridDim.x, blockIdx.x, &b, &e);
    b += c0;
    e += c0;
    const size_t nvec = (e - b) / V;
    for (size_t v = threadIdx.x; v < nvec; v += blockDim.x) {
        size_t i = b + v * V;
        const uint4 res = reduce_vec16<T, OP, DIRECT_GROUP>(a.hdr.n, [&](int r) {
            return __ldcg(reinterpret_cast<const uint4 *>(src[r] + i));
        });
        for (int k = 0, r = a.hdr.rank; k < a.hdr.n; ++k, ++r) {
            if (r == a.hdr.n) r = 0;
            store16(dst[r] + i, res);
        }
    }
    for (size_t i = b + nvec * V + threadIdx.x; i < e; i += blockDim.x) {
        A acc{};
        for (int r = 0; r < a.hdr.n; ++r) {
            A val = to_acc<T>(src[r][i]);
            acc = r == 0 ? val : combine<T, OP>(acc, val);
        }
        T res = finish<T, OP>(acc, a.hdr.n);
        for (int r = 0; r < a.hdr.n; ++r) dst[r][i] = res;
    }
    // Exit: this block's stores have landed everywhere, and its peers are done reading this
    // PE's input, before anyone returns.
    if (!direct_handshake(w, a, done, call, true)) return;
    if (threadIdx.x == 0)
        advance_state(a.hdr.state, [&](nvshmemrs_allreduce_state *st) { st->direct_calls = call; });
}

// Sources loaded before any is stored or combined in the push two-shot. Its loads are local,
// so fewer in flight suffice; 8 would need more registers than 512 threads may have.
constexpr int PUSH_GROUP = 4;

// Sends [b, e) of every other member's chunk c of the input to position `rank` of member c's
// output (the scatter of the reduce-scatter; stores only).
template <typename T>
__device__ __forceinline__ void push_scatter(const nvshmemrs_allreduce_args &a, const T *in,
                                             T *const *dst, size_t chunk, size_t b, size_t e) {
    constexpr int V = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;
    const size_t nvec = (e - b) / V;
    for (size_t v = threadIdx.x; v < nvec; v += blockDim.x) {
        const size_t off = b + v * V;
        for (int k0 = 1; k0 < a.hdr.n; k0 += PUSH_GROUP) {
            uint4 raw[PUSH_GROUP];
#pragma unroll
            for (int j = 0; j < PUSH_GROUP; ++j) {
                const int c = (a.hdr.rank + k0 + j) % a.hdr.n;
                if (k0 + j < a.hdr.n)
                    raw[j] = *reinterpret_cast<const uint4 *>(in + c * chunk + off);
            }
#pragma unroll
            for (int j = 0; j < PUSH_GROUP; ++j) {
                const int c = (a.hdr.rank + k0 + j) % a.hdr.n;
                if (k0 + j < a.hdr.n)
                    store16(dst[c] + a.hdr.rank * chunk + off, raw[j]);
            }
        }
    }
}

// Reduces [b, e) of the own chunk over ranks 0..n-1 (the order of every other protocol): the
// own input and the positions the peers stored into; the result goes to the own position.
template <typename T, int OP>
__device__ __forceinline__ void push_reduce(const nvshmemrs_allreduce_args &a, const T *in,
                                            T *out, size_t chunk, size_t b, size_t e) {
    constexpr int V = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;
    const size_t nvec = (e - b) / V;
    for (size_t v = threadIdx.x; v < nvec; v += blockDim.x) {
        const size_t off = b + v * V;
        const uint4 res = reduce_vec16<T, OP, PUSH_GROUP>(a.hdr.n, [&](int r) {
            return r == a.hdr.rank ? *reinterpret_cast<const uint4 *>(in + a.hdr.rank * chunk + off)
                               : __ldcg(reinterpret_cast<const uint4 *>(out + r * chunk + off));
        });
        store16(out + a.hdr.rank * chunk + off, res);
    }
}

// The result of [b, e) of the own chunk (read back by the thread that wrote it) into every
// peer's output.
template <typename T>
__device__ __forceinline__ void push_gather(const nvshmemrs_allreduce_args &a, T *out,
                                            T *const *dst, size_t chunk, size_t b, size_t e) {
    constexpr int V = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;
    const size_t nvec = (e - b) / V;
    for (size_t v = threadIdx.x; v < nvec; v += blockDim.x) {
        const size_t off = a.hdr.rank * chunk + b + v * V;
        const uint4 res = *reinterpret_cast<const uint4 *>(out + off);
        for (int k = 1; k < a.hdr.n; ++k) {
            const int c = (a.hdr.rank + k) % a.hdr.n;
            store16(dst[c] + off, res);
        }
    }
}

// Push two-shot (algo 6), see the header: only stores cross NVLink. Chunks are count_even / n
// elements (count_even: count rounded down to n vectors), so that chunk c of any input fits
// position r of any output; the few elements past count_even are reduced by every PE for itself
// from the peers' inputs. Direct-two-shot counters by phase: 0 arrive (this PE's output is
// free), 1 done (every store landed), and per round k: 2 scattered (the sender's part landed in
// this PE's output), 3 reduced (the sender has read its positions, which may now take the
// result), set to call * PUSH_ROUNDS_MAX + k + 1.
// Rounds pipeline a block's part: round k + 1's stores are issued before round k's reduce, so
// the links stay busy while the block reads its own memory; one fence covers both.
// __launch_bounds__: without it the compiler took more than the 128 registers a thread of 512 may
// have (up to 162), and 512-thread launches failed.
template <typename T, int OP>
__global__ void __launch_bounds__(NVSHMEMRS_ALLREDUCE_DIRECT_THREADS_MAX)
    twoshot_push_kernel(nvshmemrs_allreduce_args a) {
    wait_for_previous_kernel();
    constexpr int DB = NVSHMEMRS_ALLREDUCE_DIRECT_BLOCKS;
    constexpr uint64_t RMAX = NVSHMEMRS_ALLREDUCE_PUSH_ROUNDS_MAX;
    const uint64_t call = a.hdr.state->direct_calls + 1;
    if (block_broken(a)) return;
    const Waiter w(a, 6);
    const size_t phase = (size_t)a.hdr.world * DB;
    uint64_t *arrive = a.hdr.direct_flags, *done = arrive + phase, *scattered = arrive + 2 * phase,
             *reduced = arrive + 3 * phase;
    __shared__ T *dst[NVSHMEMRS_ALLREDUCE_DIRECT_MAX_PES];
    for (int r = threadIdx.x; r < a.hdr.n; r += blockDim.x)
        dst[r] = r == a.hdr.rank ? static_cast<T *>(a.hdr.output)
                             : static_cast<T *>(nvshmem_ptr(a.hdr.output, a.hdr.pes[r]));
    // Entry: every member's output is free and its input ready (its earlier work on its stream
    // is done).
    if (!direct_handshake(w, a, arrive, call, false)) return;
    using A = typename Acc<T>::type;
    constexpr int V = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;
    const size_t unit = (size_t)a.hdr.n * V;
    const size_t even = a.hdr.count / unit * unit, chunk = even / a.hdr.n;
    const T *in = static_cast<const T *>(a.hdr.input);
    T *out = static_cast<T *>(a.hdr.output);
    if (blockIdx.x == gridDim.x - 1) {
        // The tail, from every member's input, into this PE's output only.
        for (size_t i = even + threadIdx.x; i < a.hdr.count; i += blockDim.x) {
            A acc{};
            for (int r = 0; r < a.hdr.n; ++r) {
                const T *src = r == a.hdr.rank
                                   ? in
                                   : static_cast<const T *>(nvshmem_ptr(in, a.hdr.pes[r]));
                A val = to_acc<T>(__ldcg(src + i));
                acc = r == 0 ? val : combine<T, OP>(acc, val);
            }
            out[i] = finish<T, OP>(acc, a.hdr.n);
        }
    }
    size_t b, e;
    part_of<T>(chunk, gridDim.x, blockIdx.x, &b, &e);
    const int rounds = a.rounds < 1 ? 1 : (a.rounds > (int)RMAX ? (int)RMAX : a.rounds);
    // [rb, re) of round k, relative to the chunk's start.
    auto round = [&](int k, size_t *rb, size_t *re) {
        part_of<T>(e - b, rounds, k, rb, re);
        *rb += b;
        *re += b;
    };
    size_t rb, re;
    round(0, &rb, &re);
    push_scatter<T>(a, in, dst, chunk, rb, re);
    fence_acq_rel_sys();
    __syncthreads();
    direct_signal(a, scattered, call * RMAX + 1);
    for (int k = 0; k < rounds; ++k) {
        const bool next = k + 1 < rounds;
        if (next) {
            round(k + 1, &rb, &re);
            push_scatter<T>(a, in, dst, chunk, rb, re);
        }
        round(k, &rb, &re);
        if (!direct_wait(w, a, scattered, call * RMAX + k + 1)) return;
        push_reduce<T, OP>(a, in, out, chunk, rb, re);
        // Round k + 1's stores are visible before its signal; every thread's reads of round k's
        // positions returned before the peers may overwrite them.
        if (next) fence_acq_rel_sys();
        __syncthreads();
        if (next) direct_signal(a, scattered, call * RMAX + k + 2);
        direct_signal(a, reduced, call * RMAX + k + 1);
        if (!direct_wait(w, a, reduced, call * RMAX + k + 1)) return;
        push_gather<T>(a, out, dst, chunk, rb, re);
    }
    // Exit: this block's stores have landed everywhere and the tail's reads are done.
    if (!direct_handshake(w, a, done, call, true)) return;
    if (threadIdx.x == 0)
        advance_state(a.hdr.state, [&](nvshmemrs_allreduce_state *st) { st->direct_calls = call; });
}

// Checked mode's header exchange (see the header). Thread 0 sends; thread t waits for and
// compares ranks t, t + blockDim.x, ...
__global__ void check_header_kernel(nvshmemrs_allreduce_args a, uint64_t *headers,
                                    uint64_t *header_flags, uint64_t call, uint64_t meta) {
    wait_for_previous_kernel();
    if (block_broken(a)) return;
    const Waiter w(a, -1);
    __shared__ uint64_t mine[NVSHMEMRS_ALLREDUCE_HEADER_WORDS];
    if (threadIdx.x == 0) {
        mine[0] = call;
        mine[1] = (uint64_t)a.hdr.count;
        mine[2] = meta;
        mine[3] = 0;
        // The own slot [rank] of the local copy is the put's source: symmetric memory, which
        // every transport can read (shared memory is not, off-node).
        uint64_t *slot = headers + (size_t)a.hdr.rank * NVSHMEMRS_ALLREDUCE_HEADER_WORDS;
        for (int f = 0; f < NVSHMEMRS_ALLREDUCE_HEADER_WORDS; ++f) slot[f] = mine[f];
        __threadfence();
        for (int k = 1; k < a.hdr.n; ++k) {
            int peer = (a.hdr.rank + k) % a.hdr.n;
            nvshmem_putmem_signal(slot, slot, sizeof(mine), &header_flags[a.hdr.rank], call,
                                  NVSHMEM_SIGNAL_SET, a.hdr.pes[peer]);
        }
    }
    __syncthreads();
    bool ok = true;
    for (int r = threadIdx.x; r < a.hdr.n && ok; r += blockDim.x) {
        if (r == a.hdr.rank) continue;
        ok = w.ge(&header_flags[r], call, a.hdr.pes[r]);
        if (!ok) break;
        const volatile uint64_t *theirs = headers + (size_t)r * NVSHMEMRS_ALLREDUCE_HEADER_WORDS;
        for (int f = 1; f <= 2 && ok; ++f) {
            uint64_t t = theirs[f];
            if (t != mine[f]) {
                nvshmemrs_wait_site site = w.site(a.hdr.pes[r]);
                site.index = (uint64_t)(f - 1);
                site.seq = call;
                nvshmemrs_record_failure(site, NVSHMEMRS_FAIL_MISMATCH,
                                         (uint64_t)(uintptr_t)&theirs[f], mine[f], t, 0);
                ok = false;
            }
        }
    }
    __syncthreads();
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

struct Launch {
    int algo;
    nvshmemrs_allreduce_args args;
    int blocks, threads;
    cudaStream_t stream;
    template <typename T, int OP> cudaError_t run() const {
        switch (algo) {
        case 0: return launch_pdl(oneshot_kernel<T, OP>, blocks, threads, stream, args);
        case 1: return launch_pdl(twoshot_kernel<T, OP>, blocks, threads, stream, args);
        case 2: return launch_pdl(ring_kernel<T, OP>, blocks, threads, stream, args);
        case 3: return launch_pdl(rd_kernel<T, OP>, blocks, threads, stream, args);
        case 4:
            if (args.hdr.n > NVSHMEMRS_ALLREDUCE_LL_MAX_PES) return cudaErrorInvalidValue;
            return launch_pdl(oneshot_ll_kernel<T, OP>, blocks, threads, stream, args);
        case 5:
            if (blocks < 1 || blocks > NVSHMEMRS_ALLREDUCE_DIRECT_BLOCKS ||
                args.hdr.n > NVSHMEMRS_ALLREDUCE_DIRECT_MAX_PES)
                return cudaErrorInvalidValue;
            return launch_pdl(twoshot_direct_kernel<T, OP>, blocks, threads, stream, args);
        case 6:
            if (blocks < 1 || blocks > NVSHMEMRS_ALLREDUCE_DIRECT_BLOCKS ||
                args.hdr.n > NVSHMEMRS_ALLREDUCE_DIRECT_MAX_PES ||
                args.hdr.input == args.hdr.output)
                return cudaErrorInvalidValue;
            return launch_pdl(twoshot_push_kernel<T, OP>, blocks, threads, stream, args);
        default: return cudaErrorInvalidValue;
        }
    }
};

}  // namespace

extern "C" int nvshmemrs_allreduce_check_header(nvshmemrs_allreduce_args args,
                                                uint64_t *headers, uint64_t *header_flags,
                                                uint64_t call, uint64_t meta,
                                                cudaStream_t stream) {
    const nvshmemrs_coll_header &h = args.hdr;
    if (h.n < 1 || h.n > h.world || h.rank < 0 || h.rank >= h.n || call == 0)
        return cudaErrorInvalidValue;
    return (int)launch_pdl(check_header_kernel, 1, 32, stream, args, headers, header_flags, call,
                           meta);
}

extern "C" int nvshmemrs_allreduce(int algo, int dtype, int op, nvshmemrs_allreduce_args args,
                                   int blocks, int threads, cudaStream_t stream) {
    const nvshmemrs_coll_header &h = args.hdr;
    if (h.n < 1 || h.n > h.world || h.rank < 0 || h.rank >= h.n)
        return cudaErrorInvalidValue;
    return (int)by_dtype(dtype, op, Launch{algo, args, blocks, threads, stream});
}
