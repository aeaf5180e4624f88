// Causal multi-head self-attention helpers. The matmuls (q.k^T, att.v and their gradients) are
// cuBLAS strided-batched GEMMs issued from gpt/src/ops.rs; these kernels move data between the
// model layout [B, T, 3C] / [B, T, C] and the per-head layout [B, NH, T, hs], and do the masked
// softmax. The score scale 1/sqrt(hs) is the GEMM's alpha, so att = softmax(scaled scores).
#include "common.cuh"

// qkv [B, T, 3C] -> q, k, v each [B, NH, T, hs] (qkvr = q | k | v, each B*T*C).
// One thread per (b, h, t, d).
extern "C" __global__ void attention_permute(float* qkvr, const float* inp, int B, int T, int NH,
                                             int hs) {
    const size_t total = (size_t)B * NH * T * hs;
    size_t i = global_index();
    if (i >= total) return;
    const int d = (int)(i % hs);
    const int t = (int)((i / hs) % T);
    const int h = (int)((i / ((size_t)hs * T)) % NH);
    const int b = (int)(i / ((size_t)hs * T * NH));
    const int C = NH * hs;
    const size_t src = ((size_t)b * T + t) * 3 * C + (size_t)h * hs + d;
    qkvr[i] = inp[src];
    qkvr[total + i] = inp[src + C];
    qkvr[2 * total + i] = inp[src + 2 * C];
}

// Inverse of attention_permute: dq, dk, dv [B, NH, T, hs] -> dinp [B, T, 3C] (overwritten).
extern "C" __global__ void attention_unpermute_qkv(float* dinp, const float* dqkvr, int B, int T,
                                                   int NH, int hs) {
    const size_t total = (size_t)B * NH * T * hs;
    size_t i = global_index();
    if (i >= total) return;
    const int d = (int)(i % hs);
    const int t = (int)((i / hs) % T);
    const int h = (int)((i / ((size_t)hs * T)) % NH);
    const int b = (int)(i / ((size_t)hs * T * NH));
    const int C = NH * hs;
    const size_t dst = ((size_t)b * T + t) * 3 * C + (size_t)h * hs + d;
    dinp[dst] = dqkvr[i];
    dinp[dst + C] = dqkvr[total + i];
    dinp[dst + 2 * C] = dqkvr[2 * total + i];
}

// [B, T, C] -> [B, NH, T, hs] (the output gradient, into the per-head layout of the GEMMs).
extern "C" __global__ void attention_permute_heads(float* dst, const float* src, int B, int T,
                                                   int NH, int hs) {
    const size_t total = (size_t)B * NH * T * hs;
    size_t i = global_index();
    if (i >= total) return;
    const int d = (int)(i % hs);
    const int t = (int)((i / hs) % T);
    const int h = (int)((i / ((size_t)hs * T)) % NH);
    const int b = (int)(i / ((size_t)hs * T * NH));
    dst[i] = src[((size_t)b * T + t) * NH * hs + (size_t)h * hs + d];
}

// In place over att [B*NH*T rows, T]: row (b, h, t) becomes softmax of its scores over columns
// 0..t, and 0 in the masked columns t+1..T-1. One warp per row.
extern "C" __global__ void attention_softmax_forward(float* att, int rows, int T) {
    const int row = warp_row(), lane = threadIdx.x % 32;
    if (row >= rows) return;
    const int t = row % T;
    float* a = att + (size_t)row * T;
    float mx = -INFINITY;
    for (int j = lane; j <= t; j += 32) mx = fmaxf(mx, a[j]);
    mx = warp_max(mx);
    float s = 0.0f;
    for (int j = lane; j <= t; j += 32) {
        float e = expf(a[j] - mx);
        a[j] = e;  // each lane rereads only its own columns below
        s += e;
    }
    const float inv = 1.0f / warp_sum(s);
    for (int j = lane; j < T; j += 32) a[j] = j <= t ? a[j] * inv : 0.0f;
}

// In place over datt: dscores = att * (datt - sum_j att_j datt_j) over columns 0..t, 0 beyond
// (the masked scores get no gradient). One warp per row.
extern "C" __global__ void attention_softmax_backward(float* datt, const float* att, int rows,
                                                     int T) {
    const int row = warp_row(), lane = threadIdx.x % 32;
    if (row >= rows) return;
    const int t = row % T;
    const float* a = att + (size_t)row * T;
    float* da = datt + (size_t)row * T;
    float dot = 0.0f;
    for (int j = lane; j <= t; j += 32) dot += a[j] * da[j];
    dot = warp_sum(dot);
    for (int j = lane; j < T; j += 32) da[j] = j <= t ? a[j] * (da[j] - dot) : 0.0f;
}
