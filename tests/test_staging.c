/* Suite `staging`: the staging ring of a graph cache (graphs/staging.c) on
 * the host backend, where the device's words are host memory a test can
 * set: slot layout, the wait for a free slot, and the handshake's two
 * failure modes (a stream idle with a slot never released, and a device
 * ahead of the host). */
#include <criterion/criterion.h>
#include <string.h>

#include "fault_backend.h"
#include "staging.h"
#include "support.h"

enum { MAX_TOKENS = 40 };

static mdr_staging make(mdr_backend *b) {
  mdr_staging s;
  cr_assert_eq(mdr_staging_init(&s, b, MAX_TOKENS, NULL, NULL, 0), MDR_OK, "%s", mdr_backend_last_error(b));
  return s;
}

Test(staging, init_zeroes_the_ring_and_the_device_block) {
  mdr_backend *b = tb_backend(TB_HOST);
  mdr_staging s = make(b);
  const size_t ring = s.slot_bytes * MDR_GRAPH_STAGING_SLOTS;
  cr_assert_eq(s.slot_bytes % 256, 0);
  cr_assert_geq(s.slot_bytes, MDR_STAGE_HEADER_BYTES + MAX_TOKENS * 4);
  cr_assert_eq(tb_first_not(s.ring_host, ring + 8, 0), ring + 8, "ring and ack start zeroed");
  cr_assert_eq(*s.ack_host, 0);
  cr_assert_eq(s.host_step, 0);
  const mdr_dptr count = mdr_staging_count_ptr(&s);
  cr_assert_neq(count, 0);
  uint32_t c = 7;
  cr_assert_eq(mdr_backend_copy_d2h(b, &c, count, 4), MDR_OK);
  cr_assert_eq(c, 0);
  mdr_staging_fini(&s);
  cr_assert_null(s.ring_host);
  mdr_staging_fini(&s); /* twice: a no-op */
  mdr_backend_destroy(b);
}

Test(staging, a_slot_holds_the_header_the_ids_and_the_pad) {
  mdr_backend *b = tb_backend(TB_HOST);
  mdr_staging s = make(b);
  const uint32_t ids[3] = {11, 22, 33};
  for (uint64_t step = 0; step < MDR_GRAPH_STAGING_SLOTS + 2; step++) {
    s.host_step = step;
    *s.ack_host = step; /* every earlier launch finished */
    cr_assert_eq(mdr_staging_wait(&s, NULL), MDR_OK);
    const mdr_staging_step w = {.ids = ids, .tokens = 3, .copy_tokens = 5, .sequences = 2, .copy_sequences = 4,
                                .pad_id = 0xFFFF};
    mdr_staging_write(&s, &w);
    const unsigned char *slot = s.ring_host + (step % MDR_GRAPH_STAGING_SLOTS) * s.slot_bytes;
    mdr_stage_header h;
    memcpy(&h, slot, sizeof h);
    cr_assert_eq(h.tokens, 3);
    cr_assert_eq(h.copy_tokens, 5);
    cr_assert_eq(h.sequences, 2);
    cr_assert_eq(h.copy_sequences, 4);
    uint32_t got[5];
    memcpy(got, slot + MDR_STAGE_HEADER_BYTES, sizeof got);
    const uint32_t want[5] = {11, 22, 33, 0xFFFF, 0xFFFF};
    cr_assert_eq(memcmp(got, want, sizeof got), 0, "step %llu", (unsigned long long)step);
  }
  const mdr_stage_desc d = mdr_staging_desc(&s, 0x1000, MDR_STAGE_FETCH | MDR_STAGE_TABLE, 7);
  cr_assert_eq(d.flags, MDR_STAGE_FETCH | MDR_STAGE_TABLE);
  cr_assert_eq(d.slots, MDR_GRAPH_STAGING_SLOTS);
  cr_assert_eq(d.token_ids, 0x1000);
  cr_assert_eq(d.count_out, mdr_staging_count_ptr(&s));
  cr_assert_eq(d.copy_sequences, 7);
  cr_assert_eq(d.n_inputs, 0);
  cr_assert_eq(d.inputs, 0);
  cr_assert_eq(d.ack, s.ring_dev + s.slot_bytes * MDR_GRAPH_STAGING_SLOTS);
  mdr_staging_fini(&s);
  mdr_backend_destroy(b);
}

