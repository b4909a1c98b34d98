/* mdr example — a tensor-parallel (TP=2) decode loop on two GPUs: mdr's
 * communicator, arenas registered as one symmetric NCCL window each, and a
 * graph cache per rank whose graphs hold the all-reduces. Each step runs
 * eagerly and as one graph replay per GPU; a TP=1 reference with the same
 * weights, unsharded, runs on GPU 0.
 *
 * This file is the engine's side of mdr. main() reads top to bottom as an
 * engine writes it ("the mdr part"): one CUDA backend per GPU; the
 * communicator over both (mdr_comm_create_local); the ranks' arenas, made
 * together (mdr_arena_create_on_comms); then one thread per rank
 * (rank_main): its device, stream and model, a graph cache with the same
 * options as the other rank's, prepare, and one mdr_graph_cache_step per
 * decode step. The ranks make the same calls in the same order (the
 * lockstep contract of include/mdr/comm.h; docs/TP.md).
 *
 * Checks (any failure: exit 1):
 *   (a) every step's logits, graph replay vs eager, bit-identical on each rank;
 *   (b) TP=2 logits within a BF16 tolerance of TP=1 (decode_tp_report.h
 *       says which and why);
 *   (c) both ranks' logits bit-identical (the LM head is replicated).
 *
 * Elsewhere: the model (weights and their slices, cuBLASLt GEMMs, the body
 * with its all-reduces) in decode_tp_model.c, its own kernels in
 * decode_tp_kernels.cu (gather and RMSNorm from decode_kernels.cu), the
 * command line, statistics, table and JSON in decode_tp_report.c.
 *
 * Exit codes: 0 ok, 1 mismatch or failure, 2 bad usage, 77 fewer than two
 * GPUs or no NCCL in this build (CTest skip). */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include <mdr/mdr.h>

#include "decode_tp_model.h"
#include "decode_tp_report.h"

#define MAX_PRINTED_MISMATCHES 10
#define PROGRESS_EVERY 50   /* steps between progress lines */
#define WAIT_LIMIT_S 60.0   /* a stream that makes no progress this long: a peer is stuck */

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* ---- lockstep: the ranks' threads meet here; a failure wakes everyone --------- */

typedef struct lockstep {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int parties, waiting;
  unsigned long generation;
  atomic_int failed; /* set once, by the first thread that fails */
} lockstep;

/* 0 when every party arrived, -1 when the run failed (now or before). */
static int lockstep_wait(lockstep *ls) {
  pthread_mutex_lock(&ls->mu);
  const unsigned long gen = ls->generation;
  if (++ls->waiting == ls->parties) {
    ls->waiting = 0;
    ++ls->generation;
    pthread_cond_broadcast(&ls->cv);
  } else {
    while (gen == ls->generation && !atomic_load(&ls->failed)) pthread_cond_wait(&ls->cv, &ls->mu);
  }
  pthread_mutex_unlock(&ls->mu);
  return atomic_load(&ls->failed) ? -1 : 0;
}

static void lockstep_fail(lockstep *ls) {
  pthread_mutex_lock(&ls->mu);
  atomic_store(&ls->failed, 1);
  pthread_cond_broadcast(&ls->cv);
  pthread_mutex_unlock(&ls->mu);
}

/* ---- one model with its stream, cache and step buffers ------------------------ */

typedef struct engine {
  tp_model m;             /* m.backend, m.arena, m.stream: borrowed from here */
  mdr_stream stream;      /* == m.stream */
  mdr_graph_cache *cache;
  cudaEvent_t ev0, ev1;
  uint32_t *ids_pinned;   /* the eager id upload's source */
  uint16_t *logits;       /* pinned, M x V: the step's graph logits */
  uint16_t *logits_eager; /* pinned, M x V: the step's eager logits */
  atomic_int *failed;     /* the run's failure flag: waits give up when it is set */
} engine;

typedef struct timing {
  double cpu_us, gpu_us;
} timing;

/* Make the model of rank `rank` of a `tp`-way split on `arena`, with its
 * own stream, events and pinned buffers. The calling thread's device must
 * be the arena's. 0 or -1; engine_close either way. */
