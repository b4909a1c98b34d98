/* mdr example — a synthetic decode loop on an mdr arena, with cuBLASLt GEMMs,
 * run eagerly and through mdr_graph_cache (EXACT mode), checked bit for bit.
 *
 * This file is the engine's side of mdr. main() reads top to bottom as an
 * engine writes it ("the mdr part"): a backend and a stream; an arena sized
 * from the model config; the graph-cache options with the body callback (the
 * step's own kernels); prepare, which captures a graph per token count; then
 * one mdr_graph_cache_step per decode step (graph_step). eager_step is the
 * same step without graphs: zero_all_rows, the id upload, the body. Every
 * step runs both ways and their logits are compared bit for bit.
 *
 * Elsewhere: the model (config, weights, cuBLASLt GEMMs, the body) in
 * decode_model.c, its kernels in decode_kernels.cu, the command line,
 * statistics, table and JSON in decode_report.c.
 *
 * Exit codes: 0 ok, 1 mismatch or failure, 2 bad usage, 77 no GPU (CTest skip). */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include <mdr/mdr.h>

#include "decode_model.h"
#include "decode_report.h"

#define MAX_PRINTED_MISMATCHES 10
#define PROGRESS_EVERY 50 /* steps between progress lines */

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* ---- one step, two ways ------------------------------------------------ */

typedef struct timing {
  double host_us, gpu_us;
} timing;

/* Close a timed step begun at host time h0 with ev0 recorded: record ev1,
 * wait for the stream, fill host and GPU microseconds. */
static int finish_timing(model *m, cudaEvent_t ev0, cudaEvent_t ev1, double h0, timing *t) {
  CUDA_OK(cudaEventRecord(ev1, m->stream));
  CUDA_OK(cudaStreamSynchronize(m->stream));
  double h1 = now_us();
  float ms = 0;
  CUDA_OK(cudaEventElapsedTime(&ms, ev0, ev1));
  t->host_us = h1 - h0;
  t->gpu_us = (double)ms * 1e3;
  return 0;
fail:
  return -1;
}

/* Eager step: the seed's path. zero_all_rows (MDR_ZERO_MEMSET), copy the ids,
 * enqueue the body, then wait. zero = false skips the zeroing (the demo). */
static int eager_step(model *m, uint32_t *ids_pinned, const uint32_t *ids, size_t tokens,
                      bool zero, cudaEvent_t ev0, cudaEvent_t ev1, timing *t) {
  memcpy(ids_pinned, ids, tokens * sizeof *ids); /* the previous step has finished */
  double h0 = now_us();
  CUDA_OK(cudaEventRecord(ev0, m->stream));
  if (zero) MDR_OK_(m, mdr_arena_zero_all_rows(m->arena, m->stream, tokens));
  CUDA_OK(cudaMemcpyAsync(arena_ptr(m, MDR_BUF_TOKEN_IDS), ids_pinned, tokens * sizeof *ids,
                          cudaMemcpyHostToDevice, m->stream));
  MDR_OK_(m, decode_body(m, m->stream, tokens));
  return finish_timing(m, ev0, ev1, h0, t);
fail:
  return -1;
}

/* Graph step: what an engine's loop calls once per decode step. */
static int graph_step(model *m, mdr_graph_cache *cache, const uint32_t *ids, size_t tokens,
                      cudaEvent_t ev0, cudaEvent_t ev1, timing *t) {
  double h0 = now_us();
  CUDA_OK(cudaEventRecord(ev0, m->stream));
  mdr_status st = mdr_graph_cache_step(cache, ids, tokens);
  if (st == MDR_ERR_CAPTURE) {
    /* The cache ran this step eagerly; the step's work is enqueued. */
    fprintf(stderr, "decode_loop: warning: capture for %zu tokens failed, ran eagerly (%s)\n",
            tokens, mdr_backend_last_error(m->backend));
  } else {
    MDR_OK_(m, st);
  }
  return finish_timing(m, ev0, ev1, h0, t);
fail:
  return -1;
}

/* ---- the loop's state and helpers -------------------------------------- */

typedef struct loop {
  cudaEvent_t ev0, ev1;
  uint32_t *ids_pinned, *ids;   /* the eager upload's source (pinned); the step's ids */
  uint16_t *logits_a, *logits_b; /* M x V BF16 each: eager, graph */
  double *samples[SERIES_COUNT]; /* per step, µs */
  double *scratch;
  int *bucket;                   /* per step */
  uint64_t rng;                  /* the token schedule */
  size_t mismatched_steps, printed, last_tokens;
} loop;

