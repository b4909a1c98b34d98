/* fuzz_inputs — libFuzzer target for step inputs (include/mdr/graph.h):
 * random declarations at create, and steps that carry them, on the host
 * backend behind the test-only fault wrapper (tests/fault_backend.h).
 *
 * The input is a program over one arena of M = 1 .. 32 tokens and two
 * cache slots. Each op byte picks a call: a create with 0 .. 17 inputs
 * drawn good and bad (names missing, repeated or "token_ids"; element
 * sizes, shapes, widths, rows and destinations out of range; addresses
 * misaligned, 0, overlapping each other, token_ids or a buffer of the zero
 * plan; sources in place, elsewhere, or overlapping), steps with host or
 * device ids and with counts, sequence counts and values good and bad,
 * on graphs or eager (MDR_DISABLE_GRAPHS at create),
 * prepares, the layout queries, a destroy, injected faults. Invariants
 * (trap when broken):
 *   - every call returns a valid mdr_status and ASan/UBSan stay quiet;
 *   - a refused create leaves *out NULL and nothing live;
 *   - a created cache's layout holds: 1 + n inputs, each destination
 *     16-byte aligned and sharing no byte with another's, with token_ids
 *     or with the zero plan's buffers; host inputs' slot ranges aligned,
 *     disjoint and inside the slot;
 *   - a step that reports success (or MDR_ERR_CAPTURE: served eagerly)
 *     left the ids (padded with pad_token_id up to the graph's count in
 *     EXACT and LADDER), both count cells and every input's rows (the host
 *     values or the source's), the pad up to the graph's bound (EXACT and
 *     LADDER) and nothing past it (poisoned before the step);
 *   - a step refused for its arguments (device ids over a destination
 *     included), no fault armed, wrote no destination (each still
 *     poisoned);
 *   - after everything is destroyed no backend resource is live. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "fault_backend.h"
#include "fuzz_arena.h"
#include "fuzz_provider.h"
#include "mdr/mdr.h"

enum { CACHES = 2, MAX_M = 32, MAX_IN = MDR_STEP_INPUTS_MAX + 1, POOL = 1 << 16, POISON = 0xC7 };

typedef struct cache_slot {
  mdr_graph_cache *c;
  mdr_graph_mode mode;
  uint32_t pad_id;
  size_t n;                        /* declared inputs */
  mdr_step_input_info info[1 + MDR_STEP_INPUTS_MAX];
} cache_slot;

typedef struct world {
  mdr_backend *host, *fb;
  mdr_stream s;
  mdr_arena *a;
  size_t m;
  mdr_dptr pool; /* engine memory: destinations and sources (host memory on this backend) */
  mdr_dptr ids_dev;
  cache_slot caches[CACHES];
  int armed; /* a fault may fire */
} world;

static unsigned char *host_ptr(mdr_dptr p) { return (unsigned char *)(uintptr_t)p; }

static void cache_destroy(world *w, int i) {
  mdr_graph_cache_destroy(w->caches[i].c);
  memset(&w->caches[i], 0, sizeof w->caches[i]);
}

static int overlap(mdr_dptr p, size_t n, mdr_dptr q, size_t k) { return n && k && p < q + k && q < p + n; }

/* An address for `bytes` of engine memory: mostly 16-byte aligned inside
 * the pool (where inputs may overlap), sometimes 0, misaligned, or the
 * start of token_ids or of a zeroed buffer when it holds `bytes`. */
static mdr_dptr address_arg(world *w, fuzz_in *in, size_t bytes) {
  const uint8_t how = fuzz_u8(in);
  const size_t room = bytes < POOL ? POOL - bytes : 0;
  /* past the pool: 0, which create refuses (the host backend cannot tell
   * device memory's extent, so nothing else may stand for a range it
   * does not hold) */
  const mdr_dptr in_pool = bytes > POOL ? 0 : w->pool + (room ? (fuzz_bytes(in, 2) % (room / 16 + 1)) * 16 : 0);
  switch (how % 16) {
    case 0: return 0;
    case 1: return in_pool ? in_pool + 4 * (1 + how / 16 % 3) : 0; /* misaligned */
    case 2: return bytes <= mdr_arena_token_ids_bytes(w->a) ? mdr_arena_token_ids(w->a) : in_pool;
    case 3: return bytes <= mdr_arena_hidden_states_bytes(w->a) ? mdr_arena_hidden_states(w->a) : in_pool;
    default: return in_pool;
  }
}

