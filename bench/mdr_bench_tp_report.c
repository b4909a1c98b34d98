/* mdr_bench_tp_report.c — what mdr-bench-tp prints: the legend, each
 * count's rows with the floor measured in the same run and the count's
 * summary (what AUTO picks, the best mdr path / floor, mdr-dyn / exact),
 * the capture costs, the headline (ratios, mdr-dyn against its goal, the
 * one-shot / two-shot crossover, and last the closing table). The files
 * (the output folder, results.json, results.csv, capture.csv, the soak's
 * lines and soak.json) are mdr_bench_tp_files.c's. bench/README.md
 * (section mdr-bench-tp) documents every column and field. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "bench_tp.h"

#define TP_NEAR_FLOOR 1.10             /* "near the floor": within 10 % */
enum { TP_HEADLINE_COUNTS = 4 };


/* ---- formatting ---- */

static void tp_fmt_bytes(char *out, size_t n, size_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) snprintf(out, n, "%zu MiB", bytes >> 20);
  else if (bytes >= 1024 && bytes % 1024 == 0) snprintf(out, n, "%zu KiB", bytes >> 10);
  else snprintf(out, n, "%zu B", bytes);
}

void tp_print_legend(void) {
  printf("\ncolumns (one row per sweep, row count and path; us = microseconds):\n"
         "  rows        rows reduced (the token count); bytes = rows x row bytes, bf16, summed in place\n"
         "  path        nccl-eager     ncclAllReduce per op, cudaMalloc buffer\n"
         "              nccl-graph     the same captured in a CUDA graph, cudaGraphLaunch per op\n"
         "              nccl-window    ncclMemAlloc buffer registered once with ncclCommWindowRegister\n"
         "                             (NCCL_WIN_COLL_SYMMETRIC), captured in a CUDA graph\n"
         "              mdr-graph      mdr_all_reduce (AUTO, mdr_all_reduce_desc_make) in a graph cache body (EXACT, fused), the\n"
         "                             arena on the communicator (its slab one symmetric window);\n"
         "                             mdr_graph_cache_step per op: the graph is the id-upload node (it reads the\n"
         "                             staged ids from pinned host memory) + the all-reduce\n"
         "              mdr-graph-dev  the same caches, mdr_graph_cache_step_device, the ids already in\n"
         "                             token_ids: the graph reads nothing from host memory\n"
         "              mdr-1shot      mdr_all_reduce with MDR_ALL_REDUCE_ONE_SHOT in an EXACT cache's body, device\n"
         "                             steps (as mdr-graph-dev); skipped over MDR_ALL_REDUCE_ONE_SHOT_MAX_BYTES\n"
         "              mdr-2shot      the same with MDR_ALL_REDUCE_TWO_SHOT\n"
         "              mdr-dyn        one MDR_GRAPH_DYNAMIC graph for every count: mdr_all_reduce, AUTO,\n"
         "                             count_ptr = the cache's count word, tokens = max_batch_tokens; device\n"
         "                             steps; validated to reduce exactly the step's rows (the rest untouched)\n"
         "              (mdr-1shot, mdr-2shot: skipped, with the reason, where mdr's kernels cannot run)\n"
         "  GPU us      one op between two events; both ranks' streams held by a blocker kernel until both have\n"
         "              enqueued, then released together; per rep the slower rank; median [p10-p90], p99, max\n"
         "  K-batch     GPU us per all-reduce of %d back to back (one graph of %d, %d eager calls, one mdr step\n"
         "              whose body holds %d), same method, / %d; median\n"
         "  CPU r0/r1   host us of the submitting call on each rank's thread (ncclAllReduce, cudaGraphLaunch,\n"
         "              mdr_graph_cache_step[_device]), median; both ranks at once\n"
         "  GB/s        bytes / GPU us (algorithm bandwidth; the bus bandwidth of 2 ranks is the same)\n"
         "  xfloor      GPU us / floor; floor = the better GPU us of nccl-graph and nccl-window at that size, this run\n"
         "  xfloorK     the same for the K-batch figure\n"
         "  xexact      mdr-dyn only: GPU us / the EXACT path's at the same rows (mdr-graph-dev: device steps too;\n"
         "              mdr-graph when -dev is off); goal <= %.2f at 1, 2, 8, 64, 512, 4096 tokens\n"
         "after each count: what AUTO picks there (mdr_all_reduce_choice; counted: for a device-read count),\n"
         "the best exact mdr path (mdr-graph, -dev, -1shot, -2shot) / floor, 1 op and K-batch, and mdr-dyn's xexact\n"
         "every path is validated before it is timed (sum of both ranks' patterns, exact; a guard row untouched;\n"
         "mdr-dyn: every row past the count untouched)\n",
         TP_K, TP_K, TP_K, TP_K, TP_K, TP_XEXACT_GOAL);
}

