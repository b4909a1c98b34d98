/* bench_tp.h — private header of mdr-bench-tp, the two-GPU all-reduce
 * benchmark (bench/README.md, section "mdr-bench-tp"). Not installed, not
 * part of the mdr API.
 *
 *   mdr_bench_tp.c          the driver: device check, communicators, the rank
 *                           threads, the watchdog, main
 *   mdr_bench_tp_options.c  command line (exit 2 on every refusal)
 *   mdr_bench_tp_rank.c     one rank's thread: buffers, the eight paths,
 *                           validation, GPU / CPU / capture timing, the soak
 *   mdr_bench_tp_fail.c     failure handling (one line, then _exit) and the watchdog
 *   mdr_bench_tp_report.c   legend, tables, floors, best mdr path, xexact,
 *                           crossover, headline, the closing table,
 *                           results.json, results.csv, capture.csv,
 *                           soak.json, the output folder
 *   mdr_bench_tp_norm.c     --norm: the fused all-reduce + residual + RMSNorm against the
 *                           unfused chain and NCCL + RMSNorm; norm.csv, norm.json
 *   mdr_bench_tp_barrier.c  --barrier: mdr's block barrier against NCCL's LSA barrier;
 *                           barrier.csv, barrier.json
 *   mdr_bench_tp_cuda.cu    the blocker kernel; the soak's fill / check kernels
 *   mdr_bench_tp_barrier.cu --barrier's NCCL side: the device communicator and the
 *                           LSA barrier kernel (NCCL's device API)
 *
 * Statistics, JSON/CSV number formatting, now_us and xmalloc come from
 * bench_util.c (bench.h); the git revision and build type from
 * bench_version.c. Failures never go through bench_util's die (exit): a
 * failing rank thread calls tp_die, which flushes and _exits, so that the
 * other rank, possibly waiting inside NCCL, cannot hold the process. */
#ifndef MDR_BENCH_TP_H
#define MDR_BENCH_TP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bench.h" /* summary, summarize, json_*, csv_num, fmt_num, now_us, xmalloc, mkdir_p, open_out */

#if defined(MDR_HAVE_CUDA) && defined(MDR_BENCH_TP_HAVE_NCCL)
#define TP_GPU 1 /* this build can run: CUDA and NCCL */
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#endif

enum {
  TP_RANKS = 2,
  TP_EXIT_USAGE = 2,       /* a refused command line (and --out holding results) */
  TP_EXIT_SKIP = 77,       /* fewer than two GPUs, or no NCCL: CTest's "skipped" */
  TP_DEFAULT_REPS = 200,
  TP_QUICK_REPS = 30,
  TP_MAX_REPS = 100000,
  TP_WARMUP = 10,          /* untimed operations before each path's timing */
  TP_K = 16,               /* all-reduces back to back in the "K-batch" figure */
  TP_DRAIN_EVERY = 4,      /* blocked reps between two stream drains (mdr's 8 staging slots never fill) */
  TP_CPU_DRAIN = 4,        /* CPU-timed steps between two drains */
  TP_MAX_COUNTS = 64,
  TP_SIZE_ROW_BYTES = 2048, /* the sizes sweep: rows of 1024 bf16 */
  TP_MAX_TOKENS = 65536,
  TP_NORM_MAX_TOKENS = 4096, /* --norm-tokens: at most this many */
  TP_FIRST_TOKEN_ID = 1000,
  TP_WATCHDOG_S = 90,      /* no progress for this long: the run is declared stuck and ends (exit 1) */
  TP_SYNC_TIMEOUT_S = 60,  /* one stream drain longer than this: exit 1, naming the rank and the phase */
  TP_SOAK_CHECK_EVERY = 1000, /* --soak: replays between two host checks (drain, read back, epoch) */
  TP_SOAK_MAX = 1000000000,   /* --soak: at most this many replays (well under 2^32: the epoch check is mod 2^32) */
  /* --barrier: barriers per block in one timed launch: more than the
   * sweeps' TP_K, so that a launch's start and end (a few µs, the same for
   * both paths) weigh little in the figure per barrier */
  TP_BARRIER_K = 64,
  TP_BARRIER_CHECK = 4096, /* --barrier: checked barriers per grid and path before timing */
};
#define TP_MAX_SIZE_BYTES ((size_t)512 << 20)
#define TP_BLOCKER_TIMEOUT_NS 2000000000ull /* a blocker never holds a stream longer (2 s) */
#define TP_PRESET "glm-5.3-flash-tp2"       /* the tokens sweep's hidden size */
#define TP_SOAK_DEFAULT_BYTES ((size_t)8 << 10) /* --soak-size default: 4 rows of 2 KiB */
#define TP_XEXACT_GOAL 1.15                 /* mdr-dyn / the EXACT path: the goal at TP_XEXACT_TOKENS */
#define TP_XEXACT_TOKENS {1, 2, 8, 64, 512, 4096}
/* The arena buffer mdr reduces: M rows, bf16, and outside every zero plan,
 * so a step's graph is the id upload and the all-reduce only (the graph
 * cache clears hidden_states / residual / moe_output at the start of each
 * step, which would leave nothing to validate). */
