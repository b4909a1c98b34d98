/* mdr example — the TP decode loop's command line, statistics, tolerance
 * arithmetic and report (decode_tp_report.h). */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode_tp_report.h"

#define DEFAULT_STEPS 200
#define DEFAULT_SEED 1234
#define MAX_STEPS 10000000u /* the per-step samples must fit in memory */

/* ---- command line ------------------------------------------------------------ */

static void usage(FILE *f) {
  fprintf(f,
          "usage: mdr_decode_tp [--steps N] [--seed S] [--all-reduce nccl|mdr|both] [--dynamic]\n"
          "                     [--json PATH]\n"
          "  --steps N    decode steps, each run eagerly and as a graph on both GPUs for\n"
          "               every all-reduce variant, and as a graph of the TP=1 reference\n"
          "               on GPU 0 (default %d)\n"
          "  --seed S     seed of the weights, token counts and ids (default %d)\n"
          "  --all-reduce how the TP=2 all-reduces run: nccl (MDR_ALL_REDUCE_NCCL, then the\n"
          "               residual-add kernel), mdr (MDR_ALL_REDUCE_AUTO: mdr's kernels where they\n"
          "               run, residual add fused), or both side by side (default: both\n"
          "               when mdr's kernels run on the arenas, else nccl)\n"
          "  --dynamic    also one MDR_GRAPH_DYNAMIC graph per rank (count read on the\n"
          "               device by the all-reduces), checked bit for bit against its EXACT\n"
          "               twin; every GEMM row tile then runs the M-row algorithm\n"
          "  --json PATH  write the timings and checks as JSON\n"
          "needs two CUDA GPUs and mdr built with NCCL (exits 77 otherwise);\n"
          "sets NCCL_NVLS_ENABLE=0 for itself\n",
          DEFAULT_STEPS, DEFAULT_SEED);
}

static bool parse_u64(const char *s, uint64_t *out) {
  char *end = NULL;
  errno = 0;
  if (!s || !*s || *s == '-') return false;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno || *end) return false;
  *out = (uint64_t)v;
  return true;
}

static const char *const ar_option_names[] = {"default", "nccl", "mdr", "both"};

const char *ar_option_name(ar_option a) {
  return (unsigned)a < sizeof ar_option_names / sizeof *ar_option_names ? ar_option_names[a] : "unknown";
}

int parse_options(int argc, char **argv, options *o) {
  o->steps = DEFAULT_STEPS;
  o->seed = DEFAULT_SEED;
  o->json = NULL;
  o->all_reduce = AR_OPT_DEFAULT;
  o->dynamic = false;
  for (int i = 1; i < argc; ++i) {
    uint64_t v;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      exit(0);
    } else if (!strcmp(argv[i], "--steps") && i + 1 < argc && parse_u64(argv[i + 1], &v) && v >= 1 &&
               v <= MAX_STEPS) {
      o->steps = (size_t)v;
      ++i;
    } else if (!strcmp(argv[i], "--seed") && i + 1 < argc && parse_u64(argv[i + 1], &v)) {
      o->seed = v;
      ++i;
    } else if (!strcmp(argv[i], "--json") && i + 1 < argc) {
      o->json = argv[++i];
    } else if (!strcmp(argv[i], "--all-reduce") && i + 1 < argc &&
               (!strcmp(argv[i + 1], "nccl") || !strcmp(argv[i + 1], "mdr") ||
                !strcmp(argv[i + 1], "both"))) {
      ++i;
      o->all_reduce = !strcmp(argv[i], "nccl") ? AR_OPT_NCCL : !strcmp(argv[i], "mdr") ? AR_OPT_MDR
                                                                                        : AR_OPT_BOTH;
    } else if (!strcmp(argv[i], "--dynamic")) {
      o->dynamic = true;
    } else {
      fprintf(stderr, "decode_tp: bad argument '%s'\n", argv[i]);
      usage(stderr);
      return -1;
    }
  }
  return 0;
}

/* ---- checks' arithmetic ------------------------------------------------------ */

static double bf16_value(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return (double)f;
}

