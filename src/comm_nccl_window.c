/* comm_nccl_window.c — an arena's slab on an NCCL communicator: its
 * memory, the symmetric window, and what mdr's all-reduce kernels need
 * there (src/comm_nccl_impl.h; the ranks and the all-reduce are
 * src/comm_nccl.c's).
 *
 * Memory. ncclMemAlloc (cudaMalloc when NCCL cannot), then
 * ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC) once for the whole slab
 * (collective; in a group when one thread drives several ranks). When NCCL
 * cannot (no symmetric support: it then returns success with no window; or
 * an error), every rank falls back to plain memory, decided together so
 * that the ranks agree. Before registering, the ranks say what they hold
 * (an exchange): a rank whose allocation failed fails every rank's arena
 * creation, and a rank on plain memory keeps every rank plain, so that no
 * rank waits in the collective registration for one that skips it. A slab
 * is deregistered and freed when its arena is destroyed (or its
 * communicator, for arenas left alive).
 *
 * mdr's kernels (kernels/all_reduce.cu). On a symmetric slab every rank
 * also makes a device communicator (ncclDevCommCreate), resolves each
 * rank's window base through LSA pointers once, and sets up its comm
 * region (zeroed counters and flags, the one-shot scratch all-ones). The
 * kernels run when every rank could (one LSA team holding every rank, an
 * NCCL library of the headers' release: the kernels read NCCL's window
 * records inline); otherwise every rank falls back to NCCL, with the
 * reason in the backend's last error.
 *
 * Teardown (a failed allocation's, a slab's) is best effort: it returns
 * nothing, so what fails there is ignored on purpose, what can still be
 * released is, and CUDA's error state is cleared. */
#include "all_reduce_impl.h"

#if defined(MDR_HAVE_NCCL)

#include <stdlib.h>
#include <string.h>

#include "all_reduce.h"
#include "comm_nccl_impl.h"
#include "env.h"

nccl_slab *mdr_nccl_slab_of(const mdr_comm *c, mdr_dptr slab) {
  for (nccl_slab *sl = nccl_rank_of(c)->slabs; sl; sl = sl->next)
    if (sl->ptr == slab) return sl;
  return NULL;
}

/* ---- reaching the peers the host word does not ---- */

/* Before a window of mdr's kernels goes away (its arena is destroyed, or
 * its communicator with the arena left alive) and when the communicator is
 * aborted, this rank raises the abort word of every other rank's comm
 * region through its own LSA pointers (mdr_cuda_ar_raise_abort): the host
 * abort word reaches only the ranks of this rank's group (made together in
 * this process), not ranks in other processes or adopted on their own.
 * Their kernels waiting on this rank then leave with cause MDR_ARP_PEER,
 * leaving unfinished rows as they were and their streams usable; each
 * writes its report, so its communicator refuses every later call with
 * MDR_ERR_STATE ("a peer rank gave up"); a rank not in a call gives up at
 * its next one. This rank's own kernels are left to the host word (their
 * cause stays MDR_ARP_ABORTED). Never after ncclCommAbort, which may take
 * the mappings with it. Best effort: a failure is ignored on purpose (the
 * peers then end at their time limit, MDR_AR_TIMEOUT_MS) and CUDA's error
 * state cleared; nothing is recorded on the backend, whose last error
 * stays that of the failure that led here. */
static void raise_peers_of(mdr_comm *c, const nccl_slab *sl) {
  const nccl_words *w = nccl_words_of(c);
  if (!sl->kernels || nccl_rank_of(c)->dead || !w || w->members >= c->size) return;
  char *others[MDR_ARP_MAX_RANKS];
  for (int r = 0; r < c->size; r++) others[r] = r == c->rank ? NULL : sl->peer[r];
  device_scope scope;
  if (device_enter(c->device, &scope, NULL) != cudaSuccess) return; /* ignored on purpose (above) */
  cudaStream_t q = NULL;
  if (cudaStreamCreateWithFlags(&q, cudaStreamNonBlocking) == cudaSuccess) {
    (void)mdr_cuda_ar_raise_abort(others, c->size, sl->region_off, q); /* ignored on purpose (above) */
    (void)cudaStreamDestroy(q);
  }
  (void)cudaGetLastError();
  device_leave(&scope);
}

