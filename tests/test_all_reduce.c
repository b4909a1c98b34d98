/* Suite `all_reduce`: the all-reduce with options (include/mdr/comm.h,
 * "the all-reduce with options"; src/comm.c, comm_host.c, comm_nccl.c,
 * kernels/all_reduce.cu).
 *
 * Every result is compared bit for bit with a CPU reference written here
 * from the contract, independently of src/: acc = (float)x_0; acc +=
 * (float)x_r for r = 1 .. n-1; the sum rounded once to the element type (round to
 * nearest even, conversions written from the formats' definitions); the
 * fused residual add residual = round((float)residual + (float)sum). Each
 * step feeds fresh random inputs (plus edge elements: -0, exact
 * cancellation, overflow to inf, subnormals, ties, an order-sensitive sum,
 * an all-ones NaN), and checks that rows past the reduced ones, and
 * residual rows past the counted ones, are exactly what they were.
 *
 * Host communicator (CI): ranks as threads on host backends.
 *   - a count word (count_ptr) bounds the reduced rows: min(count, bound);
 *     MDR_ALL_REDUCE_NCCL reduces the whole bound (its count is fixed at enqueue)
 *     but adds the residual over the counted rows only;
 *   - the fused residual add in every dtype, 2..4 ranks, with and without
 *     a count word;
 *   - every algorithm gives the same bits; rows() == AUTO;
 *   - eagerly, in EXACT graphs, in LADDER graphs whose body passes the
 *     count word, and in DYNAMIC graphs, replayed in lockstep over random
 *     counts: each result equals the reference (so graphs equal eager);
 *   - the epoch: one step per executed all-reduce, and the wrap at 2^32;
 *   - bad input: its status, and nothing enqueued (the fault backend's
 *     MDR_OP_HOST_FN count); names, defaults, choice, kernels;
 *   - faults: the k-th all-reduce enqueue failing, for every k of a
 *     lockstep run, errors on every rank, never hangs, leaks nothing.
 *
 * GPU (two CUDA devices and NCCL; skipped otherwise): the same harness on
 * mdr_comm_create_local with one thread per rank, for ONE_SHOT, TWO_SHOT,
 * AUTO (and NCCL), every dtype, eager and in graphs, at random counts and
 * around the one-shot / two-shot crossover and the one-shot cap; the epoch
 * wrap; 2000 back-to-back replays of a graph of 4 all-reduces (with and
 * without programmatic dependent launch); NCCL's bits for two ranks. NVLink
 * multicast stays off: every GPU case sets NCCL_NVLS_ENABLE=0 before it
 * makes a communicator. Run on 2xH200 (NCCL 2.28), these took about 14 s
 * together, and passed under compute-sanitizer memcheck. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <errno.h>
#include <math.h> /* macros only (isnan, signbit, INFINITY): no libm */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "all_reduce_impl.h" /* mdr_ar_auto_table, mdr_all_reduce_state: the protocol counters */
#include "fault_backend.h"
#include "ar_reference.h"
#include "support.h"

#if defined(MDR_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

enum { MAXR = 4, MAX_PLANS = 32, MAX_STEPS = 64 };

/* ==== the reference (tests/ar_reference.h): elements and the documented sum ==== */

static size_t esize(mdr_dtype dt) { return dt == MDR_DTYPE_FP32 ? 4 : 2; }
static const char *dt_name(mdr_dtype dt) {
  return dt == MDR_DTYPE_BF16 ? "bf16" : dt == MDR_DTYPE_FP16 ? "fp16" : dt == MDR_DTYPE_FP32 ? "fp32" : "?";
}


static float elem_get(const unsigned char *p, size_t i, mdr_dtype dt) { return ar_bits_float(ar_elem_bits(p, i, dt), dt); }
static void elem_put(unsigned char *p, size_t i, mdr_dtype dt, float v) { ar_elem_set_bits(p, i, dt, ar_float_bits(v, dt)); }
static int bits_nan(uint32_t bits, mdr_dtype dt) { return isnan(ar_bits_float(bits, dt)); }

/* The documented sum of elements [0, count) of n rank images. */
static void ref_sum(unsigned char *out, unsigned char *const *img, int n, size_t count, mdr_dtype dt) {
  for (size_t i = 0; i < count; i++) {
    float acc = elem_get(img[0], i, dt);
    for (int r = 1; r < n; r++) acc += elem_get(img[r], i, dt);
    elem_put(out, i, dt, acc);
  }
}

/* residual = round((float)residual + (float)sum) over [0, count). */
static void ref_residual(unsigned char *res, const unsigned char *sum, size_t count, mdr_dtype dt) {
  for (size_t i = 0; i < count; i++) elem_put(res, i, dt, elem_get(res, i, dt) + elem_get(sum, i, dt));
}

/* ==== inputs ==== */

/* A random finite value of dt: random sign and fraction, exponent in
 * [-6, 5] (sums of a few of them stay normal, ties are common). */
static uint32_t rand_bits(mdr_dtype dt, uint64_t *rng) {
  const uint64_t x = tb_rng_next(rng);
  const uint32_t sign = (uint32_t)(x & 1u), e = (uint32_t)((x >> 1) % 12u);
  switch (dt) {
    case MDR_DTYPE_BF16: return (sign << 15) | ((e + 127u - 6u) << 7) | (uint32_t)((x >> 8) & 0x7fu);
    case MDR_DTYPE_FP16: return (sign << 15) | ((e + 15u - 6u) << 10) | (uint32_t)((x >> 8) & 0x3ffu);
    default: return (sign << 31) | ((e + 127u - 6u) << 23) | (uint32_t)((x >> 8) & 0x7fffffu);
  }
}

static void fill_random(unsigned char *p, size_t bytes, mdr_dtype dt, uint64_t seed) {
  uint64_t rng = seed;
  for (size_t i = 0; i < bytes / esize(dt); i++) ar_elem_set_bits(p, i, dt, rand_bits(dt, &rng));
}

/* Edge elements at the start of row 0 of every step's input. */
enum {
  E_NEG_ZERO, /* -0 on every rank: the sum starts from x_0, so -0 */
  E_CANCEL,   /* 1.5 and -1.5: exact cancellation, +0 */
  E_MAX,      /* the largest finite value on every rank: +inf */
  E_NEG_MAX,  /* -inf */
  E_MIN_SUB,  /* the smallest subnormal on every rank: a subnormal sum */
  E_TIE_EVEN, /* 1 + half an ulp: a tie, to 1 (even) */
  E_TIE_UP,   /* (1 + ulp) + half an ulp: a tie, up to 1 + 2 ulp (even) */
  E_ORDER,    /* big, then half its float ulp from each other rank: rank order keeps big */
  E_ALL_ONES, /* all-ones bits on rank 0 (a NaN; one-shot's arrival sentinel): NaN */
  N_EDGE
};

/* Edge e of rank `rank`; an edge left out (bit e of `off`) is 1.0. */
static uint32_t edge_bits(mdr_dtype dt, int rank, int e, unsigned off) {
  if (off & (1u << e)) return ar_float_bits(1.0f, dt);
  const uint32_t sign = dt == MDR_DTYPE_FP32 ? 0x80000000u : 0x8000u;
  const float ulp1 = dt == MDR_DTYPE_BF16 ? 0x1p-7f : dt == MDR_DTYPE_FP16 ? 0x1p-10f : 0x1p-23f;
  switch (e) {
    case E_NEG_ZERO: return sign;
    case E_CANCEL: return rank == 0 ? ar_float_bits(1.5f, dt) : rank == 1 ? ar_float_bits(-1.5f, dt) : 0;
    case E_MAX:
    case E_NEG_MAX: {
      const uint32_t max = dt == MDR_DTYPE_BF16 ? 0x7f7fu : dt == MDR_DTYPE_FP16 ? 0x7bffu : 0x7f7fffffu;
      return e == E_MAX ? max : sign | max;
    }
    case E_MIN_SUB: return 1u;
    case E_TIE_EVEN: return rank == 0 ? ar_float_bits(1.0f, dt) : rank == 1 ? ar_float_bits(ulp1 / 2, dt) : 0;
    case E_TIE_UP: return rank == 0 ? ar_float_bits(1.0f + ulp1, dt) : rank == 1 ? ar_float_bits(ulp1 / 2, dt) : 0;
    case E_ORDER: {
      const float big = dt == MDR_DTYPE_FP16 ? 1024.0f : 16777216.0f; /* float ulp 2^-13 / 2 */
      return rank == 0 ? ar_float_bits(big, dt) : ar_float_bits(dt == MDR_DTYPE_FP16 ? 0x1p-14f : 1.0f, dt);
    }
    default: return rank == 0 ? (dt == MDR_DTYPE_FP32 ? 0xffffffffu : 0xffffu) : ar_float_bits(1.0f, dt);
  }
}

/* Self-check of the reference against values known by hand. */
Test(all_reduce, the_reference_rounds_to_nearest_even) {
  (void)ar_ref_bf16_table();
  cr_assert_eq(ar_ref_round(&ar_bf16, 1.0f), 0x3f80u);
  cr_assert_eq(ar_ref_round(&ar_bf16, 1.00390625f), 0x3f80u, "tie to even (down)");
  cr_assert_eq(ar_ref_round(&ar_bf16, 1.01171875f), 0x3f82u, "tie to even (up)");
  cr_assert_eq(ar_ref_round(&ar_bf16, 0x1.010002p+0f), 0x3f81u, "just above the tie");
  cr_assert_eq(ar_ref_round(&ar_bf16, -0.0f), 0x8000u);
  cr_assert_eq(ar_ref_round(&ar_bf16, 0x1p-133f), 0x0001u, "smallest subnormal");
  cr_assert_eq(ar_ref_round(&ar_bf16, 3.4e38f), 0x7f80u, "past the largest bf16 + half an ulp: inf");
  cr_assert_eq(ar_ref_round(&ar_bf16, INFINITY), 0x7f80u);
  cr_assert_eq(ar_ref_round(&ar_fp16, 65504.0f), 0x7bffu);
  cr_assert_eq(ar_ref_round(&ar_fp16, 65519.0f), 0x7bffu);
  cr_assert_eq(ar_ref_round(&ar_fp16, 65520.0f), 0x7c00u, "the overflow tie goes to inf");
  cr_assert_eq(ar_ref_round(&ar_fp16, -131008.0f), 0xfc00u);
  cr_assert_eq(ar_ref_round(&ar_fp16, 0x1p-24f), 0x0001u);
  cr_assert_eq(ar_ref_round(&ar_fp16, 0x1p-25f), 0x0000u, "half the smallest subnormal: tie to even (0)");
  cr_assert_eq(ar_ref_round(&ar_fp16, 0x1.8p-25f), 0x0001u);
  cr_assert_eq(ar_ref_round(&ar_fp16, 0x1.ffcp-15f), 0x0400u, "subnormal rounding up to the smallest normal");
  cr_assert_eq(ar_ref_round(&ar_fp16, 1.0f + 0x1p-11f), 0x3c00u);
  cr_assert_eq(ar_ref_round(&ar_fp16, 1.0f + 0x1p-10f + 0x1p-11f), 0x3c02u);
  cr_assert(isnan(ar_ref_bf16_table()[0xffff]) && isnan(ar_ref_fp16_table()[0xffff]));
  for (uint32_t h = 0; h < 65536; h++) { /* widening then rounding is the identity off NaN */
    if (!isnan(ar_ref_bf16_table()[h])) cr_assert_eq(ar_ref_round(&ar_bf16, ar_ref_bf16_table()[h]), h, "bf16 0x%04x", h);
    if (!isnan(ar_ref_fp16_table()[h])) cr_assert_eq(ar_ref_round(&ar_fp16, ar_ref_fp16_table()[h]), h, "fp16 0x%04x", h);
  }
  cr_assert_eq(ar_ref_fp16_table()[0x0001], 0x1p-24f);
  cr_assert_eq(ar_ref_fp16_table()[0x3c00], 1.0f);
  cr_assert_eq(ar_ref_bf16_table()[0xc000], -2.0f);
}

/* ==== buffers ==== */

/* Outside every zero plan (checked at setup), so a graph cache's zeroing
 * never touches them. */
#define BUF_MAIN MDR_BUF_LORA_DELTA
#define COUNT_WORD MDR_BUF_LORA_SEQ_SLOT /* eager count words: a uint32 in the arena */
#define CAP_BUF MDR_BUF_FFN_GATE_UP_FUSED /* rows wide enough to reach the one-shot cap */
#define CAP_RES MDR_BUF_FFN_ACT_A
#define CAP_RES2 MDR_BUF_FFN_ACT_Q8

typedef enum ar_mode {
  MODE_EAGER,   /* mdr_all_reduce, tokens = count */
  MODE_ROWS,    /* mdr_all_reduce_desc_make's defaults, tokens = count (no residual) */
  MODE_COUNTED, /* mdr_all_reduce, a count word in the arena, tokens = the plan's bound */
  MODE_EXACT,   /* an EXACT graph cache; body: tokens = the graph's count */
  MODE_LADDER,  /* a LADDER cache; dynamic body: the cache's count_ptr, tokens = the rung */
  MODE_DYNAMIC, /* a DYNAMIC cache; dynamic body: count_ptr, tokens = max_batch_tokens */
  MODE_COUNT
} ar_mode;
static const char *const k_mode_names[MODE_COUNT] = {"eager",       "eager rows()",  "eager count word",
                                                     "EXACT graph", "LADDER graph", "DYNAMIC graph"};
#define MODE_BIT(m) (1u << (m))
#define MODES_EAGER (MODE_BIT(MODE_EAGER) | MODE_BIT(MODE_ROWS) | MODE_BIT(MODE_COUNTED))
#define MODES_GRAPH (MODE_BIT(MODE_EXACT) | MODE_BIT(MODE_LADDER) | MODE_BIT(MODE_DYNAMIC))
#define MODES_ALL (MODES_EAGER | MODES_GRAPH)
static const mdr_buffer k_res_of_mode[MODE_COUNT] = {MDR_BUF_LORA_XA, MDR_BUF_COUNT,   MDR_BUF_LORA_HACT,
                                                     MDR_BUF_HC_POST, MDR_BUF_HC_COMB, MDR_BUF_HC_LOWRANK_SCRATCH};
/* The back-to-back replay test: four reduced buffers and their residuals. */
static const mdr_buffer k_rep_buf[4] = {MDR_BUF_FP8_ACT, MDR_BUF_FP8_ACT_SCALE, MDR_BUF_Q2_DEQUANT_SCRATCH,
                                        MDR_BUF_Q2_ACT_Q8};
static const mdr_buffer k_rep_res[4] = {MDR_BUF_MOE_FP8_SCRATCH, MDR_BUF_SSM_ROWWISE_W_BF16, MDR_BUF_GDN_FLA_SCRATCH,
                                        MDR_BUF_SSD_SCRATCH};

/* M rows; `row` bytes a row for the main buffers; `cap_row` for CAP_*
 * (0: none); `rep_row` for the replay buffers (0: none). Also: rows of
 * other bytes (norm_output), rows not a multiple of 16 bytes
 * (gate_logits: 18), a buffer of no rows (hc_streams: 256 bytes). */
