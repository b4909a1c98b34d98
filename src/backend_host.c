/* backend_host.c — the host backend: device memory is host memory, streams
 * run each operation when it is enqueued, and a capture records operations
 * into a list that a graph launch replays in order.
 *
 * It mirrors the CUDA rules that the logic above depends on:
 *   - capture on the NULL (legacy) stream is refused (MDR_ERR_CAPTURE);
 *   - while any stream captures, a blocking call (copies, fill, synchronize
 *     of the capturing stream, allocation) fails and invalidates the capture,
 *     as in CUDA's thread-local capture mode; capture_end then fails with
 *     MDR_ERR_CAPTURE and the stream is usable again;
 *   - a copy node reads its (pinned) source when it runs, not when recorded;
 *   - a kernel's parameters are copied at launch: an inline fused launch
 *     (MDR_STAGE_INLINE) keeps its slot image in the op, a node update
 *     rewrites the exec's op, and an op already enqueued keeps its own copy;
 *   - an inline launch of a class past the small one keeps room for the
 *     input table in its parameters, read in place of the descriptor's
 *     table where the caller wrote it (its "argument" is the image, then
 *     that room);
 *   - a fused launch's stage work and its zeroing run in either order
 *     (zero_fused_host.c), as a GPU's blocks do.
 * Streams run each op when it is enqueued unless the backend is held
 * (mdr_backend_host_hold, for tests: a stalled GPU), when ops wait in one
 * queue, each a copy, until released.
 * Recording uses host heap memory: that is the emulation's own bookkeeping,
 * not a device allocation. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend_impl.h"
#include "mdr/arena.h" /* MDR_ZERO_PLAN_MAX */

typedef enum host_op_kind { HOST_OP_MEMSET, HOST_OP_COPY, HOST_OP_ZERO_FUSED, HOST_OP_FN } host_op_kind;

typedef struct host_op {
  host_op_kind kind;
  mdr_dptr dst;
  unsigned char value;
  size_t n;            /* bytes (memset, copy) or segments (zero_fused) */
  const void *src;     /* copy: pinned source, read at run time */
  mdr_zero_seg *segs;  /* zero_fused: owned copy of the plan */
  uint64_t tokens;
  int has_stage;
  mdr_stage_desc stage;
  uint64_t inline_slot[MDR_STAGE_INLINE_XXXL_BYTES / 8]; /* zero_fused with an INLINE stage: its slot image
                                                              (room for every class) */
  uint64_t inline_table[MDR_STAGE_INLINE_TABLE * sizeof(mdr_stage_input) / 8]; /* and, past the small class,
                                                              its input table (zeroed: the descriptor's serves) */
  mdr_host_fn fn;      /* fn: called with an owned copy of its argument */
  void *arg;
  size_t arg_bytes;
} host_op;

typedef struct host_list {
  host_op *ops;
  size_t len, cap;
  size_t exec_bytes; /* an exec: what it counts as holding (see host_mem_used) */
} host_list;

typedef struct host_stream {
  int capturing;
  int invalidated;
  host_list rec;
} host_stream;

typedef struct host_backend {
  mdr_backend base;
  _Atomic size_t exec_bytes; /* the "device memory" live execs hold: sizeof(host_op) per op */
  int held;                  /* mdr_backend_host_hold: ops wait in `pending` */
  host_list pending;         /* ops enqueued while held, in order, each an owned copy */
} host_backend;

/* The stream this thread is capturing, if any (CUDA's thread-local mode:
 * only the capturing thread's own blocking calls are illegal). */
static _Thread_local host_stream *tls_capture;

static void list_free(host_list *l) {
  for (size_t i = 0; i < l->len; i++) {
    free(l->ops[i].segs);
    free(l->ops[i].arg);
  }
  free(l->ops);
  l->ops = NULL;
  l->len = l->cap = 0;
}

