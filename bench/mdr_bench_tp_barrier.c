/* mdr_bench_tp_barrier.c — mdr-bench-tp --barrier: mdr's block barrier
 * against NCCL's LSA barrier, on the same communicator, in one run (issue
 * 21, item 1: keep mdr's own barrier only where it is measurably faster
 * and provably exact).
 *
 * Two paths, each one kernel of TP_BARRIER_K consecutive barriers per
 * block, MDR_AR_THREADS threads a block, at grids of 1, 8, 32 and the cap
 * of mdr's kernels (the SMs of the smaller GPU, at most
 * MDR_ARP_MAX_BLOCKS):
 *   mdr       the two-shot's block barrier itself (block_barrier,
 *             kernels/ar_device.cuh) through mdr_cuda_ar_barrier_bench
 *             (kernels/all_reduce.cu): its flags {value, signature} in the
 *             comm region of an arena on the communicator, the block's real
 *             counters, barriers 1 and 2 alternating as in a two-shot call,
 *             the call the arena's all-reduce would launch
 *             (mdr_all_reduce_call_of: the same peers, abort words, limits)
 *   nccl-lsa  NCCL's device API (mdr_bench_tp_barrier.cu): a device
 *             communicator made with lsaBarrierCount = the grid and no
 *             multicast; one ncclLsaBarrierSession per block (unicast),
 *             sync(acq_rel) K times
 * Both are captured, one launch each, in a CUDA graph.
 *
 * Validation, per grid and path, before any timing: one launch of
 * TP_BARRIER_CHECK barriers in which, around every barrier, each block
 * writes a value of its rank, block and round into every rank's memory and
 * reads every rank's value back after it (mdr_ar_barrier_check_value); a
 * single wrong value ends the run (exit 1). After each grid, mdr's
 * counters are read back (mdr_all_reduce_state): block 0's barrier count
 * must be the barriers it ran, nothing else may have moved.
 *
 * Timing: the blocked method of the sweeps (tp_time_blocked): per rep a
 * blocker, an event, one replay of the graph, an event; per rep the slower
 * rank, divided by K: µs per barrier, median and p99 (and p10, p90) over
 * --reps. Rank 0 prints the table and writes barrier.csv and barrier.json.
 *
 * No NVLink multicast anywhere: NCCL_NVLS_ENABLE=0 (mdr_bench_tp.c), the
 * NCCL side asks for none and opens unicast sessions, mdr's side reaches
 * peers by plain stores through LSA pointers. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_tp_rank.h"

#if defined(TP_GPU) && defined(MDR_HAVE_NCCL_DEVICE)
#include "all_reduce.h"      /* mdr_cuda_ar_barrier_bench, mdr_ar_barrier_run */
#include "all_reduce_impl.h" /* mdr_all_reduce_call_of, mdr_all_reduce_state */

enum { TPB_MDR, TPB_NCCL, TPB_PATHS, TPB_MAX_GRIDS = 4 };
static const char *const k_tpb_names[TPB_PATHS] = {"mdr", "nccl-lsa"};
static const unsigned k_tpb_grids[] = {1, 8, 32}; /* then the cap */

/* One rank's state for one grid. */
typedef struct tpb_ctx {
  mdr_ar_call call;        /* mdr's: the arena's kernel call, transport part filled */
  size_t check_off;        /* TP_BUFFER's window offset: mdr's check slots */
  tp_nccl_barrier *nccl;   /* NCCL's device communicator of this grid */
  uint32_t *wrong;         /* device: the check's wrong values */
  uint32_t salt;           /* advanced by every checked launch, alike on both ranks */
  unsigned grid;
  uint64_t mdr_barriers;   /* barriers block 0 of mdr's path has run (the counters' check) */
  cudaGraphExec_t exec[TPB_PATHS];
  int path;                /* the path tpb_replay runs */
} tpb_ctx;

