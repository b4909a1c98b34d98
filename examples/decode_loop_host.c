/* mdr example — the decode loop's paged-attention inputs on the host
 * backend: what CTest runs without a GPU (test `decode_loop_host`, label
 * host), beside decode_loop.c, which needs one.
 *
 * The same logic as decode_loop.c's paged part (decode_model_paged.c): the
 * same step inputs declared on a graph cache (positions, sequence lengths,
 * query tokens, a block table), the same sequences growing, ending and
 * starting again over mixed token and sequence counts, each step staged
 * with mdr_graph_cache_step_inputs and replayed from the cache's graphs,
 * beside an eager path that uploads the same values itself. The host
 * backend runs no kernels, so where decode_loop's body runs the attention
 * kernel, this loop reads back what that kernel would read (the counts and
 * every input, from the graph's destinations) and runs the attention on
 * them on the CPU. Checks per step, in EXACT, LADDER and DYNAMIC mode:
 *   - the graph's and the eager path's inputs are bit-identical, and equal
 *     to the step's values; the token and sequence counts are the step's;
 *   - rows past the counts up to the graph's bound hold the pad (EXACT and
 *     LADDER; DYNAMIC copies exactly the step's rows);
 *   - the attention over what the graph staged equals, bit for bit, the
 *     reference over the step's own values.
 * Usage: mdr_decode_loop_host [--steps N] [--seed S]   (default 200, 7)
 * Exit codes: 0 ok, 1 mismatch or failure, 2 bad usage. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mdr/mdr.h>

#include "decode_model_paged.h"

#define M 64 /* max_batch_tokens */
#define Q_STRIDE (PAGED_HEADS * PAGED_HEAD_DIM)

#define CHECK(call)                                                                                  \
  do {                                                                                               \
    mdr_status st_ = (call);                                                                         \
    if (st_ != MDR_OK) {                                                                             \
      fprintf(stderr, "decode_loop_host: %s failed: %s [%s]\n", #call, mdr_status_string(st_),      \
              mdr_backend_last_error(b));                                                            \
      goto done;                                                                                     \
    }                                                                                                \
  } while (0)

static uint64_t next_u64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

typedef struct run_state {
  uint16_t *k, *v, *q;      /* KV cache, queries (M rows) */
  double *ref, *got;        /* attention: over the step's values, over what was staged */
  paged_step *st, *staged;  /* the step's values; what the graph's destinations hold */
  size_t failures;
} run_state;

static void fail_step(run_state *r, const char *mode, size_t step, const char *what) {
  if (r->failures++ < 10) printf("MISMATCH %s step %zu (%zu tokens, %zu sequences): %s\n", mode, step,
                                 r->st->tokens, r->st->sequences, what);
}

/* One mode's run: `steps` steps through a cache of that mode. */
static int run_mode(mdr_backend *b, mdr_arena *a, mdr_stream s, mdr_graph_mode mode, size_t steps, uint64_t seed,
                    run_state *r) {
  static const char *const names[] = {"EXACT", "LADDER", "DYNAMIC"};
  const char *name = names[mode];
  int rc = -1;
  mdr_graph_cache *c = NULL;
  mdr_dptr dst[2][PAGED_INPUTS] = {{0}};
  uint32_t *back = malloc(paged_input_bytes(PAGED_IN_BLOCKS, M) + paged_input_bytes(PAGED_IN_POSITIONS, M));
  uint32_t ids[M];
  if (!back) return -1;
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < PAGED_INPUTS; i++) CHECK(mdr_backend_alloc(b, paged_input_bytes(i, M), &dst[k][i]));
  mdr_step_input in[PAGED_INPUTS];
  paged_declare(in, dst[0]);
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.mode = mode;
  o.zero = MDR_ZERO_FUSED;
  o.inputs = in;
  o.n_inputs = PAGED_INPUTS;
  o.max_sequences = PAGED_MAX_SEQS;
  CHECK(mdr_graph_cache_create(a, s, &o, &c));
  paged_state ps;
  paged_init(&ps, seed);
  uint64_t rng = seed;
  for (size_t step = 0; step < steps; step++) {
    const size_t t = 1 + (size_t)(next_u64(&rng) % M);
    paged_next(&ps, t, paged_pick_sequences(&ps, t, PAGED_MAX_SEQS), r->st);
    for (size_t i = 0; i < t; i++) ids[i] = (uint32_t)(next_u64(&rng) % 150000);
    const void *values[1 + PAGED_INPUTS];
    paged_values(r->st, ids, values);
    /* the graph path: one call stages every input; the eager path uploads each */
    CHECK(mdr_graph_cache_step_inputs(c, values, 1 + PAGED_INPUTS, t, r->st->sequences));
    CHECK(mdr_backend_synchronize(b, s));
    for (int i = 0; i < PAGED_INPUTS; i++)
      CHECK(mdr_backend_copy_h2d(b, dst[1][i], values[1 + i], paged_elems(r->st, i) * sizeof(uint32_t)));
    /* what the kernel would read: the counts, then each input */
    uint32_t words[2];
    CHECK(mdr_backend_copy_d2h(b, &words[0], mdr_graph_cache_count_ptr(c), sizeof words[0]));
    CHECK(mdr_backend_copy_d2h(b, &words[1], mdr_graph_cache_sequences_ptr(c), sizeof words[1]));
    if (words[0] != t || words[1] != r->st->sequences) fail_step(r, name, step, "the count words");
    size_t g = 0, bound = 0;
    CHECK(mdr_graph_cache_graph_tokens(c, t, &g));
    CHECK(mdr_graph_cache_sequence_bound(c, t, &bound));
    r->staged->tokens = t;
    r->staged->sequences = r->st->sequences;
    uint32_t *staged[PAGED_INPUTS] = {r->staged->positions, r->staged->seq_lens, r->staged->query_token,
                                      r->staged->block_table};
    for (int i = 0; i < PAGED_INPUTS; i++) {
      const size_t n = paged_elems(r->st, i), bytes = n * sizeof(uint32_t);
      const size_t per_row = i == PAGED_IN_BLOCKS ? PAGED_BLOCKS_PER_SEQ : 1;
      const size_t rows_bound = mode == MDR_GRAPH_DYNAMIC ? 0 : i == PAGED_IN_POSITIONS ? g : bound;
      const size_t n_bound = rows_bound * per_row > n ? rows_bound * per_row : n;
      CHECK(mdr_backend_copy_d2h(b, back, dst[0][i], n_bound * sizeof(uint32_t)));
      memcpy(staged[i], back, bytes);
      char what[96];
      snprintf(what, sizeof what, "input %s: the graph's rows are not the step's values", in[i].name);
      if (memcmp(back, values[1 + i], bytes) != 0) fail_step(r, name, step, what);
      for (size_t k = n; k < n_bound; k++)
        if (back[k] != PAGED_PAD) {
          snprintf(what, sizeof what, "input %s: element %zu past the count is not the pad", in[i].name, k);
          fail_step(r, name, step, what);
          break;
        }
      CHECK(mdr_backend_copy_d2h(b, back, dst[1][i], bytes));
      snprintf(what, sizeof what, "input %s: eager and graph differ", in[i].name);
      if (memcmp(back, staged[i], bytes) != 0) fail_step(r, name, step, what);
    }
    paged_attention_ref(r->st, r->q, Q_STRIDE, r->k, r->v, r->ref);
    paged_attention_ref(r->staged, r->q, Q_STRIDE, r->k, r->v, r->got);
    if (memcmp(r->ref, r->got, r->st->sequences * Q_STRIDE * sizeof *r->ref) != 0)
      fail_step(r, name, step, "the attention over the staged inputs differs from the reference");
  }
  mdr_graph_stats gs;
  CHECK(mdr_graph_cache_stats(c, &gs));
  printf("decode_loop_host: %-7s %zu steps, %zu graphs, %" PRIu64 " replays, %" PRIu64 " eager steps\n", name,
         steps, gs.graphs, gs.hits, gs.eager_steps);
  if (!gs.graphs_disabled && gs.hits == 0) {
    printf("MISMATCH %s: no step replayed a graph\n", name);
    r->failures++;
  }
  rc = 0;
