/* mdr_bench_tp_norm.c — mdr-bench-tp --norm: the fused all-reduce +
 * residual add + RMSNorm (mdr_all_reduce_desc.norm_output) against the
 * unfused chain and against NCCL + RMSNorm, on both ranks, at decode token
 * counts and hidden sizes (--norm-tokens, --norm-hidden), bf16.
 *
 * Paths, each the body of an EXACT graph cache replayed with device steps
 * (mdr_graph_cache_step_device), so that every path holds the same step
 * around it:
 *   fused-1shot    mdr_all_reduce, ONE_SHOT, residual + norm_output: the
 *                  library's choice, which MDR_AR_NORM_FUSE sets (read when
 *                  the communicator is made): always, the fused kernel for
 *                  every call; never, the library's chain (the plain kernel,
 *                  then the residual + norm kernel); auto (the default),
 *                  fused only up to 512 KiB. What ran is in the output
 *                  (mdr_all_reduce_norm_fused: norm_in fused or own-kernel)
 *   unfused-1shot  mdr_all_reduce, ONE_SHOT, no residual; then one kernel of
 *                  the same arithmetic: residual += sum, RMSNorm into the
 *                  output (mdr_cuda_ar_residual_norm, the kernel NCCL's path
 *                  runs after its collective)
 *   fused-2shot    the same as fused-1shot, TWO_SHOT
 *   unfused-2shot  the same as unfused-1shot, TWO_SHOT
 *   nccl+norm      mdr_all_reduce, NCCL, residual + norm_output: ncclAllReduce
 *                  then that kernel
 * The reduced rows are TP_BUFFER (lora_delta), the residual lora_xa, the
 * norm's output lora_hact: buffers outside every zero plan, so the step's
 * zeroing leaves them alone; the weight is a cudaMalloc row of its own on
 * each rank (each rank its own values).
 *
 * Validation, per (hidden, tokens, path), before any timing: each rank
 * uploads its rows (small integers: exact sums), its residual (small
 * integers), a poisoned output and its weight; one step; every element of
 * the three buffers read back and checked on the host: the sums, residual +
 * sum, and the norm from tests/ar_norm_ref.h (the contract's arithmetic,
 * bit for bit) for the first `tokens` rows, and the poison / the inputs
 * untouched past them. A difference ends the run (exit 1). The rows are
 * then zeroed, so the timed steps sum zeros.
 *
 * Timing: the blocked method of the sweeps (bench/README.md): both ranks
 * enqueue a blocker, an event, one step, an event; one store releases both
 * GPUs; per rep the slower rank counts; median, p10, p90 over --reps after
 * TP_WARMUP untimed steps. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_tp_rank.h"

#ifdef TP_GPU
#include "all_reduce.h" /* mdr_cuda_ar_residual_norm: the unfused chain's second kernel */
#include "ar_norm_ref.h" /* the contract's arithmetic (tests/) */

#define TPN_RES MDR_BUF_LORA_XA
#define TPN_OUT MDR_BUF_LORA_HACT
#define TPN_EPS 1e-6f

typedef enum tpn_path { TPN_FUSED_1, TPN_UNFUSED_1, TPN_FUSED_2, TPN_UNFUSED_2, TPN_NCCL, TPN_COUNT } tpn_path;
static const char *const k_tpn_names[TPN_COUNT] = {"fused-1shot", "unfused-1shot", "fused-2shot", "unfused-2shot",
                                                   "nccl+norm"};

typedef struct tpn_body {
  mdr_arena *arena;
  tpn_path p;
  mdr_dptr weight;
  size_t row_bytes;
  size_t calls;
} tpn_body;

/* The path's descriptor of `tokens` rows (the fused paths' with
 * norm_output). */
static mdr_all_reduce_desc tpn_desc(const tpn_body *c, size_t tokens) {
  mdr_all_reduce_desc d = mdr_all_reduce_desc_make(TP_BUFFER, MDR_DTYPE_BF16, tokens);
  d.algo = c->p == TPN_NCCL ? MDR_ALL_REDUCE_NCCL
           : (c->p == TPN_FUSED_1 || c->p == TPN_UNFUSED_1) ? MDR_ALL_REDUCE_ONE_SHOT
                                                             : MDR_ALL_REDUCE_TWO_SHOT;
  const int fused = c->p == TPN_FUSED_1 || c->p == TPN_FUSED_2 || c->p == TPN_NCCL;
  if (fused) {
    d.residual = TPN_RES;
    d.norm_output = TPN_OUT;
    d.norm_weight = c->weight;
    d.norm_eps = TPN_EPS;
  }
  return d;
}

