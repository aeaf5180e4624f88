// Alltoallv (coll/exchange.h): send_counts[r] elements from send_displs[r] of the input go to
// member r, which receives recv_counts[s] elements from each member s at recv_displs[s] of its
// output. With counts in device memory, an exchange; with counts on the host, each part as
// low-latency lines, or past the lines its size line and the receiver's handshake (abi.h
// nvshmemrs_alltoallv_parts_args): no mailbox or pair state.
#include <cuda_runtime.h>

#include "coll/exchange.cuh"
#include "coll/exchange.h"
#include "coll/family_args.cuh"
#include "coll/parts.cuh"

namespace {

struct AlltoallvSrc {
    static constexpr bool UNIQUE = true;
    const nvshmemrs_exchange_args &a;
    // counts[0..4]: send counts, send displacements, receive counts, receive displacements.
    __device__ Xfer part(char *base, int which, int r) const {
        return Xfer{base + a.counts[which + 1][r] * a.elem_bytes,
                    a.counts[which][r] * a.elem_bytes, r, a.dtype, 0, 1, false};
    }
    __device__ int n_send() const { return a.hdr.n; }
    __device__ Xfer send(int r) const {
        return part(static_cast<char *>(const_cast<void *>(a.hdr.input)), 0, r);
    }
    __device__ int n_recv() const { return a.hdr.n; }
    __device__ Xfer recv(int r) const { return part(static_cast<char *>(a.hdr.output), 2, r); }
    // A part past the input or the output (in elements).
    __device__ bool bad(uint64_t *limit, uint64_t *reach) const {
        for (int which = 0; which < 4; which += 2) {
            const uint64_t len = which == 0 ? a.in_count : a.hdr.count;
            for (int r = 0; r < a.hdr.n; ++r) {
                const uint64_t c = a.counts[which][r], d = a.counts[which + 1][r];
                if (c > len || d > len - c) {
                    *limit = len, *reach = c + d;
                    return true;
                }
            }
        }
        return false;
    }
};

__global__ void alltoallv_kernel(nvshmemrs_exchange_args a) {
    exchange_step(a.hdr, AlltoallvSrc{a}, a.code, false);
}

// One launch with counts on the host (abi.h nvshmemrs_alltoallv_parts_args). Each step is a
// no-op where no part needs it: with every part within the lines, the sizes and the data go
// out, the own part is copied and the lines come in.
__global__ void __launch_bounds__(NVSHMEMRS_FAMILY_THREADS)
    alltoallv_parts_kernel(nvshmemrs_alltoallv_parts_args a) {
    const nvshmemrs_parts_args &p = a.recv;
    const nvshmemrs_coll_header &h = p.fam.hdr;
    __shared__ char *base[NVSHMEMRS_PARTS_MAX_PES];
    Step s;
    if (!parts_begin(h, base, &s)) return;
    const Waiter w(h, NVSHMEMRS_WAIT_OP_COLLECTIVE, p.fam.code);
    const uint32_t flag = ll_flag(s.value - 1);
    const Layout L{h, 0, s.parity};
    const char *in = static_cast<const char *>(h.input);
    char *out = static_cast<char *>(h.output);
    const int me = h.rank;
    auto put = [&](uint64_t bytes) { return bytes > a.line_max; };
    auto send_word = [&](int r) {
        return part_word(a.send_bytes[r], p.dtype, put(a.send_bytes[r]));
    };
    auto recv_word = [&](int r) { return part_word(p.bytes[r], p.dtype, put(p.bytes[r])); };
    // A part past the lines takes its size line only.
    auto send_lines = [&](int r) {
        return put(a.send_bytes[r]) ? 1 : part_lines(a.send_bytes[r]);
    };
    auto recv_lines = [&](int r) { return put(p.bytes[r]) ? 1 : part_lines(p.bytes[r]); };
    // The handshake's words are block 0's on every member.
    auto counter = [&](int phase, int r) { return L.counter_at(phase, r, 0); };
    // This PE's handshake with sender `pe`: its part's address (sym_word) and the size word it
    // expects, then ARRIVE (block_arrive_with_word, with a second word).
    auto arrive = [&](int pe, uint64_t addr, uint64_t word) {
        nvshmem_uint64_p(counter(NVSHMEMRS_FAMILY_ADDR, me), addr, pe);
        nvshmem_uint64_p(counter(NVSHMEMRS_FAMILY_ROUND, me), word, pe);
        nvshmem_fence();
        nvshmemx_signal_op(counter(NVSHMEMRS_FAMILY_ARRIVE, me), s.value, NVSHMEM_SIGNAL_SET,
                           pe);
    };

    // 1. Block 0 tells each sender of a part past the lines where it goes and its size.
    if (blockIdx.x == 0)
        for (int r = threadIdx.x; r < h.n; r += blockDim.x)
            if (r != me && put(p.bytes[r]))
                arrive(h.pes[r], sym_word(h, out + p.displ[r]), recv_word(r));

    // 2. This block's share of every part's lines, peers in order from the next one.
    __shared__ uint4 *dst[NVSHMEMRS_PARTS_MAX_PES];
    ll_peer_slots(h, base, s.parity, dst);
    uint64_t most_out = 0, most_in = 0;
    bool puts = false;
    for (int r = 0; r < h.n; ++r) {
        if (r == me) continue;
        most_out = send_lines(r) > most_out ? send_lines(r) : most_out;
        most_in = recv_lines(r) > most_in ? recv_lines(r) : most_in;
        puts |= put(a.send_bytes[r]);
    }
    size_t l0, l1;
    ll_block_lines(most_out, &l0, &l1);
    for (size_t i = l0 + threadIdx.x; i < l1; i += blockDim.x)
        for (int k = 1, r = me + 1; k < h.n; ++k, ++r) {
            if (r == h.n) r = 0;
            if (i >= send_lines(r)) continue;
            const uint2 v = part_line(send_word(r), in + a.send_displ[r], a.send_bytes[r], i);
            st_line(dst[r] + i, v.x, v.y, flag);
        }

    // This block's share of the own part, its two sizes compared first (a difference is
    // recorded, the sends below still go, so that no peer waits for them to the deadline).
    const bool own_ok = a.send_bytes[me] == p.bytes[me];
    if (!own_ok && blockIdx.x == 0 && threadIdx.x == 0)
        exchange_fail(w, h.pes[me], NVSHMEMRS_EXCHANGE_SIZES,
                      part_word(p.bytes[me], p.dtype, false),
                      part_word(a.send_bytes[me], p.dtype, false));
    size_t ob, oe;
    part_of<char>(own_ok ? p.bytes[me] : 0, gridDim.x, blockIdx.x, &ob, &oe);
    char *own_to = out + p.displ[me] + ob;
    const char *own_from = in + a.send_displ[me] + ob;
    bool own_done = oe == ob;

    // 3. Parts past the lines: once each receiver has said where and how much (a size other
    // than this PE's fails here, before a byte moves; the receiver fails on the size line),
    // this block's share, then the receiver's DATA [rank] raised by its bytes. From
    // FUSED_COPY_MIN the own share rides along the first such receiver's stores (the link
    // bounds them): after them, it added its whole time at 16-256 MiB.
    if (puts) {
        auto arrived = [&](int r) { return counter(NVSHMEMRS_FAMILY_ARRIVE, r); };
        auto sends = [&](int r) { return put(a.send_bytes[r]); };
        if (!block_wait_from(w, h, arrived, sends, s.value)) return;
        // A receiver whose size word is not this PE's own (or its mark) gets nothing; the
        // others get their parts, so that none waits for them to the deadline.
        auto word = [&](int r) { return *(volatile uint64_t *)counter(NVSHMEMRS_FAMILY_ROUND, r); };
        auto gets = [&](int r) { return r != me && sends(r) && word(r) == send_word(r); };
        bool differ = false;
        for (int r = 0; r < h.n; ++r) {
            if (r == me || !sends(r) || gets(r)) continue;
            differ = true;
            if (blockIdx.x == 0 && threadIdx.x == 0) {
                if (word(r) == NVSHMEMRS_PART_MARK)
                    exchange_fail(w, h.pes[r], NVSHMEMRS_EXCHANGE_RECEIVER, 0, 0);
                else
                    exchange_fail(w, h.pes[r], NVSHMEMRS_EXCHANGE_SIZES,
                                  word(r) & ~NVSHMEMRS_PART_PUT,
                                  send_word(r) & ~NVSHMEMRS_PART_PUT);
            }
        }
        uint64_t *data = counter(NVSHMEMRS_FAMILY_DATA, me);
        // Block 0's word, whichever block reads it.
        auto where = [&](int r) {
            return sym_addr(h, *(volatile uint64_t *)counter(NVSHMEMRS_FAMILY_ADDR, r));
        };
        bool mapped = false;
        for (int k = 1, r = me + 1; k < h.n; ++k, ++r) {
            if (r == h.n) r = 0;
            if (!gets(r)) continue;
            size_t b, e;
            part_of<char>(a.send_bytes[r], gridDim.x, blockIdx.x, &b, &e);
            if (e == b) continue;
            const char *from = in + a.send_displ[r] + b;
            char *peer = direct_ptr(h, where(r) + b, h.pes[r]);
            if (!own_done && peer != NULL && e - b >= FUSED_COPY_MIN &&
                oe - ob >= FUSED_COPY_MIN) {
                block_store_pair(peer, from, e - b, own_to, own_from, oe - ob);
                own_done = mapped = true;
                continue;
            }
            mapped |= block_send_part(h, where(r) + b, from, e - b, data, e - b, h.pes[r],
                                      false, NVSHMEM_SIGNAL_ADD);
        }
        // Every thread read the same words: the branches are uniform.
        if (mapped) {
            __syncthreads();
            for (int r = threadIdx.x; r < h.n; r += blockDim.x) {
                if (!gets(r)) continue;
                size_t b, e;
                part_of<char>(a.send_bytes[r], gridDim.x, blockIdx.x, &b, &e);
                if (e > b && direct_ptr(h, where(r), h.pes[r]) != NULL)
                    release_signal(data, e - b, h.pes[r], NVSHMEM_SIGNAL_ADD);
            }
        }
        __syncthreads();
        if (differ) return;
    }

    // 4. The own share, where it did not ride along.
    if (!own_done) block_store(own_to, own_from, oe - ob);
    if (!own_ok) return;

    // 5. This block's share of every other member's lines. A sender whose size line differs
    // may wait for this PE's handshake where this PE took its part as lines: it is told.
    const bool ok = recv_parts(
        h, w, s, flag, most_in, recv_lines, recv_word,
        [&](int r, size_t i, uint2 v) {
            store8_any(out + p.displ[r] + 8 * (i - 1), p.bytes[r] - 8 * (i - 1), v);
        },
        [&](int r) {
            if (!put(p.bytes[r])) arrive(h.pes[r], 0, NVSHMEMRS_PART_MARK);
        });
    if (!ok) return;

    // 6. Block 0: each part past the lines in (its DATA at its bytes), the counter zeroed for
    // the step after next at this parity, which adds only after this PE's next ARRIVE there.
    bool in_ok = true;
    if (blockIdx.x == 0)
        for (int r = threadIdx.x; r < h.n && in_ok; r += blockDim.x) {
            if (r == me || !put(p.bytes[r])) continue;
            uint64_t *c = counter(NVSHMEMRS_FAMILY_DATA, r);
            in_ok = w.ge(c, p.bytes[r], h.pes[r]);
            if (in_ok) *(volatile uint64_t *)c = 0;
        }
    if (__syncthreads_or(!in_ok)) return;
    end_step(h);
}

}  // namespace

