/* fault_backend.c — see fault_backend.h. Every slot forwards to the inner
 * backend unless a failure is due; failures are reported like real ones
 * (status + last-error text). */
#include "fault_backend.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct fault_backend {
  mdr_backend base;
  mdr_backend *inner;
  long calls, fail_at, injected;
  int fail_kind;
  long live;
  long per_op[MDR_OP_COUNT];
  int pending;               /* an application error left pending (fault_backend_leave_pending) */
  mdr_dptr host_lo, host_hi; /* is_device_memory says "not device memory" inside */
  mdr_stage_desc inline_stage; /* the stage of the last inline launch passed on */
  mdr_stage_desc fused_stage;  /* the stage of the last fused launch passed on (zero_fused) */
  mdr_stage_inline_launch inline_update; /* the launch of the last inline update passed on */
} fault_backend;

static fault_backend *F(mdr_backend *b) { return (fault_backend *)b; }
static const fault_backend *CF(const mdr_backend *b) { return (const fault_backend *)b; }

static const char *k_op_names[MDR_OP_COUNT] = {
    "alloc_device", "free_device", "alloc_pinned", "free_pinned", "memset_async",
    "copy_h2d", "copy_d2h", "fill", "stream_create", "stream_destroy",
    "synchronize", "stream_query", "capture_begin", "capture_end", "is_capturing",
    "graph_instantiate", "graph_launch", "graph_destroy", "exec_destroy",
    "zero_fused", "fused_node_update", "host_fn", "mem_used", "graph_nodes",
    "fused_inline_launch", "fused_inline_update"};

/* Count a fallible call; return a failure status when one is due. */
static mdr_status due(mdr_backend *b, mdr_op op) {
  fault_backend *f = F(b);
  f->calls++;
  f->per_op[op]++;
  if ((f->fail_at > 0 && f->calls == f->fail_at) || f->fail_kind == (int)op) {
    f->injected++;
    mdr_status st = (op == MDR_OP_ALLOC_DEVICE || op == MDR_OP_ALLOC_PINNED) ? MDR_ERR_OUT_OF_MEMORY
                    : (op == MDR_OP_CAPTURE_END || op == MDR_OP_GRAPH_INSTANTIATE) ? MDR_ERR_CAPTURE
                                                                                    : MDR_ERR_BACKEND;
    return mdr_backend_fail(b, st, "fault: injected failure of %s (call %ld)", k_op_names[op],
                            f->calls);
  }
  return MDR_OK;
}

/* Forward the inner backend's error text when it fails. */
static mdr_status pass(mdr_backend *b, mdr_status st) {
  if (st != MDR_OK) mdr_backend_fail(b, st, "%s", mdr_backend_last_error(F(b)->inner));
  return st;
}

#define FORWARD(op, call)                 \
  do {                                    \
    mdr_status st_ = due(b, op);          \
    if (st_ != MDR_OK) return st_;        \
    return pass(b, F(b)->inner->ops->call); \
  } while (0)

#define I (F(b)->inner)

static mdr_status f_alloc_device(mdr_backend *b, size_t n, mdr_dptr *out) {
  mdr_status st = due(b, MDR_OP_ALLOC_DEVICE);
  if (st == MDR_OK) st = pass(b, I->ops->alloc_device(I, n, out));
  if (st == MDR_OK) F(b)->live++;
  return st;
}
static void f_free_device(mdr_backend *b, mdr_dptr p) {
  F(b)->per_op[MDR_OP_FREE_DEVICE]++;
  F(b)->live--;
  I->ops->free_device(I, p);
}
static mdr_status f_alloc_pinned(mdr_backend *b, size_t n, void **h, mdr_dptr *d) {
  mdr_status st = due(b, MDR_OP_ALLOC_PINNED);
  if (st == MDR_OK) st = pass(b, I->ops->alloc_pinned(I, n, h, d));
  if (st == MDR_OK) F(b)->live++;
  return st;
}
static void f_free_pinned(mdr_backend *b, void *h) {
  F(b)->per_op[MDR_OP_FREE_PINNED]++;
  F(b)->live--;
  I->ops->free_pinned(I, h);
}
static mdr_status f_memset_async(mdr_backend *b, mdr_dptr d, unsigned char v, size_t n, mdr_stream s) {
  FORWARD(MDR_OP_MEMSET_ASYNC, memset_async(I, d, v, n, s));
}
static mdr_status f_copy_h2d(mdr_backend *b, mdr_dptr d, const void *src, size_t n) {
  FORWARD(MDR_OP_COPY_H2D, copy_h2d(I, d, src, n));
}
static mdr_status f_copy_d2h(mdr_backend *b, void *dst, mdr_dptr src, size_t n) {
  FORWARD(MDR_OP_COPY_D2H, copy_d2h(I, dst, src, n));
}
static mdr_status f_fill(mdr_backend *b, mdr_dptr d, unsigned char v, size_t n) {
  FORWARD(MDR_OP_FILL, fill(I, d, v, n));
}
static mdr_status f_stream_create(mdr_backend *b, mdr_stream *out) {
  mdr_status st = due(b, MDR_OP_STREAM_CREATE);
  if (st == MDR_OK) st = pass(b, I->ops->stream_create(I, out));
  if (st == MDR_OK) F(b)->live++;
  return st;
}
static void f_stream_destroy(mdr_backend *b, mdr_stream s) {
  F(b)->live--;
  I->ops->stream_destroy(I, s);
}
static mdr_status f_synchronize(mdr_backend *b, mdr_stream s) {
  FORWARD(MDR_OP_SYNCHRONIZE, synchronize(I, s));
}
static mdr_status f_stream_query(mdr_backend *b, mdr_stream s, int *idle) {
  FORWARD(MDR_OP_STREAM_QUERY, stream_query(I, s, idle));
}
static mdr_status f_capture_begin(mdr_backend *b, mdr_stream s) {
  FORWARD(MDR_OP_CAPTURE_BEGIN, capture_begin(I, s));
}
/* A failed capture_end must still end the capture on the inner backend, as
 * a real failure would: end it, drop the graph, report the failure. */