void compare_rows(const uint16_t *got, const uint16_t *ref, size_t rows, size_t width,
                  double *rel_l2, double *abs_over_rms) {
  *rel_l2 = 0.0;
  *abs_over_rms = 0.0;
  for (size_t r = 0; r < rows; ++r) {
    double d2 = 0.0, r2 = 0.0, dmax = 0.0;
    for (size_t j = 0; j < width; ++j) {
      const double g = bf16_value(got[r * width + j]), e = bf16_value(ref[r * width + j]);
      const double d = fabs(g - e);
      d2 += d * d;
      r2 += e * e;
      if (d > dmax || d != d) dmax = d; /* a NaN counts as out of tolerance */
    }
    const double rel = r2 > 0.0 ? sqrt(d2 / r2) : (d2 > 0.0 ? INFINITY : 0.0);
    const double rms = sqrt(r2 / (double)width);
    const double abs_rel = rms > 0.0 ? dmax / rms : (dmax > 0.0 ? INFINITY : 0.0);
    if (rel > *rel_l2 || rel != rel) *rel_l2 = rel != rel ? INFINITY : rel;
    if (abs_rel > *abs_over_rms || abs_rel != abs_rel)
      *abs_over_rms = abs_rel != abs_rel ? INFINITY : abs_rel;
  }
}

size_t count_diffs(const uint16_t *a, const uint16_t *b, size_t n, size_t *first) {
  size_t d = 0;
  *first = n;
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) {
      if (d++ == 0) *first = i;
    }
  return d;
}

/* ---- statistics -------------------------------------------------------------- */

const size_t bucket_lo[BUCKET_COUNT] = {1, 2, 9, 33};
const size_t bucket_hi[BUCKET_COUNT] = {1, 8, 32, 64};
static const char *const bucket_name[BUCKET_COUNT] = {"1", "2-8", "9-32", "33-64"};
const char *const variant_name[VAR_COUNT] = {"nccl", "mdr", "dynamic"};
static const char *const series_name[SERIES_COUNT] = {"graph_gpu_us", "graph_cpu_us", "eager_gpu_us",
                                                      "eager_cpu_us"};

/* "nccl_rank0" ... "tp1" (JSON keys) and "nccl rank 0 (GPU 0)" ... (tables). */
static const char *run_key(int run) {
  static const char *const keys[RUN_COUNT] = {"nccl_rank0", "nccl_rank1",    "mdr_rank0",
                                              "mdr_rank1",  "dynamic_rank0", "dynamic_rank1", "tp1"};
  _Static_assert(RUN_COUNT == 7 && TP_RANKS == 2, "one key per run");
  return keys[run];
}

static void run_label(int run, char *buf, size_t n) {
  if (run == RUN_TP1) {
    snprintf(buf, n, "TP=1 (GPU 0)");
  } else {
    snprintf(buf, n, "%s rank %d (GPU %d)", variant_name[run / TP_RANKS], run % TP_RANKS, run % TP_RANKS);
  }
}

int bucket_of(size_t tokens) {
  for (int b = 0; b < BUCKET_COUNT; ++b)
    if (tokens <= bucket_hi[b]) return b;
  return BUCKET_COUNT - 1;
}

void quantiles_of(const double *x, const int *bucket, size_t n, int which, double *scratch,
                  quantiles *q) {
  memset(q, 0, sizeof *q);
  if (!x) return;
  size_t k = 0;
  for (size_t i = 0; i < n; ++i)
    if (which < 0 || bucket[i] == which) scratch[k++] = x[i];
  q->n = k;
  if (k == 0) return;
  qsort(scratch, k, sizeof *scratch, ex_cmp_double);
  q->median = k % 2 ? scratch[k / 2] : 0.5 * (scratch[k / 2 - 1] + scratch[k / 2]);
  q->p90 = ex_percentile(scratch, k, 0.90);
  q->p99 = ex_percentile(scratch, k, 0.99);
  q->max = scratch[k - 1];
}

int report_has_run(const tp_report *r, int run) {
  return run == RUN_TP1 || (run >= 0 && run < RUN_TP1 && r->enabled[run / TP_RANKS]);
}

static bool has_eager(int run) { return run != RUN_TP1 && run / TP_RANKS != VAR_DYNAMIC; }

int report_alloc(tp_report *r, size_t steps) {
  r->steps = steps;
  r->bucket = calloc(steps, sizeof *r->bucket);
  if (!r->bucket) return -1;
  for (int run = 0; run < RUN_COUNT; ++run) {
    if (!report_has_run(r, run)) continue;
    for (int s = 0; s < SERIES_COUNT; ++s) {
      if (!has_eager(run) && (s == SERIES_EAGER_GPU || s == SERIES_EAGER_CPU)) continue;
      r->samples[run][s] = calloc(steps, sizeof(double));
      if (!r->samples[run][s]) return -1;
    }
  }
  return 0;
}

void report_free(tp_report *r) {
  free(r->bucket);
  r->bucket = NULL;
  for (int run = 0; run < RUN_COUNT; ++run)
    for (int s = 0; s < SERIES_COUNT; ++s) {
      free(r->samples[run][s]);
      r->samples[run][s] = NULL;
    }
}

