/* backend.c — the public backend functions and the checked entry points the
 * rest of the library calls (mdr_be_*). This is the only file that reads a
 * backend's vtable: every public function forwards to an entry point, every
 * entry point to its slot. */
#include <stdio.h>
#include <string.h>

#include "backend_impl.h"

/* The last-error texts are per thread and per backend, so threads sharing a
 * backend never write one buffer at once: each thread keeps the texts of the
 * MDR_ERROR_SLOTS backends it most recently saw fail. */
enum { MDR_ERROR_SLOTS = 8 };
typedef struct error_slot {
  uint64_t serial; /* the backend's serial; 0: free */
  unsigned long long used; /* this thread's failure count when last written */
  char text[MDR_BACKEND_ERROR_MAX];
} error_slot;
static _Thread_local error_slot tls_errors[MDR_ERROR_SLOTS];
static _Thread_local unsigned long long tls_failures;

static _Atomic uint64_t g_next_serial = 1;

void mdr_backend_init_base(mdr_backend *b, const struct mdr_backend_ops *ops) {
  b->ops = ops;
  b->serial = g_next_serial++;
}

static error_slot *error_slot_of(const mdr_backend *b, int create) {
  error_slot *oldest = &tls_errors[0];
  for (int i = 0; i < MDR_ERROR_SLOTS; i++) {
    if (tls_errors[i].serial == b->serial) return &tls_errors[i];
    if (tls_errors[i].used < oldest->used) oldest = &tls_errors[i];
  }
  if (!create) return NULL;
  oldest->serial = b->serial;
  oldest->text[0] = '\0';
  return oldest;
}

mdr_status mdr_backend_fail(mdr_backend *b, mdr_status st, const char *fmt, ...) {
  if (b) {
    error_slot *e = error_slot_of(b, 1);
    e->used = ++tls_failures;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->text, sizeof e->text, fmt, ap);
    va_end(ap);
  }
  return st;
}

unsigned long long mdr_backend_failures(void) { return tls_failures; }

void mdr_backend_destroy(mdr_backend *b) {
  if (!b) return;
  error_slot *e = error_slot_of(b, 0);
  if (e) e->serial = 0;
  b->ops->destroy(b);
}

const char *mdr_backend_name(const mdr_backend *b) { return b ? b->ops->name : "none"; }

const char *mdr_backend_last_error(const mdr_backend *b) {
  const error_slot *e = b ? error_slot_of(b, 0) : NULL;
  return e ? e->text : "";
}

mdr_status mdr_backend_stream_create(mdr_backend *b, mdr_stream *out) {
  if (!b) return MDR_ERR_INVALID_ARGUMENT;
  if (!out) return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT, "stream create: NULL out");
  return b->ops->stream_create(b, out);
}

void mdr_backend_stream_destroy(mdr_backend *b, mdr_stream s) {
  if (b && s) b->ops->stream_destroy(b, s);
}

mdr_status mdr_backend_synchronize(mdr_backend *b, mdr_stream s) {
  if (!b) return MDR_ERR_INVALID_ARGUMENT;
  return mdr_be_synchronize(b, s);
}

/* Common checks of the blocking and enqueued transfers: n == 0 is a no-op, a
 * 0 address (or NULL host pointer) with n > 0 is invalid. */
#define MDR_CHECK_TRANSFER_(b, dev, host, n)                        \
  do {                                                               \
    if (!(b)) return MDR_ERR_INVALID_ARGUMENT;                       \
    if ((n) == 0) return MDR_OK;                                     \
    if (!(dev) || !(host))                                           \
      return mdr_backend_fail((b), MDR_ERR_INVALID_ARGUMENT,         \
                              "%s: NULL address with %zu bytes", __func__, (size_t)(n)); \
  } while (0)

mdr_status mdr_backend_copy_h2d(mdr_backend *b, mdr_dptr dst, const void *src, size_t n) {
  MDR_CHECK_TRANSFER_(b, dst, src, n);
  return mdr_be_copy_h2d(b, dst, src, n);
}

