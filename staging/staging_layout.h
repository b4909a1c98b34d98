/* staging.h — the staging ring's layout, shared by the host (gcc) and the
 * device (nvcc): what a slot holds, what a staged launch is told, and the
 * device words it coordinates with. Nothing here touches memory.
 *
 * The module has three files: this layout; its device code,
 * staging/staging.cuh, which the fused zero-and-stage kernels include for
 * their stage block; and its host side, graphs/staging.c (the ring, the
 * slots' writer, the wait). The host backend runs the same stage work on
 * the CPU (src/zero_fused_host.c) from the same layout.
 *
 * A slot: a 16-byte header (mdr_stage_header), the token ids from byte
 * MDR_STAGE_HEADER_BYTES, then each declared step input that takes host
 * values at its own 16-byte aligned offset (mdr_stage_input.offset), room
 * for its largest count. A staged launch copies the slot's ids and inputs to
 * their destinations, writes the step's counts where the body reads them,
 * and advances the ring. Inputs already in device memory (src != 0) are
 * copied device to device by the same launch. A small step's slot image can
 * instead travel in the launch's own parameters (MDR_STAGE_INLINE, at most
 * MDR_STAGE_INLINE_BYTES), read by the same code, with no ring involved. */
#ifndef MDR_STAGING_LAYOUT_H
#define MDR_STAGING_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "zero_map.h" /* MDR_HD, the plan table a TABLE launch reads */

