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
 * past that, `step` waits. A small step of an EXACT or LADDER graph
 * takes no slot: its host ids and inputs (a device-id step: its host inputs
 * and counts) travel in the fused kernel node's own parameters, set per
 * step (docs/GRAPHS.md, "Small steps inline"). The stats count such steps
 * in inline_steps, and MDR_STAGE_INLINE=0 turns this off.
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

/* Step inputs. Besides the token ids, a decode step's kernels read small
 * per-step inputs: positions, sequence lengths, a block table, a slot
 * mapping, sampling parameters. A cache declares them once, at create
 * (mdr_graph_cache_options.inputs); each step then carries their values in
 * the same staging slot as the ids (mdr_graph_cache_step_inputs), and the
 * same staged launch copies them to their destinations: one kernel node and
 * one read of one slot per step, with the ring's guarantee (the host never
 * overwrites values the GPU has not read yet) extended to every input.
 *
 * Inputs are indexed in declaration order from 1; index 0 is the token ids
 * (the implicit first input: 4-byte elements, one per token, destination
 * the arena's token_ids, pad pad_token_id), so that a step's `values`
 * array and the layout query (mdr_graph_cache_step_input_info) list the
 * ids first. A binding can present that layout as `decode_meta`.
 *
 * Rows. An input has rows of `width` elements; how many rows a step carries
 * is its shape:
 *   MDR_INPUT_PER_TOKEN     one row per token of the step (positions, slot
 *                           mapping);
 *   MDR_INPUT_PER_SEQUENCE  one row per sequence (sequence lengths; with
 *                           width = blocks per sequence, a block table);
 *   MDR_INPUT_FIXED         max_rows rows every step (sampling parameters
 *                           of a fixed batch, a constant).
 * Padding. A graph serves a bound of rows, not only the step's count: in
 * EXACT and LADDER mode the graph's token count g (per token), and
 * min(g, max_sequences) (per sequence, since a step's sequences never
 * outnumber its tokens), but never more than the input's max_rows (its
 * destination's rows). Rows from the step's count up to that bound get the
 * input's `pad` value, as ids get pad_token_id, so a graph's kernels may
 * read every row of the bound that the destination holds. DYNAMIC graphs
 * copy exactly the step's rows (their kernels read the counts on the
 * device). */
typedef enum mdr_step_input_shape {
  MDR_INPUT_PER_TOKEN,
  MDR_INPUT_PER_SEQUENCE,
  MDR_INPUT_FIXED,
  MDR_INPUT_SHAPE_COUNT
} mdr_step_input_shape;

/* Where an input's values go. A destination is captured into the graphs
 * (like token_ids' address): it must stay valid for the cache's life. The
 * step's launch writes it while its other blocks clear the zero plan and
 * write the ids and the other inputs, in no set order, so a destination
 * shares no byte with an arena buffer of the cache's zero plan (its whole
 * extent at any count: the seed's coverage under the cache's row policy,
 * e.g. `scratch`), the arena's token_ids, another input's destination or
 * another input's device_src; a device_src shares none with the zero
 * plan's buffers, token_ids or another input's destination, and with its
 * own only by being it. Create refuses any such overlap, naming the
 * input. */
typedef enum mdr_step_input_dest {
  MDR_INPUT_TO_DEVICE, /* `address`: device memory the engine owns */
  MDR_INPUT_TO_ARENA,  /* `buffer` of the cache's arena, from byte `offset` */
  MDR_INPUT_DEST_COUNT
} mdr_step_input_dest;

/* Declared inputs besides the ids. */
#define MDR_STEP_INPUTS_MAX 16
/* Bytes of one staging slot at most (the ids and every host input at their
 * largest counts, each aligned to 16 bytes, plus a 16-byte header). */
#define MDR_STAGING_SLOT_MAX_BYTES ((size_t)16 << 20)

/* One step input. Every address is 16-byte aligned; the element size is 1,
 * 2, 4 or 8 bytes. */