static mdr_status tpn_body_fn(void *user, mdr_stream stream, size_t tokens) {
  tpn_body *c = user;
  c->calls++;
  const mdr_all_reduce_desc d = tpn_desc(c, tokens);
  const int fused = d.norm_output != MDR_BUF_COUNT;
  mdr_status st = mdr_all_reduce(c->arena, &d, stream);
  if (st != MDR_OK || fused) return st;
  void *res = (void *)(uintptr_t)mdr_arena_ptr(c->arena, TPN_RES);
  const void *sum = (const void *)(uintptr_t)mdr_arena_ptr(c->arena, TP_BUFFER);
  void *out = (void *)(uintptr_t)mdr_arena_ptr(c->arena, TPN_OUT);
  const int e = mdr_cuda_ar_residual_norm(res, sum, out, (const void *)(uintptr_t)c->weight, TPN_EPS, c->row_bytes,
                                          tokens, NULL, MDR_ARP_BF16, stream);
  return e ? MDR_ERR_BACKEND : MDR_OK;
}

/* Rank r's values (small integers: every sum exact in bf16). */
static int tpn_row_value(int r, size_t i) { return (int)((i * 5 + (i >> 7) * 3 + (size_t)r * 11) % 23) - 11; }
static int tpn_res_value(size_t i) { return (int)((i * 3 + (i >> 9)) % 13) - 6; }
static float tpn_weight_value(int r, size_t i) { return 0.5f + (float)((i * 5 + (size_t)r * 3) % 17) / 16.0f; }

/* Rank 0's figures: [hidden][tokens][path] medians (NAN: skipped). */
typedef struct tpn_fig {
  summary s;
  bool ran;
  int norm_in; /* mdr_all_reduce_norm_fused of the path's call: 1 fused, 0 its own kernel, -1 no norm_output */
  char why[160];
} tpn_fig;

static const char *tpn_norm_in(int v) { return v > 0 ? "fused" : v == 0 ? "own-kernel" : ""; }

static void tpn_check(tp_rank *rk, size_t h, size_t tokens, size_t m, tpn_path p, const uint16_t *buf,
                      const uint16_t *res, const uint16_t *out, const uint16_t *w) {
  const size_t row_e = h;
  uint32_t *rrow = xmalloc(row_e * 4), *wrow = xmalloc(row_e * 4), *orow = xmalloc(row_e * 4);
  for (size_t e = 0; e < row_e; e++) wrow[e] = w[e];
  for (size_t row = 0; row < m; row++) {
    for (size_t e = 0; e < row_e; e++) {
      const size_t i = row * row_e + e;
      const int sum = tpn_row_value(0, i) + tpn_row_value(1, i);
      const uint16_t want = row < tokens ? tp_to_bf16((float)sum) : tp_to_bf16((float)tpn_row_value(rk->rank, i));
      const uint16_t want_res = tp_to_bf16((float)(tpn_res_value(i) + (row < tokens ? sum : 0)));
      if (buf[i] != want || res[i] != want_res)
        tp_die("norm: rank %d, hidden %zu, %zu tokens, %s: row %zu element %zu: sum 0x%04x (want 0x%04x), residual "
               "0x%04x (want 0x%04x)",
               rk->rank, h, tokens, k_tpn_names[p], row, e, buf[i], want, res[i], want_res);
      rrow[e] = want_res;
    }
    if (row < tokens) nref_row(0, rrow, wrow, row_e, TPN_EPS, orow);
    else
      for (size_t e = 0; e < row_e; e++) orow[e] = 0x7DEDu;
    for (size_t e = 0; e < row_e; e++)
      if (out[row * row_e + e] != orow[e])
        tp_die("norm: rank %d, hidden %zu, %zu tokens, %s: norm_output row %zu element %zu is 0x%04x, the contract's "
               "arithmetic gives 0x%04x",
               rk->rank, h, tokens, k_tpn_names[p], row, e, out[row * row_e + e], orow[e]);
  }
  free(rrow);
  free(wrow);
  free(orow);
}

