/* backend_impl.h — the backend seam (private).
 *
 * Everything above the backend (arena, zero plans, staging, graph cache)
 * talks to the device only through the mdr_be_* entry points declared at the
 * end of this header; only backend.c reads the table itself. Two
 * implementations fill it: backend_cuda.c and backend_host.c; tests add a
 * fault-injecting wrapper (tests/fault_backend.c).
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
#include "../staging/staging_layout.h"
#include "../plan/zero_map.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A function a host backend's stream runs as one op (see host_fn). */
typedef mdr_status (*mdr_host_fn)(mdr_backend *b, void *arg);

struct mdr_backend_ops {
  const char *name;
  void (*destroy)(mdr_backend *b);

  mdr_status (*alloc_device)(mdr_backend *b, size_t n, mdr_dptr *out);
  void (*free_device)(mdr_backend *b, mdr_dptr p);
  /* Pinned host memory, also mapped into the device's address space:
   * *host is what the CPU writes, *dev what a kernel or copy reads. */
  mdr_status (*alloc_pinned)(mdr_backend *b, size_t n, void **host, mdr_dptr *dev);
  void (*free_pinned)(mdr_backend *b, void *host);

  /* Enqueued, capture-safe. */
  mdr_status (*memset_async)(mdr_backend *b, mdr_dptr dst, unsigned char v, size_t n, mdr_stream s);
  /* Blocking, not capture-safe. They wait for their own work only (never
   * the whole device), and the data has landed when they return, so any
   * later use on any stream sees it. */
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
  /* *capturing = 1 when s is being captured (by anyone: the engine's own
   * capture included). */
  mdr_status (*is_capturing)(mdr_backend *b, mdr_stream s, int *capturing);
  /* Instantiate; with `upload` non-NULL also upload the exec on that
   * stream (CUDA: one cudaGraphInstantiateWithParams with the upload flag). */
  mdr_status (*graph_instantiate)(mdr_backend *b, void *graph, mdr_stream upload, void **exec);
  mdr_status (*graph_launch)(mdr_backend *b, void *exec, mdr_stream s);
  void (*graph_destroy)(mdr_backend *b, void *graph);
  void (*exec_destroy)(mdr_backend *b, void *exec);

  /* optional: one fused launch (or several, for more than MDR_ZERO_MAX_SEGS
   * segments) clearing every entry of segs at token count `tokens`; with a
   * stage, the launch also serves a staged step (zero_map.h). Enqueued,
   * capture-safe, no allocation. With `node` non-NULL, s must be capturing
   * and the launch a single one (a TABLE launch): *node is set to the graph
   * node it became, for fused_node_update. */
  mdr_status (*zero_fused)(mdr_backend *b, const mdr_zero_seg *segs, size_t n, uint64_t tokens,
                           const mdr_stage_desc *stage, mdr_stream s, void **node);
  /* optional: re-target that node, in an exec of the graph it was captured
   * into, to the TABLE launch of `rules` (n of them) at `tokens` with
   * `stage` (TABLE set): exactly the launch zero_fused would make. Affects
   * later launches of the exec only. */
  mdr_status (*fused_node_update)(mdr_backend *b, void *exec, void *node, const mdr_zero_seg *rules,
                                  size_t n, uint64_t tokens, const mdr_stage_desc *stage);
  /* optional: the inline form of a fused launch: one launch clearing every
   * entry of segs (at most MDR_ZERO_PLAN_MAX) at `tokens` and serving a
   * staged step (FETCH | INLINE, DEVICE_IDS or not) from the slot image in its own parameters
   * (staging_layout.h), not from the ring. The image is stage->inline_bytes
   * (0: small); one over MDR_STAGE_INLINE_BYTES needs the table form (a
   * plan table of segs in the stage that serves `tokens`) and at most
   * MDR_STAGE_INLINE_XXXL_BYTES, else MDR_ERR_INVALID_ARGUMENT. *out is
   * set to the launch as made (its image zeroed, param_bytes and
   * slot_offset those of the image class taken; table_offset, when not 0,
   * zeroed room where the caller may write the count's input table for the
   * launch to read in place of stage->inputs), which fused_inline_update
   * takes back with a step's image written at out->slot_offset. Enqueued, capture-safe, no
   * allocation; with `node` non-NULL, s must be capturing and *node is set
   * to the graph node the launch became. */
  mdr_status (*fused_inline_launch)(mdr_backend *b, const mdr_zero_seg *segs, size_t n, uint64_t tokens,
                                    const mdr_stage_desc *stage, mdr_stream s, void **node,
                                    mdr_stage_inline_launch *out);
  /* optional: set the parameters of that node, in an exec of the graph it
   * was captured into, to `l` (fused_inline_launch's launch with a step's
   * slot image). The parameters are copied: later launches of the exec read
   * them, launches already enqueued keep theirs. On failure the node is as
   * it was. */
  mdr_status (*fused_inline_update)(mdr_backend *b, void *exec, void *node, const mdr_stage_inline_launch *l);
  /* optional (host backends): enqueue fn(b, copy of arg) as one op of s, run
   * when the stream reaches it (at once, or at every replay of a graph that
   * recorded it); its status is the op's. The backend owns the copy. */
  mdr_status (*host_fn)(mdr_backend *b, mdr_host_fn fn, const void *arg, size_t arg_bytes, mdr_stream s);
  /* optional: device memory in use on the backend's device, in bytes (CUDA:
   * total - free of cudaMemGetInfo, which the runtime rounds to pages and
   * which counts every allocation of the process and of others). */
  mdr_status (*mem_used)(mdr_backend *b, size_t *used);
  /* optional: the number of nodes of a captured graph. */
  mdr_status (*graph_nodes)(mdr_backend *b, void *graph, size_t *n);
  /* optional: an error that earlier work outside mdr left pending on this
   * thread (CUDA: a failed launch's error, returned by the next
   * cudaGetLastError): MDR_OK when none; else it is cleared, recorded as
   * the application's and returned, so that mdr's next launch is not
   * taken for the failing one. */
  mdr_status (*take_pending_error)(mdr_backend *b);
  /* optional: whether [p, p + n) is device memory the backend's kernels can
   * write (*ok 1) or not (0: host memory, unknown addresses). */
  mdr_status (*is_device_memory)(mdr_backend *b, mdr_dptr p, size_t n, int *ok);
};

