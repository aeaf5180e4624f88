// One-shot allreduce (NVSHMEMRS_ALGO_ONESHOT) over the receive slots. coll/launch.cuh declares its
// launcher; coll/allreduce.cu dispatches to it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include "core/nvshmem_device.cuh"

#include "coll/launch.cuh"
#include "prims/chunks.cuh"
#include "prims/dispatch.cuh"
#include "prims/pdl.cuh"
#include "prims/put_signal.cuh"
#include "prims/reduce.cuh"
#include "prims/step.cuh"
#include "prims/waiter.cuh"

namespace {

// One-shot: push the own part of the input into slot [rank] of every peer, wait for all, reduce
// the part over ranks 0..n-1 (same order everywhere: bit-identical results). In place, the
// reduction overwrites the puts' source: where a peer is reached through NVSHMEM (across
// nodes) the put must have read it first, so it blocks; direct stores are done on return.
template <typename T, int OP>
__global__ void oneshot_kernel(nvshmemrs_allreduce_args a) {
    const nvshmemrs_coll_header &h = a.hdr;
    wait_for_previous_kernel();
    const int algo = NVSHMEMRS_ALGO_ONESHOT;
    if (block_broken(h)) return;
    const Waiter w(h, NVSHMEMRS_WAIT_OP_ALLREDUCE, algo);
    const Step s = begin_step(h.state);
    const Layout L{h, algo, s.parity};
    const T *input = static_cast<const T *>(h.input);
    size_t b, e;
    part_of<T>(h.count, gridDim.x, blockIdx.x, &b, &e);
    block_put_signal_all(
        h,
        [&](int, char **dst, const char **src, size_t *bytes) {
            *dst = L.slot(h.rank) + b * sizeof(T);
            *src = reinterpret_cast<const char *>(input + b);
            *bytes = (e - b) * sizeof(T);
        },
        L.counter(0, h.rank), s.value, h.input == h.output);
    if (!block_wait_others(w, h, [&](int r) { return L.counter(0, r); }, s.value)) return;
    auto src = [&](int r) -> const T * {
        return r == h.rank ? input : reinterpret_cast<const T *>(L.slot(r));
    };
    block_reduce<T, OP>(src, h.n, static_cast<T *>(h.output), b, e, true, h.n);
    end_step(h);
}

// by_dtype's functor: this algorithm's kernel for one dtype and op.
NVSHMEMRS_ALLREDUCE_LAUNCHER(Launch, oneshot_kernel);

}  // namespace

cudaError_t nvshmemrs::allreduce_oneshot(int dtype, int op, const nvshmemrs_allreduce_args &args,
                                         int blocks, int threads, cudaStream_t stream) {
    return by_dtype(dtype, op, Launch{args, blocks, threads, stream});
}
