/* mdr_bench.c — mdr-bench: the cost of preparing one decode step (zero plan
 * + token-id upload) with the seed's per-buffer memsets, with the fused
 * kernel, and with the graph cache, against floors measured in the same run.
 * bench/README.md explains every option, column and file.
 *
 * Method (cuda-samples / nvbench habits):
 *   - every (preset, policy, strategy) is validated before it is timed:
 *     buffers poisoned, one step, the plan's bytes read back as zero, the
 *     bytes just past each segment still poisoned, the token ids arrived;
 *   - GPU time: a blocker kernel holds the stream while the host enqueues
 *     one step between two events, then releases it, so the events see GPU
 *     execution only (not the host's submission); median, p10, p90;
 *   - loop time: N steps back to back between two events, divided by N:
 *     the steady-state step cost of a loop doing nothing else (bounded by
 *     CPU submission or GPU time, whichever is slower);
 *   - cold: as GPU time with L2 flushed (a memset of FLUSH_BYTES) before each
 *     step, outside the events;
 *   - CPU time: clock_gettime around the submitting call, no sync inside;
 *     the stream is drained every CPU_BATCH steps so the staging ring never
 *     makes a step wait;
 *   - CPU chg (graph strategies): the same with the count alternating
 *     between tokens and tokens - 1 (2 for 1) on every step;
 *   - floor(case) = bytes / write ceiling + one 1-kernel graph replay.
 *
 * On the host backend (no GPU) only the CPU figures exist. Every mdr call
 * is checked: a failure prints mdr_status_string + mdr_backend_last_error
 * and exits 1. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>

#include <mdr/mdr.h>

#ifdef MDR_HAVE_CUDA
#include <cuda_runtime.h>

#include "bench_cuda.h"
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
  QUICK_REPS = 30,
  WARMUP_STEPS = 10,        /* untimed steps before each case */
  CPU_BATCH = 4,            /* steps between drains when timing CPU (< staging slots) */
  CEILING_REPS = 20,        /* memsets timed for the write ceiling */
  MAX_TOKEN_COUNTS = 64,
  GUARD_BYTES = 4096,       /* bytes past a segment checked to be untouched */
  UNTOUCHED_PROBE = 256,    /* head bytes of a buffer outside the plan checked */
  POISON = 0xA5,
  FIRST_TOKEN_ID = 1000,    /* ids of step: FIRST_TOKEN_ID + i */
};

#define FLUSH_BYTES (256 * MIB)        /* > L2 of any current GPU (H200: 50 MB) */
#define VERIFY_CHUNK (16 * MIB)        /* read-back granularity of the validation */
#define BLOCKER_TIMEOUT_NS 2000000000u /* a blocker never holds a stream longer (2 s) */

static const size_t k_default_tokens[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
static const size_t k_quick_tokens[] = {1, 8, 64, 512, 4096};
static const char *const k_quick_presets[] = {"glm-5.3-flash-tp2", "qwen3-next-80b"};

typedef enum strategy {
  STRAT_EAGER_MEMSET, /* the baseline: the seed's memsets + cudaMemcpyAsync */
  STRAT_EAGER_FUSED,  /* one fused kernel + cudaMemcpyAsync */
  STRAT_GRAPH_MEMSET, /* graph cache EXACT: memset nodes + staged upload */
  STRAT_GRAPH_FUSED,  /* graph cache EXACT: one fused node (zero + upload) */
  STRAT_GRAPH_DYNAMIC,/* graph cache DYNAMIC (node update): one graph for every count */
  STRAT_GRAPH_DYNAMIC_COUNT, /* DYNAMIC, count read on the device from the slot */
  STRAT_COUNT
} strategy;
static const char *const k_strategy_names[STRAT_COUNT] = {
    "eager-memset", "eager-fused", "graph-memset", "graph-fused", "graph-dynamic",
    "graph-dynamic-count"};
static const char *const k_policy_names[MDR_ROWS_POLICY_COUNT] = {"seed", "all"};

/* ---- failure handling ---- */

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("mdr-bench: ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(1);
}

static void check_mdr(mdr_backend *b, mdr_status st, const char *call, int line) {
  if (st != MDR_OK)
    die("line %d: %s: %s: %s", line, call, mdr_status_string(st), mdr_backend_last_error(b));
}
#define CHECK(b, call) check_mdr((b), (call), #call, __LINE__)

#ifdef MDR_HAVE_CUDA
static void check_cuda(cudaError_t e, const char *call, int line) {
  if (e != cudaSuccess) die("line %d: %s: %s (%s)", line, call, cudaGetErrorName(e), cudaGetErrorString(e));
}
#define CUDA_CHECK(call) check_cuda((call), #call, __LINE__)
#endif

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) die("out of host memory (%zu bytes)", n);
  return p;
}

/* ---- small utilities ---- */

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Percentile q in [0, 1] of n samples, linear between ranks; sorts in place. */
static double percentile(double *v, size_t n, double q) {
  if (n == 0) return NAN;
  qsort(v, n, sizeof *v, cmp_double);
  double pos = q * (double)(n - 1);
  size_t lo = (size_t)pos;
  size_t hi = lo + 1 < n ? lo + 1 : lo;
  return v[lo] + (pos - (double)lo) * (v[hi] - v[lo]);
}

typedef struct summary {
  double med, p10, p90; /* µs */
} summary;

static summary summarize(double *v, size_t n) {
  return (summary){percentile(v, n, 0.5), percentile(v, n, 0.1), percentile(v, n, 0.9)};
}

static const summary k_no_summary = {NAN, NAN, NAN};

static void mkdir_p(const char *dir) {
  char path[4096];
  if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) die("--out path too long");
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(path, 0755) != 0 && errno != EEXIST) die("mkdir %s: %s", path, strerror(errno));
    *p = '/';
  }
  if (mkdir(path, 0755) != 0 && errno != EEXIST) die("mkdir %s: %s", path, strerror(errno));
}

static FILE *open_out(const char *dir, const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f) die("cannot write %s: %s", path, strerror(errno));
  return f;
}

/* JSON helpers: strings escaped, non-finite numbers as null. */
static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

static void json_num(FILE *f, double x) {
  if (isfinite(x)) fprintf(f, "%.6g", x);
  else fputs("null", f);
}

/* CSV: empty field for a missing figure. */
static void csv_num(FILE *f, double x) {
  if (isfinite(x)) fprintf(f, "%.6g", x);
}

/* ---- options ---- */

typedef struct options {
  size_t m;     /* max_batch_tokens; 0: the backend's default */
  size_t seq, block, batch;
  size_t tokens[MAX_TOKEN_COUNTS];
  size_t n_tokens;
  bool preset_on[16];
  bool strategy_on[STRAT_COUNT];
  bool policy_on[MDR_ROWS_POLICY_COUNT];
  size_t reps;
  const char *out_dir;
  bool quick;
  int graph_costs; /* -1: default (on with a GPU) */
  bool set_tokens, set_presets, set_reps;
  int argc;
  char **argv;
} options;

static void usage(void) {
  puts("usage: mdr-bench [options]\n"
       "  --m N             max_batch_tokens (default 4096; 256 on the host backend)\n"
       "  --seq N           max_seq_len (default 65536)\n"
       "  --block N         kv_block_size (default 16)\n"
       "  --batch N         max_batch_size (default 4)\n"
       "  --tokens a,b,..   token counts (default 1,2,4,...,4096; counts > M are dropped)\n"
       "  --presets a,b     model presets (default: all four)\n"
       "  --strategies a,b  eager-memset,eager-fused,graph-memset,graph-fused,graph-dynamic,\n"
       "                   graph-dynamic-count\n"
       "  --policies a,b    seed,all (default both)\n"
       "  --reps N          timed steps per figure (default 200)\n"
       "  --out DIR         output folder (default bench-out)\n"
       "  --quick           reps 30, tokens 1,8,64,512,4096, presets glm-5.3-flash-tp2,qwen3-next-80b\n"
       "  --graph-costs / --no-graph-costs   capture costs section (default on with a GPU)");
}