static void lock_slabs(nccl_rank *nr) {
  while (atomic_flag_test_and_set_explicit(&nr->slabs_lock, memory_order_acquire)) {
  }
}

static void unlock_slabs(nccl_rank *nr) { atomic_flag_clear_explicit(&nr->slabs_lock, memory_order_release); }

/* Under the list's lock: a slab being destroyed by another thread is
 * either still listed (and mapped) or already gone from the list. */
void mdr_nccl_raise_peers(mdr_comm *c) {
  nccl_rank *nr = nccl_rank_of(c);
  lock_slabs(nr);
  for (const nccl_slab *sl = nr->slabs; sl; sl = sl->next) raise_peers_of(c, sl);
  unlock_slabs(nr);
}

/* ---- teardown ---- */

static void drop_devcomm(mdr_comm *c, nccl_slab *sl) {
  device_scope scope;
  mdr_nccl_enter_teardown(c->device, &scope);
  (void)mdr_cuda_ar_devcomm_destroy(nccl_rank_of(c)->comm, sl->devcomm); /* teardown: ignored */
  (void)cudaGetLastError();
  device_leave(&scope);
  sl->devcomm = NULL;
}

/* The slab is plain memory from here on, whatever the deregistration
 * returns (a failure is ignored on purpose). */
static void drop_window(mdr_comm *c, nccl_slab *sl) {
  device_scope scope;
  mdr_nccl_enter_teardown(c->device, &scope);
  (void)ncclCommWindowDeregister(nccl_rank_of(c)->comm, sl->win);
  (void)cudaGetLastError();
  device_leave(&scope);
  sl->win = NULL;
}

/* Release what the slab holds, then its record. The device communicator
 * and the window only while the communicator lives (ncclCommAbort took
 * them with it). */
static void release_slab(mdr_comm *c, nccl_slab *sl) {
  if (!nccl_rank_of(c)->dead) {
    raise_peers_of(c, sl); /* while the window still maps them */
    if (sl->devcomm) drop_devcomm(c, sl);
    if (sl->win) drop_window(c, sl);
  }
  if (sl->ptr) {
    device_scope scope;
    mdr_nccl_enter_teardown(c->device, &scope);
    void *p = (void *)(uintptr_t)sl->ptr;
    if (sl->from_nccl) { /* teardown: a failed free is ignored on purpose */
      (void)ncclMemFree(p);
    } else {
      (void)cudaFree(p);
    }
    (void)cudaGetLastError();
    device_leave(&scope);
  }
  free(sl);
}

/* ---- allocation ---- */

/* A slab record with `bytes` of memory on c's device in *out: ncclMemAlloc's
 * (which can become a window), else cudaMalloc's. Nothing is left on a
 * failure. */
static mdr_status new_slab(mdr_comm *c, size_t bytes, size_t region_off, nccl_slab **out) {
  *out = NULL;
  nccl_slab *sl = calloc(1, sizeof *sl);
  if (!sl) return mdr_backend_fail(c->b, MDR_ERR_OUT_OF_MEMORY, "nccl: slab record");
  void *p = NULL;
  device_scope scope;
  mdr_status st = mdr_nccl_enter(c->b, c->device, &scope);
  if (st != MDR_OK) goto fail;
  if (ncclMemAlloc(&p, bytes) == ncclSuccess && p) {
    sl->from_nccl = 1;
  } else { /* deliberately not an error: plain memory, on which NCCL's all-reduce runs */
    (void)cudaGetLastError();
    p = NULL;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) st = mdr_nccl_cuda_fail(c->b, e, "cudaMalloc (arena slab)");
  }
  device_leave(&scope);
  if (st != MDR_OK) goto fail;
  sl->ptr = (mdr_dptr)(uintptr_t)p;
  sl->region_off = region_off;
  *out = sl;
  return MDR_OK;
fail:
  free(sl);
  return st;
}

/* What a rank holds before the collective steps (mdr_nccl_slab_alloc),
 * ordered: the least over the ranks decides. */
enum { SLAB_NONE = 0, SLAB_PLAIN = 1, SLAB_NCCL = 2 };

/* Register every rank's slab as a symmetric window, once for the whole
 * slab, or none: the ranks agree through an exchange, and when any could
 * not, every slab stays plain memory (the reason in the backends' last
 * errors). *symmetric: 1 when every rank's slab is a window. MDR_OK unless
 * the exchange failed. */
