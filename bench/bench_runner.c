/* bench_runner.c — one strategy's decode-step preparation (zero plan +
 * token-id upload) as mdr-bench times it, its setup and teardown, and the
 * CPU timing of its submitting call. graph-fused-dev is graph-fused with the
 * ids already in device memory (r->ids_dev, written once before any timing,
 * as an engine's sampling kernel would leave them): its step copies them on
 * the device, reading nothing from host memory. graph-fused-inputs is
 * graph-fused with a decode step's inputs declared beside the ids
 * (positions per token, a sequence length and INPUT_BLOCKS_PER_SEQ
 * block-table entries per sequence, each to a device buffer of its own) and
 * staged with them in the one slot by mdr_graph_cache_step_inputs.
 * graph-fused-dev-inputs is graph-fused-dev with the same inputs from the
 * host (mdr_graph_cache_step_inputs_device): the ids on the device, the
 * inputs and counts staged (inline for small counts). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

bool is_graph(strategy s) { return s >= STRAT_GRAPH_MEMSET; }

/* The eager baseline's upload: what the seed and the peers do. */
static void upload_ids_eager(runner *r, size_t tokens) {
  mdr_dptr dst = mdr_arena_token_ids(r->arena);
  size_t bytes = tokens * sizeof(uint32_t);
#ifdef MDR_HAVE_CUDA
  if (r->gpu) {
    CUDA_CHECK(cudaMemcpyAsync((void *)(uintptr_t)dst, r->ids_upload, bytes, cudaMemcpyHostToDevice,
                               (cudaStream_t)r->stream));
    return;
  }
#endif
  memcpy((void *)(uintptr_t)dst, r->ids_upload, bytes); /* host backend: device memory is host memory */
}

size_t input_sequences(const runner *r, size_t tokens) { return tokens < r->max_seqs ? tokens : r->max_seqs; }

bool has_inputs(strategy s) {
  return s == STRAT_GRAPH_FUSED_INPUTS || s == STRAT_GRAPH_FUSED_DEV_INPUTS || s == STRAT_GRAPH_FUSED_INPUTS_DEVTABLE;
}

/* The block table is in device memory, written by the engine (here once,
 * before timing): declared with device_src at its destination, so a step
 * stages no values for it. */
static bool table_on_device(strategy s) { return s == STRAT_GRAPH_FUSED_INPUTS_DEVTABLE; }

void runner_step(void *arg, size_t tokens) {
  runner *r = arg;
  if (r->strat == STRAT_GRAPH_FUSED_INPUTS || r->strat == STRAT_GRAPH_FUSED_INPUTS_DEVTABLE) {
    CHECK(r->b, mdr_graph_cache_step_inputs(r->cache, r->values, 1 + N_STEP_INPUTS, tokens,
                                            input_sequences(r, tokens)));
  } else if (r->strat == STRAT_GRAPH_FUSED_DEV_INPUTS) {
    CHECK(r->b, mdr_graph_cache_step_inputs_device(r->cache, r->ids_dev, r->values, 1 + N_STEP_INPUTS, tokens,
                                                   input_sequences(r, tokens)));
  } else if (r->strat == STRAT_GRAPH_FUSED_DEV) {
    CHECK(r->b, mdr_graph_cache_step_device(r->cache, r->ids_dev, tokens));
  } else if (is_graph(r->strat)) {
    CHECK(r->b, mdr_graph_cache_step(r->cache, r->ids, tokens));
  } else {
    CHECK(r->b, mdr_arena_zero_all_rows(r->arena, r->stream, tokens));
    upload_ids_eager(r, tokens);
  }
}

/* graph-fused-inputs: declare the inputs, allocate their destinations and
 * fill the host values every step stages (positions 1000 + i, lengths
 * 2000 + s, block ids s * INPUT_BLOCKS_PER_SEQ + j). With the table on the
 * device (graph-fused-inputs-devtable) its values are written into its
 * destination here, once, and its host entry is NULL. */
