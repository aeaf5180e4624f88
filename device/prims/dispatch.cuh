// Runtime dtype and op codes (abi.h) to template arguments: one instantiation per pair.
#ifndef NVSHMEM_RS_DISPATCH_CUH
#define NVSHMEM_RS_DISPATCH_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "abi.h"
#include "prims/pdl.cuh"

// Declares the by_dtype functor NAME: it launches KERNEL<T, OP> with an ARGS struct, `blocks` x
// `threads`, with programmatic dependent launch (prims/pdl.cuh).
#define NVSHMEMRS_DTYPE_LAUNCHER(NAME, KERNEL, ARGS)                                  \
    struct NAME {                                                                     \
        ARGS args;                                                                    \
        int blocks, threads;                                                          \
        cudaStream_t stream;                                                          \
        template <typename T, int OP> cudaError_t run() const {                       \
            return launch_pdl(KERNEL<T, OP>, blocks, threads, stream, args);          \
        }                                                                             \
    }

// Internal linkage: see prims/reduce.cuh.
namespace {

// Calls F::template run<T, OP>() for the runtime dtype and op codes.
template <typename F, typename T> cudaError_t by_op(int op, F f) {
    switch (op) {
    case NVSHMEMRS_REDOP_SUM: return f.template run<T, NVSHMEMRS_REDOP_SUM>();
    case NVSHMEMRS_REDOP_PROD: return f.template run<T, NVSHMEMRS_REDOP_PROD>();
    case NVSHMEMRS_REDOP_MIN: return f.template run<T, NVSHMEMRS_REDOP_MIN>();
    case NVSHMEMRS_REDOP_MAX: return f.template run<T, NVSHMEMRS_REDOP_MAX>();
    case NVSHMEMRS_REDOP_AVG: return f.template run<T, NVSHMEMRS_REDOP_AVG>();
    default: return cudaErrorInvalidValue;
    }
}

template <typename F> cudaError_t by_dtype(int dtype, int op, F f) {
    switch (dtype) {
    case NVSHMEMRS_DTYPE_F32: return by_op<F, float>(op, f);
    case NVSHMEMRS_DTYPE_F64: return by_op<F, double>(op, f);
    case NVSHMEMRS_DTYPE_F16: return by_op<F, __half>(op, f);
    case NVSHMEMRS_DTYPE_BF16: return by_op<F, __nv_bfloat16>(op, f);
    case NVSHMEMRS_DTYPE_I32: return by_op<F, int32_t>(op, f);
    case NVSHMEMRS_DTYPE_I64: return by_op<F, int64_t>(op, f);
    case NVSHMEMRS_DTYPE_U32: return by_op<F, uint32_t>(op, f);
    case NVSHMEMRS_DTYPE_U64: return by_op<F, uint64_t>(op, f);
    default: return cudaErrorInvalidValue;
    }
}

}  // namespace

#endif
