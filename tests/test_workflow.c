/* Suite `workflow`: reliability of whole workflows on the host backend.
 *
 * 1. Fault injection. A workflow of "stream + arena → the three zeroing
 *    helpers with both strategies → cache create → prepare → 1000 steps of
 *    random token counts → stats → destroy" runs once per k with the k-th
 *    fallible backend call failing (tests/fault_backend.h). Each run checks:
 *      - the call during which the fault fired returns non-OK, that status is
 *        the run's first non-OK one, it is the status of the injected call
 *        (allocation: OUT_OF_MEMORY; capture_end/instantiate: CAPTURE;
 *        otherwise BACKEND; a capture that fails inside step: CAPTURE with
 *        eager_fallbacks + 1) and mdr_backend_last_error names the injection;
 *      - no call fails unless a fault fired; after the (one-shot) fault every
 *        later call works, or returns MDR_ERR_INVALID_ARGUMENT when an object
 *        it needs could not be created; nothing crashes;
 *      - every step that returned MDR_OK or MDR_ERR_CAPTURE did its work
 *        (checked on the steps after the fault and every 50th step: the whole
 *        arena poisoned before, read back after), so a failed capture still
 *        served the step eagerly and a failed step leaves the staging ring
 *        in sync; the count whose capture failed is captured later;
 *      - the stats add up; nothing leaks (fault_backend_live back to 0).
 *    k is sampled: every k up to the end of prepare plus the first 20 step
 *    calls (the first captures), then a stride of ~250 samples through the
 *    steps, then the last calls.
 * 2. Threads. Four threads, each with its own stream, arena and graph cache
 *    on one shared host backend, run random steps and check every byte; and
 *    several threads read one arena at once (zero plans, accessors).
 *    The contract these tests hold the library to is in docs/THREADS.md. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <criterion/parameterized.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_backend.h"
#include "support.h"

enum { M = TB_SMALL_M, MP = TB_SMALL_MP, LOGITS_ROWS = TB_SMALL_M, STEPS = 1000, MARK_BYTES = M };
/* k sampling: every k through prepare and the first DENSE_STEPS step calls,
 * then about STRIDE_SAMPLES values spread over the rest. */
enum { DENSE_STEPS = 20, STRIDE_SAMPLES = 250 };
static const unsigned char MARK_POISON = 0x3C;

static mdr_sizes small_sizes(void) { return tb_small_sizes(); }

/* ---- expectations and a non-asserting checker (usable from any thread) --- */

/* Expected leading zero bytes per buffer, from the spec reference in
 * support.c, tabulated once per arena: rows[policy][t], all, prefill. */
typedef struct expect_table {
  size_t rows[MDR_ROWS_POLICY_COUNT][M + 1][MDR_BUF_COUNT];
  size_t all[MDR_BUF_COUNT], prefill[MDR_BUF_COUNT];
} expect_table;

static void expect_table_fill(expect_table *x, const mdr_arena *a) {
  for (int p = 0; p < MDR_ROWS_POLICY_COUNT; p++)
    for (size_t t = 0; t <= M; t++) tb_expected(a, TB_ZERO_ROWS, t, (mdr_rows_policy)p, x->rows[p][t]);
  tb_expected(a, TB_ZERO_ALL, 0, MDR_ROWS_SEED, x->all);
  tb_expected(a, TB_ZERO_PREFILL, 0, MDR_ROWS_SEED, x->prefill);
}

/* Fill every buffer of the arena with its poison byte through `rb` (a
 * backend that sees the same memory: the plain host backend, so checks do
 * not count as calls of the fault wrapper). 0 on success. */
static int poison(mdr_backend *rb, const mdr_arena *a, mdr_dptr mark) {
  for (int i = 0; i < MDR_BUF_COUNT; i++) {
    mdr_dptr p = mdr_arena_ptr(a, (mdr_buffer)i);
    if (p && mdr_backend_fill(rb, p, tb_poison_of((mdr_buffer)i), mdr_arena_bytes(a, (mdr_buffer)i)))
      return -1;
  }
  return mark && mdr_backend_fill(rb, mark, MARK_POISON, MARK_BYTES) ? -1 : 0;
}

/* Bytes [0, zero) must be 0 and [zero, n) `rest`. Returns the first wrong
 * offset or -1. */
static long first_wrong(const unsigned char *got, size_t n, size_t zero, unsigned char rest) {
  for (size_t i = 0; i < n; i++)
    if (got[i] != (i < zero ? 0 : rest)) return (long)i;
  return -1;
}

/* What one step (or helper) should leave behind. ids == NULL: token_ids must
 * still be all poison (helpers), and the count cell and mark are not read. */
typedef struct step_expect {
  const size_t *zero;  /* [MDR_BUF_COUNT] leading zero bytes */
  const uint32_t *ids; /* the step's ids */
  size_t t;            /* real tokens */
  size_t copied;       /* ids written to token_ids (t, or g padded) */
  uint32_t pad;
  mdr_dptr count_ptr;           /* 0: not checked */
  mdr_dptr mark; size_t mark_len; unsigned char mark_byte; /* the body's buffer */
} step_expect;

