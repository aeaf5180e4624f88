// Handshakes of the direct protocols (no slots): per block, one counter per (source rank, block),
// set to the call number by each peer.
#ifndef NVSHMEM_RS_DIRECT_CUH
#define NVSHMEM_RS_DIRECT_CUH

#include "core/nvshmem_device.cuh"
#include <stddef.h>
#include <stdint.h>

#include "abi.h"
#include "prims/fence.cuh"
#include "prims/waiter.cuh"

// Internal linkage: see prims/reduce.cuh.
namespace {

// Thread r (r != rank) sets this block's counter on member r to `value`. With `release` it
// first fences at system scope: called after a barrier, that orders everything the block
// stored (and read) before the barrier ahead of the signal, with one fence per signalling
// thread instead of one per thread.
__device__ __forceinline__ void direct_signal(const nvshmemrs_coll_header &h,
                                              uint64_t *counters, uint64_t value, bool release) {
    constexpr int DB = NVSHMEMRS_ALLREDUCE_DIRECT_BLOCKS;
    const size_t mine = (size_t)h.rank * DB + blockIdx.x;
    for (int r = threadIdx.x; r < h.n; r += blockDim.x)
        if (r != h.rank) {
            if (release) fence_acq_rel_sys();
            nvshmemx_signal_op(&counters[mine], value, NVSHMEM_SIGNAL_SET, h.pes[r]);
        }
}

// Thread r waits until member r set this block's counter here to at least `value`. False, for
// every thread, when a wait failed.
__device__ __forceinline__ bool direct_wait(const Waiter &w, const nvshmemrs_coll_header &h,
                                            uint64_t *counters, uint64_t value) {
    constexpr int DB = NVSHMEMRS_ALLREDUCE_DIRECT_BLOCKS;
    bool ok = true;
    for (int r = threadIdx.x; r < h.n && ok; r += blockDim.x)
        if (r != h.rank) ok = w.ge(&counters[(size_t)r * DB + blockIdx.x], value, h.pes[r]);
    return !__syncthreads_or(!ok);
}

// The direct two-shot's handshake for this block: direct_signal (released after a barrier
// when the block `stored`, so that what it stored is visible first), then direct_wait.
__device__ bool direct_handshake(const Waiter &w, const nvshmemrs_coll_header &h,
                                 uint64_t *counters, uint64_t call, bool stored) {
    if (stored) __syncthreads();
    direct_signal(h, counters, call, stored);
    return direct_wait(w, h, counters, call);
}

}  // namespace

#endif
