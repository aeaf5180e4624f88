// Rungs of the allreduce cost probe (nvsh/src/bench/probe.rs); bench/probe.h says what each does.
// They use the one-shot's own primitives (prims/ll.cuh, step.cuh, pdl.cuh), so that a rung
// differs from the next one by what it adds, not by how it is written.
#include <cuda_runtime.h>
#include "core/nvshmem_device.cuh"

#include "bench/probe.h"
#include "prims/deadline.cuh"
#include "prims/ll.cuh"
#include "prims/pdl.cuh"
#include "prims/step.cuh"

namespace {

// Sources polled together, as the one-shot's reduction does (prims/ll_reduce.cuh).
constexpr int PROBE_GROUP = 8;

__device__ __forceinline__ uint32_t probe_word(int pe, size_t j) {
    return (uint32_t)(pe + 1) * NVSHMEMRS_PROBE_WORD_A ^ (uint32_t)j * NVSHMEMRS_PROBE_WORD_B;
}

// What line i from PE `src` must carry: its payload words, or with flags only the source PE.
__device__ __forceinline__ uint2 probe_expected(int src, size_t i, bool flags_only) {
    if (flags_only) return make_uint2((uint32_t)src, ~(uint32_t)src);
    return make_uint2(probe_word(src, 2 * i), probe_word(src, 2 * i + 1));
}

// Line i of the slots (`mine`: slot 0 of this launch's parity) of sources r0 + j for each bit j of
// `pending`, polled together until each carries `flag` in both halves, as ld_pending does; each
// payload is checked and the line zeroed once read. False when the timeout passed (recorded, and
// the state marked broken) or the state broke meanwhile.
__device__ bool probe_poll(nvshmemrs_probe_state *st, uint4 *mine, size_t slot_lines, size_t i,
                           int r0, uint32_t pending, uint32_t flag, bool flags_only,
                           uint64_t timeout_ns) {
    uint64_t start = 0;
    for (uint32_t spin = 1; pending != 0; ++spin) {
        uint4 v[PROBE_GROUP];
#pragma unroll
        for (int j = 0; j < PROBE_GROUP; ++j)
            if (pending >> j & 1) v[j] = ld_line_once(mine + (size_t)(r0 + j) * slot_lines + i);
#pragma unroll
        for (int j = 0; j < PROBE_GROUP; ++j) {
            if (!(pending >> j & 1) || v[j].y != flag || v[j].w != flag) continue;
            const uint2 want = probe_expected(r0 + j, i, flags_only);
            if (v[j].x != want.x || v[j].z != want.y)
                atomicAdd((unsigned long long *)&st->wrong, 1ull);
            mine[(size_t)(r0 + j) * slot_lines + i] = make_uint4(0, 0, 0, 0);
            pending &= ~(1u << j);
        }
        if (pending == 0 || (spin & 255) != 0) continue;
        if (*(volatile uint64_t *)&st->step.broken != 0) return false;
        const uint64_t now = nvshmemrs_globaltimer();
        if (start == 0) start = now;
        if (now - start >= timeout_ns) {
            atomicAdd((unsigned long long *)&st->timeouts, (unsigned long long)__popc(pending));
            atomicExch((unsigned long long *)&st->step.broken, 1ull);
            return false;
        }
    }
    return true;
}

__global__ void probe_empty_kernel() { wait_for_previous_kernel(); }

// The one-shot (coll/oneshot_ll.cu) without its reduction: the same state read, peer table,
// stores and polls, with a check in place of the sum.
__global__ void probe_lines_kernel(nvshmemrs_probe_state *st, uint4 *slots, size_t slot_lines,
                                   const char *input, size_t bytes, int me, int n,
                                   uint64_t timeout_ns) {
    wait_for_previous_kernel();
    const uint64_t steps = st->step.steps;
    if (__syncthreads_or(threadIdx.x == 0 && *(volatile uint64_t *)&st->step.broken != 0)) return;
    const int parity = (int)(steps & 1);
    const uint32_t flag = ll_flag(steps);
    const bool flags_only = bytes == 0;
    const size_t lines = flags_only ? 1 : bytes / 8;
    uint4 *mine = slots + (size_t)parity * n * slot_lines;
    __shared__ uint4 *dst[NVSHMEMRS_PROBE_MAX_PES];
    for (int r = threadIdx.x; r < n; r += blockDim.x)
        dst[r] = r == me ? nullptr
                         : static_cast<uint4 *>(nvshmem_ptr(mine + (size_t)me * slot_lines, r));
    __syncthreads();
    size_t l0, l1;
    ll_block_lines(lines, &l0, &l1);
    for (size_t i = l0 + threadIdx.x; i < l1; i += blockDim.x) {
        const uint2 v = flags_only ? probe_expected(me, i, true) : load8(input, i, bytes);
        for (int k = 1, r = me + 1; k < n; ++k, ++r) {
            if (r == n) r = 0;
            st_line(dst[r] + i, v.x, v.y, flag);
        }
    }
    bool ok = true;
    for (size_t i = l0 + threadIdx.x; ok && i < l1; i += blockDim.x) {
        for (int r0 = 0; ok && r0 < n; r0 += PROBE_GROUP) {
            uint32_t pending = 0;
            for (int j = 0; j < PROBE_GROUP; ++j)
                if (r0 + j < n && r0 + j != me) pending |= 1u << j;
            ok = probe_poll(st, mine, slot_lines, i, r0, pending, flag, flags_only, timeout_ns);
        }
    }
    if (__syncthreads_or(!ok)) return;
    if (threadIdx.x == 0) advance_state(&st->step, [](nvshmemrs_allreduce_state *) {});
}

}  // namespace

extern "C" int nvshmemrs_probe_empty(int blocks, int threads, cudaStream_t stream) {
    if (blocks < 1 || threads < 1) return (int)cudaErrorInvalidValue;
    return (int)launch_pdl(probe_empty_kernel, blocks, threads, stream);
}

extern "C" int nvshmemrs_probe_lines(nvshmemrs_probe_state *state, void *slots, size_t slot_bytes,
                                     const void *input, size_t bytes, int my_pe, int n_pes,
                                     uint64_t timeout_ns, int blocks, int threads,
                                     cudaStream_t stream) {
    const size_t lines = bytes == 0 ? 1 : bytes / 8;
    if (n_pes < 1 || n_pes > NVSHMEMRS_PROBE_MAX_PES || my_pe < 0 || my_pe >= n_pes ||
        bytes % 8 != 0 || slot_bytes % 16 != 0 || lines * 16 > slot_bytes || blocks < 1 ||
        threads < 1 || (bytes > 0 && input == nullptr))
        return (int)cudaErrorInvalidValue;
    return (int)launch_pdl(probe_lines_kernel, blocks, threads, stream, state,
                           static_cast<uint4 *>(slots), slot_bytes / 16,
                           static_cast<const char *>(input), bytes, my_pe, n_pes, timeout_ns);
}
