/* mdr example — the TP decode loop's model: a small bf16 transformer-ish
 * layer stack with cuBLASLt GEMMs, tensor-parallel over `tp` ranks (2 in
 * decode_tp.c, 1 for the reference), its activations in an mdr arena.
 * decode_tp.c shows how an engine drives mdr around it; this is the part
 * mdr does not see.
 *
 * One step over `t` tokens (rows = ceil16(t), the rows every GEMM runs on;
 * Q = TP_QKV, F = TP_FFN, widths per rank in brackets):
 *   token_ids ─gather─► hidden_states                             (the residual stream h)
 *   per layer:
 *     h ─RMSNorm─► norm_output ─GEMM Wqkv (column-parallel)─► qkv_output  [Q/tp]
 *     qkv_output ─GEMM Wo (row-parallel)─► attn_output            (partial sums, H)
 *     all-reduce attn_output (t rows) ; h += attn_output           (attention itself skipped)
 *     h ─RMSNorm─► norm_output ─GEMM Wup (column-parallel)─► ffn_gate_up_fused  [F/tp]
 *     SiLU ; ffn ─GEMM Wdown (row-parallel)─► moe_output           (partial sums, H)
 *     all-reduce moe_output (t rows) ; h += moe_output
 *   h ─RMSNorm─► norm_output ─GEMM Wlm (replicated)─► logits       (rows x V, every rank)
 *
 * The all-reduce and the residual add after it are one call,
 * mdr_all_reduce, whose descriptor carries the algorithm (NCCL's
 * kernel, or mdr's where they run) and, when asked, the residual add fused
 * into it (desc.residual = hidden_states): residual = round(residual +
 * round(sum)), the same two roundings as the separate dtp_residual_add.
 * A DYNAMIC graph's body (tp_body_dynamic) runs every layer on all M rows,
 * gathers the first *count rows (the rest are zero, and stay zero through
 * every layer), and hands the count word to the all-reduces.
 *
 * Column-parallel: rank r holds rows [r*n/tp, (r+1)*n/tp) of W[n, k] and
 * writes its slice of the output. Row-parallel: rank r holds columns
 * [r*k/tp, (r+1)*k/tp) of W[n, k], reads its slice of the input and writes
 * a partial sum of the whole output; the all-reduce (tp > 1 only) adds the
 * ranks' partial sums. Every weight is made once on the host (full size,
 * from the seed) and each model uploads its own slice, so TP=1 and TP=2
 * compute with the same numbers. */
#ifndef MDR_EXAMPLE_DECODE_TP_MODEL_H
#define MDR_EXAMPLE_DECODE_TP_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <mdr/mdr.h>

#ifndef EXAMPLE_NAME
#define EXAMPLE_NAME "decode_tp"
#endif
#include "example_util.h"

/* ---- the shape (a test build may shrink it with -D) -------------------------- */

#define TP_RANKS 2            /* the tensor-parallel width of decode_tp.c */
#ifndef TP_LAYERS
#define TP_LAYERS 4
#endif
#ifndef TP_HIDDEN
#define TP_HIDDEN 1024        /* H */
#endif
#ifndef TP_QKV
#define TP_QKV 3072           /* Q: q, k and v of H each (attention itself is skipped) */
#endif
#ifndef TP_FFN
#define TP_FFN 4096           /* F */
#endif
#ifndef TP_VOCAB
#define TP_VOCAB 8192         /* V */
#endif
#define TP_MAX_TOKENS 64      /* M: token counts run 1 .. M */
#define TP_ROW_TILE 16        /* GEMMs run on ceil16(tokens) rows */
#define TP_MAX_SHAPES (TP_MAX_TOKENS / TP_ROW_TILE)
#define TP_WORKSPACE_BYTES (32u << 20) /* cuBLASLt workspace (the arena's gdn_fla_scratch) */
#define TP_RMS_EPS 1e-6f

static inline size_t tp_ceil16(size_t x) { return (x + TP_ROW_TILE - 1) / TP_ROW_TILE * TP_ROW_TILE; }

/* ---- weights on the host (full size, shared read-only by every model) ------ */

/* Row-major BF16 bits. W[n, k]: Y[rows, n] = X[rows, k] · Wᵀ. */
typedef struct tp_host_layer {
  uint16_t *qkv;        /* [Q, H] */
  uint16_t *o;          /* [H, Q] */
  uint16_t *up;         /* [F, H] */
  uint16_t *down;       /* [H, F] */
  uint16_t *gamma_attn; /* [H] */
  uint16_t *gamma_mlp;  /* [H] */
} tp_host_layer;

typedef struct tp_host_weights {
  uint16_t *emb;         /* [V, H] */
  tp_host_layer layer[TP_LAYERS];
  uint16_t *lm;          /* [V, H] */
  uint16_t *gamma_final; /* [H] */
} tp_host_weights;

/* Make every weight from `seed` (RMSNorm gains 1 ± 0.1, embeddings U[-1, 1),
 * the rest U[-1, 1) / sqrt(fan-in)). 0, or -1 (out of memory; what was made
 * is freed). */
