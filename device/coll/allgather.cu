// Allgather (coll/family.h): every member puts its input into block [its rank] of every other
// member's output once that member has arrived (coll/put_blocks.cuh).
#include <cuda_runtime.h>

#include "coll/family.h"
#include "coll/family_args.cuh"
#include "coll/put_blocks.cuh"

namespace {

__global__ void allgather_kernel(nvshmemrs_family_args a) {
    if (a.protocol == NVSHMEMRS_FAMILY_LL)
        ll_blocks_step<false>(a);
    else
        put_blocks_step<false>(a);
}

}  // namespace

// Every member's input (hdr.count elements) into block [its rank] of every member's output
// (blocks `stride` apart); in place when input is the own block of the output.
extern "C" int nvshmemrs_allgather(nvshmemrs_family_args args, int blocks, int threads,
                                   cudaStream_t stream) {
    if (!family_args_ok(args, blocks) || args.stride < args.hdr.count || !family_ll_ok(args))
        return cudaErrorInvalidValue;
    return (int)launch_pdl(allgather_kernel, blocks, threads, stream, args);
}
