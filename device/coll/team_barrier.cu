// Team barrier on a stream (coll/family.h): every member completes what it issued, tells every
// other member it has arrived (ARRIVE counters of the family's step layout), and waits for
// every other member's arrival. The deadline and checked mode come with the family's header.
#include <cuda_runtime.h>
#include "core/nvshmem_device.cuh"

#include "coll/family.h"
#include "coll/family_args.cuh"
#include "prims/exchange.cuh"
#include "prims/fence.cuh"
#include "prims/pdl.cuh"
#include "prims/step.cuh"
#include "prims/waiter.cuh"

namespace {

__global__ void team_barrier_kernel(nvshmemrs_family_args a) {
    const nvshmemrs_coll_header &h = a.hdr;
    wait_for_previous_kernel();
    if (block_broken(h)) return;
    const Waiter w(h, NVSHMEMRS_WAIT_OP_COLLECTIVE, a.code);
    const Step s = begin_step(h.state);
    const Layout L{h, 0, s.parity};
    // This PE's puts through NVSHMEM complete, and its earlier kernels' stores to peers are
    // ordered, before any member learns that it arrived.
    if (threadIdx.x == 0) nvshmem_quiet();
    __syncthreads();
    fence_acq_rel_sys();
    block_arrive(h, L, AllOthers{}, s.value);
    auto arrive = [&](int r) { return L.counter(NVSHMEMRS_FAMILY_ARRIVE, r); };
    if (!block_wait_others(w, h, arrive, s.value)) return;
    end_step(h);
}

}  // namespace

// A barrier over the members, in stream order: each member completes what it issued before
// (puts through NVSHMEM, stores to peers), then waits until every member has arrived. One
// block; hdr.input and hdr.output are not used.
extern "C" int nvshmemrs_team_barrier(nvshmemrs_family_args args, int blocks, int threads,
                                      cudaStream_t stream) {
    if (!family_args_ok(args, blocks) || args.protocol != NVSHMEMRS_FAMILY_HANDSHAKE || blocks != 1)
        return cudaErrorInvalidValue;
    return (int)launch_pdl(team_barrier_kernel, blocks, threads, stream, args);
}
