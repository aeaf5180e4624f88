// Reduce-scatter (coll/family.h) through the receive slots: every member puts its block for r
// into slot [rank] of r; r reduces its own block and the slots in rank order. Or, small and with
// every member mapped, as low-latency lines (NVSHMEMRS_FAMILY_LL): every member stores its block
// for r into line slot [rank] of r, which reduces them line by line in rank order. Or, with
// every member mapped, by each member loading its block of every input over the mapping
// (NVSHMEMRS_FAMILY_PULL): one pass, no slots.
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
#include "prims/ll_reduce.cuh"
#include "prims/pdl.cuh"
#include "prims/put_signal.cuh"
#include "prims/reduce.cuh"
#include "prims/step.cuh"
#include "prims/waiter.cuh"

namespace {

// The step under the low-latency protocol: no ARRIVE, as allgather's (coll/put_blocks.cuh):
// every member receives from every other, so a sender reaches this parity again only after the
// receiver has finished this step.
template <typename T, int OP>
__device__ void reduce_scatter_ll(const nvshmemrs_family_args &a, const Waiter &w,
                                  char *const *ll_base) {
    const nvshmemrs_coll_header &h = a.hdr;
    const Step s = begin_step(h.state);
    const uint32_t flag = ll_flag(s.value - 1);
    const char *in = static_cast<const char *>(h.input);
    char *out = static_cast<char *>(h.output);
    const size_t bytes = h.count * sizeof(T), lines = (bytes + 7) / 8;
    const size_t block = a.stride * sizeof(T);
    __shared__ uint4 *dst[NVSHMEMRS_FAMILY_LL_MAX_PES];
    ll_peer_slots(h, ll_base, s.parity, dst);
    size_t l0, l1;
    ll_block_lines(lines, &l0, &l1);
    ll_put_lines(
        h, dst, [&](int r) { return in + (size_t)r * block; }, [](int) { return true; }, bytes, l0,
        l1, flag);
    // In place the output is the own block: each thread reads line i of it before writing it.
    const char *own = in + (size_t)h.rank * block;
    const bool ok = ll_reduce_lines<T, OP>(
        h, s.parity, l0, l1, flag, w, [&](size_t i) { return load8(own, i, bytes); },
        [&](size_t i, uint2 v) { store8(out, i, bytes, v); });
    if (__syncthreads_or(!ok)) return;
    end_step(h);
}

// The step under the pull protocol (abi.h NVSHMEMRS_FAMILY_PULL): every member tells every
// other where its input is; block b loads part b of block [rank] of every input over the
// mapping and reduces it in rank order into the output, lets every member go on, then waits
// until every member has read its own input.
template <typename T, int OP>
__device__ void reduce_scatter_pull(const nvshmemrs_family_args &a, const Waiter &w) {
    const nvshmemrs_coll_header &h = a.hdr;
    const Step s = begin_step(h.state);
    const Layout L{h, 0, s.parity};
    size_t b, e;
    part_of<T>(h.count, gridDim.x, blockIdx.x, &b, &e);
    block_arrive_with_word(h, L, AllOthers{}, s.value, h.input);
    auto arrive = [&](int r) { return L.counter(NVSHMEMRS_FAMILY_ARRIVE, r); };
    if (!block_wait_others(w, h, arrive, s.value)) return;
    __shared__ const T *src[NVSHMEMRS_FAMILY_LL_MAX_PES];
    pull_sources(h, L, static_cast<const T *>(h.input), (size_t)h.rank * a.stride, src);
    // In place the output is the own block: each thread reads element i before writing it.
    block_reduce<T, OP, PEER_VECTORS>([&](int r) { return src[r]; }, h.n,
                                     static_cast<T *>(h.output), b, e, true, h.n);
    block_done_reading(h, L, AllOthers{}, s.value);
    auto data = [&](int r) { return L.counter(NVSHMEMRS_FAMILY_DATA, r); };
    if (!block_wait_others(w, h, data, s.value)) return;
    end_step(h);
}

template <typename T, int OP>
__global__ void reduce_scatter_kernel(nvshmemrs_family_args a) {
    const nvshmemrs_coll_header &h = a.hdr;
    // The line region's bases before the wait (prims/ll.cuh ll_peer_bases).
    __shared__ char *ll_base[NVSHMEMRS_FAMILY_LL_MAX_PES];
    if (a.protocol == NVSHMEMRS_FAMILY_LL) ll_peer_bases(h, ll_base);
    wait_for_previous_kernel();
    if (block_broken(h)) return;
    const Waiter w(h, NVSHMEMRS_WAIT_OP_COLLECTIVE, a.code);
    if (a.protocol == NVSHMEMRS_FAMILY_LL) {
        reduce_scatter_ll<T, OP>(a, w, ll_base);
        return;
    }
    if (a.protocol == NVSHMEMRS_FAMILY_PULL) {
        reduce_scatter_pull<T, OP>(a, w);
        return;
    }
    const Step s = begin_step(h.state);
    const Layout L{h, 0, s.parity};
    const T *in = static_cast<const T *>(h.input);
    size_t b, e;
    part_of<T>(h.count, gridDim.x, blockIdx.x, &b, &e);
    block_put_signal_all(
        h,
        [&](int r, char **dst, const char **src, size_t *bytes) {
            *dst = L.slot(h.rank) + b * sizeof(T);
            *src = reinterpret_cast<const char *>(in + (size_t)r * a.stride + b);
            *bytes = (e - b) * sizeof(T);
        },
        L.counter(NVSHMEMRS_FAMILY_DATA, h.rank), s.value);
    auto data = [&](int r) { return L.counter(NVSHMEMRS_FAMILY_DATA, r); };
    if (!block_wait_others(w, h, data, s.value)) return;
    const T *own = in + (size_t)h.rank * a.stride;
    auto src = [&](int r) -> const T * {
        return r == h.rank ? own : reinterpret_cast<const T *>(L.slot(r));
    };
    block_reduce<T, OP>(src, h.n, static_cast<T *>(h.output), b, e, true, h.n);
    end_step(h);
}

NVSHMEMRS_DTYPE_LAUNCHER(Launch, reduce_scatter_kernel, nvshmemrs_family_args);

}  // namespace

// output = op over members of their input block [rank] (hdr.count elements).
extern "C" int nvshmemrs_reduce_scatter(int dtype, int op, nvshmemrs_family_args args, int blocks,
                                        int threads, cudaStream_t stream) {
    if (!family_args_ok(args, blocks) || !family_protocol_ok(args, false, true) ||
        args.stride < args.hdr.count ||
        (!family_slotless(args) && args.hdr.count * (size_t)args.elem_bytes > args.hdr.slot_bytes))
        return cudaErrorInvalidValue;
    return (int)by_dtype(dtype, op, Launch{args, blocks, threads, stream});
}
