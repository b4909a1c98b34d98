/* mdr example — the TP decode loop's engine (decode_tp_engine.h): one model
 * with its stream and a graph cache per all-reduce variant. */
#define _POSIX_C_SOURCE 200809L

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include <mdr/mdr.h>

#include "decode_tp_model.h"
#include "decode_tp_report.h"
#include "decode_tp_engine.h"

#define WAIT_LIMIT_S 60.0   /* a stream that makes no progress this long: a peer is stuck */

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* Make the model of rank `rank` of a `tp`-way split on `arena`, with its
 * own stream, events and pinned buffers. The calling thread's device must
 * be the arena's. 0 or -1; engine_close either way. */
int engine_open(engine *e, mdr_backend *b, mdr_arena *arena, int tp, int rank,
                       const tp_host_weights *w, atomic_int *failed, bool one_algo_per_gemm) {
  e->failed = failed;
  e->m.backend = b;
  e->m.arena = arena;
  e->m.one_algo_per_gemm = one_algo_per_gemm;
  MDR_CHECK_(b, mdr_backend_stream_create(b, &e->stream));
  e->m.stream = (cudaStream_t)e->stream;
  if (tp_model_init(&e->m, w, tp, rank) != 0) goto fail;
  snprintf(e->name, sizeof e->name, "%s", e->m.name);
  CUDA_OK(cudaEventCreate(&e->ev0));
  CUDA_OK(cudaEventCreate(&e->ev1));
  CUDA_OK(cudaMallocHost((void **)&e->ids_pinned, TP_MAX_TOKENS * sizeof *e->ids_pinned));
  return 0;
fail:
  return -1;
}

/* Variant `vi` of the engine: its body's user and host logits (no cache yet). */
int path_open(engine *e, int vi, mdr_all_reduce_algo algo, bool fuse_residual, bool dynamic) {
  const size_t logits_bytes = (size_t)TP_MAX_TOKENS * TP_VOCAB * sizeof(uint16_t);
  vpath *p = &e->v[vi];
  p->on = true;
  p->dynamic = dynamic;
  p->u = (tp_body_user){.m = &e->m, .algo = algo, .fuse_residual = fuse_residual};
  CUDA_OK(cudaMallocHost((void **)&p->logits, logits_bytes));
  if (!dynamic) CUDA_OK(cudaMallocHost((void **)&p->logits_eager, logits_bytes));
  return 0;
fail:
  return -1;
}

/* Release in reverse order; waits for the stream first (the caches do). */
void engine_close(engine *e) {
  if (e->stream) (void)cudaStreamSynchronize(e->m.stream);
  for (int vi = VAR_COUNT - 1; vi >= 0; --vi) { /* the graphs before the arena, in reverse */
    vpath *p = &e->v[vi];
    mdr_graph_cache_destroy(p->cache);
    if (p->logits_eager) cudaFreeHost(p->logits_eager);
    if (p->logits) cudaFreeHost(p->logits);
  }
  if (e->ids_pinned) cudaFreeHost(e->ids_pinned);
  if (e->ev1) cudaEventDestroy(e->ev1);
  if (e->ev0) cudaEventDestroy(e->ev0);
  tp_model_fini(&e->m);
  if (e->stream) mdr_backend_stream_destroy(e->m.backend, e->stream);
  memset(e, 0, sizeof *e);
}

/* Wait for the engine's stream by polling, so that a rank whose peer never
 * reaches an all-reduce does not wait forever: it gives up (-1) when the
 * run failed elsewhere, or after WAIT_LIMIT_S without finishing. */
static int wait_stream(engine *e) {
  const double t0 = now_us();
  for (;;) {
    cudaError_t q = cudaStreamQuery(e->m.stream);
    if (q == cudaSuccess) return 0;
    if (q == cudaErrorNotReady) {
      (void)cudaGetLastError(); /* "not ready" is no error: leave none behind for later checks */
    } else {
      fprintf(stderr, "decode_tp: %s: stream: %s\n", e->name, cudaGetErrorString(q));
      return -1;
    }
    if (atomic_load(e->failed)) return -1;
    if (now_us() - t0 > WAIT_LIMIT_S * 1e6) {
      fprintf(stderr, "decode_tp: %s: the stream made no progress in %.0f s (a peer rank stuck?)\n",
              e->name, WAIT_LIMIT_S);
      return -1;
    }
    sched_yield();
  }
}

