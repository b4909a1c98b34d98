/* mdr_bench.c — mdr-bench: the cost of preparing one decode step (zero plan
 * + token-id upload) with the seed's per-buffer memsets, with the fused
 * kernel, and with the graph cache, against floors measured in the same run.
 * bench/README.md explains every option, column and file; bench.h lists the
 * files and what each holds. This one is the driver: an arena per preset,
 * every (policy, strategy, tokens) case validated then measured, the graph
 * costs, the output files.
 *
 * Method (cuda-samples / nvbench habits):
 *   - every (preset, policy, strategy) is validated before it is timed:
 *     buffers poisoned, one step, the plan's bytes read back as zero, the
 *     bytes just past each segment still poisoned, the token ids arrived;
 *   - GPU time: a blocker kernel holds the stream while the host enqueues
 *     one step between two events, then releases it, so the events see GPU
 *     execution only (not the host's submission); median, p10, p90, and
 *     the tail: p99 and max;
 *   - loop time: N steps back to back between two events, divided by N:
 *     the steady-state step cost of a loop doing nothing else (bounded by
 *     CPU submission or GPU time, whichever is slower);
 *   - cold: as GPU time with L2 flushed (a memset of FLUSH_BYTES) before each
 *     step, outside the events;
 *   - CPU time: clock_gettime around the submitting call, no sync inside;
 *     the stream is drained every CPU_BATCH steps so the staging ring never
 *     makes a step wait; median, p10, p90, p99, max;
 *   - CPU chg (graph strategies): the same with the count alternating
 *     between tokens and tokens - 1 (2 for 1) on every step;
 *   - floor(case) = bytes / write ceiling + one 1-kernel graph replay, the
 *     replay timed with the case, in alternating rounds (same method, same
 *     reps), so that the ratio is taken side by side.
 *
 * On the host backend (no GPU) only the CPU figures exist, the default sweep
 * is short, and the headline says that those figures rank nothing on a GPU.
 * The last lines of every run are the headline: the strategies against
 * eager memsets at a few token counts, what was measured, what wins. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h> /* isatty */

#include "bench.h"

/* Speedups vs eager-memset of the same (preset, policy, tokens): the n
 * cases hold one such block per token count. */
static void fill_speedups(bench_case *c, size_t n) {
  for (size_t i = 0; i < n; i++) {
    c[i].speedup = c[i].cpu_speedup = NAN;
    for (size_t j = 0; j < n; j++) {
      if (c[j].strat != STRAT_EAGER_MEMSET || c[j].tokens != c[i].tokens || !c[j].measured) continue;
      c[i].speedup = c[j].gpu.med / nan_if_zero(c[i].gpu.med);
      c[i].cpu_speedup = c[j].cpu.med / nan_if_zero(c[i].cpu.med);
    }
  }
}

/* The median of n samples, the samples left as they were. */
static double median_of(const double *v, size_t n) {
  double *tmp = xmalloc(n * sizeof *tmp);
  memcpy(tmp, v, n * sizeof *tmp);
  double m = percentile(tmp, n, 0.5);
  free(tmp);
  return m;
}

/* Every strategy of one (preset, policy) at one token count: cases[i] is
 * runner rs[i]'s (NULL when that strategy was skipped). The headline
 * figures (GPU µs per step beside the floor's replay, CPU µs per step) are
 * taken in ROUNDS interleaved rounds: each round times every strategy in
 * turn, starting one strategy later than the round before, so that a
 * drift or a burst of background load reaches every strategy alike, and
 * each round's median is kept (the spread between rounds is what a
 * "wins" line must exceed). The secondary figures (loop, cold, CPU with a
 * changing count) follow, one strategy after the other. */
