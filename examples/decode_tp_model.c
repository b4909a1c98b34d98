/* mdr example — the TP decode loop's model (decode_tp_model.h): weights,
 * their slices, cuBLASLt GEMMs and the bodies (EXACT and DYNAMIC) with
 * their two all-reduces per layer.
 *
 * GEMMs run BF16 in and out with F32 accumulation, on ceil16(tokens) rows,
 * with one algorithm per (GEMM, row tile) chosen once at init: a given row
 * count always runs the same kernels, eagerly or replayed, which is what
 * makes their results bit-identical. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "decode_kernels.h"
#include "decode_tp_kernels.h"
#include "decode_tp_model.h"

#define BF16_BYTES 2
/* Weights: the seed is mixed with this so weights and the token schedule
 * differ; RMSNorm gains are 1 ± 0.1, the rest scaled by 1/sqrt(fan-in). */
#define WEIGHT_SEED_SALT 0x5eed5eed5eedull
#define GAMMA_SPREAD 0.1f

_Static_assert(TP_MAX_TOKENS % TP_ROW_TILE == 0, "GEMM rows never pass M");
_Static_assert(TP_QKV % (8 * TP_RANKS) == 0 && TP_FFN % (8 * TP_RANKS) == 0,
               "slices are whole multiples of 8 BF16");

/* ---- weights on the host ---------------------------------------------------- */


/* `count` BF16 values offset + scale * U[-1, 1), or NULL when out of memory. */
static uint16_t *make_host(size_t count, float offset, float scale, uint64_t *state) {
  uint16_t *w = malloc(count * sizeof *w);
  if (w)
    for (size_t i = 0; i < count; ++i) w[i] = ex_float_to_bf16(offset + scale * ex_uniform_pm1(state));
  return w;
}

int tp_host_weights_make(tp_host_weights *w, uint64_t seed) {
  const size_t H = TP_HIDDEN, Q = TP_QKV, F = TP_FFN, V = TP_VOCAB;
  uint64_t s = seed ^ WEIGHT_SEED_SALT;
  memset(w, 0, sizeof *w);
  if (!(w->emb = make_host(V * H, 0.0f, 1.0f, &s))) goto fail;
  for (int l = 0; l < TP_LAYERS; ++l) {
    tp_host_layer *L = &w->layer[l];
    if (!(L->qkv = make_host(Q * H, 0.0f, 1.0f / sqrtf((float)H), &s)) ||
        !(L->o = make_host(H * Q, 0.0f, 1.0f / sqrtf((float)Q), &s)) ||
        !(L->up = make_host(F * H, 0.0f, 1.0f / sqrtf((float)H), &s)) ||
        !(L->down = make_host(H * F, 0.0f, 1.0f / sqrtf((float)F), &s)) ||
        !(L->gamma_attn = make_host(H, 1.0f, GAMMA_SPREAD, &s)) ||
        !(L->gamma_mlp = make_host(H, 1.0f, GAMMA_SPREAD, &s)))
      goto fail;
  }
  if (!(w->lm = make_host(V * H, 0.0f, 1.0f / sqrtf((float)H), &s)) ||
      !(w->gamma_final = make_host(H, 1.0f, GAMMA_SPREAD, &s)))
    goto fail;
  return 0;
fail:
  fprintf(stderr, "decode_tp: out of host memory for the weights\n");
  tp_host_weights_free(w);
  return -1;
}

void tp_host_weights_free(tp_host_weights *w) {
  free(w->emb);
  free(w->lm);
  free(w->gamma_final);
  for (int l = 0; l < TP_LAYERS; ++l) {
    tp_host_layer *L = &w->layer[l];
    free(L->qkv);
    free(L->o);
    free(L->up);
    free(L->down);
    free(L->gamma_attn);
    free(L->gamma_mlp);
  }
  memset(w, 0, sizeof *w);
}

/* ---- slices on the device --------------------------------------------------- */

/* cudaMalloc a dense rows x cols BF16 block and copy it (blocking) from the
 * host block at src whose rows are src_ld elements apart. */
