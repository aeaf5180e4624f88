/*
 * Allreduce steps (src/allreduce.rs). One launch reduces one segment of a message; the host
 * splits larger messages into segments. Every launch reads and advances a small device-resident
 * state, so the host passes no sequence numbers and a captured CUDA graph replays correctly.
 *
 * Workspace (symmetric; sized by the WORLD PE count so every PE allocates alike, even PEs whose
 * team is smaller or that belong to no team):
 *   scratch: slots [parity][slot] of slot_bytes each (slot = source rank for one/two-shot, step
 *            for ring and recursive doubling);
 *   flags:   counters [algo][phase][parity][index] (u64), only ever incremented: each block of a
 *            sender adds 1 after its data for this PE has landed.
 * state (local): the step count (parity = steps % 2) and, per algo/phase/parity, the value every
 * counter reaches once all blocks of the last step with that parity have delivered. Each counter
 * a PE waits on receives exactly `blocks` adds per step (all PEs launch alike), so the target of a
 * step is the previous target plus gridDim.x.
 *
 * Ranks are team ranks 0..n-1; pes[rank] is the world PE number NVSHMEM addresses.
 * dtype: 0 f32, 1 f64, 2 f16, 3 bf16, 4 i32, 5 i64, 6 u32, 7 u64 (src/element.rs Dtype).
 * op:    0 sum, 1 prod, 2 min, 3 max, 4 avg (src/allreduce.rs ReduceOp).
 * algo:  0 one-shot, 1 two-shot, 2 ring, 3 recursive doubling (src/allreduce.rs AllreduceAlgo),
 *        4 one-shot with the low-latency protocol: every 16-byte line carries 8 bytes of data
 *        and the step's flag twice (each 8-byte half is written atomically), so the receiver
 *        polls the data itself: no fence, no separate signal. Direct stores only: the host uses
 *        it only when every member is mapped (nvshmem_ptr), the buffers are 8-byte aligned and
 *        the team has at most NVSHMEMRS_ALLREDUCE_LL_MAX_PES members; the payload is at most
 *        slot_bytes / 2.
 *        5 two-shot, direct: every member mapped, buffers 16-byte aligned; no receive slots and
 *        no segments. Block b of each PE reads part b of its own chunk from every member's
 *        input (loads over NVLink), reduces it and stores the result into every member's
 *        output; one handshake per block on entry (inputs ready) and on exit (all stores
 *        landed, all reads of this PE's input done). Any grid up to
 *        NVSHMEMRS_ALLREDUCE_DIRECT_BLOCKS (the counters are set to the call number).
 *        6 two-shot, push: as 5, but out of place only and no loads over the links. Block b of
 *        each PE stores part b of every chunk c into member c's output at chunk position
 *        `rank` (free until the result arrives there); member c reduces its own chunk from
 *        its input and those positions, and stores the result into every member's output.
 *        Handshakes per block: arrive (output free); per round, scattered and reduced
 *        (positions read, may be overwritten); done. A block's part goes in `rounds` rounds,
 *        the next round's stores issued before this round's reduce. Chunks are count rounded
 *        down to n 16-byte vectors, over n; every PE reduces the few elements past them for
 *        itself, from the peers' inputs.
 *        Shares the call number and the arrive/done counters with 5.
 * Every wait has a deadline (timeout_ns after it starts). A wait that misses it records
 * the failure in wait_status, marks the state broken and the kernel returns; a broken workspace
 * moves no data again (the host reports the failure as Error::Timeout).
 */
#ifndef NVSHMEM_RS_ALLREDUCE_H
#define NVSHMEM_RS_ALLREDUCE_H

#include <nvshmem_host.h>
#include <stddef.h>
#include <stdint.h>

