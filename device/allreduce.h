/*
 * Allreduce steps (src/allreduce.rs). One call of these reduces one segment of a message; the
 * host splits larger messages into segments and alternates the parity of the receive slots.
 *
 * Workspace (symmetric, identical on every PE):
 *   scratch: slots [parity][src_pe] of slot_bytes each;
 *   flags:   counters [phase][parity][src_pe] (u64), only ever incremented: every block of
 *            src_pe adds 1 after its data for this PE has landed.
 * `expected_*` is the value every counter of the phase/parity reaches once all peers' blocks
 * of this step have delivered (the host keeps the running totals).
 *
 * dtype: 0 f32, 1 f64, 2 f16, 3 bf16, 4 i32, 5 i64, 6 u32, 7 u64 (src/element.rs Dtype).
 * op:    0 sum, 1 prod, 2 min, 3 max, 4 avg (src/allreduce.rs ReduceOp).
 * Return a cudaError_t from the launch; cudaErrorInvalidValue for an unknown dtype or op.
 */
#ifndef NVSHMEM_RS_ALLREDUCE_H
#define NVSHMEM_RS_ALLREDUCE_H

#include <nvshmem_host.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * One-shot: every block pushes its chunk of `input` into slot [parity][my_pe] of every peer,
 * waits for all peers' chunks, and reduces its chunk (in PE order 0..n-1, so every PE computes
 * bit-identical results) into `output`. count * sizeof(T) <= slot_bytes.
 */
int nvshmemrs_allreduce_oneshot(int dtype, int op, const void *input, void *output, size_t count,
                                char *scratch, size_t slot_bytes, uint64_t *flags, int parity,
                                uint64_t expected, int n_pes, int my_pe, int blocks, int threads,
                                cudaStream_t stream);

/*
 * Two-shot: chunk c of the segment belongs to PE c. Reduce-scatter: push chunk p of `input` to
 * PE p's slot [parity][my_pe]; wait; reduce the own chunk into `output`. All-gather: push the
 * reduced chunk into every peer's `output`; wait for theirs. ceil(count / n) elements, rounded
 * up to 16 bytes, must fit in slot_bytes.
 */
int nvshmemrs_allreduce_twoshot(int dtype, int op, const void *input, void *output, size_t count,
                                char *scratch, size_t slot_bytes, uint64_t *flags, int parity,
                                uint64_t expected_scatter, uint64_t expected_gather, int n_pes,
                                int my_pe, int blocks, int threads, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