/* Every host input's rows past the step's counts, up to the copy counts,
 * hold its pad value (its low elem_bytes bytes, little-endian), for each
 * element size and for pads of 1 to a few hundred elements (the filler
 * copies in doubling runs past 16); the real rows hold the values, and the
 * slot past the copied rows is not written. */
Test(staging, host_inputs_pad_rows_past_the_count_with_their_pad_value) {
  mdr_backend *b = tb_backend(TB_HOST);
  enum { SEQS = 12, N_IN = 4 };
  static const uint32_t elem[N_IN] = {1, 2, 4, 8}, width[N_IN] = {1, 3, 37, 129};
  static const uint64_t pad[N_IN] = {0xA1, 0xB2C3, 0xD4E5F607u, 0x0102030405060708ull};
  mdr_dptr dst[N_IN];
  mdr_stage_input in[N_IN];
  uint64_t max_rows[N_IN];
  memset(in, 0, sizeof in);
  for (int i = 0; i < N_IN; i++) {
    cr_assert_eq(mdr_backend_alloc(b, SEQS * width[i] * elem[i], &dst[i]), MDR_OK);
    in[i] = (mdr_stage_input){.dst = dst[i], .pad = pad[i], .row_bytes = width[i] * elem[i],
                              .rows = MDR_STAGE_ROWS_SEQUENCES, .max_rows = SEQS, .elem_bytes = elem[i]};
    max_rows[i] = SEQS;
  }
  mdr_staging s;
  cr_assert_eq(mdr_staging_init(&s, b, MAX_TOKENS, in, max_rows, N_IN), MDR_OK, "%s", mdr_backend_last_error(b));
  static unsigned char vals[N_IN][SEQS * 129 * 8];
  for (int i = 0; i < N_IN; i++)
    for (size_t k = 0; k < sizeof vals[i]; k++) vals[i][k] = (unsigned char)(k * 7 + i + 1);
  const void *values[N_IN] = {vals[0], vals[1], vals[2], vals[3]};
  const uint32_t ids[MAX_TOKENS] = {5};
  static const size_t cases[][2] = {{1, 2}, {3, 3}, {1, 12}, {5, 8}, {11, 12}, {2, 6}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const size_t real = cases[c][0], copy = cases[c][1];
    unsigned char *slot = s.ring_host + (s.host_step % MDR_GRAPH_STAGING_SLOTS) * s.slot_bytes;
    memset(slot, 0x5A, s.slot_bytes);
    const mdr_staging_step w = {.ids = ids, .values = values, .tokens = SEQS, .copy_tokens = SEQS,
                                .sequences = real, .copy_sequences = copy};
    mdr_staging_write(&s, &w);
    for (int i = 0; i < N_IN; i++) {
      const unsigned char *at = slot + s.inputs[i].offset;
      const size_t rb = in[i].row_bytes;
      cr_assert_eq(memcmp(at, vals[i], real * rb), 0, "input %d, case %zu: the real rows", i, c);
      for (size_t e = 0; e < (copy - real) * width[i]; e++)
        for (uint32_t k = 0; k < elem[i]; k++)
          cr_assert_eq(at[real * rb + e * elem[i] + k], (unsigned char)(pad[i] >> (8 * k)),
                       "input %d (%u-byte elements), case %zu (%zu of %zu rows): pad element %zu, byte %u", i,
                       elem[i], c, real, copy, e, k);
      if (copy < SEQS)
        cr_assert_eq(at[copy * rb], 0x5A, "input %d, case %zu: the slot past the copied rows untouched", i, c);
    }
    s.host_step++;
    *s.ack_host = s.host_step;
  }
  mdr_staging_fini(&s);
  for (int i = 0; i < N_IN; i++) mdr_backend_free(b, dst[i]);
  mdr_backend_destroy(b);
}