#define TP_BUFFER MDR_BUF_LORA_DELTA

typedef enum tp_path {
  TP_NCCL_EAGER,  /* ncclAllReduce per op on cudaMalloc memory */
  TP_NCCL_GRAPH,  /* the same captured in a CUDA graph, replayed */
  TP_NCCL_WINDOW, /* ncclMemAlloc + ncclCommWindowRegister(SYMMETRIC), captured */
  TP_MDR,         /* mdr_all_reduce (AUTO, mdr_all_reduce_desc_make) in an EXACT graph cache body, mdr_graph_cache_step */
  TP_MDR_DEV,     /* the same caches, mdr_graph_cache_step_device (ids already in token_ids: no host read) */
  TP_MDR_1SHOT,   /* mdr_all_reduce, MDR_ALL_REDUCE_ONE_SHOT, EXACT cache, device steps */
  TP_MDR_2SHOT,   /* mdr_all_reduce, MDR_ALL_REDUCE_TWO_SHOT, EXACT cache, device steps */
  TP_MDR_DYN,     /* a DYNAMIC cache: mdr_all_reduce, AUTO, count_ptr, max_batch_tokens; device steps */
  TP_PATH_COUNT
} tp_path;
extern const char *const k_tp_path_names[TP_PATH_COUNT];
/* Paths of mdr (a graph cache), and those of mdr's exact counts (the "best mdr path" of a size). */
static inline bool tp_is_mdr(tp_path p) { return p >= TP_MDR; }
static inline bool tp_is_mdr_exact(tp_path p) { return p >= TP_MDR && p <= TP_MDR_2SHOT; }

typedef enum tp_sweep_kind { TP_SWEEP_SIZES, TP_SWEEP_TOKENS, TP_SWEEP_COUNT } tp_sweep_kind;
extern const char *const k_tp_sweep_names[TP_SWEEP_COUNT];

/* ---- failure handling (mdr_bench_tp.c) ---- */

/* "mdr-bench-tp: <message>" on stderr, stdout flushed, _exit(code). */
BENCH_NORETURN void tp_exit(int code, const char *fmt, ...) BENCH_PRINTF(2, 3);
#define tp_die(...) tp_exit(1, __VA_ARGS__)
#ifdef TP_GPU
/* The watchdog thread (mdr_bench_tp_fail.c): ends a run that stops making progress. */
void *tp_watchdog_main(void *arg);
#endif
void tp_check_mdr(mdr_backend *b, mdr_status st, const char *call, const char *file, int line);
#define TP_MDR(b, call) tp_check_mdr((b), (call), #call, __FILE__, __LINE__)
#ifdef TP_GPU
void tp_check_cuda(cudaError_t e, const char *call, const char *file, int line);
void tp_check_nccl(ncclComm_t comm, ncclResult_t r, const char *call, const char *file, int line);
#define TP_CUDA(call) tp_check_cuda((call), #call, __FILE__, __LINE__)
#define TP_NCCL(comm, call) tp_check_nccl((comm), (call), #call, __FILE__, __LINE__)
#endif
/* The watchdog's view: bump on progress, name what runs now. */
void tp_progress(const char *phase);

/* ---- options (mdr_bench_tp_options.c) ---- */

