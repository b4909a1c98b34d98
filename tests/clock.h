/* clock.h — the tests' monotonic clock and sleep, header-only so the
 * Criterion suites and the plain programs (soak, ar_gpu_procs) share them.
 * The includer defines _POSIX_C_SOURCE (clock_gettime, nanosleep) first. */
#ifndef MDR_TEST_CLOCK_H
#define MDR_TEST_CLOCK_H

#include <time.h>

/* Seconds on the monotonic clock. */
static inline double tb_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Sleep for s seconds (s >= 0). */
static inline void tb_sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

#endif
