/* mdr_bench_tp_sweep.c — mdr-bench-tp's rank thread (tp_rank_main) and
 * its sweeps: per sweep (sizes, tokens) the buffers, the NCCL window, the
 * arena on the communicator and its caches are set up once
 * (tp_sweep_setup), then every row count runs every path
 * (tp_run_case, mdr_bench_tp_rank.c), then the capture costs; --soak N
 * runs tp_soak (mdr_bench_tp_soak.c) instead. bench_tp_rank.h holds the
 * rank's state and what the three files share. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_tp_rank.h"

#ifdef TP_GPU
/* ---- capture costs: prepare, count by count, with and without the collective ---- */

static void tp_capture_costs(tp_rank *rk, const mdr_sizes *sizes) {
  tp_shared *sh = rk->sh;
  tp_progress("capture costs");
  tp_barrier(rk);
  const size_t first = sh->res->n_captures; /* both ranks read it before rank 0 appends */
  tp_barrier(rk);
  if (rk->rank == 0)
    for (size_t i = 0; i < rk->w->n; i++) {
      tp_capture *c = &sh->res->captures[sh->res->n_captures++];
      *c = (tp_capture){.sweep = rk->w->kind, .rows = rk->w->rows[i], .bytes = rk->w->rows[i] * rk->w->row_bytes,
                        .tp_us = {NAN, NAN}, .single_us = NAN};
    }
  tp_barrier(rk);
  /* a fresh cache on the communicator's arena: the capture holds the all-reduce */
  tp_body_ctx body = {.arena = rk->arena, .k = 1};
  mdr_graph_cache *c = tp_make_cache(rk, rk->arena, &body);
  for (size_t i = 0; i < rk->w->n; i++) {
    mdr_graph_stats s0, s1;
    TP_MDR(rk->b, mdr_graph_cache_stats(c, &s0));
    tp_barrier(rk);
    TP_MDR(rk->b, mdr_graph_cache_prepare(c, &rk->w->rows[i], 1));
    TP_MDR(rk->b, mdr_graph_cache_stats(c, &s1));
    sh->res->captures[first + i].tp_us[rk->rank] = s1.capture_us - s0.capture_us;
    tp_progress(NULL);
  }
  tp_rank_sync(rk, "capture costs");
  mdr_graph_cache_destroy(c);
  tp_barrier(rk);
  /* one GPU, a plain arena of the same sizes, the same body without the collective */
  if (rk->rank == 0) {
    mdr_arena *a = NULL;
    TP_MDR(rk->b, mdr_arena_create(rk->b, sizes, &a));
    tp_body_ctx none = {.arena = a, .k = 0};
    c = tp_make_cache(rk, a, &none);
    for (size_t i = 0; i < rk->w->n; i++) {
      mdr_graph_stats s0, s1;
      TP_MDR(rk->b, mdr_graph_cache_stats(c, &s0));
      TP_MDR(rk->b, mdr_graph_cache_prepare(c, &rk->w->rows[i], 1));
      TP_MDR(rk->b, mdr_graph_cache_stats(c, &s1));
      sh->res->captures[first + i].single_us = s1.capture_us - s0.capture_us;
      tp_progress(NULL);
    }
    tp_rank_sync(rk, "capture costs, one GPU");
    mdr_graph_cache_destroy(c);
    mdr_arena_destroy(a);
  }
  tp_barrier(rk);
}

/* ---- a sweep ---- */