static mdr_sizes ar_sizes(size_t m, size_t row, size_t cap_row, size_t rep_row) {
  mdr_sizes s;
  memset(&s, 0, sizeof s);
  s.max_batch_tokens = m;
  s.logits_rows = m;
  s.bytes[MDR_BUF_TOKEN_IDS] = m * 4 < 256 ? 256 : m * 4;
  s.bytes[MDR_BUF_LOGITS] = m * 4;
  s.bytes[MDR_BUF_HIDDEN_STATES] = m * row;
  s.bytes[MDR_BUF_RESIDUAL] = m * row;
  s.bytes[BUF_MAIN] = m * row;
  for (int i = 0; i < MODE_COUNT; i++)
    if (k_res_of_mode[i] != MDR_BUF_COUNT) s.bytes[k_res_of_mode[i]] = m * row;
  s.bytes[COUNT_WORD] = 256;
  s.bytes[MDR_BUF_NORM_OUTPUT] = m * row / 2;
  s.bytes[MDR_BUF_GATE_LOGITS] = m * 18;
  s.bytes[MDR_BUF_HC_STREAMS] = 256;
  s.bytes[MDR_BUF_SSM_BA] = s.bytes[MDR_BUF_SSM_DEINTERLEAVED] = m * 18; /* a residual and a norm of 18-byte rows */
  if (cap_row) s.bytes[CAP_BUF] = s.bytes[CAP_RES] = s.bytes[CAP_RES2] = m * cap_row;
  if (rep_row)
    for (int j = 0; j < 4; j++) s.bytes[k_rep_buf[j]] = s.bytes[k_rep_res[j]] = m * rep_row;
  return s;
}

/* ==== a team of ranks, one thread each ==== */

/* One run of steps with fixed parameters (every rank the same plan). */
typedef struct ar_plan {
  mdr_dtype dt;
  mdr_all_reduce_algo algo;
  int alternate;             /* 1: call by call ONE_SHOT, TWO_SHOT, ... (eager modes only) */
  int residual;              /* fuse the residual add (mode's residual buffer) */
  unsigned modes;            /* MODE_BIT()s, run in order each step */
  mdr_buffer buf;            /* the reduced buffer (MDR_BUF_COUNT: BUF_MAIN) */
  mdr_buffer res[MODE_COUNT]; /* per mode (MDR_BUF_COUNT entries: k_res_of_mode) */
  size_t bound;              /* MODE_COUNTED's tokens (0: max_batch_tokens) */
  uint32_t counts[MAX_STEPS]; /* the count of each step (count words may be 0 or > bound) */
  size_t steps;
  int set_epoch;
  uint32_t epoch0;
  uint64_t seed;
  int snapshot;  /* keep the first mode's reduced and residual buffers after the last step */
} ar_plan;

typedef struct ar_team ar_team;
typedef struct ar_rank {
  ar_team *t;
  int rank, dev; /* dev: the CUDA device, -1 for a host rank */
  mdr_backend *host, *b; /* b: host, a fault wrapper around it, or CUDA */
  mdr_stream s;
  mdr_comm *c;
  mdr_arena *a;
  mdr_dptr src;     /* the rank's input: every step copies it into the reduced buffer */
  size_t src_bytes;
  int failed;       /* a check or a call failed (why) */
  int plan, fail_plan, fails; /* the plan running, the last one that failed, failures recorded */
  int halted;       /* a call failed: the rank stopped and aborted its communicator */
  int stuck;        /* a GPU stream never finished: no teardown */
  char why[2048];
  char note[256]; /* logged by the main thread (Criterion logs from it only) */
  uint32_t epoch_end[MAX_PLANS];
  unsigned char *snap[MAX_PLANS];
  size_t calls; /* all-reduces made by the current plan (alternation) */
  /* faults */
  long enqueues;
  int hit, abort_seen;
  mdr_status result;
  uint64_t fallbacks;
} ar_rank;

struct ar_team {
  int n;
  ar_rank r[MAXR];
  mdr_sizes sizes;
  const ar_plan *plans;
  int n_plans;
  void (*work)(ar_rank *);
  atomic_int stopped; /* some rank halted */
  pthread_mutex_t bm;
  pthread_cond_t bcv;
  int barrived;
  unsigned long bgen;
};

/* Records the rank's first failure of each plan (a few plans at most):
 * the first names the cause, the others whether it is alone. */
static void rk_fail(ar_rank *r, const char *fmt, ...) {
  if ((r->failed && r->fail_plan == r->plan) || r->fails >= 4) return;
  r->failed = 1;
  r->fail_plan = r->plan;
  r->fails++;
  const size_t len = strlen(r->why);
  if (len) snprintf(r->why + len, sizeof r->why - len, "\n  and in plan %d: ", r->plan);
  const size_t at = strlen(r->why);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->why + at, sizeof r->why - at, fmt, ap);
  va_end(ap);
}

/* A call's status: on failure the rank records why, aborts its
 * communicator (no peer waits for it) and halts. */
static int rk_ok(ar_rank *r, mdr_status st, const char *what) {
  if (st == MDR_OK) return 1;
  rk_fail(r, "rank %d: %s returned %s: %s", r->rank, what, mdr_status_string(st), mdr_backend_last_error(r->b));
  r->halted = 1;
  atomic_store(&r->t->stopped, 1);
  mdr_comm_abort(r->c);
  return 0;
}

static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Wait for the rank's stream. A GPU rank polls, and gives up (stuck)
 * after 60 s, or 5 s once a peer halted: a kernel waiting for a peer that
 * never comes must fail the test, not hang it. */
static int rk_wait(ar_rank *r, const char *what) {
#if defined(MDR_HAVE_CUDA)
  if (r->dev >= 0) {
    const double t0 = now_s();
    for (;;) {
      const cudaError_t e = cudaStreamQuery((cudaStream_t)r->s);
      if (e != cudaErrorNotReady) break; /* done, or an error synchronize reports */
      const double waited = now_s() - t0;
      if (waited > 60 || (atomic_load(&r->t->stopped) && waited > 5)) {
        rk_fail(r, "rank %d: %s did not finish in %.0f s (a peer missing from a collective, or a hung kernel)",
                r->rank, what, waited);
        r->stuck = r->halted = 1;
        atomic_store(&r->t->stopped, 1);
        return 0;
      }
      const struct timespec ts = {0, 20000};
      nanosleep(&ts, NULL);
    }
  }
#endif
  return rk_ok(r, mdr_backend_synchronize(r->b, r->s), what);
}

/* Every rank of the team meets here; 0 when a rank halted or after 60 s. */
static int team_barrier(ar_team *t) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 60;
  int ok = 1;
  pthread_mutex_lock(&t->bm);
  const unsigned long gen = t->bgen;
  if (++t->barrived == t->n) {
    t->barrived = 0;
    t->bgen++;
    pthread_cond_broadcast(&t->bcv);
  } else {
    while (t->bgen == gen && !atomic_load(&t->stopped))
      if (pthread_cond_timedwait(&t->bcv, &t->bm, &until) == ETIMEDOUT) break;
    ok = t->bgen != gen;
  }
  pthread_mutex_unlock(&t->bm);
  return ok;
}

static void *rank_main(void *p) {
  ar_rank *r = p;
#if defined(MDR_HAVE_CUDA)
  if (r->dev >= 0 && cudaSetDevice(r->dev) != cudaSuccess) {
    rk_fail(r, "rank %d: cudaSetDevice(%d) failed", r->rank, r->dev);
    r->halted = 1;
    atomic_store(&r->t->stopped, 1);
    return NULL;
  }
#endif
  r->t->work(r);
  return NULL;
}

static void run_team(ar_team *t) {
  pthread_t th[MAXR];
  atomic_store(&t->stopped, 0);
  for (int i = 0; i < t->n; i++) cr_assert_eq(pthread_create(&th[i], NULL, rank_main, &t->r[i]), 0);
  for (int i = 0; i < t->n; i++) cr_assert_eq(pthread_join(th[i], NULL), 0);
}

/* Fails the test naming every rank that failed, and why. */
static void team_expect_ok(ar_team *t) {
  char msg[MAXR * 2100] = "";
  int bad = 0;
  for (int i = 0; i < t->n; i++)
    if (t->r[i].failed) {
      bad = 1;
      size_t len = strlen(msg);
      snprintf(msg + len, sizeof msg - len, "%s[rank %d] %s", len ? "\n" : "", i, t->r[i].why);
    }
  cr_assert(!bad, "%s", msg);
}

static void team_base(ar_team *t, int n, const mdr_sizes *s) {
  memset(t, 0, sizeof *t);
  t->n = n;
  t->sizes = *s;
  pthread_mutex_init(&t->bm, NULL);
  pthread_cond_init(&t->bcv, NULL);
  for (int i = 0; i < n; i++) {
    t->r[i].t = t;
    t->r[i].rank = i;
    t->r[i].dev = -1;
  }
}

/* The buffers a plan touches must lie outside every zero plan, so that a
 * graph cache's zeroing never changes them. */
static void expect_outside_zero_plan(mdr_arena *a, const mdr_buffer *bufs, int n) {
  mdr_segment seg[MDR_ZERO_PLAN_MAX];
  size_t ns = 0;
  cr_assert_eq(mdr_arena_zero_plan(a, mdr_arena_max_batch_tokens(a), seg, MDR_ZERO_PLAN_MAX, &ns), MDR_OK);
  for (int i = 0; i < n; i++) {
    const mdr_dptr p = mdr_arena_ptr(a, bufs[i]);
    const size_t bytes = mdr_arena_bytes(a, bufs[i]);
    if (!p) continue;
    for (size_t k = 0; k < ns; k++)
      cr_assert(p + bytes <= seg[k].ptr || seg[k].ptr + seg[k].bytes <= p, "%s lies in the zero plan",
                mdr_buffer_name(bufs[i]));
  }
}

static void team_check_layout(ar_team *t) {
  mdr_buffer used[MODE_COUNT + 16];
  int n = 0;
  used[n++] = BUF_MAIN;
  used[n++] = COUNT_WORD;
  for (int i = 0; i < MODE_COUNT; i++)
    if (k_res_of_mode[i] != MDR_BUF_COUNT) used[n++] = k_res_of_mode[i];
  for (int j = 0; j < 4; j++) {
    used[n++] = k_rep_buf[j];
    used[n++] = k_rep_res[j];
  }
  used[n++] = CAP_BUF;
  used[n++] = CAP_RES;
  used[n++] = CAP_RES2;
  expect_outside_zero_plan(t->r[0].a, used, n);
}

/* n host ranks (wrapped in fault backends when `faulty`), their streams,
 * communicators, arenas (made together from this thread) and inputs. */
static void host_team_init(ar_team *t, int n, int faulty, const mdr_sizes *s) {
  (void)ar_ref_bf16_table();
  team_base(t, n, s);
  mdr_backend *bs[MAXR];
  for (int i = 0; i < n; i++) {
    ar_rank *r = &t->r[i];
    r->host = tb_backend(TB_HOST);
    r->b = r->host;
    if (faulty) cr_assert_eq(fault_backend_create(r->host, &r->b), MDR_OK);
    r->s = tb_stream(r->b);
    bs[i] = r->b;
  }
  mdr_comm *cs[MAXR];
  cr_assert_eq(mdr_comm_create_host(bs, n, cs), MDR_OK, "%s", mdr_backend_last_error(bs[0]));
  mdr_arena *as[MAXR];
  cr_assert_eq(mdr_arena_create_on_comms(cs, n, s, as), MDR_OK, "%s", mdr_backend_last_error(bs[0]));
  for (int i = 0; i < n; i++) {
    ar_rank *r = &t->r[i];
    r->c = cs[i];
    r->a = as[i];
    cr_assert_eq(mdr_arena_window(r->a), MDR_WINDOW_HOST);
    tb_poison_arena(r->a); /* every byte defined (a few calls reduce rows no step wrote) */
    r->src_bytes = mdr_arena_bytes(r->a, BUF_MAIN);
    if (s->bytes[CAP_BUF] > r->src_bytes) r->src_bytes = s->bytes[CAP_BUF];
    cr_assert_eq(mdr_backend_alloc(r->b, r->src_bytes, &r->src), MDR_OK);
  }
  team_check_layout(t);
}

static void team_fini(ar_team *t) {
  for (int i = 0; i < t->n; i++) {
    ar_rank *r = &t->r[i];
    for (int k = 0; k < MAX_PLANS; k++) free(r->snap[k]);
    if (r->src) mdr_backend_free(r->b, r->src);
    mdr_arena_destroy(r->a);
    mdr_comm_destroy(r->c);
    mdr_backend_stream_destroy(r->b, r->s);
    if (r->b != r->host) {
      cr_assert_eq(fault_backend_live(r->b), 0, "rank %d leaked %ld resources", i, fault_backend_live(r->b));
      mdr_backend_destroy(r->b);
    }
    mdr_backend_destroy(r->host);
  }
  pthread_mutex_destroy(&t->bm);
  pthread_cond_destroy(&t->bcv);
}

/* ==== the harness: plans of steps, every mode, every check ==== */

typedef struct body_ctx {
  ar_rank *r;
  const ar_plan *p;
  ar_mode mode;
  mdr_all_reduce_algo algo;
} body_ctx;

typedef struct copy_arg {
  mdr_dptr dst, src;
  size_t n;
} copy_arg;

static mdr_status run_copy(mdr_backend *b, void *p) {
  (void)b;
  const copy_arg *c = p;
  memcpy((void *)(uintptr_t)c->dst, (const void *)(uintptr_t)c->src, c->n);
  return MDR_OK;
}

/* Enqueue a device-to-device copy on s (capture-safe): cudaMemcpyAsync on
 * a CUDA rank, a host-function op on a host rank. */
