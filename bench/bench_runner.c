/* bench_runner.c — one strategy's decode-step preparation (zero plan +
 * token-id upload) as mdr-bench times it, its setup and teardown, and the
 * CPU timing of its submitting call. graph-fused-dev is graph-fused with the
 * ids already in device memory (r->ids_dev, written once before any timing,
 * as an engine's sampling kernel would leave them): its step copies them on
 * the device, reading nothing from host memory. */
#define _POSIX_C_SOURCE 200809L
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

void runner_step(void *arg, size_t tokens) {
  runner *r = arg;
  if (r->strat == STRAT_GRAPH_FUSED_DEV) {
    CHECK(r->b, mdr_graph_cache_step_device(r->cache, r->ids_dev, tokens));
  } else if (is_graph(r->strat)) {
    CHECK(r->b, mdr_graph_cache_step(r->cache, r->ids, tokens));
  } else {
    CHECK(r->b, mdr_arena_zero_all_rows(r->arena, r->stream, tokens));
    upload_ids_eager(r, tokens);
  }
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
  mdr_status st = mdr_graph_cache_create(r->arena, r->stream, &o, &r->cache);
  if (st != MDR_OK) {
    if (dynamic || st == MDR_ERR_UNSUPPORTED) {
      *why = mdr_status_string(st);
      fprintf(stderr, "note: %s skipped: %s: %s\n", k_strategy_names[s], mdr_status_string(st),
              mdr_backend_last_error(r->b));
      return false;
    }
    CHECK(r->b, st);
  }
  /* device steps have graphs of their own: prepare those (at this address) */
  if (s == STRAT_GRAPH_FUSED_DEV)
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
  CHECK(r->b, mdr_arena_set_zero_strategy(r->arena, MDR_ZERO_MEMSET));
}

void runner_sync(runner *r) { CHECK(r->b, mdr_backend_synchronize(r->b, r->stream)); }

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
