// Broadcast (coll/family.h): the root puts its input into every member's output once the
// member has arrived (its own output, large, in the same loop as the first member's:
// prims/put_signal.cuh own_copy_or_fused); or, small and with every member mapped, stores it
// as low-latency lines into every member's line slot [root], from which each copies it into
// its output (NVSHMEMRS_FAMILY_LL; the members give credits back, prims/ll_credit.cuh); or,
// large, as a scatter of parts and an allgather of them (NVSHMEMRS_FAMILY_SPLIT), so that the
// root's links carry one buffer's worth instead of n - 1.
#include <cuda_runtime.h>
#include "core/nvshmem_device.cuh"

#include "coll/family.h"
#include "coll/family_args.cuh"
#include "prims/chunks.cuh"
#include "prims/exchange.cuh"
#include "prims/ll.cuh"
#include "prims/ll_credit.cuh"
#include "prims/pdl.cuh"
#include "prims/put_signal.cuh"
#include "prims/split.cuh"
#include "prims/step.cuh"
#include "prims/waiter.cuh"

namespace {

// The step under the low-latency protocol.
__device__ void broadcast_ll(const nvshmemrs_family_args &a, const Waiter &w,
                             char *const *ll_base) {
    const nvshmemrs_coll_header &h = a.hdr;
    const Step s = begin_step(h.state);
    const uint32_t flag = ll_flag(s.value - 1);
    const size_t bytes = h.count * (size_t)a.elem_bytes, lines = (bytes + 7) / 8;
    const char *in = static_cast<const char *>(h.input);
    char *out = static_cast<char *>(h.output);
    size_t l0, l1;
    ll_block_lines(lines, &l0, &l1);
    auto from_root = [&](int r) { return r == a.root; };
    if (h.rank == a.root) {
        __shared__ uint4 *dst[NVSHMEMRS_FAMILY_LL_MAX_PES];
        ll_peer_slots(h, ll_base, s.parity, dst);
        if (!ll_wait_credits(w, h, s, [](int) { return true; })) return;
        ll_put_lines(h, dst, [&](int) { return in; }, [](int) { return true; }, bytes, l0, l1,
                     flag);
        if (in != out) {
            const size_t b = l0 * 8 < bytes ? l0 * 8 : bytes, e = l1 * 8 < bytes ? l1 * 8 : bytes;
            block_store(out + b, in + b, e - b);
        }
        ll_end_step_credit(h, s, false);
        return;
    }
    const bool ok = ll_get_lines<1>(h, s.parity, l0, l1, flag, w, from_root,
                                    [&](int, size_t i, uint2 v) { store8(out, i, bytes, v); });
    if (__syncthreads_or(!ok)) return;
    ll_end_step_credit(h, s, true);
}

// The step under the split protocol (abi.h NVSHMEMRS_FAMILY_SPLIT). Non-roots arrive at every
// other member (their outputs are free); the root's output is written by no one. Block b of
// the root puts chunk b of part k into member k's output once every member has arrived, round
// by round (prims/split.cuh), raising ROUND after each; block b of member k passes each round
// of that chunk on to every other non-root's output as it comes, signals them after the last,
// then waits for chunk b of every other part.
__device__ void broadcast_split(const nvshmemrs_family_args &a, const Waiter &w) {
    const nvshmemrs_coll_header &h = a.hdr;
    const Step s = begin_step(h.state);
    const Layout L{h, 0, s.parity};
    const int root = a.root;
    const size_t bytes = h.count * (size_t)a.elem_bytes;
    const char *in = static_cast<const char *>(h.input);
    char *out = static_cast<char *>(h.output);
    auto arrive = [&](int r) { return L.counter(NVSHMEMRS_FAMILY_ARRIVE, r); };
    auto round = [&](int r) { return L.counter(NVSHMEMRS_FAMILY_ROUND, r); };
    auto not_root = [&](int r) { return r != root; };
    const SplitPlan<char> P(h, bytes, root, a.split_round_bytes);
    auto rounds = [&](int r) { return P.rounds(r); };
    // Round j of member r's chunk from `from` (the root's input, or this PE's output) into the
    // output of the member it goes to.
    auto piece = [&](int r, int j, const char *from, char **dst, const char **src, size_t *n) {
        size_t b, e;
        P.round(r, j, &b, &e);
        *dst = out + b;
        *src = from + b;
        *n = e - b;
    };
    if (h.rank == root) {
        if (in != out) {
            size_t b, e;
            part_of<char>(bytes, gridDim.x, blockIdx.x, &b, &e);
            block_store(out + b, in + b, e - b);
        }
        if (!block_wait_others(w, h, arrive, s.value)) return;
        int most = 1;
        for (int r = 0; r < h.n; ++r)
            if (r != root && rounds(r) > most) most = rounds(r);
        for (int j = 0; j < most; ++j)
            block_put_signal_to(
                h,
                [&](int r, char **dst, const char **src, size_t *n) {
                    piece(r, j, in, dst, src, n);
                },
                [&](int r) { return j < rounds(r); }, split_root_first(h.n, root),
                round(h.rank), split_round_value(s.value, j));
    } else {
        block_arrive(h, L, AllOthers{}, s.value);
        if (!block_wait_from(w, h, arrive, not_root, s.value)) return;
        const int mine = rounds(h.rank);
        for (int j = 0; j < mine; ++j) {
            if (!block_wait_one(w, round(root), split_round_value(s.value, j), h.pes[root]))
                return;
            if (j + 1 < mine) {
                // Every member is mapped where there is more than one round: stores only, the
                // signal follows the last round.
                char *dst;
                const char *src;
                size_t n;
                piece(h.rank, j, out, &dst, &src, &n);
                for (int k = 1; k < h.n; ++k) {
                    const int r = (h.rank + k) % h.n;
                    if (r != root) block_store(direct_ptr(h, dst, h.pes[r]), src, n);
                }
            } else {
                block_put_signal_to(
                    h,
                    [&](int, char **dst, const char **src, size_t *n) {
                        piece(h.rank, j, out, dst, src, n);
                    },
                    not_root, h.rank + 1, round(h.rank), split_round_value(s.value, j));
            }
        }
        for (int r = 0; r < h.n; ++r)
            if (r != root && r != h.rank &&
                !block_wait_one(w, round(r), split_round_value(s.value, rounds(r) - 1), h.pes[r]))
                return;
    }
    end_step(h);
}

__global__ void __launch_bounds__(NVSHMEMRS_FAMILY_THREADS) broadcast_kernel(nvshmemrs_family_args a) {
    const nvshmemrs_coll_header &h = a.hdr;
    // The line region's bases before the wait (prims/ll.cuh ll_peer_bases).
    __shared__ char *ll_base[NVSHMEMRS_FAMILY_LL_MAX_PES];
    if (a.protocol == NVSHMEMRS_FAMILY_LL) ll_peer_bases(h, ll_base);
    wait_for_previous_kernel();
    if (block_broken(h)) return;
    const Waiter w(h, NVSHMEMRS_WAIT_OP_COLLECTIVE, a.code);
    if (a.protocol == NVSHMEMRS_FAMILY_LL) {
        broadcast_ll(a, w, ll_base);
        return;
    }
    if (a.protocol == NVSHMEMRS_FAMILY_SPLIT) {
        broadcast_split(a, w);
        return;
    }
    const Step s = begin_step(h.state);
    const Layout L{h, 0, s.parity};
    size_t b, e;
    part_of<char>(h.count * (size_t)a.elem_bytes, gridDim.x, blockIdx.x, &b, &e);
    const char *in = static_cast<const char *>(h.input);
    char *out = static_cast<char *>(h.output);
    auto arrive = [&](int r) { return L.counter(NVSHMEMRS_FAMILY_ARRIVE, r); };
    if (h.rank != a.root) {
        block_arrive(h, L, [&](int r) { return r == a.root; }, s.value);
        if (!block_wait_one(w, L.counter(NVSHMEMRS_FAMILY_DATA, a.root), s.value, h.pes[a.root]))
            return;
    } else {
        // The own copy; large, with the first peer mapped, it goes with that peer's stores.
        const int first = (h.rank + 1) % h.n;
        char *fused = own_copy_or_fused(h, out + b, in + b, e - b, first);
        if (!block_wait_others(w, h, arrive, s.value)) return;
        if (fused != NULL) block_store_pair(fused, in + b, out + b, in + b, e - b);
        block_put_signal_all(
            h,
            [&](int r, char **dst, const char **src, size_t *bytes) {
                *dst = out + b;
                *src = in + b;
                *bytes = fused != NULL && r == first ? 0 : e - b;
            },
            L.counter(NVSHMEMRS_FAMILY_DATA, h.rank), s.value);
    }
    end_step(h);
}

}  // namespace

// Root's input (hdr.count x elem_bytes) into every member's output; in place at the root when
// input == output.
extern "C" int nvshmemrs_broadcast(nvshmemrs_family_args args, int blocks, int threads,
                                   cudaStream_t stream) {
    if (!family_args_ok(args, blocks) || !family_protocol_ok(args, true, false) ||
        threads > NVSHMEMRS_FAMILY_THREADS)
        return cudaErrorInvalidValue;
    return (int)launch_pdl(broadcast_kernel, blocks, threads, stream, args);
}