static mdr_status enqueue_copy(mdr_backend *b, mdr_dptr dst, mdr_dptr src, size_t n, mdr_stream s) {
#if defined(MDR_HAVE_CUDA)
  if (mdr_be_cuda_device(b) >= 0) {
    const cudaError_t e = cudaMemcpyAsync((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n,
                                          cudaMemcpyDeviceToDevice, (cudaStream_t)s);
    return e == cudaSuccess ? MDR_OK : mdr_backend_fail(b, MDR_ERR_BACKEND, "test copy: %s", cudaGetErrorString(e));
  }
#endif
  const copy_arg a = {dst, src, n};
  return mdr_be_host_fn(b, run_copy, &a, sizeof a, s);
}

static mdr_buffer plan_buf(const ar_plan *p) { return p->buf == MDR_BUF_COUNT ? BUF_MAIN : p->buf; }
static mdr_buffer plan_res(const ar_plan *p, ar_mode m) {
  if (!p->residual || m == MODE_ROWS) return MDR_BUF_COUNT;
  return p->res[m] != MDR_BUF_COUNT ? p->res[m] : k_res_of_mode[m];
}

/* One layer's worth: the rank's input into the buffer (the partial sums a
 * row-parallel GEMM would write), then the all-reduce. */
static mdr_status enqueue_work(const body_ctx *bc, size_t tokens, mdr_dptr count_ptr, mdr_stream s) {
  ar_rank *r = bc->r;
  const mdr_buffer buf = plan_buf(bc->p);
  mdr_status st = enqueue_copy(r->b, mdr_arena_ptr(r->a, buf), r->src, mdr_arena_bytes(r->a, buf), s);
  if (st != MDR_OK) return st;
  mdr_all_reduce_desc d = mdr_all_reduce_desc_make(buf, bc->p->dt, tokens);
  if (bc->mode == MODE_ROWS) return mdr_all_reduce(r->a, &d, s); /* the descriptor's defaults */
  d.count_ptr = count_ptr;
  d.residual = plan_res(bc->p, bc->mode);
  d.algo = bc->algo;
  return mdr_all_reduce(r->a, &d, s);
}

static mdr_status body_exact(void *user, mdr_stream s, size_t tokens) { return enqueue_work(user, tokens, 0, s); }

static mdr_status body_counted(void *user, mdr_stream s, mdr_dptr count_ptr, size_t max_tokens) {
  return enqueue_work(user, max_tokens, count_ptr, s);
}

static int mode_counted(ar_mode m) { return m == MODE_COUNTED || m == MODE_LADDER || m == MODE_DYNAMIC; }

/* The algorithm that runs: AUTO falls back to NCCL where mdr's kernels
 * cannot take the rows (not whole 16-byte vectors). The GPU cases run only
 * where the kernels are on. */
static mdr_all_reduce_algo effective(mdr_all_reduce_algo algo, size_t row_bytes) {
  return algo == MDR_ALL_REDUCE_AUTO && row_bytes % 16 != 0 ? MDR_ALL_REDUCE_NCCL : algo;
}

static uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t s = a ^ (b * 0x9E3779B97F4A7C15ull);
  return tb_rng_next(&s);
}

typedef struct plan_state {
  size_t m, bytes, row, row_elems, elems, pool_bytes;
  unsigned char *pool[MAXR], *img[MAXR], *sum, *got, *model[MODE_COUNT];
} plan_state;

static void plan_state_free(plan_state *ps) {
  for (int q = 0; q < MAXR; q++) {
    free(ps->pool[q]);
    free(ps->img[q]);
  }
  free(ps->sum);
  free(ps->got);
  for (int m = 0; m < MODE_COUNT; m++) free(ps->model[m]);
}

/* Every rank's input of step k: a window of its random pool, the edge
 * elements over the start of row 0. */
static void build_images(plan_state *ps, const ar_plan *p, int n, size_t k, unsigned edges_off) {
  for (int q = 0; q < n; q++) {
    const size_t span = (ps->pool_bytes - ps->bytes) / 16;
    const size_t off = (size_t)(mix(p->seed + (uint64_t)q, k + 1) % (span + 1)) * 16;
    memcpy(ps->img[q], ps->pool[q] + off, ps->bytes);
    const size_t edges = ps->row_elems < N_EDGE ? ps->row_elems : N_EDGE;
    for (size_t e = 0; e < edges; e++) ar_elem_set_bits(ps->img[q], e, p->dt, edge_bits(p->dt, q, (int)e, edges_off));
  }
}

/* Index of the first element of [from, to) whose bits differ (NaN matches
 * any NaN), or SIZE_MAX. */
static size_t first_diff(const unsigned char *got, const unsigned char *want, size_t from, size_t to, mdr_dtype dt) {
  const size_t es = esize(dt);
  if (to <= from || memcmp(got + from * es, want + from * es, (to - from) * es) == 0) return SIZE_MAX;
  for (size_t i = from; i < to; i++) {
    const uint32_t g = ar_elem_bits(got, i, dt), w = ar_elem_bits(want, i, dt);
    if (g != w && !(bits_nan(g, dt) && bits_nan(w, dt))) return i;
  }
  return SIZE_MAX;
}

/* The rank's view of one mode's step. */
typedef struct step_ctx {
  const ar_plan *p;
  ar_mode mode;
  mdr_all_reduce_algo algo;
  size_t k, bound, reduce_rows, res_rows;
  uint32_t count;
} step_ctx;

static void fail_elem(ar_rank *r, const step_ctx *sc, const plan_state *ps, const char *what, size_t i,
                      uint32_t got, uint32_t want) {
  rk_fail(r,
          "rank %d, %s, algo %s, %s%s, step %zu, count %u, bound %zu (%zu rows reduced, %zu residual rows): %s "
          "element %zu (row %zu, col %zu): got 0x%x, want 0x%x",
          r->rank, k_mode_names[sc->mode], mdr_all_reduce_algo_name(sc->algo), dt_name(sc->p->dt),
          sc->p->residual && sc->mode != MODE_ROWS ? " + residual" : "", sc->k, sc->count, sc->bound,
          sc->reduce_rows, sc->res_rows, what, i, i / ps->row_elems, i % ps->row_elems, got, want);
}

/* The reduced buffer: the reference sum in its reduced rows, the rank's
 * own input after them; the residual: the model. */
static void check_step(ar_rank *r, const step_ctx *sc, plan_state *ps) {
  const ar_plan *p = sc->p;
  const size_t head = sc->reduce_rows * ps->row_elems;
  if (!rk_ok(r, mdr_backend_copy_d2h(r->b, ps->got, mdr_arena_ptr(r->a, plan_buf(p)), ps->bytes), "copy_d2h"))
    return;
  size_t i = first_diff(ps->got, ps->sum, 0, head, p->dt);
  if (i != SIZE_MAX) {
    fail_elem(r, sc, ps, "reduced rows: not the reference sum at", i, ar_elem_bits(ps->got, i, p->dt),
              ar_elem_bits(ps->sum, i, p->dt));
    return;
  }
  i = first_diff(ps->got, ps->img[r->rank], head, ps->elems, p->dt);
  if (i != SIZE_MAX) {
    fail_elem(r, sc, ps, "rows past the reduced ones were touched at", i, ar_elem_bits(ps->got, i, p->dt),
              ar_elem_bits(ps->img[r->rank], i, p->dt));
    return;
  }
  const mdr_buffer res = plan_res(p, sc->mode);
  if (res == MDR_BUF_COUNT) return;
  if (!rk_ok(r, mdr_backend_copy_d2h(r->b, ps->got, mdr_arena_ptr(r->a, res), ps->bytes), "copy_d2h")) return;
  i = first_diff(ps->got, ps->model[sc->mode], 0, ps->elems, p->dt);
  if (i != SIZE_MAX)
    fail_elem(r, sc, ps,
              i < sc->res_rows * ps->row_elems ? "residual: not round(residual + sum) at"
                                               : "residual rows past the count were touched at",
              i, ar_elem_bits(ps->got, i, p->dt), ar_elem_bits(ps->model[sc->mode], i, p->dt));
}

/* The calls counter of the protocol (kernels/ar_protocol.h): calls that
 * moved data through mdr's protocol. */
static int read_epoch(ar_rank *r, uint32_t *e) {
  mdr_arp_block st;
  if (!rk_ok(r, mdr_all_reduce_state(r->a, &st, NULL), "mdr_all_reduce_state")) return 0;
  *e = st.calls;
  return 1;
}

/* Every counter at e: the state a run of e calls leaves (barriers with
 * their flags). */
static mdr_status set_epoch(mdr_arena *a, uint32_t e) {
  const mdr_arp_block set = {.calls = e, .one_shot = e, .barriers = e};
  return mdr_all_reduce_state(a, NULL, &set);
}

static void run_plan(ar_rank *r, int pi) {
  ar_team *t = r->t;
  const ar_plan *p = &t->plans[pi];
  const mdr_buffer buf = plan_buf(p);
  plan_state ps;
  memset(&ps, 0, sizeof ps);
  ps.m = mdr_arena_max_batch_tokens(r->a);
  ps.bytes = mdr_arena_bytes(r->a, buf);
  ps.row = ps.bytes / ps.m;
  ps.row_elems = ps.row / esize(p->dt);
  ps.elems = ps.bytes / esize(p->dt);
  ps.pool_bytes = 2 * ps.bytes;
  int ok = ps.bytes <= r->src_bytes;
  for (int q = 0; q < t->n && ok; q++) {
    ps.pool[q] = malloc(ps.pool_bytes);
    ps.img[q] = malloc(ps.bytes);
    ok = ps.pool[q] && ps.img[q];
    if (ok) fill_random(ps.pool[q], ps.pool_bytes, p->dt, mix(p->seed, 1000 + (uint64_t)q));
  }
  ps.sum = malloc(ps.bytes);
  ps.got = malloc(ps.bytes);
  for (int m = 0; m < MODE_COUNT; m++) ps.model[m] = malloc(ps.bytes);
  ok = ok && ps.sum && ps.got;
  for (int m = 0; m < MODE_COUNT; m++) ok = ok && ps.model[m];
  if (!ok) {
    rk_fail(r, "rank %d: plan %d: out of host memory (or the input is too small)", r->rank, pi);
    plan_state_free(&ps);
    return;
  }
  r->calls = 0;

  /* the caches, in the same order on every rank (lockstep) */
  mdr_graph_cache *cache[MODE_COUNT] = {NULL};
  body_ctx bc[MODE_COUNT];
  for (int m = MODE_EXACT; m <= MODE_DYNAMIC; m++) {
    bc[m] = (body_ctx){.r = r, .p = p, .mode = (ar_mode)m, .algo = p->algo};
    if (!(p->modes & MODE_BIT(m))) continue;
    mdr_graph_cache_options o;
    mdr_graph_cache_options_default(&o);
    o.zero = MDR_ZERO_FUSED;
    o.user = &bc[m];
    o.mode = m == MODE_EXACT ? MDR_GRAPH_EXACT : m == MODE_LADDER ? MDR_GRAPH_LADDER : MDR_GRAPH_DYNAMIC;
    if (m == MODE_EXACT) {
      o.body = body_exact;
    } else {
      o.body_dynamic = body_counted;
    }
    if (!rk_ok(r, mdr_graph_cache_create(r->a, r->s, &o, &cache[m]), "mdr_graph_cache_create")) goto done;
  }

  /* the residuals' first values: the same on every mode */
  if (p->residual) {
    fill_random(ps.model[0], ps.bytes, p->dt, mix(p->seed, 77 + (uint64_t)r->rank));
    for (int m = 0; m < MODE_COUNT; m++) {
      const mdr_buffer res = plan_res(p, (ar_mode)m);
      if (!(p->modes & MODE_BIT(m)) || res == MDR_BUF_COUNT) continue;
      memcpy(ps.model[m], ps.model[0], ps.bytes);
      if (!rk_ok(r, mdr_backend_copy_h2d(r->b, mdr_arena_ptr(r->a, res), ps.model[m], ps.bytes), "copy_h2d"))
        goto done;
    }
  }

  if (p->set_epoch) { /* nothing in flight on any rank, then every rank sets it */
    if (!rk_wait(r, "synchronize")) goto done;
    if (!team_barrier(t)) goto done;
    if (!rk_ok(r, set_epoch(r->a, p->epoch0), "mdr_all_reduce_state")) goto done;
    if (!team_barrier(t)) goto done;
  }
  uint32_t epoch = 0;
  if (!read_epoch(r, &epoch)) goto done;
  if (p->set_epoch && epoch != p->epoch0) rk_fail(r, "rank %d: epoch 0x%x after set_epoch(0x%x)", r->rank, epoch, p->epoch0);

  uint32_t ids[4096];
  for (size_t i = 0; i < ps.m && i < 4096; i++) ids[i] = (uint32_t)(i * 7 + (size_t)r->rank);
  const mdr_dptr word = mdr_arena_ptr(r->a, COUNT_WORD);
  for (size_t k = 0; k < p->steps; k++) {
    const uint32_t count = p->counts[k];
    build_images(&ps, p, t->n, k, 0u);
    if (!rk_ok(r, mdr_backend_copy_h2d(r->b, r->src, ps.img[r->rank], ps.bytes), "copy_h2d (input)")) goto done;
    /* what each mode reduces this step, and the reference over the most */
    step_ctx sc[MODE_COUNT];
    size_t need = 0;
    for (int m = 0; m < MODE_COUNT; m++) {
      step_ctx *c = &sc[m];
      memset(c, 0, sizeof *c);
      if (!(p->modes & MODE_BIT(m))) continue;
      if (m != MODE_COUNTED && count > ps.m) continue; /* past M: count words only */
      if (m >= MODE_EXACT && count == 0) continue;     /* a step has a token or more */
      c->p = p; /* active */
      c->mode = (ar_mode)m;
      c->k = k;
      c->count = count;
      c->algo = m == MODE_ROWS ? MDR_ALL_REDUCE_AUTO : p->algo; /* rows() is AUTO, whatever the plan's */
      if (m == MODE_COUNTED) {
        c->bound = p->bound ? p->bound : ps.m;
      } else if (m == MODE_LADDER) {
        if (!rk_ok(r, mdr_graph_cache_graph_tokens(cache[m], count, &c->bound), "graph_tokens")) goto done;
      } else if (m == MODE_DYNAMIC) {
        c->bound = ps.m;
      } else {
        c->bound = count;
      }
      const size_t now = mode_counted(c->mode) ? (count < c->bound ? count : c->bound) : c->bound;
      c->res_rows = now;
      c->reduce_rows = now;
      /* NCCL's count is fixed at enqueue: a counted call reduces its bound
       * (alternation takes mdr's kernels only) */
      if (mode_counted(c->mode) && effective(p->alternate ? MDR_ALL_REDUCE_ONE_SHOT : p->algo, ps.row) == MDR_ALL_REDUCE_NCCL)
        c->reduce_rows = c->bound;
      if (need < c->reduce_rows) need = c->reduce_rows;
    }
    ref_sum(ps.sum, ps.img, t->n, need * ps.row_elems, p->dt);

    for (int m = 0; m < MODE_COUNT; m++) {
      step_ctx *c = &sc[m];
      if (!c->p) continue;
      if (p->alternate && c->mode != MODE_ROWS) c->algo = r->calls % 2 ? MDR_ALL_REDUCE_TWO_SHOT : MDR_ALL_REDUCE_ONE_SHOT;
      const mdr_all_reduce_algo eff = effective(c->algo, ps.row);
      const mdr_buffer res = plan_res(p, c->mode);
      if (res != MDR_BUF_COUNT) ref_residual(ps.model[m], ps.sum, c->res_rows * ps.row_elems, p->dt);
      body_ctx eb = {.r = r, .p = p, .mode = c->mode, .algo = c->algo};
      mdr_status st = MDR_OK;
      switch (c->mode) {
        case MODE_EAGER:
        case MODE_ROWS: st = enqueue_work(&eb, count, 0, r->s); break;
        case MODE_COUNTED:
          st = mdr_backend_copy_h2d(r->b, word, &count, sizeof count);
          if (st == MDR_OK) st = enqueue_work(&eb, c->bound, word, r->s);
          break;
        default: st = mdr_graph_cache_step(cache[m], ids, count); break;
      }
      char what[160];
      snprintf(what, sizeof what, "step %zu (count %u) of %s, algo %s, %s", k, count, k_mode_names[m],
               mdr_all_reduce_algo_name(c->algo), dt_name(p->dt));
      if (!rk_ok(r, st, what) || !rk_wait(r, what)) goto done;
      r->calls += c->bound > 0;
      check_step(r, c, &ps);
      if (r->halted) goto done;
      /* the calls counter: one per call of mdr's protocol that moved rows
       * (MDR_ALL_REDUCE_NCCL is NCCL's, on the host twin too; a call of no
       * rows advances nothing) */
      uint32_t e = 0;
      if (!read_epoch(r, &e)) goto done;
      const size_t ran = count < c->bound ? count : c->bound;
      const uint32_t want = epoch + (ran > 0 && eff != MDR_ALL_REDUCE_NCCL ? 1u : 0u);
      if (e != want)
        rk_fail(r, "rank %d, %s, algo %s, step %zu, count %u: epoch 0x%x, want 0x%x", r->rank, k_mode_names[m],
                mdr_all_reduce_algo_name(c->algo), k, count, e, want);
      epoch = e;
      if (k + 1 == p->steps && p->snapshot && !r->snap[pi]) { /* the first mode of the last step */
        r->snap[pi] = malloc(2 * ps.bytes);
        if (r->snap[pi]) {
          mdr_backend_copy_d2h(r->b, r->snap[pi], mdr_arena_ptr(r->a, buf), ps.bytes);
          memset(r->snap[pi] + ps.bytes, 0, ps.bytes);
          if (res != MDR_BUF_COUNT) mdr_backend_copy_d2h(r->b, r->snap[pi] + ps.bytes, mdr_arena_ptr(r->a, res), ps.bytes);
        }
      }
    }
  }
  r->epoch_end[pi] = epoch;
  for (int m = MODE_EXACT; m <= MODE_DYNAMIC; m++) {
    if (!cache[m]) continue;
    mdr_graph_stats gs;
    if (!rk_ok(r, mdr_graph_cache_stats(cache[m], &gs), "mdr_graph_cache_stats")) goto done;
    if (gs.eager_fallbacks != 0 || (!gs.graphs_disabled && gs.captures == 0))
      rk_fail(r, "rank %d: %s: %llu captures, %llu eager fallbacks: the all-reduce was not held by graphs", r->rank,
              k_mode_names[m], (unsigned long long)gs.captures, (unsigned long long)gs.eager_fallbacks);
  }
done:
  if (!r->stuck)
    for (int m = 0; m < MODE_COUNT; m++) mdr_graph_cache_destroy(cache[m]);
  plan_state_free(&ps);
}

