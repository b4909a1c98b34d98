/* Suite `stage_inline`: a small host step of an EXACT or LADDER graph
 * carries its slot image in the fused launch's parameters (graphs/
 * graph_cache.c, "Inline steps"; MDR_STAGE_INLINE) instead of a staging
 * slot. Checked here: inline and ring steps leave the same bytes everywhere
 * (two worlds, one with the route off, every destination poisoned first);
 * queued inline steps each read their own parameters (the host backend
 * held as a stalled GPU, or a sleeping kernel on the GPU); the boundary (an
 * image of exactly MDR_STAGE_INLINE_BYTES is inline, one vector more is
 * not, both derived from the constant); a failed node update refuses the step and leaves the cache usable;
 * which steps never go inline; the backend slots without a cache; the
 * table form of the inline launch (the plan read from a plan table, the
 * parameters the table's and the image) and the cache passing its table;
 * the large image class (the table form only: its descriptor, steps with a
 * block table at 1-2 sequences inline and bit-identical to the ring, queued
 * large-class steps landing their own inputs). Host backend always, CUDA
 * when present. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_impl.h" /* mdr_backend_host_hold, mdr_be_host_fn, MDR_STAGE_INLINE_BYTES */
#include "fault_backend.h"
#include "support.h"
#if defined(MDR_HAVE_CUDA)
#include "gpu_bodies.h"
#include "zero_fused.h" /* mdr_cuda_zero_inline_launch */
#endif

enum { M = TB_SMALL_M, S = 4, N_IN = 4, POISON = 0xC7, PAD_ID = 9 };

/* The declared inputs (index 1 + i): three take host values, one is
 * already in device memory. With S = 4 sequences and the limit of 112
 * bytes, counts 1..8 fit inline (8: exactly MDR_STAGE_INLINE_BYTES), 9 and
 * up do not; the tests derive their boundaries from the constant
 * (image_bytes), so a build with another limit checks its own. */
enum { IN_POS, IN_SEQLEN, IN_HALF, IN_DEV };
static const size_t k_elem[N_IN] = {4, 4, 2, 4};
static const uint64_t k_pad[N_IN] = {0xFFFFFFF0u, 0, 0xABCD, 0x5A5A5A5Au};

/* One cache with its arena and input destinations. */
typedef struct world {
  mdr_backend *b;
  mdr_stream s;
  mdr_arena *a;
  mdr_dptr dst[N_IN];
  size_t bytes[N_IN];
  mdr_dptr dev_src; /* IN_DEV's values */
  mdr_step_input in[N_IN];
  int inputs; /* the cache declares the inputs */
  mdr_graph_cache *c;
} world;

/* A world on an arena of `sizes`. */
static void world_init_sizes(world *w, mdr_backend *b, int inputs, const mdr_sizes *sizes) {
  memset(w, 0, sizeof *w);
  w->b = b;
  w->s = tb_stream(b);
  w->inputs = inputs;
  cr_assert_eq(mdr_arena_create(b, sizes, &w->a), MDR_OK, "%s", mdr_backend_last_error(b));
  const size_t rows[N_IN] = {M, S, M, M};
  const mdr_step_input_shape shape[N_IN] = {MDR_INPUT_PER_TOKEN, MDR_INPUT_PER_SEQUENCE, MDR_INPUT_PER_TOKEN,
                                            MDR_INPUT_PER_TOKEN};
  const char *names[N_IN] = {"positions", "seq_lens", "half", "device_positions"};
  for (int i = 0; i < N_IN; i++) {
    w->bytes[i] = rows[i] * k_elem[i];
    cr_assert_eq(mdr_backend_alloc(b, w->bytes[i], &w->dst[i]), MDR_OK);
    w->in[i] = (mdr_step_input){.name = names[i],
                                .elem_bytes = k_elem[i],
                                .shape = shape[i],
                                .pad = k_pad[i],
                                .dest = MDR_INPUT_TO_DEVICE,
                                .address = w->dst[i]};
  }
  cr_assert_eq(mdr_backend_alloc(b, w->bytes[IN_DEV], &w->dev_src), MDR_OK);
  w->in[IN_DEV].device_src = w->dev_src;
}

static void world_init(world *w, mdr_backend *b, int inputs) {
  const mdr_sizes sizes = tb_small_sizes();
  world_init_sizes(w, b, inputs, &sizes);
}

static mdr_graph_cache_options world_options(world *w, mdr_graph_mode mode, mdr_zero_strategy zero) {
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.mode = mode;
  o.zero = zero;
  o.pad_token_id = PAD_ID;
  o.max_sequences = S;
  if (w->inputs) {
    o.inputs = w->in;
    o.n_inputs = N_IN;
  }
  return o;
}

/* The cache, with MDR_STAGE_INLINE as given (NULL: unset) at create. */
static void world_cache(world *w, const mdr_graph_cache_options *o, const char *route) {
  if (route)
    setenv("MDR_STAGE_INLINE", route, 1);
  else
    unsetenv("MDR_STAGE_INLINE");
  cr_assert_eq(mdr_graph_cache_create(w->a, w->s, o, &w->c), MDR_OK, "%s", mdr_backend_last_error(w->b));
  unsetenv("MDR_STAGE_INLINE");
}

static void world_fini(world *w) {
  mdr_graph_cache_destroy(w->c);
  for (int i = 0; i < N_IN; i++) mdr_backend_free(w->b, w->dst[i]);
  mdr_backend_free(w->b, w->dev_src);
  mdr_arena_destroy(w->a);
  mdr_backend_stream_destroy(w->b, w->s);
}

/* A world with inputs on the fault backend over the host backend, and its
 * EXACT fused cache: the failure cases' setting. */
static mdr_backend *fault_world(world *w, mdr_backend **host) {
  mdr_backend *fb = NULL;
  *host = tb_backend(TB_HOST);
  cr_assert_eq(fault_backend_create(*host, &fb), MDR_OK);
  world_init(w, fb, 1);
  mdr_graph_cache_options o = world_options(w, MDR_GRAPH_EXACT, MDR_ZERO_FUSED);
  world_cache(w, &o, NULL);
  return fb;
}

static void fault_world_fini(world *w, mdr_backend *fb, mdr_backend *host) {
  world_fini(w);
  cr_assert_eq(fault_backend_live(fb), 0, "nothing leaked");
  mdr_backend_destroy(fb);
  mdr_backend_destroy(host);
}

/* One step's values. */
typedef struct step_values {
  size_t t, s;
  uint32_t ids[M], pos[M], seqlen[S], dev[M];
  uint16_t half[M];
} step_values;

/* A token id as a tokenizer would give it: 1 .. 150000. */
static uint32_t random_id(uint64_t *rng) { return (uint32_t)(tb_rng_next(rng) % 150000) + 1; }

static void make_values(uint64_t *rng, step_values *v, size_t t, size_t s) {
  memset(v, 0, sizeof *v);
  v->t = t;
  v->s = s;
  for (size_t i = 0; i < t; i++) {
    v->ids[i] = random_id(rng);
    v->pos[i] = (uint32_t)tb_rng_next(rng);
    v->half[i] = (uint16_t)tb_rng_next(rng);
    v->dev[i] = (uint32_t)tb_rng_next(rng);
  }
  for (size_t i = 0; i < s; i++) v->seqlen[i] = (uint32_t)tb_rng_next(rng);
}

/* The step through the world's cache (its inputs when declared). */
static mdr_status world_step(world *w, const step_values *v) {
  if (!w->inputs) return mdr_graph_cache_step(w->c, v->ids, v->t);
  const void *vals[1 + N_IN] = {v->ids, v->pos, v->seqlen, v->half, NULL};
  return mdr_graph_cache_step_inputs(w->c, vals, 1 + N_IN, v->t, v->s);
}

/* Every destination poisoned, the arena with its per-buffer poison, the
 * device-resident input's source holding this step's values. */
static void world_poison(world *w, const step_values *v) {
  tb_poison_arena(w->a);
  for (int i = 0; i < N_IN; i++) cr_assert_eq(mdr_backend_fill(w->b, w->dst[i], POISON, w->bytes[i]), MDR_OK);
  cr_assert_eq(mdr_backend_fill(w->b, mdr_arena_token_ids(w->a), POISON, mdr_arena_token_ids_bytes(w->a)), MDR_OK);
  cr_assert_eq(mdr_backend_copy_h2d(w->b, w->dev_src, v->dev, sizeof v->dev), MDR_OK);
}

static void read_back(mdr_backend *b, void *dst, mdr_dptr p, size_t n) {
  cr_assert_eq(mdr_backend_copy_d2h(b, dst, p, n), MDR_OK, "%s", mdr_backend_last_error(b));
}

/* A destination: `real` bytes of `want`, the pad element up to `copy`
 * bytes, poison to the end. */
static void expect_bytes(const unsigned char *got, size_t n, const void *want, size_t real, size_t copy, size_t elem,
                         uint64_t pad, const char *name, const char *what) {
  for (size_t k = 0; k < n; k++) {
    const unsigned char x = k < real   ? ((const unsigned char *)want)[k]
                            : k < copy ? (unsigned char)(pad >> (8 * (k % elem)))
                                       : (unsigned char)POISON;
    cr_assert_eq(got[k], x, "%s: %s byte %zu (real %zu, copy %zu bytes)", what, name, k, real, copy);
  }
}

/* The step's ids, inputs and counts, bit for bit, in a graph of g token
 * rows and sb sequence rows (each input clamped to its rows). */
static void world_expect(world *w, const step_values *v, const char *what) {
  size_t g = 0, sb = 0;
  cr_assert_eq(mdr_graph_cache_graph_tokens(w->c, v->t, &g), MDR_OK);
  cr_assert_eq(mdr_graph_cache_sequence_bound(w->c, v->t, &sb), MDR_OK);
  unsigned char got[M * 8 + 256];
  const size_t idb = mdr_arena_token_ids_bytes(w->a);
  read_back(w->b, got, mdr_arena_token_ids(w->a), idb);
  expect_bytes(got, idb, v->ids, 4 * v->t, 4 * g, 4, PAD_ID, "token_ids", what);
  uint32_t counts[2];
  read_back(w->b, &counts[0], mdr_graph_cache_count_ptr(w->c), 4);
  read_back(w->b, &counts[1], mdr_graph_cache_sequences_ptr(w->c), 4);
  cr_assert_eq(counts[0], v->t, "%s: token count", what);
  cr_assert_eq(counts[1], w->inputs ? v->s : (v->t < S ? v->t : S), "%s: sequence count", what);
  if (!w->inputs) return;
  const void *want[N_IN] = {v->pos, v->seqlen, v->half, v->dev};
  const size_t real[N_IN] = {v->t, v->s, v->t, v->t}, copy[N_IN] = {g, sb, g, g};
  for (int i = 0; i < N_IN; i++) {
    read_back(w->b, got, w->dst[i], w->bytes[i]);
    expect_bytes(got, w->bytes[i], want[i], k_elem[i] * real[i], k_elem[i] * copy[i], k_elem[i], k_pad[i],
                 w->in[i].name, what);
  }
}

/* Two worlds hold the same bytes: every arena buffer, every destination,
 * the count words. */
static void expect_same(world *x, world *y, const char *what) {
  static unsigned char bx[1 << 17], by[1 << 17];
  for (int i = 0; i < MDR_BUF_COUNT; i++) {
    const mdr_buffer buf = (mdr_buffer)i;
    const size_t n = mdr_arena_bytes(x->a, buf);
    if (!mdr_arena_ptr(x->a, buf)) continue;
    cr_assert_leq(n, sizeof bx);
    read_back(x->b, bx, mdr_arena_ptr(x->a, buf), n);
    read_back(y->b, by, mdr_arena_ptr(y->a, buf), n);
    for (size_t k = 0; k < n; k++)
      cr_assert_eq(bx[k], by[k], "%s: %s byte %zu: inline %#x, ring %#x", what, mdr_buffer_name(buf), k, bx[k],
                   by[k]);
  }
  for (int i = 0; i < N_IN && x->inputs; i++) {
    read_back(x->b, bx, x->dst[i], x->bytes[i]);
    read_back(y->b, by, y->dst[i], y->bytes[i]);
    cr_assert_eq(memcmp(bx, by, x->bytes[i]), 0, "%s: input %s differs", what, x->in[i].name);
  }
  uint32_t cx[2], cy[2];
  read_back(x->b, cx, mdr_graph_cache_count_ptr(x->c), 8);
  read_back(y->b, cy, mdr_graph_cache_count_ptr(y->c), 8);
  cr_assert_eq(memcmp(cx, cy, 8), 0, "%s: count words (%u, %u) and (%u, %u)", what, cx[0], cx[1], cy[0], cy[1]);
}

/* The slot image of graph count g, written from the layout's rule
 * (staging_layout.h): header, ids, each host input's rows at (g, min(g,
 * S)), each piece 16-byte aligned. */
static size_t up16(size_t x) { return (x + 15) / 16 * 16; }
static size_t image_bytes(int inputs, size_t g) {
  size_t end = MDR_STAGE_HEADER_BYTES + 4 * g;
  if (!inputs) return end;
  end = up16(end) + 4 * g;               /* positions */
  end = up16(end) + 4 * (g < S ? g : S); /* seq_lens */
  end = up16(end) + 2 * g;               /* half; device_positions take no room */
  return end;
}

/* The largest count g whose image (inputs or not) fits the small class. */
static size_t largest_inline(int inputs) {
  size_t g = 0;
  while (image_bytes(inputs, g + 1) <= MDR_STAGE_INLINE_BYTES) g++;
  return g;
}

/* The counts with an inline layout (graphs/staging.h,
 * MDR_STAGING_INLINE_COUNTS): 1-32, past the 24 ids a small image holds. */
enum { INLINE_COUNTS = 32 };

/* The room a larger-class CUDA inline launch keeps for the count's input
 * table, before its image (mdr_stage_inline_launch.table_offset). */
#define INLINE_TABLE_BYTES (MDR_STAGE_INLINE_TABLE * sizeof(mdr_stage_input))

/* Whether graph count g goes inline in a cache of fused zeroing or not: a
 * count with an inline layout whose image fits the small class, or with
 * fused zeroing (given a plan table, the only way to the larger classes)
 * the largest class. */
static int goes_inline(int inputs, size_t g, int fused) {
  const size_t bytes = image_bytes(inputs, g);
  return g <= INLINE_COUNTS && (bytes <= MDR_STAGE_INLINE_BYTES || (fused && bytes <= MDR_STAGE_INLINE_XXXL_BYTES));
}

/* The largest count that goes inline (fused zeroing or not). */
static size_t largest_inline_of(int inputs, int fused) {
  size_t g = 0;
  while (goes_inline(inputs, g + 1, fused)) g++;
  return g;
}

typedef struct mix_case {
  tb_kind kind;
  mdr_graph_mode mode;
  mdr_zero_strategy zero;
  int inputs;
  size_t max_graphs;
} mix_case;

ParameterizedTestParameters(stage_inline, inline_and_ring_steps_leave_the_same_bytes_over_random_mixes) {
  static mix_case cases[TB_KIND_COUNT * 2 * 2 * 2];
  size_t n = 0;
  for (int k = 0; k < TB_KIND_COUNT; k++)
    for (int m = 0; m < 2; m++)
      for (int z = 0; z < 2; z++)
        for (int in = 0; in < 2; in++)
          cases[n++] = (mix_case){(tb_kind)k, m ? MDR_GRAPH_LADDER : MDR_GRAPH_EXACT,
                                  z ? MDR_ZERO_MEMSET : MDR_ZERO_FUSED, in, (size_t)(in && !z ? 3 : 0)};
  return cr_make_param_array(mix_case, cases, n);
}

/* The same random steps through two caches of two arenas, one with the
 * route (unset: its default) and one with MDR_STAGE_INLINE=0: after each
 * step every byte of both worlds is the same, and the step's own values
 * are where they belong. The counts that fit inline are counted as such,
 * the others and the whole second world not. */
ParameterizedTest(mix_case *mc, stage_inline, inline_and_ring_steps_leave_the_same_bytes_over_random_mixes) {
  mdr_backend *b = tb_backend(mc->kind);
  world x, y;
  world_init(&x, b, mc->inputs);
  world_init(&y, b, mc->inputs);
  mdr_graph_cache_options o = world_options(&x, mc->mode, mc->zero);
  o.max_graphs = mc->max_graphs; /* some: inline graphs evicted and captured again */
  world_cache(&x, &o, NULL);
  o = world_options(&y, mc->mode, mc->zero);
  o.max_graphs = mc->max_graphs;
  world_cache(&y, &o, "0");
  uint64_t rng = 99 + (uint64_t)mc->mode * 5 + (uint64_t)mc->zero * 3 + (uint64_t)mc->inputs + mc->max_graphs;
  uint64_t want_inline = 0;
  const int steps = 4 * MDR_GRAPH_STAGING_SLOTS + 7;
  for (int k = 0; k < steps; k++) {
    /* mostly small counts (the route's), some anywhere, some past the
     * inline layouts (the top eighth of M), ring wraps */
    const uint64_t r = tb_rng_next(&rng) % 6;
    const size_t t = r < 4 ? 1 + tb_rng_next(&rng) % 10 : r == 4 ? 1 + tb_rng_next(&rng) % M
                                                                 : M - tb_rng_next(&rng) % (M / 8);
    const size_t s = 1 + tb_rng_next(&rng) % (t < S ? t : S);
    step_values v;
    make_values(&rng, &v, t, s);
    world_poison(&x, &v);
    world_poison(&y, &v);
    cr_assert_eq(world_step(&x, &v), MDR_OK, "step %d: %s", k, mdr_backend_last_error(b));
    cr_assert_eq(world_step(&y, &v), MDR_OK, "step %d: %s", k, mdr_backend_last_error(b));
    cr_assert_eq(mdr_backend_synchronize(b, x.s), MDR_OK);
    cr_assert_eq(mdr_backend_synchronize(b, y.s), MDR_OK);
    char what[96];
    snprintf(what, sizeof what, "%s step %d (t %zu, s %zu)", tb_kind_name(mc->kind), k, t, s);
    world_expect(&x, &v, what);
    expect_same(&x, &y, what);
    size_t g = 0;
    cr_assert_eq(mdr_graph_cache_graph_tokens(x.c, t, &g), MDR_OK);
    want_inline += goes_inline(mc->inputs, g, mc->zero == MDR_ZERO_FUSED);
  }
  mdr_graph_stats sx, sy;
  cr_assert_eq(mdr_graph_cache_stats(x.c, &sx), MDR_OK);
  cr_assert_eq(mdr_graph_cache_stats(y.c, &sy), MDR_OK);
  cr_assert_gt(want_inline, 10, "the mix has inline counts");
  /* ring counts exist only when the largest count does not go inline (a
   * larger MDR_STAGE_INLINE_BYTES can take every count of M) */
  if (!goes_inline(mc->inputs, M, mc->zero == MDR_ZERO_FUSED))
    cr_assert_lt(want_inline, (uint64_t)steps, "the mix has ring counts");
  cr_assert_eq(sx.inline_steps, want_inline, "inline steps counted: %llu", (unsigned long long)sx.inline_steps);
  cr_assert_eq(sy.inline_steps, 0, "MDR_STAGE_INLINE=0: no inline step");
  cr_assert_eq(sx.steps, (uint64_t)steps);
  cr_assert_eq(sy.steps, (uint64_t)steps);
  cr_assert_eq(sx.eager_steps + sy.eager_steps, 0);
  world_fini(&x);
  world_fini(&y);
  mdr_backend_destroy(b);
}

