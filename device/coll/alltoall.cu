// Alltoall (coll/family.h): every member puts block [r] of its input into block [its rank] of
// member r's output once r has arrived.
#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include "coll/family.h"
#include "coll/family_args.cuh"
#include "prims/chunks.cuh"
#include "prims/exchange.cuh"
#include "prims/pdl.cuh"
#include "prims/put_signal.cuh"
#include "prims/step.cuh"
#include "prims/waiter.cuh"

namespace {

__global__ void alltoall_kernel(nvshmemrs_family_args a) {
    const nvshmemrs_coll_header &h = a.hdr;
    wait_for_previous_kernel();
    if (block_broken(h)) return;
    const Waiter w(h, NVSHMEMRS_WAIT_OP_COLLECTIVE, NVSHMEMRS_COLL_ALLTOALL);
    const Step s = begin_step(h.state);
    const Layout L{h, 0, s.parity};
    size_t b, e;
    part_of<char>(h.count * (size_t)a.elem_bytes, gridDim.x, blockIdx.x, &b, &e);
    const size_t block_bytes = a.stride * (size_t)a.elem_bytes;
    const char *in = static_cast<const char *>(h.input);
    char *mine = static_cast<char *>(h.output) + (size_t)h.rank * block_bytes;
    block_arrive(h, L, AllOthers{}, s.value);
    block_store(mine + b, in + (size_t)h.rank * block_bytes + b, e - b);
    auto arrive = [&](int r) { return L.counter(NVSHMEMRS_FAMILY_ARRIVE, r); };
    if (!block_wait_from(w, h, AllOthers{}, arrive, s.value)) return;
    block_put_signal_all(
        h,
        [&](int r, char **dst, const char **src, size_t *bytes) {
            *dst = mine + b;
            *src = in + (size_t)r * block_bytes + b;
            *bytes = e - b;
        },
        L.counter(NVSHMEMRS_FAMILY_DATA, h.rank), s.value);
    auto data = [&](int r) { return L.counter(NVSHMEMRS_FAMILY_DATA, r); };
    if (!block_wait_from(w, h, AllOthers{}, data, s.value)) return;
    end_step(h);
}

}  // namespace

extern "C" int nvshmemrs_alltoall(nvshmemrs_family_args args, int blocks, int threads,
                                  cudaStream_t stream) {
    if (!family_args_ok(args, blocks) || args.stride < args.hdr.count) return cudaErrorInvalidValue;
    return (int)launch_pdl(alltoall_kernel, blocks, threads, stream, args);
}
