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
 * Two ways to feed the ids:
 *   host ids (default)  each step's ids are random ids made on the host from
 *                       the seed: mdr_graph_cache_step(cache, ids, tokens);
 *                       the eager path uploads them from a pinned buffer.
 *   --device-fed        each step's ids are the previous step's sampled
 *                       tokens, the argmax of its logits rows, computed on
 *                       the device by the body's last kernel into a device
 *                       buffer: mdr_graph_cache_step_device(cache, buffer,
 *                       tokens). The eager path has a buffer of its own and
 *                       does the same on the device (a device-to-device
 *                       copy, the body, the sampling), so both chains stay
 *                       bit-identical; the host never reads or writes ids
 *                       inside the loop. Rows past a step's count (and
 *                       past the first 160, which alone get logits) keep
 *                       what they held (the seed's ids, or an older
 *                       sample): a step with more tokens reads them.
 *
 * Every step also carries a paged-attention step's inputs (decode_model_paged.h):
 * positions, sequence lengths, query tokens and a block table, for a mixed
 * count of sequences (1 .. min(tokens, PAGED_MAX_SEQS)) that grow, end and
 * start again over the run. The graph path stages them with the ids in one
 * slot (mdr_graph_cache_step_inputs; device-fed: _step_inputs_device); the
 * eager path uploads them itself into buffers of its own. The body's
 * attention kernel reads them (and both counts) on the device; its output
 * is compared bit for bit between the paths and against a CPU reference.
 *
 * Measured and printed: the start-up prepare of counts 1..N (--prepare-all,
 * default M; --max-tokens sizes the arena up to 8192, --pad-kernels pads the
 * body, --zero picks the zeroing) in total ms, ms per graph, device memory
 * and nodes per graph; per step the host time (enqueue + synchronize), the
 * submit time (enqueue alone) and the GPU time (events) of both paths, as
 * medians per token-count bucket and as p50 / p90 / p99 / max.
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

static mdr_dptr dptr(const void *p) { return (mdr_dptr)(uintptr_t)p; }

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* ---- the loop's state ---------------------------------------------------- */

typedef struct timing {
  double host_us, submit_us, gpu_us;
} timing;

typedef struct loop {
  cudaEvent_t ev0, ev1;
  bool device_fed;
  uint32_t *ids_pinned, *ids;    /* the eager upload's source (pinned); the step's ids (host) */
  uint32_t *fed_eager, *fed_graph; /* --device-fed: each chain's next ids, M each, device memory */
  uint16_t *logits_a, *logits_b; /* logit_rows x V BF16 each: eager, graph */
  double *samples[SERIES_COUNT]; /* per step, µs */
  double *scratch;
  int *bucket;                   /* per step */
  uint64_t rng;                  /* the token schedule */
  size_t mismatched_steps, printed, last_tokens;
  /* paged attention */
  paged_state ps;
  paged_step *st;                /* this step's inputs */
  const void *values[1 + PAGED_INPUTS];
  uint32_t *paged_pinned;        /* the eager upload's source: the counts, then each input */
  float *attn_a, *attn_b;        /* attention output read back: eager, graph */
  double *attn_ref;              /* the CPU reference */
  uint16_t *q_host;              /* qkv_output rows read back (the reference's queries) */
  size_t attn_mismatched_steps, attn_ref_failures, attn_checked_values;
  double attn_worst;
} loop;

/* ---- one step, two ways ------------------------------------------------ */

/* Close a timed step begun at host time h0 with ev0 recorded: note the
 * submit time, record ev1, wait for the stream, fill host and GPU
 * microseconds. */
static int finish_timing(model *m, loop *L, double h0, timing *t) {
  t->submit_us = now_us() - h0;
  CUDA_OK(cudaEventRecord(L->ev1, m->stream));
  CUDA_OK(cudaStreamSynchronize(m->stream));
  double h1 = now_us();
  float ms = 0;
  CUDA_OK(cudaEventElapsedTime(&ms, L->ev0, L->ev1));
  t->host_us = h1 - h0;
  t->gpu_us = (double)ms * 1e3;
  return 0;
fail:
  return -1;
}

/* Eager step: the seed's path. zero_all_rows (MDR_ZERO_MEMSET; --zero
 * fused: MDR_ZERO_FUSED), the ids, the body, then wait. Host ids (fed =
 * false): L->ids copied to the pinned buffer, then uploaded. Device-fed: the
 * eager chain's ids copied on the device, and the body's logits sampled
 * back into that chain's buffer. zero = false skips the zeroing (the
 * demo). */