int tp_host_weights_make(tp_host_weights *w, uint64_t seed);
void tp_host_weights_free(tp_host_weights *w); /* accepts a zeroed or partly made w */

/* ---- one rank's model ------------------------------------------------------- */

enum { TPG_QKV, TPG_O, TPG_UP, TPG_DOWN, TPG_LM, TPG_COUNT };

typedef struct tp_gemm_def {
  const char *name;
  mdr_buffer x, d; /* input, output (arena buffers) */
  size_t n, k;     /* this rank's shape */
} tp_gemm_def;

typedef struct tp_gemm_plan {
  cublasLtMatrixLayout_t a, b, d;
  cublasLtMatmulAlgo_t algo;
} tp_gemm_plan;

typedef struct tp_layer {
  void *qkv, *o, *up, *down, *gamma_attn, *gamma_mlp; /* this rank's slices (device) */
} tp_layer;

typedef struct tp_model {
  char name[32];        /* "tp2 rank 0", "tp1": the prefix of its messages */
  int tp, rank;
  mdr_backend *backend; /* borrowed */
  mdr_arena *arena;     /* borrowed: every activation lives here */
  cudaStream_t stream;  /* borrowed */
  size_t qkv_local, ffn_local; /* Q / tp, F / tp */
  size_t max_tokens;           /* M */
  void *emb, *lm, *gamma_final;
  tp_layer layer[TP_LAYERS];
  cublasLtHandle_t lt;  /* one per model, made on the model's device */
  cublasLtMatmulDesc_t op;
  void *workspace;
  size_t workspace_bytes;
  tp_gemm_def gemm[TPG_COUNT];
  tp_gemm_plan plan[TPG_COUNT][TP_MAX_SHAPES]; /* [gemm][rows / 16 - 1] */
  /* Set before tp_model_init (default false): every row tile of a GEMM runs
   * the algorithm cuBLASLt picks for M rows (where it accepts the tile), so
   * a row's result does not depend on how many rows the GEMM ran on: what
   * a DYNAMIC graph (all M rows) needs to match an EXACT one (ceil16(t)). */
  bool one_algo_per_gemm;
  int one_algo_tiles;   /* set by init: (GEMM, row tile) pairs that run the M-row algorithm
                           (of TPG_COUNT * M / 16; 0 without one_algo_per_gemm) */
} tp_model;

/* The user pointer of the body: a model and how its all-reduces run. Each
 * graph cache (and eager path) of a rank gets its own, over the rank's one
 * model. At tp == 1 there is no all-reduce; algo and fuse_residual are
 * ignored. */
typedef struct tp_body_user {
  tp_model *m;
  mdr_all_reduce_algo algo;   /* desc.algo: MDR_ALL_REDUCE_NCCL, or MDR_ALL_REDUCE_AUTO (mdr's kernels where they run) */
  bool fuse_residual; /* desc.residual = hidden_states, instead of dtp_residual_add after it */
} tp_body_user;

/* The arena sizes of one rank of a `tp`-way split (1 or TP_RANKS): only the
 * buffers the model uses, M = TP_MAX_TOKENS rows each; hidden_states,
 * attn_output and moe_output are exactly M rows of H BF16 (the all-reduce's
 * rows). Every rank of a split gets the same sizes. */
void tp_sizes(int tp, mdr_sizes *s);

/* Set m up for rank `rank` of a `tp`-way split on an arena made from
 * tp_sizes(tp): uploads this rank's weight slices, makes the cuBLASLt
 * handle, descriptor and one heuristic per GEMM and row tile. The calling
 * thread's current device must be the arena's device (cudaSetDevice first);
 * m->backend, m->arena and m->stream must be set. Blocking (before any
 * capture). 0, or -1 (message on stderr); release with tp_model_fini either
 * way. */
int tp_model_init(tp_model *m, const tp_host_weights *w, int tp, int rank);

/* Release what tp_model_init made (not the arena, stream or backend). */
void tp_model_fini(tp_model *m);

/* The decode work of one step (an mdr_capture_fn; user: a tp_body_user):
 * the eager path enqueues it after zeroing + id upload, each EXACT graph
 * captures it. With tp > 1 it calls mdr_all_reduce twice per layer
 * (`tokens` rows). Only enqueues on `stream`: capture-safe. */
mdr_status tp_body(void *user, mdr_stream stream, size_t tokens);

/* The same for a DYNAMIC graph (an mdr_capture_dynamic_fn): every kernel
 * and GEMM runs on max_tokens (= M) rows; the gather and the all-reduces
 * read the step's count at count_ptr (desc.count_ptr). Rows at and past the
 * count are zero at every layer and are never results. */
mdr_status tp_body_dynamic(void *user, mdr_stream stream, mdr_dptr count_ptr, size_t max_tokens);

/* The device address of arena buffer b. */
void *tp_arena_ptr(const tp_model *m, mdr_buffer b);


#endif