static mdr_status f_capture_end(mdr_backend *b, mdr_stream s, void **g) {
  mdr_status st = due(b, MDR_OP_CAPTURE_END);
  void *graph = NULL;
  mdr_status inner = I->ops->capture_end(I, s, &graph);
  if (st != MDR_OK) {
    if (inner == MDR_OK) I->ops->graph_destroy(I, graph);
    return st;
  }
  if (inner != MDR_OK) return pass(b, inner);
  F(b)->live++;
  *g = graph;
  return MDR_OK;
}
static mdr_status f_is_capturing(mdr_backend *b, mdr_stream s, int *c) {
  FORWARD(MDR_OP_IS_CAPTURING, is_capturing(I, s, c));
}
static mdr_status f_graph_instantiate(mdr_backend *b, void *g, mdr_stream up, void **x) {
  mdr_status st = due(b, MDR_OP_GRAPH_INSTANTIATE);
  if (st == MDR_OK) st = pass(b, I->ops->graph_instantiate(I, g, up, x));
  if (st == MDR_OK) F(b)->live++;
  return st;
}
static mdr_status f_graph_launch(mdr_backend *b, void *x, mdr_stream s) {
  FORWARD(MDR_OP_GRAPH_LAUNCH, graph_launch(I, x, s));
}
static void f_graph_destroy(mdr_backend *b, void *g) {
  F(b)->live--;
  I->ops->graph_destroy(I, g);
}
static void f_exec_destroy(mdr_backend *b, void *x) {
  F(b)->live--;
  I->ops->exec_destroy(I, x);
}
static mdr_status f_zero_fused(mdr_backend *b, const mdr_zero_seg *segs, size_t n, uint64_t t,
                               const mdr_stage_desc *st, mdr_stream s, void **node) {
  mdr_status due_st = due(b, MDR_OP_ZERO_FUSED);
  if (due_st != MDR_OK) return due_st;
  if (st) F(b)->fused_stage = *st;
  mdr_status r = pass(b, I->ops->zero_fused(I, segs, n, t, st, s, node));
  if (r == MDR_OK && F(b)->pending) {
    /* as CUDA's launch check reports an error left pending before a launch
     * that itself succeeded: the launch ran, the call says it failed */
    F(b)->pending = 0;
    return mdr_backend_fail(b, MDR_ERR_BACKEND, "fault: the application's pending error, reported by a launch");
  }
  return r;
}
static mdr_status f_take_pending_error(mdr_backend *b) {
  if (F(b)->pending) {
    F(b)->pending = 0;
    return mdr_backend_fail(b, MDR_ERR_BACKEND,
                            "fault: an error was pending before this mdr call, left by earlier work outside mdr");
  }
  return I->ops->take_pending_error ? pass(b, I->ops->take_pending_error(I)) : MDR_OK;
}
static mdr_status f_is_device_memory(mdr_backend *b, mdr_dptr p, size_t n, int *ok) {
  if (F(b)->host_hi && p < F(b)->host_hi && p + n > F(b)->host_lo) {
    *ok = 0;
    return MDR_OK;
  }
  if (!I->ops->is_device_memory) {
    *ok = 1;
    return MDR_OK;
  }
  return pass(b, I->ops->is_device_memory(I, p, n, ok));
}
static mdr_status f_fused_node_update(mdr_backend *b, void *x, void *node, const mdr_zero_seg *segs,
                                      size_t n, uint64_t t, const mdr_stage_desc *st) {
  FORWARD(MDR_OP_FUSED_NODE_UPDATE, fused_node_update(I, x, node, segs, n, t, st));
}
static mdr_status f_fused_inline_launch(mdr_backend *b, const mdr_zero_seg *segs, size_t n, uint64_t t,
                                        const mdr_stage_desc *st, mdr_stream s, void **node,
                                        mdr_stage_inline_launch *out) {
  mdr_status due_st = due(b, MDR_OP_FUSED_INLINE_LAUNCH);
  if (due_st != MDR_OK) return due_st;
  if (st) F(b)->inline_stage = *st;
  mdr_status r = pass(b, I->ops->fused_inline_launch(I, segs, n, t, st, s, node, out));
  if (r == MDR_OK && F(b)->pending) { /* as f_zero_fused: the launch ran, the check reports the pending error */
    F(b)->pending = 0;
    return mdr_backend_fail(b, MDR_ERR_BACKEND, "fault: the application's pending error, reported by a launch");
  }
  return r;
}
static mdr_status f_fused_inline_update(mdr_backend *b, void *x, void *node, const mdr_stage_inline_launch *l) {
  if (l) { /* the launch's fields and the parameters it passes, not the whole buffer (some 18 KB) */
    mdr_stage_inline_launch *u = &F(b)->inline_update;
    const size_t head = offsetof(mdr_stage_inline_launch, param);
    const size_t bytes = l->param_bytes < sizeof u->param ? (size_t)l->param_bytes : sizeof u->param;
    const size_t had = u->param_bytes < sizeof u->param ? (size_t)u->param_bytes : sizeof u->param;
    memcpy(u, l, head + bytes);
    if (had > bytes) memset((unsigned char *)u->param + bytes, 0, had - bytes); /* zero past them, as before */
  }
  FORWARD(MDR_OP_FUSED_INLINE_UPDATE, fused_inline_update(I, x, node, l));
}
static mdr_status f_host_fn(mdr_backend *b, mdr_host_fn fn, const void *arg, size_t bytes, mdr_stream s) {
  FORWARD(MDR_OP_HOST_FN, host_fn(I, fn, arg, bytes, s));
}
/* Queries the library uses best-effort (graph memory and node counts):
 * passed through, counted, never failed. */