/* The host backend's streams are always idle: a ring full of slots the
 * device never released is reported, with the launch's true number. */
Test(staging, an_idle_stream_with_the_slot_still_held_is_a_clear_error) {
  mdr_backend *b = tb_backend(TB_HOST);
  mdr_stream st = tb_stream(b);
  mdr_staging s = make(b);
  s.host_step = MDR_GRAPH_STAGING_SLOTS + 3;
  *s.ack_host = 3; /* launch 3 never finished */
  cr_assert_eq(mdr_staging_wait(&s, st), MDR_ERR_STATE);
  cr_assert_not_null(strstr(mdr_backend_last_error(b), "staged launch 3 never finished"), "%s",
                     mdr_backend_last_error(b));
  cr_assert_eq(s.host_step, MDR_GRAPH_STAGING_SLOTS + 3, "the wait changed nothing");
  *s.ack_host = 4; /* one more finished: a slot is free */
  cr_assert_eq(mdr_staging_wait(&s, st), MDR_OK);
  mdr_staging_fini(&s);
  mdr_backend_stream_destroy(b, st);
  mdr_backend_destroy(b);
}

/* A device that acknowledged more staged launches than the host enqueued
 * (a replayed capture of a step) is corruption: said so, never read as a
 * huge count of launches in flight. */
Test(staging, a_device_ahead_of_the_host_is_reported_as_corruption) {
  mdr_backend *b = tb_backend(TB_HOST);
  mdr_stream st = tb_stream(b);
  mdr_staging s = make(b);
  for (uint64_t host = 0; host < 3 * MDR_GRAPH_STAGING_SLOTS; host += 5) {
    s.host_step = host;
    *s.ack_host = host + 1;
    cr_assert_eq(mdr_staging_wait(&s, st), MDR_ERR_STATE, "host %llu", (unsigned long long)host);
    const char *e = mdr_backend_last_error(b);
    cr_assert_not_null(strstr(e, "corrupt"), "%s", e);
    cr_assert_null(strstr(e, "18446744"), "an underflowed count in: %s", e);
    cr_assert_eq(s.host_step, host, "the wait changed nothing");
  }
  mdr_staging_fini(&s);
  mdr_backend_stream_destroy(b, st);
  mdr_backend_destroy(b);
}

/* Every allocation failure of init leaves nothing allocated. */
Test(staging, a_failed_init_leaks_nothing) {
  mdr_backend *host = tb_backend(TB_HOST), *fb = NULL;
  cr_assert_eq(fault_backend_create(host, &fb), MDR_OK);
  for (long k = 1; k <= 4; k++) {
    mdr_staging s;
    fault_backend_fail_at(fb, k);
    mdr_status st = mdr_staging_init(&s, fb, MAX_TOKENS, NULL, NULL, 0);
    fault_backend_fail_at(fb, 0);
    if (st == MDR_OK) {
      cr_assert_eq(fault_backend_injected(fb), k - 1, "k=%ld: the injected failure was swallowed", k);
      mdr_staging_fini(&s);
      cr_assert_eq(fault_backend_live(fb), 0);
      break;
    }
    cr_assert_eq(fault_backend_live(fb), 0, "k=%ld: init leaked", k);
  }
  mdr_backend_destroy(fb);
  mdr_backend_destroy(host);
}

/* The stage blocks a static ring launch's read is spread over: one per
 * MDR_STAGE_SPREAD_VECS vectors of the slot (ids and every input's rows at
 * the copy counts), at most MDR_STAGE_SPREAD_MAX; none (one block) without
 * inputs or with an input already in device memory. A device-id launch's
 * slot holds no ids: its inputs' vectors alone count. */