typedef struct tp_options {
  size_t reps;
  size_t sizes[TP_MAX_COUNTS], n_sizes;   /* bytes; n 0: sweep off */
  size_t tokens[TP_MAX_COUNTS], n_tokens; /* rows; n 0: sweep off */
  bool path_on[TP_PATH_COUNT];
  const char *out_dir; /* NULL: a fresh bench-out/tp-<stamp>/ */
  bool force, quick;
  bool set_reps, set_sizes, set_tokens, set_paths;
  /* --soak N: N replays of one EXACT graph holding one mdr all-reduce
   * (instead of the sweeps); 0: off */
  size_t soak;
  mdr_all_reduce_algo soak_algo; /* --soak-algo: MDR_ALL_REDUCE_AUTO, _ONE_SHOT or _TWO_SHOT */
  size_t soak_bytes;     /* --soak-size */
  bool set_soak_algo, set_soak_size;
  /* --norm: the fused all-reduce + residual + RMSNorm against the unfused
   * chain and NCCL + RMSNorm (instead of the sweeps; mdr_bench_tp_norm.c) */
  bool norm;
  size_t norm_tokens[TP_MAX_COUNTS], n_norm_tokens; /* --norm-tokens */
  size_t norm_hidden[TP_MAX_COUNTS], n_norm_hidden; /* --norm-hidden: elements (bf16) a row */
  bool set_norm_tokens, set_norm_hidden;
  /* --barrier: mdr's block barrier against NCCL's LSA barrier (instead of
   * the sweeps; mdr_bench_tp_barrier.c) */
  bool barrier;
  int argc;
  char **argv;
} tp_options;

/* Read the command line and fill the defaults; --help / --version exit 0,
 * every refusal exits TP_EXIT_USAGE with one line on stderr. */
void tp_parse_options(int argc, char **argv, tp_options *o);

/* ---- what was measured ---- */

typedef struct tp_sweep {
  tp_sweep_kind kind;
  size_t row_bytes;           /* bytes of one row (bf16) */
  size_t rows[TP_MAX_COUNTS]; /* the row counts of the sweep, in order */
  size_t n;
  size_t m;                   /* the largest row count: every buffer's rows */
  /* filled by the ranks */
  mdr_window mdr_window[TP_RANKS];
  size_t mdr_buffer_offset;   /* TP_BUFFER's offset in the arena slab */
  bool ar_kernels;            /* mdr_all_reduce_kernels(arena) on both ranks */
  char ar_kernels_note[512];  /* why not (the backend's last error after the arena's create) */
  bool nccl_window[TP_RANKS]; /* ncclCommWindowRegister gave a window */
} tp_sweep;

typedef struct tp_case {
  tp_sweep_kind sweep;
  size_t rows, bytes;
  tp_path path;
  bool measured;
  bool skipped;              /* not run: skip_reason says why (the same on both ranks) */
  char skip_reason[160];
  mdr_all_reduce_algo auto_algo;     /* mdr_all_reduce_choice: what AUTO runs at this size */
  mdr_all_reduce_algo auto_counted;  /* the same with counted = 1 (mdr-dyn): MDR_ALL_REDUCE_AUTO = mdr's kernel picks on the device */
  summary gpu;               /* µs, one all-reduce between events; per rep the slower rank */
  double gpu_rank_med[TP_RANKS];
  summary batch;             /* µs per all-reduce, TP_K back to back; per rep the slower rank, / TP_K */
  summary cpu[TP_RANKS];     /* µs of the submitting call, per rank */
  double build_us[TP_RANKS]; /* graph paths: capture + instantiate + upload of the 1-op graph, µs */
  double floor_us, x_floor, floor_batch_us, x_floor_batch, gbps;
  const char *floor_path;    /* the path that set the floor */
  /* mdr-dyn only: GPU us / the EXACT path's of the same rows (x_exact_batch: K-batch) */
  double x_exact, x_exact_batch;
  const char *exact_path;    /* mdr-graph-dev (device steps, as mdr-dyn), else mdr-graph */
  uint64_t eager_steps;      /* mdr: steps that ran eagerly (expected 0) */
} tp_case;

typedef struct tp_capture {
  tp_sweep_kind sweep;
  size_t rows, bytes;
  double tp_us[TP_RANKS]; /* mdr_graph_stats.capture_us of prepare, body with the all-reduce */
  double single_us;       /* the same body without it, one GPU (rank 0's), plain arena */
} tp_capture;

typedef struct tp_results {
  tp_case *cases;
  size_t n_cases, cap_cases;
  tp_capture *captures;
  size_t n_captures, cap_captures;
} tp_results;

typedef struct tp_run_info {
  char timestamp[32];
  char out_dir[4096];
  char gpu_name[TP_RANKS][256];
  int cc_major[TP_RANKS], cc_minor[TP_RANKS];
  int driver, runtime, nccl_version;
  int p2p[TP_RANKS]; /* cudaDeviceCanAccessPeer rank -> other */
  size_t hidden;     /* the preset's hidden size */
  double t_start_us; /* now_us() at the start */
  double wall_s;
  bool complete;     /* false while the files hold a run in progress (rewritten after every count) */
} tp_run_info;