/* Rank 0's figures, [grid][path]. */
typedef struct tpb_fig {
  unsigned grid;
  summary s[TPB_PATHS];
} tpb_fig;

/* One launch of `barriers` barriers of path p (check: with the check). */
static int tpb_launch(tp_rank *rk, tpb_ctx *c, int p, unsigned barriers, bool check) {
  if (p == TPB_MDR) {
    const mdr_ar_barrier_run run = {.blocks = c->grid, .barriers = barriers,
                                    .check_off = check ? c->check_off : MDR_AR_NO_CHECK,
                                    .wrong = check ? c->wrong : NULL, .salt = c->salt};
    c->mdr_barriers += barriers;
    return mdr_cuda_ar_barrier_bench(&c->call, &run, rk->stream);
  }
  return tp_nccl_barrier_launch(rk->stream, c->nccl, barriers, check ? c->wrong : NULL, c->salt);
}

/* Before timing: one launch of TP_BARRIER_CHECK checked barriers; any
 * wrong value read after a barrier ends the run. */
static void tpb_validate(tp_rank *rk, tpb_ctx *c, int p) {
  char what[96];
  snprintf(what, sizeof what, "barrier: validating %s, grid %u", k_tpb_names[p], c->grid);
  tp_progress(what);
  TP_CUDA(cudaMemsetAsync(c->wrong, 0, sizeof *c->wrong, rk->stream));
  tp_rank_sync(rk, what);
  c->salt++;
  tp_barrier(rk);
  const int e = tpb_launch(rk, c, p, TP_BARRIER_CHECK, true);
  if (e) tp_die("%s: rank %d: launch: %s", what, rk->rank, cudaGetErrorString((cudaError_t)e));
  tp_rank_sync(rk, what);
  uint32_t wrong = 0;
  TP_CUDA(cudaMemcpy(&wrong, c->wrong, sizeof wrong, cudaMemcpyDeviceToHost));
  if (wrong)
    tp_die("%s: rank %d: %u of %u values read after a barrier were not the ones written before it (%u blocks x "
           "%d barriers x %d ranks): the barrier does not synchronise",
           what, rk->rank, wrong, c->grid * TP_BARRIER_CHECK * TP_RANKS, c->grid, TP_BARRIER_CHECK, TP_RANKS);
}

/* The graph of one launch of TP_BARRIER_K barriers of path p, uploaded. */
static cudaGraphExec_t tpb_capture(tp_rank *rk, tpb_ctx *c, int p) {
  cudaGraph_t g = NULL;
  cudaGraphExec_t x = NULL;
  TP_CUDA(cudaStreamBeginCapture(rk->stream, cudaStreamCaptureModeThreadLocal));
  const uint64_t counted = c->mdr_barriers;
  const int e = tpb_launch(rk, c, p, TP_BARRIER_K, false);
  c->mdr_barriers = counted; /* captured, not run */
  const cudaError_t end = cudaStreamEndCapture(rk->stream, &g);
  if (e) tp_die("barrier: rank %d: capturing %s: %s", rk->rank, k_tpb_names[p], cudaGetErrorString((cudaError_t)e));
  TP_CUDA(end);
  TP_CUDA(cudaGraphInstantiate(&x, g, 0));
  TP_CUDA(cudaGraphUpload(x, rk->stream));
  TP_CUDA(cudaGraphDestroy(g));
  return x;
}

static void tpb_replay(tp_rank *rk, void *ctx) {
  tpb_ctx *c = ctx;
  TP_CUDA(cudaGraphLaunch(c->exec[c->path], rk->stream));
  if (c->path == TPB_MDR) c->mdr_barriers += TP_BARRIER_K;
}

/* mdr's counters after a grid: block 0 passed every barrier run, and no
 * other counter moved (the barrier advances only its own). */
