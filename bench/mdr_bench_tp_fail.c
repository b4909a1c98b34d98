/* mdr_bench_tp_fail.c — how mdr-bench-tp fails and keeps watch: every
 * failure ends the process with one line (a rank may sit inside NCCL, so
 * no teardown is attempted), and a watchdog ends a run that stops making
 * progress. Below the driver, the options and the report, which all use it. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bench_tp.h"

#ifdef TP_GPU
#include <pthread.h>
#endif

/* ---- failure handling ---- */

void tp_exit(int code, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fflush(stdout);
  fprintf(stderr, "mdr-bench-tp: %s\n", msg);
  fflush(stderr);
  /* _exit, not exit: the other rank may sit inside NCCL or a CUDA call,
   * and atexit teardown of the CUDA runtime under it could hang. */
  _exit(code);
}

void tp_check_mdr(mdr_backend *b, mdr_status st, const char *call, const char *file, int line) {
  if (st != MDR_OK)
    tp_die("%s:%d: %s: %s: %s", file, line, call, mdr_status_string(st), b ? mdr_backend_last_error(b) : "");
}

#ifdef TP_GPU
void tp_check_cuda(cudaError_t e, const char *call, const char *file, int line) {
  if (e != cudaSuccess) {
    int dev = -1;
    (void)cudaGetDevice(&dev);
    tp_die("%s:%d: %s: %s (%s), current device %d", file, line, call, cudaGetErrorName(e), cudaGetErrorString(e),
           dev);
  }
}

void tp_check_nccl(ncclComm_t comm, ncclResult_t r, const char *call, const char *file, int line) {
  if (r != ncclSuccess && r != ncclInProgress) {
    const char *last = comm ? ncclGetLastError(comm) : NULL;
    tp_die("%s:%d: %s: %s%s%s", file, line, call, ncclGetErrorString(r), last && *last ? ": " : "",
           last && *last ? last : "");
  }
}
#endif

/* ---- the watchdog ---- */

static atomic_ulong g_ticks;
static const char *_Atomic g_phase = "start";

void tp_progress(const char *phase) {
  if (phase) atomic_store(&g_phase, phase);
  atomic_fetch_add(&g_ticks, 1);
}

#ifdef TP_GPU
/* A run that stops making progress (a rank waiting forever in NCCL, a
 * stream that never drains) ends with a message instead of hanging. */
void *tp_watchdog_main(void *arg) {
  (void)arg;
  unsigned long last = atomic_load(&g_ticks);
  int idle = 0;
  for (;;) {
    sleep(1);
    unsigned long now = atomic_load(&g_ticks);
    idle = now == last ? idle + 1 : 0;
    last = now;
    if (idle >= TP_WATCHDOG_S)
      tp_die("watchdog: no progress for %d s (last phase: %s): a rank is stuck (in NCCL, or on a stream that "
             "never drains); giving up",
             TP_WATCHDOG_S, atomic_load(&g_phase));
  }
  return NULL;
}
#endif
