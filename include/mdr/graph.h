/* mdr — the graph builder and cache: one decode step's zeroing, token-id
 * upload and (optionally) the caller's own decode kernels captured into a
 * CUDA graph, cached by token count and replayed once per step.
 *
 * What one graph holds, in order:
 *   1. the zero plan of zero_all_rows(graph_tokens) under the cache's row
 *      policy (memset nodes, or one fused-kernel node);
 *   2. the upload of the step's ids from a pinned staging slot owned by the
 *      cache into the arena's token_ids, and of the step's real count into
 *      the count word (mdr_graph_cache_count_ptr): a kernel reading mapped
 *      pinned memory; with MDR_ZERO_FUSED it is the same node as the
 *      zeroing;
 *   3. the caller's body (one of the two kinds below).
 *
 * Staging safety: the ids of each step go to their own slot of a ring of
 * MDR_GRAPH_STAGING_SLOTS slots; the device counts the launches it has
 * served and reports them in pinned memory. `step` writes a slot only after
 * the launch that read it last has finished, so the host can run ahead of
 * the GPU by up to the ring length without ever overwriting ids not yet read;
 * past that, `step` waits.
 *
 * Capture: step and prepare are not capture-safe. They refuse (with
 * MDR_ERR_STATE, changing nothing) when the cache's stream is being
 * captured, and when called from inside the cache's own step or prepare
 * (from a body). Replay the cache's graphs through step instead of
 * capturing step into graphs of your own.
 *
 * Thread safety: one cache per thread and stream. Several caches may share
 * one arena only if their steps are ordered (the same stream, or the caller
 * orders the streams), since every graph writes the same buffers. */
#ifndef MDR_GRAPH_H
#define MDR_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "mdr/arena.h"
#include "mdr/backend.h"
#include "mdr/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mdr_graph_cache mdr_graph_cache;

typedef enum mdr_graph_mode {
  MDR_GRAPH_EXACT,   /* one graph per exact token count */
  MDR_GRAPH_LADDER,  /* pad up to the next ladder size; pad ids = pad_token_id */
  MDR_GRAPH_DYNAMIC, /* one graph for every token count (count read on device) */
  MDR_GRAPH_MODE_COUNT
} mdr_graph_mode;

/* The body: the caller's decode work, run inside each step after the
 * zeroing and the upload, eagerly or under capture. Rules for both kinds:
 * only enqueue work on `stream` (no allocation, no synchronisation, nothing
 * on other streams, no call to this cache); returning anything but MDR_OK
 * aborts the capture (the step then runs eagerly, see step). Give one of
 * the two in the options, not both.
 *
 * Kind 1, mdr_capture_fn (EXACT and LADDER): `tokens` is the graph's token
 * count (the padded one in LADDER mode), known on the host at capture.
 *
 *   static mdr_status my_step(void *user, mdr_stream s, size_t tokens) {
 *     engine *e = user;
 *     return engine_enqueue_layers(e, (cudaStream_t)s, tokens);
 *   }
 *   o.body = my_step;  o.user = e;
 *
 * Kind 2, mdr_capture_dynamic_fn (every mode; the only kind DYNAMIC takes):
 * the step's real token count is the uint32 at `count_ptr` in device
 * memory, written by the graph before the body runs, every replay; kernels
 * read it there and size their grids for `max_tokens` rows (the graph's
 * token count: max_batch_tokens in DYNAMIC mode, the exact or padded count
 * in EXACT and LADDER). An engine that writes its body this way writes it
 * once for every mode.
 *
 *   static mdr_status my_step_dyn(void *user, mdr_stream s, mdr_dptr count_ptr,
 *                                 size_t max_tokens) {
 *     engine *e = user;
 *     return engine_enqueue_layers_counted(e, (cudaStream_t)s,
 *                                          (const uint32_t *)count_ptr, max_tokens);
 *   }
 *   o.body_dynamic = my_step_dyn;  o.user = e; */
typedef mdr_status (*mdr_capture_fn)(void *user, mdr_stream stream, size_t tokens);
typedef mdr_status (*mdr_capture_dynamic_fn)(void *user, mdr_stream stream, mdr_dptr count_ptr,
                                             size_t max_tokens);

