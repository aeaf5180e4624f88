/*
 * C declarations of the runtime's entry points in the device-linked module (core/runtime.cu
 * defines them). bindgen reads this header, as every .h under device/ (nvshmem-sys/build.rs).
 */
#ifndef NVSHMEM_RS_RUNTIME_H
#define NVSHMEM_RS_RUNTIME_H

#include <nvshmem_host.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Fills *attr as NVSHMEMX_INIT_ATTR_INITIALIZER does (versions set, everything else empty). */
void nvshmemrs_init_attr_default(nvshmemx_init_attr_t *attr);

/*
 * Initialises NVSHMEM like the header's inline nvshmemx_init_attr, but returns the status of
 * nvshmemi_init_thread instead of exiting the process on failure. It must be compiled into the
 * device-linked module: init registers the NVSHMEM device state of the module it lives in.
 */
int nvshmemrs_init_attr(unsigned int flags, nvshmemx_init_attr_t *attr, int *provided_thread_support);

/* The finalize entry point behind the header's inline nvshmem_finalize. */
void nvshmemrs_finalize(void);

/* NVSHMEM version of the headers and device library this binary was built against. */
void nvshmemrs_compiled_version(int *major, int *minor, int *patch);

/*
 * Asks the CUDA runtime (linked statically) how many devices there are. Returns the cudaError_t
 * of the first call that failed, named by *failed_call: 0 cudaGetDeviceCount, 1
 * cudaDriverGetVersion, 2 cudaRuntimeGetVersion; *driver_version is 0 when no driver is
 * installed. *error_name and *error_string point to static strings describing the return code.
 */
int nvshmemrs_cuda_probe(int *device_count, int *driver_version, int *runtime_version,
                         int *failed_call, const char **error_name, const char **error_string);

/* Static name and description of a cudaError_t. */
void nvshmemrs_cuda_error_strings(int code, const char **name, const char **text);

/* cudaSetDevice; returns its cudaError_t. NVSHMEM binds to the device current at init. */
int nvshmemrs_cuda_set_device(int device);

/*
 * Launches one thread that puts 1000 + my_pe into a fresh symmetric int on its own PE with the
 * device API, quiets, and reports what the device saw. Returns a cudaError_t (0 on success).
 * Call after init.
 */
int nvshmemrs_device_self_check(int *pe, int *n_pes, int *value);

/*
 * Sets the pretend node size the device code's nvshmem_ptr honours (core/nvshmem_device.cuh):
 * with g > 0, a peer outside this PE's run of g consecutive PEs counts as unmapped (NULL), as
 * on another node; 0 turns it off. Returns a cudaError_t. Call once after init, before any
 * kernel (src/core/node.rs, NVSH_PRETEND_NODE_SIZE).
 */
int nvshmemrs_set_pretend_node_size(int g);

#ifdef __cplusplus
}
#endif

#endif
