/* mdr_bench_tp_soak.c — mdr-bench-tp --soak N: mdr's all-reduce replayed
 * N times in one cached graph on both ranks, across the wrap of its epoch
 * counter, with every value checked on the device and the last replay's
 * buffer on the host (the method: below). The rank's state and the shared
 * helpers are in bench_tp_rank.h. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "all_reduce_impl.h" /* the protocol counters (mdr_all_reduce_state) */
#include "bench_tp_rank.h"

#ifdef TP_GPU

/* ---- the soak (--soak N) ----
 *
 * One arena on the communicator (TP_BUFFER of --soak-size bytes, rows of
 * TP_SIZE_ROW_BYTES), one EXACT cache whose body is: fill this rank's
 * input for replay g (tp_soak_value(rank, i, g), g a device counter), the
 * all-reduce (--soak-algo), check every element against both ranks' sum
 * for g on the device (wrong ones counted), g++. Both ranks set mdr's
 * epoch to 0xFFFFFFFF - N/2 first, then replay the graph N times back to
 * back with device steps (no staging slot: the host never waits for the
 * GPU but at the checks). Every TP_SOAK_CHECK_EVERY replays and after the
 * last: drain, read the device's count of wrong values and its replay
 * counter, read the whole buffer back and check it on the host (the result
 * of the last replay), read both ranks' epochs (each must be the start +
 * the calls so far, mod 2^32). The soak passes with no wrong value, every
 * epoch as expected, and the epoch wrapped. */

typedef struct tp_soak_ctx {
  mdr_arena *arena;
  mdr_all_reduce_algo algo;
  uint16_t *buf;      /* TP_BUFFER */
  size_t n_el;
  int rank;
  tp_soak_state *state; /* device */
  size_t calls;
} tp_soak_ctx;

static mdr_status tp_soak_body(void *user, mdr_stream stream, size_t tokens) {
  tp_soak_ctx *c = user;
  c->calls++;
  if (tp_launch_soak_fill((cudaStream_t)stream, c->buf, c->n_el, c->rank, c->state) != 0) return MDR_ERR_BACKEND;
  mdr_all_reduce_desc d = mdr_all_reduce_desc_make(TP_BUFFER, MDR_DTYPE_BF16, tokens);
  d.algo = c->algo;
  mdr_status st = mdr_all_reduce(c->arena, &d, stream);
  if (st != MDR_OK) return st;
  if (tp_launch_soak_check((cudaStream_t)stream, c->buf, c->n_el, c->state) != 0) return MDR_ERR_BACKEND;
  return MDR_OK;
}

static uint32_t tp_soak_epoch(tp_rank *rk) {
  uint32_t e = 0;
  mdr_arp_block st;
  TP_MDR(rk->b, mdr_all_reduce_state(rk->arena, &st, NULL));
  e = st.calls;
  return e;
}

/* One check after `done` replays; both ranks. Returns nothing: rank 0
 * accumulates into sh->soak and prints. */
static void tp_soak_check(tp_rank *rk, tp_soak_ctx *ctx, tp_soak_state *host_state, size_t done, uint32_t *last_epoch,
                          double t0, int *decile) {
  tp_shared *sh = rk->sh;
  tp_soak_result *res = sh->soak;
  tp_rank_sync(rk, "soak: draining for a check");
  TP_CUDA(cudaMemcpyAsync(host_state, ctx->state, sizeof *host_state, cudaMemcpyDeviceToHost, rk->stream));
  TP_CUDA(cudaMemcpyAsync(rk->back, ctx->buf, ctx->n_el * 2, cudaMemcpyDeviceToHost, rk->stream));
  tp_rank_sync(rk, "soak: reading back");
  if (host_state->gen != (uint32_t)done)
    tp_die("soak: rank %d: the device checked %u replays, %zu were stepped (a replay's kernels did not run)", rk->rank,
           host_state->gen, done);
  /* the host check of the last replay's result, every element */
  const uint32_t g = (uint32_t)done - 1;
  uint64_t wrong_host = 0;
  size_t first = SIZE_MAX;
  for (size_t i = 0; i < ctx->n_el; i++) {
    const float want = (float)(tp_soak_value(0, i, g) + tp_soak_value(1, i, g));
    if (tp_from_bf16(rk->back[i]) != want) {
      if (!wrong_host) first = i;
      wrong_host++;
    }
  }
  if (wrong_host)
    fprintf(stderr, "soak: rank %d: WRONG: %llu of %zu elements of replay %u wrong on the host check; element %zu "
                    "is %g, expected %d\n",
            rk->rank, (unsigned long long)wrong_host, ctx->n_el, g, first, (double)tp_from_bf16(rk->back[first]),
            tp_soak_value(0, first, g) + tp_soak_value(1, first, g));
  if (host_state->wrong && host_state->first_bad)
    fprintf(stderr, "soak: rank %d: WRONG: the device check counts %u wrong elements so far; the first seen: element "
                    "%u of replay %u\n",
            rk->rank, host_state->wrong, host_state->first_bad - 1, host_state->first_gen);
  sh->epoch[rk->rank] = tp_soak_epoch(rk);
  sh->soak_wrong[rk->rank] = wrong_host;
  sh->soak_dev_wrong[rk->rank] = host_state->wrong;
  tp_barrier(rk);
  if (rk->rank == 0) {
    const uint32_t want = res->epoch_start + (uint32_t)done; /* mod 2^32 */
    res->checks++;
    res->wrong_host += sh->soak_wrong[0] + sh->soak_wrong[1];
    res->wrong_device = sh->soak_dev_wrong[0] + sh->soak_dev_wrong[1]; /* cumulative on the device */
    res->wrong = res->wrong_host + res->wrong_device;
    for (int r = 0; r < TP_RANKS; r++) {
      if (sh->epoch[r] != want) {
        res->epoch_mismatches++;
        fprintf(stderr, "soak: rank %d: WRONG EPOCH after %zu replays: 0x%08x, expected 0x%08x (start 0x%08x + "
                        "%zu calls, mod 2^32): it advanced by %u\n",
                r, done, sh->epoch[r], want, res->epoch_start, done, sh->epoch[r] - res->epoch_start);
      }
      res->epoch_end[r] = sh->epoch[r];
    }
    if (sh->epoch[0] < *last_epoch) res->wrapped = true;
    *last_epoch = sh->epoch[0];
    res->calls = done;
    const int d = (int)(done * 10 / res->replays);
    if (d > *decile || done == res->replays) {
      *decile = d;
      const double us = now_us() - t0;
      printf("soak: %10zu / %zu replays (%3d%%): epoch 0x%08x / 0x%08x (rank 0 / 1)%s, wrong values %llu, %.2f us "
             "per replay, %.0f s\n",
             done, res->replays, (int)(done * 100 / res->replays), sh->epoch[0], sh->epoch[1],
             res->wrapped ? ", wrapped" : "", (unsigned long long)res->wrong, us / (double)done, us / 1e6);
      fflush(stdout);
    }
  }
  tp_barrier(rk);
}

