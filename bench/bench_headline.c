/* bench_headline.c — the last lines of an mdr-bench run: the strategies
 * side by side against eager memsets at a few token counts, device ids
 * beside staged ids, the graph-fused-dev goal (GPU), what was measured, and
 * what wins, a winner being named only beyond the spread between the
 * interleaved rounds of the same run. bench/README.md documents them. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define HOST_FIGURES_NOTE                                                                            \
  "host figures do not predict the GPU ranking: on the host backend every strategy is CPU work "    \
  "(a fused \"kernel\" is a CPU loop, a graph replay walks a list of recorded operations), so "      \
  "their order says nothing about a GPU; GPU figures: bench/results/ (H200)"
enum {
  HEADLINE_COUNTS = 4,   /* token counts per headline table */
  HEADLINE_CELL = 15,    /* "1234.56 (0.42x)" */
  DEVICE_IDS_CELL = 16,  /* "1234.56 [1.02x]" */
};
/* The device-ids goal: graph-fused-dev on a GLM preset under
 * MDR_ROWS_ALL at 1..DEV_GOAL_MAX_TOKENS tokens, GPU µs and xfloor. */
#define DEV_GOAL_PRESET_PREFIX "glm"
#define DEV_GOAL_MAX_TOKENS 8
#define DEV_GOAL_GPU_US 4.0
#define DEV_GOAL_X_FLOOR 1.15

/* ---- the headline ---- */

static double headline_metric(const bench_case *c, bool gpu) {
  if (!c->measured) return NAN;
  double v = gpu ? c->gpu.med : c->cpu.med;
  return v > 0 ? v : NAN;
}

static bool same_group(const bench_case *a, const bench_case *b) {
  return a->tokens == b->tokens && a->policy == b->policy && strcmp(a->preset, b->preset) == 0;
}

/* The eager-memset case of c's (preset, policy, tokens), or NULL. */
static const bench_case *baseline_of(const sweep *sw, const bench_case *c) {
  for (size_t i = 0; i < sw->n; i++)
    if (sw->cases[i].strat == STRAT_EAGER_MEMSET && same_group(&sw->cases[i], c)) return &sw->cases[i];
  return NULL;
}

static const bench_case *find_case(const sweep *sw, const char *preset, mdr_rows_policy p, size_t tokens,
                                   strategy s) {
  for (size_t i = 0; i < sw->n; i++) {
    const bench_case *c = &sw->cases[i];
    if (c->strat == s && c->tokens == tokens && c->policy == p && strcmp(c->preset, preset) == 0) return c;
  }
  return NULL;
}

static int cmp_size(const void *a, const void *b) {
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  return (x > y) - (x < y);
}

/* Up to HEADLINE_COUNTS token counts of the sweep, ascending: the smallest,
 * the largest and evenly spaced ones between. Returns how many. */
static size_t headline_counts(const options *o, size_t *out) {
  size_t sorted[MAX_TOKEN_COUNTS], n = 0;
  memcpy(sorted, o->tokens, o->n_tokens * sizeof *sorted);
  qsort(sorted, o->n_tokens, sizeof *sorted, cmp_size);
  for (size_t i = 0; i < o->n_tokens; i++)
    if (n == 0 || sorted[i] != sorted[n - 1]) sorted[n++] = sorted[i];
  if (n <= HEADLINE_COUNTS) {
    memcpy(out, sorted, n * sizeof *out);
    return n;
  }
  for (size_t k = 0; k < HEADLINE_COUNTS; k++) out[k] = sorted[k * (n - 1) / (HEADLINE_COUNTS - 1)];
  return HEADLINE_COUNTS;
}

/* One strategy against eager-memset over every (preset, policy, tokens). */
typedef struct versus {
  size_t cases, fastest;       /* cases with both figures; cases where it was the fastest strategy */
  double geomean, lo, hi;      /* of eager-memset / strategy */
  double round[ROUNDS];        /* the geometric mean of each interleaved round alone (NAN: none) */
  double round_lo, round_hi;   /* their range: the spread measured in this run */
} versus;

static double round_metric(const bench_case *c, bool gpu, int k) {
  if (!c->measured) return NAN;
  double v = gpu ? c->round_gpu[k] : c->round_cpu[k];
  return v > 0 ? v : NAN;
}

