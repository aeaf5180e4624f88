/*
 * Exchanges: transfers of sizes each pair of PEs agrees on, that only the two ends know
 * (alltoallv, allgatherv, grouped send/recv; coll/exchange.cuh has the step). The receiver
 * writes where each transfer goes into the sender's mailbox and raises arrive; the sender puts
 * the data there (direct stores where nvshmem_ptr maps the peer, NVSHMEM puts otherwise) and
 * adds its bytes, + 1 per transfer, to the receiver's data counter; the receiver waits for the
 * total it expects. Sequences are per pair (the k-th launch in which r receives from s matches
 * the k-th in which s sends to r), so a launch involves only the PEs that have transfers in it,
 * and every PE may pick its own grid. A transfer whose two sides disagree (size, type, number)
 * ends in NVSHMEMRS_FAIL_LENGTH on both sides; every wait has the header's deadline. hdr.scratch
 * is the exchange region (abi.h). Returns a cudaError_t (cudaErrorInvalidValue for bad
 * arguments).
 *
 * A list launch may have low-latency lines (abi.h NVSHMEMRS_EXCHANGE_LINES): each pair sends a
 * header of its sizes through a line slot per ordered pair, and a small pair its data too,
 * with no round trip; the sender learns of a mismatch found by the receiver at once where it
 * waits for the receiver's mailbox, else at its next send there (coll/exchange.cuh).
 */
#ifndef NVSHMEM_RS_EXCHANGE_H
#define NVSHMEM_RS_EXCHANGE_H

#include <nvshmem_host.h>

#include "abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The transfers of args->ops (NVSHMEMRS_EXCHANGE_LIST): grouped send/recv, and alltoallv and
 * allgatherv with counts on the host. */
int nvshmemrs_exchange_list(const nvshmemrs_exchange_args *args, int blocks, int threads,
                            cudaStream_t stream);
/* Allgatherv with counts and displacements in device memory (NVSHMEMRS_EXCHANGE_ALLGATHERV). */
int nvshmemrs_allgatherv(const nvshmemrs_exchange_args *args, int blocks, int threads,
                         cudaStream_t stream);
/* Allgatherv with counts on the host as low-latency lines (abi.h
 * nvshmemrs_parts_args; no pair state, so not mixed with list launches' lines on
 * one workspace). */
int nvshmemrs_allgatherv_lines(nvshmemrs_parts_args args, int blocks, int threads,
                               cudaStream_t stream);
/* Allgatherv with counts on the host as allgather's blocks (abi.h
 * nvshmemrs_parts_args): ARRIVE, then puts into every output; no mailbox. */
int nvshmemrs_allgatherv_blocks(nvshmemrs_parts_args args, int blocks, int threads,
                                cudaStream_t stream);
/* Alltoallv with counts on the host (abi.h nvshmemrs_alltoallv_parts_args): lines, and the
 * receiver's handshake for parts past them; no mailbox or pair state, so not mixed with list
 * launches' lines on one workspace. */
int nvshmemrs_alltoallv_parts(nvshmemrs_alltoallv_parts_args args, int blocks, int threads,
                              cudaStream_t stream);
/* Alltoallv with counts and displacements in device memory (NVSHMEMRS_EXCHANGE_ALLTOALLV). */
int nvshmemrs_alltoallv(const nvshmemrs_exchange_args *args, int blocks, int threads,
                        cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
