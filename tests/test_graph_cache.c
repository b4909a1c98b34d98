/* Suite `graph_cache`: capture + replay of zeroing, staged token-id upload
 * and the caller's body, per token count; on the host backend (recorded op
 * lists) and, when present, the CUDA backend. Every step is checked by
 * poisoning the whole arena (and the body's own buffer) before it and
 * reading everything back after it. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_backend.h"
#include "support.h"
#if defined(MDR_HAVE_CUDA)
#include "gpu_bodies.h"
#endif

enum { M = TB_SMALL_M, MP = TB_SMALL_MP, LOGITS_ROWS = TB_SMALL_M };

static mdr_sizes small_sizes(void) { return tb_small_sizes(); }

typedef struct fixture {
  mdr_backend *b;
  mdr_stream s;
  mdr_arena *a;
  mdr_dptr mark; /* the body's own buffer, M bytes */
  int body_calls;
  int illegal_under_capture; /* body calls synchronize (illegal while capturing) */
  mdr_status body_status;
} fixture;

static const unsigned char MARK_POISON = 0x3C;

static mdr_status body(void *user, mdr_stream s, size_t tokens) {
  fixture *f = user;
  f->body_calls++;
  if (f->body_status != MDR_OK) return f->body_status;
  mdr_status st = mdr_backend_memset_async(f->b, f->mark, (unsigned char)(tokens | 1), tokens, s);
  if (st == MDR_OK && f->illegal_under_capture) st = mdr_backend_synchronize(f->b, s);
  return st;
}

static mdr_status body_dynamic(void *user, mdr_stream s, mdr_dptr count_ptr, size_t max_tokens) {
  fixture *f = user;
  f->body_calls++;
  cr_assert_neq(count_ptr, 0);
  return mdr_backend_memset_async(f->b, f->mark, 0x77, max_tokens, s);
}

static void fixture_init(fixture *f, mdr_backend *b) {
  memset(f, 0, sizeof *f);
  f->b = b;
  f->s = tb_stream(b);
  mdr_sizes sizes = small_sizes();
  cr_assert_eq(mdr_arena_create(b, &sizes, &f->a), MDR_OK, "%s", mdr_backend_last_error(b));
  cr_assert_eq(mdr_backend_alloc(b, M, &f->mark), MDR_OK);
}

static void fixture_fini(fixture *f) {
  mdr_backend_free(f->b, f->mark);
  mdr_arena_destroy(f->a);
  mdr_backend_stream_destroy(f->b, f->s);
}

static void poison_all(fixture *f) {
  tb_poison_arena(f->a);
  cr_assert_eq(mdr_backend_fill(f->b, f->mark, MARK_POISON, M), MDR_OK);
}

static void random_ids(uint64_t *rng, uint32_t *ids, size_t n) {
  for (size_t i = 0; i < n; i++) ids[i] = (uint32_t)(tb_rng_next(rng) % 150000) + 1;
}

/* After a step of t real tokens served by a graph of g tokens: the rows of
 * zero_all_rows(zero_tokens) are zero, the rest of every buffer poisoned;
 * token_ids holds the ids then pad ids up to `copied`, poison after; the
 * count cell holds t; the body's buffer shows the body ran for g. */
static void expect_step(fixture *f, mdr_graph_cache *c, const uint32_t *ids, size_t t, size_t g,
                        size_t copied, size_t zero_tokens, uint32_t pad, int body_len,
                        unsigned char body_byte, const char *what) {
  size_t want[MDR_BUF_COUNT];
  tb_expected(f->a, TB_ZERO_ROWS, zero_tokens, mdr_arena_rows_policy(f->a), want);
  /* token_ids is checked separately below */
  mdr_dptr idp = mdr_arena_token_ids(f->a);
  size_t idbytes = mdr_arena_token_ids_bytes(f->a);
  uint32_t got[M * 2];
  unsigned char raw[256 + M * 4];
  cr_assert_eq(mdr_backend_copy_d2h(f->b, raw, idp, idbytes), MDR_OK);
  memcpy(got, raw, copied * 4);
  for (size_t i = 0; i < copied; i++)
    cr_assert_eq(got[i], i < t ? ids[i] : pad, "%s: token_ids[%zu] of t=%zu g=%zu", what, i, t, g);
  for (size_t i = copied * 4; i < idbytes; i++)
    cr_assert_eq(raw[i], tb_poison_of(MDR_BUF_TOKEN_IDS), "%s: token_ids byte %zu written", what, i);
  uint32_t count = 0;
  cr_assert_eq(mdr_backend_copy_d2h(f->b, &count, mdr_graph_cache_count_ptr(c), 4), MDR_OK);
  cr_assert_eq(count, t, "%s: count cell", what);
  for (int i = 0; i < MDR_BUF_COUNT; i++)
    if (i == MDR_BUF_TOKEN_IDS) want[i] = 0;
  /* token_ids is not in the zero plan, so its poison check above suffices;
   * tb_expect_arena checks it as all-poison unless we skip it: do so by
   * checking every other buffer here. */
  for (int i = 0; i < MDR_BUF_COUNT; i++) {
    mdr_buffer buf = (mdr_buffer)i;
    mdr_dptr p = mdr_arena_ptr(f->a, buf);
    if (!p || buf == MDR_BUF_TOKEN_IDS) continue;
    long bad = tb_check_head(f->b, p, mdr_arena_bytes(f->a, buf), want[i], tb_poison_of(buf));
    cr_assert_eq(bad, -1, "%s: %s wrong at byte %ld (t=%zu g=%zu, %zu zero expected)", what,
                 mdr_buffer_name(buf), bad, t, g, want[i]);
  }
  unsigned char mark[M];
  cr_assert_eq(mdr_backend_copy_d2h(f->b, mark, f->mark, M), MDR_OK);
  for (int i = 0; i < M; i++)
    cr_assert_eq(mark[i], i < body_len ? body_byte : MARK_POISON, "%s: body byte %d (g=%zu)", what, i, g);
}

typedef struct replay_case {
  tb_kind kind;
  mdr_graph_mode mode;
  mdr_zero_strategy zero;
  mdr_rows_policy policy;
  mdr_graph_dynamic_impl impl;
} replay_case;

ParameterizedTestParameters(graph_cache, replays_zero_upload_and_body_exactly_for_random_counts) {
  static replay_case cases[TB_KIND_COUNT * 6 * 2];
  size_t n = 0;
  for (int k = 0; k < TB_KIND_COUNT; k++)
    for (int p = 0; p < 2; p++) {
      cases[n++] = (replay_case){(tb_kind)k, MDR_GRAPH_EXACT, MDR_ZERO_MEMSET, (mdr_rows_policy)p, MDR_DYNAMIC_NODE_UPDATE};
      cases[n++] = (replay_case){(tb_kind)k, MDR_GRAPH_EXACT, MDR_ZERO_FUSED, (mdr_rows_policy)p, MDR_DYNAMIC_NODE_UPDATE};
      cases[n++] = (replay_case){(tb_kind)k, MDR_GRAPH_LADDER, MDR_ZERO_MEMSET, (mdr_rows_policy)p, MDR_DYNAMIC_NODE_UPDATE};
      cases[n++] = (replay_case){(tb_kind)k, MDR_GRAPH_LADDER, MDR_ZERO_FUSED, (mdr_rows_policy)p, MDR_DYNAMIC_NODE_UPDATE};
      cases[n++] = (replay_case){(tb_kind)k, MDR_GRAPH_DYNAMIC, MDR_ZERO_FUSED, (mdr_rows_policy)p,
                                 MDR_DYNAMIC_NODE_UPDATE};
      cases[n++] = (replay_case){(tb_kind)k, MDR_GRAPH_DYNAMIC, MDR_ZERO_FUSED, (mdr_rows_policy)p,
                                 MDR_DYNAMIC_DEVICE_COUNT};
    }
  return cr_make_param_array(replay_case, cases, n);
}

ParameterizedTest(replay_case *rc, graph_cache, replays_zero_upload_and_body_exactly_for_random_counts) {
  fixture f;
  fixture_init(&f, tb_backend(rc->kind));
  cr_assert_eq(mdr_arena_set_rows_policy(f.a, rc->policy), MDR_OK);
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.mode = rc->mode;
  o.zero = rc->zero;
  o.pad_token_id = 0xFFFFu;
  o.dynamic_impl = rc->impl;
  o.user = &f;
  if (rc->mode == MDR_GRAPH_DYNAMIC) o.body_dynamic = body_dynamic; else o.body = body;
  mdr_graph_cache *c = NULL;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_OK, "%s", mdr_backend_last_error(f.b));
  uint64_t rng = 0x1234 + (uint64_t)rc->mode * 7 + (uint64_t)rc->zero;
  const size_t edges[] = {1, 15, 16, 17, M - 1, M};
  int seen[M + 1] = {0};
  size_t distinct_graphs = 0;
  uint64_t padded = 0;
  for (int step = 0; step < 40; step++) {
    size_t t = step < 6 ? edges[step] : 1 + tb_rng_next(&rng) % M;
    uint32_t ids[M];
    random_ids(&rng, ids, t);
    size_t g = 0;
    cr_assert_eq(mdr_graph_cache_graph_tokens(c, t, &g), MDR_OK);
    poison_all(&f);
    char what[96];
    snprintf(what, sizeof what, "%s mode %d zero %d impl %d step %d", tb_kind_name(rc->kind), rc->mode,
             rc->zero, rc->impl, step);
    cr_assert_eq(mdr_graph_cache_step(c, ids, t), MDR_OK, "%s: %s", what, mdr_backend_last_error(f.b));
    cr_assert_eq(mdr_backend_synchronize(f.b, f.s), MDR_OK);
    if (rc->mode == MDR_GRAPH_DYNAMIC) {
      cr_assert_eq(g, M);
      expect_step(&f, c, ids, t, g, t, t, 0, M, 0x77, what);
    } else {
      expect_step(&f, c, ids, t, g, g, g, o.pad_token_id, (int)g, (unsigned char)(g | 1), what);
      padded += g - t;
    }
    if (!seen[g]++) distinct_graphs++;
  }
  mdr_graph_stats st;
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.steps, 40);
  cr_assert_eq(st.captures, rc->mode == MDR_GRAPH_DYNAMIC ? 1 : distinct_graphs);
  cr_assert_eq(st.misses, st.captures);
  cr_assert_eq(st.hits + st.misses, 40);
  cr_assert_eq(st.graphs, st.captures);
  cr_assert_eq(st.eager_fallbacks, 0);
  cr_assert_eq(st.eager_steps, 0);
  cr_assert_eq(st.padded_tokens, padded);
  cr_assert_eq((uint64_t)f.body_calls, st.captures, "the body runs at capture only, then replays");
  mdr_graph_cache_destroy(c);
  fixture_fini(&f);
  mdr_backend_destroy(f.b);
}