static versus versus_memset(const sweep *sw, strategy s, bool gpu) {
  versus v = {0, 0, NAN, INFINITY, -INFINITY, {0}, INFINITY, -INFINITY};
  double log_sum = 0, round_log[ROUNDS] = {0};
  size_t round_n[ROUNDS] = {0};
  for (size_t i = 0; i < sw->n; i++) {
    const bench_case *c = &sw->cases[i];
    if (c->strat != s) continue;
    double mine = headline_metric(c, gpu);
    if (!isfinite(mine)) continue;
    const bench_case *base = baseline_of(sw, c);
    double ratio = base ? headline_metric(base, gpu) / mine : NAN;
    bool fastest = true;
    for (size_t j = 0; j < sw->n; j++)
      if (j != i && same_group(&sw->cases[j], c) && headline_metric(&sw->cases[j], gpu) < mine) fastest = false;
    v.fastest += fastest;
    if (!isfinite(ratio)) continue;
    v.cases++;
    log_sum += log(ratio);
    if (ratio < v.lo) v.lo = ratio;
    if (ratio > v.hi) v.hi = ratio;
    for (int k = 0; k < ROUNDS; k++) {
      double rk = round_metric(base, gpu, k) / round_metric(c, gpu, k);
      if (!isfinite(rk)) continue;
      round_log[k] += log(rk);
      round_n[k]++;
    }
  }
  if (v.cases) v.geomean = exp(log_sum / (double)v.cases);
  for (int k = 0; k < ROUNDS; k++) {
    v.round[k] = round_n[k] ? exp(round_log[k] / (double)round_n[k]) : NAN;
    if (!isfinite(v.round[k])) continue;
    if (v.round[k] < v.round_lo) v.round_lo = v.round[k];
    if (v.round[k] > v.round_hi) v.round_hi = v.round[k];
  }
  return v;
}

/* Whether a is ahead of b (both ratios against eager memsets) in every
 * round both have: the difference then exceeds the spread between rounds. */
static bool ahead_in_every_round(const versus *a, const versus *b) {
  size_t n = 0;
  for (int k = 0; k < ROUNDS; k++) {
    if (!isfinite(a->round[k]) || !isfinite(b->round[k])) continue;
    if (a->round[k] <= b->round[k]) return false;
    n++;
  }
  return n > 0;
}

/* "wins (<what>): ..." — a winner is named only when the difference exceeds
 * the spread measured in the same run: the strategies of a case are timed
 * in ROUNDS interleaved rounds (measure_group), and the best strategy (by
 * its geometric-mean ratio against eager memsets over the sweep) must be
 * ahead of eager memsets and of every other strategy in each round alone.
 * eager-memset wins when every other strategy is behind it in every round.
 * Otherwise: none, with the spread that hides the difference. */
