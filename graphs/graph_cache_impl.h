/* graph_cache_impl.h — the graph cache's private state (graphs/
 * graph_cache.c: capture, caching, steps; graphs/step_inputs.c: the step
 * inputs' declaration, their step calls and layout queries). */
#ifndef MDR_GRAPH_CACHE_IMPL_H
#define MDR_GRAPH_CACHE_IMPL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "arena_impl.h"
#include "mdr/graph.h"
#include "staging.h"

typedef struct graph_entry {
  void *exec;         /* NULL: not cached */
  uint64_t last_used; /* LRU tick */
  int eager_only;     /* its capture failed in a step: run eagerly until a prepare retries it */
  mdr_dptr ids_src;   /* device steps: the ids address the graph was captured with */
  uint64_t bytes;     /* device memory the graph took (measured at instantiate + upload) */
  size_t nodes;       /* nodes of its graph */
  /* An inline count (captured with its slot image in the fused launch's
   * parameters): that launch as made, whose image each step rewrites before
   * the node update; the node; and the captured graph, kept since the node
   * handle names a node of it. NULL for a ring count. */
  mdr_stage_inline_launch *inl;
  void *inl_node;
  void *inl_graph;
} graph_entry;

/* Where a step's ids come from. IDS_DEVICE_COUNTED: device ids whose step
 * gives a sequence count its IDS_DEVICE graph cannot carry (an EXACT cache
 * without step inputs, whose device launch publishes the count's default,
 * reads no slot): the counts come from the slot header, in graphs of their
 * own. */
typedef enum ids_kind { IDS_HOST, IDS_DEVICE, IDS_DEVICE_COUNTED, IDS_KINDS } ids_kind;

typedef struct step_ids {
  ids_kind kind;
  mdr_dptr src; /* device kinds: the ids' device address (token_ids or 0: in place) */
} step_ids;

/* What a step call carries: its counts and its host values. */
typedef struct step_call {
  const uint32_t *host_ids;  /* IDS_HOST */
  const void *const *values; /* values[1 + i]: input i's host values; NULL: no inputs given */
  size_t tokens, sequences;
} step_call;

/* The graphs of one kind of step. */
typedef struct graph_set {
  graph_entry *entries; /* indexed by graph token count, 0 .. max_tokens */
  /* DYNAMIC with NODE_UPDATE: the captured graph (kept: the node handle
   * names a node of it) and the fused node the capture reported. */
  void *dyn_graph;
  void *dyn_node;
  size_t dyn_tokens; /* the counts the exec's fused node holds now */
  size_t dyn_sequences;
} graph_set;

struct mdr_graph_cache {
  mdr_arena *arena;
  mdr_backend *b;
  mdr_stream stream;
  mdr_graph_cache_options o; /* zero and rows resolved (never *_FROM_ARENA) */
  size_t max_tokens;
  size_t *ladder;
  size_t ladder_len;
  int graphs_disabled;
  int poison; /* fill what a static step does not zero with 0xFF (NaN) */
  _Atomic uintptr_t owner; /* the thread inside step or prepare (tls_self's address), or 0 */
  int measure_memory, count_nodes; /* the backend can tell */
  int inline_route; /* small host steps of EXACT/LADDER counts carry their slot in the launch's parameters */
  int spread;       /* static ring launches may read a large slot with several stage blocks */

  mdr_staging staging;
  size_t max_sequences;
  size_t n_inputs, n_host_inputs, n_seq_inputs;
  mdr_step_input_info inputs[1 + MDR_STEP_INPUTS_MAX]; /* [0]: the ids */
  char *names;                                         /* the inputs' names, one block */
  mdr_dptr ids_checked;       /* device steps: the last ids address found clear (mdr_gc_check_device_ids) */
  size_t ids_checked_tokens;  /* ... for up to this many ids */

  graph_set sets[IDS_KINDS];
  /* zero_all_rows as rules under the cache's row policy, resolved at
   * create; every launch evaluates them at its own count. */
  mdr_zero_seg rules[MDR_ZERO_PLAN_MAX];
  size_t n_rules;
  mdr_dptr table; /* NODE_UPDATE: the plan table of rules at counts 1..max_tokens */
  mdr_dptr inline_table;   /* the inline route (fused zeroing): the plan table at counts 1..inline_table_max */
  size_t inline_table_max; /* 0: none */
  uint64_t tick;
  mdr_graph_stats stats;
};

/* Resolve the options' step inputs into c->inputs and the ring's layout
 * (at create, before the ring is set up); a refusal names the input and
 * the field. */
mdr_status mdr_gc_setup_inputs(mdr_graph_cache *c, const mdr_graph_cache_options *o);
/* A device step's ids at `src` (t of them, not the arena's token_ids) are
 * read by the launch that clears the zero plan and writes token_ids and
 * the inputs, in no set order: refused (MDR_ERR_INVALID_ARGUMENT, the text
 * says what they overlap) when they share a byte with any of those. An
 * address found clear is remembered with its count. Called with the
 * cache entered. */
mdr_status mdr_gc_check_device_ids(mdr_graph_cache *c, mdr_dptr src, size_t t);
/* One step: checks, the thread guard, then the replay, capture or eager
 * run of `call`. */
mdr_status mdr_gc_step(mdr_graph_cache *c, const step_call *call, step_ids ids);
/* The ids of a device step (token_ids itself when the address is 0 or the
 * arena's token_ids). */
step_ids mdr_gc_device_ids(const mdr_graph_cache *c, mdr_dptr token_ids);
/* The sequences of a step that does not say: one per token, up to
 * max_sequences. */
size_t mdr_gc_default_sequences(const mdr_graph_cache *c, size_t tokens);
/* Whether an IDS_DEVICE step publishes the sequence count it is given (from
 * the slot header, or DYNAMIC's node update): else its launch publishes
 * the count's default, and a step with another takes IDS_DEVICE_COUNTED. */
int mdr_gc_device_carries_sequences(const mdr_graph_cache *c);

#endif
