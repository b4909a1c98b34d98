/* mdr_bench_tp_report.c — what mdr-bench-tp prints and writes: the output
 * folder, the legend, each count's rows with the floor measured in the same
 * run and the count's summary (what AUTO picks, the best mdr path / floor,
 * mdr-dyn / exact), the capture costs, the headline (ratios, mdr-dyn
 * against its goal, the one-shot / two-shot crossover, and last the
 * closing table), results.json, results.csv and capture.csv; the soak's
 * lines and soak.json. bench/README.md (section mdr-bench-tp) documents
 * every column and field. */
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

#define TP_SCHEMA_VERSION 2 /* 2: the paths mdr-1shot, mdr-2shot, mdr-dyn; skipped cases; AUTO's choice; x_exact; counts; crossover */
#define TP_OUT_BASE "bench-out"
#define TP_OUT_PREFIX "tp-"            /* bench-out/tp-<stamp>/, next to mdr-bench's runs */
#define TP_LATEST_LINK "tp-latest"     /* bench-out/tp-latest -> the newest mdr-bench-tp run */
#define TP_MAX_SAME_SECOND_RUNS 100
#define TP_NEAR_FLOOR 1.10             /* "near the floor": within 10 % */
enum { TP_HEADLINE_COUNTS = 4 };

static const char *const k_out_files[] = {"results.json", "results.csv", "capture.csv", "soak.json"};

/* ---- the output folder ---- */

void tp_check_out_dir(const tp_options *o) {
  if (!o->out_dir || o->force) return;
  for (size_t i = 0; i < sizeof k_out_files / sizeof *k_out_files; i++) {
    char path[4096 + 64];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", o->out_dir, k_out_files[i]);
    if (stat(path, &st) == 0)
      tp_exit(TP_EXIT_USAGE,
              "refusing to overwrite %s (an earlier run's): pass --force to overwrite it, or leave --out out for "
              "a fresh %s/%s<timestamp>/",
              path, TP_OUT_BASE, TP_OUT_PREFIX);
  }
}

