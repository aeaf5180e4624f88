// Release/acquire fence at system scope, for the handshakes of kernels that store into peers'
// memory over NVLink and then raise a flag there (or see a flag, then read what came with it).
// __threadfence_system() is the sequentially consistent fence.sc.sys, stronger than a
// release/acquire handshake needs.
#ifndef NVSHMEM_RS_FENCE_CUH
#define NVSHMEM_RS_FENCE_CUH

static __device__ __forceinline__ void fence_acq_rel_sys() {
    asm volatile("fence.acq_rel.sys;" ::: "memory");
}

// Acquire load at system scope: the caller's later loads and stores are ordered after it, so
// they see what the PE that stored the word (with release semantics) wrote before it.
static __device__ __forceinline__ uint64_t ld_acquire_sys(const volatile uint64_t *p) {
    uint64_t v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

#endif