/* Counts a run's graphs were captured for: M, or 1 (DYNAMIC: one graph). */
static size_t capture_counts(int run) {
  return run != RUN_TP1 && run / TP_RANKS == VAR_DYNAMIC ? 1 : TP_MAX_TOKENS;
}

/* Quantiles of the per-count capture µs of one run. */
static void capture_quantiles(const tp_report *r, int run, quantiles *q, double *total) {
  double sorted[TP_MAX_TOKENS];
  const size_t n = capture_counts(run);
  *total = 0.0;
  for (size_t i = 0; i < n; ++i) *total += r->capture_us[run][i];
  quantiles_of(r->capture_us[run], NULL, n, -1, sorted, q);
}

/* ---- the variants' verdicts --------------------------------------------------- */

static size_t sum2(const size_t v[TP_RANKS]) { return v[0] + v[1]; }

/* 1 identical, 0 not, -1 not compared (no eager path; no NCCL variant, or the variant is NCCL). */
static int identical_to_eager(const tp_report *r, int v) {
  return v == VAR_DYNAMIC ? -1 : sum2(r->checks[v].eager_mismatched) == 0;
}
static int identical_to_nccl(const tp_report *r, int v) {
  return v == VAR_NCCL || !r->enabled[VAR_NCCL] ? -1 : sum2(r->checks[v].nccl_mismatched) == 0;
}
static const char *tri(int x, const char *na) { return x < 0 ? na : x ? "yes" : "NO"; }

static bool variant_ok(const tp_report *r, int v) {
  const tp_checks *c = &r->checks[v];
  return sum2(c->eager_mismatched) == 0 && c->rank_mismatched == 0 && c->tol_failed == 0 &&
         sum2(c->nccl_mismatched) == 0 && sum2(c->exact_mismatched) == 0;
}

/* Every step of every run a graph replay (moot, and true, when graphs are disabled). */
static bool all_replayed(const tp_report *r, bool *graphs_disabled) {
  bool replays = true, disabled = false;
  for (int run = 0; run < RUN_COUNT; ++run) {
    if (!report_has_run(r, run)) continue;
    const mdr_graph_stats *s = &r->stats[run];
    disabled = disabled || s->graphs_disabled;
    if (!s->graphs_disabled && (s->steps != r->steps || s->hits != s->steps || s->eager_steps != 0))
      replays = false;
  }
  if (graphs_disabled) *graphs_disabled = disabled;
  return replays;
}

bool report_ok(const tp_report *r, bool *graphs_disabled) {
  bool ok = all_replayed(r, graphs_disabled);
  for (int v = 0; v < VAR_COUNT; ++v)
    if (r->enabled[v]) ok = ok && variant_ok(r, v);
  return ok;
}

/* AUTO's picks over 1..M rows as runs: "one-shot 1-64" or "one-shot 1-40, two-shot 41-64". */
static void auto_choice_text(const tp_report *r, char *buf, size_t n) {
  size_t used = 0;
  buf[0] = '\0';
  for (size_t t = 1; t <= TP_MAX_TOKENS;) {
    size_t e = t;
    while (e < TP_MAX_TOKENS && r->auto_choice[e] == r->auto_choice[t - 1]) ++e;
    int k = snprintf(buf + used, used < n ? n - used : 0, "%s%s %zu-%zu", t > 1 ? ", " : "",
                     mdr_all_reduce_algo_name(r->auto_choice[t - 1]), t, e);
    if (k > 0) used += (size_t)k;
    t = e + 1;
  }
}

/* GPU median of a run's graph steps (0 when not run). */
static double graph_gpu_median(const tp_report *r, int run, double *scratch) {
  quantiles q;
  quantiles_of(r->samples[run][SERIES_GRAPH_GPU], NULL, r->steps, -1, scratch, &q);
  return q.median;
}

/* ---- report ------------------------------------------------------------------ */

static void variant_desc(const tp_report *r, int v, char *buf, size_t n) {
  snprintf(buf, n, "%s, %s%s", v == VAR_DYNAMIC ? "DYNAMIC" : "EXACT", mdr_all_reduce_algo_name(r->algo[v]),
           r->fused_residual[v] ? ", fused add" : "");
}

