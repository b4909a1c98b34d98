/* zero_fused_host.c — the fused zero plan executed on the CPU.
 *
 * The host backend's zero_fused slot. It walks the plan exactly as
 * kernels/zero_fused.cu does: the same split into launches of at most
 * MDR_ZERO_MAX_SEGS segments (FETCH on the first, ADVANCE on the last,
 * DYNAMIC on all), the same chunk prefix sums, mdr_zero_locate and
 * mdr_zero_chunk_span from zero_map.h, so a byte is cleared here if and only
 * if the kernel clears it. A DYNAMIC launch clears in the kernel's two
 * phases (the floor, then the rest at the slot's t: mdr_zero_seg_floor). One
 * "launch" behaves as a grid of one block: it takes ticket 0, publishes t,
 * and the stage's done counter goes 0 -> 1 -> reset with the ticket. Every
 * address (segments, ring, counter, done, ack, token_ids, count_out) is a
 * host address. A static plan of one launch that may take a chunk list
 * (zero_map.h section 5) and fits one is cleared through that list, as the
 * kernel clears it when captured (eager kernel launches take the prefix
 * sums; the bytes cleared are the same either way). An INLINE stage's slot
 * is the launch's own copy of its image (mdr_zero_fused_host_inline). */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "backend_impl.h"

#define HOST_PTR(addr) ((void *)(uintptr_t)(addr))

/* Clear, chunk by chunk, [ptr + off[i], ptr + off[i] + len[i]) of up to
 * MDR_ZERO_MAX_SEGS segments. */
static void zero_ranges_host(const mdr_zero_seg *segs, uint32_t n, const uint64_t *off, const uint64_t *len) {
  uint64_t prefix[MDR_ZERO_MAX_SEGS + 1];
  prefix[0] = 0;
  for (uint32_t i = 0; i < n; i++) prefix[i + 1] = prefix[i] + mdr_zero_chunks(len[i]);
  for (uint64_t k = 0; k < prefix[n]; k++) {
    uint32_t s = mdr_zero_locate(prefix, n, k);
    mdr_zero_span sp = mdr_zero_chunk_span(segs[s].ptr + off[s], len[s], k - prefix[s]);
    if (sp.body > sp.begin) memset(HOST_PTR(sp.begin), 0, (size_t)(sp.body - sp.begin));
    if (sp.tail > sp.body) memset(HOST_PTR(sp.body), 0, (size_t)(sp.tail - sp.body));
    if (sp.end > sp.tail) memset(HOST_PTR(sp.tail), 0, (size_t)(sp.end - sp.tail));
  }
}

/* A static plan of one launch as its chunk list, as zero_list_kernel
 * clears it: 1, or 0 when the plan does not take the list. */
static int zero_list_host(const mdr_zero_seg *segs, uint32_t n, uint64_t t) {
  mdr_zero_seg fixed[MDR_ZERO_MAX_SEGS];
  uint64_t words[MDR_ZERO_LIST_MAX];
  const uint32_t m = (uint32_t)mdr_zero_plan_at(segs, n, t, fixed);
  const uint32_t k = mdr_zero_list_build(fixed, m, words, MDR_ZERO_LIST_MAX);
  if (k == MDR_ZERO_LIST_NONE) return 0;
  for (uint32_t i = 0; i < k; i++) {
    const mdr_zero_span sp = mdr_zero_list_span(words[i]);
    memset(HOST_PTR(sp.begin), 0, (size_t)(sp.end - sp.begin));
  }
  return 1;
}

/* Static: every segment's bytes at t (the chunk list when the plan is one
 * launch, `whole`, that may take it and fits it). DYNAMIC: the floor, then
 * the rest. */
static void zero_launch_host(const mdr_zero_seg *segs, uint32_t n, uint64_t t, int dynamic, int whole,
                             uint32_t flags) {
  if (!dynamic && whole && mdr_zero_list_allowed(flags) && zero_list_host(segs, n, t)) return;
  uint64_t off[MDR_ZERO_MAX_SEGS] = {0}, len[MDR_ZERO_MAX_SEGS] = {0};
  for (uint32_t i = 0; i < n; i++) {
    off[i] = 0;
    len[i] = dynamic ? mdr_zero_seg_floor(&segs[i]) : mdr_zero_seg_bytes(&segs[i], t);
  }
  zero_ranges_host(segs, n, off, len);
  if (!dynamic) return;
  for (uint32_t i = 0; i < n; i++) {
    uint64_t b = mdr_zero_seg_bytes(&segs[i], t);
    off[i] = len[i];
    len[i] = b > off[i] ? b - off[i] : 0;
  }
  zero_ranges_host(segs, n, off, len);
}

/* A TABLE launch: count t's entry of the plan table (host addresses here),
 * read as zero_table_kernel reads it. */
