/*
 * Everything the device code shares with Rust: codes, limits and the structs passed to the entry
 * points. The only place these numbers are written: bindgen turns every NVSHMEMRS_* define here
 * into a Rust constant (nvshmem-sys/build.rs) and every nvshmemrs_* struct into a Rust struct.
 * C and C++ alike (bindgen parses it as C++); defines only, so that the constants come out as
 * plain integers on both sides.
 */
#ifndef NVSHMEM_RS_ABI_H
#define NVSHMEM_RS_ABI_H

#include <stddef.h>
#include <stdint.h>

/* ---- Element types and reduce ops (src/core/element.rs Dtype, src/coll/op.rs ReduceOp) ---- */

#define NVSHMEMRS_DTYPE_F32 0
#define NVSHMEMRS_DTYPE_F64 1
#define NVSHMEMRS_DTYPE_F16 2
#define NVSHMEMRS_DTYPE_BF16 3
#define NVSHMEMRS_DTYPE_I32 4
#define NVSHMEMRS_DTYPE_I64 5
#define NVSHMEMRS_DTYPE_U32 6
#define NVSHMEMRS_DTYPE_U64 7
/* Bytes: buffers and channels only; no reduction kernel takes it. */
#define NVSHMEMRS_DTYPE_U8 8

#define NVSHMEMRS_REDOP_SUM 0
#define NVSHMEMRS_REDOP_PROD 1
#define NVSHMEMRS_REDOP_MIN 2
#define NVSHMEMRS_REDOP_MAX 3
#define NVSHMEMRS_REDOP_AVG 4

/* ---- Allreduce algorithms (src/coll/allreduce/algo.rs AllreduceAlgo, meta.rs Protocol) ---- */

#define NVSHMEMRS_ALGO_ONESHOT 0
#define NVSHMEMRS_ALGO_TWOSHOT 1
#define NVSHMEMRS_ALGO_RING 2
#define NVSHMEMRS_ALGO_RECURSIVE_DOUBLING 3
/*
 * One-shot with the low-latency protocol: every 16-byte line carries 8 bytes of data and the
 * step's flag twice (each 8-byte half is written atomically), so the receiver polls the data
 * itself: no fence, no separate signal. Its lines live in a region of their own (ll_scratch),
 * which no other protocol writes, and the receiver zeroes each line once it has read it, so a
 * line holds a non-zero flag only while its writer's step is under way: neither another
 * protocol's leftovers nor a line written 2^32 calls ago can pass for a peer's data. Direct
 * stores only: the host uses it only when every member is mapped (nvshmem_ptr), the buffers are
 * 8-byte aligned and the team has at most NVSHMEMRS_ALLREDUCE_LL_MAX_PES members; the payload is
 * at most ll_slot_bytes / 2.
 */
#define NVSHMEMRS_ALGO_ONESHOT_LL 4
/*
 * Two-shot, direct: every member mapped, buffers 16-byte aligned; no receive slots and no
 * segments. Block b of each PE reads part b of its own chunk from every member's input (loads
 * over NVLink), reduces it and stores the result into every member's output; one handshake per
 * block on entry (inputs ready) and on exit (all stores landed, all reads of this PE's input
 * done). Any grid up to NVSHMEMRS_ALLREDUCE_DIRECT_BLOCKS (the counters are set to the call
 * number).
 */
#define NVSHMEMRS_ALGO_TWOSHOT_DIRECT 5
/*
 * Two-shot, push: as TWOSHOT_DIRECT, but out of place only and no loads over the links. Block b
 * of each PE stores part b of every chunk c into member c's output at chunk position `rank`
 * (free until the result arrives there); member c reduces its own chunk from its input and those
 * positions, and stores the result into every member's output. Handshakes per block: arrive
 * (output free); per round, scattered and reduced (positions read, may be overwritten); done. A
 * block's part goes in `rounds` rounds, the next round's stores issued before this round's
 * reduce. Chunks are count rounded down to n 16-byte vectors, over n; every PE reduces the few
 * elements past them for itself, from the peers' inputs.
 * Shares the call number and the arrive/done counters with TWOSHOT_DIRECT.
 */
#define NVSHMEMRS_ALGO_TWOSHOT_PUSH 6

/* Algorithms with counters in the slot workspace (codes 0 .. ALGOS - 1). */
#define NVSHMEMRS_ALLREDUCE_ALGOS 4
/*
 * Largest grid of the slot protocols (codes 0 .. ALGOS - 1). Their counters are per (index,
 * block): block b waits only for block b of its peers, so a step completes whatever part of the
 * grid is resident at a time (other kernels may hold SMs; an A100 has 108).
 */
