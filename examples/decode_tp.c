/* mdr example — a tensor-parallel (TP=2) decode loop on two GPUs: mdr's
 * communicator, arenas registered as one symmetric NCCL window each, and
 * graph caches per rank whose graphs hold the all-reduces. Each step runs
 * eagerly and as one graph replay per GPU, once per all-reduce variant
 * (NCCL's kernel, and mdr's own kernels with the residual add fused; with
 * --dynamic also one DYNAMIC graph); a TP=1 reference with the same
 * weights, unsharded, runs on GPU 0.
 *
 * This file is the engine's side of mdr. main() reads top to bottom as an
 * engine writes it ("the mdr part"): one CUDA backend per GPU; the
 * communicator over both (mdr_comm_create_local); the ranks' arenas, made
 * together (mdr_arena_create_on_comms); which all-reduce variants can run
 * there (mdr_all_reduce_kernels); then one thread per rank
 * (rank_main): its device, stream and model, one graph cache per variant
 * with the same options as the other rank's, prepare, and one
 * mdr_graph_cache_step per decode step and variant. The ranks make the
 * same calls in the same order (the lockstep contract of
 * include/mdr/comm.h; docs/TP.md).
 *
 * Checks, per variant (any failure: exit 1):
 *   (a) every step's logits, graph replay vs eager, bit-identical on each rank;
 *   (b) TP=2 logits within a BF16 tolerance of TP=1 (decode_tp_report.h
 *       says which and why);
 *   (c) both ranks' logits bit-identical (the LM head is replicated);
 *   (d) the mdr variant's logits (graph and eager) bit-identical to the
 *       nccl variant's on each rank: for two ranks both round one F32
 *       addition per element to BF16, and the fused residual add rounds
 *       h + sum as the separate kernel does;
 *   (e) --dynamic: the DYNAMIC graph's logits bit-identical to its EXACT
 *       twin's (the same all-reduce choice).
 *
 * Elsewhere: the engine (a model with its stream, a graph cache per
 * variant, the timed eager and graph steps) in decode_tp_engine.c, the
 * model (weights and their slices, cuBLASLt GEMMs, the bodies with their
 * all-reduces) in decode_tp_model.c, its own kernels in
 * decode_tp_kernels.cu (gather and RMSNorm from decode_kernels.cu), the
 * command line, statistics, tables and JSON in decode_tp_report.c.
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
#include "decode_tp_engine.h"

#define MAX_PRINTED_MISMATCHES 10
#define PROGRESS_EVERY 50   /* steps between progress lines */
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
  /* this rank's step logits per variant, for rank 0's check (c) */
  const uint16_t *logits[VAR_COUNT], *logits_eager[VAR_COUNT];
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

/* Warm-up: one eager step per token count 1..M and variant on every rank
 * (each GEMM shape's kernels loaded, and every all-reduce size run once by
 * each algorithm: NCCL connects lazily) before the first capture and before
 * timing. The DYNAMIC variant has no eager path; its kernels are the EXACT
 * twin's. */
static int warm_up(engine *e, uint64_t seed) {
  for (int vi = 0; vi < VAR_COUNT; ++vi) {
    vpath *p = &e->v[vi];
    if (!p->on || p->dynamic) continue;
    uint32_t ids[TP_MAX_TOKENS];
    uint64_t rng = seed ^ 0x77a4b1d5ull;
    for (size_t t = 1; t <= TP_MAX_TOKENS; ++t) {
      timing tm;
      fill_ids(&rng, ids, t);
      if (eager_step(e, p, ids, t, &tm) != 0) return -1;
    }
  }
  return 0;
}

/* ---- one rank's loop ----------------------------------------------------------- */

/* One timed run of a step: variant vi, eager or graph. */
typedef struct item {
  int vi;
  bool eager;
} item;

/* Count differing logits of a step; print the first few mismatches. */
static bool differ(const uint16_t *want, const uint16_t *got, size_t t, size_t *printed, const char *what,
                   const char *who, size_t step) {
  const size_t V = TP_VOCAB;
  size_t first, diffs = count_diffs(want, got, t * V, &first);
  if (diffs && (*printed)++ < MAX_PRINTED_MISMATCHES)
    printf("MISMATCH %s %s step %zu (%zu tokens): %zu of %zu logits differ; first at row %zu col %zu: "
           "0x%04x vs 0x%04x\n",
           what, who, step, t, diffs, t * V, first / V, first % V, want[first], got[first]);
  return diffs != 0;
}

