/* graph_cache.c — capture one decode step (zeroing + token-id upload + the
 * caller's body) into a graph per token count, cache it, replay it per step.
 *
 * The cache keeps the caching: options, the ladder, one entry per graph
 * token count, LRU eviction, and DYNAMIC's one re-targeted graph. The step
 * prologue (the staging ring that carries each step's ids and count to the
 * device) lives in staging.h; the zero plans come from the arena
 * (arena_impl.h) and their arithmetic from plan/zero_map.h.
 *
 * Two kinds of steps. A host step's ids travel through the staging ring; a
 * device step's ids are already in device memory (the engine's sampling
 * output, or token_ids itself), and the graph copies them on the device.
 * The kinds have graphs of their own (a set each), since their launches
 * differ; both advance the one staging counter, so they mix freely.
 *
 * DYNAMIC. One graph serves every count. By default (NODE_UPDATE) the fused
 * node is re-targeted to the step's count when it changes, so the kernel
 * gets the count as a parameter. Its plan for every count 1..M is resolved
 * once, at create, into a plan table in device memory (zero_map.h section
 * 4), so the node's parameters are only t and the stage. The node is the
 * one the capture itself reports for the fused launch (the backend asks the
 * capture right after the launch), never a search of the graph, so a body
 * with fused launches of its own cannot be mistaken for it. DEVICE_COUNT
 * leaves the graph untouched and has the kernel read the count from the
 * slot.
 *
 * Inline steps. A host step of an EXACT or LADDER count whose largest slot
 * image fits MDR_STAGE_INLINE_BYTES (or, with fused zeroing, whose plan the
 * inline plan table serves, MDR_STAGE_INLINE_XXXL_BYTES) carries the image
 * in the fused launch's own parameters instead of a ring slot (staging.h):
 * such a count
 * is captured inline (per count, once, for its graph's life); each step
 * writes its image into the entry's copy of the launch's parameters with
 * the slot writer, updates the node, then launches the graph. No slot is
 * taken, so no ring wait; eager steps (graphs disabled, eager-only counts)
 * and device steps keep the ring. MDR_STAGE_INLINE=0 turns the route off. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "arena_impl.h"
#include "env.h"
#include "comm_impl.h"
#include "mdr/graph.h"
#include "graph_cache_impl.h"
#include "staging.h"
#include "trace.h"

static const size_t k_default_ladder[] = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256};
/* The default ladder continues with powers of two from here. */
#define LADDER_POW2_FIRST 512
/* Powers of two LADDER_POW2_FIRST .. 2^63 that can follow the given rungs. */
#define LADDER_POW2_RUNGS 55

void mdr_graph_cache_options_default(mdr_graph_cache_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->mode = MDR_GRAPH_EXACT;
  o->zero = MDR_ZERO_FROM_ARENA;
  o->rows = MDR_ROWS_FROM_ARENA;
}

static double monotonic_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* The rungs: the caller's (or the default, then powers of two), those above
 * M dropped, M always last. */
static mdr_status build_ladder(mdr_graph_cache *c, const mdr_graph_cache_options *o) {
  const size_t *src = o->ladder ? o->ladder : k_default_ladder;
  size_t n = o->ladder ? o->ladder_len : sizeof k_default_ladder / sizeof k_default_ladder[0];
  size_t cap = n + LADDER_POW2_RUNGS + 1; /* + M */
  c->ladder = malloc(cap * sizeof *c->ladder);
  if (!c->ladder) return mdr_backend_fail(c->b, MDR_ERR_OUT_OF_MEMORY, "graph cache: ladder");
  size_t len = 0;
  for (size_t i = 0; i < n && src[i] < c->max_tokens; i++) c->ladder[len++] = src[i];
  if (!o->ladder)
    for (size_t p = LADDER_POW2_FIRST; p < c->max_tokens && p != 0; p *= 2) c->ladder[len++] = p;
  c->ladder[len++] = c->max_tokens;
  c->ladder_len = len;
  return MDR_OK;
}

static int node_update_of(const mdr_graph_cache_options *o) {
  return o->mode == MDR_GRAPH_DYNAMIC && o->dynamic_impl == MDR_DYNAMIC_NODE_UPDATE;
}

/* The options with the policies resolved against the arena, checked field
 * by field: the refusal names the field. */
static mdr_status resolve_options(mdr_backend *b, const mdr_arena *a, const mdr_graph_cache_options *in,
                                  mdr_graph_cache_options *o) {
  *o = *in;
  if (o->zero == MDR_ZERO_FROM_ARENA) o->zero = mdr_arena_zero_strategy(a);
  if (o->rows == MDR_ROWS_FROM_ARENA) o->rows = mdr_arena_rows_policy(a);
  const char *bad = NULL;
  if ((int)o->mode < 0 || o->mode >= MDR_GRAPH_MODE_COUNT) bad = "mode: unknown value";
  else if ((int)o->zero < 0 || o->zero >= MDR_ZERO_STRATEGY_COUNT) bad = "zero: unknown strategy";
  else if ((int)o->rows < 0 || o->rows >= MDR_ROWS_POLICY_COUNT) bad = "rows: unknown policy";
  else if ((int)o->dynamic_impl < 0 || o->dynamic_impl >= MDR_DYNAMIC_IMPL_COUNT)
    bad = "dynamic_impl: unknown value";
  else if (o->body && o->body_dynamic) bad = "body and body_dynamic: give one body, not both";
  else if (o->mode == MDR_GRAPH_DYNAMIC && o->zero != MDR_ZERO_FUSED) bad = "zero: DYNAMIC needs MDR_ZERO_FUSED";
  else if (o->mode == MDR_GRAPH_DYNAMIC && o->body)
    bad = "body: a DYNAMIC graph serves every count; give body_dynamic (it reads the count on the device)";
  else if (o->mode == MDR_GRAPH_LADDER && o->ladder && (o->ladder_len == 0 || o->ladder[0] == 0))
    bad = "ladder: empty, or a rung of 0";
  if (!bad && o->mode == MDR_GRAPH_LADDER && o->ladder)
    for (size_t i = 1; i < o->ladder_len && !bad; i++)
      if (o->ladder[i] <= o->ladder[i - 1]) bad = "ladder: not strictly increasing";
  if (bad) return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT, "graph cache options: %s", bad);
  return MDR_OK;
}

