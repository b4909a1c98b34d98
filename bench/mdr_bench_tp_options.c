/* mdr_bench_tp_options.c — mdr-bench-tp's command line: --opt value and
 * --opt=value, the defaults of a full and a --quick run, and a refusal
 * (exit 2, one line on stderr saying what is valid) for anything else.
 * bench/README.md (section mdr-bench-tp) lists every option. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_tp.h"

#define TP_COUNT_OF(a) (sizeof(a) / sizeof *(a))

const char *const k_tp_path_names[TP_PATH_COUNT] = {"nccl-eager", "nccl-graph", "nccl-window", "mdr-graph",
                                                    "mdr-graph-dev", "mdr-1shot", "mdr-2shot", "mdr-dyn"};
const char *const k_tp_sweep_names[TP_SWEEP_COUNT] = {"sizes", "tokens"};

/* Powers of 4 from 2 KiB to 8 MiB (1, 4, ..., 4096 rows of 2 KiB), in a
 * full run and a quick one alike (the one-shot / two-shot crossover and the
 * closing table need every one); the tokens sweep holds the counts of the
 * DYNAMIC goal (TP_XEXACT_TOKENS: 1, 2, 8, 64, 512, 4096) in both. */
static const size_t k_sizes[] = {2 << 10, 8 << 10, 32 << 10, 128 << 10, 512 << 10, 2 << 20, 8 << 20};
static const size_t k_tokens[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
static const size_t k_quick_tokens[] = {1, 2, 8, 64, 512, 4096};

/* --soak-algo values (mdr_all_reduce_algo_name's, and the path names' short forms) */
static const struct {
  const char *name;
  mdr_all_reduce_algo algo;
} k_soak_algos[] = {{"auto", MDR_ALL_REDUCE_AUTO},     {"one-shot", MDR_ALL_REDUCE_ONE_SHOT}, {"two-shot", MDR_ALL_REDUCE_TWO_SHOT},
                    {"1shot", MDR_ALL_REDUCE_ONE_SHOT}, {"2shot", MDR_ALL_REDUCE_TWO_SHOT}};

BENCH_NORETURN static void tp_refuse(const char *fmt, ...) BENCH_PRINTF(1, 2);
static void tp_refuse(const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  tp_exit(TP_EXIT_USAGE, "%s (--help lists the options)", msg);
}

static void tp_usage(FILE *f) {
  fprintf(f,
          "usage: mdr-bench-tp [options]        (--opt value or --opt=value)\n"
          "two GPUs, one thread each: bf16 sum all-reduce, in place, eight ways side by side:\n"
          "  nccl-eager     ncclAllReduce per op\n"
          "  nccl-graph     the same captured in a CUDA graph\n"
          "  nccl-window    a symmetric NCCL window, captured\n"
          "  mdr-graph      mdr_all_reduce (AUTO, mdr_all_reduce_desc_make) in an EXACT graph cache body, mdr_graph_cache_step\n"
          "  mdr-graph-dev  the same caches, mdr_graph_cache_step_device (ids already on the device)\n"
          "  mdr-1shot      mdr_all_reduce, MDR_ALL_REDUCE_ONE_SHOT, EXACT cache, device steps (skipped over\n"
          "                 MDR_ALL_REDUCE_ONE_SHOT_MAX_BYTES, %zu KiB)\n"
          "  mdr-2shot      mdr_all_reduce, MDR_ALL_REDUCE_TWO_SHOT, EXACT cache, device steps\n"
          "  mdr-dyn        one DYNAMIC graph: mdr_all_reduce, AUTO, the row count read on the device\n"
          "                 (count_ptr), device steps; reported against the EXACT path (xexact)\n"
          "  (mdr-1shot and mdr-2shot are skipped, with the reason, where mdr's kernels cannot run)\n"
          "  --reps N         timed operations per figure (default %d; --quick %d)\n"
          "  --sizes a,b      message sizes in bytes, K / M suffixes allowed (KiB, MiB); multiples of %d,\n"
          "                   at most %zu MiB (default and --quick 2K,8K,32K,128K,512K,2M,8M);\n"
          "                   'none' skips the sizes sweep\n"
          "  --tokens a,b     decode token counts at %s's hidden size, 1..%d\n"
          "                   (default 1,2,4,...,4096; --quick 1,2,8,64,512,4096); 'none' skips the sweep\n"
          "  --paths a,b      any of nccl-eager,nccl-graph,nccl-window,mdr-graph,mdr-graph-dev,mdr-1shot,\n"
          "                   mdr-2shot,mdr-dyn (default: all eight)\n"
          "  --soak N         instead of the sweeps: N back-to-back replays (1..%d) of one EXACT graph\n"
          "                   holding one mdr all-reduce, the epoch set to 0xFFFFFFFF - N/2 first so that\n"
          "                   it wraps half-way; every replay checked on the device, every %d and the last\n"
          "                   on the host; exit 1 on any wrong value or epoch; writes soak.json\n"
          "  --soak-algo A    the soak's algorithm: auto (default), one-shot (1shot), two-shot (2shot)\n"
          "  --soak-size B    the soak's message, bytes (K / M suffixes), multiples of %d (default 8K)\n"
          "  --norm           instead of the sweeps: the fused all-reduce + residual add + RMSNorm\n"
          "                   (norm_output) against mdr's all-reduce then a separate RMSNorm kernel of the\n"
          "                   same arithmetic, and against ncclAllReduce + that kernel; one-shot and two-shot;\n"
          "                   every path validated bit for bit first; writes norm.csv and norm.json\n"
          "  --norm-tokens a,b  --norm's token counts, 1..%d (default 1,2,4,8,16,32,64,128)\n"
          "  --norm-hidden a,b  --norm's hidden sizes, bf16 elements a row (default 4096,6144,8192)\n"
          "  --barrier        instead of the sweeps: mdr's block barrier (the two-shot's, its real flags and\n"
          "                   counters) against NCCL's LSA barrier (ncclLsaBarrierSession, device API, no\n"
          "                   multicast), %d barriers a launch, grids 1, 8, 32 and the SM cap; both validated\n"
          "                   first (values written before a barrier read after it); --reps, --quick apply;\n"
          "                   writes barrier.csv and barrier.json (exit 77 without NCCL's device API)\n"
          "  --out DIR        output folder; refused if it holds results, unless --force\n"
          "                   (default: a fresh bench-out/tp-<UTC timestamp>/, bench-out/tp-latest points to it)\n"
          "  --force          write into an --out folder that holds an earlier run's files\n"
          "  --quick          reps %d and the lists above (about a minute on 2 x H200)\n"
          "  --version        version, git revision and build type\n"
          "  --help           this text\n"
          "explicit options win over --quick whatever the order. Exit: 0 done, 1 a failure (validation,\n"
          "CUDA, NCCL, mdr, watchdog; the soak: a wrong value or epoch), 2 a refused command line, 77 skipped\n"
          "(fewer than 2 GPUs, no NCCL; the soak and --barrier: mdr's kernels cannot run here; --barrier:\n"
          "no NCCL device API).\n",
          MDR_ALL_REDUCE_ONE_SHOT_MAX_BYTES >> 10, TP_DEFAULT_REPS, TP_QUICK_REPS, TP_SIZE_ROW_BYTES, TP_MAX_SIZE_BYTES >> 20,
          TP_PRESET, TP_MAX_TOKENS, TP_SOAK_MAX, TP_SOAK_CHECK_EVERY, TP_SIZE_ROW_BYTES, TP_NORM_MAX_TOKENS,
          TP_BARRIER_K, TP_QUICK_REPS);
}

static void tp_print_version(void) {
  unsigned lib = mdr_version_number();
  printf("mdr-bench-tp %d.%d.%d (built against mdr headers %d.%d.%d, libmdr %u.%u.%u at run time)\n",
         MDR_VERSION_MAJOR, MDR_VERSION_MINOR, MDR_VERSION_PATCH, MDR_VERSION_MAJOR, MDR_VERSION_MINOR,
         MDR_VERSION_PATCH, lib / 10000, lib / 100 % 100, lib % 100);
  printf("git revision %s, build type %s, NCCL at build time: %s\n", bench_git_revision(), bench_build_type(),
#ifdef TP_GPU
         "yes"
#else
         "no"
#endif
  );
}

/* A positive integer (at most TP_MAX_SIZE_BYTES before its suffix);
 * `suffixes`: K (1024) and M (1048576) allowed. */
static size_t tp_parse_count(const char *opt, const char *s, bool suffixes) {
  char *end = NULL;
  if (s[0] < '0' || s[0] > '9') tp_refuse("%s: expected a positive integer, got '%s'", opt, s);
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  unsigned long long mult = 1;
  if (suffixes && end && (*end == 'K' || *end == 'k')) mult = 1024, end++;
  else if (suffixes && end && (*end == 'M' || *end == 'm')) mult = 1024ull * 1024, end++;
  if (errno || !end || *end || v == 0 || v > (unsigned long long)TP_MAX_SIZE_BYTES)
    tp_refuse("%s: expected a positive integer%s, got '%s'", opt, suffixes ? " (K, M suffixes allowed)" : "", s);
  return (size_t)(v * mult);
}

typedef void (*tp_item_fn)(tp_options *o, const char *item);

/* Hand each item of a comma list to fn (bench_each_item); an empty item is refused. */
typedef struct tp_item_call {
  tp_item_fn fn;
  tp_options *o;
} tp_item_call;

static void tp_call_item(void *ctx, const char *item) {
  const tp_item_call *ic = ctx;
  ic->fn(ic->o, item);
}

static void tp_for_each_item(const char *opt, const char *list, tp_item_fn fn, tp_options *o) {
  tp_item_call ic = {fn, o};
  const size_t bad = bench_each_item(list, tp_call_item, &ic);
  if (bad) tp_refuse("%s: item %zu of '%s' is empty (write a,b,c with no empty items)", opt, bad, list);
}

static void tp_add_unique(const char *opt, size_t *list, size_t *n, size_t v) {
  if (*n == TP_MAX_COUNTS) tp_refuse("%s: at most %d values", opt, TP_MAX_COUNTS);
  for (size_t i = 0; i < *n; i++)
    if (list[i] == v) tp_refuse("%s: %zu is given twice", opt, v);
  list[(*n)++] = v;
}

static void tp_add_size(tp_options *o, const char *s) {
  size_t v = tp_parse_count("--sizes", s, true);
  if (v % TP_SIZE_ROW_BYTES != 0)
    tp_refuse("--sizes: %s (%zu bytes) is not a multiple of %d bytes (rows of 1024 bf16)", s, v, TP_SIZE_ROW_BYTES);
  if (v > TP_MAX_SIZE_BYTES) tp_refuse("--sizes: %s is over %zu MiB", s, TP_MAX_SIZE_BYTES >> 20);
  tp_add_unique("--sizes", o->sizes, &o->n_sizes, v);
}

static void tp_add_tokens(tp_options *o, const char *s) {
  size_t v = tp_parse_count("--tokens", s, false);
  if (v > TP_MAX_TOKENS) tp_refuse("--tokens: %zu is over %d", v, TP_MAX_TOKENS);
  tp_add_unique("--tokens", o->tokens, &o->n_tokens, v);
}

static void tp_add_path(tp_options *o, const char *s) {
  for (int i = 0; i < TP_PATH_COUNT; i++)
    if (strcmp(s, k_tp_path_names[i]) == 0) {
      o->path_on[i] = true;
      return;
    }
  char valid[256] = "";
  for (int i = 0; i < TP_PATH_COUNT; i++) {
    strcat(valid, i ? ", " : "");
    strcat(valid, k_tp_path_names[i]);
  }
  tp_refuse("--paths: unknown path '%s'; valid: %s", s, valid);
}

/* --soak N: 1 .. TP_SOAK_MAX, digits only */
static size_t tp_parse_soak(const char *s) {
  char *end = NULL;
  if (s[0] < '0' || s[0] > '9') tp_refuse("--soak: expected a positive integer (replays), got '%s'", s);
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || !end || *end || v == 0) tp_refuse("--soak: expected a positive integer (replays), got '%s'", s);
  if (v > (unsigned long long)TP_SOAK_MAX) tp_refuse("--soak: %s is over %d replays", s, TP_SOAK_MAX);
  return (size_t)v;
}

