/* staging.h — the step prologue: how one step's token ids and count reach
 * the device without the host waiting for the GPU (private).
 *
 * The ids of step N go to slot N % MDR_GRAPH_STAGING_SLOTS of a ring in
 * mapped pinned memory. A captured graph cannot name "the slot of this
 * step" (its addresses are fixed at capture), so the launch finds its slot
 * on the device: a device counter holds the number of staged launches
 * served so far. The first kernel of a step (the fused zero-and-stage
 * launch, kernels/zero_fused.h) reads slot counter % SLOTS, copies its ids
 * into token_ids and its count to the count word, then advances the counter
 * and writes it to the ack word in pinned memory. The host keeps its own
 * count of staged launches enqueued (host_step) and writes slot
 * host_step % SLOTS only once the ack shows that the launch that read it
 * last, host_step - SLOTS, has finished. Every step, eager or replayed,
 * goes through exactly one staged launch, so the two counts never diverge;
 * an ack ahead of host_step means a staged launch ran that this ring did
 * not enqueue (e.g. an engine replayed a capture of a step): corruption,
 * reported as such.
 *
 * Why a kernel reads the slot rather than a captured copy node: a copy's
 * source address is fixed at capture, so a second step submitted before the
 * first ran would overwrite ids not yet read (or the host would have to
 * wait for every step); one kernel node also costs less per replay than a
 * copy node plus a kernel.
 *
 * Device block (MDR_STAGING_BLOCK_BYTES, zeroed at init): the ring counter,
 * the launch's block-coordination words (mdr_stage_sync) and the count word
 * a body reads (mdr_staging_count_ptr). */
#ifndef MDR_STAGING_H
#define MDR_STAGING_H

#include <stddef.h>
#include <stdint.h>

#include "backend_impl.h"
#include "mdr/graph.h"

typedef struct mdr_staging {
  mdr_backend *b;
  unsigned char *ring_host; /* MDR_GRAPH_STAGING_SLOTS slots, then the ack word */
  mdr_dptr ring_dev;        /* the same memory as the device sees it */
  size_t slot_bytes;
  volatile uint64_t *ack_host;
  mdr_dptr block;     /* device block: counter, sync words, count word */
  uint64_t host_step; /* staged launches enqueued */
} mdr_staging;

/* Allocate the ring for steps of up to max_tokens ids and the device
 * block, both zeroed. On failure nothing is left allocated. */
mdr_status mdr_staging_init(mdr_staging *s, mdr_backend *b, size_t max_tokens);
/* Free what init allocated; the launches reading it must have finished.
 * Accepts a zeroed (never initialised) struct. */
void mdr_staging_fini(mdr_staging *s);

/* Wait until the next slot is free (the launch that read it last has
 * finished), polling `stream` now and then: a stream gone idle with the slot
 * still held is MDR_ERR_STATE. An ack ahead of host_step is MDR_ERR_STATE
 * too (corruption: see the header). Changes nothing. */
mdr_status mdr_staging_wait(mdr_staging *s, mdr_stream stream);

/* Write the next slot: count t, `copy` ids (t of them from `ids`, then
 * copy - t of pad_id); ids NULL: the header alone (a step whose ids are in
 * device memory). Call after mdr_staging_wait. */
void mdr_staging_write(mdr_staging *s, const uint32_t *ids, size_t t, size_t copy, uint32_t pad_id);

/* A staged launch was enqueued (eagerly or as a graph replay). */
static inline void mdr_staging_enqueued(mdr_staging *s) { s->host_step++; }

/* The descriptor of a staged launch on this ring writing token_ids, with
 * stage flags `flags` (MDR_STAGE_*: FETCH to read the next slot, ADVANCE to
 * advance the ring, ...). */
mdr_stage_desc mdr_staging_desc(const mdr_staging *s, mdr_dptr token_ids, uint32_t flags);

/* Device address of the uint32 count word. */
mdr_dptr mdr_staging_count_ptr(const mdr_staging *s);

#endif