static void measure_group(bench_env *e, runner *rs, bench_case **cases, size_t n) {
  const size_t reps = e->o->reps, cpu_reps = e->o->cpu_reps;
  const size_t per = (reps + ROUNDS - 1) / ROUNDS, cpu_per = (cpu_reps + ROUNDS - 1) / ROUNDS;
  double **gpu = xmalloc(n * sizeof *gpu), **replay = xmalloc(n * sizeof *replay), **cpu = xmalloc(n * sizeof *cpu);
  mdr_graph_stats *before = xmalloc(n * sizeof *before);
  for (size_t i = 0; i < n; i++) {
    gpu[i] = replay[i] = cpu[i] = NULL;
    bench_case *c = cases[i];
    if (!c) continue;
    c->gpu = c->cold = c->cpu_vary = k_no_summary;
    c->loop_us = c->floor_replay_us = c->copy_us = NAN;
    for (int k = 0; k < ROUNDS; k++) c->round_gpu[k] = c->round_cpu[k] = NAN;
    gpu[i] = xmalloc(reps * sizeof **gpu);
    replay[i] = xmalloc(reps * sizeof **replay);
    cpu[i] = xmalloc(cpu_reps * sizeof **cpu);
    memset(&before[i], 0, sizeof before[i]);
    if (rs[i].cache) CHECK(e->b, mdr_graph_cache_stats(rs[i].cache, &before[i]));
    runner_activate(&rs[i]);
    for (int w = 0; w < WARMUP_STEPS; w++) runner_step(&rs[i], c->tokens);
    runner_sync(&rs[i]);
  }
  for (size_t k = 0; k < ROUNDS; k++) {
    const size_t g0 = k * per, c0 = k * cpu_per;
    const size_t gn = g0 >= reps ? 0 : reps - g0 < per ? reps - g0 : per;
    const size_t cn = c0 >= cpu_reps ? 0 : cpu_reps - c0 < cpu_per ? cpu_reps - c0 : cpu_per;
    for (size_t j = 0; j < n; j++) {
      const size_t i = (j + k) % n;
      bench_case *c = cases[i];
      if (!c) continue;
      runner *r = &rs[i];
      runner_activate(r);
#ifdef MDR_HAVE_CUDA
      if (e->gpu.on && gn) {
        gpu_time_replay_samples(&e->gpu, &e->fl, gn, replay[i] + g0);
        gpu_time_samples(&e->gpu, runner_step, r, c->tokens, gn, false, gpu[i] + g0);
        c->round_gpu[k] = median_of(gpu[i] + g0, gn);
      }
#else
      (void)gn; /* no GPU figures in a build without CUDA */
#endif
      if (cn) {
        cpu_time_samples(r, c->tokens, cn, cpu[i] + c0);
        c->round_cpu[k] = median_of(cpu[i] + c0, cn);
      }
    }
  }
  for (size_t i = 0; i < n; i++) {
    bench_case *c = cases[i];
    if (!c) continue;
    runner *r = &rs[i];
    runner_activate(r);
    if (e->gpu.on) {
      c->gpu = summarize(gpu[i], reps);
      c->floor_replay_us = summarize(replay[i], reps).med;
    }
    c->cpu = summarize(cpu[i], cpu_reps);
    if (has_inputs(r->strat)) c->copy_us = input_copy_us(r, c->tokens, cpu_reps);
#ifdef MDR_HAVE_CUDA
    if (e->gpu.on) {
      c->loop_us = gpu_time_loop(&e->gpu, runner_step, r, c->tokens, reps);
      c->cold = gpu_time_steps(&e->gpu, runner_step, r, c->tokens, reps, true);
    }
#endif
    if (r->cache && partner_tokens(c->tokens) <= e->o->m)
      c->cpu_vary = cpu_time_steps_vary(r, c->tokens, e->o->cpu_vary_reps);
    if (r->cache) {
      mdr_graph_stats after;
      CHECK(e->b, mdr_graph_cache_stats(r->cache, &after));
      c->eager_steps = after.eager_steps - before[i].eager_steps;
      c->inline_steps = after.inline_steps - before[i].inline_steps;
    }
    c->gbps = (double)c->bytes / (nan_if_zero(c->gpu.med) * 1e3);
    c->floor_us = e->gpu.on ? floor_us(&e->fl, c->bytes, c->floor_replay_us) : NAN;
    c->x_floor = c->gpu.med / c->floor_us;
    c->measured = true;
    free(gpu[i]);
    free(replay[i]);
    free(cpu[i]);
  }
  free(gpu);
  free(replay);
  free(cpu);
  free(before);
}