static int loop_init(loop *L, const model *m, const options *opt) {
  CUDA_OK(cudaMallocHost((void **)&L->ids_pinned, m->max_tokens * sizeof *L->ids_pinned));
  L->ids = malloc(m->max_tokens * sizeof *L->ids);
  L->logits_a = malloc(m->max_tokens * m->vocab * sizeof *L->logits_a);
  L->logits_b = malloc(m->max_tokens * m->vocab * sizeof *L->logits_b);
  L->bucket = malloc(opt->steps * sizeof *L->bucket);
  L->scratch = malloc(opt->steps * sizeof *L->scratch);
  for (int s = 0; s < SERIES_COUNT; ++s) L->samples[s] = malloc(opt->steps * sizeof(double));
  if (!L->ids || !L->logits_a || !L->logits_b || !L->bucket || !L->scratch || !L->samples[0] ||
      !L->samples[1] || !L->samples[2] || !L->samples[3])
    goto fail;
  CUDA_OK(cudaEventCreate(&L->ev0));
  CUDA_OK(cudaEventCreate(&L->ev1));
  L->rng = opt->seed;
  L->last_tokens = 1;
  return 0;
fail:
  return -1;
}

static void loop_fini(loop *L) {
  if (L->ev0) cudaEventDestroy(L->ev0);
  if (L->ev1) cudaEventDestroy(L->ev1);
  if (L->ids_pinned) cudaFreeHost(L->ids_pinned);
  free(L->ids);
  free(L->logits_a);
  free(L->logits_b);
  free(L->bucket);
  free(L->scratch);
  for (int s = 0; s < SERIES_COUNT; ++s) free(L->samples[s]);
}

static int read_logits(model *m, uint16_t *host, size_t tokens) {
  CUDA_OK(cudaMemcpyAsync(host, arena_ptr(m, MDR_BUF_LOGITS), tokens * m->vocab * sizeof *host,
                          cudaMemcpyDeviceToHost, m->stream));
  CUDA_OK(cudaStreamSynchronize(m->stream));
  return 0;
fail:
  return -1;
}

/* Number of differing BF16 values; *first = index of the first one. */
static size_t count_diffs(const uint16_t *a, const uint16_t *b, size_t n, size_t *first) {
  size_t d = 0;
  *first = n;
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) {
      if (d++ == 0) *first = i;
    }
  return d;
}

static size_t pick_tokens(uint64_t *rng, size_t max_tokens) {
  /* A bucket first, then a count inside it: short runs still cover all four. */
  int b = (int)(splitmix64(rng) % BUCKET_COUNT);
  size_t lo = bucket_lo[b], hi = bucket_hi[b] < max_tokens ? bucket_hi[b] : max_tokens;
  if (lo > hi) lo = hi;
  return lo + (size_t)(splitmix64(rng) % (hi - lo + 1));
}

static void fill_ids(uint64_t *rng, uint32_t *ids, size_t tokens, size_t vocab) {
  for (size_t i = 0; i < tokens; ++i) ids[i] = (uint32_t)(splitmix64(rng) % vocab);
}

/* Warm-up: one eager step per GEMM shape loads every kernel before the
 * first capture and before timing. */
static int warm_up(model *m, loop *L) {
  for (size_t rows = ROW_TILE; rows <= m->max_rows; rows += ROW_TILE) {
    size_t t = rows < m->max_tokens ? rows : m->max_tokens;
    timing tm;
    fill_ids(&L->rng, L->ids, t, m->vocab);
    if (eager_step(m, L->ids_pinned, L->ids, t, true, L->ev0, L->ev1, &tm) != 0) return -1;
  }
  return 0;
}

/* The loop: each step eagerly and through the cache (alternating which goes
 * first), logits of the first `tokens` rows compared bit for bit. */
