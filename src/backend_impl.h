/* backend_impl.h — the backend seam (private).
 *
 * Everything above the backend (arena, zero plans, graph cache) talks to the
 * device only through this table. Two implementations fill it: backend_cuda.c
 * and backend_host.c; tests add a fault-injecting wrapper (tests/fault_backend.c).
 *
 * Conventions for every slot: returns MDR_OK or a status, after recording a
 * one-line reason with mdr_backend_set_error(); out-params are set only on
 * success. Slots marked "optional" may be NULL; callers then get
 * MDR_ERR_UNSUPPORTED. A "graph" is what capture produced; an "exec" is its
 * instantiated, launchable form. */
#ifndef MDR_BACKEND_IMPL_H
#define MDR_BACKEND_IMPL_H

#include <stdarg.h>

#include "mdr/backend.h"
#include "../kernels/zero_map.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Kinds of backend calls, used by the fault-injecting backend ("fail every
 * call of kind X") and by stats. */
typedef enum mdr_op {
  MDR_OP_ALLOC_DEVICE, MDR_OP_FREE_DEVICE, MDR_OP_ALLOC_PINNED, MDR_OP_FREE_PINNED,
  MDR_OP_MEMSET_ASYNC, MDR_OP_COPY_H2D_ASYNC, MDR_OP_COPY_H2D, MDR_OP_COPY_D2H, MDR_OP_FILL,
  MDR_OP_STREAM_CREATE, MDR_OP_STREAM_DESTROY, MDR_OP_SYNCHRONIZE, MDR_OP_STREAM_QUERY,
  MDR_OP_CAPTURE_BEGIN, MDR_OP_CAPTURE_END, MDR_OP_IS_CAPTURING,
  MDR_OP_GRAPH_INSTANTIATE, MDR_OP_GRAPH_UPLOAD, MDR_OP_GRAPH_LAUNCH,
  MDR_OP_GRAPH_DESTROY, MDR_OP_EXEC_DESTROY, MDR_OP_ZERO_FUSED, MDR_OP_FUSED_NODE_FIND,
  MDR_OP_FUSED_NODE_UPDATE,
  MDR_OP_COUNT
} mdr_op;

struct mdr_backend_ops {
  const char *name;
  void (*destroy)(mdr_backend *b);

  mdr_status (*alloc_device)(mdr_backend *b, size_t n, mdr_dptr *out);
  void (*free_device)(mdr_backend *b, mdr_dptr p);
  /* Pinned host memory, also mapped into the device's address space:
   * *host is what the CPU writes, *dev what a kernel or copy reads. */
  mdr_status (*alloc_pinned)(mdr_backend *b, size_t n, void **host, mdr_dptr *dev);
  void (*free_pinned)(mdr_backend *b, void *host);

  /* Enqueued, capture-safe. src of copy_h2d_async must be pinned. */
  mdr_status (*memset_async)(mdr_backend *b, mdr_dptr dst, unsigned char v, size_t n, mdr_stream s);
  mdr_status (*copy_h2d_async)(mdr_backend *b, mdr_dptr dst, const void *src, size_t n, mdr_stream s);
  /* Blocking, not capture-safe. */
  mdr_status (*copy_h2d)(mdr_backend *b, mdr_dptr dst, const void *src, size_t n);
  mdr_status (*copy_d2h)(mdr_backend *b, void *dst, mdr_dptr src, size_t n);
  mdr_status (*fill)(mdr_backend *b, mdr_dptr dst, unsigned char v, size_t n);

  mdr_status (*stream_create)(mdr_backend *b, mdr_stream *out);
  void (*stream_destroy)(mdr_backend *b, mdr_stream s);
  mdr_status (*synchronize)(mdr_backend *b, mdr_stream s);
  /* *idle = 1 when all work on s has finished, 0 when some is pending; an
   * error of earlier work is returned as a status. */
  mdr_status (*stream_query)(mdr_backend *b, mdr_stream s, int *idle);

