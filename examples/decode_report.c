/* mdr example — the decode loop's command line, statistics and report
 * (decode_report.h). */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode_report.h"

#define DEFAULT_STEPS 200
#define DEFAULT_SEED 1234
#define MAX_STEPS 100000000u /* the per-step samples must fit in memory */

/* ---- command line ------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f,
          "usage: mdr_decode_loop [--steps N] [--seed S] [--json PATH]\n"
          "  --steps N    decode steps, each run eagerly and as a graph (default %d)\n"
          "  --seed S     seed of the weights, token counts and ids (default %d)\n"
          "  --json PATH  write the per-bucket timings as JSON\n"
          "environment: MDR_DISABLE_GRAPHS=1 makes the graph cache run eagerly\n",
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
    } else if (!strcmp(argv[i], "--steps") && i + 1 < argc && parse_u64(argv[i + 1], &v) &&
               v >= 1 && v <= MAX_STEPS) {
      o->steps = (size_t)v;
      ++i;
    } else if (!strcmp(argv[i], "--seed") && i + 1 < argc && parse_u64(argv[i + 1], &v)) {
      o->seed = v;
      ++i;
    } else if (!strcmp(argv[i], "--json") && i + 1 < argc) {
      o->json = argv[++i];
    } else {
      fprintf(stderr, "decode_loop: bad argument '%s'\n", argv[i]);
      usage(stderr);
      return -1;
    }
  }
  return 0;
}

/* ---- statistics --------------------------------------------------------- */

const size_t bucket_lo[BUCKET_COUNT] = {1, 2, 9, 33};
const size_t bucket_hi[BUCKET_COUNT] = {1, 8, 32, 64};
static const char *const bucket_name[BUCKET_COUNT] = {"1", "2-8", "9-32", "33-64"};
static const char *const series_name[SERIES_COUNT] = {"eager_host_us", "graph_host_us",
                                                      "eager_gpu_us", "graph_gpu_us"};

int bucket_of(size_t tokens) {
  for (int b = 0; b < BUCKET_COUNT; ++b)
    if (tokens <= bucket_hi[b]) return b;
  return BUCKET_COUNT - 1;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

void summarize(double *const samples[SERIES_COUNT], const int *bucket, size_t n, int which,
               double *scratch, summary *out) {
  memset(out, 0, sizeof *out);
  for (int s = 0; s < SERIES_COUNT; ++s) {
    size_t k = 0;
    double sum = 0;
    for (size_t i = 0; i < n; ++i)
      if (which < 0 || bucket[i] == which) {
        scratch[k++] = samples[s][i];
        sum += samples[s][i];
      }
    out->steps = k;
    if (k == 0) continue;
    qsort(scratch, k, sizeof *scratch, cmp_double);
    out->median[s] = k % 2 ? scratch[k / 2] : 0.5 * (scratch[k / 2 - 1] + scratch[k / 2]);
    out->mean[s] = sum / (double)k;
  }
}

static double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

/* ---- report ------------------------------------------------------------- */

void print_report(double *const samples[SERIES_COUNT], const int *bucket, size_t steps,
                  double *scratch, summary per[BUCKET_COUNT], summary *all) {
  printf("\n%-7s %6s | %12s %12s %8s | %12s %12s %8s\n", "tokens", "steps", "eager host",
         "graph host", "speedup", "eager GPU", "graph GPU", "speedup");
  for (int b = 0; b <= BUCKET_COUNT; ++b) {
    summary *s = b < BUCKET_COUNT ? &per[b] : all;
    summarize(samples, bucket, steps, b < BUCKET_COUNT ? b : -1, scratch, s);
    printf("%-7s %6zu | %9.1f us %9.1f us %7.2fx | %9.1f us %9.1f us %7.2fx\n",
           b < BUCKET_COUNT ? bucket_name[b] : "all", s->steps, s->median[SERIES_EAGER_HOST],
           s->median[SERIES_GRAPH_HOST],
           ratio(s->median[SERIES_EAGER_HOST], s->median[SERIES_GRAPH_HOST]),
           s->median[SERIES_EAGER_GPU], s->median[SERIES_GRAPH_GPU],
           ratio(s->median[SERIES_EAGER_GPU], s->median[SERIES_GRAPH_GPU]));
  }
  printf("(medians per step; host = wall time to enqueue + synchronize, GPU = events)\n");
}

int write_json(const char *path, const options *o, const model *m, const summary per[BUCKET_COUNT],
               const summary *all, size_t mismatches, const mdr_graph_stats *gs) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "decode_loop: cannot write %s: %s\n", path, strerror(errno));
    return -1;
  }
  fprintf(f, "{\n  \"steps\": %zu,\n  \"seed\": %" PRIu64 ",\n", o->steps, o->seed);
  fprintf(f,
          "  \"model\": {\"hidden\": %zu, \"vocab\": %zu, \"qkv_dim\": %zu, \"expert_slots\": %zu,"
          " \"max_tokens\": %zu},\n",
          m->hidden, m->vocab, m->qkv_dim, m->experts, m->max_tokens);
  fprintf(f, "  \"mismatched_steps\": %zu,\n", mismatches);
  fprintf(f,
          "  \"graph_stats\": {\"captures\": %" PRIu64 ", \"hits\": %" PRIu64
          ", \"misses\": %" PRIu64 ", \"eager_steps\": %" PRIu64 ", \"capture_us\": %.1f},\n",
          gs->captures, gs->hits, gs->misses, gs->eager_steps, gs->capture_us);
  fprintf(f, "  \"buckets\": [\n");
  for (int i = 0; i <= BUCKET_COUNT; ++i) {
    const summary *s = i < BUCKET_COUNT ? &per[i] : all;
    fprintf(f, "    {\"tokens\": \"%s\", \"steps\": %zu", i < BUCKET_COUNT ? bucket_name[i] : "all",
            s->steps);
    for (int k = 0; k < SERIES_COUNT; ++k)
      fprintf(f, ", \"%s_median\": %.2f, \"%s_mean\": %.2f", series_name[k], s->median[k],
              series_name[k], s->mean[k]);
    fprintf(f, ", \"host_speedup\": %.3f, \"gpu_speedup\": %.3f}%s\n",
            ratio(s->median[SERIES_EAGER_HOST], s->median[SERIES_GRAPH_HOST]),
            ratio(s->median[SERIES_EAGER_GPU], s->median[SERIES_GRAPH_GPU]),
            i < BUCKET_COUNT ? "," : "");
  }
  fprintf(f, "  ]\n}\n");
  if (fclose(f) != 0) {
    fprintf(stderr, "decode_loop: writing %s failed: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}
