/* comm_host.c — the host communicator: n ranks as threads of one process,
 * each on its own host backend, sharing one state in host memory.
 *
 * All-reduce. Enqueued as a host-function op of the rank's stream, so a
 * host capture records it and every replay runs it, exactly like a graph
 * node. When it runs, each rank publishes its buffer and count, waits at a
 * barrier, reduces its own slice of the elements (rank r: elements
 * [count * r / n, count * (r + 1) / n)) reading every rank's buffer and
 * writing the sum into every rank's buffer, then waits at a second barrier
 * so no rank touches its buffer while a peer still writes it.
 *
 * Summation order, the same for every element and on every rank (so results
 * are deterministic, bit-identical between graph and eager, and equal on
 * every rank): acc = (float)x_0; for r = 1 .. n-1: acc += (float)x_r; the result
 * is acc rounded once to the element type (round to nearest even). fp32
 * sums in fp32. The same as mdr's kernels (kernels/all_reduce.cu), whose
 * twin this is: the row count read from the count word when the op runs
 * (MDR_AR_NCCL: the bound, as NCCL's fixed count), the residual add after
 * the sum, residual = round((float)residual + (float)sum), and an epoch
 * word in the arena's comm region advanced by every run.
 *
 * Barriers wait on a condition variable; an aborted group wakes them with
 * MDR_ERR_STATE, and a peer missing for MDR_HOST_COMM_TIMEOUT_MS (env, ms;
 * default 30000) aborts the group, so no rank waits for ever. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_impl.h"

enum { DEFAULT_TIMEOUT_MS = 30000, RECORD_MAX = 64 };

typedef struct host_shared {
  int n;
  pthread_mutex_t m;
  pthread_cond_t cv;
  unsigned long gen; /* barrier generation */
  int arrived;
  long timeout_ms;
  mdr_comm_group *group;
  mdr_dptr *bufs;    /* per rank, published at each all-reduce */
  size_t *counts;    /* per rank, the same */
  unsigned char *records; /* per rank, RECORD_MAX bytes: exchange */
} host_shared;

static void shared_free(void *p) {
  host_shared *sh = p;
  if (!sh) return;
  pthread_mutex_destroy(&sh->m);
  pthread_cond_destroy(&sh->cv);
  free(sh->bufs);
  free(sh->counts);
  free(sh->records);
  free(sh);
}

static host_shared *shared_of(const mdr_comm *c) { return c->group->impl; }

/* Wait for every rank (the caller holds no lock). */
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

/* ---- element conversions (round to nearest even) ---- */

