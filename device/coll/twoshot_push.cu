// Push two-shot allreduce (NVSHMEMRS_ALGO_TWOSHOT_PUSH, see abi.h): only stores cross the links.
// coll/launch.cuh declares its launcher; coll/allreduce.cu dispatches to it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include "core/nvshmem_device.cuh"

#include "coll/launch.cuh"
#include "prims/chunks.cuh"
#include "prims/direct.cuh"
#include "prims/dispatch.cuh"
#include "prims/pdl.cuh"
#include "prims/peers.cuh"
#include "prims/reduce.cuh"
#include "prims/step.cuh"
#include "prims/vec.cuh"
#include "prims/waiter.cuh"

namespace {

// Sources loaded before any is stored or combined in the push two-shot. Its loads are local,
// so fewer in flight suffice; 8 would need more registers than 512 threads may have.
constexpr int PUSH_GROUP = 4;

// Sends [b, e) of every other member's chunk c of the input to position `rank` of member c's
// output (the scatter of the reduce-scatter; stores only).
template <typename T>
__device__ __forceinline__ void push_scatter(const nvshmemrs_coll_header &h, const T *in,
                                             T *const *dst, size_t chunk, size_t b, size_t e) {
    constexpr int V = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;
    const size_t nvec = (e - b) / V;
    for (size_t v = threadIdx.x; v < nvec; v += blockDim.x) {
        const size_t off = b + v * V;
        for (int k0 = 1; k0 < h.n; k0 += PUSH_GROUP) {
            uint4 raw[PUSH_GROUP];
#pragma unroll
            for (int j = 0; j < PUSH_GROUP; ++j) {
                const int c = (h.rank + k0 + j) % h.n;
                if (k0 + j < h.n)
                    raw[j] = *reinterpret_cast<const uint4 *>(in + c * chunk + off);
            }
#pragma unroll
            for (int j = 0; j < PUSH_GROUP; ++j) {
                const int c = (h.rank + k0 + j) % h.n;
                if (k0 + j < h.n)
                    store16(dst[c] + h.rank * chunk + off, raw[j]);
            }
        }
    }
}

// Reduces [b, e) of the own chunk over ranks 0..n-1 (the order of every other protocol): the
// own input and the positions the peers stored into; the result goes to the own position.
template <typename T, int OP>
__device__ __forceinline__ void push_reduce(const nvshmemrs_coll_header &h, const T *in,
                                            T *out, size_t chunk, size_t b, size_t e) {
    constexpr int V = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;
    const size_t nvec = (e - b) / V;
    for (size_t v = threadIdx.x; v < nvec; v += blockDim.x) {
        const size_t off = b + v * V;
        const uint4 res = reduce_vec16<T, OP, PUSH_GROUP>(h.n, [&](int r) {
            return r == h.rank ? *reinterpret_cast<const uint4 *>(in + h.rank * chunk + off)
                               : __ldcg(reinterpret_cast<const uint4 *>(out + r * chunk + off));
        });
        store16(out + h.rank * chunk + off, res);
    }
}

// The result of [b, e) of the own chunk (read back by the thread that wrote it) into every
// peer's output.
template <typename T>
__device__ __forceinline__ void push_gather(const nvshmemrs_coll_header &h, T *out,
                                            T *const *dst, size_t chunk, size_t b, size_t e) {
    constexpr int V = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;
    const size_t nvec = (e - b) / V;
    for (size_t v = threadIdx.x; v < nvec; v += blockDim.x) {
        const size_t off = h.rank * chunk + b + v * V;
        const uint4 res = *reinterpret_cast<const uint4 *>(out + off);
        for (int k = 1; k < h.n; ++k) {
            const int c = (h.rank + k) % h.n;
            store16(dst[c] + off, res);
        }
    }
}

// Push two-shot (NVSHMEMRS_ALGO_TWOSHOT_PUSH, see abi.h): only stores cross NVLink. Chunks are
// count_even / n elements (count_even: count rounded down to n vectors), so that chunk c of any
// input fits position r of any output; the few elements past count_even are reduced by every PE for itself
// from the peers' inputs. Direct-two-shot counters by phase: 0 arrive (this PE's output is
// free), 1 done (every store landed), and per round k: 2 scattered (the sender's part landed in
// this PE's output), 3 reduced (the sender has read its positions, which may now take the
// result), set to call * PUSH_ROUNDS_MAX + k + 1.
// Rounds pipeline a block's part: round k + 1's stores are issued before round k's reduce, so
// the links stay busy while the block reads its own memory; one release covers both.
// __launch_bounds__: without it the compiler took more than the 128 registers a thread of 512 may
// have (up to 162), and 512-thread launches failed.
template <typename T, int OP>
__global__ void __launch_bounds__(NVSHMEMRS_ALLREDUCE_DIRECT_THREADS_MAX)
    twoshot_push_kernel(nvshmemrs_allreduce_args a) {
    const nvshmemrs_coll_header &h = a.hdr;
    wait_for_previous_kernel();
    constexpr int DB = NVSHMEMRS_ALLREDUCE_DIRECT_BLOCKS;
    constexpr uint64_t RMAX = NVSHMEMRS_ALLREDUCE_PUSH_ROUNDS_MAX;
    const uint64_t call = h.state->direct_calls + 1;
    if (block_broken(h)) return;
    const Waiter w(h, NVSHMEMRS_WAIT_OP_ALLREDUCE, NVSHMEMRS_ALGO_TWOSHOT_PUSH);
    const size_t phase = (size_t)h.world * DB;
    uint64_t *arrive = h.direct_flags, *done = arrive + phase, *scattered = arrive + 2 * phase,
             *reduced = arrive + 3 * phase;
    __shared__ T *dst[NVSHMEMRS_ALLREDUCE_DIRECT_MAX_PES];
    for (int r = threadIdx.x; r < h.n; r += blockDim.x)
        dst[r] = r == h.rank ? static_cast<T *>(h.output)
                             : reinterpret_cast<T *>(member_ptr(h, h.output, r));
    // Entry: every member's output is free and its input ready (its earlier work on its stream
    // is done).
    if (!direct_handshake(w, h, arrive, call, false)) return;
    using A = typename Acc<T>::type;
    constexpr int V = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;
    const size_t unit = (size_t)h.n * V;
    const size_t even = h.count / unit * unit, chunk = even / h.n;
    const T *in = static_cast<const T *>(h.input);
    T *out = static_cast<T *>(h.output);
    if (blockIdx.x == gridDim.x - 1) {
        // The tail, from every member's input, into this PE's output only.
        for (size_t i = even + threadIdx.x; i < h.count; i += blockDim.x) {
            A acc{};
            for (int r = 0; r < h.n; ++r) {
                const T *src =
                    r == h.rank ? in : reinterpret_cast<const T *>(member_ptr(h, in, r));
                A val = to_acc<T>(__ldcg(src + i));
                acc = r == 0 ? val : combine<T, OP>(acc, val);
            }
            out[i] = finish<T, OP>(acc, h.n);
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
    push_scatter<T>(h, in, dst, chunk, rb, re);
    __syncthreads();
    direct_signal(h, scattered, call * RMAX + 1, true);
    for (int k = 0; k < rounds; ++k) {
        const bool next = k + 1 < rounds;
        if (next) {
            round(k + 1, &rb, &re);
            push_scatter<T>(h, in, dst, chunk, rb, re);
        }
        round(k, &rb, &re);
        if (!direct_wait(w, h, scattered, call * RMAX + k + 1)) return;
        push_reduce<T, OP>(h, in, out, chunk, rb, re);
        // Round k + 1's stores are visible before its signal, and every thread's reads of round
        // k's positions are done before the peers may overwrite them: one release (by the
        // thread that signals member r, after the barrier) orders both.
        __syncthreads();
        if (next) direct_signal(h, scattered, call * RMAX + k + 2, true);
        direct_signal(h, reduced, call * RMAX + k + 1, !next);
        if (!direct_wait(w, h, reduced, call * RMAX + k + 1)) return;
        push_gather<T>(h, out, dst, chunk, rb, re);
    }
    // Exit: this block's stores have landed everywhere and the tail's reads are done.
    if (!direct_handshake(w, h, done, call, true)) return;
    if (threadIdx.x == 0)
        advance_state(h.state, [&](nvshmemrs_allreduce_state *st) { st->direct_calls = call; });
}

// by_dtype's functor: this algorithm's kernel for one dtype and op.
NVSHMEMRS_ALLREDUCE_LAUNCHER(Launch, twoshot_push_kernel);

}  // namespace

cudaError_t nvshmemrs::allreduce_twoshot_push(int dtype, int op,
                                              const nvshmemrs_allreduce_args &args, int blocks,
                                              int threads, cudaStream_t stream) {
    if (blocks < 1 || blocks > NVSHMEMRS_ALLREDUCE_DIRECT_BLOCKS ||
        args.hdr.n > NVSHMEMRS_ALLREDUCE_DIRECT_MAX_PES || args.hdr.input == args.hdr.output)
        return cudaErrorInvalidValue;
    return by_dtype(dtype, op, Launch{args, blocks, threads, stream});
}
