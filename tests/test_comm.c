/* Suite `comm`: communicators (src/comm.c, comm_host.c, comm_nccl.c).
 *
 * Host communicator (CI): ranks as threads on host backends. Arenas on a
 * communicator (one layout on every rank, checked), the all-reduce of a
 * buffer's first rows in every dtype against a CPU reference written here,
 * the all-reduce inside EXACT, LADDER and DYNAMIC graph caches replayed in
 * lockstep (graph bit-identical to eager), refusals of bad input with
 * nothing enqueued, and faults: a failed all-reduce at every call k returns
 * an error on every rank, no rank hangs and nothing leaks.
 *
 * NCCL (GPU machines, two devices): mdr's own communicators of two local
 * GPUs, and two processes sharing an ncclUniqueId (the code path of a
 * multi-node engine). */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_backend.h"
#include "support.h"

/* The all-reduce of `tokens` rows of buf with the descriptor's defaults
 * (AUTO, no count word, no residual). */
static mdr_status all_reduce_rows(mdr_arena *a, mdr_buffer buf, mdr_dtype dt, size_t tokens, mdr_stream s) {
  const mdr_all_reduce_desc d = mdr_all_reduce_desc_make(buf, dt, tokens);
  return mdr_all_reduce(a, &d, s);
}

enum { M = TB_SMALL_M, MAX_RANKS = 4 };

/* ---- reference arithmetic, independent of src/ ---- */

static uint16_t ref_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  const uint32_t lsb = (u >> 16) & 1u;
  return (uint16_t)((u + 0x7fffu + lsb) >> 16);
}

static float ref_fp16(uint16_t h) { /* normal and zero values only (the tests use those) */
  const int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  const float v = exp ? ldexpf(1.0f + man / 1024.0f, exp - 15) : ldexpf(man / 1024.0f, -14);
  return (h & 0x8000) ? -v : v;
}

static uint16_t ref_to_fp16(float f) { /* round to nearest even, normal range */
  uint16_t best = 0;
  float err = INFINITY;
  const uint16_t sign = f < 0 ? 0x8000 : 0;
  /* a binary search over the ordered magnitudes would do; the values are few */
  for (uint32_t h = 0; h < 0x7c00; h++) {
    const float d = fabsf(ref_fp16((uint16_t)h) - fabsf(f));
    if (d < err || (d == err && !(h & 1))) {
      err = d;
      best = (uint16_t)h;
    }
  }
  return sign | best;
}

static size_t esize_of(mdr_dtype dt) { return dt == MDR_DTYPE_FP32 ? 4 : 2; }

/* The documented order: acc = x_0; acc += x_1; ...; acc += x_{n-1}; round once. */
static void ref_store_sum(unsigned char *out, size_t i, mdr_dtype dt, const float *x, int n) {
  float acc = x[0];
  for (int r = 1; r < n; r++) acc += x[r];
  if (dt == MDR_DTYPE_FP32) {
    memcpy(out + 4 * i, &acc, 4);
  } else {
    const uint16_t h = dt == MDR_DTYPE_BF16 ? ref_to_bf16(acc) : ref_to_fp16(acc);
    memcpy(out + 2 * i, &h, 2);
  }
}

/* Rank r's value of element i (small integers and halves: exact in every type). */
static float value_of(int rank, size_t i, uint64_t salt) {
  return (float)((int)((i * 7 + (size_t)rank * 13 + salt) % 33) - 16) * 0.5f;
}

static void fill_values(unsigned char *p, size_t count, mdr_dtype dt, int rank, uint64_t salt) {
  for (size_t i = 0; i < count; i++) {
    const float v = value_of(rank, i, salt);
    if (dt == MDR_DTYPE_FP32) {
      memcpy(p + 4 * i, &v, 4);
    } else {
      const uint16_t h = dt == MDR_DTYPE_BF16 ? ref_to_bf16(v) : ref_to_fp16(v);
      memcpy(p + 2 * i, &h, 2);
    }
  }
}

/* ---- a team of host ranks, one thread each ---- */

typedef struct team team;
typedef struct rank_ctx {
  team *t;
  int rank;
  mdr_backend *host, *b; /* b: host, or a fault wrapper around it */
  mdr_stream s;
  mdr_comm *comm;
  mdr_arena *a;
  mdr_status result;
  uint64_t fallbacks; /* eager fallbacks of its cache */
  char why[256];
} rank_ctx;

struct team {
  int n;
  rank_ctx r[MAX_RANKS];
  void (*work)(rank_ctx *);
  mdr_sizes sizes[MAX_RANKS];
};

static void *rank_main(void *p) {
  rank_ctx *rc = p;
  rc->t->work(rc);
  return NULL;
}

static void run_team(team *t) {
  pthread_t th[MAX_RANKS];
  for (int i = 0; i < t->n; i++) cr_assert_eq(pthread_create(&th[i], NULL, rank_main, &t->r[i]), 0);
  for (int i = 0; i < t->n; i++) cr_assert_eq(pthread_join(th[i], NULL), 0);
}

/* n host backends (wrapped in fault backends when `faulty`), their streams
 * and communicators. */
