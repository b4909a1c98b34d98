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
#include "all_reduce_impl.h"
#include "env.h"

#if defined(MDR_HAVE_NCCL)

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "all_reduce.h"

typedef struct nccl_slab {
  struct nccl_slab *next;
  mdr_dptr ptr;
  ncclWindow_t win; /* NULL: plain */
  int from_nccl;    /* ncclMemAlloc (else cudaMalloc) */
  /* mdr's kernels */
  void *devcomm;    /* mdr_cuda_ar_devcomm_create's, or NULL */
  int kernels;      /* 1: they run on this slab (every rank agreed) */
  int max_blocks;   /* grid cap: SMs of the communicator's smallest GPU */
  int pdl;          /* programmatic dependent launch (sm_90+, MDR_AR_PDL not 0) */
  char *peer[MDR_ARP_MAX_RANKS];
} nccl_slab;

/* The host words of a group (kernels/ar_protocol.h): pinned, mapped, one
 * allocation for the ranks this process made together. */
typedef struct nccl_words {
  uint32_t *host; /* NULL: none could be allocated (kernels run without) */
  uint32_t *dev;  /* the same words as the GPUs reach them */
} nccl_words;

static void words_free(void *p) {
  nccl_words *w = p;
  if (!w) return;
  if (w->host) (void)cudaFreeHost(w->host);
  (void)cudaGetLastError();
  free(w);
}

/* The words of a group of `ranks` ranks, or NULL when out of memory. */
static nccl_words *words_new(int ranks) {
  nccl_words *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  void *h = NULL, *d = NULL;
  const size_t bytes = MDR_ARP_HOST_WORDS(ranks) * sizeof(uint32_t);
  if (cudaHostAlloc(&h, bytes, cudaHostAllocMapped | cudaHostAllocPortable) == cudaSuccess &&
      cudaHostGetDevicePointer(&d, h, 0) == cudaSuccess) {
    memset(h, 0, bytes);
    w->host = h;
    w->dev = d;
  } else {
    if (h) (void)cudaFreeHost(h);
    (void)cudaGetLastError();
    free(w);
    return NULL;
  }
  return w;
}

static nccl_words *words_of(const mdr_comm *c) { return c->group->impl; }

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

/* The caller's device, switched for a call: 1 on success, else 0 with the
 * sticky error cleared (the caller reports it). */
