/* bench_options.c — mdr-bench's command line: parsing (--opt value and
 * --opt=value), usage, --version, and the defaults each kind of sweep fills
 * in (bench/README.md lists every option). Every bad option ends the run
 * with exit 1 and a message that says what is valid. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

const char *const k_sweep_names[] = {"full", "quick", "host-short"};

#define COUNT_OF(a) (sizeof(a) / sizeof *(a))

static const size_t k_full_tokens[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
static const size_t k_quick_tokens[] = {1, 8, 64, 512, 4096};
static const char *const k_quick_presets[] = {"glm-5.3-flash-tp2", "qwen3-next-80b"};
/* The host backend's default: a short sweep (the whole `bash scripts/run.sh`
 * in well under 2 minutes on 2 cores), since host figures rank nothing on a
 * GPU anyway. 256 = DEFAULT_M_HOST, the whole arena. */
static const size_t k_host_tokens[] = {1, 8, 64, 256};
static const char *const *const k_host_presets = k_quick_presets;
enum { HOST_SHORT_REPS = 60, N_HOST_PRESETS = COUNT_OF(k_quick_presets) };

static void usage(FILE *f) {
  fprintf(f,
          "usage: mdr-bench [options]        (--opt value or --opt=value)\n"
          "  --m N             max_batch_tokens (default %d; %d on the host backend)\n"
          "  --seq N           max_seq_len (default %d)\n"
          "  --block N         kv_block_size (default %d)\n"
          "  --batch N         max_batch_size (default %d)\n"
          "  --tokens a,b,..   token counts (default 1,2,4,...,4096; counts > M are dropped)\n"
          "  --presets a,b     model presets (default: all)\n"
          "  --strategies a,b  eager-memset,eager-fused,graph-memset,graph-fused,graph-fused-dev,\n"
          "                    graph-dynamic,graph-dynamic-count,graph-fused-inputs,\n"
          "                    graph-fused-dev-inputs,graph-fused-inputs-devtable (default: all,\n"
          "                    --quick too)\n"
          "  --policies a,b    seed,all (default both)\n"
          "  --reps N          timed steps per figure (default %d)\n"
          "  --cpu-reps N      timed steps per CPU figure, so that its p99 rests on enough samples\n"
          "                    (default: the larger of --reps and %d with a GPU; --reps on the host)\n"
          "  --out DIR         output folder; refused if it holds results, unless --force\n"
          "                    (default: a fresh bench-out/<UTC timestamp>/, bench-out/latest points to it)\n"
          "  --force           write into an --out folder that holds an earlier run's files\n"
          "  --pin CPU         run on that one CPU (sched_setaffinity): CPU figures of separate runs\n"
          "                    compare (unpinned, a whole run's CPU figures can move by up to 2x)\n"
          "  --quick           reps %d, tokens 1,8,64,512,4096, presets glm-5.3-flash-tp2,qwen3-next-80b\n"
          "  --full            the full sweep on the host backend too (default there: a short one,\n"
          "                    reps %d, tokens 1,8,64,256, presets glm-5.3-flash-tp2,qwen3-next-80b)\n"
          "  --backend B       auto (default: cuda when a GPU is present, else host), host, cuda\n"
          "  --graph-costs / --no-graph-costs   capture costs section (default on with a GPU)\n"
          "  --version         print the version, git revision and build type, and exit\n"
          "  --help            this text\n"
          "explicit options win over --quick, --full and the host defaults, whatever the order\n",
          DEFAULT_M_GPU, DEFAULT_M_HOST, DEFAULT_SEQ, DEFAULT_BLOCK, DEFAULT_BATCH, DEFAULT_REPS, DEFAULT_CPU_REPS,
          QUICK_REPS,
          HOST_SHORT_REPS);
}

static void print_version(void) {
  unsigned lib = mdr_version_number();
  printf("mdr-bench %d.%d.%d (built against mdr headers %d.%d.%d, libmdr %u.%u.%u at run time)\n",
         MDR_VERSION_MAJOR, MDR_VERSION_MINOR, MDR_VERSION_PATCH, MDR_VERSION_MAJOR, MDR_VERSION_MINOR,
         MDR_VERSION_PATCH, lib / 10000, lib / 100 % 100, lib % 100);
  printf("git revision %s, build type %s, results.json schema %d\n", bench_git_revision(), bench_build_type(),
         BENCH_SCHEMA_VERSION);
}

static size_t parse_size(const char *opt, const char *s) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || !end || *end || v == 0 || s[0] == '-' || s[0] == '\0')
    die("%s: expected a positive integer, got '%s'", opt, s);
  return (size_t)v;
}

/* A CPU number: 0 or a positive decimal integer. */
static long parse_cpu(const char *opt, const char *s) {
  char *end = NULL;
  errno = 0;
  const unsigned long long v = strtoull(s, &end, 10);
  if (errno || !end || *end || s[0] < '0' || s[0] > '9' || v > (1u << 20))
    die("%s: expected a CPU number (0, 1, ...), got '%s'", opt, s);
  return (long)v;
}

