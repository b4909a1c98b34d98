/* zero_fused.h — the fused zero-and-stage kernels' C entry points (private;
 * the CUDA backend and the lab in dev/ call them). No CUDA header is needed
 * to include this; streams are passed as void * (a cudaStream_t). */
#ifndef MDR_ZERO_FUSED_H
#define MDR_ZERO_FUSED_H

#include <stddef.h>
#include <stdint.h>

#include "staging_layout.h"
#include "zero_map.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Enqueue on `stream` the launch(es) that clear every entry of segs at
 * token count `tokens` (rules of zero_map.h) and, with a stage (may be
 * NULL), serve a staged step: copy the slot's ids into token_ids and its
 * count into count_out (FETCH, first launch), and advance the ring counter
 * and the ack once every block is done (ADVANCE, last launch). The stage's
 * flags pick the kernel:
 *   TABLE    the plan at `tokens` is read from the plan table (one launch,
 *            at most MDR_ZERO_MAX_SEGS rules, 1 <= tokens <= table_max);
 *   DYNAMIC  the rules are evaluated at the slot's token count, read on the
 *            device (every launch);
 *   neither  a static plan: the rules evaluated at `tokens` on the host.
 * Plans longer than MDR_ZERO_MAX_SEGS are split into several launches.
 * n == 0 without a stage launches nothing. No allocation, no
 * synchronisation: legal under stream capture. `sm_count` (> 0) sizes the
 * grid. Returns 0 or the cudaError_t of the launch (checked with
 * cudaGetLastError, which also clears it); cudaErrorInvalidValue for a
 * TABLE launch the table cannot serve. */
int mdr_cuda_zero_and_stage(const mdr_zero_seg *segs, size_t n, uint64_t tokens,
                            const mdr_stage_desc *stage, void *stream, int sm_count);

/* A kernel of this file: its host symbol (what the launch descriptors
 * below carry as func) and its function in the context of the device that
 * was current at mdr_cuda_zero_preload (a CUfunction, for updates of graph
 * nodes through the driver). */
typedef struct mdr_cuda_kernel_fn {
  const void *symbol;
  void *function;
} mdr_cuda_kernel_fn;
#define MDR_CUDA_ZERO_KERNELS 19

/* Load every kernel of this file on the current device now (CUDA loads
 * modules lazily, at a kernel's first launch, and loading can wait for the
 * whole device: better at backend creation than in an engine's first
 * step) and, when out is not NULL, write each kernel's symbol and function
 * into out[0..MDR_CUDA_ZERO_KERNELS) (function NULL where the runtime
 * could not give it). 0 or the cudaError_t of a kernel that did not load. */
int mdr_cuda_zero_preload(mdr_cuda_kernel_fn *out);

/* The blocks a SM of the table launch's grid (mdr_cuda_zero_table_launch:
 * min(the table's largest plan's chunks, sm_count times this), +1 stage
 * block): as many as fit on one SM at once, so that the grid, which
 * strides over the plan, is resident. The runtime's occupancy figure for
 * the table kernel, asked at mdr_cuda_zero_preload (the fewest over the
 * devices preloaded), at most 6; 6 before any preload. */
int mdr_cuda_zero_table_blocks_per_sm(void);

/* A kernel launch as a graph kernel node takes it: the function, the grid
 * and block, and the kernel's one by-value argument. */
#define MDR_CUDA_LAUNCH_PARAM_BYTES 128
typedef struct mdr_cuda_launch {
  const void *func;
  unsigned grid[3];
  unsigned block[3];
  size_t param_bytes;
  uint64_t param[MDR_CUDA_LAUNCH_PARAM_BYTES / 8];
} mdr_cuda_launch;

/* Describe (not enqueue) the TABLE launch that mdr_cuda_zero_and_stage
 * makes for `rules` (n of them) at `tokens` with `stage` (TABLE set): what
 * a kernel node of that launch is re-targeted to. Its grid depends on the
 * table only, not on t, so re-targeting changes the parameters alone.
 * 0, or cudaErrorInvalidValue when the table cannot serve it. */
int mdr_cuda_zero_table_launch(const mdr_zero_seg *rules, size_t n, uint64_t tokens,
                               const mdr_stage_desc *stage, int sm_count, mdr_cuda_launch *out);

/* Describe (not enqueue) the inline launch of a plan at `tokens` whose
 * stage (FETCH | INLINE, DEVICE_IDS or not; no ADVANCE, DYNAMIC or TABLE)
 * is served from the slot image in the kernel's own parameters (with
 * DEVICE_IDS the image's header and inputs, the ids from stage->ids_src)
 * (staging_layout.h, MDR_STAGE_INLINE): the kernel, grid, block and
 * argument, with the image zeroed at out->slot_offset. The image class
 * is mdr_stage_inline_class's: the smallest that holds
 * stage->inline_bytes, MDR_STAGE_INLINE_BYTES or, when the stage's table
 * is a plan table of these n rules that serves `tokens`
 * (mdr_stage_table_ok; TABLE itself stays unset),
 * MDR_STAGE_INLINE_LARGE_BYTES, MDR_STAGE_INLINE_XL_BYTES,
 * MDR_STAGE_INLINE_XXL_BYTES or MDR_STAGE_INLINE_XXXL_BYTES, a stage with
 * inputs taking at least the large one given such a table. A plan of at
 * most MDR_ZERO_LIST_INLINE_MAX chunks at `tokens` travels as its chunk
 * list (4480 bytes, then the image; up to MDR_STAGE_INLINE_XL_BYTES);
 * else, given the table, the launch reads the plan from it (the table
 * parameters, 128 bytes, then the image); else
 * the plan (at most MDR_ZERO_PLAN_MAX segments) travels by value with an
 * image of MDR_STAGE_INLINE_BYTES (about 1.2 KiB). A node of it takes a step's
 * image by a parameter update of the whole argument. 0, or
 * cudaErrorInvalidValue for another stage, a longer plan or an image that
 * no class of its form holds. */
int mdr_cuda_zero_inline_launch(const mdr_zero_seg *segs, size_t n, uint64_t tokens, const mdr_stage_desc *stage,
                                int sm_count, mdr_stage_inline_launch *out);

/* Enqueue on `stream` the launch mdr_cuda_zero_inline_launch describes
 * (into *out, the argument as launched). Legal under stream capture. 0 or
 * the cudaError_t of the launch. */
int mdr_cuda_zero_inline(const mdr_zero_seg *segs, size_t n, uint64_t tokens, const mdr_stage_desc *stage,
                         void *stream, int sm_count, mdr_stage_inline_launch *out);

#ifdef __cplusplus
}
#endif
#endif