ParameterizedTestParameters(stage_inline, device_id_steps_with_host_inputs_go_inline_and_match_the_ring) {
  static mix_case cases[TB_KIND_COUNT * 2 * 2];
  size_t n = 0;
  for (int k = 0; k < TB_KIND_COUNT; k++)
    for (int m = 0; m < 2; m++)
      for (int z = 0; z < 2; z++)
        cases[n++] = (mix_case){(tb_kind)k, m ? MDR_GRAPH_LADDER : MDR_GRAPH_EXACT,
                                z ? MDR_ZERO_MEMSET : MDR_ZERO_FUSED, 1, 0};
  return cr_make_param_array(mix_case, cases, n);
}

/* A step with its ids in device memory (`ids`, this step's copied there
 * first) and the rest of its inputs from the host. */
static mdr_status world_step_device(world *w, const step_values *v, mdr_dptr ids) {
  cr_assert_eq(mdr_backend_copy_h2d(w->b, ids, v->ids, v->t * sizeof v->ids[0]), MDR_OK);
  const void *vals[1 + N_IN] = {NULL, v->pos, v->seqlen, v->half, NULL};
  return mdr_graph_cache_step_inputs_device(w->c, ids, vals, 1 + N_IN, v->t, v->s);
}

/* Device-id steps with host inputs, mixed with host steps, through a cache
 * with the route and one with MDR_STAGE_INLINE=0: a small device step goes
 * inline too (its image the header and the host inputs, the ids copied on
 * the device and padded with the pad id), and leaves every byte as the ring
 * step does; host and device graphs of one count live side by side. */
ParameterizedTest(mix_case *mc, stage_inline, device_id_steps_with_host_inputs_go_inline_and_match_the_ring) {
  mdr_backend *b = tb_backend(mc->kind);
  world x, y;
  world_init(&x, b, 1);
  world_init(&y, b, 1);
  mdr_graph_cache_options o = world_options(&x, mc->mode, mc->zero);
  world_cache(&x, &o, NULL);
  o = world_options(&y, mc->mode, mc->zero);
  world_cache(&y, &o, "0");
  mdr_dptr idx = 0, idy = 0;
  cr_assert_eq(mdr_backend_alloc(b, M * 4, &idx), MDR_OK);
  cr_assert_eq(mdr_backend_alloc(b, M * 4, &idy), MDR_OK);
  uint64_t rng = 7 + (uint64_t)mc->mode * 5 + (uint64_t)mc->zero * 3;
  uint64_t want_inline = 0, device_inline = 0;
  const int steps = 4 * MDR_GRAPH_STAGING_SLOTS + 9;
  for (int k = 0; k < steps; k++) {
    const uint64_t r = tb_rng_next(&rng) % 6;
    const size_t t = r < 4 ? 1 + tb_rng_next(&rng) % 10 : 1 + tb_rng_next(&rng) % M;
    const size_t s = 1 + tb_rng_next(&rng) % (t < S ? t : S);
    const int device = k % 3 != 2; /* two device steps in three */
    step_values v;
    make_values(&rng, &v, t, s);
    world_poison(&x, &v);
    world_poison(&y, &v);
    cr_assert_eq(device ? world_step_device(&x, &v, idx) : world_step(&x, &v), MDR_OK, "step %d: %s", k,
                 mdr_backend_last_error(b));
    cr_assert_eq(device ? world_step_device(&y, &v, idy) : world_step(&y, &v), MDR_OK, "step %d: %s", k,
                 mdr_backend_last_error(b));
    cr_assert_eq(mdr_backend_synchronize(b, x.s), MDR_OK);
    cr_assert_eq(mdr_backend_synchronize(b, y.s), MDR_OK);
    char what[96];
    snprintf(what, sizeof what, "%s %s step %d (t %zu, s %zu)", tb_kind_name(mc->kind), device ? "device" : "host",
             k, t, s);
    world_expect(&x, &v, what);
    world_expect(&y, &v, what);
    expect_same(&x, &y, what);
    size_t g = 0;
    cr_assert_eq(mdr_graph_cache_graph_tokens(x.c, t, &g), MDR_OK);
    const int inl = goes_inline(1, g, mc->zero == MDR_ZERO_FUSED);
    want_inline += inl;
    device_inline += inl && device;
  }
  mdr_graph_stats sx, sy;
  cr_assert_eq(mdr_graph_cache_stats(x.c, &sx), MDR_OK);
  cr_assert_eq(mdr_graph_cache_stats(y.c, &sy), MDR_OK);
  cr_assert_gt(device_inline, 8, "the mix has inline device steps");
  cr_assert_eq(sx.inline_steps, want_inline, "inline steps counted: %llu of %llu",
               (unsigned long long)sx.inline_steps, (unsigned long long)want_inline);
  cr_assert_eq(sy.inline_steps, 0, "MDR_STAGE_INLINE=0: no inline step");
  cr_assert_eq(sx.device_steps, sy.device_steps);
  cr_assert_eq(sx.eager_steps + sy.eager_steps, 0);
  mdr_backend_free(b, idx);
  mdr_backend_free(b, idy);
  world_fini(&x);
  world_fini(&y);
  mdr_backend_destroy(b);
}

static uint64_t step_counted(world *w, uint64_t *rng, size_t t, size_t s);

/* ---- a queue of steps behind a stalled device ---------------------------------------- */

/* What a body's host function saw when the stream reached it: the step's
 * ids, counts and inputs as they were then. */
typedef struct seen {
  uint32_t ids[M], counts[2], pos[M], seqlen[S];
  uint16_t half[M];
} seen;

typedef struct queue_log {
  world *w;
  size_t n;
  seen at[128];
} queue_log;

static mdr_status snapshot(mdr_backend *b, void *arg) {
  (void)b;
  queue_log *log = *(queue_log **)arg;
  world *w = log->w;
  if (log->n == sizeof log->at / sizeof log->at[0]) return MDR_ERR_STATE;
  seen *e = &log->at[log->n++];
  /* host backend: device memory is host memory */
  memcpy(e->ids, (const void *)(uintptr_t)mdr_arena_token_ids(w->a), sizeof e->ids);
  memcpy(e->counts, (const void *)(uintptr_t)mdr_graph_cache_count_ptr(w->c), sizeof e->counts);
  memcpy(e->pos, (const void *)(uintptr_t)w->dst[IN_POS], sizeof e->pos);
  memcpy(e->seqlen, (const void *)(uintptr_t)w->dst[IN_SEQLEN], sizeof e->seqlen);
  memcpy(e->half, (const void *)(uintptr_t)w->dst[IN_HALF], sizeof e->half);
  return MDR_OK;
}

static mdr_status snapshot_body(void *user, mdr_stream s, size_t tokens) {
  (void)tokens;
  queue_log *log = user;
  return mdr_be_host_fn(log->w->b, snapshot, &log, sizeof log, s);
}

/* The host backend held (a stalled GPU): steps of random inline counts,
 * with a few ring steps among them (fewer than the ring's slots), are all
 * enqueued before any runs; many more than the ring holds, so no inline
 * step waited for the ring. Released, each step's body sees that step's
 * own ids, inputs and counts, never a later step's parameters. */
Test(stage_inline, queued_inline_steps_each_read_their_own_parameters, .timeout = 120) {
  mdr_backend *b = tb_backend(TB_HOST);
  world w;
  world_init(&w, b, 1);
  static queue_log log;
  memset(&log, 0, sizeof log);
  log.w = &w;
  mdr_graph_cache_options o = world_options(&w, MDR_GRAPH_EXACT, MDR_ZERO_FUSED);
  o.body = snapshot_body;
  o.user = &log;
  world_cache(&w, &o, NULL);
  uint64_t rng = 4242;
  /* the route is on (else every step would take the ring, and the ring
   * would wait for ever for the held stream): checked before holding */
  cr_assert_eq(step_counted(&w, &rng, 2, 1), 1, "a small step goes inline");
  log.n = 0;
  step_values dv; /* the device-resident input's source stays as it is while held */
  make_values(&rng, &dv, M, S);
  world_poison(&w, &dv);
  enum { STEPS = 6 * MDR_GRAPH_STAGING_SLOTS };
  static step_values v[STEPS];
  size_t ring_steps = 0;
  const size_t rt = largest_inline_of(w.inputs, 1) + 1;
  const int has_ring = rt + 3 <= M;
  cr_assert_eq(mdr_backend_host_hold(b, 1), MDR_OK);
  for (int k = 0; k < STEPS; k++) {
    /* ring steps at the 4 counts past the largest inline one (25-28 at
     * 112 bytes), when the arena has them; the inline steps of both image
     * classes (1-8 small, 9-24 large at 112 and 1152 bytes) */
    const int ring = has_ring && k % 9 == 4 && ring_steps < MDR_GRAPH_STAGING_SLOTS - 1;
    const size_t t = ring ? rt + tb_rng_next(&rng) % 4 : 1 + tb_rng_next(&rng) % (rt - 1);
    make_values(&rng, &v[k], t, 1 + tb_rng_next(&rng) % (t < S ? t : S));
    memcpy(v[k].dev, dv.dev, sizeof dv.dev);
    ring_steps += ring;
    cr_assert_eq(world_step(&w, &v[k]), MDR_OK, "step %d: %s", k, mdr_backend_last_error(b));
  }
  int idle = 1;
  cr_assert_eq(mdr_be_stream_query(b, w.s, &idle), MDR_OK);
  cr_assert_eq(idle, 0, "held: the steps are queued");
  cr_assert_eq(log.n, 0, "held: no step ran");
  uint32_t first_id = 0;
  read_back(b, &first_id, mdr_arena_token_ids(w.a), 4);
  cr_assert_eq(first_id, POISON * 0x01010101u, "held: token_ids untouched");
  mdr_graph_stats st;
  cr_assert_eq(mdr_graph_cache_stats(w.c, &st), MDR_OK);
  cr_assert_eq(st.inline_steps, 1 + STEPS - ring_steps, "every small step inline");
  if (has_ring) cr_assert_gt(ring_steps, 2, "ring steps among them");
  cr_assert_eq(mdr_backend_host_hold(b, 0), MDR_OK, "%s", mdr_backend_last_error(b));
  cr_assert_eq(log.n, STEPS, "each step's body ran once");
  for (int k = 0; k < STEPS; k++) {
    const seen *e = &log.at[k];
    const step_values *x = &v[k];
    const size_t g = x->t, sb = x->t < S ? x->t : S;
    for (size_t i = 0; i < g; i++) cr_assert_eq(e->ids[i], x->ids[i], "step %d (t %zu): id %zu", k, x->t, i);
    cr_assert_eq(e->counts[0], x->t, "step %d: token count", k);
    cr_assert_eq(e->counts[1], x->s, "step %d: sequence count", k);
    for (size_t i = 0; i < g; i++) cr_assert_eq(e->pos[i], x->pos[i], "step %d: position %zu", k, i);
    for (size_t i = 0; i < g; i++) cr_assert_eq(e->half[i], x->half[i], "step %d: half %zu", k, i);
    for (size_t i = 0; i < sb; i++)
      cr_assert_eq(e->seqlen[i], i < x->s ? x->seqlen[i] : 0u, "step %d: seq_len %zu", k, i);
  }
  world_fini(&w);
  mdr_backend_destroy(b);
}

#if defined(MDR_HAVE_CUDA)
/* The GPU held by a sleeping kernel: hundreds of small steps (inline, a
 * few ring steps among them) queue behind it; each folds its ids into an
 * accumulator. A step that read a later step's parameters would change
 * the sum. */
Test(stage_inline, queued_inline_steps_each_read_their_own_parameters_on_the_gpu) {
  mdr_backend *b = tb_backend(TB_CUDA);
  world w;
  world_init(&w, b, 0);
  mdr_dptr acc_dev = 0;
  cr_assert_eq(mdr_backend_alloc(b, 16, &acc_dev), MDR_OK);
  cr_assert_eq(mdr_backend_fill(b, acc_dev, 0, 16), MDR_OK);
  tb_acc_user u = {w.a, (uint64_t *)(uintptr_t)acc_dev};
  mdr_graph_cache_options o = world_options(&w, MDR_GRAPH_EXACT, MDR_ZERO_FUSED);
  o.body = tb_acc_body;
  o.user = &u;
  world_cache(&w, &o, NULL);
  size_t all[M];
  for (size_t t = 1; t <= M; t++) all[t - 1] = t;
  cr_assert_eq(mdr_graph_cache_prepare(w.c, all, M), MDR_OK, "%s", mdr_backend_last_error(b));
  cr_assert_eq(mdr_backend_synchronize(b, w.s), MDR_OK);
  cr_assert_eq(tb_cuda_sleep(w.s, 50ull * 1000 * 1000), 0);
  uint64_t rng = 31, want_sum = 0, want_n = 0, want_inline = 0;
  for (int k = 0; k < 300; k++) {
    const size_t t = k % 10 == 5 ? 1 + tb_rng_next(&rng) % M : 1 + tb_rng_next(&rng) % 24;
    uint32_t ids[M];
    for (size_t i = 0; i < t; i++) ids[i] = (uint32_t)(tb_rng_next(&rng) % 150000) + 1;
    for (size_t i = 0; i < t; i++) want_sum += (uint64_t)(i + 1) * ids[i];
    want_n += t;
    want_inline += goes_inline(0, t, 1);
    cr_assert_eq(mdr_graph_cache_step(w.c, ids, t), MDR_OK, "%s", mdr_backend_last_error(b));
    memset(ids, 0xEE, sizeof ids); /* the caller may reuse its buffer at once */
  }
  cr_assert_eq(mdr_backend_synchronize(b, w.s), MDR_OK);
  uint64_t got[2];
  read_back(b, got, acc_dev, 16);
  cr_assert_eq(got[1], want_n, "tokens seen");
  cr_assert_eq(got[0], want_sum, "a queued step read parameters not its own");
  mdr_graph_stats st;
  cr_assert_eq(mdr_graph_cache_stats(w.c, &st), MDR_OK);
  cr_assert_eq(st.inline_steps, want_inline);
  cr_assert_gt(want_inline, 200);
  mdr_backend_free(b, acc_dev);
  world_fini(&w);
  mdr_backend_destroy(b);
}
#endif

/* ---- the boundary --------------------------------------------------------------------- */

/* One step of t through w's cache, checked; returns the inline steps it
 * added. */
static uint64_t step_counted(world *w, uint64_t *rng, size_t t, size_t s) {
  mdr_graph_stats s0, s1;
  cr_assert_eq(mdr_graph_cache_stats(w->c, &s0), MDR_OK);
  step_values v;
  make_values(rng, &v, t, s);
  world_poison(w, &v);
  cr_assert_eq(world_step(w, &v), MDR_OK, "t %zu: %s", t, mdr_backend_last_error(w->b));
  cr_assert_eq(mdr_backend_synchronize(w->b, w->s), MDR_OK);
  char what[64];
  snprintf(what, sizeof what, "t %zu", t);
  world_expect(w, &v, what);
  cr_assert_eq(mdr_graph_cache_stats(w->c, &s1), MDR_OK);
  cr_assert_eq(s1.steps, s0.steps + 1);
  return s1.inline_steps - s0.inline_steps;
}

ParameterizedTestParameters(stage_inline, an_image_of_exactly_the_limit_is_inline_one_vector_more_is_not) {
  static tb_kind kinds[] = {TB_HOST, TB_CUDA};
  return cr_make_param_array(tb_kind, kinds, 2);
}

/* The bytes of the LADDER part's FIXED input: rung 8's image (16 + 32 of
 * ids) is then exactly the limit of a class, rung 12's one vector more. */
enum {
  FIXB = MDR_STAGE_INLINE_BYTES - MDR_STAGE_HEADER_BYTES - 32,
  FIXB_LARGE = MDR_STAGE_INLINE_LARGE_BYTES - MDR_STAGE_HEADER_BYTES - 32,
  FIXB_XL = MDR_STAGE_INLINE_XL_BYTES - MDR_STAGE_HEADER_BYTES - 32,
  FIXB_XXL = MDR_STAGE_INLINE_XXL_BYTES - MDR_STAGE_HEADER_BYTES - 32,
  FIXB_XXXL = MDR_STAGE_INLINE_XXXL_BYTES - MDR_STAGE_HEADER_BYTES - 32
};

/* Ids only: gi = (limit - 16) / 4 ids make an image of exactly the limit
 * (24 at 112 bytes: inline), gi + 4 one vector more, gi + 1 a word more:
 * the ring under memset zeroing (the small class only), the large class
 * under fused zeroing, there up to the counts with an inline layout (32)
 * and the ring past them. With the inputs: the largest count that fits the small class
 * is inline (8 at 112 bytes, exactly the limit), the next in the large
 * class (fused zeroing: the table form), and past the counts with an
 * inline layout the ring. A boundary past the arena's M is not reachable:
 * then M itself is checked inline. LADDER: a count is inline by its rung's
 * image: rung 8 of exactly the small class's limit inline and rung 12 not
 * (memset zeroing: no table form, the small class only); both inline with
 * fused zeroing (rung 12 in the next class) at the small, large,
 * extra-large and fourth classes' limits; rung 8 of exactly the largest
 * class's limit inline and rung 12 not (fused). */