#define NVSHMEMRS_ALLREDUCE_SLOT_BLOCKS 128
/* Most threads per block of the direct two-shots (their kernels are compiled to fit). */
#define NVSHMEMRS_ALLREDUCE_DIRECT_THREADS_MAX 512
/* Largest grid of the direct two-shot: its counters are per (source, block). */
#define NVSHMEMRS_ALLREDUCE_DIRECT_BLOCKS 256
/* Largest team the low-latency one-shot serves (peer pointers live in shared memory). */
#define NVSHMEMRS_ALLREDUCE_LL_MAX_PES 64
/* Members whose heap mapping a launch's header carries (peer_delta): one node of 8 GPUs. */
#define NVSHMEMRS_PEER_TABLE 8
/* Most rounds of the push two-shot (its per-round counter values are call * this + round). */
#define NVSHMEMRS_ALLREDUCE_PUSH_ROUNDS_MAX 16
/* Counter phases of the direct two-shots: arrive, done, and push's scattered and reduced. */
#define NVSHMEMRS_ALLREDUCE_DIRECT_PHASES 4
/* Largest team the direct two-shot serves (peer pointers live in shared memory). */
#define NVSHMEMRS_ALLREDUCE_DIRECT_MAX_PES 16

/*
 * Checked mode. Words of one header: call number, count, meta, 0. A mismatch record's index is
 * the field that differed: 0 count, 1 meta.
 */
#define NVSHMEMRS_ALLREDUCE_HEADER_WORDS 4
/* meta = dtype | op << OP_SHIFT | algo << ALGO_SHIFT | protocol << PROTOCOL_SHIFT. */
#define NVSHMEMRS_ALLREDUCE_META_OP_SHIFT 8
#define NVSHMEMRS_ALLREDUCE_META_ALGO_SHIFT 16
#define NVSHMEMRS_ALLREDUCE_META_PROTOCOL_SHIFT 24
/* meta's protocol field: how a two-shot moves its data. */
#define NVSHMEMRS_ALLREDUCE_PROTOCOL_SLOTS 0
#define NVSHMEMRS_ALLREDUCE_PROTOCOL_PULL 1
#define NVSHMEMRS_ALLREDUCE_PROTOCOL_PUSH 2

/* ---- Failure records of waits with a deadline (src/core/deadline.rs, src/core/status.rs) ---- */

/* What waited (src/core/status.rs WaitOp). */
#define NVSHMEMRS_WAIT_OP_SEND 1
#define NVSHMEMRS_WAIT_OP_RECV_INTO 2
#define NVSHMEMRS_WAIT_OP_RECV 3
#define NVSHMEMRS_WAIT_OP_ALLREDUCE 4
#define NVSHMEMRS_WAIT_OP_BARRIER 5
#define NVSHMEMRS_WAIT_OP_SIGNAL_WAIT 6
/* A call of the collective family (coll/family.h); the record's index is the collective's code
 * (nvshmemrs_family_args.code). */
#define NVSHMEMRS_WAIT_OP_COLLECTIVE 7
/* Older names of the WAIT_OP codes; nothing in the repository uses them any more. */
#define NVSHMEMRS_OP_SEND NVSHMEMRS_WAIT_OP_SEND
#define NVSHMEMRS_OP_RECV_INTO NVSHMEMRS_WAIT_OP_RECV_INTO
#define NVSHMEMRS_OP_RECV NVSHMEMRS_WAIT_OP_RECV
#define NVSHMEMRS_OP_ALLREDUCE NVSHMEMRS_WAIT_OP_ALLREDUCE
#define NVSHMEMRS_OP_BARRIER NVSHMEMRS_WAIT_OP_BARRIER
#define NVSHMEMRS_OP_SIGNAL_WAIT NVSHMEMRS_WAIT_OP_SIGNAL_WAIT

#define NVSHMEMRS_FAIL_NONE 0
#define NVSHMEMRS_FAIL_TIMEOUT 1
#define NVSHMEMRS_FAIL_LENGTH 2
/* A checked-mode header disagreed with a peer's. */
#define NVSHMEMRS_FAIL_MISMATCH 3

/*
 * The status record a failed wait writes (prims/deadline.cuh), in host-mapped memory; read by
 * src/core/status.rs (nvshmemrs_wait_status_size checks the size). Every field is 64 bits wide so
 * that both sides agree on the layout without padding rules.
 */