static mdr_all_reduce_algo tp_parse_soak_algo(const char *s) {
  for (size_t i = 0; i < TP_COUNT_OF(k_soak_algos); i++)
    if (strcmp(s, k_soak_algos[i].name) == 0) return k_soak_algos[i].algo;
  tp_refuse("--soak-algo: unknown algorithm '%s'; valid: auto, one-shot, two-shot (or 1shot, 2shot)%s", s,
            strcmp(s, "nccl") == 0 ? "; nccl's all-reduce has no epoch to soak" : "");
}

typedef enum tp_opt_id {
  TP_OPT_REPS, TP_OPT_SIZES, TP_OPT_TOKENS, TP_OPT_PATHS, TP_OPT_OUT, TP_OPT_SOAK, TP_OPT_SOAK_ALGO,
  TP_OPT_SOAK_SIZE, TP_OPT_NORM_TOKENS, TP_OPT_NORM_HIDDEN, /* the options above take a value */
  TP_OPT_FORCE, TP_OPT_QUICK, TP_OPT_VERSION, TP_OPT_HELP, TP_OPT_NORM, TP_OPT_BARRIER, TP_OPT_COUNT
} tp_opt_id;
static const char *const k_opt_names[TP_OPT_COUNT] = {
    "--reps",        "--sizes",       "--tokens", "--paths", "--out",     "--soak", "--soak-algo", "--soak-size",
    "--norm-tokens", "--norm-hidden", "--force",  "--quick", "--version", "--help", "--norm",      "--barrier"};
