/* bench.h — private header of mdr-bench: the types and helpers its files
 * share. Not installed, not part of the mdr API.
 *
 *   mdr_bench.c       the driver: arenas, the sweep, measuring one case, main
 *   bench_options.c   command line: parsing, usage, defaults
 *   bench_runner.c    one strategy's step, its setup, CPU timing
 *   bench_gpu.c       GPU timing: events, the blocker, L2 flush, floors
 *   bench_validate.c  plan helpers and the poison / step / read-back check
 *   bench_report.c    stdout tables, results.json, results.csv, plans.json
 *   bench_headline.c  the headline: the last lines, what wins
 *   bench_util.c      failure handling, statistics, files, JSON/CSV numbers
 *   bench_version.c   what was built: git revision, build type
 *   bench_cuda.cu/.h  the raw kernels (empty, blocker) the library lacks
 *
 * Every mdr call is checked: a failure prints mdr_status_string +
 * mdr_backend_last_error and exits 1 (die). */
#ifndef MDR_BENCH_H
#define MDR_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <mdr/mdr.h>

#ifdef MDR_HAVE_CUDA
#include <cuda_runtime.h>
#endif

/* ---- constants ---- */

#define KIB ((size_t)1024)
#define MIB (KIB * KIB)
#define GIB (MIB * KIB)

enum {
  DEFAULT_M_GPU = 4096,     /* max_batch_tokens on the GPU */
  DEFAULT_M_HOST = 256,     /* ... on the host backend: keeps RAM and time low */
  DEFAULT_SEQ = 65536,      /* max_seq_len */
  DEFAULT_BLOCK = 16,       /* kv_block_size */
  DEFAULT_BATCH = 4,        /* max_batch_size */
  DEFAULT_REPS = 200,       /* timed steps per figure */
  DEFAULT_CPU_REPS = 2000,  /* timed steps per CPU figure with a GPU: a p99 of 20 samples' tail */
  QUICK_REPS = 30,
  ROUNDS = 6,               /* strategies of a case are timed in this many interleaved rounds */
  WARMUP_STEPS = 10,        /* untimed steps before each case */
  CPU_BATCH = 4,            /* steps between drains when timing CPU (< staging slots) */
  CEILING_REPS = 20,        /* memsets timed for the write ceiling */
  MAX_TOKEN_COUNTS = 64,
  MAX_PRESETS = 16,         /* room in options.preset_on */
  GUARD_BYTES = 4096,       /* bytes past a segment checked to be untouched */
  UNTOUCHED_PROBE = 256,    /* head bytes of a buffer outside the plan checked */
  POISON = 0xA5,
  FIRST_TOKEN_ID = 1000,    /* ids of step: FIRST_TOKEN_ID + i */
  INPUT_BLOCKS_PER_SEQ = 128, /* graph-fused-inputs: block-table entries per sequence */
  INPUT_MAX_SEQS = 256,     /* graph-fused-inputs: max_sequences (at most M); a step over t tokens
                               carries min(t, INPUT_MAX_SEQS) sequences */
  N_STEP_INPUTS = 3,        /* graph-fused-inputs: positions, seq_lens, block_table */
  INPUT_BLOCK_TABLE = 2,    /* the block table's index among them */
};

#define FLUSH_BYTES (256 * MIB)        /* > L2 of any current GPU (H200: 50 MB) */
#define VERIFY_CHUNK (16 * MIB)        /* read-back granularity of the validation */
#define BLOCKER_TIMEOUT_NS 2000000000u /* a blocker never holds a stream longer (2 s) */
#define PREPARE_ALL_GOAL_S 0.5         /* goal for prepare of every count 1..M, seconds */