static int engine_open(engine *e, mdr_backend *b, mdr_arena *arena, int tp, int rank,
                       const tp_host_weights *w, atomic_int *failed) {
  const size_t logits_bytes = (size_t)TP_MAX_TOKENS * TP_VOCAB * sizeof(uint16_t);
  e->failed = failed;
  e->m.backend = b;
  e->m.arena = arena;
  MDR_CHECK_(b, mdr_backend_stream_create(b, &e->stream));
  e->m.stream = (cudaStream_t)e->stream;
  if (tp_model_init(&e->m, w, tp, rank) != 0) goto fail;
  CUDA_OK(cudaEventCreate(&e->ev0));
  CUDA_OK(cudaEventCreate(&e->ev1));
  CUDA_OK(cudaMallocHost((void **)&e->ids_pinned, TP_MAX_TOKENS * sizeof *e->ids_pinned));
  CUDA_OK(cudaMallocHost((void **)&e->logits, logits_bytes));
  CUDA_OK(cudaMallocHost((void **)&e->logits_eager, logits_bytes));
  return 0;
fail:
  return -1;
}

/* Release in reverse order; waits for the stream first (the cache does). */
static void engine_close(engine *e) {
  if (e->stream) (void)cudaStreamSynchronize(e->m.stream);
  mdr_graph_cache_destroy(e->cache);
  if (e->logits_eager) cudaFreeHost(e->logits_eager);
  if (e->logits) cudaFreeHost(e->logits);
  if (e->ids_pinned) cudaFreeHost(e->ids_pinned);
  if (e->ev1) cudaEventDestroy(e->ev1);
  if (e->ev0) cudaEventDestroy(e->ev0);
  tp_model_fini(&e->m);
  if (e->stream) mdr_backend_stream_destroy(e->m.backend, e->stream);
  memset(e, 0, sizeof *e);
}

/* Wait for the engine's stream by polling, so that a rank whose peer never
 * reaches an all-reduce does not wait forever: it gives up (-1) when the
 * run failed elsewhere, or after WAIT_LIMIT_S without finishing. */
static int wait_stream(engine *e) {
  const double t0 = now_us();
  for (;;) {
    cudaError_t q = cudaStreamQuery(e->m.stream);
    if (q == cudaSuccess) return 0;
    if (q == cudaErrorNotReady) {
      (void)cudaGetLastError(); /* "not ready" is no error: leave none behind for later checks */
    } else {
      fprintf(stderr, "decode_tp: %s: stream: %s\n", e->m.name, cudaGetErrorString(q));
      return -1;
    }
    if (atomic_load(e->failed)) return -1;
    if (now_us() - t0 > WAIT_LIMIT_S * 1e6) {
      fprintf(stderr, "decode_tp: %s: the stream made no progress in %.0f s (a peer rank stuck?)\n",
              e->m.name, WAIT_LIMIT_S);
      return -1;
    }
    sched_yield();
  }
}

/* Close a timed step: record ev1, wait, GPU µs from the events. */
static int finish_timing(engine *e, timing *t) {
  CUDA_OK(cudaEventRecord(e->ev1, e->m.stream));
  if (wait_stream(e) != 0) return -1;
  float ms = 0;
  CUDA_OK(cudaEventElapsedTime(&ms, e->ev0, e->ev1));
  t->gpu_us = (double)ms * 1e3;
  return 0;
fail:
  return -1;
}

/* Eager step: what the graph holds, enqueued call by call: zero_all_rows,
 * the id upload, the body (with its all-reduces on NCCL, eagerly). */
