/*
 * Checked mode's header exchange, shared by every collective (src/proto/checked.rs): before a
 * call's first step, one block puts this PE's header {call, count, meta, 0} into headers[rank]
 * of every member with a put-with-signal that sets header_flags[rank] = call, waits (with the
 * deadline) for every member's header of this call and compares count and meta with its own.
 * A difference is recorded in hdr.wait_status (NVSHMEMRS_FAIL_MISMATCH; index 0 count, 1 meta;
 * want: own value, seen: the peer's) and marks hdr.state broken, so the call's steps move
 * nothing. `headers` holds world x NVSHMEMRS_ALLREDUCE_HEADER_WORDS words, `header_flags` world
 * words (both symmetric). wait_op (NVSHMEMRS_WAIT_OP_*) and index (the collective's code) go
 * into the record of a timeout.
 */
#ifndef NVSHMEM_RS_CHECK_H
#define NVSHMEM_RS_CHECK_H

#include <nvshmem_host.h>
#include <stdint.h>

#include "abi.h"

#ifdef __cplusplus
extern "C" {
#endif

int nvshmemrs_check_header(nvshmemrs_coll_header hdr, uint64_t *headers, uint64_t *header_flags,
                           uint64_t call, uint64_t meta, int wait_op, int index,
                           cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
