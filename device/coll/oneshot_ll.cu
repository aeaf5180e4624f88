// Low-latency one-shot allreduce (NVSHMEMRS_ALGO_ONESHOT_LL, see abi.h). coll/launch.cuh declares
// its launcher; coll/allreduce.cu dispatches to it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include "core/nvshmem_device.cuh"

#include "coll/launch.cuh"
#include "prims/dispatch.cuh"
#include "prims/ll.cuh"
#include "prims/ll_reduce.cuh"
#include "prims/pdl.cuh"
#include "prims/reduce.cuh"
#include "prims/step.cuh"
#include "prims/waiter.cuh"

namespace {

template <typename T, int OP>
__global__ void oneshot_ll_kernel(nvshmemrs_allreduce_args a) {
    const nvshmemrs_coll_header &h = a.hdr;
    __shared__ char *base[NVSHMEMRS_ALLREDUCE_LL_MAX_PES];
    ll_peer_bases(h, base);
    wait_for_previous_kernel();
    const char *in = static_cast<const char *>(h.input);
    char *out = static_cast<char *>(h.output);
    const size_t bytes = h.count * sizeof(T), lines = (bytes + 7) / 8;
    // Block b owns lines [l0, l1); one line per thread per pass.
    size_t per = (lines + gridDim.x - 1) / gridDim.x;
    size_t l0 = per * blockIdx.x < lines ? per * blockIdx.x : lines;
    size_t l1 = l0 + per < lines ? l0 + per : lines;
    // The state, the broken flag and this thread's first line of the input, read together: one
    // round trip for all three.
    const uint64_t steps = h.state->steps;
    const size_t i0 = l0 + threadIdx.x;
    const uint2 v0 = i0 < l1 ? load8(in, i0, bytes) : make_uint2(0, 0);
    if (block_broken(h)) return;
    const Waiter w(h, NVSHMEMRS_WAIT_OP_ALLREDUCE, NVSHMEMRS_ALGO_ONESHOT_LL);
    const int parity = (int)(steps & 1);
    const uint32_t flag = ll_flag(steps);
    // Slot [rank] on every member (block_broken's barrier published the bases).
    __shared__ uint4 *dst[NVSHMEMRS_ALLREDUCE_LL_MAX_PES];
    ll_peer_slots(h, base, parity, dst);
    for (size_t i = i0; i < l1; i += blockDim.x) {
        const uint2 v = i == i0 ? v0 : load8(in, i, bytes);
        for (int k = 1, r = h.rank + 1; k < h.n; ++k, ++r) {
            if (r == h.n) r = 0;
            st_line(dst[r] + i, v.x, v.y, flag);
        }
    }
    const bool ok = ll_reduce_lines<T, OP>(
        h, parity, l0, l1, flag, w, [&](size_t i) { return load8(in, i, bytes); },
        [&](size_t i, uint2 res) { store8(out, i, bytes, res); });
    if (__syncthreads_or(!ok)) return;
    end_step(h);
}

// by_dtype's functor: this algorithm's kernel for one dtype and op.
NVSHMEMRS_ALLREDUCE_LAUNCHER(Launch, oneshot_ll_kernel);

}  // namespace

cudaError_t nvshmemrs::allreduce_oneshot_ll(int dtype, int op, const nvshmemrs_allreduce_args &args,
                                            int blocks, int threads, cudaStream_t stream) {
    if (args.hdr.n > NVSHMEMRS_ALLREDUCE_LL_MAX_PES) return cudaErrorInvalidValue;
    return by_dtype(dtype, op, Launch{args, blocks, threads, stream});
}
