/* Suite `ar_protocol`: the all-reduce protocol (kernels/ar_protocol.h) on
 * the host twin (src/comm_host.c), which runs the very comparisons the
 * kernels make, so CI exercises them. Ranks are threads on host backends.
 *
 *   - the states a long-running server leaves: a one-shot-only run of E
 *     calls leaves `calls` and `one_shot` at E and the barrier counters and
 *     flags untouched (0); a two-shot run of B barriers leaves them at B.
 *     From each (E around 2^30, 2^31, 3 * 2^30 and 2^32), a rank launched
 *     alone waits (it has not finished after a time box), for both
 *     algorithms; mdr_comm_abort then ends it within 100 ms with the wait
 *     named, and the communicator refuses later calls;
 *   - random lockstep sequences of one-shot, two-shot, counted AUTO, NCCL
 *     and empty calls (tokens 0, count words of 0), from every start state,
 *     with 2, 4 and 8 ranks: every sum checked exactly (small integers, so
 *     the sum is exact in every dtype and any stale or missing share
 *     changes it), the residual, and rows past the count untouched;
 *   - the time limit (MDR_AR_TIMEOUT_MS): a lone rank gives up by itself;
 *   - lockstep checks: ranks whose calls differ in dtype, rows or residual
 *     fail with a text that says so, instead of summing garbage;
 *   - a destroyed rank aborts its peers, which return at once;
 *   - the fused RMSNorm, 2, 3, 4 and 8 ranks, rows of 1 to 512 vectors:
 *     bf16 and fp16 x one-shot, two-shot, AUTO and NCCL's twin x tokens and
 *     count words (below, past the bound, 0), random values, each rank its
 *     own weight: the sum, the residual and the norm bit for bit against
 *     tests/ar_norm_ref.h (written from the contract), rows past the count
 *     untouched (and the random sequences above mix fused calls in);
 *   - fused or chained (mdr_arp_norm_fuses, MDR_AR_NORM_FUSE): the choice
 *     at its edges (512 KiB, 16 bytes more, two-shot, a count word, every
 *     mode and spelling), mdr_all_reduce_norm_fused under each value of
 *     the variable, the bits on both sides, and a chained norm whose
 *     all-reduce gives up leaving the rows, residual and output as they
 *     were.
 *
 * MDR_AR_TWIN_CALLS sets the calls of each random sequence (default 20000
 * per rank count and start state). scripts/mutation-check.sh plants the old
 * stale-flag barrier value in a scratch copy and expects this suite to
 * fail. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ar_norm_ref.h"
#include "ar_sequence.h"
#include "rng.h"
#include "support.h"

enum { M = AR_SEQ_M, ROW = AR_SEQ_ROW, MAXR = AR_SEQ_MAXR };
#define BUF AR_SEQ_BUF
#define RES AR_SEQ_RES
typedef ar_team team;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static void team_init(team *t, int n) {
  const mdr_status st = ar_team_init(t, n);
  cr_assert_eq(st, MDR_OK, "a team of %d host ranks: %s", n, mdr_status_string(st));
}

static void team_fini(team *t) { ar_team_fini(t); }

static void team_state(team *t, uint32_t e, uint32_t b) {
  cr_assert_eq(ar_team_state(t, e, b), MDR_OK, "%s", mdr_backend_last_error(t->b[0]));
}

/* ==== a rank launched alone waits ==== */

typedef struct lone {
  team *t;
  mdr_all_reduce_algo algo;
  atomic_int calling; /* set just before the call: the clock of a box starts there */
  atomic_int done;
  mdr_status st;
  double t_end;
  char why[512];
} lone;

static void *lone_main(void *p) {
  lone *l = p;
  const mdr_all_reduce_desc d0 = mdr_all_reduce_desc_make(BUF, MDR_DTYPE_FP32, 4);
  mdr_all_reduce_desc d = d0;
  d.algo = l->algo;
  atomic_store(&l->calling, 1);
  l->st = mdr_all_reduce(l->t->a[0], &d, l->t->s[0]);
  l->t_end = now_ms();
  snprintf(l->why, sizeof l->why, "%s", mdr_backend_last_error(l->t->b[0]));
  atomic_store(&l->done, 1);
  return NULL;
}

/* Until the lone rank's thread is about to call: a loaded machine may start
 * the thread late, and a box counted from its creation would then abort a
 * call not yet made (refused as on an aborted communicator, not given up). */
static void wait_calling(lone *l) {
  const double t0 = now_ms();
  while (!atomic_load(&l->calling)) {
    cr_assert_lt(now_ms() - t0, 30000.0, "the lone rank's thread never started");
    struct timespec nap = {0, 1000000};
    nanosleep(&nap, NULL);
  }
}

/* Rank 0 alone from state (e, b): still waiting after `box` ms; then the
 * abort (or, with a time limit, nothing) ends it. Returns the ms from the
 * abort to its return. */
