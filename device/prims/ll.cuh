// Lines of the low-latency protocol: data and flag stored together, so that the receiver polls
// the data itself.
#ifndef NVSHMEM_RS_LL_CUH
#define NVSHMEM_RS_LL_CUH

#include "core/nvshmem_device.cuh"
#include <stddef.h>
#include <stdint.h>

#include "abi.h"
#include "prims/peers.cuh"
#include "prims/waiter.cuh"

// Internal linkage: see prims/reduce.cuh.
namespace {

// Low-latency protocol (NVSHMEMRS_ALGO_ONESHOT_LL, see abi.h). Line i of a slot carries payload
// bytes [8i, 8i + 8) as {data0, flag, data1, flag}: each 8-byte half is stored and loaded as one
// access (in practice, as NCCL's LL protocol relies on; PTX promises it only per 32-bit element),
// so a half whose flag matches has its data too; the two halves may land apart, so both carry
// the flag. flag = low 32 bits of steps + 1, never 0. The slots are the region ll_scratch, which
// only this protocol writes, and every line is zeroed by its reader once read: a line holds a
// non-zero flag only from its writer's store to its reader's load, so a flag repeating after
// 2^32 steps never meets a stale line.

// The flag of step `steps`: never 0 (a cleared line, the heap's initial value).
__device__ __forceinline__ uint32_t ll_flag(uint64_t steps) {
    const uint32_t f = (uint32_t)(steps + 1);
    return f == 0 ? 1u : f;
}

// Slot of source rank r, parity `parity`, in the low-latency region.
__device__ __forceinline__ uint4 *ll_slot(const nvshmemrs_coll_header &h, int parity, int r) {
    return reinterpret_cast<uint4 *>(h.ll_scratch +
                                     ((size_t)parity * h.world + r) * h.ll_slot_bytes);
}

__device__ __forceinline__ void st_line(uint4 *p, uint32_t d0, uint32_t d1, uint32_t flag) {
    asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(d0),
                 "r"(flag), "r"(d1), "r"(flag)
                 : "memory");
}

// One 64-bit word as line p (low half, then high half, each beside the flag).
__device__ __forceinline__ void st_line_word(uint4 *p, uint64_t v, uint32_t flag) {
    st_line(p, (uint32_t)v, (uint32_t)(v >> 32), flag);
}

// The 64-bit word a line stored by st_line_word carries.
__device__ __forceinline__ uint64_t line_word(const uint4 &v) {
    return (uint64_t)v.x | (uint64_t)v.z << 32;
}

// Loads line p once, bypassing L1 (the peer writes it over NVLink).
__device__ __forceinline__ uint4 ld_line_once(const uint4 *p) {
    uint4 v;
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
}

// Line i of the slots of ranks r0 + j for each bit j of `pending`, polled together
// until each carries `flag` in both halves: G loads in flight per pass instead of one peer's
// round trip after another, which at 8 PEs cost more than the data's flight. Payloads land in
// out[j] (slot j of the group); each line is zeroed once read (its writer's next store to it is
// two steps away, after this kernel has completed). False when the timeout passed or the
// workspace broke meanwhile; the clock is read every 256 passes only.
template <int G>
__device__ __forceinline__ bool ld_pending(const nvshmemrs_coll_header &h, int parity, size_t i,
                                           int r0, uint32_t pending, uint32_t flag,
                                           uint2 (&out)[G], const Waiter &w) {
    uint64_t start = 0;
    for (uint32_t spin = 1; pending != 0; ++spin) {
        uint4 v[G];
#pragma unroll
        for (int j = 0; j < G; ++j)
            if (pending >> j & 1) v[j] = ld_line_once(ll_slot(h, parity, r0 + j) + i);
        uint32_t seen = 0;
        int late = -1;
#pragma unroll
        for (int j = 0; j < G; ++j) {
            if (!(pending >> j & 1)) continue;
            if (v[j].y == flag && v[j].w == flag) {
                out[j] = make_uint2(v[j].x, v[j].z);
                *(ll_slot(h, parity, r0 + j) + i) = make_uint4(0, 0, 0, 0);
                pending &= ~(1u << j);
            } else if (late < 0) {
                late = j;
                seen = v[j].y != flag ? v[j].y : v[j].w;
            }
        }
        if (pending != 0 && (spin & 255) == 0 &&
            w.give_up(ll_slot(h, parity, r0 + late) + i, flag, seen, &start, h.pes[r0 + late]))
            return false;
    }
    return true;
}