static const char *const k_names[] = {"positions", "seq_lens", "block_table", "slots", "temperature",
                                      "a", "b", "", "token_ids", NULL};

/* One declared input, good or bad. */
static void input_arg(world *w, fuzz_in *in, mdr_step_input *d, size_t max_seqs) {
  memset(d, 0, sizeof *d);
  const uint8_t nm = fuzz_u8(in);
  d->name = k_names[nm % (sizeof k_names / sizeof k_names[0])];
  static const size_t elems[] = {1, 2, 4, 8, 4, 4, 3, 0};
  d->elem_bytes = elems[fuzz_u8(in) % 8];
  const uint8_t sh = fuzz_u8(in);
  d->shape = sh < 0xF8 ? (mdr_step_input_shape)(sh % MDR_INPUT_SHAPE_COUNT) : (mdr_step_input_shape)(sh - 0xFA);
  const uint8_t wd = fuzz_u8(in);
  d->width = wd < 0xF8 ? wd % 9 : wd == 0xFF ? (size_t)1 << 40 : 128;
  const uint8_t rw = fuzz_u8(in);
  d->max_rows = rw < 0xF0 ? rw % (w->m + 3) : fuzz_size(in);
  d->pad = fuzz_bytes(in, 8);
  /* the extent a valid declaration would have (for placing it) */
  const size_t width = d->width ? d->width : 1, e = d->elem_bytes ? d->elem_bytes : 1;
  size_t rows = d->max_rows;
  if (!rows) rows = d->shape == MDR_INPUT_PER_SEQUENCE ? max_seqs : w->m;
  const size_t bytes = width <= 4096 && rows <= 4096 ? width * e * rows : POOL + 1;
  const uint8_t dst = fuzz_u8(in);
  if (dst % 8 == 0) { /* an arena buffer: fp8_act (outside the plan), a zeroed one, or any */
    d->dest = MDR_INPUT_TO_ARENA;
    const uint8_t buf = fuzz_u8(in);
    d->buffer = buf % 4 == 0   ? (mdr_buffer)(buf / 4 % (MDR_BUF_COUNT + 1))
                : buf % 4 == 1 ? MDR_BUF_SCRATCH
                               : MDR_BUF_FP8_ACT;
    d->offset = (size_t)(fuzz_u8(in) % 8) * 16 + (dst & 0x80 ? 4 : 0);
  } else {
    d->dest = dst % 8 == 1 && dst >= 0xF0 ? (mdr_step_input_dest)(dst - 0xF0 + 2) : MDR_INPUT_TO_DEVICE;
    d->address = address_arg(w, in, bytes);
  }
  const uint8_t src = fuzz_u8(in);
  if (src % 4 == 1) d->device_src = d->dest == MDR_INPUT_TO_DEVICE ? d->address : 0; /* in place */
  if (src % 4 == 2) d->device_src = address_arg(w, in, bytes);
}