static void inputs_begin(runner *r, mdr_graph_cache_options *o) {
  const size_t m = mdr_arena_max_batch_tokens(r->arena);
  r->max_seqs = m < INPUT_MAX_SEQS ? m : INPUT_MAX_SEQS;
  static const char *const names[N_STEP_INPUTS] = {"positions", "seq_lens", "block_table"};
  const size_t rows[N_STEP_INPUTS] = {m, r->max_seqs, r->max_seqs};
  const size_t width[N_STEP_INPUTS] = {1, 1, INPUT_BLOCKS_PER_SEQ};
  for (int i = 0; i < N_STEP_INPUTS; i++) {
    const size_t n = rows[i] * width[i];
    CHECK(r->b, mdr_backend_alloc(r->b, n * sizeof(uint32_t), &r->input_dst[i]));
    r->input_host[i] = xmalloc(n * sizeof(uint32_t));
    for (size_t k = 0; k < n; k++) r->input_host[i][k] = (uint32_t)(i == 0 ? 1000 + k : i == 1 ? 2000 + k : k);
    r->inputs[i] = (mdr_step_input){.name = names[i], .elem_bytes = sizeof(uint32_t),
                                    .shape = i == 0 ? MDR_INPUT_PER_TOKEN : MDR_INPUT_PER_SEQUENCE,
                                    .width = width[i], .dest = MDR_INPUT_TO_DEVICE, .address = r->input_dst[i]};
    r->values[1 + i] = r->input_host[i];
    if (i == INPUT_BLOCK_TABLE && table_on_device(r->strat)) {
      CHECK(r->b, mdr_backend_copy_h2d(r->b, r->input_dst[i], r->input_host[i], n * sizeof(uint32_t)));
      r->inputs[i].device_src = r->input_dst[i];
      r->values[1 + i] = NULL;
    }
  }
  r->values[0] = r->ids;
  o->inputs = r->inputs;
  o->n_inputs = N_STEP_INPUTS;
  o->max_sequences = r->max_seqs;
}

static void inputs_end(runner *r) {
  for (int i = 0; i < N_STEP_INPUTS; i++) {
    if (r->input_dst[i]) mdr_backend_free(r->b, r->input_dst[i]);
    free(r->input_host[i]);
    r->input_dst[i] = 0;
    r->input_host[i] = NULL;
  }
}

void validate_inputs(runner *r, size_t tokens, const char *label) {
  if (!has_inputs(r->strat)) return;
  const size_t seqs = input_sequences(r, tokens);
  const size_t n[N_STEP_INPUTS] = {tokens, seqs, seqs * INPUT_BLOCKS_PER_SEQ};
  uint32_t *got = xmalloc(n[2] > n[0] ? n[2] * sizeof *got : n[0] * sizeof *got);
  for (int i = 0; i < N_STEP_INPUTS; i++) {
    CHECK(r->b, mdr_backend_copy_d2h(r->b, got, r->input_dst[i], n[i] * sizeof *got));
    for (size_t k = 0; k < n[i]; k++)
      if (got[k] != r->input_host[i][k])
        die("validation failed (%s): %s[%zu] = %u, expected %u", label, r->inputs[i].name, k, got[k],
            r->input_host[i][k]);
  }
  free(got);
}

bool runner_begin(runner *r, strategy s, const size_t *prepare, size_t n_prepare, const char **why) {
  r->strat = s;
  r->cache = NULL;
  if (!is_graph(s)) {
    mdr_zero_strategy z = s == STRAT_EAGER_FUSED ? MDR_ZERO_FUSED : MDR_ZERO_MEMSET;
    mdr_status st = mdr_arena_set_zero_strategy(r->arena, z);
    if (st == MDR_ERR_UNSUPPORTED) return *why = mdr_status_string(st), false;
    CHECK(r->b, st);
    return true;
  }
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  int dynamic = s == STRAT_GRAPH_DYNAMIC || s == STRAT_GRAPH_DYNAMIC_COUNT;
  o.mode = dynamic ? MDR_GRAPH_DYNAMIC : MDR_GRAPH_EXACT;
  o.dynamic_impl = s == STRAT_GRAPH_DYNAMIC_COUNT ? MDR_DYNAMIC_DEVICE_COUNT : MDR_DYNAMIC_NODE_UPDATE;
  o.zero = s == STRAT_GRAPH_MEMSET ? MDR_ZERO_MEMSET : MDR_ZERO_FUSED;
  if (has_inputs(s)) inputs_begin(r, &o);
  mdr_status st = mdr_graph_cache_create(r->arena, r->stream, &o, &r->cache);
  if (st != MDR_OK) {
    if (dynamic || st == MDR_ERR_UNSUPPORTED) {
      *why = mdr_status_string(st);
      fprintf(stderr, "note: %s skipped: %s: %s\n", k_strategy_names[s], mdr_status_string(st),
              mdr_backend_last_error(r->b));
      inputs_end(r);
      return false;
    }
    CHECK(r->b, st);
  }
  /* device steps have graphs of their own: prepare those (at this address) */
  if (s == STRAT_GRAPH_FUSED_DEV || s == STRAT_GRAPH_FUSED_DEV_INPUTS)
    CHECK(r->b, mdr_graph_cache_prepare_device(r->cache, r->ids_dev, prepare, n_prepare));
  else
    CHECK(r->b, mdr_graph_cache_prepare(r->cache, prepare, n_prepare));
  return true;
}