static int upload_block(void **out, const uint16_t *src, size_t src_ld, size_t rows, size_t cols) {
  CUDA_OK(cudaMalloc(out, rows * cols * BF16_BYTES));
  CUDA_OK(cudaMemcpy2D(*out, cols * BF16_BYTES, src, src_ld * BF16_BYTES, cols * BF16_BYTES, rows,
                       cudaMemcpyHostToDevice));
  return 0;
fail:
  return -1;
}

/* Column-parallel slice of W[n, k]: rows [r*n/tp, (r+1)*n/tp). */
static int upload_rows_slice(void **out, const uint16_t *w, size_t n, size_t k, int tp, int r) {
  const size_t part = n / (size_t)tp;
  return upload_block(out, w + (size_t)r * part * k, k, part, k);
}

/* Row-parallel slice of W[n, k]: columns [r*k/tp, (r+1)*k/tp) of every row. */
static int upload_cols_slice(void **out, const uint16_t *w, size_t n, size_t k, int tp, int r) {
  const size_t part = k / (size_t)tp;
  return upload_block(out, w + (size_t)r * part, k, n, part);
}

/* ---- arena ------------------------------------------------------------------- */

void *tp_arena_ptr(const tp_model *m, mdr_buffer b) {
  return (void *)(uintptr_t)mdr_arena_ptr(m->arena, b);
}

void tp_sizes(int tp, mdr_sizes *s) {
  const size_t M = TP_MAX_TOKENS, H = TP_HIDDEN;
  memset(s, 0, sizeof *s);
  s->max_batch_tokens = M;
  s->logits_rows = M;
  s->bytes[MDR_BUF_TOKEN_IDS] = M * sizeof(uint32_t);
  s->bytes[MDR_BUF_HIDDEN_STATES] = M * H * BF16_BYTES;                  /* residual stream */
  s->bytes[MDR_BUF_NORM_OUTPUT] = M * H * BF16_BYTES;
  s->bytes[MDR_BUF_QKV_OUTPUT] = M * (TP_QKV / (size_t)tp) * BF16_BYTES;
  s->bytes[MDR_BUF_ATTN_OUTPUT] = M * H * BF16_BYTES;                    /* all-reduced */
  s->bytes[MDR_BUF_FFN_GATE_UP_FUSED] = M * (TP_FFN / (size_t)tp) * BF16_BYTES;
  s->bytes[MDR_BUF_MOE_OUTPUT] = M * H * BF16_BYTES;                     /* all-reduced */
  s->bytes[MDR_BUF_LOGITS] = M * TP_VOCAB * BF16_BYTES;
  s->bytes[MDR_BUF_GDN_FLA_SCRATCH] = TP_WORKSPACE_BYTES;                /* cuBLASLt workspace */
}

/* `rows` rows of `width` BF16 at the start of buffer b fit in it; exact:
 * the buffer must be exactly M such rows (the all-reduce's rows). */
static bool holds(const tp_model *m, mdr_buffer b, size_t rows, size_t width, bool exact) {
  const size_t have = mdr_arena_bytes(m->arena, b), need = rows * width * BF16_BYTES;
  if (have != 0 && (exact ? have == need : have >= need)) return true;
  fprintf(stderr, "decode_tp: %s: arena buffer %s holds %zu bytes; %zu rows x %zu BF16 need %zu%s\n",
          m->name, mdr_buffer_name(b), have, rows, width, need, exact ? " exactly" : "");
  return false;
}

/* ---- cuBLASLt --------------------------------------------------------------- */

/* Column-major view: Yᵀ[n, rows] = op(W)[n, k] · Xᵀ[k, rows] with W read
 * transposed (its column-major shape is k x n, ld k). One heuristic per
 * (GEMM, row tile); with one_algo_per_gemm, the M-row tile's algorithm for
 * every tile that cuBLASLt accepts it for (cublasLtMatmulAlgoCheck, within
 * the workspace), the tile's own heuristic for the others. */