void tp_print_table_header(void) {
  printf("%-6s %6s %9s %-13s | %22s %8s %8s | %8s | %7s %7s | %7s %6s %7s %6s\n", "sweep", "rows", "bytes", "path",
         "GPU us med [p10-p90]", "p99", "max", "K-batch", "CPU r0", "CPU r1", "GB/s", "xfloor", "xfloorK", "xexact");
}

static bool tp_is_floor_path(tp_path p) { return p == TP_NCCL_GRAPH || p == TP_NCCL_WINDOW; }

static const tp_case *tp_pick(const tp_case *c, size_t n, tp_path p) {
  for (size_t i = 0; i < n; i++)
    if (c[i].measured && c[i].path == p) return &c[i];
  return NULL;
}

void tp_finish_count(tp_case *c, size_t n) {
  double floor = INFINITY, floor_k = INFINITY;
  const char *floor_path = NULL;
  for (size_t i = 0; i < n; i++) {
    if (!c[i].measured || !tp_is_floor_path(c[i].path)) continue;
    if (c[i].gpu.med < floor) floor = c[i].gpu.med, floor_path = k_tp_path_names[c[i].path];
    if (c[i].batch.med < floor_k) floor_k = c[i].batch.med;
  }
  for (size_t i = 0; i < n; i++) {
    c[i].floor_us = isfinite(floor) ? floor : NAN;
    c[i].floor_batch_us = isfinite(floor_k) ? floor_k : NAN;
    c[i].floor_path = floor_path;
    c[i].x_floor = c[i].gpu.med / c[i].floor_us;
    c[i].x_floor_batch = c[i].batch.med / c[i].floor_batch_us;
    c[i].gbps = (double)c[i].bytes / (nan_if_zero(c[i].gpu.med) * 1e3);
    c[i].x_exact = c[i].x_exact_batch = NAN;
    c[i].exact_path = NULL;
  }
  /* mdr-dyn against the EXACT graph of the same rows, same kind of step when measured */
  const tp_case *exact = tp_pick(c, n, TP_MDR_DEV);
  if (!exact) exact = tp_pick(c, n, TP_MDR);
  for (size_t i = 0; i < n && exact; i++) {
    if (c[i].path != TP_MDR_DYN || !c[i].measured) continue;
    c[i].x_exact = c[i].gpu.med / exact->gpu.med;
    c[i].x_exact_batch = c[i].batch.med / exact->batch.med;
    c[i].exact_path = k_tp_path_names[exact->path];
  }
}

/* The fastest exact mdr path (mdr-graph, -dev, -1shot, -2shot) among cs,
 * by GPU us (batch: K-batch); NULL when none was measured. */
const tp_case *tp_best_mdr(const tp_case *const *cs, size_t n, bool batch) {
  const tp_case *best = NULL;
  for (size_t i = 0; i < n; i++) {
    const tp_case *c = cs[i];
    if (!c || !c->measured || !tp_is_mdr_exact(c->path)) continue;
    const double v = batch ? c->batch.med : c->gpu.med;
    if (!isfinite(v)) continue;
    if (!best || v < (batch ? best->batch.med : best->gpu.med)) best = c;
  }
  return best;
}

static void tp_fmt_ratio(char *out, size_t n, double x) {
  if (isfinite(x)) snprintf(out, n, "%.2fx", x);
  else snprintf(out, n, "-");
}

/* "mdr-1shot", or for the AUTO paths "mdr-graph-dev: one-shot" (what AUTO ran). */
static void tp_fmt_mdr_path(char *out, size_t n, const tp_case *c) {
  if (c->path == TP_MDR || c->path == TP_MDR_DEV)
    snprintf(out, n, "%s: %s", k_tp_path_names[c->path], mdr_all_reduce_algo_name(c->auto_algo));
  else snprintf(out, n, "%s", k_tp_path_names[c->path]);
}