static void work_plans(ar_rank *r) {
  for (int i = 0; i < r->t->n_plans && !r->halted; i++) {
    r->plan = i;
    run_plan(r, i);
  }
}

static ar_plan plan_make(mdr_dtype dt, mdr_all_reduce_algo algo, int residual, unsigned modes, uint64_t seed) {
  ar_plan p;
  memset(&p, 0, sizeof p);
  p.dt = dt;
  p.algo = algo;
  p.residual = residual;
  p.modes = modes;
  p.buf = MDR_BUF_COUNT;
  for (int m = 0; m < MODE_COUNT; m++) p.res[m] = MDR_BUF_COUNT;
  p.seed = seed;
  return p;
}

static void plan_counts(ar_plan *p, const uint32_t *c, size_t n) {
  memcpy(p->counts, c, n * sizeof *c);
  p->steps = n;
}

/* n counts: the fixed ones first, then random ones in [1, m]. */
static void plan_random_counts(ar_plan *p, const uint32_t *fixed, size_t nf, size_t n, size_t m, uint64_t seed) {
  uint64_t rng = seed;
  for (size_t i = 0; i < n; i++) p->counts[i] = i < nf ? fixed[i] : (uint32_t)tb_rng_range(&rng, 1, m);
  p->steps = n;
}

static void run_plans(ar_team *t, const ar_plan *plans, int n) {
  t->plans = plans;
  t->n_plans = n;
  t->work = work_plans;
  run_team(t);
  team_expect_ok(t);
}

static const mdr_all_reduce_algo k_algos[4] = {MDR_ALL_REDUCE_AUTO, MDR_ALL_REDUCE_NCCL, MDR_ALL_REDUCE_ONE_SHOT, MDR_ALL_REDUCE_TWO_SHOT};
static const mdr_dtype k_dtypes[3] = {MDR_DTYPE_BF16, MDR_DTYPE_FP16, MDR_DTYPE_FP32};

enum { HM = 40, HROW = 64 }; /* host arenas: 40 rows of 64 bytes (32 bf16 / 16 fp32) */

/* ==== 1. the count word bounds the rows ==== */

/* A count word in the arena (host memory on the host backend), bound
 * tokens: exactly min(count, bound) rows reduced and residual rows added,
 * the rows after them untouched; MDR_ALL_REDUCE_NCCL reduces the whole bound (its
 * count is fixed at enqueue) and adds the residual over the counted rows
 * only. AUTO on rows that are not whole 16-byte vectors is NCCL's. */
Test(all_reduce, a_count_word_bounds_the_rows_and_nccl_reduces_the_whole_bound) {
  const mdr_sizes s = ar_sizes(HM, HROW, 0, 0);
  ar_team t;
  host_team_init(&t, 2, 0, &s);
  static ar_plan plans[MAX_PLANS];
  int n = 0;
  const size_t bounds[2] = {HM, 17};
  for (int bi = 0; bi < 2; bi++)
    for (int a = 0; a < 4; a++)
      for (int res = 0; res < 2; res++) {
        ar_plan *p = &plans[n++];
        *p = plan_make(MDR_DTYPE_BF16, k_algos[a], res, MODE_BIT(MODE_COUNTED), 11 + (uint64_t)n);
        p->bound = bounds[bi];
        const uint32_t b = (uint32_t)bounds[bi];
        const uint32_t words[] = {0, 1, 5, b - 1, b, b + 1, HM + 3, UINT32_MAX, 0x80000000u, 2, b};
        plan_counts(p, words, sizeof words / sizeof words[0]);
      }
  /* gate_logits: rows of 18 bytes (9 bf16), not whole 16-byte vectors */
  ar_plan *p = &plans[n++];
  *p = plan_make(MDR_DTYPE_BF16, MDR_ALL_REDUCE_AUTO, 0, MODE_BIT(MODE_COUNTED) | MODE_BIT(MODE_EAGER), 5);
  p->buf = MDR_BUF_GATE_LOGITS;
  p->bound = 30;
  const uint32_t words[] = {3, 0, 30, 31, 12};
  plan_counts(p, words, 5);
  run_plans(&t, plans, n);
  team_fini(&t);
}

/* ==== 2. the fused residual add ==== */

typedef struct res_case {
  mdr_dtype dt;
  int ranks;
  int counted;
} res_case;

ParameterizedTestParameters(all_reduce, the_fused_residual_add_adds_the_sum_to_the_counted_rows) {
  static res_case cases[18];
  int n = 0;
  for (int d = 0; d < 3; d++)
    for (int ranks = 2; ranks <= 4; ranks++)
      for (int counted = 0; counted < 2; counted++) cases[n++] = (res_case){k_dtypes[d], ranks, counted};
  return cr_make_param_array(res_case, cases, (size_t)n);
}

/* buf = hidden_states, residual = residual (equal row bytes); every
 * algorithm in turn on one team; several steps, so the residual
 * accumulates. */
ParameterizedTest(res_case *c, all_reduce, the_fused_residual_add_adds_the_sum_to_the_counted_rows) {
  const mdr_sizes s = ar_sizes(HM, HROW, 0, 0);
  ar_team t;
  host_team_init(&t, c->ranks, 0, &s);
  ar_plan plans[4];
  const ar_mode mode = c->counted ? MODE_COUNTED : MODE_EAGER;
  for (int a = 0; a < 4; a++) {
    ar_plan *p = &plans[a];
    *p = plan_make(c->dt, k_algos[a], 1, MODE_BIT(mode), 100 * (uint64_t)c->ranks + (uint64_t)a);
    p->buf = MDR_BUF_HIDDEN_STATES;
    p->res[mode] = MDR_BUF_RESIDUAL;
    p->bound = c->counted ? 33 : 0;
    const uint32_t counts[] = {1, 40, 7, 33, 20, 3, 35};
    plan_counts(p, counts, 7);
  }
  run_plans(&t, plans, 4);
  team_fini(&t);
}

/* ==== 3. every algorithm, the same bits ==== */

/* The same bits, except that a NaN matches any NaN: the one-shot sends an
 * all-ones NaN as another NaN (include/mdr/comm.h), NCCL's path does not. */
static void expect_same_snapshots(ar_team *t, int a, int b, size_t bytes, const char *what) {
  const mdr_dtype dt = t->plans[a].dt;
  const size_t n = bytes / esize(dt);
  for (int r = 0; r < t->n; r++) {
    cr_assert(t->r[r].snap[a] && t->r[r].snap[b]);
    size_t i = first_diff(t->r[r].snap[a], t->r[r].snap[b], 0, n, dt);
    cr_assert_eq(i, SIZE_MAX, "rank %d: %s (%s vs %s) at element %zu", r, what,
                 mdr_all_reduce_algo_name(t->plans[a].algo), mdr_all_reduce_algo_name(t->plans[b].algo), i);
    i = first_diff(t->r[r].snap[a] + bytes, t->r[r].snap[b] + bytes, 0, n, dt);
    cr_assert_eq(i, SIZE_MAX, "rank %d: %s residual at element %zu", r, what, i);
  }
}

/* The same inputs through AUTO, NCCL, ONE_SHOT, TWO_SHOT and rows():
 * identical bits on the host communicator (each also equals the
 * reference). With a count word, NCCL differs only past the count (it
 * reduces the whole bound), as documented. */
Test(all_reduce, every_algorithm_gives_the_same_bits_and_rows_is_auto) {
  const mdr_sizes s = ar_sizes(HM, HROW, 0, 0);
  for (int d = 0; d < 3; d++) {
    ar_team t;
    host_team_init(&t, 3, 0, &s);
    static ar_plan plans[9];
    const uint32_t counts[] = {9, 40, 13};
    for (int a = 0; a < 4; a++) { /* uncounted, with residual */
      plans[a] = plan_make(k_dtypes[d], k_algos[a], 1, MODE_BIT(MODE_EAGER), 4242);
      plans[a].snapshot = 1;
      plan_counts(&plans[a], counts, 3);
    }
    plans[4] = plan_make(k_dtypes[d], MDR_ALL_REDUCE_AUTO, 0, MODE_BIT(MODE_ROWS), 4242); /* rows(): AUTO, no residual */
    plans[4].snapshot = 1;
    plan_counts(&plans[4], counts, 3);
    for (int a = 0; a < 4; a++) { /* counted (bound 30), with residual */
      plans[5 + a] = plan_make(k_dtypes[d], k_algos[a], 1, MODE_BIT(MODE_COUNTED), 4343);
      plans[5 + a].bound = 30;
      plans[5 + a].snapshot = 1;
      plan_counts(&plans[5 + a], counts, 3);
    }
    run_plans(&t, plans, 9);
    const size_t bytes = mdr_arena_bytes(t.r[0].a, BUF_MAIN), row = bytes / HM;
    for (int a = 1; a < 4; a++) expect_same_snapshots(&t, 0, a, bytes, "uncounted");
    for (int a = 6; a < 9; a++)
      if (plans[a].algo != MDR_ALL_REDUCE_NCCL) expect_same_snapshots(&t, 5, a, bytes, "counted");
    for (int r = 0; r < t.n; r++) {
      /* rows(): AUTO's sum without a residual */
      cr_assert_eq(memcmp(t.r[r].snap[4], t.r[r].snap[0], bytes), 0, "rank %d: rows() differs from AUTO", r);
      /* NCCL, counted: the counted rows (13 of the last step) as the others, the residual too */
      const mdr_dtype dt = k_dtypes[d];
      cr_assert_eq(first_diff(t.r[r].snap[6], t.r[r].snap[5], 0, 13 * row / esize(dt), dt), SIZE_MAX,
                   "rank %d: NCCL's counted rows", r);
      cr_assert_eq(first_diff(t.r[r].snap[6] + bytes, t.r[r].snap[5] + bytes, 0, bytes / esize(dt), dt), SIZE_MAX,
                   "rank %d: NCCL's residual", r);
      cr_assert_neq(memcmp(t.r[r].snap[6] + 13 * row, t.r[r].snap[5] + 13 * row, bytes - 13 * row), 0,
                    "rank %d: NCCL reduced only the counted rows (documented: the whole bound)", r);
    }
    team_fini(&t);
  }
}

/* ==== 4. inside graph caches, in lockstep ==== */

typedef struct graph_case {
  mdr_dtype dt;
  mdr_all_reduce_algo algo;
  int ranks;
} graph_case;

ParameterizedTestParameters(all_reduce, graph_caches_replay_the_all_reduce_bit_exactly_in_lockstep) {
  static graph_case cases[14];
  int n = 0;
  for (int d = 0; d < 3; d++)
    for (int a = 0; a < 4; a++) cases[n++] = (graph_case){k_dtypes[d], k_algos[a], 2};
  cases[n++] = (graph_case){MDR_DTYPE_BF16, MDR_ALL_REDUCE_AUTO, 3};
  cases[n++] = (graph_case){MDR_DTYPE_FP32, MDR_ALL_REDUCE_TWO_SHOT, 4};
  return cr_make_param_array(graph_case, cases, (size_t)n);
}

/* Eager (tokens = count, rows(), a count word with bound M), EXACT graphs
 * (tokens = the graph's count), LADDER graphs whose body passes the
 * cache's count word with the rung as bound, DYNAMIC graphs (count word, M)
 * in lockstep over random counts with repeats (replays): each equals the
 * reference (so graphs equal eager, bit for bit), counted modes reduce
 * exactly the count's rows (NCCL: the bound's), rows after them and the
 * residual's past the count are untouched. Without and with the residual. */
ParameterizedTest(graph_case *c, all_reduce, graph_caches_replay_the_all_reduce_bit_exactly_in_lockstep) {
  const mdr_sizes s = ar_sizes(HM, HROW, 0, 0);
  ar_team t;
  host_team_init(&t, c->ranks, 0, &s);
  ar_plan plans[2];
  for (int res = 0; res < 2; res++) {
    plans[res] = plan_make(c->dt, c->algo, res, MODES_ALL, 900 + 10 * (uint64_t)c->algo + (uint64_t)res);
    const uint32_t fixed[] = {3, 3, 40, 1, 7, 40, 3, 25, 1, 16};
    plan_random_counts(&plans[res], fixed, 10, 22, HM, 31 + (uint64_t)res);
  }
  run_plans(&t, plans, 2);
  team_fini(&t);
}

/* ==== 5. the protocol's calls counter ==== */

/* From 0xFFFFFFF0 (every counter, as a run of that many calls leaves
 * them), 24 protocol all-reduces (eager, EXACT, LADDER and DYNAMIC graphs;
 * AUTO, one-shot and two-shot; NCCL's calls leave mdr's counters alone)
 * step the counter one at a time (the harness checks each) across 2^32 to
 * 0x8, every result right. */
