/* mdr example — the decode loop's interface to its user: the command line,
 * the per-step samples and their statistics by token-count bucket, the
 * table printed at the end and the JSON written with --json. */
#ifndef MDR_EXAMPLE_DECODE_REPORT_H
#define MDR_EXAMPLE_DECODE_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <mdr/mdr.h>

#include "decode_model.h"

enum { EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_SKIP = 77 }; /* 77: CTest's "skipped" */

typedef struct options {
  size_t steps;
  uint64_t seed;
  const char *json;
  bool device_fed;    /* --device-fed: each step's ids are the previous step's argmax, on the device */
  size_t max_tokens;  /* --max-tokens: the arena's M (DEFAULT_MAX_TOKENS) */
  size_t prepare_all; /* --prepare-all: counts 1..this captured at start-up (default: M) */
  size_t pad_kernels; /* --pad-kernels: empty kernels appended to the body */
  mdr_zero_strategy zero; /* --zero: MDR_ZERO_MEMSET (default) or MDR_ZERO_FUSED, both paths */
} options;

/* Read the command line (--help exits 0). 0, or -1 after a message and the
 * usage on stderr. */
int parse_options(int argc, char **argv, options *o);

/* Token-count buckets: [bucket_lo, bucket_hi] each; the last one ends at
 * M, the run's max_tokens (set it with set_max_tokens before use). */
enum { BUCKET_COUNT = 4 };
extern const size_t bucket_lo[BUCKET_COUNT];
void set_max_tokens(size_t max_tokens);
size_t bucket_hi(int bucket);
int bucket_of(size_t tokens);

/* The series sampled per step, µs: host = wall time to enqueue and
 * synchronize, submit = host time of the enqueueing calls alone, GPU =
 * events around the step's work. */
enum {
  SERIES_EAGER_HOST, SERIES_GRAPH_HOST, SERIES_EAGER_GPU, SERIES_GRAPH_GPU,
  SERIES_EAGER_SUBMIT, SERIES_GRAPH_SUBMIT, SERIES_COUNT
};

typedef struct summary {
  size_t steps;
  double median[SERIES_COUNT], mean[SERIES_COUNT]; /* median = p50 */
  double p90[SERIES_COUNT], p99[SERIES_COUNT], max[SERIES_COUNT];
} summary;

/* The start-up prepare (--prepare-all): what it captured and what it cost. */
typedef struct prepare_report {
  size_t counts;        /* 1 .. counts were prepared */
  double wall_ms;       /* prepare + synchronize, host wall clock */
  double capture_ms;    /* the cache's capture_us delta, ms */
  size_t graphs;        /* live graphs after it */
  uint64_t graph_bytes; /* device memory of the live graphs (mdr_graph_stats.graph_bytes) */
  size_t graph_nodes;   /* their nodes */
  int memory_measured;  /* the backend measured graph_bytes */
} prepare_report;

/* samples[series][step]; bucket[step]; which: a bucket, or -1 for every
 * step. scratch holds n doubles. */
void summarize(double *const samples[SERIES_COUNT], const int *bucket, size_t n, int which,
               double *scratch, summary *out);

/* The per-bucket table (medians, speedups), then the tail table (p50, p90,
 * p99, max of every series over all steps) on stdout; fills per[] and *all. */
void print_report(double *const samples[SERIES_COUNT], const int *bucket, size_t steps,
                  double *scratch, summary per[BUCKET_COUNT], summary *all);

/* The start-up prepare's line(s) on stdout. */
void print_prepare(const prepare_report *p, bool graphs_disabled);

/* --json: the run's settings, model shape, mismatches, cache stats, the
 * start-up prepare and the per-bucket medians, means and tails. 0 or -1
 * (message on stderr). */
int write_json(const char *path, const options *o, const model *m, const summary per[BUCKET_COUNT],
               const summary *all, size_t mismatches, const mdr_graph_stats *gs,
               const prepare_report *prep);

#endif