/* The token count each strategy is validated at: the middle of the sweep. */
static size_t validation_tokens(const options *o) { return o->tokens[o->n_tokens / 2]; }

static mdr_arena *make_arena(bench_env *e, const char *preset) {
  mdr_model_config cfg;
  mdr_limits lim = {.max_batch_tokens = e->o->m, .max_seq_len = e->o->seq,
                    .kv_block_size = e->o->block, .max_batch_size = e->o->batch};
  mdr_sizes sizes;
  mdr_arena *a = NULL;
  CHECK(e->b, mdr_model_preset(preset, &cfg));
  CHECK(e->b, mdr_sizes_from_config(&cfg, &lim, &sizes));
  CHECK(e->b, mdr_arena_create(e->b, &sizes, &a));
  return a;
}

/* Every (policy, strategy, tokens) case of one preset: for each policy the
 * strategies are set up side by side (one runner each, every graph cache
 * prepared), validated, then timed together at each token count
 * (measure_group). */
static void run_preset(bench_env *e, const char *preset, sweep *sw) {
  options *o = e->o;
  mdr_arena *a = make_arena(e, preset);
  printf("\n%s: arena %.1f MB, M = %zu\n", preset, (double)mdr_arena_slab_bytes(a) / 1e6, o->m);
  write_plans(e, preset, a);
  const runner proto = {.b = e->b, .arena = a, .stream = e->stream, .ids = e->ids, .ids_upload = e->ids_upload,
                        .ids_dev = e->ids_dev, .gpu = e->gpu.on};
  runner rs[STRAT_COUNT];
  bool ok[STRAT_COUNT];
  const char *why[STRAT_COUNT];
  for (int p = 0; p < MDR_ROWS_POLICY_COUNT; p++) {
    if (!o->policy_on[p]) continue;
    CHECK(e->b, mdr_arena_set_rows_policy(a, (mdr_rows_policy)p));
    bench_case *block = sw->cases + sw->n;
    for (int s = 0; s < STRAT_COUNT; s++) {
      rs[s] = proto;
      why[s] = NULL;
      ok[s] = o->strategy_on[s] && runner_begin(&rs[s], (strategy)s, o->tokens, o->n_tokens, &why[s]);
      if (!ok[s]) continue;
      char label[128];
      snprintf(label, sizeof label, "%s %s %s at %zu tokens", preset, k_policy_names[p], k_strategy_names[s],
               validation_tokens(o));
      runner_activate(&rs[s]);
      validate(&rs[s], validation_tokens(o), label);
      validate_inputs(&rs[s], validation_tokens(o), label);
    }
    for (size_t t = 0; t < o->n_tokens; t++) {
      bench_case *cases[STRAT_COUNT];
      for (int s = 0; s < STRAT_COUNT; s++) {
        cases[s] = NULL;
        if (!o->strategy_on[s]) continue;
        bench_case *c = &sw->cases[sw->n++];
        *c = (bench_case){.preset = preset, .policy = (mdr_rows_policy)p, .tokens = o->tokens[t],
                          .strat = (strategy)s, .note = why[s]};
        c->bytes = plan_bytes(e->b, a, c->tokens, &c->segments);
        if (ok[s]) cases[s] = c;
      }
      /* progress: one line per group in a log, one line rewritten in place on a terminal */
      fprintf(stderr, "%s[%zu/%zu] %s %s %zu tokens, every strategy%s", e->progress_in_place ? "\r\033[K" : "",
              sw->n, sw->total, preset, k_policy_names[p], o->tokens[t], e->progress_in_place ? "" : "\n");
      fflush(stderr);
      measure_group(e, rs, cases, STRAT_COUNT);
    }
    for (int s = 0; s < STRAT_COUNT; s++)
      if (ok[s]) runner_end(&rs[s]);
    size_t n_block = (size_t)(sw->cases + sw->n - block);
    fill_speedups(block, n_block);
    if (e->progress_in_place) fprintf(stderr, "\r\033[K");
    print_table_header(e->gpu.on);
    for (size_t t = 0; t < o->n_tokens; t++)
      for (size_t i = 0; i < n_block; i++)
        if (block[i].tokens == o->tokens[t]) print_case(&block[i]);
    print_tail_table(block, n_block, o->tokens, o->n_tokens, e->gpu.on);
  }
  fflush(stdout);
  CHECK(e->b, mdr_backend_synchronize(e->b, e->stream));
  mdr_arena_destroy(a);
}

