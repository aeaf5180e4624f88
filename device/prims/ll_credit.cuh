// Credits of the rooted low-latency steps (broadcast, reduce): where the writer of a line slot
// never hears from its reader within a step, it must not write the slot of a parity again
// before the reader has read the last lines there. Every member gives every other member a
// credit when a step ends (its lines read and zeroed), whatever its role: the root moves from
// call to call, so any member may write next. A writer waits for every reader's credit of the
// last low-latency step of the same parity (the state's ll_last), which in a steady stream of
// calls has long arrived: no round trip on the critical path.
//
// The credit is block 0's ARRIVE counter [parity][giver's rank] on the receiver, set to the
// step's value. The handshake steps set the same counters (to their own, larger values at
// their start, once the giver's earlier steps are done), so a credit is never lower than an
// older one and waits stay `>=`.
#ifndef NVSHMEM_RS_LL_CREDIT_CUH
#define NVSHMEM_RS_LL_CREDIT_CUH

#include "core/nvshmem_device.cuh"
#include <stdint.h>

#include "abi.h"
#include "prims/step.cuh"
#include "prims/waiter.cuh"

// Internal linkage: see prims/reduce.cuh.
namespace {

// Waits (the whole block) until every reader r with reads(r) has given its credit of the last
// low-latency step at this parity. False when a wait timed out or the workspace broke.
template <typename Reads>
__device__ __forceinline__ bool ll_wait_credits(const Waiter &w, const nvshmemrs_coll_header &h,
                                                const Step &s, Reads reads) {
    const Layout L{h, 0, s.parity};
    const uint64_t want = h.state->ll_last[s.parity];
    bool ok = true;
    for (int r = threadIdx.x; r < h.n && ok; r += blockDim.x)
        if (r != h.rank && reads(r))
            ok = w.ge(L.counter_at(NVSHMEMRS_FAMILY_ARRIVE, r, 0), want, h.pes[r]);
    return !__syncthreads_or(!ok);
}

// The end of a low-latency rooted step, on every member: as end_step, and the last block
// gives every other member this step's credit and records the step as the parity's last.
// Where this member read lines in the step (`read`), each block's zeroing stores are ordered
// before its count, and the last block's system fence before the credits, so a writer that
// sees a credit stores after the zeroes. A member that only wrote has no zeroes of this step
// to order, and those of its earlier steps were done when their kernels completed: no fence,
// which would otherwise wait for its own lines to land before the kernel may end. A lone block
// counts nothing: its system fence alone orders its zeroes.
__device__ __forceinline__ void ll_end_step_credit(const nvshmemrs_coll_header &h, const Step &s,
                                                   bool read) {
    __syncthreads();
    if (threadIdx.x != 0) return;
    if (read && gridDim.x > 1) __threadfence();
    advance_state(h.state, [&](nvshmemrs_allreduce_state *st) {
        if (read) __threadfence_system();
        const Layout L{h, 0, s.parity};
        for (int r = 0; r < h.n; ++r)
            if (r != h.rank)
                nvshmemx_signal_op(L.counter_at(NVSHMEMRS_FAMILY_ARRIVE, h.rank, 0), s.value,
                                   NVSHMEM_SIGNAL_SET, h.pes[r]);
        st->ll_last[s.parity] = s.value;
    });
}

}  // namespace

#endif
