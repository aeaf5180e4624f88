// The step of the exchanges (coll/exchange.h): alltoallv, allgatherv and grouped send/recv
// differ only in where their transfers come from (a Src: the launch's list, or counts in device
// memory).
//
// A Src has UNIQUE (at most one transfer per peer and direction, peer r's being number r),
// n_send()/send(i), n_recv()/recv(i) (Xfer), and bad(&limit, &reach): device counts that reach
// past a buffer.
//
// A launch with lines (abi.h NVSHMEMRS_EXCHANGE_LINES; list launches, every member mapped)
// moves small pairs without the mailbox's round trip: the sender stores a header and the data
// as low-latency lines (prims/ll.cuh) into its slot on the receiver and is done; the receiver
// polls them, compares the header with its own receives and copies the data out. The sender
// only waits for the receiver's credit of the launch two pair sequences back (long there in a
// stream of calls), so a slot is never written before it was read. Where every launch on the
// workspace pairs every member with every other both ways (alltoallv, allgatherv: abi.h
// every_pair), no credit is waited for or given: the sender's previous launch received the
// receiver's message of that launch, sent after the receiver's launch before it completed, which
// had read and zeroed the slot (the family's lines rely on the same order, prims/ll.cuh).
// Pairs too large for a slot go through the mailbox exactly as without lines: no header,
// credit or fence, which cost a mailbox call about 5 us. A pair whose two ends chose
// differently (their sizes differ) still fails at once, not at the deadline: a receiver that
// took lines sets its arrive word on the sender to the pair sequence with XCH_LINES_MARK
// instead of writing a mailbox, so a sender that chose the mailbox fails there and stores its
// header for the receiver to fail on; a receiver that chose the mailbox watches its slot's
// first line while it waits for the data, so the header of a sender that took lines fails it.
// The transfers of one direction and peer are consecutive in nth order there (the host sorts
// them): a pair is the index of its nth-0 transfer and the `of` after it.
#ifndef NVSHMEM_RS_EXCHANGE_CUH
#define NVSHMEM_RS_EXCHANGE_CUH

#include "core/nvshmem_device.cuh"
#include <stdint.h>

#include "abi.h"
#include "prims/chunks.cuh"
#include "prims/ll.cuh"
#include "prims/pdl.cuh"
#include "prims/put_signal.cuh"
#include "prims/step.cuh"
#include "prims/waiter.cuh"