/* Hand each item of a comma list to fn; an empty item is refused. */
typedef struct item_call {
  void (*fn)(options *, const char *);
  options *o;
} item_call;

static void call_item(void *ctx, const char *item) {
  const item_call *ic = ctx;
  ic->fn(ic->o, item);
}

static void for_each_item(const char *opt, const char *list, void (*fn)(options *, const char *), options *o) {
  item_call ic = {fn, o};
  const size_t bad = bench_each_item(list, call_item, &ic);
  if (bad) die("%s: item %zu of '%s' is empty (write a,b,c with no empty items)", opt, bad, list);
}

/* die: "<opt>: unknown <what> '<s>'; valid: a, b, c". */
BENCH_NORETURN static void die_unknown(const char *opt, const char *what, const char *s, const char *const *names,
                                       size_t n) {
  char valid[512] = "";
  size_t used = 0;
  for (size_t i = 0; i < n && used < sizeof valid; i++)
    used += (size_t)snprintf(valid + used, sizeof valid - used, "%s%s", i ? ", " : "", names[i]);
  die("%s: unknown %s '%s'; valid: %s", opt, what, s, valid);
}

static void add_token_count(options *o, const char *s) {
  if (o->n_tokens == MAX_TOKEN_COUNTS) die("--tokens: at most %d counts", MAX_TOKEN_COUNTS);
  o->tokens[o->n_tokens++] = parse_size("--tokens", s);
}

static void add_preset(options *o, const char *s) {
  const char *names[MAX_PRESETS];
  size_t n = mdr_model_preset_count();
  for (size_t i = 0; i < n; i++) {
    names[i] = mdr_model_preset_name(i);
    if (strcmp(s, names[i]) == 0) {
      o->preset_on[i] = true;
      return;
    }
  }
  die_unknown("--presets", "preset", s, names, n);
}

static void add_strategy(options *o, const char *s) {
  for (int i = 0; i < STRAT_COUNT; i++)
    if (strcmp(s, k_strategy_names[i]) == 0) {
      o->strategy_on[i] = true;
      return;
    }
  die_unknown("--strategies", "strategy", s, k_strategy_names, STRAT_COUNT);
}

static void add_policy(options *o, const char *s) {
  for (int i = 0; i < MDR_ROWS_POLICY_COUNT; i++)
    if (strcmp(s, k_policy_names[i]) == 0) {
      o->policy_on[i] = true;
      return;
    }
  die_unknown("--policies", "policy", s, k_policy_names, MDR_ROWS_POLICY_COUNT);
}

static void set_backend(options *o, const char *s) {
  static const char *const names[] = {"auto", "host", "cuda"};
  for (size_t i = 0; i < COUNT_OF(names); i++)
    if (strcmp(s, names[i]) == 0) {
      o->backend = (backend_choice)i;
      return;
    }
  die_unknown("--backend", "backend", s, names, COUNT_OF(names));
}

typedef enum opt_id {
  OPT_M, OPT_SEQ, OPT_BLOCK, OPT_BATCH, OPT_TOKENS, OPT_PRESETS, OPT_STRATEGIES, OPT_POLICIES, OPT_REPS,
  OPT_CPU_REPS, OPT_OUT, OPT_BACKEND, OPT_PIN, /* the options above take a value */
  OPT_FORCE, OPT_QUICK, OPT_FULL, OPT_GRAPH_COSTS, OPT_NO_GRAPH_COSTS, OPT_VERSION, OPT_HELP, OPT_COUNT
} opt_id;
static const char *const k_opt_names[OPT_COUNT] = {
    "--m", "--seq", "--block", "--batch", "--tokens", "--presets", "--strategies", "--policies", "--reps",
    "--cpu-reps", "--out", "--backend", "--pin", "--force", "--quick", "--full", "--graph-costs", "--no-graph-costs", "--version",
    "--help"};
static bool takes_value(opt_id id) { return id <= OPT_PIN; }

