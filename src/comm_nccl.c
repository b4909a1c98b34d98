/* comm_nccl.c — the NCCL communicator: a rank is an ncclComm_t on a CUDA
 * backend's device.
 *
 * Every NCCL and CUDA call runs on the rank's device and leaves the
 * caller's current device as it was. Every NCCL failure becomes a status
 * (ncclInvalidArgument: MDR_ERR_INVALID_ARGUMENT, ncclInvalidUsage:
 * MDR_ERR_STATE, the rest MDR_ERR_BACKEND) with NCCL's error string and its
 * last-error text in the backend's last error.
 *
 * Slabs. ncclMemAlloc, then ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC)
 * once for the whole slab (collective; in a group when one thread drives
 * several ranks). When NCCL cannot (no symmetric support: it then returns
 * success with no window; or an error), every rank falls back to plain
 * memory, decided together so that the ranks agree. A slab is deregistered
 * and freed when its arena is destroyed.
 *
 * mdr's kernels (kernels/all_reduce.cu). On a symmetric slab every rank
 * also makes a device communicator (ncclDevCommCreate), resolves each
 * rank's window base through LSA pointers once, and sets up its comm
 * region (zeroed counters and flags, the one-shot scratch all-ones). The
 * kernels run when every rank could (one LSA team holding every rank, an
 * NCCL library of the headers' major.minor: the kernels read NCCL's window
 * records inline); otherwise every rank falls back to NCCL, with the
 * reason in the backend's last error. */
#include "comm_impl.h"

#if defined(MDR_HAVE_NCCL)

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "all_reduce.h"

/* the kernels' codes are the public values */
_Static_assert((int)MDR_ARK_BF16 == (int)MDR_DTYPE_BF16 && (int)MDR_ARK_FP16 == (int)MDR_DTYPE_FP16 &&
                   (int)MDR_ARK_FP32 == (int)MDR_DTYPE_FP32,
               "kernel dtype codes");
_Static_assert((int)MDR_ARK_AUTO == (int)MDR_AR_AUTO && (int)MDR_ARK_ONE_SHOT == (int)MDR_AR_ONE_SHOT &&
                   (int)MDR_ARK_TWO_SHOT == (int)MDR_AR_TWO_SHOT,
               "kernel algorithm codes");
_Static_assert(MDR_ARK_ONE_SHOT_MAX_BYTES == MDR_AR_ONE_SHOT_MAX_BYTES, "one-shot scratch");

typedef struct nccl_slab {
  struct nccl_slab *next;
  mdr_dptr ptr;
  ncclWindow_t win; /* NULL: plain */
  int from_nccl;    /* ncclMemAlloc (else cudaMalloc) */
  /* mdr's kernels */
  void *devcomm;    /* mdr_cuda_ar_devcomm_create's, or NULL */
  int kernels;      /* 1: they run on this slab (every rank agreed) */
  int max_blocks;   /* grid cap: SMs of the communicator's smallest GPU */
  char *peer[MDR_AR_MAX_RANKS];
} nccl_slab;

typedef struct nccl_rank {
  ncclComm_t comm;
  int owned; /* made by mdr: destroyed (or aborted) by mdr */
  int dead;  /* aborted: not to be used again */
  nccl_slab *slabs;
} nccl_rank;

static nccl_rank *rank_of(const mdr_comm *c) { return c->impl; }

static mdr_status status_of(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return MDR_OK;
    case ncclInvalidArgument: return MDR_ERR_INVALID_ARGUMENT;
    case ncclInvalidUsage: return MDR_ERR_STATE;
    default: return MDR_ERR_BACKEND;
  }
}

static mdr_status nccl_fail(mdr_backend *b, ncclComm_t comm, ncclResult_t r, const char *what) {
  const char *last = comm ? ncclGetLastError(comm) : NULL;
  return mdr_backend_fail(b, status_of(r), "nccl: %s: %s%s%s", what, ncclGetErrorString(r),
                          last && *last ? ": " : "", last && *last ? last : "");
}