static void team_init(team *t, int n, int faulty) {
  memset(t, 0, sizeof *t);
  t->n = n;
  mdr_backend *bs[MAX_RANKS];
  for (int i = 0; i < n; i++) {
    rank_ctx *rc = &t->r[i];
    rc->t = t;
    rc->rank = i;
    rc->host = tb_backend(TB_HOST);
    rc->b = rc->host;
    if (faulty) cr_assert_eq(fault_backend_create(rc->host, &rc->b), MDR_OK);
    rc->s = tb_stream(rc->b);
    bs[i] = rc->b;
    t->sizes[i] = tb_small_sizes();
  }
  mdr_comm *cs[MAX_RANKS];
  cr_assert_eq(mdr_comm_create_host(bs, n, cs), MDR_OK);
  for (int i = 0; i < n; i++) t->r[i].comm = cs[i];
}

static void team_fini(team *t) {
  for (int i = 0; i < t->n; i++) {
    rank_ctx *rc = &t->r[i];
    mdr_arena_destroy(rc->a);
    mdr_comm_destroy(rc->comm);
    mdr_backend_stream_destroy(rc->b, rc->s);
    if (rc->b != rc->host) {
      cr_assert_eq(fault_backend_live(rc->b), 0, "rank %d leaked %ld resources", i, fault_backend_live(rc->b));
      mdr_backend_destroy(rc->b);
    }
    mdr_backend_destroy(rc->host);
  }
}

/* Last-error texts are per thread: each rank keeps its own. */
static void work_arena(rank_ctx *rc) {
  rc->result = mdr_arena_create_on_comm(rc->comm, &rc->t->sizes[rc->rank], &rc->a);
  snprintf(rc->why, sizeof rc->why, "%s", mdr_backend_last_error(rc->b));
}

/* ---- creation and queries ---- */

Test(comm, host_ranks_answer_rank_size_and_device) {
  team t;
  team_init(&t, 3, 0);
  for (int i = 0; i < 3; i++) {
    cr_assert_eq(mdr_comm_rank(t.r[i].comm), i);
    cr_assert_eq(mdr_comm_size(t.r[i].comm), 3);
    cr_assert_eq(mdr_comm_device(t.r[i].comm), -1);
    cr_assert_eq(mdr_comm_backend(t.r[i].comm), t.r[i].b);
  }
  cr_assert_eq(mdr_comm_rank(NULL), -1);
  cr_assert_eq(mdr_comm_size(NULL), -1);
  cr_assert_null(mdr_comm_backend(NULL));
  mdr_comm_destroy(NULL);
  mdr_comm_abort(NULL);
  team_fini(&t);
}

