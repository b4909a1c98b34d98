/* mdr example — a synthetic decode loop on an mdr arena, with cuBLASLt GEMMs,
 * run eagerly and through mdr_graph_cache (EXACT mode), checked bit for bit.
 *
 * One step over `t` tokens (rows = ceil16(t), the rows every GEMM runs on):
 *   token_ids ─gather─► hidden_states ─RMSNorm─► norm_output
 *   norm_output ─GEMM Wqkv─► qkv_output                       (rows x qkv_dim)
 *   hidden_states + qkv_output ─GEMM Wo (beta 1)─► residual    (attention is skipped)
 *   residual ─RMSNorm─► norm_output ─GEMM Wexp─► expert_down_out (rows x K*H: K experts)
 *   moe_output += w(id, k) * expert k, one launch per expert   (needs the zeroed rows)
 *   residual + moe_output ─RMSNorm─► norm_output ─GEMM Wlm─► logits (rows x V)
 *
 * Sizes: the arena comes from mdr_sizes_from_config on the qwen3-next-80b
 * preset scaled down (H 1024, V 8192, 4 query heads of 256 with a gate + 1 KV
 * head → qkv_dim 2560, 64 experts with top-4, M = 64 tokens): big enough
 * for real GEMM shapes, small enough to start in well under a second.
 *
 * cuBLASLt workspace: the arena's gdn_fla_scratch (GDN chunked-prefill
 * scratch, ~22 MB here, capped at 32 MiB). It is idle in a decode step and it
 * is not one of the 18 buffers the zeroing helpers clear, so no memset ever
 * touches it, neither at step start nor in the middle of a step. It is
 * cleared once at start-up so that no algorithm can read uninitialised bytes.
 *
 * Heuristics: one cublasLtMatmulAlgoGetHeuristic per GEMM and per padded row
 * count ceil16(t) ∈ {16, 32, 48, 64} (16 in all), chosen before the first
 * capture; eager steps and graphs use the same algorithm for the same count,
 * which is what makes their results bit-identical.
 *
 * Exit codes: 0 ok, 1 mismatch or failure, 2 bad usage, 77 no GPU (CTest skip). */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <mdr/mdr.h>

#include "decode_kernels.h"

enum { EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_SKIP = 77 };

#define MAX_TOKENS 64                 /* M: token counts run 1 .. M */
#define ROW_TILE 16                   /* GEMMs run on ceil16(tokens) rows */
#define MAX_SHAPES (MAX_TOKENS / ROW_TILE + 1)
#define WORKSPACE_CAP (32u << 20)     /* cuBLASLt workspace cap, bytes */
#define RMS_EPS 1e-6f
#define MAX_PRINTED_MISMATCHES 10

static size_t ceil16(size_t x) { return (x + ROW_TILE - 1) / ROW_TILE * ROW_TILE; }

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* ---- checks ------------------------------------------------------------ */

#define CUDA_OK(call)                                                                  \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    if (e_ != cudaSuccess) {                                                           \
      fprintf(stderr, "decode_loop: %s:%d: %s: %s\n", __FILE__, __LINE__, #call,      \
              cudaGetErrorString(e_));                                                 \
      goto fail;                                                                       \
    }                                                                                  \
  } while (0)

#define LT_OK(call)                                                                    \
  do {                                                                                 \
    cublasStatus_t s_ = (call);                                                        \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                 \
      fprintf(stderr, "decode_loop: %s:%d: %s: %s\n", __FILE__, __LINE__, #call,      \
              cublasLtGetStatusString(s_));                                            \
      goto fail;                                                                       \
    }                                                                                  \
  } while (0)

