/* Suite `step_inputs`: the per-step inputs a graph cache stages with the
 * ids (positions, sequence lengths, a block table, 8-byte and 2-byte
 * inputs, a fixed input, an input already in device memory, one kept in
 * place at its destination), in every mode,
 * replayed and eager, on the host backend and, when present, the CUDA
 * backend; the refusal of bad declarations and bad steps; and the ring's
 * survival of failures (an application's pending error, a failure inside a
 * step, two threads on one cache, a prepare after a failed capture). Every
 * destination is poisoned before each step and read back whole after it. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_backend.h"
#include "support.h"
#if defined(MDR_HAVE_CUDA)
#include "gpu_helpers.h"
#endif

enum { M = TB_SMALL_M, S = 24, WIDTH = 8, FIXED_ROWS = 4, N_IN = 7, POISON = 0xC7 };

/* The declared inputs, in order (index 1 + i). */
enum { IN_POS, IN_SEQLEN, IN_BLOCKS, IN_SLOTMAP, IN_HALF, IN_TEMP, IN_DEV };

typedef struct inputs_fixture {
  mdr_backend *b;
  mdr_stream s;
  mdr_arena *a;
  mdr_dptr dst[N_IN];   /* the destinations (IN_BLOCKS: in the arena) */
  size_t bytes[N_IN];   /* their extents */
  mdr_dptr dev_src;     /* IN_DEV's values in device memory */
  mdr_dptr spare;       /* a case's own large destinations (freed with the fixture), or 0 */
  mdr_step_input in[N_IN];
} inputs_fixture;

static const size_t k_elem[N_IN] = {4, 4, 4, 8, 2, 4, 4};

static void inputs_init(inputs_fixture *f, mdr_backend *b) {
  memset(f, 0, sizeof *f);
  f->b = b;
  f->s = tb_stream(b);
  mdr_sizes sizes = tb_small_sizes();
  cr_assert_eq(mdr_arena_create(b, &sizes, &f->a), MDR_OK, "%s", mdr_backend_last_error(b));
  const size_t rows[N_IN] = {M, S, S, M, M, FIXED_ROWS, M};
  const size_t width[N_IN] = {1, 1, WIDTH, 1, 1, 1, 1};
  const mdr_step_input_shape shape[N_IN] = {MDR_INPUT_PER_TOKEN, MDR_INPUT_PER_SEQUENCE, MDR_INPUT_PER_SEQUENCE,
                                            MDR_INPUT_PER_TOKEN, MDR_INPUT_PER_TOKEN,    MDR_INPUT_FIXED,
                                            MDR_INPUT_PER_TOKEN};
  const char *names[N_IN] = {"positions", "seq_lens", "block_table", "slot_mapping", "half", "temperature",
                             "device_positions"};
  const uint64_t pad[N_IN] = {0xFFFFFFF0u, 0, 0xFFFFFFFFu, (uint64_t)-1, 0xABCD, 0, 0x5A5A5A5Au};
  for (int i = 0; i < N_IN; i++) {
    f->bytes[i] = rows[i] * width[i] * k_elem[i];
    f->in[i] = (mdr_step_input){.name = names[i],
                                .elem_bytes = k_elem[i],
                                .shape = shape[i],
                                .width = width[i],
                                .max_rows = i == IN_TEMP ? FIXED_ROWS : 0,
                                .pad = pad[i],
                                .dest = MDR_INPUT_TO_DEVICE};
    if (i == IN_BLOCKS) {
      cr_assert_geq(mdr_arena_fp8_act_bytes(f->a), f->bytes[i], "fp8_act holds the block table");
      f->in[i].dest = MDR_INPUT_TO_ARENA;
      f->in[i].buffer = MDR_BUF_FP8_ACT; /* outside the zero plan */
      f->in[i].offset = 0;
      f->dst[i] = mdr_arena_fp8_act(f->a);
    } else {
      cr_assert_eq(mdr_backend_alloc(b, f->bytes[i], &f->dst[i]), MDR_OK);
      f->in[i].address = f->dst[i];
    }
  }
  cr_assert_eq(mdr_backend_alloc(b, f->bytes[IN_DEV], &f->dev_src), MDR_OK);
  f->in[IN_DEV].device_src = f->dev_src;
}

static void inputs_fini(inputs_fixture *f) {
  for (int i = 0; i < N_IN; i++)
    if (i != IN_BLOCKS) mdr_backend_free(f->b, f->dst[i]);
  mdr_backend_free(f->b, f->dev_src);
  mdr_backend_free(f->b, f->spare);
  mdr_arena_destroy(f->a);
  mdr_backend_stream_destroy(f->b, f->s);
}

static mdr_graph_cache *make_cache(inputs_fixture *f, mdr_graph_mode mode, mdr_zero_strategy zero,
                                   mdr_graph_dynamic_impl impl) {
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.mode = mode;
  o.zero = zero;
  o.dynamic_impl = impl;
  o.inputs = f->in;
  o.n_inputs = N_IN;
  o.max_sequences = S;
  o.pad_token_id = 3;
  mdr_graph_cache *c = NULL;
  cr_assert_eq(mdr_graph_cache_create(f->a, f->s, &o, &c), MDR_OK, "%s", mdr_backend_last_error(f->b));
  return c;
}

/* One step's host values, generated from a seed. */
typedef struct step_values {
  uint32_t ids[M];
  uint32_t pos[M], seqlen[S], blocks[S * WIDTH], temp[FIXED_ROWS], dev[M];
  uint64_t slotmap[M];
  uint16_t half[M];
} step_values;

static void make_values(uint64_t *rng, step_values *v, size_t t, size_t s) {
  for (size_t i = 0; i < t; i++) {
    v->ids[i] = (uint32_t)(tb_rng_next(rng) % 150000) + 1;
    v->pos[i] = (uint32_t)tb_rng_next(rng);
    v->slotmap[i] = tb_rng_next(rng);
    v->half[i] = (uint16_t)tb_rng_next(rng);
    v->dev[i] = (uint32_t)tb_rng_next(rng);
  }
  for (size_t i = 0; i < s; i++) v->seqlen[i] = (uint32_t)tb_rng_next(rng);
  for (size_t i = 0; i < s * WIDTH; i++) v->blocks[i] = (uint32_t)tb_rng_next(rng);
  for (size_t i = 0; i < FIXED_ROWS; i++) v->temp[i] = (uint32_t)tb_rng_next(rng);
}

static const void *const *values_of(const step_values *v, const void **arr) {
  arr[0] = v->ids;
  arr[1 + IN_POS] = v->pos;
  arr[1 + IN_SEQLEN] = v->seqlen;
  arr[1 + IN_BLOCKS] = v->blocks;
  arr[1 + IN_SLOTMAP] = v->slotmap;
  arr[1 + IN_HALF] = v->half;
  arr[1 + IN_TEMP] = v->temp;
  arr[1 + IN_DEV] = NULL; /* in device memory */
  return arr;
}

static void poison_inputs(inputs_fixture *f) {
  for (int i = 0; i < N_IN; i++) cr_assert_eq(mdr_backend_fill(f->b, f->dst[i], POISON, f->bytes[i]), MDR_OK);
  cr_assert_eq(mdr_backend_fill(f->b, mdr_arena_token_ids(f->a), POISON, mdr_arena_token_ids_bytes(f->a)), MDR_OK);
}

/* Destination i after a step: `real` bytes of `want`, then the pad element
 * up to `copy` bytes, then poison to the end. */
static void expect_dst(inputs_fixture *f, int i, const void *want, size_t real, size_t copy, const char *what) {
  unsigned char got[M * WIDTH * 8 + 64];
  cr_assert_leq(f->bytes[i], sizeof got);
  cr_assert_eq(mdr_backend_copy_d2h(f->b, got, f->dst[i], f->bytes[i]), MDR_OK);
  const size_t e = k_elem[i];
  for (size_t k = 0; k < f->bytes[i]; k++) {
    unsigned char w;
    if (k < real)
      w = ((const unsigned char *)want)[k];
    else if (k < copy)
      w = (unsigned char)(f->in[i].pad >> (8 * (k % e)));
    else
      w = POISON;
    cr_assert_eq(got[k], w, "%s: input %s byte %zu (real %zu, copy %zu bytes)", what, f->in[i].name, k, real, copy);
  }
}

/* Check every destination after a step of t tokens and s sequences: graph
 * bound g (token rows) and sb (sequence rows) in EXACT / LADDER, exactly
 * t and s in DYNAMIC. */
static void expect_step(inputs_fixture *f, mdr_graph_cache *c, const step_values *v, const step_values *dev,
                        size_t t, size_t s, int dynamic, const char *what) {
  size_t g = 0, sb = 0;
  cr_assert_eq(mdr_graph_cache_graph_tokens(c, t, &g), MDR_OK);
  cr_assert_eq(mdr_graph_cache_sequence_bound(c, t, &sb), MDR_OK);
  const size_t ct = dynamic ? t : g, cs = dynamic ? s : sb;
  uint32_t ids[M];
  unsigned char raw[M * 4];
  cr_assert_eq(mdr_backend_copy_d2h(f->b, raw, mdr_arena_token_ids(f->a), M * 4), MDR_OK);
  memcpy(ids, raw, sizeof ids);
  for (size_t i = 0; i < ct; i++) cr_assert_eq(ids[i], i < t ? v->ids[i] : 3u, "%s: id %zu", what, i);
  for (size_t k = ct * 4; k < M * 4; k++) cr_assert_eq(raw[k], POISON, "%s: token_ids byte %zu", what, k);
  expect_dst(f, IN_POS, v->pos, 4 * t, 4 * ct, what);
  expect_dst(f, IN_SEQLEN, v->seqlen, 4 * s, 4 * cs, what);
  expect_dst(f, IN_BLOCKS, v->blocks, 4 * WIDTH * s, 4 * WIDTH * cs, what);
  expect_dst(f, IN_SLOTMAP, v->slotmap, 8 * t, 8 * ct, what);
  expect_dst(f, IN_HALF, v->half, 2 * t, 2 * ct, what);
  expect_dst(f, IN_TEMP, v->temp, 4 * FIXED_ROWS, 4 * FIXED_ROWS, what);
  expect_dst(f, IN_DEV, dev->dev, 4 * t, 4 * ct, what);
  uint32_t counts[2];
  cr_assert_eq(mdr_backend_copy_d2h(f->b, &counts[0], mdr_graph_cache_count_ptr(c), 4), MDR_OK);
  cr_assert_eq(mdr_backend_copy_d2h(f->b, &counts[1], mdr_graph_cache_sequences_ptr(c), 4), MDR_OK);
  cr_assert_eq(counts[0], t, "%s: token count", what);
  cr_assert_eq(counts[1], s, "%s: sequence count", what);
}

