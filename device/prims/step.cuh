// Steps of the slot protocols: each launch reads the device-resident state (coll/allreduce.h):
// its step number names the parity of its slots and the value its counters are set to; the
// last block to finish advances the state for the next launch.
#ifndef NVSHMEM_RS_STEP_CUH
#define NVSHMEM_RS_STEP_CUH

#include "core/nvshmem_device.cuh"
#include <stddef.h>
#include <stdint.h>

#include "abi.h"

// Internal linkage: see prims/reduce.cuh.
namespace {

// This launch's view of the device-resident state.
struct Step {
    int parity;
    // What this step sets its counters to, and waits for its peers' counters to reach: the
    // step number + 1. Every PE launches alike, so the numbers agree; they only grow, so a
    // counter never goes back and never needs a reset, whatever grid earlier steps had.
    uint64_t value;
};

__device__ Step begin_step(const nvshmemrs_allreduce_state *st) {
    const uint64_t steps = st->steps;
    return Step{(int)(steps & 1), steps + 1};
}

// Called by thread 0 of every block at the end of a launch: the last block to get here applies
// `update` to the state and advances the step count for the next launch on the stream. Every
// block has read the state by then: a block can only finish after it started. A lone block is
// the last one: no atomic round trip. No fence before the count either way: every thread's
// reads of the state returned before the block's barrier, and the next launch on the stream sees
// the new state once this one has completed. No fence after it either: the next launch reads
// the state only past wait_for_previous_kernel, and a fence here would wait for the update's
// stores to peers (credits) to be acknowledged before the kernel may end.
template <typename Update>
__device__ __forceinline__ void advance_state(nvshmemrs_allreduce_state *st, Update update) {
    const bool last = gridDim.x == 1 || atomicAdd(&st->done, 1u) == gridDim.x - 1;
    if (last) {
        update(st);
        st->steps += 1;
        st->done = 0;
    }
}

// The end of a step: puts that went through NVSHMEM (no peer mapping) complete, so the caller
// may reuse input and output as soon as the kernel is done; then advance_state.
__device__ void end_step(const nvshmemrs_coll_header &h) {
    __syncthreads();
    if (threadIdx.x == 0) {
        if (!h.all_mapped) nvshmem_quiet();
        advance_state(h.state, [](nvshmemrs_allreduce_state *) {});
    }
}

// Where the slot protocols' slots and counters of this step live in the workspace.
struct Layout {
    const nvshmemrs_coll_header &h;
    int algo, parity;
    __device__ char *slot(int i) const {
        return h.scratch + ((size_t)parity * h.world + i) * h.slot_bytes;
    }
    // This block's counter `index` of `phase` (the same address on every PE: a sender passes
    // it to the put that signals the peer's copy). Only block b of a peer sets counter b.
    __device__ uint64_t *counter(int phase, int index) const {
        return counter_at(phase, index, blockIdx.x);
    }
    // Counter `index` of `phase` of block `block` (a whole PE's word where every block uses
    // block 0's: prims/ll_credit.cuh).
    __device__ uint64_t *counter_at(int phase, int index, unsigned block) const {
        constexpr size_t B = NVSHMEMRS_ALLREDUCE_SLOT_BLOCKS;
        return h.flags + ((((size_t)algo * 2 + phase) * 2 + parity) * h.world + index) * B +
               block;
    }
};

}  // namespace

#endif
