/* bench_report.c — what mdr-bench prints and writes: the legend, the floors,
 * the table and tail table of each (preset, policy) block, the graph-cost
 * section, the output folder, plans.json (what the PyTorch peer zeroes),
 * results.json and results.csv; the headline is bench_headline.c's.
 * bench/README.md documents every column and field. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h> /* symlink, unlink */

#include "bench.h"

#define DEFAULT_OUT_BASE "bench-out"     /* parent of the fresh per-run folders */
#define LATEST_LINK "latest"             /* bench-out/latest -> the newest run */
#define MAX_SAME_SECOND_RUNS 100         /* bench-out/<stamp>-2 ... before giving up */

/* Files of a run; an --out folder holding any of them is refused without --force. */
static const char *const k_out_files[] = {"results.json", "results.csv", "plans.json"};

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
  printf("  floor(case) = bytes / ceiling + the 1-kernel graph replay timed with the case, in alternating rounds\n"
         "                (%.2f us here; each case's own is in results.json, floor_replay_us)\n\n",
         f->graph_replay.med);
}

void print_legend(bool gpu) {
  printf("\ncolumns (one row per preset, policy, token count and strategy; us = microseconds per decode step):\n"
         "  MB        bytes the zero plan clears at that token count (10^6 bytes)\n"
         "  GPU us    GPU time of one step, median [p10-p90]: blocker kernel holds the stream, events around the step\n"
         "  loop us   per step, steps submitted back to back (the slower of CPU submission and GPU work)\n"
         "  cold us   GPU us with L2 flushed before each step, median\n"
         "  CPU us    host time of the submitting call, median over the CPU reps%s\n"
         "  CPU chg   CPU us when the token count changes on every step (graph strategies)\n"
         "  GB/s      MB / GPU us\n"
         "  xfloor    GPU us / floor, floor = MB / write ceiling + one 1-kernel graph replay (timed with the\n"
         "            case, rounds alternating); 1.00 is the floor\n"
         "  speedup   eager-memset GPU us / this strategy's GPU us, same preset, policy, tokens (> 1: faster\n"
         "            than plain memsets)\n"
         "  CPU spd   the same ratio of CPU us\n"
         "  each block is followed by its tail table: p50, p90, p99 and max of CPU us (over the CPU reps)%s\n"
         "            per step\n",
         gpu ? "" : " (host backend: the CPU doing the step's work itself)", gpu ? " and GPU us" : "");
  if (!gpu) printf("  without a GPU the GPU columns (GPU us, loop, cold, GB/s, xfloor, speedup) are \"-\"\n");
  printf("  graph-fused-dev is graph-fused with the step's ids already in device memory (written once before\n"
         "            timing; mdr_graph_cache_step_device): no staging slot, nothing read from host memory\n");
  printf("  graph-fused-inputs is graph-fused with positions, sequence lengths and a %d-entry block table per\n"
         "            sequence staged in the same slot as the ids (mdr_graph_cache_step_inputs)\n",
         INPUT_BLOCKS_PER_SEQ);
  printf("  graph-fused-dev-inputs is graph-fused-dev with the same inputs from the host\n"
         "            (mdr_graph_cache_step_inputs_device): the ids on the device, the inputs staged\n");
  printf("  graph-fused-inputs-devtable is graph-fused-inputs with the block table kept in device memory by\n"
         "            the engine (device_src at its destination): ids, positions and lengths staged, the\n"
         "            table not copied\n");
  printf("  inline    (after a row) some of its steps carried their slot image in the fused launch's\n"
         "            parameters instead of a staging slot (small counts; mdr_graph_stats.inline_steps, in\n"
         "            results.json and results.csv; MDR_STAGE_INLINE=0 turns it off)\n");
}

void print_table_header(bool gpu) {
  if (!gpu)
    printf("host backend (no GPU): CPU us of the host emulation; they rank nothing on a GPU, GPU columns \"-\"\n");
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
  printf("%-18s %-6s %6zu %-19s %9.3f %22s %8s %8s %8s %8s %8s %7s %7s %7s%s\n", c->preset,
         k_policy_names[c->policy], c->tokens, k_strategy_names[c->strat], (double)c->bytes / 1e6, gpu,
         loop, cold, cpu, chg, gbps, xf, sp, csp, c->inline_steps ? "  inline" : "");
}