void tp_print_count_summary(const tp_case *c, size_t n) {
  if (!n) return;
  const tp_case *cs[TP_PATH_COUNT];
  size_t m = n < TP_PATH_COUNT ? n : TP_PATH_COUNT;
  for (size_t i = 0; i < m; i++) cs[i] = &c[i];
  const tp_case *b1 = tp_best_mdr(cs, m, false), *bk = tp_best_mdr(cs, m, true);
  char bytes[32], x1[16], xk[16];
  tp_fmt_bytes(bytes, sizeof bytes, c[0].bytes);
  printf("  -> %s %zu rows (%s): AUTO picks %s (counted: %s)", k_tp_sweep_names[c[0].sweep], c[0].rows, bytes,
         mdr_all_reduce_algo_name(c[0].auto_algo), mdr_all_reduce_algo_name(c[0].auto_counted));
  if (b1 || bk) {
    tp_fmt_ratio(x1, sizeof x1, b1 ? b1->x_floor : NAN);
    tp_fmt_ratio(xk, sizeof xk, bk ? bk->x_floor_batch : NAN);
    char n1[40] = "-", nk[40] = "-";
    if (b1) tp_fmt_mdr_path(n1, sizeof n1, b1);
    if (bk) tp_fmt_mdr_path(nk, sizeof nk, bk);
    printf("; best mdr / floor: 1 op %s %s, K-batch %s %s", n1, x1, nk, xk);
  }
  const tp_case *dyn = tp_pick(c, n, TP_MDR_DYN);
  if (dyn && dyn->exact_path) {
    tp_fmt_ratio(x1, sizeof x1, dyn->x_exact);
    tp_fmt_ratio(xk, sizeof xk, dyn->x_exact_batch);
    printf("; mdr-dyn / %s %s (K %s)", dyn->exact_path, x1, xk);
  }
  printf("\n");
}

void tp_print_case(const tp_case *c) {
  char bytes[32], gpu[48], p99[16], mx[16], bt[16], c0[16], c1[16], gbps[16], xf[16], xk[16], xe[16];
  tp_fmt_bytes(bytes, sizeof bytes, c->bytes);
  if (c->skipped) {
    printf("%-6s %6zu %9s %-13s | skipped: %s\n", k_tp_sweep_names[c->sweep], c->rows, bytes, k_tp_path_names[c->path],
           c->skip_reason);
    return;
  }
  if (isfinite(c->gpu.med)) snprintf(gpu, sizeof gpu, "%.2f [%.2f-%.2f]", c->gpu.med, c->gpu.p10, c->gpu.p90);
  else snprintf(gpu, sizeof gpu, "-");
  fmt_num(p99, sizeof p99, "%.2f", c->gpu.p99);
  fmt_num(mx, sizeof mx, "%.2f", c->gpu.max);
  fmt_num(bt, sizeof bt, "%.2f", c->batch.med);
  fmt_num(c0, sizeof c0, "%.2f", c->cpu[0].med);
  fmt_num(c1, sizeof c1, "%.2f", c->cpu[1].med);
  fmt_num(gbps, sizeof gbps, "%.1f", c->gbps);
  fmt_num(xf, sizeof xf, "%.2f", c->x_floor);
  fmt_num(xk, sizeof xk, "%.2f", c->x_floor_batch);
  if (c->path == TP_MDR_DYN) fmt_num(xe, sizeof xe, "%.2f", c->x_exact);
  else snprintf(xe, sizeof xe, "%s", "");
  printf("%-6s %6zu %9s %-13s | %22s %8s %8s | %8s | %7s %7s | %7s %6s %7s %6s%s\n", k_tp_sweep_names[c->sweep],
         c->rows, bytes, k_tp_path_names[c->path], gpu, p99, mx, bt, c0, c1, gbps, xf, xk, xe,
         c->eager_steps ? "  ** steps ran eagerly **" : "");
}

static const tp_case *tp_find_case(const tp_results *r, tp_sweep_kind s, size_t rows, tp_path p) {
  for (size_t i = 0; i < r->n_cases; i++) {
    const tp_case *c = &r->cases[i];
    if (c->measured && c->sweep == s && c->rows == rows && c->path == p) return c;
  }
  return NULL;
}

