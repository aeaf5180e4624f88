/*
 * Pipeline channel kernels (src/channel.rs). A channel's symmetric memory, the same on every PE:
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
 * Launchers return a cudaError_t (0 on success).
 */
#ifndef NVSHMEM_RS_CHANNEL_H
#define NVSHMEM_RS_CHANNEL_H

#include <nvshmem_host.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What each message adds to a counter. A send runs at most TOTAL - 1 blocks (one unit is the
 * length word's), a receive at most TOTAL. */
#define NVSHMEMRS_CHANNEL_TOTAL 64

/* What waited, in the status record (src/deadline.rs WaitOp). */
#define NVSHMEMRS_OP_SEND 1
#define NVSHMEMRS_OP_RECV_INTO 2
#define NVSHMEMRS_OP_RECV 3

/* flags: take NVSHMEM's put even where the peer's memory is mapped (diagnostics, tests). */
#define NVSHMEMRS_CHANNEL_NO_DIRECT 1

/* One channel operation; field use per launcher below. Passed by value to the kernel. */
struct nvshmemrs_channel_op {
    uint64_t data;       /* send: local source; recv_into: local destination (device addresses) */
    uint64_t slot;       /* symmetric address of the slot (the receiver's copy is written) */
    uint64_t staging;    /* send: this PE's staging slot, or 0 */
    uint64_t full;       /* symmetric address of full[s] */
    uint64_t len_word;   /* symmetric address of len[s] */
    uint64_t credit;     /* send: local credit[peer][s]; recv: symmetric credit[me][s] */
    uint64_t out_len;    /* send: local out_len[peer][s] */
    uint64_t broken;     /* local device word */
    uint64_t status;     /* device address of the host-mapped nvshmemrs_wait_status */
    uint64_t bytes;      /* bytes of the message */
    uint64_t len;        /* elements of the message (sent, or asked for) */
    uint64_t target;     /* value the awaited counter must reach (0: no wait) */
    uint64_t seq;        /* message number of this (sender, receiver) pair */
    uint64_t slot_index; /* s */
    uint64_t timeout_ns; /* how long a wait may take */
    int32_t peer;        /* the other PE */
    int32_t blocks;      /* send: 1 ..= TOTAL - 1; receive: 1 ..= TOTAL */
    int32_t threads;
    int32_t flags;       /* NVSHMEMRS_CHANNEL_* */
};

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

/* sizeof(struct nvshmemrs_wait_status) (prims/deadline.cuh), for the Rust mirror's check. */
size_t nvshmemrs_wait_status_size(void);

#ifdef __cplusplus
}
#endif

#endif
