/* comm.c — what every communicator shares, whatever its transport
 * (include/mdr/comm.h): the group of ranks made together (abort flag, the
 * lockstep record of graph-cache options), liveness, teardown, queries,
 * the arena on a communicator and the all-reduce of an arena buffer's
 * rows, all through struct mdr_comm_ops (comm_impl.h). Each transport
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
  free(g);
}

mdr_status mdr_comm_check_alive(const mdr_comm *c, const char *what) {
  if (!atomic_load(&c->group->aborted)) return MDR_OK;
  return mdr_backend_fail(c->b, MDR_ERR_STATE, "comm: %s on rank %d of an aborted communicator", what,
                          c->rank);
}

mdr_status mdr_comm_note_cache(mdr_comm *c, uint64_t h) {
  const int k = c->caches;
  if (k >= MDR_COMM_CACHES_CHECKED) { /* past what is tracked: not checked */
    c->caches++;
    return MDR_OK;
  }
  mdr_comm_group *g = c->group;
  while (atomic_flag_test_and_set(&g->lock)) {
  }
  const uint64_t first = g->cache_options[k];
  if (!first) g->cache_options[k] = h;
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
  c->ops->cancel(c);
}

void mdr_comm_free(mdr_comm *c) {
  c->ops->destroy(c);
  mdr_comm_group_release(c->group);
  free(c);
}

mdr_status mdr_comm_check_backends(mdr_backend *const *backends, int n, mdr_comm **out) {
  if (!out || n <= 0) return MDR_ERR_INVALID_ARGUMENT;
  for (int i = 0; i < n; i++) out[i] = NULL;
  if (!backends) return MDR_ERR_INVALID_ARGUMENT;
  for (int i = 0; i < n; i++)
    if (!backends[i]) return MDR_ERR_INVALID_ARGUMENT;
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

  /* the transport's comm region follows the buffers, inside the window */
  const size_t region = comms[0]->ops->region_bytes(comms[0]);
  const size_t region_off = ((size_t)total + 255u) & ~(size_t)255u;
  mdr_dptr slab[n];
  int kind[n];
  st = comms[0]->ops->slab_alloc(comms, n, region_off + region, region_off, slab, kind);
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

/* ---- the all-reduce of a buffer's rows ---- */

size_t mdr_comm_region_off(const mdr_arena *a) { return (mdr_arena_slab_bytes(a) + 255u) & ~(size_t)255u; }

/* Measured on 2xH200 (NVLink NV18), the K-batch figures of mdr-bench-tp
 * (bench/results/h200x2-2026-11-30-session4/, docs/TP.md): one-shot beats
 * two-shot at every size up to its scratch's 2 MiB, and two-shot beats
 * both NCCL paths at every size above (4-32 MiB), so NCCL is never taken
 * there; a machine where it wins above some size sets two_shot_max. */
const mdr_ar_table mdr_ar_auto_table = {
    .one_shot_max = MDR_AR_ONE_SHOT_MAX_BYTES,
    .two_shot_max = SIZE_MAX,
};

const char *mdr_ar_algo_name(mdr_ar_algo a) {
  static const char *const k_names[MDR_AR_ALGO_COUNT] = {"auto", "nccl", "one-shot", "two-shot"};
  return (int)a >= 0 && a < MDR_AR_ALGO_COUNT ? k_names[a] : "unknown";
}

mdr_all_reduce_desc mdr_all_reduce_desc_make(mdr_buffer buf, mdr_dtype dt, size_t tokens) {
  return (mdr_all_reduce_desc){
      .buf = buf, .dtype = dt, .tokens = tokens, .count_ptr = 0, .residual = MDR_BUF_COUNT, .algo = MDR_AR_AUTO};
}

int mdr_comm_all_reduce_kernels(const mdr_arena *a) {
  const mdr_comm *c = a ? mdr_arena_comm(a) : NULL;
  return c ? c->ops->kernels(c, mdr_arena_slab_base(a)) : 0;
}

/* Why mdr's kernels cannot take `bytes` of rows of row_bytes (NULL: they
 * can). */
static const char *kernel_refusal(const mdr_arena *a, size_t row_bytes, size_t bytes, mdr_ar_algo algo) {
  if (!mdr_comm_all_reduce_kernels(a))
    return "mdr's kernels do not run on this arena (mdr_comm_all_reduce_kernels: see the arena's create)";
  if (row_bytes % 16 != 0) return "rows are not a multiple of 16 bytes";
  if (algo == MDR_AR_ONE_SHOT && bytes > MDR_AR_ONE_SHOT_MAX_BYTES)
    return "the message is over MDR_AR_ONE_SHOT_MAX_BYTES (the one-shot scratch)";
  return NULL;
}

static mdr_ar_algo choose(const mdr_arena *a, size_t row_bytes, size_t bytes, int counted) {
  if (kernel_refusal(a, row_bytes, bytes, MDR_AR_TWO_SHOT)) return MDR_AR_NCCL;
  if (counted) return MDR_AR_AUTO;
  if (bytes <= mdr_ar_auto_table.one_shot_max) return MDR_AR_ONE_SHOT;
  if (bytes <= mdr_ar_auto_table.two_shot_max) return MDR_AR_TWO_SHOT;
  return MDR_AR_NCCL;
}

mdr_ar_algo mdr_comm_all_reduce_choice(const mdr_arena *a, size_t bytes, int counted) {
  if (!a || !mdr_arena_comm(a)) return MDR_AR_ALGO_COUNT;
  return choose(a, 16, bytes, counted);
}

/* The rows of `buf` as elements of dt: row bytes, or 0 with the failure
 * recorded. */
static size_t row_bytes_of(mdr_arena *a, mdr_buffer buf, mdr_dtype dt, const char *role) {
  const size_t esize = mdr_dtype_bytes(dt), m = mdr_arena_max_batch_tokens(a), bytes = mdr_arena_bytes(a, buf);
  const mdr_dptr ptr = mdr_arena_ptr(a, buf);
  if (!ptr || bytes % m != 0 || (bytes / m) % esize != 0) {
    mdr_backend_fail(mdr_arena_backend(a), MDR_ERR_INVALID_ARGUMENT,
                     "all-reduce: %s buffer %s has no rows of %zu-byte elements (%zu bytes, %zu rows)", role,
                     mdr_buffer_name(buf) ? mdr_buffer_name(buf) : "(unknown)", esize, bytes, m);
    return 0;
  }
  return bytes / m;
}

mdr_status mdr_comm_all_reduce(mdr_arena *a, const mdr_all_reduce_desc *d, mdr_stream stream) {
  if (!a) return MDR_ERR_INVALID_ARGUMENT;
  mdr_backend *b = mdr_arena_backend(a);
  if (!d) return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT, "all-reduce: NULL descriptor");
  mdr_comm *c = mdr_arena_comm(a);
  if (!c) return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT, "all-reduce: the arena is not on a communicator");
  if ((int)d->dtype < 0 || d->dtype >= MDR_DTYPE_COUNT)
    return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT, "all-reduce: dtype %d is not a mdr_dtype", (int)d->dtype);
  if ((int)d->algo < 0 || d->algo >= MDR_AR_ALGO_COUNT)
    return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT, "all-reduce: algo %d is not a mdr_ar_algo", (int)d->algo);
  const size_t row_bytes = row_bytes_of(a, d->buf, d->dtype, "the");
  if (!row_bytes) return MDR_ERR_INVALID_ARGUMENT;
  const int has_res = d->residual != MDR_BUF_COUNT;
  if (has_res) {
    if (d->residual == d->buf)
      return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT, "all-reduce: the residual is the reduced buffer itself");
    const size_t rb = row_bytes_of(a, d->residual, d->dtype, "the residual");
    if (!rb) return MDR_ERR_INVALID_ARGUMENT;
    if (rb != row_bytes)
      return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT,
                              "all-reduce: residual rows of %zu bytes, reduced rows of %zu: they must match", rb,
                              row_bytes);
  }
  const size_t m = mdr_arena_max_batch_tokens(a);
  if (d->tokens > m)
    return mdr_backend_fail(b, MDR_ERR_OUT_OF_RANGE, "all-reduce: %zu tokens (0 .. %zu)", d->tokens, m);
  if (d->count_ptr && d->tokens == 0)
    return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT,
                            "all-reduce: a count read on the device needs a bound (tokens > 0)");
  const size_t bytes = d->tokens * row_bytes;
  mdr_ar_algo algo = d->algo;
  if (algo == MDR_AR_ONE_SHOT || algo == MDR_AR_TWO_SHOT) {
    const char *why = kernel_refusal(a, row_bytes, bytes, algo);
    if (why)
      return mdr_backend_fail(b, MDR_ERR_UNSUPPORTED, "all-reduce: %s of %zu bytes refused: %s",
                              mdr_ar_algo_name(algo), bytes, why);
  } else if (algo == MDR_AR_AUTO) {
    algo = choose(a, row_bytes, bytes, d->count_ptr != 0);
  }
  mdr_status st = mdr_comm_check_alive(c, "all-reduce");
  if (st != MDR_OK || d->tokens == 0) return st;
  const mdr_dptr slab = mdr_arena_slab_base(a), ptr = mdr_arena_ptr(a, d->buf);
  const mdr_ar_call call = {
      .slab = slab,
      .region_off = mdr_comm_region_off(a),
      .ptr = ptr,
      .residual = has_res ? mdr_arena_ptr(a, d->residual) : 0,
      .row_bytes = row_bytes,
      .rows = d->tokens,
      .count_ptr = d->count_ptr,
      .dt = d->dtype,
      .algo = algo,
  };
  st = c->ops->all_reduce(c, &call, stream);
  if (st != MDR_OK) mdr_comm_mark_aborted(c); /* no peer waits for this rank's missing share */
  return st;
}