#ifdef __cplusplus
extern "C" {
#endif

/* Slot layout: a 16-byte header, then the ids, then the inputs. */
typedef struct mdr_stage_header {
  uint32_t tokens;         /* real token count of the step */
  uint32_t copy_tokens;    /* ids (and per-token rows) in the slot: tokens, or the padded count */
  uint32_t sequences;      /* real sequence count of the step */
  uint32_t copy_sequences; /* per-sequence rows in the slot: sequences, or the padded count */
} mdr_stage_header;
#define MDR_STAGE_HEADER_BYTES 16u

/* Bytes of a slot holding the header and max_tokens ids (no inputs),
 * rounded to 256. */
MDR_HD uint64_t mdr_stage_slot_bytes(uint64_t max_tokens) {
  return (MDR_STAGE_HEADER_BYTES + max_tokens * 4u + 255u) / 256u * 256u;
}

/* How many rows of an input a step carries. */
enum {
  MDR_STAGE_ROWS_TOKENS = 0,    /* one row per token */
  MDR_STAGE_ROWS_SEQUENCES = 1, /* one row per sequence */
  MDR_STAGE_ROWS_FIXED = 2      /* max_rows rows, every step */
};

/* Step inputs a cache may declare besides the ids (one launch's table). */
#define MDR_STAGE_INPUTS_MAX 16

/* A static ring launch may serve its stage from K stage blocks (K - 1 in
 * these bits of its flags; 0: one), each reading a K-th of the slot's
 * vectors: one block keeps at most MDR_STAGE_BLOCK * 4 16-byte loads of
 * host memory in flight, so a large slot (a block table of many sequences)
 * takes several round trips from one. The host sets it
 * (mdr_stage_spread_of) only for launches whose inputs all come from the
 * slot (their ids from the slot too, or from the device: the first stage
 * block copies those); the last stage block to finish advances the counter
 * and the ack (mdr_stage_sync.done counts them). */
#define MDR_STAGE_SPREAD_SHIFT 8u
#define MDR_STAGE_SPREAD_MAX 16u
#define MDR_STAGE_SPREAD_MASK ((MDR_STAGE_SPREAD_MAX - 1u) << MDR_STAGE_SPREAD_SHIFT)
/* Vectors of the slot one stage block takes: one a thread. */
#define MDR_STAGE_SPREAD_VECS 256u

/* The stage blocks of a launch with these flags (at least 1). */
MDR_HD uint32_t mdr_stage_blocks_of(uint32_t flags) {
  return ((flags & MDR_STAGE_SPREAD_MASK) >> MDR_STAGE_SPREAD_SHIFT) + 1u;
}

/* The flags bits that spread a read of nvec vectors: one stage block per
 * MDR_STAGE_SPREAD_VECS, at most MDR_STAGE_SPREAD_MAX. */
MDR_HD uint32_t mdr_stage_spread_of(uint64_t nvec) {
  uint64_t k = (nvec + MDR_STAGE_SPREAD_VECS - 1u) / MDR_STAGE_SPREAD_VECS;
  k = k < 1u ? 1u : k > MDR_STAGE_SPREAD_MAX ? MDR_STAGE_SPREAD_MAX : k;
  return (uint32_t)(k - 1u) << MDR_STAGE_SPREAD_SHIFT;
}

/* One declared input as a staged launch reads it: a table of these sits in
 * device memory (mdr_stage_desc.inputs). 48 bytes. */
typedef struct mdr_stage_input {
  uint64_t dst;        /* destination in device memory, 16-byte aligned */
  uint64_t src;        /* 0: values in the slot at `offset`; else their device address (16-byte aligned) */
  uint64_t pad;        /* src inputs: the element value of rows [count, copy count) */
  uint32_t offset;     /* slot inputs: byte offset in the slot (16-byte aligned) */
  uint32_t row_bytes;  /* bytes per row: elem_bytes * width */
  uint32_t rows;       /* MDR_STAGE_ROWS_* */
  uint32_t max_rows;   /* the rows its destination holds: a FIXED input's rows every step; the
                          most a TOKENS or SEQUENCES input carries (a graph's padded count is
                          clamped to it) */
  uint32_t elem_bytes; /* 1, 2, 4 or 8 */
  uint32_t reserved;
} mdr_stage_input;

/* Rows of input `in` at token count t and sequence count s, at most its
 * max_rows: a step's real counts never exceed them (the step is refused),
 * but a graph's padded counts can (a LADDER rung of 8 tokens, a 5-row
 * input): the padding stops where the destination ends. */
MDR_HD uint64_t mdr_stage_input_rows(const mdr_stage_input *in, uint64_t t, uint64_t s) {
  const uint64_t r = in->rows == MDR_STAGE_ROWS_TOKENS ? t : in->rows == MDR_STAGE_ROWS_SEQUENCES ? s : in->max_rows;
  return r < in->max_rows ? r : in->max_rows;
}

/* Flags of a staged launch. */
enum {
  MDR_STAGE_FETCH = 1u,   /* read the slot: its ids into token_ids, its inputs, its counts */
  MDR_STAGE_ADVANCE = 2u, /* the last block to finish advances the counter and writes ack */
  MDR_STAGE_DYNAMIC = 4u, /* rules are evaluated at the slot's token count */
  MDR_STAGE_TABLE = 8u,   /* the plan at `tokens` is read from the plan table (not with DYNAMIC) */
  MDR_STAGE_DEVICE_IDS = 16u, /* the ids come from ids_src in device memory, not from the slot: the
                                 first t are copied (t: the slot header's count with FETCH, else the
                                 launch's tokens, read from no host memory at all), then pad_id up
                                 to the copy count; count_out gets t */
  MDR_STAGE_INLINE = 32u /* with FETCH: the slot is the launch's own parameters (its slot image, at
                            most MDR_STAGE_INLINE_BYTES, or MDR_STAGE_INLINE_XXXL_BYTES with a
                            plan table), not a ring slot; the ring's counter and
                            ack are neither read nor advanced (ADVANCE is never set with it) */
};

/* The largest slot image an inline launch carries in its parameters: the
 * header, the ids and the host-valued inputs, each piece 16-byte aligned as
 * in a ring slot (seven 16-byte vectors). A graph count whose largest image
 * fits is captured inline (graphs/graph_cache.c); above it the update's CPU
 * cost grows past the slot's (dev/step_params_route.md). */
#define MDR_STAGE_INLINE_BYTES 112u

/* The large image class: an inline launch in the plan-table form (the
 * stage's table set: the plan is read from it, so the parameters are the
 * table parameters and the image) may carry an image up to this size, for
 * steps with a few sequences' worth of step inputs (a 128-entry block table
 * per sequence at 1-2 sequences). A launch carries the smallest class that
 * holds its image (mdr_stage_desc.inline_bytes), so a step that fits
 * MDR_STAGE_INLINE_BYTES keeps the small parameter block: every byte of the
 * block is read at each launch of the node. The static form (the plan by
 * value) takes the small class only. Whole 16-byte vectors. */
#define MDR_STAGE_INLINE_LARGE_BYTES 1152u

/* The extra-large image class, in the same table form: up to 8 sequences'
 * worth (positions, sequence lengths and a 128-entry block table per
 * sequence at 8 tokens: 4208 bytes). Its larger parameter block costs the
 * steps that take it far less than the ring's round trip to host memory
 * (docs/GRAPHS.md, "Small steps inline"); steps that fit the large class
 * keep its smaller block. Whole 16-byte vectors. */
#define MDR_STAGE_INLINE_XL_BYTES 4352u

/* The fourth image class, in the table form only (as it was measured):
 * up to 16 sequences' worth (the same inputs at 16 tokens: 8400 bytes),
 * where the ring's round trip to host memory, not the zeroing, bounds a
 * short plan's step (docs/GRAPHS.md, "Small steps inline"). Whole 16-byte
 * vectors. */
#define MDR_STAGE_INLINE_XXL_BYTES 8448u

/* The largest image class, in the table form only: up to 32 sequences'
 * worth (the same inputs at 32 tokens: 16784 bytes; 17792 bytes of
 * parameters with the table parameters and the input table's room, within
 * the 32764 a kernel may take). Whole 16-byte vectors. */
#define MDR_STAGE_INLINE_XXXL_BYTES 16896u

/* An inline launch as a graph kernel node takes it, and as the graph cache
 * keeps it to re-target the node each step: the backend's kernel, its grid
 * and block, and the kernel's one by-value argument (param_bytes of param),
 * whose slot image starts at byte slot_offset (the image class's capacity,
 * MDR_STAGE_INLINE_BYTES, MDR_STAGE_INLINE_LARGE_BYTES,
 * MDR_STAGE_INLINE_XL_BYTES, MDR_STAGE_INLINE_XXL_BYTES or
 * MDR_STAGE_INLINE_XXXL_BYTES, 16-byte aligned in the argument, ending it). The host writes a step's image there and
 * updates the node with the whole argument; what else the argument holds is
 * the backend's own. */
#define MDR_STAGE_INLINE_PARAM_MAX 17792u
typedef struct mdr_stage_inline_launch {
  const void *func;
  uint32_t grid[3];
  uint32_t block[3];
  uint64_t param_bytes;
  uint64_t slot_offset;
  uint64_t table_offset; /* 0, or where the argument has room for the count's input table
                            (MDR_STAGE_INLINE_TABLE entries): the caller may write it there, and the
                            launch then reads its entries from its own parameters */
  uint64_t param[MDR_STAGE_INLINE_PARAM_MAX / 8];
} mdr_stage_inline_launch;

/* The input-table entries a larger-class inline launch has room for in
 * its parameters (its table_offset): every input a cache may declare. */
#define MDR_STAGE_INLINE_TABLE MDR_STAGE_INPUTS_MAX

/* Whether a static launch with these stage flags may take the chunk list
 * (zero_map.h section 5): not when it fetches from host memory, where the
 * stage block's PCIe round trip, not the stores, bounds the step. */
MDR_HD int mdr_zero_list_allowed(uint32_t stage_flags) { return (stage_flags & MDR_STAGE_FETCH) == 0; }

/* The device words a staged launch coordinates its blocks with (at
 * mdr_stage_desc.done, zeroed before the first launch, left zeroed by each).
 * DYNAMIC launches: each block takes a ticket when it starts; ticket 0 reads
 * the slot's header and publishes (step + 1) << 32 | t, which the others
 * wait for (in device memory) before clearing past their floors. A block
 * that holds ticket 0 is running, so the wait cannot deadlock whatever the
 * residency. The last block to finish (done) resets done and ticket. */
typedef struct mdr_stage_sync {
  uint32_t done;      /* blocks finished in this launch */
  uint32_t ticket;    /* blocks started in this launch */
  uint64_t published; /* (step + 1) << 32 | token count, from ticket 0 */
} mdr_stage_sync;

/* What a launch needs to read its step from the staging ring. All addresses
 * are device addresses (the ring and ack are mapped pinned host memory). */
typedef struct mdr_stage_desc {
  uint64_t ring;       /* slot 0 */
  uint64_t slot_bytes; /* stride between slots */
  uint64_t counter;    /* device uint64: launches consumed so far */
  uint64_t done;       /* device mdr_stage_sync (16 bytes, 8-aligned) */
  uint64_t ack;        /* mapped pinned uint64: counter value after the last finished launch */
  uint64_t token_ids;  /* destination of the ids (uint32) */
  uint64_t count_out;  /* device uint32[2]: the step's real token and sequence counts, for the body */
  uint32_t slots;      /* ring length */
  uint32_t flags;      /* MDR_STAGE_* */
  uint64_t table;      /* TABLE, or INLINE when set: device plan table of the launch's rules (zero_map.h
                          section 4) */
  uint64_t table_max;  /* TABLE, or INLINE when table is set: its largest count m */
  uint64_t ids_src;    /* DEVICE_IDS: the engine's ids in device memory (0 or token_ids: already in place) */
  uint32_t pad_id;     /* DEVICE_IDS: the id written after the first t, up to the copy count */
  uint32_t n_inputs;   /* declared inputs (mdr_stage_input entries at `inputs`) */
  uint64_t inputs;     /* device table of n_inputs mdr_stage_input */
  uint32_t copy_sequences; /* per-sequence rows the launch copies (static and TABLE launches; DYNAMIC
                              by device count reads them from the header) */
  uint32_t inline_bytes;   /* INLINE: the bytes of the launch's slot image (its count's layout), which
                              pick the image class; 0 reads as at most MDR_STAGE_INLINE_BYTES */
} mdr_stage_desc;

/* Whether a TABLE launch of n rules at t can be served: a table, t in
 * 1..table_max, at most MDR_ZERO_MAX_SEGS rules (one launch), not DYNAMIC. */
MDR_HD int mdr_stage_table_ok(const mdr_stage_desc *st, uint64_t n, uint64_t t) {
  return st->table != 0 && t >= 1 && t <= st->table_max && n <= MDR_ZERO_MAX_SEGS && !(st->flags & MDR_STAGE_DYNAMIC);
}

/* The image class an inline launch takes (its capacity in bytes), as the
 * CUDA backend and the host backend pick it: without a plan table that
 * serves the count (`table`: mdr_stage_table_ok), the small class when the
 * image (st->inline_bytes) fits it; with one, the smallest class that
 * holds the image, except that a launch with step inputs takes at least
 * the large class: the larger classes carry the count's input table in
 * their parameters, the small one does not, and its stage block would
 * read the table from device memory, a round trip before its first copy.
 * 0: no class holds the image. */
MDR_HD uint32_t mdr_stage_inline_class(const mdr_stage_desc *st, int table) {
  const uint32_t b = st->inline_bytes;
  if (!table) return b <= MDR_STAGE_INLINE_BYTES ? MDR_STAGE_INLINE_BYTES : 0u;
  if (b <= MDR_STAGE_INLINE_BYTES && st->n_inputs == 0) return MDR_STAGE_INLINE_BYTES;
  if (b <= MDR_STAGE_INLINE_LARGE_BYTES) return MDR_STAGE_INLINE_LARGE_BYTES;
  if (b <= MDR_STAGE_INLINE_XL_BYTES) return MDR_STAGE_INLINE_XL_BYTES;
  if (b <= MDR_STAGE_INLINE_XXL_BYTES) return MDR_STAGE_INLINE_XXL_BYTES;
  if (b <= MDR_STAGE_INLINE_XXXL_BYTES) return MDR_STAGE_INLINE_XXXL_BYTES;
  return 0u;
}

#ifdef __cplusplus
}
#endif
#endif