mdr_status mdr_backend_copy_d2h(mdr_backend *b, void *dst, mdr_dptr src, size_t n) {
  MDR_CHECK_TRANSFER_(b, src, dst, n);
  return b->ops->copy_d2h(b, dst, src, n);
}

mdr_status mdr_backend_fill(mdr_backend *b, mdr_dptr dst, unsigned char value, size_t n) {
  MDR_CHECK_TRANSFER_(b, dst, (void *)1, n);
  return mdr_be_fill(b, dst, value, n);
}

mdr_status mdr_backend_memset_async(mdr_backend *b, mdr_dptr dst, unsigned char value, size_t n,
                                    mdr_stream s) {
  MDR_CHECK_TRANSFER_(b, dst, (void *)1, n);
  return mdr_be_memset_async(b, dst, value, n, s);
}

mdr_status mdr_backend_alloc(mdr_backend *b, size_t n, mdr_dptr *out) {
  if (!b) return MDR_ERR_INVALID_ARGUMENT;
  if (!out || n == 0)
    return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT, "alloc: %s", !out ? "NULL out" : "0 bytes");
  return mdr_be_alloc_device(b, n, out);
}

void mdr_backend_free(mdr_backend *b, mdr_dptr p) {
  if (b) mdr_be_free_device(b, p);
}

/* ---- entry points for the library ---- */

#define MDR_REQUIRE_SLOT_(b, slot)                                                       \
  do {                                                                                   \
    if (!(b)->ops->slot)                                                                 \
      return mdr_backend_fail((b), MDR_ERR_UNSUPPORTED, "backend %s has no " #slot,     \
                              (b)->ops->name);                                           \
  } while (0)

const char *mdr_be_name(const mdr_backend *b) { return b->ops->name; }
int mdr_be_has_zero_fused(const mdr_backend *b) { return b->ops->zero_fused != NULL; }
int mdr_be_has_node_update(const mdr_backend *b) { return b->ops->fused_node_update != NULL; }
int mdr_be_has_inline(const mdr_backend *b) {
  return b->ops->fused_inline_launch != NULL && b->ops->fused_inline_update != NULL;
}