static size_t parse_size(const char *opt, const char *s) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || !end || *end || v == 0 || s[0] == '-') die("%s: expected a positive integer, got '%s'", opt, s);
  return (size_t)v;
}

/* Split a comma list and hand each item to fn. */
static void for_each_item(const char *list, void (*fn)(options *, const char *), options *o) {
  char *copy = xmalloc(strlen(list) + 1);
  strcpy(copy, list);
  char *save = NULL;
  for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) fn(o, item);
  free(copy);
}

static void add_token_count(options *o, const char *s) {
  if (o->n_tokens == MAX_TOKEN_COUNTS) die("--tokens: at most %d counts", MAX_TOKEN_COUNTS);
  o->tokens[o->n_tokens++] = parse_size("--tokens", s);
}

static void add_preset(options *o, const char *s) {
  for (size_t i = 0; i < mdr_model_preset_count(); i++)
    if (strcmp(s, mdr_model_preset_name(i)) == 0) {
      o->preset_on[i] = true;
      return;
    }
  die("--presets: unknown preset '%s'", s);
}

static void add_strategy(options *o, const char *s) {
  for (int i = 0; i < STRAT_COUNT; i++)
    if (strcmp(s, k_strategy_names[i]) == 0) {
      o->strategy_on[i] = true;
      return;
    }
  die("--strategies: unknown strategy '%s'", s);
}

static void add_policy(options *o, const char *s) {
  for (int i = 0; i < MDR_ROWS_POLICY_COUNT; i++)
    if (strcmp(s, k_policy_names[i]) == 0) {
      o->policy_on[i] = true;
      return;
    }
  die("--policies: unknown policy '%s'", s);
}

static void set_all(bool *flags, size_t n) {
  for (size_t i = 0; i < n; i++) flags[i] = true;
}

static bool any(const bool *flags, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (flags[i]) return true;
  return false;
}

static void parse_options(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  o->seq = DEFAULT_SEQ;
  o->block = DEFAULT_BLOCK;
  o->batch = DEFAULT_BATCH;
  o->reps = DEFAULT_REPS;
  o->out_dir = "bench-out";
  o->graph_costs = -1;
  o->argc = argc;
  o->argv = argv;
  if (mdr_model_preset_count() > sizeof o->preset_on / sizeof o->preset_on[0]) die("too many presets");
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    bool has_value = i + 1 < argc;
#define VALUE() (has_value ? argv[++i] : (die("%s needs a value", a), ""))
    if (strcmp(a, "--m") == 0) o->m = parse_size(a, VALUE());
    else if (strcmp(a, "--seq") == 0) o->seq = parse_size(a, VALUE());
    else if (strcmp(a, "--block") == 0) o->block = parse_size(a, VALUE());
    else if (strcmp(a, "--batch") == 0) o->batch = parse_size(a, VALUE());
    else if (strcmp(a, "--reps") == 0) o->reps = parse_size(a, VALUE()), o->set_reps = true;
    else if (strcmp(a, "--out") == 0) o->out_dir = VALUE();
    else if (strcmp(a, "--tokens") == 0) for_each_item(VALUE(), add_token_count, o), o->set_tokens = true;
    else if (strcmp(a, "--presets") == 0) for_each_item(VALUE(), add_preset, o), o->set_presets = true;
    else if (strcmp(a, "--strategies") == 0) for_each_item(VALUE(), add_strategy, o);
    else if (strcmp(a, "--policies") == 0) for_each_item(VALUE(), add_policy, o);
    else if (strcmp(a, "--quick") == 0) o->quick = true;
    else if (strcmp(a, "--graph-costs") == 0) o->graph_costs = 1;
    else if (strcmp(a, "--no-graph-costs") == 0) o->graph_costs = 0;
    else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) usage(), exit(0);
    else usage(), die("unknown option '%s'", a);
#undef VALUE
  }
  /* --quick fills in what was not given explicitly, whatever the order. */
  if (o->quick && !o->set_reps) o->reps = QUICK_REPS;
  if (!o->set_tokens) {
    const size_t *src = o->quick ? k_quick_tokens : k_default_tokens;
    size_t n = o->quick ? sizeof k_quick_tokens / sizeof *src : sizeof k_default_tokens / sizeof *src;
    memcpy(o->tokens, src, n * sizeof *src);
    o->n_tokens = n;
  }
  if (!o->set_presets && o->quick)
    for (size_t i = 0; i < sizeof k_quick_presets / sizeof *k_quick_presets; i++) add_preset(o, k_quick_presets[i]);
  if (!any(o->preset_on, mdr_model_preset_count())) set_all(o->preset_on, mdr_model_preset_count());
  if (!any(o->strategy_on, STRAT_COUNT)) set_all(o->strategy_on, STRAT_COUNT);
  if (!any(o->policy_on, MDR_ROWS_POLICY_COUNT)) set_all(o->policy_on, MDR_ROWS_POLICY_COUNT);
}

/* Keep the counts 1..m, in the given order; say what was dropped. */
static void clip_token_counts(options *o) {
  size_t kept = 0;
  for (size_t i = 0; i < o->n_tokens; i++) {
    if (o->tokens[i] <= o->m) o->tokens[kept++] = o->tokens[i];
    else printf("note: %zu tokens dropped (> M = %zu)\n", o->tokens[i], o->m);
  }
  o->n_tokens = kept;
  if (kept == 0) die("no token count <= M = %zu", o->m);
}

/* ---- the GPU timing context ---- */

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
} floors;

/* floor(case) in µs: writing `bytes` at the ceiling plus one graph launch. */
static double floor_us(const floors *f, size_t bytes) {
  return (double)bytes / (f->ceiling_gbps * 1e3) + f->graph_replay.med;
}

#ifdef MDR_HAVE_CUDA
static void gpu_init(gpu_ctx *g, mdr_stream stream, size_t reps) {
  g->stream = (cudaStream_t)stream;
  g->n_events = reps;
  g->start = xmalloc(reps * sizeof *g->start);
  g->stop = xmalloc(reps * sizeof *g->stop);
  for (size_t i = 0; i < reps; i++) {
    CUDA_CHECK(cudaEventCreate(&g->start[i]));
    CUDA_CHECK(cudaEventCreate(&g->stop[i]));
  }
  void *words = NULL, *words_dev = NULL;
  CUDA_CHECK(cudaHostAlloc(&words, 2 * sizeof(uint32_t), cudaHostAllocMapped));
  CUDA_CHECK(cudaHostGetDevicePointer(&words_dev, words, 0));
  memset(words, 0, 2 * sizeof(uint32_t));
  g->release_host = (volatile uint32_t *)words;
  g->timed_out_host = g->release_host + 1;
  g->release_dev = (uint32_t *)words_dev;
  g->timed_out_dev = g->release_dev + 1;
  CUDA_CHECK(cudaMalloc(&g->flush_buf, FLUSH_BYTES));
}

static void gpu_fini(gpu_ctx *g) {
  for (size_t i = 0; i < g->n_events; i++) {
    cudaEventDestroy(g->start[i]);
    cudaEventDestroy(g->stop[i]);
  }
  free(g->start);
  free(g->stop);
  cudaFreeHost((void *)g->release_host);
  cudaFree(g->flush_buf);
}

