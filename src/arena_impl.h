/* arena_impl.h — what the graph cache needs of the arena (private). */
#ifndef MDR_ARENA_IMPL_H
#define MDR_ARENA_IMPL_H

#include "mdr/arena.h"
#include "backend_impl.h"

struct mdr_comm;

/* Who frees an arena's slab: release(ctx, slab) when set (a slab from a
 * communicator's allocator, registered as a window), else the backend. The
 * communicator and window kind ride along for the queries of comm.h. */
typedef struct mdr_arena_slab_owner {
  void (*release)(void *ctx, mdr_dptr slab);
  void *ctx;
  struct mdr_comm *comm;
  int window; /* mdr_window */
} mdr_arena_slab_owner;

/* Check sizes and compute the slab layout: each buffer's offset and the
 * total bytes (256-byte aligned buffers). Failures recorded on b. */
mdr_status mdr_arena_layout(mdr_backend *b, const mdr_sizes *s, size_t offset[MDR_BUF_COUNT], size_t *total);
/* Make an arena over a slab of mdr_arena_layout's total bytes allocated by
 * the caller; owner NULL: the backend frees it with the arena. On failure
 * the slab stays the caller's. */
mdr_status mdr_arena_create_on_slab(mdr_backend *b, const mdr_sizes *s, mdr_dptr slab,
                                    const mdr_arena_slab_owner *owner, mdr_arena **out);
const mdr_arena_slab_owner *mdr_arena_slab_owner_of(const mdr_arena *a);
/* The slab's first byte (buffers sit at offsets from it; a communicator's
 * region follows mdr_arena_slab_bytes, 256-byte aligned). */
mdr_dptr mdr_arena_slab_base(const mdr_arena *a);

/* Poison mode: fill, on `s`, what the n rules leave at `tokens` past the
 * bytes they clear (each HEAD or ROWS buffer from its zeroed head to its
 * end) with 0xFF, a NaN in bf16, fp16 and fp32. */
mdr_status mdr_arena_run_poison(mdr_arena *a, mdr_stream s, const mdr_zero_seg *rules, size_t n, size_t tokens);

/* The coverage of each zeroing helper. */
typedef enum mdr_coverage {
  MDR_COVER_ALL,     /* zero_all */
  MDR_COVER_ROWS,    /* zero_all_rows */
  MDR_COVER_PREFILL  /* zero_prefill_essentials */
} mdr_coverage;

/* The helper's plan as rules (zero_map.h), NULL entries left out, in the
 * seed's order; for ROWS under row policy `policy`. Returns the count (at
 * most MDR_ZERO_PLAN_MAX). */
size_t mdr_arena_rules(const mdr_arena *a, mdr_coverage which, mdr_rows_policy policy,
                       mdr_zero_seg *out);

/* Enqueue, on `s` with strategy z, the n rules evaluated at `tokens`:
 * memsets of the plan (first failure returned, later segments not
 * enqueued), or one fused launch that evaluates the rules itself. The one
 * path from rules and a token count to enqueued zeroing: the helpers and
 * the graph cache both take it. */
mdr_status mdr_arena_run_rules(mdr_arena *a, mdr_stream s, const mdr_zero_seg *rules, size_t n,
                               size_t tokens, mdr_zero_strategy z);

#endif
