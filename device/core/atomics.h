/*
 * 64-bit atomics on a PE's symmetric memory, issued by one device thread (src/p2p/rma.rs).
 * NVSHMEM's host-side AMOs are not implemented over the NVLink/PCIe (P2P) transport, so the
 * host API runs these instead. Return a cudaError_t from the launch.
 */
#ifndef NVSHMEM_RS_ATOMICS_H
#define NVSHMEM_RS_ATOMICS_H

#include <nvshmem_host.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* *old = fetch_add(dest on pe, value). `old` is device memory. */
int nvshmemrs_atomic_fetch_add_u64(uint64_t *dest, uint64_t value, int pe, uint64_t *old,
                                   cudaStream_t stream);

/* *old = compare_swap(dest on pe, cond, value). `old` is device memory. */
int nvshmemrs_atomic_compare_swap_u64(uint64_t *dest, uint64_t cond, uint64_t value, int pe,
                                      uint64_t *old, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