static mdr_status cuda_fail(mdr_backend *b, cudaError_t e, const char *what) {
  (void)cudaGetLastError();
  return mdr_backend_fail(b, e == cudaErrorMemoryAllocation ? MDR_ERR_OUT_OF_MEMORY : MDR_ERR_BACKEND,
                          "cuda: %s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

/* The caller's device, switched for a call. */
static int enter_device(int dev, int *prev) {
  if (cudaGetDevice(prev) != cudaSuccess) {
    (void)cudaGetLastError();
    *prev = -1;
  }
  return *prev == dev || cudaSetDevice(dev) == cudaSuccess;
}

static void leave_device(int prev) {
  if (prev >= 0) (void)cudaSetDevice(prev);
}

static ncclDataType_t nccl_type(mdr_dtype dt) {
  switch (dt) {
    case MDR_DTYPE_BF16: return ncclBfloat16;
    case MDR_DTYPE_FP16: return ncclFloat16;
    default: return ncclFloat32;
  }
}

static mdr_status check_rank(const mdr_comm *c, const char *what) {
  if (rank_of(c)->dead) return mdr_backend_fail(c->b, MDR_ERR_STATE, "nccl: %s on an aborted communicator", what);
  return mdr_comm_check_alive(c, what);
}

static nccl_slab *slab_of(const mdr_comm *c, mdr_dptr slab) {
  for (nccl_slab *sl = rank_of(c)->slabs; sl; sl = sl->next)
    if (sl->ptr == slab) return sl;
  return NULL;
}

static mdr_status nccl_all_reduce(mdr_comm *c, const mdr_ar_call *k, mdr_stream s) {
  mdr_status st = check_rank(c, "all-reduce");
  if (st != MDR_OK) return st;
  int prev;
  if (!enter_device(c->device, &prev)) return cuda_fail(c->b, cudaGetLastError(), "cudaSetDevice");
  void *p = (void *)(uintptr_t)k->ptr;
  const uint32_t *count = (const uint32_t *)(uintptr_t)k->count_ptr;
  if (k->algo == MDR_AR_NCCL) {
    const size_t n = k->rows * k->row_bytes / mdr_dtype_bytes(k->dt);
    ncclResult_t r = ncclAllReduce(p, p, n, nccl_type(k->dt), ncclSum, rank_of(c)->comm, (cudaStream_t)s);
    if (r != ncclSuccess) {
      leave_device(prev);
      return nccl_fail(c->b, rank_of(c)->comm, r, "ncclAllReduce");
    }
    int e = k->residual ? mdr_cuda_ar_residual_add((void *)(uintptr_t)k->residual, p, k->row_bytes, k->rows, count,
                                                   (int)k->dt, s)
                        : 0;
    leave_device(prev);
    return e ? cuda_fail(c->b, (cudaError_t)e, "residual add after ncclAllReduce") : MDR_OK;
  }
  const nccl_slab *sl = slab_of(c, k->slab);
  if (!sl || !sl->kernels) {
    leave_device(prev);
    return mdr_backend_fail(c->b, MDR_ERR_UNSUPPORTED, "all-reduce: mdr's kernels do not run on this slab");
  }
  mdr_ar_launch l;
  memset(&l, 0, sizeof l);
  for (int r = 0; r < c->size; r++) l.peer[r] = sl->peer[r];
  l.self = (char *)(uintptr_t)sl->ptr;
  l.rank = c->rank;
  l.nranks = c->size;
  l.buf_off = (size_t)(k->ptr - k->slab);
  l.res_off = k->residual ? (size_t)(k->residual - k->slab) : SIZE_MAX;
  l.region_off = k->region_off;
  l.row_bytes = k->row_bytes;
  l.rows = k->rows;
  l.count_ptr = count;
  l.one_shot_max = mdr_ar_auto_table.one_shot_max;
  l.dtype = (int)k->dt;
  l.algo = (int)k->algo;
  l.max_blocks = sl->max_blocks;
  const int e = mdr_cuda_ar_launch(&l, s);
  leave_device(prev);
  return e ? cuda_fail(c->b, (cudaError_t)e, "mdr all-reduce kernel") : MDR_OK;
}

static size_t nccl_region_bytes(const mdr_comm *c) { return MDR_AR_REGION_BYTES(c->size); }

static int nccl_kernels(const mdr_comm *c, mdr_dptr slab) {
  const nccl_slab *sl = slab_of(c, slab);
  return sl && sl->kernels;
}

static mdr_status nccl_epoch(mdr_comm *c, mdr_dptr slab, size_t region_off, uint32_t *get, const uint32_t *set) {
  const nccl_slab *sl = slab_of(c, slab);
  if (!sl || !sl->kernels)
    return mdr_backend_fail(c->b, MDR_ERR_UNSUPPORTED, "all-reduce epoch: mdr's kernels do not run on this arena");
  int prev;
  if (!enter_device(c->device, &prev)) return cuda_fail(c->b, cudaGetLastError(), "cudaSetDevice");
  cudaStream_t q = NULL;
  cudaError_t e = cudaStreamCreateWithFlags(&q, cudaStreamNonBlocking);
  char *region = (char *)(uintptr_t)(slab + region_off);
  const size_t words = (MDR_AR_FLAGS_OFF + MDR_AR_FLAGS_BYTES(c->size)) / 4;
  uint32_t *img = NULL;
  if (e == cudaSuccess && set) {
    /* every block's copy of the epoch, and every barrier flag at 2E:
     * barriers 2E+1 and 2E+2 of the next call then wait for the peers */
    img = calloc(words, 4);
    if (!img) {
      (void)cudaStreamDestroy(q);
      leave_device(prev);
      return mdr_backend_fail(c->b, MDR_ERR_OUT_OF_MEMORY, "all-reduce epoch: image");
    }
    for (size_t w = 0; w < MDR_AR_FLAGS_OFF / 4; w++) img[w] = *set;
    for (size_t w = MDR_AR_FLAGS_OFF / 4; w < words; w++) img[w] = 2u * *set;
    e = cudaMemcpyAsync(region, img, words * 4, cudaMemcpyHostToDevice, q);
  }
  if (e == cudaSuccess && get) e = cudaMemcpyAsync(get, region, 4, cudaMemcpyDeviceToHost, q);
  if (e == cudaSuccess) e = cudaStreamSynchronize(q);
  if (q) (void)cudaStreamDestroy(q);
  free(img);
  leave_device(prev);
  return e == cudaSuccess ? MDR_OK : cuda_fail(c->b, e, "all-reduce epoch");
}

/* All-gather of small records through device memory (arena creation only:
 * allocates, synchronises). */
static mdr_status nccl_exchange(mdr_comm *const *cs, int n, const void *mine, size_t bytes, void *all) {
  const int size = cs[0]->size;
  void *dev[n];
  cudaStream_t q[n];
  mdr_status st = MDR_OK;
  for (int i = 0; i < n; i++) {
    dev[i] = NULL;
    q[i] = NULL;
  }
  for (int i = 0; i < n && st == MDR_OK; i++) {
    int prev;
    if (!enter_device(cs[i]->device, &prev)) {
      st = cuda_fail(cs[i]->b, cudaGetLastError(), "cudaSetDevice");
      break;
    }
    cudaError_t e = cudaMalloc(&dev[i], (size_t)size * bytes);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&q[i], cudaStreamNonBlocking);
    if (e == cudaSuccess)
      e = cudaMemcpyAsync((char *)dev[i] + (size_t)cs[i]->rank * bytes, (const char *)mine + (size_t)i * bytes,
                          bytes, cudaMemcpyHostToDevice, q[i]);
    if (e == cudaSuccess) e = cudaStreamSynchronize(q[i]);
    leave_device(prev);
    if (e != cudaSuccess) st = cuda_fail(cs[i]->b, e, "exchange buffer");
  }
  if (st == MDR_OK) {
    if (n > 1) ncclGroupStart();
    ncclResult_t r = ncclSuccess;
    for (int i = 0; i < n && r == ncclSuccess; i++) {
      int prev;
      enter_device(cs[i]->device, &prev);
      char *d = dev[i];
      r = ncclAllGather(d + (size_t)cs[i]->rank * bytes, d, bytes, ncclUint8, rank_of(cs[i])->comm, q[i]);
      leave_device(prev);
      if (r != ncclSuccess) st = nccl_fail(cs[i]->b, rank_of(cs[i])->comm, r, "ncclAllGather (exchange)");
    }
    if (n > 1) {
      r = ncclGroupEnd();
      if (r != ncclSuccess && st == MDR_OK) st = nccl_fail(cs[0]->b, rank_of(cs[0])->comm, r, "ncclGroupEnd");
    }
  }
  for (int i = 0; i < n; i++) {
    int prev;
    enter_device(cs[i]->device, &prev);
    if (st == MDR_OK && i == 0) {
      cudaError_t e = cudaMemcpyAsync(all, dev[i], (size_t)size * bytes, cudaMemcpyDeviceToHost, q[i]);
      if (e == cudaSuccess) e = cudaStreamSynchronize(q[i]);
      if (e != cudaSuccess) st = cuda_fail(cs[i]->b, e, "exchange read-back");
    } else if (q[i]) {
      (void)cudaStreamSynchronize(q[i]);
    }
    if (q[i]) (void)cudaStreamDestroy(q[i]);
    if (dev[i]) (void)cudaFree(dev[i]);
    leave_device(prev);
  }
  return st;
}

/* Why this rank cannot run mdr's kernels on a symmetric slab (NULL: it
 * can); records what it set up in *sl. Not collective except for the
 * device communicator, made in the caller's group. */
static const char *rank_ready(mdr_comm *c, nccl_slab *sl, size_t bytes, size_t region_off, cudaStream_t q,
                              int *sms) {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "ncclGetVersion failed";
  /* NCCL_VERSION_CODE is major*10000 + minor*100 + patch from 2.9 on */
  if (v != NCCL_VERSION_CODE) return "the NCCL library is another release than the headers mdr was built with";
  if (c->size > MDR_AR_MAX_RANKS) return "more ranks than mdr's kernels take (MDR_AR_MAX_RANKS)";
  if (!sl->devcomm) return "ncclDevCommCreate failed (no device API on this communicator)";
  int rank, nranks, lsa_rank, lsa_size;
  mdr_cuda_ar_devcomm_info(sl->devcomm, &rank, &nranks, &lsa_rank, &lsa_size);
  if (lsa_size != nranks || lsa_rank != rank) return "the ranks are not all in one LSA (NVLink) team";
  if (region_off + MDR_AR_REGION_BYTES(c->size) > bytes) return "no comm region in the slab";
  if (mdr_cuda_ar_resolve_peers(sl->win, c->size, sl->peer, q) != 0) return "resolving the peers' LSA pointers failed";
  char *region = (char *)(uintptr_t)(sl->ptr + region_off);
  const size_t lam = MDR_AR_LAMPORT_OFF(c->size);
  if (cudaMemsetAsync(region, 0, lam, q) != cudaSuccess ||
      cudaMemsetAsync(region + lam, 0xff, MDR_AR_REGION_BYTES(c->size) - lam, q) != cudaSuccess ||
      cudaStreamSynchronize(q) != cudaSuccess)
    return "setting up the comm region failed";
  if (cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, c->device) != cudaSuccess) return "no SM count";
  return NULL;
}