/* ---- graph costs ---- */

static mdr_graph_cache *fused_exact_cache(bench_env *e, mdr_arena *a) {
  mdr_graph_cache_options o;
  mdr_graph_cache *c = NULL;
  mdr_graph_cache_options_default(&o);
  o.zero = MDR_ZERO_FUSED;
  CHECK(e->b, mdr_graph_cache_create(a, e->stream, &o, &c));
  return c;
}

static void measure_graph_costs(bench_env *e, const char *preset, graph_costs *g) {
  mdr_arena *a = make_arena(e, preset);
  size_t m = e->o->m;
  g->preset = preset;
  g->policy = e->o->policy_on[MDR_ROWS_SEED] ? MDR_ROWS_SEED : MDR_ROWS_ALL;
  CHECK(e->b, mdr_arena_set_rows_policy(a, g->policy));
  g->capture_us = xmalloc(e->o->n_tokens * sizeof *g->capture_us);
  mdr_graph_cache *c = fused_exact_cache(e, a);
  for (size_t t = 0; t < e->o->n_tokens; t++) {
    mdr_graph_stats s0, s1;
    CHECK(e->b, mdr_graph_cache_stats(c, &s0));
    CHECK(e->b, mdr_graph_cache_prepare(c, &e->o->tokens[t], 1));
    CHECK(e->b, mdr_graph_cache_stats(c, &s1));
    g->capture_us[t] = s1.capture_us - s0.capture_us;
  }
  mdr_graph_cache_destroy(c);

  size_t *every = xmalloc(m * sizeof *every);
  for (size_t i = 0; i < m; i++) every[i] = i + 1;
  c = fused_exact_cache(e, a);
  double t0 = now_us();
  CHECK(e->b, mdr_graph_cache_prepare(c, every, m));
  CHECK(e->b, mdr_backend_synchronize(e->b, e->stream));
  g->prepare_all_s = (now_us() - t0) / 1e6;
  mdr_graph_stats s;
  CHECK(e->b, mdr_graph_cache_stats(c, &s));
  g->graphs_after = s.graphs;
  g->capture_all_us = s.capture_us;
  g->graph_bytes = s.graph_bytes;
  g->graph_nodes = s.graph_nodes;
  g->memory_measured = s.memory_measured;
  mdr_graph_cache_destroy(c);

  /* LADDER: every rung (preparing every count captures each rung once);
   * DYNAMIC: its one graph */
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.zero = MDR_ZERO_FUSED;
  o.mode = MDR_GRAPH_LADDER;
  CHECK(e->b, mdr_graph_cache_create(a, e->stream, &o, &c));
  CHECK(e->b, mdr_graph_cache_prepare(c, every, m));
  CHECK(e->b, mdr_graph_cache_stats(c, &s));
  g->ladder_graphs = s.graphs;
  g->ladder_bytes = s.graph_bytes;
  g->ladder_nodes = s.graph_nodes;
  mdr_graph_cache_destroy(c);
  o.mode = MDR_GRAPH_DYNAMIC;
  CHECK(e->b, mdr_graph_cache_create(a, e->stream, &o, &c));
  CHECK(e->b, mdr_graph_cache_prepare(c, every, 1));
  CHECK(e->b, mdr_graph_cache_stats(c, &s));
  g->dynamic_bytes = s.graph_bytes;
  g->dynamic_nodes = s.graph_nodes;
  mdr_graph_cache_destroy(c);
  free(every);
  mdr_arena_destroy(a);
}

