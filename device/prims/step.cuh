// Steps of the slot protocols: each launch reads the device-resident state (coll/allreduce.h),
// waits for counter targets derived from it, and the last block advances it for the next launch.
#ifndef NVSHMEM_RS_STEP_CUH
#define NVSHMEM_RS_STEP_CUH

#include <nvshmem.h>
#include <stddef.h>
#include <stdint.h>

#include "abi.h"

// Internal linkage: see prims/reduce.cuh.
namespace {

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
__device__ void end_step(const nvshmemrs_coll_header &h, int algo, const Step &s) {
    __syncthreads();
    if (threadIdx.x == 0) {
        // Puts that went through NVSHMEM (no peer mapping) complete here, so the caller may
        // reuse input and output as soon as the kernel is done.
        if (!h.all_mapped) nvshmem_quiet();
        advance_state(h.state, [&](nvshmemrs_allreduce_state *st) {
            if (algo >= 0) {
                st->expected[algo][0][s.parity] = s.want[0];
                st->expected[algo][1][s.parity] = s.want[1];
            }
        });
    }
}

// Where the slot protocols' slots and counters of this step live in the workspace.
struct Layout {
    const nvshmemrs_coll_header &h;
    int algo, parity;
    __device__ char *slot(int i) const {
        return h.scratch + ((size_t)parity * h.world + i) * h.slot_bytes;
    }
    __device__ uint64_t *counters(int phase) const {
        return h.flags + ((size_t)(algo * 2 + phase) * 2 + parity) * h.world;
    }
};

}  // namespace

#endif
