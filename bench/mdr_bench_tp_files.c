/* mdr_bench_tp_files.c — what mdr-bench-tp writes: the output folder
 * (refused when it holds an earlier run's files, unless --force),
 * results.json, results.csv and capture.csv, and the soak's lines and
 * soak.json. bench/README.md (section mdr-bench-tp) documents every field. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "bench_tp.h"

#define TP_SCHEMA_VERSION 2 /* 2: the paths mdr-1shot, mdr-2shot, mdr-dyn; skipped cases; AUTO's choice; x_exact; counts; crossover */
#define TP_OUT_BASE "bench-out"
#define TP_OUT_PREFIX "tp-"            /* bench-out/tp-<stamp>/, next to mdr-bench's runs */
#define TP_LATEST_LINK "tp-latest"     /* bench-out/tp-latest -> the newest mdr-bench-tp run */
#define TP_MAX_SAME_SECOND_RUNS 100

static const char *const k_out_files[] = {"results.json", "results.csv", "capture.csv", "soak.json", "norm.csv",
                                          "norm.json", "barrier.csv", "barrier.json"};

/* ---- the output folder ---- */

void tp_check_out_dir(const tp_options *o) {
  if (!o->out_dir || o->force) return;
  for (size_t i = 0; i < sizeof k_out_files / sizeof *k_out_files; i++) {
    char path[4096 + 64];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", o->out_dir, k_out_files[i]);
    if (stat(path, &st) == 0)
      tp_exit(TP_EXIT_USAGE,
              "refusing to overwrite %s (an earlier run's): pass --force to overwrite it, or leave --out out for "
              "a fresh %s/%s<timestamp>/",
              path, TP_OUT_BASE, TP_OUT_PREFIX);
  }
}

void tp_make_out_dir(const tp_options *o, tp_run_info *info, const char *stamp) {
  if (o->out_dir) {
    if (snprintf(info->out_dir, sizeof info->out_dir, "%s", o->out_dir) >= (int)sizeof info->out_dir)
      tp_exit(TP_EXIT_USAGE, "--out path too long");
    mkdir_p(info->out_dir);
    return;
  }
  mkdir_p(TP_OUT_BASE);
  for (int k = 1;; k++) {
    if (k > TP_MAX_SAME_SECOND_RUNS) tp_die("%s: too many runs named %s%s*", TP_OUT_BASE, TP_OUT_PREFIX, stamp);
    if (k == 1) snprintf(info->out_dir, sizeof info->out_dir, "%s/%s%s", TP_OUT_BASE, TP_OUT_PREFIX, stamp);
    else snprintf(info->out_dir, sizeof info->out_dir, "%s/%s%s-%d", TP_OUT_BASE, TP_OUT_PREFIX, stamp, k);
    if (mkdir(info->out_dir, 0755) == 0) break;
    if (errno != EEXIST) tp_die("mkdir %s: %s", info->out_dir, strerror(errno));
  }
  const char *leaf = info->out_dir + strlen(TP_OUT_BASE) + 1;
  const char *link = TP_OUT_BASE "/" TP_LATEST_LINK;
  struct stat st;
  if (lstat(link, &st) == 0 && !S_ISLNK(st.st_mode))
    fprintf(stderr, "note: %s exists and is not a link: left as it is\n", link);
  else if ((unlink(link) != 0 && errno != ENOENT) || symlink(leaf, link) != 0)
    fprintf(stderr, "note: could not point %s at %s: %s\n", link, leaf, strerror(errno));
}

/* ---- files ---- */

/* fopen for writing; a failure ends the run with tp_die (never exit(): a
 * rank thread may call this while the other waits inside NCCL). */
static FILE *tp_open_out(const char *dir, const char *name) {
  char path[4096 + 64];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f) tp_die("cannot write %s: %s", path, strerror(errno));
  return f;
}

static void tp_json_summary(FILE *f, const char *key, const summary *s) {
  const struct { const char *k; double v; } v[] = {
      {"med", s->med}, {"p10", s->p10}, {"p90", s->p90}, {"p99", s->p99}, {"max", s->max}};
  for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
    fprintf(f, ", \"%s_%s\": ", key, v[i].k);
    json_num(f, v[i].v);
  }
}

