// The waits of a collective's launch, on counters its peers signal: every wait has the launch's
// deadline (prims/deadline.cuh) and records a miss in the header's wait_status.
#ifndef NVSHMEM_RS_WAITER_CUH
#define NVSHMEM_RS_WAITER_CUH

#include <stdint.h>

#include "abi.h"
#include "prims/deadline.cuh"

// Internal linkage: see prims/reduce.cuh.
namespace {

// The timeout of one launch's waits (each wait's deadline starts at its first clock check) and
// where a miss is recorded.
struct Waiter {
    nvshmemrs_wait_status *status;
    uint64_t *broken;
    uint64_t timeout_ns;
    uint64_t seq;
    uint32_t op;
    int index;
    // NVSHMEM's consistency step after each wait (nvshmemrs_wait_site): not where every member
    // is mapped, since then no peer's data comes through a proxy.
    bool consistency;
    // op: NVSHMEMRS_WAIT_OP_* of the collective; index: what the record's index says (the algo
    // code).
    __device__ Waiter(const nvshmemrs_coll_header &h, uint32_t wait_op, int record_index)
        : status(static_cast<nvshmemrs_wait_status *>(h.wait_status)),
          broken(&h.state->broken),
          timeout_ns(h.timeout_ns),
          seq(h.state->steps),
          op(wait_op),
          index(record_index),
          consistency(h.all_mapped == 0) {}
    __device__ nvshmemrs_wait_site site(int peer) const {
        nvshmemrs_wait_site s;
        s.status = status;
        s.broken = broken;
        s.op = op;
        s.peer = peer;
        s.index = (uint64_t)index;
        s.seq = seq;
        s.consistency = consistency;
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
__device__ __forceinline__ bool block_broken(const nvshmemrs_coll_header &h) {
    return __syncthreads_or(threadIdx.x == 0 && *(volatile uint64_t *)&h.state->broken != 0);
}

// Waits (thread t for rank t) until counter(r) of every rank r but `rank` with from(r) reached
// `want`. False, for every thread, when a wait failed: the kernel must return without using
// the data.
template <typename Counter, typename From>
__device__ bool block_wait_from(const Waiter &w, const nvshmemrs_coll_header &h, Counter counter,
                                From from, uint64_t want) {
    bool ok = true;
    for (int r = threadIdx.x; r < h.n && ok; r += blockDim.x)
        if (r != h.rank && from(r)) ok = w.ge(counter(r), want, h.pes[r]);
    // Each waiting thread acquired (w.ge); the barrier passes that on to the block.
    return !__syncthreads_or(!ok);
}

// block_wait_from every other member.
template <typename Counter>
__device__ bool block_wait_others(const Waiter &w, const nvshmemrs_coll_header &h,
                                  Counter counter, uint64_t want) {
    return block_wait_from(
        w, h, counter, [](int) { return true; }, want);
}

// Thread 0 waits for one counter, signalled by world PE `peer`. False as above.
__device__ bool block_wait_one(const Waiter &w, uint64_t *counter, uint64_t want, int peer) {
    bool ok = threadIdx.x != 0 || w.ge(counter, want, peer);
    return !__syncthreads_or(!ok);
}

}  // namespace

#endif