static double lone_rank(uint32_t e, uint32_t b, mdr_all_reduce_algo algo, double box, int abort_it) {
  team t;
  team_init(&t, 2);
  team_state(&t, e, b);
  cr_assert_eq(mdr_backend_fill(t.b[0], mdr_arena_ptr(t.a[0], BUF), 0x5A, M * ROW), MDR_OK);
  lone l = {.t = &t, .algo = algo};
  atomic_init(&l.calling, 0);
  atomic_init(&l.done, 0);
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, lone_main, &l), 0);
  wait_calling(&l);
  const double t0 = now_ms();
  while (now_ms() - t0 < box && !atomic_load(&l.done)) {
    struct timespec nap = {0, 2000000};
    nanosleep(&nap, NULL);
  }
  const int finished_alone = atomic_load(&l.done);
  const double t_abort = now_ms();
  if (abort_it) mdr_comm_abort(t.c[1]); /* a peer's abort reaches rank 0's wait */
  pthread_join(th, NULL);
  const double waited = l.t_end - t_abort;
  cr_assert_not(finished_alone && abort_it, "state 0x%08x/0x%08x, %s: rank 0 finished alone (status %s: %s)", e, b,
                mdr_all_reduce_algo_name(algo), mdr_status_string(l.st), l.why);
  cr_assert_eq(l.st, MDR_ERR_STATE, "state 0x%08x/0x%08x, %s: %s", e, b, mdr_all_reduce_algo_name(algo), l.why);
  cr_assert(strstr(l.why, "gave up waiting for rank 1"), "%s", l.why);
  /* rows it did not finish are as they were */
  long bad = tb_check_head(t.b[0], mdr_arena_ptr(t.a[0], BUF), M * ROW, 0, 0x5A);
  cr_assert_eq(bad, -1, "the lone rank changed its rows at byte %ld", bad);
  /* and the communicator refuses later calls, saying why */
  const mdr_all_reduce_desc d = mdr_all_reduce_desc_make(BUF, MDR_DTYPE_FP32, 4);
  cr_assert_eq(mdr_all_reduce(t.a[0], &d, t.s[0]), MDR_ERR_STATE);
  cr_assert(strstr(mdr_backend_last_error(t.b[0]), "aborted"), "%s", mdr_backend_last_error(t.b[0]));
  team_fini(&t);
  return waited;
}

/* The most a lone rank may take, in ms, from its peer's abort (or its
 * peer's end) to its return. The wait it ends would otherwise last the host
 * communicator's time limit (30 s), so a return within a few seconds is the
 * abort's doing; a loaded machine (a CI box building beside the suite)
 * deschedules the polling thread for up to a second, so the bound is not
 * a latency figure. */
#define ABORT_RETURN_MS 5000.0

static const uint32_t k_long[] = {0x3FFFFFFFu, 0x40000000u, 0x7FFFFFFFu, 0x80000000u, 0xC0000000u, 0xFFFFFFFFu};

Test(ar_protocol, a_lone_rank_waits_at_every_long_running_start_state, .timeout = 120) {
  const mdr_all_reduce_algo algos[] = {MDR_ALL_REDUCE_ONE_SHOT, MDR_ALL_REDUCE_TWO_SHOT};
  for (size_t i = 0; i < sizeof k_long / sizeof k_long[0]; i++)
    for (int a = 0; a < 2; a++) {
      /* after a one-shot-only run (barriers untouched) and after a
       * two-shot run (barriers at an even value near the same point) */
      const double w1 = lone_rank(k_long[i], 0, algos[a], 60, 1);
      const double w2 = lone_rank(k_long[i], k_long[i] & ~1u, algos[a], 60, 1);
      cr_assert_lt(w1, ABORT_RETURN_MS, "0x%08x, %s: %.1f ms from the abort to the return", k_long[i],
                   mdr_all_reduce_algo_name(algos[a]), w1);
      cr_assert_lt(w2, ABORT_RETURN_MS, "0x%08x, %s: %.1f ms", k_long[i], mdr_all_reduce_algo_name(algos[a]), w2);
    }
}

Test(ar_protocol, a_lone_rank_gives_up_by_itself_past_the_time_limit, .timeout = 60) {
  setenv("MDR_AR_TIMEOUT_MS", "50", 1);
  team t;
  team_init(&t, 2);
  unsetenv("MDR_AR_TIMEOUT_MS");
  team_state(&t, 0x80000000u, 0);
  lone l = {.t = &t, .algo = MDR_ALL_REDUCE_TWO_SHOT};
  atomic_init(&l.calling, 0);
  atomic_init(&l.done, 0);
  const double t0 = now_ms();
  lone_main(&l);
  const double took = now_ms() - t0;
  cr_assert_eq(l.st, MDR_ERR_STATE);
  cr_assert(strstr(l.why, "timed out") && strstr(l.why, "first barrier"), "%s", l.why);
  cr_assert(took >= 45 && took < 2000, "gave up after %.1f ms (limit 50)", took);
  /* the peer learns of it: its next call is refused, with the cause */
  const mdr_all_reduce_desc d = mdr_all_reduce_desc_make(BUF, MDR_DTYPE_FP32, 4);
  cr_assert_eq(mdr_all_reduce(t.a[1], &d, t.s[1]), MDR_ERR_STATE);
  team_fini(&t);
}

/* ==== a destroyed rank aborts its peers ==== */

Test(ar_protocol, destroying_a_rank_ends_its_peers_waits_at_once, .timeout = 60) {
  team t;
  team_init(&t, 2);
  lone l = {.t = &t, .algo = MDR_ALL_REDUCE_ONE_SHOT};
  atomic_init(&l.calling, 0);
  atomic_init(&l.done, 0);
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, lone_main, &l), 0);
  wait_calling(&l);
  struct timespec nap = {0, 50000000};
  nanosleep(&nap, NULL);
  cr_assert_not(atomic_load(&l.done), "rank 0 finished without its peer");
  const double t0 = now_ms();
  mdr_arena_destroy(t.a[1]);
  t.a[1] = NULL;
  mdr_comm_destroy(t.c[1]);
  t.c[1] = NULL;
  pthread_join(th, NULL);
  cr_assert_lt(l.t_end - t0, ABORT_RETURN_MS, "rank 0 returned %.1f ms after its peer went away", l.t_end - t0);
  cr_assert_eq(l.st, MDR_ERR_STATE, "%s", l.why);
  team_fini(&t);
}

/* ==== lockstep: calls that differ fail, saying so ==== */

typedef struct pair_call {
  team *t;
  int rank;
  mdr_all_reduce_desc d;
  mdr_status st;
  char why[512];
} pair_call;

static void *pair_main(void *p) {
  pair_call *c = p;
  c->st = mdr_all_reduce(c->t->a[c->rank], &c->d, c->t->s[c->rank]);
  snprintf(c->why, sizeof c->why, "%s", mdr_backend_last_error(c->t->b[c->rank]));
  return NULL;
}