typedef struct mode_case {
  tb_kind kind;
  mdr_graph_mode mode;
  mdr_zero_strategy zero;
  mdr_graph_dynamic_impl impl;
  int device_ids;
} mode_case;

ParameterizedTestParameters(step_inputs, every_input_reaches_its_destination_padded_in_every_mode) {
  static mode_case cases[TB_KIND_COUNT * 6 * 2];
  size_t n = 0;
  for (int k = 0; k < TB_KIND_COUNT; k++)
    for (int d = 0; d < 2; d++) {
      cases[n++] = (mode_case){(tb_kind)k, MDR_GRAPH_EXACT, MDR_ZERO_FUSED, MDR_DYNAMIC_NODE_UPDATE, d};
      cases[n++] = (mode_case){(tb_kind)k, MDR_GRAPH_EXACT, MDR_ZERO_MEMSET, MDR_DYNAMIC_NODE_UPDATE, d};
      cases[n++] = (mode_case){(tb_kind)k, MDR_GRAPH_LADDER, MDR_ZERO_FUSED, MDR_DYNAMIC_NODE_UPDATE, d};
      cases[n++] = (mode_case){(tb_kind)k, MDR_GRAPH_LADDER, MDR_ZERO_MEMSET, MDR_DYNAMIC_NODE_UPDATE, d};
      cases[n++] = (mode_case){(tb_kind)k, MDR_GRAPH_DYNAMIC, MDR_ZERO_FUSED, MDR_DYNAMIC_NODE_UPDATE, d};
      cases[n++] = (mode_case){(tb_kind)k, MDR_GRAPH_DYNAMIC, MDR_ZERO_FUSED, MDR_DYNAMIC_DEVICE_COUNT, d};
    }
  return cr_make_param_array(mode_case, cases, n);
}

ParameterizedTest(mode_case *mc, step_inputs, every_input_reaches_its_destination_padded_in_every_mode) {
  mdr_backend *b = tb_backend(mc->kind);
  inputs_fixture f;
  inputs_init(&f, b);
  mdr_graph_cache *c = make_cache(&f, mc->mode, mc->zero, mc->impl);
  mdr_dptr dev_ids = 0;
  cr_assert_eq(mdr_backend_alloc(b, M * 4, &dev_ids), MDR_OK);
  uint64_t rng = 1234 + (uint64_t)mc->mode * 7 + (uint64_t)mc->zero + (uint64_t)mc->impl * 3 + (uint64_t)mc->device_ids;
  /* counts from 1 to M, sequences from 1 to min(t, S), with repeats (hits)
   * and ring wraps; the same seed replays some counts */
  for (int step = 0; step < 3 * MDR_GRAPH_STAGING_SLOTS + 5; step++) {
    const size_t t = step < 4 ? (size_t)(step + 1) : 1 + tb_rng_next(&rng) % M;
    const size_t smax = t < S ? t : S;
    const size_t s = 1 + tb_rng_next(&rng) % smax;
    step_values v, dv;
    make_values(&rng, &v, t, s);
    memset(&dv, 0, sizeof dv);
    memcpy(dv.dev, v.dev, sizeof v.dev);
    poison_inputs(&f);
    cr_assert_eq(mdr_backend_copy_h2d(b, f.dev_src, v.dev, 4 * t), MDR_OK);
    const void *arr[1 + N_IN];
    mdr_status st;
    if (mc->device_ids) {
      cr_assert_eq(mdr_backend_copy_h2d(b, dev_ids, v.ids, 4 * t), MDR_OK);
      st = mdr_graph_cache_step_inputs_device(c, dev_ids, values_of(&v, arr), 1 + N_IN, t, s);
    } else {
      st = mdr_graph_cache_step_inputs(c, values_of(&v, arr), 1 + N_IN, t, s);
    }
    cr_assert_eq(st, MDR_OK, "step %d: %s", step, mdr_backend_last_error(b));
    step_values shown = v;
    memset(&v, 0xEE, sizeof v); /* the caller may reuse its arrays at once */
    cr_assert_eq(mdr_backend_synchronize(b, f.s), MDR_OK);
    char what[96];
    snprintf(what, sizeof what, "step %d (t=%zu s=%zu)", step, t, s);
    expect_step(&f, c, &shown, &dv, t, s, mc->mode == MDR_GRAPH_DYNAMIC, what);
  }
  mdr_graph_stats gs;
  cr_assert_eq(mdr_graph_cache_stats(c, &gs), MDR_OK);
  cr_assert_gt(gs.hits, 0, "graphs were replayed");
  mdr_graph_cache_destroy(c);
  mdr_backend_free(b, dev_ids);
  inputs_fini(&f);
  mdr_backend_destroy(b);
}

/* Inputs that hold fewer rows than a graph pads to (max_rows below the
 * graph's count, or below max_sequences): the padding stops at the end of
 * the destination. Each destination is followed by guard bytes, poisoned
 * with it before every step and checked after it. */
enum { SHORT_POS = 5, SHORT_SEQS = 3, SHORT_WIDTH = 8, GUARD = 64, N_SHORT = 3 };

typedef struct short_case {
  tb_kind kind;
  mdr_graph_mode mode;
} short_case;

ParameterizedTestParameters(step_inputs, padding_stops_at_an_inputs_max_rows) {
  static short_case cases[TB_KIND_COUNT * 2];
  size_t n = 0;
  for (int k = 0; k < TB_KIND_COUNT; k++) {
    cases[n++] = (short_case){(tb_kind)k, MDR_GRAPH_EXACT};
    cases[n++] = (short_case){(tb_kind)k, MDR_GRAPH_LADDER};
  }
  return cr_make_param_array(short_case, cases, n);
}

ParameterizedTest(short_case *sc, step_inputs, padding_stops_at_an_inputs_max_rows) {
  mdr_backend *b = tb_backend(sc->kind);
  mdr_stream s = tb_stream(b);
  mdr_sizes sizes = tb_small_sizes();
  mdr_arena *a = NULL;
  cr_assert_eq(mdr_arena_create(b, &sizes, &a), MDR_OK, "%s", mdr_backend_last_error(b));
  const size_t rows[N_SHORT] = {SHORT_POS, SHORT_SEQS, SHORT_SEQS};
  const size_t width[N_SHORT] = {1, 1, SHORT_WIDTH};
  const mdr_step_input_shape shape[N_SHORT] = {MDR_INPUT_PER_TOKEN, MDR_INPUT_PER_SEQUENCE, MDR_INPUT_PER_SEQUENCE};
  const char *names[N_SHORT] = {"positions", "seq_lens", "block_table"};
  mdr_step_input in[N_SHORT];
  mdr_dptr dst[N_SHORT];
  size_t bytes[N_SHORT];
  for (int i = 0; i < N_SHORT; i++) {
    bytes[i] = rows[i] * width[i] * 4;
    cr_assert_eq(mdr_backend_alloc(b, bytes[i] + GUARD, &dst[i]), MDR_OK);
    in[i] = (mdr_step_input){.name = names[i], .elem_bytes = 4, .shape = shape[i], .width = width[i],
                             .max_rows = rows[i], .pad = 0x11111111u * (unsigned)(i + 1),
                             .dest = MDR_INPUT_TO_DEVICE, .address = dst[i]};
  }
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.mode = sc->mode;
  o.inputs = in;
  o.n_inputs = N_SHORT;
  o.max_sequences = S; /* more than the inputs' SHORT_SEQS rows */
  mdr_graph_cache *c = NULL;
  cr_assert_eq(mdr_graph_cache_create(a, s, &o, &c), MDR_OK, "%s", mdr_backend_last_error(b));
  unsigned char host[SHORT_SEQS * SHORT_WIDTH * 4 + GUARD];
  for (size_t t = 1; t <= SHORT_POS; t++)
    for (size_t q = 1; q <= (t < SHORT_SEQS ? t : SHORT_SEQS); q++) {
      uint32_t ids[SHORT_POS], pos[SHORT_POS], lens[SHORT_SEQS], table[SHORT_SEQS * SHORT_WIDTH];
      for (size_t k = 0; k < SHORT_POS; k++) ids[k] = (uint32_t)(100 + k), pos[k] = (uint32_t)(1000 + k);
      for (size_t k = 0; k < SHORT_SEQS; k++) lens[k] = (uint32_t)(2000 + k);
      for (size_t k = 0; k < SHORT_SEQS * SHORT_WIDTH; k++) table[k] = (uint32_t)(3000 + k);
      for (int i = 0; i < N_SHORT; i++) cr_assert_eq(mdr_backend_fill(b, dst[i], POISON, bytes[i] + GUARD), MDR_OK);
      const void *arr[1 + N_SHORT] = {ids, pos, lens, table};
      cr_assert_eq(mdr_graph_cache_step_inputs(c, arr, 1 + N_SHORT, t, q), MDR_OK, "t=%zu s=%zu: %s", t, q,
                   mdr_backend_last_error(b));
      cr_assert_eq(mdr_backend_synchronize(b, s), MDR_OK);
      const uint32_t *want[N_SHORT] = {pos, lens, table};
      const size_t real[N_SHORT] = {t, q, q};
      for (int i = 0; i < N_SHORT; i++) {
        cr_assert_eq(mdr_backend_copy_d2h(b, host, dst[i], bytes[i] + GUARD), MDR_OK);
        cr_assert_eq(memcmp(host, want[i], real[i] * width[i] * 4), 0, "%s: t=%zu s=%zu: the step's rows", names[i],
                     t, q);
        const size_t bad = tb_first_not(host + bytes[i], GUARD, POISON);
        cr_assert_eq(bad, GUARD, "%s (%s): t=%zu s=%zu: byte %zu past its %zu rows was written", names[i],
                     sc->mode == MDR_GRAPH_EXACT ? "EXACT" : "LADDER", t, q, bad, rows[i]);
      }
    }
  mdr_graph_cache_destroy(c);
  for (int i = 0; i < N_SHORT; i++) mdr_backend_free(b, dst[i]);
  mdr_arena_destroy(a);
  mdr_backend_stream_destroy(b, s);
  mdr_backend_destroy(b);
}

