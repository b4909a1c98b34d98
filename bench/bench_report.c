/* bench_report.c — what mdr-bench prints and writes: the floors, the table
 * of each (preset, policy) block, the graph-cost section, plans.json (what
 * the PyTorch peer zeroes), results.json and results.csv. bench/README.md
 * documents every column and field. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <string.h>
#include <sys/utsname.h>

#include "bench.h"

/* ---- stdout ---- */

void print_floors(const floors *f) {
  printf("floors (measured in this run)\n");
  printf("  write ceiling   cudaMemsetAsync 1 GiB: %.1f GB/s", f->ceiling_1g_gbps);
  if (isfinite(f->ceiling_4g_gbps)) printf(", 4 GiB: %.1f GB/s", f->ceiling_4g_gbps);
  printf("  -> ceiling %.1f GB/s\n", f->ceiling_gbps);
  printf("  1-kernel graph replay: %.2f us [%.2f-%.2f], back to back %.2f us\n", f->graph_replay.med,
         f->graph_replay.p10, f->graph_replay.p90, f->graph_replay_loop);
  printf("  empty eager launch:    %.2f us [%.2f-%.2f], back to back %.2f us\n", f->eager_launch.med,
         f->eager_launch.p10, f->eager_launch.p90, f->eager_launch_loop);
  printf("  floor(case) = bytes / ceiling + %.2f us\n\n", f->graph_replay.med);
}

void print_table_header(void) {
  printf("%-18s %-6s %6s %-19s %9s %22s %8s %8s %8s %8s %8s %7s %7s %7s\n", "preset", "policy", "tokens",
         "strategy", "MB", "GPU us med [p10-p90]", "loop us", "cold us", "CPU us", "CPU chg", "GB/s",
         "xfloor", "speedup", "CPU spd");
}

void print_case(const bench_case *c) {
  char gpu[48], loop[16], cold[16], cpu[16], chg[16], gbps[16], xf[16], sp[16], csp[16];
  if (isfinite(c->gpu.med)) snprintf(gpu, sizeof gpu, "%.2f [%.2f-%.2f]", c->gpu.med, c->gpu.p10, c->gpu.p90);
  else snprintf(gpu, sizeof gpu, "-");
  fmt_num(loop, sizeof loop, "%.2f", c->loop_us);
  fmt_num(cold, sizeof cold, "%.2f", c->cold.med);
  fmt_num(cpu, sizeof cpu, "%.2f", c->cpu.med);
  fmt_num(chg, sizeof chg, "%.2f", c->cpu_vary.med);
  fmt_num(gbps, sizeof gbps, "%.1f", c->gbps);
  fmt_num(xf, sizeof xf, "%.2f", c->x_floor);
  fmt_num(sp, sizeof sp, "%.2f", c->speedup);
  fmt_num(csp, sizeof csp, "%.2f", c->cpu_speedup);
  if (!c->measured) {
    printf("%-18s %-6s %6zu %-19s %9.3f  skipped: %s\n", c->preset, k_policy_names[c->policy], c->tokens,
           k_strategy_names[c->strat], (double)c->bytes / 1e6, c->note ? c->note : "");
    return;
  }
  printf("%-18s %-6s %6zu %-19s %9.3f %22s %8s %8s %8s %8s %8s %7s %7s %7s\n", c->preset,
         k_policy_names[c->policy], c->tokens, k_strategy_names[c->strat], (double)c->bytes / 1e6, gpu,
         loop, cold, cpu, chg, gbps, xf, sp, csp);
}

/* CPU µs of a strategy at (preset, policy, tokens) from the sweep; NAN if absent. */
static double cpu_of(const sweep *sw, const char *preset, mdr_rows_policy p, size_t tokens, strategy s) {
  for (size_t i = 0; i < sw->n; i++) {
    const bench_case *c = &sw->cases[i];
    if (c->measured && c->strat == s && c->tokens == tokens && c->policy == p &&
        strcmp(c->preset, preset) == 0)
      return c->cpu.med;
  }
  return NAN;
}