void tp_print_captures(const tp_results *r, tp_sweep_kind s) {
  printf("\ncapture costs, sweep %s: mdr_graph_stats.capture_us of mdr_graph_cache_prepare for one count (capture +\n"
         "instantiate + upload), a fresh cache: with the all-reduce in the body, per rank, against the same body\n"
         "without it on one GPU (rank 0's, a plain arena of the same sizes); nccl-graph: its 1-op graph, the same\n"
         "steps\n",
         k_tp_sweep_names[s]);
  printf("  %6s %9s | %10s %10s | %12s %9s | %12s %12s\n", "rows", "bytes", "with r0", "with r1", "one GPU, none",
         "extra", "nccl-graph r0", "nccl-graph r1");
  for (size_t i = 0; i < r->n_captures; i++) {
    const tp_capture *c = &r->captures[i];
    if (c->sweep != s) continue;
    const tp_case *g = tp_find_case(r, s, c->rows, TP_NCCL_GRAPH);
    char bytes[32], n0[16], n1[16];
    tp_fmt_bytes(bytes, sizeof bytes, c->bytes);
    fmt_num(n0, sizeof n0, "%.1f", g ? g->build_us[0] : NAN);
    fmt_num(n1, sizeof n1, "%.1f", g ? g->build_us[1] : NAN);
    printf("  %6zu %9s | %10.1f %10.1f | %12.1f %9.1f | %12s %12s\n", c->rows, bytes, c->tp_us[0], c->tp_us[1],
           c->single_us, fmax(c->tp_us[0], c->tp_us[1]) - c->single_us, n0, n1);
  }
  fflush(stdout);
}

/* ---- the headline ---- */

static int tp_cmp_size(const void *a, const void *b) {
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  return (x > y) - (x < y);
}

static size_t tp_headline_counts(const tp_sweep *w, size_t *out) {
  size_t sorted[TP_MAX_COUNTS];
  memcpy(sorted, w->rows, w->n * sizeof *sorted);
  qsort(sorted, w->n, sizeof *sorted, tp_cmp_size);
  if (w->n <= TP_HEADLINE_COUNTS) {
    memcpy(out, sorted, w->n * sizeof *out);
    return w->n;
  }
  for (size_t k = 0; k < TP_HEADLINE_COUNTS; k++) out[k] = sorted[k * (w->n - 1) / (TP_HEADLINE_COUNTS - 1)];
  return TP_HEADLINE_COUNTS;
}

typedef struct tp_ratio_stats {
  size_t n, near;
  double geomean, lo, hi;
} tp_ratio_stats;

static tp_ratio_stats tp_ratios(const tp_results *r, tp_path p, bool batch) {
  tp_ratio_stats s = {0, 0, NAN, INFINITY, -INFINITY};
  double log_sum = 0;
  for (size_t i = 0; i < r->n_cases; i++) {
    const tp_case *c = &r->cases[i];
    const double x = batch ? c->x_floor_batch : c->x_floor;
    if (!c->measured || c->path != p || !isfinite(x) || x <= 0) continue;
    s.n++;
    s.near += x <= TP_NEAR_FLOOR;
    log_sum += log(x);
    s.lo = fmin(s.lo, x);
    s.hi = fmax(s.hi, x);
  }
  if (s.n) s.geomean = exp(log_sum / (double)s.n);
  return s;
}

/* Median over the cases of path p of a per-case figure. */
static double tp_median_over(const tp_results *r, tp_path p, double (*fig)(const tp_case *)) {
  double *v = xmalloc((r->n_cases + 1) * sizeof *v);
  size_t n = 0;
  for (size_t i = 0; i < r->n_cases; i++)
    if (r->cases[i].measured && r->cases[i].path == p && isfinite(fig(&r->cases[i]))) v[n++] = fig(&r->cases[i]);
  double m = n ? percentile(v, n, 0.5) : NAN;
  free(v);
  return m;
}
static double tp_cpu0(const tp_case *c) { return c->cpu[0].med; }
static double tp_cpu1(const tp_case *c) { return c->cpu[1].med; }

static void tp_print_cpu_line(const tp_options *o, const tp_results *r) {
  static const char *const call[TP_PATH_COUNT] = {
      "ncclAllReduce",        "cudaGraphLaunch",
      "cudaGraphLaunch (window)", "mdr_graph_cache_step",
      "mdr_graph_cache_step_device", "mdr_graph_cache_step_device (one-shot)",
      "mdr_graph_cache_step_device (two-shot)", "mdr_graph_cache_step_device (DYNAMIC)"};
  printf("CPU us per call (median over the counts of each rank's median, r0 / r1):");
  const tp_path order[TP_PATH_COUNT] = {TP_MDR,        TP_MDR_DEV,    TP_MDR_1SHOT,   TP_MDR_2SHOT,
                                        TP_MDR_DYN,    TP_NCCL_GRAPH, TP_NCCL_WINDOW, TP_NCCL_EAGER};
  bool first = true;
  for (int k = 0; k < TP_PATH_COUNT; k++) {
    tp_path p = order[k];
    if (!o->path_on[p]) continue;
    printf("%s %s %.2f / %.2f", first ? "" : ";", call[p], tp_median_over(r, p, tp_cpu0), tp_median_over(r, p, tp_cpu1));
    first = false;
  }
  printf("\n");
}

