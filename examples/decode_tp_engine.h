/* mdr example — the TP decode loop's engine: one model (decode_tp_model.h)
 * with its own stream, events and pinned buffers, and per all-reduce
 * variant its graph cache and host logits; the eager and the graph step
 * of a variant, timed; the read-back of the logits. decode_tp.c drives
 * two of them (the ranks) and a TP=1 reference. Every function returns 0
 * or -1 after printing what failed; a wait gives up when the run's failure
 * flag is set. */
#ifndef MDR_EXAMPLE_DECODE_TP_ENGINE_H
#define MDR_EXAMPLE_DECODE_TP_ENGINE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include <mdr/mdr.h>

#include "decode_tp_model.h"
#include "decode_tp_report.h"


/* One way of running a rank's step (a variant): the body's user (the
 * all-reduce choice), its graph cache and the step's logits on the host. */
typedef struct vpath {
  bool on;
  bool dynamic;           /* a DYNAMIC cache (tp_body_dynamic); no eager path */
  tp_body_user u;         /* u.m: the engine's model */
  mdr_graph_cache *cache;
  uint16_t *logits;       /* pinned, M x V: the step's graph logits */
  uint16_t *logits_eager; /* pinned, M x V: the step's eager logits (NULL: no eager path) */
} vpath;

typedef struct engine {
  tp_model m;             /* m.backend, m.arena, m.stream: borrowed from here */
  mdr_stream stream;      /* == m.stream; every cache of the engine steps on it, in turn */
  cudaEvent_t ev0, ev1;
  uint32_t *ids_pinned;   /* the eager id upload's source */
  atomic_int *failed;     /* the run's failure flag: waits give up when it is set */
  char name[48];          /* the model's name: "tp2 rank 0", "tp1" */
  vpath v[VAR_COUNT];     /* TP=1: v[VAR_NCCL] only (it has no all-reduce) */
} engine;

typedef struct timing {
  double cpu_us, gpu_us;
} timing;

/* Make the model of rank `rank` of a `tp`-way split on `arena`, with its
 * own stream, events and pinned buffers. The calling thread's device must
 * be the arena's. 0 or -1; engine_close either way. */
int engine_open(engine *e, mdr_backend *b, mdr_arena *arena, int tp, int rank, const tp_host_weights *w,
                atomic_int *failed, bool one_algo_per_gemm);
/* Variant `vi` of the engine: its body's user and host logits (no cache yet). */
int path_open(engine *e, int vi, mdr_all_reduce_algo algo, bool fuse_residual, bool dynamic);
/* Release in reverse order; waits for the stream first (the caches do). */
void engine_close(engine *e);
/* Eager step of variant p (what its graphs hold, call by call), timed. */
int eager_step(engine *e, vpath *p, const uint32_t *ids, size_t tokens, timing *t);
/* Graph step of variant p: what an engine's loop calls once per decode step, timed. */
int graph_step(engine *e, vpath *p, const uint32_t *ids, size_t tokens, timing *t);
/* The step's logits (tokens rows) into host, waiting for the stream. */
int read_logits(engine *e, uint16_t *host, size_t tokens);
/* The graph cache of variant p on the engine's arena and stream. */
int path_cache(engine *e, vpath *p);
/* Capture every count 1..M (DYNAMIC: its one graph), keeping each count's capture µs. */
int prepare_every_count(engine *e, vpath *p, double capture_us[TP_MAX_TOKENS]);

#endif
