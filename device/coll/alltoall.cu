// Alltoall (coll/family.h): every member puts block [r] of its input into block [its rank] of
// member r's output once r has arrived (coll/put_blocks.cuh).
#include <cuda_runtime.h>

#include "coll/family.h"
#include "coll/family_args.cuh"
#include "coll/put_blocks.cuh"

namespace {

__global__ void alltoall_kernel(nvshmemrs_family_args a) {
    if (a.protocol == NVSHMEMRS_FAMILY_LL)
        ll_blocks_step<true>(a);
    else
        put_blocks_step<true>(a);
}

}  // namespace

// Block [r] of every member's input into block [its rank] of member r's output.
extern "C" int nvshmemrs_alltoall(nvshmemrs_family_args args, int blocks, int threads,
                                  cudaStream_t stream) {
    if (!family_args_ok(args, blocks) || args.stride < args.hdr.count || !family_ll_ok(args))
        return cudaErrorInvalidValue;
    return (int)launch_pdl(alltoall_kernel, blocks, threads, stream, args);
}