static float bf16_to_float(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint16_t float_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static float fp16_to_float(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else { /* subnormal: normalise */
      exp = 127 - 15 + 1;
      while (!(man & 0x400u)) {
        man <<= 1;
        exp--;
      }
      u = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint16_t float_to_fp16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;          /* NaN */
  if (abs >= 0x477ff000u) return sign | 0x7c00u;         /* rounds to infinity */
  if (abs < 0x38800000u) {                                /* subnormal or zero in fp16 */
    if (abs < 0x33000000u) return sign;                   /* below half the smallest subnormal */
    const uint32_t exp = abs >> 23, man = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;                     /* 14 .. 24 */
    uint32_t half = man >> shift;
    const uint32_t rest = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rest > mid || (rest == mid && (half & 1u))) half++;
    return sign | (uint16_t)half;
  }
  uint32_t v = abs - ((127u - 15u) << 23);
  v += 0xfffu + ((v >> 13) & 1u);
  return sign | (uint16_t)(v >> 13);
}

static float load_elem(mdr_dptr p, size_t i, mdr_dtype dt) {
  switch (dt) {
    case MDR_DTYPE_BF16: return bf16_to_float(((const uint16_t *)(uintptr_t)p)[i]);
    case MDR_DTYPE_FP16: return fp16_to_float(((const uint16_t *)(uintptr_t)p)[i]);
    default: return ((const float *)(uintptr_t)p)[i];
  }
}

static void store_elem(mdr_dptr p, size_t i, mdr_dtype dt, float v) {
  switch (dt) {
    case MDR_DTYPE_BF16: ((uint16_t *)(uintptr_t)p)[i] = float_to_bf16(v); break;
    case MDR_DTYPE_FP16: ((uint16_t *)(uintptr_t)p)[i] = float_to_fp16(v); break;
    default: ((float *)(uintptr_t)p)[i] = v; break;
  }
}

/* ---- all-reduce ---- */

typedef struct ar_arg {
  mdr_comm *c;
  mdr_ar_call call;
} ar_arg;

/* The rows this run reduces: NCCL's count is fixed at enqueue (the bound);
 * mdr's kernels read the count word when they run. */
static size_t rows_now(const mdr_ar_call *k, int reduce) {
  if (!k->count_ptr || (reduce && k->algo == MDR_AR_NCCL)) return k->rows;
  const size_t counted = *(const uint32_t *)(uintptr_t)k->count_ptr;
  return counted < k->rows ? counted : k->rows;
}

/* Runs when the rank's stream reaches the op (eagerly or in a replay). */
static mdr_status run_all_reduce(mdr_backend *b, void *p) {
  (void)b;
  const ar_arg *a = p;
  mdr_comm *c = a->c;
  const mdr_ar_call *k = &a->call;
  host_shared *sh = shared_of(c);
  mdr_status st = mdr_comm_check_alive(c, "all-reduce");
  if (st != MDR_OK) return st;
  const size_t esize = mdr_dtype_bytes(k->dt), count = rows_now(k, 1) * k->row_bytes / esize;
  pthread_mutex_lock(&sh->m);
  sh->bufs[c->rank] = k->ptr;
  sh->counts[c->rank] = count;
  pthread_mutex_unlock(&sh->m);
  st = barrier(c);
  if (st != MDR_OK) return st;
  for (int r = 0; r < sh->n; r++)
    if (sh->counts[r] != count) {
      mdr_comm_mark_aborted(c);
      return mdr_backend_fail(c->b, MDR_ERR_STATE,
                              "host comm: rank %d all-reduces %zu elements, rank %d %zu: ranks out of lockstep",
                              c->rank, count, r, sh->counts[r]);
    }
  const size_t lo = count * (size_t)c->rank / (size_t)sh->n;
  const size_t hi = count * (size_t)(c->rank + 1) / (size_t)sh->n;
  for (size_t i = lo; i < hi; i++) {
    float acc = load_elem(sh->bufs[0], i, k->dt);
    for (int r = 1; r < sh->n; r++) acc += load_elem(sh->bufs[r], i, k->dt);
    for (int r = 0; r < sh->n; r++) store_elem(sh->bufs[r], i, k->dt, acc);
  }
  st = barrier(c);
  if (st != MDR_OK) return st;
  if (k->residual) { /* residual = round(residual + sum) over the counted rows */
    const size_t n = rows_now(k, 0) * k->row_bytes / esize;
    for (size_t i = 0; i < n; i++)
      store_elem(k->residual, i, k->dt, load_elem(k->residual, i, k->dt) + load_elem(k->ptr, i, k->dt));
  }
  uint32_t *epoch = (uint32_t *)(uintptr_t)(k->slab + k->region_off);
  (*epoch)++;
  return MDR_OK;
}

static mdr_status host_all_reduce(mdr_comm *c, const mdr_ar_call *call, mdr_stream s) {
  const ar_arg arg = {.c = c, .call = *call};
  return mdr_be_host_fn(c->b, run_all_reduce, &arg, sizeof arg, s);
}

/* The host twin's comm region: its epoch word. */
static size_t host_region_bytes(const mdr_comm *c) {
  (void)c;
  return 256;
}

static int host_kernels(const mdr_comm *c, mdr_dptr slab) {
  (void)c;
  (void)slab;
  return 1;
}

static mdr_status host_epoch(mdr_comm *c, mdr_dptr slab, size_t region_off, uint32_t *get, const uint32_t *set) {
  mdr_status st = mdr_be_synchronize(c->b, NULL); /* no op of the stream in flight */
  if (st != MDR_OK) return st;
  uint32_t *epoch = (uint32_t *)(uintptr_t)(slab + region_off);
  if (set) *epoch = *set;
  if (get) *get = *epoch;
  return MDR_OK;
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

static mdr_status host_slab_alloc(mdr_comm *const *cs, int n, size_t bytes, size_t region_off, mdr_dptr *slab,
                                  int *kind) {
  for (int i = 0; i < n; i++) {
    slab[i] = 0;
    mdr_status st = mdr_be_alloc_device(cs[i]->b, bytes, &slab[i]);
    if (st == MDR_OK) st = mdr_be_fill(cs[i]->b, slab[i] + region_off, 0, bytes - region_off);
    if (st != MDR_OK) {
      for (int j = 0; j <= i; j++)
        if (slab[j]) mdr_be_free_device(cs[j]->b, slab[j]);
      return st;
    }
    kind[i] = MDR_WINDOW_HOST;
  }
  return MDR_OK;
}

static void host_slab_free(mdr_comm *c, mdr_dptr slab) { mdr_be_free_device(c->b, slab); }

static void host_cancel(mdr_comm *c) {
  host_shared *sh = shared_of(c);
  pthread_mutex_lock(&sh->m);
  pthread_cond_broadcast(&sh->cv);
  pthread_mutex_unlock(&sh->m);
}

static void host_destroy(mdr_comm *c) { (void)c; }

static const struct mdr_comm_ops host_comm_ops = {
    .name = "host",
    .all_reduce = host_all_reduce,
    .region_bytes = host_region_bytes,
    .kernels = host_kernels,
    .epoch = host_epoch,
    .exchange = host_exchange,
    .slab_alloc = host_slab_alloc,
    .slab_free = host_slab_free,
    .cancel = host_cancel,
    .destroy = host_destroy,
};

static long timeout_ms(void) {
  const char *v = getenv("MDR_HOST_COMM_TIMEOUT_MS");
  long t = v ? strtol(v, NULL, 10) : 0;
  return t > 0 ? t : DEFAULT_TIMEOUT_MS;
}

mdr_status mdr_comm_create_host(mdr_backend *const *backends, int n, mdr_comm **out) {
  mdr_status st = mdr_comm_check_backends(backends, n, out);
  if (st != MDR_OK) return st;
  for (int i = 0; i < n; i++)
    if (!mdr_be_has_host_fn(backends[i]))
      return mdr_backend_fail(backends[i], MDR_ERR_INVALID_ARGUMENT,
                              "host comm: rank %d's backend (%s) is not a host backend", i, mdr_be_name(backends[i]));
  mdr_comm_group *g = mdr_comm_group_new(n);
  host_shared *sh = calloc(1, sizeof *sh);
  if (sh) {
    sh->bufs = calloc((size_t)n, sizeof *sh->bufs);
    sh->counts = calloc((size_t)n, sizeof *sh->counts);
    sh->records = calloc((size_t)n, RECORD_MAX);
  }
  if (!g || !sh || !sh->bufs || !sh->counts || !sh->records) {
    if (sh) {
      free(sh->bufs);
      free(sh->counts);
      free(sh->records);
    }
    free(sh);
    free(g);
    return mdr_backend_fail(backends[0], MDR_ERR_OUT_OF_MEMORY, "host comm: shared state of %d ranks", n);
  }
  sh->n = n;
  sh->timeout_ms = timeout_ms();
  sh->group = g;
  pthread_mutex_init(&sh->m, NULL);
  pthread_cond_init(&sh->cv, NULL);
  g->impl = sh;
  g->impl_free = shared_free;
  for (int i = 0; i < n; i++) {
    mdr_comm *c = calloc(1, sizeof *c);
    if (!c) {
      for (int j = 0; j < i; j++) {
        mdr_comm_free(out[j]);
        out[j] = NULL;
      }
      for (int j = i; j < n; j++) mdr_comm_group_release(g); /* the references never handed out */
      return mdr_backend_fail(backends[i], MDR_ERR_OUT_OF_MEMORY, "host comm: rank %d", i);
    }
    *c = (mdr_comm){.ops = &host_comm_ops, .b = backends[i], .rank = i, .size = n, .device = -1, .group = g};
    out[i] = c;
  }
  return MDR_OK;
}