static void tp_print_capture_line(const tp_results *r) {
  if (!r->n_captures) return;
  double *with = xmalloc(r->n_captures * sizeof *with), *without = xmalloc(r->n_captures * sizeof *without);
  for (size_t i = 0; i < r->n_captures; i++) {
    with[i] = fmax(r->captures[i].tp_us[0], r->captures[i].tp_us[1]);
    without[i] = r->captures[i].single_us;
  }
  double mw = percentile(with, r->n_captures, 0.5), mo = percentile(without, r->n_captures, 0.5);
  printf("capture (prepare of one count, capture + instantiate + upload): with the all-reduce, slower rank %.1f us "
         "(median over %zu counts) vs %.1f us on one GPU without it (%.2fx)\n",
         mw, r->n_captures, mo, mw / mo);
  free(with);
  free(without);
}

/* The sweep's row counts, ascending. */
size_t tp_sorted_rows(const tp_sweep *w, size_t *out) {
  memcpy(out, w->rows, w->n * sizeof *out);
  qsort(out, w->n, sizeof *out, tp_cmp_size);
  return w->n;
}

/* The cases of (s, rows), one per path, measured or skipped (NULL: path off). */
void tp_cases_of(const tp_results *r, tp_sweep_kind s, size_t rows, const tp_case **out) {
  for (int p = 0; p < TP_PATH_COUNT; p++) {
    out[p] = NULL;
    for (size_t i = 0; i < r->n_cases && !out[p]; i++) {
      const tp_case *c = &r->cases[i];
      if (c->sweep == s && c->rows == rows && c->path == (tp_path)p && (c->measured || c->skipped)) out[p] = c;
    }
  }
}


/* Any case of (s, rows), measured or skipped (bytes, AUTO's choice). */
const tp_case *tp_any_case(const tp_results *r, tp_sweep_kind s, size_t rows) {
  for (size_t i = 0; i < r->n_cases; i++)
    if (r->cases[i].sweep == s && r->cases[i].rows == rows) return &r->cases[i];
  return NULL;
}

/* mdr-dyn / the EXACT path, count by count, and the goal at TP_XEXACT_TOKENS (tokens sweep). */
static void tp_print_xexact(const tp_options *o, const tp_sweep *sw, const tp_results *r) {
  if (!o->path_on[TP_MDR_DYN]) return;
  static const size_t goal_tokens[] = TP_XEXACT_TOKENS;
  for (int s = 0; s < TP_SWEEP_COUNT; s++) {
    size_t rows[TP_MAX_COUNTS], n = tp_sorted_rows(&sw[s], rows);
    if (!n) continue;
    const char *exact = NULL;
    size_t goal_n = 0, met = 0, met_k = 0;
    char missed[256] = "";
    printf("mdr-dyn / exact, sweep %s (rows: 1 op, K-batch):", k_tp_sweep_names[s]);
    for (size_t i = 0; i < n; i++) {
      const tp_case *c = tp_find_case(r, (tp_sweep_kind)s, rows[i], TP_MDR_DYN);
      if (!c || !c->exact_path) continue;
      exact = c->exact_path;
      printf(" %zu %.2fx/%.2fx", rows[i], c->x_exact, c->x_exact_batch);
      bool in_goal = false;
      for (size_t k = 0; k < sizeof goal_tokens / sizeof *goal_tokens; k++) in_goal |= goal_tokens[k] == rows[i];
      if (s != TP_SWEEP_TOKENS || !in_goal) continue;
      goal_n++;
      met += c->x_exact <= TP_XEXACT_GOAL;
      met_k += c->x_exact_batch <= TP_XEXACT_GOAL;
      if (!(c->x_exact <= TP_XEXACT_GOAL) && strlen(missed) < sizeof missed - 32)
        snprintf(missed + strlen(missed), sizeof missed - strlen(missed), "%s%zu (%.2fx)", missed[0] ? ", " : "",
                 rows[i], c->x_exact);
    }
    if (!exact) {
      printf(" no exact path measured (mdr-graph-dev or mdr-graph is needed)\n");
      continue;
    }
    printf("; against %s\n", exact);
    if (s == TP_SWEEP_TOKENS && goal_n)
      printf("mdr-dyn goal (xexact <= %.2f at 1, 2, 8, 64, 512, 4096 tokens): met at %zu of %zu measured (1 op), %zu "
             "of %zu (K-batch)%s%s\n",
             TP_XEXACT_GOAL, met, goal_n, met_k, goal_n, met < goal_n ? "; not met (1 op) at " : "", missed);
  }
}