Test(graph_cache, prepare_captures_ahead_so_steps_only_hit) {
  fixture f;
  fixture_init(&f, tb_backend(TB_HOST));
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  mdr_graph_cache *c = NULL;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_OK);
  size_t counts[] = {1, 2, 3, 4, 5, 6, 7, 8, 8, 3};
  cr_assert_eq(mdr_graph_cache_prepare(c, counts, 10), MDR_OK);
  mdr_graph_stats st;
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.captures, 8);
  cr_assert_eq(st.graphs, 8);
  cr_assert_eq(st.steps, 0);
  cr_assert_geq(st.capture_us, 0.0);
  uint32_t ids[M] = {0};
  for (size_t t = 1; t <= 8; t++) cr_assert_eq(mdr_graph_cache_step(c, ids, t), MDR_OK);
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.hits, 8);
  cr_assert_eq(st.misses, 0);
  cr_assert_eq(st.captures, 8);
  /* a bad count anywhere: nothing captured */
  size_t bad[] = {9, 0};
  cr_assert_eq(mdr_graph_cache_prepare(c, bad, 2), MDR_ERR_OUT_OF_RANGE);
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.captures, 8);
  cr_assert_eq(mdr_graph_cache_prepare(c, NULL, 0), MDR_OK);
  cr_assert_eq(mdr_graph_cache_prepare(c, NULL, 1), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_graph_cache_prepare(NULL, counts, 1), MDR_ERR_INVALID_ARGUMENT);
  mdr_graph_cache_destroy(c);

  /* LADDER: 3 and 5 are served by rungs 4 and 8; DYNAMIC: one graph */
  o.mode = MDR_GRAPH_LADDER;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_OK);
  size_t two[] = {3, 5, 4};
  cr_assert_eq(mdr_graph_cache_prepare(c, two, 3), MDR_OK);
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.captures, 2);
  mdr_graph_cache_destroy(c);
  o.mode = MDR_GRAPH_DYNAMIC;
  o.zero = MDR_ZERO_FUSED;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_OK);
  cr_assert_eq(mdr_graph_cache_prepare(c, two, 3), MDR_OK);
  for (size_t t = 1; t <= M; t++) cr_assert_eq(mdr_graph_cache_step(c, ids, t), MDR_OK);
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.captures, 1);
  cr_assert_eq(st.hits, M);
  cr_assert_eq(st.padded_tokens, 0);
  mdr_graph_cache_destroy(c);
  fixture_fini(&f);
  mdr_backend_destroy(f.b);
}

Test(graph_cache, lru_evicts_the_least_recently_used_graph) {
  fixture f;
  fixture_init(&f, tb_backend(TB_HOST));
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.max_graphs = 2;
  o.body = body;
  o.user = &f;
  mdr_graph_cache *c = NULL;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_OK);
  uint32_t ids[M] = {0};
  mdr_graph_stats st;
  /* 1, 2 captured; 1 used again (2 is now LRU); 3 evicts 2; 1 still hits; 2 misses */
  const size_t seq[] = {1, 2, 1, 3, 1, 2};
  const uint64_t hits_after[] = {0, 0, 1, 1, 2, 2};
  const uint64_t evictions_after[] = {0, 0, 0, 1, 1, 2};
  for (int i = 0; i < 6; i++) {
    cr_assert_eq(mdr_graph_cache_step(c, ids, seq[i]), MDR_OK);
    cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
    cr_assert_eq(st.hits, hits_after[i], "step %d", i);
    cr_assert_eq(st.evictions, evictions_after[i], "step %d", i);
    cr_assert_leq(st.graphs, 2);
  }
  cr_assert_eq(st.captures, 4);
  mdr_graph_cache_destroy(c);
  fixture_fini(&f);
  mdr_backend_destroy(f.b);
}

Test(graph_cache, ladder_rungs_pad_ids_and_rows) {
  fixture f;
  fixture_init(&f, tb_backend(TB_HOST));
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.mode = MDR_GRAPH_LADDER;
  mdr_graph_cache *c = NULL;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_OK);
  /* default ladder 1 2 4 8 16 24 32 then M (40) */
  const size_t t_in[] = {1, 2, 3, 5, 9, 17, 25, 33, 40};
  const size_t rung[] = {1, 2, 4, 8, 16, 24, 32, 40, 40};
  for (int i = 0; i < 9; i++) {
    size_t g = 0;
    cr_assert_eq(mdr_graph_cache_graph_tokens(c, t_in[i], &g), MDR_OK);
    cr_assert_eq(g, rung[i], "t=%zu", t_in[i]);
  }
  mdr_graph_cache_destroy(c);
  /* a caller's ladder: rungs above M dropped, M added */
  const size_t mine[] = {3, 10, 64, 128};
  o.ladder = mine;
  o.ladder_len = 4;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_OK);
  size_t g = 0;
  cr_assert_eq(mdr_graph_cache_graph_tokens(c, 1, &g), MDR_OK);
  cr_assert_eq(g, 3);
  cr_assert_eq(mdr_graph_cache_graph_tokens(c, 11, &g), MDR_OK);
  cr_assert_eq(g, M);
  mdr_graph_cache_destroy(c);
  /* not strictly increasing, or holding 0: rejected, out untouched */
  const size_t unsorted[] = {4, 2, 8}, dup[] = {2, 2}, zero[] = {0, 4};
  mdr_graph_cache *keep = (mdr_graph_cache *)0x1; /* a failed create sets it to NULL */
  o.ladder = unsorted; o.ladder_len = 3;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &keep), MDR_ERR_INVALID_ARGUMENT);
  o.ladder = dup; o.ladder_len = 2;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &keep), MDR_ERR_INVALID_ARGUMENT);
  o.ladder = zero; o.ladder_len = 2;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &keep), MDR_ERR_INVALID_ARGUMENT);
  o.ladder = mine; o.ladder_len = 0;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &keep), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_null(keep);
  fixture_fini(&f);
  mdr_backend_destroy(f.b);
}

ParameterizedTestParameters(graph_cache, a_failed_capture_is_ended_and_the_step_runs_eagerly) {
  static tb_kind kinds[] = {TB_HOST, TB_CUDA};
  return cr_make_param_array(tb_kind, kinds, 2);
}

ParameterizedTest(tb_kind *k, graph_cache, a_failed_capture_is_ended_and_the_step_runs_eagerly) {
  fixture f;
  fixture_init(&f, tb_backend(*k));
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.zero = MDR_ZERO_FUSED;
  o.body = body;
  o.user = &f;
  mdr_graph_cache *c = NULL;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_OK);
  uint64_t rng = 99;
  uint32_t ids[M];
  random_ids(&rng, ids, 5);
  f.illegal_under_capture = 1; /* the body synchronizes: illegal while capturing */
  poison_all(&f);
  cr_assert_eq(mdr_graph_cache_step(c, ids, 5), MDR_ERR_CAPTURE);
  cr_assert_neq(strlen(mdr_backend_last_error(f.b)), 0);
  cr_assert_eq(mdr_backend_synchronize(f.b, f.s), MDR_OK, "the stream is usable after the failed capture");
  expect_step(&f, c, ids, 5, 5, 5, 5, 0, 5, 5 | 1, "eager fallback");
  mdr_graph_stats st;
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.eager_fallbacks, 1);
  cr_assert_eq(st.eager_steps, 1);
  cr_assert_eq(st.graphs, 0);
  cr_assert_eq(st.captures, 0);
  cr_assert_eq(st.steps, 1);
  cr_assert_eq(st.uncapturable, 1);
  /* that count now runs eagerly, without a capture attempt per step: one
   * body call per step, not two, and MDR_OK (the failure was reported once) */
  for (int i = 0; i < 3; i++) {
    int calls = f.body_calls;
    random_ids(&rng, ids, 5);
    poison_all(&f);
    cr_assert_eq(mdr_graph_cache_step(c, ids, 5), MDR_OK);
    cr_assert_eq(mdr_backend_synchronize(f.b, f.s), MDR_OK);
    expect_step(&f, c, ids, 5, 5, 5, 5, 0, 5, 5 | 1, "eager-only count");
    cr_assert_eq(f.body_calls - calls, 1, "step %d re-captured an uncapturable count", i);
  }
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.misses, 1);
  cr_assert_eq(st.eager_steps, 4);
  cr_assert_eq(st.graphs, 0);
  /* the body behaves again: a prepare captures the count, later steps replay it */
  f.illegal_under_capture = 0;
  const size_t five = 5;
  cr_assert_eq(mdr_graph_cache_prepare(c, &five, 1), MDR_OK);
  random_ids(&rng, ids, 5);
  poison_all(&f);
  cr_assert_eq(mdr_graph_cache_step(c, ids, 5), MDR_OK);
  cr_assert_eq(mdr_backend_synchronize(f.b, f.s), MDR_OK);
  expect_step(&f, c, ids, 5, 5, 5, 5, 0, 5, 5 | 1, "after recovery");
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.graphs, 1);
  cr_assert_eq(st.hits, 1);
  /* a body that fails outright: the step fails with the body's status */
  f.body_status = MDR_ERR_UNSUPPORTED;
  cr_assert_eq(mdr_graph_cache_step(c, ids, 7), MDR_ERR_UNSUPPORTED);
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.graphs, 1);
  f.body_status = MDR_OK;
  /* and the cache still serves correctly after that */
  random_ids(&rng, ids, 9);
  poison_all(&f);
  cr_assert_eq(mdr_graph_cache_step(c, ids, 9), MDR_OK);
  cr_assert_eq(mdr_backend_synchronize(f.b, f.s), MDR_OK);
  expect_step(&f, c, ids, 9, 9, 9, 9, 0, 9, 9 | 1, "after a failed body");
  mdr_graph_cache_destroy(c);
  fixture_fini(&f);
  mdr_backend_destroy(f.b);
}

