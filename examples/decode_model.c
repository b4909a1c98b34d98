/* mdr example — the decode loop's model (decode_model.h): config, weights,
 * cuBLASLt GEMMs with an overrun guard on every arena access, the body.
 *
 * Sizes: the arena comes from mdr_sizes_from_config on the qwen3-next-80b
 * preset scaled down (H 1024, V 8192, 4 query heads of 256 with a gate + 1 KV
 * head → qkv_dim 2560, 64 experts with top-4, M = 64 tokens by default,
 * --max-tokens up to 8192): big enough for real GEMM shapes, small enough
 * to start in well under a second at M = 64.
 *
 * cuBLASLt workspace: the arena's gdn_fla_scratch (GDN chunked-prefill
 * scratch, ~22 MB here, capped at 32 MiB). It is idle in a decode step and it
 * is not one of the 18 buffers the zeroing helpers clear, so no memset ever
 * touches it, neither at step start nor in the middle of a step. It is
 * cleared once at start-up so that no algorithm can read uninitialised bytes.
 *
 * Heuristics: one cublasLtMatmulAlgoGetHeuristic per GEMM and per padded row
 * count ceil16(t) ∈ {16, 32, ..., ceil16(M)} (16 in all at M = 64), chosen
 * before the first capture; eager steps and graphs use the same algorithm
 * for the same count, which is what makes their results bit-identical. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "decode_kernels.h"
#include "decode_model.h"

/* The scaled-down preset (see model_config) and its limits. */
#define MODEL_PRESET "qwen3-next-80b"
#define MODEL_MAX_SEQ_LEN 4096
#define MODEL_KV_BLOCK 16
#define MODEL_MAX_BATCH 64
/* Weights: the seed is mixed with this so weights and the token schedule
 * differ; RMSNorm gains are 1 ± 0.1, the rest scaled by 1/sqrt(fan-in). */
#define WEIGHT_SEED_SALT 0x5eed5eed5eedull
#define GAMMA_SPREAD 0.1f
#define BF16_BYTES 2

void *arena_ptr(const model *m, mdr_buffer b) {
  return (void *)(uintptr_t)mdr_arena_ptr(m->arena, b);
}

/* The overrun guard: `rows` rows of `width` BF16 at the start of arena buffer
 * `b` must lie inside it. On failure writes why into msg and returns
 * MDR_ERR_OUT_OF_RANGE; nothing is launched. */