typedef struct mdr_step_input {
  const char *name;            /* unique, non-empty, not "token_ids"; copied at create */
  size_t elem_bytes;           /* 1, 2, 4 or 8 */
  mdr_step_input_shape shape;
  size_t width;                /* elements per row; 0 means 1 */
  size_t max_rows;             /* the most rows a step carries. PER_TOKEN: 0 means
                                  max_batch_tokens, at most max_batch_tokens; PER_SEQUENCE:
                                  0 means max_sequences, at most max_sequences; FIXED: the
                                  rows of every step, >= 1. A step over it is refused. */
  uint64_t pad;                /* element value of the padded rows (its low elem_bytes bytes) */
  mdr_step_input_dest dest;
  mdr_dptr address;            /* MDR_INPUT_TO_DEVICE: the destination */
  mdr_buffer buffer;           /* MDR_INPUT_TO_ARENA: the buffer ... */
  size_t offset;               /* ... and the byte offset in it */
  mdr_dptr device_src;         /* 0: the values come from the host, each step. Else the
                                  values are already in device memory there (the engine's
                                  own kernels wrote them, on the cache's stream or before
                                  the step): the staged launch copies the step's rows
                                  device to device and pads, and steps pass no host values
                                  for it. Equal to the destination: only the pad is written. */
} mdr_step_input;