namespace {

// One transfer as the step sees it (nvshmemrs_transfer, with the address as bytes).
struct Xfer {
    char *addr;
    uint64_t bytes;
    int peer;
    int dtype;
    int nth;
    int of;
    // The pair goes as lines (nvshmemrs_transfer.lines; list launches only).
    bool ll;
};

// Added to a receiver's data counter instead of the data when a transfer does not match: the
// receiver's wait ends at once and it records the failure too. Also the mark a receiver sets
// a sender's credit[receiver] to when the sender's lines do not match its receives.
constexpr uint64_t XCH_MISMATCH = 1ull << 62;
// In a mailbox head: the receiver's own arguments were out of range.
constexpr uint64_t XCH_BAD = 1ull << 63;
// In an arrive word, with the pair sequence below it: the receiver takes that launch's pair as
// lines, so it wrote no mailbox (a sender that chose the mailbox has a mismatch).
constexpr uint64_t XCH_LINES_MARK = 1ull << 61;

__device__ __forceinline__ uint64_t size_word(const Xfer &x) {
    return x.bytes | (uint64_t)x.dtype << NVSHMEMRS_EXCHANGE_DTYPE_SHIFT;
}

// The exchange region (abi.h) at hdr.scratch.
struct Region {
    uint64_t *w;
    int world;
    __device__ uint64_t *arrive(int r) const { return w + r; }
    __device__ uint64_t *data(int r) const { return w + (size_t)world + r; }
    __device__ uint64_t *expect(int r) const { return w + 2 * (size_t)world + r; }
    __device__ uint64_t *sent(int r) const { return w + 3 * (size_t)world + r; }
    __device__ uint64_t *received(int r) const { return w + 4 * (size_t)world + r; }
    __device__ uint64_t *credit(int r) const { return w + 5 * (size_t)world + r; }
    // The last pair sequence at seq's parity in which this PE wrote lines to r.
    __device__ uint64_t *ll_last(uint64_t seq, int r) const {
        return w + (6 + (size_t)(seq & 1)) * world + r;
    }
    // The mailbox r writes here for the seq-th launch in which r receives from this PE (words,
    // or lines where every member is mapped: abi.h NVSHMEMRS_EXCHANGE_MAILBOX_WORDS).
    __device__ uint64_t *mailbox(uint64_t seq, int r) const {
        return w + 8 * (size_t)world +
               ((size_t)(seq & 1) * world + r) * NVSHMEMRS_EXCHANGE_MAILBOX_WORDS;
    }
};

// A transfer that does not match, seen on this PE (one thread).
__device__ void exchange_fail(const Waiter &w, int pe, uint64_t why, uint64_t want,
                              uint64_t seen) {
    nvshmemrs_record_failure(w.site(pe), NVSHMEMRS_FAIL_LENGTH, why, want, seen, 0);
}

// Index of the nth receive from `peer`, or -1.
template <typename Src>
__device__ int nth_recv_from(const Src &src, int peer, int nth) {
    if constexpr (Src::UNIQUE) {
        return nth == 0 ? peer : -1;
    } else {
        for (int i = 0; i < src.n_recv(); ++i) {
            const Xfer y = src.recv(i);
            if (y.peer == peer && y.nth == nth) return i;
        }
        return -1;
    }
}

// This PE's transfer to itself: `bytes` from `from` to `to`.
struct OwnPart {
    char *to;
    const char *from;
    uint64_t bytes;
};

// This PE's transfer to itself where it is its only one and its receive matches (else step 5
// of exchange_step records what is wrong) and not in place: true, into *o.
template <typename Src>
__device__ bool own_part(const nvshmemrs_coll_header &h, const Src &src, OwnPart *o) {
    int s = -1;
    if constexpr (Src::UNIQUE) {
        s = h.rank < src.n_send() ? h.rank : -1;
    } else {
        for (int i = 0; i < src.n_send(); ++i) {
            if (src.send(i).peer != h.rank) continue;
            if (s >= 0) return false;
            s = i;
        }
    }
    if (s < 0) return false;
    const Xfer x = src.send(s);
    const int r = nth_recv_from(src, h.rank, 0);
    if (x.peer != h.rank || x.nth != 0 || x.of != 1 || r < 0) return false;
    const Xfer y = src.recv(r);
    if (y.of != 1 || size_word(y) != size_word(x) || y.addr == x.addr) return false;
    *o = OwnPart{y.addr, x.addr, x.bytes};
    return true;
}

// ---- Lines (abi.h NVSHMEMRS_EXCHANGE_LINES) ----

static_assert(NVSHMEMRS_EXCHANGE_HEADER_LINES == 1, "line 0 is the pair word");

// Lines polled together by a receiver (one per pair); more pairs go group after group.
constexpr int XCH_LL_GROUP = 8;
// Most header lines of a pair.
constexpr int XCH_HEADER_MAX = NVSHMEMRS_EXCHANGE_HEADER_LINES + NVSHMEMRS_EXCHANGE_MAX_PER_PEER;

__device__ __forceinline__ uint64_t payload_lines(uint64_t bytes) { return (bytes + 7) / 8; }

// Header line 0: the pair's transfers and its mode.
__device__ __forceinline__ uint64_t pair_word(const Xfer &x) {
    return (uint64_t)x.of | (uint64_t)(x.ll ? 1 : 0) << 8;
}

// Header line i of the pair whose nth-0 transfer is get(g).
template <typename Get>
__device__ __forceinline__ uint64_t header_word(Get get, int g, int i) {
    return i == 0 ? pair_word(get(g)) : size_word(get(g + i - NVSHMEMRS_EXCHANGE_HEADER_LINES));
}

// Payload lines of the pair at g, after its header: in mode 1 those of each of its transfers,
// from a line boundary each; none in mode 0.
template <typename Get>
__device__ uint64_t pair_data_lines(Get get, int g) {
    const Xfer x = get(g);
    uint64_t t = 0;
    if (x.ll)
        for (int j = 0; j < x.of; ++j) t += payload_lines(get(g + j).bytes);
    return t;
}

// Payload line d of the pair at g with `of` transfers: the transfer get(*j) and the line
// within it (*k). False past the pair's payload.
template <typename Get>
__device__ __forceinline__ bool data_line(Get get, int g, int of, uint64_t d, int *j,
                                          uint64_t *k) {
    for (int t = 0; t < of; ++t) {
        const uint64_t n = payload_lines(get(g + t).bytes);
        if (d < n) {
            *j = g + t;
            *k = d;
            return true;
        }
        d -= n;
    }
    return false;
}

// The transfers to and from this PE itself as plan_lines saw them (shared memory): how many
// each way (n[0] sends, n[1] receives) and one of each.
struct OwnSeen {
    int n[2];
    Xfer x[2];
};

// One pair with another PE in a launch with lines, as a block sees it (shared memory).
struct LinePair {
    // The slot: [parity][this rank] on the receiver, mapped (a send), or [parity][sender]
    // here (a receive). Its header lines first, then its payload lines.
    uint4 *slot;
    // The pair sequence of this launch (its flag, its slot's parity).
    uint64_t seq;
    // A send: the receiver's credit this launch needs (ll_last at its parity), and the credit
    // word as plan_lines read it, in the same wave as the sequence (no second round of misses
    // where, as usual, the credit is long there).
    uint64_t credit_want, credit_seen;
    // This block's share of the pair's payload lines (counted from the end of the header).
    uint32_t d0, d1;
    // A pair of one transfer (the usual case): its address, bytes and header words, so that
    // the lines' loops and the header read them here instead of walking the launch's list
    // (one == false: walk it, data_line, header_word). The header's words from the list
    // were most of the 2 us the first line of a pair took (2 x H200).
    char *addr;
    uint64_t bytes;
    uint64_t word[2];
    bool one;
    // Index of the pair's nth-0 transfer among the sends or the receives.
    int g;
    int peer;
    int pe;
    // Header lines.
    int head;
};

// The pairs of this launch with other PEs that go as lines, into `plan`: sends from the front (*n_send),
// receives from the back (*n_recv; together at most NVSHMEMRS_EXCHANGE_MAX_OPS), in no
// particular order, built by the block's threads together. `ll_base`: each member's line
// region (prims/ll.cuh ll_peer_bases, read before the launch's wait), or null where the team
// is larger than that table (each send's slot is then looked up here).
// Where `own` is given (shared memory), the transfers to and from this PE itself are counted
// there too, the last of each direction kept (own_part_planned). *check (shared memory): 1
// where a send's credit word, as read here, was short of what it needs or carried a
// receiver's mismatch mark (wait_credits must run), else 0: with every_pair, or in a stream of
// calls, the credits are there and the block skips that barrier. Where `broken` is given
// (shared memory), the workspace's broken flag is read beside the pairs' loads, one wave of
// misses instead of two, into it (block_broken's answer).
template <typename Src>
__device__ void plan_lines(const nvshmemrs_coll_header &h, const Src &src, const Region &R,
                           char *const *ll_base, bool every_pair, LinePair *plan, int *n_send,
                           int *n_recv, int *check, OwnSeen *own = nullptr,
                           int *broken = nullptr) {
    if (threadIdx.x == 0) {
        *n_send = *n_recv = *check = 0;
        if (own != nullptr) own->n[0] = own->n[1] = 0;
        if (broken != nullptr) *broken = 0;
    }
    __syncthreads();
    const uint64_t was_broken = broken != nullptr && threadIdx.x == 0
                                    ? *(volatile uint64_t *)&h.state->broken
                                    : 0;
    const int ns = src.n_send(), nr = src.n_recv();
    auto sends = [&](int k) { return src.send(k); };
    auto recvs = [&](int k) { return src.recv(k); };
    for (int i = threadIdx.x; i < ns + nr; i += blockDim.x) {
        const bool send = i < ns;
        const int g = send ? i : i - ns;
        const Xfer x = send ? src.send(g) : src.recv(g);
        if (x.peer == h.rank && own != nullptr) {
            atomicAdd(&own->n[send ? 0 : 1], 1);
            own->x[send ? 0 : 1] = x;
        }
        if (x.peer == h.rank || x.nth != 0 || !x.ll) continue;
        LinePair p;
        p.g = g;
        p.addr = x.addr;
        p.bytes = x.bytes;
        p.one = x.of == 1;
        p.word[0] = pair_word(x);
        p.word[1] = size_word(x);
        p.peer = x.peer;
        p.pe = h.pes[x.peer];
        p.head = NVSHMEMRS_EXCHANGE_HEADER_LINES + x.of;
        // Loads that do not depend on each other, issued together: the sequence, and for a
        // send both parities' last line sequence (none with every_pair: no credits) and the
        // credit word (which also carries a receiver's mismatch mark).
        uint64_t last0 = 0, last1 = 0, credit = 0;
        if (send) {
            if (!every_pair) {
                last0 = *R.ll_last(0, x.peer);
                last1 = *R.ll_last(1, x.peer);
            }
            credit = *(volatile uint64_t *)R.credit(x.peer);
        }
        p.seq = (send ? *R.sent(x.peer) : *R.received(x.peer)) + 1;
        const int parity = (int)(p.seq & 1);
        p.credit_want = parity ? last1 : last0;
        p.credit_seen = credit;
        if (send && (credit < p.credit_want || credit >= XCH_MISMATCH)) *check = 1;
        size_t d0, d1;
        ll_block_lines(send ? pair_data_lines(sends, g) : pair_data_lines(recvs, g), &d0, &d1);
        p.d0 = (uint32_t)d0;
        p.d1 = (uint32_t)d1;
        if (send) {
            uint4 *mine = ll_slot(h, parity, h.rank);
            p.slot = ll_base != nullptr
                         ? reinterpret_cast<uint4 *>(ll_base[x.peer] +
                                                     (reinterpret_cast<char *>(mine) - h.ll_scratch))
                         : static_cast<uint4 *>(nvshmem_ptr(mine, p.pe));
            plan[atomicAdd(n_send, 1)] = p;
        } else {
            p.slot = ll_slot(h, parity, x.peer);
            plan[NVSHMEMRS_EXCHANGE_MAX_OPS - 1 - atomicAdd(n_recv, 1)] = p;
        }
    }
    if (was_broken != 0) *broken = 1;
    __syncthreads();
}

// Until every receiver of this launch's lines has read the lines this PE last wrote into its
// slot at the launch's parity (credit >= ll_last; with every_pair credit_want is 0: nothing
// to wait for), the whole block. False when a wait failed, or a receiver marked this PE's
// sends as not matching (recorded). Nothing to do, and no barrier, where plan_lines saw every
// credit there (`check` 0, the same for the whole block).
__device__ bool wait_credits(const Waiter &w, const Region &R, const LinePair *plan, int n,
                             int check) {
    if (check == 0) return true;
    bool ok = true;
    for (int k = threadIdx.x; k < n && ok; k += blockDim.x) {
        const LinePair &p = plan[k];
        // Read with the plan; polled again only where it was not there yet.
        uint64_t seen = p.credit_seen;
        if (seen < p.credit_want) {
            ok = w.ge(R.credit(p.peer), p.credit_want, p.pe);
            seen = *(volatile uint64_t *)R.credit(p.peer);
        }
        if (ok && seen >= XCH_MISMATCH) {
            exchange_fail(w, p.pe, NVSHMEMRS_EXCHANGE_RECEIVER, 0, 0);
            ok = false;
        }
    }
    return !__syncthreads_or(!ok);
}

// Every send pair's lines, stored into its receiver's slot: block 0 the headers (a thread per
// pair), every block its share of the payloads.
template <typename Src>
__device__ void send_lines(const Src &src, const LinePair *plan, int n) {
    auto get = [&](int k) { return src.send(k); };
    if (blockIdx.x == 0) {
        for (int k = threadIdx.x; k < n; k += blockDim.x) {
            const LinePair &p = plan[k];
            const uint32_t flag = ll_flag(p.seq);
            for (int i = 0; i < p.head; ++i) {
                const uint64_t v = p.one ? p.word[i] : header_word(get, p.g, i);
                st_line_word(p.slot + i, v, flag);
            }
        }
    }
    for (int k = 0; k < n; ++k) {
        const LinePair &p = plan[k];
        const uint32_t flag = ll_flag(p.seq);
        const int of = p.head - NVSHMEMRS_EXCHANGE_HEADER_LINES;
        for (size_t d = p.d0 + threadIdx.x; d < p.d1; d += blockDim.x) {
            uint2 v;
            if (p.one) {
                v = load8_any(p.addr + 8 * d, p.bytes - 8 * d);
            } else {
                int j;
                uint64_t l;
                if (!data_line(get, p.g, of, d, &j, &l)) continue;
                const Xfer y = get(j);
                v = load8_any(y.addr + 8 * l, y.bytes - 8 * l);
            }
            st_line(p.slot + p.head + d, v.x, v.y, flag);
        }
    }
}

// The header of send pair g (its nth-0 transfer) with pair sequence seq, stored by one thread
// into its slot on receiver pe: a mailbox pair's, where the receiver took lines for it (the
// receiver is in this launch, past its last read of the slot, and fails on the header).
template <typename Src>
__device__ void send_header(const nvshmemrs_coll_header &h, const Src &src, int g, uint64_t seq,
                            int pe) {
    auto get = [&](int k) { return src.send(k); };
    uint4 *slot = static_cast<uint4 *>(nvshmem_ptr(ll_slot(h, (int)(seq & 1), h.rank), pe));
    const uint32_t flag = ll_flag(seq);
    const int head = NVSHMEMRS_EXCHANGE_HEADER_LINES + get(g).of;
    for (int i = 0; i < head; ++i) {
        const uint64_t v = header_word(get, g, i);
        st_line_word(slot + i, v, flag);
    }
}

// The header of receive pair p, read by one thread: its lines polled together (zeroed once
// read; the count checked as soon as line 0 is in, for a sender with fewer transfers writes
// fewer of them), then compared with this PE's receives in order: the count, each size word,
// the mode. False on a difference (recorded, and the sender's credit marked so that it fails
// too: at once where it waits for this PE, else at its next send here), a timeout or a broken
// workspace.
template <typename Src>
__device__ bool recv_header(const nvshmemrs_coll_header &h, const Waiter &w, const Region &R,
                            const Src &src, const LinePair &p) {
    auto get = [&](int k) { return src.recv(k); };
    const uint32_t flag = ll_flag(p.seq);
    uint64_t got[XCH_HEADER_MAX];
    uint32_t pending = (1u << p.head) - 1;
    uint64_t start = 0;
    uint64_t why = 0, want = 0, seen = 0;
    for (uint32_t spin = 1; pending != 0; ++spin) {
        uint4 v[XCH_HEADER_MAX];
#pragma unroll
        for (int i = 0; i < XCH_HEADER_MAX; ++i)
            if (pending >> i & 1) v[i] = ld_line_once(p.slot + i);
        uint32_t late = 0;
#pragma unroll
        for (int i = 0; i < XCH_HEADER_MAX; ++i) {
            if (!(pending >> i & 1)) continue;
            if (v[i].y == flag && v[i].w == flag) {
                got[i] = line_word(v[i]);
                p.slot[i] = make_uint4(0, 0, 0, 0);
                pending &= ~(1u << i);
            } else if (late == 0) {
                late = v[i].y != flag ? v[i].y : v[i].w;
            }
        }
        if (!(pending & 1) && (got[0] & 0xff) != (uint64_t)(p.head - 1)) {
            why = NVSHMEMRS_EXCHANGE_SENT_COUNT, want = p.head - 1, seen = got[0] & 0xff;
            break;
        }
        if (pending != 0 && (spin & 255) == 0) {
            const int i = __ffs(pending) - 1;
            if (w.give_up(p.slot + i, flag, late, &start, p.pe)) return false;
        }
    }
    for (int i = 1; why == 0 && i < p.head; ++i) {
        const uint64_t mine = p.one ? p.word[i] : header_word(get, p.g, i);
        if (got[i] != mine) why = NVSHMEMRS_EXCHANGE_SENT_SIZES, want = mine, seen = got[i];
    }
    const uint64_t mine = p.one ? p.word[0] : pair_word(get(p.g));
    if (why == 0 && got[0] != mine)
        why = NVSHMEMRS_EXCHANGE_SENT_MODE, want = mine >> 8, seen = got[0] >> 8;
    if (why == 0) return true;
    exchange_fail(w, p.pe, why, want, seen);
    nvshmemx_signal_op(R.credit(h.rank), XCH_MISMATCH, NVSHMEM_SIGNAL_SET, p.pe);
    return false;
}

// Every receive pair's lines: block 0 checks the headers (a thread per pair, recv_header),
// every block polls its share of the payloads, each thread one line of up to XCH_LL_GROUP
// pairs at a time (their latencies overlap), copies each out and zeroes it (its sender's next
// store to it waits for this launch's credit). In block 0 the payload goes to the threads
// after the header checkers' warps, so that no payload line waits behind a header (a
// header's wait took 1.4-1.7 us, then its thread's payload line 1.25 more, 2 x H200); where
// those warps would be half the block, the checkers poll payload too, after their headers.
// False when a wait timed out, the workspace broke meanwhile or a header did not match
// (recorded).
template <typename Src>
__device__ bool recv_lines(const nvshmemrs_coll_header &h, const Waiter &w, const Region &R,
                           const Src &src, const LinePair *plan, int n) {
    constexpr int G = XCH_LL_GROUP;
    auto get = [&](int k) { return src.recv(k); };
    int first = 0;
    if (blockIdx.x == 0) {
        const int checkers = (n + 31) & ~31;
        if (2 * checkers <= (int)blockDim.x) first = checkers;
        for (int k = threadIdx.x; k < n; k += blockDim.x)
            if (!recv_header(h, w, R, src, plan[k])) return false;
        if ((int)threadIdx.x < first) return true;
    }
    const size_t stride = blockDim.x - first;
    for (size_t off = threadIdx.x - first;; off += stride) {
        bool any = false;
        for (int k0 = 0; k0 < n; k0 += G) {
            uint32_t pending = 0;
#pragma unroll
            for (int j = 0; j < G; ++j)
                if (k0 + j < n && plan[k0 + j].d0 + off < plan[k0 + j].d1) pending |= 1u << j;
            any |= pending != 0;
            uint64_t start = 0;
            for (uint32_t spin = 1; pending != 0; ++spin) {
                uint4 v[G];
#pragma unroll
                for (int j = 0; j < G; ++j) {
                    const LinePair &p = plan[k0 + j];
                    if (pending >> j & 1) v[j] = ld_line_once(p.slot + p.head + p.d0 + off);
                }
                int late = -1;
                uint32_t seen = 0;
#pragma unroll
                for (int j = 0; j < G; ++j) {
                    if (!(pending >> j & 1)) continue;
                    const LinePair &p = plan[k0 + j];
                    const uint32_t flag = ll_flag(p.seq);
                    if (v[j].y == flag && v[j].w == flag) {
                        const uint64_t d = p.d0 + off;
                        p.slot[p.head + d] = make_uint4(0, 0, 0, 0);
                        pending &= ~(1u << j);
                        const uint2 got = make_uint2(v[j].x, v[j].z);
                        int t;
                        uint64_t l;
                        if (p.one) {
                            store8_any(p.addr + 8 * d, p.bytes - 8 * d, got);
                        } else if (data_line(get, p.g, p.head - NVSHMEMRS_EXCHANGE_HEADER_LINES,
                                             d, &t, &l)) {
                            const Xfer y = get(t);
                            store8_any(y.addr + 8 * l, y.bytes - 8 * l, got);
                        }
                    } else if (late < 0) {
                        late = j;
                        seen = v[j].y != flag ? v[j].y : v[j].w;
                    }
                }
                if (pending != 0 && (spin & 255) == 0) {
                    const LinePair &p = plan[k0 + late];
                    if (w.give_up(p.slot + p.head + p.d0 + off, ll_flag(p.seq), seen, &start,
                                  p.pe))
                        return false;
                }
            }
        }
        if (!any) return true;
    }
}

// What the data counter of mailbox receive pair i (its nth-0 transfer) gains in a launch: the
// pair's bytes and one per transfer.
template <typename Src>
__device__ uint64_t mailbox_pair_need(const Src &src, int i) {
    const Xfer x = src.recv(i);
    uint64_t need = 0;
    for (int j = i, k = 0; j < src.n_recv() && k < x.of; ++j) {
        const Xfer y = src.recv(j);
        if (y.peer != x.peer) continue;
        need += y.bytes + 1;
        ++k;
    }
    return need;
}

// What wait_arrive saw.
enum ArriveSeen { ARRIVE_FAILED, ARRIVE_MAILBOX, ARRIVE_LINES };

// A mailbox as lines: a 16-byte line per word, and one 32-bit mask of them in wait_arrive.
static_assert(NVSHMEMRS_EXCHANGE_MAILBOX_WORDS >= 2 * (1 + 2 * NVSHMEMRS_EXCHANGE_MAX_PER_PEER) &&
                  NVSHMEMRS_EXCHANGE_MAILBOX_WORDS % 2 == 0 &&
                  1 + 2 * NVSHMEMRS_EXCHANGE_MAX_PER_PEER <= 32,
              "the mailbox's lines must fit its words and wait_arrive's mask");

// Word i of the mailbox at `box` as a receiver wrote it: where every member is mapped
// (`lines`), from its line (read after wait_arrive saw it), else the word.
__device__ __forceinline__ uint64_t box_word(const volatile uint64_t *box, int i, bool lines) {
    if (!lines) return box[i];
    return line_word(
        ld_line_once(reinterpret_cast<const uint4 *>(const_cast<uint64_t *>(box)) + i));
}

// Until receiver r has written this launch's mailbox here: ARRIVE_MAILBOX. As words, its
// arrive[r] >= want says so; as lines (`lines`, every member mapped), the mailbox's head line
// and the lines of the first min(posted, `of`) transfers carry want's flag (the receiver
// stored them without a fence, which cost its step 1.3-1.4 us back to back and up to 8 after
// compute at 16 MiB, 2 x H200; the caller's barrier then lets the block read them). Until r
// marked its arrive word for this launch (it took the pair as lines, so wrote no mailbox):
// ARRIVE_LINES, nothing recorded; until it marked this PE's sends as not matching (credit[r]):
// ARRIVE_FAILED, recorded; or until the wait timed out: ARRIVE_FAILED. A mark of an earlier
// launch (a pair sequence below want) is waited past.
__device__ ArriveSeen wait_arrive(const Waiter &w, const Region &R, int r, uint64_t want, int pe,
                                  bool lines, int of) {
    volatile uint64_t *arrive = R.arrive(r);
    volatile uint64_t *credit = R.credit(r);
    const uint4 *box = reinterpret_cast<const uint4 *>(R.mailbox(want, r));
    const uint32_t flag = ll_flag(want);
    // Lines of the mailbox still to come (bit i: line i), once the head is in.
    uint32_t pending = 1;
    uint64_t start = 0;
    for (uint32_t spin = 1;; ++spin) {
        const uint64_t seen = *arrive;
        if (seen & XCH_LINES_MARK) {
            if ((seen & ~XCH_LINES_MARK) >= want) return ARRIVE_LINES;
        } else if (!lines && seen >= want) {
            nvshmemrs_after_wait(arrive, w.consistency);
            return ARRIVE_MAILBOX;
        }
        if (lines) {
#pragma unroll 1
            for (int i = 0; i < 32 && pending >> i != 0; ++i) {
                if (!(pending >> i & 1)) continue;
                const uint4 v = ld_line_once(box + i);
                if (v.y != flag || v.w != flag) continue;
                pending &= ~(1u << i);
                if (i == 0) {
                    const int posted = (int)(line_word(v) & 0xff);
                    const int n = posted < of ? posted : of;
                    pending |= ((1u << (2 * n)) - 1) << 1;
                }
            }
            if (pending == 0) return ARRIVE_MAILBOX;
        }
        if (*credit >= XCH_MISMATCH) {
            exchange_fail(w, pe, NVSHMEMRS_EXCHANGE_RECEIVER, 0, 0);
            return ARRIVE_FAILED;
        }
        if ((spin & 255) == 0) {
            if (w.give_up(const_cast<uint64_t *>(arrive), want, seen, &start, pe))
                return ARRIVE_FAILED;
            // Past a millisecond a wait is no longer latency-bound (prims/deadline.cuh).
            if (nvshmemrs_globaltimer() - start > 1000000) __nanosleep(1000);
        }
    }
}

// Until mailbox receive pair g (its nth-0 transfer, from peer r on world PE pe) has delivered
// (data[r] >= want), then true, in a launch with lines, where block 0 also watches line 0 of
// the pair's slot: a header there means the sender took the pair as lines while this PE chose
// the mailbox, so the header is read and compared (recv_header records the difference and
// marks the sender's credit) and the wait ends false. Other blocks end when block 0's failure
// breaks the workspace.
template <typename Src>
__device__ bool wait_delivered(const nvshmemrs_coll_header &h, const Waiter &w, const Region &R,
                               const Src &src, int g, uint64_t want, int pe) {
    const Xfer x = src.recv(g);
    if (blockIdx.x != 0) return w.ge(R.data(x.peer), want, pe);
    LinePair p;
    p.seq = *R.received(x.peer) + 1;
    p.slot = ll_slot(h, (int)(p.seq & 1), x.peer);
    p.g = g;
    p.one = false;
    p.peer = x.peer;
    p.pe = pe;
    p.head = NVSHMEMRS_EXCHANGE_HEADER_LINES + x.of;
    const uint32_t flag = ll_flag(p.seq);
    volatile uint64_t *data = R.data(x.peer);
    uint64_t start = 0;
    for (uint32_t spin = 1;; ++spin) {
        const uint64_t seen = *data;
        if (seen >= want) {
            nvshmemrs_after_wait(data, w.consistency);
            return true;
        }
        const uint4 v = ld_line_once(p.slot);
        if (v.y == flag || v.w == flag) {
            // Its mode differs from this PE's, so the comparison fails.
            recv_header(h, w, R, src, p);
            return false;
        }
        if ((spin & 255) == 0) {
            if (w.give_up(const_cast<uint64_t *>(data), want, seen, &start, pe)) return false;
            if (nvshmemrs_globaltimer() - start > 1000000) __nanosleep(1000);
        }
    }
}

// Block 0 marks the arrive word of each peer this PE receives lines from (the pair's sequence
// with XCH_LINES_MARK), which only a sender that chose the mailbox reads (it fails there).
// The thread that checks the pair's header next (recv_lines). Where the members' line regions
// are known (`ll_base`, plan_lines), a plain store at the word's offset from there: the mark
// orders nothing, and NVSHMEM's signal looked the peer up through its device state first
// (0.4-0.7 us before the header check, 2 x H200).
__device__ __forceinline__ void mark_line_receives(const nvshmemrs_coll_header &h,
                                                   const Region &R, char *const *ll_base,
                                                   const LinePair *plan, int n_lrecv) {
    if (blockIdx.x != 0) return;
    const LinePair *recvs = plan + NVSHMEMRS_EXCHANGE_MAX_OPS - n_lrecv;
    // Both regions lie in the symmetric heap, which a peer maps in one piece.
    const ptrdiff_t off = reinterpret_cast<char *>(R.arrive(h.rank)) - h.ll_scratch;
    for (int k = threadIdx.x; k < n_lrecv; k += blockDim.x) {
        const LinePair &p = recvs[k];
        const uint64_t mark = p.seq | XCH_LINES_MARK;
        if (ll_base != nullptr)
            *reinterpret_cast<volatile uint64_t *>(ll_base[p.peer] + off) = mark;
        else
            nvshmemx_signal_op(R.arrive(h.rank), mark, NVSHMEM_SIGNAL_SET, p.pe);
    }
}

// This block's share of send x to this PE itself into receive y, their sizes compared first
// (a difference recorded: false); nothing where it is in place (allgatherv from the own block)
// or rode along a peer's stores in step 4 (`fused`).
__device__ __forceinline__ bool own_copy(const nvshmemrs_coll_header &h, const Waiter &w,
                                         const Xfer &x, const Xfer &y, bool fused) {
    if (size_word(y) != size_word(x)) {
        if (blockIdx.x == 0 && threadIdx.x == 0)
            exchange_fail(w, h.pes[h.rank], NVSHMEMRS_EXCHANGE_SIZES, size_word(y),
                          size_word(x));
        return false;
    }
    size_t b, e;
    part_of<char>(x.bytes, gridDim.x, blockIdx.x, &b, &e);
    if (y.addr != x.addr && !fused) block_store(y.addr + b, x.addr + b, e - b);
    return true;
}

// Step 5 of exchange_step: the transfers to this PE itself, the nth send into the nth receive
// (this block's share; `fused`: step 4 copied it beside a peer's stores). False where they do
// not match (recorded).
template <typename Src>
__device__ bool own_transfers(const nvshmemrs_coll_header &h, const Waiter &w, const Src &src,
                              bool fused) {
    const int ns = src.n_send(), me_pe = h.pes[h.rank];
    for (int i = 0; i < ns; ++i) {
        const Xfer x = src.send(i);
        if (x.peer != h.rank) continue;
        const int r = nth_recv_from(src, h.rank, x.nth);
        const int posted = r < 0 ? 0 : src.recv(r).of;
        if (posted != x.of) {
            if (blockIdx.x == 0 && threadIdx.x == 0)
                exchange_fail(w, me_pe, NVSHMEMRS_EXCHANGE_COUNT, posted, x.of);
            return false;
        }
        // Where it rode along a peer's stores in 4, it is the only one.
        if (!own_copy(h, w, x, src.recv(r), fused)) return false;
    }
    if (nth_recv_from(src, h.rank, 0) >= 0) {
        // Receives from itself with no send.
        bool sends_self = false;
        for (int i = 0; i < ns && !sends_self; ++i) sends_self = src.send(i).peer == h.rank;
        if (!sends_self) {
            if (blockIdx.x == 0 && threadIdx.x == 0)
                exchange_fail(w, me_pe, NVSHMEMRS_EXCHANGE_COUNT,
                              src.recv(nth_recv_from(src, h.rank, 0)).of, 0);
            return false;
        }
    }
    return true;
}

// own_transfers from what plan_lines saw: where this PE has one transfer to itself and one from
// itself, each alone in its pair, this block's share is copied from there (their sizes
// checked) without walking the list again (that walk and its loads took about 1.5 us, 2 x
// H200); otherwise own_transfers.
template <typename Src>
__device__ bool own_part_planned(const nvshmemrs_coll_header &h, const Waiter &w, const Src &src,
                                 const OwnSeen &own) {
    if (own.n[0] == 0 && own.n[1] == 0) return true;
    if (own.n[0] != 1 || own.n[1] != 1 || own.x[0].of != 1 || own.x[1].of != 1)
        return own_transfers(h, w, src, false);
    return own_copy(h, w, own.x[0], own.x[1], false);
}

// The end of a launch: puts through NVSHMEM complete; the block that finishes last runs
// `pairs` (each pair's state moved on, each sender of lines given its credit: this launch's
// lines of that pair are read and zeroed, each block's zeroes ordered before its count; in the
// last block, after its barrier, each crediting thread's system fence before its credit), then
// advances the state. With every_pair, no credits and so no fences: the kernel's completion
// orders the zeroes.
template <typename Pairs>
__device__ void finish_launch(const nvshmemrs_coll_header &h, bool credits, Pairs pairs) {
    __syncthreads();
    __shared__ int last_s;
    if (threadIdx.x == 0) {
        if (!h.all_mapped) nvshmem_quiet();
        // A lone block counts nothing: the system fences below order its zeroes.
        if (credits && gridDim.x > 1) __threadfence();
        last_s = gridDim.x == 1 || atomicAdd(&h.state->done, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last_s) return;
    pairs();
    // As advance_state (prims/step.cuh), once every pair's state is stored.
    __syncthreads();
    if (threadIdx.x == 0) {
        h.state->steps += 1;
        h.state->done = 0;
    }
}

// Receive pair q from team rank `peer` done: its sequence stored, and with `credit` its
// sender's credit given.
__device__ __forceinline__ void end_recv_pair(const nvshmemrs_coll_header &h, const Region &R,
                                              int peer, uint64_t q, bool credit) {
    *R.received(peer) = q;
    if (credit) {
        __threadfence_system();
        nvshmemx_signal_op(R.credit(h.rank), q, NVSHMEM_SIGNAL_SET, h.pes[peer]);
    }
}

// Send pair q to `peer` done: its sequence stored, and with `lines` (and credits) the last
// sequence of its slot's parity that holds this PE's lines.
__device__ __forceinline__ void end_send_pair(const Region &R, int peer, uint64_t q, bool lines) {
    *R.sent(peer) = q;
    if (lines) *R.ll_last(q, peer) = q;
}

// Step 8 of exchange_step (finish_launch): a thread per pair of the launch's list, in
// parallel: one after another, each pair's loads and stores were a chain.
template <typename Src>
__device__ void finish_exchange(const nvshmemrs_coll_header &h, const Region &R, const Src &src,
                                bool lines, bool every_pair, int n_lrecv) {
    const int ns = src.n_send(), nr = src.n_recv();
    const bool credits = lines && n_lrecv > 0 && !every_pair;
    finish_launch(h, credits, [&] {
        for (int i = threadIdx.x; i < nr + ns; i += blockDim.x) {
            const bool recv = i < nr;
            const Xfer x = recv ? src.recv(i) : src.send(i - nr);
            if (x.peer == h.rank || x.nth != 0) continue;
            if (recv) {
                // As step 7 waited for.
                if (!x.ll) *R.expect(x.peer) += mailbox_pair_need(src, i);
                end_recv_pair(h, R, x.peer, *R.received(x.peer) + 1, credits && x.ll);
            } else {
                end_send_pair(R, x.peer, *R.sent(x.peer) + 1, lines && x.ll && !every_pair);
            }
        }
    });
}

// The lines-only step's end (finish_launch) from the plan, which holds every pair with another
// PE and its sequence: no walk of the list and no loads of the pairs' state (its 1.15 us were
// mostly those, 2 x H200).
__device__ void finish_planned(const nvshmemrs_coll_header &h, const Region &R,
                               const LinePair *plan, int n_lsend, int n_lrecv, bool every_pair) {
    const bool credits = n_lrecv > 0 && !every_pair;
    finish_launch(h, credits, [&] {
        for (int k = threadIdx.x; k < n_lsend + n_lrecv; k += blockDim.x) {
            if (k < n_lsend) {
                end_send_pair(R, plan[k].peer, plan[k].seq, !every_pair);
            } else {
                const LinePair &p = plan[NVSHMEMRS_EXCHANGE_MAX_OPS - 1 - (k - n_lsend)];
                end_recv_pair(h, R, p.peer, p.seq, credits);
            }
        }
    });
}

// The step of a launch where every pair with another PE goes as lines (`lines_only`, list
// launches: the host checked the arguments): the plan, whose wave of loads also reads the broken
// flag (the general step's block_broken and bounds barrier came before it, 0.6 us back to back
// and 1.25 after compute, 2 x H200), the credits where plan_lines saw one missing, this
// block's share of the sends, the marks, the own part, the receives, the end from the plan.
// The mailbox's steps (1, 3, 4, 7 of exchange_step), each a loop over the list and a barrier
// with nothing to do, are left out: peers see the same lines, marks and state as from a
// launch that runs them.
template <typename Src>
__device__ void lines_only_step(const nvshmemrs_coll_header &h, const Waiter &w, const Region &R,
                                const Src &src, char *const *ll_base, bool every_pair,
                                LinePair *plan) {
    __shared__ int n_lsend, n_lrecv, credit_check, broken;
    __shared__ OwnSeen own;
    plan_lines(h, src, R, ll_base, every_pair, plan, &n_lsend, &n_lrecv, &credit_check, &own,
               &broken);
    if (broken != 0) return;
    if (!wait_credits(w, R, plan, n_lsend, credit_check)) return;
    send_lines(src, plan, n_lsend);
    mark_line_receives(h, R, ll_base, plan, n_lrecv);
    if (!own_part_planned(h, w, src, own)) return;
    const LinePair *recvs = plan + NVSHMEMRS_EXCHANGE_MAX_OPS - n_lrecv;
    if (__syncthreads_or(!recv_lines(h, w, R, src, recvs, n_lrecv))) return;
    finish_planned(h, R, plan, n_lsend, n_lrecv, every_pair);
}

// One launch of the exchange; `code` (nvshmemrs_exchange_args.code) names a failure;
// `with_lines`: the launch has lines (abi.h nvshmemrs_exchange_args.lines); `every_pair`: no
// credits (nvshmemrs_exchange_args.every_pair); `lines_only`: every pair with another PE goes
// as lines (nvshmemrs_exchange_args.lines_only): lines_only_step instead.
template <typename Src>
__device__ void exchange_step(const nvshmemrs_coll_header &h, const Src &src, int code,
                              bool with_lines, bool every_pair = false, bool lines_only = false) {
    // The members' line regions before the wait, as the family's lines read them
    // (prims/ll.cuh): each was a dependent miss on the way to the first store.
    __shared__ char *ll_base_s[NVSHMEMRS_FAMILY_LL_MAX_PES];
    const bool bases = with_lines && h.n <= NVSHMEMRS_FAMILY_LL_MAX_PES;
    if (bases) ll_peer_bases(h, ll_base_s);
    wait_for_previous_kernel();
    const Waiter w(h, NVSHMEMRS_WAIT_OP_COLLECTIVE, code);
    const Region R{reinterpret_cast<uint64_t *>(h.scratch), h.world};
    __shared__ LinePair plan[NVSHMEMRS_EXCHANGE_MAX_OPS];
    if (with_lines && lines_only) {
        lines_only_step(h, w, R, src, bases ? ll_base_s : nullptr, every_pair, plan);
        return;
    }
    if (block_broken(h)) return;
    const int ns = src.n_send(), nr = src.n_recv();
    const int me_pe = h.pes[h.rank];
    // Device counts out of range: nothing moves, and every peer this PE exchanges with is told,
    // so that it fails too instead of waiting.
    __shared__ int bad_s;
    if (threadIdx.x == 0) {
        uint64_t limit = 0, reach = 0;
        bad_s = src.bad(&limit, &reach);
        if (bad_s && blockIdx.x == 0)
            exchange_fail(w, me_pe, NVSHMEMRS_EXCHANGE_BOUNDS, limit, reach);
    }
    __syncthreads();
    const bool bad = bad_s != 0;
    // Lines come with list launches only, whose arguments the host checked (bad is false).
    const bool lines = with_lines && !bad;
    __shared__ int n_lsend, n_lrecv, credit_check;

    // 1. Block 0, a thread per peer this PE receives from through the mailbox: where each
    // transfer goes (offsets in the region, the same on every PE), into its mailbox on the
    // peer (as lines where every member is mapped; else words, then arrive). First in the
    // launch: the senders wait for it. No fence before: the receive buffers were last touched
    // by earlier kernels on the stream, complete by now (prims/pdl.cuh). Pairs taken as lines
    // are marked after this PE's own lines (2).
    if (blockIdx.x == 0) {
        for (int i = threadIdx.x; i < nr; i += blockDim.x) {
            const Xfer x = src.recv(i);
            if (x.peer == h.rank || x.nth != 0 || x.ll) continue;
            const int pe = h.pes[x.peer];
            const uint64_t seq = *R.received(x.peer) + 1;
            uint64_t *box = R.mailbox(seq, h.rank);
            // Every member mapped: the words as lines with the sequence's flag, stored
            // directly (wait_arrive); else words, a fence, then arrive.
            uint4 *lines = h.all_mapped ? static_cast<uint4 *>(nvshmem_ptr(box, pe)) : nullptr;
            const uint32_t flag = ll_flag(seq);
            auto put = [&](int word, uint64_t v) {
                if (lines != nullptr)
                    st_line_word(lines + word, v, flag);
                else
                    nvshmem_uint64_p(box + word, v, pe);
            };
            for (int j = i, k = 0; j < nr && k < x.of; ++j) {
                const Xfer y = src.recv(j);
                if (y.peer != x.peer) continue;
                put(1 + 2 * y.nth, (uint64_t)((uintptr_t)y.addr - (uintptr_t)h.scratch));
                put(2 + 2 * y.nth, size_word(y));
                ++k;
            }
            put(0, (uint64_t)x.of | (bad ? XCH_BAD : 0));
            if (lines == nullptr) {
                nvshmem_fence();
                nvshmemx_signal_op(R.arrive(h.rank), seq, NVSHMEM_SIGNAL_SET, pe);
            }
        }
    }

    // 2. With lines: the pairs that go as lines, each receiver's credit for the slot, then this
    // block's share of every such send pair's lines (header and data: that pair is done).
    // Then block 0 marks the arrive word of each peer this PE receives lines from (the pair's
    // sequence with XCH_LINES_MARK), which only a sender that chose the mailbox reads (it
    // fails there): off the way to this PE's first store, and still before its wait for
    // the lines (6), so that such a sender's header fails it at once.
    if (lines) {
        plan_lines(h, src, R, bases ? ll_base_s : nullptr, every_pair, plan, &n_lsend,
                   &n_lrecv, &credit_check);
        if (!wait_credits(w, R, plan, n_lsend, credit_check)) return;
        send_lines(src, plan, n_lsend);
        mark_line_receives(h, R, bases ? ll_base_s : nullptr, plan, n_lrecv);
    }

    // 3. Until every peer this PE sends to through the mailbox is ready for this launch (its
    // mailbox written).
    bool ok = true;
    for (int i = threadIdx.x; i < ns && ok; i += blockDim.x) {
        const Xfer x = src.send(i);
        if (x.peer == h.rank || x.nth != 0 || x.ll) continue;
        const int pe = h.pes[x.peer];
        const uint64_t seq = *R.sent(x.peer) + 1;
        const ArriveSeen seen = wait_arrive(w, R, x.peer, seq, pe, h.all_mapped != 0, x.of);
        if (seen == ARRIVE_LINES && blockIdx.x == 0) {
            // The receiver took the pair as lines: it fails on this header (where the launch
            // has lines; without, at its deadline), this PE at once.
            if (lines) send_header(h, src, i, seq, pe);
            exchange_fail(w, pe, NVSHMEMRS_EXCHANGE_RECEIVER, 0, 0);
        }
        ok = seen == ARRIVE_MAILBOX;
    }
    if (__syncthreads_or(!ok)) return;

    // 4. Part blockIdx.x of every mailbox send, where the receiver said; block 0 also adds the
    // one per transfer that tells the receiver this PE has read its mailbox. Sends in order
    // from the one after this PE's rank (wrapping), as the family's puts go: in list order
    // every sender of an alltoallv wrote to member 0 first, then to member 1, so that one
    // receiver's links took every sender's data while the others' idled. Mapped peers take
    // direct stores, then their signals in parallel after one barrier (a fence each), as the
    // family's block_put_signal_to, so that no peer's stores wait for the previous peer's
    // barrier and fence (the same time at 2 PEs; more peers unmeasured).
    const int first_send = ns > 0 ? (h.rank + 1) % ns : 0;
    uint64_t *flag = R.data(h.rank);
    // The signals of the mapped peers' stores, raised after the loop (their PEs and what each
    // adds), kept here: read again from the mailboxes after the barrier, they put dependent
    // loads before the first signal.
    __shared__ int sig_pe[NVSHMEMRS_EXCHANGE_MAX_OPS];
    __shared__ uint64_t sig_add[NVSHMEMRS_EXCHANGE_MAX_OPS];
    int n_sig = 0;
    bool fused = false;
    for (int k = 0; k < ns; ++k) {
        const int i = (first_send + k) % ns;
        const Xfer x = src.send(i);
        if (x.peer == h.rank || x.ll) continue;
        size_t b, e;
        part_of<char>(x.bytes, gridDim.x, blockIdx.x, &b, &e);
        const uint64_t add = (e - b) + (blockIdx.x == 0 ? 1 : 0);
        if (add == 0) continue;
        const int pe = h.pes[x.peer];
        const volatile uint64_t *box = R.mailbox(*R.sent(x.peer) + 1, x.peer);
        const bool box_lines = h.all_mapped != 0;
        // Every thread reads the same words: the branches below are uniform.
        const uint64_t head = box_word(box, 0, box_lines);
        uint64_t why = 0, want = 0, seen = 0;
        if (head & XCH_BAD) {
            why = NVSHMEMRS_EXCHANGE_PEER_ARGS;
        } else if (head != (uint64_t)x.of) {
            why = NVSHMEMRS_EXCHANGE_COUNT, want = head, seen = (uint64_t)x.of;
        } else if (box_word(box, 2 + 2 * x.nth, box_lines) != size_word(x)) {
            why = NVSHMEMRS_EXCHANGE_SIZES, want = box_word(box, 2 + 2 * x.nth, box_lines),
            seen = size_word(x);
        }
        if (bad || why != 0) {
            if (blockIdx.x == 0 && threadIdx.x == 0) {
                if (why != 0) exchange_fail(w, pe, why, want, seen);
                nvshmemx_signal_op(flag, XCH_MISMATCH, NVSHMEM_SIGNAL_ADD, pe);
            }
            continue;
        }
        char *dst = h.scratch + box_word(box, 1 + 2 * x.nth, box_lines) + b;
        char *peer = direct_ptr(h, dst, pe);
        if (peer == NULL) {
            block_send_part(h, dst, x.addr + b, e - b, flag, add, pe, false, NVSHMEM_SIGNAL_ADD);
            continue;
        }
        // This block's share of the own transfer, from FUSED_COPY_MIN, rides along the first
        // mapped peer's stores of as much (the link bounds them) instead of following them
        // (step 5). Looked for only there: before the wait it cost calls of 64-256 KiB about
        // 1 us (2 x H200).
        OwnPart own{};
        size_t ob = 0, oe = 0;
        if (!fused && e - b >= FUSED_COPY_MIN && own_part(h, src, &own))
            part_of<char>(own.bytes, gridDim.x, blockIdx.x, &ob, &oe);
        if (oe - ob >= FUSED_COPY_MIN) {
            block_store_pair(peer, x.addr + b, e - b, own.to + ob, own.from + ob, oe - ob);
            fused = true;
        } else {
            block_store(peer, x.addr + b, e - b);
        }
        if (threadIdx.x == 0) sig_pe[n_sig] = pe, sig_add[n_sig] = add;
        ++n_sig;
    }
    if (n_sig > 0) {
        __syncthreads();
        for (int j = threadIdx.x; j < n_sig; j += blockDim.x)
            release_signal(flag, sig_add[j], sig_pe[j], NVSHMEM_SIGNAL_ADD);
    }
    __syncthreads();

    // 5. Transfers to this PE itself.
    if (!bad && !own_transfers(h, w, src, fused)) return;

    // 6. With lines: this block's share of every receive pair's lines (headers checked, data
    // copied out).
    if (lines) {
        const LinePair *recvs = plan + NVSHMEMRS_EXCHANGE_MAX_OPS - n_lrecv;
        if (__syncthreads_or(!recv_lines(h, w, R, src, recvs, n_lrecv))) return;
    }

    // 7. Until every peer this PE receives from through the mailbox has delivered: its bytes,
    // and one per transfer.
    ok = true;
    for (int i = threadIdx.x; i < nr && ok; i += blockDim.x) {
        const Xfer x = src.recv(i);
        if (x.peer == h.rank || x.nth != 0 || x.ll) continue;
        uint64_t need = mailbox_pair_need(src, i);
        // With its own arguments bad, this PE only waits for the peer's answer to its mark.
        if (bad) need = 1;
        const int pe = h.pes[x.peer];
        const uint64_t want = *R.expect(x.peer) + need;
        ok = lines ? wait_delivered(h, w, R, src, i, want, pe) : w.ge(R.data(x.peer), want, pe);
        if (ok && *(volatile uint64_t *)R.data(x.peer) >= XCH_MISMATCH) {
            exchange_fail(w, pe, NVSHMEMRS_EXCHANGE_PEER, 0, 0);
            ok = false;
        }
    }
    if (__syncthreads_or(!ok) || bad) return;

    // 8. The end: the pairs' state, credits (finish_exchange).
    finish_exchange(h, R, src, lines, every_pair, n_lrecv);
}

// The entry points' common checks: members, rank, grid and region.
static inline bool exchange_args_ok(const nvshmemrs_exchange_args *a, int blocks) {
    if (a == NULL) return false;
    const nvshmemrs_coll_header &h = a->hdr;
    return h.n >= 1 && h.n <= h.world && h.rank >= 0 && h.rank < h.n && h.scratch != NULL &&
           blocks >= 1 && blocks <= NVSHMEMRS_FAMILY_BLOCKS;
}

// A list launch's lines (abi.h NVSHMEMRS_EXCHANGE_LINES), where it has them: a line region
// whose slots hold every line pair's lines, every member mapped, the transfers of each
// direction and peer consecutive in nth order with one mode, none to this PE itself as lines.
// Without lines, no transfer may ask for them. ops[0 .. n) are checked otherwise already.
static inline bool exchange_lines_ok(const nvshmemrs_exchange_args *a, int n) {
    const nvshmemrs_coll_header &h = a->hdr;
    if (!a->lines) {
        for (int i = 0; i < n; ++i)
            if (a->ops[i].lines != 0) return false;
        return true;
    }
    const uint64_t slot_lines = h.ll_slot_bytes / 16;
    if (h.ll_scratch == NULL || !h.all_mapped || h.no_direct || slot_lines > UINT32_MAX)
        return false;
    for (int i = 0; i < n; ++i) {
        const nvshmemrs_transfer &t = a->ops[i];
        if (t.lines > NVSHMEMRS_EXCHANGE_PAIR_LINES || (t.peer == h.rank && t.lines != 0))
            return false;
        if (t.peer == h.rank) continue;
        if (t.nth != 0) {
            // Its predecessor: the same direction and peer, one before it.
            const bool same_dir = i > 0 && (i < a->n_send) == (i - 1 < a->n_send);
            if (!same_dir) return false;
            const nvshmemrs_transfer &p = a->ops[i - 1];
            if (p.peer != t.peer || p.nth + 1 != t.nth || p.of != t.of || p.lines != t.lines)
                return false;
            continue;
        }
        uint64_t lines = NVSHMEMRS_EXCHANGE_HEADER_LINES + (uint64_t)t.of;
        for (int j = i; t.lines != 0 && j < i + t.of && j < n; ++j)
            lines += (a->ops[j].bytes + 7) / 8;
        if (lines > slot_lines) return false;
    }
    return true;
}

// every_pair (abi.h) only with lines, and only where the list has a transfer to and from
// every other member: the order the slots' reuse relies on needs a message each way.
static inline bool exchange_every_pair_ok(const nvshmemrs_exchange_args *a) {
    if (!a->every_pair) return true;
    if (!a->lines) return false;
    const int n = a->hdr.n;
    for (int r = 0; r < n; ++r) {
        if (r == a->hdr.rank) continue;
        bool to = false, from = false;
        for (int i = 0; i < a->n_send + a->n_recv; ++i) {
            if (a->ops[i].peer != r || a->ops[i].nth != 0) continue;
            if (i < a->n_send) to = true;
            else from = true;
        }
        if (!to || !from) return false;
    }
    return true;
}

// lines_only (abi.h) only with lines, and only where every transfer with another PE goes as
// lines.
static inline bool exchange_lines_only_ok(const nvshmemrs_exchange_args *a) {
    if (!a->lines_only) return true;
    if (!a->lines) return false;
    for (int i = 0; i < a->n_send + a->n_recv; ++i)
        if (a->ops[i].peer != a->hdr.rank && a->ops[i].lines == 0) return false;
    return true;
}

}  // namespace

#endif
