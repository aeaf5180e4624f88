// The family's handshakes (coll/family.h): before a sender writes into a receiver's memory
// (its output, or its receive slots where no all-to-all step orders their reuse), the receiver
// tells it that the memory is free for this step; the data then carries its own counter.
// Counters are the step layout's (prims/step.cuh) with phases NVSHMEMRS_FAMILY_ARRIVE and
// NVSHMEMRS_FAMILY_DATA, one per (source rank, block), set to the step's value.
#ifndef NVSHMEM_RS_PRIMS_EXCHANGE_CUH
#define NVSHMEM_RS_PRIMS_EXCHANGE_CUH

#include "core/nvshmem_device.cuh"
#include <stdint.h>

#include "abi.h"
#include "prims/put_signal.cuh"
#include "prims/step.cuh"

// The family's counters are laid out as the slot protocols' (Layout with algo 0).
static_assert(NVSHMEMRS_FAMILY_BLOCKS == NVSHMEMRS_ALLREDUCE_SLOT_BLOCKS,
              "Layout::counter strides by NVSHMEMRS_ALLREDUCE_SLOT_BLOCKS");

// Internal linkage: see prims/reduce.cuh.
namespace {

// This block tells every member r with from(r) (r != rank) that this PE is at the step and
// its memory the step writes is free: counter ARRIVE[rank] on r := value. No fence: the
// memory was last touched by this PE's earlier kernels on the stream, which have completed
// (prims/pdl.cuh) before this one runs.
template <typename From>
__device__ __forceinline__ void block_arrive(const nvshmemrs_coll_header &h, const Layout &L,
                                             From from, uint64_t value) {
    for (int r = threadIdx.x; r < h.n; r += blockDim.x)
        if (r != h.rank && from(r))
            nvshmemx_signal_op(L.counter(NVSHMEMRS_FAMILY_ARRIVE, h.rank), value,
                               NVSHMEM_SIGNAL_SET, h.pes[r]);
}

// A symmetric address as a word another PE can use: its offset from this workspace's counters
// (h.flags, a symmetric allocation), as the exchange's mailbox gives offsets from its region.
// Symmetric objects lie at one offset from each other on every PE, but at one virtual address
// only where NVSHMEM's heap is CUDA VMM memory: with NVSHMEM_DISABLE_CUDA_VMM=1 memcheck found
// the alltoallv handshake's stores, given the receiver's own address, out of bounds.
__device__ __forceinline__ uint64_t sym_word(const nvshmemrs_coll_header &h, const void *addr) {
    return (uint64_t)(static_cast<const char *>(addr) - reinterpret_cast<const char *>(h.flags));
}

// The symmetric address on this PE of a word from sym_word (on any PE).
__device__ __forceinline__ char *sym_addr(const nvshmemrs_coll_header &h, uint64_t word) {
    return reinterpret_cast<char *>(h.flags) + (int64_t)word;
}

// block_arrive to every member r with from(r), each first given `addr` (sym_word) in this
// block's word [rank] of phase NVSHMEMRS_FAMILY_ADDR there (this PE's memory the member writes
// into or reads in this step), ordered before the ARRIVE by nvshmem_fence: a member that has
// seen the ARRIVE reads the word. The caller must not finish its step before every such member
// has read the word (it waits for a DATA each sends after reading it), so that its next write
// of the word cannot come first.
template <typename From>
__device__ __forceinline__ void block_arrive_with_word(const nvshmemrs_coll_header &h,
                                                       const Layout &L, From from,
                                                       uint64_t value, const void *addr) {
    for (int r = threadIdx.x; r < h.n; r += blockDim.x)
        if (r != h.rank && from(r)) {
            nvshmem_uint64_p(L.counter(NVSHMEMRS_FAMILY_ADDR, h.rank), sym_word(h, addr),
                             h.pes[r]);
            nvshmem_fence();
            nvshmemx_signal_op(L.counter(NVSHMEMRS_FAMILY_ARRIVE, h.rank), value,
                               NVSHMEM_SIGNAL_SET, h.pes[r]);
        }
}

// Every other member, as block_arrive's from(); the matching waits are block_wait_others
// (prims/waiter.cuh).
struct AllOthers {
    __device__ bool operator()(int) const { return true; }
};

// After reading what members r with to(r) lent it this step (PULL): a barrier (every thread's
// loads have returned), then thread r raises DATA[rank] on member r to `value`, which may then
// change the buffer. No fence: nothing this block stored needs to reach the member first.
template <typename To>
__device__ __forceinline__ void block_done_reading(const nvshmemrs_coll_header &h,
                                                   const Layout &L, To to, uint64_t value) {
    __syncthreads();
    for (int r = threadIdx.x; r < h.n; r += blockDim.x)
        if (r != h.rank && to(r))
            nvshmemx_signal_op(L.counter(NVSHMEMRS_FAMILY_DATA, h.rank), value,
                               NVSHMEM_SIGNAL_SET, h.pes[r]);
}

// The address member `r` gave this block in phase NVSHMEMRS_FAMILY_ADDR
// (block_arrive_with_word), as this PE's symmetric address of it; read only after its ARRIVE
// of this step has been seen.
__device__ __forceinline__ char *arrived_word(const Layout &L, int r) {
    return sym_addr(L.h, *(volatile uint64_t *)L.counter(NVSHMEMRS_FAMILY_ADDR, r));
}

// Points src[r] (one per member, in shared memory) at element `offset` of the buffer this block
// loads from member r under PULL: this PE's own `mine`, else the word member r gave in phase
// ADDR, through the mapping. Called after every such member's ARRIVE of the step; ends with a
// barrier, so that every thread sees the table.
template <typename T>
__device__ __forceinline__ void pull_sources(const nvshmemrs_coll_header &h, const Layout &L,
                                             const T *mine, size_t offset, const T **src) {
    for (int r = threadIdx.x; r < h.n; r += blockDim.x)
        src[r] = offset + (r == h.rank ? mine
                                       : reinterpret_cast<const T *>(
                                             direct_ptr(h, arrived_word(L, r), h.pes[r])));
    __syncthreads();
}

}  // namespace

#endif