/* Read everything back through `rb` and compare. 0 when all is as expected,
 * else -1 with a description in why. */
static int check_step(mdr_backend *rb, const mdr_arena *a, const step_expect *e, char *why,
                      size_t why_len) {
  unsigned char buf[65536];
  for (int i = 0; i < MDR_BUF_COUNT; i++) {
    mdr_buffer b = (mdr_buffer)i;
    mdr_dptr p = mdr_arena_ptr(a, b);
    size_t n = mdr_arena_bytes(a, b);
    if (!p) continue;
    if (n > sizeof buf) {
      snprintf(why, why_len, "%s: %zu bytes is more than the checker holds", mdr_buffer_name(b), n);
      return -1;
    }
    if (mdr_backend_copy_d2h(rb, buf, p, n) != MDR_OK) {
      snprintf(why, why_len, "copy_d2h of %s: %s", mdr_buffer_name(b), mdr_backend_last_error(rb));
      return -1;
    }
    long bad;
    if (b == MDR_BUF_TOKEN_IDS && e->ids) {
      for (size_t j = 0; j < e->copied; j++) {
        uint32_t want = j < e->t ? e->ids[j] : e->pad, got;
        memcpy(&got, buf + 4 * j, 4);
        if (got != want) {
          snprintf(why, why_len, "token_ids[%zu] = %u, want %u (t=%zu, copied %zu)", j, got, want,
                   e->t, e->copied);
          return -1;
        }
      }
      bad = first_wrong(buf + 4 * e->copied, n - 4 * e->copied, 0, tb_poison_of(b));
      if (bad >= 0) bad += (long)(4 * e->copied);
    } else {
      bad = first_wrong(buf, n, e->zero[i], tb_poison_of(b));
    }
    if (bad >= 0) {
      snprintf(why, why_len, "%s (%zu bytes, %zu zero expected) wrong at byte %ld (t=%zu)",
               mdr_buffer_name(b), n, b == MDR_BUF_TOKEN_IDS ? 0 : e->zero[i], bad, e->t);
      return -1;
    }
  }
  if (e->count_ptr) {
    uint32_t count = 0;
    if (mdr_backend_copy_d2h(rb, &count, e->count_ptr, 4) != MDR_OK || count != e->t) {
      snprintf(why, why_len, "count cell %u, want %zu", count, e->t);
      return -1;
    }
  }
  if (e->mark) {
    if (mdr_backend_copy_d2h(rb, buf, e->mark, MARK_BYTES) != MDR_OK) {
      snprintf(why, why_len, "copy_d2h of the body's buffer");
      return -1;
    }
    for (size_t j = 0; j < MARK_BYTES; j++)
      if (buf[j] != (j < e->mark_len ? e->mark_byte : MARK_POISON)) {
        snprintf(why, why_len, "body buffer byte %zu (body ran for %zu)", j, e->mark_len);
        return -1;
      }
  }
  return 0;
}

static void random_ids(uint64_t *rng, uint32_t *ids, size_t n) {
  for (size_t i = 0; i < n; i++) ids[i] = (uint32_t)(tb_rng_next(rng) % 150000) + 1;
}

/* The expectation of a graph step of t tokens, as graph.h describes it:
 * EXACT/LADDER zero and copy the graph's count g (ids padded), the body runs
 * for g; DYNAMIC zeroes and copies exactly t, its body writes max tokens. */
static step_expect expect_of_step(const expect_table *x, mdr_rows_policy pol, mdr_graph_mode mode,
                                  const mdr_graph_cache *c, const uint32_t *ids, size_t t,
                                  size_t g, uint32_t pad, mdr_dptr mark) {
  step_expect e = {.ids = ids, .t = t, .pad = pad, .count_ptr = mdr_graph_cache_count_ptr(c),
                   .mark = mark};
  if (mode == MDR_GRAPH_DYNAMIC) {
    e.zero = x->rows[pol][t];
    e.copied = t;
    e.mark_len = M;
    e.mark_byte = 0x77;
  } else {
    e.zero = x->rows[pol][g];
    e.copied = g;
    e.mark_len = g;
    e.mark_byte = (unsigned char)(g | 1);
  }
  return e;
}

/* ---- the caller's body: one memset of its own buffer ---------------------- */

typedef struct body_ctx {
  mdr_backend *b; /* the backend the cache uses (the fault wrapper in part 1) */
  mdr_dptr mark;
} body_ctx;

static mdr_status body(void *user, mdr_stream s, size_t tokens) {
  body_ctx *u = user;
  return mdr_backend_memset_async(u->b, u->mark, (unsigned char)(tokens | 1), tokens, s);
}

static mdr_status body_dynamic(void *user, mdr_stream s, mdr_dptr count_ptr, size_t max_tokens) {
  body_ctx *u = user;
  if (!count_ptr) return MDR_ERR_STATE;
  return mdr_backend_memset_async(u->b, u->mark, 0x77, max_tokens, s);
}

/* ---- configurations of the cache ---------------------------------------- */

