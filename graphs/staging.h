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
 * Step inputs travel in the same slot, after the ids (layout:
 * staging/staging_layout.h); the same launch copies them.
 *
 * Failures. A step that fails before its staged launch was enqueued leaves
 * host_step as it was (the slot is written again by the next step); one
 * that fails after counts it; one that cannot tell (a graph launch that
 * failed part way) marks the ring for a resync: the next wait lets the
 * stream drain and takes the ack, which the device wrote, as the count.
 *
 * Device block (zeroed at init): the ring counter, the launch's
 * block-coordination words (mdr_stage_sync), the count words a body reads
 * (mdr_staging_count_ptr) and the input table (mdr_stage_input each).
 *
 * Inline images. A step small enough (MDR_STAGE_INLINE_BYTES) can carry its
 * slot image in the launch's own parameters instead of a slot
 * (staging_layout.h, MDR_STAGE_INLINE): the same writer writes it, into
 * the caller's parameter copy, laid out for the step's copy counts (the
 * header, the ids, each host input's rows at those counts, each piece
 * 16-byte aligned as in a slot, but packed: a slot places each input for
 * its largest count). Such a launch takes no slot, so host_step and the
 * ack are not involved: ring steps and inline steps mix freely. Each count
 * 1 .. MDR_STAGING_INLINE_COUNTS has its layout, and with host inputs its
 * own device input table (their offsets in the image). */
#ifndef MDR_STAGING_H
#define MDR_STAGING_H

#include <stddef.h>
#include <stdint.h>

#include "backend_impl.h"
#include "staging_layout.h"
#include "mdr/graph.h"

/* The counts with an inline layout: 1-32. A small-class image holds 24
 * ids behind its header; the table form's classes (up to
 * MDR_STAGE_INLINE_XXXL_BYTES) take steps with step inputs at up to 32
 * sequences (at most one sequence a token, so 32 tokens), and ids-only
 * steps of 25-32 tokens. The per-count layouts and input tables are this
 * size. */
#define MDR_STAGING_INLINE_COUNTS 32u

typedef struct mdr_staging {
  mdr_backend *b;
  unsigned char *ring_host; /* MDR_GRAPH_STAGING_SLOTS slots, then the ack word */
  mdr_dptr ring_dev;        /* the same memory as the device sees it */
  size_t slot_bytes;
  volatile uint64_t *ack_host;
  mdr_dptr block;     /* device block: counter, sync words, count words, input table */
  uint64_t host_step; /* staged launches enqueued */
  int resync;         /* a step failed with its staged launch perhaps enqueued: re-read
                         host_step from the ack once the stream is idle, before the next slot */
  size_t n_inputs;
  mdr_stage_input inputs[MDR_STAGE_INPUTS_MAX]; /* as the device table holds them */
  /* inline images (mdr_staging_inline_init): per count g, the image's bytes
   * and each host input's offset in it; 0 counts before init */
  size_t inline_counts;
  uint32_t inline_bytes[MDR_STAGING_INLINE_COUNTS + 1];
  uint32_t inline_offset[MDR_STAGING_INLINE_COUNTS + 1][MDR_STAGE_INPUTS_MAX];
  uint32_t inline_copy_sequences[MDR_STAGING_INLINE_COUNTS + 1];
  mdr_dptr inline_tables; /* with host inputs: one input table per count, device memory */
} mdr_staging;

/* Allocate the ring for steps of up to max_tokens ids and the n inputs
 * (their dst, src, pad, rows, max_rows, elem_bytes and row_bytes set; the
 * slot offsets are laid out here, ids first, each 16-byte aligned, room for
 * max_rows[i] rows), and the device block with the input table, all
 * zeroed but the table. MDR_ERR_INVALID_ARGUMENT when a slot would exceed
 * MDR_STAGING_SLOT_MAX_BYTES (nothing allocated). On failure nothing is
 * left allocated. */
mdr_status mdr_staging_init(mdr_staging *s, mdr_backend *b, size_t max_tokens, const mdr_stage_input *inputs,
                            const uint64_t *max_rows, size_t n);
/* Free what init allocated; the launches reading it must have finished.
 * Accepts a zeroed (never initialised) struct. */
void mdr_staging_fini(mdr_staging *s);

/* Wait until the next slot is free (the launch that read it last has
 * finished), polling `stream` now and then: a stream gone idle with the slot
 * still held is MDR_ERR_STATE. An ack ahead of host_step is MDR_ERR_STATE
 * too (corruption: see the header). After a failed step (resync set) it
 * first waits for the stream to go idle and takes the ack as the count of
 * staged launches (an error of the stream is returned, resync kept).
 * Changes nothing else. */
