/* graph_cache.c — capture one decode step (zeroing + token-id upload + the
 * caller's body) into a graph per token count, cache it, replay it per step.
 *
 * Staging. The ids of step N go to slot N % SLOTS of a ring in mapped pinned
 * memory. A graph cannot name "the slot of this step" (its addresses are
 * fixed at capture), so the step's launch finds its slot on the device: a
 * device counter holds the number of staged launches served so far; the
 * first kernel of the step (the fused zero kernel, or a stage-only launch of
 * it under MDR_ZERO_MEMSET) reads the slot counter % SLOTS, copies its ids
 * into token_ids and its count to the count cell (one dedicated block does
 * this while the others zero), then advances the counter and writes it to an
 * ack word in pinned memory. The
 * host keeps its own count of staged launches (host_step) in lockstep and
 * writes slot host_step % SLOTS only once ack shows that the launch that
 * read it last, host_step - SLOTS, has finished. Every step, eager or
 * replayed, goes through the same staged launch, so the two counts never
 * diverge: host_step advances exactly when that launch was enqueued.
 *
 * Why not a captured copy node: its source address is fixed, so a second
 * step submitted before the first ran would overwrite ids not yet read (or
 * the host would have to wait for every step); one kernel node also costs
 * less per replay than a copy node plus a kernel (issue #7's probe).
 *
 * DYNAMIC. One graph serves every count. By default (NODE_UPDATE) the fused
 * node is re-targeted to the step's count when it changes, so the kernel
 * gets the count as a parameter. Its plan for every count 1..M is resolved
 * once, at create, into a plan table in device memory (kernels/zero_map.h
 * section 4), so the node's parameters are only t and the stage (a small
 * block: the update costs about a quarter of a whole plan's). DEVICE_COUNT
 * leaves the graph untouched and has the kernel read the count from the
 * slot (slower on the GPU, see include/mdr/graph.h and bench/results/). */
#define _POSIX_C_SOURCE 200809L
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "arena_impl.h"
#include "mdr/graph.h"

typedef struct graph_entry {
  void *exec;         /* NULL: not cached */
  uint64_t last_used; /* LRU tick */
} graph_entry;

/* Layout of the cache's small device block. */
enum { DEV_COUNTER = 0, DEV_SYNC = 8 /* mdr_stage_sync, 16 bytes */, DEV_COUNT = 32, DEV_BLOCK_BYTES = 256 };

struct mdr_graph_cache {
  mdr_arena *arena;
  mdr_backend *b;
  mdr_stream stream;
  mdr_graph_cache_options o;
  size_t max_tokens;
  mdr_rows_policy rows; /* the arena's row policy when the cache was made */
  size_t *ladder;
  size_t ladder_len;
  int graphs_disabled;

  /* staging ring (pinned, mapped): SLOTS slots then the ack word */
  unsigned char *ring_host;
  mdr_dptr ring_dev;
  size_t slot_bytes;
  volatile uint64_t *ack_host;
  mdr_dptr dev_block;
  uint64_t host_step; /* staged launches enqueued */

  graph_entry *entries; /* indexed by graph token count, 0 .. max_tokens */
  /* DYNAMIC with NODE_UPDATE: the captured graph (its node handles name the
   * fused node in the exec) and that node; the plan as rules (resolved at
   * create, with the row policy of create). */
  void *dyn_graph;
  void *dyn_node;
  size_t dyn_tokens; /* the count the exec's fused node holds now (0: as captured) */
  mdr_zero_seg rules[MDR_ZERO_PLAN_MAX];
  size_t n_rules;
  mdr_dptr table; /* NODE_UPDATE: the plan table of rules at counts 1..max_tokens (0: none) */
  uint64_t tick;
  mdr_graph_stats stats;
};

static const size_t k_default_ladder[] = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256};