typedef struct wf_config {
  const char *name;
  mdr_graph_mode mode;
  mdr_zero_strategy zero;
  mdr_graph_dynamic_impl impl;
  mdr_rows_policy policy;
  size_t max_graphs;
} wf_config;

static const wf_config k_configs[] = {
    {"exact-memset", MDR_GRAPH_EXACT, MDR_ZERO_MEMSET, MDR_DYNAMIC_NODE_UPDATE, MDR_ROWS_SEED, 0},
    {"exact-fused-lru8", MDR_GRAPH_EXACT, MDR_ZERO_FUSED, MDR_DYNAMIC_NODE_UPDATE, MDR_ROWS_ALL, 8},
    {"ladder-memset", MDR_GRAPH_LADDER, MDR_ZERO_MEMSET, MDR_DYNAMIC_NODE_UPDATE, MDR_ROWS_ALL, 0},
    {"ladder-fused-lru3", MDR_GRAPH_LADDER, MDR_ZERO_FUSED, MDR_DYNAMIC_NODE_UPDATE, MDR_ROWS_SEED, 3},
    {"dynamic-node-update", MDR_GRAPH_DYNAMIC, MDR_ZERO_FUSED, MDR_DYNAMIC_NODE_UPDATE, MDR_ROWS_SEED, 0},
    {"dynamic-device-count", MDR_GRAPH_DYNAMIC, MDR_ZERO_FUSED, MDR_DYNAMIC_DEVICE_COUNT, MDR_ROWS_ALL, 0},
};
#define CONFIG_COUNT (sizeof k_configs / sizeof k_configs[0])

/* ---- part 1: fault injection over the whole workflow ---------------------- */

#if !defined(MDR_WORKFLOW_THREADS_MAIN)
/* One run's state. */
typedef struct wf_run {
  const wf_config *cfg;
  long k;
  mdr_backend *host, *fb;
  long inj_before;          /* injections before the API call in progress */
  mdr_status first;         /* first non-OK status of the run */
  char first_api[64];
  int fired;                /* the fault has fired */
  long check_until;         /* check every step up to this step index */
  /* where the baseline run stood (k = 0): calls after prepare, after the
   * first DENSE_STEPS step calls, in all */
  long calls_after_prepare, calls_after_dense, calls_total;
  long injected; /* faults injected in the whole run */
} wf_run;

static const char *op_of_last_error(const mdr_backend *fb, char *op, size_t n) {
  /* the injected failure's text, anywhere in the last error: the library
   * may wrap it (e.g. "the body returned ...: fault: injected ...") */
  const char *prefix = "fault: injected failure of ";
  const char *e = strstr(mdr_backend_last_error(fb), prefix);
  if (!e) return NULL;
  e += strlen(prefix);
  size_t i = 0;
  while (e[i] && e[i] != ' ' && i + 1 < n) {
    op[i] = e[i];
    i++;
  }
  op[i] = 0;
  return op;
}

/* The status the fault backend gives an injected call of `op`. */
static mdr_status status_of_op(const char *op) {
  if (!strcmp(op, "alloc_device") || !strcmp(op, "alloc_pinned")) return MDR_ERR_OUT_OF_MEMORY;
  if (!strcmp(op, "capture_end") || !strcmp(op, "graph_instantiate")) return MDR_ERR_CAPTURE;
  return MDR_ERR_BACKEND;
}

enum api_kind { API_PLAIN, API_PREPARE, API_STEP };

/* Judge the status of one API call. deps_ok: every object the call needs
 * exists (else MDR_ERR_INVALID_ARGUMENT is the only right answer);
 * fallbacks_delta: eager_fallbacks gained during a step. */
static void judge(wf_run *r, const char *what, enum api_kind kind, int deps_ok, mdr_status st,
                  long fallbacks_delta) {
  long after = fault_backend_injected(r->fb);
  cr_assert((unsigned)st < MDR_STATUS_COUNT, "%s k=%ld %s: status %d is not an mdr_status", r->cfg->name,
            r->k, what, (int)st);
  if (after > r->inj_before) {
    char op[40];
    cr_assert_neq(st, MDR_OK, "%s k=%ld: the fault injected during %s was swallowed", r->cfg->name, r->k,
                  what);
    cr_assert_eq(r->first, MDR_OK, "%s k=%ld: %s failed after an earlier failure of %s", r->cfg->name,
                 r->k, what, r->first_api);
    cr_assert_not_null(op_of_last_error(r->fb, op, sizeof op),
                       "%s k=%ld %s: last error does not name the injected failure: \"%s\"",
                       r->cfg->name, r->k, what, mdr_backend_last_error(r->fb));
    mdr_status want = status_of_op(op);
    if (kind == API_STEP && fallbacks_delta == 1) want = MDR_ERR_CAPTURE;
    if (kind == API_PREPARE && st == MDR_ERR_CAPTURE) want = MDR_ERR_CAPTURE;
    cr_assert_eq(st, want, "%s k=%ld: %s returned %s for an injected failure of %s (want %s)",
                 r->cfg->name, r->k, what, mdr_status_string(st), op, mdr_status_string(want));
    if (kind == API_STEP)
      cr_assert_leq(fallbacks_delta, 1, "%s k=%ld: one failed capture counted twice", r->cfg->name, r->k);
    r->first = st;
    snprintf(r->first_api, sizeof r->first_api, "%s", what);
    r->fired = 1;
    return;
  }
  if (kind == API_STEP)
    cr_assert_eq(fallbacks_delta, 0, "%s k=%ld %s: an eager fallback without a fault", r->cfg->name,
                 r->k, what);
  if (deps_ok)
    cr_assert_eq(st, MDR_OK, "%s k=%ld: %s returned %s with no fault due (%s; first failure: %s)",
                 r->cfg->name, r->k, what, mdr_status_string(st), mdr_backend_last_error(r->fb),
                 r->first == MDR_OK ? "none" : r->first_api);
  else
    cr_assert_eq(st, MDR_ERR_INVALID_ARGUMENT,
                 "%s k=%ld: %s on a missing object returned %s (want invalid argument)", r->cfg->name,
                 r->k, what, mdr_status_string(st));
}