void print_report(const tp_report *r, double *scratch) {
  char label[64], text[256];

  /* The all-reduce variants, side by side. */
  printf("\nall-reduce variants, TP=2 graph replay, per step over %zu steps (GPU: rank 0's events around "
         "the step; CPU: mdr_graph_cache_step)\n",
         r->steps);
  if (r->enabled[VAR_MDR]) {
    auto_choice_text(r, text, sizeof text);
    printf("  mdr = MDR_ALL_REDUCE_AUTO: %s rows; with a device-read count: %s%s\n", text,
           r->auto_choice_counted == MDR_ALL_REDUCE_AUTO ? "mdr's kernel, one- or two-shot picked as it runs"
                                                 : mdr_all_reduce_algo_name(r->auto_choice_counted),
           r->mdr_kernels ? "" : "; mdr's kernels do not run here");
  }
  printf("%-34s | %9s %9s | %8s %8s | %8s | %8s | %8s\n", "variant", "GPU med", "p99", "CPU r0", "r1",
         "GPU/nccl", "==eager", "==nccl");
  for (int v = 0; v < VAR_COUNT; ++v) {
    if (!r->enabled[v]) continue;
    quantiles g, c0, c1;
    quantiles_of(r->samples[RUN_OF(v, 0)][SERIES_GRAPH_GPU], NULL, r->steps, -1, scratch, &g);
    quantiles_of(r->samples[RUN_OF(v, 0)][SERIES_GRAPH_CPU], NULL, r->steps, -1, scratch, &c0);
    quantiles_of(r->samples[RUN_OF(v, 1)][SERIES_GRAPH_CPU], NULL, r->steps, -1, scratch, &c1);
    char desc[48], ratio[16] = "-";
    variant_desc(r, v, desc, sizeof desc);
    snprintf(label, sizeof label, "%s (%s)", variant_name[v], desc);
    if (r->enabled[VAR_NCCL] && v != VAR_NCCL)
      snprintf(ratio, sizeof ratio, "%.3fx",
               ex_ratio(g.median, graph_gpu_median(r, RUN_OF(VAR_NCCL, 0), scratch)));
    printf("%-34s | %9.1f %9.1f | %8.1f %8.1f | %8s | %8s | %8s\n", label, g.median, g.p99, c0.median,
           c1.median, ratio, tri(identical_to_eager(r, v), "n/a"), tri(identical_to_nccl(r, v), "-"));
  }
  if (r->enabled[VAR_DYNAMIC]) {
    const double dyn = graph_gpu_median(r, RUN_OF(VAR_DYNAMIC, 0), scratch);
    const double exact = graph_gpu_median(r, RUN_OF(r->twin, 0), scratch);
    printf("  DYNAMIC vs its EXACT twin (%s): GPU median %.1f vs %.1f us (%.3fx); logits identical: %s "
           "(mismatched steps %zu + %zu); GEMM row tiles on the M-row algorithm: %d of %d\n",
           variant_name[r->twin], dyn, exact, ex_ratio(dyn, exact),
           sum2(r->checks[VAR_DYNAMIC].exact_mismatched) ? "NO" : "yes",
           r->checks[VAR_DYNAMIC].exact_mismatched[0], r->checks[VAR_DYNAMIC].exact_mismatched[1],
           r->gemm_one_algo_tiles, r->gemm_tiles);
  }
  if (r->ar_note[0]) printf("  note: %s\n", r->ar_note);

  printf("\nper step, us: median / p90 / p99 / max over %zu steps (GPU: events around the step; CPU: "
         "the enqueue)\n",
         r->steps);
  printf("%-24s %-6s | %8s %8s %8s %8s | %7s %7s %7s %7s\n", "who", "path", "GPU med", "p90", "p99",
         "max", "CPU med", "p90", "p99", "max");
  for (int run = 0; run < RUN_COUNT; ++run) {
    if (!report_has_run(r, run)) continue;
    run_label(run, label, sizeof label);
    for (int path = 0; path < 2; ++path) { /* 0 graph, 1 eager */
      const double *gpu = r->samples[run][path ? SERIES_EAGER_GPU : SERIES_GRAPH_GPU];
      const double *cpu = r->samples[run][path ? SERIES_EAGER_CPU : SERIES_GRAPH_CPU];
      if (!gpu) continue;
      quantiles g, c;
      quantiles_of(gpu, NULL, r->steps, -1, scratch, &g);
      quantiles_of(cpu, NULL, r->steps, -1, scratch, &c);
      printf("%-24s %-6s | %8.1f %8.1f %8.1f %8.1f | %7.1f %7.1f %7.1f %7.1f\n", label,
             path ? "eager" : "graph", g.median, g.p90, g.p99, g.max, c.median, c.p90, c.p99, c.max);
    }
  }

  printf("\ngraph GPU us per step (medians, rank 0) by token count, beside TP=1\n");
  printf("%-7s %6s |", "tokens", "steps");
  for (int v = 0; v < VAR_COUNT; ++v)
    if (r->enabled[v]) printf(" %10s", variant_name[v]);
  printf(" %10s |", "TP=1");
  for (int v = 0; v < VAR_COUNT; ++v)
    if (r->enabled[v]) {
      snprintf(label, sizeof label, "%s/TP=1", variant_name[v]);
      printf(" %12s", label);
    }
  if (r->enabled[VAR_NCCL] && r->enabled[VAR_MDR]) printf(" %9s", "mdr/nccl");
  if (r->enabled[VAR_DYNAMIC]) printf(" %9s", "dyn/exact");
  printf("\n");
  for (int b = 0; b <= BUCKET_COUNT; ++b) {
    const int which = b < BUCKET_COUNT ? b : -1;
    quantiles qv[VAR_COUNT], qt;
    memset(qv, 0, sizeof qv);
    for (int v = 0; v < VAR_COUNT; ++v)
      if (r->enabled[v])
        quantiles_of(r->samples[RUN_OF(v, 0)][SERIES_GRAPH_GPU], r->bucket, r->steps, which, scratch, &qv[v]);
    quantiles_of(r->samples[RUN_TP1][SERIES_GRAPH_GPU], r->bucket, r->steps, which, scratch, &qt);
    printf("%-7s %6zu |", b < BUCKET_COUNT ? bucket_name[b] : "all", qt.n);
    for (int v = 0; v < VAR_COUNT; ++v)
      if (r->enabled[v]) printf(" %10.1f", qv[v].median);
    printf(" %10.1f |", qt.median);
    for (int v = 0; v < VAR_COUNT; ++v)
      if (r->enabled[v]) printf(" %11.2fx", ex_ratio(qv[v].median, qt.median));
    if (r->enabled[VAR_NCCL] && r->enabled[VAR_MDR])
      printf(" %8.3fx", ex_ratio(qv[VAR_MDR].median, qv[VAR_NCCL].median));
    if (r->enabled[VAR_DYNAMIC]) printf(" %8.3fx", ex_ratio(qv[VAR_DYNAMIC].median, qv[r->twin].median));
    printf("\n");
  }

  printf("\ncapture per token count, us (mdr_graph_stats.capture_us: capture + instantiate + upload; "
         "counts 1..%d, DYNAMIC: its one graph)\n",
         TP_MAX_TOKENS);
  printf("%-24s %-40s | %8s %8s %8s | %9s\n", "who", "graph holds", "median", "p90", "max", "total ms");
  for (int run = 0; run < RUN_COUNT; ++run) {
    if (!report_has_run(r, run)) continue;
    quantiles q;
    double total;
    capture_quantiles(r, run, &q, &total);
    char holds[64];
    if (run == RUN_TP1) {
      snprintf(holds, sizeof holds, "%d layers, no collective", TP_LAYERS);
    } else {
      snprintf(holds, sizeof holds, "%d layers, %d all-reduces (%s)", TP_LAYERS, 2 * TP_LAYERS,
               mdr_all_reduce_algo_name(r->algo[run / TP_RANKS]));
    }
    run_label(run, label, sizeof label);
    printf("%-24s %-40s | %8.1f %8.1f %8.1f | %9.2f\n", label, holds, q.median, q.p90, q.max, total / 1e3);
  }
  for (int v = 0; v < VAR_DYNAMIC; ++v) {
    if (!r->enabled[v]) continue;
    quantiles q0, qt;
    double t0, tt;
    capture_quantiles(r, RUN_OF(v, 0), &q0, &t0);
    capture_quantiles(r, RUN_TP1, &qt, &tt);
    printf("capture with the all-reduces inside (%s) vs TP=1 (rank 0, medians): %.2fx\n", variant_name[v],
           ex_ratio(q0.median, qt.median));
  }

  printf("\ngraph caches (steps / replays / eager steps / graphs):");
  bool first = true;
  for (int run = 0; run < RUN_COUNT; ++run) {
    if (!report_has_run(r, run)) continue;
    const mdr_graph_stats *s = &r->stats[run];
    printf("%s %s %" PRIu64 "/%" PRIu64 "/%" PRIu64 "/%zu", first ? "" : ",", run_key(run), s->steps, s->hits,
           s->eager_steps, s->graphs);
    first = false;
  }
  printf("\n");
}

