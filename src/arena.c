/* arena.c — one slab carved into the decode step's buffers, and the seed's
 * zeroing helpers (docs/SIZES.md §9).
 *
 * Layout: buffers in enum order, each at a 256-byte aligned offset of the
 * single slab; size-0 entries get address 0 and no space. The zero plans are
 * built from three coverage lists below and the rules of plan/zero_map.h,
 * so eager zeroing, the fused kernel and the graphs all clear the same bytes. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "arena_impl.h"
#include "env.h"
#include "trace.h"

struct mdr_arena {
  mdr_backend *backend;
  mdr_sizes sizes;
  mdr_dptr slab;
  size_t slab_bytes;
  mdr_dptr ptr[MDR_BUF_COUNT];
  mdr_zero_strategy zero;
  mdr_rows_policy rows;
  mdr_arena_slab_owner owner; /* who frees the slab: the backend when release is NULL */
  int poison;                 /* the helpers fill what they leave with 0xFF */
};

/* docs/SIZES.md §9: the 18 buffers of zero_all / zero_all_rows, in the seed's order. */
static const mdr_buffer k_zero_all[] = {
    MDR_BUF_HIDDEN_STATES,  MDR_BUF_RESIDUAL,          MDR_BUF_NORM_OUTPUT,
    MDR_BUF_QKV_OUTPUT,     MDR_BUF_ATTN_OUTPUT,       MDR_BUF_GATE_LOGITS,
    MDR_BUF_MOE_OUTPUT,     MDR_BUF_SSM_QKVZ,          MDR_BUF_SSM_BA,
    MDR_BUF_SSM_DEINTERLEAVED, MDR_BUF_SSM_GATES,      MDR_BUF_SSM_CONV_OUT_F32,
    MDR_BUF_SPLITK_WORKSPACE, MDR_BUF_EXPERT_GATE_OUT, MDR_BUF_EXPERT_UP_OUT,
    MDR_BUF_EXPERT_DOWN_OUT, MDR_BUF_LOGITS,           MDR_BUF_SCRATCH,
};

/* docs/SIZES.md §9: zero_prefill_essentials, whole. */
static const mdr_buffer k_prefill[] = {
    MDR_BUF_HIDDEN_STATES,   MDR_BUF_RESIDUAL,      MDR_BUF_GATE_LOGITS,
    MDR_BUF_EXPERT_GATE_OUT, MDR_BUF_EXPERT_UP_OUT, MDR_BUF_EXPERT_DOWN_OUT,
    MDR_BUF_MOE_OUTPUT,
};

#define COUNT_OF(x) (sizeof(x) / sizeof((x)[0]))

mdr_status mdr_arena_layout(mdr_backend *b, const mdr_sizes *s, size_t offset[MDR_BUF_COUNT], size_t *total) {
  if (!s) return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT, "arena: NULL sizes");
  if (s->max_batch_tokens == 0)
    return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT, "arena: max_batch_tokens is 0");
  size_t logits = s->bytes[MDR_BUF_LOGITS];
  if (logits && (s->logits_rows == 0 || logits % s->logits_rows != 0))
    return mdr_backend_fail(b, MDR_ERR_OUT_OF_RANGE,
                            "arena: logits_rows %zu does not divide logits (%zu bytes)",
                            s->logits_rows, logits);
  size_t sum = 0;
  for (int i = 0; i < MDR_BUF_COUNT; i++) {
    offset[i] = sum;
    size_t n = s->bytes[i];
    size_t aligned = (n + MDR_ARENA_ALIGN - 1) / MDR_ARENA_ALIGN * MDR_ARENA_ALIGN;
    if (aligned < n || sum + aligned < sum)
      return mdr_backend_fail(b, MDR_ERR_OVERFLOW, "arena: slab size overflows");
    sum += aligned;
  }
  if (sum == 0) return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT, "arena: every size is 0");
  *total = sum;
  return MDR_OK;
}

static void release_slab(mdr_arena *a) {
  if (a->owner.release) {
    a->owner.release(a->owner.ctx, a->slab);
  } else {
    mdr_be_free_device(a->backend, a->slab);
  }
}

mdr_status mdr_arena_create_on_slab(mdr_backend *b, const mdr_sizes *s, mdr_dptr slab,
                                    const mdr_arena_slab_owner *owner, mdr_arena **out) {
  size_t offset[MDR_BUF_COUNT], total = 0;
  mdr_status st = mdr_arena_layout(b, s, offset, &total);
  if (st != MDR_OK) return st;
  mdr_arena *a = calloc(1, sizeof *a);
  if (!a) return mdr_backend_fail(b, MDR_ERR_OUT_OF_MEMORY, "arena: handle");
  a->backend = b;
  a->sizes = *s;
  a->slab = slab;
  a->slab_bytes = total;
  if (owner) a->owner = *owner;
  for (int i = 0; i < MDR_BUF_COUNT; i++) a->ptr[i] = s->bytes[i] ? a->slab + offset[i] : 0;
  /* norm_unit_w is an all-zero weight: cleared once, never again. */
  if (a->ptr[MDR_BUF_NORM_UNIT_W]) {
    st = mdr_be_fill(b, a->ptr[MDR_BUF_NORM_UNIT_W], 0, s->bytes[MDR_BUF_NORM_UNIT_W]);
    if (st != MDR_OK) {
      free(a); /* the slab stays the caller's on failure */
      return st;
    }
  }
  a->zero = MDR_ZERO_MEMSET;
  a->rows = MDR_ROWS_SEED;
  a->poison = mdr_env_switch(b, "MDR_POISON", "arena");
  *out = a;
  return MDR_OK;
}

