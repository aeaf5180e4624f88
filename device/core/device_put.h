/*
 * Device-initiated puts (src/p2p/device_put.rs): kernels whose blocks each move one chunk with
 * NVSHMEM's block-scoped put. All return a cudaError_t from the launch (0 on success).
 */
#ifndef NVSHMEM_RS_DEVICE_PUT_H
#define NVSHMEM_RS_DEVICE_PUT_H

#include <nvshmem_host.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Puts `bytes` from src (local) to dest on `pe`, split over `blocks` blocks of `threads`
 * threads (nvshmemx_putmem_nbi_block per block). With `quiet` set, thread 0 of each block ends
 * with nvshmem_quiet(), so the data has arrived when the kernel completes; otherwise it arrives
 * by the next quiet.
 */
int nvshmemrs_put_block(void *dest, const void *src, size_t bytes, int pe, int blocks,
                        int threads, int quiet, cudaStream_t stream);

/*
 * Puts `bytes` from src to dest on `pe`, and updates the signal word `sig` on `pe` only after
 * the data (nvshmemx_putmem_signal_nbi_block). sig_op is NVSHMEM_SIGNAL_SET or _ADD.
 * For SET the whole transfer is one block. For ADD up to `blocks` blocks each add a share of
 * `value` (every share >= 1, shares sum to `value`), so `sig` reaches old + value only when
 * every chunk has landed.
 */
int nvshmemrs_put_signal_block(void *dest, const void *src, size_t bytes, uint64_t *sig,
                               uint64_t value, int sig_op, int pe, int blocks, int threads,
                               cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