void tp_soak(tp_rank *rk) {
  tp_shared *sh = rk->sh;
  const tp_options *o = rk->o;
  tp_soak_result *res = sh->soak;
  const size_t bytes = o->soak_bytes, rows = bytes / TP_SIZE_ROW_BYTES, n_el = bytes / 2;
  tp_progress("soak setup");
  mdr_sizes sizes;
  memset(&sizes, 0, sizeof sizes);
  sizes.max_batch_tokens = rows;
  sizes.logits_rows = 1;
  sizes.bytes[TP_BUFFER] = bytes;
  sizes.bytes[MDR_BUF_TOKEN_IDS] = rows * 4 > 256 ? rows * 4 : 256;
  tp_barrier(rk);
  TP_MDR(rk->b, mdr_arena_create_on_comm(rk->comm, &sizes, &rk->arena));
  sh->flag[rk->rank] = mdr_all_reduce_kernels(rk->arena) != 0;
  if (!sh->flag[rk->rank])
    snprintf(sh->note[rk->rank], sizeof sh->note[rk->rank], "%s", mdr_backend_last_error(rk->b));
  tp_barrier(rk);
  const mdr_all_reduce_desc auto_desc = mdr_all_reduce_desc_make(TP_BUFFER, MDR_DTYPE_BF16, rows);
  const mdr_all_reduce_algo resolved = o->soak_algo == MDR_ALL_REDUCE_AUTO ? mdr_all_reduce_choice(rk->arena, &auto_desc)
                                                           : o->soak_algo;
  if (rk->rank == 0) {
    for (int r = 0; r < TP_RANKS; r++)
      if (!sh->flag[r])
        tp_exit(TP_EXIT_SKIP,
                "skipped: the soak needs mdr's all-reduce kernels, and mdr_all_reduce_kernels is 0 on rank %d "
                "(window %s; mdr_backend_last_error: \"%s\")",
                r, mdr_window_name(mdr_arena_window(rk->arena)), sh->note[r]);
    if (resolved == MDR_ALL_REDUCE_NCCL || resolved >= MDR_ALL_REDUCE_ALGO_COUNT)
      tp_die("soak: AUTO runs %s at %zu B here (mdr_all_reduce_choice): mdr's kernels and their epoch are not "
             "used; soak them with --soak-algo one-shot or two-shot",
             mdr_all_reduce_algo_name(resolved), bytes);
    *res = (tp_soak_result){.replays = o->soak, .rows = rows, .bytes = bytes, .algo = o->soak_algo,
                            .resolved = resolved};
    printf("\nsoak: %zu replays, %zu B (%zu rows of %d B), algorithm %s%s%s, window %s; checks every %d replays\n",
           o->soak, bytes, rows, TP_SIZE_ROW_BYTES, mdr_all_reduce_algo_name(o->soak_algo),
           o->soak_algo == MDR_ALL_REDUCE_AUTO ? " -> " : "", o->soak_algo == MDR_ALL_REDUCE_AUTO ? mdr_all_reduce_algo_name(resolved) : "",
           mdr_window_name(mdr_arena_window(rk->arena)), TP_SOAK_CHECK_EVERY);
    fflush(stdout);
  }
  tp_barrier(rk);
  /* the device state, the host's copies */
  tp_soak_state *state = NULL, *host_state = NULL;
  TP_CUDA(cudaMalloc((void **)&state, sizeof *state));
  TP_CUDA(cudaMemsetAsync(state, 0, sizeof *state, rk->stream));
  TP_CUDA(cudaHostAlloc((void **)&host_state, sizeof *host_state, cudaHostAllocPortable));
  TP_CUDA(cudaHostAlloc((void **)&rk->back, bytes, cudaHostAllocPortable));
  tp_soak_ctx ctx = {.arena = rk->arena, .algo = o->soak_algo, .n_el = n_el, .rank = rk->rank, .state = state,
                     .buf = (uint16_t *)(uintptr_t)mdr_arena_ptr(rk->arena, TP_BUFFER)};
  mdr_graph_cache_options co;
  mdr_graph_cache_options_default(&co);
  co.mode = MDR_GRAPH_EXACT;
  co.zero = MDR_ZERO_FUSED;
  co.body = tp_soak_body;
  co.user = &ctx;
  mdr_graph_cache *cache = NULL;
  TP_MDR(rk->b, mdr_graph_cache_create(rk->arena, rk->stream, &co, &cache));
  const mdr_dptr ids = mdr_arena_token_ids(rk->arena);
  tp_barrier(rk);
  mdr_status st = mdr_graph_cache_prepare_device(cache, ids, &rows, 1);
  if (st != MDR_OK)
    tp_die("soak: rank %d: mdr_graph_cache_prepare_device of %zu rows: %s: %s", rk->rank, rows, mdr_status_string(st),
           mdr_backend_last_error(rk->b));
  tp_rank_sync(rk, "soak: the graph");
  /* the epoch: both ranks, nothing in flight */
  const uint32_t start = 0xFFFFFFFFu - (uint32_t)(o->soak / 2);
  tp_barrier(rk);
  {
    /* every counter at `start`: the state a run of that many calls leaves
     * (barriers with their flags), so the soak crosses every wrap */
    const mdr_arp_block set = {.calls = start, .one_shot = start, .barriers = start};
    TP_MDR(rk->b, mdr_all_reduce_state(rk->arena, NULL, &set));
  }
  tp_barrier(rk);
  const uint32_t e0 = tp_soak_epoch(rk);
  if (e0 != start) tp_die("soak: rank %d: the calls counter reads 0x%08x after setting 0x%08x", rk->rank, e0, start);
  if (rk->rank == 0) {
    res->epoch_start = start;
    printf("soak: epoch set to 0x%08x on both ranks (0xFFFFFFFF - %zu): it wraps at replay %zu\n", start, o->soak / 2,
           (size_t)(0xFFFFFFFFu - start) + 1);
    fflush(stdout);
  }
  uint32_t last_epoch = start;
  int decile = 0;
  const size_t calls0 = ctx.calls;
  tp_barrier(rk);
  const double t0 = now_us();
  for (size_t done = 0; done < o->soak;) {
    st = mdr_graph_cache_step_device(cache, ids, rows);
    if (st != MDR_OK)
      tp_die("soak: rank %d: mdr_graph_cache_step_device at replay %zu: %s: %s", rk->rank, done,
             mdr_status_string(st), mdr_backend_last_error(rk->b));
    done++;
    if (done % TP_SOAK_CHECK_EVERY == 0 || done == o->soak)
      tp_soak_check(rk, &ctx, host_state, done, &last_epoch, t0, &decile);
  }
  const double wall_us = now_us() - t0;
  if (ctx.calls != calls0)
    tp_die("soak: rank %d: the body ran %zu times during the soak: steps were not replays", rk->rank,
           ctx.calls - calls0);
  mdr_graph_stats gs;
  TP_MDR(rk->b, mdr_graph_cache_stats(cache, &gs));
  if (gs.eager_steps) tp_die("soak: rank %d: %llu steps ran eagerly", rk->rank, (unsigned long long)gs.eager_steps);
  tp_barrier(rk);
  if (rk->rank == 0) {
    res->wall_s = wall_us / 1e6;
    res->us_per_replay = wall_us / (double)o->soak;
    const bool advanced = (uint32_t)(res->epoch_end[0] - start) == (uint32_t)res->calls &&
                          (uint32_t)(res->epoch_end[1] - start) == (uint32_t)res->calls;
    res->ok = res->wrong == 0 && res->epoch_mismatches == 0 && advanced && res->wrapped;
  }
  tp_rank_sync(rk, "soak teardown");
  mdr_graph_cache_destroy(cache);
  tp_barrier(rk);
  mdr_arena_destroy(rk->arena); /* both ranks together */
  rk->arena = NULL;
  TP_CUDA(cudaFree(state));
  TP_CUDA(cudaFreeHost(host_state));
  TP_CUDA(cudaFreeHost(rk->back));
  rk->back = NULL;
  tp_barrier(rk);
}
#endif
