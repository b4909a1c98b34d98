/* ar_sequence.c — see ar_sequence.h. */
#define _POSIX_C_SOURCE 200809L
#include "ar_sequence.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "ar_norm_ref.h"
#include "rng.h"

static mdr_sizes sizes(size_t m, size_t row) {
  mdr_sizes s;
  memset(&s, 0, sizeof s);
  s.max_batch_tokens = m;
  s.logits_rows = m;
  s.bytes[MDR_BUF_TOKEN_IDS] = 256;
  s.bytes[MDR_BUF_LOGITS] = m * 4;
  s.bytes[AR_SEQ_BUF] = m * row;
  s.bytes[AR_SEQ_RES] = m * row;
  s.bytes[AR_SEQ_NORM] = m * row;
  s.bytes[AR_SEQ_WEIGHT] = row;
  s.bytes[AR_SEQ_WORD] = 256;
  return s;
}

mdr_status ar_team_init(ar_team *t, int n) { return ar_team_init_rows(t, n, AR_SEQ_M, AR_SEQ_ROW); }

mdr_status ar_team_init_rows(ar_team *t, int n, size_t m, size_t row) {
  memset(t, 0, sizeof *t);
  t->n = n;
  mdr_status st = MDR_OK;
  for (int i = 0; i < n && st == MDR_OK; i++) {
    st = mdr_backend_host_create(&t->b[i]);
    if (st == MDR_OK) st = mdr_backend_stream_create(t->b[i], &t->s[i]);
  }
  if (st == MDR_OK) st = mdr_comm_create_host(t->b, n, t->c);
  const mdr_sizes s = sizes(m, row);
  if (st == MDR_OK) st = mdr_arena_create_on_comms(t->c, n, &s, t->a);
  if (st != MDR_OK) ar_team_fini(t);
  return st;
}

void ar_team_fini(ar_team *t) {
  for (int i = 0; i < t->n; i++) mdr_arena_destroy(t->a[i]);
  for (int i = 0; i < t->n; i++) mdr_comm_destroy(t->c[i]);
  for (int i = 0; i < t->n; i++) {
    if (t->b[i]) mdr_backend_stream_destroy(t->b[i], t->s[i]);
    mdr_backend_destroy(t->b[i]);
  }
  memset(t, 0, sizeof *t);
}

mdr_status ar_team_state(ar_team *t, uint32_t e, uint32_t b) {
  const mdr_arp_block set = {.calls = e, .one_shot = e, .barriers = b};
  for (int i = 0; i < t->n; i++) {
    const mdr_status st = mdr_all_reduce_state(t->a[i], NULL, &set);
    if (st != MDR_OK) return st;
  }
  return MDR_OK;
}


typedef struct seq_rank {
  ar_team *t;
  int rank;
  size_t calls;
  uint64_t seed;
  size_t wrong;
  char first[256];
} seq_rank;

static const mdr_dtype k_dts[3] = {MDR_DTYPE_BF16, MDR_DTYPE_FP16, MDR_DTYPE_FP32};

/* Element i of rank r's input at call c: a small integer, so every sum is
 * exact in every dtype (at most 8 x 15 in magnitude). */
static int input_of(size_t c, int r, size_t i) { return (int)((c * 7 + (size_t)r * 13 + i * 3) % 31) - 15; }
static int residual_of(size_t c, size_t i) { return (int)((c + i) % 9) - 4; }

static uint32_t encode(int v, mdr_dtype dt) {
  const float f = (float)v;
  uint32_t u;
  memcpy(&u, &f, 4);
  if (dt == MDR_DTYPE_FP32) return u;
  if (dt == MDR_DTYPE_BF16) return u >> 16; /* exact: small integers */
  /* fp16 of a small integer, exact */
  if (v == 0) return 0;
  const uint32_t sign = v < 0 ? 0x8000u : 0, a = (uint32_t)(v < 0 ? -v : v);
  int e = 31 - __builtin_clz(a);
  return sign | (uint32_t)((e + 15) << 10) | ((a << (10 - e)) & 0x3ffu);
}

static void put(unsigned char *p, size_t i, mdr_dtype dt, uint32_t bits) {
  if (dt == MDR_DTYPE_FP32) {
    memcpy(p + 4 * i, &bits, 4);
  } else {
    const uint16_t h = (uint16_t)bits;
    memcpy(p + 2 * i, &h, 2);
  }
}

/* Every element of a row-major buffer of AR_SEQ_M rows of AR_SEQ_ROW bytes
 * set to `bits` (its dtype's poison, say). */
static void put_all(unsigned char *p, mdr_dtype dt, uint32_t bits) {
  if (dt == MDR_DTYPE_FP32)
    for (size_t i = 0; i < AR_SEQ_M * AR_SEQ_ROW / 4; i++) memcpy(p + 4 * i, &bits, 4);
  else
    for (size_t i = 0; i < AR_SEQ_M * AR_SEQ_ROW / 2; i++) {
      const uint16_t h = (uint16_t)bits;
      memcpy(p + 2 * i, &h, 2);
    }
}

