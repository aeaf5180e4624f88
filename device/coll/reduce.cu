// Reduce (coll/family.h) through the root's receive slots: the root arrives, every other member
// puts its input into the root's slot [rank], the root reduces in rank order. Or, small and with
// every member mapped, as low-latency lines into the root's line slots (NVSHMEMRS_FAMILY_LL; every
// member gives credits, prims/ll_credit.cuh). Or, large, as a reduce-scatter over the members
// other than the root and a gather of the results into the root's output
// (NVSHMEMRS_FAMILY_SPLIT), so that the root's links carry one buffer's worth instead of n - 1
// and n - 1 members reduce instead of one. Or, with every member mapped, by the root loading
// every input over the mapping (NVSHMEMRS_FAMILY_PULL): one pass, no slots.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include "core/nvshmem_device.cuh"

#include "coll/family.h"
#include "coll/family_args.cuh"
#include "prims/chunks.cuh"
#include "prims/dispatch.cuh"
#include "prims/exchange.cuh"
#include "prims/ll.cuh"
#include "prims/ll_credit.cuh"
#include "prims/ll_reduce.cuh"
#include "prims/pdl.cuh"
#include "prims/put_signal.cuh"
#include "prims/reduce.cuh"
#include "prims/split.cuh"
#include "prims/step.cuh"
#include "prims/waiter.cuh"

