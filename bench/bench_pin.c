/* bench_pin.c — --pin CPU: the whole run on one CPU. The host CPU figures of
 * one process can sit up to 2x from another's, every row at once, with
 * where the scheduler runs it; pinned, runs of different builds compare. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <string.h>

#include "bench.h"

void affinity_list(char *buf, size_t n) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (n) buf[0] = '\0';
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
    snprintf(buf, n, "unknown (sched_getaffinity: %s)", strerror(errno));
    return;
  }
  size_t used = 0;
  for (int c = 0; c < CPU_SETSIZE && used + 16 < n; c++)
    if (CPU_ISSET(c, &allowed)) used += (size_t)snprintf(buf + used, n - used, "%s%d", used ? "," : "", c);
}

void pin_to_cpu(long cpu) {
  if (cpu < 0) return;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) die("--pin %ld: sched_getaffinity: %s", cpu, strerror(errno));
  if (cpu >= CPU_SETSIZE || !CPU_ISSET((int)cpu, &allowed)) {
    char list[256];
    affinity_list(list, sizeof list);
    die("--pin %ld: not a CPU this process may run on (allowed: %s)", cpu, list);
  }
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET((int)cpu, &one);
  if (sched_setaffinity(0, sizeof one, &one) != 0) die("--pin %ld: sched_setaffinity: %s", cpu, strerror(errno));
}
