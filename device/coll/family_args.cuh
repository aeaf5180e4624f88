// The argument checks every entry point of coll/family.h starts with.
#ifndef NVSHMEM_RS_FAMILY_ARGS_CUH
#define NVSHMEM_RS_FAMILY_ARGS_CUH

#include "abi.h"

// Members, rank, root, element size and grid in range (counters exist for FAMILY_BLOCKS).
static inline bool family_args_ok(const nvshmemrs_family_args &a, int blocks) {
    const nvshmemrs_coll_header &h = a.hdr;
    return h.n >= 1 && h.n <= h.world && h.rank >= 0 && h.rank < h.n && a.root >= 0 &&
           a.root < h.n && a.elem_bytes > 0 && blocks >= 1 && blocks <= NVSHMEMRS_FAMILY_BLOCKS;
}

#endif