#define MDR_OK_(ctx, call)                                                             \
  do {                                                                                 \
    mdr_status m_ = (call);                                                            \
    if (m_ != MDR_OK) {                                                                \
      fprintf(stderr, "decode_loop: %s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call, \
              mdr_status_string(m_), mdr_backend_last_error((ctx)->backend));          \
      goto fail;                                                                       \
    }                                                                                  \
  } while (0)

/* ---- the model --------------------------------------------------------- */

enum { GEMM_QKV, GEMM_O, GEMM_EXPERTS, GEMM_LM_HEAD, GEMM_COUNT };

/* Y[rows, n] = X[rows, k] · W[n, k]ᵀ (+ C when beta = 1), all row-major BF16. */
typedef struct gemm_def {
  const char *name;
  mdr_buffer x, c, d; /* input, addend (MDR_BUF_COUNT: none), output (arena buffers) */
  const void *w;      /* weights, row-major [n, k], our own cudaMalloc */
  size_t n, k;
  float beta;
} gemm_def;

typedef struct gemm_plan {
  cublasLtMatrixLayout_t a, b, c, d;
  cublasLtMatmulAlgo_t algo;
  size_t workspace; /* bytes the chosen algorithm needs */
} gemm_plan;

typedef struct model {
  mdr_backend *backend;
  mdr_arena *arena;
  cudaStream_t stream;
  size_t hidden, vocab, qkv_dim, experts; /* H, V, qkv_dim, K (expert slots per token) */
  size_t max_tokens, max_rows;            /* M, ceil16(M) */
  void *emb, *w_qkv, *w_o, *w_exp, *w_lm, *gamma_in, *gamma_post, *gamma_final;
  cublasLtHandle_t lt;
  cublasLtMatmulDesc_t op;
  void *workspace;
  size_t workspace_bytes;
  gemm_def gemm[GEMM_COUNT];
  gemm_plan plan[GEMM_COUNT][MAX_SHAPES]; /* [gemm][rows / 16 - 1] */
  bool plans_ready;
} model;

static void *arena_ptr(const model *m, mdr_buffer b) {
  return (void *)(uintptr_t)mdr_arena_ptr(m->arena, b);
}

/* The overrun guard: `rows` rows of `width` BF16 at the start of arena buffer
 * `b` must lie inside it. On failure writes why into msg and returns
 * MDR_ERR_OUT_OF_RANGE; nothing is launched. */
static mdr_status fits(const model *m, mdr_buffer b, size_t rows, size_t width, const char *what,
                       char *msg, size_t msg_len) {
  size_t have = mdr_arena_bytes(m->arena, b);
  if (width != 0 && rows > SIZE_MAX / 2 / width) {
    snprintf(msg, msg_len, "%s: %zu x %zu BF16 overflows size_t", what, rows, width);
    return MDR_ERR_OVERFLOW;
  }
  size_t need = rows * width * 2;
  if (have == 0 || need > have) {
    snprintf(msg, msg_len,
             "%s would touch %zu rows x %zu BF16 = %zu bytes of %s, which has %zu bytes; refused",
             what, rows, width, need, mdr_buffer_name(b), have);
    return MDR_ERR_OUT_OF_RANGE;
  }
  return MDR_OK;
}

/* Every arena access of a GEMM over `rows` rows, checked before the call. */
static mdr_status gemm_fits(const model *m, const gemm_def *g, size_t rows, char *msg, size_t len) {
  char what[96];
  snprintf(what, sizeof what, "GEMM %s (output)", g->name);
  mdr_status st = fits(m, g->d, rows, g->n, what, msg, len);
  if (st == MDR_OK) {
    snprintf(what, sizeof what, "GEMM %s (input)", g->name);
    st = fits(m, g->x, rows, g->k, what, msg, len);
  }
  if (st == MDR_OK && g->c != MDR_BUF_COUNT) {
    snprintf(what, sizeof what, "GEMM %s (addend)", g->name);
    st = fits(m, g->c, rows, g->n, what, msg, len);
  }
  return st;
}

/* Column-major view for cuBLASLt: Yᵀ[n, rows] = op(W)[n, k] · Xᵀ[k, rows]
 * with W read transposed (its column-major shape is k x n, ld k). */
static int plan_gemms(model *m) {
  cublasLtMatmulPreference_t pref = NULL;
  LT_OK(cublasLtMatmulPreferenceCreate(&pref));
  LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &m->workspace_bytes, sizeof m->workspace_bytes));
  for (int gi = 0; gi < GEMM_COUNT; ++gi) {
    const gemm_def *g = &m->gemm[gi];
    for (size_t rows = ROW_TILE; rows <= m->max_rows; rows += ROW_TILE) {
      gemm_plan *p = &m->plan[gi][rows / ROW_TILE - 1];
      char msg[256];
      if (gemm_fits(m, g, rows, msg, sizeof msg) != MDR_OK) {
        fprintf(stderr, "decode_loop: %s\n", msg);
        goto fail;
      }
      LT_OK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, g->k, g->n, g->k));
      LT_OK(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, g->k, rows, g->k));
      LT_OK(cublasLtMatrixLayoutCreate(&p->c, CUDA_R_16BF, g->n, rows, g->n));
      LT_OK(cublasLtMatrixLayoutCreate(&p->d, CUDA_R_16BF, g->n, rows, g->n));
      cublasLtMatmulHeuristicResult_t r;
      int found = 0;
      memset(&r, 0, sizeof r);
      LT_OK(cublasLtMatmulAlgoGetHeuristic(m->lt, m->op, p->a, p->b, p->c, p->d, pref, 1, &r,
                                           &found));
      if (found < 1 || r.state != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "decode_loop: no cuBLASLt algorithm for GEMM %s at %zu rows\n", g->name,
                rows);
        goto fail;
      }
      p->algo = r.algo;
      p->workspace = r.workspaceSize;
    }
  }
  cublasLtMatmulPreferenceDestroy(pref);
  m->plans_ready = true;
  return 0;
fail:
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  return -1;
}

static mdr_status run_gemm(model *m, int gi, size_t rows, cudaStream_t s) {
  const gemm_def *g = &m->gemm[gi];
  char msg[256];
  mdr_status st = gemm_fits(m, g, rows, msg, sizeof msg);
  if (st != MDR_OK) {
    fprintf(stderr, "decode_loop: %s\n", msg);
    return st;
  }
  if (rows == 0 || rows % ROW_TILE || rows > m->max_rows) return MDR_ERR_OUT_OF_RANGE;
  const gemm_plan *p = &m->plan[gi][rows / ROW_TILE - 1];
  const float alpha = 1.0f, beta = g->beta;
  const void *c = g->c == MDR_BUF_COUNT ? arena_ptr(m, g->d) : arena_ptr(m, g->c);
  cublasStatus_t ls = cublasLtMatmul(m->lt, m->op, &alpha, g->w, p->a, arena_ptr(m, g->x), p->b,
                                     &beta, c, p->c, arena_ptr(m, g->d), p->d, &p->algo,
                                     m->workspace, m->workspace_bytes, s);
  if (ls != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "decode_loop: cublasLtMatmul (%s, %zu rows): %s\n", g->name, rows,
            cublasLtGetStatusString(ls));
    return MDR_ERR_BACKEND;
  }
  return MDR_OK;
}

static mdr_status kernel_status(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return MDR_OK;
  fprintf(stderr, "decode_loop: %s: %s\n", what, cudaGetErrorString(e));
  return MDR_ERR_BACKEND;
}

