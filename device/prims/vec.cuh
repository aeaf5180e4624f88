// 16-byte stores as one vector instruction. nvcc splits a uint4 that was assembled in registers
// (element by element, or picked per peer from an array) into four 4-byte stores; the direct
// two-shots measured about 2% faster at large messages with one store16 instead.
#ifndef NVSHMEM_RS_VEC_CUH
#define NVSHMEM_RS_VEC_CUH

#include <stdint.h>

// *p = v with one st.v4 (generic address: this GPU's memory or a peer's NVLink mapping). p is
// 16-byte aligned.
static __device__ __forceinline__ void store16(void *p, uint4 v) {
    asm volatile("st.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
}

#endif