/* Every step, on both ranks in lockstep: each variant's eager and graph
 * runs (the order rotated and reversed step by step), each started
 * together and timed, logits read back; then (a), (d) and (e) on each
 * rank; then rank 0 checks (c) against rank 1's host copies and runs the
 * TP=1 step for (b) while rank 1 waits at the next step. */
static int run_steps(rank_ctx *r, engine *tp2, engine *tp1) {
  run *R = r->run;
  tp_report *rep = R->rep;
  const bool lead = r->rank == 0;
  const int me = r->rank;
  const size_t V = TP_VOCAB;
  uint64_t rng = R->opt->seed; /* the schedule: the same on every rank */
  uint32_t ids[TP_MAX_TOKENS];
  size_t printed = 0;
  item items[2 * VAR_COUNT];
  int n = 0;
  for (int vi = 0; vi < VAR_COUNT; ++vi) {
    if (!tp2->v[vi].on) continue;
    if (!tp2->v[vi].dynamic) items[n++] = (item){vi, true};
    items[n++] = (item){vi, false};
  }
  const vpath *nccl = tp2->v[VAR_NCCL].on ? &tp2->v[VAR_NCCL] : NULL;
  for (size_t step = 0; step < rep->steps; ++step) {
    const size_t t = pick_tokens(&rng);
    fill_ids(&rng, ids, t);
    timing te[VAR_COUNT], tg[VAR_COUNT];
    memset(te, 0, sizeof te);
    memset(tg, 0, sizeof tg);
    const int start = (int)((step / 2) % (size_t)n), dir = step % 2 ? -1 : 1;
    for (int k = 0; k < n; ++k) {
      const item it = items[((start + dir * k) % n + n) % n];
      vpath *p = &tp2->v[it.vi];
      if (lockstep_wait(&R->ls) != 0) return -1; /* both ranks start the timed run together */
      if (it.eager) {
        if (eager_step(tp2, p, ids, t, &te[it.vi]) || read_logits(tp2, p->logits_eager, t)) return -1;
      } else {
        if (graph_step(tp2, p, ids, t, &tg[it.vi]) || read_logits(tp2, p->logits, t)) return -1;
      }
    }
    if (lockstep_wait(&R->ls) != 0) return -1; /* every rank's logits of this step are on the host */

    for (int vi = 0; vi < VAR_COUNT; ++vi) {
      const vpath *p = &tp2->v[vi];
      if (!p->on) continue;
      tp_checks *ck = &rep->checks[vi];
      char who[112];
      snprintf(who, sizeof who, "%s %s", variant_name[vi], tp2->name);
      if (p->logits_eager && differ(p->logits_eager, p->logits, t, &printed, "(a) eager vs graph", who, step))
        ++ck->eager_mismatched[me];
      if (nccl && p != nccl) { /* (d): the graph, and the eager step where there is one */
        bool d = differ(nccl->logits, p->logits, t, &printed, "(d) nccl vs this, graph", who, step);
        if (p->logits_eager)
          d = differ(nccl->logits_eager, p->logits_eager, t, &printed, "(d) nccl vs this, eager", who, step) || d;
        if (d) ++ck->nccl_mismatched[me];
      }
      if (p->dynamic && differ(tp2->v[rep->twin].logits, p->logits, t, &printed, "(e) EXACT twin vs DYNAMIC", who,
                               step))
        ++ck->exact_mismatched[me];
    }
    if (lead) {
      const rank_ctx *peer = &R->ranks[1];
      for (int vi = 0; vi < VAR_COUNT; ++vi) { /* (c) */
        const vpath *p = &tp2->v[vi];
        if (!p->on) continue;
        size_t first, dg = count_diffs(p->logits, peer->logits[vi], t * V, &first);
        size_t de = p->logits_eager ? count_diffs(p->logits_eager, peer->logits_eager[vi], t * V, &first) : 0;
        if (dg || de) {
          ++rep->checks[vi].rank_mismatched;
          if (printed++ < MAX_PRINTED_MISMATCHES)
            printf("MISMATCH (c) %s step %zu (%zu tokens): rank 0 vs rank 1 differ in %zu graph and %zu eager "
                   "logits\n",
                   variant_name[vi], step, t, dg, de);
        }
      }
      timing t1;
      vpath *ref = &tp1->v[VAR_NCCL];
      if (graph_step(tp1, ref, ids, t, &t1) || read_logits(tp1, ref->logits, t)) return -1;
      for (int vi = 0; vi < VAR_COUNT; ++vi) { /* (b) */
        const vpath *p = &tp2->v[vi];
        if (!p->on) continue;
        tp_checks *ck = &rep->checks[vi];
        double rel, absr;
        compare_rows(p->logits, ref->logits, t, V, &rel, &absr);
        if (rel > ck->worst_rel_l2) ck->worst_rel_l2 = rel;
        if (absr > ck->worst_abs_over_rms) ck->worst_abs_over_rms = absr;
        if (!(rel <= TOL_REL_L2 && absr <= TOL_ABS_OVER_RMS)) {
          ++ck->tol_failed;
          if (printed++ < MAX_PRINTED_MISMATCHES)
            printf("OUT OF TOLERANCE (b) %s step %zu (%zu tokens): TP=2 vs TP=1 relative L2 %.5f (limit "
                   "%.5f), max |diff| / rms %.4f (limit %.4f)\n",
                   variant_name[vi], step, t, rel, TOL_REL_L2, absr, TOL_ABS_OVER_RMS);
        }
      }
      rep->samples[RUN_TP1][SERIES_GRAPH_GPU][step] = t1.gpu_us;
      rep->samples[RUN_TP1][SERIES_GRAPH_CPU][step] = t1.cpu_us;
      rep->bucket[step] = bucket_of(t);
    }
    for (int vi = 0; vi < VAR_COUNT; ++vi) {
      if (!tp2->v[vi].on) continue;
      double **smp = rep->samples[RUN_OF(vi, me)];
      smp[SERIES_GRAPH_GPU][step] = tg[vi].gpu_us;
      smp[SERIES_GRAPH_CPU][step] = tg[vi].cpu_us;
      if (smp[SERIES_EAGER_GPU]) {
        smp[SERIES_EAGER_GPU][step] = te[vi].gpu_us;
        smp[SERIES_EAGER_CPU][step] = te[vi].cpu_us;
      }
    }
    if (lead && ((step + 1) % PROGRESS_EVERY == 0 || step + 1 == rep->steps)) {
      printf("step %zu/%zu:", step + 1, rep->steps);
      for (int vi = 0; vi < VAR_COUNT; ++vi) {
        if (!tp2->v[vi].on) continue;
        const tp_checks *ck = &rep->checks[vi];
        printf(" %s: (a) %zu+%zu (b) %zu (c) %zu (d) %zu+%zu%s worst rel L2 %.5f;", variant_name[vi],
               ck->eager_mismatched[0], ck->eager_mismatched[1], ck->tol_failed, ck->rank_mismatched,
               ck->nccl_mismatched[0], ck->nccl_mismatched[1],
               vi == VAR_DYNAMIC ? (ck->exact_mismatched[0] + ck->exact_mismatched[1] ? " (e) MISMATCHED" : " (e) 0")
                                 : "",
               ck->worst_rel_l2);
      }
      printf(" (mismatched steps)\n");
      fflush(stdout);
    }
  }
  return 0;
}