static int eager_step(engine *e, const uint32_t *ids, size_t tokens, timing *t) {
  memcpy(e->ids_pinned, ids, tokens * sizeof *ids); /* the previous step has finished */
  CUDA_OK(cudaEventRecord(e->ev0, e->m.stream));
  const double h0 = now_us();
  MDR_CHECK_(e->m.backend, mdr_arena_zero_all_rows(e->m.arena, e->stream, tokens));
  CUDA_OK(cudaMemcpyAsync(tp_arena_ptr(&e->m, MDR_BUF_TOKEN_IDS), e->ids_pinned, tokens * sizeof *ids,
                          cudaMemcpyHostToDevice, e->m.stream));
  MDR_CHECK_(e->m.backend, tp_body(&e->m, e->stream, tokens));
  t->cpu_us = now_us() - h0;
  return finish_timing(e, t);
fail:
  return -1;
}

/* Graph step: what an engine's loop calls once per decode step. */
static int graph_step(engine *e, const uint32_t *ids, size_t tokens, timing *t) {
  CUDA_OK(cudaEventRecord(e->ev0, e->m.stream));
  const double h0 = now_us();
  mdr_status st = mdr_graph_cache_step(e->cache, ids, tokens);
  t->cpu_us = now_us() - h0;
  if (st == MDR_ERR_CAPTURE) {
    /* The cache ran this step eagerly (the same collectives); its work is enqueued. */
    fprintf(stderr, "decode_tp: %s: warning: capture for %zu tokens failed, ran eagerly (%s)\n",
            e->m.name, tokens, mdr_backend_last_error(e->m.backend));
  } else {
    MDR_CHECK_(e->m.backend, st);
  }
  return finish_timing(e, t);
fail:
  return -1;
}

static int read_logits(engine *e, uint16_t *host, size_t tokens) {
  CUDA_OK(cudaMemcpyAsync(host, tp_arena_ptr(&e->m, MDR_BUF_LOGITS), tokens * TP_VOCAB * sizeof *host,
                          cudaMemcpyDeviceToHost, e->m.stream));
  return wait_stream(e);
fail:
  return -1;
}

/* Capture every count 1..M, one prepare per count, keeping each count's
 * capture µs (the growth of mdr_graph_stats.capture_us). */
static int prepare_every_count(engine *e, double capture_us[TP_MAX_TOKENS]) {
  for (size_t t = 1; t <= TP_MAX_TOKENS; ++t) {
    mdr_graph_stats before, after;
    MDR_CHECK_(e->m.backend, mdr_graph_cache_stats(e->cache, &before));
    MDR_CHECK_(e->m.backend, mdr_graph_cache_prepare(e->cache, &t, 1));
    MDR_CHECK_(e->m.backend, mdr_graph_cache_stats(e->cache, &after));
    capture_us[t - 1] = after.capture_us - before.capture_us;
  }
  return wait_stream(e);
fail:
  return -1;
}

/* ---- the run: shared state and the token schedule ----------------------------- */

typedef struct rank_ctx rank_ctx;

typedef struct run {
  const options *opt;
  const tp_host_weights *w;
  lockstep ls;
  tp_report *rep;
  rank_ctx *ranks; /* [TP_RANKS] */
} run;

struct rank_ctx {
  run *run;
  int rank;                /* also its CUDA device */
  mdr_backend *backend;    /* borrowed (main made it) */
  mdr_comm *comm;          /* owned once the thread runs: it destroys it, then sets NULL */
  mdr_arena *arena;        /* the same: on the communicator */
  mdr_arena *arena_tp1;    /* borrowed, rank 0 only: the TP=1 reference's */
  const uint16_t *logits, *logits_eager; /* this rank's step logits, for rank 0's check (c) */
  bool ok;
};

/* Token counts: a bucket first, then a count inside it; the same sequence
 * on every rank (same seed), so both ranks step with the same counts. */
static size_t pick_tokens(uint64_t *rng) {
  int b = (int)(ex_splitmix64(rng) % BUCKET_COUNT);
  size_t lo = bucket_lo[b], hi = bucket_hi[b] < TP_MAX_TOKENS ? bucket_hi[b] : TP_MAX_TOKENS;
  if (lo > hi) lo = hi;
  return lo + (size_t)(ex_splitmix64(rng) % (hi - lo + 1));
}

static void fill_ids(uint64_t *rng, uint32_t *ids, size_t tokens) {
  for (size_t i = 0; i < tokens; ++i) ids[i] = (uint32_t)(ex_splitmix64(rng) % TP_VOCAB);
}

