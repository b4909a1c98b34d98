/* ar_twin_threads — the host twin of the all-reduce protocol under
 * ThreadSanitizer (scripts/sanitize.sh): ranks are threads that share
 * slabs, flags and scratch through the protocol's atomics, so any access
 * the protocol does not order is a race TSan reports. A plain program:
 * Criterion does not start under TSan. Random lockstep sequences with 2
 * and 4 ranks from a fresh and a long-running state, then a lone rank
 * ended by an abort. Exit 0 when every value was right. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "ar_sequence.h"

typedef struct lone_arg {
  ar_team *t;
  mdr_status st;
} lone_arg;

static void *lone_main(void *p) {
  lone_arg *l = p;
  mdr_all_reduce_desc d = mdr_all_reduce_desc_make(AR_SEQ_BUF, MDR_DTYPE_FP32, 4);
  d.algo = MDR_ALL_REDUCE_TWO_SHOT;
  l->st = mdr_all_reduce(l->t->a[0], &d, l->t->s[0]);
  return NULL;
}

int main(void) {
  int failed = 0;
  const int ranks[] = {2, 4};
  const uint32_t starts[] = {0, 0x7FFFFFF0u};
  for (int k = 0; k < 2; k++)
    for (int s = 0; s < 2; s++) {
      ar_team t;
      if (ar_team_init(&t, ranks[k]) != MDR_OK || ar_team_state(&t, starts[s], 0) != MDR_OK) {
        printf("ar_twin_threads: %d ranks: set-up failed\n", ranks[k]);
        return 1;
      }
      char first[256] = "";
      const size_t wrong = ar_sequence_run(&t, 300, 77 + (uint64_t)k, first, sizeof first);
      printf("ar_twin_threads: %d ranks from 0x%08x: 300 calls, %zu wrong%s%s: %s\n", ranks[k], starts[s], wrong,
             wrong ? ": " : "", first, wrong ? "FAIL" : "ok");
      failed |= wrong != 0;
      ar_team_fini(&t);
    }
  /* a lone rank waits until an abort from another thread ends it */
  ar_team t;
  if (ar_team_init(&t, 2) != MDR_OK) return 1;
  lone_arg l = {.t = &t, .st = MDR_OK};
  pthread_t th;
  if (pthread_create(&th, NULL, lone_main, &l) != 0) return 1;
  struct timespec nap = {0, 50000000};
  nanosleep(&nap, NULL);
  mdr_comm_abort(t.c[1]);
  pthread_join(th, NULL);
  printf("ar_twin_threads: lone rank ended by an abort: %s: %s\n", mdr_status_string(l.st),
         l.st == MDR_ERR_STATE ? "ok" : "FAIL");
  failed |= l.st != MDR_ERR_STATE;
  ar_team_fini(&t);
  return failed;
}