/* Set mdr's kernels up on every rank's symmetric slab, or on none. */
static mdr_status setup_kernels(mdr_comm *const *cs, int n, nccl_slab **sl, size_t bytes, size_t region_off) {
  /* the device communicators: a group task each */
  if (n > 1) ncclGroupStart();
  int made[n];
  for (int i = 0; i < n; i++) {
    int prev;
    enter_device(cs[i]->device, &prev);
    made[i] = mdr_cuda_ar_devcomm_create(rank_of(cs[i])->comm, &sl[i]->devcomm) == 0;
    leave_device(prev);
  }
  if (n > 1 && ncclGroupEnd() != ncclSuccess)
    for (int i = 0; i < n; i++) made[i] = 0;
  for (int i = 0; i < n; i++)
    if (!made[i] && sl[i]->devcomm) {
      int prev;
      enter_device(cs[i]->device, &prev);
      mdr_cuda_ar_devcomm_destroy(rank_of(cs[i])->comm, sl[i]->devcomm);
      leave_device(prev);
      sl[i]->devcomm = NULL;
    }
  /* each rank: ready (and its SM count), or why not; then all agree */
  const int size = cs[0]->size;
  int mine[n][2], got[size][2];
  for (int i = 0; i < n; i++) {
    int prev, sms = 0;
    cudaStream_t q = NULL;
    const char *why = NULL;
    if (!enter_device(cs[i]->device, &prev) || cudaStreamCreateWithFlags(&q, cudaStreamNonBlocking) != cudaSuccess) {
      why = "no stream";
      (void)cudaGetLastError();
    } else {
      why = rank_ready(cs[i], sl[i], bytes, region_off, q, &sms);
      (void)cudaStreamDestroy(q);
    }
    leave_device(prev);
    if (why)
      mdr_backend_fail(cs[i]->b, MDR_ERR_UNSUPPORTED, "nccl: mdr's all-reduce kernels off (NCCL fallback): %s", why);
    mine[i][0] = why == NULL;
    mine[i][1] = sms;
  }
  mdr_status st = nccl_exchange(cs, n, mine, sizeof mine[0], got);
  if (st != MDR_OK) return st;
  int ready = 1, min_sms = MDR_AR_MAX_BLOCKS;
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

static void free_slab_memory(int device, nccl_slab *sl) {
  int prev;
  enter_device(device, &prev);
  if (sl->from_nccl) {
    (void)ncclMemFree((void *)(uintptr_t)sl->ptr);
  } else {
    (void)cudaFree((void *)(uintptr_t)sl->ptr);
  }
  (void)cudaGetLastError();
  leave_device(prev);
}

static mdr_status nccl_slab_alloc(mdr_comm *const *cs, int n, size_t bytes, size_t region_off, mdr_dptr *slab,
                                  int *kind) {
  nccl_slab *sl[n];
  mdr_status st = MDR_OK;
  for (int i = 0; i < n; i++) sl[i] = NULL;
  for (int i = 0; i < n && st == MDR_OK; i++) {
    sl[i] = calloc(1, sizeof *sl[i]);
    if (!sl[i]) {
      st = mdr_backend_fail(cs[i]->b, MDR_ERR_OUT_OF_MEMORY, "nccl: slab record");
      break;
    }
    int prev;
    enter_device(cs[i]->device, &prev);
    void *p = NULL;
    if (ncclMemAlloc(&p, bytes) == ncclSuccess && p) {
      sl[i]->from_nccl = 1;
    } else {
      cudaError_t e = cudaMalloc(&p, bytes);
      if (e != cudaSuccess) st = cuda_fail(cs[i]->b, e, "cudaMalloc (arena slab)");
    }
    leave_device(prev);
    sl[i]->ptr = (mdr_dptr)(uintptr_t)p;
  }
  /* one registration per rank, for the whole slab */
  int registered[n], agree[cs[0]->size];
  for (int i = 0; i < n; i++) registered[i] = 0;
  if (st == MDR_OK) {
    if (n > 1) ncclGroupStart();
    for (int i = 0; i < n; i++) {
      if (!sl[i]->from_nccl) continue;
      int prev;
      enter_device(cs[i]->device, &prev);
      ncclResult_t r = ncclCommWindowRegister(rank_of(cs[i])->comm, (void *)(uintptr_t)sl[i]->ptr, bytes,
                                              &sl[i]->win, NCCL_WIN_COLL_SYMMETRIC);
      leave_device(prev);
      if (r != ncclSuccess) {
        sl[i]->win = NULL;
        nccl_fail(cs[i]->b, rank_of(cs[i])->comm, r, "ncclCommWindowRegister (falling back to plain memory)");
      }
    }
    if (n > 1) ncclGroupEnd();
    for (int i = 0; i < n; i++) registered[i] = sl[i]->win != NULL;
    /* every rank symmetric, or every rank plain */
    st = nccl_exchange(cs, n, registered, sizeof(int), agree);
  }
  int all_registered = st == MDR_OK;
  for (int r = 0; st == MDR_OK && r < cs[0]->size; r++) all_registered &= agree[r];
  if (st == MDR_OK && !all_registered)
    for (int i = 0; i < n; i++)
      if (sl[i]->win) {
        int prev;
        enter_device(cs[i]->device, &prev);
        (void)ncclCommWindowDeregister(rank_of(cs[i])->comm, sl[i]->win);
        leave_device(prev);
        sl[i]->win = NULL;
        mdr_backend_fail(cs[i]->b, MDR_ERR_UNSUPPORTED,
                         "nccl: a peer could not register its slab symmetrically: plain memory on every rank");
      }
  if (st == MDR_OK && all_registered) st = setup_kernels(cs, n, sl, bytes, region_off);
  if (st != MDR_OK) {
    for (int i = 0; i < n; i++)
      if (sl[i]) {
        if (sl[i]->devcomm) {
          int prev;
          enter_device(cs[i]->device, &prev);
          mdr_cuda_ar_devcomm_destroy(rank_of(cs[i])->comm, sl[i]->devcomm);
          leave_device(prev);
        }
        if (sl[i]->win) {
          int prev;
          enter_device(cs[i]->device, &prev);
          (void)ncclCommWindowDeregister(rank_of(cs[i])->comm, sl[i]->win);
          leave_device(prev);
        }
        if (sl[i]->ptr) free_slab_memory(cs[i]->device, sl[i]);
        free(sl[i]);
      }
    return st;
  }
  for (int i = 0; i < n; i++) {
    slab[i] = sl[i]->ptr;
    kind[i] = sl[i]->win ? MDR_WINDOW_SYMMETRIC : MDR_WINDOW_PLAIN;
    sl[i]->next = rank_of(cs[i])->slabs;
    rank_of(cs[i])->slabs = sl[i];
  }
  return MDR_OK;
}

static void nccl_slab_free(mdr_comm *c, mdr_dptr slab) {
  nccl_rank *nr = rank_of(c);
  for (nccl_slab **p = &nr->slabs; *p; p = &(*p)->next) {
    nccl_slab *sl = *p;
    if (sl->ptr != slab) continue;
    *p = sl->next;
    if (!nr->dead && (sl->devcomm || sl->win)) {
      int prev;
      enter_device(c->device, &prev);
      if (sl->devcomm) mdr_cuda_ar_devcomm_destroy(nr->comm, sl->devcomm);
      if (sl->win) (void)ncclCommWindowDeregister(nr->comm, sl->win);
      leave_device(prev);
    }
    free_slab_memory(c->device, sl);
    free(sl);
    return;
  }
}

static void nccl_cancel(mdr_comm *c) {
  nccl_rank *nr = rank_of(c);
  if (nr->owned && !nr->dead) {
    int prev;
    enter_device(c->device, &prev);
    (void)ncclCommAbort(nr->comm);
    leave_device(prev);
  }
  nr->dead = 1;
}

static void nccl_destroy(mdr_comm *c) {
  nccl_rank *nr = rank_of(c);
  while (nr->slabs) nccl_slab_free(c, nr->slabs->ptr); /* arenas left alive: their slabs go too */
  if (nr->owned && !nr->dead) {
    int prev;
    enter_device(c->device, &prev);
    (void)ncclCommDestroy(nr->comm);
    leave_device(prev);
  }
  free(nr);
}

static const struct mdr_comm_ops nccl_comm_ops = {
    .name = "nccl",
    .all_reduce = nccl_all_reduce,
    .region_bytes = nccl_region_bytes,
    .kernels = nccl_kernels,
    .epoch = nccl_epoch,
    .exchange = nccl_exchange,
    .slab_alloc = nccl_slab_alloc,
    .slab_free = nccl_slab_free,
    .cancel = nccl_cancel,
    .destroy = nccl_destroy,
};

/* A rank over `comm` on CUDA backend b, or a status (nothing made). */
static mdr_status make_rank(mdr_backend *b, ncclComm_t comm, int owned, mdr_comm_group *g, mdr_comm **out) {
  const int dev = mdr_be_cuda_device(b);
  if (dev < 0)
    return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT, "nccl: backend %s is not a CUDA backend", mdr_be_name(b));
  int rank = -1, size = -1, cdev = -1;
  ncclResult_t r = ncclCommUserRank(comm, &rank);
  if (r == ncclSuccess) r = ncclCommCount(comm, &size);
  if (r == ncclSuccess) r = ncclCommCuDevice(comm, &cdev);
  if (r != ncclSuccess) return nccl_fail(b, comm, r, "querying the communicator");
  if (cdev != dev)
    return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT,
                            "nccl: the communicator is on device %d, the backend on device %d", cdev, dev);
  mdr_comm *c = calloc(1, sizeof *c);
  nccl_rank *nr = calloc(1, sizeof *nr);
  if (!c || !nr) {
    free(c);
    free(nr);
    return mdr_backend_fail(b, MDR_ERR_OUT_OF_MEMORY, "nccl: communicator handle");
  }
  nr->comm = comm;
  nr->owned = owned;
  *c = (mdr_comm){.ops = &nccl_comm_ops, .b = b, .rank = rank, .size = size, .device = dev, .group = g, .impl = nr};
  *out = c;
  return MDR_OK;
}