static bool tp_takes_value(tp_opt_id id) { return id <= TP_OPT_NORM_HIDDEN; }

/* --norm's defaults: decode token counts up to one-shot fusion's range,
 * the hidden sizes of the models mdr serves */
static const size_t k_norm_tokens[] = {1, 2, 4, 8, 16, 32, 64, 128};
static const size_t k_norm_hidden[] = {4096, 6144, 8192};

static void tp_add_norm_tokens(tp_options *o, const char *s) {
  size_t v = tp_parse_count("--norm-tokens", s, false);
  if (v > TP_NORM_MAX_TOKENS) tp_refuse("--norm-tokens: %zu is over %d", v, TP_NORM_MAX_TOKENS);
  tp_add_unique("--norm-tokens", o->norm_tokens, &o->n_norm_tokens, v);
}

static void tp_add_norm_hidden(tp_options *o, const char *s) {
  size_t v = tp_parse_count("--norm-hidden", s, false);
  if (v % 8 != 0 || v * 2 > MDR_ALL_REDUCE_NORM_MAX_ROW_BYTES)
    tp_refuse("--norm-hidden: %zu is not a multiple of 8 up to %zu (rows of whole 16-byte vectors, at most "
              "MDR_ALL_REDUCE_NORM_MAX_ROW_BYTES)",
              v, MDR_ALL_REDUCE_NORM_MAX_ROW_BYTES / 2);
  tp_add_unique("--norm-hidden", o->norm_hidden, &o->n_norm_hidden, v);
}