static int eager_step(model *m, loop *L, size_t tokens, bool fed, bool zero, timing *t) {
  const size_t id_bytes = tokens * sizeof *L->ids;
  if (!fed) memcpy(L->ids_pinned, L->ids, id_bytes); /* the previous step has finished */
  /* the paged inputs: the counts, then each input's rows, packed */
  const paged_set *ps = &m->paged.set[PAGED_EAGER];
  size_t off[PAGED_INPUTS], used = 2;
  L->paged_pinned[0] = (uint32_t)L->st->tokens;
  L->paged_pinned[1] = (uint32_t)L->st->sequences;
  for (int i = 0; i < PAGED_INPUTS; ++i) {
    off[i] = used;
    memcpy(L->paged_pinned + used, L->values[1 + i], paged_elems(L->st, i) * sizeof(uint32_t));
    used += paged_elems(L->st, i);
  }
  CUDA_OK(cudaMemsetAsync(m->paged.out, 0xFF, PAGED_MAX_SEQS * PAGED_HEADS * PAGED_HEAD_DIM * sizeof(float),
                          m->stream)); /* NaN: a row the attention does not write shows */
  m->paged.use = PAGED_EAGER;
  double h0 = now_us();
  CUDA_OK(cudaEventRecord(L->ev0, m->stream));
  if (zero) MDR_CHECK_(m->backend, mdr_arena_zero_all_rows(m->arena, m->stream, tokens));
  CUDA_OK(cudaMemcpyAsync(arena_ptr(m, MDR_BUF_TOKEN_IDS), fed ? (const void *)L->fed_eager : L->ids_pinned,
                          id_bytes, fed ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice, m->stream));
  CUDA_OK(cudaMemcpyAsync(m->paged.eager_words, L->paged_pinned, 2 * sizeof(uint32_t), cudaMemcpyHostToDevice,
                          m->stream));
  for (int i = 0; i < PAGED_INPUTS; ++i)
    CUDA_OK(cudaMemcpyAsync(ps->in[i], L->paged_pinned + off[i], paged_elems(L->st, i) * sizeof(uint32_t),
                            cudaMemcpyHostToDevice, m->stream));
  MDR_CHECK_(m->backend, decode_body(m, m->stream, tokens));
  if (fed) MDR_CHECK_(m->backend, decode_sample(m, m->stream, tokens, L->fed_eager));
  return finish_timing(m, L, h0, t);
fail:
  return -1;
}

/* Graph step: what an engine's loop calls once per decode step. Host ids:
 * mdr_graph_cache_step_inputs stages L->ids and the paged inputs in one
 * slot. Device-fed: the ids are where the previous step's body sampled them
 * (L->fed_graph = m->sample_ids), the paged inputs staged as before. */
static int graph_step(model *m, loop *L, mdr_graph_cache *cache, size_t tokens, timing *t) {
  const size_t n_values = 1 + PAGED_INPUTS, seqs = L->st->sequences;
  CUDA_OK(cudaMemsetAsync(m->paged.out, 0xFF, PAGED_MAX_SEQS * PAGED_HEADS * PAGED_HEAD_DIM * sizeof(float),
                          m->stream));
  m->paged.use = PAGED_GRAPH; /* what a capture on a miss records */
  double h0 = now_us();
  CUDA_OK(cudaEventRecord(L->ev0, m->stream));
  mdr_status st = L->device_fed
                      ? mdr_graph_cache_step_inputs_device(cache, dptr(L->fed_graph), L->values, n_values, tokens, seqs)
                      : mdr_graph_cache_step_inputs(cache, L->values, n_values, tokens, seqs);
  if (st == MDR_ERR_CAPTURE) {
    /* The cache ran this step eagerly; the step's work is enqueued. */
    fprintf(stderr, "decode_loop: warning: capture for %zu tokens failed, ran eagerly (%s)\n",
            tokens, mdr_backend_last_error(m->backend));
  } else {
    MDR_CHECK_(m->backend, st);
  }
  return finish_timing(m, L, h0, t);
fail:
  return -1;
}

/* ---- the loop's helpers ------------------------------------------------- */