static void tp_sweep_setup(tp_rank *rk, tp_sweep *w, mdr_sizes *sizes) {
  tp_shared *sh = rk->sh;
  rk->w = w;
  rk->bytes = w->m * w->row_bytes;
  tp_progress("sweep setup");
  /* host side: ids, this rank's pattern, the sums */
  const size_t n_el = rk->bytes / 2;
  rk->ids = xmalloc(w->m * sizeof *rk->ids);
  for (size_t i = 0; i < w->m; i++) rk->ids[i] = TP_FIRST_TOKEN_ID + (uint32_t)i;
  TP_CUDA(cudaHostAlloc((void **)&rk->own, rk->bytes, cudaHostAllocPortable));
  TP_CUDA(cudaHostAlloc((void **)&rk->back, rk->bytes, cudaHostAllocPortable));
  rk->sum = xmalloc(n_el);
  for (size_t i = 0; i < n_el; i++) {
    rk->own[i] = tp_to_bf16((float)tp_pattern(rk->rank, i));
    rk->sum[i] = (int8_t)(tp_pattern(0, i) + tp_pattern(1, i));
  }
  /* nccl-eager, nccl-graph: plain device memory */
  TP_CUDA(cudaMalloc(&rk->plain, rk->bytes));
  TP_CUDA(cudaMemsetAsync(rk->plain, 0, rk->bytes, rk->stream));
  /* nccl-window: ncclMemAlloc, registered once (collective) when both ranks have it */
  static bool alloc_ok[TP_RANKS]; /* written by each rank for itself, read after the barrier */
  ncclResult_t r = ncclMemAlloc(&rk->winbuf, rk->bytes);
  alloc_ok[rk->rank] = r == ncclSuccess && rk->winbuf;
  if (!alloc_ok[rk->rank]) {
    fprintf(stderr, "note: rank %d: ncclMemAlloc of %zu B failed (%s); nccl-window uses cudaMalloc memory\n",
            rk->rank, rk->bytes, ncclGetErrorString(r));
    rk->winbuf = NULL;
  }
  tp_barrier(rk);
  const bool both = alloc_ok[0] && alloc_ok[1];
  tp_barrier(rk);
  rk->win = NULL;
  rk->winbuf_nccl = rk->winbuf != NULL;
  if (both) {
    tp_progress("ncclCommWindowRegister");
    r = ncclCommWindowRegister(rk->nccl, rk->winbuf, rk->bytes, &rk->win, NCCL_WIN_COLL_SYMMETRIC);
    if (r != ncclSuccess) {
      fprintf(stderr, "note: rank %d: ncclCommWindowRegister failed (%s: %s); nccl-window without a window\n",
              rk->rank, ncclGetErrorString(r), ncclGetLastError(rk->nccl));
      rk->win = NULL;
    }
  } else {
    if (rk->winbuf) TP_NCCL(rk->nccl, ncclMemFree(rk->winbuf));
    rk->winbuf_nccl = false;
    TP_CUDA(cudaMalloc(&rk->winbuf, rk->bytes));
  }
  /* a window on both ranks or on neither (as mdr's arena decides) */
  static bool has_win[TP_RANKS];
  has_win[rk->rank] = rk->win != NULL;
  tp_barrier(rk);
  const bool both_win = has_win[0] && has_win[1];
  tp_barrier(rk);
  if (!both_win && rk->win) {
    fprintf(stderr, "note: rank %d: the other rank has no window: deregistering this one\n", rk->rank);
    TP_NCCL(rk->nccl, ncclCommWindowDeregister(rk->nccl, rk->win));
    rk->win = NULL;
  }
  w->nccl_window[rk->rank] = rk->win != NULL;
  TP_CUDA(cudaMemsetAsync(rk->winbuf, 0, rk->bytes, rk->stream));
  /* mdr-graph, mdr-graph-dev: an arena on the communicator (collective), its slab one symmetric window */
  memset(sizes, 0, sizeof *sizes);
  sizes->max_batch_tokens = w->m;
  sizes->logits_rows = 1; /* no logits buffer */
  sizes->bytes[TP_BUFFER] = rk->bytes;
  sizes->bytes[MDR_BUF_TOKEN_IDS] = w->m * 4 > 256 ? w->m * 4 : 256; /* the graph cache uploads ids here */
  tp_progress("mdr_arena_create_on_comm");
  tp_barrier(rk);
  TP_MDR(rk->b, mdr_arena_create_on_comm(rk->comm, sizes, &rk->arena));
  w->mdr_window[rk->rank] = mdr_arena_window(rk->arena);
  /* mdr's own kernels (one-shot, two-shot): both ranks must have them; the
   * reason when not is the backend's last error of the arena's create */
  sh->flag[rk->rank] = mdr_all_reduce_kernels(rk->arena) != 0;
  if (!sh->flag[rk->rank])
    snprintf(sh->note[rk->rank], sizeof sh->note[rk->rank], "%s", mdr_backend_last_error(rk->b));
  tp_barrier(rk);
  rk->kernels = sh->flag[0] && sh->flag[1];
  if (rk->rank == 0) {
    w->ar_kernels = rk->kernels;
    w->ar_kernels_note[0] = '\0';
    for (int r = 0; r < TP_RANKS; r++)
      if (!sh->flag[r] && !w->ar_kernels_note[0])
        snprintf(w->ar_kernels_note, sizeof w->ar_kernels_note, "rank %d: mdr_backend_last_error: \"%s\"", r,
                 sh->note[r][0] ? sh->note[r] : "(empty)");
  }
  tp_barrier(rk);
  /* token_ids is the slab's first buffer (enum order, every other entry 0) */
  if (rk->rank == 0)
    w->mdr_buffer_offset = (size_t)(mdr_arena_ptr(rk->arena, TP_BUFFER) - mdr_arena_token_ids(rk->arena));
  size_t plan = 0;
  TP_MDR(rk->b, mdr_arena_zero_plan(rk->arena, w->m, NULL, 0, &plan));
  if (plan != 0) tp_die("internal: the arena's zero plan is not empty (%zu segments)", plan);
  TP_CUDA(cudaMemsetAsync((void *)(uintptr_t)mdr_arena_ptr(rk->arena, TP_BUFFER), 0, rk->bytes, rk->stream));
  /* the caches of each variant whose path is on (one-shot, two-shot: where
   * mdr's kernels run), made in the same order on both ranks (lockstep) */
  const tp_options *o = rk->o;
  const bool want[TP_V_COUNT] = {
      [TP_V_AUTO] = o->path_on[TP_MDR] || o->path_on[TP_MDR_DEV],
      [TP_V_1SHOT] = o->path_on[TP_MDR_1SHOT] && rk->kernels,
      [TP_V_2SHOT] = o->path_on[TP_MDR_2SHOT] && rk->kernels,
      [TP_V_DYN] = o->path_on[TP_MDR_DYN],
  };
  for (int v = 0; v < TP_V_COUNT; v++)
    for (int k = 0; k < 2; k++) {
      rk->body[v][k] = (tp_body_ctx){.arena = rk->arena, .k = k ? TP_K : 1, .v = (tp_variant)v};
      rk->cache[v][k] = want[v] ? tp_make_cache(rk, rk->arena, &rk->body[v][k]) : NULL;
    }
  /* warm-up: one eager all-reduce of the whole buffer (NCCL sets up its connections) */
  rk->rows = w->m;
  rk->count_el = n_el;
  tp_barrier(rk);
  tp_nccl_all_reduce(rk, rk->plain);
  tp_rank_sync(rk, "the sweep's first all-reduce");
  tp_barrier(rk);
  if (rk->rank == 0) {
    printf("\n== sweep %s: rows of %zu B; buffers of %zu rows (%.1f MB) per rank\n", k_tp_sweep_names[w->kind],
           w->row_bytes, w->m, (double)rk->bytes / 1e6);
    printf("mdr arena window: %s on rank 0, %s on rank 1 (mdr_window_name(mdr_arena_window(a))); reduced buffer %s, "
           "slab offset %zu B, outside every zero plan\n",
           mdr_window_name(w->mdr_window[0]), mdr_window_name(w->mdr_window[1]), mdr_buffer_name(TP_BUFFER),
           w->mdr_buffer_offset);
    if (w->ar_kernels)
      printf("mdr's all-reduce kernels: yes on both ranks (mdr_all_reduce_kernels 1): mdr-1shot, mdr-2shot run; "
             "AUTO may pick them\n");
    else
      printf("mdr's all-reduce kernels: NO (mdr_all_reduce_kernels 0; %s): mdr-1shot and mdr-2shot skipped, "
             "AUTO and mdr-dyn run NCCL (mdr-dyn then reduces all %zu rows)\n",
             w->ar_kernels_note, w->m);
    printf("nccl-window: %s\n", w->nccl_window[0] && w->nccl_window[1]
                                    ? "ncclMemAlloc + ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC): a window on both ranks"
                                : both ? "ncclCommWindowRegister gave no window (NCCL has no symmetric support here): "
                                         "ncclMemAlloc memory, no window"
                                       : "ncclMemAlloc failed: plain cudaMalloc memory, no window");
    tp_print_table_header();
    fflush(stdout);
  }
  (void)sh;
}