/* Call `call`, snapshotting the injection count first (the comma operator
 * orders the two). */
#define API(r, call) ((r)->inj_before = fault_backend_injected((r)->fb), (call))

static void expect_ok_check(wf_run *r, int rc, const char *why, const char *what) {
  cr_assert_eq(rc, 0, "%s k=%ld %s: %s (first failure: %s)", r->cfg->name, r->k, what, why,
               r->first == MDR_OK ? "none" : r->first_api);
}

static void run_workflow(wf_run *r, const expect_table *x, mdr_dptr mark) {
  const wf_config *cfg = r->cfg;
  mdr_backend *host = r->host;
  cr_assert_eq(fault_backend_create(host, &r->fb), MDR_OK);
  mdr_backend *fb = r->fb;
  fault_backend_fail_at(fb, r->k);
  r->first = MDR_OK;
  r->first_api[0] = 0;
  r->fired = 0;
  r->check_until = -1;
  /* the same sequence for every k, so run k matches the baseline up to the fault */
  uint64_t rng = 0x9E3779B97F4A7C15ull ^ ((uint64_t)(cfg - k_configs) << 40);
  char why[256], what[64];
  mdr_status st;

  mdr_stream s = NULL;
  st = API(r, mdr_backend_stream_create(fb, &s));
  judge(r, "stream_create", API_PLAIN, 1, st, 0);
  if (st != MDR_OK) cr_assert_null(s);

  mdr_sizes sizes = small_sizes();
  mdr_arena *a = NULL;
  st = API(r, mdr_arena_create(fb, &sizes, &a));
  judge(r, "arena_create", API_PLAIN, 1, st, 0);
  if (st != MDR_OK) cr_assert_null(a, "a failed create set *out");
  st = mdr_arena_set_rows_policy(a, cfg->policy);
  cr_assert_eq(st, a ? MDR_OK : MDR_ERR_INVALID_ARGUMENT);

  /* the helpers, both strategies (a NULL stream is the legacy stream: the
   * helpers accept it) */
  for (int z = 0; z < MDR_ZERO_STRATEGY_COUNT; z++) {
    st = API(r, mdr_arena_set_zero_strategy(a, (mdr_zero_strategy)z));
    judge(r, "set_zero_strategy", API_PLAIN, a != NULL, st, 0);
    for (int h = 0; h < 3; h++) {
      size_t t = 1 + tb_rng_next(&rng) % (M + 4);
      if (a) cr_assert_eq(poison(host, a, 0), 0);
      st = API(r, h == 0   ? mdr_arena_zero_all(a, s)
                  : h == 1 ? mdr_arena_zero_all_rows(a, s, t)
                           : mdr_arena_zero_prefill_essentials(a, s));
      snprintf(what, sizeof what, "zero helper %d strategy %d", h, z);
      judge(r, what, API_PLAIN, a != NULL, st, 0);
      if (st == MDR_OK && a) {
        step_expect e = {.zero = h == 0 ? x->all : h == 1 ? x->rows[cfg->policy][t < M ? t : M] : x->prefill};
        expect_ok_check(r, check_step(host, a, &e, why, sizeof why), why, what);
      }
    }
  }

  body_ctx user = {.b = fb, .mark = mark};
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.mode = cfg->mode;
  o.zero = cfg->zero;
  o.dynamic_impl = cfg->impl;
  o.max_graphs = cfg->max_graphs;
  o.pad_token_id = 0xFFFFu;
  o.user = &user;
  if (cfg->mode == MDR_GRAPH_DYNAMIC) o.body_dynamic = body_dynamic; else o.body = body;
  mdr_graph_cache *c = NULL;
  st = API(r, mdr_graph_cache_create(a, s, &o, &c));
  judge(r, "cache_create", API_PLAIN, a && s, st, 0);
  if (st != MDR_OK) cr_assert_null(c, "a failed create set *out");

  const size_t pre[] = {1, 2, M / 2, M};
  st = API(r, mdr_graph_cache_prepare(c, pre, 4));
  judge(r, "prepare", API_PREPARE, c != NULL, st, 0);
  if (r->k == 0) r->calls_after_prepare = fault_backend_calls(fb);

  long ok_steps = 0, capture_steps = 0, step_calls = 0;
  size_t failed_capture_g = 0; /* a count whose capture failed in step */
  mdr_graph_stats before, after;
  memset(&before, 0, sizeof before);
  memset(&after, 0, sizeof after);
  for (int i = 0; i < STEPS; i++) {
    size_t t = 1 + tb_rng_next(&rng) % M, g = t;
    uint32_t ids[M];
    random_ids(&rng, ids, t);
    if (c) {
      cr_assert_eq(mdr_graph_cache_graph_tokens(c, t, &g), MDR_OK);
      cr_assert_eq(mdr_graph_cache_stats(c, &before), MDR_OK);
    }
    /* check each step until a while after the fault, and every 50th */
    long calls_now = fault_backend_calls(fb);
    int check = c && (i % 50 == 0 || i <= r->check_until || r->k == 0 ||
                      (r->k > calls_now && r->k <= calls_now + 32));
    if (check) cr_assert_eq(poison(host, a, mark), 0);
    int fired_before = r->fired;
    st = API(r, mdr_graph_cache_step(c, ids, t));
    if (c) cr_assert_eq(mdr_graph_cache_stats(c, &after), MDR_OK);
    snprintf(what, sizeof what, "step %d (t=%zu)", i, t);
    judge(r, what, API_STEP, c != NULL, st, (long)(after.eager_fallbacks - before.eager_fallbacks));
    if (c) step_calls++;
    if (r->fired && !fired_before) {
      r->check_until = i + 2 * MDR_GRAPH_STAGING_SLOTS;
      if (st == MDR_ERR_CAPTURE) failed_capture_g = g;
    }
    if (st == MDR_OK) ok_steps++;
    if (st == MDR_ERR_CAPTURE) capture_steps++;
    if (check && (st == MDR_OK || st == MDR_ERR_CAPTURE)) {
      step_expect e = expect_of_step(x, cfg->policy, cfg->mode, c, ids, t, g, o.pad_token_id, mark);
      expect_ok_check(r, check_step(host, a, &e, why, sizeof why), why, what);
    }
    if (r->k == 0 && i == DENSE_STEPS - 1) r->calls_after_dense = fault_backend_calls(fb);
  }

  st = API(r, mdr_graph_cache_stats(c, &after));
  judge(r, "stats", API_PLAIN, c != NULL, st, 0);
  if (c) {
    cr_assert_eq(after.steps, (uint64_t)(ok_steps + capture_steps), "%s k=%ld: steps", cfg->name, r->k);
    cr_assert_eq(after.eager_fallbacks, (uint64_t)capture_steps, "%s k=%ld: eager_fallbacks", cfg->name,
                 r->k);
    /* a step that passed validation either missed, or hit and was replayed,
     * or hit and failed to launch (counted in neither), or ran eagerly at a
     * count whose capture had failed (eager, not a fallback) */
    const uint64_t failed_steps = (uint64_t)step_calls - (uint64_t)(ok_steps + capture_steps);
    const uint64_t eager_only = after.eager_steps - after.eager_fallbacks;
    cr_assert_leq(after.uncapturable, after.eager_fallbacks, "%s k=%ld: uncapturable", cfg->name, r->k);
    cr_assert_leq(after.hits + after.misses + eager_only, (uint64_t)step_calls, "%s k=%ld: hits + misses",
                  cfg->name, r->k);
    cr_assert_geq(after.hits + after.misses + eager_only + failed_steps, (uint64_t)step_calls,
                  "%s k=%ld: hits + misses", cfg->name, r->k);
    cr_assert_eq(after.captures - after.evictions, after.graphs, "%s k=%ld: graphs", cfg->name, r->k);
    if (cfg->max_graphs) cr_assert_leq(after.graphs, cfg->max_graphs);
    if (cfg->mode == MDR_GRAPH_DYNAMIC) cr_assert_leq(after.graphs, 1);
    if (failed_capture_g) {
      /* the count whose capture failed runs eagerly until a prepare captures
       * it; then it is served by a graph */
      const size_t again = failed_capture_g;
      cr_assert_eq(mdr_graph_cache_prepare(c, &again, 1), MDR_OK, "%s k=%ld: re-prepare", cfg->name, r->k);
      cr_assert_eq(mdr_graph_cache_stats(c, &after), MDR_OK);
      uint32_t ids[M];
      random_ids(&rng, ids, failed_capture_g);
      cr_assert_eq(poison(host, a, mark), 0);
      cr_assert_eq(mdr_graph_cache_step(c, ids, failed_capture_g), MDR_OK);
      mdr_graph_stats later;
      cr_assert_eq(mdr_graph_cache_stats(c, &later), MDR_OK);
      cr_assert_eq(later.eager_steps, after.eager_steps,
                   "%s k=%ld: the count whose capture failed is still served eagerly", cfg->name, r->k);
      size_t g = 0;
      cr_assert_eq(mdr_graph_cache_graph_tokens(c, failed_capture_g, &g), MDR_OK);
      step_expect e = expect_of_step(x, cfg->policy, cfg->mode, c, ids, failed_capture_g, g,
                                     o.pad_token_id, mark);
      expect_ok_check(r, check_step(host, a, &e, why, sizeof why), why, "recaptured step");
    }
  }
  mdr_graph_cache_destroy(c);
  mdr_arena_destroy(a);
  mdr_backend_stream_destroy(fb, s);
  r->injected = fault_backend_injected(fb);
  cr_assert_eq(fault_backend_live(fb), 0, "%s k=%ld: %ld resources leaked (first failure: %s)",
               cfg->name, r->k, fault_backend_live(fb), r->first == MDR_OK ? "none" : r->first_api);
  if (r->k == 0) r->calls_total = fault_backend_calls(fb);
  mdr_backend_destroy(fb);
  r->fb = NULL;
}