static int plan_gemms(tp_model *m) {
  cublasLtMatmulPreference_t pref = NULL;
  const size_t tiles = m->max_tokens / TP_ROW_TILE;
  LT_OK(cublasLtMatmulPreferenceCreate(&pref));
  LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &m->workspace_bytes, sizeof m->workspace_bytes));
  m->one_algo_tiles = 0;
  for (int gi = 0; gi < TPG_COUNT; ++gi) {
    const tp_gemm_def *g = &m->gemm[gi];
    if (!holds(m, g->x, m->max_tokens, g->k, false) || !holds(m, g->d, m->max_tokens, g->n, false))
      goto fail;
    /* the M-row tile first: with one_algo_per_gemm the others try its algorithm */
    for (size_t i = 0; i < tiles; ++i) {
      const size_t ti = tiles - 1 - i, rows = (ti + 1) * TP_ROW_TILE;
      tp_gemm_plan *p = &m->plan[gi][ti];
      LT_OK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, g->k, g->n, g->k));
      LT_OK(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, g->k, rows, g->k));
      LT_OK(cublasLtMatrixLayoutCreate(&p->d, CUDA_R_16BF, g->n, rows, g->n));
      if (m->one_algo_per_gemm && i > 0) {
        const tp_gemm_plan *full = &m->plan[gi][tiles - 1];
        cublasLtMatmulHeuristicResult_t chk;
        memset(&chk, 0, sizeof chk);
        if (cublasLtMatmulAlgoCheck(m->lt, m->op, p->a, p->b, p->d, p->d, &full->algo, &chk) ==
                CUBLAS_STATUS_SUCCESS &&
            chk.workspaceSize <= m->workspace_bytes) {
          p->algo = full->algo;
          ++m->one_algo_tiles;
          continue;
        }
      }
      cublasLtMatmulHeuristicResult_t r;
      int found = 0;
      memset(&r, 0, sizeof r);
      LT_OK(cublasLtMatmulAlgoGetHeuristic(m->lt, m->op, p->a, p->b, p->d, p->d, pref, 1, &r, &found));
      if (found < 1 || r.state != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "decode_tp: %s: no cuBLASLt algorithm for GEMM %s at %zu rows\n", m->name,
                g->name, rows);
        goto fail;
      }
      p->algo = r.algo;
      if (m->one_algo_per_gemm && i == 0) ++m->one_algo_tiles; /* the M-row tile: its own */
    }
  }
  cublasLtMatmulPreferenceDestroy(pref);
  return 0;
fail:
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  return -1;
}

static mdr_status run_gemm(tp_model *m, int gi, const void *w, size_t rows, cudaStream_t s) {
  const tp_gemm_def *g = &m->gemm[gi];
  if (rows == 0 || rows % TP_ROW_TILE || rows > m->max_tokens) return MDR_ERR_OUT_OF_RANGE;
  const tp_gemm_plan *p = &m->plan[gi][rows / TP_ROW_TILE - 1];
  const float alpha = 1.0f, beta = 0.0f;
  void *d = tp_arena_ptr(m, g->d);
  cublasStatus_t ls = cublasLtMatmul(m->lt, m->op, &alpha, w, p->a, tp_arena_ptr(m, g->x), p->b, &beta,
                                     d, p->d, d, p->d, &p->algo, m->workspace, m->workspace_bytes, s);
  if (ls != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "decode_tp: %s: cublasLtMatmul (%s, %zu rows): %s\n", m->name, g->name, rows,
            cublasLtGetStatusString(ls));
    return MDR_ERR_BACKEND;
  }
  return MDR_OK;
}

/* ---- the body ---------------------------------------------------------------- */

static mdr_status kernel_status(const tp_model *m, cudaError_t e, const char *what) {
  if (e == cudaSuccess) return MDR_OK;
  fprintf(stderr, "decode_tp: %s: %s: %s\n", m->name, what, cudaGetErrorString(e));
  return MDR_ERR_BACKEND;
}

/* After a row-parallel GEMM: sum its partial sums in `buf` over the ranks
 * (tp > 1) and add them to the residual stream h, for `tokens` rows (with
 * count_ptr: the first min(*count_ptr, tokens) rows are summed by mdr's
 * kernels, all `tokens` by NCCL's; the add covers the counted rows when
 * fused, all `tokens` rows otherwise, where the rows past the count are
 * zero). The descriptor's residual does the add inside the all-reduce;
 * otherwise dtp_residual_add after it. Both: h = round(h + round(sum)). */