/* What must be alike on every rank of a tensor-parallel step: the options
 * that decide which graph serves which count, and when graphs are made or
 * dropped (mode, ladder, LRU cap, implementation, policies, pad id). */
static uint64_t lockstep_hash(const mdr_graph_cache *c) {
  uint64_t h = 0xcbf29ce484222325ull;
  const uint64_t words[] = {(uint64_t)c->o.mode, (uint64_t)c->o.zero, (uint64_t)c->o.rows,
                            (uint64_t)c->o.dynamic_impl, (uint64_t)c->o.max_graphs, c->o.pad_token_id,
                            c->max_tokens, c->ladder_len, (uint64_t)c->graphs_disabled, c->o.max_graph_bytes,
                            c->n_inputs, c->max_sequences, c->staging.slot_bytes};
  for (size_t i = 0; i < sizeof words / sizeof words[0] + c->ladder_len; i++) {
    const uint64_t v = i < sizeof words / sizeof words[0] ? words[i] : c->ladder[i - sizeof words / sizeof words[0]];
    for (int k = 0; k < 8; k++) h = (h ^ ((v >> (8 * k)) & 0xff)) * 0x100000001b3ull;
  }
  return h | 1; /* never 0: 0 marks "none yet" */
}

/* Resolve c->rules at every count 1..m into a plan table, uploaded once
 * to *out (NODE_UPDATE: m = max_tokens; the inline route: its largest
 * count). */
static mdr_status build_table(mdr_graph_cache *c, size_t m, mdr_dptr *out) {
  const size_t n = c->n_rules;
  size_t words = (size_t)mdr_plan_table_words(n, m);
  uint64_t *w = malloc(words * sizeof *w);
  if (!w) return mdr_backend_fail(c->b, MDR_ERR_OUT_OF_MEMORY, "graph cache: plan table (%zu bytes)", words * 8);
  mdr_plan_table_fill(c->rules, n, m, w);
  mdr_status st = mdr_be_alloc_device(c->b, words * sizeof *w, out);
  if (st == MDR_OK) st = mdr_be_copy_h2d(c->b, *out, w, words * sizeof *w);
  free(w);
  return st;
}

/* The zeroing under which a large-class image still goes inline: the
 * fused plan's bytes at count g at most this. A long plan hides most of
 * the ring's read of the slot, a short one waits for it. On an H200
 * (GLM-5.3): at seed policy (52-58 MB of zeroing at 1-16 tokens) steps
 * with a block table at 1-16 sequences inline cost the same GPU time as
 * on the ring (within 0.1 us) and 0.4-1.0 us more CPU; under policy all
 * the inline step took 0.67-0.71x of the ring's GPU time at 1-2 sequences
 * (3-4 MB), 0.85x at 24 sequences (19 MB) and 0.92x at 32 (25 MB), for
 * 1-1.4 us more CPU (docs/GRAPHS.md, "Small steps inline"). */
#define LARGE_INLINE_ZERO_MAX (32u << 20)

/* The bytes the cache's fused plan clears at count g. */
static uint64_t plan_bytes_at(const mdr_graph_cache *c, size_t g) {
  uint64_t total = 0;
  for (size_t i = 0; i < c->n_rules; i++) total += mdr_zero_seg_bytes(&c->rules[i], g);
  return total;
}

/* Whether count g's image goes inline in a larger class (large to
 * largest), with the inline plan table: it does not fit the small class,
 * or the cache declares step inputs (whose table only the larger classes
 * carry in their parameters: mdr_stage_inline_class), fits the largest
 * one, and the count's zeroing is short enough for the ring's read, or the
 * input table's, to show (LARGE_INLINE_ZERO_MAX). Fused zeroing only: the
 * larger classes are the list and table forms'. */
static int large_inline(const mdr_graph_cache *c, size_t g, uint64_t image_bytes) {
  return c->o.zero == MDR_ZERO_FUSED && c->n_rules <= MDR_ZERO_MAX_SEGS &&
         (image_bytes > MDR_STAGE_INLINE_BYTES || c->staging.n_inputs > 0) &&
         image_bytes <= MDR_STAGE_INLINE_XXXL_BYTES && plan_bytes_at(c, g) <= LARGE_INLINE_ZERO_MAX;
}

/* The inline route's plan table, for the larger image classes: the fused
 * inline launch of such a count reads its plan from the table, so the
 * node's parameters (updated every step) are the table parameters and the
 * image, not the whole plan and the image (plans that fit the chunk list
 * travel as it instead). Small-class counts, those of a cache without
 * step inputs, keep the static form (the plan in the parameters): on an
 * H200 the table form gained them nothing under policy all and cost 1% of
 * GPU time at seed policy, where each of some 3,000 blocks reads its plan
 * from the table. It covers 1..the largest larger-class count (a few dozen
 * at most), not max_tokens: a table to M = 4096 would take over a
 * megabyte. A cache with no larger-class count (ids only, memset zeroing,
 * long plans) takes none. */
static mdr_status build_inline_table(mdr_graph_cache *c) {
  if (!c->inline_route) return MDR_OK;
  size_t m = 0;
  for (size_t g = 1; g <= c->max_tokens; g++) {
    const uint64_t bytes = mdr_staging_inline_bytes(&c->staging, g);
    if (bytes == 0) break; /* past the counts with an inline layout */
    if (large_inline(c, g, bytes)) m = g;
  }
  if (m == 0) return MDR_OK;
  mdr_status st = build_table(c, m, &c->inline_table);
  if (st == MDR_OK) c->inline_table_max = m;
  return st;
}

