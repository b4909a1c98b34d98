/* bench_gpu.c — mdr-bench's GPU timing: per-rep event pairs, the blocker
 * that holds the stream while a step is enqueued (nvbench's blocking-kernel
 * method), the L2 flush of the cold figures, and the floors measured in the
 * same run (write ceiling, 1-kernel graph replay, empty eager launch).
 * Compiled without CUDA too: only floor_us is left then. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#ifdef MDR_HAVE_CUDA
#include "bench_cuda.h"
#endif

double floor_us(const floors *f, size_t bytes, double replay_us) {
  return (double)bytes / (f->ceiling_gbps * 1e3) + replay_us;
}

#ifdef MDR_HAVE_CUDA

/* A byte pattern for a memset that changes from one call to the next. */
#define BYTE_PATTERN_MASK 0xffu

void gpu_init(gpu_ctx *g, mdr_stream stream, size_t reps) {
  g->stream = (cudaStream_t)stream;
  g->n_events = reps;
  g->start = xmalloc(reps * sizeof *g->start);
  g->stop = xmalloc(reps * sizeof *g->stop);
  for (size_t i = 0; i < reps; i++) {
    CUDA_CHECK(cudaEventCreate(&g->start[i]));
    CUDA_CHECK(cudaEventCreate(&g->stop[i]));
  }
  void *words = NULL, *words_dev = NULL;
  CUDA_CHECK(cudaHostAlloc(&words, 2 * sizeof(uint32_t), cudaHostAllocMapped));
  CUDA_CHECK(cudaHostGetDevicePointer(&words_dev, words, 0));
  memset(words, 0, 2 * sizeof(uint32_t));
  g->release_host = (volatile uint32_t *)words;
  g->timed_out_host = g->release_host + 1;
  g->release_dev = (uint32_t *)words_dev;
  g->timed_out_dev = g->release_dev + 1;
  CUDA_CHECK(cudaMalloc(&g->flush_buf, FLUSH_BYTES));
}

void gpu_fini(gpu_ctx *g) {
  for (size_t i = 0; i < g->n_events; i++) {
    cudaEventDestroy(g->start[i]);
    cudaEventDestroy(g->stop[i]);
  }
  free(g->start);
  free(g->stop);
  cudaFreeHost((void *)g->release_host);
  cudaFree(g->flush_buf);
}

static void gpu_sync(gpu_ctx *g) {
  CUDA_CHECK(cudaStreamSynchronize(g->stream));
  if (*g->timed_out_host) die("a blocker kernel timed out: the host took > 2 s to enqueue one step");
}

/* Hold the stream until gpu_release(). */
static void gpu_block(gpu_ctx *g) {
  CUDA_CHECK((cudaError_t)bench_cuda_launch_blocker(g->stream, g->release_dev, g->generation + 1,
                                                    BLOCKER_TIMEOUT_NS, g->timed_out_dev));
}

static void gpu_release(gpu_ctx *g) {
  g->generation++;
  __atomic_store_n((uint32_t *)g->release_host, g->generation, __ATOMIC_RELEASE);
}

static void gpu_flush_l2(gpu_ctx *g) {
  CUDA_CHECK(cudaMemsetAsync(g->flush_buf, (int)(g->generation & BYTE_PATTERN_MASK), FLUSH_BYTES, g->stream));
}

static double elapsed_us(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  return (double)ms * 1e3;
}

void gpu_time_samples(gpu_ctx *g, step_fn fn, void *arg, size_t tokens, size_t reps, bool cold, double *out) {
  if (reps > g->n_events) die("gpu_time_samples: %zu reps, %zu event pairs", reps, g->n_events);
  for (size_t i = 0; i < reps; i++) {
    if (cold) gpu_flush_l2(g);
    gpu_block(g);
    CUDA_CHECK(cudaEventRecord(g->start[i], g->stream));
    fn(arg, tokens);
    CUDA_CHECK(cudaEventRecord(g->stop[i], g->stream));
    gpu_release(g);
  }
  gpu_sync(g);
  for (size_t i = 0; i < reps; i++) out[i] = elapsed_us(g->start[i], g->stop[i]);
}

summary gpu_time_steps(gpu_ctx *g, step_fn fn, void *arg, size_t tokens, size_t reps, bool cold) {
  if (reps > g->n_events) reps = g->n_events;
  double *us = xmalloc(reps * sizeof *us);
  gpu_time_samples(g, fn, arg, tokens, reps, cold, us);
  summary s = summarize(us, reps);
  free(us);
  return s;
}

double gpu_time_loop(gpu_ctx *g, step_fn fn, void *arg, size_t tokens, size_t reps) {
  gpu_sync(g);
  CUDA_CHECK(cudaEventRecord(g->start[0], g->stream));
  for (size_t i = 0; i < reps; i++) fn(arg, tokens);
  CUDA_CHECK(cudaEventRecord(g->stop[0], g->stream));
  gpu_sync(g);
  return elapsed_us(g->start[0], g->stop[0]) / (double)reps;
}

/* ---- floors ---- */

static void step_empty_kernel(void *arg, size_t tokens) {
  (void)tokens;
  CUDA_CHECK((cudaError_t)bench_cuda_launch_empty(arg));
}

