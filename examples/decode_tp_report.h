/* mdr example — the TP decode loop's interface to its user: the command
 * line, the per-step samples and their statistics, the arithmetic of the
 * TP=1 tolerance check, the table printed at the end and the JSON written
 * with --json. */
#ifndef MDR_EXAMPLE_DECODE_TP_REPORT_H
#define MDR_EXAMPLE_DECODE_TP_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <mdr/mdr.h>

#include "decode_tp_model.h"

enum { EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_SKIP = 77 }; /* 77: CTest's "skipped" */

/* --all-reduce: which TP=2 variants run (AR_OPT_DEFAULT: both when mdr's
 * kernels run on the arenas, else NCCL alone, with the reason printed). */
typedef enum ar_option { AR_OPT_DEFAULT, AR_OPT_NCCL, AR_OPT_MDR, AR_OPT_BOTH } ar_option;

typedef struct options {
  size_t steps;
  uint64_t seed;
  const char *json;
  ar_option all_reduce;
  bool dynamic; /* --dynamic: also a DYNAMIC graph cache (body_dynamic, counted all-reduces) */
} options;

/* Read the command line (--help exits 0). 0, or -1 after a message and the
 * usage on stderr. */
int parse_options(int argc, char **argv, options *o);
const char *ar_option_name(ar_option a); /* "default", "nccl", "mdr", "both" */

/* ---- the TP=2 variants ------------------------------------------------------
 *
 * How a step's all-reduces run; each enabled variant is a graph cache of
 * its own on every rank (all on the rank's one arena, model and stream),
 * and every step runs on each of them:
 *   VAR_NCCL     EXACT graphs; mdr_all_reduce with MDR_ALL_REDUCE_NCCL, then
 *                the example's residual-add kernel;
 *   VAR_MDR      EXACT graphs; MDR_ALL_REDUCE_AUTO (mdr's one-shot / two-shot
 *                kernels where they run) with the residual add fused
 *                (desc.residual = hidden_states);
 *   VAR_DYNAMIC  one MDR_GRAPH_DYNAMIC graph (tp_body_dynamic): the
 *                all-reduces read the count at count_ptr; the algorithm and
 *                residual handling of VAR_MDR when it runs, else VAR_NCCL's
 *                (its "EXACT twin", whose logits it must equal). No eager
 *                path. */
enum { VAR_NCCL, VAR_MDR, VAR_DYNAMIC, VAR_COUNT };
extern const char *const variant_name[VAR_COUNT]; /* "nccl", "mdr", "dynamic" */

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

/* Who ran: variant v on rank r is run RUN_OF(v, r) (GPU r); the TP=1
 * reference (GPU 0, graphs only) is RUN_TP1. */
#define RUN_OF(v, r) ((v) * TP_RANKS + (r))
enum { RUN_TP1 = VAR_COUNT * TP_RANKS, RUN_COUNT };
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

/* The checks of one variant (any nonzero count fails the run). */
typedef struct tp_checks {
  size_t eager_mismatched[TP_RANKS]; /* (a) steps whose graph logits differ from eager, per rank */
  size_t rank_mismatched;            /* (c) steps whose logits differ between the ranks */
  size_t tol_failed;                 /* (b) steps with a row out of tolerance of TP=1 */
  double worst_rel_l2, worst_abs_over_rms;
  size_t nccl_mismatched[TP_RANKS];  /* (d) steps whose logits (graph, and eager where run)
                                        differ from VAR_NCCL's on the same rank */
  size_t exact_mismatched[TP_RANKS]; /* (e) VAR_DYNAMIC: steps whose logits differ from its EXACT twin's */
} tp_checks;

/* What a run leaves for the report; filled by main and the rank threads. */
typedef struct tp_report {
  size_t steps;
  uint64_t seed;
  const char *window;                          /* the arenas' window kind */
  ar_option requested;                         /* --all-reduce as given */
  int mdr_kernels;                             /* mdr_all_reduce_kernels on every rank's arena */
  char ar_note[320];                           /* why not both / why mdr's falls back; "" if nothing */
  bool enabled[VAR_COUNT];
  mdr_all_reduce_algo algo[VAR_COUNT];                 /* the descriptors' algo */
  bool fused_residual[VAR_COUNT];
  int twin;                                    /* VAR_DYNAMIC's EXACT twin (VAR_MDR or VAR_NCCL) */
  mdr_all_reduce_algo auto_choice[TP_MAX_TOKENS];      /* AUTO's pick at t rows (index t - 1) */
  mdr_all_reduce_algo auto_choice_counted;             /* ... with a device-read count */
  int gemm_one_algo_tiles, gemm_tiles;         /* --dynamic: GEMM row tiles on the M-row algorithm */
  double *samples[RUN_COUNT][SERIES_COUNT];    /* [step]; NULL: not sampled */
  int *bucket;                                 /* [step] */
  double capture_us[RUN_COUNT][TP_MAX_TOKENS]; /* per count (index count - 1); DYNAMIC: [0] only */
  mdr_graph_stats stats[RUN_COUNT];
  tp_checks checks[VAR_COUNT];
} tp_report;

/* 1 when run `run` took part (an enabled variant, or TP=1). */
int report_has_run(const tp_report *r, int run);
/* Every check of every enabled variant passed, and every step of every run
 * was a graph replay (*graphs_disabled, may be NULL: MDR_DISABLE_GRAPHS
 * made the graph path eager; the replay check is then moot). */
bool report_ok(const tp_report *r, bool *graphs_disabled);

/* Allocate the per-step arrays of the enabled variants (set r->enabled
 * first; TP1 and VAR_DYNAMIC have no eager series). 0 or -1. */
int report_alloc(tp_report *r, size_t steps);
void report_free(tp_report *r);

/* The tables on stdout. scratch holds steps doubles. */
void print_report(const tp_report *r, double *scratch);

/* The checks' lines on stdout; returns report_ok. */
bool print_checks(const tp_report *r);

/* --json: settings, model shape, the all-reduce variants (their summary
 * row, checks), per-step quantiles per run and series, per-bucket medians,
 * capture µs per count, cache stats. 0 or -1 (message on stderr). */
int write_json(const char *path, const tp_report *r, double *scratch);

#endif