static void tpb_check_counters(tp_rank *rk, const tpb_ctx *c) {
  mdr_arp_block st;
  tp_rank_sync(rk, "barrier: reading mdr's counters");
  TP_MDR(rk->b, mdr_all_reduce_state(rk->arena, &st, NULL));
  if (st.barriers != (uint32_t)c->mdr_barriers || st.calls != 0 || st.one_shot != 0)
    tp_die("barrier: rank %d, grid %u: mdr's counters of block 0 are barriers %u, calls %u, one-shot %u after %llu "
           "barriers (expected %u, 0, 0)",
           rk->rank, c->grid, st.barriers, st.calls, st.one_shot, (unsigned long long)c->mdr_barriers,
           (uint32_t)c->mdr_barriers);
}

/* mdr faster / NCCL faster only when the spreads do not overlap. */
static const char *tpb_verdict(const summary *m, const summary *n) {
  if (m->p90 < n->p10) return "mdr faster";
  if (n->p90 < m->p10) return "nccl faster";
  return "within the spread";
}

static void tpb_report(const tp_options *o, const tp_run_info *info, const tpb_fig *figs, size_t n) {
  char path[4200];
  snprintf(path, sizeof path, "%s/barrier.csv", info->out_dir);
  FILE *csv = fopen(path, "w");
  snprintf(path, sizeof path, "%s/barrier.json", info->out_dir);
  FILE *js = fopen(path, "w");
  if (!csv || !js) tp_die("barrier: cannot write %s", path);
  printf("\nbarrier: GPU us per barrier (the slower rank; one launch of %d barriers a rep, %d threads a block), "
         "%zu reps\n",
         TP_BARRIER_K, MDR_AR_THREADS, o->reps);
  printf("%5s %9s %9s %10s %10s %9s %9s  %s\n", "grid", "mdr", "mdr p99", "nccl-lsa", "nccl p99", "mdr/nccl",
         "p99 x", "verdict (p10-p90 spreads)");
  fprintf(csv, "grid,path,barriers_per_launch,threads,reps,us_med,us_p10,us_p90,us_p99,us_max,x_mdr_over_nccl_med,"
               "x_mdr_over_nccl_p99,verdict\n");
  fprintf(js, "{\n  \"mode\": \"barrier\",\n  \"barriers_per_launch\": %d,\n  \"threads\": %d,\n  \"reps\": %zu,\n"
              "  \"check_barriers\": %d,\n  \"git_revision\": ",
          TP_BARRIER_K, MDR_AR_THREADS, o->reps, TP_BARRIER_CHECK);
  json_str(js, bench_git_revision());
  fprintf(js, ",\n  \"nccl_version\": %d,\n  \"gpus\": [", info->nccl_version);
  for (int r = 0; r < TP_RANKS; r++) {
    fprintf(js, "%s", r ? ", " : "");
    json_str(js, info->gpu_name[r]);
  }
  fprintf(js, "],\n  \"cases\": [\n");
  for (size_t i = 0; i < n; i++) {
    const summary *m = &figs[i].s[TPB_MDR], *nc = &figs[i].s[TPB_NCCL];
    const double x = m->med / nc->med, x99 = m->p99 / nc->p99;
    const char *verdict = tpb_verdict(m, nc);
    printf("%5u %9.3f %9.3f %10.3f %10.3f %9.2f %9.2f  %s\n", figs[i].grid, m->med, m->p99, nc->med, nc->p99, x, x99,
           verdict);
    for (int p = 0; p < TPB_PATHS; p++) {
      const summary *s = &figs[i].s[p];
      fprintf(csv, "%u,%s,%d,%d,%zu,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%s\n", figs[i].grid, k_tpb_names[p],
              TP_BARRIER_K, MDR_AR_THREADS, o->reps, s->med, s->p10, s->p90, s->p99, s->max, x, x99, verdict);
      fprintf(js, "%s    {\"grid\": %u, \"path\": \"%s\", \"us_med\": ", i || p ? ",\n" : "", figs[i].grid,
              k_tpb_names[p]);
      json_num(js, s->med);
      fprintf(js, ", \"us_p10\": ");
      json_num(js, s->p10);
      fprintf(js, ", \"us_p90\": ");
      json_num(js, s->p90);
      fprintf(js, ", \"us_p99\": ");
      json_num(js, s->p99);
      fprintf(js, ", \"us_max\": ");
      json_num(js, s->max);
      fprintf(js, ", \"x_mdr_over_nccl_med\": ");
      json_num(js, x);
      fprintf(js, ", \"x_mdr_over_nccl_p99\": ");
      json_num(js, x99);
      fprintf(js, ", \"verdict\": \"%s\"}", verdict);
    }
  }
  fprintf(js, "\n  ]\n}\n");
  fclose(csv);
  fclose(js);
  printf("\nmdr/nccl: mdr's median (p99 x: p99) over nccl-lsa's, < 1: mdr's barrier is faster; every barrier "
         "validated first (%d checked rounds a grid and path)\nwrote %s/barrier.csv, %s/barrier.json\n",
         TP_BARRIER_CHECK, info->out_dir, info->out_dir);
  fflush(stdout);
}