bool print_checks(const tp_report *r) {
  bool disabled = false;
  const bool replays = all_replayed(r, &disabled), ok = report_ok(r, NULL);
  if (disabled) printf("NOTE: MDR_DISABLE_GRAPHS is set: the graph path ran eagerly\n");
  printf("\nchecks over %zu steps:\n", r->steps);
  for (int v = 0; v < VAR_COUNT; ++v) {
    if (!r->enabled[v]) continue;
    const tp_checks *c = &r->checks[v];
    char desc[48];
    variant_desc(r, v, desc, sizeof desc);
    printf(" %s (%s):\n", variant_name[v], desc);
    if (v != VAR_DYNAMIC)
      printf("  (a) graph replay vs eager, bit for bit: rank 0 %zu, rank 1 %zu mismatched steps\n",
             c->eager_mismatched[0], c->eager_mismatched[1]);
    printf("  (b) TP=2 vs TP=1: worst relative L2 %.5f (limit %.5f = 8 BF16 unit roundoffs), worst "
           "max|diff|/rms %.4f (limit %.4f); %zu steps out of tolerance\n",
           c->worst_rel_l2, TOL_REL_L2, c->worst_abs_over_rms, TOL_ABS_OVER_RMS, c->tol_failed);
    printf("  (c) rank 0 vs rank 1, bit for bit: %zu mismatched steps\n", c->rank_mismatched);
    if (identical_to_nccl(r, v) >= 0)
      printf("  (d) vs the nccl variant, bit for bit (%s): rank 0 %zu, rank 1 %zu mismatched steps\n",
             v == VAR_DYNAMIC ? "graph" : "graph and eager", c->nccl_mismatched[0], c->nccl_mismatched[1]);
    if (v == VAR_DYNAMIC)
      printf("  (e) vs its EXACT twin (%s), bit for bit: rank 0 %zu, rank 1 %zu mismatched steps\n",
             variant_name[r->twin], c->exact_mismatched[0], c->exact_mismatched[1]);
  }
  printf("  (TP=2 rounds each rank's partial sum and their sum to BF16: ~2 roundoffs expected in (b))\n");
  printf("  every step one graph replay per GPU and variant: %s\n",
         disabled ? "n/a (graphs disabled)" : replays ? "yes" : "NO");
  return ok;
}

