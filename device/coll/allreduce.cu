// The allreduce entry points (coll/allreduce.h): the checks common to every algorithm, then the
// algorithm's launcher (coll/launch.cuh), which has the kernels.
#include <cuda_runtime.h>

#include "coll/allreduce.h"
#include "coll/launch.cuh"

extern "C" int nvshmemrs_allreduce(int algo, int dtype, int op, nvshmemrs_allreduce_args args,
                                   int blocks, int threads, cudaStream_t stream) {
    const nvshmemrs_coll_header &h = args.hdr;
    if (h.n < 1 || h.n > h.world || h.rank < 0 || h.rank >= h.n || blocks < 1)
        return cudaErrorInvalidValue;
    // The slot protocols' counters are per block.
    if (algo >= 0 && algo < NVSHMEMRS_ALLREDUCE_ALGOS && blocks > NVSHMEMRS_ALLREDUCE_SLOT_BLOCKS)
        return cudaErrorInvalidValue;
    cudaError_t (*launch)(int, int, const nvshmemrs_allreduce_args &, int, int, cudaStream_t);
    switch (algo) {
    case NVSHMEMRS_ALGO_ONESHOT: launch = nvshmemrs::allreduce_oneshot; break;
    case NVSHMEMRS_ALGO_TWOSHOT: launch = nvshmemrs::allreduce_twoshot; break;
    case NVSHMEMRS_ALGO_RING: launch = nvshmemrs::allreduce_ring; break;
    case NVSHMEMRS_ALGO_RECURSIVE_DOUBLING: launch = nvshmemrs::allreduce_recursive_doubling; break;
    case NVSHMEMRS_ALGO_ONESHOT_LL: launch = nvshmemrs::allreduce_oneshot_ll; break;
    case NVSHMEMRS_ALGO_TWOSHOT_DIRECT: launch = nvshmemrs::allreduce_twoshot_direct; break;
    case NVSHMEMRS_ALGO_TWOSHOT_PUSH: launch = nvshmemrs::allreduce_twoshot_push; break;
    default: return cudaErrorInvalidValue;
    }
    return (int)launch(dtype, op, args, blocks, threads, stream);
}