void print_tail_table(const bench_case *c, size_t n, const size_t *tokens, size_t n_tokens, bool gpu) {
  printf("tail: us per step (CPU over the CPU reps, GPU over the reps; p50 is the median above)%s\n",
         gpu ? "" : "; host backend: CPU us of the host emulation");
  printf("%-18s %-6s %6s %-19s |%8s %8s %8s %8s", "preset", "policy", "tokens", "strategy", "CPU p50", "CPU p90",
         "CPU p99", "CPU max");
  if (gpu) printf(" |%8s %8s %8s %8s", "GPU p50", "GPU p90", "GPU p99", "GPU max");
  printf("\n");
  for (size_t t = 0; t < n_tokens; t++)
    for (size_t i = 0; i < n; i++) {
      if (c[i].tokens != tokens[t]) continue;
      printf("%-18s %-6s %6zu %-19s |", c[i].preset, k_policy_names[c[i].policy], c[i].tokens,
             k_strategy_names[c[i].strat]);
      if (!c[i].measured) {
        printf(" skipped\n");
        continue;
      }
      const summary *rows[2] = {&c[i].cpu, &c[i].gpu};
      for (int k = 0; k < (gpu ? 2 : 1); k++) {
        const double v[4] = {rows[k]->med, rows[k]->p90, rows[k]->p99, rows[k]->max};
        for (int j = 0; j < 4; j++) {
          char cell[16];
          fmt_num(cell, sizeof cell, "%.2f", v[j]);
          printf("%s%8s", j ? " " : "", cell);
        }
        if (k == 0 && gpu) printf(" |");
      }
      printf("\n");
    }
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
  printf("  %6s %15s %12s %12s %12s %12s\n", "tokens", "capture+inst us", "CPU eager-m", "CPU graph-f",
         "CPU graph-fd", "CPU graph-m");
  for (size_t t = 0; t < o->n_tokens; t++) {
    char em[16], gf[16], gd[16], gm[16];
    fmt_num(em, sizeof em, "%.2f", cpu_of(sw, g->preset, g->policy, o->tokens[t], STRAT_EAGER_MEMSET));
    fmt_num(gf, sizeof gf, "%.2f", cpu_of(sw, g->preset, g->policy, o->tokens[t], STRAT_GRAPH_FUSED));
    fmt_num(gd, sizeof gd, "%.2f", cpu_of(sw, g->preset, g->policy, o->tokens[t], STRAT_GRAPH_FUSED_DEV));
    fmt_num(gm, sizeof gm, "%.2f", cpu_of(sw, g->preset, g->policy, o->tokens[t], STRAT_GRAPH_MEMSET));
    printf("  %6zu %15.1f %12s %12s %12s %12s\n", o->tokens[t], g->capture_us[t], em, gf, gd, gm);
  }
  printf("  prepare of every count 1..%zu: %.3f s (goal <= %.1f s)%s, graphs after: %zu, capture_us total %.0f\n",
         o->m, g->prepare_all_s, PREPARE_ALL_GOAL_S, g->prepare_all_s <= PREPARE_ALL_GOAL_S ? "" : "  ** over goal **",
         g->graphs_after, g->capture_all_us);
  if (g->graphs_after) {
    double n = (double)g->graphs_after;
    if (g->memory_measured)
      printf("  those graphs: %.1f MiB of device memory (%.1f KiB per graph; CUDA measures whole pages: read "
             "the total), %.1f nodes per graph\n",
             (double)g->graph_bytes / (double)MIB, (double)g->graph_bytes / (double)KIB / n,
             (double)g->graph_nodes / n);
    else
      printf("  those graphs: %.1f nodes per graph (device memory not measured by this backend)\n",
             (double)g->graph_nodes / n);
  }
  if (g->ladder_graphs)
    printf("  LADDER, every rung: %zu graphs, %.1f MiB (%.1f KiB per graph), %.1f nodes per graph; DYNAMIC: 1 graph, "
           "%.1f KiB, %zu nodes%s\n",
           g->ladder_graphs, (double)g->ladder_bytes / (double)MIB,
           (double)g->ladder_bytes / (double)KIB / (double)g->ladder_graphs,
           (double)g->ladder_nodes / (double)g->ladder_graphs, (double)g->dynamic_bytes / (double)KIB,
           g->dynamic_nodes, g->memory_measured ? "" : " (device memory not measured by this backend)");
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
      {"floor_replay_us", c->floor_replay_us}, {"x_floor", c->x_floor},      {"speedup", c->speedup},      {"cpu_speedup", c->cpu_speedup},
      {"cpu_vary_us_med", c->cpu_vary.med}, {"cpu_vary_us_p90", c->cpu_vary.p90},
      {"gpu_us_p99", c->gpu.p99},   {"gpu_us_max", c->gpu.max},   {"cpu_us_p99", c->cpu.p99},
      {"cpu_us_max", c->cpu.max},   {"copy_us", c->copy_us},
  };
  for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
    fprintf(f, ", \"%s\": ", nums[i].key);
    json_num(f, nums[i].v);
  }
  fprintf(f, ", \"eager_steps\": %llu, \"inline_steps\": %llu}", (unsigned long long)c->eager_steps,
          (unsigned long long)c->inline_steps);
}