void mdr_graph_cache_options_default(mdr_graph_cache_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->mode = MDR_GRAPH_EXACT;
  o->zero = MDR_ZERO_MEMSET;
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* The rungs: the caller's (or the default, then powers of two), those above
 * M dropped, M always last. */
static mdr_status build_ladder(mdr_graph_cache *c, const mdr_graph_cache_options *o) {
  const size_t *src = o->ladder ? o->ladder : k_default_ladder;
  size_t n = o->ladder ? o->ladder_len : sizeof k_default_ladder / sizeof k_default_ladder[0];
  /* room for: the given rungs, powers of two 512 .. 2^63 (55), and M */
  size_t cap = n + 56;
  c->ladder = malloc(cap * sizeof *c->ladder);
  if (!c->ladder) return MDR_ERR_OUT_OF_MEMORY;
  size_t len = 0;
  for (size_t i = 0; i < n && src[i] < c->max_tokens; i++) c->ladder[len++] = src[i];
  if (!o->ladder)
    for (size_t p = 512; p < c->max_tokens && p != 0; p *= 2) c->ladder[len++] = p;
  c->ladder[len++] = c->max_tokens;
  c->ladder_len = len;
  return MDR_OK;
}

static int node_update_of(const mdr_graph_cache_options *o) {
  return o->mode == MDR_GRAPH_DYNAMIC && o->dynamic_impl == MDR_DYNAMIC_NODE_UPDATE;
}

static mdr_status check_options(const mdr_graph_cache_options *o) {
  if ((int)o->mode < 0 || o->mode >= MDR_GRAPH_MODE_COUNT) return MDR_ERR_INVALID_ARGUMENT;
  if ((int)o->zero < 0 || o->zero >= MDR_ZERO_STRATEGY_COUNT) return MDR_ERR_INVALID_ARGUMENT;
  if (o->mode == MDR_GRAPH_DYNAMIC && (o->zero != MDR_ZERO_FUSED || o->body)) return MDR_ERR_INVALID_ARGUMENT;
  if (o->mode != MDR_GRAPH_DYNAMIC && o->body_dynamic) return MDR_ERR_INVALID_ARGUMENT;
  if ((int)o->dynamic_impl < 0 || o->dynamic_impl >= MDR_DYNAMIC_IMPL_COUNT) return MDR_ERR_INVALID_ARGUMENT;
  if (o->mode == MDR_GRAPH_LADDER && o->ladder) {
    if (o->ladder_len == 0 || o->ladder[0] == 0) return MDR_ERR_INVALID_ARGUMENT;
    for (size_t i = 1; i < o->ladder_len; i++)
      if (o->ladder[i] <= o->ladder[i - 1]) return MDR_ERR_INVALID_ARGUMENT;
  }
  return MDR_OK;
}

/* NODE_UPDATE: resolve c->rules at every count 1..max_tokens into the plan
 * table, uploaded once. Plans of more rules
 * than one launch carries keep the parameter-borne plan (no table). */
static mdr_status build_table(mdr_graph_cache *c) {
  const size_t n = c->n_rules;
  if (n > MDR_ZERO_MAX_SEGS) return MDR_OK;
  size_t words = (size_t)mdr_plan_table_words(n, c->max_tokens);
  uint64_t *w = malloc(words * sizeof *w);
  if (!w) return mdr_backend_fail(c->b, MDR_ERR_OUT_OF_MEMORY, "graph cache: plan table (%zu bytes)", words * 8);
  mdr_plan_table_fill(c->rules, n, c->max_tokens, w);
  mdr_status st = mdr_be_alloc_device(c->b, words * sizeof *w, &c->table);
  if (st == MDR_OK) st = mdr_backend_copy_h2d(c->b, c->table, w, words * sizeof *w);
  free(w);
  return st;
}

mdr_status mdr_graph_cache_create(mdr_arena *a, mdr_stream stream, const mdr_graph_cache_options *o,
                                  mdr_graph_cache **out) {
  if (!a || !stream || !o || !out) return MDR_ERR_INVALID_ARGUMENT;
  mdr_backend *b = mdr_arena_backend(a);
  mdr_status st = check_options(o);
  if (st != MDR_OK) return mdr_backend_fail(b, st, "graph cache: invalid options");
  if (!b->ops->zero_fused ||
      (node_update_of(o) && (!b->ops->fused_node_find || !b->ops->fused_node_update)))
    return mdr_backend_fail(b, MDR_ERR_UNSUPPORTED, "graph cache: backend %s lacks the fused launch",
                            b->ops->name);
  size_t m = mdr_arena_max_batch_tokens(a);
  if (!mdr_arena_token_ids(a) || mdr_arena_token_ids_bytes(a) / sizeof(uint32_t) < m)
    return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT,
                            "graph cache: token_ids holds %zu bytes, fewer than max_batch_tokens (%zu) ids",
                            mdr_arena_token_ids_bytes(a), m);
  mdr_graph_cache *c = calloc(1, sizeof *c);
  if (!c) return mdr_backend_fail(b, MDR_ERR_OUT_OF_MEMORY, "graph cache: handle");
  c->arena = a;
  c->b = b;
  c->stream = stream;
  c->o = *o;
  c->o.ladder = NULL;
  c->max_tokens = mdr_arena_max_batch_tokens(a);
  c->rows = mdr_arena_rows_policy(a);
  const char *env = getenv("MDR_DISABLE_GRAPHS");
  c->graphs_disabled = env && strcmp(env, "1") == 0;
  st = build_ladder(c, o);
  if (st != MDR_OK) goto fail;
  c->entries = calloc(c->max_tokens + 1, sizeof *c->entries);
  if (!c->entries) {
    st = MDR_ERR_OUT_OF_MEMORY;
    goto fail;
  }
  c->slot_bytes = (size_t)mdr_stage_slot_bytes(c->max_tokens);
  size_t ring_bytes = c->slot_bytes * MDR_GRAPH_STAGING_SLOTS;
  void *ring_host = NULL;
  st = mdr_be_alloc_pinned(b, ring_bytes + 256, &ring_host, &c->ring_dev);
  if (st != MDR_OK) goto fail;
  c->ring_host = ring_host;
  memset(c->ring_host, 0, ring_bytes + 256);
  c->ack_host = (volatile uint64_t *)(c->ring_host + ring_bytes);
  st = mdr_be_alloc_device(b, DEV_BLOCK_BYTES, &c->dev_block);
  if (st != MDR_OK) goto fail;
  st = mdr_backend_fill(b, c->dev_block, 0, DEV_BLOCK_BYTES);
  if (st != MDR_OK) goto fail;
  if (node_update_of(o)) {
    c->n_rules = mdr_arena_rules(a, MDR_COVER_ROWS, c->rows, c->rules);
    st = build_table(c);
    if (st != MDR_OK) goto fail;
  }
  *out = c;
  return MDR_OK;
fail:
  mdr_be_free_device(b, c->table);
  mdr_be_free_device(b, c->dev_block);
  mdr_be_free_pinned(b, c->ring_host);
  free(c->entries);
  free(c->ladder);
  free(c);
  return st;
}