Test(graph_cache, disabled_graphs_run_every_step_eagerly_through_the_same_api) {
  fixture f;
  fixture_init(&f, tb_backend(TB_HOST));
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.body = body;
  o.user = &f;
  o.mode = MDR_GRAPH_LADDER;
  mdr_graph_cache *c = NULL;
  setenv("MDR_DISABLE_GRAPHS", "1", 1);
  mdr_status created = mdr_graph_cache_create(f.a, f.s, &o, &c);
  unsetenv("MDR_DISABLE_GRAPHS");
  cr_assert_eq(created, MDR_OK);
  size_t some[] = {1, 2};
  cr_assert_eq(mdr_graph_cache_prepare(c, some, 2), MDR_OK);
  uint64_t rng = 5;
  for (int i = 0; i < 10; i++) {
    size_t t = 1 + tb_rng_next(&rng) % M, g = 0;
    uint32_t ids[M];
    random_ids(&rng, ids, t);
    cr_assert_eq(mdr_graph_cache_graph_tokens(c, t, &g), MDR_OK);
    poison_all(&f);
    cr_assert_eq(mdr_graph_cache_step(c, ids, t), MDR_OK);
    expect_step(&f, c, ids, t, g, g, g, 0, (int)g, (unsigned char)(g | 1), "eager");
  }
  mdr_graph_stats st;
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.captures, 0);
  cr_assert_eq(st.eager_steps, 10);
  cr_assert_eq(st.steps, 10);
  cr_assert_eq(st.graphs, 0);
  mdr_graph_cache_destroy(c);
  fixture_fini(&f);
  mdr_backend_destroy(f.b);
}

Test(graph_cache, bad_input_gets_a_clear_status_and_changes_nothing) {
  fixture f;
  fixture_init(&f, tb_backend(TB_HOST));
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  mdr_graph_cache_options_default(NULL);
  mdr_graph_cache *c = (mdr_graph_cache *)0x1;
  cr_assert_eq(mdr_graph_cache_create(NULL, f.s, &o, &c), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_graph_cache_create(f.a, NULL, &o, &c), MDR_ERR_INVALID_ARGUMENT, "legacy stream");
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, NULL, &c), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, NULL), MDR_ERR_INVALID_ARGUMENT);
  o.mode = (mdr_graph_mode)9;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_ERR_INVALID_ARGUMENT);
  mdr_graph_cache_options_default(&o);
  o.zero = (mdr_zero_strategy)5;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_ERR_INVALID_ARGUMENT);
  mdr_graph_cache_options_default(&o);
  o.mode = MDR_GRAPH_DYNAMIC; /* needs the fused kernel */
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_ERR_INVALID_ARGUMENT);
  o.zero = MDR_ZERO_FUSED;
  o.body = body; /* DYNAMIC takes body_dynamic */
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_ERR_INVALID_ARGUMENT);
  mdr_graph_cache_options_default(&o);
  o.dynamic_impl = (mdr_graph_dynamic_impl)7;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_null(c, "a failed create sets *out to NULL");
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, NULL), MDR_ERR_INVALID_ARGUMENT);
  mdr_graph_cache_options_default(&o);
  o.rows = (mdr_rows_policy)4;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(mdr_backend_last_error(f.b), "rows"), "the refusal names the field: %s",
                     mdr_backend_last_error(f.b));
  mdr_graph_cache_options_default(&o);
  o.body = body;
  o.body_dynamic = body_dynamic; /* one body, not both */
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(mdr_backend_last_error(f.b), "body"), "%s", mdr_backend_last_error(f.b));
  cr_assert_null(c);

  mdr_graph_cache_options_default(&o);
  o.body = body;
  o.user = &f;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_OK);
  uint32_t ids[M + 1] = {0};
  mdr_graph_stats before, after;
  cr_assert_eq(mdr_graph_cache_step(c, ids, 3), MDR_OK);
  cr_assert_eq(mdr_graph_cache_stats(c, &before), MDR_OK);
  int calls = f.body_calls;
  cr_assert_eq(mdr_graph_cache_step(c, ids, 0), MDR_ERR_OUT_OF_RANGE);
  cr_assert_eq(mdr_graph_cache_step(c, ids, M + 1), MDR_ERR_OUT_OF_RANGE);
  cr_assert_eq(mdr_graph_cache_step(c, NULL, 3), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_graph_cache_step(NULL, ids, 3), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_graph_cache_stats(c, &after), MDR_OK);
  cr_assert_eq(memcmp(&before, &after, sizeof before), 0, "a rejected step changed the stats");
  cr_assert_eq(f.body_calls, calls, "a rejected step captured something");
  size_t g = 0;
  cr_assert_eq(mdr_graph_cache_graph_tokens(c, 0, &g), MDR_ERR_OUT_OF_RANGE);
  cr_assert_eq(mdr_graph_cache_graph_tokens(c, 1, NULL), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_graph_cache_graph_tokens(NULL, 1, &g), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_graph_cache_stats(NULL, &after), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_graph_cache_stats(c, NULL), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_graph_cache_count_ptr(NULL), 0);
  mdr_graph_cache_destroy(c);
  mdr_graph_cache_destroy(NULL);
  fixture_fini(&f);
  mdr_backend_destroy(f.b);
}

/* The sweep's step inputs: positions (per token), sequence lengths (per
 * sequence) and a block table of SWEEP_WIDTH entries per sequence, each to
 * a device buffer of its own. */
enum { SWEEP_INPUTS = 3, SWEEP_WIDTH = 4 };

typedef struct sweep_inputs {
  mdr_step_input in[SWEEP_INPUTS];
  mdr_dptr dst[SWEEP_INPUTS];
  size_t bytes[SWEEP_INPUTS];
} sweep_inputs;

static void sweep_inputs_init(sweep_inputs *w, mdr_backend *b) {
  static const char *const names[SWEEP_INPUTS] = {"positions", "seq_lens", "block_table"};
  static const mdr_step_input_shape shapes[SWEEP_INPUTS] = {MDR_INPUT_PER_TOKEN, MDR_INPUT_PER_SEQUENCE,
                                                            MDR_INPUT_PER_SEQUENCE};
  for (int i = 0; i < SWEEP_INPUTS; i++) {
    size_t width = i == 2 ? SWEEP_WIDTH : 1;
    w->bytes[i] = M * width * sizeof(uint32_t);
    cr_assert_eq(mdr_backend_alloc(b, w->bytes[i], &w->dst[i]), MDR_OK);
    w->in[i] = (mdr_step_input){.name = names[i], .elem_bytes = sizeof(uint32_t), .shape = shapes[i],
                                .width = width, .pad = 0xEEEEEEEEu, .dest = MDR_INPUT_TO_DEVICE,
                                .address = w->dst[i]};
  }
}

/* One step's input values at t tokens and s sequences, from the rng. */
typedef struct sweep_values {
  uint32_t ids[M], pos[M], lens[M], table[M * SWEEP_WIDTH];
  const void *v[1 + SWEEP_INPUTS];
} sweep_values;

static void sweep_values_make(sweep_values *v, uint64_t *rng, size_t t, size_t s) {
  random_ids(rng, v->ids, t);
  random_ids(rng, v->pos, t);
  random_ids(rng, v->lens, s);
  random_ids(rng, v->table, s * SWEEP_WIDTH);
  v->v[0] = v->ids;
  v->v[1] = v->pos;
  v->v[2] = v->lens;
  v->v[3] = v->table;
}

/* For every k, fail the k-th backend call of a whole workflow: create,
 * prepare, steps of random counts, destroy. Two workflows in three declare
 * step inputs and drive the cache with mdr_graph_cache_step_inputs (the
 * sequence count random too). No crash, every status is a real one,
 * nothing leaks, and once the faults stop the cache serves a correct step
 * (eagerly if a capture failed), its inputs in their destinations. */
