/* comm_impl.h — the communicator seam (private).
 *
 * A communicator is one rank's handle; its ops are the NCCL implementation
 * (comm_nccl.c) or the host one (comm_host.c), each with its public
 * constructors; both build on comm.c, which holds what every communicator
 * shares: the group of ranks made together (abort flag, the options a
 * lockstep cache was made with), queries, argument checks of the
 * all-reduce, the arena on a communicator (layout check, slab
 * allocation). */
#ifndef MDR_COMM_IMPL_H
#define MDR_COMM_IMPL_H

#include <stdatomic.h>

#include "arena_impl.h"
#include "mdr/comm.h"

/* Graph caches a rank may make on a communicator whose options are checked
 * against the other ranks' (the k-th cache of every rank must match). */
enum { MDR_COMM_CACHES_CHECKED = 16 };

typedef struct mdr_comm_group {
  atomic_int aborted;
  atomic_int refs;
  /* the options hash of each rank's k-th graph cache, first come first set
   * (0: none yet); guarded by `lock` */
  atomic_flag lock;
  uint64_t cache_options[MDR_COMM_CACHES_CHECKED];
  void *impl; /* the implementation's shared state (host: barrier, buffers) */
  void (*impl_free)(void *impl);
} mdr_comm_group;

/* One all-reduce, checked and resolved by comm.c. */
typedef struct mdr_ar_call {
  mdr_dptr slab;       /* the arena's slab (a window) */
  size_t region_off;   /* the transport's comm region in it */
  mdr_dptr ptr;        /* the rows (inside the slab) */
  mdr_dptr residual;   /* 0: none; else the residual rows (inside the slab) */
  size_t row_bytes;
  size_t rows;         /* rows, or the bound when count_ptr is set */
  mdr_dptr count_ptr;  /* 0, or the device uint32 row count */
  mdr_dtype dt;
  mdr_ar_algo algo;    /* MDR_AR_NCCL, ONE_SHOT, TWO_SHOT; AUTO: counted, mdr's kernel picks */
} mdr_ar_call;

struct mdr_comm_ops {
  const char *name;
  /* Enqueue the all-reduce on s (the arithmetic of include/mdr/comm.h). */
  mdr_status (*all_reduce)(mdr_comm *c, const mdr_ar_call *call, mdr_stream s);
  /* Bytes the transport keeps at the end of an arena's slab (its comm
   * region, inside the window); 0 for none. */
  size_t (*region_bytes)(const mdr_comm *c);
  /* 1 when mdr's kernels run on this slab (every rank agrees). */
  int (*kernels)(const mdr_comm *c, mdr_dptr slab);
  /* Read (set == NULL) or write the epoch of the slab's kernels; blocking.
   * MDR_ERR_UNSUPPORTED where there are none. */
  mdr_status (*epoch)(mdr_comm *c, mdr_dptr slab, size_t region_off, uint32_t *get, const uint32_t *set);
  /* All-gather of a small host record: ranks cs[0..n-1] (n == 1: the
   * calling rank alone, one thread per rank; n == size: every rank, one
   * thread) give mine[i * bytes ...]; all gets size * bytes, rank order.
   * Collective, blocking. */
  mdr_status (*exchange)(mdr_comm *const *cs, int n, const void *mine, size_t bytes, void *all);
  /* Allocate each rank's slab of `bytes` and register it once as a
   * symmetric window when the implementation can (collective when it
   * registers); the comm region (region_bytes at region_off) is set up
   * there. kind[i]: MDR_WINDOW_SYMMETRIC, PLAIN or HOST. On failure
   * nothing is left allocated. */
  mdr_status (*slab_alloc)(mdr_comm *const *cs, int n, size_t bytes, size_t region_off, mdr_dptr *slab, int *kind);
  void (*slab_free)(mdr_comm *c, mdr_dptr slab);
  /* Stop this rank's transport after a failure: wake its waiters (host),
   * or ncclCommAbort a communicator mdr owns. Never ends the process. */
  void (*cancel)(mdr_comm *c);
  void (*destroy)(mdr_comm *c);
};

struct mdr_comm {
  const struct mdr_comm_ops *ops;
  mdr_backend *b;
  int rank, size, device;
  int caches; /* graph caches this rank made on arenas of this communicator */
  mdr_comm_group *group;
  void *impl; /* per rank: ncclComm_t, or the host rank's state */
};

/* A group shared by n ranks (refs = n), or NULL when out of memory. */
mdr_comm_group *mdr_comm_group_new(int n);
/* Drop one rank's reference; the last frees the group (and impl). */
void mdr_comm_group_release(mdr_comm_group *g);
/* Abort the group (every rank sees it) and this rank's transport. */
void mdr_comm_mark_aborted(mdr_comm *c);
/* Tear one rank down: its transport, its group reference, the handle. */
void mdr_comm_free(mdr_comm *c);
/* MDR_ERR_STATE, recorded on c's backend, when the group was aborted. */
mdr_status mdr_comm_check_alive(const mdr_comm *c, const char *what);
/* A graph cache of options hash h is being made on this rank: MDR_OK when
 * it matches the same-numbered cache of the ranks that made theirs first
 * (ranks in this process: a group made by create_local or create_host);
 * MDR_ERR_INVALID_ARGUMENT otherwise. Ranks of other processes cannot be
 * checked here. */
mdr_status mdr_comm_note_cache(mdr_comm *c, uint64_t h);

/* The table behind MDR_AR_AUTO (docs/TP.md): mdr's one-shot up to
 * one_shot_max bytes, two-shot up to two_shot_max, NCCL above. */
typedef struct mdr_ar_table {
  size_t one_shot_max, two_shot_max;
} mdr_ar_table;
extern const mdr_ar_table mdr_ar_auto_table;

/* Where a communicator arena's comm region starts (after its buffers). */
size_t mdr_comm_region_off(const mdr_arena *a);

/* Bytes per element. */
size_t mdr_dtype_bytes(mdr_dtype dt);

/* The common checks of the array constructors (create_local,
 * create_host): out[0..n-1] cleared first, then MDR_ERR_INVALID_ARGUMENT
 * for a NULL array, n <= 0 or a NULL backend. */
mdr_status mdr_comm_check_backends(mdr_backend *const *backends, int n, mdr_comm **out);

#endif
