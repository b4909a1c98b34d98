/* Suite `ar_gpu`: mdr's all-reduce kernels (kernels/all_reduce.cu, the
 * protocol of kernels/ar_protocol.h) with 2, 4 and 8 ranks on ONE GPU,
 * without NCCL.
 *
 * The harness. Every rank's slab (its rows, its residual rows, its count
 * words, then its comm region at a 256-aligned offset) lies in one
 * cudaMalloc of one device; peer[r] is rank r's slab address, which a
 * kernel on the same device reaches by plain loads and stores, exactly as
 * it reaches an LSA pointer. Each rank has its own non-blocking stream and
 * its own host thread, which fills mdr_ar_call as src/comm_nccl.c does
 * (nccl_all_reduce) and launches mdr_cuda_ar_launch. The host words
 * (abort request, reports) are pinned mapped memory. Every rank's blocks
 * must be resident at once (a block spins until the same block of every
 * peer arrives): with n ranks on one GPU the grid cap is SMs / n, halved
 * when programmatic dependent launch lets a rank's next kernel become
 * resident while its current one runs.
 *
 * Cases:
 *   - start states of a long-running server, written into the regions as
 *     a real run leaves them (a one-shot-only run: calls and one_shot at
 *     E, barriers and flags 0; a mixed run: block b's barriers and its
 *     flags at B_b, non-increasing in b, with the last call's signature),
 *     near the 32-bit wrap points; from each, calls checked bit for bit and
 *     block 0's counters against a model of the protocol;
 *   - random lockstep sequences (one-shot, two-shot, counted AUTO, empty
 *     calls by tokens 0 and by count words of 0; every dtype; with and
 *     without residual; MDR_AR_GPU_CALLS calls per rank count, 100000 by
 *     default), every element compared with a CPU reference, every byte
 *     outside the reduced rows compared with what was there;
 *   - a rank launched alone waits at every start state, for both
 *     algorithms, until the host's abort word ends it (within 100 ms),
 *     having touched no row and no counter, its stream usable afterwards;
 *     a lone empty call does not wait;
 *   - the time limit: a lone rank gives up by itself and raises every
 *     rank's abort word;
 *   - lockstep mismatches (dtype, rows, residual, count source, algorithm,
 *     fused norm, fused against chained) give up with MDR_ARP_MISMATCH;
 *   - the fused RMSNorm: every dtype x algorithm x count source at 1 to
 *     128 tokens and rows up to hidden 8192 (the fused kernel forced), and
 *     a third of the bf16/fp16 residual calls of the random sequences
 *     (auto: fused or chained), each rank its own weight, the norm rows
 *     against tests/ar_norm_ref.h (the contract's arithmetic), rows past
 *     the count untouched;
 *   - fused or chained (mdr_arp_norm_fused): both sides of 512 KiB under
 *     MDR_AR_NORM_FUSE's three modes, the same bits; a chained norm whose
 *     all-reduce gives up leaves the residual and norm_output untouched.
 * Every wait on the GPU has a host deadline: past it the host raises the
 * abort word and the case fails instead of hanging (Criterion's .timeout
 * is the last resort).
 *
 * The reference (copied from tests/test_all_reduce.c, written from the
 * contract): acc = x_0; acc += x_r in fp32 in rank order; one rounding to
 * the type, to nearest even; residual = round(residual + sum). */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <math.h> /* macros only (isnan, signbit, INFINITY) */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ar_reference.h"
#include "ar_norm_ref.h"
#include "support.h"
#include "clock.h"

#if defined(MDR_HAVE_CUDA) && defined(MDR_HAVE_NCCL)
#define AR_GPU 1
#include <cuda_runtime.h>

#include "all_reduce.h"
#include "ar_gpu_layout.h"
#endif

#if defined(AR_GPU)

/* ==== the reference (tests/ar_reference.h): elements and the documented sum ==== */

static size_t esize(int dt) { return dt == MDR_ARP_FP32 ? 4 : 2; }
static const char *dt_name(int dt) { return dt == MDR_ARP_BF16 ? "bf16" : dt == MDR_ARP_FP16 ? "fp16" : "fp32"; }


static int bits_nan(uint32_t bits, int dt) { return isnan(ar_bits_float(bits, dt)); }

/* The same rounding, fast (the reference's is written for clarity and is
 * far too slow for the random sequences): the bit tricks of RNE for bf16
 * (add half an ulp less one, plus the lowest kept bit) and for fp16 (the
 * normal range by the same trick after rebiasing, the subnormal range by
 * one float addition that rounds at the smallest subnormal's place). They
 * are checked against ref_round before any case uses them
 * (check_fast_rounding), and every value they call wrong is recomputed
 * with ref_round, so a fault of theirs can neither hide nor invent one. */
static uint32_t fast_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
  u += 0x7fffu + ((u >> 16) & 1u);
  return u >> 16;
}
static uint32_t fast_fp16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  if (u >= 0x47800000u) return sign | (u > 0x7f800000u ? 0x7e00u : 0x7c00u); /* 2^16 and up: inf; NaN */
  if (u < 0x38800000u) {                                                    /* under 2^-14: subnormal */
    float a;
    memcpy(&a, &u, 4);
    a += 0.5f; /* the ulp of 0.5 is 2^-24, fp16's smallest subnormal */
    uint32_t v;
    memcpy(&v, &a, 4);
    return sign | (v - 0x3f000000u);
  }
  const uint32_t odd = (u >> 13) & 1u;
  u += 0xc8000fffu + odd; /* exponent rebiased from 127 to 15, plus half an ulp less one */
  return sign | (u >> 13);
}
static uint32_t fast_bits(float v, int dt) {
  if (dt == MDR_ARP_FP32) {
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
  }
  return dt == MDR_ARP_BF16 ? fast_bf16(v) : fast_fp16(v);
}

/* fast_bits against ref_round: every tie between neighbouring values of
 * both formats and its float neighbours, and random floats of every
 * exponent; 0 when they agree (NaNs aside). */
static uint64_t fast_rounding_faults(void) {
  uint64_t bad = 0, rng = 0xfa57u;
  for (int dt = MDR_ARP_BF16; dt <= MDR_ARP_FP16; dt++)
    for (uint32_t h = 0; h < 0xffffu; h++) {
      const float x = ar_bits_float(h, dt), y = ar_bits_float(h + 1, dt);
      if (isnan(x) || isnan(y) || isinf(x) || isinf(y) || (h & 0x7fffu) == 0x7fffu) continue;
      const float mid = (float)(((double)x + (double)y) / 2);
      uint32_t mu;
      memcpy(&mu, &mid, 4);
      for (int d = -1; d <= 1; d++) {
        const uint32_t tu = mu + (uint32_t)d;
        float t;
        memcpy(&t, &tu, 4);
        if (!isnan(t) && fast_bits(t, dt) != ar_float_bits(t, dt)) bad++;
      }
    }
  for (int i = 0; i < (1 << 21); i++) {
    const uint32_t u = (uint32_t)tb_rng_next(&rng);
    float t;
    memcpy(&t, &u, 4);
    if (isnan(t)) continue;
    for (int dt = MDR_ARP_BF16; dt <= MDR_ARP_FP16; dt++)
      if (fast_bits(t, dt) != ar_float_bits(t, dt)) bad++;
  }
  return bad;
}

/* Edge elements (written at the start of a call's first row on some
 * calls): -0, exact cancellation, overflow to inf, the smallest
 * subnormal, ties, an order-sensitive sum, and an all-ones NaN (the
 * one-shot's arrival sentinel, which must be sent as another NaN). */
enum { E_NEG_ZERO, E_CANCEL, E_MAX, E_NEG_MAX, E_MIN_SUB, E_TIE_EVEN, E_TIE_UP, E_ORDER, E_ALL_ONES, N_EDGE };

static uint32_t edge_bits(int dt, int rank, int e) {
  const uint32_t sign = dt == MDR_ARP_FP32 ? 0x80000000u : 0x8000u;
  const float ulp1 = dt == MDR_ARP_BF16 ? 0x1p-7f : dt == MDR_ARP_FP16 ? 0x1p-10f : 0x1p-23f;
  switch (e) {
    case E_NEG_ZERO: return sign;
    case E_CANCEL: return rank == 0 ? ar_float_bits(1.5f, dt) : rank == 1 ? ar_float_bits(-1.5f, dt) : 0;
    case E_MAX:
    case E_NEG_MAX: {
      const uint32_t max = dt == MDR_ARP_BF16 ? 0x7f7fu : dt == MDR_ARP_FP16 ? 0x7bffu : 0x7f7fffffu;
      return e == E_MAX ? max : sign | max;
    }
    case E_MIN_SUB: return 1u;
    case E_TIE_EVEN: return rank == 0 ? ar_float_bits(1.0f, dt) : rank == 1 ? ar_float_bits(ulp1 / 2, dt) : 0;
    case E_TIE_UP: return rank == 0 ? ar_float_bits(1.0f + ulp1, dt) : rank == 1 ? ar_float_bits(ulp1 / 2, dt) : 0;
    case E_ORDER: {
      const float big = dt == MDR_ARP_FP16 ? 1024.0f : 16777216.0f;
      return rank == 0 ? ar_float_bits(big, dt) : ar_float_bits(dt == MDR_ARP_FP16 ? 0x1p-14f : 1.0f, dt);
    }
    default: return rank == 0 ? (dt == MDR_ARP_FP32 ? 0xffffffffu : 0xffffu) : ar_float_bits(1.0f, dt);
  }
}

/* ==== the harness ==== */

/* the slab's layout (BUF_OFF ... REGION_OFF, AREA, MAX_CALLS, GUARD):
 * tests/ar_gpu_layout.h, shared with tests/ar_gpu_procs.c */
enum {
  MAXR = MDR_ARP_MAX_RANKS,
  DEADLINE_S = 10             /* host deadline of one batch, or of one case's wait */
};

