/* mdr example — the TP decode loop's own kernels (the residual add after
 * each all-reduce, the MLP's SiLU, and the embedding gather of a DYNAMIC
 * graph, which reads the step's count on the device), with C-callable
 * launchers. The gather of EXACT graphs and RMSNorm come from
 * decode_kernels.h.
 *
 * Layout as in decode_kernels.h: row-major BF16 [rows, width], one token
 * per row, widths multiples of 8, pointers 16-byte aligned. Each launcher
 * only enqueues on `stream` (capture-safe: no allocation, no
 * synchronisation) and returns cudaGetLastError() after the launch, or
 * cudaErrorInvalidValue for bad shapes. Every result is a pure function of
 * the inputs and the launch: the same call gives the same bits, eager or
 * replayed. */
#ifndef MDR_EXAMPLE_DECODE_TP_KERNELS_H
#define MDR_EXAMPLE_DECODE_TP_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* h[r][j] = bf16(h[r][j] + x[r][j]) in F32, for r < tokens (the rows the
 * all-reduce summed); rows at and past `tokens` are left alone. */
cudaError_t dtp_residual_add(void *h, const void *x, size_t tokens, size_t width,
                             cudaStream_t stream);

/* x[r][j] = bf16(v / (1 + exp(-v))) with v = x[r][j], in place, for
 * r < rows (SiLU(0) = 0: zero pad rows stay zero). */
cudaError_t dtp_silu(void *x, size_t rows, size_t width, cudaStream_t stream);

/* dk_gather_embeddings with the count read on the device: with
 * t = min(*count, rows), hidden[r] = emb[ids[r] % vocab] for r < t and
 * hidden[r] = 0 for t <= r < rows (ids at and past t are never read). For
 * a DYNAMIC graph's body: `count` is the cache's count word, `rows` the
 * body's max_tokens. */
cudaError_t dtp_gather_counted(void *hidden, const void *emb, const uint32_t *ids,
                               const uint32_t *count, size_t rows, size_t width, size_t vocab,
                               cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