typedef enum strategy {
  STRAT_EAGER_MEMSET, /* the baseline: the seed's memsets + cudaMemcpyAsync */
  STRAT_EAGER_FUSED,  /* one fused kernel + cudaMemcpyAsync */
  STRAT_GRAPH_MEMSET, /* graph cache EXACT: memset nodes + staged upload */
  STRAT_GRAPH_FUSED,  /* graph cache EXACT: one fused node (zero + upload) */
  STRAT_GRAPH_FUSED_DEV, /* the same, the ids already in device memory (step_device) */
  STRAT_GRAPH_DYNAMIC,/* graph cache DYNAMIC (node update): one graph for every count */
  STRAT_GRAPH_DYNAMIC_COUNT, /* DYNAMIC, count read on the device from the slot */
  STRAT_GRAPH_FUSED_INPUTS, /* graph-fused with a decode step's inputs staged beside the ids:
                               positions, sequence lengths and a block table (step inputs) */
  STRAT_GRAPH_FUSED_DEV_INPUTS, /* graph-fused-dev with the same inputs from the host
                                   (mdr_graph_cache_step_inputs_device): a decode step whose ids
                                   the previous step's sampling left on the device */
  STRAT_GRAPH_FUSED_INPUTS_DEVTABLE, /* graph-fused-inputs with the block table kept in device memory by
                                        the engine (device_src at its destination): the step stages
                                        the ids, positions and lengths; the table is not copied */
  STRAT_COUNT
} strategy;
extern const char *const k_strategy_names[STRAT_COUNT];
extern const char *const k_policy_names[MDR_ROWS_POLICY_COUNT];

/* ---- failure handling, memory (bench_util.c) ---- */

#if defined(__GNUC__)
#define BENCH_NORETURN __attribute__((noreturn))
#define BENCH_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define BENCH_NORETURN
#define BENCH_PRINTF(f, a)
#endif

/* Bind the process to CPU `cpu` (bench_pin.c); -1 leaves it free. Dies,
 * naming the allowed CPUs, for a CPU it may not run on. */
void pin_to_cpu(long cpu);
/* The CPUs this process may run on now, as "0,3,5" (bench_pin.c). */
void affinity_list(char *buf, size_t n);
/* Print "mdr-bench: <message>" on stderr and exit 1. */
BENCH_NORETURN void die(const char *fmt, ...) BENCH_PRINTF(1, 2);
void check_mdr(mdr_backend *b, mdr_status st, const char *call, const char *file, int line);
#define CHECK(b, call) check_mdr((b), (call), #call, __FILE__, __LINE__)
#ifdef MDR_HAVE_CUDA
void check_cuda(cudaError_t e, const char *call, const char *file, int line);
#define CUDA_CHECK(call) check_cuda((call), #call, __FILE__, __LINE__)
#endif
void *xmalloc(size_t n);
/* Split a comma list and call fn(ctx, item) for each item in order; an
 * empty item ("1,,8", a leading or trailing comma, an empty list) stops
 * the walk: returns its 1-based index, or 0 when every item was handed on. */
size_t bench_each_item(const char *list, void (*fn)(void *ctx, const char *item), void *ctx);
/* Command-line option lookup shared by mdr-bench and mdr-bench-tp: arg
 * is "--opt=value" or "--opt" ("-h" reads as "--help"); its name goes to
 * name[cap] (cut to fit), *eq to the '=' or NULL. Returns the index of
 * the name in names[0..n-1], or n when unknown. */
int bench_option_id(const char *arg, const char *const *names, int n, char *name, size_t cap, const char **eq);

/* ---- statistics ---- */

/* Order statistics of one figure over the timed reps, µs. med is the p50;
 * p99 of fewer than 100 reps lies between the two largest samples. */
typedef struct summary {
  double med, p10, p90, p99, max;
} summary;
extern const summary k_no_summary; /* every figure NAN */

double now_us(void); /* CLOCK_MONOTONIC, µs */
/* Percentile q in [0, 1] of n samples, linear between ranks; sorts in place. */
double percentile(double *v, size_t n, double q);
summary summarize(double *v, size_t n); /* sorts v */
double nan_if_zero(double x);

/* ---- flags ---- */

void set_all(bool *flags, size_t n);
bool any(const bool *flags, size_t n);
size_t count_on(const bool *flags, size_t n);

/* ---- files, JSON and CSV numbers ---- */

void mkdir_p(const char *dir);
FILE *open_out(const char *dir, const char *name);
void json_str(FILE *f, const char *s);  /* escaped */
void json_num(FILE *f, double x);       /* non-finite: null */
void csv_num(FILE *f, double x);        /* non-finite: empty field */
void fmt_num(char *out, size_t n, const char *f, double x); /* non-finite: "-" */

/* ---- options (bench_options.c) ---- */

typedef enum sweep_kind {
  SWEEP_FULL,       /* every preset, token counts 1, 2, 4, ..., 4096, DEFAULT_REPS */
  SWEEP_QUICK,      /* --quick: a smoke run */
  SWEEP_HOST_SHORT, /* the default on the host backend (--full for the full one) */
} sweep_kind;
extern const char *const k_sweep_names[]; /* "full", "quick", "host-short" */