void print_graph_costs(const bench_env *e, const graph_costs *g, const sweep *sw) {
  const options *o = e->o;
  printf("\ngraph costs: %s, fused EXACT cache, policy %s (CPU us per step from the sweep)\n", g->preset,
         k_policy_names[g->policy]);
  printf("  %6s %15s %12s %12s %12s\n", "tokens", "capture+inst us", "CPU eager-m", "CPU graph-f",
         "CPU graph-m");
  for (size_t t = 0; t < o->n_tokens; t++) {
    char em[16], gf[16], gm[16];
    fmt_num(em, sizeof em, "%.2f", cpu_of(sw, g->preset, g->policy, o->tokens[t], STRAT_EAGER_MEMSET));
    fmt_num(gf, sizeof gf, "%.2f", cpu_of(sw, g->preset, g->policy, o->tokens[t], STRAT_GRAPH_FUSED));
    fmt_num(gm, sizeof gm, "%.2f", cpu_of(sw, g->preset, g->policy, o->tokens[t], STRAT_GRAPH_MEMSET));
    printf("  %6zu %15.1f %12s %12s %12s\n", o->tokens[t], g->capture_us[t], em, gf, gm);
  }
  printf("  prepare of every count 1..%zu: %.3f s (goal <= %.1f s)%s, graphs after: %zu, capture_us total %.0f\n",
         o->m, g->prepare_all_s, PREPARE_ALL_GOAL_S, g->prepare_all_s <= PREPARE_ALL_GOAL_S ? "" : "  ** over goal **",
         g->graphs_after, g->capture_all_us);
}

/* ---- plans.json: what the PyTorch peer zeroes ---- */

void write_plans(bench_env *e, const char *preset, mdr_arena *a) {
  FILE *f = e->plans;
  fprintf(f, "%s\n    {\"preset\": ", e->first_plan_preset ? "" : ",");
  e->first_plan_preset = false;
  json_str(f, preset);
  fprintf(f, ", \"M\": %zu, \"token_ids\": \"token_ids\", \"token_ids_bytes\": %zu,\n     \"buffers\": {",
          mdr_arena_max_batch_tokens(a), mdr_arena_token_ids_bytes(a));
  bool first = true;
  for (int i = 0; i < MDR_BUF_COUNT; i++) {
    size_t n = mdr_arena_bytes(a, (mdr_buffer)i);
    if (!n) continue;
    fprintf(f, "%s", first ? "" : ", ");
    first = false;
    json_str(f, mdr_buffer_name((mdr_buffer)i));
    fprintf(f, ": %zu", n);
  }
  fprintf(f, "},\n     \"plans\": [");
  first = true;
  mdr_rows_policy saved = mdr_arena_rows_policy(a);
  for (int p = 0; p < MDR_ROWS_POLICY_COUNT; p++) {
    if (!e->o->policy_on[p]) continue;
    CHECK(e->b, mdr_arena_set_rows_policy(a, (mdr_rows_policy)p));
    for (size_t t = 0; t < e->o->n_tokens; t++) {
      mdr_segment plan[MDR_ZERO_PLAN_MAX];
      size_t n = 0, bytes = plan_bytes(e->b, a, e->o->tokens[t], NULL);
      CHECK(e->b, mdr_arena_zero_plan(a, e->o->tokens[t], plan, MDR_ZERO_PLAN_MAX, &n));
      fprintf(f, "%s\n      {\"policy\": \"%s\", \"tokens\": %zu, \"bytes\": %zu, \"segments\": [", first ? "" : ",",
              k_policy_names[p], e->o->tokens[t], bytes);
      first = false;
      for (size_t i = 0; i < n; i++) {
        mdr_buffer buf = buffer_at(a, plan[i].ptr);
        if (buf == MDR_BUF_COUNT) die("library: plan segment %zu does not start at a buffer", i);
        fprintf(f, "%s{\"buffer\": ", i ? ", " : "");
        json_str(f, mdr_buffer_name(buf));
        fprintf(f, ", \"offset\": 0, \"bytes\": %zu}", plan[i].bytes);
      }
      fprintf(f, "]}");
    }
  }
  fprintf(f, "]}");
  CHECK(e->b, mdr_arena_set_rows_policy(a, saved));
}