static mdr_status list_push(mdr_backend *b, host_list *l, const host_op *op) {
  if (l->len == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 16;
    host_op *ops = realloc(l->ops, cap * sizeof *ops);
    if (!ops) return mdr_backend_fail(b, MDR_ERR_OUT_OF_MEMORY, "host: recording an op");
    l->ops = ops;
    l->cap = cap;
  }
  host_op copy = *op;
  if (op->kind == HOST_OP_ZERO_FUSED && op->n) {
    copy.segs = malloc(op->n * sizeof *op->segs);
    if (!copy.segs) return mdr_backend_fail(b, MDR_ERR_OUT_OF_MEMORY, "host: recording a plan");
    memcpy(copy.segs, op->segs, op->n * sizeof *op->segs);
  } else {
    copy.segs = NULL;
  }
  copy.arg = NULL;
  if (op->kind == HOST_OP_FN && op->arg_bytes) {
    copy.arg = malloc(op->arg_bytes);
    if (!copy.arg) {
      free(copy.segs);
      return mdr_backend_fail(b, MDR_ERR_OUT_OF_MEMORY, "host: recording a host function");
    }
    memcpy(copy.arg, op->arg, op->arg_bytes);
  }
  l->ops[l->len++] = copy;
  return MDR_OK;
}

/* The host's inline launch: the op keeps the stage and, as the kernel's
 * parameter copy, the slot image and (past the small class) the input
 * table's room; its "argument" (what the cache writes a step's image and
 * table into) is the image, then that room, and its "kernel" this marker. */
static const char k_host_inline_kernel;

/* The room for the input table that a larger-class inline launch keeps in
 * its parameters, as the CUDA backend's does. */
#define HOST_TABLE_BYTES ((uint64_t)MDR_STAGE_INLINE_TABLE * sizeof(mdr_stage_input))
_Static_assert(MDR_STAGE_INLINE_XXXL_BYTES + MDR_STAGE_INLINE_TABLE * sizeof(mdr_stage_input) <=
                   MDR_STAGE_INLINE_PARAM_MAX,
               "the largest class and the table's room fit an inline launch's argument");

/* The image class of an inline launch, as the CUDA backend picks it
 * (mdr_stage_inline_class with a table that serves the launch or not), 0
 * when no class holds it. */
static uint64_t host_inline_class(const mdr_stage_desc *st, size_t n, uint64_t tokens) {
  return mdr_stage_inline_class(st, mdr_stage_table_ok(st, n, tokens));
}

/* Whether an op is an inline launch whose parameters hold the table's room. */
static int op_table_room(const host_op *op) {
  return op->kind == HOST_OP_ZERO_FUSED && op->has_stage && (op->stage.flags & MDR_STAGE_INLINE) &&
         host_inline_class(&op->stage, op->n, op->tokens) > MDR_STAGE_INLINE_BYTES;
}

static mdr_status op_run(mdr_backend *b, const host_op *op) {
  switch (op->kind) {
    case HOST_OP_MEMSET: memset((void *)(uintptr_t)op->dst, op->value, op->n); break;
    case HOST_OP_COPY: memcpy((void *)(uintptr_t)op->dst, op->src, op->n); break;
    case HOST_OP_ZERO_FUSED:
      mdr_zero_fused_host_inline(op->segs, op->n, op->tokens, op->has_stage ? &op->stage : NULL,
                                 op->inline_slot, op_table_room(op) ? op->inline_table : NULL);
      break;
    case HOST_OP_FN: return op->fn(b, op->arg);
  }
  return MDR_OK;
}

/* Run an op now, record it when `s` is capturing, or queue a copy of it
 * while the backend is held. */
static mdr_status submit(mdr_backend *b, mdr_stream s, const host_op *op) {
  host_stream *hs = s;
  if (hs && hs->capturing) {
    if (hs->invalidated) return mdr_backend_fail(b, MDR_ERR_CAPTURE, "host: capture invalidated");
    return list_push(b, &hs->rec, op);
  }
  host_backend *h = (host_backend *)b;
  if (h->held) return list_push(b, &h->pending, op);
  return op_run(b, op);
}

/* Ops still waiting in a held backend's queue. */
static int host_pending(const mdr_backend *b) { return ((const host_backend *)b)->pending.len != 0; }

/* A blocking call or an allocation by a thread that is capturing is illegal
 * (CUDA thread-local mode): it fails and invalidates that capture. */