Test(staging, a_large_slot_read_is_spread_over_stage_blocks) {
  mdr_backend *b = tb_backend(TB_HOST);
  enum { SEQS = 64, WIDTH = 128 };
  const uint64_t max_rows[2] = {MAX_TOKENS, SEQS};
  mdr_dptr dst[2];
  cr_assert_eq(mdr_backend_alloc(b, MAX_TOKENS * 4, &dst[0]), MDR_OK);
  cr_assert_eq(mdr_backend_alloc(b, SEQS * WIDTH * 4, &dst[1]), MDR_OK);
  mdr_stage_input in[2] = {
      {.dst = dst[0], .row_bytes = 4, .rows = MDR_STAGE_ROWS_TOKENS, .max_rows = MAX_TOKENS, .elem_bytes = 4},
      {.dst = dst[1], .row_bytes = WIDTH * 4, .rows = MDR_STAGE_ROWS_SEQUENCES, .max_rows = SEQS, .elem_bytes = 4}};
  mdr_staging s;
  cr_assert_eq(mdr_staging_init(&s, b, MAX_TOKENS, in, max_rows, 2), MDR_OK, "%s", mdr_backend_last_error(b));
  for (size_t seqs = 1; seqs <= SEQS; seqs++) {
    const size_t g = seqs < MAX_TOKENS ? seqs : MAX_TOKENS;
    const uint64_t vecs = (g * 4 + g * 4 + seqs * WIDTH * 4 + 15) / 16;
    const uint32_t f = mdr_staging_spread(&s, g, seqs, 1);
    const uint64_t want = (vecs + MDR_STAGE_SPREAD_VECS - 1) / MDR_STAGE_SPREAD_VECS;
    cr_assert_eq(mdr_stage_blocks_of(f), want < MDR_STAGE_SPREAD_MAX ? want : MDR_STAGE_SPREAD_MAX, "%zu sequences",
                 seqs);
    cr_assert_eq(f & ~(uint32_t)MDR_STAGE_SPREAD_MASK, 0, "spread bits only");
    const uint64_t dvecs = (g * 4 + seqs * WIDTH * 4 + 15) / 16;
    const uint64_t dwant = (dvecs + MDR_STAGE_SPREAD_VECS - 1) / MDR_STAGE_SPREAD_VECS;
    cr_assert_eq(mdr_stage_blocks_of(mdr_staging_spread(&s, g, seqs, 0)),
                 dwant < MDR_STAGE_SPREAD_MAX ? dwant : MDR_STAGE_SPREAD_MAX, "device ids, %zu sequences", seqs);
  }
  cr_assert_eq(mdr_stage_blocks_of(mdr_staging_spread(&s, 1, 1, 1)), 1, "a small slot: one block");
  cr_assert_gt(mdr_stage_blocks_of(mdr_staging_spread(&s, MAX_TOKENS, SEQS, 1)), 4, "32 KiB of block table");
  cr_assert_eq(mdr_stage_blocks_of(mdr_stage_spread_of(1u << 20)), MDR_STAGE_SPREAD_MAX, "at most the cap");
  mdr_staging_fini(&s);
  in[0].src = dst[0]; /* positions already in device memory */
  cr_assert_eq(mdr_staging_init(&s, b, MAX_TOKENS, in, max_rows, 2), MDR_OK);
  cr_assert_eq(mdr_staging_spread(&s, MAX_TOKENS, SEQS, 1), 0, "a device-resident input: one block");
  mdr_staging_fini(&s);
  cr_assert_eq(mdr_staging_init(&s, b, MAX_TOKENS, NULL, NULL, 0), MDR_OK);
  cr_assert_eq(mdr_staging_spread(&s, MAX_TOKENS, 1, 1), 0, "ids only: one block");
  mdr_staging_fini(&s);
  mdr_backend_free(b, dst[0]);
  mdr_backend_free(b, dst[1]);
  mdr_backend_destroy(b);
}

/* The input table an inline launch may carry in its parameters
 * (mdr_staging_inline_table): for every count with an inline layout, the
 * same entries, byte for byte, as the count's table in device memory (the
 * descriptor's `inputs`: each input with its offset in that count's
 * image), then zeroes up to MDR_STAGE_INLINE_TABLE entries; every byte of
 * the room written; a count without a layout gets the room zeroed. */
