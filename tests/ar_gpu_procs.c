/* ar_gpu_procs — mdr's all-reduce kernels (kernels/all_reduce.cu, protocol
 * kernels/ar_protocol.h) with every rank a PROCESS on one GPU, so that
 * compute-sanitizer (memcheck, synccheck) can watch them. No NCCL, no multicast.
 *
 * Why processes: the ar_gpu suite (tests/test_ar_gpu.c) runs its ranks as
 * threads of one process, and compute-sanitizer serialises a process's
 * kernels; a rank's kernel spins until its peers' kernels arrive, so under
 * the tool they never meet (it hangs). Kernels of separate processes
 * time-slice on the GPU: a spinning rank is switched out and its peers run.
 *
 * How: the parent maps a shared control page (a memfd) and starts one
 * child per rank, which forks and executes this program again with --rank
 * and the page's descriptor: the parent never touches CUDA (a context does
 * not survive fork), and compute-sanitizer's --target-processes all follows
 * a child that executes a program (it does not follow a bare fork: the first
 * GPU run saw one process watched of three). Each child makes its slab on device 0 (tests/ar_gpu_layout.h),
 * puts its cudaIpcGetMemHandle on the page, meets its siblings (a barrier
 * of atomics on the page), opens their slabs (cudaIpcOpenMemHandle), sets
 * its comm region up, meets them again and runs the calls: a random
 * lockstep sequence from --seed that every rank derives alike (one-shot,
 * two-shot, counted AUTO, now and then past the 2 MiB one-shot cap; empty
 * calls by 0 rows and by a count word of 0; bf16, fp16, fp32; with and
 * without residual; some with the fused RMSNorm; rows of 16 B to 4 KiB, 1
 * to 64 of them), BATCH calls a batch at their own offsets, programmatic
 * dependent launch off and on by batch. Rank r's inputs for call i are a
 * pure function of (seed, i, r), so each child computes its expected rows
 * with the reference (tests/ar_reference.h: acc = x_0; acc += x_r in fp32
 * in rank order, one rounding to nearest even; residual = round(residual +
 * sum); tests/ar_norm_ref.h for the norm) and checks every element bit for
 * bit (NaN as NaN) and every other byte, up to the guard past each call,
 * against its upload (poison).
 *
 * Nothing waits forever: every barrier and every batch, launches included
 * (under the tool a launch may return only when its kernel ends), has a
 * deadline (--timeout-s). Past it, or when a sibling failed or died, a
 * watchdog thread raises the host abort word the kernels poll; the rank
 * prints where its kernels waited (the report words) and the run fails.
 *
 * Run: ar_gpu_procs [--ranks N (2..8, 2)] [--calls C (300)] [--seed S (1)]
 *                   [--timeout-s T (60)] [--plant-oob 0|1 (0)] [--destroy-rank R]
 * --plant-oob 1 is the control of a sanitizer run: the last rank reads past
 * an allocation once, which memcheck must report (device-check.sh fails
 * the step when it does not: the tool did not watch the ranks).
 * --destroy-rank R replaces the calls: every other rank launches a one-shot
 * call that rank R never makes, and R, as a rank that goes away does to
 * peers in other processes (src/comm_nccl_window.c), raises the abort word
 * of every other rank's region through its mappings of their slabs
 * (mdr_cuda_ar_raise_abort) 300 ms later. Each waiting rank must still be
 * waiting before the raise, end within 100 ms of it with the give-up cause
 * MDR_ARP_PEER in its report (its host word untouched), leave its rows,
 * residual rows and protocol counters as they were, and its stream usable;
 * each prints how long it took.
 *   compute-sanitizer --error-exitcode 1 --target-processes all \
 *     --tool memcheck build/tests/ar_gpu_procs --ranks 2 --calls 100
 * (scripts/device-check.sh, phase arproto). Exit 0 when every value is
 * right and nothing hung, 1 otherwise, 77 (CTest's skip) without a device. */
#define _DEFAULT_SOURCE /* prctl */
#define _GNU_SOURCE /* memfd_create */
#include <cuda_runtime.h>
#include <errno.h>
#include <math.h> /* isnan */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "all_reduce.h"
#include "ar_gpu_layout.h"
#include "ar_norm_ref.h"
#include "ar_reference.h"
#include "rng.h"
#include "clock.h"
#include "gpu_helpers.h"

enum {
  MAXR = MDR_ARP_MAX_RANKS,
  BATCH = 50,        /* calls per batch (launched back to back, checked after) */
  PROGRESS_S = 5,    /* seconds between progress lines */
  SKIP = 77          /* CTest's SKIP_RETURN_CODE */
};

/* ==== the control page, shared by the parent and every rank ==== */

typedef struct ctl_page {
  uint32_t arrived, generation; /* the barrier */
  uint32_t failed;              /* a rank failed, hung or died: every rank stops */
  uint32_t skipped;             /* a rank found no CUDA device */
  uint64_t done;                /* calls rank 0 has checked (progress) */
  uint64_t one, two, empty;     /* rank 0's tally of how the calls ran */
  uint64_t wrong[MAXR];
  uint64_t raised_ns;           /* --destroy-rank: when rank R began raising (CLOCK_MONOTONIC ns) */
  cudaIpcMemHandle_t handle[MAXR];
  char first_wrong[MAXR][300];
  char skip_reason[128];
} ctl_page;