/* One rank: its GPU, its stream, its model and one graph cache per
 * variant, then the loop. Rank 0 also owns the TP=1 reference on the same
 * GPU. */
static void *rank_main(void *arg) {
  rank_ctx *r = arg;
  run *R = r->run;
  tp_report *rep = R->rep;
  const bool lead = r->rank == 0;
  const bool one_algo = R->opt->dynamic; /* a row's GEMM result independent of the GEMM's rows */
  engine tp2, tp1;
  memset(&tp2, 0, sizeof tp2);
  memset(&tp1, 0, sizeof tp1);

  /* This thread's device, before any CUDA call of its own: the model's
   * cudaMalloc, cuBLASLt handle, kernels, events and pinned copies all go
   * to the rank's GPU. (mdr's calls switch to their backend's device.) */
  CUDA_OK(cudaSetDevice(r->rank));
  if (engine_open(&tp2, r->backend, r->arena, TP_RANKS, r->rank, R->w, &R->ls.failed, one_algo) != 0) goto fail;
  for (int vi = 0; vi < VAR_COUNT; ++vi)
    if (rep->enabled[vi] && path_open(&tp2, vi, rep->algo[vi], rep->fused_residual[vi], vi == VAR_DYNAMIC) != 0)
      goto fail;
  if (lead) {
    if (engine_open(&tp1, r->backend, r->arena_tp1, 1, 0, R->w, &R->ls.failed, one_algo) != 0 ||
        path_open(&tp1, VAR_NCCL, MDR_ALL_REDUCE_NCCL, false, false) != 0)
      goto fail;
    rep->gemm_one_algo_tiles = tp2.m.one_algo_tiles;
    rep->gemm_tiles = TPG_COUNT * TP_MAX_SHAPES;
  }
  for (int vi = 0; vi < VAR_COUNT; ++vi) {
    r->logits[vi] = tp2.v[vi].logits;
    r->logits_eager[vi] = tp2.v[vi].logits_eager;
  }
  if (warm_up(&tp2, R->opt->seed) != 0 || (lead && warm_up(&tp1, R->opt->seed) != 0)) goto fail;
  if (lockstep_wait(&R->ls) != 0) goto fail;

  /* ---- the mdr part, per rank ----------------------------------------------
   * The graph caches, one per variant, all on the rank's arena and stream
   * (their steps are ordered): one graph per token count (DYNAMIC: one for
   * every count) of zeroing + id upload + the body (the layers, with the
   * all-reduces). Made in the same order with the same options on every
   * rank (mdr compares them at create). */
  for (int vi = 0; vi < VAR_COUNT; ++vi)
    if (tp2.v[vi].on && path_cache(&tp2, &tp2.v[vi]) != 0) goto fail;
  if (lead && path_cache(&tp1, &tp1.v[VAR_NCCL]) != 0) goto fail; /* the reference's, on its own arena */

  /* Prepare: every count 1..M captured up front, the same counts in the
   * same order on both ranks (a capture records the all-reduces; nothing
   * runs), so that steps only replay. */
  for (int vi = 0; vi < VAR_COUNT; ++vi)
    if (tp2.v[vi].on && prepare_every_count(&tp2, &tp2.v[vi], rep->capture_us[RUN_OF(vi, r->rank)]) != 0)
      goto fail;
  if (lead && prepare_every_count(&tp1, &tp1.v[VAR_NCCL], rep->capture_us[RUN_TP1]) != 0) goto fail;

  /* The decode loop: one mdr_graph_cache_step per step, GPU and variant. */
  if (run_steps(r, &tp2, lead ? &tp1 : NULL) != 0) goto fail;
  /* ---- end of the mdr part, per rank ------------------------------------------ */

  for (int vi = 0; vi < VAR_COUNT; ++vi)
    if (tp2.v[vi].on) MDR_CHECK_(r->backend, mdr_graph_cache_stats(tp2.v[vi].cache, &rep->stats[RUN_OF(vi, r->rank)]));
  if (lead) MDR_CHECK_(r->backend, mdr_graph_cache_stats(tp1.v[VAR_NCCL].cache, &rep->stats[RUN_TP1]));
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
  /* Can mdr's own all-reduce kernels run on these arenas (a symmetric
   * window, both GPUs in one NVLink domain)? If not, the reason is the
   * backends' last error of the create: keep it before anything else fails. */
  rep.mdr_kernels = 1;
  for (int i = 0; i < TP_RANKS; ++i) {
    if (mdr_all_reduce_kernels(arenas[i])) continue;
    const char *why = mdr_backend_last_error(backends[i]);
    if (rep.mdr_kernels)
      snprintf(rep.ar_note, sizeof rep.ar_note,
               "mdr_all_reduce_kernels is 0 on rank %d's arena (window: %s%s%s)", i,
               mdr_window_name(mdr_arena_window(arenas[i])), why[0] ? "; " : "", why);
    rep.mdr_kernels = 0;
  }
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
         "%d all-reduces per step and variant (BF16, in place)\n",
         TP_LAYERS, TP_HIDDEN, TP_QKV, TP_FFN, TP_VOCAB, TP_MAX_TOKENS, TP_QKV / TP_RANKS,
         TP_FFN / TP_RANKS, 2 * TP_LAYERS);

  /* The all-reduce variants: NCCL's kernel and mdr's (MDR_ALL_REDUCE_AUTO, which
   * takes mdr's kernels where they run, with the residual add fused into
   * the all-reduce) side by side when mdr's kernels run here; else NCCL's
   * alone unless asked for (AUTO then falls back to NCCL). */
  rep.requested = opt.all_reduce;
  rep.algo[VAR_NCCL] = MDR_ALL_REDUCE_NCCL;
  rep.algo[VAR_MDR] = MDR_ALL_REDUCE_AUTO;
  rep.fused_residual[VAR_MDR] = true;
  switch (opt.all_reduce) {
  case AR_OPT_DEFAULT:
    rep.enabled[VAR_NCCL] = true;
    rep.enabled[VAR_MDR] = rep.mdr_kernels != 0;
    break;
  case AR_OPT_NCCL: rep.enabled[VAR_NCCL] = true; break;
  case AR_OPT_MDR: rep.enabled[VAR_MDR] = true; break;
  case AR_OPT_BOTH: rep.enabled[VAR_NCCL] = rep.enabled[VAR_MDR] = true; break;
  }
  if (!rep.mdr_kernels) {
    const size_t used = strlen(rep.ar_note);
    snprintf(rep.ar_note + used, sizeof rep.ar_note - used, "%s",
             rep.enabled[VAR_MDR] ? ": MDR_ALL_REDUCE_AUTO falls back to NCCL, so the mdr variant runs NCCL's kernel "
                                    "(and a separate residual add)"
             : opt.all_reduce == AR_OPT_DEFAULT ? ": running the nccl variant only"
                                                : "");
  }
  rep.enabled[VAR_DYNAMIC] = opt.dynamic;
  rep.twin = rep.enabled[VAR_MDR] ? VAR_MDR : VAR_NCCL;
  rep.algo[VAR_DYNAMIC] = rep.algo[rep.twin];
  rep.fused_residual[VAR_DYNAMIC] = rep.fused_residual[rep.twin];
  for (size_t t = 1; t <= TP_MAX_TOKENS; ++t) {
    const mdr_all_reduce_desc d = mdr_all_reduce_desc_make(MDR_BUF_ATTN_OUTPUT, MDR_DTYPE_BF16, t);
    rep.auto_choice[t - 1] = mdr_all_reduce_choice(arenas[0], &d);
  }
  mdr_all_reduce_desc counted = mdr_all_reduce_desc_make(MDR_BUF_ATTN_OUTPUT, MDR_DTYPE_BF16, TP_MAX_TOKENS);
  counted.count_ptr = mdr_arena_token_ids(arenas[0]); /* any device word: only its presence counts for the query */
  rep.auto_choice_counted = mdr_all_reduce_choice(arenas[0], &counted);
  printf("decode_tp: all-reduce variants (--all-reduce %s%s):", ar_option_name(opt.all_reduce),
         opt.dynamic ? ", --dynamic" : "");
  for (int v = 0; v < VAR_COUNT; ++v)
    if (rep.enabled[v])
      printf(" %s (%s %s%s)", variant_name[v], v == VAR_DYNAMIC ? "DYNAMIC" : "EXACT",
             mdr_all_reduce_algo_name(rep.algo[v]), rep.fused_residual[v] ? ", residual add fused" : "");
  printf("; mdr's kernels %s\n", rep.mdr_kernels ? "run here" : "do not run here");
  if (rep.ar_note[0]) printf("decode_tp: note: %s\n", rep.ar_note);

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

  if (print_checks(&rep)) {
    printf("OK: %zu steps;", opt.steps);
    for (int v = 0; v < VAR_COUNT; ++v)
      if (rep.enabled[v]) printf(" %s", variant_name[v]);
    printf(": graph == eager on both ranks, rank 0 == rank 1, TP=2 within tolerance of TP=1%s%s\n",
           rep.enabled[VAR_NCCL] && (rep.enabled[VAR_MDR] || rep.enabled[VAR_DYNAMIC]) ? ", == nccl" : "",
           rep.enabled[VAR_DYNAMIC] ? ", DYNAMIC == EXACT" : "");
    rc = 0;
  } else {
    printf("FAIL\n");
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