static void print_wins(const bench_env *e, const sweep *sw, bool gpu, const char *what) {
  versus all[STRAT_COUNT];
  int best = -1;
  for (int s = 0; s < STRAT_COUNT; s++) {
    all[s].cases = 0;
    if (s == STRAT_EAGER_MEMSET || !e->o->strategy_on[s]) continue;
    all[s] = versus_memset(sw, (strategy)s, gpu);
    if (all[s].cases && (best < 0 || all[s].geomean > all[best].geomean)) best = s;
  }
  if (!e->o->strategy_on[STRAT_EAGER_MEMSET] || best < 0) {
    printf("wins (%s): no ratio against eager memsets (eager-memset and another strategy must both be measured)\n",
           what);
    return;
  }
  /* eager-memset against itself: 1 in every round */
  versus memset = versus_memset(sw, STRAT_EAGER_MEMSET, gpu);
  const versus *vb = &all[best];
  bool clear = vb->geomean > 1.0 && ahead_in_every_round(vb, &memset);
  int rival = -1; /* the strategy the best one is not ahead of in every round */
  for (int s = 0; clear && s < STRAT_COUNT; s++)
    if (s != best && s != STRAT_EAGER_MEMSET && all[s].cases && !ahead_in_every_round(vb, &all[s])) rival = s;
  clear = clear && rival < 0;
  bool memset_clear = !(vb->geomean > 1.0);
  for (int s = 0; memset_clear && s < STRAT_COUNT; s++)
    if (s != STRAT_EAGER_MEMSET && all[s].cases && !ahead_in_every_round(&memset, &all[s])) memset_clear = false;
  if (clear)
    printf("wins (%s): %s, %.2fx eager memsets (geometric mean over %zu cases, %.2fx-%.2fx; %.2fx-%.2fx across "
           "%d interleaved rounds, ahead of every other strategy in each); fastest strategy in %zu of %zu cases\n",
           what, k_strategy_names[best], vb->geomean, vb->cases, vb->lo, vb->hi, vb->round_lo, vb->round_hi, ROUNDS,
           vb->fastest, vb->cases);
  else if (memset_clear)
    printf("wins (%s): eager-memset (plain memsets): every other strategy is behind it in each of %d interleaved "
           "rounds (fastest in %zu of %zu cases); closest: %s at %.2fx (geometric mean, rounds %.2fx-%.2fx)\n",
           what, ROUNDS, memset.fastest, vb->cases, k_strategy_names[best], vb->geomean, vb->round_lo,
           vb->round_hi);
  else if (rival >= 0)
    printf("wins (%s): none beyond the spread: %s leads at %.2fx eager memsets (geometric mean over %zu cases) "
           "but is not ahead of %s (%.2fx) in each of %d interleaved rounds (%.2fx-%.2fx against %.2fx-%.2fx)\n",
           what, k_strategy_names[best], vb->geomean, vb->cases, k_strategy_names[rival], all[rival].geomean, ROUNDS,
           vb->round_lo, vb->round_hi, all[rival].round_lo, all[rival].round_hi);
  else
    printf("wins (%s): none beyond the spread: %s at %.2fx eager memsets (geometric mean over %zu cases), but "
           "%.2fx-%.2fx across %d interleaved rounds: within that spread\n",
           what, k_strategy_names[best], vb->geomean, vb->cases, vb->round_lo, vb->round_hi, ROUNDS);
}

/* "a [x]" or "a" or "-" into cell. */
static void fmt_with_floor(char *cell, size_t n, const bench_case *c, bool gpu) {
  double v = c ? headline_metric(c, gpu) : NAN;
  if (!isfinite(v)) snprintf(cell, n, "-");
  else if (gpu && isfinite(c->x_floor)) snprintf(cell, n, "%.2f [%.2fx]", v, c->x_floor);
  else snprintf(cell, n, "%.2f", v);
}

static double ratio_of(const bench_case *a, const bench_case *b, bool gpu) {
  return a && b ? headline_metric(a, gpu) / headline_metric(b, gpu) : NAN;
}

/* The goal line of graph-fused-dev (GPU only): the worst GPU µs and xfloor
 * over the sweep's counts 1..DEV_GOAL_MAX_TOKENS on GLM presets, policy all. */
static void print_device_goal(const bench_env *e, const sweep *sw) {
  const options *o = e->o;
  for (size_t p = 0; p < mdr_model_preset_count(); p++) {
    const char *preset = mdr_model_preset_name(p);
    if (!o->preset_on[p] || strncmp(preset, DEV_GOAL_PRESET_PREFIX, strlen(DEV_GOAL_PRESET_PREFIX)) != 0) continue;
    double worst_us = -INFINITY, worst_x = -INFINITY;
    char counts[128] = "";
    size_t used = 0, n = 0;
    for (size_t t = 0; t < o->n_tokens && o->policy_on[MDR_ROWS_ALL]; t++) {
      if (o->tokens[t] > DEV_GOAL_MAX_TOKENS) continue;
      const bench_case *c = find_case(sw, preset, MDR_ROWS_ALL, o->tokens[t], STRAT_GRAPH_FUSED_DEV);
      if (!c || !isfinite(headline_metric(c, true))) continue;
      if (c->gpu.med > worst_us) worst_us = c->gpu.med;
      if (c->x_floor > worst_x) worst_x = c->x_floor;
      if (used < sizeof counts)
        used += (size_t)snprintf(counts + used, sizeof counts - used, "%s%zu", n ? "," : "", o->tokens[t]);
      n++;
    }
    if (!n) {
      printf("goal (graph-fused-dev, %s, policy all, tokens <= %d): not measured in this run (needs policy all "
             "and token counts <= %d)\n", preset, DEV_GOAL_MAX_TOKENS, DEV_GOAL_MAX_TOKENS);
      continue;
    }
    bool met = worst_us <= DEV_GOAL_GPU_US && worst_x <= DEV_GOAL_X_FLOOR;
    printf("goal (graph-fused-dev, %s, policy all, tokens %s): GPU us max %.2f (goal <= %.2f), xfloor max %.2f "
           "(goal <= %.2f): %s\n", preset, counts, worst_us, DEV_GOAL_GPU_US, worst_x, DEV_GOAL_X_FLOOR,
           met ? "met" : "NOT met");
  }
}