mdr_status mdr_arena_create(mdr_backend *b, const mdr_sizes *s, mdr_arena **out) {
  if (!out) return b ? mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT, "arena: NULL out") : MDR_ERR_INVALID_ARGUMENT;
  *out = NULL;
  if (!b) return MDR_ERR_INVALID_ARGUMENT;
  size_t offset[MDR_BUF_COUNT], total = 0;
  mdr_status st = mdr_arena_layout(b, s, offset, &total);
  if (st != MDR_OK) return st;
  mdr_dptr slab = 0;
  st = mdr_be_alloc_device(b, total, &slab);
  if (st != MDR_OK) return st;
  st = mdr_arena_create_on_slab(b, s, slab, NULL, out);
  if (st != MDR_OK) mdr_be_free_device(b, slab);
  return st;
}

void mdr_arena_destroy(mdr_arena *a) {
  if (!a) return;
  release_slab(a);
  free(a);
}

const mdr_arena_slab_owner *mdr_arena_slab_owner_of(const mdr_arena *a) { return &a->owner; }

mdr_dptr mdr_arena_slab_base(const mdr_arena *a) { return a->slab; }

static int buffer_ok(mdr_buffer buf) { return (int)buf >= 0 && buf < MDR_BUF_COUNT; }

mdr_dptr mdr_arena_ptr(const mdr_arena *a, mdr_buffer buf) {
  return a && buffer_ok(buf) ? a->ptr[buf] : 0;
}
size_t mdr_arena_bytes(const mdr_arena *a, mdr_buffer buf) {
  return a && buffer_ok(buf) ? a->sizes.bytes[buf] : 0;
}
size_t mdr_arena_max_batch_tokens(const mdr_arena *a) { return a ? a->sizes.max_batch_tokens : 0; }
mdr_backend *mdr_arena_backend(const mdr_arena *a) { return a ? a->backend : NULL; }
const mdr_sizes *mdr_arena_sizes(const mdr_arena *a) { return a ? &a->sizes : NULL; }
size_t mdr_arena_slab_bytes(const mdr_arena *a) { return a ? a->slab_bytes : 0; }

mdr_status mdr_arena_set_zero_strategy(mdr_arena *a, mdr_zero_strategy z) {
  if (!a) return MDR_ERR_INVALID_ARGUMENT;
  if ((int)z < 0 || z >= MDR_ZERO_STRATEGY_COUNT)
    return mdr_backend_fail(a->backend, MDR_ERR_INVALID_ARGUMENT, "arena: zero strategy %d is not one of "
                            "MDR_ZERO_MEMSET, MDR_ZERO_FUSED", (int)z);
  if (z == MDR_ZERO_FUSED && !mdr_be_has_zero_fused(a->backend))
    return mdr_backend_fail(a->backend, MDR_ERR_UNSUPPORTED, "arena: backend %s has no fused kernel",
                            mdr_be_name(a->backend));
  a->zero = z;
  return MDR_OK;
}

mdr_status mdr_arena_set_rows_policy(mdr_arena *a, mdr_rows_policy p) {
  if (!a) return MDR_ERR_INVALID_ARGUMENT;
  if ((int)p < 0 || p >= MDR_ROWS_POLICY_COUNT)
    return mdr_backend_fail(a->backend, MDR_ERR_INVALID_ARGUMENT, "arena: row policy %d is not one of "
                            "MDR_ROWS_SEED, MDR_ROWS_ALL", (int)p);
  a->rows = p;
  return MDR_OK;
}

mdr_zero_strategy mdr_arena_zero_strategy(const mdr_arena *a) { return a ? a->zero : MDR_ZERO_MEMSET; }
mdr_rows_policy mdr_arena_rows_policy(const mdr_arena *a) { return a ? a->rows : MDR_ROWS_SEED; }

/* ---- plans ---- */

static int always_whole_in_rows(mdr_buffer b) {
  return b == MDR_BUF_SPLITK_WORKSPACE || b == MDR_BUF_LOGITS || b == MDR_BUF_SCRATCH;
}

