// NVSHMEM's API for our device code: the host API and the device RMA, signal, atomic and wait
// functions, without NVSHMEM's device-side collectives and tile API. No kernel here calls
// those, and parsing them made every compile unit cost nvcc about 4 s more per architecture
// (about 40% of a clean build). Include this instead of <nvshmem.h> and <nvshmemx.h> in every
// .cu and .cuh, so that no unit pulls the skipped headers back in.
#pragma once

// nvshmemx_defines.h includes the device collectives (non_abi/device/coll/defines.cuh) at its
// end; their include guard, defined first, skips them. A release that renames the guard only
// makes the build slower again, not wrong.
#ifndef _NVSHMEMI_DEVICE_COLL_DEFINES_H_
#define _NVSHMEMI_DEVICE_COLL_DEFINES_H_
#endif

#include <non_abi/nvshmem_build_options.h>
#include <nvshmem_host.h>
#include <device/nvshmem_defines.h>
#include <device/nvshmemx_defines.h>

// Pretend nodes (NVSH_PRETEND_NODE_SIZE, src/core/node.rs): with a size g > 0 set at init
// (nvshmemrs_set_pretend_node_size), a peer outside this PE's run of g consecutive PEs counts
// as unmapped, as a peer on another node does, so every path to it takes NVSHMEM puts and
// signals. Every nvshmem_ptr of our device code goes through here (the macro below), so no
// kernel can store to a pretend-remote peer directly.
extern __constant__ int nvshmemrs_pretend_node_size;

__device__ inline void *nvshmemrs_ptr(const void *addr, int pe) {
    const int g = nvshmemrs_pretend_node_size;
    if (g > 0 && pe / g != nvshmem_my_pe() / g) return NULL;
    return nvshmem_ptr(addr, pe);
}

#define nvshmem_ptr(addr, pe) nvshmemrs_ptr(addr, pe)