/* How a DYNAMIC graph learns each step's token count (their costs side by
 * side: docs/GRAPHS.md):
 *   MDR_DYNAMIC_NODE_UPDATE   step() re-targets the fused node of the one
 *                             instantiated graph when the count differs from
 *                             the previous step's: the node's parameters are
 *                             only t and the stage, its grid is fixed, and
 *                             the plan at t comes from a table of every
 *                             count's plan, built at create in device memory
 *                             (8 * (n + M * (2n + 1)) bytes for n rules). The
 *                             update is one parameter write on the host, and
 *                             the graph's GPU time stays close to an EXACT
 *                             graph's. Default.
 *   MDR_DYNAMIC_DEVICE_COUNT  the graph never changes: one block reads the
 *                             count from the staging slot in mapped host
 *                             memory and publishes it in device memory; all
 *                             blocks clear what any count clears, then wait
 *                             for it and clear the rest. No CPU cost beyond
 *                             the launch, but a PCIe round trip is on the
 *                             GPU's critical path. */
typedef enum mdr_graph_dynamic_impl {
  MDR_DYNAMIC_NODE_UPDATE,
  MDR_DYNAMIC_DEVICE_COUNT,
  MDR_DYNAMIC_IMPL_COUNT
} mdr_graph_dynamic_impl;

/* Default ladder of MDR_GRAPH_LADDER: 1, 2, 4, 8, 16, 24, 32, 48, 64, 96,
 * 128, 192, 256, then powers of two, ending at max_batch_tokens (always the
 * last rung). */

/* Slots of the staging ring: how many steps the host may run ahead of the
 * GPU before mdr_graph_cache_step waits. */
#define MDR_GRAPH_STAGING_SLOTS 8

typedef struct mdr_graph_cache_options {
  mdr_graph_mode mode;
  mdr_zero_strategy zero;                  /* MDR_ZERO_FROM_ARENA (default): the
                                              arena's at create; DYNAMIC needs
                                              MDR_ZERO_FUSED */
  const size_t *ladder; size_t ladder_len; /* LADDER; NULL: the default ladder.
                                              Copied at create; must be
                                              strictly increasing, >= 1; sizes
                                              above max_batch_tokens are
                                              dropped and max_batch_tokens is
                                              added as the last rung. */
  size_t max_graphs;                       /* LRU cap; 0: unlimited */
  uint32_t pad_token_id;
  mdr_capture_fn body; void *user;         /* optional */
  mdr_capture_dynamic_fn body_dynamic;     /* optional, any mode; gets `user` */
  mdr_graph_dynamic_impl dynamic_impl;     /* DYNAMIC only */
  mdr_rows_policy rows;                    /* zero_all_rows coverage of the
                                              graphs; MDR_ROWS_FROM_ARENA
                                              (default): the arena's at create */
  int poison;                              /* nonzero: poison mode (below); also
                                              MDR_POISON=1 at create */
  uint64_t max_graph_bytes;                /* LRU cap on the graphs' device
                                              memory (graph_bytes); 0: none */
} mdr_graph_cache_options;

/* Poison mode, for debugging: every EXACT or LADDER step (graph or eager)
 * fills what the zeroing leaves of each row-trimmed buffer (its rows past
 * the graph's count, to the buffer's end) with 0xFF bytes, a NaN in bf16,
 * fp16 and fp32, so a kernel that reads rows it never wrote shows up at
 * once. It costs one memset node per such buffer per step (up to 15, plus
 * the bytes they write: most of each buffer at small counts); DYNAMIC
 * graphs poison nothing (their count is known only on the device). The
 * arena's helpers have their own switch, mdr_arena_set_poison. */

/* EXACT, zero strategy and row policy from the arena (at create), default
 * ladder, unlimited graphs, pad id 0, no body. NULL o: nothing. */
MDR_API void mdr_graph_cache_options_default(mdr_graph_cache_options *o);

/* Create a cache over arena `a` capturing and replaying on `stream` (not the
 * legacy stream: NULL is MDR_ERR_INVALID_ARGUMENT). The arena, its backend
 * and the stream are borrowed and must outlive the cache; the options are
 * copied. Allocates the staging ring (pinned) and a small device block
 * (and, for DYNAMIC NODE_UPDATE, the plan table); captures nothing yet.
 * The zero strategy and row policy are fixed here for the cache's life
 * (mdr/arena.h says who owns which). Returns MDR_ERR_INVALID_ARGUMENT for
 * NULL arguments, an unknown mode, strategy, policy or DYNAMIC
 * implementation, a ladder that is not strictly increasing or holds 0,
 * DYNAMIC without MDR_ZERO_FUSED, both bodies given, `body` in DYNAMIC mode,
 * or an arena whose token_ids cannot hold max_batch_tokens ids (the last
 * error names the field); MDR_ERR_UNSUPPORTED on a backend without the
 * fused launch (the staged upload needs it); allocation failures as such.
 * On failure *out is NULL and nothing leaks. Caller owns *out; release
 * with mdr_graph_cache_destroy. Blocking (it clears and uploads on the
 * backend's private stream, never the whole device). Environment:
 * MDR_DISABLE_GRAPHS=1 (or true, yes, on) at create makes every step
 * eager; mdr_graph_stats.graphs_disabled says so. */