typedef struct nvshmemrs_wait_status {
    uint64_t code;      /* NVSHMEMRS_FAIL_*; written last: once non-zero, the rest is set */
    uint64_t op;        /* what waited: NVSHMEMRS_WAIT_OP_* of the operation */
    int64_t peer;       /* the PE whose signal never came */
    uint64_t signal;    /* device address of the signal word (on this PE) */
    uint64_t index;     /* slot (or other index) of the signal word */
    uint64_t seq;       /* message (or step) number */
    uint64_t want;      /* value the signal had to reach; for a length mismatch the length asked */
    uint64_t seen;      /* value last seen; for a length mismatch the length sent */
    uint64_t waited_ns; /* time spent waiting */
} nvshmemrs_wait_status;

/* ---- Collectives (coll/allreduce.h documents the workspace and the steps) ---- */

typedef struct nvshmemrs_allreduce_state {
    /* Launches completed on this workspace (every PE launches alike, so every PE's count is the
     * same at the same launch). Step s of a slot protocol sets its counters to s + 1. */
    uint64_t steps;
    /* Direct two-shot calls completed (its counters are set to the call number). */
    uint64_t direct_calls;
    /* Non-zero once a wait of this workspace failed (timed out): every later launch returns at
     * once without moving data, and the state is no longer advanced. */
    uint64_t broken;
    /* Blocks of the running launch that have finished; the last one advances the state. */
    uint32_t done;
    uint32_t pad;
    /* The value of the last low-latency broadcast or reduce step at each parity: what a writer
     * of lines waits every member's credit for (prims/ll_credit.cuh). */
    uint64_t ll_last[2];
} nvshmemrs_allreduce_state;

/*
 * What every collective's launch gets: the call's buffers, the workspace, the team and the
 * deadline. The protocol primitives (prims/) read only this; each collective's args struct
 * starts with it (member `hdr`) and adds its own fields after it.
 */
typedef struct nvshmemrs_coll_header {
    const void *input;
    void *output;
    size_t count;
    char *scratch;
    size_t slot_bytes;
    /* Slot protocols' counters: [algo][phase][parity][index][block], world x
     * NVSHMEMRS_ALLREDUCE_SLOT_BLOCKS per (algo, phase, parity); zeroed at creation. */
    uint64_t *flags;
    /* The low-latency protocol's own receive region: [parity][source rank] lines of
     * ll_slot_bytes each (symmetric, zeroed at creation). */
    char *ll_scratch;
    size_t ll_slot_bytes;
    nvshmemrs_allreduce_state *state;
    const int *pes;
    int n;
    int rank;
    /* World PE count: the stride of the flag and slot arrays. */
    int world;
    /* Every member is reachable by direct stores: no NVSHMEM put to complete with a quiet. */
    int all_mapped;
    /* Non-zero: data moves with NVSHMEM puts even to mapped peers (then all_mapped is 0):
     * the path across nodes, on one node (NVSH_NO_DIRECT; diagnostics and tests). */
    int no_direct;
    /* Direct two-shot counters: [phase (arrive, done, scattered, reduced)][source rank][block],
     * world x NVSHMEMRS_ALLREDUCE_DIRECT_BLOCKS per phase. */
    uint64_t *direct_flags;
    /* Host-mapped struct nvshmemrs_wait_status: a wait that runs out of time records there what
     * it waited for (index: algo code, seq: the workspace's launch number) and the kernel
     * returns. */
    void *wait_status;
    /* How long one wait of a launch may take (from its first clock check, after 256 polls). */
    uint64_t timeout_ns;
    /* This PE's map of the first peer_table members' heaps, taken by the host once per
     * workspace (nvshmem_ptr): member r's copy of a symmetric address a is a + peer_delta[r]
     * where bit r of peer_mapped is set, unreachable by direct stores where it is clear. From
     * the launch's parameters the kernels skip two dependent loads (the PE table, then
     * NVSHMEM's peer table) that miss after a compute kernel has flushed L2. Ranks from
     * peer_table on (0: all, NVSH_PEER_TABLE=0) ask nvshmem_ptr on the device. */
    int64_t peer_delta[NVSHMEMRS_PEER_TABLE];
    uint32_t peer_mapped;
    int peer_table;
} nvshmemrs_coll_header;

/* The header's fields come first and rounds last, as before the header existed: the byte
 * layout, and so the kernels' parameter offsets, did not change. */
typedef struct nvshmemrs_allreduce_args {
    nvshmemrs_coll_header hdr;
    /* Push two-shot: rounds each block's part is pipelined in (1 to
     * NVSHMEMRS_ALLREDUCE_PUSH_ROUNDS_MAX). */
    int rounds;
} nvshmemrs_allreduce_args;

/* ---- The collective family (coll/family.h documents the steps) ---- */

