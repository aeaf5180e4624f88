// The step allgather and alltoall share (coll/family.h): every member puts a block into block
// [its rank] of every other member's output once that member has arrived, and waits for the
// blocks put into its own. They differ only in what each receiver gets: allgather sends every
// member the same input, alltoall input block [r] to member r (PER_PEER).
#ifndef NVSHMEM_RS_PUT_BLOCKS_CUH
#define NVSHMEM_RS_PUT_BLOCKS_CUH

#include "core/nvshmem_device.cuh"

#include "abi.h"
#include "prims/chunks.cuh"
#include "prims/exchange.cuh"
#include "prims/pdl.cuh"
#include "prims/put_signal.cuh"
#include "prims/step.cuh"
#include "prims/waiter.cuh"

namespace {

// One launch of the step; `code` (NVSHMEMRS_COLL_*) names a timeout.
template <bool PER_PEER>
__device__ void put_blocks_step(const nvshmemrs_family_args &a, int code) {
    const nvshmemrs_coll_header &h = a.hdr;
    wait_for_previous_kernel();
    if (block_broken(h)) return;
    const Waiter w(h, NVSHMEMRS_WAIT_OP_COLLECTIVE, code);
    const Step s = begin_step(h.state);
    const Layout L{h, 0, s.parity};
    size_t b, e;
    part_of<char>(h.count * (size_t)a.elem_bytes, gridDim.x, blockIdx.x, &b, &e);
    const size_t block_bytes = a.stride * (size_t)a.elem_bytes;
    const char *in = static_cast<const char *>(h.input);
    // What member r receives from this PE.
    auto src = [&](int r) { return in + (PER_PEER ? (size_t)r * block_bytes : 0) + b; };
    char *mine = static_cast<char *>(h.output) + (size_t)h.rank * block_bytes;
    block_arrive(h, L, AllOthers{}, s.value);
    // The own block; in place (allgather from the own block), it is there already.
    if (src(h.rank) != mine + b) block_store(mine + b, src(h.rank), e - b);
    auto arrive = [&](int r) { return L.counter(NVSHMEMRS_FAMILY_ARRIVE, r); };
    if (!block_wait_others(w, h, arrive, s.value)) return;
    block_put_signal_all(
        h,
        [&](int r, char **dst, const char **from, size_t *bytes) {
            *dst = mine + b;
            *from = src(r);
            *bytes = e - b;
        },
        L.counter(NVSHMEMRS_FAMILY_DATA, h.rank), s.value);
    auto data = [&](int r) { return L.counter(NVSHMEMRS_FAMILY_DATA, r); };
    if (!block_wait_others(w, h, data, s.value)) return;
    end_step(h);
}

}  // namespace

#endif