static mdr_status check_not_capturing(mdr_backend *b, const char *what) {
  if (!tls_capture) return MDR_OK;
  tls_capture->invalidated = 1;
  return mdr_backend_fail(b, MDR_ERR_CAPTURE, "host: %s while this thread captures", what);
}

static mdr_status host_alloc_device(mdr_backend *b, size_t n, mdr_dptr *out) {
  mdr_status st = check_not_capturing(b, "allocation");
  if (st != MDR_OK) return st;
  size_t rounded = (n + 255) / 256 * 256;
  if (n == 0 || rounded < n)
    return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT, "host: allocation of %zu bytes", n);
  void *p = aligned_alloc(256, rounded);
  if (!p) return mdr_backend_fail(b, MDR_ERR_OUT_OF_MEMORY, "host: out of memory (%zu bytes)", n);
  *out = (mdr_dptr)(uintptr_t)p;
  return MDR_OK;
}

static void host_free_device(mdr_backend *b, mdr_dptr p) {
  (void)b;
  free((void *)(uintptr_t)p);
}

static mdr_status host_alloc_pinned(mdr_backend *b, size_t n, void **host, mdr_dptr *dev) {
  mdr_dptr p = 0;
  mdr_status st = host_alloc_device(b, n, &p);
  if (st != MDR_OK) return st;
  *host = (void *)(uintptr_t)p;
  *dev = p;
  return MDR_OK;
}

static void host_free_pinned(mdr_backend *b, void *host) {
  (void)b;
  free(host);
}

static mdr_status host_memset_async(mdr_backend *b, mdr_dptr dst, unsigned char v, size_t n,
                                    mdr_stream s) {
  host_op op = {.kind = HOST_OP_MEMSET, .dst = dst, .value = v, .n = n};
  return submit(b, s, &op);
}

static mdr_status host_copy_h2d(mdr_backend *b, mdr_dptr dst, const void *src, size_t n) {
  mdr_status st = check_not_capturing(b, "copy_h2d");
  if (st != MDR_OK) return st;
  memcpy((void *)(uintptr_t)dst, src, n);
  return MDR_OK;
}

static mdr_status host_copy_d2h(mdr_backend *b, void *dst, mdr_dptr src, size_t n) {
  mdr_status st = check_not_capturing(b, "copy_d2h");
  if (st != MDR_OK) return st;
  memcpy(dst, (const void *)(uintptr_t)src, n);
  return MDR_OK;
}

static mdr_status host_fill(mdr_backend *b, mdr_dptr dst, unsigned char v, size_t n) {
  mdr_status st = check_not_capturing(b, "fill");
  if (st != MDR_OK) return st;
  memset((void *)(uintptr_t)dst, v, n);
  return MDR_OK;
}

static mdr_status host_stream_create(mdr_backend *b, mdr_stream *out) {
  host_stream *s = calloc(1, sizeof *s);
  if (!s) return mdr_backend_fail(b, MDR_ERR_OUT_OF_MEMORY, "host: stream");
  *out = s;
  return MDR_OK;
}

static void host_stream_destroy(mdr_backend *b, mdr_stream s) {
  (void)b;
  host_stream *hs = s;
  if (tls_capture == hs) tls_capture = NULL;
  list_free(&hs->rec);
  free(hs);
}

static mdr_status host_synchronize(mdr_backend *b, mdr_stream s) {
  (void)s;
  mdr_status st = check_not_capturing(b, "synchronize");
  if (st == MDR_OK && host_pending(b))
    st = mdr_backend_fail(b, MDR_ERR_STATE, "host: synchronize while held with work queued (it would never return)");
  return st;
}

static mdr_status host_stream_query(mdr_backend *b, mdr_stream s, int *idle) {
  (void)s;
  *idle = !host_pending(b);
  return MDR_OK;
}