/* ---- results.json / results.csv ---- */

static void write_machine(FILE *f, const bench_env *e) {
  struct utsname u;
  bool have_uname = uname(&u) == 0;
  fprintf(f, "  \"machine\": {\"backend\": ");
  json_str(f, mdr_backend_name(e->b));
  fprintf(f, ", \"mdr_version\": %u, \"host\": ", mdr_version_number());
  json_str(f, have_uname ? u.nodename : "");
  fprintf(f, ", \"os\": ");
  json_str(f, have_uname ? u.sysname : "");
  fprintf(f, ", \"arch\": ");
  json_str(f, have_uname ? u.machine : "");
#ifdef MDR_HAVE_CUDA
  if (e->gpu.on) {
    struct cudaDeviceProp prop;
    int dev = 0, sms = 0, l2 = 0, driver = 0, runtime = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    CUDA_CHECK(cudaDriverGetVersion(&driver));
    CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
    fprintf(f, ", \"gpu\": ");
    json_str(f, prop.name);
    fprintf(f, ", \"cc\": \"%d.%d\", \"sm_count\": %d, \"l2_bytes\": %d, \"memory_bytes\": %zu, "
               "\"driver_version\": %d, \"runtime_version\": %d",
            prop.major, prop.minor, sms, l2, prop.totalGlobalMem, driver, runtime);
  }
#endif
  fprintf(f, "},\n");
}

static void write_case_json(FILE *f, const bench_case *c) {
  fprintf(f, "    {\"preset\": ");
  json_str(f, c->preset);
  fprintf(f, ", \"policy\": \"%s\", \"tokens\": %zu, \"strategy\": \"%s\", \"measured\": %s",
          k_policy_names[c->policy], c->tokens, k_strategy_names[c->strat], c->measured ? "true" : "false");
  if (c->note) fprintf(f, ", \"note\": "), json_str(f, c->note);
  fprintf(f, ", \"bytes\": %zu, \"segments\": %zu", c->bytes, c->segments);
  const struct { const char *key; double v; } nums[] = {
      {"gpu_us_med", c->gpu.med},   {"gpu_us_p10", c->gpu.p10},   {"gpu_us_p90", c->gpu.p90},
      {"loop_us_mean", c->loop_us}, {"cold_us_med", c->cold.med}, {"cold_us_p10", c->cold.p10},
      {"cold_us_p90", c->cold.p90}, {"cpu_us_med", c->cpu.med},   {"cpu_us_p10", c->cpu.p10},
      {"cpu_us_p90", c->cpu.p90},   {"gbps", c->gbps},            {"floor_us", c->floor_us},
      {"x_floor", c->x_floor},      {"speedup", c->speedup},      {"cpu_speedup", c->cpu_speedup},
      {"cpu_vary_us_med", c->cpu_vary.med}, {"cpu_vary_us_p90", c->cpu_vary.p90},
  };
  for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
    fprintf(f, ", \"%s\": ", nums[i].key);
    json_num(f, nums[i].v);
  }
  fprintf(f, ", \"eager_steps\": %llu}", (unsigned long long)c->eager_steps);
}