/* Warm-up: one eager step per token count 1..M on every rank (each GEMM
 * shape's kernels loaded, and every all-reduce size run once by NCCL, which
 * connects lazily) before the first capture and before timing. */
static int warm_up(engine *e, uint64_t seed) {
  uint32_t ids[TP_MAX_TOKENS];
  uint64_t rng = seed ^ 0x77a4b1d5ull;
  for (size_t t = 1; t <= TP_MAX_TOKENS; ++t) {
    timing tm;
    fill_ids(&rng, ids, t);
    if (eager_step(e, ids, t, &tm) != 0) return -1;
  }
  return 0;
}

/* ---- one rank's loop ----------------------------------------------------------- */

/* Every step, on both ranks in lockstep: eager and graph (alternating which
 * goes first), each started together and timed, logits read back; then
 * (a) on each rank; then rank 0 checks (c) against rank 1's host copy and
 * runs the TP=1 step for (b) while rank 1 waits at the next step. */
static int run_steps(rank_ctx *r, engine *tp2, engine *tp1) {
  run *R = r->run;
  tp_report *rep = R->rep;
  tp_checks *ck = &rep->checks;
  const bool lead = r->rank == 0;
  const int me = lead ? RUN_TP2_R0 : RUN_TP2_R1;
  const size_t V = TP_VOCAB;
  uint64_t rng = R->opt->seed; /* the schedule: the same on every rank */
  uint32_t ids[TP_MAX_TOKENS];
  size_t printed = 0;
  for (size_t step = 0; step < rep->steps; ++step) {
    const size_t t = pick_tokens(&rng);
    fill_ids(&rng, ids, t);
    timing te = {0, 0}, tg = {0, 0};
    const bool eager_first = step % 2 == 0;
    for (int k = 0; k < 2; ++k) {
      if (lockstep_wait(&R->ls) != 0) return -1; /* both ranks start the timed step together */
      if ((k == 0) == eager_first) {
        if (eager_step(tp2, ids, t, &te) || read_logits(tp2, tp2->logits_eager, t)) return -1;
      } else {
        if (graph_step(tp2, ids, t, &tg) || read_logits(tp2, tp2->logits, t)) return -1;
      }
    }
    if (lockstep_wait(&R->ls) != 0) return -1; /* every rank's logits of this step are on the host */

    size_t first, diffs = count_diffs(tp2->logits_eager, tp2->logits, t * V, &first); /* (a) */
    if (diffs) {
      ++ck->eager_mismatched[r->rank];
      if (printed++ < MAX_PRINTED_MISMATCHES)
        printf("MISMATCH (a) %s step %zu (%zu tokens): %zu of %zu logits differ, graph vs eager; first "
               "at row %zu col %zu: eager 0x%04x graph 0x%04x\n",
               tp2->m.name, step, t, diffs, t * V, first / V, first % V, tp2->logits_eager[first],
               tp2->logits[first]);
    }
    if (lead) {
      const rank_ctx *peer = &R->ranks[1];
      size_t dg = count_diffs(tp2->logits, peer->logits, t * V, &first); /* (c) */
      size_t de = count_diffs(tp2->logits_eager, peer->logits_eager, t * V, &first);
      if (dg || de) {
        ++ck->rank_mismatched;
        if (printed++ < MAX_PRINTED_MISMATCHES)
          printf("MISMATCH (c) step %zu (%zu tokens): rank 0 vs rank 1 differ in %zu graph and %zu eager "
                 "logits\n",
                 step, t, dg, de);
      }
      timing t1;
      if (graph_step(tp1, ids, t, &t1) || read_logits(tp1, tp1->logits, t)) return -1;
      double rel, absr;
      compare_rows(tp2->logits, tp1->logits, t, V, &rel, &absr); /* (b) */
      if (rel > ck->worst_rel_l2) ck->worst_rel_l2 = rel;
      if (absr > ck->worst_abs_over_rms) ck->worst_abs_over_rms = absr;
      if (!(rel <= TOL_REL_L2 && absr <= TOL_ABS_OVER_RMS)) {
        ++ck->tol_failed;
        if (printed++ < MAX_PRINTED_MISMATCHES)
          printf("OUT OF TOLERANCE (b) step %zu (%zu tokens): TP=2 vs TP=1 relative L2 %.5f (limit %.5f), "
                 "max |diff| / rms %.4f (limit %.4f)\n",
                 step, t, rel, TOL_REL_L2, absr, TOL_ABS_OVER_RMS);
      }
      rep->samples[RUN_TP1][SERIES_GRAPH_GPU][step] = t1.gpu_us;
      rep->samples[RUN_TP1][SERIES_GRAPH_CPU][step] = t1.cpu_us;
      rep->bucket[step] = bucket_of(t);
    }
    rep->samples[me][SERIES_GRAPH_GPU][step] = tg.gpu_us;
    rep->samples[me][SERIES_GRAPH_CPU][step] = tg.cpu_us;
    rep->samples[me][SERIES_EAGER_GPU][step] = te.gpu_us;
    rep->samples[me][SERIES_EAGER_CPU][step] = te.cpu_us;
    if (lead && ((step + 1) % PROGRESS_EVERY == 0 || step + 1 == rep->steps)) {
      printf("step %zu/%zu: mismatched steps (a) %zu + %zu, (c) %zu; out of tolerance (b) %zu; worst "
             "relative L2 vs TP=1 %.5f\n",
             step + 1, rep->steps, ck->eager_mismatched[0], ck->eager_mismatched[1], ck->rank_mismatched,
             ck->tol_failed, ck->worst_rel_l2);
      fflush(stdout);
    }
  }
  return 0;
}