Test(graph_cache, every_injected_fault_is_reported_and_nothing_leaks) {
  mdr_backend *host = tb_backend(TB_HOST), *fb = NULL;
  cr_assert_eq(fault_backend_create(host, &fb), MDR_OK);
  fixture f;
  fixture_init(&f, fb);
  sweep_inputs w;
  sweep_inputs_init(&w, fb);
  long base_live = fault_backend_live(fb);
  long total = 0, with_inputs = 0;
  for (long k = 1;; k++) {
    mdr_graph_cache_options o;
    mdr_graph_cache_options_default(&o);
    o.mode = k % 3 == 0 ? MDR_GRAPH_LADDER : k % 3 == 1 ? MDR_GRAPH_EXACT : MDR_GRAPH_DYNAMIC;
    o.zero = k % 2 || o.mode == MDR_GRAPH_DYNAMIC ? MDR_ZERO_FUSED : MDR_ZERO_MEMSET;
    o.user = &f;
    if (o.mode == MDR_GRAPH_DYNAMIC) o.body_dynamic = body_dynamic; else o.body = body;
    o.max_graphs = 3;
    o.dynamic_impl = k % 4 < 2 ? MDR_DYNAMIC_NODE_UPDATE : MDR_DYNAMIC_DEVICE_COUNT;
    const bool inputs = k % 6 < 4; /* every mode, with and without inputs */
    if (inputs) {
      o.inputs = w.in;
      o.n_inputs = SWEEP_INPUTS;
    }
    long start = fault_backend_calls(fb);
    fault_backend_fail_at(fb, k);
    mdr_graph_cache *c = NULL;
    mdr_status st = mdr_graph_cache_create(f.a, f.s, &o, &c);
    int injected_before = (int)fault_backend_injected(fb);
    if (st != MDR_OK) {
      cr_assert_null(c);
      cr_assert_eq(fault_backend_live(fb), base_live, "leak after failed create (k=%ld)", k);
    } else {
      size_t pre[] = {1, 2};
      st = mdr_graph_cache_prepare(c, pre, 2);
      cr_assert(st == MDR_OK || st == MDR_ERR_CAPTURE || st == MDR_ERR_BACKEND, "k=%ld: %s", k,
                mdr_status_string(st));
      uint64_t rng = (uint64_t)k;
      for (int i = 0; i < 12; i++) {
        sweep_values v;
        size_t t = 1 + tb_rng_next(&rng) % M, seqs = 1 + tb_rng_next(&rng) % t;
        sweep_values_make(&v, &rng, t, seqs);
        st = inputs ? mdr_graph_cache_step_inputs(c, v.v, 1 + SWEEP_INPUTS, t, seqs)
                    : mdr_graph_cache_step(c, v.ids, t);
        cr_assert(st == MDR_OK || st == MDR_ERR_CAPTURE || st == MDR_ERR_BACKEND ||
                      st == MDR_ERR_OUT_OF_MEMORY,
                  "k=%ld step %d: %s", k, i, mdr_status_string(st));
      }
      /* faults off: a step is served correctly */
      fault_backend_fail_at(fb, 0);
      sweep_values v;
      sweep_values_make(&v, &rng, 6, 4);
      const uint32_t *ids = v.ids;
      poison_all(&f);
      for (int i = 0; i < SWEEP_INPUTS; i++) cr_assert_eq(mdr_backend_fill(fb, w.dst[i], 0x3C, w.bytes[i]), MDR_OK);
      st = inputs ? mdr_graph_cache_step_inputs(c, v.v, 1 + SWEEP_INPUTS, 6, 4) : mdr_graph_cache_step(c, ids, 6);
      cr_assert(st == MDR_OK, "k=%ld: after the fault: %s", k, mdr_status_string(st));
      if (inputs) {
        cr_assert_eq(mdr_backend_synchronize(fb, f.s), MDR_OK);
        uint32_t got[M * SWEEP_WIDTH];
        const size_t rows[SWEEP_INPUTS] = {6, 4, 4 * SWEEP_WIDTH};
        for (int i = 0; i < SWEEP_INPUTS; i++) {
          cr_assert_eq(mdr_backend_copy_d2h(fb, got, w.dst[i], rows[i] * sizeof got[0]), MDR_OK);
          cr_assert_eq(memcmp(got, v.v[1 + i], rows[i] * sizeof got[0]), 0, "k=%ld: input %s after the fault",
                       k, w.in[i].name);
        }
        with_inputs++;
      }
      size_t g = 0;
      cr_assert_eq(mdr_graph_cache_graph_tokens(c, 6, &g), MDR_OK);
      if (o.mode == MDR_GRAPH_DYNAMIC)
        expect_step(&f, c, ids, 6, g, 6, 6, 0, M, 0x77, "after fault");
      else
        expect_step(&f, c, ids, 6, g, g, g, 0, (int)g, (unsigned char)(g | 1), "after fault");
      mdr_graph_cache_destroy(c);
      cr_assert_eq(fault_backend_live(fb), base_live, "leak (k=%ld)", k);
    }
    fault_backend_fail_at(fb, 0);
    (void)injected_before;
    long used = fault_backend_calls(fb) - start;
    if (k > used + 2) break; /* k ran past the whole workflow: no fault was injected */
    total++;
  }
  cr_assert_gt(total, 50, "the workflow makes enough calls to be worth injecting into");
  cr_assert_gt(with_inputs, 10, "the sweep drove caches with step inputs");
  for (int i = 0; i < SWEEP_INPUTS; i++) mdr_backend_free(fb, w.dst[i]);
  fixture_fini(&f);
  mdr_backend_destroy(fb);
  mdr_backend_destroy(host);
}

#if defined(MDR_HAVE_CUDA)
/* Staging safety on the GPU: a slow kernel is queued in front, then many
 * steps are submitted behind it (far more than the ring holds); each step's
 * body folds its token_ids into an accumulator. If any step's ids were
 * overwritten before its upload read them, the sums would differ. */
Test(graph_cache, ids_survive_a_host_running_far_ahead_of_the_gpu) {
  mdr_backend *b = tb_backend(TB_CUDA);
  for (int mode = 0; mode < 4; mode++) { /* EXACT fused, EXACT memset, DYNAMIC x2 impls */
    fixture f;
    fixture_init(&f, b);
    mdr_dptr acc_dev = 0;
    cr_assert_eq(mdr_backend_alloc(b, 16, &acc_dev), MDR_OK);
    cr_assert_eq(mdr_backend_fill(b, acc_dev, 0, 16), MDR_OK);
    tb_acc_user u = {f.a, (uint64_t *)(uintptr_t)acc_dev};
    mdr_graph_cache_options o;
    mdr_graph_cache_options_default(&o);
    o.mode = mode >= 2 ? MDR_GRAPH_DYNAMIC : MDR_GRAPH_EXACT;
    o.zero = mode == 1 ? MDR_ZERO_MEMSET : MDR_ZERO_FUSED;
    o.dynamic_impl = mode == 3 ? MDR_DYNAMIC_DEVICE_COUNT : MDR_DYNAMIC_NODE_UPDATE;
    o.user = &u;
    if (o.mode == MDR_GRAPH_DYNAMIC) o.body_dynamic = tb_acc_body_dynamic; else o.body = tb_acc_body;
    mdr_graph_cache *c = NULL;
    cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_OK, "%s", mdr_backend_last_error(b));
    size_t all[M];
    for (size_t t = 1; t <= M; t++) all[t - 1] = t;
    cr_assert_eq(mdr_graph_cache_prepare(c, all, M), MDR_OK, "%s", mdr_backend_last_error(b));
    cr_assert_eq(mdr_backend_synchronize(b, f.s), MDR_OK);
    cr_assert_eq(tb_cuda_sleep(f.s, 50ull * 1000 * 1000), 0);
    uint64_t rng = 77 + (uint64_t)mode, want_sum = 0, want_n = 0;
    for (int step = 0; step < 300; step++) {
      size_t t = 1 + tb_rng_next(&rng) % M;
      uint32_t ids[M];
      random_ids(&rng, ids, t);
      for (size_t i = 0; i < t; i++) want_sum += (uint64_t)(i + 1) * ids[i];
      want_n += t;
      cr_assert_eq(mdr_graph_cache_step(c, ids, t), MDR_OK, "%s", mdr_backend_last_error(b));
      memset(ids, 0xEE, sizeof ids); /* the caller may reuse its buffer at once */
    }
    cr_assert_eq(mdr_backend_synchronize(b, f.s), MDR_OK);
    uint64_t got[2];
    cr_assert_eq(mdr_backend_copy_d2h(b, got, acc_dev, 16), MDR_OK);
    cr_assert_eq(got[1], want_n, "mode %d: tokens seen", mode);
    cr_assert_eq(got[0], want_sum, "mode %d: ids were overwritten before they were read", mode);
    mdr_graph_cache_destroy(c);
    mdr_backend_free(b, acc_dev);
    fixture_fini(&f);
  }
  mdr_backend_destroy(b);
}
#endif

Test(graph_cache, an_arena_whose_token_ids_cannot_hold_m_ids_is_refused) {
  mdr_backend *b = tb_backend(TB_HOST);
  mdr_stream s = tb_stream(b);
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  for (int variant = 0; variant < 2; variant++) {
    mdr_sizes sizes = small_sizes();
    sizes.bytes[MDR_BUF_TOKEN_IDS] = variant == 0 ? 0 : (M - 1) * 4; /* none, or one id short */
    mdr_arena *a = NULL;
    cr_assert_eq(mdr_arena_create(b, &sizes, &a), MDR_OK);
    mdr_graph_cache *c = (mdr_graph_cache *)0x1; /* set to NULL by the failed create */
    cr_assert_eq(mdr_graph_cache_create(a, s, &o, &c), MDR_ERR_INVALID_ARGUMENT, "variant %d", variant);
    cr_assert_null(c);
    cr_assert_neq(strstr(mdr_backend_last_error(b), "token_ids"), NULL);
    mdr_arena_destroy(a);
  }
  mdr_backend_stream_destroy(b, s);
  mdr_backend_destroy(b);
}

/* The row policy is read once, at create: a graph and an eager step of the
 * same cache never disagree on what they clear. */
