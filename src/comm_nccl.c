/* comm_nccl.c — the NCCL communicator: a rank is an ncclComm_t on a CUDA
 * backend's device (src/comm_nccl_impl.h has its private parts).
 *
 * Every NCCL and CUDA call runs on the rank's device (src/cuda_scope.h)
 * and leaves the caller's current device as it was. Every result is
 * checked: an NCCL failure becomes a status (ncclInvalidArgument:
 * MDR_ERR_INVALID_ARGUMENT, ncclInvalidUsage: MDR_ERR_STATE, the rest
 * MDR_ERR_BACKEND) with NCCL's error string and its last-error text in the
 * backend's last error; a CUDA failure likewise, CUDA's error state
 * cleared. Teardown (a communicator, ranks half made, the exchange's
 * buffers) returns nothing: what fails there is ignored on purpose, said
 * so where it happens, and CUDA's error state is cleared.
 *
 * An arena's slab (its memory, the symmetric window, and what mdr's
 * all-reduce kernels need there) is src/comm_nccl_window.c's; mdr's kernels
 * (kernels/all_reduce.cu) run where every rank could set them up, NCCL's
 * all-reduce everywhere else. */
#include "all_reduce_impl.h"

#if defined(MDR_HAVE_NCCL)

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "all_reduce.h"
#include "comm_nccl_impl.h"

static void words_free(void *p) {
  nccl_words *w = p;
  if (!w) return;
  if (w->host && cudaFreeHost(w->host) != cudaSuccess) (void)cudaGetLastError(); /* teardown: ignored */
  free(w);
}

/* The words of a group of `members` ranks of a communicator of `ranks`
 * (a report each), or NULL when they cannot be allocated (mdr's kernels
 * then stay off: src/comm_nccl_window.c's rank_ready says so), with CUDA's
 * error state cleared. */
static nccl_words *words_new(int ranks, int members) {
  const size_t bytes = MDR_ARP_HOST_WORDS(ranks) * sizeof(uint32_t);
  void *h = NULL, *d = NULL;
  nccl_words *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  if (cudaHostAlloc(&h, bytes, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) goto fail;
  if (cudaHostGetDevicePointer(&d, h, 0) != cudaSuccess) goto fail;
  memset(h, 0, bytes);
  w->host = h;
  w->dev = d;
  w->members = members;
  return w;
fail:
  (void)cudaGetLastError();
  if (h && cudaFreeHost(h) != cudaSuccess) (void)cudaGetLastError(); /* teardown: ignored */
  free(w);
  return NULL;
}

static mdr_status status_of(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return MDR_OK;
    case ncclInvalidArgument: return MDR_ERR_INVALID_ARGUMENT;
    case ncclInvalidUsage: return MDR_ERR_STATE;
    default: return MDR_ERR_BACKEND;
  }
}

mdr_status mdr_nccl_fail(mdr_backend *b, ncclComm_t comm, ncclResult_t r, const char *what) {
  const char *last = comm ? ncclGetLastError(comm) : NULL;
  return mdr_backend_fail(b, status_of(r), "nccl: %s: %s%s%s", what, ncclGetErrorString(r),
                          last && *last ? ": " : "", last && *last ? last : "");
}