static mdr_status host_capture_begin(mdr_backend *b, mdr_stream s) {
  host_stream *hs = s;
  if (!hs) return mdr_backend_fail(b, MDR_ERR_CAPTURE, "host: capture on the legacy (NULL) stream");
  if (hs->capturing || tls_capture)
    return mdr_backend_fail(b, MDR_ERR_STATE, "host: a capture is already under way");
  hs->capturing = 1;
  hs->invalidated = 0;
  list_free(&hs->rec);
  tls_capture = hs;
  return MDR_OK;
}

static mdr_status host_capture_end(mdr_backend *b, mdr_stream s, void **graph) {
  host_stream *hs = s;
  if (!hs || !hs->capturing)
    return mdr_backend_fail(b, MDR_ERR_STATE, "host: capture_end on a stream not capturing");
  hs->capturing = 0;
  if (tls_capture == hs) tls_capture = NULL;
  if (hs->invalidated) {
    list_free(&hs->rec);
    return mdr_backend_fail(b, MDR_ERR_CAPTURE, "host: capture was invalidated");
  }
  host_list *g = malloc(sizeof *g);
  if (!g) {
    list_free(&hs->rec);
    return mdr_backend_fail(b, MDR_ERR_OUT_OF_MEMORY, "host: graph");
  }
  *g = hs->rec;
  hs->rec = (host_list){0};
  *graph = g;
  return MDR_OK;
}

static mdr_status host_is_capturing(mdr_backend *b, mdr_stream s, int *capturing) {
  (void)b;
  host_stream *hs = s;
  *capturing = hs ? hs->capturing : 0;
  return MDR_OK;
}

static mdr_status host_graph_instantiate(mdr_backend *b, void *graph, mdr_stream upload, void **exec) {
  (void)upload; /* nothing to upload: an exec is host memory */
  const host_list *g = graph;
  host_list *e = calloc(1, sizeof *e);
  if (!e) return mdr_backend_fail(b, MDR_ERR_OUT_OF_MEMORY, "host: exec");
  for (size_t i = 0; i < g->len; i++) {
    mdr_status st = list_push(b, e, &g->ops[i]);
    if (st != MDR_OK) {
      list_free(e);
      free(e);
      return st;
    }
  }
  e->exec_bytes = e->len * sizeof(host_op);
  ((host_backend *)b)->exec_bytes += e->exec_bytes;
  *exec = e;
  return MDR_OK;
}


static mdr_status host_graph_launch(mdr_backend *b, void *exec, mdr_stream s) {
  const host_list *e = exec;
  for (size_t i = 0; i < e->len; i++) {
    mdr_status st = submit(b, s, &e->ops[i]);
    if (st != MDR_OK) return st;
  }
  return MDR_OK;
}

static void host_list_destroy(mdr_backend *b, void *list) {
  (void)b;
  list_free(list);
  free(list);
}

static void host_exec_destroy(mdr_backend *b, void *exec) {
  ((host_backend *)b)->exec_bytes -= ((host_list *)exec)->exec_bytes;
  host_list_destroy(b, exec);
}

/* The host backend's model of device memory in use: what live execs hold,
 * so that per-graph memory and the cache's byte cap are tested in CI. */
static mdr_status host_mem_used(mdr_backend *b, size_t *used) {
  *used = ((host_backend *)b)->exec_bytes;
  return MDR_OK;
}

static mdr_status host_graph_nodes(mdr_backend *b, void *graph, size_t *n) {
  (void)b;
  *n = ((const host_list *)graph)->len;
  return MDR_OK;
}

/* A node is the 1-based position of the op in the recorded list; an exec
 * holds the same list, so the position names the same op there. */
static mdr_status host_zero_fused(mdr_backend *b, const mdr_zero_seg *segs, size_t n, uint64_t tokens,
                                  const mdr_stage_desc *stage, mdr_stream s, void **node) {
  host_stream *hs = s;
  if (node && !(hs && hs->capturing))
    return mdr_backend_fail(b, MDR_ERR_CAPTURE, "host: the fused launch's node asked outside a capture");
  if (node && !(stage && (stage->flags & MDR_STAGE_TABLE)))
    return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT, "host: a node is kept for a plan-table launch only");
  if (n == 0 && !stage) return MDR_OK;
  if (stage && (stage->flags & MDR_STAGE_TABLE) && !mdr_stage_table_ok(stage, n, tokens))
    return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT, "host: plan table launch of %zu rules at %llu tokens",
                            n, (unsigned long long)tokens);
  host_op op = {.kind = HOST_OP_ZERO_FUSED,
                .segs = (mdr_zero_seg *)segs,
                .n = n,
                .tokens = tokens,
                .has_stage = stage != NULL};
  if (stage) op.stage = *stage;
  mdr_status st = submit(b, s, &op);
  if (st == MDR_OK && node) *node = (void *)(uintptr_t)hs->rec.len;
  return st;
}

