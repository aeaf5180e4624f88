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
