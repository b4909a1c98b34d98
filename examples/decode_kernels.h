/* mdr example — the decode loop's own device kernels (gather, RMSNorm, MoE
 * accumulate, greedy sampling, paged decode attention, an empty kernel), with C-callable launchers.
 *
 * Layout: every activation is row-major BF16 [rows, width], one token per
 * row. `tokens` rows are real; rows tokens .. rows-1 are the GEMM padding up
 * to ceil16(tokens). Each launcher only enqueues on `stream` (capture-safe:
 * no allocation, no synchronisation) and returns cudaGetLastError() after
 * the launch, or cudaErrorInvalidValue for bad shapes (widths must be
 * multiples of 8 for the 16-byte accesses; pointers 16-byte aligned). */
#ifndef MDR_EXAMPLE_DECODE_KERNELS_H
#define MDR_EXAMPLE_DECODE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* hidden[r] = emb[ids[r] % vocab] for r < tokens; hidden[r] = 0 for
 * tokens <= r < rows (so a GEMM over `rows` rows reads written memory). */
cudaError_t dk_gather_embeddings(void *hidden, const void *emb, const uint32_t *ids,
                                 size_t tokens, size_t rows, size_t width, size_t vocab,
                                 cudaStream_t stream);

/* out[r] = v * rsqrt(mean(v^2) + eps) * gamma with v = x[r] (+ add[r] when
 * add is not NULL), accumulated in F32, for r < tokens; out[r] = 0 for
 * tokens <= r < rows. Pad rows of x and add are never read. */
cudaError_t dk_rmsnorm(void *out, const void *x, const void *add, const void *gamma,
                       size_t tokens, size_t rows, size_t width, float eps,
                       cudaStream_t stream);

/* MoE-style accumulation of one expert slot, for r < tokens only:
 *   moe_out[r][j] = bf16(moe_out[r][j] + w(ids[r], slot) * expert_out[r][slot*width + j])
 * expert_out rows hold `slots` expert outputs back to back (row stride
 * slots*width elements). w is a fixed routing weight derived from the token
 * id and the slot. It reads moe_out first: the rows must be zero at the
 * start of the step (the arena's zero_all_rows does it). */
cudaError_t dk_moe_accumulate(void *moe_out, const void *expert_out, size_t slot, size_t slots,
                              const uint32_t *ids, size_t tokens, size_t width,
                              cudaStream_t stream);

/* Greedy sampling on the device: next_ids[r] = argmax_j logits[r][j] for
 * r < tokens (logits row-major BF16 [tokens, vocab]; the largest value,
 * the lowest index among equal ones; NaN counts as the smallest value), so
 * the result does not depend on the reduction order. Rows of next_ids at
 * and past `tokens` are not written. vocab % 8 == 0, logits 16-byte
 * aligned, vocab <= UINT32_MAX. */
cudaError_t dk_sample_argmax(uint32_t *next_ids, const void *logits, size_t tokens, size_t vocab,
                             cudaStream_t stream);

/* Paged decode attention, one query token per sequence (decode_model_paged.h
 * gives the formula and paged_attention_ref its CPU reference). Everything
 * of the step is read on the device: its token and sequence counts
 * (tokens_word, sequences_word: mdr_graph_cache_count_ptr and
 * mdr_graph_cache_sequences_ptr in a graph), and per sequence s <
 * *sequences_word its query token, its length and its block-table row, and
 * the query token's position. q_rows: BF16 rows of q_stride elements, head h
 * at h * head_dim; k_cache, v_cache: BF16 [blocks][block][head_dim] (one KV
 * head); out: F32 [seq_rows][heads][head_dim], rows at or past the step's
 * sequences not written (a query token past the step's tokens gives NaN).
 * The grid is seq_rows x heads blocks (a bound: the graph's sequence rows).
 * head_dim 256; at most 256 keys per sequence (max_keys <= table_width *
 * block). */
cudaError_t dk_paged_attention(float *out, const void *q_rows, size_t q_stride, const void *k_cache,
                               const void *v_cache, const uint32_t *positions, const uint32_t *seq_lens,
                               const uint32_t *query_token, const uint32_t *block_table, size_t table_width,
                               size_t block, size_t head_dim, size_t heads, size_t max_keys,
                               const uint32_t *tokens_word, const uint32_t *sequences_word, size_t seq_rows,
                               cudaStream_t stream);

/* One block of one thread that does nothing: padding for a body of a given
 * kernel count (capture-cost measurements). */
cudaError_t dk_empty(cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