static void gpu_sync(gpu_ctx *g) {
  CUDA_CHECK(cudaStreamSynchronize(g->stream));
  if (*g->timed_out_host) die("a blocker kernel timed out: the host took > 2 s to enqueue one step");
}

/* Hold the stream until gpu_release(). */
static void gpu_block(gpu_ctx *g) {
  CUDA_CHECK((cudaError_t)bench_cuda_launch_blocker(g->stream, g->release_dev, g->generation + 1,
                                                    BLOCKER_TIMEOUT_NS, g->timed_out_dev));
}

static void gpu_release(gpu_ctx *g) {
  g->generation++;
  __atomic_store_n((uint32_t *)g->release_host, g->generation, __ATOMIC_RELEASE);
}

static void gpu_flush_l2(gpu_ctx *g) {
  CUDA_CHECK(cudaMemsetAsync(g->flush_buf, (int)(g->generation & 0xff), FLUSH_BYTES, g->stream));
}

static double elapsed_us(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  return (double)ms * 1e3;
}

/* GPU µs of one step at a time, the step fully queued before the GPU starts
 * it; cold: L2 flushed before each step (outside the events). */
static summary gpu_time_steps(gpu_ctx *g, step_fn fn, void *arg, size_t tokens, size_t reps, bool cold) {
  if (reps > g->n_events) reps = g->n_events;
  for (size_t i = 0; i < reps; i++) {
    if (cold) gpu_flush_l2(g);
    gpu_block(g);
    CUDA_CHECK(cudaEventRecord(g->start[i], g->stream));
    fn(arg, tokens);
    CUDA_CHECK(cudaEventRecord(g->stop[i], g->stream));
    gpu_release(g);
  }
  gpu_sync(g);
  double *us = xmalloc(reps * sizeof *us);
  for (size_t i = 0; i < reps; i++) us[i] = elapsed_us(g->start[i], g->stop[i]);
  summary s = summarize(us, reps);
  free(us);
  return s;
}

/* µs per step of `reps` steps submitted back to back (no blocker). */
static double gpu_time_loop(gpu_ctx *g, step_fn fn, void *arg, size_t tokens, size_t reps) {
  gpu_sync(g);
  CUDA_CHECK(cudaEventRecord(g->start[0], g->stream));
  for (size_t i = 0; i < reps; i++) fn(arg, tokens);
  CUDA_CHECK(cudaEventRecord(g->stop[0], g->stream));
  gpu_sync(g);
  return elapsed_us(g->start[0], g->stop[0]) / (double)reps;
}
#endif

/* ---- floors ---- */

#ifdef MDR_HAVE_CUDA
static void step_empty_kernel(void *arg, size_t tokens) {
  (void)tokens;
  CUDA_CHECK((cudaError_t)bench_cuda_launch_empty(arg));
}

typedef struct replay_arg {
  cudaGraphExec_t exec;
  cudaStream_t stream;
} replay_arg;

static void step_graph_replay(void *arg, size_t tokens) {
  (void)tokens;
  replay_arg *r = arg;
  CUDA_CHECK(cudaGraphLaunch(r->exec, r->stream));
}