done:
  mdr_graph_cache_destroy(c);
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < PAGED_INPUTS; i++)
      if (dst[k][i]) mdr_backend_free(b, dst[k][i]);
  free(back);
  return rc;
}

int main(int argc, char **argv) {
  size_t steps = 200;
  uint64_t seed = 7;
  for (int i = 1; i < argc; i++) {
    if (i + 1 < argc && strcmp(argv[i], "--steps") == 0) {
      steps = strtoull(argv[++i], NULL, 10);
    } else if (i + 1 < argc && strcmp(argv[i], "--seed") == 0) {
      seed = strtoull(argv[++i], NULL, 10);
    } else {
      fprintf(stderr, "usage: %s [--steps N] [--seed S]\n", argv[0]);
      return 2;
    }
  }
  int rc = 1;
  mdr_backend *b = NULL;
  mdr_arena *a = NULL;
  mdr_stream s = NULL;
  run_state r;
  memset(&r, 0, sizeof r);
  const size_t kv = (size_t)PAGED_BLOCKS * PAGED_BLOCK * PAGED_HEAD_DIM;
  r.k = malloc(kv * sizeof *r.k);
  r.v = malloc(kv * sizeof *r.v);
  r.q = malloc((size_t)M * Q_STRIDE * sizeof *r.q);
  r.ref = malloc((size_t)PAGED_MAX_SEQS * Q_STRIDE * sizeof *r.ref);
  r.got = malloc((size_t)PAGED_MAX_SEQS * Q_STRIDE * sizeof *r.got);
  r.st = malloc(sizeof *r.st);
  r.staged = malloc(sizeof *r.staged);
  if (!r.k || !r.v || !r.q || !r.ref || !r.got || !r.st || !r.staged) goto done;
  uint64_t rng = seed ^ 0x6b76636163686521ull;
  paged_fill_bf16(r.k, kv, &rng);
  paged_fill_bf16(r.v, kv, &rng);
  paged_fill_bf16(r.q, (size_t)M * Q_STRIDE, &rng);

  mdr_model_config cfg;
  mdr_limits lim = {M, 4096, 16, 4};
  mdr_sizes sizes;
  CHECK(mdr_backend_host_create(&b));
  CHECK(mdr_model_preset("qwen3-next-80b", &cfg));
  CHECK(mdr_sizes_from_config(&cfg, &lim, &sizes));
  CHECK(mdr_arena_create(b, &sizes, &a));
  CHECK(mdr_backend_stream_create(b, &s));
  for (int mode = 0; mode < MDR_GRAPH_MODE_COUNT; mode++)
    if (run_mode(b, a, s, (mdr_graph_mode)mode, steps, seed + (uint64_t)mode, &r) != 0) goto done;
  if (r.failures) {
    printf("FAIL: %zu mismatches\n", r.failures);
  } else {
    printf("OK: %zu steps per mode: every input staged, padded and identical to the eager upload; attention "
           "over the staged inputs identical to the reference\n", steps);
    rc = 0;
  }
done:
  mdr_backend_stream_destroy(b, s);
  mdr_arena_destroy(a);
  mdr_backend_destroy(b);
  free(r.k);
  free(r.v);
  free(r.q);
  free(r.ref);
  free(r.got);
  free(r.st);
  free(r.staged);
  return rc;
}