ParameterizedTest(tb_kind *kind, stage_inline, an_image_of_exactly_the_limit_is_inline_one_vector_more_is_not) {
  const size_t gi = (MDR_STAGE_INLINE_BYTES - MDR_STAGE_HEADER_BYTES) / 4, gin = largest_inline(1);
  cr_assert_eq(largest_inline(0), gi);
  cr_assert_eq(image_bytes(0, gi), MDR_STAGE_INLINE_BYTES);
  cr_assert_eq(image_bytes(0, gi + 4), MDR_STAGE_INLINE_BYTES + 16);
  cr_assert_leq(image_bytes(1, gin), MDR_STAGE_INLINE_BYTES);
  cr_assert_gt(image_bytes(1, gin + 1), MDR_STAGE_INLINE_BYTES);
  if (MDR_STAGE_INLINE_BYTES == 112) {
    cr_assert_eq(gi, 24);
    cr_assert_eq(gin, 8);
    cr_assert_eq(image_bytes(1, 8), MDR_STAGE_INLINE_BYTES, "8 tokens with inputs: exactly the limit");
  }
  mdr_backend *b = tb_backend(*kind);
  uint64_t rng = 7;
  world w;
  mdr_graph_cache_options o;
  for (int fused = 0; fused < 2; fused++) {
    world_init(&w, b, 0);
    o = world_options(&w, MDR_GRAPH_EXACT, fused ? MDR_ZERO_FUSED : MDR_ZERO_MEMSET);
    world_cache(&w, &o, NULL);
    const char *z = fused ? "fused" : "memset";
    for (int rep = 0; rep < 2; rep++) { /* the capture, then a replay */
      if (gi + 4 <= M) {
        cr_assert_eq(step_counted(&w, &rng, gi, 4), 1, "%s, %zu ids: exactly the limit, inline", z, gi);
        cr_assert_eq(step_counted(&w, &rng, gi + 4, 4), (uint64_t)fused, "%s, %zu ids: one vector more", z, gi + 4);
        cr_assert_eq(step_counted(&w, &rng, gi + 1, 4), (uint64_t)fused, "%s, %zu ids: a word more", z, gi + 1);
      } else {
        cr_assert_eq(step_counted(&w, &rng, M, 4), 1, "%s, %d ids: under a limit past M, inline", z, (int)M);
      }
      if (INLINE_COUNTS + 1 <= M) {
        cr_assert_eq(step_counted(&w, &rng, INLINE_COUNTS, 4), (uint64_t)fused, "%s, %d ids: the last inline layout", z,
                     (int)INLINE_COUNTS);
        cr_assert_eq(step_counted(&w, &rng, INLINE_COUNTS + 1, 4), 0, "%s, %d ids: no inline layout, the ring", z,
                     (int)INLINE_COUNTS + 1);
      }
      cr_assert_eq(step_counted(&w, &rng, 1, 1), 1, "%s, 1 id: inline", z);
    }
    world_fini(&w);
  }

  world_init(&w, b, 1);
  o = world_options(&w, MDR_GRAPH_EXACT, MDR_ZERO_FUSED);
  world_cache(&w, &o, NULL);
  for (int rep = 0; rep < 2; rep++) {
    if (gin + 1 <= M) {
      cr_assert_eq(step_counted(&w, &rng, gin, 3), 1, "%zu tokens with inputs: the largest that fits, inline", gin);
      const int large = goes_inline(1, gin + 1, 1);
      cr_assert_eq(step_counted(&w, &rng, gin + 1, 4), large, "%zu tokens with inputs: the large class", gin + 1);
      if (MDR_STAGE_INLINE_BYTES == 112 && MDR_STAGE_INLINE_LARGE_BYTES == 1152) cr_assert(large);
      if (INLINE_COUNTS + 1 <= M)
        cr_assert_eq(step_counted(&w, &rng, INLINE_COUNTS + 1, 4), 0, "%d tokens: no inline layout, the ring",
                     (int)INLINE_COUNTS + 1);
    } else {
      cr_assert_eq(step_counted(&w, &rng, M, 4), 1, "%d tokens with inputs: under a limit past M, inline", (int)M);
    }
  }
  world_fini(&w);

  /* LADDER rungs 8 and 12 (ids and a FIXED input of fixb bytes: 64, 1104,
   * 4304, 8400 or 16848 at 112, 1152, 4352, 8448 and 16896): 5 tokens take rung 8 (16 +
   * 32 + fixb = a class's limit, inline), 9 take rung 12 (16 + 48 + fixb,
   * one vector more: the ring, or with fused zeroing and all but the
   * largest fixb the next class) */
  static const struct {
    mdr_zero_strategy zero;
    size_t fixb;
    uint64_t rung12; /* rung 12 inline */
  } lads[] = {{MDR_ZERO_MEMSET, FIXB, 0},
              {MDR_ZERO_FUSED, FIXB, 1},
              {MDR_ZERO_FUSED, FIXB_LARGE, 1},
              {MDR_ZERO_FUSED, FIXB_XL, 1},
              {MDR_ZERO_FUSED, FIXB_XXL, 1},
              {MDR_ZERO_FUSED, FIXB_XXXL, 0}};
  for (size_t li = 0; li < sizeof lads / sizeof lads[0]; li++) {
    const size_t fixb = lads[li].fixb;
    world_init(&w, b, 0);
    mdr_dptr fixed = 0;
    cr_assert_eq(mdr_backend_alloc(b, fixb, &fixed), MDR_OK);
    mdr_step_input in = {.name = "fixed", .elem_bytes = 1, .shape = MDR_INPUT_FIXED, .max_rows = fixb,
                         .dest = MDR_INPUT_TO_DEVICE, .address = fixed};
    const size_t ladder[] = {8, 12};
    o = world_options(&w, MDR_GRAPH_LADDER, lads[li].zero);
    o.inputs = &in;
    o.n_inputs = 1;
    o.ladder = ladder;
    o.ladder_len = 2;
    world_cache(&w, &o, NULL);
    static unsigned char fv[FIXB_XXXL], got[FIXB_XXXL];
    for (size_t i = 0; i < fixb; i++) fv[i] = (unsigned char)(3 * i + 1);
    const size_t ts[] = {5, 9, 8, 12, 1};
    const uint64_t inl[] = {1, lads[li].rung12, 1, lads[li].rung12, 1};
    for (int k = 0; k < 5; k++) {
      mdr_graph_stats s0, s1;
      cr_assert_eq(mdr_graph_cache_stats(w.c, &s0), MDR_OK);
      step_values v;
      make_values(&rng, &v, ts[k], 1);
      cr_assert_eq(mdr_backend_fill(b, fixed, POISON, fixb), MDR_OK);
      cr_assert_eq(mdr_backend_fill(b, mdr_arena_token_ids(w.a), POISON, mdr_arena_token_ids_bytes(w.a)), MDR_OK);
      fv[0] = (unsigned char)k;
      const void *vals[2] = {v.ids, fv};
      cr_assert_eq(mdr_graph_cache_step_inputs(w.c, vals, 2, ts[k], 1), MDR_OK, "%s", mdr_backend_last_error(b));
      cr_assert_eq(mdr_backend_synchronize(b, w.s), MDR_OK);
      read_back(b, got, fixed, fixb);
      cr_assert_eq(memcmp(got, fv, fixb), 0, "ladder %zu t %zu: the fixed input", li, ts[k]);
      unsigned char ids[M * 4 + 256];
      const size_t idb = mdr_arena_token_ids_bytes(w.a);
      read_back(b, ids, mdr_arena_token_ids(w.a), idb);
      size_t g = 0;
      cr_assert_eq(mdr_graph_cache_graph_tokens(w.c, ts[k], &g), MDR_OK);
      expect_bytes(ids, idb, v.ids, 4 * ts[k], 4 * g, 4, PAD_ID, "token_ids", "ladder");
      cr_assert_eq(mdr_graph_cache_stats(w.c, &s1), MDR_OK);
      cr_assert_eq(s1.inline_steps - s0.inline_steps, inl[k], "ladder %zu t %zu (rung %zu)", li, ts[k], g);
    }
    mdr_backend_free(b, fixed);
    world_fini(&w);
  }
  mdr_backend_destroy(b);
}

/* ---- the backend's two slots, without a cache -------------------------------------------- */

ParameterizedTestParameters(stage_inline, an_inline_node_takes_each_update_and_launches_keep_their_own) {
  static tb_kind kinds[] = {TB_HOST, TB_CUDA};
  return cr_make_param_array(tb_kind, kinds, 2);
}

/* acc[0] += sum (i + 1) * ids[i] over n ids, acc[1] += n, when the stream
 * reaches it (the host backend's twin of tb_cuda_accumulate). */
typedef struct host_acc {
  const uint32_t *ids;
  size_t n;
  uint64_t *acc;
} host_acc;

static mdr_status host_accumulate(mdr_backend *b, void *arg) {
  (void)b;
  const host_acc *h = arg;
  for (size_t i = 0; i < h->n; i++) h->acc[0] += (uint64_t)(i + 1) * h->ids[i];
  h->acc[1] += h->n;
  return MDR_OK;
}

static void accumulate(tb_kind kind, mdr_backend *b, mdr_stream s, mdr_dptr ids, size_t n, mdr_dptr acc) {
  if (kind == TB_HOST) {
    const host_acc h = {(const uint32_t *)(uintptr_t)ids, n, (uint64_t *)(uintptr_t)acc};
    cr_assert_eq(mdr_be_host_fn(b, host_accumulate, &h, sizeof h, s), MDR_OK);
    return;
  }
#if defined(MDR_HAVE_CUDA)
  cr_assert_eq(tb_cuda_accumulate(s, (const uint32_t *)(uintptr_t)ids, n, (uint64_t *)(uintptr_t)acc), 0);
#endif
}

/* Write an image: header (t, copy, 1, 1), t ids, pad to copy. */
static void put_image(mdr_stage_inline_launch *l, uint32_t t, uint32_t copy, uint32_t base) {
  unsigned char *img = (unsigned char *)l->param + l->slot_offset;
  const mdr_stage_header h = {t, copy, 1, 1};
  memcpy(img, &h, sizeof h);
  for (uint32_t i = 0; i < copy; i++) {
    const uint32_t id = i < t ? base + i : PAD_ID;
    memcpy(img + MDR_STAGE_HEADER_BYTES + 4 * i, &id, 4);
  }
}

/* Hold the stream so that what is enqueued next queues behind it: the
 * host backend held, on the GPU a 20 ms sleeping kernel ahead. */
static void hold_stream(tb_kind kind, mdr_backend *b, mdr_stream s) {
  if (kind == TB_HOST) {
    cr_assert_eq(mdr_backend_host_hold(b, 1), MDR_OK);
  } else {
#if defined(MDR_HAVE_CUDA)
    cr_assert_eq(tb_cuda_sleep(s, 20ull * 1000 * 1000), 0);
#else
    (void)s;
#endif
  }
}

/* One launch of an inline node at t of `copy` tokens, alone: the ids and
 * `buf` (buf_bytes) poisoned, the image written and the node updated; then
 * the ids (t of them, padded to copy, nothing past it) and the token count
 * checked. The sequence count is returned for the caller's checks. */
static uint32_t launch_alone(mdr_backend *b, mdr_stream s, void *x, void *node, mdr_stage_inline_launch *l,
                             mdr_dptr ids, mdr_dptr counts, mdr_dptr buf, size_t buf_bytes, uint32_t t,
                             uint32_t copy) {
  cr_assert_eq(mdr_backend_fill(b, ids, POISON, 256), MDR_OK);
  cr_assert_eq(mdr_backend_fill(b, buf, POISON, buf_bytes), MDR_OK);
  put_image(l, t, copy, 100 * t);
  cr_assert_eq(mdr_be_fused_inline_update(b, x, node, l), MDR_OK, "%s", mdr_backend_last_error(b));
  cr_assert_eq(mdr_be_graph_launch(b, x, s), MDR_OK);
  cr_assert_eq(mdr_backend_synchronize(b, s), MDR_OK);
  uint32_t got[64], c[2];
  read_back(b, got, ids, sizeof got);
  read_back(b, c, counts, 8);
  for (uint32_t i = 0; i < copy; i++) cr_assert_eq(got[i], i < t ? 100 * t + i : (uint32_t)PAD_ID, "t %u id %u", t, i);
  cr_assert_eq(got[copy], POISON * 0x01010101u, "t %u: nothing past the copy", t);
  cr_assert_eq(c[0], t);
  return c[1];
}

/* The inline launch captured as a node (zeroing the rows of a buffer of
 * buf_bytes, and the stage): each update's image is what the next launch
 * copies, and counts and rows follow it; the zeroing is the launch's own.
 * Launches enqueued before an update keep the image they were launched
 * with (the host backend held; on the GPU a sleeping kernel ahead). On
 * CUDA the launch takes the list form when the rows' chunks fit it, the
 * static form (the plan by value, about 1.2 KiB) otherwise: `list` says
 * which the caller expects. */
static void inline_node_case(tb_kind *kind, size_t buf_bytes, int list) {
  enum { COPY = 6, STEPS = 40 };
  const size_t BUF = buf_bytes, ROWS = COPY * (buf_bytes / 8);
  mdr_backend *b = tb_backend(*kind);
  mdr_stream s = tb_stream(b);
  mdr_dptr ids = 0, counts = 0, buf = 0, acc = 0;
  cr_assert_eq(mdr_backend_alloc(b, 256, &ids), MDR_OK);
  cr_assert_eq(mdr_backend_alloc(b, 256, &counts), MDR_OK);
  cr_assert_eq(mdr_backend_alloc(b, BUF, &buf), MDR_OK);
  cr_assert_eq(mdr_backend_alloc(b, 16, &acc), MDR_OK);
  cr_assert_eq(mdr_backend_fill(b, acc, 0, 16), MDR_OK);
  const mdr_zero_seg seg = {.ptr = buf, .bytes = BUF, .a = BUF / 8, .b = 8, .rule = MDR_RULE_ROWS};
  mdr_stage_desc st = {.token_ids = ids, .count_out = counts, .flags = MDR_STAGE_FETCH | MDR_STAGE_INLINE,
                       .copy_sequences = 1};
  mdr_stage_inline_launch l;
  void *g = NULL, *x = NULL, *node = NULL;
  cr_assert_eq(mdr_be_capture_begin(b, s), MDR_OK);
  cr_assert_eq(mdr_be_fused_inline_launch(b, &seg, 1, COPY, &st, s, &node, &l), MDR_OK, "%s",
               mdr_backend_last_error(b));
  cr_assert_eq(mdr_be_capture_end(b, s, &g), MDR_OK);
  cr_assert_not_null(node);
  cr_assert_eq(l.slot_offset % 16, 0);
  cr_assert_leq(l.slot_offset + MDR_STAGE_INLINE_BYTES, l.param_bytes);
  if (*kind == TB_CUDA) {
    const size_t list_at = 8 * MDR_ZERO_LIST_INLINE_MAX + sizeof(mdr_stage_desc) + 16;
    if (list)
      cr_assert_eq(l.slot_offset, list_at, "%zu bytes of rows: the list form", ROWS);
    else
      cr_assert_lt(l.param_bytes, 2048, "%zu bytes of rows: the static form", ROWS);
  }
  cr_assert_eq(mdr_be_graph_instantiate(b, g, NULL, &x), MDR_OK);
  /* one launch at a time: its ids, counts and rows */
  unsigned char *z = malloc(BUF);
  cr_assert_not_null(z);
  for (uint32_t t = 1; t <= COPY; t += 2) {
    cr_assert_eq(launch_alone(b, s, x, node, &l, ids, counts, buf, BUF, t, COPY), 1);
    read_back(b, z, buf, BUF);
    cr_assert_eq(tb_first_not(z, ROWS, 0), ROWS, "the rows of %d tokens cleared", COPY);
    cr_assert_eq(tb_first_not(z + ROWS, BUF - ROWS, POISON), BUF - ROWS, "nothing past them");
  }
  free(z);
  /* queued launches: each keeps the image it was launched with */
  hold_stream(*kind, b, s);
  uint64_t want_sum = 0;
  for (uint32_t k = 0; k < STEPS; k++) {
    const uint32_t t = 1 + k % COPY;
    put_image(&l, t, COPY, 1000 * (k + 1));
    for (uint32_t i = 0; i < COPY; i++) want_sum += (uint64_t)(i + 1) * (i < t ? 1000 * (k + 1) + i : PAD_ID);
    cr_assert_eq(mdr_be_fused_inline_update(b, x, node, &l), MDR_OK);
    cr_assert_eq(mdr_be_graph_launch(b, x, s), MDR_OK);
    accumulate(*kind, b, s, ids, COPY, acc); /* what this launch left in token_ids */
  }
  if (*kind == TB_HOST) {
    uint64_t none[2];
    read_back(b, none, acc, 16);
    cr_assert_eq(none[1], 0, "held: nothing ran");
    cr_assert_eq(mdr_backend_host_hold(b, 0), MDR_OK);
  }
  cr_assert_eq(mdr_backend_synchronize(b, s), MDR_OK);
  uint64_t sums[2];
  read_back(b, sums, acc, 16);
  cr_assert_eq(sums[1], (uint64_t)STEPS * COPY);
  cr_assert_eq(sums[0], want_sum, "a queued launch read an image not its own");
  uint32_t got[64], c[2];
  read_back(b, got, ids, sizeof got);
  read_back(b, c, counts, 8);
  const uint32_t last_t = 1 + (STEPS - 1) % COPY;
  cr_assert_eq(c[0], last_t, "the last launch's count");
  for (uint32_t i = 0; i < last_t; i++) cr_assert_eq(got[i], 1000 * STEPS + i, "the last launch's ids");
  mdr_be_exec_destroy(b, x);
  mdr_be_graph_destroy(b, g);
  mdr_backend_free(b, acc);
  mdr_backend_free(b, buf);
  mdr_backend_free(b, counts);
  mdr_backend_free(b, ids);
  mdr_backend_stream_destroy(b, s);
  mdr_backend_destroy(b);
}

/* A small plan (one chunk of rows): on CUDA the list form. */
ParameterizedTest(tb_kind *kind, stage_inline, an_inline_node_takes_each_update_and_launches_keep_their_own) {
  inline_node_case(kind, 512, 1);
}

ParameterizedTestParameters(stage_inline, an_inline_node_past_the_list_form_keeps_the_static_form) {
  static tb_kind kinds[] = {TB_HOST, TB_CUDA};
  return cr_make_param_array(tb_kind, kinds, 2);
}

/* Rows of MDR_ZERO_LIST_INLINE_MAX chunks and a byte (the list form's
 * limit passed by one): on CUDA the static form, the same bytes and ids. */
ParameterizedTest(tb_kind *kind, stage_inline, an_inline_node_past_the_list_form_keeps_the_static_form) {
  const size_t row = (MDR_ZERO_LIST_INLINE_MAX * MDR_ZERO_CHUNK + 6) / 6; /* 6 rows: past the limit */
  inline_node_case(kind, 8 * row, 0);
}

ParameterizedTestParameters(stage_inline, an_inline_node_at_the_list_form_limit_takes_the_list) {
  static tb_kind kinds[] = {TB_HOST, TB_CUDA};
  return cr_make_param_array(tb_kind, kinds, 2);
}

/* Rows of exactly MDR_ZERO_LIST_INLINE_MAX chunks: on CUDA the list form. */
ParameterizedTest(tb_kind *kind, stage_inline, an_inline_node_at_the_list_form_limit_takes_the_list) {
  inline_node_case(kind, 8 * (MDR_ZERO_LIST_INLINE_MAX * MDR_ZERO_CHUNK / 6), 1); /* 6 rows: at most the limit */
}

/* ---- the table form: the plan from a plan table ----------------------------------------- */

ParameterizedTestParameters(stage_inline, the_table_form_clears_exactly_the_plan_and_serves_each_image) {
  static tb_kind kinds[] = {TB_HOST, TB_CUDA};
  return cr_make_param_array(tb_kind, kinds, 2);
}

/* Three rules (rows at odd offsets and row sizes, a fixed range) inside one
 * poisoned buffer, and rows of 1.5 MiB in another (9 MiB at the count: a
 * plan past the list form, so that the CUDA backend takes the table form);
 * their plan table up to count 8 in the stage; the inline node captured at
 * count 6. Each launch clears exactly the plan's bytes at 6 (every byte
 * around them keeps its poison) and copies its own image's ids, one launch
 * at a time and STEPS of them queued (the host backend held, or a sleeping
 * kernel ahead on the GPU). */