void mdr_graph_cache_destroy(mdr_graph_cache *c) {
  if (!c) return;
  (void)c->b->ops->synchronize(c->b, c->stream);
  for (size_t t = 0; t <= c->max_tokens; t++) mdr_be_exec_destroy(c->b, c->entries[t].exec);
  mdr_be_graph_destroy(c->b, c->dyn_graph);
  mdr_be_free_device(c->b, c->table);
  mdr_be_free_device(c->b, c->dev_block);
  mdr_be_free_pinned(c->b, c->ring_host);
  free(c->entries);
  free(c->ladder);
  free(c);
}

mdr_dptr mdr_graph_cache_count_ptr(const mdr_graph_cache *c) {
  return c ? c->dev_block + DEV_COUNT : 0;
}

static size_t graph_tokens_of(const mdr_graph_cache *c, size_t t) {
  if (c->o.mode == MDR_GRAPH_DYNAMIC) return c->max_tokens;
  if (c->o.mode == MDR_GRAPH_EXACT) return t;
  size_t lo = 0, hi = c->ladder_len - 1; /* first rung >= t; the last rung is M >= t */
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (c->ladder[mid] >= t) hi = mid; else lo = mid + 1;
  }
  return c->ladder[lo];
}

static mdr_status check_tokens(const mdr_graph_cache *c, size_t t) {
  if (t == 0 || t > c->max_tokens)
    return mdr_backend_fail(c->b, MDR_ERR_OUT_OF_RANGE, "graph cache: %zu tokens (1 .. %zu)", t,
                            c->max_tokens);
  return MDR_OK;
}