static void expect_mismatch(mdr_all_reduce_desc d0, mdr_all_reduce_desc d1, const char *what) {
  team t;
  team_init(&t, 2);
  pair_call c[2] = {{.t = &t, .rank = 0, .d = d0}, {.t = &t, .rank = 1, .d = d1}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) cr_assert_eq(pthread_create(&th[i], NULL, pair_main, &c[i]), 0);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(c[i].st, MDR_ERR_STATE, "%s: rank %d: %s", what, i, c[i].why);
    cr_assert(strstr(c[i].why, "differs") || strstr(c[i].why, "gave up"), "%s: rank %d: %s", what, i, c[i].why);
  }
  int named = 0; /* at least one rank names the mismatch itself */
  for (int i = 0; i < 2; i++) named |= strstr(c[i].why, "differs") != NULL;
  cr_assert(named, "%s: %s / %s", what, c[0].why, c[1].why);
  team_fini(&t);
}

Test(ar_protocol, ranks_whose_calls_differ_fail_instead_of_summing_garbage, .timeout = 60) {
  setenv("MDR_AR_TIMEOUT_MS", "2000", 1); /* a safety net: a wrong protocol fails, it does not hang */
  const mdr_all_reduce_algo algos[] = {MDR_ALL_REDUCE_ONE_SHOT, MDR_ALL_REDUCE_TWO_SHOT};
  for (int a = 0; a < 2; a++) {
    mdr_all_reduce_desc x = mdr_all_reduce_desc_make(BUF, MDR_DTYPE_FP32, 4), y = x;
    x.algo = y.algo = algos[a];
    y.dtype = MDR_DTYPE_BF16; /* 4 rows of fp32 against 4 rows of bf16: the same bytes */
    expect_mismatch(x, y, "dtype");
    y.tokens = 2; /* 4 rows of fp32 against 2 of bf16: the same element count */
    expect_mismatch(x, y, "dtype and rows");
    y = x;
    y.tokens = 5;
    expect_mismatch(x, y, "rows");
    y = x;
    y.residual = RES;
    expect_mismatch(x, y, "residual");
  }
  /* one rank in a one-shot, the other in a two-shot: each finds the other
   * algorithm's trace (a raised barrier flag, a filled header) */
  mdr_all_reduce_desc x = mdr_all_reduce_desc_make(BUF, MDR_DTYPE_FP32, 4), y = x;
  x.algo = MDR_ALL_REDUCE_ONE_SHOT;
  y.algo = MDR_ALL_REDUCE_TWO_SHOT;
  expect_mismatch(x, y, "algorithm");
  expect_mismatch(y, x, "algorithm, the other way");
  unsetenv("MDR_AR_TIMEOUT_MS");
}

/* ==== random lockstep sequences ==== */

static size_t twin_calls(void) {
  const char *v = getenv("MDR_AR_TWIN_CALLS");
  const long n = v ? strtol(v, NULL, 10) : 0;
  return n > 0 ? (size_t)n : 20000;
}

static void run_sequence(int n, uint32_t e0, uint32_t b0, size_t calls, uint64_t seed) {
  team t;
  team_init(&t, n);
  team_state(&t, e0, b0);
  char first[256] = "";
  const size_t wrong = ar_sequence_run(&t, calls, seed, first, sizeof first);
  cr_log_info("ar_protocol: %d ranks from 0x%08x/0x%08x: %zu calls each, %zu wrong values", n, e0, b0, calls, wrong);
  cr_assert_eq(wrong, 0, "%d ranks, start 0x%08x/0x%08x: %zu wrong: %s", n, e0, b0, wrong, first);
  /* the counters moved only by what moved data, the same on every rank */
  mdr_arp_block s0;
  cr_assert_eq(mdr_all_reduce_state(t.a[0], &s0, NULL), MDR_OK);
  for (int i = 1; i < n; i++) {
    mdr_arp_block si;
    cr_assert_eq(mdr_all_reduce_state(t.a[i], &si, NULL), MDR_OK);
    cr_assert(si.calls == s0.calls && si.one_shot == s0.one_shot && si.barriers == s0.barriers,
              "rank %d's counters differ from rank 0's", i);
  }
  team_fini(&t);
}

Test(ar_protocol, random_lockstep_sequences_are_exact_from_every_start_state, .timeout = 900) {
  const size_t calls = twin_calls();
  const int ranks[] = {2, 4, 8};
  for (int k = 0; k < 3; k++) {
    const size_t per = ranks[k] == 8 ? calls / 4 : ranks[k] == 4 ? calls / 2 : calls; /* 8 threads on 2 cores */
    run_sequence(ranks[k], 0, 0, per, 1000 + (uint64_t)k);
    for (size_t i = 0; i < sizeof k_long / sizeof k_long[0]; i++) {
      run_sequence(ranks[k], k_long[i], 0, per / 8 + 16, 2000 + 10 * (uint64_t)k + i);
      run_sequence(ranks[k], k_long[i] - 40, k_long[i] - 40, per / 8 + 16, 3000 + 10 * (uint64_t)k + i);
    }
  }
}

/* ==== lockstep caches: every one compared, no silent limit ==== */

