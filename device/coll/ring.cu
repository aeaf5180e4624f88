// Ring allreduce (NVSHMEMRS_ALGO_RING) over the receive slots. coll/launch.cuh declares its
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

// Ring: n chunks. Reduce-scatter step k (0..n-2): send the partial of chunk (rank - k) to the
// next rank's slot [k] (step 0 sends the own input), receive chunk (rank - k - 1) from the
// previous rank and fold the own input into it; after n-1 steps chunk (rank + 1) is complete.
// All-gather step k: forward chunk (rank + 1 - k) into the next rank's output. Each rank only
// talks to its neighbours, so the traffic per link stays 2(n-1)/n of the message.
template <typename T, int OP>
__global__ void ring_kernel(nvshmemrs_allreduce_args a) {
    const nvshmemrs_coll_header &h = a.hdr;
    wait_for_previous_kernel();
    const int algo = NVSHMEMRS_ALGO_RING;
    if (block_broken(h)) return;
    const Waiter w(h, NVSHMEMRS_WAIT_OP_ALLREDUCE, algo);
    const Step s = begin_step(h.state);
    const Layout L{h, algo, s.parity};
    const T *input = static_cast<const T *>(h.input);
    T *output = static_cast<T *>(h.output);
    const int n = h.n, next = h.pes[(h.rank + 1) % n],
              prev = h.pes[(h.rank + n - 1) % n];
    const size_t chunk = round_elems<T>((h.count + n - 1) / n);
    // Part b of chunk c (absolute element range).
    auto part = [&](int c, size_t *pb, size_t *pe) {
        c = ((c % n) + n) % n;
        size_t c0 = chunk * c < h.count ? chunk * c : h.count;
        size_t c1 = c0 + chunk < h.count ? c0 + chunk : h.count;
        part_of<T>(c1 - c0, gridDim.x, blockIdx.x, pb, pe);
        *pb += c0;
        *pe += c0;
    };
    if (n == 1) {
        size_t b, e;
        part(0, &b, &e);
        auto own = [&](int) { return input; };
        block_reduce<T, OP>(own, 1, output, b, e, true, 1);
    }
    for (int k = 0; k + 1 < n; ++k) {
        size_t b, e;
        part(h.rank - k, &b, &e);
        const T *from = k == 0 ? input : output;
        // Slot k holds chunk-sized data at offset 0: the part goes to its offset in the chunk.
        size_t off = (b - (size_t)(((h.rank - k) % n + n) % n) * chunk) * sizeof(T);
        block_put_signal(h, L.slot(k) + off, reinterpret_cast<const char *>(from + b),
                         (e - b) * sizeof(T), L.counter(0, k), s.value, next);
        if (!block_wait_one(w, L.counter(0, k), s.value, prev)) return;
        int c = ((h.rank - k - 1) % n + n) % n;
        part(c, &b, &e);
        const T *recv = reinterpret_cast<const T *>(L.slot(k)) - (size_t)c * chunk;
        auto src = [&](int i) { return i == 0 ? recv : input; };
        block_reduce<T, OP>(src, 2, output, b, e, k + 2 == n, n);
    }
    for (int k = 0; k + 1 < n; ++k) {
        size_t b, e;
        part(h.rank + 1 - k, &b, &e);
        block_put_signal(h, reinterpret_cast<char *>(output + b),
                         reinterpret_cast<const char *>(output + b), (e - b) * sizeof(T),
                         L.counter(1, k), s.value, next);
        if (!block_wait_one(w, L.counter(1, k), s.value, prev)) return;
    }
    end_step(h);
}

// by_dtype's functor: this algorithm's kernel for one dtype and op.
NVSHMEMRS_ALLREDUCE_LAUNCHER(Launch, ring_kernel);

}  // namespace

cudaError_t nvshmemrs::allreduce_ring(int dtype, int op, const nvshmemrs_allreduce_args &args,
                                      int blocks, int threads, cudaStream_t stream) {
    return by_dtype(dtype, op, Launch{args, blocks, threads, stream});
}
