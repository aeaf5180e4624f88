// Pipeline channel kernels launched by src/pipeline/channel.rs; pipeline/channel.h documents the
// memory layout and counters. Data moves like core/device_put.cu's put-with-signal: direct
// stores into the peer's mapping where nvshmem_ptr gives one (NVLink/PCIe), NVSHMEM puts
// otherwise (other nodes). Every wait has a deadline (prims/deadline.cuh): a dead peer ends the
// kernel, not the stream.
#include <cuda_runtime.h>
#include "core/nvshmem_device.cuh"

#include "pipeline/channel.h"
#include "prims/chunks.cuh"
#include "prims/pdl.cuh"
#include "prims/deadline.cuh"
#include "prims/fence.cuh"

namespace {

using Op = nvshmemrs_channel_op;

// Loads: the sender reads its source through the read-only path; the receiver reads slots that
// another GPU (or the NIC) wrote during this kernel, so through L2 only (never a stale L1 line).
template <bool FROM_PEER, typename V> __device__ __forceinline__ V load(const V *p) {
    return FROM_PEER ? __ldcg(p) : __ldg(p);
}

// The block copies `len` bytes with the widest accesses both pointers allow (any alignment:
// views of cudarc slices may start anywhere).
template <bool FROM_PEER, typename V>
__device__ __forceinline__ void block_copy_as(char *dst, const char *src, size_t len) {
    const V *s = reinterpret_cast<const V *>(src);
    V *d = reinterpret_cast<V *>(dst);
    const size_t n = len / sizeof(V), stride = blockDim.x;
    size_t i = threadIdx.x;
    // Four loads in flight per thread before the stores.
    for (; i + 3 * stride < n; i += 4 * stride) {
        V a = load<FROM_PEER>(s + i), b = load<FROM_PEER>(s + i + stride),
          c = load<FROM_PEER>(s + i + 2 * stride), e = load<FROM_PEER>(s + i + 3 * stride);
        d[i] = a;
        d[i + stride] = b;
        d[i + 2 * stride] = c;
        d[i + 3 * stride] = e;
    }
    for (; i < n; i += stride) d[i] = load<FROM_PEER>(s + i);
    const unsigned char *sb = reinterpret_cast<const unsigned char *>(src);
    unsigned char *db = reinterpret_cast<unsigned char *>(dst);
    for (size_t j = n * sizeof(V) + threadIdx.x; j < len; j += stride) db[j] = load<FROM_PEER>(sb + j);
}

template <bool FROM_PEER>
__device__ __forceinline__ void block_copy(char *dst, const char *src, size_t len) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src);
    if ((a & 15) == 0) {
        block_copy_as<FROM_PEER, uint4>(dst, src, len);
    } else if ((a & 3) == 0) {
        block_copy_as<FROM_PEER, unsigned int>(dst, src, len);
    } else if ((a & 1) == 0) {
        block_copy_as<FROM_PEER, unsigned short>(dst, src, len);
    } else {
        block_copy_as<FROM_PEER, unsigned char>(dst, src, len);
    }
}

// This block's share of `total` (blocks <= total, so every share is >= 1).
__device__ __forceinline__ uint64_t share_of(uint64_t total) {
    const uint64_t b = gridDim.x;
    return total / b + ((uint64_t)blockIdx.x < total % b ? 1 : 0);
}

__device__ __forceinline__ nvshmemrs_wait_site site_of(const Op &op, uint32_t code) {
    nvshmemrs_wait_site site;
    site.status = reinterpret_cast<nvshmemrs_wait_status *>(op.status);
    site.broken = reinterpret_cast<uint64_t *>(op.broken);
    site.op = code;
    site.peer = op.peer;
    site.index = op.slot_index;
    site.seq = op.seq;
    site.consistency = true;
    return site;
}

// Thread 0 waits until *counter >= op.target (if there is a target) and tells the block.
// Returns false when the wait failed or the channel is broken: the block must move nothing.
__device__ __forceinline__ bool block_wait(const Op &op, uint64_t counter, uint32_t code) {
    __shared__ int ok;
    if (threadIdx.x == 0) {
        const nvshmemrs_wait_site site = site_of(op, code);
        bool good;
        if (op.target == 0) {
            good = !nvshmemrs_is_broken(site);
        } else {
            good = nvshmemrs_wait_ge(reinterpret_cast<volatile uint64_t *>(counter), op.target,
                                     nvshmemrs_deadline_after(op.timeout_ns), site);
        }
        ok = good ? 1 : 0;
    }
    __syncthreads();
    return ok != 0;
}