Test(ar_protocol, every_graph_cache_is_compared_however_many_a_rank_makes) {
  team t;
  team_init(&t, 2);
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.mode = MDR_GRAPH_EXACT;
  for (int k = 0; k < 40; k++) /* alike: accepted, past any fixed table */
    for (int r = 0; r < 2; r++) {
      mdr_graph_cache *c = NULL;
      cr_assert_eq(mdr_graph_cache_create(t.a[r], t.s[r], &o, &c), MDR_OK, "cache #%d of rank %d: %s", k, r,
                   mdr_backend_last_error(t.b[r]));
      mdr_graph_cache_destroy(c);
    }
  mdr_graph_cache *c0 = NULL, *c1 = NULL;
  cr_assert_eq(mdr_graph_cache_create(t.a[0], t.s[0], &o, &c0), MDR_OK);
  o.mode = MDR_GRAPH_LADDER;
  cr_assert_eq(mdr_graph_cache_create(t.a[1], t.s[1], &o, &c1), MDR_ERR_INVALID_ARGUMENT,
               "the 41st cache differs from rank 0's");
  cr_assert_null(c1);
  cr_assert(strstr(mdr_backend_last_error(t.b[1]), "#40") && strstr(mdr_backend_last_error(t.b[1]), "other options"),
            "%s", mdr_backend_last_error(t.b[1]));
  mdr_graph_cache_destroy(c0);
  team_fini(&t);
}

/* ==== the time limits' environment: a bad value is reported, not ignored ==== */

Test(ar_protocol, a_time_limit_that_is_not_a_number_of_ms_is_reported) {
  const char *bad[] = {"abc", "-5", "0", "12ms", " 7"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv("MDR_AR_TIMEOUT_MS", bad[i], 1);
    team t;
    team_init(&t, 2); /* the communicator is made: the value counts as unset */
    unsetenv("MDR_AR_TIMEOUT_MS");
    const char *why = mdr_backend_last_error(t.b[0]);
    cr_assert(why && strstr(why, "MDR_AR_TIMEOUT_MS") && strstr(why, "taken as unset"), "\"%s\": %s", bad[i],
              why ? why : "(none)");
    team_fini(&t);
  }
  setenv("MDR_HOST_COMM_TIMEOUT_MS", "soon", 1);
  team t;
  team_init(&t, 2);
  unsetenv("MDR_HOST_COMM_TIMEOUT_MS");
  const char *why = mdr_backend_last_error(t.b[0]);
  cr_assert(why && strstr(why, "MDR_HOST_COMM_TIMEOUT_MS"), "%s", why ? why : "(none)");
  team_fini(&t);
}

/* ==== the fused RMSNorm: every dtype x algorithm x count source ==== */

/* Random finite bf16 or fp16 bits of magnitude about 2^-6 .. 2^5. */
static uint32_t norm_rand_bits(int dt, uint64_t *rng) {
  const double mag = ldexp(1.0 + (double)tb_rng_range(rng, 0, 1023) / 1024.0, (int)tb_rng_range(rng, 0, 11) - 6);
  return nref_round(dt, (float)(tb_rng_range(rng, 0, 1) ? -mag : mag));
}

static uint32_t bits_at(const unsigned char *p, size_t i) {
  uint16_t h;
  memcpy(&h, p + 2 * i, 2);
  return h;
}
static void bits_put(unsigned char *p, size_t i, uint32_t v) {
  const uint16_t h = (uint16_t)v;
  memcpy(p + 2 * i, &h, 2);
}

typedef struct norm_rank {
  team *t;
  int rank;
  mdr_all_reduce_desc d;
  mdr_status st;
  char why[512];
} norm_rank;

static void *norm_main(void *p) {
  norm_rank *nr = p;
  nr->st = mdr_all_reduce(nr->t->a[nr->rank], &nr->d, nr->t->s[nr->rank]);
  snprintf(nr->why, sizeof nr->why, "%s", mdr_backend_last_error(nr->t->b[nr->rank]));
  return NULL;
}

/* One lockstep fused call on every rank of t (m rows of `row` bytes):
 * random rows, residuals and per-rank weights; poison past the count; the
 * sum, the residual and the norm checked bit for bit against the reference
 * written from the contract. */
