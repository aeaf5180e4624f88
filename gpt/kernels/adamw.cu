// AdamW (decoupled weight decay), one thread per parameter:
//   g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//   p -= lr * ((m / bc1) / (sqrt(v / bc2) + eps) + wd * p), bc1 = 1 - b1^t, bc2 = 1 - b2^t
// (bias corrections computed on the host in double precision).
#include "common.cuh"

extern "C" __global__ void adamw(float* params, const float* grads, float* m, float* v,
                                 long long n, float lr, float beta1, float beta2, float bc1,
                                 float bc2, float eps, float weight_decay, float grad_scale) {
    size_t i = global_index();
    if (i >= (size_t)n) return;
    float g = grads[i] * grad_scale;
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float p = params[i];
    float mhat = mi / bc1;
    float vhat = vi / bc2;
    params[i] = p - lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * p);
}
