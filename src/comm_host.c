/* comm_host.c — the host communicator: n ranks as threads of one process,
 * each on its own host backend, sharing one state in host memory.
 *
 * All-reduce: the twin of mdr's kernels (src/ar_twin.c). Enqueued as a
 * host-function op of the rank's stream, so a host capture records it and
 * every replay runs it, exactly like a graph node. When it runs it follows
 * the protocol of
 * kernels/ar_protocol.h with the same functions the kernels call, over the
 * same comm region in each rank's slab (the ranks' slabs are plain host
 * memory every rank reaches): one block per rank, 32- or 16-bit atomic
 * loads and stores for what the kernels load and store volatile, acquire
 * and release where they do. One-shot: the block header and the rows into
 * slot [parity][rank] of every peer, the peers' headers compared, the
 * rows polled, summed, cleared. Two-shot: barrier 1 (signatures
 * compared), this rank's slice summed from every rank's rows and stored
 * into every rank's rows, barrier 2, the residual. Empty calls touch
 * nothing; every counter advances only on its own path. Every spin polls
 * the abort words and the time limit, as the kernels' do, and gives up
 * with the same report. So CI runs the protocol's sequences and start
 * states on the very comparisons the GPU makes.
 *
 * MDR_ALL_REDUCE_NCCL is NCCL's own collective on a GPU, outside mdr's
 * protocol; its twin here sums the whole bound behind a plain barrier
 * (mutex and condition variable) and leaves the protocol's counters alone.
 *
 * Summation order, the same for every element and on every rank (so results
 * are deterministic, bit-identical between graph and eager, and equal on
 * every rank): acc = (float)x_0; for r = 1 .. n-1: acc += (float)x_r; the
 * result is acc rounded once to the element type (round to nearest even).
 * fp32 sums in fp32. The residual add after the sum: residual =
 * round((float)residual + (float)sum).
 *
 * Time limit: MDR_AR_TIMEOUT_MS (ms) when set, else MDR_HOST_COMM_TIMEOUT_MS,
 * else 30 s; a rank waiting longer gives up and aborts the group, so no
 * rank waits for ever. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "all_reduce_impl.h"
#include "ar_twin.h"
#include "env.h"

enum { DEFAULT_TIMEOUT_MS = 30000, RECORD_MAX = 64 };

/* One arena's slabs, as every rank reaches them. */
typedef struct host_slab {
  struct host_slab *next;
  mdr_dptr self;
  char *peer[MDR_ARP_MAX_RANKS];
  size_t cap; /* one-shot bytes per slot */
} host_slab;

typedef struct host_rank {
  host_slab *slabs;
} host_rank;

typedef struct host_shared {
  int n;
  pthread_mutex_t m;
  pthread_cond_t cv;
  unsigned long gen; /* barrier generation */
  int arrived;
  long timeout_ms;
  mdr_comm_group *group;
  size_t *counts;         /* per rank, published at each NCCL-twin all-reduce */
  unsigned char *records; /* per rank, RECORD_MAX bytes: exchange */
  uint32_t *words;        /* MDR_ARP_HOST_WORDS(n): the abort request, each rank's report */
} host_shared;

static void shared_free(void *p) {
  host_shared *sh = p;
  if (!sh) return;
  pthread_mutex_destroy(&sh->m);
  pthread_cond_destroy(&sh->cv);
  free(sh->counts);
  free(sh->records);
  free(sh->words);
  free(sh);
}

static host_shared *shared_of(const mdr_comm *c) { return c->group->impl; }
static host_rank *rank_of(const mdr_comm *c) { return c->impl; }

/* Wait for every rank (the caller holds no lock): the NCCL twin and the
 * exchange. */