/* An input whose values the engine keeps at its destination (device_src
 * equal to it: a block table the engine writes on the device): a step
 * copies nothing for it and writes only its pad, in the rows from the
 * step's sequences up to the graph's bound (mdr_graph_cache_sequence_bound;
 * DYNAMIC: none). Its other rows keep what the engine wrote, and the bytes
 * past it are untouched; the host input beside it arrives. Every route: the
 * launch's parameters (inline, the default at these counts) and the ring
 * (MDR_STAGE_INLINE=0), LADDER, memset zeroing, DYNAMIC, host and device
 * ids. */
enum { IP_SEQS = 6, IP_WIDTH = 8, IP_STEPS = 24 };

typedef struct in_place_case {
  tb_kind kind;
  mdr_graph_mode mode;
  mdr_zero_strategy zero;
  int ring;       /* MDR_STAGE_INLINE=0 at create */
  int device_ids; /* mdr_graph_cache_step_inputs_device */
} in_place_case;

ParameterizedTestParameters(step_inputs, an_input_in_place_keeps_its_rows_and_gets_its_pad) {
  static in_place_case cases[TB_KIND_COUNT * 6];
  size_t n = 0;
  for (int k = 0; k < TB_KIND_COUNT; k++) {
    cases[n++] = (in_place_case){(tb_kind)k, MDR_GRAPH_EXACT, MDR_ZERO_FUSED, 0, 0};
    cases[n++] = (in_place_case){(tb_kind)k, MDR_GRAPH_EXACT, MDR_ZERO_FUSED, 1, 0};
    cases[n++] = (in_place_case){(tb_kind)k, MDR_GRAPH_EXACT, MDR_ZERO_FUSED, 0, 1};
    cases[n++] = (in_place_case){(tb_kind)k, MDR_GRAPH_EXACT, MDR_ZERO_MEMSET, 0, 0};
    cases[n++] = (in_place_case){(tb_kind)k, MDR_GRAPH_LADDER, MDR_ZERO_FUSED, 0, 0};
    cases[n++] = (in_place_case){(tb_kind)k, MDR_GRAPH_DYNAMIC, MDR_ZERO_FUSED, 0, 0};
  }
  return cr_make_param_array(in_place_case, cases, n);
}

ParameterizedTest(in_place_case *ic, step_inputs, an_input_in_place_keeps_its_rows_and_gets_its_pad) {
  mdr_backend *b = tb_backend(ic->kind);
  mdr_stream s = tb_stream(b);
  mdr_sizes sizes = tb_small_sizes();
  mdr_arena *a = NULL;
  cr_assert_eq(mdr_arena_create(b, &sizes, &a), MDR_OK, "%s", mdr_backend_last_error(b));
  const size_t table_bytes = IP_SEQS * IP_WIDTH * 4;
  mdr_dptr pos = 0, table = 0, dev_ids = 0;
  cr_assert_eq(mdr_backend_alloc(b, M * 4, &pos), MDR_OK);
  cr_assert_eq(mdr_backend_alloc(b, table_bytes + GUARD, &table), MDR_OK);
  cr_assert_eq(mdr_backend_alloc(b, M * 4, &dev_ids), MDR_OK);
  const uint32_t pad = 0xFFFFFFF7u;
  mdr_step_input in[2] = {
      {.name = "positions", .elem_bytes = 4, .shape = MDR_INPUT_PER_TOKEN, .dest = MDR_INPUT_TO_DEVICE,
       .address = pos},
      {.name = "block_table", .elem_bytes = 4, .shape = MDR_INPUT_PER_SEQUENCE, .width = IP_WIDTH, .pad = pad,
       .dest = MDR_INPUT_TO_DEVICE, .address = table, .device_src = table}};
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.mode = ic->mode;
  o.zero = ic->zero;
  o.inputs = in;
  o.n_inputs = 2;
  o.max_sequences = IP_SEQS;
  mdr_graph_cache *c = NULL;
  if (ic->ring) setenv("MDR_STAGE_INLINE", "0", 1);
  const mdr_status created = mdr_graph_cache_create(a, s, &o, &c);
  unsetenv("MDR_STAGE_INLINE");
  cr_assert_eq(created, MDR_OK, "%s", mdr_backend_last_error(b));
  mdr_step_input_info info;
  cr_assert_eq(mdr_graph_cache_step_input_info(c, 2, &info), MDR_OK);
  cr_assert_eq(info.device_src, table);
  cr_assert_eq(info.slot_offset, 0, "no room in a slot for an input in device memory");
  uint64_t rng = 4321 + (uint64_t)ic->mode * 5 + (uint64_t)ic->zero * 3 + (uint64_t)ic->ring * 7 + ic->device_ids;
  uint32_t engine[IP_SEQS * IP_WIDTH], got[IP_SEQS * IP_WIDTH + GUARD / 4];
  uint32_t ids[M], p[M], back[M];
  size_t padded = 0;
  for (int step = 0; step < IP_STEPS; step++) {
    /* counts 1..12 (graph counts repeat: replays), sequences 1..min(t, IP_SEQS) */
    const size_t t = 1 + tb_rng_next(&rng) % 12, smax = t < IP_SEQS ? t : IP_SEQS;
    const size_t q = step % 3 == 0 ? smax : 1 + tb_rng_next(&rng) % smax;
    for (size_t k = 0; k < IP_SEQS * IP_WIDTH; k++) engine[k] = (uint32_t)(0x10000u * (unsigned)(step + 1) + k);
    for (size_t k = 0; k < t; k++) ids[k] = (uint32_t)(10 + k), p[k] = (uint32_t)tb_rng_next(&rng);
    /* what the engine left at the destination before the step, the guard
     * poisoned past it */
    cr_assert_eq(mdr_backend_fill(b, table + table_bytes, POISON, GUARD), MDR_OK);
    cr_assert_eq(mdr_backend_copy_h2d(b, table, engine, table_bytes), MDR_OK);
    cr_assert_eq(mdr_backend_fill(b, pos, POISON, M * 4), MDR_OK);
    const void *arr[3] = {ids, p, NULL};
    mdr_status st;
    if (ic->device_ids) {
      cr_assert_eq(mdr_backend_copy_h2d(b, dev_ids, ids, 4 * t), MDR_OK);
      st = mdr_graph_cache_step_inputs_device(c, dev_ids, arr, 3, t, q);
    } else {
      st = mdr_graph_cache_step_inputs(c, arr, 3, t, q);
    }
    cr_assert_eq(st, MDR_OK, "step %d (t=%zu s=%zu): %s", step, t, q, mdr_backend_last_error(b));
    cr_assert_eq(mdr_backend_synchronize(b, s), MDR_OK);
    size_t bound = 0;
    cr_assert_eq(mdr_graph_cache_sequence_bound(c, t, &bound), MDR_OK);
    const size_t pad_to = ic->mode == MDR_GRAPH_DYNAMIC ? q : (bound < IP_SEQS ? bound : IP_SEQS);
    cr_assert_geq(pad_to, q);
    cr_assert_eq(mdr_backend_copy_d2h(b, got, table, table_bytes + GUARD), MDR_OK);
    for (size_t r = 0; r < IP_SEQS; r++)
      for (size_t j = 0; j < IP_WIDTH; j++) {
        const size_t k = r * IP_WIDTH + j;
        const uint32_t want = r >= q && r < pad_to ? pad : engine[k];
        cr_assert_eq(got[k], want, "step %d (t=%zu s=%zu, pad to %zu): row %zu col %zu = %#x, want %#x (%s)", step,
                     t, q, pad_to, r, j, got[k], want, r >= q && r < pad_to ? "the pad" : "the engine's value");
      }
    padded += pad_to - q;
    const size_t bad = tb_first_not((const unsigned char *)got + table_bytes, GUARD, POISON);
    cr_assert_eq(bad, GUARD, "step %d: byte %zu past the table was written", step, bad);
    cr_assert_eq(mdr_backend_copy_d2h(b, back, pos, 4 * t), MDR_OK);
    cr_assert_eq(memcmp(back, p, 4 * t), 0, "step %d: the positions beside it", step);
  }
  if (ic->mode != MDR_GRAPH_DYNAMIC) cr_assert_gt(padded, 0, "some steps had rows to pad");
  mdr_graph_stats gs;
  cr_assert_eq(mdr_graph_cache_stats(c, &gs), MDR_OK);
  cr_assert_gt(gs.hits, 0, "graphs were replayed");
  if (ic->ring || ic->mode == MDR_GRAPH_DYNAMIC) cr_assert_eq(gs.inline_steps, 0, "no inline steps");
  else if (ic->mode == MDR_GRAPH_EXACT && ic->zero == MDR_ZERO_FUSED) cr_assert_gt(gs.inline_steps, 0, "inline steps");
  mdr_graph_cache_destroy(c);
  mdr_backend_free(b, pos);
  mdr_backend_free(b, table);
  mdr_backend_free(b, dev_ids);
  mdr_arena_destroy(a);
  mdr_backend_stream_destroy(b, s);
  mdr_backend_destroy(b);
}