Test(graph_cache, the_row_policy_is_the_one_of_create_time) {
  fixture f;
  fixture_init(&f, tb_backend(TB_HOST));
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.body = body;
  o.user = &f;
  mdr_graph_cache *c = NULL;
  cr_assert_eq(mdr_arena_set_rows_policy(f.a, MDR_ROWS_ALL), MDR_OK);
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_OK);
  cr_assert_eq(mdr_arena_set_rows_policy(f.a, MDR_ROWS_SEED), MDR_OK);
  uint64_t rng = 3;
  uint32_t ids[M];
  for (int i = 0; i < 2; i++) { /* the capture, then a replay */
    random_ids(&rng, ids, 2);
    poison_all(&f);
    cr_assert_eq(mdr_graph_cache_step(c, ids, 2), MDR_OK);
    cr_assert_eq(mdr_arena_set_rows_policy(f.a, MDR_ROWS_ALL), MDR_OK); /* expect_step reads it */
    expect_step(&f, c, ids, 2, 2, 2, 2, 0, 2, 2 | 1, "policy of create time");
    cr_assert_eq(mdr_arena_set_rows_policy(f.a, MDR_ROWS_SEED), MDR_OK);
  }
  mdr_graph_cache_destroy(c);
  fixture_fini(&f);
  mdr_backend_destroy(f.b);
}

/* prepare: a failure of the zeroing or staging under capture is the
 * capture's (MDR_ERR_CAPTURE); a failure of the body is the body's status. */
Test(graph_cache, prepare_reports_capture_failures_and_body_failures_apart) {
  mdr_backend *host = tb_backend(TB_HOST), *fb = NULL;
  cr_assert_eq(fault_backend_create(host, &fb), MDR_OK);
  fixture f;
  fixture_init(&f, fb);
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.body = body;
  o.user = &f;
  mdr_graph_cache *c = NULL;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_OK);
  size_t one[] = {3};
  fault_backend_fail_kind(fb, MDR_OP_MEMSET_ASYNC); /* the plan's memsets, under capture */
  cr_assert_eq(mdr_graph_cache_prepare(c, one, 1), MDR_ERR_CAPTURE);
  fault_backend_fail_kind(fb, -1);
  f.body_status = MDR_ERR_UNSUPPORTED;
  cr_assert_eq(mdr_graph_cache_prepare(c, one, 1), MDR_ERR_UNSUPPORTED);
  f.body_status = MDR_OK;
  cr_assert_eq(mdr_graph_cache_prepare(c, one, 1), MDR_OK);
  mdr_graph_stats st;
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.captures, 1);
  cr_assert_eq(st.graphs, 1);
  mdr_graph_cache_destroy(c);
  fixture_fini(&f);
  cr_assert_eq(fault_backend_live(fb), 0);
  mdr_backend_destroy(fb);
  mdr_backend_destroy(host);
}

/* DYNAMIC by node update re-targets the one graph only when the count
 * changes; every step still zeroes and uploads exactly its own count. */
Test(graph_cache, dynamic_node_update_touches_the_graph_only_when_the_count_changes) {
  mdr_backend *host = tb_backend(TB_HOST), *fb = NULL;
  cr_assert_eq(fault_backend_create(host, &fb), MDR_OK);
  fixture f;
  fixture_init(&f, fb);
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.mode = MDR_GRAPH_DYNAMIC;
  o.zero = MDR_ZERO_FUSED;
  o.body_dynamic = body_dynamic;
  o.user = &f;
  mdr_graph_cache *c = NULL;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_OK);
  const size_t seq[] = {M, 5, 5, 5, 9, 9, 5, M, M};
  const long updates_after[] = {0, 1, 1, 1, 2, 2, 3, 4, 4}; /* captured at M: the first M needs none */
  uint64_t rng = 11;
  long base = fault_backend_calls_of(fb, MDR_OP_FUSED_NODE_UPDATE);
  for (int i = 0; i < 9; i++) {
    uint32_t ids[M];
    random_ids(&rng, ids, seq[i]);
    poison_all(&f);
    cr_assert_eq(mdr_graph_cache_step(c, ids, seq[i]), MDR_OK);
    cr_assert_eq(fault_backend_calls_of(fb, MDR_OP_FUSED_NODE_UPDATE) - base, updates_after[i], "step %d", i);
    expect_step(&f, c, ids, seq[i], M, seq[i], seq[i], 0, M, 0x77, "node update");
  }
  /* a failed update changes nothing: the next step of another count updates again */
  fault_backend_fail_kind(fb, MDR_OP_FUSED_NODE_UPDATE);
  uint32_t ids[M] = {1, 2, 3};
  cr_assert_eq(mdr_graph_cache_step(c, ids, 3), MDR_ERR_BACKEND);
  fault_backend_fail_kind(fb, -1);
  long before = fault_backend_calls_of(fb, MDR_OP_FUSED_NODE_UPDATE);
  poison_all(&f);
  cr_assert_eq(mdr_graph_cache_step(c, ids, 3), MDR_OK);
  cr_assert_eq(fault_backend_calls_of(fb, MDR_OP_FUSED_NODE_UPDATE) - before, 1);
  expect_step(&f, c, ids, 3, M, 3, 3, 0, M, 0x77, "after a failed update");
  mdr_graph_cache_destroy(c);
  fixture_fini(&f);
  mdr_backend_destroy(fb);
  mdr_backend_destroy(host);
}

/* ------------------------------------------------------------------------- */
/* misuse: a step or prepare under a capture, or from inside a body */

ParameterizedTestParameters(graph_cache, step_and_prepare_refuse_under_an_outer_capture_and_change_nothing) {
  static tb_kind kinds[] = {TB_HOST, TB_CUDA};
  return cr_make_param_array(tb_kind, kinds, 2);
}

/* An engine capturing its own graph around step: refused with
 * MDR_ERR_STATE, nothing staged or counted, and every later step right. */
ParameterizedTest(tb_kind *k, graph_cache, step_and_prepare_refuse_under_an_outer_capture_and_change_nothing) {
  fixture f;
  fixture_init(&f, tb_backend(*k));
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.zero = MDR_ZERO_FUSED;
  o.body = body;
  o.user = &f;
  mdr_graph_cache *c = NULL;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_OK);
  uint64_t rng = 41;
  uint32_t ids[M];
  random_ids(&rng, ids, 5);
  cr_assert_eq(mdr_graph_cache_step(c, ids, 5), MDR_OK);
  cr_assert_eq(mdr_backend_synchronize(f.b, f.s), MDR_OK);
  mdr_graph_stats before, after;
  cr_assert_eq(mdr_graph_cache_stats(c, &before), MDR_OK);
  const int calls = f.body_calls;

  cr_assert_eq(mdr_be_capture_begin(f.b, f.s), MDR_OK);
  cr_assert_eq(mdr_graph_cache_step(c, ids, 5), MDR_ERR_STATE);
  cr_assert_not_null(strstr(mdr_backend_last_error(f.b), "captured"), "%s", mdr_backend_last_error(f.b));
  const size_t counts[] = {3};
  cr_assert_eq(mdr_graph_cache_prepare(c, counts, 1), MDR_ERR_STATE);
  void *g = NULL;
  mdr_status ended = mdr_be_capture_end(f.b, f.s, &g);
  if (ended == MDR_OK) mdr_be_graph_destroy(f.b, g);
  cr_assert_eq(mdr_graph_cache_stats(c, &after), MDR_OK);
  cr_assert_eq(memcmp(&before, &after, sizeof before), 0, "a refused call changed the stats");
  cr_assert_eq(f.body_calls, calls, "a refused call ran the body");

  for (size_t t = 1; t <= 9; t += 4) { /* later steps: right ids, right count */
    random_ids(&rng, ids, t);
    poison_all(&f);
    cr_assert_eq(mdr_graph_cache_step(c, ids, t), MDR_OK, "%s", mdr_backend_last_error(f.b));
    cr_assert_eq(mdr_backend_synchronize(f.b, f.s), MDR_OK);
    expect_step(&f, c, ids, t, t, t, t, 0, (int)t, (unsigned char)(t | 1), "after the refused capture");
  }
  mdr_graph_cache_destroy(c);
  fixture_fini(&f);
  mdr_backend_destroy(f.b);
}

typedef struct reentry {
  fixture *f;
  mdr_graph_cache *c;
  mdr_status inner_step, inner_prepare;
} reentry;

static mdr_status reentrant_body(void *user, mdr_stream s, size_t tokens) {
  reentry *r = user;
  const uint32_t ids[1] = {7};
  const size_t count = 1;
  r->inner_step = mdr_graph_cache_step(r->c, ids, 1);
  r->inner_prepare = mdr_graph_cache_prepare(r->c, &count, 1);
  return body(r->f, s, tokens);
}

ParameterizedTestParameters(graph_cache, a_body_calling_its_own_cache_is_refused) {
  static tb_kind kinds[] = {TB_HOST, TB_CUDA};
  return cr_make_param_array(tb_kind, kinds, 2);
}

/* A body re-entering step or prepare gets MDR_ERR_STATE (no recursion, no
 * stack overflow), and the outer step is served exactly, eager or graph. */
ParameterizedTest(tb_kind *k, graph_cache, a_body_calling_its_own_cache_is_refused) {
  fixture f;
  fixture_init(&f, tb_backend(*k));
  reentry r = {.f = &f};
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.zero = MDR_ZERO_FUSED;
  o.body = reentrant_body;
  o.user = &r;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &r.c), MDR_OK);
  uint64_t rng = 42;
  uint32_t ids[M];
  for (int i = 0; i < 3; i++) { /* capture, replay, replay */
    random_ids(&rng, ids, 6);
    r.inner_step = r.inner_prepare = MDR_OK;
    poison_all(&f);
    cr_assert_eq(mdr_graph_cache_step(r.c, ids, 6), MDR_OK, "%s", mdr_backend_last_error(f.b));
    cr_assert_eq(mdr_backend_synchronize(f.b, f.s), MDR_OK);
    expect_step(&f, r.c, ids, 6, 6, 6, 6, 0, 6, 6 | 1, "outer step");
    if (i == 0) {
      cr_assert_eq(r.inner_step, MDR_ERR_STATE);
      cr_assert_eq(r.inner_prepare, MDR_ERR_STATE);
    }
  }
  mdr_graph_stats st;
  cr_assert_eq(mdr_graph_cache_stats(r.c, &st), MDR_OK);
  cr_assert_eq(st.steps, 3);
  cr_assert_eq(st.captures, 1);
  cr_assert_eq(st.hits, 2);
  mdr_graph_cache_destroy(r.c);
  fixture_fini(&f);
  mdr_backend_destroy(f.b);
}