static void norm_case(team *t, size_t m, size_t row, int dt, mdr_all_reduce_algo algo, int counted, size_t tokens,
                      uint32_t count, uint64_t seed) {
  const int n = t->n;
  const size_t h = row / 2, all = m * h;
  const float eps = seed % 2 ? 1e-6f : 1e-5f;
  uint64_t rng = seed;
  unsigned char *in[MAXR], *res[MAXR], *out0[MAXR], *w[MAXR];
  const uint32_t poison = 0x7DEDu;
  for (int r = 0; r < n; r++) {
    in[r] = malloc(m * row);
    res[r] = malloc(m * row);
    out0[r] = malloc(m * row);
    w[r] = malloc(row);
    cr_assert(in[r] && res[r] && out0[r] && w[r]);
    for (size_t i = 0; i < all; i++) {
      bits_put(in[r], i, norm_rand_bits(dt, &rng));
      bits_put(res[r], i, norm_rand_bits(dt, &rng));
      bits_put(out0[r], i, poison);
    }
    for (size_t i = 0; i < h; i++) bits_put(w[r], i, norm_rand_bits(dt, &rng));
    mdr_arena *a = t->a[r];
    cr_assert_eq(mdr_backend_copy_h2d(t->b[r], mdr_arena_ptr(a, BUF), in[r], m * row), MDR_OK);
    cr_assert_eq(mdr_backend_copy_h2d(t->b[r], mdr_arena_ptr(a, RES), res[r], m * row), MDR_OK);
    cr_assert_eq(mdr_backend_copy_h2d(t->b[r], mdr_arena_ptr(a, AR_SEQ_NORM), out0[r], m * row), MDR_OK);
    cr_assert_eq(mdr_backend_copy_h2d(t->b[r], mdr_arena_ptr(a, AR_SEQ_WEIGHT), w[r], row), MDR_OK);
    cr_assert_eq(mdr_backend_copy_h2d(t->b[r], mdr_arena_ptr(a, AR_SEQ_WORD), &count, 4), MDR_OK);
  }
  norm_rank nr[MAXR];
  pthread_t th[MAXR];
  for (int r = 0; r < n; r++) {
    mdr_all_reduce_desc d = mdr_all_reduce_desc_make(BUF, (mdr_dtype)dt, tokens);
    d.algo = algo;
    d.residual = RES;
    d.norm_output = AR_SEQ_NORM;
    d.norm_weight = mdr_arena_ptr(t->a[r], AR_SEQ_WEIGHT);
    d.norm_eps = eps;
    if (counted) d.count_ptr = mdr_arena_ptr(t->a[r], AR_SEQ_WORD);
    nr[r] = (norm_rank){.t = t, .rank = r, .d = d};
    cr_assert_eq(pthread_create(&th[r], NULL, norm_main, &nr[r]), 0);
  }
  for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
  const size_t live = counted ? (count < tokens ? count : tokens) : tokens;
  const size_t summed = algo == MDR_ALL_REDUCE_NCCL ? tokens : live; /* NCCL's count is fixed at enqueue */
  unsigned char *got = malloc(m * row), *gres = malloc(m * row), *gout = malloc(m * row);
  uint32_t *rrow = malloc(h * 4), *wrow = malloc(h * 4), *orow = malloc(h * 4);
  cr_assert(got && gres && gout && rrow && wrow && orow);
  for (int r = 0; r < n; r++) {
    cr_assert_eq(nr[r].st, MDR_OK, "rank %d: %s", r, nr[r].why);
    mdr_arena *a = t->a[r];
    cr_assert_eq(mdr_backend_copy_d2h(t->b[r], got, mdr_arena_ptr(a, BUF), m * row), MDR_OK);
    cr_assert_eq(mdr_backend_copy_d2h(t->b[r], gres, mdr_arena_ptr(a, RES), m * row), MDR_OK);
    cr_assert_eq(mdr_backend_copy_d2h(t->b[r], gout, mdr_arena_ptr(a, AR_SEQ_NORM), m * row), MDR_OK);
    for (size_t rw = 0; rw < m; rw++) {
      for (size_t e = 0; e < h; e++) {
        const size_t i = rw * h + e;
        /* the sum: acc = x_0; acc += x_q in rank order (binary32); one rounding */
        float acc = (float)nref_value(dt, bits_at(in[0], i));
        for (int q = 1; q < n; q++) acc = nref_f((double)acc + nref_value(dt, bits_at(in[q], i)));
        const uint32_t sum = nref_round(dt, acc);
        const uint32_t want = rw < summed ? sum : bits_at(in[r], i);
        const uint32_t upd = nref_round(dt, nref_f(nref_value(dt, bits_at(res[r], i)) + nref_value(dt, sum)));
        const uint32_t want_res = rw < live ? upd : bits_at(res[r], i);
        cr_assert_eq(bits_at(got, i), want, "%d ranks, dt %d, %s, counted %d: rank %d row %zu elem %zu: sum 0x%x, want 0x%x",
                     n, dt, mdr_all_reduce_algo_name(algo), counted, r, rw, e, bits_at(got, i), want);
        cr_assert_eq(bits_at(gres, i), want_res, "%d ranks, dt %d, %s, counted %d: rank %d row %zu elem %zu: residual 0x%x, want 0x%x",
                     n, dt, mdr_all_reduce_algo_name(algo), counted, r, rw, e, bits_at(gres, i), want_res);
        rrow[e] = want_res;
        wrow[e] = bits_at(w[r], e);
      }
      if (rw < live) {
        nref_row(dt, rrow, wrow, h, eps, orow);
      } else {
        for (size_t e = 0; e < h; e++) orow[e] = poison; /* rows past the count untouched */
      }
      for (size_t e = 0; e < h; e++)
        cr_assert_eq(bits_at(gout, rw * h + e), orow[e],
                     "%d ranks, dt %d, %s, counted %d (%zu rows of %zu B): rank %d row %zu elem %zu: norm 0x%x, want 0x%x", n, dt,
                     mdr_all_reduce_algo_name(algo), counted, live, row, r, rw, e, bits_at(gout, rw * h + e), orow[e]);
    }
  }
  free(got), free(gres), free(gout), free(rrow), free(wrow), free(orow);
  for (int r = 0; r < n; r++) free(in[r]), free(res[r]), free(out0[r]), free(w[r]);
}

Test(ar_protocol, the_fused_rmsnorm_is_bit_exact_for_every_dtype_algorithm_and_count_source, .timeout = 600) {
  const int ranks[] = {2, 3, 4, 8};
  /* rows of one vector, of a tree that is not a power of two, of many
   * vectors, and of hidden 4096 bf16 */
  const size_t rows_bytes[] = {16, 208, 2048, 8192};
  const mdr_all_reduce_algo algos[] = {MDR_ALL_REDUCE_ONE_SHOT, MDR_ALL_REDUCE_TWO_SHOT, MDR_ALL_REDUCE_AUTO,
                                       MDR_ALL_REDUCE_NCCL};
  const size_t m = 9;
  uint64_t seed = 4242;
  for (int k = 0; k < 4; k++)
    for (int rb = 0; rb < 4; rb++) {
      team t;
      /* half the teams fuse every call (the fused two-shot's row split
       * included), half choose as a GPU would (auto: these small one-shots
       * fused, the two-shots chained) */
      if ((k + rb) % 2) setenv("MDR_AR_NORM_FUSE", "always", 1);
      cr_assert_eq(ar_team_init_rows(&t, ranks[k], m, rows_bytes[rb]), MDR_OK);
      unsetenv("MDR_AR_NORM_FUSE");
      for (int dt = MDR_DTYPE_BF16; dt <= MDR_DTYPE_FP16; dt++)
        for (int al = 0; al < 4; al++)
          for (int counted = 0; counted < 2; counted++) {
            /* tokens: all rows, some (two-shot splits them unevenly), one;
             * count words below, at and past the bound, and 0 */
            norm_case(&t, m, rows_bytes[rb], dt, algos[al], counted, 7, counted ? 5 : 0, seed++);
            norm_case(&t, m, rows_bytes[rb], dt, algos[al], counted, counted ? 7 : 1, counted ? 9 : 0, seed++);
            if (counted) norm_case(&t, m, rows_bytes[rb], dt, algos[al], 1, 3, 0, seed++);
            if (!counted) norm_case(&t, m, rows_bytes[rb], dt, algos[al], 0, m, 0, seed++);
          }
      team_fini(&t);
    }
}