#define MDR_BACKEND_ERROR_MAX 512

struct mdr_backend {
  const struct mdr_backend_ops *ops;
  uint64_t serial; /* unique per backend made in this process: keys its error texts */
};

/* Fill the common part of a backend being made: its table and a fresh
 * serial (a backend made later at a reused address never shows the
 * texts of the one before). */
void mdr_backend_init_base(mdr_backend *b, const struct mdr_backend_ops *ops);

/* Record a failure (printf-style) as this thread's last error of backend b
 * (see mdr_backend_last_error) and return `st`. */
mdr_status mdr_backend_fail(mdr_backend *b, mdr_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Failures this thread has recorded so far (any backend): a caller that
 * notes it before handing control away can tell whether the last error
 * text is new. */
unsigned long long mdr_backend_failures(void);

/* Entry points for everything above the backend: they check that an
 * optional slot exists (MDR_ERR_UNSUPPORTED otherwise), then call it. They
 * never re-check arguments the callers own. Destroy-like calls accept 0 /
 * NULL handles. */
const char *mdr_be_name(const mdr_backend *b);
int mdr_be_has_zero_fused(const mdr_backend *b);
int mdr_be_has_node_update(const mdr_backend *b);
/* Both inline slots (fused_inline_launch and fused_inline_update). */
int mdr_be_has_inline(const mdr_backend *b);
mdr_status mdr_be_alloc_device(mdr_backend *b, size_t n, mdr_dptr *out);
void mdr_be_free_device(mdr_backend *b, mdr_dptr p);
mdr_status mdr_be_alloc_pinned(mdr_backend *b, size_t n, void **host, mdr_dptr *dev);
void mdr_be_free_pinned(mdr_backend *b, void *host);
mdr_status mdr_be_memset_async(mdr_backend *b, mdr_dptr dst, unsigned char v, size_t n, mdr_stream s);
mdr_status mdr_be_copy_h2d(mdr_backend *b, mdr_dptr dst, const void *src, size_t n);
mdr_status mdr_be_fill(mdr_backend *b, mdr_dptr dst, unsigned char v, size_t n);
mdr_status mdr_be_synchronize(mdr_backend *b, mdr_stream s);
mdr_status mdr_be_stream_query(mdr_backend *b, mdr_stream s, int *idle);
mdr_status mdr_be_capture_begin(mdr_backend *b, mdr_stream s);
mdr_status mdr_be_capture_end(mdr_backend *b, mdr_stream s, void **graph);
mdr_status mdr_be_is_capturing(mdr_backend *b, mdr_stream s, int *capturing);
mdr_status mdr_be_graph_instantiate(mdr_backend *b, void *graph, mdr_stream upload, void **exec);
mdr_status mdr_be_graph_launch(mdr_backend *b, void *exec, mdr_stream s);
void mdr_be_graph_destroy(mdr_backend *b, void *graph);
void mdr_be_exec_destroy(mdr_backend *b, void *exec);
mdr_status mdr_be_zero_fused(mdr_backend *b, const mdr_zero_seg *segs, size_t n, uint64_t tokens,
                             const mdr_stage_desc *stage, mdr_stream s, void **node);
mdr_status mdr_be_fused_node_update(mdr_backend *b, void *exec, void *node, const mdr_zero_seg *rules,
                                    size_t n, uint64_t tokens, const mdr_stage_desc *stage);
mdr_status mdr_be_fused_inline_launch(mdr_backend *b, const mdr_zero_seg *segs, size_t n, uint64_t tokens,
                                      const mdr_stage_desc *stage, mdr_stream s, void **node,
                                      mdr_stage_inline_launch *out);
mdr_status mdr_be_fused_inline_update(mdr_backend *b, void *exec, void *node, const mdr_stage_inline_launch *l);
int mdr_be_has_host_fn(const mdr_backend *b);
int mdr_be_has_mem_used(const mdr_backend *b);
int mdr_be_has_graph_nodes(const mdr_backend *b);
mdr_status mdr_be_mem_used(mdr_backend *b, size_t *used);
mdr_status mdr_be_graph_nodes(mdr_backend *b, void *graph, size_t *n);
mdr_status mdr_be_host_fn(mdr_backend *b, mdr_host_fn fn, const void *arg, size_t arg_bytes, mdr_stream s);
/* MDR_OK when the backend has no such slot. */
mdr_status mdr_be_take_pending_error(mdr_backend *b);
/* *ok = 1 when the backend has no such slot (it cannot tell). */
mdr_status mdr_be_is_device_memory(mdr_backend *b, mdr_dptr p, size_t n, int *ok);
/* The CUDA device of a CUDA backend, -1 for any other. */
int mdr_be_cuda_device(const mdr_backend *b);
/* 1 when a CUDA backend updates graph kernel nodes through the driver's
 * entry point (src/backend_cuda.c), 0 when through the runtime's call or
 * for any other backend. */
int mdr_be_cuda_driver_node_update(const mdr_backend *b);

/* Run the fused plan on the CPU through the shared mapping of zero_map.h:
 * what the host backend's zero_fused slot does. The stage's addresses are
 * host addresses there. Exposed for the tests of the mapping. */
void mdr_zero_fused_host(const mdr_zero_seg *segs, size_t n, uint64_t tokens,
                         const mdr_stage_desc *stage);
/* The same for a launch whose stage may be INLINE: its slot image is at
 * inline_slot (the launch's parameter copy; NULL for ring launches), and
 * inline_table, when not NULL, is the launch's own copy of the input table
 * (MDR_STAGE_INLINE_TABLE entries, a larger class's room): an entry whose
 * destination is not 0 is read in place of stage->inputs' entry, as the
 * larger-class kernels read the table in their parameters (a room left
 * zeroed: stage->inputs serves). */
void mdr_zero_fused_host_inline(const mdr_zero_seg *segs, size_t n, uint64_t tokens,
                                const mdr_stage_desc *stage, const void *inline_slot, const void *inline_table);

/* Tests only (not public API): hold (on != 0) or release (0) the host
 * backend's streams, as a stalled GPU would. While held, every op enqueued
 * on any of its streams (graph launches included) waits, with its own copy
 * of its parameters, in one queue in enqueue order; stream_query reports
 * not idle and synchronize refuses (it would wait forever). Releasing runs
 * the queue in order and returns the first failing op's status. A held
 * backend is driven by one thread. MDR_ERR_UNSUPPORTED for a backend that
 * is not the host backend. */
mdr_status mdr_backend_host_hold(mdr_backend *b, int on);

#ifdef __cplusplus
}
#endif
#endif
