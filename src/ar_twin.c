/* ar_twin.c — the host twin of mdr's all-reduce kernels: the protocol of
 * kernels/ar_protocol.h run by a rank that is a thread (src/comm_host.c
 * enqueues it), with the functions the kernels call, over the same comm
 * region in each rank's slab. One block per rank; 32- or 16-bit atomic
 * loads and stores where the kernels load and store volatile, acquire and
 * release where they do. One-shot: the block header and the rows into slot
 * [parity][rank] of every peer, the peers' headers compared, the rows
 * polled, summed, cleared. Two-shot: barrier 1 (signatures compared), this
 * rank's slice summed from every rank's rows and stored into every rank's
 * rows, barrier 2, the residual. Empty calls touch nothing; every counter
 * advances only on its own path. Every spin polls the abort words and the
 * time limit, as the kernels' do, and gives up with the same report.
 *
 * Arithmetic: acc = (float)x_0; acc += (float)x_r for r = 1 .. n-1; one
 * rounding to the element type (round to nearest even; fp32 sums in fp32);
 * residual = round((float)residual + (float)sum). The fused RMSNorm after
 * it: the operations of kernels/ar_protocol.h in their order (twin_norm);
 * its two-shot splits whole rows between the ranks, as the kernel's does.
 * Where mdr_arp_norm_fused says the GPU runs the unfused chain, the twin
 * runs the plain protocol and then the norm, as mdr_cuda_ar_launch does. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "ar_twin.h"

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

/* ---- element access as the kernels' volatile loads and stores ---- */

static uint32_t ld_elem(const char *p, size_t i, size_t esize) {
  if (esize == 4) return __atomic_load_n((const uint32_t *)p + i, __ATOMIC_ACQUIRE);
  return __atomic_load_n((const uint16_t *)p + i, __ATOMIC_ACQUIRE);
}

static void st_elem(char *p, size_t i, size_t esize, uint32_t v) {
  if (esize == 4) {
    __atomic_store_n((uint32_t *)p + i, v, __ATOMIC_RELEASE);
  } else {
    __atomic_store_n((uint16_t *)p + i, (uint16_t)v, __ATOMIC_RELEASE);
  }
}

static float widen(uint32_t bits, mdr_dtype dt) {
  switch (dt) {
    case MDR_DTYPE_BF16: return bf16_to_float((uint16_t)bits);
    case MDR_DTYPE_FP16: return fp16_to_float((uint16_t)bits);
    default: {
      float f;
      memcpy(&f, &bits, 4);
      return f;
    }
  }
}

static uint32_t narrow(float v, mdr_dtype dt) {
  switch (dt) {
    case MDR_DTYPE_BF16: return float_to_bf16(v);
    case MDR_DTYPE_FP16: return float_to_fp16(v);
    default: {
      uint32_t u;
      memcpy(&u, &v, 4);
      return u;
    }
  }
}

/* ---- the protocol's waits ---- */

typedef struct twin {
  mdr_comm *c;
  const mdr_ar_call *k;
  mdr_arp_block st;
  uint32_t sig;
  struct timespec t0;
  int timed;
  int peer_seen; /* the region's abort word was seen: the next poll's failure leaves */
} twin;

static uint32_t *region_words(const mdr_ar_call *k, char *slab) { return (uint32_t *)(slab + k->region_off); }

static double since(const struct timespec *t0) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)(now.tv_sec - t0->tv_sec) * 1e3 + (double)(now.tv_nsec - t0->tv_nsec) * 1e-6;
}

/* The kernels' must_leave: nonzero (a cause) when the wait must end. As
 * there, the region's abort word ends a wait only after one more poll of
 * it (a rank raising it may have completed this call first). */
static uint32_t must_leave(twin *t, unsigned *turns) {
  sched_yield(); /* ranks are threads; let the peers run */
  if (t->peer_seen) return MDR_ARP_PEER;
  if ((++*turns % MDR_ARP_POLL_EVERY) != 0) return 0;
  const mdr_ar_call *k = t->k;
  if (__atomic_load_n(&region_words(k, k->self)[MDR_ARP_CTL_ABORT], __ATOMIC_ACQUIRE)) {
    t->peer_seen = 1;
    return 0;
  }
  if (__atomic_load_n((const uint32_t *)k->host_abort, __ATOMIC_ACQUIRE)) return MDR_ARP_ABORTED;
  if (k->timeout_ns) {
    if (!t->timed) {
      clock_gettime(CLOCK_MONOTONIC, &t->t0);
      t->timed = 1;
    } else if (since(&t->t0) * 1e6 > (double)k->timeout_ns) {
      return MDR_ARP_TIMED_OUT;
    }
  }
  return 0;
}