static int enter_device(int dev, int *prev) {
  if (cudaGetDevice(prev) != cudaSuccess) {
    (void)cudaGetLastError();
    *prev = -1;
  }
  if (*prev == dev || cudaSetDevice(dev) == cudaSuccess) return 1;
  (void)cudaGetLastError();
  return 0;
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

static mdr_status check_rank(mdr_comm *c, const char *what) {
  if (rank_of(c)->dead) return mdr_backend_fail(c->b, MDR_ERR_STATE, "nccl: %s on an aborted communicator", what);
  return mdr_comm_check_alive(c, what);
}

static nccl_slab *slab_of(const mdr_comm *c, mdr_dptr slab) {
  for (nccl_slab *sl = rank_of(c)->slabs; sl; sl = sl->next)
    if (sl->ptr == slab) return sl;
  return NULL;
}

/* The transport's part of the call of mdr's kernels on the slab. */
static mdr_status nccl_call_of(mdr_comm *c, mdr_ar_call *k, mdr_dptr slab) {
  const nccl_slab *sl = slab_of(c, slab);
  if (!sl || !sl->kernels)
    return mdr_backend_fail(c->b, MDR_ERR_UNSUPPORTED, "all-reduce: mdr's kernels do not run on this slab");
  const nccl_words *w = words_of(c);
  for (int r = 0; r < c->size; r++) k->peer[r] = sl->peer[r];
  k->self = (char *)(uintptr_t)slab;
  k->slot_cap = MDR_ARP_ONE_SHOT_MAX_BYTES;
  k->rank = c->rank;
  k->nranks = c->size;
  k->max_blocks = sl->max_blocks;
  k->pdl = sl->pdl;
  k->timeout_ns = (uint64_t)c->timeout_ms * 1000000u;
  k->host_abort = w ? &w->dev[MDR_ARP_HOST_ABORT] : NULL;
  k->host_report = w ? &w->dev[MDR_ARP_HOST_RANKS0 + (size_t)c->rank * MDR_ARP_HOST_REPORT] : NULL;
  return MDR_OK;
}

static mdr_status nccl_all_reduce(mdr_comm *c, mdr_ar_call *k, mdr_dptr slab, mdr_stream s) {
  mdr_status st = check_rank(c, "all-reduce");
  if (st != MDR_OK) return st;
  int prev;
  if (!enter_device(c->device, &prev)) return mdr_backend_fail(c->b, MDR_ERR_BACKEND, "cuda: cudaSetDevice(%d) failed", c->device);
  char *base = (char *)(uintptr_t)slab;
  if (k->algo == MDR_ARP_NCCL) {
    void *p = base + k->buf_off;
    const size_t n = k->rows * k->row_bytes / mdr_dtype_bytes((mdr_dtype)k->dtype);
    ncclResult_t r = ncclAllReduce(p, p, n, nccl_type((mdr_dtype)k->dtype), ncclSum, rank_of(c)->comm, (cudaStream_t)s);
    if (r != ncclSuccess) {
      leave_device(prev);
      return nccl_fail(c->b, rank_of(c)->comm, r, "ncclAllReduce");
    }
    /* the residual add (and the fused RMSNorm) over the counted rows, one
     * kernel after the collective */
    int e = 0;
    if (k->norm_weight)
      e = mdr_cuda_ar_residual_norm(base + k->res_off, p, base + k->norm_off, k->norm_weight, k->norm_eps,
                                    k->row_bytes, k->rows, k->count_ptr, k->dtype, s);
    else if (k->res_off != MDR_ARP_NO_RESIDUAL)
      e = mdr_cuda_ar_residual_add(base + k->res_off, p, k->row_bytes, k->rows, k->count_ptr, k->dtype, s);
    leave_device(prev);
    return e ? cuda_fail(c->b, (cudaError_t)e, "residual add after ncclAllReduce") : MDR_OK;
  }
  st = nccl_call_of(c, k, slab);
  if (st != MDR_OK) {
    leave_device(prev);
    return st;
  }
  const int e = mdr_cuda_ar_launch(k, s);
  leave_device(prev);
  return e ? cuda_fail(c->b, (cudaError_t)e, "mdr all-reduce kernel") : MDR_OK;
}

static size_t nccl_region_bytes(const mdr_comm *c, size_t max_message) {
  (void)max_message; /* the GPU's slots hold the public one-shot cap */
  return MDR_ARP_REGION_BYTES(c->size, MDR_ARP_ONE_SHOT_MAX_BYTES);
}

static int nccl_kernels(const mdr_comm *c, mdr_dptr slab) {
  const nccl_slab *sl = slab_of(c, slab);
  return sl && sl->kernels;
}

static int nccl_failed(const mdr_comm *c, char *why, size_t n) {
  const nccl_words *w = words_of(c);
  if (!w) return 0;
  const volatile uint32_t *rep = &w->host[MDR_ARP_HOST_RANKS0 + (size_t)c->rank * MDR_ARP_HOST_REPORT];
  if (!rep[MDR_ARP_REP_CAUSE]) return 0;
  mdr_ar_report_text(rep, c->rank, why, n);
  return 1;
}

static mdr_status nccl_state(mdr_comm *c, mdr_dptr slab, size_t region_off, mdr_arp_block *get,
                             const mdr_arp_block *set) {
  const nccl_slab *sl = slab_of(c, slab);
  if (!sl || !sl->kernels)
    return mdr_backend_fail(c->b, MDR_ERR_UNSUPPORTED, "all-reduce state: mdr's kernels do not run on this arena");
  int prev;
  if (!enter_device(c->device, &prev)) return mdr_backend_fail(c->b, MDR_ERR_BACKEND, "cuda: cudaSetDevice(%d) failed", c->device);
  cudaStream_t q = NULL;
  char *region = (char *)(uintptr_t)(slab + region_off);
  const size_t states = (size_t)MDR_ARP_MAX_BLOCKS * sizeof(mdr_arp_block);
  const size_t flag_words = MDR_ARP_FLAGS_BYTES(c->size) / 4;
  mdr_arp_block *img = NULL;
  uint32_t *flags = NULL;
  mdr_status st = MDR_OK;
  cudaError_t e = cudaStreamCreateWithFlags(&q, cudaStreamNonBlocking);
  if (e == cudaSuccess && set) {
    img = malloc(states);
    flags = malloc(flag_words * 4);
    if (!img || !flags) {
      st = mdr_backend_fail(c->b, MDR_ERR_OUT_OF_MEMORY, "all-reduce state: image");
      goto done;
    }
    for (int b = 0; b < MDR_ARP_MAX_BLOCKS; b++) img[b] = *set;
    /* {value, signature} per flag: the value B barriers leave */
    for (size_t i = 0; i < flag_words; i += 2) {
      flags[i] = set->barriers;
      flags[i + 1] = 0;
    }
    e = cudaMemcpyAsync(region + MDR_ARP_STATE_OFF, img, states, cudaMemcpyHostToDevice, q);
    if (e == cudaSuccess) e = cudaMemcpyAsync(region + MDR_ARP_FLAGS_OFF, flags, flag_words * 4, cudaMemcpyHostToDevice, q);
  }
  if (e == cudaSuccess && get) e = cudaMemcpyAsync(get, region + MDR_ARP_STATE_OFF, sizeof *get, cudaMemcpyDeviceToHost, q);
  if (e == cudaSuccess) e = cudaStreamSynchronize(q);
  if (e != cudaSuccess) st = cuda_fail(c->b, e, "all-reduce state");
done:
  if (q) (void)cudaStreamDestroy(q);
  free(img);
  free(flags);
  leave_device(prev);
  return st;
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
      st = mdr_backend_fail(cs[i]->b, MDR_ERR_BACKEND, "cuda: cudaSetDevice(%d) failed", cs[i]->device);
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
    ncclResult_t r = n > 1 ? ncclGroupStart() : ncclSuccess;
    if (r != ncclSuccess) st = nccl_fail(cs[0]->b, rank_of(cs[0])->comm, r, "ncclGroupStart (exchange)");
    for (int i = 0; i < n && r == ncclSuccess; i++) {
      int prev;
      if (!enter_device(cs[i]->device, &prev)) {
        st = mdr_backend_fail(cs[i]->b, MDR_ERR_BACKEND, "cuda: cudaSetDevice(%d) failed", cs[i]->device);
        break;
      }
      char *d = dev[i];
      r = ncclAllGather(d + (size_t)cs[i]->rank * bytes, d, bytes, ncclUint8, rank_of(cs[i])->comm, q[i]);
      leave_device(prev);
      if (r != ncclSuccess) st = nccl_fail(cs[i]->b, rank_of(cs[i])->comm, r, "ncclAllGather (exchange)");
    }
    if (n > 1 && st == MDR_OK) {
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
  /* the exact release of the headers (major, minor and patch: NCCL_VERSION_CODE
   * is major*10000 + minor*100 + patch from 2.9 on): the kernels read NCCL's
   * window records inline, whose layout no release promises to keep */
  if (v != NCCL_VERSION_CODE) return "the NCCL library is another release than the headers mdr was built with";
  if (c->size > MDR_ARP_MAX_RANKS) return "more ranks than mdr's kernels take (MDR_ALL_REDUCE_MAX_RANKS)";
  if (!words_of(c)) return "no pinned host words for the kernels' abort and report";
  if (!sl->devcomm) return "ncclDevCommCreate failed (no device API on this communicator)";
  int rank, nranks, lsa_rank, lsa_size;
  mdr_cuda_ar_devcomm_info(sl->devcomm, &rank, &nranks, &lsa_rank, &lsa_size);
  if (lsa_size != nranks || lsa_rank != rank) return "the ranks are not all in one LSA (NVLink) team";
  if (region_off + MDR_ARP_REGION_BYTES(c->size, MDR_ARP_ONE_SHOT_MAX_BYTES) > bytes) return "no comm region in the slab";
  if (mdr_cuda_ar_resolve_peers(sl->win, c->size, sl->peer, q) != 0) return "resolving the peers' LSA pointers failed";
  char *region = (char *)(uintptr_t)(sl->ptr + region_off);
  if (mdr_cuda_ar_region_init(region, c->size, MDR_ARP_ONE_SHOT_MAX_BYTES, q) != 0 ||
      cudaStreamSynchronize(q) != cudaSuccess)
    return "setting up the comm region failed";
  if (cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, c->device) != cudaSuccess) return "no SM count";
  /* programmatic dependent launch: sm_90 and later, unless MDR_AR_PDL=0 */
  int major = 0;
  sl->pdl = mdr_env_switch_or(c->b, "MDR_AR_PDL", "arena on a communicator", 1) &&
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, c->device) == cudaSuccess && major >= 9;
  return NULL;
}

