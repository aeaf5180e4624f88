// Waits with a deadline, for kernels that wait on signals written by other PEs. A wait that
// runs out of time records what it waited for in a status record in host-mapped memory (read by
// src/core/status.rs without synchronising) and returns false, so that the kernel can exit instead
// of hanging the stream when a peer is dead or never sends. The record (struct
// nvshmemrs_wait_status) and its codes are in abi.h.
#ifndef NVSHMEM_RS_DEADLINE_CUH
#define NVSHMEM_RS_DEADLINE_CUH

#include "core/nvshmem_device.cuh"
#include <stdint.h>

#include "abi.h"
#include "prims/fence.cuh"

// Where a wait happens, for the record.
struct nvshmemrs_wait_site {
    nvshmemrs_wait_status *status;  // host-mapped record
    uint64_t *broken;               // device word: non-zero once an operation of this object
                                    // failed; whoever sets it writes the record
    uint32_t op;
    int32_t peer;
    uint64_t index;
    uint64_t seq;
    // The wait runs NVSHMEM's consistency step once it saw its value (nvshmemrs_after_wait):
    // false only where every peer of the object is mapped, so nothing reaches this PE through
    // a proxy transport.
    bool consistency;
};

static __device__ __forceinline__ uint64_t nvshmemrs_globaltimer() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// The absolute deadline `timeout_ns` from now (saturating).
static __device__ __forceinline__ uint64_t nvshmemrs_deadline_after(uint64_t timeout_ns) {
    uint64_t now = nvshmemrs_globaltimer();
    return now + timeout_ns < now ? ~(uint64_t)0 : now + timeout_ns;
}

// True once some wait of the site's object has failed: later waits give up at once, so that one
// dead peer costs one timeout, not one per queued kernel.
static __device__ __forceinline__ bool nvshmemrs_is_broken(const nvshmemrs_wait_site &site) {
    return *(volatile uint64_t *)site.broken != 0;
}

// Marks the object broken and, if it was not broken yet, records the failure (the first one
// wins). One thread calls it. The claim is an atomic on the device word: atomics on mapped host
// memory are not reliable over PCIe.
static __device__ void nvshmemrs_record_failure(const nvshmemrs_wait_site &site, uint64_t code,
                                                uint64_t signal, uint64_t want, uint64_t seen,
                                                uint64_t waited_ns) {
    if (atomicCAS((unsigned long long *)site.broken, 0ull, 1ull) != 0ull) return;
    volatile nvshmemrs_wait_status *v = site.status;
    v->op = site.op;
    v->peer = site.peer;
    v->signal = signal;
    v->index = site.index;
    v->seq = site.seq;
    v->want = want;
    v->seen = seen;
    v->waited_ns = waited_ns;
    // The host reads `code` first: everything else must be visible before it.
    __threadfence_system();
    v->code = code;
    __threadfence_system();
}

// What a wait does once it saw its value: an acquire at system scope (the signal may come from
// another GPU), then, with `consistency`, NVSHMEM's post-wait step. Over a proxy transport
// (InfiniBand without GDRCopy, UCX) a signal can be visible before the data the NIC wrote with
// it; NVSHMEM's test, on success, runs the consistency operation that orders them, as its own
// waits do (a fence at GPU scope and a read of its device state, even where no proxy is used).
// The test asks `>= 0`, which always holds: the step runs even where the word has changed again
// since the wait saw it. Without `consistency` (every peer mapped) an acquire load of the word
// is the whole step: it orders this thread's later accesses after it, where the fence also
// waited for every earlier store of the thread (a handshake's own signals) to land.
static __device__ __forceinline__ void nvshmemrs_after_wait(volatile uint64_t *sig,
                                                            bool consistency = true) {
    if (!consistency) {
        (void)ld_acquire_sys(sig);
        return;
    }
    fence_acq_rel_sys();
    (void)nvshmem_uint64_test(const_cast<uint64_t *>(sig), NVSHMEM_CMP_GE, 0);
}

// Spins until *sig >= want or the deadline (an absolute %globaltimer value) passes. On success
// the caller's later loads see what the signalling PE wrote before its signal
// (nvshmemrs_after_wait). On timeout, or
// when the object is already broken, returns false (a timeout is recorded).
static __device__ bool nvshmemrs_wait_ge(volatile uint64_t *sig, uint64_t want,
                                         uint64_t deadline_ns,
                                         const nvshmemrs_wait_site &site) {
    const uint64_t start = nvshmemrs_globaltimer();
    uint64_t seen = *sig;
    if (seen >= want) {
        nvshmemrs_after_wait(sig, site.consistency);
        return true;
    }
    if (nvshmemrs_is_broken(site)) return false;
    for (uint32_t spin = 1;; ++spin) {
        seen = *sig;
        if (seen >= want) {
            nvshmemrs_after_wait(sig, site.consistency);
            return true;
        }
        // The clock and the broken flag are read every 256 polls only: the poll stays hot.
        if ((spin & 255) == 0) {
            uint64_t now = nvshmemrs_globaltimer();
            if (nvshmemrs_is_broken(site)) return false;
            if (now >= deadline_ns) {
                nvshmemrs_record_failure(site, NVSHMEMRS_FAIL_TIMEOUT, (uint64_t)(uintptr_t)sig,
                                         want, seen, now - start);
                return false;
            }
            // After a millisecond a wait is no longer latency-bound: back off a little so that
            // long waits leave the memory system alone.
            if (now - start > 1000000) __nanosleep(1000);
        }
    }
}

// As nvshmemrs_wait_ge, with the deadline `timeout_ns` after the wait's first clock check: the
// clock is read only once a wait has spun 256 times, so waits that end quickly (most of a
// latency-bound collective's) cost no clock reads at all.
static __device__ bool nvshmemrs_wait_ge_for(volatile uint64_t *sig, uint64_t want,
                                             uint64_t timeout_ns,
                                             const nvshmemrs_wait_site &site) {
    uint64_t seen = *sig;
    if (seen >= want) {
        nvshmemrs_after_wait(sig, site.consistency);
        return true;
    }
    if (nvshmemrs_is_broken(site)) return false;
    uint64_t start = 0, deadline = 0;
    for (uint32_t spin = 1;; ++spin) {
        seen = *sig;
        if (seen >= want) {
            nvshmemrs_after_wait(sig, site.consistency);
            return true;
        }
        if ((spin & 255) == 0) {
            uint64_t now = nvshmemrs_globaltimer();
            if (start == 0) {
                start = now;
                deadline = now + timeout_ns < now ? ~(uint64_t)0 : now + timeout_ns;
            }
            if (nvshmemrs_is_broken(site)) return false;
            if (now >= deadline) {
                nvshmemrs_record_failure(site, NVSHMEMRS_FAIL_TIMEOUT, (uint64_t)(uintptr_t)sig,
                                         want, seen, now - start);
                return false;
            }
            if (now - start > 1000000) __nanosleep(1000);
        }
    }
}

#endif
