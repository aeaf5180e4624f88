// The exchange of a list of transfers (coll/exchange.h): grouped send/recv, and alltoallv and
// allgatherv with their counts on the host; the launches that may take low-latency lines for
// their small pairs (coll/exchange.cuh), as only here do both ends know each size before the
// launch.
#include <cuda_runtime.h>

#include "coll/exchange.cuh"
#include "coll/exchange.h"

namespace {

// ops[0 .. n_send) are the sends, the n_recv after them the receives.
struct ListSrc {
    static constexpr bool UNIQUE = false;
    const nvshmemrs_exchange_args &a;
    __device__ static Xfer of(const nvshmemrs_transfer &t) {
        return Xfer{static_cast<char *>(t.addr), t.bytes, t.peer, t.dtype, t.nth, t.of,
                    t.lines == NVSHMEMRS_EXCHANGE_PAIR_LINES};
    }
    __device__ int n_send() const { return a.n_send; }
    __device__ Xfer send(int i) const { return of(a.ops[i]); }
    __device__ int n_recv() const { return a.n_recv; }
    __device__ Xfer recv(int i) const { return of(a.ops[a.n_send + i]); }
    // The host checked the list against the buffers.
    __device__ bool bad(uint64_t *, uint64_t *) const { return false; }
};

__global__ void exchange_list_kernel(nvshmemrs_exchange_args a) {
    const bool lines = a.lines != 0;
    exchange_step(a.hdr, ListSrc{a}, a.code, lines, lines && a.every_pair != 0,
                  lines && a.lines_only != 0);
}

}  // namespace

extern "C" int nvshmemrs_exchange_list(const nvshmemrs_exchange_args *args, int blocks,
                                       int threads, cudaStream_t stream) {
    if (!exchange_args_ok(args, blocks) || args->n_send < 0 || args->n_recv < 0 ||
        args->n_send + args->n_recv > NVSHMEMRS_EXCHANGE_MAX_OPS)
        return cudaErrorInvalidValue;
    for (int i = 0; i < args->n_send + args->n_recv; ++i) {
        const nvshmemrs_transfer &t = args->ops[i];
        if (t.peer < 0 || t.peer >= args->hdr.n || t.of < 1 ||
            t.of > NVSHMEMRS_EXCHANGE_MAX_PER_PEER || t.nth >= t.of ||
            t.bytes >> NVSHMEMRS_EXCHANGE_DTYPE_SHIFT != 0)
            return cudaErrorInvalidValue;
    }
    if (!exchange_lines_ok(args, args->n_send + args->n_recv) || !exchange_every_pair_ok(args) ||
        !exchange_lines_only_ok(args))
        return cudaErrorInvalidValue;
    return (int)launch_pdl(exchange_list_kernel, blocks, threads, stream, *args);
}