// Line i of the slots of ranks r0 .. r0 + G - 1 (those below n, except `skip`): ld_pending.
template <int G>
__device__ __forceinline__ bool ld_lines(const nvshmemrs_coll_header &h, int parity, size_t i,
                                         int r0, int skip, uint32_t flag, uint2 (&out)[G],
                                         const Waiter &w) {
    uint32_t pending = 0;
#pragma unroll
    for (int j = 0; j < G; ++j)
        if (r0 + j < h.n && r0 + j != skip) pending |= 1u << j;
    return ld_pending<G>(h, parity, i, r0, pending, flag, out, w);
}

// ld_lines for the ranks r0 .. r0 + G - 1 below n, other than this PE, for which from(r) holds.
template <int G, typename From>
__device__ __forceinline__ bool ld_lines_from(const nvshmemrs_coll_header &h, int parity,
                                              size_t i, int r0, From from, uint32_t flag,
                                              uint2 (&out)[G], const Waiter &w) {
    uint32_t pending = 0;
#pragma unroll
    for (int j = 0; j < G; ++j)
        if (r0 + j < h.n && r0 + j != h.rank && from(r0 + j)) pending |= 1u << j;
    return ld_pending<G>(h, parity, i, r0, pending, flag, out, w);
}

// 8 payload bytes at byte offset 8*i of buf (zero past `bytes`). buf is 8-byte aligned. The
// tail is assembled in a register: a byte array would live in local memory.
__device__ __forceinline__ uint2 load8(const char *buf, size_t i, size_t bytes) {
    if (8 * i + 8 <= bytes) return *reinterpret_cast<const uint2 *>(buf + 8 * i);
    uint64_t v = 0;
    for (size_t j = 8 * i; j < bytes; ++j)
        v |= (uint64_t)(uint8_t)buf[j] << (8 * (j - 8 * i));
    return make_uint2((uint32_t)v, (uint32_t)(v >> 32));
}

// Writes the first min(8, bytes - 8*i) bytes of v at byte offset 8*i of buf.
__device__ __forceinline__ void store8(char *buf, size_t i, size_t bytes, uint2 v) {
    if (8 * i + 8 <= bytes) {
        *reinterpret_cast<uint2 *>(buf + 8 * i) = v;
        return;
    }
    const uint64_t w = (uint64_t)v.x | (uint64_t)v.y << 32;
    for (size_t j = 8 * i; j < bytes; ++j) buf[j] = (char)(w >> (8 * (j - 8 * i)));
}

// The first min(n, 8) bytes at p (the rest zero) as a line's payload, whatever p's alignment:
// one 8-byte load where p allows it, else 4-, 2- or 1-byte loads (the exchanges' buffers are
// as aligned as their element type and displacements make them).
__device__ __forceinline__ uint2 load8_any(const char *p, size_t n) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    if (n >= 8) {
        if ((a & 7) == 0) return *reinterpret_cast<const uint2 *>(p);
        if ((a & 3) == 0) {
            const uint32_t *q = reinterpret_cast<const uint32_t *>(p);
            return make_uint2(q[0], q[1]);
        }
        if ((a & 1) == 0) {
            const uint16_t *q = reinterpret_cast<const uint16_t *>(p);
            return make_uint2(q[0] | (uint32_t)q[1] << 16, q[2] | (uint32_t)q[3] << 16);
        }
    }
    uint64_t v = 0;
    for (size_t j = 0; j < n && j < 8; ++j) v |= (uint64_t)(uint8_t)p[j] << (8 * j);
    return make_uint2((uint32_t)v, (uint32_t)(v >> 32));
}

// Writes the first min(n, 8) bytes of payload v at p, whatever p's alignment (load8_any's
// inverse).
__device__ __forceinline__ void store8_any(char *p, size_t n, uint2 v) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    if (n >= 8) {
        if ((a & 7) == 0) {
            *reinterpret_cast<uint2 *>(p) = v;
            return;
        }
        if ((a & 3) == 0) {
            uint32_t *q = reinterpret_cast<uint32_t *>(p);
            q[0] = v.x;
            q[1] = v.y;
            return;
        }
        if ((a & 1) == 0) {
            uint16_t *q = reinterpret_cast<uint16_t *>(p);
            q[0] = (uint16_t)v.x;
            q[1] = (uint16_t)(v.x >> 16);
            q[2] = (uint16_t)v.y;
            q[3] = (uint16_t)(v.y >> 16);
            return;
        }
    }
    const uint64_t w = (uint64_t)v.x | (uint64_t)v.y << 32;
    for (size_t j = 0; j < n && j < 8; ++j) p[j] = (char)(w >> (8 * j));
}