static mdr_status f_mem_used(mdr_backend *b, size_t *used) {
  F(b)->per_op[MDR_OP_MEM_USED]++;
  return pass(b, I->ops->mem_used(I, used));
}
static mdr_status f_graph_nodes(mdr_backend *b, void *g, size_t *n) {
  F(b)->per_op[MDR_OP_GRAPH_NODES]++;
  return pass(b, I->ops->graph_nodes(I, g, n));
}
static void f_destroy(mdr_backend *b) { free(b); }

static const struct mdr_backend_ops fault_ops = {
    .name = "fault",
    .destroy = f_destroy,
    .alloc_device = f_alloc_device,
    .free_device = f_free_device,
    .alloc_pinned = f_alloc_pinned,
    .free_pinned = f_free_pinned,
    .memset_async = f_memset_async,
    .copy_h2d = f_copy_h2d,
    .copy_d2h = f_copy_d2h,
    .fill = f_fill,
    .stream_create = f_stream_create,
    .stream_destroy = f_stream_destroy,
    .synchronize = f_synchronize,
    .stream_query = f_stream_query,
    .capture_begin = f_capture_begin,
    .capture_end = f_capture_end,
    .is_capturing = f_is_capturing,
    .graph_instantiate = f_graph_instantiate,
    .graph_launch = f_graph_launch,
    .graph_destroy = f_graph_destroy,
    .exec_destroy = f_exec_destroy,
    .zero_fused = f_zero_fused,
    .fused_node_update = f_fused_node_update,
    .fused_inline_launch = f_fused_inline_launch,
    .fused_inline_update = f_fused_inline_update,
    .host_fn = f_host_fn,
    .mem_used = f_mem_used,
    .graph_nodes = f_graph_nodes,
    .take_pending_error = f_take_pending_error,
    .is_device_memory = f_is_device_memory,
};

mdr_status fault_backend_create(mdr_backend *inner, mdr_backend **out) {
  if (!inner || !out) return MDR_ERR_INVALID_ARGUMENT;
  fault_backend *f = calloc(1, sizeof *f);
  if (!f) return MDR_ERR_OUT_OF_MEMORY;
  mdr_backend_init_base(&f->base, &fault_ops);
  f->inner = inner;
  f->fail_kind = -1;
  *out = &f->base;
  return MDR_OK;
}

void fault_backend_fail_at(mdr_backend *f, long k) { F(f)->fail_at = k > 0 ? F(f)->calls + k : 0; }
void fault_backend_fail_kind(mdr_backend *f, int op) { F(f)->fail_kind = op; }
long fault_backend_calls(const mdr_backend *f) { return CF(f)->calls; }
long fault_backend_injected(const mdr_backend *f) { return CF(f)->injected; }
long fault_backend_calls_of(const mdr_backend *f, mdr_op op) { return CF(f)->per_op[op]; }
long fault_backend_live(const mdr_backend *f) { return CF(f)->live; }
mdr_stage_desc fault_backend_last_inline_stage(const mdr_backend *f) { return CF(f)->inline_stage; }
mdr_stage_desc fault_backend_last_fused_stage(const mdr_backend *f) { return CF(f)->fused_stage; }
const mdr_stage_inline_launch *fault_backend_last_inline_update(const mdr_backend *f) { return &CF(f)->inline_update; }
void fault_backend_leave_pending(mdr_backend *f) { F(f)->pending = 1; }
void fault_backend_host_range(mdr_backend *f, mdr_dptr lo, mdr_dptr hi) {
  F(f)->host_lo = lo;
  F(f)->host_hi = hi;
}