static void tp_write_json(const tp_options *o, const tp_run_info *info, const tp_sweep *sw, const tp_results *r) {
  FILE *f = tp_open_out(info->out_dir, "results.json");
  struct utsname u;
  bool have_uname = uname(&u) == 0;
  fprintf(f, "{\n  \"schema_version\": %d,\n  \"tool\": \"mdr-bench-tp\",\n  \"complete\": %s,\n  \"timestamp\": ",
          TP_SCHEMA_VERSION, info->complete ? "true" : "false");
  json_str(f, info->timestamp);
  fprintf(f, ",\n  \"git_revision\": ");
  json_str(f, bench_git_revision());
  fprintf(f, ",\n  \"build_type\": ");
  json_str(f, bench_build_type());
  fprintf(f, ",\n  \"mdr_version\": %u,\n  \"command\": [", mdr_version_number());
  for (int i = 0; i < o->argc; i++) fprintf(f, "%s", i ? ", " : ""), json_str(f, o->argv[i]);
  fprintf(f, "],\n  \"machine\": {\"host\": ");
  json_str(f, have_uname ? u.nodename : "");
  fprintf(f, ", \"gpus\": [");
  for (int d = 0; d < TP_RANKS; d++) {
    fprintf(f, "%s{\"device\": %d, \"name\": ", d ? ", " : "", d);
    json_str(f, info->gpu_name[d]);
    fprintf(f, ", \"cc\": \"%d.%d\", \"peer_access\": %s}", info->cc_major[d], info->cc_minor[d],
            info->p2p[d] ? "true" : "false");
  }
  fprintf(f, "], \"driver_version\": %d, \"runtime_version\": %d, \"nccl_version\": %d, \"nccl_nvls_enable\": ",
          info->driver, info->runtime, info->nccl_version);
  json_str(f, getenv("NCCL_NVLS_ENABLE") ? getenv("NCCL_NVLS_ENABLE") : "");
  fprintf(f, "},\n  \"reps\": %zu, \"k\": %d, \"warmup\": %d, \"wall_s\": %.1f, \"preset\": \"%s\", \"hidden\": %zu,\n",
          o->reps, TP_K, TP_WARMUP, info->wall_s, TP_PRESET, info->hidden);
  fprintf(f, "  \"method\": {\"gpu_us\": \"one op between events, blocker on both ranks released together, per rep "
             "the slower rank\", \"batch_us\": \"K ops back to back, same method, divided by K\", \"cpu_us\": \"host "
             "time of the submitting call per rank\", \"floor\": \"min of nccl-graph and nccl-window gpu_us_med\", "
             "\"x_exact\": \"mdr-dyn gpu_us_med / exact_path's (mdr-graph-dev, else mdr-graph), same rows\", "
             "\"best\": \"the fastest of mdr-graph, mdr-graph-dev, mdr-1shot, mdr-2shot\"},\n");
  fprintf(f, "  \"sweeps\": [");
  bool first = true;
  for (int s = 0; s < TP_SWEEP_COUNT; s++) {
    const tp_sweep *w = &sw[s];
    if (!w->n) continue;
    fprintf(f, "%s\n    {\"sweep\": \"%s\", \"row_bytes\": %zu, \"rows_max\": %zu, \"rows\": [", first ? "" : ",",
            k_tp_sweep_names[s], w->row_bytes, w->m);
    first = false;
    for (size_t i = 0; i < w->n; i++) fprintf(f, "%s%zu", i ? ", " : "", w->rows[i]);
    fprintf(f, "], \"mdr_buffer\": \"%s\", \"mdr_buffer_offset\": %zu, \"mdr_window\": [\"%s\", \"%s\"], "
               "\"nccl_window\": [%s, %s], \"mdr_ar_kernels\": %s, \"mdr_ar_kernels_note\": ",
            mdr_buffer_name(TP_BUFFER), w->mdr_buffer_offset, mdr_window_name(w->mdr_window[0]),
            mdr_window_name(w->mdr_window[1]), w->nccl_window[0] ? "true" : "false", w->nccl_window[1] ? "true" : "false",
            w->ar_kernels ? "true" : "false");
    json_str(f, w->ar_kernels_note);
    fprintf(f, "}");
  }
  fprintf(f, "\n  ],\n  \"cases\": [");
  for (size_t i = 0; i < r->n_cases; i++) {
    const tp_case *c = &r->cases[i];
    fprintf(f, "%s\n    {\"sweep\": \"%s\", \"rows\": %zu, \"bytes\": %zu, \"path\": \"%s\", \"measured\": %s, "
               "\"skipped\": %s, \"skip_reason\": ",
            i ? "," : "", k_tp_sweep_names[c->sweep], c->rows, c->bytes, k_tp_path_names[c->path],
            c->measured ? "true" : "false", c->skipped ? "true" : "false");
    if (c->skipped) json_str(f, c->skip_reason);
    else fprintf(f, "null");
    fprintf(f, ", \"auto_algo\": \"%s\", \"auto_algo_counted\": \"%s\"", mdr_all_reduce_algo_name(c->auto_algo),
            mdr_all_reduce_algo_name(c->auto_counted));
    tp_json_summary(f, "gpu_us", &c->gpu);
    fprintf(f, ", \"gpu_us_rank0_med\": ");
    json_num(f, c->gpu_rank_med[0]);
    fprintf(f, ", \"gpu_us_rank1_med\": ");
    json_num(f, c->gpu_rank_med[1]);
    tp_json_summary(f, "batch_us", &c->batch);
    tp_json_summary(f, "cpu_us_rank0", &c->cpu[0]);
    tp_json_summary(f, "cpu_us_rank1", &c->cpu[1]);
    const struct { const char *k; double v; } v[] = {
        {"build_us_rank0", c->build_us[0]}, {"build_us_rank1", c->build_us[1]}, {"floor_us", c->floor_us},
        {"x_floor", c->x_floor},            {"floor_batch_us", c->floor_batch_us},
        {"x_floor_batch", c->x_floor_batch}, {"gbps", c->gbps}, {"x_exact", c->x_exact},
        {"x_exact_batch", c->x_exact_batch}};
    for (size_t k = 0; k < sizeof v / sizeof *v; k++) {
      fprintf(f, ", \"%s\": ", v[k].k);
      json_num(f, v[k].v);
    }
    fprintf(f, ", \"floor_path\": ");
    if (c->floor_path) json_str(f, c->floor_path);
    else fprintf(f, "null");
    fprintf(f, ", \"exact_path\": ");
    if (c->exact_path) json_str(f, c->exact_path);
    else fprintf(f, "null");
    fprintf(f, ", \"eager_steps\": %llu}", (unsigned long long)c->eager_steps);
  }
  /* per (sweep, rows): AUTO's choice and the best exact mdr path against the floor */
  fprintf(f, "\n  ],\n  \"counts\": [");
  bool first_count = true;
  for (int s = 0; s < TP_SWEEP_COUNT; s++) {
    size_t rows[TP_MAX_COUNTS], n = tp_sorted_rows(&sw[s], rows);
    for (size_t i = 0; i < n; i++) {
      const tp_case *any = tp_any_case(r, (tp_sweep_kind)s, rows[i]), *cs[TP_PATH_COUNT];
      if (!any) continue;
      tp_cases_of(r, (tp_sweep_kind)s, rows[i], cs);
      const tp_case *b1 = tp_best_mdr(cs, TP_PATH_COUNT, false), *bk = tp_best_mdr(cs, TP_PATH_COUNT, true);
      fprintf(f, "%s\n    {\"sweep\": \"%s\", \"rows\": %zu, \"bytes\": %zu, \"auto_algo\": \"%s\", "
                 "\"auto_algo_counted\": \"%s\", \"floor_us\": ",
              first_count ? "" : ",", k_tp_sweep_names[s], rows[i], any->bytes, mdr_all_reduce_algo_name(any->auto_algo),
              mdr_all_reduce_algo_name(any->auto_counted));
      first_count = false;
      json_num(f, any->floor_us);
      fprintf(f, ", \"floor_batch_us\": ");
      json_num(f, any->floor_batch_us);
      fprintf(f, ", \"best_path\": ");
      if (b1) json_str(f, k_tp_path_names[b1->path]);
      else fprintf(f, "null");
      fprintf(f, ", \"best_x_floor\": ");
      json_num(f, b1 ? b1->x_floor : NAN);
      fprintf(f, ", \"best_batch_path\": ");
      if (bk) json_str(f, k_tp_path_names[bk->path]);
      else fprintf(f, "null");
      fprintf(f, ", \"best_x_floor_batch\": ");
      json_num(f, bk ? bk->x_floor_batch : NAN);
      fprintf(f, "}");
    }
  }
  /* the one-shot / two-shot crossover of each sweep (K-batch) */
  fprintf(f, "\n  ],\n  \"crossover\": [");
  bool first_x = true;
  for (int s = 0; s < TP_SWEEP_COUNT; s++) {
    if (!sw[s].n) continue;
    const tp_case *one, *two, *last;
    tp_crossover(r, &sw[s], &one, &two, &last);
    fprintf(f, "%s\n    {\"sweep\": \"%s\", \"two_shot_beats_one_shot_from_bytes\": ", first_x ? "" : ",",
            k_tp_sweep_names[s]);
    first_x = false;
    if (two) fprintf(f, "%zu", two->bytes);
    else fprintf(f, "null");
    fprintf(f, ", \"one_shot_batch_us\": ");
    json_num(f, one ? one->batch.med : NAN);
    fprintf(f, ", \"two_shot_batch_us\": ");
    json_num(f, two ? two->batch.med : NAN);
    fprintf(f, ", \"largest_bytes_both_ran\": ");
    if (last) fprintf(f, "%zu}", last->bytes);
    else fprintf(f, "null}");
  }
  fprintf(f, "\n  ],\n  \"capture\": [");
  for (size_t i = 0; i < r->n_captures; i++) {
    const tp_capture *c = &r->captures[i];
    fprintf(f, "%s\n    {\"sweep\": \"%s\", \"rows\": %zu, \"bytes\": %zu, \"mdr_tp_us_rank0\": ", i ? "," : "",
            k_tp_sweep_names[c->sweep], c->rows, c->bytes);
    json_num(f, c->tp_us[0]);
    fprintf(f, ", \"mdr_tp_us_rank1\": ");
    json_num(f, c->tp_us[1]);
    fprintf(f, ", \"mdr_one_gpu_no_collective_us\": ");
    json_num(f, c->single_us);
    fprintf(f, "}");
  }
  fprintf(f, "\n  ]\n}\n");
  if (fclose(f) != 0) tp_die("writing %s/results.json failed", info->out_dir);
}