static int run_steps(model *m, mdr_graph_cache *cache, loop *L, size_t steps) {
  const size_t V = m->vocab;
  for (size_t step = 0; step < steps; ++step) {
    size_t t = pick_tokens(&L->rng, m->max_tokens);
    fill_ids(&L->rng, L->ids, t, V);
    timing te, tg;
    uint16_t *eager_out = L->logits_a, *graph_out = L->logits_b;
    if (step % 2 == 0) {
      if (eager_step(m, L->ids_pinned, L->ids, t, true, L->ev0, L->ev1, &te) ||
          read_logits(m, eager_out, t) || graph_step(m, cache, L->ids, t, L->ev0, L->ev1, &tg) ||
          read_logits(m, graph_out, t))
        return -1;
    } else {
      if (graph_step(m, cache, L->ids, t, L->ev0, L->ev1, &tg) || read_logits(m, graph_out, t) ||
          eager_step(m, L->ids_pinned, L->ids, t, true, L->ev0, L->ev1, &te) ||
          read_logits(m, eager_out, t))
        return -1;
    }
    size_t first;
    size_t diffs = count_diffs(eager_out, graph_out, t * V, &first);
    if (diffs) {
      ++L->mismatched_steps;
      if (L->printed++ < MAX_PRINTED_MISMATCHES)
        printf("MISMATCH step %zu (%zu tokens): %zu of %zu logits differ; first at row %zu col "
               "%zu: eager 0x%04x graph 0x%04x\n",
               step, t, diffs, t * V, first / V, first % V, eager_out[first], graph_out[first]);
    }
    L->bucket[step] = bucket_of(t);
    L->samples[SERIES_EAGER_HOST][step] = te.host_us;
    L->samples[SERIES_GRAPH_HOST][step] = tg.host_us;
    L->samples[SERIES_EAGER_GPU][step] = te.gpu_us;
    L->samples[SERIES_GRAPH_GPU][step] = tg.gpu_us;
    L->last_tokens = t;
    if ((step + 1) % PROGRESS_EVERY == 0 || step + 1 == steps) {
      summary so_far;
      summarize(L->samples, L->bucket, step + 1, -1, L->scratch, &so_far);
      printf("step %zu/%zu: mismatched steps %zu; median host us eager %.1f graph %.1f\n",
             step + 1, steps, L->mismatched_steps, so_far.median[SERIES_EAGER_HOST],
             so_far.median[SERIES_GRAPH_HOST]);
      fflush(stdout);
    }
  }
  return 0;
}

/* Why the zeroing matters: the last step's ids once more, eagerly, with
 * zero_all_rows skipped. moe_output still holds that step's sums, the
 * accumulation adds on top of them, and the logits change. */
static int show_zeroing(model *m, loop *L, bool *shown) {
  timing tz;
  size_t first, t = L->last_tokens;
  if (eager_step(m, L->ids_pinned, L->ids, t, true, L->ev0, L->ev1, &tz) ||
      read_logits(m, L->logits_a, t) ||
      eager_step(m, L->ids_pinned, L->ids, t, false, L->ev0, L->ev1, &tz) ||
      read_logits(m, L->logits_b, t))
    return -1;
  size_t diffs = count_diffs(L->logits_a, L->logits_b, t * m->vocab, &first);
  *shown = diffs > 0;
  printf("without zeroing (%zu tokens, moe_output not cleared): %zu of %zu logits differ%s\n", t,
         diffs, t * m->vocab, *shown ? " -- the zeroed rows are required" : " -- UNEXPECTED");
  return 0;
}

/* ---- main --------------------------------------------------------------- */

