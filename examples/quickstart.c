/* quickstart.c — the README's "Use it", compiled and run by CTest
 * (`quickstart`, label host).
 *
 * Sizes an arena from a preset, makes a graph cache whose graphs hold the
 * fused zeroing, the token-id upload and a small decode body, runs a few
 * steps, checks that each step's ids reached the arena's token_ids buffer
 * and that the body ran, then destroys everything. Uses the CUDA backend
 * when there is a GPU and the host backend otherwise, and says which.
 * Every call's status is checked; a failure prints the status text and the
 * backend's last error and exits 1. */
#include <mdr/mdr.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* On failure: print what failed and why, and go to the cleanup. */
#define CHECK(call)                                                                 \
  do {                                                                              \
    mdr_status st_ = (call);                                                        \
    if (st_ != MDR_OK) {                                                            \
      fprintf(stderr, "quickstart: %s failed: %s [%s]\n", #call,                   \
              mdr_status_string(st_), mdr_backend_last_error(b));                   \
      goto done;                                                                    \
    }                                                                               \
  } while (0)

/* The engine's own decode work for one step, captured into each graph after
 * the zeroing and the id upload, then replayed with it. Rules
 * (include/mdr/graph.h): only enqueue work on `stream` — no allocation, no
 * synchronisation, nothing on another stream. `tokens` is the graph's token
 * count. Here it stands in for an embedding lookup: it writes 0x01 over the
 * first `tokens` rows of hidden_states. */
typedef struct engine {
  mdr_arena *arena;
} engine;

static mdr_status decode_step(void *user, mdr_stream stream, size_t tokens) {
  engine *e = user;
  size_t row_bytes = mdr_arena_hidden_states_bytes(e->arena) / mdr_arena_max_batch_tokens(e->arena);
  return mdr_backend_memset_async(mdr_arena_backend(e->arena), mdr_arena_hidden_states(e->arena),
                                  0x01, tokens * row_bytes, stream);
}

int main(void) {
  int rc = 1;
  mdr_backend *b = NULL; /* every handle starts NULL: each destroy below accepts NULL */
  mdr_arena *arena = NULL;
  mdr_stream s = NULL;
  mdr_graph_cache *cache = NULL;
  engine eng = {NULL};

  /* 1. Sizes: a preset model and the serve limits (max_batch_tokens,
   *    max_seq_len, kv_block_size, max_batch_size). */
  mdr_model_config cfg;
  mdr_limits lim = {64, 4096, 16, 4};
  mdr_sizes sizes;
  CHECK(mdr_model_preset("qwen3-next-80b", &cfg));
  CHECK(mdr_sizes_from_config(&cfg, &lim, &sizes));

  /* 2. A backend: the GPU when there is one, else host memory. */
  mdr_status st = mdr_backend_cuda_create(0, &b);
  if (st != MDR_OK) {
    printf("quickstart: no CUDA backend (%s); using the host backend\n", mdr_status_string(st));
    b = NULL;
    CHECK(mdr_backend_host_create(&b));
  }
  printf("quickstart: backend %s\n", mdr_backend_name(b));

  /* 3. The arena (one allocation), a stream, and a graph cache over both. */
  CHECK(mdr_arena_create(b, &sizes, &arena));
  CHECK(mdr_backend_stream_create(b, &s));
  eng.arena = arena;
  mdr_graph_cache_options o;
  mdr_graph_cache_options_default(&o);
  o.zero = MDR_ZERO_FUSED; /* zeroing + id upload in one kernel node */
  o.body = decode_step;
  o.user = &eng;
  CHECK(mdr_graph_cache_create(arena, s, &o, &cache));

  /* 4. Decode steps: one graph replay each (captured on the first step of a
   *    token count). Check each step's ids and the body's rows. */
  static const size_t counts[] = {1, 4, 1, 4, 7};
  size_t n_steps = sizeof counts / sizeof counts[0];
  for (size_t k = 0; k < n_steps; k++) {
    uint32_t ids[8], got[8];
    unsigned char first_byte = 0;
    for (size_t i = 0; i < counts[k]; i++) ids[i] = (uint32_t)(1000 * (k + 1) + i);
    CHECK(mdr_graph_cache_step(cache, ids, counts[k]));
    CHECK(mdr_backend_synchronize(b, s)); /* a real loop syncs only to read results */
    CHECK(mdr_backend_copy_d2h(b, got, mdr_arena_token_ids(arena), counts[k] * sizeof got[0]));
    CHECK(mdr_backend_copy_d2h(b, &first_byte, mdr_arena_hidden_states(arena), 1));
    if (memcmp(got, ids, counts[k] * sizeof ids[0]) != 0 || first_byte != 0x01) {
      fprintf(stderr, "quickstart: step %zu (%zu tokens): token_ids or hidden_states wrong\n", k,
              counts[k]);
      goto done;
    }
  }

  mdr_graph_stats stats;
  CHECK(mdr_graph_cache_stats(cache, &stats));
  printf("quickstart: %llu steps, %llu graphs captured, %llu replays from the cache; "
         "token ids checked after every step\n",
         (unsigned long long)stats.steps, (unsigned long long)stats.captures,
         (unsigned long long)stats.hits);
  rc = 0;

done: /* reverse order of creation; every destroy accepts NULL */
  mdr_graph_cache_destroy(cache);
  mdr_backend_stream_destroy(b, s);
  mdr_arena_destroy(arena);
  mdr_backend_destroy(b);
  if (rc == 0) printf("quickstart: ok\n");
  return rc;
}