/* The layout of a created cache, as its queries give it. */
static void check_layout(world *w, cache_slot *cs) {
  mdr_graph_cache *c = cs->c;
  FUZZ_CHECK(mdr_graph_cache_step_input_count(c) == 1 + cs->n);
  const size_t slot = mdr_graph_cache_slot_bytes(c);
  mdr_segment plan[MDR_ZERO_PLAN_MAX];
  size_t np = 0;
  FUZZ_CHECK(mdr_arena_zero_plan(w->a, w->m, plan, MDR_ZERO_PLAN_MAX, &np) == MDR_OK && np <= MDR_ZERO_PLAN_MAX);
  for (size_t i = 0; i <= cs->n; i++) {
    mdr_step_input_info *f = &cs->info[i];
    FUZZ_CHECK(mdr_graph_cache_step_input_info(c, i, f) == MDR_OK);
    size_t k = 99;
    FUZZ_CHECK(mdr_graph_cache_step_input_find(c, f->name, &k) == MDR_OK && k == i);
    FUZZ_CHECK(f->max_rows >= 1 && f->row_bytes == f->elem_bytes * f->width && f->max_bytes == f->max_rows * f->row_bytes);
    FUZZ_CHECK(f->dst % 16 == 0);
    if (i == 0) continue;
    FUZZ_CHECK(!overlap(f->dst, f->max_bytes, mdr_arena_token_ids(w->a), mdr_arena_token_ids_bytes(w->a)));
    for (size_t p = 0; p < np; p++) FUZZ_CHECK(!overlap(f->dst, f->max_bytes, plan[p].ptr, plan[p].bytes));
    if (f->device_src && f->device_src != f->dst) {
      FUZZ_CHECK(!overlap(f->device_src, f->max_bytes, f->dst, f->max_bytes));
      FUZZ_CHECK(!overlap(f->device_src, f->max_bytes, mdr_arena_token_ids(w->a), mdr_arena_token_ids_bytes(w->a)));
      for (size_t p = 0; p < np; p++) FUZZ_CHECK(!overlap(f->device_src, f->max_bytes, plan[p].ptr, plan[p].bytes));
    }
    if (!f->device_src) FUZZ_CHECK(f->slot_offset % 16 == 0 && f->slot_offset + f->max_bytes <= slot);
    for (size_t j = 1; j < i; j++) {
      const mdr_step_input_info *g = &cs->info[j];
      FUZZ_CHECK(!overlap(f->dst, f->max_bytes, g->dst, g->max_bytes));
      if (g->device_src) FUZZ_CHECK(!overlap(f->dst, f->max_bytes, g->device_src, g->max_bytes));
      if (f->device_src) FUZZ_CHECK(!overlap(f->device_src, f->max_bytes, g->dst, g->max_bytes));
      if (!f->device_src && !g->device_src)
        FUZZ_CHECK(!overlap(f->slot_offset, f->max_bytes, g->slot_offset, g->max_bytes));
    }
  }
}

static void op_create(world *w, fuzz_in *in) {
  const int slot = fuzz_u8(in) % CACHES;
  cache_destroy(w, slot);
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  const uint8_t m = fuzz_u8(in);
  o.mode = (mdr_graph_mode)(m % MDR_GRAPH_MODE_COUNT);
  o.zero = o.mode == MDR_GRAPH_DYNAMIC || (m & 0x10) ? MDR_ZERO_FUSED : MDR_ZERO_MEMSET;
  o.dynamic_impl = (mdr_graph_dynamic_impl)((m >> 5) % MDR_DYNAMIC_IMPL_COUNT);
  o.max_graphs = fuzz_u8(in) % 4;
  o.pad_token_id = (uint32_t)fuzz_bytes(in, 4);
  const uint8_t sq = fuzz_u8(in);
  o.max_sequences = sq % (w->m + 2);
  const size_t max_seqs = o.max_sequences ? o.max_sequences : w->m;
  mdr_step_input ins[MAX_IN];
  const uint8_t nb = fuzz_u8(in);
  o.n_inputs = nb < 0xF0 ? nb % 6 : nb % (MAX_IN + 1);
  for (size_t i = 0; i < o.n_inputs && i < MAX_IN; i++) input_arg(w, in, &ins[i], max_seqs);
  o.inputs = (nb & 1) && o.n_inputs && fuzz_u8(in) >= 0xF8 ? NULL : ins;
  mdr_graph_cache *out = (mdr_graph_cache *)w;
  const long live = fault_backend_live(w->fb);
  if (sq & 0x80) setenv("MDR_DISABLE_GRAPHS", "1", 1); /* every step eager */
  const mdr_status st = mdr_graph_cache_create(w->a, w->s, &o, &out);
  unsetenv("MDR_DISABLE_GRAPHS");
  FUZZ_CHECK((unsigned)st < MDR_STATUS_COUNT);
  if (st != MDR_OK) {
    FUZZ_CHECK(out == NULL && fault_backend_live(w->fb) == live);
    return;
  }
  FUZZ_CHECK(o.n_inputs <= MDR_STEP_INPUTS_MAX);
  cache_slot *cs = &w->caches[slot];
  cs->c = out;
  cs->mode = o.mode;
  cs->pad_id = o.pad_token_id;
  cs->n = o.n_inputs;
  check_layout(w, cs);
}