/* What a soak found (rank 0 fills it; mdr_bench_tp_report.c prints and writes it). */
typedef struct tp_soak_result {
  size_t replays, rows, bytes;
  mdr_all_reduce_algo algo;          /* as asked (--soak-algo) */
  mdr_all_reduce_algo resolved;      /* AUTO: mdr_all_reduce_choice at the soak's rows; else algo */
  uint32_t epoch_start, epoch_end[TP_RANKS];
  uint64_t calls;            /* all-reduce calls made (one per replay) */
  bool wrapped;              /* an epoch read at a check was below the one before it */
  uint64_t checks;           /* host checks (drain, read back every element, read both epochs) */
  uint64_t wrong;            /* wrong elements: the device checker's count (every replay) + the host checks' */
  uint64_t wrong_device, wrong_host, epoch_mismatches;
  double wall_s, us_per_replay;
  bool ok;
} tp_soak_result;

/* ---- the output folder (mdr_bench_tp_files.c) ---- */

/* Refuse (exit TP_EXIT_USAGE) an --out that holds an earlier run's files,
 * unless --force; nothing is created. */
void tp_check_out_dir(const tp_options *o);
/* Create --out, or a fresh bench-out/tp-<stamp>/ (bench-out/tp-latest
 * points to it); fills info->out_dir. */
void tp_make_out_dir(const tp_options *o, tp_run_info *info, const char *stamp);

/* ---- reports (mdr_bench_tp_report.c) ---- */
void tp_print_legend(void);
void tp_print_table_header(void);
/* Floors and ratios of the cases of one (sweep, rows), then their rows and
 * the count's summary line (what AUTO picks, the best mdr path / floor,
 * mdr-dyn / exact). */
void tp_finish_count(tp_case *c, size_t n);
void tp_print_case(const tp_case *c);
void tp_print_count_summary(const tp_case *c, size_t n);
void tp_print_captures(const tp_results *r, tp_sweep_kind s);
void tp_print_headline(const tp_options *o, const tp_run_info *info, const tp_sweep *sw, const tp_results *r);
/* results.json, results.csv, capture.csv (mdr_bench_tp_files.c). */
void tp_write_results(const tp_options *o, const tp_run_info *info, const tp_sweep *sw, const tp_results *r);
/* The report's lookups, shared with the files (mdr_bench_tp_files.c). */
/* The fastest exact mdr path (mdr-graph, -dev, -1shot, -2shot) among cs,
 * by GPU us (batch: K-batch); NULL when none was measured. */
const tp_case *tp_best_mdr(const tp_case *const *cs, size_t n, bool batch);
/* The sweep's row counts, ascending, into out; returns how many. */
size_t tp_sorted_rows(const tp_sweep *w, size_t *out);
/* The cases of (s, rows), one per path, measured or skipped (NULL: path off). */
void tp_cases_of(const tp_results *r, tp_sweep_kind s, size_t rows, const tp_case **out);
/* Any case of (s, rows), measured or skipped (bytes, AUTO's choice). */
const tp_case *tp_any_case(const tp_results *r, tp_sweep_kind s, size_t rows);
/* The smallest size of sweep w whose mdr-2shot K-batch beats mdr-1shot's,
 * among the sizes where both ran: *one, *two (NULL: none); *last: the
 * largest size where both ran (NULL: none). */
void tp_crossover(const tp_results *r, const tp_sweep *w, const tp_case **one, const tp_case **two,
                  const tp_case **last);

/* ---- files (mdr_bench_tp_files.c) ---- */

void tp_print_soak(const tp_soak_result *s);
void tp_write_soak(const tp_options *o, const tp_run_info *info, const tp_soak_result *s);

/* ---- the run (mdr_bench_tp_sweep.c, _rank.c, _soak.c) ---- */

