// Broadcast (coll/family.h): the root puts its input into every member's output once the
// member has arrived; or, small and with every member mapped, stores it as low-latency lines
// into every member's line slot [root], from which each copies it into its output
// (NVSHMEMRS_FAMILY_LL; the members give credits back, prims/ll_credit.cuh); or, large, as a
// scatter of parts and an allgather of them (NVSHMEMRS_FAMILY_SPLIT), so that the root's links
// carry one buffer's worth instead of n - 1.
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
// the root puts chunk b of part k into member k's output once every member has arrived; block
// b of member k waits for that chunk, puts it into every other non-root's output, then waits
// for chunk b of every other part.
__device__ void broadcast_split(const nvshmemrs_family_args &a, const Waiter &w) {
    const nvshmemrs_coll_header &h = a.hdr;
    const Step s = begin_step(h.state);
    const Layout L{h, 0, s.parity};
    const int root = a.root, parts = h.n - 1;
    const size_t bytes = h.count * (size_t)a.elem_bytes;
    const char *in = static_cast<const char *>(h.input);
    char *out = static_cast<char *>(h.output);
    auto arrive = [&](int r) { return L.counter(NVSHMEMRS_FAMILY_ARRIVE, r); };
    auto data = [&](int r) { return L.counter(NVSHMEMRS_FAMILY_DATA, r); };
    auto not_root = [&](int r) { return r != root; };
    // Chunk b of part `part` from `from` (the root's input, or this PE's output) into the
    // output of the member it goes to.
    auto chunk = [&](int part, const char *from, char **dst, const char **src, size_t *n) {
        const SplitChunk c = split_chunk<char>(bytes, parts, part);
        *dst = out + c.begin;
        *src = from + c.begin;
        *n = c.end - c.begin;
    };
    if (h.rank == root) {
        if (in != out) {
            size_t b, e;
            part_of<char>(bytes, gridDim.x, blockIdx.x, &b, &e);
            block_store(out + b, in + b, e - b);
        }
        if (!block_wait_others(w, h, arrive, s.value)) return;
        block_put_signal_to(
            h,
            [&](int r, char **dst, const char **src, size_t *n) {
                chunk(split_part(r, root), in, dst, src, n);
            },
            [](int) { return true; }, split_root_first(h.n, root), data(h.rank), s.value);
    } else {
        block_arrive(h, L, AllOthers{}, s.value);
        if (!block_wait_one(w, data(root), s.value, h.pes[root])) return;
        if (!block_wait_from(w, h, arrive, not_root, s.value)) return;
        block_put_signal_to(
            h,
            [&](int, char **dst, const char **src, size_t *n) {
                chunk(split_part(h.rank, root), out, dst, src, n);
            },
            not_root, h.rank + 1, data(h.rank), s.value);
        if (!block_wait_others(w, h, data, s.value)) return;
    }
    end_step(h);
}

__global__ void broadcast_kernel(nvshmemrs_family_args a) {
    const nvshmemrs_coll_header &h = a.hdr;
    // The line region's bases before the wait (prims/ll.cuh ll_peer_bases).
    __shared__ char *ll_base[NVSHMEMRS_FAMILY_LL_MAX_PES];
    if (a.protocol == NVSHMEMRS_FAMILY_LL) ll_peer_bases(h, ll_base);
    wait_for_previous_kernel();
    if (block_broken(h)) return;
    const Waiter w(h, NVSHMEMRS_WAIT_OP_COLLECTIVE, NVSHMEMRS_COLL_BROADCAST);
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
        if (in != out) block_store(out + b, in + b, e - b);
        if (!block_wait_others(w, h, arrive, s.value)) return;
        block_put_signal_all(
            h,
            [&](int, char **dst, const char **src, size_t *bytes) {
                *dst = out + b;
                *src = in + b;
                *bytes = e - b;
            },
            L.counter(NVSHMEMRS_FAMILY_DATA, h.rank), s.value);
    }
    end_step(h);
}

}  // namespace

extern "C" int nvshmemrs_broadcast(nvshmemrs_family_args args, int blocks, int threads,
                                   cudaStream_t stream) {
    if (!family_args_ok(args, blocks) || !family_protocol_ok(args, true))
        return cudaErrorInvalidValue;
    return (int)launch_pdl(broadcast_kernel, blocks, threads, stream, args);
}