// Lines [*l0, *l1) of `lines` for this block: an even split over the grid.
__device__ __forceinline__ void ll_block_lines(size_t lines, size_t *l0, size_t *l1) {
    const size_t per = (lines + gridDim.x - 1) / gridDim.x;
    const size_t b = per * blockIdx.x;
    *l0 = b < lines ? b : lines;
    *l1 = b + per < lines ? b + per : lines;
}

// Where each member's line region starts in this PE's mapping (NULL for this PE), into `base`
// (shared memory), for ll_peer_slots. It reads only what a workspace fixes at creation (the
// header's heap map, prims/peers.cuh; past it the PE table and NVSHMEM's peer table), so
// kernels call it before wait_for_previous_kernel: behind the previous kernel back to back,
// and otherwise on the block's second warp while the first reads the step (after a compute
// kernel has flushed L2 the tables' reads are misses, and in a row they were most of the
// low-latency launch's cost). No barrier: the caller's next one publishes it. Every member is
// mapped (callers choose the lines only then).
__device__ __forceinline__ void ll_peer_bases(const nvshmemrs_coll_header &h, char **base) {
    const int first = blockDim.x >= 32 + (unsigned)h.n ? 32 : 0;
    for (int r = (int)threadIdx.x - first; r >= 0 && r < h.n; r += blockDim.x)
        base[r] = r == h.rank ? nullptr : member_ptr(h, h.ll_scratch, r);
}

// Slot [h.rank] at `parity` on each member (NULL for this PE), from ll_peer_bases' `base`
// (after a barrier), into `dst` (shared memory): the region has one layout on every PE.
__device__ __forceinline__ void ll_peer_slots(const nvshmemrs_coll_header &h, char *const *base,
                                              int parity, uint4 **dst) {
    const size_t off = reinterpret_cast<char *>(ll_slot(h, parity, h.rank)) - h.ll_scratch;
    for (int r = threadIdx.x; r < h.n; r += blockDim.x)
        dst[r] = base[r] == nullptr ? nullptr : reinterpret_cast<uint4 *>(base[r] + off);
    __syncthreads();
}

// Lines [l0, l1) of src(r) (`bytes` each, 8-byte aligned) into slot [h.rank] of every other
// member r, one line per thread per pass, `to(r)` selecting the receivers. Peers in rank order
// from the next one, so that the members do not all write to the same peer at once.
template <typename Src, typename To>
__device__ __forceinline__ void ll_put_lines(const nvshmemrs_coll_header &h, uint4 *const *dst,
                                             Src src, To to, size_t bytes, size_t l0, size_t l1,
                                             uint32_t flag) {
    for (size_t i = l0 + threadIdx.x; i < l1; i += blockDim.x) {
        for (int k = 1, r = h.rank + 1; k < h.n; ++k, ++r) {
            if (r == h.n) r = 0;
            if (!to(r)) continue;
            const uint2 v = load8(src(r), i, bytes);
            st_line(dst[r] + i, v.x, v.y, flag);
        }
    }
}

// Lines [l0, l1) from every other member r with from(r), polled G members at a time
// (ld_lines), each payload handed to got(r, i, v). False when a wait timed out or the
// workspace broke (the failure is recorded).
template <int G, typename From, typename Got>
__device__ __forceinline__ bool ll_get_lines(const nvshmemrs_coll_header &h, int parity,
                                             size_t l0, size_t l1, uint32_t flag, const Waiter &w,
                                             From from, Got got) {
    for (size_t i = l0 + threadIdx.x; i < l1; i += blockDim.x) {
        for (int r0 = 0; r0 < h.n; r0 += G) {
            uint2 v[G];
            if (!ld_lines_from<G>(h, parity, i, r0, from, flag, v, w)) return false;
#pragma unroll
            for (int j = 0; j < G; ++j)
                if (r0 + j < h.n && r0 + j != h.rank && from(r0 + j)) got(r0 + j, i, v[j]);
        }
    }
    return true;
}

}  // namespace

#endif