void parse_options(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  o->seq = DEFAULT_SEQ;
  o->block = DEFAULT_BLOCK;
  o->batch = DEFAULT_BATCH;
  o->reps = DEFAULT_REPS;
  o->graph_costs = -1;
  o->pin_cpu = -1;
  o->argc = argc;
  o->argv = argv;
  if (mdr_model_preset_count() > MAX_PRESETS) die("too many presets");
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    /* "--opt=value" or "--opt value" */
    char name[32];
    const char *eq;
    const int id = bench_option_id(arg, k_opt_names, OPT_COUNT, name, sizeof name, &eq);
    if (id == OPT_COUNT) {
      usage(stderr);
      die("unknown option '%s' (see the list above)", arg);
    }
    const char *value = NULL;
    if (takes_value((opt_id)id)) {
      if (eq) value = eq + 1;
      else if (i + 1 < argc) value = argv[++i];
      else die("%s needs a value", name);
    } else if (eq) {
      die("%s takes no value (got '%s')", name, arg);
    }
    switch ((opt_id)id) {
      case OPT_M: o->m = parse_size(name, value); break;
      case OPT_SEQ: o->seq = parse_size(name, value); break;
      case OPT_BLOCK: o->block = parse_size(name, value); break;
      case OPT_BATCH: o->batch = parse_size(name, value); break;
      case OPT_REPS: o->reps = parse_size(name, value), o->set_reps = true; break;
      case OPT_CPU_REPS: o->cpu_reps = parse_size(name, value), o->set_cpu_reps = true; break;
      case OPT_OUT:
        if (!*value) die("--out: empty folder name");
        o->out_dir = value;
        break;
      case OPT_TOKENS: for_each_item(name, value, add_token_count, o), o->set_tokens = true; break;
      case OPT_PRESETS: for_each_item(name, value, add_preset, o), o->set_presets = true; break;
      case OPT_STRATEGIES: for_each_item(name, value, add_strategy, o); break;
      case OPT_POLICIES: for_each_item(name, value, add_policy, o); break;
      case OPT_BACKEND: set_backend(o, value); break;
      case OPT_PIN: o->pin_cpu = parse_cpu(name, value); break;
      case OPT_FORCE: o->force = true; break;
      case OPT_QUICK: o->quick = true; break;
      case OPT_FULL: o->full = true; break;
      case OPT_GRAPH_COSTS: o->graph_costs = 1; break;
      case OPT_NO_GRAPH_COSTS: o->graph_costs = 0; break;
      case OPT_VERSION: print_version(), exit(0);
      case OPT_HELP: usage(stdout), exit(0);
      case OPT_COUNT: break;
    }
  }
  if (o->quick && o->full) die("--quick and --full: choose one");
}

void resolve_defaults(options *o, bool gpu) {
  o->sweep = o->quick ? SWEEP_QUICK : !gpu && !o->full ? SWEEP_HOST_SHORT : SWEEP_FULL;
  const size_t *tokens = k_full_tokens;
  size_t n_tokens = COUNT_OF(k_full_tokens);
  const char *const *presets = NULL; /* NULL: all */
  size_t n_presets = 0;
  size_t reps = DEFAULT_REPS;
  if (o->sweep == SWEEP_QUICK) {
    tokens = k_quick_tokens, n_tokens = COUNT_OF(k_quick_tokens);
    presets = k_quick_presets, n_presets = COUNT_OF(k_quick_presets);
    reps = QUICK_REPS;
  } else if (o->sweep == SWEEP_HOST_SHORT) {
    tokens = k_host_tokens, n_tokens = COUNT_OF(k_host_tokens);
    presets = k_host_presets, n_presets = N_HOST_PRESETS;
    reps = HOST_SHORT_REPS;
  }
  /* Explicit options win, whatever the order. */
  if (!o->set_reps) o->reps = reps;
  /* A p99 over 200 samples is the third largest: one OS hiccup moves it.
   * With a GPU a CPU figure costs microseconds per step, so it takes more. */
  if (!o->set_cpu_reps) o->cpu_reps = gpu && o->reps < DEFAULT_CPU_REPS ? DEFAULT_CPU_REPS : o->reps;
  /* the changing-count figure is no headline figure: the host sweep spends
   * a third of the steps on it, to stay within its time */
  o->cpu_vary_reps = o->sweep == SWEEP_HOST_SHORT && o->cpu_reps >= 30 ? o->cpu_reps / 3 : o->cpu_reps;
  if (!o->set_tokens) {
    memcpy(o->tokens, tokens, n_tokens * sizeof *tokens);
    o->n_tokens = n_tokens;
  }
  if (!o->set_presets)
    for (size_t i = 0; i < n_presets; i++) add_preset(o, presets[i]);
  if (!any(o->preset_on, mdr_model_preset_count())) set_all(o->preset_on, mdr_model_preset_count());
  if (!any(o->strategy_on, STRAT_COUNT)) set_all(o->strategy_on, STRAT_COUNT);
  if (!any(o->policy_on, MDR_ROWS_POLICY_COUNT)) set_all(o->policy_on, MDR_ROWS_POLICY_COUNT);
  if (!o->m) o->m = gpu ? DEFAULT_M_GPU : DEFAULT_M_HOST;
}

void clip_token_counts(options *o) {
  size_t kept = 0;
  for (size_t i = 0; i < o->n_tokens; i++) {
    if (o->tokens[i] <= o->m) o->tokens[kept++] = o->tokens[i];
    else printf("note: %zu tokens dropped (> M = %zu)\n", o->tokens[i], o->m);
  }
  o->n_tokens = kept;
  if (kept == 0) die("no token count <= M = %zu", o->m);
}
