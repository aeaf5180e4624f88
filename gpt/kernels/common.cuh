// Shared helpers for the model kernels.
#pragma once
#include <cuda_runtime.h>

static inline __host__ __device__ int ceil_div(int a, int b) { return (a + b - 1) / b; }