static mdr_status reduce_and_add(const tp_body_user *u, mdr_buffer buf, size_t tokens, mdr_dptr count_ptr,
                                 mdr_stream s) {
  tp_model *m = u->m;
  const bool fused = m->tp > 1 && u->fuse_residual;
  if (m->tp > 1) {
    mdr_all_reduce_desc d = mdr_all_reduce_desc_make(buf, MDR_DTYPE_BF16, tokens);
    d.algo = u->algo;
    d.count_ptr = count_ptr;
    if (fused) d.residual = MDR_BUF_HIDDEN_STATES;
    mdr_status st = mdr_all_reduce(m->arena, &d, s);
    if (st != MDR_OK) {
      fprintf(stderr, "decode_tp: %s: all-reduce (%s%s) of %s (%zu rows%s): %s (%s)\n", m->name,
              mdr_all_reduce_algo_name(u->algo), fused ? ", fused residual" : "", mdr_buffer_name(buf), tokens,
              count_ptr ? ", counted" : "", mdr_status_string(st), mdr_backend_last_error(m->backend));
      return st;
    }
  }
  if (fused) return MDR_OK;
  return kernel_status(m, dtp_residual_add(tp_arena_ptr(m, MDR_BUF_HIDDEN_STATES), tp_arena_ptr(m, buf),
                                           tokens, TP_HIDDEN, (cudaStream_t)s),
                       buf == MDR_BUF_ATTN_OUTPUT ? "residual add (attention)" : "residual add (mlp)");
}

#define BODY_OK(expr)            \
  do {                           \
    mdr_status b_ = (expr);      \
    if (b_ != MDR_OK) return b_; \
  } while (0)

/* The layers over `rows` rows (a multiple of 16), `tokens` of them real
 * (rows past it are zero on entry); the gather is the caller's. */
static mdr_status layers(const tp_body_user *u, mdr_stream stream, size_t tokens, size_t rows,
                         mdr_dptr count_ptr) {
  tp_model *m = u->m;
  cudaStream_t s = (cudaStream_t)stream;
  const size_t H = TP_HIDDEN;
  void *h = tp_arena_ptr(m, MDR_BUF_HIDDEN_STATES), *norm = tp_arena_ptr(m, MDR_BUF_NORM_OUTPUT);
  void *ffn = tp_arena_ptr(m, MDR_BUF_FFN_GATE_UP_FUSED);
  for (int l = 0; l < TP_LAYERS; ++l) {
    const tp_layer *L = &m->layer[l];
    /* attention block: column-parallel QKV, row-parallel O, one all-reduce + residual add */
    BODY_OK(kernel_status(m, dk_rmsnorm(norm, h, NULL, L->gamma_attn, tokens, rows, H, TP_RMS_EPS, s),
                          "rmsnorm (attention)"));
    BODY_OK(run_gemm(m, TPG_QKV, L->qkv, rows, s));
    BODY_OK(run_gemm(m, TPG_O, L->o, rows, s));
    BODY_OK(reduce_and_add(u, MDR_BUF_ATTN_OUTPUT, tokens, count_ptr, stream));
    /* MLP block: column-parallel up, SiLU, row-parallel down, one all-reduce + residual add */
    BODY_OK(kernel_status(m, dk_rmsnorm(norm, h, NULL, L->gamma_mlp, tokens, rows, H, TP_RMS_EPS, s),
                          "rmsnorm (mlp)"));
    BODY_OK(run_gemm(m, TPG_UP, L->up, rows, s));
    BODY_OK(kernel_status(m, dtp_silu(ffn, rows, m->ffn_local, s), "silu"));
    BODY_OK(run_gemm(m, TPG_DOWN, L->down, rows, s));
    BODY_OK(reduce_and_add(u, MDR_BUF_MOE_OUTPUT, tokens, count_ptr, stream));
  }
  BODY_OK(kernel_status(m, dk_rmsnorm(norm, h, NULL, m->gamma_final, tokens, rows, H, TP_RMS_EPS, s),
                        "rmsnorm (final)"));
  return run_gemm(m, TPG_LM, m->lm, rows, s);
}

