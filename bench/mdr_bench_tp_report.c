/* mdr_bench_tp_report.c — what mdr-bench-tp prints and writes: the output
 * folder, the legend, each count's rows with the floor measured in the same
 * run, the capture costs, the headline, results.json, results.csv and
 * capture.csv. bench/README.md (section mdr-bench-tp) documents every
 * column and field. */
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

#define TP_SCHEMA_VERSION 1
#define TP_OUT_BASE "bench-out"
#define TP_OUT_PREFIX "tp-"            /* bench-out/tp-<stamp>/, next to mdr-bench's runs */
#define TP_LATEST_LINK "tp-latest"     /* bench-out/tp-latest -> the newest mdr-bench-tp run */
#define TP_MAX_SAME_SECOND_RUNS 100
#define TP_NEAR_FLOOR 1.10             /* "near the floor": within 10 % */
enum { TP_HEADLINE_COUNTS = 4 };

static const char *const k_out_files[] = {"results.json", "results.csv", "capture.csv"};

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
         "              mdr-graph      mdr_comm_all_reduce_rows in a graph cache body (EXACT, fused), the arena\n"
         "                             on the communicator (its slab one symmetric window); mdr_graph_cache_step\n"
         "                             per op: the graph is the id-upload node (it reads the staged ids from\n"
         "                             pinned host memory) + the all-reduce\n"
         "              mdr-graph-dev  the same caches, mdr_graph_cache_step_device, the ids already in\n"
         "                             token_ids: the graph reads nothing from host memory\n"
         "  GPU us      one op between two events; both ranks' streams held by a blocker kernel until both have\n"
         "              enqueued, then released together; per rep the slower rank; median [p10-p90], p99, max\n"
         "  K-batch     GPU us per all-reduce of %d back to back (one graph of %d, %d eager calls, one mdr step\n"
         "              whose body holds %d), same method, / %d; median\n"
         "  CPU r0/r1   host us of the submitting call on each rank's thread (ncclAllReduce, cudaGraphLaunch,\n"
         "              mdr_graph_cache_step[_device]), median; both ranks at once\n"
         "  GB/s        bytes / GPU us (algorithm bandwidth; the bus bandwidth of 2 ranks is the same)\n"
         "  xfloor      GPU us / floor; floor = the better GPU us of nccl-graph and nccl-window at that size, this run\n"
         "  xfloorK     the same for the K-batch figure\n"
         "every path is validated before it is timed (sum of both ranks' patterns, exact; a guard row untouched)\n",
         TP_K, TP_K, TP_K, TP_K, TP_K);
}

void tp_print_table_header(void) {
  printf("%-6s %6s %9s %-13s | %22s %8s %8s | %8s | %7s %7s | %7s %6s %7s\n", "sweep", "rows", "bytes", "path",
         "GPU us med [p10-p90]", "p99", "max", "K-batch", "CPU r0", "CPU r1", "GB/s", "xfloor", "xfloorK");
}

static bool tp_is_floor_path(tp_path p) { return p == TP_NCCL_GRAPH || p == TP_NCCL_WINDOW; }

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
  }
}