mdr_status mdr_comm_all_reduce_rows(mdr_arena *a, mdr_buffer buf, mdr_dtype dt, size_t tokens,
                                    mdr_stream stream) {
  const mdr_all_reduce_desc d = mdr_all_reduce_desc_make(buf, dt, tokens);
  return mdr_comm_all_reduce(a, &d, stream);
}

static mdr_status epoch_call(mdr_arena *a, uint32_t *get, const uint32_t *set) {
  if (!a) return MDR_ERR_INVALID_ARGUMENT;
  mdr_comm *c = mdr_arena_comm(a);
  if (!c)
    return mdr_backend_fail(mdr_arena_backend(a), MDR_ERR_INVALID_ARGUMENT,
                            "all-reduce epoch: the arena is not on a communicator");
  if (!set && !get) return mdr_backend_fail(c->b, MDR_ERR_INVALID_ARGUMENT, "all-reduce epoch: NULL out");
  mdr_status st = mdr_comm_check_alive(c, "all-reduce epoch");
  if (st != MDR_OK) return st;
  return c->ops->epoch(c, mdr_arena_slab_base(a), mdr_comm_region_off(a), get, set);
}

mdr_status mdr_comm_all_reduce_epoch(mdr_arena *a, uint32_t *epoch) { return epoch_call(a, epoch, NULL); }

mdr_status mdr_comm_all_reduce_set_epoch(mdr_arena *a, uint32_t epoch) { return epoch_call(a, NULL, &epoch); }