static mdr_status register_windows(mdr_comm *const *cs, int n, nccl_slab **sl, size_t bytes, int *symmetric) {
  *symmetric = 0;
  int registered[n], agree[cs[0]->size];
  /* a group that cannot start registers nothing: every rank then agrees on
   * plain memory below */
  const ncclResult_t started = n > 1 ? ncclGroupStart() : ncclSuccess;
  for (int i = 0; i < n; i++) {
    mdr_comm *c = cs[i];
    if (started != ncclSuccess) {
      mdr_nccl_fail(c->b, NULL, started, "ncclGroupStart (window registration; plain memory)");
      continue;
    }
    if (!sl[i]->from_nccl) continue; /* plain memory: agreed below */
    device_scope scope;
    if (mdr_nccl_enter(c->b, c->device, &scope) != MDR_OK) continue; /* recorded; plain memory, agreed below */
    const ncclResult_t r = ncclCommWindowRegister(nccl_rank_of(c)->comm, (void *)(uintptr_t)sl[i]->ptr, bytes,
                                                  &sl[i]->win, NCCL_WIN_COLL_SYMMETRIC);
    device_leave(&scope);
    if (r != ncclSuccess) {
      sl[i]->win = NULL;
      mdr_nccl_fail(c->b, nccl_rank_of(c)->comm, r, "ncclCommWindowRegister (falling back to plain memory)");
    }
  }
  const ncclResult_t ended = n > 1 && started == ncclSuccess ? ncclGroupEnd() : ncclSuccess;
  for (int i = 0; ended != ncclSuccess && i < n; i++)
    if (sl[i]->win) { /* the group failed: no registration is to be trusted */
      mdr_nccl_fail(cs[i]->b, nccl_rank_of(cs[i])->comm, ended, "ncclGroupEnd (window registration)");
      drop_window(cs[i], sl[i]);
    }
  for (int i = 0; i < n; i++) registered[i] = sl[i]->win != NULL;
  /* every rank symmetric, or every rank plain */
  const mdr_status st = mdr_nccl_exchange(cs, n, registered, sizeof(int), agree);
  if (st != MDR_OK) return st;
  int all = 1;
  for (int r = 0; r < cs[0]->size; r++) all &= agree[r];
  for (int i = 0; !all && i < n; i++)
    if (sl[i]->win) {
      drop_window(cs[i], sl[i]);
      mdr_backend_fail(cs[i]->b, MDR_ERR_UNSUPPORTED,
                       "nccl: a peer could not register its slab symmetrically: plain memory on every rank");
    }
  *symmetric = all;
  return MDR_OK;
}

/* ---- mdr's kernels on a symmetric slab ---- */

/* A refusal of rank_ready's after a failed CUDA call: CUDA's error state is
 * cleared (the refusal is the report). */
static const char *cuda_refusal(const char *why) {
  (void)cudaGetLastError();
  return why;
}

/* Why this rank cannot run mdr's kernels on its symmetric slab (NULL: it
 * can); records what it set up in *sl. Runs on the rank's device, stream q.
 * Not collective (the device communicator was made before, in the caller's
 * group). */
