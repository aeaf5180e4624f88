// Host-side entry points of the runtime (src/core/runtime/): init, finalize, version and CUDA
// probe.
// Compiled with -rdc=true and device-linked together with libnvshmem_device.a and every other
// .cu under device/: nvshmemi_init_thread registers the device state of this module, so kernels
// that call NVSHMEM device functions must live in the same device link.
#include <cuda_runtime.h>
#include "core/nvshmem_device.cuh"

#include "core/runtime.h"

extern "C" void nvshmemrs_init_attr_default(nvshmemx_init_attr_t *attr) {
    nvshmemx_init_attr_t init = NVSHMEMX_INIT_ATTR_INITIALIZER;
    *attr = init;
}

extern "C" int nvshmemrs_init_attr(unsigned int flags, nvshmemx_init_attr_t *attr,
                                   int *provided_thread_support) {
    int provided = 0;
    nvshmemi_version_t version = {NVSHMEM_VENDOR_MAJOR_VERSION, NVSHMEM_VENDOR_MINOR_VERSION,
                                  NVSHMEM_VENDOR_PATCH_VERSION};
    if (attr != NULL) {
        nvshmemx_init_init_attr_ver_only((*attr));
    }
    // Same call as the inline nvshmemx_init_attr, minus its exit(-1) on failure.
    int status = nvshmemi_init_thread(NVSHMEM_THREAD_SERIALIZED, &provided, flags, attr, version);
    if (provided_thread_support != NULL) {
        *provided_thread_support = provided;
    }
    return status;
}

extern "C" void nvshmemrs_finalize(void) { nvshmemi_finalize(); }

extern "C" void nvshmemrs_compiled_version(int *major, int *minor, int *patch) {
    *major = NVSHMEM_VENDOR_MAJOR_VERSION;
    *minor = NVSHMEM_VENDOR_MINOR_VERSION;
    *patch = NVSHMEM_VENDOR_PATCH_VERSION;
}

extern "C" int nvshmemrs_cuda_probe(int *device_count, int *driver_version, int *runtime_version,
                                    int *failed_call, const char **error_name,
                                    const char **error_string) {
    *device_count = 0;
    *driver_version = 0;
    *runtime_version = 0;
    *failed_call = 0;
    // Neither call needs a driver: without one they report version 0 (and success).
    const cudaError_t driver = cudaDriverGetVersion(driver_version);
    const cudaError_t runtime = cudaRuntimeGetVersion(runtime_version);
    cudaError_t err = cudaGetDeviceCount(device_count);
    if (err != cudaSuccess) {
        *device_count = 0;
    } else if (driver != cudaSuccess) {
        err = driver;
        *failed_call = 1;
    } else if (runtime != cudaSuccess) {
        err = runtime;
        *failed_call = 2;
    }
    if (err != cudaSuccess) cudaGetLastError();  // no sticky error left for later runtime calls
    *error_name = cudaGetErrorName(err);
    *error_string = cudaGetErrorString(err);
    return (int)err;
}

extern "C" void nvshmemrs_cuda_error_strings(int code, const char **name, const char **text) {
    *name = cudaGetErrorName((cudaError_t)code);
    *text = cudaGetErrorString((cudaError_t)code);
}

extern "C" int nvshmemrs_cuda_set_device(int device) { return (int)cudaSetDevice(device); }

// Read by nvshmemrs_ptr (core/nvshmem_device.cuh) in every kernel of the device link.
__constant__ int nvshmemrs_pretend_node_size = 0;

extern "C" int nvshmemrs_set_pretend_node_size(int g) {
    return (int)cudaMemcpyToSymbol(nvshmemrs_pretend_node_size, &g, sizeof(g));
}

// One thread puts a value into symmetric memory on its own PE through NVSHMEM's device API and
// reads it back: proves the device link carries a registered, initialised NVSHMEM device state.
__global__ void self_check_kernel(int *sym, int *out) {
    int me = nvshmem_my_pe();
    nvshmem_int_p(sym, 1000 + me, me);
    nvshmem_quiet();
    out[0] = me;
    out[1] = nvshmem_n_pes();
    out[2] = *(volatile int *)sym;
}

extern "C" int nvshmemrs_device_self_check(int *pe, int *n_pes, int *value) {
    int *sym = (int *)nvshmem_malloc(sizeof(int));
    if (sym == NULL) {
        return (int)cudaErrorMemoryAllocation;
    }
    int *out = NULL;
    int host[3] = {-1, -1, -1};
    cudaError_t err = cudaMalloc((void **)&out, sizeof(host));
    if (err == cudaSuccess) {
        self_check_kernel<<<1, 1>>>(sym, out);
        err = cudaGetLastError();
    }
    if (err == cudaSuccess) err = cudaDeviceSynchronize();
    if (err == cudaSuccess) err = cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost);
    cudaFree(out);
    nvshmem_free(sym);
    *pe = host[0];
    *n_pes = host[1];
    *value = host[2];
    return (int)err;
}
