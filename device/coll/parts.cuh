// Exchanges whose parts every member's host knows (abi.h nvshmemrs_parts_args: allgatherv and
// alltoallv with counts on the host): each part goes to its receiver as low-latency lines,
// line 0 its size word, so that a receiver that expects another size fails at once (its
// failure breaks the workspace, which ends every other wait of the launch) and tells the
// sender, which fails at its next call.
#ifndef NVSHMEM_RS_COLL_PARTS_CUH
#define NVSHMEM_RS_COLL_PARTS_CUH

#include "coll/exchange.cuh"
#include "prims/exchange.cuh"

namespace {

// Lines polled together by a receiver (one per member); larger teams go group after group.
constexpr int PARTS_LL_GROUP = 8;

// A parts launch's start: each member's line region before the wait (prims/ll.cuh
// ll_peer_bases), then the step. False, for every thread, where the workspace was broken
// before the launch: the kernel must return.
__device__ __forceinline__ bool parts_begin(const nvshmemrs_coll_header &h, char **base,
                                            Step *s) {
    ll_peer_bases(h, base);
    wait_for_previous_kernel();
    *s = begin_step(h.state);
    return !block_broken(h);
}

// Lines a part of `bytes` takes where its data goes as lines: its size line, then the data.
__host__ __device__ __forceinline__ uint64_t part_lines(uint64_t bytes) {
    return 1 + (bytes + 7) / 8;
}

// A part's size word (abi.h): with `put`, its data goes by the receiver's handshake.
__device__ __forceinline__ uint64_t part_word(uint64_t bytes, int dtype, bool put) {
    return bytes | (uint64_t)dtype << NVSHMEMRS_EXCHANGE_DTYPE_SHIFT | (put ? NVSHMEMRS_PART_PUT : 0);
}

// Line i of a part: its size word at 0, then bytes [8(i - 1), 8i) of `src` (`bytes` long).
__device__ __forceinline__ uint2 part_line(uint64_t word, const char *src, uint64_t bytes,
                                           size_t i) {
    if (i == 0) return make_uint2((uint32_t)word, (uint32_t)(word >> 32));
    return load8_any(src + 8 * (i - 1), bytes - 8 * (i - 1));
}

// Member r's line 0 (`seen`) is not `want`, seen on this PE (one thread): the failure recorded
// (the sender's mark, its sizes or how its data goes), and line 0 of this PE's slot on the
// sender at the next parity marked (flag `next`), where the sender, which may have finished
// this step, fails at its next call. Its earlier reads of that slot were done before it sent
// this step's lines.
__device__ void part_mismatch(const nvshmemrs_coll_header &h, const Waiter &w, int r,
                              uint64_t want, uint64_t seen, int next_parity, uint32_t next) {
    const int pe = h.pes[r];
    if (seen == NVSHMEMRS_PART_MARK)
        exchange_fail(w, pe, NVSHMEMRS_EXCHANGE_RECEIVER, 0, 0);
    else if ((seen ^ want) & ~NVSHMEMRS_PART_PUT)
        exchange_fail(w, pe, NVSHMEMRS_EXCHANGE_SENT_SIZES, want & ~NVSHMEMRS_PART_PUT,
                      seen & ~NVSHMEMRS_PART_PUT);
    else
        // The same size, sent the other way: the two ends' line bounds differ.
        exchange_fail(w, pe, NVSHMEMRS_EXCHANGE_SENT_MODE, !(want & NVSHMEMRS_PART_PUT),
                      !(seen & NVSHMEMRS_PART_PUT));
    char *base = member_ptr(h, h.ll_scratch, r);
    const size_t off = reinterpret_cast<char *>(ll_slot(h, next_parity, h.rank)) - h.ll_scratch;
    if (base != nullptr)
        st_line_word(reinterpret_cast<uint4 *>(base + off), NVSHMEMRS_PART_MARK, next);
}

// This block's share of every other member's lines of step `s` (lines [0, most) split over the
// grid): for member r, lines(r) of them (0: none), line 0 compared with want(r) (a difference:
// part_mismatch, then differed(r)), data line i >= 1 handed to got(r, i, v). False, for every
// thread, when a wait timed out, the workspace broke or a size word differed (recorded).
template <typename Lines, typename Want, typename Got, typename Differed>
__device__ bool recv_parts(const nvshmemrs_coll_header &h, const Waiter &w, const Step &s,
                           uint32_t flag, uint64_t most, Lines lines, Want want, Got got,
                           Differed differed) {
    size_t m0, m1;
    ll_block_lines(most, &m0, &m1);
    bool ok = true;
    for (size_t i = m0 + threadIdx.x; ok && i < m1; i += blockDim.x) {
        auto has = [&](int r) { return i < lines(r); };
        for (int r0 = 0; ok && r0 < h.n; r0 += PARTS_LL_GROUP) {
            uint2 v[PARTS_LL_GROUP];
            if (!ld_lines_from<PARTS_LL_GROUP>(h, s.parity, i, r0, has, flag, v, w)) {
                ok = false;
                break;
            }
#pragma unroll
            for (int j = 0; j < PARTS_LL_GROUP; ++j) {
                const int r = r0 + j;
                if (r >= h.n || r == h.rank || !has(r)) continue;
                if (i > 0) {
                    got(r, i, v[j]);
                    continue;
                }
                const uint64_t seen = (uint64_t)v[j].x | (uint64_t)v[j].y << 32;
                if (seen != want(r)) {
                    part_mismatch(h, w, r, want(r), seen, s.parity ^ 1, ll_flag(s.value));
                    differed(r);
                    ok = false;
                }
            }
        }
    }
    return !__syncthreads_or(!ok);
}

}  // namespace

#endif