static void zero_table_host(size_t n, uint64_t t, const mdr_stage_desc *stage) {
  const uint64_t *w = (const uint64_t *)HOST_PTR(stage->table);
  const uint64_t *e = w + mdr_plan_table_entry(n, t);
  mdr_zero_seg segs[MDR_ZERO_MAX_SEGS];
  uint64_t off[MDR_ZERO_MAX_SEGS] = {0};
  for (size_t i = 0; i < n; i++) segs[i] = (mdr_zero_seg){.ptr = w[i], .bytes = e[i], .rule = MDR_RULE_FIXED};
  zero_ranges_host(segs, (uint32_t)n, off, e);
}

/* The stage block's inputs (staging/staging.cuh): from the slot (when the
 * launch reads one) the rows at the copy counts, which the host padded;
 * from device memory the rows at the real counts, then each input's pad up
 * to the copy counts. Each entry from `ptable` (the launch's own copy of
 * the table) where it holds one (a destination not 0), else from the
 * descriptor's table, as mdr_stage_block takes them. */
static void stage_inputs_host(const mdr_stage_desc *stage, const mdr_stage_input *ptable, const unsigned char *slot,
                              uint64_t t, uint64_t s, uint64_t copy_t, uint64_t copy_s) {
  const mdr_stage_input *table = (const mdr_stage_input *)HOST_PTR(stage->inputs);
  if (stage->n_inputs > MDR_STAGE_INLINE_TABLE) ptable = NULL;
  for (uint32_t i = 0; i < stage->n_inputs && i < MDR_STAGE_INPUTS_MAX; i++) {
    const mdr_stage_input *in = ptable && ptable[i].dst ? &ptable[i] : &table[i];
    unsigned char *dst = (unsigned char *)HOST_PTR(in->dst);
    const uint64_t copy_bytes = mdr_stage_input_rows(in, copy_t, copy_s) * in->row_bytes;
    if (!in->src) {
      if (slot && copy_bytes) memcpy(dst, slot + in->offset, (size_t)copy_bytes);
      continue;
    }
    const uint64_t bytes = mdr_stage_input_rows(in, t, s) * in->row_bytes;
    if (in->src != in->dst && bytes) memmove(dst, HOST_PTR(in->src), (size_t)bytes);
    for (uint64_t b = bytes; b + in->elem_bytes <= copy_bytes; b += in->elem_bytes)
      for (uint32_t k = 0; k < in->elem_bytes; k++) dst[b + k] = (unsigned char)(in->pad >> (8 * k));
  }
}

void mdr_zero_fused_host(const mdr_zero_seg *segs, size_t n, uint64_t tokens,
                         const mdr_stage_desc *stage) {
  mdr_zero_fused_host_inline(segs, n, tokens, stage, NULL, NULL);
}

/* A GPU runs a launch's stage block and its zeroing blocks in no set
 * order, so the mirror takes both orders: the stage work before the
 * zeroing in about half the launches, chosen by a counter's hash (the same
 * sequence in every run of a single-threaded program). A step whose bytes
 * depended on the order (a destination inside the plan, say) would show
 * it on the host as it would on a GPU, by chance. */
static int stage_first(void) {
  static _Atomic uint64_t launches;
  const uint64_t k = atomic_fetch_add_explicit(&launches, 1, memory_order_relaxed);
  return (int)((k * UINT64_C(0x9E3779B97F4A7C15)) >> 63);
}

/* An INLINE stage reads its slot from inline_slot (the launch's parameter
 * copy of the image), as the kernels' inline forms read their parameters:
 * the counter is neither read nor advanced; its input table's entries from
 * inline_table where that holds them. With a table that serves the
 * launch (TABLE unset) the plan is read from it, as the CUDA backend's
 * table form reads it. */
