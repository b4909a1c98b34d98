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
#define MAX_PAD_KERNELS 1000
#define PREPARE_GOAL_COUNTS 4096 /* the capture-cost goal: 4096 counts ... */
#define PREPARE_GOAL_S 2.0       /* ... prepared in 2 s (a ~20-kernel body) */

/* ---- command line ------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f,
          "usage: mdr_decode_loop [--steps N] [--seed S] [--json PATH] [--device-fed]\n"
          "                       [--max-tokens M] [--prepare-all N] [--pad-kernels K]\n"
          "                       [--zero memset|fused]\n"
          "  --steps N        decode steps, each run eagerly and as a graph (default %d)\n"
          "  --seed S         seed of the weights, token counts and ids (default %d)\n"
          "  --json PATH      write the per-bucket timings (medians, means, p90, p99, max) as JSON\n"
          "  --device-fed     each step's ids are the previous step's sampled tokens (argmax of\n"
          "                   its logits rows, computed on the device): graph steps go through\n"
          "                   mdr_graph_cache_step_device, the eager reference copies them on the\n"
          "                   device; the host never reads or writes ids inside the loop.\n"
          "                   Default: host ids (mdr_graph_cache_step, random ids from the seed)\n"
          "  --max-tokens M   the arena's max_batch_tokens and the model's M: a multiple of %d,\n"
          "                   %d..%d (default %d, or N of --prepare-all rounded up when that is\n"
          "                   given alone); logits for the first min(tokens, 160) rows\n"
          "  --prepare-all N  capture the graphs of counts 1..N at start-up and report total ms,\n"
          "                   ms per graph, device memory and nodes per graph (default: M; counts\n"
          "                   above N are captured by the first step that needs them)\n"
          "  --pad-kernels K  append K empty kernels to the body, e.g. for a body of a given\n"
          "                   kernel count in capture-cost runs (default 0; at most %d)\n"
          "  --zero Z         the step's zeroing, eager and in the graphs: memset (default: one\n"
          "                   memset per buffer, a memset node each) or fused (one kernel, one\n"
          "                   node with the id upload)\n"
          "environment: MDR_DISABLE_GRAPHS=1 makes the graph cache run eagerly\n",
          DEFAULT_STEPS, DEFAULT_SEED, ROW_TILE, ROW_TILE, MAX_TOKENS_LIMIT, DEFAULT_MAX_TOKENS,
          MAX_PAD_KERNELS);
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
  memset(o, 0, sizeof *o);
  o->steps = DEFAULT_STEPS;
  o->seed = DEFAULT_SEED;
  o->zero = MDR_ZERO_MEMSET;
  bool set_max_tokens = false;
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
    } else if (!strcmp(argv[i], "--zero") && i + 1 < argc &&
               (!strcmp(argv[i + 1], "memset") || !strcmp(argv[i + 1], "fused"))) {
      o->zero = !strcmp(argv[++i], "fused") ? MDR_ZERO_FUSED : MDR_ZERO_MEMSET;
    } else if (!strcmp(argv[i], "--device-fed")) {
      o->device_fed = true;
    } else if (!strcmp(argv[i], "--max-tokens") && i + 1 < argc && parse_u64(argv[i + 1], &v) &&
               v >= ROW_TILE && v <= MAX_TOKENS_LIMIT && v % ROW_TILE == 0) {
      o->max_tokens = (size_t)v;
      set_max_tokens = true;
      ++i;
    } else if (!strcmp(argv[i], "--prepare-all") && i + 1 < argc && parse_u64(argv[i + 1], &v) &&
               v >= 1 && v <= MAX_TOKENS_LIMIT) {
      o->prepare_all = (size_t)v;
      ++i;
    } else if (!strcmp(argv[i], "--pad-kernels") && i + 1 < argc && parse_u64(argv[i + 1], &v) &&
               v <= MAX_PAD_KERNELS) {
      o->pad_kernels = (size_t)v;
      ++i;
    } else {
      fprintf(stderr, "decode_loop: bad argument '%s'\n", argv[i]);
      usage(stderr);
      return -1;
    }
  }
  if (!set_max_tokens)
    o->max_tokens = o->prepare_all > DEFAULT_MAX_TOKENS ? ceil16(o->prepare_all) : DEFAULT_MAX_TOKENS;
  if (!o->prepare_all) o->prepare_all = o->max_tokens;
  if (o->prepare_all > o->max_tokens) {
    fprintf(stderr, "decode_loop: --prepare-all %zu is more than --max-tokens %zu\n", o->prepare_all,
            o->max_tokens);
    usage(stderr);
    return -1;
  }
  return 0;
}

/* ---- statistics --------------------------------------------------------- */