/* Median GB/s of CEILING_REPS memsets of `bytes`; NAN when it does not fit. */
static double measure_write_ceiling(gpu_ctx *g, size_t bytes) {
  void *buf = NULL;
  if (cudaMalloc(&buf, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return NAN;
  }
  double us[CEILING_REPS];
  CUDA_CHECK(cudaMemsetAsync(buf, 0, bytes, g->stream)); /* warm-up: first touch */
  for (int i = 0; i < CEILING_REPS; i++) {
    CUDA_CHECK(cudaEventRecord(g->start[i], g->stream));
    CUDA_CHECK(cudaMemsetAsync(buf, i & 0xff, bytes, g->stream));
    CUDA_CHECK(cudaEventRecord(g->stop[i], g->stream));
  }
  gpu_sync(g);
  for (int i = 0; i < CEILING_REPS; i++) us[i] = elapsed_us(g->start[i], g->stop[i]);
  CUDA_CHECK(cudaFree(buf));
  return (double)bytes / (percentile(us, CEILING_REPS, 0.5) * 1e3);
}

static void measure_floors(gpu_ctx *g, size_t reps, floors *f) {
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  f->ceiling_1g_gbps = measure_write_ceiling(g, GIB);
  /* 4 GiB only with 1 GiB to spare, for the arenas' sake. */
  f->ceiling_4g_gbps = free_bytes > 5 * GIB ? measure_write_ceiling(g, 4 * GIB) : NAN;
  f->ceiling_gbps = isfinite(f->ceiling_4g_gbps) && f->ceiling_4g_gbps > f->ceiling_1g_gbps
                        ? f->ceiling_4g_gbps
                        : f->ceiling_1g_gbps;
  if (!isfinite(f->ceiling_gbps)) die("could not allocate 1 GiB for the write ceiling");

  replay_arg r = {.stream = g->stream};
  cudaGraph_t graph;
  CUDA_CHECK(cudaStreamBeginCapture(g->stream, cudaStreamCaptureModeThreadLocal));
  CUDA_CHECK((cudaError_t)bench_cuda_launch_empty(g->stream));
  CUDA_CHECK(cudaStreamEndCapture(g->stream, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&r.exec, graph, 0));
  CUDA_CHECK(cudaGraphUpload(r.exec, g->stream));
  for (int i = 0; i < WARMUP_STEPS; i++) step_graph_replay(&r, 0), step_empty_kernel(g->stream, 0);
  f->graph_replay = gpu_time_steps(g, step_graph_replay, &r, 0, reps, false);
  f->graph_replay_loop = gpu_time_loop(g, step_graph_replay, &r, 0, reps);
  f->eager_launch = gpu_time_steps(g, step_empty_kernel, g->stream, 0, reps, false);
  f->eager_launch_loop = gpu_time_loop(g, step_empty_kernel, g->stream, 0, reps);
  CUDA_CHECK(cudaGraphExecDestroy(r.exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
}
#endif

#ifdef MDR_HAVE_CUDA
static void print_floors(const floors *f) {
  printf("floors (measured in this run)\n");
  printf("  write ceiling   cudaMemsetAsync 1 GiB: %.1f GB/s", f->ceiling_1g_gbps);
  if (isfinite(f->ceiling_4g_gbps)) printf(", 4 GiB: %.1f GB/s", f->ceiling_4g_gbps);
  printf("  -> ceiling %.1f GB/s\n", f->ceiling_gbps);
  printf("  1-kernel graph replay: %.2f us [%.2f-%.2f], back to back %.2f us\n", f->graph_replay.med,
         f->graph_replay.p10, f->graph_replay.p90, f->graph_replay_loop);
  printf("  empty eager launch:    %.2f us [%.2f-%.2f], back to back %.2f us\n", f->eager_launch.med,
         f->eager_launch.p10, f->eager_launch.p90, f->eager_launch_loop);
  printf("  floor(case) = bytes / ceiling + %.2f us\n\n", f->graph_replay.med);
}
#endif

/* ---- one strategy's step ---- */

typedef struct runner {
  strategy strat;
  mdr_backend *b;
  mdr_arena *arena;
  mdr_stream stream;
  mdr_graph_cache *cache; /* graph strategies */
  const uint32_t *ids;    /* the step's ids (host memory, M of them) */
  const uint32_t *ids_upload; /* eager upload source: pinned on the GPU */
  bool gpu;
} runner;

static bool is_graph(strategy s) { return s >= STRAT_GRAPH_MEMSET; }

/* The eager baseline's upload: what the seed and the peers do. */
static void upload_ids_eager(runner *r, size_t tokens) {
  mdr_dptr dst = mdr_arena_token_ids(r->arena);
  size_t bytes = tokens * sizeof(uint32_t);
#ifdef MDR_HAVE_CUDA
  if (r->gpu) {
    CUDA_CHECK(cudaMemcpyAsync((void *)(uintptr_t)dst, r->ids_upload, bytes, cudaMemcpyHostToDevice,
                               (cudaStream_t)r->stream));
    return;
  }
#endif
  memcpy((void *)(uintptr_t)dst, r->ids_upload, bytes); /* host backend: device memory is host memory */
}

static void runner_step(void *arg, size_t tokens) {
  runner *r = arg;
  if (is_graph(r->strat)) {
    CHECK(r->b, mdr_graph_cache_step(r->cache, r->ids, tokens));
  } else {
    CHECK(r->b, mdr_arena_zero_all_rows(r->arena, r->stream, tokens));
    upload_ids_eager(r, tokens);
  }
}

/* Set the runner up for strategy s; false (and *why) when s is unsupported. */
static bool runner_begin(runner *r, strategy s, const size_t *prepare, size_t n_prepare, const char **why) {
  r->strat = s;
  r->cache = NULL;
  if (!is_graph(s)) {
    mdr_zero_strategy z = s == STRAT_EAGER_FUSED ? MDR_ZERO_FUSED : MDR_ZERO_MEMSET;
    mdr_status st = mdr_arena_set_zero_strategy(r->arena, z);
    if (st == MDR_ERR_UNSUPPORTED) return *why = mdr_status_string(st), false;
    CHECK(r->b, st);
    return true;
  }
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  int dynamic = s == STRAT_GRAPH_DYNAMIC || s == STRAT_GRAPH_DYNAMIC_COUNT;
  o.mode = dynamic ? MDR_GRAPH_DYNAMIC : MDR_GRAPH_EXACT;
  o.dynamic_impl = s == STRAT_GRAPH_DYNAMIC_COUNT ? MDR_DYNAMIC_DEVICE_COUNT : MDR_DYNAMIC_NODE_UPDATE;
  o.zero = s == STRAT_GRAPH_MEMSET ? MDR_ZERO_MEMSET : MDR_ZERO_FUSED;
  mdr_status st = mdr_graph_cache_create(r->arena, r->stream, &o, &r->cache);
  if (st != MDR_OK) {
    if (dynamic || st == MDR_ERR_UNSUPPORTED) {
      *why = mdr_status_string(st);
      fprintf(stderr, "note: %s skipped: %s: %s\n", k_strategy_names[s], mdr_status_string(st),
              mdr_backend_last_error(r->b));
      return false;
    }
    CHECK(r->b, st);
  }
  CHECK(r->b, mdr_graph_cache_prepare(r->cache, prepare, n_prepare));
  return true;
}

static void runner_end(runner *r) {
  mdr_graph_cache_destroy(r->cache); /* waits for the stream */
  r->cache = NULL;
  CHECK(r->b, mdr_arena_set_zero_strategy(r->arena, MDR_ZERO_MEMSET));
}

static void runner_sync(runner *r) { CHECK(r->b, mdr_backend_synchronize(r->b, r->stream)); }

/* Host µs to submit one step; the stream is drained every CPU_BATCH steps. */
static summary cpu_time_steps(runner *r, size_t tokens, size_t reps) {
  double *us = xmalloc(reps * sizeof *us);
  for (size_t i = 0; i < reps; i++) {
    if (i % CPU_BATCH == 0) runner_sync(r);
    double t0 = now_us();
    runner_step(r, tokens);
    us[i] = now_us() - t0;
  }
  runner_sync(r);
  summary s = summarize(us, reps);
  free(us);
  return s;
}

/* The count a "changing" CPU run alternates with: a neighbour of tokens. */
static size_t partner_tokens(size_t tokens) { return tokens > 1 ? tokens - 1 : tokens + 1; }

/* Host µs to submit one step when the count changes on every step (it
 * alternates between tokens and partner_tokens(tokens)): what a DYNAMIC
 * graph pays to re-target its node. Both counts are warmed up first, so an
 * EXACT cache replays two cached graphs. */
static summary cpu_time_steps_vary(runner *r, size_t tokens, size_t reps) {
  const size_t other = partner_tokens(tokens);
  for (int i = 0; i < WARMUP_STEPS; i++) runner_step(r, i % 2 ? other : tokens);
  double *us = xmalloc(reps * sizeof *us);
  for (size_t i = 0; i < reps; i++) {
    if (i % CPU_BATCH == 0) runner_sync(r);
    double t0 = now_us();
    runner_step(r, i % 2 ? other : tokens);
    us[i] = now_us() - t0;
  }
  runner_sync(r);
  summary s = summarize(us, reps);
  free(us);
  return s;
}

/* ---- validation ---- */

static bool all_bytes(const unsigned char *p, size_t n, unsigned char v, size_t *bad) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != v) return *bad = i, false;
  return true;
}

/* Check that device bytes [ptr, ptr + n) all equal v; die naming `what`. */
static void expect_bytes(mdr_backend *b, mdr_dptr ptr, size_t n, unsigned char v, const char *what,
                         const char *label) {
  static unsigned char *host;
  if (!host) host = xmalloc(VERIFY_CHUNK);
  for (size_t off = 0; off < n; off += VERIFY_CHUNK) {
    size_t len = n - off < VERIFY_CHUNK ? n - off : VERIFY_CHUNK;
    size_t bad = 0;
    CHECK(b, mdr_backend_copy_d2h(b, host, ptr + off, len));
    if (!all_bytes(host, len, v, &bad))
      die("validation failed (%s): %s: byte %zu is 0x%02x, expected 0x%02x", label, what, off + bad,
          host[bad], v);
  }
}

/* The buffer starting at ptr, or MDR_BUF_COUNT. */
static mdr_buffer buffer_at(const mdr_arena *a, mdr_dptr ptr) {
  for (int i = 0; i < MDR_BUF_COUNT; i++)
    if (mdr_arena_ptr(a, (mdr_buffer)i) == ptr) return (mdr_buffer)i;
  return MDR_BUF_COUNT;
}

static void poison_arena(mdr_backend *b, mdr_arena *a) {
  for (int i = 0; i < MDR_BUF_COUNT; i++) {
    if (i == MDR_BUF_NORM_UNIT_W) continue; /* a weight that must stay zero, in no plan */
    size_t n = mdr_arena_bytes(a, (mdr_buffer)i);
    if (n) CHECK(b, mdr_backend_fill(b, mdr_arena_ptr(a, (mdr_buffer)i), POISON, n));
  }
}

/* Poison, one step at `tokens`, then: every plan byte zero, GUARD_BYTES past
 * each segment (inside its buffer) untouched, the head of every buffer
 * outside the plan untouched, token ids arrived and nothing past them. */
static void validate(runner *r, size_t tokens, const char *label) {
  mdr_backend *b = r->b;
  mdr_segment plan[MDR_ZERO_PLAN_MAX];
  size_t n = 0;
  bool in_plan[MDR_BUF_COUNT] = {false};
  CHECK(b, mdr_arena_zero_plan(r->arena, tokens, plan, MDR_ZERO_PLAN_MAX, &n));
  poison_arena(b, r->arena);
  runner_step(r, tokens);
  runner_sync(r);
  for (size_t i = 0; i < n; i++) {
    mdr_buffer buf = buffer_at(r->arena, plan[i].ptr);
    if (buf == MDR_BUF_COUNT) die("library: plan segment %zu does not start at a buffer", i);
    size_t cap = mdr_arena_bytes(r->arena, buf);
    if (plan[i].bytes > cap) die("library: plan segment %s is %zu bytes > buffer %zu", mdr_buffer_name(buf), plan[i].bytes, cap);
    in_plan[buf] = true;
    size_t guard = cap - plan[i].bytes < GUARD_BYTES ? cap - plan[i].bytes : GUARD_BYTES;
    char what[128];
    snprintf(what, sizeof what, "%s (first %zu bytes must be zero)", mdr_buffer_name(buf), plan[i].bytes);
    expect_bytes(b, plan[i].ptr, plan[i].bytes, 0, what, label);
    snprintf(what, sizeof what, "%s past byte %zu (must be untouched)", mdr_buffer_name(buf), plan[i].bytes);
    expect_bytes(b, plan[i].ptr + plan[i].bytes, guard, POISON, what, label);
  }
  for (int i = 0; i < MDR_BUF_COUNT; i++) {
    size_t cap = mdr_arena_bytes(r->arena, (mdr_buffer)i);
    if (in_plan[i] || i == MDR_BUF_TOKEN_IDS || i == MDR_BUF_NORM_UNIT_W || !cap) continue;
    char what[128];
    snprintf(what, sizeof what, "%s (not in the plan: must be untouched)", mdr_buffer_name((mdr_buffer)i));
    expect_bytes(b, mdr_arena_ptr(r->arena, (mdr_buffer)i), cap < UNTOUCHED_PROBE ? cap : UNTOUCHED_PROBE,
                 POISON, what, label);
  }
  size_t id_bytes = tokens * sizeof(uint32_t);
  size_t tok_cap = mdr_arena_token_ids_bytes(r->arena);
  if (id_bytes > tok_cap) die("library: token_ids holds %zu bytes < %zu tokens", tok_cap, tokens);
  uint32_t *got = xmalloc(id_bytes);
  CHECK(b, mdr_backend_copy_d2h(b, got, mdr_arena_token_ids(r->arena), id_bytes));
  for (size_t i = 0; i < tokens; i++)
    if (got[i] != r->ids[i]) die("validation failed (%s): token_ids[%zu] = %u, expected %u", label, i, got[i], r->ids[i]);
  free(got);
  size_t guard = tok_cap - id_bytes < GUARD_BYTES ? tok_cap - id_bytes : GUARD_BYTES;
  expect_bytes(b, mdr_arena_token_ids(r->arena) + id_bytes, guard, POISON, "token_ids past the step's ids", label);
}

/* ---- cases ---- */

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
  uint64_t eager_steps;   /* graph strategies: steps that ran eagerly */
} bench_case;