/* One timed step of a path: its cache's graph, device ids. */
typedef struct tpn_step_ctx {
  mdr_graph_cache *cache;
  mdr_dptr ids;
  size_t tokens;
} tpn_step_ctx;

static void tpn_step(tp_rank *rk, void *ctx) {
  const tpn_step_ctx *c = ctx;
  TP_MDR(rk->b, mdr_graph_cache_step_device(c->cache, c->ids, c->tokens));
}

static void tpn_report(const tp_options *o, const tp_run_info *info, tpn_fig *figs) {
  const size_t nt = o->n_norm_tokens;
  char path[4200];
  snprintf(path, sizeof path, "%s/norm.csv", info->out_dir);
  FILE *csv = fopen(path, "w");
  snprintf(path, sizeof path, "%s/norm.json", info->out_dir);
  FILE *js = fopen(path, "w");
  if (!csv || !js) tp_die("norm: cannot write %s", path);
  const char *fuse = getenv("MDR_AR_NORM_FUSE");
  fprintf(csv, "hidden,tokens,path,gpu_us_med,gpu_us_p10,gpu_us_p90,skipped,norm_in\n");
  fprintf(js, "{\n  \"mode\": \"norm\",\n  \"reps\": %zu,\n  \"eps\": %g,\n  \"norm_fuse\": \"%.40s\",\n  \"cases\": [\n",
          o->reps, (double)TPN_EPS, fuse ? fuse : "");
  int first = 1;
  for (size_t hi = 0; hi < o->n_norm_hidden; hi++) {
    const size_t h = o->norm_hidden[hi];
    printf("\nnorm: hidden %zu (rows of %zu B), bf16, GPU us (median, slower rank), %zu reps\n", h, 2 * h, o->reps);
    printf("%7s %12s %14s %7s %12s %14s %7s %10s %9s\n", "tokens", "fused-1shot", "unfused-1shot", "x1", "fused-2shot",
           "unfused-2shot", "x2", "nccl+norm", "xnccl");
    for (size_t ti = 0; ti < nt; ti++) {
      const tpn_fig *f = &figs[(hi * nt + ti) * TPN_COUNT];
      double med[TPN_COUNT];
      for (int p = 0; p < TPN_COUNT; p++) {
        med[p] = f[p].ran ? f[p].s.med : NAN;
        const char *in = f[p].ran ? tpn_norm_in(f[p].norm_in) : "";
        fprintf(csv, "%zu,%zu,%s,%.3f,%.3f,%.3f,%s,%s\n", h, o->norm_tokens[ti], k_tpn_names[p], med[p],
                f[p].ran ? f[p].s.p10 : NAN, f[p].ran ? f[p].s.p90 : NAN, f[p].ran ? "" : f[p].why, in);
        char num[64] = "null";
        if (f[p].ran) snprintf(num, sizeof num, "%.3f", med[p]);
        fprintf(js, "%s    {\"hidden\": %zu, \"tokens\": %zu, \"path\": \"%s\", \"gpu_us_med\": %s, "
                    "\"skipped\": \"%s\", \"norm_in\": \"%s\"}",
                first ? "" : ",\n", h, o->norm_tokens[ti], k_tpn_names[p], num, f[p].ran ? "" : f[p].why, in);
        first = 0;
      }
      const double best = fmin(med[TPN_FUSED_1], med[TPN_FUSED_2]);
      /* '*': the fused path's norm ran in its own kernel (the library's chain) */
      printf("%7zu %11.2f%s %14.2f %7.2f %11.2f%s %14.2f %7.2f %10.2f %9.2f\n", o->norm_tokens[ti], med[TPN_FUSED_1],
             f[TPN_FUSED_1].ran && f[TPN_FUSED_1].norm_in == 0 ? "*" : " ", med[TPN_UNFUSED_1],
             med[TPN_FUSED_1] / med[TPN_UNFUSED_1], med[TPN_FUSED_2],
             f[TPN_FUSED_2].ran && f[TPN_FUSED_2].norm_in == 0 ? "*" : " ", med[TPN_UNFUSED_2],
             med[TPN_FUSED_2] / med[TPN_UNFUSED_2], med[TPN_NCCL], best / med[TPN_NCCL]);
    }
  }
  fprintf(js, "\n  ]\n}\n");
  fclose(csv);
  fclose(js);
  printf("\nx1, x2: fused over unfused with the same algorithm (the goal: <= 0.85 at 1-64 tokens); xnccl: the better "
         "fused over nccl+norm; *: the library ran that call's norm in its own kernel (MDR_AR_NORM_FUSE=%s; always: "
         "the fused kernel for every call, never: the library's chain)\nwrote %s/norm.csv, %s/norm.json\n",
         fuse ? fuse : "unset, auto", info->out_dir, info->out_dir);
  fflush(stdout);
}