static mdr_status kernel_fits(const model *m, mdr_buffer b, size_t rows, size_t width,
                              const char *what) {
  char msg[256];
  mdr_status st = fits(m, b, rows, width, what, msg, sizeof msg);
  if (st != MDR_OK) fprintf(stderr, "decode_loop: %s\n", msg);
  return st;
}

#define BODY_OK(expr)                \
  do {                               \
    mdr_status b_ = (expr);          \
    if (b_ != MDR_OK) return b_;     \
  } while (0)

/* The decode work: what the eager path enqueues after zeroing + id upload,
 * and what each graph captures. Only enqueues on `stream`. */
static mdr_status decode_body(void *user, mdr_stream stream, size_t tokens) {
  model *m = user;
  cudaStream_t s = (cudaStream_t)stream;
  const size_t rows = ceil16(tokens), H = m->hidden;
  if (tokens == 0 || tokens > m->max_tokens || rows > m->max_rows) return MDR_ERR_OUT_OF_RANGE;
  /* The kernels' accesses are guarded like the GEMMs' (rows of H BF16). */
  BODY_OK(kernel_fits(m, MDR_BUF_HIDDEN_STATES, rows, H, "gather"));
  BODY_OK(kernel_fits(m, MDR_BUF_NORM_OUTPUT, rows, H, "rmsnorm"));
  BODY_OK(kernel_fits(m, MDR_BUF_RESIDUAL, tokens, H, "rmsnorm"));
  BODY_OK(kernel_fits(m, MDR_BUF_MOE_OUTPUT, tokens, H, "moe accumulate"));
  BODY_OK(kernel_fits(m, MDR_BUF_EXPERT_DOWN_OUT, tokens, m->experts * H, "moe accumulate"));
  if (mdr_arena_bytes(m->arena, MDR_BUF_TOKEN_IDS) < tokens * sizeof(uint32_t))
    return MDR_ERR_OUT_OF_RANGE;

  const uint32_t *ids = arena_ptr(m, MDR_BUF_TOKEN_IDS);
  void *hidden = arena_ptr(m, MDR_BUF_HIDDEN_STATES), *norm = arena_ptr(m, MDR_BUF_NORM_OUTPUT);
  void *residual = arena_ptr(m, MDR_BUF_RESIDUAL), *moe = arena_ptr(m, MDR_BUF_MOE_OUTPUT);
  void *experts = arena_ptr(m, MDR_BUF_EXPERT_DOWN_OUT);

  BODY_OK(kernel_status(dk_gather_embeddings(hidden, m->emb, ids, tokens, rows, H, m->vocab, s),
                        "gather"));
  BODY_OK(kernel_status(dk_rmsnorm(norm, hidden, NULL, m->gamma_in, tokens, rows, H, RMS_EPS, s),
                        "rmsnorm (input)"));
  BODY_OK(run_gemm(m, GEMM_QKV, rows, s));
  BODY_OK(run_gemm(m, GEMM_O, rows, s));
  BODY_OK(kernel_status(
      dk_rmsnorm(norm, residual, NULL, m->gamma_post, tokens, rows, H, RMS_EPS, s),
      "rmsnorm (post-attention)"));
  BODY_OK(run_gemm(m, GEMM_EXPERTS, rows, s));
  for (size_t k = 0; k < m->experts; ++k)
    BODY_OK(kernel_status(dk_moe_accumulate(moe, experts, k, m->experts, ids, tokens, H, s),
                          "moe accumulate"));
  BODY_OK(kernel_status(
      dk_rmsnorm(norm, residual, moe, m->gamma_final, tokens, rows, H, RMS_EPS, s),
      "rmsnorm (final)"));
  BODY_OK(run_gemm(m, GEMM_LM_HEAD, rows, s));
  return MDR_OK;
}

/* ---- weights ------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static float uniform_pm1(uint64_t *state) {
  return (float)(splitmix64(state) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

static uint16_t float_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even; inputs are finite */
  return (uint16_t)(u >> 16);
}

/* cudaMalloc `count` BF16 values: offset + scale * U[-1, 1), made on the host
 * from `state` and copied (blocking, before any capture). */
static int make_weights(void **out, size_t count, float offset, float scale, uint64_t *state,
                        uint16_t *host) {
  for (size_t i = 0; i < count; ++i) host[i] = float_to_bf16(offset + scale * uniform_pm1(state));
  CUDA_OK(cudaMalloc(out, count * sizeof(uint16_t)));
  CUDA_OK(cudaMemcpy(*out, host, count * sizeof(uint16_t), cudaMemcpyHostToDevice));
  return 0;
fail:
  return -1;
}

/* ---- statistics --------------------------------------------------------- */

enum { BUCKET_COUNT = 4 };
static const size_t bucket_lo[BUCKET_COUNT] = {1, 2, 9, 33};
static const size_t bucket_hi[BUCKET_COUNT] = {1, 8, 32, 64};
static const char *const bucket_name[BUCKET_COUNT] = {"1", "2-8", "9-32", "33-64"};

static int bucket_of(size_t tokens) {
  for (int b = 0; b < BUCKET_COUNT; ++b)
    if (tokens <= bucket_hi[b]) return b;
  return BUCKET_COUNT - 1;
}

enum { SERIES_EAGER_HOST, SERIES_GRAPH_HOST, SERIES_EAGER_GPU, SERIES_GRAPH_GPU, SERIES_COUNT };
static const char *const series_name[SERIES_COUNT] = {"eager_host_us", "graph_host_us",
                                                      "eager_gpu_us", "graph_gpu_us"};