/* ---- JSON ---------------------------------------------------------------------- */

static void json_quantiles(FILE *f, const char *key, const quantiles *q, const char *tail) {
  fprintf(f, "\"%s\": {\"median\": %.2f, \"p90\": %.2f, \"p99\": %.2f, \"max\": %.2f}%s", key, q->median,
          q->p90, q->p99, q->max, tail);
}

static const char *json_tri(int x) { return x < 0 ? "null" : x ? "true" : "false"; }

static void json_checks(FILE *f, const tp_report *r, int v) {
  const tp_checks *c = &r->checks[v];
  fprintf(f, "\"checks\": {");
  if (v != VAR_DYNAMIC)
    fprintf(f, "\"graph_vs_eager_mismatched_steps\": [%zu, %zu], ", c->eager_mismatched[0],
            c->eager_mismatched[1]);
  fprintf(f,
          "\"rank_mismatched_steps\": %zu, \"tp1_tolerance\": {\"rel_l2_limit\": %g, \"abs_over_rms_limit\": "
          "%g, \"worst_rel_l2\": %.6f, \"worst_abs_over_rms\": %.6f, \"failed_steps\": %zu}",
          c->rank_mismatched, TOL_REL_L2, TOL_ABS_OVER_RMS, c->worst_rel_l2, c->worst_abs_over_rms,
          c->tol_failed);
  if (identical_to_nccl(r, v) >= 0)
    fprintf(f, ", \"vs_nccl_mismatched_steps\": [%zu, %zu]", c->nccl_mismatched[0], c->nccl_mismatched[1]);
  if (v == VAR_DYNAMIC)
    fprintf(f, ", \"vs_exact_twin_mismatched_steps\": [%zu, %zu]", c->exact_mismatched[0],
            c->exact_mismatched[1]);
  fprintf(f, ", \"ok\": %s}", variant_ok(r, v) ? "true" : "false");
}