/* ------------------------------------------------------------------------- */
/* one body for every mode; the node DYNAMIC re-targets */

/* A DYNAMIC body with a fused launch of its own: the cache re-targets the
 * node its capture reported, never the body's. */
static mdr_status body_dynamic_fused(void *user, mdr_stream s, mdr_dptr count_ptr, size_t max_tokens) {
  fixture *f = user;
  f->body_calls++;
  cr_assert_neq(count_ptr, 0);
  cr_assert_eq(max_tokens, M);
  const mdr_zero_seg seg = {.ptr = f->mark, .bytes = M, .rule = MDR_RULE_FIXED};
  return mdr_be_zero_fused(f->b, &seg, 1, 0, NULL, s, NULL);
}

ParameterizedTestParameters(graph_cache, dynamic_node_update_retargets_its_own_node_beside_a_fused_body) {
  static tb_kind kinds[] = {TB_HOST, TB_CUDA};
  return cr_make_param_array(tb_kind, kinds, 2);
}

ParameterizedTest(tb_kind *k, graph_cache, dynamic_node_update_retargets_its_own_node_beside_a_fused_body) {
  fixture f;
  fixture_init(&f, tb_backend(*k));
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.mode = MDR_GRAPH_DYNAMIC;
  o.zero = MDR_ZERO_FUSED;
  o.dynamic_impl = MDR_DYNAMIC_NODE_UPDATE;
  o.body_dynamic = body_dynamic_fused;
  o.user = &f;
  mdr_graph_cache *c = NULL;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_OK, "%s", mdr_backend_last_error(f.b));
  uint64_t rng = 43;
  uint32_t ids[M];
  const size_t counts[] = {1, 7, 7, 40, 2, 17, 1, 39};
  for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
    const size_t t = counts[i];
    random_ids(&rng, ids, t);
    poison_all(&f);
    cr_assert_eq(mdr_graph_cache_step(c, ids, t), MDR_OK, "%s", mdr_backend_last_error(f.b));
    cr_assert_eq(mdr_backend_synchronize(f.b, f.s), MDR_OK);
    expect_step(&f, c, ids, t, M, t, t, 0, M, 0, "dynamic beside a fused body");
  }
  mdr_graph_stats st;
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.captures, 1);
  cr_assert_eq(f.body_calls, 1);
  mdr_graph_cache_destroy(c);
  fixture_fini(&f);
  mdr_backend_destroy(f.b);
}

typedef struct body_mode_case {
  tb_kind kind;
  mdr_graph_mode mode;
} body_mode_case;

ParameterizedTestParameters(graph_cache, the_counted_body_serves_exact_and_ladder_caches_too) {
  static body_mode_case cases[] = {{TB_HOST, MDR_GRAPH_EXACT}, {TB_HOST, MDR_GRAPH_LADDER},
                                   {TB_CUDA, MDR_GRAPH_EXACT}, {TB_CUDA, MDR_GRAPH_LADDER}};
  return cr_make_param_array(body_mode_case, cases, sizeof cases / sizeof cases[0]);
}

/* body_dynamic in EXACT and LADDER: the count word holds the real count and
 * max_tokens is the graph's count (the rows the body may touch). */
ParameterizedTest(body_mode_case *bc, graph_cache, the_counted_body_serves_exact_and_ladder_caches_too) {
  fixture f;
  fixture_init(&f, tb_backend(bc->kind));
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.mode = bc->mode;
  o.zero = MDR_ZERO_FUSED;
  o.pad_token_id = 9;
  o.body_dynamic = body_dynamic;
  o.user = &f;
  mdr_graph_cache *c = NULL;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_OK, "%s", mdr_backend_last_error(f.b));
  uint64_t rng = 44;
  uint32_t ids[M];
  const size_t counts[] = {3, 3, 5, 20, 40};
  for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
    const size_t t = counts[i];
    size_t g = 0;
    cr_assert_eq(mdr_graph_cache_graph_tokens(c, t, &g), MDR_OK);
    random_ids(&rng, ids, t);
    poison_all(&f);
    cr_assert_eq(mdr_graph_cache_step(c, ids, t), MDR_OK, "%s", mdr_backend_last_error(f.b));
    cr_assert_eq(mdr_backend_synchronize(f.b, f.s), MDR_OK);
    expect_step(&f, c, ids, t, g, g, g, 9, (int)g, 0x77, "counted body");
  }
  mdr_graph_cache_destroy(c);
  fixture_fini(&f);
  mdr_backend_destroy(f.b);
}

/* ------------------------------------------------------------------------- */
/* policies: one owner each, one moment */

Test(graph_cache, policies_default_to_the_arenas_at_create_and_options_override_them) {
  fixture f;
  fixture_init(&f, tb_backend(TB_HOST));
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  cr_assert_eq(o.zero, MDR_ZERO_FROM_ARENA);
  cr_assert_eq(o.rows, MDR_ROWS_FROM_ARENA);
  o.body = body;
  o.user = &f;
  cr_assert_eq(mdr_arena_set_zero_strategy(f.a, MDR_ZERO_FUSED), MDR_OK);
  cr_assert_eq(mdr_arena_set_rows_policy(f.a, MDR_ROWS_ALL), MDR_OK);
  mdr_graph_cache *inherit = NULL, *own = NULL;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &inherit), MDR_OK);
  o.zero = MDR_ZERO_MEMSET;
  o.rows = MDR_ROWS_SEED;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &own), MDR_OK);
  /* later changes to the arena reach neither cache */
  cr_assert_eq(mdr_arena_set_zero_strategy(f.a, MDR_ZERO_MEMSET), MDR_OK);
  cr_assert_eq(mdr_arena_set_rows_policy(f.a, MDR_ROWS_SEED), MDR_OK);
  cr_assert_eq(mdr_graph_cache_zero_strategy(inherit), MDR_ZERO_FUSED);
  cr_assert_eq(mdr_graph_cache_rows_policy(inherit), MDR_ROWS_ALL);
  cr_assert_eq(mdr_graph_cache_zero_strategy(own), MDR_ZERO_MEMSET);
  cr_assert_eq(mdr_graph_cache_rows_policy(own), MDR_ROWS_SEED);
  cr_assert_eq(mdr_graph_cache_zero_strategy(NULL), MDR_ZERO_FROM_ARENA);
  cr_assert_eq(mdr_graph_cache_rows_policy(NULL), MDR_ROWS_FROM_ARENA);
  /* the FROM_ARENA values are for cache options only */
  cr_assert_eq(mdr_arena_set_zero_strategy(f.a, MDR_ZERO_FROM_ARENA), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_arena_set_rows_policy(f.a, MDR_ROWS_FROM_ARENA), MDR_ERR_INVALID_ARGUMENT);
  /* what each clears follows its own pair: ALL trims logits, SEED clears it whole */
  uint64_t rng = 45;
  uint32_t ids[M];
  random_ids(&rng, ids, 2);
  poison_all(&f);
  cr_assert_eq(mdr_graph_cache_step(inherit, ids, 2), MDR_OK);
  cr_assert_eq(mdr_arena_set_rows_policy(f.a, MDR_ROWS_ALL), MDR_OK); /* expect_step reads it */
  expect_step(&f, inherit, ids, 2, 2, 2, 2, 0, 2, 2 | 1, "inherited ALL");
  cr_assert_eq(mdr_arena_set_rows_policy(f.a, MDR_ROWS_SEED), MDR_OK);
  poison_all(&f);
  cr_assert_eq(mdr_graph_cache_step(own, ids, 2), MDR_OK);
  expect_step(&f, own, ids, 2, 2, 2, 2, 0, 2, 2 | 1, "own SEED");
  mdr_graph_cache_destroy(inherit);
  mdr_graph_cache_destroy(own);
  fixture_fini(&f);
  mdr_backend_destroy(f.b);
}

/* MDR_DISABLE_GRAPHS takes the usual truthy spellings, and stats say so. */
Test(graph_cache, disable_graphs_accepts_truthy_spellings_and_stats_say_so) {
  fixture f;
  fixture_init(&f, tb_backend(TB_HOST));
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  static const struct {
    const char *value;
    int disabled;
  } k_values[] = {{"1", 1}, {"true", 1}, {"YES", 1}, {"On", 1}, {"0", 0}, {"no", 0}, {"", 0}, {"2", 0}};
  for (size_t i = 0; i < sizeof k_values / sizeof k_values[0]; i++) {
    setenv("MDR_DISABLE_GRAPHS", k_values[i].value, 1);
    mdr_graph_cache *c = NULL;
    mdr_status st = mdr_graph_cache_create(f.a, f.s, &o, &c);
    unsetenv("MDR_DISABLE_GRAPHS");
    cr_assert_eq(st, MDR_OK);
    mdr_graph_stats s;
    cr_assert_eq(mdr_graph_cache_stats(c, &s), MDR_OK);
    cr_assert_eq(s.graphs_disabled, k_values[i].disabled, "MDR_DISABLE_GRAPHS=\"%s\"", k_values[i].value);
    const uint32_t ids[2] = {1, 2};
    cr_assert_eq(mdr_graph_cache_step(c, ids, 2), MDR_OK);
    cr_assert_eq(mdr_graph_cache_stats(c, &s), MDR_OK);
    cr_assert_eq(s.eager_steps, (uint64_t)k_values[i].disabled);
    mdr_graph_cache_destroy(c);
  }
  fixture_fini(&f);
  mdr_backend_destroy(f.b);
}

/* A body that fails says so in the last error (not an empty or older text),
 * under capture and eagerly. */