void mdr_zero_fused_host_inline(const mdr_zero_seg *segs, size_t n, uint64_t tokens,
                                const mdr_stage_desc *stage, const void *inline_slot, const void *inline_table) {
  if (n == 0 && !stage) return;
  const int early = stage && stage_first(); /* the stage work before the zeroing */
  if (stage && (stage->flags & MDR_STAGE_TABLE)) {
    /* one launch: the plan from the table and the static stage work */
    if (!mdr_stage_table_ok(stage, n, tokens)) return; /* the backends refuse these at enqueue */
    if (!early) zero_table_host(n, tokens, stage);
    mdr_stage_desc st = *stage;
    st.flags &= MDR_STAGE_FETCH | MDR_STAGE_ADVANCE | MDR_STAGE_DEVICE_IDS;
    if (st.flags) mdr_zero_fused_host(NULL, 0, tokens, &st);
    if (early) zero_table_host(n, tokens, stage);
    return;
  }
  int table_form = 0;
  const size_t n_table = n;
  if (stage && (stage->flags & MDR_STAGE_INLINE) && mdr_stage_table_ok(stage, n, tokens)) {
    /* the inline launch's table form (zero_table_inline_kernel): the plan
     * from the table, and the stage from the image as below */
    table_form = 1;
    if (!early) zero_table_host(n, tokens, stage);
    segs = NULL;
    n = 0;
  }
  const uint32_t stage_flags =
      stage ? stage->flags &
                  (MDR_STAGE_FETCH | MDR_STAGE_ADVANCE | MDR_STAGE_DYNAMIC | MDR_STAGE_DEVICE_IDS | MDR_STAGE_INLINE)
            : 0u;
  const size_t launches = n == 0 ? 1 : (n + MDR_ZERO_MAX_SEGS - 1) / MDR_ZERO_MAX_SEGS;

  for (size_t j = 0; j < launches; j++) {
    const size_t first = j * MDR_ZERO_MAX_SEGS;
    const size_t count = n - first < MDR_ZERO_MAX_SEGS ? n - first : MDR_ZERO_MAX_SEGS;
    uint32_t flags = stage_flags & MDR_STAGE_DYNAMIC;
    if (j == 0) flags |= stage_flags & (MDR_STAGE_FETCH | MDR_STAGE_DEVICE_IDS | MDR_STAGE_INLINE);
    if (j == launches - 1) flags |= stage_flags & MDR_STAGE_ADVANCE;

    uint64_t t = tokens, step = 0;
    const unsigned char *slot = NULL;
    const mdr_stage_header *header = NULL;
    const int dynamic = (flags & MDR_STAGE_DYNAMIC) != 0;
    const int inl = (flags & MDR_STAGE_INLINE) != 0;
    volatile mdr_stage_sync *sync = flags ? (volatile mdr_stage_sync *)HOST_PTR(stage->done) : NULL;
    if (flags && !inl) step = *(const volatile uint64_t *)HOST_PTR(stage->counter);
    if (dynamic) sync->ticket++; /* ticket 0: this block is the stager */
    if (flags & (MDR_STAGE_FETCH | MDR_STAGE_DYNAMIC)) {
      slot = inl ? (const unsigned char *)inline_slot
                 : (const unsigned char *)HOST_PTR(stage->ring + (step % stage->slots) * stage->slot_bytes);
      header = (const mdr_stage_header *)slot;
      if (dynamic) {
        t = header->tokens;
        sync->published = (uint64_t)(uint32_t)(step + 1) << 32 | (uint32_t)t;
      }
    }

    if (count && !early) zero_launch_host(segs + first, (uint32_t)count, t, dynamic, launches == 1, flags);

    if (flags & (MDR_STAGE_FETCH | MDR_STAGE_DEVICE_IDS)) {
      /* static plans copy the launch's own counts; DYNAMIC the slot's */
      const uint64_t copy = dynamic ? header->copy_tokens : tokens;
      const uint64_t copy_s = dynamic ? header->copy_sequences : stage->copy_sequences;
      const uint64_t real_t = (flags & MDR_STAGE_FETCH) || dynamic ? header->tokens : tokens;
      const uint64_t real_s = (flags & MDR_STAGE_FETCH) || dynamic ? header->sequences : copy_s;
      if (flags & MDR_STAGE_DEVICE_IDS) {
        /* the first n ids from ids_src (n: the slot's count with FETCH, else
         * the launch's), pad after them; no id is read from the slot */
        uint32_t *dst = (uint32_t *)HOST_PTR(stage->token_ids);
        if (stage->ids_src && stage->ids_src != stage->token_ids && real_t)
          memmove(dst, HOST_PTR(stage->ids_src), (size_t)real_t * sizeof(uint32_t));
        for (uint64_t i = real_t; i < copy; i++) dst[i] = stage->pad_id;
      } else if (flags & MDR_STAGE_FETCH) {
        if (copy)
          memcpy(HOST_PTR(stage->token_ids), slot + MDR_STAGE_HEADER_BYTES,
                 (size_t)copy * sizeof(uint32_t));
      }
      if (flags & (MDR_STAGE_FETCH | MDR_STAGE_DEVICE_IDS)) {
        stage_inputs_host(stage, inl ? (const mdr_stage_input *)inline_table : NULL,
                          (flags & MDR_STAGE_FETCH) ? slot : NULL, real_t, real_s, copy, copy_s);
        uint32_t *counts = (uint32_t *)HOST_PTR(stage->count_out);
        counts[0] = (uint32_t)real_t;
        counts[1] = (uint32_t)real_s;
      }
    }
    if (count && early) zero_launch_host(segs + first, (uint32_t)count, t, dynamic, launches == 1, flags);
    if (dynamic || ((flags & MDR_STAGE_ADVANCE) && !inl)) {
      uint32_t prev = sync->done++;
      if (prev == 0) { /* the last (only) block of a one-block grid */
        sync->done = 0;
        sync->ticket = 0;
        if (flags & MDR_STAGE_ADVANCE) {
          *(volatile uint64_t *)HOST_PTR(stage->counter) = step + 1;
          *(volatile uint64_t *)HOST_PTR(stage->ack) = step + 1;
        }
      }
    }
  }
  /* the table form's zeroing, when it comes after the stage work (an
   * inline launch: one launch, no counter to advance) */
  if (table_form && early) zero_table_host(n_table, tokens, stage);
}
