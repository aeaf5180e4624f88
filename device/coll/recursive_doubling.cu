// Recursive-doubling allreduce (NVSHMEMRS_ALGO_RECURSIVE_DOUBLING) over the receive slots.
// coll/launch.cuh declares its launcher; coll/allreduce.cu dispatches to it.
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

// Recursive doubling over the largest power of two p <= n: step k exchanges the whole partial
// with rank ^ 2^k and combines lower rank first (both partners compute the same bits). The
// r = n - p ranks above p first hand their input to rank - p (slot [log2 p]) and get the
// result back into their output at the end (phase 1 counter 0).
template <typename T, int OP>
__global__ void rd_kernel(nvshmemrs_allreduce_args a) {
    const nvshmemrs_coll_header &h = a.hdr;
    wait_for_previous_kernel();
    const int algo = NVSHMEMRS_ALGO_RECURSIVE_DOUBLING;
    if (block_broken(h)) return;
    const Waiter w(h, NVSHMEMRS_WAIT_OP_ALLREDUCE, algo);
    const Step s = begin_step(h.state);
    const Layout L{h, algo, s.parity};
    const T *input = static_cast<const T *>(h.input);
    T *output = static_cast<T *>(h.output);
    int steps = 0;
    while ((2 << steps) <= h.n) ++steps;
    const int p = 1 << steps, extra = h.n - p;
    size_t b, e;
    part_of<T>(h.count, gridDim.x, blockIdx.x, &b, &e);
    const size_t bytes = (e - b) * sizeof(T);
    if (h.rank >= p) {
        block_put_signal(h, L.slot(steps) + b * sizeof(T),
                         reinterpret_cast<const char *>(input + b), bytes, L.counter(0, steps),
                         s.value, h.pes[h.rank - p]);
        if (!block_wait_one(w, L.counter(1, 0), s.value, h.pes[h.rank - p])) return;
        end_step(h);
        return;
    }
    const T *acc = input;
    if (h.rank < extra) {
        if (!block_wait_one(w, L.counter(0, steps), s.value, h.pes[h.rank + p])) return;
        const T *theirs = reinterpret_cast<const T *>(L.slot(steps));
        auto src = [&](int i) { return i == 0 ? input : theirs; };
        block_reduce<T, OP>(src, 2, output, b, e, steps == 0, h.n);
        acc = output;
    }
    if (steps == 0 && h.rank >= extra) {
        auto own = [&](int) { return input; };
        block_reduce<T, OP>(own, 1, output, b, e, true, h.n);
    }
    for (int k = 0; k < steps; ++k) {
        int partner = h.rank ^ (1 << k);
        // acc is the output from step 1 on, overwritten right after the wait.
        block_put_signal(h, L.slot(k) + b * sizeof(T), reinterpret_cast<const char *>(acc + b),
                         bytes, L.counter(0, k), s.value, h.pes[partner], acc == output);
        if (!block_wait_one(w, L.counter(0, k), s.value, h.pes[partner])) return;
        const T *theirs = reinterpret_cast<const T *>(L.slot(k));
        const T *lo = h.rank < partner ? acc : theirs,
                *hi = h.rank < partner ? theirs : acc;
        auto src = [&](int i) { return i == 0 ? lo : hi; };
        block_reduce<T, OP>(src, 2, output, b, e, k + 1 == steps, h.n);
        acc = output;
    }
    if (h.rank < extra) {
        block_put_signal(h, reinterpret_cast<char *>(output + b),
                         reinterpret_cast<const char *>(output + b), bytes, L.counter(1, 0),
                         s.value, h.pes[h.rank + p]);
    }
    end_step(h);
}

// by_dtype's functor: this algorithm's kernel for one dtype and op.
NVSHMEMRS_ALLREDUCE_LAUNCHER(Launch, rd_kernel);

}  // namespace

cudaError_t nvshmemrs::allreduce_recursive_doubling(int dtype, int op,
                                                    const nvshmemrs_allreduce_args &args,
                                                    int blocks, int threads,
                                                    cudaStream_t stream) {
    return by_dtype(dtype, op, Launch{args, blocks, threads, stream});
}
