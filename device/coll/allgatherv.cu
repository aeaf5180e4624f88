// Allgatherv (coll/exchange.h): member r sends its input, counts[r] elements, to displacement
// displs[r] of every member's output, itself included (in place when its input is that block).
// With counts in device memory, an exchange; with counts on the host, low-latency lines without
// pair state where every part fits a line slot, else allgather's blocks with a part of its own
// size per member (abi.h nvshmemrs_parts_args).
#include <cuda_runtime.h>

#include "coll/exchange.cuh"
#include "coll/exchange.h"
#include "coll/family_args.cuh"
#include "coll/parts.cuh"
#include "coll/put_blocks.cuh"

namespace {

struct AllgathervSrc {
    static constexpr bool UNIQUE = true;
    const nvshmemrs_exchange_args &a;
    __device__ uint64_t count(int r) const { return a.counts[0][r]; }
    __device__ uint64_t displ(int r) const { return a.counts[1][r]; }
    __device__ int n_send() const { return a.hdr.n; }
    __device__ Xfer send(int r) const {
        return Xfer{static_cast<char *>(const_cast<void *>(a.hdr.input)),
                    count(a.hdr.rank) * a.elem_bytes, r, a.dtype, 0, 1, false};
    }
    __device__ int n_recv() const { return a.hdr.n; }
    __device__ Xfer recv(int r) const {
        return Xfer{static_cast<char *>(a.hdr.output) + displ(r) * a.elem_bytes,
                    count(r) * a.elem_bytes, r, a.dtype, 0, 1, false};
    }
    // The own count past the input, or a block past the output (in elements).
    __device__ bool bad(uint64_t *limit, uint64_t *reach) const {
        if (count(a.hdr.rank) > a.in_count) {
            *limit = a.in_count, *reach = count(a.hdr.rank);
            return true;
        }
        for (int r = 0; r < a.hdr.n; ++r) {
            if (count(r) > a.hdr.count || displ(r) > a.hdr.count - count(r)) {
                *limit = a.hdr.count, *reach = displ(r) + count(r);
                return true;
            }
        }
        return false;
    }
};

__global__ void allgatherv_kernel(nvshmemrs_exchange_args a) {
    exchange_step(a.hdr, AllgathervSrc{a}, a.code, false);
}

// The size word member r's line 0 must carry.
__device__ __forceinline__ uint64_t agv_size_word(const nvshmemrs_parts_args &a, int r) {
    return part_word(a.bytes[r], a.dtype, false);
}

// The family's lines (coll/put_blocks.cuh ll_blocks_step) with a part of its own size per
// member, the size word first (coll/parts.cuh).
__global__ void allgatherv_lines_kernel(nvshmemrs_parts_args a) {
    const nvshmemrs_coll_header &h = a.fam.hdr;
    __shared__ char *base[NVSHMEMRS_PARTS_MAX_PES];
    Step s;
    if (!parts_begin(h, base, &s)) return;
    const Waiter w(h, NVSHMEMRS_WAIT_OP_COLLECTIVE, a.fam.code);
    const uint32_t flag = ll_flag(s.value - 1);
    __shared__ uint4 *dst[NVSHMEMRS_PARTS_MAX_PES];
    ll_peer_slots(h, base, s.parity, dst);
    const char *in = static_cast<const char *>(h.input);
    char *out = static_cast<char *>(h.output);
    const uint64_t mine = a.bytes[h.rank];
    size_t l0, l1;
    ll_block_lines(part_lines(mine), &l0, &l1);
    const uint64_t word = agv_size_word(a, h.rank);
    for (size_t i = l0 + threadIdx.x; i < l1; i += blockDim.x) {
        const uint2 v = part_line(word, in, mine, i);
        for (int k = 1, r = h.rank + 1; k < h.n; ++k, ++r) {
            if (r == h.n) r = 0;
            st_line(dst[r] + i, v.x, v.y, flag);
        }
    }
    // The own part, this block's share of it; in place it is there already.
    char *own = out + a.displ[h.rank];
    if (own != in) {
        size_t b, e;
        part_of<char>(mine, gridDim.x, blockIdx.x, &b, &e);
        block_store(own + b, in + b, e - b);
    }
    uint64_t most = 0;
    for (int r = 0; r < h.n; ++r)
        if (r != h.rank && part_lines(a.bytes[r]) > most) most = part_lines(a.bytes[r]);
    const bool ok = recv_parts(
        h, w, s, flag, most, [&](int r) { return part_lines(a.bytes[r]); },
        [&](int r) { return agv_size_word(a, r); },
        [&](int r, size_t i, uint2 v) {
            store8_any(out + a.displ[r] + 8 * (i - 1), a.bytes[r] - 8 * (i - 1), v);
        },
        [](int) {});
    if (!ok) return;
    end_step(h);
}

// Member r's part as allgather's blocks (coll/put_blocks.cuh put_parts_step).
struct AgvParts {
    const nvshmemrs_parts_args &a;
    __device__ size_t bytes() const { return a.bytes[a.fam.hdr.rank]; }
    __device__ size_t offset() const { return a.displ[a.fam.hdr.rank]; }
    __device__ const char *src(int) const { return static_cast<const char *>(a.fam.hdr.input); }
};

__global__ void allgatherv_blocks_kernel(nvshmemrs_parts_args a) {
    put_parts_step(a.fam, AgvParts{a});
}

// Every part within the output, at most NVSHMEMRS_PARTS_MAX_PES members.
bool agv_parts_ok(const nvshmemrs_parts_args &args) {
    const nvshmemrs_coll_header &h = args.fam.hdr;
    if (h.n > NVSHMEMRS_PARTS_MAX_PES) return false;
    const uint64_t out = h.count * args.fam.elem_bytes;
    for (int r = 0; r < h.n; ++r)
        if (args.displ[r] > out || args.bytes[r] > out - args.displ[r]) return false;
    return true;
}

}  // namespace