/* The grids: 1, 8, 32 below the cap, then the cap. */
static size_t tpb_grids(unsigned cap, unsigned *out) {
  size_t n = 0;
  for (size_t i = 0; i < sizeof k_tpb_grids / sizeof *k_tpb_grids; i++)
    if (k_tpb_grids[i] < cap) out[n++] = k_tpb_grids[i];
  out[n++] = cap;
  return n;
}

void tp_barrier_compare(tp_rank *rk) {
  tp_shared *sh = rk->sh;
  tp_progress("barrier setup");
  /* an arena on the communicator: its comm region holds mdr's flags and
   * counters; TP_BUFFER (one row of 2 KiB: 2 x 128 blocks x 2 ranks words)
   * mdr's check slots */
  mdr_sizes sizes;
  memset(&sizes, 0, sizeof sizes);
  sizes.max_batch_tokens = 1;
  sizes.logits_rows = 1;
  sizes.bytes[TP_BUFFER] = TP_SIZE_ROW_BYTES;
  sizes.bytes[MDR_BUF_TOKEN_IDS] = 256;
  _Static_assert(2u * MDR_ARP_MAX_BLOCKS * TP_RANKS * 4u <= TP_SIZE_ROW_BYTES, "mdr's check slots fit TP_BUFFER");
  tp_barrier(rk);
  TP_MDR(rk->b, mdr_arena_create_on_comm(rk->comm, &sizes, &rk->arena));
  sh->flag[rk->rank] = mdr_all_reduce_kernels(rk->arena) != 0;
  if (!sh->flag[rk->rank])
    snprintf(sh->note[rk->rank], sizeof sh->note[rk->rank], "%s", mdr_backend_last_error(rk->b));
  tp_barrier(rk);
  for (int r = 0; r < TP_RANKS; r++)
    if (!sh->flag[r]) {
      if (rk->rank == 0)
        tp_exit(TP_EXIT_SKIP,
                "skipped: --barrier needs mdr's all-reduce kernels, and mdr_all_reduce_kernels is 0 on rank %d "
                "(window %s; mdr_backend_last_error: \"%s\")",
                r, mdr_window_name(mdr_arena_window(rk->arena)), sh->note[r]);
      tp_barrier(rk); /* rank 0 ends the process */
    }
  tpb_ctx c;
  memset(&c, 0, sizeof c);
  TP_MDR(rk->b, mdr_all_reduce_call_of(rk->arena, &c.call));
  c.check_off = (size_t)(mdr_arena_ptr(rk->arena, TP_BUFFER) - mdr_arena_slab_base(rk->arena));
  TP_CUDA(cudaMalloc((void **)&c.wrong, sizeof *c.wrong));
  const unsigned cap = c.call.max_blocks < MDR_ARP_MAX_BLOCKS ? (unsigned)c.call.max_blocks : MDR_ARP_MAX_BLOCKS;
  unsigned grids[TPB_MAX_GRIDS];
  const size_t n_grids = tpb_grids(cap, grids);
  tpb_fig figs[TPB_MAX_GRIDS];
  if (rk->rank == 0) {
    printf("\nbarrier: mdr's block barrier (the two-shot's, window %s) against NCCL's LSA barrier "
           "(ncclLsaBarrierSession, unicast); grids",
           mdr_window_name(mdr_arena_window(rk->arena)));
    for (size_t i = 0; i < n_grids; i++) printf(" %u", grids[i]);
    printf(" (cap: min(SMs of the smaller GPU, %d) = %u)\n", MDR_ARP_MAX_BLOCKS, cap);
    fflush(stdout);
  }
  for (size_t gi = 0; gi < n_grids; gi++) {
    c.grid = grids[gi];
    char what[96];
    snprintf(what, sizeof what, "barrier: grid %u: ncclDevCommCreate", c.grid);
    tp_progress(what);
    tp_barrier(rk); /* collective: both ranks at once */
    const int e = tp_nccl_barrier_create(rk->nccl, c.grid, &c.nccl);
    if (e)
      tp_die("%s (lsaBarrierCount %u): rank %d: %s: %s", what, c.grid, rk->rank, ncclGetErrorString((ncclResult_t)e),
             ncclGetLastError(rk->nccl));
    int rank, nranks, lsa_rank, lsa_size;
    tp_nccl_barrier_team(c.nccl, &rank, &nranks, &lsa_rank, &lsa_size);
    if (nranks != TP_RANKS || lsa_size != nranks || lsa_rank != rank)
      tp_die("%s: rank %d: the ranks are not one LSA team (rank %d of %d, LSA rank %d of %d)", what, rk->rank, rank,
             nranks, lsa_rank, lsa_size);
    for (int p = 0; p < TPB_PATHS; p++) tpb_validate(rk, &c, p);
    for (int p = 0; p < TPB_PATHS; p++) {
      tp_barrier(rk);
      c.exec[p] = tpb_capture(rk, &c, p);
    }
    tp_rank_sync(rk, "barrier: uploading the graphs");
    for (int p = 0; p < TPB_PATHS; p++) {
      snprintf(what, sizeof what, "barrier: timing %s, grid %u", k_tpb_names[p], c.grid);
      tp_progress(what);
      c.path = p;
      const summary s = tp_time_blocked(rk, tpb_replay, &c, TP_BARRIER_K, what);
      if (rk->rank == 0) {
        figs[gi].grid = c.grid;
        figs[gi].s[p] = s;
      }
    }
    tpb_check_counters(rk, &c);
    for (int p = 0; p < TPB_PATHS; p++) TP_CUDA(cudaGraphExecDestroy(c.exec[p]));
    tp_barrier(rk); /* collective */
    const int d = tp_nccl_barrier_destroy(rk->nccl, c.nccl);
    if (d) tp_die("barrier: rank %d: ncclDevCommDestroy: %s", rk->rank, ncclGetErrorString((ncclResult_t)d));
    c.nccl = NULL;
    if (rk->rank == 0) {
      fprintf(stderr, "%s[%zu/%zu] barrier grid %u%s", sh->progress_in_place ? "\r\033[K" : "", gi + 1, n_grids,
              c.grid, sh->progress_in_place ? "" : "\n");
      fflush(stderr);
    }
  }
  TP_CUDA(cudaFree(c.wrong));
  tp_barrier(rk);
  mdr_arena_destroy(rk->arena); /* both ranks together */
  rk->arena = NULL;
  tp_barrier(rk);
  if (rk->rank == 0) tpb_report(rk->o, sh->info, figs, n_grids);
  tp_barrier(rk);
}

#endif
