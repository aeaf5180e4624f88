// Barrier and stream signal wait with deadlines; core/barrier.h has the protocol.
#include <cuda_runtime.h>
#include "core/nvshmem_device.cuh"

#include "core/barrier.h"
#include "prims/deadline.cuh"

namespace {

__device__ nvshmemrs_wait_site site_of(uint64_t *state, void *status, uint32_t op, int peer,
                                       uint64_t index, uint64_t seq) {
    nvshmemrs_wait_site s;
    s.status = static_cast<nvshmemrs_wait_status *>(status);
    s.broken = &state[1];
    s.op = op;
    s.peer = peer;
    s.index = index;
    s.seq = seq;
    s.consistency = true;
    return s;
}

// One block; thread t signals and waits for PEs t, t + blockDim.x, ...
// state[0] counts the barriers taken on this PE. Each kernel takes its number with an atomic
// increment as it starts (not read at start and written at the end): two barriers running at
// once on two streams would otherwise both take the same number while adding two arrivals on
// every peer, and every later barrier would pass one round early.
__global__ void barrier_kernel(nvshmemrs_barrier_args a) {
    if (__syncthreads_or(threadIdx.x == 0 && *(volatile uint64_t *)&a.state[1] != 0)) return;
    const int me = nvshmem_my_pe(), n = nvshmem_n_pes();
    __shared__ uint64_t taken;
    if (threadIdx.x == 0)
        taken = atomicAdd(reinterpret_cast<unsigned long long *>(&a.state[0]), 1ULL) + 1;
    __syncthreads();
    const uint64_t epoch = taken;
    const uint64_t deadline = nvshmemrs_deadline_after(a.timeout_ns);
    if (a.quiet && threadIdx.x == 0) nvshmem_quiet();
    __syncthreads();
    for (int q = threadIdx.x; q < n; q += blockDim.x)
        if (q != me) nvshmemx_signal_op(&a.arrivals[me], 1, NVSHMEM_SIGNAL_ADD, q);
    bool ok = true;
    for (int q = threadIdx.x; q < n && ok; q += blockDim.x) {
        if (q == me) continue;
        ok = nvshmemrs_wait_ge(reinterpret_cast<volatile uint64_t *>(&a.arrivals[q]), epoch,
                               deadline,
                               site_of(a.state, a.wait_status, NVSHMEMRS_WAIT_OP_BARRIER, q,
                                       (uint64_t)q, epoch));
    }
}

__device__ bool holds(int cmp, uint64_t v, uint64_t value) {
    switch (cmp) {
    case NVSHMEM_CMP_EQ: return v == value;
    case NVSHMEM_CMP_NE: return v != value;
    case NVSHMEM_CMP_GT: return v > value;
    case NVSHMEM_CMP_GE: return v >= value;
    case NVSHMEM_CMP_LT: return v < value;
    default: return v <= value;  // NVSHMEM_CMP_LE (the launcher admits no other)
    }
}

__global__ void signal_wait_kernel(uint64_t *signal, int cmp, uint64_t value, int peer,
                                   uint64_t *state, void *status, uint64_t timeout_ns) {
    if (*(volatile uint64_t *)&state[1] != 0) return;
    const uint64_t start = nvshmemrs_globaltimer();
    const uint64_t deadline = nvshmemrs_deadline_after(timeout_ns);
    volatile uint64_t *sig = signal;
    for (uint32_t spin = 1;; ++spin) {
        uint64_t v = *sig;
        if (holds(cmp, v, value)) break;
        if ((spin & 255) == 0) {
            uint64_t now = nvshmemrs_globaltimer();
            if (*(volatile uint64_t *)&state[1] != 0) return;
            if (now >= deadline) {
                nvshmemrs_record_failure(
                    site_of(state, status, NVSHMEMRS_WAIT_OP_SIGNAL_WAIT, peer, (uint64_t)cmp, 0),
                    NVSHMEMRS_FAIL_TIMEOUT, (uint64_t)(uintptr_t)signal, value, v, now - start);
                return;
            }
            if (now - start > 1000000) __nanosleep(1000);
        }
    }
    // Later work on the stream sees what the signalling PE wrote before its signal.
    nvshmemrs_after_wait(sig);
}

}  // namespace

extern "C" int nvshmemrs_barrier(nvshmemrs_barrier_args args, cudaStream_t stream) {
    barrier_kernel<<<1, 32, 0, stream>>>(args);
    return (int)cudaGetLastError();
}

extern "C" int nvshmemrs_signal_wait_on_stream(uint64_t *signal, int cmp, uint64_t value,
                                               int peer, uint64_t *state, void *wait_status,
                                               uint64_t timeout_ns, cudaStream_t stream) {
    switch (cmp) {
    case NVSHMEM_CMP_EQ: case NVSHMEM_CMP_NE: case NVSHMEM_CMP_GT:
    case NVSHMEM_CMP_GE: case NVSHMEM_CMP_LT: case NVSHMEM_CMP_LE: break;
    default: return (int)cudaErrorInvalidValue;
    }
    signal_wait_kernel<<<1, 1, 0, stream>>>(signal, cmp, value, peer, state, wait_status,
                                            timeout_ns);
    return (int)cudaGetLastError();
}