/* The eager path (graphs disabled) stages the same values. */
Test(step_inputs, eager_steps_stage_the_same_values) {
  setenv("MDR_DISABLE_GRAPHS", "1", 1);
  mdr_backend *b = tb_backend(TB_HOST);
  inputs_fixture f;
  inputs_init(&f, b);
  mdr_graph_cache *c = make_cache(&f, MDR_GRAPH_LADDER, MDR_ZERO_FUSED, MDR_DYNAMIC_NODE_UPDATE);
  unsetenv("MDR_DISABLE_GRAPHS");
  uint64_t rng = 99;
  for (int step = 0; step < 20; step++) {
    const size_t t = 1 + tb_rng_next(&rng) % M, s = 1 + tb_rng_next(&rng) % (t < S ? t : S);
    step_values v, dv;
    make_values(&rng, &v, t, s);
    memcpy(dv.dev, v.dev, sizeof v.dev);
    poison_inputs(&f);
    cr_assert_eq(mdr_backend_copy_h2d(b, f.dev_src, v.dev, 4 * t), MDR_OK);
    const void *arr[1 + N_IN];
    cr_assert_eq(mdr_graph_cache_step_inputs(c, values_of(&v, arr), 1 + N_IN, t, s), MDR_OK);
    expect_step(&f, c, &v, &dv, t, s, 0, "eager");
  }
  mdr_graph_stats gs;
  cr_assert_eq(mdr_graph_cache_stats(c, &gs), MDR_OK);
  cr_assert_eq(gs.eager_steps, 20);
  mdr_graph_cache_destroy(c);
  inputs_fini(&f);
  mdr_backend_destroy(b);
}

Test(step_inputs, the_layout_is_queryable_input_by_input) {
  mdr_backend *b = tb_backend(TB_HOST);
  inputs_fixture f;
  inputs_init(&f, b);
  mdr_graph_cache *c = make_cache(&f, MDR_GRAPH_EXACT, MDR_ZERO_FUSED, MDR_DYNAMIC_NODE_UPDATE);
  cr_assert_eq(mdr_graph_cache_step_input_count(c), 1 + N_IN);
  cr_assert_eq(mdr_graph_cache_step_input_count(NULL), 0);
  mdr_step_input_info info;
  cr_assert_eq(mdr_graph_cache_step_input_info(c, 0, &info), MDR_OK);
  cr_assert_str_eq(info.name, "token_ids");
  cr_assert_eq(info.elem_bytes, 4);
  cr_assert_eq(info.max_rows, M);
  cr_assert_eq(info.dst, mdr_arena_token_ids(f.a));
  cr_assert_eq(info.slot_offset, 16);
  size_t end = 16 + 4 * M;
  for (int i = 0; i < N_IN; i++) {
    cr_assert_eq(mdr_graph_cache_step_input_info(c, 1 + (size_t)i, &info), MDR_OK);
    cr_assert_str_eq(info.name, f.in[i].name);
    cr_assert_neq(info.name, f.in[i].name, "the name is the cache's copy");
    cr_assert_eq(info.elem_bytes, k_elem[i]);
    cr_assert_eq(info.dst, f.dst[i]);
    cr_assert_eq(info.max_bytes, f.bytes[i]);
    cr_assert_eq(info.row_bytes * info.max_rows, f.bytes[i]);
    if (i == IN_DEV) {
      cr_assert_eq(info.slot_offset, 0);
      cr_assert_eq(info.device_src, f.dev_src);
      continue;
    }
    cr_assert_eq(info.slot_offset % 16, 0);
    cr_assert_geq(info.slot_offset, end, "inputs do not overlap in the slot");
    end = info.slot_offset + info.max_bytes;
    size_t index = 99;
    cr_assert_eq(mdr_graph_cache_step_input_find(c, f.in[i].name, &index), MDR_OK);
    cr_assert_eq(index, 1 + (size_t)i);
  }
  cr_assert_geq(mdr_graph_cache_slot_bytes(c), end);
  size_t index = 0;
  cr_assert_eq(mdr_graph_cache_step_input_find(c, "nope", &index), MDR_ERR_OUT_OF_RANGE);
  /* NULL name or index: refused, the status text names which */
  index = 77;
  cr_assert_eq(mdr_graph_cache_step_input_find(c, NULL, &index), MDR_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(mdr_backend_last_error(b), "NULL name"), "%s", mdr_backend_last_error(b));
  cr_assert_eq(index, 77, "a refused find leaves the index");
  cr_assert_eq(mdr_graph_cache_step_input_find(c, "token_ids", NULL), MDR_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(mdr_backend_last_error(b), "NULL index"), "%s", mdr_backend_last_error(b));
  cr_assert_eq(mdr_graph_cache_step_input_find(NULL, "token_ids", &index), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_graph_cache_step_input_info(c, 1 + N_IN, &info), MDR_ERR_OUT_OF_RANGE);
  cr_assert_eq(mdr_graph_cache_step_input_info(c, 0, NULL), MDR_ERR_INVALID_ARGUMENT);
  mdr_graph_cache_destroy(c);
  inputs_fini(&f);
  mdr_backend_destroy(b);
}

/* A declaration is refused with the field named, and nothing leaks. */
typedef void (*breaker)(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in);
static void dup_name(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)f, (void)o;
  in[3].name = "positions";
}
static void null_name(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)f, (void)o;
  in[2].name = NULL;
}
static void ids_name(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)f, (void)o;
  in[0].name = "token_ids";
}
static void elem3(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)f, (void)o;
  in[1].elem_bytes = 3;
}
static void bad_shape(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)f, (void)o;
  in[1].shape = MDR_INPUT_SHAPE_COUNT;
}
static void rows_over_m(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)f, (void)o;
  in[IN_POS].max_rows = M + 1;
}
static void rows_over_s(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)f, (void)o;
  in[IN_SEQLEN].max_rows = S + 1;
}
static void fixed_zero(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)f, (void)o;
  in[IN_TEMP].max_rows = 0;
}
static void seqs_over_m(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)f, (void)in;
  o->max_sequences = M + 1;
}
static void past_arena(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)o;
  in[IN_BLOCKS].offset = mdr_arena_fp8_act_bytes(f->a) - 16;
}
static void not_a_buffer(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)f, (void)o;
  in[IN_BLOCKS].buffer = (mdr_buffer)MDR_BUF_COUNT;
}
static void unaligned(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)f, (void)o;
  in[IN_POS].address += 4;
}
static void no_address(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)f, (void)o;
  in[IN_POS].address = 0;
}
static void host_address(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)o, (void)in;
  fault_backend_host_range(f->b, f->dst[IN_SLOTMAP], f->dst[IN_SLOTMAP] + 1);
}
static void host_src(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)o, (void)in;
  fault_backend_host_range(f->b, f->dev_src, f->dev_src + 1);
}
static void bad_dest(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)f, (void)o;
  in[IN_HALF].dest = MDR_INPUT_DEST_COUNT;
}
static void overflow(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)f, (void)o;
  in[IN_TEMP].width = MDR_STAGING_SLOT_MAX_BYTES / 4 / FIXED_ROWS + 1;
}
static void slot_sum(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)o;
  /* each fits alone; together they overflow the slot (their destinations
   * apart, in a buffer of their own) */
  const size_t half = MDR_STAGING_SLOT_MAX_BYTES / 2 + 64;
  cr_assert_eq(mdr_backend_alloc(f->b, 2 * half, &f->spare), MDR_OK);
  in[IN_TEMP].width = MDR_STAGING_SLOT_MAX_BYTES / 4 / FIXED_ROWS / 2 + 1;
  in[IN_TEMP].dest = MDR_INPUT_TO_DEVICE;
  in[IN_TEMP].address = f->spare;
  in[IN_SLOTMAP].shape = MDR_INPUT_FIXED;
  in[IN_SLOTMAP].max_rows = 1;
  in[IN_SLOTMAP].width = MDR_STAGING_SLOT_MAX_BYTES / 8 / 2 + 1;
  in[IN_SLOTMAP].address = f->spare + half;
}
/* destinations that share bytes with what the staged launch writes beside
 * them (the zeroing, the ids, another input) or reads (another's source) */
static void in_zeroed(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)o;
  in[IN_BLOCKS].buffer = MDR_BUF_SCRATCH; /* zeroed whole at every count */
  cr_assert_geq(mdr_arena_bytes(f->a, MDR_BUF_SCRATCH), f->bytes[IN_BLOCKS]);
}
static void into_zeroed(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)o;
  /* an engine address inside a zeroed buffer's rows past the count */
  in[IN_POS].address = mdr_arena_hidden_states(f->a) + mdr_arena_hidden_states_bytes(f->a) - 16;
}
static void into_ids(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)o;
  in[IN_SLOTMAP].address = mdr_arena_token_ids(f->a);
}
static void two_dests(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)o;
  in[IN_HALF].address = f->dst[IN_POS] + 16; /* inside positions' rows */
}
static void dest_on_src(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)o;
  in[IN_DEV].address = f->dst[IN_POS]; /* its own source elsewhere, its destination positions' */
}
static void src_on_dest(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)o;
  in[IN_DEV].device_src = f->dst[IN_POS]; /* reads what positions' copy writes */
}
static void src_in_zeroed(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)o;
  in[IN_DEV].device_src = mdr_arena_hidden_states(f->a); /* read while the zeroing clears it */
}
static void src_on_ids(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)o;
  in[IN_DEV].device_src = mdr_arena_token_ids(f->a); /* read while the ids are written */
}
static void src_shifted(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)o;
  in[IN_DEV].device_src = f->dst[IN_DEV] + 16; /* overlaps its own destination, not it */
}
static void too_many(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)f, (void)in;
  o->n_inputs = MDR_STEP_INPUTS_MAX + 1;
}
static void null_inputs(inputs_fixture *f, mdr_graph_cache_options *o, mdr_step_input *in) {
  (void)f, (void)in;
  o->inputs = NULL;
}