__global__ void send_kernel(Op op) {
    wait_for_previous_kernel();
    // The credit says the receiver has finished reading the slot's previous message.
    if (!block_wait(op, op.credit, NVSHMEMRS_WAIT_OP_SEND)) return;

    char *slot = reinterpret_cast<char *>(op.slot);
    const char *src = reinterpret_cast<const char *>(op.data);
    uint64_t *full = reinterpret_cast<uint64_t *>(op.full);
    uint64_t *len_word = reinterpret_cast<uint64_t *>(op.len_word);
    size_t offset, len;
    chunk_of(op.bytes, gridDim.x, blockIdx.x, &offset, &len);
    // The data's shares sum to TOTAL - 1; the length word brings the last unit.
    const uint64_t share = share_of(NVSHMEMRS_CHANNEL_TOTAL - 1);

    char *peer_slot = (op.flags & NVSHMEMRS_CHANNEL_NO_DIRECT)
                          ? NULL
                          : static_cast<char *>(nvshmem_ptr(slot, op.peer));
    if (peer_slot != NULL) {
        const bool first = blockIdx.x == 0;
        if (first && threadIdx.x == 0) {
            *static_cast<volatile uint64_t *>(nvshmem_ptr(len_word, op.peer)) = op.len;
        }
        if (len > 0) block_copy<false>(peer_slot + offset, src + offset, len);
        // Every thread's stores (and the length word) reach the peer before the block's share:
        // the barrier, then one release at system scope by the signalling thread.
        __syncthreads();
        if (threadIdx.x == 0) {
            fence_acq_rel_sys();
            nvshmemx_signal_op(full, share + (first ? 1 : 0), NVSHMEM_SIGNAL_ADD, op.peer);
        }
        return;
    }

    // NVSHMEM's put. Off-node, the NIC can only read symmetric (registered) memory: a source
    // outside the heap goes through this PE's staging slot first.
    if (op.staging != 0 && len > 0 && nvshmem_ptr(src, nvshmem_my_pe()) == NULL) {
        char *staging = reinterpret_cast<char *>(op.staging);
        block_copy<false>(staging + offset, src + offset, len);
        __threadfence_system();
        __syncthreads();
        src = staging;
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        // The length word travels as a put-with-signal of its own (from a symmetric word, which
        // the slot's credit protects until the receiver has read it): its unit of the signal
        // cannot arrive before it, whatever order the transport delivers the blocks' puts in.
        uint64_t *out_len = reinterpret_cast<uint64_t *>(op.out_len);
        *reinterpret_cast<volatile uint64_t *>(out_len) = op.len;
        __threadfence_system();
        nvshmem_putmem_signal(len_word, out_len, sizeof(uint64_t), full, 1, NVSHMEM_SIGNAL_ADD,
                              op.peer);
    }
    if (len > 0) {
        // Blocking: when it returns the source has been read, so the caller may reuse it as soon
        // as the stream has passed this kernel (the signal still follows the data).
        nvshmemx_putmem_signal_block(slot + offset, src + offset, len, full, share,
                                     NVSHMEM_SIGNAL_ADD, op.peer);
    } else if (threadIdx.x == 0) {
        // An empty trailing chunk still owes its share.
        nvshmemx_signal_op(full, share, NVSHMEM_SIGNAL_ADD, op.peer);
    }
}

// Returns this block's share of the slot to the sender once every thread's reads are done: a
// release at system scope, since the sender that overwrites the slot may be another GPU.
__device__ __forceinline__ void block_credit(const Op &op, uint64_t share) {
    __syncthreads();
    if (threadIdx.x == 0) {
        fence_acq_rel_sys();
        nvshmemx_signal_op(reinterpret_cast<uint64_t *>(op.credit), share, NVSHMEM_SIGNAL_ADD,
                           op.peer);
    }
}

__global__ void recv_kernel(Op op) {
    wait_for_previous_kernel();
    if (!block_wait(op, op.full, NVSHMEMRS_WAIT_OP_RECV_INTO)) return;

    __shared__ int same_len;
    if (threadIdx.x == 0) {
        const uint64_t sent = *reinterpret_cast<volatile uint64_t *>(op.len_word);
        same_len = sent == op.len;
        if (sent != op.len && blockIdx.x == 0) {
            nvshmemrs_record_failure(site_of(op, NVSHMEMRS_WAIT_OP_RECV_INTO),
                                     NVSHMEMRS_FAIL_LENGTH, op.len_word, op.len, sent, 0);
        }
    }
    __syncthreads();
    if (same_len) {
        size_t offset, len;
        chunk_of(op.bytes, gridDim.x, blockIdx.x, &offset, &len);
        if (len > 0) {
            block_copy<true>(reinterpret_cast<char *>(op.data) + offset,
                             reinterpret_cast<const char *>(op.slot) + offset, len);
        }
    }
    // A mismatched message is dropped: its slot goes back too, so the sender is not left waiting.
    block_credit(op, share_of(NVSHMEMRS_CHANNEL_TOTAL));
}

__global__ void wait_kernel(Op op) {
    wait_for_previous_kernel();
    block_wait(op, op.full, NVSHMEMRS_WAIT_OP_RECV);
}

__global__ void release_kernel(Op op) {
    wait_for_previous_kernel();
    // The kernels before this one (the readers of the slot) have completed: hand it back.
    block_credit(op, NVSHMEMRS_CHANNEL_TOTAL);
}

int clamp(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

}  // namespace

extern "C" int nvshmemrs_channel_send(const nvshmemrs_channel_op *op, cudaStream_t stream) {
    Op o = *op;
    o.blocks = clamp(o.blocks, 1, NVSHMEMRS_CHANNEL_TOTAL - 1);
    return (int)launch_pdl(send_kernel, o.blocks, clamp(o.threads, 32, 1024), stream, o);
}

extern "C" int nvshmemrs_channel_recv(const nvshmemrs_channel_op *op, cudaStream_t stream) {
    Op o = *op;
    o.blocks = clamp(o.blocks, 1, NVSHMEMRS_CHANNEL_TOTAL);
    return (int)launch_pdl(recv_kernel, o.blocks, clamp(o.threads, 32, 1024), stream, o);
}

extern "C" int nvshmemrs_channel_wait(const nvshmemrs_channel_op *op, cudaStream_t stream) {
    return (int)launch_pdl(wait_kernel, 1, 32, stream, *op);
}

extern "C" int nvshmemrs_channel_release(const nvshmemrs_channel_op *op, cudaStream_t stream) {
    return (int)launch_pdl(release_kernel, 1, 32, stream, *op);
}

extern "C" int nvshmemrs_channel_total(void) { return NVSHMEMRS_CHANNEL_TOTAL; }

extern "C" size_t nvshmemrs_wait_status_size(void) { return sizeof(nvshmemrs_wait_status); }