Test(ar_protocol, a_fused_norm_of_rows_over_the_limit_is_refused_naming_the_limit) {
  team t;
  const size_t row = MDR_ALL_REDUCE_NORM_MAX_ROW_BYTES + 16;
  cr_assert_eq(ar_team_init_rows(&t, 1, 2, row), MDR_OK);
  mdr_all_reduce_desc d = mdr_all_reduce_desc_make(BUF, MDR_DTYPE_BF16, 2);
  d.residual = RES;
  d.norm_output = AR_SEQ_NORM;
  d.norm_weight = mdr_arena_ptr(t.a[0], AR_SEQ_WEIGHT);
  cr_assert_eq(mdr_all_reduce(t.a[0], &d, t.s[0]), MDR_ERR_UNSUPPORTED);
  cr_assert(strstr(mdr_backend_last_error(t.b[0]), "MDR_ALL_REDUCE_NORM_MAX_ROW_BYTES"), "%s",
            mdr_backend_last_error(t.b[0]));
  d.norm_output = MDR_BUF_COUNT; /* the plain call of those rows runs */
  d.norm_weight = 0;
  cr_assert_eq(mdr_all_reduce(t.a[0], &d, t.s[0]), MDR_OK, "%s", mdr_backend_last_error(t.b[0]));
  team_fini(&t);
}

/* ==== fused or chained: the fused kernel only where it wins ==== */

/* The choice itself (kernels/ar_protocol.h, mdr_arp_norm_fuses: what
 * mdr_cuda_ar_launch, the twin and mdr_all_reduce_norm_fused run) at its
 * edges: 512 KiB of rows fuse, 16 bytes more chain; two-shot chains; a
 * count word keeps the fused kernel; MDR_AR_NORM_FUSE's values. */
