/* comm.c — what every communicator shares, whatever its transport
 * (include/mdr/comm.h): the group of ranks made together (abort flag, the
 * lockstep record of graph-cache options), liveness, teardown, queries,
 * the arena on a communicator, all through struct mdr_comm_ops
 * (comm_impl.h); src/all_reduce.c has the all-reduce. Each transport
 * defines its own constructors and builds on this file (comm_nccl.c:
 * adopt, create_local; comm_host.c: create_host); nothing here calls into
 * a transport but through its ops. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm_impl.h"

/* ---- groups, liveness, teardown ---- */

mdr_comm_group *mdr_comm_group_new(int n) {
  mdr_comm_group *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  atomic_init(&g->aborted, 0);
  atomic_init(&g->refs, n);
  atomic_flag_clear(&g->lock);
  return g;
}

void mdr_comm_group_release(mdr_comm_group *g) {
  if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
  if (g->impl_free) g->impl_free(g->impl);
  free(g->cache_options);
  free(g);
}

mdr_status mdr_comm_check_alive(mdr_comm *c, const char *what) {
  char why[256];
  if (!atomic_load(&c->group->aborted) && c->ops->failed && c->ops->failed(c, why, sizeof why)) {
    mdr_comm_mark_aborted(c);
    return mdr_backend_fail(c->b, MDR_ERR_STATE, "comm: %s on rank %d refused: %s", what, c->rank, why);
  }
  if (!atomic_load(&c->group->aborted)) return MDR_OK;
  if (c->ops->failed && c->ops->failed(c, why, sizeof why))
    return mdr_backend_fail(c->b, MDR_ERR_STATE, "comm: %s on rank %d of an aborted communicator: %s", what,
                            c->rank, why);
  return mdr_backend_fail(c->b, MDR_ERR_STATE, "comm: %s on rank %d of an aborted communicator", what,
                          c->rank);
}

mdr_status mdr_comm_note_cache(mdr_comm *c, uint64_t h) {
  const int k = c->caches;
  mdr_comm_group *g = c->group;
  while (atomic_flag_test_and_set(&g->lock)) {
  }
  if (k >= g->cache_cap) { /* every cache is compared: the record grows */
    const int cap = g->cache_cap ? 2 * g->cache_cap : 16;
    uint64_t *grown = realloc(g->cache_options, (size_t)cap * sizeof *grown);
    if (!grown) {
      atomic_flag_clear(&g->lock);
      return mdr_backend_fail(c->b, MDR_ERR_OUT_OF_MEMORY, "graph cache: the lockstep record of cache #%d", k);
    }
    g->cache_options = grown;
    g->cache_cap = cap;
  }
  uint64_t first = 0;
  if (k < g->cache_count) {
    first = g->cache_options[k];
  } else { /* the first rank to make its k-th cache sets the record */
    g->cache_options[g->cache_count++] = h;
  }
  atomic_flag_clear(&g->lock);
  if (first && first != h)
    return mdr_backend_fail(c->b, MDR_ERR_INVALID_ARGUMENT,
                            "graph cache: rank %d's cache #%d has other options than another rank's: caches of "
                            "a tensor-parallel step must be made alike on every rank (lockstep)",
                            c->rank, k);
  c->caches++;
  return MDR_OK;
}

size_t mdr_dtype_bytes(mdr_dtype dt) {
  switch (dt) {
    case MDR_DTYPE_BF16:
    case MDR_DTYPE_FP16: return 2;
    case MDR_DTYPE_FP32: return 4;
    default: return 0;
  }
}

void mdr_comm_mark_aborted(mdr_comm *c) {
  atomic_store(&c->group->aborted, 1);
  c->ops->cancel(c, 1);
}

/* A rank that goes away aborts its group, so no peer waits for it; the
 * transport's own teardown (ncclCommDestroy of a communicator mdr owns)
 * stays its destroy's. */
void mdr_comm_free(mdr_comm *c) {
  atomic_store(&c->group->aborted, 1);
  c->ops->cancel(c, 0);
  c->ops->destroy(c);
  mdr_comm_group_release(c->group);
  free(c);
}

mdr_status mdr_comm_check_backends(mdr_backend *const *backends, int n, mdr_comm **out) {
  if (!out || n <= 0) return MDR_ERR_INVALID_ARGUMENT;
  for (int i = 0; i < n; i++) out[i] = NULL;
  if (!backends) return MDR_ERR_INVALID_ARGUMENT;
  for (int i = 0; i < n; i++)
    if (!backends[i]) {
      for (int j = 0; j < n; j++) /* the text goes to a backend the caller gave, if any */
        if (backends[j])
          return mdr_backend_fail(backends[j], MDR_ERR_INVALID_ARGUMENT, "comm: rank %d's backend is NULL", i);
      return MDR_ERR_INVALID_ARGUMENT;
    }
  return MDR_OK;
}

/* ---- queries ---- */

int mdr_comm_rank(const mdr_comm *c) { return c ? c->rank : -1; }
int mdr_comm_size(const mdr_comm *c) { return c ? c->size : -1; }
int mdr_comm_device(const mdr_comm *c) { return c ? c->device : -1; }
mdr_backend *mdr_comm_backend(const mdr_comm *c) { return c ? c->b : NULL; }

void mdr_comm_abort(mdr_comm *c) {
  if (c) mdr_comm_mark_aborted(c);
}

void mdr_comm_destroy(mdr_comm *c) {
  if (c) mdr_comm_free(c);
}

/* ---- the arena on a communicator ---- */

const char *mdr_window_name(mdr_window w) {
  static const char *const k_names[MDR_WINDOW_COUNT] = {"none", "symmetric", "plain", "host"};
  return (int)w >= 0 && w < MDR_WINDOW_COUNT ? k_names[w] : "unknown";
}