typedef struct summary {
  size_t steps;
  double median[SERIES_COUNT], mean[SERIES_COUNT];
} summary;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* samples[series][step]; bucket[step]. scratch holds n doubles. */
static void summarize(double *const samples[SERIES_COUNT], const int *bucket, size_t n, int which,
                      double *scratch, summary *out) {
  memset(out, 0, sizeof *out);
  for (int s = 0; s < SERIES_COUNT; ++s) {
    size_t k = 0;
    double sum = 0;
    for (size_t i = 0; i < n; ++i)
      if (which < 0 || bucket[i] == which) {
        scratch[k++] = samples[s][i];
        sum += samples[s][i];
      }
    out->steps = k;
    if (k == 0) continue;
    qsort(scratch, k, sizeof *scratch, cmp_double);
    out->median[s] = k % 2 ? scratch[k / 2] : 0.5 * (scratch[k / 2 - 1] + scratch[k / 2]);
    out->mean[s] = sum / (double)k;
  }
}

static double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

/* ---- the loop ----------------------------------------------------------- */

typedef struct options {
  size_t steps;
  uint64_t seed;
  const char *json;
} options;

static void usage(FILE *f) {
  fprintf(f,
          "usage: mdr_decode_loop [--steps N] [--seed S] [--json PATH]\n"
          "  --steps N    decode steps, each run eagerly and as a graph (default 200)\n"
          "  --seed S     seed of the weights, token counts and ids (default 1234)\n"
          "  --json PATH  write the per-bucket timings as JSON\n"
          "environment: MDR_DISABLE_GRAPHS=1 makes the graph cache run eagerly\n");
}

static bool parse_u64(const char *s, uint64_t *out) {
  char *end = NULL;
  errno = 0;
  if (!s || !*s || *s == '-') return false;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno || *end) return false;
  *out = (uint64_t)v;
  return true;
}

static int parse_options(int argc, char **argv, options *o) {
  o->steps = 200;
  o->seed = 1234;
  o->json = NULL;
  for (int i = 1; i < argc; ++i) {
    uint64_t v;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      exit(0);
    } else if (!strcmp(argv[i], "--steps") && i + 1 < argc && parse_u64(argv[i + 1], &v) &&
               v >= 1 && v <= 100000000u) {
      o->steps = (size_t)v;
      ++i;
    } else if (!strcmp(argv[i], "--seed") && i + 1 < argc && parse_u64(argv[i + 1], &v)) {
      o->seed = v;
      ++i;
    } else if (!strcmp(argv[i], "--json") && i + 1 < argc) {
      o->json = argv[++i];
    } else {
      fprintf(stderr, "decode_loop: bad argument '%s'\n", argv[i]);
      usage(stderr);
      return -1;
    }
  }
  return 0;
}

typedef struct timing {
  double host_us, gpu_us;
} timing;

/* Eager step: the seed's path. zero_all_rows (MDR_ZERO_MEMSET), copy the ids,
 * enqueue the body, then wait. zero = false skips the zeroing (the demo). */
/* Close a timed step begun at host time h0 with ev0 recorded: record ev1,
 * wait for the stream, fill host and GPU microseconds. */
static int finish_timing(model *m, cudaEvent_t ev0, cudaEvent_t ev1, double h0, timing *t) {
  CUDA_OK(cudaEventRecord(ev1, m->stream));
  CUDA_OK(cudaStreamSynchronize(m->stream));
  double h1 = now_us();
  float ms = 0;
  CUDA_OK(cudaEventElapsedTime(&ms, ev0, ev1));
  t->host_us = h1 - h0;
  t->gpu_us = (double)ms * 1e3;
  return 0;
fail:
  return -1;
}

static int eager_step(model *m, uint32_t *ids_pinned, const uint32_t *ids, size_t tokens,
                      bool zero, cudaEvent_t ev0, cudaEvent_t ev1, timing *t) {
  memcpy(ids_pinned, ids, tokens * sizeof *ids); /* the previous step has finished */
  double h0 = now_us();
  CUDA_OK(cudaEventRecord(ev0, m->stream));
  if (zero) MDR_OK_(m, mdr_arena_zero_all_rows(m->arena, m->stream, tokens));
  CUDA_OK(cudaMemcpyAsync(arena_ptr(m, MDR_BUF_TOKEN_IDS), ids_pinned, tokens * sizeof *ids,
                          cudaMemcpyHostToDevice, m->stream));
  MDR_OK_(m, decode_body(m, m->stream, tokens));
  return finish_timing(m, ev0, ev1, h0, t);
fail:
  return -1;
}

static int graph_step(model *m, mdr_graph_cache *cache, const uint32_t *ids, size_t tokens,
                      cudaEvent_t ev0, cudaEvent_t ev1, timing *t) {
  double h0 = now_us();
  CUDA_OK(cudaEventRecord(ev0, m->stream));
  mdr_status st = mdr_graph_cache_step(cache, ids, tokens);
  if (st == MDR_ERR_CAPTURE) {
    /* The cache ran this step eagerly; the step's work is enqueued. */
    fprintf(stderr, "decode_loop: warning: capture for %zu tokens failed, ran eagerly (%s)\n",
            tokens, mdr_backend_last_error(m->backend));
  } else {
    MDR_OK_(m, st);
  }
  return finish_timing(m, ev0, ev1, h0, t);
fail:
  return -1;
}