/* One rank: its GPU, its stream, its model and graph cache, then the loop.
 * Rank 0 also owns the TP=1 reference on the same GPU. */
static void *rank_main(void *arg) {
  rank_ctx *r = arg;
  run *R = r->run;
  const bool lead = r->rank == 0;
  engine tp2, tp1;
  memset(&tp2, 0, sizeof tp2);
  memset(&tp1, 0, sizeof tp1);

  /* This thread's device, before any CUDA call of its own: the model's
   * cudaMalloc, cuBLASLt handle, kernels, events and pinned copies all go
   * to the rank's GPU. (mdr's calls switch to their backend's device.) */
  CUDA_OK(cudaSetDevice(r->rank));
  if (engine_open(&tp2, r->backend, r->arena, TP_RANKS, r->rank, R->w, &R->ls.failed) != 0) goto fail;
  if (lead && engine_open(&tp1, r->backend, r->arena_tp1, 1, 0, R->w, &R->ls.failed) != 0) goto fail;
  r->logits = tp2.logits;
  r->logits_eager = tp2.logits_eager;
  if (warm_up(&tp2, R->opt->seed) != 0 || (lead && warm_up(&tp1, R->opt->seed) != 0)) goto fail;
  if (lockstep_wait(&R->ls) != 0) goto fail;

  /* ---- the mdr part, per rank ----------------------------------------------
   * The graph cache: one graph per token count of zeroing + id upload + the
   * body (the layers, with the all-reduces). The options must be the same
   * on every rank (mdr compares them at create): EXACT, fused zeroing,
   * logits cleared for the step's rows only. */
  mdr_graph_cache_options go;
  mdr_graph_cache_options_default(&go);
  go.mode = MDR_GRAPH_EXACT;
  go.zero = MDR_ZERO_FUSED;
  go.rows = MDR_ROWS_ALL;
  go.body = tp_body;
  go.user = &tp2.m;
  MDR_CHECK_(r->backend, mdr_graph_cache_create(r->arena, tp2.stream, &go, &tp2.cache));
  if (lead) { /* the reference's cache: the same options, its own arena */
    go.user = &tp1.m;
    MDR_CHECK_(r->backend, mdr_graph_cache_create(r->arena_tp1, tp1.stream, &go, &tp1.cache));
  }

  /* Prepare: every count 1..M captured up front, the same counts in the
   * same order on both ranks (a capture records the all-reduces; nothing
   * runs), so that steps only replay. */
  if (prepare_every_count(&tp2, R->rep->capture_us[lead ? RUN_TP2_R0 : RUN_TP2_R1]) != 0) goto fail;
  if (lead && prepare_every_count(&tp1, R->rep->capture_us[RUN_TP1]) != 0) goto fail;

  /* The decode loop: one mdr_graph_cache_step per step per GPU. */
  if (run_steps(r, &tp2, lead ? &tp1 : NULL) != 0) goto fail;
  /* ---- end of the mdr part, per rank ------------------------------------------ */

  MDR_CHECK_(r->backend, mdr_graph_cache_stats(tp2.cache, &R->rep->stats[lead ? RUN_TP2_R0 : RUN_TP2_R1]));
  if (lead) MDR_CHECK_(r->backend, mdr_graph_cache_stats(tp1.cache, &R->rep->stats[RUN_TP1]));
  /* Every rank's work on the communicator has finished before any tears down. */
  if (lockstep_wait(&R->ls) != 0) goto fail;
  r->ok = true;
fail:
  if (!r->ok) {
    fprintf(stderr, "decode_tp: rank %d failed; aborting its communicator\n", r->rank);
    lockstep_fail(&R->ls);   /* the other rank stops at its next wait */
    mdr_comm_abort(r->comm); /* ends this rank's pending NCCL work; no collective teardown */
  }
  /* Teardown by the rank's own thread, concurrently with the other rank's
   * (NCCL's may wait for every rank): the graphs first (they hold the
   * communicator's kernels), then the arena (its window), then the
   * communicator. */
  engine_close(&tp1);
  engine_close(&tp2);
  mdr_arena_destroy(r->arena);
  r->arena = NULL;
  mdr_comm_destroy(r->comm);
  r->comm = NULL;
  return NULL;
}

