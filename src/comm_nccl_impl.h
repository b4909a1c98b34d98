/* comm_nccl_impl.h — the NCCL communicator's private parts, shared by
 * src/comm_nccl.c (ranks, the all-reduce, the exchange, teardown) and
 * src/comm_nccl_window.c (an arena's slab: its memory, the symmetric
 * window, and what mdr's all-reduce kernels need there). Built with NCCL
 * only (MDR_HAVE_NCCL).
 *
 * Every function here that runs NCCL or CUDA work enters the rank's device
 * itself (src/cuda_scope.h) and leaves the caller's current device as it
 * was; a failure is recorded on the rank's backend, CUDA's error state
 * cleared. */
#ifndef MDR_COMM_NCCL_IMPL_H
#define MDR_COMM_NCCL_IMPL_H

#if defined(MDR_HAVE_NCCL)

#include <nccl.h>

#include "all_reduce_impl.h"
#include "cuda_scope.h"

/* An arena's slab on one rank. */
typedef struct nccl_slab {
  struct nccl_slab *next;
  mdr_dptr ptr;
  ncclWindow_t win;  /* NULL: plain */
  int from_nccl;     /* ncclMemAlloc (else cudaMalloc) */
  size_t region_off; /* the comm region's offset, the same on every rank */
  /* mdr's kernels */
  void *devcomm;  /* mdr_cuda_ar_devcomm_create's, or NULL */
  int kernels;    /* 1: they run on this slab (every rank agreed) */
  int max_blocks; /* grid cap: SMs of the communicator's smallest GPU */
  int pdl;        /* programmatic dependent launch (sm_90+, MDR_AR_PDL not 0) */
  char *peer[MDR_ARP_MAX_RANKS]; /* each rank's slab as this rank reaches it (LSA pointers) */
} nccl_slab;

/* The host words of a group (kernels/ar_protocol.h): pinned, mapped, one
 * allocation for the ranks this process made together. */
typedef struct nccl_words {
  uint32_t *host; /* NULL: none could be allocated (kernels run without) */
  uint32_t *dev;  /* the same words as the GPUs reach them */
  int members;    /* ranks of the group: those the host abort word reaches */
} nccl_words;

typedef struct nccl_rank {
  ncclComm_t comm;
  int owned; /* made by mdr: destroyed (or aborted) by mdr */
  int dead;  /* aborted: not to be used again */
  nccl_slab *slabs;
  /* held while the list changes and while an abort walks it (an abort may
   * come from any thread: mdr_comm_abort) */
  atomic_flag slabs_lock;
} nccl_rank;

static inline nccl_rank *nccl_rank_of(const mdr_comm *c) { return c->impl; }
/* NULL when the group's words could not be allocated. */
static inline nccl_words *nccl_words_of(const mdr_comm *c) { return c->group->impl; }

/* ---- src/comm_nccl.c ---- */

/* Record an NCCL failure on b (its status: ncclInvalidArgument:
 * MDR_ERR_INVALID_ARGUMENT, ncclInvalidUsage: MDR_ERR_STATE, the rest
 * MDR_ERR_BACKEND), with NCCL's error string and comm's last-error text
 * (comm may be NULL). Returns the status. */
mdr_status mdr_nccl_fail(mdr_backend *b, ncclComm_t comm, ncclResult_t r, const char *what);
/* Record a CUDA failure on b (MDR_ERR_OUT_OF_MEMORY or MDR_ERR_BACKEND),
 * CUDA's error state cleared. Returns the status. */
mdr_status mdr_nccl_cuda_fail(mdr_backend *b, cudaError_t e, const char *what);
/* Make `device` current for a call (leave with device_leave): MDR_OK, or
 * MDR_ERR_BACKEND recorded on b, with nothing switched. */
mdr_status mdr_nccl_enter(mdr_backend *b, int device, device_scope *g);
/* The same for teardown, which releases what it holds whatever happens: a
 * failed switch is ignored on purpose (its error cleared; the release then
 * runs on the current device rather than not at all). */
void mdr_nccl_enter_teardown(int device, device_scope *g);
/* The exchange of struct mdr_comm_ops (src/comm_impl.h): an all-gather of
 * small host records through device memory. Collective, blocking;
 * allocates (arena creation only). */
mdr_status mdr_nccl_exchange(mdr_comm *const *cs, int n, const void *mine, size_t bytes, void *all);

/* ---- src/comm_nccl_window.c ---- */

/* The record of rank c's slab at `slab`, or NULL. */
nccl_slab *mdr_nccl_slab_of(const mdr_comm *c, mdr_dptr slab);
/* slab_alloc and slab_free of struct mdr_comm_ops. */
mdr_status mdr_nccl_slab_alloc(mdr_comm *const *cs, int n, size_t bytes, size_t region_off, size_t max_message,
                               mdr_dptr *slab, int *kind);
void mdr_nccl_slab_free(mdr_comm *c, mdr_dptr slab);
/* Raise the peers' region abort words on every slab of c where mdr's
 * kernels run (src/comm_nccl_window.c says when and what the peers see);
 * before ncclCommAbort. Best effort, blocking. */
void mdr_nccl_raise_peers(mdr_comm *c);

#endif /* MDR_HAVE_NCCL */
#endif