typedef struct bad_decl {
  breaker fn;
  const char *field;
  const char *also; /* more the text must say, or NULL */
} bad_decl;

Test(step_inputs, a_bad_declaration_is_refused_naming_the_field) {
  static const bad_decl cases[] = {
      {dup_name, "inputs[3] (\"positions\").name: duplicates inputs[0]", NULL},
      {null_name, "inputs[2] (\"\").name", NULL},
      {ids_name, ".name: \"token_ids\"", NULL},
      {elem3, "inputs[1] (\"seq_lens\").elem_bytes", NULL},
      {bad_shape, "inputs[1] (\"seq_lens\").shape", NULL},
      {rows_over_m, "(\"positions\").max_rows", NULL},
      {rows_over_s, "(\"seq_lens\").max_rows", NULL},
      {fixed_zero, "(\"temperature\").max_rows", NULL},
      {seqs_over_m, "max_sequences", NULL},
      {past_arena, "(\"block_table\").offset", NULL},
      {not_a_buffer, "(\"block_table\").buffer", NULL},
      {unaligned, "(\"positions\").address", NULL},
      {no_address, "(\"positions\").address: 0", NULL},
      {host_address, "(\"slot_mapping\").address", NULL},
      {host_src, "(\"device_positions\").device_src", NULL},
      {bad_dest, "(\"half\").dest", NULL},
      {overflow, "(\"temperature\").max_rows * width", NULL},
      {slot_sum, "overflow a staging slot", NULL},
      {in_zeroed, "(\"block_table\").offset: [0x", "overlaps scratch, which the cache's zeroing clears"},
      {into_zeroed, "(\"positions\").address: [0x", "overlaps hidden_states, which the cache's zeroing clears"},
      {into_ids, "(\"slot_mapping\").address: [0x", "overlaps token_ids"},
      {two_dests, "(\"half\").address: overlaps inputs[0]'s destination", NULL},
      {dest_on_src, "(\"device_positions\").address: overlaps inputs[0]'s destination", NULL},
      {src_on_dest, "(\"device_positions\").device_src: overlaps inputs[0]'s destination", NULL},
      {src_shifted, "(\"device_positions\").device_src: overlaps its own destination", NULL},
      {src_in_zeroed, "(\"device_positions\").device_src: [0x", "overlaps hidden_states, which the cache's zeroing clears"},
      {src_on_ids, "(\"device_positions\").device_src: [0x", "overlaps token_ids"},
      {too_many, "n_inputs", NULL},
      {null_inputs, "inputs: NULL", NULL},
  };
  mdr_backend *host = tb_backend(TB_HOST), *fb = NULL;
  cr_assert_eq(fault_backend_create(host, &fb), MDR_OK);
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    inputs_fixture f;
    inputs_init(&f, fb);
    mdr_step_input in[N_IN];
    memcpy(in, f.in, sizeof in);
    mdr_graph_cache_options o;
    mdr_graph_cache_options_default(&o);
    o.inputs = in;
    o.n_inputs = N_IN;
    o.max_sequences = S;
    cases[k].fn(&f, &o, in);
    const long live = fault_backend_live(fb); /* a case's own allocations counted */
    mdr_graph_cache *c = (mdr_graph_cache *)&o;
    cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_ERR_INVALID_ARGUMENT, "case %zu", k);
    cr_assert_null(c);
    const char *e = mdr_backend_last_error(fb);
    cr_assert_not_null(strstr(e, cases[k].field), "case %zu: \"%s\" does not name %s", k, e, cases[k].field);
    if (cases[k].also) cr_assert_not_null(strstr(e, cases[k].also), "case %zu: \"%s\" does not say %s", k, e, cases[k].also);
    cr_assert_eq(fault_backend_live(fb), live, "case %zu leaked", k);
    fault_backend_host_range(fb, 0, 0);
    inputs_fini(&f);
  }
  mdr_backend_destroy(fb);
  mdr_backend_destroy(host);
}

/* An EXACT cache of fused zeroing over the fixture, and one step's values
 * at t tokens and s sequences (from `seed`) listed in arr. */
static mdr_graph_cache *exact_with_values(inputs_fixture *f, uint64_t seed, size_t t, size_t s, step_values *v,
                                          const void **arr) {
  mdr_graph_cache *c = make_cache(f, MDR_GRAPH_EXACT, MDR_ZERO_FUSED, MDR_DYNAMIC_NODE_UPDATE);
  uint64_t rng = seed;
  make_values(&rng, v, t, s);
  values_of(v, arr);
  return c;
}

/* A bad step is refused with the field named, and stages nothing: the next
 * good step sees a ring as it was. */
Test(step_inputs, a_bad_step_is_refused_and_stages_nothing) {
  mdr_backend *b = tb_backend(TB_HOST);
  inputs_fixture f;
  inputs_init(&f, b);
  step_values v;
  const void *arr[1 + N_IN];
  mdr_graph_cache *c = exact_with_values(&f, 5, M, S, &v, arr);
  poison_inputs(&f);
  struct {
    size_t n_values, t, s;
    int null_at;
    mdr_status want;
    const char *field;
  } cases[] = {
      {N_IN, 4, 2, -1, MDR_ERR_INVALID_ARGUMENT, "n_values"},
      {1 + N_IN, 4, 2, 0, MDR_ERR_INVALID_ARGUMENT, "values[0] (token_ids)"},
      {1 + N_IN, 4, 2, 1 + IN_BLOCKS, MDR_ERR_INVALID_ARGUMENT, "values[3] (\"block_table\")"},
      {1 + N_IN, 4, 0, -1, MDR_ERR_OUT_OF_RANGE, "sequences"},
      {1 + N_IN, 4, 5, -1, MDR_ERR_OUT_OF_RANGE, "sequences"},
      {1 + N_IN, M, S + 1, -1, MDR_ERR_OUT_OF_RANGE, "sequences"},
      {1 + N_IN, 0, 1, -1, MDR_ERR_OUT_OF_RANGE, "tokens"},
      {1 + N_IN, M + 1, 1, -1, MDR_ERR_OUT_OF_RANGE, "tokens"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    const void *saved = cases[k].null_at >= 0 ? arr[cases[k].null_at] : NULL;
    if (cases[k].null_at >= 0) arr[cases[k].null_at] = NULL;
    cr_assert_eq(mdr_graph_cache_step_inputs(c, arr, cases[k].n_values, cases[k].t, cases[k].s), cases[k].want,
                 "case %zu", k);
    cr_assert_not_null(strstr(mdr_backend_last_error(b), cases[k].field), "case %zu: %s", k,
                       mdr_backend_last_error(b));
    if (cases[k].null_at >= 0) arr[cases[k].null_at] = saved;
  }
  /* the plain calls refuse a cache whose inputs take host values */
  cr_assert_eq(mdr_graph_cache_step(c, v.ids, 4), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(mdr_backend_last_error(b), "mdr_graph_cache_step_inputs"));
  cr_assert_eq(mdr_graph_cache_step_device(c, 0, 4), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_graph_cache_step_inputs(c, NULL, 1 + N_IN, 4, 2), MDR_ERR_INVALID_ARGUMENT);
  mdr_graph_stats gs;
  cr_assert_eq(mdr_graph_cache_stats(c, &gs), MDR_OK);
  cr_assert_eq(gs.steps, 0);
  cr_assert_eq(gs.captures, 0);
  for (int i = 0; i < N_IN; i++) {
    unsigned char got[M * WIDTH * 8];
    cr_assert_eq(mdr_backend_copy_d2h(b, got, f.dst[i], f.bytes[i]), MDR_OK);
    cr_assert_eq(tb_first_not(got, f.bytes[i], POISON), f.bytes[i], "input %d written by a refused step", i);
  }
  /* an input's own max_rows below the cache's bound */
  mdr_graph_cache_destroy(c);
  mdr_step_input in[N_IN];
  memcpy(in, f.in, sizeof in);
  in[IN_POS].max_rows = 8;
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.inputs = in;
  o.n_inputs = N_IN;
  o.max_sequences = S;
  cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &c), MDR_OK, "%s", mdr_backend_last_error(b));
  cr_assert_eq(mdr_graph_cache_step_inputs(c, arr, 1 + N_IN, 9, 2), MDR_ERR_OUT_OF_RANGE);
  cr_assert_not_null(strstr(mdr_backend_last_error(b), "(\"positions\"): 9 rows"), "%s", mdr_backend_last_error(b));
  cr_assert_eq(mdr_graph_cache_step_inputs(c, arr, 1 + N_IN, 8, 2), MDR_OK, "%s", mdr_backend_last_error(b));
  mdr_graph_cache_destroy(c);
  inputs_fini(&f);
  mdr_backend_destroy(b);
}

/* A cache without inputs: plain steps write one sequence per token (up to
 * max_sequences) into the sequence count. */