Test(graph_cache, a_failing_body_is_named_in_the_last_error) {
  fixture f;
  fixture_init(&f, tb_backend(TB_HOST));
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.body = body;
  o.user = &f;
  mdr_graph_cache *c = NULL;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_OK);
  f.body_status = MDR_ERR_UNSUPPORTED;
  const uint32_t ids[4] = {1, 2, 3, 4};
  const size_t four = 4;
  cr_assert_eq(mdr_graph_cache_prepare(c, &four, 1), MDR_ERR_UNSUPPORTED);
  cr_assert_not_null(strstr(mdr_backend_last_error(f.b), "the body returned"), "%s", mdr_backend_last_error(f.b));
  cr_assert_not_null(strstr(mdr_backend_last_error(f.b), "under capture"), "%s", mdr_backend_last_error(f.b));
  cr_assert_eq(mdr_graph_cache_step(c, ids, 4), MDR_ERR_UNSUPPORTED);
  cr_assert_not_null(strstr(mdr_backend_last_error(f.b), "the body returned"), "%s", mdr_backend_last_error(f.b));
  cr_assert_eq(mdr_graph_cache_step(c, NULL, 4), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(mdr_backend_last_error(f.b), "NULL token ids"), "%s", mdr_backend_last_error(f.b));
  mdr_graph_cache_destroy(c);
  fixture_fini(&f);
  mdr_backend_destroy(f.b);
}

/* ------------------------------------------------------------------------- */
/* steps whose ids are already in device memory */

typedef struct device_ids_case {
  tb_kind kind;
  mdr_graph_mode mode;
  mdr_zero_strategy zero;
  mdr_graph_dynamic_impl impl;
  int disable_graphs;
} device_ids_case;

ParameterizedTestParameters(graph_cache, device_and_host_steps_mix_and_each_delivers_its_ids) {
  static device_ids_case cases[TB_KIND_COUNT * 6];
  size_t n = 0;
  for (int k = 0; k < TB_KIND_COUNT; k++) {
    cases[n++] = (device_ids_case){(tb_kind)k, MDR_GRAPH_EXACT, MDR_ZERO_FUSED, MDR_DYNAMIC_NODE_UPDATE, 0};
    cases[n++] = (device_ids_case){(tb_kind)k, MDR_GRAPH_EXACT, MDR_ZERO_MEMSET, MDR_DYNAMIC_NODE_UPDATE, 0};
    cases[n++] = (device_ids_case){(tb_kind)k, MDR_GRAPH_LADDER, MDR_ZERO_FUSED, MDR_DYNAMIC_NODE_UPDATE, 0};
    cases[n++] = (device_ids_case){(tb_kind)k, MDR_GRAPH_DYNAMIC, MDR_ZERO_FUSED, MDR_DYNAMIC_NODE_UPDATE, 0};
    cases[n++] = (device_ids_case){(tb_kind)k, MDR_GRAPH_DYNAMIC, MDR_ZERO_FUSED, MDR_DYNAMIC_DEVICE_COUNT, 0};
    cases[n++] = (device_ids_case){(tb_kind)k, MDR_GRAPH_LADDER, MDR_ZERO_FUSED, MDR_DYNAMIC_NODE_UPDATE, 1};
  }
  return cr_make_param_array(device_ids_case, cases, n);
}

/* Random counts, each step host-fed, device-fed from the engine's buffer,
 * or device-fed in place (token_ids written before the step): every step
 * delivers exactly its ids (and pad), its count, its zeroing and its body. */
ParameterizedTest(device_ids_case *dc, graph_cache, device_and_host_steps_mix_and_each_delivers_its_ids) {
  fixture f;
  fixture_init(&f, tb_backend(dc->kind));
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.mode = dc->mode;
  o.zero = dc->zero;
  o.dynamic_impl = dc->impl;
  o.pad_token_id = 0xABCDu;
  o.user = &f;
  if (dc->mode == MDR_GRAPH_DYNAMIC) {
    o.body_dynamic = body_dynamic;
  } else {
    o.body = body;
  }
  if (dc->disable_graphs) setenv("MDR_DISABLE_GRAPHS", "1", 1);
  mdr_graph_cache *c = NULL;
  mdr_status created = mdr_graph_cache_create(f.a, f.s, &o, &c);
  unsetenv("MDR_DISABLE_GRAPHS");
  cr_assert_eq(created, MDR_OK, "%s", mdr_backend_last_error(f.b));
  mdr_dptr sampled = 0; /* the engine's own id buffer */
  cr_assert_eq(mdr_backend_alloc(f.b, M * sizeof(uint32_t), &sampled), MDR_OK);
  uint64_t rng = 0xD1D5 + (uint64_t)dc->mode * 3 + (uint64_t)dc->impl;
  uint32_t ids[M];
  uint64_t device_steps = 0;
  for (int i = 0; i < 60; i++) {
    const size_t t = i < 3 ? (size_t)(i + 1) : 1 + tb_rng_next(&rng) % M;
    const int how = (int)(tb_rng_next(&rng) % 3); /* 0 host, 1 device buffer, 2 in place */
    size_t g = 0;
    cr_assert_eq(mdr_graph_cache_graph_tokens(c, t, &g), MDR_OK);
    random_ids(&rng, ids, t);
    poison_all(&f);
    mdr_status st;
    if (how == 0) {
      st = mdr_graph_cache_step(c, ids, t);
    } else if (how == 1) {
      cr_assert_eq(mdr_backend_copy_h2d(f.b, sampled, ids, t * sizeof *ids), MDR_OK);
      st = mdr_graph_cache_step_device(c, sampled, t);
      device_steps++;
    } else {
      cr_assert_eq(mdr_backend_copy_h2d(f.b, mdr_arena_token_ids(f.a), ids, t * sizeof *ids), MDR_OK);
      st = mdr_graph_cache_step_device(c, 0, t);
      device_steps++;
    }
    cr_assert_eq(st, MDR_OK, "step %d (t=%zu, how %d): %s", i, t, how, mdr_backend_last_error(f.b));
    cr_assert_eq(mdr_backend_synchronize(f.b, f.s), MDR_OK);
    const size_t copied = dc->mode == MDR_GRAPH_DYNAMIC ? t : g;
    const size_t zero_tokens = dc->mode == MDR_GRAPH_DYNAMIC ? t : g;
    if (dc->mode == MDR_GRAPH_DYNAMIC) {
      expect_step(&f, c, ids, t, g, copied, zero_tokens, 0xABCDu, (int)g, 0x77, "dynamic");
    } else {
      expect_step(&f, c, ids, t, g, copied, zero_tokens, 0xABCDu, (int)g, (unsigned char)(g | 1), "static");
    }
  }
  mdr_graph_stats st;
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.device_steps, device_steps);
  cr_assert_eq(st.steps, 60);
  if (dc->disable_graphs) cr_assert_eq(st.eager_steps, 60);
  else cr_assert_gt(st.hits, 0);
  mdr_backend_free(f.b, sampled);
  mdr_graph_cache_destroy(c);
  fixture_fini(&f);
  mdr_backend_destroy(f.b);
}

/* A device step reads nothing from the staging ring in EXACT mode: no host
 * step ever wrote a slot here (the ring is all zero), yet the count cell
 * holds each step's count. And a step with the ids at another address
 * captures that count again. */
Test(graph_cache, exact_device_steps_read_no_slot_and_follow_a_moved_buffer) {
  fixture f;
  fixture_init(&f, tb_backend(TB_HOST));
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.zero = MDR_ZERO_FUSED;
  o.body = body;
  o.user = &f;
  mdr_graph_cache *c = NULL;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_OK);
  mdr_dptr a = 0, b = 0;
  cr_assert_eq(mdr_backend_alloc(f.b, M * 4, &a), MDR_OK);
  cr_assert_eq(mdr_backend_alloc(f.b, M * 4, &b), MDR_OK);
  uint32_t ids[M];
  uint64_t rng = 77;
  const size_t five = 5;
  cr_assert_eq(mdr_graph_cache_prepare_device(c, a, &five, 1), MDR_OK);
  for (int i = 0; i < 4; i++) {
    const mdr_dptr src = i < 2 ? a : b;
    random_ids(&rng, ids, 5);
    poison_all(&f);
    cr_assert_eq(mdr_backend_copy_h2d(f.b, src, ids, sizeof ids), MDR_OK);
    cr_assert_eq(mdr_graph_cache_step_device(c, src, 5), MDR_OK, "%s", mdr_backend_last_error(f.b));
    expect_step(&f, c, ids, 5, 5, 5, 5, 0, 5, 5 | 1, "device step");
  }
  mdr_graph_stats st;
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.captures, 2, "prepared with a, captured again for b");
  cr_assert_eq(st.evictions, 1, "the graph captured with a was dropped");
  cr_assert_eq(st.graphs, 1);
  cr_assert_eq(st.hits, 3);
  /* prepare with a again: the graph of b is dropped and 5 captured for a,
   * whose step is then a hit */
  cr_assert_eq(mdr_graph_cache_prepare_device(c, a, &five, 1), MDR_OK);
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.captures, 3, "prepared again with a");
  cr_assert_eq(st.evictions, 2, "the graph captured with b was dropped");
  cr_assert_eq(st.graphs, 1);
  random_ids(&rng, ids, 5);
  poison_all(&f);
  cr_assert_eq(mdr_backend_copy_h2d(f.b, a, ids, sizeof ids), MDR_OK);
  cr_assert_eq(mdr_graph_cache_step_device(c, a, 5), MDR_OK, "%s", mdr_backend_last_error(f.b));
  expect_step(&f, c, ids, 5, 5, 5, 5, 0, 5, 5 | 1, "device step after the prepare");
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.captures, 3, "the prepared graph served");
  cr_assert_eq(st.hits, 4);
  cr_assert_eq(mdr_graph_cache_step_device(c, a, 0), MDR_ERR_OUT_OF_RANGE);
  /* 0 names the arena's token_ids, for prepare and step alike: a hit */
  const size_t seven = 7;
  cr_assert_eq(mdr_graph_cache_prepare_device(c, 0, &seven, 1), MDR_OK);
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  const uint64_t captures = st.captures;
  cr_assert_eq(mdr_graph_cache_step_device(c, mdr_arena_token_ids(f.a), 7), MDR_OK);
  cr_assert_eq(mdr_graph_cache_step_device(c, 0, 7), MDR_OK);
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.captures, captures, "prepared with 0, stepped with token_ids and 0: no new capture");
  cr_assert_eq(mdr_graph_cache_step_device(NULL, a, 1), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_graph_cache_prepare_device(NULL, a, &five, 1), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_graph_cache_prepare_device(c, a, NULL, 1), MDR_ERR_INVALID_ARGUMENT);
  const size_t too_many = M + 1;
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  const uint64_t before = st.captures;
  cr_assert_eq(mdr_graph_cache_prepare_device(c, a, &too_many, 1), MDR_ERR_OUT_OF_RANGE);
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.captures, before, "a refused prepare captured nothing");
  mdr_backend_free(f.b, a);
  mdr_backend_free(f.b, b);
  mdr_graph_cache_destroy(c);
  fixture_fini(&f);
  mdr_backend_destroy(f.b);
}

