/* mdr_bench_tp_rank.c — one rank of mdr-bench-tp: the thread that drives
 * one GPU. Both ranks run this same code, so they issue the same
 * collectives in the same order (the lockstep of include/mdr/comm.h); they
 * meet at a two-party barrier wherever the method needs both (before each
 * release of the blocker, around captures, around collective setup and
 * teardown). Rank 0 alone writes the results (sh->res) and prints.
 *
 * Device and streams: the thread sets its device first and keeps it; every
 * CUDA and NCCL call below runs on it (mdr's backend calls set their own
 * device and restore the caller's). One non-blocking stream per rank, made
 * by the mdr backend, carries everything of that rank: the graph cache's
 * steps, the NCCL calls, the NCCL graphs, the events, the copies.
 *
 * Per sweep (sizes, tokens): a cudaMalloc buffer (nccl-eager, nccl-graph),
 * an ncclMemAlloc buffer registered as a symmetric window (nccl-window), and
 * an mdr arena on the communicator whose slab is mdr's own symmetric
 * window, with a pair of graph caches (bodies of 1 and TP_K all-reduces)
 * per mdr variant: AUTO (mdr-graph with host steps and mdr-graph-dev with
 * device steps; they have graphs of their own in each cache), one-shot,
 * two-shot (EXACT, device steps) and DYNAMIC (mdr-dyn: one graph, the row
 * count read on the device, device steps). Per row count and path: build
 * (capture the NCCL graphs, or prepare the caches), validate the single op
 * and the TP_K batch against the sum of both ranks' patterns (mdr-dyn: and
 * every row past the count untouched), warm up, then time. A path mdr
 * cannot run at a size (one-shot over its scratch, mdr's kernels absent)
 * is recorded as skipped, with the reason.
 *
 * --soak N instead: tp_soak, at the end of this file. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "all_reduce_impl.h" /* the soak sets the protocol counters (mdr_all_reduce_state) */
#include "bench_tp.h"

#ifdef TP_GPU

/* The mdr variants: each has its pair of caches (1 and TP_K all-reduces). */
typedef enum tp_variant { TP_V_AUTO, TP_V_1SHOT, TP_V_2SHOT, TP_V_DYN, TP_V_COUNT } tp_variant;

