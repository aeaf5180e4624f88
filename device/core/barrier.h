/*
 * Barrier and stream signal wait with deadlines (src/sync/barrier.rs, src/p2p/stream_rma.rs).
 * NVSHMEM's own barrier_all and signal_wait_until_on_stream spin without end on a dead peer;
 * these record a timeout in the runtime's host-mapped status record (abi.h,
 * prims/deadline.cuh) and return.
 *
 * Barrier: every PE adds 1 to arrivals[me] on every other PE, then waits until arrivals[q] on
 * itself reaches its own barrier count for every q. Counters only grow, so consecutive barriers
 * need no reset; the count lives on the device (state[0]), so a captured graph replays right.
 * state[1] is the runtime's broken word: set by the first failed wait, after which every later
 * barrier and signal wait returns at once.
 */
#ifndef NVSHMEM_RS_BARRIER_H
#define NVSHMEM_RS_BARRIER_H

#include <nvshmem_host.h>
#include <stddef.h>
#include <stdint.h>

#include "abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One barrier over all PEs, in stream order. Returns a cudaError_t. */
int nvshmemrs_barrier(nvshmemrs_barrier_args args, cudaStream_t stream);

/*
 * Makes `stream` wait until *signal (a local symmetric word, set by PE `peer`, or -1 if any)
 * satisfies `cmp value` (NVSHMEM_CMP_*), or the deadline passes (then the failure is recorded
 * and the runtime marked broken). Returns a cudaError_t (cudaErrorInvalidValue for a bad cmp).
 */
int nvshmemrs_signal_wait_on_stream(uint64_t *signal, int cmp, uint64_t value, int peer,
                                    uint64_t *state, void *wait_status, uint64_t timeout_ns,
                                    cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