/* Whether graph count g is a large-class inline count: its launch takes
 * the table form, the plan from the inline plan table. */
static int large_count(const mdr_graph_cache *c, size_t g) {
  return g <= c->inline_table_max && large_inline(c, g, mdr_staging_inline_bytes(&c->staging, g));
}

mdr_status mdr_graph_cache_create(mdr_arena *a, mdr_stream stream, const mdr_graph_cache_options *o,
                                  mdr_graph_cache **out) {
  mdr_backend *b = mdr_arena_backend(a);
  if (!out) return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT, "graph cache: NULL out");
  *out = NULL;
  if (!a || !stream || !o)
    return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT, "graph cache: NULL %s",
                            !a ? "arena" : !stream ? "stream (the legacy stream is refused)" : "options");
  mdr_graph_cache_options opt;
  mdr_status st = resolve_options(b, a, o, &opt);
  if (st != MDR_OK) return st;
  if (!mdr_be_has_zero_fused(b) || (node_update_of(&opt) && !mdr_be_has_node_update(b)))
    return mdr_backend_fail(b, MDR_ERR_UNSUPPORTED, "graph cache: backend %s lacks the fused launch",
                            mdr_be_name(b));
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
  c->o = opt;
  c->o.ladder = NULL;
  c->max_tokens = m;
  c->graphs_disabled = mdr_env_switch(b, "MDR_DISABLE_GRAPHS", "graph cache");
  c->poison = mdr_env_switch(b, "MDR_POISON", "graph cache") || opt.poison;
  c->measure_memory = mdr_be_has_mem_used(b);
  c->count_nodes = mdr_be_has_graph_nodes(b);
  /* a large slot read by several stage blocks; MDR_STAGE_SPREAD=0 keeps
   * one (on an H200 the spread step with inputs took 0.77-0.91x of one
   * block's time at 16-64 sequences, docs/GRAPHS.md) */
  c->spread = mdr_env_switch_or(b, "MDR_STAGE_SPREAD", "graph cache", 1);
  c->inline_route = mdr_env_switch_or(b, "MDR_STAGE_INLINE", "graph cache", 1) && !c->graphs_disabled &&
                    opt.mode != MDR_GRAPH_DYNAMIC && mdr_be_has_inline(b);
  st = build_ladder(c, o);
  if (st != MDR_OK) goto fail;
  for (int k = 0; k < IDS_KINDS; k++) {
    c->sets[k].entries = calloc(c->max_tokens + 1, sizeof *c->sets[k].entries);
    if (!c->sets[k].entries) {
      st = mdr_backend_fail(b, MDR_ERR_OUT_OF_MEMORY, "graph cache: %zu entries", c->max_tokens + 1);
      goto fail;
    }
  }
  /* the zero plan's rules first: the inputs' destinations are checked
   * against them */
  c->n_rules = mdr_arena_rules(a, MDR_COVER_ROWS, c->o.rows, c->rules);
  st = mdr_gc_setup_inputs(c, o);
  if (st == MDR_OK && c->inline_route) st = mdr_staging_inline_init(&c->staging, m, c->max_sequences);
  if (st != MDR_OK) goto fail;
  if (node_update_of(&c->o)) {
    st = build_table(c, c->max_tokens, &c->table);
    if (st != MDR_OK) goto fail;
  }
  st = build_inline_table(c);
  if (st != MDR_OK) goto fail;
  if (mdr_arena_comm(a)) { /* a tensor-parallel cache: alike on every rank */
    st = mdr_comm_note_cache(mdr_arena_comm(a), lockstep_hash(c));
    if (st != MDR_OK) goto fail;
  }
  *out = c;
  return MDR_OK;
fail:
  mdr_be_free_device(b, c->table);
  mdr_be_free_device(b, c->inline_table);
  mdr_staging_fini(&c->staging);
  free(c->names);
  for (int k = 0; k < IDS_KINDS; k++) free(c->sets[k].entries);
  free(c->ladder);
  free(c);
  return st;
}

void mdr_graph_cache_destroy(mdr_graph_cache *c) {
  if (!c) return;
  (void)mdr_be_synchronize(c->b, c->stream);
  for (int k = 0; k < IDS_KINDS; k++) {
    for (size_t t = 0; t <= c->max_tokens; t++) {
      graph_entry *e = &c->sets[k].entries[t];
      mdr_be_exec_destroy(c->b, e->exec);
      mdr_be_graph_destroy(c->b, e->inl_graph);
      free(e->inl);
    }
    mdr_be_graph_destroy(c->b, c->sets[k].dyn_graph);
    free(c->sets[k].entries);
  }
  mdr_be_free_device(c->b, c->table);
  mdr_be_free_device(c->b, c->inline_table);
  mdr_staging_fini(&c->staging);
  free(c->names);
  free(c->ladder);
  free(c);
}

static size_t graph_tokens_of(const mdr_graph_cache *c, size_t t) {
  if (c->o.mode == MDR_GRAPH_DYNAMIC) return c->max_tokens;
  if (c->o.mode == MDR_GRAPH_EXACT) return t;
  size_t lo = 0, hi = c->ladder_len - 1; /* first rung >= t; the last rung is M >= t */
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (c->ladder[mid] >= t) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
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
  if (!c) return MDR_ERR_INVALID_ARGUMENT;
  if (!out) return mdr_backend_fail(c->b, MDR_ERR_INVALID_ARGUMENT, "graph cache: NULL out");
  mdr_status st = check_tokens(c, tokens);
  if (st == MDR_OK) *out = graph_tokens_of(c, tokens);
  return st;
}

