// Programmatic dependent launch (sm_90+), shared by the put, channel and collective kernels
// (core/device_put.cu, pipeline/channel.cu, coll/): a kernel launched right behind another on
// the stream may start its blocks early, but waits in wait_for_previous_kernel() until that
// kernel has completed and its memory is visible, so stream order is kept while the launch gap
// is hidden. Ignored before sm_90.
#ifndef NVSHMEM_RS_PDL_CUH
#define NVSHMEM_RS_PDL_CUH

#include <cuda_runtime.h>

// Waits for the previous kernel on the stream and lets the next one launch early.
static __device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Launches `kernel` with programmatic stream serialization allowed. `blocks` is the grid (an
// int converts to a one-dimensional one).
template <typename... Params, typename... Args>
static cudaError_t launch_pdl(void (*kernel)(Params...), dim3 blocks, int threads,
                              cudaStream_t stream, Args... args) {
    cudaLaunchConfig_t config = {};
    config.gridDim = blocks;
    config.blockDim = dim3(threads);
    config.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attr;
    config.numAttrs = 1;
    cudaError_t err = cudaLaunchKernelEx(&config, kernel, args...);
    // Returned to the caller: taken off the runtime's last error too, where a later launch
    // checked with cudaGetLastError would otherwise report it as its own.
    if (err != cudaSuccess) (void)cudaGetLastError();
    return err;
}

#endif