MDR_API mdr_status mdr_graph_cache_create(mdr_arena *a, mdr_stream stream,
                                          const mdr_graph_cache_options *o, mdr_graph_cache **out);

/* Wait for the cache's stream, then free every graph, the staging ring and
 * the device block. Accepts NULL. */
MDR_API void mdr_graph_cache_destroy(mdr_graph_cache *c);

/* Capture ahead of time (e.g. at start-up) the graphs serving these token
 * counts (each 1 .. max_batch_tokens; in LADDER mode the rung serving it, in
 * DYNAMIC mode the one graph). Counts already cached are skipped. Returns
 * the first failure (MDR_ERR_OUT_OF_RANGE for a bad count, checked before
 * anything is captured; MDR_ERR_CAPTURE or the body's status otherwise);
 * graphs captured before it stay. A count that a step marked eager-only
 * (its capture failed) is captured again. Not capture-safe: MDR_ERR_STATE,
 * nothing captured, while the stream is being captured or from inside the
 * cache's own step or prepare. Enqueues on the stream (graph uploads). With
 * graphs disabled it does nothing and returns MDR_OK. */
MDR_API mdr_status mdr_graph_cache_prepare(mdr_graph_cache *c, const size_t *tokens, size_t n);

/* One decode step: stage `tokens` ids, then replay the graph for that count
 * (capturing it on a miss). Asynchronous on the cache's stream: it returns
 * once the work is enqueued; token_ids may be reused by the caller at once.
 * Waits only when the host is MDR_GRAPH_STAGING_SLOTS steps ahead of the
 * GPU. Returns:
 *   MDR_OK                    the step is enqueued (graph or eager);
 *   MDR_ERR_INVALID_ARGUMENT  NULL cache or ids; nothing changed;
 *   MDR_ERR_OUT_OF_RANGE      tokens 0 or > max_batch_tokens; nothing changed;
 *   MDR_ERR_STATE             called while the cache's stream is being
 *                             captured, or from inside this cache's step or
 *                             prepare (a body); nothing changed. Also: the
 *                             staging ring found corrupt (the device served
 *                             a staged launch the cache never enqueued);
 *   MDR_ERR_CAPTURE           the capture failed (the body's failure
 *                             included, named in the last error); it was
 *                             ended cleanly, no graph was kept, and the step
 *                             ran eagerly (counted in eager_fallbacks): the
 *                             step's work is enqueued. That graph count then
 *                             runs eagerly without new captures (counted in
 *                             uncapturable) until a prepare of it succeeds;
 *                             this status is returned once per such count;
 *   other                     the step failed (backend error, or the body
 *                             failed when run eagerly); see
 *                             mdr_backend_last_error.
 * Not capture-safe itself (it launches graphs). */
MDR_API mdr_status mdr_graph_cache_step(mdr_graph_cache *c, const uint32_t *token_ids, size_t tokens);

/* One decode step whose ids are already in device memory: `token_ids` is
 * their device address (the engine's sampling output, say), or 0 when they
 * are in the arena's token_ids already (the previous step's body wrote
 * them). The graph copies them on the device: no host round trip, no
 * staging slot. EXACT and DYNAMIC by node update learn the count from the
 * launch itself, so such a step touches no host memory at all (no slot
 * read, no acknowledgement written); LADDER and DYNAMIC by device count
 * read the count (not the ids) from a staging slot. Ids past `tokens`, up to the graph's count, are pad_token_id as for
 * host steps. The address is captured into the graph: a step with another
 * address captures that count again. Device steps have graphs of their
 * own (they may be mixed with host steps on one cache in any order; each
 * kind replays its own graph of a count). The ids must be written, on the
 * cache's stream or before it, ahead of the step, and stay until it ran.
 * Statuses as for mdr_graph_cache_step. */
MDR_API mdr_status mdr_graph_cache_step_device(mdr_graph_cache *c, mdr_dptr token_ids, size_t tokens);