mdr_status mdr_graph_cache_graph_info(const mdr_graph_cache *c, size_t tokens, mdr_graph_info *out) {
  if (!c) return MDR_ERR_INVALID_ARGUMENT;
  if (!out) return mdr_backend_fail(c->b, MDR_ERR_INVALID_ARGUMENT, "graph cache: graph info into NULL");
  mdr_status st = check_tokens(c, tokens);
  if (st != MDR_OK) return st;
  const size_t g = graph_tokens_of(c, tokens);
  const graph_entry *e = &c->sets[IDS_HOST].entries[g], *d = &c->sets[IDS_DEVICE].entries[g];
  *out = (mdr_graph_info){.graph_tokens = g,
                          .cached = e->exec != NULL,
                          .bytes = e->exec ? e->bytes : 0,
                          .nodes = e->exec ? e->nodes : 0,
                          .device_cached = d->exec != NULL,
                          .device_bytes = d->exec ? d->bytes : 0,
                          .device_nodes = d->exec ? d->nodes : 0};
  return MDR_OK;
}

/* step and prepare change nothing when called from inside the cache's own
 * step or prepare (a body re-entering), from a second thread while one is
 * inside (a cache is driven by one thread: docs/THREADS.md), or while the
 * cache's stream is being captured (an engine's capture around them): a
 * staged launch recorded into a graph the cache does not own would leave
 * the ring and the device out of step for good. The guard is an atomic
 * owner word, so that two threads are told apart every time. */
static _Thread_local char tls_self; /* its address names the calling thread */

static mdr_status enter(mdr_graph_cache *c, const char *what) {
  uintptr_t none = 0;
  const uintptr_t me = (uintptr_t)&tls_self;
  if (!atomic_compare_exchange_strong(&c->owner, &none, me)) {
    if (none == me)
      return mdr_backend_fail(c->b, MDR_ERR_STATE,
                              "graph cache: %s called from inside this cache's step or prepare (a body "
                              "must only enqueue work); nothing changed", what);
    return mdr_backend_fail(c->b, MDR_ERR_STATE,
                            "graph cache: %s called from a second thread while another thread is inside this "
                            "cache's step or prepare (one thread drives a cache: docs/THREADS.md); nothing "
                            "changed", what);
  }
  int capturing = 0;
  mdr_status st = mdr_be_is_capturing(c->b, c->stream, &capturing);
  if (st == MDR_OK && capturing)
    st = mdr_backend_fail(c->b, MDR_ERR_STATE,
                          "graph cache: %s while the cache's stream is being captured (not "
                          "capture-safe: replay the cache's graphs instead of capturing them)", what);
  /* an error earlier work left pending is the application's: reported as
   * such before anything is staged, never taken for this call's launch */
  if (st == MDR_OK) st = mdr_be_take_pending_error(c->b);
  if (st != MDR_OK) atomic_store(&c->owner, 0);
  return st;
}

static void leave(mdr_graph_cache *c) { atomic_store(&c->owner, 0); }

/* Per-sequence rows of a graph of g tokens: min(g, max_sequences). */
static size_t sequence_bound(const mdr_graph_cache *c, size_t g) {
  return g < c->max_sequences ? g : c->max_sequences;
}

/* Whether a device step's launch must read its real count from the slot
 * header: when one graph serves several counts and its launch does not
 * carry the count (LADDER rungs, DYNAMIC by device count). */
static int device_needs_header(const mdr_graph_cache *c) {
  /* ... and whenever inputs are declared: host inputs travel in the slot,
   * and inputs of a count the launch does not carry (sequences) need the
   * header's counts */
  return c->o.mode == MDR_GRAPH_LADDER || (c->o.mode == MDR_GRAPH_DYNAMIC && !node_update_of(&c->o)) ||
         c->n_inputs > 0;
}

/* (graph_cache_impl.h) */
int mdr_gc_device_carries_sequences(const mdr_graph_cache *c) {
  return device_needs_header(c) || node_update_of(&c->o);
}

/* Whether a step of this kind uses a staging slot (and so advances the
 * ring): host steps, device steps that read their count from a slot, and
 * counted device steps (IDS_DEVICE_COUNTED). The others touch no host
 * memory at all: no slot read, no ack written. */
static int uses_slot(const mdr_graph_cache *c, step_ids ids) {
  return ids.kind != IDS_DEVICE || device_needs_header(c);
}

/* Whether graph count g of this kind is captured inline: a step of an
 * EXACT or LADDER cache (inline_route) that takes a slot (a host step, or
 * a device-id step with host inputs or a count to read: its image is the
 * header and the host inputs, the ids copied on the device) whose slot
 * image at g (its most sequences) fits MDR_STAGE_INLINE_BYTES, or goes in
 * the large class (large_inline) and the inline plan table covers g (the
 * launch's table form, the only one that carries the large class). The
 * same answer for the cache's life, so a count's graph is inline or ring
 * from its capture on. */
static int inline_count(const mdr_graph_cache *c, size_t g, step_ids ids) {
  if (!c->inline_route || !uses_slot(c, ids)) return 0;
  const uint64_t bytes = mdr_staging_inline_bytes(&c->staging, g);
  if (bytes == 0) return 0;
  return bytes <= MDR_STAGE_INLINE_BYTES || large_count(c, g);
}

/* The stage descriptor of a step of this kind: host ids come from the slot
 * (FETCH); device ids from ids.src, the counts from the slot only when the
 * step uses one (uses_slot). */
