/* comm_group.c — what every communicator implementation shares below the
 * public face (comm_impl.h): the group of ranks made together (abort flag,
 * the lockstep record of graph-cache options), liveness checks, teardown
 * and element sizes. */
#include <stdlib.h>

#include "comm_impl.h"

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
  c->ops->abort(c);
}

void mdr_comm_free(mdr_comm *c) {
  c->ops->destroy(c);
  mdr_comm_group_release(c->group);
  free(c);
}