static uint32_t load32(const uint32_t *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
static void store32(uint32_t *p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }

/* Every rank arrives, or the deadline passes, or a rank failed: 1 when all
 * arrived. A generation barrier: the last to arrive resets the count, then
 * moves the generation on. */
static int barrier(ctl_page *c, int n, double timeout_s) {
  const uint32_t gen = load32(&c->generation);
  if (__atomic_add_fetch(&c->arrived, 1u, __ATOMIC_SEQ_CST) == (uint32_t)n) {
    store32(&c->arrived, 0);
    __atomic_add_fetch(&c->generation, 1u, __ATOMIC_SEQ_CST);
    return 1;
  }
  const double deadline = tb_now_s() + timeout_s;
  while (load32(&c->generation) == gen) {
    if (load32(&c->failed) || load32(&c->skipped)) return 0;
    if (tb_now_s() > deadline) {
      store32(&c->failed, 1);
      fprintf(stderr, "ar_gpu_procs: a barrier waited %.0f s for a rank (a hang or a dead rank)\n", timeout_s);
      return 0;
    }
    tb_sleep_s(100e-6);
  }
  return 1;
}

/* ==== the calls: one lockstep sequence from the seed ==== */

typedef struct call {
  size_t off;        /* the rows at BUF_OFF + off, the residual at RES_OFF + off, ... */
  size_t row_bytes;
  size_t rows;       /* the rows, or the bound of a count word */
  int counted;       /* a count word (COUNT_OFF + 4 * the call's index in its batch) */
  uint32_t count;    /* its value */
  int dtype, algo;   /* MDR_ARP_ dtype; ONE_SHOT, TWO_SHOT or AUTO (counted) */
  int residual, norm, edges;
  float eps;         /* the fused RMSNorm's epsilon */
} call;

static size_t esize(int dt) { return dt == MDR_ARP_FP32 ? 4 : 2; }
static size_t rows_now(const call *c) { return c->counted && c->count < c->rows ? c->count : c->rows; }
static size_t bound_bytes(const call *c) { return c->rows * c->row_bytes; }
static const char *algo_name(int a) {
  return a == MDR_ARP_ONE_SHOT ? "one-shot" : a == MDR_ARP_TWO_SHOT ? "two-shot" : "counted AUTO";
}
static const char *dt_name(int dt) { return dt == MDR_ARP_BF16 ? "bf16" : dt == MDR_ARP_FP16 ? "fp16" : "fp32"; }

static call random_call(uint64_t *rng) {
  call c;
  memset(&c, 0, sizeof c);
  c.dtype = (int)tb_rng_range(rng, 0, 2);
  c.residual = (int)(tb_rng_next(rng) & 1u);
  const uint64_t kind = tb_rng_range(rng, 0, 99);
  c.algo = kind < 40 ? MDR_ARP_ONE_SHOT : kind < 70 ? MDR_ARP_TWO_SHOT : MDR_ARP_AUTO;
  c.counted = c.algo == MDR_ARP_AUTO || tb_rng_range(rng, 0, 3) == 0;
  c.row_bytes = 16u * (size_t)(tb_rng_range(rng, 0, 1) ? tb_rng_range(rng, 1, 16) : tb_rng_range(rng, 1, 256));
  c.rows = (size_t)(tb_rng_range(rng, 0, 2) ? tb_rng_range(rng, 1, 8) : tb_rng_range(rng, 1, 64));
  if (c.algo == MDR_ARP_AUTO && tb_rng_range(rng, 0, 19) == 0) {
    /* a bound past the one-shot cap (2 MiB = 128 rows of 16 KiB): the
     * kernel picks one-shot at a count of 128, two-shot above */
    c.row_bytes = 16384;
    c.rows = 129 + (size_t)tb_rng_range(rng, 0, 2);
    c.count = (uint32_t)tb_rng_range(rng, 127, 131);
  } else if (c.counted) {
    c.count = tb_rng_range(rng, 0, 9) == 0 ? 0u : (uint32_t)tb_rng_range(rng, 0, c.rows + 2);
  }
  if (!c.counted && tb_rng_range(rng, 0, 19) == 0) c.rows = 0; /* tokens 0 */
  c.edges = tb_rng_range(rng, 0, 9) == 0;
  if (c.residual && c.dtype != MDR_ARP_FP32 && tb_rng_range(rng, 0, 5) == 0) {
    c.norm = 1;
    c.eps = tb_rng_range(rng, 0, 1) ? 1e-6f : 1e-5f;
  }
  return c;
}

typedef struct batch {
  call calls[BATCH];
  uint32_t counts[BATCH]; /* the count words (the same on every rank) */
  uint64_t first;         /* the sequence index of calls[0] */
  int n;
  size_t used;            /* bytes of each area in use, guards included */
} batch;

typedef struct sequence {
  uint64_t rng, next, total;
  int pending;            /* `held` did not fit the last batch */
  call held;
} sequence;

/* The next batch of the sequence: up to BATCH calls that fit in AREA. */
static int next_batch(sequence *s, batch *b) {
  b->n = 0;
  b->used = 0;
  b->first = s->next;
  while (b->n < BATCH && s->next < s->total) {
    if (!s->pending) s->held = random_call(&s->rng);
    s->pending = 1;
    const size_t off = (b->used + 255u) & ~(size_t)255u, end = off + bound_bytes(&s->held) + GUARD;
    if (end > AREA) break;
    b->calls[b->n] = s->held;
    b->calls[b->n].off = off;
    b->counts[b->n] = s->held.count;
    b->n++;
    b->used = end;
    s->pending = 0;
    s->next++;
  }
  return b->n;
}

/* ==== inputs: a pure function of (seed, call, rank, part) ==== */

enum { PART_ROWS, PART_RES, PART_WEIGHT };

static uint64_t input_seed(uint64_t seed, uint64_t index, int rank, int part) {
  uint64_t s = seed;
  uint64_t h = tb_rng_next(&s) ^ index;
  h = tb_rng_next(&h) ^ ((uint64_t)rank << 8 | (uint64_t)part);
  return tb_rng_next(&h);
}

/* Random finite elements (random sign and fraction, exponent in [-6, 5]:
 * sums of a few stay normal and ties are common) into p[0, ne). */
static void fill_elems(unsigned char *p, size_t ne, int dt, uint64_t rng) {
  for (size_t e = 0; e < ne; e++) {
    const uint64_t x = tb_rng_next(&rng);
    const uint32_t sign = (uint32_t)(x & 1u), ex = (uint32_t)((x >> 1) & 15u) % 12u;
    uint32_t v;
    if (dt == MDR_ARP_BF16) v = (sign << 15) | ((ex + 127u - 6u) << 7) | (uint32_t)((x >> 5) & 0x7fu);
    else if (dt == MDR_ARP_FP16) v = (sign << 15) | ((ex + 15u - 6u) << 10) | (uint32_t)((x >> 5) & 0x3ffu);
    else v = (sign << 31) | ((ex + 127u - 6u) << 23) | (uint32_t)((x >> 5) & 0x7fffffu);
    ar_elem_set_bits(p, e, dt, v);
  }
}

/* Edge elements at the start of row 0 of some calls: the one-shot's
 * arrival sentinel (all-ones, a NaN, which must travel as another NaN)
 * from rank 0, -0 everywhere, the largest finite value everywhere (the sum
 * overflows to inf), the smallest subnormal everywhere. */
enum { N_EDGE = 4 };
static uint32_t edge_bits(int dt, int rank, int e) {
  const int fp32 = dt == MDR_ARP_FP32;
  switch (e) {
    case 0: return rank == 0 ? (fp32 ? 0xffffffffu : 0xffffu) : ar_float_bits(1.0f, dt);
    case 1: return fp32 ? 0x80000000u : 0x8000u;
    case 2: return dt == MDR_ARP_BF16 ? 0x7f7fu : dt == MDR_ARP_FP16 ? 0x7bffu : 0x7f7fffffu;
    default: return 1u;
  }
}

/* Rank r's rows of call `c` (sequence index i), all c->rows of them. */
static void rank_rows(unsigned char *p, const call *c, uint64_t seed, uint64_t i, int r) {
  const size_t ne = bound_bytes(c) / esize(c->dtype);
  fill_elems(p, ne, c->dtype, input_seed(seed, i, r, PART_ROWS));
  if (c->edges)
    for (int e = 0; e < N_EDGE && (size_t)e < ne; e++)
      ar_elem_set_bits(p, (size_t)e, c->dtype, edge_bits(c->dtype, r, e));
}

/* ==== one rank ==== */

typedef struct rank_ctx {
  ctl_page *ctl;
  int n, rank, sms;
  uint64_t seed;
  double timeout_s;
  cudaStream_t stream;
  char *slab, *peer[MAXR];
  uint32_t *words, *words_dev;   /* MDR_ARP_HOST_WORDS(n), pinned and mapped */
  unsigned char *in, *got;       /* 4 * AREA: rows, residual, norm, weights as uploaded / as downloaded */
  uint64_t deadline_ns;          /* the watchdog's deadline (CLOCK_MONOTONIC ns); 0: none */
  uint32_t stop, timed_out;
  uint64_t wrong;
  char first_wrong[300];
} rank_ctx;

static int cu_ok(const rank_ctx *x, cudaError_t e, const char *what) {
  if (e != cudaSuccess)
    fprintf(stderr, "ar_gpu_procs: rank %d: %s: %s (%s)\n", x->rank, what, cudaGetErrorName(e), cudaGetErrorString(e));
  return e == cudaSuccess;
}
/* In a function of a rank_ctx *x that returns 0 on a failure. */
#define CU(expr)                                 \
  do {                                           \
    if (!cu_ok(x, (expr), #expr)) return 0;      \
  } while (0)

/* The watchdog: past the batch's deadline, or when a sibling failed,
 * raise this process's host abort word, which the kernels poll (the main
 * thread may be inside a launch that returns only when its kernel ends). */
static void *watchdog(void *arg) {
  rank_ctx *x = arg;
  while (!load32(&x->stop)) {
    const uint64_t dl = __atomic_load_n(&x->deadline_ns, __ATOMIC_SEQ_CST);
    const int late = dl && tb_now_s() * 1e9 > (double)dl;
    if ((late || load32(&x->ctl->failed)) && !load32(&x->words[MDR_ARP_HOST_ABORT])) {
      if (late) {
        store32(&x->timed_out, 1);
        store32(&x->ctl->failed, 1);
      }
      store32(&x->words[MDR_ARP_HOST_ABORT], 1);
    }
    tb_sleep_s(1e-3);
  }
  return NULL;
}

/* The call of this rank as tests/test_ar_gpu.c's h_call (and
 * src/all_reduce.c, src/comm_nccl.c) fills it. */
static mdr_ar_call fill_call(const rank_ctx *x, const call *c, int index, int pdl) {
  mdr_ar_call k;
  memset(&k, 0, sizeof k);
  k.buf_off = BUF_OFF + c->off;
  k.res_off = c->residual ? RES_OFF + c->off : MDR_ARP_NO_RESIDUAL;
  k.row_bytes = c->row_bytes;
  k.rows = c->rows;
  k.count_ptr = c->counted ? (const uint32_t *)(x->slab + COUNT_OFF) + index : NULL;
  k.one_shot_max = MDR_ARP_ONE_SHOT_MAX_BYTES;
  k.dtype = c->dtype;
  k.algo = c->algo;
  for (int q = 0; q < x->n; q++) k.peer[q] = x->peer[q];
  k.self = x->slab;
  k.region_off = REGION_OFF;
  k.slot_cap = MDR_ARP_ONE_SHOT_MAX_BYTES;
  k.rank = x->rank;
  k.nranks = x->n;
  /* the ar_gpu suite's cap: every rank's blocks resident at once, two
   * kernels a rank under programmatic dependent launch (needed where the
   * ranks' kernels run concurrently, as under MPS; harmless time-sliced) */
  const int cap = x->sms / (x->n * (pdl ? 2 : 1));
  k.max_blocks = cap > MDR_ARP_MAX_BLOCKS ? MDR_ARP_MAX_BLOCKS : cap < 1 ? 1 : cap;
  k.pdl = pdl;
  k.timeout_ns = 0; /* the host's deadline ends a hang (the watchdog) */
  k.host_abort = &x->words_dev[MDR_ARP_HOST_ABORT];
  k.host_report = &x->words_dev[MDR_ARP_HOST_RANKS0 + (size_t)x->rank * MDR_ARP_HOST_REPORT];
  if (c->norm) {
    k.norm_weight = x->slab + WGT_OFF + c->off;
    k.norm_off = NORM_OFF + c->off;
    k.norm_eps = c->eps;
  }
  return k;
}

/* This rank's image of the batch: poison everywhere, its inputs at the
 * calls' offsets (rows, residual rows, a weight row), zero weights elsewhere. */
static void build_inputs(rank_ctx *x, const batch *b) {
  const size_t used16 = (b->used + 15u) & ~(size_t)15u;
  uint64_t p = input_seed(x->seed, b->first, x->rank, 7);
  for (int part = 0; part < 3; part++) memset(x->in + (size_t)part * AREA, (int)(tb_rng_next(&p) & 0xffu), used16);
  memset(x->in + 3 * (size_t)AREA, 0, used16);
  for (int k = 0; k < b->n; k++) {
    const call *c = &b->calls[k];
    const uint64_t i = b->first + (uint64_t)k;
    rank_rows(x->in + c->off, c, x->seed, i, x->rank);
    fill_elems(x->in + AREA + c->off, bound_bytes(c) / esize(c->dtype), c->dtype,
               input_seed(x->seed, i, x->rank, PART_RES));
    if (c->norm)
      fill_elems(x->in + 3 * (size_t)AREA + c->off, c->row_bytes / esize(c->dtype), c->dtype,
                 input_seed(x->seed, i, x->rank, PART_WEIGHT));
  }
}

static int same(uint32_t a, uint32_t b, int dt) {
  return a == b || (isnan(ar_bits_float(a, dt)) && isnan(ar_bits_float(b, dt)));
}

/* "call i (algorithm, dtype, rows of bytes, ...)" */
static const char *describe(char *out, size_t cap, const batch *b, int k) {
  const call *c = &b->calls[k];
  char count[32] = "";
  if (c->counted) snprintf(count, sizeof count, ", count word %u", c->count);
  snprintf(out, cap, "call %llu (%s, %s, %zu rows of %zu B%s%s%s)", (unsigned long long)(b->first + (uint64_t)k),
           algo_name(c->algo), dt_name(c->dtype), c->rows, c->row_bytes, c->residual ? ", residual" : "",
           c->norm ? ", norm" : "", count);
  return out;
}

static void note_wrong(rank_ctx *x, const batch *b, int k, const char *what, size_t at, uint32_t got, uint32_t want) {
  char d[160];
  if (x->wrong++ == 0)
    snprintf(x->first_wrong, sizeof x->first_wrong, "%s: rank %d %s %zu is 0x%x, want 0x%x",
             describe(d, sizeof d, b, k), x->rank, what, at, got, want);
}

/* Bytes [from, to) of area `part` as uploaded. */
static void check_bytes(rank_ctx *x, const batch *b, int k, int part, size_t from, size_t to, const char *what) {
  const unsigned char *g = x->got + (size_t)part * AREA, *w = x->in + (size_t)part * AREA;
  if (from >= to || memcmp(g + from, w + from, to - from) == 0) return;
  for (size_t i = from; i < to; i++)
    if (g[i] != w[i]) note_wrong(x, b, k, what, i, g[i], w[i]);
}

/* Every call's reduced elements against the reference, and every other
 * byte of the used areas against the upload. */
static void check_batch(rank_ctx *x, const batch *b) {
  static const char *const untouched[3] = {"row byte past the count, at area offset",
                                           "residual byte outside the sum, at area offset",
                                           "norm byte outside the norm, at area offset"};
  size_t pos = 0; /* bytes before pos are checked */
  for (int k = 0; k < b->n; k++) {
    const call *c = &b->calls[k];
    const int dt = c->dtype;
    const size_t es = esize(dt), red = rows_now(c) * c->row_bytes / es, row_e = c->row_bytes / es;
    for (int part = 0; part < 3; part++) check_bytes(x, b, k, part, pos, c->off, "gap byte between calls, at area offset");
    unsigned char *peer_rows = malloc(bound_bytes(c) + 1);
    float *acc = malloc((red + 1) * sizeof *acc);
    uint32_t *res = malloc((red + 1) * sizeof *res);
    if (!peer_rows || !acc || !res) abort();
    for (int r = 0; r < x->n; r++) { /* in rank order: acc = x_0; acc += x_r */
      rank_rows(peer_rows, c, x->seed, b->first + (uint64_t)k, r);
      for (size_t e = 0; e < red; e++) {
        const float v = ar_bits_float(ar_elem_bits(peer_rows, e, dt), dt);
        acc[e] = r == 0 ? v : acc[e] + v;
      }
    }
    const unsigned char *got = x->got + c->off, *in = x->in + c->off;
    for (size_t e = 0; e < red; e++) {
      const uint32_t sum = ar_float_bits(acc[e], dt), g = ar_elem_bits(got, e, dt);
      if (!same(g, sum, dt)) note_wrong(x, b, k, "sum element", e, g, sum);
      if (!c->residual) continue;
      res[e] = ar_float_bits(ar_bits_float(ar_elem_bits(in + AREA, e, dt), dt) + ar_bits_float(sum, dt), dt);
      const uint32_t gr = ar_elem_bits(got + AREA, e, dt);
      if (!same(gr, res[e], dt)) note_wrong(x, b, k, "residual element", e, gr, res[e]);
    }
    if (c->norm && red) {
      uint32_t *w = malloc(row_e * sizeof *w), *o = malloc(row_e * sizeof *o);
      if (!w || !o) abort();
      for (size_t e = 0; e < row_e; e++) w[e] = ar_elem_bits(in + 3 * (size_t)AREA, e, dt);
      for (size_t row = 0; row * row_e < red; row++) {
        nref_row(dt == MDR_ARP_BF16 ? 0 : 1, res + row * row_e, w, row_e, c->eps, o);
        for (size_t e = 0; e < row_e; e++) {
          const uint32_t g = ar_elem_bits(got + 2 * (size_t)AREA, row * row_e + e, dt);
          if (!same(g, o[e], dt)) note_wrong(x, b, k, "norm element", row * row_e + e, g, o[e]);
        }
      }
      free(w);
      free(o);
    }
    free(peer_rows);
    free(acc);
    free(res);
    /* rows past the count and the guard past the bound as uploaded; the
     * residual and norm rows too where the call has none */
    const size_t end = c->off + bound_bytes(c) + GUARD;
    const size_t written[3] = {red * es, c->residual ? red * es : 0, c->norm ? red * es : 0};
    for (int part = 0; part < 3; part++) check_bytes(x, b, k, part, c->off + written[part], end, untouched[part]);
    pos = end;
  }
}

/* Where this rank's kernels waited when they gave up (the report words). */
static void print_report(const rank_ctx *x, const batch *b, int pdl) {
  const uint32_t *rep = &x->words[MDR_ARP_HOST_RANKS0 + (size_t)x->rank * MDR_ARP_HOST_REPORT];
  const uint32_t cause = load32(&rep[MDR_ARP_REP_CAUSE]);
  fprintf(stderr, "ar_gpu_procs: rank %d: cause %u (%s), wait %u (%s), peer %u, block %u, calls counter %u\n",
          x->rank, cause, cause ? mdr_arp_cause_name(cause) : "none reported", rep[MDR_ARP_REP_WAIT],
          mdr_arp_wait_name(rep[MDR_ARP_REP_WAIT]), rep[MDR_ARP_REP_PEER], rep[MDR_ARP_REP_BLOCK],
          rep[MDR_ARP_REP_CALL]);
  char d[160];
  for (int k = 0; x->rank == 0 && k < b->n; k++)
    fprintf(stderr, "ar_gpu_procs: batch of %llu, pdl %d: %s\n", (unsigned long long)b->first, pdl,
            describe(d, sizeof d, b, k));
}

/* One batch: upload, meet, launch, wait, download, check. 0 on a failure. */
static int run_batch(rank_ctx *x, const batch *b, int pdl) {
  const size_t used16 = (b->used + 15u) & ~(size_t)15u;
  build_inputs(x, b);
  for (int part = 0; part < 4; part++)
    CU(cudaMemcpy(x->slab + (size_t)part * AREA, x->in + (size_t)part * AREA, used16, cudaMemcpyHostToDevice));
  CU(cudaMemcpy(x->slab + COUNT_OFF, b->counts, (size_t)b->n * 4u, cudaMemcpyHostToDevice));
  /* a pageable copy may return before it lands: every rank's inputs are in
   * place before any peer's kernel reads or writes them */
  CU(cudaDeviceSynchronize());
  if (!barrier(x->ctl, x->n, x->timeout_s)) return 0;
  __atomic_store_n(&x->deadline_ns, (uint64_t)((tb_now_s() + x->timeout_s) * 1e9), __ATOMIC_SEQ_CST);
  int launched = 1;
  for (int k = 0; k < b->n && launched; k++) {
    const mdr_ar_call kc = fill_call(x, &b->calls[k], k, pdl);
    const int e = mdr_cuda_ar_launch(&kc, x->stream);
    launched = cu_ok(x, (cudaError_t)e, "mdr_cuda_ar_launch");
  }
  cudaError_t q;
  while ((q = cudaStreamQuery(x->stream)) == cudaErrorNotReady && !load32(&x->words[MDR_ARP_HOST_ABORT]))
    tb_sleep_s(50e-6);
  __atomic_store_n(&x->deadline_ns, 0, __ATOMIC_SEQ_CST);
  if (q == cudaErrorNotReady) { /* aborted: the kernels leave within ms of the word */
    const double until = tb_now_s() + 10.0;
    while ((q = cudaStreamQuery(x->stream)) == cudaErrorNotReady && tb_now_s() < until) tb_sleep_s(1e-3);
    fprintf(stderr, "ar_gpu_procs: rank %d: batch at call %llu %s; the abort word was raised%s\n", x->rank,
            (unsigned long long)b->first,
            load32(&x->timed_out) ? "outlasted its deadline (a hang)" : "stopped: another rank failed",
            q == cudaErrorNotReady ? ", and the kernels did not end within 10 s" : "");
    print_report(x, b, pdl);
    return 0;
  }
  CU(q);
  if (!launched) return 0;
  if (load32(&x->words[MDR_ARP_HOST_RANKS0 + (size_t)x->rank * MDR_ARP_HOST_REPORT + MDR_ARP_REP_CAUSE])) {
    fprintf(stderr, "ar_gpu_procs: rank %d: a kernel gave up without an abort\n", x->rank);
    print_report(x, b, pdl);
    store32(&x->ctl->failed, 1);
    return 0;
  }
  for (int part = 0; part < 3; part++)
    CU(cudaMemcpy(x->got + (size_t)part * AREA, x->slab + (size_t)part * AREA, used16, cudaMemcpyDeviceToHost));
  check_batch(x, b);
  return 1;
}

/* This rank's slab, host words and stream; every peer's slab opened; the
 * comm region set up before any rank's kernel runs. 1 on success. */
static int rank_setup(rank_ctx *x) {
  ctl_page *ctl = x->ctl;
  CU(cudaSetDevice(0));
  CU(cudaDeviceGetAttribute(&x->sms, cudaDevAttrMultiProcessorCount, 0));
  CU(cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking));
  CU(cudaMalloc((void **)&x->slab, SLAB_BYTES(x->n)));
  CU(cudaMemset(x->slab, 0, SLAB_BYTES(x->n)));
  const size_t wb = MDR_ARP_HOST_WORDS(x->n) * sizeof(uint32_t);
  CU(cudaHostAlloc((void **)&x->words, wb, cudaHostAllocMapped | cudaHostAllocPortable));
  memset(x->words, 0, wb);
  CU(cudaHostGetDevicePointer((void **)&x->words_dev, x->words, 0));
  CU(cudaIpcGetMemHandle(&ctl->handle[x->rank], x->slab));
  if (!barrier(ctl, x->n, x->timeout_s)) return 0;
  for (int q = 0; q < x->n; q++) {
    if (q == x->rank) x->peer[q] = x->slab;
    else CU(cudaIpcOpenMemHandle((void **)&x->peer[q], ctl->handle[q], cudaIpcMemLazyEnablePeerAccess));
  }
  const int ri = mdr_cuda_ar_region_init(x->slab + REGION_OFF, x->n, MDR_ARP_ONE_SHOT_MAX_BYTES, x->stream);
  CU((cudaError_t)ri);
  CU(cudaStreamSynchronize(x->stream));
  return barrier(ctl, x->n, x->timeout_s); /* every region set up before any kernel */
}

/* After every rank's last kernel: no rank unmaps or frees a slab a peer's
 * kernel may still reach. 1 on success. */
static int rank_teardown(rank_ctx *x) {
  if (!barrier(x->ctl, x->n, x->timeout_s)) return 0;
  for (int q = 0; q < x->n; q++)
    if (q != x->rank) CU(cudaIpcCloseMemHandle(x->peer[q]));
  if (!barrier(x->ctl, x->n, x->timeout_s)) return 0;
  CU(cudaStreamDestroy(x->stream));
  CU(cudaFree(x->slab));
  CU(cudaFreeHost(x->words));
  return 1;
}

/* Set up, run every batch, tear down. 1 on success (wrong values are
 * counted, not a failure of the rank). */
static int rank_body(rank_ctx *x, uint64_t total) {
  ctl_page *ctl = x->ctl;
  if (!rank_setup(x)) return 0;
  pthread_t dog;
  if (pthread_create(&dog, NULL, watchdog, x) != 0) return 0;
  sequence s = {x->seed ^ 0x5e9e9ce5u, 0, total, 0, {0}};
  static batch b;
  int ok = 1;
  for (int nb = 0; ok && next_batch(&s, &b); nb++) {
    ok = run_batch(x, &b, nb & 1);
    for (int k = 0; ok && x->rank == 0 && k < b.n; k++) { /* rank 0 keeps the tally */
      const size_t bytes = rows_now(&b.calls[k]) * b.calls[k].row_bytes;
      const int one = mdr_arp_runs_one_shot(b.calls[k].algo, bytes, MDR_ARP_ONE_SHOT_MAX_BYTES);
      uint64_t *t = !bytes ? &ctl->empty : one ? &ctl->one : &ctl->two;
      __atomic_add_fetch(t, 1u, __ATOMIC_SEQ_CST);
      __atomic_store_n(&ctl->done, b.first + (uint64_t)k + 1, __ATOMIC_SEQ_CST);
    }
  }
  store32(&x->stop, 1);
  pthread_join(dog, NULL);
  if (!ok) return 0;
  return rank_teardown(x);
}

/* ==== --destroy-rank R: a rank destroyed while its peers wait ==== */

enum {
  RAISE_AFTER_MS = 300, /* rank R raises this long after the peers start launching */
  CHECK_AT_MS = 150,    /* when a peer checks that its call is still waiting */
  END_WITHIN_MS = 100   /* a peer's call must end this soon after the raise */
};

/* Wait up to `s` seconds for the stream: its cudaStreamQuery result then
 * (cudaErrorNotReady: still running). */
static cudaError_t stream_wait(cudaStream_t q, double s) {
  const double until = tb_now_s() + s;
  cudaError_t e;
  while ((e = cudaStreamQuery(q)) == cudaErrorNotReady && tb_now_s() < until) tb_sleep_s(20e-6);
  return e;
}

/* Rank R: instead of its calls, what a rank that goes away does to peers
 * beyond its process (src/comm_nccl_window.c): raise the abort word of
 * every other rank's region through its own mappings of their slabs. */
static int destroyed_rank(rank_ctx *x) {
  if (!barrier(x->ctl, x->n, x->timeout_s)) return 0; /* the peers launch now */
  tb_sleep_s(RAISE_AFTER_MS * 1e-3);
  char *others[MAXR];
  for (int q = 0; q < x->n; q++) others[q] = q == x->rank ? NULL : x->peer[q];
  const double t0 = tb_now_s();
  __atomic_store_n(&x->ctl->raised_ns, (uint64_t)(t0 * 1e9), __ATOMIC_SEQ_CST);
  const int e = mdr_cuda_ar_raise_abort(others, x->n, REGION_OFF, x->stream);
  const double ms = (tb_now_s() - t0) * 1e3;
  CU((cudaError_t)e);
  printf("ar_gpu_procs: rank %d (destroyed): raised %d peers' abort words in %.3f ms\n", x->rank, x->n - 1, ms);
  fflush(stdout);
  return 1;
}

/* A peer of rank R: a one-shot call R never makes (bf16, 64 rows of 4 KiB
 * with a residual: several blocks wait), launched before R goes away. It
 * must still wait when R has not raised yet, end within END_WITHIN_MS of
 * the raise with cause MDR_ARP_PEER (through the region's word: this
 * rank's host word stays down), leave its rows, residual rows and counters
 * as they were, and leave its stream usable. */
static int waiting_peer(rank_ctx *x, int victim) {
  static batch b;
  memset(&b, 0, sizeof b);
  b.n = 1;
  b.calls[0] = (call){.off = 0, .row_bytes = 4096, .rows = 64, .dtype = MDR_ARP_BF16, .algo = MDR_ARP_ONE_SHOT,
                      .residual = 1};
  b.used = bound_bytes(&b.calls[0]) + GUARD;
  const size_t used16 = (b.used + 15u) & ~(size_t)15u;
  build_inputs(x, &b);
  for (int part = 0; part < 4; part++)
    CU(cudaMemcpy(x->slab + (size_t)part * AREA, x->in + (size_t)part * AREA, used16, cudaMemcpyHostToDevice));
  mdr_arp_block before[MDR_ARP_MAX_BLOCKS], after[MDR_ARP_MAX_BLOCKS];
  CU(cudaMemcpy(before, x->slab + REGION_OFF + MDR_ARP_STATE_OFF, sizeof before, cudaMemcpyDeviceToHost));
  CU(cudaDeviceSynchronize());
  if (!barrier(x->ctl, x->n, x->timeout_s)) return 0;
  const double t_start = tb_now_s();
  const mdr_ar_call kc = fill_call(x, &b.calls[0], 0, 0);
  CU((cudaError_t)mdr_cuda_ar_launch(&kc, x->stream));
  const double left = t_start + CHECK_AT_MS * 1e-3 - tb_now_s();
  if (left > 0) tb_sleep_s(left);
  const int waited = cudaStreamQuery(x->stream) == cudaErrorNotReady;
  const int raised_then = __atomic_load_n(&x->ctl->raised_ns, __ATOMIC_SEQ_CST) != 0;
  cudaError_t q = stream_wait(x->stream, 5.0);
  const double t_end = tb_now_s();
  const uint64_t raised_ns = __atomic_load_n(&x->ctl->raised_ns, __ATOMIC_SEQ_CST);
  if (q == cudaErrorNotReady) { /* never ended: the host word ends it, and the run fails */
    store32(&x->words[MDR_ARP_HOST_ABORT], 1);
    q = stream_wait(x->stream, 10.0);
    fprintf(stderr, "ar_gpu_procs: rank %d: its call did not end within 5 s of rank %d's raise%s\n", x->rank, victim,
            q == cudaErrorNotReady ? " (nor within 10 s of its own host abort word)" : "");
    print_report(x, &b, 0);
    return 0;
  }
  CU(q);
  int ok = 1;
  if (!waited && !raised_then) {
    fprintf(stderr, "ar_gpu_procs: rank %d: its call ended before rank %d raised the abort words\n", x->rank, victim);
    ok = 0;
  }
  const double ms = raised_ns ? (t_end - (double)raised_ns * 1e-9) * 1e3 : -1.0;
  if (ms < 0 || ms > END_WITHIN_MS) {
    fprintf(stderr, "ar_gpu_procs: rank %d: its call ended %.2f ms after rank %d's raise (want 0 to %d)\n", x->rank,
            ms, victim, END_WITHIN_MS);
    ok = 0;
  }
  const uint32_t *rep = &x->words[MDR_ARP_HOST_RANKS0 + (size_t)x->rank * MDR_ARP_HOST_REPORT];
  const uint32_t cause = load32(&rep[MDR_ARP_REP_CAUSE]);
  if (cause != MDR_ARP_PEER || load32(&x->words[MDR_ARP_HOST_ABORT])) {
    fprintf(stderr, "ar_gpu_procs: rank %d: cause %u (%s), want %u (%s)%s\n", x->rank, cause,
            cause ? mdr_arp_cause_name(cause) : "none reported", (unsigned)MDR_ARP_PEER,
            mdr_arp_cause_name(MDR_ARP_PEER), load32(&x->words[MDR_ARP_HOST_ABORT]) ? "; the host word was raised" : "");
    ok = 0;
  }
  for (int part = 0; part < 3; part++)
    CU(cudaMemcpy(x->got + (size_t)part * AREA, x->slab + (size_t)part * AREA, used16, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(after, x->slab + REGION_OFF + MDR_ARP_STATE_OFF, sizeof after, cudaMemcpyDeviceToHost));
  static const char *const area[3] = {"rows", "residual rows", "norm rows"};
  for (int part = 0; part < 3; part++)
    if (memcmp(x->got + (size_t)part * AREA, x->in + (size_t)part * AREA, used16) != 0) {
      fprintf(stderr, "ar_gpu_procs: rank %d: its %s were touched\n", x->rank, area[part]);
      ok = 0;
    }
  if (memcmp(before, after, sizeof before) != 0) {
    fprintf(stderr, "ar_gpu_procs: rank %d: its protocol counters moved\n", x->rank);
    ok = 0;
  }
  /* the stream is usable afterwards */
  CU(cudaMemsetAsync(x->slab + COUNT_OFF, 0, 4096, x->stream));
  q = stream_wait(x->stream, 2.0);
  if (q != cudaSuccess) {
    fprintf(stderr, "ar_gpu_procs: rank %d: its stream is not usable after the give-up (%s)\n", x->rank,
            cudaGetErrorName(q));
    (void)cudaGetLastError();
    ok = 0;
  }
  printf("ar_gpu_procs: rank %d: ended %.2f ms after rank %d raised the abort words (cause %s, %s, block %u)%s\n",
         x->rank, ms, victim, cause ? mdr_arp_cause_name(cause) : "none", mdr_arp_wait_name(rep[MDR_ARP_REP_WAIT]),
         rep[MDR_ARP_REP_BLOCK], ok ? "; rows and counters untouched, stream usable" : "; FAILED");
  fflush(stdout);
  return ok;
}

/* --destroy-rank R: set up as for the calls, then rank R goes away while
 * every other rank waits in a call; then the usual teardown. */
static int destroy_body(rank_ctx *x, int victim) {
  if (!rank_setup(x)) return 0;
  const int ok = x->rank == victim ? destroyed_rank(x) : waiting_peer(x, victim);
  if (!ok) store32(&x->ctl->failed, 1); /* the others leave their barriers */
  return rank_teardown(x) && ok;
}

/* A child: exit code 0 (ran; wrong values are on the page), 1 (failed),
 * SKIP (no device). */
/* --plant-oob 1: the last rank reads past a 64-byte allocation once, before
 * its calls: the control that shows compute-sanitizer watches the ranks
 * (under memcheck the run must then fail; plainly nothing notices). */
static int g_plant;

static void plant_oob(int rank) {
  uint32_t *ids = NULL;
  uint64_t *acc = NULL;
  if (cudaMalloc((void **)&ids, 64) != cudaSuccess || cudaMalloc((void **)&acc, 16) != cudaSuccess) return;
  (void)cudaMemset(ids, 0, 64);
  (void)cudaMemset(acc, 0, 16);
  printf("ar_gpu_procs: rank %d: reading 4 KiB from a 64-byte allocation (planted; the tool must report it)\n", rank);
  fflush(stdout);
  (void)tb_cuda_accumulate(NULL, ids, 1024, acc);
  (void)cudaDeviceSynchronize();
  (void)cudaGetLastError();
  (void)cudaFree(ids);
  (void)cudaFree(acc);
}

static int rank_main(ctl_page *ctl, int n, int rank, uint64_t seed, uint64_t total, double timeout_s, int victim) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count < 1) {
    if (rank == 0)
      snprintf(ctl->skip_reason, sizeof ctl->skip_reason, "%s", e != cudaSuccess ? cudaGetErrorName(e) : "0 devices");
    store32(&ctl->skipped, 1);
    return SKIP;
  }
  static rank_ctx x;
  memset(&x, 0, sizeof x);
  x.ctl = ctl;
  x.n = n;
  x.rank = rank;
  x.seed = seed;
  x.timeout_s = timeout_s;
  x.in = malloc(4 * (size_t)AREA);
  x.got = malloc(4 * (size_t)AREA);
  if (!x.in || !x.got) return 1;
  (void)ar_ref_bf16_table();
  if (g_plant && rank == n - 1) plant_oob(rank);
  const int ok = victim >= 0 ? destroy_body(&x, victim) : rank_body(&x, total);
  ctl->wrong[rank] = x.wrong;
  if (x.wrong) memcpy(ctl->first_wrong[rank], x.first_wrong, sizeof x.first_wrong);
  if (!ok) store32(&ctl->failed, 1);
  free(x.in);
  free(x.got);
  return ok ? 0 : 1;
}

/* ==== the parent: never touches CUDA ==== */

static int usage(void) {
  fprintf(stderr, "usage: ar_gpu_procs [--ranks N (2..8)] [--calls C] [--seed S] [--timeout-s T] [--plant-oob 0|1]\n"
                  "                    [--destroy-rank R]\n");
  return 2;
}

int main(int argc, char **argv) {
  int n = 2, rank = -1, ctl_fd = -1, victim = -1;
  uint64_t calls = 300, seed = 1;
  double timeout_s = 60;
  for (int i = 1; i < argc; i++) {
    if (i + 1 >= argc) return usage();
    char *end = NULL;
    errno = 0;
    const unsigned long long v = strtoull(argv[i + 1], &end, 0);
    if (errno || !end || *end || end == argv[i + 1]) return usage();
    if (!strcmp(argv[i], "--ranks")) n = (int)(v > 1000 ? 0 : v);
    else if (!strcmp(argv[i], "--calls")) calls = v;
    else if (!strcmp(argv[i], "--seed")) seed = v;
    else if (!strcmp(argv[i], "--timeout-s")) timeout_s = (double)v;
    else if (!strcmp(argv[i], "--rank")) rank = (int)(v > 1000 ? 1000 : v); /* a child (below) */
    else if (!strcmp(argv[i], "--ctl-fd")) ctl_fd = v > 1000000 ? -1 : (int)v;
    else if (!strcmp(argv[i], "--plant-oob")) g_plant = v != 0;
    else if (!strcmp(argv[i], "--destroy-rank")) victim = (int)(v > 1000 ? 1000 : v);
    else return usage();
    i++;
  }
  if (n < 2 || n > MAXR || timeout_s < 1 || victim >= n) return usage();
  if (rank >= 0) { /* a rank, executed by the parent below: its page is ctl_fd */
    if (rank >= n || ctl_fd < 0) return usage();
    ctl_page *page = mmap(NULL, sizeof *page, PROT_READ | PROT_WRITE, MAP_SHARED, ctl_fd, 0);
    if (page == MAP_FAILED) {
      perror("ar_gpu_procs: mmap of the control page");
      return 1;
    }
    return rank_main(page, n, rank, seed, calls, timeout_s, victim);
  }

  const int fd = memfd_create("ar_gpu_procs", 0); /* no MFD_CLOEXEC: the ranks inherit it */
  if (fd < 0 || ftruncate(fd, (off_t)sizeof(ctl_page)) != 0) {
    perror("ar_gpu_procs: memfd_create");
    return 1;
  }
  ctl_page *ctl = mmap(NULL, sizeof *ctl, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (ctl == MAP_FAILED) {
    perror("ar_gpu_procs: mmap");
    return 1;
  }
  memset(ctl, 0, sizeof *ctl);
  char a_n[24], a_calls[24], a_seed[24], a_t[24], a_fd[24], a_rank[24], a_victim[24];
  snprintf(a_n, sizeof a_n, "%d", n);
  snprintf(a_calls, sizeof a_calls, "%llu", (unsigned long long)calls);
  snprintf(a_seed, sizeof a_seed, "%llu", (unsigned long long)seed);
  snprintf(a_t, sizeof a_t, "%.0f", timeout_s);
  snprintf(a_fd, sizeof a_fd, "%d", fd);
  snprintf(a_victim, sizeof a_victim, "%d", victim);
  char *a_plant = g_plant ? "1" : "0";
  const pid_t parent = getpid();
  pid_t pid[MAXR] = {0};
  int code[MAXR] = {0}, live = 0; /* -1 while rank r runs */
  fflush(NULL); /* nothing buffered is written twice */
  for (int r = 0; r < n; r++) {
    pid[r] = fork();
    if (pid[r] < 0) {
      perror("ar_gpu_procs: fork");
      store32(&ctl->failed, 1);
      break;
    }
    if (pid[r] == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL); /* no rank outlives the run (a timeout kills the parent) */
      if (getppid() != parent) _exit(1);
      snprintf(a_rank, sizeof a_rank, "%d", r);
      char *args[] = {argv[0], "--ranks", a_n,  "--calls", a_calls, "--seed", a_seed, "--timeout-s",
                      a_t,     "--rank",  a_rank, "--ctl-fd", a_fd,  "--plant-oob", a_plant,
                      victim >= 0 ? "--destroy-rank" : NULL, a_victim, NULL}; /* NULL ends the list early */
      execv("/proc/self/exe", args);
      perror("ar_gpu_procs: execv");
      _exit(1);
    }
    code[r] = -1;
    live++;
  }
  const double t0 = tb_now_s();
  double next_progress = t0 + PROGRESS_S, failed_at = 0;
  while (live > 0) {
    int status = 0;
    const pid_t w = waitpid(-1, &status, WNOHANG);
    if (w > 0) {
      for (int r = 0; r < n; r++)
        if (pid[r] == w) {
          code[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
          if (code[r] != 0 && code[r] != SKIP) {
            if (!load32(&ctl->failed)) fprintf(stderr, "ar_gpu_procs: rank %d ended with code %d\n", r, code[r]);
            store32(&ctl->failed, 1);
          }
          live--;
        }
      continue;
    }
    const double t = tb_now_s();
    if (load32(&ctl->failed) && !failed_at) failed_at = t;
    if (failed_at && t > failed_at + timeout_s + 15) { /* the ranks had their time to leave */
      fprintf(stderr, "ar_gpu_procs: ranks still running %.0f s after a failure: killed\n", t - failed_at);
      for (int r = 0; r < n; r++)
        if (code[r] == -1) kill(pid[r], SIGKILL);
      failed_at = t + 1e9;
    }
    if (t > next_progress) {
      printf("ar_gpu_procs: %llu of %llu calls checked, %.0f s\n",
             (unsigned long long)__atomic_load_n(&ctl->done, __ATOMIC_SEQ_CST), (unsigned long long)calls, t - t0);
      fflush(stdout);
      next_progress = t + PROGRESS_S;
    }
    tb_sleep_s(10e-3);
  }
  if (load32(&ctl->skipped)) {
    printf("ar_gpu_procs: skipped: no CUDA device (%s)\n", ctl->skip_reason[0] ? ctl->skip_reason : "none found");
    return SKIP;
  }
  if (victim >= 0) {
    const int failed = (int)load32(&ctl->failed);
    printf("ar_gpu_procs: %d ranks, rank %d destroyed while the others waited in a call: %s, %.1f s\n", n, victim,
           failed ? "FAILED" : "every peer ended with cause PEER in time, rows untouched, stream usable",
           tb_now_s() - t0);
    return failed ? 1 : 0;
  }
  uint64_t wrong = 0;
  for (int r = 0; r < n; r++) {
    wrong += ctl->wrong[r];
    if (ctl->wrong[r])
      printf("ar_gpu_procs: rank %d: %llu wrong values; the first: %s\n", r, (unsigned long long)ctl->wrong[r],
             ctl->first_wrong[r]);
  }
  const int failed = (int)load32(&ctl->failed);
  printf("ar_gpu_procs: %d ranks, %llu calls (%llu one-shot, %llu two-shot, %llu empty), %llu wrong values%s, %.1f s\n",
         n, (unsigned long long)ctl->done, (unsigned long long)ctl->one, (unsigned long long)ctl->two,
         (unsigned long long)ctl->empty, (unsigned long long)wrong, failed ? "; FAILED (a rank failed or hung)" : "",
         tb_now_s() - t0);
  return failed || wrong || ctl->done != calls ? 1 : 0;
}