ParameterizedTest(tb_kind *kind, stage_inline, the_table_form_clears_exactly_the_plan_and_serves_each_image) {
  enum { COPY = 6, TABLE_MAX = 8, BUF = 65536, STEPS = 48, NR = 4 };
  const size_t ROW = (size_t)3 << 19, BIG = TABLE_MAX * ROW, BIG_ZERO = COPY * ROW;
  mdr_backend *b = tb_backend(*kind);
  mdr_stream s = tb_stream(b);
  mdr_dptr ids = 0, counts = 0, buf = 0, big = 0, acc = 0, table = 0;
  cr_assert_eq(mdr_backend_alloc(b, 256, &ids), MDR_OK);
  cr_assert_eq(mdr_backend_alloc(b, 256, &counts), MDR_OK);
  cr_assert_eq(mdr_backend_alloc(b, BUF, &buf), MDR_OK);
  cr_assert_eq(mdr_backend_alloc(b, BIG, &big), MDR_OK);
  cr_assert_eq(mdr_backend_alloc(b, 16, &acc), MDR_OK);
  cr_assert_eq(mdr_backend_fill(b, acc, 0, 16), MDR_OK);
  const mdr_zero_seg rules[NR] = {
      {.ptr = buf + 3, .bytes = 1001 * 16, .a = 1001, .b = 16, .rule = MDR_RULE_ROWS},
      {.ptr = buf + 20005, .bytes = 4099 * 10, .a = 4099, .b = 10, .rule = MDR_RULE_ROWS},
      {.ptr = buf + 61001, .bytes = 777, .rule = MDR_RULE_FIXED},
      {.ptr = big, .bytes = BIG, .a = ROW, .b = TABLE_MAX, .rule = MDR_RULE_ROWS},
  };
  cr_assert_gt(mdr_zero_chunks(BIG_ZERO), MDR_ZERO_LIST_INLINE_MAX, "a plan past the list form");
  static unsigned char want[BUF];
  memset(want, POISON, BUF);
  for (int i = 0; i < NR - 1; i++)
    memset(want + (rules[i].ptr - buf), 0, (size_t)mdr_zero_seg_bytes(&rules[i], COPY));
  unsigned char *got_big = malloc(BIG);
  cr_assert_not_null(got_big);
  const size_t words = (size_t)mdr_plan_table_words(NR, TABLE_MAX);
  uint64_t *w = malloc(words * 8);
  cr_assert_not_null(w);
  mdr_plan_table_fill(rules, NR, TABLE_MAX, w);
  cr_assert_eq(mdr_backend_alloc(b, words * 8, &table), MDR_OK);
  cr_assert_eq(mdr_backend_copy_h2d(b, table, w, words * 8), MDR_OK);
  free(w);
  mdr_stage_desc st = {.token_ids = ids, .count_out = counts, .flags = MDR_STAGE_FETCH | MDR_STAGE_INLINE,
                       .copy_sequences = 1, .table = table, .table_max = TABLE_MAX};
  mdr_stage_inline_launch l;
  void *g = NULL, *x = NULL, *node = NULL;
  cr_assert_eq(mdr_be_capture_begin(b, s), MDR_OK);
  cr_assert_eq(mdr_be_fused_inline_launch(b, rules, NR, COPY, &st, s, &node, &l), MDR_OK, "%s",
               mdr_backend_last_error(b));
  cr_assert_eq(mdr_be_capture_end(b, s, &g), MDR_OK);
  cr_assert_lt(l.param_bytes, 300, "the table form's parameters");
  cr_assert_eq(l.slot_offset % 16, 0);
  cr_assert_leq(l.slot_offset + MDR_STAGE_INLINE_BYTES, l.param_bytes);
  cr_assert_eq(mdr_be_graph_instantiate(b, g, NULL, &x), MDR_OK);
  unsigned char *got_buf = malloc(BUF);
  cr_assert_not_null(got_buf);
  /* one launch at a time */
  for (uint32_t t = 1; t <= COPY; t += 2) {
    cr_assert_eq(mdr_backend_fill(b, big, POISON, BIG), MDR_OK);
    launch_alone(b, s, x, node, &l, ids, counts, buf, BUF, t, COPY);
    read_back(b, got_buf, buf, BUF);
    for (size_t i = 0; i < BUF; i++) cr_assert_eq(got_buf[i], want[i], "t %u: byte %zu", t, i);
    read_back(b, got_big, big, BIG);
    cr_assert_eq(tb_first_not(got_big, BIG_ZERO, 0), BIG_ZERO, "t %u: the large rows at the count cleared", t);
    cr_assert_eq(tb_first_not(got_big + BIG_ZERO, BIG - BIG_ZERO, POISON), BIG - BIG_ZERO, "t %u: nothing past them",
                 t);
  }
  /* STEPS queued launches, the buffers poisoned before them */
  cr_assert_eq(mdr_backend_fill(b, buf, POISON, BUF), MDR_OK);
  cr_assert_eq(mdr_backend_fill(b, big, POISON, BIG), MDR_OK);
  hold_stream(*kind, b, s);
  uint64_t want_sum = 0;
  for (uint32_t k = 0; k < STEPS; k++) {
    const uint32_t t = 1 + (k * 5) % COPY;
    put_image(&l, t, COPY, 7000 * (k + 1) + 13 * t);
    for (uint32_t i = 0; i < COPY; i++)
      want_sum += (uint64_t)(i + 1) * (i < t ? 7000 * (k + 1) + 13 * t + i : PAD_ID);
    cr_assert_eq(mdr_be_fused_inline_update(b, x, node, &l), MDR_OK);
    cr_assert_eq(mdr_be_graph_launch(b, x, s), MDR_OK);
    accumulate(*kind, b, s, ids, COPY, acc);
  }
  if (*kind == TB_HOST) cr_assert_eq(mdr_backend_host_hold(b, 0), MDR_OK);
  cr_assert_eq(mdr_backend_synchronize(b, s), MDR_OK);
  uint64_t sums[2];
  read_back(b, sums, acc, 16);
  cr_assert_eq(sums[1], (uint64_t)STEPS * COPY);
  cr_assert_eq(sums[0], want_sum, "a queued launch read an image not its own");
  read_back(b, got_buf, buf, BUF);
  for (size_t i = 0; i < BUF; i++) cr_assert_eq(got_buf[i], want[i], "queued: byte %zu", i);
  read_back(b, got_big, big, BIG);
  cr_assert_eq(tb_first_not(got_big, BIG_ZERO, 0), BIG_ZERO, "queued: the large rows cleared");
  cr_assert_eq(tb_first_not(got_big + BIG_ZERO, BIG - BIG_ZERO, POISON), BIG - BIG_ZERO, "queued: nothing past them");
  free(got_buf);
  free(got_big);
  mdr_be_exec_destroy(b, x);
  mdr_be_graph_destroy(b, g);
  mdr_backend_free(b, big);
  mdr_backend_free(b, table);
  mdr_backend_free(b, acc);
  mdr_backend_free(b, buf);
  mdr_backend_free(b, counts);
  mdr_backend_free(b, ids);
  mdr_backend_stream_destroy(b, s);
  mdr_backend_destroy(b);
}

#if defined(MDR_HAVE_CUDA)
/* The descriptor tests' plan (two rules, one of rows and one fixed, no
 * device memory behind them: nothing is launched) and inline stage. */
static const mdr_zero_seg k_desc_rules[2] = {
    {.ptr = 0x100000, .bytes = 64 * 1000, .a = 1000, .b = 64, .rule = MDR_RULE_ROWS},
    {.ptr = 0x200003, .bytes = 5000, .rule = MDR_RULE_FIXED},
};

/* The same shape, its rows 512 KiB each: at count 20 a plan of 641
 * chunks, past the list form's MDR_ZERO_LIST_INLINE_MAX. */
static const mdr_zero_seg k_desc_long_rules[2] = {
    {.ptr = 0x100000, .bytes = (uint64_t)524288 * 1000, .a = 524288, .b = 1000, .rule = MDR_RULE_ROWS},
    {.ptr = (uint64_t)1 << 40, .bytes = 5000, .rule = MDR_RULE_FIXED},
};

static mdr_stage_desc desc_stage(void) {
  return (mdr_stage_desc){.token_ids = 0x300000, .count_out = 0x310000, .flags = MDR_STAGE_FETCH | MDR_STAGE_INLINE,
                          .copy_sequences = 1};
}
#endif

#if defined(MDR_HAVE_CUDA)
/* The CUDA inline launch as described (no device needed: nothing is
 * launched): for a plan past the list form, given a plan table that serves
 * the count, the table form, its parameters the table parameters (the
 * stage first, table included) and the image right after them, under 300
 * bytes; without one, or past the table's counts, the static form (the
 * plan by value, over 1 KiB). TABLE itself is refused. */
Test(stage_inline, the_cuda_inline_launch_takes_the_table_form_given_a_table) {
  const mdr_zero_seg *rules = k_desc_long_rules;
  mdr_stage_desc st = desc_stage();
  mdr_stage_inline_launch plain, tab;
  cr_assert_eq(mdr_cuda_zero_inline_launch(rules, 2, 20, &st, 132, &plain), 0);
  cr_assert_gt(plain.param_bytes, 1024, "the static form carries the plan");
  cr_assert_lt(plain.param_bytes, 2048, "the static form, not the list");
  cr_assert_eq(plain.slot_offset + MDR_STAGE_INLINE_BYTES, plain.param_bytes);
  st.table = 0x400000;
  st.table_max = 24;
  cr_assert_eq(mdr_cuda_zero_inline_launch(rules, 2, 20, &st, 132, &tab), 0);
  cr_assert_lt(tab.param_bytes, 300);
  cr_assert_eq(tab.slot_offset % 16, 0);
  cr_assert_eq(tab.slot_offset + MDR_STAGE_INLINE_BYTES, tab.param_bytes, "the image ends the parameters");
  cr_assert_geq(tab.slot_offset, sizeof(mdr_stage_desc) + 16, "the stage, t, n and the flags before it");
  cr_assert_neq(tab.func, plain.func);
  mdr_stage_desc in;
  memcpy(&in, tab.param, sizeof in);
  cr_assert_eq(in.table, st.table);
  cr_assert_eq(in.table_max, st.table_max);
  cr_assert_eq(in.flags, MDR_STAGE_FETCH | MDR_STAGE_INLINE, "TABLE is not set");
  const uint64_t chunks = mdr_zero_chunks((uint64_t)20 * 524288) + mdr_zero_chunks(5000);
  cr_assert_gt(chunks, MDR_ZERO_LIST_INLINE_MAX, "a plan past the list form");
  cr_assert_eq(tab.grid[0], chunks + 1, "a block per chunk at the count, and the stage block");
  cr_assert_eq(tab.grid[1] * tab.grid[2], 1);
  cr_assert_eq(tab.block[0], 256, "one block of threads (MDR_STAGE_BLOCK)");
  mdr_stage_inline_launch past;
  st.table_max = 19;
  cr_assert_eq(mdr_cuda_zero_inline_launch(rules, 2, 20, &st, 132, &past), 0);
  cr_assert_eq(past.param_bytes, plain.param_bytes, "a table that does not reach the count: the form without one");
  cr_assert_eq(past.func, plain.func);
  st.table_max = 24;
  st.flags |= MDR_STAGE_TABLE;
  cr_assert_neq(mdr_cuda_zero_inline_launch(rules, 2, 20, &st, 132, &past), 0, "TABLE is DYNAMIC's");
}
#endif

#if defined(MDR_HAVE_CUDA)
/* The CUDA inline launch without a plan table (no device needed): a plan
 * whose chunks at the count number at most MDR_ZERO_LIST_INLINE_MAX takes
 * the list form: the words of mdr_zero_list_build in order, the rest of
 * the list zero, then the stage, the count, the chunks and the flags
 * (FETCH | INLINE), then the image, zeroed; a block per chunk and the stage
 * block. One chunk more, or a chunk whose address does not encode, takes
 * the static form (the plan by value, about 1.2 KiB) and another kernel. */
Test(stage_inline, the_cuda_inline_launch_takes_the_list_form_for_a_small_plan) {
  const mdr_stage_desc st = desc_stage();
  const size_t list_at = 8 * MDR_ZERO_LIST_INLINE_MAX + sizeof(mdr_stage_desc) + 16;
  static mdr_stage_inline_launch l, big, far;
  memset(&l, 0xAB, sizeof l);
  cr_assert_eq(mdr_cuda_zero_inline_launch(k_desc_rules, 2, 20, &st, 132, &l), 0);
  cr_assert_eq(l.slot_offset, list_at);
  cr_assert_eq(l.param_bytes, list_at + MDR_STAGE_INLINE_BYTES);
  mdr_zero_seg fixed[2];
  uint64_t words[8];
  const uint32_t k = mdr_zero_list_build(fixed, (uint32_t)mdr_zero_plan_at(k_desc_rules, 2, 20, fixed), words, 8);
  cr_assert_eq(k, mdr_zero_chunks(20 * 1000) + mdr_zero_chunks(5000), "the plan's chunks at 20");
  const uint64_t *p = l.param;
  for (uint32_t i = 0; i < MDR_ZERO_LIST_INLINE_MAX; i++)
    cr_assert_eq(p[i], i < k ? words[i] : 0, "word %u", i);
  mdr_stage_desc in;
  memcpy(&in, p + MDR_ZERO_LIST_INLINE_MAX, sizeof in);
  cr_assert_eq(memcmp(&in, &st, sizeof in), 0, "the stage as given");
  const unsigned char *after = (const unsigned char *)(p + MDR_ZERO_LIST_INLINE_MAX) + sizeof in;
  uint64_t tokens;
  uint32_t n, flags;
  memcpy(&tokens, after, 8);
  memcpy(&n, after + 8, 4);
  memcpy(&flags, after + 12, 4);
  cr_assert_eq(tokens, 20);
  cr_assert_eq(n, k);
  cr_assert_eq(flags, MDR_STAGE_FETCH | MDR_STAGE_INLINE);
  cr_assert_eq(tb_first_not((const unsigned char *)l.param + l.slot_offset, MDR_STAGE_INLINE_BYTES, 0),
               MDR_STAGE_INLINE_BYTES, "image zeroed");
  cr_assert_eq(l.grid[0], k + 1, "a block per chunk and the stage block");
  cr_assert_eq(l.grid[1] * l.grid[2], 1);
  cr_assert_eq(l.block[0], 256);
  /* at the limit: the list; one chunk past it: the static form */
  for (int past = 0; past < 2; past++) {
    const uint64_t bytes = MDR_ZERO_LIST_INLINE_MAX * MDR_ZERO_CHUNK + (uint64_t)past;
    const mdr_zero_seg one = {.ptr = 0x100000, .bytes = bytes, .rule = MDR_RULE_FIXED};
    memset(&big, 0xAB, sizeof big);
    cr_assert_eq(mdr_cuda_zero_inline_launch(&one, 1, 20, &st, 132, &big), 0);
    if (!past) {
      cr_assert_eq(big.func, l.func, "%" PRIu64 " bytes: the list form", bytes);
      cr_assert_eq(big.grid[0], MDR_ZERO_LIST_INLINE_MAX + 1);
    } else {
      cr_assert_neq(big.func, l.func, "%" PRIu64 " bytes: not the list form", bytes);
      cr_assert_lt(big.param_bytes, 2048, "the static form");
      cr_assert_eq(big.slot_offset + MDR_STAGE_INLINE_BYTES, big.param_bytes);
    }
  }
  /* an address past the list's 48 bits: the static form */
  const mdr_zero_seg high = {.ptr = (uint64_t)1 << 50, .bytes = 4096, .rule = MDR_RULE_FIXED};
  cr_assert_eq(mdr_cuda_zero_inline_launch(&high, 1, 20, &st, 132, &far), 0);
  cr_assert_neq(far.func, l.func, "an address that does not encode: not the list form");
  cr_assert_lt(far.param_bytes, 2048);
}
#endif

/* The last inline update's table room holds the count's input table as
 * the launch's descriptor has it in device memory (each declared input's
 * entry, offsets in that count's image), the rest of the room zeroed. */
static void expect_room_table(mdr_backend *fb, const mdr_stage_desc *st, const char *what) {
  const mdr_stage_inline_launch *l = fault_backend_last_inline_update(fb);
  cr_assert_neq(l->table_offset, 0, "%s: a larger class keeps the table's room", what);
  cr_assert_geq(st->n_inputs, 1);
  cr_assert_neq(st->inputs, 0);
  mdr_stage_input want[MDR_STAGE_INLINE_TABLE];
  memset(want, 0, sizeof want);
  read_back(fb, want, st->inputs, st->n_inputs * sizeof(mdr_stage_input));
  const unsigned char *room = (const unsigned char *)l->param + l->table_offset;
  for (uint32_t i = 0; i < st->n_inputs; i++) {
    mdr_stage_input got;
    memcpy(&got, room + i * sizeof got, sizeof got);
    cr_assert_neq(got.dst, 0, "%s: input %u written in the room", what, i);
    cr_assert_eq(memcmp(&got, &want[i], sizeof got), 0, "%s: input %u's entry as in device memory", what, i);
  }
  const size_t used = st->n_inputs * sizeof(mdr_stage_input);
  cr_assert_eq(tb_first_not(room + used, INLINE_TABLE_BYTES - used, 0), INLINE_TABLE_BYTES - used,
               "%s: the rest of the room zeroed", what);
}

/* The cache's inline captures of a larger-class count (fused zeroing) pass
 * its plan table, which reaches the largest such count, and each count's
 * image bytes. With step inputs declared, a count whose image fits the
 * small class takes the table too (mdr_stage_inline_class: the larger
 * classes carry the input table in their parameters, and each step's
 * update carries the count's table there); an ids-only cache's
 * small counts keep the static form (no table), as memset zeroing's
 * stage-only inline launch does. */
Test(stage_inline, the_cache_passes_its_plan_table_to_large_class_captures) {
  for (int z = 0; z < 2; z++) {
    mdr_backend *host = NULL, *fb = NULL;
    world w;
    host = tb_backend(TB_HOST);
    cr_assert_eq(fault_backend_create(host, &fb), MDR_OK);
    world_init(&w, fb, 1);
    mdr_graph_cache_options o = world_options(&w, MDR_GRAPH_EXACT, z ? MDR_ZERO_MEMSET : MDR_ZERO_FUSED);
    world_cache(&w, &o, NULL);
    uint64_t rng = 77;
    /* memset zeroing: the small class's counts; fused: the larger classes'
     * too, up to the counts with an inline layout */
    const size_t top = largest_inline_of(1, !z);
    cr_assert_geq(top, 2);
    cr_assert_leq(image_bytes(1, 2), MDR_STAGE_INLINE_BYTES, "count 2's image fits the small class");
    if (!z) cr_assert_gt(top, largest_inline(1), "fused: counts in the larger classes");
    cr_assert_eq(step_counted(&w, &rng, 2, 1), 1, "an inline step");
    mdr_stage_desc st = fault_backend_last_inline_stage(fb);
    cr_assert_eq(st.flags, MDR_STAGE_FETCH | MDR_STAGE_INLINE);
    cr_assert_eq(st.inline_bytes, image_bytes(1, 2), "the count's image bytes");
    if (z) {
      cr_assert_eq(st.table, 0, "memset zeroing: the small class, no table");
    } else {
      cr_assert_neq(st.table, 0, "fused zeroing with inputs: the plan table, for a larger class");
      cr_assert_eq(st.table_max, top, "up to the largest inline count");
      cr_assert_eq(mdr_stage_inline_class(&st, 1), MDR_STAGE_INLINE_LARGE_BYTES, "the large class");
    }
    if (!z) expect_room_table(fb, &st, "count 2");
    cr_assert_eq(step_counted(&w, &rng, top, 1), 1, "the largest inline count");
    st = fault_backend_last_inline_stage(fb);
    cr_assert_eq(st.inline_bytes, image_bytes(1, top));
    if (z) {
      cr_assert_eq(st.table, 0, "memset zeroing: no table");
      cr_assert_eq(fault_backend_last_inline_update(fb)->table_offset, 0, "the small class: no table's room");
    } else {
      cr_assert_gt(image_bytes(1, top), MDR_STAGE_INLINE_BYTES, "a larger-class count");
      cr_assert_neq(st.table, 0, "fused zeroing, a larger-class count: the plan table");
      cr_assert_eq(st.table_max, top, "up to the largest larger-class count");
      expect_room_table(fb, &st, "the largest inline count");
    }
    fault_world_fini(&w, fb, host);
  }
  /* ids only, fused zeroing: a small count keeps the static form */
  mdr_backend *host = tb_backend(TB_HOST), *fb = NULL;
  cr_assert_eq(fault_backend_create(host, &fb), MDR_OK);
  world w;
  world_init(&w, fb, 0);
  mdr_graph_cache_options o = world_options(&w, MDR_GRAPH_EXACT, MDR_ZERO_FUSED);
  world_cache(&w, &o, NULL);
  uint64_t rng = 78;
  cr_assert_eq(step_counted(&w, &rng, 2, 0), 1, "an inline step");
  const mdr_stage_desc st = fault_backend_last_inline_stage(fb);
  cr_assert_eq(st.n_inputs, 0);
  cr_assert_eq(st.table, 0, "ids only: the small class, no table");
  cr_assert_eq(mdr_stage_inline_class(&st, 0), MDR_STAGE_INLINE_BYTES);
  fault_world_fini(&w, fb, host);
}