void write_results_json(const bench_env *e, const sweep *sw, const graph_costs *gc, size_t n_gc) {
  const options *o = e->o;
  FILE *f = open_out(o->out_dir, "results.json");
  fprintf(f, "{\n  \"command\": [");
  for (int i = 0; i < o->argc; i++) fprintf(f, "%s", i ? ", " : ""), json_str(f, o->argv[i]);
  fprintf(f, "],\n");
  write_machine(f, e);
  fprintf(f, "  \"limits\": {\"M\": %zu, \"seq\": %zu, \"block\": %zu, \"batch\": %zu}, \"reps\": %zu,\n", o->m,
          o->seq, o->block, o->batch, o->reps);
  fprintf(f, "  \"floors\": ");
  if (e->gpu.on) {
    const floors *fl = &e->fl;
    fprintf(f, "{\"ceiling_1g_gbps\": ");
    json_num(f, fl->ceiling_1g_gbps);
    fprintf(f, ", \"ceiling_4g_gbps\": ");
    json_num(f, fl->ceiling_4g_gbps);
    fprintf(f, ", \"ceiling_gbps\": ");
    json_num(f, fl->ceiling_gbps);
    fprintf(f, ", \"graph_replay_us\": {\"med\": %.4g, \"p10\": %.4g, \"p90\": %.4g, \"loop\": %.4g}",
            fl->graph_replay.med, fl->graph_replay.p10, fl->graph_replay.p90, fl->graph_replay_loop);
    fprintf(f, ", \"eager_launch_us\": {\"med\": %.4g, \"p10\": %.4g, \"p90\": %.4g, \"loop\": %.4g}},\n",
            fl->eager_launch.med, fl->eager_launch.p10, fl->eager_launch.p90, fl->eager_launch_loop);
  } else {
    fprintf(f, "null,\n");
  }
  fprintf(f, "  \"graph_costs\": [");
  for (size_t i = 0; i < n_gc; i++) {
    fprintf(f, "%s\n    {\"preset\": ", i ? "," : "");
    json_str(f, gc[i].preset);
    fprintf(f, ", \"policy\": \"%s\", \"capture_us\": {", k_policy_names[gc[i].policy]);
    for (size_t t = 0; t < o->n_tokens; t++) fprintf(f, "%s\"%zu\": %.1f", t ? ", " : "", o->tokens[t], gc[i].capture_us[t]);
    fprintf(f, "}, \"prepare_all_s\": %.4f, \"graphs_after\": %zu, \"capture_all_us\": %.0f}", gc[i].prepare_all_s,
            gc[i].graphs_after, gc[i].capture_all_us);
  }
  fprintf(f, "],\n  \"cases\": [\n");
  for (size_t i = 0; i < sw->n; i++) {
    write_case_json(f, &sw->cases[i]);
    fprintf(f, "%s\n", i + 1 < sw->n ? "," : "");
  }
  fprintf(f, "  ]\n}\n");
  fclose(f);
}

void write_results_csv(const bench_env *e, const sweep *sw) {
  FILE *f = open_out(e->o->out_dir, "results.csv");
  fprintf(f, "preset,policy,tokens,strategy,measured,bytes,segments,gpu_us_med,gpu_us_p10,gpu_us_p90,"
             "loop_us_mean,cold_us_med,cpu_us_med,gbps,floor_us,x_floor,speedup,cpu_speedup,cpu_vary_us_med,"
             "eager_steps\n");
  for (size_t i = 0; i < sw->n; i++) {
    const bench_case *c = &sw->cases[i];
    fprintf(f, "%s,%s,%zu,%s,%d,%zu,%zu", c->preset, k_policy_names[c->policy], c->tokens,
            k_strategy_names[c->strat], c->measured, c->bytes, c->segments);
    const double nums[] = {c->gpu.med, c->gpu.p10, c->gpu.p90, c->loop_us, c->cold.med, c->cpu.med,
                           c->gbps, c->floor_us, c->x_floor, c->speedup, c->cpu_speedup, c->cpu_vary.med};
    for (size_t k = 0; k < sizeof nums / sizeof nums[0]; k++) fputc(',', f), csv_num(f, nums[k]);
    fprintf(f, ",%llu\n", (unsigned long long)c->eager_steps);
  }
  fclose(f);
}