Test(all_reduce, the_calls_counter_steps_once_per_protocol_call_and_wraps) {
  const mdr_sizes s = ar_sizes(HM, HROW, 0, 0);
  ar_team t;
  host_team_init(&t, 2, 0, &s);
  ar_plan plans[4];
  for (int a = 0; a < 4; a++) {
    plans[a] = plan_make(MDR_DTYPE_BF16, k_algos[a], 1,
                         MODE_BIT(MODE_EAGER) | MODE_BIT(MODE_EXACT) | MODE_BIT(MODE_LADDER) | MODE_BIT(MODE_DYNAMIC),
                         66 + (uint64_t)a);
    plans[a].set_epoch = a == 0;
    plans[a].epoch0 = 0xFFFFFFF0u;
    const uint32_t counts[] = {2, 40, 9, 2};
    plan_counts(&plans[a], counts, 2); /* 2 steps x 4 modes = 8 all-reduces a plan */
  }
  run_plans(&t, plans, 4);
  for (int r = 0; r < 2; r++) {
    cr_assert_eq(t.r[r].epoch_end[0], 0xFFFFFFF8u, "rank %d", r);
    cr_assert_eq(t.r[r].epoch_end[1], 0xFFFFFFF8u, "rank %d: NCCL's calls leave the counter", r);
    cr_assert_eq(t.r[r].epoch_end[2], 0x00000000u, "rank %d: the wrap", r);
    cr_assert_eq(t.r[r].epoch_end[3], 0x8u, "rank %d: 24 protocol all-reduces after 0xFFFFFFF0", r);
  }
  team_fini(&t);
}

static mdr_arp_block state_of(ar_rank *r) {
  mdr_arp_block st;
  memset(&st, 0xAB, sizeof st);
  cr_assert_eq(mdr_all_reduce_state(r->a, &st, NULL), MDR_OK, "%s", mdr_backend_last_error(r->b));
  return st;
}

/* Calls that move nothing leave every counter alone: tokens 0, a refused
 * call, a count word of 0 (every algorithm); a one-shot call steps
 * `one_shot`, a two-shot call `barriers` by two; both step `calls`. The
 * state hook reads what it wrote. One rank: its collectives need no peer. */
Test(all_reduce, only_calls_that_move_rows_advance_the_counters) {
  const mdr_sizes s = ar_sizes(HM, HROW, 0, 0);
  ar_team t;
  host_team_init(&t, 1, 0, &s);
  ar_rank *r = &t.r[0];
  mdr_arp_block st = state_of(r);
  cr_assert(st.calls == 0 && st.one_shot == 0 && st.barriers == 0, "a new arena's counters");
  cr_assert_eq(set_epoch(r->a, 0xFFFFFFFFu), MDR_OK);
  st = state_of(r);
  cr_assert(st.calls == 0xFFFFFFFFu && st.one_shot == 0xFFFFFFFFu && st.barriers == 0xFFFFFFFFu);
  mdr_all_reduce_desc d = mdr_all_reduce_desc_make(BUF_MAIN, MDR_DTYPE_FP32, 0);
  cr_assert_eq(mdr_all_reduce(r->a, &d, r->s), MDR_OK, "tokens 0: nothing to do");
  d.algo = (mdr_all_reduce_algo)7;
  d.tokens = 3;
  cr_assert_eq(mdr_all_reduce(r->a, &d, r->s), MDR_ERR_INVALID_ARGUMENT);
  st = state_of(r);
  cr_assert(st.calls == 0xFFFFFFFFu && st.one_shot == 0xFFFFFFFFu && st.barriers == 0xFFFFFFFFu,
            "neither an empty nor a refused call advances a counter");
  const uint32_t zero = 0;
  const mdr_dptr word = mdr_arena_ptr(r->a, COUNT_WORD);
  cr_assert_eq(mdr_backend_copy_h2d(r->b, word, &zero, 4), MDR_OK);
  cr_assert_eq(mdr_backend_fill(r->b, mdr_arena_ptr(r->a, BUF_MAIN), 0x41, mdr_arena_bytes(r->a, BUF_MAIN)), MDR_OK);
  for (int a = 0; a < 4; a++) {
    d = mdr_all_reduce_desc_make(BUF_MAIN, MDR_DTYPE_FP32, 5);
    d.count_ptr = word;
    d.algo = k_algos[a];
    cr_assert_eq(mdr_all_reduce(r->a, &d, r->s), MDR_OK, "%s", mdr_all_reduce_algo_name(k_algos[a]));
    st = state_of(r);
    cr_assert(st.calls == 0xFFFFFFFFu && st.one_shot == 0xFFFFFFFFu && st.barriers == 0xFFFFFFFFu,
              "%s: a count word of 0 advances nothing", mdr_all_reduce_algo_name(k_algos[a]));
  }
  long bad = tb_check_head(r->b, mdr_arena_ptr(r->a, BUF_MAIN), mdr_arena_bytes(r->a, BUF_MAIN), 0, 0x41);
  cr_assert_eq(bad, -1, "one rank, count 0: the buffer changed at byte %ld", bad);
  d = mdr_all_reduce_desc_make(BUF_MAIN, MDR_DTYPE_FP32, 2);
  d.algo = MDR_ALL_REDUCE_ONE_SHOT;
  cr_assert_eq(mdr_all_reduce(r->a, &d, r->s), MDR_OK);
  st = state_of(r);
  cr_assert(st.calls == 0 && st.one_shot == 0 && st.barriers == 0xFFFFFFFFu, "one-shot: calls and one_shot wrap");
  d.algo = MDR_ALL_REDUCE_TWO_SHOT;
  cr_assert_eq(mdr_all_reduce(r->a, &d, r->s), MDR_OK);
  st = state_of(r);
  cr_assert(st.calls == 1 && st.one_shot == 0 && st.barriers == 1, "two-shot: two barriers");
  team_fini(&t);
}

/* ==== 6. bad input: a status, nothing enqueued ==== */

static long host_fns(ar_rank *r) { return fault_backend_calls_of(r->b, MDR_OP_HOST_FN); }