#ifdef TP_GPU
typedef struct tp_shared {
  const tp_options *o;
  tp_sweep *sweeps;        /* TP_SWEEP_COUNT; n == 0: off */
  tp_results *res;         /* written by rank 0 only */
  tp_run_info *info;       /* rank 0 rewrites the files after every count */
  mdr_backend *b[TP_RANKS];
  mdr_comm *comm[TP_RANKS];
  ncclComm_t nccl[TP_RANKS];
  int device[TP_RANKS];
  pthread_barrier_t barrier;
  /* the blocker's words, mapped pinned memory seen by both GPUs: [0] the
   * release generation, [1 + r] rank r's timed-out flag */
  volatile uint32_t *words;
  /* per rank, per rep: µs of the rep (the ranks' samples are combined by rank 0) */
  double *samples[TP_RANKS];
  double build_us[TP_RANKS];
  uint64_t eager[TP_RANKS];
  bool progress_in_place;
  /* both ranks' answers where they must agree (each rank writes its own, reads after a barrier) */
  bool flag[TP_RANKS];
  char note[TP_RANKS][256];
  uint32_t epoch[TP_RANKS];
  uint64_t soak_wrong[TP_RANKS];     /* the last check's wrong elements on the host */
  uint64_t soak_dev_wrong[TP_RANKS]; /* the device checker's count so far */
  tp_soak_result *soak;    /* --soak: rank 0 fills it */
} tp_shared;

/* One rank's thread (pthread start routine); arg is a tp_rank_arg. */
typedef struct tp_rank_arg {
  tp_shared *sh;
  int rank;
} tp_rank_arg;
void *tp_rank_main(void *arg);

/* mdr_bench_tp_cuda.cu: one thread spinning until *release >= generation
 * (mapped pinned memory) or timeout_ns of GPU time; then *timed_out = 1. */
int tp_launch_blocker(cudaStream_t s, const volatile uint32_t *release, uint32_t generation, uint64_t timeout_ns,
                      uint32_t *timed_out);

/* The soak's device state, one per rank (device memory). */
typedef struct tp_soak_state {
  uint32_t gen;       /* replays whose check has run (the fill of the next one uses it) */
  uint32_t wrong;     /* elements the check found wrong, over every replay */
  uint32_t first_bad; /* 1 + the first wrong element's index seen; 0: none */
  uint32_t first_gen; /* gen of that replay */
} tp_soak_state;
/* Rank r's soak input at element i of replay g: an integer in -14..14
 * (sums exact in bf16); shifts by 13 (mod 29) every replay, so a stale
 * result does not pass. mdr_bench_tp_cuda.cu computes the same. */
static inline int tp_soak_value(int r, size_t i, uint32_t g) {
  return (int)((i * 7 + (size_t)r * 11 + (size_t)g * 13) % 29) - 14;
}
/* mdr_bench_tp_cuda.cu, each one launch on s; 0 or a cudaError_t:
 * (st: a tp_soak_state in device memory)
 * fill   buf[0..n_el) = bf16(tp_soak_value(rank, i, st->gen))
 * check  buf[i] == sum over both ranks of tp_soak_value(r, i, st->gen), else
 *        st->wrong++ (and first_bad, first_gen); then st->gen++ (a second,
 *        one-thread launch, after every block has checked) */
int tp_launch_soak_fill(cudaStream_t s, uint16_t *buf, size_t n_el, int rank, const void *st);
int tp_launch_soak_check(cudaStream_t s, const uint16_t *buf, size_t n_el, void *st); /* st: a tp_soak_state */

#if defined(MDR_HAVE_NCCL_DEVICE)
/* --barrier's NCCL side (mdr_bench_tp_barrier.cu): an ncclDevComm of comm
 * made with lsaBarrierCount = grid, no multicast, and a buffer for the
 * check's slots. Create and destroy are collective (every rank at once).
 * 0 or an ncclResult_t. */
typedef struct tp_nccl_barrier tp_nccl_barrier;
int tp_nccl_barrier_create(ncclComm_t comm, unsigned grid, tp_nccl_barrier **out);
int tp_nccl_barrier_destroy(ncclComm_t comm, tp_nccl_barrier *nb);
/* Its world rank and size, and the LSA team's. */
void tp_nccl_barrier_team(const tp_nccl_barrier *nb, int *rank, int *nranks, int *lsa_rank, int *lsa_size);
/* One launch on s: each of `grid` blocks opens one ncclLsaBarrierSession
 * (unicast) on its barrier and syncs it `barriers` times (acq_rel); with
 * wrong, the check of mdr_ar_barrier_run (kernels/all_reduce.h) around
 * each barrier, wrong values added to *wrong (device memory).
 * Capture-safe; 0 or a cudaError_t. */
int tp_nccl_barrier_launch(cudaStream_t s, const tp_nccl_barrier *nb, unsigned barriers, uint32_t *wrong,
                           uint32_t salt);
#endif
#endif

#endif