/* The layout of one input as the cache resolved it (index 0: the ids). */
typedef struct mdr_step_input_info {
  const char *name;            /* owned by the cache; valid for its life */
  size_t elem_bytes;
  mdr_step_input_shape shape;
  size_t width;                /* elements per row */
  size_t max_rows;             /* resolved (never 0) */
  size_t row_bytes;            /* elem_bytes * width */
  size_t max_bytes;            /* max_rows * row_bytes: the destination's extent */
  mdr_dptr dst;                /* the destination's device address */
  mdr_dptr device_src;         /* 0: host values */
  size_t slot_offset;          /* byte offset of its values in a staging slot; 0 for inputs
                                  already in device memory */
  uint64_t pad;
} mdr_step_input_info;

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
  const mdr_step_input *inputs;            /* step inputs besides the ids (above);
                                              copied at create, names included */
  size_t n_inputs;                         /* 0 .. MDR_STEP_INPUTS_MAX */
  size_t max_sequences;                    /* the most sequences of a step; 0 means
                                              max_batch_tokens (at most that) */
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
 * an arena whose token_ids cannot hold max_batch_tokens ids, or a step
 * input that is not as mdr_step_input says (the last error names the
 * input and its field); MDR_ERR_UNSUPPORTED on a backend without the
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
 *                             captured, from inside this cache's step or
 *                             prepare (a body), or from a second thread
 *                             while another is inside (the text says
 *                             which); nothing changed. Also: the staging
 *                             ring found corrupt (the device served a
 *                             staged launch the cache never enqueued);
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
 *                             mdr_backend_last_error. An error that earlier
 *                             work outside mdr left pending (CUDA: a failed
 *                             launch of the application's) is returned
 *                             before anything is staged, named as the
 *                             application's, and cleared. A failed step
 *                             leaves the ring consistent: the next step
 *                             works (after a graph launch that failed part
 *                             way, it first waits for the stream to drain
 *                             and re-reads the ring's count).
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
 * The step's launch reads them while it clears the zero plan and writes
 * token_ids and the step inputs: ids that share a byte with a buffer of
 * the zero plan, an input's destination, or token_ids without being them
 * are refused (MDR_ERR_INVALID_ARGUMENT, the text says which; nothing
 * staged). Otherwise statuses as for mdr_graph_cache_step. */
MDR_API mdr_status mdr_graph_cache_step_device(mdr_graph_cache *c, mdr_dptr token_ids, size_t tokens);

/* prepare for device steps with ids at `token_ids` (0: in token_ids).
 * Ids that such steps would refuse (mdr_graph_cache_step_device) are
 * refused here, at the largest of the counts, capturing nothing. */
MDR_API mdr_status mdr_graph_cache_prepare_device(mdr_graph_cache *c, mdr_dptr token_ids, const size_t *tokens,
                                                  size_t n);

/* One decode step with its step inputs: `values` lists n_values host
 * pointers in input order (mdr_graph_cache_step_input_info): values[0] the
 * `tokens` token ids (uint32), values[i] input i's rows at this step's
 * counts, packed (PER_TOKEN: tokens rows, PER_SEQUENCE: `sequences` rows,
 * FIXED: max_rows rows; each row `width` elements). An input already in
 * device memory (device_src) takes no host values: its entry is ignored
 * and may be NULL. n_values must be 1 + the declared inputs. Everything is
 * copied into one staging slot before the call returns: the caller may
 * reuse every array at once. `sequences` is the step's sequence count,
 * 1 .. min(tokens, max_sequences); the body's kernels read it at
 * mdr_graph_cache_sequences_ptr. Asynchronous as mdr_graph_cache_step, and
 * waits as it does. Returns, changing nothing and staging nothing:
 *   MDR_ERR_INVALID_ARGUMENT  NULL cache or values, n_values not 1 + the
 *                             declared inputs, a NULL values[i] of an
 *                             input that takes host values (the text names
 *                             it);
 *   MDR_ERR_OUT_OF_RANGE      tokens 0 or > max_batch_tokens, sequences out
 *                             of range, or an input's rows above its
 *                             max_rows (named);
 * otherwise as mdr_graph_cache_step. Not capture-safe; not thread-safe
 * (one thread drives a cache; a second thread's call is refused with
 * MDR_ERR_STATE). */
MDR_API mdr_status mdr_graph_cache_step_inputs(mdr_graph_cache *c, const void *const *values, size_t n_values,
                                               size_t tokens, size_t sequences);

/* mdr_graph_cache_step_inputs with the ids in device memory, as
 * mdr_graph_cache_step_device takes them (`token_ids`, 0: already in the
 * arena's token_ids); values[0] is ignored. With step inputs declared, a
 * device step reads the counts (and any host inputs) from a staging slot,
 * or, for a small step, from the fused launch's parameters (inline, as a
 * host step's). Without inputs, an EXACT cache's device graph reads no
 * slot and publishes min(tokens, max_sequences): a step that gives
 * another sequence count takes graphs of its own (captured at its first
 * such step, not by mdr_graph_cache_prepare_device, not in
 * mdr_graph_info's device fields), which read the counts as above. The
 * launch copies the ids and the inputs in no set order: `token_ids` must
 * not overlap an input's destination. */
MDR_API mdr_status mdr_graph_cache_step_inputs_device(mdr_graph_cache *c, mdr_dptr token_ids,
                                                      const void *const *values, size_t n_values, size_t tokens,
                                                      size_t sequences);

/* Inputs of the cache, the ids included (1 + the declared ones); 0 for a
 * NULL cache. Reads the cache only. */
MDR_API size_t mdr_graph_cache_step_input_count(const mdr_graph_cache *c);

/* The resolved layout of input `index` (0: the token ids): element size,
 * shape, width, rows, bytes, destination and slot offset, which a binding
 * can present as the step's `decode_meta`. MDR_ERR_OUT_OF_RANGE for an
 * index past the inputs, MDR_ERR_INVALID_ARGUMENT for NULL. The name
 * belongs to the cache. Reads the cache only. */
MDR_API mdr_status mdr_graph_cache_step_input_info(const mdr_graph_cache *c, size_t index,
                                                   mdr_step_input_info *out);

/* The index of the input called `name` ("token_ids": 0).
 * MDR_ERR_OUT_OF_RANGE when there is none, MDR_ERR_INVALID_ARGUMENT for
 * NULL. Reads the cache only. */
MDR_API mdr_status mdr_graph_cache_step_input_find(const mdr_graph_cache *c, const char *name, size_t *index);

/* Bytes of one staging slot (the header, the ids and the host inputs at
 * their largest counts); the ring holds MDR_GRAPH_STAGING_SLOTS of them in
 * pinned memory. 0 for a NULL cache. */
MDR_API size_t mdr_graph_cache_slot_bytes(const mdr_graph_cache *c);

/* Device address of the uint32 holding the current step's real token count
 * (written by every step before the body runs). 0 for a NULL cache. */
MDR_API mdr_dptr mdr_graph_cache_count_ptr(const mdr_graph_cache *c);

/* Device address of the uint32 holding the current step's real sequence
 * count (written by every step before the body runs, next to the token
 * count; a step that gives none has one per token, up to max_sequences).
 * 0 for a NULL cache. */
MDR_API mdr_dptr mdr_graph_cache_sequences_ptr(const mdr_graph_cache *c);

/* The per-sequence rows the graph serving `tokens` holds: min(graph
 * tokens, max_sequences) in EXACT and LADDER (rows past a step's sequences
 * carry each input's pad), max_sequences in DYNAMIC (a bound: exactly the
 * step's rows are copied). Errors as mdr_graph_cache_graph_tokens. */
MDR_API mdr_status mdr_graph_cache_sequence_bound(const mdr_graph_cache *c, size_t tokens, size_t *out);

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
  uint64_t inline_steps;    /* steps whose host ids, inputs and counts travelled in the fused
                               launch's parameters (a graph replay of a small step, host or device
                               ids: docs/GRAPHS.md, "Small steps inline"), not in a staging slot;
                               counted in steps too */
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