/* Fill n bytes at p with a pattern of `seed`. */
static void pattern(unsigned char *p, size_t n, uint32_t seed) {
  for (size_t k = 0; k < n; k++) p[k] = (unsigned char)(seed * 2654435761u >> 24 ^ (uint32_t)k * 40503u);
}

/* Rows an input carries at t tokens and s sequences. */
static size_t rows_of(const mdr_step_input_info *f, size_t t, size_t s) {
  return f->shape == MDR_INPUT_PER_TOKEN ? t : f->shape == MDR_INPUT_PER_SEQUENCE ? s : f->max_rows;
}

static void op_step(world *w, fuzz_in *in) {
  cache_slot *cs = &w->caches[fuzz_u8(in) % CACHES];
  mdr_graph_cache *c = cs->c;
  if (!c) return;
  const uint8_t tb = fuzz_u8(in);
  const size_t t = tb < 0xF8 ? tb % (w->m + 2) : fuzz_size(in);
  const uint8_t sb = fuzz_u8(in);
  const size_t s = sb < 0xF0 ? 1 + sb % (t < w->m ? (t ? t : 1) : w->m) : sb % 3 == 0 ? 0 : t + 1;
  const uint32_t seed = (uint32_t)fuzz_bytes(in, 2);
  const uint8_t how = fuzz_u8(in);
  const int device = how % 4 == 3;
  /* the values: each input's rows at (t, s), when they fit its destination */
  static unsigned char vals[1 + MDR_STEP_INPUTS_MAX][POOL];
  const void *values[1 + MDR_STEP_INPUTS_MAX + 1];
  size_t n_values = 1 + cs->n;
  if (how >= 0xF8) n_values = how % 2 ? 0 : 2 + cs->n; /* wrong length */
  const size_t tc = t <= w->m ? t : w->m;
  pattern(vals[0], tc * 4, seed);
  values[0] = vals[0];
  /* device ids: the engine's own buffer, or somewhere in the pool (perhaps
   * over a destination: refused); written first, then the sources, then
   * the ids taken back as they stand (a source may share their bytes) */
  const mdr_dptr ids_src = how % 8 == 7 ? w->pool + (size_t)(how / 8 % 16) * 64 : w->ids_dev;
  if (device && tc) memcpy(host_ptr(ids_src), vals[0], tc * 4);
  for (size_t i = 1; i <= cs->n; i++) {
    const mdr_step_input_info *f = &cs->info[i];
    const size_t r = rows_of(f, t, s), have = r <= f->max_rows ? r * f->row_bytes : 0;
    pattern(vals[i], have, seed + (uint32_t)i);
    values[i] = vals[i];
    if (f->device_src) { /* its rows in device memory; in place: what the engine wrote there */
      pattern(host_ptr(f->device_src), f->max_bytes, seed + 977u * (uint32_t)i);
      values[i] = NULL;
    }
  }
  /* what each source holds once all are written (sources may share bytes) */
  for (size_t i = 1; i <= cs->n; i++)
    if (cs->info[i].device_src) memcpy(vals[i], host_ptr(cs->info[i].device_src), cs->info[i].max_bytes);
  if (device && tc) memcpy(vals[0], host_ptr(ids_src), tc * 4);
  values[1 + cs->n] = vals[0];
  const uint8_t nul = fuzz_u8(in);
  if (nul >= 0xF0 && cs->n) values[1 + nul % cs->n] = NULL; /* a host input's values missing, perhaps */
  const void *const *vp = nul == 0xEE ? NULL : values;
  /* poison every destination that is not its own source */
  for (size_t i = 1; i <= cs->n; i++)
    if (cs->info[i].device_src != cs->info[i].dst) memset(host_ptr(cs->info[i].dst), POISON, cs->info[i].max_bytes);
  const mdr_status st = device ? mdr_graph_cache_step_inputs_device(c, ids_src, vp, n_values, t, s)
                               : mdr_graph_cache_step_inputs(c, vp, n_values, t, s);
  FUZZ_CHECK((unsigned)st < MDR_STATUS_COUNT);
  if (st != MDR_OK && st != MDR_ERR_CAPTURE) {
    if (!w->armed && (st == MDR_ERR_INVALID_ARGUMENT || st == MDR_ERR_OUT_OF_RANGE))
      for (size_t i = 1; i <= cs->n; i++) /* refused: nothing staged */
        if (cs->info[i].device_src != cs->info[i].dst)
          for (size_t k = 0; k < cs->info[i].max_bytes; k++) FUZZ_CHECK(host_ptr(cs->info[i].dst)[k] == POISON);
    return;
  }
  FUZZ_CHECK(t >= 1 && t <= w->m && s >= 1 && s <= t && n_values == 1 + cs->n && vp);
  FUZZ_CHECK(memcmp(host_ptr(mdr_arena_token_ids(w->a)), vals[0], t * 4) == 0);
  uint32_t cnt = 0, seqs = 0;
  memcpy(&cnt, host_ptr(mdr_graph_cache_count_ptr(c)), 4);
  memcpy(&seqs, host_ptr(mdr_graph_cache_sequences_ptr(c)), 4);
  FUZZ_CHECK(cnt == t && seqs == s);
  size_t g = 0, bound_s = 0;
  FUZZ_CHECK(mdr_graph_cache_graph_tokens(c, t, &g) == MDR_OK && mdr_graph_cache_sequence_bound(c, t, &bound_s) == MDR_OK);
  const int padded = cs->mode != MDR_GRAPH_DYNAMIC;
  if (padded) /* the ids padded up to the graph's count */
    for (size_t k = t; k < g; k++) {
      uint32_t id = 0;
      memcpy(&id, host_ptr(mdr_arena_token_ids(w->a)) + 4 * k, 4);
      FUZZ_CHECK(id == cs->pad_id);
    }
  for (size_t i = 1; i <= cs->n; i++) {
    const mdr_step_input_info *f = &cs->info[i];
    const size_t r = rows_of(f, t, s);
    FUZZ_CHECK(r <= f->max_rows);
    size_t bound = !padded ? r : rows_of(f, g, bound_s);
    if (bound > f->max_rows) bound = f->max_rows;
    const unsigned char *d = host_ptr(f->dst);
    FUZZ_CHECK(memcmp(d, vals[i], r * f->row_bytes) == 0); /* the host values, or the source's */
    for (size_t k = r * f->row_bytes; k < bound * f->row_bytes; k++)
      FUZZ_CHECK(d[k] == (unsigned char)(f->pad >> (8 * (k % f->elem_bytes))));
    if (f->device_src != f->dst)
      for (size_t k = bound * f->row_bytes; k < f->max_bytes; k++) FUZZ_CHECK(d[k] == POISON);
  }
}