static void tp_write_csv(const tp_run_info *info, const tp_results *r) {
  FILE *f = tp_open_out(info->out_dir, "results.csv");
  fprintf(f, "sweep,rows,bytes,path,measured,gpu_us_med,gpu_us_p10,gpu_us_p90,gpu_us_p99,gpu_us_max,"
             "gpu_us_rank0_med,gpu_us_rank1_med,batch_us_med,batch_us_p10,batch_us_p90,cpu_us_rank0_med,"
             "cpu_us_rank0_p99,cpu_us_rank1_med,cpu_us_rank1_p99,build_us_rank0,build_us_rank1,floor_us,x_floor,"
             "floor_batch_us,x_floor_batch,gbps,floor_path,eager_steps,skipped,skip_reason,auto_algo,"
             "auto_algo_counted,x_exact,x_exact_batch,exact_path\n");
  for (size_t i = 0; i < r->n_cases; i++) {
    const tp_case *c = &r->cases[i];
    fprintf(f, "%s,%zu,%zu,%s,%d", k_tp_sweep_names[c->sweep], c->rows, c->bytes, k_tp_path_names[c->path],
            c->measured);
    const double v[] = {c->gpu.med,         c->gpu.p10,         c->gpu.p90,       c->gpu.p99,
                        c->gpu.max,         c->gpu_rank_med[0], c->gpu_rank_med[1], c->batch.med,
                        c->batch.p10,       c->batch.p90,       c->cpu[0].med,    c->cpu[0].p99,
                        c->cpu[1].med,      c->cpu[1].p99,      c->build_us[0],   c->build_us[1],
                        c->floor_us,        c->x_floor,         c->floor_batch_us, c->x_floor_batch,
                        c->gbps};
    for (size_t k = 0; k < sizeof v / sizeof *v; k++) fputc(',', f), csv_num(f, v[k]);
    fprintf(f, ",%s,%llu,%d,\"%s\",%s,%s", c->floor_path ? c->floor_path : "", (unsigned long long)c->eager_steps,
            c->skipped, c->skip_reason, mdr_all_reduce_algo_name(c->auto_algo), mdr_all_reduce_algo_name(c->auto_counted));
    fputc(',', f), csv_num(f, c->x_exact);
    fputc(',', f), csv_num(f, c->x_exact_batch);
    fprintf(f, ",%s\n", c->exact_path ? c->exact_path : "");
  }
  if (fclose(f) != 0) tp_die("writing %s/results.csv failed", info->out_dir);
  f = tp_open_out(info->out_dir, "capture.csv");
  fprintf(f, "sweep,rows,bytes,mdr_tp_us_rank0,mdr_tp_us_rank1,mdr_one_gpu_no_collective_us\n");
  for (size_t i = 0; i < r->n_captures; i++) {
    const tp_capture *c = &r->captures[i];
    fprintf(f, "%s,%zu,%zu", k_tp_sweep_names[c->sweep], c->rows, c->bytes);
    const double v[] = {c->tp_us[0], c->tp_us[1], c->single_us};
    for (size_t k = 0; k < sizeof v / sizeof *v; k++) fputc(',', f), csv_num(f, v[k]);
    fputc('\n', f);
  }
  if (fclose(f) != 0) tp_die("writing %s/capture.csv failed", info->out_dir);
}