const size_t bucket_lo[BUCKET_COUNT] = {1, 2, 9, 33};
static size_t bucket_top[BUCKET_COUNT] = {1, 8, 32, DEFAULT_MAX_TOKENS}; /* the last: M */
static char bucket_name[BUCKET_COUNT][32] = {"1", "2-8", "9-32", "33-64"};
static const char *const series_name[SERIES_COUNT] = {"eager_host_us", "graph_host_us",
                                                      "eager_gpu_us", "graph_gpu_us",
                                                      "eager_submit_us", "graph_submit_us"};
static const char *const series_label[SERIES_COUNT] = {"eager host", "graph host", "eager GPU",
                                                       "graph GPU", "eager submit", "graph submit"};

void set_max_tokens(size_t max_tokens) {
  bucket_top[BUCKET_COUNT - 1] = max_tokens;
  snprintf(bucket_name[BUCKET_COUNT - 1], sizeof bucket_name[0], "%zu-%zu", bucket_lo[BUCKET_COUNT - 1],
           max_tokens);
}

size_t bucket_hi(int bucket) { return bucket_top[bucket]; }

int bucket_of(size_t tokens) {
  for (int b = 0; b < BUCKET_COUNT - 1; ++b)
    if (tokens <= bucket_top[b]) return b;
  return BUCKET_COUNT - 1;
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
    qsort(scratch, k, sizeof *scratch, ex_cmp_double);
    out->median[s] = k % 2 ? scratch[k / 2] : 0.5 * (scratch[k / 2 - 1] + scratch[k / 2]);
    out->mean[s] = sum / (double)k;
    out->p90[s] = ex_percentile(scratch, k, 0.90);
    out->p99[s] = ex_percentile(scratch, k, 0.99);
    out->max[s] = scratch[k - 1];
  }
}


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
           ex_ratio(s->median[SERIES_EAGER_HOST], s->median[SERIES_GRAPH_HOST]),
           s->median[SERIES_EAGER_GPU], s->median[SERIES_GRAPH_GPU],
           ex_ratio(s->median[SERIES_EAGER_GPU], s->median[SERIES_GRAPH_GPU]));
  }
  printf("(medians per step; host = wall time to enqueue + synchronize, GPU = events)\n");

  static const int order[SERIES_COUNT] = {SERIES_EAGER_GPU, SERIES_GRAPH_GPU, SERIES_EAGER_HOST,
                                          SERIES_GRAPH_HOST, SERIES_EAGER_SUBMIT, SERIES_GRAPH_SUBMIT};
  printf("\ntail, all %zu steps (us per step)\n%-13s | %9s %9s %9s %9s %9s\n", all->steps, "series", "p50",
         "p90", "p99", "max", "mean");
  for (int i = 0; i < SERIES_COUNT; ++i) {
    const int k = order[i];
    printf("%-13s | %9.1f %9.1f %9.1f %9.1f %9.1f\n", series_label[k], all->median[k], all->p90[k],
           all->p99[k], all->max[k], all->mean[k]);
  }
  printf("(submit = host time of the enqueueing calls alone; p99 of fewer than 100 steps lies between the two "
         "largest; per-bucket tails in --json)\n");
}

void print_prepare(const prepare_report *p, bool graphs_disabled) {
  if (graphs_disabled) {
    printf("decode_loop: prepare 1..%zu: graphs disabled (MDR_DISABLE_GRAPHS=1): the graph path is eager\n",
           p->counts);
    return;
  }
  const double per_graph = p->graphs ? p->wall_ms / (double)p->graphs : 0.0;
  printf("decode_loop: prepare 1..%zu: %zu graphs in %.1f ms (%.3f ms per graph; capture + instantiate + "
         "upload %.1f ms)\n",
         p->counts, p->graphs, p->wall_ms, per_graph, p->capture_ms);
  if (p->graphs) {
    if (p->memory_measured)
      printf("decode_loop: per graph: %.1f KiB device memory (%.1f MiB in all, measured in whole pages), %.1f "
             "nodes\n",
             (double)p->graph_bytes / 1024.0 / (double)p->graphs, (double)p->graph_bytes / 1048576.0,
             (double)p->graph_nodes / (double)p->graphs);
    else
      printf("decode_loop: per graph: %.1f nodes (device memory not measured by this backend)\n",
             (double)p->graph_nodes / (double)p->graphs);
  }
  const double goal_ms = PREPARE_GOAL_S * 1e3 / PREPARE_GOAL_COUNTS;
  printf("decode_loop: capture-cost goal: %d counts in <= %.1f s, i.e. <= %.3f ms per graph: %s (%.3f ms per "
         "graph%s)\n",
         PREPARE_GOAL_COUNTS, PREPARE_GOAL_S, goal_ms, per_graph <= goal_ms ? "met" : "NOT met", per_graph,
         p->counts == PREPARE_GOAL_COUNTS ? "" : ", extrapolated from this run's counts");
}

