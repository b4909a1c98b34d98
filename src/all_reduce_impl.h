/* all_reduce_impl.h — the all-reduce's private surface (src/all_reduce.c):
 * AUTO's table, where an arena's comm region starts, the test hook that
 * reads or writes the protocol counters, and the measurement entry that
 * hands out the call of mdr's kernels. */
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

/* Measurement only (mdr-bench-tp --barrier): *out = the call of mdr's
 * kernels on arena a with the transport's part filled as mdr_all_reduce
 * fills it (each rank's window base, this rank's slab, the comm region,
 * the grid cap, the host's abort and report words) and no call part but
 * region_off (no rows, no residual). Enqueues nothing; the pointers are
 * the arena's, valid while it lives. MDR_ERR_UNSUPPORTED where mdr's
 * kernels do not run on the arena. */
mdr_status mdr_all_reduce_call_of(mdr_arena *a, mdr_ar_call *out);

/* MDR_AR_TIMEOUT_MS from the environment: a positive integer of ms, or 0
 * (unset; another value is 0 too, and reported on b: src/env.h). */
long mdr_ar_timeout_ms(mdr_backend *b);

/* MDR_AR_NORM_FUSE from the environment (read when a communicator is made):
 * MDR_ARP_NORM_FUSE_AUTO when unset or empty, ALWAYS for "always", NEVER
 * for "never" (any case); another value is AUTO too, and reported on b as
 * src/env.h's switches report theirs. */
int mdr_ar_norm_fuse(mdr_backend *b);

/* The text of a give-up report (kernels/ar_protocol.h, the host words of
 * one rank) into buf. */
void mdr_ar_report_text(const volatile uint32_t *report, int rank, char *buf, size_t n);

#endif