/* graph-fused-dev beside graph-fused at the headline's counts: the same
 * EXACT fused graph, ids in device memory against ids staged in host
 * memory; on a GPU with xfloor in brackets. */
static void print_device_ids(const bench_env *e, const sweep *sw, const size_t *counts, size_t n_counts) {
  const options *o = e->o;
  const bool gpu = e->gpu.on;
  if (!o->strategy_on[STRAT_GRAPH_FUSED_DEV]) return;
  const mdr_rows_policy policy = o->policy_on[MDR_ROWS_ALL] ? MDR_ROWS_ALL : MDR_ROWS_SEED;
  printf("device ids: graph-fused-dev (ids already in device memory, mdr_graph_cache_step_device) beside "
         "graph-fused (ids staged in host memory); %s; policy %s\n",
         gpu ? "GPU us median [xfloor], CPU us median" : "CPU us median (host backend)", k_policy_names[policy]);
  printf("%-18s %6s", "", "tokens");
  if (gpu)
    printf("  %*s  %*s  %9s", DEVICE_IDS_CELL, "fused GPU", DEVICE_IDS_CELL, "fused-dev GPU", "dev/fused");
  printf("  %9s  %13s  %9s\n", "fused CPU", "fused-dev CPU", "dev/fused");
  for (size_t p = 0; p < mdr_model_preset_count(); p++) {
    if (!o->preset_on[p]) continue;
    const char *preset = mdr_model_preset_name(p);
    for (size_t t = 0; t < n_counts; t++) {
      const bench_case *host = find_case(sw, preset, policy, counts[t], STRAT_GRAPH_FUSED);
      const bench_case *dev = find_case(sw, preset, policy, counts[t], STRAT_GRAPH_FUSED_DEV);
      char a[48], b[48], r[16];
      printf("%-18s %6zu", t ? "" : preset, counts[t]);
      if (gpu) {
        fmt_with_floor(a, sizeof a, host, true);
        fmt_with_floor(b, sizeof b, dev, true);
        fmt_num(r, sizeof r, "%.2f", ratio_of(dev, host, true));
        printf("  %*s  %*s  %9s", DEVICE_IDS_CELL, a, DEVICE_IDS_CELL, b, r);
      }
      fmt_with_floor(a, sizeof a, host, false);
      fmt_with_floor(b, sizeof b, dev, false);
      fmt_num(r, sizeof r, "%.2f", ratio_of(dev, host, false));
      printf("  %9s  %13s  %9s\n", a, b, r);
    }
  }
  if (gpu) print_device_goal(e, sw);
}

/* The step-inputs goal: graph-fused-inputs over graph-fused, at
 * counts up to INPUTS_GOAL_MAX_TOKENS, costs at most INPUTS_GOAL_US more,
 * GPU and CPU (medians). */
#define INPUTS_GOAL_MAX_TOKENS 64
#define INPUTS_GOAL_US 0.3

/* A step with inputs beside the same step with ids only (the same EXACT
 * fused graph): in_s beside ids_s, graph-fused-inputs beside graph-fused,
 * graph-fused-dev-inputs beside graph-fused-dev (the ids on the device),
 * or graph-fused-inputs-devtable beside graph-fused (the block table in
 * device memory, not staged); the goal lines name the variant. At every
 * count of the run, per preset and policy: medians and their differences.
 * On a GPU the difference is also given net of the 1-kernel
 * replay timed beside each case (what a drift between the two cases moved
 * alike), and the goal line takes the larger of the two. The CPU
 * difference is given beside the copy floor (input_copy_us: a memcpy of the
 * same input bytes into pinned memory, which a step that copies its inputs
 * cannot avoid) and net of it; the goal line reads the difference itself
 * and names the largest net figure beside it. */