/* The smallest size of sweep w whose mdr-2shot K-batch beats mdr-1shot's,
 * among the sizes where both ran: *one, *two (NULL: none); *last: the
 * largest size where both ran (NULL: none). */
void tp_crossover(const tp_results *r, const tp_sweep *w, const tp_case **one, const tp_case **two,
                         const tp_case **last) {
  size_t rows[TP_MAX_COUNTS], n = tp_sorted_rows(w, rows);
  *one = *two = *last = NULL;
  for (size_t i = 0; i < n; i++) {
    const tp_case *a = tp_find_case(r, w->kind, rows[i], TP_MDR_1SHOT);
    const tp_case *b = tp_find_case(r, w->kind, rows[i], TP_MDR_2SHOT);
    if (!a || !b) continue;
    *last = a;
    if (!*two && b->batch.med < a->batch.med) *one = a, *two = b;
  }
}

/* Per sweep: the smallest size whose mdr-2shot K-batch beats mdr-1shot's
 * (sizes where both ran), and the sizes at which AUTO picks each algorithm. */
static void tp_print_crossover(const tp_options *o, const tp_sweep *sw, const tp_results *r) {
  for (int s = 0; s < TP_SWEEP_COUNT; s++) {
    size_t rows[TP_MAX_COUNTS], n = tp_sorted_rows(&sw[s], rows);
    if (!n) continue;
    printf("crossover, sweep %s: ", k_tp_sweep_names[s]);
    if (o->path_on[TP_MDR_1SHOT] && o->path_on[TP_MDR_2SHOT]) {
      const tp_case *hit1, *hit2, *last;
      tp_crossover(r, &sw[s], &hit1, &hit2, &last);
      char bytes[32];
      if (hit2) {
        tp_fmt_bytes(bytes, sizeof bytes, hit2->bytes);
        printf("mdr-2shot's K-batch first beats mdr-1shot's at %s (%.2f vs %.2f us)", bytes, hit2->batch.med,
               hit1->batch.med);
      } else if (last) {
        tp_fmt_bytes(bytes, sizeof bytes, last->bytes);
        printf("mdr-2shot's K-batch never beats mdr-1shot's up to %s (the largest size both ran)", bytes);
      } else {
        printf("mdr-1shot and mdr-2shot never both ran");
      }
    } else {
      printf("needs mdr-1shot and mdr-2shot");
    }
    /* AUTO's choice by size, as runs: "one-shot 2 KiB-512 KiB, two-shot 2 MiB-8 MiB" */
    printf("; AUTO picks");
    int prev = -1;
    size_t run_lo = 0, run_hi = 0;
    bool any = false;
    for (size_t i = 0; i <= n; i++) {
      const tp_case *c = i < n ? tp_any_case(r, (tp_sweep_kind)s, rows[i]) : NULL;
      if (i < n && !c) continue;
      const int a = c ? (int)c->auto_algo : -2;
      if (a != prev && prev >= 0) {
        char lo[32], hi[32];
        tp_fmt_bytes(lo, sizeof lo, run_lo);
        tp_fmt_bytes(hi, sizeof hi, run_hi);
        if (run_lo == run_hi) printf("%s %s at %s", any ? "," : "", mdr_all_reduce_algo_name((mdr_all_reduce_algo)prev), lo);
        else printf("%s %s %s-%s", any ? "," : "", mdr_all_reduce_algo_name((mdr_all_reduce_algo)prev), lo, hi);
        any = true;
      }
      if (!c) break;
      if (a != prev) run_lo = c->bytes;
      run_hi = c->bytes;
      prev = a;
    }
    printf("%s (mdr_all_reduce_choice)\n", any ? "" : " -");
  }
}

/* The closing table (the run's last lines), markdown: per size the K-batch
 * of the floor paths and of mdr's algorithms, and the best mdr / floor. */