/* prepare for device steps with ids at `token_ids` (0: in token_ids). */
MDR_API mdr_status mdr_graph_cache_prepare_device(mdr_graph_cache *c, mdr_dptr token_ids, const size_t *tokens,
                                                  size_t n);

/* Device address of the uint32 holding the current step's real token count
 * (written by every step before the body runs). 0 for a NULL cache. */
MDR_API mdr_dptr mdr_graph_cache_count_ptr(const mdr_graph_cache *c);

/* The zero strategy and row policy the cache's graphs use (resolved at
 * create; never *_FROM_ARENA for a cache). A NULL cache gives
 * MDR_ZERO_FROM_ARENA / MDR_ROWS_FROM_ARENA. */
MDR_API mdr_zero_strategy mdr_graph_cache_zero_strategy(const mdr_graph_cache *c);
MDR_API mdr_rows_policy mdr_graph_cache_rows_policy(const mdr_graph_cache *c);

/* The graph token count serving `tokens` (EXACT: tokens; LADDER: its rung;
 * DYNAMIC: max_batch_tokens). MDR_ERR_OUT_OF_RANGE / _INVALID_ARGUMENT as
 * for step. */
MDR_API mdr_status mdr_graph_cache_graph_tokens(const mdr_graph_cache *c, size_t tokens, size_t *out);

typedef struct mdr_graph_stats {
  uint64_t steps;           /* steps enqueued (returned MDR_OK or MDR_ERR_CAPTURE) */
  uint64_t hits;            /* steps replayed from a graph already cached */
  uint64_t misses;          /* steps that found no graph and tried to capture one */
  uint64_t captures;        /* graphs captured, by steps and by prepare */
  uint64_t evictions;       /* graphs dropped: by the LRU caps (count or bytes), or
                               because a device step's ids moved */
  uint64_t eager_fallbacks; /* captures that failed in a step (it then ran eagerly) */
  uint64_t padded_tokens;   /* sum over steps of (graph tokens - real tokens) */
  double capture_us;        /* total time spent capturing, instantiating and uploading graphs */
  size_t graphs;            /* live graphs */
  uint64_t eager_steps;     /* steps enqueued eagerly (graphs disabled, fallbacks, eager-only counts) */
  uint64_t uncapturable;    /* graph counts marked eager-only after a failed capture */
  int graphs_disabled;      /* 1: MDR_DISABLE_GRAPHS was set at create; every step is eager */
  uint64_t device_steps;    /* steps whose ids were in device memory (step_device) */
  uint64_t graph_bytes;     /* device memory the live graphs hold, as measured (below) */
  size_t graph_nodes;       /* nodes of the live graphs */
  int poison;               /* 1: poison mode is on */
  int memory_measured;      /* 1: the backend can measure graph memory (else graph_bytes is 0) */
} mdr_graph_stats;

/* What the graph serving `tokens` holds. Memory is measured as the
 * backend's device memory in use just before instantiation and just after
 * upload (CUDA: cudaMemGetInfo; the runtime has no per-graph figure). Its
 * limits: the runtime reports whole pages (2 MiB), so small graphs may
 * read 0 and others a page more than they use; other threads' or
 * processes' allocations in that window are counted too; memory a graph
 * reuses from the runtime's pools reads 0. The host backend counts
 * sizeof(op) per recorded op. */
typedef struct mdr_graph_info {
  size_t graph_tokens; /* the graph's count (EXACT: tokens; LADDER: the rung; DYNAMIC: M) */
  int cached;          /* a host-ids graph of that count is live */
  uint64_t bytes;      /* its measured device memory */
  size_t nodes;        /* its nodes */
  int device_cached;   /* a device-ids graph (step_device) of that count is live */
  uint64_t device_bytes;
  size_t device_nodes;
} mdr_graph_info;

/* Fill *out for `tokens` (1 .. max_batch_tokens). MDR_ERR_OUT_OF_RANGE /
 * MDR_ERR_INVALID_ARGUMENT as for step. Reads the cache only. */
MDR_API mdr_status mdr_graph_cache_graph_info(const mdr_graph_cache *c, size_t tokens, mdr_graph_info *out);

/* Copy the counters. NULL arguments: MDR_ERR_INVALID_ARGUMENT. */
MDR_API mdr_status mdr_graph_cache_stats(const mdr_graph_cache *c, mdr_graph_stats *out);

#ifdef __cplusplus
}
#endif
#endif