/* Largest grid of the family's kernels: their counters are per (source rank, block). */
#define NVSHMEMRS_FAMILY_BLOCKS 128
/* Threads per block of the family's launches, the most broadcast's and reduce's kernels are
 * compiled for (__launch_bounds__: their register use must fit a block this large). */
#define NVSHMEMRS_FAMILY_THREADS 512
/* Counter phases: arrive (the receiver's area is free for this step) and data (landed). ADDR
 * holds words, not counters: under SPLIT the reduce root's output address, which the root
 * stores into word [its rank] on every member before its ARRIVE (never waited on); under PULL
 * the address of the input the member reads (reduce's root: a non-root's; reduce-scatter:
 * every other member's), stored the same way before that ARRIVE. ROUND: the
 * SPLIT protocol's data counters, set per round of a chunk (prims/split.cuh split_round_value:
 * values above every value of the step before, so never compared with DATA's step values). */
#define NVSHMEMRS_FAMILY_PHASES 4
#define NVSHMEMRS_FAMILY_ARRIVE 0
#define NVSHMEMRS_FAMILY_DATA 1
#define NVSHMEMRS_FAMILY_ADDR 2
#define NVSHMEMRS_FAMILY_ROUND 3
/* Most rounds a SPLIT block sends its chunk in (a larger chunk takes larger rounds). */
#define NVSHMEMRS_SPLIT_ROUNDS_MAX 64

/*
 * One launch of a family collective. hdr.flags: counters [phase][parity][rank][block]
 * (NVSHMEMRS_FAMILY_PHASES x 2 x world x NVSHMEMRS_FAMILY_BLOCKS words, zeroed at creation);
 * hdr.scratch: receive slots [parity][rank] of hdr.slot_bytes (reduce-scatter and reduce only);
 * hdr.state: its own nvshmemrs_allreduce_state (steps). hdr.count: elements per rank block of
 * this launch.
 */
typedef struct nvshmemrs_family_args {
    nvshmemrs_coll_header hdr;
    /* Elements from one rank's block to the next in a buffer holding one block per rank
     * (allgather's output, alltoall's input and output, reduce-scatter's input). */
    size_t stride;
    /* Bytes per element (data movement is by bytes; reductions also take the dtype). */
    int elem_bytes;
    /* Team rank of the root (broadcast, reduce), else 0. */
    int root;
    /* How the data moves: NVSHMEMRS_FAMILY_HANDSHAKE, _LL, _SPLIT or _PULL. */
    int protocol;
    /* Under SPLIT where every member is mapped: bytes of a block's chunk per round (0: the
     * whole chunk in one round). */
    uint64_t split_round_bytes;
    /* Which collective: the status record's index on a timeout. The kernels only pass it on;
     * the codes are written once, in the table of collectives (src/coll/table.rs), so that a
     * new collective adds none here. */
    int code;
} nvshmemrs_family_args;

/* Exchanges whose parts every member's host knows (coll/parts.cuh): allgatherv and alltoallv
 * with counts on the host. fam.hdr as the family's (hdr.input the input, hdr.output the
 * output, hdr.count the output's elements); the part this member receives from member r is
 * bytes[r] at byte displ[r] of its output (allgatherv: member r's part, at the same place in
 * every output).
 * Lines: member r's part for this member goes as low-latency lines into slot [r] of this
 * member's line region (hdr.ll_scratch, the exchange region's line slots) at the step's
 * parity, line 0 its size word (bytes | dtype << NVSHMEMRS_EXCHANGE_DTYPE_SHIFT, with
 * NVSHMEMRS_PART_PUT where the data does not follow as lines), lines 1.. its data. The
 * receiver compares the size word with its own and copies the data out (a difference is
 * NVSHMEMRS_FAIL_LENGTH with NVSHMEMRS_EXCHANGE_SENT_SIZES or _SENT_MODE; line 0 of the
 * sender's slot at the next parity then says NVSHMEMRS_PART_MARK, so that the sender fails at
 * its next call). No ARRIVE, mailbox or pair state: every call on such a workspace pairs every
 * member with every other both ways, so a slot is rewritten only after its reader's next call
 * has begun (prims/ll.cuh).
 * Blocks (allgatherv), any size: allgather's steps (coll/put_blocks.cuh) with a part of its
 * own size per member: ARRIVE, then each member puts its part at displ[its rank] of every
 * other member's output and raises DATA; no mailbox (the host knows every part). Members must
 * launch the same grid (from the largest part); parts that differ between members are caught
 * by checked mode's header, not by the kernel. */