static mdr_status barrier(mdr_comm *c) {
  host_shared *sh = shared_of(c);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += sh->timeout_ms / 1000;
  until.tv_nsec += (sh->timeout_ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  mdr_status st = MDR_OK;
  pthread_mutex_lock(&sh->m);
  if (atomic_load(&c->group->aborted)) {
    st = MDR_ERR_STATE;
  } else if (++sh->arrived == sh->n) {
    sh->arrived = 0;
    sh->gen++;
    pthread_cond_broadcast(&sh->cv);
  } else {
    const unsigned long gen = sh->gen;
    while (sh->gen == gen && !atomic_load(&c->group->aborted)) {
      if (pthread_cond_timedwait(&sh->cv, &sh->m, &until) == ETIMEDOUT) {
        atomic_store(&c->group->aborted, 1);
        pthread_cond_broadcast(&sh->cv);
        pthread_mutex_unlock(&sh->m);
        return mdr_backend_fail(c->b, MDR_ERR_STATE,
                                "host comm: rank %d waited %ld ms for its peers; the communicator is aborted",
                                c->rank, sh->timeout_ms);
      }
    }
    if (sh->gen == gen) st = MDR_ERR_STATE; /* woken by an abort */
  }
  pthread_mutex_unlock(&sh->m);
  if (st != MDR_OK)
    return mdr_backend_fail(c->b, st, "host comm: rank %d: the communicator was aborted", c->rank);
  return MDR_OK;
}

/* The NCCL twin: the whole bound summed behind plain barriers, element
 * counts compared; the residual over the counted rows. */
static mdr_status run_nccl_twin(mdr_comm *c, const mdr_ar_call *k) {
  host_shared *sh = shared_of(c);
  const mdr_dtype dt = (mdr_dtype)k->dtype;
  const size_t esize = mdr_dtype_bytes(dt), count = k->rows * k->row_bytes / esize;
  pthread_mutex_lock(&sh->m);
  sh->counts[c->rank] = count;
  pthread_mutex_unlock(&sh->m);
  mdr_status st = barrier(c);
  if (st != MDR_OK) return st;
  for (int r = 0; r < sh->n; r++)
    if (sh->counts[r] != count) {
      mdr_comm_mark_aborted(c);
      return mdr_backend_fail(c->b, MDR_ERR_STATE,
                              "host comm: rank %d all-reduces %zu elements, rank %d %zu: ranks out of lockstep",
                              c->rank, count, r, sh->counts[r]);
    }
  const size_t lo = count * (size_t)c->rank / (size_t)sh->n, hi = count * (size_t)(c->rank + 1) / (size_t)sh->n;
  mdr_ar_twin_sum(k, sh->n, lo, hi);
  st = barrier(c);
  if (st != MDR_OK) return st;
  if (k->res_off != MDR_ARP_NO_RESIDUAL) mdr_ar_twin_residual(k, mdr_arp_rows_now(k) * k->row_bytes / esize);
  if (k->norm_weight) mdr_ar_twin_norm(k, mdr_arp_rows_now(k));
  return MDR_OK;
}

typedef struct ar_arg {
  mdr_comm *c;
  mdr_ar_call call;
} ar_arg;

/* Runs when the rank's stream reaches the op (eagerly or in a replay). */
static mdr_status run_all_reduce(mdr_backend *b, void *p) {
  (void)b;
  const ar_arg *a = p;
  mdr_status st = mdr_comm_check_alive(a->c, "all-reduce");
  if (st != MDR_OK) return st;
  return a->call.algo == MDR_ARP_NCCL ? run_nccl_twin(a->c, &a->call) : mdr_ar_twin_run(a->c, &a->call);
}

static host_slab *slab_of(const mdr_comm *c, mdr_dptr slab) {
  for (host_slab *sl = rank_of(c)->slabs; sl; sl = sl->next)
    if (sl->self == slab) return sl;
  return NULL;
}

static mdr_status host_all_reduce(mdr_comm *c, mdr_ar_call *k, mdr_dptr slab, mdr_stream s) {
  const host_slab *sl = slab_of(c, slab);
  if (!sl) return mdr_backend_fail(c->b, MDR_ERR_STATE, "host comm: the arena's slab is not this rank's");
  host_shared *sh = shared_of(c);
  for (int r = 0; r < c->size; r++) k->peer[r] = sl->peer[r];
  k->self = (char *)(uintptr_t)slab;
  k->slot_cap = sl->cap;
  k->rank = c->rank;
  k->nranks = c->size;
  k->max_blocks = 1;
  k->timeout_ns = (uint64_t)sh->timeout_ms * 1000000u;
  k->host_abort = &sh->words[MDR_ARP_HOST_ABORT];
  k->host_report = &sh->words[MDR_ARP_HOST_RANKS0 + (size_t)c->rank * MDR_ARP_HOST_REPORT];
  const ar_arg arg = {.c = c, .call = *k};
  return mdr_be_host_fn(c->b, run_all_reduce, &arg, sizeof arg, s);
}

/* The twin's slots hold the arena's largest message, up to the GPU's. */
static size_t slot_cap(size_t max_message) {
  const size_t m = (max_message + MDR_ARP_VEC - 1) / MDR_ARP_VEC * MDR_ARP_VEC;
  return m < MDR_ARP_ONE_SHOT_MAX_BYTES ? m : MDR_ARP_ONE_SHOT_MAX_BYTES;
}

static size_t host_region_bytes(const mdr_comm *c, size_t max_message) {
  return MDR_ARP_REGION_BYTES(c->size, slot_cap(max_message));
}

static int host_kernels(const mdr_comm *c, mdr_dptr slab) {
  (void)c;
  (void)slab;
  return 1;
}

static mdr_status host_state(mdr_comm *c, mdr_dptr slab, size_t region_off, mdr_arp_block *get,
                             const mdr_arp_block *set) {
  mdr_status st = mdr_be_synchronize(c->b, NULL); /* no op of the stream in flight */
  if (st != MDR_OK) return st;
  char *region = (char *)(uintptr_t)(slab + region_off);
  mdr_arp_block *states = (mdr_arp_block *)(region + MDR_ARP_STATE_OFF);
  if (set) {
    uint32_t *flags = (uint32_t *)(region + MDR_ARP_FLAGS_OFF);
    for (int b = 0; b < MDR_ARP_MAX_BLOCKS; b++) {
      states[b] = *set;
      for (int r = 0; r < c->size; r++) flags[2 * ((size_t)b * (size_t)c->size + (size_t)r)] = set->barriers;
    }
  }
  if (get) *get = states[0];
  return MDR_OK;
}

static int host_failed(const mdr_comm *c, char *why, size_t n) {
  host_shared *sh = shared_of(c);
  const uint32_t *rep = &sh->words[MDR_ARP_HOST_RANKS0 + (size_t)c->rank * MDR_ARP_HOST_REPORT];
  if (!__atomic_load_n(&rep[MDR_ARP_REP_CAUSE], __ATOMIC_ACQUIRE)) return 0;
  mdr_ar_report_text(rep, c->rank, why, n);
  return 1;
}

/* ---- exchange, slabs, teardown ---- */

static mdr_status host_exchange(mdr_comm *const *cs, int n, const void *mine, size_t bytes, void *all) {
  mdr_comm *c = cs[0];
  host_shared *sh = shared_of(c);
  if (bytes > RECORD_MAX) return mdr_backend_fail(c->b, MDR_ERR_INVALID_ARGUMENT, "host comm: record too large");
  if (n == sh->n) { /* every rank in this call: no one to wait for */
    for (int i = 0; i < n; i++) memcpy((unsigned char *)all + (size_t)cs[i]->rank * bytes,
                                       (const unsigned char *)mine + (size_t)i * bytes, bytes);
    return MDR_OK;
  }
  memcpy(sh->records + (size_t)c->rank * RECORD_MAX, mine, bytes);
  mdr_status st = barrier(c);
  if (st != MDR_OK) return st;
  for (int r = 0; r < sh->n; r++) memcpy((unsigned char *)all + (size_t)r * bytes, sh->records + (size_t)r * RECORD_MAX, bytes);
  return barrier(c); /* nobody writes a record again before everyone read them */
}

static mdr_status host_slab_alloc(mdr_comm *const *cs, int n, size_t bytes, size_t region_off, size_t max_message,
                                  mdr_dptr *slab, int *kind) {
  const int size = cs[0]->size;
  const size_t cap = slot_cap(max_message), scratch = MDR_ARP_SCRATCH_OFF(size);
  host_slab *rec[n];
  mdr_status st = MDR_OK;
  for (int i = 0; i < n; i++) {
    slab[i] = 0;
    rec[i] = NULL;
  }
  for (int i = 0; i < n && st == MDR_OK; i++) {
    rec[i] = calloc(1, sizeof *rec[i]);
    st = rec[i] ? mdr_be_alloc_device(cs[i]->b, bytes, &slab[i])
                : mdr_backend_fail(cs[i]->b, MDR_ERR_OUT_OF_MEMORY, "host comm: slab record");
    if (st == MDR_OK) st = mdr_be_fill(cs[i]->b, slab[i] + region_off, 0, scratch);
    if (st == MDR_OK)
      st = mdr_be_fill(cs[i]->b, slab[i] + region_off + scratch, 0xff, MDR_ARP_REGION_BYTES(size, cap) - scratch);
    kind[i] = MDR_WINDOW_HOST;
  }
  /* every rank learns every rank's slab (one thread per rank: exchanged) */
  uint64_t all[size > 0 ? size : 1];
  uint64_t mine[n];
  memset(all, 0, sizeof all);
  memset(mine, 0, sizeof mine);
  for (int i = 0; i < n; i++) mine[i] = st == MDR_OK ? (uint64_t)slab[i] : 0;
  if (size > MDR_ARP_MAX_RANKS && st == MDR_OK)
    st = mdr_backend_fail(cs[0]->b, MDR_ERR_UNSUPPORTED, "host comm: %d ranks (at most %d)", size,
                          MDR_ARP_MAX_RANKS);
  /* a rank that failed still takes part, so no peer waits for it */
  mdr_status ex = host_exchange(cs, n, mine, sizeof mine[0], all);
  if (st == MDR_OK) st = ex;
  for (int r = 0; st == MDR_OK && r < size; r++)
    if (!all[r]) st = mdr_backend_fail(cs[0]->b, MDR_ERR_STATE, "host comm: rank %d has no slab", r);
  if (st != MDR_OK) {
    for (int i = 0; i < n; i++) {
      if (slab[i]) mdr_be_free_device(cs[i]->b, slab[i]);
      slab[i] = 0;
      free(rec[i]);
    }
    return st;
  }
  for (int i = 0; i < n; i++) {
    rec[i]->self = slab[i];
    rec[i]->cap = cap;
    for (int r = 0; r < size; r++) rec[i]->peer[r] = (char *)(uintptr_t)all[r];
    rec[i]->next = rank_of(cs[i])->slabs;
    rank_of(cs[i])->slabs = rec[i];
  }
  return MDR_OK;
}

static void host_slab_free(mdr_comm *c, mdr_dptr slab) {
  host_rank *hr = rank_of(c);
  for (host_slab **p = &hr->slabs; *p; p = &(*p)->next)
    if ((*p)->self == slab) {
      host_slab *sl = *p;
      *p = sl->next;
      free(sl);
      break;
    }
  mdr_be_free_device(c->b, slab);
}

static void host_cancel(mdr_comm *c, int hard) {
  (void)hard;
  host_shared *sh = shared_of(c);
  __atomic_store_n(&sh->words[MDR_ARP_HOST_ABORT], 1u, __ATOMIC_RELEASE);
  pthread_mutex_lock(&sh->m);
  pthread_cond_broadcast(&sh->cv);
  pthread_mutex_unlock(&sh->m);
}

static void host_destroy(mdr_comm *c) {
  host_rank *hr = rank_of(c);
  while (hr->slabs) { /* arenas left alive: their records go (their slabs are the arenas') */
    host_slab *sl = hr->slabs;
    hr->slabs = sl->next;
    free(sl);
  }
  free(hr);
}

static const struct mdr_comm_ops host_comm_ops = {
    .name = "host",
    .all_reduce = host_all_reduce,
    .region_bytes = host_region_bytes,
    .kernels = host_kernels,
    .state = host_state,
    .failed = host_failed,
    .exchange = host_exchange,
    .slab_alloc = host_slab_alloc,
    .slab_free = host_slab_free,
    .cancel = host_cancel,
    .destroy = host_destroy,
};

static long timeout_ms(mdr_backend *b) {
  long t = mdr_ar_timeout_ms(b);
  if (t > 0) return t;
  t = mdr_env_ms(b, "MDR_HOST_COMM_TIMEOUT_MS", "host comm");
  return t > 0 ? t : DEFAULT_TIMEOUT_MS;
}

mdr_status mdr_comm_create_host(mdr_backend *const *backends, int n, mdr_comm **out) {
  mdr_status st = mdr_comm_check_backends(backends, n, out);
  if (st != MDR_OK) return st;
  if (n > MDR_ARP_MAX_RANKS)
    return mdr_backend_fail(backends[0], MDR_ERR_UNSUPPORTED, "host comm: %d ranks (at most %d, as mdr's kernels)", n,
                            MDR_ARP_MAX_RANKS);
  for (int i = 0; i < n; i++)
    if (!mdr_be_has_host_fn(backends[i]))
      return mdr_backend_fail(backends[i], MDR_ERR_INVALID_ARGUMENT,
                              "host comm: rank %d's backend (%s) is not a host backend", i, mdr_be_name(backends[i]));
  mdr_comm_group *g = mdr_comm_group_new(n);
  host_shared *sh = calloc(1, sizeof *sh);
  if (sh) {
    sh->counts = calloc((size_t)n, sizeof *sh->counts);
    sh->records = calloc((size_t)n, RECORD_MAX);
    sh->words = calloc(MDR_ARP_HOST_WORDS(n), sizeof *sh->words);
  }
  if (!g || !sh || !sh->counts || !sh->records || !sh->words) {
    if (sh) {
      free(sh->counts);
      free(sh->records);
      free(sh->words);
    }
    free(sh);
    free(g);
    return mdr_backend_fail(backends[0], MDR_ERR_OUT_OF_MEMORY, "host comm: shared state of %d ranks", n);
  }
  sh->n = n;
  sh->timeout_ms = timeout_ms(backends[0]);
  const int norm_fuse = mdr_ar_norm_fuse(backends[0]);
  sh->group = g;
  pthread_mutex_init(&sh->m, NULL);
  pthread_cond_init(&sh->cv, NULL);
  g->impl = sh;
  g->impl_free = shared_free;
  for (int i = 0; i < n; i++) {
    mdr_comm *c = calloc(1, sizeof *c);
    host_rank *hr = calloc(1, sizeof *hr);
    if (!c || !hr) {
      free(c);
      free(hr);
      for (int j = 0; j < i; j++) {
        mdr_comm_free(out[j]);
        out[j] = NULL;
      }
      for (int j = i; j < n; j++) mdr_comm_group_release(g); /* the references never handed out */
      return mdr_backend_fail(backends[i], MDR_ERR_OUT_OF_MEMORY, "host comm: rank %d", i);
    }
    *c = (mdr_comm){.ops = &host_comm_ops, .b = backends[i], .rank = i, .size = n, .device = -1, .group = g,
                    .impl = hr, .timeout_ms = sh->timeout_ms, .norm_fuse = norm_fuse};
    out[i] = c;
  }
  return MDR_OK;
}
