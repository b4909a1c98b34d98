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
 * --soak N instead: tp_soak (mdr_bench_tp_soak.c). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_tp_rank.h"

#ifdef TP_GPU

/* What AUTO runs for `rows` rows of the rank's buffer (counted: a count
 * read on the device), as mdr_all_reduce_choice answers. */
static mdr_all_reduce_algo tp_choice(const tp_rank *rk, size_t rows, int counted) {
  mdr_all_reduce_desc d = mdr_all_reduce_desc_make(TP_BUFFER, MDR_DTYPE_BF16, rows);
  if (counted) d.count_ptr = mdr_arena_token_ids(rk->arena); /* any device word: only its presence counts here */
  return mdr_all_reduce_choice(rk->arena, &d);
}

/* ---- small pieces ---- */

void tp_barrier(tp_rank *rk) {
  int r = pthread_barrier_wait(&rk->sh->barrier);
  if (r != 0 && r != PTHREAD_BARRIER_SERIAL_THREAD) tp_die("rank %d: pthread_barrier_wait failed (%d)", rk->rank, r);
}

uint16_t tp_to_bf16(float f) { /* exact for the small integers used here */
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (uint16_t)(u >> 16);
}

float tp_from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

int tp_pattern(int r, size_t i) { return (int)((i * 7 + (i >> 9) * 3 + (size_t)r * 11) % 29) - 14; }

void tp_rank_sync(tp_rank *rk, const char *what) {
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

mdr_graph_cache *tp_make_cache(tp_rank *rk, mdr_arena *a, tp_body_ctx *body) {
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

void tp_nccl_all_reduce(tp_rank *rk, void *buf) {
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

summary tp_time_blocked(tp_rank *rk, tp_op_fn op, void *ctx, double per, const char *what) {
  tp_shared *sh = rk->sh;
  const size_t reps = rk->o->reps;
  for (int i = 0; i < TP_WARMUP; i++) op(rk, ctx);
  tp_rank_sync(rk, what);
  tp_barrier(rk);
  for (size_t i = 0; i < reps; i++) {
    rk->generation++;
    TP_CUDA((cudaError_t)tp_launch_blocker(rk->stream, rk->release_dev, rk->generation, TP_BLOCKER_TIMEOUT_NS,
                                           rk->timed_out_dev));
    TP_CUDA(cudaEventRecord(rk->start[i], rk->stream));
    op(rk, ctx);
    TP_CUDA(cudaEventRecord(rk->stop[i], rk->stream));
    tp_barrier(rk);
    if (rk->rank == 0) __atomic_store_n((uint32_t *)&sh->words[0], rk->generation, __ATOMIC_RELEASE);
    if ((i + 1) % TP_DRAIN_EVERY == 0) tp_rank_sync(rk, what);
  }
  tp_rank_sync(rk, what);
  for (size_t i = 0; i < reps; i++) sh->samples[rk->rank][i] = tp_elapsed_us(rk->start[i], rk->stop[i]) / per;
  tp_barrier(rk);
  summary s = k_no_summary;
  if (rk->rank == 0) {
    double *v = xmalloc(reps * sizeof *v);
    for (size_t i = 0; i < reps; i++) v[i] = fmax(sh->samples[0][i], sh->samples[1][i]);
    s = summarize(v, reps);
    free(v);
  }
  tp_barrier(rk);
  return s;
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

void tp_run_case(tp_rank *rk, tp_path p, size_t index, size_t total) {
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

#endif
