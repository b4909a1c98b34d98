/* fuzz_api — libFuzzer target driving sequences of public API calls on the
 * host backend, behind the test-only fault wrapper (tests/fault_backend.h).
 *
 * The input is a program: each op byte picks a call (arena create/destroy,
 * the zeroing helpers, zero_plan, set_zero_strategy, set_rows_policy, cache
 * create with random and bad options, prepare, step with counts from 0 to
 * past M and NULL ids, graph_tokens, stats, synchronize, cache destroy,
 * injected faults: fail the k-th call / every call of a kind), and the bytes
 * after it its arguments, NULL handles included. The program respects the
 * documented lifetimes (a cache is destroyed before its arena); everything
 * else is fair game. Invariants (trap when broken):
 *   - every call returns a valid mdr_status (< MDR_STATUS_COUNT), never
 *     crashes, and ASan/UBSan stay quiet;
 *   - a create that fails leaves *out untouched;
 *   - a step that returns MDR_OK or MDR_ERR_CAPTURE (served eagerly) has
 *     written its ids to the arena's token_ids and its count to the count
 *     cell, whatever failed before;
 *   - stats add up (captures - evictions == graphs, graphs <= max_graphs);
 *   - after everything is destroyed no backend resource is live. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "fault_backend.h"
#include "fuzz_arena.h"
#include "fuzz_provider.h"
#include "mdr/mdr.h"

enum { ARENAS = 2, CACHES = 3, STREAMS = 2, MAX_OPS = 96, MARK_BYTES = 256, MAX_M = 64 };

#define VALID(st) FUZZ_CHECK((unsigned)(st) < MDR_STATUS_COUNT)

typedef struct body_ctx {
  mdr_backend *b;
  mdr_dptr mark;
  uint8_t behaviour; /* 0 memset, 1 fail, 2 synchronize (illegal under capture), 3 nothing */
} body_ctx;

typedef struct world {
  mdr_backend *host, *fb;
  mdr_stream streams[STREAMS];
  mdr_arena *arenas[ARENAS];
  mdr_graph_cache *caches[CACHES];
  int cache_arena[CACHES];
  mdr_graph_mode cache_mode[CACHES];
  size_t cache_max_graphs[CACHES];
  uint64_t cache_max_bytes[CACHES];
  mdr_dptr ids_dev; /* an engine's own id buffer in "device" memory (MAX_M ids) */
  body_ctx user;
} world;

static mdr_status body(void *u, mdr_stream s, size_t tokens) {
  body_ctx *b = u;
  switch (b->behaviour % 4) {
    case 0: return mdr_backend_memset_async(b->b, b->mark, 0x5A, tokens, s);
    case 1: return MDR_ERR_STATE;
    case 2: return mdr_backend_synchronize(b->b, s);
    default: return MDR_OK;
  }
}

static mdr_status body_dynamic(void *u, mdr_stream s, mdr_dptr count_ptr, size_t max_tokens) {
  FUZZ_CHECK(count_ptr != 0);
  return body(u, s, max_tokens);
}

/* Small sizes around an M of 1 .. MAX_M, or a deliberately bad set. */
static mdr_sizes fuzz_sizes_of(fuzz_in *in) {
  size_t m = 1 + fuzz_u8(in) % MAX_M;
  mdr_sizes s = fuzz_small_sizes(m);
  uint8_t tweak = fuzz_u8(in);
  switch (tweak % 16) {
    case 0: s.max_batch_tokens = 0; break;
    case 1: s.logits_rows = 0; break;
    case 2: s.logits_rows = m + 1 + fuzz_u8(in) % 7; break; /* may not divide logits */
    case 3: memset(s.bytes, 0, sizeof s.bytes); break;
    case 4: s.bytes[fuzz_u8(in) % MDR_BUF_COUNT] = SIZE_MAX - fuzz_u8(in); break; /* overflow */
    case 5:
      s.bytes[MDR_BUF_SCRATCH] = SIZE_MAX / 2 + 1;
      s.bytes[MDR_BUF_LOGITS + 0] = 0;
      s.bytes[MDR_BUF_SSD_SCRATCH] = SIZE_MAX / 2 + 1; /* the aligned sum overflows */
      break;
    case 6: s.bytes[MDR_BUF_TOKEN_IDS] = 0; break; /* no token_ids: the cache cannot stage */
    case 7: s.bytes[fuzz_u8(in) % MDR_BUF_COUNT] = fuzz_bytes(in, 2); break;
    case 8: s.bytes[MDR_BUF_TOKEN_IDS] = 1 + fuzz_u8(in) % (m * 4); break; /* maybe short token_ids */
    default: break;
  }
  return s;
}

