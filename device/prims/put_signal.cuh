// Put-with-signal from a whole block: data to one peer or to every other member, then one
// counter per peer set to the step's value, ordered after the data. Direct stores where
// nvshmem_ptr maps the peer (NVLink/PCIe), NVSHMEM block puts with signal otherwise.
#ifndef NVSHMEM_RS_PUT_SIGNAL_CUH
#define NVSHMEM_RS_PUT_SIGNAL_CUH

#include "core/nvshmem_device.cuh"
#include <stddef.h>
#include <stdint.h>

#include "abi.h"
#include "prims/fence.cuh"

// Internal linkage: see prims/reduce.cuh.
namespace {

// The block copies `bytes` into the peer's mapping with 16-byte stores where it can. Each
// thread keeps four loads in flight before their stores: one load then one store per
// iteration leaves too few requests outstanding to fill an NVLink peer's bandwidth.
__device__ __forceinline__ void block_store(char *dst, const char *src, size_t bytes) {
    if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) == 0) {
        const uint4 *s = reinterpret_cast<const uint4 *>(src);
        uint4 *d = reinterpret_cast<uint4 *>(dst);
        const size_t n = bytes / 16, step = blockDim.x;
        size_t i = threadIdx.x;
        for (; i + 3 * step < n; i += 4 * step) {
            const uint4 v0 = s[i], v1 = s[i + step], v2 = s[i + 2 * step], v3 = s[i + 3 * step];
            d[i] = v0;
            d[i + step] = v1;
            d[i + 2 * step] = v2;
            d[i + 3 * step] = v3;
        }
        for (; i < n; i += step) d[i] = s[i];
        for (size_t j = n * 16 + threadIdx.x; j < bytes; j += blockDim.x) dst[j] = src[j];
    } else {
        for (size_t j = threadIdx.x; j < bytes; j += blockDim.x) dst[j] = src[j];
    }
}

// block_store of two copies in one loop (`bytes` from s1 to d1 and from s2 to d2), so that the
// second (a local copy) hides under the first (stores to a peer, bound by the link) instead of
// following it. Two loads of each in flight per thread; unaligned pairs copy one after the
// other.
__device__ __forceinline__ void block_store_pair(char *d1, const char *s1, char *d2,
                                                 const char *s2, size_t bytes) {
    const uintptr_t bits = reinterpret_cast<uintptr_t>(d1) | reinterpret_cast<uintptr_t>(s1) |
                           reinterpret_cast<uintptr_t>(d2) | reinterpret_cast<uintptr_t>(s2);
    if ((bits & 15) != 0) {
        block_store(d1, s1, bytes);
        block_store(d2, s2, bytes);
        return;
    }
    const uint4 *a = reinterpret_cast<const uint4 *>(s1), *c = reinterpret_cast<const uint4 *>(s2);
    uint4 *x = reinterpret_cast<uint4 *>(d1), *y = reinterpret_cast<uint4 *>(d2);
    const size_t n = bytes / 16, step = blockDim.x;
    // One source (broadcast's root: its input to the peer and to its own output) is read once.
    const bool same = s1 == s2;
    size_t i = threadIdx.x;
    for (; i + step < n; i += 2 * step) {
        const uint4 a0 = a[i], a1 = a[i + step];
        const uint4 c0 = same ? a0 : c[i], c1 = same ? a1 : c[i + step];
        x[i] = a0;
        x[i + step] = a1;
        y[i] = c0;
        y[i + step] = c1;
    }
    for (; i < n; i += step) {
        x[i] = a[i];
        y[i] = c[i];
    }
    for (size_t j = n * 16 + threadIdx.x; j < bytes; j += blockDim.x) {
        d1[j] = s1[j];
        d2[j] = s2[j];
    }
}

// block_store_pair of copies of different lengths: the common length (16-byte aligned) in one
// loop, the rest of the longer after it.
__device__ __forceinline__ void block_store_pair(char *d1, const char *s1, size_t n1, char *d2,
                                                 const char *s2, size_t n2) {
    const size_t both = (n1 < n2 ? n1 : n2) & ~(size_t)15;
    block_store_pair(d1, s1, d2, s2, both);
    block_store(d1 + both, s1 + both, n1 - both);
    block_store(d2 + both, s2 + both, n2 - both);
}

// Where a block's stores reach symmetric `addr` on `pe` directly (NVLink/PCIe), or NULL when
// the data must go through NVSHMEM: the peer is not mapped (another node), or the header says
// no_direct (the cross-node path, run on one node).
__device__ __forceinline__ char *direct_ptr(const nvshmemrs_coll_header &h, const void *addr,
                                            int pe) {
    return h.no_direct ? NULL : static_cast<char *>(nvshmem_ptr(addr, pe));
}

// A block's part from which its own copy rides along its first peer's stores (block_store_pair)
// instead of going first: there the copy takes longer than the ARRIVE's round trip it would
// otherwise hide under. 64 KiB: a rank block of 8 MiB on the full grid.
constexpr size_t FUSED_COPY_MIN = 64 << 10;

