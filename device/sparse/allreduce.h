/*
 * Local steps of the sparse gradient allreduce (src/sparse/allreduce/) between its selections
 * (sparse/sparse.h) and its collectives: error-feedback accumulation, the Gaussian threshold,
 * part sizes and displacements from device counts, packing of one combined (indexes, values)
 * buffer and its scatter-add, the gathers of gTop-k, and Ok-Topk's threshold estimate, index
 * regions and throttled exchange rounds. All in stream order, no host round
 * trip. Each entry point returns a cudaError_t (cudaErrorInvalidValue for an unknown dtype or
 * index type, or a workspace too small).
 */
#ifndef NVSHMEM_RS_SPARSE_ALLREDUCE_H
#define NVSHMEM_RS_SPARSE_ALLREDUCE_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* acc[i] += g[i] for i < n (bf16: added in f32, rounded once to nearest even). */
int nvshmemrs_sparse_accumulate(void *acc, const void *g, uint64_t n, int32_t dtype,
                                cudaStream_t stream);

/* Words (f64) of workspace of nvshmemrs_sparse_clip_factor. */
uint64_t nvshmemrs_sparse_clip_scratch_words(void);

/*
 * DGC's local gradient clipping (Lin et al., ICLR 2018): *factor = max_norm / ||g||_2 of g[0 ..
 * n), rounded to f32, where that norm is finite and above max_norm, else 1 (a NaN or infinity in
 * g leaves it alone). The sum of squares in f64, as nvshmemrs_sparse_gaussian_threshold's (a
 * fixed order; exact for integer data), the square root and the quotient rounded op by op.
 */
int nvshmemrs_sparse_clip_factor(const void *g, uint64_t n, double max_norm, int32_t dtype,
                                 double *scratch, uint64_t scratch_words, float *factor,
                                 cudaStream_t stream);

/*
 * c = g[i] x *factor in f32, rounded once to the value type; then d[i] = c (accumulate 0; d may
 * be g) or d[i] += c as nvshmemrs_sparse_accumulate adds (accumulate 1), for i < n.
 */
int nvshmemrs_sparse_clip_apply(void *d, const void *g, uint64_t n, const float *factor,
                                int32_t accumulate, int32_t dtype, cudaStream_t stream);

/* dense[i] *= s for i < n (bf16: in f32, rounded once). */
int nvshmemrs_sparse_scale(void *dense, uint64_t n, float s, int32_t dtype, cudaStream_t stream);

/* dense[idx[j]] = 0 for the pairs `set` holds; indexes outside 0..n are skipped. */
int nvshmemrs_sparse_zero_at(nvshmemrs_sparse_set set, void *dense, uint64_t n, int32_t dtype,
                             int32_t index_type, cudaStream_t stream);

/* Words (f64) of workspace of nvshmemrs_sparse_gaussian_threshold. */
uint64_t nvshmemrs_sparse_gaussian_scratch_words(void);

/*
 * *threshold = |mean| + z * std of g[0 .. n) (population std), from f64 sums in a fixed order
 * (the same result on every run on one device), rounded to f32 and at least the smallest
 * positive float (zeros are never sent). Sums that are not finite (a NaN or infinity in g) give
 * +infinity, which selects only infinities and NaNs.
 * need > 0: GaussianK's count correction (the seed's): with t_0 that value in f64 and t_j =
 * t_{j-1} / 1.012 (f64), each rounded as above, the threshold is the first t_j (j < 50) at which
 * at least `need` elements have |g| >= t_j (NaN always counts), else t_50. One more pass over g.
 */
int nvshmemrs_sparse_gaussian_threshold(const void *g, uint64_t n, double z, uint64_t need,
                                        int32_t dtype, double *scratch, uint64_t scratch_words,
                                        float *threshold, cudaStream_t stream);

/*
 * From n_pes set sizes (device counts, possibly past `capacity`), with h[r] = min(sizes[r],
 * capacity) the pairs r holds: counts[r] = up(h[r] x unit_a) + up(h[r] x unit_b), up() rounding
 * to a multiple of align (plain parts: 1, 0, 1; packed parts: index and value bytes, 8);
 * displs[r] = the counts before r; *total_pairs = the sum of h.
 */
int nvshmemrs_sparse_offsets(const uint64_t *sizes, int32_t n_pes, uint64_t capacity,
                             uint64_t unit_a, uint64_t unit_b, uint64_t align, uint64_t *counts,
                             uint64_t *displs, uint64_t *total_pairs, cudaStream_t stream);