static void op_query(world *w, fuzz_in *in) {
  cache_slot *cs = &w->caches[fuzz_u8(in) % CACHES];
  const uint8_t q = fuzz_u8(in);
  mdr_graph_cache *c = q >= 0xF0 ? NULL : cs->c;
  mdr_step_input_info f;
  size_t k = 0;
  const size_t idx = fuzz_u8(in) % (MAX_IN + 2);
  mdr_status st = mdr_graph_cache_step_input_info(c, idx, q & 1 ? NULL : &f);
  FUZZ_CHECK((unsigned)st < MDR_STATUS_COUNT);
  if (st == MDR_OK) FUZZ_CHECK(c && idx <= cs->n && f.dst == cs->info[idx].dst);
  st = mdr_graph_cache_step_input_find(c, q & 2 ? NULL : k_names[q % 9], q & 4 ? NULL : &k);
  FUZZ_CHECK((unsigned)st < MDR_STATUS_COUNT);
  if (st == MDR_OK) FUZZ_CHECK(c && k <= cs->n);
  const size_t t = fuzz_u8(in) % (w->m + 2);
  st = mdr_graph_cache_sequence_bound(c, t, q & 8 ? NULL : &k);
  FUZZ_CHECK((unsigned)st < MDR_STATUS_COUNT);
  if (st == MDR_OK) FUZZ_CHECK(k >= 1 && k <= w->m);
  FUZZ_CHECK((mdr_graph_cache_slot_bytes(c) == 0) == (c == NULL));
  FUZZ_CHECK((mdr_graph_cache_step_input_count(c) == 0) == (c == NULL));
}

