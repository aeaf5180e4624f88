// Token + position embedding. out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :].
#include "common.cuh"

// One thread per output element.
extern "C" __global__ void encoder_forward(float* out, const int* tokens, const float* wte,
                                           const float* wpe, int N, int T, int C) {
    size_t i = global_index();
    if (i >= (size_t)N * C) return;
    int n = (int)(i / C), c = (int)(i % C);
    int t = n % T;
    out[i] = wte[(size_t)tokens[n] * C + c] + wpe[(size_t)t * C + c];
}

// dwpe[t, c] += sum over b of dout[b, t, c], one thread per (t, c), b in increasing order: no
// atomics, so the result is the same every run (and equals the CPU reference bit for bit).
extern "C" __global__ void encoder_backward_wpe(float* dwpe, const float* dout, int B, int T,
                                                int C) {
    size_t i = global_index();
    if (i >= (size_t)T * C) return;
    float acc = dwpe[i];
    for (int b = 0; b < B; b++) acc += dout[(size_t)b * T * C + i];
    dwpe[i] = acc;
}

// dwte[tokens[n], :] += dout[n, :] without atomics. Block n checks whether an earlier position
// holds the same token; if so that earlier block owns the row and this one exits. The owner
// (the token's first position) adds the rows of all its positions in increasing order, so every
// row of dwte is written by exactly one block in a fixed order: deterministic, and the same
// order as the CPU reference. Cost is O(N) token reads per block (cached), small next to the
// matmuls for the batch sizes this trainer uses. blockDim.x is a multiple of 32, at most 1024.
extern "C" __global__ void encoder_backward_wte(float* dwte, const float* dout, const int* tokens,
                                                int N, int C) {
    __shared__ int list[1024];
    __shared__ int warp_count[32];
    const int n = blockIdx.x;
    const int tok = tokens[n];
    for (int base = 0; base < n; base += blockDim.x) {
        int m = base + threadIdx.x;
        bool dup = m < n && tokens[m] == tok;
        if (__syncthreads_or(dup)) return;  // uniform across the block
    }
    float* row = dwte + (size_t)tok * C;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    for (int base = n; base < N; base += blockDim.x) {
        int m = base + threadIdx.x;
        bool hit = m < N && tokens[m] == tok;
        unsigned mask = __ballot_sync(FULL_MASK, hit);
        if (lane == 0) warp_count[warp] = __popc(mask);
        __syncthreads();
        // Compact this chunk's matching positions into list[], keeping their order.
        int offset = 0, total = 0;
        for (int w = 0; w < nwarps; w++) {
            int cnt = warp_count[w];
            if (w < warp) offset += cnt;
            total += cnt;
        }
        if (hit) list[offset + __popc(mask & ((1u << lane) - 1u))] = m;
        __syncthreads();
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float acc = row[c];
            // Unrolled so the independent loads overlap; the adds stay in order.
#pragma unroll 8
            for (int j = 0; j < total; j++) acc += dout[(size_t)list[j] * C + c];
            row[c] = acc;
        }
        __syncthreads();  // list[] and warp_count[] are reused by the next chunk
    }
}