/*
 * The pairs `set` holds as one byte buffer: the indexes, then the values from the next
 * 8-byte boundary, the part padded to a multiple of 8 bytes (so both stay aligned in every
 * part of a gathered buffer); nvshmemrs_sparse_offsets with the index and value sizes and
 * align 8 gives the parts' bytes.
 */
int nvshmemrs_sparse_pack_concat(nvshmemrs_sparse_set set, void *out, int32_t dtype,
                                 int32_t index_type, cudaStream_t stream);

/*
 * dense[idx] += val for every pair of the n_pes packed parts of `gathered` (part r: min(sizes[r],
 * capacity) pairs from byte displs[r], laid out as nvshmemrs_sparse_pack_concat writes them);
 * indexes outside 0..n are skipped. Part after part in part order, as
 * nvshmemrs_sparse_scatter_parts: every element's adds in member order.
 */
int nvshmemrs_sparse_scatter_concat(const void *gathered, const uint64_t *sizes,
                                    uint64_t capacity, const uint64_t *displs, int32_t n_pes,
                                    void *dense, uint64_t n, int32_t dtype, int32_t index_type,
                                    cudaStream_t stream);

/*
 * dense[idx[j]] += val[j] (bf16: in f32, rounded once) for the pairs of n_parts parts of one
 * gathered set, part after part in part order (one launch each), so that every element gets its
 * adds in member order: the same bits on every PE that scatters the same parts, at any number
 * of parts. Part r: min(sizes[r], capacity) pairs from position displs[r]; sizes NULL: capacity
 * pairs each, displs NULL: from r x capacity. No index may repeat within a part (the adds of a
 * part are atomic: repeats add in no fixed order). Indexes outside 0..n are skipped.
 */
int nvshmemrs_sparse_scatter_parts(const void *idx, const void *val, const uint64_t *sizes,
                                   const uint64_t *displs, uint64_t capacity, int32_t n_parts,
                                   void *dense, uint64_t n, int32_t dtype, int32_t index_type,
                                   cudaStream_t stream);

/* Words (f64) of workspace of nvshmemrs_sparse_threshold_rise. */
uint64_t nvshmemrs_sparse_rise_scratch_words(void);

/*
 * Ok-Topk's local threshold rise between re-estimates (the seed's add2residual): with c_j =
 * *state x 1.03^j (f64, j = 0 .. 5) rounded as a threshold (f32, +infinity where not finite, at
 * least the smallest positive float), the first c_j (j < 5) at which at most `limit` elements
 * have |g| >= c_j (NaN always counts), else c_5: *state = that c_j in f64, *threshold = in f32.
 * One pass over g.
 */
int nvshmemrs_sparse_threshold_rise(const void *g, uint64_t n, uint64_t limit, double *state,
                                    float *threshold, int32_t dtype, double *scratch,
                                    uint64_t scratch_words, cudaStream_t stream);

/*
 * Ok-Topk's threshold adaptation by what a threshold selected (*count, on the device): where
 * 4 x count < 3k, *state /= down; where 4 x count > 5k, *state *= up (f64); then *threshold =
 * *state rounded as a threshold.
 */
int nvshmemrs_sparse_threshold_adapt(const uint64_t *count, uint64_t k, double down, double up,
                                     double *state, float *threshold, cudaStream_t stream);

/* *state = *threshold (f32 into f64, exact): the state of an exact estimate. */
int nvshmemrs_sparse_threshold_state(const float *threshold, double *state,
                                     cudaStream_t stream);

/*
 * residual[i] = 0 at each index i of the pairs `set` holds where result[i] is not zero (n
 * elements; outside skipped): Ok-Topk's error feedback, which clears only the pairs that made
 * the global set (their sums there are never zero).
 */
int nvshmemrs_sparse_zero_sent(nvshmemrs_sparse_set set, const void *result, void *residual,
                               uint64_t n, int32_t dtype, int32_t index_type,
                               cudaStream_t stream);

/*
 * topk_sa's dense fallback (the seed's): with h[r] = min(sizes[r], capacity) the pairs of member
 * r's reduced region and H their sum, the dense exchange is taken where 2 x H >= floor(2n / 3)
 * (the sparse exchange's index and value words would pass two thirds of the dense elements).
 * Sparse: counts[r] = h[r], displs packed, *total = H, dense_counts[r] = 0, *dense = 0. Dense:
 * counts[r] = 0, *total = 0, dense_counts[r] = bounds[r + 1] - bounds[r], *dense = 1. Always
 * dense_displs[r] = bounds[r] (n_pes + 1 bounds).
 */