typedef enum backend_choice { BACKEND_AUTO, BACKEND_HOST, BACKEND_CUDA } backend_choice;

typedef struct options {
  size_t m;     /* max_batch_tokens; 0: the backend's default */
  size_t seq, block, batch;
  size_t tokens[MAX_TOKEN_COUNTS];
  size_t n_tokens;
  bool preset_on[MAX_PRESETS];
  bool strategy_on[STRAT_COUNT];
  bool policy_on[MDR_ROWS_POLICY_COUNT];
  size_t reps;
  size_t cpu_reps;       /* steps per CPU figure (--cpu-reps; default: see resolve_defaults) */
  size_t cpu_vary_reps;  /* steps of the CPU figure with a changing count (cpu_reps; a third on the host sweep) */
  const char *out_dir;   /* --out; NULL: a fresh bench-out/<timestamp>/ */
  bool force;            /* --force: write into an --out that holds results */
  bool quick, full;
  sweep_kind sweep;      /* set by resolve_defaults */
  backend_choice backend;
  int graph_costs; /* -1: default (on with a GPU) */
  long pin_cpu;    /* --pin: the CPU the whole run is bound to; -1: none */
  bool set_tokens, set_presets, set_reps, set_cpu_reps;
  int argc;
  char **argv;
} options;

/* Read the command line; exits 0 after --help or --version, 1 (with a
 * message on stderr) on a bad option. Defaults that depend on the backend
 * are left to resolve_defaults. */
void parse_options(int argc, char **argv, options *o);
/* Fill in what the command line left open, for a GPU run or a host run. */
void resolve_defaults(options *o, bool gpu);
/* Keep the counts 1..m, in the given order; say what was dropped. */
void clip_token_counts(options *o);

/* ---- what was built (bench_version.c) ---- */

#define BENCH_SCHEMA_VERSION 2 /* results.json layout; bench/README.md lists the changes */
const char *bench_git_revision(void); /* "unknown" when git was not available at build time */
const char *bench_build_type(void);   /* CMAKE_BUILD_TYPE; "unspecified" when empty */

/* ---- GPU timing (bench_gpu.c) ---- */

typedef void (*step_fn)(void *arg, size_t tokens);

typedef struct gpu_ctx {
  bool on; /* false on the host backend: no CUDA call is made */
#ifdef MDR_HAVE_CUDA
  cudaStream_t stream;
  cudaEvent_t *start, *stop; /* one pair per timed rep */
  size_t n_events;
  volatile uint32_t *release_host; /* blocker release word (mapped pinned) */
  uint32_t *release_dev;
  volatile uint32_t *timed_out_host;
  uint32_t *timed_out_dev;
  uint32_t generation;
  void *flush_buf; /* FLUSH_BYTES, memset between cold steps */
#endif
} gpu_ctx;

typedef struct floors {
  double ceiling_1g_gbps, ceiling_4g_gbps, ceiling_gbps; /* GB/s (1e9 bytes/s) */
  summary graph_replay, eager_launch;                    /* µs */
  double graph_replay_loop, eager_launch_loop;           /* µs per launch, back to back */
  void *replay_graph, *replay_exec; /* the 1-kernel graph, kept to re-time it beside each case */
} floors;

/* floor(case) in µs: writing `bytes` at the ceiling plus one graph launch
 * (replay_us: the 1-kernel graph replay timed beside the case). */
double floor_us(const floors *f, size_t bytes, double replay_us);

#ifdef MDR_HAVE_CUDA
void gpu_init(gpu_ctx *g, mdr_stream stream, size_t reps);
void gpu_fini(gpu_ctx *g);
/* GPU µs of one step at a time, the step fully queued before the GPU starts
 * it; cold: L2 flushed before each step (outside the events). */
summary gpu_time_steps(gpu_ctx *g, step_fn fn, void *arg, size_t tokens, size_t reps, bool cold);
/* µs per step of `reps` steps submitted back to back (no blocker). */
double gpu_time_loop(gpu_ctx *g, step_fn fn, void *arg, size_t tokens, size_t reps);
void measure_floors(gpu_ctx *g, size_t reps, floors *f);
/* The case's GPU µs per step (as gpu_time_steps) and the 1-kernel graph
 * replay (the floor's launch term), timed in alternating rounds of the
 * same method, so that a drift over the case (tenths of a µs over a run on
 * one H200) reaches both alike. */