mdr_status mdr_graph_cache_graph_tokens(const mdr_graph_cache *c, size_t tokens, size_t *out) {
  if (!c || !out) return MDR_ERR_INVALID_ARGUMENT;
  mdr_status st = check_tokens(c, tokens);
  if (st == MDR_OK) *out = graph_tokens_of(c, tokens);
  return st;
}

static mdr_stage_desc stage_desc(const mdr_graph_cache *c) {
  mdr_stage_desc d = {
      .ring = c->ring_dev,
      .slot_bytes = c->slot_bytes,
      .counter = c->dev_block + DEV_COUNTER,
      .done = c->dev_block + DEV_SYNC,
      .ack = c->ring_dev + c->slot_bytes * MDR_GRAPH_STAGING_SLOTS,
      .token_ids = mdr_arena_token_ids(c->arena),
      .count_out = c->dev_block + DEV_COUNT,
      .slots = MDR_GRAPH_STAGING_SLOTS,
      .flags = MDR_STAGE_FETCH | MDR_STAGE_ADVANCE,
  };
  if (c->o.mode == MDR_GRAPH_DYNAMIC && !node_update_of(&c->o)) d.flags |= MDR_STAGE_DYNAMIC;
  if (c->table) {
    d.flags |= MDR_STAGE_TABLE;
    d.table = c->table;
    d.table_max = c->max_tokens;
  }
  return d;
}

/* Enqueue one step's work on the stream for graph token count g: the zero
 * plan, the staged launch, the body. Used both eagerly and under capture.
 * *staged is set once the staged launch is enqueued. In DYNAMIC mode g is
 * the step's real count (NODE_UPDATE: the launch as the update would make
 * it; captured once at max_batch_tokens) or ignored (DEVICE_COUNT). */
static mdr_status enqueue_step(mdr_graph_cache *c, size_t g, int *staged) {
  mdr_zero_seg plan[MDR_ZERO_PLAN_MAX];
  size_t n;
  mdr_stage_desc stage = stage_desc(c);
  mdr_status st;
  if (c->o.mode == MDR_GRAPH_DYNAMIC) {
    n = mdr_arena_rules(c->arena, MDR_COVER_ROWS, c->rows, plan);
    st = mdr_be_zero_fused(c->b, plan, n, g, &stage, c->stream);
  } else {
    n = mdr_arena_static_plan(c->arena, MDR_COVER_ROWS, c->rows, g, plan);
    if (c->o.zero == MDR_ZERO_FUSED) {
      st = mdr_be_zero_fused(c->b, plan, n, g, &stage, c->stream);
    } else {
      st = mdr_arena_run_plan(c->arena, c->stream, plan, n, MDR_ZERO_MEMSET);
      if (st == MDR_OK) st = mdr_be_zero_fused(c->b, NULL, 0, g, &stage, c->stream);
    }
  }
  if (st != MDR_OK) return st;
  *staged = 1;
  if (c->o.body) return c->o.body(c->o.user, c->stream, g);
  if (c->o.body_dynamic)
    return c->o.body_dynamic(c->o.user, c->stream, mdr_graph_cache_count_ptr(c), c->max_tokens);
  return MDR_OK;
}