void tp_parse_options(int argc, char **argv, tp_options *o) {
  memset(o, 0, sizeof *o);
  o->argc = argc;
  o->argv = argv;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    char name[32];
    const char *eq;
    const int id = bench_option_id(arg, k_opt_names, TP_OPT_COUNT, name, sizeof name, &eq);
    if (id == TP_OPT_COUNT) tp_refuse("unknown option '%s'", arg);
    const char *value = NULL;
    if (tp_takes_value((tp_opt_id)id)) {
      if (eq) value = eq + 1;
      else if (i + 1 < argc) value = argv[++i];
      else tp_refuse("%s needs a value", name);
    } else if (eq) {
      tp_refuse("%s takes no value (got '%s')", name, arg);
    }
    switch ((tp_opt_id)id) {
      case TP_OPT_REPS:
        o->reps = tp_parse_count(name, value, false);
        if (o->reps > TP_MAX_REPS) tp_refuse("--reps: at most %d", TP_MAX_REPS);
        o->set_reps = true;
        break;
      case TP_OPT_SIZES:
        if (o->set_sizes) tp_refuse("--sizes given twice");
        o->set_sizes = true;
        if (strcmp(value, "none") != 0) tp_for_each_item(name, value, tp_add_size, o);
        break;
      case TP_OPT_TOKENS:
        if (o->set_tokens) tp_refuse("--tokens given twice");
        o->set_tokens = true;
        if (strcmp(value, "none") != 0) tp_for_each_item(name, value, tp_add_tokens, o);
        break;
      case TP_OPT_PATHS:
        o->set_paths = true;
        tp_for_each_item(name, value, tp_add_path, o);
        break;
      case TP_OPT_SOAK:
        if (o->soak) tp_refuse("--soak given twice");
        o->soak = tp_parse_soak(value);
        break;
      case TP_OPT_SOAK_ALGO:
        if (o->set_soak_algo) tp_refuse("--soak-algo given twice");
        o->soak_algo = tp_parse_soak_algo(value);
        o->set_soak_algo = true;
        break;
      case TP_OPT_SOAK_SIZE:
        if (o->set_soak_size) tp_refuse("--soak-size given twice");
        o->soak_bytes = tp_parse_count(name, value, true);
        if (o->soak_bytes % TP_SIZE_ROW_BYTES != 0)
          tp_refuse("--soak-size: %s (%zu bytes) is not a multiple of %d bytes (rows of 1024 bf16)", value,
                    o->soak_bytes, TP_SIZE_ROW_BYTES);
        if (o->soak_bytes > TP_MAX_SIZE_BYTES) tp_refuse("--soak-size: %s is over %zu MiB", value, TP_MAX_SIZE_BYTES >> 20);
        o->set_soak_size = true;
        break;
      case TP_OPT_NORM_TOKENS:
        if (o->set_norm_tokens) tp_refuse("--norm-tokens given twice");
        o->set_norm_tokens = true;
        tp_for_each_item(name, value, tp_add_norm_tokens, o);
        break;
      case TP_OPT_NORM_HIDDEN:
        if (o->set_norm_hidden) tp_refuse("--norm-hidden given twice");
        o->set_norm_hidden = true;
        tp_for_each_item(name, value, tp_add_norm_hidden, o);
        break;
      case TP_OPT_NORM: o->norm = true; break;
      case TP_OPT_BARRIER: o->barrier = true; break;
      case TP_OPT_OUT:
        if (!*value) tp_refuse("--out: empty folder name");
        o->out_dir = value;
        break;
      case TP_OPT_FORCE: o->force = true; break;
      case TP_OPT_QUICK: o->quick = true; break;
      case TP_OPT_VERSION: tp_print_version(), exit(0);
      case TP_OPT_HELP: tp_usage(stdout), exit(0);
      case TP_OPT_COUNT: break;
    }
  }
  if ((o->set_norm_tokens || o->set_norm_hidden) && !o->norm)
    tp_refuse("%s needs --norm", o->set_norm_tokens ? "--norm-tokens" : "--norm-hidden");
  /* --barrier runs alone: only --reps, --quick, --out and --force mean something there. */
  if (o->barrier) {
    const char *other = o->norm ? "--norm" : o->soak ? "--soak" : o->set_sizes ? "--sizes" : o->set_tokens ? "--tokens"
                      : o->set_paths ? "--paths" : o->set_soak_algo ? "--soak-algo" : o->set_soak_size ? "--soak-size"
                      : NULL;
    if (other)
      tp_refuse("--barrier runs the barrier comparison alone: %s does not belong to it; leave it out", other);
    if (!o->set_reps) o->reps = o->quick ? TP_QUICK_REPS : TP_DEFAULT_REPS;
    for (int p = 0; p < TP_PATH_COUNT; p++) o->path_on[p] = false;
    return;
  }
  /* --norm runs alone: the sweeps' and the soak's options have no meaning there. */
  if (o->norm) {
    const char *other = o->soak ? "--soak" : o->set_sizes ? "--sizes" : o->set_tokens ? "--tokens"
                      : o->set_paths ? "--paths" : o->set_soak_algo ? "--soak-algo" : o->set_soak_size ? "--soak-size"
                      : NULL;
    if (other) tp_refuse("--norm runs the fused-norm comparison alone: %s does not belong to it; leave it out", other);
    if (!o->set_reps) o->reps = o->quick ? TP_QUICK_REPS : TP_DEFAULT_REPS;
    if (!o->set_norm_tokens) {
      o->n_norm_tokens = TP_COUNT_OF(k_norm_tokens);
      memcpy(o->norm_tokens, k_norm_tokens, sizeof k_norm_tokens);
    }
    if (!o->set_norm_hidden) {
      o->n_norm_hidden = TP_COUNT_OF(k_norm_hidden);
      memcpy(o->norm_hidden, k_norm_hidden, sizeof k_norm_hidden);
    }
    for (int p = 0; p < TP_PATH_COUNT; p++) o->path_on[p] = false;
    return;
  }
  /* The soak runs alone: the sweeps' options have no meaning there. */
  if (o->soak) {
    const char *sweep_opt = o->set_sizes ? "--sizes" : o->set_tokens ? "--tokens" : o->set_paths ? "--paths"
                          : o->set_reps ? "--reps" : o->quick ? "--quick" : NULL;
    if (sweep_opt) tp_refuse("--soak runs the soak alone: %s belongs to the sweeps; leave it out", sweep_opt);
    if (!o->set_soak_size) o->soak_bytes = TP_SOAK_DEFAULT_BYTES;
    if (!o->set_soak_algo) o->soak_algo = MDR_ALL_REDUCE_AUTO;
    if (o->soak_algo == MDR_ALL_REDUCE_ONE_SHOT && o->soak_bytes > MDR_ALL_REDUCE_ONE_SHOT_MAX_BYTES)
      tp_refuse("--soak-size: %zu bytes is over MDR_ALL_REDUCE_ONE_SHOT_MAX_BYTES (%zu) for --soak-algo one-shot",
                o->soak_bytes, MDR_ALL_REDUCE_ONE_SHOT_MAX_BYTES);
    o->reps = 1; /* unused */
    for (int p = 0; p < TP_PATH_COUNT; p++) o->path_on[p] = false;
    return;
  }
  if (o->set_soak_algo) tp_refuse("--soak-algo needs --soak N");
  if (o->set_soak_size) tp_refuse("--soak-size needs --soak N");
  /* Defaults; explicit options win over --quick, whatever the order. */
  if (!o->set_reps) o->reps = o->quick ? TP_QUICK_REPS : TP_DEFAULT_REPS;
  if (!o->set_sizes) {
    o->n_sizes = TP_COUNT_OF(k_sizes);
    memcpy(o->sizes, k_sizes, sizeof k_sizes);
  }
  if (!o->set_tokens) {
    const size_t *v = o->quick ? k_quick_tokens : k_tokens;
    o->n_tokens = o->quick ? TP_COUNT_OF(k_quick_tokens) : TP_COUNT_OF(k_tokens);
    memcpy(o->tokens, v, o->n_tokens * sizeof *v);
  }
  bool any_path = false;
  for (int p = 0; p < TP_PATH_COUNT; p++) any_path |= o->path_on[p];
  if (!any_path)
    for (int p = 0; p < TP_PATH_COUNT; p++) o->path_on[p] = true;
  if (o->n_sizes == 0 && o->n_tokens == 0) tp_refuse("--sizes none and --tokens none: nothing to measure");
}