static mdr_status host_fused_node_update(mdr_backend *b, void *exec, void *node, const mdr_zero_seg *rules,
                                         size_t n, uint64_t tokens, const mdr_stage_desc *stage) {
  host_list *e = exec;
  size_t i = (size_t)(uintptr_t)node;
  if (i == 0 || i > e->len || e->ops[i - 1].kind != HOST_OP_ZERO_FUSED)
    return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT, "host: not a fused node");
  if (!stage || !(stage->flags & MDR_STAGE_TABLE) || !mdr_stage_table_ok(stage, n, tokens))
    return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT, "host: plan table update of %zu rules to %llu tokens",
                            n, (unsigned long long)tokens);
  host_op *op = &e->ops[i - 1];
  if (n > op->n) {
    mdr_zero_seg *more = realloc(op->segs, n * sizeof *more);
    if (!more) return mdr_backend_fail(b, MDR_ERR_OUT_OF_MEMORY, "host: updating a plan");
    op->segs = more;
  }
  if (n) memcpy(op->segs, rules, n * sizeof *rules);
  op->n = n;
  op->tokens = tokens;
  op->has_stage = 1;
  op->stage = *stage;
  return MDR_OK;
}

static mdr_status host_fused_inline_launch(mdr_backend *b, const mdr_zero_seg *segs, size_t n, uint64_t tokens,
                                           const mdr_stage_desc *stage, mdr_stream s, void **node,
                                           mdr_stage_inline_launch *out) {
  host_stream *hs = s;
  const uint32_t not_with = MDR_STAGE_ADVANCE | MDR_STAGE_DYNAMIC | MDR_STAGE_TABLE; /* DEVICE_IDS may join */
  if (node && !(hs && hs->capturing))
    return mdr_backend_fail(b, MDR_ERR_CAPTURE, "host: the inline launch's node asked outside a capture");
  if (!stage || (stage->flags & (MDR_STAGE_FETCH | MDR_STAGE_INLINE)) != (MDR_STAGE_FETCH | MDR_STAGE_INLINE) ||
      (stage->flags & not_with) || n > MDR_ZERO_PLAN_MAX)
    return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT,
                            "host: an inline launch takes FETCH | INLINE (and DEVICE_IDS) alone and at most %d "
                            "segments (flags %#x, %zu segments)",
                            MDR_ZERO_PLAN_MAX, stage ? stage->flags : 0u, n);
  const uint64_t img = host_inline_class(stage, n, tokens);
  if (img == 0)
    return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT,
                            "host: an inline image of %u bytes takes the table form and at most %u bytes",
                            stage->inline_bytes, MDR_STAGE_INLINE_XXXL_BYTES);
  host_op op = {.kind = HOST_OP_ZERO_FUSED,
                .segs = (mdr_zero_seg *)segs,
                .n = n,
                .tokens = tokens,
                .has_stage = 1,
                .stage = *stage};
  mdr_status st = submit(b, s, &op);
  if (st != MDR_OK) return st;
  if (node) *node = (void *)(uintptr_t)hs->rec.len;
  memset(out, 0, sizeof *out);
  out->func = &k_host_inline_kernel;
  out->grid[0] = out->grid[1] = out->grid[2] = 1;
  out->block[0] = out->block[1] = out->block[2] = 1;
  out->param_bytes = img + (img > MDR_STAGE_INLINE_BYTES ? HOST_TABLE_BYTES : 0);
  out->slot_offset = 0;
  out->table_offset = img > MDR_STAGE_INLINE_BYTES ? img : 0;
  return MDR_OK;
}