static void evict_lru(mdr_graph_cache *c) {
  size_t victim = 0;
  uint64_t oldest = UINT64_MAX;
  for (size_t t = 1; t <= c->max_tokens; t++)
    if (c->entries[t].exec && c->entries[t].last_used < oldest) {
      oldest = c->entries[t].last_used;
      victim = t;
    }
  if (!victim) return;
  mdr_be_exec_destroy(c->b, c->entries[victim].exec);
  c->entries[victim].exec = NULL;
  c->stats.graphs--;
  c->stats.evictions++;
}

/* Capture and instantiate the graph for g. On failure the capture is ended,
 * nothing is cached, and the status says why (the body's own, or
 * MDR_ERR_CAPTURE). */
static mdr_status capture(mdr_graph_cache *c, size_t g) {
  double t0 = now_us();
  void *graph = NULL, *exec = NULL;
  int staged = 0;
  mdr_status st = mdr_be_capture_begin(c->b, c->stream);
  if (st != MDR_OK) return MDR_ERR_CAPTURE;
  mdr_status body = enqueue_step(c, g, &staged);
  st = mdr_be_capture_end(c->b, c->stream, &graph);
  if (body != MDR_OK) {
    mdr_be_graph_destroy(c->b, st == MDR_OK ? graph : NULL);
    c->stats.capture_us += now_us() - t0;
    /* the body's own status; a failure before it (zeroing, staging) is the capture's */
    return staged ? body : MDR_ERR_CAPTURE;
  }
  if (st == MDR_OK) st = mdr_be_graph_instantiate(c->b, graph, &exec);
  if (st == MDR_OK && node_update_of(&c->o)) {
    /* keep the graph: its node handle names the fused node in the exec */
    st = mdr_be_fused_node_find(c->b, graph, &c->dyn_node);
    if (st == MDR_OK) {
      mdr_be_graph_destroy(c->b, c->dyn_graph); /* a graph evicted and captured again */
      c->dyn_graph = graph;
      c->dyn_tokens = g; /* captured at max_batch_tokens */
      graph = NULL;
    } else {
      mdr_be_exec_destroy(c->b, exec);
    }
  }
  mdr_be_graph_destroy(c->b, graph);
  if (st == MDR_OK) {
    st = mdr_be_graph_upload(c->b, exec, c->stream);
    if (st != MDR_OK) mdr_be_exec_destroy(c->b, exec);
  }
  c->stats.capture_us += now_us() - t0;
  if (st != MDR_OK) return MDR_ERR_CAPTURE;
  if (c->o.max_graphs && c->stats.graphs >= c->o.max_graphs) evict_lru(c);
  c->entries[g].exec = exec;
  c->entries[g].last_used = ++c->tick;
  c->stats.graphs++;
  c->stats.captures++;
  return MDR_OK;
}

mdr_status mdr_graph_cache_prepare(mdr_graph_cache *c, const size_t *tokens, size_t n) {
  if (!c || (n && !tokens)) return MDR_ERR_INVALID_ARGUMENT;
  for (size_t i = 0; i < n; i++) {
    mdr_status st = check_tokens(c, tokens[i]);
    if (st != MDR_OK) return st;
  }
  if (c->graphs_disabled) return MDR_OK;
  for (size_t i = 0; i < n; i++) {
    size_t g = graph_tokens_of(c, tokens[i]);
    if (c->entries[g].exec) continue;
    mdr_status st = capture(c, g);
    if (st != MDR_OK) return st;
  }
  return MDR_OK;
}

/* Wait until slot host_step % SLOTS is free: the launch that read it last
 * (host_step - SLOTS) has finished. */