static mdr_stage_desc stage_of(const mdr_graph_cache *c, step_ids ids, uint32_t extra, size_t g,
                               size_t copy_sequences) {
  uint32_t flags = extra | (uses_slot(c, ids) ? MDR_STAGE_ADVANCE : 0u);
  if (ids.kind == IDS_HOST) {
    flags |= MDR_STAGE_FETCH;
  } else {
    flags |= MDR_STAGE_DEVICE_IDS | (uses_slot(c, ids) ? MDR_STAGE_FETCH : 0u);
  }
  mdr_stage_desc d = mdr_staging_desc(&c->staging, mdr_arena_token_ids(c->arena), flags, (uint32_t)copy_sequences);
  d.ids_src = ids.kind != IDS_HOST ? ids.src : 0;
  d.pad_id = c->o.pad_token_id;
  if (flags & MDR_STAGE_TABLE) {
    d.table = c->table;
    d.table_max = c->max_tokens;
  }
  /* a static launch's large slot read spread over several stage blocks (the
   * kernel takes it only where it fetches and advances in one launch) */
  if (extra == 0 && c->spread) d.flags |= mdr_staging_spread(&c->staging, g, copy_sequences, ids.kind == IDS_HOST);
  return d;
}

/* Enqueue one step's work on the stream for graph token count g: the zero
 * plan, the staged launch, the body. Used both eagerly and under capture
 * (`capturing`). *staged is set once the staged launch is enqueued. In
 * DYNAMIC mode g is the step's real count (NODE_UPDATE: the launch as the
 * update would make it; captured once at max_batch_tokens, and the capture
 * reports its node) or ignored (DEVICE_COUNT). `seqs` is NODE_UPDATE's
 * sequence count (the static modes copy sequence_bound(g) rows; DEVICE_COUNT
 * reads the header). With `inl` (capturing an inline count) the staged
 * launch is the inline one: *inl is set to it as made, *inl_node to its
 * node. */
static mdr_status enqueue_step(mdr_graph_cache *c, size_t g, size_t seqs, step_ids ids, int capturing,
                               mdr_stage_inline_launch *inl, void **inl_node, int *staged) {
  mdr_status st;
  if (inl) {
    mdr_stage_desc stage = mdr_staging_inline_desc(&c->staging, mdr_arena_token_ids(c->arena), g);
    if (ids.kind != IDS_HOST) { /* the image holds no ids: they come from the device, pad after them */
      stage.flags |= MDR_STAGE_DEVICE_IDS;
      stage.ids_src = ids.src;
      stage.pad_id = c->o.pad_token_id;
    }
    if (c->o.zero == MDR_ZERO_FUSED) {
      if (large_count(c, g)) { /* the table form, the plan from the table */
        stage.table = c->inline_table;
        stage.table_max = c->inline_table_max;
      }
      st = mdr_be_fused_inline_launch(c->b, c->rules, c->n_rules, g, &stage, c->stream, inl_node, inl);
    } else { /* memsets, then a stage-only launch */
      st = mdr_arena_run_rules(c->arena, c->stream, c->rules, c->n_rules, g, MDR_ZERO_MEMSET);
      if (st == MDR_OK) st = mdr_be_fused_inline_launch(c->b, NULL, 0, g, &stage, c->stream, inl_node, inl);
    }
    /* the count's input table into the launch's own parameters, where it
     * has room: every step's update carries it, so the stage block reads no
     * device memory before its first store */
    if (st == MDR_OK && inl->table_offset)
      mdr_staging_inline_table(&c->staging, g, (unsigned char *)inl->param + inl->table_offset);
  } else if (node_update_of(&c->o)) {
    mdr_stage_desc stage = stage_of(c, ids, MDR_STAGE_TABLE, g, seqs);
    st = mdr_be_zero_fused(c->b, c->rules, c->n_rules, g, &stage, c->stream,
                           capturing ? &c->sets[ids.kind].dyn_node : NULL);
  } else if (c->o.mode == MDR_GRAPH_DYNAMIC) {
    mdr_stage_desc stage = stage_of(c, ids, MDR_STAGE_DYNAMIC, g, 0);
    st = mdr_be_zero_fused(c->b, c->rules, c->n_rules, g, &stage, c->stream, NULL);
  } else if (c->o.zero == MDR_ZERO_FUSED) {
    mdr_stage_desc stage = stage_of(c, ids, 0, g, sequence_bound(c, g));
    st = mdr_be_zero_fused(c->b, c->rules, c->n_rules, g, &stage, c->stream, NULL);
  } else { /* memsets, then a stage-only launch */
    mdr_stage_desc stage = stage_of(c, ids, 0, g, sequence_bound(c, g));
    st = mdr_arena_run_rules(c->arena, c->stream, c->rules, c->n_rules, g, MDR_ZERO_MEMSET);
    if (st == MDR_OK) st = mdr_be_zero_fused(c->b, NULL, 0, g, &stage, c->stream, NULL);
  }
  if (st == MDR_OK && c->poison && c->o.mode != MDR_GRAPH_DYNAMIC)
    st = mdr_arena_run_poison(c->arena, c->stream, c->rules, c->n_rules, g);
  if (st != MDR_OK) return st;
  *staged = 1;
  const unsigned long long failures = mdr_backend_failures();
  if (c->o.body) {
    st = c->o.body(c->o.user, c->stream, g);
  } else if (c->o.body_dynamic) {
    const size_t bound = c->o.mode == MDR_GRAPH_DYNAMIC ? c->max_tokens : g;
    st = c->o.body_dynamic(c->o.user, c->stream, mdr_graph_cache_count_ptr(c), bound);
  }
  if (st == MDR_OK) return MDR_OK;
  /* keep what the body's own failed call said, if it recorded anything */
  char inner[MDR_BACKEND_ERROR_MAX] = "";
  if (mdr_backend_failures() != failures) snprintf(inner, sizeof inner, ": %s", mdr_backend_last_error(c->b));
  return mdr_backend_fail(c->b, st, "graph cache: the body returned %s at %zu graph tokens%s%s",
                          mdr_status_string(st), g, capturing ? " (under capture)" : "", inner);
}

