/* comm_impl.h — the communicator seam (private).
 *
 * A communicator is one rank's handle; its ops are the NCCL implementation
 * (comm_nccl.c) or the host one (comm_host.c), each with its public
 * constructors; both build on comm.c, which holds what every communicator
 * shares: the group of ranks made together (abort flag, the options a
 * lockstep cache was made with), queries, the arena on a communicator
 * (layout check, slab allocation); src/all_reduce.c the all-reduce's
 * checks, algorithm choice and protocol state. */
#ifndef MDR_COMM_IMPL_H
#define MDR_COMM_IMPL_H

#include <stdatomic.h>

#include "arena_impl.h"
#include "ar_protocol.h"
#include "mdr/comm.h"

typedef struct mdr_comm_group {
  atomic_int aborted;
  atomic_int refs;
  /* the options hash of each rank's k-th graph cache, first come first set;
   * guarded by `lock`; grows as caches are made (no limit) */
  atomic_flag lock;
  uint64_t *cache_options;
  int cache_count, cache_cap;
  void *impl; /* the implementation's shared state (host: barrier, buffers; nccl: host words) */
  void (*impl_free)(void *impl);
} mdr_comm_group;

struct mdr_comm_ops {
  const char *name;
  /* Run or enqueue the all-reduce on s: the call's part of *k is filled
   * (src/all_reduce.c); the transport fills its own part (peers, region,
   * limits) and runs it. k->algo is MDR_ARP_NCCL, ONE_SHOT, TWO_SHOT, or
   * AUTO (a count read on the device: the kernel picks). */
  mdr_status (*all_reduce)(mdr_comm *c, mdr_ar_call *k, mdr_dptr slab, mdr_stream s);
  /* Fill the transport's part of *k for the slab, as all_reduce does
   * before it launches mdr's kernel, and run nothing (the measurement
   * entry of src/all_reduce_impl.h). MDR_ERR_UNSUPPORTED where mdr's
   * kernels do not run. Optional (NULL: unsupported). */
  mdr_status (*call_of)(mdr_comm *c, mdr_ar_call *k, mdr_dptr slab);
  /* Bytes the transport keeps at the end of an arena's slab (its comm
   * region, inside the window) for messages of up to max_message bytes;
   * 0 for none. */
  size_t (*region_bytes)(const mdr_comm *c, size_t max_message);
  /* 1 when mdr's kernels run on this slab (every rank agrees). */
  int (*kernels)(const mdr_comm *c, mdr_dptr slab);
  /* Read (set == NULL) or write every block's protocol counters of the
   * slab's region (the test hook of src/all_reduce_impl.h); blocking.
   * Writing barriers = B also writes every flag to B: the state B
   * barriers leave. MDR_ERR_UNSUPPORTED where mdr's kernels do not run. */
  mdr_status (*state)(mdr_comm *c, mdr_dptr slab, size_t region_off, mdr_arp_block *get, const mdr_arp_block *set);
  /* 1, with its text in `why`, when this rank's transport saw a failure
   * the group does not know of yet (a kernel that gave up). Optional. */
  int (*failed)(const mdr_comm *c, char *why, size_t n);
  /* All-gather of a small host record: ranks cs[0..n-1] (n == 1: the
   * calling rank alone, one thread per rank; n == size: every rank, one
   * thread) give mine[i * bytes ...]; all gets size * bytes, rank order.
   * Collective, blocking. */
  mdr_status (*exchange)(mdr_comm *const *cs, int n, const void *mine, size_t bytes, void *all);
  /* Allocate each rank's slab of `bytes` and register it once as a
   * symmetric window when the implementation can (collective when it
   * registers); the comm region (at region_off, for messages of up to
   * max_message bytes) is set up there. kind[i]: MDR_WINDOW_SYMMETRIC,
   * PLAIN or HOST. On failure nothing is left allocated. */
  mdr_status (*slab_alloc)(mdr_comm *const *cs, int n, size_t bytes, size_t region_off, size_t max_message,
                           mdr_dptr *slab, int *kind);
  void (*slab_free)(mdr_comm *c, mdr_dptr slab);
  /* Stop this rank's transport after a failure: wake its waiters (host),
   * raise the host abort word that mdr's kernels poll, ncclCommAbort a
   * communicator mdr owns (only when `hard`). Never ends the process. */
  void (*cancel)(mdr_comm *c, int hard);
  void (*destroy)(mdr_comm *c);
};

struct mdr_comm {
  const struct mdr_comm_ops *ops;
  mdr_backend *b;
  int rank, size, device;
  int caches; /* graph caches this rank made on arenas of this communicator */
  long timeout_ms; /* MDR_AR_TIMEOUT_MS at create (0: no limit) */
  int norm_fuse;   /* MDR_AR_NORM_FUSE at create: an MDR_ARP_NORM_FUSE_ value (kernels/ar_protocol.h) */
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
/* MDR_ERR_STATE, recorded on c's backend, when the group was aborted or
 * the transport saw a failure (which then aborts the group). */
mdr_status mdr_comm_check_alive(mdr_comm *c, const char *what);
/* A graph cache of options hash h is being made on this rank: MDR_OK when
 * it matches the same-numbered cache of the ranks that made theirs first
 * (ranks in this process: a group made by create_local or create_host);
 * MDR_ERR_INVALID_ARGUMENT otherwise. Ranks of other processes cannot be
 * checked here. */
mdr_status mdr_comm_note_cache(mdr_comm *c, uint64_t h);

/* Bytes per element. */
size_t mdr_dtype_bytes(mdr_dtype dt);

/* The common checks of the array constructors (create_local,
 * create_host): out[0..n-1] cleared first, then MDR_ERR_INVALID_ARGUMENT
 * for a NULL array, n <= 0 or a NULL backend. */
mdr_status mdr_comm_check_backends(mdr_backend *const *backends, int n, mdr_comm **out);

#endif
