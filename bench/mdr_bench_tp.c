/* mdr_bench_tp.c — mdr-bench-tp: what one all-reduce costs a two-GPU
 * tensor-parallel decode step, eight ways side by side in one run (NCCL
 * eager, NCCL captured in a CUDA graph, NCCL on a symmetric window captured;
 * mdr's all-reduce inside a graph cache body: AUTO replayed by
 * mdr_graph_cache_step or by mdr_graph_cache_step_device, one-shot and
 * two-shot forced, and AUTO in one DYNAMIC graph reading the row count on
 * the device), over message sizes and over decode token counts at the GLM
 * preset's hidden size; or (--soak N) N replays of one graph holding mdr's
 * all-reduce, checked, across the wrap of its 32-bit epoch; or (--norm) the
 * fused all-reduce + residual + RMSNorm against the unfused chain and NCCL +
 * RMSNorm; or (--barrier) mdr's block barrier against NCCL's LSA barrier.
 * bench/README.md
 * (section mdr-bench-tp) explains every option, column and file;
 * bench_tp.h lists the files.
 *
 * This file: the device check (exit 77
 * without two GPUs or NCCL), the communicators (one ncclComm_t per GPU from
 * ncclCommInitAll, shared by every path; mdr adopts them), the two rank
 * threads, and the report at the end.
 *
 * Safety on shared machines: NCCL_NVLS_ENABLE=0 is set before any NCCL call
 * and checked before the communicators are made; nothing here creates an
 * NVLink multicast object. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_tp.h"

#ifdef TP_GPU
#include <pthread.h>
#endif

/* ---- main ---- */

#ifdef TP_GPU
static int tp_gpu_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

static void tp_print_sweeps(const tp_options *o, const tp_sweep *sw) {
  if (o->barrier) {
    printf("barrier: mdr's block barrier against NCCL's LSA barrier, %d barriers a launch, grids 1, 8, 32 and the "
           "cap; reps %zu, warm-up %d\n",
           TP_BARRIER_K, o->reps, TP_WARMUP);
    return;
  }
  if (o->norm) {
    printf("norm: the fused all-reduce + residual + RMSNorm (fused-1shot, fused-2shot) against the unfused chain "
           "(unfused-1shot, unfused-2shot) and nccl+norm; tokens ");
    for (size_t i = 0; i < o->n_norm_tokens; i++) printf("%s%zu", i ? "," : "", o->norm_tokens[i]);
    printf("; hidden ");
    for (size_t i = 0; i < o->n_norm_hidden; i++) printf("%s%zu", i ? "," : "", o->norm_hidden[i]);
    printf("; reps %zu, warm-up %d\n", o->reps, TP_WARMUP);
    return;
  }
  if (o->soak) {
    printf("soak: %zu replays of one EXACT graph: fill (a new input each replay), mdr_all_reduce (%s) of %zu B "
           "(%zu rows of %d B), check on the device; host checks every %d replays\n",
           o->soak, mdr_all_reduce_algo_name(o->soak_algo), o->soak_bytes, o->soak_bytes / TP_SIZE_ROW_BYTES,
           TP_SIZE_ROW_BYTES, TP_SOAK_CHECK_EVERY);
    return;
  }
  for (int s = 0; s < TP_SWEEP_COUNT; s++) {
    const tp_sweep *w = &sw[s];
    if (!w->n) {
      printf("sweep %-6s: off\n", k_tp_sweep_names[s]);
      continue;
    }
    printf("sweep %-6s: rows of %zu B (%zu bf16%s), row counts ", k_tp_sweep_names[s], w->row_bytes,
           w->row_bytes / 2, s == TP_SWEEP_TOKENS ? ", " TP_PRESET "'s hidden size" : "");
    for (size_t i = 0; i < w->n; i++) printf("%s%zu", i ? "," : "", w->rows[i]);
    size_t lo = w->rows[0];
    for (size_t i = 1; i < w->n; i++) lo = w->rows[i] < lo ? w->rows[i] : lo;
    printf(" -> %zu B .. %zu B; buffers of %zu rows\n", lo * w->row_bytes, w->m * w->row_bytes, w->m);
  }
  printf("paths:");
  for (int p = 0; p < TP_PATH_COUNT; p++)
    if (o->path_on[p]) printf(" %s", k_tp_path_names[p]);
  printf("; reps %zu, K %d, warm-up %d\n", o->reps, TP_K, TP_WARMUP);
}

static size_t tp_max_of(const size_t *v, size_t n) {
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (v[i] > m) m = v[i];
  return m;
}
#endif