ParameterizedTestParameters(workflow, every_injected_fault_is_reported_contained_and_leak_free) {
  static int idx[CONFIG_COUNT];
  for (size_t i = 0; i < CONFIG_COUNT; i++) idx[i] = (int)i;
  return cr_make_param_array(int, idx, CONFIG_COUNT);
}

ParameterizedTest(int *ci, workflow, every_injected_fault_is_reported_contained_and_leak_free) {
  mdr_backend *host = tb_backend(TB_HOST);
  mdr_dptr mark = 0;
  cr_assert_eq(mdr_backend_alloc(host, MARK_BYTES, &mark), MDR_OK);
  static expect_table x; /* one test per process under Criterion */
  {
    mdr_sizes sizes = small_sizes();
    mdr_arena *a = NULL;
    cr_assert_eq(mdr_arena_create(host, &sizes, &a), MDR_OK);
    expect_table_fill(&x, a);
    mdr_arena_destroy(a);
  }
  wf_run r = {.cfg = &k_configs[*ci], .host = host, .k = 0};
  run_workflow(&r, &x, mark); /* the baseline: no fault, every step checked */
  cr_assert_eq(r.first, MDR_OK);
  const long prep = r.calls_after_prepare, dense = r.calls_after_dense, total = r.calls_total;
  cr_assert_gt(total, STEPS, "the workflow makes at least one call per step");
  /* every k through prepare and the first DENSE_STEPS step calls, a stride
   * through the rest, and the last 8 calls */
  long stride = (total - dense) / STRIDE_SAMPLES + 1, tried = 0, fired = 0;
  for (long k = 1; k <= total + 1; k++) {
    int take = k <= dense || (k - dense) % stride == 0 || k > total - 8;
    if (!take) continue;
    wf_run run = {.cfg = r.cfg, .host = host, .k = k};
    run_workflow(&run, &x, mark);
    tried++;
    fired += run.fired;
    cr_assert_eq(run.injected, k <= total ? 1 : 0, "%s k=%ld: faults injected", r.cfg->name, k);
    /* the only call whose failure no API call reports: the synchronize in
     * mdr_graph_cache_destroy (void), the last call of the workflow */
    if (k <= total) cr_assert(run.fired || k == total, "%s k=%ld: the fault was never reported", r.cfg->name, k);
  }
  cr_log_info("workflow %s: %ld calls (%ld through prepare), %ld values of k tried, %ld faults fired",
              r.cfg->name, total, prep, tried, fired);
  mdr_backend_free(host, mark);
  mdr_backend_destroy(host);
}

