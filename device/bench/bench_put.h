/*
 * Kernels of the put benchmark (nvsh/src/bench/put.rs). Return a cudaError_t from the launch.
 */
#ifndef NVSHMEM_RS_BENCH_PUT_H
#define NVSHMEM_RS_BENCH_PUT_H

#include <nvshmem_host.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * One thread ping-pongs `iters` times with `peer` over the symmetric word `flag`: the initiator
 * writes base+i into the peer's flag with nvshmem_uint64_p and waits until its own flag reaches
 * base+i; the responder waits first, then answers. One round trip per iteration.
 */
int nvshmemrs_bench_pingpong(uint64_t *flag, int peer, int iters, uint64_t base, int initiator,
                             cudaStream_t stream);

/*
 * Device-initiated put bandwidth without launch overhead, as NVSHMEM's perftests measure it:
 * one kernel of `blocks` x `threads` in which each block puts its chunk of `bytes` to `pe`
 * `iters` times back to back (nvshmemx_putmem_nbi_block), then quiets.
 */
int nvshmemrs_bench_put_loop(void *dest, const void *src, size_t bytes, int pe, int iters,
                             int blocks, int threads, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