/* The host backend's slots refuse what an inline launch is not: another
 * stage, a node asked outside a capture, a node that is not an inline
 * fused node, a launch that is not the host's; nothing is run. Holding a
 * backend that is not the host backend is unsupported. */
Test(stage_inline, the_host_inline_slots_refuse_what_they_cannot_serve) {
  mdr_backend *b = tb_backend(TB_HOST), *fb = NULL;
  mdr_stream s = tb_stream(b);
  mdr_dptr ids = 0, counts = 0;
  cr_assert_eq(mdr_backend_alloc(b, 256, &ids), MDR_OK);
  cr_assert_eq(mdr_backend_alloc(b, 256, &counts), MDR_OK);
  cr_assert_eq(mdr_backend_fill(b, ids, POISON, 256), MDR_OK);
  mdr_stage_desc st = {.token_ids = ids, .count_out = counts, .flags = MDR_STAGE_FETCH | MDR_STAGE_INLINE};
  mdr_stage_inline_launch l;
  void *g = NULL, *x = NULL, *node = NULL;
  const uint32_t bad_flags[] = {MDR_STAGE_FETCH, MDR_STAGE_INLINE, MDR_STAGE_FETCH | MDR_STAGE_INLINE | MDR_STAGE_ADVANCE,
                                MDR_STAGE_FETCH | MDR_STAGE_INLINE | MDR_STAGE_TABLE,
                                MDR_STAGE_INLINE | MDR_STAGE_DEVICE_IDS,
                                MDR_STAGE_FETCH | MDR_STAGE_INLINE | MDR_STAGE_DYNAMIC};
  for (size_t i = 0; i < sizeof bad_flags / sizeof bad_flags[0]; i++) {
    mdr_stage_desc bad = st;
    bad.flags = bad_flags[i];
    cr_assert_eq(mdr_be_fused_inline_launch(b, NULL, 0, 2, &bad, s, NULL, &l), MDR_ERR_INVALID_ARGUMENT,
                 "flags %#x", bad_flags[i]);
  }
  cr_assert_eq(mdr_be_fused_inline_launch(b, NULL, 0, 2, NULL, s, NULL, &l), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_be_fused_inline_launch(b, NULL, 0, 2, &st, s, &node, &l), MDR_ERR_CAPTURE, "a node outside a capture");
  cr_assert_null(node);
  unsigned char raw[256];
  read_back(b, raw, ids, sizeof raw);
  cr_assert_eq(tb_first_not(raw, sizeof raw, POISON), sizeof raw, "a refused launch ran");
  cr_assert_eq(mdr_be_capture_begin(b, s), MDR_OK);
  cr_assert_eq(mdr_be_memset_async(b, ids, 0, 1, s), MDR_OK); /* a node before it */
  cr_assert_eq(mdr_be_fused_inline_launch(b, NULL, 0, 2, &st, s, &node, &l), MDR_OK);
  cr_assert_eq(mdr_be_capture_end(b, s, &g), MDR_OK);
  cr_assert_eq(mdr_be_graph_instantiate(b, g, NULL, &x), MDR_OK);
  cr_assert_eq(mdr_be_fused_inline_update(b, x, (void *)1, &l), MDR_ERR_INVALID_ARGUMENT, "the memset node");
  cr_assert_eq(mdr_be_fused_inline_update(b, x, (void *)99, &l), MDR_ERR_INVALID_ARGUMENT, "no such node");
  mdr_stage_inline_launch other = l;
  other.param_bytes = 8;
  cr_assert_eq(mdr_be_fused_inline_update(b, x, node, &other), MDR_ERR_INVALID_ARGUMENT, "not the host's launch");
  cr_assert_eq(fault_backend_create(b, &fb), MDR_OK);
  cr_assert_eq(mdr_backend_host_hold(fb, 1), MDR_ERR_UNSUPPORTED);
  mdr_backend_destroy(fb);
  mdr_be_exec_destroy(b, x);
  mdr_be_graph_destroy(b, g);
  mdr_backend_free(b, counts);
  mdr_backend_free(b, ids);
  mdr_backend_stream_destroy(b, s);
  mdr_backend_destroy(b);
}

/* ---- the large image class ---------------------------------------------------------------- */

#if defined(MDR_HAVE_CUDA)
/* The CUDA table form's launch of an image of `bytes` (no device needed):
 * class `cls` (the table parameters, 128 bytes, room for the input table,
 * then cls bytes of image, both zeroed), a kernel other than `other`'s and the small class's, and the
 * small launch's stage (but for the image bytes), count, segments, flags,
 * grid and block. */
static void expect_table_class(const mdr_zero_seg *rules, mdr_stage_desc st, uint32_t bytes, uint32_t cls,
                               const mdr_stage_inline_launch *small, const void *other, mdr_stage_inline_launch *l) {
  st.inline_bytes = bytes;
  memset(l, 0xAB, sizeof *l);
  cr_assert_eq(mdr_cuda_zero_inline_launch(rules, 2, 20, &st, 132, l), 0, "%u bytes", bytes);
  cr_assert_eq(l->slot_offset, 128 + INLINE_TABLE_BYTES);
  cr_assert_eq(l->table_offset, 128, "%u bytes: room for the input table after the table parameters", bytes);
  cr_assert_eq(tb_first_not((const unsigned char *)l->param + 128, INLINE_TABLE_BYTES, 0), INLINE_TABLE_BYTES,
               "the table's room zeroed");
  cr_assert_eq(l->param_bytes, 128 + INLINE_TABLE_BYTES + cls, "%u bytes: the class of %u", bytes, cls);
  cr_assert_neq(l->func, small->func, "%u bytes: not the small class's kernel", bytes);
  cr_assert_neq(l->func, other, "%u bytes: not the next smaller class's kernel", bytes);
  /* the same table parameters but for the stage's image bytes */
  mdr_stage_desc in;
  memcpy(&in, l->param, sizeof in);
  cr_assert_eq(in.inline_bytes, bytes);
  in.inline_bytes = MDR_STAGE_INLINE_BYTES;
  cr_assert_eq(memcmp(&in, small->param, sizeof in), 0, "the same stage");
  cr_assert_eq(memcmp((const unsigned char *)l->param + sizeof in, (const unsigned char *)small->param + sizeof in,
                      128 - sizeof in),
               0, "the same count, segments and flags");
  const unsigned char *img = (const unsigned char *)l->param + l->slot_offset;
  cr_assert_eq(tb_first_not(img, cls, 0), cls, "image zeroed");
  cr_assert_eq(memcmp(l->grid, small->grid, sizeof l->grid), 0, "the same grid");
  cr_assert_eq(memcmp(l->block, small->block, sizeof l->block), 0);
}

/* The CUDA table form (a plan past the list form) picks the smallest
 * class that holds the image (stage->inline_bytes; no device needed): at
 * most MDR_STAGE_INLINE_BYTES (0 included) the small block, up to
 * MDR_STAGE_INLINE_LARGE_BYTES the large one, up to
 * MDR_STAGE_INLINE_XL_BYTES the extra-large one, up to
 * MDR_STAGE_INLINE_XXL_BYTES the fourth, up to MDR_STAGE_INLINE_XXXL_BYTES
 * the largest, each the table parameters (128
 * bytes), then (all but the small class) room for the input table, then
 * the image, zeroed; past it refused. The static form (no
 * table, or one short of the count) takes the small class only: a larger
 * image is refused. */
Test(stage_inline, the_cuda_inline_launch_picks_the_smallest_image_class) {
  const mdr_zero_seg *rules = k_desc_long_rules;
  mdr_stage_desc st = desc_stage();
  st.table = 0x400000;
  st.table_max = 24;
  static mdr_stage_inline_launch small, large, l;
  const uint32_t smalls[] = {0, 1, MDR_STAGE_INLINE_BYTES};
  for (size_t i = 0; i < 3; i++) {
    st.inline_bytes = smalls[i];
    memset(&small, 0xAB, sizeof small);
    cr_assert_eq(mdr_cuda_zero_inline_launch(rules, 2, 20, &st, 132, &small), 0);
    cr_assert_eq(small.slot_offset, 128, "the table parameters, then the image");
    cr_assert_eq(small.param_bytes, 128 + MDR_STAGE_INLINE_BYTES, "%u bytes: the small class", smalls[i]);
    cr_assert_eq(small.table_offset, 0, "the small class: no room for an input table");
  }
  const uint32_t larges[] = {MDR_STAGE_INLINE_BYTES + 1, 576, 1088, MDR_STAGE_INLINE_LARGE_BYTES};
  for (size_t i = 0; i < 4; i++)
    expect_table_class(rules, st, larges[i], MDR_STAGE_INLINE_LARGE_BYTES, &small, small.func, &large);
  static mdr_stage_inline_launch xl;
  const uint32_t xls[] = {MDR_STAGE_INLINE_LARGE_BYTES + 1, 2048, MDR_STAGE_INLINE_XL_BYTES};
  for (size_t i = 0; i < 3; i++) expect_table_class(rules, st, xls[i], MDR_STAGE_INLINE_XL_BYTES, &small, large.func, &xl);
  static mdr_stage_inline_launch xxl;
  const uint32_t xxls[] = {MDR_STAGE_INLINE_XL_BYTES + 1, 8400, MDR_STAGE_INLINE_XXL_BYTES};
  for (size_t i = 0; i < 3; i++) {
    expect_table_class(rules, st, xxls[i], MDR_STAGE_INLINE_XXL_BYTES, &small, xl.func, &xxl);
    cr_assert_neq(xxl.func, large.func, "%u bytes: a kernel of its own", xxls[i]);
    cr_assert_leq(xxl.param_bytes, MDR_STAGE_INLINE_PARAM_MAX);
  }
  static mdr_stage_inline_launch xxxl;
  const uint32_t xxxls[] = {MDR_STAGE_INLINE_XXL_BYTES + 1, 12592, 16784, MDR_STAGE_INLINE_XXXL_BYTES};
  for (size_t i = 0; i < 4; i++) {
    expect_table_class(rules, st, xxxls[i], MDR_STAGE_INLINE_XXXL_BYTES, &small, xxl.func, &xxxl);
    cr_assert(xxxl.func != large.func && xxxl.func != xl.func, "%u bytes: a kernel of its own", xxxls[i]);
    cr_assert_leq(xxxl.param_bytes, MDR_STAGE_INLINE_PARAM_MAX);
  }
  cr_assert_eq(xxxl.param_bytes, MDR_STAGE_INLINE_PARAM_MAX, "the largest class fills the parameter room");
  cr_assert_leq(MDR_STAGE_INLINE_PARAM_MAX, 32764, "within the 32764 bytes a kernel may take");
  st.inline_bytes = MDR_STAGE_INLINE_XXXL_BYTES + 1;
  cr_assert_neq(mdr_cuda_zero_inline_launch(rules, 2, 20, &st, 132, &l), 0, "past the largest class: refused");
  st.inline_bytes = UINT32_MAX;
  cr_assert_neq(mdr_cuda_zero_inline_launch(rules, 2, 20, &st, 132, &l), 0);
  /* without a table (the list or the static form): the small class only */
  for (int k = 0; k < 2; k++) {
    st.table = k ? 0x400000 : 0;
    st.table_max = k ? 19 : 0; /* k: a table short of the count */
    st.inline_bytes = MDR_STAGE_INLINE_BYTES;
    cr_assert_eq(mdr_cuda_zero_inline_launch(rules, 2, 20, &st, 132, &l), 0);
    cr_assert_gt(l.param_bytes, 1024, "the plan in the parameters");
    cr_assert_eq(l.slot_offset + MDR_STAGE_INLINE_BYTES, l.param_bytes);
    cr_assert_eq(l.table_offset, 0, "the static form: no room for an input table");
    st.inline_bytes = MDR_STAGE_INLINE_BYTES + 1;
    cr_assert_neq(mdr_cuda_zero_inline_launch(rules, 2, 20, &st, 132, &l), 0, "no table form: no large class");
  }
}

/* The list form (a plan of at most MDR_ZERO_LIST_INLINE_MAX chunks at the
 * count) in every class (no device needed): the same chunk list, stage
 * (but for its image bytes), count and flags, then (past the small class)
 * room for the input table, then the class's bytes of image, zeroed,
 * ending the parameters; a kernel of its own a class; past the
 * extra-large class the table form (the two largest classes), past the
 * largest refused. The larger classes need a plan table
 * that serves the count, as on the host backend (the graph cache passes
 * one for them): without one, or one short of the count, they are refused
 * though the list would hold the plan. */
Test(stage_inline, the_cuda_inline_launch_takes_the_list_form_in_every_image_class) {
  const mdr_zero_seg *rules = k_desc_rules;
  const size_t list_at = 8 * MDR_ZERO_LIST_INLINE_MAX + sizeof(mdr_stage_desc) + 16;
  mdr_stage_desc st = desc_stage();
  st.table = 0x400000;
  st.table_max = 24;
  static mdr_stage_inline_launch small, l;
  cr_assert_eq(mdr_cuda_zero_inline_launch(rules, 2, 20, &st, 132, &small), 0);
  cr_assert_eq(small.slot_offset, list_at, "with a table too: the list form");
  cr_assert_eq(small.param_bytes, list_at + MDR_STAGE_INLINE_BYTES);
  const struct {
    uint32_t bytes, cls;
  } cases[] = {{1, MDR_STAGE_INLINE_BYTES},
               {MDR_STAGE_INLINE_BYTES, MDR_STAGE_INLINE_BYTES},
               {MDR_STAGE_INLINE_BYTES + 1, MDR_STAGE_INLINE_LARGE_BYTES},
               {MDR_STAGE_INLINE_LARGE_BYTES, MDR_STAGE_INLINE_LARGE_BYTES},
               {MDR_STAGE_INLINE_LARGE_BYTES + 1, MDR_STAGE_INLINE_XL_BYTES},
               {MDR_STAGE_INLINE_XL_BYTES, MDR_STAGE_INLINE_XL_BYTES}};
  const void *funcs[3] = {small.func, NULL, NULL};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    st.inline_bytes = cases[i].bytes;
    memset(&l, 0xAB, sizeof l);
    cr_assert_eq(mdr_cuda_zero_inline_launch(rules, 2, 20, &st, 132, &l), 0, "%u bytes", cases[i].bytes);
    const size_t tab = cases[i].cls > MDR_STAGE_INLINE_BYTES ? INLINE_TABLE_BYTES : 0;
    cr_assert_eq(l.table_offset, tab ? list_at : 0, "%u bytes: the table's room after the list", cases[i].bytes);
    cr_assert_eq(tb_first_not((const unsigned char *)l.param + list_at, tab, 0), tab, "the table's room zeroed");
    cr_assert_eq(l.slot_offset, list_at + tab, "%u bytes: the list form", cases[i].bytes);
    cr_assert_eq(l.param_bytes, list_at + tab + cases[i].cls, "%u bytes: the class of %u", cases[i].bytes, cases[i].cls);
    cr_assert_leq(l.param_bytes, MDR_STAGE_INLINE_PARAM_MAX);
    const int c = cases[i].cls == MDR_STAGE_INLINE_BYTES ? 0 : cases[i].cls == MDR_STAGE_INLINE_LARGE_BYTES ? 1 : 2;
    if (!funcs[c]) funcs[c] = l.func;
    cr_assert_eq(l.func, funcs[c], "%u bytes: the class's kernel", cases[i].bytes);
    /* the list parameters as the small class's, but for the image bytes */
    mdr_stage_desc in;
    memcpy(&in, (const uint64_t *)l.param + MDR_ZERO_LIST_INLINE_MAX, sizeof in);
    cr_assert_eq(in.inline_bytes, cases[i].bytes);
    in.inline_bytes = st.inline_bytes = 0;
    cr_assert_eq(memcmp(&in, &st, sizeof in), 0, "%u bytes: the stage as given", cases[i].bytes);
    st.inline_bytes = cases[i].bytes;
    cr_assert_eq(memcmp(l.param, small.param, 8 * MDR_ZERO_LIST_INLINE_MAX), 0, "the same chunk list");
    cr_assert_eq(memcmp((const unsigned char *)l.param + list_at - 16, (const unsigned char *)small.param + list_at - 16,
                        16),
                 0, "the same count, chunks and flags");
    cr_assert_eq(tb_first_not((const unsigned char *)l.param + l.slot_offset, cases[i].cls, 0), cases[i].cls,
                 "image zeroed");
    cr_assert_eq(memcmp(l.grid, small.grid, sizeof l.grid), 0, "the same grid");
    cr_assert_eq(memcmp(l.block, small.block, sizeof l.block), 0);
  }
  cr_assert(funcs[0] != funcs[1] && funcs[1] != funcs[2] && funcs[0] != funcs[2], "a kernel a class");
  /* past the extra-large class the two largest classes take the table
   * form, though the list holds the plan */
  st.inline_bytes = MDR_STAGE_INLINE_XL_BYTES + 1;
  cr_assert_eq(mdr_cuda_zero_inline_launch(rules, 2, 20, &st, 132, &l), 0);
  cr_assert_eq(l.slot_offset, 128 + INLINE_TABLE_BYTES, "the fourth class: the table form");
  cr_assert_eq(l.param_bytes, 128 + INLINE_TABLE_BYTES + MDR_STAGE_INLINE_XXL_BYTES);
  st.inline_bytes = MDR_STAGE_INLINE_XXL_BYTES + 1;
  cr_assert_eq(mdr_cuda_zero_inline_launch(rules, 2, 20, &st, 132, &l), 0);
  cr_assert_eq(l.slot_offset, 128 + INLINE_TABLE_BYTES, "the largest class: the table form");
  cr_assert_eq(l.param_bytes, 128 + INLINE_TABLE_BYTES + MDR_STAGE_INLINE_XXXL_BYTES);
  st.inline_bytes = MDR_STAGE_INLINE_XXXL_BYTES + 1;
  cr_assert_neq(mdr_cuda_zero_inline_launch(rules, 2, 20, &st, 132, &l), 0, "past the largest class: refused");
  for (int k = 0; k < 2; k++) {
    st.table = k ? 0x400000 : 0;
    st.table_max = k ? 19 : 0; /* k: a table short of the count */
    st.inline_bytes = MDR_STAGE_INLINE_BYTES + 1;
    cr_assert_neq(mdr_cuda_zero_inline_launch(rules, 2, 20, &st, 132, &l), 0, "a larger class without a table");
    st.inline_bytes = MDR_STAGE_INLINE_BYTES;
    cr_assert_eq(mdr_cuda_zero_inline_launch(rules, 2, 20, &st, 132, &l), 0);
    cr_assert_eq(l.slot_offset, list_at, "the small class without a table: the list form");
  }
}
/* A launch with step inputs takes at least the large class when a plan
 * table serves its count (no device needed): in the list form (a short
 * plan) and in the table form (a long one), an image that fits the small
 * class goes in the large one, with room for the input table, where the
 * same stage without inputs keeps the small class; without a table it
 * keeps the small class (the list or the static form). */