static int loop_init(loop *L, const model *m, const options *opt) {
  const size_t M = m->max_tokens;
  L->device_fed = opt->device_fed;
  CUDA_OK(cudaMallocHost((void **)&L->ids_pinned, M * sizeof *L->ids_pinned));
  if (L->device_fed) {
    CUDA_OK(cudaMalloc((void **)&L->fed_eager, M * sizeof *L->fed_eager));
    CUDA_OK(cudaMalloc((void **)&L->fed_graph, M * sizeof *L->fed_graph));
  }
  L->ids = malloc(M * sizeof *L->ids);
  L->logits_a = malloc(m->logit_rows * m->vocab * sizeof *L->logits_a);
  L->logits_b = malloc(m->logit_rows * m->vocab * sizeof *L->logits_b);
  L->st = malloc(sizeof *L->st);
  size_t pinned = 2;
  for (int i = 0; i < PAGED_INPUTS; ++i) pinned += paged_input_bytes(i, M) / sizeof(uint32_t);
  CUDA_OK(cudaMallocHost((void **)&L->paged_pinned, pinned * sizeof(uint32_t)));
  const size_t attn = (size_t)PAGED_MAX_SEQS * PAGED_HEADS * PAGED_HEAD_DIM;
  L->attn_a = malloc(attn * sizeof *L->attn_a);
  L->attn_b = malloc(attn * sizeof *L->attn_b);
  L->attn_ref = malloc(attn * sizeof *L->attn_ref);
  L->q_host = malloc(M * m->qkv_dim * sizeof *L->q_host);
  if (!L->st || !L->attn_a || !L->attn_b || !L->attn_ref || !L->q_host) goto fail;
  paged_init(&L->ps, opt->seed);
  L->bucket = malloc(opt->steps * sizeof *L->bucket);
  L->scratch = malloc(opt->steps * sizeof *L->scratch);
  if (!L->ids || !L->logits_a || !L->logits_b || !L->bucket || !L->scratch) goto fail;
  for (int s = 0; s < SERIES_COUNT; ++s)
    if (!(L->samples[s] = malloc(opt->steps * sizeof(double)))) goto fail;
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
  if (L->paged_pinned) cudaFreeHost(L->paged_pinned);
  free(L->st);
  free(L->attn_a);
  free(L->attn_b);
  free(L->attn_ref);
  free(L->q_host);
  if (L->fed_eager) cudaFree(L->fed_eager);
  if (L->fed_graph) cudaFree(L->fed_graph);
  free(L->ids);
  free(L->logits_a);
  free(L->logits_b);
  free(L->bucket);
  free(L->scratch);
  for (int s = 0; s < SERIES_COUNT; ++s) free(L->samples[s]);
}