void tp_print_case(const tp_case *c) {
  char bytes[32], gpu[48], p99[16], mx[16], bt[16], c0[16], c1[16], gbps[16], xf[16], xk[16];
  tp_fmt_bytes(bytes, sizeof bytes, c->bytes);
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
  printf("%-6s %6zu %9s %-13s | %22s %8s %8s | %8s | %7s %7s | %7s %6s %7s%s\n", k_tp_sweep_names[c->sweep], c->rows,
         bytes, k_tp_path_names[c->path], gpu, p99, mx, bt, c0, c1, gbps, xf, xk,
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
  static const char *const call[TP_PATH_COUNT] = {"ncclAllReduce", "cudaGraphLaunch", "cudaGraphLaunch (window)",
                                                  "mdr_graph_cache_step", "mdr_graph_cache_step_device"};
  printf("CPU us per call (median over the counts of each rank's median, r0 / r1):");
  const tp_path order[TP_PATH_COUNT] = {TP_MDR, TP_MDR_DEV, TP_NCCL_GRAPH, TP_NCCL_WINDOW, TP_NCCL_EAGER};
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

void tp_print_headline(const tp_options *o, const tp_run_info *info, const tp_sweep *sw, const tp_results *r) {
  printf("\n== headline: GPU us per all-reduce (one op between events, median; per rep the slower rank); floor = "
         "the better of nccl-graph and nccl-window, this run; in brackets path / floor\n");
  printf("%-6s %9s  %-24s", "sweep", "bytes", "floor");
  const tp_path cols[] = {TP_MDR, TP_MDR_DEV, TP_NCCL_EAGER};
  for (size_t k = 0; k < sizeof cols / sizeof *cols; k++)
    if (o->path_on[cols[k]]) printf("  %-18s", k_tp_path_names[cols[k]]);
  printf("\n");
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
        if (!c) snprintf(cell, sizeof cell, "-");
        else if (isfinite(c->x_floor)) snprintf(cell, sizeof cell, "%.2f (%.2fx)", c->gpu.med, c->x_floor);
        else snprintf(cell, sizeof cell, "%.2f", c->gpu.med);
        printf("  %-18s", cell);
      }
      printf("\n");
    }
  }
  size_t n_cases = 0, n_counts = 0, n_paths = 0;
  for (size_t i = 0; i < r->n_cases; i++) n_cases += r->cases[i].measured;
  for (int s = 0; s < TP_SWEEP_COUNT; s++) n_counts += sw[s].n;
  for (int p = 0; p < TP_PATH_COUNT; p++) n_paths += o->path_on[p];
  const tp_sweep *w0 = &sw[sw[TP_SWEEP_SIZES].n ? TP_SWEEP_SIZES : TP_SWEEP_TOKENS]; /* windows: the first sweep's */
  printf("measured: %zu cases (%zu counts x %zu paths), %zu reps each, K %d, on 2 x %s, NCCL %d.%d.%d, NVLS off, "
         "%.0f s; windows: mdr arena %s/%s, nccl-window %s\n",
         n_cases, n_counts, n_paths, o->reps, TP_K, info->gpu_name[0], info->nccl_version / 10000,
         info->nccl_version / 100 % 100, info->nccl_version % 100, info->wall_s, mdr_window_name(w0->mdr_window[0]),
         mdr_window_name(w0->mdr_window[1]), w0->nccl_window[0] && w0->nccl_window[1] ? "symmetric" : "none");
  tp_print_cpu_line(o, r);
  if (o->path_on[TP_MDR] || o->path_on[TP_MDR_DEV]) tp_print_capture_line(r);
  const tp_path last[] = {TP_NCCL_EAGER, TP_MDR_DEV, TP_MDR}; /* mdr-graph's line is the run's last */
  for (size_t k = 0; k < sizeof last / sizeof *last; k++) {
    const tp_path p = last[k];
    if (!o->path_on[p]) continue;
    tp_ratio_stats single = tp_ratios(r, p, false), batch = tp_ratios(r, p, true);
    if (!single.n) {
      printf("%s vs floor: no floor (nccl-graph or nccl-window must be measured too)\n", k_tp_path_names[p]);
      continue;
    }
    printf("%s vs floor: %.2fx (geometric mean over %zu cases, %.2fx-%.2fx), within %.0f%% of the floor in %zu of "
           "%zu; K-batch %.2fx (%.2fx-%.2fx)\n",
           k_tp_path_names[p], single.geomean, single.n, single.lo, single.hi, (TP_NEAR_FLOOR - 1) * 100, single.near,
           single.n, batch.geomean, batch.lo, batch.hi);
  }
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
             "time of the submitting call per rank\", \"floor\": \"min of nccl-graph and nccl-window gpu_us_med\"},\n");
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
               "\"nccl_window\": [%s, %s]}",
            mdr_buffer_name(TP_BUFFER), w->mdr_buffer_offset, mdr_window_name(w->mdr_window[0]),
            mdr_window_name(w->mdr_window[1]), w->nccl_window[0] ? "true" : "false", w->nccl_window[1] ? "true" : "false");
  }
  fprintf(f, "\n  ],\n  \"cases\": [");
  for (size_t i = 0; i < r->n_cases; i++) {
    const tp_case *c = &r->cases[i];
    fprintf(f, "%s\n    {\"sweep\": \"%s\", \"rows\": %zu, \"bytes\": %zu, \"path\": \"%s\", \"measured\": %s",
            i ? "," : "", k_tp_sweep_names[c->sweep], c->rows, c->bytes, k_tp_path_names[c->path],
            c->measured ? "true" : "false");
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
        {"x_floor_batch", c->x_floor_batch}, {"gbps", c->gbps}};
    for (size_t k = 0; k < sizeof v / sizeof *v; k++) {
      fprintf(f, ", \"%s\": ", v[k].k);
      json_num(f, v[k].v);
    }
    fprintf(f, ", \"floor_path\": ");
    if (c->floor_path) json_str(f, c->floor_path);
    else fprintf(f, "null");
    fprintf(f, ", \"eager_steps\": %llu}", (unsigned long long)c->eager_steps);
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
             "floor_batch_us,x_floor_batch,gbps,floor_path,eager_steps\n");
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
    fprintf(f, ",%s,%llu\n", c->floor_path ? c->floor_path : "", (unsigned long long)c->eager_steps);
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