static uint32_t get(const unsigned char *p, size_t i, mdr_dtype dt) {
  if (dt == MDR_DTYPE_FP32) {
    uint32_t u;
    memcpy(&u, p + 4 * i, 4);
    return u;
  }
  uint16_t h;
  memcpy(&h, p + 2 * i, 2);
  return h;
}

static void *seq_main(void *p) {
  seq_rank *sr = p;
  ar_team *t = sr->t;
  const int r = sr->rank, n = t->n;
  mdr_arena *a = t->a[r];
  mdr_backend *b = t->b[r];
  unsigned char in[AR_SEQ_M * AR_SEQ_ROW], res[AR_SEQ_M * AR_SEQ_ROW], got[AR_SEQ_M * AR_SEQ_ROW], gres[AR_SEQ_M * AR_SEQ_ROW];
  unsigned char nrm[AR_SEQ_M * AR_SEQ_ROW], gnrm[AR_SEQ_M * AR_SEQ_ROW], wgt[AR_SEQ_ROW];
  const mdr_dptr wptr = mdr_arena_ptr(a, AR_SEQ_WEIGHT);
  uint64_t rng = sr->seed; /* the same on every rank: lockstep */
  const mdr_dptr word = mdr_arena_ptr(a, AR_SEQ_WORD);
  for (size_t c = 0; c < sr->calls; c++) {
    const mdr_dtype dt = k_dts[tb_rng_range(&rng, 0, 2)];
    const size_t es = dt == MDR_DTYPE_FP32 ? 4 : 2, per_row = AR_SEQ_ROW / es;
    const int kind = (int)tb_rng_range(&rng, 0, 9);
    size_t tokens = tb_rng_range(&rng, 0, AR_SEQ_M);
    const int with_res = (int)tb_rng_range(&rng, 0, 1);
    const int with_norm = with_res && dt != MDR_DTYPE_FP32 && tb_rng_range(&rng, 0, 1);
    mdr_all_reduce_desc d = mdr_all_reduce_desc_make(AR_SEQ_BUF, dt, tokens);
    uint32_t count = 0;
    size_t rows = tokens; /* rows summed */
    switch (kind) {
      case 0: case 1: case 2: d.algo = MDR_ALL_REDUCE_ONE_SHOT; break;
      case 3: case 4: d.algo = MDR_ALL_REDUCE_TWO_SHOT; break;
      case 5: case 6: /* counted AUTO: a count word between 0 and beyond the bound */
        d.tokens = tokens ? tokens : 1;
        count = (uint32_t)tb_rng_range(&rng, 0, AR_SEQ_M);
        d.count_ptr = word;
        rows = count < d.tokens ? count : d.tokens;
        break;
      case 7: d.algo = MDR_ALL_REDUCE_NCCL; break;
      default: d.tokens = rows = 0; break; /* an empty call */
    }
    const size_t elems = AR_SEQ_M * per_row, live = rows * per_row;
    for (size_t i = 0; i < elems; i++) {
      put(in, i, dt, i < live ? encode(input_of(c, r, i), dt) : (dt == MDR_DTYPE_FP32 ? 0x7F80BEEFu : 0x7DEDu));
      put(res, i, dt, encode(residual_of(c, i), dt));
    }
    /* NCCL's twin sums the whole bound: its rows past the count are inputs too */
    if (d.algo == MDR_ALL_REDUCE_NCCL)
      for (size_t i = live; i < d.tokens * per_row; i++) put(in, i, dt, encode(input_of(c, r, i), dt));
    /* the norm's output poisoned (rows past the count must keep it); this
     * rank's own weight (small powers of two and their negatives) */
    put_all(nrm, dt, dt == MDR_DTYPE_FP32 ? 0x7F80BEEFu : 0x7DEDu);
    for (size_t i = 0; i < per_row; i++) {
      const int neg = (int)((c + (size_t)r + i) % 5) == 0;
      const float wf = (neg ? -1.0f : 1.0f) * (0.25f + (float)((c * 5 + (size_t)r * 11 + i * 7) % 97) / 37.0f);
      put(wgt, i, dt, nref_round(dt == MDR_DTYPE_BF16 ? 0 : 1, wf));
    }
    if (mdr_backend_copy_h2d(b, mdr_arena_ptr(a, AR_SEQ_NORM), nrm, AR_SEQ_M * AR_SEQ_ROW) != MDR_OK ||
        (dt != MDR_DTYPE_FP32 && mdr_backend_copy_h2d(b, wptr, wgt, per_row * es) != MDR_OK) ||
        mdr_backend_copy_h2d(b, mdr_arena_ptr(a, AR_SEQ_BUF), in, AR_SEQ_M * AR_SEQ_ROW) != MDR_OK ||
        mdr_backend_copy_h2d(b, mdr_arena_ptr(a, AR_SEQ_RES), res, AR_SEQ_M * AR_SEQ_ROW) != MDR_OK ||
        mdr_backend_copy_h2d(b, word, &count, 4) != MDR_OK) {
      snprintf(sr->first, sizeof sr->first, "rank %d: staging call %zu failed", r, c);
      sr->wrong++;
      return NULL;
    }
    if (with_res) d.residual = AR_SEQ_RES;
    const float eps = (float)(c % 3) * 0x1p-10f;
    if (with_norm) {
      d.norm_output = AR_SEQ_NORM;
      d.norm_weight = wptr;
      d.norm_eps = eps;
    }
    const mdr_status st = mdr_all_reduce(a, &d, t->s[r]);
    if (st != MDR_OK) {
      snprintf(sr->first, sizeof sr->first, "rank %d, call %zu: %s: %s", r, c, mdr_status_string(st),
               mdr_backend_last_error(b));
      sr->wrong++;
      return NULL;
    }
    mdr_backend_copy_d2h(b, got, mdr_arena_ptr(a, AR_SEQ_BUF), AR_SEQ_M * AR_SEQ_ROW);
    mdr_backend_copy_d2h(b, gres, mdr_arena_ptr(a, AR_SEQ_RES), AR_SEQ_M * AR_SEQ_ROW);
    mdr_backend_copy_d2h(b, gnrm, mdr_arena_ptr(a, AR_SEQ_NORM), AR_SEQ_M * AR_SEQ_ROW);
    /* the norm's rows from the contract (tests/ar_norm_ref.h), on the
     * expected residual */
    unsigned char want_nrm[AR_SEQ_M * AR_SEQ_ROW];
    memcpy(want_nrm, nrm, sizeof want_nrm);
    if (with_norm)
      for (size_t row = 0; row < rows; row++) {
        uint32_t rb[AR_SEQ_ROW / 2], wb[AR_SEQ_ROW / 2], ob[AR_SEQ_ROW / 2];
        for (size_t e = 0; e < per_row; e++) {
          const size_t i = row * per_row + e;
          int sum = 0;
          for (int q = 0; q < n; q++) sum += input_of(c, q, i);
          rb[e] = encode(residual_of(c, i) + sum, dt);
          wb[e] = get(wgt, e, dt);
        }
        nref_row(dt == MDR_DTYPE_BF16 ? 0 : 1, rb, wb, per_row, eps, ob);
        for (size_t e = 0; e < per_row; e++) put(want_nrm, row * per_row + e, dt, ob[e]);
      }
    const size_t summed = d.algo == MDR_ALL_REDUCE_NCCL ? d.tokens * per_row : live;
    for (size_t i = 0; i < elems; i++) {
      int sum = 0;
      for (int q = 0; q < n; q++) sum += input_of(c, q, i);
      const uint32_t want = i < summed ? encode(sum, dt) : get(in, i, dt);
      const uint32_t want_res =
          with_res && i < live ? encode(residual_of(c, i) + sum, dt) : encode(residual_of(c, i), dt);
      if (get(got, i, dt) != want || get(gres, i, dt) != want_res || get(gnrm, i, dt) != get(want_nrm, i, dt)) {
        if (!sr->wrong)
          snprintf(sr->first, sizeof sr->first,
                   "rank %d, call %zu (kind %d, %zu rows, dtype %d, norm %d): element %zu is 0x%x (residual 0x%x, "
                   "norm 0x%x), want 0x%x (0x%x, 0x%x)",
                   r, c, kind, rows, (int)dt, with_norm, i, get(got, i, dt), get(gres, i, dt), get(gnrm, i, dt), want,
                   want_res, get(want_nrm, i, dt));
        sr->wrong++;
      }
    }
  }
  return NULL;
}


size_t ar_sequence_run(ar_team *t, size_t calls, uint64_t seed, char *first, size_t first_len) {
  seq_rank sr[AR_SEQ_MAXR];
  pthread_t th[AR_SEQ_MAXR];
  int started = 0;
  for (int i = 0; i < t->n; i++) {
    sr[i] = (seq_rank){.t = t, .rank = i, .calls = calls, .seed = seed};
    if (pthread_create(&th[i], NULL, seq_main, &sr[i]) != 0) break;
    started++;
  }
  size_t wrong = started == t->n ? 0 : 1;
  if (started != t->n) {
    snprintf(first, first_len, "could not start rank %d's thread", started);
    mdr_comm_abort(t->c[0]); /* the started ranks must not wait for it */
  }
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  first[0] = started == t->n ? '\0' : first[0];
  for (int i = 0; i < started; i++) {
    if (sr[i].wrong && !wrong) snprintf(first, first_len, "%s", sr[i].first);
    wrong += sr[i].wrong;
  }
  return wrong;
}