mdr_status tp_body(void *user, mdr_stream stream, size_t tokens) {
  const tp_body_user *u = user;
  tp_model *m = u->m;
  const size_t rows = tp_ceil16(tokens);
  if (tokens == 0 || tokens > m->max_tokens) return MDR_ERR_OUT_OF_RANGE;
  BODY_OK(kernel_status(m,
                        dk_gather_embeddings(tp_arena_ptr(m, MDR_BUF_HIDDEN_STATES), m->emb,
                                             tp_arena_ptr(m, MDR_BUF_TOKEN_IDS), tokens, rows, TP_HIDDEN,
                                             TP_VOCAB, (cudaStream_t)stream),
                        "gather"));
  return layers(u, stream, tokens, rows, 0);
}

mdr_status tp_body_dynamic(void *user, mdr_stream stream, mdr_dptr count_ptr, size_t max_tokens) {
  const tp_body_user *u = user;
  tp_model *m = u->m;
  if (!count_ptr || max_tokens == 0 || max_tokens > m->max_tokens || max_tokens % TP_ROW_TILE)
    return MDR_ERR_OUT_OF_RANGE;
  /* rows past the count: zero from the gather on, through every layer */
  BODY_OK(kernel_status(m,
                        dtp_gather_counted(tp_arena_ptr(m, MDR_BUF_HIDDEN_STATES), m->emb,
                                           tp_arena_ptr(m, MDR_BUF_TOKEN_IDS),
                                           (const uint32_t *)(uintptr_t)count_ptr, max_tokens, TP_HIDDEN,
                                           TP_VOCAB, (cudaStream_t)stream),
                        "gather (counted)"));
  return layers(u, stream, max_tokens, max_tokens, count_ptr);
}

/* ---- setup and teardown ------------------------------------------------------ */

