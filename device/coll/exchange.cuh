// The step of the exchanges (coll/exchange.h): alltoallv, allgatherv and grouped send/recv
// differ only in where their transfers come from (a Src: the launch's list, or counts in device
// memory).
//
// A Src has UNIQUE (at most one transfer per peer and direction, peer r's being number r),
// n_send()/send(i), n_recv()/recv(i) (Xfer), and bad(&limit, &reach): device counts that reach
// past a buffer.
#ifndef NVSHMEM_RS_EXCHANGE_CUH
#define NVSHMEM_RS_EXCHANGE_CUH

#include "core/nvshmem_device.cuh"
#include <stdint.h>

#include "abi.h"
#include "prims/chunks.cuh"
#include "prims/pdl.cuh"
#include "prims/put_signal.cuh"
#include "prims/step.cuh"
#include "prims/waiter.cuh"

namespace {

// One transfer as the step sees it (nvshmemrs_transfer, with the address as bytes).
struct Xfer {
    char *addr;
    uint64_t bytes;
    int peer;
    int dtype;
    int nth;
    int of;
};

// Added to a receiver's data counter instead of the data when a transfer does not match: the
// receiver's wait ends at once and it records the failure too.
constexpr uint64_t XCH_MISMATCH = 1ull << 62;
// In a mailbox head: the receiver's own arguments were out of range.
constexpr uint64_t XCH_BAD = 1ull << 63;

__device__ __forceinline__ uint64_t size_word(const Xfer &x) {
    return x.bytes | (uint64_t)x.dtype << NVSHMEMRS_EXCHANGE_DTYPE_SHIFT;
}

// The exchange region (abi.h) at hdr.scratch.
struct Region {
    uint64_t *w;
    int world;
    __device__ uint64_t *arrive(int r) const { return w + r; }
    __device__ uint64_t *data(int r) const { return w + (size_t)world + r; }
    __device__ uint64_t *expect(int r) const { return w + 2 * (size_t)world + r; }
    __device__ uint64_t *sent(int r) const { return w + 3 * (size_t)world + r; }
    __device__ uint64_t *received(int r) const { return w + 4 * (size_t)world + r; }
    // The mailbox r writes here for the seq-th launch in which r receives from this PE.
    __device__ uint64_t *mailbox(uint64_t seq, int r) const {
        return w + 5 * (size_t)world +
               ((size_t)(seq & 1) * world + r) * NVSHMEMRS_EXCHANGE_MAILBOX_WORDS;
    }
};

// A transfer that does not match, seen on this PE (one thread).
__device__ void exchange_fail(const Waiter &w, int pe, uint64_t why, uint64_t want,
                              uint64_t seen) {
    nvshmemrs_record_failure(w.site(pe), NVSHMEMRS_FAIL_LENGTH, why, want, seen, 0);
}

// Index of the nth receive from `peer`, or -1.
template <typename Src>
__device__ int nth_recv_from(const Src &src, int peer, int nth) {
    if constexpr (Src::UNIQUE) {
        return nth == 0 ? peer : -1;
    } else {
        for (int i = 0; i < src.n_recv(); ++i) {
            const Xfer y = src.recv(i);
            if (y.peer == peer && y.nth == nth) return i;
        }
        return -1;
    }
}

// One launch of the exchange; `code` (NVSHMEMRS_COLL_*) names a failure.
template <typename Src>
__device__ void exchange_step(const nvshmemrs_coll_header &h, const Src &src, int code) {
    wait_for_previous_kernel();
    if (block_broken(h)) return;
    const Waiter w(h, NVSHMEMRS_WAIT_OP_COLLECTIVE, code);
    const Region R{reinterpret_cast<uint64_t *>(h.scratch), h.world};
    const int ns = src.n_send(), nr = src.n_recv();
    const int me_pe = h.pes[h.rank];
    // Device counts out of range: nothing moves, and every peer this PE exchanges with is told,
    // so that it fails too instead of waiting.
    __shared__ int bad_s;
    if (threadIdx.x == 0) {
        uint64_t limit = 0, reach = 0;
        bad_s = src.bad(&limit, &reach);
        if (bad_s && blockIdx.x == 0)
            exchange_fail(w, me_pe, NVSHMEMRS_EXCHANGE_BOUNDS, limit, reach);
    }
    __syncthreads();
    const bool bad = bad_s != 0;

    // 1. Block 0, a thread per peer this PE receives from: where each transfer goes (offsets in
    // the region, the same on every PE), into its mailbox on the peer, then arrive. No fence
    // before: the receive buffers were last touched by earlier kernels on the stream, complete
    // by now (prims/pdl.cuh).
    if (blockIdx.x == 0) {
        for (int i = threadIdx.x; i < nr; i += blockDim.x) {
            const Xfer x = src.recv(i);
            if (x.peer == h.rank || x.nth != 0) continue;
            const int pe = h.pes[x.peer];
            const uint64_t seq = *R.received(x.peer) + 1;
            uint64_t *box = R.mailbox(seq, h.rank);
            for (int j = i, k = 0; j < nr && k < x.of; ++j) {
                const Xfer y = src.recv(j);
                if (y.peer != x.peer) continue;
                const uint64_t offset = (uint64_t)((uintptr_t)y.addr - (uintptr_t)h.scratch);
                nvshmem_uint64_p(box + 1 + 2 * y.nth, offset, pe);
                nvshmem_uint64_p(box + 2 + 2 * y.nth, size_word(y), pe);
                ++k;
            }
            nvshmem_uint64_p(box, (uint64_t)x.of | (bad ? XCH_BAD : 0), pe);
            nvshmem_fence();
            nvshmemx_signal_op(R.arrive(h.rank), seq, NVSHMEM_SIGNAL_SET, pe);
        }
    }

    // 2. Until every peer this PE sends to is ready for this launch (its mailbox written).
    bool ok = true;
    for (int i = threadIdx.x; i < ns && ok; i += blockDim.x) {
        const Xfer x = src.send(i);
        if (x.peer == h.rank || x.nth != 0) continue;
        ok = w.ge(R.arrive(x.peer), *R.sent(x.peer) + 1, h.pes[x.peer]);
    }
    if (__syncthreads_or(!ok)) return;

    // 3. Part blockIdx.x of every send, where the receiver said; block 0 also adds the one per
    // transfer that tells the receiver this PE has read its mailbox.
    for (int i = 0; i < ns; ++i) {
        const Xfer x = src.send(i);
        if (x.peer == h.rank) continue;
        size_t b, e;
        part_of<char>(x.bytes, gridDim.x, blockIdx.x, &b, &e);
        const uint64_t add = (e - b) + (blockIdx.x == 0 ? 1 : 0);
        if (add == 0) continue;
        const int pe = h.pes[x.peer];
        const volatile uint64_t *box = R.mailbox(*R.sent(x.peer) + 1, x.peer);
        // Every thread reads the same words: the branches below are uniform.
        const uint64_t head = box[0];
        uint64_t why = 0, want = 0, seen = 0;
        if (head & XCH_BAD) {
            why = NVSHMEMRS_EXCHANGE_PEER_ARGS;
        } else if (head != (uint64_t)x.of) {
            why = NVSHMEMRS_EXCHANGE_COUNT, want = head, seen = (uint64_t)x.of;
        } else if (box[2 + 2 * x.nth] != size_word(x)) {
            why = NVSHMEMRS_EXCHANGE_SIZES, want = box[2 + 2 * x.nth], seen = size_word(x);
        }
        uint64_t *flag = R.data(h.rank);
        if (bad || why != 0) {
            if (blockIdx.x == 0 && threadIdx.x == 0) {
                if (why != 0) exchange_fail(w, pe, why, want, seen);
                nvshmemx_signal_op(flag, XCH_MISMATCH, NVSHMEM_SIGNAL_ADD, pe);
            }
            continue;
        }
        char *dst = h.scratch + box[1 + 2 * x.nth] + b;
        block_put_signal(h, dst, x.addr + b, e - b, flag, add, pe, false, NVSHMEM_SIGNAL_ADD);
    }

    // 4. Transfers to this PE itself: the nth send into the nth receive.
    for (int i = 0; i < ns && !bad; ++i) {
        const Xfer x = src.send(i);
        if (x.peer != h.rank) continue;
        const int r = nth_recv_from(src, h.rank, x.nth);
        const int posted = r < 0 ? 0 : src.recv(r).of;
        if (posted != x.of) {
            if (blockIdx.x == 0 && threadIdx.x == 0)
                exchange_fail(w, me_pe, NVSHMEMRS_EXCHANGE_COUNT, posted, x.of);
            return;
        }
        const Xfer y = src.recv(r);
        if (size_word(y) != size_word(x)) {
            if (blockIdx.x == 0 && threadIdx.x == 0)
                exchange_fail(w, me_pe, NVSHMEMRS_EXCHANGE_SIZES, size_word(y), size_word(x));
            return;
        }
        size_t b, e;
        part_of<char>(x.bytes, gridDim.x, blockIdx.x, &b, &e);
        // In place (allgatherv from the own block): the data is there.
        if (y.addr != x.addr) block_store(y.addr + b, x.addr + b, e - b);
    }
    if (!bad && nth_recv_from(src, h.rank, 0) >= 0) {
        // Receives from itself with no send.
        bool sends_self = false;
        for (int i = 0; i < ns && !sends_self; ++i) sends_self = src.send(i).peer == h.rank;
        if (!sends_self) {
            if (blockIdx.x == 0 && threadIdx.x == 0)
                exchange_fail(w, me_pe, NVSHMEMRS_EXCHANGE_COUNT,
                              src.recv(nth_recv_from(src, h.rank, 0)).of, 0);
            return;
        }
    }

    // 5. Until every peer this PE receives from has delivered: its bytes, and one per transfer.
    ok = true;
    for (int i = threadIdx.x; i < nr && ok; i += blockDim.x) {
        const Xfer x = src.recv(i);
        if (x.peer == h.rank || x.nth != 0) continue;
        uint64_t need = 0;
        for (int j = i, k = 0; j < nr && k < x.of; ++j) {
            const Xfer y = src.recv(j);
            if (y.peer != x.peer) continue;
            need += y.bytes + 1;
            ++k;
        }
        // With its own arguments bad, this PE only waits for the peer's answer to its mark.
        if (bad) need = 1;
        const int pe = h.pes[x.peer];
        ok = w.ge(R.data(x.peer), *R.expect(x.peer) + need, pe);
        if (ok && *(volatile uint64_t *)R.data(x.peer) >= XCH_MISMATCH) {
            exchange_fail(w, pe, NVSHMEMRS_EXCHANGE_PEER, 0, 0);
            ok = false;
        }
    }
    if (__syncthreads_or(!ok) || bad) return;

    // 6. Puts through NVSHMEM complete; the last block moves the per-pair state on.
    __syncthreads();
    if (threadIdx.x == 0) {
        if (!h.all_mapped) nvshmem_quiet();
        advance_state(h.state, [&](nvshmemrs_allreduce_state *) {
            for (int i = 0; i < nr; ++i) {
                const Xfer x = src.recv(i);
                if (x.peer == h.rank) continue;
                *R.expect(x.peer) += x.bytes + 1;
                if (x.nth == 0) *R.received(x.peer) += 1;
            }
            for (int i = 0; i < ns; ++i) {
                const Xfer x = src.send(i);
                if (x.peer != h.rank && x.nth == 0) *R.sent(x.peer) += 1;
            }
        });
    }
}

// The entry points' common checks: members, rank, grid and region.
static inline bool exchange_args_ok(const nvshmemrs_exchange_args *a, int blocks) {
    if (a == NULL) return false;
    const nvshmemrs_coll_header &h = a->hdr;
    return h.n >= 1 && h.n <= h.world && h.rank >= 0 && h.rank < h.n && h.scratch != NULL &&
           blocks >= 1 && blocks <= NVSHMEMRS_FAMILY_BLOCKS;
}

}  // namespace

#endif