int main(int argc, char **argv) {
  options opt;
  if (parse_options(argc, argv, &opt) != 0) return EXIT_USAGE;

  int devices = 0;
  cudaError_t de = cudaGetDeviceCount(&devices);
  if (de != cudaSuccess || devices == 0) {
    printf("decode_loop: needs a CUDA GPU (%s); skipping\n",
           de != cudaSuccess ? cudaGetErrorString(de) : "no device");
    return EXIT_SKIP;
  }

  int rc = EXIT_FAIL;
  model mm, *m = &mm;
  loop L;
  memset(m, 0, sizeof *m);
  memset(&L, 0, sizeof L);
  mdr_graph_cache *cache = NULL;
  mdr_stream stream = NULL;
  bool zeroing_shown = false;

  /* ---- the mdr part: what an engine writes -------------------------------
   * A backend and a stream (mdr never uses the legacy default stream). */
  mdr_status st = mdr_backend_cuda_create(0, &m->backend);
  if (st == MDR_ERR_NO_DEVICE) {
    printf("decode_loop: needs a CUDA GPU (mdr: %s); skipping\n", mdr_status_string(st));
    return EXIT_SKIP;
  }
  MDR_OK_(m, st);
  MDR_OK_(m, mdr_backend_stream_create(m->backend, &stream));
  m->stream = (cudaStream_t)stream;

  /* The arena: every activation buffer of a step in one allocation, sized
   * from the model config and limits; pointers never move. */
  mdr_model_config cfg;
  if (model_config(&cfg) != 0) {
    fprintf(stderr, "decode_loop: preset qwen3-next-80b missing\n");
    goto fail;
  }
  mdr_limits lim = model_limits();
  mdr_sizes sizes;
  MDR_OK_(m, mdr_sizes_from_config(&cfg, &lim, &sizes));
  MDR_OK_(m, mdr_arena_create(m->backend, &sizes, &m->arena));
  MDR_OK_(m, mdr_arena_set_zero_strategy(m->arena, MDR_ZERO_MEMSET));

  /* (the engine's own model on that arena: weights, cuBLASLt; then the
   * buffers of this example's loop and one eager step per GEMM shape) */
  if (model_init(m, &cfg, opt.seed) != 0 || loop_init(&L, m, &opt) != 0 || warm_up(m, &L) != 0)
    goto fail;

  /* The graph cache: per token count, one graph of zeroing + token-id upload
   * + the body callback (the step's kernels, decode_model.c). EXACT mode,
   * memset zeroing. */
  mdr_graph_cache_options go;
  mdr_graph_cache_options_default(&go);
  go.mode = MDR_GRAPH_EXACT;
  go.zero = MDR_ZERO_MEMSET;
  go.body = decode_body;
  go.user = m;
  MDR_OK_(m, mdr_graph_cache_create(m->arena, stream, &go, &cache));

  /* Prepare: capture every count 1..M up front, so that steps only replay. */
  {
    size_t counts[MAX_TOKENS];
    for (size_t i = 0; i < m->max_tokens; ++i) counts[i] = i + 1;
    MDR_OK_(m, mdr_graph_cache_prepare(cache, counts, m->max_tokens));
    CUDA_OK(cudaStreamSynchronize(m->stream));
    mdr_graph_stats gs;
    MDR_OK_(m, mdr_graph_cache_stats(cache, &gs));
    printf("decode_loop: %zu graphs captured in %.1f ms%s\n", gs.graphs, gs.capture_us / 1e3,
           gs.graphs == 0 ? " (graphs disabled: MDR_DISABLE_GRAPHS=1, the graph path is eager)"
                          : "");
  }

  /* The decode loop: one mdr_graph_cache_step(cache, ids, tokens) per step
   * (graph_step), each checked against the same step run eagerly. */
  if (run_steps(m, cache, &L, opt.steps) != 0) goto fail;
  /* ---- end of the mdr part ------------------------------------------------ */

  if (show_zeroing(m, &L, &zeroing_shown) != 0) goto fail;

  /* Report. */
  summary per[BUCKET_COUNT], all;
  print_report(L.samples, L.bucket, opt.steps, L.scratch, per, &all);
  mdr_graph_stats gs;
  MDR_OK_(m, mdr_graph_cache_stats(cache, &gs));
  printf("graph cache: %zu graphs, %" PRIu64 " hits, %" PRIu64 " misses, %" PRIu64
         " eager steps, %" PRIu64 " fallbacks\n",
         gs.graphs, gs.hits, gs.misses, gs.eager_steps, gs.eager_fallbacks);
  if (opt.json && write_json(opt.json, &opt, m, per, &all, L.mismatched_steps, &gs) != 0) goto fail;

  if (L.mismatched_steps) {
    printf("FAIL: %zu of %zu steps differ between eager and graph\n", L.mismatched_steps, opt.steps);
  } else if (!zeroing_shown) {
    printf("FAIL: skipping the zeroing did not change the logits\n");
  } else {
    printf("OK: %zu steps bit-identical (eager vs graph)\n", opt.steps);
    rc = 0;
  }

fail:
  /* Every resource, in reverse order; each release accepts "never made". */
  if (rc != 0 && m->stream) (void)cudaStreamSynchronize(m->stream);
  mdr_graph_cache_destroy(cache);
  loop_fini(&L);
  model_fini(m);
  mdr_arena_destroy(m->arena);
  if (m->backend && stream) mdr_backend_stream_destroy(m->backend, stream);
  mdr_backend_destroy(m->backend);
  return rc;
}