/* Close a timed step: record ev1, wait, GPU µs from the events. */
static int finish_timing(engine *e, timing *t) {
  CUDA_OK(cudaEventRecord(e->ev1, e->m.stream));
  if (wait_stream(e) != 0) return -1;
  float ms = 0;
  CUDA_OK(cudaEventElapsedTime(&ms, e->ev0, e->ev1));
  t->gpu_us = (double)ms * 1e3;
  return 0;
fail:
  return -1;
}

/* Eager step of variant p: what its graphs hold, enqueued call by call:
 * zero_all_rows, the id upload, the body (with its all-reduces, eagerly). */
int eager_step(engine *e, vpath *p, const uint32_t *ids, size_t tokens, timing *t) {
  memcpy(e->ids_pinned, ids, tokens * sizeof *ids); /* the previous step has finished */
  CUDA_OK(cudaEventRecord(e->ev0, e->m.stream));
  const double h0 = now_us();
  MDR_CHECK_(e->m.backend, mdr_arena_zero_all_rows(e->m.arena, e->stream, tokens));
  CUDA_OK(cudaMemcpyAsync(tp_arena_ptr(&e->m, MDR_BUF_TOKEN_IDS), e->ids_pinned, tokens * sizeof *ids,
                          cudaMemcpyHostToDevice, e->m.stream));
  MDR_CHECK_(e->m.backend, tp_body(&p->u, e->stream, tokens));
  t->cpu_us = now_us() - h0;
  return finish_timing(e, t);
fail:
  return -1;
}

/* Graph step: what an engine's loop calls once per decode step. */
int graph_step(engine *e, vpath *p, const uint32_t *ids, size_t tokens, timing *t) {
  CUDA_OK(cudaEventRecord(e->ev0, e->m.stream));
  const double h0 = now_us();
  mdr_status st = mdr_graph_cache_step(p->cache, ids, tokens);
  t->cpu_us = now_us() - h0;
  if (st == MDR_ERR_CAPTURE) {
    /* The cache ran this step eagerly (the same collectives); its work is enqueued. */
    fprintf(stderr, "decode_tp: %s: warning: capture for %zu tokens failed, ran eagerly (%s)\n",
            e->name, tokens, mdr_backend_last_error(e->m.backend));
  } else {
    MDR_CHECK_(e->m.backend, st);
  }
  return finish_timing(e, t);
fail:
  return -1;
}

int read_logits(engine *e, uint16_t *host, size_t tokens) {
  CUDA_OK(cudaMemcpyAsync(host, tp_arena_ptr(&e->m, MDR_BUF_LOGITS), tokens * TP_VOCAB * sizeof *host,
                          cudaMemcpyDeviceToHost, e->m.stream));
  return wait_stream(e);
fail:
  return -1;
}

/* The graph cache of variant p on the engine's arena and stream. Every
 * rank makes its caches in the same order with the same options (mdr
 * compares them): EXACT (or DYNAMIC), fused zeroing, logits cleared for
 * the step's rows only. */
int path_cache(engine *e, vpath *p) {
  mdr_graph_cache_options go;
  mdr_graph_cache_options_default(&go);
  go.mode = p->dynamic ? MDR_GRAPH_DYNAMIC : MDR_GRAPH_EXACT;
  go.zero = MDR_ZERO_FUSED;
  go.rows = MDR_ROWS_ALL;
  if (p->dynamic) {
    go.body_dynamic = tp_body_dynamic; /* reads the count at count_ptr; all M rows */
  } else {
    go.body = tp_body;
  }
  go.user = &p->u;
  MDR_CHECK_(e->m.backend, mdr_graph_cache_create(e->m.arena, e->stream, &go, &p->cache));
  return 0;
fail:
  return -1;
}

/* Capture every count 1..M (a DYNAMIC cache: its one graph), one prepare
 * per count, keeping each count's capture µs (the growth of
 * mdr_graph_stats.capture_us). */
int prepare_every_count(engine *e, vpath *p, double capture_us[TP_MAX_TOKENS]) {
  const size_t last = p->dynamic ? 1 : TP_MAX_TOKENS;
  for (size_t t = 1; t <= last; ++t) {
    mdr_graph_stats before, after;
    MDR_CHECK_(e->m.backend, mdr_graph_cache_stats(p->cache, &before));
    MDR_CHECK_(e->m.backend, mdr_graph_cache_prepare(p->cache, &t, 1));
    MDR_CHECK_(e->m.backend, mdr_graph_cache_stats(p->cache, &after));
    capture_us[t - 1] = after.capture_us - before.capture_us;
  }
  return wait_stream(e);
fail:
  return -1;
}
