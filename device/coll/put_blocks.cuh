// The steps allgather and alltoall share (coll/family.h), and allgatherv with counts on the
// host: every member puts a block into block [its rank] (allgatherv: its part) of every other
// member's output once that member has arrived, and waits for the blocks put into its own;
// or, small and with every member mapped, writes it as low-latency lines into the receivers'
// line slots, from which each receiver copies into its output (NVSHMEMRS_FAMILY_LL). They
// differ only in what each receiver gets: allgather sends every member the same input,
// alltoall input block [r] to member r (PER_PEER).
#ifndef NVSHMEM_RS_PUT_BLOCKS_CUH
#define NVSHMEM_RS_PUT_BLOCKS_CUH

#include "core/nvshmem_device.cuh"

#include "abi.h"
#include "prims/chunks.cuh"
#include "prims/exchange.cuh"
#include "prims/ll.cuh"
#include "prims/pdl.cuh"
#include "prims/put_signal.cuh"
#include "prims/step.cuh"
#include "prims/waiter.cuh"

namespace {

// One launch of the step (a timeout names a.code). `part` says what moves:
// part.bytes() from part.src(r) to member r (r this PE too, for its own copy), landing at
// byte part.offset() of every member's output; the grid splits part.bytes() (every member
// launches the same grid: block b waits for block b of every sender).
template <typename Part>
__device__ void put_parts_step(const nvshmemrs_family_args &a, const Part &part) {
    const nvshmemrs_coll_header &h = a.hdr;
    wait_for_previous_kernel();
    if (block_broken(h)) return;
    const Waiter w(h, NVSHMEMRS_WAIT_OP_COLLECTIVE, a.code);
    const Step s = begin_step(h.state);
    const Layout L{h, 0, s.parity};
    size_t b, e;
    part_of<char>(part.bytes(), gridDim.x, blockIdx.x, &b, &e);
    auto src = [&](int r) { return part.src(r) + b; };
    char *mine = static_cast<char *>(h.output) + part.offset();
    block_arrive(h, L, AllOthers{}, s.value);
    // The own part; in place (from the own block of the output), it is there already. Large,
    // with the first peer mapped, it goes with that peer's stores.
    const int first = (h.rank + 1) % h.n;
    char *fused = own_copy_or_fused(h, mine + b, src(h.rank), e - b, first);
    auto arrive = [&](int r) { return L.counter(NVSHMEMRS_FAMILY_ARRIVE, r); };
    if (!block_wait_others(w, h, arrive, s.value)) return;
    if (fused != NULL) block_store_pair(fused, src(first), mine + b, src(h.rank), e - b);
    // The first peer's data is there already where it was fused: its signal alone follows.
    block_put_signal_all(
        h,
        [&](int r, char **dst, const char **from, size_t *bytes) {
            *dst = mine + b;
            *from = src(r);
            *bytes = fused != NULL && r == first ? 0 : e - b;
        },
        L.counter(NVSHMEMRS_FAMILY_DATA, h.rank), s.value);
    auto data = [&](int r) { return L.counter(NVSHMEMRS_FAMILY_DATA, r); };
    if (!block_wait_others(w, h, data, s.value)) return;
    end_step(h);
}

// Allgather's and alltoall's parts: rank blocks of hdr.count elements, a.stride apart; each
// member's lands in block [its rank]. Allgather sends every member the same input, alltoall
// input block [r] to member r (PER_PEER).
template <bool PER_PEER>
struct RankBlocks {
    const nvshmemrs_family_args &a;
    __device__ size_t bytes() const { return a.hdr.count * (size_t)a.elem_bytes; }
    __device__ size_t offset() const {
        return (size_t)a.hdr.rank * a.stride * (size_t)a.elem_bytes;
    }
    __device__ const char *src(int r) const {
        const char *in = static_cast<const char *>(a.hdr.input);
        return in + (PER_PEER ? (size_t)r * a.stride * (size_t)a.elem_bytes : 0);
    }
};

template <bool PER_PEER>
__device__ void put_blocks_step(const nvshmemrs_family_args &a) {
    put_parts_step(a, RankBlocks<PER_PEER>{a});
}

// Lines polled together by a receiver (ld_pending); larger teams go group after group.
constexpr int FAMILY_LL_GROUP = 8;

// One launch of the step under the low-latency protocol: no ARRIVE. A sender's next store
// into a receiver's slot of this parity comes two steps later, after the sender has received
// the receiver's data of the step between, which the receiver sends only once this launch has
// completed on it (every member receives from every other here).
template <bool PER_PEER>
__device__ void ll_blocks_step(const nvshmemrs_family_args &a) {
    const nvshmemrs_coll_header &h = a.hdr;
    __shared__ char *base[NVSHMEMRS_FAMILY_LL_MAX_PES];
    ll_peer_bases(h, base);
    wait_for_previous_kernel();
    // Read before block_broken's barrier, so that its round trip and the state's overlap.
    const Step s = begin_step(h.state);
    if (block_broken(h)) return;
    const Waiter w(h, NVSHMEMRS_WAIT_OP_COLLECTIVE, a.code);
    const uint32_t flag = ll_flag(s.value - 1);
    const size_t bytes = h.count * (size_t)a.elem_bytes, lines = (bytes + 7) / 8;
    const size_t block_bytes = a.stride * (size_t)a.elem_bytes;
    const char *in = static_cast<const char *>(h.input);
    char *out = static_cast<char *>(h.output);
    auto src = [&](int r) { return in + (PER_PEER ? (size_t)r * block_bytes : 0); };
    __shared__ uint4 *dst[NVSHMEMRS_FAMILY_LL_MAX_PES];
    ll_peer_slots(h, base, s.parity, dst);
    size_t l0, l1;
    ll_block_lines(lines, &l0, &l1);
    auto everyone = [](int) { return true; };
    ll_put_lines(h, dst, src, everyone, bytes, l0, l1, flag);
    // The own block, this block's lines of it; in place (allgather from the own block), it is
    // there already.
    char *mine = out + (size_t)h.rank * block_bytes;
    const char *own = src(h.rank);
    if (own != mine) {
        const size_t b = l0 * 8 < bytes ? l0 * 8 : bytes, e = l1 * 8 < bytes ? l1 * 8 : bytes;
        block_store(mine + b, own + b, e - b);
    }
    const bool ok = ll_get_lines<FAMILY_LL_GROUP>(
        h, s.parity, l0, l1, flag, w, everyone,
        [&](int r, size_t i, uint2 v) { store8(out + (size_t)r * block_bytes, i, bytes, v); });
    if (__syncthreads_or(!ok)) return;
    end_step(h);
}

}  // namespace

#endif