// A block's own copy (`bytes` from `own` to `mine`, both local) before it waits to send: done
// here, and NULL; or, from FUSED_COPY_MIN with member `first` mapped, left for the caller to
// make with its stores to `first` (block_store_pair), and the address of `mine` on `first`
// (what it sends lands at the same offset of every member's output). Nothing in place.
__device__ __forceinline__ char *own_copy_or_fused(const nvshmemrs_coll_header &h, char *mine,
                                                   const char *own, size_t bytes, int first) {
    if (own == mine) return NULL;
    char *fused = NULL;
    if (bytes >= FUSED_COPY_MIN && first != h.rank) fused = direct_ptr(h, mine, h.pes[first]);
    if (fused == NULL) block_store(mine, own, bytes);
    return fused;
}

// Raised by the block's thread `t` after the barrier the caller has passed: a release at system
// scope (the reader is another GPU), covering every thread's stores before that barrier, then
// the signal (`sig_op`: NVSHMEM_SIGNAL_SET or _ADD). One fence per signalling thread instead of
// one per thread.
__device__ __forceinline__ void release_signal(uint64_t *flag, uint64_t value, int pe,
                                               int sig_op = NVSHMEM_SIGNAL_SET) {
    fence_acq_rel_sys();
    nvshmemx_signal_op(flag, value, sig_op, pe);
}

// One peer's part, sent by the whole block: `bytes` from local `src` to `dst` (a symmetric
// address) on `pe`. Where the peer is mapped, direct stores, and true: the caller raises `flag`
// after a barrier (release_signal). Else an NVSHMEM put that sets `flag` to `value` (adds it,
// with sig_op NVSHMEM_SIGNAL_ADD) after the data (blocking with `reuse_src`, so that `src` may
// be overwritten next; direct stores have read it by the time they return anyway), or the
// signal alone for 0 bytes.
__device__ __forceinline__ bool block_send_part(const nvshmemrs_coll_header &h, char *dst,
                                                const char *src, size_t bytes, uint64_t *flag,
                                                uint64_t value, int pe, bool reuse_src,
                                                int sig_op = NVSHMEM_SIGNAL_SET) {
    char *peer = direct_ptr(h, dst, pe);
    if (peer != NULL) {
        block_store(peer, src, bytes);
        return true;
    }
    if (bytes > 0 && reuse_src) {
        nvshmemx_putmem_signal_block(dst, src, bytes, flag, value, sig_op, pe);
    } else if (bytes > 0) {
        nvshmemx_putmem_signal_nbi_block(dst, src, bytes, flag, value, sig_op, pe);
    } else if (threadIdx.x == 0) {
        nvshmemx_signal_op(flag, value, sig_op, pe);
    }
    return false;
}

// Delivers `bytes` from local `src` to `dst` (a symmetric address) on `pe`, then sets the
// counter `flag` on `pe` to `value` (adds `value` with sig_op NVSHMEM_SIGNAL_ADD), ordered
// after the data (block_send_part). Called by the whole block.
__device__ void block_put_signal(const nvshmemrs_coll_header &h, char *dst, const char *src,
                                 size_t bytes, uint64_t *flag, uint64_t value, int pe,
                                 bool reuse_src = false, int sig_op = NVSHMEM_SIGNAL_SET) {
    // The same answer on every thread (one peer, one address): the barrier is uniform.
    if (block_send_part(h, dst, src, bytes, flag, value, pe, reuse_src, sig_op)) {
        __syncthreads();
        if (threadIdx.x == 0) release_signal(flag, value, pe, sig_op);
    }
    __syncthreads();
}

// block_put_signal to every other member r with to(r) at once: member r gets `bytes` from
// src(r) at dst (a symmetric address) and its `flag` set to `value`. Members go in rank order
// from `first` (wrapping, this PE skipped), so that senders starting at different members do
// not all write to one receiver at a time. Mapped members take direct stores, then their
// signals in parallel after one barrier (thread r releases and signals member r); the others
// take NVSHMEM puts with signal, blocking ones with `reuse_src` (the caller overwrites a source
// next). `part(r, &dst, &src, &bytes)` names what goes to rank r.
template <typename Part, typename To>
__device__ void block_put_signal_to(const nvshmemrs_coll_header &h, Part part, To to, int first,
                                    uint64_t *flag, uint64_t value, bool reuse_src = false) {
    bool mapped_any = false;
    for (int k = 0; k < h.n; ++k) {
        const int r = (first + k) % h.n;
        if (r == h.rank || !to(r)) continue;
        char *dst;
        const char *src;
        size_t bytes;
        part(r, &dst, &src, &bytes);
        mapped_any |= block_send_part(h, dst, src, bytes, flag, value, h.pes[r], reuse_src);
    }
    if (mapped_any) {
        __syncthreads();
        for (int r = threadIdx.x; r < h.n; r += blockDim.x) {
            if (r == h.rank || !to(r)) continue;
            char *dst;
            const char *src;
            size_t bytes;
            part(r, &dst, &src, &bytes);
            if (direct_ptr(h, dst, h.pes[r]) != NULL) release_signal(flag, value, h.pes[r]);
        }
    }
    __syncthreads();
}

// block_put_signal_to every other member, from the next rank on.
template <typename Part>
__device__ void block_put_signal_all(const nvshmemrs_coll_header &h, Part part, uint64_t *flag,
                                     uint64_t value, bool reuse_src = false) {
    block_put_signal_to(
        h, part, [](int) { return true; }, h.rank + 1, flag, value, reuse_src);
}

}  // namespace

#endif