static mdr_arena *arena_arg(world *w, fuzz_in *in) {
  uint8_t b = fuzz_u8(in);
  return b >= 0xF0 ? NULL : w->arenas[b % ARENAS];
}
static mdr_graph_cache *cache_arg(world *w, fuzz_in *in, int *slot) {
  uint8_t b = fuzz_u8(in);
  *slot = b % CACHES;
  return b >= 0xF0 ? NULL : w->caches[*slot];
}
static mdr_stream stream_arg(world *w, fuzz_in *in) {
  uint8_t b = fuzz_u8(in);
  return b >= 0xF0 ? NULL : w->streams[b % STREAMS];
}
/* A token count: mostly 0 .. MAX_M + 2, sometimes anything. */
static size_t tokens_arg(fuzz_in *in) {
  uint8_t b = fuzz_u8(in);
  return b >= 0xF8 ? fuzz_size(in) : (size_t)(b % (MAX_M + 3));
}

static void cache_destroy(world *w, int i) {
  mdr_graph_cache_destroy(w->caches[i]);
  w->caches[i] = NULL;
}

static void arena_destroy(world *w, int a) {
  for (int i = 0; i < CACHES; i++)
    if (w->caches[i] && w->cache_arena[i] == a) cache_destroy(w, i);
  mdr_arena_destroy(w->arenas[a]);
  w->arenas[a] = NULL;
}

static void check_stats(world *w, int i) {
  mdr_graph_stats st;
  FUZZ_CHECK(mdr_graph_cache_stats(w->caches[i], &st) == MDR_OK);
  FUZZ_CHECK(st.captures - st.evictions == st.graphs);
  if (w->cache_max_graphs[i]) FUZZ_CHECK(st.graphs <= w->cache_max_graphs[i]);
  if (w->cache_mode[i] == MDR_GRAPH_DYNAMIC) FUZZ_CHECK(st.graphs <= 2); /* one per kind of ids */
  if (w->cache_max_bytes[i]) FUZZ_CHECK(st.graph_bytes <= w->cache_max_bytes[i] || st.graphs <= 1);
  /* a fallback is a miss whose capture failed; the step then runs eagerly
   * (counted in steps and eager_steps only if that succeeds) */
  FUZZ_CHECK(st.eager_fallbacks <= st.misses && st.eager_steps <= st.steps);
}