typedef struct sweep {
  bench_case *cases;
  size_t n, total;
} sweep;

static double nan_if_zero(double x) { return x > 0 ? x : NAN; }

/* Speedups vs eager-memset of the same (preset, policy, tokens): cases
 * [first, end) hold one such block per token count. */
static void fill_speedups(bench_case *c, size_t n) {
  for (size_t i = 0; i < n; i++) {
    c[i].speedup = c[i].cpu_speedup = NAN;
    for (size_t j = 0; j < n; j++) {
      if (c[j].strat != STRAT_EAGER_MEMSET || c[j].tokens != c[i].tokens || !c[j].measured) continue;
      c[i].speedup = c[j].gpu.med / nan_if_zero(c[i].gpu.med);
      c[i].cpu_speedup = c[j].cpu.med / nan_if_zero(c[i].cpu.med);
    }
  }
}

static void print_table_header(void) {
  printf("%-18s %-6s %6s %-19s %9s %22s %8s %8s %8s %8s %8s %7s %7s %7s\n", "preset", "policy", "tokens",
         "strategy", "MB", "GPU us med [p10-p90]", "loop us", "cold us", "CPU us", "CPU chg", "GB/s",
         "xfloor", "speedup", "CPU spd");
}

static void fmt(char *out, size_t n, const char *f, double x) {
  if (isfinite(x)) snprintf(out, n, f, x);
  else snprintf(out, n, "-");
}

static void print_case(const bench_case *c) {
  char gpu[48], loop[16], cold[16], cpu[16], chg[16], gbps[16], xf[16], sp[16], csp[16];
  if (isfinite(c->gpu.med)) snprintf(gpu, sizeof gpu, "%.2f [%.2f-%.2f]", c->gpu.med, c->gpu.p10, c->gpu.p90);
  else snprintf(gpu, sizeof gpu, "-");
  fmt(loop, sizeof loop, "%.2f", c->loop_us);
  fmt(cold, sizeof cold, "%.2f", c->cold.med);
  fmt(cpu, sizeof cpu, "%.2f", c->cpu.med);
  fmt(chg, sizeof chg, "%.2f", c->cpu_vary.med);
  fmt(gbps, sizeof gbps, "%.1f", c->gbps);
  fmt(xf, sizeof xf, "%.2f", c->x_floor);
  fmt(sp, sizeof sp, "%.2f", c->speedup);
  fmt(csp, sizeof csp, "%.2f", c->cpu_speedup);
  if (!c->measured) {
    printf("%-18s %-6s %6zu %-19s %9.3f  skipped: %s\n", c->preset, k_policy_names[c->policy], c->tokens,
           k_strategy_names[c->strat], (double)c->bytes / 1e6, c->note ? c->note : "");
    return;
  }
  printf("%-18s %-6s %6zu %-19s %9.3f %22s %8s %8s %8s %8s %8s %7s %7s %7s\n", c->preset,
         k_policy_names[c->policy], c->tokens, k_strategy_names[c->strat], (double)c->bytes / 1e6, gpu,
         loop, cold, cpu, chg, gbps, xf, sp, csp);
}

typedef struct bench_env {
  options *o;
  mdr_backend *b;
  mdr_stream stream;
  gpu_ctx gpu;
  floors fl;
  uint32_t *ids;        /* M ids in host memory */
  uint32_t *ids_upload; /* the eager upload's source: pinned on the GPU */
  FILE *plans;
  bool first_plan_preset;
} bench_env;

/* The plan at `tokens` under the arena's current policy: bytes, segments. */
static size_t plan_bytes(mdr_backend *b, const mdr_arena *a, size_t tokens, size_t *segments) {
  mdr_segment plan[MDR_ZERO_PLAN_MAX];
  size_t n = 0, bytes = 0;
  CHECK(b, mdr_arena_zero_plan(a, tokens, plan, MDR_ZERO_PLAN_MAX, &n));
  for (size_t i = 0; i < n; i++) bytes += plan[i].bytes;
  if (segments) *segments = n;
  return bytes;
}

static void measure_case(bench_env *e, runner *r, bench_case *c) {
  size_t reps = e->o->reps;
  mdr_graph_stats before = {0}, after = {0};
  if (r->cache) CHECK(e->b, mdr_graph_cache_stats(r->cache, &before));
  for (int i = 0; i < WARMUP_STEPS; i++) runner_step(r, c->tokens);
  runner_sync(r);
  c->gpu = c->cold = k_no_summary;
  c->loop_us = NAN;
#ifdef MDR_HAVE_CUDA
  if (e->gpu.on) {
    c->gpu = gpu_time_steps(&e->gpu, runner_step, r, c->tokens, reps, false);
    c->loop_us = gpu_time_loop(&e->gpu, runner_step, r, c->tokens, reps);
    c->cold = gpu_time_steps(&e->gpu, runner_step, r, c->tokens, reps, true);
  }
#endif
  c->cpu = cpu_time_steps(r, c->tokens, reps);
  c->cpu_vary = k_no_summary;
  if (r->cache && partner_tokens(c->tokens) <= e->o->m) c->cpu_vary = cpu_time_steps_vary(r, c->tokens, reps);
  if (r->cache) {
    CHECK(e->b, mdr_graph_cache_stats(r->cache, &after));
    c->eager_steps = after.eager_steps - before.eager_steps;
  }
  c->gbps = (double)c->bytes / (nan_if_zero(c->gpu.med) * 1e3);
  c->floor_us = e->gpu.on ? floor_us(&e->fl, c->bytes) : NAN;
  c->x_floor = c->gpu.med / c->floor_us;
  c->measured = true;
}

