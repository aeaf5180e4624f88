// Reduce (coll/family.h) through the root's receive slots: the root arrives, every other member
// puts its input into the root's slot [rank], the root reduces in rank order. Or, small and with
// every member mapped, as low-latency lines into the root's line slots (NVSHMEMRS_FAMILY_LL; every
// member gives credits, prims/ll_credit.cuh).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include "core/nvshmem_device.cuh"

#include "coll/family.h"
#include "coll/family_args.cuh"
#include "prims/chunks.cuh"
#include "prims/dispatch.cuh"
#include "prims/exchange.cuh"
#include "prims/ll.cuh"
#include "prims/ll_credit.cuh"
#include "prims/ll_reduce.cuh"
#include "prims/pdl.cuh"
#include "prims/put_signal.cuh"
#include "prims/reduce.cuh"
#include "prims/step.cuh"
#include "prims/waiter.cuh"

namespace {

// The step under the low-latency protocol.
template <typename T, int OP>
__device__ void reduce_ll(const nvshmemrs_family_args &a, const Waiter &w) {
    const nvshmemrs_coll_header &h = a.hdr;
    const Step s = begin_step(h.state);
    const uint32_t flag = ll_flag(s.value - 1);
    const size_t bytes = h.count * sizeof(T), lines = (bytes + 7) / 8;
    const char *in = static_cast<const char *>(h.input);
    size_t l0, l1;
    ll_block_lines(lines, &l0, &l1);
    auto is_root = [&](int r) { return r == a.root; };
    if (h.rank != a.root) {
        __shared__ uint4 *dst[NVSHMEMRS_FAMILY_LL_MAX_PES];
        ll_peer_slots(h, s.parity, dst);
        if (!ll_wait_credits(w, h, s, is_root)) return;
        ll_put_lines(h, dst, [&](int) { return in; }, is_root, bytes, l0, l1, flag);
        ll_end_step_credit(h, s, false);
        return;
    }
    // In place the output is the input: each thread reads line i before writing it.
    char *out = static_cast<char *>(h.output);
    const bool ok = ll_reduce_lines<T, OP>(
        h, s.parity, l0, l1, flag, w, [&](size_t i) { return load8(in, i, bytes); },
        [&](size_t i, uint2 v) { store8(out, i, bytes, v); });
    if (__syncthreads_or(!ok)) return;
    ll_end_step_credit(h, s, true);
}

template <typename T, int OP>
__global__ void reduce_kernel(nvshmemrs_family_args a) {
    const nvshmemrs_coll_header &h = a.hdr;
    wait_for_previous_kernel();
    if (block_broken(h)) return;
    const Waiter w(h, NVSHMEMRS_WAIT_OP_COLLECTIVE, NVSHMEMRS_COLL_REDUCE);
    if (a.protocol == NVSHMEMRS_FAMILY_LL) {
        reduce_ll<T, OP>(a, w);
        return;
    }
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
    const bool ll = args.protocol == NVSHMEMRS_FAMILY_LL;
    if (!family_args_ok(args, blocks) || !family_ll_ok(args) ||
        (!ll && args.hdr.count * (size_t)args.elem_bytes > args.hdr.slot_bytes))
        return cudaErrorInvalidValue;
    return (int)by_dtype(dtype, op, Launch{args, blocks, threads, stream});
}