static void op_cache_create(world *w, fuzz_in *in) {
  int slot = fuzz_u8(in) % CACHES;
  int ai = fuzz_u8(in) % ARENAS;
  uint8_t nulls = fuzz_u8(in);
  mdr_arena *a = nulls & 1 ? NULL : w->arenas[ai];
  mdr_stream s = nulls & 2 ? NULL : w->streams[(nulls >> 2) % STREAMS];
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  uint8_t m = fuzz_u8(in);
  o.mode = m < 0xF0 ? (mdr_graph_mode)(m % MDR_GRAPH_MODE_COUNT) : (mdr_graph_mode)(m - 0xF4);
  uint8_t z = fuzz_u8(in);
  o.zero = z < 0xF0 ? (mdr_zero_strategy)(z % MDR_ZERO_STRATEGY_COUNT) : (mdr_zero_strategy)(z - 0xF4);
  if (o.mode == MDR_GRAPH_DYNAMIC && z < 0xE0) o.zero = MDR_ZERO_FUSED; /* mostly valid */
  uint8_t impl = fuzz_u8(in);
  o.dynamic_impl = impl < 0xF0 ? (mdr_graph_dynamic_impl)(impl % MDR_DYNAMIC_IMPL_COUNT)
                               : (mdr_graph_dynamic_impl)(impl - 0xF4);
  size_t ladder[10];
  uint8_t lsel = fuzz_u8(in);
  if (lsel & 1) {
    size_t len = (lsel >> 1) % 11;
    size_t v = 0;
    for (size_t i = 0; i < len; i++) {
      uint8_t d = fuzz_u8(in);
      v = d >= 0xF0 ? (size_t)(d & 0x0F) : v + d % 24; /* mostly increasing, some not */
      ladder[i] = v;
    }
    o.ladder = ladder;
    o.ladder_len = len; /* never longer than the array: that would be the caller's bug */
  }
  o.max_graphs = fuzz_u8(in) % 5;
  o.pad_token_id = (uint32_t)fuzz_bytes(in, 4);
  const uint8_t extra = fuzz_u8(in);
  o.poison = extra & 1;
  o.max_graph_bytes = (extra >> 1) % 4 == 1 ? 1 + fuzz_bytes(in, 2) : 0; /* sometimes a byte cap */
  uint8_t b = fuzz_u8(in);
  if (b % 4 == 1) o.body = body;
  if (b % 4 == 2) o.body_dynamic = body_dynamic;
  if (b % 4 == 3) {
    o.body = body;
    o.body_dynamic = body_dynamic; /* both: wrong for every mode */
  }
  o.user = &w->user;
  if (b & 0x40) setenv("MDR_DISABLE_GRAPHS", "1", 1);
  cache_destroy(w, slot);
  mdr_graph_cache *keep = (mdr_graph_cache *)&w->user, *out = keep;
  mdr_status st = mdr_graph_cache_create(a, s, (b & 0x80) ? NULL : &o, (nulls & 0x80) ? NULL : &out);
  unsetenv("MDR_DISABLE_GRAPHS");
  VALID(st);
  if (st != MDR_OK) {
    /* a failed create sets *out to NULL (unless there was no out to set) */
    FUZZ_CHECK(out == NULL || ((nulls & 0x80) && out == keep));
    return;
  }
  FUZZ_CHECK(out && out != keep);
  /* create must have refused an arena whose token_ids cannot hold M ids */
  FUZZ_CHECK(mdr_arena_token_ids_bytes(a) / 4 >= mdr_arena_max_batch_tokens(a));
  w->caches[slot] = out;
  w->cache_arena[slot] = ai;
  w->cache_mode[slot] = o.mode;
  w->cache_max_graphs[slot] = o.max_graphs;
  w->cache_max_bytes[slot] = o.max_graph_bytes;
}

/* A step (host ids, device ids from the engine's buffer, or device ids in
 * place), and what it must have done when it reports success. */
static void op_step(world *w, fuzz_in *in) {
  int slot;
  mdr_graph_cache *c = cache_arg(w, in, &slot);
  size_t t = tokens_arg(in);
  uint32_t ids[MAX_M];
  uint8_t seed = fuzz_u8(in);
  for (size_t i = 0; i < MAX_M; i++) ids[i] = (uint32_t)(seed * 2654435761u + i * 40503u);
  const uint8_t how = fuzz_u8(in);
  const int null_ids = how >= 0xF0, device = !null_ids && how % 3 != 0, in_place = device && how % 3 == 2;
  mdr_arena *a = c ? w->arenas[w->cache_arena[slot]] : NULL;
  mdr_status st;
  if (device) {
    const size_t n = t <= MAX_M ? t : MAX_M;
    const mdr_dptr dst = in_place ? mdr_arena_token_ids(a) : w->ids_dev;
    if (dst && n) FUZZ_CHECK(mdr_backend_copy_h2d(w->host, dst, ids, n * 4) == MDR_OK);
    st = mdr_graph_cache_step_device(c, in_place ? 0 : w->ids_dev, t);
  } else {
    st = mdr_graph_cache_step(c, null_ids ? NULL : ids, t);
  }
  VALID(st);
  if (!c) {
    FUZZ_CHECK(st == MDR_ERR_INVALID_ARGUMENT);
    return;
  }
  size_t m = mdr_arena_max_batch_tokens(a);
  if (null_ids) FUZZ_CHECK(st == MDR_ERR_INVALID_ARGUMENT);
  else if (t == 0 || t > m) FUZZ_CHECK(st == MDR_ERR_OUT_OF_RANGE);
  if (st != MDR_OK && st != MDR_ERR_CAPTURE) return;
  FUZZ_CHECK(t >= 1 && t <= m && !null_ids);
  /* the host backend ran it already; read through the plain host backend */
  uint32_t got[MAX_M], count = 0;
  FUZZ_CHECK(mdr_backend_copy_d2h(w->host, got, mdr_arena_token_ids(a), t * 4) == MDR_OK);
  FUZZ_CHECK(memcmp(got, ids, t * 4) == 0);
  FUZZ_CHECK(mdr_backend_copy_d2h(w->host, &count, mdr_graph_cache_count_ptr(c), 4) == MDR_OK);
  FUZZ_CHECK(count == t);
  check_stats(w, slot);
}