void gpu_time_beside_floor(gpu_ctx *g, const floors *f, step_fn fn, void *arg, size_t tokens, size_t reps,
                           summary *steps, summary *replay);
/* The raw per-rep figures behind gpu_time_steps: out gets reps µs
 * (reps <= the context's event pairs). */
void gpu_time_samples(gpu_ctx *g, step_fn fn, void *arg, size_t tokens, size_t reps, bool cold, double *out);
/* The floor's 1-kernel graph replay, timed as gpu_time_samples: out gets
 * reps µs. mdr-bench times it in the rounds beside each strategy. */
void gpu_time_replay_samples(gpu_ctx *g, const floors *f, size_t reps, double *out);
void floors_fini(floors *f);
#endif

/* ---- one strategy's step (bench_runner.c) ---- */

typedef struct runner {
  strategy strat;
  mdr_backend *b;
  mdr_arena *arena;
  mdr_stream stream;
  mdr_graph_cache *cache; /* graph strategies */
  const uint32_t *ids;    /* the step's ids (host memory, M of them) */
  const uint32_t *ids_upload; /* eager upload source: pinned on the GPU */
  mdr_dptr ids_dev;       /* the same M ids in device memory (graph-fused-dev) */
  bool gpu;
  /* graph-fused-inputs: the declared inputs, their device destinations, the
   * host values of every step (M positions, max_seqs lengths, max_seqs
   * block-table rows) and the step's values array (ids first) */
  mdr_step_input inputs[N_STEP_INPUTS];
  mdr_dptr input_dst[N_STEP_INPUTS];
  uint32_t *input_host[N_STEP_INPUTS];
  const void *values[1 + N_STEP_INPUTS];
  size_t max_seqs;
} runner;

bool is_graph(strategy s);
/* Whether strategy s declares step inputs (graph-fused-inputs, graph-fused-dev-inputs). */
bool has_inputs(strategy s);
void runner_step(void *arg, size_t tokens); /* a step_fn; arg is a runner */
/* Set the runner up for strategy s; false (and *why) when s is unsupported. */
bool runner_begin(runner *r, strategy s, const size_t *prepare, size_t n_prepare, const char **why);
/* Make r's strategy the arena's before timing it: the eager strategies
 * share the arena's zero strategy, so several runners can be alive at once
 * and be timed in turn. */
void runner_activate(runner *r);
void runner_end(runner *r);
void runner_sync(runner *r);
/* The copy floor of a graph-fused-inputs step at `tokens`: median CPU µs
 * to memcpy its input values (positions, lengths, block-table rows; not
 * the ids) from the same host arrays into MDR_GRAPH_STAGING_SLOTS pinned
 * slots in turn, as the staged step writes its ring. */
double input_copy_us(const runner *r, size_t tokens, size_t reps);
/* Host µs to submit one step; the stream is drained every CPU_BATCH steps. */
summary cpu_time_steps(runner *r, size_t tokens, size_t reps);
/* The raw per-step figures behind cpu_time_steps: out gets reps µs. */
void cpu_time_samples(runner *r, size_t tokens, size_t reps, double *out);
/* The count a "changing" CPU run alternates with: a neighbour of tokens. */
size_t partner_tokens(size_t tokens);
/* The sequences of a graph-fused-inputs step over `tokens` tokens. */
size_t input_sequences(const runner *r, size_t tokens);
/* The same with the count alternating between tokens and partner_tokens. */
summary cpu_time_steps_vary(runner *r, size_t tokens, size_t reps);

/* ---- plans and validation (bench_validate.c) ---- */

/* The buffer starting at ptr, or MDR_BUF_COUNT. */
mdr_buffer buffer_at(const mdr_arena *a, mdr_dptr ptr);
/* The plan at `tokens` under the arena's current policy: bytes, segments. */
size_t plan_bytes(mdr_backend *b, const mdr_arena *a, size_t tokens, size_t *segments);
/* Poison, one step at `tokens`, then check every byte the step owns; die
 * on the first wrong one, naming `label`. */
void validate(runner *r, size_t tokens, const char *label);
/* graph-fused-inputs, after validate: each input's rows of that step
 * arrived in its destination (other strategies: nothing). */
void validate_inputs(runner *r, size_t tokens, const char *label);

/* ---- cases and the run ---- */