Test(step_inputs, a_plain_step_counts_one_sequence_per_token) {
  mdr_backend *b = tb_backend(TB_HOST);
  mdr_stream s = tb_stream(b);
  mdr_sizes sizes = tb_small_sizes();
  mdr_arena *a = NULL;
  cr_assert_eq(mdr_arena_create(b, &sizes, &a), MDR_OK);
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.max_sequences = 5;
  mdr_graph_cache *c = NULL;
  cr_assert_eq(mdr_graph_cache_create(a, s, &o, &c), MDR_OK, "%s", mdr_backend_last_error(b));
  cr_assert_eq(mdr_graph_cache_step_input_count(c), 1);
  const uint32_t ids[M] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  for (size_t t = 1; t <= 9; t++) {
    cr_assert_eq(mdr_graph_cache_step(c, ids, t), MDR_OK);
    uint32_t n = 0;
    cr_assert_eq(mdr_backend_copy_d2h(b, &n, mdr_graph_cache_sequences_ptr(c), 4), MDR_OK);
    cr_assert_eq(n, t < 5 ? t : 5);
    const void *arr[1] = {ids};
    cr_assert_eq(mdr_graph_cache_step_inputs(c, arr, 1, t, 1), MDR_OK);
    cr_assert_eq(mdr_backend_copy_d2h(b, &n, mdr_graph_cache_sequences_ptr(c), 4), MDR_OK);
    cr_assert_eq(n, 1);
  }
  mdr_graph_cache_destroy(c);
  mdr_arena_destroy(a);
  mdr_backend_stream_destroy(b, s);
  mdr_backend_destroy(b);
}

/* A device step whose ids share bytes with what its own launch writes (a
 * buffer of the zero plan, an input's destination, token_ids without being
 * it) is refused, the text saying which, and stages nothing; a prepare of
 * such ids is refused and captures nothing; the arena's token_ids
 * themselves (in place) and a clear buffer step. */
Test(step_inputs, device_ids_over_what_the_launch_writes_are_refused) {
  mdr_backend *b = tb_backend(TB_HOST);
  inputs_fixture f;
  inputs_init(&f, b);
  step_values v;
  const void *arr[1 + N_IN];
  mdr_graph_cache *c = exact_with_values(&f, 9, 4, 2, &v, arr);
  mdr_dptr ids = 0;
  cr_assert_eq(mdr_backend_alloc(b, M * 4, &ids), MDR_OK);
  cr_assert_eq(mdr_backend_copy_h2d(b, ids, v.ids, 4 * 4), MDR_OK);
  const struct {
    mdr_dptr src;
    const char *says;
  } bad[] = {
      {mdr_arena_scratch(f.a) + 64, "overlap scratch, which the step's zeroing clears"},
      {mdr_arena_hidden_states(f.a), "overlap hidden_states, which the step's zeroing clears"},
      {f.dst[IN_POS], "overlap input 1 (\"positions\")'s destination"},
      {mdr_arena_token_ids(f.a) + 16, "overlap the arena's token_ids without being them"},
  };
  mdr_graph_stats before, after;
  cr_assert_eq(mdr_graph_cache_stats(c, &before), MDR_OK);
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    const size_t counts[2] = {1, 4};
    cr_assert_eq(mdr_graph_cache_prepare_device(c, bad[k].src, counts, 2), MDR_ERR_INVALID_ARGUMENT,
                 "case %zu, prepare", k);
    cr_assert(strstr(mdr_backend_last_error(b), bad[k].says), "case %zu: %s", k, mdr_backend_last_error(b));
    poison_inputs(&f);
    cr_assert_eq(mdr_graph_cache_step_inputs_device(c, bad[k].src, arr, 1 + N_IN, 4, 2), MDR_ERR_INVALID_ARGUMENT,
                 "case %zu", k);
    cr_assert(strstr(mdr_backend_last_error(b), bad[k].says), "case %zu: %s", k, mdr_backend_last_error(b));
    cr_assert_eq(mdr_graph_cache_step_device(c, bad[k].src, 4), MDR_ERR_INVALID_ARGUMENT, "case %zu, plain", k);
    for (int i = 0; i < N_IN; i++) expect_dst(&f, i, NULL, 0, 0, "a refused device step");
    unsigned char raw[M * 4];
    cr_assert_eq(mdr_backend_copy_d2h(b, raw, mdr_arena_token_ids(f.a), sizeof raw), MDR_OK);
    cr_assert_eq(tb_first_not(raw, sizeof raw, POISON), sizeof raw, "case %zu: token_ids untouched", k);
  }
  cr_assert_eq(mdr_graph_cache_stats(c, &after), MDR_OK);
  cr_assert_eq(after.steps, before.steps, "nothing refused was counted");
  cr_assert_eq(after.captures, before.captures, "nor captured");
  /* clear ids, and the arena's own (in place), step */
  cr_assert_eq(mdr_graph_cache_step_inputs_device(c, ids, arr, 1 + N_IN, 4, 2), MDR_OK, "%s",
               mdr_backend_last_error(b));
  cr_assert_eq(mdr_graph_cache_step_inputs_device(c, 0, arr, 1 + N_IN, 4, 2), MDR_OK, "%s",
               mdr_backend_last_error(b));
  uint32_t got[4];
  cr_assert_eq(mdr_backend_copy_d2h(b, got, mdr_arena_token_ids(f.a), sizeof got), MDR_OK);
  cr_assert_eq(memcmp(got, v.ids, sizeof got), 0);
  mdr_backend_free(b, ids);
  mdr_graph_cache_destroy(c);
  inputs_fini(&f);
  mdr_backend_destroy(b);
}

typedef struct seq_case {
  tb_kind kind;
  mdr_graph_mode mode;
  mdr_zero_strategy zero;
  int eager; /* MDR_DISABLE_GRAPHS at create */
} seq_case;

ParameterizedTestParameters(step_inputs, a_device_step_without_inputs_publishes_the_sequences_it_is_given) {
  static const seq_case shapes[] = {
      {TB_HOST, MDR_GRAPH_EXACT, MDR_ZERO_FUSED, 0},  {TB_HOST, MDR_GRAPH_EXACT, MDR_ZERO_MEMSET, 0},
      {TB_HOST, MDR_GRAPH_EXACT, MDR_ZERO_FUSED, 1},  {TB_HOST, MDR_GRAPH_LADDER, MDR_ZERO_FUSED, 0},
      {TB_HOST, MDR_GRAPH_DYNAMIC, MDR_ZERO_FUSED, 0},
  };
  enum { SHAPES = sizeof shapes / sizeof shapes[0] };
  static seq_case cases[2 * SHAPES];
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < SHAPES; i++) {
      cases[k * SHAPES + i] = shapes[i];
      cases[k * SHAPES + i].kind = k ? TB_CUDA : TB_HOST;
    }
  return cr_make_param_array(seq_case, cases, 2 * SHAPES);
}

/* A cache without inputs, device ids (both backends): a step that gives its sequence count
 * (mdr_graph_cache_step_inputs_device) publishes that count, not its
 * token count's default, in every mode (an EXACT device graph reads no
 * slot and publishes the default: such a step takes graphs of its own,
 * which read it from the slot header), and its ids arrive; plain device
 * steps keep their own graphs and publish the default. */
ParameterizedTest(seq_case *sc, step_inputs, a_device_step_without_inputs_publishes_the_sequences_it_is_given) {
  mdr_backend *b = tb_backend(sc->kind);
  mdr_stream s = tb_stream(b);
  mdr_sizes sizes = tb_small_sizes();
  mdr_arena *a = NULL;
  cr_assert_eq(mdr_arena_create(b, &sizes, &a), MDR_OK);
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.mode = sc->mode;
  o.zero = sc->zero;
  o.max_sequences = 5;
  if (sc->eager) setenv("MDR_DISABLE_GRAPHS", "1", 1);
  mdr_graph_cache *c = NULL;
  const mdr_status created = mdr_graph_cache_create(a, s, &o, &c);
  unsetenv("MDR_DISABLE_GRAPHS");
  cr_assert_eq(created, MDR_OK, "%s", mdr_backend_last_error(b));
  mdr_dptr ids = 0;
  cr_assert_eq(mdr_backend_alloc(b, M * 4, &ids), MDR_OK);
  int counted[10] = {0}; /* the counts stepped with sequences not their default */
  for (int round = 0; round < 2; round++)
    for (size_t t = 1; t <= 9; t++) {
      uint32_t want[M], got[M], n = 0;
      for (size_t i = 0; i < t; i++) want[i] = (uint32_t)(1000 * round + 10 * t + i);
      cr_assert_eq(mdr_backend_copy_h2d(b, ids, want, t * 4), MDR_OK);
      const size_t given = 1 + (t + (size_t)round) % (t < 5 ? t : 5); /* 1 .. min(t, 5), mostly not the default */
      counted[t] |= given != (t < 5 ? t : 5);
      const void *none[1] = {NULL}; /* values[0] is ignored for device ids */
      cr_assert_eq(mdr_graph_cache_step_inputs_device(c, ids, none, 1, t, given), MDR_OK, "%s",
                   mdr_backend_last_error(b));
      cr_assert_eq(mdr_backend_synchronize(b, s), MDR_OK);
      cr_assert_eq(mdr_backend_copy_d2h(b, &n, mdr_graph_cache_sequences_ptr(c), 4), MDR_OK);
      cr_assert_eq(n, given, "t %zu: the sequences given", t);
      cr_assert_eq(mdr_backend_copy_d2h(b, &n, mdr_graph_cache_count_ptr(c), 4), MDR_OK);
      cr_assert_eq(n, t);
      cr_assert_eq(mdr_backend_copy_d2h(b, got, mdr_arena_token_ids(a), t * 4), MDR_OK);
      cr_assert_eq(memcmp(got, want, t * 4), 0, "t %zu: the ids", t);
      cr_assert_eq(mdr_graph_cache_step_device(c, ids, t), MDR_OK, "%s", mdr_backend_last_error(b));
      cr_assert_eq(mdr_backend_synchronize(b, s), MDR_OK);
      cr_assert_eq(mdr_backend_copy_d2h(b, &n, mdr_graph_cache_sequences_ptr(c), 4), MDR_OK);
      cr_assert_eq(n, t < 5 ? t : 5, "t %zu: a plain device step, the default", t);
    }
  mdr_graph_stats st;
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.device_steps, 36, "every step a device step");
  if (!sc->eager && sc->mode == MDR_GRAPH_EXACT) {
    size_t want = 9;
    for (size_t t = 1; t <= 9; t++) want += (size_t)counted[t];
    cr_assert_gt(want, 9 + 4);
    cr_assert_eq(st.graphs, want, "EXACT: a plain device graph per count, and a counted one where stepped so");
  }
  mdr_backend_free(b, ids);
  mdr_graph_cache_destroy(c);
  mdr_arena_destroy(a);
  mdr_backend_stream_destroy(b, s);
  mdr_backend_destroy(b);
}