static void drop_graph(mdr_graph_cache *c, graph_entry *e) {
  mdr_be_exec_destroy(c->b, e->exec);
  mdr_be_graph_destroy(c->b, e->inl_graph);
  free(e->inl);
  e->exec = NULL;
  e->inl = NULL;
  e->inl_node = NULL;
  e->inl_graph = NULL;
  c->stats.graphs--;
  c->stats.graph_bytes -= e->bytes;
  c->stats.graph_nodes -= e->nodes;
}

static void evict_lru(mdr_graph_cache *c) {
  graph_entry *victim = NULL;
  uint64_t oldest = UINT64_MAX;
  for (int k = 0; k < IDS_KINDS; k++)
    for (size_t t = 1; t <= c->max_tokens; t++) {
      graph_entry *e = &c->sets[k].entries[t];
      if (e->exec && e->last_used < oldest) {
        oldest = e->last_used;
        victim = e;
      }
    }
  if (!victim) return;
  drop_graph(c, victim);
  c->stats.evictions++;
}

static mdr_status capture_traced(mdr_graph_cache *c, size_t g, step_ids ids);

/* Capture and instantiate the graph for g. On failure the capture is ended,
 * nothing is cached, the backend's last error says why, and the status is
 * the body's own or MDR_ERR_CAPTURE. */
static mdr_status capture(mdr_graph_cache *c, size_t g, step_ids ids) {
  mdr_trace_push(MDR_TRACE_CAPTURE, (int)c->o.mode, g);
  const mdr_status st = capture_traced(c, g, ids);
  mdr_trace_pop();
  return st;
}

static mdr_status capture_traced(mdr_graph_cache *c, size_t g, step_ids ids) {
  double t0 = monotonic_us();
  void *graph = NULL, *exec = NULL, *inl_node = NULL;
  int staged = 0;
  graph_set *set = &c->sets[ids.kind];
  mdr_stage_inline_launch *inl = NULL;
  if (inline_count(c, g, ids)) {
    inl = malloc(sizeof *inl); /* host memory, before the capture: a step's image goes here */
    if (!inl) return mdr_backend_fail(c->b, MDR_ERR_OUT_OF_MEMORY, "graph cache: an inline launch's parameters");
  }
  mdr_status st = mdr_be_capture_begin(c->b, c->stream);
  if (st != MDR_OK) {
    free(inl);
    return MDR_ERR_CAPTURE;
  }
  mdr_status body = enqueue_step(c, g, sequence_bound(c, g), ids, 1, inl, &inl_node, &staged);
  st = mdr_be_capture_end(c->b, c->stream, &graph);
  if (body != MDR_OK) {
    mdr_be_graph_destroy(c->b, st == MDR_OK ? graph : NULL);
    free(inl);
    c->stats.capture_us += monotonic_us() - t0;
    /* the body's own status; a failure before it (zeroing, staging) is the capture's */
    return staged ? body : MDR_ERR_CAPTURE;
  }
  /* memory: the backend's in-use bytes around instantiate + upload (what
   * the runtime offers; docs/GRAPHS.md states the method's limits) */
  size_t nodes = 0, used0 = 0, used1 = 0;
  const int measured = c->measure_memory && mdr_be_mem_used(c->b, &used0) == MDR_OK;
  if (st == MDR_OK && c->count_nodes) (void)mdr_be_graph_nodes(c->b, graph, &nodes);
  if (st == MDR_OK) st = mdr_be_graph_instantiate(c->b, graph, c->stream, &exec); /* and upload */
  if (st == MDR_OK && node_update_of(&c->o)) {
    /* keep the graph: the node handle the capture reported names a node of it */
    mdr_be_graph_destroy(c->b, set->dyn_graph); /* a graph evicted and captured again */
    set->dyn_graph = graph;
    set->dyn_tokens = g; /* captured at max_batch_tokens */
    set->dyn_sequences = sequence_bound(c, g);
    graph = NULL;
  }
  void *inl_graph = NULL;
  if (st == MDR_OK && inl) { /* likewise: the inline node is a node of this graph */
    inl_graph = graph;
    graph = NULL;
  }
  mdr_be_graph_destroy(c->b, graph);
  if (st == MDR_OK && measured && mdr_be_mem_used(c->b, &used1) != MDR_OK) used1 = used0;
  c->stats.capture_us += monotonic_us() - t0;
  if (st != MDR_OK) {
    free(inl);
    return MDR_ERR_CAPTURE;
  }
  if (c->o.max_graphs && c->stats.graphs >= c->o.max_graphs) evict_lru(c);
  graph_entry *e = &set->entries[g];
  e->exec = exec;
  e->inl = inl;
  e->inl_node = inl_node;
  e->inl_graph = inl_graph;
  e->last_used = ++c->tick;
  e->eager_only = 0;
  e->ids_src = ids.src;
  e->bytes = measured && used1 > used0 ? used1 - used0 : 0;
  e->nodes = nodes;
  c->stats.graphs++;
  c->stats.captures++;
  c->stats.graph_bytes += e->bytes;
  c->stats.graph_nodes += e->nodes;
  /* the byte cap: the least recently used others go first; the graph just
   * made stays even alone over the cap */
  while (c->o.max_graph_bytes && c->stats.graph_bytes > c->o.max_graph_bytes && c->stats.graphs > 1) evict_lru(c);
  return MDR_OK;
}