void write_results_json(const bench_env *e, const sweep *sw, const graph_costs *gc, size_t n_gc) {
  const options *o = e->o;
  FILE *f = open_out(o->out_dir, "results.json");
  fprintf(f, "{\n  \"schema_version\": %d,\n  \"timestamp\": ", BENCH_SCHEMA_VERSION);
  json_str(f, e->run->timestamp);
  fprintf(f, ",\n  \"git_revision\": ");
  json_str(f, bench_git_revision());
  fprintf(f, ",\n  \"build_type\": ");
  json_str(f, bench_build_type());
  fprintf(f, ",\n  \"device\": ");
  json_str(f, e->run->device);
  fprintf(f, ",\n  \"sweep\": \"%s\",\n  \"mdr_bench_version\": \"%d.%d.%d\",\n", k_sweep_names[o->sweep],
          MDR_VERSION_MAJOR, MDR_VERSION_MINOR, MDR_VERSION_PATCH);
  fprintf(f, "  \"command\": [");
  for (int i = 0; i < o->argc; i++) fprintf(f, "%s", i ? ", " : ""), json_str(f, o->argv[i]);
  fprintf(f, "],\n");
  write_machine(f, e);
  fprintf(f,
          "  \"limits\": {\"M\": %zu, \"seq\": %zu, \"block\": %zu, \"batch\": %zu}, \"reps\": %zu, \"cpu_reps\": %zu,\n",
          o->m, o->seq, o->block, o->batch, o->reps, o->cpu_reps);
  if (o->pin_cpu >= 0) fprintf(f, "  \"pinned_cpu\": %ld,\n", o->pin_cpu);
  else fprintf(f, "  \"pinned_cpu\": null,\n");
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
    fprintf(f, "}, \"prepare_all_s\": %.4f, \"graphs_after\": %zu, \"capture_all_us\": %.0f", gc[i].prepare_all_s,
            gc[i].graphs_after, gc[i].capture_all_us);
    fprintf(f, ", \"graph_bytes\": %llu, \"graph_nodes\": %zu, \"memory_measured\": %s",
            (unsigned long long)gc[i].graph_bytes, gc[i].graph_nodes, gc[i].memory_measured ? "true" : "false");
    fprintf(f, ", \"ladder_graphs\": %zu, \"ladder_bytes\": %llu, \"ladder_nodes\": %zu, \"dynamic_bytes\": %llu, "
               "\"dynamic_nodes\": %zu}",
            gc[i].ladder_graphs, (unsigned long long)gc[i].ladder_bytes, gc[i].ladder_nodes,
            (unsigned long long)gc[i].dynamic_bytes, gc[i].dynamic_nodes);
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
             "eager_steps,cpu_us_p90,cpu_us_p99,cpu_us_max,gpu_us_p99,gpu_us_max,inline_steps,copy_us\n");
  for (size_t i = 0; i < sw->n; i++) {
    const bench_case *c = &sw->cases[i];
    fprintf(f, "%s,%s,%zu,%s,%d,%zu,%zu", c->preset, k_policy_names[c->policy], c->tokens,
            k_strategy_names[c->strat], c->measured, c->bytes, c->segments);
    const double nums[] = {c->gpu.med, c->gpu.p10, c->gpu.p90, c->loop_us, c->cold.med, c->cpu.med,
                           c->gbps, c->floor_us, c->x_floor, c->speedup, c->cpu_speedup, c->cpu_vary.med};
    for (size_t k = 0; k < sizeof nums / sizeof nums[0]; k++) fputc(',', f), csv_num(f, nums[k]);
    fprintf(f, ",%llu", (unsigned long long)c->eager_steps);
    const double tails[] = {c->cpu.p90, c->cpu.p99, c->cpu.max, c->gpu.p99, c->gpu.max};
    for (size_t k = 0; k < sizeof tails / sizeof tails[0]; k++) fputc(',', f), csv_num(f, tails[k]);
    fprintf(f, ",%llu,", (unsigned long long)c->inline_steps);
    csv_num(f, c->copy_us);
    fputc('\n', f);
  }
  fclose(f);
}