static void tp_print_table(const tp_options *o, const tp_sweep *sw, const tp_results *r) {
  const bool dev = o->path_on[TP_MDR_DEV];
  printf("\n== table: K-batch GPU us per all-reduce (%d back to back in one graph / %d, median, slower rank); floor = "
         "the better K-batch of nccl-graph and nccl-window; mdr-auto = %s (AUTO); best mdr = the fastest of "
         "mdr-graph, mdr-graph-dev, mdr-1shot, mdr-2shot; 1 op: the same for one all-reduce\n",
         TP_K, TP_K, dev ? "mdr-graph-dev" : "mdr-graph");
  printf("| sweep | size | nccl-graph K | nccl-window K | mdr-1shot K | mdr-2shot K | mdr-auto K | best mdr / floor "
         "| best mdr / floor, 1 op |\n");
  printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |\n");
  for (int s = 0; s < TP_SWEEP_COUNT; s++) {
    size_t rows[TP_MAX_COUNTS], n = tp_sorted_rows(&sw[s], rows);
    for (size_t i = 0; i < n; i++) {
      const tp_case *cs[TP_PATH_COUNT];
      tp_cases_of(r, (tp_sweep_kind)s, rows[i], cs);
      const tp_case *any = tp_any_case(r, (tp_sweep_kind)s, rows[i]);
      if (!any) continue;
      char bytes[32], cell[5][24], best[64], best1[64], name[40];
      tp_fmt_bytes(bytes, sizeof bytes, any->bytes);
      const tp_path cols[5] = {TP_NCCL_GRAPH, TP_NCCL_WINDOW, TP_MDR_1SHOT, TP_MDR_2SHOT, dev ? TP_MDR_DEV : TP_MDR};
      for (int k = 0; k < 5; k++) {
        const tp_case *c = cs[cols[k]];
        if (c && c->skipped) snprintf(cell[k], sizeof cell[k], "skipped");
        else fmt_num(cell[k], sizeof cell[k], "%.2f", c && c->measured ? c->batch.med : NAN);
      }
      const tp_case *bk = tp_best_mdr(cs, TP_PATH_COUNT, true), *b1 = tp_best_mdr(cs, TP_PATH_COUNT, false);
      if (bk && isfinite(bk->x_floor_batch)) {
        tp_fmt_mdr_path(name, sizeof name, bk);
        snprintf(best, sizeof best, "%.2fx (%s)", bk->x_floor_batch, name);
      } else {
        snprintf(best, sizeof best, "-");
      }
      if (b1 && isfinite(b1->x_floor)) {
        tp_fmt_mdr_path(name, sizeof name, b1);
        snprintf(best1, sizeof best1, "%.2fx (%s)", b1->x_floor, name);
      } else {
        snprintf(best1, sizeof best1, "-");
      }
      printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", k_tp_sweep_names[s], bytes, cell[0], cell[1], cell[2],
             cell[3], cell[4], best, best1);
    }
  }
}

