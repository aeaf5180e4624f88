// Where a member's copy of a symmetric address lies in this PE's address space: from the
// launch's header where the host put the heap map (abi.h peer_delta), else from nvshmem_ptr.
#ifndef NVSHMEM_RS_PEERS_CUH
#define NVSHMEM_RS_PEERS_CUH

#include "core/nvshmem_device.cuh"

#include "abi.h"

// Internal linkage: see prims/reduce.cuh.
namespace {

// Member r's copy of symmetric `addr` (this PE's own for r == h.rank), or NULL where r is not
// reachable by direct loads and stores (another node, or a pretend one). Below peer_table the
// answer comes from the launch's parameters: no load that can miss.
__device__ __forceinline__ char *member_ptr(const nvshmemrs_coll_header &h, const void *addr,
                                            int r) {
    if (r < h.peer_table)
        return h.peer_mapped >> r & 1
                   ? const_cast<char *>(static_cast<const char *>(addr)) + h.peer_delta[r]
                   : nullptr;
    return static_cast<char *>(nvshmem_ptr(addr, h.pes[r]));
}

}  // namespace

#endif
