/*
 * Selection kernels of sparse gradient exchange (src/sparse/): exact top-k by magnitude,
 * threshold compaction, merge of two sparse sets, scatter-add into a dense buffer. Local work on
 * one stream, no host round trip; counts stay on the device (abi.h nvshmemrs_sparse_set).
 *
 * Order: the magnitude |g|, with NaN above every number (infinity included) and all NaNs equal;
 * -0 and +0 are equal. Ties go to the lower index. Selected pairs come out sorted by index,
 * values bit for bit as in the gradient.
 *
 * Every entry point returns a cudaError_t (0 on success; cudaErrorInvalidValue for arguments out
 * of range: unknown dtype or index type, a workspace too small).
 */
#ifndef NVSHMEM_RS_SPARSE_H
#define NVSHMEM_RS_SPARSE_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Words of workspace the selections over up to max_n elements need. */
uint64_t nvshmemrs_sparse_select_scratch_words(uint64_t max_n);

/*
 * The min(k, n) elements of largest magnitude into args.out (capacity at least min(k, n)), sorted
 * by index; *out.count = min(k, n). A radix select over the magnitude bits finds the k-th
 * largest key, then a stable compaction takes every larger key and the lowest-index equal ones.
 */
int nvshmemrs_sparse_topk(nvshmemrs_sparse_select_args args, cudaStream_t stream);

/*
 * Every element with |g| >= args.threshold (NaN counts as above every threshold) into args.out,
 * sorted by index; *out.count = how many there are, even beyond capacity: then the `capacity`
 * of largest magnitude among them are written (ties to the lower index; the top `capacity` of
 * the gradient), sorted by index. args.threshold must not be NaN; with args.device_threshold
 * set, the threshold is read from there on the device instead.
 */
int nvshmemrs_sparse_threshold(nvshmemrs_sparse_select_args args, cudaStream_t stream);

/* Words of workspace a merge of sets of capacity up to max_a and max_b needs. */
uint64_t nvshmemrs_sparse_merge_scratch_words(uint64_t max_a, uint64_t max_b);

/*
 * out = a union b by index, sorted, values added where both hold an index (bf16: added in f32,
 * rounded to nearest even once); *out.count = the union's size, even beyond out.capacity (then
 * the lowest `capacity` indexes are written). Inputs must be sorted by index without repeats;
 * other inputs give unspecified pairs, but nothing is written outside out's capacity.
 */
int nvshmemrs_sparse_merge(nvshmemrs_sparse_merge_args args, cudaStream_t stream);

/*
 * dense[idx[j]] += val[j] for every held pair (any order, repeats allowed: atomic adds; bf16:
 * each add in f32, rounded to nearest even). Indexes outside 0..n are skipped.
 */
int nvshmemrs_sparse_scatter_add(nvshmemrs_sparse_scatter_args args, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