static void print_step_inputs_pair(const bench_env *e, const sweep *sw, strategy ids_s, strategy in_s) {
  const options *o = e->o;
  const bool gpu = e->gpu.on;
  if (!o->strategy_on[in_s] || !o->strategy_on[ids_s]) return;
  const bool dev = in_s == STRAT_GRAPH_FUSED_DEV_INPUTS, table_dev = in_s == STRAT_GRAPH_FUSED_INPUTS_DEVTABLE;
  const char *tag = dev ? ", device ids" : table_dev ? ", table on the device" : "";
  printf("\nstep inputs: %s (ids + positions + seq lens + a %d-entry block table per sequence%s, "
         "min(tokens, %d) sequences, %s) beside %s (ids only); %s\n",
         k_strategy_names[in_s], INPUT_BLOCKS_PER_SEQ, table_dev ? " in device memory, not staged" : "",
         INPUT_MAX_SEQS, dev ? "mdr_graph_cache_step_inputs_device" : "mdr_graph_cache_step_inputs",
         k_strategy_names[ids_s], gpu ? "GPU and CPU us, medians" : "CPU us medians (host backend)");
  printf("%-18s %-6s %6s", "", "policy", "tokens");
  if (gpu) printf("  %9s  %10s  %8s  %8s", "ids GPU", "inputs GPU", "+GPU", "+GPU net");
  printf("  %9s  %10s  %8s  %6s  %8s\n", "ids CPU", "inputs CPU", "+CPU", "copy", "+CPU net");
  for (size_t p = 0; p < mdr_model_preset_count(); p++) {
    if (!o->preset_on[p]) continue;
    const char *preset = mdr_model_preset_name(p);
    for (int pol = 0; pol < MDR_ROWS_POLICY_COUNT; pol++) {
      if (!o->policy_on[pol]) continue;
      double worst_gpu = -INFINITY, worst_cpu = -INFINITY, worst_net = -INFINITY;
      size_t n = 0;
      for (size_t t = 0; t < o->n_tokens; t++) {
        const bench_case *ids = find_case(sw, preset, (mdr_rows_policy)pol, o->tokens[t], ids_s);
        const bench_case *in = find_case(sw, preset, (mdr_rows_policy)pol, o->tokens[t], in_s);
        if (!ids || !in || !ids->measured || !in->measured) continue;
        printf("%-18s %-6s %6zu", n ? "" : preset, k_policy_names[pol], o->tokens[t]);
        if (gpu) {
          const double d = in->gpu.med - ids->gpu.med;
          const double net = (in->gpu.med - in->floor_replay_us) - (ids->gpu.med - ids->floor_replay_us);
          printf("  %9.2f  %10.2f  %+8.2f  %+8.2f", ids->gpu.med, in->gpu.med, d, net);
          if (o->tokens[t] <= INPUTS_GOAL_MAX_TOKENS && (d > worst_gpu || net > worst_gpu))
            worst_gpu = d > net ? d : net;
        }
        const double dc = in->cpu.med - ids->cpu.med;
        printf("  %9.2f  %10.2f  %+8.2f  %6.2f  %+8.2f\n", ids->cpu.med, in->cpu.med, dc, in->copy_us, dc - in->copy_us);
        if (o->tokens[t] <= INPUTS_GOAL_MAX_TOKENS && dc > worst_cpu) worst_cpu = dc;
        if (o->tokens[t] <= INPUTS_GOAL_MAX_TOKENS && dc - in->copy_us > worst_net) worst_net = dc - in->copy_us;
        n++;
      }
      if (!isfinite(worst_cpu)) {
        printf("goal (step inputs%s, %s, policy %s): not measured at counts <= %d\n", tag,
               preset, k_policy_names[pol], INPUTS_GOAL_MAX_TOKENS);
        continue;
      }
      if (gpu)
        printf("goal (step inputs%s, %s, policy %s, tokens <= %d): +GPU us max %.2f, +CPU us max %.2f (goal <= %.2f "
               "each): %s; +CPU net of the copy max %.2f\n", tag, preset, k_policy_names[pol],
               INPUTS_GOAL_MAX_TOKENS,
               worst_gpu, worst_cpu, INPUTS_GOAL_US,
               worst_gpu <= INPUTS_GOAL_US && worst_cpu <= INPUTS_GOAL_US ? "met" : "NOT met", worst_net);
      else
        printf("goal (step inputs%s, %s, policy %s, tokens <= %d): +CPU us max %.2f on the host backend (the goal "
               "is read on a GPU); +CPU net of the copy max %.2f\n", tag, preset,
               k_policy_names[pol],
               INPUTS_GOAL_MAX_TOKENS, worst_cpu, worst_net);
    }
  }
}

