/* bench_tp_rank.h — private header of mdr-bench-tp's rank code: the state
 * of one rank (the thread that drives one GPU) and the pieces that the sweep
 * (mdr_bench_tp_rank.c) and the soak (mdr_bench_tp_soak.c) share. Not
 * installed, not part of the mdr API. */
#ifndef MDR_BENCH_TP_RANK_H
#define MDR_BENCH_TP_RANK_H

#include "bench_tp.h"

#ifdef TP_GPU

/* The mdr variants: each has its pair of caches (1 and TP_K all-reduces). */
typedef enum tp_variant { TP_V_AUTO, TP_V_1SHOT, TP_V_2SHOT, TP_V_DYN, TP_V_COUNT } tp_variant;

static inline tp_variant tp_variant_of(tp_path p) {
  switch (p) {
    case TP_MDR_1SHOT: return TP_V_1SHOT;
    case TP_MDR_2SHOT: return TP_V_2SHOT;
    case TP_MDR_DYN: return TP_V_DYN;
    default: return TP_V_AUTO;
  }
}

/* Steps with the ids already in token_ids (mdr_graph_cache_step_device):
 * every mdr path but mdr-graph, so that the one-shot, two-shot, AUTO
 * (mdr-graph-dev) and DYNAMIC figures hold the same step around the
 * all-reduce. */
static inline bool tp_device_steps(tp_path p) { return tp_is_mdr(p) && p != TP_MDR; }

typedef struct tp_body_ctx {
  mdr_arena *arena;
  int k;          /* all-reduces per body; 0: none (the single-GPU capture) */
  tp_variant v;   /* AUTO: mdr_all_reduce_desc_make; else mdr_all_reduce with its algo / count_ptr */
  size_t calls;   /* bodies enqueued (validation: the body really ran) */
} tp_body_ctx;

typedef struct tp_rank {
  tp_shared *sh;
  const tp_options *o;
  int rank, dev;
  mdr_backend *b;
  mdr_comm *comm;
  ncclComm_t nccl;
  cudaStream_t stream;
  cudaEvent_t *start, *stop; /* o->reps pairs */
  const volatile uint32_t *release_dev;
  uint32_t *timed_out_dev;
  uint32_t generation;
  double *cpu; /* o->reps samples */
  /* the sweep */
  tp_sweep *w;
  size_t bytes;       /* every buffer: w->m rows */
  void *plain;        /* cudaMalloc */
  void *winbuf;       /* ncclMemAlloc (cudaMalloc when that failed on a rank) */
  bool winbuf_nccl;
  ncclWindow_t win;   /* NULL: no window */
  mdr_arena *arena;
  bool kernels;       /* mdr's all-reduce kernels run on the arena, both ranks */
  mdr_graph_cache *cache[TP_V_COUNT][2]; /* [variant][0: 1 all-reduce, 1: TP_K]; NULL: path off */
  tp_body_ctx body[TP_V_COUNT][2];
  uint32_t *ids;      /* w->m ids */
  uint16_t *own;      /* pinned: this rank's pattern, every element of a buffer (bf16) */
  int8_t *sum;        /* both ranks' patterns summed (small integers) */
  uint16_t *back;     /* pinned: read-back */
  /* the case */
  size_t rows, count_el;
  cudaGraphExec_t exec1, exec_k;
} tp_rank;


/* ---- mdr_bench_tp_rank.c: the paths and one case ---- */

/* Wait for the other rank (a two-party barrier); dies on failure. */
void tp_barrier(tp_rank *rk);
/* A bf16 value as a float, and a float as bf16 (exact for the small
 * integers used here). */
float tp_from_bf16(uint16_t h);
uint16_t tp_to_bf16(float f);
/* Rank r's value at element i: an integer in -14..14, so that sums and
 * their products with powers of two are exact in bf16. */
int tp_pattern(int r, size_t i);
/* A cache over arena a: EXACT (body) or DYNAMIC (body_dynamic), fused
 * zeroing. TP_BUFFER is outside every zero plan, so a step's zeroing leaves
 * it alone and the graph is the id upload + the body. */
mdr_graph_cache *tp_make_cache(tp_rank *rk, mdr_arena *a, tp_body_ctx *body);
/* NCCL's all-reduce of the case's elements of buf, in place, on the rank's stream. */
void tp_nccl_all_reduce(tp_rank *rk, void *buf);
/* Path p at the case's row count: build, validate, time, record (rank 0),
 * or record it skipped with the reason. index/total: progress. */
void tp_run_case(tp_rank *rk, tp_path p, size_t index, size_t total);
/* One operation of a blocked timing: enqueued on rk->stream. */
typedef void (*tp_op_fn)(tp_rank *rk, void *ctx);
/* The blocked method (bench/README.md) on both ranks: TP_WARMUP untimed
 * ops, then per rep a blocker, an event, the op, an event; the ranks meet
 * and one store releases both blockers. Per rep the slower rank's µs count,
 * divided by `per` (the ops, or barriers, in one op). Rank 0 gets the
 * summary over o->reps (the other rank k_no_summary); `what` names the
 * phase in a failure. */
summary tp_time_blocked(tp_rank *rk, tp_op_fn op, void *ctx, double per, const char *what);
/* Drain the rank's stream, polling so that an NCCL failure or a peer that
 * never comes ends the run with a message instead of a hang. */
void tp_rank_sync(tp_rank *rk, const char *what);
/* ---- mdr_bench_tp_soak.c ---- */

/* --soak N: the soak of mdr's all-reduce across the epoch's wrap
 * (mdr_bench_tp_soak.c), run by both ranks instead of the sweeps. */
void tp_soak(tp_rank *rk);
/* ---- mdr_bench_tp_norm.c ---- */

/* --norm: the fused all-reduce + residual + RMSNorm against the unfused
 * chain and NCCL + RMSNorm (mdr_bench_tp_norm.c), run by both ranks
 * instead of the sweeps; rank 0 prints the tables and writes norm.csv and
 * norm.json. */
void tp_norm(tp_rank *rk);
/* ---- mdr_bench_tp_barrier.c ---- */

/* --barrier: mdr's block barrier against NCCL's LSA barrier, run by both
 * ranks instead of the sweeps; rank 0 prints the table and writes
 * barrier.csv and barrier.json. Built with NCCL's device API only (main
 * exits 77 without it). */
#if defined(MDR_HAVE_NCCL_DEVICE)
void tp_barrier_compare(tp_rank *rk);
#endif

#endif
#endif