Test(all_reduce, bad_input_is_refused_and_enqueues_nothing) {
  const mdr_sizes s = ar_sizes(HM, HROW, 65536, 0); /* cap rows: 32 of them are MDR_ALL_REDUCE_ONE_SHOT_MAX_BYTES */
  ar_team t;
  host_team_init(&t, 1, 1, &s);
  ar_rank *r = &t.r[0];
  const long before = host_fns(r);
  const mdr_arp_block e0 = state_of(r);
  const mdr_dptr word = mdr_arena_ptr(r->a, COUNT_WORD);
  mdr_all_reduce_desc ok = mdr_all_reduce_desc_make(BUF_MAIN, MDR_DTYPE_BF16, 4), d;
  ok.residual = k_res_of_mode[MODE_EAGER];
#define REFUSED(desc, want, why)                                                                          \
  do {                                                                                                   \
    d = (desc);                                                                                          \
    const mdr_status st_ = mdr_all_reduce(r->a, &d, r->s);                                          \
    cr_assert_eq(st_, (want), "%s: got %s, want %s (%s)", why, mdr_status_string(st_), mdr_status_string(want), \
                 mdr_backend_last_error(r->b));                                                          \
    cr_assert_eq(host_fns(r), before, "%s: a refused call enqueued something", why);                     \
  } while (0)

  cr_assert_eq(mdr_all_reduce(NULL, &ok, r->s), MDR_ERR_INVALID_ARGUMENT, "NULL arena");
  cr_assert_eq(mdr_all_reduce(r->a, NULL, r->s), MDR_ERR_INVALID_ARGUMENT, "NULL descriptor");
  cr_assert_eq(host_fns(r), before);
  const int bad_dtypes[] = {MDR_DTYPE_COUNT, -1, 99};
  for (int i = 0; i < 3; i++) {
    mdr_all_reduce_desc x = ok;
    x.dtype = (mdr_dtype)bad_dtypes[i];
    REFUSED(x, MDR_ERR_INVALID_ARGUMENT, "an unknown dtype");
  }
  const int bad_algos[] = {7, -1, MDR_ALL_REDUCE_ALGO_COUNT};
  for (int i = 0; i < 3; i++) {
    mdr_all_reduce_desc x = ok;
    x.algo = (mdr_all_reduce_algo)bad_algos[i];
    REFUSED(x, MDR_ERR_INVALID_ARGUMENT, "an unknown algo");
  }
  for (int a = 0; a < 4; a++) { /* residual refusals, under every algorithm */
    mdr_all_reduce_desc x = ok;
    x.algo = k_algos[a];
    x.residual = BUF_MAIN;
    REFUSED(x, MDR_ERR_INVALID_ARGUMENT, "the residual is the buffer itself");
    cr_assert_not_null(strstr(mdr_backend_last_error(r->b), "residual"), "%s", mdr_backend_last_error(r->b));
    x.residual = MDR_BUF_NORM_OUTPUT;
    REFUSED(x, MDR_ERR_INVALID_ARGUMENT, "a residual of other row bytes");
    x.residual = MDR_BUF_HC_STREAMS;
    REFUSED(x, MDR_ERR_INVALID_ARGUMENT, "a residual of no rows");
    x.residual = MDR_BUF_SSM_GATES;
    REFUSED(x, MDR_ERR_INVALID_ARGUMENT, "a NULL residual");
    x.residual = (mdr_buffer)(MDR_BUF_COUNT + 3);
    REFUSED(x, MDR_ERR_INVALID_ARGUMENT, "a residual out of range");
    x.residual = (mdr_buffer)-2;
    REFUSED(x, MDR_ERR_INVALID_ARGUMENT, "a negative residual");
  }
  /* the fused RMSNorm's fields, under every algorithm: each refusal names
   * its field */
  const mdr_dptr wgt = mdr_arena_ptr(r->a, MDR_BUF_RESIDUAL); /* 16-byte aligned, one row and more */
  mdr_all_reduce_desc fused = ok;
  fused.norm_output = MDR_BUF_HIDDEN_STATES;
  fused.norm_weight = wgt;
  fused.norm_eps = 1e-5f;
#define NORM_REFUSED(desc, want, why, field)                                                                     \
  do {                                                                                                          \
    REFUSED(desc, want, why);                                                                                   \
    cr_assert_not_null(strstr(mdr_backend_last_error(r->b), field), "%s: %s", why, mdr_backend_last_error(r->b)); \
    cr_assert_eq(mdr_all_reduce_choice(r->a, &d), MDR_ALL_REDUCE_ALGO_COUNT, "%s: the choice query", why);     \
  } while (0)
  for (int a = 0; a < 4; a++) {
    mdr_all_reduce_desc x = fused;
    x.algo = k_algos[a];
    cr_assert_neq(mdr_all_reduce_choice(r->a, &x), MDR_ALL_REDUCE_ALGO_COUNT, "a valid fused call: %s",
                  mdr_all_reduce_algo_name(k_algos[a]));
    x.dtype = MDR_DTYPE_FP32;
    NORM_REFUSED(x, MDR_ERR_INVALID_ARGUMENT, "a fused norm of fp32", "norm_output");
    x = fused, x.algo = k_algos[a], x.residual = MDR_BUF_COUNT;
    NORM_REFUSED(x, MDR_ERR_INVALID_ARGUMENT, "a fused norm without a residual", "residual");
    x = fused, x.algo = k_algos[a], x.norm_output = BUF_MAIN;
    NORM_REFUSED(x, MDR_ERR_INVALID_ARGUMENT, "norm_output the reduced buffer", "norm_output");
    x.norm_output = x.residual;
    NORM_REFUSED(x, MDR_ERR_INVALID_ARGUMENT, "norm_output the residual", "norm_output");
    x.norm_output = MDR_BUF_NORM_OUTPUT;
    NORM_REFUSED(x, MDR_ERR_INVALID_ARGUMENT, "norm_output of other row bytes", "norm_output");
    x.norm_output = MDR_BUF_HC_STREAMS;
    NORM_REFUSED(x, MDR_ERR_INVALID_ARGUMENT, "norm_output of no rows", "norm_output");
    x.norm_output = (mdr_buffer)(MDR_BUF_COUNT + 2);
    NORM_REFUSED(x, MDR_ERR_INVALID_ARGUMENT, "norm_output out of range", "norm_output");
    x.norm_output = (mdr_buffer)-3;
    NORM_REFUSED(x, MDR_ERR_INVALID_ARGUMENT, "a negative norm_output", "norm_output");
    x = fused, x.algo = k_algos[a], x.norm_weight = 0;
    NORM_REFUSED(x, MDR_ERR_INVALID_ARGUMENT, "norm_output without norm_weight", "norm_weight");
    x.norm_weight = wgt + 2;
    NORM_REFUSED(x, MDR_ERR_INVALID_ARGUMENT, "a misaligned norm_weight", "norm_weight");
    const float bad_eps[] = {-1e-6f, INFINITY, -INFINITY, NAN};
    for (int e = 0; e < 4; e++) {
      x = fused, x.algo = k_algos[a], x.norm_eps = bad_eps[e];
      NORM_REFUSED(x, MDR_ERR_INVALID_ARGUMENT, "a bad norm_eps", "norm_eps");
    }
    x = ok, x.algo = k_algos[a], x.norm_weight = wgt;
    NORM_REFUSED(x, MDR_ERR_INVALID_ARGUMENT, "norm_weight without norm_output", "norm_weight");
    x = ok, x.algo = k_algos[a], x.norm_eps = 1e-5f;
    NORM_REFUSED(x, MDR_ERR_INVALID_ARGUMENT, "norm_eps without norm_output", "norm_eps");
    /* rows that are not whole 16-byte vectors (gate_logits: 18 bytes) */
    x = mdr_all_reduce_desc_make(MDR_BUF_GATE_LOGITS, MDR_DTYPE_BF16, 3);
    x.algo = k_algos[a];
    x.residual = MDR_BUF_SSM_BA;
    x.norm_output = MDR_BUF_SSM_DEINTERLEAVED;
    x.norm_weight = wgt;
    NORM_REFUSED(x, MDR_ERR_UNSUPPORTED, "a fused norm of 18-byte rows", "norm_output");
  }
  mdr_all_reduce_desc x = ok;
  x.buf = MDR_BUF_HC_STREAMS;
  x.residual = MDR_BUF_COUNT;
  REFUSED(x, MDR_ERR_INVALID_ARGUMENT, "a buffer of no rows");
  x.buf = (mdr_buffer)(MDR_BUF_COUNT + 1);
  REFUSED(x, MDR_ERR_INVALID_ARGUMENT, "a buffer out of range");
  x = ok;
  x.dtype = MDR_DTYPE_FP32;
  x.buf = MDR_BUF_GATE_LOGITS; /* 18-byte rows: not whole fp32 elements */
  x.residual = MDR_BUF_COUNT;
  REFUSED(x, MDR_ERR_INVALID_ARGUMENT, "rows that are not whole elements");
  x = ok;
  x.count_ptr = word;
  x.tokens = 0;
  REFUSED(x, MDR_ERR_INVALID_ARGUMENT, "a count word with tokens 0");
  cr_assert_not_null(strstr(mdr_backend_last_error(r->b), "bound"), "%s", mdr_backend_last_error(r->b));
  x.tokens = HM + 1;
  REFUSED(x, MDR_ERR_OUT_OF_RANGE, "a count word with tokens > M");
  x.count_ptr = 0;
  REFUSED(x, MDR_ERR_OUT_OF_RANGE, "tokens > M");
  x.tokens = SIZE_MAX;
  REFUSED(x, MDR_ERR_OUT_OF_RANGE, "tokens SIZE_MAX");
  /* where mdr's kernels cannot run, ONE_SHOT and TWO_SHOT are refused (the
   * host twin as the GPU), AUTO is not */
  for (int a = 2; a < 4; a++) {
    x = mdr_all_reduce_desc_make(MDR_BUF_GATE_LOGITS, MDR_DTYPE_BF16, 3);
    x.algo = k_algos[a];
    REFUSED(x, MDR_ERR_UNSUPPORTED, "rows not a multiple of 16 bytes");
  }
  x = mdr_all_reduce_desc_make(CAP_BUF, MDR_DTYPE_BF16, 33);
  x.algo = MDR_ALL_REDUCE_ONE_SHOT;
  REFUSED(x, MDR_ERR_UNSUPPORTED, "one-shot over MDR_ALL_REDUCE_ONE_SHOT_MAX_BYTES");
  x.tokens = 40;
  x.count_ptr = word; /* the bound decides, whatever the count */
  REFUSED(x, MDR_ERR_UNSUPPORTED, "one-shot with a bound over the cap");
  x.tokens = 0;
  x.count_ptr = 0;
  REFUSED(x, MDR_OK, "tokens 0 (nothing to do)");
  cr_assert_eq(host_fns(r), before, "a call of 0 tokens enqueued something");
  const mdr_arp_block e = state_of(r);
  cr_assert(e.calls == e0.calls && e.one_shot == e0.one_shot && e.barriers == e0.barriers,
            "refused calls advanced a counter");
  mdr_arp_block dummy;

  /* refusals do not abort: valid calls still run, one op each */
  x = mdr_all_reduce_desc_make(CAP_BUF, MDR_DTYPE_BF16, 32);
  x.algo = MDR_ALL_REDUCE_ONE_SHOT;
  cr_assert_eq(mdr_all_reduce(r->a, &x, r->s), MDR_OK, "one-shot at the cap: %s", mdr_backend_last_error(r->b));
  x.tokens = 40;
  x.algo = MDR_ALL_REDUCE_TWO_SHOT;
  cr_assert_eq(mdr_all_reduce(r->a, &x, r->s), MDR_OK, "two-shot over the one-shot cap");
  x = mdr_all_reduce_desc_make(MDR_BUF_GATE_LOGITS, MDR_DTYPE_BF16, 3);
  cr_assert_eq(mdr_all_reduce(r->a, &x, r->s), MDR_OK, "AUTO falls back where the kernels cannot run");
  x.algo = MDR_ALL_REDUCE_NCCL;
  cr_assert_eq(mdr_all_reduce(r->a, &x, r->s), MDR_OK);
  cr_assert_eq(mdr_all_reduce(r->a, &ok, r->s), MDR_OK);
  cr_assert_eq(mdr_all_reduce(r->a, &fused, r->s), MDR_OK, "a fused call: %s", mdr_backend_last_error(r->b));
  cr_assert_eq(host_fns(r), before + 6, "one op a call");

  /* an arena not on a communicator */
  mdr_arena *plain = NULL;
  cr_assert_eq(mdr_arena_create(r->b, &s, &plain), MDR_OK);
  const long mid = host_fns(r);
  cr_assert_eq(mdr_all_reduce(plain, &ok, r->s), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(mdr_backend_last_error(r->b), "communicator"), "%s", mdr_backend_last_error(r->b));
  cr_assert_eq(mdr_all_reduce_state(plain, &dummy, NULL), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_all_reduce_state(plain, NULL, &e0), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(host_fns(r), mid);
  mdr_arena_destroy(plain);
  /* the state hook: NULL arena, NULL out */
  cr_assert_eq(mdr_all_reduce_state(NULL, &dummy, NULL), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_all_reduce_state(r->a, NULL, NULL), MDR_ERR_INVALID_ARGUMENT);
  /* an aborted communicator */
  mdr_comm_abort(r->c);
  d = ok;
  const mdr_status st = mdr_all_reduce(r->a, &d, r->s);
  cr_assert_eq(st, MDR_ERR_STATE, "%s", mdr_status_string(st));
  d.count_ptr = word;
  cr_assert_eq(mdr_all_reduce(r->a, &d, r->s), MDR_ERR_STATE);
  cr_assert_eq(mdr_all_reduce_state(r->a, &dummy, NULL), MDR_ERR_STATE);
  cr_assert_eq(mdr_all_reduce_state(r->a, NULL, &e0), MDR_ERR_STATE);
  cr_assert_eq(host_fns(r), mid, "an aborted communicator enqueued something");
#undef REFUSED
  team_fini(&t);
}

Test(all_reduce, names_defaults_choice_and_kernels) {
  cr_assert_str_eq(mdr_all_reduce_algo_name(MDR_ALL_REDUCE_AUTO), "auto");
  cr_assert_str_eq(mdr_all_reduce_algo_name(MDR_ALL_REDUCE_NCCL), "nccl");
  cr_assert_str_eq(mdr_all_reduce_algo_name(MDR_ALL_REDUCE_ONE_SHOT), "one-shot");
  cr_assert_str_eq(mdr_all_reduce_algo_name(MDR_ALL_REDUCE_TWO_SHOT), "two-shot");
  cr_assert_str_eq(mdr_all_reduce_algo_name(MDR_ALL_REDUCE_ALGO_COUNT), "unknown");
  cr_assert_str_eq(mdr_all_reduce_algo_name((mdr_all_reduce_algo)-1), "unknown");
  cr_assert_str_eq(mdr_all_reduce_algo_name((mdr_all_reduce_algo)1000), "unknown");

  const mdr_all_reduce_desc d = mdr_all_reduce_desc_make(MDR_BUF_MOE_OUTPUT, MDR_DTYPE_FP16, 7);
  cr_assert_eq(d.buf, MDR_BUF_MOE_OUTPUT);
  cr_assert_eq(d.dtype, MDR_DTYPE_FP16);
  cr_assert_eq(d.tokens, 7);
  cr_assert_eq(d.count_ptr, 0);
  cr_assert_eq(d.residual, MDR_BUF_COUNT, "no residual");
  cr_assert_eq(d.algo, MDR_ALL_REDUCE_AUTO);

  const mdr_sizes s = ar_sizes(HM, HROW, 0, 0);
  ar_team t;
  host_team_init(&t, 2, 0, &s);
  mdr_arena *a = t.r[0].a, *plain = NULL;
  cr_assert_eq(mdr_arena_create(t.r[0].b, &s, &plain), MDR_OK);
  const mdr_all_reduce_desc main4 = mdr_all_reduce_desc_make(BUF_MAIN, MDR_DTYPE_BF16, 4);
  cr_assert_eq(mdr_all_reduce_choice(NULL, &main4), MDR_ALL_REDUCE_ALGO_COUNT);
  cr_assert_eq(mdr_all_reduce_choice(a, NULL), MDR_ALL_REDUCE_ALGO_COUNT);
  cr_assert_eq(mdr_all_reduce_choice(plain, &main4), MDR_ALL_REDUCE_ALGO_COUNT, "not on a communicator");
  /* the table: one-shot up to its bound (never past the one-shot cap),
   * two-shot up to the next, NCCL above */
  const size_t one = mdr_ar_auto_table.one_shot_max, two = mdr_ar_auto_table.two_shot_max;
  cr_log_info("all_reduce: AUTO's table: one-shot up to %zu bytes, two-shot up to %zu", one, two);
  cr_assert_leq(one, MDR_ALL_REDUCE_ONE_SHOT_MAX_BYTES, "AUTO would pick a one-shot the cap refuses");
  cr_assert_geq(one, 16);
  cr_assert_leq(one, two);
  /* the query answers what the call would run, for every count and
   * descriptor the call takes, and ALGO_COUNT for what it refuses */
  const char *last = mdr_backend_last_error(t.r[0].b);
  char before[512];
  snprintf(before, sizeof before, "%s", last ? last : "");
  for (size_t k = 0; k <= HM; k++) {
    mdr_all_reduce_desc q = mdr_all_reduce_desc_make(BUF_MAIN, MDR_DTYPE_BF16, k);
    const mdr_all_reduce_algo want = k * HROW <= one ? MDR_ALL_REDUCE_ONE_SHOT : MDR_ALL_REDUCE_TWO_SHOT;
    cr_assert_eq(mdr_all_reduce_choice(a, &q), want, "%zu rows", k);
    q.count_ptr = mdr_arena_ptr(a, COUNT_WORD);
    cr_assert_eq(mdr_all_reduce_choice(a, &q), k ? MDR_ALL_REDUCE_AUTO : MDR_ALL_REDUCE_ALGO_COUNT,
                 "counted, %zu rows (0: refused, a count word needs a bound)", k);
    q.count_ptr = 0;
    q.algo = MDR_ALL_REDUCE_TWO_SHOT;
    cr_assert_eq(mdr_all_reduce_choice(a, &q), MDR_ALL_REDUCE_TWO_SHOT);
    q.algo = MDR_ALL_REDUCE_NCCL;
    cr_assert_eq(mdr_all_reduce_choice(a, &q), MDR_ALL_REDUCE_NCCL);
  }
  /* rows of 18 bytes: mdr's kernels cannot take them (AUTO: NCCL; asked
   * for: refused) — what the old size-only query got wrong */
  mdr_all_reduce_desc q = mdr_all_reduce_desc_make(MDR_BUF_GATE_LOGITS, MDR_DTYPE_BF16, 3);
  cr_assert_eq(mdr_all_reduce_choice(a, &q), MDR_ALL_REDUCE_NCCL, "18-byte rows");
  q.algo = MDR_ALL_REDUCE_ONE_SHOT;
  cr_assert_eq(mdr_all_reduce_choice(a, &q), MDR_ALL_REDUCE_ALGO_COUNT, "one-shot of 18-byte rows is refused");
  q = mdr_all_reduce_desc_make(BUF_MAIN, MDR_DTYPE_BF16, HM + 1);
  cr_assert_eq(mdr_all_reduce_choice(a, &q), MDR_ALL_REDUCE_ALGO_COUNT, "over max_batch_tokens");
  q = mdr_all_reduce_desc_make(BUF_MAIN, (mdr_dtype)9, 2);
  cr_assert_eq(mdr_all_reduce_choice(a, &q), MDR_ALL_REDUCE_ALGO_COUNT, "no such dtype");
  q = mdr_all_reduce_desc_make(BUF_MAIN, MDR_DTYPE_BF16, 2);
  q.residual = BUF_MAIN;
  cr_assert_eq(mdr_all_reduce_choice(a, &q), MDR_ALL_REDUCE_ALGO_COUNT, "the residual is the buffer");
  last = mdr_backend_last_error(t.r[0].b);
  cr_assert_str_eq(last ? last : "", before, "a query recorded a text");
  cr_assert_eq(mdr_all_reduce_kernels(a), 1, "the host twin");
  cr_assert_eq(mdr_all_reduce_kernels(t.r[1].a), 1);
  cr_assert_eq(mdr_all_reduce_kernels(NULL), 0);
  cr_assert_eq(mdr_all_reduce_kernels(plain), 0);
  mdr_arena_destroy(plain);
  team_fini(&t);
}

/* ==== 7. faults ==== */

static long g_fail_enqueue; /* the k-th all-reduce enqueue of g_fail_rank fails (0: none) */
static long g_fail_call;    /* the k-th backend call of g_fail_rank fails (0: none) */
static int g_fail_rank;

static unsigned char pattern_of(int rank) { return (unsigned char)(0x3F + rank); } /* bf16 0x3F3F, 0x4040, ... */

/* Every all-reduce of the fault runs goes through here: the k-th of the
 * failing rank is enqueued while every host-function op fails. */
static mdr_status fault_all_reduce(ar_rank *r, const mdr_all_reduce_desc *d, mdr_stream s) {
  const int fail = r->rank == g_fail_rank && ++r->enqueues == g_fail_enqueue;
  if (fail) fault_backend_fail_kind(r->b, MDR_OP_HOST_FN);
  const mdr_status st = mdr_all_reduce(r->a, d, s);
  if (fail) {
    fault_backend_fail_kind(r->b, -1);
    r->hit = 1;
    /* the failed enqueue aborted the communicator: a call of 0 tokens
     * (which enqueues nothing) already sees it */
    const mdr_all_reduce_desc probe = mdr_all_reduce_desc_make(d->buf, d->dtype, 0);
    r->abort_seen = st != MDR_OK && mdr_all_reduce(r->a, &probe, s) == MDR_ERR_STATE;
  }
  return st;
}

/* A layer with two all-reduces: count word and residual on the first,
 * one-shot on the second; inputs are memsets (no host-function op but the
 * all-reduces). */
static mdr_status fault_body(void *user, mdr_stream s, mdr_dptr count_ptr, size_t max_tokens) {
  ar_rank *r = user;
  mdr_status st = mdr_backend_memset_async(r->b, mdr_arena_ptr(r->a, BUF_MAIN), pattern_of(r->rank),
                                           mdr_arena_bytes(r->a, BUF_MAIN), s);
  if (st != MDR_OK) return st;
  mdr_all_reduce_desc d = mdr_all_reduce_desc_make(BUF_MAIN, MDR_DTYPE_BF16, max_tokens);
  d.count_ptr = count_ptr;
  d.residual = MDR_BUF_LORA_XA;
  st = fault_all_reduce(r, &d, s);
  if (st != MDR_OK) return st;
  st = mdr_backend_memset_async(r->b, mdr_arena_ptr(r->a, MDR_BUF_HC_POST), pattern_of(r->rank),
                                mdr_arena_bytes(r->a, MDR_BUF_HC_POST), s);
  if (st != MDR_OK) return st;
  d = mdr_all_reduce_desc_make(MDR_BUF_HC_POST, MDR_DTYPE_BF16, max_tokens);
  d.algo = MDR_ALL_REDUCE_ONE_SHOT;
  return fault_all_reduce(r, &d, s);
}

static const uint32_t k_fault_counts[] = {3, 3, 1, 40, 7, 3};

/* A LADDER cache (rungs 4, 4, 1, 40, 8, 4: captures and replays), and an
 * eager counted all-reduce after each step. */
static void work_faulty(ar_rank *r) {
  if (r->rank == g_fail_rank) fault_backend_fail_at(r->b, g_fail_call);
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.mode = MDR_GRAPH_LADDER;
  o.zero = MDR_ZERO_FUSED;
  o.body_dynamic = fault_body;
  o.user = r;
  mdr_graph_cache *c = NULL;
  r->result = mdr_graph_cache_create(r->a, r->s, &o, &c);
  uint32_t ids[HM] = {0};
  const mdr_dptr word = mdr_arena_ptr(r->a, COUNT_WORD);
  for (size_t k = 0; k < sizeof k_fault_counts / sizeof k_fault_counts[0] && r->result == MDR_OK; k++) {
    mdr_status st = mdr_graph_cache_step(c, ids, k_fault_counts[k]);
    if (st == MDR_ERR_CAPTURE && g_fail_call) st = MDR_OK; /* the step ran eagerly */
    if (st == MDR_OK) st = mdr_backend_synchronize(r->b, r->s);
    if (st == MDR_OK) st = mdr_backend_copy_h2d(r->b, word, &k_fault_counts[k], 4);
    if (st == MDR_OK)
      st = mdr_backend_memset_async(r->b, mdr_arena_ptr(r->a, BUF_MAIN), pattern_of(r->rank),
                                    mdr_arena_bytes(r->a, BUF_MAIN), r->s);
    if (st == MDR_OK) {
      mdr_all_reduce_desc d = mdr_all_reduce_desc_make(BUF_MAIN, MDR_DTYPE_BF16, 20);
      d.count_ptr = word;
      d.residual = MDR_BUF_LORA_HACT;
      st = fault_all_reduce(r, &d, r->s);
    }
    if (st == MDR_OK) st = mdr_backend_synchronize(r->b, r->s);
    r->result = st;
  }
  if (r->result != MDR_OK) {
    snprintf(r->why, sizeof r->why, "%s", mdr_backend_last_error(r->b));
    /* as an engine does on a failed step; the enqueue-failure runs leave
     * it to the library (a failed enqueue aborts by itself) */
    if (g_fail_call) mdr_comm_abort(r->c);
  }
  fault_backend_fail_at(r->b, 0);
  mdr_graph_stats st = {0};
  if (c) mdr_graph_cache_stats(c, &st);
  r->fallbacks = st.eager_fallbacks;
  mdr_graph_cache_destroy(c);
}

/* After a clean run: the last eager all-reduce summed 3 rows (its count
 * word) of the patterns; the rows after them hold the rank's own. */
static void expect_clean_result(ar_team *t) {
  const size_t bytes = mdr_arena_bytes(t->r[0].a, BUF_MAIN), row = bytes / HM;
  unsigned char *got = malloc(bytes), *img[2], want[2];
  for (int q = 0; q < 2; q++) {
    img[q] = malloc(2);
    memset(img[q], pattern_of(q), 2);
  }
  ref_sum(want, img, 2, 1, MDR_DTYPE_BF16);
  for (int q = 0; q < 2; q++) {
    cr_assert_eq(mdr_backend_copy_d2h(t->r[q].b, got, mdr_arena_ptr(t->r[q].a, BUF_MAIN), bytes), MDR_OK);
    for (size_t i = 0; i < bytes; i += 2) {
      if (i < 3 * row) {
        cr_assert_eq(memcmp(got + i, want, 2), 0, "clean run, rank %d byte %zu: not the sum", q, i);
      } else {
        cr_assert(got[i] == pattern_of(q) && got[i + 1] == pattern_of(q), "clean run, rank %d byte %zu touched", q, i);
      }
    }
    free(img[q]);
  }
  free(got);
}

/* For every k, the k-th all-reduce enqueue of one rank (captures and eager
 * calls, residual and count word included) fails: the library aborts the
 * communicator by itself (no rank calls mdr_comm_abort here), so every rank
 * returns an error at once (no peer waits for the missing share, nor for
 * the 5 s timeout), none hangs, nothing leaks. */
Test(all_reduce, a_failed_enqueue_at_every_k_errors_on_every_rank_and_leaks_nothing, .timeout = 120) {
  setenv("MDR_HOST_COMM_TIMEOUT_MS", "5000", 1);
  const mdr_sizes s = ar_sizes(HM, HROW, 0, 0);
  int injected_runs = 0;
  long k;
  for (k = 1; k < 100; k++) {
    ar_team t;
    host_team_init(&t, 2, 1, &s);
    g_fail_enqueue = k;
    g_fail_call = 0;
    g_fail_rank = (int)(k % 2);
    t.work = work_faulty;
    const double t0 = now_s();
    run_team(&t);
    const double took = now_s() - t0;
    const ar_rank *f = &t.r[g_fail_rank];
    /* the abort wakes the peer at once: no rank waits for the 5 s timeout */
    cr_assert_lt(took, 2.5, "k=%ld: the run took %.1f s: a rank waited for its peer's missing share", k, took);
    if (!f->hit) { /* k is past the run's enqueues */
      for (int i = 0; i < 2; i++) cr_assert_eq(t.r[i].result, MDR_OK, "clean run, rank %d: %s", i, t.r[i].why);
      expect_clean_result(&t);
      team_fini(&t);
      break;
    }
    injected_runs++;
    cr_assert_geq(fault_backend_injected(f->b), 1);
    cr_assert(f->abort_seen, "k=%ld: rank %d's failed enqueue did not abort the communicator", k, g_fail_rank);
    for (int i = 0; i < 2; i++)
      cr_assert_neq(t.r[i].result, MDR_OK, "k=%ld (rank %d's enqueue failed): rank %d returned MDR_OK", k,
                    g_fail_rank, i);
    team_fini(&t); /* asserts nothing leaked */
  }
  unsetenv("MDR_HOST_COMM_TIMEOUT_MS");
  g_fail_enqueue = 0;
  /* per rank: 4 captures x 2 + 6 eager calls */
  cr_assert_geq(injected_runs, 14, "only %d enqueues failed: the run made fewer than expected", injected_runs);
}

/* Every backend call k of one rank failing, in the same run: every rank
 * returns, the failure is reported (or absorbed by a capture that fell
 * back to an eager step), nothing leaks. */
Test(all_reduce, a_failure_at_every_backend_call_returns_on_every_rank_and_leaks_nothing, .timeout = 180) {
  setenv("MDR_HOST_COMM_TIMEOUT_MS", "5000", 1);
  const mdr_sizes s = ar_sizes(HM, HROW, 0, 0);
  int clean = 0;
  for (g_fail_call = 1; g_fail_call < 400 && clean < 2; g_fail_call++) {
    ar_team t;
    host_team_init(&t, 2, 1, &s);
    g_fail_enqueue = 0;
    g_fail_rank = (int)(g_fail_call % 2);
    t.work = work_faulty;
    run_team(&t);
    const ar_rank *f = &t.r[g_fail_rank];
    if (fault_backend_injected(f->b) == 0) {
      clean++;
      for (int i = 0; i < 2; i++) cr_assert_eq(t.r[i].result, MDR_OK, "k=%ld rank %d: %s", g_fail_call, i, t.r[i].why);
      expect_clean_result(&t);
    } else {
      cr_assert(t.r[0].result != MDR_OK || t.r[1].result != MDR_OK || f->fallbacks > 0,
                "k=%ld on rank %d: the injected failure was swallowed", g_fail_call, g_fail_rank);
    }
    team_fini(&t);
  }
  unsetenv("MDR_HOST_COMM_TIMEOUT_MS");
  cr_assert_geq(g_fail_call, 40, "the run made fewer calls than expected");
  g_fail_call = 0;
}

/* ==== GPU: two devices, NCCL, mdr's kernels ==== */

#if defined(MDR_HAVE_NCCL)

enum { GM = 256, GROW = 4096, GCAP_ROW = 16384, GREP_ROW = 1024 };

/* Two CUDA ranks, their communicators (mdr_comm_create_local) and arenas
 * (mdr_arena_create_on_comms), with mdr's kernels on; skips without two
 * devices or on a plain window, fails when a symmetric window has the
 * kernels off (naming why). */
static void gpu_team_init(ar_team *t, const mdr_sizes *s) {
  setenv("NCCL_NVLS_ENABLE", "0", 1); /* never NVLink multicast */
  (void)ar_ref_bf16_table();
  if (!mdr_comm_nccl_available()) cr_skip_test("built without NCCL");
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    n = 0;
  }
  if (n < 2) cr_skip_test("fewer than two CUDA devices");
  team_base(t, 2, s);
  mdr_backend *bs[2];
  for (int i = 0; i < 2; i++) {
    ar_rank *r = &t->r[i];
    r->dev = i;
    cr_assert_eq(mdr_backend_cuda_create(i, &r->b), MDR_OK, "device %d", i);
    r->host = r->b;
    r->s = tb_stream(r->b);
    bs[i] = r->b;
  }
  mdr_comm *cs[2];
  cr_assert_eq(mdr_comm_create_local(bs, 2, cs), MDR_OK, "%s", mdr_backend_last_error(bs[0]));
  mdr_arena *as[2];
  cr_assert_eq(mdr_arena_create_on_comms(cs, 2, s, as), MDR_OK, "%s", mdr_backend_last_error(bs[0]));
  char why[2][MDR_BACKEND_ERROR_MAX];
  for (int i = 0; i < 2; i++) {
    snprintf(why[i], sizeof why[i], "%s", mdr_backend_last_error(bs[i]));
    t->r[i].c = cs[i];
    t->r[i].a = as[i];
  }
  const mdr_window w = mdr_arena_window(as[0]);
  cr_assert_eq(w, mdr_arena_window(as[1]), "the ranks disagree on the window");
  const int k0 = mdr_all_reduce_kernels(as[0]), k1 = mdr_all_reduce_kernels(as[1]);
  cr_assert_eq(k0, k1, "the ranks disagree on mdr's kernels");
  cr_log_info("all_reduce: window %s, mdr's kernels %s", mdr_window_name(w), k0 ? "on" : "off");
  if (!k0) {
    if (w == MDR_WINDOW_PLAIN) {
      for (int i = 0; i < 2; i++) mdr_arena_destroy(as[i]);
      for (int i = 0; i < 2; i++) mdr_comm_destroy(cs[i]);
      cr_skip_test("plain window (no symmetric registration): mdr's kernels do not run: %s", why[0]);
    }
    cr_assert_fail("mdr's kernels are off on a %s window: rank 0: %s; rank 1: %s", mdr_window_name(w), why[0], why[1]);
  }
  for (int i = 0; i < 2; i++) {
    ar_rank *r = &t->r[i];
    tb_poison_arena(r->a);
    r->src_bytes = mdr_arena_bytes(r->a, BUF_MAIN);
    if (s->bytes[CAP_BUF] > r->src_bytes) r->src_bytes = s->bytes[CAP_BUF];
    if (4 * s->bytes[k_rep_buf[0]] > r->src_bytes) r->src_bytes = 4 * s->bytes[k_rep_buf[0]];
    cr_assert_eq(mdr_backend_alloc(r->b, r->src_bytes, &r->src), MDR_OK, "%s", mdr_backend_last_error(r->b));
  }
  team_check_layout(t);
}