static int read_logits(model *m, uint16_t *host, size_t tokens) {
  CUDA_OK(cudaMemcpyAsync(host, arena_ptr(m, MDR_BUF_LOGITS), tokens * m->vocab * sizeof *host,
                          cudaMemcpyDeviceToHost, m->stream));
  CUDA_OK(cudaStreamSynchronize(m->stream));
  return 0;
fail:
  return -1;
}

/* Number of differing BF16 values; *first = index of the first one. */
static size_t count_diffs(const uint16_t *a, const uint16_t *b, size_t n, size_t *first) {
  size_t d = 0;
  *first = n;
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) {
      if (d++ == 0) *first = i;
    }
  return d;
}

static size_t pick_tokens(uint64_t *rng, size_t max_tokens) {
  /* A bucket first, then a count inside it: short runs still cover all four. */
  int b = (int)(splitmix64(rng) % BUCKET_COUNT);
  size_t lo = bucket_lo[b], hi = bucket_hi[b] < max_tokens ? bucket_hi[b] : max_tokens;
  if (lo > hi) lo = hi;
  return lo + (size_t)(splitmix64(rng) % (hi - lo + 1));
}

static void fill_ids(uint64_t *rng, uint32_t *ids, size_t tokens, size_t vocab) {
  for (size_t i = 0; i < tokens; ++i) ids[i] = (uint32_t)(splitmix64(rng) % vocab);
}