int nvshmemrs_sparse_sa_choice(const uint64_t *sizes, int32_t n_pes, uint64_t capacity,
                               const uint64_t *bounds, uint64_t n, uint64_t *counts,
                               uint64_t *displs, uint64_t *total, uint64_t *dense_counts,
                               uint64_t *dense_displs, uint32_t *dense, cudaStream_t stream);

/* dst[i] = src[i] for i < n where *flag is not 0 (read on the device); else nothing. */
int nvshmemrs_sparse_copy_if(void *dst, const void *src, uint64_t n, int32_t dtype,
                             const uint32_t *flag, cudaStream_t stream);

/*
 * out.idx[j] = src_idx[p], out.val[j] = src_val[p] for p = pos.idx[j], j < the pairs pos holds
 * (positions at or past src_len are skipped); *out.count = that number. pos's values are not
 * read. out.capacity must be at least pos.capacity.
 */
int nvshmemrs_sparse_gather(nvshmemrs_sparse_set pos, const void *src_idx, const void *src_val,
                            uint64_t src_len, nvshmemrs_sparse_set out, int32_t dtype,
                            int32_t index_type, cudaStream_t stream);

/*
 * mark[j] = 1 where mine's pair j has its index in `global` (sorted by index), else 0, for
 * j < mine.capacity (0 past the pairs held). Where residual is not NULL, residual[i] = 0 at
 * every such index i (n elements; outside skipped).
 */
int nvshmemrs_sparse_mark_included(nvshmemrs_sparse_set mine, nvshmemrs_sparse_set global,
                                   float *mark, void *residual, uint64_t n, int32_t dtype,
                                   int32_t index_type, cudaStream_t stream);

/*
 * Ok-Topk's threshold estimate: *threshold = the least magnitude among the pairs `set` holds
 * (exactly that value: a bf16 magnitude is an f32 one), +infinity where that is a NaN or the set
 * is empty, and at least the smallest positive float. `scratch`: one word of workspace.
 */
int nvshmemrs_sparse_least_threshold(nvshmemrs_sparse_set set, uint32_t *scratch,
                                     float *threshold, int32_t dtype, int32_t index_type,
                                     cudaStream_t stream);

/*
 * This PE's region boundaries over n elements, n_regions + 1 words: bounds[0] = 0,
 * bounds[n_regions] = n, and bounds[j] = idx[floor(c / n_regions) x j] for the c pairs the set
 * holds (sorted by index; the seed's chunks), so that each region holds about c / n_regions of
 * them; without pairs, floor(j x n / n_regions). Region j is [bounds[j], bounds[j + 1]).
 */
int nvshmemrs_sparse_region_bounds(nvshmemrs_sparse_set set, uint64_t n, int32_t n_regions,
                                   uint64_t *bounds, int32_t index_type, cudaStream_t stream);

/*
 * The pairs the set holds (sorted by index) per region of `bounds` (n_regions + 1 words):
 * region j's pairs are sizes[j] from position displs[j]. The first region starts at position 0,
 * the last ends at the last pair held.
 */
int nvshmemrs_sparse_region_split(nvshmemrs_sparse_set set, const uint64_t *bounds,
                                  int32_t n_regions, uint64_t *sizes, uint64_t *displs,
                                  int32_t index_type, cudaStream_t stream);

/*
 * The counts of a throttled exchange in `rounds` rounds of at most `width` peers (rounds x width
 * >= n_pes): in round t, PE `me` sends to the peers d with (d - me) mod n_pes in [t x width,
 * (t + 1) x width) and receives from the sources s with (me - s) mod n_pes in it.
 * send_counts[t x n_pes + d] = send_sizes[d] in d's round, else 0; recv_counts likewise of
 * recv_sizes. recv_displs: the receive parts packed in source order; *received: their sum.
 */
int nvshmemrs_sparse_region_rounds(const uint64_t *send_sizes, const uint64_t *recv_sizes,
                                   int32_t me, int32_t n_pes, int32_t width, int32_t rounds,
                                   uint64_t *send_counts, uint64_t *recv_counts,
                                   uint64_t *recv_displs, uint64_t *received,
                                   cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
