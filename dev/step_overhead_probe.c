/* step_overhead_probe — what the host pays per graph-cache step, piece by
 * piece: the CUDA runtime queries a step makes (cudaStreamIsCapturing,
 * cudaGetDevice), a bare cudaGraphLaunch of a one-kernel graph, and
 * mdr_graph_cache_step / _step_device on a small arena (EXACT, fused), each
 * as the median over batches of the per-call time. The stream is drained
 * between batches so the staging ring never makes a step wait.
 *
 * Then the tails: each step timed alone (the stream drained every 4 steps,
 * as mdr-bench does), TAIL_SAMPLES samples of the bare launch and of both
 * steps, p50 / p90 / p99 / p99.9 / max; once as the thread runs, once with
 * it pinned to the CPU it is on (sched_setaffinity), so that what the OS
 * adds (migrations) can be told from what the calls cost, and once (pinned)
 * with every batch submitted behind a 1 GiB memset, the GPU writing at full
 * bandwidth meanwhile ("loaded"), and once behind a 6 GiB one ("long"):
 * each drain then waits about as long as mdr-bench's drains of four
 * 4096-token steps do.
 *
 * Usage: step_overhead_probe [--calls N] [--batches B] [--tail-samples S].
 * Exit 77 without a GPU. */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>

#include <mdr/mdr.h>

enum { DEFAULT_CALLS = 4, DEFAULT_BATCHES = 20000, MAX_BATCHES = 1000000, TAIL_DRAIN = 4 };
#define LOAD_BYTES ((size_t)1 << 30)      /* the loaded tails' memset */
#define LONG_LOAD_BYTES ((size_t)6 << 30) /* the long-loaded ones': as long as four 4096-token steps */

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp);
  return v[n / 2];
}

/* The q-quantile of v[0..n) once sorted (nearest rank). */
static double quantile(const double *v, int n, double q) { return v[(int)(q * (n - 1) + 0.5)]; }

#define CHECK(cond, what)                        \
  do {                                           \
    if (!(cond)) {                               \
      fprintf(stderr, "probe: %s failed\n", what); \
      return 1;                                  \
    }                                            \
  } while (0)