/* ---- main ---- */

static void alloc_ids(bench_env *e) {
  size_t m = e->o->m;
  e->ids = xmalloc(m * sizeof *e->ids);
  for (size_t i = 0; i < m; i++) e->ids[i] = FIRST_TOKEN_ID + (uint32_t)i;
  e->ids_upload = e->ids;
#ifdef MDR_HAVE_CUDA
  if (e->gpu.on) {
    void *pinned = NULL;
    CUDA_CHECK(cudaHostAlloc(&pinned, m * sizeof *e->ids, cudaHostAllocDefault));
    memcpy(pinned, e->ids, m * sizeof *e->ids); /* written once: the eager steps never rewrite it */
    e->ids_upload = pinned;
  }
#endif
  /* graph-fused-dev's ids: in device memory, written once (an engine's
   * sampling kernel would have left them there) */
  CHECK(e->b, mdr_backend_alloc(e->b, m * sizeof *e->ids, &e->ids_dev));
  CHECK(e->b, mdr_backend_copy_h2d(e->b, e->ids_dev, e->ids, m * sizeof *e->ids));
}

static void free_ids(bench_env *e) {
  mdr_backend_free(e->b, e->ids_dev);
#ifdef MDR_HAVE_CUDA
  if (e->gpu.on) cudaFreeHost(e->ids_upload);
#endif
  free(e->ids);
}

static void create_backend(const options *o, mdr_backend **b) {
  mdr_status st;
  switch (o->backend) {
    case BACKEND_HOST: CHECK(NULL, mdr_backend_host_create(b)); break;
    case BACKEND_CUDA:
      st = mdr_backend_cuda_create(0, b);
      if (st == MDR_ERR_NO_DEVICE || st == MDR_ERR_UNSUPPORTED)
        die("--backend cuda: %s (no usable CUDA device, or built without CUDA)", mdr_status_string(st));
      CHECK(NULL, st);
      break;
    case BACKEND_AUTO: CHECK(NULL, mdr_backend_create_default(b)); break;
  }
}

static void print_tokens(const options *o) {
  for (size_t t = 0; t < o->n_tokens; t++) printf("%s%zu", t ? "," : "", o->tokens[t]);
}