/* ---- the ring survives failures ---------------------------------------- */

typedef struct ring_fixture {
  mdr_backend *b;
  mdr_stream s;
  mdr_arena *a;
  int fail_body; /* the body's op fails when it runs (after the staged launch) */
  int body_breaks_capture;
} ring_fixture;

static mdr_status failing_op(mdr_backend *b, void *arg) {
  const int *fail = *(int *const *)arg;
  return *fail ? mdr_backend_fail(b, MDR_ERR_BACKEND, "test: the communicator aborted") : MDR_OK;
}

/* A body whose one op fails at run time when asked (as a communicator
 * abort or a peer timeout inside a replayed step would). */
static mdr_status ring_body(void *user, mdr_stream s, size_t tokens) {
  (void)tokens;
  ring_fixture *r = user;
  if (r->body_breaks_capture) {
    int capturing = 0;
    mdr_be_is_capturing(r->b, s, &capturing);
    if (capturing) return mdr_backend_synchronize(r->b, s); /* illegal under capture */
  }
  const int *p = &r->fail_body;
  return mdr_be_host_fn(r->b, failing_op, &p, sizeof p, s);
}

static void ring_init(ring_fixture *r, mdr_backend *b) {
  memset(r, 0, sizeof *r);
  r->b = b;
  r->s = tb_stream(b);
  mdr_sizes sizes = tb_small_sizes();
  cr_assert_eq(mdr_arena_create(b, &sizes, &r->a), MDR_OK);
}

static void ring_fini(ring_fixture *r) {
  mdr_arena_destroy(r->a);
  mdr_backend_stream_destroy(r->b, r->s);
}

static mdr_graph_cache *ring_cache(ring_fixture *r, mdr_graph_mode mode) {
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.mode = mode;
  o.zero = MDR_ZERO_FUSED;
  if (mode != MDR_GRAPH_DYNAMIC) {
    o.body = ring_body;
    o.user = r;
  }
  mdr_graph_cache *c = NULL;
  cr_assert_eq(mdr_graph_cache_create(r->a, r->s, &o, &c), MDR_OK, "%s", mdr_backend_last_error(r->b));
  return c;
}

/* Steps of random counts after a failure: each delivers its own ids. */
static void expect_healthy(ring_fixture *r, mdr_graph_cache *c, uint64_t seed, const char *what) {
  uint64_t rng = seed;
  for (int i = 0; i < 3 * MDR_GRAPH_STAGING_SLOTS; i++) {
    uint32_t ids[M], got[M];
    const size_t t = 1 + tb_rng_next(&rng) % M;
    for (size_t k = 0; k < t; k++) ids[k] = (uint32_t)tb_rng_next(&rng);
    mdr_status st = mdr_graph_cache_step(c, ids, t);
    cr_assert_eq(st, MDR_OK, "%s: step %d after the failure: %s", what, i, mdr_backend_last_error(r->b));
    cr_assert_eq(mdr_backend_synchronize(r->b, r->s), MDR_OK);
    cr_assert_eq(mdr_backend_copy_d2h(r->b, got, mdr_arena_token_ids(r->a), 4 * t), MDR_OK);
    cr_assert_eq(memcmp(got, ids, 4 * t), 0, "%s: step %d's ids", what, i);
  }
}

/* An error the application left pending before an eager step (graphs
 * disabled, or a count demoted after a failed capture) is reported as the
 * application's, once; the cache stays usable. */
Test(step_inputs, an_error_left_pending_by_the_application_is_not_blamed_on_mdr) {
  for (int demoted = 0; demoted < 2; demoted++) {
    mdr_backend *host = tb_backend(TB_HOST), *fb = NULL;
    cr_assert_eq(fault_backend_create(host, &fb), MDR_OK);
    ring_fixture r;
    ring_init(&r, fb);
    if (!demoted) setenv("MDR_DISABLE_GRAPHS", "1", 1);
    r.body_breaks_capture = demoted;
    mdr_graph_cache *c = ring_cache(&r, MDR_GRAPH_EXACT);
    unsetenv("MDR_DISABLE_GRAPHS");
    const uint32_t ids[4] = {1, 2, 3, 4};
    if (demoted) cr_assert_eq(mdr_graph_cache_step(c, ids, 4), MDR_ERR_CAPTURE); /* demoted to eager */
    for (int round = 0; round < 3; round++) {
      fault_backend_leave_pending(fb);
      cr_assert_eq(mdr_graph_cache_step(c, ids, 4), MDR_ERR_BACKEND);
      const char *e = mdr_backend_last_error(fb);
      cr_assert_not_null(strstr(e, "outside mdr"), "%s", e);
      cr_assert_null(strstr(e, "corrupt"), "%s", e);
    }
    r.body_breaks_capture = 0; /* other counts capture; count 4 stays eager */
    expect_healthy(&r, c, 11 + (uint64_t)demoted, demoted ? "demoted count" : "graphs disabled");
    cr_assert_eq(mdr_graph_cache_step(c, ids, 4), MDR_OK, "%s", mdr_backend_last_error(fb));
    mdr_graph_cache_destroy(c);
    ring_fini(&r);
    mdr_backend_destroy(fb);
    mdr_backend_destroy(host);
  }
}

/* A failure inside a step after its staged launch ran (a body's op failing
 * in a replayed graph, or eagerly) is counted: later steps run, with their
 * own ids, never "the ring is corrupt". */
Test(step_inputs, a_failure_inside_a_step_leaves_the_ring_consistent) {
  for (int eager = 0; eager < 2; eager++) {
    mdr_backend *b = tb_backend(TB_HOST);
    ring_fixture r;
    ring_init(&r, b);
    if (eager) setenv("MDR_DISABLE_GRAPHS", "1", 1);
    mdr_graph_cache *c = ring_cache(&r, MDR_GRAPH_EXACT);
    unsetenv("MDR_DISABLE_GRAPHS");
    const uint32_t ids[4] = {1, 2, 3, 4};
    cr_assert_eq(mdr_graph_cache_step(c, ids, 4), MDR_OK);
    for (int round = 0; round < MDR_GRAPH_STAGING_SLOTS + 2; round++) {
      r.fail_body = 1;
      cr_assert_eq(mdr_graph_cache_step(c, ids, 4), MDR_ERR_BACKEND, "round %d", round);
      cr_assert_not_null(strstr(mdr_backend_last_error(b), "aborted"), "%s", mdr_backend_last_error(b));
      r.fail_body = 0;
      cr_assert_eq(mdr_graph_cache_step(c, ids, 4), MDR_OK, "round %d: %s", round, mdr_backend_last_error(b));
    }
    expect_healthy(&r, c, 21 + (uint64_t)eager, eager ? "eager" : "replayed");
    mdr_graph_cache_destroy(c);
    ring_fini(&r);
    mdr_backend_destroy(b);
  }
}

/* A prepare that captures an eager-only count takes it off `uncapturable`. */
Test(step_inputs, uncapturable_drops_when_a_prepare_captures_the_count) {
  mdr_backend *b = tb_backend(TB_HOST);
  ring_fixture r;
  ring_init(&r, b);
  r.body_breaks_capture = 1;
  mdr_graph_cache *c = ring_cache(&r, MDR_GRAPH_EXACT);
  const uint32_t ids[4] = {1, 2, 3, 4};
  cr_assert_eq(mdr_graph_cache_step(c, ids, 4), MDR_ERR_CAPTURE);
  mdr_graph_stats st;
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.uncapturable, 1);
  r.body_breaks_capture = 0;
  const size_t four = 4;
  cr_assert_eq(mdr_graph_cache_prepare(c, &four, 1), MDR_OK, "%s", mdr_backend_last_error(b));
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.uncapturable, 0, "the count is captured now");
  cr_assert_eq(st.graphs, 1);
  cr_assert_eq(mdr_graph_cache_step(c, ids, 4), MDR_OK);
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.hits, 1);
  cr_assert_eq(st.uncapturable, 0);
  mdr_graph_cache_destroy(c);
  ring_fini(&r);
  mdr_backend_destroy(b);
}

/* Two threads driving one cache: every call either runs or is refused with
 * a text saying a second thread was inside; never a crash, never a broken
 * ring. */
typedef struct racer {
  mdr_graph_cache *c;
  mdr_backend *b;
  int ok, refused, other;
  char other_text[256];
} racer;

static void *race(void *arg) {
  racer *r = arg;
  const uint32_t ids[8] = {9, 8, 7, 6, 5, 4, 3, 2};
  for (int i = 0; i < 2000; i++) {
    mdr_status st = mdr_graph_cache_step(r->c, ids, 1 + (size_t)(i % 8));
    if (st == MDR_OK) {
      r->ok++;
    } else if (st == MDR_ERR_STATE && strstr(mdr_backend_last_error(r->b), "second thread")) {
      r->refused++;
    } else {
      if (!r->other) snprintf(r->other_text, sizeof r->other_text, "%s: %s", mdr_status_string(st),
                              mdr_backend_last_error(r->b));
      r->other++;
    }
  }
  return NULL;
}

