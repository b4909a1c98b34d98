/* bench_options.c — mdr-bench's command line: parsing, usage, the defaults
 * that --quick fills in (bench/README.md lists every option). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static const size_t k_default_tokens[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
static const size_t k_quick_tokens[] = {1, 8, 64, 512, 4096};
static const char *const k_quick_presets[] = {"glm-5.3-flash-tp2", "qwen3-next-80b"};

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

void parse_options(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  o->seq = DEFAULT_SEQ;
  o->block = DEFAULT_BLOCK;
  o->batch = DEFAULT_BATCH;
  o->reps = DEFAULT_REPS;
  o->out_dir = "bench-out";
  o->graph_costs = -1;
  o->argc = argc;
  o->argv = argv;
  if (mdr_model_preset_count() > MAX_PRESETS) die("too many presets");
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

void clip_token_counts(options *o) {
  size_t kept = 0;
  for (size_t i = 0; i < o->n_tokens; i++) {
    if (o->tokens[i] <= o->m) o->tokens[kept++] = o->tokens[i];
    else printf("note: %zu tokens dropped (> M = %zu)\n", o->tokens[i], o->m);
  }
  o->n_tokens = kept;
  if (kept == 0) die("no token count <= M = %zu", o->m);
}