mdr_status mdr_be_alloc_device(mdr_backend *b, size_t n, mdr_dptr *out) {
  return b->ops->alloc_device(b, n, out);
}
void mdr_be_free_device(mdr_backend *b, mdr_dptr p) {
  if (p) b->ops->free_device(b, p);
}
mdr_status mdr_be_alloc_pinned(mdr_backend *b, size_t n, void **host, mdr_dptr *dev) {
  return b->ops->alloc_pinned(b, n, host, dev);
}
void mdr_be_free_pinned(mdr_backend *b, void *host) {
  if (host) b->ops->free_pinned(b, host);
}
mdr_status mdr_be_memset_async(mdr_backend *b, mdr_dptr dst, unsigned char v, size_t n, mdr_stream s) {
  return b->ops->memset_async(b, dst, v, n, s);
}
mdr_status mdr_be_copy_h2d(mdr_backend *b, mdr_dptr dst, const void *src, size_t n) {
  return b->ops->copy_h2d(b, dst, src, n);
}
mdr_status mdr_be_fill(mdr_backend *b, mdr_dptr dst, unsigned char v, size_t n) {
  return b->ops->fill(b, dst, v, n);
}
mdr_status mdr_be_synchronize(mdr_backend *b, mdr_stream s) { return b->ops->synchronize(b, s); }
mdr_status mdr_be_stream_query(mdr_backend *b, mdr_stream s, int *idle) {
  return b->ops->stream_query(b, s, idle);
}
mdr_status mdr_be_capture_begin(mdr_backend *b, mdr_stream s) { return b->ops->capture_begin(b, s); }
mdr_status mdr_be_capture_end(mdr_backend *b, mdr_stream s, void **graph) {
  return b->ops->capture_end(b, s, graph);
}
mdr_status mdr_be_is_capturing(mdr_backend *b, mdr_stream s, int *capturing) {
  return b->ops->is_capturing(b, s, capturing);
}
mdr_status mdr_be_graph_instantiate(mdr_backend *b, void *graph, mdr_stream upload, void **exec) {
  return b->ops->graph_instantiate(b, graph, upload, exec);
}
mdr_status mdr_be_graph_launch(mdr_backend *b, void *exec, mdr_stream s) {
  return b->ops->graph_launch(b, exec, s);
}
void mdr_be_graph_destroy(mdr_backend *b, void *graph) {
  if (graph) b->ops->graph_destroy(b, graph);
}
void mdr_be_exec_destroy(mdr_backend *b, void *exec) {
  if (exec) b->ops->exec_destroy(b, exec);
}
mdr_status mdr_be_zero_fused(mdr_backend *b, const mdr_zero_seg *segs, size_t n, uint64_t tokens,
                             const mdr_stage_desc *stage, mdr_stream s, void **node) {
  MDR_REQUIRE_SLOT_(b, zero_fused);
  return b->ops->zero_fused(b, segs, n, tokens, stage, s, node);
}
mdr_status mdr_be_fused_node_update(mdr_backend *b, void *exec, void *node, const mdr_zero_seg *rules,
                                    size_t n, uint64_t tokens, const mdr_stage_desc *stage) {
  MDR_REQUIRE_SLOT_(b, fused_node_update);
  return b->ops->fused_node_update(b, exec, node, rules, n, tokens, stage);
}
mdr_status mdr_be_fused_inline_launch(mdr_backend *b, const mdr_zero_seg *segs, size_t n, uint64_t tokens,
                                      const mdr_stage_desc *stage, mdr_stream s, void **node,
                                      mdr_stage_inline_launch *out) {
  MDR_REQUIRE_SLOT_(b, fused_inline_launch);
  return b->ops->fused_inline_launch(b, segs, n, tokens, stage, s, node, out);
}
mdr_status mdr_be_fused_inline_update(mdr_backend *b, void *exec, void *node, const mdr_stage_inline_launch *l) {
  MDR_REQUIRE_SLOT_(b, fused_inline_update);
  return b->ops->fused_inline_update(b, exec, node, l);
}
int mdr_be_has_host_fn(const mdr_backend *b) { return b->ops->host_fn != NULL; }
mdr_status mdr_be_host_fn(mdr_backend *b, mdr_host_fn fn, const void *arg, size_t arg_bytes, mdr_stream s) {
  MDR_REQUIRE_SLOT_(b, host_fn);
  return b->ops->host_fn(b, fn, arg, arg_bytes, s);
}
mdr_status mdr_be_take_pending_error(mdr_backend *b) {
  return b->ops->take_pending_error ? b->ops->take_pending_error(b) : MDR_OK;
}
mdr_status mdr_be_is_device_memory(mdr_backend *b, mdr_dptr p, size_t n, int *ok) {
  if (!b->ops->is_device_memory) {
    *ok = 1;
    return MDR_OK;
  }
  return b->ops->is_device_memory(b, p, n, ok);
}
int mdr_be_has_mem_used(const mdr_backend *b) { return b->ops->mem_used != NULL; }
int mdr_be_has_graph_nodes(const mdr_backend *b) { return b->ops->graph_nodes != NULL; }
mdr_status mdr_be_mem_used(mdr_backend *b, size_t *used) {
  MDR_REQUIRE_SLOT_(b, mem_used);
  return b->ops->mem_used(b, used);
}
mdr_status mdr_be_graph_nodes(mdr_backend *b, void *graph, size_t *n) {
  MDR_REQUIRE_SLOT_(b, graph_nodes);
  return b->ops->graph_nodes(b, graph, n);
}
