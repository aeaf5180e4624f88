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
 * the launch's args.code) and breaks the workspace. Each entry point (`extern "C"` in its .cu,
 * declared in no header: nvshmem-sys binds it from its definition) returns a cudaError_t
 * (cudaErrorInvalidValue for bad arguments, an unknown dtype or op).
 */
#ifndef NVSHMEM_RS_FAMILY_H
#define NVSHMEM_RS_FAMILY_H

#include <nvshmem_host.h>

#include "abi.h"

#endif