static mdr_status host_fused_inline_update(mdr_backend *b, void *exec, void *node, const mdr_stage_inline_launch *l) {
  host_list *e = exec;
  size_t i = (size_t)(uintptr_t)node;
  if (i == 0 || i > e->len || e->ops[i - 1].kind != HOST_OP_ZERO_FUSED || !e->ops[i - 1].has_stage ||
      !(e->ops[i - 1].stage.flags & MDR_STAGE_INLINE))
    return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT, "host: not an inline fused node");
  const host_op *op = &e->ops[i - 1];
  const uint64_t img = host_inline_class(&op->stage, op->n, op->tokens);
  const uint64_t room = img > MDR_STAGE_INLINE_BYTES ? HOST_TABLE_BYTES : 0;
  if (l->func != &k_host_inline_kernel || img == 0 || l->param_bytes != img + room || l->slot_offset != 0 ||
      l->table_offset != (room ? img : 0))
    return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT, "host: not the host's inline launch");
  memcpy(e->ops[i - 1].inline_slot, l->param, img);
  if (room) memcpy(e->ops[i - 1].inline_table, (const unsigned char *)l->param + img, room);
  return MDR_OK;
}

static mdr_status host_host_fn(mdr_backend *b, mdr_host_fn fn, const void *arg, size_t arg_bytes,
                               mdr_stream s) {
  host_op op = {.kind = HOST_OP_FN, .fn = fn, .arg = (void *)arg, .arg_bytes = arg_bytes};
  return submit(b, s, &op);
}

static void host_destroy(mdr_backend *b) {
  list_free(&((host_backend *)b)->pending); /* never released: dropped, as a reset device's queue */
  free(b);
}

static const struct mdr_backend_ops host_ops = {
    .name = "host",
    .destroy = host_destroy,
    .alloc_device = host_alloc_device,
    .free_device = host_free_device,
    .alloc_pinned = host_alloc_pinned,
    .free_pinned = host_free_pinned,
    .memset_async = host_memset_async,
    .copy_h2d = host_copy_h2d,
    .copy_d2h = host_copy_d2h,
    .fill = host_fill,
    .stream_create = host_stream_create,
    .stream_destroy = host_stream_destroy,
    .synchronize = host_synchronize,
    .stream_query = host_stream_query,
    .capture_begin = host_capture_begin,
    .capture_end = host_capture_end,
    .is_capturing = host_is_capturing,
    .graph_instantiate = host_graph_instantiate,
    .graph_launch = host_graph_launch,
    .graph_destroy = host_list_destroy,
    .exec_destroy = host_exec_destroy,
    .zero_fused = host_zero_fused,
    .fused_node_update = host_fused_node_update,
    .fused_inline_launch = host_fused_inline_launch,
    .fused_inline_update = host_fused_inline_update,
    .host_fn = host_host_fn,
    .mem_used = host_mem_used,
    .graph_nodes = host_graph_nodes,
};

mdr_status mdr_backend_host_create(mdr_backend **out) {
  if (!out) return MDR_ERR_INVALID_ARGUMENT;
  *out = NULL;
  host_backend *h = calloc(1, sizeof *h);
  if (!h) return MDR_ERR_OUT_OF_MEMORY;
  mdr_backend_init_base(&h->base, &host_ops);
  *out = &h->base;
  return MDR_OK;
}

mdr_status mdr_backend_host_hold(mdr_backend *b, int on) {
  if (!b) return MDR_ERR_INVALID_ARGUMENT;
  if (b->ops != &host_ops)
    return mdr_backend_fail(b, MDR_ERR_UNSUPPORTED, "host hold: backend %s is not the host backend",
                            mdr_be_name(b));
  host_backend *h = (host_backend *)b;
  h->held = on != 0;
  if (on) return MDR_OK;
  mdr_status first = MDR_OK;
  for (size_t i = 0; i < h->pending.len; i++) {
    const mdr_status st = op_run(b, &h->pending.ops[i]);
    if (first == MDR_OK) first = st;
  }
  list_free(&h->pending);
  return first;
}