static mdr_status wait_for_slot(mdr_graph_cache *c) {
  for (unsigned spins = 0; c->host_step - *c->ack_host >= MDR_GRAPH_STAGING_SLOTS; spins++) {
    if (spins % 64 == 63) {
      int idle = 0;
      mdr_status st = mdr_be_stream_query(c->b, c->stream, &idle);
      if (st != MDR_OK) return st;
      if (idle && c->host_step - *c->ack_host >= MDR_GRAPH_STAGING_SLOTS)
        return mdr_backend_fail(c->b, MDR_ERR_STATE,
                                "graph cache: stream idle but staged launch %llu never finished",
                                (unsigned long long)(c->host_step - MDR_GRAPH_STAGING_SLOTS));
    }
    sched_yield();
  }
  return MDR_OK;
}

static void write_slot(mdr_graph_cache *c, const uint32_t *ids, size_t t, size_t g) {
  unsigned char *slot = c->ring_host + (c->host_step % MDR_GRAPH_STAGING_SLOTS) * c->slot_bytes;
  size_t copy = c->o.mode == MDR_GRAPH_DYNAMIC ? t : g; /* NODE_UPDATE copies t too */
  mdr_stage_header h = {.tokens = (uint32_t)t, .copy_tokens = (uint32_t)copy};
  uint32_t *dst = (uint32_t *)(slot + MDR_STAGE_HEADER_BYTES);
  memcpy(dst, ids, t * sizeof *ids);
  for (size_t i = t; i < copy; i++) dst[i] = c->o.pad_token_id;
  memcpy(slot, &h, sizeof h);
}

mdr_status mdr_graph_cache_step(mdr_graph_cache *c, const uint32_t *token_ids, size_t tokens) {
  if (!c || !token_ids) return MDR_ERR_INVALID_ARGUMENT;
  mdr_status st = check_tokens(c, tokens);
  if (st != MDR_OK) return st;
  size_t g = graph_tokens_of(c, tokens);
  st = wait_for_slot(c);
  if (st != MDR_OK) return st;
  write_slot(c, token_ids, tokens, g);

  mdr_status outcome = MDR_OK;
  graph_entry *e = &c->entries[g];
  const int hit = e->exec != NULL;
  if (!c->graphs_disabled && !hit) {
    c->stats.misses++;
    st = capture(c, g);
    if (st != MDR_OK) {
      c->stats.eager_fallbacks++;
      outcome = MDR_ERR_CAPTURE;
    }
  }
  if (!c->graphs_disabled && e->exec) {
    if (node_update_of(&c->o) && c->dyn_tokens != tokens) {
      /* decode batches keep their size for many steps: update only on change */
      mdr_stage_desc stage = stage_desc(c);
      st = mdr_be_fused_node_update(c->b, e->exec, c->dyn_node, c->rules, c->n_rules, tokens, &stage);
      if (st != MDR_OK) return st;
      c->dyn_tokens = tokens;
    }
    st = mdr_be_graph_launch(c->b, e->exec, c->stream);
    if (st != MDR_OK) return st;
    e->last_used = ++c->tick;
    c->host_step++;
    c->stats.hits += hit;
  } else {
    int staged = 0;
    st = enqueue_step(c, c->o.mode == MDR_GRAPH_DYNAMIC ? tokens : g, &staged);
    if (staged) c->host_step++;
    if (st != MDR_OK) return st;
    c->stats.eager_steps++;
  }
  c->stats.steps++;
  c->stats.padded_tokens += c->o.mode == MDR_GRAPH_DYNAMIC ? 0 : g - tokens;
  return outcome;
}

mdr_status mdr_graph_cache_stats(const mdr_graph_cache *c, mdr_graph_stats *out) {
  if (!c || !out) return MDR_ERR_INVALID_ARGUMENT;
  *out = c->stats;
  return MDR_OK;
}