namespace {

// The step under the low-latency protocol.
template <typename T, int OP>
__device__ void reduce_ll(const nvshmemrs_family_args &a, const Waiter &w,
                          char *const *ll_base) {
    const nvshmemrs_coll_header &h = a.hdr;
    const Step s = begin_step(h.state);
    const uint32_t flag = ll_flag(s.value - 1);
    const size_t bytes = h.count * sizeof(T), lines = (bytes + 7) / 8;
    const char *in = static_cast<const char *>(h.input);
    size_t l0, l1;
    ll_block_lines(lines, &l0, &l1);
    auto is_root = [&](int r) { return r == a.root; };
    if (h.rank != a.root) {
        __shared__ uint4 *dst[NVSHMEMRS_FAMILY_LL_MAX_PES];
        ll_peer_slots(h, ll_base, s.parity, dst);
        if (!ll_wait_credits(w, h, s, is_root)) return;
        ll_put_lines(h, dst, [&](int) { return in; }, is_root, bytes, l0, l1, flag);
        ll_end_step_credit(h, s, false);
        return;
    }
    // In place the output is the input: each thread reads line i before writing it.
    char *out = static_cast<char *>(h.output);
    const bool ok = ll_reduce_lines<T, OP>(
        h, s.parity, l0, l1, flag, w, [&](size_t i) { return load8(in, i, bytes); },
        [&](size_t i, uint2 v) { store8(out, i, bytes, v); });
    if (__syncthreads_or(!ok)) return;
    ll_end_step_credit(h, s, true);
}

// The step under the split protocol (abi.h NVSHMEMRS_FAMILY_SPLIT). Every member arrives at
// every other (its slots, at the root its output, are free), the root with its output's
// address. Round by round (prims/split.cuh), block b of every member puts round j of chunk b
// of part k of its input into slot [its rank] of member k and raises ROUND there; member k's
// block b, once round j has come from every other member, reduces it in rank order into the
// root's output (or into its own slot [k], then puts it there). After its last round it
// signals the root, whose block b waits for chunk b of every part.
template <typename T, int OP>
__device__ void reduce_split(const nvshmemrs_family_args &a, const Waiter &w) {
    const nvshmemrs_coll_header &h = a.hdr;
    const Step s = begin_step(h.state);
    const Layout L{h, 0, s.parity};
    const int root = a.root;
    const T *in = static_cast<const T *>(h.input);
    auto arrive = [&](int r) { return L.counter(NVSHMEMRS_FAMILY_ARRIVE, r); };
    auto round = [&](int r) { return L.counter(NVSHMEMRS_FAMILY_ROUND, r); };
    const SplitPlan<T> P(h, h.count, root, a.split_round_bytes);
    auto rounds = [&](int r) { return P.rounds(r); };
    if (h.rank == root)
        block_arrive_with_word(h, L, AllOthers{}, s.value, h.output);
    else
        block_arrive(h, L, AllOthers{}, s.value);
    if (!block_wait_others(w, h, arrive, s.value)) return;
    const int mine = h.rank == root ? 0 : rounds(h.rank);
    int most = mine;
    for (int r = 0; r < h.n; ++r)
        if (r != root && rounds(r) > most) most = rounds(r);
    // The root's output, as it said before its ARRIVE (seen by block_wait_others).
    T *out = h.rank == root ? NULL : reinterpret_cast<T *>(arrived_word(L, root));
    const int root_pe = h.pes[root];
    for (int j = 0; j < most; ++j) {
        // The reduce-scatter's round j: round j of chunk b of part k of the input into slot
        // [rank] of member k, at the chunk's place in the part.
        block_put_signal_to(
            h,
            [&](int r, char **dst, const char **src, size_t *bytes) {
                size_t b, e;
                P.round(r, j, &b, &e);
                *dst = L.slot(h.rank) + (b - P.chunk(r).part_begin) * sizeof(T);
                *src = reinterpret_cast<const char *>(in + b);
                *bytes = (e - b) * sizeof(T);
            },
            [&](int r) { return r != root && j < rounds(r); },
            h.rank == root ? split_root_first(h.n, root) : h.rank + 1, round(h.rank),
            split_round_value(s.value, j));
        if (j >= mine) continue;
        // Round j of this member's chunk from every other member.
        if (!block_wait_others(w, h, round, split_round_value(s.value, j))) return;
        const SplitChunk c = P.chunk(h.rank);
        // Sources indexed from the part's start.
        auto src = [&](int r) -> const T * {
            return r == h.rank ? in + c.part_begin : reinterpret_cast<const T *>(L.slot(r));
        };
        size_t b, e;
        P.round(h.rank, j, &b, &e);
        b -= c.part_begin;
        e -= c.part_begin;
        const bool last = j + 1 == mine;
        uint64_t *flag = round(h.rank);
        char *mapped = direct_ptr(h, out, root_pe);
        if (mapped != NULL) {
            block_reduce<T, OP>(src, h.n, reinterpret_cast<T *>(mapped) + c.part_begin, b, e, true,
                                h.n);
            // Every thread's stores into the root's output before the signal (release_signal
            // covers the block's stores only after a barrier).
            __syncthreads();
            if (last && threadIdx.x == 0)
                release_signal(flag, split_round_value(s.value, j), root_pe);
        } else {
            // One round here (split_rounds).
            T *slot = reinterpret_cast<T *>(L.slot(h.rank));
            block_reduce<T, OP>(src, h.n, slot, b, e, true, h.n);
            __syncthreads();
            block_put_signal(h, reinterpret_cast<char *>(out + c.part_begin + b),
                             reinterpret_cast<const char *>(slot + b), (e - b) * sizeof(T), flag,
                             split_round_value(s.value, j), root_pe);
        }
    }
    // At the root: every part's result in its output.
    if (h.rank == root) {
        for (int r = 0; r < h.n; ++r)
            if (r != root &&
                !block_wait_one(w, round(r), split_round_value(s.value, rounds(r) - 1), h.pes[r]))
                return;
    }
    end_step(h);
}

// The step under the pull protocol (abi.h NVSHMEMRS_FAMILY_PULL): every non-root tells the
// root where its input is; the root's block b loads part b of every input over the mapping,
// reduces it in rank order into its output, then lets each non-root go on.
template <typename T, int OP>
__device__ void reduce_pull(const nvshmemrs_family_args &a, const Waiter &w) {
    const nvshmemrs_coll_header &h = a.hdr;
    const Step s = begin_step(h.state);
    const Layout L{h, 0, s.parity};
    auto is_root = [&](int r) { return r == a.root; };
    size_t b, e;
    part_of<T>(h.count, gridDim.x, blockIdx.x, &b, &e);
    if (h.rank != a.root) {
        block_arrive_with_word(h, L, is_root, s.value, h.input);
        if (!block_wait_one(w, L.counter(NVSHMEMRS_FAMILY_DATA, a.root), s.value,
                            h.pes[a.root]))
            return;
    } else {
        auto arrive = [&](int r) { return L.counter(NVSHMEMRS_FAMILY_ARRIVE, r); };
        if (!block_wait_others(w, h, arrive, s.value)) return;
        __shared__ const T *src[NVSHMEMRS_FAMILY_LL_MAX_PES];
        pull_sources(h, L, static_cast<const T *>(h.input), 0, src);
        block_reduce<T, OP, PEER_VECTORS>([&](int r) { return src[r]; }, h.n,
                                         static_cast<T *>(h.output), b, e, true, h.n);
        block_done_reading(h, L, AllOthers{}, s.value);
    }
    end_step(h);
}

template <typename T, int OP>
__global__ void __launch_bounds__(NVSHMEMRS_FAMILY_THREADS) reduce_kernel(nvshmemrs_family_args a) {
    const nvshmemrs_coll_header &h = a.hdr;
    // The line region's bases before the wait (prims/ll.cuh ll_peer_bases).
    __shared__ char *ll_base[NVSHMEMRS_FAMILY_LL_MAX_PES];
    if (a.protocol == NVSHMEMRS_FAMILY_LL) ll_peer_bases(h, ll_base);
    wait_for_previous_kernel();
    if (block_broken(h)) return;
    const Waiter w(h, NVSHMEMRS_WAIT_OP_COLLECTIVE, a.code);
    if (a.protocol == NVSHMEMRS_FAMILY_LL) {
        reduce_ll<T, OP>(a, w, ll_base);
        return;
    }
    if (a.protocol == NVSHMEMRS_FAMILY_SPLIT) {
        reduce_split<T, OP>(a, w);
        return;
    }
    if (a.protocol == NVSHMEMRS_FAMILY_PULL) {
        reduce_pull<T, OP>(a, w);
        return;
    }
    const Step s = begin_step(h.state);
    const Layout L{h, 0, s.parity};
    const T *in = static_cast<const T *>(h.input);
    size_t b, e;
    part_of<T>(h.count, gridDim.x, blockIdx.x, &b, &e);
    if (h.rank != a.root) {
        if (!block_wait_one(w, L.counter(NVSHMEMRS_FAMILY_ARRIVE, a.root), s.value,
                            h.pes[a.root]))
            return;
        block_put_signal(h, L.slot(h.rank) + b * sizeof(T),
                         reinterpret_cast<const char *>(in + b), (e - b) * sizeof(T),
                         L.counter(NVSHMEMRS_FAMILY_DATA, h.rank), s.value, h.pes[a.root]);
    } else {
        block_arrive(h, L, AllOthers{}, s.value);
        auto data = [&](int r) { return L.counter(NVSHMEMRS_FAMILY_DATA, r); };
        if (!block_wait_others(w, h, data, s.value)) return;
        auto src = [&](int r) -> const T * {
            return r == h.rank ? in : reinterpret_cast<const T *>(L.slot(r));
        };
        block_reduce<T, OP>(src, h.n, static_cast<T *>(h.output), b, e, true, h.n);
    }
    end_step(h);
}

NVSHMEMRS_DTYPE_LAUNCHER(Launch, reduce_kernel, nvshmemrs_family_args);

}  // namespace