int write_json(const char *path, const tp_report *r, double *scratch) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "decode_tp: cannot write %s: %s\n", path, strerror(errno));
    return -1;
  }
  bool disabled = false;
  const bool ok = report_ok(r, &disabled);
  fprintf(f, "{\n  \"steps\": %zu,\n  \"seed\": %" PRIu64 ",\n  \"tp\": %d,\n  \"window\": \"%s\",\n", r->steps,
          r->seed, TP_RANKS, r->window ? r->window : "none");
  fprintf(f, "  \"ok\": %s,\n  \"graphs_disabled\": %s,\n", ok ? "true" : "false", disabled ? "true" : "false");
  fprintf(f,
          "  \"model\": {\"layers\": %d, \"hidden\": %d, \"qkv\": %d, \"ffn\": %d, \"vocab\": %d, "
          "\"max_tokens\": %d, \"all_reduces_per_step\": %d},\n",
          TP_LAYERS, TP_HIDDEN, TP_QKV, TP_FFN, TP_VOCAB, TP_MAX_TOKENS, 2 * TP_LAYERS);

  /* The all-reduce variants: the printed summary table, row by row. */
  fprintf(f, "  \"all_reduce\": {\n    \"requested\": \"%s\", \"mdr_kernels\": %d, \"note\": \"",
          ar_option_name(r->requested), r->mdr_kernels);
  for (const char *p = r->ar_note; *p; ++p) { /* JSON string: escape what the note may hold */
    if (*p == '"' || *p == '\\') {
      fprintf(f, "\\%c", *p);
    } else if ((unsigned char)*p < 0x20) {
      fputc(' ', f);
    } else {
      fputc(*p, f);
    }
  }
  fprintf(f, "\",\n    \"auto_choice_by_rows\": [");
  for (size_t t = 0; t < TP_MAX_TOKENS; ++t)
    fprintf(f, "%s\"%s\"", t ? ", " : "", mdr_all_reduce_algo_name(r->auto_choice[t]));
  fprintf(f, "],\n    \"auto_choice_counted\": \"%s\",\n", mdr_all_reduce_algo_name(r->auto_choice_counted));
  if (r->enabled[VAR_DYNAMIC])
    fprintf(f, "    \"dynamic_twin\": \"%s\", \"gemm_tiles_on_m_row_algo\": [%d, %d],\n", variant_name[r->twin],
            r->gemm_one_algo_tiles, r->gemm_tiles);
  fprintf(f, "    \"variants\": [\n");
  bool first = true;
  for (int v = 0; v < VAR_COUNT; ++v) {
    if (!r->enabled[v]) continue;
    quantiles g[TP_RANKS], c[TP_RANKS];
    for (int k = 0; k < TP_RANKS; ++k) {
      quantiles_of(r->samples[RUN_OF(v, k)][SERIES_GRAPH_GPU], NULL, r->steps, -1, scratch, &g[k]);
      quantiles_of(r->samples[RUN_OF(v, k)][SERIES_GRAPH_CPU], NULL, r->steps, -1, scratch, &c[k]);
    }
    fprintf(f, "%s      {\"variant\": \"%s\", \"graph_mode\": \"%s\", \"algo\": \"%s\", \"fused_residual\": %s,\n",
            first ? "" : ",\n", variant_name[v], v == VAR_DYNAMIC ? "dynamic" : "exact",
            mdr_all_reduce_algo_name(r->algo[v]), r->fused_residual[v] ? "true" : "false");
    first = false;
    fprintf(f,
            "       \"gpu_us_per_step\": {\"median\": %.2f, \"p99\": %.2f, \"rank1_median\": %.2f, "
            "\"rank1_p99\": %.2f},\n",
            g[0].median, g[0].p99, g[1].median, g[1].p99);
    fprintf(f, "       \"cpu_us_per_step\": {\"rank0_median\": %.2f, \"rank1_median\": %.2f, \"rank0_p99\": %.2f, "
               "\"rank1_p99\": %.2f},\n",
            c[0].median, c[1].median, c[0].p99, c[1].p99);
    fprintf(f, "       \"gpu_median_over_nccl\": ");
    if (r->enabled[VAR_NCCL] && v != VAR_NCCL) {
      fprintf(f, "%.4f", ex_ratio(g[0].median, graph_gpu_median(r, RUN_OF(VAR_NCCL, 0), scratch)));
    } else {
      fprintf(f, "null");
    }
    if (v == VAR_DYNAMIC)
      fprintf(f, ", \"gpu_median_over_exact_twin\": %.4f",
              ex_ratio(g[0].median, graph_gpu_median(r, RUN_OF(r->twin, 0), scratch)));
    fprintf(f, ",\n       \"identical_to_eager\": %s, \"identical_to_nccl\": %s,", json_tri(identical_to_eager(r, v)),
            json_tri(identical_to_nccl(r, v)));
    if (v == VAR_DYNAMIC)
      fprintf(f, " \"identical_to_exact_twin\": %s,", sum2(r->checks[v].exact_mismatched) ? "false" : "true");
    fprintf(f, "\n       ");
    json_checks(f, r, v);
    fprintf(f, "}");
  }
  fprintf(f, "\n    ]\n  },\n");

  fprintf(f, "  \"per_step\": {\n");
  first = true;
  for (int run = 0; run < RUN_COUNT; ++run) {
    if (!report_has_run(r, run)) continue;
    fprintf(f, "%s    \"%s\": {", first ? "" : ",\n", run_key(run));
    first = false;
    bool first_s = true;
    for (int s = 0; s < SERIES_COUNT; ++s) {
      if (!r->samples[run][s]) continue;
      quantiles q;
      quantiles_of(r->samples[run][s], NULL, r->steps, -1, scratch, &q);
      if (!first_s) fprintf(f, ", ");
      first_s = false;
      json_quantiles(f, series_name[s], &q, "");
    }
    fprintf(f, "}");
  }
  fprintf(f, "\n  },\n  \"buckets\": [\n");
  for (int b = 0; b <= BUCKET_COUNT; ++b) {
    const int which = b < BUCKET_COUNT ? b : -1;
    quantiles qt, qv[VAR_COUNT];
    memset(qv, 0, sizeof qv);
    quantiles_of(r->samples[RUN_TP1][SERIES_GRAPH_GPU], r->bucket, r->steps, which, scratch, &qt);
    fprintf(f, "    {\"tokens\": \"%s\", \"steps\": %zu", b < BUCKET_COUNT ? bucket_name[b] : "all", qt.n);
    for (int v = 0; v < VAR_COUNT; ++v) {
      if (!r->enabled[v]) continue;
      for (int k = 0; k < TP_RANKS; ++k) {
        quantiles q;
        quantiles_of(r->samples[RUN_OF(v, k)][SERIES_GRAPH_GPU], r->bucket, r->steps, which, scratch, &q);
        fprintf(f, ", \"%s_graph_gpu_us_median\": %.2f", run_key(RUN_OF(v, k)), q.median);
        if (k == 0) qv[v] = q;
      }
      fprintf(f, ", \"%s_rank0_over_tp1\": %.3f", variant_name[v], ex_ratio(qv[v].median, qt.median));
    }
    fprintf(f, ", \"tp1_graph_gpu_us_median\": %.2f", qt.median);
    if (r->enabled[VAR_NCCL] && r->enabled[VAR_MDR])
      fprintf(f, ", \"mdr_over_nccl\": %.4f", ex_ratio(qv[VAR_MDR].median, qv[VAR_NCCL].median));
    if (r->enabled[VAR_DYNAMIC])
      fprintf(f, ", \"dynamic_over_exact_twin\": %.4f", ex_ratio(qv[VAR_DYNAMIC].median, qv[r->twin].median));
    fprintf(f, "}%s\n", b < BUCKET_COUNT ? "," : "");
  }
  fprintf(f, "  ],\n  \"capture_us\": {\n");
  first = true;
  for (int run = 0; run < RUN_COUNT; ++run) {
    if (!report_has_run(r, run)) continue;
    quantiles q;
    double total;
    capture_quantiles(r, run, &q, &total);
    fprintf(f, "%s    \"%s\": {\"median\": %.2f, \"p90\": %.2f, \"max\": %.2f, \"total\": %.2f, \"per_count\": [",
            first ? "" : ",\n", run_key(run), q.median, q.p90, q.max, total);
    first = false;
    for (size_t i = 0; i < capture_counts(run); ++i) fprintf(f, "%s%.1f", i ? ", " : "", r->capture_us[run][i]);
    fprintf(f, "]}");
  }
  fprintf(f, "\n  },\n  \"graph_stats\": {\n");
  first = true;
  for (int run = 0; run < RUN_COUNT; ++run) {
    if (!report_has_run(r, run)) continue;
    const mdr_graph_stats *s = &r->stats[run];
    fprintf(f,
            "%s    \"%s\": {\"steps\": %" PRIu64 ", \"hits\": %" PRIu64 ", \"misses\": %" PRIu64
            ", \"captures\": %" PRIu64 ", \"eager_steps\": %" PRIu64 ", \"eager_fallbacks\": %" PRIu64
            ", \"graphs\": %zu, \"graphs_disabled\": %d, \"capture_us\": %.1f, \"graph_nodes\": %zu}",
            first ? "" : ",\n", run_key(run), s->steps, s->hits, s->misses, s->captures, s->eager_steps,
            s->eager_fallbacks, s->graphs, s->graphs_disabled, s->capture_us, s->graph_nodes);
    first = false;
  }
  fprintf(f, "\n  }\n}\n");
  if (fclose(f) != 0) {
    fprintf(stderr, "decode_tp: writing %s failed: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}
