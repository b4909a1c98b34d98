/* all_reduce_impl.h — the all-reduce's private surface (src/all_reduce.c):
 * AUTO's table, where an arena's comm region starts, and the test hook
 * that reads or writes the protocol counters. */
#ifndef MDR_ALL_REDUCE_IMPL_H
#define MDR_ALL_REDUCE_IMPL_H

#include "comm_impl.h"

/* The table behind MDR_ALL_REDUCE_AUTO (docs/TP.md): mdr's one-shot up to
 * one_shot_max bytes, two-shot up to two_shot_max, NCCL above. */
typedef struct mdr_ar_table {
  size_t one_shot_max, two_shot_max;
} mdr_ar_table;
extern const mdr_ar_table mdr_ar_auto_table;

/* Where a communicator arena's comm region starts (after its buffers). */
size_t mdr_comm_region_off(const mdr_arena *a);

/* Tests only: read every block's protocol counters of this rank's region
 * (get: block 0's, after checking that the call-wide ones agree), or write
 * them (set: every block; barriers = B also sets every flag to B, the
 * state B barriers leave, so no write can make a flag stale). Blocking,
 * with nothing in flight; every rank the same values. MDR_ERR_UNSUPPORTED
 * where mdr's kernels do not run. Reaching a long-running state this way
 * is what a run of that many calls leaves: a one-shot-only run leaves
 * barriers at 0 and the flags untouched. */
mdr_status mdr_all_reduce_state(mdr_arena *a, mdr_arp_block *get, const mdr_arp_block *set);

/* MDR_AR_TIMEOUT_MS from the environment: a positive integer of ms, or 0
 * (unset; another value is 0 too, and reported on b: src/env.h). */
long mdr_ar_timeout_ms(mdr_backend *b);

/* The text of a give-up report (kernels/ar_protocol.h, the host words of
 * one rank) into buf. */
void mdr_ar_report_text(const volatile uint32_t *report, int rank, char *buf, size_t n);

#endif