static const char *rank_ready(mdr_comm *c, nccl_slab *sl, size_t bytes, cudaStream_t q, int *sms) {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "ncclGetVersion failed";
  /* the exact release of the headers (major, minor and patch: NCCL_VERSION_CODE
   * is major*10000 + minor*100 + patch from 2.9 on): the kernels read NCCL's
   * window records inline, whose layout no release promises to keep */
  if (v != NCCL_VERSION_CODE) return "the NCCL library is another release than the headers mdr was built with";
  if (c->size > MDR_ARP_MAX_RANKS) return "more ranks than mdr's kernels take (MDR_ALL_REDUCE_MAX_RANKS)";
  if (!nccl_words_of(c)) return "no pinned host words for the kernels' abort and report";
  if (!sl->devcomm) return "ncclDevCommCreate failed (no device API on this communicator)";
  int rank, nranks, lsa_rank, lsa_size;
  mdr_cuda_ar_devcomm_info(sl->devcomm, &rank, &nranks, &lsa_rank, &lsa_size);
  if (lsa_size != nranks || lsa_rank != rank) return "the ranks are not all in one LSA (NVLink) team";
  if (sl->region_off + MDR_ARP_REGION_BYTES(c->size, MDR_ARP_ONE_SHOT_MAX_BYTES) > bytes)
    return "no comm region in the slab";
  if (mdr_cuda_ar_resolve_peers(sl->win, c->size, sl->peer, q) != 0)
    return cuda_refusal("resolving the peers' LSA pointers failed");
  char *region = (char *)(uintptr_t)(sl->ptr + sl->region_off);
  if (mdr_cuda_ar_region_init(region, c->size, MDR_ARP_ONE_SHOT_MAX_BYTES, q) != 0 ||
      cudaStreamSynchronize(q) != cudaSuccess)
    return cuda_refusal("setting up the comm region failed");
  if (cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, c->device) != cudaSuccess)
    return cuda_refusal("no SM count");
  /* programmatic dependent launch: sm_90 and later, unless MDR_AR_PDL=0 (a
   * failed query is deliberately no error: the kernels then run without) */
  int major = 0;
  const int cc_known = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, c->device) == cudaSuccess;
  if (!cc_known) (void)cudaGetLastError();
  sl->pdl = mdr_env_switch_or(c->b, "MDR_AR_PDL", "arena on a communicator", 1) && cc_known && major >= 9;
  return NULL;
}

/* rank_ready on the rank's device and a stream of its own. */
static const char *rank_check(mdr_comm *c, nccl_slab *sl, size_t bytes, int *sms) {
  device_scope scope;
  if (mdr_nccl_enter(c->b, c->device, &scope) != MDR_OK) return "the rank's device cannot be made current";
  cudaStream_t q = NULL;
  const char *why = NULL;
  if (cudaStreamCreateWithFlags(&q, cudaStreamNonBlocking) != cudaSuccess) {
    why = cuda_refusal("no stream");
  } else {
    why = rank_ready(c, sl, bytes, q, sms);
    if (cudaStreamDestroy(q) != cudaSuccess) (void)cudaGetLastError(); /* teardown: ignored on purpose */
  }
  device_leave(&scope);
  return why;
}

/* Each rank's device communicator: a group task each when this thread
 * drives several ranks. A rank whose task cannot be made (or whose group
 * failed) is left without one; rank_ready then says why, and every rank
 * agrees to run NCCL's all-reduce. */
static void make_devcomms(mdr_comm *const *cs, int n, nccl_slab **sl) {
  /* a group that cannot start makes none (the same agreement follows) */
  const int grouped = n > 1 && ncclGroupStart() == ncclSuccess;
  int made[n];
  for (int i = 0; i < n; i++) {
    made[i] = 0;
    device_scope scope;
    if ((n > 1 && !grouped) || mdr_nccl_enter(cs[i]->b, cs[i]->device, &scope) != MDR_OK) continue;
    made[i] = mdr_cuda_ar_devcomm_create(nccl_rank_of(cs[i])->comm, &sl[i]->devcomm) == 0;
    device_leave(&scope);
  }
  if (grouped && ncclGroupEnd() != ncclSuccess) /* the group failed: no device communicator is to be trusted */
    for (int i = 0; i < n; i++) made[i] = 0;
  for (int i = 0; i < n; i++)
    if (!made[i] && sl[i]->devcomm) drop_devcomm(cs[i], sl[i]);
}

/* Set mdr's kernels up on every rank's symmetric slab, or on none. MDR_OK
 * unless the exchange failed (kernels off is no failure). */
static mdr_status setup_kernels(mdr_comm *const *cs, int n, nccl_slab **sl, size_t bytes) {
  make_devcomms(cs, n, sl);
  /* each rank: ready (and its SM count), or why not; then all agree */
  const int size = cs[0]->size;
  int mine[n][2], got[size][2];
  for (int i = 0; i < n; i++) {
    int sms = 0;
    const char *why = rank_check(cs[i], sl[i], bytes, &sms);
    if (why)
      mdr_backend_fail(cs[i]->b, MDR_ERR_UNSUPPORTED, "nccl: mdr's all-reduce kernels off (NCCL fallback): %s", why);
    mine[i][0] = why == NULL;
    mine[i][1] = sms;
  }
  mdr_status st = mdr_nccl_exchange(cs, n, mine, sizeof mine[0], got);
  if (st != MDR_OK) return st;
  int ready = 1, min_sms = MDR_ARP_MAX_BLOCKS;
  for (int r = 0; r < size; r++) {
    ready &= got[r][0];
    if (got[r][1] < min_sms) min_sms = got[r][1];
  }
  for (int i = 0; i < n; i++) {
    sl[i]->kernels = ready && min_sms > 0;
    sl[i]->max_blocks = min_sms;
    if (!sl[i]->kernels && mine[i][0])
      mdr_backend_fail(cs[i]->b, MDR_ERR_UNSUPPORTED,
                       "nccl: mdr's all-reduce kernels off (NCCL fallback): a peer rank cannot run them");
  }
  return MDR_OK;
}