static int write_json(const char *path, const options *o, const model *m, const summary *b,
                      const summary *all, size_t mismatches, const mdr_graph_stats *gs) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "decode_loop: cannot write %s: %s\n", path, strerror(errno));
    return -1;
  }
  fprintf(f, "{\n  \"steps\": %zu,\n  \"seed\": %" PRIu64 ",\n", o->steps, o->seed);
  fprintf(f,
          "  \"model\": {\"hidden\": %zu, \"vocab\": %zu, \"qkv_dim\": %zu, \"expert_slots\": %zu,"
          " \"max_tokens\": %zu},\n",
          m->hidden, m->vocab, m->qkv_dim, m->experts, m->max_tokens);
  fprintf(f, "  \"mismatched_steps\": %zu,\n", mismatches);
  fprintf(f,
          "  \"graph_stats\": {\"captures\": %" PRIu64 ", \"hits\": %" PRIu64
          ", \"misses\": %" PRIu64 ", \"eager_steps\": %" PRIu64 ", \"capture_us\": %.1f},\n",
          gs->captures, gs->hits, gs->misses, gs->eager_steps, gs->capture_us);
  fprintf(f, "  \"buckets\": [\n");
  for (int i = 0; i <= BUCKET_COUNT; ++i) {
    const summary *s = i < BUCKET_COUNT ? &b[i] : all;
    fprintf(f, "    {\"tokens\": \"%s\", \"steps\": %zu", i < BUCKET_COUNT ? bucket_name[i] : "all",
            s->steps);
    for (int k = 0; k < SERIES_COUNT; ++k)
      fprintf(f, ", \"%s_median\": %.2f, \"%s_mean\": %.2f", series_name[k], s->median[k],
              series_name[k], s->mean[k]);
    fprintf(f, ", \"host_speedup\": %.3f, \"gpu_speedup\": %.3f}%s\n",
            ratio(s->median[SERIES_EAGER_HOST], s->median[SERIES_GRAPH_HOST]),
            ratio(s->median[SERIES_EAGER_GPU], s->median[SERIES_GRAPH_GPU]),
            i < BUCKET_COUNT ? "," : "");
  }
  fprintf(f, "  ]\n}\n");
  if (fclose(f) != 0) {
    fprintf(stderr, "decode_loop: writing %s failed: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}

/* The scaled-down Qwen3-Next-80B (see the file comment). */
static int model_config(mdr_model_config *c) {
  if (mdr_model_preset("qwen3-next-80b", c) != MDR_OK) return -1;
  c->hidden_size = 1024;
  c->intermediate_size = 2560;
  c->vocab_size = 8192;
  c->num_attention_heads = 4;
  c->num_key_value_heads = 1;
  c->head_dim = 256;                 /* gated: qkv_dim = (4*2 + 2*1) * 256 = 2560 */
  c->linear_num_key_heads = 8;
  c->linear_key_head_dim = 128;
  c->linear_num_value_heads = 16;    /* 128x128 GDN heads keep gdn_fla_scratch */
  c->linear_value_head_dim = 128;
  c->num_experts = 64;
  c->num_experts_per_tok = 4;        /* expert_down_out rows hold 4 expert outputs */
  c->moe_intermediate_size = 256;
  c->shared_expert_intermediate_size = 256;
  return 0;
}

int main(int argc, char **argv) {
  options opt;
  if (parse_options(argc, argv, &opt) != 0) return EXIT_USAGE;

  int devices = 0;
  cudaError_t de = cudaGetDeviceCount(&devices);
  if (de != cudaSuccess || devices == 0) {
    printf("decode_loop: needs a CUDA GPU (%s); skipping\n",
           de != cudaSuccess ? cudaGetErrorString(de) : "no device");
    return EXIT_SKIP;
  }

  int rc = EXIT_FAIL;
  model mm;
  model *m = &mm;
  memset(m, 0, sizeof *m);
  mdr_graph_cache *cache = NULL;
  cudaEvent_t ev0 = NULL, ev1 = NULL;
  uint16_t *host_w = NULL, *logits_a = NULL, *logits_b = NULL;
  uint32_t *ids_pinned = NULL, *ids = NULL;
  double *samples[SERIES_COUNT] = {NULL};
  double *scratch = NULL;
  int *bucket = NULL;
  size_t mismatched_steps = 0, printed = 0;

  mdr_status st = mdr_backend_cuda_create(0, &m->backend);
  if (st == MDR_ERR_NO_DEVICE) {
    printf("decode_loop: needs a CUDA GPU (mdr: %s); skipping\n", mdr_status_string(st));
    return EXIT_SKIP;
  }
  MDR_OK_(m, st);
  mdr_stream stream = NULL;
  MDR_OK_(m, mdr_backend_stream_create(m->backend, &stream));
  m->stream = (cudaStream_t)stream;

  /* Arena from the scaled-down preset. */
  mdr_model_config cfg;
  if (model_config(&cfg) != 0) {
    fprintf(stderr, "decode_loop: preset qwen3-next-80b missing\n");
    goto fail;
  }
  mdr_limits lim = {.max_batch_tokens = MAX_TOKENS, .max_seq_len = 4096, .kv_block_size = 16,
                    .max_batch_size = 64};
  mdr_sizes sizes;
  MDR_OK_(m, mdr_sizes_from_config(&cfg, &lim, &sizes));
  MDR_OK_(m, mdr_arena_create(m->backend, &sizes, &m->arena));
  MDR_OK_(m, mdr_arena_set_zero_strategy(m->arena, MDR_ZERO_MEMSET));
  m->hidden = cfg.hidden_size;
  m->vocab = cfg.vocab_size;
  m->qkv_dim = (cfg.num_attention_heads * (cfg.attn_gated ? 2 : 1) + 2 * cfg.num_key_value_heads) *
               cfg.head_dim;
  m->experts = cfg.num_experts_per_tok;
  m->max_tokens = mdr_arena_max_batch_tokens(m->arena);
  m->max_rows = ceil16(m->max_tokens);
  if (m->max_tokens > MAX_TOKENS || m->hidden % 8 || m->qkv_dim % 8) {
    fprintf(stderr, "decode_loop: unsupported shape\n");
    goto fail;
  }
  printf("decode_loop: arena %.1f MiB (qwen3-next-80b scaled: H %zu, V %zu, qkv_dim %zu, %zu "
         "experts/token, M %zu)\n",
         (double)mdr_arena_slab_bytes(m->arena) / 1048576.0, m->hidden, m->vocab, m->qkv_dim,
         m->experts, m->max_tokens);

  /* Weights: fixed seed, made before any capture. */
  const size_t H = m->hidden, V = m->vocab, Q = m->qkv_dim, K = m->experts;
  size_t most = V * H > K * H * H ? V * H : K * H * H;
  if (Q * H > most) most = Q * H;
  host_w = malloc(most * sizeof *host_w);
  if (!host_w) goto fail;
  uint64_t wrng = opt.seed ^ 0x5eed5eed5eedull;
  if (make_weights(&m->emb, V * H, 0.0f, 1.0f, &wrng, host_w) ||
      make_weights(&m->w_qkv, Q * H, 0.0f, 1.0f / sqrtf((float)H), &wrng, host_w) ||
      make_weights(&m->w_o, H * Q, 0.0f, 1.0f / sqrtf((float)Q), &wrng, host_w) ||
      make_weights(&m->w_exp, K * H * H, 0.0f, 1.0f / sqrtf((float)H), &wrng, host_w) ||
      make_weights(&m->w_lm, V * H, 0.0f, 1.0f / sqrtf((float)H), &wrng, host_w) ||
      make_weights(&m->gamma_in, H, 1.0f, 0.1f, &wrng, host_w) ||
      make_weights(&m->gamma_post, H, 1.0f, 0.1f, &wrng, host_w) ||
      make_weights(&m->gamma_final, H, 1.0f, 0.1f, &wrng, host_w))
    goto fail;
  free(host_w);
  host_w = NULL;

  /* cuBLASLt: handle, one matmul descriptor (BF16 in/out, F32 compute,
   * W transposed), the workspace in gdn_fla_scratch, 16 heuristics. */
  LT_OK(cublasLtCreate(&m->lt));
  LT_OK(cublasLtMatmulDescCreate(&m->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  {
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LT_OK(cublasLtMatmulDescSetAttribute(m->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_OK(cublasLtMatmulDescSetAttribute(m->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  }
  m->workspace = arena_ptr(m, MDR_BUF_GDN_FLA_SCRATCH);
  m->workspace_bytes = mdr_arena_bytes(m->arena, MDR_BUF_GDN_FLA_SCRATCH);
  if (m->workspace_bytes > WORKSPACE_CAP) m->workspace_bytes = WORKSPACE_CAP;
  if (!m->workspace) m->workspace_bytes = 0;
  if (m->workspace_bytes) CUDA_OK(cudaMemset(m->workspace, 0, m->workspace_bytes));
  m->gemm[GEMM_QKV] = (gemm_def){"qkv", MDR_BUF_NORM_OUTPUT, MDR_BUF_COUNT, MDR_BUF_QKV_OUTPUT,
                                 m->w_qkv, Q, H, 0.0f};
  m->gemm[GEMM_O] = (gemm_def){"o_proj", MDR_BUF_QKV_OUTPUT, MDR_BUF_HIDDEN_STATES,
                               MDR_BUF_RESIDUAL, m->w_o, H, Q, 1.0f};
  m->gemm[GEMM_EXPERTS] = (gemm_def){"experts", MDR_BUF_NORM_OUTPUT, MDR_BUF_COUNT,
                                     MDR_BUF_EXPERT_DOWN_OUT, m->w_exp, K * H, H, 0.0f};
  m->gemm[GEMM_LM_HEAD] = (gemm_def){"lm_head", MDR_BUF_NORM_OUTPUT, MDR_BUF_COUNT,
                                     MDR_BUF_LOGITS, m->w_lm, V, H, 0.0f};
  if (plan_gemms(m) != 0) goto fail;
  printf("decode_loop: cuBLASLt workspace = gdn_fla_scratch, %zu bytes; %d heuristics "
         "(4 GEMMs x rows 16..%zu)\n",
         m->workspace_bytes, GEMM_COUNT * (int)(m->max_rows / ROW_TILE), m->max_rows);
  {
    /* The guard in action: one tile more than the logits buffer holds. */
    char msg[256];
    gemm_def probe = m->gemm[GEMM_LM_HEAD];
    size_t too_many = mdr_arena_bytes(m->arena, MDR_BUF_LOGITS) / (V * 2) + ROW_TILE;
    if (gemm_fits(m, &probe, ceil16(too_many), msg, sizeof msg) == MDR_OK) {
      fprintf(stderr, "decode_loop: the overrun guard accepted an oversized GEMM\n");
      goto fail;
    }
    printf("decode_loop: overrun guard: %s\n", msg);
  }

  /* Host and pinned buffers, events, the schedule's RNG. */
  CUDA_OK(cudaMallocHost((void **)&ids_pinned, m->max_tokens * sizeof *ids_pinned));
  ids = malloc(m->max_tokens * sizeof *ids);
  logits_a = malloc(m->max_tokens * V * sizeof *logits_a);
  logits_b = malloc(m->max_tokens * V * sizeof *logits_b);
  bucket = malloc(opt.steps * sizeof *bucket);
  scratch = malloc(opt.steps * sizeof *scratch);
  for (int s = 0; s < SERIES_COUNT; ++s) samples[s] = malloc(opt.steps * sizeof(double));
  if (!ids || !logits_a || !logits_b || !bucket || !scratch || !samples[0] || !samples[1] ||
      !samples[2] || !samples[3])
    goto fail;
  CUDA_OK(cudaEventCreate(&ev0));
  CUDA_OK(cudaEventCreate(&ev1));
  uint64_t rng = opt.seed;

  /* Warm-up: one eager step per GEMM shape loads every kernel before the
   * first capture and before timing. */
  for (size_t rows = ROW_TILE; rows <= m->max_rows; rows += ROW_TILE) {
    size_t t = rows < m->max_tokens ? rows : m->max_tokens;
    timing tm;
    fill_ids(&rng, ids, t, V);
    if (eager_step(m, ids_pinned, ids, t, true, ev0, ev1, &tm) != 0) goto fail;
  }

  /* The graph cache: EXACT, memset zeroing, the body above; every count
   * captured up front so that the timed steps are replays. */
  mdr_graph_cache_options go;
  mdr_graph_cache_options_default(&go);
  go.mode = MDR_GRAPH_EXACT;
  go.zero = MDR_ZERO_MEMSET;
  go.body = decode_body;
  go.user = m;
  MDR_OK_(m, mdr_graph_cache_create(m->arena, stream, &go, &cache));
  {
    size_t counts[MAX_TOKENS];
    for (size_t i = 0; i < m->max_tokens; ++i) counts[i] = i + 1;
    MDR_OK_(m, mdr_graph_cache_prepare(cache, counts, m->max_tokens));
    CUDA_OK(cudaStreamSynchronize(m->stream));
    mdr_graph_stats gs;
    MDR_OK_(m, mdr_graph_cache_stats(cache, &gs));
    printf("decode_loop: %zu graphs captured in %.1f ms%s\n", gs.graphs, gs.capture_us / 1e3,
           gs.graphs == 0 ? " (graphs disabled: MDR_DISABLE_GRAPHS=1, the graph path is eager)"
                          : "");
  }

  /* The loop: each step eagerly and through the cache (alternating which
   * goes first), logits of the first `tokens` rows compared bit for bit. */
  size_t last_tokens = 1;
  for (size_t step = 0; step < opt.steps; ++step) {
    size_t t = pick_tokens(&rng, m->max_tokens);
    fill_ids(&rng, ids, t, V);
    timing te, tg;
    uint16_t *eager_out = logits_a, *graph_out = logits_b;
    if (step % 2 == 0) {
      if (eager_step(m, ids_pinned, ids, t, true, ev0, ev1, &te) || read_logits(m, eager_out, t) ||
          graph_step(m, cache, ids, t, ev0, ev1, &tg) || read_logits(m, graph_out, t))
        goto fail;
    } else {
      if (graph_step(m, cache, ids, t, ev0, ev1, &tg) || read_logits(m, graph_out, t) ||
          eager_step(m, ids_pinned, ids, t, true, ev0, ev1, &te) || read_logits(m, eager_out, t))
        goto fail;
    }
    size_t first;
    size_t diffs = count_diffs(eager_out, graph_out, t * V, &first);
    if (diffs) {
      ++mismatched_steps;
      if (printed++ < MAX_PRINTED_MISMATCHES)
        printf("MISMATCH step %zu (%zu tokens): %zu of %zu logits differ; first at row %zu col "
               "%zu: eager 0x%04x graph 0x%04x\n",
               step, t, diffs, t * V, first / V, first % V, eager_out[first], graph_out[first]);
    }
    bucket[step] = bucket_of(t);
    samples[SERIES_EAGER_HOST][step] = te.host_us;
    samples[SERIES_GRAPH_HOST][step] = tg.host_us;
    samples[SERIES_EAGER_GPU][step] = te.gpu_us;
    samples[SERIES_GRAPH_GPU][step] = tg.gpu_us;
    last_tokens = t;
    if ((step + 1) % 50 == 0 || step + 1 == opt.steps) {
      summary so_far;
      summarize(samples, bucket, step + 1, -1, scratch, &so_far);
      printf("step %zu/%zu: mismatched steps %zu; median host us eager %.1f graph %.1f\n",
             step + 1, opt.steps, mismatched_steps, so_far.median[SERIES_EAGER_HOST],
             so_far.median[SERIES_GRAPH_HOST]);
      fflush(stdout);
    }
  }

  /* Why the zeroing matters: the last step's ids once more, eagerly, with
   * zero_all_rows skipped. moe_output still holds that step's sums, the
   * accumulation adds on top of them, and the logits change. */
  bool zeroing_shown = false;
  {
    timing tz;
    size_t first;
    if (eager_step(m, ids_pinned, ids, last_tokens, true, ev0, ev1, &tz) ||
        read_logits(m, logits_a, last_tokens) ||
        eager_step(m, ids_pinned, ids, last_tokens, false, ev0, ev1, &tz) ||
        read_logits(m, logits_b, last_tokens))
      goto fail;
    size_t diffs = count_diffs(logits_a, logits_b, last_tokens * V, &first);
    zeroing_shown = diffs > 0;
    printf("without zeroing (%zu tokens, moe_output not cleared): %zu of %zu logits differ%s\n",
           last_tokens, diffs, last_tokens * V,
           zeroing_shown ? " -- the zeroed rows are required" : " -- UNEXPECTED");
  }

  /* Report. */
  summary per[BUCKET_COUNT], all;
  printf("\n%-7s %6s | %12s %12s %8s | %12s %12s %8s\n", "tokens", "steps", "eager host",
         "graph host", "speedup", "eager GPU", "graph GPU", "speedup");
  for (int b = 0; b <= BUCKET_COUNT; ++b) {
    summary *s = b < BUCKET_COUNT ? &per[b] : &all;
    summarize(samples, bucket, opt.steps, b < BUCKET_COUNT ? b : -1, scratch, s);
    printf("%-7s %6zu | %9.1f us %9.1f us %7.2fx | %9.1f us %9.1f us %7.2fx\n",
           b < BUCKET_COUNT ? bucket_name[b] : "all", s->steps, s->median[SERIES_EAGER_HOST],
           s->median[SERIES_GRAPH_HOST],
           ratio(s->median[SERIES_EAGER_HOST], s->median[SERIES_GRAPH_HOST]),
           s->median[SERIES_EAGER_GPU], s->median[SERIES_GRAPH_GPU],
           ratio(s->median[SERIES_EAGER_GPU], s->median[SERIES_GRAPH_GPU]));
  }
  printf("(medians per step; host = wall time to enqueue + synchronize, GPU = events)\n");
  mdr_graph_stats gs;
  MDR_OK_(m, mdr_graph_cache_stats(cache, &gs));
  printf("graph cache: %zu graphs, %" PRIu64 " hits, %" PRIu64 " misses, %" PRIu64
         " eager steps, %" PRIu64 " fallbacks\n",
         gs.graphs, gs.hits, gs.misses, gs.eager_steps, gs.eager_fallbacks);
  if (opt.json && write_json(opt.json, &opt, m, per, &all, mismatched_steps, &gs) != 0) goto fail;

  if (mismatched_steps) {
    printf("FAIL: %zu of %zu steps differ between eager and graph\n", mismatched_steps, opt.steps);
  } else if (!zeroing_shown) {
    printf("FAIL: skipping the zeroing did not change the logits\n");
  } else {
    printf("OK: %zu steps bit-identical (eager vs graph)\n", opt.steps);
    rc = 0;
  }

fail:
  /* Every resource, in reverse order; each release accepts "never made". */
  if (rc != 0 && m->stream) (void)cudaStreamSynchronize(m->stream);
  mdr_graph_cache_destroy(cache);
  if (ev0) cudaEventDestroy(ev0);
  if (ev1) cudaEventDestroy(ev1);
  for (int gi = 0; gi < GEMM_COUNT; ++gi)
    for (int si = 0; si < MAX_SHAPES; ++si) {
      gemm_plan *p = &m->plan[gi][si];
      if (p->a) cublasLtMatrixLayoutDestroy(p->a);
      if (p->b) cublasLtMatrixLayoutDestroy(p->b);
      if (p->c) cublasLtMatrixLayoutDestroy(p->c);
      if (p->d) cublasLtMatrixLayoutDestroy(p->d);
    }
  if (m->op) cublasLtMatmulDescDestroy(m->op);
  if (m->lt) cublasLtDestroy(m->lt);
  void *weights[] = {m->emb, m->w_qkv, m->w_o, m->w_exp, m->w_lm,
                     m->gamma_in, m->gamma_post, m->gamma_final};
  for (size_t i = 0; i < sizeof weights / sizeof *weights; ++i)
    if (weights[i]) cudaFree(weights[i]);
  if (ids_pinned) cudaFreeHost(ids_pinned);
  mdr_arena_destroy(m->arena);
  if (m->backend && m->stream) mdr_backend_stream_destroy(m->backend, (mdr_stream)m->stream);
  mdr_backend_destroy(m->backend);
  free(host_w);
  free(ids);
  free(logits_a);
  free(logits_b);
  free(bucket);
  free(scratch);
  for (int s = 0; s < SERIES_COUNT; ++s) free(samples[s]);
  return rc;
}
