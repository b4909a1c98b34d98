/* mdr example — the decode loop's interface to its user: the command line,
 * the per-step samples and their statistics by token-count bucket, the
 * table printed at the end and the JSON written with --json. */
#ifndef MDR_EXAMPLE_DECODE_REPORT_H
#define MDR_EXAMPLE_DECODE_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include <mdr/mdr.h>

#include "decode_model.h"

enum { EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_SKIP = 77 }; /* 77: CTest's "skipped" */

typedef struct options {
  size_t steps;
  uint64_t seed;
  const char *json;
} options;

/* Read the command line (--help exits 0). 0, or -1 after a message and the
 * usage on stderr. */
int parse_options(int argc, char **argv, options *o);

/* Token-count buckets: [bucket_lo, bucket_hi] each, 1 .. MAX_TOKENS in all. */
enum { BUCKET_COUNT = 4 };
extern const size_t bucket_lo[BUCKET_COUNT];
extern const size_t bucket_hi[BUCKET_COUNT];
int bucket_of(size_t tokens);

/* The four series sampled per step, µs. */
enum { SERIES_EAGER_HOST, SERIES_GRAPH_HOST, SERIES_EAGER_GPU, SERIES_GRAPH_GPU, SERIES_COUNT };

typedef struct summary {
  size_t steps;
  double median[SERIES_COUNT], mean[SERIES_COUNT];
} summary;

/* samples[series][step]; bucket[step]; which: a bucket, or -1 for every
 * step. scratch holds n doubles. */
void summarize(double *const samples[SERIES_COUNT], const int *bucket, size_t n, int which,
               double *scratch, summary *out);

/* The per-bucket table (medians, speedups) on stdout; fills per[] and *all. */
void print_report(double *const samples[SERIES_COUNT], const int *bucket, size_t steps,
                  double *scratch, summary per[BUCKET_COUNT], summary *all);

/* --json: the run's settings, model shape, mismatches, cache stats and the
 * per-bucket medians and means. 0 or -1 (message on stderr). */
int write_json(const char *path, const options *o, const model *m, const summary per[BUCKET_COUNT],
               const summary *all, size_t mismatches, const mdr_graph_stats *gs);

#endif
