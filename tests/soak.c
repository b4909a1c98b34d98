/* mdr_soak — a long run of decode steps with byte-exact checks (not a
 * Criterion suite; run by scripts/soak.sh).
 *
 * One arena of a real preset (default qwen3-next-80b at M = 512) on
 * mdr_backend_create_default (the GPU when present, else the host backend),
 * one stream, and six graph caches over that arena, stepped in random order
 * with random token counts 1 .. M and random ids:
 *   exact-fused (LRU of 128 graphs: evictions and recaptures), exact-memset,
 *   ladder-fused, ladder-memset, dynamic node-update, dynamic device-count.
 * The caches share the arena, which graph.h allows because every step goes
 * to the one stream. Each cache's body writes its own mark (g bytes of
 * g|1, or M bytes of 0x77 in DYNAMIC mode) into a buffer of the caller.
 *
 * Every K-th step (--check-every, default 100) is checked: synchronize,
 * poison every buffer of the arena and the mark, run the step, synchronize,
 * read everything back. Expected: each buffer's leading bytes as the
 * arena's own mdr_arena_zero_plan gives them for the graph's token count
 * (EXACT: t; LADDER: the rung g, padded; DYNAMIC: exactly t) zero and the
 * rest still poisoned; token_ids holding the step's ids (then pad ids up to
 * g in EXACT/LADDER) and poison after; the count cell holding t; the mark as
 * the body wrote it. Every wrong byte is counted.
 *
 * Prints a progress line every 10,000 steps and last
 *   soak: N steps, M checks, W wrong bytes
 * Exit status 1 when W > 0 or any call failed.
 *
 * Usage: mdr_soak [--steps N] [--check-every K] [--preset NAME] [--m M]
 *                 [--seed S] [--rows-all]
 *   default steps: 100000 on CUDA, 2000 on the host backend. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mdr/mdr.h"
#include "rng.h"
#include "clock.h"

#define CACHES 6
#define MARK_POISON 0x3C
#define READ_CHUNK ((size_t)16 << 20)

typedef struct soak_config {
  const char *name;
  mdr_graph_mode mode;
  mdr_zero_strategy zero;
  mdr_graph_dynamic_impl impl;
  size_t max_graphs;
} soak_config;

static const soak_config k_configs[CACHES] = {
    {"exact-fused-lru128", MDR_GRAPH_EXACT, MDR_ZERO_FUSED, MDR_DYNAMIC_NODE_UPDATE, 128},
    {"exact-memset", MDR_GRAPH_EXACT, MDR_ZERO_MEMSET, MDR_DYNAMIC_NODE_UPDATE, 0},
    {"ladder-fused", MDR_GRAPH_LADDER, MDR_ZERO_FUSED, MDR_DYNAMIC_NODE_UPDATE, 0},
    {"ladder-memset", MDR_GRAPH_LADDER, MDR_ZERO_MEMSET, MDR_DYNAMIC_NODE_UPDATE, 0},
    {"dynamic-node-update", MDR_GRAPH_DYNAMIC, MDR_ZERO_FUSED, MDR_DYNAMIC_NODE_UPDATE, 0},
    {"dynamic-device-count", MDR_GRAPH_DYNAMIC, MDR_ZERO_FUSED, MDR_DYNAMIC_DEVICE_COUNT, 0},
};

typedef struct soak {
  mdr_backend *b;
  mdr_stream s;
  mdr_arena *a;
  mdr_graph_cache *c[CACHES];
  mdr_dptr mark;
  size_t m;
  unsigned char *host; /* READ_CHUNK bytes of read-back */
  uint64_t wrong, checks, steps;
} soak;

typedef struct body_ctx {
  soak *k;
} body_ctx;

static mdr_status body(void *user, mdr_stream s, size_t tokens) {
  soak *k = ((body_ctx *)user)->k;
  return mdr_backend_memset_async(k->b, k->mark, (unsigned char)(tokens | 1), tokens, s);
}

static mdr_status body_dynamic(void *user, mdr_stream s, mdr_dptr count_ptr, size_t max_tokens) {
  soak *k = ((body_ctx *)user)->k;
  (void)count_ptr;
  return mdr_backend_memset_async(k->b, k->mark, 0x77, max_tokens, s);
}