static mdr_status prepare(mdr_graph_cache *c, const size_t *tokens, size_t n, step_ids ids) {
  if (n && !tokens) return mdr_backend_fail(c->b, MDR_ERR_INVALID_ARGUMENT, "graph cache: prepare of NULL counts");
  for (size_t i = 0; i < n; i++) {
    mdr_status st = check_tokens(c, tokens[i]);
    if (st != MDR_OK) return st;
  }
  mdr_status st = enter(c, "prepare");
  if (st != MDR_OK) return st;
  if (ids.kind != IDS_HOST && n) { /* ids a step of these counts would refuse: refused here already */
    size_t most = 0;
    for (size_t i = 0; i < n; i++) most = tokens[i] > most ? tokens[i] : most;
    st = mdr_gc_check_device_ids(c, ids.src, most);
  }
  if (st != MDR_OK || c->graphs_disabled) {
    leave(c);
    return st;
  }
  mdr_trace_push(MDR_TRACE_PREPARE, (int)c->o.mode, n);
  for (size_t i = 0; i < n && st == MDR_OK; i++) {
    size_t g = graph_tokens_of(c, tokens[i]);
    graph_entry *e = &c->sets[ids.kind].entries[g];
    if (e->exec && e->ids_src == ids.src) continue;
    if (e->exec) { /* captured with other ids */
      drop_graph(c, e);
      c->stats.evictions++;
    }
    const int was_eager_only = e->eager_only;
    st = capture(c, g, ids);
    if (st == MDR_OK && was_eager_only && c->stats.uncapturable) c->stats.uncapturable--;
  }
  leave(c);
  mdr_trace_pop();
  return st;
}

mdr_status mdr_graph_cache_prepare(mdr_graph_cache *c, const size_t *tokens, size_t n) {
  if (!c) return MDR_ERR_INVALID_ARGUMENT;
  return prepare(c, tokens, n, (step_ids){IDS_HOST, 0});
}

/* Device ids given as 0 are the arena's token_ids: one address for both. */
step_ids mdr_gc_device_ids(const mdr_graph_cache *c, mdr_dptr token_ids) {
  return (step_ids){IDS_DEVICE, token_ids ? token_ids : mdr_arena_token_ids(c->arena)};
}

mdr_status mdr_graph_cache_prepare_device(mdr_graph_cache *c, mdr_dptr token_ids, const size_t *tokens, size_t n) {
  if (!c) return MDR_ERR_INVALID_ARGUMENT;
  return prepare(c, tokens, n, mdr_gc_device_ids(c, token_ids));
}

/* Re-target the DYNAMIC exec's fused node to t when it holds another count
 * (decode batches keep their size for many steps: no update then). */
static mdr_status retarget(mdr_graph_cache *c, void *exec, size_t t, size_t seqs, step_ids ids) {
  graph_set *set = &c->sets[ids.kind];
  if (set->dyn_tokens == t && set->dyn_sequences == seqs) return MDR_OK;
  mdr_stage_desc stage = stage_of(c, ids, MDR_STAGE_TABLE, t, seqs);
  mdr_status st = mdr_be_fused_node_update(c->b, exec, set->dyn_node, c->rules, c->n_rules, t, &stage);
  if (st == MDR_OK) {
    set->dyn_tokens = t;
    set->dyn_sequences = seqs;
  }
  return st;
}

/* Write the step's slot (after waiting for it): the ring's, or with
 * `image` an inline launch's parameter copy. */
static void write_step(mdr_graph_cache *c, const step_call *call, step_ids ids, size_t copy, size_t copy_seqs,
                       unsigned char *image) {
  const mdr_staging_step w = {.ids = ids.kind == IDS_HOST ? call->host_ids : NULL,
                              .values = call->values ? call->values + 1 : NULL,
                              .tokens = call->tokens,
                              .copy_tokens = copy,
                              .sequences = call->sequences,
                              .copy_sequences = copy_seqs,
                              .pad_id = c->o.pad_token_id};
  if (image) {
    mdr_staging_write_inline(&c->staging, image, &w);
  } else {
    mdr_staging_write(&c->staging, &w);
  }
}

static mdr_status step_locked(mdr_graph_cache *c, const step_call *call, step_ids ids) {
  const size_t tokens = call->tokens, seqs = call->sequences;
  size_t g = graph_tokens_of(c, tokens);
  /* DYNAMIC copies the real counts' rows (NODE_UPDATE's launch is at t too) */
  const int dynamic = c->o.mode == MDR_GRAPH_DYNAMIC;
  const size_t copy = dynamic ? tokens : g, copy_seqs = dynamic ? seqs : sequence_bound(c, g);
  mdr_status st;
  graph_entry *e = &c->sets[ids.kind].entries[g];
  mdr_status outcome = MDR_OK;
  if (e->exec && e->ids_src != ids.src) { /* device ids moved: capture again */
    drop_graph(c, e);
    c->stats.evictions++;
  }
  const int hit = e->exec != NULL;
  if (!c->graphs_disabled && !hit && !e->eager_only) {
    c->stats.misses++;
    st = capture(c, g, ids);
    if (st != MDR_OK) {
      /* a count whose capture failed runs eagerly from now on (a body that
       * always breaks capture is not re-captured on every step) */
      char why[MDR_BACKEND_ERROR_MAX];
      snprintf(why, sizeof why, "%s", mdr_backend_last_error(c->b));
      mdr_backend_fail(c->b, MDR_ERR_CAPTURE,
                       "graph cache: capture of %zu graph tokens failed (%s; %s); this count runs eagerly "
                       "until a prepare of it succeeds",
                       g, mdr_status_string(st), why[0] ? why : "no detail");
      e->eager_only = 1;
      c->stats.eager_fallbacks++;
      c->stats.uncapturable++;
      outcome = MDR_ERR_CAPTURE;
    }
  }
  const int graph = !c->graphs_disabled && e->exec;
  /* the step's ring slot, once the route is known: an inline graph's replay
   * takes none (its image goes into the launch's parameters below); every
   * other step that stages, an inline count's eager step included, writes
   * one */
  const int ring = uses_slot(c, ids) && !(graph && e->inl);
  if (ring) {
    st = mdr_staging_wait(&c->staging, c->stream);
    if (st != MDR_OK) return st;
    write_step(c, call, ids, copy, copy_seqs, NULL);
  }
  if (graph) {
    if (node_update_of(&c->o)) {
      st = retarget(c, e->exec, tokens, seqs, ids);
      if (st != MDR_OK) return st; /* nothing enqueued: the slot is written again by the next step */
    }
    if (e->inl) {
      /* the step's image into the entry's copy of the launch's parameters,
       * then into the node (copied there: a launch already enqueued keeps
       * its own); a failed update leaves the node as it was, and nothing
       * is launched or counted */
      write_step(c, call, ids, copy, copy_seqs, (unsigned char *)e->inl->param + e->inl->slot_offset);
      st = mdr_be_fused_inline_update(c->b, e->exec, e->inl_node, e->inl);
      if (st != MDR_OK) return st;
    }
    st = mdr_be_graph_launch(c->b, e->exec, c->stream);
    if (st != MDR_OK) {
      /* a launch that failed part way (a body's op failing after the staged
       * node ran, say) may or may not have served the slot: the next step
       * re-reads the count from the device before it writes one */
      if (ring) mdr_staging_unsure(&c->staging);
      return st;
    }
    e->last_used = ++c->tick;
    if (ring) mdr_staging_enqueued(&c->staging);
    c->stats.hits += hit;
    c->stats.inline_steps += e->inl != NULL;
  } else {
    int staged = 0;
    st = enqueue_step(c, dynamic ? tokens : g, seqs, ids, 0, NULL, NULL, &staged);
    if (staged && ring) mdr_staging_enqueued(&c->staging); /* counted even when the body then failed */
    if (st != MDR_OK) return st;
    c->stats.eager_steps++;
  }
  c->stats.steps++;
  c->stats.device_steps += ids.kind != IDS_HOST;
  c->stats.padded_tokens += dynamic ? 0 : g - tokens;
  return outcome;
}