int main(int argc, char **argv) {
  int calls = DEFAULT_CALLS, batches = DEFAULT_BATCHES, tail_samples = DEFAULT_BATCHES;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--calls")) calls = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--batches")) batches = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--tail-samples")) tail_samples = atoi(argv[i + 1]);
  }
  if (calls < 1 || calls > 7 || batches < 10 || batches > MAX_BATCHES || tail_samples < 1000 ||
      tail_samples > MAX_BATCHES) {
    fprintf(stderr, "probe: --calls 1..7 (under the staging ring), --batches 10..%d, --tail-samples 1000..%d\n",
            MAX_BATCHES, MAX_BATCHES);
    return 2;
  }
  mdr_backend *b = NULL;
  if (mdr_backend_cuda_create(0, &b) != MDR_OK) {
    printf("probe: no CUDA device (skipped)\n");
    return 77;
  }
  mdr_stream s = NULL;
  CHECK(mdr_backend_stream_create(b, &s) == MDR_OK, "stream");
  mdr_model_config cfg;
  mdr_limits lim = {64, 4096, 16, 4};
  mdr_sizes sizes;
  CHECK(mdr_model_preset("glm-5.3-flash-tp2", &cfg) == MDR_OK, "preset");
  CHECK(mdr_sizes_from_config(&cfg, &lim, &sizes) == MDR_OK, "sizes");
  mdr_arena *a = NULL;
  CHECK(mdr_arena_create(b, &sizes, &a) == MDR_OK, "arena");
  /* the bare graph below is the fused zeroing: one kernel node */
  CHECK(mdr_arena_set_zero_strategy(a, MDR_ZERO_FUSED) == MDR_OK, "fused");
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.zero = MDR_ZERO_FUSED;
  mdr_graph_cache *c = NULL;
  CHECK(mdr_graph_cache_create(a, s, &o, &c) == MDR_OK, "cache");
  const size_t one = 1;
  CHECK(mdr_graph_cache_prepare(c, &one, 1) == MDR_OK, "prepare");
  CHECK(mdr_graph_cache_prepare_device(c, 0, &one, 1) == MDR_OK, "prepare_device");
  /* a one-kernel graph for the bare launch: the cache's own zeroing step */
  cudaGraph_t g = NULL;
  cudaGraphExec_t x = NULL;
  cudaStream_t cs = (cudaStream_t)s;
  CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal) == cudaSuccess, "begin");
  CHECK(mdr_arena_zero_all_rows(a, s, 1) == MDR_OK, "zero");
  CHECK(cudaStreamEndCapture(cs, &g) == cudaSuccess, "end");
  CHECK(cudaGraphInstantiate(&x, g, 0) == cudaSuccess, "instantiate");
  size_t nodes = 0;
  CHECK(cudaGraphGetNodes(g, NULL, &nodes) == cudaSuccess && nodes == 1, "a one-node graph");
  CHECK(cudaGraphUpload(x, cs) == cudaSuccess, "upload");

  const uint32_t ids[1] = {42};
  const char *names[] = {"cudaStreamIsCapturing", "cudaGetDevice", "cudaGraphLaunch (1 kernel)",
                         "mdr_graph_cache_step (1 token)", "mdr_graph_cache_step_device (1 token)"};
  double *t = malloc((size_t)batches * sizeof *t);
  CHECK(t != NULL, "malloc");
  printf("per call, median over %d batches of %d calls (ns)\n", batches, calls);
  for (int what = 0; what < 5; what++) {
    for (int k = 0; k < batches; k++) {
      double t0 = now_ns();
      for (int i = 0; i < calls; i++) {
        enum cudaStreamCaptureStatus st;
        int dev;
        switch (what) {
          case 0: (void)cudaStreamIsCapturing(cs, &st); break;
          case 1: (void)cudaGetDevice(&dev); break;
          case 2: (void)cudaGraphLaunch(x, cs); break;
          case 3: (void)mdr_graph_cache_step(c, ids, 1); break;
          default: (void)mdr_graph_cache_step_device(c, 0, 1); break;
        }
      }
      t[k] = (now_ns() - t0) / calls;
      if (what >= 2) CHECK(cudaStreamSynchronize(cs) == cudaSuccess, "sync");
    }
    printf("  %-40s %8.1f\n", names[what], median(t, batches));
  }
  /* tails: one call per sample, drained every TAIL_DRAIN calls */
  double *v = malloc((size_t)tail_samples * sizeof *v);
  CHECK(v != NULL, "malloc");
  printf("\ntails: one call per sample, the stream drained every %d calls, %d samples (us)\n", TAIL_DRAIN,
         tail_samples);
  printf("  %-40s %-8s %7s %7s %7s %7s %7s\n", "call", "thread", "p50", "p90", "p99", "p99.9", "max");
  /* "loaded": each batch of calls is submitted behind a LOAD_BYTES memset,
   * so the GPU writes at full bandwidth while the host submits, as in a
   * 4096-token step (a 200-350 us zeroing kernel) */
  void *load = NULL;
  CHECK(cudaMalloc(&load, LONG_LOAD_BYTES) == cudaSuccess, "cudaMalloc (load)");
  static const char *const modes[] = {"free", "pinned", "loaded", "long"};
  for (int mode = 0; mode < 4; mode++) {
    if (mode == 1) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(sched_getcpu(), &set);
      CHECK(sched_setaffinity(0, sizeof set, &set) == 0, "sched_setaffinity");
    }
    for (int what = 2; what < 5; what++) {
      for (int k = 0; k < tail_samples; k++) {
        if (k % TAIL_DRAIN == 0) {
          CHECK(cudaStreamSynchronize(cs) == cudaSuccess, "sync");
          if (mode >= 2)
            CHECK(cudaMemsetAsync(load, k & 0xff, mode == 2 ? LOAD_BYTES : LONG_LOAD_BYTES, cs) == cudaSuccess,
                  "load");
        }
        double t0 = now_ns();
        mdr_status ms = MDR_OK;
        switch (what) {
          case 2: ms = cudaGraphLaunch(x, cs) == cudaSuccess ? MDR_OK : MDR_ERR_BACKEND; break;
          case 3: ms = mdr_graph_cache_step(c, ids, 1); break;
          default: ms = mdr_graph_cache_step_device(c, 0, 1); break;
        }
        v[k] = (now_ns() - t0) / 1e3;
        CHECK(ms == MDR_OK, names[what]);
      }
      CHECK(cudaStreamSynchronize(cs) == cudaSuccess, "sync");
      qsort(v, (size_t)tail_samples, sizeof *v, cmp);
      printf("  %-40s %-8s %7.2f %7.2f %7.2f %7.2f %7.2f\n", names[what], modes[mode],
             quantile(v, tail_samples, 0.5), quantile(v, tail_samples, 0.9), quantile(v, tail_samples, 0.99),
             quantile(v, tail_samples, 0.999), v[tail_samples - 1]);
    }
  }
  free(v);
  CHECK(cudaFree(load) == cudaSuccess, "cudaFree (load)");

  mdr_graph_stats st;
  CHECK(mdr_graph_cache_stats(c, &st) == MDR_OK && st.captures == 2 && st.eager_steps == 0, "all steps replayed");
  free(t);
  cudaGraphExecDestroy(x);
  cudaGraphDestroy(g);
  mdr_graph_cache_destroy(c);
  mdr_arena_destroy(a);
  mdr_backend_stream_destroy(b, s);
  mdr_backend_destroy(b);
  return 0;
}