static void run_op(world *w, fuzz_in *in) {
  uint8_t op = fuzz_u8(in);
  mdr_status st = MDR_OK;
  int slot;
  switch (op % 17) {
    case 0: { /* arena create */
      int ai = fuzz_u8(in) % ARENAS;
      mdr_sizes s = fuzz_sizes_of(in);
      uint8_t nulls = fuzz_u8(in);
      arena_destroy(w, ai);
      mdr_arena *keep = (mdr_arena *)&w->user, *out = keep;
      st = mdr_arena_create(nulls == 0xFF ? NULL : w->fb, nulls == 0xFE ? NULL : &s,
                            nulls == 0xFD ? NULL : &out);
      VALID(st);
      if (st == MDR_OK) w->arenas[ai] = out;
      else FUZZ_CHECK(out == NULL || (nulls == 0xFD && out == keep)); /* NULL unless no out was given */
      break;
    }
    case 1: arena_destroy(w, fuzz_u8(in) % ARENAS); break;
    case 2: { /* a zeroing helper */
      mdr_arena *a = arena_arg(w, in);
      mdr_stream s = stream_arg(w, in);
      uint8_t h = fuzz_u8(in);
      size_t t = tokens_arg(in);
      st = h % 3 == 0 ? mdr_arena_zero_all(a, s)
           : h % 3 == 1 ? mdr_arena_zero_all_rows(a, s, t)
                        : mdr_arena_zero_prefill_essentials(a, s);
      VALID(st);
      if (!a) FUZZ_CHECK(st == MDR_ERR_INVALID_ARGUMENT);
      break;
    }
    case 3: { /* zero plan, checked against itself with a larger cap */
      mdr_arena *a = arena_arg(w, in);
      size_t t = tokens_arg(in), cap = fuzz_u8(in) % (MDR_ZERO_PLAN_MAX + 3), n = 777, n2 = 0;
      uint8_t nulls = fuzz_u8(in);
      mdr_segment seg[MDR_ZERO_PLAN_MAX + 2], full[MDR_ZERO_PLAN_MAX];
      st = mdr_arena_zero_plan(a, t, (nulls & 1) ? NULL : seg, cap, (nulls & 2) ? NULL : &n);
      VALID(st);
      if (st == MDR_OK && a) {
        FUZZ_CHECK(n <= MDR_ZERO_PLAN_MAX);
        FUZZ_CHECK(mdr_arena_zero_plan(a, t, full, MDR_ZERO_PLAN_MAX, &n2) == MDR_OK && n2 == n);
        if (!(nulls & 1)) FUZZ_CHECK(memcmp(seg, full, (n < cap ? n : cap) * sizeof seg[0]) == 0);
        for (size_t i = 0; i < n; i++) FUZZ_CHECK(full[i].ptr && full[i].bytes);
      }
      if (!a || (nulls & 2) || ((nulls & 1) && cap)) FUZZ_CHECK(st == MDR_ERR_INVALID_ARGUMENT);
      break;
    }
    case 4: {
      mdr_arena *a = arena_arg(w, in);
      int z = (int)fuzz_u8(in) % 5 - 1;
      st = mdr_arena_set_zero_strategy(a, (mdr_zero_strategy)z);
      VALID(st);
      if (st == MDR_OK) FUZZ_CHECK(mdr_arena_zero_strategy(a) == (mdr_zero_strategy)z);
      break;
    }
    case 5: {
      mdr_arena *a = arena_arg(w, in);
      int p = (int)fuzz_u8(in) % 5 - 1;
      st = mdr_arena_set_rows_policy(a, (mdr_rows_policy)p);
      VALID(st);
      if (st == MDR_OK) FUZZ_CHECK(mdr_arena_rows_policy(a) == (mdr_rows_policy)p);
      break;
    }
    case 6:
    case 7: op_cache_create(w, in); break;
    case 8: cache_destroy(w, fuzz_u8(in) % CACHES); break;
    case 9: { /* prepare */
      mdr_graph_cache *c = cache_arg(w, in, &slot);
      size_t counts[8], n = fuzz_u8(in) % 9;
      for (size_t i = 0; i < n; i++) counts[i] = tokens_arg(in);
      int null_counts = n && fuzz_u8(in) >= 0xF0;
      st = mdr_graph_cache_prepare(c, null_counts ? NULL : counts, n);
      VALID(st);
      if (!c || null_counts) FUZZ_CHECK(st == MDR_ERR_INVALID_ARGUMENT);
      if (c) check_stats(w, slot);
      break;
    }
    case 10:
    case 11:
    case 12: op_step(w, in); break;
    case 13: { /* stats, graph_tokens, count_ptr */
      mdr_graph_cache *c = cache_arg(w, in, &slot);
      mdr_graph_stats gs;
      size_t g = 0, t = tokens_arg(in);
      uint8_t nulls = fuzz_u8(in);
      st = mdr_graph_cache_stats(c, (nulls & 1) ? NULL : &gs);
      VALID(st);
      st = mdr_graph_cache_graph_tokens(c, t, (nulls & 2) ? NULL : &g);
      VALID(st);
      if (st == MDR_OK) {
        size_t m = mdr_arena_max_batch_tokens(w->arenas[w->cache_arena[slot]]);
        FUZZ_CHECK(t >= 1 && t <= m && g >= t && g <= m);
      }
      FUZZ_CHECK((mdr_graph_cache_count_ptr(c) == 0) == (c == NULL));
      mdr_graph_info gi;
      st = mdr_graph_cache_graph_info(c, t, (nulls & 4) ? NULL : &gi);
      VALID(st);
      if (st == MDR_OK) {
        if (!(nulls & 2)) FUZZ_CHECK(gi.graph_tokens == g);
        if (!gi.cached) FUZZ_CHECK(gi.bytes == 0 && gi.nodes == 0);
        if (gi.cached) FUZZ_CHECK(gi.bytes <= gs.graph_bytes || (nulls & 1));
      }
      break;
    }
    case 14: { /* faults: fail the k-th call from now, or every call of a kind */
      uint8_t f = fuzz_u8(in);
      if (f & 1) fault_backend_fail_at(w->fb, f >> 1);
      else fault_backend_fail_kind(w->fb, f >> 1 < MDR_OP_COUNT ? (int)(f >> 1) : -1);
      break;
    }
    case 15: w->user.behaviour = fuzz_u8(in); break;
    default: {
      st = mdr_backend_synchronize(w->fb, stream_arg(w, in));
      VALID(st);
      break;
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_in in = {data, size, 0};
  world w;
  memset(&w, 0, sizeof w);
  fuzz_backends(&w.host, &w.fb);
  for (int i = 0; i < STREAMS; i++) FUZZ_CHECK(mdr_backend_stream_create(w.fb, &w.streams[i]) == MDR_OK);
  FUZZ_CHECK(mdr_backend_alloc(w.host, MARK_BYTES, &w.user.mark) == MDR_OK);
  FUZZ_CHECK(mdr_backend_alloc(w.host, MAX_M * sizeof(uint32_t), &w.ids_dev) == MDR_OK);
  w.user.b = w.fb;
  for (int n = 0; n < MAX_OPS && fuzz_more(&in); n++) run_op(&w, &in);
  fault_backend_fail_at(w.fb, 0);
  fault_backend_fail_kind(w.fb, -1);
  for (int a = 0; a < ARENAS; a++) arena_destroy(&w, a);
  for (int i = 0; i < CACHES; i++) cache_destroy(&w, i); /* none left: their arenas went first */
  for (int i = 0; i < STREAMS; i++) mdr_backend_stream_destroy(w.fb, w.streams[i]);
  FUZZ_CHECK(fault_backend_live(w.fb) == 0);
  mdr_backend_free(w.host, w.user.mark);
  mdr_backend_free(w.host, w.ids_dev);
  mdr_backend_destroy(w.fb);
  mdr_backend_destroy(w.host);
  return 0;
}
