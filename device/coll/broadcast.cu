// Broadcast (coll/family.h): the root puts its input into every member's output once the
// member has arrived.
#include <cuda_runtime.h>
#include "core/nvshmem_device.cuh"

#include "coll/family.h"
#include "coll/family_args.cuh"
#include "prims/chunks.cuh"
#include "prims/exchange.cuh"
#include "prims/pdl.cuh"
#include "prims/put_signal.cuh"
#include "prims/step.cuh"
#include "prims/waiter.cuh"

namespace {

__global__ void broadcast_kernel(nvshmemrs_family_args a) {
    const nvshmemrs_coll_header &h = a.hdr;
    wait_for_previous_kernel();
    if (block_broken(h)) return;
    const Waiter w(h, NVSHMEMRS_WAIT_OP_COLLECTIVE, NVSHMEMRS_COLL_BROADCAST);
    const Step s = begin_step(h.state);
    const Layout L{h, 0, s.parity};
    size_t b, e;
    part_of<char>(h.count * (size_t)a.elem_bytes, gridDim.x, blockIdx.x, &b, &e);
    const char *in = static_cast<const char *>(h.input);
    char *out = static_cast<char *>(h.output);
    auto arrive = [&](int r) { return L.counter(NVSHMEMRS_FAMILY_ARRIVE, r); };
    if (h.rank != a.root) {
        block_arrive(h, L, [&](int r) { return r == a.root; }, s.value);
        if (!block_wait_one(w, L.counter(NVSHMEMRS_FAMILY_DATA, a.root), s.value, h.pes[a.root]))
            return;
    } else {
        if (in != out) block_store(out + b, in + b, e - b);
        if (!block_wait_others(w, h, arrive, s.value)) return;
        block_put_signal_all(
            h,
            [&](int, char **dst, const char **src, size_t *bytes) {
                *dst = out + b;
                *src = in + b;
                *bytes = e - b;
            },
            L.counter(NVSHMEMRS_FAMILY_DATA, h.rank), s.value);
    }
    end_step(h);
}

}  // namespace

extern "C" int nvshmemrs_broadcast(nvshmemrs_family_args args, int blocks, int threads,
                                   cudaStream_t stream) {
    if (!family_args_ok(args, blocks) || args.protocol != NVSHMEMRS_FAMILY_HANDSHAKE)
        return cudaErrorInvalidValue;
    return (int)launch_pdl(broadcast_kernel, blocks, threads, stream, args);
}