int mdr_comm_nccl_available(void) { return 1; }

mdr_status mdr_comm_adopt_nccl(mdr_backend *b, void *nccl_comm, mdr_comm **out) {
  if (!out) return MDR_ERR_INVALID_ARGUMENT;
  *out = NULL;
  if (!b) return MDR_ERR_INVALID_ARGUMENT;
  if (!nccl_comm) return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT, "comm: NULL ncclComm_t");
  mdr_comm_group *g = mdr_comm_group_new(1);
  if (!g) return mdr_backend_fail(b, MDR_ERR_OUT_OF_MEMORY, "nccl: group");
  mdr_status st = make_rank(b, (ncclComm_t)nccl_comm, 0, g, out);
  if (st != MDR_OK) mdr_comm_group_release(g);
  return st;
}

mdr_status mdr_comm_create_local(mdr_backend *const *backends, int n, mdr_comm **out) {
  mdr_status st0 = mdr_comm_check_backends(backends, n, out);
  if (st0 != MDR_OK) return st0;
  int devs[n];
  for (int i = 0; i < n; i++) {
    devs[i] = mdr_be_cuda_device(backends[i]);
    if (devs[i] < 0)
      return mdr_backend_fail(backends[i], MDR_ERR_INVALID_ARGUMENT, "nccl: rank %d's backend is not CUDA", i);
    for (int j = 0; j < i; j++)
      if (devs[j] == devs[i])
        return mdr_backend_fail(backends[i], MDR_ERR_INVALID_ARGUMENT, "nccl: ranks %d and %d share device %d", j,
                                i, devs[i]);
  }
  ncclComm_t comms[n];
  int prev;
  enter_device(devs[0], &prev);
  ncclResult_t r = ncclCommInitAll(comms, n, devs);
  leave_device(prev);
  if (r != ncclSuccess) return nccl_fail(backends[0], NULL, r, "ncclCommInitAll");
  mdr_comm_group *g = mdr_comm_group_new(n);
  mdr_status st = g ? MDR_OK : mdr_backend_fail(backends[0], MDR_ERR_OUT_OF_MEMORY, "nccl: group");
  int made = 0;
  for (; st == MDR_OK && made < n; made++) {
    st = make_rank(backends[made], comms[made], 1, g, &out[made]);
    if (st != MDR_OK) break;
  }
  if (st != MDR_OK) {
    for (int i = 0; i < made; i++) {
      mdr_comm_free(out[i]); /* destroys its ncclComm_t, drops its group reference */
      out[i] = NULL;
    }
    for (int i = made; i < n; i++) {
      enter_device(devs[i], &prev);
      (void)ncclCommDestroy(comms[i]);
      leave_device(prev);
      if (g) mdr_comm_group_release(g);
    }
  }
  return st;
}

#else /* no NCCL in this build */

int mdr_comm_nccl_available(void) { return 0; }

mdr_status mdr_comm_adopt_nccl(mdr_backend *b, void *nccl_comm, mdr_comm **out) {
  if (!out) return MDR_ERR_INVALID_ARGUMENT;
  *out = NULL;
  if (!b) return MDR_ERR_INVALID_ARGUMENT;
  if (!nccl_comm) return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT, "comm: NULL ncclComm_t");
  return mdr_backend_fail(b, MDR_ERR_UNSUPPORTED, "nccl: this build of mdr has no NCCL");
}

mdr_status mdr_comm_create_local(mdr_backend *const *backends, int n, mdr_comm **out) {
  mdr_status st = mdr_comm_check_backends(backends, n, out);
  if (st != MDR_OK) return st;
  return mdr_backend_fail(backends[0], MDR_ERR_UNSUPPORTED, "nccl: this build of mdr has no NCCL");
}

#endif