Test(ar_protocol, the_norm_fuses_only_in_one_shot_calls_of_at_most_512_kib) {
  const size_t cap = MDR_ARP_ONE_SHOT_MAX_BYTES, lim = MDR_ARP_NORM_FUSE_MAX_BYTES;
  cr_assert_eq(lim, (size_t)512 * 1024, "the measured crossover (session 9's all_reduce_norm_compare.csv)");
  const int A = MDR_ARP_NORM_FUSE_AUTO, ALW = MDR_ARP_NORM_FUSE_ALWAYS, NEV = MDR_ARP_NORM_FUSE_NEVER;
  /* auto: one-shot up to 512 KiB, whatever the rows' shape */
  cr_assert_eq(mdr_arp_norm_fuses(A, MDR_ARP_ONE_SHOT, 64, 8192, 0, cap), 1, "64 rows of hidden 4096 (512 KiB)");
  cr_assert_eq(mdr_arp_norm_fuses(A, MDR_ARP_ONE_SHOT, 32, 16384, 0, cap), 1, "32 rows of hidden 8192 (512 KiB)");
  cr_assert_eq(mdr_arp_norm_fuses(A, MDR_ARP_ONE_SHOT, 1, 16, 0, cap), 1, "one vector");
  cr_assert_eq(mdr_arp_norm_fuses(A, MDR_ARP_ONE_SHOT, 32768, 16, 0, cap), 1, "512 KiB of 16-byte rows");
  cr_assert_eq(mdr_arp_norm_fuses(A, MDR_ARP_ONE_SHOT, 32769, 16, 0, cap), 0, "512 KiB + 16 bytes");
  cr_assert_eq(mdr_arp_norm_fuses(A, MDR_ARP_ONE_SHOT, 64, 8208, 0, cap), 0, "64 rows of 16 bytes more");
  cr_assert_eq(mdr_arp_norm_fuses(A, MDR_ARP_ONE_SHOT, 65, 8192, 0, cap), 0, "one row more");
  cr_assert_eq(mdr_arp_norm_fuses(A, MDR_ARP_ONE_SHOT, 64, 12288, 0, cap), 0, "64 rows of hidden 6144 (768 KiB)");
  cr_assert_eq(mdr_arp_norm_fuses(A, MDR_ARP_ONE_SHOT, 128, 16384, 0, cap), 0, "128 rows of hidden 8192 (2 MiB)");
  /* two-shot chains at every size */
  cr_assert_eq(mdr_arp_norm_fuses(A, MDR_ARP_TWO_SHOT, 1, 16, 0, cap), 0, "a two-shot of one vector");
  cr_assert_eq(mdr_arp_norm_fuses(A, MDR_ARP_TWO_SHOT, 64, 8192, 0, cap), 0, "a two-shot of 512 KiB");
  /* AUTO without a count (a harness's call): one-shot up to the scratch, then the limit */
  cr_assert_eq(mdr_arp_norm_fuses(A, MDR_ARP_AUTO, 64, 8192, 0, cap), 1);
  cr_assert_eq(mdr_arp_norm_fuses(A, MDR_ARP_AUTO, 65, 8192, 0, cap), 0);
  cr_assert_eq(mdr_arp_norm_fuses(A, MDR_ARP_AUTO, 1, 8192, 0, 0), 0, "AUTO past a one-shot limit of 0: two-shot");
  /* a count word: the fused kernel, whatever the bound, algorithm or mode */
  for (int mode = 0; mode < 3; mode++) {
    cr_assert_eq(mdr_arp_norm_fuses(mode, MDR_ARP_AUTO, 128, 16384, 1, cap), 1, "counted AUTO, mode %d", mode);
    cr_assert_eq(mdr_arp_norm_fuses(mode, MDR_ARP_TWO_SHOT, 128, 16384, 1, cap), 1, "counted two-shot, mode %d", mode);
    cr_assert_eq(mdr_arp_norm_fuses(mode, MDR_ARP_ONE_SHOT, 65, 8192, 1, cap), 1, "counted one-shot, mode %d", mode);
  }
  /* always: fused everywhere; never: chained everywhere (without a count) */
  cr_assert_eq(mdr_arp_norm_fuses(ALW, MDR_ARP_TWO_SHOT, 128, 16384, 0, cap), 1);
  cr_assert_eq(mdr_arp_norm_fuses(ALW, MDR_ARP_ONE_SHOT, 65, 8192, 0, cap), 1);
  cr_assert_eq(mdr_arp_norm_fuses(NEV, MDR_ARP_ONE_SHOT, 1, 16, 0, cap), 0);
  cr_assert_eq(mdr_arp_norm_fuses(NEV, MDR_ARP_ONE_SHOT, 64, 8192, 0, cap), 0);
  cr_assert_eq(mdr_arp_norm_fuses(7, MDR_ARP_ONE_SHOT, 64, 8192, 0, cap), 1, "an unknown mode is auto");
  cr_assert_eq(mdr_arp_norm_fuses(7, MDR_ARP_ONE_SHOT, 65, 8192, 0, cap), 0, "an unknown mode is auto");
  /* the call's form reads the call's fields */
  mdr_ar_call k;
  memset(&k, 0, sizeof k);
  k.rows = 64;
  k.row_bytes = 8192;
  k.algo = MDR_ARP_ONE_SHOT;
  k.one_shot_max = cap;
  cr_assert_eq(mdr_arp_norm_fused(&k), 1, "a zeroed call is auto");
  k.rows = 65;
  cr_assert_eq(mdr_arp_norm_fused(&k), 0);
  static const uint32_t word = 3;
  k.count_ptr = &word;
  cr_assert_eq(mdr_arp_norm_fused(&k), 1, "counted");
  k.count_ptr = NULL;
  k.norm_fuse = ALW;
  cr_assert_eq(mdr_arp_norm_fused(&k), 1);
  k.rows = 1;
  k.norm_fuse = NEV;
  cr_assert_eq(mdr_arp_norm_fused(&k), 0);
  /* MDR_AR_NORM_FUSE's spellings */
  cr_assert_eq(mdr_arp_norm_fuse_parse(NULL), A);
  cr_assert_eq(mdr_arp_norm_fuse_parse(""), A);
  cr_assert_eq(mdr_arp_norm_fuse_parse("auto"), A);
  cr_assert_eq(mdr_arp_norm_fuse_parse("AUTO"), A);
  cr_assert_eq(mdr_arp_norm_fuse_parse("always"), ALW);
  cr_assert_eq(mdr_arp_norm_fuse_parse("Always"), ALW);
  cr_assert_eq(mdr_arp_norm_fuse_parse("never"), NEV);
  cr_assert_eq(mdr_arp_norm_fuse_parse("NEVER"), NEV);
  const char *bad[] = {"1", "0", "on", "yes", "fused", "alway", "nevers", " auto", "auto ", "au-to"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    cr_assert_eq(mdr_arp_norm_fuse_parse(bad[i]), -1, "\"%s\"", bad[i]);
}

/* What mdr_all_reduce_norm_fused answers on a team made under `env`
 * (NULL: unset), 65 rows of hidden 4096 bf16 (8 KiB rows), and that the
 * twin's results are the contract's bits on both sides of the line. */
static void norm_choice_case(const char *env, int fused_small, int fused_large, int fused_two) {
  if (env) setenv("MDR_AR_NORM_FUSE", env, 1);
  else unsetenv("MDR_AR_NORM_FUSE");
  team t;
  const size_t m = 65, row = 8192;
  cr_assert_eq(ar_team_init_rows(&t, 2, m, row), MDR_OK);
  unsetenv("MDR_AR_NORM_FUSE");
  const char *why = mdr_backend_last_error(t.b[0]);
  const char *e = env ? env : "(unset)";
  char before[512];
  snprintf(before, sizeof before, "%s", why ? why : "");
  mdr_all_reduce_desc d = mdr_all_reduce_desc_make(BUF, MDR_DTYPE_BF16, 64);
  cr_assert_eq(mdr_all_reduce_norm_fused(t.a[0], &d), -1, "%s: no norm_output", e);
  d.residual = RES;
  d.norm_output = AR_SEQ_NORM;
  d.norm_weight = mdr_arena_ptr(t.a[0], AR_SEQ_WEIGHT);
  d.norm_eps = 1e-6f;
  cr_assert_eq(mdr_all_reduce_norm_fused(NULL, &d), -1);
  cr_assert_eq(mdr_all_reduce_norm_fused(t.a[0], NULL), -1);
  for (int algo = MDR_ALL_REDUCE_AUTO; algo < MDR_ALL_REDUCE_ALGO_COUNT; algo++) {
    d.algo = (mdr_all_reduce_algo)algo;
    const int nccl = algo == MDR_ALL_REDUCE_NCCL, two = algo == MDR_ALL_REDUCE_TWO_SHOT;
    d.tokens = 64; /* 512 KiB */
    cr_assert_eq(mdr_all_reduce_norm_fused(t.a[0], &d), nccl ? 0 : two ? fused_two : fused_small, "%s, %s, 64 rows",
                 e, mdr_all_reduce_algo_name(d.algo));
    d.tokens = 65; /* 520 KiB */
    cr_assert_eq(mdr_all_reduce_norm_fused(t.a[0], &d), nccl ? 0 : two ? fused_two : fused_large, "%s, %s, 65 rows",
                 e, mdr_all_reduce_algo_name(d.algo));
    d.count_ptr = mdr_arena_ptr(t.a[0], AR_SEQ_WORD); /* a count word keeps the fused kernel */
    cr_assert_eq(mdr_all_reduce_norm_fused(t.a[0], &d), nccl ? 0 : 1, "%s, %s, counted", e,
                 mdr_all_reduce_algo_name(d.algo));
    d.count_ptr = 0;
  }
  d.algo = MDR_ALL_REDUCE_ONE_SHOT;
  d.tokens = m + 1;
  cr_assert_eq(mdr_all_reduce_norm_fused(t.a[0], &d), -1, "%s: refused (over max_batch_tokens)", e);
  d.tokens = 64;
  d.norm_eps = -1.0f;
  cr_assert_eq(mdr_all_reduce_norm_fused(t.a[0], &d), -1, "%s: refused (a negative eps)", e);
  why = mdr_backend_last_error(t.b[0]);
  cr_assert_str_eq(why ? why : "", before, "%s: a query recorded a text", e);
  /* both sides of the line, one- and two-shot: the contract's bits (the
   * twin runs what the query says) */
  uint64_t seed = 0x6e6f726du;
  norm_case(&t, m, row, MDR_DTYPE_BF16, MDR_ALL_REDUCE_ONE_SHOT, 0, 64, 0, seed++);
  norm_case(&t, m, row, MDR_DTYPE_BF16, MDR_ALL_REDUCE_ONE_SHOT, 0, 65, 0, seed++);
  norm_case(&t, m, row, MDR_DTYPE_FP16, MDR_ALL_REDUCE_TWO_SHOT, 0, 5, 0, seed++);
  norm_case(&t, m, row, MDR_DTYPE_FP16, MDR_ALL_REDUCE_AUTO, 1, 65, 40, seed++);
  team_fini(&t);
}

Test(ar_protocol, mdr_ar_norm_fuse_picks_fused_or_chained_and_the_bits_agree, .timeout = 300) {
  norm_choice_case(NULL, 1, 0, 0);
  norm_choice_case("auto", 1, 0, 0);
  norm_choice_case("Always", 1, 1, 1);
  norm_choice_case("never", 0, 0, 0);
  /* an unknown value: auto, and reported */
  setenv("MDR_AR_NORM_FUSE", "sometimes", 1);
  team t;
  team_init(&t, 2);
  unsetenv("MDR_AR_NORM_FUSE");
  const char *why = mdr_backend_last_error(t.b[0]);
  cr_assert(why && strstr(why, "MDR_AR_NORM_FUSE") && strstr(why, "sometimes") && strstr(why, "taken as auto"), "%s",
            why ? why : "(none)");
  team_fini(&t);
  norm_choice_case("sometimes", 1, 0, 0);
}

/* A chained norm whose all-reduce gives up (a lone rank, the time limit)
 * touches neither the residual nor norm_output, and the rows stay. */
Test(ar_protocol, a_chained_norm_that_gives_up_leaves_every_row_as_it_was, .timeout = 60) {
  for (int c = 0; c < 2; c++) {
    setenv("MDR_AR_TIMEOUT_MS", "50", 1);
    if (c) setenv("MDR_AR_NORM_FUSE", "never", 1);
    team t;
    const size_t m = 9, row = 2048;
    cr_assert_eq(ar_team_init_rows(&t, 2, m, row), MDR_OK);
    unsetenv("MDR_AR_TIMEOUT_MS");
    unsetenv("MDR_AR_NORM_FUSE");
    mdr_arena *a = t.a[0];
    cr_assert_eq(mdr_backend_fill(t.b[0], mdr_arena_ptr(a, BUF), 0x3C, m * row), MDR_OK);
    cr_assert_eq(mdr_backend_fill(t.b[0], mdr_arena_ptr(a, RES), 0x3D, m * row), MDR_OK);
    cr_assert_eq(mdr_backend_fill(t.b[0], mdr_arena_ptr(a, AR_SEQ_NORM), 0x7D, m * row), MDR_OK);
    cr_assert_eq(mdr_backend_fill(t.b[0], mdr_arena_ptr(a, AR_SEQ_WEIGHT), 0x3F, row), MDR_OK);
    mdr_all_reduce_desc d = mdr_all_reduce_desc_make(BUF, MDR_DTYPE_BF16, 7);
    d.algo = c ? MDR_ALL_REDUCE_ONE_SHOT : MDR_ALL_REDUCE_TWO_SHOT;
    d.residual = RES;
    d.norm_output = AR_SEQ_NORM;
    d.norm_weight = mdr_arena_ptr(a, AR_SEQ_WEIGHT);
    d.norm_eps = 1e-6f;
    const char *what = c ? "one-shot, MDR_AR_NORM_FUSE=never" : "two-shot";
    cr_assert_eq(mdr_all_reduce_norm_fused(a, &d), 0, "%s: the chain", what);
    cr_assert_eq(mdr_all_reduce(a, &d, t.s[0]), MDR_ERR_STATE, "%s", what);
    cr_assert(strstr(mdr_backend_last_error(t.b[0]), "timed out"), "%s: %s", what, mdr_backend_last_error(t.b[0]));
    long bad = tb_check_head(t.b[0], mdr_arena_ptr(a, BUF), m * row, 0, 0x3C);
    cr_assert_eq(bad, -1, "%s: the rows changed at byte %ld", what, bad);
    bad = tb_check_head(t.b[0], mdr_arena_ptr(a, RES), m * row, 0, 0x3D);
    cr_assert_eq(bad, -1, "%s: the residual changed at byte %ld", what, bad);
    bad = tb_check_head(t.b[0], mdr_arena_ptr(a, AR_SEQ_NORM), m * row, 0, 0x7D);
    cr_assert_eq(bad, -1, "%s: norm_output changed at byte %ld", what, bad);
    team_fini(&t);
  }
}