void tp_print_headline(const tp_options *o, const tp_run_info *info, const tp_sweep *sw, const tp_results *r) {
  printf("\n== headline: GPU us per all-reduce (one op between events, median; per rep the slower rank); floor = "
         "the better of nccl-graph and nccl-window, this run; in brackets path / floor; best mdr: the fastest exact "
         "mdr path / floor\n");
  printf("%-6s %9s  %-24s", "sweep", "bytes", "floor");
  const tp_path cols[] = {TP_MDR, TP_MDR_DEV, TP_MDR_1SHOT, TP_MDR_2SHOT, TP_MDR_DYN, TP_NCCL_EAGER};
  for (size_t k = 0; k < sizeof cols / sizeof *cols; k++)
    if (o->path_on[cols[k]]) printf("  %-16s", k_tp_path_names[cols[k]]);
  printf("  %s\n", "best mdr");
  for (int s = 0; s < TP_SWEEP_COUNT; s++) {
    size_t counts[TP_HEADLINE_COUNTS], n = tp_headline_counts(&sw[s], counts);
    for (size_t t = 0; t < n; t++) {
      const tp_case *any = NULL;
      for (int p = 0; p < TP_PATH_COUNT && !any; p++) any = tp_find_case(r, (tp_sweep_kind)s, counts[t], (tp_path)p);
      if (!any) continue;
      char bytes[32], floor[48];
      tp_fmt_bytes(bytes, sizeof bytes, any->bytes);
      if (isfinite(any->floor_us)) snprintf(floor, sizeof floor, "%.2f (%s)", any->floor_us, any->floor_path);
      else snprintf(floor, sizeof floor, "-");
      printf("%-6s %9s  %-24s", k_tp_sweep_names[s], bytes, floor);
      for (size_t k = 0; k < sizeof cols / sizeof *cols; k++) {
        if (!o->path_on[cols[k]]) continue;
        const tp_case *c = tp_find_case(r, (tp_sweep_kind)s, counts[t], cols[k]);
        char cell[48];
        if (!c) snprintf(cell, sizeof cell, "%s", tp_any_case(r, (tp_sweep_kind)s, counts[t]) ? "skipped" : "-");
        else if (isfinite(c->x_floor)) snprintf(cell, sizeof cell, "%.2f (%.2fx)", c->gpu.med, c->x_floor);
        else snprintf(cell, sizeof cell, "%.2f", c->gpu.med);
        printf("  %-16s", cell);
      }
      const tp_case *cs[TP_PATH_COUNT];
      tp_cases_of(r, (tp_sweep_kind)s, counts[t], cs);
      const tp_case *b = tp_best_mdr(cs, TP_PATH_COUNT, false);
      char name[40];
      if (b && isfinite(b->x_floor)) {
        tp_fmt_mdr_path(name, sizeof name, b);
        printf("  %s %.2fx\n", name, b->x_floor);
      } else {
        printf("  -\n");
      }
    }
  }
  size_t n_cases = 0, n_skipped = 0, n_counts = 0, n_paths = 0;
  for (size_t i = 0; i < r->n_cases; i++) n_cases += r->cases[i].measured, n_skipped += r->cases[i].skipped;
  for (int s = 0; s < TP_SWEEP_COUNT; s++) n_counts += sw[s].n;
  for (int p = 0; p < TP_PATH_COUNT; p++) n_paths += o->path_on[p];
  const tp_sweep *w0 = &sw[sw[TP_SWEEP_SIZES].n ? TP_SWEEP_SIZES : TP_SWEEP_TOKENS]; /* windows: the first sweep's */
  printf("measured: %zu cases (%zu counts x %zu paths, %zu skipped), %zu reps each, K %d, on 2 x %s, NCCL %d.%d.%d, "
         "NVLS off, %.0f s; windows: mdr arena %s/%s, nccl-window %s; mdr's all-reduce kernels: %s\n",
         n_cases, n_counts, n_paths, n_skipped, o->reps, TP_K, info->gpu_name[0], info->nccl_version / 10000,
         info->nccl_version / 100 % 100, info->nccl_version % 100, info->wall_s, mdr_window_name(w0->mdr_window[0]),
         mdr_window_name(w0->mdr_window[1]), w0->nccl_window[0] && w0->nccl_window[1] ? "symmetric" : "none",
         w0->ar_kernels ? "yes" : w0->ar_kernels_note[0] ? w0->ar_kernels_note : "no");
  tp_print_cpu_line(o, r);
  bool any_mdr = false;
  for (int p = 0; p < TP_PATH_COUNT; p++) any_mdr |= o->path_on[p] && tp_is_mdr((tp_path)p);
  if (any_mdr) tp_print_capture_line(r);
  const tp_path order[] = {TP_NCCL_EAGER, TP_MDR_DYN, TP_MDR_2SHOT, TP_MDR_1SHOT, TP_MDR_DEV, TP_MDR};
  for (size_t k = 0; k < sizeof order / sizeof *order; k++) {
    const tp_path p = order[k];
    if (!o->path_on[p]) continue;
    tp_ratio_stats single = tp_ratios(r, p, false), batch = tp_ratios(r, p, true);
    if (!single.n) {
      printf("%s vs floor: no figure (nccl-graph or nccl-window must be measured too, and %s must run)\n",
             k_tp_path_names[p], k_tp_path_names[p]);
      continue;
    }
    printf("%s vs floor: %.2fx (geometric mean over %zu cases, %.2fx-%.2fx), within %.0f%% of the floor in %zu of "
           "%zu; K-batch %.2fx (%.2fx-%.2fx)\n",
           k_tp_path_names[p], single.geomean, single.n, single.lo, single.hi, (TP_NEAR_FLOOR - 1) * 100, single.near,
           single.n, batch.geomean, batch.lo, batch.hi);
  }
  tp_print_xexact(o, sw, r);
  tp_print_crossover(o, sw, r);
  tp_print_table(o, sw, r); /* the run's last lines */
}