/* The token count each strategy is validated at: the middle of the sweep. */
static size_t validation_tokens(const options *o) { return o->tokens[o->n_tokens / 2]; }

static void write_plans(bench_env *e, const char *preset, mdr_arena *a);

static mdr_arena *make_arena(bench_env *e, const char *preset) {
  mdr_model_config cfg;
  mdr_limits lim = {.max_batch_tokens = e->o->m, .max_seq_len = e->o->seq,
                    .kv_block_size = e->o->block, .max_batch_size = e->o->batch};
  mdr_sizes sizes;
  mdr_arena *a = NULL;
  CHECK(e->b, mdr_model_preset(preset, &cfg));
  CHECK(e->b, mdr_sizes_from_config(&cfg, &lim, &sizes));
  CHECK(e->b, mdr_arena_create(e->b, &sizes, &a));
  return a;
}

/* Every (policy, strategy, tokens) case of one preset. */
static void run_preset(bench_env *e, const char *preset, sweep *sw) {
  options *o = e->o;
  mdr_arena *a = make_arena(e, preset);
  printf("\n%s: arena %.1f MB, M = %zu\n", preset, (double)mdr_arena_slab_bytes(a) / 1e6, o->m);
  write_plans(e, preset, a);
  runner r = {.b = e->b, .arena = a, .stream = e->stream, .ids = e->ids, .ids_upload = e->ids_upload,
              .gpu = e->gpu.on};
  for (int p = 0; p < MDR_ROWS_POLICY_COUNT; p++) {
    if (!o->policy_on[p]) continue;
    CHECK(e->b, mdr_arena_set_rows_policy(a, (mdr_rows_policy)p));
    bench_case *block = sw->cases + sw->n;
    for (int s = 0; s < STRAT_COUNT; s++) {
      if (!o->strategy_on[s]) continue;
      const char *why = NULL;
      bool ok = runner_begin(&r, (strategy)s, o->tokens, o->n_tokens, &why);
      if (ok) {
        char label[128];
        snprintf(label, sizeof label, "%s %s %s at %zu tokens", preset, k_policy_names[p], k_strategy_names[s],
                 validation_tokens(o));
        validate(&r, validation_tokens(o), label);
      }
      for (size_t t = 0; t < o->n_tokens; t++) {
        bench_case *c = &sw->cases[sw->n++];
        *c = (bench_case){.preset = preset, .policy = (mdr_rows_policy)p, .tokens = o->tokens[t],
                          .strat = (strategy)s, .note = why};
        c->bytes = plan_bytes(e->b, a, c->tokens, &c->segments);
        fprintf(stderr, "[%zu/%zu] %s %s %zu %s\n", sw->n, sw->total, preset, k_policy_names[p], c->tokens,
                k_strategy_names[s]);
        fflush(stderr);
        if (ok) measure_case(e, &r, c);
      }
      if (ok) runner_end(&r);
    }
    size_t n_block = (size_t)(sw->cases + sw->n - block);
    fill_speedups(block, n_block);
    print_table_header();
    for (size_t t = 0; t < o->n_tokens; t++)
      for (size_t i = 0; i < n_block; i++)
        if (block[i].tokens == o->tokens[t]) print_case(&block[i]);
  }
  fflush(stdout);
  runner_sync(&r);
  mdr_arena_destroy(a);
}

/* ---- plans.json: what the PyTorch peer zeroes ---- */

static void write_plans(bench_env *e, const char *preset, mdr_arena *a) {
  FILE *f = e->plans;
  fprintf(f, "%s\n    {\"preset\": ", e->first_plan_preset ? "" : ",");
  e->first_plan_preset = false;
  json_str(f, preset);
  fprintf(f, ", \"M\": %zu, \"token_ids\": \"token_ids\", \"token_ids_bytes\": %zu,\n     \"buffers\": {",
          mdr_arena_max_batch_tokens(a), mdr_arena_token_ids_bytes(a));
  bool first = true;
  for (int i = 0; i < MDR_BUF_COUNT; i++) {
    size_t n = mdr_arena_bytes(a, (mdr_buffer)i);
    if (!n) continue;
    fprintf(f, "%s", first ? "" : ", ");
    first = false;
    json_str(f, mdr_buffer_name((mdr_buffer)i));
    fprintf(f, ": %zu", n);
  }
  fprintf(f, "},\n     \"plans\": [");
  first = true;
  mdr_rows_policy saved = mdr_arena_rows_policy(a);
  for (int p = 0; p < MDR_ROWS_POLICY_COUNT; p++) {
    if (!e->o->policy_on[p]) continue;
    CHECK(e->b, mdr_arena_set_rows_policy(a, (mdr_rows_policy)p));
    for (size_t t = 0; t < e->o->n_tokens; t++) {
      mdr_segment plan[MDR_ZERO_PLAN_MAX];
      size_t n = 0, bytes = plan_bytes(e->b, a, e->o->tokens[t], NULL);
      CHECK(e->b, mdr_arena_zero_plan(a, e->o->tokens[t], plan, MDR_ZERO_PLAN_MAX, &n));
      fprintf(f, "%s\n      {\"policy\": \"%s\", \"tokens\": %zu, \"bytes\": %zu, \"segments\": [", first ? "" : ",",
              k_policy_names[p], e->o->tokens[t], bytes);
      first = false;
      for (size_t i = 0; i < n; i++) {
        mdr_buffer buf = buffer_at(a, plan[i].ptr);
        if (buf == MDR_BUF_COUNT) die("library: plan segment %zu does not start at a buffer", i);
        fprintf(f, "%s{\"buffer\": ", i ? ", " : "");
        json_str(f, mdr_buffer_name(buf));
        fprintf(f, ", \"offset\": 0, \"bytes\": %zu}", plan[i].bytes);
      }
      fprintf(f, "]}");
    }
  }
  fprintf(f, "]}");
  CHECK(e->b, mdr_arena_set_rows_policy(a, saved));
}

/* ---- graph costs ---- */

typedef struct graph_costs {
  const char *preset;
  mdr_rows_policy policy; /* the first policy of the sweep */
  double *capture_us; /* per token count of the sweep */
  double prepare_all_s;
  size_t graphs_after;
  double capture_all_us; /* capture_us total of that prepare */
} graph_costs;

static mdr_graph_cache *fused_exact_cache(bench_env *e, mdr_arena *a) {
  mdr_graph_cache_options o;
  mdr_graph_cache *c = NULL;
  mdr_graph_cache_options_default(&o);
  o.zero = MDR_ZERO_FUSED;
  CHECK(e->b, mdr_graph_cache_create(a, e->stream, &o, &c));
  return c;
}