static void *gpu_rank_teardown(void *p) {
  ar_rank *r = p;
  (void)cudaSetDevice(r->dev);
  mdr_arena_destroy(r->a);
  mdr_comm_destroy(r->c);
  return NULL;
}

/* Each rank tears its window and communicator down in its own thread,
 * concurrently (docs/TP.md, Teardown); then the streams and backends. */
static void gpu_team_fini(ar_team *t) {
  for (int i = 0; i < 2; i++) {
    ar_rank *r = &t->r[i];
    for (int k = 0; k < MAX_PLANS; k++) free(r->snap[k]);
    if (r->src) mdr_backend_free(r->b, r->src);
  }
  pthread_t th[2];
  for (int i = 0; i < 2; i++) cr_assert_eq(pthread_create(&th[i], NULL, gpu_rank_teardown, &t->r[i]), 0);
  for (int i = 0; i < 2; i++) cr_assert_eq(pthread_join(th[i], NULL), 0);
  for (int i = 0; i < 2; i++) {
    mdr_backend_stream_destroy(t->r[i].b, t->r[i].s);
    mdr_backend_destroy(t->r[i].b);
  }
  pthread_mutex_destroy(&t->bm);
  pthread_cond_destroy(&t->bcv);
}

/* 8. ONE_SHOT, TWO_SHOT, AUTO (and NCCL) x bf16, fp16, fp32 x without and
 * with the residual: eager, rows(), a count word (bound M), EXACT, LADDER
 * (count word, rung) and DYNAMIC (count word, M) graphs, at counts around
 * M and random ones (and AUTO's one-shot / two-shot crossover when it lies
 * inside these rows): bit-exact against the reference on both ranks, rows
 * past the count untouched, the epoch one step per mdr kernel; then, on
 * rows of 16 KiB, the one-shot cap (MDR_ALL_REDUCE_ONE_SHOT_MAX_BYTES) from both
 * sides and AUTO's crossover (from its table) in every mode. */