int tp_model_init(tp_model *m, const tp_host_weights *w, int tp, int rank) {
  const size_t H = TP_HIDDEN, Q = TP_QKV, F = TP_FFN, V = TP_VOCAB;
  if (tp < 1 || tp > TP_RANKS || rank < 0 || rank >= tp) {
    fprintf(stderr, "decode_tp: rank %d of a %d-way split: unsupported\n", rank, tp);
    return -1;
  }
  m->tp = tp;
  m->rank = rank;
  if (tp == 1) {
    snprintf(m->name, sizeof m->name, "tp1");
  } else {
    snprintf(m->name, sizeof m->name, "tp%d rank %d", tp, rank);
  }
  m->qkv_local = Q / (size_t)tp;
  m->ffn_local = F / (size_t)tp;
  m->max_tokens = mdr_arena_max_batch_tokens(m->arena);
  if (m->max_tokens != TP_MAX_TOKENS || !holds(m, MDR_BUF_HIDDEN_STATES, m->max_tokens, H, true) ||
      !holds(m, MDR_BUF_ATTN_OUTPUT, m->max_tokens, H, true) ||
      !holds(m, MDR_BUF_MOE_OUTPUT, m->max_tokens, H, true) ||
      mdr_arena_bytes(m->arena, MDR_BUF_TOKEN_IDS) < m->max_tokens * sizeof(uint32_t)) {
    fprintf(stderr, "decode_tp: %s: the arena was not made from tp_sizes(%d)\n", m->name, tp);
    return -1;
  }

  /* This rank's slices of the weights (blocking copies, before any capture). */
  if (upload_block(&m->emb, w->emb, H, V, H) || upload_block(&m->lm, w->lm, H, V, H) ||
      upload_block(&m->gamma_final, w->gamma_final, H, 1, H))
    return -1;
  for (int l = 0; l < TP_LAYERS; ++l) {
    const tp_host_layer *hl = &w->layer[l];
    tp_layer *L = &m->layer[l];
    if (upload_rows_slice(&L->qkv, hl->qkv, Q, H, tp, rank) ||  /* column-parallel */
        upload_cols_slice(&L->o, hl->o, H, Q, tp, rank) ||      /* row-parallel */
        upload_rows_slice(&L->up, hl->up, F, H, tp, rank) ||    /* column-parallel */
        upload_cols_slice(&L->down, hl->down, H, F, tp, rank) ||/* row-parallel */
        upload_block(&L->gamma_attn, hl->gamma_attn, H, 1, H) ||
        upload_block(&L->gamma_mlp, hl->gamma_mlp, H, 1, H))
      return -1;
  }
  /* cudaMemcpy from pageable memory may return before its DMA lands, on the
   * legacy stream, which the model's non-blocking stream does not wait for. */
  CUDA_OK(cudaStreamSynchronize(cudaStreamLegacy));

  /* cuBLASLt on this thread's current device: handle, one matmul descriptor
   * (BF16 in/out, F32 compute, W transposed), the workspace in the arena. */
  LT_OK(cublasLtCreate(&m->lt));
  LT_OK(cublasLtMatmulDescCreate(&m->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  {
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LT_OK(cublasLtMatmulDescSetAttribute(m->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_OK(cublasLtMatmulDescSetAttribute(m->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  }
  m->workspace = tp_arena_ptr(m, MDR_BUF_GDN_FLA_SCRATCH);
  m->workspace_bytes = m->workspace ? mdr_arena_bytes(m->arena, MDR_BUF_GDN_FLA_SCRATCH) : 0;
  if (m->workspace_bytes) { /* cleared once, as decode_loop does */
    CUDA_OK(cudaMemsetAsync(m->workspace, 0, m->workspace_bytes, m->stream));
    CUDA_OK(cudaStreamSynchronize(m->stream));
  }
  m->gemm[TPG_QKV] = (tp_gemm_def){"qkv", MDR_BUF_NORM_OUTPUT, MDR_BUF_QKV_OUTPUT, m->qkv_local, H};
  m->gemm[TPG_O] = (tp_gemm_def){"o_proj", MDR_BUF_QKV_OUTPUT, MDR_BUF_ATTN_OUTPUT, H, m->qkv_local};
  m->gemm[TPG_UP] = (tp_gemm_def){"up", MDR_BUF_NORM_OUTPUT, MDR_BUF_FFN_GATE_UP_FUSED, m->ffn_local, H};
  m->gemm[TPG_DOWN] = (tp_gemm_def){"down", MDR_BUF_FFN_GATE_UP_FUSED, MDR_BUF_MOE_OUTPUT, H, m->ffn_local};
  m->gemm[TPG_LM] = (tp_gemm_def){"lm_head", MDR_BUF_NORM_OUTPUT, MDR_BUF_LOGITS, V, H};
  if (plan_gemms(m) != 0) return -1;
  return 0;
fail:
  return -1;
}

void tp_model_fini(tp_model *m) {
  for (int gi = 0; gi < TPG_COUNT; ++gi)
    for (int si = 0; si < TP_MAX_SHAPES; ++si) {
      tp_gemm_plan *p = &m->plan[gi][si];
      if (p->a) cublasLtMatrixLayoutDestroy(p->a);
      if (p->b) cublasLtMatrixLayoutDestroy(p->b);
      if (p->d) cublasLtMatrixLayoutDestroy(p->d);
    }
  if (m->op) cublasLtMatmulDescDestroy(m->op);
  if (m->lt) cublasLtDestroy(m->lt);
  void *weights[] = {m->emb, m->lm, m->gamma_final};
  for (size_t i = 0; i < sizeof weights / sizeof *weights; ++i)
    if (weights[i]) cudaFree(weights[i]);
  for (int l = 0; l < TP_LAYERS; ++l) {
    tp_layer *L = &m->layer[l];
    void *lw[] = {L->qkv, L->o, L->up, L->down, L->gamma_attn, L->gamma_mlp};
    for (size_t i = 0; i < sizeof lw / sizeof *lw; ++i)
      if (lw[i]) cudaFree(lw[i]);
  }
  memset(m->plan, 0, sizeof m->plan);
}