mdr_status mdr_nccl_slab_alloc(mdr_comm *const *cs, int n, size_t bytes, size_t region_off, size_t max_message,
                               mdr_dptr *slab, int *kind) {
  (void)max_message; /* the GPU's region holds the public one-shot cap */
  nccl_slab *sl[n];
  for (int i = 0; i < n; i++) sl[i] = NULL;
  int symmetric = 0;
  mdr_status st = MDR_OK;
  /* Every rank says what it holds before anything collective: no slab (the
   * allocation failed), plain memory, or NCCL's (which can become a
   * window). Window registration is collective, so a rank that would skip
   * it (no slab, or plain memory) while its peers register would leave them
   * waiting for it: all ranks fail together, or all register, or none. */
  int held[n], all[cs[0]->size];
  memset(held, 0, sizeof held); /* SLAB_NONE until said otherwise */
  for (int i = 0; i < n; i++) {
    const mdr_status got = new_slab(cs[i], bytes, region_off, &sl[i]);
    if (got != MDR_OK && st == MDR_OK) st = got; /* recorded on that rank's backend */
    held[i] = got != MDR_OK ? SLAB_NONE : sl[i]->from_nccl ? SLAB_NCCL : SLAB_PLAIN;
  }
  const mdr_status ex = mdr_nccl_exchange(cs, n, held, sizeof held[0], all);
  if (ex != MDR_OK) {
    st = ex;
    goto fail;
  }
  int least = SLAB_NCCL;
  for (int r = 0; r < cs[0]->size; r++) least = all[r] < least ? all[r] : least;
  if (least == SLAB_NONE) {
    for (int i = 0; i < n; i++)
      if (held[i] != SLAB_NONE)
        st = mdr_backend_fail(cs[i]->b, MDR_ERR_STATE, "nccl: a peer rank could not allocate its arena slab");
    goto fail;
  }
  if (least == SLAB_NCCL) st = register_windows(cs, n, sl, bytes, &symmetric);
  else
    for (int i = 0; i < n; i++) /* plain memory everywhere: nothing collective to do */
      if (held[i] == SLAB_NCCL)
        mdr_backend_fail(cs[i]->b, MDR_ERR_UNSUPPORTED,
                         "nccl: a peer's slab is plain memory: plain memory on every rank (NCCL's all-reduce)");
  if (st == MDR_OK && symmetric) st = setup_kernels(cs, n, sl, bytes);
  if (st != MDR_OK) goto fail;
  for (int i = 0; i < n; i++) {
    nccl_rank *nr = nccl_rank_of(cs[i]);
    slab[i] = sl[i]->ptr;
    kind[i] = sl[i]->win ? MDR_WINDOW_SYMMETRIC : MDR_WINDOW_PLAIN;
    lock_slabs(nr);
    sl[i]->next = nr->slabs;
    nr->slabs = sl[i];
    unlock_slabs(nr);
  }
  return MDR_OK;
fail:
  for (int i = 0; i < n; i++)
    if (sl[i]) release_slab(cs[i], sl[i]);
  return st;
}

void mdr_nccl_slab_free(mdr_comm *c, mdr_dptr slab) {
  nccl_rank *nr = nccl_rank_of(c);
  nccl_slab *sl = NULL;
  lock_slabs(nr);
  for (nccl_slab **p = &nr->slabs; *p; p = &(*p)->next)
    if ((*p)->ptr == slab) {
      sl = *p;
      *p = sl->next;
      break;
    }
  unlock_slabs(nr);
  if (sl) release_slab(c, sl);
}

#endif /* MDR_HAVE_NCCL */