static unsigned char poison_of(int buf) { return (unsigned char)(0x80 + (unsigned)buf * 3); }


#define TRY(what, call)                                                                     \
  do {                                                                                      \
    mdr_status st_ = (call);                                                                \
    if (st_ != MDR_OK) {                                                                    \
      fprintf(stderr, "soak: %s: %s (%s)\n", what, mdr_status_string(st_),                  \
              mdr_backend_last_error(k->b));                                                \
      return -1;                                                                            \
    }                                                                                       \
  } while (0)

/* Compare n bytes read back at offset `off` of a buffer with "zero below
 * `zero`, `rest` above"; count the wrong ones, report the first per buffer. */
static uint64_t count_wrong(const unsigned char *got, size_t n, size_t off, size_t zero,
                            unsigned char rest, long *first) {
  uint64_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char want = off + i < zero ? 0 : rest;
    if (got[i] != want) {
      if (*first < 0) *first = (long)(off + i);
      bad++;
    }
  }
  return bad;
}

static int poison_all(soak *k) {
  for (int i = 0; i < MDR_BUF_COUNT; i++) {
    mdr_dptr p = mdr_arena_ptr(k->a, (mdr_buffer)i);
    if (p) TRY("poison", mdr_backend_fill(k->b, p, poison_of(i), mdr_arena_bytes(k->a, (mdr_buffer)i)));
  }
  TRY("poison mark", mdr_backend_fill(k->b, k->mark, MARK_POISON, k->m));
  return 0;
}

/* One checked step: poison, step, read back everything. */
static int checked_step(soak *k, int ci, const uint32_t *ids, size_t t, uint32_t pad) {
  const soak_config *cfg = &k_configs[ci];
  size_t g = 0;
  TRY("graph_tokens", mdr_graph_cache_graph_tokens(k->c[ci], t, &g));
  size_t zero_tokens = cfg->mode == MDR_GRAPH_DYNAMIC ? t : g;
  size_t copied = cfg->mode == MDR_GRAPH_DYNAMIC ? t : g;
  /* expected zero bytes per buffer, from the arena's own plan */
  size_t expect[MDR_BUF_COUNT] = {0};
  mdr_segment plan[MDR_ZERO_PLAN_MAX];
  size_t n = 0;
  TRY("zero_plan", mdr_arena_zero_plan(k->a, zero_tokens, plan, MDR_ZERO_PLAN_MAX, &n));
  for (size_t i = 0; i < n; i++) {
    int found = 0;
    for (int buf = 0; buf < MDR_BUF_COUNT && !found; buf++)
      if (mdr_arena_ptr(k->a, (mdr_buffer)buf) == plan[i].ptr) {
        expect[buf] = plan[i].bytes;
        found = 1;
      }
    if (!found) {
      fprintf(stderr, "soak: plan segment %zu is no buffer's start\n", i);
      return -1;
    }
  }
  TRY("synchronize", mdr_backend_synchronize(k->b, k->s));
  if (poison_all(k)) return -1;
  TRY("step", mdr_graph_cache_step(k->c[ci], ids, t));
  TRY("synchronize", mdr_backend_synchronize(k->b, k->s));
  uint64_t wrong = 0;
  for (int buf = 0; buf < MDR_BUF_COUNT; buf++) {
    mdr_dptr p = mdr_arena_ptr(k->a, (mdr_buffer)buf);
    size_t bytes = mdr_arena_bytes(k->a, (mdr_buffer)buf);
    if (!p) continue;
    long first = -1;
    uint64_t bad = 0;
    for (size_t off = 0; off < bytes; off += READ_CHUNK) {
      size_t len = bytes - off < READ_CHUNK ? bytes - off : READ_CHUNK;
      TRY("read back", mdr_backend_copy_d2h(k->b, k->host, p + off, len));
      if (buf == MDR_BUF_TOKEN_IDS) { /* ids, pads, then poison */
        for (size_t i = 0; i < len; i++) {
          size_t at = off + i;
          unsigned char want = poison_of(buf);
          if (at < copied * 4) {
            uint32_t id = at / 4 < t ? ids[at / 4] : pad;
            want = (unsigned char)(id >> (8 * (at % 4)));
          }
          if (k->host[i] != want) {
            if (first < 0) first = (long)at;
            bad++;
          }
        }
      } else {
        bad += count_wrong(k->host, len, off, expect[buf], poison_of(buf), &first);
      }
    }
    if (bad) {
      fprintf(stderr,
              "soak: step %" PRIu64 " %s t=%zu g=%zu: %s has %" PRIu64
              " wrong bytes, first at %ld (%zu of %zu expected zero)\n",
              k->steps, cfg->name, t, g, mdr_buffer_name((mdr_buffer)buf), bad, first,
              buf == MDR_BUF_TOKEN_IDS ? 0 : expect[buf], bytes);
      wrong += bad;
    }
  }
  uint32_t count = 0;
  TRY("count cell", mdr_backend_copy_d2h(k->b, &count, mdr_graph_cache_count_ptr(k->c[ci]), 4));
  if (count != t) {
    fprintf(stderr, "soak: step %" PRIu64 " %s: count cell %u, want %zu\n", k->steps, cfg->name,
            count, t);
    wrong += 4;
  }
  size_t mark_len = cfg->mode == MDR_GRAPH_DYNAMIC ? k->m : g;
  unsigned char mark_byte = cfg->mode == MDR_GRAPH_DYNAMIC ? 0x77 : (unsigned char)(g | 1);
  TRY("read mark", mdr_backend_copy_d2h(k->b, k->host, k->mark, k->m));
  for (size_t i = 0; i < k->m; i++)
    if (k->host[i] != (i < mark_len ? mark_byte : MARK_POISON)) {
      fprintf(stderr, "soak: step %" PRIu64 " %s: body buffer byte %zu wrong (g=%zu)\n", k->steps,
              cfg->name, i, g);
      wrong++;
    }
  k->wrong += wrong;
  k->checks++;
  return 0;
}