static void measure_graph_costs(bench_env *e, const char *preset, graph_costs *g) {
  mdr_arena *a = make_arena(e, preset);
  size_t m = e->o->m;
  g->preset = preset;
  g->policy = e->o->policy_on[MDR_ROWS_SEED] ? MDR_ROWS_SEED : MDR_ROWS_ALL;
  CHECK(e->b, mdr_arena_set_rows_policy(a, g->policy));
  g->capture_us = xmalloc(e->o->n_tokens * sizeof *g->capture_us);
  mdr_graph_cache *c = fused_exact_cache(e, a);
  for (size_t t = 0; t < e->o->n_tokens; t++) {
    mdr_graph_stats s0, s1;
    CHECK(e->b, mdr_graph_cache_stats(c, &s0));
    CHECK(e->b, mdr_graph_cache_prepare(c, &e->o->tokens[t], 1));
    CHECK(e->b, mdr_graph_cache_stats(c, &s1));
    g->capture_us[t] = s1.capture_us - s0.capture_us;
  }
  mdr_graph_cache_destroy(c);

  size_t *every = xmalloc(m * sizeof *every);
  for (size_t i = 0; i < m; i++) every[i] = i + 1;
  c = fused_exact_cache(e, a);
  double t0 = now_us();
  CHECK(e->b, mdr_graph_cache_prepare(c, every, m));
  CHECK(e->b, mdr_backend_synchronize(e->b, e->stream));
  g->prepare_all_s = (now_us() - t0) / 1e6;
  mdr_graph_stats s;
  CHECK(e->b, mdr_graph_cache_stats(c, &s));
  g->graphs_after = s.graphs;
  g->capture_all_us = s.capture_us;
  mdr_graph_cache_destroy(c);
  free(every);
  mdr_arena_destroy(a);
}

/* CPU µs of a strategy at (preset, policy, tokens) from the sweep; NAN if absent. */
static double cpu_of(const sweep *sw, const char *preset, mdr_rows_policy p, size_t tokens, strategy s) {
  for (size_t i = 0; i < sw->n; i++) {
    const bench_case *c = &sw->cases[i];
    if (c->measured && c->strat == s && c->tokens == tokens && c->policy == p &&
        strcmp(c->preset, preset) == 0)
      return c->cpu.med;
  }
  return NAN;
}

static void print_graph_costs(const bench_env *e, const graph_costs *g, const sweep *sw) {
  const options *o = e->o;
  printf("\ngraph costs: %s, fused EXACT cache, policy %s (CPU us per step from the sweep)\n", g->preset,
         k_policy_names[g->policy]);
  printf("  %6s %15s %12s %12s %12s\n", "tokens", "capture+inst us", "CPU eager-m", "CPU graph-f",
         "CPU graph-m");
  for (size_t t = 0; t < o->n_tokens; t++) {
    char em[16], gf[16], gm[16];
    fmt(em, sizeof em, "%.2f", cpu_of(sw, g->preset, g->policy, o->tokens[t], STRAT_EAGER_MEMSET));
    fmt(gf, sizeof gf, "%.2f", cpu_of(sw, g->preset, g->policy, o->tokens[t], STRAT_GRAPH_FUSED));
    fmt(gm, sizeof gm, "%.2f", cpu_of(sw, g->preset, g->policy, o->tokens[t], STRAT_GRAPH_MEMSET));
    printf("  %6zu %15.1f %12s %12s %12s\n", o->tokens[t], g->capture_us[t], em, gf, gm);
  }
  printf("  prepare of every count 1..%zu: %.3f s (goal <= 0.5 s)%s, graphs after: %zu, capture_us total %.0f\n",
         o->m, g->prepare_all_s, g->prepare_all_s <= 0.5 ? "" : "  ** over goal **", g->graphs_after,
         g->capture_all_us);
}

/* ---- results.json / results.csv ---- */

static void write_machine(FILE *f, const bench_env *e) {
  struct utsname u;
  bool have_uname = uname(&u) == 0;
  fprintf(f, "  \"machine\": {\"backend\": ");
  json_str(f, mdr_backend_name(e->b));
  fprintf(f, ", \"mdr_version\": %u, \"host\": ", mdr_version_number());
  json_str(f, have_uname ? u.nodename : "");
  fprintf(f, ", \"os\": ");
  json_str(f, have_uname ? u.sysname : "");
  fprintf(f, ", \"arch\": ");
  json_str(f, have_uname ? u.machine : "");
#ifdef MDR_HAVE_CUDA
  if (e->gpu.on) {
    struct cudaDeviceProp prop;
    int dev = 0, sms = 0, l2 = 0, driver = 0, runtime = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    CUDA_CHECK(cudaDriverGetVersion(&driver));
    CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
    fprintf(f, ", \"gpu\": ");
    json_str(f, prop.name);
    fprintf(f, ", \"cc\": \"%d.%d\", \"sm_count\": %d, \"l2_bytes\": %d, \"memory_bytes\": %zu, "
               "\"driver_version\": %d, \"runtime_version\": %d",
            prop.major, prop.minor, sms, l2, prop.totalGlobalMem, driver, runtime);
  }
#endif
  fprintf(f, "},\n");
}

static void write_case_json(FILE *f, const bench_case *c) {
  fprintf(f, "    {\"preset\": ");
  json_str(f, c->preset);
  fprintf(f, ", \"policy\": \"%s\", \"tokens\": %zu, \"strategy\": \"%s\", \"measured\": %s",
          k_policy_names[c->policy], c->tokens, k_strategy_names[c->strat], c->measured ? "true" : "false");
  if (c->note) fprintf(f, ", \"note\": "), json_str(f, c->note);
  fprintf(f, ", \"bytes\": %zu, \"segments\": %zu", c->bytes, c->segments);
  const struct { const char *key; double v; } nums[] = {
      {"gpu_us_med", c->gpu.med},   {"gpu_us_p10", c->gpu.p10},   {"gpu_us_p90", c->gpu.p90},
      {"loop_us_mean", c->loop_us}, {"cold_us_med", c->cold.med}, {"cold_us_p10", c->cold.p10},
      {"cold_us_p90", c->cold.p90}, {"cpu_us_med", c->cpu.med},   {"cpu_us_p10", c->cpu.p10},
      {"cpu_us_p90", c->cpu.p90},   {"gbps", c->gbps},            {"floor_us", c->floor_us},
      {"x_floor", c->x_floor},      {"speedup", c->speedup},      {"cpu_speedup", c->cpu_speedup},
      {"cpu_vary_us_med", c->cpu_vary.med}, {"cpu_vary_us_p90", c->cpu_vary.p90},
  };
  for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
    fprintf(f, ", \"%s\": ", nums[i].key);
    json_num(f, nums[i].v);
  }
  fprintf(f, ", \"eager_steps\": %llu}", (unsigned long long)c->eager_steps);
}

