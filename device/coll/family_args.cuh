// The argument checks every entry point of the family (coll/family.h) starts with.
#ifndef NVSHMEM_RS_FAMILY_ARGS_CUH
#define NVSHMEM_RS_FAMILY_ARGS_CUH

#include <stddef.h>
#include <stdint.h>

#include "abi.h"

// Members, rank, root, element size and grid in range (counters exist for FAMILY_BLOCKS).
static inline bool family_args_ok(const nvshmemrs_family_args &a, int blocks) {
    const nvshmemrs_coll_header &h = a.hdr;
    return h.n >= 1 && h.n <= h.world && h.rank >= 0 && h.rank < h.n && a.root >= 0 &&
           a.root < h.n && a.elem_bytes > 0 && blocks >= 1 && blocks <= NVSHMEMRS_FAMILY_BLOCKS;
}

// The low-latency protocol's conditions (abi.h NVSHMEMRS_FAMILY_LL), where a launch asks for
// it: a line region large enough for a block, few enough members, 8-byte aligned buffers and
// blocks.
static inline bool family_ll_ok(const nvshmemrs_family_args &a) {
    if (a.protocol == NVSHMEMRS_FAMILY_HANDSHAKE) return true;
    const nvshmemrs_coll_header &h = a.hdr;
    const size_t bytes = h.count * (size_t)a.elem_bytes;
    const size_t block = a.stride * (size_t)a.elem_bytes;
    const uintptr_t addrs = (uintptr_t)h.input | (uintptr_t)h.output;
    return a.protocol == NVSHMEMRS_FAMILY_LL && h.ll_scratch != NULL &&
           h.n <= NVSHMEMRS_FAMILY_LL_MAX_PES && (bytes + 7) / 8 * 16 <= h.ll_slot_bytes &&
           addrs % 8 == 0 && block % 8 == 0 && !h.no_direct && h.all_mapped;
}

// Whether the launch's protocol moves data without receive slots (the lines, the pull), so that
// the slots' size does not bound it.
static inline bool family_slotless(const nvshmemrs_family_args &a) {
    return a.protocol == NVSHMEMRS_FAMILY_LL || a.protocol == NVSHMEMRS_FAMILY_PULL;
}

// The protocol a launch asks for, where the entry point has it (`split`: broadcast, reduce;
// `pull`: reduce, reduce-scatter): HANDSHAKE; LL under family_ll_ok's conditions; SPLIT with
// at least 2 members (the parts are one per member other than the root); PULL with 2 to
// NVSHMEMRS_FAMILY_LL_MAX_PES members, every one mapped (the readers' tables of sources).
// Reduce checks that a part fits a slot itself.
static inline bool family_protocol_ok(const nvshmemrs_family_args &a, bool split, bool pull) {
    const nvshmemrs_coll_header &h = a.hdr;
    if (a.protocol == NVSHMEMRS_FAMILY_SPLIT) return split && h.n >= 2;
    if (a.protocol == NVSHMEMRS_FAMILY_PULL)
        return pull && h.n >= 2 && h.n <= NVSHMEMRS_FAMILY_LL_MAX_PES && !h.no_direct &&
               h.all_mapped;
    return family_ll_ok(a);
}

#endif
