/*
 * Pipeline channel kernels (src/pipeline/channel.rs). A channel's symmetric memory, the same on
 * every PE:
 *   slots:   K receive slots of slot_bytes (16-byte aligned), written by the one sender;
 *   staging: NULL, or K slots on the sender for off-node puts from non-symmetric sources;
 *   words:   full[K] (arrival counters) and len[K] (message lengths), written by the sender;
 *            credit[n_pes][K] (on the sender: slot s of receiver r consumed);
 *            out_len[n_pes][K] (on the sender: the length word it puts to receiver r);
 *            broken (local flag); all u64.
 * Message `seq` of a (sender, receiver) pair uses slot seq % K. Counters only grow: every message
 * adds NVSHMEMRS_CHANNEL_TOTAL to full[s] on the receiver (1 with the length word, the rest split
 * over the sender's blocks, each after its data), and every consumption adds TOTAL to
 * credit[receiver][s] on the sender. So message seq has arrived when
 * full[s] >= (seq / K + 1) * TOTAL, and its slot may be reused by message seq + K when
 * credit >= (seq / K + 1) * TOTAL.
 * Launchers return a cudaError_t (0 on success). abi.h has struct nvshmemrs_channel_op, TOTAL
 * and the flags.
 */
#ifndef NVSHMEM_RS_CHANNEL_H
#define NVSHMEM_RS_CHANNEL_H

#include <nvshmem_host.h>
#include <stddef.h>
#include <stdint.h>

#include "abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Send: every block waits until credit >= target (the slot is free) and copies its chunk of
 * `data` into `slot` on `peer`: direct stores where nvshmem_ptr maps it, else a blocking NVSHMEM
 * put-with-signal (from `staging` when the source is outside the symmetric heap). Each block adds
 * its share of TOTAL - 1 to full[s] on `peer` after its data; block 0 also delivers the length
 * word, followed by 1 more unit (a store before its fence, or a put-with-signal of out_len).
 * When the kernel completes, `data` has been read (it may be reused).
 */
int nvshmemrs_channel_send(const struct nvshmemrs_channel_op *op, cudaStream_t stream);

/*
 * Receive into `data`: every block waits until full[s] >= target, checks len[s] == len (block 0
 * records a mismatch; then nothing is copied), copies its chunk of the slot and adds its share
 * of TOTAL to credit[me][s] on `peer` after its reads.
 */
int nvshmemrs_channel_recv(const struct nvshmemrs_channel_op *op, cudaStream_t stream);

/* Zero-copy receive: one block waits until full[s] >= target; the slot is then readable. */
int nvshmemrs_channel_wait(const struct nvshmemrs_channel_op *op, cudaStream_t stream);

/* Returns slot s to `peer`: adds TOTAL to credit[me][s] there, after the work before it. */
int nvshmemrs_channel_release(const struct nvshmemrs_channel_op *op, cudaStream_t stream);

/* NVSHMEMRS_CHANNEL_TOTAL, for the Rust side's check of its copy. */
int nvshmemrs_channel_total(void);

/* sizeof(struct nvshmemrs_wait_status) (abi.h), for the Rust side's check. */
size_t nvshmemrs_wait_status_size(void);

#ifdef __cplusplus
}
#endif

#endif