Test(staging, an_inline_launch_s_own_table_is_the_count_s_device_table) {
  mdr_backend *b = tb_backend(TB_HOST);
  enum { SEQS = 6, WIDTH = 128 };
  const uint64_t max_rows[3] = {MAX_TOKENS, SEQS, SEQS};
  mdr_dptr dst[3];
  cr_assert_eq(mdr_backend_alloc(b, MAX_TOKENS * 4, &dst[0]), MDR_OK);
  cr_assert_eq(mdr_backend_alloc(b, SEQS * 4, &dst[1]), MDR_OK);
  cr_assert_eq(mdr_backend_alloc(b, SEQS * WIDTH * 4, &dst[2]), MDR_OK);
  mdr_stage_input in[3] = {
      {.dst = dst[0], .row_bytes = 4, .rows = MDR_STAGE_ROWS_TOKENS, .max_rows = MAX_TOKENS, .elem_bytes = 4},
      {.dst = dst[1], .src = dst[1], .pad = 7, .row_bytes = 4, .rows = MDR_STAGE_ROWS_SEQUENCES, .max_rows = SEQS,
       .elem_bytes = 4}, /* already in device memory */
      {.dst = dst[2], .row_bytes = WIDTH * 4, .rows = MDR_STAGE_ROWS_SEQUENCES, .max_rows = SEQS, .elem_bytes = 4}};
  mdr_staging s;
  cr_assert_eq(mdr_staging_init(&s, b, MAX_TOKENS, in, max_rows, 3), MDR_OK, "%s", mdr_backend_last_error(b));
  cr_assert_eq(mdr_staging_inline_init(&s, MAX_TOKENS, SEQS), MDR_OK, "%s", mdr_backend_last_error(b));
  size_t counts = 0;
  for (size_t g = 1; g <= MAX_TOKENS && mdr_staging_inline_bytes(&s, g); g++, counts++) {
    static unsigned char room[MDR_STAGE_INLINE_TABLE * sizeof(mdr_stage_input)];
    memset(room, 0xC3, sizeof room);
    mdr_staging_inline_table(&s, g, room);
    const mdr_stage_desc d = mdr_staging_inline_desc(&s, 0x1000, g);
    cr_assert_eq(d.n_inputs, 3);
    cr_assert_neq(d.inputs, 0);
    mdr_stage_input dev[3];
    cr_assert_eq(mdr_backend_copy_d2h(b, dev, d.inputs, sizeof dev), MDR_OK);
    cr_assert_eq(memcmp(room, dev, sizeof dev), 0, "count %zu: the device table's entries", g);
    mdr_stage_input e;
    memcpy(&e, room + 2 * sizeof e, sizeof e);
    cr_assert_eq(e.dst, dst[2], "count %zu: the block table's destination", g);
    cr_assert_gt(e.offset, 0, "count %zu: its offset in the image", g);
    for (size_t k = sizeof dev; k < sizeof room; k++) cr_assert_eq(room[k], 0, "count %zu: byte %zu zeroed", g, k);
  }
  cr_assert_geq(counts, 2, "counts with an inline layout");
  /* a count without a layout: the room zeroed (the device table serves) */
  const size_t none[] = {0, counts + 1};
  for (int k = 0; k < 2; k++) {
    static unsigned char room[MDR_STAGE_INLINE_TABLE * sizeof(mdr_stage_input)];
    memset(room, 0xC3, sizeof room);
    mdr_staging_inline_table(&s, none[k], room);
    for (size_t j = 0; j < sizeof room; j++) cr_assert_eq(room[j], 0, "count %zu: byte %zu zeroed", none[k], j);
  }
  mdr_staging_fini(&s);
  for (int i = 0; i < 3; i++) mdr_backend_free(b, dst[i]);
  mdr_backend_destroy(b);
}