void tp_write_results(const tp_options *o, const tp_run_info *info, const tp_sweep *sw, const tp_results *r) {
  tp_write_json(o, info, sw, r);
  tp_write_csv(info, r);
}

/* ---- the soak ---- */

void tp_print_soak(const tp_soak_result *s) {
  const uint32_t adv0 = s->epoch_end[0] - s->epoch_start, adv1 = s->epoch_end[1] - s->epoch_start;
  printf("\n== soak: %zu replays of one EXACT graph holding one mdr all-reduce of %zu B (%zu rows), algorithm %s%s%s\n",
         s->replays, s->bytes, s->rows, mdr_all_reduce_algo_name(s->algo), s->algo == MDR_ALL_REDUCE_AUTO ? " -> " : "",
         s->algo == MDR_ALL_REDUCE_AUTO ? mdr_all_reduce_algo_name(s->resolved) : "");
  printf("epoch: start 0x%08x, end 0x%08x / 0x%08x (rank 0 / 1): advanced by %u / %u for %llu calls (mod 2^32): %s; "
         "wrapped: %s\n",
         s->epoch_start, s->epoch_end[0], s->epoch_end[1], adv0, adv1, (unsigned long long)s->calls,
         adv0 == (uint32_t)s->calls && adv1 == (uint32_t)s->calls ? "exact" : "WRONG", s->wrapped ? "yes" : "NO");
  printf("checks: every replay on the device (every element against both ranks' sum), %llu host checks (drain, every "
         "element read back, both epochs); epoch mismatches %llu; %.2f us per replay (fill + all-reduce + check), "
         "%.1f s\n",
         (unsigned long long)s->checks, (unsigned long long)s->epoch_mismatches, s->us_per_replay, s->wall_s);
  printf("soak %s: wrong values %llu (device %llu, host %llu)\n", s->ok ? "passed" : "FAILED",
         (unsigned long long)s->wrong, (unsigned long long)s->wrong_device, (unsigned long long)s->wrong_host);
}