int main(int argc, char **argv) {
  options o;
  run_info run;
  memset(&run, 0, sizeof run);
  bench_env e = {.o = &o, .run = &run, .first_plan_preset = true};
  const time_t started = time(NULL);
  struct tm utc;
  char stamp[32];
  gmtime_r(&started, &utc);
  strftime(run.timestamp, sizeof run.timestamp, "%Y-%m-%dT%H:%M:%SZ", &utc);
  strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%SZ", &utc); /* the fresh output folder's name */

  parse_options(argc, argv, &o);
  pin_to_cpu(o.pin_cpu); /* before the backend's threads (host) or driver threads (CUDA) exist */
  e.progress_in_place = isatty(STDERR_FILENO) && isatty(STDOUT_FILENO);
  create_backend(&o, &e.b);
  e.gpu.on = strcmp(mdr_backend_name(e.b), "cuda") == 0;
  resolve_defaults(&o, e.gpu.on);
  if (e.gpu.on) {
    printf("backend: cuda (GPU timing with events; CPU figures from clock_gettime)\n");
  } else {
    printf("backend: host — no GPU: host backend, CPU-side figures only (GPU columns \"-\")\n");
    printf("note: host backend defaults to M = %d (not %d) to keep RAM and time low; M = %zu\n", DEFAULT_M_HOST,
           DEFAULT_M_GPU, o.m);
  }
  clip_token_counts(&o);
  printf("sweep: %s", k_sweep_names[o.sweep]);
  if (o.sweep == SWEEP_HOST_SHORT)
    printf(" (the default without a GPU; --full for every preset and token count)");
  printf("; %zu presets, policies", count_on(o.preset_on, mdr_model_preset_count()));
  for (int p = 0; p < MDR_ROWS_POLICY_COUNT; p++)
    if (o.policy_on[p]) printf(" %s", k_policy_names[p]);
  printf(", tokens ");
  print_tokens(&o);
  printf("\n");
  if (!e.gpu.on)
    printf("note: host figures are CPU work of the host emulation; they do not predict the GPU ranking\n");
  printf("limits: M %zu, seq %zu, block %zu, batch %zu; reps %zu (CPU figures: %zu)\n", o.m, o.seq, o.block,
         o.batch, o.reps, o.cpu_reps);
  if (o.pin_cpu >= 0) {
    char cpus[256];
    affinity_list(cpus, sizeof cpus); /* read back: what the kernel holds the process to */
    printf("pinned: CPU %ld (--pin); runs on CPUs %s\n", o.pin_cpu, cpus);
  }
  prepare_out_dir(&o, &run, stamp);
  printf("output: %s/\n", o.out_dir);
  CHECK(e.b, mdr_backend_stream_create(e.b, &e.stream));

#ifdef MDR_HAVE_CUDA
  if (e.gpu.on) {
    gpu_init(&e.gpu, e.stream, o.reps > CEILING_REPS ? o.reps : CEILING_REPS);
    measure_floors(&e.gpu, o.reps, &e.fl);
    print_floors(&e.fl);
  }
#endif
  describe_device(&e, &run);
  alloc_ids(&e);
  print_legend(e.gpu.on);

  size_t n_presets = count_on(o.preset_on, mdr_model_preset_count());
  sweep sw = {.total = n_presets * count_on(o.policy_on, MDR_ROWS_POLICY_COUNT) *
                       count_on(o.strategy_on, STRAT_COUNT) * o.n_tokens};
  sw.cases = xmalloc(sw.total * sizeof *sw.cases);
  e.plans = open_out(o.out_dir, "plans.json");
  fprintf(e.plans, "{\n  \"M\": %zu, \"tokens\": [", o.m);
  for (size_t t = 0; t < o.n_tokens; t++) fprintf(e.plans, "%s%zu", t ? ", " : "", o.tokens[t]);
  fprintf(e.plans, "],\n  \"presets\": [");
  for (size_t i = 0; i < mdr_model_preset_count(); i++)
    if (o.preset_on[i]) run_preset(&e, mdr_model_preset_name(i), &sw);
  fprintf(e.plans, "\n  ]\n}\n");
  fclose(e.plans);

  bool costs = o.graph_costs < 0 ? e.gpu.on : o.graph_costs == 1;
  graph_costs *gc = xmalloc(n_presets * sizeof *gc);
  size_t n_gc = 0;
  for (size_t i = 0; costs && i < mdr_model_preset_count(); i++) {
    if (!o.preset_on[i]) continue;
    measure_graph_costs(&e, mdr_model_preset_name(i), &gc[n_gc]);
    print_graph_costs(&e, &gc[n_gc], &sw);
    n_gc++;
  }

  write_results_json(&e, &sw, gc, n_gc);
  write_results_csv(&e, &sw);
  printf("\nwrote %s/results.json, %s/results.csv, %s/plans.json\n", o.out_dir, o.out_dir, o.out_dir);
  print_headline(&e, &sw); /* the last lines */

  for (size_t i = 0; i < n_gc; i++) free(gc[i].capture_us);
  free(gc);
  free(sw.cases);
  free_ids(&e);
#ifdef MDR_HAVE_CUDA
  if (e.gpu.on) {
    floors_fini(&e.fl);
    gpu_fini(&e.gpu);
  }
#endif
  mdr_backend_stream_destroy(e.b, e.stream);
  mdr_backend_destroy(e.b);
  return 0;
}