static void tp_sweep_teardown(tp_rank *rk) {
  tp_progress("sweep teardown");
  tp_rank_sync(rk, "sweep teardown");
  for (int v = 0; v < TP_V_COUNT; v++)
    for (int k = 0; k < 2; k++) {
      mdr_graph_cache_destroy(rk->cache[v][k]);
      rk->cache[v][k] = NULL;
    }
  tp_barrier(rk);
  mdr_arena_destroy(rk->arena); /* deregisters mdr's window: both ranks together */
  rk->arena = NULL;
  tp_barrier(rk);
  if (rk->win) TP_NCCL(rk->nccl, ncclCommWindowDeregister(rk->nccl, rk->win));
  rk->win = NULL;
  if (rk->winbuf_nccl) TP_NCCL(rk->nccl, ncclMemFree(rk->winbuf));
  else TP_CUDA(cudaFree(rk->winbuf));
  TP_CUDA(cudaFree(rk->plain));
  rk->winbuf = rk->plain = NULL;
  TP_CUDA(cudaFreeHost(rk->own));
  TP_CUDA(cudaFreeHost(rk->back));
  free(rk->sum);
  free(rk->ids);
  tp_barrier(rk);
}

static void tp_run_sweep(tp_rank *rk, tp_sweep *w, size_t *index, size_t total) {
  tp_shared *sh = rk->sh;
  mdr_sizes sizes;
  tp_sweep_setup(rk, w, &sizes);
  for (size_t i = 0; i < w->n; i++) {
    rk->rows = w->rows[i];
    rk->count_el = rk->rows * w->row_bytes / 2;
    const size_t first = rk->rank == 0 ? sh->res->n_cases : 0; /* rank 0's alone to read */
    for (int p = 0; p < TP_PATH_COUNT; p++)
      if (rk->o->path_on[p]) tp_run_case(rk, (tp_path)p, ++*index, total);
    tp_barrier(rk);
    if (rk->rank == 0) {
      if (sh->progress_in_place) fprintf(stderr, "\r\033[K");
      tp_finish_count(&sh->res->cases[first], sh->res->n_cases - first);
      for (size_t c = first; c < sh->res->n_cases; c++) tp_print_case(&sh->res->cases[c]);
      tp_print_count_summary(&sh->res->cases[first], sh->res->n_cases - first);
      fflush(stdout);
      /* the files so far (complete: false), so that a later failure loses nothing measured */
      sh->info->wall_s = (now_us() - sh->info->t_start_us) / 1e6;
      tp_write_results(rk->o, sh->info, sh->sweeps, sh->res);
    }
    tp_barrier(rk);
  }
  bool any_mdr = false;
  for (int p = 0; p < TP_PATH_COUNT; p++) any_mdr |= rk->o->path_on[p] && tp_is_mdr((tp_path)p);
  if (any_mdr) {
    tp_capture_costs(rk, &sizes);
    if (rk->rank == 0) tp_print_captures(sh->res, w->kind);
  }
  tp_sweep_teardown(rk);
}

