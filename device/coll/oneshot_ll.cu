// Low-latency one-shot allreduce (NVSHMEMRS_ALGO_ONESHOT_LL, see abi.h). coll/launch.cuh declares
// its launcher; coll/allreduce.cu dispatches to it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include "core/nvshmem_device.cuh"

#include "coll/launch.cuh"
#include "prims/dispatch.cuh"
#include "prims/ll.cuh"
#include "prims/pdl.cuh"
#include "prims/reduce.cuh"
#include "prims/step.cuh"
#include "prims/waiter.cuh"

namespace {

// Lines polled together (ld_lines); larger teams go group after group.
constexpr int LL_GROUP = 8;

template <typename T, int OP>
__global__ void oneshot_ll_kernel(nvshmemrs_allreduce_args a) {
    const nvshmemrs_coll_header &h = a.hdr;
    wait_for_previous_kernel();
    // Read with the broken flag below: one round trip for both.
    const uint64_t steps = h.state->steps;
    if (block_broken(h)) return;
    const Waiter w(h, NVSHMEMRS_WAIT_OP_ALLREDUCE, NVSHMEMRS_ALGO_ONESHOT_LL);
    const int parity = (int)(steps & 1);
    const uint32_t flag = ll_flag(steps);
    const char *in = static_cast<const char *>(h.input);
    char *out = static_cast<char *>(h.output);
    const size_t bytes = h.count * sizeof(T), lines = (bytes + 7) / 8;
    // Slot [rank] on every member, looked up once for the block (nvshmem_ptr reads a table).
    __shared__ uint4 *dst[NVSHMEMRS_ALLREDUCE_LL_MAX_PES];
    for (int r = threadIdx.x; r < h.n; r += blockDim.x)
        dst[r] = static_cast<uint4 *>(nvshmem_ptr(ll_slot(h, parity, h.rank), h.pes[r]));
    __syncthreads();
    // Block b owns lines [l0, l1); one line per thread per pass.
    size_t per = (lines + gridDim.x - 1) / gridDim.x;
    size_t l0 = per * blockIdx.x < lines ? per * blockIdx.x : lines;
    size_t l1 = l0 + per < lines ? l0 + per : lines;
    for (size_t i = l0 + threadIdx.x; i < l1; i += blockDim.x) {
        uint2 v = load8(in, i, bytes);
        for (int k = 1, r = h.rank + 1; k < h.n; ++k, ++r) {
            if (r == h.n) r = 0;
            st_line(dst[r] + i, v.x, v.y, flag);
        }
    }
    using A = typename Acc<T>::type;
    constexpr int PER = 8 / sizeof(T) > 0 ? 8 / sizeof(T) : 1;
    bool ok = true;
    for (size_t i = l0 + threadIdx.x; i < l1 && ok; i += blockDim.x) {
        const uint2 mine = load8(in, i, bytes);
        A acc[PER];
        // Ranks in order 0..n-1 on every PE: bit-identical results.
        for (int r0 = 0; r0 < h.n && ok; r0 += LL_GROUP) {
            uint2 got[LL_GROUP];
            if (!ld_lines<LL_GROUP>(h, parity, i, r0, h.rank, flag, got, w)) {
                ok = false;
                break;
            }
#pragma unroll
            for (int j = 0; j < LL_GROUP; ++j) {
                if (r0 + j >= h.n) continue;
                const uint2 v = r0 + j == h.rank ? mine : got[j];
                const T *x = reinterpret_cast<const T *>(&v);
#pragma unroll
                for (int k = 0; k < PER; ++k) {
                    A val = to_acc<T>(x[k]);
                    acc[k] = r0 + j == 0 ? val : combine<T, OP>(acc[k], val);
                }
            }
        }
        if (!ok) break;
        uint2 res;
        T *r = reinterpret_cast<T *>(&res);
#pragma unroll
        for (int k = 0; k < PER; ++k) r[k] = finish<T, OP>(acc[k], h.n);
        store8(out, i, bytes, res);
    }
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