#define NVSHMEMRS_PARTS_MAX_PES 16
typedef struct nvshmemrs_parts_args {
    nvshmemrs_family_args fam;
    uint64_t displ[NVSHMEMRS_PARTS_MAX_PES];
    uint64_t bytes[NVSHMEMRS_PARTS_MAX_PES];
    /* Element type (NVSHMEMRS_DTYPE_*), for the lines' size words. */
    int dtype;
} nvshmemrs_parts_args;
/* In a part's size word: its data goes by the receiver's handshake, not as lines. */
#define NVSHMEMRS_PART_PUT (1ull << 55)
/* Line 0 of a sender's slot at the next parity, or the size word a receiver hands a sender
 * waiting for its handshake: the receiver found that the sender's part does not match. */
#define NVSHMEMRS_PART_MARK (~0ull)

/* Alltoallv with counts on the host (coll/exchange.h nvshmemrs_alltoallv_parts): recv as
 * above; this member's part for member r is send_bytes[r] at byte send_displ[r] of its input
 * (in_bytes long). Every member mapped, at most NVSHMEMRS_PARTS_MAX_PES. A part of at most
 * line_max bytes goes as lines (above); a larger one has its size line with
 * NVSHMEMRS_PART_PUT, then the receiver's handshake: the receiver's block 0 gives the sender
 * its part's address (phase ADDR) and its size word (phase ROUND) before ARRIVE (block 0's
 * counters); every block of the sender that finds the size word its own stores its share of
 * the part there and adds the bytes to the receiver's block-0 DATA counter [its rank], which
 * the receiver waits to reach the part's bytes, then zeroes. The grid is each member's own
 * (nothing is per block across members). */
typedef struct nvshmemrs_alltoallv_parts_args {
    nvshmemrs_parts_args recv;
    uint64_t send_displ[NVSHMEMRS_PARTS_MAX_PES];
    uint64_t send_bytes[NVSHMEMRS_PARTS_MAX_PES];
    uint64_t in_bytes;
    uint64_t line_max;
} nvshmemrs_alltoallv_parts_args;

/* The family's protocols (nvshmemrs_family_args.protocol). HANDSHAKE: coll/family.h's steps
 * (ARRIVE then DATA, or receive slots). LL (allgather, alltoall, reduce-scatter, broadcast,
 * reduce): every member mapped, at most NVSHMEMRS_FAMILY_LL_MAX_PES members, input, output and
 * the rank blocks 8-byte aligned; each sender stores its block as low-latency lines
 * (prims/ll.cuh) into slot [its rank] of hdr.ll_scratch ([parity][source rank] of
 * hdr.ll_slot_bytes, at least 16 bytes per 8 of a block) on every receiver, which copies them
 * into its output (reduce-scatter, reduce: reduces them in rank order): no ARRIVE; in the
 * rooted ones every member gives every other a credit at the end of a step (prims/ll_credit.cuh). */
#define NVSHMEMRS_FAMILY_HANDSHAKE 0
#define NVSHMEMRS_FAMILY_LL 1
/*
 * SPLIT (broadcast, reduce; at least 2 members): the buffer in n - 1 parts, part k for the k-th
 * member other than the root (rank order, prims/split.cuh), so that no member moves more than
 * about one buffer's worth over its links (the handshake's root moves n - 1). Every member but
 * the root sends ARRIVE to every other (reduce: the root too) at the start; writes wait for
 * the receiver's ARRIVE; each member gets one DATA from each other per step.
 *   broadcast: the root puts part k into member k's output (scatter); member k, once its part
 *     has arrived, puts it into every other non-root's output (allgather).
 *   reduce: every member puts part k of its input into slot [its rank] of member k (the root
 *     included; reduce-scatter); member k reduces part k over every member in rank order and
 *     stores the result into the root's output, at the address the root gave it in word
 *     [root] of phase ADDR (non-root outputs are not written; where the root is not mapped,
 *     member k reduces into its own slot [k] and puts from there). Parts fit a slot.
 * Data moves as in HANDSHAKE: direct stores to mapped peers, NVSHMEM puts with signal otherwise.
 * Where every member is mapped, block b sends its chunk of a part in rounds of about
 * split_round_bytes, each raising counter ROUND[sender] (prims/split.cuh), so that member k
 * passes on (broadcast) or reduces into the root's output (reduce) round j while round j + 1
 * still arrives; the second phase signals once, after its last round. Over NVSHMEM puts one
 * round (put-with-signal operations to one PE are not ordered with each other).
 */