#endif /* !MDR_WORKFLOW_THREADS_MAIN */

/* ---- part 2: threads ----------------------------------------------------- */

enum { THREADS = 4, THREAD_STEPS = 3000, READERS = 4, READS = 20000 };

typedef struct thread_job {
  mdr_backend *b; /* shared */
  const wf_config *cfg;
  uint64_t seed;
  const expect_table *x;
  /* results */
  long steps, checks;
  char error[256]; /* empty when all went well */
} thread_job;

static void *stepping_thread(void *arg) {
  thread_job *j = arg;
  mdr_backend *b = j->b;
  mdr_stream s = NULL;
  mdr_arena *a = NULL;
  mdr_graph_cache *c = NULL;
  mdr_dptr mark = 0;
  mdr_sizes sizes = small_sizes();
  mdr_status st;
  if ((st = mdr_backend_stream_create(b, &s)) || (st = mdr_arena_create(b, &sizes, &a)) ||
      (st = mdr_backend_alloc(b, MARK_BYTES, &mark)) ||
      (st = mdr_arena_set_rows_policy(a, j->cfg->policy))) {
    snprintf(j->error, sizeof j->error, "setup: %s", mdr_status_string(st));
    goto done;
  }
  body_ctx user = {.b = b, .mark = mark};
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.mode = j->cfg->mode;
  o.zero = j->cfg->zero;
  o.dynamic_impl = j->cfg->impl;
  o.max_graphs = j->cfg->max_graphs;
  o.pad_token_id = 0xABCDu;
  o.user = &user;
  if (o.mode == MDR_GRAPH_DYNAMIC) o.body_dynamic = body_dynamic; else o.body = body;
  if ((st = mdr_graph_cache_create(a, s, &o, &c))) {
    snprintf(j->error, sizeof j->error, "cache create: %s", mdr_status_string(st));
    goto done;
  }
  uint64_t rng = j->seed;
  for (long i = 0; i < THREAD_STEPS; i++) {
    size_t t = 1 + tb_rng_next(&rng) % M, g = 0;
    uint32_t ids[M];
    random_ids(&rng, ids, t);
    int check = i % 3 == 0;
    if (check && poison(b, a, mark)) {
      snprintf(j->error, sizeof j->error, "poison: %s", mdr_backend_last_error(b));
      goto done;
    }
    if ((st = mdr_graph_cache_graph_tokens(c, t, &g)) || (st = mdr_graph_cache_step(c, ids, t)) ||
        (st = mdr_backend_synchronize(b, s))) {
      snprintf(j->error, sizeof j->error, "step %ld (t=%zu): %s", i, t, mdr_status_string(st));
      goto done;
    }
    j->steps++;
    if (i % 7 == 0) {
      /* a rejected step: every thread fails on the shared backend now and
       * then, and reads its own error text back (per thread, no race) */
      char want[64];
      snprintf(want, sizeof want, "%zu tokens", (size_t)M + 1 + (size_t)j->seed % 5);
      st = mdr_graph_cache_step(c, ids, (size_t)M + 1 + (size_t)j->seed % 5);
      if (st != MDR_ERR_OUT_OF_RANGE || !strstr(mdr_backend_last_error(b), want)) {
        snprintf(j->error, sizeof j->error, "step %ld: rejected step gave %s, error text '%s'", i,
                 mdr_status_string(st), mdr_backend_last_error(b));
        goto done;
      }
    }
    if (check) {
      step_expect e = expect_of_step(j->x, j->cfg->policy, o.mode, c, ids, t, g, o.pad_token_id, mark);
      char why[200];
      if (check_step(b, a, &e, why, sizeof why)) {
        snprintf(j->error, sizeof j->error, "step %ld: %s", i, why);
        goto done;
      }
      j->checks++;
    }
  }
  mdr_graph_stats gs;
  if (mdr_graph_cache_stats(c, &gs) || gs.steps != (uint64_t)THREAD_STEPS || gs.eager_steps != 0)
    snprintf(j->error, sizeof j->error, "stats: %llu steps, %llu eager", (unsigned long long)gs.steps,
             (unsigned long long)gs.eager_steps);
done:
  mdr_graph_cache_destroy(c);
  mdr_backend_free(b, mark);
  mdr_arena_destroy(a);
  mdr_backend_stream_destroy(b, s);
  return NULL;
}