Test(step_inputs, two_threads_on_one_cache_are_refused_every_time) {
  mdr_backend *b = tb_backend(TB_HOST);
  ring_fixture rf;
  ring_init(&rf, b);
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.zero = MDR_ZERO_FUSED;
  mdr_graph_cache *c = NULL;
  cr_assert_eq(mdr_graph_cache_create(rf.a, rf.s, &o, &c), MDR_OK);
  racer rs[2] = {{.c = c, .b = b}, {.c = c, .b = b}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) cr_assert_eq(pthread_create(&th[i], NULL, race, &rs[i]), 0);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 2; i++) cr_assert_eq(rs[i].other, 0, "thread %d: %s", i, rs[i].other_text);
  cr_assert_gt(rs[0].ok + rs[1].ok, 0);
  mdr_graph_stats st;
  cr_assert_eq(mdr_graph_cache_stats(c, &st), MDR_OK);
  cr_assert_eq(st.steps, (uint64_t)(rs[0].ok + rs[1].ok), "every call that ran was counted, no other");
  expect_healthy(&rf, c, 31, "after the race");
  mdr_graph_cache_destroy(c);
  ring_fini(&rf);
  mdr_backend_destroy(b);
}

/* Deterministically: while one thread is inside a step (its body runs),
 * another thread's step is refused, naming the cause. */
typedef struct intruder {
  mdr_graph_cache *c;
  mdr_backend *b;
  mdr_status st;
  char text[512];
} intruder;

static void *intrude(void *arg) {
  intruder *in = arg;
  const uint32_t ids[2] = {5, 6};
  in->st = mdr_graph_cache_step(in->c, ids, 2);
  snprintf(in->text, sizeof in->text, "%s", mdr_backend_last_error(in->b));
  return NULL;
}

static mdr_status body_with_intruder(void *user, mdr_stream s, size_t tokens) {
  (void)s, (void)tokens;
  intruder *in = user;
  pthread_t th;
  if (pthread_create(&th, NULL, intrude, in) != 0) return MDR_ERR_BACKEND;
  pthread_join(th, NULL);
  return MDR_OK;
}

Test(step_inputs, a_second_thread_inside_a_step_is_told_so) {
  mdr_backend *b = tb_backend(TB_HOST);
  ring_fixture rf;
  ring_init(&rf, b);
  intruder in = {.b = b, .st = MDR_OK};
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.body = body_with_intruder;
  o.user = &in;
  cr_assert_eq(mdr_graph_cache_create(rf.a, rf.s, &o, &in.c), MDR_OK);
  const uint32_t ids[3] = {1, 2, 3};
  for (int i = 0; i < 3; i++) { /* capture, then replays (the body runs at capture only) */
    in.st = MDR_OK;
    cr_assert_eq(mdr_graph_cache_step(in.c, ids, 3), MDR_OK, "%s", mdr_backend_last_error(b));
    if (i == 0) {
      cr_assert_eq(in.st, MDR_ERR_STATE);
      cr_assert_not_null(strstr(in.text, "second thread"), "%s", in.text);
      cr_assert_null(strstr(in.text, "inside this cache's step or prepare (a body"), "%s", in.text);
    }
  }
  mdr_graph_stats st;
  cr_assert_eq(mdr_graph_cache_stats(in.c, &st), MDR_OK);
  cr_assert_eq(st.steps, 3);
  mdr_graph_cache_destroy(in.c);
  ring_fini(&rf);
  mdr_backend_destroy(b);
}

#if defined(MDR_HAVE_CUDA)
#include <cuda_runtime.h>

/* The ring's guarantee for every input on the GPU: a slow kernel is queued
 * in front, then far more steps than the ring holds are submitted behind
 * it; each step's body folds its ids, positions (per token) and sequence
 * lengths (per sequence, by the sequence count on the device) into
 * accumulators. A slot overwritten before its launch read it would change
 * the sums. */
typedef struct gpu_acc {
  mdr_arena *a;
  mdr_graph_cache *c;
  mdr_dptr pos, seqlen;
  uint64_t *acc; /* ids, positions, sequence lengths: 2 words each */
} gpu_acc;

static mdr_status gpu_acc_body(void *user, mdr_stream s, mdr_dptr count, size_t max_tokens) {
  (void)max_tokens;
  gpu_acc *u = user;
  const uint32_t *seqs = (const uint32_t *)(uintptr_t)mdr_graph_cache_sequences_ptr(u->c);
  int e = tb_cuda_accumulate_dev(s, (const uint32_t *)(uintptr_t)mdr_arena_token_ids(u->a),
                                 (const uint32_t *)(uintptr_t)count, u->acc);
  if (!e) e = tb_cuda_accumulate_dev(s, (const uint32_t *)(uintptr_t)u->pos, (const uint32_t *)(uintptr_t)count,
                                     u->acc + 2);
  if (!e) e = tb_cuda_accumulate_dev(s, (const uint32_t *)(uintptr_t)u->seqlen, seqs, u->acc + 4);
  return e ? MDR_ERR_BACKEND : MDR_OK;
}

Test(step_inputs, every_input_survives_a_host_running_far_ahead_of_the_gpu) {
  mdr_backend *b = tb_backend(TB_CUDA);
  for (int mode = 0; mode < 4; mode++) { /* EXACT, LADDER, DYNAMIC x2 impls */
    inputs_fixture f;
    inputs_init(&f, b);
    mdr_dptr acc_dev = 0;
    cr_assert_eq(mdr_backend_alloc(b, 48, &acc_dev), MDR_OK);
    cr_assert_eq(mdr_backend_fill(b, acc_dev, 0, 48), MDR_OK);
    gpu_acc u = {f.a, NULL, f.dst[IN_POS], f.dst[IN_SEQLEN], (uint64_t *)(uintptr_t)acc_dev};
    mdr_graph_cache_options o;
    mdr_graph_cache_options_default(&o);
    o.mode = mode == 0 ? MDR_GRAPH_EXACT : mode == 1 ? MDR_GRAPH_LADDER : MDR_GRAPH_DYNAMIC;
    o.zero = MDR_ZERO_FUSED;
    o.dynamic_impl = mode == 3 ? MDR_DYNAMIC_DEVICE_COUNT : MDR_DYNAMIC_NODE_UPDATE;
    o.inputs = f.in;
    o.n_inputs = N_IN;
    o.max_sequences = S;
    o.body_dynamic = gpu_acc_body;
    o.user = &u;
    cr_assert_eq(mdr_graph_cache_create(f.a, f.s, &o, &u.c), MDR_OK, "%s", mdr_backend_last_error(b));
    size_t all[M];
    for (size_t t = 1; t <= M; t++) all[t - 1] = t;
    cr_assert_eq(mdr_graph_cache_prepare(u.c, all, M), MDR_OK, "%s", mdr_backend_last_error(b));
    cr_assert_eq(mdr_backend_synchronize(b, f.s), MDR_OK);
    cr_assert_eq(tb_cuda_sleep(f.s, 50ull * 1000 * 1000), 0);
    uint64_t rng = 177 + (uint64_t)mode, want[6] = {0};
    for (int step = 0; step < 300; step++) {
      const size_t t = 1 + tb_rng_next(&rng) % M, s = 1 + tb_rng_next(&rng) % (t < S ? t : S);
      step_values v;
      make_values(&rng, &v, t, s);
      for (size_t i = 0; i < t; i++) {
        want[0] += (uint64_t)(i + 1) * v.ids[i];
        want[2] += (uint64_t)(i + 1) * v.pos[i];
      }
      for (size_t i = 0; i < s; i++) want[4] += (uint64_t)(i + 1) * v.seqlen[i];
      want[1] += t;
      want[3] += t;
      want[5] += s;
      const void *arr[1 + N_IN];
      cr_assert_eq(mdr_graph_cache_step_inputs(u.c, values_of(&v, arr), 1 + N_IN, t, s), MDR_OK, "%s",
                   mdr_backend_last_error(b));
      memset(&v, 0xEE, sizeof v);
    }
    cr_assert_eq(mdr_backend_synchronize(b, f.s), MDR_OK);
    uint64_t got[6];
    cr_assert_eq(mdr_backend_copy_d2h(b, got, acc_dev, 48), MDR_OK);
    for (int k = 0; k < 6; k++) cr_assert_eq(got[k], want[k], "mode %d: accumulator %d (a slot overwritten early)", mode, k);
    mdr_graph_cache_destroy(u.c);
    mdr_backend_free(b, acc_dev);
    inputs_fini(&f);
  }
  mdr_backend_destroy(b);
}

/* On the GPU: an error the application left pending (cudaSetDevice of a
 * device that does not exist) is reported as the application's by the next
 * step, eagerly and on a graph, and the cache stays usable. */
Test(step_inputs, a_pending_cuda_error_is_reported_as_the_applications) {
  mdr_backend *b = tb_backend(TB_CUDA);
  for (int eager = 0; eager < 2; eager++) {
    ring_fixture r;
    ring_init(&r, b);
    if (eager) setenv("MDR_DISABLE_GRAPHS", "1", 1);
    mdr_graph_cache *c = ring_cache(&r, MDR_GRAPH_DYNAMIC);
    unsetenv("MDR_DISABLE_GRAPHS");
    const uint32_t ids[4] = {1, 2, 3, 4};
    cr_assert_eq(mdr_graph_cache_step(c, ids, 4), MDR_OK, "%s", mdr_backend_last_error(b));
    int current = 0;
    cr_assert_eq(cudaGetDevice(&current), cudaSuccess);
    cr_assert_neq(cudaSetDevice(1 << 20), cudaSuccess);
    cr_assert_eq(mdr_graph_cache_step(c, ids, 4), MDR_ERR_BACKEND);
    cr_assert_not_null(strstr(mdr_backend_last_error(b), "outside mdr"), "%s", mdr_backend_last_error(b));
    cr_assert_eq(cudaSetDevice(current), cudaSuccess);
    expect_healthy(&r, c, 41 + (uint64_t)eager, eager ? "cuda eager" : "cuda graph");
    mdr_graph_cache_destroy(c);
    ring_fini(&r);
  }
  mdr_backend_destroy(b);
}
#endif
