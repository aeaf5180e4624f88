// Put-with-signal from a whole block: data to one peer or to every other member, then one signal
// add per peer, ordered after the data. Direct stores where nvshmem_ptr maps the peer
// (NVLink/PCIe), NVSHMEM block puts with signal otherwise.
#ifndef NVSHMEM_RS_PUT_SIGNAL_CUH
#define NVSHMEM_RS_PUT_SIGNAL_CUH

#include <nvshmem.h>
#include <nvshmemx.h>
#include <stddef.h>
#include <stdint.h>

#include "abi.h"
#include "prims/fence.cuh"

// Internal linkage: see prims/reduce.cuh.
namespace {

// The block copies `bytes` into the peer's mapping with 16-byte stores where it can.
__device__ __forceinline__ void block_store(char *dst, const char *src, size_t bytes) {
    if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) == 0) {
        const uint4 *s = reinterpret_cast<const uint4 *>(src);
        uint4 *d = reinterpret_cast<uint4 *>(dst);
        size_t n = bytes / 16;
        for (size_t i = threadIdx.x; i < n; i += blockDim.x) d[i] = s[i];
        for (size_t j = n * 16 + threadIdx.x; j < bytes; j += blockDim.x) dst[j] = src[j];
    } else {
        for (size_t j = threadIdx.x; j < bytes; j += blockDim.x) dst[j] = src[j];
    }
}

// Delivers `bytes` from local `src` to `dst` (a symmetric address) on `pe`, then adds 1 to the
// counter `flag` on `pe`, ordered after the data. Called by the whole block. With `reuse_src`
// the NVSHMEM path blocks until `src` may be overwritten (the caller writes it next); direct
// stores have read it by the time they return anyway.
__device__ void block_put_signal(char *dst, const char *src, size_t bytes, uint64_t *flag, int pe,
                                 bool reuse_src = false) {
    char *peer = static_cast<char *>(nvshmem_ptr(dst, pe));
    if (peer != NULL) {
        block_store(peer, src, bytes);
        fence_acq_rel_sys();
        __syncthreads();
        if (threadIdx.x == 0) nvshmemx_signal_op(flag, 1, NVSHMEM_SIGNAL_ADD, pe);
    } else if (bytes > 0 && reuse_src) {
        nvshmemx_putmem_signal_block(dst, src, bytes, flag, 1, NVSHMEM_SIGNAL_ADD, pe);
    } else if (bytes > 0) {
        nvshmemx_putmem_signal_nbi_block(dst, src, bytes, flag, 1, NVSHMEM_SIGNAL_ADD, pe);
    } else if (threadIdx.x == 0) {
        nvshmemx_signal_op(flag, 1, NVSHMEM_SIGNAL_ADD, pe);
    }
    __syncthreads();
}

// block_put_signal to every other member at once: member r gets `bytes` from src(r) at dst
// (a symmetric address) and 1 added to `flag`. Mapped members take direct stores, then one fence
// for all of them and their signals in parallel (thread k signals the k-th); the others take
// NVSHMEM puts with signal. `part(r, &src, &bytes)` names what goes to rank r; dst(r) likewise.
template <typename Part>
__device__ void block_put_signal_all(const nvshmemrs_coll_header &h, Part part,
                                     uint64_t *flag) {
    bool mapped_any = false;
    for (int k = 1; k < h.n; ++k) {
        const int r = (h.rank + k) % h.n;
        char *dst;
        const char *src;
        size_t bytes;
        part(r, &dst, &src, &bytes);
        char *peer = static_cast<char *>(nvshmem_ptr(dst, h.pes[r]));
        if (peer != NULL) {
            block_store(peer, src, bytes);
            mapped_any = true;
        } else if (bytes > 0) {
            nvshmemx_putmem_signal_nbi_block(dst, src, bytes, flag, 1, NVSHMEM_SIGNAL_ADD,
                                             h.pes[r]);
        } else if (threadIdx.x == 0) {
            nvshmemx_signal_op(flag, 1, NVSHMEM_SIGNAL_ADD, h.pes[r]);
        }
    }
    if (mapped_any) {
        fence_acq_rel_sys();
        __syncthreads();
        for (int k = 1 + threadIdx.x; k < h.n; k += blockDim.x) {
            const int r = (h.rank + k) % h.n;
            char *dst;
            const char *src;
            size_t bytes;
            part(r, &dst, &src, &bytes);
            if (nvshmem_ptr(dst, h.pes[r]) != NULL)
                nvshmemx_signal_op(flag, 1, NVSHMEM_SIGNAL_ADD, h.pes[r]);
        }
    }
    __syncthreads();
}

}  // namespace

#endif