/* Run THREADS stepping threads on one shared host backend. 0 when every
 * thread's every check passed, else -1 with the first failure in err. No
 * Criterion calls: also run by the standalone ThreadSanitizer build. */
static int run_stepping_threads(char *err, size_t err_len) {
  mdr_backend *b = NULL;
  static expect_table x;
  mdr_sizes sizes = small_sizes();
  mdr_arena *a = NULL;
  if (mdr_backend_host_create(&b) || mdr_arena_create(b, &sizes, &a)) {
    snprintf(err, err_len, "setup failed");
    return -1;
  }
  expect_table_fill(&x, a);
  mdr_arena_destroy(a);
  /* exact-fused, ladder-memset, dynamic x2: every kind of staged launch */
  const int pick[THREADS] = {1, 2, 4, 5};
  thread_job jobs[THREADS];
  pthread_t tid[THREADS];
  int started = 0, rc = 0;
  for (int i = 0; i < THREADS; i++) {
    jobs[i] = (thread_job){.b = b, .cfg = &k_configs[pick[i]], .seed = 1000 + (uint64_t)i, .x = &x};
    if (pthread_create(&tid[i], NULL, stepping_thread, &jobs[i]) != 0) break;
    started++;
  }
  for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
  if (started != THREADS) {
    snprintf(err, err_len, "pthread_create failed");
    rc = -1;
  }
  for (int i = 0; i < started && rc == 0; i++) {
    if (jobs[i].error[0] || jobs[i].steps != THREAD_STEPS || jobs[i].checks != (THREAD_STEPS + 2) / 3) {
      snprintf(err, err_len, "thread %d (%s): %s (%ld steps, %ld checks)", i, jobs[i].cfg->name,
               jobs[i].error, jobs[i].steps, jobs[i].checks);
      rc = -1;
    }
  }
  mdr_backend_destroy(b);
  return rc;
}

/* Readers of one arena: zero plans for random counts and the accessors,
 * compared with what the main thread saw before the threads started. */
typedef struct reader_job {
  const mdr_arena *a;
  const mdr_segment (*plans)[MDR_ZERO_PLAN_MAX];
  const size_t *counts; /* [M + 2] */
  uint64_t seed;
  long reads;
  char error[200];
} reader_job;

