/* fault_backend.h — a test-only backend wrapping another one and failing on
 * demand: "fail the k-th call" and "fail every call of kind X". It also
 * counts live resources so tests can check nothing leaks. */
#ifndef MDR_FAULT_BACKEND_H
#define MDR_FAULT_BACKEND_H

#include "backend_impl.h"

/* Kinds of backend calls: "fail every call of kind X", and per-kind call
 * counts. One per vtable slot. */
typedef enum mdr_op {
  MDR_OP_ALLOC_DEVICE, MDR_OP_FREE_DEVICE, MDR_OP_ALLOC_PINNED, MDR_OP_FREE_PINNED,
  MDR_OP_MEMSET_ASYNC, MDR_OP_COPY_H2D, MDR_OP_COPY_D2H, MDR_OP_FILL,
  MDR_OP_STREAM_CREATE, MDR_OP_STREAM_DESTROY, MDR_OP_SYNCHRONIZE, MDR_OP_STREAM_QUERY,
  MDR_OP_CAPTURE_BEGIN, MDR_OP_CAPTURE_END, MDR_OP_IS_CAPTURING,
  MDR_OP_GRAPH_INSTANTIATE, MDR_OP_GRAPH_LAUNCH,
  MDR_OP_GRAPH_DESTROY, MDR_OP_EXEC_DESTROY, MDR_OP_ZERO_FUSED, MDR_OP_FUSED_NODE_UPDATE, MDR_OP_HOST_FN, MDR_OP_MEM_USED, MDR_OP_GRAPH_NODES,
  MDR_OP_FUSED_INLINE_LAUNCH, MDR_OP_FUSED_INLINE_UPDATE,
  MDR_OP_COUNT
} mdr_op;

/* Wrap `inner` (borrowed; must outlive the wrapper). */
mdr_status fault_backend_create(mdr_backend *inner, mdr_backend **out);

/* Fail the k-th fallible call from now (1-based; 0: never). Calls of void
 * slots (frees, destroys) and the best-effort queries (mem_used,
 * graph_nodes) are not counted and never fail. */
void fault_backend_fail_at(mdr_backend *f, long k);
/* Fail every call of kind `op` (-1: none). */
void fault_backend_fail_kind(mdr_backend *f, int op);
/* Fallible calls seen since creation, and failures injected. */
long fault_backend_calls(const mdr_backend *f);
long fault_backend_injected(const mdr_backend *f);
/* Calls of one kind seen since creation. */
long fault_backend_calls_of(const mdr_backend *f, mdr_op op);
/* Live resources made through the wrapper and not yet released:
 * device + pinned allocations, streams, graphs and execs. */
long fault_backend_live(const mdr_backend *f);
/* The stage of the last inline launch passed to the inner backend (all
 * zero before the first). */
mdr_stage_desc fault_backend_last_inline_stage(const mdr_backend *f);
/* The stage of the last zero_fused call passed to the inner backend with a
 * stage (all zero before the first). */
mdr_stage_desc fault_backend_last_fused_stage(const mdr_backend *f);
/* The launch of the last inline update passed to the inner backend (its
 * image and, past the small class, the input table's room as the caller
 * wrote them; all zero before the first). Valid until the next update. */
const mdr_stage_inline_launch *fault_backend_last_inline_update(const mdr_backend *f);
/* Leave an application error pending, as a failed launch of the
 * application's own would on CUDA: take_pending_error reports it (and
 * clears it); if nothing takes it first, the next fused launch runs and
 * then reports it, as CUDA's launch check would. */
void fault_backend_leave_pending(mdr_backend *f);
/* Make is_device_memory say "not device memory" for [lo, hi) (0, 0: off). */
void fault_backend_host_range(mdr_backend *f, mdr_dptr lo, mdr_dptr hi);

#endif