mdr_window mdr_arena_window(const mdr_arena *a) {
  return a ? (mdr_window)mdr_arena_slab_owner_of(a)->window : MDR_WINDOW_NONE;
}

mdr_comm *mdr_arena_comm(const mdr_arena *a) { return a ? mdr_arena_slab_owner_of(a)->comm : NULL; }

static void release_comm_slab(void *ctx, mdr_dptr slab) {
  mdr_comm *c = ctx;
  c->ops->slab_free(c, slab);
}

/* What every rank's layout must agree on: a hash of the sizes, and the
 * slab's total bytes. */
typedef struct layout_record {
  uint64_t hash;
  uint64_t total;
} layout_record;

static uint64_t hash_sizes(const mdr_sizes *s) {
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a over the sizes' words */
  const size_t words[] = {s->max_batch_tokens, s->logits_rows};
  for (int i = 0; i < MDR_BUF_COUNT + 2; i++) {
    uint64_t v = i < MDR_BUF_COUNT ? (uint64_t)s->bytes[i] : (uint64_t)words[i - MDR_BUF_COUNT];
    for (int k = 0; k < 8; k++) h = (h ^ ((v >> (8 * k)) & 0xff)) * 0x100000001b3ull;
  }
  return h;
}

mdr_status mdr_arena_create_on_comms(mdr_comm *const *comms, int n, const mdr_sizes *s, mdr_arena **out) {
  if (!out || n <= 0) return MDR_ERR_INVALID_ARGUMENT;
  for (int i = 0; i < n; i++) out[i] = NULL;
  if (!comms) return MDR_ERR_INVALID_ARGUMENT;
  for (int i = 0; i < n; i++)
    if (!comms[i]) return MDR_ERR_INVALID_ARGUMENT;
  const int size = comms[0]->size;
  if (n != 1 && n != size)
    return mdr_backend_fail(comms[0]->b, MDR_ERR_INVALID_ARGUMENT,
                            "arena on comm: %d ranks given; give one (a thread per rank) or all %d", n, size);
  for (int i = 0; i < n; i++) {
    mdr_status st = mdr_comm_check_alive(comms[i], "arena create");
    if (st != MDR_OK) return st;
  }

  /* every rank computes its layout; a rank with bad sizes still takes part
   * in the exchange (with a record no one matches), so no rank waits */
  layout_record mine[n > 0 ? n : 1];
  mdr_status local[n > 0 ? n : 1];
  for (int i = 0; i < n; i++) {
    size_t offset[MDR_BUF_COUNT], total = 0;
    local[i] = s ? mdr_arena_layout(comms[i]->b, s, offset, &total)
                 : mdr_backend_fail(comms[i]->b, MDR_ERR_INVALID_ARGUMENT, "arena on comm: NULL sizes");
    mine[i] = local[i] == MDR_OK ? (layout_record){hash_sizes(s), total} : (layout_record){0, 0};
  }
  layout_record *all = calloc((size_t)size, sizeof *all);
  if (!all) return mdr_backend_fail(comms[0]->b, MDR_ERR_OUT_OF_MEMORY, "arena on comm: layout records");
  mdr_status st = comms[0]->ops->exchange(comms, n, mine, sizeof *mine, all);
  if (st == MDR_OK) {
    for (int i = 0; i < n; i++) {
      if (local[i] != MDR_OK) {
        st = local[i];
        continue;
      }
      for (int r = 0; r < size; r++)
        if (all[r].hash != mine[i].hash || all[r].total != mine[i].total) {
          st = mdr_backend_fail(comms[i]->b, MDR_ERR_INVALID_ARGUMENT,
                                "arena on comm: rank %d's layout (%llu bytes) differs from rank %d's (%llu "
                                "bytes): every rank must pass the same sizes",
                                r, (unsigned long long)all[r].total, comms[i]->rank,
                                (unsigned long long)mine[i].total);
          break;
        }
    }
  }
  const uint64_t total = mine[0].total;
  free(all);
  if (st != MDR_OK) return st;

  /* the transport's comm region follows the buffers, inside the window,
   * sized for the largest buffer as one message */
  size_t max_message = 0;
  for (int i = 0; i < MDR_BUF_COUNT; i++)
    if (s->bytes[i] > max_message) max_message = s->bytes[i];
  const size_t region = comms[0]->ops->region_bytes(comms[0], max_message);
  const size_t region_off = ((size_t)total + 255u) & ~(size_t)255u;
  mdr_dptr slab[n];
  int kind[n];
  st = comms[0]->ops->slab_alloc(comms, n, region_off + region, region_off, max_message, slab, kind);
  if (st != MDR_OK) return st;
  for (int i = 0; i < n && st == MDR_OK; i++) {
    const mdr_arena_slab_owner owner = {
        .release = release_comm_slab, .ctx = comms[i], .comm = comms[i], .window = kind[i]};
    st = mdr_arena_create_on_slab(comms[i]->b, s, slab[i], &owner, &out[i]);
  }
  if (st != MDR_OK) {
    for (int i = 0; i < n; i++) {
      if (out[i]) {
        mdr_arena_destroy(out[i]); /* frees its slab */
        out[i] = NULL;
      } else {
        comms[i]->ops->slab_free(comms[i], slab[i]);
      }
    }
  }
  return st;
}

mdr_status mdr_arena_create_on_comm(mdr_comm *c, const mdr_sizes *s, mdr_arena **out) {
  if (!out) return MDR_ERR_INVALID_ARGUMENT;
  *out = NULL;
  if (!c) return MDR_ERR_INVALID_ARGUMENT;
  return mdr_arena_create_on_comms(&c, 1, s, out);
}