static void op_prepare(world *w, fuzz_in *in) {
  cache_slot *cs = &w->caches[fuzz_u8(in) % CACHES];
  size_t counts[4];
  const size_t n = fuzz_u8(in) % 5;
  for (size_t i = 0; i < n; i++) counts[i] = fuzz_u8(in) % (w->m + 2);
  const mdr_status st = fuzz_u8(in) & 1 ? mdr_graph_cache_prepare_device(cs->c, w->ids_dev, counts, n)
                                        : mdr_graph_cache_prepare(cs->c, counts, n);
  FUZZ_CHECK((unsigned)st < MDR_STATUS_COUNT);
  if (!cs->c) FUZZ_CHECK(st == MDR_ERR_INVALID_ARGUMENT);
}

static void run_op(world *w, fuzz_in *in) {
  switch (fuzz_u8(in) % 10) {
    case 0:
    case 1: op_create(w, in); break;
    case 2:
    case 3:
    case 4:
    case 5: op_step(w, in); break;
    case 6: op_query(w, in); break;
    case 7: op_prepare(w, in); break;
    case 8: cache_destroy(w, fuzz_u8(in) % CACHES); break;
    default: { /* faults: fail the k-th call from now, or every call of a kind, or none */
      const uint8_t f = fuzz_u8(in);
      fault_backend_fail_at(w->fb, f % 3 == 1 ? 1 + f / 3 % 40 : 0);
      fault_backend_fail_kind(w->fb, f % 3 == 2 ? (int)(f / 3 % MDR_OP_COUNT) : -1);
      w->armed = f % 3 != 0;
      break;
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_in in = {data, size, 0};
  world w;
  memset(&w, 0, sizeof w);
  fuzz_backends(&w.host, &w.fb);
  FUZZ_CHECK(mdr_backend_stream_create(w.fb, &w.s) == MDR_OK);
  w.m = 1 + fuzz_u8(&in) % MAX_M;
  mdr_sizes sz = fuzz_small_sizes(w.m);
  sz.bytes[MDR_BUF_FP8_ACT] = 4096; /* outside the zero plan: an arena destination */
  FUZZ_CHECK(mdr_arena_create(w.fb, &sz, &w.a) == MDR_OK);
  FUZZ_CHECK(mdr_backend_alloc(w.host, POOL, &w.pool) == MDR_OK);
  FUZZ_CHECK(mdr_backend_alloc(w.host, MAX_M * 4, &w.ids_dev) == MDR_OK);
  for (int n = 0; n < 64 && fuzz_more(&in); n++) run_op(&w, &in);
  fault_backend_fail_at(w.fb, 0);
  fault_backend_fail_kind(w.fb, -1);
  for (int i = 0; i < CACHES; i++) cache_destroy(&w, i);
  mdr_arena_destroy(w.a);
  mdr_backend_stream_destroy(w.fb, w.s);
  FUZZ_CHECK(fault_backend_live(w.fb) == 0);
  mdr_backend_free(w.host, w.pool);
  mdr_backend_free(w.host, w.ids_dev);
  mdr_backend_destroy(w.fb);
  mdr_backend_destroy(w.host);
  return 0;
}