void *tp_rank_main(void *arg) {
  tp_rank_arg *a = arg;
  tp_shared *sh = a->sh;
  tp_rank rk;
  memset(&rk, 0, sizeof rk);
  rk.sh = sh;
  rk.o = sh->o;
  rk.rank = a->rank;
  rk.dev = sh->device[a->rank];
  rk.b = sh->b[a->rank];
  rk.comm = sh->comm[a->rank];
  rk.nccl = sh->nccl[a->rank];
  TP_CUDA(cudaSetDevice(rk.dev)); /* before this thread's first CUDA call; kept for its life */
  mdr_stream stream = NULL;
  TP_MDR(rk.b, mdr_backend_stream_create(rk.b, &stream));
  rk.stream = (cudaStream_t)stream;
  const size_t reps = rk.o->reps;
  rk.start = xmalloc(reps * sizeof *rk.start);
  rk.stop = xmalloc(reps * sizeof *rk.stop);
  for (size_t i = 0; i < reps; i++) {
    TP_CUDA(cudaEventCreate(&rk.start[i]));
    TP_CUDA(cudaEventCreate(&rk.stop[i]));
  }
  rk.cpu = xmalloc(reps * sizeof *rk.cpu);
  void *dev_words = NULL;
  TP_CUDA(cudaHostGetDevicePointer(&dev_words, (void *)sh->words, 0));
  rk.release_dev = (const volatile uint32_t *)dev_words;
  rk.timed_out_dev = (uint32_t *)dev_words + 1 + rk.rank;

  size_t total = sh->res->cap_cases, index = 0;
#if defined(MDR_HAVE_NCCL_DEVICE)
  if (rk.o->barrier) tp_barrier_compare(&rk);
  else
#endif
  if (rk.o->norm) tp_norm(&rk);
  else if (rk.o->soak) tp_soak(&rk);
  else
    for (int s = 0; s < TP_SWEEP_COUNT; s++)
      if (sh->sweeps[s].n) tp_run_sweep(&rk, &sh->sweeps[s], &index, total);

  tp_rank_sync(&rk, "the end");
  for (size_t i = 0; i < reps; i++) {
    TP_CUDA(cudaEventDestroy(rk.start[i]));
    TP_CUDA(cudaEventDestroy(rk.stop[i]));
  }
  free(rk.start);
  free(rk.stop);
  free(rk.cpu);
  mdr_backend_stream_destroy(rk.b, stream);
  return NULL;
}

#endif