extern "C" int nvshmemrs_allgatherv_blocks(nvshmemrs_parts_args args, int blocks,
                                           int threads, cudaStream_t stream) {
    if (!family_args_ok(args.fam, blocks) || !agv_parts_ok(args) ||
        args.fam.protocol != NVSHMEMRS_FAMILY_HANDSHAKE)
        return cudaErrorInvalidValue;
    return (int)launch_pdl(allgatherv_blocks_kernel, blocks, threads, stream, args);
}

extern "C" int nvshmemrs_allgatherv_lines(nvshmemrs_parts_args args, int blocks,
                                          int threads, cudaStream_t stream) {
    const nvshmemrs_coll_header &h = args.fam.hdr;
    if (!family_args_ok(args.fam, blocks) || !agv_parts_ok(args) || h.ll_scratch == NULL ||
        !h.all_mapped || h.no_direct)
        return cudaErrorInvalidValue;
    // Each part and its size line within a slot.
    for (int r = 0; r < h.n; ++r)
        if (part_lines(args.bytes[r]) * 16 > h.ll_slot_bytes) return cudaErrorInvalidValue;
    return (int)launch_pdl(allgatherv_lines_kernel, blocks, threads, stream, args);
}

extern "C" int nvshmemrs_allgatherv(const nvshmemrs_exchange_args *args, int blocks, int threads,
                                    cudaStream_t stream) {
    if (!exchange_args_ok(args, blocks) || args->mode != NVSHMEMRS_EXCHANGE_ALLGATHERV ||
        args->lines != 0 || args->elem_bytes <= 0 || args->counts[0] == NULL ||
        args->counts[1] == NULL)
        return cudaErrorInvalidValue;
    return (int)launch_pdl(allgatherv_kernel, blocks, threads, stream, *args);
}
