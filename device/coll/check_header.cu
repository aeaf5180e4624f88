// Checked mode's header exchange (NVSHMEMRS_FAIL_MISMATCH), the entry point of coll/check.h.
#include <cuda_runtime.h>
#include "core/nvshmem_device.cuh"

#include "coll/check.h"
#include "prims/deadline.cuh"
#include "prims/pdl.cuh"
#include "prims/waiter.cuh"

namespace {

// Checked mode's header exchange (see coll/check.h). Thread 0 sends; thread t waits for and
// compares ranks t, t + blockDim.x, ...
__global__ void check_header_kernel(nvshmemrs_coll_header h, uint64_t *headers,
                                    uint64_t *header_flags, uint64_t call, uint64_t meta,
                                    int wait_op, int index) {
    wait_for_previous_kernel();
    if (block_broken(h)) return;
    const Waiter w(h, (uint32_t)wait_op, index);
    __shared__ uint64_t mine[NVSHMEMRS_ALLREDUCE_HEADER_WORDS];
    if (threadIdx.x == 0) {
        mine[0] = call;
        mine[1] = (uint64_t)h.count;
        mine[2] = meta;
        mine[3] = 0;
        // The own slot [rank] of the local copy is the put's source: symmetric memory, which
        // every transport can read (shared memory is not, off-node).
        uint64_t *slot = headers + (size_t)h.rank * NVSHMEMRS_ALLREDUCE_HEADER_WORDS;
        for (int f = 0; f < NVSHMEMRS_ALLREDUCE_HEADER_WORDS; ++f) slot[f] = mine[f];
        __threadfence();
        for (int k = 1; k < h.n; ++k) {
            int peer = (h.rank + k) % h.n;
            nvshmem_putmem_signal(slot, slot, sizeof(mine), &header_flags[h.rank], call,
                                  NVSHMEM_SIGNAL_SET, h.pes[peer]);
        }
    }
    __syncthreads();
    bool ok = true;
    for (int r = threadIdx.x; r < h.n && ok; r += blockDim.x) {
        if (r == h.rank) continue;
        ok = w.ge(&header_flags[r], call, h.pes[r]);
        if (!ok) break;
        const volatile uint64_t *theirs = headers + (size_t)r * NVSHMEMRS_ALLREDUCE_HEADER_WORDS;
        for (int f = 1; f <= 2 && ok; ++f) {
            uint64_t t = theirs[f];
            if (t != mine[f]) {
                nvshmemrs_wait_site site = w.site(h.pes[r]);
                site.index = (uint64_t)(f - 1);
                site.seq = call;
                nvshmemrs_record_failure(site, NVSHMEMRS_FAIL_MISMATCH,
                                         (uint64_t)(uintptr_t)&theirs[f], mine[f], t, 0);
                ok = false;
            }
        }
    }
    __syncthreads();
}

}  // namespace

extern "C" int nvshmemrs_check_header(nvshmemrs_coll_header hdr, uint64_t *headers,
                                      uint64_t *header_flags, uint64_t call, uint64_t meta,
                                      int wait_op, int index, cudaStream_t stream) {
    if (hdr.n < 1 || hdr.n > hdr.world || hdr.rank < 0 || hdr.rank >= hdr.n || call == 0)
        return cudaErrorInvalidValue;
    return (int)launch_pdl(check_header_kernel, 1, 32, stream, hdr, headers, header_flags, call,
                           meta, wait_op, index);
}