typedef struct replay_arg {
  cudaGraphExec_t exec;
  cudaStream_t stream;
} replay_arg;

static void step_graph_replay(void *arg, size_t tokens) {
  (void)tokens;
  replay_arg *r = arg;
  CUDA_CHECK(cudaGraphLaunch(r->exec, r->stream));
}

/* Median GB/s of CEILING_REPS memsets of `bytes`; NAN when it does not fit. */
static double measure_write_ceiling(gpu_ctx *g, size_t bytes) {
  void *buf = NULL;
  if (cudaMalloc(&buf, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return NAN;
  }
  double us[CEILING_REPS];
  CUDA_CHECK(cudaMemsetAsync(buf, 0, bytes, g->stream)); /* warm-up: first touch */
  for (int i = 0; i < CEILING_REPS; i++) {
    CUDA_CHECK(cudaEventRecord(g->start[i], g->stream));
    CUDA_CHECK(cudaMemsetAsync(buf, i & BYTE_PATTERN_MASK, bytes, g->stream));
    CUDA_CHECK(cudaEventRecord(g->stop[i], g->stream));
  }
  gpu_sync(g);
  for (int i = 0; i < CEILING_REPS; i++) us[i] = elapsed_us(g->start[i], g->stop[i]);
  CUDA_CHECK(cudaFree(buf));
  return (double)bytes / (percentile(us, CEILING_REPS, 0.5) * 1e3);
}

void measure_floors(gpu_ctx *g, size_t reps, floors *f) {
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  f->ceiling_1g_gbps = measure_write_ceiling(g, GIB);
  /* 4 GiB only with 1 GiB to spare, for the arenas' sake. */
  f->ceiling_4g_gbps = free_bytes > 5 * GIB ? measure_write_ceiling(g, 4 * GIB) : NAN;
  f->ceiling_gbps = isfinite(f->ceiling_4g_gbps) && f->ceiling_4g_gbps > f->ceiling_1g_gbps
                        ? f->ceiling_4g_gbps
                        : f->ceiling_1g_gbps;
  if (!isfinite(f->ceiling_gbps)) die("could not allocate 1 GiB for the write ceiling");

  replay_arg r = {.stream = g->stream};
  cudaGraph_t graph;
  CUDA_CHECK(cudaStreamBeginCapture(g->stream, cudaStreamCaptureModeThreadLocal));
  CUDA_CHECK((cudaError_t)bench_cuda_launch_empty(g->stream));
  CUDA_CHECK(cudaStreamEndCapture(g->stream, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&r.exec, graph, 0));
  CUDA_CHECK(cudaGraphUpload(r.exec, g->stream));
  for (int i = 0; i < WARMUP_STEPS; i++) step_graph_replay(&r, 0), step_empty_kernel(g->stream, 0);
  f->graph_replay = gpu_time_steps(g, step_graph_replay, &r, 0, reps, false);
  f->graph_replay_loop = gpu_time_loop(g, step_graph_replay, &r, 0, reps);
  f->eager_launch = gpu_time_steps(g, step_empty_kernel, g->stream, 0, reps, false);
  f->eager_launch_loop = gpu_time_loop(g, step_empty_kernel, g->stream, 0, reps);
  f->replay_graph = graph;
  f->replay_exec = r.exec;
}

/* Rounds of the interleaved measurement: enough that a drift over the
 * case's timing reaches both figures alike. */
#define INTERLEAVE_ROUNDS 8

void gpu_time_beside_floor(gpu_ctx *g, const floors *f, step_fn fn, void *arg, size_t tokens, size_t reps,
                           summary *steps, summary *replay) {
  if (reps > g->n_events) reps = g->n_events;
  replay_arg r = {.exec = (cudaGraphExec_t)f->replay_exec, .stream = g->stream};
  for (int i = 0; i < WARMUP_STEPS; i++) step_graph_replay(&r, 0);
  double *a = xmalloc(reps * sizeof *a), *b = xmalloc(reps * sizeof *b);
  const size_t per = (reps + INTERLEAVE_ROUNDS - 1) / INTERLEAVE_ROUNDS;
  for (size_t done = 0; done < reps; done += per) {
    const size_t n = reps - done < per ? reps - done : per;
    gpu_time_samples(g, step_graph_replay, &r, 0, n, false, b + done);
    gpu_time_samples(g, fn, arg, tokens, n, false, a + done);
  }
  *steps = summarize(a, reps);
  *replay = summarize(b, reps);
  free(a);
  free(b);
}

void gpu_time_replay_samples(gpu_ctx *g, const floors *f, size_t reps, double *out) {
  replay_arg r = {.exec = (cudaGraphExec_t)f->replay_exec, .stream = g->stream};
  gpu_time_samples(g, step_graph_replay, &r, 0, reps, false, out);
}

void floors_fini(floors *f) {
  if (f->replay_exec) CUDA_CHECK(cudaGraphExecDestroy((cudaGraphExec_t)f->replay_exec));
  if (f->replay_graph) CUDA_CHECK(cudaGraphDestroy((cudaGraph_t)f->replay_graph));
  f->replay_exec = f->replay_graph = NULL;
}
#endif
