/* zero_fused.h — the fused zeroing kernel's C launcher (private; only the
 * CUDA backend calls it). No CUDA header is needed to include this. */
#ifndef MDR_ZERO_FUSED_H
#define MDR_ZERO_FUSED_H

#include <stddef.h>
#include <stdint.h>

#include "zero_map.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Enqueue on `stream` (a cudaStream_t) the launch(es) clearing every entry of
 * segs at token count `tokens` (rules of zero_map.h). Plans longer than
 * MDR_ZERO_MAX_SEGS are split into several launches. With a stage (may be
 * NULL) the launch also serves a staged step: STAGE_DYNAMIC evaluates the
 * rules at the slot's token count instead of `tokens` (every launch),
 * STAGE_FETCH copies the slot's ids (`tokens` of them for a static plan,
 * the header's copy_tokens under DYNAMIC) and its real count into count_out
 * (first launch), STAGE_ADVANCE
 * advances the counter and writes the ack once every block is done (last
 * launch). n == 0 without a stage launches nothing. No allocation, no
 * synchronisation: legal under stream capture. `sm_count` sizes the grid.
 * Returns 0 or the cudaError_t of the launch (checked with
 * cudaGetLastError, which also clears it). */
int mdr_cuda_zero_fused(const mdr_zero_seg *segs, size_t n, uint64_t tokens,
                        const mdr_stage_desc *stage, void *stream, int sm_count);

/* Find, in a captured graph, the kernel node of a static fused launch (the
 * first one). 0 and *node set, or a cudaError_t. */
int mdr_cuda_zero_fused_find(void *graph, void **node);

/* Re-target that node of an instantiated graph (a cudaGraphExec_t) to the
 * plan `segs` (at most MDR_ZERO_MAX_SEGS rules) evaluated at `tokens`, with
 * `stage` served as a static plan (its DYNAMIC flag ignored): exactly the
 * launch mdr_cuda_zero_fused would have made. Affects later launches of the
 * exec only. 0 or a cudaError_t. */
int mdr_cuda_zero_fused_update(void *exec, void *node, const mdr_zero_seg *segs, size_t n,
                               uint64_t tokens, const mdr_stage_desc *stage, int sm_count);

#ifdef __cplusplus
}
#endif
#endif
