// Allgatherv with counts in device memory (coll/exchange.h): member r sends its input,
// counts[r] elements, to displacement displs[r] of every member's output, itself included
// (in place when its input is that block).
#include <cuda_runtime.h>

#include "coll/exchange.cuh"
#include "coll/exchange.h"

namespace {

struct AllgathervSrc {
    static constexpr bool UNIQUE = true;
    const nvshmemrs_exchange_args &a;
    __device__ uint64_t count(int r) const { return a.counts[0][r]; }
    __device__ uint64_t displ(int r) const { return a.counts[1][r]; }
    __device__ int n_send() const { return a.hdr.n; }
    __device__ Xfer send(int r) const {
        return Xfer{static_cast<char *>(const_cast<void *>(a.hdr.input)),
                    count(a.hdr.rank) * a.elem_bytes, r, a.dtype, 0, 1, false};
    }
    __device__ int n_recv() const { return a.hdr.n; }
    __device__ Xfer recv(int r) const {
        return Xfer{static_cast<char *>(a.hdr.output) + displ(r) * a.elem_bytes,
                    count(r) * a.elem_bytes, r, a.dtype, 0, 1, false};
    }
    // The own count past the input, or a block past the output (in elements).
    __device__ bool bad(uint64_t *limit, uint64_t *reach) const {
        if (count(a.hdr.rank) > a.in_count) {
            *limit = a.in_count, *reach = count(a.hdr.rank);
            return true;
        }
        for (int r = 0; r < a.hdr.n; ++r) {
            if (count(r) > a.hdr.count || displ(r) > a.hdr.count - count(r)) {
                *limit = a.hdr.count, *reach = displ(r) + count(r);
                return true;
            }
        }
        return false;
    }
};

__global__ void allgatherv_kernel(nvshmemrs_exchange_args a) {
    exchange_step(a.hdr, AllgathervSrc{a}, NVSHMEMRS_COLL_ALLGATHERV, false);
}

}  // namespace

extern "C" int nvshmemrs_allgatherv(const nvshmemrs_exchange_args *args, int blocks, int threads,
                                    cudaStream_t stream) {
    if (!exchange_args_ok(args, blocks) || args->mode != NVSHMEMRS_EXCHANGE_ALLGATHERV ||
        args->lines != 0 || args->elem_bytes <= 0 || args->counts[0] == NULL ||
        args->counts[1] == NULL)
        return cudaErrorInvalidValue;
    return (int)launch_pdl(allgatherv_kernel, blocks, threads, stream, *args);
}