Test(stage_inline, the_cuda_inline_launch_gives_steps_with_inputs_the_large_class) {
  const size_t list_at = 8 * MDR_ZERO_LIST_INLINE_MAX + sizeof(mdr_stage_desc) + 16;
  for (int form = 0; form < 2; form++) { /* 0: the list form, 1: the table form */
    const mdr_zero_seg *rules = form ? k_desc_long_rules : k_desc_rules;
    const size_t at = form ? 128 : list_at;
    static mdr_stage_inline_launch l, ids_only;
    const uint32_t fits[] = {1, 64, MDR_STAGE_INLINE_BYTES};
    for (size_t i = 0; i < 3; i++) {
      mdr_stage_desc st = desc_stage();
      st.table = 0x400000;
      st.table_max = 24;
      st.inline_bytes = fits[i];
      cr_assert_eq(mdr_cuda_zero_inline_launch(rules, 2, 20, &st, 132, &ids_only), 0);
      cr_assert_eq(ids_only.param_bytes, at + MDR_STAGE_INLINE_BYTES, "%u bytes, no inputs: the small class",
                   fits[i]);
      cr_assert_eq(ids_only.table_offset, 0);
      st.n_inputs = 3;
      st.inputs = 0x500000;
      memset(&l, 0xAB, sizeof l);
      cr_assert_eq(mdr_cuda_zero_inline_launch(rules, 2, 20, &st, 132, &l), 0);
      cr_assert_eq(l.table_offset, at, "%u bytes with inputs: room for the input table", fits[i]);
      cr_assert_eq(l.slot_offset, at + INLINE_TABLE_BYTES);
      cr_assert_eq(l.param_bytes, at + INLINE_TABLE_BYTES + MDR_STAGE_INLINE_LARGE_BYTES,
                   "%u bytes with inputs: the large class", fits[i]);
      cr_assert_neq(l.func, ids_only.func, "the large class's kernel");
      cr_assert_eq(tb_first_not((const unsigned char *)l.param + l.slot_offset, MDR_STAGE_INLINE_LARGE_BYTES, 0),
                   MDR_STAGE_INLINE_LARGE_BYTES, "image zeroed");
      /* no table that serves the count: the small class, inputs or not */
      st.table_max = 19;
      cr_assert_eq(mdr_cuda_zero_inline_launch(rules, 2, 20, &st, 132, &l), 0);
      cr_assert_eq(l.table_offset, 0, "%u bytes with inputs, no table: the small class", fits[i]);
      cr_assert_eq(l.slot_offset + MDR_STAGE_INLINE_BYTES, l.param_bytes);
    }
  }
}
#endif

/* The class rule both backends share (mdr_stage_inline_class): without a
 * table the small class or none; with one the smallest that holds the
 * image, at least the large one for a stage with inputs. */
Test(stage_inline, the_image_class_rule) {
  mdr_stage_desc st = {.flags = MDR_STAGE_FETCH | MDR_STAGE_INLINE};
  const struct {
    uint32_t bytes, none, ids_only, inputs; /* no table; a table, no inputs; a table and inputs */
  } cases[] = {{0, MDR_STAGE_INLINE_BYTES, MDR_STAGE_INLINE_BYTES, MDR_STAGE_INLINE_LARGE_BYTES},
               {MDR_STAGE_INLINE_BYTES, MDR_STAGE_INLINE_BYTES, MDR_STAGE_INLINE_BYTES, MDR_STAGE_INLINE_LARGE_BYTES},
               {MDR_STAGE_INLINE_BYTES + 1, 0, MDR_STAGE_INLINE_LARGE_BYTES, MDR_STAGE_INLINE_LARGE_BYTES},
               {MDR_STAGE_INLINE_LARGE_BYTES + 1, 0, MDR_STAGE_INLINE_XL_BYTES, MDR_STAGE_INLINE_XL_BYTES},
               {MDR_STAGE_INLINE_XL_BYTES + 1, 0, MDR_STAGE_INLINE_XXL_BYTES, MDR_STAGE_INLINE_XXL_BYTES},
               {MDR_STAGE_INLINE_XXXL_BYTES, 0, MDR_STAGE_INLINE_XXXL_BYTES, MDR_STAGE_INLINE_XXXL_BYTES},
               {MDR_STAGE_INLINE_XXXL_BYTES + 1, 0, 0, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    st.inline_bytes = cases[i].bytes;
    for (uint32_t n = 0; n < 2; n++) {
      st.n_inputs = n;
      cr_assert_eq(mdr_stage_inline_class(&st, 0), cases[i].none, "%u bytes, %u inputs, no table", cases[i].bytes, n);
      cr_assert_eq(mdr_stage_inline_class(&st, 1), n ? cases[i].inputs : cases[i].ids_only, "%u bytes, %u inputs",
                   cases[i].bytes, n);
    }
  }
}

/* The plan table of one rule up to count 8, in device memory. */
static mdr_dptr one_rule_table(mdr_backend *b, const mdr_zero_seg *seg) {
  const size_t words = (size_t)mdr_plan_table_words(1, 8);
  uint64_t w[64];
  cr_assert_leq(words, 64);
  mdr_plan_table_fill(seg, 1, 8, w);
  mdr_dptr table = 0;
  cr_assert_eq(mdr_backend_alloc(b, words * 8, &table), MDR_OK);
  cr_assert_eq(mdr_backend_copy_h2d(b, table, w, words * 8), MDR_OK);
  return table;
}

/* The host backend's inline launch takes the same classes: its argument
 * is the image, of the class's bytes, then past the small class the input
 * table's room (table_offset: right after the image); a large image
 * without a table that serves the count, or past the largest class, is
 * refused; an update must carry its node's class and layout. */
Test(stage_inline, the_host_inline_launch_takes_the_same_image_classes) {
  mdr_backend *b = tb_backend(TB_HOST);
  mdr_stream s = tb_stream(b);
  mdr_dptr ids = 0, counts = 0, buf = 0, table = 0;
  cr_assert_eq(mdr_backend_alloc(b, 256, &ids), MDR_OK);
  cr_assert_eq(mdr_backend_alloc(b, 256, &counts), MDR_OK);
  cr_assert_eq(mdr_backend_alloc(b, 4096, &buf), MDR_OK);
  const mdr_zero_seg seg = {.ptr = buf, .bytes = 4096, .a = 4096 / 8, .b = 8, .rule = MDR_RULE_ROWS};
  table = one_rule_table(b, &seg);
  mdr_stage_desc st = {.token_ids = ids, .count_out = counts, .flags = MDR_STAGE_FETCH | MDR_STAGE_INLINE,
                       .copy_sequences = 1, .table = table, .table_max = 8};
  static mdr_stage_inline_launch l, ls;
  void *g = NULL, *x = NULL, *node = NULL, *node_s = NULL;
  cr_assert_eq(mdr_be_capture_begin(b, s), MDR_OK);
  st.inline_bytes = MDR_STAGE_INLINE_BYTES;
  cr_assert_eq(mdr_be_fused_inline_launch(b, &seg, 1, 6, &st, s, &node_s, &ls), MDR_OK, "%s",
               mdr_backend_last_error(b));
  cr_assert_eq(ls.param_bytes, MDR_STAGE_INLINE_BYTES);
  cr_assert_eq(ls.table_offset, 0, "the small class keeps no table");
  st.inline_bytes = MDR_STAGE_INLINE_BYTES + 1;
  cr_assert_eq(mdr_be_fused_inline_launch(b, &seg, 1, 6, &st, s, &node, &l), MDR_OK, "%s", mdr_backend_last_error(b));
  cr_assert_eq(l.param_bytes, MDR_STAGE_INLINE_LARGE_BYTES + INLINE_TABLE_BYTES);
  cr_assert_eq(l.slot_offset, 0);
  cr_assert_eq(l.table_offset, MDR_STAGE_INLINE_LARGE_BYTES);
  cr_assert_eq(tb_first_not((const unsigned char *)l.param + l.table_offset, INLINE_TABLE_BYTES, 0),
               INLINE_TABLE_BYTES, "the table's room zeroed");
  /* past the large class, each class's smallest and largest image */
  static const struct {
    uint32_t bytes, cls;
  } classes[] = {{MDR_STAGE_INLINE_LARGE_BYTES + 1, MDR_STAGE_INLINE_XL_BYTES},
                 {MDR_STAGE_INLINE_XL_BYTES + 1, MDR_STAGE_INLINE_XXL_BYTES},
                 {MDR_STAGE_INLINE_XXL_BYTES, MDR_STAGE_INLINE_XXL_BYTES},
                 {MDR_STAGE_INLINE_XXL_BYTES + 1, MDR_STAGE_INLINE_XXXL_BYTES},
                 {MDR_STAGE_INLINE_XXXL_BYTES, MDR_STAGE_INLINE_XXXL_BYTES}};
  static mdr_stage_inline_launch lx;
  mdr_stage_desc xst = st;
  for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++) {
    xst.inline_bytes = classes[i].bytes;
    cr_assert_eq(mdr_be_fused_inline_launch(b, &seg, 1, 6, &xst, s, NULL, &lx), MDR_OK, "%s",
                 mdr_backend_last_error(b));
    cr_assert_eq(lx.param_bytes, classes[i].cls + INLINE_TABLE_BYTES, "%u bytes: the class of %u", classes[i].bytes,
                 classes[i].cls);
    cr_assert_eq(lx.table_offset, classes[i].cls);
  }
  mdr_stage_desc bad = st;
  bad.inline_bytes = MDR_STAGE_INLINE_XXXL_BYTES + 1;
  cr_assert_eq(mdr_be_fused_inline_launch(b, &seg, 1, 6, &bad, s, NULL, &l), MDR_ERR_INVALID_ARGUMENT);
  bad.inline_bytes = MDR_STAGE_INLINE_BYTES + 1;
  bad.table_max = 5; /* short of the count: the static form */
  cr_assert_eq(mdr_be_fused_inline_launch(b, &seg, 1, 6, &bad, s, NULL, &l), MDR_ERR_INVALID_ARGUMENT);
  bad.table = 0;
  bad.table_max = 0;
  cr_assert_eq(mdr_be_fused_inline_launch(b, &seg, 1, 6, &bad, s, NULL, &l), MDR_ERR_INVALID_ARGUMENT);
  cr_assert_eq(mdr_be_capture_end(b, s, &g), MDR_OK);
  cr_assert_eq(mdr_be_graph_instantiate(b, g, NULL, &x), MDR_OK);
  st.inline_bytes = MDR_STAGE_INLINE_BYTES + 1;
  cr_assert_eq(mdr_be_fused_inline_launch(b, &seg, 1, 6, &st, s, NULL, &l), MDR_OK); /* l: the large launch again */
  cr_assert_eq(mdr_be_fused_inline_update(b, x, node, &ls), MDR_ERR_INVALID_ARGUMENT, "the small class's argument");
  cr_assert_eq(mdr_be_fused_inline_update(b, x, node_s, &l), MDR_ERR_INVALID_ARGUMENT, "the large class's argument");
  static mdr_stage_inline_launch moved;
  moved = l;
  moved.table_offset = 0;
  cr_assert_eq(mdr_be_fused_inline_update(b, x, node, &moved), MDR_ERR_INVALID_ARGUMENT, "no table's room");
  moved = l;
  moved.param_bytes = MDR_STAGE_INLINE_LARGE_BYTES;
  cr_assert_eq(mdr_be_fused_inline_update(b, x, node, &moved), MDR_ERR_INVALID_ARGUMENT, "the image alone");
  cr_assert_eq(mdr_be_fused_inline_update(b, x, node, &l), MDR_OK, "%s", mdr_backend_last_error(b));
  cr_assert_eq(mdr_be_fused_inline_update(b, x, node_s, &ls), MDR_OK, "%s", mdr_backend_last_error(b));
  cr_assert_eq(mdr_backend_synchronize(b, s), MDR_OK);
  mdr_be_exec_destroy(b, x);
  mdr_be_graph_destroy(b, g);
  mdr_backend_free(b, table);
  mdr_backend_free(b, buf);
  mdr_backend_free(b, counts);
  mdr_backend_free(b, ids);
  mdr_backend_stream_destroy(b, s);
  mdr_backend_destroy(b);
}

ParameterizedTestParameters(stage_inline, a_larger_class_reads_the_input_table_in_its_parameters_where_written) {
  static tb_kind kinds[] = {TB_HOST, TB_CUDA};
  return cr_make_param_array(tb_kind, kinds, 2);
}

/* A large-class inline node (the table form, one input of one 16-byte row
 * at image offset 112) whose descriptor's input table, in device memory,
 * sends the input to `a`. With an entry written in the launch's own table
 * room that sends it to `b`, the launch copies the input to b and leaves a
 * as poisoned; with the room zeroed again, to a, b untouched. The ids and
 * the zeroing serve either way. Both backends: the host mirrors the
 * kernels' reading of the room. */
ParameterizedTest(tb_kind *kind, stage_inline, a_larger_class_reads_the_input_table_in_its_parameters_where_written) {
  enum { COPY = 6, T = 4, OFF = 112, ROW = 16, DST = 64, BUF = 4096 };
  mdr_backend *b = tb_backend(*kind);
  mdr_stream s = tb_stream(b);
  mdr_dptr ids = 0, counts = 0, buf = 0, table = 0, dtab = 0, dst[2] = {0, 0};
  cr_assert_eq(mdr_backend_alloc(b, 256, &ids), MDR_OK);
  cr_assert_eq(mdr_backend_alloc(b, 256, &counts), MDR_OK);
  cr_assert_eq(mdr_backend_alloc(b, BUF, &buf), MDR_OK);
  for (int k = 0; k < 2; k++) cr_assert_eq(mdr_backend_alloc(b, DST, &dst[k]), MDR_OK);
  const mdr_zero_seg seg = {.ptr = buf, .bytes = BUF, .a = BUF / 8, .b = 8, .rule = MDR_RULE_ROWS};
  table = one_rule_table(b, &seg);
  mdr_stage_input entry = {.offset = OFF, .row_bytes = ROW, .rows = MDR_STAGE_ROWS_FIXED, .max_rows = 1,
                           .elem_bytes = 4};
  entry.dst = dst[0];
  cr_assert_eq(mdr_backend_alloc(b, sizeof entry, &dtab), MDR_OK);
  cr_assert_eq(mdr_backend_copy_h2d(b, dtab, &entry, sizeof entry), MDR_OK);
  mdr_stage_desc st = {.token_ids = ids, .count_out = counts, .flags = MDR_STAGE_FETCH | MDR_STAGE_INLINE,
                       .copy_sequences = 1, .table = table, .table_max = 8, .inputs = dtab, .n_inputs = 1,
                       .inline_bytes = OFF + ROW};
  static mdr_stage_inline_launch l;
  void *g = NULL, *x = NULL, *node = NULL;
  cr_assert_eq(mdr_be_capture_begin(b, s), MDR_OK);
  cr_assert_eq(mdr_be_fused_inline_launch(b, &seg, 1, COPY, &st, s, &node, &l), MDR_OK, "%s",
               mdr_backend_last_error(b));
  cr_assert_eq(mdr_be_capture_end(b, s, &g), MDR_OK);
  cr_assert_eq(mdr_be_graph_instantiate(b, g, NULL, &x), MDR_OK);
  cr_assert_neq(l.table_offset, 0, "a larger class keeps the table's room");
  cr_assert_eq(tb_first_not((const unsigned char *)l.param + l.table_offset, INLINE_TABLE_BYTES, 0),
               INLINE_TABLE_BYTES, "the room comes zeroed");
  for (int round = 0; round < 2; round++) {
    /* round 0: the room holds an entry to b; round 1: the room zeroed */
    mdr_stage_input room = entry;
    room.dst = dst[1];
    if (round == 0) memcpy((unsigned char *)l.param + l.table_offset, &room, sizeof room);
    else memset((unsigned char *)l.param + l.table_offset, 0, INLINE_TABLE_BYTES);
    uint32_t vals[ROW / 4];
    for (int i = 0; i < ROW / 4; i++) vals[i] = 0xA0000000u + 16u * (uint32_t)round + (uint32_t)i;
    cr_assert_eq(mdr_backend_fill(b, ids, POISON, 256), MDR_OK);
    cr_assert_eq(mdr_backend_fill(b, buf, POISON, BUF), MDR_OK);
    for (int k = 0; k < 2; k++) cr_assert_eq(mdr_backend_fill(b, dst[k], POISON, DST), MDR_OK);
    put_image(&l, T, COPY, 500 + 10 * (uint32_t)round);
    memcpy((unsigned char *)l.param + l.slot_offset + OFF, vals, ROW);
    cr_assert_eq(mdr_be_fused_inline_update(b, x, node, &l), MDR_OK, "%s", mdr_backend_last_error(b));
    cr_assert_eq(mdr_be_graph_launch(b, x, s), MDR_OK, "%s", mdr_backend_last_error(b));
    cr_assert_eq(mdr_backend_synchronize(b, s), MDR_OK, "%s", mdr_backend_last_error(b));
    const int to = round == 0 ? 1 : 0;
    unsigned char got[DST];
    read_back(b, got, dst[to], DST);
    cr_assert_eq(memcmp(got, vals, ROW), 0, "round %d: the input at the entry's destination", round);
    cr_assert_eq(tb_first_not(got + ROW, DST - ROW, POISON), DST - ROW, "round %d: nothing past its row", round);
    read_back(b, got, dst[1 - to], DST);
    cr_assert_eq(tb_first_not(got, DST, POISON), DST, "round %d: the other destination untouched", round);
    uint32_t got_ids[COPY];
    read_back(b, got_ids, ids, sizeof got_ids);
    for (uint32_t i = 0; i < COPY; i++)
      cr_assert_eq(got_ids[i], i < T ? 500 + 10 * (uint32_t)round + i : (uint32_t)PAD_ID, "round %d: id %u", round, i);
    static unsigned char got_buf[BUF];
    read_back(b, got_buf, buf, BUF);
    const size_t zeroed = (size_t)mdr_zero_seg_bytes(&seg, COPY);
    cr_assert_eq(tb_first_not(got_buf, zeroed, 0), zeroed, "round %d: the rows at the count cleared", round);
    cr_assert_eq(tb_first_not(got_buf + zeroed, BUF - zeroed, POISON), BUF - zeroed, "round %d: nothing past them",
                 round);
  }
  mdr_be_exec_destroy(b, x);
  mdr_be_graph_destroy(b, g);
  for (int k = 0; k < 2; k++) mdr_backend_free(b, dst[k]);
  mdr_backend_free(b, dtab);
  mdr_backend_free(b, table);
  mdr_backend_free(b, buf);
  mdr_backend_free(b, counts);
  mdr_backend_free(b, ids);
  mdr_backend_stream_destroy(b, s);
  mdr_backend_destroy(b);
}