  /* Capture on s (CUDA: thread-local mode). capture_end always ends the
   * capture; on failure *graph is untouched and s is usable again. */
  mdr_status (*capture_begin)(mdr_backend *b, mdr_stream s);
  mdr_status (*capture_end)(mdr_backend *b, mdr_stream s, void **graph);
  mdr_status (*is_capturing)(mdr_backend *b, mdr_stream s, int *capturing);
  mdr_status (*graph_instantiate)(mdr_backend *b, void *graph, void **exec);
  mdr_status (*graph_upload)(mdr_backend *b, void *exec, mdr_stream s);
  mdr_status (*graph_launch)(mdr_backend *b, void *exec, mdr_stream s);
  void (*graph_destroy)(mdr_backend *b, void *graph);
  void (*exec_destroy)(mdr_backend *b, void *exec);

  /* optional: one fused launch (or several, for more than MDR_ZERO_MAX_SEGS
   * segments) clearing every entry of segs at token count `tokens`; with a
   * stage, the launch also serves a staged step (zero_map.h). Enqueued,
   * capture-safe, no allocation. */
  mdr_status (*zero_fused)(mdr_backend *b, const mdr_zero_seg *segs, size_t n, uint64_t tokens,
                           const mdr_stage_desc *stage, mdr_stream s);
  /* optional: the node of the first fused launch in a captured graph, and
   * its re-targeting in an exec of that graph to `segs` at `tokens` (a
   * static plan of at most MDR_ZERO_MAX_SEGS rules; the stage's DYNAMIC flag
   * is ignored). The update affects later launches only. */
  mdr_status (*fused_node_find)(mdr_backend *b, void *graph, void **node);
  mdr_status (*fused_node_update)(mdr_backend *b, void *exec, void *node, const mdr_zero_seg *segs,
                                  size_t n, uint64_t tokens, const mdr_stage_desc *stage);
};

#define MDR_BACKEND_ERROR_MAX 512

struct mdr_backend {
  const struct mdr_backend_ops *ops;
};

/* Record a failure (printf-style) as this thread's last error of backend b
 * (see mdr_backend_last_error) and return `st`. */
mdr_status mdr_backend_fail(mdr_backend *b, mdr_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Entry points for everything above the backend: check the slot exists,
 * then call it. They never re-check arguments the callers own. */
mdr_status mdr_be_alloc_pinned(mdr_backend *b, size_t n, void **host, mdr_dptr *dev);
void mdr_be_free_pinned(mdr_backend *b, void *host);
mdr_status mdr_be_copy_h2d_async(mdr_backend *b, mdr_dptr dst, const void *src, size_t n, mdr_stream s);
mdr_status mdr_be_stream_query(mdr_backend *b, mdr_stream s, int *idle);
mdr_status mdr_be_capture_begin(mdr_backend *b, mdr_stream s);
mdr_status mdr_be_capture_end(mdr_backend *b, mdr_stream s, void **graph);
mdr_status mdr_be_is_capturing(mdr_backend *b, mdr_stream s, int *capturing);
mdr_status mdr_be_graph_instantiate(mdr_backend *b, void *graph, void **exec);
mdr_status mdr_be_graph_upload(mdr_backend *b, void *exec, mdr_stream s);
mdr_status mdr_be_graph_launch(mdr_backend *b, void *exec, mdr_stream s);
void mdr_be_graph_destroy(mdr_backend *b, void *graph);
void mdr_be_exec_destroy(mdr_backend *b, void *exec);
mdr_status mdr_be_zero_fused(mdr_backend *b, const mdr_zero_seg *segs, size_t n, uint64_t tokens,
                             const mdr_stage_desc *stage, mdr_stream s);
mdr_status mdr_be_fused_node_find(mdr_backend *b, void *graph, void **node);
mdr_status mdr_be_fused_node_update(mdr_backend *b, void *exec, void *node, const mdr_zero_seg *segs,
                                    size_t n, uint64_t tokens, const mdr_stage_desc *stage);
mdr_status mdr_be_alloc_device(mdr_backend *b, size_t n, mdr_dptr *out);
void mdr_be_free_device(mdr_backend *b, mdr_dptr p);

/* Run the fused plan on the CPU through the shared mapping of zero_map.h:
 * what the host backend's zero_fused slot does. The stage's addresses are
 * host addresses there. Exposed for the tests of the mapping. */
void mdr_zero_fused_host(const mdr_zero_seg *segs, size_t n, uint64_t tokens,
                         const mdr_stage_desc *stage);

#ifdef __cplusplus
}
#endif
#endif
