/*
 * Allreduce steps (src/coll/allreduce/run.rs). One launch reduces one segment of a message;
 * the host splits larger messages into segments. Every launch reads and advances a small
 * device-resident state, so the host passes no sequence numbers and a captured CUDA graph
 * replays correctly.
 *
 * Workspace (symmetric; sized by the WORLD PE count so every PE allocates alike, even PEs whose
 * team is smaller or that belong to no team):
 *   scratch:    slots [parity][slot] of slot_bytes each (slot = source rank for one/two-shot,
 *               step for ring and recursive doubling);
 *   flags:      counters [algo][phase][parity][index][block] (u64, zeroed at creation): block b
 *               of a sender sets counter b to the step's value once its data for this PE has
 *               landed, and block b of the receiver waits for that counter only;
 *   ll_scratch: the low-latency one-shot's own slots [parity][source rank] (abi.h).
 * state (local): the step count; step s uses the slots of parity s % 2 and the value s + 1.
 * Every PE launches the same steps, so the values agree; they only grow, so a step never sees a
 * counter set by an earlier step of the same parity as its own, whatever grids the steps had.
 *
 * Ranks are team ranks 0..n-1; pes[rank] is the world PE number NVSHMEM addresses.
 * dtype: NVSHMEMRS_DTYPE_*, op: NVSHMEMRS_REDOP_*, algo: NVSHMEMRS_ALGO_* (abi.h, which also
 * describes the low-latency, direct and push protocols, and holds the args and state structs).
 * Every wait has a deadline (timeout_ns after it starts). A wait that misses it records
 * the failure in wait_status, marks the state broken and the kernel returns; a broken workspace
 * moves no data again (the host reports the failure as Error::Timeout).
 */
#ifndef NVSHMEM_RS_ALLREDUCE_H
#define NVSHMEM_RS_ALLREDUCE_H

#include <nvshmem_host.h>
#include <stddef.h>
#include <stdint.h>

#include "abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Launches one step of `algo` with `blocks` x `threads`. Limits on count: one-shot and recursive
 * doubling, count * sizeof(T) <= slot_bytes (low-latency one-shot: slot_bytes / 2); two-shot and
 * ring, ceil(count / n) elements rounded up to 16 bytes <= slot_bytes. Returns a cudaError_t
 * (cudaErrorInvalidValue for an unknown algo, dtype or op).
 */
int nvshmemrs_allreduce(int algo, int dtype, int op, nvshmemrs_allreduce_args args, int blocks,
                        int threads, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
