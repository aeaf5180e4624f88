// Reduce (coll/family.h) through the root's receive slots: the root arrives, every other member
// puts its input into the root's slot [rank], the root reduces in rank order.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include "core/nvshmem_device.cuh"

#include "coll/family.h"
#include "coll/family_args.cuh"
#include "prims/chunks.cuh"
#include "prims/dispatch.cuh"
#include "prims/exchange.cuh"
#include "prims/pdl.cuh"
#include "prims/put_signal.cuh"
#include "prims/reduce.cuh"
#include "prims/step.cuh"
#include "prims/waiter.cuh"

namespace {

template <typename T, int OP>
__global__ void reduce_kernel(nvshmemrs_family_args a) {
    const nvshmemrs_coll_header &h = a.hdr;
    wait_for_previous_kernel();
    if (block_broken(h)) return;
    const Waiter w(h, NVSHMEMRS_WAIT_OP_COLLECTIVE, NVSHMEMRS_COLL_REDUCE);
    const Step s = begin_step(h.state);
    const Layout L{h, 0, s.parity};
    const T *in = static_cast<const T *>(h.input);
    size_t b, e;
    part_of<T>(h.count, gridDim.x, blockIdx.x, &b, &e);
    if (h.rank != a.root) {
        if (!block_wait_one(w, L.counter(NVSHMEMRS_FAMILY_ARRIVE, a.root), s.value,
                            h.pes[a.root]))
            return;
        block_put_signal(h, L.slot(h.rank) + b * sizeof(T),
                         reinterpret_cast<const char *>(in + b), (e - b) * sizeof(T),
                         L.counter(NVSHMEMRS_FAMILY_DATA, h.rank), s.value, h.pes[a.root]);
    } else {
        block_arrive(h, L, AllOthers{}, s.value);
        auto data = [&](int r) { return L.counter(NVSHMEMRS_FAMILY_DATA, r); };
        if (!block_wait_others(w, h, data, s.value)) return;
        auto src = [&](int r) -> const T * {
            return r == h.rank ? in : reinterpret_cast<const T *>(L.slot(r));
        };
        block_reduce<T, OP>(src, h.n, static_cast<T *>(h.output), b, e, true, h.n);
    }
    end_step(h);
}

NVSHMEMRS_DTYPE_LAUNCHER(Launch, reduce_kernel, nvshmemrs_family_args);

}  // namespace

extern "C" int nvshmemrs_reduce(int dtype, int op, nvshmemrs_family_args args, int blocks,
                                int threads, cudaStream_t stream) {
    if (!family_args_ok(args, blocks) || args.protocol != NVSHMEMRS_FAMILY_HANDSHAKE ||
        args.hdr.count * (size_t)args.elem_bytes > args.hdr.slot_bytes)
        return cudaErrorInvalidValue;
    return (int)by_dtype(dtype, op, Launch{args, blocks, threads, stream});
}
