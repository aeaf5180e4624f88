// Two-shot allreduce (NVSHMEMRS_ALGO_TWOSHOT) over the receive slots. coll/launch.cuh declares its
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

// Two-shot: chunk c belongs to rank c. Reduce-scatter: part b of chunk c goes to rank c's slot
// [rank]; wait; reduce the own chunk. All-gather: the reduced part goes to the same place of
// every peer's output; wait for theirs.
template <typename T, int OP>
__global__ void twoshot_kernel(nvshmemrs_allreduce_args a) {
    const nvshmemrs_coll_header &h = a.hdr;
    wait_for_previous_kernel();
    const int algo = NVSHMEMRS_ALGO_TWOSHOT;
    if (block_broken(h)) return;
    const Waiter w(h, NVSHMEMRS_WAIT_OP_ALLREDUCE, algo);
    const Step s = begin_step(h.state);
    const Layout L{h, algo, s.parity};
    const T *input = static_cast<const T *>(h.input);
    T *output = static_cast<T *>(h.output);
    const size_t chunk = round_elems<T>((h.count + h.n - 1) / h.n);
    auto chunk_range = [&](int c, size_t *c0, size_t *c1) {
        *c0 = chunk * c < h.count ? chunk * c : h.count;
        *c1 = *c0 + chunk < h.count ? *c0 + chunk : h.count;
    };
    block_put_signal_all(
        h,
        [&](int peer, char **dst, const char **src, size_t *bytes) {
            size_t c0, c1, b, e;
            chunk_range(peer, &c0, &c1);
            part_of<T>(c1 - c0, gridDim.x, blockIdx.x, &b, &e);
            *dst = L.slot(h.rank) + b * sizeof(T);
            *src = reinterpret_cast<const char *>(input + c0 + b);
            *bytes = (e - b) * sizeof(T);
        },
        L.counter(0, h.rank), s.value);
    if (!block_wait_others(w, h, [&](int r) { return L.counter(0, r); }, s.value)) return;
    size_t c0, c1, b, e;
    chunk_range(h.rank, &c0, &c1);
    part_of<T>(c1 - c0, gridDim.x, blockIdx.x, &b, &e);
    auto src = [&](int r) -> const T * {
        return r == h.rank ? input + c0 : reinterpret_cast<const T *>(L.slot(r));
    };
    block_reduce<T, OP>(src, h.n, output + c0, b, e, true, h.n);
    block_put_signal_all(
        h,
        [&](int, char **dst, const char **src, size_t *bytes) {
            *dst = reinterpret_cast<char *>(output + c0 + b);
            *src = reinterpret_cast<const char *>(output + c0 + b);
            *bytes = (e - b) * sizeof(T);
        },
        L.counter(1, h.rank), s.value);
    if (!block_wait_others(w, h, [&](int r) { return L.counter(1, r); }, s.value)) return;
    end_step(h);
}

// by_dtype's functor: this algorithm's kernel for one dtype and op.
NVSHMEMRS_ALLREDUCE_LAUNCHER(Launch, twoshot_kernel);

}  // namespace

cudaError_t nvshmemrs::allreduce_twoshot(int dtype, int op, const nvshmemrs_allreduce_args &args,
                                         int blocks, int threads, cudaStream_t stream) {
    return by_dtype(dtype, op, Launch{args, blocks, threads, stream});
}