/* The kernels' give_up: the report (once per rank), every rank's abort
 * word; then the group is aborted and the text recorded. */
static mdr_status give_up(twin *t, uint32_t cause, uint32_t wait, int peer) {
  const mdr_ar_call *k = t->k;
  uint32_t *ctl = region_words(k, k->self);
  uint32_t zero = 0;
  if (__atomic_compare_exchange_n(&ctl[MDR_ARP_CTL_CLAIM], &zero, 1u, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    uint32_t *rep = (uint32_t *)k->host_report;
    __atomic_store_n(&rep[MDR_ARP_REP_WAIT], wait, __ATOMIC_RELAXED);
    __atomic_store_n(&rep[MDR_ARP_REP_PEER], (uint32_t)peer, __ATOMIC_RELAXED);
    __atomic_store_n(&rep[MDR_ARP_REP_BLOCK], 0u, __ATOMIC_RELAXED);
    __atomic_store_n(&rep[MDR_ARP_REP_CALL], t->st.calls, __ATOMIC_RELAXED);
    __atomic_store_n(&rep[MDR_ARP_REP_CAUSE], cause, __ATOMIC_RELEASE);
  }
  /* a cause found here (the time limit, a mismatch) ends the peers' waits
   * too; an abort the host asked for, or a peer's, the peers know of
   * already (and a rank that went away has no region to write to) */
  const int all = cause == MDR_ARP_TIMED_OUT || cause == MDR_ARP_MISMATCH;
  for (int r = 0; r < k->nranks; r++)
    if (all || r == k->rank) __atomic_store_n(&region_words(k, k->peer[r])[MDR_ARP_CTL_ABORT], 1u, __ATOMIC_RELEASE);
  mdr_comm_mark_aborted(t->c);
  char why[256];
  mdr_ar_report_text((const uint32_t *)k->host_report, t->c->rank, why, sizeof why);
  return mdr_backend_fail(t->c->b, MDR_ERR_STATE, "host comm: %s", why);
}

static uint32_t *flag_slot(const mdr_ar_call *k, char *slab, int r) {
  return (uint32_t *)(slab + k->region_off + MDR_ARP_FLAGS_OFF) + 2 * (size_t)r; /* block 0 */
}

/* The kernels' peer_in_one_shot: a header of peer r in either parity. */
static int peer_in_one_shot(const mdr_ar_call *k, int r) {
  const size_t slot_bytes = MDR_ARP_SLOT_BYTES(k->slot_cap);
  for (int q = 0; q < 2; q++) {
    const uint32_t *h = (const uint32_t *)(k->self + k->region_off + MDR_ARP_SCRATCH_OFF(k->nranks) +
                                           ((size_t)q * (size_t)k->nranks + (size_t)r) * slot_bytes);
    for (int w = 0; w < 4; w++)
      if (__atomic_load_n(h + w, __ATOMIC_ACQUIRE) != 0xffffffffu) return 1;
  }
  return 0;
}

/* Barrier k (1 or 2) of this call: publish, wait for every peer, compare
 * the signatures at the first. */
static mdr_status twin_barrier(twin *t, uint32_t kb) {
  const mdr_ar_call *k = t->k;
  const uint32_t value = mdr_arp_barrier_value(&t->st, kb);
  for (int r = 0; r < k->nranks; r++) {
    uint32_t *theirs = flag_slot(k, k->peer[r], k->rank);
    __atomic_store_n(theirs + 1, t->sig, __ATOMIC_RELAXED);
    __atomic_store_n(theirs, value, __ATOMIC_RELEASE);
  }
  for (int r = 0; r < k->nranks; r++) {
    const uint32_t *mine = flag_slot(k, k->self, r);
    unsigned turns = 0;
    uint32_t cause = 0;
    while (mdr_arp_waiting(__atomic_load_n(mine, __ATOMIC_ACQUIRE), value)) {
      if ((cause = must_leave(t, &turns)) != 0) break;
      if (kb == 1 && turns % MDR_ARP_POLL_EVERY == 0 && peer_in_one_shot(k, r)) {
        cause = MDR_ARP_MISMATCH;
        break;
      }
    }
    if (!cause && kb == 1 && __atomic_load_n(mine + 1, __ATOMIC_RELAXED) != t->sig) cause = MDR_ARP_MISMATCH;
    if (cause) return give_up(t, cause, kb == 1 ? MDR_ARP_WAIT_BARRIER1 : MDR_ARP_WAIT_BARRIER2, r);
  }
  return MDR_OK;
}

void mdr_ar_twin_residual(const mdr_ar_call *k, size_t count) {
  const mdr_dtype dt = (mdr_dtype)k->dtype;
  const size_t esize = mdr_dtype_bytes(dt);
  char *res = k->self + k->res_off;
  const char *sum = k->self + k->buf_off;
  for (size_t i = 0; i < count; i++)
    st_elem(res, i, esize, narrow(widen(ld_elem(res, i, esize), dt) + widen(ld_elem(sum, i, esize), dt), dt));
}

/* The fused RMSNorm (kernels/ar_protocol.h, include/mdr/comm.h) of rows
 * [lo, hi): the residual's rows (after the add) into norm_output, in the
 * operations and order the kernels use. */
static void twin_norm(const mdr_ar_call *k, size_t lo, size_t hi) {
  const mdr_dtype dt = (mdr_dtype)k->dtype;
  const size_t esize = mdr_dtype_bytes(dt), h = k->row_bytes / esize, nvec = h / 8;
  const size_t leaves = mdr_arp_norm_leaves(nvec);
  const char *w = k->norm_weight;
  float s[MDR_ARP_NORM_MAX_VECS];
  for (size_t row = lo; row < hi; row++) {
    const char *res = k->self + k->res_off + row * k->row_bytes;
    char *out = k->self + k->norm_off + row * k->row_bytes;
    for (size_t j = 0; j < leaves; j++) {
      float p = 0.0f; /* the padding leaves: +0 */
      for (size_t e = 0; j < nvec && e < 8; e++) {
        const float x = widen(ld_elem(res, 8 * j + e, esize), dt), q = x * x;
        p = e == 0 ? q : p + q;
      }
      s[j] = p;
    }
    for (size_t half = leaves / 2; half >= 1; half /= 2)
      for (size_t j = 0; j < half; j++) s[j] = s[j] + s[j + half];
    const float mean = s[0] / (float)h, inv = 1.0f / sqrtf(mean + k->norm_eps);
    for (size_t i = 0; i < h; i++) {
      uint32_t wb = 0;
      memcpy(&wb, w + i * esize, esize);
      const float x = widen(ld_elem(res, i, esize), dt), y = x * inv;
      st_elem(out, i, esize, narrow(y * widen(wb, dt), dt));
    }
  }
}

static mdr_status twin_two_shot(twin *t, size_t count) {
  const mdr_ar_call *k = t->k;
  const mdr_dtype dt = (mdr_dtype)k->dtype;
  const size_t esize = mdr_dtype_bytes(dt), n = (size_t)k->nranks;
  mdr_status st = twin_barrier(t, 1);
  if (st != MDR_OK) return st;
  size_t lo = count * (size_t)k->rank / n, hi = count * (size_t)(k->rank + 1) / n;
  const size_t per_row = k->row_bytes / esize, rows = count / per_row;
  if (k->norm_weight) { /* the fused two-shot splits whole rows */
    mdr_arp_norm_rows_of(rows, k->rank, k->nranks, &lo, &hi);
    lo *= per_row;
    hi *= per_row;
  }
  for (size_t i = lo; i < hi; i++) {
    float acc = widen(ld_elem(k->peer[0] + k->buf_off, i, esize), dt);
    for (int r = 1; r < k->nranks; r++) acc += widen(ld_elem(k->peer[r] + k->buf_off, i, esize), dt);
    const uint32_t sum = narrow(acc, dt);
    for (int r = 0; r < k->nranks; r++) st_elem(k->peer[r] + k->buf_off, i, esize, sum);
  }
  st = twin_barrier(t, 2);
  if (st != MDR_OK) return st;
  if (k->res_off != MDR_ARP_NO_RESIDUAL) mdr_ar_twin_residual(k, count);
  if (k->norm_weight) twin_norm(k, 0, rows);
  return MDR_OK;
}

static mdr_status twin_one_shot(twin *t, size_t count, size_t nvec) {
  const mdr_ar_call *k = t->k;
  const mdr_dtype dt = (mdr_dtype)k->dtype;
  const size_t esize = mdr_dtype_bytes(dt), slot_bytes = MDR_ARP_SLOT_BYTES(k->slot_cap);
  const size_t base = k->region_off + MDR_ARP_SCRATCH_OFF(k->nranks) +
                      (size_t)mdr_arp_parity(&t->st) * (size_t)k->nranks * slot_bytes;
  const uint32_t all_ones = esize == 4 ? 0xffffffffu : 0xffffu;
  uint32_t h[4];
  mdr_arp_header(h, t->sig, nvec, &t->st, 1);
  char *rows = k->self + k->buf_off;
  /* send: the header (block 0's), then the rows, into this rank's slot of every peer */
  for (int r = 0; r < k->nranks; r++) {
    if (r == k->rank) continue;
    char *slot = k->peer[r] + base + (size_t)k->rank * slot_bytes;
    for (int w = 0; w < 4; w++) __atomic_store_n((uint32_t *)slot + w, h[w], __ATOMIC_RELEASE);
    for (size_t i = 0; i < count; i++)
      st_elem(slot + MDR_ARP_HEADER_BYTES, i, esize, mdr_arp_canonical(ld_elem(rows, i, esize), k->dtype) & all_ones);
  }
  /* the peers' headers: the same call, or give up */
  char *local = k->self + base;
  for (int r = 0; r < k->nranks; r++) {
    if (r == k->rank) continue;
    uint32_t *slot = (uint32_t *)(local + (size_t)r * slot_bytes);
    const uint32_t *flag = flag_slot(k, k->self, r);
    unsigned turns = 0;
    uint32_t cause = 0, v[4];
    for (;;) {
      const uint32_t f = __atomic_load_n(flag, __ATOMIC_ACQUIRE); /* first: then the header is current */
      int ready = 1;
      for (int w = 0; w < 4; w++) ready &= (v[w] = __atomic_load_n(slot + w, __ATOMIC_ACQUIRE)) != 0xffffffffu;
      if (ready || (cause = must_leave(t, &turns)) != 0) break;
      if (turns % MDR_ARP_POLL_EVERY == 0 && f != t->st.barriers) { /* a peer in a two-shot */
        cause = MDR_ARP_MISMATCH;
        break;
      }
    }
    if (!cause && memcmp(v, h, sizeof h) != 0) cause = MDR_ARP_MISMATCH;
    if (cause) return give_up(t, cause, MDR_ARP_WAIT_HEADER, r);
    for (int w = 0; w < 4; w++) __atomic_store_n(slot + w, 0xffffffffu, __ATOMIC_RELEASE);
  }
  /* poll, sum in rank order, clear */
  for (size_t i = 0; i < count; i++) {
    const uint32_t own = mdr_arp_canonical(ld_elem(rows, i, esize), k->dtype) & all_ones;
    float acc = 0;
    for (int r = 0; r < k->nranks; r++) {
      uint32_t v = own;
      if (r != k->rank) {
        char *slot = local + (size_t)r * slot_bytes + MDR_ARP_HEADER_BYTES;
        unsigned turns = 0;
        while (mdr_arp_pending(v = ld_elem(slot, i, esize), k->dtype)) {
          const uint32_t cause = must_leave(t, &turns);
          if (cause) return give_up(t, cause, MDR_ARP_WAIT_ROWS, r);
        }
        st_elem(slot, i, esize, all_ones);
      }
      acc = r == 0 ? widen(v, dt) : acc + widen(v, dt);
    }
    st_elem(rows, i, esize, narrow(acc, dt));
  }
  if (k->res_off != MDR_ARP_NO_RESIDUAL) mdr_ar_twin_residual(k, count);
  if (k->norm_weight) twin_norm(k, 0, count * esize / k->row_bytes);
  return MDR_OK;
}

/* The block counters of a region (block 0 is the twin's only block; the
 * others follow it as the kernel's block 0 advances the blocks it did not
 * launch). */
static mdr_arp_block *states_of(const mdr_ar_call *k) {
  return (mdr_arp_block *)(k->self + k->region_off + MDR_ARP_STATE_OFF);
}

mdr_status mdr_ar_twin_run(mdr_comm *c, const mdr_ar_call *k) {
  if (k->norm_weight && !mdr_arp_norm_fused(k)) {
    /* the unfused chain, as mdr_cuda_ar_launch runs it: the plain
     * all-reduce (its own signature), then the residual add and the norm,
     * none of it when the all-reduce gave up */
    const mdr_ar_call plain = mdr_arp_plain_of(k);
    const mdr_status st = mdr_ar_twin_run(c, &plain);
    if (st != MDR_OK) return st;
    const size_t rows = mdr_arp_rows_now(k);
    mdr_ar_twin_residual(k, rows * k->row_bytes / mdr_dtype_bytes((mdr_dtype)k->dtype));
    twin_norm(k, 0, rows);
    return MDR_OK;
  }
  const mdr_dtype dt = (mdr_dtype)k->dtype;
  const size_t esize = mdr_dtype_bytes(dt), bytes = mdr_arp_rows_now(k) * k->row_bytes;
  const size_t count = bytes / esize, nvec = (bytes + MDR_ARP_VEC - 1) / MDR_ARP_VEC;
  if (count == 0) return MDR_OK; /* an empty call: nothing moves, no counter advances */
  twin t = {.c = c, .k = k};
  mdr_arp_block *states = states_of(k);
  t.st.calls = __atomic_load_n(&states[0].calls, __ATOMIC_ACQUIRE);
  t.st.one_shot = __atomic_load_n(&states[0].one_shot, __ATOMIC_ACQUIRE);
  t.st.barriers = __atomic_load_n(&states[0].barriers, __ATOMIC_ACQUIRE);
  const int one = mdr_arp_runs_one_shot(k->algo, bytes, k->one_shot_max);
  t.sig = mdr_arp_signature(nvec, k->row_bytes, k->dtype, one, k->res_off != MDR_ARP_NO_RESIDUAL, k->count_ptr != NULL,
                            k->norm_weight != NULL);
  mdr_status st = one ? twin_one_shot(&t, count, nvec) : twin_two_shot(&t, count);
  if (st != MDR_OK) return st;
  mdr_arp_block next = t.st;
  mdr_arp_advance(&next, nvec, one);
  __atomic_store_n(&states[0].calls, next.calls, __ATOMIC_RELEASE);
  __atomic_store_n(&states[0].one_shot, next.one_shot, __ATOMIC_RELEASE);
  __atomic_store_n(&states[0].barriers, next.barriers, __ATOMIC_RELEASE);
  for (int b = 1; b < MDR_ARP_MAX_BLOCKS; b++) {
    __atomic_store_n(&states[b].calls, next.calls, __ATOMIC_RELEASE);
    __atomic_store_n(&states[b].one_shot, next.one_shot, __ATOMIC_RELEASE);
  }
  return MDR_OK;
}

void mdr_ar_twin_sum(const mdr_ar_call *k, int nranks, size_t lo, size_t hi) {
  const mdr_dtype dt = (mdr_dtype)k->dtype;
  const size_t esize = mdr_dtype_bytes(dt);
  for (size_t i = lo; i < hi; i++) {
    float acc = widen(ld_elem(k->peer[0] + k->buf_off, i, esize), dt);
    for (int r = 1; r < nranks; r++) acc += widen(ld_elem(k->peer[r] + k->buf_off, i, esize), dt);
    for (int r = 0; r < nranks; r++) st_elem(k->peer[r] + k->buf_off, i, esize, narrow(acc, dt));
  }
}

void mdr_ar_twin_norm(const mdr_ar_call *k, size_t rows) { twin_norm(k, 0, rows); }
