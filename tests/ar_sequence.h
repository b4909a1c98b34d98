/* ar_sequence.h — teams of host ranks (threads) on the host communicator
 * and random lockstep all-reduce sequences checked exactly, shared by the
 * ar_protocol suite and the plain program ar_twin_threads (ThreadSanitizer
 * runs it: Criterion does not start under TSan). */
#ifndef MDR_TEST_AR_SEQUENCE_H
#define MDR_TEST_AR_SEQUENCE_H

#include <stddef.h>
#include <stdint.h>

#include "all_reduce_impl.h"

enum { AR_SEQ_M = 40, AR_SEQ_ROW = 64, AR_SEQ_MAXR = 8 };
#define AR_SEQ_BUF MDR_BUF_HIDDEN_STATES
#define AR_SEQ_RES MDR_BUF_RESIDUAL
#define AR_SEQ_WORD MDR_BUF_LORA_SEQ_SLOT /* a uint32 count word in the arena */
#define AR_SEQ_NORM MDR_BUF_NORM_OUTPUT  /* the fused RMSNorm's output rows */
#define AR_SEQ_WEIGHT MDR_BUF_NORM_UNIT_W /* its weight: one row */

/* n host ranks, each with its backend and stream, one host communicator,
 * the arenas made together (AR_SEQ_M rows of AR_SEQ_ROW bytes). */
typedef struct ar_team {
  int n;
  mdr_backend *b[AR_SEQ_MAXR];
  mdr_stream s[AR_SEQ_MAXR];
  mdr_comm *c[AR_SEQ_MAXR];
  mdr_arena *a[AR_SEQ_MAXR];
} ar_team;

/* Make the team: MDR_OK, or the first failure (what was made is released). */
mdr_status ar_team_init(ar_team *t, int n);
/* The same with m rows of `row` bytes (AR_SEQ_BUF, AR_SEQ_RES, AR_SEQ_NORM;
 * AR_SEQ_WEIGHT one row). */
mdr_status ar_team_init_rows(ar_team *t, int n, size_t m, size_t row);
void ar_team_fini(ar_team *t);
/* Every rank's counters as a run leaves them: `calls` and `one_shot` at e,
 * barriers (and so every flag) at b. */
mdr_status ar_team_state(ar_team *t, uint32_t e, uint32_t b);

/* Run `calls` random lockstep calls on every rank (a thread each; the same
 * seed on every rank): one-shot, two-shot, counted AUTO (count words from
 * 0 past the bound), NCCL's twin, empty calls; every dtype; with and
 * without the residual, and (bf16, fp16) with the fused RMSNorm (each
 * rank its own weight; the norm checked against tests/ar_norm_ref.h). Every element of the buffer and the residual is
 * checked exactly after each call (small integers: exact sums in every
 * dtype; poisoned rows past the count must stay). Returns the wrong values
 * (a failed call counts as one); the first is described in `first`. */
size_t ar_sequence_run(ar_team *t, size_t calls, uint64_t seed, char *first, size_t first_len);

#endif