#define NVSHMEMRS_FAMILY_SPLIT 2
/*
 * PULL (reduce, reduce-scatter; 2 to NVSHMEMRS_FAMILY_LL_MAX_PES members, every
 * one mapped (hdr.all_mapped), not hdr.no_direct): the members that need data load it from
 * the peers' buffers over the mapping, one pass, no slots (one launch for any size). The
 * member whose buffer is read stores its address into word [its rank] of phase ADDR on each
 * reader, then raises ARRIVE there (its buffer is ready: its earlier work on the stream is
 * done); each reader, once it has read, raises DATA on the owner, which ends its step only
 * then (the buffer must not change while read). One pass where the handshake's receiver
 * reduces out of slots its peers have filled: it pays where a reduction reads what it
 * receives (a broadcast that loaded the root's input measured no faster than the root's
 * stores, docs/measured.md).
 *   reduce: the root loads every other member's input and reduces in rank order into its
 *     output; non-root outputs are not written.
 *   reduce-scatter: every member is an owner and a reader: it loads block [its rank] of every
 *     input and reduces it in rank order into its output.
 * Block b reads part b (prims/chunks.cuh part_of over the grid), and its counters are block
 * b's, as in HANDSHAKE.
 */
#define NVSHMEMRS_FAMILY_PULL 3
#define NVSHMEMRS_FAMILY_LL_MAX_PES 64

/* ---- Exchanges: alltoallv, allgatherv, grouped send/recv (coll/exchange.h) ---- */

/* Transfers one launch takes in its argument list (sends and receives together). */
#define NVSHMEMRS_EXCHANGE_MAX_OPS 128
/* Receives from one peer in one launch. */
#define NVSHMEMRS_EXCHANGE_MAX_PER_PEER 8
/* A mailbox: a head word (receives posted, | NVSHMEMRS_EXCHANGE_BAD), then (offset, size) per
 * receive. Where every member is mapped (hdr.all_mapped), each word is a low-latency line
 * (prims/ll.cuh, 16 bytes: the word and the pair sequence's flag), so no fence and no arrive
 * signal follow it; otherwise words, then a fence and the arrive signal. Room for the lines. */
#define NVSHMEMRS_EXCHANGE_MAILBOX_WORDS (2 * (1 + 2 * NVSHMEMRS_EXCHANGE_MAX_PER_PEER))
/*
 * The exchange region (hdr.scratch, symmetric, zeroed at creation), u64 words, each array
 * indexed by team rank and `world` long:
 *   arrive[r]   set by r: r is ready for the k-th launch in which it receives from this PE
 *               (value k), and has written mailbox[k & 1][r] here (as words: where every
 *               member is mapped the mailbox's lines say so themselves, and r sets no k); or,
 *               where r takes that launch's pair as lines and writes no mailbox,
 *               k | 1 << 61 (a sender that chose the mailbox has a mismatch);
 *   data[r]     added to by r: bytes it delivered here, + 1 per transfer (all launches);
 *   expect[r]   local: what data[r] had reached when the last launch ended;
 *   sent[r], received[r]  local: launches in which this PE sent to / received from r;
 *   credit[r]   set by r: the last pair sequence of this PE's lines to r that r has read and
 *               zeroed (NVSHMEMRS_EXCHANGE_LINES), or the mismatch mark (1 << 62) once r found
 *               this PE's sends not matching its receives;
 *   ll_last[parity][r]  local: the pair sequence of the last launch in which this PE wrote
 *               lines into its slot at that parity on r;
 *   mailbox[parity][r][NVSHMEMRS_EXCHANGE_MAILBOX_WORDS]  written by r (see arrive).
 */
#define NVSHMEMRS_EXCHANGE_WORDS_PER_PE (8 + 2 * NVSHMEMRS_EXCHANGE_MAILBOX_WORDS)
/* A size word: bytes | dtype << NVSHMEMRS_EXCHANGE_DTYPE_SHIFT (sizes below 2^56). */
#define NVSHMEMRS_EXCHANGE_DTYPE_SHIFT 56
/* Why a transfer did not match (the status record's `signal` word, with FAIL_LENGTH):
 * SIZES: want = the receiver's size word, seen = the sender's;
 * COUNT: the receiver posts `want` receives from the sender, which sends `seen`;
 * PEER: the peer found the mismatch (its own error says what);
 * PEER_ARGS: the peer's own arguments were out of range;
 * BOUNDS: this PE's device counts reach element `seen` of a buffer of `want`;
 * and found by the receiver in the sender's lines (NVSHMEMRS_EXCHANGE_LINES):
 * SENT_SIZES: want = this PE's (the receiver's) size word, seen = the sender's;
 * SENT_COUNT: this PE posts `want` receives from the sender, which sends `seen`;
 * SENT_MODE: this PE takes the pair's transfers as lines (want 1) or through the mailbox
 *   (want 0), the sender the other way (`seen`): their limits or protocols differ;
 * RECEIVER: on the sender, the receiver found the mismatch (its error says what). */