Test(comm, bad_creation_arguments_are_refused_with_out_cleared) {
  mdr_backend *h = tb_backend(TB_HOST);
  mdr_comm *out[2] = {(mdr_comm *)0x1, (mdr_comm *)0x1};
  mdr_backend *bs[2] = {h, NULL};
  cr_assert_eq(mdr_comm_create_host(bs, 2, out), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_null(out[0]);
  cr_assert_null(out[1]);
  cr_assert_str_eq(mdr_backend_last_error(h), "comm: rank 1's backend is NULL", "the refusal records its own text");
  mdr_backend *nine[9];
  for (int i = 0; i < 9; i++) nine[i] = h;
  mdr_comm *nine_out[9];
  cr_assert_eq(mdr_comm_create_host(nine, 9, nine_out), MDR_ERR_UNSUPPORTED);
  cr_assert_not_null(strstr(mdr_backend_last_error(h), "at most 8"), "%s", mdr_backend_last_error(h));
  for (int i = 0; i < 9; i++) cr_assert_null(nine_out[i]);
  cr_assert_eq(mdr_comm_create_host(NULL, 2, out), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_comm_create_host(bs, 0, out), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_comm_create_host(bs, 1, NULL), MDR_ERR_INVALID_ARGUMENT);
  mdr_comm *one = (mdr_comm *)0x1;
  cr_assert_eq(mdr_comm_adopt_nccl(h, NULL, &one), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_null(one);
  if (!mdr_comm_nccl_available()) {
    int fake = 0;
    cr_assert_eq(mdr_comm_adopt_nccl(h, &fake, &one), MDR_ERR_UNSUPPORTED);
    mdr_backend *local[1] = {h};
    cr_assert_eq(mdr_comm_create_local(local, 1, &one), MDR_ERR_UNSUPPORTED);
  } else {
    int fake = 0; /* a host backend is not a CUDA backend: refused before NCCL is asked */
    cr_assert_eq(mdr_comm_adopt_nccl(h, &fake, &one), MDR_ERR_INVALID_ARGUMENT);
  }
  cr_assert_null(one);
  cr_assert_str_eq(mdr_window_name(MDR_WINDOW_SYMMETRIC), "symmetric");
  cr_assert_str_eq(mdr_window_name((mdr_window)99), "unknown");
  mdr_backend_destroy(h);
}

/* ---- arenas on a communicator ---- */

Test(comm, every_rank_gets_an_arena_with_the_same_layout) {
  team t;
  team_init(&t, 2, 0);
  t.work = work_arena;
  run_team(&t);
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(t.r[i].result, MDR_OK, "%s", mdr_backend_last_error(t.r[i].b));
    cr_assert_eq(mdr_arena_window(t.r[i].a), MDR_WINDOW_HOST);
    cr_assert_eq(mdr_arena_comm(t.r[i].a), t.r[i].comm);
    cr_assert_eq(mdr_arena_slab_bytes(t.r[i].a), mdr_arena_slab_bytes(t.r[0].a));
  }
  team_fini(&t);
}

Test(comm, a_rank_with_another_layout_is_refused_on_every_rank) {
  team t;
  team_init(&t, 3, 1);
  t.sizes[2].bytes[MDR_BUF_SCRATCH] += 4096; /* rank 2 differs */
  t.work = work_arena;
  run_team(&t);
  for (int i = 0; i < 3; i++) {
    cr_assert_eq(t.r[i].result, MDR_ERR_INVALID_ARGUMENT, "rank %d", i);
    cr_assert_null(t.r[i].a);
    cr_assert_not_null(strstr(t.r[i].why, "layout"), "rank %d: %s", i, t.r[i].why);
    cr_assert_eq(fault_backend_live(t.r[i].b), 1, "rank %d: only its stream is alive", i);
  }
  team_fini(&t);
}

Test(comm, one_thread_makes_the_arenas_of_every_rank) {
  team t;
  team_init(&t, 2, 0);
  mdr_comm *cs[2] = {t.r[0].comm, t.r[1].comm};
  mdr_arena *as[2] = {NULL, NULL};
  cr_assert_eq(mdr_arena_create_on_comms(cs, 2, &t.sizes[0], as), MDR_OK);
  t.r[0].a = as[0];
  t.r[1].a = as[1];
  cr_assert_eq(mdr_arena_window(as[1]), MDR_WINDOW_HOST);
  mdr_comm *three[3] = {cs[0], cs[1], cs[0]};
  mdr_arena *bad[3];
  cr_assert_eq(mdr_arena_create_on_comms(three, 3, &t.sizes[0], bad), MDR_ERR_INVALID_ARGUMENT);
  team_fini(&t);
}

/* ---- the all-reduce ---- */

typedef struct ar_case {
  mdr_dtype dt;
  int ranks;
  size_t tokens;
} ar_case;

static ar_case g_case;
static uint64_t g_salt;

static size_t row_elems(const mdr_arena *a, mdr_dtype dt) {
  return mdr_arena_hidden_states_bytes(a) / mdr_arena_max_batch_tokens(a) / esize_of(dt);
}

static void work_all_reduce(rank_ctx *rc) {
  rc->result = mdr_arena_create_on_comm(rc->comm, &rc->t->sizes[rc->rank], &rc->a);
  if (rc->result != MDR_OK) return;
  const size_t bytes = mdr_arena_hidden_states_bytes(rc->a);
  unsigned char *img = malloc(bytes);
  fill_values(img, bytes / esize_of(g_case.dt), g_case.dt, rc->rank, g_salt);
  mdr_backend_copy_h2d(rc->b, mdr_arena_hidden_states(rc->a), img, bytes);
  free(img);
  rc->result = all_reduce_rows(rc->a, MDR_BUF_HIDDEN_STATES, g_case.dt, g_case.tokens, rc->s);
  if (rc->result == MDR_OK) rc->result = mdr_backend_synchronize(rc->b, rc->s);
}

/* Every rank's buffer: the reference sum in the first `tokens` rows, its
 * own values after them. */
static void expect_reduced(team *t, mdr_dtype dt, size_t tokens, uint64_t salt) {
  const size_t bytes = mdr_arena_hidden_states_bytes(t->r[0].a), count = bytes / esize_of(dt);
  const size_t reduced = tokens * row_elems(t->r[0].a, dt);
  unsigned char *want = malloc(bytes), *got = malloc(bytes), *own = malloc(bytes);
  float x[MAX_RANKS];
  for (size_t i = 0; i < reduced; i++) {
    for (int r = 0; r < t->n; r++) x[r] = value_of(r, i, salt);
    ref_store_sum(want, i, dt, x, t->n);
  }
  for (int r = 0; r < t->n; r++) {
    cr_assert_eq(mdr_backend_copy_d2h(t->r[r].b, got, mdr_arena_hidden_states(t->r[r].a), bytes), MDR_OK);
    fill_values(own, count, dt, r, salt);
    cr_assert_eq(memcmp(got, want, reduced * esize_of(dt)), 0, "rank %d: reduced rows differ from the reference", r);
    cr_assert_eq(memcmp(got + reduced * esize_of(dt), own + reduced * esize_of(dt), bytes - reduced * esize_of(dt)), 0,
                 "rank %d: rows past %zu were touched", r, tokens);
  }
  free(want);
  free(got);
  free(own);
}

ParameterizedTestParameters(comm, all_reduce_sums_the_first_rows_in_the_documented_order) {
  static ar_case cases[] = {
      {MDR_DTYPE_BF16, 2, 1},  {MDR_DTYPE_BF16, 3, 7},  {MDR_DTYPE_FP16, 2, 40}, {MDR_DTYPE_FP16, 4, 3},
      {MDR_DTYPE_FP32, 2, 17}, {MDR_DTYPE_FP32, 3, 40}, {MDR_DTYPE_BF16, 2, 0},
  };
  return cr_make_param_array(ar_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(ar_case *c, comm, all_reduce_sums_the_first_rows_in_the_documented_order) {
  team t;
  team_init(&t, c->ranks, 0);
  g_case = *c;
  g_salt = 5;
  t.work = work_all_reduce;
  run_team(&t);
  for (int i = 0; i < t.n; i++) cr_assert_eq(t.r[i].result, MDR_OK, "rank %d: %s", i, mdr_backend_last_error(t.r[i].b));
  expect_reduced(&t, c->dt, c->tokens, 5);
  team_fini(&t);
}

/* ---- bad input: a clear status, nothing enqueued ---- */

Test(comm, bad_all_reduce_input_is_refused_and_enqueues_nothing) {
  team t;
  team_init(&t, 1, 1);
  rank_ctx *rc = &t.r[0];
  cr_assert_eq(mdr_arena_create_on_comm(rc->comm, &t.sizes[0], &rc->a), MDR_OK);
  const long before = fault_backend_calls_of(rc->b, MDR_OP_HOST_FN);
  cr_assert_eq(all_reduce_rows(NULL, MDR_BUF_HIDDEN_STATES, MDR_DTYPE_BF16, 1, rc->s), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(all_reduce_rows(rc->a, MDR_BUF_HIDDEN_STATES, (mdr_dtype)9, 1, rc->s), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(all_reduce_rows(rc->a, MDR_BUF_HIDDEN_STATES, MDR_DTYPE_BF16, M + 1, rc->s), MDR_ERR_OUT_OF_RANGE);
  cr_assert_eq(all_reduce_rows(rc->a, MDR_BUF_SSM_GATES, MDR_DTYPE_BF16, 1, rc->s), MDR_ERR_INVALID_ARGUMENT,
               "a NULL buffer has no rows");
  cr_assert_eq(all_reduce_rows(rc->a, MDR_BUF_HC_STREAMS, MDR_DTYPE_FP32, 1, rc->s), MDR_ERR_INVALID_ARGUMENT,
               "a 256-byte buffer is not M rows");
  cr_assert_not_null(strstr(mdr_backend_last_error(rc->b), "no rows"), "%s", mdr_backend_last_error(rc->b));
  cr_assert_eq(all_reduce_rows(rc->a, MDR_BUF_HIDDEN_STATES, MDR_DTYPE_BF16, 0, rc->s), MDR_OK);
  cr_assert_eq(fault_backend_calls_of(rc->b, MDR_OP_HOST_FN), before, "a refused call enqueued something");
  /* an arena not on a communicator */
  mdr_arena *plain = NULL;
  cr_assert_eq(mdr_arena_create(rc->b, &t.sizes[0], &plain), MDR_OK);
  cr_assert_eq(mdr_arena_window(plain), MDR_WINDOW_NONE);
  cr_assert_null(mdr_arena_comm(plain));
  cr_assert_eq(all_reduce_rows(plain, MDR_BUF_HIDDEN_STATES, MDR_DTYPE_BF16, 1, rc->s), MDR_ERR_INVALID_ARGUMENT);
  mdr_arena_destroy(plain);
  /* an aborted communicator */
  mdr_comm_abort(rc->comm);
  cr_assert_eq(all_reduce_rows(rc->a, MDR_BUF_HIDDEN_STATES, MDR_DTYPE_BF16, 1, rc->s), MDR_ERR_STATE);
  cr_assert_eq(fault_backend_calls_of(rc->b, MDR_OP_HOST_FN), before);
  team_fini(&t);
}

/* A peer that never comes: the waiting rank returns, it does not hang. */
Test(comm, a_missing_peer_times_out_and_aborts_instead_of_hanging) {
  setenv("MDR_HOST_COMM_TIMEOUT_MS", "200", 1);
  team t;
  team_init(&t, 2, 0);
  unsetenv("MDR_HOST_COMM_TIMEOUT_MS");
  mdr_comm *cs[2] = {t.r[0].comm, t.r[1].comm};
  mdr_arena *as[2];
  cr_assert_eq(mdr_arena_create_on_comms(cs, 2, &t.sizes[0], as), MDR_OK);
  t.r[0].a = as[0];
  t.r[1].a = as[1];
  cr_assert_eq(all_reduce_rows(as[0], MDR_BUF_HIDDEN_STATES, MDR_DTYPE_FP32, 2, t.r[0].s), MDR_ERR_STATE);
  const char *why = mdr_backend_last_error(t.r[0].b);
  cr_assert(strstr(why, "gave up waiting for rank 1") && strstr(why, "timed out"), "%s", why);
  cr_assert_eq(all_reduce_rows(as[1], MDR_BUF_HIDDEN_STATES, MDR_DTYPE_FP32, 2, t.r[1].s), MDR_ERR_STATE,
               "the peer sees the abort");
  team_fini(&t);
}

/* ---- the all-reduce inside cached graphs, in lockstep ---- */

typedef struct tp_body {
  rank_ctx *rc;
} tp_body;

/* The byte rank r's body fills hidden_states with (fp32 0x3F3F3F3F, then
 * 0x40404040, ...: normal numbers). */
static unsigned char pattern_of(int rank) { return (unsigned char)(0x3F + rank); }

/* What a TP layer does around its row-parallel GEMM: produce the rank's
 * partial result (here a fill), then all-reduce the graph's rows. */
static mdr_status tp_step(void *user, mdr_stream s, size_t tokens) {
  tp_body *tb = user;
  mdr_arena *a = tb->rc->a;
  mdr_status st = mdr_be_memset_async(tb->rc->b, mdr_arena_hidden_states(a), pattern_of(tb->rc->rank),
                                      mdr_arena_hidden_states_bytes(a), s);
  if (st != MDR_OK) return st;
  return all_reduce_rows(a, MDR_BUF_HIDDEN_STATES, MDR_DTYPE_FP32, tokens, s);
}

static mdr_status tp_step_dyn(void *user, mdr_stream s, mdr_dptr count_ptr, size_t max_tokens) {
  (void)count_ptr;
  return tp_step(user, s, max_tokens);
}

typedef struct lockstep_case {
  mdr_graph_mode mode;
  int disable_graphs;
} lockstep_case;

static lockstep_case g_lock;
static const size_t k_counts[] = {3, 3, 1, 40, 7, 3, 16, 1, 40, 25, 25, 2};
enum { N_COUNTS = sizeof k_counts / sizeof k_counts[0] };
static unsigned char *g_after[2][N_COUNTS]; /* hidden_states after each step, per rank */
static uint64_t g_captures[2];

static void work_lockstep(rank_ctx *rc) {
  rc->result = mdr_arena_create_on_comm(rc->comm, &rc->t->sizes[rc->rank], &rc->a);
  if (rc->result != MDR_OK) return;
  const size_t bytes = mdr_arena_hidden_states_bytes(rc->a);
  tp_body tb = {.rc = rc};
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.mode = g_lock.mode;
  o.zero = MDR_ZERO_FUSED;
  o.user = &tb;
  if (g_lock.mode == MDR_GRAPH_DYNAMIC) {
    o.body_dynamic = tp_step_dyn;
  } else {
    o.body = tp_step;
  }
  mdr_graph_cache *c = NULL;
  rc->result = mdr_graph_cache_create(rc->a, rc->s, &o, &c);
  if (rc->result != MDR_OK) return;
  uint32_t ids[M];
  for (size_t k = 0; k < N_COUNTS && rc->result == MDR_OK; k++) {
    for (size_t i = 0; i < k_counts[k]; i++) ids[i] = (uint32_t)(100 * rc->rank + i);
    rc->result = mdr_graph_cache_step(c, ids, k_counts[k]);
    if (rc->result == MDR_OK) rc->result = mdr_backend_synchronize(rc->b, rc->s);
    g_after[rc->rank][k] = malloc(bytes);
    if (rc->result == MDR_OK)
      rc->result = mdr_backend_copy_d2h(rc->b, g_after[rc->rank][k], mdr_arena_hidden_states(rc->a), bytes);
  }
  if (rc->result != MDR_OK) {
    snprintf(rc->why, sizeof rc->why, "%s", mdr_backend_last_error(rc->b));
    mdr_comm_abort(rc->comm);
  }
  mdr_graph_stats st;
  mdr_graph_cache_stats(c, &st);
  g_captures[rc->rank] = st.captures;
  mdr_graph_cache_destroy(c);
}

ParameterizedTestParameters(comm, graphs_hold_the_all_reduce_and_replay_it_in_lockstep) {
  static lockstep_case cases[] = {{MDR_GRAPH_EXACT, 0},  {MDR_GRAPH_LADDER, 0}, {MDR_GRAPH_DYNAMIC, 0},
                                  {MDR_GRAPH_EXACT, 1}};
  return cr_make_param_array(lockstep_case, cases, sizeof cases / sizeof cases[0]);
}

/* Each rank fills hidden_states with its pattern, then the graph's rows are
 * summed: after every step both ranks hold, byte for byte, the reference
 * sum in the reduced rows (the graph's count: exact, the ladder rung, or
 * all M in DYNAMIC) and their own pattern after them; graphs and eager
 * steps agree with the same reference, so replay is bit-identical to eager. */
ParameterizedTest(lockstep_case *lc, comm, graphs_hold_the_all_reduce_and_replay_it_in_lockstep) {
  if (lc->disable_graphs) setenv("MDR_DISABLE_GRAPHS", "1", 1);
  team t;
  team_init(&t, 2, 0);
  g_lock = *lc;
  t.work = work_lockstep;
  run_team(&t);
  unsetenv("MDR_DISABLE_GRAPHS");
  for (int i = 0; i < 2; i++) cr_assert_eq(t.r[i].result, MDR_OK, "rank %d: %s", i, t.r[i].why);
  if (!lc->disable_graphs) cr_assert_gt(g_captures[0], 0, "no graph held the all-reduce");
  cr_assert_eq(g_captures[0], g_captures[1], "the ranks captured differently");
  const size_t bytes = mdr_arena_hidden_states_bytes(t.r[0].a), row = bytes / M;
  float x[2];
  unsigned char sum[4];
  for (int r = 0; r < 2; r++) memset(&x[r], pattern_of(r), 4);
  ref_store_sum(sum, 0, MDR_DTYPE_FP32, x, 2);
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.mode = lc->mode;
  o.zero = MDR_ZERO_FUSED;
  mdr_graph_cache *shape = NULL; /* for the graph token counts */
  cr_assert_eq(mdr_graph_cache_create(t.r[0].a, t.r[0].s, &o, &shape), MDR_OK);
  for (size_t k = 0; k < N_COUNTS; k++) {
    size_t g = 0;
    cr_assert_eq(mdr_graph_cache_graph_tokens(shape, k_counts[k], &g), MDR_OK);
    for (int r = 0; r < 2; r++) {
      const unsigned char *got = g_after[r][k];
      for (size_t i = 0; i < bytes; i += 4) {
        const int reduced = i / row < g;
        if (reduced) {
          cr_assert_eq(memcmp(got + i, sum, 4), 0, "step %zu rank %d byte %zu: not the reference sum", k, r, i);
        } else {
          cr_assert_eq(got[i], pattern_of(r), "step %zu rank %d byte %zu: a row past %zu was reduced", k, r, i, g);
        }
      }
    }
    free(g_after[0][k]);
    free(g_after[1][k]);
  }
  mdr_graph_cache_destroy(shape);
  team_fini(&t);
}

/* Caches of a tensor-parallel step must be alike on every rank: a rank
 * whose k-th cache differs from its peers' is refused. */
Test(comm, caches_with_other_options_on_another_rank_are_refused) {
  team t;
  team_init(&t, 2, 0);
  mdr_comm *cs[2] = {t.r[0].comm, t.r[1].comm};
  mdr_arena *as[2];
  cr_assert_eq(mdr_arena_create_on_comms(cs, 2, &t.sizes[0], as), MDR_OK);
  t.r[0].a = as[0];
  t.r[1].a = as[1];
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  mdr_graph_cache *c0 = NULL, *c1 = NULL, *d0 = NULL, *d1 = NULL;
  cr_assert_eq(mdr_graph_cache_create(as[0], t.r[0].s, &o, &c0), MDR_OK);
  cr_assert_eq(mdr_graph_cache_create(as[1], t.r[1].s, &o, &c1), MDR_OK, "alike: accepted");
  o.mode = MDR_GRAPH_LADDER; /* each rank's second cache */
  cr_assert_eq(mdr_graph_cache_create(as[0], t.r[0].s, &o, &d0), MDR_OK);
  o.mode = MDR_GRAPH_EXACT;
  o.max_graphs = 4;
  cr_assert_eq(mdr_graph_cache_create(as[1], t.r[1].s, &o, &d1), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_null(d1);
  cr_assert_not_null(strstr(mdr_backend_last_error(t.r[1].b), "lockstep"), "%s", mdr_backend_last_error(t.r[1].b));
  mdr_graph_cache_destroy(c0);
  mdr_graph_cache_destroy(c1);
  mdr_graph_cache_destroy(d0);
  team_fini(&t);
}

/* ---- faults ---- */

static long g_fail_at;
static int g_fail_rank;

static void work_faulty(rank_ctx *rc) {
  rc->result = mdr_arena_create_on_comm(rc->comm, &rc->t->sizes[rc->rank], &rc->a);
  if (rc->result != MDR_OK) {
    mdr_comm_abort(rc->comm);
    return;
  }
  if (rc->rank == g_fail_rank) fault_backend_fail_at(rc->b, g_fail_at);
  tp_body tb = {.rc = rc};
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.zero = MDR_ZERO_FUSED;
  o.body = tp_step;
  o.user = &tb;
  mdr_graph_cache *c = NULL;
  rc->result = mdr_graph_cache_create(rc->a, rc->s, &o, &c);
  uint32_t ids[M] = {0};
  for (size_t k = 0; k < 6 && rc->result == MDR_OK; k++) {
    mdr_status st = mdr_graph_cache_step(c, ids, k_counts[k]);
    if (st == MDR_ERR_CAPTURE) st = MDR_OK; /* the step ran eagerly */
    if (st == MDR_OK) st = mdr_backend_synchronize(rc->b, rc->s);
    rc->result = st;
  }
  if (rc->result != MDR_OK) mdr_comm_abort(rc->comm); /* as an engine does on a failed step */
  fault_backend_fail_at(rc->b, 0);
  mdr_graph_stats st = {0};
  if (c) mdr_graph_cache_stats(c, &st);
  rc->fallbacks = st.eager_fallbacks;
  mdr_graph_cache_destroy(c);
}

/* Fail rank 0's k-th backend call for every k up to the run's length:
 * every rank returns (no hang), at least the failing one reports it, and
 * nothing leaks on any rank. */
Test(comm, a_failure_at_every_call_returns_on_every_rank_and_leaks_nothing, .timeout = 120) {
  setenv("MDR_HOST_COMM_TIMEOUT_MS", "5000", 1);
  int clean_runs = 0;
  for (g_fail_at = 1; g_fail_at < 200 && clean_runs < 2; g_fail_at++) {
    team t;
    team_init(&t, 2, 1);
    g_fail_rank = 0;
    t.work = work_faulty;
    run_team(&t);
    const int injected = fault_backend_injected(t.r[0].b) > 0;
    if (!injected) {
      clean_runs++;
      for (int i = 0; i < 2; i++) cr_assert_eq(t.r[i].result, MDR_OK, "k=%ld rank %d", g_fail_at, i);
    } else {
      /* reported, or absorbed by a capture that fell back to an eager step */
      cr_assert(t.r[0].result != MDR_OK || t.r[1].result != MDR_OK || t.r[0].fallbacks > 0,
                "k=%ld: the injected failure was swallowed", g_fail_at);
    }
    team_fini(&t); /* asserts nothing leaked */
  }
  unsetenv("MDR_HOST_COMM_TIMEOUT_MS");
  cr_assert_geq(g_fail_at, 20, "the run made fewer calls than expected");
}

/* ---- NCCL on two GPUs ---- */

#if defined(MDR_HAVE_NCCL)
#include <cuda_runtime.h>
#include <nccl.h>
#include <sys/wait.h>
#include <unistd.h>

static int gpus(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

typedef struct gpu_rank {
  mdr_backend *b;
  mdr_stream s;
  mdr_comm *c;
  mdr_arena *a;
  mdr_status result;
  float *got;
} gpu_rank;

static void *gpu_rank_main(void *p) {
  gpu_rank *g = p;
  const size_t bytes = mdr_arena_hidden_states_bytes(g->a), count = bytes / 4;
  float *img = malloc(bytes);
  for (size_t i = 0; i < count; i++) img[i] = value_of(mdr_comm_rank(g->c), i, 9);
  g->result = mdr_backend_copy_h2d(g->b, mdr_arena_hidden_states(g->a), img, bytes);
  free(img);
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  mdr_graph_cache *cache = NULL;
  if (g->result == MDR_OK) g->result = mdr_graph_cache_create(g->a, g->s, &o, &cache);
  if (g->result == MDR_OK) g->result = all_reduce_rows(g->a, MDR_BUF_HIDDEN_STATES, MDR_DTYPE_FP32, 5, g->s);
  if (g->result == MDR_OK) g->result = mdr_backend_synchronize(g->b, g->s);
  g->got = malloc(bytes);
  if (g->result == MDR_OK) g->result = mdr_backend_copy_d2h(g->b, g->got, mdr_arena_hidden_states(g->a), bytes);
  mdr_graph_cache_destroy(cache);
  return NULL;
}

Test(comm, nccl_local_ranks_register_one_window_and_all_reduce) {
  if (!mdr_comm_nccl_available()) cr_skip_test("built without NCCL");
  if (gpus() < 2) cr_skip_test("fewer than two CUDA devices");
  gpu_rank g[2];
  mdr_backend *bs[2];
  for (int i = 0; i < 2; i++) {
    memset(&g[i], 0, sizeof g[i]);
    cr_assert_eq(mdr_backend_cuda_create(i, &g[i].b), MDR_OK);
    g[i].s = tb_stream(g[i].b);
    bs[i] = g[i].b;
  }
  mdr_comm *cs[2];
  cr_assert_eq(mdr_comm_create_local(bs, 2, cs), MDR_OK, "%s", mdr_backend_last_error(bs[0]));
  mdr_sizes sizes = tb_small_sizes();
  mdr_arena *as[2];
  cr_assert_eq(mdr_arena_create_on_comms(cs, 2, &sizes, as), MDR_OK, "%s", mdr_backend_last_error(bs[0]));
  cr_log_info("arena window: %s", mdr_window_name(mdr_arena_window(as[0])));
  cr_assert_eq(mdr_arena_window(as[0]), mdr_arena_window(as[1]), "the ranks agree on the window kind");
  cr_assert(mdr_arena_window(as[0]) == MDR_WINDOW_SYMMETRIC || mdr_arena_window(as[0]) == MDR_WINDOW_PLAIN);
  pthread_t th[2];
  for (int i = 0; i < 2; i++) {
    g[i].c = cs[i];
    g[i].a = as[i];
    cr_assert_eq(pthread_create(&th[i], NULL, gpu_rank_main, &g[i]), 0);
  }
  for (int i = 0; i < 2; i++) cr_assert_eq(pthread_join(th[i], NULL), 0);
  const size_t row = mdr_arena_hidden_states_bytes(as[0]) / M / 4;
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(g[i].result, MDR_OK, "rank %d: %s", i, mdr_backend_last_error(g[i].b));
    for (size_t e = 0; e < 5 * row; e++)
      cr_assert_eq(g[i].got[e], value_of(0, e, 9) + value_of(1, e, 9), "rank %d element %zu", i, e);
    cr_assert_eq(g[i].got[5 * row], value_of(i, 5 * row, 9), "rank %d: row 5 untouched", i);
    free(g[i].got);
  }
  for (int i = 0; i < 2; i++) {
    mdr_arena_destroy(as[i]);
    mdr_comm_destroy(cs[i]);
    mdr_backend_stream_destroy(g[i].b, g[i].s);
    mdr_backend_destroy(g[i].b);
  }
}

/* One process per rank: the children share an ncclUniqueId (rank 0 makes
 * it and passes it through a pipe), adopt their own ncclComm_t and
 * all-reduce; the parent checks both exit codes. The parent touches
 * neither CUDA nor NCCL: a CUDA context does not survive fork(). */
enum { CHILD_SKIP = 77 };

static int child_rank(int rank, int fd_write, int fd_read) {
  close(rank == 0 ? fd_read : fd_write); /* a failed rank 0 then ends rank 1's read */
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) return CHILD_SKIP;
  ncclUniqueId id;
  if (rank == 0) {
    if (ncclGetUniqueId(&id) != ncclSuccess) return 9;
    if (write(fd_write, &id, sizeof id) != (ssize_t)sizeof id) return 9;
  } else if (read(fd_read, &id, sizeof id) != (ssize_t)sizeof id) {
    return 9;
  }
  mdr_backend *b = NULL;
  if (mdr_backend_cuda_create(rank, &b) != MDR_OK) return 10;
  if (cudaSetDevice(rank) != cudaSuccess) return 11;
  ncclComm_t nc;
  if (ncclCommInitRank(&nc, 2, id, rank) != ncclSuccess) return 12;
  mdr_comm *c = NULL;
  if (mdr_comm_adopt_nccl(b, nc, &c) != MDR_OK || mdr_comm_rank(c) != rank || mdr_comm_size(c) != 2) return 13;
  mdr_sizes sizes = tb_small_sizes();
  mdr_arena *a = NULL;
  if (mdr_arena_create_on_comm(c, &sizes, &a) != MDR_OK) return 14;
  mdr_stream s = NULL;
  if (mdr_backend_stream_create(b, &s) != MDR_OK) return 15;
  const size_t bytes = mdr_arena_hidden_states_bytes(a), count = bytes / 4;
  float *img = malloc(bytes);
  for (size_t i = 0; i < count; i++) img[i] = value_of(rank, i, 3);
  int rc = 0;
  if (mdr_backend_copy_h2d(b, mdr_arena_hidden_states(a), img, bytes) != MDR_OK) rc = 16;
  if (!rc && all_reduce_rows(a, MDR_BUF_HIDDEN_STATES, MDR_DTYPE_FP32, M, s) != MDR_OK) rc = 17;
  if (!rc && mdr_backend_synchronize(b, s) != MDR_OK) rc = 18;
  if (!rc && mdr_backend_copy_d2h(b, img, mdr_arena_hidden_states(a), bytes) != MDR_OK) rc = 19;
  for (size_t i = 0; !rc && i < count; i++)
    if (img[i] != value_of(0, i, 3) + value_of(1, i, 3)) rc = 20;
  free(img);
  mdr_backend_stream_destroy(b, s);
  mdr_arena_destroy(a);
  mdr_comm_destroy(c);
  ncclCommDestroy(nc);
  mdr_backend_destroy(b);
  return rc;
}

Test(comm, two_processes_sharing_a_unique_id_adopt_their_communicators, .timeout = 120) {
  if (!mdr_comm_nccl_available()) cr_skip_test("built without NCCL");
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  pid_t pid[2];
  for (int r = 0; r < 2; r++) {
    pid[r] = fork();
    cr_assert_geq(pid[r], 0);
    if (pid[r] == 0) _exit(child_rank(r, fds[1], fds[0]));
  }
  close(fds[0]);
  close(fds[1]);
  int code[2];
  for (int r = 0; r < 2; r++) {
    int status = 0;
    cr_assert_eq(waitpid(pid[r], &status, 0), pid[r]);
    cr_assert(WIFEXITED(status), "rank %d did not exit", r);
    code[r] = WEXITSTATUS(status);
  }
  if (code[0] == CHILD_SKIP && code[1] == CHILD_SKIP) cr_skip_test("fewer than two CUDA devices");
  for (int r = 0; r < 2; r++) cr_assert_eq(code[r], 0, "rank %d failed at step %d", r, code[r]);
}
#endif

/* The arena and constructor entry points refuse bad input with a clear
 * status, leave *out NULL and leak nothing (a one-rank host communicator:
 * its collectives need no peer). */
Test(comm, bad_arena_and_constructor_input_is_refused_and_leaks_nothing) {
  team t;
  team_init(&t, 1, 1);
  rank_ctx *rc = &t.r[0];
  mdr_arena *a = (mdr_arena *)0x1;
  cr_assert_eq(mdr_arena_create_on_comm(NULL, &t.sizes[0], &a), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_null(a);
  cr_assert_eq(mdr_arena_create_on_comm(rc->comm, &t.sizes[0], NULL), MDR_ERR_INVALID_ARGUMENT);
  a = (mdr_arena *)0x1;
  cr_assert_eq(mdr_arena_create_on_comm(rc->comm, NULL, &a), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_null(a);
  cr_assert_not_null(strstr(mdr_backend_last_error(rc->b), "NULL sizes"), "%s", mdr_backend_last_error(rc->b));
  mdr_arena *as[1] = {(mdr_arena *)0x1};
  mdr_comm *none[1] = {NULL};
  cr_assert_eq(mdr_arena_create_on_comms(none, 1, &t.sizes[0], as), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_null(as[0]);
  cr_assert_eq(mdr_arena_create_on_comms(&rc->comm, 0, &t.sizes[0], as), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_arena_window(NULL), MDR_WINDOW_NONE);
  cr_assert_null(mdr_arena_comm(NULL));
  cr_assert_eq(fault_backend_live(rc->b), 1, "only the rank's stream is alive");
  /* create_local takes CUDA backends on distinct devices only */
  mdr_comm *out[1] = {(mdr_comm *)0x1};
  mdr_status st = mdr_comm_create_local(&rc->b, 1, out);
  cr_assert(st == MDR_ERR_INVALID_ARGUMENT || st == MDR_ERR_UNSUPPORTED, "%s", mdr_status_string(st));
  cr_assert_null(out[0]);
  cr_assert_eq(mdr_comm_create_local(NULL, 1, out), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_comm_create_local(&rc->b, 0, out), MDR_ERR_INVALID_ARGUMENT);
  team_fini(&t);
}