// Whether the split protocol's part of `count` elements (prims/split.cuh: part_of over n - 1
// parts, rounded to 16 bytes) fits a receive slot.
static bool split_part_fits(const nvshmemrs_family_args &a) {
    const nvshmemrs_coll_header &h = a.hdr;
    const size_t elem = (size_t)a.elem_bytes, parts = (size_t)(h.n - 1);
    const size_t per16 = 16 / elem > 0 ? 16 / elem : 1;
    const size_t per = ((h.count + parts - 1) / parts + per16 - 1) / per16 * per16;
    return per <= h.slot_bytes / elem;
}

// The root's output = op over members of their inputs; other outputs untouched.
extern "C" int nvshmemrs_reduce(int dtype, int op, nvshmemrs_family_args args, int blocks,
                                int threads, cudaStream_t stream) {
    const nvshmemrs_coll_header &h = args.hdr;
    if (!family_args_ok(args, blocks) || !family_protocol_ok(args, true, true) ||
        threads > NVSHMEMRS_FAMILY_THREADS)
        return cudaErrorInvalidValue;
    const bool slotless = family_slotless(args);
    const bool fits = slotless || (args.protocol == NVSHMEMRS_FAMILY_SPLIT
                                       ? split_part_fits(args)
                                       : h.count * (size_t)args.elem_bytes <= h.slot_bytes);
    if (!fits || (!slotless && h.scratch == NULL)) return cudaErrorInvalidValue;
    return (int)by_dtype(dtype, op, Launch{args, blocks, threads, stream});
}