/* ---- the output folder ---- */

void prepare_out_dir(options *o, run_info *run, const char *stamp) {
  struct stat st;
  if (o->out_dir) {
    for (size_t i = 0; i < sizeof k_out_files / sizeof *k_out_files && !o->force; i++) {
      char path[4096 + 64];
      snprintf(path, sizeof path, "%s/%s", o->out_dir, k_out_files[i]);
      if (stat(path, &st) == 0)
        die("refusing to overwrite %s (an earlier run's): pass --force to overwrite it, or leave --out out "
            "for a fresh %s/<timestamp>/",
            path, DEFAULT_OUT_BASE);
    }
    if (snprintf(run->out_dir, sizeof run->out_dir, "%s", o->out_dir) >= (int)sizeof run->out_dir)
      die("--out path too long");
    mkdir_p(run->out_dir);
  } else {
    mkdir_p(DEFAULT_OUT_BASE);
    int k = 1;
    for (;; k++) {
      if (k > MAX_SAME_SECOND_RUNS) die("%s: too many runs named %s*", DEFAULT_OUT_BASE, stamp);
      if (k == 1) snprintf(run->out_dir, sizeof run->out_dir, "%s/%s", DEFAULT_OUT_BASE, stamp);
      else snprintf(run->out_dir, sizeof run->out_dir, "%s/%s-%d", DEFAULT_OUT_BASE, stamp, k);
      if (mkdir(run->out_dir, 0755) == 0) break;
      if (errno != EEXIST) die("mkdir %s: %s", run->out_dir, strerror(errno));
    }
    /* bench-out/latest -> this run (relative, so the folder can move) */
    const char *leaf = run->out_dir + strlen(DEFAULT_OUT_BASE) + 1;
    const char *link = DEFAULT_OUT_BASE "/" LATEST_LINK;
    if (lstat(link, &st) == 0 && !S_ISLNK(st.st_mode))
      fprintf(stderr, "note: %s exists and is not a link: left as it is\n", link);
    else if ((unlink(link) != 0 && errno != ENOENT) || symlink(leaf, link) != 0)
      fprintf(stderr, "note: could not point %s at %s: %s\n", link, leaf, strerror(errno));
  }
  o->out_dir = run->out_dir;
}

/* ---- the device ---- */

void describe_device(const bench_env *e, run_info *run) {
#ifdef MDR_HAVE_CUDA
  if (e->gpu.on) {
    struct cudaDeviceProp prop;
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    snprintf(run->device, sizeof run->device, "%s", prop.name);
    return;
  }
#endif
  (void)e;
  /* Linux: the first "model name" of /proc/cpuinfo and its "processor" lines. */
  char model[200] = "";
  int cpus = 0;
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[512];
    while (fgets(line, sizeof line, f)) {
      if (strncmp(line, "processor", 9) == 0) cpus++;
      const char *colon = strchr(line, ':');
      if (model[0] || strncmp(line, "model name", 10) != 0 || !colon) continue;
      colon += 1 + (colon[1] == ' ');
      snprintf(model, sizeof model, "%s", colon);
      model[strcspn(model, "\n")] = '\0';
    }
    fclose(f);
  }
  if (cpus > 0)
    snprintf(run->device, sizeof run->device, "host CPU (no GPU): %s, %d logical CPUs",
             model[0] ? model : "unknown model", cpus);
  else
    snprintf(run->device, sizeof run->device, "host CPU (no GPU): %s", model[0] ? model : "unknown model");
}