void print_headline(const bench_env *e, const sweep *sw) {
  const options *o = e->o;
  const bool gpu = e->gpu.on;
  const mdr_rows_policy policy = o->policy_on[MDR_ROWS_SEED] ? MDR_ROWS_SEED : MDR_ROWS_ALL;
  size_t counts[HEADLINE_COUNTS];
  size_t n_counts = headline_counts(o, counts);
  printf("\n== headline: %s per step, median; in brackets eager-memset / strategy (> 1: faster than plain "
         "memsets); policy %s\n",
         gpu ? "GPU us" : "CPU us (host backend)", k_policy_names[policy]);
  for (size_t p = 0; p < mdr_model_preset_count(); p++) {
    if (!o->preset_on[p]) continue;
    const char *preset = mdr_model_preset_name(p);
    printf("%-18s %6s", preset, "tokens");
    for (int s = 0; s < STRAT_COUNT; s++)
      if (o->strategy_on[s]) printf("  %*s", HEADLINE_CELL, k_strategy_names[s]);
    printf("\n");
    for (size_t t = 0; t < n_counts; t++) {
      printf("%-18s %6zu", "", counts[t]);
      const bench_case *base = find_case(sw, preset, policy, counts[t], STRAT_EAGER_MEMSET);
      double base_v = base ? headline_metric(base, gpu) : NAN;
      for (int s = 0; s < STRAT_COUNT; s++) {
        if (!o->strategy_on[s]) continue;
        const bench_case *c = find_case(sw, preset, policy, counts[t], (strategy)s);
        double v = c ? headline_metric(c, gpu) : NAN;
        char cell[48];
        if (!isfinite(v)) snprintf(cell, sizeof cell, "-");
        else if (s == STRAT_EAGER_MEMSET || !isfinite(base_v)) snprintf(cell, sizeof cell, "%.2f", v);
        else snprintf(cell, sizeof cell, "%.2f (%.2fx)", v, base_v / v);
        printf("  %*s", (int)(strlen(k_strategy_names[s]) > HEADLINE_CELL ? strlen(k_strategy_names[s])
                                                                             : HEADLINE_CELL), cell);
      }
      printf("\n");
    }
  }
  print_device_ids(e, sw, counts, n_counts);
  print_step_inputs_pair(e, sw, STRAT_GRAPH_FUSED, STRAT_GRAPH_FUSED_INPUTS);
  print_step_inputs_pair(e, sw, STRAT_GRAPH_FUSED_DEV, STRAT_GRAPH_FUSED_DEV_INPUTS);
  print_step_inputs_pair(e, sw, STRAT_GRAPH_FUSED, STRAT_GRAPH_FUSED_INPUTS_DEVTABLE);
  size_t n_presets = count_on(o->preset_on, mdr_model_preset_count());
  size_t n_policies = count_on(o->policy_on, MDR_ROWS_POLICY_COUNT);
  if (gpu)
    printf("measured: GPU time to prepare one decode step (zero plan + token-id upload), blocker kernel + events, "
           "median of %zu steps per case, on %s; %zu presets x %zu policies x %zu token counts\n",
           o->reps, e->run->device, n_presets, n_policies, o->n_tokens);
  else
    printf("measured: host backend, no GPU: CPU time of one step of the host emulation (memsets and copies in "
           "host memory), median of %zu steps per case, on %s; %zu presets x %zu policies x %zu token counts\n",
           o->reps, e->run->device, n_presets, n_policies, o->n_tokens);
  if (!gpu) printf("%s\n", HOST_FIGURES_NOTE);
  if (gpu) print_wins(e, sw, true, "GPU us per step");
  print_wins(e, sw, false, gpu ? "CPU us to submit a step" : "CPU us per step, host backend");
}