static int parse_size(const char *s, size_t *out) {
  char *end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (!s[0] || *end) return -1;
  *out = (size_t)v;
  return 0;
}

int main(int argc, char **argv) {
  size_t steps = 0, check_every = 100, m = 512, seed = 20240601;
  const char *preset = "qwen3-next-80b";
  int rows_all = 0;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    int bad = 0;
    if (!strcmp(arg, "--steps") && val) bad = parse_size(val, &steps), i++;
    else if (!strcmp(arg, "--check-every") && val) bad = parse_size(val, &check_every), i++;
    else if (!strcmp(arg, "--m") && val) bad = parse_size(val, &m), i++;
    else if (!strcmp(arg, "--seed") && val) bad = parse_size(val, &seed), i++;
    else if (!strcmp(arg, "--preset") && val) preset = val, i++;
    else if (!strcmp(arg, "--rows-all")) rows_all = 1;
    else bad = 1;
    if (bad || check_every == 0 || m == 0) {
      fprintf(stderr,
              "usage: %s [--steps N] [--check-every K] [--preset NAME] [--m M] [--seed S] "
              "[--rows-all]\n",
              argv[0]);
      return 2;
    }
  }

  soak sk = {0}, *k = &sk;
  int rc = 1;
  body_ctx user = {k};
  k->m = m;
  k->host = malloc(READ_CHUNK);
  if (!k->host) return 1;
  mdr_status st = mdr_backend_create_default(&k->b);
  if (st != MDR_OK) {
    fprintf(stderr, "soak: no backend: %s\n", mdr_status_string(st));
    return 1;
  }
  const int on_gpu = strcmp(mdr_backend_name(k->b), "cuda") == 0;
  if (steps == 0) steps = on_gpu ? 100000 : 2000;
  mdr_model_config cfg;
  mdr_limits lim = {.max_batch_tokens = m, .max_seq_len = 4096, .kv_block_size = 16, .max_batch_size = 4};
  mdr_sizes sizes;
  if (mdr_model_preset(preset, &cfg) != MDR_OK) {
    fprintf(stderr, "soak: unknown preset %s\n", preset);
    goto out;
  }
  if ((st = mdr_sizes_from_config(&cfg, &lim, &sizes)) || (st = mdr_backend_stream_create(k->b, &k->s)) ||
      (st = mdr_arena_create(k->b, &sizes, &k->a)) || (st = mdr_backend_alloc(k->b, m, &k->mark)) ||
      (st = mdr_arena_set_rows_policy(k->a, rows_all ? MDR_ROWS_ALL : MDR_ROWS_SEED))) {
    fprintf(stderr, "soak: setup: %s (%s)\n", mdr_status_string(st), mdr_backend_last_error(k->b));
    goto out;
  }
  for (int i = 0; i < CACHES; i++) {
    mdr_graph_cache_options o;
    mdr_graph_cache_options_default(&o);
    o.mode = k_configs[i].mode;
    o.zero = k_configs[i].zero;
    o.dynamic_impl = k_configs[i].impl;
    o.max_graphs = k_configs[i].max_graphs;
    o.pad_token_id = 0xFFFF0000u + (uint32_t)i;
    o.user = &user;
    if (o.mode == MDR_GRAPH_DYNAMIC) o.body_dynamic = body_dynamic; else o.body = body;
    if ((st = mdr_graph_cache_create(k->a, k->s, &o, &k->c[i]))) {
      fprintf(stderr, "soak: cache %s: %s (%s)\n", k_configs[i].name, mdr_status_string(st),
              mdr_backend_last_error(k->b));
      goto out;
    }
  }
  printf("soak: %s backend, %s at M=%zu (%.1f MB arena, %s rows), %zu steps over %d caches, "
         "checking every %zu\n",
         mdr_backend_name(k->b), preset, m, mdr_arena_slab_bytes(k->a) / 1e6,
         rows_all ? "all" : "seed", steps, CACHES, check_every);
  fflush(stdout);

  uint64_t rng = seed ? seed : 1;
  uint32_t *ids = malloc(m * sizeof *ids);
  if (!ids) goto out;
  double t0 = tb_now_s();
  for (k->steps = 0; k->steps < steps; k->steps++) {
    int ci = (int)(tb_rng_next(&rng) % CACHES);
    size_t t = 1 + tb_rng_next(&rng) % m;
    for (size_t i = 0; i < t; i++) ids[i] = (uint32_t)(tb_rng_next(&rng) % 200000);
    if ((k->steps + 1) % check_every == 0) {
      if (checked_step(k, ci, ids, t, 0xFFFF0000u + (uint32_t)ci)) goto out_ids;
    } else {
      st = mdr_graph_cache_step(k->c[ci], ids, t);
      if (st != MDR_OK) {
        fprintf(stderr, "soak: step %" PRIu64 " (%s, t=%zu): %s (%s)\n", k->steps, k_configs[ci].name,
                t, mdr_status_string(st), mdr_backend_last_error(k->b));
        goto out_ids;
      }
    }
    if ((k->steps + 1) % 10000 == 0) {
      printf("soak: %" PRIu64 "/%zu steps, %" PRIu64 " checks, %" PRIu64 " wrong bytes, %.0f steps/s\n",
             k->steps + 1, steps, k->checks, k->wrong, (k->steps + 1) / (tb_now_s() - t0));
      fflush(stdout);
    }
  }
  if (mdr_backend_synchronize(k->b, k->s) != MDR_OK) {
    fprintf(stderr, "soak: final synchronize: %s\n", mdr_backend_last_error(k->b));
    goto out_ids;
  }
  for (int i = 0; i < CACHES; i++) {
    mdr_graph_stats gs;
    mdr_graph_cache_stats(k->c[i], &gs);
    printf("soak: %-21s %7" PRIu64 " steps, %7" PRIu64 " hits, %6" PRIu64 " captures, %6" PRIu64
           " evictions, %zu graphs, %" PRIu64 " eager, %.1f ms capturing\n",
           k_configs[i].name, gs.steps, gs.hits, gs.captures, gs.evictions, gs.graphs, gs.eager_steps,
           gs.capture_us / 1e3);
  }
  rc = k->wrong ? 1 : 0;
out_ids:
  free(ids);
out:
  printf("soak: %" PRIu64 " steps, %" PRIu64 " checks, %" PRIu64 " wrong bytes\n", k->steps, k->checks,
         k->wrong);
  for (int i = 0; i < CACHES; i++) mdr_graph_cache_destroy(k->c[i]);
  mdr_backend_free(k->b, k->mark);
  mdr_arena_destroy(k->a);
  mdr_backend_stream_destroy(k->b, k->s);
  mdr_backend_destroy(k->b);
  free(k->host);
  return rc;
}