static void *reading_thread(void *arg) {
  reader_job *j = arg;
  uint64_t rng = j->seed;
  const mdr_sizes *sizes = mdr_arena_sizes(j->a);
  for (long i = 0; i < READS; i++) {
    size_t t = tb_rng_next(&rng) % (M + 2), n = 0;
    mdr_segment seg[MDR_ZERO_PLAN_MAX];
    size_t cap = i % 7 == 0 ? 3 : MDR_ZERO_PLAN_MAX;
    if (mdr_arena_zero_plan(j->a, t, seg, cap, &n) != MDR_OK || n != j->counts[t] ||
        memcmp(seg, j->plans[t], (n < cap ? n : cap) * sizeof seg[0]) != 0) {
      snprintf(j->error, sizeof j->error, "zero plan of %zu tokens differs (n=%zu)", t, n);
      return NULL;
    }
    mdr_buffer buf = (mdr_buffer)(tb_rng_next(&rng) % MDR_BUF_COUNT);
    if (mdr_arena_bytes(j->a, buf) != sizes->bytes[buf] ||
        (mdr_arena_ptr(j->a, buf) == 0) != (sizes->bytes[buf] == 0) ||
        mdr_arena_max_batch_tokens(j->a) != M || mdr_arena_slab_bytes(j->a) == 0 ||
        mdr_arena_token_ids(j->a) != mdr_arena_ptr(j->a, MDR_BUF_TOKEN_IDS) ||
        mdr_arena_zero_strategy(j->a) != MDR_ZERO_FUSED || mdr_arena_rows_policy(j->a) != MDR_ROWS_ALL ||
        mdr_arena_backend(j->a) == NULL) {
      snprintf(j->error, sizeof j->error, "accessors of %s disagree", mdr_buffer_name(buf));
      return NULL;
    }
    j->reads++;
  }
  return NULL;
}

/* Run READERS threads reading one arena. 0 or -1 with err, as above. */
static int run_reading_threads(char *err, size_t err_len) {
  mdr_backend *b = NULL;
  mdr_sizes sizes = small_sizes();
  mdr_arena *a = NULL;
  if (mdr_backend_host_create(&b) || mdr_arena_create(b, &sizes, &a) ||
      mdr_arena_set_zero_strategy(a, MDR_ZERO_FUSED) || mdr_arena_set_rows_policy(a, MDR_ROWS_ALL)) {
    snprintf(err, err_len, "setup failed");
    return -1;
  }
  static mdr_segment plans[M + 2][MDR_ZERO_PLAN_MAX];
  static size_t counts[M + 2];
  for (size_t t = 0; t < M + 2; t++) mdr_arena_zero_plan(a, t, plans[t], MDR_ZERO_PLAN_MAX, &counts[t]);
  reader_job jobs[READERS];
  pthread_t tid[READERS];
  int started = 0, rc = 0;
  for (int i = 0; i < READERS; i++) {
    jobs[i] = (reader_job){.a = a, .plans = (const mdr_segment(*)[MDR_ZERO_PLAN_MAX])plans,
                           .counts = counts, .seed = 77 + (uint64_t)i};
    if (pthread_create(&tid[i], NULL, reading_thread, &jobs[i]) != 0) break;
    started++;
  }
  for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
  if (started != READERS) {
    snprintf(err, err_len, "pthread_create failed");
    rc = -1;
  }
  for (int i = 0; i < started && rc == 0; i++)
    if (jobs[i].error[0] || jobs[i].reads != READS) {
      snprintf(err, err_len, "reader %d: %s (%ld reads)", i, jobs[i].error, jobs[i].reads);
      rc = -1;
    }
  mdr_arena_destroy(a);
  mdr_backend_destroy(b);
  return rc;
}

#if !defined(MDR_WORKFLOW_THREADS_MAIN)
Test(workflow, threads_with_their_own_stream_cache_and_arena_share_one_backend) {
  char err[320] = "";
  cr_assert_eq(run_stepping_threads(err, sizeof err), 0, "%s", err);
  cr_log_info("threads: %d threads x %d steps on one backend, every third step checked", THREADS,
              THREAD_STEPS);
}

Test(workflow, several_threads_read_one_arena_at_once) {
  char err[320] = "";
  cr_assert_eq(run_reading_threads(err, sizeof err), 0, "%s", err);
}
#else
/* The thread tests without Criterion, whose process model does not start
 * under ThreadSanitizer (Snaipe/Criterion#274): target test_workflow_threads,
 * run by scripts/sanitize.sh in the -DMDR_SANITIZE=thread build. */
int main(void) {
  char err[320] = "";
  int rc = run_stepping_threads(err, sizeof err);
  printf("workflow threads: %d threads x %d steps on one backend: %s\n", THREADS, THREAD_STEPS,
         rc ? err : "ok");
  int rc2 = run_reading_threads(err, sizeof err);
  printf("workflow readers: %d threads x %d reads of one arena: %s\n", READERS, READS,
         rc2 ? err : "ok");
  return rc || rc2 ? 1 : 0;
}
#endif
