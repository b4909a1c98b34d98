/* mdr example — the decode loop's model: a scaled-down Qwen3-Next-80B whose
 * activations live in an mdr arena, its weights, its cuBLASLt GEMMs, and
 * the decode body (the work captured into each graph). decode_loop.c shows
 * how an engine uses mdr around it; this is the part mdr does not see.
 *
 * One step over `t` tokens (rows = ceil16(t), the rows every GEMM runs on):
 *   token_ids ─gather─► hidden_states ─RMSNorm─► norm_output
 *   norm_output ─GEMM Wqkv─► qkv_output                       (rows x qkv_dim)
 *   hidden_states + qkv_output ─GEMM Wo (beta 1)─► residual    (attention is skipped)
 *   residual ─RMSNorm─► norm_output ─GEMM Wexp─► expert_down_out (rows x K*H: K experts)
 *   moe_output += w(id, k) * expert k, one launch per expert   (needs the zeroed rows)
 *   residual + moe_output ─RMSNorm─► norm_output ─GEMM Wlm─► logits (rows x V; at most
 *                                                               logit_rows rows, see logit_tokens)
 * and, device-fed (--device-fed), logits ─argmax─► the next step's ids.
 * Beside them, after the QKV GEMM: paged decode attention (one query token
 * per sequence, dk_paged_attention) over a paged KV cache, reading the
 * step's positions, sequence lengths, query tokens and block table, which
 * mdr stages as step inputs (decode_model_paged.h); its output goes to
 * m->paged.out and is checked on its own (it does not feed o_proj). */
#ifndef MDR_EXAMPLE_DECODE_MODEL_H
#define MDR_EXAMPLE_DECODE_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <mdr/mdr.h>

#ifndef EXAMPLE_NAME
#define EXAMPLE_NAME "decode_loop"
#endif
#include "example_util.h"
#include "decode_model_paged.h"

#define DEFAULT_MAX_TOKENS 64         /* M by default: token counts run 1 .. M */
#define MAX_TOKENS_LIMIT 8192         /* the largest --max-tokens */
#define ROW_TILE 16                   /* GEMMs run on ceil16(tokens) rows */
#define WORKSPACE_CAP (32u << 20)     /* cuBLASLt workspace cap, bytes */
#define RMS_EPS 1e-6f

static inline size_t ceil16(size_t x) { return (x + ROW_TILE - 1) / ROW_TILE * ROW_TILE; }

/* ---- the model ------------------------------------------------------------ */

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

/* Where the attention reads one path's inputs: the step inputs'
 * destinations and the count words (a graph's: mdr_graph_cache_count_ptr
 * and _sequences_ptr; the eager path's: words of its own). */
typedef struct paged_set {
  uint32_t *in[PAGED_INPUTS];
  const uint32_t *tokens_word, *sequences_word;
} paged_set;

typedef struct model_paged {
  void *k_cache, *v_cache;   /* BF16 [PAGED_BLOCKS][PAGED_BLOCK][PAGED_HEAD_DIM], from the seed */
  uint16_t *k_host, *v_host; /* their host copies (the CPU reference) */
  float *out;                /* [PAGED_MAX_SEQS][PAGED_HEADS][PAGED_HEAD_DIM], device */
  paged_set set[2];          /* PAGED_GRAPH, PAGED_EAGER */
  int use;                   /* the set the body reads (captured graphs: PAGED_GRAPH) */
  uint32_t *eager_words;     /* the eager path's token and sequence counts, device */
} model_paged;

enum { PAGED_GRAPH, PAGED_EAGER };

typedef struct model {
  mdr_backend *backend; /* borrowed */
  mdr_arena *arena;     /* borrowed: every activation lives here */
  cudaStream_t stream;
  size_t hidden, vocab, qkv_dim, experts; /* H, V, qkv_dim, K (expert slots per token) */
  size_t max_tokens, max_rows;            /* M, ceil16(M) */
  size_t logit_rows;                      /* the most rows the LM head computes: the arena's
                                             logits buffer holds min(M, 160) rows */
  void *emb, *w_qkv, *w_o, *w_exp, *w_lm, *gamma_in, *gamma_post, *gamma_final;
  cublasLtHandle_t lt;
  cublasLtMatmulDesc_t op;
  void *workspace;
  size_t workspace_bytes;
  gemm_def gemm[GEMM_COUNT];
  gemm_plan *plan[GEMM_COUNT]; /* [gemm][rows / 16 - 1], n_shapes each */
  size_t n_shapes;             /* max_rows / 16 */
  bool plans_ready;
  size_t pad_kernels;          /* empty kernels appended to the body (capture-cost runs) */
  uint32_t *sample_ids;        /* decode_body_sampled's output: M ids, device memory */
  model_paged paged;
} model;

/* The scaled-down Qwen3-Next-80B the arena is sized from: H 1024, V 8192, 4
 * query heads of 256 with a gate + 1 KV head -> qkv_dim 2560, 64 experts
 * with top-4. 0, or -1 when the preset is missing. */
int model_config(mdr_model_config *c);

/* The limits of that arena, with M = max_tokens (1 .. MAX_TOKENS_LIMIT). */
mdr_limits model_limits(size_t max_tokens);

/* Set m up on an arena made from model_config/model_limits: shapes, weights
 * (from `seed`, made before any capture), the cuBLASLt handle, descriptors,
 * workspace (the arena's gdn_fla_scratch) and one heuristic per GEMM and row
 * count; prints what it made and shows the overrun guard refusing a GEMM.
 * m->backend, m->arena and m->stream must be set. 0 or -1 (message on
 * stderr); release with model_fini either way. */
int model_init(model *m, const mdr_model_config *cfg, uint64_t seed);

/* The paged attention's KV cache (from `seed`), output and the two sets of
 * input buffers (each input's destination at max_tokens, and the eager
 * path's count words); the graph set's count words are the cache's, set
 * by the caller once it exists. 0 or -1; model_fini releases them. */
int model_paged_init(model *m, uint64_t seed);

/* Release what model_init and model_paged_init made (not the arena, stream
 * or backend). */
void model_fini(model *m);

/* The decode work of one step: what the eager path enqueues after zeroing +
 * id upload, and what each graph captures (an mdr_capture_fn). Only
 * enqueues on `stream`: capture-safe. Ends with m->pad_kernels empty
 * kernels (0 by default). */
mdr_status decode_body(void *user, mdr_stream stream, size_t tokens);

/* Greedy sampling: next_ids[r] = argmax of logits row r, r < tokens, on the
 * device (dk_sample_argmax). Rows past `tokens` keep what they held. */
mdr_status decode_sample(model *m, cudaStream_t stream, size_t tokens, uint32_t *next_ids);

/* The device-fed body: decode_body, then decode_sample into m->sample_ids,
 * where the next step's mdr_graph_cache_step_device finds its ids. */
mdr_status decode_body_sampled(void *user, mdr_stream stream, size_t tokens);

/* The rows of a step over `tokens` tokens that get logits (and, device-fed,
 * a sampled id): the first min(tokens, logit_rows). All of them up to
 * M = 160; past that the arena's logits buffer (sized for decode and
 * verify, not prefill) holds 160 rows, as an engine computes logits for
 * the last token of each sequence only. */
static inline size_t logit_tokens(const model *m, size_t tokens) {
  return tokens < m->logit_rows ? tokens : m->logit_rows;
}

/* The device address of arena buffer b. */
void *arena_ptr(const model *m, mdr_buffer b);


#endif