mdr_status mdr_staging_wait(mdr_staging *s, mdr_stream stream);

/* The values of one step: its counts and what the slot carries. */
typedef struct mdr_staging_step {
  const uint32_t *ids;        /* NULL: no ids in the slot (device ids) */
  const void *const *values;  /* values[i]: input i's host values (NULL for device inputs);
                                 NULL with no host inputs */
  size_t tokens, copy_tokens; /* real and copied token rows */
  size_t sequences, copy_sequences;
  uint32_t pad_id;
} mdr_staging_step;

/* Write the next slot: the header, then the ids (copy_tokens of them, pad
 * after `tokens`) and each host input's rows at the copy counts (its pad
 * value after the real rows). Call after mdr_staging_wait. */
void mdr_staging_write(mdr_staging *s, const mdr_staging_step *step);

/* Lay out the inline images of the counts 1 .. min(max_tokens,
 * MDR_STAGING_INLINE_COUNTS), count g at copy counts (g, min(g,
 * max_sequences)), as a static graph of g tokens copies them; with host
 * inputs, allocate and upload one device input table per count. Call once,
 * after init; fini frees it. On failure nothing is left allocated and no
 * count is inline. */
mdr_status mdr_staging_inline_init(mdr_staging *s, size_t max_tokens, size_t max_sequences);

/* The bytes of count g's inline image (its last piece's end), or 0 when g
 * has no inline layout (above the counts laid out). A count whose image
 * exceeds MDR_STAGE_INLINE_XXXL_BYTES is never inline, and one that
 * exceeds MDR_STAGE_INLINE_BYTES only in the table form. */
uint64_t mdr_staging_inline_bytes(const mdr_staging *s, size_t g);

/* Write count g's input table (its n_inputs entries, the rest of
 * MDR_STAGE_INLINE_TABLE zeroed) at `out`: what the inline launch's
 * descriptor points to in device memory. A count without an inline layout
 * (0, or past the counts laid out) gets the room zeroed, which a launch
 * reads as "no table here". */
void mdr_staging_inline_table(const mdr_staging *s, size_t g, unsigned char *out);

/* The descriptor of count g's inline launch writing token_ids: FETCH |
 * INLINE (no ring slot, no advance), count g's input table and image
 * bytes (inline_bytes, which pick the launch's image class). */
mdr_stage_desc mdr_staging_inline_desc(const mdr_staging *s, mdr_dptr token_ids, size_t g);

/* Write a step's slot image to `image` (in a launch's parameter copy, of
 * the launch's image class) with count copy_tokens's inline layout: what
 * mdr_staging_write writes into a slot, at another destination. The step's
 * copy counts are its graph's (count copy_tokens, a layout of
 * mdr_staging_inline_init, its image within the class: at most
 * mdr_staging_inline_bytes(s, copy_tokens) bytes are written). Takes no
 * slot: host_step is unchanged. */
void mdr_staging_write_inline(const mdr_staging *s, unsigned char *image, const mdr_staging_step *step);

/* A staged launch was enqueued (eagerly or as a graph replay). */
static inline void mdr_staging_enqueued(mdr_staging *s) { s->host_step++; }

/* A step failed after its slot was written, in a way that leaves open
 * whether its staged launch was enqueued: the next wait re-reads the count. */
static inline void mdr_staging_unsure(mdr_staging *s) { s->resync = 1; }

/* The descriptor of a staged launch on this ring writing token_ids, with
 * stage flags `flags` (MDR_STAGE_*: FETCH to read the next slot, ADVANCE to
 * advance the ring, ...) and copy_sequences per-sequence rows. */
mdr_stage_desc mdr_staging_desc(const mdr_staging *s, mdr_dptr token_ids, uint32_t flags, uint32_t copy_sequences);

/* The flags bits (MDR_STAGE_SPREAD_MASK) that spread a static ring launch's
 * stage of count g at copy sequences copy_s over several blocks, a block a
 * MDR_STAGE_SPREAD_VECS vectors of its slot's read: 0 (one block) unless
 * the cache declares inputs, every one with host values. `host_ids`: the
 * launch reads its ids from the slot too (else from the device, and the
 * slot's ids room is not read). */
uint32_t mdr_staging_spread(const mdr_staging *s, size_t g, size_t copy_s, int host_ids);

/* Device address of the uint32 count words: the step's tokens, then its
 * sequences. */
mdr_dptr mdr_staging_count_ptr(const mdr_staging *s);

#endif
