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
          "usage: mdr_decode_tp [--steps N] [--seed S] [--json PATH]\n"
          "  --steps N    decode steps, each run eagerly and as a graph on both GPUs,\n"
          "               and as a graph of the TP=1 reference on GPU 0 (default %d)\n"
          "  --seed S     seed of the weights, token counts and ids (default %d)\n"
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

int parse_options(int argc, char **argv, options *o) {
  o->steps = DEFAULT_STEPS;
  o->seed = DEFAULT_SEED;
  o->json = NULL;
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
static const char *const run_name[RUN_COUNT] = {"tp2_rank0", "tp2_rank1", "tp1"};
static const char *const run_label[RUN_COUNT] = {"TP=2 rank 0 (GPU 0)", "TP=2 rank 1 (GPU 1)",
                                                 "TP=1 (GPU 0)"};
static const char *const series_name[SERIES_COUNT] = {"graph_gpu_us", "graph_cpu_us", "eager_gpu_us",
                                                      "eager_cpu_us"};

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

int report_alloc(tp_report *r, size_t steps) {
  r->steps = steps;
  r->bucket = calloc(steps, sizeof *r->bucket);
  if (!r->bucket) return -1;
  for (int run = 0; run < RUN_COUNT; ++run)
    for (int s = 0; s < SERIES_COUNT; ++s) {
      if (run == RUN_TP1 && (s == SERIES_EAGER_GPU || s == SERIES_EAGER_CPU)) continue;
      r->samples[run][s] = calloc(steps, sizeof(double));
      if (!r->samples[run][s]) return -1;
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


/* Quantiles of the per-count capture µs of one run (counts 1..M). */
static void capture_quantiles(const tp_report *r, int run, quantiles *q, double *total) {
  double sorted[TP_MAX_TOKENS];
  *total = 0.0;
  for (size_t i = 0; i < TP_MAX_TOKENS; ++i) *total += r->capture_us[run][i];
  quantiles_of(r->capture_us[run], NULL, TP_MAX_TOKENS, -1, sorted, q);
}

/* ---- report ------------------------------------------------------------------ */

void print_report(const tp_report *r, double *scratch) {
  printf("\nper step, us: median / p90 / p99 / max over %zu steps (GPU: events around the step; CPU: "
         "the enqueue)\n",
         r->steps);
  printf("%-21s %-6s | %8s %8s %8s %8s | %7s %7s %7s %7s\n", "who", "path", "GPU med", "p90", "p99",
         "max", "CPU med", "p90", "p99", "max");
  for (int run = 0; run < RUN_COUNT; ++run)
    for (int path = 0; path < 2; ++path) { /* 0 graph, 1 eager */
      const double *gpu = r->samples[run][path ? SERIES_EAGER_GPU : SERIES_GRAPH_GPU];
      const double *cpu = r->samples[run][path ? SERIES_EAGER_CPU : SERIES_GRAPH_CPU];
      if (!gpu) continue;
      quantiles g, c;
      quantiles_of(gpu, NULL, r->steps, -1, scratch, &g);
      quantiles_of(cpu, NULL, r->steps, -1, scratch, &c);
      printf("%-21s %-6s | %8.1f %8.1f %8.1f %8.1f | %7.1f %7.1f %7.1f %7.1f\n", run_label[run],
             path ? "eager" : "graph", g.median, g.p90, g.p99, g.max, c.median, c.p90, c.p99, c.max);
    }

  printf("\nTP=2 vs TP=1, graph GPU us per step (medians) by token count\n");
  printf("%-7s %6s | %10s %10s %10s | %12s\n", "tokens", "steps", "TP=2 r0", "TP=2 r1", "TP=1",
         "TP=2 r0/TP=1");
  for (int b = 0; b <= BUCKET_COUNT; ++b) {
    const int which = b < BUCKET_COUNT ? b : -1;
    quantiles q0, q1, qt;
    quantiles_of(r->samples[RUN_TP2_R0][SERIES_GRAPH_GPU], r->bucket, r->steps, which, scratch, &q0);
    quantiles_of(r->samples[RUN_TP2_R1][SERIES_GRAPH_GPU], r->bucket, r->steps, which, scratch, &q1);
    quantiles_of(r->samples[RUN_TP1][SERIES_GRAPH_GPU], r->bucket, r->steps, which, scratch, &qt);
    printf("%-7s %6zu | %10.1f %10.1f %10.1f | %11.2fx\n", b < BUCKET_COUNT ? bucket_name[b] : "all",
           q0.n, q0.median, q1.median, qt.median, ex_ratio(q0.median, qt.median));
  }

  printf("\ncapture per token count, us (mdr_graph_stats.capture_us: capture + instantiate + upload; "
         "counts 1..%d)\n",
         TP_MAX_TOKENS);
  printf("%-21s %-34s | %8s %8s %8s | %9s\n", "who", "graph holds", "median", "p90", "max", "total ms");
  for (int run = 0; run < RUN_COUNT; ++run) {
    quantiles q;
    double total;
    capture_quantiles(r, run, &q, &total);
    char holds[48];
    if (run == RUN_TP1) {
      snprintf(holds, sizeof holds, "%d layers, no collective", TP_LAYERS);
    } else {
      snprintf(holds, sizeof holds, "%d layers, %d all-reduces", TP_LAYERS, 2 * TP_LAYERS);
    }
    printf("%-21s %-34s | %8.1f %8.1f %8.1f | %9.2f\n", run_label[run], holds, q.median, q.p90, q.max,
           total / 1e3);
  }
  {
    quantiles q0, qt;
    double t0, tt;
    capture_quantiles(r, RUN_TP2_R0, &q0, &t0);
    capture_quantiles(r, RUN_TP1, &qt, &tt);
    printf("capture with the all-reduces inside vs TP=1 (rank 0, medians): %.2fx\n",
           ex_ratio(q0.median, qt.median));
  }

  printf("\ngraph caches (steps / replays / eager steps / graphs):");
  for (int run = 0; run < RUN_COUNT; ++run) {
    const mdr_graph_stats *s = &r->stats[run];
    printf("%s %s %" PRIu64 "/%" PRIu64 "/%" PRIu64 "/%zu", run ? "," : "", run_name[run], s->steps, s->hits,
           s->eager_steps, s->graphs);
  }
  printf("\n");
}

static void json_quantiles(FILE *f, const char *key, const quantiles *q, const char *tail) {
  fprintf(f, "\"%s\": {\"median\": %.2f, \"p90\": %.2f, \"p99\": %.2f, \"max\": %.2f}%s", key, q->median,
          q->p90, q->p99, q->max, tail);
}

int write_json(const char *path, const tp_report *r, double *scratch) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "decode_tp: cannot write %s: %s\n", path, strerror(errno));
    return -1;
  }
  const tp_checks *c = &r->checks;
  fprintf(f, "{\n  \"steps\": %zu,\n  \"seed\": %" PRIu64 ",\n  \"tp\": %d,\n  \"window\": \"%s\",\n", r->steps,
          r->seed, TP_RANKS, r->window ? r->window : "none");
  fprintf(f,
          "  \"model\": {\"layers\": %d, \"hidden\": %d, \"qkv\": %d, \"ffn\": %d, \"vocab\": %d, "
          "\"max_tokens\": %d, \"all_reduces_per_step\": %d},\n",
          TP_LAYERS, TP_HIDDEN, TP_QKV, TP_FFN, TP_VOCAB, TP_MAX_TOKENS, 2 * TP_LAYERS);
  fprintf(f,
          "  \"checks\": {\"graph_vs_eager_mismatched_steps\": [%zu, %zu], \"rank_mismatched_steps\": %zu, "
          "\"tp1_tolerance\": {\"rel_l2_limit\": %g, \"abs_over_rms_limit\": %g, \"worst_rel_l2\": %.6f, "
          "\"worst_abs_over_rms\": %.6f, \"failed_steps\": %zu}},\n",
          c->eager_mismatched[0], c->eager_mismatched[1], c->rank_mismatched, TOL_REL_L2, TOL_ABS_OVER_RMS,
          c->worst_rel_l2, c->worst_abs_over_rms, c->tol_failed);
  fprintf(f, "  \"per_step\": {\n");
  for (int run = 0; run < RUN_COUNT; ++run) {
    fprintf(f, "    \"%s\": {", run_name[run]);
    bool first = true;
    for (int s = 0; s < SERIES_COUNT; ++s) {
      if (!r->samples[run][s]) continue;
      quantiles q;
      quantiles_of(r->samples[run][s], NULL, r->steps, -1, scratch, &q);
      if (!first) fprintf(f, ", ");
      first = false;
      json_quantiles(f, series_name[s], &q, "");
    }
    fprintf(f, "}%s\n", run + 1 < RUN_COUNT ? "," : "");
  }
  fprintf(f, "  },\n  \"buckets\": [\n");
  for (int b = 0; b <= BUCKET_COUNT; ++b) {
    const int which = b < BUCKET_COUNT ? b : -1;
    quantiles q[RUN_COUNT];
    for (int run = 0; run < RUN_COUNT; ++run)
      quantiles_of(r->samples[run][SERIES_GRAPH_GPU], r->bucket, r->steps, which, scratch, &q[run]);
    fprintf(f,
            "    {\"tokens\": \"%s\", \"steps\": %zu, \"tp2_rank0_graph_gpu_us_median\": %.2f, "
            "\"tp2_rank1_graph_gpu_us_median\": %.2f, \"tp1_graph_gpu_us_median\": %.2f, "
            "\"tp2_rank0_over_tp1\": %.3f}%s\n",
            b < BUCKET_COUNT ? bucket_name[b] : "all", q[0].n, q[RUN_TP2_R0].median, q[RUN_TP2_R1].median,
            q[RUN_TP1].median, ex_ratio(q[RUN_TP2_R0].median, q[RUN_TP1].median), b < BUCKET_COUNT ? "," : "");
  }
  fprintf(f, "  ],\n  \"capture_us\": {\n");
  for (int run = 0; run < RUN_COUNT; ++run) {
    quantiles q;
    double total;
    capture_quantiles(r, run, &q, &total);
    fprintf(f, "    \"%s\": {\"median\": %.2f, \"p90\": %.2f, \"max\": %.2f, \"total\": %.2f, \"per_count\": [",
            run_name[run], q.median, q.p90, q.max, total);
    for (size_t i = 0; i < TP_MAX_TOKENS; ++i)
      fprintf(f, "%s%.1f", i ? ", " : "", r->capture_us[run][i]);
    fprintf(f, "]}%s\n", run + 1 < RUN_COUNT ? "," : "");
  }
  fprintf(f, "  },\n  \"graph_stats\": {\n");
  for (int run = 0; run < RUN_COUNT; ++run) {
    const mdr_graph_stats *s = &r->stats[run];
    fprintf(f,
            "    \"%s\": {\"steps\": %" PRIu64 ", \"hits\": %" PRIu64 ", \"misses\": %" PRIu64
            ", \"captures\": %" PRIu64 ", \"eager_steps\": %" PRIu64 ", \"eager_fallbacks\": %" PRIu64
            ", \"graphs\": %zu, \"graphs_disabled\": %d, \"capture_us\": %.1f}%s\n",
            run_name[run], s->steps, s->hits, s->misses, s->captures, s->eager_steps, s->eager_fallbacks,
            s->graphs, s->graphs_disabled, s->capture_us, run + 1 < RUN_COUNT ? "," : "");
  }
  fprintf(f, "  }\n}\n");
  if (fclose(f) != 0) {
    fprintf(stderr, "decode_tp: writing %s failed: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}