typedef struct harness {
  int n, sms, device;
  char *mem;                     /* every slab, one allocation */
  char *slab[MAXR];              /* rank r's slab (its window base) */
  cudaStream_t stream[MAXR];     /* rank r's stream */
  uint32_t *words, *words_dev;   /* MDR_ARP_HOST_WORDS(n), pinned and mapped */
} harness;

/* Ranks on one GPU spin while they wait for each other, so each rank's
 * stream must have a hardware queue of its own: with the default 8 queues,
 * streams made later share a queue with earlier ones, and a kernel queued
 * behind a peer's spinning kernel never starts (a false hang of the harness;
 * one rank per GPU, as in the product, has no such limit). 32 is the most
 * the driver gives; it must be set before the process's first CUDA call. */
__attribute__((constructor)) static void ar_gpu_queues(void) {
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  /* and every kernel loaded up front: under lazy loading a kernel's first
   * launch can wait for the running (spinning) kernels of the device */
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
}

static int device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

#define CUDA_OK(x)                                                                                    \
  do {                                                                                                \
    const cudaError_t e_ = (x);                                                                       \
    cr_assert_eq(e_, cudaSuccess, "%s: %s (%s)", #x, cudaGetErrorName(e_), cudaGetErrorString(e_)); \
  } while (0)

static void skip_without_gpu(void) {
  if (device_count() < 1) cr_skip_test("no CUDA device");
  (void)ar_ref_bf16_table();
  cr_assert_eq(fast_rounding_faults(), 0u, "the fast rounding disagrees with the reference's");
}

/* Every region set up as a fresh communicator's (mdr_cuda_ar_region_init),
 * the host words zeroed. */
static void h_reset(harness *h) {
  for (int r = 0; r < h->n; r++) {
    cr_assert_eq(mdr_cuda_ar_region_init(h->slab[r] + REGION_OFF, h->n, MDR_ARP_ONE_SHOT_MAX_BYTES, h->stream[r]),
                 0, "mdr_cuda_ar_region_init");
    CUDA_OK(cudaStreamSynchronize(h->stream[r]));
  }
  memset(h->words, 0, MDR_ARP_HOST_WORDS(h->n) * sizeof(uint32_t));
}

static void h_init(harness *h, int n) {
  memset(h, 0, sizeof *h);
  h->n = n;
  CUDA_OK(cudaGetDevice(&h->device));
  CUDA_OK(cudaDeviceGetAttribute(&h->sms, cudaDevAttrMultiProcessorCount, h->device));
  CUDA_OK(cudaMalloc((void **)&h->mem, (size_t)n * SLAB_BYTES(n)));
  CUDA_OK(cudaMemset(h->mem, 0, (size_t)n * SLAB_BYTES(n)));
  for (int r = 0; r < n; r++) {
    h->slab[r] = h->mem + (size_t)r * SLAB_BYTES(n);
    CUDA_OK(cudaStreamCreateWithFlags(&h->stream[r], cudaStreamNonBlocking));
  }
  const size_t wb = MDR_ARP_HOST_WORDS(n) * sizeof(uint32_t);
  CUDA_OK(cudaHostAlloc((void **)&h->words, wb, cudaHostAllocMapped | cudaHostAllocPortable));
  CUDA_OK(cudaHostGetDevicePointer((void **)&h->words_dev, h->words, 0));
  h_reset(h);
}

static void h_fini(harness *h) {
  for (int r = 0; r < h->n; r++) {
    (void)cudaStreamSynchronize(h->stream[r]);
    (void)cudaStreamDestroy(h->stream[r]);
  }
  (void)cudaFree(h->mem);
  (void)cudaFreeHost(h->words);
  (void)cudaGetLastError();
}

/* The grid cap: every rank's blocks resident at once on the one GPU, two
 * kernels a rank when programmatic dependent launch is on. */
static int h_max_blocks(const harness *h, int pdl) {
  int cap = h->sms / (h->n * (pdl ? 2 : 1));
  if (cap > MDR_ARP_MAX_BLOCKS) cap = MDR_ARP_MAX_BLOCKS;
  return cap < 1 ? 1 : cap;
}

/* One call of a lockstep sequence, as every rank makes it. */
typedef struct ar_case {
  size_t off;        /* the rows at BUF_OFF + off, the residual at RES_OFF + off */
  size_t row_bytes;
  size_t rows;       /* the rows, or the bound of a count word */
  int counted;       /* a count word (COUNT_OFF + 4 * index) */
  uint32_t count;    /* its value */
  int dtype, algo;   /* MDR_ARP_ dtype; ONE_SHOT, TWO_SHOT or AUTO (counted) */
  int residual;
  int edges;         /* edge elements at the start of row 0 */
  int norm;          /* the fused RMSNorm (bf16, fp16; with the residual) */
  float eps;         /* its epsilon */
  int fuse;          /* with norm: MDR_ARP_NORM_FUSE_AUTO (0), ALWAYS or NEVER (MDR_AR_NORM_FUSE) */
} ar_case;

/* The call of rank r as src/all_reduce.c and src/comm_nccl.c fill it. */
static mdr_ar_call h_call(const harness *h, int r, const ar_case *c, int index, int pdl, uint64_t timeout_ns) {
  mdr_ar_call k;
  memset(&k, 0, sizeof k);
  k.buf_off = BUF_OFF + c->off;
  k.res_off = c->residual ? RES_OFF + c->off : MDR_ARP_NO_RESIDUAL;
  k.row_bytes = c->row_bytes;
  k.rows = c->rows;
  k.count_ptr = c->counted ? (const uint32_t *)(h->slab[r] + COUNT_OFF) + index : NULL;
  k.one_shot_max = MDR_ARP_ONE_SHOT_MAX_BYTES;
  k.dtype = c->dtype;
  k.algo = c->algo;
  for (int q = 0; q < h->n; q++) k.peer[q] = h->slab[q];
  k.self = h->slab[r];
  k.region_off = REGION_OFF;
  k.slot_cap = MDR_ARP_ONE_SHOT_MAX_BYTES;
  k.rank = r;
  k.nranks = h->n;
  k.max_blocks = h_max_blocks(h, pdl);
  k.pdl = pdl;
  k.timeout_ns = timeout_ns;
  k.host_abort = &h->words_dev[MDR_ARP_HOST_ABORT];
  k.host_report = &h->words_dev[MDR_ARP_HOST_RANKS0 + (size_t)r * MDR_ARP_HOST_REPORT];
  if (c->norm) { /* as src/all_reduce.c fills it */
    k.norm_weight = h->slab[r] + WGT_OFF + c->off;
    k.norm_off = NORM_OFF + c->off;
    k.norm_eps = c->eps;
    k.norm_fuse = c->fuse;
  }
  return k;
}

/* The rows the call reduces, and whether it runs one-shot. */
static size_t case_rows_now(const ar_case *c) {
  if (!c->counted) return c->rows;
  return c->count < c->rows ? c->count : c->rows;
}
static int case_one_shot(const ar_case *c) {
  return mdr_arp_runs_one_shot(c->algo, case_rows_now(c) * c->row_bytes, MDR_ARP_ONE_SHOT_MAX_BYTES);
}

/* ---- rank threads ---- */

typedef struct rank_job {
  harness *h;
  int rank;
  const ar_case *cases;
  int ncases;
  int pdl;
  uint64_t timeout_ns;
  int launch_error;  /* a cudaError_t of a launch */
  int timed_out;     /* the stream outlasted the deadline */
} rank_job;

/* Wait for a stream until `deadline` (now_s): 1 done, 0 not. */
static int stream_wait(cudaStream_t s, double deadline) {
  for (;;) {
    const cudaError_t e = cudaStreamQuery(s);
    if (e != cudaErrorNotReady) return 1;
    if (tb_now_s() > deadline) return 0;
    tb_sleep_s(50e-6);
  }
}

static void *rank_main(void *p) {
  rank_job *j = p;
  harness *h = j->h;
  (void)cudaSetDevice(h->device);
  for (int i = 0; i < j->ncases && !j->launch_error; i++) {
    const mdr_ar_call k = h_call(h, j->rank, &j->cases[i], i, j->pdl, j->timeout_ns);
    j->launch_error = mdr_cuda_ar_launch(&k, h->stream[j->rank]);
  }
  j->timed_out = !stream_wait(h->stream[j->rank], tb_now_s() + DEADLINE_S);
  return NULL;
}

/* After a hang: what rank r's region holds for `block` (its counters, the
 * flags every peer left there, its control words and the first word of
 * each peer's header slot in both parities), read once the kernels ended. */
static void dump_region(const harness *h, int r, unsigned block) {
  const char *reg = h->slab[r] + REGION_OFF;
  mdr_arp_block st;
  uint32_t ctl[2], flags[2 * MAXR];
  if (cudaMemcpy(&st, reg + MDR_ARP_STATE_OFF + block * sizeof st, sizeof st, cudaMemcpyDeviceToHost) != cudaSuccess ||
      cudaMemcpy(ctl, reg + MDR_ARP_CTL_OFF, sizeof ctl, cudaMemcpyDeviceToHost) != cudaSuccess ||
      cudaMemcpy(flags, reg + MDR_ARP_FLAGS_OFF + (size_t)block * h->n * 8u, (size_t)h->n * 8u,
                 cudaMemcpyDeviceToHost) != cudaSuccess) {
    printf("ar_gpu: hang: rank %d: region unreadable: %s\n", r, cudaGetErrorString(cudaGetLastError()));
    return;
  }
  printf("ar_gpu: hang: rank %d block %u: calls %u one_shot %u barriers %u; abort %u claim %u; flags", r, block,
         st.calls, st.one_shot, st.barriers, ctl[0], ctl[1]);
  for (int q = 0; q < h->n; q++) printf(" [%d] %u/%08x", q, flags[2 * q], flags[2 * q + 1]);
  printf("; headers");
  for (int k = 0; k < 2; k++)
    for (int q = 0; q < h->n; q++) {
      uint32_t w = 0;
      const size_t off = MDR_ARP_SCRATCH_OFF(h->n) + ((size_t)k * h->n + q) * MDR_ARP_SLOT_BYTES(MDR_ARP_ONE_SHOT_MAX_BYTES) +
                         (size_t)block * MDR_ARP_VEC;
      (void)cudaMemcpy(&w, reg + off, 4, cudaMemcpyDeviceToHost);
      printf(" %d.%d:%08x", k, q, w);
    }
  printf("\n");
}

/* Every rank launches `cases` on its own thread and stream and waits for
 * them; past the deadline the host raises the abort word (so the kernels
 * end) and the case fails. */
static void run_lockstep(harness *h, const ar_case *cases, int ncases, int pdl, uint64_t timeout_ns) {
  pthread_t t[MAXR];
  rank_job j[MAXR];
  for (int r = 0; r < h->n; r++) {
    j[r] = (rank_job){h, r, cases, ncases, pdl, timeout_ns, 0, 0};
    cr_assert_eq(pthread_create(&t[r], NULL, rank_main, &j[r]), 0);
  }
  int late = 0, bad = 0;
  for (int r = 0; r < h->n; r++) {
    pthread_join(t[r], NULL);
    late |= j[r].timed_out;
    bad |= j[r].launch_error;
  }
  if (late) {
    __atomic_store_n(&h->words[MDR_ARP_HOST_ABORT], 1u, __ATOMIC_SEQ_CST);
    for (int r = 0; r < h->n; r++) (void)stream_wait(h->stream[r], tb_now_s() + 5);
    /* where each rank was: the reports the abort made the waits write */
    for (int r = 0; r < h->n; r++) {
      const uint32_t *rep = &h->words[MDR_ARP_HOST_RANKS0 + (size_t)r * MDR_ARP_HOST_REPORT];
      const uint32_t call = rep[MDR_ARP_REP_CALL];
      printf("ar_gpu: hang: rank %d: cause %u (%s), wait %u (%s), peer %u, block %u, calls counter %u\n", r,
             rep[MDR_ARP_REP_CAUSE], mdr_arp_cause_name(rep[MDR_ARP_REP_CAUSE]), rep[MDR_ARP_REP_WAIT],
             mdr_arp_wait_name(rep[MDR_ARP_REP_WAIT]), rep[MDR_ARP_REP_PEER], rep[MDR_ARP_REP_BLOCK], call);
    }
    /* and what the regions hold at the blocks the reports name (block 0 too) */
    unsigned blocks[MAXR + 1] = {0};
    int nb = 1;
    for (int r = 0; r < h->n; r++) {
      const unsigned blk = h->words[MDR_ARP_HOST_RANKS0 + (size_t)r * MDR_ARP_HOST_REPORT + MDR_ARP_REP_BLOCK];
      int seen = blk >= MDR_ARP_MAX_BLOCKS;
      for (int i = 0; i < nb; i++) seen |= blocks[i] == blk;
      if (!seen) blocks[nb++] = blk;
    }
    for (int i = 0; i < nb; i++)
      for (int q = 0; q < h->n; q++) dump_region(h, q, blocks[i]);
    for (int i = 0; i < ncases; i++) {
      const ar_case *c = &cases[i];
      printf("ar_gpu: hang: case %d: %zu rows of %zu B (count %s%u), %s, %s%s, pdl %d\n", i, c->rows, c->row_bytes,
             c->counted ? "" : "-", c->counted ? c->count : 0u, dt_name(c->dtype),
             c->algo == MDR_ARP_ONE_SHOT ? "one-shot" : c->algo == MDR_ARP_TWO_SHOT ? "two-shot" : "auto",
             c->residual ? ", residual" : "", pdl);
    }
    fflush(stdout);
    cr_assert_fail("%d ranks: %d calls did not finish within %d s (a hang; the abort word was raised)", h->n, ncases,
             DEADLINE_S);
  }
  cr_assert_eq(bad, 0, "mdr_cuda_ar_launch failed: %s", cudaGetErrorString((cudaError_t)bad));
  for (int r = 0; r < h->n; r++) {
    const uint32_t cause = h->words[MDR_ARP_HOST_RANKS0 + (size_t)r * MDR_ARP_HOST_REPORT + MDR_ARP_REP_CAUSE];
    cr_assert_eq(cause, 0u, "rank %d gave up: %s", r, mdr_arp_cause_name(cause));
  }
}

/* ---- batches: inputs, the reference, the check ---- */

typedef struct batch {
  ar_case cases[MAX_CALLS];
  int n_cases;
  size_t used;                  /* bytes of the rows area (and of the residual area) in use */
  unsigned char *in[MAXR];      /* rank r's rows, residual rows, norm rows and weights as uploaded (4 * AREA) */
  unsigned char *got[MAXR];     /* as downloaded */
  uint32_t counts[MAX_CALLS];   /* the count words (the same on every rank: lockstep) */
  uint64_t wrong, checked_calls;
  char first_wrong[300];
} batch;

static batch *batch_new(int n) {
  batch *b = calloc(1, sizeof *b);
  cr_assert_not_null(b);
  for (int r = 0; r < n; r++) {
    b->in[r] = malloc(4 * (size_t)AREA);
    b->got[r] = malloc(4 * (size_t)AREA);
    cr_assert(b->in[r] && b->got[r]);
  }
  return b;
}

/* Empty the batch for the next calls (its buffers kept). */
static void batch_clear(batch *b) {
  b->n_cases = 0;
  b->used = 0;
}

static void batch_free(batch *b, int n) {
  for (int r = 0; r < n; r++) {
    free(b->in[r]);
    free(b->got[r]);
  }
  free(b);
}

/* Append a call of `bytes` at most; 0 when the rows area is full. */
static int batch_add(batch *b, const ar_case *c) {
  const size_t off = (b->used + 255u) & ~(size_t)255u;
  const size_t end = off + c->rows * c->row_bytes + GUARD;
  if (b->n_cases == MAX_CALLS || end > AREA) return 0;
  ar_case *d = &b->cases[b->n_cases++];
  *d = *c;
  d->off = off;
  b->counts[b->n_cases - 1] = c->count;
  b->used = end;
  return 1;
}

/* Random inputs on every rank: the calls' rows and residual rows of their
 * dtypes (edges where asked), random bytes elsewhere. */
/* Random finite elements of dt into p[0, ne): random sign and fraction,
 * exponent in [-6, 5] (sums of a few stay normal, ties are common), several
 * elements drawn from one 64-bit random number. */
static void fill_elems(unsigned char *p, size_t ne, int dt, uint64_t *rng) {
  const int per = dt == MDR_ARP_FP32 ? 2 : 4, bits = 64 / per;
  for (size_t e = 0; e < ne;) {
    uint64_t x = tb_rng_next(rng);
    for (int j = 0; j < per && e < ne; j++, e++, x >>= bits) {
      const uint32_t sign = (uint32_t)(x & 1u), ex = (uint32_t)((x >> 1) & 15u) % 12u;
      uint32_t v;
      if (dt == MDR_ARP_BF16) v = (sign << 15) | ((ex + 127u - 6u) << 7) | (uint32_t)((x >> 5) & 0x7fu);
      else if (dt == MDR_ARP_FP16) v = (sign << 15) | ((ex + 15u - 6u) << 10) | (uint32_t)((x >> 5) & 0x3ffu);
      else v = (sign << 31) | ((ex + 127u - 6u) << 23) | (uint32_t)((x >> 5) & 0x7fffffu);
      ar_elem_set_bits(p, e, dt, v);
    }
  }
}

typedef struct fill_job {
  batch *b;
  int rank;
  uint64_t seed;
} fill_job;

/* Rank r's inputs: the calls' rows and residual rows of their dtypes
 * (edges where asked), a poison byte everywhere else. */
static void *fill_main(void *arg) {
  fill_job *j = arg;
  batch *b = j->b;
  uint64_t rng = j->seed;
  const size_t used16 = (b->used + 15u) & ~(size_t)15u;
  unsigned char *rows = b->in[j->rank], *res = b->in[j->rank] + AREA;
  memset(rows, (int)(tb_rng_next(&rng) & 0xffu), used16);
  memset(res, (int)(tb_rng_next(&rng) & 0xffu), used16);
  memset(b->in[j->rank] + 2 * (size_t)AREA, (int)(tb_rng_next(&rng) & 0xffu), used16); /* the norm's rows: poison */
  memset(b->in[j->rank] + 3 * (size_t)AREA, 0, used16);
  for (int k = 0; k < b->n_cases; k++) {
    const ar_case *c = &b->cases[k];
    const size_t ne = c->rows * c->row_bytes / esize(c->dtype);
    fill_elems(rows + c->off, ne, c->dtype, &rng);
    fill_elems(res + c->off, ne, c->dtype, &rng);
    if (c->norm) /* this rank's own weight */
      fill_elems(b->in[j->rank] + 3 * (size_t)AREA + c->off, c->row_bytes / esize(c->dtype), c->dtype, &rng);
    if (c->edges)
      for (int e = 0; e < N_EDGE && (size_t)e < ne; e++)
        ar_elem_set_bits(rows + c->off, (size_t)e, c->dtype, edge_bits(c->dtype, j->rank, e));
  }
  return NULL;
}

/* Every rank's inputs, one thread a rank. */
static void batch_fill(batch *b, int n, uint64_t *rng) {
  fill_job j[MAXR];
  pthread_t t[MAXR];
  for (int r = 0; r < n; r++) {
    j[r] = (fill_job){b, r, tb_rng_next(rng)};
    cr_assert_eq(pthread_create(&t[r], NULL, fill_main, &j[r]), 0);
  }
  for (int r = 0; r < n; r++) pthread_join(t[r], NULL);
}

static void batch_upload(const harness *h, const batch *b) {
  const size_t bytes = (b->used + 15u) & ~(size_t)15u;
  for (int r = 0; r < h->n; r++) {
    CUDA_OK(cudaMemcpy(h->slab[r] + BUF_OFF, b->in[r], bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(h->slab[r] + RES_OFF, b->in[r] + AREA, bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(h->slab[r] + NORM_OFF, b->in[r] + 2 * (size_t)AREA, bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(h->slab[r] + WGT_OFF, b->in[r] + 3 * (size_t)AREA, bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(h->slab[r] + COUNT_OFF, b->counts, (size_t)b->n_cases * 4u, cudaMemcpyHostToDevice));
  }
  /* cudaMemcpy from pageable memory may return before its DMA lands, and
   * the ranks' non-blocking streams do not wait for it: a late copy would
   * land on memory the kernels already use (a flag a peer wrote) */
  CUDA_OK(cudaDeviceSynchronize());
}

static void batch_download(const harness *h, batch *b) {
  const size_t bytes = (b->used + 15u) & ~(size_t)15u;
  for (int r = 0; r < h->n; r++) {
    CUDA_OK(cudaMemcpy(b->got[r], h->slab[r] + BUF_OFF, bytes, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(b->got[r] + AREA, h->slab[r] + RES_OFF, bytes, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(b->got[r] + 2 * (size_t)AREA, h->slab[r] + NORM_OFF, bytes, cudaMemcpyDeviceToHost));
  }
}

/* What one checking thread found. */
typedef struct check_part {
  const batch *b;
  int n, k0, k1; /* calls [k0, k1) */
  uint64_t wrong;
  char first_wrong[300];
} check_part;

static void note_wrong(check_part *p, int n, int r, int k, const char *what, size_t e, uint32_t got, uint32_t want) {
  const batch *b = p->b;
  if (p->wrong++ == 0) {
    const ar_case *c = &b->cases[k];
    snprintf(p->first_wrong, sizeof p->first_wrong,
             "%d ranks, call %d of its batch (%s, %s, %zu rows of %zu bytes%s%s%s, count %u): rank %d %s element %zu "
             "is 0x%x, want 0x%x",
             n, k, c->algo == MDR_ARP_ONE_SHOT ? "one-shot" : c->algo == MDR_ARP_TWO_SHOT ? "two-shot" : "counted AUTO",
             dt_name(c->dtype), c->rows, c->row_bytes, c->residual ? ", residual" : "", c->norm ? ", norm" : "",
             c->counted ? ", count word" : "", c->count, r, what, e, got, want);
  }
}

/* Equal bits, or both NaN (a NaN's payload is the hardware's). */
static int same(uint32_t a, uint32_t b, int dt) { return a == b || (bits_nan(a, dt) && bits_nan(b, dt)); }

/* Compare every rank's rows and residual rows with the reference: the
 * reduced elements with the sum (and residual + sum), every other byte of
 * the used area with what was uploaded. */
static void *check_main(void *arg) {
  check_part *p = arg;
  const batch *b = p->b;
  const int n = p->n;
  size_t pos = 0; /* bytes before pos are checked (by this part or the one before) */
  if (p->k0 > 0) {
    const ar_case *c = &b->cases[p->k0 - 1];
    pos = c->off + c->rows * c->row_bytes + GUARD;
  }
  for (int k = p->k0; k < p->k1; k++) {
    const ar_case *c = &b->cases[k];
    for (int r = 0; r < n; r++)
      for (int part = 0; part < 3; part++) {
        const size_t base = (size_t)part * AREA;
        for (size_t i = pos; i < c->off; i++)
          if (b->got[r][base + i] != b->in[r][base + i]) note_wrong(p, n, r, k, "gap byte before the call", i, b->got[r][base + i], b->in[r][base + i]);
      }
    const size_t es = esize(c->dtype), bound_e = c->rows * c->row_bytes / es;
    const size_t red_e = case_rows_now(c) * c->row_bytes / es;
    unsigned char *in[MAXR], *got[MAXR];
    uint32_t *want_res[MAXR] = {0}; /* the fused norm's input: the expected residual */
    for (int r = 0; r < n; r++) {
      in[r] = b->in[r] + c->off;
      got[r] = b->got[r] + c->off;
      if (c->norm) {
        want_res[r] = malloc((red_e ? red_e : 1) * sizeof(uint32_t));
        cr_assert_not_null(want_res[r]);
      }
    }
    for (size_t e = 0; e < red_e; e++) {
      float acc = ar_bits_float(ar_elem_bits(in[0], e, c->dtype), c->dtype);
      for (int r = 1; r < n; r++) acc += ar_bits_float(ar_elem_bits(in[r], e, c->dtype), c->dtype);
      uint32_t sum = fast_bits(acc, c->dtype);
      for (int r = 0; r < n; r++)
        if (ar_elem_bits(got[r], e, c->dtype) != sum) sum = ar_float_bits(acc, c->dtype); /* the reference decides */
      const float sumf = ar_bits_float(sum, c->dtype);
      for (int r = 0; r < n; r++) {
        const uint32_t g = ar_elem_bits(got[r], e, c->dtype);
        if (!same(g, sum, c->dtype)) note_wrong(p, n, r, k, "sum", e, g, sum);
        const uint32_t rin = ar_elem_bits(in[r] + AREA, e, c->dtype), rg = ar_elem_bits(got[r] + AREA, e, c->dtype);
        if (!c->residual) {
          if (rg != rin) note_wrong(p, n, r, k, "residual (none given)", e, rg, rin);
          continue;
        }
        const float rsum = ar_bits_float(rin, c->dtype) + sumf;
        uint32_t rwant = fast_bits(rsum, c->dtype);
        if (rg != rwant) rwant = ar_float_bits(rsum, c->dtype);
        if (!same(rg, rwant, c->dtype)) note_wrong(p, n, r, k, "residual", e, rg, rwant);
        if (c->norm) want_res[r][e] = rwant;
      }
    }
    /* the norm's rows: the reference of the contract (tests/ar_norm_ref.h)
     * on the expected residual and this rank's weight; without a norm,
     * the reduced rows of the norm area untouched */
    const size_t row_e = c->row_bytes / es;
    for (int r = 0; r < n; r++) {
      const unsigned char *nin = in[r] + 2 * (size_t)AREA, *ngot = got[r] + 2 * (size_t)AREA;
      if (!c->norm) {
        if (red_e && memcmp(ngot, nin, red_e * es) != 0)
          for (size_t e = 0; e < red_e; e++)
            if (ar_elem_bits(ngot, e, c->dtype) != ar_elem_bits(nin, e, c->dtype))
              note_wrong(p, n, r, k, "norm row (none asked)", e, ar_elem_bits(ngot, e, c->dtype), ar_elem_bits(nin, e, c->dtype));
        continue;
      }
      uint32_t *wrow = malloc(row_e * sizeof(uint32_t)), *orow = malloc(row_e * sizeof(uint32_t));
      cr_assert(wrow && orow);
      for (size_t e = 0; e < row_e; e++) wrow[e] = ar_elem_bits(in[r] + 3 * (size_t)AREA, e, c->dtype);
      for (size_t row = 0; row * row_e < red_e; row++) {
        nref_row(c->dtype == MDR_ARP_BF16 ? 0 : 1, want_res[r] + row * row_e, wrow, row_e, c->eps, orow);
        for (size_t e = 0; e < row_e; e++) {
          const uint32_t g = ar_elem_bits(ngot, row * row_e + e, c->dtype);
          if (!same(g, orow[e], c->dtype)) note_wrong(p, n, r, k, "norm", row * row_e + e, g, orow[e]);
        }
      }
      free(wrow);
      free(orow);
      free(want_res[r]);
    }
    /* rows past the count, and the guard past the bound: untouched */
    const size_t from = c->off + red_e * es, to = c->off + bound_e * es + GUARD;
    for (int r = 0; r < n; r++)
      for (int part = 0; part < 3; part++) {
        const size_t base = (size_t)part * AREA;
        if (memcmp(b->got[r] + base + from, b->in[r] + base + from, to - from) == 0) continue;
        for (size_t i = from; i < to; i++)
          if (b->got[r][base + i] != b->in[r][base + i])
            note_wrong(p, n, r, k,
                       part == 2 ? "norm byte past the count" : part ? "residual byte past the count" : "byte past the count",
                       i - c->off,
                       b->got[r][base + i], b->in[r][base + i]);
      }
    pos = to;
  }
  return NULL;
}

/* The check on up to MAXR threads, each a run of calls. */
static void batch_check(batch *b, int n) {
  check_part parts[MAXR];
  pthread_t t[MAXR];
  const int np = b->n_cases < MAXR ? (b->n_cases ? b->n_cases : 1) : MAXR;
  for (int i = 0; i < np; i++) {
    parts[i] = (check_part){b, n, b->n_cases * i / np, b->n_cases * (i + 1) / np, 0, ""};
    cr_assert_eq(pthread_create(&t[i], NULL, check_main, &parts[i]), 0);
  }
  for (int i = 0; i < np; i++) {
    pthread_join(t[i], NULL);
    if (parts[i].wrong && !b->wrong) memcpy(b->first_wrong, parts[i].first_wrong, sizeof b->first_wrong);
    b->wrong += parts[i].wrong;
  }
  b->checked_calls += (uint64_t)b->n_cases;
}

/* ---- random calls ---- */

static const size_t k_row_bytes[] = {16, 32, 48, 64, 80, 128, 256, 496, 1024, 2048, 4096, 7168, 14336};
enum { N_ROW_BYTES = sizeof k_row_bytes / sizeof k_row_bytes[0] };

/* A random call: mostly decode-sized (a few small rows, or one or two
 * model-sized rows), sometimes prefill-sized (up to 32 rows), rarely up to
 * the one-shot cap and past it or at the one-shot / two-shot crossover of
 * counted AUTO; some empty (tokens 0, or a count word of 0). Small on
 * average, so that the CPU reference keeps up with the GPU. */
static ar_case random_case(uint64_t *rng) {
  ar_case c;
  memset(&c, 0, sizeof c);
  c.dtype = (int)tb_rng_range(rng, 0, 2);
  c.residual = (int)(tb_rng_next(rng) & 1u);
  const uint64_t kind = tb_rng_range(rng, 0, 99);
  c.algo = kind < 40 ? MDR_ARP_ONE_SHOT : kind < 65 ? MDR_ARP_TWO_SHOT : MDR_ARP_AUTO;
  c.counted = c.algo == MDR_ARP_AUTO || tb_rng_range(rng, 0, 4) == 0;
  const uint64_t size = tb_rng_range(rng, 0, 1999);
  int crossover = 0;
  if (size < 30) {
    c.row_bytes = k_row_bytes[tb_rng_range(rng, 0, N_ROW_BYTES - 1)];
    const size_t cap_rows = MDR_ARP_ONE_SHOT_MAX_BYTES / c.row_bytes;
    if (size < 1) { /* large: up to the one-shot cap (one-shot), or up to 1.5 times it */
      const size_t top = c.algo == MDR_ARP_ONE_SHOT ? cap_rows : cap_rows + cap_rows / 2;
      c.rows = (size_t)tb_rng_range(rng, 1, top);
    } else if (size < 2 && c.algo == MDR_ARP_AUTO) { /* a bound past the cap, a count at it or one past */
      c.rows = cap_rows + 1 + (size_t)tb_rng_range(rng, 0, 3);
      c.count = (uint32_t)(cap_rows + tb_rng_range(rng, 0, 1));
      crossover = 1;
    } else {
      c.rows = (size_t)tb_rng_range(rng, 9, 32);
    }
  } else if (size < 500) {
    c.row_bytes = k_row_bytes[tb_rng_range(rng, 8, N_ROW_BYTES - 1)];
    c.rows = 1;
  } else {
    c.row_bytes = k_row_bytes[tb_rng_range(rng, 0, 7)];
    c.rows = (size_t)tb_rng_range(rng, 1, 8);
  }
  if (c.counted && !crossover) {
    const uint64_t v = tb_rng_range(rng, 0, 9);
    c.count = v == 0   ? 0u
              : v == 1 ? (uint32_t)c.rows
              : v == 2 ? (uint32_t)(c.rows + 5)
                       : (uint32_t)tb_rng_range(rng, 0, c.rows);
  }
  if (!c.counted && tb_rng_range(rng, 0, 49) == 0) c.rows = 0; /* tokens 0 */
  c.edges = tb_rng_range(rng, 0, 19) == 0;
  if (c.residual && c.dtype != MDR_ARP_FP32 && tb_rng_range(rng, 0, 2) == 0) { /* a third of them fused */
    c.norm = 1;
    c.eps = tb_rng_range(rng, 0, 1) ? 1e-6f : 1e-5f;
  }
  return c;
}

/* A batch of up to `want` random calls (the forced ones first). */
static void batch_random(batch *b, uint64_t *rng, int want, const ar_case *forced, int n_forced) {
  batch_clear(b);
  for (int i = 0; i < n_forced; i++) cr_assert(batch_add(b, &forced[i]));
  while (b->n_cases < want) {
    const ar_case c = random_case(rng);
    if (!batch_add(b, &c)) break;
  }
}

/* ---- counters ---- */

static void read_states(const harness *h, int r, mdr_arp_block *st) {
  CUDA_OK(cudaMemcpy(st, h->slab[r] + REGION_OFF + MDR_ARP_STATE_OFF, MDR_ARP_MAX_BLOCKS * sizeof *st,
                     cudaMemcpyDeviceToHost));
}

/* Block 0's counters after the batch, as the protocol advances them. */
static void model_advance(mdr_arp_block *st, const batch *b) {
  for (int k = 0; k < b->n_cases; k++) {
    const ar_case *c = &b->cases[k];
    mdr_arp_advance(st, case_rows_now(c) * c->row_bytes / MDR_ARP_VEC, case_one_shot(c));
  }
}

/* ---- start states as a real run leaves them ---- */

typedef struct start_state {
  const char *what;
  uint32_t e;       /* calls and one_shot of every block */
  uint32_t b;       /* barriers of block 0 (a mixed run: block k at b - 2k) */
  int mixed;        /* a run with two-shot calls of every grid */
} start_state;

static const start_state k_states[] = {
    {"one-shot-only run, E = 2^30 - 1", 0x3fffffffu, 0, 0},
    {"one-shot-only run, E = 2^30", 0x40000000u, 0, 0},
    {"one-shot-only run, E = 2^31 - 1", 0x7fffffffu, 0, 0},
    {"one-shot-only run, E = 2^31", 0x80000000u, 0, 0},
    {"one-shot-only run, E = 3 * 2^30", 0xc0000000u, 0, 0},
    {"one-shot-only run, E = 2^32 - 1", 0xffffffffu, 0, 0},
    {"mixed run, B = 2^30 - 2", 0x9e3779b9u, 0x3ffffffeu, 1},
    {"mixed run, B = 2^30", 0x12345678u, 0x40000000u, 1},
    {"mixed run, B = 2^31 - 2", 0xfffffff0u, 0x7ffffffeu, 1},
    {"mixed run, B = 2^31", 0x00000007u, 0x80000000u, 1},
    {"mixed run, B = 3 * 2^30", 0x7fffffffu, 0xc0000000u, 1},
    {"mixed run, B = 2^32 - 2", 0xffffffffu, 0xfffffffeu, 1},
};
enum { N_STATES = sizeof k_states / sizeof k_states[0] };

/* Write the state into every rank's region: block k's counters, and the
 * flags [k][r] as rank r's block k left them at its last barrier ({its
 * barrier count, the last two-shot call's signature}). The control words
 * stay 0 and the scratch all-ones: a run that ended leaves them so. */
static void write_state(const harness *h, const start_state *s) {
  static mdr_arp_block st[MDR_ARP_MAX_BLOCKS];
  static uint32_t flags[MDR_ARP_MAX_BLOCKS * MAXR * 2];
  const uint32_t sig = mdr_arp_signature(1024, 4096, MDR_ARP_BF16, 0, 1, 0, 0);
  for (int k = 0; k < MDR_ARP_MAX_BLOCKS; k++) {
    const uint32_t bk = s->mixed ? s->b - 2u * (uint32_t)k : 0u;
    st[k] = (mdr_arp_block){s->mixed ? s->e + s->b / 2u : s->e, s->e, bk, 0};
    for (int r = 0; r < h->n; r++) {
      flags[2 * ((size_t)k * h->n + r)] = bk;
      flags[2 * ((size_t)k * h->n + r) + 1] = s->mixed ? sig : 0u;
    }
  }
  for (int r = 0; r < h->n; r++) {
    CUDA_OK(cudaMemcpy(h->slab[r] + REGION_OFF + MDR_ARP_STATE_OFF, st, sizeof st, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(h->slab[r] + REGION_OFF + MDR_ARP_FLAGS_OFF, flags, MDR_ARP_FLAGS_BYTES(h->n),
                       cudaMemcpyHostToDevice));
  }
  CUDA_OK(cudaDeviceSynchronize()); /* the copies have landed before any kernel runs (batch_upload says why) */
}

/* ==== cases ==== */

static uint64_t calls_knob(void) {
  const char *v = getenv("MDR_AR_GPU_CALLS");
  const long long x = v ? atoll(v) : 0;
  return x > 0 ? (uint64_t)x : 100000u;
}

/* Run the batch on every rank (pdl as given) and check it; returns the
 * wrong values (the first described in *b). */
static void run_batch(harness *h, batch *b, uint64_t *rng, int pdl) {
  batch_fill(b, h->n, rng);
  batch_upload(h, b);
  run_lockstep(h, b->cases, b->n_cases, pdl, 0);
  batch_download(h, b);
  batch_check(b, h->n);
}

/* Add c to the batch; a full batch is run first (pdl as given), checked
 * to hold no wrong value, and emptied. */
static void batch_add_or_run(harness *h, batch *b, uint64_t *rng, int pdl, const ar_case *c) {
  if (batch_add(b, c)) return;
  run_batch(h, b, rng, pdl);
  cr_assert_eq(b->wrong, 0u, "%d ranks: %llu wrong values; the first: %s", h->n, (unsigned long long)b->wrong,
               b->first_wrong);
  batch_clear(b);
  cr_assert(batch_add(b, c));
}

static void random_sequences(int n) {
  skip_without_gpu();
  harness h;
  h_init(&h, n);
  batch *b = batch_new(n);
  uint64_t rng = 0x5eed0000u + (uint64_t)n;
  const uint64_t want = calls_knob();
  uint64_t calls = 0, empty = 0, one = 0, two = 0;
  const double t0 = tb_now_s();
  mdr_arp_block model = {0, 0, 0, 0}; /* a fresh region */
  while (calls < want) {
    const int k = (int)tb_rng_range(&rng, 64, 1024);
    batch_random(b, &rng, (uint64_t)k < want - calls ? k : (int)(want - calls), NULL, 0);
    run_batch(&h, b, &rng, (int)(tb_rng_next(&rng) & 1u));
    model_advance(&model, b);
    for (int i = 0; i < b->n_cases; i++) {
      const ar_case *c = &b->cases[i];
      if (case_rows_now(c) == 0) empty++;
      else if (case_one_shot(c)) one++;
      else two++;
    }
    calls += (uint64_t)b->n_cases;
    if (b->wrong) break;
  }
  mdr_arp_block st[MDR_ARP_MAX_BLOCKS];
  read_states(&h, 0, st);
  printf("ar_gpu: %d ranks: %llu calls per rank (%llu one-shot, %llu two-shot, %llu empty), %llu wrong values, %.1f s\n",
         n, (unsigned long long)calls, (unsigned long long)one, (unsigned long long)two, (unsigned long long)empty,
         (unsigned long long)b->wrong, tb_now_s() - t0);
  fflush(stdout);
  cr_expect_eq(b->wrong, 0u, "%llu wrong values; the first: %s", (unsigned long long)b->wrong, b->first_wrong);
  cr_expect(st[0].calls == model.calls && st[0].one_shot == model.one_shot && st[0].barriers == model.barriers,
            "%d ranks: block 0's counters {%u, %u, %u}, the protocol's {%u, %u, %u}", n, st[0].calls, st[0].one_shot,
            st[0].barriers, model.calls, model.one_shot, model.barriers);
  batch_free(b, n);
  h_fini(&h);
}

Test(ar_gpu, random_lockstep_sequences_are_exact_with_2_ranks, .timeout = 600) { random_sequences(2); }
Test(ar_gpu, random_lockstep_sequences_are_exact_with_4_ranks, .timeout = 600) { random_sequences(4); }
Test(ar_gpu, random_lockstep_sequences_are_exact_with_8_ranks, .timeout = 600) { random_sequences(8); }

/* From every start state: a two-shot first (the call the stale flags broke),
 * then a one-shot, an empty call of each kind, and random calls; every
 * result exact, and the counters where the protocol puts them. */
Test(ar_gpu, calls_from_every_long_running_start_state_are_exact, .timeout = 600) {
  skip_without_gpu();
  for (int n = 2; n <= MAXR; n *= 2) {
    harness h;
    h_init(&h, n);
    batch *b = batch_new(n);
    uint64_t rng = 0x57a7e000u + (uint64_t)n;
    for (int si = 0; si < N_STATES; si++) {
      const start_state *s = &k_states[si];
      h_reset(&h);
      write_state(&h, s);
      mdr_arp_block before[MDR_ARP_MAX_BLOCKS], after[MDR_ARP_MAX_BLOCKS];
      read_states(&h, 0, before);
      mdr_arp_block model = before[0];
      const ar_case forced[] = {
          {0, 4096, 64, 0, 0, MDR_ARP_BF16, MDR_ARP_TWO_SHOT, 1, 0, 0, 0.0f, 0},
          {0, 4096, 8, 0, 0, MDR_ARP_FP32, MDR_ARP_ONE_SHOT, 0, 1, 0, 0.0f, 0},
          {0, 4096, 0, 0, 0, MDR_ARP_BF16, MDR_ARP_ONE_SHOT, 1, 0, 0, 0.0f, 0},
          {0, 4096, 16, 1, 0, MDR_ARP_FP16, MDR_ARP_AUTO, 1, 0, 1, 1e-5f, 0}, /* fused norm */
          {0, 7168, 4, 0, 0, MDR_ARP_FP16, MDR_ARP_TWO_SHOT, 0, 0, 0, 0.0f, 0},
          {0, 7168, 4, 0, 0, MDR_ARP_FP16, MDR_ARP_TWO_SHOT, 0, 0, 0, 0.0f, 0},
          {0, 64, 2, 0, 0, MDR_ARP_BF16, MDR_ARP_ONE_SHOT, 1, 0, 0, 0.0f, 0},
      };
      uint64_t wrong = 0, calls = 0;
      for (int rep = 0; rep < 4 && !wrong; rep++) {
        batch_random(b, &rng, 200, rep == 0 ? forced : NULL, rep == 0 ? (int)(sizeof forced / sizeof forced[0]) : 0);
        run_batch(&h, b, &rng, rep & 1);
        model_advance(&model, b);
        wrong += b->wrong;
        calls += (uint64_t)b->n_cases;
      }
      read_states(&h, 0, after);
      printf("ar_gpu: %d ranks from %s: %llu calls, %llu wrong values\n", n, s->what, (unsigned long long)calls,
             (unsigned long long)wrong);
      fflush(stdout);
      cr_expect_eq(wrong, 0u, "%d ranks from %s: %llu wrong values; the first: %s", n, s->what,
                   (unsigned long long)wrong, b->first_wrong);
      cr_expect(after[0].calls == model.calls && after[0].one_shot == model.one_shot &&
                    after[0].barriers == model.barriers,
                "%d ranks from %s: block 0's counters {%u, %u, %u}, the protocol's {%u, %u, %u}", n, s->what,
                after[0].calls, after[0].one_shot, after[0].barriers, model.calls, model.one_shot, model.barriers);
      /* a block no call launched (the grid cap is under it): its call-wide
       * counters advanced by block 0, its barriers left alone */
      const int last = MDR_ARP_MAX_BLOCKS - 1;
      cr_expect(after[last].calls == model.calls && after[last].one_shot == model.one_shot &&
                    after[last].barriers == before[last].barriers,
                "%d ranks from %s: block %d's counters {%u, %u, %u}", n, s->what, last, after[last].calls,
                after[last].one_shot, after[last].barriers);
      b->wrong = 0;
    }
    batch_free(b, n);
    h_fini(&h);
  }
}

/* ---- a lone rank ---- */

static uint32_t report_word(const harness *h, int r, int w) {
  return __atomic_load_n(&h->words[MDR_ARP_HOST_RANKS0 + (size_t)r * MDR_ARP_HOST_REPORT + (size_t)w], __ATOMIC_SEQ_CST);
}

static uint32_t ctl_abort(const harness *h, int r) {
  uint32_t w = 0;
  CUDA_OK(cudaMemcpy(&w, h->slab[r] + REGION_OFF + MDR_ARP_CTL_OFF + 4u * MDR_ARP_CTL_ABORT, 4, cudaMemcpyDeviceToHost));
  return w;
}

/* The lone call of these cases: 256 KiB of bf16 rows with a residual, so
 * that several blocks wait. */
static ar_case lone_case(int algo) {
  return (ar_case){0, 4096, 64, 0, 0, MDR_ARP_BF16, algo, 1, 0, 0, 0.0f, 0};
}

/* Rank 0's rows, residual rows and counters are what they were. */
static void expect_rank0_untouched(const harness *h, batch *b, const mdr_arp_block *before, const char *what) {
  batch_download(h, b);
  cr_expect(memcmp(b->got[0], b->in[0], b->used) == 0, "%s: rank 0's rows were touched", what);
  cr_expect(memcmp(b->got[0] + AREA, b->in[0] + AREA, b->used) == 0, "%s: rank 0's residual rows were touched", what);
  mdr_arp_block after[MDR_ARP_MAX_BLOCKS];
  read_states(h, 0, after);
  cr_expect(memcmp(after, before, sizeof after) == 0, "%s: rank 0's counters moved", what);
}

Test(ar_gpu, a_lone_rank_waits_at_every_start_state_until_aborted, .timeout = 600) {
  skip_without_gpu();
  for (int n = 2; n <= MAXR; n *= 2) {
    harness h;
    h_init(&h, n);
    batch *b = batch_new(n);
    uint64_t rng = 0x10e0000u + (uint64_t)n;
    double worst_ms = 0;
    for (int si = 0; si < N_STATES; si++)
      for (int a = 0; a < 2; a++) {
        const start_state *s = &k_states[si];
        const int algo = a ? MDR_ARP_TWO_SHOT : MDR_ARP_ONE_SHOT;
        char what[200];
        snprintf(what, sizeof what, "%d ranks, %s, %s", n, s->what, a ? "two-shot" : "one-shot");
        h_reset(&h);
        write_state(&h, s);
        mdr_arp_block before[MDR_ARP_MAX_BLOCKS];
        read_states(&h, 0, before);
        batch_clear(b);
        const ar_case c = lone_case(algo);
        cr_assert(batch_add(b, &c));
        batch_fill(b, n, &rng);
        batch_upload(&h, b);
        /* an empty call, by tokens 0 and by a count word of 0, does not wait */
        ar_case empty = c;
        empty.rows = 0;
        mdr_ar_call k = h_call(&h, 0, &empty, 0, 0, 0);
        cr_assert_eq(mdr_cuda_ar_launch(&k, h.stream[0]), 0);
        empty = c;
        empty.counted = 1;
        const uint32_t zero = 0;
        CUDA_OK(cudaMemcpy(h.slab[0] + COUNT_OFF + 4, &zero, 4, cudaMemcpyHostToDevice));
        CUDA_OK(cudaDeviceSynchronize());
        k = h_call(&h, 0, &empty, 1, 1, 0);
        cr_assert_eq(mdr_cuda_ar_launch(&k, h.stream[0]), 0);
        cr_expect(stream_wait(h.stream[0], tb_now_s() + 2.0), "%s: a lone empty call did not finish", what);
        /* the call: launched on rank 0 only, it must still be waiting */
        k = h_call(&h, 0, &c, 0, si & 1, 0);
        cr_assert_eq(mdr_cuda_ar_launch(&k, h.stream[0]), 0);
        tb_sleep_s(0.2);
        const cudaError_t q = cudaStreamQuery(h.stream[0]);
        cr_expect_eq(q, cudaErrorNotReady, "%s: the lone rank's call finished without its peers (%s)", what,
                     cudaGetErrorName(q));
        const double t0 = tb_now_s();
        __atomic_store_n(&h.words[MDR_ARP_HOST_ABORT], 1u, __ATOMIC_SEQ_CST);
        const int done = stream_wait(h.stream[0], t0 + 5.0);
        const double ms = (tb_now_s() - t0) * 1e3;
        cr_assert(done, "%s: the kernel did not end within 5 s of the abort", what);
        if (ms > worst_ms) worst_ms = ms;
        cr_expect_lt(ms, 100.0, "%s: the kernel ended %.1f ms after the abort", what, ms);
        CUDA_OK(cudaGetLastError());
        cr_expect_eq(report_word(&h, 0, MDR_ARP_REP_CAUSE), (uint32_t)MDR_ARP_ABORTED, "%s: cause %u (%s)", what,
                     report_word(&h, 0, MDR_ARP_REP_CAUSE), mdr_arp_cause_name(report_word(&h, 0, MDR_ARP_REP_CAUSE)));
        const uint32_t wait = report_word(&h, 0, MDR_ARP_REP_WAIT);
        cr_expect(a ? wait == MDR_ARP_WAIT_BARRIER1 : (wait == MDR_ARP_WAIT_HEADER || wait == MDR_ARP_WAIT_ROWS),
                  "%s: the report names %s", what, mdr_arp_wait_name(wait));
        /* an abort the host asked for raises the rank's own word only (its
         * peers see the host's word; a destroyed rank's region may be gone) */
        cr_expect_eq(ctl_abort(&h, 0), 1u, "%s: rank 0's abort word is not raised", what);
        for (int r = 1; r < n; r++)
          cr_expect_eq(ctl_abort(&h, r), 0u, "%s: rank %d's abort word was raised by rank 0's abort", what, r);
        expect_rank0_untouched(&h, b, before, what);
        /* the stream is usable afterwards */
        CUDA_OK(cudaMemsetAsync(h.slab[0] + COUNT_OFF, 0, 4096, h.stream[0]));
        cr_expect(stream_wait(h.stream[0], tb_now_s() + 2.0), "%s: the stream is not usable after the abort", what);
        CUDA_OK(cudaStreamQuery(h.stream[0]));
      }
    printf("ar_gpu: %d ranks: a lone rank waited at all %d start states x 2 algorithms; the slowest end after the "
           "abort: %.2f ms\n",
           n, N_STATES, worst_ms);
    fflush(stdout);
    batch_free(b, n);
    h_fini(&h);
  }
}

Test(ar_gpu, a_lone_rank_gives_up_at_the_time_limit_and_raises_every_abort_word, .timeout = 120) {
  skip_without_gpu();
  for (int n = 2; n <= MAXR; n *= 2)
    for (int a = 0; a < 2; a++) {
      harness h;
      h_init(&h, n);
      batch *b = batch_new(n);
      uint64_t rng = 0x71e0000u;
      char what[100];
      snprintf(what, sizeof what, "%d ranks, %s", n, a ? "two-shot" : "one-shot");
      mdr_arp_block before[MDR_ARP_MAX_BLOCKS];
      read_states(&h, 0, before);
      const ar_case c = lone_case(a ? MDR_ARP_TWO_SHOT : MDR_ARP_ONE_SHOT);
      cr_assert(batch_add(b, &c));
      batch_fill(b, n, &rng);
      batch_upload(&h, b);
      const mdr_ar_call k = h_call(&h, 0, &c, 0, 0, 50u * 1000u * 1000u);
      const double t0 = tb_now_s();
      cr_assert_eq(mdr_cuda_ar_launch(&k, h.stream[0]), 0);
      const int done = stream_wait(h.stream[0], t0 + 5.0);
      const double ms = (tb_now_s() - t0) * 1e3;
      if (!done) __atomic_store_n(&h.words[MDR_ARP_HOST_ABORT], 1u, __ATOMIC_SEQ_CST);
      cr_expect(done, "%s: the kernel did not give up by itself within 5 s", what);
      printf("ar_gpu: %s: a lone rank with a 50 ms limit ended after %.1f ms\n", what, ms);
      cr_expect_geq(ms, 50.0, "%s: gave up after %.1f ms, before the limit", what, ms);
      cr_expect_eq(report_word(&h, 0, MDR_ARP_REP_CAUSE), (uint32_t)MDR_ARP_TIMED_OUT, "%s: cause %s", what,
                   mdr_arp_cause_name(report_word(&h, 0, MDR_ARP_REP_CAUSE)));
      for (int r = 0; r < n; r++) cr_expect_eq(ctl_abort(&h, r), 1u, "%s: rank %d's abort word is not raised", what, r);
      expect_rank0_untouched(&h, b, before, what);
      batch_free(b, n);
      h_fini(&h);
    }
}

/* ---- the fused RMSNorm ---- */

/* Every dtype x algorithm x count source, rows of one vector (a one-leaf
 * tree), of 13 vectors (a padded tree) and of hidden 4096, 6144 and 8192
 * bf16/fp16, 1 to 128 tokens, with 2, 4 and 8 ranks: the sums, the
 * residual and the norm bit for bit against tests/ar_norm_ref.h (written
 * from the contract), rows past the count (and the norm area's) untouched.
 * The fused kernel for every call (MDR_AR_NORM_FUSE=always): the chain is
 * the next test's. */
Test(ar_gpu, the_fused_rmsnorm_is_exact_for_every_dtype_algorithm_and_count_source, .timeout = 600) {
  skip_without_gpu();
  static const size_t row_bytes[] = {16, 208, 8192, 12288, 16384};
  static const size_t tokens[] = {1, 3, 32, 128};
  static const int algos[] = {MDR_ARP_ONE_SHOT, MDR_ARP_TWO_SHOT, MDR_ARP_AUTO};
  for (int n = 2; n <= MAXR; n *= 2) {
    harness h;
    h_init(&h, n);
    batch *b = batch_new(n);
    uint64_t rng = 0x6e6f726du + (uint64_t)n;
    uint64_t cases = 0;
    for (int dt = MDR_ARP_BF16; dt <= MDR_ARP_FP16; dt++)
      for (int a = 0; a < 3; a++)
        for (int counted = algos[a] == MDR_ARP_AUTO; counted < 2; counted++)
          for (size_t rb = 0; rb < sizeof row_bytes / sizeof row_bytes[0]; rb++)
            for (size_t t = 0; t < sizeof tokens / sizeof tokens[0]; t++) {
              ar_case c;
              memset(&c, 0, sizeof c);
              c.row_bytes = row_bytes[rb];
              c.rows = tokens[t];
              c.counted = counted;
              c.count = tokens[t] == 1 ? (uint32_t)(cases % 2) : (uint32_t)(tokens[t] / 2 + 1); /* 0 sometimes */
              c.dtype = dt;
              c.algo = algos[a];
              c.residual = 1;
              c.norm = 1;
              c.eps = cases % 2 ? 1e-6f : 1e-5f;
              c.fuse = MDR_ARP_NORM_FUSE_ALWAYS; /* the fused kernel (the chain: the next case) */
              batch_add_or_run(&h, b, &rng, (int)(cases & 1u), &c);
              cases++;
            }
    run_batch(&h, b, &rng, 0);
    cr_assert_eq(b->wrong, 0u, "%d ranks: %llu wrong values; the first: %s", n, (unsigned long long)b->wrong,
                 b->first_wrong);
    printf("ar_gpu: the fused RMSNorm, %d ranks: %llu calls, 0 wrong values\n", n, (unsigned long long)cases);
    fflush(stdout);
    batch_free(b, n);
    h_fini(&h);
  }
}

/* ---- fused or chained (kernels/ar_protocol.h, mdr_arp_norm_fused) ---- */

/* Both sides of MDR_ARP_NORM_FUSE_MAX_BYTES (512 KiB) under each mode
 * (MDR_AR_NORM_FUSE auto, always, never, as the library would set it in
 * the call): one-shot calls of exactly 512 KiB and of one row more, at
 * hidden 4096 and 8192, two-shot calls, rows of one vector and of a padded
 * tree; every case checks that the launch takes the side the choice says,
 * then the sums (the rows hold them either way), the residual and the
 * norm bit for bit against tests/ar_norm_ref.h, rows past the call and the
 * guard untouched. */
Test(ar_gpu, the_norm_is_exact_fused_and_chained_on_both_sides_of_the_line, .timeout = 600) {
  skip_without_gpu();
  static const struct {
    size_t row_bytes, rows;
    int algo;
  } shapes[] = {
      {8192, 64, MDR_ARP_ONE_SHOT},  /* 512 KiB: fused under auto */
      {8192, 65, MDR_ARP_ONE_SHOT},  /* one row more: chained */
      {16384, 32, MDR_ARP_ONE_SHOT}, /* 512 KiB of hidden 8192 */
      {16384, 33, MDR_ARP_ONE_SHOT},
      {12288, 3, MDR_ARP_TWO_SHOT},  /* two-shot: chained under auto */
      {12288, 70, MDR_ARP_TWO_SHOT},
      {16, 1, MDR_ARP_ONE_SHOT},     /* one vector, a one-leaf tree */
      {208, 7, MDR_ARP_TWO_SHOT},    /* 13 vectors, a padded tree */
  };
  static const int modes[] = {MDR_ARP_NORM_FUSE_AUTO, MDR_ARP_NORM_FUSE_ALWAYS, MDR_ARP_NORM_FUSE_NEVER};
  for (int n = 2; n <= MAXR; n *= 2) {
    harness h;
    h_init(&h, n);
    batch *b = batch_new(n);
    uint64_t rng = 0x63686169u + (uint64_t)n;
    uint64_t fused = 0, chained = 0, cases = 0;
    for (int dt = MDR_ARP_BF16; dt <= MDR_ARP_FP16; dt++)
      for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int mi = 0; mi < 3; mi++) {
          ar_case c;
          memset(&c, 0, sizeof c);
          c.row_bytes = shapes[s].row_bytes;
          c.rows = shapes[s].rows;
          c.dtype = dt;
          c.algo = shapes[s].algo;
          c.residual = 1;
          c.norm = 1;
          c.eps = cases % 2 ? 1e-6f : 1e-5f;
          c.fuse = modes[mi];
          const int want = c.fuse == MDR_ARP_NORM_FUSE_ALWAYS  ? 1
                           : c.fuse == MDR_ARP_NORM_FUSE_NEVER ? 0
                                                               : c.algo == MDR_ARP_ONE_SHOT && c.rows * c.row_bytes <= (size_t)512 * 1024;
          const mdr_ar_call k = h_call(&h, 0, &c, 0, 0, 0);
          cr_assert_eq(mdr_arp_norm_fused(&k), want, "%zu rows of %zu B, %s, mode %d: the launch's choice",
                       c.rows, c.row_bytes, c.algo == MDR_ARP_ONE_SHOT ? "one-shot" : "two-shot", c.fuse);
          if (want) fused++;
          else chained++;
          batch_add_or_run(&h, b, &rng, (int)(cases & 1u), &c);
          cases++;
        }
    run_batch(&h, b, &rng, 1);
    cr_assert_eq(b->wrong, 0u, "%d ranks: %llu wrong values; the first: %s", n, (unsigned long long)b->wrong,
                 b->first_wrong);
    cr_assert(fused > 0 && chained > 0);
    printf("ar_gpu: the norm fused and chained, %d ranks: %llu calls (%llu fused, %llu chained), 0 wrong values\n", n,
           (unsigned long long)cases, (unsigned long long)fused, (unsigned long long)chained);
    fflush(stdout);
    batch_free(b, n);
    h_fini(&h);
  }
}

/* A lone rank whose chained norm's all-reduce gives up (the host's abort
 * word, or the time limit): the chain's second kernel reads the give-up
 * word (MDR_ARP_CTL_CLAIM) and touches neither the residual nor
 * norm_output; the rows and the counters stay as they were. Two-shot
 * (chained under auto) and one-shot (MDR_AR_NORM_FUSE=never). */
Test(ar_gpu, a_chained_norm_whose_all_reduce_gives_up_touches_nothing, .timeout = 120) {
  skip_without_gpu();
  for (int n = 2; n <= 4; n *= 2)
    for (int v = 0; v < 4; v++) {
      const int two = v & 1, limit = v >> 1;
      harness h;
      h_init(&h, n);
      batch *b = batch_new(n);
      uint64_t rng = 0x6c6f6e65u + (uint64_t)v;
      char what[160];
      snprintf(what, sizeof what, "%d ranks, chained %s, %s", n, two ? "two-shot" : "one-shot (never)",
               limit ? "the time limit" : "the host's abort");
      mdr_arp_block before[MDR_ARP_MAX_BLOCKS];
      read_states(&h, 0, before);
      ar_case c = lone_case(two ? MDR_ARP_TWO_SHOT : MDR_ARP_ONE_SHOT);
      c.norm = 1;
      c.eps = 1e-6f;
      c.fuse = two ? MDR_ARP_NORM_FUSE_AUTO : MDR_ARP_NORM_FUSE_NEVER;
      cr_assert(batch_add(b, &c));
      batch_fill(b, n, &rng);
      batch_upload(&h, b);
      const mdr_ar_call k = h_call(&h, 0, &c, 0, 0, limit ? 50u * 1000u * 1000u : 0);
      cr_assert_eq(mdr_arp_norm_fused(&k), 0, "%s: not the chain", what);
      cr_assert_eq(mdr_cuda_ar_launch(&k, h.stream[0]), 0);
      if (!limit) {
        tb_sleep_s(0.2);
        cr_expect_eq(cudaStreamQuery(h.stream[0]), cudaErrorNotReady, "%s: finished without its peers", what);
        __atomic_store_n(&h.words[MDR_ARP_HOST_ABORT], 1u, __ATOMIC_SEQ_CST);
      }
      const int done = stream_wait(h.stream[0], tb_now_s() + 5.0);
      if (!done) __atomic_store_n(&h.words[MDR_ARP_HOST_ABORT], 1u, __ATOMIC_SEQ_CST);
      cr_assert(done, "%s: the chain did not end within 5 s", what);
      CUDA_OK(cudaGetLastError());
      const uint32_t cause = report_word(&h, 0, MDR_ARP_REP_CAUSE);
      cr_expect_eq(cause, limit ? (uint32_t)MDR_ARP_TIMED_OUT : (uint32_t)MDR_ARP_ABORTED, "%s: cause %u (%s)", what,
                   cause, mdr_arp_cause_name(cause));
      uint32_t claim = 0;
      CUDA_OK(cudaMemcpy(&claim, h.slab[0] + REGION_OFF + MDR_ARP_CTL_OFF + 4u * MDR_ARP_CTL_CLAIM, 4,
                         cudaMemcpyDeviceToHost));
      cr_expect_eq(claim, 1u, "%s: the give-up word the second kernel reads is not set", what);
      expect_rank0_untouched(&h, b, before, what);
      cr_expect(memcmp(b->got[0] + 2 * (size_t)AREA, b->in[0] + 2 * (size_t)AREA, b->used) == 0,
                "%s: rank 0's norm_output rows were touched", what);
      printf("ar_gpu: %s: gave up (%s), residual and norm_output untouched\n", what, mdr_arp_cause_name(cause));
      fflush(stdout);
      batch_free(b, n);
      h_fini(&h);
    }
}

/* ---- lockstep mismatches ---- */

/* Rank n-1 calls `odd`, the others `c`; every rank must give up: at least
 * one with MDR_ARP_MISMATCH, the rest MISMATCH or PEER (they saw it
 * through the abort word), none at the safety-net time limit, no row
 * touched anywhere. */
static void expect_mismatch(int n, const ar_case *c, const ar_case *odd, const char *what) {
  harness h;
  h_init(&h, n);
  batch *b = batch_new(n);
  uint64_t rng = 0x3133700u;
  ar_case both[2] = {*c, *odd};
  cr_assert(batch_add(b, &both[0]) && batch_add(b, &both[1]));
  batch_fill(b, n, &rng);
  b->counts[0] = b->counts[1] = (uint32_t)(c->rows > odd->rows ? c->rows : odd->rows);
  batch_upload(&h, b);
  /* every rank's call at the first call's rows; the odd rank's count
   * word is the second's */
  for (int r = 0; r < n; r++) {
    ar_case mine = r == n - 1 ? *odd : *c;
    mine.off = b->cases[0].off;
    mdr_ar_call k = h_call(&h, r, &mine, r == n - 1 ? 1 : 0, 0, 2000u * 1000u * 1000u);
    cr_assert_eq(mdr_cuda_ar_launch(&k, h.stream[r]), 0);
  }
  int done = 1;
  for (int r = 0; r < n; r++) done &= stream_wait(h.stream[r], tb_now_s() + 10.0);
  if (!done) {
    __atomic_store_n(&h.words[MDR_ARP_HOST_ABORT], 1u, __ATOMIC_SEQ_CST);
    for (int r = 0; r < n; r++) (void)stream_wait(h.stream[r], tb_now_s() + 5.0);
  }
  cr_expect(done, "%s: the ranks did not give up (hang past the 2 s limit)", what);
  int mismatch = 0;
  for (int r = 0; r < n; r++) {
    const uint32_t cause = report_word(&h, r, MDR_ARP_REP_CAUSE);
    mismatch |= cause == MDR_ARP_MISMATCH;
    cr_expect(cause == MDR_ARP_MISMATCH || cause == MDR_ARP_PEER, "%s: rank %d: cause %u (%s)", what, r, cause,
              cause ? mdr_arp_cause_name(cause) : "it did not give up");
  }
  cr_expect(mismatch, "%s: no rank reported MDR_ARP_MISMATCH", what);
  batch_download(&h, b);
  for (int r = 0; r < n; r++) {
    cr_expect(memcmp(b->got[r], b->in[r], b->used) == 0, "%s: rank %d's rows were touched", what, r);
    cr_expect(memcmp(b->got[r] + AREA, b->in[r] + AREA, b->used) == 0, "%s: rank %d's residual rows were touched",
              what, r);
    cr_expect(memcmp(b->got[r] + 2 * (size_t)AREA, b->in[r] + 2 * (size_t)AREA, b->used) == 0,
              "%s: rank %d's norm rows were touched", what, r);
  }
  printf("ar_gpu: %d ranks, %s: causes", n, what);
  for (int r = 0; r < n; r++) printf(" %u", report_word(&h, r, MDR_ARP_REP_CAUSE));
  printf("\n");
  fflush(stdout);
  batch_free(b, n);
  h_fini(&h);
}

Test(ar_gpu, ranks_whose_calls_differ_give_up_with_a_mismatch, .timeout = 300) {
  skip_without_gpu();
  for (int n = 2; n <= 4; n += 2)
    for (int a = 0; a < 2; a++) {
      const int algo = a ? MDR_ARP_TWO_SHOT : MDR_ARP_ONE_SHOT;
      const char *an = a ? "two-shot" : "one-shot";
      char what[200];
      const ar_case c = {0, 4096, 16, 0, 0, MDR_ARP_BF16, algo, 1, 0, 0, 0.0f, 0};
      ar_case odd = c;
      odd.dtype = MDR_ARP_FP16;
      snprintf(what, sizeof what, "%s, bf16 against fp16", an);
      expect_mismatch(n, &c, &odd, what);
      odd = c;
      odd.rows = 15;
      snprintf(what, sizeof what, "%s, 16 rows against 15", an);
      expect_mismatch(n, &c, &odd, what);
      odd = c;
      odd.rows = 2; /* one block against one block */
      ar_case small = c;
      small.rows = 1;
      snprintf(what, sizeof what, "%s, 1 row against 2 (one block each)", an);
      expect_mismatch(n, &small, &odd, what);
      odd = c;
      odd.residual = 0;
      snprintf(what, sizeof what, "%s, residual against none", an);
      expect_mismatch(n, &c, &odd, what);
      odd = c;
      odd.counted = 1;
      snprintf(what, sizeof what, "%s, 16 rows against a count word of 16", an);
      expect_mismatch(n, &c, &odd, what);
      odd = c;
      odd.norm = 1; /* the fused norm changes the two-shot's partition and the grid */
      odd.eps = 1e-6f;
      odd.fuse = MDR_ARP_NORM_FUSE_ALWAYS;
      snprintf(what, sizeof what, "%s, residual against residual + fused norm", an);
      expect_mismatch(n, &c, &odd, what);
      /* the same norm call, fused on one rank and chained on another
       * (MDR_AR_NORM_FUSE differs): the chain's plain kernel has no residual
       * and no norm in its signature */
      ar_case fused = c;
      fused.norm = 1;
      fused.eps = 1e-6f;
      fused.fuse = MDR_ARP_NORM_FUSE_ALWAYS;
      odd = fused;
      odd.fuse = MDR_ARP_NORM_FUSE_NEVER;
      snprintf(what, sizeof what, "%s, a fused norm against the chain", an);
      expect_mismatch(n, &fused, &odd, what);
    }
}

/* One rank runs one-shot, its peer two-shot, on the same rows. The
 * signature covers the algorithm, but the two algorithms wait on different
 * words (scratch headers, barrier flags), so this checks that the
 * protocol notices at all. */
Test(ar_gpu, ranks_running_different_algorithms_give_up_with_a_mismatch, .timeout = 120) {
  skip_without_gpu();
  const ar_case c = {0, 4096, 16, 0, 0, MDR_ARP_BF16, MDR_ARP_ONE_SHOT, 1, 0, 0, 0.0f, 0};
  ar_case odd = c;
  odd.algo = MDR_ARP_TWO_SHOT;
  expect_mismatch(2, &c, &odd, "one-shot against two-shot");
}

#else

Test(ar_gpu, skipped_in_a_build_without_cuda_and_nccl) { cr_skip_test("built without CUDA or NCCL"); }

#endif