size_t mdr_arena_rules(const mdr_arena *a, mdr_coverage which, mdr_rows_policy policy,
                       mdr_zero_seg *out) {
  const mdr_buffer *list = which == MDR_COVER_PREFILL ? k_prefill : k_zero_all;
  size_t len = which == MDR_COVER_PREFILL ? COUNT_OF(k_prefill) : COUNT_OF(k_zero_all);
  size_t n = 0;
  for (size_t i = 0; i < len; i++) {
    mdr_buffer buf = list[i];
    if (!a->ptr[buf]) continue;
    mdr_zero_seg seg = {.ptr = a->ptr[buf], .bytes = a->sizes.bytes[buf], .rule = MDR_RULE_FIXED};
    if (which == MDR_COVER_ROWS) {
      if (buf == MDR_BUF_LOGITS && policy == MDR_ROWS_ALL) {
        seg.rule = MDR_RULE_ROWS;
        seg.a = a->sizes.bytes[buf] / a->sizes.logits_rows;
        seg.b = a->sizes.logits_rows;
      } else if (!always_whole_in_rows(buf)) {
        seg.rule = MDR_RULE_HEAD;
        seg.a = a->sizes.max_batch_tokens;
      }
    }
    out[n++] = seg;
  }
  return n;
}

mdr_status mdr_arena_run_rules(mdr_arena *a, mdr_stream s, const mdr_zero_seg *rules, size_t n,
                               size_t tokens, mdr_zero_strategy z) {
  if (z == MDR_ZERO_FUSED) return n ? mdr_be_zero_fused(a->backend, rules, n, tokens, NULL, s, NULL) : MDR_OK;
  mdr_zero_seg plan[MDR_ZERO_PLAN_MAX];
  const size_t count = mdr_zero_plan_at(rules, n, tokens, plan);
  for (size_t i = 0; i < count; i++) {
    mdr_status st = mdr_be_memset_async(a->backend, plan[i].ptr, 0, plan[i].bytes, s);
    if (st != MDR_OK) return st;
  }
  return MDR_OK;
}

mdr_status mdr_arena_run_poison(mdr_arena *a, mdr_stream s, const mdr_zero_seg *rules, size_t n, size_t tokens) {
  enum { POISON_BYTE = 0xFF };
  for (size_t i = 0; i < n; i++) {
    if (rules[i].rule == MDR_RULE_FIXED) continue; /* cleared whole */
    const uint64_t cleared = mdr_zero_seg_bytes(&rules[i], tokens);
    if (cleared >= rules[i].bytes) continue;
    mdr_status st = mdr_be_memset_async(a->backend, rules[i].ptr + cleared, POISON_BYTE,
                                        (size_t)(rules[i].bytes - cleared), s);
    if (st != MDR_OK) return st;
  }
  return MDR_OK;
}

static mdr_status zero_helper(mdr_arena *a, mdr_stream s, mdr_coverage which, size_t tokens) {
  if (!a) return MDR_ERR_INVALID_ARGUMENT;
  mdr_trace_push(MDR_TRACE_ZERO, (int)which, tokens);
  mdr_zero_seg rules[MDR_ZERO_PLAN_MAX];
  const size_t n = mdr_arena_rules(a, which, a->rows, rules);
  mdr_status st = mdr_arena_run_rules(a, s, rules, n, tokens, a->zero);
  if (st == MDR_OK && a->poison) st = mdr_arena_run_poison(a, s, rules, n, tokens);
  mdr_trace_pop();
  return st;
}

mdr_status mdr_arena_set_poison(mdr_arena *a, int on) {
  if (!a) return MDR_ERR_INVALID_ARGUMENT;
  a->poison = on != 0;
  return MDR_OK;
}

int mdr_arena_poison(const mdr_arena *a) { return a ? a->poison : 0; }

mdr_status mdr_arena_zero_all(mdr_arena *a, mdr_stream stream) {
  return zero_helper(a, stream, MDR_COVER_ALL, 0);
}

mdr_status mdr_arena_zero_all_rows(mdr_arena *a, mdr_stream stream, size_t tokens) {
  return zero_helper(a, stream, MDR_COVER_ROWS, tokens);
}

mdr_status mdr_arena_zero_prefill_essentials(mdr_arena *a, mdr_stream stream) {
  return zero_helper(a, stream, MDR_COVER_PREFILL, 0);
}

mdr_status mdr_arena_zero_plan(const mdr_arena *a, size_t tokens, mdr_segment *out, size_t cap,
                               size_t *n) {
  if (!a) return MDR_ERR_INVALID_ARGUMENT;
  if (!n || (cap && !out))
    return mdr_backend_fail(a->backend, MDR_ERR_INVALID_ARGUMENT, "zero plan: NULL %s", !n ? "n" : "out with cap > 0");
  mdr_zero_seg plan[MDR_ZERO_PLAN_MAX];
  mdr_zero_seg rules[MDR_ZERO_PLAN_MAX];
  const size_t nr = mdr_arena_rules(a, MDR_COVER_ROWS, a->rows, rules);
  const size_t count = mdr_zero_plan_at(rules, nr, tokens, plan);
  for (size_t i = 0; i < count && i < cap; i++)
    out[i] = (mdr_segment){.ptr = plan[i].ptr, .bytes = (size_t)plan[i].bytes};
  *n = count;
  return MDR_OK;
}