void tp_norm(tp_rank *rk) {
  tp_shared *sh = rk->sh;
  const tp_options *o = rk->o;
  const size_t nt = o->n_norm_tokens;
  size_t m = 1;
  for (size_t i = 0; i < nt; i++) m = o->norm_tokens[i] > m ? o->norm_tokens[i] : m;
  tpn_fig *figs = NULL;
  if (rk->rank == 0) {
    figs = xmalloc(o->n_norm_hidden * nt * TPN_COUNT * sizeof *figs);
    memset(figs, 0, o->n_norm_hidden * nt * TPN_COUNT * sizeof *figs);
  }
  for (size_t hi = 0; hi < o->n_norm_hidden; hi++) {
    const size_t h = o->norm_hidden[hi], row = 2 * h, bytes = m * row;
    tp_progress("norm setup");
    mdr_sizes sizes;
    memset(&sizes, 0, sizeof sizes);
    sizes.max_batch_tokens = m;
    sizes.logits_rows = 1;
    sizes.bytes[TP_BUFFER] = sizes.bytes[TPN_RES] = sizes.bytes[TPN_OUT] = bytes;
    sizes.bytes[MDR_BUF_TOKEN_IDS] = m * 4 > 256 ? m * 4 : 256;
    tp_barrier(rk);
    TP_MDR(rk->b, mdr_arena_create_on_comm(rk->comm, &sizes, &rk->arena));
    sh->flag[rk->rank] = mdr_all_reduce_kernels(rk->arena) != 0;
    tp_barrier(rk);
    const bool kernels = sh->flag[0] && sh->flag[1];
    if (rk->rank == 0 && hi == 0) {
      const char *fuse = getenv("MDR_AR_NORM_FUSE");
      printf("\nnorm: the fused all-reduce + residual + RMSNorm, bf16, eps %g; window %s; mdr's kernels %s; "
             "MDR_AR_NORM_FUSE=%s\n",
             (double)TPN_EPS, mdr_window_name(mdr_arena_window(rk->arena)), kernels ? "run" : "do NOT run (skipped)",
             fuse ? fuse : "(unset: auto)");
      fflush(stdout);
    }
    /* this rank's weight, its own values */
    uint16_t *w = xmalloc(row);
    for (size_t i = 0; i < h; i++) w[i] = tp_to_bf16(tpn_weight_value(rk->rank, i)); /* exact: k / 16 */
    void *wdev = NULL;
    TP_CUDA(cudaMalloc(&wdev, row));
    TP_CUDA(cudaMemcpy(wdev, w, row, cudaMemcpyHostToDevice));
    uint16_t *in = xmalloc(bytes), *res0 = xmalloc(bytes), *poison = xmalloc(bytes);
    uint16_t *gb = xmalloc(bytes), *gr = xmalloc(bytes), *go = xmalloc(bytes);
    for (size_t i = 0; i < m * h; i++) {
      in[i] = tp_to_bf16((float)tpn_row_value(rk->rank, i));
      res0[i] = tp_to_bf16((float)tpn_res_value(i));
      poison[i] = 0x7DEDu;
    }
    tpn_body body[TPN_COUNT];
    mdr_graph_cache *cache[TPN_COUNT];
    for (int p = 0; p < TPN_COUNT; p++) {
      body[p] = (tpn_body){.arena = rk->arena, .p = (tpn_path)p, .weight = (mdr_dptr)(uintptr_t)wdev, .row_bytes = row};
      mdr_graph_cache_options co;
      mdr_graph_cache_options_default(&co);
      co.mode = MDR_GRAPH_EXACT;
      co.zero = MDR_ZERO_FUSED;
      co.body = tpn_body_fn;
      co.user = &body[p];
      tp_barrier(rk);
      TP_MDR(rk->b, mdr_graph_cache_create(rk->arena, rk->stream, &co, &cache[p]));
    }
    const mdr_dptr ids = mdr_arena_token_ids(rk->arena);
    char *base_buf = (char *)(uintptr_t)mdr_arena_ptr(rk->arena, TP_BUFFER);
    char *base_res = (char *)(uintptr_t)mdr_arena_ptr(rk->arena, TPN_RES);
    char *base_out = (char *)(uintptr_t)mdr_arena_ptr(rk->arena, TPN_OUT);
    for (size_t ti = 0; ti < nt; ti++) {
      const size_t tokens = o->norm_tokens[ti];
      for (int p = 0; p < TPN_COUNT; p++) {
        tpn_fig *f = figs ? &figs[(hi * nt + ti) * TPN_COUNT + p] : NULL;
        const bool mine = p != TPN_NCCL;
        if (mine && !kernels) {
          if (f) snprintf(f->why, sizeof f->why, "mdr's kernels do not run on this arena");
          continue;
        }
        if ((p == TPN_FUSED_1 || p == TPN_UNFUSED_1) && tokens * row > MDR_ALL_REDUCE_ONE_SHOT_MAX_BYTES) {
          if (f) snprintf(f->why, sizeof f->why, "over MDR_ALL_REDUCE_ONE_SHOT_MAX_BYTES");
          continue;
        }
        char what[96];
        snprintf(what, sizeof what, "norm: hidden %zu, %zu tokens, %s", h, tokens, k_tpn_names[p]);
        tp_progress(what);
        tp_barrier(rk);
        mdr_status st = mdr_graph_cache_prepare_device(cache[p], ids, &tokens, 1);
        if (st != MDR_OK)
          tp_die("%s: rank %d: prepare: %s: %s", what, rk->rank, mdr_status_string(st), mdr_backend_last_error(rk->b));
        tp_rank_sync(rk, what);
        /* validate: fresh inputs, one step, every element */
        TP_CUDA(cudaMemcpy(base_buf, in, bytes, cudaMemcpyHostToDevice));
        TP_CUDA(cudaMemcpy(base_res, res0, bytes, cudaMemcpyHostToDevice));
        TP_CUDA(cudaMemcpy(base_out, poison, bytes, cudaMemcpyHostToDevice));
        TP_CUDA(cudaDeviceSynchronize());
        tp_barrier(rk);
        const size_t calls0 = body[p].calls;
        TP_MDR(rk->b, mdr_graph_cache_step_device(cache[p], ids, tokens));
        tp_rank_sync(rk, what);
        if (body[p].calls != calls0) tp_die("%s: rank %d: the step ran the body (not a replay)", what, rk->rank);
        TP_CUDA(cudaMemcpy(gb, base_buf, bytes, cudaMemcpyDeviceToHost));
        TP_CUDA(cudaMemcpy(gr, base_res, bytes, cudaMemcpyDeviceToHost));
        TP_CUDA(cudaMemcpy(go, base_out, bytes, cudaMemcpyDeviceToHost));
        tpn_check(rk, h, tokens, m, (tpn_path)p, gb, gr, go, w);
        /* the timed steps sum zeros (the residual then stays as it is) */
        TP_CUDA(cudaMemset(base_buf, 0, bytes));
        TP_CUDA(cudaDeviceSynchronize());
        tp_barrier(rk);
        tpn_step_ctx step = {cache[p], ids, tokens};
        const summary s = tp_time_blocked(rk, tpn_step, &step, 1.0, "norm: timing");
        if (f) {
          const mdr_all_reduce_desc d = tpn_desc(&body[p], tokens);
          f->s = s;
          f->ran = true;
          f->norm_in = d.norm_output == MDR_BUF_COUNT ? -1 : mdr_all_reduce_norm_fused(rk->arena, &d);
        }
      }
    }
    tp_rank_sync(rk, "norm teardown");
    for (int p = 0; p < TPN_COUNT; p++) mdr_graph_cache_destroy(cache[p]);
    tp_barrier(rk);
    mdr_arena_destroy(rk->arena); /* both ranks together */
    rk->arena = NULL;
    TP_CUDA(cudaFree(wdev));
    free(w), free(in), free(res0), free(poison), free(gb), free(gr), free(go);
    tp_barrier(rk);
  }
  if (rk->rank == 0) {
    tpn_report(o, sh->info, figs);
    free(figs);
  }
  tp_barrier(rk);
}
#endif
