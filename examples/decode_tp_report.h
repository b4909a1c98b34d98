/* mdr example — the TP decode loop's interface to its user: the command
 * line, the per-step samples and their statistics, the arithmetic of the
 * TP=1 tolerance check, the table printed at the end and the JSON written
 * with --json. */
#ifndef MDR_EXAMPLE_DECODE_TP_REPORT_H
#define MDR_EXAMPLE_DECODE_TP_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include <mdr/mdr.h>

#include "decode_tp_model.h"

enum { EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_SKIP = 77 }; /* 77: CTest's "skipped" */

typedef struct options {
  size_t steps;
  uint64_t seed;
  const char *json;
} options;

/* Read the command line (--help exits 0). 0, or -1 after a message and the
 * usage on stderr. */
int parse_options(int argc, char **argv, options *o);

/* ---- the TP=1 tolerance (check b) -----------------------------------------
 *
 * TP=2 cannot be bit-identical to TP=1: each row-parallel GEMM (O, down)
 * rounds its partial sum to BF16 on each rank, and the all-reduce rounds
 * their sum to BF16 again, where TP=1 rounds one F32 sum once. That is two
 * more BF16 roundings (unit roundoff u = 2^-8) per block, 8 blocks, and
 * every later rounding may then land on the other side. Per row of logits
 * (V values) the check is:
 *
 *   ||tp2 - tp1||_2 / ||tp1||_2        <= TOL_REL_L2      = 2^-5 (8 u)
 *   max |tp2 - tp1| / rms(tp1 row)     <= TOL_ABS_OVER_RMS = 2^-3
 *
 * A CPU emulation of this model (the same weights, BF16 rounding after
 * every GEMM, norm, add and all-reduce; 5 seeds, 8-64 tokens) gives
 * 0.0072-0.0079 and 0.026-0.035: about 2 u, the same size as TP=1's own
 * distance from F32 math (0.0063 relative). The limits leave a margin of 4x;
 * a lost or doubled partial sum, a wrong slice or a reduce of too few rows
 * moves the logits by tens of percent. */
#define TOL_REL_L2 0.03125
#define TOL_ABS_OVER_RMS 0.125

/* Worst, over `rows` rows of `width` BF16 values, of the relative L2 error
 * of `got` against `ref`, and of max |got - ref| over the rms of ref's row. */
void compare_rows(const uint16_t *got, const uint16_t *ref, size_t rows, size_t width,
                  double *rel_l2, double *abs_over_rms);

/* Number of differing BF16 values; *first = index of the first one (n when none). */
size_t count_diffs(const uint16_t *a, const uint16_t *b, size_t n, size_t *first);

/* ---- samples ----------------------------------------------------------------- */

/* Token-count buckets: [bucket_lo, bucket_hi] each, 1 .. TP_MAX_TOKENS in all. */
enum { BUCKET_COUNT = 4 };
extern const size_t bucket_lo[BUCKET_COUNT];
extern const size_t bucket_hi[BUCKET_COUNT];
int bucket_of(size_t tokens);

/* Who ran: TP=2 rank 0 (GPU 0), TP=2 rank 1 (GPU 1), the TP=1 reference
 * (GPU 0, no eager series). */
enum { RUN_TP2_R0, RUN_TP2_R1, RUN_TP1, RUN_COUNT };
/* Per step, µs: GPU by events around the step, CPU = the enqueue (the
 * mdr_graph_cache_step call; for eager, zeroing + id copy + body). */
enum { SERIES_GRAPH_GPU, SERIES_GRAPH_CPU, SERIES_EAGER_GPU, SERIES_EAGER_CPU, SERIES_COUNT };

typedef struct quantiles {
  size_t n;
  double median, p90, p99, max;
} quantiles;

/* Quantiles of x[i] for the i < n with bucket[i] == which (which < 0: every
 * i; bucket may then be NULL); percentiles linear between ranks. scratch holds n
 * doubles. */
void quantiles_of(const double *x, const int *bucket, size_t n, int which, double *scratch,
                  quantiles *q);

typedef struct tp_checks {
  size_t eager_mismatched[TP_RANKS]; /* (a) steps whose graph logits differ from eager, per rank */
  size_t rank_mismatched;            /* (c) steps whose logits differ between the ranks */
  size_t tol_failed;                 /* (b) steps with a row out of tolerance of TP=1 */
  double worst_rel_l2, worst_abs_over_rms;
} tp_checks;

/* What a run leaves for the report; filled by the rank threads. */
typedef struct tp_report {
  size_t steps;
  uint64_t seed;
  const char *window;                                /* the arenas' window kind */
  double *samples[RUN_COUNT][SERIES_COUNT];          /* [step]; NULL: not sampled */
  int *bucket;                                       /* [step] */
  double capture_us[RUN_COUNT][TP_MAX_TOKENS];       /* per count (index count - 1) */
  mdr_graph_stats stats[RUN_COUNT];
  tp_checks checks;
} tp_report;

/* Allocate the per-step arrays (TP1 has no eager series). 0 or -1. */
int report_alloc(tp_report *r, size_t steps);
void report_free(tp_report *r);

/* The tables on stdout. scratch holds steps doubles. */
void print_report(const tp_report *r, double *scratch);

/* --json: settings, model shape, checks, per-step quantiles per run and
 * series, per-bucket medians, capture µs per count, cache stats. 0 or -1
 * (message on stderr). */
int write_json(const char *path, const tp_report *r, double *scratch);

#endif