/* Steps with positions, sequence lengths and a 128-entry block table per
 * sequence (mdr-bench's graph-fused-inputs): count g's image is 576 bytes
 * at 1 sequence, 1088 at 2 (the large class), 1600 at 3 (the ring). */
enum { BT_W = 128, BT_IN = 3 };
enum { BT_POS, BT_SEQLEN, BT_TABLE };
static const uint64_t k_bt_pad[BT_IN] = {0xFFFFFFF0u, 0, 0xFFFFFFFFu};

typedef struct bt_world {
  world w; /* its arena and cache; its own inputs unused */
  mdr_dptr dst[BT_IN];
  size_t bytes[BT_IN];
  mdr_step_input in[BT_IN];
} bt_world;

typedef struct bt_values {
  size_t t, s;
  uint32_t ids[M], pos[M], seqlen[S], table[S * BT_W];
} bt_values;

static size_t bt_image_bytes(size_t g) {
  const size_t sb = g < S ? g : S;
  size_t end = MDR_STAGE_HEADER_BYTES + 4 * g;
  end = up16(end) + 4 * g;         /* positions */
  end = up16(end) + 4 * sb;        /* seq_lens */
  return up16(end) + 4 * BT_W * sb; /* block_table */
}

/* The three inputs' destinations and declarations: positions (M rows),
 * sequence lengths and a block table of `width` entries (`seqs` rows
 * each), with pads pad[i]. */
static void bt_declare(bt_world *bw, mdr_backend *b, size_t seqs, size_t width, const uint64_t *pad) {
  const size_t rows[BT_IN] = {M, seqs, seqs}, widths[BT_IN] = {1, 1, width};
  const mdr_step_input_shape shape[BT_IN] = {MDR_INPUT_PER_TOKEN, MDR_INPUT_PER_SEQUENCE, MDR_INPUT_PER_SEQUENCE};
  const char *names[BT_IN] = {"positions", "seq_lens", "block_table"};
  for (int i = 0; i < BT_IN; i++) {
    bw->bytes[i] = rows[i] * widths[i] * 4;
    cr_assert_eq(mdr_backend_alloc(b, bw->bytes[i], &bw->dst[i]), MDR_OK);
    bw->in[i] = (mdr_step_input){.name = names[i], .elem_bytes = 4, .shape = shape[i], .width = widths[i],
                                 .pad = pad[i], .dest = MDR_INPUT_TO_DEVICE, .address = bw->dst[i]};
  }
}

static void bt_init_sizes(bt_world *bw, mdr_backend *b, const mdr_sizes *sizes, mdr_graph_mode mode,
                          const char *route, mdr_capture_fn body, void *user) {
  memset(bw, 0, sizeof *bw);
  world_init_sizes(&bw->w, b, 0, sizes);
  bt_declare(bw, b, S, BT_W, k_bt_pad);
  mdr_graph_cache_options o = world_options(&bw->w, mode, MDR_ZERO_FUSED);
  o.inputs = bw->in;
  o.n_inputs = BT_IN;
  o.body = body;
  o.user = user;
  world_cache(&bw->w, &o, route);
}

static void bt_init(bt_world *bw, mdr_backend *b, mdr_graph_mode mode, const char *route, mdr_capture_fn body,
                    void *user) {
  const mdr_sizes sizes = tb_small_sizes();
  bt_init_sizes(bw, b, &sizes, mode, route, body, user);
}

static void bt_fini(bt_world *bw) {
  mdr_backend *b = bw->w.b;
  world_fini(&bw->w);
  for (int i = 0; i < BT_IN; i++) mdr_backend_free(b, bw->dst[i]);
}

static void bt_make(uint64_t *rng, bt_values *v, size_t t, size_t s) {
  memset(v, 0, sizeof *v);
  v->t = t;
  v->s = s;
  for (size_t i = 0; i < t; i++) {
    v->ids[i] = random_id(rng);
    v->pos[i] = (uint32_t)tb_rng_next(rng);
  }
  for (size_t i = 0; i < s; i++) v->seqlen[i] = (uint32_t)tb_rng_next(rng);
  for (size_t i = 0; i < s * BT_W; i++) v->table[i] = (uint32_t)tb_rng_next(rng);
}

static mdr_status bt_step(bt_world *bw, const bt_values *v) {
  const void *vals[1 + BT_IN] = {v->ids, v->pos, v->seqlen, v->table};
  return mdr_graph_cache_step_inputs(bw->w.c, vals, 1 + BT_IN, v->t, v->s);
}

static void bt_poison(bt_world *bw) {
  mdr_backend *b = bw->w.b;
  tb_poison_arena(bw->w.a);
  cr_assert_eq(mdr_backend_fill(b, mdr_arena_token_ids(bw->w.a), POISON, mdr_arena_token_ids_bytes(bw->w.a)), MDR_OK);
  for (int i = 0; i < BT_IN; i++) cr_assert_eq(mdr_backend_fill(b, bw->dst[i], POISON, bw->bytes[i]), MDR_OK);
}

/* The step's ids, inputs and counts, bit for bit. */
static void bt_expect(bt_world *bw, const bt_values *v, const char *what) {
  world *w = &bw->w;
  size_t g = 0, sb = 0;
  cr_assert_eq(mdr_graph_cache_graph_tokens(w->c, v->t, &g), MDR_OK);
  cr_assert_eq(mdr_graph_cache_sequence_bound(w->c, v->t, &sb), MDR_OK);
  static unsigned char got[S * BT_W * 4 + M * 8 + 256];
  const size_t idb = mdr_arena_token_ids_bytes(w->a);
  read_back(w->b, got, mdr_arena_token_ids(w->a), idb);
  expect_bytes(got, idb, v->ids, 4 * v->t, 4 * g, 4, PAD_ID, "token_ids", what);
  uint32_t counts[2];
  read_back(w->b, counts, mdr_graph_cache_count_ptr(w->c), 8);
  cr_assert_eq(counts[0], v->t, "%s: token count", what);
  cr_assert_eq(counts[1], v->s, "%s: sequence count", what);
  const void *want[BT_IN] = {v->pos, v->seqlen, v->table};
  const size_t real[BT_IN] = {4 * v->t, 4 * v->s, 4 * BT_W * v->s}, copy[BT_IN] = {4 * g, 4 * sb, 4 * BT_W * sb};
  for (int i = 0; i < BT_IN; i++) {
    read_back(w->b, got, bw->dst[i], bw->bytes[i]);
    expect_bytes(got, bw->bytes[i], want[i], real[i], copy[i], 4, k_bt_pad[i], bw->in[i].name, what);
  }
}

/* A large-class count goes inline only while its zeroing is short (at
 * most 32 MiB of plan): a longer plan hides most of the ring's read of the
 * slot, so the inline route would cost host time for little. The same
 * block-table steps go inline with a short plan and one of 31 MiB, take
 * the ring once a buffer of 33 MiB zeroed whole at every count makes every
 * plan longer, and land the same bytes either way. */
Test(stage_inline, a_long_plan_keeps_large_class_steps_on_the_ring) {
  const size_t mib[] = {0, 31, 33};
  for (int k = 0; k < 3; k++) {
    mdr_sizes sizes = tb_small_sizes();
    if (mib[k]) sizes.bytes[MDR_BUF_SSM_QKVZ] = (mib[k] << 20) + 8; /* not a multiple of M or Mp: zeroed whole */
    static bt_world bw;
    mdr_backend *b = tb_backend(TB_HOST);
    bt_init_sizes(&bw, b, &sizes, MDR_GRAPH_EXACT, NULL, NULL, NULL);
    uint64_t rng = 99;
    for (size_t t = 1; t <= 2; t++) {
      static bt_values v;
      bt_make(&rng, &v, t, t);
      bt_poison(&bw);
      mdr_graph_stats s0, s1;
      cr_assert_eq(mdr_graph_cache_stats(bw.w.c, &s0), MDR_OK);
      cr_assert_eq(bt_step(&bw, &v), MDR_OK, "%s", mdr_backend_last_error(bw.w.b));
      cr_assert_eq(mdr_backend_synchronize(bw.w.b, bw.w.s), MDR_OK);
      cr_assert_eq(mdr_graph_cache_stats(bw.w.c, &s1), MDR_OK);
      char what[64];
      snprintf(what, sizeof what, "a plan with %zu MiB zeroed whole, %zu sequence(s)", mib[k], t);
      bt_expect(&bw, &v, what);
      cr_assert_eq(s1.inline_steps - s0.inline_steps, mib[k] > 32 ? 0u : 1u, "%s: inline or ring", what);
    }
    bt_fini(&bw);
    mdr_backend_destroy(b);
  }
}

ParameterizedTestParameters(stage_inline, block_table_steps_at_one_and_two_sequences_go_inline_in_the_large_class) {
  static mix_case cases[TB_KIND_COUNT * 2];
  size_t n = 0;
  for (int k = 0; k < TB_KIND_COUNT; k++)
    for (int m = 0; m < 2; m++)
      cases[n++] = (mix_case){(tb_kind)k, m ? MDR_GRAPH_LADDER : MDR_GRAPH_EXACT, MDR_ZERO_FUSED, 1, 0};
  return cr_make_param_array(mix_case, cases, n);
}

/* The same random mix of steps (mostly decode steps of 1-4 sequences, some
 * longer) through a cache with the route and one with MDR_STAGE_INLINE=0:
 * counts whose image fits the large class (1 and 2 tokens: 576 and 1088
 * bytes) go inline in it, 3 up to the counts with an inline layout (32) in
 * the extra-large class (1600 bytes at 3, 2112 from 4 sequences on), past
 * them the ring; after every step both worlds hold the same bytes
 * everywhere and the step's values are where they belong. */
ParameterizedTest(mix_case *mc, stage_inline, block_table_steps_at_one_and_two_sequences_go_inline_in_the_large_class) {
  cr_assert_eq(bt_image_bytes(1), 576);
  cr_assert_eq(bt_image_bytes(2), 1088);
  cr_assert_eq(bt_image_bytes(3), 1600);
  mdr_backend *b = tb_backend(mc->kind);
  static bt_world x, y;
  bt_init(&x, b, mc->mode, NULL, NULL, NULL);
  bt_init(&y, b, mc->mode, "0", NULL, NULL);
  uint64_t rng = 1234 + (uint64_t)mc->mode, want_inline = 0, at[3] = {0, 0, 0};
  const int steps = 240;
  for (int k = 0; k < steps; k++) {
    size_t t = 1 + tb_rng_next(&rng) % S, s = t; /* decode: a token per sequence */
    if (k % 7 == 3) { /* a longer step: anywhere, or past the inline layouts */
      t = k % 14 == 3 ? 1 + tb_rng_next(&rng) % M : INLINE_COUNTS + 1 + tb_rng_next(&rng) % (M - INLINE_COUNTS);
      s = 1 + tb_rng_next(&rng) % (t < S ? t : S);
    }
    static bt_values v;
    bt_make(&rng, &v, t, s);
    bt_poison(&x);
    bt_poison(&y);
    mdr_graph_stats s0, s1;
    cr_assert_eq(mdr_graph_cache_stats(x.w.c, &s0), MDR_OK);
    cr_assert_eq(bt_step(&x, &v), MDR_OK, "step %d: %s", k, mdr_backend_last_error(b));
    cr_assert_eq(bt_step(&y, &v), MDR_OK, "step %d: %s", k, mdr_backend_last_error(b));
    cr_assert_eq(mdr_backend_synchronize(b, x.w.s), MDR_OK);
    cr_assert_eq(mdr_backend_synchronize(b, y.w.s), MDR_OK);
    cr_assert_eq(mdr_graph_cache_stats(x.w.c, &s1), MDR_OK);
    char what[96];
    snprintf(what, sizeof what, "%s step %d (t %zu, s %zu)", tb_kind_name(mc->kind), k, t, s);
    bt_expect(&x, &v, what);
    expect_same(&x.w, &y.w, what);
    for (int i = 0; i < BT_IN; i++) {
      static unsigned char bx[S * BT_W * 4], by[S * BT_W * 4];
      read_back(b, bx, x.dst[i], x.bytes[i]);
      read_back(b, by, y.dst[i], y.bytes[i]);
      cr_assert_eq(memcmp(bx, by, x.bytes[i]), 0, "%s: %s differs", what, x.in[i].name);
    }
    size_t g = 0;
    cr_assert_eq(mdr_graph_cache_graph_tokens(x.w.c, t, &g), MDR_OK);
    const uint64_t inl = bt_image_bytes(g) <= MDR_STAGE_INLINE_XXXL_BYTES && g <= INLINE_COUNTS;
    cr_assert_eq(s1.inline_steps - s0.inline_steps, inl, "%s: graph count %zu inline %d", what, g, (int)inl);
    want_inline += inl;
    at[g <= 2 ? 0 : g <= INLINE_COUNTS ? 1 : 2] += 1;
  }
  cr_assert_gt(at[0], 10, "steps at 1-2 tokens (the large class)");
  cr_assert_gt(at[1], 10, "steps at 3-32 tokens (the extra-large class)");
  cr_assert_gt(at[2], 5, "steps past 32 tokens (the ring)");
  cr_assert_eq(want_inline, at[0] + at[1], "up to 32 tokens inline");
  mdr_graph_stats sx, sy;
  cr_assert_eq(mdr_graph_cache_stats(x.w.c, &sx), MDR_OK);
  cr_assert_eq(mdr_graph_cache_stats(y.w.c, &sy), MDR_OK);
  cr_assert_eq(sx.inline_steps, want_inline);
  cr_assert_eq(sy.inline_steps, 0, "MDR_STAGE_INLINE=0: no inline step");
  cr_assert_eq(sx.steps, (uint64_t)steps);
  cr_assert_eq(sx.eager_steps + sy.eager_steps, 0);
  bt_fini(&x);
  bt_fini(&y);
  mdr_backend_destroy(b);
}

/* A body that folds each destination (token_ids at the step's count, every
 * input's whole extent) into its own accumulator when the stream reaches
 * it: acc[2 * i] += sum (j + 1) * v[j], acc[2 * i + 1] += n. */
typedef struct bt_acc_user {
  tb_kind kind;
  bt_world *bw;
  mdr_dptr acc; /* 4 accumulators of 16 bytes: ids, then each input */
} bt_acc_user;

static mdr_status bt_acc_body(void *user, mdr_stream s, size_t tokens) {
  bt_acc_user *u = user;
  bt_world *bw = u->bw;
  accumulate(u->kind, bw->w.b, s, mdr_arena_token_ids(bw->w.a), tokens, u->acc);
  for (int i = 0; i < BT_IN; i++) accumulate(u->kind, bw->w.b, s, bw->dst[i], bw->bytes[i] / 4, u->acc + 16 * (i + 1));
  return MDR_OK;
}

static void fold(uint64_t *acc, const uint32_t *v, size_t n) {
  for (size_t j = 0; j < n; j++) acc[0] += (uint64_t)(j + 1) * v[j];
  acc[1] += n;
}

ParameterizedTestParameters(stage_inline, queued_large_class_steps_each_land_their_own_inputs) {
  static tb_kind kinds[] = {TB_HOST, TB_CUDA};
  return cr_make_param_array(tb_kind, kinds, 2);
}

/* The large class queued: the device stalled (a sleeping kernel on the
 * GPU, the host backend held), every destination poisoned first, hundreds
 * of decode steps at 1 and 2 sequences (inline, large class) and a few
 * past the counts with an inline layout (the ring) are enqueued; each step's body folds every destination
 * into an accumulator. The sums match a host replay of what each step
 * writes (its rows, the pad to its copy counts, the earlier contents
 * past them) only if every step's inputs landed exactly, from its own
 * parameters. */
ParameterizedTest(tb_kind *kind, stage_inline, queued_large_class_steps_each_land_their_own_inputs, .timeout = 120) {
  mdr_backend *b = tb_backend(*kind);
  static bt_world bw;
  bt_acc_user u = {*kind, &bw, 0};
  bt_init(&bw, b, MDR_GRAPH_EXACT, NULL, bt_acc_body, &u);
  cr_assert_eq(mdr_backend_alloc(b, 64, &u.acc), MDR_OK);
  cr_assert_eq(mdr_backend_fill(b, u.acc, 0, 64), MDR_OK);
  const size_t all[4] = {1, 2, INLINE_COUNTS + 1, INLINE_COUNTS + 2}; /* the counts the steps take */
  cr_assert_eq(mdr_graph_cache_prepare(bw.w.c, all, 4), MDR_OK, "%s", mdr_backend_last_error(b));
  bt_poison(&bw);
  cr_assert_eq(mdr_backend_synchronize(b, bw.w.s), MDR_OK);
  /* the host's mirror of each input's destination, poisoned */
  static uint32_t mirror[BT_IN][S * BT_W];
  memset(mirror, POISON, sizeof mirror);
  uint64_t want[8] = {0};
  if (*kind == TB_HOST) {
    cr_assert_eq(mdr_backend_host_hold(b, 1), MDR_OK);
  } else {
#if defined(MDR_HAVE_CUDA)
    cr_assert_eq(tb_cuda_sleep(bw.w.s, 50ull * 1000 * 1000), 0);
#endif
  }
  uint64_t rng = 555, want_inline = 0;
  size_t ring_steps = 0;
  const int steps = 6 * MDR_GRAPH_STAGING_SLOTS + 40;
  for (int k = 0; k < steps; k++) {
    /* ring steps (past the counts with an inline layout, at S sequences),
     * fewer than the ring's slots while held */
    const int ring = k % 11 == 6 && ring_steps < MDR_GRAPH_STAGING_SLOTS - 1;
    const size_t t = ring ? INLINE_COUNTS + 1 + tb_rng_next(&rng) % 2 : 1 + tb_rng_next(&rng) % 2;
    const size_t s = ring ? S : t;
    ring_steps += ring;
    want_inline += !ring;
    static bt_values v;
    bt_make(&rng, &v, t, s);
    cr_assert_eq(bt_step(&bw, &v), MDR_OK, "step %d: %s", k, mdr_backend_last_error(b));
    /* what the step leaves: its rows (no pad: EXACT counts, and a ring
     * step's S sequences are its copy sequences) */
    const uint32_t *vals[BT_IN] = {v.pos, v.seqlen, v.table};
    const size_t width[BT_IN] = {1, 1, BT_W}, rows[BT_IN] = {t, s, s};
    uint32_t ids[M];
    memcpy(ids, v.ids, sizeof ids);
    fold(&want[0], ids, t);
    for (int i = 0; i < BT_IN; i++) {
      memcpy(mirror[i], vals[i], rows[i] * width[i] * 4);
      fold(&want[2 * (i + 1)], mirror[i], bw.bytes[i] / 4);
    }
    memset(&v, 0xEE, sizeof v); /* the caller may reuse its buffers at once */
  }
  if (*kind == TB_HOST) {
    uint64_t none[2];
    read_back(b, none, u.acc, 16);
    cr_assert_eq(none[1], 0, "held: nothing ran");
    cr_assert_eq(mdr_backend_host_hold(b, 0), MDR_OK, "%s", mdr_backend_last_error(b));
  }
  cr_assert_eq(mdr_backend_synchronize(b, bw.w.s), MDR_OK);
  uint64_t got[8];
  read_back(b, got, u.acc, sizeof got);
  const char *names[4] = {"token_ids", "positions", "seq_lens", "block_table"};
  for (int i = 0; i < 4; i++) {
    cr_assert_eq(got[2 * i + 1], want[2 * i + 1], "%s: elements seen", names[i]);
    cr_assert_eq(got[2 * i], want[2 * i], "%s: a queued step left values not its own", names[i]);
  }
  mdr_graph_stats st;
  cr_assert_eq(mdr_graph_cache_stats(bw.w.c, &st), MDR_OK);
  cr_assert_eq(st.inline_steps, want_inline, "1 and 2 sequences inline");
  cr_assert_gt(ring_steps, 2);
  mdr_backend_free(b, u.acc);
  bt_fini(&bw);
  mdr_backend_destroy(b);
}

