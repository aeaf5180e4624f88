// Allreduce kernels launched by src/coll/allreduce/run.rs; coll/allreduce.h documents the workspace
// layout. Data moves with direct stores when nvshmem_ptr maps the peer (NVLink/PCIe), else with
// NVSHMEM block puts; every block announces its delivery with one signal add per peer.
// Every kernel splits its work into gridDim.x parts, block b always handling part b, so a block
// only ever waits for the same-numbered blocks of its peers. Kernels are launched with
// programmatic dependent launch (prims/pdl.cuh): back to back on a stream, the next call's
// blocks are resident before this one ends, and wait for it before touching memory.
//
// One file of coll/ per algorithm, each with the host-side launcher declared here: every
// algorithm instantiates its kernel for 8 dtypes x 5 ops, so that they compile in parallel.
// coll/allreduce.cu has the entry points and checks the arguments common to all.
#ifndef NVSHMEM_RS_COLL_LAUNCH_CUH
#define NVSHMEM_RS_COLL_LAUNCH_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "abi.h"

// Declares the by_dtype functor NAME of an algorithm file (prims/dispatch.cuh).
#define NVSHMEMRS_ALLREDUCE_LAUNCHER(NAME, KERNEL) \
    NVSHMEMRS_DTYPE_LAUNCHER(NAME, KERNEL, nvshmemrs_allreduce_args)

namespace nvshmemrs {

// One step of an algorithm, as nvshmemrs_allreduce (coll/allreduce.h) describes it.
// cudaErrorInvalidValue for an unknown dtype or op, or a shape the algorithm does not take.
cudaError_t allreduce_oneshot(int dtype, int op, const nvshmemrs_allreduce_args &args, int blocks,
                              int threads, cudaStream_t stream);
cudaError_t allreduce_twoshot(int dtype, int op, const nvshmemrs_allreduce_args &args, int blocks,
                              int threads, cudaStream_t stream);
cudaError_t allreduce_ring(int dtype, int op, const nvshmemrs_allreduce_args &args, int blocks,
                           int threads, cudaStream_t stream);
cudaError_t allreduce_recursive_doubling(int dtype, int op, const nvshmemrs_allreduce_args &args,
                                         int blocks, int threads, cudaStream_t stream);
cudaError_t allreduce_oneshot_ll(int dtype, int op, const nvshmemrs_allreduce_args &args,
                                 int blocks, int threads, cudaStream_t stream);
cudaError_t allreduce_twoshot_direct(int dtype, int op, const nvshmemrs_allreduce_args &args,
                                     int blocks, int threads, cudaStream_t stream);
cudaError_t allreduce_twoshot_push(int dtype, int op, const nvshmemrs_allreduce_args &args,
                                   int blocks, int threads, cudaStream_t stream);

}  // namespace nvshmemrs

#endif