typedef struct bench_case {
  const char *preset;
  mdr_rows_policy policy;
  size_t tokens;
  strategy strat;
  bool measured;
  const char *note; /* why it was skipped; NULL */
  size_t bytes, segments;
  summary gpu, cold, cpu; /* µs */
  summary cpu_vary;       /* graph strategies: CPU µs when the count changes every step */
  double loop_us;         /* µs per step back to back */
  double gbps, floor_us, x_floor, speedup, cpu_speedup;
  double floor_replay_us; /* the 1-kernel graph replay timed just before this case (GPU) */
  /* medians of each interleaved round (GPU: NAN on the host backend): the
   * spread between rounds is what a "wins" line must exceed */
  double round_gpu[ROUNDS], round_cpu[ROUNDS];
  uint64_t eager_steps;   /* graph strategies: steps that ran eagerly */
  uint64_t inline_steps;  /* graph strategies: steps whose ids (and inputs) travelled in the fused launch's
                             parameters, not a staging slot (mdr_graph_stats.inline_steps) */
  double copy_us;         /* graph-fused-inputs: CPU µs of a memcpy of the step's input values (not the ids) into
                             pinned memory, the part of its +CPU over ids only that a copying step cannot avoid
                             (input_copy_us); NAN for the other strategies */
} bench_case;

typedef struct sweep {
  bench_case *cases;
  size_t n, total;
} sweep;

/* What a run records about itself (results.json, the headline). */
typedef struct run_info {
  char timestamp[32];  /* UTC, ISO 8601: 2026-11-30T19:19:00Z */
  char device[256];    /* the GPU's name, or "host CPU: <model>" */
  char out_dir[4096];  /* where the files go */
} run_info;

typedef struct bench_env {
  options *o;
  const run_info *run;
  mdr_backend *b;
  mdr_stream stream;
  gpu_ctx gpu;
  floors fl;
  uint32_t *ids;        /* M ids in host memory */
  uint32_t *ids_upload; /* the eager upload's source: pinned on the GPU */
  mdr_dptr ids_dev;     /* the same ids in device memory, written once (graph-fused-dev) */
  FILE *plans;
  bool first_plan_preset;
  bool progress_in_place; /* stderr and stdout on a terminal: progress on one line */
} bench_env;

typedef struct graph_costs {
  const char *preset;
  mdr_rows_policy policy; /* the first policy of the sweep */
  double *capture_us; /* per token count of the sweep */
  double prepare_all_s;
  size_t graphs_after;
  double capture_all_us; /* capture_us total of that prepare */
  uint64_t graph_bytes;  /* device memory of those graphs (mdr_graph_stats.graph_bytes) */
  size_t graph_nodes;    /* their nodes */
  int memory_measured;   /* the backend measured graph_bytes */
  /* the same for a LADDER cache prepared at every rung (default ladder) and
   * for the one graph of a DYNAMIC cache (node update) */
  size_t ladder_graphs;
  uint64_t ladder_bytes, dynamic_bytes;
  size_t ladder_nodes, dynamic_nodes;
} graph_costs;

/* ---- reports (bench_report.c) ---- */

void print_floors(const floors *f);
/* The meaning of every column, printed once before the first table. */
void print_legend(bool gpu);
void print_table_header(bool gpu); /* gpu false: says "host backend" above the columns */
void print_case(const bench_case *c);
/* p50 / p90 / p99 / max of CPU (and GPU) µs per step of one block. */
void print_tail_table(const bench_case *c, size_t n, const size_t *tokens, size_t n_tokens, bool gpu);
/* The last lines of a run (bench_headline.c): the strategies side by side
 * against eager memsets at a few token counts, what was measured, and what
 * wins. */
void print_headline(const bench_env *e, const sweep *sw);
void print_graph_costs(const bench_env *e, const graph_costs *g, const sweep *sw);
/* Append one preset's buffers and plans to plans.json (e->plans). */
void write_plans(bench_env *e, const char *preset, mdr_arena *a);
void write_results_json(const bench_env *e, const sweep *sw, const graph_costs *gc, size_t n_gc);
void write_results_csv(const bench_env *e, const sweep *sw);
/* The output folder: --out (refused when it holds an earlier run's files,
 * unless --force), else a fresh bench-out/<timestamp>/ with bench-out/latest
 * pointing to it. Fills run->out_dir and sets o->out_dir to it. */
void prepare_out_dir(options *o, run_info *run, const char *stamp);
/* run->device: the GPU's name, or the host CPU's model. */
void describe_device(const bench_env *e, run_info *run);

#endif