mdr_status mdr_nccl_cuda_fail(mdr_backend *b, cudaError_t e, const char *what) {
  (void)cudaGetLastError();
  return mdr_backend_fail(b, e == cudaErrorMemoryAllocation ? MDR_ERR_OUT_OF_MEMORY : MDR_ERR_BACKEND,
                          "cuda: %s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

mdr_status mdr_nccl_enter(mdr_backend *b, int device, device_scope *g) {
  const char *what = "cudaSetDevice";
  const cudaError_t e = device_enter(device, g, &what);
  if (e == cudaSuccess) return MDR_OK;
  return mdr_backend_fail(b, MDR_ERR_BACKEND, "cuda: %s (device %d): %s (%s)", what, device, cudaGetErrorName(e),
                          cudaGetErrorString(e));
}

void mdr_nccl_enter_teardown(int device, device_scope *g) {
  (void)device_enter(device, g, NULL); /* ignored on purpose; device_enter cleared the error state */
}

static ncclDataType_t nccl_type(mdr_dtype dt) {
  switch (dt) {
    case MDR_DTYPE_BF16: return ncclBfloat16;
    case MDR_DTYPE_FP16: return ncclFloat16;
    default: return ncclFloat32;
  }
}

static mdr_status check_rank(mdr_comm *c, const char *what) {
  if (nccl_rank_of(c)->dead)
    return mdr_backend_fail(c->b, MDR_ERR_STATE, "nccl: %s on an aborted communicator", what);
  return mdr_comm_check_alive(c, what);
}

/* ---- the all-reduce ---- */

/* The transport's part of the call of mdr's kernels on the slab. */
static mdr_status nccl_call_of(mdr_comm *c, mdr_ar_call *k, mdr_dptr slab) {
  const nccl_slab *sl = mdr_nccl_slab_of(c, slab);
  if (!sl || !sl->kernels)
    return mdr_backend_fail(c->b, MDR_ERR_UNSUPPORTED, "all-reduce: mdr's kernels do not run on this slab");
  const nccl_words *w = nccl_words_of(c);
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

/* NCCL's all-reduce of the call's rows, in place, then the residual add
 * (and the fused RMSNorm) over the counted rows: one kernel after the
 * collective. On the rank's device. */
static mdr_status run_nccl(mdr_comm *c, const mdr_ar_call *k, char *base, mdr_stream s) {
  void *p = base + k->buf_off;
  const size_t n = k->rows * k->row_bytes / mdr_dtype_bytes((mdr_dtype)k->dtype);
  const ncclResult_t r =
      ncclAllReduce(p, p, n, nccl_type((mdr_dtype)k->dtype), ncclSum, nccl_rank_of(c)->comm, (cudaStream_t)s);
  if (r != ncclSuccess) return mdr_nccl_fail(c->b, nccl_rank_of(c)->comm, r, "ncclAllReduce");
  int e = 0;
  if (k->norm_weight)
    e = mdr_cuda_ar_residual_norm(base + k->res_off, p, base + k->norm_off, k->norm_weight, k->norm_eps,
                                  k->row_bytes, k->rows, k->count_ptr, k->dtype, s);
  else if (k->res_off != MDR_ARP_NO_RESIDUAL)
    e = mdr_cuda_ar_residual_add(base + k->res_off, p, k->row_bytes, k->rows, k->count_ptr, k->dtype, s);
  return e ? mdr_nccl_cuda_fail(c->b, (cudaError_t)e, "residual add after ncclAllReduce") : MDR_OK;
}

static mdr_status nccl_all_reduce(mdr_comm *c, mdr_ar_call *k, mdr_dptr slab, mdr_stream s) {
  mdr_status st = check_rank(c, "all-reduce");
  if (st != MDR_OK) return st;
  device_scope scope;
  st = mdr_nccl_enter(c->b, c->device, &scope);
  if (st != MDR_OK) return st;
  if (k->algo == MDR_ARP_NCCL) {
    st = run_nccl(c, k, (char *)(uintptr_t)slab, s);
  } else {
    st = nccl_call_of(c, k, slab);
    const int e = st == MDR_OK ? mdr_cuda_ar_launch(k, s) : 0;
    if (e) st = mdr_nccl_cuda_fail(c->b, (cudaError_t)e, "mdr all-reduce kernel");
  }
  device_leave(&scope);
  return st;
}

static size_t nccl_region_bytes(const mdr_comm *c, size_t max_message) {
  (void)max_message; /* the GPU's slots hold the public one-shot cap */
  return MDR_ARP_REGION_BYTES(c->size, MDR_ARP_ONE_SHOT_MAX_BYTES);
}

static int nccl_kernels(const mdr_comm *c, mdr_dptr slab) {
  const nccl_slab *sl = mdr_nccl_slab_of(c, slab);
  return sl && sl->kernels;
}

static int nccl_failed(const mdr_comm *c, char *why, size_t n) {
  const nccl_words *w = nccl_words_of(c);
  if (!w) return 0;
  const volatile uint32_t *rep = &w->host[MDR_ARP_HOST_RANKS0 + (size_t)c->rank * MDR_ARP_HOST_REPORT];
  if (!rep[MDR_ARP_REP_CAUSE]) return 0;
  mdr_ar_report_text(rep, c->rank, why, n);
  return 1;
}

static mdr_status nccl_state(mdr_comm *c, mdr_dptr slab, size_t region_off, mdr_arp_block *get,
                             const mdr_arp_block *set) {
  const nccl_slab *sl = mdr_nccl_slab_of(c, slab);
  if (!sl || !sl->kernels)
    return mdr_backend_fail(c->b, MDR_ERR_UNSUPPORTED, "all-reduce state: mdr's kernels do not run on this arena");
  char *region = (char *)(uintptr_t)(slab + region_off);
  const size_t states = (size_t)MDR_ARP_MAX_BLOCKS * sizeof(mdr_arp_block);
  const size_t flag_words = MDR_ARP_FLAGS_BYTES(c->size) / 4;
  mdr_arp_block *img = NULL;
  uint32_t *flags = NULL;
  cudaStream_t q = NULL;
  cudaError_t e = cudaSuccess;
  device_scope scope;
  mdr_status st = mdr_nccl_enter(c->b, c->device, &scope);
  if (st != MDR_OK) return st;
  if (set) {
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
  }
  e = cudaStreamCreateWithFlags(&q, cudaStreamNonBlocking);
  if (e == cudaSuccess && set)
    e = cudaMemcpyAsync(region + MDR_ARP_STATE_OFF, img, states, cudaMemcpyHostToDevice, q);
  if (e == cudaSuccess && set)
    e = cudaMemcpyAsync(region + MDR_ARP_FLAGS_OFF, flags, flag_words * 4, cudaMemcpyHostToDevice, q);
  if (e == cudaSuccess && get) e = cudaMemcpyAsync(get, region + MDR_ARP_STATE_OFF, sizeof *get, cudaMemcpyDeviceToHost, q);
  if (e == cudaSuccess) e = cudaStreamSynchronize(q);
  if (e != cudaSuccess) st = mdr_nccl_cuda_fail(c->b, e, "all-reduce state");
done:
  if (q && cudaStreamDestroy(q) != cudaSuccess) (void)cudaGetLastError(); /* teardown: ignored */
  free(img);
  free(flags);
  device_leave(&scope);
  return st;
}

/* ---- the exchange: an all-gather of small records through device memory ---- */

/* Rank c's buffer for `size` records of `bytes` and a stream, its own
 * record in place. What was made is left in *dev and *q, for
 * release_exchange_buffer, on a failure too. */
static mdr_status exchange_buffer(mdr_comm *c, int size, size_t bytes, const void *record, void **dev,
                                  cudaStream_t *q) {
  device_scope scope;
  const mdr_status st = mdr_nccl_enter(c->b, c->device, &scope);
  if (st != MDR_OK) return st;
  cudaError_t e = cudaMalloc(dev, (size_t)size * bytes);
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(q, cudaStreamNonBlocking);
  if (e == cudaSuccess)
    e = cudaMemcpyAsync((char *)*dev + (size_t)c->rank * bytes, record, bytes, cudaMemcpyHostToDevice, *q);
  if (e == cudaSuccess) e = cudaStreamSynchronize(*q);
  device_leave(&scope);
  return e == cudaSuccess ? MDR_OK : mdr_nccl_cuda_fail(c->b, e, "exchange buffer");
}

/* Every rank's all-gather, in one group when this thread drives several
 * ranks. A group that was started is always ended: after a call that
 * failed inside it NCCL drops the group's tasks. */
static mdr_status exchange_gather(mdr_comm *const *cs, int n, void *const *dev, const cudaStream_t *q, size_t bytes) {
  ncclResult_t r = n > 1 ? ncclGroupStart() : ncclSuccess;
  if (r != ncclSuccess) return mdr_nccl_fail(cs[0]->b, nccl_rank_of(cs[0])->comm, r, "ncclGroupStart (exchange)");
  mdr_status st = MDR_OK;
  for (int i = 0; i < n && st == MDR_OK; i++) {
    device_scope scope;
    st = mdr_nccl_enter(cs[i]->b, cs[i]->device, &scope);
    if (st != MDR_OK) break;
    char *d = dev[i];
    r = ncclAllGather(d + (size_t)cs[i]->rank * bytes, d, bytes, ncclUint8, nccl_rank_of(cs[i])->comm, q[i]);
    device_leave(&scope);
    if (r != ncclSuccess) st = mdr_nccl_fail(cs[i]->b, nccl_rank_of(cs[i])->comm, r, "ncclAllGather (exchange)");
  }
  if (n > 1) {
    r = ncclGroupEnd();
    if (r != ncclSuccess && st == MDR_OK) st = mdr_nccl_fail(cs[0]->b, nccl_rank_of(cs[0])->comm, r, "ncclGroupEnd");
  }
  return st;
}

/* Rank c's gathered records into `all` (blocking). */
static mdr_status exchange_read(mdr_comm *c, const void *dev, cudaStream_t q, size_t total, void *all) {
  device_scope scope;
  const mdr_status st = mdr_nccl_enter(c->b, c->device, &scope);
  if (st != MDR_OK) return st;
  cudaError_t e = cudaMemcpyAsync(all, dev, total, cudaMemcpyDeviceToHost, q);
  if (e == cudaSuccess) e = cudaStreamSynchronize(q);
  device_leave(&scope);
  return e == cudaSuccess ? MDR_OK : mdr_nccl_cuda_fail(c->b, e, "exchange read-back");
}

/* Teardown of a rank's buffer and stream: the stream is waited for first
 * (an all-gather may still use the buffer); failures are ignored on
 * purpose (the exchange's result is already decided). */
static void release_exchange_buffer(int device, void *dev, cudaStream_t q) {
  device_scope scope;
  mdr_nccl_enter_teardown(device, &scope);
  if (q) {
    (void)cudaStreamSynchronize(q);
    (void)cudaStreamDestroy(q);
  }
  if (dev) (void)cudaFree(dev);
  (void)cudaGetLastError();
  device_leave(&scope);
}

mdr_status mdr_nccl_exchange(mdr_comm *const *cs, int n, const void *mine, size_t bytes, void *all) {
  const int size = cs[0]->size;
  void *dev[n];
  cudaStream_t q[n];
  for (int i = 0; i < n; i++) {
    dev[i] = NULL;
    q[i] = NULL;
  }
  mdr_status st = MDR_OK;
  for (int i = 0; i < n && st == MDR_OK; i++)
    st = exchange_buffer(cs[i], size, bytes, (const char *)mine + (size_t)i * bytes, &dev[i], &q[i]);
  if (st == MDR_OK) st = exchange_gather(cs, n, dev, q, bytes);
  if (st == MDR_OK) st = exchange_read(cs[0], dev[0], q[0], (size_t)size * bytes, all);
  for (int i = 0; i < n; i++) release_exchange_buffer(cs[i]->device, dev[i], q[i]);
  return st;
}

/* ---- abort and teardown ---- */

/* The host word ends the waits of this group's kernels; a hard cancel
 * (mdr_comm_abort, a failed enqueue, a failure seen) also raises the region
 * words of the peers beyond the group (src/comm_nccl_window.c), before
 * ncclCommAbort. */
static void nccl_cancel(mdr_comm *c, int hard) {
  nccl_rank *nr = nccl_rank_of(c);
  nccl_words *w = nccl_words_of(c);
  if (w) __atomic_store_n(&w->host[MDR_ARP_HOST_ABORT], 1u, __ATOMIC_RELEASE); /* mdr's spinning kernels leave */
  if (!hard) return; /* a rank going away: its destroy tears its windows and NCCL down */
  if (!nr->dead) mdr_nccl_raise_peers(c);
  if (nr->owned && !nr->dead) {
    device_scope scope;
    mdr_nccl_enter_teardown(c->device, &scope);
    (void)ncclCommAbort(nr->comm); /* ignored on purpose: the communicator is dead either way */
    (void)cudaGetLastError();
    device_leave(&scope);
  }
  nr->dead = 1;
}

static void nccl_destroy(mdr_comm *c) {
  nccl_rank *nr = nccl_rank_of(c);
  while (nr->slabs) mdr_nccl_slab_free(c, nr->slabs->ptr); /* arenas left alive: their slabs go too */
  if (nr->owned && !nr->dead) {
    device_scope scope;
    mdr_nccl_enter_teardown(c->device, &scope);
    (void)ncclCommDestroy(nr->comm); /* teardown: ignored */
    (void)cudaGetLastError();
    device_leave(&scope);
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
    .exchange = mdr_nccl_exchange,
    .slab_alloc = mdr_nccl_slab_alloc,
    .slab_free = mdr_nccl_slab_free,
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
  if (r != ncclSuccess) return mdr_nccl_fail(b, comm, r, "querying the communicator");
  if (cdev != dev)
    return mdr_backend_fail(b, MDR_ERR_INVALID_ARGUMENT,
                            "nccl: the communicator is on device %d, the backend on device %d", cdev, dev);
  mdr_comm *c = calloc(1, sizeof *c);
  nccl_rank *nr = calloc(1, sizeof *nr);
  if (!c || !nr) goto fail;
  nr->comm = comm;
  nr->owned = owned;
  atomic_flag_clear(&nr->slabs_lock);
  *c = (mdr_comm){.ops = &nccl_comm_ops, .b = b, .rank = rank, .size = size, .device = dev, .group = g, .impl = nr,
                  .timeout_ms = mdr_ar_timeout_ms(b), .norm_fuse = mdr_ar_norm_fuse(b)};
  *out = c;
  return MDR_OK;
fail:
  free(c);
  free(nr);
  return mdr_backend_fail(b, MDR_ERR_OUT_OF_MEMORY, "nccl: communicator handle");
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
  g->impl = words_new((*out)->size, 1);
  g->impl_free = words_free;
  return MDR_OK;
}

/* A half-made set of ranks is torn down in full: the ranks made (each
 * destroys its ncclComm_t and drops its group reference), then the
 * communicators no rank holds yet. */
mdr_status mdr_comm_create_local(mdr_backend *const *backends, int n, mdr_comm **out) {
  mdr_status st = mdr_comm_check_backends(backends, n, out);
  if (st != MDR_OK) return st;
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
  device_scope scope;
  st = mdr_nccl_enter(backends[0], devs[0], &scope);
  if (st != MDR_OK) return st;
  const ncclResult_t r = ncclCommInitAll(comms, n, devs);
  device_leave(&scope);
  if (r != ncclSuccess) return mdr_nccl_fail(backends[0], NULL, r, "ncclCommInitAll");
  int made = 0;
  mdr_comm_group *g = mdr_comm_group_new(n);
  if (!g) {
    st = mdr_backend_fail(backends[0], MDR_ERR_OUT_OF_MEMORY, "nccl: group");
    goto fail;
  }
  /* the kernels' host words, one set for the ranks made together */
  g->impl = words_new(n, n);
  g->impl_free = words_free;
  for (; made < n; made++) {
    st = make_rank(backends[made], comms[made], 1, g, &out[made]);
    if (st != MDR_OK) goto fail;
  }
  return MDR_OK;
fail:
  for (int i = 0; i < made; i++) {
    mdr_comm_free(out[i]); /* destroys its ncclComm_t, drops its group reference */
    out[i] = NULL;
  }
  for (int i = made; i < n; i++) {
    mdr_nccl_enter_teardown(devs[i], &scope);
    (void)ncclCommDestroy(comms[i]); /* teardown: ignored */
    (void)cudaGetLastError();
    device_leave(&scope);
    if (g) mdr_comm_group_release(g); /* the reference rank i would have held */
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