static tp_variant tp_variant_of(tp_path p) {
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
static bool tp_device_steps(tp_path p) { return tp_is_mdr(p) && p != TP_MDR; }

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

/* What AUTO runs for `rows` rows of the rank's buffer (counted: a count
 * read on the device), as mdr_all_reduce_choice answers. */
static mdr_all_reduce_algo tp_choice(const tp_rank *rk, size_t rows, int counted) {
  mdr_all_reduce_desc d = mdr_all_reduce_desc_make(TP_BUFFER, MDR_DTYPE_BF16, rows);
  if (counted) d.count_ptr = mdr_arena_token_ids(rk->arena); /* any device word: only its presence counts here */
  return mdr_all_reduce_choice(rk->arena, &d);
}

/* ---- small pieces ---- */

static void tp_barrier(tp_rank *rk) {
  int r = pthread_barrier_wait(&rk->sh->barrier);
  if (r != 0 && r != PTHREAD_BARRIER_SERIAL_THREAD) tp_die("rank %d: pthread_barrier_wait failed (%d)", rk->rank, r);
}

static uint16_t tp_to_bf16(float f) { /* exact for the small integers used here */
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (uint16_t)(u >> 16);
}

static float tp_from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Rank r's value at element i: an integer in -14..14, so that sums and
 * their products with powers of two are exact in bf16. */
static int tp_pattern(int r, size_t i) { return (int)((i * 7 + (i >> 9) * 3 + (size_t)r * 11) % 29) - 14; }

/* Drain the rank's stream, polling so that an NCCL failure or a peer that
 * never comes ends the run with a message instead of a hang. */
static void tp_rank_sync(tp_rank *rk, const char *what) {
  const double t0 = now_us();
  for (unsigned spin = 0;; spin++) {
    cudaError_t e = cudaStreamQuery(rk->stream);
    if (e == cudaSuccess) break;
    if (e != cudaErrorNotReady) tp_die("rank %d: %s: the stream failed: %s (%s)", rk->rank, what, cudaGetErrorName(e),
                                       cudaGetErrorString(e));
    ncclResult_t async = ncclSuccess;
    TP_NCCL(rk->nccl, ncclCommGetAsyncError(rk->nccl, &async));
    if (async != ncclSuccess && async != ncclInProgress)
      tp_die("rank %d: %s: NCCL asynchronous error: %s: %s", rk->rank, what, ncclGetErrorString(async),
             ncclGetLastError(rk->nccl));
    if (now_us() - t0 > TP_SYNC_TIMEOUT_S * 1e6)
      tp_die("rank %d: %s: the stream did not drain in %d s (the other rank stuck, or a collective unmatched)",
             rk->rank, what, TP_SYNC_TIMEOUT_S);
    if (spin % 64 == 63) sched_yield();
  }
  if (rk->sh->words[1 + rk->rank])
    tp_die("rank %d: %s: a blocker kernel timed out: the ranks took > 2 s to enqueue one timed rep (did a host call "
           "wait for the GPU?)",
           rk->rank, what);
  tp_progress(NULL);
}

static void *tp_buffer_of(tp_rank *rk, tp_path p) {
  switch (p) {
    case TP_NCCL_EAGER:
    case TP_NCCL_GRAPH: return rk->plain;
    case TP_NCCL_WINDOW: return rk->winbuf;
    default: return (void *)(uintptr_t)mdr_arena_ptr(rk->arena, TP_BUFFER);
  }
}

/* EXACT bodies: AUTO through mdr_all_reduce_desc_make (mdr-graph,
 * mdr-graph-dev), one-shot and two-shot through mdr_all_reduce. */
static mdr_status tp_body_fn(void *user, mdr_stream stream, size_t tokens) {
  tp_body_ctx *c = user;
  c->calls++;
  for (int i = 0; i < c->k; i++) {
    mdr_status st;
    if (c->v == TP_V_AUTO) {
      {
        const mdr_all_reduce_desc d = mdr_all_reduce_desc_make(TP_BUFFER, MDR_DTYPE_BF16, tokens);
        st = mdr_all_reduce(c->arena, &d, stream);
      }
    } else {
      mdr_all_reduce_desc d = mdr_all_reduce_desc_make(TP_BUFFER, MDR_DTYPE_BF16, tokens);
      d.algo = c->v == TP_V_1SHOT ? MDR_ALL_REDUCE_ONE_SHOT : MDR_ALL_REDUCE_TWO_SHOT;
      st = mdr_all_reduce(c->arena, &d, stream);
    }
    if (st != MDR_OK) return st;
  }
  return MDR_OK;
}

/* The DYNAMIC body (mdr-dyn): max_tokens (= max_batch_tokens) rows at most,
 * the step's count read by the kernel from count_ptr; AUTO. */
static mdr_status tp_body_dynamic_fn(void *user, mdr_stream stream, mdr_dptr count_ptr, size_t max_tokens) {
  tp_body_ctx *c = user;
  c->calls++;
  for (int i = 0; i < c->k; i++) {
    mdr_all_reduce_desc d = mdr_all_reduce_desc_make(TP_BUFFER, MDR_DTYPE_BF16, max_tokens);
    d.count_ptr = count_ptr;
    d.algo = MDR_ALL_REDUCE_AUTO;
    mdr_status st = mdr_all_reduce(c->arena, &d, stream);
    if (st != MDR_OK) return st;
  }
  return MDR_OK;
}

/* A cache over arena a: EXACT (body) or DYNAMIC (body_dynamic), fused
 * zeroing. TP_BUFFER is outside every zero plan, so a step's zeroing leaves
 * it alone and the graph is the id upload + the body. */
static mdr_graph_cache *tp_make_cache(tp_rank *rk, mdr_arena *a, tp_body_ctx *body) {
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.zero = MDR_ZERO_FUSED; /* the product setting: zeroing (nothing here) + id upload in one node; DYNAMIC needs it */
  o.user = body;
  if (body->v == TP_V_DYN) {
    o.mode = MDR_GRAPH_DYNAMIC;
    o.dynamic_impl = MDR_DYNAMIC_NODE_UPDATE; /* device steps of it read no host memory */
    o.body_dynamic = tp_body_dynamic_fn;
  } else {
    o.mode = MDR_GRAPH_EXACT;
    o.body = tp_body_fn;
  }
  mdr_graph_cache *c = NULL;
  TP_MDR(rk->b, mdr_graph_cache_create(a, rk->stream, &o, &c));
  return c;
}

#define TP_NCCL_ONLY_HINT \
  "(an mdr path failed: --paths nccl-eager,nccl-graph,nccl-window measures the NCCL paths alone)"

static size_t tp_body_calls(const tp_rank *rk) {
  size_t n = 0;
  for (int v = 0; v < TP_V_COUNT; v++) n += rk->body[v][0].calls + rk->body[v][1].calls;
  return n;
}

/* The ids of a device step: already in the arena's token_ids (nothing is
 * read from host memory). Passed as token_ids' own address, not 0: the
 * graph is the same, but prepare_device keys its graph by the address it
 * is given while step_device turns 0 into token_ids' address, so a graph
 * prepared with 0 would be captured again by the first step. */
static mdr_dptr tp_device_ids(const tp_rank *rk) { return mdr_arena_token_ids(rk->arena); }

/* One step of cache c: host ids (mdr-graph) or device ids (mdr-graph-dev). */
static void tp_mdr_step(tp_rank *rk, mdr_graph_cache *c, bool device) {
  mdr_status st = device ? mdr_graph_cache_step_device(c, tp_device_ids(rk), rk->rows)
                         : mdr_graph_cache_step(c, rk->ids, rk->rows);
  if (st != MDR_OK)
    tp_die("rank %d: %s at %zu rows: %s%s: %s %s", rk->rank,
           device ? "mdr_graph_cache_step_device" : "mdr_graph_cache_step", rk->rows, mdr_status_string(st),
           st == MDR_ERR_CAPTURE ? " (the capture failed, the step ran eagerly)" : "", mdr_backend_last_error(rk->b),
           TP_NCCL_ONLY_HINT);
}

/* Capture the graph of the case's rows in cache c (a body of k all-reduces). */
static void tp_mdr_prepare(tp_rank *rk, mdr_graph_cache *c, int k, bool device) {
  mdr_status st = device ? mdr_graph_cache_prepare_device(c, tp_device_ids(rk), &rk->rows, 1)
                         : mdr_graph_cache_prepare(c, &rk->rows, 1);
  if (st != MDR_OK)
    tp_die("rank %d: %s of %zu rows, a body of %d all-reduce%s: %s: %s %s", rk->rank,
           device ? "mdr_graph_cache_prepare_device" : "mdr_graph_cache_prepare", rk->rows, k, k == 1 ? "" : "s",
           mdr_status_string(st), mdr_backend_last_error(rk->b), TP_NCCL_ONLY_HINT);
}

static void tp_nccl_all_reduce(tp_rank *rk, void *buf) {
  TP_NCCL(rk->nccl, ncclAllReduce(buf, buf, rk->count_el, ncclBfloat16, ncclSum, rk->nccl, rk->stream));
}

/* The operation of path p: one all-reduce, or TP_K back to back. */
static void tp_op(tp_rank *rk, tp_path p, bool batch) {
  switch (p) {
    case TP_NCCL_EAGER:
      for (int i = 0; i < (batch ? TP_K : 1); i++) tp_nccl_all_reduce(rk, rk->plain);
      break;
    case TP_NCCL_GRAPH:
    case TP_NCCL_WINDOW: TP_CUDA(cudaGraphLaunch(batch ? rk->exec_k : rk->exec1, rk->stream)); break;
    default: tp_mdr_step(rk, rk->cache[tp_variant_of(p)][batch], tp_device_steps(p)); break;
  }
}

/* A CUDA graph of k all-reduces of the case's rows of buf, instantiated and
 * uploaded as mdr's graph cache does (capture, then one instantiate call
 * that uploads); *us: host µs of all that. */
static cudaGraphExec_t tp_capture_nccl(tp_rank *rk, void *buf, int k, double *us) {
  const double t0 = now_us();
  cudaGraph_t g = NULL;
  cudaGraphExec_t x = NULL;
  TP_CUDA(cudaStreamBeginCapture(rk->stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < k; i++) {
    ncclResult_t r = ncclAllReduce(buf, buf, rk->count_el, ncclBfloat16, ncclSum, rk->nccl, rk->stream);
    if (r != ncclSuccess) {
      (void)cudaStreamEndCapture(rk->stream, &g);
      TP_NCCL(rk->nccl, r);
    }
  }
  TP_CUDA(cudaStreamEndCapture(rk->stream, &g));
  cudaGraphInstantiateParams ip;
  memset(&ip, 0, sizeof ip);
  ip.flags = cudaGraphInstantiateFlagUpload;
  ip.uploadStream = rk->stream;
  TP_CUDA(cudaGraphInstantiateWithParams(&x, g, &ip));
  if (ip.result_out != cudaGraphInstantiateSuccess)
    tp_die("rank %d: cudaGraphInstantiateWithParams of %d all-reduces: result %d", rk->rank, k, (int)ip.result_out);
  if (us) *us = now_us() - t0;
  TP_CUDA(cudaGraphDestroy(g));
  return x;
}

/* ---- the case ---- */

static void tp_build(tp_rank *rk, tp_path p) {
  tp_shared *sh = rk->sh;
  sh->build_us[rk->rank] = NAN;
  if (p == TP_NCCL_GRAPH || p == TP_NCCL_WINDOW) {
    tp_barrier(rk);
    rk->exec1 = tp_capture_nccl(rk, tp_buffer_of(rk, p), 1, &sh->build_us[rk->rank]);
    tp_barrier(rk);
    rk->exec_k = tp_capture_nccl(rk, tp_buffer_of(rk, p), TP_K, NULL);
    tp_rank_sync(rk, "uploading the NCCL graphs");
  } else if (tp_is_mdr(p)) {
    const tp_variant v = tp_variant_of(p);
    const bool dev = tp_device_steps(p);
    mdr_graph_stats s0, s1;
    TP_MDR(rk->b, mdr_graph_cache_stats(rk->cache[v][0], &s0));
    tp_barrier(rk);
    tp_mdr_prepare(rk, rk->cache[v][0], 1, dev);
    TP_MDR(rk->b, mdr_graph_cache_stats(rk->cache[v][0], &s1));
    /* EXACT: one graph more per count; DYNAMIC: its one graph, captured at the sweep's first count */
    const size_t want = v == TP_V_DYN ? 1 : s0.graphs + 1;
    if (s1.graphs != want)
      tp_die("rank %d: %s: prepare of %zu rows left %zu graphs (expected %zu)", rk->rank, k_tp_path_names[p],
             rk->rows, s1.graphs, want);
    sh->build_us[rk->rank] = s1.captures > s0.captures ? s1.capture_us - s0.capture_us : NAN;
    tp_barrier(rk);
    tp_mdr_prepare(rk, rk->cache[v][1], TP_K, dev);
    tp_rank_sync(rk, "preparing the mdr graphs");
  }
  tp_barrier(rk);
}

static void tp_unbuild(tp_rank *rk) {
  tp_rank_sync(rk, "before destroying the NCCL graphs");
  if (rk->exec1) TP_CUDA(cudaGraphExecDestroy(rk->exec1));
  if (rk->exec_k) TP_CUDA(cudaGraphExecDestroy(rk->exec_k));
  rk->exec1 = rk->exec_k = NULL;
}

/* The rows an op of path p reduces at the case's count: rows, except for
 * mdr-dyn where mdr's kernels cannot run (AUTO then falls back to NCCL,
 * whose count is fixed at enqueue: every row of the buffer, as
 * include/mdr/comm.h says). */
static size_t tp_reduced_rows(const tp_rank *rk, tp_path p) {
  if (p == TP_MDR_DYN &&
      tp_choice(rk, rk->rows, 1) == MDR_ALL_REDUCE_NCCL)
    return rk->w->m;
  return rk->rows;
}

/* Fill the case's rows (and one guard row when there is one; mdr-dyn: every
 * row of the buffer) with this rank's pattern, run the op once, and check
 * every element: the reduced rows hold the sum of both patterns times
 * 2^(k-1) (k in-place all-reduces), the rows after them this rank's
 * pattern (untouched). Then zero them, so the timed ops sum zeros. */
static void tp_validate(tp_rank *rk, tp_path p, bool batch) {
  const size_t row_el = rk->w->row_bytes / 2;
  const size_t n_rows = p == TP_MDR_DYN ? rk->w->m : rk->rows < rk->w->m ? rk->rows + 1 : rk->rows;
  const size_t reduced_rows = tp_reduced_rows(rk, p);
  const size_t n_el = n_rows * row_el, reduced = reduced_rows * row_el;
  void *buf = tp_buffer_of(rk, p);
  const size_t bodies = tp_body_calls(rk);
  TP_CUDA(cudaMemcpyAsync(buf, rk->own, n_el * 2, cudaMemcpyHostToDevice, rk->stream));
  tp_rank_sync(rk, "validation: filling");
  tp_barrier(rk);
  tp_op(rk, p, batch);
  tp_rank_sync(rk, "validation: the operation");
  TP_CUDA(cudaMemcpyAsync(rk->back, buf, n_el * 2, cudaMemcpyDeviceToHost, rk->stream));
  tp_rank_sync(rk, "validation: reading back");
  const float scale = batch ? (float)(1u << (TP_K - 1)) : 1.0f;
  for (size_t i = 0; i < n_el; i++) {
    const float want = i < reduced ? (float)rk->sum[i] * scale : (float)tp_pattern(rk->rank, i);
    const float got = tp_from_bf16(rk->back[i]);
    if (got != want)
      tp_die("validation failed: rank %d, %s, %s, %zu rows (%zu B), %s: element %zu (row %zu) is %g, expected %g "
             "(%s)%s",
             rk->rank, k_tp_path_names[p], k_tp_sweep_names[rk->w->kind], rk->rows, rk->count_el * 2,
             batch ? "K-batch" : "single", i, i / row_el, (double)got, (double)want,
             i < reduced ? "sum of both ranks' patterns"
             : p == TP_MDR_DYN ? "a row past the step's count: a DYNAMIC all-reduce must leave it untouched"
                               : "guard row: must be untouched",
             tp_is_mdr(p) ? " " TP_NCCL_ONLY_HINT : "");
  }
  if (tp_is_mdr(p) && tp_body_calls(rk) != bodies)
    tp_die("rank %d: %s validation: the body ran during a step (%zu calls): the step was not a replay", rk->rank,
           k_tp_path_names[p], tp_body_calls(rk) - bodies);
  TP_CUDA(cudaMemsetAsync(buf, 0, n_el * 2, rk->stream));
  tp_rank_sync(rk, "validation: clearing");
  tp_barrier(rk);
}

static double tp_elapsed_us(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  TP_CUDA(cudaEventElapsedTime(&ms, a, b));
  return (double)ms * 1e3;
}

static double tp_median_of(const double *v, size_t n) {
  double *c = xmalloc(n * sizeof *c);
  memcpy(c, v, n * sizeof *c);
  double m = percentile(c, n, 0.5); /* sorts the copy */
  free(c);
  return m;
}

/* GPU µs of the op, the blocked method: both ranks enqueue a blocker, an
 * event, the op, an event; they meet at the barrier; rank 0 releases both
 * blockers with one store to the shared word. The events see GPU execution
 * only, both GPUs starting together. Per rep the slower rank's time counts
 * (the step waits for it); rank 0 summarizes. */
static void tp_time_gpu(tp_rank *rk, tp_path p, bool batch) {
  tp_shared *sh = rk->sh;
  const size_t reps = rk->o->reps;
  tp_barrier(rk);
  for (size_t i = 0; i < reps; i++) {
    rk->generation++;
    int e = tp_launch_blocker(rk->stream, rk->release_dev, rk->generation, TP_BLOCKER_TIMEOUT_NS, rk->timed_out_dev);
    TP_CUDA((cudaError_t)e);
    TP_CUDA(cudaEventRecord(rk->start[i], rk->stream));
    tp_op(rk, p, batch);
    TP_CUDA(cudaEventRecord(rk->stop[i], rk->stream));
    tp_barrier(rk);
    if (rk->rank == 0) __atomic_store_n((uint32_t *)&sh->words[0], rk->generation, __ATOMIC_RELEASE);
    if ((i + 1) % TP_DRAIN_EVERY == 0) tp_rank_sync(rk, batch ? "timing the K-batch" : "timing one op");
  }
  tp_rank_sync(rk, batch ? "timing the K-batch" : "timing one op");
  for (size_t i = 0; i < reps; i++)
    sh->samples[rk->rank][i] = tp_elapsed_us(rk->start[i], rk->stop[i]) / (batch ? TP_K : 1);
  tp_barrier(rk);
  if (rk->rank == 0) {
    tp_case *c = &sh->res->cases[sh->res->n_cases - 1];
    double *v = xmalloc(reps * sizeof *v);
    for (size_t i = 0; i < reps; i++) v[i] = fmax(sh->samples[0][i], sh->samples[1][i]);
    if (batch) {
      c->batch = summarize(v, reps);
    } else {
      c->gpu = summarize(v, reps);
      for (int r = 0; r < TP_RANKS; r++) c->gpu_rank_med[r] = tp_median_of(sh->samples[r], reps);
    }
    free(v);
  }
  tp_barrier(rk);
}

/* Host µs of the submitting call (ncclAllReduce, cudaGraphLaunch or
 * mdr_graph_cache_step), both ranks at once, each its own; the stream is
 * drained every TP_CPU_DRAIN calls (mdr's staging ring never waits). */
static void tp_time_cpu(tp_rank *rk, tp_path p) {
  tp_shared *sh = rk->sh;
  const size_t reps = rk->o->reps;
  tp_barrier(rk);
  for (size_t i = 0; i < reps; i++) {
    const double t0 = now_us();
    tp_op(rk, p, false);
    rk->cpu[i] = now_us() - t0;
    if ((i + 1) % TP_CPU_DRAIN == 0) tp_rank_sync(rk, "timing the CPU");
  }
  tp_rank_sync(rk, "timing the CPU");
  summary s = summarize(rk->cpu, reps);
  tp_barrier(rk);
  sh->res->cases[sh->res->n_cases - 1].cpu[rk->rank] = s; /* each rank its own field */
  tp_barrier(rk);
}

/* Why path p does not run at the case's count ("": it runs). Decided from
 * what both ranks share (the sweep's kernels flag, the bytes), so both
 * skip alike. */
static void tp_skip_reason(const tp_rank *rk, tp_path p, char *out, size_t n) {
  out[0] = '\0';
  const size_t bytes = rk->count_el * 2;
  if ((p == TP_MDR_1SHOT || p == TP_MDR_2SHOT) && !rk->kernels)
    snprintf(out, n, "mdr's all-reduce kernels cannot run on this arena (mdr_all_reduce_kernels 0; the "
                     "sweep's line says why)");
  else if (p == TP_MDR_1SHOT && bytes > MDR_ALL_REDUCE_ONE_SHOT_MAX_BYTES)
    snprintf(out, n, "%zu B > MDR_ALL_REDUCE_ONE_SHOT_MAX_BYTES (%zu B): one-shot refuses it", bytes,
             MDR_ALL_REDUCE_ONE_SHOT_MAX_BYTES);
}

static void tp_run_case(tp_rank *rk, tp_path p, size_t index, size_t total) {
  tp_shared *sh = rk->sh;
  char skip[sizeof ((tp_case *)0)->skip_reason];
  tp_skip_reason(rk, p, skip, sizeof skip);
  tp_barrier(rk);
  if (rk->rank == 0) {
    if (sh->res->n_cases == sh->res->cap_cases) tp_die("internal: more cases than counted");
    tp_case *c = &sh->res->cases[sh->res->n_cases++];
    memset(c, 0, sizeof *c);
    c->sweep = rk->w->kind;
    c->rows = rk->rows;
    c->bytes = rk->count_el * 2;
    c->path = p;
    c->gpu = c->batch = c->cpu[0] = c->cpu[1] = k_no_summary;
    c->build_us[0] = c->build_us[1] = NAN;
    c->auto_algo = tp_choice(rk, rk->rows, 0);
    c->auto_counted = tp_choice(rk, rk->rows, 1);
    if (skip[0]) {
      c->skipped = true;
      snprintf(c->skip_reason, sizeof c->skip_reason, "%s", skip);
    }
    fprintf(stderr, "%s[%zu/%zu] %s %zu rows %zu B %s%s%s", sh->progress_in_place ? "\r\033[K" : "", index, total,
            k_tp_sweep_names[rk->w->kind], rk->rows, c->bytes, k_tp_path_names[p], skip[0] ? " (skipped)" : "",
            sh->progress_in_place ? "" : "\n");
    fflush(stderr);
  }
  tp_progress(k_tp_path_names[p]);
  tp_barrier(rk);
  if (skip[0]) return;
  tp_build(rk, p);
  tp_validate(rk, p, false);
  tp_validate(rk, p, true);
  mdr_graph_stats s0[2], s1[2];
  const tp_variant v = tp_variant_of(p);
  if (tp_is_mdr(p)) {
    TP_MDR(rk->b, mdr_graph_cache_stats(rk->cache[v][0], &s0[0]));
    TP_MDR(rk->b, mdr_graph_cache_stats(rk->cache[v][1], &s0[1]));
  }
  for (int i = 0; i < TP_WARMUP; i++) tp_op(rk, p, false);
  tp_op(rk, p, true);
  tp_rank_sync(rk, "warm-up");
  tp_time_gpu(rk, p, false);
  tp_time_gpu(rk, p, true);
  tp_time_cpu(rk, p);
  uint64_t eager = 0;
  if (tp_is_mdr(p)) {
    TP_MDR(rk->b, mdr_graph_cache_stats(rk->cache[v][0], &s1[0]));
    TP_MDR(rk->b, mdr_graph_cache_stats(rk->cache[v][1], &s1[1]));
    eager = (s1[0].eager_steps - s0[0].eager_steps) + (s1[1].eager_steps - s0[1].eager_steps);
  }
  tp_unbuild(rk);
  sh->eager[rk->rank] = eager;
  tp_barrier(rk);
  if (rk->rank == 0) {
    tp_case *c = &sh->res->cases[sh->res->n_cases - 1];
    for (int r = 0; r < TP_RANKS; r++) {
      c->build_us[r] = sh->build_us[r];
      if (sh->eager[r] > c->eager_steps) c->eager_steps = sh->eager[r];
    }
    c->measured = true;
  }
  tp_barrier(rk);
}

/* ---- capture costs: prepare, count by count, with and without the collective ---- */

static void tp_capture_costs(tp_rank *rk, const mdr_sizes *sizes) {
  tp_shared *sh = rk->sh;
  tp_progress("capture costs");
  tp_barrier(rk);
  const size_t first = sh->res->n_captures; /* both ranks read it before rank 0 appends */
  tp_barrier(rk);
  if (rk->rank == 0)
    for (size_t i = 0; i < rk->w->n; i++) {
      tp_capture *c = &sh->res->captures[sh->res->n_captures++];
      *c = (tp_capture){.sweep = rk->w->kind, .rows = rk->w->rows[i], .bytes = rk->w->rows[i] * rk->w->row_bytes,
                        .tp_us = {NAN, NAN}, .single_us = NAN};
    }
  tp_barrier(rk);
  /* a fresh cache on the communicator's arena: the capture holds the all-reduce */
  tp_body_ctx body = {.arena = rk->arena, .k = 1};
  mdr_graph_cache *c = tp_make_cache(rk, rk->arena, &body);
  for (size_t i = 0; i < rk->w->n; i++) {
    mdr_graph_stats s0, s1;
    TP_MDR(rk->b, mdr_graph_cache_stats(c, &s0));
    tp_barrier(rk);
    TP_MDR(rk->b, mdr_graph_cache_prepare(c, &rk->w->rows[i], 1));
    TP_MDR(rk->b, mdr_graph_cache_stats(c, &s1));
    sh->res->captures[first + i].tp_us[rk->rank] = s1.capture_us - s0.capture_us;
    tp_progress(NULL);
  }
  tp_rank_sync(rk, "capture costs");
  mdr_graph_cache_destroy(c);
  tp_barrier(rk);
  /* one GPU, a plain arena of the same sizes, the same body without the collective */
  if (rk->rank == 0) {
    mdr_arena *a = NULL;
    TP_MDR(rk->b, mdr_arena_create(rk->b, sizes, &a));
    tp_body_ctx none = {.arena = a, .k = 0};
    c = tp_make_cache(rk, a, &none);
    for (size_t i = 0; i < rk->w->n; i++) {
      mdr_graph_stats s0, s1;
      TP_MDR(rk->b, mdr_graph_cache_stats(c, &s0));
      TP_MDR(rk->b, mdr_graph_cache_prepare(c, &rk->w->rows[i], 1));
      TP_MDR(rk->b, mdr_graph_cache_stats(c, &s1));
      sh->res->captures[first + i].single_us = s1.capture_us - s0.capture_us;
      tp_progress(NULL);
    }
    tp_rank_sync(rk, "capture costs, one GPU");
    mdr_graph_cache_destroy(c);
    mdr_arena_destroy(a);
  }
  tp_barrier(rk);
}

/* ---- a sweep ---- */

static void tp_sweep_setup(tp_rank *rk, tp_sweep *w, mdr_sizes *sizes) {
  tp_shared *sh = rk->sh;
  rk->w = w;
  rk->bytes = w->m * w->row_bytes;
  tp_progress("sweep setup");
  /* host side: ids, this rank's pattern, the sums */
  const size_t n_el = rk->bytes / 2;
  rk->ids = xmalloc(w->m * sizeof *rk->ids);
  for (size_t i = 0; i < w->m; i++) rk->ids[i] = TP_FIRST_TOKEN_ID + (uint32_t)i;
  TP_CUDA(cudaHostAlloc((void **)&rk->own, rk->bytes, cudaHostAllocPortable));
  TP_CUDA(cudaHostAlloc((void **)&rk->back, rk->bytes, cudaHostAllocPortable));
  rk->sum = xmalloc(n_el);
  for (size_t i = 0; i < n_el; i++) {
    rk->own[i] = tp_to_bf16((float)tp_pattern(rk->rank, i));
    rk->sum[i] = (int8_t)(tp_pattern(0, i) + tp_pattern(1, i));
  }
  /* nccl-eager, nccl-graph: plain device memory */
  TP_CUDA(cudaMalloc(&rk->plain, rk->bytes));
  TP_CUDA(cudaMemsetAsync(rk->plain, 0, rk->bytes, rk->stream));
  /* nccl-window: ncclMemAlloc, registered once (collective) when both ranks have it */
  static bool alloc_ok[TP_RANKS]; /* written by each rank for itself, read after the barrier */
  ncclResult_t r = ncclMemAlloc(&rk->winbuf, rk->bytes);
  alloc_ok[rk->rank] = r == ncclSuccess && rk->winbuf;
  if (!alloc_ok[rk->rank]) {
    fprintf(stderr, "note: rank %d: ncclMemAlloc of %zu B failed (%s); nccl-window uses cudaMalloc memory\n",
            rk->rank, rk->bytes, ncclGetErrorString(r));
    rk->winbuf = NULL;
  }
  tp_barrier(rk);
  const bool both = alloc_ok[0] && alloc_ok[1];
  tp_barrier(rk);
  rk->win = NULL;
  rk->winbuf_nccl = rk->winbuf != NULL;
  if (both) {
    tp_progress("ncclCommWindowRegister");
    r = ncclCommWindowRegister(rk->nccl, rk->winbuf, rk->bytes, &rk->win, NCCL_WIN_COLL_SYMMETRIC);
    if (r != ncclSuccess) {
      fprintf(stderr, "note: rank %d: ncclCommWindowRegister failed (%s: %s); nccl-window without a window\n",
              rk->rank, ncclGetErrorString(r), ncclGetLastError(rk->nccl));
      rk->win = NULL;
    }
  } else {
    if (rk->winbuf) TP_NCCL(rk->nccl, ncclMemFree(rk->winbuf));
    rk->winbuf_nccl = false;
    TP_CUDA(cudaMalloc(&rk->winbuf, rk->bytes));
  }
  /* a window on both ranks or on neither (as mdr's arena decides) */
  static bool has_win[TP_RANKS];
  has_win[rk->rank] = rk->win != NULL;
  tp_barrier(rk);
  const bool both_win = has_win[0] && has_win[1];
  tp_barrier(rk);
  if (!both_win && rk->win) {
    fprintf(stderr, "note: rank %d: the other rank has no window: deregistering this one\n", rk->rank);
    TP_NCCL(rk->nccl, ncclCommWindowDeregister(rk->nccl, rk->win));
    rk->win = NULL;
  }
  w->nccl_window[rk->rank] = rk->win != NULL;
  TP_CUDA(cudaMemsetAsync(rk->winbuf, 0, rk->bytes, rk->stream));
  /* mdr-graph, mdr-graph-dev: an arena on the communicator (collective), its slab one symmetric window */
  memset(sizes, 0, sizeof *sizes);
  sizes->max_batch_tokens = w->m;
  sizes->logits_rows = 1; /* no logits buffer */
  sizes->bytes[TP_BUFFER] = rk->bytes;
  sizes->bytes[MDR_BUF_TOKEN_IDS] = w->m * 4 > 256 ? w->m * 4 : 256; /* the graph cache uploads ids here */
  tp_progress("mdr_arena_create_on_comm");
  tp_barrier(rk);
  TP_MDR(rk->b, mdr_arena_create_on_comm(rk->comm, sizes, &rk->arena));
  w->mdr_window[rk->rank] = mdr_arena_window(rk->arena);
  /* mdr's own kernels (one-shot, two-shot): both ranks must have them; the
   * reason when not is the backend's last error of the arena's create */
  sh->flag[rk->rank] = mdr_all_reduce_kernels(rk->arena) != 0;
  if (!sh->flag[rk->rank])
    snprintf(sh->note[rk->rank], sizeof sh->note[rk->rank], "%s", mdr_backend_last_error(rk->b));
  tp_barrier(rk);
  rk->kernels = sh->flag[0] && sh->flag[1];
  if (rk->rank == 0) {
    w->ar_kernels = rk->kernels;
    w->ar_kernels_note[0] = '\0';
    for (int r = 0; r < TP_RANKS; r++)
      if (!sh->flag[r] && !w->ar_kernels_note[0])
        snprintf(w->ar_kernels_note, sizeof w->ar_kernels_note, "rank %d: mdr_backend_last_error: \"%s\"", r,
                 sh->note[r][0] ? sh->note[r] : "(empty)");
  }
  tp_barrier(rk);
  /* token_ids is the slab's first buffer (enum order, every other entry 0) */
  if (rk->rank == 0)
    w->mdr_buffer_offset = (size_t)(mdr_arena_ptr(rk->arena, TP_BUFFER) - mdr_arena_token_ids(rk->arena));
  size_t plan = 0;
  TP_MDR(rk->b, mdr_arena_zero_plan(rk->arena, w->m, NULL, 0, &plan));
  if (plan != 0) tp_die("internal: the arena's zero plan is not empty (%zu segments)", plan);
  TP_CUDA(cudaMemsetAsync((void *)(uintptr_t)mdr_arena_ptr(rk->arena, TP_BUFFER), 0, rk->bytes, rk->stream));
  /* the caches of each variant whose path is on (one-shot, two-shot: where
   * mdr's kernels run), made in the same order on both ranks (lockstep) */
  const tp_options *o = rk->o;
  const bool want[TP_V_COUNT] = {
      [TP_V_AUTO] = o->path_on[TP_MDR] || o->path_on[TP_MDR_DEV],
      [TP_V_1SHOT] = o->path_on[TP_MDR_1SHOT] && rk->kernels,
      [TP_V_2SHOT] = o->path_on[TP_MDR_2SHOT] && rk->kernels,
      [TP_V_DYN] = o->path_on[TP_MDR_DYN],
  };
  for (int v = 0; v < TP_V_COUNT; v++)
    for (int k = 0; k < 2; k++) {
      rk->body[v][k] = (tp_body_ctx){.arena = rk->arena, .k = k ? TP_K : 1, .v = (tp_variant)v};
      rk->cache[v][k] = want[v] ? tp_make_cache(rk, rk->arena, &rk->body[v][k]) : NULL;
    }
  /* warm-up: one eager all-reduce of the whole buffer (NCCL sets up its connections) */
  rk->rows = w->m;
  rk->count_el = n_el;
  tp_barrier(rk);
  tp_nccl_all_reduce(rk, rk->plain);
  tp_rank_sync(rk, "the sweep's first all-reduce");
  tp_barrier(rk);
  if (rk->rank == 0) {
    printf("\n== sweep %s: rows of %zu B; buffers of %zu rows (%.1f MB) per rank\n", k_tp_sweep_names[w->kind],
           w->row_bytes, w->m, (double)rk->bytes / 1e6);
    printf("mdr arena window: %s on rank 0, %s on rank 1 (mdr_window_name(mdr_arena_window(a))); reduced buffer %s, "
           "slab offset %zu B, outside every zero plan\n",
           mdr_window_name(w->mdr_window[0]), mdr_window_name(w->mdr_window[1]), mdr_buffer_name(TP_BUFFER),
           w->mdr_buffer_offset);
    if (w->ar_kernels)
      printf("mdr's all-reduce kernels: yes on both ranks (mdr_all_reduce_kernels 1): mdr-1shot, mdr-2shot run; "
             "AUTO may pick them\n");
    else
      printf("mdr's all-reduce kernels: NO (mdr_all_reduce_kernels 0; %s): mdr-1shot and mdr-2shot skipped, "
             "AUTO and mdr-dyn run NCCL (mdr-dyn then reduces all %zu rows)\n",
             w->ar_kernels_note, w->m);
    printf("nccl-window: %s\n", w->nccl_window[0] && w->nccl_window[1]
                                    ? "ncclMemAlloc + ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC): a window on both ranks"
                                : both ? "ncclCommWindowRegister gave no window (NCCL has no symmetric support here): "
                                         "ncclMemAlloc memory, no window"
                                       : "ncclMemAlloc failed: plain cudaMalloc memory, no window");
    tp_print_table_header();
    fflush(stdout);
  }
  (void)sh;
}

static void tp_sweep_teardown(tp_rank *rk) {
  tp_progress("sweep teardown");
  tp_rank_sync(rk, "sweep teardown");
  for (int v = 0; v < TP_V_COUNT; v++)
    for (int k = 0; k < 2; k++) {
      mdr_graph_cache_destroy(rk->cache[v][k]);
      rk->cache[v][k] = NULL;
    }
  tp_barrier(rk);
  mdr_arena_destroy(rk->arena); /* deregisters mdr's window: both ranks together */
  rk->arena = NULL;
  tp_barrier(rk);
  if (rk->win) TP_NCCL(rk->nccl, ncclCommWindowDeregister(rk->nccl, rk->win));
  rk->win = NULL;
  if (rk->winbuf_nccl) TP_NCCL(rk->nccl, ncclMemFree(rk->winbuf));
  else TP_CUDA(cudaFree(rk->winbuf));
  TP_CUDA(cudaFree(rk->plain));
  rk->winbuf = rk->plain = NULL;
  TP_CUDA(cudaFreeHost(rk->own));
  TP_CUDA(cudaFreeHost(rk->back));
  free(rk->sum);
  free(rk->ids);
  tp_barrier(rk);
}

static void tp_run_sweep(tp_rank *rk, tp_sweep *w, size_t *index, size_t total) {
  tp_shared *sh = rk->sh;
  mdr_sizes sizes;
  tp_sweep_setup(rk, w, &sizes);
  for (size_t i = 0; i < w->n; i++) {
    rk->rows = w->rows[i];
    rk->count_el = rk->rows * w->row_bytes / 2;
    const size_t first = rk->rank == 0 ? sh->res->n_cases : 0; /* rank 0's alone to read */
    for (int p = 0; p < TP_PATH_COUNT; p++)
      if (rk->o->path_on[p]) tp_run_case(rk, (tp_path)p, ++*index, total);
    tp_barrier(rk);
    if (rk->rank == 0) {
      if (sh->progress_in_place) fprintf(stderr, "\r\033[K");
      tp_finish_count(&sh->res->cases[first], sh->res->n_cases - first);
      for (size_t c = first; c < sh->res->n_cases; c++) tp_print_case(&sh->res->cases[c]);
      tp_print_count_summary(&sh->res->cases[first], sh->res->n_cases - first);
      fflush(stdout);
      /* the files so far (complete: false), so that a later failure loses nothing measured */
      sh->info->wall_s = (now_us() - sh->info->t_start_us) / 1e6;
      tp_write_results(rk->o, sh->info, sh->sweeps, sh->res);
    }
    tp_barrier(rk);
  }
  bool any_mdr = false;
  for (int p = 0; p < TP_PATH_COUNT; p++) any_mdr |= rk->o->path_on[p] && tp_is_mdr((tp_path)p);
  if (any_mdr) {
    tp_capture_costs(rk, &sizes);
    if (rk->rank == 0) tp_print_captures(sh->res, w->kind);
  }
  tp_sweep_teardown(rk);
}

/* ---- the soak (--soak N) ----
 *
 * One arena on the communicator (TP_BUFFER of --soak-size bytes, rows of
 * TP_SIZE_ROW_BYTES), one EXACT cache whose body is: fill this rank's
 * input for replay g (tp_soak_value(rank, i, g), g a device counter), the
 * all-reduce (--soak-algo), check every element against both ranks' sum
 * for g on the device (wrong ones counted), g++. Both ranks set mdr's
 * epoch to 0xFFFFFFFF - N/2 first, then replay the graph N times back to
 * back with device steps (no staging slot: the host never waits for the
 * GPU but at the checks). Every TP_SOAK_CHECK_EVERY replays and after the
 * last: drain, read the device's count of wrong values and its replay
 * counter, read the whole buffer back and check it on the host (the result
 * of the last replay), read both ranks' epochs (each must be the start +
 * the calls so far, mod 2^32). The soak passes with no wrong value, every
 * epoch as expected, and the epoch wrapped. */

typedef struct tp_soak_ctx {
  mdr_arena *arena;
  mdr_all_reduce_algo algo;
  uint16_t *buf;      /* TP_BUFFER */
  size_t n_el;
  int rank;
  tp_soak_state *state; /* device */
  size_t calls;
} tp_soak_ctx;

static mdr_status tp_soak_body(void *user, mdr_stream stream, size_t tokens) {
  tp_soak_ctx *c = user;
  c->calls++;
  if (tp_launch_soak_fill((cudaStream_t)stream, c->buf, c->n_el, c->rank, c->state) != 0) return MDR_ERR_BACKEND;
  mdr_all_reduce_desc d = mdr_all_reduce_desc_make(TP_BUFFER, MDR_DTYPE_BF16, tokens);
  d.algo = c->algo;
  mdr_status st = mdr_all_reduce(c->arena, &d, stream);
  if (st != MDR_OK) return st;
  if (tp_launch_soak_check((cudaStream_t)stream, c->buf, c->n_el, c->state) != 0) return MDR_ERR_BACKEND;
  return MDR_OK;
}

static uint32_t tp_soak_epoch(tp_rank *rk) {
  uint32_t e = 0;
  mdr_arp_block st;
  TP_MDR(rk->b, mdr_all_reduce_state(rk->arena, &st, NULL));
  e = st.calls;
  return e;
}

/* One check after `done` replays; both ranks. Returns nothing: rank 0
 * accumulates into sh->soak and prints. */
static void tp_soak_check(tp_rank *rk, tp_soak_ctx *ctx, tp_soak_state *host_state, size_t done, uint32_t *last_epoch,
                          double t0, int *decile) {
  tp_shared *sh = rk->sh;
  tp_soak_result *res = sh->soak;
  tp_rank_sync(rk, "soak: draining for a check");
  TP_CUDA(cudaMemcpyAsync(host_state, ctx->state, sizeof *host_state, cudaMemcpyDeviceToHost, rk->stream));
  TP_CUDA(cudaMemcpyAsync(rk->back, ctx->buf, ctx->n_el * 2, cudaMemcpyDeviceToHost, rk->stream));
  tp_rank_sync(rk, "soak: reading back");
  if (host_state->gen != (uint32_t)done)
    tp_die("soak: rank %d: the device checked %u replays, %zu were stepped (a replay's kernels did not run)", rk->rank,
           host_state->gen, done);
  /* the host check of the last replay's result, every element */
  const uint32_t g = (uint32_t)done - 1;
  uint64_t wrong_host = 0;
  size_t first = SIZE_MAX;
  for (size_t i = 0; i < ctx->n_el; i++) {
    const float want = (float)(tp_soak_value(0, i, g) + tp_soak_value(1, i, g));
    if (tp_from_bf16(rk->back[i]) != want) {
      if (!wrong_host) first = i;
      wrong_host++;
    }
  }
  if (wrong_host)
    fprintf(stderr, "soak: rank %d: WRONG: %llu of %zu elements of replay %u wrong on the host check; element %zu "
                    "is %g, expected %d\n",
            rk->rank, (unsigned long long)wrong_host, ctx->n_el, g, first, (double)tp_from_bf16(rk->back[first]),
            tp_soak_value(0, first, g) + tp_soak_value(1, first, g));
  if (host_state->wrong && host_state->first_bad)
    fprintf(stderr, "soak: rank %d: WRONG: the device check counts %u wrong elements so far; the first seen: element "
                    "%u of replay %u\n",
            rk->rank, host_state->wrong, host_state->first_bad - 1, host_state->first_gen);
  sh->epoch[rk->rank] = tp_soak_epoch(rk);
  sh->soak_wrong[rk->rank] = wrong_host;
  sh->soak_dev_wrong[rk->rank] = host_state->wrong;
  tp_barrier(rk);
  if (rk->rank == 0) {
    const uint32_t want = res->epoch_start + (uint32_t)done; /* mod 2^32 */
    res->checks++;
    res->wrong_host += sh->soak_wrong[0] + sh->soak_wrong[1];
    res->wrong_device = sh->soak_dev_wrong[0] + sh->soak_dev_wrong[1]; /* cumulative on the device */
    res->wrong = res->wrong_host + res->wrong_device;
    for (int r = 0; r < TP_RANKS; r++) {
      if (sh->epoch[r] != want) {
        res->epoch_mismatches++;
        fprintf(stderr, "soak: rank %d: WRONG EPOCH after %zu replays: 0x%08x, expected 0x%08x (start 0x%08x + "
                        "%zu calls, mod 2^32): it advanced by %u\n",
                r, done, sh->epoch[r], want, res->epoch_start, done, sh->epoch[r] - res->epoch_start);
      }
      res->epoch_end[r] = sh->epoch[r];
    }
    if (sh->epoch[0] < *last_epoch) res->wrapped = true;
    *last_epoch = sh->epoch[0];
    res->calls = done;
    const int d = (int)(done * 10 / res->replays);
    if (d > *decile || done == res->replays) {
      *decile = d;
      const double us = now_us() - t0;
      printf("soak: %10zu / %zu replays (%3d%%): epoch 0x%08x / 0x%08x (rank 0 / 1)%s, wrong values %llu, %.2f us "
             "per replay, %.0f s\n",
             done, res->replays, (int)(done * 100 / res->replays), sh->epoch[0], sh->epoch[1],
             res->wrapped ? ", wrapped" : "", (unsigned long long)res->wrong, us / (double)done, us / 1e6);
      fflush(stdout);
    }
  }
  tp_barrier(rk);
}

static void tp_soak(tp_rank *rk) {
  tp_shared *sh = rk->sh;
  const tp_options *o = rk->o;
  tp_soak_result *res = sh->soak;
  const size_t bytes = o->soak_bytes, rows = bytes / TP_SIZE_ROW_BYTES, n_el = bytes / 2;
  tp_progress("soak setup");
  mdr_sizes sizes;
  memset(&sizes, 0, sizeof sizes);
  sizes.max_batch_tokens = rows;
  sizes.logits_rows = 1;
  sizes.bytes[TP_BUFFER] = bytes;
  sizes.bytes[MDR_BUF_TOKEN_IDS] = rows * 4 > 256 ? rows * 4 : 256;
  tp_barrier(rk);
  TP_MDR(rk->b, mdr_arena_create_on_comm(rk->comm, &sizes, &rk->arena));
  sh->flag[rk->rank] = mdr_all_reduce_kernels(rk->arena) != 0;
  if (!sh->flag[rk->rank])
    snprintf(sh->note[rk->rank], sizeof sh->note[rk->rank], "%s", mdr_backend_last_error(rk->b));
  tp_barrier(rk);
  const mdr_all_reduce_algo resolved = o->soak_algo == MDR_ALL_REDUCE_AUTO ? tp_choice(rk, rows, 0)
                                                           : o->soak_algo;
  if (rk->rank == 0) {
    for (int r = 0; r < TP_RANKS; r++)
      if (!sh->flag[r])
        tp_exit(TP_EXIT_SKIP,
                "skipped: the soak needs mdr's all-reduce kernels, and mdr_all_reduce_kernels is 0 on rank %d "
                "(window %s; mdr_backend_last_error: \"%s\")",
                r, mdr_window_name(mdr_arena_window(rk->arena)), sh->note[r]);
    if (resolved == MDR_ALL_REDUCE_NCCL || resolved >= MDR_ALL_REDUCE_ALGO_COUNT)
      tp_die("soak: AUTO runs %s at %zu B here (mdr_all_reduce_choice): mdr's kernels and their epoch are not "
             "used; soak them with --soak-algo one-shot or two-shot",
             mdr_all_reduce_algo_name(resolved), bytes);
    *res = (tp_soak_result){.replays = o->soak, .rows = rows, .bytes = bytes, .algo = o->soak_algo,
                            .resolved = resolved};
    printf("\nsoak: %zu replays, %zu B (%zu rows of %d B), algorithm %s%s%s, window %s; checks every %d replays\n",
           o->soak, bytes, rows, TP_SIZE_ROW_BYTES, mdr_all_reduce_algo_name(o->soak_algo),
           o->soak_algo == MDR_ALL_REDUCE_AUTO ? " -> " : "", o->soak_algo == MDR_ALL_REDUCE_AUTO ? mdr_all_reduce_algo_name(resolved) : "",
           mdr_window_name(mdr_arena_window(rk->arena)), TP_SOAK_CHECK_EVERY);
    fflush(stdout);
  }
  tp_barrier(rk);
  /* the device state, the host's copies */
  tp_soak_state *state = NULL, *host_state = NULL;
  TP_CUDA(cudaMalloc((void **)&state, sizeof *state));
  TP_CUDA(cudaMemsetAsync(state, 0, sizeof *state, rk->stream));
  TP_CUDA(cudaHostAlloc((void **)&host_state, sizeof *host_state, cudaHostAllocPortable));
  TP_CUDA(cudaHostAlloc((void **)&rk->back, bytes, cudaHostAllocPortable));
  tp_soak_ctx ctx = {.arena = rk->arena, .algo = o->soak_algo, .n_el = n_el, .rank = rk->rank, .state = state,
                     .buf = (uint16_t *)(uintptr_t)mdr_arena_ptr(rk->arena, TP_BUFFER)};
  mdr_graph_cache_options co;
  mdr_graph_cache_options_default(&co);
  co.mode = MDR_GRAPH_EXACT;
  co.zero = MDR_ZERO_FUSED;
  co.body = tp_soak_body;
  co.user = &ctx;
  mdr_graph_cache *cache = NULL;
  TP_MDR(rk->b, mdr_graph_cache_create(rk->arena, rk->stream, &co, &cache));
  const mdr_dptr ids = mdr_arena_token_ids(rk->arena);
  tp_barrier(rk);
  mdr_status st = mdr_graph_cache_prepare_device(cache, ids, &rows, 1);
  if (st != MDR_OK)
    tp_die("soak: rank %d: mdr_graph_cache_prepare_device of %zu rows: %s: %s", rk->rank, rows, mdr_status_string(st),
           mdr_backend_last_error(rk->b));
  tp_rank_sync(rk, "soak: the graph");
  /* the epoch: both ranks, nothing in flight */
  const uint32_t start = 0xFFFFFFFFu - (uint32_t)(o->soak / 2);
  tp_barrier(rk);
  {
    /* every counter at `start`: the state a run of that many calls leaves
     * (barriers with their flags), so the soak crosses every wrap */
    const mdr_arp_block set = {.calls = start, .one_shot = start, .barriers = start};
    TP_MDR(rk->b, mdr_all_reduce_state(rk->arena, NULL, &set));
  }
  tp_barrier(rk);
  const uint32_t e0 = tp_soak_epoch(rk);
  if (e0 != start) tp_die("soak: rank %d: the calls counter reads 0x%08x after setting 0x%08x", rk->rank, e0, start);
  if (rk->rank == 0) {
    res->epoch_start = start;
    printf("soak: epoch set to 0x%08x on both ranks (0xFFFFFFFF - %zu): it wraps at replay %zu\n", start, o->soak / 2,
           (size_t)(0xFFFFFFFFu - start) + 1);
    fflush(stdout);
  }
  uint32_t last_epoch = start;
  int decile = 0;
  const size_t calls0 = ctx.calls;
  tp_barrier(rk);
  const double t0 = now_us();
  for (size_t done = 0; done < o->soak;) {
    st = mdr_graph_cache_step_device(cache, ids, rows);
    if (st != MDR_OK)
      tp_die("soak: rank %d: mdr_graph_cache_step_device at replay %zu: %s: %s", rk->rank, done,
             mdr_status_string(st), mdr_backend_last_error(rk->b));
    done++;
    if (done % TP_SOAK_CHECK_EVERY == 0 || done == o->soak)
      tp_soak_check(rk, &ctx, host_state, done, &last_epoch, t0, &decile);
  }
  const double wall_us = now_us() - t0;
  if (ctx.calls != calls0)
    tp_die("soak: rank %d: the body ran %zu times during the soak: steps were not replays", rk->rank,
           ctx.calls - calls0);
  mdr_graph_stats gs;
  TP_MDR(rk->b, mdr_graph_cache_stats(cache, &gs));
  if (gs.eager_steps) tp_die("soak: rank %d: %llu steps ran eagerly", rk->rank, (unsigned long long)gs.eager_steps);
  tp_barrier(rk);
  if (rk->rank == 0) {
    res->wall_s = wall_us / 1e6;
    res->us_per_replay = wall_us / (double)o->soak;
    const bool advanced = (uint32_t)(res->epoch_end[0] - start) == (uint32_t)res->calls &&
                          (uint32_t)(res->epoch_end[1] - start) == (uint32_t)res->calls;
    res->ok = res->wrong == 0 && res->epoch_mismatches == 0 && advanced && res->wrapped;
  }
  tp_rank_sync(rk, "soak teardown");
  mdr_graph_cache_destroy(cache);
  tp_barrier(rk);
  mdr_arena_destroy(rk->arena); /* both ranks together */
  rk->arena = NULL;
  TP_CUDA(cudaFree(state));
  TP_CUDA(cudaFreeHost(host_state));
  TP_CUDA(cudaFreeHost(rk->back));
  rk->back = NULL;
  tp_barrier(rk);
}

void *tp_rank_main(void *arg) {
  tp_rank_arg *a = arg;
  tp_shared *sh = a->sh;
  tp_rank rk;
  memset(&rk, 0, sizeof rk);
  rk.sh = sh;
  rk.o = sh->o;
  rk.rank = a->rank;
  rk.dev = sh->device[a->rank];
  rk.b = sh->b[a->rank];
  rk.comm = sh->comm[a->rank];
  rk.nccl = sh->nccl[a->rank];
  TP_CUDA(cudaSetDevice(rk.dev)); /* before this thread's first CUDA call; kept for its life */
  mdr_stream stream = NULL;
  TP_MDR(rk.b, mdr_backend_stream_create(rk.b, &stream));
  rk.stream = (cudaStream_t)stream;
  const size_t reps = rk.o->reps;
  rk.start = xmalloc(reps * sizeof *rk.start);
  rk.stop = xmalloc(reps * sizeof *rk.stop);
  for (size_t i = 0; i < reps; i++) {
    TP_CUDA(cudaEventCreate(&rk.start[i]));
    TP_CUDA(cudaEventCreate(&rk.stop[i]));
  }
  rk.cpu = xmalloc(reps * sizeof *rk.cpu);
  void *dev_words = NULL;
  TP_CUDA(cudaHostGetDevicePointer(&dev_words, (void *)sh->words, 0));
  rk.release_dev = (const volatile uint32_t *)dev_words;
  rk.timed_out_dev = (uint32_t *)dev_words + 1 + rk.rank;

  size_t total = sh->res->cap_cases, index = 0;
  if (rk.o->soak) tp_soak(&rk);
  else
    for (int s = 0; s < TP_SWEEP_COUNT; s++)
      if (sh->sweeps[s].n) tp_run_sweep(&rk, &sh->sweeps[s], &index, total);

  tp_rank_sync(&rk, "the end");
  for (size_t i = 0; i < reps; i++) {
    TP_CUDA(cudaEventDestroy(rk.start[i]));
    TP_CUDA(cudaEventDestroy(rk.stop[i]));
  }
  free(rk.start);
  free(rk.stop);
  free(rk.cpu);
  mdr_backend_stream_destroy(rk.b, stream);
  return NULL;
}

#endif