/* ---- a large slot spread over several stage blocks (MDR_STAGE_SPREAD) ------------------- */

/* Positions, sequence lengths and a 128-entry block table at up to 16
 * sequences: a ring step past the counts with an inline layout reads up to
 * 8.6 KiB of slot, spread over 3-4 stage blocks when the cache was created
 * unless the cache was created with MDR_STAGE_SPREAD=0. */
enum { SP_S = 16, SP_W = 128, SP_IN = BT_IN };

typedef bt_world sp_world; /* its inputs sized for SP_S sequences of SP_W entries */

typedef struct sp_values {
  size_t t, s;
  uint32_t ids[M], pos[M], seqlen[SP_S], table[SP_S * SP_W];
} sp_values;

static void sp_init(sp_world *x, mdr_backend *b, const char *spread) {
  static const uint64_t pad[SP_IN] = {0xFFFFFFF0u, 0xFFFFFFF0u, 0xFFFFFFF0u};
  memset(x, 0, sizeof *x);
  world_init(&x->w, b, 0);
  bt_declare(x, b, SP_S, SP_W, pad);
  mdr_graph_cache_options o = world_options(&x->w, MDR_GRAPH_EXACT, MDR_ZERO_FUSED);
  o.max_sequences = SP_S;
  o.inputs = x->in;
  o.n_inputs = SP_IN;
  if (spread)
    setenv("MDR_STAGE_SPREAD", spread, 1);
  else
    unsetenv("MDR_STAGE_SPREAD"); /* the default */
  world_cache(&x->w, &o, NULL);
  unsetenv("MDR_STAGE_SPREAD");
}

/* A step of v: from the host, or (`ids_dev`, a device buffer) with its ids
 * written there first and taken from the device. */
static mdr_status sp_step(sp_world *x, const sp_values *v, mdr_dptr ids_dev) {
  const void *vals[1 + SP_IN] = {v->ids, v->pos, v->seqlen, v->table};
  if (!ids_dev) return mdr_graph_cache_step_inputs(x->w.c, vals, 1 + SP_IN, v->t, v->s);
  cr_assert_eq(mdr_backend_copy_h2d(x->w.b, ids_dev, v->ids, 4 * v->t), MDR_OK);
  vals[0] = NULL;
  return mdr_graph_cache_step_inputs_device(x->w.c, ids_dev, vals, 1 + SP_IN, v->t, v->s);
}

static void sp_poison(sp_world *x) {
  for (int i = 0; i < SP_IN; i++) cr_assert_eq(mdr_backend_fill(x->w.b, x->dst[i], POISON, x->bytes[i]), MDR_OK);
  cr_assert_eq(mdr_backend_fill(x->w.b, mdr_arena_token_ids(x->w.a), POISON, mdr_arena_token_ids_bytes(x->w.a)),
               MDR_OK);
}

/* Every destination of x as v leaves it (its rows, the pad to the copy
 * counts: g = t tokens, 16 sequences past 24 tokens; past them the poison
 * when `poisoned`, else what earlier steps left) and as y holds it. */
static void sp_expect(sp_world *x, sp_world *y, const sp_values *v, int poisoned, const char *what) {
  static unsigned char gx[SP_S * SP_W * 4], gy[SP_S * SP_W * 4];
  const void *want[SP_IN] = {v->pos, v->seqlen, v->table};
  const size_t real[SP_IN] = {4 * v->t, 4 * v->s, 4 * SP_W * v->s}, copy[SP_IN] = {4 * v->t, 4 * SP_S, 4 * SP_W * SP_S};
  for (int i = 0; i < SP_IN; i++) {
    read_back(x->w.b, gx, x->dst[i], x->bytes[i]);
    read_back(y->w.b, gy, y->dst[i], y->bytes[i]);
    if (poisoned)
      expect_bytes(gx, x->bytes[i], want[i], real[i], copy[i], 4, 0xFFFFFFF0u, x->in[i].name, what);
    else
      cr_assert_eq(memcmp(gx, want[i], real[i]), 0, "%s: %s rows", what, x->in[i].name);
    cr_assert_eq(memcmp(gx, gy, x->bytes[i]), 0, "%s: %s differs from one stage block's", what, x->in[i].name);
  }
  const size_t idb = mdr_arena_token_ids_bytes(x->w.a);
  read_back(x->w.b, gx, mdr_arena_token_ids(x->w.a), idb);
  if (poisoned)
    expect_bytes(gx, idb, v->ids, 4 * v->t, 4 * v->t, 4, PAD_ID, "token_ids", what);
  else
    cr_assert_eq(memcmp(gx, v->ids, 4 * v->t), 0, "%s: token_ids", what);
}

static void sp_make(uint64_t *rng, sp_values *v) {
  memset(v, 0, sizeof *v);
  v->t = INLINE_COUNTS + 1 + tb_rng_next(rng) % (M - INLINE_COUNTS); /* the ring */
  v->s = SP_S / 2 + tb_rng_next(rng) % (SP_S / 2 + 1);
  for (size_t i = 0; i < v->t; i++) {
    v->ids[i] = random_id(rng);
    v->pos[i] = (uint32_t)tb_rng_next(rng);
  }
  for (size_t i = 0; i < v->s; i++) v->seqlen[i] = (uint32_t)tb_rng_next(rng);
  for (size_t i = 0; i < v->s * SP_W; i++) v->table[i] = (uint32_t)tb_rng_next(rng);
}

ParameterizedTestParameters(stage_inline, a_large_slot_spread_over_stage_blocks_lands_the_same_bytes) {
  static tb_kind kinds[] = {TB_HOST, TB_CUDA};
  return cr_make_param_array(tb_kind, kinds, 2);
}

/* The same ring steps (25-40 tokens, 8-16 sequences) through a cache with
 * MDR_STAGE_SPREAD unset (spread by default) and one with
 * MDR_STAGE_SPREAD=0: every step lands its own values and
 * pad, byte for byte as one stage block does, checked after each step and
 * after runs of three rings' worth of steps queued back to back (the last
 * stage block of each advances the ring; a wrong advance would stall the
 * host or hand it a slot still being read). Every other checked step takes
 * its ids from a device buffer (the slot holds the inputs; the first stage
 * block copies the ids). On the host backend the launch carries the spread
 * in its flags, device-id steps' too (the host's twin reads the slot
 * whole). */
ParameterizedTest(tb_kind *kind, stage_inline, a_large_slot_spread_over_stage_blocks_lands_the_same_bytes,
                  .timeout = 120) {
  mdr_backend *host = tb_backend(*kind), *b = host, *fb = NULL;
  if (*kind == TB_HOST) {
    cr_assert_eq(fault_backend_create(host, &fb), MDR_OK);
    b = fb;
  }
  static sp_world x, y;
  sp_init(&x, b, NULL);
  sp_init(&y, b, "0");
  uint64_t rng = 4242;
  static sp_values v;
  mdr_dptr ids_x = 0, ids_y = 0;
  cr_assert_eq(mdr_backend_alloc(b, 4 * M, &ids_x), MDR_OK);
  cr_assert_eq(mdr_backend_alloc(b, 4 * M, &ids_y), MDR_OK);
  int captures = 0, device_captures = 0;
  for (int k = 0; k < 3 * 40; k++) {
    sp_make(&rng, &v);
    const int queued = (k / 24) % 2 == 1; /* runs of 24 steps without a sync between them */
    /* device ids on checked steps only: a queued step's buffer would be
     * rewritten before the step ran */
    const int dev = !queued && k % 2 == 1;
    if (!queued) {
      sp_poison(&x);
      sp_poison(&y);
    }
    /* a step that captures its count passes the stage to the backend */
    long fused = fb ? fault_backend_calls_of(fb, MDR_OP_ZERO_FUSED) : 0;
    cr_assert_eq(sp_step(&x, &v, dev ? ids_x : 0), MDR_OK, "step %d: %s", k, mdr_backend_last_error(b));
    if (fb && fault_backend_calls_of(fb, MDR_OP_ZERO_FUSED) != fused) {
      captures++;
      device_captures += dev;
      const mdr_stage_desc st = fault_backend_last_fused_stage(fb);
      cr_assert_eq(!!(st.flags & MDR_STAGE_DEVICE_IDS), dev, "step %d: the ids' source", k);
      cr_assert_geq(mdr_stage_blocks_of(st.flags), 2, "step %d (t %zu, s %zu, %s ids): spread by default", k, v.t,
                    v.s, dev ? "device" : "host");
    }
    fused = fb ? fault_backend_calls_of(fb, MDR_OP_ZERO_FUSED) : 0;
    cr_assert_eq(sp_step(&y, &v, dev ? ids_y : 0), MDR_OK, "step %d: %s", k, mdr_backend_last_error(b));
    if (fb && fault_backend_calls_of(fb, MDR_OP_ZERO_FUSED) != fused)
      cr_assert_eq(mdr_stage_blocks_of(fault_backend_last_fused_stage(fb).flags), 1, "MDR_STAGE_SPREAD=0");
    if (queued && (k + 1) % 24 != 0) continue;
    cr_assert_eq(mdr_backend_synchronize(b, x.w.s), MDR_OK);
    cr_assert_eq(mdr_backend_synchronize(b, y.w.s), MDR_OK);
    char what[80];
    snprintf(what, sizeof what, "%s step %d (t %zu, s %zu)", tb_kind_name(*kind), k, v.t, v.s);
    sp_expect(&x, &y, &v, !queued, what);
  }
  bt_fini(&x);
  bt_fini(&y);
  mdr_backend_free(b, ids_x);
  mdr_backend_free(b, ids_y);
  if (fb) {
    cr_assert_gt(captures, 5, "counts captured, their stage seen");
    cr_assert_gt(device_captures, 3, "device-id counts captured, their stage seen");
    cr_assert_eq(fault_backend_live(fb), 0, "nothing leaked");
    mdr_backend_destroy(fb);
  }
  mdr_backend_destroy(host);
}

/* ---- failures ----------------------------------------------------------------------------- */

/* A failed node update refuses the step with the backend's text: nothing
 * launched (token_ids still poisoned), nothing counted; the next step (and
 * a ring step) works. */
Test(stage_inline, a_failed_node_update_refuses_the_step_and_leaves_the_cache_usable) {
  mdr_backend *host = NULL;
  world w;
  mdr_backend *fb = fault_world(&w, &host);
  uint64_t rng = 5;
  cr_assert_eq(step_counted(&w, &rng, 3, 2), 1, "the capture's step, inline");
  mdr_graph_stats s0, s1;
  cr_assert_eq(mdr_graph_cache_stats(w.c, &s0), MDR_OK);
  const long launches = fault_backend_calls_of(fb, MDR_OP_GRAPH_LAUNCH);
  fault_backend_fail_kind(fb, MDR_OP_FUSED_INLINE_UPDATE);
  step_values v;
  make_values(&rng, &v, 3, 2);
  world_poison(&w, &v);
  cr_assert_eq(world_step(&w, &v), MDR_ERR_BACKEND);
  cr_assert_neq(strstr(mdr_backend_last_error(fb), "injected failure of fused_inline_update"), NULL, "%s",
                mdr_backend_last_error(fb));
  cr_assert_eq(fault_backend_calls_of(fb, MDR_OP_GRAPH_LAUNCH), launches, "nothing launched");
  unsigned char raw[M * 4];
  read_back(fb, raw, mdr_arena_token_ids(w.a), sizeof raw);
  cr_assert_eq(tb_first_not(raw, sizeof raw, POISON), sizeof raw, "nothing ran");
  cr_assert_eq(mdr_graph_cache_stats(w.c, &s1), MDR_OK);
  cr_assert_eq(s1.steps, s0.steps);
  cr_assert_eq(s1.hits, s0.hits);
  cr_assert_eq(s1.inline_steps, s0.inline_steps);
  cr_assert_eq(s1.graphs, s0.graphs, "the graph is kept");
  /* a ring step needs no update: it works while updates fail (25 tokens
   * at 112 bytes; none when every count of the arena is inline) */
  const size_t rt = largest_inline_of(w.inputs, 1) + 1;
  if (rt <= M) cr_assert_eq(step_counted(&w, &rng, rt, 3), 0, "a ring step");
  fault_backend_fail_kind(fb, -1);
  cr_assert_eq(step_counted(&w, &rng, 3, 1), 1, "the same count, inline again");
  cr_assert_eq(step_counted(&w, &rng, 3, 3), 1, "and again");
  cr_assert_eq(mdr_graph_cache_stats(w.c, &s1), MDR_OK);
  cr_assert_eq(s1.captures, s0.captures + (rt <= M), "only the ring count was captured since");
  fault_world_fini(&w, fb, host);
}

/* The inline launch failing under capture fails the capture: the step runs
 * eagerly through the ring (MDR_ERR_CAPTURE, its work done), the count
 * runs eagerly from then on, and a prepare captures it inline later. */
Test(stage_inline, a_failed_inline_capture_runs_the_step_eagerly_through_the_ring) {
  mdr_backend *host = NULL;
  world w;
  mdr_backend *fb = fault_world(&w, &host);
  uint64_t rng = 6;
  fault_backend_fail_kind(fb, MDR_OP_FUSED_INLINE_LAUNCH);
  step_values v;
  make_values(&rng, &v, 4, 2);
  world_poison(&w, &v);
  cr_assert_eq(world_step(&w, &v), MDR_ERR_CAPTURE, "%s", mdr_backend_last_error(fb));
  cr_assert_eq(mdr_backend_synchronize(fb, w.s), MDR_OK);
  world_expect(&w, &v, "the eager fallback");
  cr_assert_eq(step_counted(&w, &rng, 4, 3), 0, "eager-only now");
  fault_backend_fail_kind(fb, -1);
  const size_t four = 4;
  cr_assert_eq(mdr_graph_cache_prepare(w.c, &four, 1), MDR_OK, "%s", mdr_backend_last_error(fb));
  cr_assert_eq(step_counted(&w, &rng, 4, 1), 1, "captured inline by the prepare");
  mdr_graph_stats st;
  cr_assert_eq(mdr_graph_cache_stats(w.c, &st), MDR_OK);
  cr_assert_eq(st.eager_steps, 2);
  cr_assert_eq(st.uncapturable, 0);
  fault_world_fini(&w, fb, host);
}

/* ---- which steps never go inline ----------------------------------------------------------- */

/* MDR_STAGE_INLINE=0, graphs disabled, device ids with nothing to stage
 * and DYNAMIC: no step inline, every step correct. An unrecognised value is reported and taken
 * as on. */
Test(stage_inline, the_opt_out_eager_device_and_dynamic_steps_take_no_inline_route) {
  mdr_backend *b = tb_backend(TB_HOST);
  uint64_t rng = 8;
  world w;
  for (int variant = 0; variant < 3; variant++) { /* the opt-out, graphs disabled, DYNAMIC */
    world_init(&w, b, 1);
    mdr_graph_cache_options o = world_options(&w, variant == 2 ? MDR_GRAPH_DYNAMIC : MDR_GRAPH_EXACT,
                                              MDR_ZERO_FUSED);
    if (variant == 1) setenv("MDR_DISABLE_GRAPHS", "1", 1);
    world_cache(&w, &o, variant == 0 ? "0" : NULL);
    unsetenv("MDR_DISABLE_GRAPHS");
    for (size_t t = 1; t <= 6; t++) {
      step_values v;
      make_values(&rng, &v, t, t > 1 ? 1 + t % 2 : 1);
      world_poison(&w, &v);
      cr_assert_eq(world_step(&w, &v), MDR_OK, "variant %d: %s", variant, mdr_backend_last_error(b));
      cr_assert_eq(mdr_backend_synchronize(b, w.s), MDR_OK);
      if (variant != 2) world_expect(&w, &v, "no inline route");
    }
    mdr_graph_stats st;
    cr_assert_eq(mdr_graph_cache_stats(w.c, &st), MDR_OK);
    cr_assert_eq(st.steps, 6);
    cr_assert_eq(st.inline_steps, 0, "variant %d", variant);
    world_fini(&w);
  }
  /* device ids with nothing to stage (no inputs, EXACT: no slot) on an
   * inline-capable cache: no inline step; host steps are */
  world_init(&w, b, 0);
  mdr_graph_cache_options o = world_options(&w, MDR_GRAPH_EXACT, MDR_ZERO_FUSED);
  world_cache(&w, &o, "maybe");
  cr_assert_neq(strstr(mdr_backend_last_error(b), "MDR_STAGE_INLINE"), NULL, "%s", mdr_backend_last_error(b));
  mdr_dptr ids = 0;
  cr_assert_eq(mdr_backend_alloc(b, M * 4, &ids), MDR_OK);
  step_values v;
  make_values(&rng, &v, 5, 1);
  cr_assert_eq(mdr_backend_copy_h2d(b, ids, v.ids, 5 * 4), MDR_OK);
  for (int k = 0; k < 2; k++) {
    world_poison(&w, &v);
    cr_assert_eq(mdr_graph_cache_step_device(w.c, ids, 5), MDR_OK, "%s", mdr_backend_last_error(b));
    world_expect(&w, &v, "device ids");
  }
  mdr_graph_stats st;
  cr_assert_eq(mdr_graph_cache_stats(w.c, &st), MDR_OK);
  cr_assert_eq(st.inline_steps, 0);
  cr_assert_eq(step_counted(&w, &rng, 5, 1), 1, "a host step of the same count: inline (\"maybe\" is on)");
  mdr_backend_free(b, ids);
  world_fini(&w);
  mdr_backend_destroy(b);
}
