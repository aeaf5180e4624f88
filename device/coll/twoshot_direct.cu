// Direct two-shot allreduce (NVSHMEMRS_ALGO_TWOSHOT_DIRECT, see abi.h): loads over the peer
// mappings, no slots. coll/launch.cuh declares its launcher; coll/allreduce.cu dispatches to it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include "core/nvshmem_device.cuh"

#include "coll/launch.cuh"
#include "prims/chunks.cuh"
#include "prims/direct.cuh"
#include "prims/dispatch.cuh"
#include "prims/pdl.cuh"
#include "prims/peers.cuh"
#include "prims/reduce.cuh"
#include "prims/step.cuh"
#include "prims/vec.cuh"
#include "prims/waiter.cuh"

namespace {

// Sources loaded before any is combined in the direct two-shot: one round trip over NVLink
// for a group instead of one per peer.
constexpr int DIRECT_GROUP = 8;

// Direct two-shot (NVSHMEMRS_ALGO_TWOSHOT_DIRECT, see abi.h). Loads bypass L1 (__ldcg): peers'
// inputs were written by other GPUs. Counters are set to the call number (not added to), so a
// call may use any grid up to NVSHMEMRS_ALLREDUCE_DIRECT_BLOCKS: a counter skipped by small calls
// still reads below the next call's number.
// No __launch_bounds__: it fits 512 threads without (at most 96 registers), and with it the
// kernel measured about 1 us slower per call at 4 PEs (17.1 against 18.3 us at 1 MiB).
template <typename T, int OP>
__global__ void twoshot_direct_kernel(nvshmemrs_allreduce_args a) {
    const nvshmemrs_coll_header &h = a.hdr;
    constexpr int DB = NVSHMEMRS_ALLREDUCE_DIRECT_BLOCKS;
    // The peer table first: it reads only the call's arguments and NVSHMEM's peer table, none of
    // which the previous kernel writes, so back to back it overlaps that kernel's tail and after
    // compute the misses no longer follow the state's (ll_peer_bases does the same).
    __shared__ const T *src[NVSHMEMRS_ALLREDUCE_DIRECT_MAX_PES];
    __shared__ T *dst[NVSHMEMRS_ALLREDUCE_DIRECT_MAX_PES];
    for (int r = threadIdx.x; r < h.n; r += blockDim.x) {
        src[r] = r == h.rank ? static_cast<const T *>(h.input)
                             : reinterpret_cast<const T *>(member_ptr(h, h.input, r));
        dst[r] = r == h.rank ? static_cast<T *>(h.output)
                             : reinterpret_cast<T *>(member_ptr(h, h.output, r));
    }
    wait_for_previous_kernel();
    const uint64_t call = h.state->direct_calls + 1;
    // Its barrier also publishes the table.
    if (block_broken(h)) return;
    const Waiter w(h, NVSHMEMRS_WAIT_OP_ALLREDUCE, NVSHMEMRS_ALGO_TWOSHOT_DIRECT);
    uint64_t *arrive = h.direct_flags, *done = h.direct_flags + (size_t)h.world * DB;
    // Entry: every member's input is ready. A peer that never arrived may still be writing its
    // input: touch nothing.
    if (!direct_handshake(w, h, arrive, call, false)) return;
    using A = typename Acc<T>::type;
    constexpr int V = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;
    const size_t chunk = round_elems<T>((h.count + h.n - 1) / h.n);
    size_t c0 = chunk * h.rank < h.count ? chunk * h.rank : h.count;
    size_t c1 = c0 + chunk < h.count ? c0 + chunk : h.count;
    size_t b, e;
    part_of<T>(c1 - c0, gridDim.x, blockIdx.x, &b, &e);
    b += c0;
    e += c0;
    const size_t nvec = (e - b) / V;
    for (size_t v = threadIdx.x; v < nvec; v += blockDim.x) {
        size_t i = b + v * V;
        const uint4 res = reduce_vec16<T, OP, DIRECT_GROUP>(h.n, [&](int r) {
            return __ldcg(reinterpret_cast<const uint4 *>(src[r] + i));
        });
        for (int k = 0, r = h.rank; k < h.n; ++k, ++r) {
            if (r == h.n) r = 0;
            store16(dst[r] + i, res);
        }
    }
    for (size_t i = b + nvec * V + threadIdx.x; i < e; i += blockDim.x) {
        A acc{};
        for (int r = 0; r < h.n; ++r) {
            A val = to_acc<T>(src[r][i]);
            acc = r == 0 ? val : combine<T, OP>(acc, val);
        }
        T res = finish<T, OP>(acc, h.n);
        for (int r = 0; r < h.n; ++r) dst[r][i] = res;
    }
    // Exit: this block's stores have landed everywhere, and its peers are done reading this
    // PE's input, before anyone returns.
    if (!direct_handshake(w, h, done, call, true)) return;
    if (threadIdx.x == 0)
        advance_state(h.state, [&](nvshmemrs_allreduce_state *st) { st->direct_calls = call; });
}

// by_dtype's functor: this algorithm's kernel for one dtype and op.
NVSHMEMRS_ALLREDUCE_LAUNCHER(Launch, twoshot_direct_kernel);

}  // namespace

cudaError_t nvshmemrs::allreduce_twoshot_direct(int dtype, int op,
                                                const nvshmemrs_allreduce_args &args, int blocks,
                                                int threads, cudaStream_t stream) {
    if (blocks < 1 || blocks > NVSHMEMRS_ALLREDUCE_DIRECT_BLOCKS ||
        args.hdr.n > NVSHMEMRS_ALLREDUCE_DIRECT_MAX_PES)
        return cudaErrorInvalidValue;
    return by_dtype(dtype, op, Launch{args, blocks, threads, stream});
}