void tp_write_soak(const tp_options *o, const tp_run_info *info, const tp_soak_result *s) {
  FILE *f = tp_open_out(info->out_dir, "soak.json");
  fprintf(f, "{\n  \"schema_version\": %d,\n  \"tool\": \"mdr-bench-tp\",\n  \"mode\": \"soak\",\n  \"timestamp\": ",
          TP_SCHEMA_VERSION);
  json_str(f, info->timestamp);
  fprintf(f, ",\n  \"git_revision\": ");
  json_str(f, bench_git_revision());
  fprintf(f, ",\n  \"build_type\": ");
  json_str(f, bench_build_type());
  fprintf(f, ",\n  \"command\": [");
  for (int i = 0; i < o->argc; i++) fprintf(f, "%s", i ? ", " : ""), json_str(f, o->argv[i]);
  fprintf(f, "],\n  \"gpus\": [");
  json_str(f, info->gpu_name[0]);
  fprintf(f, ", ");
  json_str(f, info->gpu_name[1]);
  fprintf(f, "], \"nccl_version\": %d, \"nccl_nvls_enable\": ", info->nccl_version);
  json_str(f, getenv("NCCL_NVLS_ENABLE") ? getenv("NCCL_NVLS_ENABLE") : "");
  fprintf(f, ",\n  \"replays\": %zu, \"bytes\": %zu, \"rows\": %zu, \"algo\": \"%s\", \"resolved_algo\": \"%s\",\n",
          s->replays, s->bytes, s->rows, mdr_all_reduce_algo_name(s->algo), mdr_all_reduce_algo_name(s->resolved));
  fprintf(f, "  \"epoch_start\": %u, \"epoch_end\": [%u, %u], \"calls\": %llu, \"wrapped\": %s,\n", s->epoch_start,
          s->epoch_end[0], s->epoch_end[1], (unsigned long long)s->calls, s->wrapped ? "true" : "false");
  fprintf(f, "  \"checks\": %llu, \"wrong\": %llu, \"wrong_device\": %llu, \"wrong_host\": %llu, "
             "\"epoch_mismatches\": %llu,\n",
          (unsigned long long)s->checks, (unsigned long long)s->wrong, (unsigned long long)s->wrong_device,
          (unsigned long long)s->wrong_host, (unsigned long long)s->epoch_mismatches);
  fprintf(f, "  \"us_per_replay\": ");
  json_num(f, s->us_per_replay);
  fprintf(f, ", \"wall_s\": ");
  json_num(f, s->wall_s);
  fprintf(f, ", \"ok\": %s\n}\n", s->ok ? "true" : "false");
  if (fclose(f) != 0) tp_die("writing %s/soak.json failed", info->out_dir);
}