static void write_results_json(const bench_env *e, const sweep *sw, const graph_costs *gc, size_t n_gc) {
  const options *o = e->o;
  FILE *f = open_out(o->out_dir, "results.json");
  fprintf(f, "{\n  \"command\": [");
  for (int i = 0; i < o->argc; i++) fprintf(f, "%s", i ? ", " : ""), json_str(f, o->argv[i]);
  fprintf(f, "],\n");
  write_machine(f, e);
  fprintf(f, "  \"limits\": {\"M\": %zu, \"seq\": %zu, \"block\": %zu, \"batch\": %zu}, \"reps\": %zu,\n", o->m,
          o->seq, o->block, o->batch, o->reps);
  fprintf(f, "  \"floors\": ");
  if (e->gpu.on) {
    const floors *fl = &e->fl;
    fprintf(f, "{\"ceiling_1g_gbps\": ");
    json_num(f, fl->ceiling_1g_gbps);
    fprintf(f, ", \"ceiling_4g_gbps\": ");
    json_num(f, fl->ceiling_4g_gbps);
    fprintf(f, ", \"ceiling_gbps\": ");
    json_num(f, fl->ceiling_gbps);
    fprintf(f, ", \"graph_replay_us\": {\"med\": %.4g, \"p10\": %.4g, \"p90\": %.4g, \"loop\": %.4g}",
            fl->graph_replay.med, fl->graph_replay.p10, fl->graph_replay.p90, fl->graph_replay_loop);
    fprintf(f, ", \"eager_launch_us\": {\"med\": %.4g, \"p10\": %.4g, \"p90\": %.4g, \"loop\": %.4g}},\n",
            fl->eager_launch.med, fl->eager_launch.p10, fl->eager_launch.p90, fl->eager_launch_loop);
  } else {
    fprintf(f, "null,\n");
  }
  fprintf(f, "  \"graph_costs\": [");
  for (size_t i = 0; i < n_gc; i++) {
    fprintf(f, "%s\n    {\"preset\": ", i ? "," : "");
    json_str(f, gc[i].preset);
    fprintf(f, ", \"policy\": \"%s\", \"capture_us\": {", k_policy_names[gc[i].policy]);
    for (size_t t = 0; t < o->n_tokens; t++) fprintf(f, "%s\"%zu\": %.1f", t ? ", " : "", o->tokens[t], gc[i].capture_us[t]);
    fprintf(f, "}, \"prepare_all_s\": %.4f, \"graphs_after\": %zu, \"capture_all_us\": %.0f}", gc[i].prepare_all_s,
            gc[i].graphs_after, gc[i].capture_all_us);
  }
  fprintf(f, "],\n  \"cases\": [\n");
  for (size_t i = 0; i < sw->n; i++) {
    write_case_json(f, &sw->cases[i]);
    fprintf(f, "%s\n", i + 1 < sw->n ? "," : "");
  }
  fprintf(f, "  ]\n}\n");
  fclose(f);
}

static void write_results_csv(const bench_env *e, const sweep *sw) {
  FILE *f = open_out(e->o->out_dir, "results.csv");
  fprintf(f, "preset,policy,tokens,strategy,measured,bytes,segments,gpu_us_med,gpu_us_p10,gpu_us_p90,"
             "loop_us_mean,cold_us_med,cpu_us_med,gbps,floor_us,x_floor,speedup,cpu_speedup,cpu_vary_us_med,"
             "eager_steps\n");
  for (size_t i = 0; i < sw->n; i++) {
    const bench_case *c = &sw->cases[i];
    fprintf(f, "%s,%s,%zu,%s,%d,%zu,%zu", c->preset, k_policy_names[c->policy], c->tokens,
            k_strategy_names[c->strat], c->measured, c->bytes, c->segments);
    const double nums[] = {c->gpu.med, c->gpu.p10, c->gpu.p90, c->loop_us, c->cold.med, c->cpu.med,
                           c->gbps, c->floor_us, c->x_floor, c->speedup, c->cpu_speedup, c->cpu_vary.med};
    for (size_t k = 0; k < sizeof nums / sizeof nums[0]; k++) fputc(',', f), csv_num(f, nums[k]);
    fprintf(f, ",%llu\n", (unsigned long long)c->eager_steps);
  }
  fclose(f);
}

/* ---- main ---- */

static size_t count_on(const bool *flags, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) k += flags[i];
  return k;
}

static void alloc_ids(bench_env *e) {
  size_t m = e->o->m;
  e->ids = xmalloc(m * sizeof *e->ids);
  for (size_t i = 0; i < m; i++) e->ids[i] = FIRST_TOKEN_ID + (uint32_t)i;
  e->ids_upload = e->ids;
#ifdef MDR_HAVE_CUDA
  if (e->gpu.on) {
    void *pinned = NULL;
    CUDA_CHECK(cudaHostAlloc(&pinned, m * sizeof *e->ids, cudaHostAllocDefault));
    memcpy(pinned, e->ids, m * sizeof *e->ids); /* written once: the eager steps never rewrite it */
    e->ids_upload = pinned;
  }
#endif
}

static void free_ids(bench_env *e) {
#ifdef MDR_HAVE_CUDA
  if (e->gpu.on) cudaFreeHost(e->ids_upload);
#endif
  free(e->ids);
}

int main(int argc, char **argv) {
  options o;
  bench_env e = {.o = &o, .first_plan_preset = true};
  parse_options(argc, argv, &o);
  CHECK(NULL, mdr_backend_create_default(&e.b));
  e.gpu.on = strcmp(mdr_backend_name(e.b), "cuda") == 0;
  if (!o.m) o.m = e.gpu.on ? DEFAULT_M_GPU : DEFAULT_M_HOST;
  if (e.gpu.on) {
    printf("backend: cuda (GPU timing with events; CPU figures from clock_gettime)\n");
  } else {
    printf("backend: host — no GPU: host backend, CPU-side figures only (GPU columns \"-\")\n");
    printf("note: host backend defaults to M = 256 (not 4096) to keep RAM and time low; M = %zu\n", o.m);
  }
  printf("limits: M %zu, seq %zu, block %zu, batch %zu; reps %zu\n", o.m, o.seq, o.block, o.batch, o.reps);
  clip_token_counts(&o);
  CHECK(e.b, mdr_backend_stream_create(e.b, &e.stream));
  mkdir_p(o.out_dir);

#ifdef MDR_HAVE_CUDA
  if (e.gpu.on) {
    gpu_init(&e.gpu, e.stream, o.reps > CEILING_REPS ? o.reps : CEILING_REPS);
    measure_floors(&e.gpu, o.reps, &e.fl);
    print_floors(&e.fl);
  }
#endif
  alloc_ids(&e);

  size_t n_presets = count_on(o.preset_on, mdr_model_preset_count());
  sweep sw = {.total = n_presets * count_on(o.policy_on, MDR_ROWS_POLICY_COUNT) *
                       count_on(o.strategy_on, STRAT_COUNT) * o.n_tokens};
  sw.cases = xmalloc(sw.total * sizeof *sw.cases);
  e.plans = open_out(o.out_dir, "plans.json");
  fprintf(e.plans, "{\n  \"M\": %zu, \"tokens\": [", o.m);
  for (size_t t = 0; t < o.n_tokens; t++) fprintf(e.plans, "%s%zu", t ? ", " : "", o.tokens[t]);
  fprintf(e.plans, "],\n  \"presets\": [");
  for (size_t i = 0; i < mdr_model_preset_count(); i++)
    if (o.preset_on[i]) run_preset(&e, mdr_model_preset_name(i), &sw);
  fprintf(e.plans, "\n  ]\n}\n");
  fclose(e.plans);

  bool costs = o.graph_costs < 0 ? e.gpu.on : o.graph_costs == 1;
  graph_costs *gc = xmalloc(n_presets * sizeof *gc);
  size_t n_gc = 0;
  for (size_t i = 0; costs && i < mdr_model_preset_count(); i++) {
    if (!o.preset_on[i]) continue;
    measure_graph_costs(&e, mdr_model_preset_name(i), &gc[n_gc]);
    print_graph_costs(&e, &gc[n_gc], &sw);
    n_gc++;
  }

  write_results_json(&e, &sw, gc, n_gc);
  write_results_csv(&e, &sw);
  printf("\nwrote %s/results.json, %s/results.csv, %s/plans.json\n", o.out_dir, o.out_dir, o.out_dir);

  for (size_t i = 0; i < n_gc; i++) free(gc[i].capture_us);
  free(gc);
  free(sw.cases);
  free_ids(&e);
#ifdef MDR_HAVE_CUDA
  if (e.gpu.on) gpu_fini(&e.gpu);
#endif
  mdr_backend_stream_destroy(e.b, e.stream);
  mdr_backend_destroy(e.b);
  return 0;
}