#define NVSHMEMRS_EXCHANGE_SIZES 1
#define NVSHMEMRS_EXCHANGE_COUNT 2
#define NVSHMEMRS_EXCHANGE_PEER 3
#define NVSHMEMRS_EXCHANGE_PEER_ARGS 4
#define NVSHMEMRS_EXCHANGE_BOUNDS 5
#define NVSHMEMRS_EXCHANGE_SENT_SIZES 6
#define NVSHMEMRS_EXCHANGE_SENT_COUNT 7
#define NVSHMEMRS_EXCHANGE_SENT_MODE 8
#define NVSHMEMRS_EXCHANGE_RECEIVER 9
/*
 * Low-latency lines of the exchange (nvshmemrs_exchange_args.lines; list launches only). Each
 * ordered pair (sender s, receiver r) has a line slot on r: hdr.ll_scratch [parity][s] of
 * hdr.ll_slot_bytes, the parity that of the pair sequence q (the q-th launch in which s sends
 * to r). In a launch with lines, s stores into it, as prims/ll.cuh lines with flag
 * ll_flag(q), a header: line 0 holds `of | mode << 8` (mode 1: the pair's data follows as
 * lines), line 1 + j the size word of transfer nth = j; with mode 1, then the payload of
 * transfer 0, 1, ... from a line boundary each. r reads every line, compares the header with
 * its own receives (a difference is a SENT_* failure on r, and r sets credit[r] on s to the
 * mismatch mark), copies the payload out, zeroes the lines and, at the end, sets credit[r] on s
 * to q. s waits for credit >= ll_last[q & 1][r] before storing. A pair of mode 0 goes through
 * the mailbox as without lines, with no header, credit or ll_last. Both ends choose the mode
 * from the pair's sizes alone (NVSHMEMRS_EXCHANGE_PAIR_LINES), so they agree when the sizes
 * do; when they do not, r's marked arrive word fails an s that chose the mailbox (s then stores
 * its mode-0 header for r to fail on), and r, having chosen the mailbox, watches line 0 of
 * the slot while it waits for the data, so the header of an s that took lines fails it.
 */
/* Header lines of a pair besides one per transfer. */
#define NVSHMEMRS_EXCHANGE_HEADER_LINES 1
/* nvshmemrs_transfer.lines: this transfer's pair goes as lines (mode 1). */
#define NVSHMEMRS_EXCHANGE_PAIR_LINES 1
/* How a launch names its transfers (nvshmemrs_exchange_args.mode). */
#define NVSHMEMRS_EXCHANGE_LIST 0
#define NVSHMEMRS_EXCHANGE_ALLGATHERV 1
#define NVSHMEMRS_EXCHANGE_ALLTOALLV 2

/* One send or receive: `bytes` from local `addr` (send) or into symmetric `addr` (receive). */
typedef struct nvshmemrs_transfer {
    void *addr;
    uint64_t bytes;
    int32_t peer; /* team rank */
    uint8_t dtype; /* NVSHMEMRS_DTYPE_*: both sides of a transfer must agree */
    /* This transfer is the nth of the `of` between this PE and `peer` in its direction
     * (matched in that order with the peer's). */
    uint8_t nth;
    uint8_t of;
    /* NVSHMEMRS_EXCHANGE_PAIR_LINES where the launch has lines and the transfers between this
     * PE and `peer` in this direction go as lines; the same on all of them. */
    uint8_t lines;
} nvshmemrs_transfer;

/*
 * One exchange launch. LIST: ops[0 .. n_send) are sends, then n_recv receives; with lines,
 * the transfers of one direction and peer are consecutive, in nth order. ALLGATHERV:
 * counts[0], counts[1] are device arrays of n element counts and displacements (the same on
 * every member); member r sends its input (counts[0][r] elements) to displacement counts[1][r]
 * of every output. ALLTOALLV: counts[0..4] are send counts, send displacements, receive counts
 * and receive displacements. Device counts are checked against in_count and hdr.count (input
 * and output elements).
 */