/* Set mdr's kernels up on every rank's symmetric slab, or on none. */
static mdr_status setup_kernels(mdr_comm *const *cs, int n, nccl_slab **sl, size_t bytes, size_t region_off) {
  /* the device communicators: a group task each (a rank whose task cannot
   * be made still takes part in the agreement below, as not ready) */
  const int grouped = n > 1 && ncclGroupStart() == ncclSuccess;
  int made[n];
  for (int i = 0; i < n; i++) {
    int prev;
    made[i] = (n == 1 || grouped) && enter_device(cs[i]->device, &prev);
    if (!made[i]) continue;
    made[i] = mdr_cuda_ar_devcomm_create(rank_of(cs[i])->comm, &sl[i]->devcomm) == 0;
    leave_device(prev);
  }
  if (grouped && ncclGroupEnd() != ncclSuccess)
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

static mdr_status nccl_slab_alloc(mdr_comm *const *cs, int n, size_t bytes, size_t region_off, size_t max_message,
                                  mdr_dptr *slab, int *kind) {
  (void)max_message; /* the GPU's region holds the public one-shot cap */
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
    const int grouped = n > 1 && ncclGroupStart() == ncclSuccess;
    for (int i = 0; i < n; i++) {
      if (!sl[i]->from_nccl || (n > 1 && !grouped)) continue; /* plain memory: agreed below */
      int prev;
      if (!enter_device(cs[i]->device, &prev)) continue;
      ncclResult_t r = ncclCommWindowRegister(rank_of(cs[i])->comm, (void *)(uintptr_t)sl[i]->ptr, bytes,
                                              &sl[i]->win, NCCL_WIN_COLL_SYMMETRIC);
      leave_device(prev);
      if (r != ncclSuccess) {
        sl[i]->win = NULL;
        nccl_fail(cs[i]->b, rank_of(cs[i])->comm, r, "ncclCommWindowRegister (falling back to plain memory)");
      }
    }
    if (grouped && ncclGroupEnd() != ncclSuccess)
      for (int i = 0; i < n; i++)
        if (sl[i]->win) { /* the group failed: no registration is to be trusted */
          nccl_fail(cs[i]->b, rank_of(cs[i])->comm, ncclInternalError, "ncclGroupEnd (window registration)");
          (void)ncclCommWindowDeregister(rank_of(cs[i])->comm, sl[i]->win);
          sl[i]->win = NULL;
        }
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

static void nccl_cancel(mdr_comm *c, int hard) {
  nccl_rank *nr = rank_of(c);
  nccl_words *w = words_of(c);
  if (w) __atomic_store_n(&w->host[MDR_ARP_HOST_ABORT], 1u, __ATOMIC_RELEASE); /* mdr's spinning kernels leave */
  if (!hard) return; /* a rank going away: its own destroy tears NCCL down */
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
    .call_of = nccl_call_of,
    .region_bytes = nccl_region_bytes,
    .kernels = nccl_kernels,
    .state = nccl_state,
    .failed = nccl_failed,
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
  *c = (mdr_comm){.ops = &nccl_comm_ops, .b = b, .rank = rank, .size = size, .device = dev, .group = g, .impl = nr,
                  .timeout_ms = mdr_ar_timeout_ms(b)};
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
  if (st != MDR_OK) {
    mdr_comm_group_release(g);
    return st;
  }
  /* the kernels' host words (without them the kernels stay off: rank_ready) */
  g->impl = words_new((*out)->size);
  g->impl_free = words_free;
  return MDR_OK;
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
  if (!enter_device(devs[0], &prev))
    return mdr_backend_fail(backends[0], MDR_ERR_BACKEND, "cuda: cudaSetDevice(%d) failed", devs[0]);
  ncclResult_t r = ncclCommInitAll(comms, n, devs);
  leave_device(prev);
  if (r != ncclSuccess) return nccl_fail(backends[0], NULL, r, "ncclCommInitAll");
  mdr_comm_group *g = mdr_comm_group_new(n);
  mdr_status st = g ? MDR_OK : mdr_backend_fail(backends[0], MDR_ERR_OUT_OF_MEMORY, "nccl: group");
  if (g) { /* the kernels' host words, one set for the ranks made together */
    g->impl = words_new(n);
    g->impl_free = words_free;
  }
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
