// LayerNorm over the last dimension (eps 1e-5), llm.c/GPT-2 semantics:
// out = (x - mean) * rstd * w + b, rstd = 1 / sqrt(var + eps), var the biased variance.
#include "common.cuh"

#define LN_EPS 1e-5f

// One warp per row; mean and rstd are saved for the backward pass. Two passes over the row
// (mean, then centred variance) rather than E[x^2] - E[x]^2, which cancels badly.
extern "C" __global__ void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                             const float* w, const float* b, int N, int C) {
    const int row = warp_row(), lane = threadIdx.x % 32;
    if (row >= N) return;  // whole warp leaves together
    const float* x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += x[c];
    const float m = warp_sum(s) / C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = x[c] - m;
        v += d * d;
    }
    const float r = rsqrtf(warp_sum(v) / C + LN_EPS);
    float* o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32) o[c] = (x[c] - m) * r * w[c] + b[c];
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

// dinp += (w*dout - mean(w*dout) - norm * mean(w*dout*norm)) * rstd, one warp per row.
extern "C" __global__ void layernorm_backward_input(float* dinp, const float* dout,
                                                    const float* inp, const float* w,
                                                    const float* mean, const float* rstd, int N,
                                                    int C) {
    const int row = warp_row(), lane = threadIdx.x % 32;
    if (row >= N) return;
    const size_t off = (size_t)row * C;
    const float m = mean[row], r = rstd[row];
    float sum_dn = 0.0f, sum_dn_n = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float norm = (inp[off + c] - m) * r;
        float dn = w[c] * dout[off + c];
        sum_dn += dn;
        sum_dn_n += dn * norm;
    }
    const float mean_dn = warp_sum(sum_dn) / C;
    const float mean_dn_n = warp_sum(sum_dn_n) / C;
    for (int c = lane; c < C; c += 32) {
        float norm = (inp[off + c] - m) * r;
        float dn = w[c] * dout[off + c];
        dinp[off + c] += (dn - mean_dn - norm * mean_dn_n) * r;
    }
}

// First stage of dw += sum_rows dout*norm and db += sum_rows dout, without atomics.
// Block (32, 8): 32 consecutive columns (coalesced) x 8 row lanes; grid (ceil(C/32), R), block y
// covering rows [y*rows_per, (y+1)*rows_per). Writes partial[y, c] (dw) and partial[R + y, c]
// (db); reduce.cu's sum_partials_accumulate adds the R partials per column in order.
extern "C" __global__ void layernorm_backward_params_partial(float* partial, const float* dout,
                                                             const float* inp, const float* mean,
                                                             const float* rstd, int N, int C,
                                                             int rows_per) {
    __shared__ float sdw[8][33];
    __shared__ float sdb[8][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c = blockIdx.x * 32 + tx;
    const int r0 = blockIdx.y * rows_per;
    const int r1 = min(N, r0 + rows_per);
    float dw = 0.0f, db = 0.0f;
    if (c < C) {
        for (int i = r0 + ty; i < r1; i += 8) {
            size_t k = (size_t)i * C + c;
            float d = dout[k];
            db += d;
            dw += d * (inp[k] - mean[i]) * rstd[i];
        }
    }
    sdw[ty][tx] = dw;
    sdb[ty][tx] = db;
    __syncthreads();
    if (ty == 0 && c < C) {
        float sw = 0.0f, sb = 0.0f;
        for (int y = 0; y < 8; y++) {
            sw += sdw[y][tx];
            sb += sdb[y][tx];
        }
        const int R = gridDim.y;
        partial[(size_t)blockIdx.y * C + c] = sw;
        partial[(size_t)(R + blockIdx.y) * C + c] = sb;
    }
}