// Every part within its buffer and below NVSHMEMRS_PART_PUT, the lines' part within a slot,
// at most NVSHMEMRS_PARTS_MAX_PES members, every one mapped.
extern "C" int nvshmemrs_alltoallv_parts(nvshmemrs_alltoallv_parts_args args, int blocks,
                                         int threads, cudaStream_t stream) {
    const nvshmemrs_parts_args &p = args.recv;
    const nvshmemrs_coll_header &h = p.fam.hdr;
    if (!family_args_ok(p.fam, blocks) || threads > NVSHMEMRS_FAMILY_THREADS ||
        h.n > NVSHMEMRS_PARTS_MAX_PES || h.ll_scratch == NULL || !h.all_mapped || h.no_direct ||
        args.line_max >= NVSHMEMRS_PART_PUT || part_lines(args.line_max) * 16 > h.ll_slot_bytes)
        return cudaErrorInvalidValue;
    const uint64_t out = h.count * (uint64_t)p.fam.elem_bytes;
    for (int r = 0; r < h.n; ++r)
        if (p.displ[r] > out || p.bytes[r] > out - p.displ[r] ||
            args.send_displ[r] > args.in_bytes ||
            args.send_bytes[r] > args.in_bytes - args.send_displ[r])
            return cudaErrorInvalidValue;
    return (int)launch_pdl(alltoallv_parts_kernel, blocks, threads, stream, args);
}

extern "C" int nvshmemrs_alltoallv(const nvshmemrs_exchange_args *args, int blocks, int threads,
                                   cudaStream_t stream) {
    if (!exchange_args_ok(args, blocks) || args->mode != NVSHMEMRS_EXCHANGE_ALLTOALLV ||
        args->lines != 0 || args->elem_bytes <= 0)
        return cudaErrorInvalidValue;
    for (int i = 0; i < 4; ++i)
        if (args->counts[i] == NULL) return cudaErrorInvalidValue;
    return (int)launch_pdl(alltoallv_kernel, blocks, threads, stream, *args);
}