/* ---- main ------------------------------------------------------------------------ */

int main(int argc, char **argv) {
  /* NVLink multicast (NVLS) stays off: on the shared GPU machines it must
   * not be used (mdr never asks for it; NCCL would by default). Set before
   * the first NCCL call, which reads it at communicator init. */
  if (setenv("NCCL_NVLS_ENABLE", "0", 1) != 0) {
    perror("decode_tp: setenv NCCL_NVLS_ENABLE");
    return EXIT_FAIL;
  }
  options opt;
  if (parse_options(argc, argv, &opt) != 0) return EXIT_USAGE;

  if (!mdr_comm_nccl_available()) {
    printf("decode_tp: this build of mdr has no NCCL (MDR_ENABLE_NCCL); skipping\n");
    return EXIT_SKIP;
  }
  int devices = 0;
  cudaError_t de = cudaGetDeviceCount(&devices);
  if (de != cudaSuccess || devices < TP_RANKS) {
    printf("decode_tp: needs %d CUDA GPUs, found %d (%s); skipping\n", TP_RANKS,
           de == cudaSuccess ? devices : 0, de != cudaSuccess ? cudaGetErrorString(de) : "too few");
    return EXIT_SKIP;
  }

  int rc = EXIT_FAIL;
  mdr_backend *backends[TP_RANKS] = {NULL};
  mdr_comm *comms[TP_RANKS] = {NULL};
  mdr_arena *arenas[TP_RANKS] = {NULL}, *arena_tp1 = NULL;
  tp_host_weights w;
  tp_report rep;
  rank_ctx ranks[TP_RANKS];
  run R;
  pthread_t threads[TP_RANKS];
  int started = 0;
  double *scratch = NULL;
  memset(&w, 0, sizeof w);
  memset(&rep, 0, sizeof rep);
  memset(ranks, 0, sizeof ranks);
  memset(&R, 0, sizeof R);
  pthread_mutex_init(&R.ls.mu, NULL);
  pthread_cond_init(&R.ls.cv, NULL);
  atomic_init(&R.ls.failed, 0);
  R.ls.parties = TP_RANKS;

  /* ---- the mdr part: what an engine writes -----------------------------------
   * One CUDA backend per GPU: rank i on device i. */
  for (int i = 0; i < TP_RANKS; ++i) {
    mdr_status st = mdr_backend_cuda_create(i, &backends[i]);
    if (st == MDR_ERR_NO_DEVICE) {
      printf("decode_tp: no CUDA device %d (mdr: %s); skipping\n", i, mdr_status_string(st));
      rc = EXIT_SKIP;
      goto fail;
    }
    MDR_CHECK_(backends[i], st);
  }

  /* The communicator: mdr creates NCCL's over both GPUs in one call
   * (ncclCommInitAll); comms[i] is rank i, on backends[i]. */
  MDR_CHECK_(backends[0], mdr_comm_create_local(backends, TP_RANKS, comms));

  /* The arenas, made together: the same sizes on every rank (mdr compares
   * the layouts), each slab registered once, whole, as a symmetric NCCL
   * window. The all-reduce works in place on their buffers. */
  mdr_sizes sizes;
  tp_sizes(TP_RANKS, &sizes);
  MDR_CHECK_(backends[0], mdr_arena_create_on_comms(comms, TP_RANKS, &sizes, arenas));
  for (int i = 0; i < TP_RANKS; ++i) { /* the eager path zeroes as the graphs do */
    MDR_CHECK_(backends[i], mdr_arena_set_zero_strategy(arenas[i], MDR_ZERO_FUSED));
    MDR_CHECK_(backends[i], mdr_arena_set_rows_policy(arenas[i], MDR_ROWS_ALL));
  }

  /* The TP=1 reference: the same weights unsharded on GPU 0, in an arena of
   * its own (no communicator). */
  tp_sizes(1, &sizes);
  MDR_CHECK_(backends[0], mdr_arena_create(backends[0], &sizes, &arena_tp1));
  MDR_CHECK_(backends[0], mdr_arena_set_zero_strategy(arena_tp1, MDR_ZERO_FUSED));
  MDR_CHECK_(backends[0], mdr_arena_set_rows_policy(arena_tp1, MDR_ROWS_ALL));
  rep.window = mdr_window_name(mdr_arena_window(arenas[0]));
  printf("decode_tp: TP=%d over GPUs 0-%d, NCCL communicator via mdr; arenas %.1f MiB per rank "
         "(window: %s), TP=1 arena %.1f MiB on GPU 0\n",
         TP_RANKS, TP_RANKS - 1, (double)mdr_arena_slab_bytes(arenas[0]) / 1048576.0, rep.window,
         (double)mdr_arena_slab_bytes(arena_tp1) / 1048576.0);
  printf("decode_tp: model: %d layers, H %d, qkv %d, ffn %d, V %d, M %d; per rank qkv %d, ffn %d; "
         "%d all-reduces per step (BF16, in place)\n",
         TP_LAYERS, TP_HIDDEN, TP_QKV, TP_FFN, TP_VOCAB, TP_MAX_TOKENS, TP_QKV / TP_RANKS,
         TP_FFN / TP_RANKS, 2 * TP_LAYERS);

  /* (the engine's weights, made once on the host; each rank uploads its slices) */
  if (tp_host_weights_make(&w, opt.seed) != 0 || report_alloc(&rep, opt.steps) != 0) goto fail;
  rep.seed = opt.seed;
  R.opt = &opt;
  R.w = &w;
  R.rep = &rep;
  R.ranks = ranks;

  /* One thread per rank, each with its own stream, model and graph cache
   * (rank_main); they make the same mdr calls in the same order. */
  for (int i = 0; i < TP_RANKS; ++i) { /* each rank's arena and communicator go to its thread */
    ranks[i] = (rank_ctx){.run = &R, .rank = i, .backend = backends[i], .comm = comms[i],
                          .arena = arenas[i], .arena_tp1 = i == 0 ? arena_tp1 : NULL};
    comms[i] = NULL;
    arenas[i] = NULL;
  }
  for (int i = 0; i < TP_RANKS; ++i) {
    if (pthread_create(&threads[i], NULL, rank_main, &ranks[i]) != 0) {
      fprintf(stderr, "decode_tp: cannot start the thread of rank %d\n", i);
      lockstep_fail(&R.ls);
      break;
    }
    ++started;
  }
  for (int i = 0; i < started; ++i) pthread_join(threads[i], NULL);
  /* ---- end of the mdr part -------------------------------------------------- */

  bool all_ok = started == TP_RANKS;
  for (int i = 0; i < TP_RANKS; ++i) all_ok = all_ok && ranks[i].ok;
  if (!all_ok) {
    printf("FAIL: a rank failed (messages above)\n");
    goto fail;
  }

  /* Report and verdict. */
  scratch = malloc(opt.steps * sizeof *scratch);
  if (!scratch) goto fail;
  print_report(&rep, scratch);
  if (opt.json && write_json(opt.json, &rep, scratch) != 0) goto fail;

  const tp_checks *ck = &rep.checks;
  /* (a) compares graph replays with eager steps only if every step replayed */
  bool replays = true, disabled = false;
  for (int run_i = 0; run_i < RUN_COUNT; ++run_i) {
    const mdr_graph_stats *s = &rep.stats[run_i];
    disabled = disabled || s->graphs_disabled;
    if (!s->graphs_disabled && (s->steps != opt.steps || s->hits != s->steps || s->eager_steps != 0))
      replays = false;
  }
  if (disabled) printf("NOTE: MDR_DISABLE_GRAPHS is set: the graph path ran eagerly\n");
  printf("\nchecks over %zu steps:\n", opt.steps);
  printf("  (a) graph replay vs eager, bit for bit: rank 0 %zu, rank 1 %zu mismatched steps\n",
         ck->eager_mismatched[0], ck->eager_mismatched[1]);
  printf("  (b) TP=2 vs TP=1: worst relative L2 %.5f (limit %.5f = 8 BF16 unit roundoffs), worst "
         "max|diff|/rms %.4f (limit %.4f); %zu steps out of tolerance\n"
         "      (TP=2 rounds each rank's partial sum and their sum to BF16: ~2 roundoffs expected)\n",
         ck->worst_rel_l2, TOL_REL_L2, ck->worst_abs_over_rms, TOL_ABS_OVER_RMS, ck->tol_failed);
  printf("  (c) rank 0 vs rank 1, bit for bit: %zu mismatched steps\n", ck->rank_mismatched);
  printf("  every step one graph replay per GPU: %s\n",
         disabled ? "n/a (graphs disabled)" : replays ? "yes" : "NO");
  if (ck->eager_mismatched[0] || ck->eager_mismatched[1] || ck->rank_mismatched || ck->tol_failed ||
      !replays) {
    printf("FAIL\n");
  } else {
    printf("OK: %zu steps; graph == eager on both ranks, rank 0 == rank 1, TP=2 within tolerance of "
           "TP=1\n",
           opt.steps);
    rc = 0;
  }

fail:
  /* Every resource, in reverse order; each release accepts "never made".
   * The threads that ran have destroyed their caches, streams, arenas and
   * communicators. What is left here never ran a collective (or its run
   * failed): aborted, not destroyed collectively, so that one thread can
   * release every rank's. */
  free(scratch);
  report_free(&rep);
  tp_host_weights_free(&w);
  mdr_arena_destroy(arena_tp1);
  for (int i = 0; i < TP_RANKS; ++i) {
    mdr_arena_destroy(arenas[i]); /* before their communicators */
    mdr_arena_destroy(ranks[i].arena);
  }
  for (int i = 0; i < TP_RANKS; ++i) {
    mdr_comm_abort(comms[i]);
    mdr_comm_destroy(comms[i]);
    mdr_comm_abort(ranks[i].comm);
    mdr_comm_destroy(ranks[i].comm);
  }
  for (int i = 0; i < TP_RANKS; ++i) mdr_backend_destroy(backends[i]);
  pthread_cond_destroy(&R.ls.cv);
  pthread_mutex_destroy(&R.ls.mu);
  return rc;
}