int main(int argc, char **argv) {
  /* NVLink multicast (NVLS) must stay off on the shared machines: set
   * before any NCCL call (overwriting whatever the environment says) and
   * checked again before the communicators are made. */
  if (setenv("NCCL_NVLS_ENABLE", "0", 1) != 0) tp_die("setenv NCCL_NVLS_ENABLE=0 failed");

  tp_options o;
  tp_run_info info;
  memset(&info, 0, sizeof info);
  const time_t started = time(NULL);
  info.t_start_us = now_us();
  struct tm utc;
  char stamp[32];
  gmtime_r(&started, &utc);
  strftime(info.timestamp, sizeof info.timestamp, "%Y-%m-%dT%H:%M:%SZ", &utc);
  strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%SZ", &utc);

  tp_parse_options(argc, argv, &o); /* exit 2 on a bad option */
  tp_check_out_dir(&o);             /* exit 2 on an --out holding results; creates nothing */

#ifndef TP_GPU
  tp_exit(TP_EXIT_SKIP, "skipped: this build has no %s (mdr-bench-tp needs CUDA, NCCL and two GPUs)",
#ifdef MDR_HAVE_CUDA
          "NCCL"
#else
          "CUDA"
#endif
  );
#else
#if !defined(MDR_HAVE_NCCL_DEVICE)
  if (o.barrier)
    tp_exit(TP_EXIT_SKIP, "skipped: --barrier needs NCCL's device API (nccl_device.h, NCCL 2.28 or later), and "
                          "this build's NCCL has none");
#endif
  if (!mdr_comm_nccl_available())
    tp_exit(TP_EXIT_SKIP, "skipped: libmdr was built without NCCL (mdr_comm_nccl_available() is 0)");
  const int n_gpus = tp_gpu_count();
  if (n_gpus < TP_RANKS)
    tp_exit(TP_EXIT_SKIP, "skipped: %d CUDA device%s visible, two needed", n_gpus, n_gpus == 1 ? "" : "s");

  tp_shared sh;
  memset(&sh, 0, sizeof sh);
  sh.o = &o;
  sh.progress_in_place = isatty(STDERR_FILENO) && isatty(STDOUT_FILENO);
  tp_sweep sweeps[TP_SWEEP_COUNT];
  memset(sweeps, 0, sizeof sweeps);
  sh.sweeps = sweeps;

  mdr_model_config cfg;
  TP_MDR(NULL, mdr_model_preset(TP_PRESET, &cfg));
  info.hidden = cfg.hidden_size;
  sweeps[TP_SWEEP_SIZES].kind = TP_SWEEP_SIZES;
  sweeps[TP_SWEEP_SIZES].row_bytes = TP_SIZE_ROW_BYTES;
  for (size_t i = 0; i < o.n_sizes; i++) sweeps[TP_SWEEP_SIZES].rows[i] = o.sizes[i] / TP_SIZE_ROW_BYTES;
  sweeps[TP_SWEEP_SIZES].n = o.n_sizes;
  sweeps[TP_SWEEP_TOKENS].kind = TP_SWEEP_TOKENS;
  sweeps[TP_SWEEP_TOKENS].row_bytes = cfg.hidden_size * 2;
  memcpy(sweeps[TP_SWEEP_TOKENS].rows, o.tokens, o.n_tokens * sizeof *o.tokens);
  sweeps[TP_SWEEP_TOKENS].n = o.n_tokens;
  for (int s = 0; s < TP_SWEEP_COUNT; s++) sweeps[s].m = tp_max_of(sweeps[s].rows, sweeps[s].n);

  tp_make_out_dir(&o, &info, stamp);
  pthread_t watchdog;
  if (pthread_create(&watchdog, NULL, tp_watchdog_main, NULL) != 0) tp_die("cannot start the watchdog thread");
  pthread_detach(watchdog);

  /* the devices */
  for (int r = 0; r < TP_RANKS; r++) {
    struct cudaDeviceProp prop;
    sh.device[r] = r;
    TP_CUDA(cudaGetDeviceProperties(&prop, r));
    snprintf(info.gpu_name[r], sizeof info.gpu_name[r], "%s", prop.name);
    info.cc_major[r] = prop.major;
    info.cc_minor[r] = prop.minor;
    TP_CUDA(cudaDeviceCanAccessPeer(&info.p2p[r], r, 1 - r));
  }
  TP_CUDA(cudaDriverGetVersion(&info.driver));
  TP_CUDA(cudaRuntimeGetVersion(&info.runtime));
  TP_NCCL(NULL, ncclGetVersion(&info.nccl_version));
  printf("mdr-bench-tp: two-GPU all-reduce, bf16 sum, in place; one thread per GPU\n");
  printf("devices: 0 %s (cc %d.%d), 1 %s (cc %d.%d); peer access 0->1 %s, 1->0 %s; %d visible\n",
         info.gpu_name[0], info.cc_major[0], info.cc_minor[0], info.gpu_name[1], info.cc_major[1], info.cc_minor[1],
         info.p2p[0] ? "yes" : "no", info.p2p[1] ? "yes" : "no", n_gpus);
  printf("nccl %d.%d.%d (code %d), NCCL_NVLS_ENABLE=%s (NVLink multicast off); driver %d, runtime %d\n",
         info.nccl_version / 10000, info.nccl_version / 100 % 100, info.nccl_version % 100, info.nccl_version,
         getenv("NCCL_NVLS_ENABLE"), info.driver, info.runtime);
  tp_print_sweeps(&o, sweeps);
  printf("output: %s/\n", info.out_dir);
  fflush(stdout);

  /* One ncclComm_t per GPU, shared by every path (the same channels and
   * tuning for every path); mdr adopts them, as an engine's would be. */
  const char *nvls = getenv("NCCL_NVLS_ENABLE");
  if (!nvls || strcmp(nvls, "0") != 0) tp_die("NCCL_NVLS_ENABLE is not 0 before ncclCommInitAll; refusing");
  tp_progress("ncclCommInitAll");
  TP_NCCL(NULL, ncclCommInitAll(sh.nccl, TP_RANKS, sh.device));
  for (int r = 0; r < TP_RANKS; r++) {
    TP_MDR(NULL, mdr_backend_cuda_create(sh.device[r], &sh.b[r]));
    TP_MDR(sh.b[r], mdr_comm_adopt_nccl(sh.b[r], sh.nccl[r], &sh.comm[r]));
    if (mdr_comm_rank(sh.comm[r]) != r || mdr_comm_size(sh.comm[r]) != TP_RANKS)
      tp_die("communicator %d: rank %d of %d (expected %d of %d)", r, mdr_comm_rank(sh.comm[r]),
             mdr_comm_size(sh.comm[r]), r, TP_RANKS);
  }
  tp_progress("setup");

  /* the blocker's words: mapped, portable pinned memory both GPUs poll */
  void *words = NULL;
  TP_CUDA(cudaSetDevice(sh.device[0]));
  TP_CUDA(cudaHostAlloc(&words, (1 + TP_RANKS) * sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable));
  memset(words, 0, (1 + TP_RANKS) * sizeof(uint32_t));
  sh.words = words;
  for (int r = 0; r < TP_RANKS; r++) sh.samples[r] = xmalloc(o.reps * sizeof(double));

  tp_results res;
  memset(&res, 0, sizeof res);
  sh.res = &res;
  sh.info = &info;
  tp_soak_result soak;
  memset(&soak, 0, sizeof soak);
  sh.soak = &soak;
  size_t n_counts = o.n_sizes + o.n_tokens;
  size_t n_paths = 0;
  for (int p = 0; p < TP_PATH_COUNT; p++) n_paths += o.path_on[p];
  res.cap_cases = n_counts * n_paths;
  res.cases = xmalloc(res.cap_cases * sizeof *res.cases);
  res.cap_captures = n_counts;
  res.captures = xmalloc(res.cap_captures * sizeof *res.captures);

  if (!o.soak && !o.norm && !o.barrier) tp_print_legend();
  fflush(stdout);
  if (pthread_barrier_init(&sh.barrier, NULL, TP_RANKS) != 0) tp_die("pthread_barrier_init failed");
  pthread_t th[TP_RANKS];
  tp_rank_arg args[TP_RANKS];
  for (int r = 0; r < TP_RANKS; r++) {
    args[r] = (tp_rank_arg){.sh = &sh, .rank = r};
    if (pthread_create(&th[r], NULL, tp_rank_main, &args[r]) != 0) tp_die("cannot start rank thread %d", r);
  }
  for (int r = 0; r < TP_RANKS; r++)
    if (pthread_join(th[r], NULL) != 0) tp_die("cannot join rank thread %d", r);
  pthread_barrier_destroy(&sh.barrier);
  info.wall_s = (now_us() - info.t_start_us) / 1e6;
  info.complete = true;

  /* results first: a teardown that hangs (the watchdog ends it) loses nothing */
  tp_progress("writing results");
  if (o.norm || o.barrier) {
    /* tp_norm / tp_barrier_compare printed their tables and wrote their files */
  } else if (o.soak) {
    tp_write_soak(&o, &info, &soak);
    printf("\nwrote %s/soak.json\n", info.out_dir);
    tp_print_soak(&soak); /* the last lines */
    /* a failed soak ends here (exit 1), before the teardown */
    if (!soak.ok)
      tp_exit(1, "soak failed: %llu wrong value%s, %llu epoch mismatch%s (the lines above say where)",
              (unsigned long long)soak.wrong, soak.wrong == 1 ? "" : "s", (unsigned long long)soak.epoch_mismatches,
              soak.epoch_mismatches == 1 ? "" : "es");
  } else {
    tp_write_results(&o, &info, sweeps, &res);
    printf("\nwrote %s/results.json, %s/results.csv, %s/capture.csv\n", info.out_dir, info.out_dir, info.out_dir);
    tp_print_headline(&o, &info, sweeps, &res); /* the last lines */
  }
  fflush(stdout);

  tp_progress("teardown");
  for (int r = 0; r < TP_RANKS; r++) mdr_comm_destroy(sh.comm[r]); /* adopted: leaves the ncclComm_t */
  for (int r = 0; r < TP_RANKS; r++) {
    TP_CUDA(cudaSetDevice(sh.device[r]));
    TP_NCCL(sh.nccl[r], ncclCommDestroy(sh.nccl[r]));
  }
  for (int r = 0; r < TP_RANKS; r++) {
    mdr_backend_destroy(sh.b[r]);
    free(sh.samples[r]);
  }
  TP_CUDA(cudaFreeHost(words));
  free(res.cases);
  free(res.captures);
  fflush(stdout);
  return 0;
#endif
}