void runner_activate(runner *r) {
  if (is_graph(r->strat)) return; /* a cache's zero strategy is its own, fixed at create */
  CHECK(r->b, mdr_arena_set_zero_strategy(r->arena, r->strat == STRAT_EAGER_FUSED ? MDR_ZERO_FUSED : MDR_ZERO_MEMSET));
}

void runner_end(runner *r) {
  mdr_graph_cache_destroy(r->cache); /* waits for the stream */
  r->cache = NULL;
  inputs_end(r);
  CHECK(r->b, mdr_arena_set_zero_strategy(r->arena, MDR_ZERO_MEMSET));
}

void runner_sync(runner *r) { CHECK(r->b, mdr_backend_synchronize(r->b, r->stream)); }

double input_copy_us(const runner *r, size_t tokens, size_t reps) {
  const size_t seqs = input_sequences(r, tokens);
  /* uint32 values; the table stays out when it is in device memory */
  size_t n[N_STEP_INPUTS] = {tokens, seqs, seqs * INPUT_BLOCKS_PER_SEQ};
  if (table_on_device(r->strat)) n[INPUT_BLOCK_TABLE] = 0;
  size_t bytes = 0;
  for (int i = 0; i < N_STEP_INPUTS; i++) bytes += (n[i] * sizeof(uint32_t) + 15u) / 16u * 16u;
  const size_t slots = MDR_GRAPH_STAGING_SLOTS;
  unsigned char *ring = NULL;
#ifdef MDR_HAVE_CUDA
  if (r->gpu) CUDA_CHECK(cudaHostAlloc((void **)&ring, slots * bytes, cudaHostAllocMapped | cudaHostAllocPortable));
#endif
  if (!ring) ring = xmalloc(slots * bytes);
  double *us = xmalloc((reps ? reps : 1) * sizeof *us);
  for (size_t k = 0; k < reps; k++) {
    /* a round of one copy per slot, timed as a whole: the clock's own cost
     * stays out of a figure of a fraction of a microsecond */
    const double t0 = now_us();
    for (size_t j = 0; j < slots; j++) {
      unsigned char *dst = ring + j * bytes;
      for (int i = 0; i < N_STEP_INPUTS; i++) {
        memcpy(dst, r->input_host[i], n[i] * sizeof(uint32_t));
        dst += (n[i] * sizeof(uint32_t) + 15u) / 16u * 16u;
      }
    }
    us[k] = (now_us() - t0) / (double)slots;
  }
  const double med = reps ? summarize(us, reps).med : NAN;
  free(us);
#ifdef MDR_HAVE_CUDA
  if (r->gpu) {
    cudaFreeHost(ring);
    ring = NULL;
  }
#endif
  free(ring);
  return med;
}

void cpu_time_samples(runner *r, size_t tokens, size_t reps, double *us) {
  for (size_t i = 0; i < reps; i++) {
    if (i % CPU_BATCH == 0) runner_sync(r);
    double t0 = now_us();
    runner_step(r, tokens);
    us[i] = now_us() - t0;
  }
  runner_sync(r);
}

summary cpu_time_steps(runner *r, size_t tokens, size_t reps) {
  double *us = xmalloc(reps * sizeof *us);
  cpu_time_samples(r, tokens, reps, us);
  summary s = summarize(us, reps);
  free(us);
  return s;
}

size_t partner_tokens(size_t tokens) { return tokens > 1 ? tokens - 1 : tokens + 1; }

/* Host µs to submit one step when the count changes on every step (it
 * alternates between tokens and partner_tokens(tokens)): what a DYNAMIC
 * graph pays to re-target its node. Both counts are warmed up first, so an
 * EXACT cache replays two cached graphs. */
summary cpu_time_steps_vary(runner *r, size_t tokens, size_t reps) {
  const size_t other = partner_tokens(tokens);
  for (int i = 0; i < WARMUP_STEPS; i++) runner_step(r, i % 2 ? other : tokens);
  double *us = xmalloc(reps * sizeof *us);
  for (size_t i = 0; i < reps; i++) {
    if (i % CPU_BATCH == 0) runner_sync(r);
    double t0 = now_us();
    runner_step(r, i % 2 ? other : tokens);
    us[i] = now_us() - t0;
  }
  runner_sync(r);
  summary s = summarize(us, reps);
  free(us);
  return s;
}