Test(all_reduce, gpu_kernels_match_the_reference_eagerly_and_in_graphs, .timeout = 300) {
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  const mdr_sizes s = ar_sizes(GM, GROW, GCAP_ROW, GREP_ROW);
  ar_team t;
  gpu_team_init(&t, &s);
  static ar_plan plans[MAX_PLANS];
  int n = 0;
  const mdr_all_reduce_algo algos[4] = {MDR_ALL_REDUCE_ONE_SHOT, MDR_ALL_REDUCE_TWO_SHOT, MDR_ALL_REDUCE_AUTO, MDR_ALL_REDUCE_NCCL};
  /* AUTO's crossover and the one-shot cap in rows, from the table (the
   * kernel picks by the real bytes when the count is read on the device) */
  const size_t auto_main = mdr_ar_auto_table.one_shot_max / GROW;
  const size_t auto_cap = mdr_ar_auto_table.one_shot_max / GCAP_ROW, cap = MDR_ALL_REDUCE_ONE_SHOT_MAX_BYTES / GCAP_ROW;
  cr_log_info("all_reduce: AUTO one-shot up to %zu rows of %d bytes, %zu of %d; the one-shot cap %zu rows of %d",
              auto_main, GROW, auto_cap, GCAP_ROW, cap, GCAP_ROW);
  cr_assert(cap >= 2 && cap < GM, "the arena no longer reaches the one-shot cap (%zu rows)", cap);
  const size_t x = auto_cap >= 2 && auto_cap < GM ? auto_cap : cap; /* a crossover inside the arena */
  for (int a = 0; a < 4; a++)
    for (int d = 0; d < 3; d++)
      for (int res = 0; res < 2; res++) {
        ar_plan *p = &plans[n++];
        *p = plan_make(k_dtypes[d], algos[a], res, MODES_ALL, 5000 + (uint64_t)n);
        uint32_t fixed[5] = {1, GM};
        size_t nf = 2;
        if (auto_main >= 2 && auto_main < GM) { /* AUTO's crossover inside these rows too */
          fixed[nf++] = (uint32_t)auto_main;
          fixed[nf++] = (uint32_t)auto_main + 1;
          fixed[nf++] = (uint32_t)auto_main - 1;
        }
        plan_random_counts(p, fixed, nf, 8, GM, 17 + (uint64_t)n);
      }
  /* rows of 16 KiB: the one-shot cap from both sides, AUTO's crossover in
   * every mode (eager, count word, graphs) */
  const uint32_t C = (uint32_t)cap, X = (uint32_t)x;
  ar_plan *p = &plans[n++];
  *p = plan_make(MDR_DTYPE_BF16, MDR_ALL_REDUCE_ONE_SHOT, 1, MODE_BIT(MODE_EAGER) | MODE_BIT(MODE_COUNTED), 6001);
  p->bound = cap;
  const uint32_t at_cap[] = {C, C - 1, 1, C / 2, C};
  plan_counts(p, at_cap, 5);
  p = &plans[n++];
  *p = plan_make(MDR_DTYPE_BF16, MDR_ALL_REDUCE_ONE_SHOT, 1, MODE_BIT(MODE_COUNTED), 6002);
  p->bound = cap; /* count words past the bound clamp to it */
  const uint32_t over[] = {C + 72, GM, C, C + 1, 0};
  plan_counts(p, over, 5);
  p = &plans[n++];
  *p = plan_make(MDR_DTYPE_BF16, MDR_ALL_REDUCE_TWO_SHOT, 1, MODE_BIT(MODE_EAGER) | MODE_BIT(MODE_COUNTED), 6003);
  const uint32_t two_counts[] = {C, C + 1, GM, 1, X + 1};
  plan_counts(p, two_counts, 5);
  for (int d = 0; d < 4; d++) {
    p = &plans[n++];
    *p = plan_make(k_dtypes[d % 3], MDR_ALL_REDUCE_AUTO, d == 3, d == 3 ? MODE_BIT(MODE_EAGER) | MODE_BIT(MODE_COUNTED) : MODES_ALL,
                   6010 + (uint64_t)d);
    const uint32_t around[] = {X, X + 1, X - 1, GM, 1, X + 1};
    plan_counts(p, around, 6);
  }
  for (int i = 24; i < n; i++) {
    plans[i].buf = CAP_BUF;
    plans[i].res[MODE_EAGER] = CAP_RES;
    plans[i].res[MODE_COUNTED] = CAP_RES2;
  }
  cr_assert_leq(n, MAX_PLANS);
  const double t0 = now_s();
  run_plans(&t, plans, n);
  cr_log_info("all_reduce: %d GPU plans in %.1f s", n, now_s() - t0);
  /* over the cap: refused, nothing enqueued (the epoch stays), nothing aborted */
  for (int i = 0; i < 2; i++) {
    ar_rank *r = &t.r[i];
    uint32_t e0 = 0, e1 = 0;
    cr_assert(read_epoch(r, &e0));
    mdr_all_reduce_desc d = mdr_all_reduce_desc_make(CAP_BUF, MDR_DTYPE_BF16, cap + 1);
    d.algo = MDR_ALL_REDUCE_ONE_SHOT;
    cr_assert_eq(mdr_all_reduce(r->a, &d, r->s), MDR_ERR_UNSUPPORTED, "rank %d: one-shot of %zu x 16 KiB", i,
                 cap + 1);
    d.tokens = GM;
    d.count_ptr = mdr_arena_ptr(r->a, COUNT_WORD);
    cr_assert_eq(mdr_all_reduce(r->a, &d, r->s), MDR_ERR_UNSUPPORTED, "rank %d: one-shot, bound over the cap", i);
    d = mdr_all_reduce_desc_make(MDR_BUF_GATE_LOGITS, MDR_DTYPE_BF16, 3);
    d.algo = MDR_ALL_REDUCE_TWO_SHOT;
    cr_assert_eq(mdr_all_reduce(r->a, &d, r->s), MDR_ERR_UNSUPPORTED, "rank %d: rows of 18 bytes", i);
    cr_assert_eq(mdr_backend_synchronize(r->b, r->s), MDR_OK);
    cr_assert(read_epoch(r, &e1));
    cr_assert_eq(e1, e0, "rank %d: a refused call ran a kernel", i);
    mdr_all_reduce_desc q = mdr_all_reduce_desc_make(CAP_BUF, MDR_DTYPE_BF16, 1);
    cr_assert_eq(mdr_all_reduce_choice(r->a, &q), MDR_ALL_REDUCE_ONE_SHOT);
    q.tokens = cap + 1;
    cr_assert_eq(mdr_all_reduce_choice(r->a, &q),
                 mdr_ar_auto_table.two_shot_max > mdr_ar_auto_table.one_shot_max ? MDR_ALL_REDUCE_TWO_SHOT : MDR_ALL_REDUCE_NCCL);
    q.count_ptr = mdr_arena_ptr(r->a, COUNT_WORD);
    cr_assert_eq(mdr_all_reduce_choice(r->a, &q), MDR_ALL_REDUCE_AUTO);
  }
  /* and the communicator still works */
  ar_plan after = plan_make(MDR_DTYPE_FP32, MDR_ALL_REDUCE_ONE_SHOT, 1, MODE_BIT(MODE_EAGER), 7);
  const uint32_t counts[] = {5, 256};
  plan_counts(&after, counts, 2);
  run_plans(&t, &after, 1);
  gpu_team_fini(&t);
}

/* 9. From 0xFFFFFFF8 on both ranks, 32 all-reduces alternating one-shot
 * and two-shot (eager and with a count word, residual on, random counts):
 * each right, the epoch one step each, 0x18 after. */
Test(all_reduce, gpu_epoch_wraps_and_the_results_stay_right, .timeout = 120) {
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  const mdr_sizes s = ar_sizes(GM, GROW, 0, 0);
  ar_team t;
  gpu_team_init(&t, &s);
  ar_plan p = plan_make(MDR_DTYPE_BF16, MDR_ALL_REDUCE_ONE_SHOT, 1, MODE_BIT(MODE_EAGER) | MODE_BIT(MODE_COUNTED), 99);
  p.alternate = 1;
  p.set_epoch = 1;
  p.epoch0 = 0xFFFFFFF8u;
  const uint32_t fixed[] = {1, 128, 129, GM};
  plan_random_counts(&p, fixed, 4, 16, GM, 3);
  run_plans(&t, &p, 1);
  for (int i = 0; i < 2; i++) cr_assert_eq(t.r[i].epoch_end[0], 0x18u, "rank %d: epoch 0x%x", i, t.r[i].epoch_end[0]);
  gpu_team_fini(&t);
}

/* comm.h: "NCCL's own kernels (MDR_ALL_REDUCE_NCCL) give the same bits for two
 * ranks (one rounded addition, -0 + -0 = -0 included)". Every edge
 * element, every dtype, eagerly and with a count word. */
Test(all_reduce, gpu_nccl_gives_the_documented_bits_for_two_ranks, .timeout = 120) {
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  const mdr_sizes s = ar_sizes(GM, GROW, 0, 0);
  ar_team t;
  gpu_team_init(&t, &s);
  ar_plan plans[3];
  for (int d = 0; d < 3; d++) {
    plans[d] = plan_make(k_dtypes[d], MDR_ALL_REDUCE_NCCL, 1, MODE_BIT(MODE_EAGER) | MODE_BIT(MODE_COUNTED), 8100 + (uint64_t)d);
    const uint32_t counts[] = {1, 7, GM};
    plan_counts(&plans[d], counts, 3);
  }
  run_plans(&t, plans, 3);
  gpu_team_fini(&t);
}

/* 10. One EXACT graph of four all-reduces, replayed 2000 times back to back
 * with no host synchronisation (device-id steps: nothing read from the
 * host). Its body, per pair p = 0, 1: a copy rewrites buffer B_p from the
 * rank's source (so a replay never sees the last one's data); all-reduce
 * B_p (sum s_p) with a residual; all-reduce B_p again (2 s_p: its input is
 * the previous kernel's output, launched right after it: the case
 * programmatic dependent launch must keep ordered) with another residual.
 * Algorithms one-shot, two-shot, two-shot, one-shot. Afterwards, on both
 * ranks: B_p holds 2 s_p in its counted rows and the source after them;
 * each residual its first value plus 2000 sums (fp32 integers: exact); the
 * epoch 8000 steps on. A kernel reading another call's data, or a lost or
 * doubled replay, shows. */
enum { REPLAYS = 2000, REP_T = 24 };

static const mdr_all_reduce_algo k_rep_algo[4] = {MDR_ALL_REDUCE_ONE_SHOT, MDR_ALL_REDUCE_TWO_SHOT, MDR_ALL_REDUCE_TWO_SHOT, MDR_ALL_REDUCE_ONE_SHOT};

static mdr_status replay_body(void *user, mdr_stream s, size_t tokens) {
  ar_rank *r = user;
  for (int j = 0; j < 4; j++) {
    const mdr_buffer buf = k_rep_buf[j & 2]; /* B_0 for j = 0, 1; B_1 (k_rep_buf[2]) for j = 2, 3 */
    const size_t bytes = mdr_arena_bytes(r->a, buf);
    if (j % 2 == 0) {
      const mdr_status st = enqueue_copy(r->b, mdr_arena_ptr(r->a, buf), r->src + (size_t)(j / 2) * bytes, bytes, s);
      if (st != MDR_OK) return st;
    }
    mdr_all_reduce_desc d = mdr_all_reduce_desc_make(buf, MDR_DTYPE_FP32, tokens);
    d.residual = k_rep_res[j];
    d.algo = k_rep_algo[j];
    const mdr_status st = mdr_all_reduce(r->a, &d, s);
    if (st != MDR_OK) return st;
  }
  return MDR_OK;
}

static float rep_value(int rank, int j, size_t i, int residual) { /* small integers: every sum exact */
  uint64_t s = mix(((uint64_t)rank << 40) ^ ((uint64_t)j << 32) ^ ((uint64_t)residual << 48), i);
  const uint64_t x = tb_rng_next(&s);
  return residual ? (float)((int)(x % 201) - 100) : (float)((int)(x % 17) - 8 + j);
}

static void work_replays(ar_rank *r) {
  const size_t bytes = mdr_arena_bytes(r->a, k_rep_buf[0]), count = bytes / 4, row = count / GM;
  float *img = malloc(2 * bytes), *init = malloc(4 * bytes), *got = malloc(bytes);
  mdr_graph_cache *c = NULL;
  if (!img || !init || !got) {
    rk_fail(r, "out of host memory");
    goto done;
  }
  for (size_t i = 0; i < count; i++) {
    for (int q = 0; q < 2; q++) img[(size_t)q * count + i] = rep_value(r->rank, q, i, 0);
    for (int j = 0; j < 4; j++) init[(size_t)j * count + i] = rep_value(r->rank, j, i, 1);
  }
  if (!rk_ok(r, mdr_backend_copy_h2d(r->b, r->src, img, 2 * bytes), "copy_h2d")) goto done;
  for (int j = 0; j < 4; j++)
    if (!rk_ok(r, mdr_backend_copy_h2d(r->b, mdr_arena_ptr(r->a, k_rep_res[j]), init + (size_t)j * count, bytes),
               "copy_h2d"))
      goto done;
  uint32_t e0 = 0, e1 = 0;
  if (!read_epoch(r, &e0)) goto done;
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.zero = MDR_ZERO_FUSED;
  o.body = replay_body;
  o.user = r;
  if (!rk_ok(r, mdr_graph_cache_create(r->a, r->s, &o, &c), "mdr_graph_cache_create")) goto done;
  const double t0 = now_s();
  for (int k = 0; k < REPLAYS; k++) /* ids already in token_ids: no host read, no wait */
    if (!rk_ok(r, mdr_graph_cache_step_device(c, 0, REP_T), "mdr_graph_cache_step_device")) goto done;
  const double enq = now_s() - t0;
  if (!rk_wait(r, "2000 replays")) goto done;
  snprintf(r->note, sizeof r->note, "rank %d: %d replays of 4 all-reduces: enqueued in %.1f ms, done in %.1f ms",
           r->rank, REPLAYS, enq * 1e3, (now_s() - t0) * 1e3);
  mdr_graph_stats gs;
  if (!rk_ok(r, mdr_graph_cache_stats(c, &gs), "stats")) goto done;
  if (!gs.graphs_disabled && (gs.captures != 1 || gs.eager_fallbacks != 0))
    rk_fail(r, "rank %d: %llu captures, %llu eager fallbacks (want 1, 0)", r->rank, (unsigned long long)gs.captures,
            (unsigned long long)gs.eager_fallbacks);
  if (!read_epoch(r, &e1)) goto done;
  if (e1 - e0 != 4u * REPLAYS) rk_fail(r, "rank %d: the epoch moved by %u, want %u", r->rank, e1 - e0, 4u * REPLAYS);
  for (int q = 0; q < 2 && !r->failed; q++) { /* B_q: 2 s_q, then the source */
    if (!rk_ok(r, mdr_backend_copy_d2h(r->b, got, mdr_arena_ptr(r->a, k_rep_buf[2 * q]), bytes), "copy_d2h"))
      goto done;
    for (size_t i = 0; i < count; i++) {
      const float sum = rep_value(0, q, i, 0) + rep_value(1, q, i, 0);
      const float want = i < REP_T * row ? sum + sum : img[(size_t)q * count + i];
      if (memcmp(&got[i], &want, 4) != 0) {
        rk_fail(r, "rank %d, buffer %d (all-reduces %d, %d), after %d replays: %s element %zu (row %zu): got %g, "
                "want %g", r->rank, q, 2 * q, 2 * q + 1, REPLAYS, i < REP_T * row ? "reduced" : "untouched", i,
                i / row, (double)got[i], (double)want);
        break;
      }
    }
  }
  for (int j = 0; j < 4 && !r->failed; j++) { /* residual j: first value + 2000 x (s or 2 s) */
    if (!rk_ok(r, mdr_backend_copy_d2h(r->b, got, mdr_arena_ptr(r->a, k_rep_res[j]), bytes), "copy_d2h")) goto done;
    for (size_t i = 0; i < count; i++) {
      float want = init[(size_t)j * count + i];
      if (i < REP_T * row) {
        float sum = rep_value(0, j / 2, i, 0) + rep_value(1, j / 2, i, 0);
        if (j % 2) sum = sum + sum;
        for (int k = 0; k < REPLAYS; k++) want = want + sum;
      }
      if (memcmp(&got[i], &want, 4) != 0) {
        rk_fail(r, "rank %d, all-reduce %d (%s), after %d replays: residual element %zu (row %zu): got %g, want %g",
                r->rank, j, mdr_all_reduce_algo_name(k_rep_algo[j]), REPLAYS, i, i / row, (double)got[i], (double)want);
        break;
      }
    }
  }
done:
  if (!r->stuck) mdr_graph_cache_destroy(c);
  free(img);
  free(init);
  free(got);
}

static void replays_case(void) {
  const mdr_sizes s = ar_sizes(GM, GROW, 0, GREP_ROW);
  ar_team t;
  gpu_team_init(&t, &s);
  t.work = work_replays;
  run_team(&t);
  for (int i = 0; i < 2; i++) cr_log_info("all_reduce: %s", t.r[i].note);
  team_expect_ok(&t);
  gpu_team_fini(&t);
}

Test(all_reduce, gpu_2000_back_to_back_replays_of_four_all_reduces, .timeout = 120) {
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  replays_case();
}

/* The same with programmatic dependent launch off (MDR_AR_PDL=0, read at
 * the process's first all-reduce launch: each Criterion test is a process
 * of its own). */
Test(all_reduce, gpu_2000_back_to_back_replays_without_programmatic_launch, .timeout = 120) {
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  setenv("MDR_AR_PDL", "0", 1);
  replays_case();
}

#else

Test(all_reduce, gpu_kernels_match_the_reference_eagerly_and_in_graphs) { cr_skip_test("built without NCCL"); }
Test(all_reduce, gpu_epoch_wraps_and_the_results_stay_right) { cr_skip_test("built without NCCL"); }
Test(all_reduce, gpu_nccl_gives_the_documented_bits_for_two_ranks) { cr_skip_test("built without NCCL"); }
Test(all_reduce, gpu_2000_back_to_back_replays_of_four_all_reduces) { cr_skip_test("built without NCCL"); }
Test(all_reduce, gpu_2000_back_to_back_replays_without_programmatic_launch) { cr_skip_test("built without NCCL"); }

#endif
