// Softmax + cross-entropy over logits [N, Vp] (first V columns real), fused with its gradient.
#include "common.cuh"

// Online softmax state (running max m, sum s of exp(x - m)) and its merge. -inf entries add
// nothing (guards keep exp(-inf - -inf) = NaN out).
struct MaxSum {
    float m, s;
};
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
    if (a.m == -INFINITY) return b;
    if (b.m == -INFINITY) return a;
    float m = fmaxf(a.m, b.m);
    return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

// One block per row (blockDim.x a multiple of 32, at most 1024). losses[row] = -log p[target]
// (NaN when the target is outside 0..V, so a bad token shows in the loss instead of reading out
// of bounds). If write_grad, the row is overwritten with dloss * (p - onehot(target)) in the V
// real columns and 0 in the padding.
extern "C" __global__ void fused_classifier(float* logits, float* losses, const int* targets, int V,
                                            int Vp, float dloss, int write_grad) {
    __shared__ float sm[32], ss[32];
    __shared__ float row_max, row_sum;
    float* x = logits + (size_t)blockIdx.x * Vp;
    MaxSum st = {-INFINITY, 0.0f};
    for (int j = threadIdx.x; j < V; j += blockDim.x) st = merge(st, MaxSum{x[j], 1.0f});
    // Butterfly within the warp: a commutative merge, so every lane holds the same state.
    for (int o = 16; o > 0; o >>= 1) {
        MaxSum other = {__shfl_xor_sync(FULL_MASK, st.m, o), __shfl_xor_sync(FULL_MASK, st.s, o)};
        st = merge(st, other);
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) {
        sm[warp] = st.m;
        ss[warp] = st.s;
    }
    __syncthreads();
    const int target = targets[blockIdx.x];
    const bool valid = target >= 0 && target < V;
    if (threadIdx.x == 0) {
        MaxSum all = {sm[0], ss[0]};
        for (int w = 1; w < (int)(blockDim.x / 32); w++) all = merge(all, MaxSum{sm[w], ss[w]});
        row_max = all.m;
        row_sum = all.s;
        // -log(exp(x_t - max) / sum) = log(sum) - (x_t - max); read before any thread overwrites.
        losses[blockIdx.x] = valid ? logf(all.s) - (x[target] - all.m) : NAN;
    }
    __syncthreads();
    if (!write_grad) return;
    const float mx = row_max, inv = 1.0f / row_sum;
    for (int j = threadIdx.x; j < Vp; j += blockDim.x) {
        float g = 0.0f;
        if (j < V) {
            float p = expf(x[j] - mx) * inv;
            g = dloss * (p - (j == target ? 1.0f : 0.0f));
        }
        x[j] = g;
    }
}