/* ------------------------------------------------------------------------- */
/* graph memory, nodes, the byte cap */

/* Each graph's memory and nodes are reported per count and summed in the
 * stats; dropping a graph takes its share out. (The host backend counts
 * sizeof(op) per recorded op, so the figures are exact there.) */
ParameterizedTestParameters(graph_cache, graph_memory_and_nodes_are_reported_per_graph_and_in_total) {
  static tb_kind kinds[] = {TB_HOST, TB_CUDA};
  return cr_make_param_array(tb_kind, kinds, 2);
}

ParameterizedTest(tb_kind *k, graph_cache, graph_memory_and_nodes_are_reported_per_graph_and_in_total) {
  fixture f;
  fixture_init(&f, tb_backend(*k));
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.body = body;
  o.user = &f;
  mdr_graph_cache *c = NULL;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_OK);
  const size_t counts[] = {1, 5, 40};
  cr_assert_eq(mdr_graph_cache_prepare(c, counts, 3), MDR_OK);
  mdr_graph_stats st;
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.memory_measured, 1);
  uint64_t bytes = 0;
  size_t nodes = 0;
  for (int i = 0; i < 3; i++) {
    mdr_graph_info gi;
    cr_assert_eq(mdr_graph_cache_graph_info(c, counts[i], &gi), MDR_OK);
    cr_assert_eq(gi.graph_tokens, counts[i]);
    cr_assert_eq(gi.cached, 1);
    cr_assert_eq(gi.device_cached, 0);
    /* memsets of the plan's non-empty segments, the stage launch, the body's memset */
    size_t segs = 0;
    cr_assert_eq(mdr_arena_zero_plan(f.a, counts[i], NULL, 0, &segs), MDR_OK);
    cr_assert_eq(gi.nodes, segs + 2, "count %zu: %zu nodes", counts[i], gi.nodes);
    if (*k == TB_HOST) cr_assert_gt(gi.bytes, 0);
    bytes += gi.bytes;
    nodes += gi.nodes;
  }
  cr_assert_eq(st.graph_bytes, bytes);
  cr_assert_eq(st.graph_nodes, nodes);
  mdr_graph_info none;
  cr_assert_eq(mdr_graph_cache_graph_info(c, 2, &none), MDR_OK);
  cr_assert_eq(none.cached, 0);
  cr_assert_eq(none.bytes, 0);
  cr_assert_eq(mdr_graph_cache_graph_info(c, 0, &none), MDR_ERR_OUT_OF_RANGE);
  cr_assert_eq(mdr_graph_cache_graph_info(c, 1, NULL), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_graph_cache_graph_info(NULL, 1, &none), MDR_ERR_INVALID_ARGUMENT);
  mdr_graph_cache_destroy(c);
  fixture_fini(&f);
  mdr_backend_destroy(f.b);
}

/* max_graph_bytes evicts the least recently used graphs until the total
 * fits, never the one just captured. */
Test(graph_cache, a_byte_cap_evicts_the_least_recently_used_graphs) {
  fixture f;
  fixture_init(&f, tb_backend(TB_HOST));
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.body = body;
  o.user = &f;
  mdr_graph_cache *probe = NULL;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &probe), MDR_OK);
  const size_t one = 3;
  cr_assert_eq(mdr_graph_cache_prepare(probe, &one, 1), MDR_OK);
  mdr_graph_info gi;
  cr_assert_eq(mdr_graph_cache_graph_info(probe, 3, &gi), MDR_OK);
  mdr_graph_cache_destroy(probe);
  o.max_graph_bytes = 2 * gi.bytes + gi.bytes / 2; /* room for two graphs of that size */
  mdr_graph_cache *c = NULL;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_OK);
  const uint32_t ids[4] = {1, 2, 3, 4};
  const size_t seq[] = {3, 4, 3, 2}; /* 4 is least recently used when 2 arrives */
  for (size_t i = 0; i < 4; i++) cr_assert_eq(mdr_graph_cache_step(c, ids, seq[i]), MDR_OK);
  mdr_graph_stats st;
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_leq(st.graph_bytes, o.max_graph_bytes);
  cr_assert_eq(st.evictions, 1);
  mdr_graph_info a, b4, b2;
  cr_assert_eq(mdr_graph_cache_graph_info(c, 3, &a), MDR_OK);
  cr_assert_eq(mdr_graph_cache_graph_info(c, 4, &b4), MDR_OK);
  cr_assert_eq(mdr_graph_cache_graph_info(c, 2, &b2), MDR_OK);
  cr_assert(a.cached && b2.cached && !b4.cached, "3 and 2 stay, 4 went");
  /* a cap below one graph keeps the newest graph alone */
  mdr_graph_cache_destroy(c);
  o.max_graph_bytes = 1;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_OK);
  for (size_t i = 0; i < 4; i++) cr_assert_eq(mdr_graph_cache_step(c, ids, seq[i]), MDR_OK);
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.graphs, 1);
  cr_assert_eq(mdr_graph_cache_graph_info(c, 2, &b2), MDR_OK);
  cr_assert(b2.cached);
  mdr_graph_cache_destroy(c);
  fixture_fini(&f);
  mdr_backend_destroy(f.b);
}

/* ------------------------------------------------------------------------- */
/* poison mode */

typedef struct poison_case {
  tb_kind kind;
  mdr_graph_mode mode;
  mdr_zero_strategy zero;
  int by_env;
} poison_case;

ParameterizedTestParameters(graph_cache, poison_mode_fills_what_a_step_leaves_with_nan_bytes) {
  static poison_case cases[] = {
      {TB_HOST, MDR_GRAPH_EXACT, MDR_ZERO_FUSED, 0},  {TB_HOST, MDR_GRAPH_LADDER, MDR_ZERO_MEMSET, 1},
      {TB_CUDA, MDR_GRAPH_EXACT, MDR_ZERO_FUSED, 0},  {TB_CUDA, MDR_GRAPH_LADDER, MDR_ZERO_FUSED, 1},
  };
  return cr_make_param_array(poison_case, cases, sizeof cases / sizeof cases[0]);
}

/* Every row-trimmed buffer: its zeroed head, then 0xFF to its end; buffers
 * cleared whole are all zero; buffers outside the plan keep their bytes. */
ParameterizedTest(poison_case *pc, graph_cache, poison_mode_fills_what_a_step_leaves_with_nan_bytes) {
  fixture f;
  fixture_init(&f, tb_backend(pc->kind));
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.mode = pc->mode;
  o.zero = pc->zero;
  o.body = body;
  o.user = &f;
  if (pc->by_env) {
    setenv("MDR_POISON", "1", 1);
  } else {
    o.poison = 1;
  }
  mdr_graph_cache *c = NULL;
  mdr_status created = mdr_graph_cache_create(f.a, f.s, &o, &c);
  unsetenv("MDR_POISON");
  cr_assert_eq(created, MDR_OK);
  mdr_graph_stats st;
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.poison, 1);
  uint64_t rng = 91;
  uint32_t ids[M];
  const size_t counts[] = {2, 2, 9, 33};
  for (size_t i = 0; i < 4; i++) {
    const size_t t = counts[i];
    size_t g = 0;
    cr_assert_eq(mdr_graph_cache_graph_tokens(c, t, &g), MDR_OK);
    random_ids(&rng, ids, t);
    poison_all(&f);
    cr_assert_eq(mdr_graph_cache_step(c, ids, t), MDR_OK);
    cr_assert_eq(mdr_backend_synchronize(f.b, f.s), MDR_OK);
    size_t zero[MDR_BUF_COUNT], whole[MDR_BUF_COUNT];
    tb_expected(f.a, TB_ZERO_ROWS, g, mdr_arena_rows_policy(f.a), zero);
    tb_expected(f.a, TB_ZERO_ALL, 0, MDR_ROWS_SEED, whole);
    for (int b = 0; b < MDR_BUF_COUNT; b++) {
      const mdr_buffer buf = (mdr_buffer)b;
      const mdr_dptr p = mdr_arena_ptr(f.a, buf);
      const size_t bytes = mdr_arena_bytes(f.a, buf);
      if (!p || buf == MDR_BUF_TOKEN_IDS) continue;
      const unsigned char fill = whole[b] ? 0xFF : tb_poison_of(buf); /* in the plan: poisoned past its head */
      cr_assert_eq(tb_check_head(f.b, p, bytes, zero[b], fill), -1, "step %zu: %s", i, mdr_buffer_name(buf));
    }
  }
  mdr_graph_cache_destroy(c);
  fixture_fini(&f);
  mdr_backend_destroy(f.b);
}