typedef struct nvshmemrs_exchange_args {
    nvshmemrs_coll_header hdr;
    int mode;
    int elem_bytes;
    int dtype;
    int n_send;
    int n_recv;
    /* The collective's code a failure names (nvshmemrs_family_args.code). */
    int code;
    /* Non-zero: this launch has low-latency lines (LIST only; every member mapped): the pairs
     * with another PE whose transfers say NVSHMEMRS_EXCHANGE_PAIR_LINES go as lines, header
     * and data, the others through the mailbox. */
    int lines;
    /* Non-zero (LIST with lines only): every launch on this workspace sends to and receives
     * from every other member (alltoallv, allgatherv), so each pair's previous message in the
     * other direction proves the slot of two launches back was read: no credits are waited
     * for or given (coll/exchange.cuh). */
    int every_pair;
    /* Non-zero (LIST with lines only): every transfer with another PE goes as lines, none
     * through the mailbox, so the step leaves out the mailbox's phases (coll/exchange.cuh). */
    int lines_only;
    uint64_t in_count;
    const uint64_t *counts[4];
    nvshmemrs_transfer ops[NVSHMEMRS_EXCHANGE_MAX_OPS];
} nvshmemrs_exchange_args;

/* ---- Barrier and stream signal wait (core/barrier.h) ---- */

typedef struct nvshmemrs_barrier_args {
    uint64_t *arrivals;  /* symmetric, n_pes words, zero at first use */
    uint64_t *state;     /* local: [0] barriers completed, [1] broken */
    void *wait_status;   /* host-mapped struct nvshmemrs_wait_status */
    uint64_t timeout_ns; /* how long the barrier may wait in all */
    int quiet;           /* complete this PE's device-initiated operations first */
} nvshmemrs_barrier_args;

/* ---- Pipeline channels (pipeline/channel.h documents the memory layout and counters) ---- */

/* What each message adds to a counter. A send runs at most TOTAL - 1 blocks (one unit is the
 * length word's), a receive at most TOTAL. */
#define NVSHMEMRS_CHANNEL_TOTAL 64

/* flags: take NVSHMEM's put even where the peer's memory is mapped (diagnostics, tests). */
#define NVSHMEMRS_CHANNEL_NO_DIRECT 1

/* One channel operation; field use per launcher in pipeline/channel.h. Passed by value to the
 * kernel. */
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

/* ---- Sparse selection and sparse sets (sparse/sparse.h; src/sparse/) ---- */

/*
 * A sparse set in device memory: `capacity` (index, value) pairs and one count word. Indexes
 * are int32_t or int64_t (the call's index_type: NVSHMEMRS_DTYPE_I32 or _I64), values of the
 * call's dtype (NVSHMEMRS_DTYPE_F32 or _BF16). The selection kernels and the merge write pairs
 * sorted by index, no index twice. *count is the true number of pairs, which may exceed
 * capacity: then the first `capacity` pairs (the lowest indexes) are held, and readers take
 * min(*count, capacity).
 */
typedef struct nvshmemrs_sparse_set {
    void *idx;
    void *val;
    uint64_t *count;
    uint64_t capacity;
} nvshmemrs_sparse_set;

/* Top-k by magnitude or threshold compaction of a dense gradient of n elements. */
typedef struct nvshmemrs_sparse_select_args {
    const void *grad;
    uint64_t n;
    /* Top-k: how many to select. */
    uint64_t k;
    /* Threshold: select |g| >= threshold (not NaN; 0 or below selects every element). */
    float threshold;
    int32_t dtype;
    int32_t index_type;
    int32_t pad;
    /* Workspace: nvshmemrs_sparse_select_scratch_words(n or more) words of device memory. */
    uint64_t *scratch;
    uint64_t scratch_words;
    nvshmemrs_sparse_set out;
    /* Threshold: when not NULL, the threshold is read from this device word instead (so a
     * kernel may compute it without a host round trip); a NaN there counts as +infinity. */
    const float *device_threshold;
} nvshmemrs_sparse_select_args;

/* Union by index of two sparse sets, values added where both hold an index. */
typedef struct nvshmemrs_sparse_merge_args {
    nvshmemrs_sparse_set a;
    nvshmemrs_sparse_set b;
    nvshmemrs_sparse_set out;
    /* Workspace: nvshmemrs_sparse_merge_scratch_words(a.capacity, b.capacity) words or more. */
    uint64_t *scratch;
    uint64_t scratch_words;
    int32_t dtype;
    int32_t index_type;
} nvshmemrs_sparse_merge_args;

/* dense[idx[j]] += val[j] for j < min(*input.count, input.capacity); indexes outside 0..n are
 * skipped. */
typedef struct nvshmemrs_sparse_scatter_args {
    nvshmemrs_sparse_set input;
    void *dense;
    uint64_t n;
    int32_t dtype;
    int32_t index_type;
} nvshmemrs_sparse_scatter_args;

#endif
