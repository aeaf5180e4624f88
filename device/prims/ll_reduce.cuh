// Reductions over low-latency lines (prims/ll.cuh): the one-shot allreduce's and the family's
// reduce-scatter's loop.
#ifndef NVSHMEM_RS_LL_REDUCE_CUH
#define NVSHMEM_RS_LL_REDUCE_CUH

#include <stddef.h>
#include <stdint.h>

#include "abi.h"
#include "prims/ll.cuh"
#include "prims/reduce.cuh"
#include "prims/waiter.cuh"

// Internal linkage: see prims/reduce.cuh.
namespace {

// Lines polled together by a reduction; larger teams go group after group.
constexpr int LL_REDUCE_GROUP = 8;

// Lines [l0, l1), one per thread per pass: each is the reduction over ranks 0..n-1 in rank
// order (bit-identical on every PE) of this PE's own 8 bytes mine(i) and every other member's
// line i in the slots at `parity`, written by put(i, result). False when a wait timed out or
// the workspace broke.
template <typename T, int OP, typename Mine, typename Put>
__device__ __forceinline__ bool ll_reduce_lines(const nvshmemrs_coll_header &h, int parity,
                                                size_t l0, size_t l1, uint32_t flag,
                                                const Waiter &w, Mine mine, Put put) {
    using A = typename Acc<T>::type;
    constexpr int PER = 8 / sizeof(T) > 0 ? 8 / sizeof(T) : 1;
    for (size_t i = l0 + threadIdx.x; i < l1; i += blockDim.x) {
        const uint2 own = mine(i);
        A acc[PER];
        for (int r0 = 0; r0 < h.n; r0 += LL_REDUCE_GROUP) {
            uint2 got[LL_REDUCE_GROUP];
            if (!ld_lines<LL_REDUCE_GROUP>(h, parity, i, r0, h.rank, flag, got, w)) return false;
#pragma unroll
            for (int j = 0; j < LL_REDUCE_GROUP; ++j) {
                if (r0 + j >= h.n) continue;
                const uint2 v = r0 + j == h.rank ? own : got[j];
                const T *x = reinterpret_cast<const T *>(&v);
#pragma unroll
                for (int k = 0; k < PER; ++k) {
                    A val = to_acc<T>(x[k]);
                    acc[k] = r0 + j == 0 ? val : combine<T, OP>(acc[k], val);
                }
            }
        }
        uint2 res;
        T *r = reinterpret_cast<T *>(&res);
#pragma unroll
        for (int k = 0; k < PER; ++k) r[k] = finish<T, OP>(acc[k], h.n);
        put(i, res);
    }
    return true;
}

}  // namespace

#endif
