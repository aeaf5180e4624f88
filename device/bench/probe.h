/*
 * Kernels of the allreduce cost probe (nvsh/src/bench/probe.rs): rungs that add, one at a time,
 * what the low-latency one-shot allreduce (coll/oneshot_ll.cu) does, so that the differences
 * between their times split its cost. Each launcher uses the one-shot's launch (prims/pdl.cuh:
 * programmatic dependent launch, `blocks` x `threads`) and returns a cudaError_t.
 */
#ifndef NVSHMEM_RS_BENCH_PROBE_H
#define NVSHMEM_RS_BENCH_PROBE_H

#include <nvshmem_host.h>
#include <stddef.h>
#include <stdint.h>

#include "abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most PEs the probe takes (its kernels keep a table of peer addresses in shared memory). */
#define NVSHMEMRS_PROBE_MAX_PES 64

/*
 * One PE's state of the line rungs, in device memory, zeroed before the first launch. `step` is
 * the one-shot's step state (prims/step.cuh reads and advances it): launch s uses parity s & 1
 * and flag s + 1 (prims/ll.cuh ll_flag). The counters only grow; the host reads them between
 * groups. Once a wait has timed out, `step.broken` is set and every later launch returns at once.
 */
typedef struct nvshmemrs_probe_state {
    nvshmemrs_allreduce_state step;
    /* Lines that arrived with the right flag but a wrong payload (or, flags only, a wrong
     * source word). */
    uint64_t wrong;
    /* Lines whose flag did not arrive before the timeout. */
    uint64_t timeouts;
} nvshmemrs_probe_state;

/*
 * Word j (32 bits) of PE pe's payload: what the host writes into the input and the receivers
 * expect (probe.rs probe_word computes the same).
 */
#define NVSHMEMRS_PROBE_WORD_A 0x9E3779B1u
#define NVSHMEMRS_PROBE_WORD_B 0x85EBCA77u

/* An empty kernel: the launch alone, with the one-shot's wait for the previous kernel. */
int nvshmemrs_probe_empty(int blocks, int threads, cudaStream_t stream);

/*
 * One round of the low-latency protocol among all `n_pes` PEs (each mapped through nvshmem_ptr):
 * each PE stores its lines with the step's flag into slot [my_pe] of every other PE's `slots`
 * (the symmetric region of 2 parities x n_pes slots of `slot_bytes`) and polls its own slots
 * until every peer's lines carry the flag, checking each payload and zeroing each line once read.
 * bytes == 0: flags only, one line per peer whose payload is the source PE and the flag.
 * bytes > 0 (a multiple of 8): bytes / 8 lines read from `input` (this PE's payload words).
 * A line whose flag has not come after `timeout_ns` counts as a timeout.
 */
int nvshmemrs_probe_lines(nvshmemrs_probe_state *state, void *slots, size_t slot_bytes,
                          const void *input, size_t bytes, int my_pe, int n_pes,
                          uint64_t timeout_ns, int blocks, int threads, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
