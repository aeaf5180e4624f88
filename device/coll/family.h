/*
 * The collective family beside allreduce (src/coll/): broadcast, allgather, alltoall,
 * reduce-scatter and reduce. One launch is one step; every launch reads and advances its own
 * workspace's state (abi.h nvshmemrs_family_args), so calls go back to back on a stream and
 * replay in CUDA graphs. Step s sets counters to s + 1; block b of a PE only waits for block b
 * of its peers, so no step needs the whole grid resident. Data moves with direct stores where
 * nvshmem_ptr maps the peer (NVLink), NVSHMEM puts with signal otherwise (other nodes, or
 * hdr.no_direct).
 *
 * Into the receivers' outputs (broadcast, allgather, alltoall): each receiver first signals
 * ARRIVE to its senders (its output is free: its earlier work on the stream is done), each
 * sender waits for that, then puts its part with a DATA signal; the receiver waits for DATA.
 * Through receive slots (hdr.scratch, [parity][source rank] of slot_bytes; hdr.count elements
 * per launch at most slot_bytes / sizeof(T)):
 *   reduce-scatter: every member puts its block for r into slot [rank] of r, with DATA; r
 *     reduces its own block and the slots in rank order. Every step is all-to-all, so a step
 *     two later (same parity) starts only after every receiver has read: no ARRIVE needed.
 *   reduce: the root signals ARRIVE (its slots are free), every other member puts its input
 *     into the root's slot [rank] with DATA; the root reduces in rank order.
 * Broadcast and reduce also have a split protocol for large buffers (abi.h
 * NVSHMEMRS_FAMILY_SPLIT): the buffer in n - 1 parts, scattered then allgathered (broadcast),
 * or reduce-scattered then gathered into the root's output (reduce), with the ARRIVE/DATA
 * handshake between every pair of members. Reduce and reduce-scatter, with every member
 * mapped, also have a pull protocol (abi.h NVSHMEMRS_FAMILY_PULL): the reducing members load
 * the inputs over the mapping in one pass, no slots.
 * Every wait has the header's deadline; a miss is recorded (NVSHMEMRS_WAIT_OP_COLLECTIVE, index
 * the NVSHMEMRS_COLL_* code) and breaks the workspace. Returns a cudaError_t
 * (cudaErrorInvalidValue for bad arguments, an unknown dtype or op).
 */
#ifndef NVSHMEM_RS_FAMILY_H
#define NVSHMEM_RS_FAMILY_H

#include <nvshmem_host.h>

#include "abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Root's input (hdr.count x elem_bytes) into every member's output; in place at the root when
 * input == output. */
int nvshmemrs_broadcast(nvshmemrs_family_args args, int blocks, int threads, cudaStream_t stream);
/* Every member's input (hdr.count elements) into block [its rank] of every member's output
 * (blocks `stride` apart); in place when input is the own block of the output. */
int nvshmemrs_allgather(nvshmemrs_family_args args, int blocks, int threads, cudaStream_t stream);
/* Block [r] of every member's input into block [its rank] of member r's output. */
int nvshmemrs_alltoall(nvshmemrs_family_args args, int blocks, int threads, cudaStream_t stream);
/* output = op over members of their input block [rank] (hdr.count elements). */
int nvshmemrs_reduce_scatter(int dtype, int op, nvshmemrs_family_args args, int blocks,
                             int threads, cudaStream_t stream);
/* The root's output = op over members of their inputs; other outputs untouched. */
int nvshmemrs_reduce(int dtype, int op, nvshmemrs_family_args args, int blocks, int threads,
                     cudaStream_t stream);
/* A barrier over the members, in stream order: each member completes what it issued before
 * (puts through NVSHMEM, stores to peers), then waits until every member has arrived. One
 * block; hdr.input and hdr.output are not used. */
int nvshmemrs_team_barrier(nvshmemrs_family_args args, int blocks, int threads,
                           cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