void tp_make_out_dir(const tp_options *o, tp_run_info *info, const char *stamp) {
  if (o->out_dir) {
    if (snprintf(info->out_dir, sizeof info->out_dir, "%s", o->out_dir) >= (int)sizeof info->out_dir)
      tp_exit(TP_EXIT_USAGE, "--out path too long");
    mkdir_p(info->out_dir);
    return;
  }
  mkdir_p(TP_OUT_BASE);
  for (int k = 1;; k++) {
    if (k > TP_MAX_SAME_SECOND_RUNS) tp_die("%s: too many runs named %s%s*", TP_OUT_BASE, TP_OUT_PREFIX, stamp);
    if (k == 1) snprintf(info->out_dir, sizeof info->out_dir, "%s/%s%s", TP_OUT_BASE, TP_OUT_PREFIX, stamp);
    else snprintf(info->out_dir, sizeof info->out_dir, "%s/%s%s-%d", TP_OUT_BASE, TP_OUT_PREFIX, stamp, k);
    if (mkdir(info->out_dir, 0755) == 0) break;
    if (errno != EEXIST) tp_die("mkdir %s: %s", info->out_dir, strerror(errno));
  }
  const char *leaf = info->out_dir + strlen(TP_OUT_BASE) + 1;
  const char *link = TP_OUT_BASE "/" TP_LATEST_LINK;
  struct stat st;
  if (lstat(link, &st) == 0 && !S_ISLNK(st.st_mode))
    fprintf(stderr, "note: %s exists and is not a link: left as it is\n", link);
  else if ((unlink(link) != 0 && errno != ENOENT) || symlink(leaf, link) != 0)
    fprintf(stderr, "note: could not point %s at %s: %s\n", link, leaf, strerror(errno));
}

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
         "              mdr-graph      mdr_comm_all_reduce_rows (AUTO) in a graph cache body (EXACT, fused), the\n"
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
static const tp_case *tp_best_mdr(const tp_case *const *cs, size_t n, bool batch) {
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
static size_t tp_sorted_rows(const tp_sweep *w, size_t *out) {
  memcpy(out, w->rows, w->n * sizeof *out);
  qsort(out, w->n, sizeof *out, tp_cmp_size);
  return w->n;
}

/* The cases of (s, rows), one per path, measured or skipped (NULL: path off). */
static void tp_cases_of(const tp_results *r, tp_sweep_kind s, size_t rows, const tp_case **out) {
  for (int p = 0; p < TP_PATH_COUNT; p++) {
    out[p] = NULL;
    for (size_t i = 0; i < r->n_cases && !out[p]; i++) {
      const tp_case *c = &r->cases[i];
      if (c->sweep == s && c->rows == rows && c->path == (tp_path)p && (c->measured || c->skipped)) out[p] = c;
    }
  }
}


/* Any case of (s, rows), measured or skipped (bytes, AUTO's choice). */
static const tp_case *tp_any_case(const tp_results *r, tp_sweep_kind s, size_t rows) {
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
static void tp_crossover(const tp_results *r, const tp_sweep *w, const tp_case **one, const tp_case **two,
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

/* ---- files ---- */

/* fopen for writing; a failure ends the run with tp_die (never exit(): a
 * rank thread may call this while the other waits inside NCCL). */
static FILE *tp_open_out(const char *dir, const char *name) {
  char path[4096 + 64];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f) tp_die("cannot write %s: %s", path, strerror(errno));
  return f;
}

static void tp_json_summary(FILE *f, const char *key, const summary *s) {
  const struct { const char *k; double v; } v[] = {
      {"med", s->med}, {"p10", s->p10}, {"p90", s->p90}, {"p99", s->p99}, {"max", s->max}};
  for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
    fprintf(f, ", \"%s_%s\": ", key, v[i].k);
    json_num(f, v[i].v);
  }
}

static void tp_write_json(const tp_options *o, const tp_run_info *info, const tp_sweep *sw, const tp_results *r) {
  FILE *f = tp_open_out(info->out_dir, "results.json");
  struct utsname u;
  bool have_uname = uname(&u) == 0;
  fprintf(f, "{\n  \"schema_version\": %d,\n  \"tool\": \"mdr-bench-tp\",\n  \"complete\": %s,\n  \"timestamp\": ",
          TP_SCHEMA_VERSION, info->complete ? "true" : "false");
  json_str(f, info->timestamp);
  fprintf(f, ",\n  \"git_revision\": ");
  json_str(f, bench_git_revision());
  fprintf(f, ",\n  \"build_type\": ");
  json_str(f, bench_build_type());
  fprintf(f, ",\n  \"mdr_version\": %u,\n  \"command\": [", mdr_version_number());
  for (int i = 0; i < o->argc; i++) fprintf(f, "%s", i ? ", " : ""), json_str(f, o->argv[i]);
  fprintf(f, "],\n  \"machine\": {\"host\": ");
  json_str(f, have_uname ? u.nodename : "");
  fprintf(f, ", \"gpus\": [");
  for (int d = 0; d < TP_RANKS; d++) {
    fprintf(f, "%s{\"device\": %d, \"name\": ", d ? ", " : "", d);
    json_str(f, info->gpu_name[d]);
    fprintf(f, ", \"cc\": \"%d.%d\", \"peer_access\": %s}", info->cc_major[d], info->cc_minor[d],
            info->p2p[d] ? "true" : "false");
  }
  fprintf(f, "], \"driver_version\": %d, \"runtime_version\": %d, \"nccl_version\": %d, \"nccl_nvls_enable\": ",
          info->driver, info->runtime, info->nccl_version);
  json_str(f, getenv("NCCL_NVLS_ENABLE") ? getenv("NCCL_NVLS_ENABLE") : "");
  fprintf(f, "},\n  \"reps\": %zu, \"k\": %d, \"warmup\": %d, \"wall_s\": %.1f, \"preset\": \"%s\", \"hidden\": %zu,\n",
          o->reps, TP_K, TP_WARMUP, info->wall_s, TP_PRESET, info->hidden);
  fprintf(f, "  \"method\": {\"gpu_us\": \"one op between events, blocker on both ranks released together, per rep "
             "the slower rank\", \"batch_us\": \"K ops back to back, same method, divided by K\", \"cpu_us\": \"host "
             "time of the submitting call per rank\", \"floor\": \"min of nccl-graph and nccl-window gpu_us_med\", "
             "\"x_exact\": \"mdr-dyn gpu_us_med / exact_path's (mdr-graph-dev, else mdr-graph), same rows\", "
             "\"best\": \"the fastest of mdr-graph, mdr-graph-dev, mdr-1shot, mdr-2shot\"},\n");
  fprintf(f, "  \"sweeps\": [");
  bool first = true;
  for (int s = 0; s < TP_SWEEP_COUNT; s++) {
    const tp_sweep *w = &sw[s];
    if (!w->n) continue;
    fprintf(f, "%s\n    {\"sweep\": \"%s\", \"row_bytes\": %zu, \"rows_max\": %zu, \"rows\": [", first ? "" : ",",
            k_tp_sweep_names[s], w->row_bytes, w->m);
    first = false;
    for (size_t i = 0; i < w->n; i++) fprintf(f, "%s%zu", i ? ", " : "", w->rows[i]);
    fprintf(f, "], \"mdr_buffer\": \"%s\", \"mdr_buffer_offset\": %zu, \"mdr_window\": [\"%s\", \"%s\"], "
               "\"nccl_window\": [%s, %s], \"mdr_ar_kernels\": %s, \"mdr_ar_kernels_note\": ",
            mdr_buffer_name(TP_BUFFER), w->mdr_buffer_offset, mdr_window_name(w->mdr_window[0]),
            mdr_window_name(w->mdr_window[1]), w->nccl_window[0] ? "true" : "false", w->nccl_window[1] ? "true" : "false",
            w->ar_kernels ? "true" : "false");
    json_str(f, w->ar_kernels_note);
    fprintf(f, "}");
  }
  fprintf(f, "\n  ],\n  \"cases\": [");
  for (size_t i = 0; i < r->n_cases; i++) {
    const tp_case *c = &r->cases[i];
    fprintf(f, "%s\n    {\"sweep\": \"%s\", \"rows\": %zu, \"bytes\": %zu, \"path\": \"%s\", \"measured\": %s, "
               "\"skipped\": %s, \"skip_reason\": ",
            i ? "," : "", k_tp_sweep_names[c->sweep], c->rows, c->bytes, k_tp_path_names[c->path],
            c->measured ? "true" : "false", c->skipped ? "true" : "false");
    if (c->skipped) json_str(f, c->skip_reason);
    else fprintf(f, "null");
    fprintf(f, ", \"auto_algo\": \"%s\", \"auto_algo_counted\": \"%s\"", mdr_all_reduce_algo_name(c->auto_algo),
            mdr_all_reduce_algo_name(c->auto_counted));
    tp_json_summary(f, "gpu_us", &c->gpu);
    fprintf(f, ", \"gpu_us_rank0_med\": ");
    json_num(f, c->gpu_rank_med[0]);
    fprintf(f, ", \"gpu_us_rank1_med\": ");
    json_num(f, c->gpu_rank_med[1]);
    tp_json_summary(f, "batch_us", &c->batch);
    tp_json_summary(f, "cpu_us_rank0", &c->cpu[0]);
    tp_json_summary(f, "cpu_us_rank1", &c->cpu[1]);
    const struct { const char *k; double v; } v[] = {
        {"build_us_rank0", c->build_us[0]}, {"build_us_rank1", c->build_us[1]}, {"floor_us", c->floor_us},
        {"x_floor", c->x_floor},            {"floor_batch_us", c->floor_batch_us},
        {"x_floor_batch", c->x_floor_batch}, {"gbps", c->gbps}, {"x_exact", c->x_exact},
        {"x_exact_batch", c->x_exact_batch}};
    for (size_t k = 0; k < sizeof v / sizeof *v; k++) {
      fprintf(f, ", \"%s\": ", v[k].k);
      json_num(f, v[k].v);
    }
    fprintf(f, ", \"floor_path\": ");
    if (c->floor_path) json_str(f, c->floor_path);
    else fprintf(f, "null");
    fprintf(f, ", \"exact_path\": ");
    if (c->exact_path) json_str(f, c->exact_path);
    else fprintf(f, "null");
    fprintf(f, ", \"eager_steps\": %llu}", (unsigned long long)c->eager_steps);
  }
  /* per (sweep, rows): AUTO's choice and the best exact mdr path against the floor */
  fprintf(f, "\n  ],\n  \"counts\": [");
  bool first_count = true;
  for (int s = 0; s < TP_SWEEP_COUNT; s++) {
    size_t rows[TP_MAX_COUNTS], n = tp_sorted_rows(&sw[s], rows);
    for (size_t i = 0; i < n; i++) {
      const tp_case *any = tp_any_case(r, (tp_sweep_kind)s, rows[i]), *cs[TP_PATH_COUNT];
      if (!any) continue;
      tp_cases_of(r, (tp_sweep_kind)s, rows[i], cs);
      const tp_case *b1 = tp_best_mdr(cs, TP_PATH_COUNT, false), *bk = tp_best_mdr(cs, TP_PATH_COUNT, true);
      fprintf(f, "%s\n    {\"sweep\": \"%s\", \"rows\": %zu, \"bytes\": %zu, \"auto_algo\": \"%s\", "
                 "\"auto_algo_counted\": \"%s\", \"floor_us\": ",
              first_count ? "" : ",", k_tp_sweep_names[s], rows[i], any->bytes, mdr_all_reduce_algo_name(any->auto_algo),
              mdr_all_reduce_algo_name(any->auto_counted));
      first_count = false;
      json_num(f, any->floor_us);
      fprintf(f, ", \"floor_batch_us\": ");
      json_num(f, any->floor_batch_us);
      fprintf(f, ", \"best_path\": ");
      if (b1) json_str(f, k_tp_path_names[b1->path]);
      else fprintf(f, "null");
      fprintf(f, ", \"best_x_floor\": ");
      json_num(f, b1 ? b1->x_floor : NAN);
      fprintf(f, ", \"best_batch_path\": ");
      if (bk) json_str(f, k_tp_path_names[bk->path]);
      else fprintf(f, "null");
      fprintf(f, ", \"best_x_floor_batch\": ");
      json_num(f, bk ? bk->x_floor_batch : NAN);
      fprintf(f, "}");
    }
  }
  /* the one-shot / two-shot crossover of each sweep (K-batch) */
  fprintf(f, "\n  ],\n  \"crossover\": [");
  bool first_x = true;
  for (int s = 0; s < TP_SWEEP_COUNT; s++) {
    if (!sw[s].n) continue;
    const tp_case *one, *two, *last;
    tp_crossover(r, &sw[s], &one, &two, &last);
    fprintf(f, "%s\n    {\"sweep\": \"%s\", \"two_shot_beats_one_shot_from_bytes\": ", first_x ? "" : ",",
            k_tp_sweep_names[s]);
    first_x = false;
    if (two) fprintf(f, "%zu", two->bytes);
    else fprintf(f, "null");
    fprintf(f, ", \"one_shot_batch_us\": ");
    json_num(f, one ? one->batch.med : NAN);
    fprintf(f, ", \"two_shot_batch_us\": ");
    json_num(f, two ? two->batch.med : NAN);
    fprintf(f, ", \"largest_bytes_both_ran\": ");
    if (last) fprintf(f, "%zu}", last->bytes);
    else fprintf(f, "null}");
  }
  fprintf(f, "\n  ],\n  \"capture\": [");
  for (size_t i = 0; i < r->n_captures; i++) {
    const tp_capture *c = &r->captures[i];
    fprintf(f, "%s\n    {\"sweep\": \"%s\", \"rows\": %zu, \"bytes\": %zu, \"mdr_tp_us_rank0\": ", i ? "," : "",
            k_tp_sweep_names[c->sweep], c->rows, c->bytes);
    json_num(f, c->tp_us[0]);
    fprintf(f, ", \"mdr_tp_us_rank1\": ");
    json_num(f, c->tp_us[1]);
    fprintf(f, ", \"mdr_one_gpu_no_collective_us\": ");
    json_num(f, c->single_us);
    fprintf(f, "}");
  }
  fprintf(f, "\n  ]\n}\n");
  if (fclose(f) != 0) tp_die("writing %s/results.json failed", info->out_dir);
}

static void tp_write_csv(const tp_run_info *info, const tp_results *r) {
  FILE *f = tp_open_out(info->out_dir, "results.csv");
  fprintf(f, "sweep,rows,bytes,path,measured,gpu_us_med,gpu_us_p10,gpu_us_p90,gpu_us_p99,gpu_us_max,"
             "gpu_us_rank0_med,gpu_us_rank1_med,batch_us_med,batch_us_p10,batch_us_p90,cpu_us_rank0_med,"
             "cpu_us_rank0_p99,cpu_us_rank1_med,cpu_us_rank1_p99,build_us_rank0,build_us_rank1,floor_us,x_floor,"
             "floor_batch_us,x_floor_batch,gbps,floor_path,eager_steps,skipped,skip_reason,auto_algo,"
             "auto_algo_counted,x_exact,x_exact_batch,exact_path\n");
  for (size_t i = 0; i < r->n_cases; i++) {
    const tp_case *c = &r->cases[i];
    fprintf(f, "%s,%zu,%zu,%s,%d", k_tp_sweep_names[c->sweep], c->rows, c->bytes, k_tp_path_names[c->path],
            c->measured);
    const double v[] = {c->gpu.med,         c->gpu.p10,         c->gpu.p90,       c->gpu.p99,
                        c->gpu.max,         c->gpu_rank_med[0], c->gpu_rank_med[1], c->batch.med,
                        c->batch.p10,       c->batch.p90,       c->cpu[0].med,    c->cpu[0].p99,
                        c->cpu[1].med,      c->cpu[1].p99,      c->build_us[0],   c->build_us[1],
                        c->floor_us,        c->x_floor,         c->floor_batch_us, c->x_floor_batch,
                        c->gbps};
    for (size_t k = 0; k < sizeof v / sizeof *v; k++) fputc(',', f), csv_num(f, v[k]);
    fprintf(f, ",%s,%llu,%d,\"%s\",%s,%s", c->floor_path ? c->floor_path : "", (unsigned long long)c->eager_steps,
            c->skipped, c->skip_reason, mdr_all_reduce_algo_name(c->auto_algo), mdr_all_reduce_algo_name(c->auto_counted));
    fputc(',', f), csv_num(f, c->x_exact);
    fputc(',', f), csv_num(f, c->x_exact_batch);
    fprintf(f, ",%s\n", c->exact_path ? c->exact_path : "");
  }
  if (fclose(f) != 0) tp_die("writing %s/results.csv failed", info->out_dir);
  f = tp_open_out(info->out_dir, "capture.csv");
  fprintf(f, "sweep,rows,bytes,mdr_tp_us_rank0,mdr_tp_us_rank1,mdr_one_gpu_no_collective_us\n");
  for (size_t i = 0; i < r->n_captures; i++) {
    const tp_capture *c = &r->captures[i];
    fprintf(f, "%s,%zu,%zu", k_tp_sweep_names[c->sweep], c->rows, c->bytes);
    const double v[] = {c->tp_us[0], c->tp_us[1], c->single_us};
    for (size_t k = 0; k < sizeof v / sizeof *v; k++) fputc(',', f), csv_num(f, v[k]);
    fputc('\n', f);
  }
  if (fclose(f) != 0) tp_die("writing %s/capture.csv failed", info->out_dir);
}

void tp_write_results(const tp_options *o, const tp_run_info *info, const tp_sweep *sw, const tp_results *r) {
  tp_write_json(o, info, sw, r);
  tp_write_csv(info, r);
}

/* ---- the soak ---- */

void tp_print_soak(const tp_soak_result *s) {
  const uint32_t adv0 = s->epoch_end[0] - s->epoch_start, adv1 = s->epoch_end[1] - s->epoch_start;
  printf("\n== soak: %zu replays of one EXACT graph holding one mdr all-reduce of %zu B (%zu rows), algorithm %s%s%s\n",
         s->replays, s->bytes, s->rows, mdr_all_reduce_algo_name(s->algo), s->algo == MDR_ALL_REDUCE_AUTO ? " -> " : "",
         s->algo == MDR_ALL_REDUCE_AUTO ? mdr_all_reduce_algo_name(s->resolved) : "");
  printf("epoch: start 0x%08x, end 0x%08x / 0x%08x (rank 0 / 1): advanced by %u / %u for %llu calls (mod 2^32): %s; "
         "wrapped: %s\n",
         s->epoch_start, s->epoch_end[0], s->epoch_end[1], adv0, adv1, (unsigned long long)s->calls,
         adv0 == (uint32_t)s->calls && adv1 == (uint32_t)s->calls ? "exact" : "WRONG", s->wrapped ? "yes" : "NO");
  printf("checks: every replay on the device (every element against both ranks' sum), %llu host checks (drain, every "
         "element read back, both epochs); epoch mismatches %llu; %.2f us per replay (fill + all-reduce + check), "
         "%.1f s\n",
         (unsigned long long)s->checks, (unsigned long long)s->epoch_mismatches, s->us_per_replay, s->wall_s);
  printf("soak %s: wrong values %llu (device %llu, host %llu)\n", s->ok ? "passed" : "FAILED",
         (unsigned long long)s->wrong, (unsigned long long)s->wrong_device, (unsigned long long)s->wrong_host);
}

void tp_write_soak(const tp_options *o, const tp_run_info *info, const tp_soak_result *s) {
  FILE *f = tp_open_out(info->out_dir, "soak.json");
  fprintf(f, "{\n  \"schema_version\": %d,\n  \"tool\": \"mdr-bench-tp\",\n  \"mode\": \"soak\",\n  \"timestamp\": ",
          TP_SCHEMA_VERSION);
  json_str(f, info->timestamp);
  fprintf(f, ",\n  \"git_revision\": ");
  json_str(f, bench_git_revision());
  fprintf(f, ",\n  \"build_type\": ");
  json_str(f, bench_build_type());
  fprintf(f, ",\n  \"command\": [");
  for (int i = 0; i < o->argc; i++) fprintf(f, "%s", i ? ", " : ""), json_str(f, o->argv[i]);
  fprintf(f, "],\n  \"gpus\": [");
  json_str(f, info->gpu_name[0]);
  fprintf(f, ", ");
  json_str(f, info->gpu_name[1]);
  fprintf(f, "], \"nccl_version\": %d, \"nccl_nvls_enable\": ", info->nccl_version);
  json_str(f, getenv("NCCL_NVLS_ENABLE") ? getenv("NCCL_NVLS_ENABLE") : "");
  fprintf(f, ",\n  \"replays\": %zu, \"bytes\": %zu, \"rows\": %zu, \"algo\": \"%s\", \"resolved_algo\": \"%s\",\n",
          s->replays, s->bytes, s->rows, mdr_all_reduce_algo_name(s->algo), mdr_all_reduce_algo_name(s->resolved));
  fprintf(f, "  \"epoch_start\": %u, \"epoch_end\": [%u, %u], \"calls\": %llu, \"wrapped\": %s,\n", s->epoch_start,
          s->epoch_end[0], s->epoch_end[1], (unsigned long long)s->calls, s->wrapped ? "true" : "false");
  fprintf(f, "  \"checks\": %llu, \"wrong\": %llu, \"wrong_device\": %llu, \"wrong_host\": %llu, "
             "\"epoch_mismatches\": %llu,\n",
          (unsigned long long)s->checks, (unsigned long long)s->wrong, (unsigned long long)s->wrong_device,
          (unsigned long long)s->wrong_host, (unsigned long long)s->epoch_mismatches);
  fprintf(f, "  \"us_per_replay\": ");
  json_num(f, s->us_per_replay);
  fprintf(f, ", \"wall_s\": ");
  json_num(f, s->wall_s);
  fprintf(f, ", \"ok\": %s\n}\n", s->ok ? "true" : "false");
  if (fclose(f) != 0) tp_die("writing %s/soak.json failed", info->out_dir);
}