#define NVSHMEMRS_ALLREDUCE_ALGOS 4
/* Most threads per block of the direct two-shots (their kernels are compiled to fit). */
#define NVSHMEMRS_ALLREDUCE_DIRECT_THREADS_MAX 512
/* Largest grid of the direct two-shot: its counters are per (source, block). */
#define NVSHMEMRS_ALLREDUCE_DIRECT_BLOCKS 256
/* Largest team the low-latency one-shot serves (peer pointers live in shared memory). */
#define NVSHMEMRS_ALLREDUCE_LL_MAX_PES 64
/* Most rounds of the push two-shot (its per-round counter values are call * this + round). */
#define NVSHMEMRS_ALLREDUCE_PUSH_ROUNDS_MAX 16
/* Counter phases of the direct two-shots: arrive, done, and push's scattered and reduced. */
#define NVSHMEMRS_ALLREDUCE_DIRECT_PHASES 4
/* Largest team the direct two-shot serves (peer pointers live in shared memory). */
#define NVSHMEMRS_ALLREDUCE_DIRECT_MAX_PES 16
/* What waited, in the status record (prims/deadline.cuh, src/deadline.rs WaitOp). */
#define NVSHMEMRS_OP_ALLREDUCE 4

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nvshmemrs_allreduce_state {
    uint64_t steps;
    uint64_t expected[NVSHMEMRS_ALLREDUCE_ALGOS][2][2];
    /* Direct two-shot calls completed (its counters each get one add per call). */
    uint64_t direct_calls;
    /* Non-zero once a wait of this workspace failed (timed out): every later launch returns at
     * once without moving data, and the state is no longer advanced. */
    uint64_t broken;
    /* Blocks of the running launch that have finished; the last one advances the state. */
    uint32_t done;
    uint32_t pad;
} nvshmemrs_allreduce_state;

typedef struct nvshmemrs_allreduce_args {
    const void *input;
    void *output;
    size_t count;
    char *scratch;
    size_t slot_bytes;
    uint64_t *flags;
    nvshmemrs_allreduce_state *state;
    const int *pes;
    int n;
    int rank;
    /* World PE count: the stride of the flag and slot arrays. */
    int world;
    /* Every member is reachable by direct stores: no NVSHMEM put to complete with a quiet. */
    int all_mapped;
    /* Direct two-shot counters: [phase (arrive, done, scattered, reduced)][source rank][block],
     * world x NVSHMEMRS_ALLREDUCE_DIRECT_BLOCKS per phase. */
    uint64_t *direct_flags;
    /* Host-mapped struct nvshmemrs_wait_status (prims/deadline.cuh): a wait that runs out of
     * time records there what it waited for (index: algo code, seq: the workspace's launch
     * number) and the kernel returns. */
    void *wait_status;
    /* How long one wait of a launch may take (from its first clock check, after 256 polls). */
    uint64_t timeout_ns;
    /* Push two-shot: rounds each block's part is pipelined in (1 to
     * NVSHMEMRS_ALLREDUCE_PUSH_ROUNDS_MAX). */
    int rounds;
} nvshmemrs_allreduce_args;

/* A checked-mode header disagreed with a peer's (status code; see src/deadline.rs). */
#define NVSHMEMRS_FAIL_MISMATCH 3
/* Words of one checked-mode header: call number, count, meta (dtype | op << 8 | algo << 16). */
#define NVSHMEMRS_ALLREDUCE_HEADER_WORDS 4

/*
 * Checked mode, before a call's first step (one block): puts this PE's header {call, count,
 * meta, 0} into headers[rank] of every member with a put-with-signal that sets
 * header_flags[rank] = call, waits (with the deadline) for every member's header of this call
 * and compares count and meta with its own. A difference is recorded in wait_status
 * (NVSHMEMRS_FAIL_MISMATCH; index 0 count, 1 meta; want: own value, seen: the peer's) and marks
 * the workspace broken, so the call's steps move nothing. `headers` holds world x HEADER_WORDS
 * words, `header_flags` world words (both symmetric).
 */
int nvshmemrs_allreduce_check_header(nvshmemrs_allreduce_args args, uint64_t *headers,
                                     uint64_t *header_flags, uint64_t call, uint64_t meta,
                                     cudaStream_t stream);

/*
 * Launches one step of `algo` with `blocks` x `threads`. Limits on count: one-shot and recursive
 * doubling, count * sizeof(T) <= slot_bytes (low-latency one-shot: slot_bytes / 2); two-shot and ring, ceil(count / n) elements
 * rounded up to 16 bytes <= slot_bytes. Returns a cudaError_t (cudaErrorInvalidValue for an
 * unknown algo, dtype or op).
 */
int nvshmemrs_allreduce(int algo, int dtype, int op, nvshmemrs_allreduce_args args, int blocks,
                        int threads, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