/* Check a step's counts and values against the declared inputs, before
 * anything is staged. */
static mdr_status check_step(const mdr_graph_cache *c, const step_call *call, step_ids ids) {
  mdr_status st = check_tokens(c, call->tokens);
  if (st != MDR_OK) return st;
  const size_t t = call->tokens, s = call->sequences;
  if (s == 0 || s > t || s > c->max_sequences)
    return mdr_backend_fail(c->b, MDR_ERR_OUT_OF_RANGE,
                            "graph cache: sequences: %zu (1 .. min(tokens %zu, max_sequences %zu))", s, t,
                            c->max_sequences);
  if (ids.kind == IDS_HOST && !call->host_ids)
    return mdr_backend_fail(c->b, MDR_ERR_INVALID_ARGUMENT, "graph cache: values[0] (token_ids): NULL");
  for (size_t i = 1; i <= c->n_inputs; i++) {
    const mdr_step_input_info *in = &c->inputs[i];
    const size_t rows = in->shape == MDR_INPUT_PER_TOKEN      ? t
                        : in->shape == MDR_INPUT_PER_SEQUENCE ? s
                                                              : in->max_rows;
    if (rows > in->max_rows)
      return mdr_backend_fail(c->b, MDR_ERR_OUT_OF_RANGE,
                              "graph cache: input %zu (\"%s\"): %zu rows at %zu tokens, %zu sequences; its "
                              "max_rows is %zu",
                              i, in->name, rows, t, s, in->max_rows);
    if (!in->device_src && (!call->values || !call->values[i]))
      return mdr_backend_fail(c->b, MDR_ERR_INVALID_ARGUMENT,
                              "graph cache: values[%zu] (\"%s\"): NULL for an input that takes host values%s", i,
                              in->name, call->values ? "" : " (give its values with mdr_graph_cache_step_inputs)");
  }
  return MDR_OK;
}

mdr_status mdr_gc_step(mdr_graph_cache *c, const step_call *call, step_ids ids) {
  mdr_status st = check_step(c, call, ids);
  if (st == MDR_OK) st = enter(c, "step");
  if (st != MDR_OK) return st;
  if (ids.kind != IDS_HOST) st = mdr_gc_check_device_ids(c, ids.src, call->tokens);
  if (st == MDR_OK) {
    mdr_trace_push(MDR_TRACE_STEP, (int)c->o.mode, call->tokens);
    st = step_locked(c, call, ids);
    mdr_trace_pop();
  }
  leave(c);
  return st;
}

/* The sequences of a step that does not say: one per token, up to
 * max_sequences. */
size_t mdr_gc_default_sequences(const mdr_graph_cache *c, size_t tokens) {
  return tokens < c->max_sequences ? tokens : c->max_sequences;
}

mdr_status mdr_graph_cache_step(mdr_graph_cache *c, const uint32_t *token_ids, size_t tokens) {
  if (!c) return MDR_ERR_INVALID_ARGUMENT;
  if (!token_ids) return mdr_backend_fail(c->b, MDR_ERR_INVALID_ARGUMENT, "graph cache: step with NULL token ids");
  const step_call call = {.host_ids = token_ids, .tokens = tokens, .sequences = mdr_gc_default_sequences(c, tokens)};
  return mdr_gc_step(c, &call, (step_ids){IDS_HOST, 0});
}

mdr_status mdr_graph_cache_step_device(mdr_graph_cache *c, mdr_dptr token_ids, size_t tokens) {
  if (!c) return MDR_ERR_INVALID_ARGUMENT;
  const step_call call = {.tokens = tokens, .sequences = mdr_gc_default_sequences(c, tokens)};
  return mdr_gc_step(c, &call, mdr_gc_device_ids(c, token_ids));
}

mdr_status mdr_graph_cache_sequence_bound(const mdr_graph_cache *c, size_t tokens, size_t *out) {
  if (!c) return MDR_ERR_INVALID_ARGUMENT;
  if (!out) return mdr_backend_fail(c->b, MDR_ERR_INVALID_ARGUMENT, "graph cache: NULL out");
  mdr_status st = check_tokens(c, tokens);
  if (st != MDR_OK) return st;
  *out = c->o.mode == MDR_GRAPH_DYNAMIC ? c->max_sequences : sequence_bound(c, graph_tokens_of(c, tokens));
  return MDR_OK;
}