static mdr_status fits(const model *m, mdr_buffer b, size_t rows, size_t width, const char *what,
                       char *msg, size_t msg_len) {
  size_t have = mdr_arena_bytes(m->arena, b);
  if (width != 0 && rows > SIZE_MAX / BF16_BYTES / width) {
    snprintf(msg, msg_len, "%s: %zu x %zu BF16 overflows size_t", what, rows, width);
    return MDR_ERR_OVERFLOW;
  }
  size_t need = rows * width * BF16_BYTES;
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
  for (int gi = 0; gi < GEMM_COUNT; ++gi) {
    m->plan[gi] = calloc(m->n_shapes, sizeof *m->plan[gi]);
    if (!m->plan[gi]) {
      fprintf(stderr, "decode_loop: out of host memory for %zu GEMM plans\n", m->n_shapes);
      return -1;
    }
  }
  LT_OK(cublasLtMatmulPreferenceCreate(&pref));
  LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &m->workspace_bytes, sizeof m->workspace_bytes));
  for (int gi = 0; gi < GEMM_COUNT; ++gi) {
    const gemm_def *g = &m->gemm[gi];
    const size_t most = gi == GEMM_LM_HEAD ? m->logit_rows : m->max_rows;
    for (size_t rows = ROW_TILE; rows <= most; rows += ROW_TILE) {
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
  if (rows == 0 || rows % ROW_TILE || rows > m->max_rows || !m->plans_ready) return MDR_ERR_OUT_OF_RANGE;
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

mdr_status decode_body(void *user, mdr_stream stream, size_t tokens) {
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
  const paged_set *ps = &m->paged.set[m->paged.use];
  const size_t seq_rows = tokens < PAGED_MAX_SEQS ? tokens : PAGED_MAX_SEQS; /* the graph's sequence bound */
  BODY_OK(kernel_status(dk_paged_attention(m->paged.out, arena_ptr(m, MDR_BUF_QKV_OUTPUT), m->qkv_dim,
                                           m->paged.k_cache, m->paged.v_cache, ps->in[PAGED_IN_POSITIONS],
                                           ps->in[PAGED_IN_SEQ_LENS], ps->in[PAGED_IN_QUERY],
                                           ps->in[PAGED_IN_BLOCKS], PAGED_BLOCKS_PER_SEQ, PAGED_BLOCK,
                                           PAGED_HEAD_DIM, PAGED_HEADS, PAGED_MAX_KEYS, ps->tokens_word,
                                           ps->sequences_word, seq_rows, s),
                        "paged attention"));
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
  BODY_OK(run_gemm(m, GEMM_LM_HEAD, rows < m->logit_rows ? rows : m->logit_rows, s));
  for (size_t k = 0; k < m->pad_kernels; ++k) BODY_OK(kernel_status(dk_empty(s), "pad kernel"));
  return MDR_OK;
}

mdr_status decode_sample(model *m, cudaStream_t stream, size_t tokens, uint32_t *next_ids) {
  if (tokens == 0 || tokens > m->max_tokens) return MDR_ERR_OUT_OF_RANGE;
  const size_t rows = logit_tokens(m, tokens);
  BODY_OK(kernel_fits(m, MDR_BUF_LOGITS, rows, m->vocab, "sample"));
  return kernel_status(dk_sample_argmax(next_ids, arena_ptr(m, MDR_BUF_LOGITS), rows, m->vocab, stream),
                       "sample");
}

mdr_status decode_body_sampled(void *user, mdr_stream stream, size_t tokens) {
  model *m = user;
  BODY_OK(decode_body(user, stream, tokens));
  return decode_sample(m, (cudaStream_t)stream, tokens, m->sample_ids);
}

/* ---- weights ------------------------------------------------------------ */


/* cudaMalloc `count` BF16 values: offset + scale * U[-1, 1), made on the host
 * from `state` and copied (blocking, before any capture). */
static int make_weights(void **out, size_t count, float offset, float scale, uint64_t *state,
                        uint16_t *host) {
  for (size_t i = 0; i < count; ++i) host[i] = ex_float_to_bf16(offset + scale * ex_uniform_pm1(state));
  CUDA_OK(cudaMalloc(out, count * sizeof(uint16_t)));
  CUDA_OK(cudaMemcpy(*out, host, count * sizeof(uint16_t), cudaMemcpyHostToDevice));
  return 0;
fail:
  return -1;
}

/* ---- setup and teardown ------------------------------------------------- */

int model_config(mdr_model_config *c) {
  if (mdr_model_preset(MODEL_PRESET, c) != MDR_OK) return -1;
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

mdr_limits model_limits(size_t max_tokens) {
  mdr_limits lim = {.max_batch_tokens = max_tokens, .max_seq_len = MODEL_MAX_SEQ_LEN,
                    .kv_block_size = MODEL_KV_BLOCK, .max_batch_size = MODEL_MAX_BATCH};
  return lim;
}

int model_init(model *m, const mdr_model_config *cfg, uint64_t seed) {
  uint16_t *host_w = NULL;
  m->hidden = cfg->hidden_size;
  m->vocab = cfg->vocab_size;
  m->qkv_dim = (cfg->num_attention_heads * (cfg->attn_gated ? 2 : 1) + 2 * cfg->num_key_value_heads) *
               cfg->head_dim;
  m->experts = cfg->num_experts_per_tok;
  m->max_tokens = mdr_arena_max_batch_tokens(m->arena);
  m->max_rows = ceil16(m->max_tokens);
  m->n_shapes = m->max_rows / ROW_TILE;
  {
    size_t cap = m->vocab ? mdr_arena_bytes(m->arena, MDR_BUF_LOGITS) / (m->vocab * BF16_BYTES) : 0;
    if (cap > m->max_rows) cap = m->max_rows;
    m->logit_rows = cap / ROW_TILE * ROW_TILE;
  }
  /* 16-byte accesses: widths are multiples of 8 BF16; GEMMs on whole
   * 16-row tiles of buffers with M rows: M % 16 == 0 */
  if (m->max_tokens == 0 || m->max_tokens % ROW_TILE || m->max_tokens > MAX_TOKENS_LIMIT ||
      m->hidden % 8 || m->qkv_dim % 8 || m->vocab % 8 || m->logit_rows == 0) {
    fprintf(stderr, "decode_loop: unsupported shape (M %zu, logit rows %zu)\n", m->max_tokens, m->logit_rows);
    goto fail;
  }
  printf("decode_loop: arena %.1f MiB (qwen3-next-80b scaled: H %zu, V %zu, qkv_dim %zu, %zu "
         "experts/token, M %zu, logits for up to %zu rows)\n",
         (double)mdr_arena_slab_bytes(m->arena) / 1048576.0, m->hidden, m->vocab, m->qkv_dim,
         m->experts, m->max_tokens, m->logit_rows);

  /* Weights: fixed seed, made before any capture. */
  const size_t H = m->hidden, V = m->vocab, Q = m->qkv_dim, K = m->experts;
  size_t most = V * H > K * H * H ? V * H : K * H * H;
  if (Q * H > most) most = Q * H;
  host_w = malloc(most * sizeof *host_w);
  if (!host_w) goto fail;
  uint64_t wrng = seed ^ WEIGHT_SEED_SALT;
  if (make_weights(&m->emb, V * H, 0.0f, 1.0f, &wrng, host_w) ||
      make_weights(&m->w_qkv, Q * H, 0.0f, 1.0f / sqrtf((float)H), &wrng, host_w) ||
      make_weights(&m->w_o, H * Q, 0.0f, 1.0f / sqrtf((float)Q), &wrng, host_w) ||
      make_weights(&m->w_exp, K * H * H, 0.0f, 1.0f / sqrtf((float)H), &wrng, host_w) ||
      make_weights(&m->w_lm, V * H, 0.0f, 1.0f / sqrtf((float)H), &wrng, host_w) ||
      make_weights(&m->gamma_in, H, 1.0f, GAMMA_SPREAD, &wrng, host_w) ||
      make_weights(&m->gamma_post, H, 1.0f, GAMMA_SPREAD, &wrng, host_w) ||
      make_weights(&m->gamma_final, H, 1.0f, GAMMA_SPREAD, &wrng, host_w))
    goto fail;
  free(host_w);
  host_w = NULL;

  /* cuBLASLt: handle, one matmul descriptor (BF16 in/out, F32 compute,
   * W transposed), the workspace in gdn_fla_scratch, 4 heuristics per
   * 16-row shape. */
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
  printf("decode_loop: cuBLASLt workspace = gdn_fla_scratch, %zu bytes; %zu heuristics "
         "(3 GEMMs x rows 16..%zu, lm_head x rows 16..%zu)\n",
         m->workspace_bytes, (GEMM_COUNT - 1) * m->n_shapes + m->logit_rows / ROW_TILE, m->max_rows,
         m->logit_rows);
  {
    /* The guard in action: one tile more than the logits buffer holds. */
    char msg[256];
    gemm_def probe = m->gemm[GEMM_LM_HEAD];
    size_t too_many = mdr_arena_bytes(m->arena, MDR_BUF_LOGITS) / (V * BF16_BYTES) + ROW_TILE;
    if (gemm_fits(m, &probe, ceil16(too_many), msg, sizeof msg) == MDR_OK) {
      fprintf(stderr, "decode_loop: the overrun guard accepted an oversized GEMM\n");
      goto fail;
    }
    printf("decode_loop: overrun guard: %s\n", msg);
  }
  return 0;
fail:
  free(host_w);
  return -1;
}

void model_fini(model *m) {
  for (int gi = 0; gi < GEMM_COUNT; ++gi) {
    for (size_t si = 0; m->plan[gi] && si < m->n_shapes; ++si) {
      gemm_plan *p = &m->plan[gi][si];
      if (p->a) cublasLtMatrixLayoutDestroy(p->a);
      if (p->b) cublasLtMatrixLayoutDestroy(p->b);
      if (p->c) cublasLtMatrixLayoutDestroy(p->c);
      if (p->d) cublasLtMatrixLayoutDestroy(p->d);
    }
    free(m->plan[gi]);
    m->plan[gi] = NULL;
  }
  if (m->op) cublasLtMatmulDescDestroy(m->op);
  if (m->lt) cublasLtDestroy(m->lt);
  void *weights[] = {m->emb, m->w_qkv, m->w_o, m->w_exp, m->w_lm,
                     m->gamma_in, m->gamma_post, m->gamma_final};
  for (size_t i = 0; i < sizeof weights / sizeof *weights; ++i)
    if (weights[i]) cudaFree(weights[i]);
  model_paged *p = &m->paged;
  void *paged[] = {p->k_cache, p->v_cache, p->out, p->eager_words};
  for (size_t i = 0; i < sizeof paged / sizeof *paged; ++i)
    if (paged[i]) cudaFree(paged[i]);
  for (int k = 0; k < 2; ++k)
    for (int i = 0; i < PAGED_INPUTS; ++i)
      if (p->set[k].in[i]) cudaFree(p->set[k].in[i]);
  free(p->k_host);
  free(p->v_host);
  memset(p, 0, sizeof *p);
}

int model_paged_init(model *m, uint64_t seed) {
  model_paged *p = &m->paged;
  const size_t kv = (size_t)PAGED_BLOCKS * PAGED_BLOCK * PAGED_HEAD_DIM;
  uint64_t rng = seed ^ 0x6b76636163686521ull;
  if (m->qkv_dim < PAGED_HEADS * PAGED_HEAD_DIM) {
    fprintf(stderr, "decode_loop: qkv_dim %zu holds fewer than %d query heads of %d\n", m->qkv_dim, PAGED_HEADS,
            PAGED_HEAD_DIM);
    return -1;
  }
  p->k_host = malloc(kv * sizeof *p->k_host);
  p->v_host = malloc(kv * sizeof *p->v_host);
  if (!p->k_host || !p->v_host) return -1;
  paged_fill_bf16(p->k_host, kv, &rng);
  paged_fill_bf16(p->v_host, kv, &rng);
  CUDA_OK(cudaMalloc(&p->k_cache, kv * sizeof *p->k_host));
  CUDA_OK(cudaMalloc(&p->v_cache, kv * sizeof *p->v_host));
  CUDA_OK(cudaMemcpy(p->k_cache, p->k_host, kv * sizeof *p->k_host, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(p->v_cache, p->v_host, kv * sizeof *p->v_host, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMalloc((void **)&p->out, (size_t)PAGED_MAX_SEQS * PAGED_HEADS * PAGED_HEAD_DIM * sizeof *p->out));
  CUDA_OK(cudaMalloc((void **)&p->eager_words, 2 * sizeof *p->eager_words));
  for (int k = 0; k < 2; ++k)
    for (int i = 0; i < PAGED_INPUTS; ++i)
      CUDA_OK(cudaMalloc((void **)&p->set[k].in[i], paged_input_bytes(i, m->max_tokens)));
  p->set[PAGED_EAGER].tokens_word = p->eager_words;
  p->set[PAGED_EAGER].sequences_word = p->eager_words + 1;
  printf("decode_loop: paged KV cache %d blocks of %d keys (head dim %d, %d query heads), block tables of %d; "
         "attention inputs staged as step inputs\n", PAGED_BLOCKS, PAGED_BLOCK, PAGED_HEAD_DIM, PAGED_HEADS,
         PAGED_BLOCKS_PER_SEQ);
  return 0;
fail:
  return -1;
}