int write_json(const char *path, const options *o, const model *m, const summary per[BUCKET_COUNT],
               const summary *all, size_t mismatches, const mdr_graph_stats *gs,
               const prepare_report *prep) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "decode_loop: cannot write %s: %s\n", path, strerror(errno));
    return -1;
  }
  fprintf(f, "{\n  \"steps\": %zu,\n  \"seed\": %" PRIu64 ",\n", o->steps, o->seed);
  fprintf(f, "  \"mode\": \"%s\",\n  \"zero\": \"%s\",\n  \"pad_kernels\": %zu,\n",
          o->device_fed ? "device-fed" : "host-ids", o->zero == MDR_ZERO_FUSED ? "fused" : "memset", o->pad_kernels);
  fprintf(f,
          "  \"model\": {\"hidden\": %zu, \"vocab\": %zu, \"qkv_dim\": %zu, \"expert_slots\": %zu,"
          " \"max_tokens\": %zu},\n",
          m->hidden, m->vocab, m->qkv_dim, m->experts, m->max_tokens);
  fprintf(f, "  \"mismatched_steps\": %zu,\n", mismatches);
  fprintf(f,
          "  \"graph_stats\": {\"captures\": %" PRIu64 ", \"hits\": %" PRIu64
          ", \"misses\": %" PRIu64 ", \"eager_steps\": %" PRIu64 ", \"capture_us\": %.1f"
          ", \"device_steps\": %" PRIu64 ", \"graphs\": %zu, \"graph_bytes\": %" PRIu64
          ", \"graph_nodes\": %zu, \"graphs_disabled\": %d},\n",
          gs->captures, gs->hits, gs->misses, gs->eager_steps, gs->capture_us, gs->device_steps, gs->graphs,
          gs->graph_bytes, gs->graph_nodes, gs->graphs_disabled);
  fprintf(f,
          "  \"prepare\": {\"counts\": %zu, \"graphs\": %zu, \"wall_ms\": %.3f, \"ms_per_graph\": %.4f"
          ", \"capture_ms\": %.3f, \"graph_bytes\": %" PRIu64 ", \"graph_nodes\": %zu"
          ", \"bytes_per_graph\": %.1f, \"nodes_per_graph\": %.2f, \"memory_measured\": %s},\n",
          prep->counts, prep->graphs, prep->wall_ms, prep->graphs ? prep->wall_ms / (double)prep->graphs : 0.0,
          prep->capture_ms, prep->graph_bytes, prep->graph_nodes,
          prep->graphs ? (double)prep->graph_bytes / (double)prep->graphs : 0.0,
          prep->graphs ? (double)prep->graph_nodes / (double)prep->graphs : 0.0,
          prep->memory_measured ? "true" : "false");
  fprintf(f, "  \"buckets\": [\n");
  for (int i = 0; i <= BUCKET_COUNT; ++i) {
    const summary *s = i < BUCKET_COUNT ? &per[i] : all;
    fprintf(f, "    {\"tokens\": \"%s\", \"steps\": %zu", i < BUCKET_COUNT ? bucket_name[i] : "all",
            s->steps);
    for (int k = 0; k < SERIES_COUNT; ++k)
      fprintf(f,
              ", \"%s_median\": %.2f, \"%s_mean\": %.2f, \"%s_p90\": %.2f, \"%s_p99\": %.2f"
              ", \"%s_max\": %.2f",
              series_name[k], s->median[k], series_name[k], s->mean[k], series_name[k], s->p90[k],
              series_name[k], s->p99[k], series_name[k], s->max[k]);
    fprintf(f, ", \"host_speedup\": %.3f, \"gpu_speedup\": %.3f}%s\n",
            ex_ratio(s->median[SERIES_EAGER_HOST], s->median[SERIES_GRAPH_HOST]),
            ex_ratio(s->median[SERIES_EAGER_GPU], s->median[SERIES_GRAPH_GPU]),
            i < BUCKET_COUNT ? "," : "");
  }
  fprintf(f, "  ]\n}\n");
  if (fclose(f) != 0) {
    fprintf(stderr, "decode_loop: writing %s failed: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}