/* The logits of a step over `tokens` tokens: logit_tokens(m, tokens) rows. */
static int read_logits(model *m, uint16_t *host, size_t tokens) {
  CUDA_OK(cudaMemcpyAsync(host, arena_ptr(m, MDR_BUF_LOGITS), logit_tokens(m, tokens) * m->vocab * sizeof *host,
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
  int b = (int)(ex_splitmix64(rng) % BUCKET_COUNT);
  size_t lo = bucket_lo[b], hi = bucket_hi(b) < max_tokens ? bucket_hi(b) : max_tokens;
  if (lo > hi) lo = hi;
  return lo + (size_t)(ex_splitmix64(rng) % (hi - lo + 1));
}

static void fill_ids(uint64_t *rng, uint32_t *ids, size_t tokens, size_t vocab) {
  for (size_t i = 0; i < tokens; ++i) ids[i] = (uint32_t)(ex_splitmix64(rng) % vocab);
}

/* The next step's paged inputs over `tokens` tokens: a mixed sequence count
 * up to max_seqs, the sequences advanced (decode_model_paged.c). */
static void next_paged(loop *L, size_t tokens, size_t max_seqs) {
  paged_next(&L->ps, tokens, paged_pick_sequences(&L->ps, tokens, max_seqs), L->st);
  paged_values(L->st, L->ids, L->values);
}

/* The attention output of the step just run (its sequences' rows). */
static int read_attention(model *m, float *host, size_t sequences) {
  CUDA_OK(cudaMemcpyAsync(host, m->paged.out, sequences * PAGED_HEADS * PAGED_HEAD_DIM * sizeof *host,
                          cudaMemcpyDeviceToHost, m->stream));
  CUDA_OK(cudaStreamSynchronize(m->stream));
  return 0;
fail:
  return -1;
}

/* The step's attention, both paths: bit for bit against each other, and the
 * graph's against the CPU reference over the queries in qkv_output (the
 * last path's, bit-identical to the other's when the logits are). */
static int check_attention(model *m, loop *L, size_t step) {
  const size_t s = L->st->sequences, n = s * PAGED_HEADS * PAGED_HEAD_DIM, t = L->st->tokens;
  if (memcmp(L->attn_a, L->attn_b, n * sizeof *L->attn_a) != 0) {
    if (L->attn_mismatched_steps++ < MAX_PRINTED_MISMATCHES)
      printf("MISMATCH step %zu (%zu tokens, %zu sequences): attention outputs differ (eager vs graph)\n", step,
             t, s);
  }
  CUDA_OK(cudaMemcpyAsync(L->q_host, arena_ptr(m, MDR_BUF_QKV_OUTPUT), t * m->qkv_dim * sizeof *L->q_host,
                          cudaMemcpyDeviceToHost, m->stream));
  CUDA_OK(cudaStreamSynchronize(m->stream));
  paged_attention_ref(L->st, L->q_host, m->qkv_dim, m->paged.k_host, m->paged.v_host, L->attn_ref);
  double worst = 0;
  size_t bad = paged_compare(L->attn_b, L->attn_ref, s, &worst);
  if (worst > L->attn_worst) L->attn_worst = worst;
  L->attn_checked_values += n;
  if (bad && L->attn_ref_failures++ < MAX_PRINTED_MISMATCHES)
    printf("MISMATCH step %zu (%zu tokens, %zu sequences): %zu attention values off the CPU reference (max "
           "|diff| %.3g)\n", step, t, s, bad, worst);
  return 0;
fail:
  return -1;
}

/* Warm-up: one eager step per GEMM shape loads every kernel before the
 * first capture and before timing (device-fed: the sampling kernel too). */
static int warm_up(model *m, loop *L) {
  for (size_t rows = ROW_TILE; rows <= m->max_rows; rows += ROW_TILE) {
    size_t t = rows < m->max_tokens ? rows : m->max_tokens;
    timing tm;
    fill_ids(&L->rng, L->ids, t, m->vocab);
    next_paged(L, t, PAGED_MAX_SEQS);
    if (eager_step(m, L, t, false, true, &tm) != 0) return -1;
    if (L->device_fed) {
      MDR_CHECK_(m->backend, decode_sample(m, m->stream, t, L->fed_eager)); /* seed_chains rewrites it */
      CUDA_OK(cudaStreamSynchronize(m->stream));
    }
  }
  paged_init(&L->ps, L->rng); /* the run's sequences start empty */
  return 0;
fail:
  return -1;
}

/* Device-fed: both chains start from the same M ids (made on the host from
 * the seed, the last ids the host writes); from then on each step's ids
 * are the previous step's samples. */
static int seed_chains(model *m, loop *L) {
  const size_t bytes = m->max_tokens * sizeof *L->ids;
  fill_ids(&L->rng, L->ids, m->max_tokens, m->vocab);
  CUDA_OK(cudaMemcpyAsync(L->fed_eager, L->ids, bytes, cudaMemcpyHostToDevice, m->stream));
  CUDA_OK(cudaMemcpyAsync(L->fed_graph, L->ids, bytes, cudaMemcpyHostToDevice, m->stream));
  CUDA_OK(cudaStreamSynchronize(m->stream));
  return 0;
fail:
  return -1;
}

/* Device-fed, after the loop: the two chains' ids must be the same. */
static int compare_chains(model *m, loop *L, bool *same) {
  const size_t M = m->max_tokens;
  uint32_t *a = malloc(M * sizeof *a), *b = malloc(M * sizeof *b);
  if (!a || !b) goto fail;
  CUDA_OK(cudaMemcpyAsync(a, L->fed_eager, M * sizeof *a, cudaMemcpyDeviceToHost, m->stream));
  CUDA_OK(cudaMemcpyAsync(b, L->fed_graph, M * sizeof *b, cudaMemcpyDeviceToHost, m->stream));
  CUDA_OK(cudaStreamSynchronize(m->stream));
  *same = memcmp(a, b, M * sizeof *a) == 0;
  printf("device-fed: the eager and graph chains' next ids (%zu) are %s\n", M,
         *same ? "identical" : "DIFFERENT");
  free(a);
  free(b);
  return 0;
fail:
  free(a);
  free(b);
  return -1;
}

/* The loop: each step eagerly and through the cache (alternating which goes
 * first), logits of the first `tokens` rows compared bit for bit. */
static int run_steps(model *m, mdr_graph_cache *cache, loop *L, size_t steps) {
  const size_t V = m->vocab;
  const bool fed = L->device_fed;
  for (size_t step = 0; step < steps; ++step) {
    size_t t = pick_tokens(&L->rng, m->max_tokens);
    if (!fed) fill_ids(&L->rng, L->ids, t, V); /* device-fed: the ids are on the device already */
    next_paged(L, t, PAGED_MAX_SEQS);
    const size_t seqs = L->st->sequences;
    timing te, tg;
    uint16_t *eager_out = L->logits_a, *graph_out = L->logits_b;
    if (step % 2 == 0) {
      if (eager_step(m, L, t, fed, true, &te) || read_logits(m, eager_out, t) ||
          read_attention(m, L->attn_a, seqs) || graph_step(m, L, cache, t, &tg) ||
          read_logits(m, graph_out, t) || read_attention(m, L->attn_b, seqs))
        return -1;
    } else {
      if (graph_step(m, L, cache, t, &tg) || read_logits(m, graph_out, t) ||
          read_attention(m, L->attn_b, seqs) || eager_step(m, L, t, fed, true, &te) ||
          read_logits(m, eager_out, t) || read_attention(m, L->attn_a, seqs))
        return -1;
    }
    if (check_attention(m, L, step) != 0) return -1;
    size_t first, n = logit_tokens(m, t) * V;
    size_t diffs = count_diffs(eager_out, graph_out, n, &first);
    if (diffs) {
      ++L->mismatched_steps;
      if (L->printed++ < MAX_PRINTED_MISMATCHES)
        printf("MISMATCH step %zu (%zu tokens): %zu of %zu logits differ; first at row %zu col "
               "%zu: eager 0x%04x graph 0x%04x\n",
               step, t, diffs, n, first / V, first % V, eager_out[first], graph_out[first]);
    }
    L->bucket[step] = bucket_of(t);
    L->samples[SERIES_EAGER_HOST][step] = te.host_us;
    L->samples[SERIES_GRAPH_HOST][step] = tg.host_us;
    L->samples[SERIES_EAGER_GPU][step] = te.gpu_us;
    L->samples[SERIES_GRAPH_GPU][step] = tg.gpu_us;
    L->samples[SERIES_EAGER_SUBMIT][step] = te.submit_us;
    L->samples[SERIES_GRAPH_SUBMIT][step] = tg.submit_us;
    L->last_tokens = t;
    if ((step + 1) % PROGRESS_EVERY == 0 || step + 1 == steps) {
      summary so_far;
      summarize(L->samples, L->bucket, step + 1, -1, L->scratch, &so_far);
      printf("step %zu/%zu: mismatched steps %zu (attention %zu, off the reference %zu); median host us eager "
             "%.1f graph %.1f\n",
             step + 1, steps, L->mismatched_steps, L->attn_mismatched_steps, L->attn_ref_failures,
             so_far.median[SERIES_EAGER_HOST],
             so_far.median[SERIES_GRAPH_HOST]);
      fflush(stdout);
    }
  }
  return 0;
}

/* Why the zeroing matters: the last step's count once more, eagerly with
 * host ids (device-fed: the chains' seed ids), with zero_all_rows skipped.
 * moe_output still holds that step's sums, the accumulation adds on top of
 * them, and the logits change. */
static int show_zeroing(model *m, loop *L, bool *shown) {
  timing tz;
  size_t first, t = L->last_tokens;
  if (eager_step(m, L, t, false, true, &tz) || read_logits(m, L->logits_a, t) ||
      eager_step(m, L, t, false, false, &tz) || read_logits(m, L->logits_b, t))
    return -1;
  const size_t n = logit_tokens(m, t) * m->vocab;
  size_t diffs = count_diffs(L->logits_a, L->logits_b, n, &first);
  *shown = diffs > 0;
  printf("without zeroing (%zu tokens, moe_output not cleared): %zu of %zu logits differ%s\n", t,
         diffs, n, *shown ? " -- the zeroed rows are required" : " -- UNEXPECTED");
  return 0;
}

/* Prepare: capture the graphs of counts 1..n up front (device-fed: the
 * graphs of device steps with their ids at L->fed_graph), timed on the
 * host's wall clock up to the stream's last upload; what they hold from the
 * cache's stats. */
static int prepare_graphs(model *m, loop *L, mdr_graph_cache *cache, size_t n, prepare_report *out,
                          bool *disabled) {
  int rc = -1;
  size_t *counts = malloc(n * sizeof *counts);
  if (!counts) return -1;
  for (size_t i = 0; i < n; ++i) counts[i] = i + 1;
  mdr_graph_stats g0, g1;
  MDR_CHECK_(m->backend, mdr_graph_cache_stats(cache, &g0));
  /* the graphs read the step inputs' destinations, not the eager path's own
   * buffers: the body records whichever set is in use when it is captured */
  m->paged.use = PAGED_GRAPH;
  double t0 = now_us();
  if (L->device_fed)
    MDR_CHECK_(m->backend, mdr_graph_cache_prepare_device(cache, dptr(L->fed_graph), counts, n));
  else
    MDR_CHECK_(m->backend, mdr_graph_cache_prepare(cache, counts, n));
  CUDA_OK(cudaStreamSynchronize(m->stream));
  double t1 = now_us();
  MDR_CHECK_(m->backend, mdr_graph_cache_stats(cache, &g1));
  *out = (prepare_report){.counts = n, .wall_ms = (t1 - t0) / 1e3,
                          .capture_ms = (g1.capture_us - g0.capture_us) / 1e3, .graphs = g1.graphs,
                          .graph_bytes = g1.graph_bytes, .graph_nodes = g1.graph_nodes,
                          .memory_measured = g1.memory_measured};
  *disabled = g1.graphs_disabled != 0;
  rc = 0;
fail:
  free(counts);
  return rc;
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
  bool zeroing_shown = false, chains_same = true, graphs_disabled = false;
  prepare_report prep;
  memset(&prep, 0, sizeof prep);
  set_max_tokens(opt.max_tokens);

  /* ---- the mdr part: what an engine writes -------------------------------
   * A backend and a stream (mdr never uses the legacy default stream). */
  mdr_status st = mdr_backend_cuda_create(0, &m->backend);
  if (st == MDR_ERR_NO_DEVICE) {
    printf("decode_loop: needs a CUDA GPU (mdr: %s); skipping\n", mdr_status_string(st));
    return EXIT_SKIP;
  }
  MDR_CHECK_(m->backend, st);
  MDR_CHECK_(m->backend, mdr_backend_stream_create(m->backend, &stream));
  m->stream = (cudaStream_t)stream;

  /* The arena: every activation buffer of a step in one allocation, sized
   * from the model config and limits; pointers never move. */
  mdr_model_config cfg;
  if (model_config(&cfg) != 0) {
    fprintf(stderr, "decode_loop: preset qwen3-next-80b missing\n");
    goto fail;
  }
  mdr_limits lim = model_limits(opt.max_tokens);
  mdr_sizes sizes;
  MDR_CHECK_(m->backend, mdr_sizes_from_config(&cfg, &lim, &sizes));
  MDR_CHECK_(m->backend, mdr_arena_create(m->backend, &sizes, &m->arena));
  MDR_CHECK_(m->backend, mdr_arena_set_zero_strategy(m->arena, opt.zero)); /* --zero; memset by default */

  /* (the engine's own model on that arena: weights, cuBLASLt; then the
   * buffers of this example's loop and one eager step per GEMM shape) */
  m->pad_kernels = opt.pad_kernels;
  if (model_init(m, &cfg, opt.seed) != 0 || model_paged_init(m, opt.seed) != 0 || loop_init(&L, m, &opt) != 0 ||
      warm_up(m, &L) != 0)
    goto fail;
  m->sample_ids = L.fed_graph; /* device-fed: where the graphs' body samples the next ids */
  printf("decode_loop: %s ids%s\n", opt.device_fed ? "device-fed" : "host",
         opt.device_fed ? ": each step's ids are the previous step's argmax, on the device "
                          "(mdr_graph_cache_step_device)"
                        : " (mdr_graph_cache_step; --device-fed for ids sampled on the device)");

  /* The graph cache: per token count, one graph of zeroing + token-id upload
   * + the body callback (the step's kernels, decode_model.c; device-fed:
   * ending with the sampling of the next step's ids). EXACT mode, the
   * arena's zeroing (memset nodes, or with --zero fused one kernel node). */
  mdr_graph_cache_options go;
  mdr_graph_cache_options_default(&go);
  go.mode = MDR_GRAPH_EXACT;
  go.zero = opt.zero;
  go.body = opt.device_fed ? decode_body_sampled : decode_body;
  go.user = m;
  /* The paged attention's step inputs: staged with the ids, one slot per
   * step, each to its buffer in the graph set (decode_model_paged.c). */
  mdr_step_input inputs[PAGED_INPUTS];
  mdr_dptr dst[PAGED_INPUTS];
  for (int i = 0; i < PAGED_INPUTS; ++i) dst[i] = dptr(m->paged.set[PAGED_GRAPH].in[i]);
  paged_declare(inputs, dst);
  go.inputs = inputs;
  go.n_inputs = PAGED_INPUTS;
  go.max_sequences = PAGED_MAX_SEQS < opt.max_tokens ? PAGED_MAX_SEQS : opt.max_tokens;
  MDR_CHECK_(m->backend, mdr_graph_cache_create(m->arena, stream, &go, &cache));
  /* the graphs' attention reads the counts where every step writes them */
  m->paged.set[PAGED_GRAPH].tokens_word = (const uint32_t *)(uintptr_t)mdr_graph_cache_count_ptr(cache);
  m->paged.set[PAGED_GRAPH].sequences_word = (const uint32_t *)(uintptr_t)mdr_graph_cache_sequences_ptr(cache);

  /* Prepare: capture every count 1..N (--prepare-all, default M) up front,
   * so that steps only replay. */
  if (prepare_graphs(m, &L, cache, opt.prepare_all, &prep, &graphs_disabled) != 0) goto fail;
  print_prepare(&prep, graphs_disabled);

  /* The decode loop: one mdr_graph_cache_step(cache, ids, tokens) per step
   * (device-fed: mdr_graph_cache_step_device(cache, ids on the device,
   * tokens)) in graph_step, each checked against the same step run eagerly. */
  if (opt.device_fed && seed_chains(m, &L) != 0) goto fail;
  if (run_steps(m, cache, &L, opt.steps) != 0) goto fail;
  /* ---- end of the mdr part ------------------------------------------------ */

  if (opt.device_fed && compare_chains(m, &L, &chains_same) != 0) goto fail;
  if (show_zeroing(m, &L, &zeroing_shown) != 0) goto fail;

  /* Report. */
  summary per[BUCKET_COUNT], all;
  print_report(L.samples, L.bucket, opt.steps, L.scratch, per, &all);
  mdr_graph_stats gs;
  MDR_CHECK_(m->backend, mdr_graph_cache_stats(cache, &gs));
  printf("graph cache: %zu graphs, %" PRIu64 " hits, %" PRIu64 " misses, %" PRIu64
         " eager steps, %" PRIu64 " fallbacks, %" PRIu64 " device-id steps\n",
         gs.graphs, gs.hits, gs.misses, gs.eager_steps, gs.eager_fallbacks, gs.device_steps);
  if (opt.json && write_json(opt.json, &opt, m, per, &all, L.mismatched_steps, &gs, &prep) != 0)
    goto fail;

  printf("paged attention: %zu steps, %zu values checked; eager vs graph bit-identical in %zu steps; CPU "
         "reference: %zu steps off, max |diff| %.3g\n", opt.steps, L.attn_checked_values,
         opt.steps - L.attn_mismatched_steps, L.attn_ref_failures, L.attn_worst);
  if (L.mismatched_steps) {
    printf("FAIL: %zu of %zu steps differ between eager and graph\n", L.mismatched_steps, opt.steps);
  } else if (L.attn_mismatched_steps) {
    printf("FAIL: the attention of %zu of %zu steps differs between eager and graph\n", L.attn_mismatched_steps,
           opt.steps);
  } else if (L.attn_ref_failures) {
    printf("FAIL: the attention of %zu of %zu steps is off the CPU reference\n", L.attn_ref_failures, opt.steps);
  } else if (!chains_same) {
    printf("FAIL: the eager and graph chains of sampled ids differ\n");
  } else if (!zeroing_shown) {
    printf("FAIL: skipping the zeroing did not change the logits\n");
  } else {
    printf("OK: %zu steps bit-identical (eager vs graph, %s ids)\n", opt.steps,
           opt.device_fed ? "device-fed" : "host");
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
