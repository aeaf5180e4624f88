// GELU, tanh approximation (GPT-2): gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#include "common.cuh"

#define GELU_K 0.7978845608028654f  // sqrt(2 / pi)
#define GELU_A 0.044715f

extern "C" __global__ void gelu_forward(float* out, const float* inp, long long n) {
    size_t i = global_index();
    if (i >= (size_t)n) return;
    float x = inp[i];
    out[i] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + GELU_A * x * x * x)));
}

// dinp = gelu'(x) * dout (overwrites dinp; dinp may alias dout).
extern "C" __global__ void gelu_backward(float* dinp, const float* inp, const float* dout,
                                         long long n) {
    size_t i = global_index();
    if (i >= (size_t)n) return;
    float x = inp[i];
    float th = tanhf(GELU_K * (x + GELU_A * x * x * x));
    float sech2 = 1.0f - th * th;
    float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_K * (1.0f + 3.0f * GELU_A * x * x);
    dinp[i] = grad * dout[i];
}
