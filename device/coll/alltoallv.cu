// Alltoallv with counts in device memory (coll/exchange.h): send_counts[r] elements from
// send_displs[r] of the input go to member r, which receives recv_counts[s] elements from each
// member s at recv_displs[s] of its output.
#include <cuda_runtime.h>

#include "coll/exchange.cuh"
#include "coll/exchange.h"

namespace {

struct AlltoallvSrc {
    static constexpr bool UNIQUE = true;
    const nvshmemrs_exchange_args &a;
    // counts[0..4]: send counts, send displacements, receive counts, receive displacements.
    __device__ Xfer part(char *base, int which, int r) const {
        return Xfer{base + a.counts[which + 1][r] * a.elem_bytes,
                    a.counts[which][r] * a.elem_bytes, r, a.dtype, 0, 1, false};
    }
    __device__ int n_send() const { return a.hdr.n; }
    __device__ Xfer send(int r) const {
        return part(static_cast<char *>(const_cast<void *>(a.hdr.input)), 0, r);
    }
    __device__ int n_recv() const { return a.hdr.n; }
    __device__ Xfer recv(int r) const { return part(static_cast<char *>(a.hdr.output), 2, r); }
    // A part past the input or the output (in elements).
    __device__ bool bad(uint64_t *limit, uint64_t *reach) const {
        for (int which = 0; which < 4; which += 2) {
            const uint64_t len = which == 0 ? a.in_count : a.hdr.count;
            for (int r = 0; r < a.hdr.n; ++r) {
                const uint64_t c = a.counts[which][r], d = a.counts[which + 1][r];
                if (c > len || d > len - c) {
                    *limit = len, *reach = c + d;
                    return true;
                }
            }
        }
        return false;
    }
};

__global__ void alltoallv_kernel(nvshmemrs_exchange_args a) {
    exchange_step(a.hdr, AlltoallvSrc{a}, a.code, false);
}

}  // namespace

extern "C" int nvshmemrs_alltoallv(const nvshmemrs_exchange_args *args, int blocks, int threads,
                                   cudaStream_t stream) {
    if (!exchange_args_ok(args, blocks) || args->mode != NVSHMEMRS_EXCHANGE_ALLTOALLV ||
        args->lines != 0 || args->elem_bytes <= 0)
        return cudaErrorInvalidValue;
    for (int i = 0; i < 4; ++i)
        if (args->counts[i] == NULL) return cudaErrorInvalidValue;
    return (int)launch_pdl(alltoallv_kernel, blocks, threads, stream, *args);
}
